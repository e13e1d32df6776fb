//! os-ken 3.1.0 as a real OpenFlow 1.3 controller (issue 14).
//!
//! `osken-manager` runs the app `tests/osken/nicflow_pipeline.py` in the
//! switch's namespace, listening on 127.0.0.1; the bridge is put in secure
//! fail mode (nothing forwards without rules) and connects to it
//! (`set-controller tcp:...`). The app builds a two-table pipeline — table 0:
//! a drop rule for UDP port 5999 and `priority=0 -> goto_table:1`; table 1:
//! a table-miss to the controller — and on PACKET_IN learns MAC -> port,
//! installs a table-1 flow for the destination with an idle timeout and
//! sends the frame on with PACKET_OUT (FLOOD while unknown). The test checks
//! that h1 pings h2 through it, that `dump-flows` shows the goto rule and
//! the learned flows, that the drop rule really drops (UDP to 5999 never
//! arrives while UDP to 7777 does), that the learned flows leave after their
//! idle timeout and come back through the controller, and reads the app's
//! log of what it installed and received (no OpenFlow errors). It runs with
//! `offload=none` and with `offload=auto`, where the drop and the learned
//! UDP flow must be datapath flows in the TC engine.
//!
//! Needs root (namespaces `nfok<pid><tag>-*`, removed by the lab's guard even
//! on failure) and `osken-manager` 3.x (os-ken 3.1.0 from pip: 4.x has no
//! `osken-manager`), found at `$NICFLOW_OSKEN_MANAGER`, in the venv
//! `scripts/setup.sh` makes (`/opt/nicflow-tools/osken-venv`) or on `PATH`;
//! skipped with the reason otherwise.

mod common;
use common::{lab_possible, skipped, NsLab};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the controller listens (in the switch namespace).
const PORT: u16 = 16655;
/// UDP port the app's table-0 rule drops; another that passes.
const DROP_UDP: &str = "5999";
const PASS_UDP: &str = "7777";
/// The learned flows' idle timeout (seconds).
const IDLE: u64 = 4;
const VENV_MANAGER: &str = "/opt/nicflow-tools/osken-venv/bin/osken-manager";

fn osken_manager() -> Option<String> {
    let candidates = std::env::var("NICFLOW_OSKEN_MANAGER")
        .into_iter()
        .chain([VENV_MANAGER.to_string(), "osken-manager".to_string()]);
    for c in candidates {
        let ok = Command::new(&c)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map(|o| {
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout)
                        .trim()
                        .starts_with("osken-manager")
            })
            .unwrap_or(false);
        if ok {
            return Some(c);
        }
    }
    None
}

fn here(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(rel)
}

