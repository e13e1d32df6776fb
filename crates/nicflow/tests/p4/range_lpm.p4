// nicflow's own test program (issue 32): an lpm route (ranked by prefix
// length) and a service table with a range key and an lpm key (ranked by
// priority, as P4Runtime requires of range tables). The initial service
// entry puts a mask on the range key (the interpreter takes it): the one
// way a range key's examined bits are not all-or-nothing (here bit 4 of
// the destination port is free), which revalidation compares per key.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv4_t {
  bit<8> verIhl; bit<8> tos; bit<16> totalLen; bit<16> id; bit<16> frag;
  bit<8> ttl; bit<8> protocol; bit<16> csum; bit<32> src; bit<32> dst;
}
header ports_t { bit<16> sport; bit<16> dport; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; ports_t ports; }
struct metadata {}

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  state start {
    pkt.extract(hdr.ethernet);
    transition select(hdr.ethernet.etherType) { 0x0800: ip; default: accept; }
  }
  state ip {
    pkt.extract(hdr.ipv4);
    transition select(hdr.ipv4.protocol) { 6: l4; 17: l4; default: accept; }
  }
  state l4 { pkt.extract(hdr.ports); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply {} }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  action set_port(bit<9> port) { sm.egress_spec = port; }
  action deny() { mark_to_drop(sm); }
  action tag(bit<48> dmac) { hdr.ethernet.dst = dmac; }
  table route {
    key = { hdr.ipv4.dst: lpm; }
    actions = { set_port; deny; }
    default_action = set_port(0);
  }
  table svc {
    key = { hdr.ports.dport: range; hdr.ipv4.src: lpm; }
    actions = { tag; NoAction; }
    default_action = NoAction();
    entries = {
      priority=10: (0x0100 &&& 0xffef, _): tag(0x0200000000aa);
    }
  }
  apply {
    if (hdr.ipv4.isValid()) {
      route.apply();
      if (hdr.ports.isValid()) { svc.apply(); }
    } else {
      sm.egress_spec = 1;
    }
  }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply {} }
control CC(inout headers hdr, inout metadata meta) { apply {} }
control D(packet_out pkt, in headers hdr) {
  apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.ports); }
}
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
