#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv4_t { bit<4> version; bit<4> ihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;
  bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; }
struct metadata {}
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  state start { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.etherType) { 0x0800: ip; default: accept; } }
  state ip { pkt.extract(hdr.ipv4); transition select(hdr.ipv4.proto) { 17: udp; default: accept; } }
  state udp { pkt.extract(hdr.udp); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply {} }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  apply { if (hdr.udp.isValid() && hdr.udp.dport == 80) { sm.egress_spec = 2; } else { sm.egress_spec = 3; } }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply {} }
control CC(inout headers hdr, inout metadata meta) { apply {} }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.udp); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
