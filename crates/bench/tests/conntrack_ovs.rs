//! The same flow tables behave the same in nicflow and in Open vSwitch:
//! OVS's stateful firewall table, loaded into nicflow (the defaults) and
//! into OVS 3.1's userspace datapath on identical labs, gets the same real
//! traffic (curl both ways, ping both ways); what passes and what is
//! dropped must agree, and `nicflow dump-conntrack` must print the same
//! connections as `ovs-appctl dpctl/dump-conntrack`, line for line, with
//! the ephemeral ports and ICMP ids masked.
//!
//! Root and Open vSwitch (`ovs-vswitchd`) needed; skipped with the reason
//! otherwise. Labs are the bench testbed's (`ctx` prefix), torn down even
//! when an assertion fails.

// The switch crate's skip helpers (root and tool checks, the skip log).
#[path = "../../nicflow/tests/common/skip.rs"]
#[allow(dead_code)]
mod common;

use nicflow::control::daemon::request;
use nicflow::control::proto::Request;
use nicflow_bench::conntrack::FIREWALL;
use nicflow_bench::forward::Engine;
use nicflow_bench::testbed::{Rules, Testbed, TestbedSpec};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the HTTP servers and takes the lab down, also on a panic.
struct Guard {
    tb: Option<Testbed>,
    servers: Vec<std::process::Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        if let Some(tb) = self.tb.take() {
            let _ = tb.down();
        }
    }
}

fn http_server(ns: &str, addr: &str) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-m", "http.server", "8080"])
        .args(["--bind", addr, "--directory", "/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 http.server")
}

fn curl(ns: &str, url: &str) -> bool {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-m",
            "2",
            url,
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether namespace `ns` has a TCP socket to or from port 8080 in any
/// state but TIME_WAIT (`ss` as an observer).
fn open_tcp(ns: &str) -> bool {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ss",
            "-Htn",
            "state",
            "all",
            "exclude",
            "time-wait",
            "( sport = :8080 or dport = :8080 )",
        ])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| !l.trim().is_empty() && !l.starts_with("LISTEN"))
        })
        .unwrap_or(false)
}

fn ping(ns: &str, to: &str) -> bool {
    Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", to,
        ])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Ephemeral ports and ICMP ids vary between runs: mask them.
fn normalize(line: &str) -> String {
    let mut out = Vec::new();
    for part in line.split(',') {
        let masked = ["sport=", "id="]
            .iter()
            .find(|k| {
                part.trim_start_matches("orig=(")
                    .trim_start_matches("reply=(")
                    .starts_with(**k)
            })
            .map(|k| {
                let (head, _) = part.split_at(part.find(k).unwrap() + k.len());
                format!("{head}N")
            });
        let masked = masked.or_else(|| {
            // Client ports appear as the reply's dport (server side is 8080).
            let v = part.strip_prefix("dport=")?;
            let num: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
            (num != "8080").then(|| format!("dport=N{}", &v[num.len()..]))
        });
        out.push(masked.unwrap_or_else(|| part.to_string()));
    }
    out.join(",")
}

/// What passes (curl and ping both ways) and the normalized conntrack
/// table after it, for one engine.
fn run(engine: Engine) -> (Vec<bool>, Vec<String>) {
    let spec = TestbedSpec {
        rules: Rules::Custom(FIREWALL.iter().map(|s| s.to_string()).collect()),
        nicflow_bin: Some(
            nicflow_bench::nicflow_bin()
                .expect("the nicflow binary (cargo test --workspace builds it)"),
        ),
        ..TestbedSpec::new(engine, 1, "ctx")
    };
    let tb = Testbed::up(&spec).expect("testbed up");
    let (c, s) = (tb.client(0).clone(), tb.server(0).clone());
    let mut g = Guard {
        tb: Some(tb),
        servers: vec![
            http_server(&s.netns, &s.ip4.to_string()),
            http_server(&c.netns, &c.ip4.to_string()),
        ],
    };
    let to_server = format!("http://{}:8080/", s.ip4);
    let to_client = format!("http://{}:8080/", c.ip4);
    // The servers take a moment to listen; only then does a refused curl
    // mean the firewall.
    let t = Instant::now();
    let mut first = false;
    while t.elapsed() < Duration::from_secs(10) {
        if curl(&c.netns, &to_server) {
            first = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // The warm-up connection's close must be over before the flush: a
    // last ACK that reaches the switch after it would start a new
    // (mid-stream, ESTABLISHED) entry in one switch and not in the other,
    // depending on timing alone. The client holds only TIME_WAIT then.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) && open_tcp(&c.netns) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let tb = g.tb.as_mut().unwrap();
    // Start from a clean table: the warm-up attempts are gone.
    match engine {
        Engine::Ovs => {
            tb.ovs_appctl(&["dpctl/flush-conntrack"]).unwrap();
        }
        _ => {
            let sock = tb.nicflow_socket().unwrap();
            request(
                &sock,
                &Request::FlushConntrack {
                    bridge: "br0".into(),
                    zone: None,
                    filter: None,
                },
            )
            .unwrap();
        }
    }
    let verdicts = vec![
        first,
        curl(&c.netns, &to_server),
        curl(&c.netns, &to_server),
        curl(&s.netns, &to_client),
        ping(&c.netns, &s.ip4.to_string()),
        ping(&s.netns, &c.ip4.to_string()),
    ];
    // Every connection closed (the same condition as before the flush),
    // then a moment for the switch to see the last packets.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) && (open_tcp(&c.netns) || open_tcp(&s.netns)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let dump = match engine {
        Engine::Ovs => tb.ovs_appctl(&["dpctl/dump-conntrack"]).unwrap(),
        _ => {
            let sock = tb.nicflow_socket().unwrap();
            let r = request(
                &sock,
                &Request::DumpConntrack {
                    bridge: "br0".into(),
                    zone: None,
                    verbose: false,
                    stats: false,
                },
            )
            .unwrap();
            r.text
        }
    };
    let mut lines: Vec<String> = dump
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(normalize)
        .collect();
    lines.sort();
    (verdicts, lines)
}

#[test]
fn stateful_firewall_behaves_as_in_open_vswitch() {
    if !common::is_root() {
        common::skipped("conntrack_ovs: needs root");
        return;
    }
    for tool in ["ovs-vswitchd", "curl", "ping"] {
        if !common::have(tool) {
            common::skipped(&format!("conntrack_ovs: needs {tool}"));
            return;
        }
    }
    let (nv, nd) = run(Engine::NicflowTc);
    let (ov, od) = run(Engine::Ovs);
    assert_eq!(
        nv,
        vec![true, true, true, false, true, false],
        "nicflow: curl c->s x3, curl s->c, ping c->s, ping s->c"
    );
    assert_eq!(nv, ov, "same verdicts as OVS");
    eprintln!("nicflow dump-conntrack (normalized):\n{}", nd.join("\n"));
    assert!(
        nd.iter().filter(|l| l.starts_with("tcp,")).count() >= 2
            && nd.iter().any(|l| l.starts_with("icmp,")),
        "the table holds the curls and the ping: {nd:#?}"
    );
    assert_eq!(nd, od, "same conntrack table as OVS (nicflow vs OVS)");
}
