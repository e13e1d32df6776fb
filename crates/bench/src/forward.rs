//! `nicflow bench forward`: forwarding between two namespace hosts through
//! nicflow, the Linux bridge and Open vSwitch's userspace datapath, measured
//! in one run on the same kind of veths.
//!
//! Every engine gets a fresh two-host lab (namespaces `h1` and `h2`, one
//! veth each, whose other ends are the switch's two ports in a third
//! namespace `sw`), built by [`nicflow::lab`] from the same topology apart
//! from the switch node:
//!
//! * **nicflow**: the lab's switch daemon (`nicflow daemon`, port type
//!   `--nicflow-port-type`, default afpacket) with explicit rules
//!   `in_port=p1,actions=output:p2` and the reverse (no MAC learning
//!   involved; `--rules normal` uses `priority=0,actions=normal` instead).
//! * **linux-bridge**: `ip link add br0 type bridge` in `sw`, both ends
//!   enslaved, kernel defaults (learning, no STP).
//! * **ovs**: a private Open vSwitch 3.x (database, daemons, sockets and logs
//!   in a temporary directory, daemons inside `sw`), bridge with
//!   `datapath_type=netdev`, the two ends as default (netdev-linux) ports,
//!   the same two explicit rules.
//! * **ovs-afxdp**: the same with `type=afxdp` ports.
//!
//! Host ends keep the kernel's default offloads (`--host-offload default`)
//! or get `ethtool -K eth0 tx off` (`--host-offload off`, what `nicflow lab`
//! does by default) — identical for every engine. Switch-side ends keep the
//! kernel defaults except that nicflow disables offloads on the interfaces
//! it attaches. With host checksum offload on, OVS's netdev-linux ports
//! forward the senders' partial checksums unfixed unless
//! `userspace-tso-enable=true` (then they read virtio-net headers); `--ovs-tso
//! auto` sets it exactly when host offloads are on.
//!
//! Per engine and repetition: iperf3 TCP with 1 and 4 streams, iperf3 UDP
//! with 18-byte payloads (60-byte frames on the veth, 64 with an FCS) at
//! unlimited rate; machine-wide busy CPU from `/proc/stat` and the switch
//! process's utime+stime around each run. Engines are interleaved
//! (repetition 1 of every engine, then repetition 2, ...) so a change in
//! background load hits all of them alike; the report shows medians.

pub mod measure;
pub mod ovs;

use self::measure::{IfaceCounters, IperfSetup, Test, TestSample};
use self::ovs::{Ovs, OvsBridge};
use super::host_tools::loadavg;
use super::median;
use super::overlay::{rtnl_in, NetStep};
use nicflow::control::config::PortType;
use nicflow::lab::{self, sys, LabOptions, Topology};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT/SIGTERM/SIGHUP arrived: every wait in the bench checks
/// this and the bench unwinds, cleaning up as it goes.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        // A closed output pipe (`bench forward | head`) must not kill the
        // bench before it has cleaned up: writes fail instead.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// A forwarding engine under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// nicflow with every default: ports of type `auto` (TC ports) and
    /// `offload = "auto"` (the TC engine). What `add-port br0 IFACE` gives.
    NicflowTc,
    /// nicflow with AF_PACKET ports.
    NicflowAfpacket,
    /// nicflow with AF_XDP ports, userspace datapath only (`offload = "none"`).
    NicflowAfxdp,
    /// nicflow with AF_XDP ports and the XDP offload engine
    /// (`offload = "xdp"`): established flows forwarded in the kernel.
    NicflowXdp,
    LinuxBridge,
    Ovs,
    OvsAfxdp,
    /// No switch: a minimal XDP program on the switch-side ends redirects
    /// every frame to the paired port (`bench::xdp_baseline`), the limit
    /// the XDP engine is compared with. Forwards by port pair only: it
    /// ignores rules.
    XdpRedirect,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::NicflowTc => "nicflow-tc",
            Engine::NicflowAfpacket => "nicflow-afpacket",
            Engine::NicflowAfxdp => "nicflow-afxdp",
            Engine::NicflowXdp => "nicflow-xdp",
            Engine::LinuxBridge => "linux-bridge",
            Engine::Ovs => "ovs",
            Engine::OvsAfxdp => "ovs-afxdp",
            Engine::XdpRedirect => "xdp-redirect",
        }
    }

    pub fn parse(s: &str) -> Option<Engine> {
        Some(match s.trim() {
            "nicflow-tc" | "tc" => Engine::NicflowTc,
            "nicflow-afpacket" => Engine::NicflowAfpacket,
            "nicflow-afxdp" => Engine::NicflowAfxdp,
            "nicflow-xdp" | "xdp" => Engine::NicflowXdp,
            "linux-bridge" | "bridge" => Engine::LinuxBridge,
            "ovs" | "ovs-userspace" => Engine::Ovs,
            "ovs-afxdp" => Engine::OvsAfxdp,
            "xdp-redirect" => Engine::XdpRedirect,
            _ => return None,
        })
    }

    /// Short tag for lab and directory names.
    pub fn tag(self) -> &'static str {
        match self {
            Engine::NicflowTc => "nfc",
            Engine::NicflowAfpacket => "nfp",
            Engine::NicflowAfxdp => "nfx",
            Engine::NicflowXdp => "nfo",
            Engine::LinuxBridge => "br",
            Engine::Ovs => "ovs",
            Engine::OvsAfxdp => "oxdp",
            Engine::XdpRedirect => "xrd",
        }
    }

    /// The port type of a nicflow engine.
    pub fn nicflow_port_type(self) -> Option<PortType> {
        match self {
            Engine::NicflowTc => Some(PortType::Auto),
            Engine::NicflowAfpacket => Some(PortType::Afpacket),
            Engine::NicflowAfxdp | Engine::NicflowXdp => Some(PortType::Afxdp),
            _ => None,
        }
    }

    /// The `[[switch]]` lines that pin a nicflow engine's offload mode (and,
    /// for the XDP engine, whether its ports may trust senders' checksums:
    /// only when the hosts complete them, i.e. host checksum offload off).
    pub fn nicflow_switch_toml(self, host_checksums_complete: bool) -> String {
        match self {
            Engine::NicflowTc => String::new(),
            Engine::NicflowAfpacket | Engine::NicflowAfxdp => "offload = \"none\"\n".into(),
            Engine::NicflowXdp => format!(
                "offload = \"xdp\"\nport_options = {{ csum_complete = {host_checksums_complete} }}\n"
            ),
            _ => String::new(),
        }
    }

    pub fn is_nicflow(self) -> bool {
        self.nicflow_port_type().is_some()
    }

    /// Does the engine run OpenFlow rules (nicflow, OVS)? The Linux bridge
    /// and the xdp-redirect limit forward without a table.
    pub fn has_rules(self) -> bool {
        self.is_nicflow() || self.is_ovs()
    }

    pub fn is_ovs(self) -> bool {
        matches!(self, Engine::Ovs | Engine::OvsAfxdp)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostOffload {
    /// The kernel's defaults on the host ends (checksum offload, TSO, GSO).
    Default,
    /// `ethtool -K eth0 tx off` on the host ends: finished checksums, no TSO.
    Off,
}

/// The `bench forward` command line.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Engines, comma-separated: nicflow (= nicflow-tc, every default),
    /// nicflow-afpacket, nicflow-afxdp (offload none), nicflow-xdp,
    /// linux-bridge, ovs, ovs-afxdp, xdp-redirect.
    #[arg(long, default_value = "nicflow,nicflow-afxdp,linux-bridge,ovs")]
    pub engines: String,
    /// Repetitions per engine and test (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// How nicflow attaches to its veth ends: afpacket or afxdp.
    #[arg(long, default_value = "afpacket")]
    pub nicflow_port_type: String,
    /// Rules for nicflow and OVS: `explicit` (in_port=p1,actions=output:p2
    /// and back) or `normal` (priority=0,actions=normal: MAC learning).
    #[arg(long, default_value = "explicit")]
    pub rules: String,
    /// Host-side veth offloads: `default` (kernel defaults) or `off`
    /// (`ethtool -K eth0 tx off`).
    #[arg(long, default_value = "default")]
    pub host_offload: String,
    /// OVS `userspace-tso-enable`: auto (on iff host offloads are on), on, off.
    #[arg(long, default_value = "auto")]
    pub ovs_tso: String,
    /// Directory for report.md and samples.json.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Smoke test: 1 repetition, 2-second runs.
    #[arg(long)]
    pub quick: bool,
    /// Do not apt-get install Open vSwitch when it is missing (skip the OVS
    /// engines instead).
    #[arg(long)]
    pub no_install: bool,
    /// Print (and with --out, write) the report of an earlier run from its
    /// samples.json instead of measuring.
    #[arg(long, value_name = "SAMPLES_JSON")]
    pub render: Option<PathBuf>,
}

