//! Fuzzing entry point.
//!
//! Every frame on the path port rx ring -> parse -> flow key ->
//! classifier/caches -> actions -> port tx comes from an untrusted wire, so
//! the byte-touching code must survive any input. [`fuzz_parse`] drives all of
//! it — parser, every view a layout leads to, every rewrite, VLAN push/pop,
//! tunnel decapsulation — and asserts the invariants that the rest of the
//! data plane relies on.

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::buf::PacketBuf;
use crate::checksum::{verify_ipv4_header, verify_l4};
use crate::parse::{parse, L3Kind, L4Kind, Layout};
use crate::tunnel::{self, Encap, TunnelKind};
use crate::{arp, ethernet, icmp, icmpv6, ipv4, ipv6, rewrite, sctp, tcp, udp, vlan};

/// Runs `parse`, opens every header view the layout points at and reads all
/// their fields, then applies every rewrite to a copy of the frame and
/// re-parses it.
///
/// It panics only if one of this crate's invariants is broken — which is
/// what a fuzzer is for: the layout must survive field rewrites unchanged,
/// checksums that verified before a rewrite must verify after it, and a VLAN
/// push followed by a pop must restore the frame. For any input on which
/// those hold (all of them, as far as the test suite can tell) it returns
/// normally. The frame is also offered to the tunnel parser, which must
/// either reject it or describe a packet that re-encapsulates to the same
/// tunnel metadata and inner frame.
pub fn fuzz_parse(data: &[u8]) {
    tunnel_pass(data);
    let layout = match parse(data) {
        Ok(l) => l,
        Err(e) => {
            black_box((e.index(), e.reason()));
            assert!(e.index() < crate::ParseError::COUNT);
            return;
        }
    };
    check_layout(data, &layout);
    read_views(data, &layout);
    rewrite_pass(data, &layout);
}

fn check_layout(data: &[u8], l: &Layout) {
    assert!(usize::from(l.n_vlan) <= 2);
    assert_eq!(usize::from(l.l3_offset), 14 + 4 * usize::from(l.n_vlan));
    assert!(usize::from(l.l3_offset) <= data.len());
    assert!(l.l4_end() <= data.len());
    if l.is_later_fragment() {
        assert!(l.is_fragment());
        assert_eq!(l.l4, L4Kind::None);
    }
}

fn read_views(data: &[u8], l: &Layout) {
    if let Ok(e) = ethernet::Packet::new_checked(data) {
        black_box((e.dst_addr(), e.src_addr(), e.ethertype(), e.payload().len()));
    }
    let mut off = ethernet::HEADER_LEN;
    for _ in 0..l.n_vlan {
        if let Ok(v) = vlan::Packet::new_checked(data.get(off..).unwrap_or(&[])) {
            black_box((v.tci(), v.vid(), v.pcp(), v.dei(), v.ethertype()));
        }
        off += vlan::HEADER_LEN;
    }
    let l3 = data.get(usize::from(l.l3_offset)..).unwrap_or(&[]);
    let seg = data
        .get(usize::from(l.l4_offset)..l.l4_end())
        .unwrap_or(&[]);
    match l.l3 {
        L3Kind::Arp => {
            let a = arp::Packet::new_checked(l3).expect("parser accepted ARP the view rejects");
            black_box((a.operation(), a.sha(), a.spa(), a.tha(), a.tpa()));
            black_box((
                a.hardware_type(),
                a.protocol_type(),
                a.hardware_len(),
                a.protocol_len(),
            ));
        }
        L3Kind::Ipv4 => {
            let p = ipv4::Packet::new_checked(l3).expect("parser accepted IPv4 the view rejects");
            black_box((p.version(), p.header_len(), p.tos(), p.dscp(), p.ecn()));
            black_box((p.total_len(), p.ident(), p.dont_frag(), p.more_frags()));
            black_box((p.frag_offset(), p.ttl(), p.protocol(), p.checksum()));
            black_box((
                p.src_addr(),
                p.dst_addr(),
                p.options().len(),
                p.payload().len(),
            ));
            black_box(p.verify_checksum());
            assert_eq!(p.payload().len(), usize::from(l.l4_len));
            assert_eq!(p.is_fragment(), l.is_fragment());
            read_l4(seg, l, IpPair::V4(p.src_addr(), p.dst_addr()));
        }
        L3Kind::Ipv6 => {
            let p = ipv6::Packet::new_checked(l3).expect("parser accepted IPv6 the view rejects");
            black_box((
                p.version(),
                p.traffic_class(),
                p.flow_label(),
                p.payload_len(),
            ));
            black_box((p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr()));
            black_box(p.payload().len());
            // Walk the extension headers with the views, as a second opinion.
            let mut nh = p.next_header();
            let mut rest = p.payload();
            while ipv6::is_ext_header(nh) {
                let Ok(h) = ipv6::ExtHeader::new_checked(rest, nh) else {
                    break;
                };
                black_box((h.kind(), h.data().len()));
                if nh == ipv6::NEXT_FRAGMENT {
                    if let Ok(f) = ipv6::FragmentHeader::new_checked(rest) {
                        black_box((f.frag_offset(), f.more_frags(), f.ident()));
                    }
                }
                nh = h.next_header();
                black_box(h.payload().len());
                rest = rest.get(h.header_len()..).unwrap_or(&[]);
                if nh == ipv6::NEXT_NONE {
                    break;
                }
            }
            black_box(ipv6::routing_segments_left(data, l));
            read_l4(seg, l, IpPair::V6(p.src_addr(), p.dst_addr()));
        }
        L3Kind::None | L3Kind::Other => {}
    }
}

