//! The SmartNIC device model: `add-vf` / `del-vf` / `show` against a real
//! daemon running in its own namespace, with containers as namespaces.
//!
//! ```text
//!   c1 (vf0 198.18.40.1) --br0pf0vf0--+
//!   c2 (eth1 198.18.40.2) --br0pf0vf1-+ nicflow br0 (namespace sw, priority=0 normal)
//!   c3 (vf1 198.18.40.3) --br0pf0vf1--+   (added after eth1 is deleted: index 1 again)
//! ```
//!
//! `uplink_port` adds the bridge's uplink (PF/physical port) on a veth whose
//! peer is in a `wire` namespace, next to a VF:
//!
//! ```text
//!   wire (wire0 198.18.50.100) --p0 (uplink)--+ nicflow br0 (namespace sw)
//!   c1 (vf0 198.18.50.1) ------br0pf0vf0------+
//! ```
//!
//! Every namespace is `nfvf<pid>-*` (`nfup<pid>-*` for the uplink test); a
//! guard kills the daemon, deletes the namespaces and the temporary
//! directory even when an assertion fails.
//! Needs root, `ip` and `ping`; skips with a message otherwise.

mod common;

use common::{lab_possible, must, NsLab};
use nicflow::control::vf;
use serde_json::Value;

const NAMESPACES: [&str; 5] = ["sw", "c1", "c2", "c3", "c4"];

fn show(lab: &NsLab) -> Value {
    serde_json::from_str(&lab.cli(&["--json", "show"]).unwrap()).unwrap()
}

fn list_vfs(lab: &NsLab) -> Vec<Value> {
    show(lab)[0]["vfs"].as_array().cloned().unwrap_or_default()
}

/// [`NsLab::ping`], the daemon's log in the error.
fn ping(lab: &NsLab, from: &str, to: &str) -> Result<(), String> {
    lab.ping(from, to)
        .map_err(|e| format!("{e}\n{}", lab.daemon_log()))
}

fn links(lab: &NsLab, n: &str) -> String {
    must(&["ip", "-n", &lab.ns(n), "-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .collect::<Vec<_>>()
        .join(" ")
}

fn find<'a>(vfs: &'a [Value], name: &str) -> &'a Value {
    vfs.iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no VF {name} in {vfs:?}"))
}

