//! A daemon killed with `kill -9` cannot put its interfaces back; the next
//! daemon does. An `afxdp` port turns the interface's offloads off and an
//! `afpacket` port with `vnet_hdr` turns transmit offloads on; their
//! original states are recorded (`iface-state/` next to the
//! configuration, 0600 in 0700) before they change. After `kill -9` the
//! restarted daemon puts the originals back before it reopens its ports,
//! so its own `del-port` (and its exit) restore the interface's real
//! original state, not the degraded one the dead daemon left; an
//! interface whose port is no longer configured is restored at start.
//! Features are compared by name, wanted and active (what `ethtool -k`
//! shows), switch end and veth peer.
//!
//! Namespaces `nfic<pid>-*`, removed by the lab's guard even on failure;
//! the daemons are this test's own children, killed by pid. Needs root and
//! `ip`; skips with a message otherwise.

mod common;

use common::{lab_possible, NsLab};
use nicflow::os::ethtool;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Wanted and active state of every feature of `dev` in node `n`.
fn features(lab: &NsLab, n: &str, dev: &str) -> Vec<(String, bool, bool)> {
    let ns = lab.ns(n);
    let wanted = ethtool::wanted(Some(&ns), dev).unwrap();
    let active = ethtool::active(Some(&ns), dev).unwrap();
    wanted
        .into_iter()
        .zip(active)
        .map(|((name, w), (_, a))| (name, w, a))
        .collect()
}

fn active(f: &[(String, bool, bool)], name: &str) -> bool {
    f.iter()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("no feature {name}"))
        .2
}

/// The daemon in node sw, from the lab's config file, logging to its log;
/// returns once it answers.
fn start(lab: &NsLab) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(lab.log_path())
        .unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &lab.ns("sw")])
        .arg(common::nicflow_bin())
        .arg("--socket")
        .arg(lab.sock())
        .arg("daemon")
        .arg("--config")
        .arg(lab.config_path())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while lab.cli(&["show"]).is_err() {
        assert!(
            // Loading the BPF programs takes seconds on a busy machine.
            t0.elapsed() < Duration::from_secs(60),
            "daemon did not come up:\n{}",
            lab.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

/// Send `sig` to our daemon and reap it.
fn signal(mut d: Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child (`ip netns exec` execs the daemon).
    unsafe { libc::kill(d.id() as libc::pid_t, sig) };
    let t0 = Instant::now();
    while d.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = d.kill();
            let _ = d.wait();
            panic!("daemon did not exit on signal {sig}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn records(lab: &NsLab) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(lab.dir().join("iface-state")) {
        Ok(d) => d.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn offloads_come_back_after_kill_9_and_restart() {
    if !lab_possible() {
        return;
    }
    let lab = NsLab::new("nfic", "", &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    // A user's own choice, which the afpacket port (vnet_hdr) overrides.
    ethtool::set(Some(&lab.ns("sw")), "p2", ethtool::is_tx_checksum, false).unwrap();
    let before = [
        features(&lab, "sw", "p1"),
        features(&lab, "h1", "eth0"),
        features(&lab, "sw", "p2"),
    ];
    assert!(active(&before[0], "tx-tcp-segmentation"));
    assert!(!active(&before[2], "tx-checksum-ip-generic"));

    let d = start(&lab);
    let must = |args: &[&str]| {
        lab.cli(args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}\n{}", lab.daemon_log()))
    };
    must(&["add-br", "br0"]);
    must(&["add-port", "br0", "p1", "--type", "afxdp"]);
    must(&[
        "add-port",
        "br0",
        "p2",
        "--type",
        "afpacket",
        "vnet_hdr=true",
    ]);
    let degraded = |lab: &NsLab, when: &str| {
        let p1 = features(lab, "sw", "p1");
        assert!(
            !active(&p1, "tx-tcp-segmentation") && !active(&p1, "rx-gro"),
            "{when}: the afxdp port did not turn p1's offloads off: {p1:?}"
        );
        let p2 = features(lab, "sw", "p2");
        assert!(
            active(&p2, "tx-checksum-ip-generic"),
            "{when}: the afpacket port did not turn p2's checksum offload on"
        );
    };
    degraded(&lab, "first daemon");
    // The originals are on disk, owner-only, before anything else happens.
    let recs = records(&lab);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(mode(&lab.dir().join("iface-state")), 0o700);
    for r in &recs {
        assert_eq!(mode(r), 0o600, "{}", r.display());
    }

    // kill -9: nothing can be put back by the daemon itself.
    signal(d, libc::SIGKILL);
    degraded(&lab, "after kill -9");
    // The restarted daemon reopens both ports from its configuration...
    let d = start(&lab);
    degraded(&lab, "restarted daemon");
    // ...and del-port gives back what the interface had before the
    // *first* daemon, not what the dead one left.
    must(&["del-port", "br0", "p1"]);
    assert_eq!(
        features(&lab, "sw", "p1"),
        before[0],
        "p1 after kill -9, restart, del-port\n{}",
        lab.daemon_log()
    );
    assert_eq!(features(&lab, "h1", "eth0"), before[1], "p1's peer");
    // Exit (SIGTERM) restores p2 the same way.
    signal(d, libc::SIGTERM);
    assert_eq!(
        features(&lab, "sw", "p2"),
        before[2],
        "p2 after kill -9, restart, exit\n{}",
        lab.daemon_log()
    );
    assert!(records(&lab).is_empty(), "{:?}", records(&lab));

    // A crash, then a daemon whose configuration no longer has the port
    // (removed by hand while it was down): restored when it starts.
    let d = start(&lab);
    must(&["add-port", "br0", "p1", "--type", "afxdp"]);
    degraded(&lab, "third daemon");
    signal(d, libc::SIGKILL);
    std::fs::write(lab.config_path(), "").unwrap();
    let d = start(&lab);
    assert_eq!(
        features(&lab, "sw", "p1"),
        before[0],
        "p1 restored at start\n{}",
        lab.daemon_log()
    );
    assert_eq!(
        features(&lab, "sw", "p2"),
        before[2],
        "p2 restored at start"
    );
    assert!(records(&lab).is_empty(), "{:?}", records(&lab));
    signal(d, libc::SIGTERM);
    assert_eq!(features(&lab, "sw", "p1"), before[0]);
    assert_eq!(features(&lab, "h1", "eth0"), before[1]);
}
