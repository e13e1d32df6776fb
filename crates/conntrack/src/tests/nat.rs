//! NAT behaviour (OVS `nat_get_unique_tuple`, `nat_packet`, `handle_nat`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

const T4: [u8; 4] = [203, 0, 113, 1];
const C4: [u8; 4] = [198, 18, 0, 3];

fn a4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn a6(a: [u8; 16]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(a))
}

fn snat(addr: IpAddr) -> NatAction {
    NatAction {
        kind: Some(NatKind::Src),
        addr_min: Some(addr),
        ..NatAction::default()
    }
}

fn nat_commit(zone: u16, na: NatAction) -> CtRequest {
    CtRequest {
        nat: Some(na),
        ..commit(zone)
    }
}

/// `ct(nat)`: no commit, plain nat.
fn nat_only(zone: u16) -> CtRequest {
    CtRequest {
        zone,
        nat: Some(NatAction::default()),
        ..CtRequest::default()
    }
}

fn udp4(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> (u16, Vec<u8>) {
    ip(Ip::V4(src), Ip::V4(dst), 17, &udp_hdr(sp, dp, 4))
}

/// (src, sport, dst, dport) of a packet after applying `rw`.
type Flow = (IpAddr, u16, IpAddr, u16);

fn apply(f: Flow, rw: &NatRewrite) -> Flow {
    (
        rw.src.unwrap_or(f.0),
        rw.sport.unwrap_or(f.1),
        rw.dst.unwrap_or(f.2),
        rw.dport.unwrap_or(f.3),
    )
}

fn pkt(f: Flow, proto: u8) -> (u16, Vec<u8>) {
    let l4 = if proto == 6 {
        tcp_hdr(f.1, f.3, 1, 0, TCP_SYN, 65535, &[], 0)
    } else {
        udp_hdr(f.1, f.3, 4)
    };
    match (f.0, f.2) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ip(Ip::V4(s.octets()), Ip::V4(d.octets()), proto, &l4),
        (IpAddr::V6(s), IpAddr::V6(d)) => ip(Ip::V6(s.octets()), Ip::V6(d.octets()), proto, &l4),
        _ => unreachable!(),
    }
}

#[test]
fn snat_keeps_port_when_free_then_picks_another() {
    let mut ct = ct();
    let now = Instant::now();
    let req = nat_commit(0, snat(a4(T4)));

    // A:40000 -> B:53 becomes T:40000 -> B:53.
    let r = ct.process(ETH_IP, &udp4(A4, 40000, B4, 53).1, &req, now);
    assert_eq!(r.state, TRK | NEW | SNAT);
    assert_eq!(
        r.nat,
        NatRewrite {
            src: Some(a4(T4)),
            ..NatRewrite::default()
        }
    );
    // The orig tuple is the untranslated one.
    assert_eq!(r.orig.unwrap().src, a4(A4));

    // C:40000 -> B:53: T:40000 -> B:53 is taken, so the next port.
    let r = ct.process(ETH_IP, &udp4(C4, 40000, B4, 53).1, &req, now);
    assert_eq!(r.state, TRK | NEW | SNAT);
    assert_eq!(
        r.nat,
        NatRewrite {
            src: Some(a4(T4)),
            sport: Some(40001),
            ..NatRewrite::default()
        }
    );

    // Replies are un-NATed (+dnat in the reply direction, as in OVS).
    let r = ct.process(ETH_IP, &udp4(B4, 53, T4, 40000).1, &nat_only(0), now);
    assert_eq!(r.state, TRK | EST | RPL | DNAT);
    assert_eq!(
        r.nat,
        NatRewrite {
            dst: Some(a4(A4)),
            ..NatRewrite::default()
        }
    );
    let r = ct.process(ETH_IP, &udp4(B4, 53, T4, 40001).1, &nat_only(0), now);
    assert_eq!(r.state, TRK | EST | RPL | DNAT);
    assert_eq!(
        r.nat,
        NatRewrite {
            dst: Some(a4(C4)),
            dport: Some(40000),
            ..NatRewrite::default()
        }
    );
    assert_eq!(r.orig.unwrap().src, a4(C4));

    // Later forward packets with `nat` get the same translation.
    let r = ct.process(ETH_IP, &udp4(C4, 40000, B4, 53).1, &nat_only(0), now);
    assert_eq!(r.state, TRK | EST | SNAT);
    assert_eq!(r.nat.sport, Some(40001));

    // Without `nat` in the ct action nothing is rewritten and no NAT bit.
    let r = ct.process(
        ETH_IP,
        &udp4(C4, 40000, B4, 53).1,
        &CtRequest::default(),
        now,
    );
    assert_eq!(r.state, TRK | EST);
    assert!(r.nat.is_empty());
    let r = ct.process(
        ETH_IP,
        &udp4(B4, 53, T4, 40001).1,
        &CtRequest::default(),
        now,
    );
    assert_eq!(r.state, TRK | EST | RPL);
    assert!(r.nat.is_empty());

    assert_eq!(
        lines(&ct, None, now),
        vec![
            "udp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=40000,dport=53),reply=(src=198.18.0.2,dst=203.0.113.1,sport=53,dport=40000)",
            "udp,orig=(src=198.18.0.3,dst=198.18.0.2,sport=40000,dport=53),reply=(src=198.18.0.2,dst=203.0.113.1,sport=53,dport=40001)",
        ]
    );
}

