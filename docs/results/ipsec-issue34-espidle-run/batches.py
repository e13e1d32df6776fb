"""Batch sizes of this branch's daemons per engine and stream count, medians over a sitting's
runs (python3 batches.py s1 new1): frames per recvmmsg that found any, % of recvmmsg calls that
found nothing, frames per sendmmsg, per host and port (samples.json `packets.syscalls`; the
underlay's frames are UDP super-frames counted once; the unencrypted engine left out: its daemons
see no traffic)."""
import glob, json, statistics as st, sys
S, B = sys.argv[1], sys.argv[2]
acc = {}
for d in sorted(glob.glob(f'{S}-[0-9]*-{B}')):
    for r in json.load(open(d + '/samples.json'))['runs']:
        s = (r.get('packets') or {}).get('syscalls') or {}
        if not s or r.get('error') or r['engine'] == 'nicflow':
            continue
        for key in ['h1:vc1', 'h1:underlay', 'h2:underlay', 'h2:vs1']:
            g = lambda k: s.get(f'{key}:{k}', 0)
            c, e = g('rx_recvmmsg_calls'), g('rx_recvmmsg_empty')
            if not c:
                continue
            acc.setdefault((r['engine'], r['streams'], key), []).append(
                (g('rx_recvmmsg_frames') / max(c - e, 1), 100 * e / c, g('tx_packets') / max(g('tx_sendmmsg_calls'), 1)))
print('| engine | streams | port | rx frames / recvmmsg | recvmmsg empty % | tx frames / sendmmsg |')
print('|---|---:|---|---:|---:|---:|')
for k in sorted(acc):
    v = acc[k]
    m = lambda i: st.median(x[i] for x in v)
    print(f'| {k[0].replace("nicflow-", "")} | {k[1]} | {k[2]} | {m(0):.1f} | {m(1):.0f} | {m(2):.1f} |')
