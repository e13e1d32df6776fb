//! Property tests for the parser, builder, rewrites and checksums, with
//! etherparse 0.21 as an independent oracle.
//!
//! The central trick for rewrites: a frame edited in place (incremental
//! checksums) must be byte-identical to a frame built from scratch with the
//! edited field values (full checksums). That checks every rewrite and every
//! incremental update against a full recomputation at once.

use std::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{LinkExtSlice, NetSlice, SlicedPacket, TransportSlice};
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use nicflow_packet::checksum::{self, checksum, update16, update32, update_bytes};
use nicflow_packet::parse::{IS_FRAGMENT, LATER_FRAGMENT};
use nicflow_packet::tunnel::{self, Encap, TunnelKind};
use nicflow_packet::{fuzz_parse, parse, rewrite, L3Kind, L4Kind, Layout, PacketBuf};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// A frame model the builder can render and the rewrites can be mirrored on.

#[derive(Debug, Clone, Copy, PartialEq)]
enum L4 {
    Tcp(u16, u16, u16),
    Udp(u16, u16, bool),
    Icmp(u8, u8),
    Raw(u8),
}

#[derive(Debug, Clone, Copy)]
enum Ext6 {
    Dst(u8),
    Rt(u8),
    Ah(u8),
    /// Atomic fragment header (offset 0, M clear): flagged as a fragment but
    /// carrying the full L4 header.
    AtomicFrag(u32),
}

impl Ext6 {
    fn len(self) -> usize {
        match self {
            Ext6::Dst(n) | Ext6::Rt(n) => (usize::from(n) + 1) * 8,
            Ext6::Ah(n) => (usize::from(n) + 2) * 4,
            Ext6::AtomicFrag(_) => 8,
        }
    }
}

#[derive(Debug, Clone)]
enum L3 {
    V4 {
        src: u32,
        dst: u32,
        opts: Vec<u8>,
    },
    V6 {
        src: u128,
        dst: u128,
        hbh: Option<u8>,
        exts: Vec<Ext6>,
    },
    Arp {
        op: u16,
        sha: [u8; 6],
        spa: u32,
        tha: [u8; 6],
        tpa: u32,
    },
}

#[derive(Debug, Clone)]
struct Spec {
    src: [u8; 6],
    dst: [u8; 6],
    vlans: Vec<(u16, u16)>,
    l3: L3,
    l4: L4,
    ttl: u8,
    tos: u8,
    payload: Vec<u8>,
    /// Zero bytes appended after the frame (Ethernet padding / trailer).
    pad: usize,
}

impl Spec {
    fn is_v4(&self) -> bool {
        matches!(self.l3, L3::V4 { .. })
    }
    fn is_v6(&self) -> bool {
        matches!(self.l3, L3::V6 { .. })
    }
    fn is_ip(&self) -> bool {
        self.is_v4() || self.is_v6()
    }

    fn build(&self) -> Vec<u8> {
        let mut b = FrameBuilder::new(self.src, self.dst);
        for &(tpid, tci) in &self.vlans {
            b = b.vlan_tpid(tpid, tci);
        }
        match &self.l3 {
            L3::V4 { src, dst, opts } => {
                b = b
                    .ipv4(Ipv4Addr::from(*src), Ipv4Addr::from(*dst))
                    .ipv4_options(opts)
            }
            L3::V6 {
                src,
                dst,
                hbh,
                exts,
            } => {
                b = b.ipv6(Ipv6Addr::from(*src), Ipv6Addr::from(*dst));
                if let Some(n) = hbh {
                    b = b.ipv6_hop_by_hop(*n);
                }
                for e in exts {
                    b = match *e {
                        Ext6::Dst(n) => b.ipv6_dest_opts(n),
                        Ext6::Rt(n) => b.ipv6_routing(n),
                        Ext6::Ah(n) => b.ipv6_auth(n),
                        Ext6::AtomicFrag(id) => b.ipv6_fragment(0, false, id),
                    };
                }
            }
            L3::Arp {
                op,
                sha,
                spa,
                tha,
                tpa,
            } => b = b.arp(*op, *sha, Ipv4Addr::from(*spa), *tha, Ipv4Addr::from(*tpa)),
        }
        if self.is_ip() {
            b = match self.l4 {
                L4::Tcp(s, d, f) => b.tcp(s, d, f).tcp_seq(0x0102_0304).tcp_ack(7),
                L4::Udp(s, d, csum) => {
                    let b = b.udp(s, d);
                    if csum || self.is_v6() {
                        b
                    } else {
                        b.no_udp_checksum()
                    }
                }
                L4::Icmp(t, c) if self.is_v4() => b.icmp(t, c).echo(0x1111, 2),
                L4::Icmp(t, c) => b.icmpv6(t, c).echo(0x1111, 2),
                L4::Raw(p) => b.raw_l4(p),
            };
        }
        let mut f = b.ttl(self.ttl).tos(self.tos).payload(&self.payload).build();
        f.resize(f.len() + self.pad, 0);
        f
    }

    fn l3_offset(&self) -> usize {
        14 + 4 * self.vlans.len()
    }

