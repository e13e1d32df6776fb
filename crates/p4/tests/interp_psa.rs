//! PSA paths the corpus has no oracle for: multicast through the packet
//! replication engine (egress sees NORMAL_MULTICAST and the instance) and
//! resubmission (ingress sees RESUBMIT).

mod interp_support;
use interp_support::load_text;
use nicflow_p4::Pipeline;

const PROG: &str = r#"
#include <core.p4>
#include <bmv2/psa.p4>
struct EMPTY { };
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
struct headers_t { ethernet_t ethernet; }
struct metadata_t { }
parser IP(packet_in pkt, out headers_t hdr, inout metadata_t m,
          in psa_ingress_parser_input_metadata_t istd, in EMPTY r, in EMPTY c) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control IC(inout headers_t hdr, inout metadata_t m,
           in psa_ingress_input_metadata_t istd, inout psa_ingress_output_metadata_t ostd) {
    apply {
        if (hdr.ethernet.etherType == 1) {
            multicast(ostd, (MulticastGroup_t) 7);
        } else if (istd.packet_path == PSA_PacketPath_t.RESUBMIT) {
            hdr.ethernet.dst = 0xaa;
            send_to_port(ostd, (PortId_t) 3);
        } else {
            ostd.drop = false;
            ostd.resubmit = true;
        }
    }
}
control ID(packet_out pkt, out EMPTY a, out EMPTY b, out EMPTY c, inout headers_t hdr,
           in metadata_t m, in psa_ingress_output_metadata_t istd) {
    apply { pkt.emit(hdr.ethernet); }
}
parser EP(packet_in pkt, out headers_t hdr, inout metadata_t m,
          in psa_egress_parser_input_metadata_t istd, in EMPTY n, in EMPTY c1, in EMPTY c2) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control EC(inout headers_t hdr, inout metadata_t m,
           in psa_egress_input_metadata_t istd, inout psa_egress_output_metadata_t ostd) {
    apply {
        if (istd.packet_path == PSA_PacketPath_t.NORMAL_MULTICAST) {
            hdr.ethernet.src = (bit<48>)(bit<16>)istd.instance;
        }
    }
}
control ED(packet_out pkt, out EMPTY a, out EMPTY b, inout headers_t hdr, in metadata_t m,
           in psa_egress_output_metadata_t istd, in psa_egress_deparser_input_metadata_t edstd) {
    apply { pkt.emit(hdr.ethernet); }
}
IngressPipeline(IP(), IC(), ID()) ip;
EgressPipeline(EP(), EC(), ED()) ep;
PSA_Switch(ip, PacketReplicationEngine(), ep, BufferingQueueingEngine()) main;
"#;

fn load() -> Option<Pipeline> {
    load_text("psa.p4", PROG)
}

#[test]
fn multicast_copies_carry_their_instance() {
    let Some(mut p) = load() else { return };
    p.multicast_group_set(7, vec![(1, 10), (2, 20)]);
    let mut pkt = vec![0u8; 14];
    pkt[13] = 1;
    let o = p.process(0, &pkt, 1);
    assert!(o.trace.error.is_none(), "{:?}", o.trace.error);
    assert_eq!(o.outputs.len(), 2);
    assert_eq!(o.outputs[0].0, 1);
    assert_eq!(o.outputs[0].1[11], 10);
    assert_eq!(o.outputs[1].0, 2);
    assert_eq!(o.outputs[1].1[11], 20);
    assert_eq!(o.trace.uncacheable.as_deref(), Some("p4-multicast"));
}

#[test]
fn resubmitted_packets_see_the_resubmit_path() {
    let Some(mut p) = load() else { return };
    let o = p.process(0, &[0u8; 14], 1);
    assert!(o.trace.error.is_none(), "{:?}", o.trace.error);
    assert_eq!(o.outputs.len(), 1);
    assert_eq!(o.outputs[0].0, 3);
    assert_eq!(o.outputs[0].1[5], 0xaa);
    assert_eq!(o.trace.uncacheable.as_deref(), Some("p4-resubmit"));
}
