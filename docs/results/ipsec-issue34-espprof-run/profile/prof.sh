#!/bin/bash
# usage: prof.sh LABEL NICFLOW_BIN ; a 14-s 4-stream nicflow-ipsec phase, then a system-wide
# call-graph profile (perf record -a, DWARF unwinding so Rust frames without frame pointers
# unwind) for 8 s of it: both daemons, iperf3, softirq/ksoftirqd, the kernel. Run under
# flock -x /work/wt/quiet.lock.
L=$1; BIN=$2; D=/tmp/espprof/prof/$L; rm -rf $D; mkdir -p $D
NICFLOW_BIN=$BIN /tmp/espprof/bench-base ipsec --engines nicflow-ipsec --streams 4 --reps 1 --seconds 14 --out $D/run > $D/bench.log 2>&1 &
BP=$!
for i in $(seq 1 300); do
  if pgrep -x iperf3 -a | grep -q -- ' -c '; then break; fi; sleep 0.2; done
sleep 2
PIDS=$(pgrep -f "^$BIN " | paste -sd, -)
echo "daemons: $PIDS" > $D/pids.txt; ps -o pid,args -p ${PIDS} >> $D/pids.txt
perf record -a -F 299 --call-graph dwarf,16384 -o $D/perf.data -- sleep 8 > $D/perf.log 2>&1
wait $BP
perf report -i $D/perf.data --no-children --sort comm,pid,dso,sym -g none --stdio 2>/dev/null | grep -v "^#" | grep "%" | head -150 > $D/flat.txt
perf report -i $D/perf.data --no-children --sort pid,sym -g caller,0.5,callee --stdio 2>/dev/null > $D/graph.txt
perf report -i $D/perf.data --no-children --sort comm,pid --stdio -g none 2>/dev/null | grep -v "^#" | grep "%" > $D/bycomm.txt
echo done
