//! OpenFlow groups through the whole pipeline on in-memory ports: `all`
//! copies with per-bucket rewrites that do not leak, weighted `select` by
//! 5-tuple (stable per connection, cached), `indirect`, `fast_failover`
//! following port liveness, refusal of rules naming missing groups,
//! `del-groups` taking the rules with it, counters, an OVS-style DNAT load
//! balancer, and persistence through the config file.

#[path = "common/membridge.rs"]
mod membridge;
use membridge::bridge;
use nicflow::control::config::Config;
use nicflow::control::proto::Request;
use nicflow::control::switch::Switch;
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use std::net::Ipv4Addr;
use std::time::Instant;

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const SYN: u16 = 0x02;
const ACK: u16 = 0x10;

fn udp(sport: u16, dport: u16) -> Vec<u8> {
    FrameBuilder::new(MAC_A, MAC_B)
        .ipv4(IP_A, IP_B)
        .udp(sport, dport)
        .payload(b"hello groups")
        .build()
}

fn l3(f: &[u8]) -> (usize, usize) {
    let l = nicflow_packet::parse::parse(f).unwrap();
    (usize::from(l.l3_offset), usize::from(l.l4_offset))
}

fn dl_dst(f: &[u8]) -> [u8; 6] {
    f[..6].try_into().unwrap()
}

fn nw_src(f: &[u8]) -> Ipv4Addr {
    let (ip, _) = l3(f);
    Ipv4Addr::new(f[ip + 12], f[ip + 13], f[ip + 14], f[ip + 15])
}

fn nw_dst(f: &[u8]) -> Ipv4Addr {
    let (ip, _) = l3(f);
    Ipv4Addr::new(f[ip + 16], f[ip + 17], f[ip + 18], f[ip + 19])
}

#[test]
fn all_group_copies_with_rewrites_that_do_not_leak() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=all,\
         bucket=actions=mod_dl_dst:02:00:00:00:00:99,mod_nw_src:10.9.9.9,output:p2,\
         bucket=actions=output:p3",
        false,
        now,
    )
    .unwrap();
    // After the group the packet is the one the group received.
    br.add_flow_str("in_port=p1,actions=group:1,output:p4", now)
        .unwrap();
    for round in 0..3 {
        h[0].inject(&udp(1000, 53));
        br.run_until_idle(now);
        let (a, b, c) = (h[1].take_tx(), h[2].take_tx(), h[3].take_tx());
        assert_eq!((a.len(), b.len(), c.len()), (1, 1, 1), "round {round}");
        assert_eq!(dl_dst(&a[0]), [2, 0, 0, 0, 0, 0x99]);
        assert_eq!(nw_src(&a[0]), Ipv4Addr::new(10, 9, 9, 9));
        for f in [&b[0], &c[0]] {
            assert_eq!(dl_dst(f), MAC_B, "no leak from bucket 0");
            assert_eq!(nw_src(f), IP_A, "no leak from bucket 0");
        }
        for f in a.iter().chain(&b).chain(&c) {
            assert!(all_checksums_valid(f));
        }
    }
    let s = br.dp_stats();
    assert_eq!(s.upcalls, 1, "the group's decision is cached: {s:?}");
    // Tags pushed in one bucket do not reach the next either.
    br.add_groups_str(
        "group_id=2,type=all,bucket=actions=mod_vlan_vid:7,output:p2,bucket=actions=output:p3",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("priority=40000,in_port=p1,actions=group:2", now)
        .unwrap();
    h[0].inject(&udp(1000, 53));
    br.run_until_idle(now);
    let (a, b) = (h[1].take_tx(), h[2].take_tx());
    assert_eq!(u16::from_be_bytes([a[0][12], a[0][13]]), 0x8100);
    assert_eq!(u16::from_be_bytes([a[0][14], a[0][15]]) & 0xfff, 7);
    assert_eq!(u16::from_be_bytes([b[0][12], b[0][13]]), 0x0800, "untagged");
}

