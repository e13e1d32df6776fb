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
//! `ovn_lab_faults` kills -9 and restarts a chassis' ovsdb-server,
//! ovn-controller and vswitch in turn under established traffic and checks
//! that the same flows, groups and ports come back, the matrix still
//! passes and the TCP connection survives (docs/ovn.md, "Faults").
//!
//! Run: `cargo test -p nicflow --test ovn_lab -- --nocapture` (root).

mod common;

use common::skipped;
use nicflow::ovn::{self, ChassisDaemon, OvnLab, OvnLabSpec, Vswitch, VMS};
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
    let mut ext_log = None;
    check_matrix(&mut lab, &mut m, &mut ext_log);

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

/// The connectivity matrix rows (every row checked with real traffic);
/// `ext_log` is None the first time (the servers are started then).
fn check_matrix(lab: &mut OvnLab, m: &mut Matrix, ext_log: &mut Option<PathBuf>) {
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

    // Servers (started once): backends answer their name; vm4 also
    // listens on the denied port.
    if ext_log.is_none() {
        for v in VMS.iter().filter(|v| v.lb_backend) {
            lab.serve_http(v.name, ovn::BACKEND_PORT)
                .expect("http server");
        }
        lab.serve_http("vm4", ovn::DENIED_PORT)
            .expect("http server");
        *ext_log = Some(
            lab.serve_http("ext", ovn::BACKEND_PORT)
                .expect("http server"),
        );
    }
    let ext_log = ext_log.clone().unwrap();
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
    let drops_before = lab
        .chassis_log(1, "ovn-controller")
        .lines()
        .filter(|l| {
            l.contains("acl_log") && l.contains(ovn::DROP_ACL_NAME) && l.contains("verdict=drop")
        })
        .count();
    let denied = lab.http_get("vm1", vm4, ovn::DENIED_PORT, Duration::from_secs(2));
    m.row(
        "ACL drop: TCP 9999 vm1 -> vm4 (server up, answers locally)",
        denied.is_none() && local.as_deref() == Some("vm4"),
        format!("remote {denied:?}, local {local:?}"),
    );
    // A new log line for this drop (a run after a fault must log again).
    let drops = |lab: &OvnLab| {
        lab.chassis_log(1, "ovn-controller")
            .lines()
            .filter(|l| {
                l.contains("acl_log")
                    && l.contains(ovn::DROP_ACL_NAME)
                    && l.contains("verdict=drop")
            })
            .count()
    };
    let logged = (0..30).any(|_| {
        let hit = drops(lab) > drops_before;
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

// ---------------------------------------------------------------------------
// Faults (issue 30, "Bad input and faults"): ovsdb-server, ovn-controller
// and the vswitch each killed with SIGKILL and restarted on one chassis while
// established cross-chassis traffic runs.

/// `ovn_lab_faults`: for the mix in `NICFLOW_OVN_VSWITCH` (here `nicflow`
/// by default) and the chassis in `NICFLOW_OVN_FAULT_CHASSIS` (1, default,
/// or 2), kill -9 and restart in turn the chassis' ovsdb-server,
/// ovn-controller and vswitch, with a 100/s ping and one TCP echo
/// connection (100 records/s) running vm1 (ch1) -> vm2 (ch2). After each:
/// both chassis' br-int flow tables (cookies included, counters stripped)
/// and groups equal those before the fault, no duplicate or renumbered
/// port (database, OpenFlow and nicflow's own list), the whole matrix
/// passes, the TCP connection is the same one and still delivers, and the
/// longest delivery gap is reported (and bounded for the faults the data
/// path does not depend on).
#[test]
fn ovn_lab_faults() {
    let mode = std::env::var("NICFLOW_OVN_VSWITCH").unwrap_or_else(|_| "nicflow".into());
    let mix = ovn::vswitch_mix(&mode, &nicflow_bin()).expect("NICFLOW_OVN_VSWITCH");
    if mix.iter().any(|v| matches!(v, Vswitch::Nicflow(_))) {
        if let Err(why) = nicflow_vswitchd_available() {
            skipped(&format!(
                "NICFLOW_OVN_VSWITCH={mode}: `nicflow vswitchd --help` fails ({why})"
            ));
            return;
        }
    }
    let ch = match std::env::var("NICFLOW_OVN_FAULT_CHASSIS").as_deref() {
        Ok("2") => 1,
        Ok("1") | Err(_) => 0,
        Ok(other) => panic!("NICFLOW_OVN_FAULT_CHASSIS={other}: expected 1 or 2"),
    };
    run_faults(&mode, mix, ch);
}

/// How long a killed daemon stays away before it is restarted: long enough
/// for every peer to notice (connections reset, reconnect attempts).
const DOWN: Duration = Duration::from_secs(2);
/// Longest delivery gap allowed while a daemon the data path does not
/// depend on (ovsdb-server, ovn-controller) is away and back: 100 pings/s,
/// so this is a handful of late replies at most, and no loss is allowed.
const CONTROL_PLANE_GAP: Duration = Duration::from_millis(500);
/// The longest gap of the kernel-offloaded TCP probe across a nicflow
/// kill -9 and restart (both chassis nicflow, pinned engines): 46 ms on
/// an idle machine, 2.7 s once under the full test suite (a segment lost
/// around the restart costs TCP a 1 s, then 2 s retransmission timeout).
/// What it rules out is waiting for the restarted daemon and the
/// controller's reinstall, as the userspace ICMP probe does (~9 s; 27 s
/// before the engine was adopted).
const VSWITCH_TCP_GAP: Duration = Duration::from_secs(5);
/// The probe rate (pings and TCP records per second).
const PROBE_INTERVAL_MS: u64 = 10;
/// `ovn-ofctrl-wait-before-clear` for the fault test (see
/// `OvnLabSpec::wait_before_clear_ms`): ovn-controller recomputes this lab's
/// flows well within it.
const WAIT_BEFORE_CLEAR_MS: u32 = 2000;
const PROBE_PORT: u16 = 7007;

/// One TCP connection, records echoed back, each receipt logged with a
/// wall-clock time; a reset, EOF or error ends it with `ERROR` (it never
/// reconnects, so one `connected` line means one connection).
const TCP_PROBE: &str = r#"
import select, socket, struct, sys, time
mode = sys.argv[1]
if mode == "server":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2])))
    s.listen(4)
    while True:
        c, a = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        print("accepted", a, flush=True)
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d)
        except OSError as e:
            print("ERROR", repr(e), flush=True)
        c.close()
        print("closed", flush=True)
