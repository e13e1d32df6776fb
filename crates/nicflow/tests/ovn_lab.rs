//! The two-chassis OVN lab's connectivity matrix (issue 30, item 4): real
//! ovsdb-server, ovn-northd and ovn-controller programming the vswitch of two
//! network-namespace "hypervisors", Geneve between them (see
//! `nicflow::ovn`).
//!
//! `ovn_lab_matrix` runs the mix named by `NICFLOW_OVN_VSWITCH` (`ovs`, the
//! default: ovs-vswitchd on both chassis; `nicflow`; `mixed`: nicflow on ch1)
//! and, with ovs-vswitchd, writes the flows ovn-controller installed and the
//! OpenFlow message types it sent to `$CARGO_TARGET_TMPDIR/ovn-lab-ovs/`
//! (or `NICFLOW_OVN_ARTIFACTS`). The `nicflow` tests run the same matrix with
//! `nicflow vswitchd` on every chassis and on one; they skip while `nicflow
//! vswitchd --help` fails.
//!
//! Run: `cargo test -p nicflow --test ovn_lab -- --nocapture` (root).

mod common;

use common::skipped;
use nicflow::ovn::{self, OvnLab, OvnLabSpec, Vswitch, VMS};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One lab at a time: two would only fight over two cores.
static ONE_LAB: Mutex<()> = Mutex::new(());

fn possible(mix: &[Vswitch; 2]) -> bool {
    if !common::is_root() {
        skipped("needs root (namespaces, veths, OVS daemons)");
        return false;
    }
    let missing = ovn::missing_programs(mix);
    if !missing.is_empty() {
        skipped(&format!(
            "OVN lab needs {}: apt-get install ovn-central ovn-host openvswitch-switch (scripts/setup.sh)",
            missing.join(", ")
        ));
        return false;
    }
    for (tool, arg) in [
        ("curl", "--version"),
        ("python3", "--version"),
        ("dhclient", "--version"),
        ("ss", "-V"),
        ("ping", "-V"),
    ] {
        if !common::have_with(tool, arg) {
            skipped(&format!("OVN lab needs `{tool}`"));
            return false;
        }
    }
    true
}

/// The program started as `PROG vswitchd ...` for nicflow chassis: this
/// build's `nicflow`, or `NICFLOW_OVN_NICFLOW_BIN` (a shim that checks the
/// lab's plumbing, e.g. one that execs ovs-vswitchd without its first
/// argument).
fn nicflow_bin() -> PathBuf {
    std::env::var_os("NICFLOW_OVN_NICFLOW_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(common::nicflow_bin)
}

fn nicflow_vswitchd_available() -> Result<(), String> {
    let out = std::process::Command::new(nicflow_bin())
        .args(["vswitchd", "--help"])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string())
    }
}

#[test]
fn ovn_lab_matrix() {
    let mode = std::env::var("NICFLOW_OVN_VSWITCH").unwrap_or_else(|_| "ovs".into());
    let mix = ovn::vswitch_mix(&mode, &nicflow_bin()).expect("NICFLOW_OVN_VSWITCH");
    if mix.iter().any(|v| matches!(v, Vswitch::Nicflow(_))) {
        if let Err(why) = nicflow_vswitchd_available() {
            skipped(&format!(
                "NICFLOW_OVN_VSWITCH={mode}: `nicflow vswitchd --help` fails ({why})"
            ));
            return;
        }
    }
    run_matrix(&mode, mix);
}

#[test]
fn ovn_lab_matrix_nicflow_every_chassis() {
    if let Err(why) = nicflow_vswitchd_available() {
        skipped(&format!(
            "`nicflow vswitchd --help` fails ({why}): no nicflow vswitchd yet"
        ));
        return;
    }
    let mix = ovn::vswitch_mix("nicflow", &nicflow_bin()).unwrap();
    run_matrix("nicflow", mix);
}

#[test]
fn ovn_lab_matrix_nicflow_one_chassis() {
    if let Err(why) = nicflow_vswitchd_available() {
        skipped(&format!(
            "`nicflow vswitchd --help` fails ({why}): no nicflow vswitchd yet"
        ));
        return;
    }
    let mix = ovn::vswitch_mix("mixed", &nicflow_bin()).unwrap();
    run_matrix("mixed", mix);
}

struct Matrix {
    rows: Vec<(String, bool, String)>,
}

impl Matrix {
    fn row(&mut self, name: &str, ok: bool, detail: impl Into<String>) {
        let detail = detail.into();
        eprintln!("  [{}] {name}: {detail}", if ok { " ok " } else { "FAIL" });
        self.rows.push((name.to_string(), ok, detail));
    }

    fn failed(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| !r.1)
            .map(|r| r.0.as_str())
            .collect()
    }
}

