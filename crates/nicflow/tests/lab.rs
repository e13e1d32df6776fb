//! The namespace lab end to end: `up`, `exec`, traffic through a nicflow
//! daemon, `down`, and cleanup after crashes and failed `up`s.
//!
//! These tests create network namespaces and veths, so they need root; as
//! any other user each test prints "skipping: needs root" and passes. Every
//! test uses its own lab name (with the pid), so they run in parallel with
//! each other and with labs a developer has up, and a guard runs `down`
//! even when an assertion fails. Notices that must be seen even without
//! `--nocapture` (skips) are written straight to stderr.

mod common;

use nicflow::control::daemon::request;
use nicflow::control::proto::Request;
use nicflow::lab::{self, names, sys, LabError, LabOptions, Topology};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A notice that bypasses the test harness's output capture.
fn notice(msg: &str) {
    match msg.strip_prefix("skipping: ") {
        Some(reason) => common::skipped(reason),
        None => {
            let _ = writeln!(std::io::stderr(), "{msg}");
        }
    }
}

fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let has_ip = std::process::Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !root || !has_ip {
        notice("skipping: needs root (and iproute2)");
    }
    root && has_ip
}

fn opts() -> LabOptions {
    LabOptions::with_binary(PathBuf::from(env!("CARGO_BIN_EXE_nicflow")))
}

/// Runs `down` when dropped, so a failing assertion leaves nothing behind.
struct Guard {
    lab: String,
    opts: LabOptions,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(e) = lab::down(&self.lab, &self.opts) {
            notice(&format!("guard: down {}: {e}", self.lab));
        }
    }
}

fn lab_name(tag: &str) -> String {
    format!("t{}{tag}", std::process::id())
}

/// Two hosts on one switch. Host names carry `tag` so that `exec` without
/// a topology finds exactly one lab even with other tests' labs up.
fn two_hosts(lab: &str, tag: &str, switch_ns: &str) -> Topology {
    Topology::parse(&format!(
        r#"
        name = "{lab}"
        [[host]]
        name = "{tag}1"
        [[host]]
        name = "{tag}2"
        [[switch]]
        name = "sw1"
        namespace = "{switch_ns}"
        [[link]]
        a = "{tag}1:eth0"
        b = "sw1:p1"
        addresses = ["198.18.0.1/24", "2001:db8::1/64"]
        [[link]]
        a = "{tag}2:eth0"
        b = "sw1:p2"
        addresses = ["198.18.0.2/24", "2001:db8::2/64"]
        "#
    ))
    .expect("test topology is valid")
}

fn lab_namespaces(lab: &str) -> Vec<String> {
    sys::list_namespaces()
        .unwrap()
        .into_iter()
        .filter(|n| names::is_lab_namespace(lab, n))
        .collect()
}

fn lab_links(lab: &str) -> Vec<String> {
    sys::list_links()
        .unwrap()
        .into_iter()
        .filter(|n| names::is_lab_veth(lab, n))
        .collect()
}

fn daemon_pids(st: &lab::LabState) -> Vec<u32> {
    st.daemons.iter().filter_map(|d| d.pid).collect()
}

/// Nothing of lab `lab` is left: namespaces, root-side veths, daemons,
/// state directory.
fn assert_gone(lab: &str, pids: &[u32], opts: &LabOptions) {
    assert_eq!(lab_namespaces(lab), Vec::<String>::new(), "namespaces left");
    assert_eq!(lab_links(lab), Vec::<String>::new(), "veths left");
    let dir = opts.lab_dir(lab);
    for &p in pids {
        assert!(!sys::alive(p), "daemon pid {p} still runs");
    }
    assert!(sys::find_daemons(&dir).is_empty(), "daemons left");
    assert!(!dir.exists(), "state dir {} left", dir.display());
}

/// `(port, iface)` of every port the switch has not attached.
fn unattached(socket: &Path) -> Vec<String> {
    let resp = request(socket, &Request::Show).expect("show");
    assert!(resp.ok, "{resp:?}");
    resp.data
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|br| br["ports"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["ofport"].is_null())
        .map(|p| format!("{} ({})", p["name"], p["iface"]))
        .collect()
}

fn ping(topo: &Topology, from: &str, to: &str, opts: &LabOptions) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..5 {
        let out = lab::exec_output(Some(topo), from, &["ping", "-c", "1", "-W", "1", to], opts)
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            return Ok(());
        }
        last = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("ping {from} -> {to} failed 5 times:\n{last}"))
}

