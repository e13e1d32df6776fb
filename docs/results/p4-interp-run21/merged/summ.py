#!/usr/bin/env python3
# Medians per build and table of a console file from sit.sh.
import re, sys, statistics as st
d = {}
b = None
for l in open(sys.argv[1]):
    m = re.match(r"# (\w+)-\d+ ", l)
    if m:
        b = m.group(1)
        continue
    m = re.match(r"\[p4\] interpreter (.*): (\d+) pps", l)
    if m:
        d.setdefault((m.group(1)[:12], b), []).append(int(m.group(2)))
for t in sorted({k[0] for k in d}):
    base = st.median(d[(t, "base")])
    new = st.median(d[(t, "merged")])
    print(f"{t}: base {base:,.0f} {d[(t,'base')]} merged {new:,.0f} {d[(t,'merged')]} ratio {new/base:.3f}")
