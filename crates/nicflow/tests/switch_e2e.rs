//! The switch end to end: real traffic from real programs (ping, iperf3,
//! python sockets, scapy) between two lab hosts through one `nicflow
//! daemon` with AF_PACKET ports, checked against what the daemon reports
//! over its control socket (`stats`, `dump-flows`, `dump-dp-flows`).
//!
//! Every test builds its own lab (`e<pid><tag>`: unique per test and per
//! run, so the tests run in parallel with each other and with labs others
//! have up), half of them with the switch in its own namespace and half in
//! the root namespace, and a guard runs `lab down` even when an assertion
//! fails. Background programs are children of the test, killed and reaped
//! by their own guard (and `down` kills whatever still runs in the lab's
//! namespaces). Traffic stays inside the lab: 198.18.0.0/24 and
//! 2001:db8::/64.
//!
//! They need root, `ip`, `ping`, `iperf3` and — for the malformed-frame
//! test — scapy for `/usr/bin/python3`; as any other user each test prints
//! "skipping: needs root" and passes. Helper scripts live in `tests/scapy/`.

mod common;

use nicflow::control::config::Config;
use nicflow::control::daemon::request;
use nicflow::control::proto::{Request, Response};
use nicflow::lab::{self, sys, LabOptions, LabState, Topology};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

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
    let has_ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !root || !has_ip {
        notice("skipping: needs root (and iproute2)");
    }
    root && has_ip
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn nicflow_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nicflow"))
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scapy")
        .join(name)
        .display()
        .to_string()
}

/// Wall-clock seconds: the clock every namespace shares, and the one the
/// helper scripts and `ping -D` stamp with.
fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Poll `f` every 20 ms until it returns `Some` or `limit` passes.
fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
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

/// A program running in the background in a lab namespace; killed and
/// reaped when dropped.
struct Bg {
    what: String,
    child: Child,
}

impl Bg {
    /// Send SIGTERM (the helper scripts then print their summary).
    fn term(&self) {
        // SAFETY: kill(2) on our own child (`ip netns exec` execs the
        // program, so the pid is the program's).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
    }

