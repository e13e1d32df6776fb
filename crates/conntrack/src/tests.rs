//! Behaviour tests. Packets are built by the small helpers below (checksums
//! left zero: the tracker does not validate them).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::state::*;
use crate::tcp::{TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN};
use crate::*;

const ETH_IP: u16 = 0x0800;
const ETH_IP6: u16 = 0x86dd;

const A4: [u8; 4] = [198, 18, 0, 1];
const B4: [u8; 4] = [198, 18, 0, 2];
const R4: [u8; 4] = [198, 18, 0, 254];

fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfd;
    a[15] = last;
    a
}

/// An L3 address of either family, with the matching dl_type.
#[derive(Clone, Copy)]
enum Ip {
    V4([u8; 4]),
    V6([u8; 16]),
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let tot = (20 + l4.len()) as u16;
    let mut v = vec![0x45, 0];
    v.extend_from_slice(&tot.to_be_bytes());
    v.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    v.extend_from_slice(&src);
    v.extend_from_slice(&dst);
    v.extend_from_slice(l4);
    v
}

fn ipv6(src: [u8; 16], dst: [u8; 16], nxt: u8, l4: &[u8]) -> Vec<u8> {
    let mut v = vec![0x60, 0, 0, 0];
    v.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    v.extend_from_slice(&[nxt, 64]);
    v.extend_from_slice(&src);
    v.extend_from_slice(&dst);
    v.extend_from_slice(l4);
    v
}

fn ip(src: Ip, dst: Ip, proto: u8, l4: &[u8]) -> (u16, Vec<u8>) {
    match (src, dst) {
        (Ip::V4(s), Ip::V4(d)) => (ETH_IP, ipv4(s, d, proto, l4)),
        (Ip::V6(s), Ip::V6(d)) => (ETH_IP6, ipv6(s, d, proto, l4)),
        _ => unreachable!("mixed families"),
    }
}

#[allow(clippy::too_many_arguments)]
fn tcp_hdr(
    sp: u16,
    dp: u16,
    seq: u32,
    ack: u32,
    flags: u16,
    win: u16,
    opts: &[u8],
    payload: usize,
) -> Vec<u8> {
    let mut o = opts.to_vec();
    while o.len() % 4 != 0 {
        o.push(0);
    }
    let doff = ((20 + o.len()) / 4) as u16;
    let mut v = Vec::new();
    v.extend_from_slice(&sp.to_be_bytes());
    v.extend_from_slice(&dp.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&ack.to_be_bytes());
    v.extend_from_slice(&((doff << 12) | flags).to_be_bytes());
    v.extend_from_slice(&win.to_be_bytes());
    v.extend_from_slice(&[0, 0, 0, 0]);
    v.extend_from_slice(&o);
    v.resize(v.len() + payload, 0xaa);
    v
}

fn udp_hdr(sp: u16, dp: u16, payload: usize) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&sp.to_be_bytes());
    v.extend_from_slice(&dp.to_be_bytes());
    v.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.resize(v.len() + payload, 0xbb);
    v
}

fn icmp_hdr(ty: u8, code: u8, id: u16, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![ty, code, 0, 0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&[0, 1]);
    v.extend_from_slice(rest);
    v
}

/// A TCP endpoint pair with sequence bookkeeping, for readable handshakes.
struct Tcp {
    a: Ip,
    b: Ip,
    ap: u16,
    bp: u16,
    /// Next sequence number of [a, b].
    nxt: [u32; 2],
}

impl Tcp {
    fn v4() -> Tcp {
        Tcp {
            a: Ip::V4(A4),
            b: Ip::V4(B4),
            ap: 40000,
            bp: 80,
            nxt: [1000, 5000],
        }
    }
    fn v6() -> Tcp {
        Tcp {
            a: Ip::V6(v6(1)),
            b: Ip::V6(v6(2)),
            ..Tcp::v4()
        }
    }
    /// A segment from a (`from_b == false`) or b with exact seq/ack, and
    /// sequence space advanced.
    fn seg(&mut self, from_b: bool, flags: u16, payload: usize) -> (u16, Vec<u8>) {
        self.seg_opts(from_b, flags, payload, &[])
    }
    fn seg_opts(
        &mut self,
        from_b: bool,
        flags: u16,
        payload: usize,
        opts: &[u8],
    ) -> (u16, Vec<u8>) {
        let (s, d) = (usize::from(from_b), usize::from(!from_b));
        let ack = if flags & TCP_ACK != 0 { self.nxt[d] } else { 0 };
        let (src, dst, sp, dp) = if from_b {
            (self.b, self.a, self.bp, self.ap)
        } else {
            (self.a, self.b, self.ap, self.bp)
        };
        let h = tcp_hdr(sp, dp, self.nxt[s], ack, flags, 65535, opts, payload);
        let mut adv = payload as u32;
        if flags & (TCP_SYN | TCP_FIN) != 0 {
            adv += 1;
        }
        self.nxt[s] = self.nxt[s].wrapping_add(adv);
        ip(src, dst, 6, &h)
    }
}

fn ct() -> Conntrack {
    Conntrack::new(Config::default())
}

fn commit(zone: u16) -> CtRequest {
    CtRequest {
        zone,
        commit: true,
        ..CtRequest::default()
    }
}

fn go(ct: &mut Conntrack, p: &(u16, Vec<u8>), req: &CtRequest, now: Instant) -> u32 {
    ct.process(p.0, &p.1, req, now).state
}

/// Three-way handshake, returning the flow and the time.
fn established(ct: &mut Conntrack, mut t: Tcp, req: &CtRequest, now: Instant) -> Tcp {
    let p = t.seg(false, TCP_SYN, 0);
    assert_eq!(go(ct, &p, req, now), TRK | NEW);
    let p = t.seg(true, TCP_SYN | TCP_ACK, 0);
    assert_eq!(go(ct, &p, req, now), TRK | EST | RPL);
    let p = t.seg(false, TCP_ACK, 0);
    assert_eq!(go(ct, &p, req, now), TRK | EST);
    t
}

fn lines(ct: &Conntrack, zone: Option<u16>, now: Instant) -> Vec<String> {
    ct.dump(zone, now).iter().map(|e| e.to_string()).collect()
}

const TCP4_LINE: &str = "tcp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=40000,dport=80),reply=(src=198.18.0.2,dst=198.18.0.1,sport=80,dport=40000)";

#[test]
fn tcp_handshake_new_est_reply() {
    let mut ct = ct();
    let now = Instant::now();
    let mut t = established(&mut ct, Tcp::v4(), &commit(0), now);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.stats().tcp, 1);
    // Data both ways.
    let p = t.seg(false, TCP_ACK | TCP_PSH, 100);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), now), TRK | EST);
    let p = t.seg(true, TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), now), TRK | EST | RPL);
    assert_eq!(
        lines(&ct, None, now),
        vec![format!("{TCP4_LINE},protoinfo=(state=ESTABLISHED)")]
    );
}

