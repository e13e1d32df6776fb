//! `nicflow bench overlay`: a container overlay across two hosts (issue 6;
//! document 001, figure 4): 1 to 20 client/server container pairs, clients
//! on host H1, servers on host H2, one VXLAN L2 segment (VNI 100) over one
//! veth underlay.
//!
//! ```text
//!  c1 (eth0 198.18.60.1) ── vc1 ┐                     ┌ vs1 ── (eth0 198.18.60.101) s1
//!  ...                          │ H1  u1 ═══════ u2 H2 │ ...
//!  cN (eth0 198.18.60.N) ── vcN ┘ 198.18.50.1   .50.2 └ vsN ── (eth0 198.18.60.100+N) sN
//! ```
//!
//! Engines, the same topology for each:
//!
//! * `kernel-vxlan`: on each host a Linux bridge with a kernel `vxlan`
//!   device (id 100, local/remote the underlay addresses, dstport 4789, dev
//!   the underlay) and the container veths: the Docker overlay stack. The
//!   underlay ends carry the kernel addresses 198.18.50.1/24, .2/24.
//! * `nicflow`: on each host a `nicflow daemon` (in the host's namespace)
//!   with bridge br0 (`offload = "none"`, `priority=0,actions=normal`), the
//!   host-side container veth ends as AF_XDP ports and a VXLAN tunnel port
//!   `vx0` on the underlay (AF_XDP); the underlay has no kernel address:
//!   nicflow owns `local_ip` on it and answers ARP for it.
//! * `nicflow-tc`: nicflow with its defaults (`offload = "auto"`, ports
//!   and the tunnel's underlay of type `auto`, every interface at its
//!   default offloads): the TC engine encapsulates and decapsulates,
//!   TCP super-frames and partial checksums included, and established
//!   flows never reach userspace.
//! * `nicflow-xdp`: the same with `offload = "xdp"`: the XDP engine
//!   encapsulates and decapsulates, so established container flows never
//!   reach userspace. XDP cannot finish a `CHECKSUM_PARTIAL` sum, so here
//!   the containers send finished checksums (`ethtool -K eth0 tx off`, which
//!   also means no TSO) and the ports and the tunnel say so
//!   (`csum_complete`); the report counts the datapath flows per engine
//!   (`dump-dp-flows`).
//! * `nicflow-bf2`, `nicflow-cx7` (any `nicflow-profile:NAME`):
//!   `nicflow-tc` with `offload = "profile:NAME"`: the TC engine holds only
//!   what that NIC model would ([`super::hwprofile`]). Every TC-based
//!   engine's runs record the offloaded share and the flows a profile
//!   refused.
//!
//! Per repetition, pair count N and engine: a fresh lab, one `iperf3 -s`
//! per server, then the phases of `bench containers`
//! ([`super::containers`]): load calibration with the lab idle, traffic
//! (one iperf3 TCP stream per pair, all at once), traffic beside the
//! `stress -c`-style [`co::Load`], calibration again ([`super::colocated`]). Container MTU 1450 (the
//! overlay's 50 bytes of headers fit in the underlay's 1500).
//!
//! `--streams LIST` sweeps the other axis (the overlay counterpart of
//! `bench streams`, document 000 figures 5.3-5.6; with `--tunnel geneve`
//! its Geneve variant, figures 5.9-5.12): one container pair, one iperf3
//! client with `-P N` parallel TCP streams from c1 to s1; the receiver's
//! sum over the streams and the senders' summed retransmits
//! ([`Axis::Streams`]).
//!
//! Names: namespaces `nfbo<pid>x<seq><tag>-h1`, `-h2`, `-c1`.., `-s1`..;
//! the daemons' sockets, configs and logs in `$TMPDIR/nfbo<pid>x<seq><tag>`.
//! Dropping the lab (also on error and Ctrl-C, which unwinds through
//! [`interrupted`]) stops the daemons, kills every process left in the
//! namespaces and deletes them; `up` first removes labs of dead runs.

use super::colocated::{self as co, FigureSpec, Get, PhaseSetup};
use super::cpu::{self, PerfSupport};
use super::forward::interrupted;
use super::hwprofile::{self, OffloadSample, Profile, ProfileEngine};
use super::lab::{self, wait_ready, Lab, ProcId};
use super::report::{self, Figure};
use super::testbed;
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::sys;
use nicflow::os::{self, netlink::Rtnl, OsError};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Namespace / state directory prefix of this experiment.
pub const PREFIX: &str = "nfbo";
/// The overlay's VNI.
pub const VNI: u32 = 100;
/// Container MTU: 1500 underlay minus 50 bytes of VXLAN encapsulation.
pub const CONTAINER_MTU: u32 = 1450;
/// Most pairs (clients .1-.99, servers .101-.199 in one /24).
pub const MAX_PAIRS: usize = 99;
/// Most parallel streams of one iperf3 client (its own limit).
pub const MAX_STREAMS: usize = 128;
const DEFAULT_PAIRS: &str = "1,2,5,10,20";
const PORT: u16 = 5201;
const BRIDGE: &str = "br0";
const TUNNEL: &str = "vx0";

/// An overlay engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OvEngine {
    /// Linux bridge + kernel vxlan device on each host (Docker overlay).
    KernelVxlan,
    /// nicflow daemons, AF_XDP ports, userspace datapath.
    Nicflow,
    /// nicflow daemons with the XDP offload engine.
    NicflowXdp,
    /// nicflow daemons with their defaults: the TC offload engine.
    NicflowTc,
    /// The kernel stack with the containers' transmit offloads off (`tx
    /// off`: no TSO, finished checksums), the condition `nicflow-xdp` runs
    /// under: what the kernel overlay does without super-frames.
    KernelVxlanTxOff,
    /// `nicflow-tc` with `offload = "profile:NAME"`.
    NicflowProfile(Profile),
}

impl OvEngine {
    pub fn name(self) -> &'static str {
        match self {
            OvEngine::KernelVxlan => "kernel-vxlan",
            OvEngine::Nicflow => "nicflow",
            OvEngine::NicflowXdp => "nicflow-xdp",
            OvEngine::NicflowTc => "nicflow-tc",
            OvEngine::KernelVxlanTxOff => "kernel-vxlan-tx-off",
            OvEngine::NicflowProfile(p) => p.engine_name(),
        }
    }

    pub fn parse(s: &str) -> Option<OvEngine> {
        if let Some(p) = Profile::parse_engine(s) {
            return Some(OvEngine::NicflowProfile(p));
        }
        Some(match s.trim() {
            "kernel-vxlan" | "kernel" | "vxlan" => OvEngine::KernelVxlan,
            "nicflow" | "nicflow-afxdp" => OvEngine::Nicflow,
            "nicflow-xdp" | "xdp" => OvEngine::NicflowXdp,
            "nicflow-tc" | "tc" => OvEngine::NicflowTc,
            "kernel-vxlan-tx-off" => OvEngine::KernelVxlanTxOff,
            _ => return None,
        })
    }

    fn tag(self) -> &'static str {
        match self {
            OvEngine::KernelVxlan => "k",
            OvEngine::Nicflow => "n",
            OvEngine::NicflowXdp => "x",
            OvEngine::NicflowTc => "c",
            OvEngine::KernelVxlanTxOff => "t",
            OvEngine::NicflowProfile(p) => p.tag(),
        }
    }

    pub fn is_nicflow(self) -> bool {
        matches!(
            self,
            OvEngine::Nicflow
                | OvEngine::NicflowXdp
                | OvEngine::NicflowTc
                | OvEngine::NicflowProfile(_)
        )
    }

    /// nicflow with TC ports (the defaults, or a profile).
    fn tc(self) -> bool {
        matches!(self, OvEngine::NicflowTc | OvEngine::NicflowProfile(_))
    }

    fn profile(self) -> Option<Profile> {
        match self {
            OvEngine::NicflowProfile(p) => Some(p),
            _ => None,
        }
    }

    /// The bridge's `offload` setting.
    fn offload(self) -> &'static str {
        match self {
            OvEngine::NicflowXdp => "xdp",
            OvEngine::NicflowTc => "auto",
            OvEngine::NicflowProfile(p) => p.offload(),
            _ => "none",
        }
    }

    /// Containers send finished checksums and no TSO super-frames.
    fn containers_tx_off(self) -> bool {
        matches!(self, OvEngine::NicflowXdp | OvEngine::KernelVxlanTxOff)
    }
}

