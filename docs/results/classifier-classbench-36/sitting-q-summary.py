#!/usr/bin/env python3
# Summary of a sitting-q-cbprobe.sh output: per file and variant the ns of each round, the
# best, the ratio best(variant)/best(base); geomean of the ratios; counts checked equal.
import sys, re, math, collections
ns = collections.defaultdict(list); counts = {}
for l in open(sys.argv[1]):
    m = re.match(r'(\d) (\S+) (\S+) .*tables (\d+) probed (\S+) compared (\S+) ns (\d+) .*wcbits (\S+) .*wrong (\d+)', l)
    if not m: continue
    r, f, v, t, p, c, n, wb, w = m.groups()
    ns[(f, v)].append(int(n)); counts.setdefault(f, {})[v] = (t, p, c, wb, w)
vs = []
for (f, v) in ns:
    if v not in vs: vs.append(v)
files = sorted({f for f, _ in ns})
logs = {v: [] for v in vs[1:]}
print('file', *[f'{v}(r1/r2)' for v in vs], *[f'{v}/base' for v in vs[1:]], 'tables probed compared wcbits wrong(base)', sep='\t')
for f in files:
    b = min(ns[(f, vs[0])])
    rats = []
    for v in vs[1:]:
        x = min(ns[(f, v)]) / b; logs[v].append(math.log(x)); rats.append(f'{x:.3f}')
    same = len({c[:4] for c in counts[f].values()}) == 1
    print(f, *['/'.join(map(str, ns[(f, v)])) for v in vs], *rats, ' '.join(counts[f][vs[0]]) + ('' if same else ' COUNTS DIFFER'), sep='\t')
for v in vs[1:]:
    print(f'geomean {v}/base {math.exp(sum(logs[v]) / len(logs[v])):.3f}')
