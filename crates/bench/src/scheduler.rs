//! `nicflow bench scheduler`: per-packet multipath scheduling (seed 003,
//! section on the DPU packet scheduler; issue 35) against ECMP hashing, on
//! a multipath lab with unequal paths.
//!
//! # Lab
//!
//! ```text
//!                          ┌ pa1 ══ tbf R1 ══ pb1 ┐
//!  c1 (eth0) ── p1 [sw]    ├ pa2 ══ tbf R2 ══ pb2 ┤   [fab] ps ── (eth0) s1
//!   198.18.70.1            ├ ...                  ┤              198.18.70.2
//!                          └ paN ══ tbf RN ══ pbN ┘
//! ```
//!
//! Two nicflow switches in namespaces of their own: `sw`, the scheduler
//! under test (the engine of `--engines`), and `fab`, the far end of the
//! fabric (defaults: TC engine), joined by N parallel veth links. Each
//! path's capacity is a `tbf` root qdisc on `sw`'s end of it (`--paths`,
//! e.g. `1G,1G,500M,500M`: unequal paths as the issue asks; netem is not
//! available on this kernel). nicflow keeps a port's qdisc in the path of
//! every frame it sends (docs/offload.md), so the shaping holds for the
//! kernel engine and for the daemon alike. `sw`'s rules send every IPv4
//! packet from c1 to select group 1, one bucket per path (`output:paI`),
//! and everything coming back from any path to c1; `fab` sends what
//! arrives on any path to s1 and s1's packets back on path 1 (ACKs need no
//! spraying). c1 and s1 have static neighbour entries: no ARP crosses the
//! fabric.
//!
//! # Methods
//!
//! `ecmp` is the group without a selection method: a hash of the 5-tuple,
//! one path per connection, as an ECMP fabric would (the baseline). The
//! others are `selection_method=` values of the group: `rr` (round robin
//! per packet), `wrr` (weighted by the buckets' weights, here the path
//! rates), `splb` (congestion-aware). Bucket weights are the path rates in
//! Mbit/s for every method (`ecmp` hashes in proportion to them, too).
//! `single` is no group at all, every packet to path 1: plain forwarding,
//! for the cost of scheduling on unshaped paths (`--paths none,none`).
//!
//! # Workload and measurements
//!
//! For each number of concurrent flows K (`--flows`), K TCP connections
//! from c1 to s1 start together; each sends a size drawn from the
//! web-search distribution (DCTCP, SIGCOMM 2010, as tabulated by pFabric:
//! 15% of flows are 6 packets of 1,460 bytes, half are under 53, the
//! largest 20,000) times `--size-scale`, then waits for s1's one-byte
//! answer once s1 has read everything: its flow completion time (FCT).
//! The sizes come from a seeded generator (`--seed`, printed): every
//! method sees the same flows in a repetition. Per round: max and p99 FCT,
//! goodput (bytes / time until the last flow finished), the receiver's
//! out-of-order segments (`TcpExt.TCPOFOQueue` of s1's namespace, per
//! 1,000 segments received) and the sender's retransmitted segments
//! (`Tcp.RetransSegs` of c1's) and reordering detections
//! (`TCPSACKReorder` + `TCPTSReorder` + `TCPRenoReorder`), and the `sw`
//! daemon's CPU seconds per Gbit carried. Medians over `--reps`
//! repetitions; methods are interleaved within each repetition.
//!
//! # Packet rate and latency (`--pps-sizes`, `--latency-loads`)
//!
//! The seed's other scheduler figures: the bandwidth and packet rate of the
//! scheduler against plain forwarding, and latency at several packet
//! rates (its Tables IV and V). On the same lab (run it with unshaped
//! paths, `--paths none,...`), `nicflow gen` in c1 sends UDP frames of
//! each size as fast as it can for `--burst-secs`, after a warm-up that
//! installs the flows, and `nicflow sink` (AF_XDP) in s1 counts them
//! (`pktrate::burst_on`, the step `ovs-l3` and `table-scale` use), for
//! each of `--pps-methods` (`single`, plain forwarding to path 1, is the
//! baseline; `rr` the scheduler). Latency: 64-byte frames at each load
//! of `--latency-loads`, a fraction of the lower of the methods' median
//! 64-byte maximum rates (both methods offered the same rate; 1 = each
//! method at its own maximum), the sink's one-way latency of the
//! generator's time-stamped frames through both switches (median and
//! p99 of each burst, medians over repetitions). The generator's own
//! frames are the measured flow: latency at a packet rate, as the seed's
//! Table V. With `--pingpong`, also the seed's ping-pong measure (Table
//! IV) under that load: the generator alone (no sink: s1's stack takes
//! its frames) sends the background at each load while `ping -i 0.005`
//! from c1 to s1 measures round trips through both switches (the echo
//! requests take the scheduler's group, the replies come back on path 1),
//! median and p99 of each round's RTTs.

use super::forward::{interrupted, Engine};
use super::lab::Lab;
use super::report::{self, Figure, Series};
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::{self, sys, LabOptions, Topology};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The sender and the receiver.
pub const C1_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 70, 1);
pub const S1_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 70, 2);
/// The receiver's listening port.
pub const PORT: u16 = 5301;
/// The bridge of both switches.
const BRIDGE: &str = "br0";
/// The select group.
const GROUP: u32 = 1;

