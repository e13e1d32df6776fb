#!/usr/bin/python3
"""UDP sink for the switch end-to-end tests (crates/nicflow/tests/switch_e2e.rs).

Binds one UDP socket per port on 0.0.0.0, prints `ready` once bound, then
records the arrival time (time.time(), CLOCK_REALTIME: the same clock in
every network namespace) of every datagram. Stops at --timeout seconds, on
SIGTERM/SIGINT, or --grace seconds after --stop-after datagrams (all ports
together). Prints one JSON object on exit:

    {"counts": {"7777": 50, "9999": 0}, "times": {"7777": [...], ...}}

Plain sockets only: runs with any python3.
"""
import argparse
import json
import select
import signal
import socket
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--ports", required=True, help="comma-separated UDP ports")
ap.add_argument("--timeout", type=float, default=10.0)
ap.add_argument("--stop-after", type=int, default=0)
ap.add_argument("--grace", type=float, default=0.3)
a = ap.parse_args()

stop = False


def on_signal(_sig, _frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)

socks = {}
for p in a.ports.split(","):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind(("0.0.0.0", int(p)))
    s.setblocking(False)
    socks[s] = p
counts = {p: 0 for p in socks.values()}
times = {p: [] for p in socks.values()}
print("ready", flush=True)

deadline = time.monotonic() + a.timeout
done_at = None
while not stop:
    now = time.monotonic()
    if now >= deadline or (done_at is not None and now >= done_at):
        break
    try:
        r, _, _ = select.select(list(socks), [], [], 0.05)
    except InterruptedError:
        continue
    for s in r:
        while True:
            try:
                s.recv(65535)
            except BlockingIOError:
                break
            p = socks[s]
            counts[p] += 1
            times[p].append(time.time())
    if a.stop_after and done_at is None and sum(counts.values()) >= a.stop_after:
        done_at = time.monotonic() + a.grace

json.dump({"counts": counts, "times": times}, sys.stdout)
print(flush=True)
