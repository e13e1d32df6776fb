"""Medians per binary over a sitting's runs (python3 summ.py s1 base new: dirs s1-K-base against
s1-K-new) as markdown rows, with new ÷ base; copied from ../ipsec-issue34-espworker-run/summ.py."""
import glob, json, statistics as st, sys

def load(p):
    d = json.load(open(p + '/samples.json')); out = {}
    for r in d['runs']:
        t = r.get('traffic')
        if not t or r.get('error'):
            continue
        u = t['usage']; gbit = t['bytes'] * 8 / 1e9
        pr = {x['label']: x['user_s'] + x['system_s'] for x in u['procs']}
        h1 = pr.get('switch-h1', 0); h2 = pr.get('switch-h2', 0)
        pk = r.get('packets') or {}
        out.setdefault((r['engine'], r['streams']), []).append(dict(
            g=t['gbps'], m=u['busy_s'] / gbit, d=(h1 + h2) / gbit, h1=h1 / gbit, h2=h2 / gbit,
            rt=t['retransmits'], drops=pk.get('esp_drops'), txa=pk.get('underlay_tx_buf_allocs'),
            rxa=pk.get('end_rx_buf_allocs')))
    return out

S = sys.argv[1]
A, B = sys.argv[2:4] if len(sys.argv) > 3 else ('base', 'new')
runs = {x: [load(d) for d in sorted(glob.glob(f'{S}-[0-9]*-{y}'))] for x, y in (('base', A), ('new', B))}
pool = lambda b, k: [x for o in runs[b] for x in o.get(k, [])]
keys = sorted(set(k for o in runs['base'] for k in o), key=lambda k: (k[0] == 'nicflow', k[0], k[1]))
print(f"runs: base {len(runs['base'])}, new {len(runs['new'])}")
print('| engine | streams | Gbit/s main | Gbit/s this | this ÷ main | machine s/Gbit main | this | daemons s/Gbit main (H1 / H2) | this (H1 / H2) | send buffers allocated (this) | container receive buffers allocated (main / this) | ESP drops |')
print('|---|---:|---|---|---:|---:|---:|---|---|---|---|---|')
for k in keys:
    b, n = pool('base', k), pool('new', k)
    if not b or not n:
        continue
    m = lambda v, f: st.median([x[f] for x in v])
    g = lambda v: f"**{m(v, 'g'):.2f}** ({', '.join('%.2f' % x['g'] for x in v)})"
    d = lambda v: f"{m(v, 'd'):.3f} ({m(v, 'h1'):.3f} / {m(v, 'h2'):.3f})"
    js = lambda v, f: ', '.join(str(x[f]) for x in v)
    drops = sum((x['drops'] or 0) for x in b + n)
    print(f"| {k[0].replace('nicflow-', '')} | {k[1]} | {g(b)} | {g(n)} | {m(n, 'g') / m(b, 'g'):.2f} | {m(b, 'm'):.3f} | {m(n, 'm'):.3f} | {d(b)} | {d(n)} | {js(n, 'txa')} | {js(b, 'rxa')} / {js(n, 'rxa')} | {drops} |")