#[test]
fn snat_port_classes() {
    // Without a port range OVS keeps the port's class: a privileged port
    // stays below 512, 512-1023 move within 600-1023.
    let mut ct = ct();
    let now = Instant::now();
    let req = nat_commit(0, snat(a4(T4)));
    for (client, sp, want) in [
        (A4, 511, None),
        (C4, 511, Some(1)),
        (A4, 1023, None),
        (C4, 1023, Some(600)),
        (A4, 65535, None),
        (C4, 65535, Some(1024)),
    ] {
        let r = ct.process(ETH_IP, &udp4(client, sp, B4, 53).1, &req, now);
        assert_eq!(r.state, TRK | NEW | SNAT);
        assert_eq!(r.nat.sport, want, "{sp}");
    }
}

#[test]
fn dnat_flags_port_and_plain_nat() {
    let mut ct = ct();
    let now = Instant::now();
    let vip = [192, 0, 2, 10];
    let na = NatAction {
        kind: Some(NatKind::Dst),
        addr_min: Some(a4(B4)),
        port_min: 8080,
        ..NatAction::default()
    };
    let mut t = Tcp {
        a: Ip::V4(A4),
        b: Ip::V4(vip),
        ..Tcp::v4()
    };
    let syn = t.seg(false, TCP_SYN, 0);
    let r = ct.process(syn.0, &syn.1, &nat_commit(0, na), now);
    assert_eq!(r.state, TRK | NEW | DNAT);
    assert_eq!(
        r.nat,
        NatRewrite {
            dst: Some(a4(B4)),
            dport: Some(8080),
            ..NatRewrite::default()
        }
    );
    // The backend answers from B:8080; un-NAT gives +snat.
    let mut back = Tcp {
        a: Ip::V4(A4),
        b: Ip::V4(B4),
        bp: 8080,
        nxt: t.nxt,
        ..Tcp::v4()
    };
    let synack = back.seg(true, TCP_SYN | TCP_ACK, 0);
    let r = ct.process(synack.0, &synack.1, &nat_only(0), now);
    assert_eq!(r.state, TRK | EST | RPL | SNAT);
    assert_eq!(
        r.nat,
        NatRewrite {
            src: Some(a4(vip)),
            sport: Some(80),
            ..NatRewrite::default()
        }
    );
    assert_eq!(
        lines(&ct, None, now),
        vec!["tcp,orig=(src=198.18.0.1,dst=192.0.2.10,sport=40000,dport=80),reply=(src=198.18.0.2,dst=198.18.0.1,sport=8080,dport=40000),protoinfo=(state=ESTABLISHED)"]
    );

    // Plain `nat` on a new connection sets nothing up.
    let r = ct.process(
        ETH_IP,
        &udp4(A4, 1, B4, 2).1,
        &nat_commit(0, NatAction::default()),
        now,
    );
    assert_eq!(r.state, TRK | NEW);
    assert!(r.nat.is_empty());
    let r = ct.process(ETH_IP, &udp4(B4, 2, A4, 1).1, &nat_only(0), now);
    assert_eq!(r.state, TRK | EST | RPL);
    assert!(r.nat.is_empty());
}