#[derive(Clone, Copy)]
enum IpPair {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

fn read_l4(seg: &[u8], l: &Layout, ips: IpPair) {
    match l.l4 {
        L4Kind::Tcp => {
            let t = tcp::Packet::new_checked(seg).expect("parser accepted TCP the view rejects");
            black_box((t.src_port(), t.dst_port(), t.seq_number(), t.ack_number()));
            black_box((
                t.header_len(),
                t.flags(),
                t.window(),
                t.checksum(),
                t.urgent(),
            ));
            black_box((t.syn(), t.ack(), t.fin(), t.rst()));
            black_box((t.options().len(), t.payload().len()));
            match ips {
                IpPair::V4(s, d) => black_box(t.verify_checksum_ipv4(s, d)),
                IpPair::V6(s, d) => black_box(t.verify_checksum_ipv6(s, d)),
            };
        }
        L4Kind::Udp => {
            // First fragments may carry a UDP length beyond the fragment.
            let Ok(u) = udp::Packet::new_checked(seg) else {
                assert!(l.is_fragment(), "parser accepted UDP the view rejects");
                return;
            };
            black_box((u.src_port(), u.dst_port(), u.len(), u.checksum()));
            black_box(u.payload().len());
            match ips {
                IpPair::V4(s, d) => black_box(u.verify_checksum_ipv4(s, d)),
                IpPair::V6(s, d) => black_box(u.verify_checksum_ipv6(s, d)),
            };
        }
        L4Kind::Icmp => {
            let i = icmp::Packet::new_checked(seg).expect("parser accepted ICMP the view rejects");
            black_box((i.msg_type(), i.msg_code(), i.checksum(), i.rest_of_header()));
            black_box((
                i.echo_ident(),
                i.echo_seq_no(),
                i.body().len(),
                i.data().len(),
            ));
            black_box(i.verify_checksum());
        }
        L4Kind::Icmpv6 => {
            let i =
                icmpv6::Packet::new_checked(seg).expect("parser accepted ICMPv6 the view rejects");
            black_box((i.msg_type(), i.msg_code(), i.checksum()));
            black_box((
                i.echo_ident(),
                i.echo_seq_no(),
                i.body().len(),
                i.data().len(),
            ));
            black_box((
                i.nd_target(),
                i.nd_sll(),
                i.nd_tll(),
                i.nd_options().count(),
            ));
            if let IpPair::V6(s, d) = ips {
                black_box(i.verify_checksum(s, d));
            }
        }
        L4Kind::Sctp => {
            let s = sctp::Packet::new_checked(seg).expect("parser accepted SCTP the view rejects");
            black_box((
                s.src_port(),
                s.dst_port(),
                s.verification_tag(),
                s.checksum(),
            ));
            black_box((s.chunks().len(), s.verify_checksum()));
        }
        L4Kind::None | L4Kind::Other(_) => {}
    }
}

/// Offsets and kinds that no field rewrite may change.
fn shape(l: &Layout) -> (u8, u16, u16, L3Kind, u16, L4Kind, u8, u8, u16) {
    (
        l.n_vlan,
        l.ethertype,
        l.l3_offset,
        l.l3,
        l.l4_offset,
        l.l4,
        l.ip_proto,
        l.frag,
        l.l4_len,
    )
}

fn rewrite_pass(data: &[u8], l: &Layout) {
    let ip4_ok = verify_ipv4_header(data, l) == Some(true);
    let l4_ok = verify_l4(data, l) == Some(true);
    let mut f = data.to_vec();
    let v4 = Ipv4Addr::new(198, 51, 100, 7);
    let v6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0xabcd, 0x1234);

