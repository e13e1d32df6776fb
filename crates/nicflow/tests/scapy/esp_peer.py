#!/usr/bin/python3
"""An independent VXLAN-over-ESP peer for tests/ipsec.rs, built on scapy's
own ESP (scapy.layers.ipsec.SecurityAssociation, AES-GCM).

`serve`: sniff ESP from nicflow on IFACE, decrypt it with scapy's SA,
answer every inner ICMP echo request with a reply sent back through
VXLAN + ESP (scapy's SA, its own sequence numbers), and print one JSON
line per decrypted packet (inner ICMP type and payload) to stdout.

`attack`: send the packets nicflow must drop: a replay of a valid packet,
a tampered ICV, a truncated packet, an unknown SPI, one far left of the
window, a plaintext VXLAN packet, and one valid packet (with a payload
the test looks for) after all of them.
"""

import argparse
import json
import sys

from scapy.all import Ether, IP, UDP, ICMP, Raw, conf, sendp, sniff
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.vxlan import VXLAN


def sa(spi, key, args, seq=1):
    kw = dict(crypt_algo="AES-GCM", crypt_key=bytes.fromhex(key), auth_algo="NULL")
    if args.tunnel:
        kw["tunnel_header"] = IP(src=args.local, dst=args.remote)
    if args.udp:
        kw["nat_t_header"] = UDP(sport=4500, dport=4500)
    if args.esn:
        kw["esn_en"] = True
        kw["esn"] = 0
    s = SecurityAssociation(ESP, spi=spi, seq_num=seq, **kw)
    return s


def seal(s, pkt):
    """s.encrypt(pkt), with the UDP length of NAT-T packets right (scapy
    2.5 computes it before the ESP payload is attached, leaving 8)."""
    out = s.encrypt(pkt)
    if UDP in out and out[UDP].dport == 4500:
        out[UDP].len = 8 + len(bytes(out[UDP].payload))
        out[UDP].chksum = 0
    return IP(bytes(out))


def outer(args, inner_frame):
    return IP(src=args.local, dst=args.remote) / UDP(sport=54321, dport=4789) / VXLAN(
        vni=args.vni
    ) / inner_frame


def wire(args, ip_pkt):
    return Ether(src=args.mac, dst=args.remote_mac) / ip_pkt


def reply_for(inner):
    ip = inner[IP]
    icmp = inner[ICMP]
    return (
        Ether(src=inner[Ether].dst, dst=inner[Ether].src)
        / IP(src=ip.dst, dst=ip.src, ttl=64)
        / ICMP(type=0, id=icmp.id, seq=icmp.seq)
        / Raw(bytes(icmp.payload))
    )


def esp_of(pkt):
    """The IP packet carrying ESP (proto 50 or UDP 4500), or None."""
    if IP not in pkt:
        return None
    ip = pkt[IP]
    if ip.proto == 50:
        return ip
    if UDP in ip and ip[UDP].dport == 4500 and len(bytes(ip[UDP].payload)) >= 8:
        return ip
    return None


def serve(args):
    rx = sa(args.spi_in, args.key_in, args)
    tx = sa(args.spi_out, args.key_out, args)
    got = [0]

    def handle(pkt):
        ip = esp_of(pkt)
        if ip is None or ip.src != args.remote or ip.dst != args.local:
            return
        try:
            plain = rx.decrypt(IP(bytes(ip)))
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            print(json.dumps({"error": str(e)}), flush=True)
            return
        if args.tunnel:
            plain = plain[IP]
        if VXLAN not in plain:
            print(json.dumps({"error": "no vxlan inside"}), flush=True)
            return
        inner = plain[VXLAN].payload
        line = {"vni": plain[VXLAN].vni}
        if ICMP in inner:
            line["icmp_type"] = inner[ICMP].type
            line["payload"] = bytes(inner[ICMP].payload).hex()
            if inner[ICMP].type == 8:
                enc = seal(tx, outer(args, reply_for(inner)))
                sendp(wire(args, enc), iface=args.iface, verbose=False)
        print(json.dumps(line), flush=True)
        got[0] += 1

    sniff(
        iface=args.iface,
        filter="ip proto 50 or udp port 4500",
        prn=handle,
        timeout=args.seconds,
        store=False,
    )


def attack(args):
    """Packets nicflow must drop, then one it must deliver."""
    tx = sa(args.spi_out, args.key_out, args, seq=args.seq)

    def datagram(payload):
        inner = (
            Ether(src=args.inner_src_mac, dst=args.inner_dst_mac)
            / IP(src=args.inner_src, dst=args.inner_dst)
            / UDP(sport=9999, dport=9999)
            / Raw(payload.encode())
        )
        return outer(args, inner)

    def send(ip_pkt):
        sendp(wire(args, ip_pkt), iface=args.iface, verbose=False)

    # A valid packet, then its replay.
    good = seal(tx, datagram("first-valid"))
    send(good)
    send(good)
    # Tampered ICV (last byte).
    t = bytearray(bytes(seal(tx, datagram("tampered-must-drop"))))
    t[-1] ^= 0x5A
    send(IP(bytes(t)))
    # Truncated: the ESP header and part of the IV only.
    raw = bytes(seal(tx, datagram("truncated-must-drop")))
    cut = IP(raw[: 20 + (8 if args.udp else 0) + 12])
    cut.len = None
    cut.chksum = None
    if UDP in cut:
        cut[UDP].len = None
        cut[UDP].chksum = 0
    send(IP(bytes(cut)))
    # Unknown SPI (valid packet otherwise).
    other = sa(args.spi_out + 1, args.key_out, args, seq=tx.seq_num)
    send(seal(other, datagram("wrong-spi-must-drop")))
    # Far left of the window: a fresh SA state at a low sequence number
    # after the receiver moved on (the caller starts `seq` high).
    old = sa(args.spi_out, args.key_out, args, seq=1)
    send(seal(old, datagram("old-must-drop")))
    # Plaintext VXLAN from the protected remote.
    send(datagram("plaintext-must-drop"))
    # And a valid one after all that.
    send(seal(tx, datagram("last-valid")))
    print(json.dumps({"sent": 8}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["serve", "attack"])
    p.add_argument("--iface", required=True)
    p.add_argument("--mac", required=True)
    p.add_argument("--remote-mac", required=True)
    p.add_argument("--local", required=True, help="this peer's outer IPv4")
    p.add_argument("--remote", required=True, help="nicflow's outer IPv4")
    p.add_argument("--vni", type=int, required=True)
    p.add_argument("--spi-in", type=lambda s: int(s, 0), required=True)
    p.add_argument("--key-in", required=True)
    p.add_argument("--spi-out", type=lambda s: int(s, 0), required=True)
    p.add_argument("--key-out", required=True)
    p.add_argument("--tunnel", action="store_true")
    p.add_argument("--udp", action="store_true")
    p.add_argument("--esn", action="store_true")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--seq", type=int, default=1000)
    p.add_argument("--inner-src-mac", default="02:00:00:00:b1:01")
    p.add_argument("--inner-dst-mac", default="02:00:00:00:a1:01")
    p.add_argument("--inner-src", default="198.18.40.2")
    p.add_argument("--inner-dst", default="198.18.40.1")
    args = p.parse_args()
    conf.verb = 0
    if args.cmd == "serve":
        serve(args)
    else:
        attack(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
