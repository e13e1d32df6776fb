//! Connection tracking through the whole pipeline, on in-memory ports: the
//! stateful-firewall tables Open vSwitch documents (`ct_state=-trk` ->
//! `ct(table=1)`; new connections committed one way only; established
//! traffic both ways), zones and marks across recirculation, the dump
//! format, and the cached path agreeing with the slow path packet for packet.

use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::{MemHandle, MemPort};
use nicflow_packet::builder::FrameBuilder;
use std::net::Ipv4Addr;
use std::time::Instant;

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

const SYN: u16 = 0x02;
const ACK: u16 = 0x10;
const PSH: u16 = 0x08;
const FIN: u16 = 0x01;

/// OVS's stateful firewall (ovs-fields(7), "Connection Tracking"): p1 may
/// open connections to p2, p2 may only answer.
const FIREWALL: &str = "\
table=0,priority=1,actions=drop
table=0,priority=10,arp,actions=normal
table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)
table=1,priority=1,actions=drop
table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit),output:p2
table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2
table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1
";

fn bridge(cfg: DatapathConfig) -> (Bridge, Vec<MemHandle>) {
    let mut br = Bridge::new("br0", cfg);
    let mut hs = Vec::new();
    for i in 1..=2 {
        let (p, h) = MemPort::new(&format!("p{i}"));
        br.add_port(Box::new(p)).unwrap();
        hs.push(h);
    }
    (br, hs)
}

/// A TCP segment A->B (`from_a`) or B->A.
fn tcp(from_a: bool, flags: u16, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let (sm, dm, si, di, sp, dp) = if from_a {
        (MAC_A, MAC_B, IP_A, IP_B, 40000, 80)
    } else {
        (MAC_B, MAC_A, IP_B, IP_A, 80, 40000)
    };
    FrameBuilder::new(sm, dm)
        .ipv4(si, di)
        .tcp(sp, dp, flags)
        .tcp_seq(seq)
        .tcp_ack(ack)
        .tcp_window(65535)
        .payload(payload)
        .build()
}

/// One step of a conversation: who sends what, and whether the firewall
/// must let it through.
struct Step {
    from_a: bool,
    frame: Vec<u8>,
    passes: bool,
}

fn step(from_a: bool, flags: u16, seq: u32, ack: u32, payload: &[u8], passes: bool) -> Step {
    Step {
        from_a,
        frame: tcp(from_a, flags, seq, ack, payload),
        passes,
    }
}

/// A handshake, data both ways, close; with an unsolicited SYN and a
/// SYN-ACK for no connection from p2 first (both dropped).
fn conversation() -> Vec<Step> {
    let (a, b) = (1000u32, 5000u32);
    vec![
        // p2 may not open connections, nor answer one that does not exist.
        step(false, SYN, 9000, 0, b"", false),
        step(false, SYN | ACK, 9000, 77, b"", false),
        step(true, SYN, a, 0, b"", true),
        step(false, SYN | ACK, b, a + 1, b"", true),
        step(true, ACK, a + 1, b + 1, b"", true),
        step(
            true,
            ACK | PSH,
            a + 1,
            b + 1,
            b"GET / HTTP/1.0\r\n\r\n",
            true,
        ),
        step(
            false,
            ACK | PSH,
            b + 1,
            a + 19,
            b"HTTP/1.0 200 OK\r\n\r\n",
            true,
        ),
        step(true, ACK | PSH, a + 19, b + 20, b"more", true),
        // Far outside the window: invalid, dropped by the table miss.
        step(false, ACK | PSH, b + 3_000_000_000, a + 23, b"bogus", false),
        step(true, FIN | ACK, a + 23, b + 20, b"", true),
        step(false, FIN | ACK, b + 20, a + 24, b"", true),
        step(true, ACK, a + 24, b + 21, b"", true),
    ]
}

