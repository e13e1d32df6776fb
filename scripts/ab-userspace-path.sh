#!/bin/bash
# A/B of the userspace path of a TC port: two nicflow binaries, alternated
# ROUNDS times, each switching two namespaces through a bridge whose IP flows
# stay in userspace (`ct(commit),normal`: the TC engine refuses ct, so every
# IP packet crosses the upcall socket). Prints ping RTT (200 x 10 ms) and one
# iperf3 TCP stream (4 s) per run, then the medians per binary.
# Usage: scripts/ab-userspace-path.sh OLD_BIN NEW_BIN [ROUNDS]
# Lab addresses 198.18.7.0/24 in namespaces it creates and deletes.
set -u
OLD=$1 NEW=$2 ROUNDS=${3:-3}
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 1; }
command -v iperf3 >/dev/null || { echo "needs iperf3"; exit 1; }
one() {
  local BIN=$1 P=nfab$$r$2 DPID=
  local D; D=$(mktemp -d)
  cleanup() { [ -n "$DPID" ] && kill $DPID 2>/dev/null && wait $DPID 2>/dev/null
    ip netns del ${P}a 2>/dev/null; ip netns del ${P}b 2>/dev/null
    ip link del ${P}A 2>/dev/null; ip link del ${P}B 2>/dev/null; rm -rf "$D"; }
  trap cleanup RETURN
  ip netns add ${P}a; ip netns add ${P}b
  ip link add ${P}A type veth peer name eth0 netns ${P}a
  ip link add ${P}B type veth peer name eth0 netns ${P}b
  ip -n ${P}a addr add 198.18.7.1/24 dev eth0; ip -n ${P}b addr add 198.18.7.2/24 dev eth0
  for n in a b; do ip -n ${P}$n link set eth0 up; ip -n ${P}$n link set lo up; done
  ip link set ${P}A up; ip link set ${P}B up
  NICFLOW_PIN_ROOT=off $BIN daemon --socket $D/s --config $D/c.toml >$D/log 2>&1 &
  DPID=$!
  for _ in $(seq 50); do [ -S $D/s ] && break; sleep 0.1; done
  $BIN add-br --socket $D/s br$P >/dev/null
  $BIN add-port --socket $D/s br$P ${P}A >/dev/null
  $BIN add-port --socket $D/s br$P ${P}B >/dev/null
  $BIN add-flow --socket $D/s br$P "priority=10,ip,actions=ct(commit),normal" >/dev/null
  ip netns exec ${P}a ping -c 3 -q 198.18.7.2 >/dev/null
  local rtt; rtt=$(ip netns exec ${P}a ping -c 200 -i 0.01 -q 198.18.7.2 | awk -F/ '/rtt/{print $5}')
  ip netns exec ${P}b iperf3 -s -D -1 >/dev/null 2>&1; sleep 0.3
  local gbps; gbps=$(ip netns exec ${P}a iperf3 -c 198.18.7.2 -t 4 -f g | awk '/receiver/{print $7}')
  echo "$rtt $gbps"
}
med() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
: >/tmp/nfab$$.old; : >/tmp/nfab$$.new
for r in $(seq $ROUNDS); do
  o=$(one $OLD ${r}o); echo "round $r old: rtt_avg_ms gbit/s = $o"; echo "$o" >>/tmp/nfab$$.old
  n=$(one $NEW ${r}n); echo "round $r new: rtt_avg_ms gbit/s = $n"; echo "$n" >>/tmp/nfab$$.new
done
for w in old new; do
  echo "$w median: rtt_avg_ms $(cut -d' ' -f1 /tmp/nfab$$.$w | med)  tcp_gbit/s $(cut -d' ' -f2 /tmp/nfab$$.$w | med)"
done
rm -f /tmp/nfab$$.old /tmp/nfab$$.new
