#!/bin/bash
# usage: prof.sh LABEL NICFLOW_BIN ; a 14-s 4-stream nicflow-ipsec phase and a system-wide
# flat profile (perf record -a -g, frame pointers: enough for the kernel's own stacks) for
# 8 s of it. Run under flock -x /work/wt/quiet.lock.
L=$1; BIN=$2; D=/tmp/esptx/prof/$L; rm -rf $D; mkdir -p $D
NICFLOW_BIN=$BIN /tmp/esptx/bench-new ipsec --engines nicflow-ipsec --streams 4 --reps 1 --seconds 14 --out $D/run > $D/bench.log 2>&1 &
BP=$!
for i in $(seq 1 300); do
  if pgrep -x iperf3 -a | grep -q -- ' -c '; then break; fi; sleep 0.2; done
sleep 2
perf record -a -F 299 -g -o $D/perf.data -- sleep 8 > $D/perf.log 2>&1
wait $BP
perf report -i $D/perf.data --no-children --sort comm,pid,dso,sym -g none --stdio 2>/dev/null | grep -v "^#" | grep "%" | head -120 > $D/flat.txt
perf report -i $D/perf.data --no-children --sort sym -g caller,0.5,callee --stdio 2>/dev/null | head -400 > $D/graph.txt
grep -E "Gbit/s" $D/bench.log | tail -3
echo done
