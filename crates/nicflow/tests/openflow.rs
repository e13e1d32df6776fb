//! OpenFlow 1.3 on the wire (issue 14): real OpenFlow clients drive the
//! daemon. `ovs-ofctl -O OpenFlow13` with its default options against the
//! bridge's listener (`show`, `add-flow`, `add-flows`, `dump-flows` with
//! counters after traffic, `del-flows`, `dump-ports`, `dump-tables`,
//! `add-group`, `dump-groups`, `packet-out`); hostile input on a raw
//! connection (garbage, truncated, oversized, wrong version, no hello)
//! gets OpenFlow errors or a close, and the daemon keeps serving; and
//! `ovs-testcontroller` makes a learning switch between two namespaces
//! through PACKET_IN, PACKET_OUT and FLOW_MOD (secure fail mode: nothing
//! forwards without it).
//!
//! Needs root (namespaces `nfof<pid><tag>-*`, removed by the lab's guard
//! even on failure) and `ovs-ofctl`; the controller test also needs
//! `ovs-testcontroller` (package openvswitch-testcontroller), found on
//! `PATH` or at `$OVS_TESTCONTROLLER`.

mod common;
use common::{have_with, lab_possible_with, skipped, NsLab};
use nicflow_openflow::msg::{self, Hello, Message};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const OF: &str = "tcp:127.0.0.1:16653";

