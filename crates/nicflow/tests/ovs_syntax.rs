//! OVS rule syntax nicflow now reads (issue 28 item 11), run on real
//! frames through a bridge of in-memory ports: `output:REG[..]` outputs to
//! the port number in a register (also when the number came from the
//! packet, and cached correctly per value), `enqueue:P:Q` forwards to P,
//! `write_metadata:V/M` writes only the masked bits and the next table
//! sees them, `send_flow_rem` rules announce their expiry, `nw_frag=`
//! matches fragments, and OVS's `action=` spelling works.

#[path = "common/membridge.rs"]
mod membridge;
use membridge::bridge;
use nicflow::port::mem::MemHandle;
use nicflow_packet::builder::FrameBuilder;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

fn udp(dport: u16) -> Vec<u8> {
    FrameBuilder::new(MAC_A, MAC_B)
        .ipv4(IP_A, IP_B)
        .udp(1000, dport)
        .payload(b"ovs syntax")
        .build()
}

/// Frames each port sent since the last call.
fn sent(h: &[MemHandle]) -> Vec<usize> {
    h.iter().map(|h| h.take_tx().len()).collect()
}

#[test]
fn output_to_the_port_a_register_names() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    // The UDP destination port picks the output port, through reg0.
    br.add_flow_str(
        "in_port=p1,udp,action=move:NXM_OF_UDP_DST[]->NXM_NX_REG0[0..15],output:reg0[0..15]",
        now,
    )
    .unwrap();
    // A constant through the high half of reg1, in another table.
    br.add_flow_str(
        "in_port=p2,udp,actions=load:4->NXM_NX_REG1[16..31],resubmit(,1)",
        now,
    )
    .unwrap();
    br.add_flow_str("table=1,actions=output:NXM_NX_REG1[16..31]", now)
        .unwrap();
    for round in 0..3 {
        for (dport, want) in [
            (2, [0, 1, 0, 0]),
            (3, [0, 0, 1, 0]),
            (4, [0, 0, 0, 1]),
            // No port 9, and a value above 0xffff cannot be one: nothing.
            (9, [0, 0, 0, 0]),
            // The input port itself: skipped, as `output:1` would be.
            (1, [0, 0, 0, 0]),
        ] {
            h[0].inject(&udp(dport));
            br.run_until_idle(now);
            assert_eq!(sent(&h), want, "round {round}, udp dst {dport}");
        }
        h[1].inject(&udp(7));
        br.run_until_idle(now);
        assert_eq!(sent(&h), [0, 0, 0, 1], "round {round}, reg1[16..31]=4");
    }
    // Cached per value: each distinct destination port is its own
    // datapath flow (the register's source bits are in the mask).
    let s = br.dp_stats();
    assert_eq!(s.upcalls, 6, "{s:?}");
    let dump = br.dump_flows_text(now).join("\n");
    assert!(dump.contains("output:NXM_NX_REG0[0..15]"), "{dump}");
    assert!(dump.contains("output:NXM_NX_REG1[16..31]"), "{dump}");
}

#[test]
fn enqueue_forwards_to_its_port_and_shows_the_queue() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_flow_str("in_port=p1,actions=enqueue:p3:5", now)
        .unwrap();
    br.add_flow_str("in_port=p2,actions=enqueue(IN_PORT,1)", now)
        .unwrap();
    for _ in 0..2 {
        h[0].inject(&udp(53));
        h[1].inject(&udp(53));
        br.run_until_idle(now);
        assert_eq!(sent(&h), [0, 1, 1]);
    }
    let dump = br.dump_flows_text(now).join("\n");
    assert!(dump.contains("actions=enqueue:p3:5"), "{dump}");
    assert!(dump.contains("actions=enqueue:IN_PORT:1"), "{dump}");
}

#[test]
fn write_metadata_writes_the_masked_bits_for_the_next_table() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_flow_str(
        "in_port=p1,udp,tp_dst=53,actions=write_metadata:0x1/0xff,goto_table:1",
        now,
    )
    .unwrap();
    // Bits outside the mask keep what an earlier action put there.
    br.add_flow_str(
        "in_port=p1,udp,tp_dst=54,actions=set_field:0xff01->metadata,write_metadata:0x100/0xff00,goto_table:1",
        now,
    )
    .unwrap();
    br.add_flow_str("table=1,metadata=0x1,actions=output:p2", now)
        .unwrap();
    br.add_flow_str("table=1,metadata=0x101,actions=output:p3", now)
        .unwrap();
    br.add_flow_str("table=1,priority=0,actions=output:p4", now)
        .unwrap();
    for _ in 0..2 {
        h[0].inject(&udp(53));
        br.run_until_idle(now);
        assert_eq!(sent(&h), [0, 1, 0, 0], "metadata 0x1");
        h[0].inject(&udp(54));
        br.run_until_idle(now);
        assert_eq!(sent(&h), [0, 0, 1, 0], "metadata 0xff01 -> 0x101");
    }
    let dump = br.dump_flows_text(now).join("\n");
    assert!(
        dump.contains("actions=write_metadata:0x1/0xff,goto_table:1"),
        "{dump}"
    );
}

#[test]
fn send_flow_rem_rules_announce_their_expiry() {
    let (mut br, _h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str(
        "cookie=0x77,hard_timeout=1,send_flow_rem,in_port=p1,actions=output:p2",
        now,
    )
    .unwrap();
    br.add_flow_str(
        "cookie=0x78,hard_timeout=1,in_port=p2,actions=output:p1",
        now,
    )
    .unwrap();
    let dump = br.dump_flows_text(now).join("\n");
    assert!(dump.contains("send_flow_rem "), "{dump}");
    br.tick(now + Duration::from_secs(2));
    let gone = br.take_flow_removed();
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].cookie, 0x77);
    assert!(br.dump_flows_text(now).is_empty());
}

#[test]
fn nw_frag_matches_fragments() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_flow_str("priority=10,ip,nw_frag=first,action=output:p2", now)
        .unwrap();
    br.add_flow_str("priority=10,ip,nw_frag=later,action=output:p3", now)
        .unwrap();
    br.add_flow_str("priority=5,ip,nw_frag=no,action=output:p4", now)
        .unwrap();
    let frag = |offset: u16, more: bool| {
        FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(IP_A, IP_B)
            .ipv4_fragment(offset, more)
            .udp(1000, 53)
            .payload(b"fragment")
            .build()
    };
    h[0].inject(&frag(0, true));
    br.run_until_idle(now);
    assert_eq!(sent(&h), [0, 1, 0, 0], "first fragment");
    h[0].inject(&frag(100, false));
    br.run_until_idle(now);
    assert_eq!(sent(&h), [0, 0, 1, 0], "later fragment");
    h[0].inject(&udp(53));
    br.run_until_idle(now);
    assert_eq!(sent(&h), [0, 0, 0, 1], "not a fragment");
}
