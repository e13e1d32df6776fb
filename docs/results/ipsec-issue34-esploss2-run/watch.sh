#!/bin/bash
# Per-0.5-s observation of the ipsec pps lab while a burst runs. Output: /tmp/esploss2/watch.log
out=/tmp/esploss2/watch.log; : > $out
for i in $(seq 1 120); do
  labdir=$(ls -d /tmp/nfbip* 2>/dev/null | head -1)
  nss=$(ip netns list | awk '/nfbip/{print $1}')
  if [ -n "$nss" ]; then
    echo "=== $(date -u +%T.%N)" >> $out
    for ns in $nss; do
      case $ns in *h2*|*s1*)
        echo "--- $ns ip -s link" >> $out; ip netns exec $ns ip -s -s link >> $out 2>&1
        echo "--- $ns ss -0 -m" >> $out; ip netns exec $ns ss -0 -m -n -p >> $out 2>&1
        echo "--- $ns ss --xdp -e -m" >> $out; ip netns exec $ns ss --xdp -e -m -n -p >> $out 2>&1
        ;; esac
      case $ns in *s1*) echo "--- $ns ethtool -S eth0" >> $out; ip netns exec $ns ethtool -S eth0 >> $out 2>&1;; esac
      case $ns in *h2*) echo "--- $ns ethtool -S vs1" >> $out; ip netns exec $ns ethtool -S vs1 >> $out 2>&1
         [ -S "$labdir/h2.sock" ] && { echo "--- h2 stats" >> $out; ip netns exec $ns /tmp/esploss2/base --socket $labdir/h2.sock stats >> $out 2>&1; } ;; esac
    done
  fi
  sleep 0.5
done
