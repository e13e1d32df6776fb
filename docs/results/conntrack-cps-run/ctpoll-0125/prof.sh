#!/bin/bash
# One exclusive hold (flock -x /work/wt/quiet.lock bash prof.sh): main's daemon, firewall cps,
# one 12-s repetition with NICFLOW_CT_SETUP_BPF=0 (off) then =1 (on); 3 s into wrk's run, a
# system-wide perf record (-a -g, 999 Hz, 4 s) and perf stat (context switches, 4 s).
# The fix: BIN=/tmp/ctpoll/new-nicflow KINDS=on OUT=/tmp/ctpoll/prof-fix bash prof.sh (after sit2.sh, same hold).
BIN=${BIN:-/tmp/ctpoll/base-nicflow}; BENCH=/tmp/ctpoll/base-nicflow-bench
OUT=${OUT:-/tmp/ctpoll/prof}; mkdir -p $OUT
for t in ${KINDS:-off on}; do
  case $t in off) E=NICFLOW_CT_SETUP_BPF=0;; on) E=NICFLOW_CT_SETUP_BPF=1;; esac
  ( for i in $(seq 1 240); do w=$(pgrep -f "wrk -t1 -c 32 -d 12s" | head -1); [ -n "$w" ] && break; sleep 0.25; done
    sleep 3
    pid=$(pgrep -f "^$BIN .*(daemon|run)" | head -1); echo "daemon pid=$pid" > $OUT/perf-$t.pid
    perf stat -a -e context-switches,cpu-migrations,task-clock -o $OUT/stat-$t.txt -- sleep 4 &
    perf record -a -g -F 999 -o $OUT/perf-$t.data -- sleep 4 2> $OUT/perf-$t.err
    wait ) & m=$!
  echo "== $(date -u +%T) perf $t load $(cat /proc/loadavg)"
  env $E NICFLOW_BIN=$BIN $BENCH conntrack --scenario firewall --engines nicflow --modes cps --reps 1 --seconds 12 \
     --out $OUT/p-$t 2>&1 | grep '^\[conntrack\]'
  wait $m
  grep -h 'conntrack in kernel\|engines:' $OUT/p-$t/report.md
done
echo "== $(date -u +%T) perf end"
