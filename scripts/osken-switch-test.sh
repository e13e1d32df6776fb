#!/usr/bin/env bash
# os-ken's OpenFlow switch test tool (os_ken/tests/switch/tester.py) against
# nicflow, and against Open vSwitch as a baseline (issue 14).
#
#   bash scripts/osken-switch-test.sh [--target nicflow|ovs|both]
#        [--tests GROUP_OR_FILE[,...]] [--duration SECONDS] [--out DIR]
#        [--offload none|auto|tc|xdp] [--port-type afxdp|afpacket]
#        [--timeout SECONDS] [--port-max-len0] [--label NAME]
#
# The tool needs two switches connected to one controller: the *target*
# (nicflow, or OVS for the baseline) and a *tester* (Open vSwitch userspace,
# datapath_type=netdev), target port N wired to tester port N (N = 1, 2, 3)
# by veth pairs. The tester injects each case's packet with PACKET_OUT on
# its port 1 (-> target port 1); the target's rules send it out of port 2
# or 3 (-> tester, whose rule sends it to the controller) or to the
# controller itself; tester.py compares what arrives with the expected
# packet, and reads flows/meters/groups back to check they were installed
# as sent.
#
# Everything runs in one network namespace `nfst<pid>` (loopback for the
# controller, veths nfst-t<N> (target side) and nfst-x<N> (tester side),
# IPv6 off so the kernel sends nothing of its own on them), with a private
# ovsdb-server + ovs-vswitchd whose files are in the run's temp directory:
# no system OVS is used or disturbed. The namespace, the daemons and the
# temp directory are removed on exit, even on failure or Ctrl-C.
#
# --tests: comma-separated paths under os-ken's of13 directory, a group
#   (action, group, match, meter, action/25_SET_FIELD) or a file
#   (match/00_IN_PORT.json); default: the four groups. Each group runs in
#   its own osken-manager (a fresh switch pair) so totals are per group.
# --duration: overrides the 30 s `duration_time` of the throughput cases
#   (group/ and meter/: 17 files x 3 cases x 30 s = 26 min per target);
#   the measured rate is compared with +-10 % either way.
# --port-max-len0: rewrite the test files so that OUTPUT actions to ports
#   other than CONTROLLER carry max_len=0 instead of os-ken's default
#   OFPCML_MAX (65509). max_len means nothing for those ports, but the
#   tool compares the flow stats' instructions with what it sent; nicflow
#   before commit 5afa00e reported such outputs with max_len=0 (as
#   ovs-ofctl sends them), so every case failed at "Added incorrect flows"
#   before a packet was sent. Since 5afa00e nicflow keeps max_len and this
#   is not needed. The summary names it (`<target>+maxlen0`).
# --out: where the logs go (default docs/results/osken-switch-test-run);
#   per target and group `<label>-<group>.log` (osken-manager's output)
#   plus `<label>-summary.txt`.
# --label: the name the logs get (default `<target>`, `<target>+maxlen0`
#   with --port-max-len0), e.g. `nicflow-strict` to keep an older run's
#   logs beside the new ones. Only with one target.
# Needs root, ovs-vswitchd/ovsdb-server/ovs-vsctl, os-ken 3.1.0's
# osken-manager (scripts/setup.sh puts it in /opt/nicflow-tools/osken-venv;
# $NICFLOW_OSKEN_MANAGER overrides) and target/release/nicflow (built with
# cargo if missing; $NICFLOW_BIN runs another binary).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

target=both
tests=action,group,match,meter
duration=
out=$repo/docs/results/osken-switch-test-run
offload=none
port_type=
timeout_s=3600
maxlen0=
label=
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --offload) offload=$2; shift 2 ;;
    --port-type) port_type=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --port-max-len0) maxlen0=1; shift ;;
    --label) label=$2; shift 2 ;;
    -h|--help) sed -n '2,44p' "$0"; exit 0 ;;
    *) echo "osken-switch-test: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$target" in nicflow|ovs|both) ;; *) echo "--target nicflow|ovs|both" >&2; exit 2 ;; esac
[ -z "$label" ] || [ "$target" != both ] || { echo "--label needs --target nicflow or ovs" >&2; exit 2; }

[ "$(id -u)" = 0 ] || { echo "osken-switch-test: needs root" >&2; exit 1; }
for t in ovs-vswitchd ovsdb-server ovsdb-tool ovs-vsctl ovs-ofctl ip ethtool; do
  command -v "$t" >/dev/null || { echo "osken-switch-test: needs $t" >&2; exit 1; }
done
venv=/opt/nicflow-tools/osken-venv
manager=${NICFLOW_OSKEN_MANAGER:-$venv/bin/osken-manager}
[ -x "$manager" ] || manager=$(command -v osken-manager || true)
[ -n "$manager" ] && "$manager" --version 2>&1 | grep -q '^osken-manager' ||
  { echo "osken-switch-test: no osken-manager (bash scripts/setup.sh installs os-ken 3.1.0)" >&2; exit 1; }
