//! `nicflow bench firewall`: document 003's stateful firewall experiment
//! (issue 13, last benchmark bullet): TCP throughput against the number of
//! ACL rules, 1 to 20,000 rules plus an allow-established rule.
//!
//! One client (`c1`, port `p1`) and one server (`s1`, port `p2`) around a
//! switch ([`Testbed`], one pair); `iperf3 -c` in c1, one TCP stream, hosts
//! at the kernel's default offloads. Every engine's lab is up for the whole
//! run; for each rule count N the rules are replaced on every engine, then
//! the repetitions run interleaved across engines.
//!
//! Engines:
//!
//! * `nicflow` (nicflow-tc) and `ovs` (Open vSwitch, userspace datapath),
//!   the same OpenFlow table ([`flows`]): table 0 sends untracked IP
//!   through `ct(table=1)`; table 1 holds N drop rules for traffic the test
//!   never sends (`tcp,nw_src=198.19.x.y/32,tp_dst=P`, priority 100, so
//!   every packet is checked against them), then established both ways,
//!   new TCP to port 5201 from the client (`ct(commit)`), default drop.
//! * `nft-linear` (iptables-nft semantics): the Linux bridge with the N
//!   rules as a linear nftables chain in front of `ct state established`.
//! * `nft-set`: the same N rules as one nftables set
//!   (`ip saddr . tcp dport @blocked drop`): one hash lookup.
//! * `linux-bridge`: the plain bridge, no rules: the reference.
//! * `nicflow-bf2`, `nicflow-cx7` (any `nicflow-profile:NAME`): `nicflow`
//!   with `nicflow set br0 offload=profile:NAME`: the TC engine holds only
//!   what that NIC model would ([`super::hwprofile`]). For every nicflow
//!   engine the run records the offloaded share and the flows the profile
//!   refused.
//!
//! nftables runs in the switch namespace, in the bridge family where the
//! kernel has `nf_conntrack_bridge`, else in the `ip` family's forward hook
//! behind `br_netfilter` (as `bench conntrack`); the run records which.

use super::cpu::{self, Snapshot, Usage};
use super::forward::{self, Engine, HostOffload};
use super::host_tools::{self, have, loadavg, tool_version};
use super::hwprofile::{self, OffloadSample, Profile, ProfileEngine};
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// iperf3's port, the one port the firewall lets new connections reach.
pub const PORT: u16 = 5201;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated: nicflow, ovs, nft-linear, nft-set,
    /// linux-bridge, nicflow-bf2, nicflow-cx7 (nicflow-profile:NAME).
    #[arg(long, default_value = "nicflow,ovs,nft-linear,nft-set,linux-bridge")]
    pub engines: String,
    /// ACL rule counts, comma-separated (one point each).
    #[arg(long, default_value = "1,100,1000,10000,20000")]
    pub rules: String,
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Repetitions per point (the report shows medians).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FwEngine {
    Nicflow,
    Ovs,
    NftLinear,
    NftSet,
    LinuxBridge,
    /// nicflow with `offload=profile:NAME`.
    NicflowProfile(Profile),
}

impl FwEngine {
    pub fn name(self) -> &'static str {
        match self {
            FwEngine::Nicflow => "nicflow",
            FwEngine::Ovs => "ovs",
            FwEngine::NftLinear => "nft-linear",
            FwEngine::NftSet => "nft-set",
            FwEngine::LinuxBridge => "linux-bridge",
            FwEngine::NicflowProfile(p) => p.engine_name(),
        }
    }

    pub fn parse(s: &str) -> Option<FwEngine> {
        if let Some(p) = Profile::parse_engine(s) {
            return Some(FwEngine::NicflowProfile(p));
        }
        Some(match s.trim() {
            "nicflow" | "nicflow-tc" => FwEngine::Nicflow,
            "ovs" | "ovs-userspace" => FwEngine::Ovs,
            "nft-linear" | "iptables-nft" | "nft" => FwEngine::NftLinear,
            "nft-set" | "nft-sets" => FwEngine::NftSet,
            "linux-bridge" | "bridge" => FwEngine::LinuxBridge,
            _ => return None,
        })
    }

    pub fn engine(self) -> Engine {
        match self {
            FwEngine::Nicflow | FwEngine::NicflowProfile(_) => Engine::NicflowTc,
            FwEngine::Ovs => Engine::Ovs,
            _ => Engine::LinuxBridge,
        }
    }

    fn openflow(self) -> bool {
        matches!(
            self,
            FwEngine::Nicflow | FwEngine::Ovs | FwEngine::NicflowProfile(_)
        )
    }

    fn is_nicflow(self) -> bool {
        matches!(self, FwEngine::Nicflow | FwEngine::NicflowProfile(_))
    }

    fn profile(self) -> Option<Profile> {
        match self {
            FwEngine::NicflowProfile(p) => Some(p),
            _ => None,
        }
    }

    fn nft(self) -> bool {
        matches!(self, FwEngine::NftLinear | FwEngine::NftSet)
    }
}

