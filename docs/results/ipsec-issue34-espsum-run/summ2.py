# Medians per binary over all of a sitting's runs (python3 summ2.py s1; dirs s1-K-base, s1-K-new),
# as markdown table rows, with new ÷ base. Uses ../ipsec-issue34-espcopy-run/summ.py's load().
import sys, glob, statistics as st
import os
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ipsec-issue34-espcopy-run', 'summ.py')).read().split('for p in sys.argv')[0])
S = sys.argv[1]
runs = {b: [load(d) for d in sorted(glob.glob(f'{S}-[0-9]*-{b}'))] for b in ('base', 'new')}
def pool(b, k):
    return [x for o in runs[b] for x in o.get(k, [])]
keys = sorted(set(k for o in runs['base'] for k in o), key=lambda k: (k[0] == 'nicflow', k[0], k[1]))
print(f"runs: base {len(runs['base'])}, new {len(runs['new'])}")
print('| engine | streams | Gbit/s main | Gbit/s this | this ÷ main | machine s/Gbit main | this | daemons s/Gbit main (H1 / H2) | this (H1 / H2) | receive buffers allocated (this) |')
print('|---|---:|---|---|---:|---:|---:|---|---|---|')
for k in keys:
    b, n = pool('base', k), pool('new', k)
    m = lambda v, f: st.median([x[f] for x in v])
    g = lambda v: f"**{m(v,'g'):.2f}** ({', '.join('%.2f' % x['g'] for x in v)})"
    d = lambda v: f"{m(v,'d'):.3f} ({m(v,'h1'):.3f} / {m(v,'h2'):.3f})"
    al = ', '.join(str(x['alloc']) for x in n)
    print(f"| {k[0].replace('nicflow-','')} | {k[1]} | {g(b)} | {g(n)} | {m(n,'g')/m(b,'g'):.2f} | {m(b,'m'):.3f} | {m(n,'m'):.3f} | {d(b)} | {d(n)} | {al} |")
