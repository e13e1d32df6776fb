//! P4Runtime driving a real bridge: a daemon with a two-port bridge (veths
//! into namespaces), `nicflow p4 runtime` in front of it, and the real
//! p4runtime-shell (tests/p4_runtime_client.py) loading the Netronome
//! tutorial's ipv6_forward.p4 with the P4Info `nicflow p4 p4info` prints,
//! filling its table, reading it back, and being refused a malformed entry.
//! The daemon's own view (`nicflow p4 table-dump`) must show what the
//! controller wrote, and a packet from a host must hit the entry it matches.
//! Needs root (namespaces), the p4runtime-shell venv (scripts/setup.sh) and
//! the shared P4 corpus; skips saying why otherwise.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const VENV_PYTHON: &str = "/opt/nicflow-tools/p4rt-venv/bin/python";

fn python() -> Option<String> {
    let py = std::env::var("NICFLOW_P4RT_SHELL_PYTHON").unwrap_or_else(|_| VENV_PYTHON.to_string());
    let ok = Command::new(&py)
        .args(["-c", "import p4runtime_sh.shell"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Some(py)
    } else {
        common::skipped(&format!(
            "no p4runtime-shell in {py} (run `bash scripts/setup.sh`, or set NICFLOW_P4RT_SHELL_PYTHON)"
        ));
        None
    }
}

fn corpus() -> Option<PathBuf> {
    let found = std::env::var("NICFLOW_P4_CORPUS")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .map(|a| a.join("shared/p4-corpus"))
                .find(|p| p.join("netronome/ipv6_forward.p4").exists())
        });
    if found.is_none() {
        common::skipped("shared/p4-corpus not found (set NICFLOW_P4_CORPUS)");
    }
    found
}

/// Kills the P4Runtime server when the test ends, also on failure.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let t0 = Instant::now();
        while self.0.try_wait().ok().flatten().is_none() {
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = self.0.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

fn ofport(show_json: &str, port: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(show_json).expect("show --json");
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|b| b["ports"].as_array().cloned().unwrap_or_default())
        .find(|p| p["name"] == port)
        .and_then(|p| p["ofport"].as_u64())
        .unwrap_or_else(|| panic!("no port {port} in {show_json}"))
}

#[test]
fn p4runtime_shell_fills_a_bridges_tables() {
    if !common::lab_possible() {
        return;
    }
    let Some(py) = python() else { return };
    let Some(corpus) = corpus() else { return };
    let program = corpus.join("netronome/ipv6_forward.p4");
    let include = corpus.join("include");

    let mut lab = common::NsLab::new("nfp4rt", "", &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.restart_daemon();
    for c in [
        &["add-br", "br0"][..],
        &["add-port", "br0", "p1"],
        &["add-port", "br0", "p2"],
    ] {
        lab.cli(c).unwrap_or_else(|e| panic!("{e}"));
    }
    let show = lab.cli(&["--json", "show"]).unwrap();
    let (pa, pb) = (ofport(&show, "p1"), ofport(&show, "p2"));

    // The P4Info the controller will send, as nicflow prints it.
    let p4info = lab.dir().join("ipv6_forward.p4info.txtpb");
    let text = lab
        .cli(&[
            "p4",
            "p4info",
            program.to_str().unwrap(),
            "-I",
            include.to_str().unwrap(),
        ])
        .unwrap();
    assert!(text.contains("name: \"MyIngress.ipv6_lpm\""), "{text}");
    std::fs::write(&p4info, &text).unwrap();

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let log = lab.dir().join("p4rt.log");
    let server = Server(
        Command::new(common::nicflow_bin())
            .arg("--socket")
            .arg(lab.sock())
            .args(["p4", "runtime", "br0", "--listen", &listen, "-I"])
            .arg(&include)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .expect("starting nicflow p4 runtime"),
    );
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "P4Runtime server did not come up:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/p4_runtime_client.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(&listen)
        .arg(&p4info)
        .arg(&program)
        .arg(pa.to_string())
        .arg(pb.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("running p4_runtime_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("DONE"),
        "p4runtime-shell client failed:\n{stdout}\n{stderr}\nserver log:\n{}\ndaemon log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        lab.daemon_log()
    );

    // The daemon's view: the controller's entries are the bridge's.
    let dump = lab.cli(&["p4", "table-dump", "br0"]).unwrap();
    let lines: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains("MyIngress.ipv6_lpm entry"))
        .collect();
    assert_eq!(lines.len(), 5, "{dump}");
    // 2001:db8:fc00::1 -> ipv6_forward(00:15:4d:00:00:00, p1).
    assert!(
        lines
            .iter()
            .any(|l| l.contains("0x20010db8fc0000000000000000000001")
                && l.contains("dstAddr=0x154d000000")
                && l.contains(&format!("port={:#x}", pa))),
        "{dump}"
    );
    // The modified entry, and not the deleted one.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("0x20010db8fc2000000000000000000002")
                && l.contains("dstAddr=0x80027eeeeee")),
        "{dump}"
    );
    assert!(
        !dump.contains("0x20010db8fc0000000000000000000003"),
        "{dump}"
    );

    // A packet from h1 to 2001:db8:fc00::2 goes through the program: its
    // entry counts it (the shell does not read it back: the tutorial's
    // table has no direct counter).
    lab.must(
        "h1",
        &[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:fc00::10/64",
            "dev",
            "eth0",
            "nodad",
        ],
    );
    lab.must(
        "h1",
        &[
            "ip",
            "-6",
            "neigh",
            "replace",
            "2001:db8:fc00::2",
            "lladdr",
            "00:15:4d:00:00:01",
            "dev",
            "eth0",
        ],
    );
    let _ = lab.exec(
        "h1",
        &["ping", "-6", "-c", "2", "-W", "1", "2001:db8:fc00::2"],
    );
    let dump = lab.cli(&["p4", "table-dump", "br0"]).unwrap();
    let hit = dump
        .lines()
        .find(|l| l.contains("0x20010db8fc0000000000000000000002"))
        .unwrap_or_else(|| panic!("{dump}"));
    assert!(
        !hit.contains("packets:0 "),
        "entry not hit by h1's packets: {hit}"
    );
    drop(server);
}
