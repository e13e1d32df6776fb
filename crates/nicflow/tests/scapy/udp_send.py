#!/usr/bin/python3
"""UDP sender for the switch end-to-end tests.

Sends from one fixed source port, so every datagram to one destination port
belongs to one flow (one 5-tuple): the switch should upcall once per flow.

    udp_send.py DST --dport 7777 --sport 40000 --count 50 [--size 32]
    udp_send.py DST --dport 7777 --sport 40000 --duration 3 --interval 0.01

Prints one JSON object: {"sent": n, "errors": e, "first": t0, "last": t1}
(times from time.time()). Plain sockets only: runs with any python3.
"""
import argparse
import json
import socket
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("dst")
ap.add_argument("--dport", type=int, required=True)
ap.add_argument("--sport", type=int, required=True)
ap.add_argument("--count", type=int, default=0)
ap.add_argument("--duration", type=float, default=0.0)
ap.add_argument("--interval", type=float, default=0.0)
ap.add_argument("--size", type=int, default=32)
a = ap.parse_args()

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", a.sport))
payload = b"n" * a.size
sent = errors = 0
first = last = None
end = time.monotonic() + a.duration
i = 0
while True:
    if a.count and i >= a.count:
        break
    if not a.count and time.monotonic() >= end:
        break
    i += 1
    try:
        s.sendto(payload, (a.dst, a.dport))
        sent += 1
        last = time.time()
        if first is None:
            first = last
    except OSError:
        errors += 1
    if a.interval:
        time.sleep(a.interval)
json.dump({"sent": sent, "errors": errors, "first": first, "last": last}, sys.stdout)
print(flush=True)
