//! `nicflow bench ovn`: the two-chassis OVN lab ([`nicflow::ovn`]) as an
//! experiment (issue 30, item 5): the same real OVN control plane
//! (ovsdb-server, ovn-northd, ovn-controller) over each vswitch mix, in one
//! run, ovs-vswitchd (userspace datapath, the only OVS datapath on this
//! kernel) first as the baseline.
//!
//! Per mix: time to bring the NB topology into effect (first ovn-nbctl
//! command to every VM port `ovn-installed`, and to pings passing), cross
//! chassis TCP between vm1 (ch1) and vm2 (ch2) over Geneve with iperf3 (1
//! and 4 streams), TCP_RR-style transactions (sockperf ping-pong over TCP,
//! one transaction in flight: transactions/s = 1 / mean round trip), the
//! CPU of the vswitch and ovn-controller processes of both chassis during
//! each run, and the time for 1,000 ACLs added in one ovn-nbctl transaction
//! to reach every chassis (`--wait=hv`: ovn-controller on each chassis has
//! installed them). Mixes whose vswitch cannot start (`nicflow vswitchd`
//! before it exists) are reported as not run, with the reason.
//!
//! `--repeat N` (default 3) measures every mix N times, a fresh lab each
//! time, the mixes alternating within each round (ovs, nicflow, ..., then
//! again) so that slow drift of a shared machine spreads over all of them;
//! the report gives the median of the rounds with the min–max beside it
//! (one run is not significant here: see docs/ovn.md, "Noise").

use super::cpu;
use super::report::{self, Figure, Series};
use anyhow::Context;
use nicflow::ovn::{self, OvnLab, OvnLabSpec, Vswitch};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Vswitch mixes, comma-separated: ovs (ovs-vswitchd on both chassis),
    /// nicflow (nicflow vswitchd on both), mixed (nicflow on ch1).
    #[arg(long, default_value = "ovs,nicflow")]
    pub vswitch: String,
    /// Seconds per throughput / transaction run.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// ACLs added in one transaction for the install-time measure.
    #[arg(long, default_value_t = 1000)]
    pub acls: usize,
    /// Rounds: every mix is measured this many times (mixes alternating
    /// within a round); the report shows medians and min–max.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// CPU seconds of the lab's daemons over one measured interval.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DaemonCpu {
    pub wall_s: f64,
    /// Both chassis' vswitch daemons together.
    pub vswitch_s: f64,
    /// Both chassis' ovn-controllers together.
    pub controller_s: f64,
}

impl DaemonCpu {
    pub fn vswitch_cores(&self) -> f64 {
        self.vswitch_s / self.wall_s.max(1e-9)
    }
}

/// One iperf3 run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tcp {
    pub streams: usize,
    pub gbps: f64,
    pub retransmits: u64,
    pub cpu: DaemonCpu,
}

/// Everything measured on one mix.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MixResult {
    pub mix: String,
    pub ch1: String,
    pub ch2: String,
    pub lab_up_s: Option<f64>,
    pub nbctl_s: Option<f64>,
    pub installed_s: Option<f64>,
    pub ready_s: Option<f64>,
    pub tcp: Vec<Tcp>,
    /// Mean TCP round trip (µs) and transactions/s.
    pub rr_us: Option<f64>,
    pub rr_tps: Option<f64>,
    pub rr_cpu: Option<DaemonCpu>,
    pub acls: usize,
    pub acl_s: Option<f64>,
    /// br-int flows on ch2 before and after the ACLs.
    pub flows_before: Option<usize>,
    pub flows_after: Option<usize>,
    pub acl_cpu: Option<DaemonCpu>,
    pub errors: Vec<String>,
    /// Why the mix did not run at all.
    pub not_run: Option<String>,
    /// In `Results::runs`: which round (1-based). In `Results::mixes`: how
    /// many rounds the medians above are taken over.
    #[serde(default)]
    pub round: usize,
    /// In `Results::mixes`: min and max over the rounds of each measure
    /// (keys as in [`Results::RANGE_KEYS`]); empty for one round.
    #[serde(default)]
    pub range: std::collections::BTreeMap<String, [f64; 2]>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub command: String,
    pub seconds: f64,
    /// One entry per mix: medians over the rounds (`round` = how many).
    pub mixes: Vec<MixResult>,
    /// Rounds per mix (`--repeat`).
    #[serde(default = "one")]
    pub repeat: usize,
    /// Every round of every mix, in the order measured.
    #[serde(default)]
    pub runs: Vec<MixResult>,
}