python=$(dirname "$manager")/python3
[ -x "$python" ] || python=python3
osken_dir=$("$python" -c 'import os, os_ken; print(os.path.dirname(os_ken.__file__))')
tester_py=$osken_dir/tests/switch/tester.py
of13=$osken_dir/tests/switch/of13
[ -f "$tester_py" ] && [ -d "$of13" ] ||
  { echo "osken-switch-test: $tester_py or $of13 missing in this os-ken" >&2; exit 1; }
bin=${NICFLOW_BIN:-$repo/target/release/nicflow}
if [ "$target" != ovs ] && [ ! -x "$bin" ]; then
  echo "== building target/release/nicflow =="
  export PATH="$HOME/.cargo/bin:$PATH"
  cargo build --release -p nicflow --locked
fi

ns=nfst$$
tmp=$(mktemp -d /tmp/nfst.XXXXXX)
mkdir -p "$out"
ctl_port=16656
ovsenv=(env OVS_RUNDIR="$tmp/ovs" OVS_LOGDIR="$tmp/ovs" OVS_DBDIR="$tmp/ovs" OVS_SYSCONFDIR="$tmp/ovs")
db=--db=unix:$tmp/ovs/db.sock
nf_pid=
osken_pid=

stop_pidfile() { # stop the process whose pid is in $1, if it is still running
  local p
  [ -f "$1" ] || return 0
  p=$(cat "$1" 2>/dev/null || true)
  [ -n "$p" ] && kill "$p" 2>/dev/null && for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
}