    /// Wait up to `limit` for the program to exit by itself, then kill it;
    /// returns everything it wrote to stdout.
    fn finish(mut self, limit: Duration) -> String {
        let exited = poll(limit, || self.child.try_wait().ok().flatten()).is_some();
        if !exited {
            notice(&format!(
                "{}: still running after {limit:?}; killing it",
                self.what
            ));
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let mut out = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        out
    }

    /// Read the first line of stdout (the scripts print `ready`).
    fn wait_ready(&mut self) {
        let stdout = self.child.stdout.take().expect("stdout is piped");
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        let n = r.read_line(&mut line).expect("reading ready line");
        assert!(
            n > 0 && line.trim() == "ready",
            "{}: expected `ready`, got {line:?}",
            self.what
        );
        // The scripts print nothing else before they exit, so nothing may
        // sit in the reader's buffer; hand the pipe back for `finish`.
        let rest = r.buffer().to_vec();
        let inner = r.into_inner();
        self.child.stdout = Some(inner);
        assert!(rest.is_empty(), "{}: unexpected output {rest:?}", self.what);
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// One lab: two hosts `h1` (198.18.0.1) and `h2` (198.18.0.2) on switch
/// `sw1`, bridge `br0`, ports `p1` (to h1) and `p2` (to h2).
struct Lab {
    topo: Topology,
    opts: LabOptions,
    sock: PathBuf,
    state: LabState,
    _guard: Guard,
}

struct LabSpec<'a> {
    tag: &'a str,
    /// "own" or "root".
    switch_ns: &'a str,
    /// The switch's port type: "afxdp" or "afpacket" (the suite covers
    /// both).
    port_type: &'a str,
    /// IPv6 on the hosts: addresses 2001:db8::1/2 when true; when false
    /// IPv6 is disabled on the hosts altogether, so they send nothing but
    /// what a test makes them send (no ND, MLD, router solicitations).
    ipv6: bool,
}

impl Lab {
    fn up(spec: LabSpec) -> Lab {
        let opts = LabOptions::with_binary(nicflow_bin());
        let name = format!("e{}{}", std::process::id(), spec.tag);
        let (sysctl, a1, a2) = if spec.ipv6 {
            (
                r#"sysctl = { "net.ipv6.conf.all.accept_ra" = 0 }"#.to_string(),
                r#"["198.18.0.1/24", "2001:db8::1/64"]"#,
                r#"["198.18.0.2/24", "2001:db8::2/64"]"#,
            )
        } else {
            (
                r#"sysctl = { "net.ipv6.conf.all.disable_ipv6" = 1, "net.ipv6.conf.default.disable_ipv6" = 1, "net.ipv6.conf.eth0.disable_ipv6" = 1, "net.ipv6.conf.lo.disable_ipv6" = 1 }"#
                    .to_string(),
                r#"["198.18.0.1/24"]"#,
                r#"["198.18.0.2/24"]"#,
            )
        };
        let topo = Topology::parse(&format!(
            r#"
            name = "{name}"
            [[host]]
            name = "h1"
            {sysctl}
            [[host]]
            name = "h2"
            {sysctl}
            [[switch]]
            name = "sw1"
            namespace = "{ns}"
            port_type = "{pt}"
            [[link]]
            a = "h1:eth0"
            b = "sw1:p1"
            addresses = {a1}
            [[link]]
            a = "h2:eth0"
            b = "sw1:p2"
            addresses = {a2}
            "#,
            ns = spec.switch_ns,
            pt = spec.port_type,
        ))
        .expect("test topology is valid");
        let guard = Guard {
            lab: name.clone(),
            opts: opts.clone(),
        };
        let report = lab::up(&topo, &opts).unwrap_or_else(|e| panic!("lab up {name}: {e}"));
        assert!(
            report.unattached.is_empty(),
            "ports not attached: {:?}",
            report.unattached
        );
        let sock = lab::switch_socket(&name, "sw1", &opts);
        Lab {
            topo,
            sock,
            state: report.state,
            opts,
            _guard: guard,
        }
    }

    fn name(&self) -> &str {
        &self.topo.name
    }

    fn ns(&self, node: &str) -> String {
        lab::node_namespace(Some(&self.topo), node, &self.opts).unwrap()
    }

    fn exec(&self, node: &str, argv: &[&str]) -> Output {
        lab::exec_output(Some(&self.topo), node, argv, &self.opts)
            .unwrap_or_else(|e| panic!("exec on {node} {argv:?}: {e}"))
    }

    /// Start `argv` in the background on `node`, stdout piped.
    fn spawn(&self, node: &str, argv: &[&str]) -> Bg {
        let mut cmd = sys::in_ns(Some(&self.ns(node)), argv);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn on {node} {argv:?}: {e}"));
        Bg {
            what: format!("{node}: {}", argv.join(" ")),
            child,
        }
    }

    fn mac(&self, node: &str) -> String {
        let o = self.exec(node, &["cat", "/sys/class/net/eth0/address"]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// `ping` until one reply comes back (five tries).
    fn ping(&self, from: &str, to: &str) {
        let mut last = String::new();
        for _ in 0..5 {
            let o = self.exec(from, &["ping", "-c", "1", "-W", "1", to]);
            if o.status.success() {
                return;
            }
            last = text(&o);
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("ping {from} -> {to} failed 5 times:\n{last}");
    }

    /// The `nicflow` CLI against this lab's switch; must succeed.
    fn cli(&self, args: &[&str]) -> String {
        let o = Command::new(nicflow_bin())
            .arg("--socket")
            .arg(&self.sock)
            .args(args)
            .output()
            .expect("running nicflow");
        assert!(o.status.success(), "nicflow {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn cli_json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.cli(&a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("nicflow {a:?}: {e}: {out}"))
    }

    fn req(&self, r: Request) -> Response {
        let resp = request(&self.sock, &r).unwrap_or_else(|e| panic!("{r:?}: {e:#}"));
        assert!(resp.ok, "{r:?}: {resp:?}");
        resp
    }

    /// `stats` of bridge br0.
    fn stats(&self) -> Value {
        let data = self.req(Request::Stats).data;
        data.as_array()
            .and_then(|a| a.iter().find(|b| b["bridge"] == "br0"))
            .cloned()
            .unwrap_or_else(|| panic!("no br0 in stats: {data}"))
    }

    /// `dump-flows br0 --json` via the CLI.
    fn flows(&self) -> Vec<Value> {
        self.cli_json(&["dump-flows", "br0"])
            .as_array()
            .cloned()
            .expect("dump-flows data is an array")
    }

    fn dp_flows(&self) -> Vec<Value> {
        self.cli_json(&["dump-dp-flows", "br0"])
            .as_array()
            .cloned()
            .expect("dump-dp-flows data is an array")
    }

    /// Replace every rule of br0 with `rules` (via the CLI: `del-flows`,
    /// then `add-flows FILE`).
    fn set_rules(&self, rules: &[&str]) {
        self.cli(&["del-flows", "br0"]);
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "# {} test rules", self.name()).unwrap();
        for r in rules {
            writeln!(f, "{r}").unwrap();
        }
        f.flush().unwrap();
        self.cli(&["add-flows", "br0", &f.path().display().to_string()]);
        let got = self.flows();
        assert_eq!(got.len(), rules.len(), "rules after add-flows: {got:?}");
    }

    fn daemon_pid(&self) -> u32 {
        let st = LabState::load(&self.state.dir)
            .unwrap()
            .expect("state file");
        st.daemons[0].pid.expect("daemon pid recorded")
    }
}

/// A counter of the datapath (`packets`, `upcalls`, ...).
fn dp(stats: &Value, key: &str) -> u64 {
    stats["datapath"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("datapath.{key} in {stats}"))
}

fn drops(stats: &Value) -> BTreeMap<String, u64> {
    stats["datapath"]["drops"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

fn port(stats: &Value, name: &str, key: &str) -> u64 {
    stats["ports"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .and_then(|p| p[key].as_u64())
        .unwrap_or_else(|| panic!("port {name} {key} in {stats}"))
}

/// The rule whose canonical text contains `needle` (exactly one).
fn rule<'a>(flows: &'a [Value], needle: &str) -> &'a Value {
    let hits: Vec<&Value> = flows
        .iter()
        .filter(|f| f["flow"].as_str().is_some_and(|s| s.contains(needle)))
        .collect();
    assert_eq!(hits.len(), 1, "rules containing `{needle}` in {flows:?}");
    hits[0]
}

fn n_packets(flows: &[Value], needle: &str) -> u64 {
    rule(flows, needle)["n_packets"].as_u64().unwrap()
}

fn parse_json(what: &str, out: &str) -> Value {
    let line = out.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: output was {out:?}"))
}

/// `[1700000000.123456] 64 bytes from ...` lines of `ping -D`: reply times.
fn ping_reply_times(out: &str) -> Vec<f64> {
    out.lines()
        .filter(|l| l.contains("bytes from"))
        .filter_map(|l| {
            let ts = l.strip_prefix('[')?.split(']').next()?;
            ts.parse().ok()
        })
        .collect()
}

fn ping_loss_percent(out: &str) -> f64 {
    out.lines()
        .find_map(|l| {
            let (before, _) = l.split_once("% packet loss")?;
            before.rsplit([' ', ',']).next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no packet loss line in {out:?}"))
}

// ---------------------------------------------------------------------------
// 1. Forwarding with the default learning-switch rule
// ---------------------------------------------------------------------------

fn iperf3_client(lab: &Lab, args: &[&str]) -> Value {
    // The server is a child of ours: killed by its guard in any case.
    let mut server = lab.spawn("h2", &["iperf3", "-s", "-1", "-p", "5201"]);
    let listening = poll(Duration::from_secs(5), || {
        let o = lab.exec("h2", &["ss", "-Hltn", "sport = :5201"]);
        String::from_utf8_lossy(&o.stdout)
            .contains("5201")
            .then_some(())
    });
    assert!(listening.is_some(), "iperf3 server did not listen");
    let mut argv = vec![
        "timeout",
        "20",
        "iperf3",
        "-c",
        "198.18.0.2",
        "-p",
        "5201",
        "-J",
    ];
    argv.extend_from_slice(args);
    let o = lab.exec("h1", &argv);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "iperf3 {args:?} failed: {}", text(&o));
    // The one-off server exits after its client.
    let _ = poll(Duration::from_secs(3), || {
        server.child.try_wait().ok().flatten()
    });
    drop(server);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {out}"))
}

#[test]
fn two_hosts_ping_iperf_arp_nd() {
    if !privileged() {
        return;
    }
    if !have("iperf3") {
        notice("skipping: needs iperf3");
        return;
    }
    let lab = Lab::up(LabSpec {
        port_type: "afxdp",
        tag: "ping",
        switch_ns: "own",
        ipv6: true,
    });
    let (mac1, mac2) = (lab.mac("h1"), lab.mac("h2"));
    assert_ne!(mac1, mac2);

    // Nothing resolved yet; ping both ways over both families, so ARP and
    // neighbour discovery (multicast solicitation, unicast advertisement)
    // go through `normal`.
    for (h, peer4, peer6) in [
        ("h1", "198.18.0.2", "2001:db8::2"),
        ("h2", "198.18.0.1", "2001:db8::1"),
    ] {
        let o = lab.exec(h, &["ip", "neigh", "show", "dev", "eth0"]);
        let t = String::from_utf8_lossy(&o.stdout);
        assert!(
            !t.contains(peer4) && !t.contains(&format!("{peer6} ")),
            "{h}: neighbour known before any traffic: {t}"
        );
    }
    lab.ping("h1", "198.18.0.2");
    lab.ping("h2", "198.18.0.1");
    lab.ping("h1", "2001:db8::2");
    lab.ping("h2", "2001:db8::1");
    for (h, peer4, peer6, peer_mac) in [
        ("h1", "198.18.0.2", "2001:db8::2", &mac2),
        ("h2", "198.18.0.1", "2001:db8::1", &mac1),
    ] {
        for peer in [peer4, peer6] {
            let o = lab.exec(h, &["ip", "neigh", "show", peer, "dev", "eth0"]);
            let t = String::from_utf8_lossy(&o.stdout).to_lowercase();
            assert!(
                t.contains(&format!("lladdr {peer_mac}")),
                "{h}: neighbour {peer} not resolved to {peer_mac}: {t:?}"
            );
        }
    }
    // The switch did it: its port counters (userspace) plus the frames its
    // XDP offload engine finished in the kernel, and its learning-switch
    // rule. Each flow's first frame goes through userspace.
    let st = lab.stats();
    let in_kernel = st["engines"]["xdp_packets"].as_u64().unwrap_or(0);
    assert!(port(&st, "p1", "rx_packets") >= 2, "{st}");
    assert!(port(&st, "p2", "rx_packets") >= 2, "{st}");
    assert!(
        port(&st, "p1", "rx_packets") + port(&st, "p2", "rx_packets") + in_kernel >= 8,
        "{st}"
    );
    assert!(dp(&st, "upcalls") >= 4, "{st}");
    let flows = lab.flows();
    assert_eq!(flows.len(), 1, "{flows:?}");
    assert!(flows[0]["n_packets"].as_u64().unwrap() >= 8, "{flows:?}");

    // TCP: 2 s, more than 10 Mbit/s.
    let before = lab.stats();
    let tcp = iperf3_client(&lab, &["-t", "2"]);
    let bps = tcp["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no sum_received in {tcp}"));
    notice(&format!(
        "iperf3 TCP through nicflow: {:.1} Mbit/s",
        bps / 1e6
    ));
    assert!(bps > 10e6, "TCP throughput {:.2} Mbit/s", bps / 1e6);
    let after = lab.stats();
    let moved = port(&after, "p2", "tx_packets") - port(&before, "p2", "tx_packets");
    assert!(
        moved > 1000,
        "p2 transmitted only {moved} frames during iperf3"
    );

    // UDP: 50 Mbit/s for 2 s, loss below 5 %.
    let udp = iperf3_client(&lab, &["-u", "-b", "50M", "-t", "2"]);
    let sum = &udp["end"]["sum"];
    let lost = sum["lost_percent"]
        .as_f64()
        .unwrap_or_else(|| panic!("no lost_percent in {udp}"));
    notice(&format!(
        "iperf3 UDP 50M through nicflow: {} packets, {lost:.2}% lost",
        sum["packets"]
    ));
    assert!(sum["packets"].as_u64().unwrap_or(0) > 1000, "{sum}");
    assert!(lost < 5.0, "UDP loss {lost}%: {sum}");
}

// ---------------------------------------------------------------------------
// 2. Explicit rules: steer, drop, count; one upcall per flow
// ---------------------------------------------------------------------------

#[test]
fn rules_steer_drop_and_count() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(LabSpec {
        port_type: "afpacket",
        tag: "rules",
        switch_ns: "root",
        ipv6: false,
    });
    lab.set_rules(&[
        "priority=100,arp,actions=normal",
        "priority=100,icmp,actions=normal",
        "priority=200,udp,tp_dst=9999,actions=drop",
        "priority=200,udp,in_port=p1,tp_dst=7777,actions=output:p2",
        "priority=0,actions=drop",
    ]);
    // ARP and ICMP through `normal`, both ways.
    lab.ping("h1", "198.18.0.2");
    lab.ping("h2", "198.18.0.1");
    // From here on the hosts must send only what the test sends: pin the
    // neighbour entries (no ARP refresh), IPv6 is off in this topology.
    let (mac1, mac2) = (lab.mac("h1"), lab.mac("h2"));
    for (h, peer, mac) in [("h1", "198.18.0.2", &mac2), ("h2", "198.18.0.1", &mac1)] {
        let o = lab.exec(
            h,
            &[
                "ip",
                "neigh",
                "replace",
                peer,
                "lladdr",
                mac,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ],
        );
        assert!(o.status.success(), "{}", text(&o));
    }

    const N: u64 = 40;
    const PAYLOAD: u64 = 32;
    let frame_len = 14 + 20 + 8 + PAYLOAD;
    let mut sink = lab.spawn(
        "h2",
        &[
            "/usr/bin/python3",
            &script("udp_sink.py"),
            "--ports",
            "7777,9999",
            "--stop-after",
            &N.to_string(),
            "--grace",
            "0.5",
            "--timeout",
            "10",
        ],
    );
    sink.wait_ready();

    let s0 = lab.stats();
    let f0 = lab.flows();
    for dport in ["9999", "7777"] {
        let o = lab.exec(
            "h1",
            &[
                "/usr/bin/python3",
                &script("udp_send.py"),
                "198.18.0.2",
                "--dport",
                dport,
                "--sport",
                "40000",
                "--count",
                &N.to_string(),
                "--size",
                &PAYLOAD.to_string(),
            ],
        );
        let sent = parse_json("udp_send", &String::from_utf8_lossy(&o.stdout));
        assert_eq!(sent["sent"], N, "to {dport}: {sent} {}", text(&o));
    }
    let got = parse_json("udp_sink", &sink.finish(Duration::from_secs(12)));
    // Everything has passed the switch once the sink has it; wait for the
    // counters anyway in case the sink timed out.
    let s1 = poll(Duration::from_secs(2), || {
        let s = lab.stats();
        (dp(&s, "packets") - dp(&s0, "packets") >= 2 * N).then_some(s)
    })
    .unwrap_or_else(|| lab.stats());
    let f1 = lab.flows();

    // The receiver got exactly the allowed datagrams.
    assert_eq!(got["counts"]["7777"], N, "sink: {}", got["counts"]);
    assert_eq!(got["counts"]["9999"], 0, "sink: {}", got["counts"]);

    // Per-rule counters equal what was sent through each rule.
    let delta = |needle: &str, key: &str| {
        rule(&f1, needle)[key].as_u64().unwrap() - rule(&f0, needle)[key].as_u64().unwrap()
    };
    assert_eq!(delta("tp_dst=9999", "n_packets"), N, "{f1:?}");
    assert_eq!(delta("tp_dst=9999", "n_bytes"), N * frame_len, "{f1:?}");
    assert_eq!(delta("tp_dst=7777", "n_packets"), N, "{f1:?}");
    assert_eq!(delta("tp_dst=7777", "n_bytes"), N * frame_len, "{f1:?}");
    for quiet in ["arp", "icmp", "priority=0"] {
        assert_eq!(
            delta(quiet, "n_packets"),
            0,
            "stray traffic hit `{quiet}` during the measurement: {f1:?}"
        );
    }

    // Datapath: 2N packets, one upcall per flow, the rest from the caches.
    let d = |k: &str| dp(&s1, k) - dp(&s0, k);
    assert_eq!(d("packets"), 2 * N, "s0={s0} s1={s1}");
    assert_eq!(d("upcalls"), 2, "one upcall per flow; s0={s0} s1={s1}");
    assert_eq!(
        d("emc_hits") + d("megaflow_hits"),
        2 * N - 2,
        "s0={s0} s1={s1}"
    );
    let (dr0, dr1) = (drops(&s0), drops(&s1));
    let policy = dr1.get("policy").copied().unwrap_or(0) - dr0.get("policy").copied().unwrap_or(0);
    assert_eq!(policy, N, "drops by `actions=drop`: {dr0:?} -> {dr1:?}");
    assert_eq!(
        port(&s1, "p1", "rx_packets") - port(&s0, "p1", "rx_packets"),
        2 * N
    );
    assert_eq!(
        port(&s1, "p2", "tx_packets") - port(&s0, "p2", "tx_packets"),
        N
    );
    assert_eq!(
        port(&s1, "p2", "tx_bytes") - port(&s0, "p2", "tx_bytes"),
        N * frame_len
    );

    // One datapath flow per UDP flow, carrying all N packets.
    let dpf = lab.dp_flows();
    for dport in ["9999", "7777"] {
        let hits: Vec<&Value> = dpf
            .iter()
            .filter(|f| {
                f["match"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("tp_dst={dport}")))
            })
            .collect();
        assert_eq!(hits.len(), 1, "datapath flows for {dport}: {dpf:?}");
        assert_eq!(hits[0]["packets"], N, "{dpf:?}");
    }
}

// ---------------------------------------------------------------------------
// 3. Deleting the allowing rule takes effect at once
// ---------------------------------------------------------------------------

#[test]
fn deleting_allow_rule_stops_traffic_within_one_second() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(LabSpec {
        port_type: "afxdp",
        tag: "del",
        switch_ns: "own",
        ipv6: false,
    });
    lab.set_rules(&[
        "priority=100,arp,actions=normal",
        "cookie=0x77,priority=100,icmp,actions=normal",
        "cookie=0x77,priority=100,udp,actions=normal",
        "priority=0,actions=drop",
    ]);
    lab.ping("h1", "198.18.0.2");

    let mut sink = lab.spawn(
        "h2",
        &[
            "/usr/bin/python3",
            &script("udp_sink.py"),
            "--ports",
            "7777",
            "--timeout",
            "10",
        ],
    );
    sink.wait_ready();
    // A 100/s UDP stream and a 20/s ping, 3 s each.
    let sender = lab.spawn(
        "h1",
        &[
            "/usr/bin/python3",
            &script("udp_send.py"),
            "198.18.0.2",
            "--dport",
            "7777",
            "--sport",
            "40001",
            "--duration",
            "3",
            "--interval",
            "0.01",
        ],
    );
    let pinger = lab.spawn(
        "h1",
        &["ping", "-D", "-n", "-i", "0.05", "-w", "3", "198.18.0.2"],
    );
    // Both flowing through the allowing rules.
    // (The ICMP rule counts requests and replies.)
    let flowing = poll(Duration::from_secs(5), || {
        let f = lab.flows();
        (n_packets(&f, "udp") >= 30 && n_packets(&f, "icmp") >= 20).then_some(())
    });
    assert!(
        flowing.is_some(),
        "traffic did not start: {:?}",
        lab.flows()
    );

    let t0 = wall();
    let resp = lab.req(Request::DelFlows {
        bridge: "br0".into(),
        filter: Some("cookie=0x77/0xffffffffffffffff".into()),
    });
    let t1 = wall();
    assert_eq!(resp.data["deleted"], 2, "{resp:?}");

    let sent = parse_json("udp_send", &sender.finish(Duration::from_secs(6)));
    let ping_out = pinger.finish(Duration::from_secs(6));
    sink.term();
    let got = parse_json("udp_sink", &sink.finish(Duration::from_secs(3)));

    // The stream went on after the deletion...
    let last_sent = sent["last"].as_f64().unwrap();
    assert!(
        last_sent > t1 + 1.0,
        "sender stopped at {last_sent}, deletion at {t0}: {sent}"
    );
    // ...but nothing got through from T + 1 s on.
    let times: Vec<f64> = got["times"]["7777"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let before = times.iter().filter(|&&t| t < t0).count();
    let last_udp = times.iter().copied().fold(f64::MIN, f64::max);
    assert!(before >= 20, "only {before} datagrams before the deletion");
    notice(&format!(
        "del-flows took {:.1} ms; last UDP datagram {:+.1} ms after it was issued ({} of {} arrived)",
        (t1 - t0) * 1e3,
        (last_udp - t0) * 1e3,
        times.len(),
        sent["sent"]
    ));
    assert!(
        last_udp <= t0 + 1.0,
        "UDP datagram arrived {:.3} s after the allowing rule was deleted",
        last_udp - t0
    );
    let replies = ping_reply_times(&ping_out);
    let before = replies.iter().filter(|&&t| t < t0).count();
    assert!(
        before >= 5,
        "only {before} ping replies before the deletion:\n{ping_out}"
    );
    let late: Vec<f64> = replies
        .iter()
        .filter(|&&t| t > t0 + 1.0)
        .map(|t| t - t0)
        .collect();
    assert!(
        late.is_empty(),
        "ping replies {late:?} s after the deletion:\n{ping_out}"
    );

    // The rules are gone and the catch-all took the rest of the stream.
    let flows = lab.flows();
    assert_eq!(flows.len(), 2, "{flows:?}");
    assert!(n_packets(&flows, "priority=0") > 0, "{flows:?}");
}

// ---------------------------------------------------------------------------
// 4. Malformed frames
// ---------------------------------------------------------------------------

#[test]
fn malformed_frames_counted_dropped_daemon_alive() {
    if !privileged() {
        return;
    }
    let scapy = Command::new("/usr/bin/python3")
        .args(["-c", "import scapy.all"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !scapy {
        notice("skipping: needs scapy for /usr/bin/python3");
        return;
    }
    let lab = Lab::up(LabSpec {
        port_type: "afpacket",
        tag: "bad",
        switch_ns: "root",
        ipv6: true,
    });
    lab.ping("h1", "198.18.0.2");
    lab.ping("h2", "198.18.0.1");
    let mac2 = lab.mac("h2");
    let pid = lab.daemon_pid();

    const K: u64 = 20;
    let s0 = lab.stats();
    // A ping alongside, through the same ports, for the whole time.
    let pinger = lab.spawn(
        "h2",
        &[
            "ping",
            "-n",
            "-i",
            "0.05",
            "-c",
            "60",
            "-W",
            "1",
            "198.18.0.1",
        ],
    );
    let o = lab.exec(
        "h1",
        &[
            "timeout",
            "60",
            "/usr/bin/python3",
            &script("malformed.py"),
            "eth0",
            &mac2,
            &K.to_string(),
        ],
    );
    assert!(o.status.success(), "malformed.py: {}", text(&o));
    let sent = parse_json("malformed.py", &String::from_utf8_lossy(&o.stdout));
    let ping_out = pinger.finish(Duration::from_secs(10));

    // Expected drops per reason.
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for (reason, v) in sent.as_object().unwrap() {
        let n = v["sent"].as_u64().unwrap();
        if reason == "runt" {
            // Linux refuses frames shorter than 14 bytes on Ethernet
            // devices (EINVAL), and scapy then pads them to 60 bytes: what
            // reaches the switch is a valid 802.3 frame, not a runt.
            let refused = !v["kernel_refused"].is_null();
            notice(&format!(
                "runt: {} {}",
                if refused {
                    "refused by the kernel"
                } else {
                    "sent as is"
                },
                v["kernel_refused"]
            ));
            want.insert(reason.clone(), if refused { 0 } else { n + 1 });
        } else {
            want.insert(reason.clone(), n);
        }
    }
    let d0 = drops(&s0);
    let delta = |s: &Value, r: &str| {
        drops(s).get(r).copied().unwrap_or(0) - d0.get(r).copied().unwrap_or(0)
    };
    let s1 = poll(Duration::from_secs(3), || {
        let s = lab.stats();
        want.iter().all(|(r, &n)| delta(&s, r) >= n).then_some(s)
    })
    .unwrap_or_else(|| lab.stats());
    let got: BTreeMap<String, u64> = want.keys().map(|r| (r.clone(), delta(&s1, r))).collect();
    assert_eq!(
        got,
        want,
        "parse drops by reason (delta); all drops now: {:?}",
        drops(&s1)
    );
    let malformed: u64 = want.values().sum();
    assert!(
        port(&s1, "p1", "rx_packets") - port(&s0, "p1", "rx_packets") >= malformed,
        "{s1}"
    );

    // The daemon is alive and answers; traffic never stopped.
    assert!(sys::alive(pid), "daemon {pid} died");
    assert!(lab.req(Request::Show).ok);
    let loss = ping_loss_percent(&ping_out);
    assert!(
        loss <= 5.0,
        "{loss}% loss during the malformed burst:\n{ping_out}"
    );
    lab.ping("h1", "198.18.0.2");
    lab.ping("h1", "2001:db8::2");
}

// ---------------------------------------------------------------------------
// 5. Restart from the persisted config
// ---------------------------------------------------------------------------

/// How a hand-started daemon is told its control socket.
#[derive(Clone, Copy)]
enum SocketBy {
    /// `--socket PATH`, as `lab up` does.
    Arg,
    /// `NICFLOW_SOCK=PATH` in the environment (documented as overriding the
    /// default "everywhere").
    Env,
}

/// Start a daemon for `rec` by hand the way `lab up` does (same config,
/// socket and log, in the switch's namespace, in a new session), and
/// return its pid. The `Child` is dropped, not killed: `down` must find it
/// (and `sys::alive`, which `down` and `stop_pid` poll with, reaps it).
#[allow(clippy::zombie_processes)]
fn start_daemon(rec: &lab::state::DaemonRecord, by: SocketBy) -> u32 {
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(&rec.log)
        .unwrap();
    let bin = nicflow_bin();
    let mut argv: Vec<&std::ffi::OsStr> = vec![bin.as_os_str()];
    if let SocketBy::Arg = by {
        argv.extend(["--socket".as_ref(), rec.socket.as_os_str()]);
    }
    argv.extend([
        "daemon".as_ref(),
        "--config".as_ref(),
        rec.config.as_os_str(),
    ]);
    let mut cmd = sys::in_ns(rec.netns.as_deref(), &argv);
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .env_remove("NICFLOW_SOCK");
    if let SocketBy::Env = by {
        cmd.env("NICFLOW_SOCK", &rec.socket);
    }
    // SAFETY: setsid(2) is async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("starting the daemon");
    child.id()
}

fn stop_pid(pid: u32) {
    // SAFETY: kill(2) on a daemon this test started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    assert!(
        poll(Duration::from_secs(5), || (!sys::alive(pid)).then_some(())).is_some(),
        "daemon {pid} ignored SIGTERM"
    );
}

#[test]
fn restart_from_config() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(LabSpec {
        port_type: "afxdp",
        tag: "restart",
        switch_ns: "own",
        ipv6: false,
    });
    let rec = lab.state.daemons[0].clone();
    assert_eq!(rec.netns.as_deref(), Some(lab.ns("sw1").as_str()));

    // Non-default rules, added one by one at run time through the CLI.
    lab.cli(&["del-flows", "br0"]);
    for r in [
        "priority=50,arp,actions=normal",
        "priority=40,ip,in_port=p1,actions=output:p2",
        "priority=40,ip,in_port=p2,actions=output:p1",
        "cookie=0x5,priority=300,udp,tp_dst=5555,actions=drop",
        "priority=0,actions=drop",
    ] {
        lab.cli(&["add-flow", "br0", r]);
    }
    let rules = |flows: &[Value]| -> Vec<String> {
        let mut v: Vec<String> = flows
            .iter()
            .map(|f| f["flow"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let before = rules(&lab.flows());
    assert_eq!(before.len(), 5, "{before:?}");
    lab.ping("h1", "198.18.0.2");

    // Persisted in the daemon's config file, in the lab's state dir.
    assert_eq!(rec.config, lab.state.dir.join("sw1.toml"));
    let cfg = Config::load(&rec.config).unwrap();
    let mut saved = cfg.bridge("br0").expect("br0 in config").flows.clone();
    saved.sort();
    assert_eq!(saved, before, "config file {}", rec.config.display());

    // Stop the daemon; forwarding stops with it.
    let old = lab.daemon_pid();
    assert_eq!(Some(old), rec.pid);
    stop_pid(old);
    assert!(!rec.socket.exists(), "socket left behind by a clean exit");
    let o = lab.exec("h1", &["ping", "-c", "1", "-W", "1", "198.18.0.2"]);
    assert!(!o.status.success(), "ping worked with no switch running");

    // Start it again, as the lab does: same config and socket, in the
    // switch's namespace, detached, logging to the same file.
    let new = start_daemon(&rec, SocketBy::Arg);
    let ready = poll(Duration::from_secs(5), || {
        request(&rec.socket, &Request::Show)
            .ok()
            .filter(|r| r.ok)
            .map(|_| ())
    });
    assert!(
        ready.is_some(),
        "restarted daemon did not answer; log:\n{}",
        sys::tail(&rec.log, 20)
    );

    // Same rules, ports attached, traffic flows again.
    assert_eq!(rules(&lab.flows()), before);
    let show = lab.req(Request::Show).data;
    for p in show[0]["ports"].as_array().unwrap() {
        assert!(
            !p["ofport"].is_null(),
            "port not attached after restart: {p}"
        );
    }
    lab.ping("h1", "198.18.0.2");
    lab.ping("h2", "198.18.0.1");
    let o = lab.exec(
        "h1",
        &[
            "/usr/bin/python3",
            &script("udp_send.py"),
            "198.18.0.2",
            "--dport",
            "5555",
            "--sport",
            "40002",
            "--count",
            "5",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let counted = poll(Duration::from_secs(2), || {
        (n_packets(&lab.flows(), "tp_dst=5555") == 5).then_some(())
    });
    assert!(counted.is_some(), "restored drop rule: {:?}", lab.flows());

    // `down` finds the restarted daemon by its socket and stops it.
    assert_eq!(sys::find_daemons(&lab.state.dir), vec![new]);
    let down = lab::down(lab.name(), &lab.opts).expect("down");
    assert_eq!(down.daemons, vec![new], "{down:?}");
    assert!(down.killed.is_empty(), "needed SIGKILL: {down:?}");
    assert!(!sys::alive(new), "restarted daemon {new} survived down");
    assert!(!lab.state.dir.exists());
    assert!(!sys::namespace_exists(&rec.netns.clone().unwrap()));
}

/// Regression: `lab down` used to find daemons only by the `--socket` on
/// their command line, so a daemon serving the lab's socket through
/// `NICFLOW_SOCK` (the override the CLI documents) outlived `down` when the
/// switch was in the root namespace. It now also looks at the daemon's
/// environment and its `--config`.
#[test]
fn down_stops_a_daemon_serving_the_lab_socket_via_env() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(LabSpec {
        port_type: "afpacket",
        tag: "envsock",
        switch_ns: "root",
        ipv6: false,
    });
    let rec = lab.state.daemons[0].clone();
    stop_pid(lab.daemon_pid());
    let new = start_daemon(&rec, SocketBy::Env);
    /// Kills the hand-started daemon if `down` leaves it running.
    struct Reaper(u32);
    impl Drop for Reaper {
        fn drop(&mut self) {
            if sys::alive(self.0) {
                notice(&format!("reaper: killing leaked daemon {}", self.0));
                sys::stop(&[self.0], |_| true, Duration::from_secs(3));
            }
        }
    }
    let _reaper = Reaper(new);
    let ready = poll(Duration::from_secs(5), || {
        request(&rec.socket, &Request::Show).ok().filter(|r| r.ok)
    });
    assert!(
        ready.is_some(),
        "daemon did not answer on {}",
        rec.socket.display()
    );
    lab.ping("h1", "198.18.0.2");

    let down = lab::down(lab.name(), &lab.opts).expect("down");
    assert!(
        !sys::alive(new),
        "daemon {new} serving {} survived `lab down` ({down:?})",
        rec.socket.display()
    );
}

/// A daemon in the root namespace pins its fast path under `/sys/fs/bpf`
/// (mounting a bpffs there if needed); one killed with SIGKILL leaves the
/// pins, which would hold its programs and maps forever. `down` removes
/// them and the upcall pairs of its TC ports.
#[test]
fn down_removes_the_pins_of_a_killed_root_daemon() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(LabSpec {
        port_type: "tc",
        tag: "pins",
        switch_ns: "root",
        ipv6: false,
    });
    let rec = lab.state.daemons[0].clone();
    let root = nicflow_port::pin::default_root(&rec.socket);
    /// Removes the pins if the test fails before `down` did.
    struct Pins(PathBuf);
    impl Drop for Pins {
        fn drop(&mut self) {
            if self.0.exists() {
                nicflow_port::pin::clean_root(&self.0);
            }
        }
    }
    let _pins = Pins(root.clone());
    lab.ping("h1", "198.18.0.2");
    let ports: Vec<String> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("no pins at {}: {e}", root.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_prefix("port-").map(str::to_string))
        .collect();
    assert_eq!(
        ports.len(),
        2,
        "TC ports not pinned under {}",
        root.display()
    );
    let pid = lab.daemon_pid();
    // SAFETY: kill(2) on the lab's daemon, started by this test.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert!(
        poll(Duration::from_secs(5), || (!sys::alive(pid)).then_some(())).is_some(),
        "daemon {pid} survived SIGKILL"
    );
    // The kill left them: pins and upcall pairs.
    assert!(root.exists());
    for i in &ports {
        let out = Command::new("ip")
            .args(["link", "show", &format!("nfu{i}a")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "no upcall pair nfu{i}a after the kill"
        );
    }
    lab::down(lab.name(), &lab.opts).expect("down");
    assert!(!root.exists(), "pins left at {}", root.display());
    for i in &ports {
        let out = Command::new("ip")
            .args(["link", "show", &format!("nfu{i}a")])
            .output()
            .unwrap();
        assert!(!out.status.success(), "upcall pair nfu{i}a left");
    }
}