    fn l3_hdr_len(&self) -> usize {
        match &self.l3 {
            L3::V4 { opts, .. } => 20 + opts.len(),
            L3::V6 { hbh, exts, .. } => {
                40 + hbh.map_or(0, |n| (usize::from(n) + 1) * 8)
                    + exts.iter().map(|e| e.len()).sum::<usize>()
            }
            L3::Arp { .. } => 28,
        }
    }

    fn l4_hdr_len(&self) -> usize {
        match self.l4 {
            L4::Tcp(..) => 20,
            L4::Udp(..) | L4::Icmp(..) => 8,
            L4::Raw(_) => 0,
        }
    }

    fn expected_l4(&self) -> L4Kind {
        match (&self.l3, self.l4) {
            (L3::Arp { .. }, _) => L4Kind::None,
            (_, L4::Tcp(..)) => L4Kind::Tcp,
            (_, L4::Udp(..)) => L4Kind::Udp,
            (L3::V4 { .. }, L4::Icmp(..)) => L4Kind::Icmp,
            (_, L4::Icmp(..)) => L4Kind::Icmpv6,
            (L3::V6 { .. }, L4::Raw(59)) => L4Kind::None,
            (_, L4::Raw(p)) => L4Kind::Other(p),
        }
    }

    fn has_frag_header(&self) -> bool {
        matches!(&self.l3, L3::V6 { exts, .. } if exts.iter().any(|e| matches!(e, Ext6::AtomicFrag(_))))
    }
}

fn mac() -> impl Strategy<Value = [u8; 6]> {
    any::<[u8; 6]>()
}

fn l4_strategy() -> impl Strategy<Value = L4> {
    prop_oneof![
        (any::<u16>(), any::<u16>(), 0u16..0x1000).prop_map(|(s, d, f)| L4::Tcp(s, d, f)),
        (any::<u16>(), any::<u16>(), prop::bool::weighted(0.8))
            .prop_map(|(s, d, c)| L4::Udp(s, d, c)),
        // etherparse insists ICMPv4 timestamps (13/14) are exactly 20 bytes.
        (any::<u8>(), any::<u8>())
            .prop_map(|(t, c)| L4::Icmp(if matches!(t, 13 | 14) { 8 } else { t }, c)),
        prop_oneof![Just(47u8), Just(50), Just(59), Just(89), Just(253)].prop_map(L4::Raw),
    ]
}

fn ext6_strategy() -> impl Strategy<Value = Ext6> {
    prop_oneof![
        (0u8..4).prop_map(Ext6::Dst),
        (0u8..4).prop_map(Ext6::Rt),
        (1u8..8).prop_map(Ext6::Ah),
        any::<u32>().prop_map(Ext6::AtomicFrag),
    ]
}

fn l3_strategy() -> impl Strategy<Value = L3> {
    prop_oneof![
        4 => (any::<u32>(), any::<u32>(), 0usize..=10, any::<[u8; 40]>()).prop_map(
            |(src, dst, words, bytes)| L3::V4 { src, dst, opts: bytes[..words * 4].to_vec() }
        ),
        4 => (
            any::<u128>(),
            any::<u128>(),
            prop::option::of(0u8..4),
            prop::collection::vec(ext6_strategy(), 0..3)
        )
            .prop_map(|(src, dst, hbh, exts)| L3::V6 { src, dst, hbh, exts }),
        1 => (any::<u16>(), mac(), any::<u32>(), mac(), any::<u32>())
            .prop_map(|(op, sha, spa, tha, tpa)| L3::Arp { op, sha, spa, tha, tpa }),
    ]
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    (
        mac(),
        mac(),
        prop::collection::vec(
            (prop_oneof![Just(0x8100u16), Just(0x88a8)], any::<u16>()),
            0..=2,
        ),
        l3_strategy(),
        l4_strategy(),
        any::<u8>(),
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..300),
        prop_oneof![Just(0usize), 0usize..40],
    )
        .prop_map(|(src, dst, vlans, l3, l4, ttl, tos, payload, pad)| Spec {
            src,
            dst,
            vlans,
            l3,
            l4,
            ttl,
            tos,
            payload,
            pad,
        })
}

// ---------------------------------------------------------------------------
// etherparse as oracle.

