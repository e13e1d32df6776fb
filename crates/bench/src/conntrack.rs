//! `nicflow bench conntrack`: document 003's connection-tracking
//! measurements (table VII: connections/s and transactions/s through a
//! stateful switch) on the lab, issue 13's benchmark.
//!
//! Scenario **firewall** (the default, `--scenario firewall`): one client
//! (`c1`, port `p1`) and one server (`s1`, port `p2`) around a switch
//! ([`Testbed`], one pair). The server runs nginx answering every
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
//!   firewall table ([`FIREWALL`]); the first new connection goes through
//!   the tracker in userspace, which leaves a template so that the TC
//!   program sets the later ones up itself (`ct_setup_bpf`, on by default)
//!   and tells the tracker; established ones run in the TC engine.
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
//! * `nicflow-nooffload`: `nicflow` with `nicflow set br0 offload=none`
//!   (every packet in userspace; not in the default list of this
//!   scenario).
//! * `nicflow-bf2`, `nicflow-cx7` (any `nicflow-profile:NAME`, in both
//!   scenarios): `nicflow` with `nicflow set br0 offload=profile:NAME`: the
//!   TC engine holds only what that NIC model would, established
//!   connections included ([`super::hwprofile`]). Every nicflow engine's
//!   samples record the offloaded share and the flows a profile refused.
//!
//! Scenario **lb** (`--scenario lb`): a DNAT load balancer. The client
//! opens `http://198.18.0.100/` ([`VIP`], a virtual address no host owns;
//! c1 resolves it with a static neighbour entry to [`VIP_MAC`]) and the
//! switch sends each new connection to one of three backends s1-s3
//! (198.18.2.1-3, nginx each; the testbed's clients c2 and c3 stay idle).
//! Engines:
//!
//! * `nicflow` (defaults) and `nicflow-nooffload` (`offload=none`): OVS's
//!   load-balancer pattern ([`lb_flows`], [`lb_groups`]): table 0 sends IP
//!   through `ct(table=1,nat)`; a new connection to the VIP goes to a
//!   `select` group whose buckets are `ct(commit,nat(dst=BACKEND:80),table=2)`;
//!   established packets (translated by `ct(nat)`) go to table 2, which
//!   forwards by destination address (`mod_dl_dst` to the backend's MAC).
//! * `ovs`: the same tables and group (`ovs-ofctl -O OpenFlow13
//!   add-groups`), userspace datapath.
//! * `linux-bridge-nft`: the Linux bridge with nftables
//!   `dnat to numgen inc mod 3 map { 0 : B1, 1 : B2, 2 : B3 }` in the `ip`
//!   family's prerouting nat hook ([`nft_lb_rules`]). nftables' bridge family
//!   has no IP NAT, so this always runs behind `br_netfilter`
//!   (`bridge-nf-call-iptables=1`), which after a DNAT looks the new
//!   destination up in the routing table and rewrites the destination MAC
//!   from the neighbour table ("bridged DNAT"): the bridge gets an address
//!   ([`LB_BRIDGE_IP`]) and `ip_forward=1` in the switch namespace.
//!
//! Every backend's nginx also serves `stub_status` on 127.0.0.1:8081 in its
//! namespace; each sample reads it before and after, so the report shows
//! how the requests were split between the backends.
//!
//! Scenarios run one after the other, each with its own testbeds. Within
//! a scenario, repetitions are interleaved (every engine's testbed is up
//! for the whole scenario; repetition r measures each engine in turn), so
//! a change in the machine's background load spreads over all engines
//! instead of landing on one. At the defaults (32 connections, 5
//! repetitions of 5 s) the firewall takes about 7 minutes and the load
//! balancer about 4, so `--scenario` defaults to the firewall alone.
//! Hosts keep the kernel's default offloads (TSO, partial checksums) by
//! default, as a plain host does; `--host-offload off` gives every engine
//! finished checksums instead (`ethtool -K eth0 tx off`).
//! The client uses ports 1024-65535 with `tcp_tw_reuse`, in its own
//! namespace, so closing connections do not run it out of ports.

use super::cpu::{self, Snapshot, Usage};
use super::forward::{self, Engine, HostOffload};
use super::host_tools::{self, have, tool_version};
use super::hwprofile::{self, OffloadSample, Profile, ProfileEngine};
use super::overlay::rtnl_in;
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::sys;
use nicflow::os;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Scenarios, comma-separated: firewall (OVS's stateful firewall
    /// table, the default), lb (a DNAT load balancer to 3 backends).
    /// `firewall,lb` runs both, one after the other (~12 min at the
    /// defaults).
    #[arg(long, default_value = "firewall")]
    pub scenario: String,
    /// Engines, comma-separated (default: each scenario's own list):
    /// nicflow (the defaults), nicflow-nooffload (offload=none),
    /// nicflow-noct (plain port rules; firewall only), ovs (userspace
    /// datapath, same tables), linux-bridge-nft (nftables ct rules / DNAT),
    /// linux-bridge (firewall only). Each scenario runs those that apply
    /// to it.
    #[arg(long)]
    pub engines: Option<String>,
    /// Modes, comma-separated: cps (new connections/s), tps
    /// (transactions/s on persistent connections). `--modes cps` halves a
    /// run that is about connection setup.
    #[arg(long, default_value = "cps,tps")]
    pub modes: String,
    /// Concurrent wrk connections, comma-separated (one point each).
    #[arg(long, default_value = "32")]
    pub connections: String,
    /// Seconds per wrk run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Repetitions per point (the report shows medians).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// wrk threads (`wrk -tN`; at most the smallest `--connections`).
    /// Both engines get the same client. The default is two threads, one
    /// per CPU of the machines this is run on: with one thread the client
    /// itself is the limit of the cheapest engine (nftables' wrk thread
    /// was 95-98 % busy, and a second thread raised nftables' connections/s
    /// by 26-39 %, docs/results/conntrack.md, ctlb2's section), so a ratio
    /// against it measured wrk, not the switch. `--wrk-threads 1` repeats
    /// the earlier sections' runs (recorded before 2026-12-06 with one).
    #[arg(long, default_value_t = 2)]
    pub wrk_threads: usize,
    /// Host-side checksum/TSO offload: default (the kernel's, as a plain
    /// host has them) or off (finished checksums).
    #[arg(long, default_value = "default")]
    pub host_offload: String,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
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

/// The load balancer's virtual address (no host owns it).
pub const VIP: &str = "198.18.0.100";
/// The MAC the client's static neighbour entry gives the VIP (locally
/// administered; no interface has it).
pub const VIP_MAC: &str = "02:00:00:00:00:64";
/// Backends behind the VIP: servers s1..s3 of the testbed.
pub const LB_BACKENDS: usize = 3;
/// The address the Linux bridge gets in scenario lb, so that
/// br_netfilter can route DNATed packets (and resolve the backends).
pub const LB_BRIDGE_IP: &str = "198.18.0.254/16";
/// nginx's `stub_status` port on each server's loopback.
pub const STUB_PORT: u16 = 8081;

/// The response body: 15 bytes, as document 003's small file.
pub const BODY: &str = "conntrack 15 B\\n";

/// Which experiment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// OVS's stateful firewall between one client and one server.
    #[default]
    Firewall,
    /// A DNAT load balancer: one client, a VIP, three backends.
    Lb,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Firewall => "firewall",
            Scenario::Lb => "lb",
        }
    }

    pub fn parse(s: &str) -> Option<Scenario> {
        Some(match s.trim() {
            "firewall" | "fw" => Scenario::Firewall,
            "lb" | "load-balancer" => Scenario::Lb,
            _ => return None,
        })
    }

    /// The engines measured when `--engines` is not given.
    pub fn default_engines(self) -> Vec<CtEngine> {
        match self {
            Scenario::Firewall => vec![
                CtEngine::Nicflow,
                CtEngine::NicflowNoct,
                CtEngine::Ovs,
                CtEngine::LinuxBridgeNft,
                CtEngine::LinuxBridge,
            ],
            Scenario::Lb => vec![
                CtEngine::Nicflow,
                CtEngine::NicflowNooffload,
                CtEngine::Ovs,
                CtEngine::LinuxBridgeNft,
            ],
        }
    }

    /// Can `e` run this scenario? (The load balancer needs NAT: no plain
    /// bridge, no rule-less nicflow.)
    pub fn supports(self, e: CtEngine) -> bool {
        match self {
            Scenario::Firewall => true,
            Scenario::Lb => !matches!(e, CtEngine::NicflowNoct | CtEngine::LinuxBridge),
        }
    }

    /// Testbed pairs: the load balancer's backends are servers s1..s3.
    pub fn pairs(self) -> usize {
        match self {
            Scenario::Firewall => 1,
            Scenario::Lb => LB_BACKENDS,
        }
    }
}

/// `--modes`: `cps`, `tps`, in the order given, each once.
pub fn parse_modes(list: &str) -> anyhow::Result<Vec<Mode>> {
    let mut v = Vec::new();
    for m in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let m = match m {
            "cps" => Mode::Cps,
            "tps" => Mode::Tps,
            _ => bail!("unknown mode `{m}` (cps, tps)"),
        };
        if !v.contains(&m) {
            v.push(m);
        }
    }
    if v.is_empty() {
        bail!("no mode");
    }
    Ok(v)
}