pub fn parse_engines(list: &str) -> anyhow::Result<Vec<FwEngine>> {
    super::testbed::parse_engine_list(list, "", FwEngine::parse)
}

/// ACL rule `i` (0-based): a source address in 198.19.0.0/16 and a
/// destination port, neither of which the test traffic uses.
pub fn acl(i: usize) -> (String, u16) {
    let ip = format!("198.19.{}.{}", (i / 250) % 256, i % 250 + 1);
    let port = 10000 + (i % 50000) as u16;
    (ip, port)
}

/// The OpenFlow table with `n` ACL rules (testbed placeholders).
pub fn flows(n: usize) -> Vec<String> {
    let mut v = vec![
        "table=0,priority=1,actions=drop".to_string(),
        "table=0,priority=10,arp,actions=normal".into(),
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)".into(),
        "table=1,priority=1,actions=drop".into(),
    ];
    for i in 0..n {
        let (ip, port) = acl(i);
        v.push(format!(
            "table=1,priority=100,tcp,nw_src={ip}/32,tp_dst={port},actions=drop"
        ));
    }
    v.extend([
        "table=1,priority=10,in_port={c1},ip,ct_state=+trk+est,actions=output:{s1}".to_string(),
        "table=1,priority=10,in_port={s1},ip,ct_state=+trk+est,actions=output:{c1}".into(),
        format!(
            "table=1,priority=10,in_port={{c1}},tcp,tp_dst={PORT},ct_state=+trk+new,actions=ct(commit),output:{{s1}}"
        ),
    ]);
    v
}

/// The nftables ruleset: `n` ACL rules (linear chain or one set), then
/// allow-established, allow new TCP to [`PORT`] from the client, drop.
pub fn nft_rules(
    bridge_family: bool,
    set: bool,
    n: usize,
    client_port: &str,
    client_ip: &str,
) -> String {
    let fam = if bridge_family { "bridge" } else { "ip" };
    let mut t = format!("table {fam} nicflow_fw {{\n");
    if set {
        let _ = writeln!(
            t,
            "  set blocked {{\n    type ipv4_addr . inet_service\n    size {}",
            n.max(1) * 2
        );
        if n > 0 {
            let _ = writeln!(t, "    elements = {{");
            for i in 0..n {
                let (ip, port) = acl(i);
                let sep = if i + 1 < n { "," } else { "" };
                let _ = writeln!(t, "      {ip} . {port}{sep}");
            }
            let _ = writeln!(t, "    }}");
        }
        let _ = writeln!(t, "  }}");
    }
    let _ = writeln!(
        t,
        "  chain forward {{\n    type filter hook forward priority 0; policy drop;"
    );
    if bridge_family {
        let _ = writeln!(t, "    ether type arp accept");
    }
    if set {
        let _ = writeln!(t, "    ip saddr . tcp dport @blocked drop");
    } else {
        for i in 0..n {
            let (ip, port) = acl(i);
            let _ = writeln!(t, "    ip saddr {ip} tcp dport {port} drop");
        }
    }
    let _ = writeln!(t, "    ct state established,related accept");
    if bridge_family {
        let _ = writeln!(
            t,
            "    ct state new iifname \"{client_port}\" tcp dport {PORT} accept"
        );
    } else {
        let _ = writeln!(
            t,
            "    ct state new ip saddr {client_ip} tcp dport {PORT} accept"
        );
    }
    let _ = writeln!(t, "  }}\n}}");
    t
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub engine: FwEngine,
    pub rules: usize,
    pub rep: usize,
    pub gbps: Option<f64>,
    pub retransmits: Option<u64>,
    pub machine_cores: f64,
    pub switch_cores: Option<f64>,
    pub wall_s: f64,
    pub error: Option<String>,
    /// nicflow engines: frames per engine and the datapath flows.
    #[serde(default)]
    pub offload: Option<OffloadSample>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub load_start: String,
    pub load_end: String,
    pub command: String,
    pub engines: Vec<FwEngine>,
    pub rules: Vec<usize>,
    pub seconds: u64,
    pub reps: usize,
    pub tools: Vec<String>,
    pub nft_mode: String,
    /// Seconds to install each rule count, per engine.
    pub load_s: Vec<(FwEngine, usize, f64)>,
    pub samples: Vec<Sample>,
    pub setup_errors: Vec<(FwEngine, String)>,
    pub notes: Vec<String>,
}

