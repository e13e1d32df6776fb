#!/bin/bash
# The re-measurement after the wake-up fix, one exclusive hold (flock -x /work/wt/quiet.lock bash sit2.sh):
# off = main's daemon (c0f202c) with NICFLOW_CT_SETUP_BPF=0 (main's default), on = main's daemon with =1,
# fix = this branch's daemon (ring wake-up at an eighth, 2-ms sleep cap) with =1; alternating
# off, on, fix per round, same bench binary (main's), firewall cps, nftables in the same run.
BENCH=/tmp/ctpoll/base-nicflow-bench; OUT=${OUT:-/tmp/ctpoll/sit2}; STOP=${STOP:-0245}
mkdir -p $OUT
for i in ${ROUNDS:-1 2 3}; do
  for t in ${KINDS:-off on fix}; do
    case $t in
      off) B=/tmp/ctpoll/base-nicflow; E=NICFLOW_CT_SETUP_BPF=0;;
      on) B=/tmp/ctpoll/base-nicflow; E=NICFLOW_CT_SETUP_BPF=1;;
      fix) B=/tmp/ctpoll/new-nicflow; E=NICFLOW_CT_SETUP_BPF=1;;
      fixoff) B=/tmp/ctpoll/new-nicflow; E=NICFLOW_CT_SETUP_BPF=0;;
    esac
    if [ "$(date -u +%H%M)" -ge $STOP ]; then echo "== $(date -u +%T) deadline: stop"; exit 0; fi
    for w in $(seq 1 12); do pgrep -x rustc >/dev/null || break; echo "   $(date -u +%T) rustc running outside the lock, waiting"; sleep 5; done
    echo "== $(date -u +%T) firewall $t $i load $(cat /proc/loadavg)"
    env $E NICFLOW_BIN=$B $BENCH conntrack --scenario firewall --engines nicflow,linux-bridge-nft \
        --modes cps --reps 3 --seconds 5 --out $OUT/firewall-$t-$i 2>&1 | grep '^\[conntrack\]'
    grep -h 'conntrack in kernel\|engines:' $OUT/firewall-$t-$i/report.md
  done
done
echo "== $(date -u +%T) end load $(cat /proc/loadavg)"