/// Play `steps` one frame at a time; returns every frame transmitted, with
/// the port it left on.
fn play(br: &mut Bridge, h: &[MemHandle], steps: &[Step], now: Instant) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let (src, dst) = if s.from_a { (0, 1) } else { (1, 0) };
        h[src].inject(&s.frame);
        br.run_until_idle(now);
        let got = h[dst].take_tx();
        assert!(h[src].take_tx().is_empty(), "step {i}: nothing goes back");
        assert_eq!(
            got.len(),
            usize::from(s.passes),
            "step {i}: {} expected",
            if s.passes { "forwarding" } else { "a drop" }
        );
        for f in got {
            assert_eq!(f, s.frame, "step {i}: forwarded unchanged");
            out.push((dst, f));
        }
    }
    out
}

#[test]
fn stateful_firewall_lets_replies_in_and_keeps_new_connections_out() {
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    br.add_flows_str(FIREWALL, now).unwrap();
    play(&mut br, &h, &conversation(), now);
    let dump: Vec<String> = br
        .conntrack()
        .dump(None, now)
        .iter()
        .map(|e| e.format(false, false))
        .collect();
    assert_eq!(
        dump,
        vec![
            "tcp,orig=(src=198.18.0.1,dst=198.18.0.2,sport=40000,dport=80),\
              reply=(src=198.18.0.2,dst=198.18.0.1,sport=80,dport=40000),\
              protoinfo=(state=TIME_WAIT)"
                .to_string()
        ]
    );
    // Every packet of the connection was counted, in its direction (the
    // out-of-window one is invalid and not counted, as in OVS).
    let with_stats = br.conntrack().dump(None, now)[0].format(false, true);
    assert!(
        with_stats.contains("dport=80,packets=6,") && with_stats.contains("dport=40000,packets=3,"),
        "{with_stats}"
    );
    let s = br.dp_stats();
    assert!(
        s.recirculations >= 10,
        "every IP packet recirculates: {s:?}"
    );
    // The established packets after the first few were served by the
    // caches, recirculated passes included.
    assert!(s.emc_hits + s.megaflow_hits > 0, "{s:?}");
}