/// Reads the frame with etherparse and checks every checksum it can, and
/// that the fields agree with the spec.
fn etherparse_agrees(frame: &[u8], spec: &Spec) {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse rejects a built frame");
    let tcis: Vec<u16> = p
        .link_exts
        .iter()
        .map(|e| match e {
            LinkExtSlice::Vlan(v) => u16::from_be_bytes([v.slice()[0], v.slice()[1]]),
            other => panic!("unexpected link ext {other:?}"),
        })
        .collect();
    let want: Vec<u16> = spec.vlans.iter().map(|v| v.1).collect();
    assert_eq!(tcis, want);

    match (&p.net, &spec.l3) {
        (Some(NetSlice::Ipv4(ip)), L3::V4 { src, dst, .. }) => {
            let h = ip.header();
            assert_eq!(h.source(), src.to_be_bytes());
            assert_eq!(h.destination(), dst.to_be_bytes());
            assert_eq!(h.ttl(), spec.ttl);
            assert_eq!((h.dcp().value() << 2) | h.ecn().value(), spec.tos);
            assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
            l4_agrees(&p.transport, spec, |t| match t {
                Csum::Tcp(t) => t.calc_checksum_ipv4(h.source(), h.destination()).unwrap(),
                Csum::Udp(u) => u
                    .to_header()
                    .calc_checksum_ipv4_raw(h.source(), h.destination(), u.payload())
                    .unwrap(),
            });
        }
        (Some(NetSlice::Ipv6(ip)), L3::V6 { src, dst, .. }) => {
            let h = ip.header();
            assert_eq!(h.source(), src.to_be_bytes());
            assert_eq!(h.destination(), dst.to_be_bytes());
            assert_eq!(h.hop_limit(), spec.ttl);
            assert_eq!(h.traffic_class(), spec.tos);
            if let Some(TransportSlice::Icmpv6(i)) = &p.transport {
                assert!(i.is_checksum_valid(h.source(), h.destination()));
            }
            l4_agrees(&p.transport, spec, |t| match t {
                Csum::Tcp(t) => t.calc_checksum_ipv6(h.source(), h.destination()).unwrap(),
                Csum::Udp(u) => u
                    .to_header()
                    .calc_checksum_ipv6_raw(h.source(), h.destination(), u.payload())
                    .unwrap(),
            });
        }
        (
            Some(NetSlice::Arp(a)),
            L3::Arp {
                op,
                sha,
                spa,
                tha,
                tpa,
            },
        ) => {
            assert_eq!(a.operation().0, *op);
            assert_eq!(a.sender_hw_addr(), sha);
            assert_eq!(a.sender_protocol_addr(), &spa.to_be_bytes());
            assert_eq!(a.target_hw_addr(), tha);
            assert_eq!(a.target_protocol_addr(), &tpa.to_be_bytes());
        }
        (net, l3) => panic!("etherparse saw {net:?} for {l3:?}"),
    }
}

enum Csum<'a, 'b> {
    Tcp(&'a etherparse::TcpSlice<'b>),
    Udp(&'a etherparse::UdpSlice<'b>),
}

fn l4_agrees(t: &Option<TransportSlice<'_>>, spec: &Spec, calc: impl Fn(Csum<'_, '_>) -> u16) {
    match (t, spec.l4) {
        (Some(TransportSlice::Tcp(t)), L4::Tcp(s, d, f)) => {
            assert_eq!((t.source_port(), t.destination_port()), (s, d));
            assert_eq!(t.payload(), &spec.payload[..]);
            let flags = u16::from_be_bytes([t.slice()[12], t.slice()[13]]) & 0x0fff;
            assert_eq!(flags, f);
            assert_eq!(t.checksum(), calc(Csum::Tcp(t)));
        }
        (Some(TransportSlice::Udp(u)), L4::Udp(s, d, _)) => {
            assert_eq!((u.source_port(), u.destination_port()), (s, d));
            assert_eq!(u.payload(), &spec.payload[..]);
            if u.checksum() != 0 {
                let c = calc(Csum::Udp(u));
                assert_eq!(u.checksum(), if c == 0 { 0xffff } else { c });
            }
        }
        (Some(TransportSlice::Icmpv4(i)), L4::Icmp(ty, code)) => {
            assert_eq!((i.type_u8(), i.code_u8()), (ty, code));
            // etherparse decodes known types and drops their unused bytes
            // 5..8 from the sum; only echo keeps all of them.
            if matches!(ty, 0 | 8) && code == 0 {
                assert_eq!(i.checksum(), i.icmp_type().calc_checksum(i.payload()));
            }
        }
        (Some(TransportSlice::Icmpv6(i)), L4::Icmp(ty, code)) => {
            assert_eq!((i.type_u8(), i.code_u8()), (ty, code));
        }
        (None, L4::Raw(_)) => {}
        (t, l4) => panic!("etherparse saw {t:?} for {l4:?}"),
    }
}

/// Our own reading of the frame agrees with the spec.
fn layout_agrees(l: &Layout, frame: &[u8], spec: &Spec) {
    assert_eq!(usize::from(l.n_vlan), spec.vlans.len());
    for (i, &(tpid, tci)) in spec.vlans.iter().enumerate() {
        assert_eq!((l.vlan_tpids[i], l.vlan_tags[i]), (tpid, tci));
    }
    assert_eq!(usize::from(l.l3_offset), spec.l3_offset());
    let l3_kind = match spec.l3 {
        L3::V4 { .. } => L3Kind::Ipv4,
        L3::V6 { .. } => L3Kind::Ipv6,
        L3::Arp { .. } => L3Kind::Arp,
    };
    assert_eq!(l.l3, l3_kind);
    assert_eq!(l.l4, spec.expected_l4());
    if spec.is_ip() {
        assert_eq!(
            usize::from(l.l4_offset),
            spec.l3_offset() + spec.l3_hdr_len()
        );
        assert_eq!(
            usize::from(l.l4_len),
            spec.l4_hdr_len() + spec.payload.len()
        );
        assert_eq!(
            l.frag,
            if spec.has_frag_header() {
                IS_FRAGMENT
            } else {
                0
            }
        );
        let proto = match spec.l4 {
            L4::Tcp(..) => 6,
            L4::Udp(..) => 17,
            L4::Icmp(..) if spec.is_v4() => 1,
            L4::Icmp(..) => 58,
            L4::Raw(p) => p,
        };
        assert_eq!(l.ip_proto, proto);
        assert_eq!(l.l4_end() + spec.pad, frame.len());
    } else {
        assert_eq!((l.l4_offset, l.l4_len, l.frag), (0, 0, 0));
    }
    // Checksums by our own full recomputation.
    assert!(all_checksums_valid(frame));
    if !spec.has_frag_header() && spec.is_ip() {
        let want = matches!(
            spec.expected_l4(),
            L4Kind::Tcp | L4Kind::Udp | L4Kind::Icmp | L4Kind::Icmpv6
        );
        assert_eq!(checksum::verify_l4(frame, l).is_some(), want);
    }
}

