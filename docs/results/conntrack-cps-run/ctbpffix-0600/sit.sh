#!/bin/bash
# One sitting, inside the exclusive benchmark lock (flock -x /work/wt/quiet.lock bash sit.sh):
# main's daemon (base), this branch's daemon with set-up in the BPF program on (bpf:
# NICFLOW_CT_SETUP_BPF=1) and the same daemon with it off (off: the daemon's set-up, as main),
# alternating, same bench binary (main's), firewall scenario, rounds $ROUNDS (default 1 2).
# Branch ctbpffix (review fixes + poll fix); base = main 0a1b55b.
# Stops starting runs at $STOP (HHMM UTC).
BENCH=/tmp/ctbpffix/base-nicflow-bench; OUT=${OUT:-/tmp/ctbpffix/sit}; STOP=${STOP:-0030}
mkdir -p $OUT
for i in ${ROUNDS:-1 2}; do
  for t in base bpf off; do
    case $t in
      base) B=/tmp/ctbpffix/base-nicflow; E=;;
      bpf) B=/tmp/ctbpffix/new-nicflow; E=NICFLOW_CT_SETUP_BPF=1;;
      off) B=/tmp/ctbpffix/new-nicflow; E=NICFLOW_CT_SETUP_BPF=0;;
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