#[test]
fn cached_and_uncached_paths_agree_on_tracked_traffic() {
    let now = Instant::now();
    let mut outputs = Vec::new();
    for caches in [true, false] {
        let cfg = DatapathConfig {
            caches_enabled: caches,
            ..Default::default()
        };
        let (mut br, h) = bridge(cfg);
        br.add_flows_str(FIREWALL, now).unwrap();
        // Twice: the second conversation reuses cached flows (and a
        // connection in TIME_WAIT is replaced by the new SYN).
        let mut steps = conversation();
        steps.extend(conversation());
        outputs.push(play(&mut br, &h, &steps, now));
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn zones_marks_and_labels_cross_recirculation() {
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    // Commit in zone 7 with a mark and label; the reply direction is
    // steered by the mark it finds on its connection.
    br.add_flows_str(
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(zone=7,table=1)\n\
         table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,ct_zone=7,\
         actions=ct(commit,zone=7,exec(set_field:0x2a->ct_mark,set_field:0x100/0x100->ct_label)),output:p2\n\
         table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,ct_zone=7,ct_mark=0x2a,actions=output:p2\n\
         table=1,priority=10,in_port=p2,ip,ct_state=+trk+est+rpl,ct_zone=7,ct_mark=0x2a,\
         ct_label=0x100/0x100,ct_nw_src=198.18.0.1,ct_nw_proto=6,ct_tp_dst=80,actions=output:p1\n\
         table=1,priority=1,actions=drop\n",
        now,
    )
    .unwrap();
    let steps = vec![
        step(true, SYN, 1, 0, b"", true),
        step(false, SYN | ACK, 100, 2, b"", true),
        step(true, ACK, 2, 101, b"", true),
    ];
    play(&mut br, &h, &steps, now);
    let dump = br.conntrack().dump(Some(7), now);
    assert_eq!(dump.len(), 1);
    let line = dump[0].format(false, false);
    assert!(
        line.contains(",zone=7,mark=42,labels=0x100,"),
        "zone, mark and labels in the dump: {line}"
    );
    assert!(
        br.conntrack().dump(Some(0), now).is_empty(),
        "zones are separate"
    );
}

#[test]
fn a_loop_of_recirculations_is_cut_and_counted() {
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    // Never checks ct_state: every pass recirculates again.
    br.add_flows_str("ip,actions=ct(table=0)\n", now).unwrap();
    h[0].inject(&tcp(true, SYN, 1, 0, b""));
    br.run_until_idle(now);
    assert!(h[1].take_tx().is_empty());
    let drops = br.dp_stats().drops();
    assert!(
        drops.contains(&("recirc_limit", 1)),
        "one recirc_limit drop: {drops:?}"
    );
}

/// OVS's L4 load balancer: DNAT of a virtual address to three backends,
/// replies un-NATed, checksums right in both directions.
#[test]
fn dnat_load_balancer_spreads_connections_and_unnats_replies() {
    use nicflow_packet::builder::all_checksums_valid;
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    br.add_flows_str(
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)\n\
         table=1,priority=1,actions=drop\n\
         table=1,priority=10,in_port=p1,tcp,nw_dst=198.18.0.100,tp_dst=80,ct_state=+trk+new,\
         actions=ct(commit,nat(dst=198.18.0.10-198.18.0.12:8080)),output:p2\n\
         table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2\n\
         table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1\n",
        now,
    )
    .unwrap();
    let vip = Ipv4Addr::new(198, 18, 0, 100);
    let mut backends = std::collections::BTreeSet::new();
    for sport in 40000..40030u16 {
        let syn = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(IP_A, vip)
            .tcp(sport, 80, SYN)
            .tcp_seq(1)
            .tcp_window(65535)
            .build();
        h[0].inject(&syn);
        br.run_until_idle(now);
        let out = h[1].take_tx();
        assert_eq!(out.len(), 1, "SYN from port {sport} forwarded");
        let f = &out[0];
        assert!(all_checksums_valid(f), "DNATed SYN has valid checksums");
        let l = nicflow_packet::parse::parse(f).unwrap();
        let ip = usize::from(l.l3_offset);
        let l4 = usize::from(l.l4_offset);
        let dst = Ipv4Addr::new(f[ip + 16], f[ip + 17], f[ip + 18], f[ip + 19]);
        let dport = u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]);
        assert!(
            (Ipv4Addr::new(198, 18, 0, 10)..=Ipv4Addr::new(198, 18, 0, 12)).contains(&dst),
            "{dst}"
        );
        assert_eq!(dport, 8080);
        backends.insert(dst);
        // The backend answers; the client sees the virtual address.
        let synack = FrameBuilder::new(MAC_B, MAC_A)
            .ipv4(dst, IP_A)
            .tcp(8080, sport, SYN | ACK)
            .tcp_seq(500)
            .tcp_ack(2)
            .tcp_window(65535)
            .build();
        h[1].inject(&synack);
        br.run_until_idle(now);
        let back = h[0].take_tx();
        assert_eq!(back.len(), 1, "reply to port {sport} forwarded");
        let b = &back[0];
        assert!(all_checksums_valid(b), "un-NATed reply has valid checksums");
        let l = nicflow_packet::parse::parse(b).unwrap();
        let ip = usize::from(l.l3_offset);
        let l4 = usize::from(l.l4_offset);
        assert_eq!(
            Ipv4Addr::new(b[ip + 12], b[ip + 13], b[ip + 14], b[ip + 15]),
            vip
        );
        assert_eq!(u16::from_be_bytes([b[l4], b[l4 + 1]]), 80);
    }
    assert!(
        backends.len() >= 2,
        "30 connections use several backends: {backends:?}"
    );
    let dump = br.conntrack().dump(None, now);
    assert_eq!(dump.len(), 30);
    let line = dump[0].format(false, false);
    assert!(
        line.contains("orig=(src=198.18.0.1,dst=198.18.0.100,") && line.contains("sport=8080"),
        "the reply tuple is the backend's: {line}"
    );
}

