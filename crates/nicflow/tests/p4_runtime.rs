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
    let found = nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))])
        .filter(|p| p.join("netronome/ipv6_forward.p4").exists());
    if found.is_none() {
        common::skipped("shared/p4-corpus not found (set NICFLOW_P4_CORPUS)");
    }
    found
}

/// Kills the P4Runtime server when the test ends, also on failure.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // Already reaped (std keeps its status): its pid may be reused.
        if matches!(self.0.try_wait(), Ok(Some(_))) {
            return;
        }
        // SAFETY: kill(2) on our own child, not yet reaped.
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

/// A v1model program with a direct counter on a ternary table with idle
/// timeout, a counter indexed by ingress port and a register holding the
/// last EtherType.
const COUNTERS_P4: &str = r#"#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> etype; }
struct headers { ethernet_t eth; }
struct metadata { }

parser P(packet_in pkt, out headers hdr, inout metadata m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers hdr, inout metadata m) { apply { } }
control I(inout headers hdr, inout metadata m, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) dmac_hits;
    counter(16, CounterType.packets_and_bytes) port_pkts;
    register<bit<32>>(4) last_type;
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table dmac {
        key = { hdr.eth.dst : ternary; }
        actions = { fwd; drop; }
        default_action = drop();
        counters = dmac_hits;
        support_timeout = true;
        size = 64;
    }
    apply {
        port_pkts.count((bit<32>) sm.ingress_port);
        last_type.write(0, (bit<32>) hdr.eth.etype);
        dmac.apply();
    }
}
control E(inout headers hdr, inout metadata m, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata m) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), C(), D()) main;
"#;

/// A daemon with bridge br0 and two ports, p1 and p2, veths to hosts h1
/// and h2 (namespaces); the lab and the ports' OpenFlow numbers.
fn two_host_bridge(tag: &str) -> (common::NsLab, u64, u64) {
    let mut lab = common::NsLab::new(tag, "", &["sw", "h1", "h2"]);
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
    (lab, pa, pb)
}

/// The P4Info `nicflow p4 p4info` prints for `program` (what the
/// controller will send), written beside it in the lab directory: its path
/// and text.
fn write_p4info(lab: &common::NsLab, program: &Path, include: &Path) -> (PathBuf, String) {
    let text = lab
        .cli(&[
            "p4",
            "p4info",
            program.to_str().unwrap(),
            "-I",
            include.to_str().unwrap(),
        ])
        .unwrap();
    let stem = program
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("prog");
    let path = lab.dir().join(format!("{stem}.p4info.txtpb"));
    std::fs::write(&path, &text).unwrap();
    (path, text)
}

/// Starts `nicflow p4 runtime br0` for the lab's daemon (with `extra`
/// arguments) and waits until it listens: the server (killed on drop), its
/// address and its log.
fn serve(lab: &common::NsLab, include: &Path, extra: &[&str]) -> (Server, String, PathBuf) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let log = lab.dir().join("p4rt.log");
    let server = Server(
        Command::new(common::nicflow_bin())
            .arg("--socket")
            .arg(lab.sock())
            .args(["p4", "runtime", "br0", "--listen", &listen])
            .args(extra)
            .arg("-I")
            .arg(include)
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
    (server, listen, log)
}

/// One p4runtime-shell session (tests/p4_runtime_client.py MODE) with
/// election id `election`; fails the test unless it printed DONE.
fn run_shell(
    py: &str,
    lab: &common::NsLab,
    listen: &str,
    log: &Path,
    election: u32,
    mode: &str,
    args: &[&str],
) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/p4_runtime_client.py");
    let out = Command::new(py)
        .arg(&script)
        .arg(mode)
        .arg(listen)
        .arg(election.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running p4_runtime_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("[{mode}]\n{stdout}");
    assert!(
        out.status.success() && stdout.contains("DONE"),
        "p4runtime-shell client ({mode}) failed:\n{stdout}\n{stderr}\nserver log:\n{}\ndaemon log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default(),
        lab.daemon_log()
    );
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

    let (lab, pa, pb) = two_host_bridge("nfp4rt");

    // The P4Info the controller will send, as nicflow prints it.
    let (p4info, text) = write_p4info(&lab, &program, &include);
    assert!(text.contains("name: \"MyIngress.ipv6_lpm\""), "{text}");

    let (server, listen, log) = serve(&lab, &include, &[]);
    let mut election = 0;
    let mut shell = |mode: &str, args: &[&str]| {
        election += 1;
        run_shell(&py, &lab, &listen, &log, election, mode, args)
    };
    let (pa_s, pb_s) = (pa.to_string(), pb.to_string());
    let p4info_s = p4info.to_str().unwrap().to_string();
    shell(
        "tutorial",
        &[&p4info_s, program.to_str().unwrap(), &pa_s, &pb_s],
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

    // Another program's P4Info with this program: refused, nothing changes.
    let ternary = corpus.join("v1model/ternary2-bmv2.p4");
    let ternary_info = corpus.join("v1model/ternary2-bmv2.p4.p4info.txtpb");
    shell(
        "refuse",
        &[ternary_info.to_str().unwrap(), program.to_str().unwrap()],
    );
    let dump = lab.cli(&["p4", "table-dump", "br0"]).unwrap();
    assert_eq!(
        dump.lines()
            .filter(|l| l.contains("MyIngress.ipv6_lpm entry"))
            .count(),
        5,
        "{dump}"
    );

    // p4c's own P4Info (ids unlike nicflow's) for the program it describes.
    shell(
        "adopt",
        &[ternary_info.to_str().unwrap(), ternary.to_str().unwrap()],
    );
    let dump = lab
        .cli(&["p4", "table-dump", "br0", "ingress.test1"])
        .unwrap();
    assert!(
        dump.contains("0x101&&&0xffff") && dump.contains("priority:5"),
        "{dump}"
    );

    // Counters and registers: a program of our own with a direct counter,
    // an indexed counter and a register; traffic from h1 in between.
    let counters = lab.dir().join("counters.p4");
    std::fs::write(&counters, COUNTERS_P4).unwrap();
    let (counters_info, _) = write_p4info(&lab, &counters, &include);
    shell(
        "counters_fill",
        &[
            counters_info.to_str().unwrap(),
            counters.to_str().unwrap(),
            &pb_s,
        ],
    );
    lab.must("h1", &["ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"]);
    lab.must(
        "h1",
        &[
            "ip",
            "neigh",
            "replace",
            "198.18.0.2",
            "lladdr",
            "00:00:00:00:00:02",
            "dev",
            "eth0",
        ],
    );
    let _ = lab.exec(
        "h1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "1", "198.18.0.2"],
    );
    shell("counters_read", &[&pa_s]);
    // The dmac entry (TTL 0: never idle) gets a 2-s TTL: the controller
    // gets an IdleTimeoutNotification naming it.
    shell("idle", &[&pb_s]);

    // SIGTERM stops the server cleanly.
    let mut server = server;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGTERM) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = server.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "server ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "server exit: {status}");
}

