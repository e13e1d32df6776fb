#!/usr/bin/python3
"""Scapy's ESP as an independent peer for nicflow-ipsec's interop test.

Reads one JSON request on stdin:

    {"op": "seal" | "open", "spi": int, "key": hex (key || salt),
     "mode": "transport" | "tunnel", "src": ipv4, "dst": ipv4 (tunnel only),
     "esn_en": bool, "packets": [{"seq": int (low 32 bits), "esn": int
     (high 32 bits), "data": hex}]}

seal: each `data` is an IPv4 packet; it is protected with AES-GCM (ICV 16,
auth NULL as RFC 4106 wants) in transport mode, or wrapped whole behind an
outer src->dst header in tunnel mode. open: each `data` is an outer IPv4
packet carrying ESP; the answer is the packet scapy rebuilds (transport:
the IP header with the original protocol; tunnel: the inner packet).

A JSON list of such requests is handled in order, so one interpreter start
serves a whole test.

Writes one line per packet: "ok <hex>" or "err <reason>", so that one bad
packet does not hide the verdicts on the others.
"""

import json
import sys

from scapy.layers.inet import IP
from scapy.layers.ipsec import ESP, SecurityAssociation


def sa_for(req, esn):
    kw = {}
    if req["mode"] == "tunnel":
        kw["tunnel_header"] = IP(src=req["src"], dst=req["dst"])
    return SecurityAssociation(
        ESP,
        spi=req["spi"],
        crypt_algo="AES-GCM",
        crypt_key=bytes.fromhex(req["key"]),
        auth_algo="NULL",
        auth_key=None,
        esn_en=bool(req.get("esn_en")),
        esn=esn,
        **kw,
    )


def main():
    reqs = json.load(sys.stdin)
    if isinstance(reqs, dict):
        reqs = [reqs]
    for req in reqs:
        handle(req)
    sys.stdout.flush()


def handle(req):
    for p in req["packets"]:
        try:
            # A fresh SA per packet: scapy keeps no receive state, and its
            # `seq_num or self.seq_num` would turn an explicit 0 (the low
            # half of 2^32 under ESN) into its own counter.
            sa = sa_for(req, p.get("esn", 0))
            data = IP(bytes.fromhex(p["data"]))
            if req["op"] == "seal":
                sa.seq_num = p["seq"]
                out = sa.encrypt(data)
            elif req["op"] == "open":
                out = sa.decrypt(data)
            else:
                raise ValueError("unknown op %r" % req["op"])
            print("ok " + bytes(out).hex())
        except Exception as e:  # noqa: BLE001 - the verdict is the output
            print("err %s: %s" % (type(e).__name__, str(e).replace("\n", " ")))


if __name__ == "__main__":
    main()