/// The osken-manager process; killed and reaped when dropped (the lab's
/// guard also kills everything left in its namespaces).
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A lab: switch namespace with a nicflow daemon, two hosts on p1/p2.
fn lab(tag: &str, offload: &str) -> NsLab {
    let mut lab = NsLab::new("nfok", tag, &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h1", &["ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"]);
    lab.must("h2", &["ip", "addr", "add", "198.18.0.2/24", "dev", "eth0"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["set", "br0", &format!("offload={offload}")])
        .unwrap();
    lab.cli(&["add-port", "br0", "p1"]).unwrap();
    lab.cli(&["add-port", "br0", "p2"]).unwrap();
    lab
}

/// `n` pings from h1 to h2 (198.18.0.2) all answered.
fn pings(lab: &NsLab, n: u32) -> bool {
    lab.pings("h1", "198.18.0.2", n)
}

fn mac(lab: &NsLab, host: &str) -> String {
    lab.must(host, &["cat", "/sys/class/net/eth0/address"])
        .trim()
        .to_string()
}

/// The app's log: one JSON object per line.
fn app_log(lab: &NsLab) -> Vec<Value> {
    std::fs::read_to_string(lab.dir().join("osken.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Everything worth seeing when an assertion fails.
fn context(lab: &NsLab) -> String {
    format!(
        "flows:\n{}\ncontroller:\n{}\napp log:\n{}\ndaemon log:\n{}",
        lab.cli(&["dump-flows", "br0"]).unwrap_or_else(|e| e),
        lab.cli(&["get-controller", "br0"]).unwrap_or_else(|e| e),
        std::fs::read_to_string(lab.dir().join("osken.jsonl")).unwrap_or_default(),
        lab.daemon_log()
            + &std::fs::read_to_string(lab.dir().join("osken.out")).unwrap_or_default()
    )
}

fn wait_for(lab: &NsLab, what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > within {
            panic!("{what}: not within {within:?}\n{}", context(lab));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `n_packets` of the dump-flows line that contains every one of `what`.
fn n_packets(dump: &str, what: &[&str]) -> u64 {
    let line = dump
        .lines()
        .find(|l| what.iter().all(|w| l.contains(w)))
        .unwrap_or_else(|| panic!("no rule with {what:?} in:\n{dump}"));
    line.split("n_packets=")
        .nth(1)
        .and_then(|t| t.split([',', ' ']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no n_packets in `{line}`"))
}

/// UDP datagrams to `DROP_UDP` then `PASS_UDP` from h1 to h2: what the sink
/// in h2 counted per port.
fn udp_probe(lab: &NsLab, n: u32) -> (u64, u64) {
    let python = "/usr/bin/python3";
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &lab.ns("h2"), python])
        .arg(here("scapy/udp_sink.py"))
        .args(["--ports", &format!("{PASS_UDP},{DROP_UDP}")])
        .args(["--stop-after", &n.to_string(), "--grace", "1", "--timeout"])
        .arg("8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting udp_sink.py");
    let mut out = BufReader::new(sink.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "udp_sink.py: {line:?}");
    let sender = here("scapy/udp_send.py");
    for dport in [DROP_UDP, PASS_UDP] {
        lab.must(
            "h1",
            &[
                python,
                sender.to_str().unwrap(),
                "198.18.0.2",
                "--dport",
                dport,
                "--sport",
                "40000",
                "--count",
                &n.to_string(),
                "--interval",
                "0.005",
            ],
        );
    }
    let _ = sink.wait();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let got: Value = rest
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("udp_sink.py printed {rest:?}"));
    let count = |p: &str| got["counts"][p].as_u64().unwrap_or(0);
    (count(DROP_UDP), count(PASS_UDP))
}

fn osken_runs_a_multi_table_pipeline(tag: &str, offload: &str) {
    if !lab_possible() {
        return;
    }
    let Some(manager) = osken_manager() else {
        skipped(
            "osken-manager not installed (os-ken 3.1.0 in /opt/nicflow-tools/osken-venv: \
             scripts/setup.sh as root; or set NICFLOW_OSKEN_MANAGER)",
        );
        return;
    };
    let lab = lab(tag, offload);
    // Secure: the bridge's rules go and nothing forwards without the
    // controller.
    lab.cli(&["set-fail-mode", "br0", "secure"]).unwrap();
    assert!(!pings(&lab, 1), "secure bridge forwarded without rules");

    let out = std::fs::File::create(lab.dir().join("osken.out")).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &lab.ns("sw"), &manager])
        .args(["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port"])
        .arg(PORT.to_string())
        .arg(here("osken/nicflow_pipeline.py"))
        .env("NICFLOW_OSKEN_LOG", lab.dir().join("osken.jsonl"))
        .env("NICFLOW_OSKEN_DROP_UDP", DROP_UDP)
        .env("NICFLOW_OSKEN_IDLE", IDLE.to_string())
        .env("PYTHONWARNINGS", "ignore")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("starting osken-manager");
    let _controller = Controller(child);
    // Wait until it listens, so the first connection attempt succeeds.
    wait_for(
        &lab,
        "osken-manager listening",
        Duration::from_secs(20),
        || {
            lab.exec("sw", &["ss", "-Hltn", &format!("sport = :{PORT}")])
                .is_ok_and(|s| !s.trim().is_empty())
        },
    );
    lab.cli(&["set-controller", "br0", &format!("tcp:127.0.0.1:{PORT}")])
        .unwrap();
    wait_for(
        &lab,
        "controller connected",
        Duration::from_secs(15),
        || {
            lab.cli(&["get-controller", "br0"])
                .is_ok_and(|g| g.contains("is_connected: true"))
        },
    );
    // The app installs its pipeline on FEATURES_REPLY, then a barrier.
    wait_for(&lab, "pipeline installed", Duration::from_secs(10), || {
        app_log(&lab).iter().any(|e| e["event"] == "barrier")
    });
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(dump.contains("goto_table:1"), "{dump}");
    assert!(dump.contains("table=1"), "{dump}");
    assert!(dump.contains("actions=CONTROLLER"), "{dump}");
    assert!(dump.contains(&format!("tp_dst={DROP_UDP}")), "{dump}");

    // Learning through PACKET_IN / PACKET_OUT / FLOW_MOD.
    let ok = (0..5).any(|_| pings(&lab, 3));
    assert!(ok, "no ping through os-ken\n{}", context(&lab));
    assert!(pings(&lab, 5), "ping lost packets\n{}", context(&lab));
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    let (m1, m2) = (mac(&lab, "h1"), mac(&lab, "h2"));
    for (m, port) in [(&m1, "p1"), (&m2, "p2")] {
        let line = dump
            .lines()
            .find(|l| l.contains(m.as_str()))
            .unwrap_or_else(|| panic!("no learned flow for {m}\n{}", context(&lab)));
        assert!(line.contains("table=1"), "{line}");
        assert!(line.contains(&format!("idle_timeout={IDLE}")), "{line}");
        assert!(line.contains(&format!("actions=output:{port}")), "{line}");
    }
    // Later pings are forwarded by the learned flows, not the controller.
    assert!(n_packets(&dump, &[&m2]) >= 4, "{dump}");

    // The drop rule drops; other UDP passes through the learned flow.
    let (dropped_got, passed_got) = udp_probe(&lab, 20);
    assert_eq!(
        dropped_got,
        0,
        "UDP to {DROP_UDP} passed the drop rule\n{}",
        context(&lab)
    );
    assert_eq!(passed_got, 20, "UDP to {PASS_UDP} lost\n{}", context(&lab));
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    let dp = lab.cli(&["dump-dp-flows", "br0"]).unwrap();
    eprintln!(
        "{tag}: UDP to {DROP_UDP}: {dropped_got}/20 arrived, to {PASS_UDP}: {passed_got}/20\n{dump}\n{dp}"
    );
    if offload != "none" {
        // The controller's rules are cached like any others: the drop and
        // the learned forwarding run in the kernel's TC engine.
        let dp_flow = |port: &str| {
            dp.lines()
                .find(|l| l.contains(&format!("tp_dst={port},")))
                .unwrap_or_else(|| panic!("no datapath flow for UDP {port}:\n{dp}"))
        };
        let drop = dp_flow(DROP_UDP);
        assert!(
            drop.contains("engine:tc") && drop.contains("actions:drop"),
            "{dp}"
        );
        assert!(dp_flow(PASS_UDP).contains("engine:tc"), "{dp}");
    }
    assert!(
        n_packets(&dump, &[&format!("tp_dst={DROP_UDP}")]) >= 20,
        "{dump}"
    );

    // Idle timeout: the learned flows leave, the next ping goes through
    // the controller again and they come back.
    wait_for(
        &lab,
        "learned flows idle out",
        Duration::from_secs(IDLE + 10),
        || {
            !lab.cli(&["dump-flows", "br0"])
                .unwrap()
                .contains("idle_timeout=")
        },
    );
    let ins = |log: &[Value]| log.iter().filter(|e| e["event"] == "packet_in").count();
    let before = ins(&app_log(&lab));
    assert!(pings(&lab, 3), "no ping after idle out\n{}", context(&lab));
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(dump.contains(&m1) && dump.contains(&m2), "{dump}");
    let log = app_log(&lab);
    assert!(ins(&log) > before, "no PACKET_IN after idle out");

    // What the app saw and did.
    let what = |w: &str| {
        log.iter()
            .filter(|e| e["event"] == "flow_mod" && e["what"] == w)
            .count()
    };
    assert_eq!(what("goto"), 1, "{log:?}");
    assert_eq!(what("drop"), 1, "{log:?}");
    assert_eq!(what("miss"), 1, "{log:?}");
    assert!(what("learned") >= 4, "{log:?}");
    let learned = |m: &str, p: u64| {
        log.iter()
            .any(|e| e["event"] == "learn" && e["mac"] == m && e["port"] == p)
    };
    assert!(learned(&m1, 1) && learned(&m2, 2), "{log:?}");
    assert!(
        log.iter()
            .filter(|e| e["event"] == "packet_in")
            .all(|e| e["table"] == 1),
        "PACKET_IN not from the table-1 miss: {log:?}"
    );
    let errors: Vec<_> = log.iter().filter(|e| e["event"] == "error").collect();
    assert!(errors.is_empty(), "OpenFlow errors: {errors:?}");
}

#[test]
fn osken_pipeline_userspace() {
    osken_runs_a_multi_table_pipeline("a", "none");
}

#[test]
fn osken_pipeline_offloaded() {
    osken_runs_a_multi_table_pipeline("b", "auto");
}
