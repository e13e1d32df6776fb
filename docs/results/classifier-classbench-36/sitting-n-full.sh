#!/bin/bash
# Full classifier sitting: main e9ccb7d's bench (base) and main with cls5 (new), alternating.
cd /work/main
OUT=docs/results/classifier-classbench-36
for run in "n1 base" "n1 new" "n2 new" "n2 base"; do
  set -- $run
  { date; uptime; NICFLOW_CLASSBENCH=docs/results/classifier-classbench-36/rules NICFLOW_CLASSBENCH_TRACES=/tmp/cbgen \
    NICFLOW_CLASSBENCH_REFERENCE=/tmp/tuplemerge/main NICFLOW_CLASSBENCH_MODES=native \
    /tmp/lead/bench-$2 classifier --reps 3 --quick --out $OUT/sitting-$1-$2.md; date; } > $OUT/sitting-$1-$2.log 2>&1
done
