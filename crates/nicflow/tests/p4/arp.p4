#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header arp_t { bit<16> htype; bit<16> ptype; bit<8> hlen; bit<8> plen; bit<16> op; }
struct headers { ethernet_t ethernet; arp_t arp; }
struct metadata {}
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  state start { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.etherType) { 0x0806: a; default: accept; } }
  state a { pkt.extract(hdr.arp); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply {} }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  apply { if (hdr.arp.htype == 1) { sm.egress_spec = 2; } else { sm.egress_spec = 3; } }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply {} }
control CC(inout headers hdr, inout metadata meta) { apply {} }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.arp); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
