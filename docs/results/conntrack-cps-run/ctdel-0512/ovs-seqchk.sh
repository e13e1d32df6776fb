#!/bin/bash
# Sets `dpctl/ct-disable-tcp-seq-chk` in the bench's private ovs-vswitchd as soon as its
# control socket appears, then watches OVS's conntrack and the client's SYN retransmissions.
# $1: output dir; $2: marker file (sockets newer than it are this run's)
out=$1; mark=$2
set_done=""
for i in $(seq 1 400); do
  ctl=$(find /tmp /run -name vswitchd.ctl -newer $mark 2>/dev/null | head -1)
  if [ -n "$ctl" ] && [ -z "$set_done" ]; then
    echo "== $(date +%T.%N) ctl=$ctl set: $(ovs-appctl -t $ctl dpctl/ct-disable-tcp-seq-chk 2>&1) get: $(ovs-appctl -t $ctl dpctl/ct-get-tcp-seq-chk 2>&1)" >> $out/seqchk.txt
    set_done=1
  fi
  if [ -n "$ctl" ] && [ -S "$ctl" ] && [ $((i % 8)) -eq 0 ]; then
    cns=$(ip netns list | awk '{print $1}' | grep '^nf-ctk.*c1$' | head -1)
    { echo "== $(date +%T) seqchk=$(ovs-appctl -t $ctl dpctl/ct-get-tcp-seq-chk 2>&1)"
      ovs-appctl -t $ctl coverage/show 2>&1 | grep -iE 'drop|conntrack' | tr -s ' ' | tr '\n' ';'; echo
      echo "entries=$(ovs-appctl -t $ctl dpctl/dump-conntrack 2>&1 | grep -c tcp)"
      [ -n "$cns" ] && ip netns exec $cns nstat -az TcpExtTCPSynRetrans TcpActiveOpens 2>&1 | tail -2 | tr -s ' ' | tr '\n' ';'; echo
    } >> $out/watch.txt
  fi
  if [ -n "$set_done" ] && ! pgrep -x ovs-vswitchd >/dev/null; then break; fi
  sleep 0.25
done
