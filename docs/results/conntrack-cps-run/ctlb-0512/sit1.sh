#!/bin/bash
cd /tmp/ctlb
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
( ./ovsmon2.sh > ovsmon3.txt 2>&1 & echo $! > ovsmon.pid )
NICFLOW_BIN=/tmp/ctlb/b/nicflow /tmp/ctlb/n/nicflow-bench conntrack --scenario lb --engines nicflow,linux-bridge-nft,ovs --modes cps --reps 3 --seconds 5 --client-addrs 5 --out /tmp/ctlb/ovs5 > ovs5.log 2>&1
kill $(cat ovsmon.pid)
echo "ovs5 done $(date -u +%T)"
( ./perfmon.sh /tmp/ctlb/b/nicflow /tmp/ctlb/perf-main > perfmon.log 2>&1 & )
NICFLOW_BIN=/tmp/ctlb/b/nicflow /tmp/ctlb/n/nicflow-bench conntrack --scenario lb --engines nicflow --modes cps --reps 1 --seconds 12 --out /tmp/ctlb/perfrun > perfrun.log 2>&1
echo "end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