fn parse_engines(list: &str) -> anyhow::Result<Vec<OvEngine>> {
    super::testbed::parse_engine_list(
        list,
        "kernel-vxlan, nicflow-tc, nicflow, nicflow-xdp, kernel-vxlan-tx-off, nicflow-bf2, nicflow-cx7, nicflow-profile:NAME",
        OvEngine::parse,
    )
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated: kernel-vxlan, nicflow-tc (the defaults:
    /// TC engine), nicflow (AF_XDP ports, userspace), nicflow-xdp,
    /// kernel-vxlan-tx-off, nicflow-bf2, nicflow-cx7 (nicflow-profile:NAME:
    /// nicflow-tc with offload=profile:NAME).
    #[arg(long, default_value = "kernel-vxlan,nicflow-tc,nicflow,nicflow-xdp")]
    pub engines: String,
    /// Repetitions (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds per traffic phase.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Container pair counts [default: 1,2,5,10,20].
    #[arg(long)]
    pub pairs: Option<String>,
    /// Parallel TCP stream counts of one container pair (iperf3 -P): the
    /// x axis becomes streams instead of pairs (--pairs absent or 1).
    #[arg(long, value_name = "LIST")]
    pub streams: Option<String>,
    /// Threads of the CPU load (default: one per core).
    #[arg(long)]
    pub load_threads: Option<usize>,
    /// Tunnel of the nicflow engines: vxlan or geneve (the Geneve variant;
    /// the kernel here has no Geneve device, so kernel-vxlan is refused).
    #[arg(long, default_value = "vxlan")]
    pub tunnel: String,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// What the x axis of a run counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// Container pairs, one TCP stream each, all at once (doc 001 fig. 4).
    #[default]
    Pairs,
    /// Parallel TCP streams (`iperf3 -P`) of one container pair.
    Streams,
}

impl Axis {
    /// The figures' x label (and the CSV files' first column).
    pub fn label(self) -> &'static str {
        match self {
            Axis::Pairs => "container pairs across the two hosts",
            Axis::Streams => "parallel TCP streams of one container pair (iperf3 -P)",
        }
    }

    /// The details table's column and the progress lines' word.
    pub fn word(self) -> &'static str {
        match self {
            Axis::Pairs => "pairs",
            Axis::Streams => "streams",
        }
    }

    /// Figure title prefix.
    fn title(self) -> &'static str {
        match self {
            Axis::Pairs => "Overlay",
            Axis::Streams => "Overlay, one pair, parallel streams",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    pub engines: Vec<OvEngine>,
    pub reps: usize,
    pub seconds: u64,
    /// Pair counts (`[1]` on the streams axis).
    pub pairs: Vec<usize>,
    pub load_threads: usize,
    pub quick: bool,
    /// `vxlan` or `geneve`.
    #[serde(default = "vxlan")]
    pub tunnel: String,
    /// Which count is swept (runs before `--streams`: pairs).
    #[serde(default)]
    pub axis: Axis,
    /// Parallel streams per pair (`[1]` on the pairs axis).
    #[serde(default = "one")]
    pub streams: Vec<usize>,
}

impl Options {
    /// The swept counts: the x axis of every figure.
    pub fn xs(&self) -> &[usize] {
        match self.axis {
            Axis::Pairs => &self.pairs,
            Axis::Streams => &self.streams,
        }
    }
}

fn vxlan() -> String {
    "vxlan".into()
}

fn one() -> Vec<usize> {
    vec![1]
}

fn one_stream() -> usize {
    1
}

/// `nicflow dump-dp-flows br0` on one host after the traffic.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DpFlows {
    pub host: String,
    pub xdp: usize,
    #[serde(default)]
    pub tc: usize,
    pub userspace: usize,
    /// Distinct `not_offloaded` reasons.
    pub reasons: Vec<String>,
    /// The first lines of the dump, as printed.
    #[serde(default)]
    pub lines: Vec<String>,
}

/// What an overlay run records besides the phases.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Extra {
    /// nicflow engines: datapath flows per engine on each host.
    #[serde(default)]
    pub dp_flows: Vec<DpFlows>,
    /// Parallel TCP streams of each pair's iperf3 client (`-P`).
    #[serde(default = "one_stream")]
    pub streams: usize,
    /// TC-based nicflow engines: frames per engine during the traffic
    /// phase without load and the datapath flows after it, both hosts.
    #[serde(default)]
    pub offload: Option<OffloadSample>,
}

impl Default for Extra {
    fn default() -> Extra {
        Extra {
            dp_flows: Vec::new(),
            streams: 1,
            offload: None,
        }
    }
}

/// One engine, one pair count (and streams per pair), one repetition.
pub type Run = co::Run<OvEngine, Extra>;

impl co::Named for OvEngine {
    fn name(self) -> &'static str {
        OvEngine::name(self)
    }
}

pub type Results = co::Results<Options, Run>;

fn options(a: &Args) -> anyhow::Result<Options> {
    let (reps, seconds) = if a.run.quick {
        (1, 2)
    } else {
        (a.reps.max(1), a.seconds.max(1))
    };
    let (axis, pairs, streams) = match a.streams.as_deref() {
        None => {
            let p = match (a.run.quick, a.pairs.as_deref()) {
                (true, _) => "1,2",
                (false, p) => p.unwrap_or(DEFAULT_PAIRS),
            };
            (Axis::Pairs, testbed::parse_counts(p)?, one())
        }
        Some(s) => {
            if let Some(p) = a.pairs.as_deref() {
                if testbed::parse_counts(p)? != [1] {
                    bail!(
                        "--streams sweeps the parallel TCP streams of one container pair: \
                         leave out --pairs {p} (or give --pairs 1)"
                    );
                }
            }
            let streams = testbed::parse_counts(s).context("--streams")?;
            if let Some(n) = streams.iter().find(|&&n| n > MAX_STREAMS) {
                bail!("--streams {n}: iperf3 runs at most {MAX_STREAMS} parallel streams");
            }
            (Axis::Streams, one(), streams)
        }
    };
    if let Some(p) = pairs.iter().find(|&&p| p > MAX_PAIRS) {
        bail!("--pairs {p}: at most {MAX_PAIRS}");
    }
    let tunnel = match a.tunnel.as_str() {
        "vxlan" | "geneve" => a.tunnel.clone(),
        t => bail!("--tunnel {t}: vxlan or geneve"),
    };
    let engines = parse_engines(&a.engines)?;
    if tunnel == "geneve" && engines.iter().any(|e| !e.is_nicflow()) {
        bail!(
            "--tunnel geneve: the kernel here has no Geneve device; run the nicflow engines \
             (--engines nicflow,nicflow-xdp) and compare with a vxlan run"
        );
    }
    Ok(Options {
        tunnel,
        engines,
        reps,
        seconds,
        pairs,
        load_threads: co::load_threads(a.load_threads),
        quick: a.run.quick,
        axis,
        streams,
    })
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    let measure = || run(&options(args)?);
    report::cli(&args.run, "overlay", measure, figures, markdown)
}

fn progress(s: &str) {
    eprintln!("[overlay] {s}");
}