#[test]
fn vfs_and_representors() {
    if !lab_possible() {
        return;
    }
    let mut lab = NsLab::new("nfvf", "", &NAMESPACES);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();

    let (c1, c2, c3, c4) = (lab.ns("c1"), lab.ns("c2"), lab.ns("c3"), lab.ns("c4"));
    // Defaults: name vf0, derived MAC, afxdp representor br0pf0vf0.
    let out = lab
        .cli(&[
            "--json",
            "add-vf",
            "br0",
            &c1,
            "--ip",
            "198.18.40.1/24",
            "--ip",
            "2001:db8:40::1/64",
        ])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["name"], "vf0");
    assert_eq!(v["representor"], "br0pf0vf0");
    assert!(v["ofport"].as_u64().is_some(), "{v}");
    // Everything given: name, MAC, AF_PACKET representor.
    let out = lab
        .cli(&[
            "add-vf",
            "br0",
            &c2,
            "--name",
            "eth1",
            "--mac",
            "02:00:00:00:40:02",
            "--ip",
            "198.18.40.2/24",
            "--ip",
            "2001:db8:40::2/64",
            "--rep-type",
            "afpacket",
        ])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    assert!(out.contains("br0pf0vf1") && out.contains("ofport"), "{out}");

    let vfs = list_vfs(&lab);
    assert_eq!(vfs.len(), 2, "{vfs:?}");
    let mac0 = vf::format_mac(&vf::default_mac("br0", 0));
    let v0 = find(&vfs, "vf0");
    assert_eq!(v0["index"], 0);
    assert_eq!(v0["namespace"], c1.as_str());
    assert_eq!(v0["mac"], mac0.as_str());
    assert_eq!(v0["representor"], "br0pf0vf0");
    assert_eq!(v0["rep_type"], "auto");
    assert_eq!(v0["ips"][0], "198.18.40.1/24");
    let v1 = find(&vfs, "eth1");
    assert_eq!(v1["index"], 1);
    assert_eq!(v1["namespace"], c2.as_str());
    assert_eq!(v1["mac"], "02:00:00:00:40:02");
    assert_eq!(v1["representor"], "br0pf0vf1");
    assert_eq!(v1["rep_type"], "afpacket");
    assert!(v1["ofport"].as_u64().is_some());
    // The system agrees: VF ends in the containers with their MACs,
    // representors in the switch's namespace.
    let l = must(&["ip", "-n", &c1, "link", "show", "dev", "vf0"]);
    assert!(l.contains(&mac0) && l.contains("UP"), "{l}");
    let a = must(&["ip", "-n", &c2, "addr", "show", "dev", "eth1"]);
    assert!(
        a.contains("02:00:00:00:40:02") && a.contains("198.18.40.2/24"),
        "{a}"
    );
    assert!(lab.link_exists("sw", "br0pf0vf0") && lab.link_exists("sw", "br0pf0vf1"));
    let text = lab.cli(&["show"]).unwrap();
    assert!(
        text.contains("vf 0: netdev br0pf0vf0") && text.contains("name eth1 netns"),
        "{text}"
    );

    // Traffic between the containers through the bridge (normal), v4 and v6.
    ping(&lab, "c1", "198.18.40.2").unwrap();
    ping(&lab, "c2", "198.18.40.1").unwrap();
    ping(&lab, "c1", "2001:db8:40::2").unwrap();

    // Bad input: a clear error naming the token, nothing changes.
    let before = show(&lab);
    let sw_links = links(&lab, "sw");
    let c3_links = links(&lab, "c3");
    let bad_ns = format!("{}-nope", lab.prefix());
    for (args, token) in [
        (
            vec!["add-vf", "br0", bad_ns.as_str()],
            format!("unknown network namespace `{bad_ns}`"),
        ),
        (
            vec!["add-vf", "br0", &c3, "--mac", "02:zz:00:00:00:03"],
            "bad MAC address `02:zz:00:00:00:03`".to_string(),
        ),
        (
            vec!["add-vf", "br0", &c1, "--name", "vf0"],
            format!("already has a VF `vf0` in namespace {c1}"),
        ),
        (
            vec!["add-vf", "br0", &c3, "--ip", "198.18.40.3/33"],
            "bad address `198.18.40.3/33`".to_string(),
        ),
        (
            vec!["add-vf", "br0", &c3, "--rep-type", "tap"],
            "unknown representor type `tap`".to_string(),
        ),
        (vec!["add-vf", "nobr", &c3], "no bridge `nobr`".to_string()),
        (vec!["del-vf", "br0", "vf9"], "has no VF `vf9`".to_string()),
        (
            vec!["del-port", "br0", "br0pf0vf0"],
            "use `nicflow del-vf br0 vf0`".to_string(),
        ),
    ] {
        let e = lab.cli(&args).expect_err(&format!("{args:?} succeeded"));
        assert!(e.contains(&token), "{args:?}: {e}");
    }
    // An interface of that name already in the namespace: refused up front.
    must(&[
        "ip", "-n", &c3, "link", "add", "vf2", "type", "veth", "peer", "name", "vf2p",
    ]);
    let e = lab
        .cli(&["add-vf", "br0", &c3, "--name", "vf2"])
        .unwrap_err();
    assert!(e.contains("already has an interface `vf2`"), "{e}");
    must(&["ip", "-n", &c3, "link", "del", "vf2"]);
    assert_eq!(show(&lab), before);
    assert_eq!(links(&lab, "sw"), sw_links);
    assert_eq!(links(&lab, "c3"), c3_links);

    // del-vf: the pair is gone on both sides, show forgets it.
    lab.cli(&["del-vf", "br0", "eth1"]).unwrap();
    assert!(!lab.link_exists("c2", "eth1"));
    assert!(!lab.link_exists("sw", "br0pf0vf1"));
    let vfs = list_vfs(&lab);
    assert_eq!(vfs.len(), 1, "{vfs:?}");
    assert_eq!(vfs[0]["name"], "vf0");

    // A third VF takes the lowest free index (1) again; a fourth goes into
    // a namespace that will be gone at restart.
    lab.cli(&["add-vf", "br0", &c3, "--ip", "198.18.40.3/24"])
        .unwrap();
    lab.cli(&["add-vf", "br0", &c4, "--ip", "198.18.40.4/24"])
        .unwrap();
    let vfs = list_vfs(&lab);
    assert_eq!(find(&vfs, "vf1")["representor"], "br0pf0vf1");
    assert_eq!(find(&vfs, "vf1")["namespace"], c3.as_str());
    assert_eq!(find(&vfs, "vf2")["representor"], "br0pf0vf2");
    ping(&lab, "c1", "198.18.40.3").unwrap();
    let cfg = std::fs::read_to_string(lab.config_path()).unwrap();
    assert_eq!(cfg.matches("[[bridge.vf]]").count(), 3, "{cfg}");

    // Restart from the config: vf0's representor survived (reused); vf1's
    // pair is deleted behind the daemon's back (recreated); c4 is gone
    // (logged, skipped, the daemon still starts).
    lab.stop_daemon();
    assert!(lab.link_exists("sw", "br0pf0vf0"));
    must(&["ip", "-n", &lab.ns("sw"), "link", "del", "br0pf0vf1"]);
    assert!(!lab.link_exists("c3", "vf1"));
    lab.del_ns("c4");
    lab.restart_daemon();
    let vfs = list_vfs(&lab);
    assert_eq!(vfs.len(), 3, "{vfs:?}");
    assert!(find(&vfs, "vf0")["ofport"].as_u64().is_some(), "{vfs:?}");
    assert!(find(&vfs, "vf1")["ofport"].as_u64().is_some(), "{vfs:?}");
    assert!(find(&vfs, "vf2")["ofport"].is_null(), "{vfs:?}");
    let a = must(&["ip", "-n", &c3, "addr", "show", "dev", "vf1"]);
    assert!(a.contains("198.18.40.3/24"), "{a}");
    assert!(
        lab.daemon_log()
            .contains(&format!("namespace `{c4}` is gone")),
        "{}",
        lab.daemon_log()
    );
    ping(&lab, "c1", "198.18.40.3").unwrap();
    ping(&lab, "c3", "198.18.40.1").unwrap();
    // The skipped VF can still be removed.
    lab.cli(&["del-vf", "br0", "vf2"]).unwrap();
    assert_eq!(list_vfs(&lab).len(), 2);
    // del-br takes the remaining pairs with it.
    lab.cli(&["del-br", "br0"]).unwrap();
    assert!(!lab.link_exists("sw", "br0pf0vf0"));
    assert!(!lab.link_exists("c1", "vf0"));
    assert!(!lab.link_exists("c3", "vf1"));
    lab.stop_daemon();
}

