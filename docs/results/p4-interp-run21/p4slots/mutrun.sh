#!/bin/bash
# p4slots: each mutation switch (P4MUT, a temporary build) against the tests that should catch it
cd /work/wt/p4slots
for m in none noreset nonote pktswap namedskip sevsteps sevbit nochainbad; do
  echo "=== P4MUT=$m"
  for t in interp_vars interp_scalar interp_differential interp_fuzz interp_flat interp_lang interp_tables interp_alloc; do
    r=$(P4MUT=$m cargo test --release -p nicflow-p4 --test $t 2>&1 | grep -E '^test result|^test .* FAILED' | tr '\n' ' ')
    echo "$t: $r"
  done
done