fn one() -> usize {
    1
}

/// A measure of one round, by the key it has in [`MixResult::range`].
type Measure = fn(&MixResult) -> Option<f64>;

impl Results {
    /// The measures summarised over rounds (median, min–max).
    pub const RANGE_KEYS: [(&'static str, Measure); 12] = [
        ("lab_up_s", |m| m.lab_up_s),
        ("nbctl_s", |m| m.nbctl_s),
        ("installed_s", |m| m.installed_s),
        ("ready_s", |m| m.ready_s),
        ("tcp1_gbps", |m| tcp_of(m, 1).map(|t| t.gbps)),
        ("tcp4_gbps", |m| tcp_of(m, 4).map(|t| t.gbps)),
        ("tcp1_cores", |m| {
            tcp_of(m, 1).map(|t| t.cpu.vswitch_cores())
        }),
        ("tcp4_cores", |m| {
            tcp_of(m, 4).map(|t| t.cpu.vswitch_cores())
        }),
        ("rr_us", |m| m.rr_us),
        ("rr_tps", |m| m.rr_tps),
        ("acl_s", |m| m.acl_s),
        ("acl_controller_s", |m| {
            m.acl_cpu.as_ref().map(|c| c.controller_s)
        }),
    ];
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn median_of(runs: &[&MixResult], f: impl Fn(&MixResult) -> Option<f64>) -> Option<f64> {
    median(&runs.iter().filter_map(|m| f(m)).collect::<Vec<_>>())
}

fn median_cpu(cs: &[&DaemonCpu]) -> Option<DaemonCpu> {
    let m = |f: fn(&DaemonCpu) -> f64| median(&cs.iter().map(|c| f(c)).collect::<Vec<_>>());
    Some(DaemonCpu {
        wall_s: m(|c| c.wall_s)?,
        vswitch_s: m(|c| c.vswitch_s)?,
        controller_s: m(|c| c.controller_s)?,
    })
}

/// One mix over its rounds: every measure the median of the rounds that
/// have it (a CPU figure is the median of each of its parts), errors of
/// every round, min–max of [`Results::RANGE_KEYS`] when there is more than
/// one round.
pub fn summarize(runs: &[&MixResult]) -> MixResult {
    let Some(first) = runs.first() else {
        return MixResult::default();
    };
    let med = |f: fn(&MixResult) -> Option<f64>| median_of(runs, f);
    let mut tcp = Vec::new();
    for streams in [1usize, 4] {
        let ts: Vec<&Tcp> = runs.iter().filter_map(|m| tcp_of(m, streams)).collect();
        if ts.is_empty() {
            continue;
        }
        let g = median(&ts.iter().map(|t| t.gbps).collect::<Vec<_>>());
        let r = median(&ts.iter().map(|t| t.retransmits as f64).collect::<Vec<_>>());
        let cpu = median_cpu(&ts.iter().map(|t| &t.cpu).collect::<Vec<_>>());
        if let (Some(gbps), Some(r), Some(cpu)) = (g, r, cpu) {
            tcp.push(Tcp {
                streams,
                gbps,
                retransmits: r.round() as u64,
                cpu,
            });
        }
    }
    let cpu_of = |f: fn(&MixResult) -> Option<&DaemonCpu>| {
        let cs: Vec<&DaemonCpu> = runs.iter().filter_map(|m| f(m)).collect();
        median_cpu(&cs)
    };
    let mut range = std::collections::BTreeMap::new();
    if runs.len() > 1 {
        for (k, f) in Results::RANGE_KEYS {
            let v: Vec<f64> = runs
                .iter()
                .filter_map(|m| f(m))
                .filter(|x| x.is_finite())
                .collect();
            if let (Some(lo), Some(hi)) = (
                v.iter().copied().reduce(f64::min),
                v.iter().copied().reduce(f64::max),
            ) {
                range.insert(k.to_string(), [lo, hi]);
            }
        }
    }
    MixResult {
        mix: first.mix.clone(),
        ch1: first.ch1.clone(),
        ch2: first.ch2.clone(),
        lab_up_s: med(|m| m.lab_up_s),
        nbctl_s: med(|m| m.nbctl_s),
        installed_s: med(|m| m.installed_s),
        ready_s: med(|m| m.ready_s),
        tcp,
        rr_us: med(|m| m.rr_us),
        rr_tps: med(|m| m.rr_tps),
        rr_cpu: cpu_of(|m| m.rr_cpu.as_ref()),
        acls: first.acls,
        acl_s: med(|m| m.acl_s),
        flows_before: med(|m| m.flows_before.map(|n| n as f64)).map(|x| x.round() as usize),
        flows_after: med(|m| m.flows_after.map(|n| n as f64)).map(|x| x.round() as usize),
        acl_cpu: cpu_of(|m| m.acl_cpu.as_ref()),
        errors: runs
            .iter()
            .flat_map(|m| {
                m.errors
                    .iter()
                    .map(move |e| format!("round {}: {e}", m.round))
            })
            .collect(),
        not_run: first.not_run.clone(),
        round: runs.len(),
        range,
    }
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    report::cli(&args.run, "ovn", || run(args), figures, markdown)
}

fn run(args: &Args) -> anyhow::Result<Results> {
    let seconds = if args.run.quick { 3.0 } else { args.seconds };
    let bin = super::nicflow_bin()?;
    let mut mixes: Vec<String> = args
        .vswitch
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    // The baseline first, always.
    mixes.retain(|m| m != "ovs");
    mixes.insert(0, "ovs".into());
    let repeat = if args.run.quick {
        1
    } else {
        args.repeat as usize
    };
    let mut r = Results {
        machine: super::machine_description(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        seconds,
        mixes: Vec::new(),
        repeat,
        runs: Vec::new(),
    };
    // Which mixes can run at all (checked once, not every round).
    let mut plan = Vec::new();
    let mut not_run = Vec::new();
    for mix in mixes {
        let vs = ovn::vswitch_mix(&mix, &bin)?;
        let m = MixResult {
            mix: mix.clone(),
            ch1: vs[0].label().into(),
            ch2: vs[1].label().into(),
            acls: args.acls,
            ..MixResult::default()
        };
        if vs.iter().any(|v| matches!(v, Vswitch::Nicflow(_))) {
            if let Err(why) = nicflow_vswitchd(&bin) {
                eprintln!("[ovn] {mix}: not run: {why}");
                not_run.push(MixResult {
                    not_run: Some(why),
                    ..m
                });
                continue;
            }
        }
        plan.push((vs, m));
    }
    'rounds: for round in 1..=repeat {
        for (vs, m) in &plan {
            if super::forward::interrupted() {
                break 'rounds;
            }
            let mut m = MixResult { round, ..m.clone() };
            eprintln!(
                "[ovn] round {round}/{repeat}, {}: ch1 {}, ch2 {}",
                m.mix, m.ch1, m.ch2
            );
            if let Err(e) = measure(vs, seconds, args.acls, &mut m) {
                eprintln!("[ovn] {}: {e:#}", m.mix);
                m.errors.push(format!("{e:#}"));
            }
            r.runs.push(m);
        }
    }
    for (_, m) in &plan {
        let rounds: Vec<&MixResult> = r.runs.iter().filter(|x| x.mix == m.mix).collect();
        if !rounds.is_empty() {
            r.mixes.push(summarize(&rounds));
        }
    }
    r.mixes.extend(not_run);
    Ok(r)
}

fn nicflow_vswitchd(bin: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new(bin)
        .args(["vswitchd", "--help"])
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`nicflow vswitchd --help` fails: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ))
    }
}

