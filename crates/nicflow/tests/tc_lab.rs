//! The TC engine wired into the switch with every default: two plain hosts
//! (veths at the kernel's default offloads, no port options, no offload
//! setting) on a lab switch. TCP and UDP flows live in `engine:tc` and the
//! daemon sees only their first packets; offload on and off give identical
//! frames at the receiving host; the switch's interfaces keep their
//! offloads, and deleting a port leaves no program or upcall device behind.
//!
//! Root only. Each test has its own lab (`o<pid><tag>`), torn down by a
//! guard even when an assertion fails.

mod common;

use common::oflab::*;
use nicflow::control::proto::Request;
use serde_json::Value;

/// `ethtool -k` of the switch's end of link `n` (p<n>), feature -> on.
fn features(lab: &Lab, n: usize) -> std::collections::BTreeMap<String, bool> {
    let iface = lab.switch_iface(n);
    let ns = lab.switch_ns();
    let out = common::must(&["ip", "netns", "exec", &ns, "ethtool", "-k", &iface]);
    out.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(": ")?;
            Some((k.trim().to_string(), v.starts_with("on")))
        })
        .collect()
}

/// Names of the programs on `iface`'s tcx ingress hook, in order, read in
/// namespace `ns`.
fn tcx_ingress(ns: &str, iface: &str) -> Vec<String> {
    let (ns, iface) = (ns.to_string(), iface.to_string());
    std::thread::spawn(move || {
        let path = format!("/run/netns/{ns}");
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: setns on this thread only, with a namespace fd we own.
        let r = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
        assert_eq!(r, 0);
        let (_, progs) =
            aya::programs::SchedClassifier::query_tcx(&iface, aya::programs::TcAttachType::Ingress)
                .expect("query tcx");
        progs
            .iter()
            .map(|p| p.name_as_str().unwrap_or("?").to_string())
            .collect()
    })
    .join()
    .unwrap()
}

fn tc_flows(flows: &[Value], proto: &str) -> Vec<Value> {
    flows
        .iter()
        .filter(|f| f["match"].as_str().unwrap_or("").starts_with(proto))
        .cloned()
        .collect()
}

