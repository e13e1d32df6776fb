#!/bin/bash
# usage: prof.sh LABEL NICFLOW_BIN ; runs a 14-s 1-stream nicflow-ipsec burst, perf on both
# daemons for 8 s (as ipsec-issue34-espcopy-run/profile/prof.sh, without the call graph:
# flat profile only). Run under flock -x /work/wt/quiet.lock.
L=$1; BIN=$2; D=/tmp/espsum/prof/$L; rm -rf $D; mkdir -p $D
NICFLOW_BIN=$BIN /tmp/espsum/bench-new ipsec --engines nicflow-ipsec --streams 1 --reps 1 --seconds 14 --out $D/run > $D/bench.log 2>&1 &
BP=$!
for i in $(seq 1 300); do
  if pgrep -x iperf3 -a | grep -q -- ' -c '; then break; fi; sleep 0.2; done
sleep 2
PIDS=$(pgrep -f "^$BIN " | paste -sd, -)
echo "daemons: $PIDS" > $D/pids.txt; ps -o pid,args -p ${PIDS} >> $D/pids.txt
perf record -F 499 -p $PIDS -o $D/perf.data -- sleep 8 > $D/perf.log 2>&1
wait $BP
perf report -i $D/perf.data --no-children --sort pid,sym --stdio 2>/dev/null | grep -v "^#" | grep "%" | head -80 > $D/flat.txt
echo done