/// Resolved options.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    pub engines: Vec<Engine>,
    pub reps: usize,
    pub seconds: u64,
    pub nicflow_port_type: PortType,
    pub explicit_rules: bool,
    pub host_offload: HostOffload,
    pub ovs_tso: bool,
    pub install_ovs: bool,
    pub nicflow_bin: PathBuf,
    pub quick: bool,
}

impl Options {
    pub fn from_args(a: &Args) -> anyhow::Result<Options> {
        use anyhow::{bail, Context};
        let nicflow_port_type = match PortType::parse(&a.nicflow_port_type) {
            Some(p @ (PortType::Afpacket | PortType::Afxdp)) => p,
            _ => bail!(
                "--nicflow-port-type {}: afpacket or afxdp",
                a.nicflow_port_type
            ),
        };
        let mut engines = Vec::new();
        for e in a.engines.split(',').filter(|s| !s.trim().is_empty()) {
            let e = if e.trim() == "nicflow" {
                Engine::NicflowTc
            } else {
                Engine::parse(e).with_context(|| {
                    format!(
                        "unknown engine `{e}` (nicflow, nicflow-tc, nicflow-afpacket, \
                         nicflow-afxdp, nicflow-xdp, linux-bridge, ovs, ovs-afxdp, xdp-redirect)"
                    )
                })?
            };
            if !engines.contains(&e) {
                engines.push(e);
            }
        }
        if engines.is_empty() {
            bail!("no engines");
        }
        let explicit_rules = match a.rules.as_str() {
            "explicit" => true,
            "normal" => false,
            r => bail!("--rules {r}: explicit or normal"),
        };
        let host_offload = match a.host_offload.as_str() {
            "default" | "on" => HostOffload::Default,
            "off" => HostOffload::Off,
            h => bail!("--host-offload {h}: default or off"),
        };
        let ovs_tso = match a.ovs_tso.as_str() {
            "auto" => host_offload == HostOffload::Default,
            "on" | "true" => true,
            "off" | "false" => false,
            t => bail!("--ovs-tso {t}: auto, on or off"),
        };
        let (reps, seconds) = if a.quick {
            (1, 2)
        } else {
            (a.reps.max(1), a.seconds.max(1))
        };
        let nicflow_bin = super::nicflow_bin()?;
        Ok(Options {
            engines,
            reps,
            seconds,
            nicflow_port_type,
            explicit_rules,
            host_offload,
            ovs_tso,
            install_ovs: !a.no_install,
            nicflow_bin,
            quick: a.quick,
        })
    }

    fn flows(&self) -> Vec<String> {
        if self.explicit_rules {
            vec![
                "in_port=p1,actions=output:p2".into(),
                "in_port=p2,actions=output:p1".into(),
            ]
        } else {
            vec!["priority=0,actions=normal".into()]
        }
    }
}

const H1_ADDRS: [&str; 2] = ["198.18.0.1/24", "2001:db8::1/64"];
const H2_ADDRS: [&str; 2] = ["198.18.0.2/24", "2001:db8::2/64"];
const H2_IP: &str = "198.18.0.2";
const IPERF_PORT: u16 = 5201;

/// Lab names: `fwd<pid><tag>`, so a later run can tell a dead run's labs.
fn lab_name(engine: Engine) -> String {
    format!("fwd{}{}", std::process::id(), engine.tag())
}

fn toml_list(xs: &[&str]) -> String {
    let q: Vec<String> = xs.iter().map(|x| format!("\"{x}\"")).collect();
    format!("[{}]", q.join(", "))
}

/// The lab for one engine. Host configuration is the same text for every
/// engine; only the switch node differs (a nicflow switch, or a plain
/// namespace `sw` holding the switch-side ends for the other engines).
/// Links keep the kernel's offloads everywhere (`offload = true`); host
/// offloads are turned off afterwards when asked, the same way for all.
pub fn topology_text(engine: Engine, lab: &str, opts: &Options) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "name = \"{lab}\"");
    for h in ["h1", "h2"] {
        let _ = writeln!(
            t,
            "[[host]]\nname = \"{h}\"\nsysctl = {{ \"net.ipv6.conf.all.accept_ra\" = 0 }}"
        );
    }
    if let Some(port_type) = engine.nicflow_port_type() {
        let flows: Vec<String> = opts.flows().iter().map(|f| format!("\"{f}\"")).collect();
        let _ = writeln!(
            t,
            "[[switch]]\nname = \"sw\"\nport_type = \"{}\"\n{}[[switch.bridge]]\nname = \"br0\"\nflows = [{}]",
            port_type.as_str(),
            engine.nicflow_switch_toml(opts.host_offload == HostOffload::Off),
            flows.join(", ")
        );
        for (h, p, a) in [("h1", "p1", H1_ADDRS), ("h2", "p2", H2_ADDRS)] {
            let _ = writeln!(
                t,
                "[[link]]\na = \"{h}:eth0\"\nb = \"sw:{p}\"\naddresses = {}\noffload = true",
                toml_list(&a)
            );
        }
    } else {
        // The switch-side ends, like a nicflow switch's, have IPv6 off so
        // the kernel sends nothing from them.
        let _ = writeln!(
            t,
            "[[host]]\nname = \"sw\"\nsysctl = {{ \"net.ipv6.conf.all.accept_ra\" = 0, \
             \"net.ipv6.conf.p1.disable_ipv6\" = 1, \"net.ipv6.conf.p2.disable_ipv6\" = 1 }}"
        );
        for (h, p, a) in [("h1", "p1", H1_ADDRS), ("h2", "p2", H2_ADDRS)] {
            let _ = writeln!(
                t,
                "[[link]]\na = \"{h}:eth0\"\nb = \"sw:{p}\"\na_addresses = {}\nb_addresses = []\noffload = true",
                toml_list(&a)
            );
        }
    }
    t
}

/// One engine, one repetition: setup facts, the three tests, diagnostics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EngineRun {
    pub engine: Engine,
    pub rep: usize,
    pub lab: String,
    /// Why the engine could not be measured at all.
    pub error: Option<String>,
    pub switch_pid: Option<u32>,
    /// Switch-side interface names (in namespace `sw`).
    pub switch_ifaces: Vec<String>,
    /// `ethtool -k` of h1's eth0 and of the switch end of link 1, as the
    /// engine runs.
    pub host_offloads: Vec<(String, String)>,
    pub switch_offloads: Vec<(String, String)>,
    /// Busy cores measured for 1 s after setup, before the tests, not
    /// counting the switch process (other load on the machine).
    #[serde(deserialize_with = "nan_if_null")]
    pub background_busy_cores: f64,
    /// The switch process's own CPU in that second (an idle engine that
    /// busy-polls shows up here), in cores.
    #[serde(deserialize_with = "nan_if_null")]
    pub idle_switch_cores: f64,
    /// h1 -> h2 ping round trips (ms), idle switch.
    pub ping_rtt_ms: Vec<f64>,
    pub samples: Vec<TestSample>,
    /// The engine's BPF programs, ns per run, read from the kernel
    /// (`bpf_stats_enabled`) over an extra UDP run after the tests (not one
    /// of the samples: the accounting itself costs time per run).
    #[serde(default)]
    pub prog_cost: Vec<super::progcost::ProgCost>,
    /// Engine-specific counters after the tests (nicflow `stats`, OVS
    /// port/PMD stats).
    pub diagnostics: serde_json::Value,
    /// Setup commands (OVS).
    pub commands: Vec<String>,
}

