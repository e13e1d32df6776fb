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
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub command: String,
    pub seconds: f64,
    pub mixes: Vec<MixResult>,
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
    let mut r = Results {
        machine: super::machine_description(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        seconds,
        mixes: Vec::new(),
    };
    for mix in mixes {
        if super::forward::interrupted() {
            break;
        }
        let vs = ovn::vswitch_mix(&mix, &bin)?;
        let mut m = MixResult {
            mix: mix.clone(),
            ch1: vs[0].label().into(),
            ch2: vs[1].label().into(),
            acls: args.acls,
            ..MixResult::default()
        };
        if vs.iter().any(|v| matches!(v, Vswitch::Nicflow(_))) {
            if let Err(why) = nicflow_vswitchd(&bin) {
                eprintln!("[ovn] {mix}: not run: {why}");
                m.not_run = Some(why);
                r.mixes.push(m);
                continue;
            }
        }
        eprintln!("[ovn] {mix}: ch1 {}, ch2 {}", m.ch1, m.ch2);
        if let Err(e) = measure(&vs, seconds, args.acls, &mut m) {
            eprintln!("[ovn] {mix}: {e:#}");
            m.errors.push(format!("{e:#}"));
        }
        r.mixes.push(m);
    }
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
    vec![
        Figure {
            id: "tcp".into(),
            title: "Cross-chassis TCP over Geneve (vm1 on ch1 -> vm2 on ch2)".into(),
            x_label: "parallel TCP streams".into(),
            y_label: "throughput (Gbit/s)".into(),
            log_x: false,
            series: series(&|t| t.gbps),
        },
        Figure {
            id: "vswitch-cpu-per-gbit".into(),
            title: "Vswitch CPU per Gbit (both chassis)".into(),
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
    let f = |x: Option<f64>, d: usize| report::cell(x, d);
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
            f(m.installed_s, 2),
            f(m.ready_s, 2),
            f(t1.map(|t| t.gbps), 3),
            f(t4.map(|t| t.gbps), 3),
            f(t1.map(|t| t.cpu.vswitch_cores()), 2),
            f(t4.map(|t| t.cpu.vswitch_cores()), 2),
            f(m.rr_us, 1),
            f(m.rr_tps, 0),
            f(m.acl_s, 2),
            f(m.acl_cpu.as_ref().map(|c| c.controller_s), 2),
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
