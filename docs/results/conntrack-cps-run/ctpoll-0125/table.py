#!/usr/bin/env python3
"""Table of a sitting (ctpoll: off = NICFLOW_CT_SETUP_BPF=0, on = =1, main's daemon) (sit.sh's reports): per run, nicflow's and nftables' median conn/s,
the ratio, nicflow's machine/switch µs per connection, frames in userspace per connection
(engines: userspace packets / tracker connections created), and the set-up counters."""
import re, sys, glob, os
out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ctpoll/sit"
base = {}
rows = []
for d in sorted(glob.glob(f"{out}/firewall-*-*"), key=lambda p: (p.rsplit('-', 1)[1], ['off','on'].index(p.split('firewall-')[1].rsplit('-',1)[0]))):
    t, i = os.path.basename(d).split('-')[1:]
    r = open(f"{d}/report.md").read()
    def row(engine):
        m = re.search(r"^\| 32 \| " + re.escape(engine) + r" \| (\d+) \| (\d+-\d+) \| [^|]* \| ([\d.]+) \| ([\d.]+) \| ([\d.—]+) \| ([\d.—]+) \|", r, re.M)
        return m.groups() if m else None
    n, f = row("nicflow"), row("linux-bridge-nft")
    created = int(re.search(r"nicflow: connections: \d+ .*?created: (\d+)", r).group(1))
    user = int(re.search(r"userspace packets:(\d+)", r).group(1))
    tc = int(re.search(r"tc packets:(\d+)", r).group(1))
    ck = re.search(r"conntrack in kernel: (.*)", r).group(1)
    setup = re.search(r"set_up:(\d+)", ck).group(1)
    bpf = (re.search(r"bpf_set_up:(\d+)", ck) or [None, "—"])[1]
    if t == "off":
        base[i] = int(n[0])
    rows.append((t, i, n, f, created, user, tc, setup, bpf, ck))
print("| daemon | pair | conn/s (min-max) | vs off, same pair | nft conn/s | vs nft, same run | machine µs/conn | switch µs/conn | frames in userspace / conn | set up by daemon | by the program |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for t, i, n, f, created, user, tc, setup, bpf, ck in rows:
    nft, vs = (f[0], f"{int(n[0])/int(f[0]):.2f}x") if f else ("— (failed)", "—")
    print(f"| {t} | {i} | {n[0]} ({n[1]}) | {int(n[0])/base[i]:.2f}x | {nft} | {vs} | {n[3]} | {n[5]} | {user/created:.3f} | {setup} | {bpf} |")
print()
for t, i, n, f, created, user, tc, setup, bpf, ck in rows:
    print(f"{t}-{i}: created {created} userspace {user} tc {tc} | {ck}")
