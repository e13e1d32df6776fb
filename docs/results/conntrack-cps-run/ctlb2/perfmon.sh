#!/bin/bash
# $1: daemon binary, $2: out prefix. Wait for the daemon and wrk's 12-s run, let 3 s pass, profile 3 s
# (DWARF call graphs: the release build has debug=1, no frame pointers).
for i in $(seq 1 120); do
  pid=$(pgrep -f "^$1 .*(daemon|vswitchd|run)" | head -1)
  [ -n "$pid" ] && break; sleep 0.5
done
echo "pid=$pid $(tr '\0' ' ' </proc/$pid/cmdline)" > $2.pid
for i in $(seq 1 120); do
  w=$(pgrep -f "wrk -t1 -c 32 -d 12s" | head -1); [ -n "$w" ] && break; sleep 0.5
done
sleep 3
perf record -F 999 --call-graph dwarf,32768 -p $pid -o $2.data -- sleep 3 2> $2.err