host, port, interval = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
try:
    s = socket.create_connection((host, port), timeout=5)
    s.settimeout(None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print("connected", s.getsockname()[1], flush=True)
    seq, buf, nxt = 0, b"", time.monotonic()
    while True:
        now = time.monotonic()
        if now >= nxt:
            s.sendall(struct.pack("!Qd", seq, time.time()))
            seq += 1
            nxt = max(nxt + interval, now)
        r, _, _ = select.select([s], [], [], max(0.0, nxt - time.monotonic()))
        if r:
            d = s.recv(65536)
            if not d:
                print("ERROR EOF", flush=True)
                sys.exit(1)
            buf += d
            while len(buf) >= 16:
                n, _ = struct.unpack("!Qd", buf[:16])
                buf = buf[16:]
                print("%.6f %d" % (time.time(), n), flush=True)
except Exception as e:
    print("ERROR", repr(e), flush=True)
    sys.exit(1)
"#;

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Receipts `(wall time, sequence)` from `ping -D` output (sequences
/// unwrapped past 65535).
fn ping_receipts(log: &str) -> Vec<(f64, u64)> {
    let mut out = Vec::new();
    let mut base = 0u64;
    let mut last = 0u64;
    for l in log.lines() {
        let (Some(ts), Some(seq)) = (
            l.strip_prefix('[')
                .and_then(|r| r.split(']').next())
                .and_then(|t| t.parse::<f64>().ok()),
            l.split("icmp_seq=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok()),
        ) else {
            continue;
        };
        if seq + base + 30000 < last {
            base += 65536;
        }
        last = seq + base;
        out.push((ts, last));
    }
    out
}

/// Receipts from the TCP probe's client log.
fn tcp_receipts(log: &str) -> Vec<(f64, u64)> {
    log.lines()
        .filter_map(|l| {
            let (t, n) = l.split_once(' ')?;
            Some((t.parse().ok()?, n.trim().parse().ok()?))
        })
        .collect()
}

/// Delivery during `[from, to]` (wall clock): the longest time between two
/// receipts (the last one before `from` and the first one after `to`
/// included, so an outage at either edge counts), and how many sequence
/// numbers in that span never arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Delivery {
    gap_s: f64,
    lost: u64,
    received: usize,
}

fn delivery(receipts: &[(f64, u64)], from: f64, to: f64) -> Option<Delivery> {
    let first = receipts.iter().rposition(|r| r.0 < from).unwrap_or(0);
    let last = receipts.iter().position(|r| r.0 > to)?;
    let span = &receipts[first..=last];
    let gap_s = span.windows(2).map(|w| w[1].0 - w[0].0).fold(0.0, f64::max);
    let mut seqs: Vec<u64> = span.iter().map(|r| r.1).collect();
    seqs.sort_unstable();
    seqs.dedup();
    let want = seqs.last()? - seqs.first()? + 1;
    Some(Delivery {
        gap_s,
        lost: want - seqs.len() as u64,
        received: span.len(),
    })
}

/// One `ovs-ofctl dump-flows` line without its counters and ages
/// (`duration`, `n_packets`, `n_bytes`, `idle_age`, `hard_age`); the
/// cookie, table, priority, match and actions stay.
fn flow_key(line: &str) -> String {
    line.trim()
        .split(", ")
        .filter(|t| {
            ![
                "duration=",
                "n_packets=",
                "n_bytes=",
                "idle_age=",
                "hard_age=",
            ]
            .iter()
            .any(|p| t.starts_with(p))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What must be the same after a fault, per chassis.
#[derive(Clone, Debug, PartialEq)]
struct ChassisState {
    /// br-int flows, normalised and sorted (duplicates kept, so a flow
    /// installed twice shows).
    flows: Vec<String>,
    /// br-int groups, sorted.
    groups: Vec<String>,
    /// `Interface` name -> ofport, from the database.
    db_ports: BTreeMap<String, i64>,
    /// `ofport(name)` of br-int as OpenFlow describes it.
    of_ports: BTreeMap<String, String>,
    /// nicflow's own `show`: bridge/port -> ofport (nicflow chassis only).
    nicflow_ports: BTreeMap<String, String>,
    /// Duplicates found while reading the above (must stay empty).
    duplicates: Vec<String>,
}

fn chassis_state(lab: &OvnLab, ch: usize) -> Result<ChassisState, String> {
    let of = |args: &[&str]| lab.ofctl(ch, args).map_err(|e| e.to_string());
    // OpenFlow 1.5, as ovn-controller speaks it (nicflow's 1.5 replies
    // carry moves and loads as OFPAT_COPY_FIELD/SET_FIELD, which
    // `ovs-ofctl -O OpenFlow15` decodes; they used to be Nicira actions it
    // refuses in 1.5).
    let mut flows: Vec<String> = of(&["-O", "OpenFlow15", "dump-flows", "br-int"])?
        .lines()
        .filter(|l| l.contains("actions="))
        .map(flow_key)
        .collect();
    flows.sort();
    let groups: Vec<String> = of(&["-O", "OpenFlow15", "dump-groups", "br-int"])?
        .lines()
        .filter(|l| l.contains("group_id="))
        .map(|l| l.trim().to_string())
        .collect();
    let (groups, flows) = renumber_groups(&groups, &flows);
    let mut duplicates = Vec::new();
    let mut db_ports = BTreeMap::new();
    let list = lab
        .vsctl(
            ch,
            &[
                "--format=csv",
                "--data=bare",
                "--no-headings",
                "--columns=name,ofport",
                "list",
                "Interface",
            ],
        )
        .map_err(|e| e.to_string())?;
    for l in list.lines() {
        let Some((name, no)) = l.split_once(',') else {
            continue;
        };
        let no: i64 = no.trim().parse().unwrap_or(-1);
        if db_ports.insert(name.to_string(), no).is_some() {
            duplicates.push(format!("database: Interface {name} twice"));
        }
    }
    let mut seen = BTreeMap::new();
    for (name, no) in &db_ports {
        // Interfaces of different bridges may share a number; br-int's
        // (every port but the other bridges' own) are checked by OpenFlow.
        if *no > 0 {
            seen.entry(*no).or_insert_with(Vec::new).push(name.clone());
        }
    }
    let mut of_ports = BTreeMap::new();
    for l in of(&["-O", "OpenFlow15", "dump-ports-desc", "br-int"])?.lines() {
        // " 3(vm1): addr:..." / " LOCAL(br-int): addr:..."
        let t = l.trim_start();
        let Some((no, rest)) = t.split_once('(') else {
            continue;
        };
        let Some((name, _)) = rest.split_once("):") else {
            continue;
        };
        if no.is_empty() || !(no.chars().all(|c| c.is_ascii_digit()) || no == "LOCAL") {
            continue;
        }
        if of_ports.insert(name.to_string(), no.to_string()).is_some() {
            duplicates.push(format!("OpenFlow: port {name} twice"));
        }
    }
    let mut nos: Vec<&String> = of_ports.values().collect();
    nos.sort();
    if nos.windows(2).any(|w| w[0] == w[1]) {
        duplicates.push(format!("OpenFlow: a port number twice: {of_ports:?}"));
    }
    let mut nicflow_ports = BTreeMap::new();
    if matches!(lab.vswitch(ch), Vswitch::Nicflow(_)) {
        let out = std::process::Command::new(nicflow_bin())
            .arg("--socket")
            .arg(lab.nicflow_socket(ch))
            .arg("show")
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "nicflow show: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let mut bridge = String::new();
        let mut per_bridge: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(b) = l.strip_prefix("Bridge ") {
                bridge = b.trim().to_string();
            } else if let Some(p) = l.strip_prefix("    Port ") {
                let name = p.split_whitespace().next().unwrap_or("").to_string();
                let state = p.rsplit(") ").next().unwrap_or("").trim().to_string();
                let key = format!("{bridge}/{name}");
                if nicflow_ports.insert(key.clone(), state.clone()).is_some() {
                    duplicates.push(format!("nicflow show: {key} twice"));
                }
                if state.starts_with("ofport") {
                    per_bridge.entry(bridge.clone()).or_default().push(state);
                }
            }
        }
        for (b, mut nos) in per_bridge {
            nos.sort();
            if nos.windows(2).any(|w| w[0] == w[1]) {
                duplicates.push(format!("nicflow show: a port number twice on {b}"));
            }
        }
    }
    Ok(ChassisState {
        flows,
        groups,
        db_ports,
        of_ports,
        nicflow_ports,
        duplicates,
    })
}

/// What differs between two states, briefly (empty: equal).
fn state_diff(before: &ChassisState, after: &ChassisState) -> Vec<String> {
    fn multiset_diff(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
        fn count(v: &[String]) -> BTreeMap<&String, i64> {
            let mut m: BTreeMap<&String, i64> = BTreeMap::new();
            for x in v {
                *m.entry(x).or_default() += 1;
            }
            m
        }
        let (ca, cb) = (count(a), count(b));
        let gone = ca
            .iter()
            .filter(|(k, n)| cb.get(*k).copied().unwrap_or(0) < **n)
            .map(|(k, _)| (*k).clone())
            .collect();
        let new = cb
            .iter()
            .filter(|(k, n)| ca.get(*k).copied().unwrap_or(0) < **n)
            .map(|(k, _)| (*k).clone())
            .collect();
        (gone, new)
    }
    let mut d = Vec::new();
    let (a, b) = (&before.flows, &after.flows);
    if a != b && !same_but_zero_cookies(a, b) {
        let (gone, new) = multiset_diff(a, b);
        d.push(format!(
            "flows {} -> {}: {} missing (first: {:?}), {} extra (first: {:?})",
            a.len(),
            b.len(),
            gone.len(),
            gone.first(),
            new.len(),
            new.first()
        ));
    }
    for (what, a, b) in [("groups", &before.groups, &after.groups)] {
        if a != b {
            let (gone, new) = multiset_diff(a, b);
            d.push(format!(
                "{what} {} -> {}: {} missing (first: {:?}), {} extra (first: {:?})",
                a.len(),
                b.len(),
                gone.len(),
                gone.first(),
                new.len(),
                new.first()
            ));
        }
    }
    if before.db_ports != after.db_ports {
        d.push(format!(
            "database ofports {:?} -> {:?}",
            before.db_ports, after.db_ports
        ));
    }
    if before.of_ports != after.of_ports {
        d.push(format!(
            "OpenFlow ports {:?} -> {:?}",
            before.of_ports, after.of_ports
        ));
    }
    if before.nicflow_ports != after.nicflow_ports {
        d.push(format!(
            "nicflow ports {:?} -> {:?}",
            before.nicflow_ports, after.nicflow_ports
        ));
    }
    if !after.duplicates.is_empty() {
        d.push(format!("duplicates: {:?}", after.duplicates));
    }
    d
}

/// Groups numbered by their content, and the flows' `group:N` with them:
/// ovn-controller allocates group ids anew when it restarts (the two load
/// balancer groups of ch1 came back swapped), so the ids themselves are not
/// what must survive; which group each flow points to is. Sorted.
fn renumber_groups(groups: &[String], flows: &[String]) -> (Vec<String>, Vec<String>) {
    let mut by_body: Vec<(String, String)> = groups
        .iter()
        .map(|g| {
            let rest = g.strip_prefix("group_id=").unwrap_or(g);
            let (id, body) = rest.split_once(',').unwrap_or((rest, ""));
            (body.to_string(), id.to_string())
        })
        .collect();
    by_body.sort();
    let new_id: BTreeMap<String, usize> = by_body
        .iter()
        .enumerate()
        .map(|(i, (_, id))| (id.clone(), i + 1))
        .collect();
    let mut groups: Vec<String> = by_body
        .iter()
        .map(|(body, id)| format!("group_id=G{},{body}", new_id[id]))
        .collect();
    groups.sort();
    let mut flows: Vec<String> = flows
        .iter()
        .map(|f| {
            let mut out = String::with_capacity(f.len());
            let mut rest = f.as_str();
            while let Some(i) = rest.find("group:") {
                out.push_str(&rest[..i + 6]);
                rest = &rest[i + 6..];
                let n = rest.chars().take_while(char::is_ascii_digit).count();
                match new_id.get(&rest[..n]) {
                    Some(g) if n > 0 => out.push_str(&format!("G{g}")),
                    _ => out.push_str(&rest[..n]),
                }
                rest = &rest[n..];
            }
            out.push_str(rest);
            out
        })
        .collect();
    flows.sort();
    (groups, flows)
}

/// A flow's cookie and the rest of it.
fn split_cookie(flow: &str) -> (&str, &str) {
    match flow.strip_prefix("cookie=") {
        Some(r) => r.split_once(", ").unwrap_or((r, "")),
        None => ("0x0", flow),
    }
}

/// The same flows, and every cookie the same except where one side has 0:
/// ovn-controller installs one OpenFlow flow for identical desired flows
/// of several sources (a physical flow, cookie 0, and one of an SB row,
/// cookie = its uuid), with the cookie of whichever it linked first, and a
/// restart (a full computation) may link the other. Seen in this lab on
/// ch1's multicast-group flows of the external switch (table 40).
fn same_but_zero_cookies(a: &[String], b: &[String]) -> bool {
    fn by_rest(v: &[String]) -> BTreeMap<&str, Vec<&str>> {
        let mut m: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for f in v {
            let (c, r) = split_cookie(f);
            m.entry(r).or_default().push(c);
        }
        m
    }
    let (ma, mb) = (by_rest(a), by_rest(b));
    ma.len() == mb.len()
        && ma.iter().all(|(rest, ca)| {
            mb.get(rest).is_some_and(|cb| {
                ca == cb || (ca.len() == 1 && cb.len() == 1 && (ca[0] == "0x0" || cb[0] == "0x0"))
            })
        })
}

/// Both chassis' states once they hold still (two reads 1 s apart equal).
fn settled_states(lab: &OvnLab, limit: Duration) -> Result<[ChassisState; 2], String> {
    let deadline = Instant::now() + limit;
    loop {
        let a = [chassis_state(lab, 0)?, chassis_state(lab, 1)?];
        std::thread::sleep(Duration::from_secs(1));
        let b = [chassis_state(lab, 0)?, chassis_state(lab, 1)?];
        if a == b {
            return Ok(b);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "br-int did not hold still: ch1 {:?}, ch2 {:?}",
                state_diff(&a[0], &b[0]),
                state_diff(&a[1], &b[1])
            ));
        }
    }
}

/// Wait until both chassis are back to `want` (every VM port
/// `ovn-installed` too) and stay so for 2 s; how long it took from `t0`.
/// On timeout, the last difference.
fn converged(
    lab: &OvnLab,
    want: &[ChassisState; 2],
    t0: Instant,
    limit: Duration,
) -> Result<Duration, String> {
    let deadline = t0 + limit;
    let mut last;
    loop {
        let now = [chassis_state(lab, 0), chassis_state(lab, 1)];
        let installed = lab.installed_ports().map(|p| p.len()).unwrap_or(0);
        match now {
            [Ok(a), Ok(b)] => {
                let d: Vec<String> = [(&want[0], &a), (&want[1], &b)]
                    .iter()
                    .enumerate()
                    .flat_map(|(i, (w, g))| {
                        state_diff(w, g)
                            .into_iter()
                            .map(move |s| format!("ch{}: {s}", i + 1))
                    })
                    .collect();
                if d.is_empty() && installed == VMS.len() {
                    let at = t0.elapsed();
                    std::thread::sleep(Duration::from_secs(2));
                    let again = [chassis_state(lab, 0)?, chassis_state(lab, 1)?];
                    let d2: Vec<String> = (0..2)
                        .flat_map(|i| state_diff(&want[i], &again[i]))
                        .collect();
                    if d2.is_empty() {
                        return Ok(at);
                    }
                    last = format!("equal once, then: {d2:?}");
                } else {
                    last = format!("{d:?}; {installed} VM ports ovn-installed");
                }
            }
            [a, b] => last = format!("reading state: {:?} {:?}", a.err(), b.err()),
        }
        if Instant::now() >= deadline {
            return Err(last);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

struct FaultRow {
    fault: String,
    converge_s: Option<f64>,
    ping: Option<Delivery>,
    tcp: Option<Delivery>,
}

fn run_faults(mode: &str, mix: [Vswitch; 2], ch: usize) {
    if !possible(&mix) {
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|p| p.into_inner());
    let mut spec = OvnLabSpec::new(mix.clone());
    spec.keep = std::env::var_os("NICFLOW_OVN_KEEP").is_some();
    // OVN's own setting for hitless ovn-controller restarts (0 = OVN's
    // default: br-int is cleared at once after the restart).
    let wait = std::env::var("NICFLOW_OVN_WAIT_BEFORE_CLEAR_MS")
        .ok()
        .map(|v| {
            v.parse::<u32>()
                .expect("NICFLOW_OVN_WAIT_BEFORE_CLEAR_MS: ms")
        })
        .unwrap_or(WAIT_BEFORE_CLEAR_MS);
    spec.wait_before_clear_ms = Some(wait);
    let t0 = Instant::now();
    let mut lab = OvnLab::up(&spec).expect("OVN lab up");
    eprintln!(
        "ovn-ofctrl-wait-before-clear={wait} ms; OVN lab {} ({mode}: ch1 {}, ch2 {}) up in {:.1} s; faults on ch{}",
        lab.prefix(),
        mix[0].label(),
        mix[1].label(),
        t0.elapsed().as_secs_f64(),
        ch + 1
    );
    if let Err(e) = lab.install_topology(Duration::from_secs(90)) {
        diagnostics(&lab);
        panic!("installing the NB topology: {e}");
    }
    let mut m = Matrix { rows: Vec::new() };
    let mut ext_log = None;
    check_matrix(&mut lab, &mut m, &mut ext_log);
    // The reference is ovn-controller's full computation: a restarted
    // ovn-controller (and one whose switch restarted) recomputes from
    // scratch, and its incremental processing may leave flows that differ
    // from that (seen: the multicast-group flows of table 40, keys
    // 0x8000 vs 0x8004, on ovs-vswitchd and nicflow alike). A recompute
    // now makes the comparison one of the switch, not of OVN's engine.
    for c in 0..2 {
        if let Err(e) = lab.appctl(c, "ovn-controller", &["recompute"]) {
            panic!("ch{}: ovn-appctl recompute: {e}", c + 1);
        }
    }
    let before = match settled_states(&lab, Duration::from_secs(30)) {
        Ok(s) => s,
        Err(e) => {
            diagnostics(&lab);
            panic!("before the faults: {e}");
        }
    };
    for (i, s) in before.iter().enumerate() {
        eprintln!(
            "ch{}: {} flows, {} groups, ports {:?}, nicflow {:?}",
            i + 1,
            s.flows.len(),
            s.groups.len(),
            s.of_ports,
            s.nicflow_ports
        );
        m.row(
            &format!("ch{}: no duplicate port before the faults", i + 1),
            s.duplicates.is_empty(),
            format!("{:?}", s.duplicates),
        );
    }

    // Established traffic: ping at 100/s and one TCP echo connection.
    let vm2 = ovn::vm("vm2").unwrap().ip4.to_string();
    let script = lab.dir().join("tcp_probe.py");
    std::fs::write(&script, TCP_PROBE).unwrap();
    let script_s = script.display().to_string();
    let port = PROBE_PORT.to_string();
    let interval = format!("{}", PROBE_INTERVAL_MS as f64 / 1000.0);
    lab.spawn(
        "vm2",
        &["python3", &script_s, "server", &port],
        &lab.dir().join("tcp-probe-server.log"),
    )
    .expect("tcp probe server");
    lab.wait_listening("vm2", PROBE_PORT, Duration::from_secs(10))
        .expect("tcp probe server listening");
    let tcp_log = lab.dir().join("tcp-probe-client.log");
    lab.spawn(
        "vm1",
        &["python3", &script_s, "client", &vm2, &port, &interval],
        &tcp_log,
    )
    .expect("tcp probe client");
    let ping_log = lab.dir().join("ping-probe.log");
    lab.spawn(
        "vm1",
        &["ping", "-D", "-n", "-i", &interval, &vm2],
        &ping_log,
    )
    .expect("ping probe");
    std::thread::sleep(Duration::from_secs(2));
    let quiet = delivery(
        &ping_receipts(&std::fs::read_to_string(&ping_log).unwrap_or_default()),
        unix_now() - 1.5,
        unix_now() - 0.2,
    );
    eprintln!("probes running; ping before the faults: {quiet:?}");

    let mut rows = Vec::new();
    for d in [
        ChassisDaemon::OvsdbServer,
        ChassisDaemon::OvnController,
        ChassisDaemon::Vswitch,
    ] {
        let name = match d {
            ChassisDaemon::Vswitch => lab.vswitch(ch).label().to_string(),
            _ => d.pid_name().to_string(),
        };
        let fault = format!("kill -9 {name} on ch{}", ch + 1);
        eprintln!("--- {fault} ---");
        let from = unix_now();
        let t = Instant::now();
        let mut row = FaultRow {
            fault: fault.clone(),
            converge_s: None,
            ping: None,
            tcp: None,
        };
        let killed = lab.kill_chassis_daemon(ch, d);
        m.row(
            &format!("{fault}: killed"),
            killed.is_ok(),
            format!("{killed:?}"),
        );
        std::thread::sleep(DOWN);
        let started = lab.start_chassis_daemon(ch, d);
        m.row(
            &format!("{fault}: restarted"),
            started.is_ok(),
            format!("{started:?}"),
        );
        let conv = converged(&lab, &before, t, Duration::from_secs(90));
        row.converge_s = conv.as_ref().ok().map(Duration::as_secs_f64);
        m.row(
            &format!("{fault}: same flows (cookies too), groups and ports on both chassis, no duplicates"),
            conv.is_ok(),
            match &conv {
                Ok(d) => format!("converged {:.1} s after the kill", d.as_secs_f64()),
                Err(e) => e.clone(),
            },
        );
        // The window ends at convergence; both probes must deliver after
        // it (TCP may wait out its retransmission backoff: up to 60 s).
        let to = unix_now();
        let mut tcp_text;
        let resumed = Instant::now() + Duration::from_secs(60);
        loop {
            row.ping = delivery(
                &ping_receipts(&std::fs::read_to_string(&ping_log).unwrap_or_default()),
                from,
                to,
            );
            tcp_text = std::fs::read_to_string(&tcp_log).unwrap_or_default();
            row.tcp = delivery(&tcp_receipts(&tcp_text), from, to);
            let dead = tcp_text.lines().any(|l| l.starts_with("ERROR"));
            if (row.ping.is_some() && row.tcp.is_some()) || dead || Instant::now() >= resumed {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let connects = tcp_text
            .lines()
            .filter(|l| l.starts_with("connected"))
            .count();
        let error = tcp_text.lines().find(|l| l.starts_with("ERROR"));
        m.row(
            &format!("{fault}: the established TCP connection survived and delivers"),
            connects == 1 && error.is_none() && row.tcp.is_some(),
            format!(
                "{connects} connects, error {error:?}, delivery {:?}",
                row.tcp
            ),
        );
        eprintln!("{fault}: ping {:?}; tcp {:?}", row.ping, row.tcp);
        if d != ChassisDaemon::Vswitch && matches!(lab.vswitch(ch), Vswitch::Nicflow(_)) {
            // The data path does not depend on this daemon. (Asserted for
            // nicflow; ovs-vswitchd, the baseline, is only measured: its
            // main loop stalls ~3 s when its ovsdb-server is killed.)
            let ping_ok = row
                .ping
                .is_some_and(|p| p.lost == 0 && p.gap_s < CONTROL_PLANE_GAP.as_secs_f64());
            let tcp_ok = row
                .tcp
                .is_some_and(|p| p.gap_s < CONTROL_PLANE_GAP.as_secs_f64());
            m.row(
                &format!(
                    "{fault}: traffic not interrupted (no ping lost, gaps < {} ms)",
                    CONTROL_PLANE_GAP.as_millis()
                ),
                ping_ok && tcp_ok,
                format!("ping {:?}, tcp {:?}", row.ping, row.tcp),
            );
        }
        let both_nicflow = (0..2).all(|c| matches!(lab.vswitch(c), Vswitch::Nicflow(_)));
        if d == ChassisDaemon::Vswitch && both_nicflow && lab.pin_root(ch).is_some() {
            // The established TCP connection runs in the TC engine on both
            // chassis, pinned: it does not wait for the restarted daemon
            // (see VSWITCH_TCP_GAP).
            let tcp_ok = row
                .tcp
                .is_some_and(|p| p.gap_s < VSWITCH_TCP_GAP.as_secs_f64());
            m.row(
                &format!(
                    "{fault}: the kernel-offloaded TCP connection crosses the restart (gap < {} ms)",
                    VSWITCH_TCP_GAP.as_millis()
                ),
                tcp_ok,
                format!("tcp {:?}", row.tcp),
            );
        }
        check_matrix(&mut lab, &mut m, &mut ext_log);
        rows.push(row);
    }
    for c in 0..2 {
        let log = lab.chassis_log(c, "ovn-controller");
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("OpenFlow error"))
            .collect();
        m.row(
            &format!(
                "ch{} ovn-controller: no OpenFlow error through the faults",
                c + 1
            ),
            errors.is_empty(),
            format!("{} errors, first {:?}", errors.len(), errors.first()),
        );
    }

    eprintln!(
        "\nFaults ({mode}: ch1 {}, ch2 {}; probes vm1 -> vm2 every {PROBE_INTERVAL_MS} ms; daemon down {} s):",
        mix[0].label(),
        mix[1].label(),
        DOWN.as_secs()
    );
    eprintln!("| fault | converged s | ping longest gap ms | pings lost | TCP longest gap ms |");
    eprintln!("|---|---:|---:|---:|---:|");
    for r in &rows {
        let ms = |d: Option<Delivery>| d.map_or("—".into(), |d| format!("{:.0}", d.gap_s * 1e3));
        eprintln!(
            "| {} | {} | {} | {} | {} |",
            r.fault,
            r.converge_s.map_or("—".into(), |s| format!("{s:.1}")),
            ms(r.ping),
            r.ping.map_or("—".into(), |d| d.lost.to_string()),
            ms(r.tcp)
        );
    }
    let failed = m.failed();
    if !failed.is_empty() {
        diagnostics(&lab);
    }
    drop(lab);
    assert!(
        failed.is_empty(),
        "OVN lab faults ({mode}) failed: {failed:?}"
    );
}

#[test]
fn delivery_gaps_and_losses() {
    let ping = "PING 198.18.10.12 56(84) bytes of data.\n\
        [100.000] 64 bytes from 198.18.10.12: icmp_seq=1 ttl=64 time=0.5 ms\n\
        [100.010] 64 bytes from 198.18.10.12: icmp_seq=2 ttl=64 time=0.5 ms\n\
        [100.020] 64 bytes from 198.18.10.12: icmp_seq=3 ttl=64 time=0.5 ms\n\
        [100.530] 64 bytes from 198.18.10.12: icmp_seq=54 ttl=64 time=0.5 ms\n\
        [100.540] 64 bytes from 198.18.10.12: icmp_seq=55 ttl=64 time=0.5 ms\n";
    let r = ping_receipts(ping);
    assert_eq!(r.len(), 5);
    let d = delivery(&r, 100.015, 100.535).unwrap();
    assert_eq!(d.lost, 50);
    assert!((d.gap_s - 0.51).abs() < 1e-6, "{d:?}");
    // Nothing after the window yet: no verdict.
    assert!(delivery(&r, 100.0, 101.0).is_none());
    // A quiet window: the usual spacing, nothing lost.
    let q = delivery(&r, 100.005, 100.015).unwrap();
    assert_eq!(q.lost, 0);
    assert!(q.gap_s < 0.011);
    // Sequence numbers wrap at 65536.
    let w = ping_receipts(
        "[1.0] 64 bytes from x: icmp_seq=65535 ttl=1\n[1.01] 64 bytes from x: icmp_seq=0 ttl=1\n",
    );
    assert_eq!(w, vec![(1.0, 65535), (1.01, 65536)]);
    assert_eq!(
        tcp_receipts("connected 4242\n5.5 7\n5.6 8\nERROR x\n"),
        vec![(5.5, 7), (5.6, 8)]
    );
}

#[test]
fn zero_cookie_swaps_only_are_tolerated() {
    let f = |c: &str, m: &str| format!("cookie={c}, table=40, priority=100,reg15={m} actions=drop");
    let before = vec![f("0x0", "0x8000"), f("0x12", "0x8001")];
    let swapped = vec![f("0x34", "0x8000"), f("0x12", "0x8001")];
    assert!(same_but_zero_cookies(&before, &swapped));
    // Another non-zero cookie, a lost flow, a duplicate: all differences.
    assert!(!same_but_zero_cookies(
        &before,
        &[f("0x0", "0x8000"), f("0x13", "0x8001")]
    ));
    assert!(!same_but_zero_cookies(&before, &[f("0x0", "0x8000")]));
    assert!(!same_but_zero_cookies(
        &before,
        &[f("0x0", "0x8000"), f("0x12", "0x8001"), f("0x12", "0x8001")]
    ));
    assert_eq!(
        split_cookie("table=0, priority=1 actions=drop"),
        ("0x0", "table=0, priority=1 actions=drop")
    );
}

#[test]
fn groups_compare_by_content_not_id() {
    let g =
        |id: u32, zone: &str| format!("group_id={id},type=select,bucket=actions=ct(zone={zone})");
    let f = |id: u32| format!("table=15, priority=120,tcp actions=group:{id}");
    let f2 = |id: u32| format!("table=15, priority=121,udp actions=group:{id}");
    let before = renumber_groups(&[g(1, "a"), g(2, "b")], &[f(1), f2(2)]);
    // The same groups under swapped ids, the flows following them: equal.
    let swapped = renumber_groups(&[g(2, "a"), g(1, "b")], &[f(2), f2(1)]);
    assert_eq!(before, swapped);
    // A flow pointing at the other group: different.
    let wrong = renumber_groups(&[g(1, "a"), g(2, "b")], &[f(2), f2(1)]);
    assert_ne!(before, wrong);
    assert!(before.1[0].ends_with("group:G1"), "{before:?}");
}

#[test]
fn flow_keys_drop_counters_only() {
    let a = " cookie=0x3f2b, duration=12.345s, table=8, n_packets=3, n_bytes=294, idle_age=1, priority=50,reg14=0x1,metadata=0x1 actions=load:0->NXM_NX_REG10[12],resubmit(,9)";
    let b = " cookie=0x3f2b, duration=0.5s, table=8, n_packets=0, n_bytes=0, priority=50,reg14=0x1,metadata=0x1 actions=load:0->NXM_NX_REG10[12],resubmit(,9)";
    assert_eq!(flow_key(a), flow_key(b));
    assert_eq!(
        flow_key(a),
        "cookie=0x3f2b, table=8, priority=50,reg14=0x1,metadata=0x1 actions=load:0->NXM_NX_REG10[12],resubmit(,9)"
    );
    let other_cookie = b.replace("0x3f2b", "0x3f2c");
    assert_ne!(flow_key(a), flow_key(&other_cookie));
}