/// A register loaded from a packet field before `ct(table=N)` makes one
/// frozen walk (recirculation id) per value; those no cached flow uses any
/// more are forgotten at the next tick, so the slow path does not grow
/// with the addresses it has seen.
#[test]
fn frozen_walks_of_expired_flows_are_forgotten() {
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    br.add_flows_str(
        "table=0,priority=100,ip,ct_state=-trk,actions=move:NXM_OF_IP_SRC[]->NXM_NX_REG0[],ct(table=1)\n\
         table=1,priority=10,ip,actions=output:p2\n",
        now,
    )
    .unwrap();
    for i in 1..=50u8 {
        let f = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(Ipv4Addr::new(198, 18, 1, i), IP_B)
            .udp(1000, 53)
            .build();
        h[0].inject(&f);
        br.run_until_idle(now);
        assert_eq!(h[1].take_tx().len(), 1);
    }
    assert_eq!(br.n_frozen(), 50, "one walk per register value");
    // The flows age out (idle timeout), then the walks go with them.
    let later = now + std::time::Duration::from_secs(60);
    br.tick(later);
    br.tick(later);
    assert_eq!(br.n_frozen(), 0);
    // Traffic still works afterwards, with fresh ids.
    h[0].inject(&tcp(true, SYN, 1, 0, b""));
    br.run_until_idle(later);
    assert_eq!(h[1].take_tx().len(), 1);
}

/// A storm of half-open connections (SYNs from many ports) and of invalid
/// segments (SYN-ACKs, ACKs for nothing) against the stateful firewall:
/// the table stops at its limit, the rest is counted, and an established
/// connection keeps flowing through it all.
#[test]
fn syn_and_invalid_storms_leave_the_tracker_bounded_and_traffic_flowing() {
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    br.add_flows_str(FIREWALL, now).unwrap();
    br.set_conntrack_limit(500);
    // An established connection first.
    let hand = [
        step(true, SYN, 1000, 0, b"", true),
        step(false, SYN | ACK, 5000, 1001, b"", true),
        step(true, ACK, 1001, 5001, b"", true),
    ];
    play(&mut br, &h, &hand, now);
    let mut seq = 1001u32;
    for round in 0..10u16 {
        // 400 SYNs from new source ports (half-open, committed until the
        // limit), 200 stray SYN-ACKs and ACKs from p2 (invalid or new).
        for i in 0..400u16 {
            let syn = FrameBuilder::new(MAC_A, MAC_B)
                .ipv4(IP_A, IP_B)
                .tcp(2000 + round * 400 + i, 80, SYN)
                .tcp_seq(7)
                .build();
            h[0].inject(&syn);
        }
        for i in 0..200u16 {
            let f = FrameBuilder::new(MAC_B, MAC_A)
                .ipv4(IP_B, IP_A)
                .tcp(80, 30000 + i, if i % 2 == 0 { SYN | ACK } else { ACK })
                .tcp_seq(99)
                .tcp_ack(1234)
                .build();
            h[1].inject(&f);
        }
        br.run_until_idle(now);
        h[1].take_tx();
        assert!(h[0].take_tx().is_empty(), "nothing unsolicited reaches p1");
        // The established connection still passes, both ways.
        let data = step(true, ACK | PSH, seq, 5001, b"ping", true);
        play(&mut br, &h, std::slice::from_ref(&data), now);
        let back = step(false, ACK, 5001, seq + 4, b"", true);
        play(&mut br, &h, std::slice::from_ref(&back), now);
        seq += 4;
    }
    let st = br.conntrack().stats();
    assert_eq!(st.connections, 500, "the table stops at its limit: {st:?}");
    assert!(st.limit_drops > 3000, "{st:?}");
    assert!(
        st.invalid_total() >= 1000,
        "stray SYN-ACKs counted invalid: {st:?}"
    );
}