// ---------------------------------------------------------------------------
// Rewrite operations, applied both to frames and to the model.

#[derive(Debug, Clone)]
enum Op {
    EthSrc([u8; 6]),
    EthDst([u8; 6]),
    Ip4Src(u32),
    Ip4Dst(u32),
    Ip6Src(u128),
    Ip6Dst(u128),
    Tos(u8),
    Dscp(u8),
    Ecn(u8),
    Ttl(u8),
    TpSrc(u16),
    TpDst(u16),
    VlanVid(u16),
    VlanPcp(u8),
    PushVlan(u16, u16),
    PopVlan,
    ArpOper(u16),
    ArpSha([u8; 6]),
    ArpSpa(u32),
    ArpTha([u8; 6]),
    ArpTpa(u32),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        mac().prop_map(Op::EthSrc),
        mac().prop_map(Op::EthDst),
        any::<u32>().prop_map(Op::Ip4Src),
        any::<u32>().prop_map(Op::Ip4Dst),
        any::<u128>().prop_map(Op::Ip6Src),
        any::<u128>().prop_map(Op::Ip6Dst),
        any::<u8>().prop_map(Op::Tos),
        any::<u8>().prop_map(Op::Dscp),
        any::<u8>().prop_map(Op::Ecn),
        any::<u8>().prop_map(Op::Ttl),
        any::<u16>().prop_map(Op::TpSrc),
        any::<u16>().prop_map(Op::TpDst),
        any::<u16>().prop_map(Op::VlanVid),
        any::<u8>().prop_map(Op::VlanPcp),
        (prop_oneof![Just(0x8100u16), Just(0x88a8)], any::<u16>())
            .prop_map(|(t, c)| Op::PushVlan(t, c)),
        Just(Op::PopVlan),
        any::<u16>().prop_map(Op::ArpOper),
        mac().prop_map(Op::ArpSha),
        any::<u32>().prop_map(Op::ArpSpa),
        mac().prop_map(Op::ArpTha),
        any::<u32>().prop_map(Op::ArpTpa),
    ]
}

/// Applies `op` to the model; returns whether the rewrite should apply.
fn model_apply(s: &mut Spec, op: &Op) -> bool {
    let ip = s.is_ip();
    match (op, &mut s.l3) {
        (Op::EthSrc(m), _) => {
            s.src = *m;
            true
        }
        (Op::EthDst(m), _) => {
            s.dst = *m;
            true
        }
        (Op::Ip4Src(a), L3::V4 { src, .. }) => {
            *src = *a;
            true
        }
        (Op::Ip4Dst(a), L3::V4 { dst, .. }) => {
            *dst = *a;
            true
        }
        (Op::Ip6Src(a), L3::V6 { src, .. }) => {
            *src = *a;
            true
        }
        (Op::Ip6Dst(a), L3::V6 { dst, .. }) => {
            *dst = *a;
            true
        }
        (Op::Tos(t), _) if ip => {
            s.tos = *t;
            true
        }
        (Op::Dscp(d), _) if ip => {
            s.tos = (d << 2) | (s.tos & 3);
            true
        }
        (Op::Ecn(e), _) if ip => {
            s.tos = (s.tos & !3) | (e & 3);
            true
        }
        (Op::Ttl(t), _) if ip => {
            s.ttl = *t;
            true
        }
        (Op::TpSrc(p), _) if ip => match &mut s.l4 {
            L4::Tcp(sp, ..) | L4::Udp(sp, ..) => {
                *sp = *p;
                true
            }
            _ => false,
        },
        (Op::TpDst(p), _) if ip => match &mut s.l4 {
            L4::Tcp(_, dp, _) | L4::Udp(_, dp, _) => {
                *dp = *p;
                true
            }
            _ => false,
        },
        (Op::VlanVid(v), _) => match s.vlans.first_mut() {
            Some(t) => {
                t.1 = (t.1 & 0xf000) | (v & 0x0fff);
                true
            }
            None => false,
        },
        (Op::VlanPcp(p), _) => match s.vlans.first_mut() {
            Some(t) => {
                t.1 = (t.1 & 0x1fff) | (u16::from(p & 7) << 13);
                true
            }
            None => false,
        },
        (Op::PushVlan(tpid, tci), _) => {
            s.vlans.insert(0, (*tpid, *tci));
            true
        }
        (Op::PopVlan, _) => {
            if s.vlans.is_empty() {
                false
            } else {
                s.vlans.remove(0);
                true
            }
        }
        (Op::ArpOper(v), L3::Arp { op, .. }) => {
            *op = *v;
            true
        }
        (Op::ArpSha(v), L3::Arp { sha, .. }) => {
            *sha = *v;
            true
        }
        (Op::ArpSpa(v), L3::Arp { spa, .. }) => {
            *spa = *v;
            true
        }
        (Op::ArpTha(v), L3::Arp { tha, .. }) => {
            *tha = *v;
            true
        }
        (Op::ArpTpa(v), L3::Arp { tpa, .. }) => {
            *tpa = *v;
            true
        }
        _ => false,
    }
}