#[test]
fn up_exec_ping_down() {
    if !privileged() {
        return;
    }
    let opts = opts();
    let name = lab_name("u");
    let topo = two_hosts(&name, "u", "own");
    let _guard = Guard {
        lab: name.clone(),
        opts: opts.clone(),
    };

    let report = lab::up(&topo, &opts).expect("up");
    let st = &report.state;
    assert!(st.complete);
    let summary = report.to_string();
    assert!(summary.contains("is up"), "{summary}");

    // Namespaces, daemon, socket.
    let mut nss = lab_namespaces(&name);
    nss.sort();
    assert_eq!(
        nss,
        vec![
            format!("nf-{name}-sw1"),
            format!("nf-{name}-u1"),
            format!("nf-{name}-u2")
        ]
    );
    assert!(
        lab_links(&name).is_empty(),
        "own-namespace switch: nothing in root"
    );
    let pids = daemon_pids(st);
    assert_eq!(pids.len(), 1);
    assert!(sys::alive(pids[0]));
    let sock = lab::switch_socket(&name, "sw1", &opts);
    assert!(sock.exists());
    assert!(request(&sock, &Request::Show).unwrap().ok);

    // A second `up` refuses.
    assert!(matches!(
        lab::up(&topo, &opts),
        Err(LabError::AlreadyUp { .. })
    ));

    // exec: addresses, exit codes, lookup without the topology.
    let out = lab::exec_output(
        Some(&topo),
        "u1",
        &["ip", "-br", "addr", "show", "dev", "eth0"],
        &opts,
    )
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("198.18.0.1/24"), "{text}");
    assert!(text.contains("2001:db8::1/64"), "{text}");
    assert!(text.contains("UP"), "{text}");
    let lo = lab::exec_output(
        None,
        "u2",
        &["ip", "-br", "addr", "show", "dev", "lo"],
        &opts,
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&lo.stdout).contains("127.0.0.1/8"));
    assert_eq!(
        lab::exec(Some(&topo), "u1", &["sh", "-c", "exit 7"], &opts).unwrap(),
        7
    );
    assert!(matches!(
        lab::exec(Some(&topo), "nope", &["true"], &opts),
        Err(LabError::UnknownNode { .. })
    ));
    // The switch's ports are in its namespace, up.
    let sw = lab::exec_output(Some(&topo), "sw1", &["ip", "-br", "link"], &opts).unwrap();
    let sw = String::from_utf8_lossy(&sw.stdout);
    for link in 0..2 {
        let n = names::veth_name(&name, link, names::Side::B);
        assert!(sw.contains(&n), "{n} missing in:\n{sw}");
    }

    // Traffic through the switch's AF_PACKET ports.
    let missing = unattached(&sock);
    assert!(missing.is_empty(), "switch ports not attached: {missing:?}");
    assert!(report.unattached.is_empty());
    ping(&topo, "u1", "198.18.0.2", &opts).unwrap();
    ping(&topo, "u2", "198.18.0.1", &opts).unwrap();
    ping(&topo, "u1", "2001:db8::2", &opts).unwrap();

    // A program left running in a host (a daemonized server, say).
    let bg = lab::exec_output(
        Some(&topo),
        "u2",
        &["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"],
        &opts,
    )
    .unwrap();
    let bg: u32 = String::from_utf8_lossy(&bg.stdout).trim().parse().unwrap();
    assert!(sys::alive(bg));

    // down removes everything, stray programs included; a second down is a
    // no-op.
    let down = lab::down(&name, &opts).expect("down");
    assert_eq!(down.processes, vec![bg]);
    assert!(!sys::alive(bg), "the stray process survived down");
    assert!(down.had_state);
    assert_eq!(down.namespaces.len(), 3);
    assert_eq!(down.daemons, pids);
    assert!(down.killed.is_empty(), "the daemon should stop on SIGTERM");
    assert_gone(&name, &pids, &opts);
    let again = lab::down(&name, &opts).expect("second down");
    assert!(!again.had_state && again.namespaces.is_empty() && again.daemons.is_empty());
    assert!(matches!(
        lab::exec(Some(&topo), "u1", &["true"], &opts),
        Err(LabError::NotUp { .. })
    ));
}