#[test]
fn plain_hosts_get_tcp_and_udp_in_the_tc_engine() {
    if !privileged() || !common::have("iperf3") || !common::have_with("ethtool", "--version") {
        common::skipped("needs root, iperf3 and ethtool");
        return;
    }
    // Per-5-tuple flows, so TCP and UDP each get flows of their own.
    let lab = Lab::up(
        "t",
        "",
        &[
            "priority=10,tcp,actions=normal",
            "priority=10,udp,actions=normal",
            "priority=0,actions=normal",
        ],
    );
    let before = features(&lab, 1);
    let progs = tcx_ingress(&lab.switch_ns(), &lab.switch_iface(1));
    assert_eq!(
        progs,
        ["tc_dp", "tc_upcall"],
        "the engine's program runs first"
    );
    let out = lab.exec("t1", &["ping", "-c", "3", "-i", "0.2", "198.18.0.2"]);
    assert!(out.contains(" 0% packet loss"), "{out}");
    lab.exec("t2", &["iperf3", "-s", "-D", "-1"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let rx_before = lab.port_rx("p1") + lab.port_rx("p2");
    let out = lab.exec("t1", &["iperf3", "-c", "198.18.0.2", "-t", "2", "-J"]);
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let gbps = j["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap()
        / 1e9;
    let userspace = lab.port_rx("p1") + lab.port_rx("p2") - rx_before;
    let st = lab.stats();
    let tc_packets = st["engines"]["tc_packets"].as_u64().unwrap();
    eprintln!(
        "tc_lab: iperf3 TCP {gbps:.1} Gbit/s through the default switch; \
         {tc_packets} packets in the TC engine, {userspace} frames seen by the daemon"
    );
    assert!(gbps > 1.0, "{gbps} Gbit/s");
    // The daemon saw the handshake and little else (a TCP flow's first
    // packet each way, ARP refreshes); the kernel the rest.
    assert!(userspace < 50, "userspace received {userspace} frames");
    assert!(tc_packets > 10_000, "{st}");
    let flows = lab.dp_flows();
    let tcp = tc_flows(&flows, "tcp,");
    assert!(tcp.len() >= 2, "{flows:#?}");
    for f in &tcp {
        assert_eq!(f["engine"], "tc", "{f}");
        assert!(f["not_offloaded"].is_null(), "{f}");
    }
    // UDP too (the XDP engine refuses UDP from such hosts: partial sums).
    lab.exec("t2", &["iperf3", "-s", "-D", "-1"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = lab.exec(
        "t1",
        &["iperf3", "-c", "198.18.0.2", "-u", "-b", "200M", "-t", "1"],
    );
    assert!(out.contains("receiver"), "{out}");
    let flows = lab.dp_flows();
    let udp = tc_flows(&flows, "udp,");
    assert!(!udp.is_empty(), "{flows:#?}");
    assert!(
        udp.iter()
            .any(|f| f["engine"] == "tc" && f["kernel_packets"].as_u64().unwrap_or(0) > 1000),
        "{udp:#?}"
    );
    // The interface's offloads are as the kernel made them.
    assert_eq!(features(&lab, 1), before, "switch port features changed");
    for k in [
        "tcp-segmentation-offload",
        "tx-checksumming",
        "scatter-gather",
    ] {
        assert_eq!(before.get(k), Some(&true), "{k} on a default veth");
    }

    // del-port: the engine's and the port's programs leave the interface,
    // the upcall pair goes away, the features stay.
    let iface = lab.switch_iface(1);
    let ns = lab.switch_ns();
    let ifindex = common::must(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "cat",
        &format!("/sys/class/net/{iface}/ifindex"),
    ]);
    let upcall = format!("nfu{}a", ifindex.trim());
    let links = common::must(&["ip", "netns", "exec", &ns, "ip", "-o", "link"]);
    assert!(links.contains(&upcall), "{links}");
    lab.req(Request::DelPort {
        bridge: "br0".into(),
        name: "p1".into(),
    });
    let links = common::must(&["ip", "netns", "exec", &ns, "ip", "-o", "link"]);
    assert!(!links.contains(&upcall), "upcall pair left behind: {links}");
    let progs = tcx_ingress(&ns, &iface);
    assert!(progs.is_empty(), "programs left on {iface}: {progs:?}");
    assert_eq!(features(&lab, 1), before);
}

#[test]
fn offload_tc_and_none_give_identical_frames() {
    if !privileged() {
        return;
    }
    // Raw frames with rewrites the TC engine runs, a VLAN push among them
    // (the kernel's helper; BPF_PROG_TEST_RUN cannot show its result).
    let lab = Lab::up("e", "", REWRITE_FLOWS);
    identical_frames_across_modes(&lab, "e", &["auto", "none", "tc"], "tc");
}

/// A bridge mixing a TC port with an AF_XDP port (`offload = "auto"` runs
/// both engines): flows from the TC port to the AF_XDP port are finished by
/// the TC engine (a redirect to the interface's egress); the reverse stays
/// in userspace with its reason (an XDP redirect into a veth whose peer
/// runs no NAPI is not delivered), and traffic flows both ways.
#[test]
fn mixed_bridge_tc_to_afxdp_stays_in_the_kernel() {
    if !common::lab_possible() {
        return;
    }
    let mut lab = common::NsLab::new("nftm", "", &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h1", &["ip", "addr", "add", "198.18.7.1/24", "dev", "eth0"]);
    lab.must("h2", &["ip", "addr", "add", "198.18.7.2/24", "dev", "eth0"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    let out = lab.cli(&["add-port", "br0", "p1"]).unwrap();
    assert!(out.contains("tc"), "{out}");
    let out = lab
        .cli(&["add-port", "br0", "p2", "--type", "afxdp"])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    assert!(out.contains("afxdp") || out.contains("afpacket"), "{out}");
    lab.ping("h1", "198.18.7.2")
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    lab.must("h1", &["ping", "-c", "20", "-i", "0.02", "198.18.7.2"]);
    let flows = lab.cli(&["--json", "dump-dp-flows", "br0"]).unwrap();
    let flows: Vec<Value> = serde_json::from_str(&flows).unwrap();
    let from = |p: &str| -> Vec<&Value> {
        flows
            .iter()
            .filter(|f| {
                let m = f["match"].as_str().unwrap_or("");
                m.contains(&format!("in_port={p}"))
                    && m.contains("dl_dst=")
                    && !m.contains("dl_dst=ff:ff")
                    && !m.contains("dl_dst=33:33")
            })
            .collect()
    };
    let p1 = from("p1");
    assert!(!p1.is_empty(), "{flows:#?}");
    for f in &p1 {
        assert_eq!(f["engine"], "tc", "{f}");
    }
    assert!(
        p1.iter()
            .any(|f| f["kernel_packets"].as_u64().unwrap_or(0) >= 15),
        "{p1:#?}"
    );
    for f in from("p2") {
        assert_eq!(f["engine"], "userspace", "{f}");
        assert!(f["not_offloaded"].as_str().is_some(), "{f}");
    }
}

/// `bpf_redirect_peer` enters the receiving namespace after the point a
/// veth runs native XDP, so a host whose eth0 runs NAPI (an XDP program, an
/// AF_XDP application, or GRO) is reached through the veth's transmit path
/// instead, as the Linux bridge would reach it; the engine follows the
/// change within a manager tick, and traffic flows either way.
#[test]
fn peer_with_napi_is_reached_through_the_transmit_path() {
    if !privileged() || !common::have_with("ethtool", "--version") {
        common::skipped("needs root and ethtool");
        return;
    }
    let lab = Lab::up("n", "", &["priority=0,actions=normal"]);
    let peer_of = |lab: &Lab| -> std::collections::BTreeMap<String, bool> {
        lab.stats()["offload"]["tc"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["redirect_peer"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(peer_of(&lab).get("p2"), Some(&true), "{}", lab.stats());
    lab.exec("n2", &["ethtool", "-K", "eth0", "gro", "on"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while peer_of(&lab).get("p2") != Some(&false) {
        assert!(std::time::Instant::now() < deadline, "{}", lab.stats());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(peer_of(&lab).get("p1"), Some(&true));
    let out = lab.exec("n1", &["ping", "-c", "5", "-i", "0.1", "198.18.0.2"]);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let flows = lab.dp_flows();
    assert!(
        flows.iter().any(|f| f["engine"] == "tc"
            && f["match"].as_str().unwrap_or("").contains("in_port=p1")
            && f["kernel_packets"].as_u64().unwrap_or(0) >= 3),
        "{flows:#?}"
    );
}

/// A root qdisc on a port (here tbf) shapes everything the switch sends out
/// of it: the TC engine reaches the port through its transmit path, not
/// with bpf_redirect_peer into the peer, while the qdisc is there (and with
/// redirect_peer again once it is gone), and the daemon's own frames (the
/// first packet of each flow) leave through it too. The qdisc's own
/// counters prove every frame went through it.
#[test]
fn shaped_port_is_reached_through_its_qdisc() {
    if !privileged() || !common::have_with("tc", "-V") {
        common::skipped("needs root and tc");
        return;
    }
    let lab = Lab::up("q", "", &["priority=0,actions=normal"]);
    let peer_of = |lab: &Lab| -> Option<bool> {
        lab.stats()["offload"]["tc"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "p2")
            .map(|p| p["redirect_peer"].as_bool().unwrap())
    };
    let wait_for = |want: bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while peer_of(&lab) != Some(want) {
            assert!(std::time::Instant::now() < deadline, "{}", lab.stats());
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    wait_for(true);
    let (ns, iface) = (lab.switch_ns(), lab.switch_iface(2));
    let tc = |args: &[&str]| {
        let mut argv = vec!["ip", "netns", "exec", &ns, "tc"];
        argv.extend_from_slice(args);
        common::must(&argv)
    };
    tc(&[
        "qdisc", "add", "dev", &iface, "root", "tbf", "rate", "1gbit", "burst", "256k", "latency",
        "50ms",
    ]);
    wait_for(false);
    let sent = || -> u64 {
        let out = tc(&["-s", "-j", "qdisc", "show", "dev", &iface, "root"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v.as_array()
            .and_then(|a| a.iter().find(|q| q["kind"] == "tbf"))
            .map(|q| q["packets"].as_u64().unwrap_or(0))
            .unwrap_or(0)
    };
    let before = sent();
    let out = lab.exec("q1", &["ping", "-c", "8", "-i", "0.1", "198.18.0.2"]);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let flows = lab.dp_flows();
    let kernel = flows
        .iter()
        .filter(|f| f["engine"] == "tc" && f["match"].as_str().unwrap_or("").contains("in_port=p1"))
        .map(|f| f["kernel_packets"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    assert!(kernel >= 4, "{flows:#?}");
    // Every echo request left through p2, the offloaded ones included.
    assert!(sent() - before >= 8, "tbf sent {} of 8", sent() - before);
    tc(&["qdisc", "del", "dev", &iface, "root"]);
    wait_for(true);
}