#[test]
fn dnat_spreads_over_backends_and_unnats_replies() {
    let mut ct = ct();
    let now = Instant::now();
    let vip = [192, 0, 2, 10];
    let na = NatAction {
        kind: Some(NatKind::Dst),
        addr_min: Some(a4([10, 0, 0, 1])),
        addr_max: Some(a4([10, 0, 0, 3])),
        ..NatAction::default()
    };
    let mut seen = std::collections::BTreeMap::new();
    for sp in 20000..20060u16 {
        let r = ct.process(ETH_IP, &udp4(A4, sp, vip, 53).1, &nat_commit(0, na), now);
        assert_eq!(r.state, TRK | NEW | DNAT);
        let IpAddr::V4(be) = r.nat.dst.unwrap() else {
            panic!()
        };
        let be = be.octets();
        assert!((1..=3).contains(&be[3]) && be[..3] == [10, 0, 0]);
        assert_eq!(r.nat.dport, None);
        *seen.entry(be[3]).or_insert(0) += 1;
        // Replies from that backend come back from the VIP.
        let r = ct.process(ETH_IP, &udp4(be, 53, A4, sp).1, &nat_only(0), now);
        assert_eq!(r.state, TRK | EST | RPL | SNAT);
        assert_eq!(
            r.nat,
            NatRewrite {
                src: Some(a4(vip)),
                ..NatRewrite::default()
            }
        );
        // The same connection always goes to the same backend.
        let r2 = ct.process(ETH_IP, &udp4(A4, sp, vip, 53).1, &nat_only(0), now);
        assert_eq!(r2.nat.dst, Some(a4(be)));
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[test]
fn exhaustion_creates_nothing_and_is_counted() {
    let mut ct = ct();
    let now = Instant::now();
    let na = NatAction {
        port_min: 1000,
        port_max: 1000,
        ..snat(a4(T4))
    };
    let r = ct.process(ETH_IP, &udp4(A4, 5000, B4, 53).1, &nat_commit(0, na), now);
    assert_eq!(r.state, TRK | NEW | SNAT);
    assert_eq!(r.nat.sport, Some(1000));
    // Another client: the only tuple T:1000 -> B:53 is taken.
    let r = ct.process(ETH_IP, &udp4(C4, 5000, B4, 53).1, &nat_commit(0, na), now);
    assert_eq!(r.state, TRK | NEW);
    assert!(r.nat.is_empty());
    assert_eq!(r.conn, None);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.stats().nat_exhausted, 1);
    // Another destination is another tuple.
    let r = ct.process(ETH_IP, &udp4(C4, 5000, R4, 53).1, &nat_commit(0, na), now);
    assert_eq!(r.state, TRK | NEW | SNAT);
    // Once the first connection is gone the tuple is free again.
    let t1 = now + Duration::from_secs(61);
    let r = ct.process(ETH_IP, &udp4(C4, 5000, B4, 53).1, &nat_commit(0, na), t1);
    assert_eq!(r.state, TRK | NEW | SNAT);
    assert_eq!(r.nat.sport, Some(1000));
    // A range of the other family cannot translate.
    let r = ct.process(
        ETH_IP,
        &udp4(A4, 7, B4, 53).1,
        &nat_commit(0, snat(a6(v6(9)))),
        t1,
    );
    assert_eq!(r.state, TRK | NEW);
    assert_eq!(ct.stats().nat_exhausted, 2);
}

#[test]
fn ipv6_snat() {
    let mut ct = ct();
    let now = Instant::now();
    let t = a6(v6(0x99));
    let req = nat_commit(0, snat(t));
    let f1: Flow = (a6(v6(1)), 40000, a6(v6(2)), 443);
    let f2: Flow = (a6(v6(3)), 40000, a6(v6(2)), 443);
    let r = ct.process(ETH_IP6, &pkt(f1, 6).1, &req, now);
    assert_eq!(r.state, TRK | NEW | SNAT);
    assert_eq!(apply(f1, &r.nat), (t, 40000, a6(v6(2)), 443));
    let r = ct.process(ETH_IP6, &pkt(f2, 6).1, &req, now);
    assert_eq!(apply(f2, &r.nat), (t, 40001, a6(v6(2)), 443));
    assert_eq!(
        lines(&ct, None, now)[1],
        "tcp,orig=(src=fd00::3,dst=fd00::2,sport=40000,dport=443),reply=(src=fd00::2,dst=fd00::99,sport=443,dport=40001),protoinfo=(state=SYN_SENT)"
    );
}

#[test]
fn icmp_snat_translates_the_id() {
    let mut ct = ct();
    let now = Instant::now();
    let req = nat_commit(0, snat(a4(T4)));
    let r = ct.process(
        ETH_IP,
        &echo(Ip::V4(A4), Ip::V4(B4), false, 77).1,
        &req,
        now,
    );
    assert_eq!(r.state, TRK | NEW | SNAT);
    assert_eq!(r.nat.icmp_id, None);
    let r = ct.process(
        ETH_IP,
        &echo(Ip::V4(C4), Ip::V4(B4), false, 77).1,
        &req,
        now,
    );
    assert_eq!(
        r.nat,
        NatRewrite {
            src: Some(a4(T4)),
            icmp_id: Some(78),
            ..NatRewrite::default()
        }
    );
    let r = ct.process(
        ETH_IP,
        &echo(Ip::V4(B4), Ip::V4(T4), true, 78).1,
        &nat_only(0),
        now,
    );
    assert_eq!(r.state, TRK | EST | RPL | DNAT);
    assert_eq!(
        r.nat,
        NatRewrite {
            dst: Some(a4(C4)),
            icmp_id: Some(77),
            ..NatRewrite::default()
        }
    );
    assert_eq!(
        lines(&ct, None, now)[1],
        "icmp,orig=(src=198.18.0.3,dst=198.18.0.2,id=77,type=8,code=0),reply=(src=198.18.0.2,dst=203.0.113.1,id=78,type=0,code=0)"
    );
}

#[test]
fn zones_keep_nat_tables_separate() {
    let mut ct = ct();
    let now = Instant::now();
    for zone in [1, 2] {
        // The same pair of colliding clients in each zone: in each, the
        // first keeps its port and the second moves.
        let r = ct.process(
            ETH_IP,
            &udp4(A4, 4000, B4, 53).1,
            &nat_commit(zone, snat(a4(T4))),
            now,
        );
        assert_eq!(r.nat.sport, None);
        let r = ct.process(
            ETH_IP,
            &udp4(C4, 4000, B4, 53).1,
            &nat_commit(zone, snat(a4(T4))),
            now,
        );
        assert_eq!(r.nat.sport, Some(4001));
    }
    let r = ct.process(ETH_IP, &udp4(B4, 53, T4, 4001).1, &nat_only(2), now);
    assert_eq!((r.state, r.nat.dst), (TRK | EST | RPL | DNAT, Some(a4(C4))));
    assert_eq!(ct.len(), 4);
}

#[test]
fn flush_and_sweep_remove_both_keys() {
    let mut ct = ct();
    let now = Instant::now();
    let req = nat_commit(0, snat(a4(T4)));
    ct.process(ETH_IP, &udp4(A4, 4000, B4, 53).1, &req, now);
    assert_eq!(ct.flush(&FlushFilter::default()), 1);
    // The translated reply tuple no longer finds anything...
    let r = ct.process(ETH_IP, &udp4(B4, 53, T4, 4000).1, &nat_only(0), now);
    assert_eq!(r.state, TRK | NEW);
    // ...and T:4000 is free for the next client.
    let r = ct.process(ETH_IP, &udp4(C4, 4000, B4, 53).1, &req, now);
    assert_eq!(r.nat.sport, None);
    // Same after expiry and a sweep.
    let t1 = now + Duration::from_secs(61);
    assert_eq!(ct.sweep(t1), 1);
    assert!(ct.is_empty());
    let r = ct.process(ETH_IP, &udp4(B4, 53, T4, 4000).1, &nat_only(0), t1);
    assert_eq!(r.state, TRK | NEW);
    let r = ct.process(ETH_IP, &udp4(A4, 4000, B4, 53).1, &req, t1);
    assert_eq!(r.nat.sport, None);
}

#[test]
fn second_ct_in_zone_process_known() {
    let mut ct = ct();
    let now = Instant::now();
    let req = nat_commit(0, snat(a4(T4)));
    ct.process(ETH_IP, &udp4(A4, 4000, B4, 53).1, &req, now);
    ct.process(ETH_IP, &udp4(C4, 4000, B4, 53).1, &req, now);

    // ct(nat) then ct(commit,nat(src=..)) in the same zone: the second
    // one sees +snat from the first and leaves the packet alone.
    let first = ct.process(ETH_IP, &udp4(C4, 4000, B4, 53).1, &nat_only(0), now);
    assert_eq!(first.state, TRK | NEW | SNAT);
    let second = ct.process_known(&first, &req).unwrap();
    assert_eq!(second.state, TRK | NEW | SNAT);
    assert!(second.nat.is_empty());

    // ct() without nat then ct(nat): the second one translates.
    let first = ct.process(ETH_IP, &udp4(B4, 53, T4, 4001).1, &commit(0), now);
    assert_eq!(first.state, TRK | EST | RPL);
    assert!(first.nat.is_empty());
    let second = ct.process_known(&first, &nat_only(0)).unwrap();
    assert_eq!(second.state, TRK | EST | RPL | DNAT);
    assert_eq!(second.nat.dst, Some(a4(C4)));
    assert_eq!(second.nat.dport, Some(4000));
    // Without nat in the second ct: nothing.
    let second = ct.process_known(&first, &commit(0)).unwrap();
    assert!(second.nat.is_empty());
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn dnat(addr: IpAddr, port: u16) -> NatAction {
    NatAction {
        kind: Some(NatKind::Dst),
        addr_min: Some(addr),
        port_min: port,
        ..NatAction::default()
    }
}

fn rel(outer: NatRewrite, inner: NatInner) -> NatRewrite {
    NatRewrite {
        inner: Some(inner),
        ..outer
    }
}

/// OVS system-traffic.at "conntrack - ICMP related NAT with single port":
/// 10.1.1.1:1234 -> 10.1.1.240:80 is DNATed to 10.1.1.2:8080; the port
/// unreachable 10.1.1.2 sends back must leave as 10.1.1.240's, quoting
/// 10.1.1.1:1234 -> 10.1.1.240:80 (the bytes are checked in the
/// datapath's tests).
#[test]
fn related_error_of_dnat_connection_ovs_case() {
    let mut ct = ct();
    let now = Instant::now();
    let udp =
        hex("4500002944c140004011df100a0101010a0101f004d2005000156b24646573745f756e72656163680a");
    let err = hex("45c000456a3700004001f9bc0a0101020a01010103031328000000004500002944c140004011dffe0a0101010a01010204d21f9000154cd2646573745f756e72656163680a");
    let vip = a4([10, 1, 1, 240]);
    let r = ct.process(
        ETH_IP,
        &udp,
        &nat_commit(0, dnat(a4([10, 1, 1, 2]), 8080)),
        now,
    );
    assert_eq!(r.state, TRK | NEW | DNAT);
    let r = ct.process(ETH_IP, &err, &nat_only(0), now);
    // +snat: the error travels the reply way, un-DNATed like a reply.
    assert_eq!(r.state, TRK | REL | RPL | SNAT);
    assert_eq!(
        r.nat,
        rel(
            NatRewrite {
                src: Some(vip),
                ..NatRewrite::default()
            },
            NatInner {
                dst: Some(vip),
                dport: Some(80),
                ..NatInner::default()
            }
        )
    );
    assert_eq!(r.orig.unwrap().dst, vip);
}

/// UDP and TCP behind SNAT, IPv4 and IPv6: a router's error to the NAT
/// address goes to the client quoting the client's own packet; the
/// client's error about a reply goes out from the NAT address quoting
/// the reply as the server sent it.
#[test]
fn related_errors_of_snat_connections() {
    let cases = [
        (Ip::V4(A4), Ip::V4(C4), Ip::V4(B4), Ip::V4(T4), Ip::V4(R4)),
        (
            Ip::V6(v6(1)),
            Ip::V6(v6(3)),
            Ip::V6(v6(2)),
            Ip::V6(v6(0x99)),
            Ip::V6(v6(0xfe)),
        ),
    ];
    let addr = |a: Ip| match a {
        Ip::V4(a) => a4(a),
        Ip::V6(a) => a6(a),
    };
    for (a, c, b, t, r) in cases {
        for proto in [17u8, 6] {
            let mut ct = ct();
            let now = Instant::now();
            let req = nat_commit(0, snat(addr(t)));
            let l4 = |sp, dp| {
                if proto == 6 {
                    tcp_hdr(sp, dp, 1, 0, TCP_SYN, 65535, &[], 0)
                } else {
                    udp_hdr(sp, dp, 4)
                }
            };
            // A:4000 keeps its port, C:4000 gets T:4001.
            ct.process(
                ip(a, b, proto, &l4(4000, 53)).0,
                &ip(a, b, proto, &l4(4000, 53)).1,
                &req,
                now,
            );
            let out = ip(c, b, proto, &l4(4000, 53));
            let res = ct.process(out.0, &out.1, &req, now);
            assert_eq!(res.nat.sport, Some(4001));

            // TTL exceeded from a router, quoting T:4001 -> B:53.
            let translated = ip(t, b, proto, &l4(4001, 53));
            let err = icmp_error(r, t, &translated.1);
            let res = ct.process(err.0, &err.1, &nat_only(0), now);
            assert_eq!(res.state, TRK | REL | RPL | DNAT);
            assert_eq!(
                res.nat,
                rel(
                    NatRewrite {
                        dst: Some(addr(c)),
                        ..NatRewrite::default()
                    },
                    NatInner {
                        src: Some(addr(c)),
                        sport: Some(4000),
                        ..NatInner::default()
                    }
                ),
                "proto {proto}"
            );
            // A's connection kept its port: only the address changes.
            let translated = ip(t, b, proto, &l4(4000, 53));
            let err = icmp_error(b, t, &translated.1);
            let res = ct.process(err.0, &err.1, &nat_only(0), now);
            assert_eq!(
                res.nat.inner,
                Some(NatInner {
                    src: Some(addr(a)),
                    ..NatInner::default()
                })
            );
            assert_eq!(res.nat.dst, Some(addr(a)));

            // C refuses B's (un-NATed) reply B:53 -> C:4000: the error
            // leaves from T and quotes B:53 -> T:4001.
            let reply = ip(b, c, proto, &l4(53, 4000));
            let err = icmp_error(c, b, &reply.1);
            let res = ct.process(err.0, &err.1, &nat_only(0), now);
            assert_eq!(res.state, TRK | REL | SNAT);
            assert_eq!(
                res.nat,
                rel(
                    NatRewrite {
                        src: Some(addr(t)),
                        ..NatRewrite::default()
                    },
                    NatInner {
                        dst: Some(addr(t)),
                        dport: Some(4001),
                        ..NatInner::default()
                    }
                )
            );

            // Without nat in the ct: +rel only, nothing written.
            let res = ct.process(err.0, &err.1, &CtRequest::default(), now);
            assert_eq!(res.state, TRK | REL);
            assert!(res.nat.is_empty());
        }
    }
}

#[test]
fn related_errors_of_dnat_connections_v6_tcp() {
    let mut ct = ct();
    let now = Instant::now();
    let (c, vip, be) = (v6(1), v6(0x64), v6(2));
    let syn = |s, sp, d, dp| {
        ip(
            Ip::V6(s),
            Ip::V6(d),
            6,
            &tcp_hdr(sp, dp, 1, 0, TCP_SYN, 65535, &[], 0),
        )
    };
    let p = syn(c, 40000, vip, 80);
    let r = ct.process(p.0, &p.1, &nat_commit(0, dnat(a6(be), 8080)), now);
    assert_eq!(r.nat.dst, Some(a6(be)));
    // The backend says port unreachable about C:40000 -> BE:8080.
    let err = icmp_error(Ip::V6(be), Ip::V6(c), &syn(c, 40000, be, 8080).1);
    let r = ct.process(err.0, &err.1, &nat_only(0), now);
    assert_eq!(r.state, TRK | REL | RPL | SNAT);
    assert_eq!(
        r.nat,
        rel(
            NatRewrite {
                src: Some(a6(vip)),
                ..NatRewrite::default()
            },
            NatInner {
                dst: Some(a6(vip)),
                dport: Some(80),
                ..NatInner::default()
            }
        )
    );
}

/// Quoted pings: ICMPv4 echo ids are translated back, ICMPv6 ones never
/// were (addresses only).
#[test]
fn related_errors_of_icmp_echo_connections() {
    let mut ct = ct();
    let now = Instant::now();
    let req = nat_commit(0, snat(a4(T4)));
    ct.process(
        ETH_IP,
        &echo(Ip::V4(A4), Ip::V4(B4), false, 77).1,
        &req,
        now,
    );
    let r = ct.process(
        ETH_IP,
        &echo(Ip::V4(C4), Ip::V4(B4), false, 77).1,
        &req,
        now,
    );
    assert_eq!(r.nat.icmp_id, Some(78));
    let quoted = echo(Ip::V4(T4), Ip::V4(B4), false, 78);
    let err = icmp_error(Ip::V4(R4), Ip::V4(T4), &quoted.1);
    let r = ct.process(err.0, &err.1, &nat_only(0), now);
    assert_eq!(r.state, TRK | REL | RPL | DNAT);
    assert_eq!(
        r.nat,
        rel(
            NatRewrite {
                dst: Some(a4(C4)),
                ..NatRewrite::default()
            },
            NatInner {
                src: Some(a4(C4)),
                icmp_id: Some(77),
                ..NatInner::default()
            }
        )
    );

    let t6 = v6(0x99);
    let req = nat_commit(0, snat(a6(t6)));
    let p = echo(Ip::V6(v6(1)), Ip::V6(v6(2)), false, 5);
    assert_eq!(ct.process(p.0, &p.1, &req, now).state, TRK | NEW | SNAT);
    let quoted = echo(Ip::V6(t6), Ip::V6(v6(2)), false, 5);
    let err = icmp_error(Ip::V6(v6(0xfe)), Ip::V6(t6), &quoted.1);
    let r = ct.process(err.0, &err.1, &nat_only(0), now);
    assert_eq!(r.state, TRK | REL | RPL | DNAT);
    assert_eq!(
        r.nat,
        rel(
            NatRewrite {
                dst: Some(a6(v6(1))),
                ..NatRewrite::default()
            },
            NatInner {
                src: Some(a6(v6(1))),
                ..NatInner::default()
            }
        )
    );
}

/// `ct()` then `ct(nat)` in the same zone (OVS `process_one_fast` calls
/// `handle_nat` with the packet's `icmp_related`): the error is translated
/// by the second one; a second `ct(nat)` leaves it alone.
#[test]
fn related_error_second_ct_in_zone() {
    let mut ct = ct();
    let now = Instant::now();
    ct.process(
        ETH_IP,
        &udp4(A4, 4000, B4, 53).1,
        &nat_commit(0, snat(a4(T4))),
        now,
    );
    let err = icmp_error(Ip::V4(B4), Ip::V4(T4), &udp4(T4, 4000, B4, 53).1);
    let first = ct.process(err.0, &err.1, &CtRequest::default(), now);
    assert_eq!(first.state, TRK | REL | RPL);
    assert!(first.nat.is_empty());
    let second = ct.process_known(&first, &nat_only(0)).unwrap();
    assert_eq!(second.state, TRK | REL | RPL | DNAT);
    assert_eq!(second.nat.dst, Some(a4(A4)));
    assert_eq!(
        second.nat.inner,
        Some(NatInner {
            src: Some(a4(A4)),
            ..NatInner::default()
        })
    );
    let third = ct.process_known(&second, &nat_only(0)).unwrap();
    assert!(third.nat.is_empty());
    // A connection without NAT: +rel, nothing to write, even with nat.
    ct.process(ETH_IP, &udp4(A4, 5000, B4, 53).1, &commit(0), now);
    let err = icmp_error(Ip::V4(B4), Ip::V4(A4), &udp4(A4, 5000, B4, 53).1);
    let r = ct.process(err.0, &err.1, &nat_only(0), now);
    assert_eq!(r.state, TRK | REL | RPL);
    assert!(r.nat.is_empty());
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random SNAT/DNAT ranges over random connections: every
        /// committed connection owns its reply key (no two share one), the
        /// forward rewrite turns the original tuple into the reply tuple
        /// reversed, and the reply rewrite restores the original tuple.
        #[test]
        fn nat_tuples_unique_and_reversible(
            conns in proptest::collection::vec((0u8..4, 1u16..6, 0u8..3, any::<bool>()), 1..60),
            dnat in any::<bool>(),
            addr_lo in 1u8..4, addr_n in 0u8..3,
            port_lo in prop_oneof![Just(0u16), 1u16..5, 1020u16..1030, 65530u16..=65535],
            port_n in 0u16..4,
            random in any::<bool>(), persistent in any::<bool>(),
            tcp in any::<bool>(),
        ) {
            let mut ct = ct();
            let now = Instant::now();
            let na = NatAction {
                kind: Some(if dnat { NatKind::Dst } else { NatKind::Src }),
                addr_min: Some(a4([10, 9, 0, addr_lo])),
                addr_max: Some(a4([10, 9, 0, addr_lo + addr_n])),
                port_min: port_lo,
                port_max: port_lo.saturating_add(port_n),
                random,
                hash: false,
                persistent,
            };
            let proto = if tcp { 6 } else { 17 };
            let mut committed: Vec<(u16, Flow, Flow)> = Vec::new();
            let mut exhausted = 0;
            let mut seen = std::collections::HashSet::new();
            for (c, sp, d, zone1) in conns {
                let f: Flow = (a4([198, 18, 1, c]), 1000 + sp, a4([198, 18, 2, d]), 80);
                let zone = u16::from(zone1);
                if !seen.insert((zone, f)) {
                    continue;
                }
                let p = pkt(f, proto);
                let r = ct.process(p.0, &p.1, &nat_commit(zone, na), now);
                if r.conn.is_none() {
                    exhausted += 1;
                    prop_assert_eq!(r.state, TRK | NEW);
                    continue;
                }
                let out = apply(f, &r.nat);
                let (s, sp2, dd, dp2) = out;
                let reply: Flow = (dd, dp2, s, sp2);
                committed.push((zone, f, reply));
                if dnat {
                    prop_assert_eq!(r.state, TRK | NEW | DNAT);
                    prop_assert_eq!(s, f.0);
                } else {
                    prop_assert_eq!(r.state, TRK | NEW | SNAT);
                    prop_assert_eq!(dd, f.2);
                    prop_assert_eq!(dp2, f.3);
                }
            }
            prop_assert_eq!(ct.stats().nat_exhausted, exhausted);
            prop_assert_eq!(ct.len(), committed.len());
            // Replies to every committed connection find it and restore
            // the original tuple (zone from the dump).
            let dump = ct.dump(None, now);
            for (zone, f, reply) in &committed {
                let e = dump.iter().find(|e| e.zone == *zone && e.orig.src == f.0 && e.orig.sport == f.1 && e.orig.dst == f.2).unwrap();
                prop_assert_eq!((e.reply.src, e.reply.sport, e.reply.dst, e.reply.dport), *reply);
                if tcp {
                    // A SYN back would not be a valid reply; UDP covers it.
                    continue;
                }
                let reply_pkt = pkt(*reply, 17);
                let r = ct.process(reply_pkt.0, &reply_pkt.1, &nat_only(e.zone), now);
                prop_assert!(r.state & (EST | RPL) == EST | RPL, "{:x}", r.state);
                prop_assert_eq!(apply(*reply, &r.nat), (f.2, f.3, f.0, f.1));
            }
            // No two connections in a zone share a reply tuple.
            let mut keys: Vec<_> = dump.iter().map(|e| (e.zone, e.reply.src, e.reply.sport, e.reply.dst, e.reply.dport)).collect();
            let n = keys.len();
            keys.sort();
            keys.dedup();
            prop_assert_eq!(keys.len(), n);
        }
    }
}
