#!/bin/bash
# One exclusive hold: sitting 3 (base vs new daemon, -t1) rounds 1-2, sitting 2 (-t1 vs -t2, main's
# daemon) round 1, then sitting 3 round 3 and sitting 2 round 2 if before STOP (each run checks it).
for i in $(seq 1 60); do [ -x /tmp/ctlb2/new-nicflow ] && grep -q rc=0 /tmp/ctlb2/build-daemon.log && break; sleep 2; done
echo "== hold $(date -u +%T)"
ROUNDS="1 2" bash /tmp/ctlb2/sit3.sh > /tmp/ctlb2/sit3.out 2>&1
ROUNDS="1" bash /tmp/ctlb2/sit2.sh > /tmp/ctlb2/sit2.out 2>&1
ROUNDS="3" bash /tmp/ctlb2/sit3.sh >> /tmp/ctlb2/sit3.out 2>&1
ROUNDS="2" bash /tmp/ctlb2/sit2.sh >> /tmp/ctlb2/sit2.out 2>&1
echo "== hold end $(date -u +%T)"
