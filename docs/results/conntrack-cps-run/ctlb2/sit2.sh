#!/bin/bash
# Sitting 2 (ctlb2): -t1 against -t2 (the bench's new --wrk-threads), main's daemon (13f6970) for both,
# this branch's bench binary (main's bench + --wrk-threads), lb and firewall cps, nicflow and nftables in
# each run, rounds alternating t1, t2. One exclusive hold: flock -x /work/wt/quiet.lock bash sit2.sh
OUT=${OUT:-/tmp/ctlb2/sit2} BENCH=/tmp/ctlb2/new-nicflow-bench KINDS="${KINDS:-base base2}" ROUNDS="${ROUNDS:-1 2}" \
  bash /tmp/ctlb2/sit1.sh