pub fn parse_scenarios(list: &str) -> anyhow::Result<Vec<Scenario>> {
    let mut v = Vec::new();
    for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let s =
            Scenario::parse(s).with_context(|| format!("unknown scenario `{s}` (firewall, lb)"))?;
        if !v.contains(&s) {
            v.push(s);
        }
    }
    if v.is_empty() {
        bail!("no scenario");
    }
    Ok(v)
}

/// The engines a scenario runs: its defaults, or those of `requested` it
/// supports (in the order given), with the ones it leaves out.
pub fn scenario_engines(
    s: Scenario,
    requested: Option<&[CtEngine]>,
) -> (Vec<CtEngine>, Vec<CtEngine>) {
    match requested {
        None => (s.default_engines(), Vec::new()),
        Some(list) => list.iter().partition(|e| s.supports(**e)),
    }
}

/// An engine of this experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CtEngine {
    Nicflow,
    NicflowNoct,
    /// nicflow with `offload=none`: every packet in the userspace datapath.
    NicflowNooffload,
    Ovs,
    LinuxBridgeNft,
    LinuxBridge,
    /// nicflow with `offload=profile:NAME`.
    NicflowProfile(Profile),
}

impl CtEngine {
    pub fn name(self) -> &'static str {
        match self {
            CtEngine::Nicflow => "nicflow",
            CtEngine::NicflowNoct => "nicflow-noct",
            CtEngine::NicflowNooffload => "nicflow-nooffload",
            CtEngine::Ovs => "ovs",
            CtEngine::LinuxBridgeNft => "linux-bridge-nft",
            CtEngine::LinuxBridge => "linux-bridge",
            CtEngine::NicflowProfile(p) => p.engine_name(),
        }
    }

    pub fn parse(s: &str) -> Option<CtEngine> {
        if let Some(p) = Profile::parse_engine(s) {
            return Some(CtEngine::NicflowProfile(p));
        }
        Some(match s.trim() {
            "nicflow" | "nicflow-tc" => CtEngine::Nicflow,
            "nicflow-noct" => CtEngine::NicflowNoct,
            "nicflow-nooffload" | "nicflow-offload-none" => CtEngine::NicflowNooffload,
            "ovs" | "ovs-userspace" => CtEngine::Ovs,
            "linux-bridge-nft" | "nft" | "nftables" => CtEngine::LinuxBridgeNft,
            "linux-bridge" | "bridge" => CtEngine::LinuxBridge,
            _ => return None,
        })
    }

    /// The testbed engine underneath.
    pub fn engine(self) -> Engine {
        match self {
            CtEngine::Nicflow
            | CtEngine::NicflowNoct
            | CtEngine::NicflowNooffload
            | CtEngine::NicflowProfile(_) => Engine::NicflowTc,
            CtEngine::Ovs => Engine::Ovs,
            CtEngine::LinuxBridgeNft | CtEngine::LinuxBridge => Engine::LinuxBridge,
        }
    }

    /// Does the engine track connections?
    pub fn tracks(self) -> bool {
        matches!(
            self,
            CtEngine::Nicflow
                | CtEngine::NicflowNooffload
                | CtEngine::NicflowProfile(_)
                | CtEngine::Ovs
                | CtEngine::LinuxBridgeNft
        )
    }

    /// Does the engine run OpenFlow tables (nicflow, OVS)?
    fn openflow(self) -> bool {
        matches!(
            self,
            CtEngine::Nicflow
                | CtEngine::NicflowNooffload
                | CtEngine::NicflowProfile(_)
                | CtEngine::Ovs
        )
    }

    /// A nicflow daemon with OpenFlow tables and `stats` to read?
    fn nicflow_tables(self) -> bool {
        matches!(
            self,
            CtEngine::Nicflow | CtEngine::NicflowNooffload | CtEngine::NicflowProfile(_)
        )
    }

    fn profile(self) -> Option<Profile> {
        match self {
            CtEngine::NicflowProfile(p) => Some(p),
            _ => None,
        }
    }

    /// The rules the testbed starts with. Scenario lb starts from its
    /// table-miss drop only: the group goes in before the rules naming it.
    fn rules(self, s: Scenario) -> Rules {
        match (s, self.openflow()) {
            (Scenario::Firewall, true) => {
                Rules::Custom(FIREWALL.iter().map(|s| s.to_string()).collect())
            }
            (Scenario::Lb, true) => Rules::Custom(vec![lb_flows()[0].clone()]),
            _ => Rules::Explicit,
        }
    }
}

pub fn parse_engines(list: &str) -> anyhow::Result<Vec<CtEngine>> {
    super::testbed::parse_engine_list(list, "", CtEngine::parse)
}

/// Backend `i` (1-based): server s`i`'s address.
fn backend_ip(i: usize) -> std::net::Ipv4Addr {
    testbed::host_ip4(testbed::Role::Server, i)
}

/// OVS's L4 load balancer on the VIP (testbed placeholders: `{c1}`,
/// `{s1}`..`{s3}`, their `.ip4` and `.mac`). The first line is the table
/// miss the testbed starts with; the rest goes in after [`lb_groups`].
pub fn lb_flows() -> Vec<String> {
    let mut v: Vec<String> = vec![
        "table=0,priority=1,actions=drop".into(),
        "table=0,priority=10,arp,actions=normal".into(),
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)".into(),
        "table=1,priority=1,actions=drop".into(),
        format!(
            "table=1,priority=20,in_port={{c1}},tcp,nw_dst={VIP},tp_dst=80,ct_state=+trk+new,actions=group:1"
        ),
        "table=1,priority=10,ip,ct_state=+trk+est,actions=resubmit(,2)".into(),
        "table=2,priority=1,actions=drop".into(),
    ];
    for i in 1..=LB_BACKENDS {
        v.push(format!(
            "table=2,priority=10,ip,nw_dst={{s{i}.ip4}},actions=mod_dl_dst:{{s{i}.mac}},output:{{s{i}}}"
        ));
    }
    v.push("table=2,priority=10,ip,nw_dst={c1.ip4},actions=output:{c1}".into());
    v
}

/// The select group of the load balancer: one bucket per backend, each
/// committing the connection with its DNAT and continuing in table 2.
pub fn lb_groups() -> Vec<String> {
    let buckets: Vec<String> = (1..=LB_BACKENDS)
        .map(|i| {
            format!(
                "bucket=actions=ct(commit,nat(dst={}:80),table=2)",
                backend_ip(i)
            )
        })
        .collect();
    vec![format!("group_id=1,type=select,{}", buckets.join(","))]
}

/// nftables' load balancer: round-robin DNAT of the VIP's port 80 to the
/// backends, in the `ip` family's prerouting nat hook (bridged IPv4
/// reaches it through br_netfilter).
pub fn nft_lb_rules(vip: &str, backends: &[std::net::Ipv4Addr]) -> String {
    let map: Vec<String> = backends
        .iter()
        .enumerate()
        .map(|(i, b)| format!("{i} : {b}"))
        .collect();
    format!(
        "table ip nicflow_lb {{\n  chain prerouting {{\n    type nat hook prerouting priority dstnat; policy accept;\n\
         \x20   ip daddr {vip} tcp dport 80 dnat to numgen inc mod {} map {{ {} }}\n  }}\n}}\n",
        backends.len(),
        map.join(", ")
    )
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
    /// Older runs (firewall only) have no scenario field.
    #[serde(default)]
    pub scenario: Scenario,
    pub engine: CtEngine,
    pub mode: Mode,
    pub connections: usize,
    pub rep: usize,
    pub wrk: Option<WrkOut>,
    /// Machine-wide busy cores over the run.
    pub machine_cores: f64,
    /// The switch process's cores (nicflow daemon, ovs-vswitchd).
    pub switch_cores: Option<f64>,
    /// All nginx processes (one per server) together.
    pub nginx_cores: Option<f64>,
    pub wrk_cores: f64,
    pub wall_s: f64,
    pub error: Option<String>,
    /// Scenario lb: requests each backend's nginx served during the run
    /// (`stub_status` after minus before, less the reading itself), in
    /// backend order; empty where not read.
    #[serde(default)]
    pub backend_requests: Vec<u64>,
    /// Scenario lb: connections each backend accepted during the run.
    #[serde(default)]
    pub backend_conns: Vec<u64>,
    /// nicflow engines: frames per engine during the run and the datapath
    /// flows after it.
    #[serde(default)]
    pub offload: Option<OffloadSample>,
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

/// How requests were split between backends: each one's share in percent
/// of the total (`None` when nothing was counted).
pub fn split_percent(counts: &[u64]) -> Option<Vec<f64>> {
    let total: u64 = counts.iter().sum();
    (total > 0).then(|| {
        counts
            .iter()
            .map(|&c| 100.0 * c as f64 / total as f64)
            .collect()
    })
}

/// Scenario lb's setup and outcome (absent in firewall-only runs).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LbRun {
    pub engines: Vec<CtEngine>,
    pub vip: String,
    pub vip_mac: String,
    pub backends: Vec<String>,
    /// The OpenFlow tables (nicflow, ovs), testbed placeholders kept.
    pub flows: Vec<String>,
    pub groups: Vec<String>,
    pub nft_mode: String,
    pub nft_rules: String,
    pub setup_errors: Vec<(CtEngine, String)>,
    pub end_state: Vec<(CtEngine, serde_json::Value)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub load_start: String,
    /// Load average when the last scenario ended.
    #[serde(default)]
    pub load_end: String,
    pub command: String,
    /// Scenarios run, in order (older runs: none recorded, firewall).
    #[serde(default)]
    pub scenarios: Vec<Scenario>,
    /// Scenario firewall's engines (empty if it did not run).
    pub engines: Vec<CtEngine>,
    pub connections: Vec<usize>,
    pub seconds: f64,
    pub reps: usize,
    /// wrk threads per run (older runs: not recorded, one).
    #[serde(default = "one_thread")]
    pub wrk_threads: usize,
    pub host_offload: HostOffload,
    pub tools: Vec<String>,
    /// How the firewall's nftables engine attaches conntrack to bridged
    /// packets.
    pub nft_mode: String,
    pub nft_rules: String,
    pub firewall: Vec<String>,
    pub samples: Vec<Sample>,
    /// Scenario firewall's setup failures.
    pub setup_errors: Vec<(CtEngine, String)>,
    pub notes: Vec<String>,
    /// Scenario firewall's tracker state at the end (conntrack-stats,
    /// nf_conntrack_count).
    pub end_state: Vec<(CtEngine, serde_json::Value)>,
    #[serde(default)]
    pub lb: Option<LbRun>,
}