/// The web-search flow size CDF (DCTCP), in packets of [`MSS`] bytes:
/// `(size, cumulative probability)`, linearly interpolated.
pub const WEB_SEARCH_CDF: &[(f64, f64)] = &[
    (6.0, 0.0),
    (6.0, 0.15),
    (13.0, 0.2),
    (19.0, 0.3),
    (33.0, 0.4),
    (53.0, 0.53),
    (133.0, 0.6),
    (667.0, 0.7),
    (1333.0, 0.8),
    (3333.0, 0.9),
    (6667.0, 0.97),
    (20000.0, 1.0),
];
/// Bytes per packet of the CDF.
pub const MSS: f64 = 1460.0;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Scheduler engines: `nicflow` (TC engine, what `add-port` gives) and
    /// `nicflow-afpacket` (userspace). Engines that hand frames to the
    /// driver below any qdisc (XDP, AF_XDP) cannot be shaped: refused.
    #[arg(long, default_value = "nicflow,nicflow-afpacket")]
    pub engines: String,
    /// Methods: `ecmp` (5-tuple hash, the baseline), `rr`, `wrr`, `splb`,
    /// and `single` (plain forwarding to path 1, no group: the cost of
    /// scheduling at all, on unshaped paths).
    #[arg(long, default_value = "ecmp,rr,wrr,splb")]
    pub methods: String,
    /// Path rates (tbf on each path), bit/s with k/M/G suffixes; `none`:
    /// an unshaped path (the forwarding capacity).
    #[arg(long, default_value = "1G,1G,500M,500M")]
    pub paths: String,
    /// Concurrent flows per round, comma-separated.
    #[arg(long, default_value = "16,32,64,128")]
    pub flows: String,
    /// Repetitions (medians in the report).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Flow sizes are the web-search sizes times this.
    #[arg(long, default_value_t = 1.0)]
    pub size_scale: f64,
    /// Seed of the flow sizes (repetition r of K flows uses seed + 1000 r + K).
    #[arg(long, default_value_t = 20261203)]
    pub seed: u64,
    /// A round whose flows are not all done after this many seconds counts
    /// its unfinished flows as timeouts.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// tbf queue per path, in milliseconds at the path's rate.
    #[arg(long, default_value_t = 10.0)]
    pub queue_ms: f64,
    /// Skip the FCT rounds (only the packet-rate and latency parts).
    #[arg(long)]
    pub no_fct: bool,
    /// Frame sizes (with FCS) of the packet-rate part, comma-separated
    /// (e.g. `64,1500`); empty: no packet-rate part.
    #[arg(long, default_value = "")]
    pub pps_sizes: String,
    /// Methods of the packet-rate and latency parts (`single`, plain
    /// forwarding, is the baseline of the ratios).
    #[arg(long, default_value = "single,rr")]
    pub pps_methods: String,
    /// Loads of the latency part, fractions of the maximum 64-byte rate
    /// (e.g. `0.05,0.5,1`); empty: no latency part.
    #[arg(long, default_value = "")]
    pub latency_loads: String,
    /// Seconds of each packet-rate or latency burst.
    #[arg(long, default_value_t = 2.0)]
    pub burst_secs: f64,
    /// UDP flows of the generator (distinct source ports).
    #[arg(long, default_value_t = 16)]
    pub pps_flows: u32,
    /// With `--latency-loads`: also ping-pong RTTs (ping c1 -> s1) over
    /// the generator's load at each load.
    #[arg(long)]
    pub pingpong: bool,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// One round: one engine, method, flow count and repetition.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Round {
    pub engine: String,
    pub method: String,
    pub flows: usize,
    pub rep: usize,
    pub seed: u64,
    /// Seconds per flow; None: not done within the timeout (or failed).
    pub fct_s: Vec<Option<f64>>,
    pub bytes: u64,
    /// Seconds from the start until the last flow finished.
    pub makespan_s: f64,
    /// s1: segments received, segments queued out of order.
    pub rx_segs: u64,
    pub rx_ofo: u64,
    /// c1: segments retransmitted, reordering detections.
    pub retrans: u64,
    pub reorder: u64,
    /// CPU seconds of the `sw` daemon during the round.
    pub daemon_cpu_s: f64,
    /// Errors of flows that failed (first few).
    pub errors: Vec<String>,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub paths_bps: Vec<u64>,
    pub size_scale: f64,
    pub seed: u64,
    pub rounds: Vec<Round>,
    /// Methods an engine refused (e.g. a selection method it does not
    /// have), with the error.
    pub refused: Vec<(String, String, String)>,
    pub commands: Vec<String>,
    /// Packet-rate and latency bursts (`--pps-sizes`, `--latency-loads`).
    #[serde(default)]
    pub bursts: Vec<RateRound>,
}

/// One packet-rate or latency burst.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RateRound {
    pub engine: String,
    pub method: String,
    /// Frame size with FCS.
    pub size: usize,
    pub rep: usize,
    /// The latency part's load (fraction of the maximum rate); `None`: a
    /// packet-rate burst (as fast as the generator can).
    pub load: Option<f64>,
    /// The generator's `--rate` (None: unlimited).
    pub offered_pps: Option<f64>,
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub sent_pps: f64,
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub rx_pps: f64,
    pub lost: u64,
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
    /// Cores the `sw` daemon used during the burst.
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub switch_cores: f64,
    /// A ping-pong round (`--pingpong`): RTTs of pings over the load
    /// (the sink figures above are then unset).
    #[serde(default)]
    pub pingpong: bool,
    #[serde(default, deserialize_with = "super::forward::nan_if_null")]
    pub rtt_p50_us: f64,
    #[serde(default, deserialize_with = "super::forward::nan_if_null")]
    pub rtt_p99_us: f64,
    #[serde(default)]
    pub pings_lost: u64,
}

/// Round-trip times (µs) in `ping`'s output (`time=0.045 ms` lines).
pub fn ping_rtts_us(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| {
            let t = l.split("time=").nth(1)?;
            let v: f64 = t.split_whitespace().next()?.parse().ok()?;
            Some(v * 1e3)
        })
        .collect()
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    report::cli(&args.run, "scheduler", || measure(args), figures, markdown)
}

/// A rate with k/M/G suffix (decimal), in bit/s.
pub fn parse_rate(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1e3),
        Some('m' | 'M') => (&s[..s.len() - 1], 1e6),
        Some('g' | 'G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("rate `{s}`: a number with k/M/G"))?;
    if v.is_nan() || v * mult < 1e6 || v * mult > 100e9 {
        bail!("rate `{s}`: between 1M and 100G");
    }
    Ok((v * mult) as u64)
}

const METHODS: &[&str] = &["single", "ecmp", "rr", "wrr", "splb"];

/// The group line of `method` over paths with these rates.
pub fn group_line(method: &str, paths_bps: &[u64]) -> String {
    let mut g = format!("group_id={GROUP},type=select");
    if method != "ecmp" {
        let _ = write!(g, ",selection_method={method}");
    }
    for (i, r) in paths_bps.iter().enumerate() {
        // Unshaped paths (0): equal weights.
        let w = if *r == 0 {
            1
        } else {
            (r / 1_000_000).clamp(1, 65535)
        };
        let _ = write!(
            g,
            ",bucket=bucket_id:{i},weight:{w},actions=output:pa{}",
            i + 1
        );
    }
    g
}

/// `sw`'s rules: IPv4 from c1 to the group (`single`: plain forwarding
/// to path 1, no group), everything back to c1.
pub fn sw_flows(method: &str, paths: usize) -> Vec<String> {
    let first = if method == "single" {
        "priority=10,ip,in_port=p1,actions=output:pa1".to_string()
    } else {
        format!("priority=10,ip,in_port=p1,actions=group:{GROUP}")
    };
    let mut v = vec![first];
    for i in 1..=paths {
        v.push(format!("priority=10,in_port=pa{i},actions=output:p1"));
    }
    v
}

/// A small, fast, seeded generator (splitmix64): the same sizes on every
/// machine for a seed.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One flow size in bytes from the web-search CDF for a uniform `u`.
pub fn web_search_size(u: f64) -> f64 {
    let cdf = WEB_SEARCH_CDF;
    for w in cdf.windows(2) {
        let ((s0, p0), (s1, p1)) = (w[0], w[1]);
        if u <= p1 {
            if p1 <= p0 {
                return s1 * MSS;
            }
            return (s0 + (s1 - s0) * (u - p0) / (p1 - p0)) * MSS;
        }
    }
    cdf[cdf.len() - 1].0 * MSS
}

/// `n` flow sizes (bytes, at least 1) for `seed`.
pub fn flow_sizes(n: usize, seed: u64, scale: f64) -> Vec<u64> {
    let mut r = SplitMix::new(seed);
    (0..n)
        .map(|_| ((web_search_size(r.unit()) * scale) as u64).max(1))
        .collect()
}