/// A v1model program with BMv2-style controller headers: frames of
/// EtherType 0x88b5 go to the CPU port (255) with a `packet_in` header
/// naming their ingress port; frames from the CPU port carry a
/// `packet_out` header whose `egress_port` the program obeys.
const PKTIO_P4: &str = r#"#include <core.p4>
#include <v1model.p4>

#define CPU_PORT 255

@controller_header("packet_in")
header packet_in_t { bit<9> ingress_port; bit<7> _pad; }
@controller_header("packet_out")
header packet_out_t { bit<9> egress_port; bit<7> _pad; }
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etype; }
struct headers { packet_out_t packet_out; packet_in_t packet_in; ethernet_t eth; }
struct metadata { }

parser P(packet_in pkt, out headers hdr, inout metadata m, inout standard_metadata_t sm) {
    state start {
        transition select(sm.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out { pkt.extract(hdr.packet_out); transition parse_ethernet; }
    state parse_ethernet { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers hdr, inout metadata m) { apply { } }
control I(inout headers hdr, inout metadata m, inout standard_metadata_t sm) {
    apply {
        if (hdr.packet_out.isValid()) {
            sm.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else if (hdr.eth.etype == 0x88b5) {
            sm.egress_spec = CPU_PORT;
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = sm.ingress_port;
            hdr.packet_in._pad = 0;
        } else {
            mark_to_drop(sm);
        }
    }
}
control E(inout headers hdr, inout metadata m, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata m) { apply { } }
control D(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr.packet_in); pkt.emit(hdr.eth); }
}
V1Switch(P(), VC(), I(), E(), C(), D()) main;
"#;

/// PacketIn and PacketOut through the CPU port (`--cpu-port 255`), with
/// the real p4runtime-shell: a frame from h1 reaches the controller with
/// its ingress port as metadata, and a controller's frame leaves towards
/// h2 through the program; such runs are never cached.
#[test]
fn packet_in_and_packet_out_cross_the_cpu_port() {
    if !common::lab_possible() {
        return;
    }
    let Some(py) = python() else { return };
    let Some(corpus) = corpus() else { return };
    let include = corpus.join("include");

    let (lab, pa, pb) = two_host_bridge("nfp4pio");

    let program = lab.dir().join("pktio.p4");
    std::fs::write(&program, PKTIO_P4).unwrap();
    let (p4info, text) = write_p4info(&lab, &program, &include);
    assert!(
        text.contains("controller_packet_metadata") && text.contains("name: \"egress_port\""),
        "{text}"
    );

    // A CPU port that is a bridge port is refused.
    let e = lab
        .cli(&[
            "p4",
            "load",
            "br0",
            program.to_str().unwrap(),
            "--cpu-port",
            &pa.to_string(),
            "-I",
            include.to_str().unwrap(),
        ])
        .unwrap_err();
    assert!(e.contains("is bridge port p1"), "{e}");
    assert!(
        lab.cli(&["p4", "info", "br0"]).is_err(),
        "no program loaded"
    );

    let (_server, listen, log) = serve(&lab, &include, &["--cpu-port", "255"]);
    run_shell(
        &py,
        &lab,
        &listen,
        &log,
        1,
        "pktio",
        &[
            p4info.to_str().unwrap(),
            program.to_str().unwrap(),
            &lab.ns("h1"),
            &lab.ns("h2"),
            &pa.to_string(),
            &pb.to_string(),
        ],
    );

    // The daemon counted the packet-ins and cached none of those runs.
    let info = lab.cli(&["p4", "info", "br0"]).unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cpu_port:255"))
        .unwrap_or_else(|| panic!("{info}"));
    assert!(
        !line.contains("packet_in:0 ") && line.ends_with("packet_in_dropped:0"),
        "{info}"
    );
    assert!(info.contains("p4-packet-in:"), "{info}");
    assert!(info.contains("p4-packet-out:"), "{info}");
}