#[test]
fn tcp_uncommitted_new_not_stored() {
    let mut ct = ct();
    let now = Instant::now();
    let mut t = Tcp::v4();
    let p = t.seg(false, TCP_SYN, 0);
    let r = ct.process(p.0, &p.1, &CtRequest::default(), now);
    assert_eq!(r.state, TRK | NEW);
    assert_eq!(ct.len(), 0);
    // write_ct_md fills the orig tuple from the packet itself.
    let o = r.orig.unwrap();
    assert_eq!(o.src, IpAddr::from(A4));
    assert_eq!(o.dst, IpAddr::from(B4));
    assert_eq!((o.proto, o.sport, o.dport), (6, 40000, 80));
    // Without a connection the SYN-ACK cannot create one.
    let p = t.seg(true, TCP_SYN | TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | INV);
}

#[test]
fn tcp_synack_first_is_invalid() {
    let mut ct = ct();
    let now = Instant::now();
    let mut t = Tcp::v4();
    let p = t.seg(true, TCP_SYN | TCP_ACK, 0);
    let r = ct.process(p.0, &p.1, &commit(0), now);
    assert_eq!(r.state, TRK | INV);
    assert_eq!(ct.len(), 0);
    assert_eq!(ct.stats().invalid_count(InvalidReason::InvalidNew), 1);
    // Invalid flag combinations cannot create one either.
    for flags in [TCP_SYN | TCP_FIN, TCP_SYN | TCP_RST, TCP_FIN, 0] {
        let p = t.seg(false, flags, 0);
        assert_eq!(
            go(&mut ct, &p, &commit(0), now),
            TRK | INV,
            "flags {flags:#x}"
        );
    }
    assert_eq!(ct.len(), 0);
    assert_eq!(ct.stats().invalid_count(InvalidReason::InvalidNew), 5);
}

#[test]
fn tcp_mid_stream_pickup_is_new() {
    // A bare ACK may create a connection (pf picks up established streams).
    let mut ct = ct();
    let now = Instant::now();
    let mut t = Tcp::v4();
    let p = t.seg(false, TCP_ACK, 10);
    assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | NEW);
    let v = ct.dump(None, now);
    assert_eq!(v[0].tcp.unwrap().flags_orig, TCPF_BE_LIBERAL);
}

#[test]
fn tcp_window_violation_is_invalid() {
    let mut ct = ct();
    let now = Instant::now();
    let req = CtRequest {
        set_mark: Some((9, u32::MAX)),
        ..commit(0)
    };
    let mut t = established(&mut ct, Tcp::v4(), &req, now);
    // 200 kB ahead of anything the receiver advertised.
    t.nxt[0] = t.nxt[0].wrapping_add(200_000);
    let p = t.seg(false, TCP_ACK | TCP_PSH, 100);
    let r = ct.process(p.0, &p.1, &CtRequest::default(), now);
    assert_eq!(r.state, TRK | INV);
    // An invalid packet of a known connection still gets its metadata.
    assert_eq!(r.mark, 9);
    assert!(r.orig.is_some());
    assert_eq!(ct.stats().invalid_count(InvalidReason::TcpWindow), 1);
    // An ACK far behind too.
    let mut t2 = Tcp::v4();
    t2.nxt = [t.nxt[0].wrapping_sub(400_000), t.nxt[1]];
    let p = t2.seg(false, TCP_ACK, 10);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), now), TRK | INV);
    // With sequence checking off the same segment passes.
    ct.set_tcp_seq_chk(false);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), now), TRK | EST);
}

#[test]
fn tcp_invalid_flags_on_existing() {
    let mut ct = ct();
    let now = Instant::now();
    let mut t = established(&mut ct, Tcp::v4(), &commit(0), now);
    let p = t.seg(false, TCP_SYN | TCP_FIN, 0);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), now), TRK | INV);
    assert_eq!(ct.stats().invalid_count(InvalidReason::TcpFlags), 1);
}

#[test]
fn tcp_fin_close_and_timeouts() {
    let mut ct = ct();
    let t0 = Instant::now();
    let mut t = established(&mut ct, Tcp::v4(), &commit(0), t0);
    let nc = CtRequest::default();
    let secs = |s| t0 + Duration::from_secs(s);
    assert_eq!(ct.dump(None, t0)[0].timeout, 86_400);

    let p = t.seg(false, TCP_FIN | TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &nc, t0), TRK | EST);
    // One side closing: CT_TM_TCP_CLOSING = tcp_fin_wait (15 min).
    assert_eq!(ct.dump(None, t0)[0].timeout, 900);
    let v = ct.dump(None, t0)[0].tcp.unwrap();
    assert_eq!(
        (v.state_orig, v.state_reply),
        (TcpState::Closing, TcpState::Established)
    );
    assert_eq!(
        lines(&ct, None, t0),
        vec![format!("{TCP4_LINE},protoinfo=(state=CLOSING)")]
    );

    let p = t.seg(true, TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &nc, t0), TRK | EST | RPL);
    let p = t.seg(true, TCP_FIN | TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &nc, t0), TRK | EST | RPL);
    // Both closing: CT_TM_TCP_FIN_WAIT = tcp_time_wait (45 s).
    assert_eq!(ct.dump(None, t0)[0].timeout, 45);
    let p = t.seg(false, TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &nc, secs(10)), TRK | EST);
    let v = ct.dump(None, secs(10))[0].tcp.unwrap();
    assert_eq!(
        (v.state_orig, v.state_reply),
        (TcpState::FinWait2, TcpState::FinWait2)
    );
    // FIN_WAIT_2 prints as TIME_WAIT (coalesce_tcp_state).
    assert_eq!(
        lines(&ct, None, secs(10)),
        vec![format!("{TCP4_LINE},protoinfo=(state=TIME_WAIT)")]
    );
    // Closed both ways: tcp_close (30 s) from the last packet.
    assert_eq!(ct.sweep(secs(39)), 0);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.sweep(secs(40)), 1);
    assert_eq!(ct.len(), 0);
    assert_eq!(ct.stats().expired, 1);
}

#[test]
fn tcp_syn_on_closed_connection_replaces_it() {
    let mut ct = ct();
    let now = Instant::now();
    let mut t = established(&mut ct, Tcp::v4(), &commit(0), now);
    let nc = CtRequest::default();
    for (b, f) in [
        (false, TCP_FIN | TCP_ACK),
        (true, TCP_FIN | TCP_ACK),
        (false, TCP_ACK),
    ] {
        let p = t.seg(b, f, 0);
        go(&mut ct, &p, &nc, now);
    }
    let old = ct.dump(None, now)[0].id;
    t.nxt[0] = t.nxt[0].wrapping_add(1_000_000);
    let p = t.seg(false, TCP_SYN, 0);
    assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | NEW);
    let d = ct.dump(None, now);
    assert_eq!(d.len(), 1);
    assert_ne!(d[0].id, old);
    assert_eq!(d[0].tcp.unwrap().state_orig, TcpState::SynSent);
    assert_eq!(ct.stats().removed, 1);
}

#[test]
fn tcp_rst_closes() {
    let mut ct = ct();
    let t0 = Instant::now();
    let mut t = established(&mut ct, Tcp::v4(), &commit(0), t0);
    let p = t.seg(true, TCP_RST | TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), t0), TRK | EST | RPL);
    let e = &ct.dump(None, t0)[0];
    let v = e.tcp.unwrap();
    assert_eq!(
        (v.state_orig, v.state_reply),
        (TcpState::TimeWait, TcpState::TimeWait)
    );
    assert_eq!(e.timeout, 30);
    assert!(ct.dump(None, t0 + Duration::from_secs(30)).is_empty());
}

