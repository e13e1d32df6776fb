//! `nicflow bench conntrack`: document 003's connection-tracking
//! measurements (table VII: connections/s and transactions/s through a
//! stateful switch) on the lab, issue 13's benchmark.
//!
//! One client (`c1`, port `p1`) and one server (`s1`, port `p2`) around a
//! switch ([`Testbed`], one pair). The server runs nginx answering every
//! request with a 15-byte body (document 003's ab test fetches a 15-byte
//! file); the client runs `wrk` for `--seconds`:
//!
//! * **connections/s** (`cps`): `wrk -H 'Connection: close'`, so every
//!   request opens, uses and closes one TCP connection: each one is a new
//!   tracked connection (the first packet of each goes through the whole
//!   table walk, `ct(commit)` included).
//! * **transactions/s** (`tps`): wrk's default keep-alive, `--connections`
//!   persistent connections, requests back to back: established traffic
//!   only.
//!
//! Scenario **firewall**, engines:
//!
//! * `nicflow`: the defaults (nicflow-tc) with Open vSwitch's stateful
//!   firewall table ([`FIREWALL`]); nicflow's conntrack runs in userspace,
//!   so every packet of a ct flow goes through the daemon.
//! * `nicflow-noct`: the same switch with `in_port=p1,actions=output:p2`
//!   and back: what the path costs without `ct`.
//! * `ovs`: Open vSwitch's userspace datapath (netdev) with the same table
//!   (its userspace conntrack).
//! * `linux-bridge-nft`: the Linux bridge with an nftables stateful
//!   firewall (established/related accepted, new only from the client,
//!   everything else dropped). Bridge-family `ct` needs
//!   `nf_conntrack_bridge` (CONFIG_NF_CONNTRACK_BRIDGE); where the kernel
//!   lacks it the rules go in the `ip` family's forward hook and
//!   `br_netfilter` (`net.bridge.bridge-nf-call-iptables=1` in the switch
//!   namespace) hands bridged IPv4 to it — the run records which.
//! * `linux-bridge`: the plain learning bridge, the reference every ratio
//!   is taken against.
//!
//! Scenario **lb** (DNAT to three backends) needs `ct(nat(...))`; the run
//! asks `nicflow check-flows` whether this build accepts it and leaves the
//! scenario out, saying so, when it does not.
//!
//! Repetitions are interleaved (every engine's testbed is up for the whole
//! run; repetition r measures each engine in turn), so a change in the
//! machine's background load spreads over all engines instead of landing
//! on one. Hosts keep the kernel's default offloads (TSO, partial
//! checksums) by default, as a plain host does; `--host-offload off` gives
//! every engine finished checksums instead (`ethtool -K eth0 tx off`).
//! The client uses ports 1024-65535 with `tcp_tw_reuse`, in its own
//! namespace, so closing connections do not run it out of ports.

use super::cpu::{self, Snapshot, Usage};
use super::forward::{self, Engine, HostOffload};
use super::host_tools::{self, have, tool_version};
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use crate::control::proto::Request;
use crate::lab::sys;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated: nicflow (stateful firewall table),
    /// nicflow-noct (plain port rules), ovs (userspace datapath, same
    /// table), linux-bridge-nft (nftables ct rules), linux-bridge.
    #[arg(
        long,
        default_value = "nicflow,nicflow-noct,ovs,linux-bridge-nft,linux-bridge"
    )]
    pub engines: String,
    /// Concurrent wrk connections, comma-separated (one point each).
    #[arg(long, default_value = "32")]
    pub connections: String,
    /// Seconds per wrk run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Repetitions per point (the report shows medians).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Host-side checksum/TSO offload: default (the kernel's, as a plain
    /// host has them) or off (finished checksums).
    #[arg(long, default_value = "default")]
    pub host_offload: String,
    /// Run directory (default bench-conntrack-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Smoke test: 8 connections, one 2-s run per point.
    #[arg(long)]
    pub quick: bool,
    /// Rebuild the report from an earlier run's samples.json.
    #[arg(long, value_name = "SAMPLES_JSON")]
    pub render: Option<PathBuf>,
}

/// Open vSwitch's stateful firewall (testbed placeholders: `{c1}` is p1,
/// `{s1}` is p2).
pub const FIREWALL: &[&str] = &[
    "table=0,priority=1,actions=drop",
    "table=0,priority=10,arp,actions=normal",
    "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)",
    "table=1,priority=1,actions=drop",
    "table=1,priority=10,in_port={c1},ip,ct_state=+trk+new,actions=ct(commit),output:{s1}",
    "table=1,priority=10,in_port={c1},ip,ct_state=+trk+est,actions=output:{s1}",
    "table=1,priority=10,in_port={s1},ip,ct_state=+trk+est,actions=output:{c1}",
];