fn ip4(name: &str) -> IpAddr {
    IpAddr::V4(ovn::vm(name).unwrap().ip4)
}

fn run_matrix(mode: &str, mix: [Vswitch; 2]) {
    if !possible(&mix) {
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|p| p.into_inner());
    let mut spec = OvnLabSpec::new(mix.clone());
    spec.debug_openflow = true;
    spec.keep = std::env::var_os("NICFLOW_OVN_KEEP").is_some();
    let t0 = Instant::now();
    let mut lab = OvnLab::up(&spec).expect("OVN lab up");
    eprintln!(
        "OVN lab {} ({mode}: ch1 {}, ch2 {}) up in {:.1} s",
        lab.prefix(),
        mix[0].label(),
        mix[1].label(),
        t0.elapsed().as_secs_f64()
    );
    let timing = match lab.install_topology(Duration::from_secs(90)) {
        Ok(t) => t,
        Err(e) => {
            diagnostics(&lab);
            panic!("installing the NB topology: {e}");
        }
    };
    eprintln!(
        "NB topology: nbctl {:.2} s, all ports ovn-installed after {:.2} s, pings pass after {:.2} s",
        timing.nbctl.as_secs_f64(),
        timing.installed.as_secs_f64(),
        timing.ready.as_secs_f64()
    );
    let mut m = Matrix { rows: Vec::new() };
    let installed = lab.installed_ports().unwrap_or_default();
    m.row(
        "every VM port ovn-installed",
        installed.len() == VMS.len(),
        format!("{installed:?}"),
    );

    // DHCP first: vm3 has no address until OVN's native DHCP gives it one.
    let want = ovn::vm("vm3").unwrap().ip4;
    let got = lab.dhcp("vm3", Duration::from_secs(30));
    m.row(
        "DHCP lease (vm3, native OVN DHCPv4)",
        got.as_ref().is_ok_and(|g| *g == want),
        format!("got {got:?}, NB says {want}"),
    );

    let limit = Duration::from_secs(5);
    for (what, from, to) in [
        (
            "VM to VM, same chassis (vm1 -> vm3, ch1)",
            "vm1",
            ip4("vm3"),
        ),
        (
            "VM to VM, across chassis (vm1 ch1 -> vm2 ch2, Geneve)",
            "vm1",
            ip4("vm2"),
        ),
        (
            "VM to VM, across chassis, IPv6 (vm1 -> vm2)",
            "vm1",
            IpAddr::V6(ovn::vm("vm2").unwrap().ip6.unwrap()),
        ),
        (
            "through the router ls1 -> ls2 (vm1 -> vm4, ACL allows ICMP)",
            "vm1",
            ip4("vm4"),
        ),
        (
            "through the router ls2 -> ls1 (vm4 -> vm3)",
            "vm4",
            ip4("vm3"),
        ),
        (
            "router port answers (vm2 -> 198.18.10.1)",
            "vm2",
            IpAddr::V4(ovn::router_ip("ls1")),
        ),
    ] {
        let ok = lab.ping_until(from, to, limit);
        m.row(what, ok, format!("ping {from} -> {to}"));
    }

    // Servers: backends answer their name; vm4 also listens on the denied port.
    for v in VMS.iter().filter(|v| v.lb_backend) {
        lab.serve_http(v.name, ovn::BACKEND_PORT)
            .expect("http server");
    }
    lab.serve_http("vm4", ovn::DENIED_PORT)
        .expect("http server");
    let ext_log = lab
        .serve_http("ext", ovn::BACKEND_PORT)
        .expect("http server");
    for (node, port) in [
        ("vm2", ovn::BACKEND_PORT),
        ("vm4", ovn::BACKEND_PORT),
        ("vm4", ovn::DENIED_PORT),
        ("ext", ovn::BACKEND_PORT),
    ] {
        lab.wait_listening(node, port, Duration::from_secs(10))
            .expect("server listening");
    }
    let vm4 = ovn::vm("vm4").unwrap().ip4;
    let t = Duration::from_secs(3);
    let allow = (0..3).find_map(|_| lab.http_get("vm1", vm4, ovn::BACKEND_PORT, t));
    m.row(
        "ACL allow-related: TCP 8080 vm1 -> vm4",
        allow.as_deref() == Some("vm4"),
        format!("answer {allow:?}"),
    );
    let local = lab.http_get("vm4", std::net::Ipv4Addr::LOCALHOST, ovn::DENIED_PORT, t);
    let denied = lab.http_get("vm1", vm4, ovn::DENIED_PORT, Duration::from_secs(2));
    m.row(
        "ACL drop: TCP 9999 vm1 -> vm4 (server up, answers locally)",
        denied.is_none() && local.as_deref() == Some("vm4"),
        format!("remote {denied:?}, local {local:?}"),
    );
    let logged = (0..30).any(|_| {
        let hit = lab.chassis_log(1, "ovn-controller").lines().any(|l| {
            l.contains("acl_log") && l.contains(ovn::DROP_ACL_NAME) && l.contains("verdict=drop")
        });
        if !hit {
            std::thread::sleep(Duration::from_millis(100));
        }
        hit
    });
    m.row(
        "ACL drop is logged (ovn-controller acl_log on ch2)",
        logged,
        ovn::DROP_ACL_NAME,
    );

    let mut seen = BTreeMap::new();
    for _ in 0..30 {
        if let Some(who) = lab.http_get("vm1", ovn::LB_VIP, ovn::LB_PORT, t) {
            *seen.entry(who).or_insert(0) += 1;
        }
        if seen.len() >= 2 {
            break;
        }
    }
    let backends: Vec<&str> = VMS
        .iter()
        .filter(|v| v.lb_backend)
        .map(|v| v.name)
        .collect();
    m.row(
        "load balancer reaches every backend (vm1 -> VIP 198.18.200.10:80)",
        backends.iter().all(|b| seen.contains_key(*b)),
        format!("answers {seen:?}"),
    );

    for from in ["vm1", "vm4"] {
        let got = lab.http_get(from, ovn::EXT_HOST_IP, ovn::BACKEND_PORT, t);
        m.row(
            &format!("SNAT to the external host ({from} -> 198.18.30.100 via gateway ch1)"),
            got.as_deref() == Some("ext"),
            format!("answer {got:?}"),
        );
    }
    let access = std::fs::read_to_string(&ext_log).unwrap_or_default();
    let peers: Vec<&str> = access
        .lines()
        .filter(|l| l.contains("\"GET "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    m.row(
        "external host sees only the router's SNAT address",
        !peers.is_empty() && peers.iter().all(|p| *p == ovn::SNAT_IP.to_string()),
        format!("client addresses {peers:?}"),
    );

    for ch in 0..2 {
        let log = lab.chassis_log(ch, "ovn-controller");
        let (ok, detail) = controller_log_clean(&log);
        m.row(
            &format!(
                "ch{} ovn-controller: no OpenFlow error, no reconnect",
                ch + 1
            ),
            ok,
            detail,
        );
    }

    if mix == [Vswitch::Ovs, Vswitch::Ovs] {
        let dir = std::env::var_os("NICFLOW_OVN_ARTIFACTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ovn-lab-ovs"));
        match dump_artifacts(&lab, &dir) {
            Ok(summary) => {
                eprintln!("{summary}");
                eprintln!("artifacts in {}", dir.display());
            }
            Err(e) => m.row("artifacts dumped", false, e),
        }
    }

    let failed = m.failed();
    if !failed.is_empty() {
        diagnostics(&lab);
    }
    let prefix = lab.prefix().to_string();
    let dir = lab.dir().to_path_buf();
    if !spec.keep {
        lab.teardown().expect("teardown");
        let left: Vec<String> = nicflow_os::netns::list()
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "namespaces left after teardown: {left:?}");
        assert!(!dir.exists(), "{} left after teardown", dir.display());
    }
    drop(lab);
    assert!(failed.is_empty(), "OVN lab ({mode}) failed: {failed:?}");
}

