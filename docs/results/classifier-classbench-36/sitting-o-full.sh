#!/bin/bash
# Full classifier sitting O: main ad67c6d's bench (base) and branch clshash's (new), alternating.
cd /work/wt/clshash
OUT=docs/results/classifier-classbench-36
for run in "o1 base" "o1 new" "o2 new" "o2 base"; do
  set -- $run
  { date; uptime; NICFLOW_CLASSBENCH=docs/results/classifier-classbench-36/rules NICFLOW_CLASSBENCH_TRACES=/tmp/cbgen \
    NICFLOW_CLASSBENCH_REFERENCE=/tmp/tuplemerge/main NICFLOW_CLASSBENCH_MODES=native \
    /tmp/clshash/bench-$2 classifier --reps 3 --quick --out $OUT/sitting-$1-$2.md; date; } > $OUT/sitting-$1-$2.log 2>&1
done