#[test]
fn select_spreads_by_weight_and_keeps_each_connection() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=select,bucket=weight:1,actions=output:p2,\
         bucket=weight:2,actions=output:p3,bucket=weight:3,actions=output:p4",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:1", now).unwrap();
    let mut chosen = Vec::new();
    for i in 0..300u16 {
        // 300 distinct 5-tuples: ports and addresses vary.
        let f = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(Ipv4Addr::new(198, 18, 1, (i % 50) as u8), IP_B)
            .udp(20000 + i, 53 + i / 50)
            .payload(b"x")
            .build();
        h[0].inject(&f);
        br.run_until_idle(now);
        let got: Vec<usize> = (1..4).filter(|p| !h[*p].take_tx().is_empty()).collect();
        assert_eq!(got.len(), 1, "one bucket per packet");
        chosen.push((f, got[0]));
    }
    let count = |p: usize| chosen.iter().filter(|c| c.1 == p).count();
    let (n2, n3, n4) = (count(1), count(2), count(3));
    assert_eq!(n2 + n3 + n4, 300);
    for (n, expect) in [(n2, 50.0), (n3, 100.0), (n4, 150.0)] {
        assert!(
            (n as f64) > expect * 0.6 && (n as f64) < expect * 1.4,
            "weights 1:2:3 over 300 tuples: {n2} {n3} {n4}"
        );
    }
    // Every 5-tuple keeps its bucket, from the cache now.
    let upcalls = br.dp_stats().upcalls;
    for (f, p) in &chosen {
        h[0].inject(f);
        br.run_until_idle(now);
        assert_eq!(h[*p].take_tx().len(), 1);
    }
    assert_eq!(br.dp_stats().upcalls, upcalls, "all cached");
    // The megaflow matches the 5-tuple.
    let flow = br.dump_dp_flows(now).remove(0).matching;
    for f in ["nw_src=", "nw_dst=", "tp_src=", "tp_dst="] {
        assert!(flow.contains(f), "{flow}");
    }
    // Group counters: the group saw 600 packets, the buckets share them.
    let st = br.group_stats(now);
    assert_eq!(st[0].packets, 600);
    let per: Vec<u64> = st[0].buckets.iter().map(|b| b.0).collect();
    assert_eq!(per, vec![2 * n2 as u64, 2 * n3 as u64, 2 * n4 as u64]);
    assert_eq!(st[0].ref_count, 1);
}

#[test]
fn select_by_fields_hashes_and_matches_only_those_fields() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=select,selection_method=hash,fields(nw_src),\
         bucket=output:p2,bucket=output:p3,bucket=output:p4",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:1", now).unwrap();
    let mut ports = std::collections::BTreeSet::new();
    for i in 0..20u16 {
        h[0].inject(&udp(1000 + i, 2000 + i));
        br.run_until_idle(now);
        for (p, hp) in h.iter().enumerate().skip(1) {
            if !hp.take_tx().is_empty() {
                ports.insert(p);
            }
        }
    }
    assert_eq!(ports.len(), 1, "one source address, one bucket");
    assert_eq!(br.dp_stats().upcalls, 1, "ports are not in the megaflow");
    let flow = br.dump_dp_flows(now).remove(0).matching;
    assert!(flow.contains("nw_src=198.18.0.1"), "{flow}");
    assert!(!flow.contains("tp_src"), "{flow}");
    // Different sources spread.
    for i in 0..40u8 {
        let f = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(Ipv4Addr::new(10, 0, 0, i), IP_B)
            .udp(1, 2)
            .build();
        h[0].inject(&f);
        br.run_until_idle(now);
        for (p, hp) in h.iter().enumerate().skip(1) {
            if !hp.take_tx().is_empty() {
                ports.insert(p);
            }
        }
    }
    assert_eq!(ports.len(), 3);
}

#[test]
fn indirect_and_mod_group() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=7,type=indirect,bucket=actions=dec_ttl,output:p2",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:7", now).unwrap();
    h[0].inject(&udp(1, 2));
    br.run_until_idle(now);
    let out = h[1].take_tx();
    assert_eq!(out.len(), 1);
    let (ip, _) = l3(&out[0]);
    assert_eq!(out[0][ip + 8], 63, "dec_ttl ran");
    // add-group of an existing id is refused, mod-group of a missing one too.
    assert!(br
        .add_groups_str("group_id=7,type=indirect,bucket=output:p3", false, now)
        .unwrap_err()
        .to_string()
        .contains("already exists"));
    assert!(br
        .add_groups_str("group_id=8,type=indirect,bucket=output:p3", true, now)
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
    // mod-group changes the cached decision.
    br.add_groups_str("group_id=7,type=indirect,bucket=output:p3", true, now)
        .unwrap();
    h[0].inject(&udp(1, 2));
    br.run_until_idle(now);
    assert!(h[1].take_tx().is_empty());
    assert_eq!(h[2].take_tx().len(), 1);
    assert_eq!(
        br.dump_groups_text(),
        vec!["group_id=7,type=indirect,bucket=bucket_id:0,actions=output:p3"]
    );
}

