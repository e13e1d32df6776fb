#!/bin/bash
# Sitting 3 (ctlb2): main's daemon (base) against this branch's (new: the tick's frozen-walk sweep only when
# new, expire in one slab pass), the same bench binary (this branch's; -t1 as main), lb and firewall cps,
# nicflow and nftables in each run, alternating base, new.
OUT=${OUT:-/tmp/ctlb2/sit3} BENCH=/tmp/ctlb2/new-nicflow-bench KINDS="${KINDS:-base new}" ROUNDS="${ROUNDS:-1 2 3}" \
  bash /tmp/ctlb2/sit1.sh