/// The load balancer's DNAT action, probed with `check-flows`.
pub const LB_PROBE: &str =
    "table=0,priority=10,tcp,nw_dst=198.18.0.100,tp_dst=80,actions=ct(commit,nat(dst=198.18.0.10-198.18.0.12:80),table=1)";

/// The response body: 15 bytes, as document 003's small file.
pub const BODY: &str = "conntrack 15 B\\n";

/// An engine of this experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CtEngine {
    Nicflow,
    NicflowNoct,
    Ovs,
    LinuxBridgeNft,
    LinuxBridge,
}

impl CtEngine {
    pub fn name(self) -> &'static str {
        match self {
            CtEngine::Nicflow => "nicflow",
            CtEngine::NicflowNoct => "nicflow-noct",
            CtEngine::Ovs => "ovs",
            CtEngine::LinuxBridgeNft => "linux-bridge-nft",
            CtEngine::LinuxBridge => "linux-bridge",
        }
    }

    pub fn parse(s: &str) -> Option<CtEngine> {
        Some(match s.trim() {
            "nicflow" | "nicflow-tc" => CtEngine::Nicflow,
            "nicflow-noct" => CtEngine::NicflowNoct,
            "ovs" | "ovs-userspace" => CtEngine::Ovs,
            "linux-bridge-nft" | "nft" | "nftables" => CtEngine::LinuxBridgeNft,
            "linux-bridge" | "bridge" => CtEngine::LinuxBridge,
            _ => return None,
        })
    }

    /// The testbed engine underneath.
    pub fn engine(self) -> Engine {
        match self {
            CtEngine::Nicflow | CtEngine::NicflowNoct => Engine::NicflowTc,
            CtEngine::Ovs => Engine::Ovs,
            CtEngine::LinuxBridgeNft | CtEngine::LinuxBridge => Engine::LinuxBridge,
        }
    }

    /// Does the engine track connections?
    pub fn tracks(self) -> bool {
        matches!(
            self,
            CtEngine::Nicflow | CtEngine::Ovs | CtEngine::LinuxBridgeNft
        )
    }

    fn rules(self) -> Rules {
        match self {
            CtEngine::Nicflow | CtEngine::Ovs => {
                Rules::Custom(FIREWALL.iter().map(|s| s.to_string()).collect())
            }
            _ => Rules::Explicit,
        }
    }
}

pub fn parse_engines(list: &str) -> anyhow::Result<Vec<CtEngine>> {
    let mut v = Vec::new();
    for e in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let e = CtEngine::parse(e).with_context(|| format!("unknown engine `{e}`"))?;
        if !v.contains(&e) {
            v.push(e);
        }
    }
    if v.is_empty() {
        bail!("no engines");
    }
    Ok(v)
}

/// New connection per request, or persistent connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Cps,
    Tps,
}

impl Mode {
    pub fn title(self) -> &'static str {
        match self {
            Mode::Cps => "new connections/s (one request each)",
            Mode::Tps => "transactions/s (persistent connections)",
        }
    }
    pub fn unit(self) -> &'static str {
        match self {
            Mode::Cps => "conn",
            Mode::Tps => "txn",
        }
    }
}

/// What wrk printed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WrkOut {
    pub requests: u64,
    pub seconds: f64,
    pub rate: f64,
    pub latency_avg_us: f64,
    pub err_connect: u64,
    pub err_read: u64,
    pub err_write: u64,
    pub err_timeout: u64,
    pub non_2xx: u64,
}

impl WrkOut {
    pub fn errors(&self) -> u64 {
        self.err_connect + self.err_write + self.err_timeout + self.non_2xx
    }
}