#[test]
fn fast_failover_follows_port_liveness() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=fast_failover,\
         bucket=watch_port:p2,actions=output:p2,bucket=watch_port:p3,actions=output:p3",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:1", now).unwrap();
    h[0].inject(&udp(1, 2));
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    assert!(h[2].take_tx().is_empty());
    // The cached flow follows the watch port going away.
    br.del_port("p2").unwrap();
    h[0].inject(&udp(1, 2));
    br.run_until_idle(now);
    assert_eq!(h[2].take_tx().len(), 1, "failed over to the second bucket");
    let st = br.group_stats(now);
    assert_eq!(st[0].packets, 2);
    assert_eq!(
        st[0].buckets.iter().map(|b| b.0).collect::<Vec<_>>(),
        vec![1, 1]
    );
}

#[test]
fn rules_need_their_groups_and_go_with_them() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    let e = br.add_flow_str("actions=group:9", now).unwrap_err();
    assert!(e.to_string().contains("group 9 does not exist"), "{e}");
    assert!(br.dump_flows(now).is_empty(), "nothing added");
    // A file with one bad rule adds nothing.
    assert!(br
        .add_flows_str(
            "priority=1,actions=output:p2\npriority=2,actions=group:9\n",
            now
        )
        .is_err());
    assert!(br.dump_flows(now).is_empty());
    // A bucket naming a missing group is refused too.
    assert!(br
        .add_groups_str("group_id=1,type=all,bucket=actions=group:2", false, now)
        .is_err());
    br.add_groups_str(
        "group_id=1,type=all,bucket=output:p2\ngroup_id=2,type=all,bucket=output:p3",
        false,
        now,
    )
    .unwrap();
    br.add_flows_str(
        "priority=10,in_port=p1,udp,actions=group:1\n\
         priority=10,in_port=p1,tcp,actions=group:2\n\
         priority=20,in_port=p1,udp,tp_dst=7,actions=group:1,group:2\n\
         priority=1,actions=drop\n",
        now,
    )
    .unwrap();
    h[0].inject(&udp(1, 2));
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    let st = br.group_stats(now);
    assert_eq!((st[0].ref_count, st[1].ref_count), (2, 2));
    // del-groups group_id=1: the two rules naming it go, and the cached
    // flow with them.
    assert_eq!(br.del_groups_str("group_id=1").unwrap(), (1, 2));
    let left: Vec<u16> = br.dump_flows(now).iter().map(|d| d.spec.priority).collect();
    assert_eq!(left, vec![10, 1]);
    h[0].inject(&udp(1, 2));
    br.run_until_idle(now);
    assert!(h[1].take_tx().is_empty(), "dropped now");
    assert_eq!(br.del_groups_str("group_id=1").unwrap(), (0, 0));
    assert_eq!(br.del_groups_str("").unwrap(), (1, 1));
    assert!(br.dump_groups_text().is_empty());
    assert!(br.del_groups_str("type=all").is_err());
}

#[test]
fn group_stats_count_packets_and_bytes() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=3,type=all,bucket=output:p2,bucket=output:p3",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:3", now).unwrap();
    let f = udp(5, 6);
    for _ in 0..5 {
        h[0].inject(&f);
    }
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 5);
    let st = br.group_stats(now);
    let n = f.len() as u64;
    assert_eq!((st[0].group_id, st[0].packets, st[0].bytes), (3, 5, 5 * n));
    assert_eq!(st[0].buckets, vec![(5, 5 * n), (5, 5 * n)]);
    assert_eq!(st[0].ref_count, 1);
}