/// The `q`-quantile (0..=1) of `v` (nearest rank; `v` sorted in place).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn topology_text(lab: &str, engine: Engine, paths: usize) -> anyhow::Result<String> {
    let port_type = engine
        .nicflow_port_type()
        .with_context(|| format!("{} is not a nicflow engine", engine.name()))?;
    let mut t = String::new();
    let _ = writeln!(t, "name = \"{lab}\"");
    for h in ["c1", "s1"] {
        let _ = writeln!(
            t,
            "[[host]]\nname = \"{h}\"\nsysctl = {{ \"net.ipv6.conf.all.accept_ra\" = 0 }}"
        );
    }
    let _ = writeln!(
        t,
        "[[switch]]\nname = \"sw\"\nport_type = \"{}\"\n{}[[switch.bridge]]\nname = \"{BRIDGE}\"\nflows = [\"priority=0,actions=drop\"]",
        port_type.as_str(),
        engine.nicflow_switch_toml(false)
    );
    let mut fab: Vec<String> = (1..=paths)
        .map(|i| format!("\"priority=10,in_port=pb{i},actions=output:ps\""))
        .collect();
    fab.push("\"priority=10,in_port=ps,actions=output:pb1\"".into());
    let _ = writeln!(
        t,
        "[[switch]]\nname = \"fab\"\n[[switch.bridge]]\nname = \"{BRIDGE}\"\nflows = [{}]",
        fab.join(", ")
    );
    let _ = writeln!(
        t,
        "[[link]]\na = \"c1:eth0\"\nb = \"sw:p1\"\naddresses = [\"{C1_IP}/24\"]"
    );
    for i in 1..=paths {
        let _ = writeln!(t, "[[link]]\na = \"sw:pa{i}\"\nb = \"fab:pb{i}\"");
    }
    let _ = writeln!(
        t,
        "[[link]]\na = \"fab:ps\"\nb = \"s1:eth0\"\naddresses = [\"{S1_IP}/24\"]"
    );
    Ok(t)
}

/// One engine's multipath lab, removed on drop.
struct MultipathLab {
    /// Owns the namespaces, daemons and veths: dropped last.
    _lab: Lab,
    c1: String,
    s1: String,
    sw_ns: String,
    sw_sock: std::path::PathBuf,
    sw_pid: Option<u32>,
}

impl MultipathLab {
    fn up(engine: Engine, args: &Args, paths_bps: &[u64]) -> anyhow::Result<MultipathLab> {
        let bin = super::nicflow_bin()?;
        let opts = LabOptions::with_binary(bin);
        let mut bench_lab = Lab::create("bench scheduler", "msch", engine.tag(), Some(&opts))?;
        let name = bench_lab.name().to_string();
        let text = topology_text(&name, engine, paths_bps.len())?;
        let topo = Topology::parse(&text).with_context(|| format!("topology {name}"))?;
        let report = lab::up(&topo, &opts).with_context(|| format!("lab up {name}"))?;
        bench_lab.own_switch_lab(opts.clone());
        if let Some((sw, port, why)) = report.unattached.first() {
            bail!("nicflow port {sw}/{port} not attached: {why}");
        }
        let ns = |n: &str| {
            topo.namespace_of(n)
                .with_context(|| format!("namespace of {n}"))
        };
        let (c1, s1, sw_ns) = (ns("c1")?, ns("s1")?, ns("sw")?);
        let sw_pid = report
            .state
            .daemons
            .iter()
            .find(|d| d.switch == "sw")
            .and_then(|d| d.pid);
        let l = MultipathLab {
            _lab: bench_lab,
            c1,
            s1,
            sw_ns,
            sw_sock: lab::switch_socket(&name, "sw", &opts),
            sw_pid,
        };
        // The paths' capacities: tbf on sw's end of each path.
        let ports = topo.switch_ports("sw");
        for (i, rate) in paths_bps.iter().enumerate() {
            if *rate == 0 {
                continue;
            }
            let port = format!("pa{}", i + 1);
            let iface = ports
                .iter()
                .find(|(_, p, _)| *p == port)
                .map(|(_, _, f)| f.clone())
                .with_context(|| format!("sw port {port}"))?;
            let bytes_per_ms = (*rate as f64 / 8.0 / 1000.0).max(1.0);
            let burst = (bytes_per_ms as u64).max(96 * 1024);
            let limit = ((bytes_per_ms * args.queue_ms) as u64).max(2 * burst);
            let rate_s = format!("{}bit", rate);
            let (burst_s, limit_s) = (burst.to_string(), limit.to_string());
            let argv = [
                "tc", "qdisc", "add", "dev", &iface, "root", "tbf", "rate", &rate_s, "burst",
                &burst_s, "limit", &limit_s,
            ];
            sys::run(&mut sys::in_ns(Some(&l.sw_ns), &argv))
                .with_context(|| format!("tbf on {port}"))?;
        }
        // Static neighbours: nothing but the measured flows crosses.
        let mac = |ns: &str| super::testbed::read_mac(ns, "eth0");
        let (c1_mac, s1_mac) = (mac(&l.c1)?, mac(&l.s1)?);
        for (ns, ip, m) in [(&l.c1, S1_IP, &s1_mac), (&l.s1, C1_IP, &c1_mac)] {
            let ip = ip.to_string();
            let argv = [
                "ip",
                "neigh",
                "replace",
                &ip,
                "lladdr",
                m,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ];
            sys::run(&mut sys::in_ns(Some(ns), &argv)).context("static neighbour")?;
        }
        // Both switches re-read qdiscs every tick: wait until the TC
        // engine reaches every shaped path through its qdisc.
        std::thread::sleep(Duration::from_millis(2500));
        Ok(l)
    }

    fn request(&self, req: &Request) -> anyhow::Result<()> {
        let r = nicflow::control::daemon::request(&self.sw_sock, req)?;
        if !r.ok {
            bail!("{}", r.error.unwrap_or_else(|| "failed".into()));
        }
        Ok(())
    }

    /// Empty `sw` and give it `method`'s group and the rules.
    fn program(&self, method: &str, paths_bps: &[u64]) -> anyhow::Result<()> {
        let bridge = BRIDGE.to_string();
        self.request(&Request::DelFlows {
            bridge: bridge.clone(),
            filter: None,
        })?;
        self.request(&Request::DelGroups {
            bridge: bridge.clone(),
            filter: None,
        })?;
        if method != "single" {
            self.request(&Request::AddGroups {
                bridge: bridge.clone(),
                text: group_line(method, paths_bps),
            })?;
        }
        self.request(&Request::AddFlows {
            bridge,
            text: sw_flows(method, paths_bps.len()).join("\n"),
        })
    }
}

/// `TcpExt`/`Tcp` counters of namespace `ns` (its `/proc/net/netstat` and
/// `/proc/net/snmp`, read by a thread inside it).
fn tcp_counters(ns: &str) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    nicflow::os::netns::run_in(Some(ns), || {
        let mut m = std::collections::BTreeMap::new();
        for f in ["netstat", "snmp"] {
            let t = std::fs::read_to_string(format!("/proc/thread-self/net/{f}")).map_err(
                |source| nicflow::os::OsError::Sys {
                    op: "read",
                    target: f.into(),
                    source,
                },
            )?;
            parse_proc_pairs(&t, &mut m);
        }
        Ok(m)
    })
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// `/proc/net/{netstat,snmp}`: pairs of lines `Prefix: names...` and
/// `Prefix: values...`, as `Prefix.name -> value`.
pub fn parse_proc_pairs(text: &str, out: &mut std::collections::BTreeMap<String, u64>) {
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((p, n)), Some((q, v))) = (names.split_once(':'), values.split_once(':')) else {
            continue;
        };
        if p != q {
            continue;
        }
        for (k, x) in n.split_whitespace().zip(v.split_whitespace()) {
            if let Ok(x) = x.parse::<u64>() {
                out.insert(format!("{p}.{k}"), x);
            }
        }
    }
}

