#!/usr/bin/env python3
"""Per-symbol cost in µs of machine time per connection, from two system-wide perf records
(perf report --sort dso,sym --no-children, 2 cores): argv = sym-A.txt cps-A sym-B.txt cps-B."""
import re, sys
a, ca, b, cb = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
d = {}
for t, f, c in (("a", a, ca), ("b", b, cb)):
    for l in open(f):
        m = re.match(r'\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)', l)
        if m:
            d.setdefault((m.group(2), m.group(3).strip()), {})[t] = float(m.group(1)) / 100 * 2e6 / c
print("total µs/conn (busy+idle): A %.1f B %.1f" % tuple(sum(v.get(t, 0) for v in d.values()) for t in "ab"))
print("   A µs    B µs    B-A   dso symbol")
for k, v in sorted(d.items(), key=lambda kv: -abs(kv[1].get('b', 0) - kv[1].get('a', 0)))[:40]:
    print("%7.2f %7.2f %+7.2f  %s %s" % (v.get('a', 0), v.get('b', 0), v.get('b', 0) - v.get('a', 0), k[0][:20], k[1][:70]))