/// Applies `op` to the frame through the public rewrite API.
fn frame_apply(buf: &mut PacketBuf, l: &Layout, op: &Op) -> bool {
    let f = buf.data_mut();
    match *op {
        Op::EthSrc(m) => rewrite::set_eth_src(f, m),
        Op::EthDst(m) => rewrite::set_eth_dst(f, m),
        // Exercise the different address argument types on purpose.
        Op::Ip4Src(a) => rewrite::set_ipv4_src(f, l, a),
        Op::Ip4Dst(a) => rewrite::set_ipv4_dst(f, l, Ipv4Addr::from(a)),
        Op::Ip6Src(a) => rewrite::set_ipv6_src(f, l, a.to_be_bytes()),
        Op::Ip6Dst(a) => rewrite::set_ipv6_dst(f, l, Ipv6Addr::from(a)),
        Op::Tos(t) => rewrite::set_ip_tos(f, l, t),
        Op::Dscp(d) => rewrite::set_ip_dscp(f, l, d),
        Op::Ecn(e) => rewrite::set_ip_ecn(f, l, e),
        Op::Ttl(t) => rewrite::set_ttl(f, l, t),
        Op::TpSrc(p) => rewrite::set_tp_src(f, l, p),
        Op::TpDst(p) => rewrite::set_tp_dst(f, l, p),
        Op::VlanVid(v) => rewrite::set_vlan_vid(f, v),
        Op::VlanPcp(p) => rewrite::set_vlan_pcp(f, p),
        Op::PushVlan(t, c) => rewrite::push_vlan(buf, t, c),
        Op::PopVlan => rewrite::pop_vlan(buf),
        Op::ArpOper(v) => rewrite::set_arp_op(f, l, v),
        Op::ArpSha(v) => rewrite::set_arp_sha(f, l, v),
        Op::ArpSpa(v) => rewrite::set_arp_spa(f, l, v.to_be_bytes()),
        Op::ArpTha(v) => rewrite::set_arp_tha(f, l, v),
        Op::ArpTpa(v) => rewrite::set_arp_tpa(f, l, Ipv4Addr::from(v)),
    }
}

// ---------------------------------------------------------------------------

