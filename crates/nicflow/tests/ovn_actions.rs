//! OVN's actions on real frames through a bridge of in-memory ports
//! (issue 30): conjunctive matches (an address-set ACL of two dimensions,
//! first and cached passes alike), `clone(...)` sending a modified copy
//! while the original goes on unchanged, and OVN's ARP responder, which
//! turns a request into a reply in place with `set_field:2->arp_op`,
//! `move` and `push:`/`pop:` of the ARP addresses, then `in_port`. The
//! expected frames are what Open vSwitch's documented semantics give for
//! the same rules (ovs-fields(7) "Conjunctive Match Fields", ovs-actions(7)
//! `clone`, `push`/`pop`).

#[path = "common/membridge.rs"]
mod membridge;
use membridge::bridge;
use nicflow::port::mem::MemHandle;
use nicflow_packet::builder::FrameBuilder;
use std::net::Ipv4Addr;
use std::time::Instant;

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
const MAC_R: [u8; 6] = [0x02, 0, 0, 0, 0, 0x1];

fn tcp(src: [u8; 4], dport: u16) -> Vec<u8> {
    FrameBuilder::new(MAC_A, MAC_B)
        .ipv4(Ipv4Addr::from(src), Ipv4Addr::new(198, 19, 0, 1))
        .tcp(1000, dport, 0x02)
        .payload(b"ovn")
        .build()
}

fn sent(h: &[MemHandle]) -> Vec<usize> {
    h.iter().map(|h| h.take_tx().len()).collect()
}

#[test]
fn conjunctive_acl_matches_only_complete_conjunctions() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    for r in [
        // dimension 1: source address set; dimension 2: destination ports
        "priority=100,ip,nw_src=198.18.0.1,actions=conjunction(1,1/2)",
        "priority=100,ip,nw_src=198.18.0.2,actions=conjunction(1,1/2)",
        "priority=100,tcp,tp_dst=80,actions=conjunction(1,2/2)",
        "priority=100,tcp,tp_dst=443,actions=conjunction(1,2/2)",
        "priority=100,conj_id=1,ip,actions=output:p2",
        "priority=1,ip,actions=output:p3",
    ] {
        br.add_flow_str(r, now).unwrap();
    }
    for round in 0..3 {
        for (src, dport, want) in [
            ([198, 18, 0, 1], 80, [0, 1, 0]),
            ([198, 18, 0, 2], 443, [0, 1, 0]),
            ([198, 18, 0, 1], 443, [0, 1, 0]),
            ([198, 18, 0, 3], 80, [0, 0, 1]),
            ([198, 18, 0, 1], 22, [0, 0, 1]),
        ] {
            h[0].inject(&tcp(src, dport));
            br.run_until_idle(now);
            assert_eq!(sent(&h), want, "round {round}: {src:?} -> {dport}");
        }
    }
    // Later rounds were served by cached datapath flows: the masks were
    // wide enough to tell the cases apart, yet the cache was used.
    let s = br.dp_stats();
    assert!(s.upcalls <= 5, "{s:?}");
    let dump = br.dump_flows_text(now).join("\n");
    assert!(dump.contains("conjunction(1,2/2)"), "{dump}");
    assert!(dump.contains("conj_id=1,ip"), "{dump}");
}

#[test]
fn clone_sends_a_modified_copy_and_the_original_goes_on() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_flow_str(
        "in_port=p1,ip,actions=clone(mod_dl_dst:02:00:00:00:00:01,mod_nw_ttl:9,output:p2),output:p3",
        now,
    )
    .unwrap();
    for _ in 0..2 {
        h[0].inject(&tcp([198, 18, 0, 1], 80));
        br.run_until_idle(now);
        let copy = h[1].take_tx();
        let orig = h[2].take_tx();
        assert_eq!((copy.len(), orig.len()), (1, 1));
        assert_eq!(copy[0][0..6], MAC_R);
        assert_eq!(copy[0][14 + 8], 9, "ttl of the copy");
        assert_eq!(orig[0][0..6], MAC_B, "the original's destination");
        assert_eq!(orig[0][14 + 8], 64, "the original's ttl");
    }
}

#[test]
fn arp_responder_turns_a_request_into_a_reply() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    // OVN's ARP responder for 198.18.0.254 (MAC_R), as ovn-controller
    // writes it, with the address swap through the stack.
    br.add_flow_str(
        "in_port=p1,arp,arp_tpa=198.18.0.254,arp_op=1,actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],mod_dl_src:02:00:00:00:00:01,load:0x2->NXM_OF_ARP_OP[],move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],set_field:02:00:00:00:00:01->arp_sha,push:NXM_OF_ARP_SPA[],push:NXM_OF_ARP_TPA[],pop:NXM_OF_ARP_SPA[],pop:NXM_OF_ARP_TPA[],in_port",
        now,
    )
    .unwrap();
    let req = FrameBuilder::new(MAC_A, [0xff; 6])
        .arp(
            1,
            MAC_A,
            Ipv4Addr::new(198, 18, 0, 1),
            [0; 6],
            Ipv4Addr::new(198, 18, 0, 254),
        )
        .build();
    for _ in 0..2 {
        h[0].inject(&req);
        br.run_until_idle(now);
        let out = h[0].take_tx();
        assert_eq!(out.len(), 1);
        let r = &out[0];
        assert_eq!(r[0..6], MAC_A, "eth dst");
        assert_eq!(r[6..12], MAC_R, "eth src");
        assert_eq!(r[20..22], [0, 2], "reply opcode");
        assert_eq!(r[22..28], MAC_R, "sha");
        assert_eq!(r[28..32], [198, 18, 0, 254], "spa");
        assert_eq!(r[32..38], MAC_A, "tha");
        assert_eq!(r[38..42], [198, 18, 0, 1], "tpa");
        assert_eq!(h[1].take_tx().len(), 0);
    }
}

/// `check_pkt_larger`: the frame's length decides, packet by packet, also
/// for frames of one flow (the length is in no flow key, so the decision
/// is never cached).
#[test]
fn check_pkt_larger_decides_per_frame() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_flow_str(
        "in_port=p1,ip,actions=check_pkt_larger(100)->NXM_NX_REG0[0],resubmit(,1)",
        now,
    )
    .unwrap();
    br.add_flow_str("table=1,reg0=0x1/0x1,actions=output:p2", now)
        .unwrap();
    br.add_flow_str("table=1,actions=output:p3", now).unwrap();
    let frame = |payload: usize| {
        FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
            .udp(1000, 53)
            .payload(&vec![0u8; payload])
            .build()
    };
    for round in 0..3 {
        for (payload, want) in [
            (10, [0, 0, 1]),
            (200, [0, 1, 0]),
            (58, [0, 0, 1]),
            (59, [0, 1, 0]),
        ] {
            let f = frame(payload);
            h[0].inject(&f);
            br.run_until_idle(now);
            assert_eq!(sent(&h), want, "round {round}: {} bytes", f.len());
        }
    }
}