/// No OpenFlow error, no dropped `br-int.mgmt` connection, and each of
/// ovn-controller's three OpenFlow connections (features, ofctrl, pinctrl)
/// connected once.
fn controller_log_clean(log: &str) -> (bool, String) {
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("OpenFlow error")
                || l.contains("|ERR|")
                || l.contains("|EMER|")
                || (l.contains("br-int.mgmt")
                    && (l.contains("connection dropped")
                        || l.contains("connection closed")
                        || l.contains("disconnected")
                        || l.contains("connection failed")
                        || l.contains("Broken pipe")
                        || l.contains("timed out")))
        })
        .collect();
    let connects = log
        .lines()
        .filter(|l| l.contains("br-int.mgmt: connected"))
        .count();
    let ok = bad.is_empty() && (1..=3).contains(&connects);
    (
        ok,
        format!(
            "{connects} br-int.mgmt connects; {} bad lines{}",
            bad.len(),
            bad.first()
                .map(|l| format!(", first: {l}"))
                .unwrap_or_default()
        ),
    )
}

fn diagnostics(lab: &OvnLab) {
    eprintln!("--- OVN lab {} diagnostics ---", lab.prefix());
    for ch in 0..2 {
        for d in ["ovn-controller", "ovs-vswitchd"] {
            let log = lab.chassis_log(ch, d);
            let lines: Vec<&str> = log.lines().filter(|l| !l.contains("|DBG|")).collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            eprintln!(
                "ch{} {d}.log (last non-debug lines):\n{}",
                ch + 1,
                tail.join("\n")
            );
        }
    }
    if let Ok(s) = lab.nbctl(&["show"]) {
        eprintln!("ovn-nbctl show:\n{s}");
    }
    if let Ok(s) = lab.sbctl(&["show"]) {
        eprintln!("ovn-sbctl show:\n{s}");
    }
}

