import sys, re, collections
f = sys.argv[1]; names = {int(sys.argv[2]):'H1', int(sys.argv[3]):'H2', int(sys.argv[4]):'srv', int(sys.argv[5]):'cli'}
sw = re.compile(r'\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch: prev_comm=.* prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=.* next_pid=(\d+)')
wk = re.compile(r'^\s*(.+?)\s+(\d+) \[(\d+)\]\s+([\d.]+):\s+sched:sched_waking: comm=.* pid=(\d+) prio=\d+ target_cpu=(\d+)')
slept = {}; waking = {}
d = collections.defaultdict(list); waker = collections.defaultdict(collections.Counter); lat = collections.defaultdict(list)
span = [None, None]
for line in open(f):
    m = sw.search(line)
    if m:
        t = float(m.group(2)); pp, ps, np_ = int(m.group(3)), m.group(4), int(m.group(5))
        span[0] = span[0] or t; span[1] = t
        if pp in names and not ps.startswith('R'): slept[pp] = t
        if np_ in names and np_ in waking:
            lat[np_].append(t - waking.pop(np_))
        continue
    w = wk.search(line)
    if w:
        t = float(w.group(4)); p = int(w.group(5)); wp = int(w.group(2))
        if p in names and p in slept:
            d[p].append(t - slept.pop(p)); waking[p] = t
            waker[p][names.get(wp, 'irq/idle' if wp == 0 else 'other')] += 1
T = span[1] - span[0]
for p, n in names.items():
    x = sorted(d[p]); 
    if not x: continue
    q = lambda a: x[int(a * (len(x) - 1))] * 1e6
    l = sorted(lat[p]); ql = lambda a: l[int(a * (len(l) - 1))] * 1e6 if l else 0
    print('%s: %d sleeps/s, total %.1f %% of the span; sleep us p10 %.0f p50 %.0f p90 %.0f; <50us %.0f %%, <200us %.0f %%; woken by %s; wake->run us p50 %.0f p90 %.0f, sum %.1f %% of span' % (
        n, len(x) / T, 100 * sum(x) / T, q(.1), q(.5), q(.9), 100 * sum(1 for v in x if v < 50e-6) / len(x), 100 * sum(1 for v in x if v < 200e-6) / len(x), dict(waker[p]), ql(.5), ql(.9), 100 * sum(l) / T))