    rewrite::set_eth_src(&mut f, [2, 0, 0, 0, 0, 0xaa]);
    rewrite::set_eth_dst(&mut f, [2, 0, 0, 0, 0, 0xbb]);
    rewrite::set_ipv4_src(&mut f, l, v4);
    rewrite::set_ipv4_dst(&mut f, l, Ipv4Addr::new(203, 0, 113, 9));
    rewrite::set_ipv6_src(&mut f, l, v6);
    rewrite::set_ipv6_dst(&mut f, l, Ipv6Addr::LOCALHOST);
    rewrite::set_ip_tos(&mut f, l, 0x5a);
    rewrite::set_ip_dscp(&mut f, l, 0x2e);
    rewrite::set_ip_ecn(&mut f, l, 0x1);
    rewrite::set_ttl(&mut f, l, 9);
    black_box(rewrite::dec_ttl(&mut f, l));
    rewrite::set_tp_src(&mut f, l, 0x1234);
    rewrite::set_tp_dst(&mut f, l, 0xfedc);
    rewrite::set_arp_op(&mut f, l, 2);
    rewrite::set_arp_sha(&mut f, l, [2, 0, 0, 0, 0, 0xcc]);
    rewrite::set_arp_spa(&mut f, l, v4);
    rewrite::set_arp_tha(&mut f, l, [2, 0, 0, 0, 0, 0xdd]);
    rewrite::set_arp_tpa(&mut f, l, v4);
    rewrite::set_vlan_vid(&mut f, 0xabc);
    rewrite::set_vlan_pcp(&mut f, 5);

    let after = parse(&f).expect("a field rewrite broke parsing");
    assert_eq!(
        shape(&after),
        shape(l),
        "a field rewrite changed the layout"
    );
    if ip4_ok {
        assert_eq!(
            verify_ipv4_header(&f, &after),
            Some(true),
            "IPv4 checksum broken"
        );
    }
    if l4_ok {
        assert_eq!(verify_l4(&f, &after), Some(true), "L4 checksum broken");
    }

    let mut buf = PacketBuf::from_slice(&f);
    assert!(rewrite::push_vlan(&mut buf, crate::ETHERTYPE_QINQ, 0x0123));
    if l.n_vlan < 2 {
        let pushed = parse(buf.data()).expect("push_vlan broke parsing");
        assert_eq!(pushed.n_vlan, l.n_vlan + 1);
        if after.is_ip() {
            assert_eq!(pushed.l4_offset, after.l4_offset + 4);
        }
    }
    assert!(rewrite::pop_vlan(&mut buf));
    assert_eq!(buf.data(), &f[..], "push+pop did not restore the frame");
}

/// Every UDP port is claimed by some tunnel kind, so random input reaches
/// the VXLAN and Geneve header checks instead of stopping at the port.
fn any_port_kind(port: u16) -> Option<TunnelKind> {
    Some(if port & 1 == 0 {
        TunnelKind::Vxlan
    } else {
        TunnelKind::Geneve
    })
}

