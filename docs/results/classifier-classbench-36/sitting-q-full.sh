#!/bin/bash
# Sitting Q full sitting: main 13f6970's nicflow-bench (base) and branch clsrule's (new), alternating;
# run the whole script under one `flock -x /work/wt/quiet.lock`.
cd /work/wt/clsrule
OUT=docs/results/classifier-classbench-36
for run in "q1 base" "q1 new" "q2 new" "q2 base"; do
  set -- $run
  { date -u; uptime; NICFLOW_CLASSBENCH=docs/results/classifier-classbench-36/rules NICFLOW_CLASSBENCH_TRACES=/tmp/cbgen \
    NICFLOW_CLASSBENCH_REFERENCE=/tmp/tuplemerge/main NICFLOW_CLASSBENCH_MODES=native \
    /tmp/clsrule/$2-nicflow-bench classifier --reps 3 --quick --out $OUT/sitting-$1-$2.md; date -u; uptime; } > $OUT/sitting-$1-$2.log 2>&1
done
