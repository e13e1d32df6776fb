#!/usr/bin/env python3
"""From perf-{lb,firewall}-base.data (prof.sh): `perf script -F ip,sym` stacks -> samples per 1000
connections of a few inclusive frames (lb: 13440 conn/s, firewall 25221, 3 s each: the runs under perf),
and what the tick's walks spend their samples on."""
import collections, subprocess, sys
D = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ctlb2/prof"
CONNS = {"lb": 13440 * 3, "firewall": 25221 * 3}
FRAMES = ["Bridge::run_once", "Bridge::transmit", "__x64_sys_sendmmsg", "Datapath::process_batch",
          "Datapath::pass", "Datapath::recirculate", "Conntrack::process", "CtOffloads::setup",
          "CtOffloads::compose_setup", "ct_offload::cached", "CtOffloads::poll_setup", "Bridge::tick",
          "Datapath::expire", "Datapath::recirc_ids_in_use", "Datapath::install",
          "UpcallHandler>::upcall", "install_for_setup", "__x64_sys_bpf", "finish_task_switch"]
res = {}
for sc, n in CONNS.items():
    out = subprocess.run(["perf", "script", "-i", f"{D}/perf-{sc}-base.data", "-F", "ip,sym"],
                         capture_output=True, text=True).stdout
    c = collections.Counter()
    stacks = [[l.strip().split(" ", 1)[-1] for l in s.strip().split("\n") if l.strip()] for s in out.split("\n\n")]
    stacks = [s for s in stacks if s]
    for s in stacks:
        for f in FRAMES:
            if any(f in l for l in s):
                c[f] += 1
    res[sc] = (len(stacks), {f: c[f] / n * 1000 for f in FRAMES})
    if sc == "lb":
        t = collections.Counter()
        for s in stacks:
            for i, l in enumerate(s):
                if "Bridge::tick" in l:
                    t[s[i - 1][:70] if i else "(self)"] += 1
                    break
print("samples (~1 ms of daemon CPU each) per 1000 connections, inclusive; lb %d samples, firewall %d" % (res["lb"][0], res["firewall"][0]))
for f in FRAMES:
    print(f"{f:30s} lb {res['lb'][1][f]:6.2f}  firewall {res['firewall'][1][f]:6.2f}")
print("\nlb: Bridge::tick's callees (samples):")
for k, v in t.most_common(8):
    print(f"{v:4d} {k}")