/// OVS's select-group load balancer: each bucket commits the connection
/// with DNAT to its backend; established packets and replies follow the
/// connection.
#[test]
fn select_group_with_ct_nat_is_a_load_balancer() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=select,\
         bucket=actions=ct(commit,nat(dst=198.18.0.10:8080)),output:p2,\
         bucket=actions=ct(commit,nat(dst=198.18.0.11:8080)),output:p2,\
         bucket=actions=ct(commit,nat(dst=198.18.0.12:8080)),output:p2",
        false,
        now,
    )
    .unwrap();
    br.add_flows_str(
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)\n\
         table=1,priority=1,actions=drop\n\
         table=1,priority=10,in_port=p1,tcp,nw_dst=198.18.0.100,tp_dst=80,ct_state=+trk+new,actions=group:1\n\
         table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2\n\
         table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1\n",
        now,
    )
    .unwrap();
    let vip = Ipv4Addr::new(198, 18, 0, 100);
    let mut backends = std::collections::BTreeMap::new();
    for sport in 41000..41030u16 {
        let syn = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(IP_A, vip)
            .tcp(sport, 80, SYN)
            .tcp_seq(1)
            .tcp_window(65535)
            .build();
        h[0].inject(&syn);
        br.run_until_idle(now);
        let out = h[1].take_tx();
        assert_eq!(out.len(), 1, "SYN from {sport}");
        assert!(all_checksums_valid(&out[0]));
        let dst = nw_dst(&out[0]);
        let (_, l4) = l3(&out[0]);
        assert_eq!(u16::from_be_bytes([out[0][l4 + 2], out[0][l4 + 3]]), 8080);
        *backends.entry(dst).or_insert(0) += 1;
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
        assert_eq!(back.len(), 1);
        assert_eq!(nw_src(&back[0]), vip);
        // The client's ACK is established: the same backend.
        let ack = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(IP_A, vip)
            .tcp(sport, 80, ACK)
            .tcp_seq(2)
            .tcp_ack(501)
            .tcp_window(65535)
            .build();
        h[0].inject(&ack);
        br.run_until_idle(now);
        let out = h[1].take_tx();
        assert_eq!(out.len(), 1);
        assert_eq!(nw_dst(&out[0]), dst, "the connection keeps its backend");
    }
    for b in backends.keys() {
        assert!(
            (Ipv4Addr::new(198, 18, 0, 10)..=Ipv4Addr::new(198, 18, 0, 12)).contains(b),
            "{b}"
        );
    }
    assert!(backends.len() >= 2, "{backends:?}");
    let st = br.group_stats(now);
    assert_eq!(st[0].packets, 30, "one new packet per connection");
    assert_eq!(st[0].buckets.iter().map(|b| b.0).sum::<u64>(), 30);
}