/// `12.5us`, `1.2ms`, `2s` as microseconds.
fn wrk_time_us(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mul) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("m") {
        (n, 60e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else {
        (s, 1.0)
    };
    num.parse::<f64>().ok().map(|v| v * mul)
}

/// Parse wrk's text output.
pub fn parse_wrk(text: &str) -> Option<WrkOut> {
    let mut o = WrkOut::default();
    let mut have_rate = false;
    for l in text.lines().map(str::trim) {
        let w: Vec<&str> = l.split_whitespace().collect();
        if l.starts_with("Requests/sec:") {
            o.rate = w.get(1)?.parse().ok()?;
            have_rate = true;
        } else if l.starts_with("Latency") {
            o.latency_avg_us = w.get(1).and_then(|s| wrk_time_us(s)).unwrap_or(f64::NAN);
        } else if w.len() >= 4 && w[1] == "requests" && w[2] == "in" {
            o.requests = w[0].parse().ok()?;
            o.seconds = wrk_time_us(w[3].trim_end_matches(','))? / 1e6;
        } else if let Some(rest) = l.strip_prefix("Socket errors:") {
            for part in rest.split(',') {
                let mut it = part.split_whitespace();
                let (Some(k), Some(v)) = (it.next(), it.next()) else {
                    continue;
                };
                let v: u64 = v.parse().unwrap_or(0);
                match k {
                    "connect" => o.err_connect = v,
                    "read" => o.err_read = v,
                    "write" => o.err_write = v,
                    "timeout" => o.err_timeout = v,
                    _ => {}
                }
            }
        } else if let Some(rest) = l.strip_prefix("Non-2xx or 3xx responses:") {
            o.non_2xx = rest.trim().parse().unwrap_or(0);
        }
    }
    have_rate.then_some(o)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub engine: CtEngine,
    pub mode: Mode,
    pub connections: usize,
    pub rep: usize,
    pub wrk: Option<WrkOut>,
    /// Machine-wide busy cores over the run.
    pub machine_cores: f64,
    /// The switch process's cores (nicflow daemon, ovs-vswitchd).
    pub switch_cores: Option<f64>,
    pub nginx_cores: Option<f64>,
    pub wrk_cores: f64,
    pub wall_s: f64,
    pub error: Option<String>,
}

impl Sample {
    /// Machine CPU microseconds per request.
    pub fn machine_us(&self) -> Option<f64> {
        let w = self.wrk.as_ref()?;
        let v = cpu::ratio(self.machine_cores * self.wall_s * 1e6, w.requests as f64);
        v.is_finite().then_some(v)
    }
    pub fn switch_us(&self) -> Option<f64> {
        let w = self.wrk.as_ref()?;
        let v = cpu::ratio(self.switch_cores? * self.wall_s * 1e6, w.requests as f64);
        v.is_finite().then_some(v)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub load_start: String,
    pub command: String,
    pub engines: Vec<CtEngine>,
    pub connections: Vec<usize>,
    pub seconds: f64,
    pub reps: usize,
    pub host_offload: HostOffload,
    pub tools: Vec<String>,
    /// How the nftables engine attaches conntrack to bridged packets.
    pub nft_mode: String,
    pub nft_rules: String,
    pub firewall: Vec<String>,
    pub samples: Vec<Sample>,
    pub setup_errors: Vec<(CtEngine, String)>,
    pub notes: Vec<String>,
    /// Tracker state at the end (conntrack-stats, nf_conntrack_count).
    pub end_state: Vec<(CtEngine, serde_json::Value)>,
}

/// nginx in a server namespace, killed on drop.
struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One engine's lab with its server running.
struct Lab {
    engine: CtEngine,
    tb: Testbed,
    nginx: Nginx,
    url: String,
    dir: PathBuf,
}

/// Does this nicflow accept the load balancer's `ct(nat(...))`? Err with
/// check-flows' message if not.
fn nat_supported() -> Result<(), String> {
    let exe = std::env::var_os("NICFLOW_BIN")
        .map(PathBuf::from)
        .or_else(|| std::env::current_exe().ok())
        .ok_or("no nicflow binary")?;
    let f = std::env::temp_dir().join(format!("nicflow-ct-probe-{}.flows", std::process::id()));
    std::fs::write(&f, format!("{LB_PROBE}\n")).map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .arg("check-flows")
        .arg(&f)
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_file(&f);
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr)
            .trim()
            .replace(&f.display().to_string(), "rules")),
        Err(e) => Err(e.to_string()),
    }
}