/// JSON has no NaN: serde_json writes it as null; read null back as NaN.
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Everything a bench run produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub options: Options,
    pub ovs_version: Option<String>,
    pub ovs_install: Option<String>,
    pub skipped: Vec<(Engine, String)>,
    pub loadavg_start: String,
    pub loadavg_end: String,
    pub started_unix: u64,
    pub runs: Vec<EngineRun>,
    /// `BPF_PROG_TEST_RUN` cost of the datapath programs and of bare
    /// redirect programs, ns per run (`bench::progcost`).
    #[serde(default)]
    pub test_run_costs: Vec<(String, f64)>,
}

/// Removes a lab when dropped (unless `down` was called).
struct LabGuard {
    name: String,
    opts: LabOptions,
    armed: bool,
}

impl LabGuard {
    fn down(mut self) -> Result<(), String> {
        self.armed = false;
        lab::down(&self.name, &self.opts)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = lab::down(&self.name, &self.opts) {
                tracing::warn!("removing lab {}: {e}", self.name);
            }
        }
    }
}

/// Labs and OVS directories of earlier bench runs that died without
/// cleaning up (SIGKILL): their names carry the dead run's pid.
fn reap_stale(lab_opts: &LabOptions) -> Vec<String> {
    let mut done = ovs::reap_stale();
    // Scratch directories (iperf3 JSON) of dead runs.
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("nicflow-fwd-")
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !sys::alive(pid) {
                let _ = std::fs::remove_dir_all(e.path());
                done.push(e.path().display().to_string());
            }
        }
    }
    let mut labs: Vec<String> = sys::list_namespaces()
        .unwrap_or_default()
        .iter()
        .filter_map(|ns| {
            let rest = ns.strip_prefix("nf-fwd")?;
            let (lab_rest, _node) = rest.rsplit_once('-')?;
            Some(format!("fwd{lab_rest}"))
        })
        .collect();
    labs.extend(
        lab::labs(lab_opts)
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.lab)
            .filter(|l| l.starts_with("fwd")),
    );
    labs.sort();
    labs.dedup();
    for l in labs {
        let digits: String = l[3..].chars().take_while(char::is_ascii_digit).collect();
        let Ok(pid) = digits.parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() || sys::alive(pid) {
            continue;
        }
        if lab::down(&l, lab_opts).is_ok() {
            done.push(format!("lab {l}"));
        }
    }
    done
}

fn ping_rtts(ns: &str) -> Vec<f64> {
    let out = sys::run(&mut sys::in_ns(
        Some(ns),
        &["ping", "-n", "-c", "10", "-i", "0.05", "-W", "2", H2_IP],
    ));
    let Ok(out) = out else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("nicflow-fwd-{}", std::process::id()))
}

/// Build, measure and tear down one engine.
fn run_engine(
    engine: Engine,
    rep: usize,
    opts: &Options,
    lab_opts: &LabOptions,
    progress: &mut dyn FnMut(&str),
) -> EngineRun {
    let lab_name = lab_name(engine);
    let mut run = EngineRun {
        engine,
        rep,
        lab: lab_name.clone(),
        error: None,
        switch_pid: None,
        switch_ifaces: Vec::new(),
        host_offloads: Vec::new(),
        switch_offloads: Vec::new(),
        background_busy_cores: f64::NAN,
        idle_switch_cores: f64::NAN,
        ping_rtt_ms: Vec::new(),
        samples: Vec::new(),
        prog_cost: Vec::new(),
        diagnostics: serde_json::Value::Null,
        commands: Vec::new(),
    };
    if let Err(e) = engine_body(engine, opts, lab_opts, &lab_name, &mut run, progress) {
        run.error = Some(e);
    }
    run
}

fn engine_body(
    engine: Engine,
    opts: &Options,
    lab_opts: &LabOptions,
    lab_name: &str,
    run: &mut EngineRun,
    progress: &mut dyn FnMut(&str),
) -> Result<(), String> {
    let text = topology_text(engine, lab_name, opts);
    let topo = Topology::parse(&text).map_err(|e| format!("topology: {e}"))?;
    let h1 = topo.namespace_of("h1").expect("host h1");
    let h2 = topo.namespace_of("h2").expect("host h2");
    let swns = topo.namespace_of("sw").expect("switch namespace");
    let up = lab::up(&topo, lab_opts).map_err(|e| format!("lab up: {e}"))?;
    let guard = LabGuard {
        name: lab_name.to_string(),
        opts: lab_opts.clone(),
        armed: true,
    };
    if opts.host_offload == HostOffload::Off {
        for ns in [&h1, &h2] {
            // `ethtool -K eth0 tx off`.
            nicflow::os::ethtool::set(
                Some(ns),
                "eth0",
                nicflow::os::ethtool::is_tx_checksum,
                false,
            )
            .map_err(|e| format!("{ns}: {e}"))?;
        }
    }
    run.switch_ifaces = match engine {
        e if e.is_nicflow() => topo
            .switch_ports("sw")
            .into_iter()
            .map(|(_, _, iface)| iface)
            .collect(),
        _ => vec!["p1".into(), "p2".into()],
    };
    let mut ovs: Option<Ovs> = None;
    match engine {
        Engine::NicflowTc | Engine::NicflowAfpacket | Engine::NicflowAfxdp | Engine::NicflowXdp => {
            if let Some((_, port, why)) = up.unattached.first() {
                return Err(format!("nicflow port {port} not attached: {why}"));
            }
            run.switch_pid = up.state.daemons.first().and_then(|d| d.pid);
        }
        Engine::LinuxBridge => {
            let steps = [
                NetStep::Bridge("br0".into()),
                NetStep::master("p1", "br0"),
                NetStep::master("p2", "br0"),
                NetStep::Up("br0".into()),
            ];
            let commands = &mut run.commands;
            rtnl_in(&swns, |rt| {
                for st in &steps {
                    st.apply(rt)?;
                    commands.push(format!("ip -n {swns} {}", st.words().join(" ")));
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        }
        Engine::XdpRedirect => {
            return Err(
                "xdp-redirect forwards by port pair only; it is an engine of the packet-rate \
                 experiments (ovs-l3, table-scale), not of bench forward"
                    .into(),
            );
        }
        Engine::Ovs | Engine::OvsAfxdp => {
            let br = OvsBridge {
                userspace_tso: engine == Engine::Ovs && opts.ovs_tso,
                port_type: (engine == Engine::OvsAfxdp).then_some("afxdp"),
                ports: vec!["p1".into(), "p2".into()],
                flows: opts.explicit_rules.then(|| opts.flows()),
            };
            let tag = format!("{}-r{}", engine.tag(), run.rep);
            let started = Ovs::start(&swns, &tag, &br);
            let o = match started {
                Ok(o) => o,
                Err(e) => return Err(format!("starting OVS: {e}")),
            };
            run.switch_pid = o.vswitchd_pid();
            run.commands = o.commands.clone();
            ovs = Some(o);
        }
    }
    if interrupted() {
        return Err("interrupted".into());
    }
    run.host_offloads = measure::offloads(&h1, "eth0");
    run.switch_offloads = measure::offloads(&swns, &run.switch_ifaces[0]);
    run.ping_rtt_ms = ping_rtts(&h1);
    if run.ping_rtt_ms.is_empty() {
        progress(&format!(
            "{}: h1 cannot ping h2; measuring anyway",
            engine.name()
        ));
    }
    (run.background_busy_cores, run.idle_switch_cores) =
        measure::background_busy(Duration::from_secs(1), run.switch_pid);

    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let setup = IperfSetup {
        client_ns: &h1,
        server_ns: &h2,
        server_addr: H2_IP,
        port: IPERF_PORT,
        seconds: opts.seconds,
        dir: &dir,
        switch_pid: run.switch_pid,
    };
    for test in Test::ALL {
        if interrupted() {
            return Err("interrupted".into());
        }
        let tag = format!("{}-r{}-{}", engine.name(), run.rep, test.name());
        let s = match test {
            Test::Udp64Mmsg => measure::run_blast(&setup),
            _ => measure::run_iperf(&setup, test, &tag),
        };
        progress(&format!("{}", SampleLine(engine, run.rep, &s)));
        run.samples.push(s);
    }
    if let (true, Some(pid)) = (engine.is_nicflow(), run.switch_pid) {
        use super::progcost;
        let _stats = progcost::StatsEnabled::on();
        let before = progcost::live(pid);
        let _ = measure::run_blast(&setup);
        run.prog_cost = progcost::delta(&before, &progcost::live(pid));
        let costs: Vec<String> = run
            .prog_cost
            .iter()
            .map(|c| format!("{} {:.0} ns/run ({} runs)", c.name, c.ns_per_run, c.runs))
            .collect();
        progress(&format!(
            "{} rep {} BPF programs: {}",
            engine.name(),
            run.rep + 1,
            if costs.is_empty() {
                "none ran".into()
            } else {
                costs.join(", ")
            }
        ));
    }
    run.diagnostics = match engine {
        e if e.is_nicflow() => nicflow_diagnostics(lab_name, lab_opts),
        Engine::LinuxBridge => serde_json::json!({
            "p1": IfaceCounters::read(&swns, "p1"),
            "p2": IfaceCounters::read(&swns, "p2"),
        }),
        _ => ovs.as_ref().map(Ovs::diagnostics).unwrap_or_default(),
    };
    if let Some(mut o) = ovs.take() {
        o.stop()?;
    }
    guard.down()
}

fn nicflow_diagnostics(lab_name: &str, lab_opts: &LabOptions) -> serde_json::Value {
    use nicflow::control::proto::Request;
    let sock = lab::switch_socket(lab_name, "sw", lab_opts);
    let log = lab_opts.lab_dir(lab_name).join("sw.log");
    match nicflow::control::daemon::request(&sock, &Request::Stats) {
        Ok(r) => {
            serde_json::json!({ "stats": r.data, "text": r.text, "log_tail": sys::tail(&log, 20) })
        }
        Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
    }
}

struct SampleLine<'a>(Engine, usize, &'a TestSample);

impl std::fmt::Display for SampleLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let SampleLine(e, rep, s) = self;
        write!(f, "{} rep {} {}: ", e.name(), rep + 1, s.test)?;
        if let Some(err) = &s.error {
            return write!(f, "FAILED: {err}");
        }
        match s.udp_received_pps {
            Some(r) => write!(
                f,
                "sent {:.0} kpps, h2 eth0 {:.0} kpps, received {:.0} kpps",
                s.udp_sent_pps.unwrap_or(0.0) / 1e3,
                s.h2_rx_pps / 1e3,
                r / 1e3
            )?,
            None => write!(
                f,
                "{:.2} Gbit/s ({} retransmits)",
                s.gbps,
                s.retransmits.unwrap_or(0)
            )?,
        }
        write!(f, ", machine CPU {:.2} s", s.machine_cpu_s)?;
        if let Some(c) = s.switch_cpu_s {
            write!(f, ", switch CPU {c:.2} s")?;
        }
        Ok(())
    }
}