/// One engine's [`Testbed`] (itself a [`crate::lab::Lab`]: namespaces,
/// switch, teardown, reaping) with the experiment's server(s) running.
struct EngineSetup {
    engine: FwEngine,
    tb: Testbed,
    server: testbed::IperfServer,
    dir: PathBuf,
    /// nftables in the bridge family (else ip + br_netfilter).
    bridge_family: bool,
    /// The rule count currently installed (None: not usable).
    installed: Option<usize>,
}

fn lab_up(engine: FwEngine, nft_mode: &mut String) -> anyhow::Result<EngineSetup> {
    let spec = TestbedSpec {
        rules: if engine.openflow() {
            Rules::Custom(flows(0))
        } else {
            Rules::Explicit
        },
        host_offload: HostOffload::Default,
        ..TestbedSpec::new(engine.engine(), 1, "fwl")
    };
    let tb = Testbed::up(&spec)?;
    let dir = tb.scratch_dir()?;
    let mut bridge_family = true;
    if engine.nft() {
        let c = tb.client(0).clone();
        let (port, ip) = (c.port.clone(), c.ip4.to_string());
        let (bridge, mode) = host_tools::nft_stateful_firewall(tb.switch_netns(), &dir, |b| {
            nft_rules(b, false, 0, &port, &ip)
        })?;
        bridge_family = bridge;
        *nft_mode = mode;
    }
    if let Some(p) = engine.profile() {
        set_offload(&tb, p)?;
    }
    let server = tb.start_iperf_server(0, PORT)?;
    Ok(EngineSetup {
        engine,
        tb,
        server,
        dir,
        bridge_family,
        installed: None,
    })
}

/// `nicflow set br0 offload=profile:NAME`.
fn set_offload(tb: &Testbed, p: Profile) -> anyhow::Result<()> {
    let sock = tb.nicflow_socket().context("not a nicflow testbed")?;
    let r = nicflow::control::daemon::request(
        &sock,
        &Request::Set {
            bridge: testbed::BRIDGE.into(),
            key: "offload".into(),
            value: p.offload().into(),
        },
    )?;
    if !r.ok {
        bail!(
            "nicflow set br0 offload={}: {}",
            p.offload(),
            r.error.unwrap_or_default()
        );
    }
    Ok(())
}

/// Install `n` ACL rules on a lab (replacing the previous set).
fn install(l: &mut EngineSetup, n: usize) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    if l.engine.openflow() {
        l.tb.del_flows()?;
        l.tb.add_flows(&flows(n))?;
    } else if l.engine.nft() {
        let c = l.tb.client(0).clone();
        let text = nft_rules(
            l.bridge_family,
            l.engine == FwEngine::NftSet,
            n,
            &c.port,
            &c.ip4.to_string(),
        );
        host_tools::nft_load(l.tb.switch_netns(), &text, &l.dir)?;
    }
    l.installed = Some(n);
    Ok(t0.elapsed().as_secs_f64())
}