/// `(label, pid)` of both vswitches and both ovn-controllers.
fn daemons(lab: &OvnLab) -> Vec<(String, u32)> {
    let mut v = Vec::new();
    for ch in 0..2 {
        for d in ["ovs-vswitchd", "ovn-controller"] {
            if let Some(p) = lab.chassis_pid(ch, d) {
                v.push((format!("{d}@ch{}", ch + 1), p));
            }
        }
    }
    v
}

/// Run `f`, measuring the daemons' CPU over it.
fn with_cpu<T>(lab: &OvnLab, f: impl FnOnce() -> T) -> (T, DaemonCpu) {
    let procs = daemons(lab);
    let before: Vec<_> = procs
        .iter()
        .map(|(l, p)| (l.clone(), cpu::read_pid(*p)))
        .collect();
    let t0 = Instant::now();
    let out = f();
    let wall_s = t0.elapsed().as_secs_f64();
    let mut c = DaemonCpu {
        wall_s,
        ..DaemonCpu::default()
    };
    for ((label, pid), (_, b)) in procs.iter().zip(before) {
        if let (Some(b), Some(a)) = (b, cpu::read_pid(*pid)) {
            let s = (a.user + a.system - b.user - b.system).max(0.0);
            if label.starts_with("ovs-vswitchd") {
                c.vswitch_s += s;
            } else {
                c.controller_s += s;
            }
        }
    }
    (out, c)
}

