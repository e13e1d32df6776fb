#!/usr/bin/python3
"""Malformed frames for the switch end-to-end tests; needs scapy, so run it
with the system interpreter (/usr/bin/python3), inside a lab host:

    malformed.py IFACE DST_MAC COUNT

Sends COUNT copies of each malformed frame below out of IFACE with scapy's
`sendp`, from IFACE's own MAC to DST_MAC, IPv4 198.18.0.1 -> 198.18.0.2,
and prints one JSON object: for each case (named after the switch's parse
drop reason it should be counted under) the frame length and how many were
sent.

Runts (< 14 bytes) are special: Linux refuses to send a frame shorter than
the device's minimum header length on an Ethernet device (EINVAL from
dev_validate_header), and scapy then retries with the frame zero-padded to
60 bytes, which is a well-formed 802.3 frame. The script first tries a raw
AF_PACKET send of the runt itself and reports `kernel_refused`; when the
kernel refuses, the frames that reach the switch are the padded ones and no
runt drop is expected.
"""
import json
import socket
import sys

from scapy.all import IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw, conf, sendp

conf.verb = 0
iface, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(f"/sys/class/net/{iface}/address") as f:
    src = f.read().strip()

eth = Ether(src=src, dst=dst)
ip = dict(src="198.18.0.1", dst="198.18.0.2")
good_ip = bytes(IP(**ip) / UDP(sport=1111, dport=2222) / Raw(b"x" * 8))
good_ip6 = bytes(IPv6(src="2001:db8::1", dst="2001:db8::2", nh=59))

cases = {
    # 12 of the 20 IPv4 header bytes.
    "truncated_ipv4": Ether(src=src, dst=dst, type=0x0800) / Raw(good_ip[:12]),
    # Total length 1000, frame carries 36 bytes of IP.
    "bad_ipv4_total_len": eth / IP(len=1000, **ip) / UDP(sport=1111, dport=2222) / Raw(b"x" * 8),
    # IHL 4 (16 bytes) is below the minimum of 5.
    "bad_ipv4_header_len": eth / IP(ihl=4, **ip) / Raw(b"x" * 30),
    # Version 5 under EtherType IPv4.
    "bad_ipv4_version": eth / IP(version=5, **ip) / Raw(b"x" * 30),
    # Protocol TCP, 10 bytes of IP payload.
    "truncated_tcp": eth / IP(proto=6, **ip) / Raw(b"\x00" * 10),
    # TCP data offset 3 (< 5).
    "bad_tcp_data_offset": eth / IP(**ip) / TCP(sport=1111, dport=2222, dataofs=3),
    # UDP length 200, IP payload 16.
    "bad_udp_length": eth / IP(**ip) / UDP(sport=1111, dport=2222, len=200) / Raw(b"x" * 8),
    # Three stacked 802.1Q tags (the switch steps over at most two).
    "too_many_vlan_tags": eth / Dot1Q(vlan=10) / Dot1Q(vlan=20) / Dot1Q(vlan=30)
    / IP(**ip) / UDP(sport=1111, dport=2222) / Raw(b"x" * 8),
    # 20 of the 40 IPv6 header bytes.
    "truncated_ipv6": Ether(src=src, dst=dst, type=0x86DD) / Raw(good_ip6[:20]),
    # 10 bytes: shorter than an Ethernet header.
    "runt": Raw(bytes(eth)[:10]),
}

out = {}
for name, frame in cases.items():
    out[name] = {"len": len(bytes(frame)), "sent": n}

# Does the kernel let a runt out at all?
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
try:
    s.send(bytes(cases["runt"]))
    refused = None
    out["runt"]["raw_sent"] = 1
except OSError as e:
    refused = str(e)
s.close()
out["runt"]["kernel_refused"] = refused

for name, frame in cases.items():
    sendp([frame] * n, iface=iface, verbose=False)

json.dump(out, sys.stdout)
print(flush=True)