#[test]
fn groups_persist_in_the_config_file() {
    let dir = std::env::temp_dir().join(format!("nicflow-groups-{}", std::process::id()));
    let path = dir.join("nicflow.toml");
    let _ = std::fs::remove_dir_all(&dir);
    let mut sw = Switch::new(Config::default(), Some(path.clone())).unwrap();
    let ok = |sw: &mut Switch, r: Request| {
        let resp = sw.handle(r);
        assert!(resp.ok, "{resp:?}");
        resp
    };
    ok(
        &mut sw,
        Request::AddBr {
            bridge: "br0".into(),
        },
    );
    ok(
        &mut sw,
        Request::AddGroup {
            bridge: "br0".into(),
            group: "group_id=5,type=select,selection_method=hash,fields(nw_src,tcp_dst),bucket=weight:3,actions=output:1,bucket=actions=ct(commit,nat(dst=198.18.0.10:80)),output:2".into(),
        },
    );
    ok(
        &mut sw,
        Request::AddFlow {
            bridge: "br0".into(),
            flow: "priority=9,ip,actions=group:5".into(),
        },
    );
    let bad = sw.handle(Request::AddFlow {
        bridge: "br0".into(),
        flow: "actions=group:6".into(),
    });
    assert!(!bad.ok && bad.error.unwrap().contains("group 6"));
    let bad = sw.handle(Request::AddGroup {
        bridge: "br0".into(),
        group: "group_id=6,type=indirect".into(),
    });
    assert!(!bad.ok && bad.error.unwrap().contains("exactly one bucket"));
    let groups = ok(
        &mut sw,
        Request::DumpGroups {
            bridge: "br0".into(),
        },
    )
    .text;
    assert_eq!(
        groups,
        " group_id=5,type=select,selection_method=hash,fields(nw_src,tcp_dst),bucket=bucket_id:0,weight:3,actions=output:1,bucket=bucket_id:1,actions=ct(commit,nat(dst=198.18.0.10:80)),output:2\n"
    );
    let stats = ok(
        &mut sw,
        Request::DumpGroupStats {
            bridge: "br0".into(),
        },
    )
    .text;
    assert!(
        stats.starts_with(" group_id=5,duration=")
            && stats.ends_with(",ref_count=1,packet_count=0,byte_count=0,bucket0:packet_count=0,byte_count=0,bucket1:packet_count=0,byte_count=0\n"),
        "{stats}"
    );
    let flows = ok(
        &mut sw,
        Request::DumpFlows {
            bridge: "br0".into(),
        },
    )
    .text;
    drop(sw);
    // A restart brings the groups back before the rules that use them.
    let mut sw = Switch::new(Config::load(&path).unwrap(), Some(path.clone())).unwrap();
    assert_eq!(
        ok(
            &mut sw,
            Request::DumpGroups {
                bridge: "br0".into()
            }
        )
        .text,
        groups
    );
    let again = ok(
        &mut sw,
        Request::DumpFlows {
            bridge: "br0".into(),
        },
    )
    .text;
    let strip = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split(", ").skip(5).collect::<Vec<_>>().join(", "))
            .collect()
    };
    assert_eq!(strip(&again), strip(&flows));
    let r = ok(
        &mut sw,
        Request::DelGroups {
            bridge: "br0".into(),
            filter: Some("group_id=5".into()),
        },
    );
    assert_eq!(r.data["rules_deleted"], 1);
    drop(sw);
    let c = Config::load(&path).unwrap();
    assert!(!c.bridges[0].flows.iter().any(|l| l.contains("group")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Groups of `all` groups fan out exponentially (8^6 bucket runs here); a
/// translation stops after 4096 tables and groups, as OVS's
/// `MAX_RESUBMITS`, drops the packet and counts it.
#[test]
fn fan_out_of_groups_is_bounded() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_groups_str("group_id=6,type=all,bucket=actions=output:p2", false, now)
        .unwrap();
    for g in (1..6).rev() {
        let buckets: Vec<String> = (0..8)
            .map(|_| format!("bucket=actions=group:{}", g + 1))
            .collect();
        br.add_groups_str(
            &format!("group_id={g},type=all,{}", buckets.join(",")),
            false,
            now,
        )
        .unwrap();
    }
    br.add_flow_str("in_port=p1,actions=group:1", now).unwrap();
    let t = std::time::Instant::now();
    h[0].inject(&udp(1000, 53));
    br.run_until_idle(now);
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    assert!(h[1].take_tx().is_empty(), "a cut translation sends nothing");
    let drops = br.dp_stats().drops();
    assert!(
        drops
            .iter()
            .any(|(r, n)| *r == "recursion_limit" && *n == 1),
        "{drops:?}"
    );
}

fn vid(f: &[u8]) -> Option<u16> {
    (u16::from_be_bytes([f[12], f[13]]) == 0x8100)
        .then(|| u16::from_be_bytes([f[14], f[15]]) & 0xfff)
}

/// Which of ports p2..p4 each of `n` packets of one flow left by (index
/// into `h`), with the frames.
fn spray(
    br: &mut nicflow::bridge::Bridge,
    h: &[nicflow::port::mem::MemHandle],
    n: usize,
    now: Instant,
) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..n {
        h[0].inject(&udp(1000, 53));
        br.run_until_idle(now);
        let got: Vec<(usize, Vec<Vec<u8>>)> = (1..h.len())
            .map(|p| (p, h[p].take_tx()))
            .filter(|(_, f)| !f.is_empty())
            .collect();
        assert_eq!(got.len(), 1, "packet {i}: one bucket per packet: {got:?}");
        assert_eq!(got[0].1.len(), 1);
        out.push((got[0].0, got[0].1[0].clone()));
    }
    out
}

#[test]
fn rr_select_sprays_one_flow_per_packet_from_one_cached_flow() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=select,selection_method=rr,\
         bucket=actions=mod_vlan_vid:10,output:p2,bucket=actions=mod_vlan_vid:20,output:p3",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:1", now).unwrap();
    let got = spray(&mut br, &h, 6, now);
    let ports: Vec<usize> = got.iter().map(|g| g.0).collect();
    assert_eq!(ports, vec![1, 2, 1, 2, 1, 2], "buckets in turn");
    for (p, f) in &got {
        assert_eq!(vid(f), Some(if *p == 1 { 10 } else { 20 }));
        assert!(all_checksums_valid(f));
    }
    assert_eq!(br.dp_stats().upcalls, 1, "one flow carries every packet");
    let flows = br.dump_dp_flows(now);
    assert_eq!(flows.len(), 1);
    for f in ["nw_src", "nw_dst", "tp_src", "tp_dst"] {
        assert!(
            !flows[0].matching.contains(f),
            "no hash field in the megaflow: {}",
            flows[0].matching
        );
    }
    assert_eq!(
        flows[0].actions,
        "select(rr,g=1,[push_vlan(tpid=0x8100,vid=10,pcp=0),2],[push_vlan(tpid=0x8100,vid=20,pcp=0),3])"
    );
    assert_eq!(br.group_stats(now)[0].packets, 6);
}