fn measure(vs: &[Vswitch; 2], seconds: f64, acls: usize, m: &mut MixResult) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut lab = OvnLab::up(&OvnLabSpec::new(vs.clone())).context("OVN lab up")?;
    m.lab_up_s = Some(t0.elapsed().as_secs_f64());
    let t = lab
        .install_topology(Duration::from_secs(120))
        .context("installing the NB topology")?;
    m.nbctl_s = Some(t.nbctl.as_secs_f64());
    m.installed_s = Some(t.installed.as_secs_f64());
    m.ready_s = Some(t.ready.as_secs_f64());
    eprintln!(
        "[ovn] topology: nbctl {:.2} s, ovn-installed {:.2} s, pings {:.2} s",
        t.nbctl.as_secs_f64(),
        t.installed.as_secs_f64(),
        t.ready.as_secs_f64()
    );
    let server = ovn::vm("vm2").expect("vm2").ip4.to_string();
    // One iperf3 server for every run (it serves tests one after another).
    let ilog = lab.dir().join("iperf3-server.log");
    let ps = IPERF_PORT.to_string();
    lab.spawn("vm2", &["iperf3", "-s", "-p", &ps], &ilog)?;
    lab.wait_listening("vm2", IPERF_PORT, Duration::from_secs(10))?;
    for streams in [1usize, 4] {
        match iperf(&mut lab, &server, streams, seconds) {
            Ok(tcp) => {
                eprintln!(
                    "[ovn] TCP x{streams} vm1(ch1) -> vm2(ch2): {:.2} Gbit/s, vswitch {:.2} cores",
                    tcp.gbps,
                    tcp.cpu.vswitch_cores()
                );
                m.tcp.push(tcp);
            }
            Err(e) => m.errors.push(format!("iperf3 -P {streams}: {e:#}")),
        }
    }
    match rr(&mut lab, &server, seconds) {
        Ok((us, c)) => {
            eprintln!(
                "[ovn] TCP RR: {us:.1} µs mean round trip, {:.0} transactions/s",
                1e6 / us
            );
            m.rr_us = Some(us);
            m.rr_tps = Some(1e6 / us);
            m.rr_cpu = Some(c);
        }
        Err(e) => m.errors.push(format!("sockperf: {e:#}")),
    }
    let count = |lab: &OvnLab| -> Option<usize> {
        lab.ofctl(
            1,
            &["-O", "OpenFlow15", "--no-stats", "dump-flows", "br-int"],
        )
        .ok()
        .map(|s| s.lines().filter(|l| l.contains("actions=")).count())
    };
    m.flows_before = count(&lab);
    let mut cmd: Vec<String> = vec!["--wait=hv".into()];
    for i in 0..acls {
        if i > 0 {
            cmd.push("--".into());
        }
        cmd.extend([
            "acl-add".into(),
            "ls2".into(),
            "to-lport".into(),
            "1003".into(),
            format!(r#"outport == "vm4" && tcp.dst == {}"#, 20000 + i),
            "allow-related".into(),
        ]);
    }
    let argv: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let (res, c) = with_cpu(&lab, || {
        let t = Instant::now();
        lab.nbctl(&argv).map(|_| t.elapsed())
    });
    match res {
        Ok(d) => {
            m.acl_s = Some(d.as_secs_f64());
            m.acl_cpu = Some(c);
            m.flows_after = count(&lab);
            eprintln!(
                "[ovn] {acls} ACLs on every chassis in {:.2} s (ch2 br-int flows {:?} -> {:?})",
                d.as_secs_f64(),
                m.flows_before,
                m.flows_after
            );
        }
        Err(e) => m.errors.push(format!("adding {acls} ACLs: {e}")),
    }
    lab.teardown().context("teardown")?;
    Ok(())
}

