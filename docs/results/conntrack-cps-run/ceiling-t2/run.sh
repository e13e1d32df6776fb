#!/bin/sh
# Issue 36's ceiling with two wrk threads: firewall cps, nicflow (defaults), nicflow-noct (no ct at all),
# nftables, OVS userspace; 3 interleaved repetitions of 5 s.
O=/tmp/lead-ceil/out
date -u +"start %T"; cat /proc/loadavg
NICFLOW_BIN=/tmp/lead-ceil/nicflow /tmp/lead-ceil/nicflow-bench conntrack --scenario firewall \
  --engines nicflow,nicflow-noct,linux-bridge-nft,ovs --modes cps --reps 3 --seconds 5 --wrk-threads 2 --out $O/fw
date -u +"end %T"; cat /proc/loadavg
