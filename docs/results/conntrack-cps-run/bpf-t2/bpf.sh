#!/bin/bash
# Set-up in the BPF program with two wrk threads: firewall, main's daemon (e567916) with
# NICFLOW_CT_SETUP_BPF=0 (default) and =1 alternating, 3 pairs, nicflow and nftables in each run.
OUT=/tmp/lead-ceil/bpf; mkdir -p $OUT
for i in 1 2 3; do for t in off on; do
  if [ "$(date -u +%H%M)" -ge 0612 ]; then echo "== $(date -u +%T) deadline: stop"; exit 0; fi
  E=NICFLOW_CT_SETUP_BPF=0; [ $t = on ] && E=NICFLOW_CT_SETUP_BPF=1
  echo "== $(date -u +%T) firewall $t $i load $(cat /proc/loadavg)"
  env $E NICFLOW_BIN=/tmp/lead-ceil/nicflow /tmp/lead-ceil/nicflow-bench conntrack --scenario firewall \
    --engines nicflow,linux-bridge-nft --modes cps --reps 3 --seconds 5 --wrk-threads 2 --out $OUT/firewall-$t-$i 2>&1 | grep '^\[conntrack\]' | tail -1
  grep -h '^| 32 |' $OUT/firewall-$t-$i/report.md | head -2 | cut -d'|' -f3-8
done; done
echo "== $(date -u +%T) end"
