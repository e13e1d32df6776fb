import sys, re, collections
# usage: idle.py script.txt pidH1 pidH2 pidSrv pidCli
f = sys.argv[1]; names = {int(sys.argv[2]):'H1', int(sys.argv[3]):'H2', int(sys.argv[4]):'srv', int(sys.argv[5]):'cli'}
sw = re.compile(r'\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch: prev_comm=.* prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=.* next_pid=(\d+)')
wk = re.compile(r'\[(\d+)\]\s+([\d.]+):\s+sched:sched_waking: comm=.* pid=(\d+) prio=\d+ target_cpu=(\d+)')
cur = {}  # cpu -> pid
state = {p: '?' for p in names}  # 'run','R','S'
last = None
acc = collections.Counter(); tot = collections.Counter()
blocked_dur = collections.Counter()
def cat(cpu):
    other = [c for c in cur if c != cpu]
    o = cur.get(other[0]) if other else None
    oname = names.get(o, 'idle' if o == 0 else 'other') if o is not None else '?'
    waiting = sorted(names[p] for p in names if state[p] == 'R')
    if waiting:
        return 'runnable waiting: ' + ','.join(waiting) + ' | other cpu: ' + oname
    return 'all 4 blocked except running | other cpu: ' + oname
for line in open(f):
    m = sw.search(line); w = None
    if not m:
        w = wk.search(line)
        if not w: continue
        t = float(w.group(2))
    else:
        t = float(m.group(2))
    if last is not None:
        dt = t - last
        for c, p in cur.items():
            if p == 0 and all(s != '?' for s in state.values()):
                acc[cat(c)] += dt
            tot['cpu%s %s' % (c, 'idle' if p == 0 else names.get(p, 'other'))] += dt
    last = t
    if m:
        cpu, pp, ps, np_ = int(m.group(1)), int(m.group(3)), m.group(4), int(m.group(5))
        if pp in names:
            state[pp] = 'R' if ps.startswith('R') else 'S'
        if np_ in names:
            state[np_] = 'run'
        cur[cpu] = np_
    else:
        p = int(w.group(3))
        if p in names and state[p] == 'S' or (p in names and state[p] == '?'):
            state[p] = 'R'
T = sum(v for k, v in tot.items()) / 2
print('span %.3f s per cpu' % T)
for k, v in sorted(tot.items()): print('  %-20s %6.1f %%' % (k, 100 * v / T))
I = sum(acc.values())
print('idle total %.1f %% of the 2 cpus' % (100 * I / T / 2))
for k, v in acc.most_common(25): print('  %5.1f %% of idle  %s' % (100 * v / I, k))
