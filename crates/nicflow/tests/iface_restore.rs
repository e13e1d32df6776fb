//! nicflow leaves every interface as it found it: the offload features a
//! port changes when it opens (an `afxdp` port turns GRO/TSO/GSO/checksum
//! offload off, an `afpacket` port with `vnet_hdr` turns the transmit
//! offloads on) come back on `del-port` and when the daemon exits, on the
//! switch end and on the veth peer (native XDP on a veth turns the peer's
//! TSO off until it is detached). Needs root and ethtool (skipped
//! otherwise); namespaces `nfir<pid>-*`, removed by the lab's guard.

mod common;
use common::{have_with, lab_possible, NsLab};

/// `ethtool -k IFACE` in node `n`, the lines that can change (fixed
/// features cannot).
fn features(lab: &NsLab, n: &str, iface: &str) -> Vec<String> {
    lab.must(n, &["ethtool", "-k", iface])
        .lines()
        .filter(|l| l.contains(": ") && !l.contains("[fixed]"))
        .map(|l| l.trim().to_string())
        .collect()
}

fn feature<'a>(f: &'a [String], name: &str) -> &'a str {
    f.iter()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no `{name}` in {f:?}"))
}

/// Does `iface` (in node sw) have an XDP program attached?
fn xdp_attached(lab: &NsLab, iface: &str) -> bool {
    lab.must("sw", &["ip", "link", "show", "dev", iface])
        .contains("xdp")
}

#[test]
fn port_offload_settings_are_restored_on_del_port_and_exit() {
    if !lab_possible() {
        return;
    }
    if !have_with("ethtool", "--version") {
        common::skipped("`ethtool` not installed");
        return;
    }
    let mut lab = NsLab::new("nfir", "", &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    // A user's own choice the afpacket port overrides while it runs.
    lab.must("sw", &["ethtool", "-K", "p2", "tso", "off", "tx", "off"]);
    let before = [
        features(&lab, "sw", "p1"),
        features(&lab, "h1", "eth0"),
        features(&lab, "sw", "p2"),
        features(&lab, "h2", "eth0"),
    ];
    assert_eq!(feature(&before[0], "tcp-segmentation-offload"), "on");
    assert_eq!(feature(&before[2], "tcp-segmentation-offload"), "off");

    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["add-port", "br0", "p1", "--type", "afxdp"])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    lab.cli(&["add-port", "br0", "p2", "--type", "afpacket"])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    // The ports did change them (else this test proves nothing).
    let during = features(&lab, "sw", "p1");
    assert_eq!(feature(&during, "tcp-segmentation-offload"), "off");
    assert_eq!(feature(&during, "generic-receive-offload"), "off");
    let during = features(&lab, "sw", "p2");
    assert_eq!(feature(&during, "tcp-segmentation-offload"), "on");

    // del-port puts p1 (and its peer) back.
    lab.cli(&["del-port", "br0", "p1"]).unwrap();
    assert_eq!(features(&lab, "sw", "p1"), before[0], "p1 after del-port");
    assert_eq!(features(&lab, "h1", "eth0"), before[1], "p1's peer");
    assert!(!xdp_attached(&lab, "p1"), "XDP left on p1 after del-port");

    // Daemon exit puts p2 back; add p1 again so exit covers afxdp too.
    lab.cli(&["add-port", "br0", "p1", "--type", "afxdp"])
        .unwrap();
    assert_eq!(
        feature(&features(&lab, "sw", "p1"), "tcp-segmentation-offload"),
        "off"
    );
    lab.stop_daemon();
    assert_eq!(features(&lab, "sw", "p1"), before[0], "p1 after exit");
    assert_eq!(
        features(&lab, "h1", "eth0"),
        before[1],
        "p1's peer after exit"
    );
    assert_eq!(
        features(&lab, "sw", "p2"),
        before[2],
        "p2 after exit\n{}",
        lab.daemon_log()
    );
    assert_eq!(
        features(&lab, "h2", "eth0"),
        before[3],
        "p2's peer after exit"
    );
    assert!(!xdp_attached(&lab, "p1"), "XDP left on p1 after exit");

    // The default port (a TC port under offload auto) changes nothing on
    // its interface, and its upcall pair goes with the daemon.
    lab.restart_daemon();
    // (The daemon brought br0 back from its config: start afresh.)
    lab.cli(&["del-br", "br0"]).unwrap();
    assert_eq!(features(&lab, "sw", "p1"), before[0]);
    lab.cli(&["add-br", "br0"]).unwrap();
    let out = lab
        .cli(&["add-port", "br0", "p1"])
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    assert!(out.contains("tc"), "default port type: {out}");
    assert_eq!(features(&lab, "sw", "p1"), before[0], "p1 as a TC port");
    assert_eq!(features(&lab, "h1", "eth0"), before[1], "its peer");
    assert!(lab.must("sw", &["ip", "-o", "link"]).contains("nfu"));
    lab.stop_daemon();
    assert_eq!(features(&lab, "sw", "p1"), before[0], "p1 after exit");
    let links = lab.must("sw", &["ip", "-o", "link"]);
    assert!(
        !links.contains("nfu"),
        "upcall pair left after exit: {links}"
    );
}