fn measure(l: &EngineSetup, n: usize, seconds: u64, rep: usize) -> Sample {
    let mut s = Sample {
        engine: l.engine,
        rules: n,
        rep,
        gbps: None,
        retransmits: None,
        machine_cores: f64::NAN,
        switch_cores: None,
        wall_s: 0.0,
        error: None,
        offload: None,
    };
    let sock = l
        .engine
        .is_nicflow()
        .then(|| l.tb.nicflow_socket())
        .flatten();
    let counts = sock
        .as_deref()
        .and_then(|s| hwprofile::read_counts(s, testbed::BRIDGE).ok());
    let mut procs = vec![("iperf-s".to_string(), l.server.pid)];
    if let Some(p) = l.tb.switch_pid() {
        procs.push(("switch".to_string(), p));
    }
    let a = Snapshot::take(&procs);
    let c = match l.tb.spawn_iperf_client(0, PORT, seconds, 1, &l.dir) {
        Ok(c) => c,
        Err(e) => {
            s.error = Some(format!("{e:#}"));
            return s;
        }
    };
    let r = c.finish(Instant::now() + Duration::from_secs(seconds + 15));
    let b = Snapshot::take(&procs);
    if let (Some(sock), Some(before)) = (&sock, counts) {
        s.offload = hwprofile::sample_after(sock, testbed::BRIDGE, l.engine.profile(), before).ok();
    }
    let u = Usage::between(&a, &b);
    s.wall_s = u.wall_s;
    s.machine_cores = u.busy_cores();
    s.switch_cores = u.procs_cpu("switch").map(|x| cpu::ratio(x, u.wall_s));
    if let Some(e) = r.error {
        s.error = Some(e);
    } else {
        s.gbps = Some(r.gbps);
        s.retransmits = r.retransmits;
    }
    s
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    report::cli(&args.run, "firewall", || run(args), figures, markdown)
}

fn run(args: &Args) -> anyhow::Result<Results> {
    let engines = parse_engines(&args.engines)?;
    let (counts, seconds, reps) = if args.run.quick {
        (vec![1, 1000], 2, 1)
    } else {
        (
            testbed::parse_counts(&args.rules)?,
            args.seconds.max(1),
            args.reps.max(1),
        )
    };
    if engines.iter().any(|e| e.nft()) && !have("nft") {
        bail!("`nft` is missing: apt-get install nftables");
    }
    if !have("iperf3") {
        bail!("`iperf3` is missing");
    }
    forward::install_signal_handlers();
    let mut tools = vec![tool_version(&["iperf3", "--version"])];
    if engines.iter().any(|e| e.nft()) {
        tools.push(tool_version(&["nft", "--version"]));
    }
    if engines.contains(&FwEngine::Ovs) {
        tools.push(tool_version(&["ovs-vswitchd", "--version"]));
    }
    let mut r = Results {
        machine: super::machine_description(),
        load_start: loadavg(),
        load_end: String::new(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        engines: engines.clone(),
        rules: counts.clone(),
        seconds,
        reps,
        tools,
        nft_mode: String::new(),
        load_s: Vec::new(),
        samples: Vec::new(),
        setup_errors: Vec::new(),
        notes: Vec::new(),
    };
    let mut labs = Vec::new();
    for &e in &engines {
        if forward::interrupted() {
            break;
        }
        eprintln!("[firewall] {}: setting up", e.name());
        let mut m = String::new();
        match lab_up(e, &mut m) {
            Ok(l) => labs.push(l),
            Err(err) => {
                eprintln!("[firewall] {}: {err:#}", e.name());
                r.setup_errors.push((e, format!("{err:#}")));
            }
        }
        if !m.is_empty() {
            r.nft_mode = m;
        }
    }
    'points: for &n in &counts {
        for l in labs.iter_mut() {
            if forward::interrupted() {
                break 'points;
            }
            match install(l, n) {
                Ok(t) => {
                    eprintln!(
                        "[firewall] {}: {n} rules installed in {t:.2} s",
                        l.engine.name()
                    );
                    r.load_s.push((l.engine, n, t));
                }
                Err(err) => {
                    eprintln!("[firewall] {} N={n}: {err:#}", l.engine.name());
                    l.installed = None;
                    r.samples.push(Sample {
                        engine: l.engine,
                        rules: n,
                        rep: 0,
                        gbps: None,
                        retransmits: None,
                        machine_cores: f64::NAN,
                        switch_cores: None,
                        wall_s: 0.0,
                        error: Some(format!("installing rules: {err:#}")),
                        offload: None,
                    });
                }
            }
        }
        // Warm-up: ARP and the first connection of every lab.
        for l in labs.iter().filter(|l| l.installed == Some(n)) {
            let _ = measure(l, n, 1, 0);
        }
        for rep in 0..reps {
            for l in labs.iter().filter(|l| l.installed == Some(n)) {
                if forward::interrupted() {
                    break 'points;
                }
                let s = measure(l, n, seconds, rep);
                match (&s.gbps, &s.error) {
                    (Some(g), _) => eprintln!(
                        "[firewall] {} N={n} rep {rep}: {g:.2} Gbit/s, machine {:.2} cores",
                        l.engine.name(),
                        s.machine_cores
                    ),
                    (_, Some(e)) => {
                        eprintln!("[firewall] {} N={n} rep {rep}: {e}", l.engine.name())
                    }
                    _ => {}
                }
                r.samples.push(s);
            }
        }
    }
    if labs.iter().any(|l| l.engine == FwEngine::Nicflow) {
        r.notes.push(
            "nicflow runs established connections in its TC engine (docs/conntrack.md): once a \
             connection is established its packets should not walk the ACL rules, so its \
             throughput should not depend on N; only the first packets of a connection go \
             through the classifier (N drop rules share one mask, so the tuple-space lookup \
             cost does not grow with N either)."
                .into(),
        );
    }
    r.notes.push(
        "UDP 64-byte packets/s against rule count is not measured by this command yet.".into(),
    );
    r.notes.push(
        "Document 003 (section on the stateless firewall, Fig. 4) filters 10 TCP flows with \
         5-tuple rules in iptables' INPUT chain of the receiving host (no conntrack) and reports \
         ~85% less bandwidth at 20K rules; here the rules sit in a forwarding switch in front of \
         a stateful allow-established rule, with one TCP stream."
            .into(),
    );
    for l in labs {
        drop(l.server);
        if let Err(e) = l.tb.down() {
            eprintln!("[firewall] teardown: {e:#}");
        }
    }
    r.load_end = loadavg();
    Ok(r)
}