fn uplink(lab: &NsLab) -> Value {
    show(lab)[0]["uplink"].clone()
}

#[test]
fn uplink_port() {
    if !lab_possible() {
        return;
    }
    let mut lab = NsLab::new("nfup", "", &["sw", "wire", "c1"]);
    // p0 (switch side) -- wire0 (the "wire"); p1 -- wire1 for the refusal.
    lab.veth("p0", "sw", "wire0", "wire");
    lab.veth("p1", "sw", "wire1", "wire");
    lab.must(
        "wire",
        &["ip", "addr", "add", "198.18.50.100/24", "dev", "wire0"],
    );
    // NAPI on the wire end, so frames the XDP engine redirects into p0 are
    // delivered (as add-vf does for VF ends); best effort.
    let _ = lab.exec("wire", &["ethtool", "-K", "wire0", "gro", "on"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    assert!(uplink(&lab).is_null());

    let out = lab
        .cli(&["--json", "add-port", "br0", "p0", "--type", "uplink"])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["flavour"], "physical", "{v}");
    let up_no = v["ofport"].as_u64().unwrap();
    let c1 = lab.ns("c1");
    lab.cli(&["add-vf", "br0", &c1, "--ip", "198.18.50.1/24"])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));

    // show --json: the uplink with flavour physical, the VF with pcivf.
    let s = show(&lab);
    let u = &s[0]["uplink"];
    assert_eq!(u["name"], "p0", "{s}");
    assert_eq!(u["netdev"], "p0");
    assert_eq!(u["flavour"], "physical");
    assert_eq!(u["port"], 0);
    assert_eq!(u["pfnum"], 0);
    assert_eq!(u["ofport"].as_u64(), Some(up_no));
    // Under the default offload the uplink is a TC port like the VFs.
    assert_eq!(u["port_kind"], "tc", "{u}");
    let vfs = list_vfs(&lab);
    assert_eq!(vfs.len(), 1, "{vfs:?}");
    assert_eq!(vfs[0]["flavour"], "pcivf");
    assert_eq!(vfs[0]["pfnum"], 0);
    assert_eq!(vfs[0]["vfnum"], 0);
    let port = s[0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "p0")
        .cloned()
        .unwrap();
    assert_eq!(port["type"], "uplink", "{port}");
    let text = lab.cli(&["show"]).unwrap();
    assert!(
        text.contains(&format!(
            "uplink p0: netdev p0 ({}) flavour physical port 0 pfnum 0 ofport {up_no}",
            u["port_kind"].as_str().unwrap()
        )) && text.contains("vf 0: netdev br0pf0vf0"),
        "{text}"
    );

    // VF <-> wire through the bridge (priority=0,actions=normal).
    ping(&lab, "c1", "198.18.50.100").unwrap();
    ping(&lab, "wire", "198.18.50.1").unwrap();

    // A second uplink is refused, naming the first; nothing changes.
    let before = show(&lab);
    let cfg_before = std::fs::read_to_string(lab.config_path()).unwrap();
    assert_eq!(
        cfg_before.matches("type = \"uplink\"").count(),
        1,
        "{cfg_before}"
    );
    for args in [
        vec!["add-port", "br0", "p1", "--type", "uplink"],
        vec!["add-port", "br0", "p1", "--type", "uplink", "--name", "up1"],
    ] {
        let e = lab.cli(&args).expect_err(&format!("{args:?} succeeded"));
        assert!(
            e.contains("already has an uplink `p0`") && e.contains("at most one"),
            "{args:?}: {e}"
        );
    }
    // The uplink's interface again, on a second bridge: refused too.
    lab.cli(&["add-br", "br1"]).unwrap();
    let e = lab
        .cli(&["add-port", "br1", "p0", "--type", "uplink"])
        .unwrap_err();
    assert!(
        e.contains("already attached as port p0 of bridge br0"),
        "{e}"
    );
    lab.cli(&["del-br", "br1"]).unwrap();
    assert_eq!(show(&lab), before);
    assert_eq!(
        std::fs::read_to_string(lab.config_path()).unwrap(),
        cfg_before
    );
    ping(&lab, "c1", "198.18.50.100").unwrap();

    // Restart from the config: the uplink comes back, traffic flows.
    lab.stop_daemon();
    lab.restart_daemon();
    let u = uplink(&lab);
    assert_eq!(u["flavour"], "physical", "{u}");
    assert_eq!(u["netdev"], "p0");
    assert!(u["ofport"].as_u64().is_some(), "{u}\n{}", lab.daemon_log());
    assert_eq!(list_vfs(&lab)[0]["flavour"], "pcivf");
    ping(&lab, "c1", "198.18.50.100").unwrap();
    ping(&lab, "wire", "198.18.50.1").unwrap();

    // del-port frees the uplink slot; another interface can take it.
    lab.cli(&["del-port", "br0", "p0"]).unwrap();
    assert!(uplink(&lab).is_null());
    lab.cli(&["add-port", "br0", "p1", "--type", "uplink"])
        .unwrap();
    assert_eq!(uplink(&lab)["netdev"], "p1");
    lab.cli(&["del-br", "br0"]).unwrap();
    lab.stop_daemon();
}