proptest! {
    /// (a) Any byte string: parse and the whole fuzz pass never panic.
    #[test]
    fn parse_never_panics(data in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = parse(&data);
        fuzz_parse(&data);
    }

    /// (a') Random bytes behind a plausible Ethernet header reach deeper.
    #[test]
    fn parse_never_panics_typed(
        ethertype in prop_oneof![
            Just(0x0800u16), Just(0x86dd), Just(0x0806), Just(0x8100), Just(0x88a8), any::<u16>()
        ],
        version in 0u8..16,
        rest in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.push(version << 4 | 5);
        f.extend_from_slice(&rest);
        let _ = parse(&f);
        fuzz_parse(&f);
    }

    /// (a'') Valid frames with a few bytes corrupted: parseable-but-odd
    /// frames are where rewrite invariants break if anything does.
    #[test]
    fn corrupted_frames_never_panic(
        spec in spec_strategy(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut f = spec.build();
        for (i, b) in flips {
            let i = i.index(f.len());
            f[i] = b;
        }
        fuzz_parse(&f);
    }

    /// (b) Built frames parse back to the same fields, and every checksum
    /// verifies, by our computation and etherparse's.
    #[test]
    fn built_frames_round_trip(spec in spec_strategy()) {
        let f = spec.build();
        let l = parse(&f).expect("built frame does not parse");
        layout_agrees(&l, &f, &spec);
        etherparse_agrees(&f, &spec);
        fuzz_parse(&f);
    }

    /// (c) Truncating a valid frame never panics, and cutting into the IP
    /// datagram (or the ARP body) is always an error.
    #[test]
    fn truncated_frames_error(spec in spec_strategy()) {
        let f = spec.build();
        let l = parse(&f).unwrap();
        let needed = if spec.is_ip() { l.l4_end() } else { spec.l3_offset() + 28 };
        for cut in 0..f.len() {
            let r = parse(&f[..cut]);
            if cut < needed {
                prop_assert!(r.is_err(), "cut {} of {} parsed: {:?}", cut, f.len(), r);
            } else {
                prop_assert_eq!(r.unwrap(), l);
            }
            fuzz_parse(&f[..cut]);
        }
    }

    /// (d) RFC 1624 updates equal a full recomputation.
    #[test]
    fn incremental_equals_full(
        words in prop::collection::vec(any::<u16>(), 4..100),
        at in any::<prop::sample::Index>(),
        new16 in any::<u16>(),
        new32 in any::<u32>(),
        new_bytes in any::<[u8; 16]>(),
    ) {
        let mut data: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let c0 = checksum(&data);

        // 16-bit field at an even offset.
        let i = at.index(words.len()) * 2;
        let old = u16::from_be_bytes([data[i], data[i + 1]]);
        data[i..i + 2].copy_from_slice(&new16.to_be_bytes());
        let c1 = update16(c0, old, new16);
        assert_equivalent(c1, checksum(&data), &data);

        // 32-bit field.
        let i = at.index(words.len() - 1) * 2;
        let old = u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        data[i..i + 4].copy_from_slice(&new32.to_be_bytes());
        let c2 = update32(c1, old, new32);
        assert_equivalent(c2, checksum(&data), &data);

        // A run of bytes (IPv6 address sized, clipped to the data).
        let i = at.index(words.len()) * 2;
        let n = (data.len() - i).min(16) & !1;
        let old = data[i..i + n].to_vec();
        data[i..i + n].copy_from_slice(&new_bytes[..n]);
        let c3 = update_bytes(c2, &old, &new_bytes[..n]);
        assert_equivalent(c3, checksum(&data), &data);
    }

    /// Rewrites in place equal building from scratch, byte for byte, and
    /// the result verifies under etherparse.
    #[test]
    fn rewrites_equal_rebuild(
        spec in spec_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..8),
    ) {
        let mut model = spec.clone();
        let mut buf = PacketBuf::from_slice(&spec.build());
        let mut l = parse(buf.data()).unwrap();
        for op in &ops {
            if matches!(op, Op::PushVlan(..)) && model.vlans.len() >= 2 {
                continue;
            }
            let want = model_apply(&mut model, op);
            let got = frame_apply(&mut buf, &l, op);
            prop_assert_eq!(got, want, "{:?} on {:?}", op, model);
            prop_assert_eq!(buf.data(), &model.build()[..], "after {:?}", op);
            l = parse(buf.data()).expect("rewritten frame does not parse");
        }
        layout_agrees(&l, buf.data(), &model);
        etherparse_agrees(buf.data(), &model);
    }

    /// Fragments: later fragments have no L4 and are left alone by L4
    /// rewrites; first fragments keep their UDP/TCP checksums consistent.
    #[test]
    fn fragments(
        v6 in any::<bool>(),
        offset in 0u16..0x1fff,
        more in any::<bool>(),
        payload in prop::collection::vec(any::<u8>(), 0..64),
        new_src in any::<u32>(),
    ) {
        let a4 = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let a6: (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
        let b = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let b = if v6 {
            b.ipv6(a6.0, a6.1).ipv6_fragment(offset, more, 99)
        } else {
            b.ipv4(a4.0, a4.1).ipv4_fragment(offset, more)
        };
        let later = offset != 0;
        let b = if later { b.raw_l4(17) } else { b.udp(1, 2) };
        let mut f = b.payload(&payload).build();
        let l = parse(&f).unwrap();
        prop_assert_eq!(l.is_later_fragment(), later);
        prop_assert_eq!(l.is_fragment(), v6 || later || more);
        prop_assert_eq!(l.frag & LATER_FRAGMENT != 0, later);
        prop_assert_eq!(l.ip_proto, 17);
        prop_assert_eq!(l.l4, if later { L4Kind::None } else { L4Kind::Udp });
        let before = f.clone();
        prop_assert_eq!(rewrite::set_tp_src(&mut f, &l, 7), !later);
        if later {
            prop_assert_eq!(&f, &before);
        }
        if v6 {
            prop_assert!(rewrite::set_ipv6_src(&mut f, &l, u128::from(new_src)));
        } else {
            prop_assert!(rewrite::set_ipv4_src(&mut f, &l, new_src));
            prop_assert_eq!(checksum::verify_ipv4_header(&f, &l), Some(true));
        }
        if !later {
            // The builder checksummed the UDP bytes present; patches keep
            // that consistent.
            let l4 = usize::from(l.l4_offset);
            let seg = &f[l4..];
            let ok = if v6 {
                let s = Ipv6Addr::from(u128::from(new_src));
                checksum::l4_checksum_ipv6(s, a6.1, 17, seg) == 0
            } else {
                checksum::l4_checksum_ipv4(Ipv4Addr::from(new_src), a4.1, 17, seg) == 0
            };
            prop_assert!(ok);
        } else {
            prop_assert_eq!(&f[usize::from(l.l4_offset)..], &before[usize::from(l.l4_offset)..]);
        }
        fuzz_parse(&f);
    }
}

/// Checksums are equal, except that 0x0000 and 0xffff are the same
/// ones'-complement zero when the data itself sums to zero (all-zero data),
/// the one case where RFC 1624 eqn. 3 and a recomputation pick different
/// representations.
fn assert_equivalent(incremental: u16, full: u16, data: &[u8]) {
    if data.iter().all(|&b| b == 0) {
        assert!(matches!(incremental, 0 | 0xffff), "{incremental:#x}");
    } else {
        assert_eq!(incremental, full);
    }
}

#[test]
fn address_argument_types() {
    let f = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
        .udp(1, 2)
        .build();
    let l = parse(&f).unwrap();
    let mut a = f.clone();
    let mut b = f.clone();
    let mut c = f.clone();
    assert!(rewrite::set_ipv4_src(&mut a, &l, 0xc0a8_0101u32));
    assert!(rewrite::set_ipv4_src(&mut b, &l, [192, 168, 1, 1]));
    assert!(rewrite::set_ipv4_src(
        &mut c,
        &l,
        Ipv4Addr::new(192, 168, 1, 1)
    ));
    assert_eq!(a, b);
    assert_eq!(b, c);
    assert!(all_checksums_valid(&a));
}

#[test]
fn ipv6_routing_header_with_segments_left_is_not_patched() {
    // Build a TCP segment over IPv6 with a routing header, then mark
    // segments left: the L4 checksum then belongs to the final destination
    // and an IPv6 destination rewrite must leave it alone.
    let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let d: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let mut f = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(s, d)
        .ipv6_routing(2)
        .tcp(1, 2, 0)
        .build();
    f[14 + 40 + 3] = 1; // segments left
    let l = parse(&f).unwrap();
    assert_eq!(nicflow_packet::ipv6::routing_segments_left(&f, &l), Some(1));
    assert_eq!(checksum::verify_l4(&f, &l), None);
    let l4 = usize::from(l.l4_offset);
    let before = f[l4 + 16..l4 + 18].to_vec();
    assert!(rewrite::set_ipv6_dst(&mut f, &l, Ipv6Addr::LOCALHOST));
    assert_eq!(&f[l4 + 16..l4 + 18], &before[..]);
    // The source is in every pseudo header, so it is still patched.
    assert!(rewrite::set_ipv6_src(&mut f, &l, Ipv6Addr::LOCALHOST));
    assert_ne!(&f[l4 + 16..l4 + 18], &before[..]);
}

#[test]
fn sctp_port_rewrite_recomputes_crc() {
    let mut f = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
        .sctp(5000, 6000)
        .payload(&[1, 0, 0, 8, 0, 0, 0, 0])
        .build();
    let l = parse(&f).unwrap();
    assert_eq!(l.l4, L4Kind::Sctp);
    assert!(rewrite::set_tp_src(&mut f, &l, 7000));
    assert!(rewrite::set_tp_dst(&mut f, &l, 8000));
    let seg = &f[usize::from(l.l4_offset)..];
    let p = nicflow_packet::sctp::Packet::new_checked(seg).unwrap();
    assert_eq!((p.src_port(), p.dst_port()), (7000, 8000));
    assert!(p.verify_checksum());
    // A packet whose CRC was already wrong stays wrong.
    let mut bad = f.clone();
    let at = usize::from(l.l4_offset) + 8;
    bad[at] ^= 0xff;
    assert!(rewrite::set_tp_src(&mut bad, &l, 1));
    let p = nicflow_packet::sctp::Packet::new_checked(&bad[usize::from(l.l4_offset)..]).unwrap();
    assert!(!p.verify_checksum());
}

#[test]
fn parse_error_reasons_cover_every_variant() {
    use nicflow_packet::ParseError;
    let reasons: Vec<&str> = ParseError::ALL.iter().map(|e| e.reason()).collect();
    assert_eq!(reasons.len(), ParseError::COUNT);
    for (i, e) in ParseError::ALL.iter().enumerate() {
        assert_eq!(e.index(), i);
    }
    let mut counters = [0u64; ParseError::COUNT];
    counters[parse(&[0; 3]).unwrap_err().index()] += 1;
    assert_eq!(counters[ParseError::Runt.index()], 1);
}

// ---------------------------------------------------------------------------
// Tunnels (VXLAN / Geneve).

/// Claims every UDP port, alternating kinds, so arbitrary bytes reach the
/// tunnel header checks.
fn any_port_kind(port: u16) -> Option<TunnelKind> {
    Some(if port & 1 == 0 {
        TunnelKind::Vxlan
    } else {
        TunnelKind::Geneve
    })
}

fn geneve_options_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((any::<u16>(), any::<u8>(), 0usize..=8, any::<u8>()), 0..4).prop_map(
        |opts| {
            let mut out = Vec::new();
            for (class, typ, words, fill) in opts {
                tunnel::push_geneve_option(&mut out, class, typ, &vec![fill; words * 4]).unwrap();
            }
            out
        },
    )
}

