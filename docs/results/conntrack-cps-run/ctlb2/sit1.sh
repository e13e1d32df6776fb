#!/bin/bash
# Sitting 1 (ctlb2): main's binaries (13f6970, copied to /tmp/ctlb2/base-*), lb and firewall cps,
# nicflow and nftables in the same run, 3 rounds alternating lb, firewall. One exclusive hold:
#   flock -x /work/wt/quiet.lock bash sit1.sh
# WT: optional wrk threads (for a bench that has --wrk-threads); B: daemon; BENCH: bench binary.
B=${B:-/tmp/ctlb2/base-nicflow}; BENCH=${BENCH:-/tmp/ctlb2/base-nicflow-bench}
OUT=${OUT:-/tmp/ctlb2/sit1}; STOP=${STOP:-0538}; TAG=${TAG:-base}
mkdir -p $OUT
for i in ${ROUNDS:-1 2 3}; do
  for s in ${SCEN:-lb firewall}; do
    for t in ${KINDS:-$TAG}; do
      case $t in
        base) BB=/tmp/ctlb2/base-nicflow; X="";;
        base2) BB=/tmp/ctlb2/base-nicflow; X="--wrk-threads 2";;
        new) BB=/tmp/ctlb2/new-nicflow; X="";;
        new2) BB=/tmp/ctlb2/new-nicflow; X="--wrk-threads 2";;
        *) BB=$B; X="";;
      esac
      if [ "$(date -u +%H%M)" -ge $STOP ]; then echo "== $(date -u +%T) deadline: stop"; exit 0; fi
      for w in $(seq 1 12); do pgrep -x rustc >/dev/null || break; echo "   $(date -u +%T) rustc running outside the lock, waiting"; sleep 5; done
      echo "== $(date -u +%T) $s $t $i load $(cat /proc/loadavg)"
      NICFLOW_BIN=$BB $BENCH conntrack --scenario $s --engines nicflow,linux-bridge-nft \
          --modes cps --reps 3 --seconds 5 $X --out $OUT/$s-$t-$i 2>&1 | grep '^\[conntrack\]'
      grep -h '^| 32 |' $OUT/$s-$t-$i/report.md | head -2
    done
  done
done
echo "== $(date -u +%T) end load $(cat /proc/loadavg)"
