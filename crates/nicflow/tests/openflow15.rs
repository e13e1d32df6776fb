//! OpenFlow 1.5 on the wire (issue 30): what ovn-controller (which offers
//! 1.5 only) needs from the switch's sessions. `ovs-ofctl -O OpenFlow15`
//! against the daemon: `show`, flows, groups with bucket ids and
//! `selection_method=dp_hash`, `insert-buckets`/`remove-buckets`, meters,
//! port counters, `packet-out` with pipeline fields; `protocols=` choosing
//! the versions offered; bundles (`--bundle`, and a raw client for a
//! failing bundle that must leave the tables as they were).
//!
//! Needs root (namespaces `nfo15<pid><tag>-*`, removed by the lab's guard
//! even on failure) and `ovs-ofctl`.

mod common;
use common::{lab_possible_with, NsLab};
use nicflow_openflow::msg::{self, Hello, Message};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const OF: &str = "tcp:127.0.0.1:16653";

/// A lab: switch namespace with a nicflow daemon, two hosts on p1/p2, an
/// OpenFlow listener on 127.0.0.1:16653 in the switch's namespace.
fn lab(tag: &str) -> NsLab {
    let mut lab = NsLab::new("nfo15", tag, &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h1", &["ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"]);
    lab.must("h2", &["ip", "addr", "add", "198.18.0.2/24", "dev", "eth0"]);
    lab.must("sw", &["ip", "link", "set", "lo", "up"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["set", "br0", "offload=none"]).unwrap();
    lab.cli(&["add-port", "br0", "p1"]).unwrap();
    lab.cli(&["add-port", "br0", "p2"]).unwrap();
    lab.cli(&["set-controller", "br0", "ptcp:16653:127.0.0.1"])
        .unwrap();
    lab
}

/// `ovs-ofctl -O VERSION ARGS` in the switch's namespace.
fn ofctl_v(lab: &NsLab, version: &str, args: &[&str]) -> Result<String, String> {
    let mut a = vec!["ovs-ofctl", "-O", version];
    a.extend_from_slice(args);
    lab.exec("sw", &a)
}

fn of15(lab: &NsLab, args: &[&str]) -> Result<String, String> {
    ofctl_v(lab, "OpenFlow15", args)
}

fn of15_must(lab: &NsLab, args: &[&str]) -> String {
    of15(lab, args).unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", lab.daemon_log()))
}

fn pings(lab: &NsLab, n: u32) -> bool {
    lab.pings("h1", "198.18.0.2", n)
}

fn tools() -> bool {
    lab_possible_with(&[("ovs-ofctl", "--version")])
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

/// An ARP request from h1 (198.18.0.1) for 198.18.0.2, as hex.
fn arp_from_h1(lab: &NsLab) -> String {
    let mac1 = lab.must("h1", &["cat", "/sys/class/net/eth0/address"]);
    format!(
        "ffffffffffff{m}08060001080006040001{m}c6120001000000000000c6120002",
        m = mac1.trim().replace(':', "")
    )
}

/// Did h2 learn h1's address (it received the ARP request)?
fn h2_knows_h1(lab: &NsLab) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        let n = lab.must("h2", &["ip", "neigh", "show", "198.18.0.1"]);
        if n.contains("lladdr") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn ovs_ofctl_15_drives_the_switch() {
    if !tools() {
        return;
    }
    let lab = lab("a");
    let show = of15_must(&lab, &["show", OF]);
    assert!(show.contains("OFPT_FEATURES_REPLY (OF1.5)"), "{show}");
    assert!(show.contains("1(p1)") && show.contains("2(p2)"), "{show}");
    // 1.3 still works on the same listener.
    let show13 = ofctl_v(&lab, "OpenFlow13", &["show", OF]).unwrap();
    assert!(show13.contains("OFPT_FEATURES_REPLY (OF1.3)"), "{show13}");

    // Flows.
    of15_must(&lab, &["del-flows", OF]);
    assert!(!pings(&lab, 1), "forwarded without rules");
    of15_must(
        &lab,
        &["add-flow", OF, "priority=10,in_port=1,actions=output:2"],
    );
    of15_must(
        &lab,
        &["add-flow", OF, "priority=10,in_port=2,actions=output:1"],
    );
    assert!(pings(&lab, 3), "ping across 1.5 rules failed");
    let dump = of15_must(&lab, &["--no-names", "dump-flows", OF]);
    assert!(dump.contains("OFPST_FLOW reply (OF1.5)"), "{dump}");
    assert!(n_packets(&dump, "in_port=1 ") >= 3, "{dump}");
    assert!(
        dump.contains("priority=10,in_port=1 actions=output:2"),
        "{dump}"
    );

    // Groups: 1.5 bucket ids and OVN's selection method.
    of15_must(
        &lab,
        &[
            "add-group",
            OF,
            "group_id=1,type=select,selection_method=dp_hash,\
             bucket=bucket_id:5,weight:100,actions=output:2",
        ],
    );
    of15_must(
        &lab,
        &[
            "insert-buckets",
            OF,
            "group_id=1,command_bucket_id=last,bucket=bucket_id:7,actions=output:2",
        ],
    );
    let groups = of15_must(&lab, &["--no-names", "dump-groups", OF]);
    assert!(
        groups.contains("OFPST_GROUP_DESC reply (OF1.5)"),
        "{groups}"
    );
    assert!(
        groups.contains("group_id=1,type=select,selection_method=dp_hash"),
        "{groups}"
    );
    assert!(
        groups.contains("bucket=bucket_id:5,weight:100,actions=output:2")
            && groups.contains("bucket=bucket_id:7,"),
        "{groups}"
    );
    // A bucket id already in the group.
    let e = of15(
        &lab,
        &[
            "insert-buckets",
            OF,
            "group_id=1,command_bucket_id=first,bucket=bucket_id:5,actions=output:1",
        ],
    )
    .unwrap_err();
    assert!(e.contains("OFPGMFC_BUCKET_EXISTS"), "{e}");
    of15_must(
        &lab,
        &["remove-buckets", OF, "group_id=1,command_bucket_id=7"],
    );
    let groups = of15_must(&lab, &["--no-names", "dump-groups", OF]);
    assert!(!groups.contains("bucket_id:7"), "{groups}");
    let e = of15(
        &lab,
        &["remove-buckets", OF, "group_id=1,command_bucket_id=9"],
    )
    .unwrap_err();
    assert!(e.contains("OFPGMFC_UNKNOWN_BUCKET"), "{e}");
    of15_must(&lab, &["mod-flows", OF, "in_port=1,actions=group:1"]);
    assert!(pings(&lab, 2), "ping through the 1.5 group failed");
    // nicflow's per-packet methods travel in the same property: ovs-ofctl
    // sends them (the switch keeps them), though its own decoder refuses
    // names other than hash/dp_hash in a GROUP_DESC reply, so they are
    // read back with nicflow's CLI here (docs/openflow.md).
    for m in ["rr", "wrr", "splb"] {
        of15_must(
            &lab,
            &[
                "add-group",
                OF,
                &format!(
                    "group_id=2,type=select,selection_method={m},\
                     bucket=bucket_id:0,weight:3,actions=output:2"
                ),
            ],
        );
        let groups = lab.cli(&["dump-groups", "br0"]).unwrap();
        assert!(
            groups.contains(&format!("group_id=2,type=select,selection_method={m}")),
            "{groups}"
        );
        of15_must(&lab, &["del-groups", OF, "group_id=2"]);
    }
    let groups = of15_must(&lab, &["--no-names", "dump-groups", OF]);
    assert!(
        groups.contains("selection_method=dp_hash") && !groups.contains("group_id=2"),
        "{groups}"
    );

    // Meters.
    of15_must(
        &lab,
        &["add-meter", OF, "meter=1,kbps,bands=type=drop,rate=100000"],
    );
    let meters = of15_must(&lab, &["dump-meters", OF]);
    assert!(meters.contains("meter=1 kbps"), "{meters}");
    of15_must(
        &lab,
        &["mod-flows", OF, "in_port=2,actions=meter:1,output:1"],
    );
    assert!(pings(&lab, 2), "ping through the meter failed");
    let mstats = of15_must(&lab, &["meter-stats", OF]);
    assert!(mstats.contains("meter:1 flow_count:1"), "{mstats}");

    // Port counters.
    let ports = of15_must(&lab, &["dump-ports", OF]);
    assert!(ports.contains("OFPST_PORT reply (OF1.5)"), "{ports}");
    assert!(ports.contains("port  1: rx pkts="), "{ports}");

    // packet-out with a pipeline field in its 1.5 match: reg0=5 selects
    // the rule in table 0 that sends the frame to h2.
    of15_must(
        &lab,
        &["add-flow", OF, "priority=20,reg0=5,actions=output:2"],
    );
    lab.must("h2", &["ip", "neigh", "flush", "all"]);
    let arp = arp_from_h1(&lab);
    of15_must(
        &lab,
        &[
            "packet-out",
            OF,
            &format!("in_port=controller,reg0=4,packet={arp},actions=table"),
        ],
    );
    assert!(!h2_knows_h1(&lab), "reg0=4 matched the reg0=5 rule");
    of15_must(
        &lab,
        &[
            "packet-out",
            OF,
            &format!("in_port=controller,reg0=5,packet={arp},actions=table"),
        ],
    );
    assert!(h2_knows_h1(&lab), "the packet-out's reg0 was not used");
    let dump = of15_must(&lab, &["--no-names", "dump-flows", OF]);
    assert!(dump.contains("reg0=0x5"), "{dump}");
}

#[test]
fn protocols_choose_the_versions_offered() {
    if !tools() {
        return;
    }
    let lab = lab("p");
    lab.cli(&["set", "br0", "protocols=OpenFlow13"]).unwrap();
    let e = of15(&lab, &["show", OF]).unwrap_err();
    assert!(e.contains("version negotiation failed"), "{e}");
    ofctl_v(&lab, "OpenFlow13", &["show", OF]).unwrap();
    lab.cli(&["set", "br0", "protocols=OpenFlow15"]).unwrap();
    let e = ofctl_v(&lab, "OpenFlow13", &["show", OF]).unwrap_err();
    assert!(e.contains("version negotiation failed"), "{e}");
    of15_must(&lab, &["show", OF]);
    // Both (OVS's list syntax; versions nicflow does not speak are kept
    // in the list but not offered).
    lab.cli(&["set", "br0", "protocols=OpenFlow10,OpenFlow13,OpenFlow15"])
        .unwrap();
    of15_must(&lab, &["show", OF]);
    ofctl_v(&lab, "OpenFlow13", &["show", OF]).unwrap();
    let e = lab
        .cli(&["set", "br0", "protocols=OpenFlow10"])
        .unwrap_err();
    assert!(e.contains("OpenFlow13 and OpenFlow15"), "{e}");
    // Kept across a restart.
    lab.cli(&["set", "br0", "protocols=OpenFlow13"]).unwrap();
    let mut lab = lab;
    lab.stop_daemon();
    lab.restart_daemon();
    ofctl_v(&lab, "OpenFlow13", &["show", OF]).unwrap();
    assert!(of15(&lab, &["show", OF]).is_err());
}

/// Send raw bytes, read what comes back within `wait` (until the peer
/// closes or goes quiet).
fn exchange(s: &mut UnixStream, bytes: &[u8], wait: Duration) -> Vec<msg::Decoded> {
    s.write_all(bytes).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    let mut buf = [0u8; 65536];
    while t0.elapsed() < wait {
        match s.read(&mut buf) {
            Ok(0) => break,
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
    out
}

/// A raw 1.5 session on the bridge's `punix:` listener.
fn raw15(lab: &NsLab) -> UnixStream {
    let path = lab.dir().join("of.sock");
    if !path.exists() {
        let target = format!("punix:{}", path.display());
        lab.cli(&["set-controller", "br0", "ptcp:16653:127.0.0.1", &target])
            .unwrap();
    }
    let mut s = UnixStream::connect(&path).unwrap();
    let hello = msg::encode_to_vec(&Message::Hello(Hello::nicflow()), 1).unwrap();
    let r = exchange(&mut s, &hello, Duration::from_secs(2));
    assert!(
        matches!(&r[..], [d] if matches!(d.message, Message::Hello(_))),
        "{r:?}"
    );
    s
}

#[test]
fn a_15_session_gets_replies_in_15() {
    if !tools() {
        return;
    }
    let lab = lab("r");
    let mut s = raw15(&lab);
    let mut b = msg::encode_to_vec_as(&Message::FeaturesRequest, msg::OFP15_VERSION, 2).unwrap();
    b.extend(msg::encode_to_vec_as(&Message::BarrierRequest, msg::OFP15_VERSION, 3).unwrap());
    // A 1.3 message on a 1.5 session: OFPBRC_BAD_VERSION, in 1.5.
    b.extend(msg::encode_to_vec_as(&Message::BarrierRequest, msg::OFP13_VERSION, 4).unwrap());
    let r = exchange(&mut s, &b, Duration::from_secs(2));
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(r.iter().all(|d| d.version == msg::OFP15_VERSION), "{r:?}");
    assert!(matches!(r[0].message, Message::FeaturesReply(_)));
    assert_eq!(r[1].message, Message::BarrierReply);
    assert!(
        matches!(&r[2].message, Message::Error(e) if e.error
            == nicflow_openflow::OfpError::BadRequest(nicflow_openflow::error::BadRequest::BAD_VERSION)),
        "{r:?}"
    );
    assert_eq!(r[2].xid, 4);
}

/// The rules as `ovs-ofctl dump-flows --no-stats` prints them, sorted.
fn rules(lab: &NsLab) -> Vec<String> {
    let dump = of15_must(lab, &["--no-names", "--no-stats", "dump-flows", OF]);
    let mut v: Vec<String> = dump
        .lines()
        .filter(|l| !l.contains("OFPST_FLOW"))
        .map(|l| l.trim().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn bundles_apply_all_or_nothing() {
    if !tools() {
        return;
    }
    let lab = lab("b");
    of15_must(&lab, &["del-flows", OF]);
    let f1 = lab.dir().join("flows1.txt");
    std::fs::write(
        &f1,
        "priority=10,in_port=1,actions=output:2\n\
         priority=10,in_port=2,actions=output:1\n\
         table=1,priority=5,tcp,tp_dst=22,actions=drop\n",
    )
    .unwrap();
    of15_must(&lab, &["--bundle", "add-flows", OF, f1.to_str().unwrap()]);
    assert!(pings(&lab, 2), "ping across bundled rules failed");
    let r = rules(&lab);
    assert_eq!(r.len(), 3, "{r:?}");

    // replace-flows in a bundle: the difference as one atomic change.
    let f2 = lab.dir().join("flows2.txt");
    std::fs::write(
        &f2,
        "priority=10,in_port=1,actions=output:2\n\
         priority=10,in_port=2,actions=output:1\n\
         table=1,priority=6,udp,tp_dst=53,actions=drop\n",
    )
    .unwrap();
    of15_must(
        &lab,
        &["--bundle", "replace-flows", OF, f2.to_str().unwrap()],
    );
    let r = rules(&lab);
    assert!(
        r.iter().any(|l| l.contains("tp_dst=53")) && !r.iter().any(|l| l.contains("tp_dst=22")),
        "{r:?}"
    );
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(pings(&lab, 1));

    // A bundle whose last rule names a group that does not exist: refused
    // as a whole, with the failing rule's error; the tables stay as they
    // were (the first lines, which would break forwarding, are not in).
    let before = rules(&lab);
    let bad = lab.dir().join("bad.txt");
    std::fs::write(
        &bad,
        "priority=20,in_port=1,actions=drop\n\
         priority=20,in_port=2,actions=drop\n\
         priority=20,ip,actions=group:77\n",
    )
    .unwrap();
    let e = of15(&lab, &["--bundle", "add-flows", OF, bad.to_str().unwrap()]).unwrap_err();
    assert!(e.contains("OFPBAC_BAD_OUT_GROUP"), "{e}");
    assert!(e.contains("OFPBFC_MSG_FAILED"), "{e}");
    assert_eq!(rules(&lab), before);
    assert!(pings(&lab, 2), "a failed bundle changed forwarding");

    // The same with a raw client: the error names the failing message's
    // xid, and the commit gets OFPBFC_MSG_FAILED.
    use nicflow_openflow::error::{BadAction, BundleFailed};
    use nicflow_openflow::msg::bundle::flags;
    use nicflow_openflow::msg::{BundleAdd, BundleControl, BundleCtrlType};
    use nicflow_openflow::OfpError;
    let mut s = raw15(&lab);
    let flow_mod = |text: &str| {
        let spec = nicflow_ofctl::parse_flow(text, &nicflow_ofctl::NumericPorts).unwrap();
        let insts =
            nicflow_openflow::action::convert::from_nicflow(&spec.actions, &spec.r#match).unwrap();
        Message::FlowMod(msg::FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: spec.table,
            command: msg::FlowModCommand::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority: spec.priority,
            buffer_id: msg::flow::NO_BUFFER,
            out_port: msg::flow::ANY,
            out_group: msg::flow::ANY,
            flags: 0,
            importance: 0,
            r#match: spec.r#match,
            instructions: insts,
        })
    };
    let enc = |m: Message, xid: u32| msg::encode_to_vec_as(&m, msg::OFP15_VERSION, xid).unwrap();
    let ctl = |ctrl| {
        Message::BundleControl(BundleControl {
            bundle_id: 42,
            ctrl,
            flags: flags::ALL,
            properties: vec![],
        })
    };
    let add = |m| {
        Message::BundleAdd(BundleAdd {
            bundle_id: 42,
            flags: flags::ALL,
            message: Box::new(m),
            properties: vec![],
        })
    };
    let mut b = enc(ctl(BundleCtrlType::OpenRequest), 100);
    b.extend(enc(
        add(flow_mod("priority=30,in_port=1,actions=drop")),
        101,
    ));
    b.extend(enc(add(flow_mod("priority=30,ip,actions=group:78")), 102));
    b.extend(enc(
        add(flow_mod("priority=30,in_port=2,actions=drop")),
        103,
    ));
    b.extend(enc(ctl(BundleCtrlType::CommitRequest), 104));
    let r = exchange(&mut s, &b, Duration::from_secs(2));
    let got: Vec<(u32, Option<OfpError>)> = r
        .iter()
        .map(|d| {
            (
                d.xid,
                match &d.message {
                    Message::Error(e) => Some(e.error),
                    _ => None,
                },
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (100, None),
            (102, Some(OfpError::BadAction(BadAction::BAD_OUT_GROUP))),
            (104, Some(OfpError::BundleFailed(BundleFailed::MSG_FAILED))),
        ],
        "{r:?}"
    );
    assert_eq!(rules(&lab), before);
    // And a good one commits.
    let mut b = enc(ctl(BundleCtrlType::OpenRequest), 200);
    b.extend(enc(
        add(flow_mod("table=2,priority=30,in_port=1,actions=drop")),
        201,
    ));
    b.extend(enc(ctl(BundleCtrlType::CommitRequest), 202));
    let r = exchange(&mut s, &b, Duration::from_secs(2));
    assert!(
        matches!(&r[..], [o, c] if o.xid == 200 && c.xid == 202
            && matches!(&c.message, Message::BundleControl(bc) if bc.ctrl == BundleCtrlType::CommitReply)),
        "{r:?}"
    );
    assert_eq!(rules(&lab).len(), before.len() + 1);
}

/// The switch-wide Geneve option map over OpenFlow: `ovs-ofctl
/// add-tlv-map`, `dump-tlv-map`, `del-tlv-map`, OVS's errors, and the map
/// feeding a Geneve port that has no `tlv_map` of its own: a scapy peer's
/// option (class 0x0102, type 0x01) = 0x2a is delivered by a
/// `tun_metadata0=0x2a` rule only while the map names it.
#[test]
fn tlv_map_is_switch_wide_and_feeds_geneve_ports() {
    if !tools() {
        return;
    }
    let have_scapy = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import scapy.contrib.geneve"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_scapy {
        common::skipped("scapy not installed for /usr/bin/python3");
        return;
    }
    let mut lab = NsLab::new("nfo15", "t", &["a1", "sw", "k"]);
    for n in ["a1", "sw", "k"] {
        lab.must(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
    }
    lab.veth("eth0", "a1", "pa1", "sw");
    lab.veth("u0", "sw", "u1", "k");
    lab.must(
        "a1",
        &["ip", "link", "set", "eth0", "address", "02:00:00:00:a1:01"],
    );
    lab.must(
        "a1",
        &["ip", "addr", "add", "198.18.31.1/24", "dev", "eth0"],
    );
    lab.must(
        "a1",
        &[
            "ip",
            "neigh",
            "replace",
            "198.18.31.2",
            "lladdr",
            "02:00:00:00:b1:01",
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    );
    lab.must("k", &["ip", "addr", "add", "198.18.21.1/24", "dev", "u1"]);
    lab.must("sw", &["ip", "link", "set", "lo", "up"]);
    let cfg = r#"
[[bridge]]
name = "br0"
offload = "none"
flows = [
  "priority=20,in_port=gv1,tun_metadata0=0x2a,actions=output:pa1",
  "priority=10,in_port=gv1,actions=drop",
]
[bridge.openflow]
controllers = ["ptcp:16653:127.0.0.1"]
[[bridge.port]]
name = "pa1"
iface = "pa1"
type = "afpacket"
[[bridge.port]]
name = "gv1"
iface = "gv1"
type = "geneve"
options = { underlay = "u0", local_ip = "198.18.21.2", remote_ip = "198.18.21.1", key = "5000", csum = "true", underlay_type = "afpacket" }
"#;
    lab.start_daemon(cfg);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scapy/geneve.py");
    let send = |payload: &str| {
        lab.must(
            "k",
            &[
                "/usr/bin/python3",
                script,
                "send",
                "--iface",
                "u1",
                "--src",
                "198.18.21.1",
                "--dst",
                "198.18.21.2",
                "--vni",
                "5000",
                "--inner-src-mac",
                "02:00:00:00:b1:01",
                "--inner-dst-mac",
                "02:00:00:00:a1:01",
                "--inner-src",
                "198.18.31.2",
                "--inner-dst",
                "198.18.31.1",
                "--dport",
                "9999",
                "--payload",
                payload,
                "--opt0",
                "0x2a",
            ],
        )
    };
    let a1 = lab.ns("a1");
    // No map: the option is not tun_metadata0, the drop rule takes it.
    let recv = common::UdpSink::start(&a1, "198.18.31.1", 9999);
    send("before-map-must-drop");
    assert!(recv.finish().is_empty());

    of15_must(
        &lab,
        &[
            "add-tlv-map",
            OF,
            "{class=0x0102,type=0x01,len=4}->tun_metadata0",
        ],
    );
    let dump = of15_must(&lab, &["dump-tlv-map", OF]);
    assert!(dump.contains("max option space=32 max fields=8"), "{dump}");
    assert!(
        dump.contains("0x102") && dump.contains("tun_metadata0"),
        "{dump}"
    );
    // OVS's errors: the index is taken; the option is mapped already;
    // beyond nicflow's 8 four-byte slots.
    let e = of15(
        &lab,
        &[
            "add-tlv-map",
            OF,
            "{class=0xffff,type=0,len=4}->tun_metadata0",
        ],
    )
    .unwrap_err();
    assert!(e.contains("NXTTMFC_ALREADY_MAPPED"), "{e}");
    let e = of15(
        &lab,
        &[
            "add-tlv-map",
            OF,
            "{class=0x0102,type=0x01,len=4}->tun_metadata1",
        ],
    )
    .unwrap_err();
    assert!(e.contains("NXTTMFC_DUP_ENTRY"), "{e}");
    let e = of15(
        &lab,
        &[
            "add-tlv-map",
            OF,
            "{class=0xffff,type=0,len=8}->tun_metadata1",
        ],
    )
    .unwrap_err();
    assert!(e.contains("NXTTMFC_BAD_OPT_LEN"), "{e}");
    let e = of15(
        &lab,
        &[
            "add-tlv-map",
            OF,
            "{class=0xffff,type=0,len=4}->tun_metadata9",
        ],
    )
    .unwrap_err();
    assert!(e.contains("NXTTMFC_BAD_FIELD_IDX"), "{e}");
    // 1.3 sees the same table.
    let dump13 = ofctl_v(&lab, "OpenFlow13", &["dump-tlv-map", OF]).unwrap();
    assert!(dump13.contains("tun_metadata0"), "{dump13}");

    // Mapped: delivered (the tunnel port took the map within a round).
    std::thread::sleep(Duration::from_millis(200));
    let recv = common::UdpSink::start(&a1, "198.18.31.1", 9999);
    send("mapped");
    let got = recv.finish();
    assert!(
        got.lines().any(|l| l == "mapped"),
        "{got:?}\n{}",
        lab.daemon_log()
    );

    // Deleted: dropped again.
    of15_must(
        &lab,
        &[
            "del-tlv-map",
            OF,
            "{class=0x0102,type=0x01,len=4}->tun_metadata0",
        ],
    );
    let dump = of15_must(&lab, &["dump-tlv-map", OF]);
    assert!(!dump.contains("tun_metadata0"), "{dump}");
    std::thread::sleep(Duration::from_millis(200));
    let recv = common::UdpSink::start(&a1, "198.18.31.1", 9999);
    send("after-del-must-drop");
    assert!(recv.finish().is_empty());
    let _ = &mut lab;
}

/// `NXT_CT_FLUSH_ZONE` and `NXT_CT_FLUSH` (zone, original and reply
/// tuples) from `ovs-ofctl ct-flush-zone` / `ct-flush` against the
/// bridge's connection tracker, checked with `nicflow dump-conntrack`.
#[test]
fn ct_flush_over_openflow() {
    if !tools() {
        return;
    }
    let lab = lab("c");
    of15_must(&lab, &["del-flows", OF]);
    of15_must(
        &lab,
        &[
            "add-flow",
            OF,
            "priority=10,ip,actions=ct(commit,zone=5),normal",
        ],
    );
    of15_must(&lab, &["add-flow", OF, "priority=0,actions=normal"]);
    let conns = || lab.cli(&["dump-conntrack", "br0"]).unwrap();
    let ping = || assert!(pings(&lab, 1), "ping through ct(commit) failed");
    ping();
    let c = conns();
    assert!(c.contains("zone=5") && c.contains("198.18.0.1"), "{c}");
    // Another zone: untouched.
    of15_must(&lab, &["ct-flush-zone", OF, "7"]);
    assert!(conns().contains("zone=5"));
    let out = of15_must(&lab, &["ct-flush-zone", OF, "5"]);
    assert!(
        !conns().contains("198.18.0.1"),
        "{}\n{out}\n{}",
        conns(),
        lab.daemon_log()
    );

    // Tuples (UDP h1 -> h2:9999): the original tuple must match...
    let udp = || {
        lab.must("h1", &["bash", "-c", "echo ct > /dev/udp/198.18.0.2/9999"]);
        let c = conns();
        assert!(
            c.lines()
                .any(|l| l.starts_with("udp,") && l.contains("dport=9999")),
            "{c}"
        );
    };
    let has_udp = || conns().lines().any(|l| l.starts_with("udp,"));
    udp();
    of15_must(
        &lab,
        &[
            "ct-flush",
            OF,
            "zone=5",
            "ct_nw_src=198.18.0.9,ct_nw_proto=17",
        ],
    );
    assert!(has_udp(), "flushed by another source");
    // ... and the reply tuple too (its source is h2's port 9999: no NAT).
    of15_must(
        &lab,
        &[
            "ct-flush",
            OF,
            "zone=5",
            "ct_nw_src=198.18.0.1,ct_nw_proto=17",
            "ct_nw_src=198.18.0.2,ct_tp_src=9998",
        ],
    );
    assert!(has_udp(), "flushed by a wrong reply tuple");
    of15_must(
        &lab,
        &[
            "ct-flush",
            OF,
            "zone=5",
            "ct_nw_src=198.18.0.1,ct_nw_proto=17",
            "ct_nw_src=198.18.0.2,ct_tp_src=9999",
        ],
    );
    assert!(!has_udp(), "{}", conns());
    // Without a zone: every zone.
    ping();
    of15_must(&lab, &["ct-flush", OF]);
    assert!(!conns().contains("198.18.0.1"), "{}", conns());
}

/// Read messages for `wait` (or until the peer is quiet after some came).
fn read_msgs(s: &mut UnixStream, wait: Duration) -> Vec<msg::Decoded> {
    exchange(s, &[], wait)
}

/// `NXT_SET_PACKET_IN_FORMAT` (nxt_packet_in2) on one connection:
/// `controller(userdata=..)` copies arrive as `NXT_PACKET_IN2` with the
/// userdata, table, cookie, reason and the pipeline fields (in_port, a
/// register the rule loaded); a standard connection keeps getting
/// `PACKET_IN`s; `controller(meter_id=N)` copies are rate-limited by meter N.
#[test]
fn packet_in2_with_userdata_metadata_and_meter() {
    if !tools() {
        return;
    }
    use nicflow_openflow::msg::nx::{packet_in_format, NxMessage};
    let lab = lab("i");
    of15_must(&lab, &["del-flows", OF]);
    of15_must(&lab, &["add-flow", OF, "priority=5,arp,actions=normal"]);
    of15_must(
        &lab,
        &[
            "add-flow",
            OF,
            "table=0,priority=10,udp,tp_dst=9999,actions=load:0x2a->NXM_NX_REG3[],resubmit(,3)",
        ],
    );
    of15_must(
        &lab,
        &[
            "add-flow",
            OF,
            "table=3,priority=10,cookie=0x77,udp,actions=controller(userdata=01.02.03.04)",
        ],
    );
    of15_must(
        &lab,
        &[
            "add-meter",
            OF,
            "meter=1,pktps,burst,bands=type=drop,rate=1,burst_size=1",
        ],
    );
    of15_must(
        &lab,
        &[
            "add-flow",
            OF,
            "table=0,priority=10,udp,tp_dst=9998,actions=controller(userdata=05,meter_id=1)",
        ],
    );
    let mut two = raw15(&lab);
    let set = msg::encode_to_vec_as(
        &Message::Nx(NxMessage::SetPacketInFormat(
            packet_in_format::NXT_PACKET_IN2,
        )),
        msg::OFP15_VERSION,
        5,
    )
    .unwrap();
    let mut b = set;
    b.extend(msg::encode_to_vec_as(&Message::BarrierRequest, msg::OFP15_VERSION, 6).unwrap());
    let r = exchange(&mut two, &b, Duration::from_secs(2));
    assert!(
        matches!(&r[..], [d] if d.message == Message::BarrierReply),
        "{r:?}"
    );
    let mut std13 = {
        let path = lab.dir().join("of.sock");
        let mut s = UnixStream::connect(&path).unwrap();
        let h = msg::encode_to_vec(&Message::Hello(Hello::ofp13()), 1).unwrap();
        exchange(&mut s, &h, Duration::from_secs(2));
        s
    };
    lab.must(
        "h1",
        &["bash", "-c", "echo pin2 > /dev/udp/198.18.0.2/9999"],
    );
    let r = read_msgs(&mut two, Duration::from_secs(2));
    let pins: Vec<&msg::nx::PacketIn2> = r
        .iter()
        .filter_map(|d| match &d.message {
            Message::Nx(NxMessage::PacketIn2(p)) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(pins.len(), 1, "{r:?}");
    let p = pins[0];
    assert_eq!(p.userdata.as_deref(), Some(&[1u8, 2, 3, 4][..]));
    assert_eq!(p.table_id, Some(3));
    assert_eq!(p.cookie, Some(0x77));
    assert_eq!(p.reason, Some(1));
    let m = p.metadata.unwrap();
    assert_eq!(m.get(nicflow_flow::Field::InPort).0, 1);
    assert_eq!(m.get(nicflow_flow::Field::Reg(3)), (0x2a, 0xffff_ffff));
    assert!(p.packet.ends_with(b"pin2\n"), "{:02x?}", p.packet);
    // The 1.3 connection in the standard format got a PACKET_IN.
    let r = read_msgs(&mut std13, Duration::from_secs(1));
    assert!(
        r.iter()
            .any(|d| matches!(&d.message, Message::PacketIn(p) if p.data.ends_with(b"pin2\n"))),
        "{r:?}"
    );

    // Metered copies: 20 datagrams at once, one packet per second (burst
    // 1) lets about two through; the rest are dropped by the meter.
    lab.must(
        "h1",
        &[
            "bash",
            "-c",
            "for i in $(seq 20); do echo m$i > /dev/udp/198.18.0.2/9998; done",
        ],
    );
    let r = read_msgs(&mut two, Duration::from_secs(2));
    let n = r
        .iter()
        .filter(|d| matches!(&d.message, Message::Nx(NxMessage::PacketIn2(p)) if p.userdata.as_deref() == Some(&[5u8][..])))
        .count();
    assert!((1..=3).contains(&n), "{n} metered packet-ins: {r:?}");
    let stats = of15_must(&lab, &["meter-stats", OF]);
    assert!(stats.contains("packet_in_count:20"), "{stats}");
}

/// Continuations (`controller(...,pause)` + `NXT_RESUME`), as OVN's
/// DHCP/DNS/RA responders use them: a raw controller in the
/// `nxt_packet_in2` format gets the paused packet with its continuation;
/// the frame reaches h2 only after the controller resumes it, with the
/// controller's bytes; paused under a `resubmit`, both the inner rule's
/// rest (which needs the register loaded before the pause) and the calling
/// rule's actions after the `resubmit` run. A continuation from another
/// bridge, none, or a malformed one is refused and sends nothing.
#[test]
fn pause_and_resume() {
    if !tools() {
        return;
    }
    use common::UdpSink;
    use nicflow_openflow::msg::nx::{packet_in_format, NxMessage, PacketIn2};
    let lab = lab("c");
    for f in [
        "priority=5,arp,actions=normal",
        "table=0,priority=10,udp,tp_dst=9999,actions=load:0x2a->NXM_NX_REG3[],\
         controller(userdata=01.02,pause),output:2",
        "table=0,priority=10,udp,tp_dst=9997,actions=resubmit(,4),output:2",
        "table=4,cookie=0x44,udp,actions=load:0x7->NXM_NX_REG4[],\
         controller(userdata=03,pause),resubmit(,5)",
        "table=5,priority=10,reg4=7,actions=output:2",
    ] {
        of15_must(&lab, &["add-flow", OF, f]);
    }
    let mut c = raw15(&lab);
    let mut b = msg::encode_to_vec_as(
        &Message::Nx(NxMessage::SetPacketInFormat(
            packet_in_format::NXT_PACKET_IN2,
        )),
        msg::OFP15_VERSION,
        5,
    )
    .unwrap();
    b.extend(msg::encode_to_vec_as(&Message::BarrierRequest, msg::OFP15_VERSION, 6).unwrap());
    let r = exchange(&mut c, &b, Duration::from_secs(2));
    assert!(
        matches!(&r[..], [d] if d.message == Message::BarrierReply),
        "{r:?}"
    );
    let h2 = lab.ns("h2");
    let paused_in = |c: &mut UnixStream, userdata: u8| -> PacketIn2 {
        let r = read_msgs(c, Duration::from_secs(3));
        let pins: Vec<PacketIn2> = r
            .into_iter()
            .filter_map(|d| match d.message {
                Message::Nx(NxMessage::PacketIn2(p))
                    if p.userdata
                        .as_deref()
                        .is_some_and(|u| u.last() == Some(&userdata)) =>
                {
                    Some(p)
                }
                _ => None,
            })
            .collect();
        assert_eq!(pins.len(), 1, "{pins:?}\n{}", lab.daemon_log());
        pins.into_iter().next().unwrap()
    };
    let resume = |c: &mut UnixStream, p: &PacketIn2, xid: u32| -> Vec<msg::Decoded> {
        let mut b = msg::encode_to_vec_as(
            &Message::Nx(NxMessage::Resume(p.clone())),
            msg::OFP15_VERSION,
            xid,
        )
        .unwrap();
        b.extend(
            msg::encode_to_vec_as(&Message::BarrierRequest, msg::OFP15_VERSION, xid + 1).unwrap(),
        );
        exchange(c, &b, Duration::from_secs(2))
    };

    // 1. Paused: nothing reaches h2 until the resume.
    let sink = UdpSink::start(&h2, "198.18.0.2", 9999);
    lab.must(
        "h1",
        &["bash", "-c", "echo ping > /dev/udp/198.18.0.2/9999"],
    );
    let p = paused_in(&mut c, 2);
    assert!(p.continuation.is_some(), "{p:?}");
    let m = p.metadata.unwrap();
    assert_eq!(m.get(nicflow_flow::Field::Reg(3)), (0x2a, 0xffff_ffff));
    let before = sink.finish();
    assert!(
        !before.contains("ping"),
        "sent before the resume: {before:?}"
    );

    // Refused resumes send nothing: another bridge's continuation (its
    // NXCPT_BRIDGE bytes changed), none at all, a malformed one.
    let sink = UdpSink::start(&h2, "198.18.0.2", 9999);
    let stale = nicflow_openflow::OfpError::Other {
        ty: 0xffff,
        code: 35,
    };
    let mut other = p.clone();
    let cont = other.continuation.as_mut().unwrap();
    assert_eq!(&cont[..2], &[0x80, 0x00], "NXCPT_BRIDGE first: {cont:02x?}");
    cont[4] ^= 0xff;
    let mut none = p.clone();
    none.continuation = None;
    let mut bad = p.clone();
    bad.continuation.as_mut().unwrap()[2] = 0xff;
    for (i, (q, want)) in [(&other, Some(stale)), (&none, Some(stale)), (&bad, None)]
        .into_iter()
        .enumerate()
    {
        let r = resume(&mut c, q, 20 + 2 * i as u32);
        let err = r.iter().find_map(|d| match &d.message {
            Message::Error(e) => Some(e.error),
            _ => None,
        });
        match want {
            Some(w) => assert_eq!(err, Some(w), "{i}: {r:?}"),
            None => assert!(err.is_some(), "{i}: {r:?}"),
        }
    }
    let refused = sink.finish();
    assert!(
        !refused.contains("ping"),
        "a refused resume sent: {refused:?}"
    );

    // 2. The controller's bytes go on: the payload changed (UDP checksum
    // zeroed, which IPv4 allows).
    let sink = UdpSink::start(&h2, "198.18.0.2", 9999);
    let mut q = p.clone();
    assert!(q.packet.ends_with(b"ping\n"), "{:02x?}", q.packet);
    let n = q.packet.len();
    q.packet[n - 5..n - 1].copy_from_slice(b"PONG");
    q.packet[40] = 0;
    q.packet[41] = 0;
    let r = resume(&mut c, &q, 30);
    assert!(
        !r.iter().any(|d| matches!(d.message, Message::Error(_))),
        "{r:?}"
    );
    let got = sink.finish();
    assert_eq!(
        got.matches("PONG").count(),
        1,
        "{got:?}\n{}",
        lab.daemon_log()
    );
    assert!(!got.contains("ping"), "{got:?}");

    // 3. Paused two tables deep: after the resume the inner rule's rest
    // (resubmit(,5), which matches the register loaded before the pause)
    // and the calling rule's output:2 both send a copy.
    let sink = UdpSink::start(&h2, "198.18.0.2", 9997);
    lab.must(
        "h1",
        &["bash", "-c", "echo deep > /dev/udp/198.18.0.2/9997"],
    );
    let p = paused_in(&mut c, 3);
    assert_eq!((p.table_id, p.cookie), (Some(4), Some(0x44)));
    let r = resume(&mut c, &p, 40);
    assert!(
        !r.iter().any(|d| matches!(d.message, Message::Error(_))),
        "{r:?}"
    );
    let got = sink.finish();
    assert_eq!(
        got.matches("deep").count(),
        2,
        "{got:?}\n{}",
        lab.daemon_log()
    );
}
