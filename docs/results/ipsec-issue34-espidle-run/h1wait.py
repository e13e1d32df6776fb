import sys, re, collections
f = sys.argv[1]; names = {int(sys.argv[2]):'H1', int(sys.argv[3]):'H2', int(sys.argv[4]):'srv', int(sys.argv[5]):'cli'}
who = sys.argv[6] if len(sys.argv) > 6 else 'H1'
sw = re.compile(r'\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch: prev_comm=.* prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=.* next_pid=(\d+)')
wk = re.compile(r'\[(\d+)\]\s+([\d.]+):\s+sched:sched_waking: comm=.* pid=(\d+) prio=\d+ target_cpu=(\d+)')
cur = {}; state = {p: '?' for p in names}; last = None; acc = collections.Counter(); T = 0
for line in open(f):
    m = sw.search(line); w = None
    if not m:
        w = wk.search(line)
        if not w: continue
        t = float(w.group(2))
    else: t = float(m.group(2))
    if last is not None and len(cur) == 2:
        T += t - last
        me = [p for p in names if names[p] == who][0]
        if state[me] == 'R':
            acc[' + '.join(sorted(names.get(p, 'idle' if p == 0 else 'other') for p in cur.values()))] += t - last
    last = t
    if m:
        cpu, pp, ps, np_ = int(m.group(1)), int(m.group(3)), m.group(4), int(m.group(5))
        if pp in names: state[pp] = 'R' if ps.startswith('R') else 'S'
        if np_ in names: state[np_] = 'run'
        cur[cpu] = np_
    else:
        p = int(w.group(3))
        if p in names and state[p] in ('S', '?'): state[p] = 'R'
W = sum(acc.values())
print('%s runnable, not running: %.1f %% of the span' % (who, 100 * W / T))
for k, v in acc.most_common(12): print('  %5.1f %%  cpus running: %s' % (100 * v / W, k))