#[test]
fn tcp_rst_with_wrong_seq_is_invalid() {
    let mut ct = ct();
    let now = Instant::now();
    let mut t = established(&mut ct, Tcp::v4(), &commit(0), now);
    t.nxt[1] = t.nxt[1].wrapping_add(1000);
    let p = t.seg(true, TCP_RST, 0);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), now), TRK | INV);
}

#[test]
fn tcp_retransmitted_syn_is_new() {
    let mut ct = ct();
    let t0 = Instant::now();
    let mut t = Tcp::v4();
    let p = t.seg(false, TCP_SYN, 0);
    assert_eq!(go(&mut ct, &p, &commit(0), t0), TRK | NEW);
    let later = t0 + Duration::from_secs(20);
    assert_eq!(go(&mut ct, &p, &CtRequest::default(), later), TRK | NEW);
    assert_eq!(ct.len(), 1);
    // The retransmission refreshed CT_TM_TCP_FIRST_PACKET (30 s).
    assert_eq!(ct.dump(None, later)[0].timeout, 30);
    assert_eq!(
        lines(&ct, None, later),
        vec![format!("{TCP4_LINE},protoinfo=(state=SYN_SENT)")]
    );
    assert_eq!(ct.dump(None, later)[0].counters_orig.packets, 2);
}

#[test]
fn tcp_first_syn_expires_after_30s() {
    let mut ct = ct();
    let t0 = Instant::now();
    let p = Tcp::v4().seg(false, TCP_SYN, 0);
    go(&mut ct, &p, &commit(0), t0);
    assert_eq!(ct.sweep(t0 + Duration::from_secs(29)), 0);
    assert_eq!(ct.sweep(t0 + Duration::from_secs(30)), 1);
}

#[test]
fn tcp_window_scale_verbose_dump() {
    let mut ct = ct();
    let now = Instant::now();
    let mut t = Tcp::v4();
    let p = t.seg_opts(false, TCP_SYN, 0, &[1, 3, 3, 7]);
    go(&mut ct, &p, &commit(0), now);
    let p = t.seg_opts(true, TCP_SYN | TCP_ACK, 0, &[1, 3, 3, 8]);
    assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | EST | RPL);
    let p = t.seg(false, TCP_ACK, 0);
    assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | EST);
    // Scaled windows: 65535 << 7 lets data far beyond 64 KiB through.
    let p = t.seg(false, TCP_ACK, 1000);
    assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | EST);
    let e = &ct.dump(None, now)[0];
    assert_eq!(
        e.format(true, false),
        format!(
            "{TCP4_LINE},id=1,status=0,protoinfo=(state_orig=ESTABLISHED,state_reply=ESTABLISHED,\
             wscale_orig=7,wscale_reply=8,flags_orig=WINDOW_SCALE,flags_reply=WINDOW_SCALE)"
        )
    );
}

#[test]
fn udp_first_multiple_bidir() {
    let mut ct = ct();
    let t0 = Instant::now();
    let out = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(5000, 53, 20));
    let back = ip(Ip::V4(B4), Ip::V4(A4), 17, &udp_hdr(53, 5000, 40));
    let nc = CtRequest::default();
    assert_eq!(go(&mut ct, &out, &commit(0), t0), TRK | NEW);
    assert_eq!(ct.dump(None, t0)[0].timeout, 60);
    // Still one-way: +new (CT_UPDATE_VALID_NEW), udp_single 60 s.
    assert_eq!(go(&mut ct, &out, &nc, t0), TRK | NEW);
    assert_eq!(go(&mut ct, &back, &nc, t0), TRK | EST | RPL);
    // Bidirectional: udp_multiple 30 s.
    assert_eq!(ct.dump(None, t0)[0].timeout, 30);
    assert_eq!(go(&mut ct, &out, &nc, t0), TRK | EST);
    assert_eq!(
        lines(&ct, None, t0),
        vec!["udp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=5000,dport=53),reply=(src=198.18.0.2,dst=198.18.0.1,sport=53,dport=5000)".to_string()]
    );
    assert_eq!(
        ct.dump(None, t0)[0].format(false, true),
        "udp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=5000,dport=53,packets=3,bytes=144),\
         reply=(src=198.18.0.2,dst=198.18.0.1,sport=53,dport=5000,packets=1,bytes=68),timeout=30"
    );
    assert_eq!(ct.sweep(t0 + Duration::from_secs(30)), 1);
}

#[test]
fn udp_reply_first_without_conn_is_new() {
    // "Other" protocols: any packet may create a connection.
    let mut ct = ct();
    let now = Instant::now();
    let back = ip(Ip::V4(B4), Ip::V4(A4), 17, &udp_hdr(53, 5000, 4));
    assert_eq!(go(&mut ct, &back, &commit(0), now), TRK | NEW);
    assert_eq!(ct.stats().udp, 1);
}

#[test]
fn other_protocol_tracked_without_ports() {
    let mut ct = ct();
    let now = Instant::now();
    let gre = ip(Ip::V4(A4), Ip::V4(B4), 47, &[0, 0, 0x65, 0x58]);
    let gre_back = ip(Ip::V4(B4), Ip::V4(A4), 47, &[0, 0, 0x65, 0x58]);
    assert_eq!(go(&mut ct, &gre, &commit(0), now), TRK | NEW);
    assert_eq!(go(&mut ct, &gre_back, &commit(0), now), TRK | EST | RPL);
    assert_eq!(
        lines(&ct, None, now),
        vec!["47,orig=(src=198.18.0.1,dst=198.18.0.2,sport=0,dport=0),reply=(src=198.18.0.2,dst=198.18.0.1,sport=0,dport=0)".to_string()]
    );
    assert_eq!(ct.stats().other, 1);
}

fn echo(src: Ip, dst: Ip, reply: bool, id: u16) -> (u16, Vec<u8>) {
    match src {
        Ip::V4(_) => ip(
            src,
            dst,
            1,
            &icmp_hdr(if reply { 0 } else { 8 }, 0, id, &[0; 8]),
        ),
        Ip::V6(_) => ip(
            src,
            dst,
            58,
            &icmp_hdr(if reply { 129 } else { 128 }, 0, id, &[0; 8]),
        ),
    }
}

#[test]
fn icmp_echo_v4() {
    let mut ct = ct();
    let t0 = Instant::now();
    let (a, b) = (Ip::V4(A4), Ip::V4(B4));
    let nc = CtRequest::default();
    // A reply alone cannot create a connection.
    assert_eq!(
        go(&mut ct, &echo(b, a, true, 77), &commit(0), t0),
        TRK | INV
    );
    let r = ct.process(ETH_IP, &echo(a, b, false, 77).1, &commit(0), t0);
    assert_eq!(r.state, TRK | NEW);
    // ct_tp_src/dst for ICMP are type and code.
    let o = r.orig.unwrap();
    assert_eq!((o.proto, o.sport, o.dport), (1, 8, 0));
    assert_eq!(go(&mut ct, &echo(a, b, false, 77), &nc, t0), TRK | NEW);
    assert_eq!(ct.dump(None, t0)[0].timeout, 60);
    assert_eq!(go(&mut ct, &echo(b, a, true, 77), &nc, t0), TRK | EST | RPL);
    assert_eq!(ct.dump(None, t0)[0].timeout, 30);
    assert_eq!(go(&mut ct, &echo(a, b, false, 77), &nc, t0), TRK | EST);
    // Another id is another connection.
    assert_eq!(go(&mut ct, &echo(a, b, false, 78), &nc, t0), TRK | NEW);
    assert_eq!(
        lines(&ct, None, t0),
        vec!["icmp,orig=(src=198.18.0.1,dst=198.18.0.2,id=77,type=8,code=0),reply=(src=198.18.0.2,dst=198.18.0.1,id=77,type=0,code=0)".to_string()]
    );
}