proptest! {
    /// Tunnel parse never panics on arbitrary bytes, whatever ports it is
    /// told are tunnels.
    #[test]
    fn tunnel_parse_never_panics(data in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = tunnel::parse(&data, tunnel::default_kind);
        let _ = tunnel::parse(&data, any_port_kind);
        let _ = tunnel::entropy_port(&data);
        for opt in tunnel::geneve_options(&data) {
            prop_assert!(opt.data.len() <= tunnel::GENEVE_MAX_OPT_DATA_LEN);
        }
    }

    /// Random bytes behind plausible outer Ethernet/IP/UDP headers, so the
    /// VXLAN and Geneve checks see mostly-valid lengths.
    #[test]
    fn tunnel_parse_never_panics_typed(
        v6 in any::<bool>(),
        vlan in any::<bool>(),
        dport in prop_oneof![Just(tunnel::VXLAN_PORT), Just(tunnel::GENEVE_PORT), any::<u16>()],
        rest in prop::collection::vec(any::<u8>(), 0..200),
        fix_lengths in any::<bool>(),
    ) {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0, 0, 5]);
        }
        let l3 = f.len() + 2;
        let (ethertype, hl) = if v6 { (0x86ddu16, 40) } else { (0x0800, 20) };
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.resize(l3 + hl, 0);
        f[l3] = if v6 { 0x60 } else { 0x45 };
        f[l3 + if v6 { 6 } else { 9 }] = 17;
        f.extend_from_slice(&[0xc0, 0x00]);
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        f.extend_from_slice(&rest);
        if fix_lengths {
            let udp_len = (f.len() - l3 - hl) as u16;
            f[l3 + hl + 4..l3 + hl + 6].copy_from_slice(&udp_len.to_be_bytes());
            if v6 {
                f[l3 + 4..l3 + 6].copy_from_slice(&udp_len.to_be_bytes());
            } else {
                f[l3 + 2..l3 + 4].copy_from_slice(&(udp_len + 20).to_be_bytes());
                let c = checksum(&f[l3..l3 + 20]);
                f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            }
        }
        let _ = tunnel::parse(&f, tunnel::default_kind);
        let _ = tunnel::parse(&f, any_port_kind);
        fuzz_parse(&f);
    }

    /// encap -> parse gives back every field, for random VNIs, ports,
    /// addresses, options and inner frames; every truncation is rejected.
    #[test]
    fn tunnel_round_trip(
        geneve in any::<bool>(),
        v6 in any::<bool>(),
        src in any::<u128>(),
        dst in any::<u128>(),
        eth_src in mac(),
        eth_dst in mac(),
        tos in any::<u8>(),
        ttl in any::<u8>(),
        udp_src in any::<u16>(),
        csum in any::<bool>(),
        vni in 0u32..=tunnel::MAX_VNI,
        oam in any::<bool>(),
        opts in geneve_options_strategy(),
        spec in spec_strategy(),
    ) {
        let kind = if geneve { TunnelKind::Geneve } else { TunnelKind::Vxlan };
        let opts = if geneve { opts } else { Vec::new() };
        let (ip_src, ip_dst) = if v6 {
            (Ipv6Addr::from(src).into(), Ipv6Addr::from(dst).into())
        } else {
            (Ipv4Addr::from(src as u32).into(), Ipv4Addr::from(dst as u32).into())
        };
        let inner = spec.build();
        prop_assume!(inner.len() >= 14);
        let udp_dst = kind.default_port();
        let e = Encap {
            kind, eth_src, eth_dst, ip_src, ip_dst, tos, ttl, df: true,
            udp_src, udp_dst, csum, vni,
            geneve_options: &opts, geneve_oam: geneve && oam,
        };
        let mut buf = PacketBuf::from_slice(&inner);
        buf.reserve_headroom(tunnel::overhead(kind, v6, opts.len()));
        tunnel::encap(&mut buf, &e).unwrap();
        let f = buf.data();
        prop_assert!(all_checksums_valid(f));
        let d = tunnel::parse(f, tunnel::default_kind).unwrap().expect("not recognised");
        prop_assert_eq!(d.kind, kind);
        prop_assert_eq!((d.eth_src, d.eth_dst), (eth_src, eth_dst));
        prop_assert_eq!((d.ip_src, d.ip_dst), (ip_src, ip_dst));
        prop_assert_eq!((d.tos, d.ttl), (tos, ttl));
        prop_assert_eq!((d.udp_src, d.udp_dst), (udp_src, udp_dst));
        prop_assert_eq!(d.udp_csum_present, csum || v6);
        prop_assert_eq!(d.vni, vni);
        prop_assert_eq!(d.geneve_oam, geneve && oam);
        prop_assert_eq!(
            d.geneve_critical,
            tunnel::geneve_options(&opts).any(|o| o.critical())
        );
        prop_assert_eq!(d.options(f), &opts[..]);
        prop_assert_eq!(d.inner(f), &inner[..]);
        prop_assert_eq!(d.inner_off, tunnel::overhead(kind, v6, opts.len()));
        fuzz_parse(f);
        for cut in 0..f.len() {
            let r = tunnel::parse(&f[..cut], tunnel::default_kind);
            prop_assert!(!matches!(r, Ok(Some(_))), "cut {} parsed", cut);
        }
        // The entropy port depends on the inner frame only.
        let p = tunnel::entropy_port(&inner);
        prop_assert!(p >= tunnel::ENTROPY_PORT_MIN);
        prop_assert_eq!(p, tunnel::entropy_port(d.inner(f)));
    }
}