fn check_tools() -> Result<(), String> {
    let missing: Vec<&str> = ["iperf3", "ping", "ss"]
        .into_iter()
        .filter(|p| ovs::which(p).is_none())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "missing programs: {} (bash scripts/setup.sh installs them)",
            missing.join(", ")
        ))
    }
}

/// Run the whole bench.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Results> {
    check_tools().map_err(anyhow::Error::msg)?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("bench forward creates namespaces and veths: run it as root");
    }
    install_signal_handlers();
    let lab_opts = LabOptions::with_binary(opts.nicflow_bin.clone());
    for s in reap_stale(&lab_opts) {
        progress(&format!("removed leftovers of a dead bench run: {s}"));
    }
    let mut results = Results {
        machine: super::machine_description(),
        options: opts.clone(),
        ovs_version: None,
        ovs_install: None,
        skipped: Vec::new(),
        loadavg_start: loadavg(),
        loadavg_end: String::new(),
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        runs: Vec::new(),
        test_run_costs: Vec::new(),
    };
    if opts.engines.iter().any(|e| e.is_nicflow()) {
        match super::progcost::test_run_costs() {
            Ok(c) => {
                for (name, ns) in &c {
                    progress(&format!("BPF_PROG_TEST_RUN {name}: {ns:.0} ns/run"));
                }
                results.test_run_costs = c;
            }
            Err(e) => progress(&format!("BPF_PROG_TEST_RUN costs not measured: {e}")),
        }
    }
    let mut engines = opts.engines.clone();
    if engines.iter().any(|e| e.is_ovs()) {
        let got = if opts.install_ovs {
            ovs::ensure_installed(progress)
        } else if ovs::installed() {
            Ok(None)
        } else {
            Err("Open vSwitch is not installed (--no-install)".into())
        };
        match got {
            Ok(note) => {
                results.ovs_install = note;
                results.ovs_version = Some(ovs::version());
            }
            Err(e) => {
                progress(&format!("skipping OVS engines: {e}"));
                for en in engines.iter().filter(|e| e.is_ovs()) {
                    results.skipped.push((*en, e.clone()));
                }
                engines.retain(|e| !e.is_ovs());
            }
        }
    }
    let t0 = Instant::now();
    'reps: for rep in 0..opts.reps {
        for &engine in &engines {
            if interrupted() {
                break 'reps;
            }
            progress(&format!(
                "rep {}/{}: {} (lab {})",
                rep + 1,
                opts.reps,
                engine.name(),
                lab_name(engine)
            ));
            let r = run_engine(engine, rep, opts, &lab_opts, progress);
            if let Some(e) = &r.error {
                progress(&format!("{} rep {}: {e}", engine.name(), rep + 1));
            }
            results.runs.push(r);
        }
    }
    let _ = std::fs::remove_dir_all(scratch_dir());
    results.loadavg_end = loadavg();
    progress(&format!("done in {:.0} s", t0.elapsed().as_secs_f64()));
    if interrupted() {
        anyhow::bail!("interrupted; everything the bench created has been removed");
    }
    Ok(results)
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

/// Median of the values `f` gives for `engine`'s successful samples of
/// `test`, with min, max and how many succeeded out of how many.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub ok: usize,
    pub n: usize,
}

impl Stat {
    fn valid(&self) -> bool {
        self.ok > 0 && self.median.is_finite()
    }
}

pub fn stat(
    r: &Results,
    engine: Engine,
    test: Test,
    f: impl Fn(&TestSample) -> Option<f64>,
) -> Stat {
    let samples: Vec<&TestSample> = r
        .runs
        .iter()
        .filter(|run| run.engine == engine)
        .flat_map(|run| run.samples.iter())
        .filter(|s| s.test == test.name())
        .collect();
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| s.error.is_none())
        .filter_map(|s| f(s))
        .filter(|x| x.is_finite())
        .collect();
    let n = r.runs.iter().filter(|run| run.engine == engine).count();
    if v.is_empty() {
        return Stat {
            median: f64::NAN,
            n,
            ..Default::default()
        };
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Stat {
        median: median(&mut v),
        min,
        max,
        ok: v.len(),
        n,
    }
}

type Getter = fn(&TestSample) -> Option<f64>;

/// A figure of the summary table.
struct Figure {
    title: &'static str,
    test: Test,
    get: Getter,
    /// Higher is better (throughput) or lower (CPU cost).
    higher_better: bool,
    decimals: usize,
    /// A switch-process figure: the kernel bridge has no process.
    per_process: bool,
}

