#!/usr/bin/env bash
# The main demo: build, run traffic through a nicflow bridge, print a report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
echo "== building (release) =="
cargo build --release --locked -q -p nicflow -p nicflow-bench
bin=target/release/nicflow
dir=$(mktemp -d /tmp/nicflow-demo.XXXXXX)
trap 'rm -rf "$dir"' EXIT

"$bin" demo --dir "$dir"

if command -v tshark >/dev/null 2>&1; then
  echo
  echo "== tshark decodes the output captures =="
  for p in uplink vm1 vm2; do
    n=$(tshark -r "$dir/$p.out.pcap" 2>/dev/null | wc -l)
    echo "-- $p.out.pcap: $n frames; first 3:"
    tshark -r "$dir/$p.out.pcap" -c 3 2>/dev/null | sed 's/^/   /'
  done
  echo "-- rewritten service traffic on vm2 (ip.dst, tcp.dstport, ttl):"
  # Not `-c 2`: tshark counts the frames it reads, not those the filter keeps.
  tshark -r "$dir/vm2.out.pcap" -Y 'tcp.dstport==80' -T fields -e ip.dst -e tcp.dstport -e ip.ttl 2>/dev/null | head -n 2 | sed 's/^/   /' || true
fi

echo
echo
echo "== classifier benchmark (quick run; full: nicflow bench classifier) =="
"$bin" bench classifier --rules 10,1000,20000 --reps 3 --quick 2>/dev/null
