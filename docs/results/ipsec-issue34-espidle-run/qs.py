import json, sys
# usage: qs.py DIR... ; one line per phase: dir, engine, streams, Gbit/s, machine s/Gbit, daemons s/Gbit (H1/H2), retransmits
for p in sys.argv[1:]:
    d = json.load(open(p + '/samples.json'))
    for r in d['runs']:
        t = r.get('traffic')
        if not t or r.get('error'): continue
        u = t['usage']; gbit = t['bytes'] * 8 / 1e9
        pr = {x['label']: x['user_s'] + x['system_s'] for x in u['procs']}
        h1 = pr.get('switch-h1', 0); h2 = pr.get('switch-h2', 0)
        print('%-28s %-16s %3d  %5.2f Gbit/s  machine %.3f  daemons %.3f (%.3f / %.3f)  others %s rt %d' % (p.split('/')[-1], r['engine'], r['streams'], t['gbps'], u['busy_s'] / gbit, (h1 + h2) / gbit, h1 / gbit, h2 / gbit, {k: round(v / gbit, 3) for k, v in pr.items() if not k.startswith('switch')}, t['retransmits']))
