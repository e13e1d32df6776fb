//! The kernel fast path outlives the daemon (issue 28, item 1).
//!
//! Three hosts in namespaces behind veths on a default bridge (`add-port
//! br0 IFACE`: TC ports, TC engine). An established UDP stream (iperf3 at a
//! fixed rate, so the receiver counts losses) and a TCP stream cross a
//! `kill -9` of the daemon, a pause and a restart: the stream must lose
//! nothing (the flows stay in the pinned TC engine), the restart must not
//! reload the program, and a new flow must work within 1 s of the restart.
//! Then the clean-up paths: a restart whose configuration lost a port
//! removes that port's leftovers, SIGTERM, `del-port` and `del-br` leave no
//! pin, no tcx program and no upcall veth behind.
//!
//! The daemon pins under its own bpffs instance, mounted for this test
//! under the test's scratch directory (`NICFLOW_PIN_ROOT`), so parallel runs
//! never share pins. Root only; skipped otherwise.

mod common;

use common::{lab_possible_with, must, nicflow_bin, run, NsLab};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A bpffs mounted for one test; unmounted when dropped (before the lab's
/// directory goes).
struct BpfFs(PathBuf);

impl BpfFs {
    fn mount(dir: &Path) -> BpfFs {
        let p = dir.join("bpf");
        std::fs::create_dir_all(&p).unwrap();
        must(&["mount", "-t", "bpf", "bpf", p.to_str().unwrap()]);
        BpfFs(p)
    }

    /// The entries nicflow made (bpffs has files of its own at its root).
    fn pins(&self) -> Vec<String> {
        let mut v = Vec::new();
        walk(&self.0, &self.0, &mut v);
        v.retain(|p| p.starts_with("br-") || p.starts_with("port-"));
        v.sort();
        v
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        out.push(p.strip_prefix(root).unwrap().display().to_string());
        if p.is_dir() {
            walk(root, &p, out);
        }
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = run(&["umount", "-l", self.0.to_str().unwrap()]);
    }
}

/// Start the daemon in node `sw` with the pin root; returns it and how
/// long it took to answer on its socket.
fn spawn(lab: &NsLab, root: &Path) -> (Child, Duration) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(lab.log_path())
        .unwrap();
    let t0 = Instant::now();
    let child = Command::new("ip")
        .args(["netns", "exec", &lab.ns("sw")])
        .arg(nicflow_bin())
        .arg("--socket")
        .arg(lab.sock())
        .arg("daemon")
        .arg("--config")
        .arg(lab.config_path())
        .env("NICFLOW_PIN_ROOT", root)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    while lab.cli(&["show"]).is_err() {
        if t0.elapsed() > Duration::from_secs(60) {
            panic!("daemon did not come up:\n{}", lab.daemon_log());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (child, t0.elapsed())
}

/// The daemon, killed (and reaped) if the test fails half way.
struct Daemon(Option<Child>);

impl Daemon {
    fn kill9(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn sigterm(&mut self) {
        if let Some(mut c) = self.0.take() {
            // SAFETY: kill(2) on our own child (`ip netns exec` execs the daemon).
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let t0 = Instant::now();
            while c.try_wait().unwrap().is_none() {
                assert!(t0.elapsed() < Duration::from_secs(20), "SIGTERM ignored");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Programs attached at tcx ingress of `iface` in namespace `ns`.
fn tcx_progs(ns: &str, iface: &str) -> usize {
    let ns = ns.to_string();
    let iface = iface.to_string();
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
        // SAFETY: setns on this (scratch) thread only.
        let r = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns");
        match aya::programs::SchedClassifier::query_tcx(
            &iface,
            aya::programs::TcAttachType::Ingress,
        ) {
            Ok((_, progs)) => progs.len(),
            Err(_) => 0,
        }
    })
    .join()
    .unwrap()
}

fn ifindex(lab: &NsLab, iface: &str) -> u32 {
    let out = lab.must("sw", &["cat", &format!("/sys/class/net/{iface}/ifindex")]);
    out.trim().parse().unwrap()
}

fn upcall_pairs(lab: &NsLab) -> Vec<String> {
    let out = lab.must("sw", &["ip", "-o", "link", "show"]);
    out.lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n.starts_with("nfu"))
        .collect()
}

fn config(ports: &[&str]) -> String {
    let mut c =
        String::from("[[bridge]]\nname = \"br0\"\nflows = [\"priority=0,actions=normal\"]\n");
    for p in ports {
        c += &format!("[[bridge.port]]\nname = \"{p}\"\niface = \"{p}\"\ntype = \"auto\"\n");
    }
    c
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Unix time of the first echo reply in `ping -D` output.
fn first_reply(out: &str) -> Option<f64> {
    out.lines()
        .find(|l| l.contains("bytes from"))
        .and_then(|l| l.strip_prefix('[')?.split(']').next()?.parse().ok())
}

fn mac(lab: &NsLab, node: &str) -> String {
    lab.must(node, &["cat", "/sys/class/net/eth0/address"])
        .trim()
        .to_string()
}

/// Offered rate of the UDP streams: what the receiver keeps up with on
/// a loaded 2-core VM (at 200 Mbit/s it dropped 44% with no restart at all).
const UDP_RATE: &str = "50M";

/// Start an iperf3 UDP stream h1 -> h2 of `secs` seconds (server one-off).
fn udp_stream(lab: &NsLab, secs: u32) -> (Child, Child) {
    let server = Command::new("ip")
        .args(["netns", "exec", &lab.ns("h2"), "iperf3", "-s", "-1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let secs = secs.to_string();
    let client = Command::new("ip")
        .args(["netns", "exec", &lab.ns("h1")])
        .args([
            "iperf3",
            "-c",
            "198.18.0.2",
            "-u",
            "-b",
            UDP_RATE,
            "-l",
            "1200",
        ])
        .args(["-t", &secs, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (server, client)
}

/// (lost, packets) as the receiver counted them.
fn udp_result(mut server: Child, client: Child) -> (u64, u64) {
    let out = client.wait_with_output().unwrap();
    let _ = server.wait();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let sum = &j["end"]["sum"];
    (
        sum["lost_packets"].as_u64().expect("iperf3 UDP result"),
        sum["packets"].as_u64().expect("iperf3 UDP result"),
    )
}

#[test]
fn established_flows_survive_kill_and_restart_adopts_them() {
    if !lab_possible_with(&[("iperf3", "--version")]) {
        return;
    }
    let lab = NsLab::new("nfrs", "", &["sw", "h1", "h2", "h3"]);
    let bpf = BpfFs::mount(lab.dir());
    for (i, h) in ["h1", "h2", "h3"].iter().enumerate() {
        let p = format!("p{}", i + 1);
        lab.veth(&p, "sw", "eth0", h);
        lab.must(
            h,
            &[
                "ip",
                "addr",
                "add",
                &format!("198.18.0.{}/24", i + 1),
                "dev",
                "eth0",
            ],
        );
    }
    // h3's flows are new after the restart: static neighbours, so its
    // first echo goes out at once (no ARP retry timer in the measurement).
    let (m2, m3) = (mac(&lab, "h2"), mac(&lab, "h3"));
    lab.must(
        "h3",
        &[
            "ip",
            "neigh",
            "replace",
            "198.18.0.2",
            "lladdr",
            &m2,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    );
    lab.must(
        "h2",
        &[
            "ip",
            "neigh",
            "replace",
            "198.18.0.3",
            "lladdr",
            &m3,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    );
    std::fs::write(lab.config_path(), config(&["p1", "p2", "p3"])).unwrap();

    let (child, cold) = spawn(&lab, &bpf.0);
    let mut d = Daemon(Some(child));
    assert!(lab.pings("h1", "198.18.0.2", 3), "{}", lab.daemon_log());
    let pins = bpf.pins();

    // --- UDP at a fixed rate: a baseline with the daemon running, then
    // the same across kill -9, a pause and a restart.
    let (server, client) = udp_stream(&lab, 4);
    let (base_lost, base_packets) = udp_result(server, client);
    let (server, client) = udp_stream(&lab, 9);
    std::thread::sleep(Duration::from_secs(2));
    d.kill9();
    let killed = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    // The established stream's programs: still attached with nobody
    // holding them (checked after the stream's losses).
    let progs_after_kill = tcx_progs(&lab.ns("sw"), "p1");
    let pinger = Command::new("ip")
        .args(["netns", "exec", &lab.ns("h3")])
        .args(["ping", "-n", "-D", "-i", "0.01", "-w", "5", "198.18.0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let restarted_at = unix_now();
    let (child, warm) = spawn(&lab, &bpf.0);
    d = Daemon(Some(child));
    let dead_for = killed.elapsed();
    let ping_out = String::from_utf8_lossy(&pinger.wait_with_output().unwrap().stdout).into_owned();
    let first_new = first_reply(&ping_out).map(|t| t - restarted_at);
    let (lost, packets) = udp_result(server, client);
    let log = lab.daemon_log();
    println!(
        "restart_survival: UDP {UDP_RATE}bit/s, daemon dead {:.2} s: lost {lost} of {packets} packets \
         (baseline without a restart: {base_lost} of {base_packets}); listening after {:.3} s cold vs \
         {:.3} s restarted; first new flow {:?} s after the restart",
        dead_for.as_secs_f64(),
        cold.as_secs_f64(),
        warm.as_secs_f64(),
        first_new
    );
    assert!(packets > 20_000, "stream too short: {packets}");
    // Goal: none. Losses beyond the baseline's rate (the receiver's own
    // drops on a loaded machine) are the restart's; without pinning every
    // packet after the kill is lost (more than half of them).
    let allowed = base_lost * packets / base_packets.max(1) + packets / 1000;
    assert!(
        lost <= allowed,
        "lost {lost} of {packets} (baseline {base_lost} of {base_packets})\n{log}"
    );
    assert_eq!(progs_after_kill, 2, "tc_dp + tc_upcall on p1 after kill -9");
    assert!(
        pins.iter().any(|p| p.ends_with("/prog")) && pins.iter().any(|p| p.contains("/link-")),
        "engine not pinned: {pins:?}"
    );
    assert!(log.contains("adopted from its pins"), "{log}");
    assert!(log.contains("TC port adopted"), "{log}");
    let first_new = first_new.expect("no echo reply to h3 after the restart");
    assert!(
        first_new < 1.0,
        "first new flow {first_new:.3} s after the restart"
    );
    // The established flow was adopted, not re-learned: its kernel
    // counters span the restart.
    let dp = lab.cli(&["dump-dp-flows", "br0"]).unwrap();
    let h1_to_h2 = dp
        .lines()
        .find(|l| l.contains("in_port=p1") && l.contains(&format!("dl_dst={m2}")))
        .unwrap_or_else(|| panic!("no h1 -> h2 flow:\n{dp}"));
    assert!(h1_to_h2.contains("engine:tc"), "{h1_to_h2}");
    let n: u64 = h1_to_h2
        .split("packets:")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    // Both streams' packets: counted before the kill, while the daemon was
    // dead and after the restart, in one kernel entry.
    assert!(n >= base_packets + packets, "{h1_to_h2}");

    // --- TCP across kill -9 and a restart: every 0.5 s interval moves data.
    let mut server = Command::new("ip")
        .args(["netns", "exec", &lab.ns("h2"), "iperf3", "-s", "-1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let client = Command::new("ip")
        .args(["netns", "exec", &lab.ns("h1")])
        .args([
            "iperf3",
            "-c",
            "198.18.0.2",
            "-t",
            "6",
            "-i",
            "0.5",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    d.kill9();
    std::thread::sleep(Duration::from_millis(1500));
    let (child, _) = spawn(&lab, &bpf.0);
    d = Daemon(Some(child));
    let out = client.wait_with_output().unwrap();
    let _ = server.wait();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let rates: Vec<f64> = j["intervals"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["sum"]["bits_per_second"].as_f64())
                .collect()
        })
        .unwrap_or_default();
    println!(
        "restart_survival: TCP Mbit/s per 0.5 s across kill -9 + restart: {:?}",
        rates.iter().map(|r| (r / 1e6) as u64).collect::<Vec<_>>()
    );
    assert!(rates.len() >= 10, "TCP run too short: {rates:?}");
    assert!(rates.iter().all(|r| *r > 1e6), "TCP stalled: {rates:?}");

    // --- A restart whose configuration lost p3: p3's leftovers go, p1 and
    // p2 stay adopted.
    let ifx3 = ifindex(&lab, "p3");
    d.kill9();
    std::fs::write(lab.config_path(), config(&["p1", "p2"])).unwrap();
    let (child, _) = spawn(&lab, &bpf.0);
    d = Daemon(Some(child));
    assert_eq!(tcx_progs(&lab.ns("sw"), "p3"), 0, "programs left on p3");
    assert!(
        !upcall_pairs(&lab).contains(&format!("nfu{ifx3}a")),
        "p3's upcall pair left"
    );
    assert!(
        !bpf.pins()
            .iter()
            .any(|p| p.contains(&format!("port-{ifx3}")) || p.ends_with(&format!("link-{ifx3}"))),
        "p3's pins left: {:?}",
        bpf.pins()
    );
    assert!(lab.pings("h1", "198.18.0.2", 3));

    // --- SIGTERM leaves the interfaces as found.
    d.sigterm();
    assert_eq!(bpf.pins(), Vec::<String>::new(), "pins after SIGTERM");
    for p in ["p1", "p2", "p3"] {
        assert_eq!(
            tcx_progs(&lab.ns("sw"), p),
            0,
            "programs on {p} after SIGTERM"
        );
    }
    assert_eq!(
        upcall_pairs(&lab),
        Vec::<String>::new(),
        "upcall pairs after SIGTERM"
    );

    // --- del-port and del-br do too.
    let (child, _) = spawn(&lab, &bpf.0);
    d = Daemon(Some(child));
    let ifx2 = ifindex(&lab, "p2");
    lab.cli(&["del-port", "br0", "p2"]).unwrap();
    assert_eq!(
        tcx_progs(&lab.ns("sw"), "p2"),
        0,
        "programs on p2 after del-port"
    );
    assert!(!upcall_pairs(&lab).contains(&format!("nfu{ifx2}a")));
    assert!(
        !bpf.pins()
            .iter()
            .any(|p| p.contains(&format!("port-{ifx2}")) || p.ends_with(&format!("link-{ifx2}"))),
        "p2's pins after del-port: {:?}",
        bpf.pins()
    );
    assert_eq!(tcx_progs(&lab.ns("sw"), "p1"), 2);
    lab.cli(&["del-br", "br0"]).unwrap();
    assert_eq!(bpf.pins(), Vec::<String>::new(), "pins after del-br");
    assert_eq!(
        tcx_progs(&lab.ns("sw"), "p1"),
        0,
        "programs on p1 after del-br"
    );
    assert_eq!(upcall_pairs(&lab), Vec::<String>::new());
    d.sigterm();
}

/// The daemon with the defaults (no `NICFLOW_PIN_ROOT`), in node `sw`'s
/// network namespace but the host's mount namespace (`nsenter --net`, as a
/// daemon started at boot in the root namespace would be): it pins under
/// `/sys/fs/bpf`, mounting a bpffs there itself if there is none.
fn spawn_defaults(lab: &NsLab) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(lab.log_path())
        .unwrap();
    let child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", lab.ns("sw")))
        .arg(nicflow_bin())
        .arg("--socket")
        .arg(lab.sock())
        .arg("daemon")
        .arg("--config")
        .arg(lab.config_path())
        .env_remove("NICFLOW_PIN_ROOT")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while lab.cli(&["show"]).is_err() {
        if t0.elapsed() > Duration::from_secs(60) {
            panic!("daemon did not come up:\n{}", lab.daemon_log());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// The default pin root of a test daemon, removed when dropped (even when
/// the test fails): the links detach, the maps are freed. Declared before
/// the daemon's guard, so it goes after the daemon is killed.
struct DefaultPins(PathBuf);

impl Drop for DefaultPins {
    fn drop(&mut self) {
        nicflow_port::pin::remove(&self.0);
        nicflow_port::pin::remove_empty_root(&self.0);
    }
}

/// "Defaults are the product": with no `NICFLOW_PIN_ROOT` and whatever
/// `/sys/fs/bpf` is on this machine (not a bpffs on some), an established
/// UDP stream crosses `kill -9` + restart of a daemon in the host's mount
/// namespace. Without the daemon mounting a bpffs itself, the fast path
/// dies with it and more than half of the stream is lost.
#[test]
fn defaults_survive_kill_and_restart() {
    if !lab_possible_with(&[("iperf3", "--version"), ("nsenter", "--version")]) {
        return;
    }
    let lab = NsLab::new("nfrd", "", &["sw", "h1", "h2"]);
    for (i, h) in ["h1", "h2"].iter().enumerate() {
        let p = format!("p{}", i + 1);
        lab.veth(&p, "sw", "eth0", h);
        let addr = format!("198.18.0.{}/24", i + 1);
        lab.must(h, &["ip", "addr", "add", &addr, "dev", "eth0"]);
    }
    std::fs::write(lab.config_path(), config(&["p1", "p2"])).unwrap();
    let pins = DefaultPins(nicflow_port::pin::default_root(&lab.sock()));
    let mut d = Daemon(Some(spawn_defaults(&lab)));
    assert!(lab.pings("h1", "198.18.0.2", 3), "{}", lab.daemon_log());
    assert!(
        nicflow_port::pin::is_bpffs(Path::new("/sys/fs/bpf")),
        "no bpffs at /sys/fs/bpf:\n{}",
        lab.daemon_log()
    );
    let mut made = Vec::new();
    walk(&pins.0, &pins.0, &mut made);
    assert!(
        made.iter().any(|p| p.ends_with("/prog")) && made.iter().any(|p| p.contains("/link-")),
        "engine not pinned under {}: {made:?}\n{}",
        pins.0.display(),
        lab.daemon_log()
    );

    let (server, client) = udp_stream(&lab, 4);
    let (base_lost, base_packets) = udp_result(server, client);
    let (server, client) = udp_stream(&lab, 8);
    std::thread::sleep(Duration::from_secs(2));
    d.kill9();
    let killed = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    d = Daemon(Some(spawn_defaults(&lab)));
    let dead_for = killed.elapsed();
    let (lost, packets) = udp_result(server, client);
    let log = lab.daemon_log();
    println!(
        "restart_survival (defaults, pins under {}): UDP {UDP_RATE}bit/s, daemon dead {:.2} s: \
         lost {lost} of {packets} packets (baseline without a restart: {base_lost} of {base_packets})",
        pins.0.display(),
        dead_for.as_secs_f64(),
    );
    assert!(packets > 15_000, "stream too short: {packets}");
    let allowed = base_lost * packets / base_packets.max(1) + packets / 1000;
    assert!(
        lost <= allowed,
        "lost {lost} of {packets} (baseline {base_lost} of {base_packets})\n{log}"
    );
    assert!(log.contains("adopted from its pins"), "{log}");
    d.kill9();
    drop(pins);
}