#[test]
fn icmp_echo_v6() {
    let mut ct = ct();
    let now = Instant::now();
    let (a, b) = (Ip::V6(v6(1)), Ip::V6(v6(2)));
    assert_eq!(
        go(&mut ct, &echo(a, b, false, 77), &commit(0), now),
        TRK | NEW
    );
    assert_eq!(
        go(&mut ct, &echo(b, a, true, 77), &commit(0), now),
        TRK | EST | RPL
    );
    assert_eq!(
        lines(&ct, None, now),
        vec!["icmpv6,orig=(src=fd00::1,dst=fd00::2,id=77,type=128,code=0),reply=(src=fd00::2,dst=fd00::1,id=77,type=129,code=0)".to_string()]
    );
    assert_eq!(ct.stats().icmpv6, 1);
    // Neighbour discovery is not tracked: invalid.
    let ns = ip(a, b, 58, &icmp_hdr(135, 0, 0, &[0; 20]));
    assert_eq!(go(&mut ct, &ns, &commit(0), now), TRK | INV);
    assert_eq!(ct.stats().invalid_count(InvalidReason::IcmpUnsupported), 1);
}

/// An ICMP(v6) error from `src` to `dst` quoting `inner` (an IP packet).
fn icmp_error(src: Ip, dst: Ip, inner: &[u8]) -> (u16, Vec<u8>) {
    match src {
        // Destination unreachable / port unreachable; ICMPv4 quotes the IP
        // header + 8 bytes.
        Ip::V4(_) => {
            let ihl = usize::from(inner[0] & 0xf) * 4;
            let quoted = &inner[..(ihl + 8).min(inner.len())];
            let mut h = vec![3, 3, 0, 0, 0, 0, 0, 0];
            h.extend_from_slice(quoted);
            ip(src, dst, 1, &h)
        }
        Ip::V6(_) => {
            let mut h = vec![1, 4, 0, 0, 0, 0, 0, 0];
            h.extend_from_slice(inner);
            ip(src, dst, 58, &h)
        }
    }
}

fn related_case(a: Ip, b: Ip, r: Ip) {
    let mut ct = ct();
    let now = Instant::now();
    let mark = CtRequest {
        set_mark: Some((0x42, u32::MAX)),
        ..commit(0)
    };
    // TCP: a router tells A its SYN to B could not be delivered.
    let mut t = Tcp { a, b, ..Tcp::v4() };
    let syn = t.seg(false, TCP_SYN, 0);
    assert_eq!(go(&mut ct, &syn, &mark, now), TRK | NEW);
    let err = icmp_error(r, a, &syn.1);
    let res = ct.process(err.0, &err.1, &CtRequest::default(), now);
    assert_eq!(res.state, TRK | REL | RPL);
    assert_eq!(res.mark, 0x42);
    assert_eq!(res.orig.unwrap().sport, 40000);

    // UDP: B's port is unreachable (error in the reply direction), then A
    // refuses B's reply (error in the original direction).
    let out = ip(a, b, 17, &udp_hdr(5000, 53, 4));
    let back = ip(b, a, 17, &udp_hdr(53, 5000, 4));
    assert_eq!(go(&mut ct, &out, &commit(0), now), TRK | NEW);
    let err = icmp_error(b, a, &out.1);
    assert_eq!(
        go(&mut ct, &err, &CtRequest::default(), now),
        TRK | REL | RPL
    );
    let err = icmp_error(a, b, &back.1);
    assert_eq!(go(&mut ct, &err, &CtRequest::default(), now), TRK | REL);
    // Related packets do not advance the UDP state: still one-way.
    assert_eq!(go(&mut ct, &out, &CtRequest::default(), now), TRK | NEW);

    // Unknown connection: invalid.
    let other = ip(a, b, 17, &udp_hdr(5001, 53, 4));
    let err = icmp_error(b, a, &other.1);
    assert_eq!(go(&mut ct, &err, &commit(0), now), TRK | INV);
    assert_eq!(ct.stats().invalid_count(InvalidReason::RelatedNoConn), 1);
    // Quoted source must be the error's destination.
    let err = icmp_error(b, r, &out.1);
    assert_eq!(go(&mut ct, &err, &commit(0), now), TRK | INV);
    assert_eq!(ct.stats().invalid_count(InvalidReason::IcmpBadEmbedded), 1);
    assert_eq!(ct.len(), 2);
}

#[test]
fn icmp_related_v4() {
    related_case(Ip::V4(A4), Ip::V4(B4), Ip::V4(R4));
}

#[test]
fn icmp_related_v6() {
    related_case(Ip::V6(v6(1)), Ip::V6(v6(2)), Ip::V6(v6(0xfe)));
}

#[test]
fn zones_are_separate() {
    let mut ct = ct();
    let now = Instant::now();
    let out = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(5000, 53, 4));
    let back = ip(Ip::V4(B4), Ip::V4(A4), 17, &udp_hdr(53, 5000, 4));
    assert_eq!(go(&mut ct, &out, &commit(1), now), TRK | NEW);
    assert_eq!(go(&mut ct, &out, &commit(2), now), TRK | NEW);
    assert_eq!(ct.len(), 2);
    assert_eq!(go(&mut ct, &back, &commit(1), now), TRK | EST | RPL);
    // Zone 3 knows nothing: a fresh, uncommitted connection.
    let r = ct.process(
        back.0,
        &back.1,
        &CtRequest {
            zone: 3,
            ..Default::default()
        },
        now,
    );
    assert_eq!((r.state, r.zone), (TRK | NEW, 3));
    let l = lines(&ct, Some(2), now);
    assert_eq!(
        l,
        vec!["udp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=5000,dport=53),reply=(src=198.18.0.2,dst=198.18.0.1,sport=53,dport=5000),zone=2".to_string()]
    );
    assert_eq!(ct.dump(None, now).len(), 2);
    assert_eq!(ct.dump(Some(3), now).len(), 0);
}

