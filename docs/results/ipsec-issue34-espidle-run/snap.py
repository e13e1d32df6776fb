import sys
# usage: snap.py DIR : /proc deltas over the 4 s between snap0.txt and snap1.txt (meas.sh):
# per process (H1, H2, iperf3 server, client, in pids.txt order) % of a CPU running, % waiting
# for a CPU (schedstat), voluntary and involuntary switches per second; the machine's idle %.
d = sys.argv[1]
a = [l.split() for l in open(d + '/snap0.txt')]; b = [l.split() for l in open(d + '/snap1.txt')]
T = 4.0
for x, y, n in zip(a[:-1], b[:-1], ['H1', 'H2', 'srv', 'cli']):
    f = [int(y[i]) - int(x[i]) for i in range(1, 6)]
    print('%-4s run %5.1f %%  wait %5.1f %%  voluntary %6.0f/s  involuntary %6.0f/s' % (n, f[0] / T / 1e7, f[1] / T / 1e7, f[3] / T, f[4] / T))
s0 = [int(v) for v in a[-1][1:]]; s1 = [int(v) for v in b[-1][1:]]
dd = [q - p for p, q in zip(s0, s1)]
print('machine idle %.1f %% of 2 CPUs (user %d sys %d idle %d softirq %d ticks)' % (100 * dd[3] / sum(dd), dd[0], dd[2], dd[3], dd[6]))
