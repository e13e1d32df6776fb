#!/bin/bash
# One sitting, inside the exclusive benchmark lock (flock -x /work/wt/quiet.lock bash sit.sh):
# main's daemon at c0f202c (poll fix merged) with set-up in the BPF program off (off:
# NICFLOW_CT_SETUP_BPF=0, the daemon's set-up, main's default) and on (on: =1), alternating
# off, on per round, same bench binary (main's), firewall scenario, nftables in the same run,
# rounds $ROUNDS (default 1 2 3). Stops starting runs at $STOP (HHMM UTC).
BIN=${BIN:-/tmp/ctpoll/base-nicflow}; BENCH=/tmp/ctpoll/base-nicflow-bench
OUT=${OUT:-/tmp/ctpoll/sit}; STOP=${STOP:-0245}
mkdir -p $OUT
for i in ${ROUNDS:-1 2 3}; do
  for t in off on; do
    case $t in
      off) E=NICFLOW_CT_SETUP_BPF=0;;
      on) E=NICFLOW_CT_SETUP_BPF=1;;
    esac
    if [ "$(date -u +%H%M)" -ge $STOP ]; then echo "== $(date -u +%T) deadline: stop"; exit 0; fi
    for w in $(seq 1 12); do pgrep -x rustc >/dev/null || break; echo "   $(date -u +%T) rustc running outside the lock, waiting"; sleep 5; done
    echo "== $(date -u +%T) firewall $t $i load $(cat /proc/loadavg)"
    env $E NICFLOW_BIN=$BIN $BENCH conntrack --scenario firewall --engines nicflow,linux-bridge-nft \
        --modes cps --reps 3 --seconds 5 --out $OUT/firewall-$t-$i 2>&1 | grep '^\[conntrack\]'
    grep -h 'conntrack in kernel\|engines:' $OUT/firewall-$t-$i/report.md
  done
done
echo "== $(date -u +%T) end load $(cat /proc/loadavg)"
