#!/bin/bash
# $1: binary path of the daemon, $2: out prefix. Wait for the daemon, let the warm-up pass, profile 4 s.
for i in $(seq 1 120); do
  pid=$(pgrep -f "^$1 .*(daemon|vswitchd|run)" | head -1)
  [ -n "$pid" ] && break; sleep 0.5
done
echo "pid=$pid $(tr '\0' ' ' </proc/$pid/cmdline)" > $2.pid
for i in $(seq 1 120); do
  w=$(pgrep -f "wrk -t1 -c 32 -d 12s" | head -1); [ -n "$w" ] && break; sleep 0.5
done
sleep 3
perf record -F 2000 -g -p $pid -o $2.data -- sleep 4 2> $2.err
