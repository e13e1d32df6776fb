//! `nicflow bench meters`: the accuracy of an OpenFlow meter, nicflow
//! against Open vSwitch's userspace meters in the same run (issue 14: "a
//! meter at R passes R ±5% from 10 Mbit/s to 5 Gbit/s").
//!
//! Each engine gets a one-pair testbed ([`super::testbed`]: `c1 - p1
//! [switch] p2 - s1`, hosts at the kernel's default offloads) kept up for
//! the whole run, with a persistent `iperf3 -s` in s1. For every rate R
//! (`--rates`), repetition and engine (interleaved: repetition 1 of every
//! rate and engine, then repetition 2, ...) the switch is emptied (every
//! rule and meter deleted) and given
//!
//! ```text
//! meter=1,kbps,burst,stats,bands=type=drop,rate=<R in kbit/s>,burst_size=<R x burst_ms>
//! priority=10,ip,in_port=p1,actions=meter:1,output:p2
//! priority=5,in_port=p1,actions=output:p2        (ARP, IPv6 ND: not metered)
//! priority=5,in_port=p2,actions=output:p1        (replies, ACKs: not metered)
//! ```
//!
//! nicflow through its control socket (`add-meter`, `add-flows`), OVS with
//! `ovs-ofctl -O OpenFlow13 add-meter` / `add-flows` on a bridge given
//! `protocols=OpenFlow10,OpenFlow13` (one rule text, the same ports).
//!
//! Then c1 offers more than R: below `--tcp-from` (1 Gbit/s) one UDP iperf3
//! stream paced at `--udp-factor` x R (2x) with `--udp-len`-byte datagrams
//! (1472: 1514-byte frames), from `--tcp-from` up `--streams` TCP streams
//! (unpaced: TCP offers what the path and the policer let it). After
//! `--warmup` seconds (so the bucket, full at the start, has drained) the
//! receiver's interface counter (`rx_bytes` of s1's `eth0`: Ethernet
//! frames without FCS, what both meters count) is read every second for
//! `--secs` seconds; measured rate = bytes x 8 / time between the first
//! and the last read. Offered = c1's `tx_bytes` over the same window. The
//! meter's own counters (`meter-stats`: packets and bytes in, packets and
//! bytes its drop band dropped) are read at both ends of the window too,
//! so the table shows what the meter saw and what it let pass. nicflow's
//! `dump-dp-flows` says where the metered flow ran (`engine:tc`, or
//! `engine:userspace` with `not_offloaded:action:meter`); for OVS the
//! `dpctl/dump-flows` line of the metered flow is kept.
//!
//! Before the rates, every engine's *capacity* is measured once: the same
//! rules and a meter at 1 Tbit/s (never limits, same path as the metered
//! flow), `--streams` TCP streams. A rate above the capacity cannot be
//! offered, and the report says so rather than blaming the meter.

use super::forward::{interrupted, ovs, Engine};
use super::report::{self, Figure, Series};
use super::testbed::{self, IperfServer, Rules, Testbed, TestbedSpec, BRIDGE};
use crate::forward::measure::IfaceCounters;
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::sys;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// iperf3's port in s1.
pub const PORT: u16 = 5201;
/// The meter every run installs.
pub const METER_ID: u32 = 1;
/// The rate of the capacity run's meter: 1 Tbit/s, never reached.
pub const CAPACITY_KBPS: u64 = 1_000_000_000;
/// A meter that dropped less than this share of its bytes in the window
/// was not what limited the rate.
pub const NOT_LIMITING: f64 = 0.005;
/// Largest frame OVS's userspace datapath meters with userspace TSO (a
/// 64 KB super-frame), in kbit: a smaller bucket drops every one.
pub const SUPERFRAME_KBIT: f64 = 65_536.0 * 8.0 / 1000.0;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Switches: `nicflow` (nicflow-tc: what `add-port` gives) and `ovs`
    /// (Open vSwitch userspace, netdev datapath); any nicflow engine of
    /// `bench forward` too.
    #[arg(long, default_value = "nicflow,ovs")]
    pub engines: String,
    /// Meter rates in bit/s, comma-separated, with k/M/G suffixes
    /// (decimal: 1M = 1,000,000 bit/s); multiples of 1 kbit/s.
    #[arg(long, default_value = "10M,100M,1G,5G")]
    pub rates: String,
    /// Repetitions per engine and rate (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// The meter's burst for UDP rates, as time at its rate: burst_size =
    /// R x burst_ms.
    #[arg(long, default_value_t = 10.0)]
    pub burst_ms: f64,
    /// The meter's burst for TCP rates (from `--tcp-from` up), as time at
    /// its rate.
    #[arg(long, default_value_t = 300.0)]
    pub tcp_burst_ms: f64,
    /// Seconds of traffic before the measured window (the initial full
    /// bucket drains, TCP leaves slow start).
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Measured seconds (counters read every second).
    #[arg(long, default_value_t = 6.0)]
    pub secs: f64,
    /// Rates from this one up are offered as TCP (`--streams` streams);
    /// lower rates as paced UDP.
    #[arg(long, default_value = "1G")]
    pub tcp_from: String,
    /// Parallel TCP streams (TCP rates and the capacity run).
    #[arg(long, default_value_t = 4)]
    pub streams: usize,
    /// UDP offered load as a multiple of R (iperf3 -b, payload bits).
    #[arg(long, default_value_t = 2.0)]
    pub udp_factor: f64,
    /// UDP datagram size (iperf3 -l): 1472 makes 1514-byte frames.
    #[arg(long, default_value_t = 1472)]
    pub udp_len: usize,
    /// Skip the capacity run.
    #[arg(long)]
    pub no_capacity: bool,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// How c1 offers the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Udp,
    Tcp,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Udp => "udp",
            Mode::Tcp => "tcp",
        }
    }
}

/// What one run measures.
#[derive(Clone, Debug)]
pub struct Options {
    pub engines: Vec<Engine>,
    /// bit/s, ascending.
    pub rates: Vec<u64>,
    pub reps: usize,
    pub burst_ms: f64,
    pub tcp_burst_ms: f64,
    pub warmup: f64,
    pub secs: f64,
    pub tcp_from: u64,
    pub streams: usize,
    pub udp_factor: f64,
    pub udp_len: usize,
    pub capacity: bool,
}

/// `10M`, `1.5G`, `64k`, `2000000` (bit/s), a multiple of 1 kbit/s.
pub fn parse_rate(s: &str) -> anyhow::Result<u64> {
    let t = s.trim().replace('_', "");
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G') => (&t[..t.len() - 1], 1e9),
        _ => (t.as_str(), 1.0),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("rate `{s}`: a number with an optional k/M/G suffix"))?;
    let bps = (v * mult).round();
    if !(1000.0..=4e12).contains(&bps) {
        bail!("rate `{s}`: 1 kbit/s .. 4 Tbit/s");
    }
    let bps = bps as u64;
    if !bps.is_multiple_of(1000) {
        bail!("rate `{s}`: meters count kbit/s, give a multiple of 1000 bit/s");
    }
    Ok(bps)
}