/// A line of the shared sweep code (`N pair(s)`, `N pairs rep`, `N pairs:`)
/// in the words of the streams axis.
fn streams_words(s: &str) -> String {
    s.replacen(" pair(s),", " stream(s),", 1)
        .replacen(" pairs rep ", " streams rep ", 1)
        .replacen(" pairs:", " streams:", 1)
        .replacen(" pairs + load:", " streams + load:", 1)
}

fn progress_streams(s: &str) {
    progress(&streams_words(s));
}

// ---------------------------------------------------------------------------
// Address plan and configuration text (pure)
// ---------------------------------------------------------------------------

/// Underlay address of host 1 or 2: 198.18.50.h.
pub fn underlay_ip(host: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 50, host as u8)
}

/// Client i (1-based) 198.18.60.i, server i 198.18.60.(100+i).
pub fn container_ip(server: bool, i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 60, (i + if server { 100 } else { 0 }) as u8)
}

/// The underlay interface of host 1 or 2.
pub fn underlay_iface(host: usize) -> String {
    format!("u{host}")
}

/// The host-side veth end of container i on host 1 (client) or 2 (server).
pub fn host_end(host: usize, i: usize) -> String {
    if host == 1 {
        format!("vc{i}")
    } else {
        format!("vs{i}")
    }
}

/// The nicflow daemon's config on host 1 or 2 for a nicflow `engine`.
pub fn nicflow_config(host: usize, pairs: usize, engine: OvEngine, tunnel: &str) -> String {
    let peer = 3 - host;
    let xdp = engine == OvEngine::NicflowXdp;
    let tc = engine.tc();
    let mut t = String::new();
    let _ = writeln!(
        t,
        "[[bridge]]\nname = \"{BRIDGE}\"\noffload = \"{}\"\nflows = [\"priority=0,actions=normal\"]",
        engine.offload()
    );
    // With XDP offload the containers send finished checksums (`tx off`,
    // see `OverlayLab::build`) and so does the peer nicflow: TCP flows may then
    // run in XDP both ways (the offload manager's `csum:partial-possible`).
    // The TC engine needs no such declaration: what `add-port` gives.
    let csum = if xdp {
        "csum_complete = \"true\", "
    } else {
        ""
    };
    for i in 1..=pairs {
        let p = host_end(host, i);
        let _ = writeln!(
            t,
            "[[bridge.port]]\nname = \"{p}\"\niface = \"{p}\"\ntype = \"{}\"",
            if tc { "auto" } else { "afxdp" }
        );
        if xdp {
            let _ = writeln!(t, "options = {{ csum_complete = \"true\" }}");
        }
    }
    let underlay_type = if tc {
        String::new()
    } else {
        ", underlay_type = \"afxdp\"".to_string()
    };
    let _ = writeln!(
        t,
        "[[bridge.port]]\nname = \"{TUNNEL}\"\niface = \"{TUNNEL}\"\ntype = \"{tunnel}\"\n\
         options = {{ underlay = \"{}\", local_ip = \"{}\", remote_ip = \"{}\", {csum}key = \"{VNI}\"{underlay_type} }}",
        underlay_iface(host),
        underlay_ip(host),
        underlay_ip(peer)
    );
    t
}

/// The steps that build the kernel overlay on host 1 or 2, in its
/// namespace.
pub fn kernel_vxlan_steps(host: usize, pairs: usize) -> Vec<NetStep> {
    let peer = 3 - host;
    let u = underlay_iface(host);
    let mut c = vec![
        NetStep::Addr {
            dev: u.clone(),
            ip: underlay_ip(host).into(),
            prefix: 24,
        },
        NetStep::Vxlan(os::link::Vxlan {
            name: TUNNEL.into(),
            vni: VNI,
            local: underlay_ip(host).into(),
            remote: underlay_ip(peer).into(),
            port: 4789,
            dev: Some(u),
        }),
        NetStep::Bridge(BRIDGE.into()),
        NetStep::master(TUNNEL, BRIDGE),
    ];
    for i in 1..=pairs {
        c.push(NetStep::master(&host_end(host, i), BRIDGE));
    }
    c.push(NetStep::Up(TUNNEL.into()));
    c.push(NetStep::Up(BRIDGE.into()));
    c
}

/// [`kernel_vxlan_steps`] as the `ip` commands (arguments after `ip -n
/// NS`) that do the same, for the report.
pub fn kernel_vxlan_commands(host: usize, pairs: usize) -> Vec<Vec<String>> {
    kernel_vxlan_steps(host, pairs)
        .iter()
        .map(NetStep::words)
        .collect()
}

// ---------------------------------------------------------------------------
// Network plumbing (netlink, through `nicflow::os`)
// ---------------------------------------------------------------------------

/// One step of a namespace's network configuration, done over netlink
/// ([`NetStep::apply`]); [`NetStep::words`] is the `ip` command (after
/// `ip -n NS`) that does the same, for reports and reproduction recipes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetStep {
    /// `addr add IP/PREFIX dev DEV`
    Addr { dev: String, ip: IpAddr, prefix: u8 },
    /// `link add NAME type vxlan id VNI local L remote R dstport P [dev D]`
    Vxlan(os::link::Vxlan),
    /// `link add NAME type bridge`
    Bridge(String),
    /// `link set DEV master MASTER`
    Master { dev: String, master: String },
    /// `link set DEV up`
    Up(String),
    /// `link set DEV mtu MTU`
    Mtu { dev: String, mtu: u32 },
}

impl NetStep {
    pub fn master(dev: &str, master: &str) -> NetStep {
        NetStep::Master {
            dev: dev.into(),
            master: master.into(),
        }
    }

    /// The equivalent `ip` arguments.
    pub fn words(&self) -> Vec<String> {
        let w = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match self {
            NetStep::Addr { dev, ip, prefix } => {
                w(&["addr", "add", &format!("{ip}/{prefix}"), "dev", dev])
            }
            NetStep::Vxlan(v) => {
                let mut out = w(&[
                    "link",
                    "add",
                    &v.name,
                    "type",
                    "vxlan",
                    "id",
                    &v.vni.to_string(),
                    "local",
                    &v.local.to_string(),
                    "remote",
                    &v.remote.to_string(),
                    "dstport",
                    &v.port.to_string(),
                ]);
                if let Some(d) = &v.dev {
                    out.extend(w(&["dev", d]));
                }
                out
            }
            NetStep::Bridge(n) => w(&["link", "add", n, "type", "bridge"]),
            NetStep::Master { dev, master } => w(&["link", "set", dev, "master", master]),
            NetStep::Up(d) => w(&["link", "set", d, "up"]),
            NetStep::Mtu { dev, mtu } => w(&["link", "set", dev, "mtu", &mtu.to_string()]),
        }
    }

    pub fn apply(&self, rt: &mut Rtnl) -> Result<(), OsError> {
        match self {
            NetStep::Addr { dev, ip, prefix } => os::addr::add(rt, dev, *ip, *prefix, false),
            NetStep::Vxlan(v) => os::link::add_vxlan(rt, v),
            NetStep::Bridge(n) => os::link::add_bridge(rt, n),
            NetStep::Master { dev, master } => os::link::set_master(rt, dev, master),
            NetStep::Up(d) => os::link::set_up(rt, d),
            NetStep::Mtu { dev, mtu } => os::link::set_mtu(rt, dev, *mtu),
        }
    }
}

/// `f` on a netlink socket in namespace `ns`; an error names the
/// namespace.
pub(super) fn rtnl_in<T>(
    ns: &str,
    f: impl FnOnce(&mut Rtnl) -> Result<T, OsError>,
) -> anyhow::Result<T> {
    let mut rt = Rtnl::open(Some(ns)).map_err(|e| anyhow::anyhow!("{ns}: {e}"))?;
    f(&mut rt).map_err(|e| anyhow::anyhow!("{ns}: {e}"))
}

