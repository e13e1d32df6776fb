//! `learn(...)` through a bridge of memory ports: a packet that runs it
//! adds the rule it describes (values from the packet, constants,
//! `load`s, `output` to its input port), the learned rule forwards the
//! replies, a datapath flow cached before the rule existed is revalidated,
//! and the learning translation itself is never cached (every packet
//! learns again, as OVS re-runs a learn from its xlate cache).

use nicflow_dataplane::bridge::Bridge;
use nicflow_dataplane::datapath::DatapathConfig;
use nicflow_packet::builder::FrameBuilder;
use nicflow_port::mem::{MemHandle, MemPort};
use std::net::Ipv4Addr;
use std::time::Instant;

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

fn udp(src: [u8; 6], dst: [u8; 6], sip: u8, dip: u8, dport: u16) -> Vec<u8> {
    FrameBuilder::new(src, dst)
        .ipv4(
            Ipv4Addr::new(198, 18, 0, sip),
            Ipv4Addr::new(198, 18, 0, dip),
        )
        .udp(4000, dport)
        .payload(b"learn")
        .build()
}

fn bridge() -> (Bridge, MemHandle, MemHandle) {
    let mut br = Bridge::new("br0", DatapathConfig::default());
    let (p1, h1) = MemPort::new("p1");
    let (p2, h2) = MemPort::new("p2");
    br.add_port(Box::new(p1)).unwrap();
    br.add_port(Box::new(p2)).unwrap();
    let now = Instant::now();
    for r in [
        "table=0,priority=0,actions=drop",
        // From p1: learn how to send replies back, then forward.
        "table=0,priority=10,in_port=p1,udp,actions=learn(table=1,idle_timeout=60,cookie=0x77,\
         eth_type=0x800,NXM_OF_IP_DST[]=NXM_OF_IP_SRC[],nw_proto=17,udp_src=53,\
         load:0x5->NXM_NX_REG0[],output:NXM_OF_IN_PORT[]),output:p2",
        // From p2: whatever table 1 learned.
        "table=0,priority=10,in_port=p2,udp,actions=resubmit(,1)",
    ] {
        br.add_flow_str(r, now).unwrap();
    }
    (br, h1, h2)
}

fn run(br: &mut Bridge) {
    let now = Instant::now();
    br.begin_round(now);
    while br.run_once(now) > 0 {}
}

#[test]
fn learned_rule_forwards_replies() {
    let (mut br, h1, h2) = bridge();
    let reply = udp(B, A, 2, 1, 4000);
    let reply_53 = FrameBuilder::new(B, A)
        .ipv4(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1))
        .udp(53, 4000)
        .payload(b"answer")
        .build();
    // Before anything was learned the reply is dropped (and that decision
    // is cached).
    h2.inject(&reply_53);
    run(&mut br);
    assert!(h1.take_tx().is_empty());
    // A query from p1 learns the rule and goes on to p2.
    let query = udp(A, B, 1, 2, 53);
    h1.inject(&query);
    run(&mut br);
    assert_eq!(h2.take_tx(), vec![query.clone()]);
    let flows = br.dump_flows_text(Instant::now()).join("\n");
    assert!(
        flows.contains(
            "cookie=0x77, table=1, idle_timeout=60, udp,nw_dst=198.18.0.1,tp_src=53 actions=load:0x5->NXM_NX_REG0[],output:p1"
        ),
        "{flows}"
    );
    // The reply from port 53 now goes back to p1 (the cached drop was
    // revalidated); another source port still matches nothing.
    h2.inject(&reply_53);
    h2.inject(&reply);
    run(&mut br);
    assert_eq!(h1.take_tx(), vec![reply_53]);
    // The learning translation is not cached: a second query is another
    // upcall and learns again (the same rule: nothing else changes).
    let upcalls = br.dp_stats().upcalls;
    h1.inject(&query);
    run(&mut br);
    assert_eq!(h2.take_tx(), vec![query]);
    assert_eq!(br.dp_stats().upcalls, upcalls + 1);
    let n = br
        .dump_flows_text(Instant::now())
        .iter()
        .filter(|l| l.contains("cookie=0x77, table=1"))
        .count();
    assert_eq!(n, 1);
}
