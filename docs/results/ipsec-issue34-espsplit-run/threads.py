"""Each daemon thread's CPU over prof.sh's 6 s (python3 threads.py DIR): from the T lines of
snap0/snap1 (/proc/PID/task/TID/stat utime+stime, clock ticks of 10 ms)."""
import sys
d = sys.argv[1]
names = {}
for l in open(d + '/pids.txt'):
    p, cmd = l.split(' ', 1)
    if 'h1.' in cmd: names[p] = 'H1'
    elif 'h2.' in cmd: names[p] = 'H2'
def snap(f):
    r = {}
    for l in open(f):
        x = l.split()
        if x[0] == 'T': r[(x[1], x[2], x[3])] = int(x[4])
    return r
a, b = snap(d + '/snap0.txt'), snap(d + '/snap1.txt')
for k in sorted(b):
    if k in a and b[k] - a[k] > 0:
        print(f'{names.get(k[0], k[0])} tid {k[1]} {k[2]}: {100 * (b[k] - a[k]) / 600:.1f} % of a CPU')
