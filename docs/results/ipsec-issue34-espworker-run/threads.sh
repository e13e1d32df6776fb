#!/bin/bash
# usage: threads.sh LABEL BIN: a 14-s 4-stream nicflow-ipsec phase; in its middle, each
# daemon thread's CPU (utime+stime from /proc/PID/task/TID/stat) and the machine's idle
# (/proc/stat) over 6 s. Run under flock -x /work/wt/quiet.lock.
L=$1; BIN=$2; D=/tmp/espworker/t/$L; rm -rf $D; mkdir -p $D
NICFLOW_BIN=$BIN /tmp/espworker/bench ipsec --engines nicflow-ipsec --streams 4 --reps 1 --seconds 14 --out $D/run > $D/bench.log 2>&1 &
BP=$!
for i in $(seq 1 300); do
  if pgrep -x iperf3 -a | grep -q -- ' -c '; then break; fi; sleep 0.2; done
sleep 3
PIDS=$(pgrep -f "^$BIN ")
snap() { for p in $PIDS; do for t in /proc/$p/task/*; do echo "$p $(basename $t) $(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done; done; head -1 /proc/stat; }
snap > $D/snap0.txt; sleep 6; snap > $D/snap1.txt
wait $BP
python3 - $D <<'PY'
import sys
d=sys.argv[1]
def rd(f):
    th={}; cpu=None
    for l in open(f):
        x=l.split()
        if x[0]=='cpu': cpu=[int(v) for v in x[1:]]
        else: th[(x[0],x[1])]=(x[2],int(x[3]))
    return th,cpu
a,ca=rd(d+'/snap0.txt'); b,cb=rd(d+'/snap1.txt')
tot=sum(cb)-sum(ca); idle=(cb[3]+cb[4])-(ca[3]+ca[4])
print(f"machine idle {100*idle/tot:.1f} % of the two CPUs over the window")
for k in sorted(b):
    if k in a and b[k][1]-a[k][1]>0:
        print(f"pid {k[0]} tid {k[1]} {b[k][0]}: {100*(b[k][1]-a[k][1])/600:.1f} % of a CPU")
PY
grep -E 'Gbit/s' $D/bench.log
