#!/bin/bash
# Sitting P full sitting: main c0f202c's nicflow-bench (base) and branch clsloop's (new), alternating;
# run the whole script under one `flock -x /work/wt/quiet.lock`.
cd /work/wt/clsloop
OUT=docs/results/classifier-classbench-36
for run in "p1 base" "p1 new" "p2 new" "p2 base"; do
  set -- $run
  { date -u; uptime; NICFLOW_CLASSBENCH=docs/results/classifier-classbench-36/rules NICFLOW_CLASSBENCH_TRACES=/tmp/cbgen \
    NICFLOW_CLASSBENCH_REFERENCE=/tmp/tuplemerge/main NICFLOW_CLASSBENCH_MODES=native \
    /tmp/clsloop/$2-nicflow-bench classifier --reps 3 --quick --out $OUT/sitting-$1-$2.md; date -u; uptime; } > $OUT/sitting-$1-$2.log 2>&1
done
