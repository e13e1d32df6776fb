#!/usr/bin/env python3
"""Table of a sitting (ctlb2: sit1.sh's runs DIR/SCEN-KIND-ROUND): per run and engine, median conn/s
(min-max), nicflow vs nftables in the same run, machine cores (idle = 2 - busy), machine and switch
µs per connection, wrk and nginx cores; every sample; medians over all runs of a (scenario, kind)."""
import json, sys, glob, os, statistics as st
out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ctlb2/sit1"
runs = []
for d in glob.glob(f"{out}/*-*-*"):
    if not os.path.exists(f"{d}/samples.json"):
        continue
    sc, kind, rnd = os.path.basename(d).split('-')
    r = json.load(open(f"{d}/samples.json"))
    runs.append((int(rnd), sc, kind, r))
runs.sort(key=lambda x: (x[1], x[0], x[2]))
def med(v):
    v = [x for x in v if x is not None]
    return st.median(v) if v else float('nan')
allv = {}
print("| scenario | round | kind | engine | conn/s median (min-max) | vs nft, same run | machine cores (idle %) | machine µs/conn | switch µs/conn | wrk cores | nginx cores | samples |")
print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
for rnd, sc, kind, r in runs:
    per = {}
    for s in r['samples']:
        if s.get('wrk') and s['mode'] == 'cps':
            per.setdefault(s['engine'], []).append(s)
    nft = med([s['wrk']['rate'] for s in per.get('linux-bridge-nft', [])])
    for e in ['nicflow', 'linux-bridge-nft']:
        ss = per.get(e, [])
        if not ss:
            print(f"| {sc} | {rnd} | {kind} | {e} | failed | | | | | | | |"); continue
        rates = [s['wrk']['rate'] for s in ss]
        m = med(rates)
        allv.setdefault((sc, kind, e), []).extend(rates)
        mc = med([s['machine_cores'] for s in ss])
        mus = med([s['machine_cores'] * 1e6 / s['wrk']['rate'] for s in ss])
        sw = med([(s['switch_cores'] * 1e6 / s['wrk']['rate']) if s.get('switch_cores') else None for s in ss])
        vs = f"{m/nft:.2f}x" if e == 'nicflow' and nft == nft else "—"
        print(f"| {sc} | {rnd} | {kind} | {e} | {m:.0f} ({min(rates):.0f}-{max(rates):.0f}) | {vs} | {mc:.2f} ({(2-mc)/2*100:.0f} %) | {mus:.1f} | "
              f"{sw:.1f} | {med([s['wrk_cores'] for s in ss]):.2f} | {med([s.get('nginx_cores') for s in ss]):.2f} | {' '.join(f'{x:.0f}' for x in rates)} |")
print()
print("Medians over every sample of a (scenario, kind):")
for (sc, kind, e), v in sorted(allv.items()):
    n = allv.get((sc, kind, 'linux-bridge-nft'))
    extra = f", vs nft {st.median(v)/st.median(n):.2f}x" if e == 'nicflow' and n else ""
    print(f"- {sc} {kind} {e}: {st.median(v):.0f} over {len(v)} samples{extra}")