#[test]
fn mark_and_label_on_commit() {
    let mut ct = ct();
    let now = Instant::now();
    let out = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(5000, 53, 4));
    let back = ip(Ip::V4(B4), Ip::V4(A4), 17, &udp_hdr(53, 5000, 4));
    // Not committing: exec() is ignored and nothing is stored.
    let nc_mark = CtRequest {
        set_mark: Some((1, u32::MAX)),
        ..CtRequest::default()
    };
    assert_eq!(ct.process(out.0, &out.1, &nc_mark, now).mark, 0);
    let req = CtRequest {
        set_mark: Some((0x05, 0xff)),
        set_label: Some((0xab << 64, u128::MAX)),
        ..commit(0)
    };
    let r = ct.process(out.0, &out.1, &req, now);
    assert_eq!((r.state, r.mark, r.label), (TRK | NEW, 5, 0xab << 64));
    // Later packets carry them, in both directions.
    let r = ct.process(back.0, &back.1, &CtRequest::default(), now);
    assert_eq!((r.state, r.mark, r.label), (TRK | EST | RPL, 5, 0xab << 64));
    // An uncommitted ct with exec changes nothing.
    let r = ct.process(back.0, &back.1, &nc_mark, now);
    assert_eq!(r.mark, 5);
    // Committing again applies value/mask to the existing connection.
    let req = CtRequest {
        set_mark: Some((0x10, 0xf0)),
        set_label: Some((1, 1)),
        ..commit(0)
    };
    let r = ct.process(back.0, &back.1, &req, now);
    assert_eq!((r.mark, r.label), (0x15, (0xab << 64) | 1));
    assert_eq!(
        lines(&ct, None, now),
        vec!["udp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=5000,dport=53),reply=(src=198.18.0.2,dst=198.18.0.1,sport=53,dport=5000),mark=21,labels=0xab0000000000000001".to_string()]
    );
}

#[test]
fn force_replaces_opposite_direction() {
    let mut ct = ct();
    let now = Instant::now();
    let out = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(5000, 53, 4));
    let back = ip(Ip::V4(B4), Ip::V4(A4), 17, &udp_hdr(53, 5000, 4));
    assert_eq!(go(&mut ct, &out, &commit(0), now), TRK | NEW);
    let force = CtRequest {
        force: true,
        ..commit(0)
    };
    // Same direction: force does nothing special.
    assert_eq!(go(&mut ct, &out, &force, now), TRK | NEW);
    assert_eq!(ct.stats().removed, 0);
    // Opposite direction: old connection deleted, packet is new.
    let r = ct.process(back.0, &back.1, &force, now);
    assert_eq!(r.state, TRK | NEW);
    assert_eq!(r.orig.unwrap().src, IpAddr::from(B4));
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.stats().removed, 1);
    assert_eq!(ct.dump(None, now)[0].orig.src, IpAddr::from(B4));
    assert_eq!(
        go(&mut ct, &out, &CtRequest::default(), now),
        TRK | EST | RPL
    );
}

#[test]
fn limit_stops_commits() {
    let mut ct = Conntrack::new(Config {
        limit: 2,
        ..Config::default()
    });
    let now = Instant::now();
    let req = CtRequest {
        set_mark: Some((3, u32::MAX)),
        ..commit(0)
    };
    for sp in [1000u16, 1001] {
        let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(sp, 53, 4));
        assert_eq!(go(&mut ct, &p, &req, now), TRK | NEW);
    }
    let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(1002, 53, 4));
    let r = ct.process(p.0, &p.1, &req, now);
    // OVS at its limit: +trk+new, no connection, no mark.
    assert_eq!((r.state, r.mark), (TRK | NEW, 0));
    assert_eq!(r.orig.unwrap().sport, 1002);
    assert_eq!(ct.len(), 2);
    assert_eq!(ct.stats().limit_drops, 1);
    // Existing connections still work at the limit.
    let p = ip(Ip::V4(B4), Ip::V4(A4), 17, &udp_hdr(53, 1000, 4));
    assert_eq!(go(&mut ct, &p, &req, now), TRK | EST | RPL);
}

#[test]
fn sweep_removes_expired_and_reuses_slots() {
    let mut ct = ct();
    let t0 = Instant::now();
    for sp in 1..=50u16 {
        let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(sp, 53, 4));
        go(&mut ct, &p, &commit(0), t0);
    }
    // Refresh half of them 30 s later.
    let t30 = t0 + Duration::from_secs(30);
    for sp in 1..=25u16 {
        let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(sp, 53, 4));
        assert_eq!(go(&mut ct, &p, &commit(0), t30), TRK | NEW);
    }
    let t60 = t0 + Duration::from_secs(60);
    assert_eq!(ct.dump(None, t60).len(), 25);
    assert_eq!(ct.len(), 50);
    assert_eq!(ct.sweep(t60), 25);
    assert_eq!(ct.len(), 25);
    assert_eq!(ct.stats().expired, 25);
    assert_eq!(ct.stats().created, 50);
    // An expired connection found by lookup is dropped and replaced.
    let t200 = t0 + Duration::from_secs(200);
    let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(1, 53, 4));
    assert_eq!(go(&mut ct, &p, &commit(0), t200), TRK | NEW);
    assert_eq!(ct.len(), 25);
    assert_eq!(ct.sweep(t200), 24);
    assert_eq!(ct.len(), 1);
}

#[test]
fn sweep_is_bounded_per_call() {
    let mut ct = ct();
    let t0 = Instant::now();
    for sp in 1..=3000u16 {
        let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(sp, 53, 4));
        go(&mut ct, &p, &commit(0), t0);
    }
    let late = t0 + Duration::from_secs(3600);
    // Batch = max(limit / 64, 1024) slots per call: 1024 here.
    ct.set_limit(640);
    assert_eq!(ct.sweep(late), 1024);
    assert_eq!(ct.sweep(late), 1024);
    assert_eq!(ct.sweep(late), 952);
    assert_eq!(ct.sweep(late), 0);
    assert!(ct.is_empty());
    // With the default limit one call covers 46,875 slots.
    ct.set_limit(Config::default().limit);
    for sp in 1..=3000u16 {
        let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(sp, 53, 4));
        go(&mut ct, &p, &commit(0), t0);
    }
    assert_eq!(ct.sweep(late), 3000);
}

#[test]
fn flush_with_filters() {
    let mut ct = ct();
    let now = Instant::now();
    for (zone, sp) in [(0u16, 1000u16), (0, 1001), (1, 1000), (1, 1001)] {
        let p = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(sp, 53, 4));
        go(&mut ct, &p, &commit(zone), now);
    }
    let mut t = Tcp::v4();
    go(&mut ct, &t.seg(false, TCP_SYN, 0), &commit(0), now);
    go(
        &mut ct,
        &echo(Ip::V4(A4), Ip::V4(B4), false, 9),
        &commit(0),
        now,
    );
    go(
        &mut ct,
        &echo(Ip::V6(v6(1)), Ip::V6(v6(2)), false, 9),
        &commit(0),
        now,
    );
    assert_eq!(ct.len(), 7);

    // Every given field must match.
    let f = FlushFilter {
        zone: Some(1),
        sport: Some(1000),
        ..Default::default()
    };
    assert_eq!(ct.flush(&f), 1);
    let f = FlushFilter {
        proto: Some(17),
        src: Some(IpAddr::from(B4)),
        ..Default::default()
    };
    assert_eq!(ct.flush(&f), 0);
    let f = FlushFilter {
        icmp_id: Some(9),
        src: Some(IpAddr::from(A4)),
        ..Default::default()
    };
    assert_eq!(ct.flush(&f), 1);
    let f = FlushFilter {
        proto: Some(6),
        dport: Some(80),
        ..Default::default()
    };
    assert_eq!(ct.flush(&f), 1);
    let f = FlushFilter {
        zone: Some(0),
        ..Default::default()
    };
    assert_eq!(ct.flush(&f), 3);
    assert_eq!(ct.flush(&FlushFilter::default()), 1);
    assert!(ct.is_empty());
    assert_eq!(ct.stats().removed, 7);
    let s = ct.stats();
    assert_eq!((s.tcp, s.udp, s.icmp, s.icmpv6), (0, 0, 0, 0));
}