/// A comma-separated list of [`parse_rate`], sorted, deduplicated.
pub fn parse_rates(s: &str) -> anyhow::Result<Vec<u64>> {
    let mut v = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(parse_rate)
        .collect::<anyhow::Result<Vec<u64>>>()?;
    if v.is_empty() {
        bail!("no rates");
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// `10 Mbit/s`, `1.5 Gbit/s`.
pub fn fmt_rate(bps: f64) -> String {
    let (v, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else if bps >= 1e3 {
        (bps / 1e3, "kbit/s")
    } else {
        (bps, "bit/s")
    };
    let digits = if v >= 100.0 || v.fract() == 0.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// `10M`, `1G`, `1500k`: the compact form `--rates` takes.
pub fn short_rate(bps: u64) -> String {
    if bps.is_multiple_of(1_000_000_000) {
        format!("{}G", bps / 1_000_000_000)
    } else if bps.is_multiple_of(1_000_000) {
        format!("{}M", bps / 1_000_000)
    } else {
        format!("{}k", bps / 1000)
    }
}

pub fn options(a: &Args) -> anyhow::Result<Options> {
    let engines = testbed::parse_engines(&a.engines)?;
    if let Some(e) = engines.iter().find(|e| !e.is_nicflow() && !e.is_ovs()) {
        bail!("engine {}: has no OpenFlow meters", e.name());
    }
    let rates = if a.run.quick {
        vec![10_000_000, 1_000_000_000]
    } else {
        parse_rates(&a.rates)?
    };
    if a.reps == 0 || a.streams == 0 {
        bail!("--reps and --streams must be positive");
    }
    let ms_ok = |ms: f64| ms > 0.0 && ms <= 10_000.0;
    if !ms_ok(a.burst_ms) || !ms_ok(a.tcp_burst_ms) {
        bail!("--burst-ms and --tcp-burst-ms: above 0, at most 10,000");
    }
    let times_ok = a.warmup >= 0.0 && a.secs >= 1.0;
    if !times_ok {
        bail!("--warmup must be >= 0 and --secs >= 1");
    }
    let factor_ok = a.udp_factor > 1.0;
    if !factor_ok {
        bail!("--udp-factor must be above 1 (the load must exceed the meter)");
    }
    if !(16..=65_507).contains(&a.udp_len) {
        bail!("--udp-len: 16..65507");
    }
    let tcp_from = parse_rate(&a.tcp_from)?;
    for &r in &rates {
        let ms = if r >= tcp_from {
            a.tcp_burst_ms
        } else {
            a.burst_ms
        };
        let kbit = burst_kbit(r, ms);
        if kbit > u64::from(u32::MAX) {
            bail!(
                "rate {}: burst of {kbit} kbit does not fit a meter",
                short_rate(r)
            );
        }
    }
    let (reps, warmup, secs) = if a.run.quick {
        (1, a.warmup.min(1.0), a.secs.min(3.0))
    } else {
        (a.reps, a.warmup, a.secs)
    };
    Ok(Options {
        engines,
        rates,
        reps,
        burst_ms: a.burst_ms,
        tcp_burst_ms: a.tcp_burst_ms,
        warmup,
        secs,
        tcp_from,
        streams: a.streams,
        udp_factor: a.udp_factor,
        udp_len: a.udp_len,
        capacity: !a.no_capacity,
    })
}

pub fn command_line(o: &Options) -> String {
    let mut s = format!(
        "nicflow bench meters --engines {} --rates {} --reps {} --burst-ms {} --tcp-burst-ms {} --warmup {} --secs {} --tcp-from {} --streams {} --udp-factor {} --udp-len {}",
        report::join(&o.engines.iter().map(|e| e.name()).collect::<Vec<_>>(), ","),
        report::join(&o.rates.iter().map(|&r| short_rate(r)).collect::<Vec<_>>(), ","),
        o.reps,
        o.burst_ms,
        o.tcp_burst_ms,
        o.warmup,
        o.secs,
        short_rate(o.tcp_from),
        o.streams,
        o.udp_factor,
        o.udp_len
    );
    if !o.capacity {
        s.push_str(" --no-capacity");
    }
    s
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    let measure = || run(&options(args)?, progress);
    report::cli(&args.run, "meters", measure, figures, markdown)
}

fn progress(s: &str) {
    eprintln!("[meters] {s}");
}

// ---------------------------------------------------------------------------
// Rules and counters (pure)
// ---------------------------------------------------------------------------

/// The burst of a meter at `bps` holding `ms` of its rate, in kbit (at
/// least 1).
pub fn burst_kbit(bps: u64, ms: f64) -> u64 {
    ((bps as f64 / 1000.0 * ms / 1000.0).round() as u64).max(1)
}

/// The meter line (`ovs-ofctl add-meter` syntax) for `kbps` and `burst`
/// kbit.
pub fn meter_line(kbps: u64, burst: u64) -> String {
    format!("meter={METER_ID},kbps,burst,stats,bands=type=drop,rate={kbps},burst_size={burst}")
}

/// The rules (testbed placeholders): IP from c1 through the meter, the
/// rest of c1's frames and everything from s1 unmetered.
pub fn rules() -> Vec<String> {
    vec![
        format!("priority=10,ip,in_port={{c1}},actions=meter:{METER_ID},output:{{s1}}"),
        "priority=5,in_port={c1},actions=output:{s1}".into(),
        "priority=5,in_port={s1},actions=output:{c1}".into(),
    ]
}

/// A meter's counters (`meter-stats`): in, and what its band(s) dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
}

impl MeterCounters {
    pub fn since(&self, b: &MeterCounters) -> MeterCounters {
        MeterCounters {
            packets_in: self.packets_in.saturating_sub(b.packets_in),
            bytes_in: self.bytes_in.saturating_sub(b.bytes_in),
            dropped_packets: self.dropped_packets.saturating_sub(b.dropped_packets),
            dropped_bytes: self.dropped_bytes.saturating_sub(b.dropped_bytes),
        }
    }
    pub fn passed_bytes(&self) -> u64 {
        self.bytes_in.saturating_sub(self.dropped_bytes)
    }
}

/// Meter `id`'s counters in `ovs-ofctl meter-stats` text (OVS prints
/// `meter:1 flow_count:1 packet_in_count:N byte_in_count:N duration:..
/// bands:` and one `0: packet_count:N byte_count:N` line per band; nicflow
/// prints the same).
pub fn parse_meter_stats(text: &str, id: u32) -> Option<MeterCounters> {
    let field = |line: &str, key: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|t| t.strip_prefix(key))
            .and_then(|v| v.parse().ok())
    };
    let head = format!("meter:{id} ");
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(&head));
    let first = lines.next()?;
    let mut c = MeterCounters {
        packets_in: field(first, "packet_in_count:")?,
        bytes_in: field(first, "byte_in_count:")?,
        ..Default::default()
    };
    for l in lines {
        let l = l.trim();
        if l.starts_with("meter:") {
            break;
        }
        if let (Some(p), Some(b)) = (field(l, "packet_count:"), field(l, "byte_count:")) {
            c.dropped_packets += p;
            c.dropped_bytes += b;
        }
    }
    Some(c)
}

