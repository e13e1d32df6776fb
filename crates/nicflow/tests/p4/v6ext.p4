#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv6_t { bit<4> version; bit<8> tc; bit<20> fl; bit<16> plen; bit<8> nh; bit<8> hl; bit<128> src; bit<128> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; }
struct metadata {}
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  state start { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.etherType) { 0x86dd: ip; default: accept; } }
  state ip { pkt.extract(hdr.ipv6); transition select(hdr.ipv6.nh) { 17: udp; default: accept; } }
  state udp { pkt.extract(hdr.udp); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply {} }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  apply { if (hdr.udp.isValid()) { sm.egress_spec = 2; } else { sm.egress_spec = 3; } }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply {} }
control CC(inout headers hdr, inout metadata meta) { apply {} }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv6); pkt.emit(hdr.udp); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
