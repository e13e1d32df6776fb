#!/bin/sh
# Experiment: the daemon's veth ports get NAPI (GRO on) in a kernel thread (threaded NAPI),
# set 1 s after the daemon starts (its port set-up may touch features). Then exec main's daemon.
case " $* " in
  *" daemon "*)
    (sleep 1; for i in vc1 vs1 u1 u2; do
       if [ -e /sys/class/net/$i ]; then ethtool -K $i gro on rx-udp-gro-forwarding on >/dev/null 2>&1; echo 1 > /sys/class/net/$i/threaded 2>/dev/null; echo "$i gro $(ethtool -k $i | grep -E "generic-receive-offload|rx-udp-gro-forwarding" | paste -sd" ") threaded $(cat /sys/class/net/$i/threaded)" >> /tmp/espidle/napi-wrap.log; fi
     done) &
    ;;
esac
exec /tmp/espidle/base "$@"