/// Meter `id`'s counters in nicflow's `meter-stats` JSON.
pub fn parse_meter_json(v: &serde_json::Value, id: u32) -> Option<MeterCounters> {
    let m = v
        .as_array()?
        .iter()
        .find(|m| m["meter_id"].as_u64() == Some(u64::from(id)))?;
    let mut c = MeterCounters {
        packets_in: m["packet_in_count"].as_u64()?,
        bytes_in: m["byte_in_count"].as_u64()?,
        ..Default::default()
    };
    for b in m["bands"].as_array()? {
        c.dropped_packets += b["packet_count"].as_u64().unwrap_or(0);
        c.dropped_bytes += b["byte_count"].as_u64().unwrap_or(0);
    }
    Some(c)
}

/// Where nicflow ran the metered datapath flow(s), from `dump-dp-flows`
/// JSON: `engine` plus `not_offloaded:<why>` when it says why, one entry
/// per distinct placement; and the first such flow as text.
pub fn nicflow_placement(v: &serde_json::Value) -> (Vec<String>, Option<String>) {
    let mut places = Vec::new();
    let mut line = None;
    for f in v.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let actions = f["actions"].as_str().unwrap_or("");
        if !actions.contains("meter") {
            continue;
        }
        let mut p = format!("engine:{}", f["engine"].as_str().unwrap_or("?"));
        if let Some(why) = f["not_offloaded"].as_str() {
            let _ = write!(p, ", not_offloaded:{why}");
        }
        if !places.contains(&p) {
            places.push(p);
        }
        if line.is_none() {
            line = Some(format!(
                "{}, packets:{}, kernel_packets:{}, actions:{actions}",
                f["match"].as_str().unwrap_or(""),
                f["packets"],
                f["kernel_packets"]
            ));
        }
    }
    (places, line)
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

/// One measurement: an engine, a rate, a repetition.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    pub engine: String,
    pub rate_bps: u64,
    pub rep: usize,
    pub mode: Option<Mode>,
    pub burst_kbit: u64,
    pub client: String,
    /// Time between the first and the last counter read.
    pub window_s: f64,
    /// s1 `eth0` rx over the window.
    pub rx_bytes: u64,
    pub rx_packets: u64,
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub measured_bps: f64,
    /// c1 `eth0` tx over the window.
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub offered_bps: f64,
    /// Each second of the window (receiver).
    pub per_second_bps: Vec<f64>,
    /// meter-stats over (about) the same window.
    pub meter_window: Option<MeterCounters>,
    pub meter_window_s: f64,
    /// meter-stats at the end of the run (the meter was new at its start).
    pub meter_total: Option<MeterCounters>,
    /// Where the metered flow ran.
    pub placement: Vec<String>,
    pub dp_flow: Option<String>,
    /// iperf3's own view: TCP retransmits, UDP loss.
    pub retransmits: Option<u64>,
    pub udp_lost_percent: Option<f64>,
    pub error: Option<String>,
}

impl Sample {
    pub fn ratio(&self) -> Option<f64> {
        (self.error.is_none() && self.measured_bps.is_finite())
            .then(|| self.measured_bps / self.rate_bps as f64)
    }
    /// What the meter passed over its window, bit/s.
    pub fn meter_pass_bps(&self) -> Option<f64> {
        let m = self.meter_window?;
        (self.meter_window_s > 0.0).then(|| m.passed_bytes() as f64 * 8.0 / self.meter_window_s)
    }
}

/// One engine's setup and capacity.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EngineInfo {
    pub engine: String,
    pub version: String,
    /// The metered path's TCP capacity (meter at 1 Tbit/s).
    pub capacity: Option<Sample>,
    /// Setup commands worth showing.
    pub commands: Vec<String>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub nproc: usize,
    pub kernel: String,
    pub load_start: String,
    pub load_end: String,
    pub command: String,
    pub rates: Vec<u64>,
    pub reps: usize,
    pub burst_ms: f64,
    pub tcp_burst_ms: f64,
    pub warmup: f64,
    pub secs: f64,
    pub tcp_from: u64,
    pub streams: usize,
    pub udp_factor: f64,
    pub udp_len: usize,
    pub engines: Vec<EngineInfo>,
    pub samples: Vec<Sample>,
    pub wall_s: f64,
}

fn med(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    (!v.is_empty()).then(|| super::median(&mut v))
}

impl Results {
    pub fn samples(&self, engine: &str, rate: u64) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.engine == engine && s.rate_bps == rate)
            .collect()
    }
    pub fn median_ratio(&self, engine: &str, rate: u64) -> Option<f64> {
        med(self
            .samples(engine, rate)
            .iter()
            .filter_map(|s| s.ratio())
            .collect())
    }
    fn capacity_bps(&self, engine: &str) -> Option<f64> {
        self.engines
            .iter()
            .find(|e| e.engine == engine)
            .and_then(|e| e.capacity.as_ref())
            .filter(|c| c.error.is_none())
            .map(|c| c.measured_bps)
    }
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// One engine's lab. Fields drop in order: the iperf3 server before the
/// testbed.
struct Bed {
    server: IperfServer,
    tb: Testbed,
    scratch: PathBuf,
    info: EngineInfo,
}

fn engine_version(e: Engine) -> String {
    if e.is_ovs() {
        ovs::version()
    } else {
        format!("nicflow {}", env!("CARGO_PKG_VERSION"))
    }
}

/// The private OVS's directory (as `bench openflow` finds it).
fn ovs_dir(tb: &Testbed) -> PathBuf {
    std::env::temp_dir().join(format!(
        "{}{}-{}",
        ovs::DIR_PREFIX,
        std::process::id(),
        tb.lab_name()
    ))
}

fn ovs_mgmt(tb: &Testbed) -> String {
    format!("unix:{}/{BRIDGE}.mgmt", ovs_dir(tb).display())
}