fn med(r: &Results, e: FwEngine, n: usize, f: &dyn Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let mut v: Vec<f64> = r
        .samples
        .iter()
        .filter(|s| s.engine == e && s.rules == n && s.gbps.is_some())
        .filter_map(f)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| super::median(&mut v))
}

/// Median of the linux-bridge reference over the whole run.
fn base(r: &Results) -> Option<f64> {
    let mut v: Vec<f64> = r
        .samples
        .iter()
        .filter(|s| s.engine == FwEngine::LinuxBridge)
        .filter_map(|s| s.gbps)
        .collect();
    (!v.is_empty()).then(|| super::median(&mut v))
}

fn figures(r: &Results) -> Vec<Figure> {
    let fig = |id: &str, y: &str, f: &dyn Fn(&Sample) -> Option<f64>| Figure {
        id: id.into(),
        title: format!("{y} against ACL rule count"),
        x_label: "ACL rules".into(),
        y_label: y.into(),
        log_x: true,
        series: r
            .engines
            .iter()
            .map(|&e| Series {
                name: e.name().into(),
                points: r
                    .rules
                    .iter()
                    .map(|&n| (n as f64, med(r, e, n, f)))
                    .collect(),
            })
            .collect(),
    };
    vec![
        fig("throughput", "TCP throughput (Gbit/s)", &|s| s.gbps),
        fig("machine-cpu", "machine busy cores", &|s| {
            Some(s.machine_cores)
        }),
    ]
}

