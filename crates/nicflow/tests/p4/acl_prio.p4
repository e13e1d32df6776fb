// nicflow's own test program (issue 32): a ternary ACL ranked by
// priority. Its initial entries are not `const`: they sit first in table
// order (a runtime entry of the same priority loses the tie to them) and
// the control plane may add, modify and delete entries beside them.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv4_t {
  bit<8> verIhl; bit<8> tos; bit<16> totalLen; bit<16> id; bit<16> frag;
  bit<8> ttl; bit<8> protocol; bit<16> csum; bit<32> src; bit<32> dst;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; }
struct metadata {}

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  state start {
    pkt.extract(hdr.ethernet);
    transition select(hdr.ethernet.etherType) { 0x0800: ip; default: accept; }
  }
  state ip { pkt.extract(hdr.ipv4); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply {} }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  action fwd(bit<9> port, bit<48> dmac) { sm.egress_spec = port; hdr.ethernet.dst = dmac; }
  action deny() { mark_to_drop(sm); }
  table acl {
    key = {
      hdr.ipv4.src: ternary;
      hdr.ipv4.dst: ternary;
      hdr.ipv4.protocol: ternary;
    }
    actions = { fwd; deny; }
    default_action = fwd(0, 0x0200000000ff);
    entries = {
      priority=10: (0xc6120000 &&& 0xffff0000, _, _): fwd(1, 0x020000000001);
      priority=5: (_, 0xc6130000 &&& 0xffff0000, 6): fwd(2, 0x020000000002);
    }
  }
  apply {
    if (hdr.ipv4.isValid()) { acl.apply(); } else { sm.egress_spec = 2; }
  }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply {} }
control CC(inout headers hdr, inout metadata meta) { apply {} }
control D(packet_out pkt, in headers hdr) {
  apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); }
}
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