/// `ovs-ofctl -O OpenFlow13 ARGS` on the testbed's bridge; stdout.
fn ofctl13(tb: &Testbed, verb: &str, rest: &[&str]) -> anyhow::Result<String> {
    let mgmt = ovs_mgmt(tb);
    let mut argv = vec!["ovs-ofctl", "-O", "OpenFlow13", verb, &mgmt];
    argv.extend_from_slice(rest);
    let out =
        sys::run(&mut sys::in_ns(None, &argv)).with_context(|| format!("ovs-ofctl {verb}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn nicflow_req(tb: &Testbed, req: &Request) -> anyhow::Result<nicflow::control::proto::Response> {
    let sock = tb.nicflow_socket().context("no nicflow daemon")?;
    let r = nicflow::control::daemon::request(&sock, req)?;
    if !r.ok {
        bail!("nicflow {req:?}: {}", r.error.unwrap_or_default());
    }
    Ok(r)
}

/// Empty the switch, then install the meter and the rules.
fn configure(tb: &Testbed, meter: &str) -> anyhow::Result<()> {
    let lines: Vec<String> = rules().iter().map(|l| tb.expand(l)).collect();
    if tb.engine().is_nicflow() {
        let bridge = BRIDGE.to_string();
        nicflow_req(
            tb,
            &Request::DelFlows {
                bridge: bridge.clone(),
                filter: None,
            },
        )?;
        nicflow_req(
            tb,
            &Request::DelMeters {
                bridge: bridge.clone(),
                filter: None,
            },
        )?;
        nicflow_req(
            tb,
            &Request::AddMeter {
                bridge: bridge.clone(),
                meter: meter.into(),
            },
        )?;
        nicflow_req(
            tb,
            &Request::AddFlows {
                bridge,
                text: lines.join("\n"),
            },
        )?;
    } else {
        ofctl13(tb, "del-flows", &[])?;
        ofctl13(tb, "del-meters", &[])?;
        ofctl13(tb, "add-meter", &[meter])?;
        let file = ovs_dir(tb).join("meter-rules.txt");
        std::fs::write(&file, lines.join("\n") + "\n")
            .with_context(|| format!("writing {}", file.display()))?;
        ofctl13(tb, "add-flows", &[&file.display().to_string()])?;
    }
    Ok(())
}

fn meter_stats(tb: &Testbed) -> anyhow::Result<MeterCounters> {
    if tb.engine().is_nicflow() {
        let r = nicflow_req(
            tb,
            &Request::MeterStats {
                bridge: BRIDGE.into(),
                filter: Some(format!("meter={METER_ID}")),
            },
        )?;
        parse_meter_json(&r.data, METER_ID).context("meter-stats: no meter 1")
    } else {
        let text = ofctl13(tb, "meter-stats", &[&format!("meter={METER_ID}")])?;
        parse_meter_stats(&text, METER_ID)
            .with_context(|| format!("meter-stats: no meter 1 in `{}`", text.trim()))
    }
}

/// Where the metered flow runs, and its datapath flow line.
fn placement(tb: &mut Testbed) -> (Vec<String>, Option<String>) {
    if tb.engine().is_nicflow() {
        match nicflow_req(
            tb,
            &Request::DumpDpFlows {
                bridge: BRIDGE.into(),
            },
        ) {
            Ok(r) => nicflow_placement(&r.data),
            Err(e) => (vec![format!("dump-dp-flows failed: {e:#}")], None),
        }
    } else {
        match tb.ovs_appctl(&["dpctl/dump-flows"]) {
            Ok(text) => {
                let line = text
                    .lines()
                    .find(|l| l.contains("meter("))
                    .map(|l| l.trim().to_string());
                let place = if line.is_some() {
                    "ovs-netdev (userspace)"
                } else {
                    "no metered datapath flow"
                };
                (vec![place.into()], line)
            }
            Err(e) => (vec![format!("dpctl/dump-flows failed: {e:#}")], None),
        }
    }
}

/// Read a counter, timestamped at the middle of the read.
fn read_at(ns: &str) -> Option<(Instant, IfaceCounters)> {
    let a = Instant::now();
    let c = IfaceCounters::read(ns, "eth0")?;
    let b = Instant::now();
    Some((a + (b - a) / 2, c))
}

fn sleep_until(t: Instant) -> anyhow::Result<()> {
    loop {
        if interrupted() {
            bail!("interrupted");
        }
        let now = Instant::now();
        if now >= t {
            return Ok(());
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    }
}

/// iperf3's client argv for `mode` at meter rate `bps`.
pub fn client_argv(server: &str, mode: Mode, bps: u64, seconds: u64, o: &Options) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "iperf3".into(),
        "-c".into(),
        server.into(),
        "-p".into(),
        PORT.to_string(),
        "-t".into(),
        seconds.to_string(),
        "-J".into(),
        "--connect-timeout".into(),
        "3000".into(),
    ];
    match mode {
        Mode::Udp => v.extend([
            "-u".into(),
            "-b".into(),
            format!("{:.0}", bps as f64 * o.udp_factor),
            "-l".into(),
            o.udp_len.to_string(),
        ]),
        Mode::Tcp => v.extend(["-P".into(), o.streams.to_string()]),
    }
    v
}

/// One measured run on `bed` with a meter at `kbps` (burst `burst` kbit).
fn measure(
    bed: &mut Bed,
    rate_bps: u64,
    kbps: u64,
    burst: u64,
    mode: Mode,
    rep: usize,
    o: &Options,
) -> Sample {
    let mut s = Sample {
        engine: bed.info.engine.clone(),
        rate_bps,
        rep,
        mode: Some(mode),
        burst_kbit: burst,
        measured_bps: f64::NAN,
        offered_bps: f64::NAN,
        ..Default::default()
    };
    if let Err(e) = measure_inner(bed, kbps, burst, mode, o, &mut s) {
        s.error = Some(format!("{e:#}"));
    }
    s
}

fn measure_inner(
    bed: &mut Bed,
    kbps: u64,
    burst: u64,
    mode: Mode,
    o: &Options,
    s: &mut Sample,
) -> anyhow::Result<()> {
    let tb = &mut bed.tb;
    configure(tb, &meter_line(kbps, burst))?;
    let cns = tb.client(0).netns.clone();
    let sns = tb.server(0).netns.clone();
    let seconds = (o.warmup + o.secs + 1.0).ceil() as u64;
    let argv = client_argv(&tb.server(0).ip4.to_string(), mode, s.rate_bps, seconds, o);
    s.client = format!("ip netns exec {cns} {}", argv.join(" "));
    let out = bed.scratch.join("iperf.json");
    let f = std::fs::File::create(&out).with_context(|| format!("{}", out.display()))?;
    let mut child = sys::in_ns(Some(&cns), &argv)
        .stdin(std::process::Stdio::null())
        .stdout(f)
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting iperf3 -c")?;
    let start = Instant::now();
    let r = window(tb, &cns, &sns, start, o, s);
    // Wait for iperf3 (it ends by itself after `seconds`), then read what
    // it says and the meter's totals.
    let deadline = start + Duration::from_secs(seconds + 15);
    let mut finished = false;
    while Instant::now() < deadline && !interrupted() {
        if let Ok(Some(_)) = child.try_wait() {
            finished = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
    }
    r?;
    if !finished {
        bail!("iperf3 client did not finish");
    }
    let json: serde_json::Value = std::fs::read_to_string(&out)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    if let Some(e) = json["error"].as_str() {
        bail!("iperf3: {e}");
    }
    match mode {
        Mode::Tcp => s.retransmits = json["end"]["sum_sent"]["retransmits"].as_u64(),
        Mode::Udp => s.udp_lost_percent = json["end"]["sum"]["lost_percent"].as_f64(),
    }
    s.meter_total = meter_stats(tb).ok();
    Ok(())
}

/// The measured window of a run started at `start`.
fn window(
    tb: &mut Testbed,
    cns: &str,
    sns: &str,
    start: Instant,
    o: &Options,
    s: &mut Sample,
) -> anyhow::Result<()> {
    sleep_until(start + Duration::from_secs_f64(o.warmup))?;
    let (t0, rx0) = read_at(sns).context("reading s1 eth0 counters")?;
    let tx0 = IfaceCounters::read(cns, "eth0").context("reading c1 eth0 counters")?;
    let tm0 = Instant::now();
    let m0 = meter_stats(tb)?;
    let tm0 = tm0 + (Instant::now() - tm0) / 2;
    let mut last = (t0, rx0);
    let steps = o.secs.ceil() as u64;
    for k in 1..=steps {
        let at = t0 + Duration::from_secs_f64((k as f64).min(o.secs));
        sleep_until(at)?;
        let (t, c) = read_at(sns).context("reading s1 eth0 counters")?;
        let dt = (t - last.0).as_secs_f64();
        s.per_second_bps
            .push(c.rx_bytes.saturating_sub(last.1.rx_bytes) as f64 * 8.0 / dt);
        last = (t, c);
    }
    let tx1 = IfaceCounters::read(cns, "eth0").context("reading c1 eth0 counters")?;
    let tm1 = Instant::now();
    let m1 = meter_stats(tb)?;
    let tm1 = tm1 + (Instant::now() - tm1) / 2;
    let (t1, rx1) = last;
    s.window_s = (t1 - t0).as_secs_f64();
    let d = rx1.since(&rx0);
    s.rx_bytes = d.rx_bytes;
    s.rx_packets = d.rx_packets;
    s.measured_bps = d.rx_bytes as f64 * 8.0 / s.window_s;
    s.offered_bps = tx1.since(&tx0).tx_bytes as f64 * 8.0 / s.window_s;
    s.meter_window = Some(m1.since(&m0));
    s.meter_window_s = (tm1 - tm0).as_secs_f64();
    let (p, line) = placement(tb);
    s.placement = p;
    s.dp_flow = line;
    Ok(())
}

fn up(e: Engine, progress: &mut impl FnMut(&str)) -> anyhow::Result<Bed> {
    progress(&format!("{}: starting the testbed", e.name()));
    let mut spec = TestbedSpec::new(e, 1, "meter");
    spec.rules = Rules::Custom(Vec::new());
    let tb = Testbed::up(&spec).with_context(|| format!("{} testbed", e.name()))?;
    let mut info = EngineInfo {
        engine: e.name().into(),
        version: engine_version(e),
        ..Default::default()
    };
    info.commands.extend(tb.commands().iter().cloned());
    if e.is_ovs() {
        let dir = ovs_dir(&tb);
        let db = format!("--db=unix:{}/db.sock", dir.display());
        let argv = [
            "ovs-vsctl",
            &db,
            "--timeout=20",
            "set",
            "bridge",
            BRIDGE,
            "protocols=OpenFlow10,OpenFlow13",
        ];
        sys::run(&mut sys::in_ns(None, &argv)).context("ovs-vsctl set bridge protocols")?;
        info.commands.push(argv.join(" "));
        info.commands.push(format!(
            "ovs-ofctl -O OpenFlow13 add-meter {} METER; ovs-ofctl -O OpenFlow13 add-flows {} RULES",
            ovs_mgmt(&tb),
            ovs_mgmt(&tb)
        ));
    } else {
        info.commands.push(
            "nicflow add-meter br0 METER; nicflow add-flows br0 RULES (control socket)".into(),
        );
    }
    let scratch = tb.scratch_dir()?;
    let server = tb.start_iperf_server(0, PORT)?;
    Ok(Bed {
        server,
        tb,
        scratch,
        info,
    })
}

pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> anyhow::Result<Results> {
    let wall = Instant::now();
    let load_start = super::host_tools::loadavg();
    let mut beds = Vec::new();
    for &e in &opts.engines {
        if interrupted() {
            bail!("interrupted");
        }
        beds.push(up(e, &mut progress)?);
    }
    if opts.capacity {
        for bed in &mut beds {
            if interrupted() {
                bail!("interrupted");
            }
            let burst = burst_kbit(CAPACITY_KBPS * 1000, opts.tcp_burst_ms);
            let mut c = measure(bed, 0, CAPACITY_KBPS, burst, Mode::Tcp, 0, opts);
            c.rate_bps = CAPACITY_KBPS * 1000;
            progress(&format!(
                "{}: capacity of the metered path (meter at 1 Tbit/s, {} TCP streams): {}{}",
                bed.info.engine,
                opts.streams,
                fmt_rate(c.measured_bps),
                c.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            ));
            bed.info.capacity = Some(c);
        }
    }
    let mut samples = Vec::new();
    for rep in 1..=opts.reps {
        for &rate in &opts.rates {
            let (mode, ms) = if rate >= opts.tcp_from {
                (Mode::Tcp, opts.tcp_burst_ms)
            } else {
                (Mode::Udp, opts.burst_ms)
            };
            let kbps = rate / 1000;
            let burst = burst_kbit(rate, ms);
            for bed in &mut beds {
                if interrupted() {
                    bail!("interrupted");
                }
                let s = measure(bed, rate, kbps, burst, mode, rep, opts);
                progress(&format!(
                    "rep {rep}/{} {} {} {}: measured {} ({}), offered {}, meter passed {}{}",
                    opts.reps,
                    bed.info.engine,
                    fmt_rate(rate as f64),
                    mode.name(),
                    fmt_rate(s.measured_bps),
                    s.ratio()
                        .map(|r| format!("{r:.3} x R"))
                        .unwrap_or_else(|| "—".into()),
                    fmt_rate(s.offered_bps),
                    s.meter_pass_bps()
                        .map(fmt_rate)
                        .unwrap_or_else(|| "—".into()),
                    s.error
                        .as_ref()
                        .map(|e| format!(" ERROR {e}"))
                        .unwrap_or_default()
                ));
                samples.push(s);
            }
        }
    }
    let mut engines = Vec::new();
    for b in beds {
        let Bed {
            server, tb, info, ..
        } = b;
        drop(server);
        tb.down()?;
        engines.push(info);
    }
    Ok(Results {
        machine: super::machine_description(),
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        load_start,
        load_end: super::host_tools::loadavg(),
        command: command_line(opts),
        rates: opts.rates.clone(),
        reps: opts.reps,
        burst_ms: opts.burst_ms,
        tcp_burst_ms: opts.tcp_burst_ms,
        warmup: opts.warmup,
        secs: opts.secs,
        tcp_from: opts.tcp_from,
        streams: opts.streams,
        udp_factor: opts.udp_factor,
        udp_len: opts.udp_len,
        engines,
        samples,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

pub fn figures(r: &Results) -> Vec<Figure> {
    let series = |f: &dyn Fn(&str, u64) -> Option<f64>| -> Vec<Series> {
        r.engines
            .iter()
            .map(|e| Series {
                name: e.engine.clone(),
                points: r
                    .rates
                    .iter()
                    .map(|&x| (x as f64 / 1e6, f(&e.engine, x)))
                    .collect(),
            })
            .collect()
    };
    vec![
        Figure {
            id: "accuracy".into(),
            title: "Meter accuracy: measured rate / meter rate (1.00 = exact; ±5% is 0.95-1.05)"
                .into(),
            x_label: "meter rate (Mbit/s)".into(),
            y_label: "measured / R".into(),
            log_x: true,
            series: series(&|e, x| r.median_ratio(e, x)),
        },
        Figure {
            id: "rate".into(),
            title: "Rate through the meter (receiver)".into(),
            x_label: "meter rate (Mbit/s)".into(),
            y_label: "measured (Mbit/s)".into(),
            log_x: true,
            series: series(&|e, x| {
                med(r
                    .samples(e, x)
                    .iter()
                    .filter(|s| s.error.is_none())
                    .map(|s| s.measured_bps / 1e6)
                    .collect())
            }),
        },
    ]
}

fn verdict(ratio: Option<f64>) -> &'static str {
    match ratio {
        Some(x) if (x - 1.0).abs() <= 0.05 => "yes",
        Some(_) => "**no**",
        None => "—",
    }
}

pub fn markdown(r: &Results, _figs: &[Figure]) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# nicflow bench meters\n");
    let _ = writeln!(
        m,
        "Machine: {} (nproc {}, kernel {}). Load average (1/5/15 min) at the start: {}, at the \
         end: {}. Whole run: {:.0} s.\n",
        r.machine, r.nproc, r.kernel, r.load_start, r.load_end, r.wall_s
    );
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    for e in &r.engines {
        let _ = writeln!(m, "- {}: {}", e.engine, e.version);
    }
    let _ = writeln!(
        m,
        "\nOne pair (c1 on p1, s1 on p2) per switch, hosts at the kernel's default offloads. \
         Meter `meter={METER_ID},kbps,burst,stats,bands=type=drop,rate=R_kbit,burst_size=B`; rules \
         `priority=10,ip,in_port=p1,actions=meter:{METER_ID},output:p2`, the rest of c1's frames \
         and everything from s1 unmetered. Rates below {tcp} are offered as one UDP iperf3 stream \
         at {f} x R (`-l {l}`: {fl}-byte frames) with B = R x {b} ms; from {tcp} up as {st} TCP \
         streams with B = R x {tb} ms. After {w} s of traffic the receiver's `rx_bytes` (s1 eth0: \
         Ethernet frames without FCS, what the meters count) is read every second for {secs} s; \
         measured = bytes x 8 / window. Offered = c1 eth0 `tx_bytes` over the same window. A \
         bucket that is fuller at the window's start than at its end can add at most B / window \
         to a measurement: {ub:.1}% for the UDP rates, {tbb:.1}% for the TCP rates; with UDP at \
         {f} x R the bucket stays empty after the warm-up. Medians over {reps} repetitions, \
         engines interleaved.\n",
        tcp = short_rate(r.tcp_from),
        f = r.udp_factor,
        l = r.udp_len,
        fl = r.udp_len + 42,
        b = r.burst_ms,
        st = r.streams,
        tb = r.tcp_burst_ms,
        w = r.warmup,
        secs = r.secs,
        ub = r.burst_ms / 10.0 / r.secs,
        tbb = r.tcp_burst_ms / 10.0 / r.secs,
        reps = r.reps
    );
    let caps: Vec<String> = r
        .engines
        .iter()
        .filter_map(|e| {
            let c = e.capacity.as_ref()?;
            Some(match &c.error {
                None => format!(
                    "{}: {} ({} TCP streams through a meter at 1 Tbit/s: the metered path, never limited; placement {})",
                    e.engine,
                    fmt_rate(c.measured_bps),
                    r.streams,
                    if c.placement.is_empty() {
                        "—".into()
                    } else {
                        c.placement.join("; ")
                    }
                ),
                Some(err) => format!("{}: capacity run failed: {err}", e.engine),
            })
        })
        .collect();
    report::write_list(&mut m, "Capacity of the metered path", &caps);

    let _ = writeln!(m, "\n## Accuracy\n");
    let mut rows = Vec::new();
    for &rate in &r.rates {
        for e in &r.engines {
            let ss = r.samples(&e.engine, rate);
            if ss.is_empty() {
                continue;
            }
            let ok: Vec<&&Sample> = ss.iter().filter(|s| s.error.is_none()).collect();
            let ratio = r.median_ratio(&e.engine, rate);
            let measured = med(ok.iter().map(|s| s.measured_bps).collect());
            let offered = med(ok.iter().map(|s| s.offered_bps).collect());
            let meter = med(ok.iter().filter_map(|s| s.meter_pass_bps()).collect());
            let within = ss
                .iter()
                .filter(|s| s.ratio().is_some_and(|x| (x - 1.0).abs() <= 0.05))
                .count();
            let reps = report::join(
                &ss.iter()
                    .map(|s| {
                        s.ratio()
                            .map(|x| format!("{x:.3}"))
                            .unwrap_or_else(|| "err".into())
                    })
                    .collect::<Vec<_>>(),
                " ",
            );
            let mut note = Vec::new();
            if let Some(cap) = r.capacity_bps(&e.engine) {
                if cap < rate as f64 * 1.05 {
                    note.push(format!("capacity {} < 1.05 R", fmt_rate(cap)));
                }
            }
            if let Some(o) = offered {
                if o < rate as f64 * 1.05 && ss[0].mode == Some(Mode::Udp) {
                    note.push("offered < 1.05 R".into());
                }
            }
            let dropped = med(ok
                .iter()
                .filter_map(|s| s.meter_window)
                .map(|c| c.dropped_bytes as f64 / (c.bytes_in as f64).max(1.0))
                .collect());
            if let Some(d) = dropped.filter(|&d| d < NOT_LIMITING) {
                note.push(format!(
                    "meter dropped {:.2}% in the window: not limiting, the load did not exceed R",
                    d * 100.0
                ));
            }
            if ss[0].mode == Some(Mode::Tcp)
                && e.engine.starts_with("ovs")
                && (ss[0].burst_kbit as f64) < SUPERFRAME_KBIT
            {
                note.push("burst < one 64 KB TSO frame".into());
            }
            for s in &ss {
                if let Some(err) = &s.error {
                    note.push(format!("rep {}: {err}", s.rep));
                }
            }
            rows.push(vec![
                fmt_rate(rate as f64),
                e.engine.clone(),
                ss[0].mode.map(|m| m.name()).unwrap_or("?").into(),
                offered.map(fmt_rate).unwrap_or_else(|| "—".into()),
                measured.map(fmt_rate).unwrap_or_else(|| "—".into()),
                report::cell(ratio, 3),
                reps,
                format!("{} ({within}/{})", verdict(ratio), ss.len()),
                meter
                    .map(|x| format!("{:.3}", x / rate as f64))
                    .unwrap_or_else(|| "—".into()),
                note.join("; "),
            ]);
        }
    }
    m.push_str(&report::table(
        &[
            ("R", true),
            ("switch", false),
            ("load", false),
            ("offered (median)", true),
            ("measured (median)", true),
            ("measured / R", true),
            ("per repetition", true),
            ("within ±5% (reps)", false),
            ("meter passed / R", true),
            ("note", false),
        ],
        &rows,
    ));
    let _ = writeln!(
        m,
        "\n*measured / R* is the median of the repetitions' ratios; *meter passed / R*: the \
         meter's own counters over the window ((bytes in - bytes dropped) x 8 / time).\n"
    );

    let _ = writeln!(
        m,
        "## Meter statistics (medians over the measured window)\n"
    );
    let mut rows = Vec::new();
    for &rate in &r.rates {
        for e in &r.engines {
            let ss: Vec<&Sample> = r
                .samples(&e.engine, rate)
                .into_iter()
                .filter(|s| s.error.is_none() && s.meter_window.is_some())
                .collect();
            if ss.is_empty() {
                continue;
            }
            let f = |g: &dyn Fn(&MeterCounters) -> f64| -> Option<f64> {
                med(ss
                    .iter()
                    .filter_map(|s| s.meter_window.as_ref())
                    .map(g)
                    .collect())
            };
            let pin = f(&|c| c.packets_in as f64);
            let bin = f(&|c| c.bytes_in as f64);
            let pdrop = f(&|c| c.dropped_packets as f64);
            let share = f(&|c| c.dropped_packets as f64 / (c.packets_in as f64).max(1.0));
            let mean_len = f(&|c| c.bytes_in as f64 / (c.packets_in as f64).max(1.0));
            let total = ss.last().and_then(|s| s.meter_total);
            let places: Vec<String> = {
                let mut v: Vec<String> = ss.iter().flat_map(|s| s.placement.clone()).collect();
                v.sort();
                v.dedup();
                v
            };
            rows.push(vec![
                fmt_rate(rate as f64),
                e.engine.clone(),
                report::cell(pin, 0),
                report::cell(bin, 0),
                report::cell(mean_len, 0),
                report::cell(pdrop, 0),
                share
                    .map(|x| format!("{:.1}%", x * 100.0))
                    .unwrap_or_else(|| "—".into()),
                total
                    .map(|t| format!("{} in / {} dropped", t.packets_in, t.dropped_packets))
                    .unwrap_or_else(|| "—".into()),
                places.join("; "),
            ]);
        }
    }
    m.push_str(&report::table(
        &[
            ("R", true),
            ("switch", false),
            ("packets in", true),
            ("bytes in", true),
            ("bytes / packet", true),
            ("packets dropped", true),
            ("dropped", true),
            ("whole run (last rep)", true),
            ("metered flow ran in", false),
        ],
        &rows,
    ));

    let _ = writeln!(m, "\n## Per run\n");
    for s in r
        .engines
        .iter()
        .filter_map(|e| e.capacity.as_ref())
        .chain(&r.samples)
    {
        let rate = if s.rate_bps >= CAPACITY_KBPS * 1000 {
            "capacity".to_string()
        } else {
            format!("{} rep {}", fmt_rate(s.rate_bps as f64), s.rep)
        };
        let _ = writeln!(
            m,
            "- {} {}: measured {} over {:.2} s, offered {}, per second [{}] Mbit/s{}{}{}",
            s.engine,
            rate,
            fmt_rate(s.measured_bps),
            s.window_s,
            fmt_rate(s.offered_bps),
            report::join(
                &s.per_second_bps
                    .iter()
                    .map(|x| format!("{:.1}", x / 1e6))
                    .collect::<Vec<_>>(),
                " "
            ),
            s.retransmits
                .map(|x| format!(", {x} retransmits"))
                .unwrap_or_default(),
            s.udp_lost_percent
                .map(|x| format!(", iperf3 UDP loss {x:.1}%"))
                .unwrap_or_default(),
            s.error
                .as_ref()
                .map(|e| format!(", ERROR {e}"))
                .unwrap_or_default()
        );
    }
    let mut flows = Vec::new();
    for e in &r.engines {
        if let Some(l) = r
            .samples
            .iter()
            .filter(|s| s.engine == e.engine)
            .find_map(|s| s.dp_flow.clone())
        {
            flows.push(format!("{}: `{l}`", e.engine));
        }
    }
    report::write_list(&mut m, "A metered datapath flow", &flows);
    let mut cmds = Vec::new();
    for e in &r.engines {
        for c in &e.commands {
            cmds.push(format!("{}: `{c}`", e.engine));
        }
        if let Some(s) = r.samples.iter().find(|s| s.engine == e.engine) {
            cmds.push(format!("{}: `{}` (one of the clients)", e.engine, s.client));
        }
    }
    report::write_list(&mut m, "Setup", &cmds);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!(parse_rate("10M").unwrap(), 10_000_000);
        assert_eq!(parse_rate("1.5G").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("64k").unwrap(), 64_000);
        assert_eq!(parse_rate("2000000").unwrap(), 2_000_000);
        assert!(parse_rate("1500").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
        assert_eq!(
            parse_rates("5G, 10M,1G,10M").unwrap(),
            vec![10_000_000, 1_000_000_000, 5_000_000_000]
        );
        assert_eq!(fmt_rate(10e6), "10 Mbit/s");
        assert_eq!(fmt_rate(1.234e9), "1.23 Gbit/s");
        assert_eq!(fmt_rate(98.76e6), "98.8 Mbit/s");
        assert_eq!(short_rate(5_000_000_000), "5G");
        assert_eq!(short_rate(1_500_000), "1500k");
    }

    #[test]
    fn meter_and_rules() {
        assert_eq!(burst_kbit(10_000_000, 10.0), 100);
        assert_eq!(burst_kbit(5_000_000_000, 10.0), 50_000);
        assert_eq!(burst_kbit(1000, 0.1), 1);
        let m = meter_line(10_000, 100);
        assert_eq!(
            m,
            "meter=1,kbps,burst,stats,bands=type=drop,rate=10000,burst_size=100"
        );
        let spec = nicflow_ofctl::meter::parse_meter(&m).unwrap();
        assert_eq!(spec.meter_id, 1);
        let r = rules();
        assert!(r[0].contains("actions=meter:1,output:{s1}"), "{r:?}");
    }

    #[test]
    fn meter_stats_text_and_json() {
        let ovs = "OFPST_METER reply (OF1.3) (xid=0x2):\n\
                   meter:1 flow_count:1 packet_in_count:1000 byte_in_count:1514000 duration:3.2s bands:\n\
                   0: packet_count:400 byte_count:605600\n";
        let c = parse_meter_stats(ovs, 1).unwrap();
        assert_eq!(
            c,
            MeterCounters {
                packets_in: 1000,
                bytes_in: 1_514_000,
                dropped_packets: 400,
                dropped_bytes: 605_600
            }
        );
        assert_eq!(c.passed_bytes(), 908_400);
        assert!(parse_meter_stats(ovs, 2).is_none());
        let j = serde_json::json!([{
            "meter_id": 1, "flow_count": 1, "packet_in_count": 10, "byte_in_count": 100,
            "duration_s": 1.0, "bands": [{"packet_count": 3, "byte_count": 30}]
        }]);
        let c2 = parse_meter_json(&j, 1).unwrap();
        assert_eq!((c2.packets_in, c2.dropped_bytes), (10, 30));
        assert_eq!(c.since(&c2).packets_in, 990);
        let dp = serde_json::json!([
            {"match": "in_port(2)", "actions": "1", "engine": "tc", "packets": 5, "kernel_packets": 5},
            {"match": "in_port(1),ipv4", "actions": "meter(1),2", "engine": "userspace",
             "not_offloaded": "action:meter", "packets": 9, "kernel_packets": 0}
        ]);
        let (p, line) = nicflow_placement(&dp);
        assert_eq!(p, vec!["engine:userspace, not_offloaded:action:meter"]);
        assert!(line.unwrap().contains("meter(1),2"));
    }

    #[test]
    fn options_and_report() {
        let a = Args {
            engines: "nicflow,ovs".into(),
            rates: "10M,1G".into(),
            reps: 2,
            burst_ms: 10.0,
            tcp_burst_ms: 300.0,
            warmup: 2.0,
            secs: 6.0,
            tcp_from: "1G".into(),
            streams: 4,
            udp_factor: 2.0,
            udp_len: 1472,
            no_capacity: false,
            run: crate::RunArgs::default(),
        };
        let o = options(&a).unwrap();
        assert_eq!(o.engines, vec![Engine::NicflowTc, Engine::Ovs]);
        assert!(command_line(&o).contains("--rates 10M,1G"));
        let udp = client_argv("198.18.2.1", Mode::Udp, 10_000_000, 9, &o).join(" ");
        assert!(udp.contains("-u -b 20000000 -l 1472"), "{udp}");
        let tcp = client_argv("198.18.2.1", Mode::Tcp, 1_000_000_000, 9, &o).join(" ");
        assert!(tcp.contains("-P 4") && !tcp.contains("-u"), "{tcp}");
        let bad = Args {
            engines: "linux-bridge".into(),
            ..a.clone()
        };
        assert!(options(&bad).is_err());

        let sample = |engine: &str, rate: u64, rep: usize, bps: f64| Sample {
            engine: engine.into(),
            rate_bps: rate,
            rep,
            mode: Some(if rate >= 1_000_000_000 {
                Mode::Tcp
            } else {
                Mode::Udp
            }),
            burst_kbit: burst_kbit(rate, 10.0),
            measured_bps: bps,
            offered_bps: 2.0 * rate as f64,
            window_s: 6.0,
            meter_window: Some(MeterCounters {
                packets_in: 100,
                bytes_in: (bps * 6.0 / 8.0 * 2.0) as u64,
                dropped_packets: 50,
                dropped_bytes: (bps * 6.0 / 8.0) as u64,
            }),
            meter_window_s: 6.0,
            placement: vec!["engine:userspace, not_offloaded:action:meter".into()],
            ..Default::default()
        };
        let r = Results {
            rates: vec![10_000_000, 1_000_000_000],
            reps: 2,
            burst_ms: 10.0,
            tcp_burst_ms: 300.0,
            secs: 5.0,
            tcp_from: 1_000_000_000,
            streams: 4,
            udp_factor: 2.0,
            udp_len: 1472,
            engines: vec![
                EngineInfo {
                    engine: "nicflow-tc".into(),
                    capacity: Some(Sample {
                        engine: "nicflow-tc".into(),
                        rate_bps: CAPACITY_KBPS * 1000,
                        measured_bps: 0.8e9,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EngineInfo {
                    engine: "ovs".into(),
                    ..Default::default()
                },
            ],
            samples: vec![
                sample("nicflow-tc", 10_000_000, 1, 10.1e6),
                sample("nicflow-tc", 10_000_000, 2, 9.9e6),
                sample("ovs", 10_000_000, 1, 10.0e6),
                sample("ovs", 10_000_000, 2, 10.6e6),
                sample("nicflow-tc", 1_000_000_000, 1, 0.8e9),
                sample("ovs", 1_000_000_000, 1, 0.97e9),
            ],
            ..Default::default()
        };
        assert!((r.median_ratio("ovs", 10_000_000).unwrap() - 1.03).abs() < 1e-9);
        let md = markdown(&r, &figures(&r));
        assert!(md.contains("| 10 Mbit/s | nicflow-tc | udp |"), "{md}");
        assert!(md.contains("yes (2/2)"), "{md}");
        assert!(md.contains("yes (1/2)"), "{md}");
        assert!(md.contains("capacity 800 Mbit/s < 1.05 R"), "{md}");
        assert!(md.contains("**no** (0/1)"), "{md}");
        let f = figures(&r);
        assert_eq!(f[0].series.len(), 2);
        let (x, y) = f[0].series[1].points[0];
        assert_eq!(x, 10.0);
        assert!((y.unwrap() - 1.03).abs() < 1e-9);
    }
}
