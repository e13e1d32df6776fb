#!/bin/bash
# Sitting 4 (ctlb2, if the lock comes before 05:36): firewall, -t2, main's daemon with set-up in the BPF
# program off (=0, main's default) and on (=1), nicflow and nftables in the same run.
OUT=/tmp/ctlb2/sit4; mkdir -p $OUT
for i in 1; do for t in off on; do
  if [ "$(date -u +%H%M)" -ge 0536 ]; then echo "== $(date -u +%T) deadline: stop"; exit 0; fi
  E=NICFLOW_CT_SETUP_BPF=0; [ $t = on ] && E=NICFLOW_CT_SETUP_BPF=1
  echo "== $(date -u +%T) firewall $t $i load $(cat /proc/loadavg)"
  env $E NICFLOW_BIN=/tmp/ctlb2/base-nicflow /tmp/ctlb2/new-nicflow-bench conntrack --scenario firewall \
    --engines nicflow,linux-bridge-nft --modes cps --reps 3 --seconds 5 --wrk-threads 2 --out $OUT/firewall-$t-$i 2>&1 | grep '^\[conntrack\]'
  grep -h '^| 32 |\|conntrack in kernel' $OUT/firewall-$t-$i/report.md | head -3
done; done
echo "== $(date -u +%T) end"