fn markdown(r: &Results, figs: &[Figure]) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# nicflow bench firewall\n");
    let _ = writeln!(
        m,
        "{}",
        report::machine_section("hardware counters not used")
    );
    let _ = writeln!(
        m,
        "Load average at the start: {}; at the end: {}.\n",
        r.load_start, r.load_end
    );
    let _ = writeln!(m, "Tools: {}.\n", r.tools.join("; "));
    let _ = writeln!(
        m,
        "Document 003's stateful firewall experiment: client c1 (port p1) -> switch -> server \
         s1 (port p2); `iperf3 -c` in c1, one TCP stream, {} s per run, hosts at the kernel's \
         default offloads. Medians of {} repetition(s) per point after a 1-s warm-up; all labs \
         up for the whole run, rules replaced on every engine at each point, repetitions \
         interleaved across engines. Ratios are against `linux-bridge` (no rules, median over \
         the whole run). The N ACL rules drop `tcp` from 198.19.x.y to port 10000+i: traffic \
         the test never sends, so every packet is checked against all of them.\n",
        r.seconds, r.reps
    );
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    if !r.nft_mode.is_empty() {
        let _ = writeln!(m, "nftables: {}.\n", r.nft_mode);
    }
    let _ = writeln!(m, "OpenFlow table (nicflow, ovs), N = 2:\n\n```");
    for l in flows(2) {
        let _ = writeln!(m, "{}", l.replace("{c1}", "p1").replace("{s1}", "p2"));
    }
    let _ = writeln!(m, "```\n");
    let bf = r.nft_mode.starts_with("bridge");
    let c = testbed::host_ip4(testbed::Role::Client, 1).to_string();
    let _ = writeln!(
        m,
        "nftables, N = 2, linear (nft-linear):\n\n```\n{}```\n\nas a set (nft-set):\n\n```\n{}```\n",
        nft_rules(bf, false, 2, "p1", &c),
        nft_rules(bf, true, 2, "p1", &c)
    );
    let b = base(r);
    let head = [
        ("rules", true),
        ("engine", false),
        ("median Gbit/s", true),
        ("min-max", true),
        ("vs linux-bridge", true),
        ("machine cores", true),
        ("switch cores", true),
        ("retransmits", true),
        ("install s", true),
    ];
    let mut rows = Vec::new();
    for &n in &r.rules {
        for &e in &r.engines {
            let ss: Vec<&Sample> = r
                .samples
                .iter()
                .filter(|s| s.engine == e && s.rules == n)
                .collect();
            let g: Vec<f64> = ss.iter().filter_map(|s| s.gbps).collect();
            let install = r
                .load_s
                .iter()
                .find(|(x, k, _)| *x == e && *k == n)
                .map(|(_, _, t)| format!("{t:.2}"))
                .unwrap_or_default();
            if g.is_empty() {
                let why = ss
                    .iter()
                    .find_map(|s| s.error.clone())
                    .or_else(|| {
                        r.setup_errors
                            .iter()
                            .find(|(x, _)| *x == e)
                            .map(|(_, w)| w.clone())
                    })
                    .unwrap_or_else(|| "not measured".into());
                let mut row = vec![n.to_string(), e.name().into(), why.replace('|', "/")];
                row.resize(head.len(), String::new());
                rows.push(row);
                continue;
            }
            let lo = g.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = g.iter().cloned().fold(0.0, f64::max);
            let mg = med(r, e, n, &|s| s.gbps);
            let retx: u64 = ss.iter().filter_map(|s| s.retransmits).sum();
            rows.push(vec![
                n.to_string(),
                e.name().into(),
                report::cell(mg, 2),
                format!("{lo:.2}-{hi:.2}"),
                match (mg, b) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
                    _ => "—".into(),
                },
                report::cell(med(r, e, n, &|s| Some(s.machine_cores)), 2),
                report::cell(med(r, e, n, &|s| s.switch_cores), 2),
                retx.to_string(),
                install,
            ]);
        }
    }
    let _ = writeln!(m, "## TCP throughput, 1 stream\n");
    let _ = writeln!(m, "{}", report::table(&head, &rows));
    let _ = writeln!(
        m,
        "*switch cores*: the nicflow daemon / ovs-vswitchd process (the kernel's work, bridge \
         and nftables included, is inside *machine cores*). *install s*: time to replace the \
         rule set (nicflow add-flows, ovs-ofctl add-flows, nft -f). *retransmits*: summed over \
         the repetitions.\n"
    );
    offload_table(&mut m, r);
    report::write_list(&mut m, "Notes", &r.notes);
    let fails: Vec<String> = r
        .setup_errors
        .iter()
        .map(|(e, w)| format!("{}: {w}", e.name()))
        .collect();
    report::write_list(&mut m, "Setup failures", &fails);
    let _ = writeln!(m);
    for f in figs {
        let _ = writeln!(m, "### {}\n\n{}", f.title, f.markdown(2));
    }
    m
}