fn figures() -> Vec<Figure> {
    vec![
        Figure {
            title: "TCP 1 stream Gbit/s",
            test: Test::Tcp1,
            get: |s| Some(s.gbps),
            higher_better: true,
            decimals: 2,
            per_process: false,
        },
        Figure {
            title: "TCP 4 streams Gbit/s",
            test: Test::Tcp4,
            get: |s| Some(s.gbps),
            higher_better: true,
            decimals: 2,
            per_process: false,
        },
        Figure {
            title: "UDP 64B kpps received (iperf3)",
            test: Test::Udp64,
            get: |s| s.udp_received_pps.map(|x| x / 1e3),
            higher_better: true,
            decimals: 0,
            per_process: false,
        },
        Figure {
            title: "UDP 64B kpps received (sendmmsg)",
            test: Test::Udp64Mmsg,
            get: |s| s.udp_received_pps.map(|x| x / 1e3),
            higher_better: true,
            decimals: 0,
            per_process: false,
        },
        Figure {
            title: "CPU s/Gbit machine (TCP 1)",
            test: Test::Tcp1,
            get: TestSample::machine_s_per_gbit,
            higher_better: false,
            decimals: 3,
            per_process: false,
        },
        Figure {
            title: "CPU s/Gbit switch process (TCP 1)",
            test: Test::Tcp1,
            get: TestSample::switch_s_per_gbit,
            higher_better: false,
            decimals: 3,
            per_process: true,
        },
    ]
}

fn fmt_num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "—".into()
    }
}

fn engines_in(r: &Results) -> Vec<Engine> {
    let mut v: Vec<Engine> = Vec::new();
    for run in &r.runs {
        if !v.contains(&run.engine) {
            v.push(run.engine);
        }
    }
    v
}

/// Other load (cores) above which a run is flagged in the report.
const BUSY_BACKGROUND: f64 = 0.25;

