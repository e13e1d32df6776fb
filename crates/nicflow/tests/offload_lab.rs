//! The XDP offload engine wired into the switch, over the namespace lab:
//! a flow's first packet goes to userspace and the rest stay in the
//! kernel; the same traffic with offload on and off gives byte-identical
//! frames at the receiving host; a rule change while traffic runs takes
//! effect in the kernel in the same call; a full flow map degrades to
//! userspace handling without losing traffic.
//!
//! Root only (prints "skipping: needs root" otherwise). Every test has its
//! own lab (`o<pid><tag>`) and a guard that runs `lab down` even when an
//! assertion fails. Frames are sent and captured with raw AF_PACKET
//! sockets opened from a thread that entered the host's namespace, so the
//! frames are exactly the ones built here (complete checksums) and exactly
//! the ones the receiving veth delivered.

mod common;

use common::oflab::*;
use nicflow::control::proto::Request;
use nicflow_packet::builder::FrameBuilder;
use serde_json::Value;
use std::time::{Duration, Instant};

/// These tests are about the XDP engine, which is not the default
/// (`offload = "auto"` runs TC ports in the TC engine; see tc_lab.rs).
const XDP: &str = r#"offload = "xdp""#;

#[test]
fn first_packet_goes_to_userspace_later_ones_stay_in_the_kernel() {
    if !privileged() {
        return;
    }
    let lab = Lab::up("f", XDP, &["priority=0,actions=normal"]);
    // Learn both MACs (ARP), install the ICMP flows.
    let out = lab.exec("f1", &["ping", "-c", "2", "-i", "0.2", "198.18.0.2"]);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let rx1 = lab.port_rx("p1");
    let rx2 = lab.port_rx("p2");
    let out = lab.exec("f1", &["ping", "-c", "30", "-i", "0.02", "198.18.0.2"]);
    assert!(out.contains("30 received"), "{out}");
    // Userspace saw (almost) none of it: the ICMP flows run in XDP. A
    // stray ARP refresh may still go through userspace.
    let d1 = lab.port_rx("p1") - rx1;
    let d2 = lab.port_rx("p2") - rx2;
    assert!(d1 <= 2 && d2 <= 2, "userspace rx grew by {d1}/{d2}");
    let flows = lab.dp_flows();
    let icmp: Vec<&Value> = flows
        .iter()
        .filter(|f| f["match"].as_str().unwrap().starts_with("icmp,"))
        .collect();
    assert_eq!(icmp.len(), 2, "{flows:#?}");
    for f in &icmp {
        assert_eq!(f["engine"], "xdp", "{f}");
        assert!(f["kernel_packets"].as_u64().unwrap() >= 30, "{f}");
        // The first packet of each flow went through userspace.
        assert_eq!(
            f["packets"].as_u64().unwrap() - f["kernel_packets"].as_u64().unwrap(),
            1,
            "{f}"
        );
    }
    let st = lab.stats();
    assert!(st["engines"]["xdp_packets"].as_u64().unwrap() >= 60, "{st}");
    // TCP/UDP from a host at default offloads stays in userspace, with a
    // reason, and works.
    lab.exec("f2", &["iperf3", "-s", "-D", "-1"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = lab.exec("f1", &["iperf3", "-c", "198.18.0.2", "-t", "1"]);
    assert!(out.contains("receiver"), "{out}");
    let flows = lab.dp_flows();
    let tcp: Vec<&Value> = flows
        .iter()
        .filter(|f| f["match"].as_str().unwrap().starts_with("tcp,"))
        .collect();
    assert!(!tcp.is_empty(), "{flows:#?}");
    for f in tcp {
        assert_eq!(f["engine"], "userspace", "{f}");
        assert_eq!(f["not_offloaded"], "csum:partial-possible", "{f}");
    }
}

#[test]
fn offload_on_and_off_give_identical_frames() {
    if !privileged() {
        return;
    }
    // The sender is a raw socket with complete checksums: declare it, so
    // UDP and TCP are offloaded too.
    let lab = Lab::up(
        "d",
        &format!("{XDP}\nport_options = {{ csum_complete = \"true\" }}"),
        REWRITE_FLOWS,
    );
    identical_frames_across_modes(&lab, "d", &["xdp", "none", "xdp"], "xdp");
}

#[test]
fn rule_change_while_traffic_runs_updates_kernel_flows_at_once() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(
        "r",
        &format!("{XDP}\nport_options = {{ csum_complete = \"true\" }}"),
        &[
            "priority=10,udp,in_port=p1,actions=output:p2",
            "priority=0,actions=drop",
        ],
    );
    let (m1, m2) = (lab.mac("r1"), lab.mac("r2"));
    let tx = raw_socket(&lab.ns("r1"));
    let rx = raw_socket(&lab.ns("r2"));
    let frame = move |seq: u32| {
        FrameBuilder::new(m1, m2)
            .ipv4(v4(1), v4(2))
            .udp(40000, 7000)
            .payload(format!("nfo-diff seq {seq:08}").as_bytes())
            .build()
    };
    // Traffic from a sender thread, 1 frame per ms, while rules change.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let txfd = tx.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut seq = 0u32;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            send(&txfd, &frame(seq));
            seq += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        seq
    });
    let got = capture(&rx, Duration::from_millis(500), is_test_frame);
    assert!(got.len() > 100, "traffic before the change: {}", got.len());
    let f = lab.dp_flows();
    assert!(f.iter().any(|f| f["engine"] == "xdp"), "{f:#?}");

    // Drop it: once add-flow returns, nothing more arrives.
    lab.req(Request::AddFlow {
        bridge: "br0".into(),
        flow: "priority=20,udp,in_port=p1,actions=drop".into(),
    });
    let t_drop = Instant::now();
    let got = capture(&rx, Duration::from_millis(500), is_test_frame);
    // Frames already past the program (in the veth's queue) may land just
    // after; none later than that.
    let late: Vec<_> = got
        .iter()
        .filter(|(t, _)| t.duration_since(t_drop) > Duration::from_millis(20))
        .collect();
    assert!(
        late.is_empty(),
        "{} frames followed the old rule",
        late.len()
    );
    let f = lab.dp_flows();
    let udp: Vec<&Value> = f
        .iter()
        .filter(|f| f["match"].as_str().unwrap().starts_with("udp,"))
        .collect();
    assert!(!udp.is_empty(), "{f:#?}");
    for x in &udp {
        assert_eq!(x["actions"], "drop", "{x}");
        assert_eq!(x["engine"], "xdp", "drops are offloaded too: {x}");
    }

    // Rewrite instead: every frame after the change carries the new port.
    lab.req(Request::AddFlow {
        bridge: "br0".into(),
        flow: "priority=30,udp,in_port=p1,actions=mod_tp_dst:9999,output:p2".into(),
    });
    let t_mod = Instant::now();
    let got = capture(&rx, Duration::from_millis(500), is_test_frame);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = sender.join().unwrap();
    assert!(
        got.len() > 100,
        "traffic after the rewrite rule: {}",
        got.len()
    );
    for (t, f) in &got {
        if t.duration_since(t_mod) > Duration::from_millis(20) {
            assert_eq!(&f[36..38], &9999u16.to_be_bytes(), "stale decision");
        }
    }
    let st = lab.stats();
    assert!(
        st["engines"]["xdp_packets"].as_u64().unwrap() > (sent / 2) as u64,
        "{st}"
    );
}

#[test]
fn full_flow_map_degrades_to_userspace() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(
        "m",
        &format!("{XDP}\noffload_options = {{ max_flows = 2 }}"),
        &["priority=0,actions=normal"],
    );
    let out = lab.exec("m1", &["ping", "-c", "20", "-i", "0.02", "198.18.0.2"]);
    assert!(out.contains("20 received"), "{out}");
    let flows = lab.dp_flows();
    let xdp = flows.iter().filter(|f| f["engine"] == "xdp").count();
    let full = flows
        .iter()
        .filter(|f| f["not_offloaded"] == "flow-map-full")
        .count();
    assert_eq!(xdp, 2, "{flows:#?}");
    assert!(full >= 1, "{flows:#?}");
    let st = lab.stats();
    assert_eq!(
        st["offload"]["not_offloaded"]["flow-map-full"], full,
        "{st}"
    );
    assert_eq!(st["datapath"]["drops"], serde_json::json!({}), "{st}");
}
