#!/usr/bin/python3
"""Geneve peer for the overlay tests (the kernel here has no Geneve device).

    geneve.py send --iface u1 --src 198.18.21.1 --dst 198.18.21.2 --vni 5000 \
        --inner-src-mac M --inner-dst-mac M --inner-src 198.18.31.2 \
        --inner-dst 198.18.31.1 --dport 9999 --payload TEXT [--critical] [--count N] \
        [--opt0 N] [--critical-mapped]
    geneve.py decode PCAP
    geneve.py malformed --iface u1 --src 198.18.21.1 --dst 198.18.21.2 --vni 5000 \
        --inner-src-mac M --inner-dst-mac M --inner-src A --inner-dst A --dport P --payload T

`send` builds Ether/IP/UDP(6081)/GENEVE(vni, two option TLVs)/Ether/IP/UDP
with scapy's Geneve layer and sends it on IFACE to the MAC the kernel has
for DST (resolved with ARP first). Without --critical both options are
non-critical (the receiver may ignore them); with it the second option has
the critical bit set in its type (0x80), which a receiver that does not
understand it must drop (RFC 8926 section 3.5). --opt0 sets the 4-byte
value of the first option (class 0x0102, type 0x01; default 42);
--critical-mapped adds a third, critical option (type 0x83, 4 bytes, value
0x00c0ffee) that a receiver mapping it understands.

`malformed` sends four broken tunnel packets that would otherwise be
delivered (a receiver must count and drop each): Geneve with a wrong outer
UDP checksum, Geneve version 1, Geneve whose option length runs past the
packet, and VXLAN without the I flag (to port 4789). Prints {"sent": 4}.

`decode` reads a capture and prints one JSON object per Geneve packet:
{"vni", "options": [[class, type, data_hex]...], "outer_src", "outer_dst",
"sport", "inner_src", "inner_dst", "inner_dport", "payload"}.
"""
import argparse
import json
import sys

from scapy.all import ARP, Ether, IP, UDP, Raw, conf, rdpcap, sendp, srp
from scapy.contrib.geneve import GENEVE, GeneveOptions
from scapy.packet import bind_layers

conf.verb = 0
bind_layers(UDP, GENEVE, dport=6081)


def resolve(iface, src, dst):
    ans, _ = srp(
        Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, psrc=src, pdst=dst),
        iface=iface,
        timeout=2,
        retry=2,
    )
    for _, r in ans:
        return r[ARP].hwsrc
    sys.exit(f"no ARP reply for {dst} on {iface}")


def send(a):
    mac = resolve(a.iface, a.src, a.dst)
    opts = [
        GeneveOptions(classid=0x0102, type=0x01, data=a.opt0.to_bytes(4, "big")),
        GeneveOptions(
            classid=0x0102,
            type=(0x82 if a.critical else 0x02),
            data=b"\x11\x22\x33\x44\x55\x66\x77\x88",
        ),
    ]
    if a.critical_mapped:
        opts.append(GeneveOptions(classid=0x0102, type=0x83, data=b"\x00\xc0\xff\xee"))
    inner = (
        Ether(src=a.inner_src_mac, dst=a.inner_dst_mac)
        / IP(src=a.inner_src, dst=a.inner_dst)
        / UDP(sport=40000, dport=a.dport)
        / Raw(a.payload.encode())
    )
    crit = a.critical or a.critical_mapped
    g = GENEVE(vni=a.vni, proto=0x6558, options=opts, critical=1 if crit else 0)
    pkt = (
        Ether(dst=mac)
        / IP(src=a.src, dst=a.dst)
        / UDP(sport=50000, dport=6081)
        / g
        / inner
    )
    sendp(pkt, iface=a.iface, count=a.count)
    print(json.dumps({"sent": a.count, "len": len(pkt)}))


def malformed(a):
    mac = resolve(a.iface, a.src, a.dst)
    inner = (
        Ether(src=a.inner_src_mac, dst=a.inner_dst_mac)
        / IP(src=a.inner_src, dst=a.inner_dst)
        / UDP(sport=40000, dport=a.dport)
        / Raw(a.payload.encode())
    )
    outer = Ether(dst=mac) / IP(src=a.src, dst=a.dst)
    bad = []
    # Wrong UDP checksum (non-zero, so it must be verified).
    bad.append(outer / UDP(sport=50000, dport=6081, chksum=0x1234) / GENEVE(vni=a.vni, proto=0x6558) / inner)
    # Geneve version 1.
    bad.append(outer / UDP(sport=50000, dport=6081) / GENEVE(version=1, vni=a.vni, proto=0x6558) / inner)
    # Options length (in 4-byte words) beyond the packet: raw header bytes.
    hdr = bytes([0x3F, 0x00, 0x65, 0x58]) + a.vni.to_bytes(3, "big") + b"\x00"
    bad.append(outer / UDP(sport=50000, dport=6081) / Raw(hdr + b"\x00" * 8))
    # VXLAN without the I flag.
    vx = bytes([0x00, 0, 0, 0]) + a.vni.to_bytes(3, "big") + b"\x00"
    bad.append(outer / UDP(sport=50000, dport=4789) / Raw(vx + bytes(inner)))
    sendp(bad, iface=a.iface)
    print(json.dumps({"sent": len(bad)}))


def decode(a):
    for p in rdpcap(a.pcap):
        if GENEVE not in p:
            continue
        g = p[GENEVE]
        opts = [
            [o.classid, o.type, bytes(o.data).hex()] for o in (g.options or [])
        ]
        inner = g.payload
        out = {
            "vni": g.vni,
            "options": opts,
            "outer_src": p[IP].src,
            "outer_dst": p[IP].dst,
            "sport": p[UDP].sport,
        }
        if IP in inner:
            out["inner_src"] = inner[IP].src
            out["inner_dst"] = inner[IP].dst
            if UDP in inner:
                out["inner_dport"] = inner[UDP].dport
                out["payload"] = bytes(inner[UDP].payload).decode(errors="replace")
        print(json.dumps(out))


ap = argparse.ArgumentParser()
sub = ap.add_subparsers(dest="cmd", required=True)
s = sub.add_parser("send")
m = sub.add_parser("malformed")
for p in (s, m):
    for k in ["iface", "src", "dst", "inner_src_mac", "inner_dst_mac", "inner_src", "inner_dst", "payload"]:
        p.add_argument("--" + k.replace("_", "-"), dest=k, required=True)
    p.add_argument("--vni", type=int, required=True)
    p.add_argument("--dport", type=int, required=True)
s.add_argument("--count", type=int, default=1)
s.add_argument("--critical", action="store_true")
s.add_argument("--critical-mapped", dest="critical_mapped", action="store_true")
s.add_argument("--opt0", type=lambda v: int(v, 0), default=42)
d = sub.add_parser("decode")
d.add_argument("pcap")
a = ap.parse_args()
{"send": send, "malformed": malformed, "decode": decode}[a.cmd](a)