/// The Markdown report.
pub fn report(r: &Results) -> String {
    let o = &r.options;
    let mut s = String::new();
    let _ = writeln!(s, "# nicflow bench forward\n");
    let _ = writeln!(s, "Machine: {}", r.machine);
    let _ = writeln!(
        s,
        "Load average (1/5/15 min) at start: {}; at end: {}.",
        r.loadavg_start, r.loadavg_end
    );
    let mut bg: Vec<f64> = r
        .runs
        .iter()
        .map(|x| x.background_busy_cores)
        .filter(|x| x.is_finite())
        .collect();
    let (bg_lo, bg_hi) = (
        bg.iter().copied().fold(f64::INFINITY, f64::min),
        bg.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let bg_med = median(&mut bg);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let _ = writeln!(
        s,
        "Background load: {} of {cores} cores busy (median; range {}–{}) in the 1 s before each \
         engine's tests, with the engine set up and idle, not counting the switch process \
         itself. The machine is shared: anything else \
         running (other builds) competes with the hosts, the switch and iperf3 for the same {cores} \
         cores and is included in the machine-wide CPU figures.\n",
        fmt_num(bg_med, 2),
        fmt_num(bg_lo, 2),
        fmt_num(bg_hi, 2)
    );
    let busy: Vec<String> = r
        .runs
        .iter()
        .filter(|x| x.background_busy_cores > BUSY_BACKGROUND)
        .map(|x| {
            format!(
                "{} rep {} ({:.2})",
                x.engine.name(),
                x.rep + 1,
                x.background_busy_cores
            )
        })
        .collect();
    if !busy.is_empty() {
        let _ = writeln!(
            s,
            "**Warning: other load above {BUSY_BACKGROUND} cores before {} of {} engine runs** \
             ({}): those runs shared the CPUs with someone else's work and their figures are \
             depressed; compare medians with care or rerun on a quiet machine.\n",
            busy.len(),
            r.runs.len(),
            busy.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "Medians of {} repetition(s) of {} s iperf3 runs per engine and test; engines interleaved \
         (every engine's repetition 1, then repetition 2, ...), each on a freshly built lab.\n",
        o.reps, o.seconds
    );

    // Summary table.
    let engines = engines_in(r);
    let figs = figures();
    let _ = write!(s, "| engine |");
    for f in &figs {
        let _ = write!(s, " {} |", f.title);
    }
    let _ = writeln!(s);
    let _ = write!(s, "|---|");
    for _ in &figs {
        let _ = write!(s, "---:|");
    }
    let _ = writeln!(s);
    for &e in &engines {
        let _ = write!(s, "| {} |", engine_label(e));
        for f in &figs {
            let st = stat(r, e, f.test, f.get);
            let cell = if st.valid() {
                let mut c = fmt_num(st.median, f.decimals);
                if st.ok < st.n {
                    let _ = write!(c, " ({}/{} ok)", st.ok, st.n);
                }
                c
            } else if f.per_process && e == Engine::LinuxBridge {
                "n/a (kernel)".into()
            } else {
                "fail".into()
            };
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s);
    }
    // The default product against the kernel's bridge and against its own
    // userspace datapath (offload none): issue 12's targets (TCP 1 stream
    // >= 1.0x the bridge, 4 streams >= 0.9x; switch CPU per Gbit >= 100x
    // lower than offload none).
    for (a, b) in [
        (Engine::NicflowTc, Engine::LinuxBridge),
        (Engine::NicflowTc, Engine::NicflowAfxdp),
    ] {
        if !engines.contains(&a) || !engines.contains(&b) {
            continue;
        }
        let _ = write!(s, "| **{} / {}** |", a.name(), b.name());
        for f in &figs {
            let x = stat(r, a, f.test, f.get);
            let y = stat(r, b, f.test, f.get);
            let cell = if x.valid() && y.valid() && y.median > 0.0 {
                if x.median > 0.0 {
                    format!("**{:.2}x**", x.median / y.median)
                } else {
                    "**0** (none measurable)".into()
                }
            } else {
                "—".into()
            };
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s);
    }
    let base = Engine::Ovs;
    let mut targets = Vec::new();
    for &nf in engines.iter().filter(|e| e.is_nicflow()) {
        if !engines.contains(&base) {
            break;
        }
        let mut met = 0;
        let mut total = 0;
        let _ = write!(s, "| **{} / ovs** |", nf.name());
        for f in &figs {
            let a = stat(r, nf, f.test, f.get);
            let b = stat(r, base, f.test, f.get);
            let cell = if a.valid() && b.valid() && b.median > 0.0 {
                let ratio = a.median / b.median;
                total += 1;
                let ok = if f.higher_better {
                    ratio >= 3.0
                } else {
                    ratio <= 1.0 / 3.0
                };
                if ok {
                    met += 1;
                }
                format!("**{ratio:.2}x**")
            } else {
                "—".into()
            };
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s);
        targets.push(format!("{}: {met} of {total}", nf.name()));
    }
    if !targets.is_empty() {
        let _ = writeln!(
            s,
            "\nTarget: nicflow at least 3x Open vSwitch's userspace datapath (`ovs`) on every \
             figure (throughput ratio >= 3; CPU cost ratio <= 0.33). Figures meeting it: {}.\n",
            targets.join("; ")
        );
    }

    // UDP sender rate and CPU per packet: is the generator the bottleneck?
    // What the programs themselves cost per packet.
    let live: Vec<String> = engines
        .iter()
        .filter(|e| e.is_nicflow())
        .flat_map(|&e| {
            let mut names: Vec<String> = r
                .runs
                .iter()
                .filter(|x| x.engine == e)
                .flat_map(|x| x.prog_cost.iter().map(|c| c.name.clone()))
                .collect();
            names.sort();
            names.dedup();
            names.into_iter().map(move |n| {
                let mut v: Vec<f64> = r
                    .runs
                    .iter()
                    .filter(|x| x.engine == e)
                    .filter_map(|x| x.prog_cost.iter().find(|c| c.name == n))
                    .map(|c| c.ns_per_run)
                    .collect();
                format!("| {} | `{n}` | {:.0} |", e.name(), median(&mut v))
            })
        })
        .collect();
    if !live.is_empty() || !r.test_run_costs.is_empty() {
        let _ = writeln!(s, "## BPF program cost per packet\n");
        if !r.test_run_costs.is_empty() {
            let _ = writeln!(
                s,
                "`BPF_PROG_TEST_RUN`, 64-byte UDP frame, median of 5 x 100,000 runs (the datapath \
                 programs with one installed flow; the bare programs redirect and nothing else):\n\n\
                 | program | ns/run |\n|---|---:|"
            );
            for (n, ns) in &r.test_run_costs {
                let _ = writeln!(s, "| {n} | {ns:.0} |");
            }
            let _ = writeln!(s);
        }
        if !live.is_empty() {
            let _ = writeln!(
                s,
                "Live, during an extra UDP 64B sendmmsg run after each engine's tests, \
                 `kernel.bpf_stats_enabled` on (run_time_ns / run_cnt; medians over \
                 repetitions; a TSO super-frame is one run):\n\n| engine | program | ns/run |\n|---|---|---:|"
            );
            for l in &live {
                let _ = writeln!(s, "{l}");
            }
            let _ = writeln!(s);
        }
    }

    let _ = writeln!(s, "## Details\n");
    let _ = writeln!(
        s,
        "UDP: iperf3 `-u -l {} -b 0`: {}-byte payload + 8 UDP + 20 IPv4 + 14 Ethernet = {}-byte \
         frames on the veth (veths carry no FCS; {} bytes on a wire with the 4-byte FCS, the \
         Ethernet minimum). Two generators: iperf3 (3.12: one thread, one `send` per datagram) \
         and `udp64-mmsg`, a thread of the bench inside h1 calling `sendmmsg` with 64 datagrams \
         per call, counted by a thread inside h2 calling `recvmmsg` (both threads enter the \
         namespaces with `setns`; their CPU is part of the machine-wide figure). \"sent\" is the \
         generator's rate: when it is close to what arrives, the generator, not the switch, is \
         the limit. \"at h2 eth0\" counts frames the switch delivered into h2's veth; \
         \"received\" counts what the receiving program read (the difference was dropped at h2's \
         socket, typically because the receiver got too little CPU).\n",
        measure::UDP_PAYLOAD,
        measure::UDP_PAYLOAD,
        measure::UDP_FRAME_ON_VETH,
        measure::UDP_FRAME_ON_VETH + 4
    );
    let _ = writeln!(
        s,
        "| engine | test | median | min–max | ok | retransmits | machine CPU s | switch CPU s | machine s/Gbit | switch s/Gbit |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &e in &engines {
        for t in Test::ALL {
            let (val, unit, dec): (Getter, &str, usize) = if t.is_udp() {
                (|x| x.udp_received_pps.map(|p| p / 1e3), "kpps rx", 0)
            } else {
                (|x| Some(x.gbps), "Gbit/s", 2)
            };
            let st = stat(r, e, t, val);
            let retr = stat(r, e, t, |x| x.retransmits.map(|v| v as f64));
            let mcpu = stat(r, e, t, |x| Some(x.machine_cpu_s));
            let scpu = stat(r, e, t, |x| x.switch_cpu_s);
            let mg = stat(r, e, t, TestSample::machine_s_per_gbit);
            let sg = stat(r, e, t, TestSample::switch_s_per_gbit);
            let _ = writeln!(
                s,
                "| {} | {} | {} {unit} | {}–{} | {}/{} | {} | {} | {} | {} | {} |",
                e.name(),
                t.name(),
                fmt_num(st.median, dec),
                fmt_num(st.min, dec),
                fmt_num(st.max, dec),
                st.ok,
                st.n,
                if t.is_udp() {
                    "—".into()
                } else {
                    fmt_num(retr.median, 0)
                },
                fmt_num(mcpu.median, 2),
                fmt_num(scpu.median, 2),
                if t.is_udp() {
                    "—".into()
                } else {
                    fmt_num(mg.median, 3)
                },
                if t.is_udp() {
                    "—".into()
                } else {
                    fmt_num(sg.median, 3)
                },
            );
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| engine | generator | UDP sent kpps | UDP at h2 eth0 kpps | UDP received kpps | generator / receiver thread CPU (share of run) | machine CPU µs/pkt (at h2 eth0) | switch CPU µs/pkt | ping RTT ms (idle, median) | background busy cores (others) | idle switch process cores |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (&e, t) in engines
        .iter()
        .flat_map(|e| [(e, Test::Udp64), (e, Test::Udp64Mmsg)])
    {
        let sent = stat(r, e, t, |x| x.udp_sent_pps.map(|p| p / 1e3));
        let at = stat(r, e, t, |x| Some(x.h2_rx_pps / 1e3));
        let got = stat(r, e, t, |x| x.udp_received_pps.map(|p| p / 1e3));
        let us = stat(r, e, t, TestSample::machine_us_per_pkt);
        let sus = stat(r, e, t, |x| {
            let pkts = x.h2_rx_pps * x.receiver_s;
            x.switch_cpu_s
                .filter(|_| pkts > 0.0)
                .map(|c| c * 1e6 / pkts)
        });
        let gen_cpu = stat(r, e, t, |x| x.generator_cpu_s.map(|c| c / x.receiver_s));
        let rx_cpu = stat(r, e, t, |x| x.receiver_cpu_s.map(|c| c / x.receiver_s));
        let gen = if gen_cpu.valid() {
            format!(
                "{:.0}% / {:.0}%",
                gen_cpu.median * 100.0,
                rx_cpu.median * 100.0
            )
        } else {
            "—".into()
        };
        let mut rtts: Vec<f64> = r
            .runs
            .iter()
            .filter(|x| x.engine == e)
            .flat_map(|x| x.ping_rtt_ms.iter().copied())
            .collect();
        let mut bgs: Vec<f64> = r
            .runs
            .iter()
            .filter(|x| x.engine == e)
            .map(|x| x.background_busy_cores)
            .filter(|x| x.is_finite())
            .collect();
        let mut idle: Vec<f64> = r
            .runs
            .iter()
            .filter(|x| x.engine == e && x.switch_pid.is_some())
            .map(|x| x.idle_switch_cores)
            .filter(|x| x.is_finite())
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {gen} | {} | {} | {} | {} | {} |",
            e.name(),
            if t == Test::Udp64 {
                "iperf3"
            } else {
                "sendmmsg"
            },
            fmt_num(sent.median, 0),
            fmt_num(at.median, 0),
            fmt_num(got.median, 0),
            fmt_num(us.median, 2),
            fmt_num(sus.median, 2),
            fmt_num(median(&mut rtts), 3),
            fmt_num(median(&mut bgs), 2),
            fmt_num(median(&mut idle), 2),
        );
    }
    let _ = writeln!(s);

    // Failures.
    // Failures, grouped by engine and message.
    let mut groups: Vec<((Engine, String), Vec<String>)> = Vec::new();
    let mut add = |e: Engine, msg: String, what: String| match groups
        .iter_mut()
        .find(|(k, _)| k.0 == e && k.1 == msg)
    {
        Some((_, v)) => v.push(what),
        None => groups.push(((e, msg), vec![what])),
    };
    for run in &r.runs {
        if let Some(e) = &run.error {
            add(
                run.engine,
                format!("setup failed: {e}"),
                format!("rep {}", run.rep + 1),
            );
        }
        for x in &run.samples {
            if let Some(e) = &x.error {
                add(
                    run.engine,
                    e.clone(),
                    format!("rep {} {}", run.rep + 1, x.test),
                );
            }
        }
    }
    let mut fails: Vec<String> = groups
        .into_iter()
        .map(|((e, msg), what)| format!("- {} ({}): {msg}", e.name(), what.join(", ")))
        .collect();
    for (e, why) in &r.skipped {
        fails.push(format!("- {}: skipped: {why}", e.name()));
    }
    if !fails.is_empty() {
        let _ = writeln!(s, "Failures:\n\n{}\n", fails.join("\n"));
    }
    let all_failed = |e: Engine| {
        let runs: Vec<&EngineRun> = r.runs.iter().filter(|x| x.engine == e).collect();
        !runs.is_empty()
            && runs
                .iter()
                .all(|x| x.error.is_some() || x.samples.iter().all(|t| t.error.is_some()))
    };
    if o.host_offload == HostOffload::Default && all_failed(Engine::OvsAfxdp) {
        let _ = writeln!(
            s,
            "Why ovs-afxdp fails here: OVS 3.1's afxdp netdev neither completes partial checksums \
             nor supports TSO. With the hosts' checksum offload on, every TCP segment and UDP \
             datagram leaves h1 with only the pseudo-header sum in its checksum field and OVS \
             forwards it unchanged; h2 drops it (tcpdump in h2: `cksum 0x8c56 (incorrect -> ...)` \
             on every SYN). ICMP carries full checksums, so ping works. Measure it with \
             `--host-offload off`.\n"
        );
    }
    if o.host_offload == HostOffload::Default && !o.ovs_tso && all_failed(Engine::Ovs) {
        let _ = writeln!(
            s,
            "Why ovs fails here: without `userspace-tso-enable` OVS's netdev-linux ports read \
             frames without virtio-net headers and forward the hosts' partial checksums \
             unchanged; h2 drops every TCP/UDP packet. Use `--ovs-tso auto` or \
             `--host-offload off`.\n"
        );
    }

    // Configuration.
    let _ = writeln!(s, "## Configuration\n");
    let _ = writeln!(
        s,
        "Lab per engine: namespaces h1 (eth0 {}, {}) and h2 (eth0 {}, {}), each joined by a veth \
         (MTU 1500) to a switch port in a third namespace; addresses and sysctls identical for \
         every engine.",
        H1_ADDRS[0], H1_ADDRS[1], H2_ADDRS[0], H2_ADDRS[1]
    );
    let _ = writeln!(
        s,
        "Host-side offloads: {}.",
        match o.host_offload {
            HostOffload::Default =>
                "kernel defaults (checksum offload, TSO and GSO on: senders hand the switch \
                 64 KiB TCP super-frames with partial checksums)",
            HostOffload::Off =>
                "`ethtool -K eth0 tx off` on both hosts (finished checksums, no TSO: \
                 wire-sized frames)",
        }
    );
    let _ = writeln!(
        s,
        "Rules (nicflow and OVS): {}.\n",
        if o.explicit_rules {
            "`in_port=p1,actions=output:p2`, `in_port=p2,actions=output:p1` (no MAC learning)"
        } else {
            "`priority=0,actions=normal` (MAC learning)"
        }
    );
    for &e in &engines {
        let _ = writeln!(s, "- **{}**: {}", engine_label(e), engine_description(e, r));
    }
    let _ = writeln!(s);
    // Offloads as seen during the runs (first run of each engine).
    let _ = writeln!(
        s,
        "Offloads during the runs (`ethtool -k`, first repetition):\n"
    );
    // The features the runs recorded (older samples may have others).
    let shown: Vec<String> = r
        .runs
        .iter()
        .find(|x| !x.host_offloads.is_empty())
        .map(|x| x.host_offloads.iter().map(|(k, _)| k.clone()).collect())
        .unwrap_or_else(|| {
            measure::SHOWN_FEATURES
                .iter()
                .map(|f| f.to_string())
                .collect()
        });
    let _ = write!(s, "| engine | interface |");
    for f in &shown {
        let _ = write!(s, " {f} |");
    }
    let _ = writeln!(s);
    let _ = write!(s, "|---|---|");
    for _ in &shown {
        let _ = write!(s, "---|");
    }
    let _ = writeln!(s);
    for &e in &engines {
        let Some(run) = r.runs.iter().find(|x| x.engine == e) else {
            continue;
        };
        for (label, feats) in [
            ("h1 eth0".to_string(), &run.host_offloads),
            (
                format!(
                    "switch end {}",
                    run.switch_ifaces.first().cloned().unwrap_or_default()
                ),
                &run.switch_offloads,
            ),
        ] {
            let _ = write!(s, "| {} | {label} |", e.name());
            for f in &shown {
                let v = feats
                    .iter()
                    .find(|(k, _)| k == f)
                    .map(|(_, v)| v.as_str())
                    .unwrap_or("?");
                let _ = write!(s, " {v} |");
            }
            let _ = writeln!(s);
        }
    }
    let _ = writeln!(s);

    // Switch counters: what the ports did (offloads kept, segmented, drops).
    let _ = writeln!(s, "## Switch counters after repetition 1\n");
    for &e in &engines {
        let Some(run) = r.runs.iter().find(|x| x.engine == e && x.error.is_none()) else {
            continue;
        };
        let text = if e.is_nicflow() {
            run.diagnostics["text"].as_str().unwrap_or("").to_string()
        } else if e.is_ovs() {
            let pmd: Vec<&str> = run.diagnostics["pmd_stats"]
                .as_str()
                .unwrap_or("")
                .lines()
                .filter(|l| l.contains("thread") || l.contains("packets received"))
                .collect();
            format!(
                "{}{}\n",
                run.diagnostics["dump_ports"].as_str().unwrap_or(""),
                pmd.join("\n")
            )
        } else {
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let _ = writeln!(s, "{} (all four tests):\n\n```\n{}```\n", e.name(), text);
    }

    // Commands.
    let _ = writeln!(s, "## Commands\n");
    let _ = writeln!(s, "```sh");
    let _ = writeln!(s, "{}", command_line(o));
    let _ = writeln!(
        s,
        "# per engine and repetition, with h1/h2 the lab's host namespaces:"
    );
    let _ = writeln!(s, "ip netns exec <h2> iperf3 -s -1 -J -p {IPERF_PORT}");
    for t in Test::ALL.into_iter().filter(|t| *t != Test::Udp64Mmsg) {
        let _ = writeln!(
            s,
            "ip netns exec <h1> iperf3 -c {H2_IP} -p {IPERF_PORT} -t {} -J --connect-timeout 3000 {}",
            o.seconds,
            t.iperf_args().join(" ")
        );
    }
    let _ = writeln!(
        s,
        "# udp64-mmsg: in-process sendmmsg (64 x {}-byte datagrams per call) from h1 to {H2_IP}:{IPERF_PORT} for {} s, recvmmsg in h2",
        measure::UDP_PAYLOAD,
        o.seconds
    );
    let _ = writeln!(s, "# CPU: /proc/stat (user+nice+system+irq+softirq) and /proc/<switch pid>/stat (utime+stime) before and after each client run");
    let _ = writeln!(s, "```\n");
    if let Some(run) = r
        .runs
        .iter()
        .find(|x| x.engine.is_ovs() && !x.commands.is_empty())
    {
        let _ = writeln!(s, "OVS setup ({}, first repetition):\n", run.engine.name());
        let _ = writeln!(s, "```sh");
        // The readiness polls (`get Interface ...`) are left out.
        for c in run
            .commands
            .iter()
            .filter(|c| !c.contains(" get Interface "))
        {
            let _ = writeln!(s, "{c}");
        }
        let _ = writeln!(s, "```\n");
    }
    if let Some(run) = r.runs.iter().find(|x| x.engine == Engine::LinuxBridge) {
        let _ = writeln!(s, "Linux bridge setup:\n\n```sh");
        for c in &run.commands {
            let _ = writeln!(s, "{c}");
        }
        let _ = writeln!(s, "```\n");
    }
    s
}

fn engine_label(e: Engine) -> String {
    match e {
        Engine::NicflowTc => "nicflow (defaults: tc offload)".into(),
        Engine::NicflowAfpacket => "nicflow (afpacket)".into(),
        Engine::NicflowAfxdp => "nicflow (afxdp)".into(),
        Engine::NicflowXdp => "nicflow (xdp offload)".into(),
        Engine::Ovs => "ovs (userspace, netdev-linux)".into(),
        Engine::OvsAfxdp => "ovs-afxdp (userspace, afxdp)".into(),
        Engine::LinuxBridge => "linux-bridge".into(),
        Engine::XdpRedirect => "xdp-redirect (minimal XDP program)".into(),
    }
}

fn engine_description(e: Engine, r: &Results) -> String {
    let o = &r.options;
    let ver = r
        .ovs_version
        .clone()
        .unwrap_or_else(|| "Open vSwitch".into());
    match e {
        Engine::NicflowTc => "`nicflow daemon` with every default: ports of type `auto` \
             (TC ports: the switch-side veths keep their offloads, no socket on them) and \
             `offload = \"auto\"`: the bridge's TC program (`bpf/tc_dp.c`) forwards \
             established flows at TC ingress with `bpf_redirect_peer` into the other host's \
             namespace, super-frames and partial checksums untouched; misses reach the \
             daemon through each port's upcall veth."
            .into(),
        Engine::NicflowAfpacket => "`nicflow daemon` started by the lab in namespace sw, \
             afpacket ports with the port's default options (as of this writing: TPACKET_V3 \
             receive ring with a 1 ms block timeout, `sendmmsg` with qdisc bypass, virtio-net \
             headers (`vnet_hdr=true`) so TSO super-frames and partial checksums pass through \
             untouched; switch-side offloads as the port sets them, see the table below), one thread \
             that goes from ring to ring while they hold frames and sleeps in poll() as soon as \
             a round finds none. Switch process CPU = the daemon's \
             utime+stime, which includes the softirq work (h2's receive path) that its \
             transmissions trigger on its own CPU; see the port counters below for what the \
             port did with offloads."
            .into(),
        Engine::NicflowAfxdp => "`nicflow daemon` as above with afxdp ports (default options: \
             XDP attached natively to the switch-side veth ends when possible, copy-mode \
             AF_XDP; native XDP on a veth clears TSO/GSO on its peer, so the hosts send \
             MTU-sized frames; partial checksums completed in software), `offload = \"none\"`: \
             every frame through the userspace datapath."
            .into(),
        Engine::NicflowXdp => "`nicflow daemon` with afxdp ports and `offload = \"xdp\"`: \
             the bridge's XDP program forwards established flows in the kernel (devmap \
             redirect), misses go to the AF_XDP sockets and the userspace slow path. TCP and \
             UDP flows are offloaded only when the ports are told the hosts' checksums are \
             complete (`csum_complete`, set when host offloads are off); otherwise they stay \
             in userspace (`not_offloaded:csum:partial-possible`). The lab turns GRO on at the \
             host ends so XDP redirects into them are delivered."
            .into(),
        Engine::XdpRedirect => "no switch process: a minimal XDP program \
             (`bpf/xdp_redirect_min.c`) on the switch-side ends redirects every frame to the \
             paired port, no parsing or lookup."
            .into(),
        Engine::LinuxBridge => {
            "kernel bridge `br0` in namespace sw, defaults (learning, STP off), \
             switch-side offloads at kernel defaults; no switch process (its work is softirq \
             time on whichever CPU sends)."
                .into()
        }
        Engine::Ovs => format!(
            "{ver}, private instance (`ovsdb-server` + `ovs-vswitchd` in namespace sw, files in a \
             temporary directory), bridge `datapath_type=netdev`, ports of the default type \
             (netdev-linux), `other_config:userspace-tso-enable={}`, switch-side offloads at \
             kernel defaults, no PMD threads (non-DPDK ports are polled by the main thread). \
             Switch process CPU = ovs-vswitchd utime+stime (all threads).",
            o.ovs_tso
        ),
        Engine::OvsAfxdp => format!(
            "{ver}, private instance as above, ports `type=afxdp` (XDP program loaded by OVS, \
             mode chosen by OVS: best-effort); no checksum or TSO support in OVS's afxdp \
             netdev, so it needs finished checksums from the hosts."
        ),
    }
}

fn command_line(o: &Options) -> String {
    let engines: Vec<&str> = o.engines.iter().map(|e| e.name()).collect();
    let mut c = format!(
        "nicflow bench forward --engines {} --reps {} --seconds {} --nicflow-port-type {} --rules {} --host-offload {} --ovs-tso {}",
        engines.join(","),
        o.reps,
        o.seconds,
        o.nicflow_port_type.as_str(),
        if o.explicit_rules { "explicit" } else { "normal" },
        match o.host_offload {
            HostOffload::Default => "default",
            HostOffload::Off => "off",
        },
        if o.ovs_tso { "on" } else { "off" }
    );
    if o.quick {
        c.push_str(" --quick");
    }
    c
}

/// `nicflow bench forward`: run, print, write `report.md` and
/// `samples.json` to `--out`.
pub fn cli(args: &Args) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let results = if let Some(path) = &args.render {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str::<Results>(&text)
            .with_context(|| format!("{}: not a bench forward samples.json", path.display()))?
    } else {
        let opts = Options::from_args(args)?;
        run(&opts, &mut |m| {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "  {m}");
        })?
    };
    let text = report(&results);
    {
        use std::io::Write;
        let _ = std::io::stdout().write_all(text.as_bytes());
    }
    if let Some(dir) = &args.out {
        write_out(dir, &results, &text)?;
        eprintln!(
            "  wrote {} and {}",
            dir.join("report.md").display(),
            dir.join("samples.json").display()
        );
    }
    if results.runs.iter().all(|r| r.error.is_some()) {
        anyhow::bail!("no engine could be measured");
    }
    Ok(())
}

pub fn write_out(dir: &Path, results: &Results, text: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let p = dir.join("report.md");
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    let p = dir.join("samples.json");
    std::fs::write(&p, serde_json::to_string_pretty(results)?)
        .with_context(|| format!("writing {}", p.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            engines: vec![Engine::NicflowAfpacket, Engine::LinuxBridge, Engine::Ovs],
            reps: 1,
            seconds: 1,
            nicflow_port_type: PortType::Afpacket,
            explicit_rules: true,
            host_offload: HostOffload::Default,
            ovs_tso: true,
            install_ovs: false,
            nicflow_bin: PathBuf::from("/bin/true"),
            quick: true,
        }
    }

    #[test]
    fn topologies_parse_and_differ_only_in_the_switch() {
        for e in [
            Engine::NicflowTc,
            Engine::NicflowAfpacket,
            Engine::NicflowAfxdp,
            Engine::NicflowXdp,
            Engine::LinuxBridge,
            Engine::Ovs,
            Engine::OvsAfxdp,
        ] {
            let text = topology_text(e, "fwd1nf", &opts());
            let t = Topology::parse(&text).unwrap_or_else(|err| panic!("{e:?}: {err}\n{text}"));
            assert_eq!(t.hosts.len(), if e.is_nicflow() { 2 } else { 3 });
            assert_eq!(t.links.len(), 2);
            assert!(t.links.iter().all(|l| l.offload));
        }
    }

    #[test]
    fn engine_names_round_trip() {
        for e in [
            Engine::NicflowTc,
            Engine::NicflowAfpacket,
            Engine::NicflowAfxdp,
            Engine::NicflowXdp,
            Engine::LinuxBridge,
            Engine::Ovs,
            Engine::OvsAfxdp,
        ] {
            assert_eq!(Engine::parse(e.name()), Some(e));
        }
    }

    #[test]
    fn report_handles_failures_and_ratios() {
        let mut s = TestSample {
            test: "tcp1".into(),
            gbps: 2.0,
            bytes_received: 1_250_000_000,
            machine_cpu_s: 4.0,
            switch_cpu_s: Some(2.0),
            ..Default::default()
        };
        let mk = |engine, s: TestSample| EngineRun {
            engine,
            rep: 0,
            lab: "x".into(),
            error: None,
            switch_pid: None,
            switch_ifaces: vec!["p1".into()],
            host_offloads: vec![],
            switch_offloads: vec![],
            background_busy_cores: 0.1,
            idle_switch_cores: 0.0,
            ping_rtt_ms: vec![0.1],
            samples: vec![s],
            prog_cost: vec![],
            diagnostics: serde_json::Value::Null,
            commands: vec![],
        };
        let a = mk(Engine::NicflowAfpacket, s.clone());
        s.gbps = 1.0;
        let b = mk(Engine::Ovs, s.clone());
        s.error = Some("boom".into());
        let c = mk(Engine::LinuxBridge, s);
        let r = Results {
            machine: "m".into(),
            options: opts(),
            ovs_version: None,
            ovs_install: None,
            skipped: vec![],
            loadavg_start: String::new(),
            loadavg_end: String::new(),
            started_unix: 0,
            runs: vec![a, b, c],
            test_run_costs: vec![("tc_dp (hit)".into(), 30.0)],
        };
        let text = report(&r);
        assert!(text.contains("**2.00x**"), "{text}");
        assert!(text.contains("fail"), "{text}");
        assert!(text.contains("boom"), "{text}");
        assert_eq!(
            stat(&r, Engine::NicflowAfpacket, Test::Tcp1, |x| Some(x.gbps)).median,
            2.0
        );
    }
}
