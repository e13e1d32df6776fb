import json,sys,statistics as st
def load(p):
    d=json.load(open(p+'/samples.json'));out={}
    for r in d['runs']:
        t=r.get('traffic')
        if not t or r.get('error'): continue
        u=t['usage']; gbit=t['bytes']*8/1e9
        pr={x['label']:x['user_s']+x['system_s'] for x in u['procs']}
        h1=pr.get('switch-h1',0); h2=pr.get('switch-h2',0)
        pk=r.get('packets') or {}
        out.setdefault((r['engine'],r['streams']),[]).append(dict(g=t['gbps'],m=u['busy_s']/gbit,d=(h1+h2)/gbit,h1=h1/gbit,h2=h2/gbit,rt=t['retransmits'],
            kept=pk.get('end_rx_gso_kept'),whole=pk.get('end_rx_gso_whole'),alloc=pk.get('end_rx_buf_allocs'),drops=pk.get('esp_drops')))
    return out
for p in sys.argv[1:]:
    o=load(p); print('==',p)
    for k in sorted(o):
        v=o[k]; med=lambda f: st.median([x[f] for x in v])
        print(f"{k[0]:24s} {k[1]:3d}  Gbit/s {med('g'):6.2f} [{', '.join('%.2f'%x['g'] for x in v)}]  machine s/Gbit {med('m'):.3f}  daemons {med('d'):.3f} (H1 {med('h1'):.3f} H2 {med('h2'):.3f})  rtx {[x['rt'] for x in v]} kept/whole/alloc {[ (x['kept'],x['whole'],x['alloc']) for x in v]} drops {[x['drops'] for x in v]}")