fn nginx_conf(dir: &Path, ip: &str) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 16384; multi_accept on; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 10000000;\n  keepalive_timeout 65;\n\
         \x20 client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 server {{\n    listen {ip}:80 backlog=4096;\n\
         \x20   location / {{ default_type text/plain; return 200 \"{BODY}\"; }}\n  }}\n}}\n"
    )
}

/// The nftables stateful firewall, in the bridge family where the kernel
/// has bridge conntrack, else in the ip family behind br_netfilter.
fn nft_rules(bridge_family: bool, client_port: &str, client_ip: &str) -> String {
    if bridge_family {
        format!(
            "table bridge nicflow_ct {{\n  chain forward {{\n    type filter hook forward priority 0; policy drop;\n\
             \x20   ether type arp accept\n    ct state established,related accept\n\
             \x20   ct state new iifname \"{client_port}\" accept\n  }}\n}}\n"
        )
    } else {
        format!(
            "table ip nicflow_ct {{\n  chain forward {{\n    type filter hook forward priority 0; policy drop;\n\
             \x20   ct state established,related accept\n\
             \x20   ct state new ip saddr {client_ip} accept\n  }}\n}}\n"
        )
    }
}

fn wait_listening(ns: &str, port: u16, child: &mut std::process::Child) -> anyhow::Result<()> {
    let filter = format!("sport = :{port}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let up = sys::run(&mut sys::in_ns(Some(ns), &["ss", "-Hltn", &filter]))
            .map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
            .unwrap_or(false);
        if up {
            return Ok(());
        }
        if Instant::now() >= deadline || matches!(child.try_wait(), Ok(Some(_))) {
            bail!("nginx in {ns} did not start listening");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lab_up(engine: CtEngine, offload: HostOffload, nft_mode: &mut String) -> anyhow::Result<Lab> {
    let spec = TestbedSpec {
        rules: engine.rules(),
        host_offload: offload,
        ..TestbedSpec::new(engine.engine(), 1, "ctk")
    };
    let tb = Testbed::up(&spec)?;
    let dir = tb.scratch_dir()?;
    let (c, s) = (tb.client(0).clone(), tb.server(0).clone());
    sys::sysctl(Some(&c.netns), "net.ipv4.ip_local_port_range", "1024 65535")?;
    sys::sysctl(Some(&c.netns), "net.ipv4.tcp_tw_reuse", "1")?;
    if engine == CtEngine::LinuxBridgeNft {
        let (port, ip) = (c.port.clone(), c.ip4.to_string());
        let (_, mode) = host_tools::nft_stateful_firewall(tb.switch_netns(), &dir, |bridge| {
            nft_rules(bridge, &port, &ip)
        })?;
        *nft_mode = mode;
    }
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(&dir, &s.ip4.to_string()))?;
    let conf_s = conf.display().to_string();
    let dir_s = dir.display().to_string();
    let mut nginx = sys::in_ns(
        Some(&s.netns),
        &["nginx", "-p", &dir_s, "-e", "stderr", "-c", &conf_s],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .context("starting nginx")?;
    if let Err(e) = wait_listening(&s.netns, 80, &mut nginx) {
        let _ = nginx.kill();
        let _ = nginx.wait();
        return Err(e);
    }
    let lab = Lab {
        engine,
        url: format!("http://{}/", s.ip4),
        tb,
        nginx: Nginx(nginx),
        dir,
    };
    if !lab.tb.ping(0) {
        bail!("{}: c1 does not reach s1 (ping)", engine.name());
    }
    Ok(lab)
}

/// One wrk run with CPU accounting.
fn measure(lab: &Lab, mode: Mode, conns: usize, seconds: f64, rep: usize) -> Sample {
    let mut s = Sample {
        engine: lab.engine,
        mode,
        connections: conns,
        rep,
        wrk: None,
        machine_cores: f64::NAN,
        switch_cores: None,
        nginx_cores: None,
        wrk_cores: f64::NAN,
        wall_s: 0.0,
        error: None,
    };
    let c = conns.to_string();
    let d = format!("{seconds}s");
    let mut argv = vec!["wrk", "-t1", "-c", &c, "-d", &d, "--timeout", "2s"];
    if mode == Mode::Cps {
        argv.extend(["-H", "Connection: close"]);
    }
    argv.push(&lab.url);
    let out = lab.dir.join("wrk.out");
    let f = match std::fs::File::create(&out) {
        Ok(f) => f,
        Err(e) => {
            s.error = Some(format!("{e}"));
            return s;
        }
    };
    let mut procs = vec![("nginx".to_string(), lab.nginx.0.id())];
    if let Some(p) = lab.tb.switch_pid() {
        procs.push(("switch".to_string(), p));
    }
    let a = Snapshot::take(&procs);
    let child = sys::in_ns(Some(&lab.tb.client(0).netns), &argv)
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            s.error = Some(format!("starting wrk: {e}"));
            return s;
        }
    };
    let deadline = Instant::now() + Duration::from_secs_f64(seconds + 15.0);
    let (by_itself, _ok, u, sy) = cpu::wait_rusage(child, deadline);
    let b = Snapshot::take(&procs);
    let usage = Usage::between(&a, &b);
    s.wall_s = usage.wall_s;
    s.machine_cores = usage.busy_cores();
    s.wrk_cores = cpu::ratio(u + sy, usage.wall_s);
    s.switch_cores = usage
        .procs_cpu("switch")
        .map(|x| cpu::ratio(x, usage.wall_s));
    s.nginx_cores = usage
        .procs_cpu("nginx")
        .map(|x| cpu::ratio(x, usage.wall_s));
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    if !by_itself {
        s.error = Some(if forward::interrupted() {
            "interrupted".into()
        } else {
            "wrk did not finish in time".into()
        });
        return s;
    }
    match parse_wrk(&text) {
        Some(w) if w.requests > 0 => s.wrk = Some(w),
        Some(_) => s.error = Some("no request completed".into()),
        None => {
            s.error = Some(format!(
                "wrk gave no result: {}",
                text.lines().last().unwrap_or("").trim()
            ))
        }
    }
    s
}

fn log_sample(s: &Sample) {
    match (&s.wrk, &s.error) {
        (Some(w), _) => eprintln!(
            "[conntrack] {} {:?} c={} rep {}: {:.0}/s, machine {:.2} cores, switch {}, errors {}",
            s.engine.name(),
            s.mode,
            s.connections,
            s.rep,
            w.rate,
            s.machine_cores,
            s.switch_cores
                .map(|c| format!("{c:.2} cores"))
                .unwrap_or_else(|| "—".into()),
            w.errors()
        ),
        (_, Some(e)) => eprintln!(
            "[conntrack] {} {:?} c={} rep {}: {e}",
            s.engine.name(),
            s.mode,
            s.connections,
            s.rep
        ),
        _ => {}
    }
}

/// Tracker state at the end of the run.
fn end_state(lab: &Lab) -> serde_json::Value {
    match lab.engine {
        CtEngine::Nicflow => {
            let Some(sock) = lab.tb.nicflow_socket() else {
                return serde_json::Value::Null;
            };
            match crate::control::daemon::request(
                &sock,
                &Request::ConntrackStats {
                    bridge: testbed::BRIDGE.into(),
                },
            ) {
                Ok(r) => serde_json::json!({ "conntrack-stats": r.data, "text": r.text }),
                Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
            }
        }
        CtEngine::LinuxBridgeNft => {
            let count = sys::run(&mut sys::in_ns(
                Some(lab.tb.switch_netns()),
                &["cat", "/proc/sys/net/netfilter/nf_conntrack_count"],
            ))
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
            serde_json::json!({ "nf_conntrack_count": count })
        }
        _ => lab.tb.diagnostics(),
    }
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    if let Some(p) = &args.render {
        let (r, dir) = report::load_render::<Results>(p, args.out.as_deref())?;
        return write(&dir, &r);
    }
    let engines = parse_engines(&args.engines)?;
    let (conns, seconds, reps) = if args.quick {
        (vec![8], 2.0, 1)
    } else {
        (
            testbed::parse_counts(&args.connections)?,
            args.seconds,
            args.reps.max(1),
        )
    };
    if !(seconds > 0.0 && seconds <= 3600.0) {
        bail!("--seconds {seconds}: give 0 < s <= 3600");
    }
    let offload = testbed::parse_host_offload(&args.host_offload)?;
    for t in ["wrk", "nginx"] {
        if !have(t) {
            bail!("`{t}` is missing: apt-get install wrk nginx-light");
        }
    }
    if engines.contains(&CtEngine::LinuxBridgeNft) && !have("nft") {
        bail!("`nft` is missing: apt-get install nftables");
    }
    forward::install_signal_handlers();
    let mut tools = vec![
        tool_version(&["wrk", "--version"]),
        tool_version(&["nginx", "-v"]),
    ];
    if engines.contains(&CtEngine::LinuxBridgeNft) {
        tools.push(tool_version(&["nft", "--version"]));
    }
    if engines.contains(&CtEngine::Ovs) {
        tools.push(tool_version(&["ovs-vswitchd", "--version"]));
    }
    let mut r = Results {
        machine: super::machine_description(),
        load_start: std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        engines: engines.clone(),
        connections: conns.clone(),
        seconds,
        reps,
        host_offload: offload,
        tools,
        nft_mode: String::new(),
        nft_rules: String::new(),
        firewall: FIREWALL.iter().map(|s| s.to_string()).collect(),
        samples: Vec::new(),
        setup_errors: Vec::new(),
        notes: Vec::new(),
        end_state: Vec::new(),
    };
    match nat_supported() {
        Ok(()) => r.notes.push(
            "scenario lb: this nicflow accepts ct(nat(...)), but the load-balancer scenario is \
             not implemented in this experiment yet"
                .into(),
        ),
        Err(e) => r.notes.push(format!(
            "scenario lb (DNAT to 3 backends) left out: this nicflow refuses `{LB_PROBE}` ({e})"
        )),
    }
    let mut labs = Vec::new();
    for &e in &engines {
        if forward::interrupted() {
            break;
        }
        eprintln!("[conntrack] {}: setting up", e.name());
        let mut nft_mode = String::new();
        match lab_up(e, offload, &mut nft_mode) {
            Ok(l) => labs.push(l),
            Err(err) => {
                eprintln!("[conntrack] {}: {err:#}", e.name());
                r.setup_errors.push((e, format!("{err:#}")));
            }
        }
        if !nft_mode.is_empty() {
            let c = testbed::host_ip4(testbed::Role::Client, 1).to_string();
            r.nft_rules = nft_rules(nft_mode.starts_with("bridge"), "p1", &c);
            r.nft_mode = nft_mode;
        }
    }
    // Warm-up: ARP, caches, nginx and wrk paths, one second of each mode.
    for l in &labs {
        for mode in [Mode::Cps, Mode::Tps] {
            if !forward::interrupted() {
                let _ = measure(l, mode, conns[0], 1.0, 0);
            }
        }
    }
    'reps: for rep in 0..reps {
        for &c in &conns {
            for mode in [Mode::Cps, Mode::Tps] {
                for l in &labs {
                    if forward::interrupted() {
                        break 'reps;
                    }
                    let s = measure(l, mode, c, seconds, rep);
                    log_sample(&s);
                    r.samples.push(s);
                }
            }
        }
    }
    for l in &labs {
        r.end_state.push((l.engine, end_state(l)));
    }
    for l in labs {
        drop(l.nginx);
        if let Err(e) = l.tb.down() {
            eprintln!("[conntrack] teardown: {e:#}");
        }
    }
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| report::default_dir("conntrack"));
    write(&dir, &r)
}

fn write(dir: &Path, r: &Results) -> anyhow::Result<()> {
    let figs = figures(r);
    report::publish(dir, r, &figs, &markdown(r, &figs))
}

fn med(
    r: &Results,
    e: CtEngine,
    m: Mode,
    c: usize,
    f: &dyn Fn(&Sample) -> Option<f64>,
) -> Option<f64> {
    let mut v: Vec<f64> = r
        .samples
        .iter()
        .filter(|s| s.engine == e && s.mode == m && s.connections == c && s.wrk.is_some())
        .filter_map(f)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| super::median(&mut v))
}

