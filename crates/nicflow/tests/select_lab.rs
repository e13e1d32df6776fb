//! Per-packet multipath end to end: a `select` group with
//! `selection_method=rr` sprays the packets of one UDP flow over two ports,
//! each bucket rewriting the UDP source port a multipath fabric would hash
//! on, on the userspace engine (`offload=none`) and on the TC engine (the
//! default for veth ports, where the kernel picks the bucket per packet).
//! Packets are counted at the two receiving hosts. And `selection_method=
//! splb` moving most of a flow off a path whose qdisc backs up (TC engine).
//!
//! Root only; one namespace lab per engine (`nfsl<pid><tag>`), torn down
//! by its guard even when an assertion fails.

mod common;

use common::oflab::{capture, raw_socket, send};
use nicflow_packet::builder::FrameBuilder;
use serde_json::Value;
use std::net::Ipv4Addr;
use std::time::Duration;

const N: usize = 200;

fn udp_src(f: &[u8]) -> Option<u16> {
    let l = nicflow_packet::parse::parse(f).ok()?;
    let o = usize::from(l.l4_offset);
    (f.get(12..14)? == [0x08, 0x00] && f.get(23)? == &17)
        .then(|| u16::from_be_bytes([f[o], f[o + 1]]))
}

/// A switch namespace `sw` and hosts h1-h3, each behind switch port p1-p3
/// (IPv6 off on the hosts: no stray router solicitations in the counts).
fn three_hosts(tag: &str) -> common::NsLab {
    let lab = common::NsLab::new("nfsl", tag, &["sw", "h1", "h2", "h3"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.veth("p3", "sw", "eth0", "h3");
    for h in ["h1", "h2", "h3"] {
        lab.must(h, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
    }
    lab
}

/// The daemon with bridge br0 over p1-p3 and its `offload` setting.
fn switch_on(lab: &mut common::NsLab, offload: &str) {
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    for p in ["p1", "p2", "p3"] {
        lab.cli(&["add-port", "br0", p])
            .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    }
    lab.cli(&["set", "br0", &format!("offload={offload}")])
        .unwrap();
}

/// One body for both engines: `offload` is the bridge's setting, `engine`
/// the engine the flow must run in.
fn rr_select_sprays_one_flow(tag: &str, offload: &str, engine: &str) {
    if !common::lab_possible() {
        return;
    }
    let mut lab = three_hosts(tag);
    switch_on(&mut lab, offload);
    lab.cli(&[
        "add-group",
        "br0",
        "group_id=1,type=select,selection_method=rr,\
         bucket=actions=mod_tp_src:1001,output:p2,\
         bucket=actions=mod_tp_src:1002,output:p3",
    ])
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    lab.cli(&[
        "add-flow",
        "br0",
        "priority=10,udp,in_port=p1,actions=group:1",
    ])
    .unwrap();
    lab.cli(&["add-flow", "br0", "priority=0,actions=drop"])
        .unwrap();
    let tx = raw_socket(&lab.ns("h1"));
    let rx2 = raw_socket(&lab.ns("h2"));
    let rx3 = raw_socket(&lab.ns("h3"));
    let frame = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(Ipv4Addr::new(198, 18, 8, 1), Ipv4Addr::new(198, 18, 8, 2))
        .udp(40000, 4791)
        .payload(b"one flow, many paths")
        .build();
    for i in 0..N {
        send(&tx, &frame);
        if i == 0 {
            // The first packet installs the flow (and offloads it).
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let ours = |f: &[u8]| udp_src(f).is_some_and(|p| p == 1001 || p == 1002);
    let got2 = capture(&rx2, Duration::from_millis(500), ours);
    let got3 = capture(&rx3, Duration::from_millis(200), ours);
    let (n2, n3) = (got2.len(), got3.len());
    eprintln!("select_lab {engine}: {N} packets of one flow -> p2 {n2}, p3 {n3}");
    assert_eq!(n2 + n3, N, "every packet arrives once");
    assert!(got2.iter().all(|(_, f)| udp_src(f) == Some(1001)));
    assert!(got3.iter().all(|(_, f)| udp_src(f) == Some(1002)));
    // Round robin: even shares (the kernel's rotation is per CPU, and the
    // first packet went through userspace, so not exactly N/2 each).
    for n in [n2, n3] {
        assert!(n >= N * 2 / 5, "p2 {n2}, p3 {n3}: not sprayed evenly");
    }
    let flows = lab.cli(&["--json", "dump-dp-flows", "br0"]).unwrap();
    let flows: Vec<Value> = serde_json::from_str(&flows).unwrap();
    let f = flows
        .iter()
        .find(|f| {
            f["actions"]
                .as_str()
                .unwrap_or("")
                .starts_with("select(rr,g=1,")
        })
        .unwrap_or_else(|| panic!("no select flow: {flows:#?}"));
    let m = f["match"].as_str().unwrap();
    // No hash over the 5-tuple widens the megaflow (the buckets' port
    // rewrite reads tp_src, nothing reads the rest).
    for field in ["nw_src", "nw_dst", "tp_dst"] {
        assert!(!m.contains(field), "{field} in the megaflow: {m}");
    }
    assert_eq!(f["engine"], engine, "{f}\n{}", lab.daemon_log());
    if engine == "tc" {
        assert!(
            f["kernel_packets"].as_u64().unwrap_or(0) >= (N - 5) as u64,
            "{f}"
        );
    }
    assert_eq!(f["packets"].as_u64(), Some(N as u64), "{f}");
    // The group's bucket counters split the flow as the hosts saw it:
    // the kernel's bucket entries plus the executor's first packet.
    let st = lab.cli(&["--json", "dump-group-stats", "br0"]).unwrap();
    let st: Vec<Value> = serde_json::from_str(&st).unwrap();
    let g = st
        .iter()
        .find(|g| g["group_id"] == 1)
        .unwrap_or_else(|| panic!("no group 1: {st:#?}"));
    let b: Vec<u64> = g["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["packet_count"].as_u64().unwrap())
        .collect();
    eprintln!("select_lab {engine}: bucket counters {b:?}");
    assert_eq!(b.iter().sum::<u64>(), N as u64, "{g}");
    assert_eq!(
        b,
        [n2 as u64, n3 as u64],
        "bucket counters vs arrivals: {g}"
    );
    let bytes: Vec<u64> = g["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["byte_count"].as_u64().unwrap())
        .collect();
    assert_eq!(
        bytes,
        [b[0] * frame.len() as u64, b[1] * frame.len() as u64],
        "{g}"
    );
}

#[test]
fn rr_select_sprays_one_flow_userspace() {
    rr_select_sprays_one_flow("u", "none", "userspace");
}

#[test]
fn rr_select_sprays_one_flow_tc() {
    rr_select_sprays_one_flow("t", "tc", "tc");
}

/// Select groups come and go: more of them over time than the engine has
/// `dp_select` slots (256), each one's flow offloaded in turn, and the
/// last still offloaded and forwarding (a group's slot is freed with its
/// last flow, which the group's deletion removes).
fn select_slots_outlive_their_groups(tag: &str, offload: &str, engine: &str) {
    if !common::lab_possible() {
        return;
    }
    const GROUPS: u32 = 300;
    let mut lab = three_hosts(tag);
    switch_on(&mut lab, offload);
    lab.cli(&["add-flow", "br0", "priority=0,actions=drop"])
        .unwrap();
    let tx = raw_socket(&lab.ns("h1"));
    let frame = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(Ipv4Addr::new(198, 18, 8, 1), Ipv4Addr::new(198, 18, 8, 2))
        .udp(40000, 4791)
        .payload(b"groups come and go")
        .build();
    // The select flow of group `g`, once the datapath has it.
    let select_flow = |g: u32| -> Option<Value> {
        let flows = lab.cli(&["--json", "dump-dp-flows", "br0"]).ok()?;
        let flows: Vec<Value> = serde_json::from_str(&flows).ok()?;
        let head = format!("select(rr,g={g},");
        flows
            .into_iter()
            .find(|f| f["actions"].as_str().unwrap_or("").starts_with(&head))
    };
    for g in 1..=GROUPS {
        lab.cli(&[
            "add-group",
            "br0",
            &format!(
                "group_id={g},type=select,selection_method=rr,\
                 bucket=actions=mod_tp_src:1001,output:p2,\
                 bucket=actions=mod_tp_src:1002,output:p3"
            ),
        ])
        .unwrap_or_else(|e| panic!("group {g}: {e}\n{}", lab.daemon_log()));
        lab.cli(&[
            "add-flow",
            "br0",
            &format!("priority=10,udp,in_port=p1,actions=group:{g}"),
        ])
        .unwrap();
        // Wait for the group's flow to be placed (one packet installs
        // it); in the kernel engine it holds a slot until deleted.
        let mut placed = None;
        for _ in 0..50 {
            send(&tx, &frame);
            std::thread::sleep(Duration::from_millis(10));
            if let Some(f) = select_flow(g) {
                placed = Some(f);
                break;
            }
        }
        let f = placed.unwrap_or_else(|| panic!("group {g}: no select flow\n{}", lab.daemon_log()));
        assert_eq!(f["engine"], engine, "group {g}: {f}");
        if g < GROUPS {
            lab.cli(&["del-groups", "br0", &format!("group_id={g}")])
                .unwrap();
        }
    }
    let rx2 = raw_socket(&lab.ns("h2"));
    let rx3 = raw_socket(&lab.ns("h3"));
    for _ in 0..N {
        send(&tx, &frame);
    }
    let ours = |f: &[u8]| udp_src(f).is_some_and(|p| p == 1001 || p == 1002);
    let got2 = capture(&rx2, Duration::from_millis(500), ours);
    let got3 = capture(&rx3, Duration::from_millis(200), ours);
    eprintln!(
        "select_lab {engine}: group {GROUPS} after {} deleted ones: p2 {}, p3 {}",
        GROUPS - 1,
        got2.len(),
        got3.len()
    );
    assert_eq!(got2.len() + got3.len(), N, "the last group forwards");
    assert!(got2.len() >= N * 2 / 5 && got3.len() >= N * 2 / 5);
    let f = select_flow(GROUPS).expect("the last group's flow");
    assert_eq!(f["engine"], engine, "{f}\n{}", lab.daemon_log());
}

#[test]
fn select_slots_outlive_their_groups_tc() {
    select_slots_outlive_their_groups("gt", "tc", "tc");
}

#[test]
fn select_slots_outlive_their_groups_userspace() {
    select_slots_outlive_their_groups("gu", "none", "userspace");
}

/// splb: path p2 is shaped to 2 Mbit/s (a `tbf` root qdisc on the switch's
/// port) while one flow offers about 16 Mbit/s: the daemon sees p2's
/// backlog and drops and moves most packets to p3 (round robin would give
/// each half). On both engines: the TC engine and the daemon's packet
/// sockets send through a port's qdisc (docs/offload.md).
fn splb_moves_packets_off_a_congested_path(tag: &str, offload: &str, engine: &str) {
    if !common::lab_possible() || !common::have("tc") || !common::have_with("ethtool", "--version")
    {
        common::skipped("needs root, tc and ethtool");
        return;
    }
    let mut lab = three_hosts(tag);
    // GRO on the receivers: the TC engine then reaches them through the
    // switch ports' transmit path (and their qdiscs) instead of entering
    // their namespace directly (`redirect_peer`), which no qdisc sees.
    for h in ["h2", "h3"] {
        lab.must(h, &["ethtool", "-K", "eth0", "gro", "on"]);
    }
    lab.must(
        "sw",
        &[
            "tc", "qdisc", "add", "dev", "p2", "root", "tbf", "rate", "2mbit", "burst", "4k",
            "limit", "100k",
        ],
    );
    switch_on(&mut lab, offload);
    lab.cli(&[
        "add-group",
        "br0",
        "group_id=7,type=select,selection_method=splb,\
         bucket=actions=mod_tp_src:1001,output:p2,\
         bucket=actions=mod_tp_src:1002,output:p3",
    ])
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    lab.cli(&[
        "add-flow",
        "br0",
        "priority=10,udp,in_port=p1,actions=group:7",
    ])
    .unwrap();
    lab.cli(&["add-flow", "br0", "priority=0,actions=drop"])
        .unwrap();
    // The engine notices the receivers' GRO within a manager tick.
    std::thread::sleep(Duration::from_millis(1500));
    let tx = raw_socket(&lab.ns("h1"));
    // Counted by the hosts' interfaces (a capture socket's buffer would
    // overflow): the drop rule leaves them nothing else.
    let rx = |h: &str| -> usize {
        lab.must(h, &["cat", "/sys/class/net/eth0/statistics/rx_packets"])
            .trim()
            .parse()
            .unwrap()
    };
    let (b2, b3) = (rx("h2"), rx("h3"));
    let frame = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(Ipv4Addr::new(198, 18, 8, 1), Ipv4Addr::new(198, 18, 8, 2))
        .udp(40000, 4791)
        .payload(&[0x5a; 1000])
        .build();
    const M: usize = 3000;
    for _ in 0..M {
        send(&tx, &frame);
        std::thread::sleep(Duration::from_micros(500));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (n2, n3) = (rx("h2") - b2, rx("h3") - b3);
    eprintln!(
        "select_lab splb {engine}: {M} packets at ~16 Mbit/s, p2 shaped to 2 Mbit/s: \
         {n3} took p3 ({:.0}%; round robin: 50%), {n2} arrived by p2",
        100.0 * n3 as f64 / M as f64
    );
    assert!(n3 >= M * 7 / 10, "splb kept {n3} of {M} on the free path");
    let flows = lab.cli(&["--json", "dump-dp-flows", "br0"]).unwrap();
    let flows: Vec<Value> = serde_json::from_str(&flows).unwrap();
    let f = flows
        .iter()
        .find(|f| {
            f["actions"]
                .as_str()
                .unwrap_or("")
                .starts_with("select(splb,g=7,")
        })
        .unwrap_or_else(|| panic!("no select flow: {flows:#?}"));
    assert_eq!(f["engine"], engine, "{f}");
}

#[test]
fn splb_moves_packets_off_a_congested_path_tc() {
    splb_moves_packets_off_a_congested_path("st", "tc", "tc");
}

#[test]
fn splb_moves_packets_off_a_congested_path_userspace() {
    splb_moves_packets_off_a_congested_path("su", "none", "userspace");
}