teardown() {
  if [ -n "$osken_pid" ]; then kill "$osken_pid" 2>/dev/null || true; wait "$osken_pid" 2>/dev/null || true; fi
  osken_pid=
  if [ -n "$nf_pid" ]; then
    kill "$nf_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$nf_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$nf_pid" 2>/dev/null || true
    wait "$nf_pid" 2>/dev/null || true
  fi
  nf_pid=
  stop_pidfile "$tmp/ovs/vswitchd.pid"
  stop_pidfile "$tmp/ovs/ovsdb.pid"
  # Anything else still in the namespace was started by this run.
  if ip netns list | grep -qw "$ns"; then
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  fi
}
cleanup() {
  local rc=$?
  teardown
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

inns() { ip netns exec "$ns" "$@"; }
nf() { "$bin" --socket "$tmp/nicflow.sock" "$@"; }
vsctl() { "${ovsenv[@]}" ovs-vsctl "$db" --timeout=20 "$@"; }

# The namespace, the veth pairs and a private OVS with the tester bridge
# (dpid 2) and, for the baseline, the target bridge (dpid 1).
setup_common() { # $1: target kind
  ip netns add "$ns"
  inns ip link set lo up
  inns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  for i in 1 2 3; do
    inns ip link add "nfst-t$i" type veth peer name "nfst-x$i"
    for d in "nfst-t$i" "nfst-x$i"; do
      # No VLAN tag stripping or segmentation offloads: frames are seen as
      # they were sent.
      inns ethtool -K "$d" rxvlan off txvlan off tso off gso off gro off >/dev/null 2>&1 || true
      inns ip link set "$d" up
    done
  done
  mkdir -p "$tmp/ovs"
  "${ovsenv[@]}" ovsdb-tool create "$tmp/ovs/conf.db" /usr/share/openvswitch/vswitch.ovsschema
  inns "${ovsenv[@]}" ovsdb-server "--remote=punix:$tmp/ovs/db.sock" "--pidfile=$tmp/ovs/ovsdb.pid" \
    --detach -vconsole:off "--log-file=$tmp/ovs/ovsdb.log" "--unixctl=$tmp/ovs/ovsdb.ctl" "$tmp/ovs/conf.db"
  vsctl --no-wait init
  inns "${ovsenv[@]}" ovs-vswitchd "unix:$tmp/ovs/db.sock" "--pidfile=$tmp/ovs/vswitchd.pid" \
    --detach -vconsole:off "--log-file=$tmp/ovs/vswitchd.log" "--unixctl=$tmp/ovs/vswitchd.ctl"
  ovs_bridge nfst-tester 0000000000000002 x
  if [ "$1" = ovs ]; then
    ovs_bridge nfst-target 0000000000000001 t
  fi
}

ovs_bridge() { # name dpid port-letter
  local a=(add-br "$1" -- set bridge "$1" datapath_type=netdev protocols=OpenFlow13
    fail_mode=secure "other-config:datapath-id=$2" -- set-controller "$1" "tcp:127.0.0.1:$ctl_port"
    -- set controller "$1" connection-mode=out-of-band)
  for i in 1 2 3; do
    a+=(-- add-port "$1" "nfst-$3$i" -- set Interface "nfst-$3$i" "ofport_request=$i")
  done
  vsctl "${a[@]}"
}

start_nicflow() {
  inns "$bin" --socket "$tmp/nicflow.sock" daemon --config "$tmp/nicflow.toml" \
    >>"$tmp/nicflow.log" 2>&1 &
  nf_pid=$!
  for _ in $(seq 100); do nf show >/dev/null 2>&1 && break; sleep 0.1; done
  nf show >/dev/null
  nf add-br br0
  nf set br0 "offload=$offload"
  nf set br0 protocols=OpenFlow13
  nf set-fail-mode br0 secure
  for i in 1 2 3; do
    nf add-port br0 "nfst-t$i" ${port_type:+--type "$port_type"}
  done
  nf set-controller br0 "tcp:127.0.0.1:$ctl_port"
}

# nicflow's datapath id: 48 bits of FNV-1a over the bridge name
# (control::openflow::handle::datapath_id); it has no setting for it.
nicflow_dpid() {
  "$python" -c '
import sys
h = 0xcbf29ce484222325
for b in sys.argv[1].encode():
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
print("%016x" % (h & 0xffffffffffff))' "$1"
}

# The test files of one selection, with durations overridden if asked.
stage_tests() { # selection dir
  local sel=$1 dst=$2
  mkdir -p "$dst"
  (cd "$of13" && find "$sel" -name '*.json') | while read -r f; do
    mkdir -p "$(dirname "$dst/$f")"
    "$python" - "$of13/$f" "$dst/$f" "$duration" "$maxlen0" <<'PY'
import json, sys
src, dst, duration, maxlen0 = sys.argv[1:5]
doc = json.load(open(src))
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "duration_time" and duration:
                v[k] = int(duration)
            elif k == "OFPActionOutput" and maxlen0 and x.get("port") != 0xfffffffd:
                x["max_len"] = 0
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
walk(doc)
json.dump(doc, open(dst, "w"), indent=1)
PY
  done
}

run_one() { # kind selection
  local kind=$1 sel=$2 name log dpid label=${label:-$1${maxlen0:++maxlen0}}
  name=$(echo "$sel" | sed 's#/#_#g; s#\.json$##')
  log=$out/$label-$name.log
  echo "== $kind: $sel =="
  setup_common "$kind"
  if [ "$kind" = nicflow ]; then
    start_nicflow
    dpid=$(nicflow_dpid br0)
  else
    dpid=0000000000000001
  fi
  rm -rf "$tmp/tests"
  stage_tests "$sel" "$tmp/tests"
  {
    echo "# $(date -u +%FT%TZ) target=$kind dpid=$dpid tests=$sel duration=${duration:-file} port_max_len0=${maxlen0:-no} offload=$offload port_type=${port_type:-default}"
    [ "$kind" = nicflow ] && echo "# $("$bin" --version) ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo "# $(ovs-vswitchd --version | head -1); $("$manager" --version 2>&1)"
  } >"$log"
  inns timeout "$timeout_s" "$manager" --ofp-listen-host 127.0.0.1 --ofp-tcp-listen-port "$ctl_port" \
    --test-switch-target "$dpid" --test-switch-tester 0000000000000002 \
    --test-switch-dir "$tmp/tests/$sel" "$tester_py" >>"$log" 2>&1 &
  osken_pid=$!
  wait "$osken_pid" || true
  osken_pid=
  if [ "$kind" = nicflow ]; then
    { echo "# --- nicflow show / dump-flows at the end ---"; nf show; nf dump-flows br0; nf dump-meters br0; nf dump-groups br0; } >>"$log" 2>&1 || true
    { echo "# --- nicflow daemon log (tail) ---"; tail -n 40 "$tmp/nicflow.log"; } >>"$log" 2>&1 || true
  fi
  { echo "# --- ovs-vswitchd log (warnings, tail) ---"; grep -E 'WARN|ERR' "$tmp/ovs/vswitchd.log" | tail -n 20; } >>"$log" 2>&1 || true
  teardown
  # After the daemon is gone (it writes its config file until it exits):
  # the next group starts from an empty configuration.
  rm -rf "$tmp/ovs" "$tmp/nicflow.toml" "$tmp/nicflow.log"
  local ok err
  ok=$(grep -acE '^    .* OK$' "$log" || true)
  err=$(grep -acE '^    .* ERROR$' "$log" || true)
  printf '%-16s %-28s OK %4d  ERROR %4d\n' "$label" "$sel" "$ok" "$err" | tee -a "$out/$label-summary.txt"
}

kinds=()
case "$target" in both) kinds=(nicflow ovs) ;; *) kinds=("$target") ;; esac
for kind in "${kinds[@]}"; do
  : >"$out/${label:-$kind${maxlen0:++maxlen0}}-summary.txt"
  IFS=, read -r -a sels <<<"$tests"
  for sel in "${sels[@]}"; do
    [ -e "$of13/$sel" ] || { echo "osken-switch-test: no $of13/$sel" >&2; exit 2; }
    run_one "$kind" "$sel"
  done
done
echo "logs in $out"
