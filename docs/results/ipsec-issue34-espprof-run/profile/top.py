#!/usr/bin/env python3
"""usage: top.py PROFDIR [N]: per daemon (pids.txt), its N top symbols by self samples
(kernel [k] and user [.]), as % of that daemon's samples and of the machine's;
reads `perf report --no-children --sort pid,dso,sym -g none` of PROFDIR/perf.data."""
import re, subprocess, sys
d = sys.argv[1]; n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
pids = open(f"{d}/pids.txt").readline().split()[1].split(",")
out = subprocess.run(["perf", "report", "-i", f"{d}/perf.data", "--no-children", "--sort", "pid,dso,sym",
                      "-g", "none", "--stdio", "--percent-limit", "0"], capture_output=True, text=True).stdout
rows = []
for l in out.splitlines():
    m = re.match(r"\s*([\d.]+)%\s+(\d+):\S+\s+(\S+)\s+\[(.)\]\s+(.*)$", l)
    if m:
        rows.append((float(m[1]), m[2], m[3], m[4], m[5].strip()))
tot = re.search(r"of event '[^']*'\s*\n# Event count \(approx.\): (\d+)", out)
samples = re.search(r"# Samples: (\S+)", out)
print(f"samples: {samples[1] if samples else '?'}")
for role, p in zip(["H1 (seals)", "H2 (opens)"], pids):
    mine = [r for r in rows if r[1] == p]
    s = sum(r[0] for r in mine)
    k = sum(r[0] for r in mine if r[3] == "k")
    print(f"\n### {role}, pid {p}: {s:.1f} % of the machine's samples (kernel {k:.1f}, user {s-k:.1f})")
    print("| # | symbol | k/u | % of daemon | % of machine |\n|---:|---|---|---:|---:|")
    for i, r in enumerate(sorted(mine, reverse=True)[:n]):
        print(f"| {i+1} | `{r[4][:90]}` | {'kernel' if r[3]=='k' else 'user'} | {100*r[0]/s:.1f} | {r[0]:.2f} |")
others = {}
for r in rows:
    if r[1] not in pids:
        others[r[1]] = others.get(r[1], 0) + r[0]
print("\nothers:", {k: round(v, 2) for k, v in sorted(others.items(), key=lambda x: -x[1])[:6]})