/// `mod-group` restarts the modified group's bucket counters only: what
/// the other per-packet groups counted meanwhile is still theirs (taking
/// the counts drains every group's).
#[test]
fn mod_group_restarts_its_own_bucket_counters_only() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=select,selection_method=rr,bucket=actions=output:p2,bucket=actions=output:p3\n\
         group_id=2,type=select,selection_method=rr,bucket=actions=output:p2,bucket=actions=output:p3",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:1", now).unwrap();
    br.add_flow_str("in_port=p4,actions=group:2", now).unwrap();
    for _ in 0..4 {
        h[0].inject(&udp(1000, 53));
        h[3].inject(&udp(1000, 53));
        br.run_until_idle(now);
    }
    br.add_groups_str(
        "group_id=1,type=select,selection_method=rr,bucket=actions=output:p3,bucket=actions=output:p2",
        true,
        now,
    )
    .unwrap();
    let stats = br.group_stats(now);
    let g = |id: u32| stats.iter().find(|s| s.group_id == id).unwrap().clone();
    let packets = |id: u32| g(id).buckets.iter().map(|b| b.0).collect::<Vec<_>>();
    assert_eq!(
        packets(1),
        vec![0, 0],
        "the modified group's buckets restart"
    );
    assert_eq!(packets(2), vec![2, 2], "the other group keeps its counts");
}

#[test]
fn wrr_select_follows_weights_per_packet() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=select,selection_method=wrr,\
         bucket=weight:3,actions=output:p2,bucket=weight:1,actions=output:p3",
        false,
        now,
    )
    .unwrap();
    br.add_flow_str("in_port=p1,actions=group:1", now).unwrap();
    let got: Vec<usize> = spray(&mut br, &h, 400, now).iter().map(|g| g.0).collect();
    assert_eq!(&got[..8], &[1, 1, 2, 1, 1, 1, 2, 1], "smooth: a a b a");
    let first = got.iter().filter(|p| **p == 1).count();
    assert_eq!((first, 400 - first), (300, 100), "3:1");
}

#[test]
fn per_packet_select_skips_dead_buckets_and_its_rewrites_do_not_leak() {
    let (mut br, h) = bridge(4);
    let now = Instant::now();
    br.add_groups_str(
        "group_id=1,type=select,selection_method=rr,\
         bucket=watch_port:p2,actions=mod_nw_src:198.18.9.9,mod_vlan_vid:7,output:p2,\
         bucket=actions=output:p3",
        false,
        now,
    )
    .unwrap();
    // After the group the packet is the one the group received.
    br.add_flow_str("in_port=p1,actions=group:1,output:p4", now)
        .unwrap();
    for round in 0..4 {
        h[0].inject(&udp(1000, 53));
        br.run_until_idle(now);
        let (a, b, c) = (h[1].take_tx(), h[2].take_tx(), h[3].take_tx());
        assert_eq!(a.len() + b.len(), 1, "round {round}");
        assert_eq!(a.len(), usize::from(round % 2 == 0), "round {round}");
        if let Some(f) = a.first() {
            assert_eq!(nw_src(f), Ipv4Addr::new(198, 18, 9, 9));
            assert_eq!(vid(f), Some(7));
        }
        assert_eq!(c.len(), 1);
        assert_eq!(nw_src(&c[0]), IP_A, "no leak from the bucket");
        assert_eq!(vid(&c[0]), None, "no tag leaks from the bucket");
        assert!(all_checksums_valid(&c[0]));
    }
    // p2 goes: its bucket is dead, every packet takes p3 (revalidated).
    br.del_port("p2").unwrap();
    for _ in 0..3 {
        h[0].inject(&udp(1000, 53));
        br.run_until_idle(now);
        assert_eq!(h[2].take_tx().len(), 1);
        assert_eq!(h[3].take_tx().len(), 1);
    }
    let flows = br.dump_dp_flows(now);
    assert!(
        flows[0].actions.starts_with("select(rr,g=1,[3])"),
        "{}",
        flows[0].actions
    );
}
