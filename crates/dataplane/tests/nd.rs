//! IPv6 neighbor discovery fields through the whole userspace pipeline:
//! frames built byte by byte go into a bridge of memory ports, the rules
//! match `nd_target`/`nd_sll`/`nd_tll` and rewrite them, and what comes
//! out must be the frame written by hand, every checksum valid, on the
//! first packet (slow path) and on the next (cached datapath flow).

use nicflow_dataplane::bridge::Bridge;
use nicflow_dataplane::datapath::DatapathConfig;
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use nicflow_port::mem::{MemHandle, MemPort};
use std::net::Ipv6Addr;
use std::time::Instant;

const H1: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const ROUTER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
const SNMC: [u8; 6] = [0x33, 0x33, 0xff, 0, 0, 0x02];

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// An ND message: `ty` with `target` and one link-layer address option
/// of `opt_type` carrying `mac`.
fn nd(
    eth: ([u8; 6], [u8; 6]),
    ip: (Ipv6Addr, Ipv6Addr),
    ty: u8,
    flags: [u8; 4],
    target: Ipv6Addr,
    opt_type: u8,
    mac: [u8; 6],
) -> Vec<u8> {
    let mut payload = target.octets().to_vec();
    payload.extend_from_slice(&[opt_type, 1]);
    payload.extend_from_slice(&mac);
    FrameBuilder::new(eth.0, eth.1)
        .ipv6(ip.0, ip.1)
        .ttl(255)
        .icmpv6(ty, 0)
        .icmp_rest(flags)
        .payload(&payload)
        .build()
}

fn bridge(rules: &[&str]) -> (Bridge, MemHandle, MemHandle) {
    let mut br = Bridge::new("br0", DatapathConfig::default());
    let (p1, h1) = MemPort::new("p1");
    let (p2, h2) = MemPort::new("p2");
    br.add_port(Box::new(p1)).unwrap();
    br.add_port(Box::new(p2)).unwrap();
    let now = Instant::now();
    for r in rules {
        br.add_flow_str(r, now).unwrap();
    }
    (br, h1, h2)
}

fn run(br: &mut Bridge) {
    let now = Instant::now();
    br.begin_round(now);
    while br.run_once(now) > 0 {}
}

/// OVN's ND responder, in OpenFlow: a solicitation for 2001:db8::2 is
/// turned around into an advertisement from the router's MAC, in place.
#[test]
fn solicitation_becomes_advertisement() {
    let (mut br, h1, h2) = bridge(&[
        "priority=0,actions=drop",
        "priority=100,icmp6,icmp_type=135,icmp_code=0,nd_target=2001:db8::2,nd_sll=02:00:00:00:00:0a,\
         actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:02:00:00:00:00:99->eth_src,\
         move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],set_field:2001:db8::2->ipv6_src,\
         set_field:02:00:00:00:00:99->nd_sll,set_field:136->icmpv6_type,\
         set_field:2001:db8::2->nd_target,IN_PORT",
    ]);
    let ns = nd(
        (H1, SNMC),
        (a("2001:db8::1"), a("ff02::1:ff00:2")),
        135,
        [0; 4],
        a("2001:db8::2"),
        1,
        H1,
    );
    assert!(all_checksums_valid(&ns));
    let want = nd(
        (ROUTER, H1),
        (a("2001:db8::2"), a("2001:db8::1")),
        136,
        [0; 4],
        a("2001:db8::2"),
        1,
        ROUTER,
    );
    for pass in 0..2 {
        h1.inject(&ns);
        run(&mut br);
        let out = h1.take_tx();
        assert_eq!(out.len(), 1, "pass {pass}");
        assert_eq!(out[0], want, "pass {pass}");
        assert!(all_checksums_valid(&out[0]));
        assert!(h2.take_tx().is_empty());
    }
    // The second came through the datapath flow the first installed.
    assert_eq!(br.dp_stats().upcalls, 1);
    // Another target, or another SLL, is not answered.
    for other in [
        nd(
            (H1, SNMC),
            (a("2001:db8::1"), a("ff02::1:ff00:3")),
            135,
            [0; 4],
            a("2001:db8::3"),
            1,
            H1,
        ),
        nd(
            (H1, SNMC),
            (a("2001:db8::1"), a("ff02::1:ff00:2")),
            135,
            [0; 4],
            a("2001:db8::2"),
            1,
            [2, 0, 0, 0, 0, 0x0b],
        ),
    ] {
        h1.inject(&other);
        run(&mut br);
        assert!(h1.take_tx().is_empty());
    }
}

/// `nd_tll` on an advertisement (what OVN's `nd_na { nd.tll = ..}` writes
/// into the advertisement its controller built), and `move` from the ND
/// fields (OVN's `lookup_nd(inport, nd.target, nd.tll)` reads them so).
#[test]
fn advertisement_tll_rewritten_and_read() {
    let (mut br, h1, h2) = bridge(&[
        "priority=0,actions=drop",
        "priority=100,icmp6,icmp_type=136,nd_target=2001:db8::/64,\
         actions=set_field:02:00:00:00:00:99->nd_tll,move:NXM_NX_ND_TLL[]->NXM_OF_ETH_DST[],\
         output:p2",
    ]);
    let na = nd(
        (H1, [2, 0, 0, 0, 0, 0x0b]),
        (a("2001:db8::1"), a("2001:db8::7")),
        136,
        [0x60, 0, 0, 0],
        a("2001:db8::1"),
        2,
        H1,
    );
    let want = nd(
        (H1, ROUTER),
        (a("2001:db8::1"), a("2001:db8::7")),
        136,
        [0x60, 0, 0, 0],
        a("2001:db8::1"),
        2,
        ROUTER,
    );
    h1.inject(&na);
    run(&mut br);
    let out = h2.take_tx();
    assert_eq!(out, vec![want]);
    assert!(all_checksums_valid(&out[0]));
    // An NA with only an SLL option: the write finds no TLL option and
    // adds none (OVS's packet_set_nd), so the frame keeps its option; the
    // translation's view of nd_tll is still the written MAC, which the
    // move copies into eth_dst, as OVS's translation does.
    let sll_only = nd(
        (H1, [2, 0, 0, 0, 0, 0x0b]),
        (a("2001:db8::1"), a("2001:db8::7")),
        136,
        [0x60, 0, 0, 0],
        a("2001:db8::1"),
        1,
        H1,
    );
    h1.inject(&sll_only);
    run(&mut br);
    let mut want = sll_only.clone();
    want[..6].copy_from_slice(&ROUTER);
    assert_eq!(h2.take_tx(), vec![want]);
    assert!(h1.take_tx().is_empty());
}
