#!/bin/sh
# base/new alternating, three rounds, one exclusive hold (see docs/results/p4.md section 3).
for i in 1 2 3; do for v in base new2; do
  date -u +"%H:%M:%S start $v-$i" >> /tmp/p4exact/runs2/times.log
  /tmp/p4exact/$v-bench p4 --engines none --reps 1 --seconds 0.5 --learn 3000 --idle-entries 200 \
    --out /tmp/p4exact/runs2/$v-$i > /tmp/p4exact/runs2/$v-$i.log 2>&1
  uptime >> /tmp/p4exact/runs2/times.log
done; done
date -u +"%H:%M:%S done" >> /tmp/p4exact/runs2/times.log