#[test]
fn dump_strings_tcp_v4_zone_mark_labels_stats() {
    let mut ct = ct();
    let now = Instant::now();
    let req = CtRequest {
        set_mark: Some((7, u32::MAX)),
        set_label: Some((0xab, u128::MAX)),
        ..commit(5)
    };
    established(&mut ct, Tcp::v4(), &req, now);
    let e = &ct.dump(None, now)[0];
    assert_eq!(
        e.format(false, false),
        format!("{TCP4_LINE},zone=5,mark=7,labels=0xab,protoinfo=(state=ESTABLISHED)")
    );
    assert_eq!(
        e.format(true, true),
        "tcp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=40000,dport=80,packets=2,bytes=80),\
         reply=(src=198.18.0.2,dst=198.18.0.1,sport=80,dport=40000,packets=1,bytes=40),\
         id=1,zone=5,status=0,timeout=86400,mark=7,labels=0xab,\
         protoinfo=(state_orig=ESTABLISHED,state_reply=ESTABLISHED,flags_orig=0,flags_reply=0)"
    );
}

#[test]
fn dump_strings_v6_and_sorting() {
    let mut ct = ct();
    let now = Instant::now();
    let a6 = Ip::V6(v6(1));
    let b6 = Ip::V6(v6(2));
    let mut t = Tcp::v6();
    go(&mut ct, &t.seg(false, TCP_SYN, 0), &commit(0), now);
    go(
        &mut ct,
        &ip(a6, b6, 17, &udp_hdr(5000, 53, 4)),
        &commit(0),
        now,
    );
    go(
        &mut ct,
        &ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(5000, 53, 4)),
        &commit(7),
        now,
    );
    go(
        &mut ct,
        &ip(Ip::V4(B4), Ip::V4(A4), 17, &udp_hdr(53, 5000, 4)),
        &commit(0),
        now,
    );
    let req = CtRequest {
        set_label: Some((1 << 127, u128::MAX)),
        ..commit(0)
    };
    go(&mut ct, &echo(a6, b6, false, 1), &req, now);
    assert_eq!(
        lines(&ct, None, now),
        vec![
            "udp,orig=(src=198.18.0.2,dst=198.18.0.1,sport=53,dport=5000),reply=(src=198.18.0.1,dst=198.18.0.2,sport=5000,dport=53)".to_string(),
            "tcp,orig=(src=fd00::1,dst=fd00::2,sport=40000,dport=80),reply=(src=fd00::2,dst=fd00::1,sport=80,dport=40000),protoinfo=(state=SYN_SENT)".to_string(),
            "udp,orig=(src=fd00::1,dst=fd00::2,sport=5000,dport=53),reply=(src=fd00::2,dst=fd00::1,sport=53,dport=5000)".to_string(),
            "icmpv6,orig=(src=fd00::1,dst=fd00::2,id=1,type=128,code=0),reply=(src=fd00::2,dst=fd00::1,id=1,type=129,code=0),labels=0x80000000000000000000000000000000".to_string(),
            "udp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=5000,dport=53),reply=(src=198.18.0.2,dst=198.18.0.1,sport=53,dport=5000),zone=7".to_string(),
        ]
    );
}

#[test]
fn malformed_input_is_invalid_and_counted() {
    let mut ct = ct();
    let now = Instant::now();
    let req = commit(0);
    let udp = ip(Ip::V4(A4), Ip::V4(B4), 17, &udp_hdr(5000, 53, 4)).1;
    let cases: Vec<(u16, Vec<u8>, InvalidReason)> = vec![
        (0x0806, udp.clone(), InvalidReason::NotIp),
        (ETH_IP, udp[..10].to_vec(), InvalidReason::L3Truncated),
        (ETH_IP, udp[..25].to_vec(), InvalidReason::L3Truncated),
        (
            ETH_IP,
            {
                let mut v = udp.clone();
                v[0] = 0x44;
                v
            },
            InvalidReason::BadL3Header,
        ),
        (
            ETH_IP,
            {
                let mut v = udp.clone();
                v[0] = 0x65;
                v
            },
            InvalidReason::BadL3Header,
        ),
        (
            ETH_IP,
            {
                let mut v = udp.clone();
                v[6] = 0x20;
                v
            },
            InvalidReason::Fragment,
        ),
        (
            ETH_IP,
            {
                let mut v = udp.clone();
                v[7] = 0x01;
                v
            },
            InvalidReason::Fragment,
        ),
        (
            ETH_IP,
            ipv4(A4, B4, 17, &[0, 1, 0]),
            InvalidReason::L4Truncated,
        ),
        (
            ETH_IP,
            ipv4(A4, B4, 17, &udp_hdr(0, 53, 0)),
            InvalidReason::PortZero,
        ),
        (
            ETH_IP,
            {
                let mut h = udp_hdr(1, 53, 0);
                h[5] = 60;
                ipv4(A4, B4, 17, &h)
            },
            InvalidReason::BadL4Header,
        ),
        (
            ETH_IP,
            {
                let mut h = tcp_hdr(1, 2, 0, 0, TCP_SYN, 1, &[], 0);
                h[12] = 0x40;
                ipv4(A4, B4, 6, &h)
            },
            InvalidReason::BadL4Header,
        ),
        (
            ETH_IP,
            ipv4(A4, B4, 1, &icmp_hdr(8, 1, 1, &[])),
            InvalidReason::IcmpUnsupported,
        ),
        (
            ETH_IP,
            ipv4(A4, B4, 1, &icmp_hdr(3, 1, 0, &[0x45, 0])),
            InvalidReason::IcmpBadEmbedded,
        ),
        (
            ETH_IP6,
            ipv6(v6(1), v6(2), 17, &udp_hdr(1, 2, 0))[..30].to_vec(),
            InvalidReason::L3Truncated,
        ),
        // IPv6 fragment header with offset 1.
        (
            ETH_IP6,
            ipv6(v6(1), v6(2), 44, &[17, 0, 0, 8, 0, 0, 0, 1]),
            InvalidReason::Fragment,
        ),
        (
            ETH_IP6,
            ipv6(v6(1), v6(2), 0, &[17, 9]),
            InvalidReason::BadL3Header,
        ),
    ];
    for (i, (dl, bytes, reason)) in cases.iter().enumerate() {
        let before = ct.stats().invalid_count(*reason);
        let r = ct.process(*dl, bytes, &req, now);
        assert_eq!(r.state, TRK | INV, "case {i}");
        assert_eq!(r.orig, None, "case {i}");
        assert_eq!(
            ct.stats().invalid_count(*reason),
            before + 1,
            "case {i}: {reason}"
        );
    }
    assert_eq!(ct.len(), 0);
    assert_eq!(ct.stats().invalid_total(), cases.len() as u64);
}