fn one_thread() -> usize {
    1
}

impl Results {
    /// The scenarios this run holds (a run from before scenarios were
    /// recorded is the firewall).
    pub fn scenarios(&self) -> Vec<Scenario> {
        if self.scenarios.is_empty() {
            vec![Scenario::Firewall]
        } else {
            self.scenarios.clone()
        }
    }

    /// The engines scenario `s` measured.
    pub fn engines_of(&self, s: Scenario) -> Vec<CtEngine> {
        match s {
            Scenario::Firewall => self.engines.clone(),
            Scenario::Lb => self
                .lb
                .as_ref()
                .map(|l| l.engines.clone())
                .unwrap_or_default(),
        }
    }

    fn setup_error(&self, s: Scenario, e: CtEngine) -> Option<String> {
        let list = match s {
            Scenario::Firewall => &self.setup_errors,
            Scenario::Lb => &self.lb.as_ref()?.setup_errors,
        };
        list.iter().find(|(x, _)| *x == e).map(|(_, w)| w.clone())
    }
}

/// nginx in a server namespace, killed on drop.
struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One engine's [`Testbed`] (itself a [`crate::lab::Lab`]: namespaces,
/// switch, teardown, reaping) with the experiment's server(s) running.
struct EngineSetup {
    scenario: Scenario,
    engine: CtEngine,
    tb: Testbed,
    /// One per server (the firewall's s1; the load balancer's backends).
    nginx: Vec<Nginx>,
    url: String,
    dir: PathBuf,
}