/// Save what ovn-controller installed and sent on each chassis.
fn dump_artifacts(lab: &OvnLab, dir: &Path) -> Result<String, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    let mut vocab = ovn::FlowVocabulary::default();
    let mut per_chassis = Vec::new();
    let mut all_types: BTreeMap<String, [usize; 2]> = BTreeMap::new();
    for ch in 0..2 {
        let c = format!("ch{}", ch + 1);
        let of = |args: &[&str]| lab.ofctl(ch, args).map_err(|e| e.to_string());
        let flows = of(&[
            "-O",
            "OpenFlow15",
            "--no-stats",
            "--sort",
            "dump-flows",
            "br-int",
        ])?;
        write(&format!("{c}-flows.txt"), &flows)?;
        write(
            &format!("{c}-groups.txt"),
            &of(&["-O", "OpenFlow15", "dump-groups", "br-int"])?,
        )?;
        write(
            &format!("{c}-tlv-map.txt"),
            &of(&["-O", "OpenFlow15", "dump-tlv-map", "br-int"])?,
        )?;
        write(
            &format!("{c}-meters.txt"),
            &of(&["-O", "OpenFlow15", "dump-meters", "br-int"])?,
        )?;
        let mut v = ovn::FlowVocabulary::default();
        v.add_dump(&flows);
        vocab.add_dump(&flows);
        let types = ovn::openflow_message_types(&lab.chassis_log(ch, "ovs-vswitchd"));
        let mut t = String::new();
        for (ty, n) in &types {
            t.push_str(&format!("{n:8} {ty}\n"));
            all_types.entry(ty.clone()).or_default()[ch] = *n;
        }
        write(&format!("{c}-openflow-messages.txt"), &t)?;
        per_chassis.push(format!(
            "{c}: {} flows in {} tables",
            v.flows,
            v.tables.len()
        ));
    }
    let mut s = String::new();
    s.push_str("# OVN lab: what ovn-controller (OVN 23.03) programs on br-int\n\n");
    s.push_str("Captured by `cargo test -p nicflow --test ovn_lab` with ovs-vswitchd 3.1 (netdev datapath) on both chassis.\n");
    s.push_str(&format!("{}\n\n", per_chassis.join("; ")));
    s.push_str("## OpenFlow message types received by ovs-vswitchd (vconn:dbg), ch1 / ch2\n\n");
    for (ty, n) in &all_types {
        s.push_str(&format!("- {ty}: {} / {}\n", n[0], n[1]));
    }
    s.push_str("\n## Match fields (flows using each, both chassis)\n\n");
    for (f, n) in &vocab.match_fields {
        s.push_str(&format!("- {f}: {n}\n"));
    }
    s.push_str("\n## Actions (uses, both chassis; set_field/load/move by destination)\n\n");
    for (a, n) in &vocab.actions {
        s.push_str(&format!("- {a}: {n}\n"));
    }
    s.push_str(&format!(
        "\n## Tables used\n\n{}\n",
        vocab
            .tables
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    write("summary.md", &s)?;
    Ok(s)
}

#[test]
fn controller_log_check_catches_errors_and_reconnects() {
    let clean = "2026|00018|rconn|INFO|unix:/r/br-int.mgmt: connected\n\
                 2026|00003|rconn(ovn_pinctrl0)|INFO|unix:/r/br-int.mgmt: connected\n\
                 2026|00020|rconn|INFO|unix:/r/br-int.mgmt: connected\n";
    assert!(controller_log_clean(clean).0);
    let error = format!("{clean}2026|00040|ofctrl|INFO|OpenFlow error: OFPT_ERROR (OF1.5) (xid=0x5): OFPBAC_BAD_TYPE\n");
    assert!(!controller_log_clean(&error).0);
    let dropped = format!(
        "{clean}2026|00041|rconn|WARN|unix:/r/br-int.mgmt: connection dropped (Broken pipe)\n"
    );
    assert!(!controller_log_clean(&dropped).0);
    let again = format!("{clean}2026|00042|rconn|INFO|unix:/r/br-int.mgmt: connected\n");
    assert!(!controller_log_clean(&again).0);
    assert!(!controller_log_clean("").0, "never connected is not clean");
}