/// The nicflow engines' offloaded share and refused flows per rule count.
fn offload_table(m: &mut String, r: &Results) {
    let nf: Vec<FwEngine> = r
        .engines
        .iter()
        .copied()
        .filter(|e| e.is_nicflow())
        .collect();
    if nf.is_empty() {
        return;
    }
    let head = [
        ("rules", true),
        ("engine", false),
        ("median Gbit/s", true),
        ("offloaded", true),
        ("frames", true),
        ("machine cores", true),
        ("switch cores", true),
        ("dp flows (kernel)", true),
        ("refused by profile: top reasons", false),
    ];
    let mut rows = Vec::new();
    for &n in &r.rules {
        for &e in &nf {
            let ss: Vec<&OffloadSample> = r
                .samples
                .iter()
                .filter(|s| s.engine == e && s.rules == n && s.gbps.is_some())
                .filter_map(|s| s.offload.as_ref())
                .collect();
            let Some(o) = hwprofile::combine(&ss) else {
                continue;
            };
            rows.push(vec![
                n.to_string(),
                e.name().into(),
                report::cell(med(r, e, n, &|s| s.gbps), 2),
                hwprofile::pct(o.frames.kernel_share()),
                o.frames.total().to_string(),
                report::cell(med(r, e, n, &|s| Some(s.machine_cores)), 2),
                report::cell(med(r, e, n, &|s| s.switch_cores), 2),
                format!("{} ({})", o.dp.flows, o.dp.kernel_flows + o.dp.established),
                o.dp.profile_cell(e.profile().is_some()),
            ]);
        }
    }
    let _ = writeln!(m, "## Offload (nicflow engines)\n");
    let _ = writeln!(m, "{}", report::table(&head, &rows));
    let _ = writeln!(
        m,
        "{} *dp flows (kernel)*: datapath flows after a run (those in a kernel engine, \
         established-connection entries included).\n",
        hwprofile::METHOD
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_text() {
        let f = flows(3);
        assert_eq!(f.len(), 4 + 3 + 3);
        assert!(f[4].contains("nw_src=198.19.0.1/32,tp_dst=10000"));
        assert!(
            f.last().unwrap().contains("tp_dst=5201") && f.last().unwrap().contains("ct(commit)")
        );
        let lin = nft_rules(false, false, 3, "p1", "198.18.1.1");
        assert_eq!(lin.matches(" drop\n").count(), 3);
        assert!(lin.contains("ip saddr 198.18.1.1 tcp dport 5201 accept"));
        let set = nft_rules(true, true, 3, "p1", "x");
        assert!(set.contains("@blocked drop") && set.contains("198.19.0.3 . 10002\n"));
        assert!(set.contains("iifname \"p1\""));
        assert_eq!(acl(250).0, "198.19.1.1");
        assert_eq!(
            parse_engines("nicflow,nft,nft-set,nicflow").unwrap(),
            vec![FwEngine::Nicflow, FwEngine::NftLinear, FwEngine::NftSet]
        );
        let p = parse_engines("nicflow-tc,nicflow-bf2,nicflow-profile:cx7").unwrap();
        assert_eq!(
            p,
            vec![
                FwEngine::Nicflow,
                FwEngine::NicflowProfile(Profile::Bf2),
                FwEngine::NicflowProfile(Profile::Cx7)
            ]
        );
        assert_eq!(p[1].name(), "nicflow-bf2");
        assert_eq!(p[2].engine(), Engine::NicflowTc);
        let j = serde_json::to_string(&p[1]).unwrap();
        assert_eq!(serde_json::from_str::<FwEngine>(&j).unwrap(), p[1]);
        assert!(parse_engines("nicflow-bf9").is_err());
    }
}
