"""Per-daemon self-sample tables from prof.sh's perf data (python3 daemons.py DIR): each daemon's
(H1 = h1.toml, H2 = h2.toml, from pids.txt) top symbols as % of that daemon's samples, the two
daemons' and the iperf3s' shares of all samples, and the /proc CPU over the profiled 6 s."""
import subprocess, sys, re, collections
d = sys.argv[1]
pids = {}
for l in open(d + '/pids.txt'):
    p, cmd = l.split(' ', 1)
    pids[p] = 'H1' if 'h1.toml' in cmd or 'h1.sock' in cmd else 'H2' if 'h2.toml' in cmd or 'h2.sock' in cmd else ('iperf3 server' if ' -s' in cmd else 'iperf3 client')
out = subprocess.run(['perf', 'report', '-i', d + '/perf.data', '--no-children', '--sort', 'pid,sym', '-g', 'none',
                      '--stdio', '--percent-limit', '0'], capture_output=True, text=True).stdout
tot = collections.Counter(); rows = collections.defaultdict(list)
for l in out.splitlines():
    m = re.match(r'\s*([\d.]+)%\s+(\d+):(\S+)\s+\[(.)\]\s+(.*)$', l)
    if not m: continue
    pc, pid, comm, ku, sym = float(m[1]), m[2], m[3], m[4], m[5].strip()
    who = pids.get(pid, 'idle' if pid == '0' else 'other')
    tot[who] += pc; rows[who].append((pc, 'k' if ku == 'k' else 'u', sym))
print('share of all samples: ' + ', '.join(f'{k} {v:.1f} %' for k, v in tot.most_common()))
def snap(f):
    r = {}; cpu = None
    for l in open(f):
        x = l.split()
        if x[0] == 'cpu': cpu = [int(v) for v in x[1:]]
        else: r[x[0]] = int(x[1])
    return r, cpu
a, ca = snap(d + '/snap0.txt'); b, cb = snap(d + '/snap1.txt')
t = sum(cb) - sum(ca); idle = (cb[3] + cb[4]) - (ca[3] + ca[4])
print(f'/proc over the profile: machine idle {100 * idle / t:.1f} % of 2 CPUs; ' + ', '.join(
    f'{pids[p]} {100 * (b[p] - a[p]) / 600:.1f} % of a CPU' for p in b if p in a and p in pids))
for who in ('H1', 'H2'):
    s = sum(x[0] for x in rows[who]); k = sum(x[0] for x in rows[who] if x[1] == 'k')
    print(f'\n{who}: {s:.1f} % of all samples, kernel {100 * k / s:.0f} %')
    for pc, ku, sym in sorted(rows[who], reverse=True)[:22]:
        print(f'  {100 * pc / s:5.1f} %  {ku}  {sym[:90]}')