/// nginx's configuration: one process, the 15-byte answer on `ip:80`;
/// with `stub`, `stub_status` on 127.0.0.1:[`STUB_PORT`] too.
fn nginx_conf(dir: &Path, ip: &str, stub: bool) -> String {
    let d = dir.display();
    let stub = if stub {
        format!(
            "\x20 server {{\n    listen 127.0.0.1:{STUB_PORT};\n    location / {{ stub_status; }}\n  }}\n"
        )
    } else {
        String::new()
    };
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 16384; multi_accept on; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 10000000;\n  keepalive_timeout 65;\n\
         \x20 client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 server {{\n    listen {ip}:80 backlog=4096;\n\
         \x20   location / {{ default_type text/plain; return 200 \"{BODY}\"; }}\n  }}\n{stub}}}\n"
    )
}

/// nginx's `stub_status` page: (accepts, handled, requests).
pub fn parse_stub_status(text: &str) -> Option<(u64, u64, u64)> {
    let mut lines = text.lines().map(str::trim);
    lines.find(|l| l.starts_with("server accepts handled requests"))?;
    let n: Vec<u64> = lines
        .next()?
        .split_whitespace()
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    match n[..] {
        [a, h, r] => Some((a, h, r)),
        _ => None,
    }
}

/// Read a server's `stub_status` (accepts, requests) from inside its
/// namespace.
fn stub_read(ns: &str) -> Option<(u64, u64)> {
    let url = format!("http://127.0.0.1:{STUB_PORT}/");
    let o = sys::run(&mut sys::in_ns(
        Some(ns),
        &["curl", "-s", "--max-time", "2", &url],
    ))
    .ok()?;
    parse_stub_status(&String::from_utf8_lossy(&o.stdout)).map(|(a, _, r)| (a, r))
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

/// How scenario lb's nftables engine reaches bridged packets, for the
/// report.
pub const NFT_LB_MODE: &str = "ip family prerouting nat hook behind br_netfilter \
    (nftables' bridge family has no IP NAT); the bridge has 198.18.0.254/16 and ip_forward=1 \
    so that br_netfilter routes the DNATed packet and takes the backend's MAC from the \
    neighbour table";

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

/// Start nginx in `host`'s namespace, its files under `dir`.
fn start_nginx(host: &testbed::Host, dir: &Path, stub: bool) -> anyhow::Result<Nginx> {
    std::fs::create_dir_all(dir)?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(dir, &host.ip4.to_string(), stub))?;
    let conf_s = conf.display().to_string();
    let dir_s = dir.display().to_string();
    let mut nginx = sys::in_ns(
        Some(&host.netns),
        &["nginx", "-p", &dir_s, "-e", "stderr", "-c", &conf_s],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .with_context(|| format!("starting nginx in {}", host.name))?;
    if let Err(e) = wait_listening(&host.netns, 80, &mut nginx) {
        let _ = nginx.kill();
        let _ = nginx.wait();
        return Err(e);
    }
    Ok(Nginx(nginx))
}

/// A nicflow request on the testbed's daemon, failing on an error answer.
fn nicflow_req(tb: &Testbed, req: &Request) -> anyhow::Result<()> {
    let sock = tb.nicflow_socket().context("not a nicflow testbed")?;
    let r = nicflow::control::daemon::request(&sock, req)?;
    if !r.ok {
        bail!("{}", r.error.unwrap_or_else(|| "failed".into()));
    }
    Ok(())
}

/// Does `curl URL` from client 0 get a 200 within `within`?
fn http_ok(tb: &Testbed, url: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let ok = sys::run(&mut tb.client_cmd(
            0,
            &[
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "1",
                url,
            ],
        ))
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "200")
        .unwrap_or(false);
        if ok {
            return true;
        }
        if Instant::now() >= deadline || forward::interrupted() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lab_up(
    scenario: Scenario,
    engine: CtEngine,
    offload: HostOffload,
    nft_mode: &mut String,
) -> anyhow::Result<EngineSetup> {
    let spec = TestbedSpec {
        rules: engine.rules(scenario),
        host_offload: offload,
        ..TestbedSpec::new(engine.engine(), scenario.pairs(), "ctk")
    };
    let tb = Testbed::up(&spec)?;
    let dir = tb.scratch_dir()?;
    let c = tb.client(0).clone();
    sys::sysctl(Some(&c.netns), "net.ipv4.ip_local_port_range", "1024 65535")?;
    sys::sysctl(Some(&c.netns), "net.ipv4.tcp_tw_reuse", "1")?;
    match scenario {
        Scenario::Firewall => {
            if engine == CtEngine::LinuxBridgeNft {
                let (port, ip) = (c.port.clone(), c.ip4.to_string());
                let (_, mode) =
                    host_tools::nft_stateful_firewall(tb.switch_netns(), &dir, |bridge| {
                        nft_rules(bridge, &port, &ip)
                    })?;
                *nft_mode = mode;
            }
        }
        Scenario::Lb => {
            if engine.openflow() {
                tb.add_groups(&lb_groups())
                    .context("adding the load balancer's group")?;
                tb.add_flows(&lb_flows()[1..])
                    .context("adding the load balancer's rules")?;
            } else if engine == CtEngine::LinuxBridgeNft {
                let ns = tb.switch_netns().to_string();
                // `ip -n NS addr add LB_BRIDGE_IP dev br0`.
                let (ip, prefix) = os::addr::parse_cidr(LB_BRIDGE_IP)?;
                rtnl_in(&ns, |rt| {
                    os::addr::add(rt, testbed::BRIDGE, ip, prefix, false)
                })?;
                sys::sysctl(Some(&ns), "net.ipv4.ip_forward", "1")?;
                sys::sysctl(Some(&ns), "net.bridge.bridge-nf-call-iptables", "1")
                    .context("br_netfilter sysctl")?;
                let backends: Vec<_> = (1..=LB_BACKENDS).map(backend_ip).collect();
                host_tools::nft_load(&ns, &nft_lb_rules(VIP, &backends), &dir)
                    .context("loading the nftables load balancer")?;
                *nft_mode = NFT_LB_MODE.into();
            }
            // `ip -n NS neigh replace VIP lladdr VIP_MAC dev IFACE nud
            // permanent`.
            let (vip, mac) = (VIP.parse()?, os::link::parse_mac(VIP_MAC)?);
            rtnl_in(&c.netns, |rt| {
                os::neigh::replace_permanent(rt, &c.iface, vip, mac)
            })?;
        }
    }
    let offload = match engine {
        CtEngine::NicflowNooffload => Some("none"),
        CtEngine::NicflowProfile(p) => Some(p.offload()),
        _ => None,
    };
    if let Some(value) = offload {
        nicflow_req(
            &tb,
            &Request::Set {
                bridge: testbed::BRIDGE.into(),
                key: "offload".into(),
                value: value.into(),
            },
        )
        .with_context(|| format!("nicflow set br0 offload={value}"))?;
    }
    let mut nginx = Vec::new();
    let servers = match scenario {
        Scenario::Firewall => 1,
        Scenario::Lb => LB_BACKENDS,
    };
    for i in 0..servers {
        let s = tb.server(i).clone();
        let sub = if servers == 1 {
            dir.clone()
        } else {
            dir.join(&s.name)
        };
        nginx.push(start_nginx(&s, &sub, scenario == Scenario::Lb)?);
    }
    let url = match scenario {
        Scenario::Firewall => format!("http://{}/", tb.server(0).ip4),
        Scenario::Lb => format!("http://{VIP}/"),
    };
    let lab = EngineSetup {
        scenario,
        engine,
        url,
        tb,
        nginx,
        dir,
    };
    match scenario {
        Scenario::Firewall => {
            if !lab.tb.ping(0) {
                bail!("{}: c1 does not reach s1 (ping)", engine.name());
            }
        }
        Scenario::Lb => {
            if !http_ok(&lab.tb, &lab.url, Duration::from_secs(10)) {
                bail!("{}: c1 gets no answer from {}", engine.name(), lab.url);
            }
        }
    }
    Ok(lab)
}

/// Every backend's (accepts, requests), or None if one could not be read.
fn backend_counters(lab: &EngineSetup) -> Option<Vec<(u64, u64)>> {
    if lab.scenario != Scenario::Lb {
        return None;
    }
    lab.tb.servers()[..LB_BACKENDS]
        .iter()
        .map(|s| stub_read(&s.netns))
        .collect()
}

/// One wrk run with CPU accounting.
fn measure(
    lab: &EngineSetup,
    mode: Mode,
    conns: usize,
    threads: usize,
    seconds: f64,
    rep: usize,
) -> Sample {
    let mut s = Sample {
        scenario: lab.scenario,
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
        backend_requests: Vec::new(),
        backend_conns: Vec::new(),
        offload: None,
    };
    let sock = lab
        .engine
        .nicflow_tables()
        .then(|| lab.tb.nicflow_socket())
        .flatten();
    let counts = sock
        .as_deref()
        .and_then(|s| hwprofile::read_counts(s, testbed::BRIDGE).ok());
    let c = conns.to_string();
    let d = format!("{seconds}s");
    let t = format!("-t{}", threads.clamp(1, conns.max(1)));
    let mut argv = vec!["wrk", &t, "-c", &c, "-d", &d, "--timeout", "2s"];
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
    let mut procs: Vec<(String, u32)> = lab
        .nginx
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("nginx{}", i + 1), n.0.id()))
        .collect();
    if let Some(p) = lab.tb.switch_pid() {
        procs.push(("switch".to_string(), p));
    }
    let before = backend_counters(lab);
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
    if let (Some(sock), Some(before)) = (&sock, counts) {
        s.offload =
            hwprofile::sample_after(sock, testbed::BRIDGE, lab.engine.profile(), before).ok();
    }
    let after = backend_counters(lab);
    if let (Some(x), Some(y)) = (before, after) {
        // Each reading counts itself: the one after is one more
        // connection and request than wrk made.
        s.backend_conns = x
            .iter()
            .zip(&y)
            .map(|(a, b)| b.0.saturating_sub(a.0).saturating_sub(1))
            .collect();
        s.backend_requests = x
            .iter()
            .zip(&y)
            .map(|(a, b)| b.1.saturating_sub(a.1).saturating_sub(1))
            .collect();
    }
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
    let split = if s.backend_requests.is_empty() {
        String::new()
    } else {
        format!(", backends {}", report::join(&s.backend_requests, "/"))
    };
    match (&s.wrk, &s.error) {
        (Some(w), _) => eprintln!(
            "[conntrack] {} {} {:?} c={} rep {}: {:.0}/s, machine {:.2} cores, switch {}, errors {}{split}",
            s.scenario.name(),
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
            "[conntrack] {} {} {:?} c={} rep {}: {e}",
            s.scenario.name(),
            s.engine.name(),
            s.mode,
            s.connections,
            s.rep
        ),
        _ => {}
    }
}

/// Tracker state at the end of the run.
fn end_state(lab: &EngineSetup) -> serde_json::Value {
    match lab.engine {
        CtEngine::Nicflow | CtEngine::NicflowNooffload | CtEngine::NicflowProfile(_) => {
            let Some(sock) = lab.tb.nicflow_socket() else {
                return serde_json::Value::Null;
            };
            let ct = match nicflow::control::daemon::request(
                &sock,
                &Request::ConntrackStats {
                    bridge: testbed::BRIDGE.into(),
                },
            ) {
                Ok(r) => serde_json::json!({ "conntrack-stats": r.data, "text": r.text }),
                Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
            };
            // The switch's `stats` too: set-up refusals by reason,
            // timeouts, installs and removals, the engines' packets and
            // drops, which explain a rate the tracker's counts do not.
            let stats = match nicflow::control::daemon::request(&sock, &Request::Stats) {
                Ok(r) => serde_json::json!({ "data": r.data, "text": r.text }),
                Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
            };
            match ct {
                serde_json::Value::Object(mut m) => {
                    m.insert("stats".into(), stats);
                    serde_json::Value::Object(m)
                }
                other => other,
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

/// What one scenario produced.
#[derive(Default)]
struct ScenarioOut {
    samples: Vec<Sample>,
    setup_errors: Vec<(CtEngine, String)>,
    end_state: Vec<(CtEngine, serde_json::Value)>,
    nft_mode: String,
}

/// Bring up every engine's lab for `scenario`, warm up, measure the
/// interleaved repetitions, record the end state, tear down.
#[allow(clippy::too_many_arguments)]
fn run_scenario(
    scenario: Scenario,
    engines: &[CtEngine],
    conns: &[usize],
    threads: usize,
    modes: &[Mode],
    seconds: f64,
    reps: usize,
    offload: HostOffload,
) -> ScenarioOut {
    let mut out = ScenarioOut::default();
    let tag = scenario.name();
    let mut labs = Vec::new();
    for &e in engines {
        if forward::interrupted() {
            break;
        }
        eprintln!("[conntrack] {tag} {}: setting up", e.name());
        let mut nft_mode = String::new();
        match lab_up(scenario, e, offload, &mut nft_mode) {
            Ok(l) => labs.push(l),
            Err(err) => {
                eprintln!("[conntrack] {tag} {}: {err:#}", e.name());
                out.setup_errors.push((e, format!("{err:#}")));
            }
        }
        if !nft_mode.is_empty() {
            out.nft_mode = nft_mode;
        }
    }
    // Warm-up: ARP, caches, nginx and wrk paths, one second of each mode.
    for l in &labs {
        for &mode in modes {
            if !forward::interrupted() {
                let _ = measure(l, mode, conns[0], threads, 1.0, 0);
            }
        }
    }
    'reps: for rep in 0..reps {
        for &c in conns {
            for &mode in modes {
                for l in &labs {
                    if forward::interrupted() {
                        break 'reps;
                    }
                    let s = measure(l, mode, c, threads, seconds, rep);
                    log_sample(&s);
                    out.samples.push(s);
                }
            }
        }
    }
    for l in &labs {
        out.end_state.push((l.engine, end_state(l)));
    }
    for l in labs {
        drop(l.nginx);
        if let Err(e) = l.tb.down() {
            eprintln!("[conntrack] teardown: {e:#}");
        }
    }
    out
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    report::cli(&args.run, "conntrack", || run(args), figures, markdown)
}

fn run(args: &Args) -> anyhow::Result<Results> {
    let scenarios = parse_scenarios(&args.scenario)?;
    let requested = args.engines.as_deref().map(parse_engines).transpose()?;
    let mut plan = Vec::new();
    let mut notes = Vec::new();
    for &s in &scenarios {
        let (run, left) = scenario_engines(s, requested.as_deref());
        if !left.is_empty() {
            notes.push(format!(
                "scenario {}: {} left out (the load balancer needs NAT rules)",
                s.name(),
                report::join(&left.iter().map(|e| e.name()).collect::<Vec<_>>(), ", ")
            ));
        }
        if run.is_empty() {
            bail!("scenario {}: none of the engines given runs it", s.name());
        }
        plan.push((s, run));
    }
    let all: Vec<CtEngine> = plan.iter().flat_map(|(_, e)| e.clone()).collect();
    let (conns, seconds, reps) = if args.run.quick {
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
    let threads = args.wrk_threads;
    if threads == 0 || conns.iter().any(|&c| c < threads) {
        bail!("--wrk-threads {threads}: give 1 to the smallest --connections");
    }
    let offload = testbed::parse_host_offload(&args.host_offload)?;
    let modes = parse_modes(&args.modes)?;
    for t in ["wrk", "nginx"] {
        if !have(t) {
            bail!("`{t}` is missing: apt-get install wrk nginx-light");
        }
    }
    if scenarios.contains(&Scenario::Lb) && !have("curl") {
        bail!("`curl` is missing (scenario lb reads the backends' counters): apt-get install curl");
    }
    if all.contains(&CtEngine::LinuxBridgeNft) && !have("nft") {
        bail!("`nft` is missing: apt-get install nftables");
    }
    forward::install_signal_handlers();
    let mut tools = vec![
        tool_version(&["wrk", "--version"]),
        tool_version(&["nginx", "-v"]),
    ];
    if all.contains(&CtEngine::LinuxBridgeNft) {
        tools.push(tool_version(&["nft", "--version"]));
    }
    if all.contains(&CtEngine::Ovs) {
        tools.push(tool_version(&["ovs-vswitchd", "--version"]));
    }
    let runs = all.len() * conns.len() * modes.len() * reps;
    eprintln!(
        "[conntrack] {runs} wrk runs of {seconds} s in {} scenario(s): about {:.0} min",
        plan.len(),
        (runs as f64 * (seconds + 0.5) + all.len() as f64 * 10.0) / 60.0
    );
    let mut r = Results {
        machine: super::machine_description(),
        load_start: host_tools::loadavg(),
        load_end: String::new(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        scenarios: scenarios.clone(),
        engines: Vec::new(),
        connections: conns.clone(),
        seconds,
        reps,
        wrk_threads: threads,
        host_offload: offload,
        tools,
        nft_mode: String::new(),
        nft_rules: String::new(),
        firewall: FIREWALL.iter().map(|s| s.to_string()).collect(),
        samples: Vec::new(),
        setup_errors: Vec::new(),
        notes,
        end_state: Vec::new(),
        lb: None,
    };
    for (s, engines) in plan {
        if forward::interrupted() {
            break;
        }
        let out = run_scenario(s, &engines, &conns, threads, &modes, seconds, reps, offload);
        r.samples.extend(out.samples);
        match s {
            Scenario::Firewall => {
                r.engines = engines;
                r.setup_errors = out.setup_errors;
                r.end_state = out.end_state;
                if !out.nft_mode.is_empty() {
                    let c = testbed::host_ip4(testbed::Role::Client, 1).to_string();
                    r.nft_rules = nft_rules(out.nft_mode.starts_with("bridge"), "p1", &c);
                    r.nft_mode = out.nft_mode;
                }
            }
            Scenario::Lb => {
                let backends: Vec<_> = (1..=LB_BACKENDS).map(backend_ip).collect();
                r.lb = Some(LbRun {
                    engines,
                    vip: VIP.into(),
                    vip_mac: VIP_MAC.into(),
                    backends: backends.iter().map(|b| b.to_string()).collect(),
                    flows: lb_flows(),
                    groups: lb_groups(),
                    nft_rules: if out.nft_mode.is_empty() {
                        String::new()
                    } else {
                        nft_lb_rules(VIP, &backends)
                    },
                    nft_mode: out.nft_mode,
                    setup_errors: out.setup_errors,
                    end_state: out.end_state,
                });
            }
        }
    }
    r.load_end = host_tools::loadavg();
    Ok(r)
}

fn med(
    r: &Results,
    sc: Scenario,
    e: CtEngine,
    m: Mode,
    c: usize,
    f: &dyn Fn(&Sample) -> Option<f64>,
) -> Option<f64> {
    let mut v: Vec<f64> = r
        .samples
        .iter()
        .filter(|s| {
            s.scenario == sc
                && s.engine == e
                && s.mode == m
                && s.connections == c
                && s.wrk.is_some()
        })
        .filter_map(f)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| super::median(&mut v))
}

fn rate(s: &Sample) -> Option<f64> {
    s.wrk.as_ref().map(|w| w.rate)
}

fn figures(r: &Results) -> Vec<Figure> {
    let mut figs = Vec::new();
    for sc in r.scenarios() {
        let engines = r.engines_of(sc);
        let (id, what) = match sc {
            Scenario::Firewall => ("", String::new()),
            Scenario::Lb => ("lb-", "load balancer: ".to_string()),
        };
        let fig = |name: &str, m: Mode, y: &str, f: &dyn Fn(&Sample) -> Option<f64>| Figure {
            id: format!("{id}{name}"),
            title: format!("{what}{y} against concurrent connections"),
            x_label: "concurrent wrk connections".into(),
            y_label: y.into(),
            log_x: false,
            series: engines
                .iter()
                .map(|&e| Series {
                    name: e.name().into(),
                    points: r
                        .connections
                        .iter()
                        .map(|&c| (c as f64, med(r, sc, e, m, c, f)))
                        .collect(),
                })
                .collect(),
        };
        figs.push(fig("cps", Mode::Cps, "new connections/s", &rate));
        figs.push(fig("tps", Mode::Tps, "transactions/s", &rate));
        figs.push(fig(
            "cps-machine-cpu",
            Mode::Cps,
            "machine CPU per connection (µs)",
            &Sample::machine_us,
        ));
    }
    figs
}

fn ratio_cell(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "—".into(),
    }
}

/// Requests per backend over all of a point's repetitions.
fn backend_totals(r: &Results, sc: Scenario, e: CtEngine, mode: Mode, c: usize) -> Vec<u64> {
    let mut tot: Vec<u64> = Vec::new();
    for s in r
        .samples
        .iter()
        .filter(|s| s.scenario == sc && s.engine == e && s.mode == mode && s.connections == c)
    {
        if tot.len() < s.backend_requests.len() {
            tot.resize(s.backend_requests.len(), 0);
        }
        for (t, x) in tot.iter_mut().zip(&s.backend_requests) {
            *t += x;
        }
    }
    tot
}

/// `34/33/33` (percent of the requests per backend), or a dash.
fn split_cell(counts: &[u64]) -> String {
    match split_percent(counts) {
        Some(p) => p
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join("/"),
        None => "—".into(),
    }
}

/// One mode's table for one scenario: a row per (connections, engine),
/// ratio columns against each of `refs`, and with `split` the share of
/// requests per backend.
fn mode_table(
    r: &Results,
    sc: Scenario,
    mode: Mode,
    refs: &[(&str, CtEngine)],
    split: bool,
) -> String {
    let unit = if mode == Mode::Cps {
        "machine µs/conn"
    } else {
        "machine µs/txn"
    };
    let vs: Vec<String> = refs.iter().map(|(n, _)| format!("vs {n}")).collect();
    let mut head: Vec<(&str, bool)> = vec![
        ("conns", true),
        ("engine", false),
        ("median /s", true),
        ("min-max /s", true),
    ];
    head.extend(vs.iter().map(|v| (v.as_str(), true)));
    head.extend([
        ("machine cores", true),
        (unit, true),
        ("switch cores", true),
        ("switch µs", true),
        ("nginx cores", true),
        ("wrk cores", true),
        ("latency avg ms", true),
        ("errors (read)", true),
    ]);
    if split {
        head.push(("requests per backend %", true));
    }
    let mut rows = Vec::new();
    for &c in &r.connections {
        let bases: Vec<Option<f64>> = refs
            .iter()
            .map(|(_, e)| med(r, sc, *e, mode, c, &rate))
            .collect();
        for e in r.engines_of(sc) {
            let ok: Vec<&Sample> = r
                .samples
                .iter()
                .filter(|s| {
                    s.scenario == sc && s.engine == e && s.mode == mode && s.connections == c
                })
                .collect();
            let rates: Vec<f64> = ok.iter().filter_map(|s| rate(s)).collect();
            if rates.is_empty() {
                let why = ok
                    .iter()
                    .find_map(|s| s.error.clone())
                    .or_else(|| r.setup_error(sc, e))
                    .unwrap_or_else(|| "not measured".into());
                let mut row = vec![c.to_string(), e.name().into(), why.replace('|', "/")];
                row.resize(head.len(), String::new());
                rows.push(row);
                continue;
            }
            let lo = rates.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = rates.iter().cloned().fold(0.0, f64::max);
            let med_rate = med(r, sc, e, mode, c, &rate);
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
            let mut row = vec![
                c.to_string(),
                e.name().into(),
                report::cell(med_rate, 0),
                format!("{lo:.0}-{hi:.0}"),
            ];
            row.extend(bases.iter().map(|&b| ratio_cell(med_rate, b)));
            row.extend([
                report::cell(med(r, sc, e, mode, c, &|s| Some(s.machine_cores)), 2),
                report::cell(med(r, sc, e, mode, c, &Sample::machine_us), 1),
                report::cell(med(r, sc, e, mode, c, &|s| s.switch_cores), 2),
                report::cell(med(r, sc, e, mode, c, &Sample::switch_us), 1),
                report::cell(med(r, sc, e, mode, c, &|s| s.nginx_cores), 2),
                // Near 1.00 per wrk thread is the client's limit (why the
                // default is two threads).
                report::cell(
                    med(r, sc, e, mode, c, &|s| {
                        Some(s.wrk_cores).filter(|w| w.is_finite())
                    }),
                    2,
                ),
                report::cell(
                    med(r, sc, e, mode, c, &|s| {
                        s.wrk.as_ref().map(|w| w.latency_avg_us / 1e3)
                    }),
                    2,
                ),
                format!("{errs} ({read})"),
            ]);
            if split {
                row.push(split_cell(&backend_totals(r, sc, e, mode, c)));
            }
            rows.push(row);
        }
    }
    report::table(&head, &rows)
}

/// The nicflow engines' offloaded share and refused flows, per mode and
/// connection count.
fn offload_table(m: &mut String, r: &Results, sc: Scenario) {
    let nf: Vec<CtEngine> = r
        .engines_of(sc)
        .into_iter()
        .filter(|e| e.nicflow_tables())
        .collect();
    if nf.is_empty() {
        return;
    }
    let head = [
        ("mode", false),
        ("conns", true),
        ("engine", false),
        ("median /s", true),
        ("offloaded", true),
        ("frames", true),
        ("machine cores", true),
        ("machine µs/op", true),
        ("switch cores", true),
        ("dp flows (kernel)", true),
        ("established in kernel", true),
        ("refused by profile: top reasons", false),
    ];
    let mut rows = Vec::new();
    for mode in [Mode::Cps, Mode::Tps] {
        for &c in &r.connections {
            for &e in &nf {
                let ss: Vec<&OffloadSample> = r
                    .samples
                    .iter()
                    .filter(|s| {
                        s.scenario == sc
                            && s.engine == e
                            && s.mode == mode
                            && s.connections == c
                            && s.wrk.is_some()
                    })
                    .filter_map(|s| s.offload.as_ref())
                    .collect();
                let Some(o) = hwprofile::combine(&ss) else {
                    continue;
                };
                rows.push(vec![
                    format!("{mode:?}").to_lowercase(),
                    c.to_string(),
                    e.name().into(),
                    report::cell(med(r, sc, e, mode, c, &rate), 0),
                    hwprofile::pct(o.frames.kernel_share()),
                    o.frames.total().to_string(),
                    report::cell(med(r, sc, e, mode, c, &|s| Some(s.machine_cores)), 2),
                    report::cell(med(r, sc, e, mode, c, &Sample::machine_us), 1),
                    report::cell(med(r, sc, e, mode, c, &|s| s.switch_cores), 2),
                    format!("{} ({})", o.dp.flows, o.dp.kernel_flows),
                    o.dp.established.to_string(),
                    o.dp.profile_cell(e.profile().is_some()),
                ]);
            }
        }
    }
    let _ = writeln!(m, "### Offload (nicflow engines)\n");
    let _ = writeln!(m, "{}", report::table(&head, &rows));
    let _ = writeln!(
        m,
        "{} *dp flows (kernel)*: megaflows after a run (those in a kernel engine); \
         *established in kernel*: established-connection directions in the kernel engine \
         (`established:` entries of `dump-dp-flows`), largest seen after a run.\n",
        hwprofile::METHOD
    );
}

fn end_state_list(m: &mut String, title: &str, list: &[(CtEngine, serde_json::Value)]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(m, "\n{title}\n");
    for (e, v) in list {
        let t = v
            .get("text")
            .and_then(|t| t.as_str())
            .map(|s| s.trim().replace('\n', "; "))
            .unwrap_or_else(|| v.to_string());
        let t: String = t.chars().take(600).collect();
        let _ = writeln!(m, "- {}: {t}", e.name());
        // The switch's kernel-conntrack and engine lines from `stats`.
        let stats = v.pointer("/stats/text").and_then(|t| t.as_str());
        for line in stats.into_iter().flat_map(str::lines).filter(|l| {
            let l = l.trim_start();
            l.starts_with("conntrack in kernel")
                || l.starts_with("engines:")
                || l.starts_with("drops:")
        }) {
            let _ = writeln!(m, "  - {}", line.trim());
        }
    }
    let _ = writeln!(m);
}

fn engine_what(sc: Scenario, e: CtEngine) -> &'static str {
    match (sc, e) {
        (Scenario::Firewall, CtEngine::Nicflow) => {
            "nicflow with the defaults (nicflow-tc) and Open vSwitch's stateful firewall table below; the first new TCP connection's SYN goes through the tracker in userspace, which sets the connection up in the TC engine (both directions; `NICFLOW_CT_SETUP=0` in the daemon's environment turns that off) and leaves a template from which the TC program sets later connections up itself, telling the tracker afterwards (`NICFLOW_CT_SETUP_BPF=0` turns that off: then every SYN goes up); the rest of each connection runs there"
        }
        (Scenario::Lb, CtEngine::Nicflow) => {
            "nicflow with the defaults (nicflow-tc), the load-balancer tables and group below; a new connection's SYN in userspace, which sets the connection up in the TC engine with the NAT rewrite (`NICFLOW_CT_SETUP_NAT=0` turns that off: then established connections, 24 packets and more, move there)"
        }
        (_, CtEngine::NicflowNooffload) => {
            "the same nicflow switch with `nicflow set br0 offload=none`: every packet through the userspace datapath"
        }
        (_, CtEngine::NicflowNoct) => {
            "the same nicflow switch with `in_port=p1,actions=output:p2` and back (no ct)"
        }
        (Scenario::Firewall, CtEngine::Ovs) => {
            "Open vSwitch, userspace datapath (netdev, ports of type system read through netdev-linux), the same table (OVS userspace conntrack)"
        }
        (Scenario::Lb, CtEngine::Ovs) => {
            "Open vSwitch, userspace datapath (netdev), the same tables and group (`ovs-ofctl -O OpenFlow13 add-groups`; OVS userspace conntrack and NAT)"
        }
        (Scenario::Firewall, CtEngine::LinuxBridgeNft) => {
            "Linux bridge + nftables stateful rules below"
        }
        (Scenario::Lb, CtEngine::LinuxBridgeNft) => {
            "Linux bridge + nftables `dnat to numgen inc mod 3 map {...}` below (round robin)"
        }
        (_, CtEngine::LinuxBridge) => "Linux bridge, no rules (the reference)",
        (_, CtEngine::NicflowProfile(_)) => {
            "the `nicflow` switch with `nicflow set br0 offload=profile:NAME`: the TC engine holds only the flows (and established connections) that NIC model would; an emulation on this host, not a hardware measurement"
        }
    }
}

fn firewall_md(r: &Results, m: &mut String) {
    let sc = Scenario::Firewall;
    let _ = writeln!(
        m,
        "## Scenario firewall\n\n\
         Document 003, table VII (cps and tps through a connection-tracking switch): client c1 \
         (port p1) -> switch -> server s1 (port p2), one namespace each. Ratios are against \
         `linux-bridge` (no rules) in the same run.\n"
    );
    let _ = writeln!(m, "Engines:\n");
    for &e in &r.engines {
        let _ = writeln!(m, "- `{}`: {}", e.name(), engine_what(sc, e));
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
        let _ = writeln!(m, "### {}\n", mode.title());
        let t = mode_table(
            r,
            sc,
            mode,
            &[("linux-bridge", CtEngine::LinuxBridge)],
            false,
        );
        let _ = writeln!(m, "{t}");
    }
    offload_table(m, r, sc);
    let _ = writeln!(
        m,
        "*switch µs*: the switch process's CPU per {} / {} (nicflow daemon, ovs-vswitchd; the \
         kernel bridge's work is softirq, inside *machine*). It includes the softirq a send \
         runs at once in the switch's context: for frames the switch sends from userspace to a \
         host's veth, the receiving host's TCP stack (about half of nicflow's daemon CPU in \
         connections/s runs, by `perf`). *errors*: wrk connect + write + \
         timeout errors and non-2xx responses over all repetitions; in parentheses wrk's read \
         errors, which with `Connection: close` mostly count the server's close.\n",
        Mode::Cps.unit(),
        Mode::Tps.unit()
    );
    // The issue's targets.
    let _ = writeln!(m, "### Targets (issue 13), same run\n");
    let mut rows = Vec::new();
    for &c in &r.connections {
        let g = |e, mode| med(r, sc, e, mode, c, &rate);
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
        // What no stateful nicflow can beat on this machine: itself
        // without ct (the hosts' share of the cores is the limit).
        let noct = g(CtEngine::NicflowNoct, Mode::Cps);
        rows.push(vec![
            c.to_string(),
            "ceiling: nicflow-noct cps / linux-bridge-nft".into(),
            ratio_cell(noct, g(CtEngine::LinuxBridgeNft, Mode::Cps)),
        ]);
        rows.push(vec![
            c.to_string(),
            "ceiling: nicflow-noct cps / ovs".into(),
            ratio_cell(noct, g(CtEngine::Ovs, Mode::Cps)),
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
        "### Document 003, table VII (BlueField-2 / BlueField-3, thousands)\n\n\
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
    let fails: Vec<String> = r
        .setup_errors
        .iter()
        .map(|(e, w)| format!("{}: {w}", e.name()))
        .collect();
    report::write_list(m, "Setup failures (firewall)", &fails);
    end_state_list(m, "### Tracker state at the end (firewall)", &r.end_state);
}

fn lb_md(r: &Results, m: &mut String) {
    let sc = Scenario::Lb;
    let Some(lb) = &r.lb else {
        let _ = writeln!(m, "## Scenario lb\n\nNot run (interrupted before it).\n");
        return;
    };
    let backends = lb
        .backends
        .iter()
        .enumerate()
        .map(|(i, b)| format!("s{} {b}", i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        m,
        "## Scenario lb: DNAT load balancer to {} backends\n\n\
         Issue 13 / document 003's OVS-conntrack load balancer: client c1 (port p1) opens \
         `http://{}/`, a virtual address no host owns (c1 has a static neighbour entry \
         `{} lladdr {} nud permanent`, the same for every engine). The switch sends each new \
         connection to one of the backends ({backends}; ports p2, p4, p6; nginx in each, as in \
         the firewall scenario) and translates the replies back. The testbed's hosts c2 and c3 \
         are idle. Ratios are against nftables and against OVS in the same run. *requests per \
         backend*: the share of the requests each backend's nginx counted (`stub_status` read \
         before and after every run, all repetitions summed), s1/s2/s3. With keep-alive the \
         split follows the few persistent connections, so it is uneven where the switch picks \
         a backend by a hash of the connection (nicflow's and OVS's `select` group); nftables' \
         `numgen inc` takes turns.\n",
        lb.backends.len(),
        lb.vip,
        lb.vip,
        lb.vip_mac
    );
    let _ = writeln!(m, "Engines:\n");
    for &e in &lb.engines {
        let _ = writeln!(m, "- `{}`: {}", e.name(), engine_what(sc, e));
    }
    let port = |l: &str| {
        let mut l = l.replace("{c1.ip4}", "198.18.1.1").replace("{c1}", "p1");
        for i in 1..=lb.backends.len() {
            l = l
                .replace(&format!("{{s{i}.ip4}}"), &lb.backends[i - 1])
                .replace(&format!("{{s{i}.mac}}"), &format!("<s{i} MAC>"))
                .replace(&format!("{{s{i}}}"), &format!("p{}", 2 * i));
        }
        l
    };
    let _ = writeln!(m, "\nGroup and flow table (nicflow, ovs):\n\n```");
    for l in lb.groups.iter().chain(&lb.flows) {
        let _ = writeln!(m, "{}", port(l));
    }
    let _ = writeln!(m, "```\n");
    if !lb.nft_rules.is_empty() {
        let _ = writeln!(
            m,
            "nftables ({}), in the switch namespace:\n\n```\n{}```\n",
            lb.nft_mode, lb.nft_rules
        );
    }
    let refs = [("nft", CtEngine::LinuxBridgeNft), ("ovs", CtEngine::Ovs)];
    for mode in [Mode::Cps, Mode::Tps] {
        let _ = writeln!(m, "### Load balancer: {}\n", mode.title());
        let _ = writeln!(m, "{}", mode_table(r, sc, mode, &refs, true));
    }
    offload_table(m, r, sc);
    let mut rows = Vec::new();
    for &c in &r.connections {
        for e in [CtEngine::Nicflow, CtEngine::NicflowNooffload] {
            if !lb.engines.contains(&e) {
                continue;
            }
            let mut row = vec![c.to_string(), e.name().to_string()];
            for mode in [Mode::Cps, Mode::Tps] {
                let v = med(r, sc, e, mode, c, &rate);
                for (_, b) in refs {
                    row.push(ratio_cell(v, med(r, sc, b, mode, c, &rate)));
                }
            }
            rows.push(row);
        }
    }
    let _ = writeln!(
        m,
        "### Load balancer: nicflow against nftables and OVS, same run\n"
    );
    let _ = writeln!(
        m,
        "{}",
        report::table(
            &[
                ("conns", true),
                ("engine", false),
                ("cps vs nft", true),
                ("cps vs ovs", true),
                ("tps vs nft", true),
                ("tps vs ovs", true),
            ],
            &rows
        )
    );
    // Did every backend get traffic?
    let mut missing = Vec::new();
    for &c in &r.connections {
        for &e in &lb.engines {
            for mode in [Mode::Cps, Mode::Tps] {
                let t = backend_totals(r, sc, e, mode, c);
                let idle: Vec<String> = t
                    .iter()
                    .enumerate()
                    .filter(|(_, &n)| n == 0)
                    .map(|(i, _)| format!("s{}", i + 1))
                    .collect();
                if t.is_empty() {
                    missing.push(format!(
                        "{} {:?} c={c}: no backend counters read",
                        e.name(),
                        mode
                    ));
                } else if !idle.is_empty() {
                    missing.push(format!(
                        "{} {:?} c={c}: {} served no request",
                        e.name(),
                        mode,
                        idle.join(", ")
                    ));
                }
            }
        }
    }
    if missing.is_empty() && !lb.engines.is_empty() {
        let _ = writeln!(
            m,
            "Every backend served requests on every engine and point.\n"
        );
    }
    report::write_list(m, "Backends without traffic", &missing);
    let fails: Vec<String> = lb
        .setup_errors
        .iter()
        .map(|(e, w)| format!("{}: {w}", e.name()))
        .collect();
    report::write_list(m, "Setup failures (lb)", &fails);
    end_state_list(m, "### Tracker state at the end (lb)", &lb.end_state);
}

fn markdown(r: &Results, figs: &[Figure]) -> String {
    let mut m = String::new();
    let scenarios = r.scenarios();
    let _ = writeln!(m, "# nicflow bench conntrack\n");
    let _ = writeln!(
        m,
        "{}",
        report::machine_section("hardware counters not used")
    );
    let _ = write!(m, "Load average at the start: {}", r.load_start);
    if !r.load_end.is_empty() {
        let _ = write!(m, "; at the end: {}", r.load_end);
    }
    let _ = writeln!(m, ".\n");
    let _ = writeln!(m, "Tools: {}.\n", r.tools.join("; "));
    let _ = writeln!(
        m,
        "Scenarios: {}. nginx in every server namespace answers each request with a {}-byte \
         body (`return 200`, one process); `wrk -t{}` in c1 runs {} s per point: \
         **connections/s** with `-H 'Connection: close'` (every request a new TCP connection), \
         **transactions/s** with keep-alive. Medians of {} repetition(s), repetitions \
         interleaved across engines (all labs of a scenario up for the whole scenario), after a \
         1-s warm-up of each mode. Host offload: {:?} (`off` = `ethtool -K eth0 tx off`: \
         finished checksums). CPU: machine-wide busy cores from /proc/stat (wrk, nginx, switch \
         and softirq share the machine's cores), the switch process from /proc/PID/stat.\n",
        scenarios
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", "),
        BODY.len() - 1,
        r.wrk_threads,
        r.seconds,
        r.reps,
        r.host_offload
    );
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    for sc in &scenarios {
        match sc {
            Scenario::Firewall => firewall_md(r, &mut m),
            Scenario::Lb => lb_md(r, &mut m),
        }
    }
    report::write_list(&mut m, "Notes", &r.notes);
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
        assert_eq!(
            CtEngine::NicflowNoct.rules(Scenario::Firewall),
            Rules::Explicit
        );
        let Rules::Custom(fw) = CtEngine::Ovs.rules(Scenario::Firewall) else {
            panic!("ovs runs the firewall")
        };
        assert_eq!(fw.len(), 7);
        assert!(fw[4].contains("in_port={c1}") && fw[4].ends_with("output:{s1}"));
        let n = nft_rules(false, "p1", "198.18.1.1");
        assert!(n.contains("ip saddr 198.18.1.1 accept") && n.contains("policy drop"));
        assert!(nft_rules(true, "p1", "x").contains("iifname \"p1\""));
        let conf = nginx_conf(Path::new("/tmp/x"), "198.18.2.1", false);
        assert!(conf.contains("listen 198.18.2.1:80"), "{conf}");
        assert!(!conf.contains("stub_status"), "{conf}");
        let conf = nginx_conf(Path::new("/tmp/x"), "198.18.2.2", true);
        assert!(conf.contains("listen 127.0.0.1:8081;"), "{conf}");
        assert!(conf.contains("location / { stub_status; }"), "{conf}");
        // Braces balance: the stub server sits inside http { }.
        assert_eq!(conf.matches('{').count(), conf.matches('}').count());
        assert!(conf.trim_end().ends_with("}\n}") || conf.trim_end().ends_with('}'));
        // nginx turns the escaped newline into one byte: 15 bytes sent.
        assert_eq!(BODY.len() - 1, 15);
    }

    #[test]
    fn modes_parse_in_order_once() {
        assert_eq!(parse_modes("cps").unwrap(), vec![Mode::Cps]);
        assert_eq!(
            parse_modes("tps, cps,tps").unwrap(),
            vec![Mode::Tps, Mode::Cps]
        );
        assert!(parse_modes("rps").is_err());
        assert!(parse_modes(" , ").is_err());
    }

    #[test]
    fn scenarios_and_their_engines() {
        assert_eq!(
            parse_scenarios("lb, firewall,lb").unwrap(),
            vec![Scenario::Lb, Scenario::Firewall]
        );
        assert!(parse_scenarios("nope").is_err());
        assert!(parse_scenarios(",").is_err());
        assert_eq!(Scenario::default(), Scenario::Firewall);
        assert_eq!(Scenario::Firewall.default_engines().len(), 5);
        assert_eq!(
            Scenario::Lb.default_engines(),
            vec![
                CtEngine::Nicflow,
                CtEngine::NicflowNooffload,
                CtEngine::Ovs,
                CtEngine::LinuxBridgeNft
            ]
        );
        let asked = parse_engines("nicflow-offload-none,linux-bridge,nft,nicflow-noct").unwrap();
        let (run, left) = scenario_engines(Scenario::Lb, Some(&asked));
        assert_eq!(
            run,
            vec![CtEngine::NicflowNooffload, CtEngine::LinuxBridgeNft]
        );
        assert_eq!(left, vec![CtEngine::LinuxBridge, CtEngine::NicflowNoct]);
        let (run, left) = scenario_engines(Scenario::Firewall, Some(&asked));
        assert_eq!((run.len(), left.len()), (4, 0));
        assert_eq!(scenario_engines(Scenario::Lb, None).1, vec![]);
        assert_eq!(CtEngine::NicflowNooffload.engine(), Engine::NicflowTc);
        let p = parse_engines("nicflow-tc,nicflow-bf2,nicflow-profile:cx7").unwrap();
        assert_eq!(
            p,
            vec![
                CtEngine::Nicflow,
                CtEngine::NicflowProfile(Profile::Bf2),
                CtEngine::NicflowProfile(Profile::Cx7)
            ]
        );
        assert_eq!(p[2].name(), "nicflow-cx7");
        assert_eq!(p[1].engine(), Engine::NicflowTc);
        assert!(p[1].tracks() && p[1].openflow() && p[1].nicflow_tables());
        assert_eq!(p[1].profile(), Some(Profile::Bf2));
        assert!(Scenario::Lb.supports(p[1]));
        let j = serde_json::to_string(&p[1]).unwrap();
        assert_eq!(serde_json::from_str::<CtEngine>(&j).unwrap(), p[1]);
        assert_eq!(CtEngine::NicflowNooffload.name(), "nicflow-nooffload");
        assert_eq!(
            serde_json::to_string(&CtEngine::NicflowNooffload).unwrap(),
            "\"nicflow-nooffload\""
        );
        // A sample of an older run (no scenario field) is a firewall one.
        let old = r#"{"engine":"ovs","mode":"cps","connections":32,"rep":0,"wrk":null,
            "machine_cores":1.0,"switch_cores":null,"nginx_cores":null,"wrk_cores":0.1,
            "wall_s":5.0,"error":null}"#;
        let s: Sample = serde_json::from_str(old).unwrap();
        assert_eq!(s.scenario, Scenario::Firewall);
        assert!(s.backend_requests.is_empty());
    }

    #[test]
    fn load_balancer_rules() {
        let flows = lb_flows();
        assert_eq!(flows[0], "table=0,priority=1,actions=drop");
        let Rules::Custom(first) = CtEngine::Nicflow.rules(Scenario::Lb) else {
            panic!("nicflow runs tables")
        };
        assert_eq!(
            first,
            vec![flows[0].clone()],
            "the group goes in before the rest"
        );
        assert_eq!(
            CtEngine::LinuxBridgeNft.rules(Scenario::Lb),
            Rules::Explicit
        );
        assert!(flows.contains(
            &"table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)".to_string()
        ));
        assert!(flows
            .iter()
            .any(|f| f.contains("nw_dst=198.18.0.100,tp_dst=80")
                && f.contains("ct_state=+trk+new")
                && f.ends_with("actions=group:1")));
        for i in 1..=3 {
            assert!(
                flows.contains(&format!(
                    "table=2,priority=10,ip,nw_dst={{s{i}.ip4}},actions=mod_dl_dst:{{s{i}.mac}},output:{{s{i}}}"
                )),
                "{flows:#?}"
            );
        }
        let g = lb_groups();
        assert_eq!(g.len(), 1);
        assert_eq!(
            g[0],
            "group_id=1,type=select,\
             bucket=actions=ct(commit,nat(dst=198.18.2.1:80),table=2),\
             bucket=actions=ct(commit,nat(dst=198.18.2.2:80),table=2),\
             bucket=actions=ct(commit,nat(dst=198.18.2.3:80),table=2)"
        );
        // Every rule and the group parse as nicflow's ovs-ofctl syntax.
        let mut names = nicflow_ofctl::NamedPorts::new();
        for k in 1..=6 {
            names.insert(format!("p{k}"), k);
        }
        let expand = |l: &str| {
            let mut l = l.replace("{c1.ip4}", "198.18.1.1").replace("{c1}", "p1");
            for i in 1..=3 {
                l = l
                    .replace(&format!("{{s{i}.ip4}}"), &format!("198.18.2.{i}"))
                    .replace(&format!("{{s{i}.mac}}"), "02:00:00:00:00:01")
                    .replace(&format!("{{s{i}}}"), &format!("p{}", 2 * i));
            }
            l
        };
        let text: Vec<String> = flows.iter().map(|f| expand(f)).collect();
        nicflow_ofctl::parse_flows(&text.join("\n"), &names).expect("lb flows parse");
        nicflow_ofctl::parse_groups(&g.join("\n"), &names).expect("lb group parses");
        let b: Vec<std::net::Ipv4Addr> = (1..=3).map(backend_ip).collect();
        let n = nft_lb_rules(VIP, &b);
        assert!(n.starts_with("table ip nicflow_lb {"), "{n}");
        assert!(
            n.contains("type nat hook prerouting priority dstnat;"),
            "{n}"
        );
        assert!(
            n.contains(
                "ip daddr 198.18.0.100 tcp dport 80 dnat to numgen inc mod 3 map \
                 { 0 : 198.18.2.1, 1 : 198.18.2.2, 2 : 198.18.2.3 }"
            ),
            "{n}"
        );
    }

    #[test]
    fn stub_status_and_split() {
        let page = "Active connections: 1 \nserver accepts handled requests\n 16630948 16630947 31070465 \nReading: 0 Writing: 1 Waiting: 0 \n";
        assert_eq!(
            parse_stub_status(page),
            Some((16630948, 16630947, 31070465))
        );
        assert_eq!(parse_stub_status("Active connections: 1\n"), None);
        assert_eq!(
            parse_stub_status("server accepts handled requests\n 1 2\n"),
            None
        );
        assert_eq!(
            parse_stub_status("server accepts handled requests\n 1 x 3\n"),
            None
        );
        assert_eq!(split_percent(&[0, 0, 0]), None);
        assert_eq!(split_percent(&[]), None);
        assert_eq!(split_percent(&[1, 1, 2]), Some(vec![25.0, 25.0, 50.0]));
        assert_eq!(split_cell(&[334, 333, 333]), "33/33/33");
        assert_eq!(split_cell(&[]), "—");
    }

    #[test]
    fn report_of_an_lb_run() {
        let sample = |e, mode, rate: f64, split: Vec<u64>| Sample {
            scenario: Scenario::Lb,
            engine: e,
            mode,
            connections: 8,
            rep: 0,
            wrk: Some(WrkOut {
                requests: (rate * 2.0) as u64,
                seconds: 2.0,
                rate,
                ..WrkOut::default()
            }),
            machine_cores: 1.5,
            switch_cores: None,
            nginx_cores: Some(0.3),
            wrk_cores: 0.2,
            wall_s: 2.0,
            error: None,
            backend_requests: split,
            backend_conns: Vec::new(),
            offload: None,
        };
        let r = Results {
            machine: "m".into(),
            load_start: "1.00 1.00 1.00".into(),
            load_end: "2.00 1.00 1.00".into(),
            command: "nicflow bench conntrack --scenario lb".into(),
            scenarios: vec![Scenario::Lb],
            engines: Vec::new(),
            connections: vec![8],
            seconds: 2.0,
            reps: 1,
            wrk_threads: 2,
            host_offload: HostOffload::Default,
            tools: Vec::new(),
            nft_mode: String::new(),
            nft_rules: String::new(),
            firewall: Vec::new(),
            samples: vec![
                sample(CtEngine::Nicflow, Mode::Cps, 6000.0, vec![10, 10, 10]),
                sample(CtEngine::LinuxBridgeNft, Mode::Cps, 5000.0, vec![10, 0, 10]),
                sample(CtEngine::Ovs, Mode::Cps, 3000.0, vec![1, 2, 1]),
            ],
            setup_errors: Vec::new(),
            notes: Vec::new(),
            end_state: Vec::new(),
            lb: Some(LbRun {
                engines: vec![CtEngine::Nicflow, CtEngine::Ovs, CtEngine::LinuxBridgeNft],
                vip: VIP.into(),
                vip_mac: VIP_MAC.into(),
                backends: (1..=3).map(|i| backend_ip(i).to_string()).collect(),
                flows: lb_flows(),
                groups: lb_groups(),
                ..LbRun::default()
            }),
        };
        let figs = figures(&r);
        assert_eq!(figs[0].id, "lb-cps");
        let md = markdown(&r, &figs);
        assert!(!md.contains("## Scenario firewall"), "{md}");
        assert!(md.contains("## Scenario lb"), "{md}");
        assert!(
            md.contains("| 8 | nicflow | 6000 | 6000-6000 | 1.20x | 2.00x |"),
            "{md}"
        );
        assert!(
            md.contains("| 8 | nicflow | 1.20x | 2.00x | — | — |"),
            "{md}"
        );
        assert!(md.contains("| 33/33/33 |"), "{md}");
        assert!(
            md.contains("linux-bridge-nft Cps c=8: s2 served no request"),
            "{md}"
        );
        assert!(md.contains("bucket=actions=ct(commit,nat(dst=198.18.2.1:80),table=2)"));
        assert!(md.contains("mod_dl_dst:<s2 MAC>,output:p4"), "{md}");
        assert!(md.contains("at the end: 2.00 1.00 1.00"), "{md}");
        // The client's threads are in the report, and a run recorded
        // before they were (no field) re-renders as one thread.
        assert!(md.contains("`wrk -t2` in c1"), "{md}");
        let mut v = serde_json::to_value(&r).unwrap();
        v.as_object_mut().unwrap().remove("wrk_threads");
        let old: Results = serde_json::from_value(v).unwrap();
        assert_eq!(old.wrk_threads, 1);
    }
}