/// Apply `steps` in order in namespace `ns`.
pub(super) fn apply_steps(ns: &str, steps: &[NetStep]) -> anyhow::Result<()> {
    rtnl_in(ns, |rt| steps.iter().try_for_each(|s| s.apply(rt)))
}

// ---------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------

struct Daemon {
    proc: ProcId,
    sock: PathBuf,
    host: usize,
}

/// Two hosts and 2N containers in a [`Lab`]; Drop removes everything.
pub struct OverlayLab {
    lab: Lab,
    engine: OvEngine,
    pairs: usize,
    tunnel: String,
    daemons: Vec<Daemon>,
    pub commands: Vec<String>,
}

pub(super) fn run_in(ns: &str, argv: &[&str]) -> anyhow::Result<String> {
    let o = sys::run(&mut sys::in_ns(Some(ns), argv)).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Remove labs of this experiment left by dead processes.
pub fn reap_stale() -> Vec<String> {
    lab::reap_stale(PREFIX, None)
}

impl OverlayLab {
    fn ns(&self, node: &str) -> String {
        self.lab.ns(node)
    }

    pub fn client_ns(&self, i: usize) -> String {
        self.ns(&format!("c{i}"))
    }

    pub fn server_ns(&self, i: usize) -> String {
        self.ns(&format!("s{i}"))
    }

    pub fn name(&self) -> &str {
        self.lab.name()
    }

    /// The nicflow daemons' pids, labelled `switch-h1`, `switch-h2`.
    pub fn daemon_pids(&self) -> Vec<(String, u32)> {
        self.daemons
            .iter()
            .map(|d| (format!("switch-h{}", d.host), self.lab.pid(d.proc)))
            .collect()
    }

    pub fn up(engine: OvEngine, pairs: usize, tunnel: &str) -> anyhow::Result<OverlayLab> {
        if pairs == 0 || pairs > MAX_PAIRS {
            bail!("pairs {pairs}: 1..={MAX_PAIRS}");
        }
        let lab = Lab::create("the overlay lab", PREFIX, engine.tag(), None)?;
        let mut ov = OverlayLab {
            lab,
            engine,
            pairs,
            tunnel: tunnel.to_string(),
            daemons: Vec::new(),
            commands: Vec::new(),
        };
        // From here on, Drop cleans up.
        ov.build()?;
        Ok(ov)
    }

    fn build(&mut self) -> anyhow::Result<()> {
        let mut nodes: Vec<String> = vec!["h1".into(), "h2".into()];
        for i in 1..=self.pairs {
            nodes.push(format!("c{i}"));
            nodes.push(format!("s{i}"));
        }
        for n in &nodes {
            // (Created with its loopback up.)
            self.lab
                .add_ns(n, &[("net.ipv6.conf.all.disable_ipv6", "1")])?;
            if interrupted() {
                bail!("interrupted");
            }
        }
        self.lab.veth("u1", "h1", "u2", "h2")?;
        self.commands.push(format!(
            "underlay: veth u1 ({}) -- u2 ({})",
            self.ns("h1"),
            self.ns("h2")
        ));
        let xdp = self.engine == OvEngine::NicflowXdp;
        for i in 1..=self.pairs {
            for (host, node, server) in [(1, format!("c{i}"), false), (2, format!("s{i}"), true)] {
                self.lab
                    .veth("eth0", &node, &host_end(host, i), &format!("h{host}"))?;
                let ns = self.ns(&node);
                apply_steps(
                    &ns,
                    &[
                        NetStep::Mtu {
                            dev: "eth0".into(),
                            mtu: CONTAINER_MTU,
                        },
                        NetStep::Addr {
                            dev: "eth0".into(),
                            ip: container_ip(server, i).into(),
                            prefix: 24,
                        },
                    ],
                )?;
                if xdp {
                    // NAPI on the container end so frames the XDP program
                    // redirects into it are delivered (as the testbed
                    // does): `ethtool -K eth0 gro on`.
                    let _ = os::ethtool::set(Some(&ns), "eth0", os::ethtool::is_gro, true);
                }
                if self.engine.containers_tx_off() {
                    // Finished checksums out of the container (no
                    // CHECKSUM_PARTIAL, which XDP cannot complete), so no
                    // TSO either: `ethtool -K eth0 tx off`.
                    os::ethtool::set(Some(&ns), "eth0", os::ethtool::is_tx_checksum, false)
                        .map_err(|e| anyhow::anyhow!("{ns}: {e}"))?;
                }
            }
        }
        self.commands.push(format!(
            "containers: ci eth0 198.18.60.i/24, si eth0 198.18.60.(100+i)/24, MTU {CONTAINER_MTU}, veth to vci (H1) / vsi (H2)"
        ));
        match self.engine {
            OvEngine::KernelVxlan | OvEngine::KernelVxlanTxOff => {
                for host in [1, 2] {
                    let ns = self.ns(&format!("h{host}"));
                    for step in kernel_vxlan_steps(host, self.pairs) {
                        rtnl_in(&ns, |rt| step.apply(rt))?;
                        self.commands
                            .push(format!("ip -n <H{host}> {}", step.words().join(" ")));
                    }
                }
            }
            OvEngine::Nicflow
            | OvEngine::NicflowXdp
            | OvEngine::NicflowTc
            | OvEngine::NicflowProfile(_) => {
                let bin = super::nicflow_bin()?;
                for host in [1, 2] {
                    self.start_daemon(&bin, host)?;
                }
                for host in [1, 2] {
                    self.wait_daemon(host)?;
                }
                self.commands.push(format!(
                    "ip netns exec <Hh> nicflow --socket hh.sock daemon --config hh.toml   # bridge br0 offload={}, {} container ports, {} port vx0 (key {VNI}, {} underlay)",
                    self.engine.offload(),
                    if self.engine.tc() { "auto (TC)" } else { "AF_XDP" },
                    self.tunnel,
                    if self.engine.tc() { "auto (TC)" } else { "AF_XDP" },
                ));
            }
        }
        // The overlay works: every pair pings (the first ping resolves ARP
        // across the tunnel).
        for i in 1..=self.pairs {
            if interrupted() {
                bail!("interrupted");
            }
            let dst = container_ip(true, i).to_string();
            let ns = self.client_ns(i);
            let mut ok = false;
            let mut last = String::new();
            for _ in 0..10 {
                match run_in(&ns, &["ping", "-n", "-q", "-c", "1", "-W", "1", &dst]) {
                    Ok(_) => {
                        ok = true;
                        break;
                    }
                    Err(e) => last = format!("{e:#}"),
                }
            }
            if !ok {
                bail!(
                    "c{i} cannot ping s{i} ({dst}) through {}: {last}\n{}",
                    self.engine.name(),
                    self.logs()
                );
            }
        }
        Ok(())
    }

    fn start_daemon(&mut self, bin: &Path, host: usize) -> anyhow::Result<()> {
        let cfg = self.lab.dir().join(format!("h{host}.toml"));
        std::fs::write(
            &cfg,
            nicflow_config(host, self.pairs, self.engine, &self.tunnel),
        )
        .with_context(|| format!("writing {}", cfg.display()))?;
        let sock = self.lab.dir().join(format!("h{host}.sock"));
        let log = self.lab.dir().join(format!("h{host}.log"));
        let proc = self.lab.spawn_daemon(
            format!("switch-h{host}"),
            bin,
            &format!("h{host}"),
            &cfg,
            &sock,
            &log,
        )?;
        self.daemons.push(Daemon { proc, sock, host });
        Ok(())
    }

    fn wait_daemon(&mut self, host: usize) -> anyhow::Result<()> {
        let d = self
            .daemons
            .iter()
            .find(|d| d.host == host)
            .context("daemon")?;
        let (proc, sock) = (d.proc, d.sock.clone());
        let r = wait_ready(self.lab.child_mut(proc), &sock, Duration::from_secs(15));
        r.map_err(|e| anyhow::anyhow!("nicflow daemon on H{host} {e}:\n{}", self.logs()))
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for d in &self.daemons {
            let _ = writeln!(
                s,
                "--- H{} daemon log (last lines) ---\n{}",
                d.host,
                sys::tail(&self.lab.dir().join(format!("h{}.log", d.host)), 20)
            );
        }
        s
    }

    /// The daemons' control sockets.
    fn sockets(&self) -> Vec<&Path> {
        self.daemons.iter().map(|d| d.sock.as_path()).collect()
    }

    /// `dump-dp-flows br0` on each host, counted by engine.
    pub fn dp_flows(&self) -> Vec<DpFlows> {
        self.daemons
            .iter()
            .map(|d| {
                let mut f = DpFlows {
                    host: format!("H{}", d.host),
                    ..Default::default()
                };
                if let Ok(r) = nicflow::control::daemon::request(
                    &d.sock,
                    &Request::DumpDpFlows {
                        bridge: BRIDGE.into(),
                    },
                ) {
                    f.lines = r.text.lines().take(40).map(str::to_string).collect();
                    for l in r.text.lines() {
                        if l.contains("engine:xdp") {
                            f.xdp += 1;
                        } else if l.contains("engine:tc") {
                            f.tc += 1;
                        } else if l.contains("engine:userspace") {
                            f.userspace += 1;
                        }
                        if let Some(why) = l.split("not_offloaded:").nth(1) {
                            let why = why.split(", actions:").next().unwrap_or("").to_string();
                            if !why.is_empty() && !f.reasons.contains(&why) {
                                f.reasons.push(why);
                            }
                        }
                    }
                }
                f.reasons.sort();
                f
            })
            .collect()
    }

    pub fn down(mut self) -> anyhow::Result<()> {
        // SIGTERM: the daemons detach their XDP programs and exit.
        self.lab.teardown()
    }
}

// ---------------------------------------------------------------------------
// iperf3
// ---------------------------------------------------------------------------

pub(super) struct Server {
    child: Child,
    pub(super) pid: u32,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn start_server(ns: &str) -> anyhow::Result<Server> {
    let p = PORT.to_string();
    let mut child = sys::in_ns(Some(ns), &["iperf3", "-s", "-p", &p])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 -s")?;
    let filter = format!("sport = :{PORT}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if run_in(ns, &["ss", "-Hltn", &filter]).is_ok_and(|o| !o.trim().is_empty()) {
            break;
        }
        if Instant::now() >= deadline || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("iperf3 server in {ns} did not start listening");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Server {
        pid: child.id(),
        child,
    })
}

/// The iperf3 client's arguments; `-P` only for more than one stream.
fn client_argv(dst: Ipv4Addr, seconds: u64, streams: usize) -> Vec<String> {
    let p = if streams > 1 {
        format!(" -P {streams}")
    } else {
        String::new()
    };
    format!("iperf3 -c {dst} -p {PORT} -t {seconds}{p} -J --connect-timeout 3000")
        .split(' ')
        .map(str::to_string)
        .collect()
}

fn spawn_client(
    ns: &str,
    dst: Ipv4Addr,
    (seconds, streams): (u64, usize),
    out: PathBuf,
) -> anyhow::Result<testbed::IperfClient> {
    testbed::IperfClient::spawn(ns, &client_argv(dst, seconds, streams), out)
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

pub fn run(opts: &Options) -> anyhow::Result<Results> {
    co::sweep(
        opts,
        (opts.reps, opts.xs(), &opts.engines),
        match opts.axis {
            Axis::Pairs => progress,
            Axis::Streams => progress_streams,
        },
        |perf, run| body(opts, perf, run),
    )
}

fn body(opts: &Options, perf: &PerfSupport, run: &mut Run) -> anyhow::Result<()> {
    // The sweep puts its count in `pairs`; on the streams axis it is the
    // streams of the one pair, and the run records it so.
    let x = run.pairs;
    if opts.axis == Axis::Streams {
        run.pairs = 1;
        run.extra.streams = x;
    }
    let streams = run.extra.streams;
    let lab = OverlayLab::up(run.engine, run.pairs, &opts.tunnel)?;
    run.lab = lab.name().to_string();
    let servers: Vec<Server> = (1..=run.pairs)
        .map(|i| start_server(&lab.server_ns(i)))
        .collect::<anyhow::Result<_>>()?;
    let dir = lab.lab.dir().join("scratch");
    std::fs::create_dir_all(&dir)?;
    let setup = PhaseSetup {
        perf,
        dir: &dir,
        load_threads: opts.load_threads,
        seconds: opts.seconds,
        servers: servers.iter().map(|s| s.pid).collect(),
        switches: lab.daemon_pids(),
        retransmits: true,
    };
    let name = run.engine.name();
    let profile = run.engine.profile();
    let counts = if run.engine.tc() {
        hwprofile::read_all(&lab.sockets(), BRIDGE).ok()
    } else {
        None
    };
    let offload = &mut run.extra.offload;
    let dp_flows = &mut run.extra.dp_flows;
    co::measure_point(
        &mut run.point,
        opts.load_threads,
        opts.seconds,
        |with_load| {
            co::measure_phase(&setup, with_load, || {
                (1..=lab.pairs)
                    .map(|i| {
                        spawn_client(
                            &lab.client_ns(i),
                            container_ip(true, i),
                            (opts.seconds, streams),
                            dir.join(format!("iperf-{i}.json")),
                        )
                    })
                    .collect()
            })
        },
        |with_load, ph, idle| {
            let line = co::phase_line(name, x, with_load, ph, idle, true);
            match opts.axis {
                Axis::Pairs => progress(&line),
                Axis::Streams => progress_streams(&line),
            }
            if !with_load {
                if let Some(before) = &counts {
                    *offload = hwprofile::sample_all(&lab.sockets(), BRIDGE, profile, before).ok();
                    if let Some(o) = offload.as_ref() {
                        progress(&format!(
                            "offloaded {} of {} frames, {} flows refused by the profile",
                            hwprofile::pct(o.frames.kernel_share()),
                            o.frames.total(),
                            o.dp.refused
                        ));
                    }
                }
                *dp_flows = lab.dp_flows();
                for f in dp_flows.iter() {
                    progress(&format!(
                        "{} dump-dp-flows br0: {} engine:tc, {} engine:xdp, {} engine:userspace ({})",
                        f.host,
                        f.tc,
                        f.xdp,
                        f.userspace,
                        f.reasons.join(", ")
                    ));
                }
            }
        },
    )?;
    drop(servers);
    lab.down()
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

/// The runs with the swept count in `pairs`, where the shared report code
/// reads its x value: on the streams axis each run's streams.
fn by_axis(r: &Results) -> Vec<Run> {
    let mut runs = r.runs.clone();
    if r.options.axis == Axis::Streams {
        for x in &mut runs {
            x.pairs = x.extra.streams;
        }
    }
    runs
}

/// Figure id, title (after the axis prefix), y label, getter.
type Spec = (&'static str, &'static str, &'static str, Get<Run>);

const SPECS: [Spec; 5] = [
    (
        "cpu-left",
        "CPU left to a co-located load (cf. doc 001 fig. 4a)",
        "load work rate vs idle lab (% of available CPU)",
        co::left,
    ),
    (
        "interrupts-per-gbit",
        "interrupts per Gbit (cf. doc 001 fig. 4b)",
        "interrupts per Gbit (/proc/stat intr)",
        co::intr,
    ),
    (
        "throughput",
        "total throughput (cf. doc 001 fig. 4c)",
        "sum of iperf3 TCP throughput (Gbit/s)",
        co::gbps,
    ),
    (
        "ctxt-per-gbit",
        "context switches per Gbit (cf. doc 001 fig. 4d)",
        "context switches per Gbit (/proc/stat ctxt)",
        co::ctxt,
    ),
    (
        "switch-cpu",
        "nicflow daemons' CPU (both hosts)",
        "cores used by the nicflow daemons (utime+stime)",
        co::switch,
    ),
];

/// A figure's title on an axis: the doc 001 references belong to the
/// pairs axis.
fn figure_title(axis: Axis, title: &str) -> String {
    let title = match axis {
        Axis::Pairs => title,
        Axis::Streams => title.split(" (cf. doc 001").next().unwrap_or(title),
    };
    format!("{}: {title}", axis.title())
}

pub fn figures(r: &Results) -> Vec<Figure> {
    let axis = r.options.axis;
    let titles: Vec<String> = SPECS.iter().map(|s| figure_title(axis, s.1)).collect();
    let specs: Vec<FigureSpec<Run>> = SPECS
        .iter()
        .zip(&titles)
        .map(|(s, title)| FigureSpec {
            id: s.0,
            title,
            y_label: s.2,
            get: s.3,
        })
        .collect();
    co::figures(&by_axis(r), r.options.xs(), axis.label(), &specs)
}

/// Datapath flow counts of the first successful repetition of a point
/// (`runs` from [`by_axis`]).
fn dp_cell(runs: &[Run], e: OvEngine, n: usize) -> String {
    if !e.is_nicflow() {
        return "—".into();
    }
    runs.iter()
        .find(|x| {
            x.engine == e && x.pairs == n && x.error.is_none() && !x.extra.dp_flows.is_empty()
        })
        .map(|x| {
            x.extra
                .dp_flows
                .iter()
                .map(|f| {
                    format!(
                        "{}: {} tc / {} xdp / {} userspace{}",
                        f.host,
                        // Samples of runs before `tc` was counted keep the
                        // dump's first lines.
                        f.tc.max(f.lines.iter().filter(|l| l.contains("engine:tc")).count()),
                        f.xdp,
                        f.userspace,
                        if f.reasons.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", f.reasons.join(", "))
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|| "—".into())
}

/// The TC-based engines' offloaded share (traffic phase without load,
/// summed over repetitions and both hosts) and refused flows.
fn offload_table(s: &mut String, runs: &[Run], o: &Options) {
    let head = [
        ("engine", false),
        (o.axis.word(), true),
        ("Gbit/s", true),
        ("offloaded", true),
        ("frames", true),
        ("busy %", true),
        ("nicflow cores", true),
        ("CPU left %", true),
        ("dp flows (kernel)", true),
        ("refused by profile: top reasons", false),
    ];
    let mut rows = Vec::new();
    for &e in &o.engines {
        for &n in o.xs() {
            let ss: Vec<&OffloadSample> = runs
                .iter()
                .filter(|x| x.engine == e && x.pairs == n && x.error.is_none())
                .filter_map(|x| x.extra.offload.as_ref())
                .collect();
            let Some(off) = hwprofile::combine(&ss) else {
                continue;
            };
            rows.push(vec![
                e.name().into(),
                n.to_string(),
                report::cell(co::med(runs, e, n, co::gbps), 2),
                hwprofile::pct(off.frames.kernel_share()),
                off.frames.total().to_string(),
                report::cell(co::med(runs, e, n, co::busy), 0),
                report::cell(co::med(runs, e, n, co::switch), 2),
                report::cell(co::med(runs, e, n, co::left), 0),
                format!("{} ({})", off.dp.flows, off.dp.kernel_flows),
                off.dp.profile_cell(e.profile().is_some()),
            ]);
        }
    }
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## Offload (TC-based nicflow engines)\n");
    let _ = writeln!(s, "{}", report::table(&head, &rows));
    let _ = writeln!(
        s,
        "{} Both hosts' daemons together; *dp flows (kernel)*: datapath flows of both \
         hosts after the traffic (those in a kernel engine), largest seen in one \
         repetition.\n",
        hwprofile::METHOD
    );
}

/// The `nicflow bench overlay` command line of a run.
fn command_line(o: &Options) -> String {
    let mut c = format!(
        "nicflow bench overlay --engines {} --reps {} --seconds {}",
        report::join(&o.engines.iter().map(|e| e.name()).collect::<Vec<_>>(), ","),
        o.reps,
        o.seconds
    );
    let _ = match o.axis {
        Axis::Pairs => write!(c, " --pairs {}", report::join(&o.pairs, ",")),
        Axis::Streams => write!(c, " --streams {}", report::join(&o.streams, ",")),
    };
    if o.tunnel != "vxlan" {
        let _ = write!(c, " --tunnel {}", o.tunnel);
    }
    c
}

pub fn markdown(r: &Results, figs: &[Figure]) -> String {
    let o = &r.options;
    let runs = by_axis(r);
    let streams = o.axis == Axis::Streams;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# nicflow bench overlay{}\n",
        if streams {
            ": parallel TCP streams of one container pair"
        } else {
            ""
        }
    );
    let _ = writeln!(s, "{}", report::machine_section(&r.perf));
    let (per, containers, traffic) = if streams {
        (
            "number of parallel TCP streams",
            "one client container c1 on H1 and one server container s1 on H2",
            "One iperf3 client in c1 with N parallel TCP streams to s1 (`-P N`; the x axis \
             of every figure; throughput is the receiver's sum over the streams, \
             retransmits the senders' sum: iperf3's `end.sum_received`, `end.sum_sent`; \
             the overlay counterpart of `bench streams`, doc 000 fig. 5.3-5.6, and with \
             `--tunnel geneve` its Geneve variant, fig. 5.9-5.12)",
        )
    } else {
        (
            "pair count",
            "N client containers on H1 and N server containers on H2",
            "One iperf3 TCP stream per pair, all pairs at once",
        )
    };
    let _ = writeln!(
        s,
        "{} repetition(s); per engine and {per} ({}): a fresh lab of two hosts H1, H2 \
         (namespaces) joined by one veth underlay (198.18.50.1/24, .2/24), {containers} \
         (namespaces, veth to their host), \
         all in one overlay segment (VNI {VNI}, container MTU {CONTAINER_MTU}, 198.18.60.0/24). \
         Engines: `kernel-vxlan` = Linux bridge + kernel vxlan device on each host (the Docker \
         overlay stack); `nicflow-tc` = a nicflow daemon on each host with its defaults: \
         bridge br0 `offload=auto`, `actions=normal`, container ports and a {} tunnel port \
         whose underlay are of type auto (TC), no options, every interface at its default \
         offloads: the TC engine encapsulates and decapsulates, super-frames whole, and nicflow \
         owns the underlay (no kernel address); `nicflow` = the same with `offload=none` and \
         AF_XDP ports and underlay (the userspace datapath); `nicflow-xdp` = the AF_XDP setup with `offload=xdp` \
         (encapsulation and decapsulation in the XDP program; the containers send finished \
         checksums, `tx off`, so no TSO, and the ports say `csum_complete`; see the datapath \
         flows column); `kernel-vxlan-tx-off` (when run) = `kernel-vxlan` with the containers' \
         `tx off` too, i.e. the kernel overlay on the same MTU-sized frames nicflow-xdp gets. \
         {traffic}, {} s. CPU left: {} load thread(s) (busy loops, \
         unpinned, like `stress -c`, shared with `bench containers`) counted with the lab idle \
         for {} s before and after the traffic and during a second traffic phase; \"CPU left\" \
         is its rate in that phase over the mean idle-lab rate. Medians over repetitions. \
         Tunnel of the nicflow engines: {}.{}\n",
        o.reps,
        report::join(o.xs(), ", "),
        o.tunnel,
        o.seconds,
        o.load_threads,
        co::calibration_s(o.seconds),
        o.tunnel,
        if o.quick {
            " **Quick run** (`--quick`)."
        } else {
            ""
        }
    );
    co::write_figures(&mut s, figs, &[0, 0, 2, 0, 2]);
    let _ = writeln!(s, "## Details (medians, traffic phase without load)\n");
    let _ = writeln!(
        s,
        "busy, system and softirq: machine-wide shares of all {} cores (/proc/stat); \
         nicflow cores: utime+stime of both daemons over wall time (also with the load); \
         retransmits: sum over {}; load CPU %: the load threads' own CPU time as a share \
         of all cores; dp flows: `nicflow dump-dp-flows br0` on each host after the traffic \
         (first successful repetition), by engine, with the reasons flows are not offloaded.\n",
        cpu::cores(),
        o.axis.word()
    );
    let cols: &[(&str, Get<Run>, usize)] = &[
        ("Gbit/s", co::gbps, 2),
        ("retransmits", co::retransmits, 0),
        ("busy %", co::busy, 0),
        ("system %", co::system, 0),
        ("softirq %", co::softirq, 0),
        ("nicflow cores", co::switch, 2),
        ("ctxt/Gbit", co::ctxt, 0),
        ("intr/Gbit", co::intr, 0),
        ("Gbit/s with load", co::gbps_load, 2),
        ("nicflow cores with load", co::switch_load, 2),
        ("load CPU %", co::load_share, 0),
        ("CPU left %", co::left, 0),
    ];
    let table = co::details_table(&runs, o.xs(), cols, &["dp flows"], |e, n| {
        vec![dp_cell(&runs, e, n)]
    });
    s.push_str(&table.replacen(
        "| engine | pairs |",
        &format!("| engine | {} |", o.axis.word()),
        1,
    ));
    offload_table(&mut s, &runs, o);
    let mut fails = String::new();
    co::write_failures(&mut fails, &runs, true);
    if streams {
        // One client per run: "k of N pairs failed" is that client.
        fails = fails.replace(" pairs rep ", " streams rep ");
        for n in &o.streams {
            fails = fails.replace(&format!(" of {n} pairs failed"), " of 1 client failed");
        }
    }
    s.push_str(&fails);
    let _ = writeln!(s, "\n## Commands\n");
    let (per_pair, client) = if streams {
        (
            "# the one pair, N parallel streams (N = the x axis):",
            "ip netns exec <c1> iperf3 -c 198.18.60.101 -p {PORT} -t {T} -P N -J --connect-timeout 3000",
        )
    } else {
        (
            "# per pair i (all at once):",
            "ip netns exec <ci> iperf3 -c 198.18.60.(100+i) -p {PORT} -t {T} -J --connect-timeout 3000",
        )
    };
    let _ = writeln!(
        s,
        "```sh\n{}\n\
         # kernel-vxlan, on host h (1, 2; peer p = 3-h), in its namespace:\n{}\n\
         # nicflow-tc (nicflow, nicflow-xdp: offload none / xdp, type afxdp, underlay_type afxdp): on host h, `ip netns exec <Hh> nicflow --socket hh.sock daemon --config hh.toml` with (H1):\n{}\
         {per_pair}\n\
         ip netns exec <s{}> iperf3 -s -p {PORT}\n\
         {}\n```",
        command_line(o),
        kernel_vxlan_commands(1, 1)
            .iter()
            .map(|c| format!("ip -n <H1> {}", c.join(" ")))
            .collect::<Vec<_>>()
            .join("\n"),
        nicflow_config(1, 1, OvEngine::NicflowTc, &o.tunnel),
        if streams { "1" } else { "i" },
        client
            .replace("{PORT}", &PORT.to_string())
            .replace("{T}", &o.seconds.to_string())
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_tx_off_engine_is_a_kernel_engine_with_containers_tx_off() {
        let e = parse_engines("kernel-vxlan-tx-off").unwrap();
        assert_eq!(e, vec![OvEngine::KernelVxlanTxOff]);
        assert!(!OvEngine::KernelVxlanTxOff.is_nicflow());
        assert!(OvEngine::KernelVxlanTxOff.containers_tx_off());
        assert!(OvEngine::NicflowXdp.containers_tx_off());
        assert!(
            !OvEngine::KernelVxlan.containers_tx_off() && !OvEngine::Nicflow.containers_tx_off()
        );
    }

    #[test]
    fn profile_engines_are_nicflow_tc_with_a_profile() {
        let e = parse_engines("nicflow-tc,nicflow-bf2,nicflow-profile:cx7").unwrap();
        assert_eq!(
            e,
            vec![
                OvEngine::NicflowTc,
                OvEngine::NicflowProfile(Profile::Bf2),
                OvEngine::NicflowProfile(Profile::Cx7)
            ]
        );
        assert_eq!(e[1].name(), "nicflow-bf2");
        assert!(e[1].is_nicflow() && e[1].tc() && !e[1].containers_tx_off());
        let t = nicflow_config(1, 2, e[1], "vxlan");
        assert!(t.contains("offload = \"profile:bf2\""), "{t}");
        assert!(t.contains("type = \"auto\"") && !t.contains("afxdp"), "{t}");
        // The same lab as nicflow-tc but for the offload line.
        assert_eq!(
            t.replace("profile:bf2", "auto"),
            nicflow_config(1, 2, OvEngine::NicflowTc, "vxlan")
        );
        assert_ne!(e[1].tag(), e[2].tag());
        let j = serde_json::to_string(&e[2]).unwrap();
        assert_eq!(serde_json::from_str::<OvEngine>(&j).unwrap(), e[2]);
    }

    #[test]
    fn address_plan() {
        assert_eq!(underlay_ip(1).to_string(), "198.18.50.1");
        assert_eq!(underlay_ip(2).to_string(), "198.18.50.2");
        assert_eq!(container_ip(false, 1).to_string(), "198.18.60.1");
        assert_eq!(container_ip(true, 20).to_string(), "198.18.60.120");
        assert_eq!(container_ip(true, MAX_PAIRS).to_string(), "198.18.60.199");
        assert_eq!(host_end(1, 3), "vc3");
        assert_eq!(host_end(2, 3), "vs3");
        // Namespace names stay short enough for `ip netns` and stale-run
        // reaping parses the pid back.
        let lab = format!("{PREFIX}{}x{}{}", u32::MAX, 999, "x");
        assert!(lab::ns_of(&lab, "c99").len() < 64);
        assert!(
            parse_engines("kernel-vxlan,nicflow,nicflow-xdp,nicflow").is_ok_and(|v| v
                == vec![
                    OvEngine::KernelVxlan,
                    OvEngine::Nicflow,
                    OvEngine::NicflowXdp
                ])
        );
        assert!(parse_engines("ovs").is_err());
    }

    #[test]
    fn nicflow_config_parses_and_mirrors() {
        for engine in [OvEngine::Nicflow, OvEngine::NicflowXdp, OvEngine::NicflowTc] {
            for host in [1, 2] {
                let t = nicflow_config(host, 3, engine, "vxlan");
                let cfg: nicflow::control::config::Config =
                    toml::from_str(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
                let br = &cfg.bridges[0];
                assert_eq!(br.name, "br0");
                assert_eq!(br.flows, vec!["priority=0,actions=normal"]);
                assert_eq!(br.ports.len(), 4, "{t}");
                let want = engine.offload();
                assert!(t.contains(&format!("offload = \"{want}\"")), "{t}");
            }
        }
        let h2 = nicflow_config(2, 1, OvEngine::Nicflow, "vxlan");
        assert!(h2.contains("name = \"vs1\""), "{h2}");
        assert!(
            h2.contains(
                "underlay = \"u2\", local_ip = \"198.18.50.2\", remote_ip = \"198.18.50.1\", key = \"100\", underlay_type = \"afxdp\""
            ),
            "{h2}"
        );
        // Offload: finished checksums declared on every port and the tunnel.
        let x = nicflow_config(1, 1, OvEngine::NicflowXdp, "vxlan");
        assert!(x.contains("options = { csum_complete = \"true\" }"), "{x}");
        assert!(x.contains("csum_complete = \"true\", key"), "{x}");
        // The defaults: no port options, no underlay type.
        let c = nicflow_config(1, 1, OvEngine::NicflowTc, "vxlan");
        assert!(
            !c.contains("csum_complete") && !c.contains("underlay_type"),
            "{c}"
        );
        assert!(c.contains("type = \"auto\""), "{c}");
        let k = kernel_vxlan_commands(1, 2);
        assert_eq!(k[0].join(" "), "addr add 198.18.50.1/24 dev u1");
        assert_eq!(
            k[1].join(" "),
            "link add vx0 type vxlan id 100 local 198.18.50.1 remote 198.18.50.2 dstport 4789 dev u1"
        );
        assert!(k.iter().any(|c| c.join(" ") == "link set vc2 master br0"));
    }

    fn args(pairs: Option<&str>, streams: Option<&str>) -> Args {
        Args {
            engines: "nicflow,nicflow-xdp".into(),
            reps: 2,
            seconds: 4,
            pairs: pairs.map(str::to_string),
            streams: streams.map(str::to_string),
            load_threads: Some(1),
            tunnel: "geneve".into(),
            run: crate::RunArgs::default(),
        }
    }

    #[test]
    fn streams_axis_options() {
        // Without --streams: the pair sweep as before.
        let o = options(&args(None, None)).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(o.axis, Axis::Pairs);
        assert_eq!(o.pairs, vec![1, 2, 5, 10, 20]);
        assert_eq!(o.streams, vec![1]);
        assert_eq!(o.xs(), &[1, 2, 5, 10, 20]);
        let o = options(&args(Some("3,4"), None)).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(o.xs(), &[3, 4]);
        // --streams: one pair, the streams across.
        for pairs in [None, Some("1")] {
            let o = options(&args(pairs, Some("1,2,4,8"))).unwrap_or_else(|e| panic!("{e:#}"));
            assert_eq!(o.axis, Axis::Streams);
            assert_eq!(o.pairs, vec![1]);
            assert_eq!(o.xs(), &[1, 2, 4, 8]);
        }
        let mut q = args(None, Some("1,4"));
        q.run.quick = true;
        let o = options(&q).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!((o.reps, o.seconds, o.xs()), (1, 2, &[1, 4][..]));
        // Refused: other pair counts beside --streams, bad stream counts.
        for (pairs, streams, want) in [
            (Some("2"), "1,2", "leave out --pairs 2"),
            (Some("1,2"), "4", "leave out --pairs 1,2"),
            (None, "0,2", "positive counts"),
            (None, "1,x", "not a count"),
            (None, "1,129", "at most 128"),
        ] {
            match options(&args(pairs, Some(streams))) {
                Ok(o) => panic!("{pairs:?} {streams}: accepted {o:?}"),
                Err(e) => assert!(format!("{e:#}").contains(want), "{e:#}"),
            }
        }
        assert!(streams_words("rep 1/3: 4 pair(s), nicflow") == "rep 1/3: 4 stream(s), nicflow");
        assert_eq!(
            streams_words("nicflow 4 pairs + load: 1.00 Gbit/s"),
            "nicflow 4 streams + load: 1.00 Gbit/s"
        );
        // -P only for more than one stream: the pair sweep's command is
        // unchanged.
        let dst = container_ip(true, 1);
        assert_eq!(
            client_argv(dst, 5, 1).join(" "),
            "iperf3 -c 198.18.60.101 -p 5201 -t 5 -J --connect-timeout 3000"
        );
        assert_eq!(
            client_argv(dst, 5, 8).join(" "),
            "iperf3 -c 198.18.60.101 -p 5201 -t 5 -P 8 -J --connect-timeout 3000"
        );
    }

    fn results(o: Options) -> Results {
        let mut runs = Vec::new();
        for (i, &n) in o.xs().iter().enumerate() {
            for engine in [OvEngine::Nicflow, OvEngine::NicflowXdp] {
                let (pairs, streams) = match o.axis {
                    Axis::Pairs => (n, 1),
                    Axis::Streams => (1, n),
                };
                runs.push(Run {
                    engine,
                    pairs,
                    rep: 0,
                    lab: String::new(),
                    error: None,
                    point: co::Point {
                        traffic: Some(co::Phase {
                            bytes: 1 << 30,
                            gbps: 1.0 + i as f64,
                            retransmits: Some(7),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    extra: Extra {
                        streams,
                        ..Default::default()
                    },
                });
            }
        }
        Results {
            machine: String::new(),
            perf: String::new(),
            options: o,
            started_unix: 0,
            runs,
        }
    }

    #[test]
    fn axis_labels_in_figures_and_report() {
        let o = options(&args(None, Some("1,2,4"))).unwrap_or_else(|e| panic!("{e:#}"));
        let r = results(o);
        let figs = figures(&r);
        assert_eq!(figs.len(), 5);
        for f in &figs {
            assert_eq!(f.x_label, Axis::Streams.label());
            assert!(f.title.starts_with("Overlay, one pair, parallel streams: "));
            assert!(!f.title.contains("doc 001"), "{}", f.title);
        }
        let t = figs.iter().find(|f| f.id == "throughput").map(Figure::csv);
        assert_eq!(
            t.as_deref(),
            Some(
                "parallel TCP streams of one container pair (iperf3 -P),nicflow,nicflow-xdp\n\
                 1,1,1\n2,2,2\n4,3,3\n"
            )
        );
        let md = markdown(&r, &figs);
        for want in [
            "# nicflow bench overlay: parallel TCP streams of one container pair",
            "per engine and number of parallel TCP streams (1, 2, 4)",
            "one client container c1 on H1",
            "retransmits: sum over streams",
            "| engine | streams |",
            "| nicflow-xdp | 4 | 3.00 | 7 |",
            "--seconds 4 --streams 1,2,4 --tunnel geneve\n",
            "-t 4 -P N -J",
            "type = \"geneve\"",
        ] {
            assert!(md.contains(want), "{want}\n{md}");
        }
        // The pair sweep keeps its words.
        let o = options(&args(Some("1,2"), None)).unwrap_or_else(|e| panic!("{e:#}"));
        let r = results(o);
        let figs = figures(&r);
        assert_eq!(figs[2].x_label, "container pairs across the two hosts");
        assert_eq!(
            figs[2].title,
            "Overlay: total throughput (cf. doc 001 fig. 4c)"
        );
        let md = markdown(&r, &figs);
        for want in [
            "| engine | pairs |",
            "--pairs 1,2 --tunnel geneve\n",
            "# per pair i",
        ] {
            assert!(md.contains(want), "{want}\n{md}");
        }
        assert!(!md.contains("-P N"), "{md}");
    }

    #[test]
    fn old_samples_load_as_the_pair_sweep() {
        let o: Options = serde_json::from_str(
            r#"{"engines":["nicflow"],"reps":1,"seconds":2,"pairs":[1,2],"load_threads":1,"quick":true}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (o.axis, o.tunnel.as_str(), o.xs()),
            (Axis::Pairs, "vxlan", &[1, 2][..])
        );
        assert_eq!(o.streams, vec![1]);
        let x: Run = serde_json::from_str(
            r#"{"engine":"nicflow","pairs":2,"rep":0,"lab":"l","error":null,"traffic":null,"traffic_with_load":null}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((x.pairs, x.extra.streams), (2, 1));
        // New files record the axis and each run's streams.
        let mut o = o;
        o.axis = Axis::Streams;
        o.streams = vec![2];
        let j = serde_json::to_string(&results(o)).unwrap_or_default();
        assert!(j.contains(r#""axis":"streams""#), "{j}");
        assert!(j.contains(r#""pairs":1,"rep":0"#), "{j}");
        assert!(j.contains(r#""streams":2"#), "{j}");
    }
}
