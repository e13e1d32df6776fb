#!/bin/bash
# One OVS-alone lb run with the sequence check off (by hand, through ovs-seqchk.sh).
B=/tmp/ctdel/base; BENCH=/tmp/ctdel/bench
out=/tmp/ctdel/ovs/$1; mkdir -p $out; touch $out/mark; sleep 1
/tmp/ctdel/ovs-seqchk.sh $out $out/mark & w=$!
echo "start $(date +%T) load $(cat /proc/loadavg)" > $out/run.log
NICFLOW_BIN=$B $BENCH conntrack --scenario lb --engines ovs --modes cps --reps 3 --seconds 5 --out $out/report >> $out/run.log 2>&1
echo "end $(date +%T) rc=$?" >> $out/run.log
kill $w 2>/dev/null