/// Several `ct(table=N)` in one action list fork the packet each time; a
/// loop of them is cut after 64 copies of one received packet, counted,
/// and the next packet is processed normally.
#[test]
fn forking_recirculations_are_bounded_per_packet() {
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    br.add_flows_str(
        "table=0,ip,actions=ct(table=0),ct(table=0),ct(table=0),ct(table=0)\n",
        now,
    )
    .unwrap();
    h[0].inject(&tcp(true, SYN, 1, 0, b""));
    br.run_until_idle(now);
    let s = br.dp_stats();
    assert!(s.recirculations <= 64, "{s:?}");
    assert!(br
        .dp_stats()
        .drops()
        .iter()
        .any(|(r, n)| *r == "recirc_limit" && *n > 0));
}

/// IPv6 connections: the recirculated pass matches the connection's
/// `ct_ipv6_src/dst`, and a `pkt_mark` loaded before `ct(table=1)` is still
/// there after it (OVS keeps it in the packet's metadata). Replies of a
/// second client, whose tuple the rule does not name, are dropped.
#[test]
fn ipv6_connection_tuple_and_pkt_mark_cross_recirculation() {
    use std::net::Ipv6Addr;
    let (mut br, h) = bridge(DatapathConfig::default());
    let now = Instant::now();
    br.add_flows_str(
        "table=0,priority=100,ipv6,ct_state=-trk,actions=load:0x7->NXM_NX_PKT_MARK[],ct(table=1)\n\
         table=1,priority=10,in_port=p1,tcp6,pkt_mark=0x7,ct_state=+trk+new,actions=ct(commit),output:p2\n\
         table=1,priority=10,in_port=p1,ipv6,pkt_mark=0x7,ct_state=+trk+est,actions=output:p2\n\
         table=1,priority=10,in_port=p2,ipv6,pkt_mark=0x7,ct_state=+trk+est+rpl,\
         ct_ipv6_src=2001:db8::1,ct_ipv6_dst=2001:db8::2/128,actions=output:p1\n\
         table=1,priority=1,actions=drop\n",
        now,
    )
    .unwrap();
    let server: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let seg = |client: Ipv6Addr, to_server: bool, flags: u16, seq: u32, ack: u32| {
        let (sm, dm, s, d, sp, dp) = if to_server {
            (MAC_A, MAC_B, client, server, 40000, 80)
        } else {
            (MAC_B, MAC_A, server, client, 80, 40000)
        };
        FrameBuilder::new(sm, dm)
            .ipv6(s, d)
            .tcp(sp, dp, flags)
            .tcp_seq(seq)
            .tcp_ack(ack)
            .tcp_window(65535)
            .build()
    };
    for (client, replies_pass) in [
        ("2001:db8::1".parse::<Ipv6Addr>().unwrap(), true),
        ("2001:db8::3".parse::<Ipv6Addr>().unwrap(), false),
    ] {
        let steps = [
            (true, SYN, 1, 0, true),
            (false, SYN | ACK, 100, 2, replies_pass),
        ];
        for (i, (to_server, flags, seq, ack, passes)) in steps.into_iter().enumerate() {
            let f = seg(client, to_server, flags, seq, ack);
            let (src, dst) = if to_server { (0, 1) } else { (1, 0) };
            h[src].inject(&f);
            br.run_until_idle(now);
            let got = h[dst].take_tx();
            assert_eq!(got.len(), usize::from(passes), "{client} step {i}");
        }
    }
    let dump = br.conntrack().dump(None, now);
    assert_eq!(dump.len(), 2, "both IPv6 connections committed");
}