#[test]
fn ipv6_extension_headers_and_padding() {
    let mut ct = ct();
    let now = Instant::now();
    // Hop-by-hop (8 bytes) then UDP, plus 6 bytes of Ethernet padding.
    let mut l4 = vec![17, 0, 1, 4, 0, 0, 0, 0];
    l4.extend_from_slice(&udp_hdr(5000, 53, 0));
    let mut p = ipv6(v6(1), v6(2), 0, &l4);
    p.extend_from_slice(&[0; 6]);
    assert_eq!(ct.process(ETH_IP6, &p, &commit(0), now).state, TRK | NEW);
    // An atomic fragment (offset 0, no M flag) is not a fragment.
    let mut l4 = vec![17, 0, 0, 0, 0, 0, 0, 9];
    l4.extend_from_slice(&udp_hdr(5000, 53, 0));
    let p = ipv6(v6(1), v6(2), 44, &l4);
    // Second one-way UDP packet: still +new (OTHERS_MULTIPLE).
    assert_eq!(ct.process(ETH_IP6, &p, &commit(0), now).state, TRK | NEW);
    let e = &ct.dump(None, now)[0];
    assert_eq!(e.counters_orig.bytes, 56 + 56);
}

#[test]
fn icmp_tuple_uses_type_and_code() {
    let k = crate::tuple::extract(ETH_IP, &echo(Ip::V4(A4), Ip::V4(B4), false, 5).1, 0)
        .unwrap()
        .key;
    let t = k.to_tuple();
    assert_eq!((t.sport, t.dport), (8, 0));
    let r = k.reversed().to_tuple();
    assert_eq!((r.sport, r.dport), (0, 0));
}

#[test]
fn timeouts_default_values() {
    let t = Timeouts::default();
    assert_eq!(t.tcp_established, Duration::from_secs(86_400));
    assert_eq!(t.tcp_fin_wait, Duration::from_secs(900));
    assert_eq!(t.udp_multiple, Duration::from_secs(30));
    assert_eq!(Config::default().limit, 3_000_000);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes never panic, are always tracked, and invalid is
        /// exactly INV|TRK.
        #[test]
        fn arbitrary_bytes(dl in prop_oneof![Just(0x0800u16), Just(0x86ddu16), any::<u16>()],
                           bytes in proptest::collection::vec(any::<u8>(), 0..200),
                           commit in any::<bool>(), force in any::<bool>()) {
            let mut ct = ct();
            let req = CtRequest { zone: 1, commit, force, set_mark: Some((1, 1)), set_label: Some((1, 1)), nat: None };
            let now = Instant::now();
            for _ in 0..2 {
                let r = ct.process(dl, &bytes, &req, now);
                prop_assert!(r.state & TRK != 0);
                if r.state & INV != 0 {
                    prop_assert_eq!(r.state, INV | TRK);
                }
            }
            for e in ct.dump(None, now) {
                prop_assert!(e.format(true, true).contains(",orig=("));
            }
        }

        /// Bytes behind a well-formed IP header reach the L4 parsers.
        #[test]
        fn arbitrary_l4(v6h in any::<bool>(), proto in prop_oneof![Just(1u8), Just(6), Just(17), Just(58), Just(132), any::<u8>()],
                        l4 in proptest::collection::vec(any::<u8>(), 0..120)) {
            let mut ct = ct();
            let now = Instant::now();
            let (dl, p) = if v6h { (ETH_IP6, ipv6(v6(1), v6(2), proto, &l4)) } else { (ETH_IP, ipv4(A4, B4, proto, &l4)) };
            for req in [commit(0), CtRequest::default()] {
                let r = ct.process(dl, &p, &req, now);
                prop_assert!(r.state & TRK != 0);
            }
        }

        /// Valid in-order traffic with random ISNs, windows, scaling and
        /// sizes is never invalid: handshake gives +est, data stays +est.
        #[test]
        fn valid_tcp_exchange_stays_established(isn_a in any::<u32>(), isn_b in any::<u32>(),
                                                ws_a in proptest::option::of(0u8..15), ws_b in proptest::option::of(0u8..15),
                                                sizes in proptest::collection::vec((any::<bool>(), 0usize..1400), 1..40)) {
            let mut ct = ct();
            let now = Instant::now();
            let mut t = Tcp { nxt: [isn_a, isn_b], ..Tcp::v4() };
            let opt = |w: Option<u8>| w.map(|w| vec![1, 3, 3, w]).unwrap_or_default();
            let p = t.seg_opts(false, TCP_SYN, 0, &opt(ws_a));
            prop_assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | NEW);
            let p = t.seg_opts(true, TCP_SYN | TCP_ACK, 0, &opt(ws_b));
            prop_assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | EST | RPL);
            let p = t.seg(false, TCP_ACK, 0);
            prop_assert_eq!(go(&mut ct, &p, &commit(0), now), TRK | EST);
            for (from_b, n) in sizes {
                let p = t.seg(from_b, TCP_ACK | TCP_PSH, n);
                let want = if from_b { TRK | EST | RPL } else { TRK | EST };
                prop_assert_eq!(go(&mut ct, &p, &CtRequest::default(), now), want);
            }
        }

        /// Random segments between two endpoints against a reference model.
        #[test]
        fn tcp_random_segments_follow_model(ops in proptest::collection::vec(tcp_op(), 1..60)) {
            let mut ct = ct();
            let t0 = Instant::now();
            let mut t = Tcp::v4();
            // Peer states per connection id, to check monotonicity.
            let mut last: Option<(u32, TcpState, TcpState)> = None;
            let mut orig_from_b: Option<bool> = None;
            for (i, op) in ops.iter().enumerate() {
                let now = t0 + Duration::from_millis(i as u64);
                if let Some(seq) = op.seq { t.nxt[usize::from(op.from_b)] = seq; }
                let mut p = t.seg(op.from_b, op.flags, op.payload);
                if let Some(ack) = op.ack {
                    // Overwrite the ack field (IPv4 header 20 + offset 8).
                    p.1[28..32].copy_from_slice(&ack.to_be_bytes());
                }
                let before = ct.dump(None, now);
                let existed = !before.is_empty();
                let req = CtRequest { commit: op.commit, ..CtRequest::default() };
                let r = ct.process(p.0, &p.1, &req, now);
                let after = ct.dump(None, now);

                prop_assert!(r.state & TRK != 0);
                if r.state & INV != 0 {
                    prop_assert_eq!(r.state, INV | TRK);
                    prop_assert_eq!(after.len(), before.len());
                }
                if ref_invalid_flags(op.flags) {
                    prop_assert_eq!(r.state, INV | TRK, "bad flags {:#x}", op.flags);
                }
                if !existed {
                    let synack = op.flags & (TCP_SYN | TCP_ACK) == (TCP_SYN | TCP_ACK);
                    if synack || ref_invalid_flags(op.flags) {
                        prop_assert_eq!(r.state, INV | TRK);
                        prop_assert!(after.is_empty());
                    } else {
                        prop_assert_eq!(r.state, NEW | TRK);
                        prop_assert_eq!(after.len(), usize::from(op.commit));
                    }
                }
                if r.state & EST != 0 {
                    prop_assert!(existed);
                }
                // Which side originated the connection this packet matched.
                let created = match (before.first(), after.first()) {
                    (None, Some(_)) => true,
                    (Some(b), Some(a)) => a.id != b.id,
                    _ => false,
                };
                if created {
                    orig_from_b = Some(op.from_b);
                }
                if r.state & RPL != 0 {
                    prop_assert!(r.state & (EST | REL) != 0);
                    prop_assert_eq!(Some(!op.from_b), orig_from_b);
                } else if r.state & EST != 0 {
                    prop_assert_eq!(Some(op.from_b), orig_from_b);
                }
                prop_assert!(after.len() <= 1);
                if let Some(e) = after.first() {
                    let tcp = e.tcp.unwrap();
                    for s in [tcp.state_orig, tcp.state_reply] {
                        prop_assert!(matches!(s, TcpState::Closed | TcpState::SynSent | TcpState::Established
                            | TcpState::Closing | TcpState::FinWait2 | TcpState::TimeWait), "{:?}", s);
                    }
                    // Within one connection, each peer's state only grows.
                    if let Some((id, o, rp)) = last {
                        if id == e.id {
                            prop_assert!(tcp.state_orig >= o && tcp.state_reply >= rp,
                                "{:?}/{:?} -> {:?}/{:?}", o, rp, tcp.state_orig, tcp.state_reply);
                        }
                    }
                    // The originator is never behind SYN_SENT.
                    prop_assert!(tcp.state_orig >= TcpState::SynSent);
                    // A valid RST closes both sides.
                    if op.flags & TCP_RST != 0 && r.state & EST != 0 {
                        prop_assert_eq!((tcp.state_orig, tcp.state_reply), (TcpState::TimeWait, TcpState::TimeWait));
                    }
                    last = Some((e.id, tcp.state_orig, tcp.state_reply));
                }
            }
        }
    }

    #[derive(Clone, Debug)]
    struct Op {
        from_b: bool,
        flags: u16,
        payload: usize,
        seq: Option<u32>,
        ack: Option<u32>,
        commit: bool,
    }

    fn tcp_op() -> impl Strategy<Value = Op> {
        let flags = prop_oneof![
            4 => Just(TCP_SYN),
            3 => Just(TCP_SYN | TCP_ACK),
            8 => Just(TCP_ACK),
            4 => Just(TCP_ACK | TCP_PSH),
            3 => Just(TCP_FIN | TCP_ACK),
            1 => Just(TCP_RST),
            1 => Just(TCP_RST | TCP_ACK),
            1 => Just(TCP_SYN | TCP_FIN),
            1 => Just(TCP_FIN),
            1 => Just(0u16),
            1 => 0u16..0x40,
        ];
        (
            any::<bool>(),
            flags,
            prop_oneof![Just(0usize), 1usize..200],
            proptest::option::weighted(0.1, any::<u32>()),
            proptest::option::weighted(0.1, any::<u32>()),
            prop_oneof![4 => Just(true), 1 => Just(false)],
        )
            .prop_map(|(from_b, flags, payload, seq, ack, commit)| Op {
                from_b,
                flags,
                payload,
                seq,
                ack,
                commit,
            })
    }

    /// Independent restatement of the flag rules (RFC-level: SYN excludes
    /// FIN/RST; without SYN there must be ACK or RST; FIN/PSH/URG need ACK).
    fn ref_invalid_flags(f: u16) -> bool {
        let syn = f & TCP_SYN != 0;
        let ack = f & TCP_ACK != 0;
        let rst = f & TCP_RST != 0;
        let fin = f & TCP_FIN != 0;
        let needs_ack = fin || f & (TCP_PSH | 0x20) != 0;
        (syn && (rst || fin)) || (!syn && !ack && !rst) || (!ack && needs_ack)
    }
}

