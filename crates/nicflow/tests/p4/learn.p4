#include <core.p4>
#include <pna.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;
  bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header tcp_t { bit<16> sp; bit<16> dp; bit<32> seq; bit<32> ack; bit<16> fl; bit<16> win; bit<16> csum; bit<16> urg; }
struct headers_t { ethernet_t ethernet; ipv4_t ipv4; tcp_t tcp; }
struct meta_t { bit<64> t; }
struct empty_params_t { }
const ExpireTimeProfileId_t PROF = (ExpireTimeProfileId_t) 1;
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, in pna_main_parser_input_metadata_t istd) {
  state start { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.etherType) { 0x0800: ip; default: accept; } }
  state ip { pkt.extract(hdr.ipv4); transition select(hdr.ipv4.proto) { 6: tcp; default: accept; } }
  state tcp { pkt.extract(hdr.tcp); transition accept; }
}
control PreC(in headers_t hdr, inout meta_t meta, in pna_pre_input_metadata_t istd, inout pna_pre_output_metadata_t ostd) { apply {} }
control C(inout headers_t hdr, inout meta_t meta, in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
  action hit() { send_to_port((PortId_t) 2); }
  action miss() {
    if (hdr.tcp.isValid()) {
      add_entry(action_name = "hit", action_params = (empty_params_t) {}, expire_time_profile_id = PROF);
      send_to_port((PortId_t) 2);
    } else {
      drop_packet();
    }
  }
  table T {
    key = { hdr.ipv4.dst: exact; }
    actions = { @tableonly hit; @defaultonly miss; }
    add_on_miss = true;
    const default_action = miss;
  }
  apply {
    if (hdr.tcp.isValid()) { meta.t = istd.timestamp; }
    if (hdr.ipv4.isValid()) { T.apply(); }
  }
}
control D(packet_out pkt, in headers_t hdr, in meta_t meta, in pna_main_output_metadata_t ostd) {
  apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.tcp); }
}
PNA_NIC(P(), PreC(), C(), D()) main;
