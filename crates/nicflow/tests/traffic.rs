//! The traffic tools checked on small runs: `nicflow gen` to `nicflow sink`
//! over a plain veth pair delivers every frame (AF_XDP and AF_PACKET, v4
//! and v6, UDP/TCP/ICMP), and through a `nicflow daemon` lab the sink's loss
//! count equals exactly the frames a drop rule discarded.
//!
//! Namespaces are `tg<pid><tag>a/b` (labs `tg<pid><tag>`), removed by guards
//! even when an assertion fails. Traffic stays inside them: 198.18.0.0/15
//! and 2001:db8::/32. As any other user than root the root tests print
//! "skipping: needs root" and pass.

mod common;

use nicflow::lab::{self, LabOptions, Topology};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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
    let ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !root || !ip {
        notice("skipping: needs root (and iproute2)");
    }
    root && ip
}

fn nicflow_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nicflow"))
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

fn must(args: &[&str]) -> String {
    let o = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    assert!(o.status.success(), "`{}`: {}", args.join(" "), text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Two namespaces joined by a veth pair (`a` in `<p>a`, `b` in `<p>b`),
/// deleted (with the veth) on drop.
struct VethPair {
    ns_a: String,
    ns_b: String,
}

impl VethPair {
    fn new(tag: &str) -> VethPair {
        let p = format!("tg{}{tag}", std::process::id());
        // Built first, so a failing step below still deletes what exists.
        let v = VethPair {
            ns_a: format!("{p}a"),
            ns_b: format!("{p}b"),
        };
        must(&["ip", "netns", "add", &v.ns_a]);
        must(&["ip", "netns", "add", &v.ns_b]);
        must(&[
            "ip", "link", "add", "name", "a", "netns", &v.ns_a, "type", "veth", "peer", "name",
            "b", "netns", &v.ns_b,
        ]);
        for (ns, dev) in [(&v.ns_a, "a"), (&v.ns_b, "b")] {
            // No IPv6 chatter (ND, MLD): the sink must see only our frames.
            for k in ["all", "default"] {
                must(&[
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                ]);
            }
            must(&["ip", "-n", ns, "link", "set", "dev", dev, "up"]);
        }
        v
    }

    fn mac(&self, ns: &str, dev: &str) -> String {
        must(&[
            "ip",
            "netns",
            "exec",
            ns,
            "cat",
            &format!("/sys/class/net/{dev}/address"),
        ])
        .trim()
        .to_string()
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in [&self.ns_a, &self.ns_b] {
            if !std::path::Path::new("/run/netns").join(ns).exists() {
                continue;
            }
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A background `nicflow sink`, killed and reaped on drop.
struct Sink {
    child: Child,
}

impl Sink {
    /// Start `nicflow sink` in `ns` and wait until it is receiving.
    fn start(ns: &str, args: &[&str]) -> Sink {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(nicflow_bin())
            .arg("sink")
            .args(args)
            .args(["--json", "--ready-file"])
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut sink = Sink {
            child: cmd.spawn().expect("spawn sink"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            if let Ok(Some(st)) = sink.child.try_wait() {
                panic!("sink exited before it was ready: {st}");
            }
            assert!(Instant::now() < deadline, "sink not ready after 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        sink
    }

    /// Wait (up to `limit`) for the sink to exit by itself; its JSON.
    fn finish(mut self, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                _ if Instant::now() >= deadline => {
                    notice("sink still running; stopping it");
                    // SAFETY: kill(2) on our own child (ip netns exec execs
                    // nicflow, so the pid is the sink's): SIGINT makes it
                    // print its summary.
                    unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
                    let _ = self.child.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let mut out = String::new();
        use std::io::Read;
        if let Some(mut s) = self.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("sink output {out:?}: {e}"))
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn gen(ns: &str, args: &[&str]) -> Value {
    let o = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(nicflow_bin())
        .arg("gen")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("running gen");
    assert!(o.status.success(), "gen {args:?}: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("gen output {out:?}: {e}"))
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// gen -> sink over a plain veth pair at a modest rate: every frame arrives,
/// once, in order, and the JSON of both sides has the contract's fields.
fn plain_veth_run(tag: &str, port_type: &str, extra: &[&str]) {
    if !privileged() {
        return;
    }
    let v = VethPair::new(tag);
    let dst = v.mac(&v.ns_b, "b");
    let count = 3000;
    let flows = 5;
    let sink = Sink::start(
        &v.ns_b,
        &[
            "--iface",
            "b",
            "--port-type",
            port_type,
            "--expect",
            &count.to_string(),
            "--flows",
            &flows.to_string(),
            "--idle-exit",
            "1500",
            "--duration",
            "30",
            "--per-flow",
        ],
    );
    let mut args = vec![
        "--iface",
        "a",
        "--port-type",
        port_type,
        "--dst-mac",
        dst.as_str(),
        "--count",
        "3000",
        "--flows",
        "5",
        "--rate",
        "20000",
    ];
    args.extend_from_slice(extra);
    let g = gen(&v.ns_a, &args);
    let s = sink.finish(Duration::from_secs(20));
    notice(&format!("gen: {g}\nsink: {s}"));
    assert_eq!(u(&g, "sent"), count, "{g}");
    assert_eq!(u(&g, "errors"), 0, "{g}");
    assert_eq!(u(&g, "flows"), flows);
    let engine = g["engine"].as_str().unwrap();
    assert!(
        engine.starts_with(if port_type == "afpacket" {
            "afpacket-txring"
        } else {
            "afxdp-"
        }),
        "{engine}"
    );
    for k in ["seconds", "pps", "gbps", "cpu_user_s", "cpu_sys_s"] {
        assert!(g[k].is_f64(), "{k} in {g}");
    }
    assert_eq!(u(&s, "ours"), count, "{s}");
    assert_eq!(u(&s, "lost"), 0, "{s}");
    assert_eq!(u(&s, "duplicates"), 0, "{s}");
    assert_eq!(u(&s, "reordered"), 0, "{s}");
    assert_eq!(u(&s, "flows"), flows, "{s}");
    let lat = &s["latency_ns"];
    assert_eq!(u(lat, "count"), count, "{s}");
    assert!(u(lat, "min") <= u(lat, "p50") && u(lat, "p50") <= u(lat, "p99"));
    assert!(u(lat, "p999") <= u(lat, "max") && u(lat, "max") < 1_000_000_000);
    let pf = s["per_flow"].as_array().expect("per_flow");
    assert_eq!(pf.len(), flows as usize);
    for f in pf {
        assert_eq!(u(f, "received"), count / flows, "{f}");
    }
}

#[test]
fn gen_to_sink_afxdp_udp4_no_loss() {
    plain_veth_run("x4", "afxdp", &[]);
}

#[test]
fn gen_to_sink_afpacket_udp4_no_loss() {
    plain_veth_run("p4", "afpacket", &[]);
}

#[test]
fn gen_to_sink_afxdp_tcp6_no_loss() {
    plain_veth_run(
        "x6",
        "afxdp",
        &[
            "--ipv6", "--proto", "tcp", "--size", "128", "--vary", "dst-ip",
        ],
    );
}

#[test]
fn gen_to_sink_afpacket_icmp4_random_flows_no_loss() {
    plain_veth_run(
        "pi",
        "afpacket",
        &["--proto", "icmp", "--size", "1500", "--order", "random"],
    );
}

/// Frames the kernel accepts: UDP to a bound socket in the peer namespace
/// arrives (valid IP and UDP checksums, right MAC).
#[test]
fn kernel_receiver_accepts_generated_udp() {
    if !privileged() {
        return;
    }
    if Command::new("python3").arg("-V").output().is_err() {
        notice("skipping: python3 not installed");
        return;
    }
    let v = VethPair::new("k");
    must(&[
        "ip",
        "-n",
        &v.ns_a,
        "addr",
        "add",
        "198.18.0.1/24",
        "dev",
        "a",
    ]);
    must(&[
        "ip",
        "-n",
        &v.ns_b,
        "addr",
        "add",
        "198.18.0.2/24",
        "dev",
        "b",
    ]);
    let dst = v.mac(&v.ns_b, "b");
    let script = "import socket,sys\n\
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
s.bind(('198.18.0.2',9))\ns.settimeout(3)\nprint('ready',flush=True)\nn=0\n\
try:\n  while True:\n    s.recv(2048); n+=1\nexcept socket.timeout:\n  pass\nprint(n)\n";
    let mut py = Command::new("ip")
        .args(["netns", "exec", &v.ns_b, "python3", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = py.stdout.take().unwrap();
    let mut buf = [0u8; 6];
    use std::io::Read;
    out.read_exact(&mut buf).expect("ready line");
    let g = gen(
        &v.ns_a,
        &[
            "--iface",
            "a",
            "--port-type",
            "afpacket",
            "--dst-mac",
            &dst,
            "--count",
            "200",
            "--rate",
            "10000",
            "--size",
            "200",
        ],
    );
    assert_eq!(u(&g, "sent"), 200);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let _ = py.wait();
    assert_eq!(rest.trim(), "200", "datagrams the kernel delivered");
}

/// Through a switch: four flows vary the UDP source port, a rule drops the
/// third; the sink (told --expect and --flows) reports exactly that flow's
/// frames as lost and no other loss.
fn drop_rule_loss(tag: &str, port_type: &str) {
    if !privileged() {
        return;
    }
    let opts = LabOptions::with_binary(nicflow_bin());
    let name = format!("tg{}{tag}", std::process::id());
    let sysctl = r#"sysctl = { "net.ipv6.conf.all.disable_ipv6" = 1, "net.ipv6.conf.default.disable_ipv6" = 1, "net.ipv6.conf.eth0.disable_ipv6" = 1 }"#;
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
        namespace = "own"
        port_type = "{port_type}"
        [[link]]
        a = "h1:eth0"
        b = "sw1:p1"
        addresses = ["198.18.0.1/24"]
        [[link]]
        a = "h2:eth0"
        b = "sw1:p2"
        addresses = ["198.18.0.2/24"]
        "#
    ))
    .expect("test topology");
    struct Down(String, LabOptions);
    impl Drop for Down {
        fn drop(&mut self) {
            if let Err(e) = lab::down(&self.0, &self.1) {
                notice(&format!("guard: down {}: {e}", self.0));
            }
        }
    }
    let _down = Down(name.clone(), opts.clone());
    let report = lab::up(&topo, &opts).unwrap_or_else(|e| panic!("lab up {name}: {e}"));
    assert!(report.unattached.is_empty(), "{:?}", report.unattached);
    let sock = lab::switch_socket(&name, "sw1", &opts);
    let cli = |args: &[&str]| {
        let o = Command::new(nicflow_bin())
            .arg("--socket")
            .arg(&sock)
            .args(args)
            .output()
            .expect("nicflow cli");
        assert!(o.status.success(), "nicflow {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    cli(&[
        "add-flow",
        "br0",
        "priority=100,udp,tp_src=10002,actions=drop",
    ]);
    let ns = |node: &str| lab::node_namespace(Some(&topo), node, &opts).unwrap();
    let (ns1, ns2) = (ns("h1"), ns("h2"));
    let h2_mac = must(&[
        "ip",
        "netns",
        "exec",
        &ns2,
        "cat",
        "/sys/class/net/eth0/address",
    ])
    .trim()
    .to_string();
    let count = 4000u64;
    let sink = Sink::start(
        &ns2,
        &[
            "--iface",
            "eth0",
            "--port-type",
            "afpacket",
            "--expect",
            "4000",
            "--flows",
            "4",
            "--idle-exit",
            "1500",
            "--duration",
            "30",
            "--per-flow",
        ],
    );
    let g = gen(
        &ns1,
        &[
            "--iface",
            "eth0",
            "--dst-mac",
            &h2_mac,
            "--count",
            "4000",
            "--flows",
            "4",
            "--vary",
            "src-port",
            "--src-port",
            "10000",
            "--rate",
            "10000",
        ],
    );
    let s = sink.finish(Duration::from_secs(20));
    notice(&format!("gen: {g}\nsink: {s}"));
    assert_eq!(u(&g, "sent"), count);
    assert_eq!(u(&s, "lost"), count / 4, "exactly the dropped flow: {s}");
    assert_eq!(u(&s, "ours"), count - count / 4, "{s}");
    assert_eq!(u(&s, "flows"), 3, "{s}");
    let pf = s["per_flow"].as_array().expect("per_flow");
    assert_eq!(pf.len(), 4, "{s}");
    for f in pf {
        let lost = u(f, "lost");
        if u(f, "flow") == 2 {
            assert_eq!((lost, u(f, "received")), (1000, 0), "{f}");
        } else {
            assert_eq!((lost, u(f, "received")), (0, 1000), "{f}");
        }
    }
    // The switch agrees: the drop rule matched that flow's frames.
    let flows: Value = serde_json::from_str(&cli(&["--json", "dump-flows", "br0"])).unwrap();
    let hit = flows
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["flow"]
                .as_str()
                .is_some_and(|s| s.contains("tp_src=10002"))
        })
        .expect("drop rule listed")
        .clone();
    assert_eq!(hit["n_packets"].as_u64(), Some(count / 4), "{hit}");
}

#[test]
fn sink_loss_matches_drop_rule_afpacket_switch() {
    drop_rule_loss("da", "afpacket");
}

#[test]
fn sink_loss_matches_drop_rule_afxdp_switch() {
    drop_rule_loss("dx", "afxdp");
}

/// Bad input is refused before anything is opened, naming the token.
#[test]
fn bad_input_names_the_token() {
    let run = |args: &[&str]| {
        let o = Command::new(nicflow_bin())
            .args(args)
            .output()
            .expect("nicflow");
        assert!(!o.status.success(), "{args:?} should fail");
        text(&o)
    };
    let e = run(&["gen", "--iface", "lo", "--size", "63"]);
    assert!(e.contains("63"), "{e}");
    let e = run(&["gen", "--iface", "lo", "--dst-mac", "02:00:zz:00:00:01"]);
    assert!(e.contains("zz"), "{e}");
    let e = run(&["gen", "--iface", "lo", "--proto", "sctp"]);
    assert!(e.contains("sctp"), "{e}");
    let e = run(&["gen", "--iface", "lo", "--src-ip", "198.18.0.300"]);
    assert!(e.contains("198.18.0.300"), "{e}");
    let e = run(&["gen", "--iface", "nosuchif0", "--count", "1"]);
    assert!(e.contains("nosuchif0"), "{e}");
    let e = run(&[
        "gen", "--iface", "lo", "--proto", "tcp", "--size", "64", "--count", "1",
    ]);
    assert!(e.contains("--size `64`") && e.contains("76"), "{e}");
    let e = run(&["sink", "--iface", "nosuchif0", "--duration", "1"]);
    assert!(e.contains("nosuchif0"), "{e}");
}