fn rate(s: &Sample) -> Option<f64> {
    s.wrk.as_ref().map(|w| w.rate)
}

fn figures(r: &Results) -> Vec<Figure> {
    let fig = |id: &str, m: Mode, y: &str, f: &dyn Fn(&Sample) -> Option<f64>| Figure {
        id: id.into(),
        title: format!("{y} against concurrent connections"),
        x_label: "concurrent wrk connections".into(),
        y_label: y.into(),
        log_x: false,
        series: r
            .engines
            .iter()
            .map(|&e| Series {
                name: e.name().into(),
                points: r
                    .connections
                    .iter()
                    .map(|&c| (c as f64, med(r, e, m, c, f)))
                    .collect(),
            })
            .collect(),
    };
    vec![
        fig("cps", Mode::Cps, "new connections/s", &rate),
        fig("tps", Mode::Tps, "transactions/s", &rate),
        fig(
            "cps-machine-cpu",
            Mode::Cps,
            "machine CPU per connection (µs)",
            &Sample::machine_us,
        ),
    ]
}

fn ratio_cell(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "—".into(),
    }
}

fn markdown(r: &Results, figs: &[Figure]) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# nicflow bench conntrack\n");
    let _ = writeln!(
        m,
        "{}",
        report::machine_section("hardware counters not used")
    );
    let _ = writeln!(m, "Load average at the start: {}.\n", r.load_start);
    let _ = writeln!(m, "Tools: {}.\n", r.tools.join("; "));
    let _ = writeln!(
        m,
        "Document 003, table VII (cps and tps through a connection-tracking switch), scenario \
         *firewall*: client c1 (port p1) -> switch -> server s1 (port p2), one namespace each. \
         nginx in s1 answers every request with a {}-byte body (`return 200`, one process); \
         `wrk -t1` in c1 runs {} s per point: **connections/s** with `-H 'Connection: close'` \
         (every request a new TCP connection), **transactions/s** with keep-alive. Medians of \
         {} repetition(s), repetitions interleaved across engines (all labs up for the whole \
         run), after a 1-s warm-up of each mode. Host offload: {:?} (`off` = `ethtool -K eth0 \
         tx off`: finished checksums). CPU: machine-wide busy cores from /proc/stat (wrk, \
         nginx, switch and softirq share the machine's cores), the switch process from \
         /proc/PID/stat. Ratios are against `linux-bridge` (no rules) in the same run.\n",
        BODY.len() - 1,
        r.seconds,
        r.reps,
        r.host_offload
    );
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    let _ = writeln!(m, "Engines:\n");
    for e in &r.engines {
        let what = match e {
            CtEngine::Nicflow => {
                "nicflow with the defaults (nicflow-tc) and Open vSwitch's stateful firewall table below; ct flows run in nicflow's userspace datapath"
            }
            CtEngine::NicflowNoct => {
                "the same nicflow switch with `in_port=p1,actions=output:p2` and back (no ct)"
            }
            CtEngine::Ovs => {
                "Open vSwitch, userspace datapath (netdev, ports of type system read through netdev-linux), the same table (OVS userspace conntrack)"
            }
            CtEngine::LinuxBridgeNft => "Linux bridge + nftables stateful rules below",
            CtEngine::LinuxBridge => "Linux bridge, no rules (the reference)",
        };
        let _ = writeln!(m, "- `{}`: {what}", e.name());
    }
    let _ = writeln!(m, "\nFlow table (nicflow, ovs):\n\n```");
    for l in &r.firewall {
        let _ = writeln!(m, "{}", l.replace("{c1}", "p1").replace("{s1}", "p2"));
    }
    let _ = writeln!(m, "```\n");
    if !r.nft_rules.is_empty() {
        let _ = writeln!(
            m,
            "nftables ({}), in the switch namespace:\n\n```\n{}```\n",
            r.nft_mode, r.nft_rules
        );
    }
    for mode in [Mode::Cps, Mode::Tps] {
        let _ = writeln!(m, "## {}\n", mode.title());
        let head = [
            ("conns", true),
            ("engine", false),
            ("median /s", true),
            ("min-max /s", true),
            ("vs linux-bridge", true),
            ("machine cores", true),
            (
                if mode == Mode::Cps {
                    "machine µs/conn"
                } else {
                    "machine µs/txn"
                },
                true,
            ),
            ("switch cores", true),
            ("switch µs", true),
            ("nginx cores", true),
            ("latency avg ms", true),
            ("errors (read)", true),
        ];
        let mut rows = Vec::new();
        for &c in &r.connections {
            let base = med(r, CtEngine::LinuxBridge, mode, c, &rate);
            for &e in &r.engines {
                let ok: Vec<&Sample> = r
                    .samples
                    .iter()
                    .filter(|s| s.engine == e && s.mode == mode && s.connections == c)
                    .collect();
                let rates: Vec<f64> = ok.iter().filter_map(|s| rate(s)).collect();
                if rates.is_empty() {
                    let why = ok
                        .iter()
                        .find_map(|s| s.error.clone())
                        .or_else(|| {
                            r.setup_errors
                                .iter()
                                .find(|(x, _)| *x == e)
                                .map(|(_, w)| w.clone())
                        })
                        .unwrap_or_else(|| "not measured".into());
                    let mut row = vec![c.to_string(), e.name().into(), why.replace('|', "/")];
                    row.resize(head.len(), String::new());
                    rows.push(row);
                    continue;
                }
                let lo = rates.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = rates.iter().cloned().fold(0.0, f64::max);
                let med_rate = med(r, e, mode, c, &rate);
                let errs: u64 = ok
                    .iter()
                    .filter_map(|s| s.wrk.as_ref())
                    .map(|w| w.errors())
                    .sum();
                let read: u64 = ok
                    .iter()
                    .filter_map(|s| s.wrk.as_ref())
                    .map(|w| w.err_read)
                    .sum();
                rows.push(vec![
                    c.to_string(),
                    e.name().into(),
                    report::cell(med_rate, 0),
                    format!("{lo:.0}-{hi:.0}"),
                    ratio_cell(med_rate, base),
                    report::cell(med(r, e, mode, c, &|s| Some(s.machine_cores)), 2),
                    report::cell(med(r, e, mode, c, &Sample::machine_us), 1),
                    report::cell(med(r, e, mode, c, &|s| s.switch_cores), 2),
                    report::cell(med(r, e, mode, c, &Sample::switch_us), 1),
                    report::cell(med(r, e, mode, c, &|s| s.nginx_cores), 2),
                    report::cell(
                        med(r, e, mode, c, &|s| {
                            s.wrk.as_ref().map(|w| w.latency_avg_us / 1e3)
                        }),
                        2,
                    ),
                    format!("{errs} ({read})"),
                ]);
            }
        }
        let _ = writeln!(m, "{}", report::table(&head, &rows));
    }
    let _ = writeln!(
        m,
        "*switch µs*: the switch process's CPU per {} / {} (nicflow daemon, ovs-vswitchd; the \
         kernel bridge's work is softirq, inside *machine*). *errors*: wrk connect + write + \
         timeout errors and non-2xx responses over all repetitions; in parentheses wrk's read \
         errors, which with `Connection: close` mostly count the server's close.\n",
        Mode::Cps.unit(),
        Mode::Tps.unit()
    );
    // The issue's targets.
    let _ = writeln!(m, "## Targets (issue 13), same run\n");
    let mut rows = Vec::new();
    for &c in &r.connections {
        let g = |e, mode| med(r, e, mode, c, &rate);
        let nf = g(CtEngine::Nicflow, Mode::Cps);
        let check = |v: Option<f64>, b: Option<f64>, want: f64| match (v, b) {
            (Some(v), Some(b)) if b > 0.0 => {
                let x = v / b;
                format!("{x:.2}x ({})", if x >= want { "met" } else { "not met" })
            }
            _ => "—".into(),
        };
        rows.push(vec![
            c.to_string(),
            "nicflow cps >= linux-bridge-nft".into(),
            check(nf, g(CtEngine::LinuxBridgeNft, Mode::Cps), 1.0),
        ]);
        rows.push(vec![
            c.to_string(),
            "nicflow cps >= 2x ovs".into(),
            check(nf, g(CtEngine::Ovs, Mode::Cps), 2.0),
        ]);
        rows.push(vec![
            c.to_string(),
            "nicflow cps / nicflow-noct (cost of ct)".into(),
            ratio_cell(nf, g(CtEngine::NicflowNoct, Mode::Cps)),
        ]);
        rows.push(vec![
            c.to_string(),
            "nicflow tps / nicflow-noct (established through ct)".into(),
            ratio_cell(
                g(CtEngine::Nicflow, Mode::Tps),
                g(CtEngine::NicflowNoct, Mode::Tps),
            ),
        ]);
    }
    let _ = writeln!(
        m,
        "{}",
        report::table(
            &[("conns", true), ("target", false), ("measured", false)],
            &rows
        )
    );
    let _ = writeln!(
        m,
        "## Document 003, table VII (BlueField-2 / BlueField-3, thousands)\n\n\
         | | DPU | NO-CT | RTE-HW | RTE-SW | TC-HW | TC-SW |\n|---|---|---:|---:|---:|---:|---:|\n\
         | TPS (K) | BF2 | 10.86 | 6.21 | 6.76 | 4.58 | 5.52 |\n\
         | CPS (K) | BF2 | 8000.00 | 84.96 | 130.00 | 30.00 | 64.95 |\n\
         | TPS (K) | BF3 | 6.69 | 6.12 | 6.41 | 4.67 | 4.78 |\n\
         | CPS (K) | BF3 | 10000.38 | 298.91 | 409.71 | 45.31 | 110.01 |\n\n\
         The document's TPS is netperf TCP_CRR with one thread (a connection per transaction) \
         and its CPS dperf on 8 cores over a 100 GbE link; here both are wrk through veths on \
         this machine, and *transactions/s* means requests on persistent connections. Compare \
         shapes (ct against no ct; OVS userspace against the kernel), not absolute numbers.\n"
    );
    report::write_list(&mut m, "Notes", &r.notes);
    let fails: Vec<String> = r
        .setup_errors
        .iter()
        .map(|(e, w)| format!("{}: {w}", e.name()))
        .collect();
    report::write_list(&mut m, "Setup failures", &fails);
    if !r.end_state.is_empty() {
        let _ = writeln!(m, "\n## Tracker state at the end\n");
        for (e, v) in &r.end_state {
            let t = v
                .get("text")
                .and_then(|t| t.as_str())
                .map(|s| s.trim().replace('\n', "; "))
                .unwrap_or_else(|| v.to_string());
            let t: String = t.chars().take(600).collect();
            let _ = writeln!(m, "- {}: {t}", e.name());
        }
    }
    let _ = writeln!(m);
    for f in figs {
        let _ = writeln!(m, "### {}\n\n{}", f.title, f.markdown(0));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 5s test @ http://198.18.2.1/
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.21ms    1.02ms  20.11ms   80.00%
    Req/Sec     9.87k   500.00    10.50k    70.00%
  49350 requests in 5.00s, 7.06MB read
  Socket errors: connect 0, read 12, write 1, timeout 2
  Non-2xx or 3xx responses: 3
Requests/sec:   9868.42
Transfer/sec:      1.41MB
";

    #[test]
    fn parses_wrk() {
        let w = parse_wrk(WRK).unwrap();
        assert_eq!(w.requests, 49350);
        assert!((w.seconds - 5.0).abs() < 1e-9);
        assert!((w.rate - 9868.42).abs() < 1e-6);
        assert!((w.latency_avg_us - 3210.0).abs() < 1e-6);
        assert_eq!((w.err_connect, w.err_read, w.err_write), (0, 12, 1));
        assert_eq!((w.err_timeout, w.non_2xx), (2, 3));
        assert_eq!(w.errors(), 6);
        assert!(parse_wrk("unable to connect").is_none());
        assert_eq!(wrk_time_us("812.00us"), Some(812.0));
        assert_eq!(wrk_time_us("1.50s"), Some(1.5e6));
    }

    #[test]
    fn engines_and_rules() {
        let v = parse_engines("nicflow,ovs,nft,linux-bridge,nicflow").unwrap();
        assert_eq!(
            v,
            vec![
                CtEngine::Nicflow,
                CtEngine::Ovs,
                CtEngine::LinuxBridgeNft,
                CtEngine::LinuxBridge
            ]
        );
        assert!(parse_engines("nope").is_err());
        assert_eq!(CtEngine::NicflowNoct.rules(), Rules::Explicit);
        let Rules::Custom(fw) = CtEngine::Ovs.rules() else {
            panic!("ovs runs the firewall")
        };
        assert_eq!(fw.len(), 7);
        assert!(fw[4].contains("in_port={c1}") && fw[4].ends_with("output:{s1}"));
        let n = nft_rules(false, "p1", "198.18.1.1");
        assert!(n.contains("ip saddr 198.18.1.1 accept") && n.contains("policy drop"));
        assert!(nft_rules(true, "p1", "x").contains("iifname \"p1\""));
        let conf = nginx_conf(Path::new("/tmp/x"), "198.18.2.1");
        assert!(conf.contains("listen 198.18.2.1:80"), "{conf}");
        // nginx turns the escaped newline into one byte: 15 bytes sent.
        assert_eq!(BODY.len() - 1, 15);
    }
}