fn delta(
    a: &std::collections::BTreeMap<String, u64>,
    b: &std::collections::BTreeMap<String, u64>,
    keys: &[&str],
) -> u64 {
    keys.iter()
        .map(|k| {
            b.get(*k)
                .copied()
                .unwrap_or(0)
                .saturating_sub(a.get(*k).copied().unwrap_or(0))
        })
        .sum()
}

/// The receiver: accepts connections in s1, reads each to its end, answers
/// one byte. Stops (and its threads end) when dropped.
struct FctServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FctServer {
    fn start(ns: &str) -> anyhow::Result<FctServer> {
        let listener = nicflow::os::netns::run_in(Some(ns), || {
            TcpListener::bind(SocketAddrV4::new(S1_IP, PORT)).map_err(|source| {
                nicflow::os::OsError::Sys {
                    op: "bind",
                    target: "fct server".into(),
                    source,
                }
            })
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        std::thread::spawn(move || {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
                            let mut buf = vec![0u8; 256 * 1024];
                            loop {
                                match s.read(&mut buf) {
                                    Ok(0) => break,
                                    Ok(_) => {}
                                    Err(_) => return,
                                }
                            }
                            let _ = s.write_all(&[1]);
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(FctServer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for FctServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One flow from c1: connect, send `size` bytes, close the sending side,
/// wait for the answer. Its FCT in seconds.
fn one_flow(size: u64, timeout: Duration) -> Result<f64, String> {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&SocketAddrV4::new(S1_IP, PORT).into(), timeout)
        .map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_write_timeout(Some(timeout));
    let _ = s.set_read_timeout(Some(timeout));
    let mut left = size;
    while left > 0 {
        let n = left.min(ZEROS.len() as u64) as usize;
        s.write_all(&ZEROS[..n]).map_err(|e| format!("send: {e}"))?;
        left -= n as u64;
    }
    s.shutdown(std::net::Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(1) => Ok(t0.elapsed().as_secs_f64()),
        Ok(_) => Err("no answer".into()),
        Err(e) => Err(format!("answer: {e}")),
    }
}

/// K flows of `sizes` from c1, started together; their FCTs (None where
/// one failed, with the error) and the time until the last one ended.
fn run_flows(
    c1: &str,
    sizes: &[u64],
    timeout: Duration,
) -> anyhow::Result<(Vec<Result<f64, String>>, f64)> {
    let path = nicflow::os::netns::path(c1).map_err(|e| anyhow::anyhow!("{e}"))?;
    let barrier = Arc::new(Barrier::new(sizes.len() + 1));
    let mut handles = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let (barrier, path) = (barrier.clone(), path.clone());
        handles.push(std::thread::spawn(move || -> Result<f64, String> {
            let f = std::fs::File::open(&path).map_err(|e| format!("open netns: {e}"));
            let joined = f.and_then(|f| {
                // SAFETY: setns on this thread only, with a namespace
                // descriptor we own for the call.
                let r =
                    unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
                if r == 0 {
                    Ok(())
                } else {
                    Err(format!("setns: {}", std::io::Error::last_os_error()))
                }
            });
            barrier.wait();
            joined?;
            one_flow(size, timeout)
        }));
    }
    barrier.wait();
    let t0 = Instant::now();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(
            h.join()
                .unwrap_or_else(|_| Err("flow thread panicked".into())),
        );
    }
    Ok((out, t0.elapsed().as_secs_f64()))
}

fn daemon_cpu(pid: Option<u32>) -> f64 {
    pid.and_then(super::cpu::read_pid)
        .map(|c| c.user + c.system)
        .unwrap_or(f64::NAN)
}

fn parse_list(s: &str, what: &str) -> anyhow::Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("{what} `{s}`: comma-separated counts"))?;
    if v.is_empty() || v.iter().any(|&k| k == 0 || k > 1024) {
        bail!("{what} `{s}`: counts between 1 and 1024");
    }
    Ok(v)
}

fn measure(args: &Args) -> anyhow::Result<Results> {
    let engines = super::testbed::parse_engines(&args.engines)?;
    for e in &engines {
        if !matches!(e, Engine::NicflowTc | Engine::NicflowAfpacket) {
            bail!(
                "engine {}: its frames reach the driver below any qdisc, so the lab's tbf paths \
                 cannot shape them (use nicflow, nicflow-afpacket)",
                e.name()
            );
        }
    }
    let methods: Vec<String> = args
        .methods
        .split(',')
        .map(|m| m.trim().to_string())
        .collect();
    for m in &methods {
        if !METHODS.contains(&m.as_str()) {
            bail!("method `{m}`: one of {}", METHODS.join(", "));
        }
    }
    let paths_bps: Vec<u64> = args
        .paths
        .split(',')
        .map(|p| {
            if p.trim() == "none" {
                Ok(0)
            } else {
                parse_rate(p)
            }
        })
        .collect::<anyhow::Result<_>>()?;
    if !(2..=16).contains(&paths_bps.len()) {
        bail!("--paths: 2 to 16 paths");
    }
    let mut flows = parse_list(&args.flows, "--flows")?;
    let mut reps = args.reps.max(1);
    if args.run.quick {
        flows.truncate(1);
        reps = 1;
    }
    if args.size_scale.is_nan() || args.size_scale <= 0.0 {
        bail!("--size-scale must be positive");
    }
    let timeout = Duration::from_secs_f64(args.timeout.max(1.0));
    println!(
        "bench scheduler: seed {} (sizes of repetition r with K flows: seed + 1000 r + K)",
        args.seed
    );
    let mut res = Results {
        machine: super::machine_description(),
        paths_bps: paths_bps.clone(),
        size_scale: args.size_scale,
        seed: args.seed,
        rounds: Vec::new(),
        refused: Vec::new(),
        commands: Vec::new(),
        bursts: Vec::new(),
    };
    let pps_sizes: Vec<usize> = if args.pps_sizes.trim().is_empty() {
        Vec::new()
    } else {
        args.pps_sizes
            .split(',')
            .map(|x| x.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("--pps-sizes `{}`", args.pps_sizes))?
    };
    if pps_sizes.iter().any(|&z| !(64..=9000).contains(&z)) {
        bail!("--pps-sizes: frame sizes from 64 to 9000");
    }
    let loads: Vec<f64> = if args.latency_loads.trim().is_empty() {
        Vec::new()
    } else {
        args.latency_loads
            .split(',')
            .map(|x| x.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("--latency-loads `{}`", args.latency_loads))?
    };
    if loads.iter().any(|l| !(*l > 0.0 && *l <= 1.0)) {
        bail!("--latency-loads: fractions in (0, 1]");
    }
    let pps_methods: Vec<String> = args
        .pps_methods
        .split(',')
        .map(|m| m.trim().to_string())
        .collect();
    for m in &pps_methods {
        if !METHODS.contains(&m.as_str()) {
            bail!("--pps-methods `{m}`: one of {}", METHODS.join(", "));
        }
    }
    if args.no_fct && pps_sizes.is_empty() && loads.is_empty() {
        bail!("--no-fct with neither --pps-sizes nor --latency-loads: nothing to measure");
    }
    for engine in engines {
        let l = MultipathLab::up(engine, args, &paths_bps)
            .with_context(|| format!("multipath lab for {}", engine.name()))?;
        let _server = FctServer::start(&l.s1)?;
        let mut usable: Vec<String> = Vec::new();
        for m in &methods {
            match l.program(m, &paths_bps) {
                Ok(()) => usable.push(m.clone()),
                Err(e) => {
                    println!("{}: {m} refused: {e:#}", engine.name());
                    res.refused
                        .push((engine.name().to_string(), m.clone(), format!("{e:#}")));
                }
            }
        }
        for rep in 0..if args.no_fct { 0 } else { reps } {
            for &k in &flows {
                let seed = args.seed + 1000 * rep as u64 + k as u64;
                let sizes = flow_sizes(k, seed, args.size_scale);
                for m in &usable {
                    if interrupted() {
                        bail!("interrupted");
                    }
                    l.program(m, &paths_bps)?;
                    // Warm the path up (first packets through the slow path).
                    let _ = run_flows(&l.c1, &[64 * 1024], timeout);
                    let (c0, s0) = (tcp_counters(&l.c1)?, tcp_counters(&l.s1)?);
                    let cpu0 = daemon_cpu(l.sw_pid);
                    let (fcts, makespan) = run_flows(&l.c1, &sizes, timeout)?;
                    let cpu1 = daemon_cpu(l.sw_pid);
                    let (c1, s1) = (tcp_counters(&l.c1)?, tcp_counters(&l.s1)?);
                    let errors: Vec<String> = fcts
                        .iter()
                        .filter_map(|r| r.as_ref().err().cloned())
                        .take(3)
                        .collect();
                    let r = Round {
                        engine: engine.name().to_string(),
                        method: m.clone(),
                        flows: k,
                        rep,
                        seed,
                        fct_s: fcts.iter().map(|r| r.as_ref().ok().copied()).collect(),
                        bytes: sizes.iter().sum(),
                        makespan_s: makespan,
                        rx_segs: delta(&s0, &s1, &["Tcp.InSegs"]),
                        rx_ofo: delta(&s0, &s1, &["TcpExt.TCPOFOQueue"]),
                        retrans: delta(&c0, &c1, &["Tcp.RetransSegs"]),
                        reorder: delta(
                            &c0,
                            &c1,
                            &[
                                "TcpExt.TCPSACKReorder",
                                "TcpExt.TCPTSReorder",
                                "TcpExt.TCPRenoReorder",
                            ],
                        ),
                        daemon_cpu_s: cpu1 - cpu0,
                        errors,
                    };
                    let mut f: Vec<f64> = r.fct_s.iter().flatten().copied().collect();
                    println!(
                        "{} {m} K={k} rep {rep}: max FCT {:.1} ms, p99 {:.1} ms, {:.2} Gbit/s, \
                         ofo {} / {} segs, retrans {}{}",
                        engine.name(),
                        1e3 * f.iter().cloned().fold(0.0, f64::max),
                        1e3 * quantile(&mut f, 0.99),
                        r.bytes as f64 * 8.0 / r.makespan_s / 1e9,
                        r.rx_ofo,
                        r.rx_segs,
                        r.retrans,
                        if r.errors.is_empty() {
                            String::new()
                        } else {
                            format!(", failed: {}", r.errors.join("; "))
                        }
                    );
                    res.rounds.push(r);
                }
            }
        }
        if !pps_sizes.is_empty() || !loads.is_empty() {
            let usable_pps: Vec<String> = pps_methods
                .iter()
                .filter(|m| *m == "single" || usable.contains(m))
                .cloned()
                .collect();
            rate_rounds(
                &l,
                engine,
                args,
                &paths_bps,
                &pps_sizes,
                &loads,
                &usable_pps,
                reps,
                &mut res.bursts,
            )?;
        }
        res.commands
            .push(format!("{}: sw daemon in {}", engine.name(), l.sw_ns));
        drop(l);
    }
    Ok(res)
}

/// The packet-rate bursts (each size, each method, as fast as the
/// generator can), then the latency bursts (64-byte frames at each load),
/// methods interleaved within each repetition (module docs).
#[allow(clippy::too_many_arguments)]
fn rate_rounds(
    l: &MultipathLab,
    engine: Engine,
    args: &Args,
    paths_bps: &[u64],
    sizes: &[usize],
    loads: &[f64],
    methods: &[String],
    reps: usize,
    out: &mut Vec<RateRound>,
) -> anyhow::Result<()> {
    use super::pktrate::{self, Ends, Traffic};
    let scratch =
        std::env::temp_dir().join(format!("nicflow-bench-scheduler-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let mac = |ns: &str| super::testbed::read_mac(ns, "eth0");
    let ends = Ends {
        bin: super::nicflow_bin()?,
        client_ns: l.c1.clone(),
        client_iface: "eth0".into(),
        client_mac: mac(&l.c1)?,
        server_ns: l.s1.clone(),
        server_iface: "eth0".into(),
        server_mac: mac(&l.s1)?,
        scratch: scratch.clone(),
        switch_pid: l.sw_pid,
    };
    let traffic = |size: usize| Traffic {
        flows: args.pps_flows.max(1),
        vary: "src-port".into(),
        gen_args: vec![
            "--src-ip".into(),
            C1_IP.to_string(),
            "--dst-ip".into(),
            S1_IP.to_string(),
        ],
        size,
        seconds: args.burst_secs.max(0.5),
    };
    let one = |m: &str,
               size: usize,
               rep: usize,
               load: Option<f64>,
               rate: Option<f64>|
     -> anyhow::Result<RateRound> {
        if interrupted() {
            bail!("interrupted");
        }
        l.program(m, paths_bps)?;
        let t = traffic(size);
        pktrate::warm_up_on(&ends, &t, 3).context("warm-up")?;
        let b = pktrate::burst_on(&ends, &t, rate).context("burst")?;
        let r = RateRound {
            engine: engine.name().to_string(),
            method: m.to_string(),
            size,
            rep,
            load,
            offered_pps: rate,
            sent_pps: b.sent_pps,
            rx_pps: b.rx_pps,
            lost: b.lost,
            latency_p50_ns: b.latency_p50_ns,
            latency_p99_ns: b.latency_p99_ns,
            switch_cores: b.switch_cores,
            pingpong: false,
            rtt_p50_us: 0.0,
            rtt_p99_us: 0.0,
            pings_lost: 0,
        };
        println!(
            "{} {m} {size} B rep {rep}{}: sent {:.0} pps, received {:.0} pps ({:.2} Gbit/s), \
             latency p50 {:.1} us p99 {:.1} us",
            r.engine,
            load.map(|x| format!(" load {x}")).unwrap_or_default(),
            r.sent_pps,
            r.rx_pps,
            r.rx_pps * size as f64 * 8.0 / 1e9,
            r.latency_p50_ns as f64 / 1e3,
            r.latency_p99_ns as f64 / 1e3,
        );
        Ok(r)
    };
    let result = (|| -> anyhow::Result<()> {
        for rep in 0..reps {
            for &size in sizes {
                for m in methods {
                    out.push(one(m, size, rep, None, None)?);
                }
            }
        }
        if loads.is_empty() {
            return Ok(());
        }
        // The loads' 100%: the lower of the methods' median 64-byte
        // maxima, measured now if the packet-rate part did not.
        let max_of = |out: &[RateRound], m: &str| -> f64 {
            let mut v: Vec<f64> = out
                .iter()
                .filter(|r| r.engine == engine.name() && r.method == m && r.size == 64)
                .filter(|r| r.load.is_none())
                .map(|r| r.rx_pps)
                .collect();
            super::median(&mut v)
        };
        if !sizes.contains(&64) {
            for m in methods {
                out.push(one(m, 64, 0, None, None)?);
            }
        }
        let full = methods
            .iter()
            .map(|m| max_of(out, m))
            .fold(f64::INFINITY, f64::min);
        if !full.is_finite() || full <= 0.0 {
            bail!("no 64-byte maximum rate to base the latency loads on");
        }
        println!("{}: latency loads of {full:.0} pps (64 B)", engine.name());
        for rep in 0..reps {
            for &load in loads {
                let rate = (load < 1.0).then_some(load * full);
                for m in methods {
                    out.push(one(m, 64, rep, Some(load), rate)?);
                }
            }
        }
        if !args.pingpong {
            return Ok(());
        }
        for rep in 0..reps {
            for &load in loads {
                let rate = (load < 1.0).then_some(load * full);
                for m in methods {
                    out.push(ping_round(
                        l,
                        engine,
                        &ends,
                        paths_bps,
                        &traffic(64),
                        m,
                        rep,
                        load,
                        rate,
                    )?);
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// One ping-pong round: the generator's load at `rate` (no sink) and
/// pings from c1 to s1 across it.
#[allow(clippy::too_many_arguments)]
fn ping_round(
    l: &MultipathLab,
    engine: Engine,
    ends: &super::pktrate::Ends,
    paths_bps: &[u64],
    t: &super::pktrate::Traffic,
    m: &str,
    rep: usize,
    load: f64,
    rate: Option<f64>,
) -> anyhow::Result<RateRound> {
    use super::pktrate;
    if interrupted() {
        bail!("interrupted");
    }
    l.program(m, paths_bps)?;
    pktrate::warm_up_on(ends, t, 3).context("warm-up")?;
    const PINGS: usize = 200;
    let mut t = t.clone();
    // The load outlasts the pings (200 at 5 ms: 1 s) with a margin.
    t.seconds = t.seconds.max(1.0) + 1.0;
    let gen_out = ends.scratch.join("load-gen.json");
    let mut gen = pktrate::spawn_load(ends, &t, rate, &gen_out)?;
    std::thread::sleep(Duration::from_millis(300));
    let dst = S1_IP.to_string();
    let count = PINGS.to_string();
    let argv = [
        "ping", "-n", "-i", "0.005", "-c", &count, "-W", "1", "-s", "56", &dst,
    ];
    let ping = sys::in_ns(Some(&l.c1), &argv).output();
    let deadline = Instant::now() + Duration::from_secs_f64(t.seconds + 30.0);
    let gen_ok = loop {
        if let Some(st) = gen.try_wait()? {
            break st.success();
        }
        if Instant::now() >= deadline {
            let _ = gen.kill();
            let _ = gen.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !gen_ok {
        bail!("load generator failed");
    }
    let ping = ping.context("ping")?;
    let mut rtts = ping_rtts_us(&String::from_utf8_lossy(&ping.stdout));
    let got = rtts.len();
    let sent_pps = std::fs::read_to_string(&gen_out)
        .ok()
        .and_then(|s| {
            let line = s
                .lines()
                .rev()
                .find(|l| l.trim_start().starts_with('{'))?
                .to_string();
            serde_json::from_str::<serde_json::Value>(&line).ok()
        })
        .and_then(|v| v.get("pps").and_then(|x| x.as_f64()))
        .unwrap_or(f64::NAN);
    let r = RateRound {
        engine: engine.name().to_string(),
        method: m.to_string(),
        size: t.size,
        rep,
        load: Some(load),
        offered_pps: rate,
        sent_pps,
        rx_pps: f64::NAN,
        lost: 0,
        latency_p50_ns: 0,
        latency_p99_ns: 0,
        switch_cores: f64::NAN,
        pingpong: true,
        rtt_p50_us: quantile(&mut rtts, 0.5),
        rtt_p99_us: quantile(&mut rtts, 0.99),
        pings_lost: (PINGS - got.min(PINGS)) as u64,
    };
    println!(
        "{} {m} ping-pong rep {rep} load {load}: background {:.0} pps, RTT p50 {:.1} us \
         p99 {:.1} us, {} of {PINGS} pings lost",
        r.engine, r.sent_pps, r.rtt_p50_us, r.rtt_p99_us, r.pings_lost
    );
    Ok(r)
}

/// Per (engine, method, K): medians over repetitions of the round figures.
#[derive(Clone, Debug, Default)]
struct Summary {
    max_fct_ms: f64,
    p99_fct_ms: f64,
    mean_fct_ms: f64,
    gbps: f64,
    ofo_per_1k: f64,
    retrans: f64,
    reorder: f64,
    cpu_s_per_gbit: f64,
    timeouts: usize,
}

fn summarize(rounds: &[&Round]) -> Summary {
    let med = |mut v: Vec<f64>| super::median(&mut v);
    let mut s = Summary::default();
    let per = |f: &dyn Fn(&Round) -> f64| -> f64 { med(rounds.iter().map(|r| f(r)).collect()) };
    let fcts = |r: &Round| -> Vec<f64> {
        // A flow that never finished counts as the timeout's length.
        r.fct_s
            .iter()
            .map(|x| x.unwrap_or(r.makespan_s.max(1.0)))
            .collect()
    };
    s.max_fct_ms = per(&|r| 1e3 * fcts(r).into_iter().fold(0.0, f64::max));
    s.p99_fct_ms = per(&|r| 1e3 * quantile(&mut fcts(r), 0.99));
    s.mean_fct_ms = per(&|r| {
        let f = fcts(r);
        1e3 * f.iter().sum::<f64>() / f.len().max(1) as f64
    });
    s.gbps = per(&|r| r.bytes as f64 * 8.0 / r.makespan_s.max(1e-9) / 1e9);
    s.ofo_per_1k = per(&|r| 1e3 * r.rx_ofo as f64 / r.rx_segs.max(1) as f64);
    s.retrans = per(&|r| r.retrans as f64);
    s.reorder = per(&|r| r.reorder as f64);
    s.cpu_s_per_gbit = per(&|r| r.daemon_cpu_s / (r.bytes as f64 * 8.0 / 1e9).max(1e-9));
    s.timeouts = rounds
        .iter()
        .map(|r| r.fct_s.iter().filter(|x| x.is_none()).count())
        .sum();
    s
}

fn groups(r: &Results) -> Vec<((String, String, usize), Summary)> {
    let mut keys: Vec<(String, String, usize)> = Vec::new();
    for x in &r.rounds {
        let k = (x.engine.clone(), x.method.clone(), x.flows);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|k| {
            let rs: Vec<&Round> = r
                .rounds
                .iter()
                .filter(|x| x.engine == k.0 && x.method == k.1 && x.flows == k.2)
                .collect();
            (k, summarize(&rs))
        })
        .collect()
}

fn figures(r: &Results) -> Vec<Figure> {
    let g = groups(r);
    let mut engines: Vec<String> = Vec::new();
    for ((e, _, _), _) in &g {
        if !engines.contains(e) {
            engines.push(e.clone());
        }
    }
    let mut figs = Vec::new();
    for (id, title, y, f) in [
        (
            "max_fct",
            "Max FCT",
            "max flow completion time (ms)",
            (|s: &Summary| s.max_fct_ms) as fn(&Summary) -> f64,
        ),
        ("p99_fct", "p99 FCT", "p99 flow completion time (ms)", |s| {
            s.p99_fct_ms
        }),
    ] {
        for e in &engines {
            let mut methods: Vec<String> = Vec::new();
            for ((ee, m, _), _) in &g {
                if ee == e && !methods.contains(m) {
                    methods.push(m.clone());
                }
            }
            figs.push(Figure {
                id: format!("{id}-{e}"),
                title: format!("{title} vs concurrent flows ({e})"),
                x_label: "concurrent TCP flows".into(),
                y_label: y.into(),
                log_x: false,
                series: methods
                    .iter()
                    .map(|m| Series {
                        name: m.clone(),
                        points: g
                            .iter()
                            .filter(|((ee, mm, _), _)| ee == e && mm == m)
                            .map(|((_, _, k), s)| (*k as f64, Some(f(s))))
                            .collect(),
                    })
                    .collect(),
            });
        }
    }
    figs
}

fn markdown(r: &Results, figs: &[Figure]) -> String {
    let mut s = String::new();
    let base_m = if r.rounds.iter().any(|x| x.method == "ecmp") {
        "ecmp"
    } else {
        "single"
    };
    let _ = writeln!(s, "# bench scheduler: per-packet multipath vs ECMP\n");
    let _ = writeln!(s, "{}\n", report::machine_section(""));
    let rates: Vec<String> = r
        .paths_bps
        .iter()
        .map(|b| {
            if *b == 0 {
                "unshaped".to_string()
            } else {
                format!("{} Mbit/s", b / 1_000_000)
            }
        })
        .collect();
    let _ = writeln!(
        s,
        "Paths: {} (tbf on the scheduler's end of each). Flow sizes: web-search \
         distribution x {}, seed {}. Baseline (\"base\"): `{base_m}` in the same run; \
         ratios are method / base (below 1: the method is better).\n",
        rates.join(", "),
        r.size_scale,
        r.seed
    );
    let g = groups(r);
    let head = [
        ("engine", false),
        ("method", false),
        ("flows", true),
        ("max FCT ms", true),
        ("p99 FCT ms", true),
        ("mean FCT ms", true),
        ("max vs base", true),
        ("p99 vs base", true),
        ("Gbit/s", true),
        ("OFO per 1k segs", true),
        ("retrans", true),
        ("reorder events", true),
        ("daemon CPU s/Gbit", true),
        ("timeouts", true),
    ];
    let rows: Vec<Vec<String>> = g
        .iter()
        .map(|((e, m, k), x)| {
            let base = g
                .iter()
                .find(|((ee, mm, kk), _)| ee == e && mm == base_m && kk == k)
                .map(|(_, b)| b.clone());
            let ratio = |a: f64, b: Option<f64>| -> String {
                b.filter(|b| *b > 0.0)
                    .map(|b| format!("{:.2}", a / b))
                    .unwrap_or_else(|| "-".into())
            };
            vec![
                e.clone(),
                m.clone(),
                k.to_string(),
                format!("{:.1}", x.max_fct_ms),
                format!("{:.1}", x.p99_fct_ms),
                format!("{:.1}", x.mean_fct_ms),
                ratio(x.max_fct_ms, base.as_ref().map(|b| b.max_fct_ms)),
                ratio(x.p99_fct_ms, base.as_ref().map(|b| b.p99_fct_ms)),
                format!("{:.2}", x.gbps),
                format!("{:.1}", x.ofo_per_1k),
                format!("{:.0}", x.retrans),
                format!("{:.0}", x.reorder),
                format!("{:.3}", x.cpu_s_per_gbit),
                x.timeouts.to_string(),
            ]
        })
        .collect();
    if !r.rounds.is_empty() {
        let _ = writeln!(s, "## Results (medians)\n");
        s.push_str(&report::table(&head, &rows));
    }
    rate_tables(r, &mut s);
    if !r.refused.is_empty() {
        let _ = writeln!(s, "\n## Methods an engine refused\n");
        for (e, m, why) in &r.refused {
            let _ = writeln!(s, "- {e} / {m}: {why}");
        }
    }
    for f in figs {
        let _ = writeln!(s, "\n## {}\n", f.title);
        s.push_str(&f.markdown(1));
    }
    report::write_list(&mut s, "Lab", &r.commands);
    s
}

/// The packet-rate and latency tables (medians over repetitions; ratios
/// to `single`, plain forwarding, in the same run).
fn rate_tables(r: &Results, s: &mut String) {
    if r.bursts.is_empty() {
        return;
    }
    let mut keys: Vec<(String, String, usize, Option<u64>)> = Vec::new();
    for b in r.bursts.iter().filter(|b| !b.pingpong) {
        let k = (
            b.engine.clone(),
            b.method.clone(),
            b.size,
            b.load.map(|x| (x * 1e6) as u64),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let med = |k: &(String, String, usize, Option<u64>), f: &dyn Fn(&RateRound) -> f64| -> f64 {
        let mut v: Vec<f64> = r
            .bursts
            .iter()
            .filter(|b| {
                !b.pingpong
                    && b.engine == k.0
                    && b.method == k.1
                    && b.size == k.2
                    && b.load.map(|x| (x * 1e6) as u64) == k.3
            })
            .map(f)
            .collect();
        super::median(&mut v)
    };
    let base =
        |k: &(String, String, usize, Option<u64>)| (k.0.clone(), "single".to_string(), k.2, k.3);
    let ratio = |a: f64, b: f64| {
        if b > 0.0 && a.is_finite() {
            format!("{:.2}", a / b)
        } else {
            "-".into()
        }
    };
    let max_keys: Vec<_> = keys.iter().filter(|k| k.3.is_none()).collect();
    if !max_keys.is_empty() {
        let _ = writeln!(
            s,
            "\n## Packet rate and throughput (medians; unlimited generator)\n\n\
             Received frames/s at the sink and the bit rate of those frames; ratio: \
             method / `single` (plain forwarding) of the same engine and size.\n"
        );
        let head = [
            ("engine", false),
            ("method", false),
            ("frame B", true),
            ("sent Mpps", true),
            ("received Mpps", true),
            ("Gbit/s", true),
            ("vs single", true),
            ("sw cores", true),
        ];
        let rows: Vec<Vec<String>> = max_keys
            .iter()
            .map(|k| {
                let rx = med(k, &|b| b.rx_pps);
                let b = med(&base(k), &|b| b.rx_pps);
                vec![
                    k.0.clone(),
                    k.1.clone(),
                    k.2.to_string(),
                    format!("{:.3}", med(k, &|b| b.sent_pps) / 1e6),
                    format!("{:.3}", rx / 1e6),
                    format!("{:.2}", rx * k.2 as f64 * 8.0 / 1e9),
                    ratio(rx, b),
                    format!("{:.2}", med(k, &|b| b.switch_cores)),
                ]
            })
            .collect();
        s.push_str(&report::table(&head, &rows));
    }
    let lat_keys: Vec<_> = keys.iter().filter(|k| k.3.is_some()).collect();
    if !lat_keys.is_empty() {
        let _ = writeln!(
            s,
            "\n## Latency at a packet rate (64 B; medians of the bursts' p50 and p99)\n\n\
             One-way, c1 to s1 through both switches, of the generator's time-stamped \
             frames. Load: fraction of the lower of the methods' 64-byte maxima (1: each \
             at its own maximum). Ratio: method / `single`.\n"
        );
        let head = [
            ("engine", false),
            ("method", false),
            ("load", true),
            ("offered pps", true),
            ("received pps", true),
            ("p50 us", true),
            ("p99 us", true),
            ("p50 vs single", true),
            ("p99 vs single", true),
        ];
        let rows: Vec<Vec<String>> = lat_keys
            .iter()
            .map(|k| {
                let p50 = med(k, &|b| b.latency_p50_ns as f64) / 1e3;
                let p99 = med(k, &|b| b.latency_p99_ns as f64) / 1e3;
                let b50 = med(&base(k), &|b| b.latency_p50_ns as f64) / 1e3;
                let b99 = med(&base(k), &|b| b.latency_p99_ns as f64) / 1e3;
                let offered = r
                    .bursts
                    .iter()
                    .find(|b| {
                        !b.pingpong
                            && b.engine == k.0
                            && b.method == k.1
                            && b.load.map(|x| (x * 1e6) as u64) == k.3
                    })
                    .and_then(|b| b.offered_pps)
                    .unwrap_or(f64::NAN);
                vec![
                    k.0.clone(),
                    k.1.clone(),
                    format!("{}", k.3.unwrap_or(0) as f64 / 1e6),
                    if offered.is_finite() {
                        format!("{offered:.0}")
                    } else {
                        "max".into()
                    },
                    format!("{:.0}", med(k, &|b| b.rx_pps)),
                    format!("{p50:.1}"),
                    format!("{p99:.1}"),
                    ratio(p50, b50),
                    ratio(p99, b99),
                ]
            })
            .collect();
        s.push_str(&report::table(&head, &rows));
    }
    ping_table(r, s);
}

/// The ping-pong table (`--pingpong`): RTT medians over repetitions of
/// each round's p50 and p99; ratio to `single` at the same load.
fn ping_table(r: &Results, s: &mut String) {
    let pings: Vec<&RateRound> = r.bursts.iter().filter(|b| b.pingpong).collect();
    if pings.is_empty() {
        return;
    }
    let mut keys: Vec<(String, String, u64)> = Vec::new();
    for b in &pings {
        let k = (
            b.engine.clone(),
            b.method.clone(),
            (b.load.unwrap_or(0.0) * 1e6) as u64,
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let med = |k: &(String, String, u64), f: &dyn Fn(&RateRound) -> f64| -> f64 {
        let mut v: Vec<f64> = pings
            .iter()
            .filter(|b| {
                b.engine == k.0 && b.method == k.1 && (b.load.unwrap_or(0.0) * 1e6) as u64 == k.2
            })
            .map(|b| f(b))
            .filter(|x| x.is_finite())
            .collect();
        super::median(&mut v)
    };
    let ratio = |a: f64, b: f64| {
        if b > 0.0 && a.is_finite() {
            format!("{:.2}", a / b)
        } else {
            "-".into()
        }
    };
    let _ = writeln!(
        s,
        "\n## Ping-pong RTT over the generator's load (64 B background)\n\n\
         `ping -i 0.005` (200 pings) from c1 to s1 while the generator sends at the \
         load (no sink: s1's stack takes the frames; 1: unlimited). Medians over \
         repetitions of each round's p50 and p99. Ratio: method / `single`.\n"
    );
    let head = [
        ("engine", false),
        ("method", false),
        ("load", true),
        ("background pps", true),
        ("RTT p50 us", true),
        ("RTT p99 us", true),
        ("p50 vs single", true),
        ("p99 vs single", true),
        ("pings lost", true),
    ];
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            let base = (k.0.clone(), "single".to_string(), k.2);
            let (p50, p99) = (med(k, &|b| b.rtt_p50_us), med(k, &|b| b.rtt_p99_us));
            vec![
                k.0.clone(),
                k.1.clone(),
                format!("{}", k.2 as f64 / 1e6),
                format!("{:.0}", med(k, &|b| b.sent_pps)),
                format!("{p50:.1}"),
                format!("{p99:.1}"),
                ratio(p50, med(&base, &|b| b.rtt_p50_us)),
                ratio(p99, med(&base, &|b| b.rtt_p99_us)),
                format!("{:.0}", med(k, &|b| b.pings_lost as f64)),
            ]
        })
        .collect();
    s.push_str(&report::table(&head, &rows));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_search_sizes_follow_the_cdf() {
        assert_eq!(web_search_size(0.0), 6.0 * MSS);
        assert_eq!(web_search_size(0.1), 6.0 * MSS);
        assert_eq!(web_search_size(1.0), 20000.0 * MSS);
        let mid = web_search_size(0.465);
        assert!((33.0 * MSS..53.0 * MSS).contains(&mid), "{mid}");
        // Seeded: the same sizes every time; half the flows at most 53
        // packets, as the CDF says (within sampling error).
        let a = flow_sizes(4000, 7, 1.0);
        assert_eq!(a, flow_sizes(4000, 7, 1.0));
        let small = a.iter().filter(|&&b| b as f64 <= 53.0 * MSS).count() as f64 / 4000.0;
        assert!((0.49..0.57).contains(&small), "{small}");
        assert!(a.iter().all(|&b| b >= (6.0 * MSS) as u64));
    }

    #[test]
    fn groups_and_rules_name_every_path() {
        let g = group_line("ecmp", &[1_000_000_000, 500_000_000]);
        assert_eq!(
            g,
            "group_id=1,type=select,bucket=bucket_id:0,weight:1000,actions=output:pa1,\
             bucket=bucket_id:1,weight:500,actions=output:pa2"
        );
        assert!(group_line("rr", &[1_000_000_000]).contains("selection_method=rr"));
        let f = sw_flows("rr", 3);
        assert_eq!(f.len(), 4);
        assert!(f[0].contains("group:1"));
        assert!(f[3].contains("in_port=pa3"));
        assert!(sw_flows("single", 2)[0].ends_with("output:pa1"));
        // The group line parses as nicflow's (and OVS's) group syntax.
        nicflow_ofctl::parse_group(&g, &nicflow_ofctl::AutoPorts::default()).unwrap();
    }

    #[test]
    fn rates_and_quantiles() {
        assert_eq!(parse_rate("500M").unwrap(), 500_000_000);
        assert_eq!(parse_rate("1G").unwrap(), 1_000_000_000);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&mut v, 0.99), 99.0);
        assert_eq!(quantile(&mut v, 1.0), 100.0);
    }

    #[test]
    fn ping_output_gives_rtts() {
        let t = "PING 198.18.70.2 (198.18.70.2) 56(84) bytes of data.\n\
                 64 bytes from 198.18.70.2: icmp_seq=1 ttl=64 time=0.045 ms\n\
                 64 bytes from 198.18.70.2: icmp_seq=2 ttl=64 time=1.50 ms\n\n\
                 --- 198.18.70.2 ping statistics ---\n\
                 2 packets transmitted, 2 received, 0% packet loss, time 5ms\n";
        let v = ping_rtts_us(t);
        assert_eq!(v.len(), 2);
        assert!(
            (v[0] - 45.0).abs() < 1e-9 && (v[1] - 1500.0).abs() < 1e-9,
            "{v:?}"
        );
    }

    #[test]
    fn proc_counter_pairs() {
        let t = "TcpExt: SyncookiesSent TCPOFOQueue\nTcpExt: 0 42\nIpExt: InNoRoutes\nIpExt: 3\n";
        let mut m = std::collections::BTreeMap::new();
        parse_proc_pairs(t, &mut m);
        assert_eq!(m["TcpExt.TCPOFOQueue"], 42);
        assert_eq!(m["IpExt.InNoRoutes"], 3);
    }
}