fn tunnel_pass(data: &[u8]) {
    let d = match tunnel::parse(data, any_port_kind) {
        Ok(Some(d)) => d,
        Ok(None) => return,
        Err(e) => {
            black_box(e.name());
            assert!(e.index() < tunnel::TunnelError::COUNT);
            return;
        }
    };
    assert!(d.inner_off + ethernet::HEADER_LEN <= data.len());
    assert!(d.vni <= tunnel::MAX_VNI);
    let opts = d.options(data);
    assert_eq!(opts.len(), d.options_len);
    if d.kind == TunnelKind::Vxlan {
        assert_eq!((d.options_off, d.options_len), (0, 0));
    } else {
        assert_eq!(d.options_off + d.options_len, d.inner_off);
        let total: usize = tunnel::geneve_options(opts).map(|o| 4 + o.data.len()).sum();
        assert_eq!(
            total,
            opts.len(),
            "parse accepted options the iterator rejects"
        );
    }
    black_box(tunnel::entropy_port(d.inner(data)));

    // Whatever parse accepts, encap must be able to rebuild.
    let e = Encap {
        kind: d.kind,
        eth_src: d.eth_src,
        eth_dst: d.eth_dst,
        ip_src: d.ip_src,
        ip_dst: d.ip_dst,
        tos: d.tos,
        ttl: d.ttl,
        df: true,
        udp_src: d.udp_src,
        udp_dst: d.udp_dst,
        csum: d.udp_csum_present,
        vni: d.vni,
        geneve_options: opts,
        geneve_oam: d.geneve_oam,
    };
    let mut buf = PacketBuf::from_slice(d.inner(data));
    buf.reserve_headroom(tunnel::overhead(d.kind, d.ip_src.is_ipv6(), opts.len()));
    tunnel::encap(&mut buf, &e).expect("cannot re-encapsulate a parsed tunnel packet");
    let again = tunnel::parse(buf.data(), any_port_kind)
        .expect("re-encapsulated packet rejected")
        .expect("re-encapsulated packet not recognised");
    let strip = |d: tunnel::Decap| {
        (
            d.kind,
            d.eth_src,
            d.eth_dst,
            d.ip_src,
            d.ip_dst,
            d.tos,
            d.ttl,
            d.udp_src,
            d.udp_dst,
            d.vni,
            d.geneve_oam,
        )
    };
    assert_eq!(strip(again), strip(d));
    assert_eq!(again.options(buf.data()), opts);
    assert_eq!(again.inner(buf.data()), d.inner(data));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::FrameBuilder;

    #[test]
    fn smoke() {
        fuzz_parse(&[]);
        fuzz_parse(&[0; 14]);
        fuzz_parse(&[0xff; 100]);
        let f = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .vlan(5)
            .ipv4(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8))
            .udp(1, 2)
            .payload(b"abc")
            .build();
        fuzz_parse(&f);
        for cut in 0..f.len() {
            fuzz_parse(&f[..cut]);
        }
    }

    #[test]
    fn smoke_tunnels() {
        let inner = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8))
            .udp(1, 2)
            .payload(b"abc")
            .build();
        let mut opts = Vec::new();
        tunnel::push_geneve_option(&mut opts, 7, 0x81, &[1, 2, 3, 4]).unwrap();
        for (kind, o) in [
            (TunnelKind::Vxlan, &[][..]),
            (TunnelKind::Geneve, &opts[..]),
        ] {
            for ip_dst in [
                std::net::IpAddr::from([10, 0, 0, 2]),
                std::net::IpAddr::from(Ipv6Addr::LOCALHOST),
            ] {
                let ip_src = match ip_dst {
                    std::net::IpAddr::V4(_) => std::net::IpAddr::from([10, 0, 0, 1]),
                    std::net::IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
                };
                let e = Encap {
                    kind,
                    eth_src: [2, 0, 0, 0, 0, 3],
                    eth_dst: [2, 0, 0, 0, 0, 4],
                    ip_src,
                    ip_dst,
                    tos: 0,
                    ttl: 64,
                    df: true,
                    udp_src: 50000,
                    // Odd ports are Geneve for `any_port_kind`.
                    udp_dst: if kind == TunnelKind::Vxlan {
                        4790
                    } else {
                        6081
                    },
                    csum: true,
                    vni: 77,
                    geneve_options: o,
                    geneve_oam: false,
                };
                let mut buf = PacketBuf::from_slice(&inner);
                tunnel::encap(&mut buf, &e).unwrap();
                let f = buf.data();
                assert!(tunnel::parse(f, any_port_kind).unwrap().is_some());
                for cut in 0..=f.len() {
                    fuzz_parse(&f[..cut]);
                }
            }
        }
    }
}
