#!/bin/bash
# base, new, base, new: the new bench binary drives both; NICFLOW_BIN picks the daemons.
cd /tmp/esploss
uptime
for i in 1 2; do
  for v in base new; do
    d=basebin; [ $v = new ] && d=newbin
    echo "== $v rep $i $(date -u +%T)"
    NICFLOW_BIN=/tmp/esploss/$d/nicflow /tmp/esploss/newbin/nicflow bench ipsec --mode pps --engines nicflow-ipsec --flows 1,16 --reps 1 --seconds 5 --out /tmp/esploss/ab-$v-$i 2>&1 | grep "^\[ipsec pps\] nicflow-ipsec"
  done
done
uptime; date -u