const IPERF_PORT: u16 = 5201;

fn iperf(lab: &mut OvnLab, server: &str, streams: usize, seconds: f64) -> anyhow::Result<Tcp> {
    let ps = IPERF_PORT.to_string();
    let log = lab.dir().join("iperf3-server.log");
    let secs = format!("{}", seconds.max(1.0).round() as u64);
    let p = streams.to_string();
    let argv = [
        "iperf3", "-c", server, "-p", &ps, "-t", &secs, "-P", &p, "-J",
    ];
    // One retry: a server between two tests may refuse the next one for a
    // moment.
    let mut attempt = 0;
    let (j, cpu) = loop {
        attempt += 1;
        let (out, cpu) = with_cpu(lab, || lab.command("vm1", &argv).output());
        let out = out.context("iperf3")?;
        let j: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("iperf3 -J output")?;
        match j.get("error") {
            None => break (j, cpu),
            Some(e) if attempt >= 2 => {
                let server = std::fs::read_to_string(&log).unwrap_or_default();
                anyhow::bail!("iperf3: {e}; server log: {}", server.trim());
            }
            Some(e) => {
                eprintln!("[ovn] iperf3 -P {streams}: {e}; retrying");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    };
    let end = &j["end"];
    let bps = end["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3: no end.sum_received")?;
    Ok(Tcp {
        streams,
        gbps: bps / 1e9,
        retransmits: end["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
        cpu,
    })
}

fn rr(lab: &mut OvnLab, server: &str, seconds: f64) -> anyhow::Result<(f64, DaemonCpu)> {
    let log = lab.dir().join("sockperf-server.log");
    lab.spawn(
        "vm2",
        &["sockperf", "sr", "--tcp", "-i", server, "-p", "11111"],
        &log,
    )?;
    lab.wait_listening("vm2", 11111, Duration::from_secs(10))?;
    let secs = format!("{}", seconds.max(1.0).round() as u64);
    let argv = [
        "sockperf", "pp", "--tcp", "-i", server, "-p", "11111", "-t", &secs,
    ];
    let (out, cpu) = with_cpu(lab, || lab.command("vm1", &argv).output());
    let out = out.context("sockperf")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let us = parse_sockperf_avg_us(&text).with_context(|| format!("sockperf output: {text}"))?;
    // sockperf reports half the round trip (one-way latency).
    Ok((us * 2.0, cpu))
}

/// `avg-latency=12.345` in sockperf's summary (µs, half a round trip).
pub fn parse_sockperf_avg_us(text: &str) -> Option<f64> {
    let i = text.find("avg-latency=")? + "avg-latency=".len();
    let num: String = text[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse().ok()
}

fn baseline(r: &Results) -> Option<&MixResult> {
    r.mixes
        .iter()
        .find(|m| m.mix == "ovs" && m.not_run.is_none())
}

fn tcp_of(m: &MixResult, streams: usize) -> Option<&Tcp> {
    m.tcp.iter().find(|t| t.streams == streams)
}

fn figures(r: &Results) -> Vec<Figure> {
    let series = |f: &dyn Fn(&Tcp) -> f64| -> Vec<Series> {
        r.mixes
            .iter()
            .filter(|m| m.not_run.is_none())
            .map(|m| Series {
                name: format!("{} (ch1 {}, ch2 {})", m.mix, m.ch1, m.ch2),
                points: [1usize, 4]
                    .iter()
                    .map(|&s| (s as f64, tcp_of(m, s).map(f)))
                    .collect(),
            })
            .collect()
    };
    // With several rounds: the min and max of each mix beside its median.
    let mut tcp = series(&|t| t.gbps);
    for m in r
        .mixes
        .iter()
        .filter(|m| m.not_run.is_none() && !m.range.is_empty())
    {
        for (end, label) in [(0usize, "min"), (1, "max")] {
            tcp.push(Series {
                name: format!("{} {label} of {} rounds", m.mix, m.round),
                points: [1usize, 4]
                    .iter()
                    .map(|&s| {
                        let key = format!("tcp{s}_gbps");
                        (s as f64, m.range.get(&key).map(|r| r[end]))
                    })
                    .collect(),
            });
        }
    }
    let median = if r.repeat > 1 {
        format!(", median of {} rounds", r.repeat)
    } else {
        String::new()
    };
    vec![
        Figure {
            id: "tcp".into(),
            title: format!("Cross-chassis TCP over Geneve (vm1 on ch1 -> vm2 on ch2{median})"),
            x_label: "parallel TCP streams".into(),
            y_label: "throughput (Gbit/s)".into(),
            log_x: false,
            series: tcp,
        },
        Figure {
            id: "vswitch-cpu-per-gbit".into(),
            title: format!("Vswitch CPU per Gbit (both chassis{median})"),
            x_label: "parallel TCP streams".into(),
            y_label: "vswitch CPU seconds per Gbit".into(),
            log_x: false,
            series: series(&|t| {
                cpu::cpu_s_per_gbit(t.cpu.vswitch_s, (t.gbps * 1e9 / 8.0 * t.cpu.wall_s) as u64)
            }),
        },
    ]
}

fn ratio(x: Option<f64>, base: Option<f64>) -> String {
    match (x, base) {
        (Some(x), Some(b)) if b > 0.0 && x.is_finite() => format!("{:.2}x", x / b),
        _ => "—".into(),
    }
}

fn markdown(r: &Results, figs: &[Figure]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# nicflow bench ovn\n");
    let _ = writeln!(s, "{}", report::machine_section(""));
    let _ = writeln!(
        s,
        "Two-chassis OVN lab (`nicflow::ovn`, docs/ovn.md): OVN 23.03 ovsdb-server, ovn-northd and \
         ovn-controller; per chassis its own ovsdb-server and the vswitch of the mix; Geneve between \
         chassis (an ovs-vswitchd chassis tunnels through br-phy, OVS's userspace tunnelling; a nicflow \
         chassis from the underlay interface, with the kernel's route). TCP: iperf3 vm1 (ch1) -> vm2 (ch2), {} s. \
         RR: sockperf ping-pong over TCP, one transaction in flight. ACLs: one ovn-nbctl \
         transaction with `--wait=hv` (returns when every chassis has them installed).\n",
        r.seconds
    );
    let _ = writeln!(s, "Command: `{}`\n", r.command);
    if r.repeat > 1 {
        let _ = writeln!(
            s,
            "Every mix measured {} times, a fresh lab each time, the mixes alternating within each \
             round; each cell is the median of the rounds, with the min–max in parentheses \
             (ratios are of medians; each round is listed below).\n",
            r.repeat
        );
    }
    // A measure's median, and its min–max when there were several rounds.
    let fr = |m: &MixResult, key: &str, x: Option<f64>, d: usize| match m.range.get(key) {
        Some([lo, hi]) if x.is_some() => format!(
            "{} ({}–{})",
            report::cell(x, d),
            report::cell(Some(*lo), d),
            report::cell(Some(*hi), d)
        ),
        _ => report::cell(x, d),
    };
    let _ = writeln!(
        s,
        "| mix | ch1 / ch2 | topology ovn-installed s | pings pass s | TCP x1 Gbit/s | TCP x4 Gbit/s | vswitch cores x1 / x4 | RR µs | RR trans/s | {} ACLs s | ovn-controller CPU s (ACLs) |",
        r.mixes.first().map_or(0, |m| m.acls)
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for m in &r.mixes {
        if let Some(why) = &m.not_run {
            let _ = writeln!(
                s,
                "| {} | {} / {} | not run: {} ||||||||",
                m.mix,
                m.ch1,
                m.ch2,
                why.replace('|', "/")
            );
            continue;
        }
        let t1 = tcp_of(m, 1);
        let t4 = tcp_of(m, 4);
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} |",
            m.mix,
            m.ch1,
            m.ch2,
            fr(m, "installed_s", m.installed_s, 2),
            fr(m, "ready_s", m.ready_s, 2),
            fr(m, "tcp1_gbps", t1.map(|t| t.gbps), 3),
            fr(m, "tcp4_gbps", t4.map(|t| t.gbps), 3),
            fr(m, "tcp1_cores", t1.map(|t| t.cpu.vswitch_cores()), 2),
            fr(m, "tcp4_cores", t4.map(|t| t.cpu.vswitch_cores()), 2),
            fr(m, "rr_us", m.rr_us, 1),
            fr(m, "rr_tps", m.rr_tps, 0),
            fr(m, "acl_s", m.acl_s, 2),
            fr(
                m,
                "acl_controller_s",
                m.acl_cpu.as_ref().map(|c| c.controller_s),
                2
            ),
        );
    }
    if let Some(b) = baseline(r) {
        let others: Vec<&MixResult> = r
            .mixes
            .iter()
            .filter(|m| m.mix != "ovs" && m.not_run.is_none())
            .collect();
        if !others.is_empty() {
            let _ = writeln!(s, "\nRatios to ovs-vswitchd (same run):\n");
            let _ = writeln!(
                s,
                "| mix | TCP x1 | TCP x4 | RR trans/s | topology install time | {} ACLs time |",
                b.acls
            );
            let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
            for m in others {
                let g = |m: &MixResult, n| tcp_of(m, n).map(|t| t.gbps);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    m.mix,
                    ratio(g(m, 1), g(b, 1)),
                    ratio(g(m, 4), g(b, 4)),
                    ratio(m.rr_tps, b.rr_tps),
                    ratio(m.installed_s, b.installed_s),
                    ratio(m.acl_s, b.acl_s),
                );
            }
        }
    }
    if r.runs.len() > r.mixes.len() {
        let _ = writeln!(s, "\nEvery round, in the order measured:\n");
        let _ = writeln!(
            s,
            "| round | mix | topology ovn-installed s | TCP x1 Gbit/s | TCP x4 Gbit/s | RR trans/s | ACLs s |"
        );
        let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|");
        let c = report::cell;
        for m in &r.runs {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                m.round,
                m.mix,
                c(m.installed_s, 2),
                c(tcp_of(m, 1).map(|t| t.gbps), 3),
                c(tcp_of(m, 4).map(|t| t.gbps), 3),
                c(m.rr_tps, 0),
                c(m.acl_s, 2),
            );
        }
    }
    for m in &r.mixes {
        for e in &m.errors {
            let _ = writeln!(s, "\n{}: {e}", m.mix);
        }
        if let (Some(a), Some(b)) = (m.flows_before, m.flows_after) {
            let _ = writeln!(s, "\n{}: ch2 br-int flows {a} -> {b} with the ACLs.", m.mix);
        }
    }
    let _ = writeln!(s);
    for fig in figs {
        let _ = writeln!(s, "### {}\n\n{}", fig.title, fig.markdown(3));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockperf_summary_parses() {
        let t = "sockperf: ====> avg-latency=572.909 (std-dev=575.571)\nsockperf: Summary: Latency is 572.909 usec\n";
        assert_eq!(parse_sockperf_avg_us(t), Some(572.909));
        assert_eq!(parse_sockperf_avg_us("nothing"), None);
    }

    #[test]
    fn report_shows_ratios_and_not_run_mixes() {
        let tcp = |g| Tcp {
            streams: 1,
            gbps: g,
            retransmits: 0,
            cpu: DaemonCpu {
                wall_s: 1.0,
                vswitch_s: 1.0,
                controller_s: 0.0,
            },
        };
        let ovs = MixResult {
            mix: "ovs".into(),
            tcp: vec![tcp(0.2)],
            rr_tps: Some(1000.0),
            acls: 1000,
            ..MixResult::default()
        };
        let nf = MixResult {
            mix: "nicflow".into(),
            tcp: vec![tcp(0.6)],
            rr_tps: Some(1500.0),
            ..MixResult::default()
        };
        let gone = MixResult {
            mix: "mixed".into(),
            not_run: Some("`nicflow vswitchd --help` fails".into()),
            ..MixResult::default()
        };
        let r = Results {
            machine: String::new(),
            command: "x".into(),
            seconds: 1.0,
            mixes: vec![ovs, nf, gone],
            repeat: 1,
            runs: Vec::new(),
        };
        let md = markdown(&r, &figures(&r));
        assert!(md.contains("| nicflow | 3.00x |"), "{md}");
        assert!(md.contains("1.50x"), "{md}");
        assert!(
            md.contains("not run: `nicflow vswitchd --help` fails"),
            "{md}"
        );
    }
}

#[cfg(test)]
mod repeat_tests {
    use super::*;

    fn run(mix: &str, round: usize, gbps: f64, rr: Option<f64>) -> MixResult {
        MixResult {
            mix: mix.into(),
            round,
            tcp: vec![Tcp {
                streams: 1,
                gbps,
                retransmits: round as u64,
                cpu: DaemonCpu {
                    wall_s: 10.0,
                    vswitch_s: gbps * 10.0,
                    controller_s: 0.1,
                },
            }],
            rr_tps: rr,
            acls: 1000,
            ..MixResult::default()
        }
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn rounds_summarised_as_median_and_range() {
        let rounds = [
            run("nicflow", 1, 0.9, Some(400.0)),
            run("nicflow", 2, 0.5, None),
            run("nicflow", 3, 0.7, Some(600.0)),
        ];
        let refs: Vec<&MixResult> = rounds.iter().collect();
        let m = summarize(&refs);
        assert_eq!(m.round, 3);
        assert_eq!(tcp_of(&m, 1).unwrap().gbps, 0.7);
        assert_eq!(tcp_of(&m, 1).unwrap().retransmits, 2);
        assert_eq!(tcp_of(&m, 1).unwrap().cpu.vswitch_s, 7.0);
        // A round without the measure does not count towards it.
        assert_eq!(m.rr_tps, Some(500.0));
        assert_eq!(m.range["tcp1_gbps"], [0.5, 0.9]);
        assert_eq!(m.range["rr_tps"], [400.0, 600.0]);
        assert!(!m.range.contains_key("acl_s"));
        // One round: no range.
        assert!(summarize(&refs[..1]).range.is_empty());
    }

    #[test]
    fn report_shows_medians_ranges_and_every_round() {
        let runs = vec![
            run("ovs", 1, 0.2, Some(1000.0)),
            run("nicflow", 1, 0.6, Some(300.0)),
            run("ovs", 2, 0.4, Some(2000.0)),
            run("nicflow", 2, 1.0, Some(500.0)),
        ];
        let mixes = ["ovs", "nicflow"]
            .iter()
            .map(|n| summarize(&runs.iter().filter(|m| m.mix == *n).collect::<Vec<_>>()))
            .collect();
        let r = Results {
            machine: String::new(),
            command: "nicflow bench ovn --repeat 2".into(),
            seconds: 2.0,
            mixes,
            repeat: 2,
            runs,
        };
        let figs = figures(&r);
        let md = markdown(&r, &figs);
        assert!(md.contains("0.300 (0.200–0.400)"), "{md}");
        assert!(md.contains("0.800 (0.600–1.000)"), "{md}");
        // Ratio of the medians: 0.8 / 0.3.
        assert!(md.contains("| nicflow | 2.67x |"), "{md}");
        assert!(md.contains("| 2 | nicflow |"), "{md}");
        let tcp = figs.iter().find(|f| f.id == "tcp").unwrap();
        let names: Vec<&str> = tcp.series.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"nicflow min of 2 rounds"), "{names:?}");
        let max = tcp
            .series
            .iter()
            .find(|s| s.name == "ovs max of 2 rounds")
            .unwrap();
        assert_eq!(max.points[0], (1.0, Some(0.4)));
        // An old samples.json (one run per mix, no rounds) still renders.
        let old = r#"{"machine":"m","command":"c","seconds":10.0,"mixes":[]}"#;
        let r: Results = serde_json::from_str(old).unwrap();
        assert_eq!(r.repeat, 1);
    }
}