#[test]
fn down_after_the_daemon_was_killed() {
    if !privileged() {
        return;
    }
    let opts = opts();
    let name = lab_name("k");
    // Root-namespace switch: its veth ends live in the root namespace.
    let topo = two_hosts(&name, "k", "root");
    let _guard = Guard {
        lab: name.clone(),
        opts: opts.clone(),
    };
    let report = lab::up(&topo, &opts).expect("up");
    assert_eq!(lab_links(&name).len(), 2);
    assert_eq!(lab_namespaces(&name).len(), 2);
    let pids = daemon_pids(&report.state);
    for &p in &pids {
        // SAFETY: kill(2) on the daemon this test started.
        unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
    }
    // SIGKILL is asynchronous: wait until it has landed (`alive` also
    // reaps our dead child), so `down` really meets a dead daemon.
    for _ in 0..200 {
        if !pids.iter().any(|&p| sys::alive(p)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let down = lab::down(&name, &opts).expect("down");
    assert!(down.had_state);
    assert!(down.daemons.is_empty(), "the daemon was already dead");
    assert_eq!(down.namespaces.len(), 2);
    assert_gone(&name, &pids, &opts);
}

#[test]
fn down_without_a_state_file_goes_by_names() {
    if !privileged() {
        return;
    }
    let opts = opts();
    // Host names no other lab uses (benchmarks name theirs c1/s1...), so
    // `exec` below can only find this lab's hosts.
    let name = lab_name("s");
    let topo = two_hosts(&name, "dnx", "root");
    let _guard = Guard {
        lab: name.clone(),
        opts: opts.clone(),
    };
    let report = lab::up(&topo, &opts).expect("up");
    let pids = daemon_pids(&report.state);
    std::fs::remove_file(lab::LabState::path(&report.state.dir)).unwrap();
    // Without the record, `exec HOST` cannot find the lab, but `down` can.
    assert!(lab::exec(None, "dnx1", &["true"], &opts).is_err());
    let down = lab::down(&name, &opts).expect("down");
    assert!(!down.had_state);
    assert_eq!(down.daemons, pids, "daemon found by its command line");
    assert_eq!(down.namespaces.len(), 2);
    assert_gone(&name, &pids, &opts);
}

#[test]
fn a_failed_up_removes_what_it_made() {
    if !privileged() {
        return;
    }
    let opts = opts();

    // Fails in the middle: the gateway is in range but not on any subnet.
    let name = lab_name("f");
    let _guard = Guard {
        lab: name.clone(),
        opts: opts.clone(),
    };
    let text = format!(
        r#"
        name = "{name}"
        [[host]]
        name = "f1"
        routes = ["198.19.0.0/24 via 198.18.9.9"]
        [[switch]]
        name = "sw1"
        namespace = "root"
        [[link]]
        a = "f1:eth0"
        b = "sw1:p1"
        addresses = ["198.18.0.1/24"]
        "#
    );
    let topo = Topology::parse(&text).unwrap();
    match lab::up(&topo, &opts) {
        // The kernel's answer to the route request, with its errno.
        Err(LabError::Os(e)) => {
            assert!(
                e.to_string()
                    .starts_with("RTM_NEWROUTE 198.19.0.0/24 via 198.18.9.9: "),
                "{e}"
            );
            assert_eq!(e.errno(), Some(libc::ENETUNREACH), "{e}");
        }
        other => panic!("expected the route to fail, got {other:?}"),
    }
    assert_gone(&name, &[], &opts);

    // Fails at the last step: the daemon exits at once.
    let name = lab_name("d");
    let _guard2 = Guard {
        lab: name.clone(),
        opts: opts.clone(),
    };
    let topo = two_hosts(&name, "d", "own");
    let mut bad = opts.clone();
    bad.nicflow_bin = PathBuf::from("/bin/false");
    match lab::up(&topo, &bad) {
        Err(LabError::DaemonNotReady { switch, why, .. }) => {
            assert_eq!(switch, "sw1");
            assert!(why.contains("exited"), "{why}");
        }
        other => panic!("expected the daemon to fail, got {other:?}"),
    }
    assert_gone(&name, &[], &opts);
}

#[test]
fn down_of_a_lab_that_never_existed_is_fine() {
    if !privileged() {
        return;
    }
    let r = lab::down(&lab_name("n"), &opts()).expect("down");
    assert!(r.namespaces.is_empty() && r.links.is_empty() && r.daemons.is_empty());
    for bad in ["..", "../x", "", "a-b", "A"] {
        assert!(
            matches!(lab::down(bad, &opts()), Err(LabError::Invalid { .. })),
            "{bad}"
        );
    }
}

/// DPU mode: the switch's daemon listens on an abstract socket of its own
/// namespace. The host namespace cannot reach it (it cannot configure the
/// switch); a process inside the switch's namespace can; traffic flows.
#[test]
fn dpu_mode_switch_is_configurable_only_from_its_namespace() {
    if !privileged() {
        return;
    }
    let opts = opts();
    let name = lab_name("d");
    let text = format!(
        r#"
        name = "{name}"
        [[host]]
        name = "d1"
        [[host]]
        name = "d2"
        [[switch]]
        name = "sw1"
        dpu = true
        [[link]]
        a = "d1:eth0"
        b = "sw1:p1"
        addresses = ["198.18.0.1/24"]
        [[link]]
        a = "d2:eth0"
        b = "sw1:p2"
        addresses = ["198.18.0.2/24"]
        "#
    );
    let topo = Topology::parse(&text).expect("dpu topology is valid");
    let _guard = Guard {
        lab: name.clone(),
        opts: opts.clone(),
    };
    lab::up(&topo, &opts).expect("up");
    let sock = lab::dpu_socket(&name, "sw1");
    // From the host: no such socket.
    assert!(
        request(&sock, &Request::Show).is_err(),
        "the host namespace reached a DPU-mode switch"
    );
    assert!(!lab::switch_socket(&name, "sw1", &opts).exists());
    // From inside the switch's namespace: the CLI works.
    let bin = env!("CARGO_BIN_EXE_nicflow");
    let out = lab::exec_output(
        Some(&topo),
        "sw1",
        &[bin, "--socket", sock.to_str().unwrap(), "show"],
        &opts,
    )
    .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("br0"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ping(&topo, "d1", "198.18.0.2", &opts).unwrap();
    // `dpu = true` with the switch in the root namespace is refused.
    let bad = text.replace("dpu = true", "dpu = true\n        namespace = \"root\"");
    let e = Topology::parse(&bad).unwrap_err().to_string();
    assert!(e.contains("dpu = true needs"), "{e}");
}