/// A lab: switch namespace with a nicflow daemon, two hosts on p1/p2.
fn lab(tag: &str, offload: &str) -> NsLab {
    let mut lab = NsLab::new("nfof", tag, &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h1", &["ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"]);
    lab.must("h2", &["ip", "addr", "add", "198.18.0.2/24", "dev", "eth0"]);
    lab.must("sw", &["ip", "link", "set", "lo", "up"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["set", "br0", &format!("offload={offload}")])
        .unwrap();
    lab.cli(&["add-port", "br0", "p1"]).unwrap();
    lab.cli(&["add-port", "br0", "p2"]).unwrap();
    lab
}

/// `ovs-ofctl -O OpenFlow13 ARGS` in the switch's namespace.
fn ofctl(lab: &NsLab, args: &[&str]) -> Result<String, String> {
    let mut a = vec!["ovs-ofctl", "-O", "OpenFlow13"];
    a.extend_from_slice(args);
    lab.exec("sw", &a)
}

fn ofctl_must(lab: &NsLab, args: &[&str]) -> String {
    ofctl(lab, args).unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", lab.daemon_log()))
}

/// `n` pings from h1 to h2 (198.18.0.2) all answered.
fn pings(lab: &NsLab, n: u32) -> bool {
    lab.pings("h1", "198.18.0.2", n)
}

/// The `n_packets` of the dump-flows line that contains `what`.
fn n_packets(dump: &str, what: &str) -> u64 {
    let line = dump
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no rule `{what}` in:\n{dump}"));
    line.split("n_packets=")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no n_packets in `{line}`"))
}

/// Root, ip, ping and ovs-ofctl (skipped with the reason otherwise).
/// `(lookup, matched)` of table `t` in `ovs-ofctl dump-tables` output
/// (`  table T:` then `    active=A, lookup=L, matched=M`).
fn table_counts(dump: &str, t: u8) -> (u64, u64) {
    let head = format!("table {t}:");
    let mut lines = dump.lines().skip_while(|l| l.trim() != head);
    lines.next().unwrap_or_else(|| panic!("no {head}: {dump}"));
    let stats = lines.next().unwrap_or_default();
    let num = |k: &str| -> u64 {
        let v = stats
            .split(", ")
            .find_map(|kv| kv.trim().strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} for {head}: {dump}"));
        v.trim().parse().unwrap()
    };
    (num("lookup="), num("matched="))
}

fn tools() -> bool {
    lab_possible_with(&[("ovs-ofctl", "--version")])
}

#[test]
fn ovs_ofctl_drives_the_switch() {
    if !tools() {
        return;
    }
    let mut lab = lab("a", "none");
    lab.cli(&["set-controller", "br0", "ptcp:16653:127.0.0.1"])
        .unwrap();
    let show = ofctl_must(&lab, &["show", OF]);
    assert!(show.contains("OFPT_FEATURES_REPLY (OF1.3)"), "{show}");
    assert!(show.contains("n_tables:255"), "{show}");
    assert!(show.contains("1(p1)") && show.contains("2(p2)"), "{show}");
    let get = lab.cli(&["get-controller", "br0"]).unwrap();
    assert!(get.contains("ptcp:16653:127.0.0.1"), "{get}");
    let shown = lab.cli(&["show"]).unwrap();
    assert!(
        shown.contains("Controller \"ptcp:16653:127.0.0.1\""),
        "{shown}"
    );

    // Replace the default NORMAL rule by two port-to-port rules.
    ofctl_must(&lab, &["del-flows", OF]);
    assert!(!pings(&lab, 1), "forwarded without rules");
    ofctl_must(
        &lab,
        &["add-flow", OF, "priority=10,in_port=1,actions=output:2"],
    );
    let flows = lab.dir().join("flows.txt");
    std::fs::write(
        &flows,
        "priority=10,in_port=2,actions=output:1\ntable=1,priority=5,tcp,tp_dst=22,actions=drop\n",
    )
    .unwrap();
    ofctl_must(&lab, &["add-flows", OF, flows.to_str().unwrap()]);
    assert!(pings(&lab, 3), "ping across the OpenFlow rules failed");
    let dump = ofctl_must(&lab, &["--no-names", "dump-flows", OF]);
    assert!(dump.contains("OFPST_FLOW reply (OF1.3)"), "{dump}");
    assert!(
        dump.contains("priority=10,in_port=1 actions=output:2"),
        "{dump}"
    );
    assert!(dump.contains("table=1, "), "{dump}");
    assert!(n_packets(&dump, "in_port=1 ") >= 3, "{dump}");
    assert!(n_packets(&dump, "in_port=2 ") >= 3, "{dump}");

    // Groups.
    ofctl_must(
        &lab,
        &["add-group", OF, "group_id=1,type=all,bucket=output:2"],
    );
    let groups = ofctl_must(&lab, &["--no-names", "dump-groups", OF]);
    assert!(
        groups.contains("group_id=1,type=all,bucket=actions=output:2"),
        "{groups}"
    );
    ofctl_must(&lab, &["mod-flows", OF, "in_port=1,actions=group:1"]);
    assert!(pings(&lab, 2), "ping through the group failed");
    let stats = ofctl_must(&lab, &["dump-group-stats", OF]);
    assert!(stats.contains("group_id=1"), "{stats}");

    // Meters: a rule through a meter still forwards (the rate is high).
    ofctl_must(
        &lab,
        &["add-meter", OF, "meter=1,kbps,bands=type=drop,rate=100000"],
    );
    let meters = ofctl_must(&lab, &["dump-meters", OF]);
    assert!(meters.contains("meter=1 kbps"), "{meters}");
    assert!(meters.contains("type=drop rate=100000"), "{meters}");
    ofctl_must(
        &lab,
        &["mod-flows", OF, "in_port=2,actions=meter:1,output:1"],
    );
    assert!(pings(&lab, 2), "ping through the meter failed");
    let mstats = ofctl_must(&lab, &["meter-stats", OF]);
    assert!(mstats.contains("meter:1 flow_count:1"), "{mstats}");
    let e = ofctl(&lab, &["add-flow", OF, "actions=meter:7,output:1"]).unwrap_err();
    assert!(e.contains("OFPMMFC_UNKNOWN_METER"), "{e}");

    // Counters per port and table.
    let ports = ofctl_must(&lab, &["dump-ports", OF]);
    assert!(ports.contains("OFPST_PORT reply (OF1.3)"), "{ports}");
    assert!(ports.contains("port  1: rx pkts="), "{ports}");
    let tables = ofctl_must(&lab, &["dump-tables", OF]);
    assert!(tables.contains("table 0:"), "{tables}");
    assert!(tables.contains("active=2"), "{tables}");
    // Every ping crossed table 0 and hit a rule there (other frames the
    // hosts sent, e.g. IPv6 neighbour discovery, hit too: both ports have
    // a rule); nothing goes to table 1.
    let (lookup, matched) = table_counts(&tables, 0);
    assert!(matched >= 12 && lookup >= matched, "{tables}");
    assert_eq!(table_counts(&tables, 1), (0, 0), "{tables}");

    // A refusal comes back as an OpenFlow error.
    let e = ofctl(&lab, &["add-flow", OF, "table=3,actions=goto_table:1"]).unwrap_err();
    assert!(e.contains("OFPBIC_BAD_TABLE_ID"), "{e}");

    // packet-out: an ARP request from the controller flooded to h2.
    let mac1 = lab.must("h1", &["cat", "/sys/class/net/eth0/address"]);
    let arp = format!(
        "ffffffffffff{m}08060001080006040001{m}c6120001000000000000c6120002",
        m = mac1.trim().replace(':', "")
    );
    ofctl_must(&lab, &["packet-out", OF, "CONTROLLER", "output:2", &arp]);

    // Delete one direction: ping stops.
    ofctl_must(&lab, &["del-flows", OF, "in_port=2"]);
    let dump = ofctl_must(&lab, &["--no-names", "dump-flows", OF]);
    assert!(!dump.contains("in_port=2"), "{dump}");
    lab.must("h1", &["ip", "neigh", "flush", "all"]);
    assert!(!pings(&lab, 1), "forwarded after del-flows");

    // The controller setting is in the config file; rules from OpenFlow
    // are written within a tick.
    std::thread::sleep(Duration::from_millis(1500));
    let cfg = std::fs::read_to_string(lab.config_path()).unwrap();
    assert!(cfg.contains("ptcp:16653:127.0.0.1"), "{cfg}");
    assert!(cfg.contains("group:1"), "{cfg}");
    // A restarted daemon listens again and has the controller's rules.
    lab.stop_daemon();
    lab.restart_daemon();
    let dump = ofctl_must(&lab, &["--no-names", "dump-flows", OF]);
    assert!(dump.contains("in_port=1 actions=group:1"), "{dump}");
    lab.cli(&["del-controller", "br0"]).unwrap();
    assert!(ofctl(&lab, &["show", OF]).is_err(), "listener still open");
}

/// Send raw bytes, read what comes back within `wait` (until the peer
/// closes or goes quiet).
fn exchange(s: &mut UnixStream, bytes: &[u8], wait: Duration) -> (Vec<msg::Decoded>, bool) {
    s.write_all(bytes).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    let mut closed = false;
    let mut buf = [0u8; 65536];
    while t0.elapsed() < wait {
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {
                if !got.is_empty() {
                    break;
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut b = &got[..];
    while let Ok((d, n)) = msg::decode(b) {
        out.push(d);
        b = &b[n..];
    }
    (out, closed)
}

fn hello() -> Vec<u8> {
    msg::encode_to_vec(&Message::Hello(Hello::ofp13()), 1).unwrap()
}

fn error_of(d: &msg::Decoded) -> Option<nicflow_openflow::OfpError> {
    match &d.message {
        Message::Error(e) => Some(e.error),
        _ => None,
    }
}

#[test]
fn hostile_input_gets_errors_and_the_daemon_keeps_serving() {
    if !tools() {
        return;
    }
    use nicflow_openflow::error::{BadRequest, HelloFailed};
    use nicflow_openflow::OfpError;
    let lab = lab("b", "none");
    let path = lab.dir().join("of.sock");
    let target = format!("punix:{}", path.display());
    lab.cli(&["set-controller", "br0", &target]).unwrap();
    let unix = format!("unix:{}", path.display());
    let wait = Duration::from_secs(2);

    // Unknown type, truncated FLOW_MOD, oversized FLOW_MOD of zeros:
    // each an error with its xid; the connection keeps working.
    let mut s = UnixStream::connect(&path).unwrap();
    let (r, _) = exchange(&mut s, &hello(), wait);
    assert!(matches!(r[0].message, Message::Hello(_)), "{r:?}");
    let mut bad = vec![4, 200, 0, 8, 0, 0, 0, 9];
    bad.extend_from_slice(&[4, 14, 0, 16, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut big = vec![4, 14, 0xff, 0xff, 0, 0, 0, 11];
    big.resize(65535, 0xee);
    bad.extend_from_slice(&big);
    bad.extend(msg::encode_to_vec(&Message::BarrierRequest, 12).unwrap());
    let (r, closed) = exchange(&mut s, &bad, wait);
    assert!(!closed);
    let xids: Vec<u32> = r.iter().map(|d| d.xid).collect();
    assert_eq!(xids, vec![9, 10, 11, 12], "{r:?}");
    assert_eq!(
        error_of(&r[0]),
        Some(OfpError::BadRequest(BadRequest::BAD_TYPE))
    );
    assert!(
        error_of(&r[1]).is_some() && error_of(&r[2]).is_some(),
        "{r:?}"
    );
    assert_eq!(r[3].message, Message::BarrierReply);
    // A header shorter than a header: framing is lost, error then close.
    let (r, closed) = exchange(&mut s, &[4, 0, 0, 3, 0, 0, 0, 13, 1, 2, 3], wait);
    assert!(closed, "{r:?}");
    assert_eq!(
        error_of(&r[0]),
        Some(OfpError::BadRequest(BadRequest::BAD_LEN))
    );

    // An OpenFlow 1.0-only peer: HELLO_FAILED/INCOMPATIBLE, closed.
    let mut s = UnixStream::connect(&path).unwrap();
    let of10 = msg::encode_to_vec(&Message::Hello(Hello::with_versions(1, &[1])), 5).unwrap();
    let (r, closed) = exchange(&mut s, &of10, wait);
    assert!(closed);
    assert!(r
        .iter()
        .any(|d| error_of(d) == Some(OfpError::HelloFailed(HelloFailed::INCOMPATIBLE))));

    // No hello first: refused and closed.
    let mut s = UnixStream::connect(&path).unwrap();
    let feat = msg::encode_to_vec(&Message::FeaturesRequest, 6).unwrap();
    let (_, closed) = exchange(&mut s, &feat, wait);
    assert!(closed);

    // Random bytes: never a dead daemon.
    let mut seed = 0x1234_5678_9abc_def0u64;
    let noise: Vec<u8> = (0..8192)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    for chunk in noise.chunks(1024) {
        let mut s = UnixStream::connect(&path).unwrap();
        let mut b = hello();
        b.extend_from_slice(chunk);
        let _ = exchange(&mut s, &b, Duration::from_millis(500));
    }
    // A silent connection holds nothing up either.
    let _silent = UnixStream::connect(&path).unwrap();
    let show =
        ofctl(&lab, &["show", &unix]).unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    assert!(show.contains("n_tables:255"), "{show}");
    assert!(pings(&lab, 1), "forwarding stopped");
    lab.cli(&["show"]).unwrap();
}

fn testcontroller() -> Option<String> {
    if let Ok(p) = std::env::var("OVS_TESTCONTROLLER") {
        return Some(p);
    }
    have_with("ovs-testcontroller", "--version").then(|| "ovs-testcontroller".to_string())
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ovs_testcontroller_makes_a_learning_switch() {
    if !tools() {
        return;
    }
    let Some(tc) = testcontroller() else {
        skipped("ovs-testcontroller not installed (package openvswitch-testcontroller; or set OVS_TESTCONTROLLER)");
        return;
    };
    let lab = lab("c", "none");
    assert!(pings(&lab, 1), "standalone bridge did not forward");
    // As `ovs-vsctl set-fail-mode secure` on a bridge without controllers:
    // the rules go (the default NORMAL one too), nothing forwards.
    lab.cli(&["set-fail-mode", "br0", "secure"]).unwrap();
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(dump.trim().is_empty(), "{dump}");
    assert!(!pings(&lab, 1), "secure bridge forwarded without rules");
    let start = || {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(lab.dir().join("tc.log"))
            .unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.ns("sw"),
                &tc,
                "-O",
                "OpenFlow13",
                "ptcp:16654:127.0.0.1",
            ])
            .arg(format!("--unixctl={}", lab.dir().join("tc.ctl").display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting ovs-testcontroller");
        Killed(child)
    };
    let tc_run = start();
    std::thread::sleep(Duration::from_millis(300));
    lab.cli(&["set-controller", "br0", "tcp:127.0.0.1:16654"])
        .unwrap();
    let wait_connected = |want: bool, within: Duration| {
        let t0 = Instant::now();
        while lab
            .cli(&["get-controller", "br0"])
            .unwrap()
            .contains("is_connected: true")
            != want
        {
            if t0.elapsed() > within {
                panic!(
                    "controller connected: {} after {within:?}\n{}\n{}",
                    !want,
                    lab.daemon_log(),
                    std::fs::read_to_string(lab.dir().join("tc.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_connected(true, Duration::from_secs(10));
    let ok = (0..5).any(|_| pings(&lab, 3));
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(
        ok,
        "no ping through the controller's learning switch\nflows:\n{dump}\n{}\n{}",
        lab.daemon_log(),
        std::fs::read_to_string(lab.dir().join("tc.log")).unwrap_or_default()
    );
    // The controller installed its table-miss rule and learned both MACs.
    assert!(dump.contains("actions=CONTROLLER"), "{dump}");
    assert!(dump.contains("actions=output:p2"), "{dump}");
    assert!(dump.contains("actions=output:p1"), "{dump}");

    // The controller goes away and comes back: the switch reconnects
    // (backoff at most 8 s) and forwarding resumes through it.
    drop(tc_run);
    wait_connected(false, Duration::from_secs(5));
    let _tc_again = start();
    wait_connected(true, Duration::from_secs(15));
    assert!((0..5).any(|_| pings(&lab, 2)), "no ping after reconnection");
}

#[test]
fn standalone_fails_open_without_its_controller() {
    if !tools() {
        return;
    }
    let lab = lab("d", "none");
    // A controller that never answers: the rules go (as in OVS), and after
    // three probe intervals (15 s) the bridge forwards as a learning
    // switch again, with a rule that is never written to the config.
    lab.cli(&["set-controller", "br0", "tcp:127.0.0.1:1"])
        .unwrap();
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(dump.trim().is_empty(), "{dump}");
    assert!(!pings(&lab, 1), "forwarded before failing open");
    let t0 = Instant::now();
    while !pings(&lab, 1) {
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "never failed open\n{}",
            lab.daemon_log()
        );
    }
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(dump.contains("actions=NORMAL"), "{dump}");
    std::thread::sleep(Duration::from_millis(1200));
    let cfg = std::fs::read_to_string(lab.config_path()).unwrap();
    assert!(!cfg.contains("NORMAL"), "{cfg}");
    // Secure: the fail-open rule goes at the next tick and stays away.
    lab.cli(&["set-fail-mode", "br0", "secure"]).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(!dump.contains("NORMAL"), "{dump}");
    assert!(!pings(&lab, 1), "secure bridge forwarded");
}

#[test]
fn a_controller_that_does_not_read_costs_bounded_memory() {
    if !tools() {
        return;
    }
    let lab = lab("e", "none");
    let path = lab.dir().join("of.sock");
    lab.cli(&[
        "set-controller",
        "br0",
        &format!("punix:{}", path.display()),
    ])
    .unwrap();
    // Every packet is forwarded and copied to the controller.
    lab.cli(&["del-flows", "br0"]).unwrap();
    lab.cli(&["add-flow", "br0", "priority=0,actions=normal,controller"])
        .unwrap();
    assert!(pings(&lab, 1));
    // A controller that says hello and then never reads.
    let mut stuck = UnixStream::connect(&path).unwrap();
    stuck.write_all(&hello()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = lab.daemon_pid().unwrap();
    let rss0 = common::rss_kib(pid);
    // ~20,000 frames of 1.2 KB: 24 MB of PACKET_INs that cannot be sent.
    lab.must(
        "h1",
        &[
            "ping",
            "-q",
            "-f",
            "-c",
            "10000",
            "-s",
            "1200",
            "-W",
            "1",
            "198.18.0.2",
        ],
    );
    let rss1 = common::rss_kib(pid);
    assert!(
        rss1 < rss0 + 16 * 1024,
        "daemon grew from {rss0} KiB to {rss1} KiB for a controller that does not read"
    );
    let get = lab.cli(&["get-controller", "br0"]).unwrap();
    let dropped: u64 = get
        .lines()
        .find_map(|l| l.strip_prefix("asynchronous messages dropped (slow controllers): "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no drops reported:\n{get}"));
    assert!(dropped > 1000, "{get}");
    // Another client is still served, forwarding goes on.
    let show = ofctl(&lab, &["show", &format!("unix:{}", path.display())])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    assert!(show.contains("n_tables:255"), "{show}");
    assert!(pings(&lab, 2));
    drop(stuck);
}