mod nat;

#[test]
fn struct_sizes() {
    use std::mem::size_of;
    let conn = size_of::<Option<crate::conn::Conn>>();
    let key = size_of::<crate::tuple::ConnKey>();
    println!("Option<Conn> = {conn} bytes, ConnKey = {key} bytes");
    assert_eq!(key, 44);
    assert!(conn <= 208, "{conn}");
}

/// Every way a connection with kernel entries leaves the table hands it
/// to `take_replaced` (its entries must go before a successor with its
/// tuple installs its own); one without entries, or whose entries went,
/// is not handed over.
#[test]
fn connections_with_kernel_entries_are_handed_over_however_they_go() {
    let t0 = Instant::now();
    let syn = |port: u16| {
        let mut t = Tcp::v4();
        t.ap = port;
        t.seg(false, TCP_SYN, 0)
    };
    let mut ct = ct();
    let handle = |ct: &mut Conntrack, port: u16| {
        ct.process(syn(port).0, &syn(port).1, &commit(0), t0)
            .conn
            .unwrap()
    };
    let expired = handle(&mut ct, 40001);
    let swept = handle(&mut ct, 40002);
    let flushed = handle(&mut ct, 40003);
    let plain = handle(&mut ct, 40004);
    let gone = handle(&mut ct, 40005);
    for h in [expired, swept, flushed, gone] {
        assert!(ct.kernel_setup(h));
    }
    assert!(ct.is_kernel_setup(gone));
    ct.kernel_entries_gone(gone);
    assert!(!ct.is_kernel_setup(gone), "its last entry went");
    assert!(!ct.has_replaced());
    // Expired, found by a lookup (a new SYN on its tuple).
    let later = t0 + Duration::from_secs(31);
    go(&mut ct, &syn(40001), &CtRequest::default(), later);
    let got: Vec<_> = ct.take_replaced().collect();
    assert_eq!(got, vec![expired.direction_key()]);
    // Flushed.
    let filter = FlushFilter {
        sport: Some(40003),
        ..FlushFilter::default()
    };
    assert_eq!(ct.flush(&filter), 1);
    assert_eq!(
        ct.take_replaced().collect::<Vec<_>>(),
        vec![flushed.direction_key()]
    );
    // Swept.
    ct.sweep(later);
    assert_eq!(
        ct.take_replaced().collect::<Vec<_>>(),
        vec![swept.direction_key()],
        "not the plain one, nor the one whose entries went"
    );
    assert!(ct.offload_info(plain, later).is_none(), "swept too");
}

/// A bare SYN on a connection set up in the kernel is judged as on any
/// connection once the kernel's flags are in: a retransmission while
/// unanswered, `+est` after the handshake, a new connection once closed.
#[test]
fn a_syn_on_a_kernel_set_up_connection_is_judged_by_its_state() {
    let t0 = Instant::now();
    let mut ct = ct();
    let mut t = Tcp::v4();
    let syn = t.seg(false, TCP_SYN, 0);
    let h = ct.process(syn.0, &syn.1, &commit(0), t0).conn.unwrap();
    assert!(ct.kernel_setup(h));
    assert_eq!(
        go(&mut ct, &syn, &commit(0), t0),
        TRK | NEW,
        "retransmitted"
    );
    assert!(!ct.has_replaced());
    ct.kernel_tcp_flags(h, [TCP_ACK, TCP_SYN | TCP_ACK], t0, t0);
    assert_eq!(go(&mut ct, &syn, &commit(0), t0), TRK | EST, "late SYN");
    assert!(!ct.has_replaced());
    assert_eq!(ct.len(), 1);
    ct.kernel_tcp_flags(h, [TCP_ACK | TCP_FIN, TCP_SYN | TCP_ACK | TCP_FIN], t0, t0);
    assert_eq!(go(&mut ct, &syn, &commit(0), t0), TRK | NEW, "reuse");
    assert_eq!(
        ct.take_replaced().collect::<Vec<_>>(),
        vec![h.direction_key()]
    );
    assert!(ct.offload_info(h, t0).is_none(), "replaced");
    assert_eq!(ct.len(), 1);
}
