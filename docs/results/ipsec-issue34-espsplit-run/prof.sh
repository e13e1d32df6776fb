#!/bin/bash
# usage: prof.sh LABEL STREAMS NICFLOW_BIN BENCH: a 12-s nicflow-ipsec phase at STREAMS streams;
# in its middle a system-wide profile (perf record -a -g) for 6 s, and over the same 6 s each
# daemon's CPU and each of its threads' (/proc/PID/task/TID/stat utime+stime), the iperf3s' and
# the machine's idle (/proc/stat). Run under flock -x. Copied from ../ipsec-issue34-espone-run/prof.sh
# with the per-thread snapshot added (the transmit thread is a thread of H1).
L=$1; S=$2; BIN=$3; BENCH=$4; D=/tmp/espsplit/prof/$L; rm -rf $D; mkdir -p $D
NICFLOW_BIN=$BIN $BENCH ipsec --engines nicflow-ipsec --streams $S --reps 1 --seconds 12 --out $D/run > $D/bench.log 2>&1 &
BP=$!
for i in $(seq 1 300); do
  if pgrep -x iperf3 -a | grep -q -- ' -c '; then break; fi; sleep 0.2; done
sleep 3
PIDS=$(pgrep -f "^$BIN " | paste -sd' ' -)
IP=$(pgrep -x iperf3 | paste -sd' ' -)
for p in $PIDS $IP; do echo "$p $(tr '\0' ' ' < /proc/$p/cmdline)"; done > $D/pids.txt
snap() { for p in $PIDS $IP; do echo "$p $(awk '{print $14+$15}' /proc/$p/stat)"; done; head -1 /proc/stat;
  for p in $PIDS; do for t in /proc/$p/task/*; do echo "T $p $(basename $t) $(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done; done; }
snap > $D/snap0.txt
perf record -a -F 499 -g -o $D/perf.data -- sleep 6 > $D/perf.log 2>&1
snap > $D/snap1.txt
wait $BP
perf report -i $D/perf.data --no-children --sort pid,dso,sym -g none --stdio 2>/dev/null | grep -v "^#" | grep "%" | head -200 > $D/flat.txt
perf report -i $D/perf.data --no-children --sort comm,pid --stdio -g none 2>/dev/null | grep -v "^#" | grep "%" > $D/bycomm.txt
perf report -i $D/perf.data --no-children --sort tid,dso,sym -g none --stdio 2>/dev/null | grep -v "^#" | grep "%" | head -300 > $D/bytid.txt
grep -E 'Gbit/s' $D/bench.log | head -5
echo done $L
