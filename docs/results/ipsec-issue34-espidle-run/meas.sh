#!/bin/bash
# usage: meas.sh LABEL NICFLOW_BIN ; a 16-s 4-stream nicflow-ipsec phase; during it:
# /proc sched counters of the daemons over 4 s, perf trace -s (syscall counts/times) 4 s,
# perf sched record -a 2 s. Run under flock -x /work/wt/quiet.lock.
L=$1; BIN=$2; D=/tmp/espidle/m/$L; rm -rf $D; mkdir -p $D
NICFLOW_BIN=$BIN ${BENCH:-/tmp/espidle/bench-base} ipsec --engines nicflow-ipsec --streams 4 --reps 1 --seconds 16 --out $D/run > $D/bench.log 2>&1 &
BP=$!
for i in $(seq 1 300); do
  if pgrep -x iperf3 -a | grep -q -- ' -c '; then break; fi; sleep 0.2; done
sleep 2
PIDS=$(pgrep -f "^$BIN " | paste -sd, -)
IPIDS=$(pgrep -x iperf3 | paste -sd, -)
echo "daemons: $PIDS iperf3: $IPIDS" > $D/pids.txt; ps -o pid,args -p ${PIDS},${IPIDS} >> $D/pids.txt
snap() { for p in ${PIDS//,/ } ${IPIDS//,/ }; do echo "$p $(cat /proc/$p/schedstat) $(grep -E '^(voluntary|nonvoluntary)_ctxt' /proc/$p/status | awk '{print $2}' | paste -sd' ')"; done; head -1 /proc/stat; }
snap > $D/snap0.txt
sleep 4
snap > $D/snap1.txt
perf trace -s -p $PIDS -o $D/trace.txt -- sleep 4 > /dev/null 2>&1
perf sched record -a -o $D/sched.data -- sleep 2 > $D/sched.log 2>&1
wait $BP
perf sched latency -i $D/sched.data --sort max 2>/dev/null | head -40 > $D/latency.txt
perf sched timehist -i $D/sched.data -s 2>/dev/null | tail -60 > $D/timehist-summary.txt
perf sched timehist -i $D/sched.data -w 2>/dev/null > $D/timehist.txt
echo done
