//! `nicflow bench streams`: iperf3 TCP with 1 to 32 parallel streams
//! through every engine, throughput and CPU (document 000, figures
//! 5.3-5.6: CPU usage and throughput against the number of streams, veth
//! vs SR-IOV offload).
//!
//! Per repetition and engine: a fresh one-pair [`Testbed`] (c1 -> switch ->
//! s1, pairwise rules), an idle round-trip latency with sockperf, then for
//! each stream count one `iperf3 -c -P n` run with CPU accounting around
//! it ([`super::cpu`]): machine-wide busy, user, system and softirq time,
//! context switches and interrupts, the switch process's CPU, the iperf3
//! client's (rusage) and server's (`/proc`) CPU, and cycles from `perf
//! stat` where the machine has counters. Engines are interleaved
//! (repetition 1 of every engine, then repetition 2, ...) so a change in
//! background load hits all of them; the report shows medians. The run
//! directory ([`super::report`]) holds the raw samples, a CSV and a PNG
//! per figure, and the Markdown report.

use super::cpu::{self, PerfSupport, Snapshot, Usage};
use super::forward::{self, interrupted, Engine, HostOffload};
use super::latency::{self, Latency};
use super::median;
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated (any engine `bench forward` knows).
    #[arg(
        long,
        default_value = "nicflow-tc,nicflow-afpacket,nicflow-afxdp,linux-bridge,ovs"
    )]
    pub engines: String,
    /// Repetitions per engine and stream count (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Parallel TCP stream counts.
    #[arg(long, default_value = "1,4,12,24,32")]
    pub streams: String,
    /// Host-side veth offloads: default (kernel defaults) or off.
    #[arg(long, default_value = "default")]
    pub host_offload: String,
    /// Skip the idle sockperf latency measurement.
    #[arg(long)]
    pub no_latency: bool,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    pub engines: Vec<Engine>,
    pub reps: usize,
    pub seconds: u64,
    pub streams: Vec<usize>,
    pub host_offload: HostOffload,
    pub latency: bool,
    pub quick: bool,
}

/// One iperf3 run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub streams: usize,
    pub iperf: testbed::IperfResult,
    pub usage: Usage,
    /// Packets s1's eth0 received (for cycles per packet).
    pub rx_packets: u64,
    /// Frames the pair's veths dropped for want of ring space
    /// ([`testbed::veth_ring_drops`]): what the XDP engines' retransmits
    /// come from.
    #[serde(default)]
    pub veth_drops: u64,
}

/// One engine, one repetition.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EngineRun {
    pub engine: Engine,
    pub rep: usize,
    pub lab: String,
    pub error: Option<String>,
    pub latency: Option<Latency>,
    pub latency_error: Option<String>,
    /// Busy cores in the second before the tests (lab idle), switch
    /// process excluded: other load on the shared machine.
    pub background_busy_cores: f64,
    pub samples: Vec<Sample>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub perf: String,
    pub options: Options,
    pub started_unix: u64,
    pub runs: Vec<EngineRun>,
}

const PORT: u16 = 5201;
/// Other load (cores) above which the report warns.
const BUSY_BACKGROUND: f64 = 0.25;
const LAT_PORT: u16 = 11111;

fn options(a: &Args) -> anyhow::Result<Options> {
    let (reps, seconds) = if a.run.quick {
        (1, 2)
    } else {
        (a.reps.max(1), a.seconds.max(1))
    };
    Ok(Options {
        engines: testbed::parse_engines(&a.engines)?,
        reps,
        seconds,
        streams: testbed::parse_counts(&a.streams)?,
        host_offload: testbed::parse_host_offload(&a.host_offload)?,
        latency: !a.no_latency,
        quick: a.run.quick,
    })
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    let measure = || run(&options(args)?);
    report::cli(&args.run, "streams", measure, figures, markdown)
}

fn progress(s: &str) {
    eprintln!("[streams] {s}");
}

pub fn run(opts: &Options) -> anyhow::Result<Results> {
    let perf = PerfSupport::detect();
    let mut results = Results {
        machine: super::machine_description(),
        perf: perf.describe(),
        options: opts.clone(),
        started_unix: report::unix_now(),
        runs: Vec::new(),
    };
    let mut engines = opts.engines.clone();
    if engines.iter().any(|e| e.is_ovs()) {
        if let Err(e) = forward::ovs::ensure_installed(&mut |s| progress(s)) {
            progress(&format!("skipping OVS engines: {e}"));
            engines.retain(|e| !e.is_ovs());
        }
    }
    'reps: for rep in 0..opts.reps {
        for &engine in &engines {
            if interrupted() {
                break 'reps;
            }
            progress(&format!("rep {}/{}: {}", rep + 1, opts.reps, engine.name()));
            let mut run = EngineRun {
                engine,
                rep,
                lab: String::new(),
                error: None,
                latency: None,
                latency_error: None,
                background_busy_cores: f64::NAN,
                samples: Vec::new(),
            };
            if let Err(e) = engine_body(opts, &perf, &mut run) {
                progress(&format!("{} rep {}: {e:#}", engine.name(), rep + 1));
                run.error = Some(format!("{e:#}"));
            }
            results.runs.push(run);
        }
    }
    if interrupted() {
        anyhow::bail!("interrupted; everything the bench created has been removed");
    }
    Ok(results)
}

fn engine_body(opts: &Options, perf: &PerfSupport, run: &mut EngineRun) -> anyhow::Result<()> {
    let spec = TestbedSpec {
        host_offload: opts.host_offload,
        rules: Rules::Explicit,
        ..TestbedSpec::new(run.engine, 1, "str")
    };
    let tb = Testbed::up(&spec)?;
    run.lab = tb.lab_name().to_string();
    if !tb.ping(0) {
        progress(&format!(
            "{}: c1 cannot ping s1; measuring anyway",
            run.engine.name()
        ));
    }
    let (c, s) = (tb.client(0).clone(), tb.server(0).clone());
    if opts.latency {
        match latency::ping_pong(&c.netns, &s.netns, &s.ip4.to_string(), LAT_PORT, 2, 64) {
            Ok(l) => run.latency = Some(l),
            Err(e) => run.latency_error = Some(format!("{e:#}")),
        }
    }
    (run.background_busy_cores, _) =
        forward::measure::background_busy(Duration::from_secs(1), tb.switch_pid());
    let dir = tb.scratch_dir()?;
    let server = tb.start_iperf_server(0, PORT)?;
    for &n in &opts.streams {
        if interrupted() {
            anyhow::bail!("interrupted");
        }
        let mut pids = vec![("iperf3-server".to_string(), server.pid)];
        if let Some(p) = tb.switch_pid() {
            pids.push(("switch".into(), p));
        }
        let rx0 = testbed::rx_packets(&s.netns, "eth0");
        let vd0 = testbed::veth_ring_drops(&tb, 0);
        let p = cpu::Perf::start(perf, &dir, &format!("{n}"));
        let a = Snapshot::take(&pids);
        let client = tb.spawn_iperf_client(0, PORT, opts.seconds, n, &dir)?;
        let cpid = client.pid;
        let res = client.finish(Instant::now() + Duration::from_secs(opts.seconds + 20));
        let b = Snapshot::take(&pids);
        let mut usage = Usage::between(&a, &b);
        usage.perf = cpu::perf_or_note(p, perf);
        usage.add_process("iperf3-client", cpid, res.user_s, res.system_s);
        let rx = testbed::rx_packets(&s.netns, "eth0").saturating_sub(rx0);
        let veth_drops = testbed::veth_ring_drops(&tb, 0).saturating_sub(vd0);
        progress(&format!(
            "{} rep {} streams {n}: {}",
            run.engine.name(),
            run.rep + 1,
            match &res.error {
                Some(e) => format!("FAILED: {e}"),
                None => format!(
                    "{:.2} Gbit/s, machine {:.2} cores busy, switch {:.2} s CPU",
                    res.gbps,
                    usage.busy_cores(),
                    usage.procs_cpu("switch").unwrap_or(0.0)
                ),
            }
        ));
        run.samples.push(Sample {
            streams: n,
            iperf: res,
            usage,
            rx_packets: rx,
            veth_drops,
        });
        // Let the server finish the previous test's teardown.
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(server);
    tb.down()
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

type Get = fn(&Sample) -> Option<f64>;

fn g_veth_drops(s: &Sample) -> Option<f64> {
    Some(s.veth_drops as f64)
}

fn med(r: &Results, e: Engine, n: usize, f: Get) -> Option<f64> {
    let mut v: Vec<f64> = r
        .runs
        .iter()
        .filter(|x| x.engine == e)
        .flat_map(|x| x.samples.iter())
        .filter(|s| s.streams == n && s.iperf.error.is_none())
        .filter_map(f)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| median(&mut v))
}

fn engines_in(r: &Results) -> Vec<Engine> {
    let mut v = Vec::new();
    for x in &r.runs {
        if !v.contains(&x.engine) {
            v.push(x.engine);
        }
    }
    v
}

fn g_gbps(s: &Sample) -> Option<f64> {
    Some(s.iperf.gbps)
}
fn g_busy_pct(s: &Sample) -> Option<f64> {
    Some(100.0 * s.usage.busy_cores() / cpu::cores())
}
fn g_s_per_gbit(s: &Sample) -> Option<f64> {
    Some(cpu::cpu_s_per_gbit(s.usage.busy_s, s.iperf.bytes))
}
fn g_switch_cores(s: &Sample) -> Option<f64> {
    s.usage.procs_cpu("switch").map(|c| c / s.usage.wall_s)
}
/// CPU of the processes of the test (switch + iperf3 client and server)
/// per Gbit: unlike the machine-wide figure, other load on a shared
/// machine does not inflate it; kernel work done in softirq context on
/// behalf of the traffic is in it only where the kernel charged it to
/// those processes.
fn g_proc_s_per_gbit(s: &Sample) -> Option<f64> {
    let c = s.usage.procs_cpu("iperf3")? + s.usage.procs_cpu("switch").unwrap_or(0.0);
    Some(cpu::cpu_s_per_gbit(c, s.iperf.bytes))
}
fn g_iperf_cpu_s(s: &Sample) -> Option<f64> {
    s.usage.procs_cpu("iperf3")
}
fn g_softirq_pct(s: &Sample) -> Option<f64> {
    Some(100.0 * cpu::ratio(s.usage.softirq_s, s.usage.wall_s) / cpu::cores())
}
fn g_user_pct(s: &Sample) -> Option<f64> {
    Some(100.0 * cpu::ratio(s.usage.user_s, s.usage.wall_s) / cpu::cores())
}
fn g_sys_pct(s: &Sample) -> Option<f64> {
    Some(100.0 * cpu::ratio(s.usage.system_s, s.usage.wall_s) / cpu::cores())
}
fn g_ctxt_gbit(s: &Sample) -> Option<f64> {
    Some(cpu::per_gbit(s.usage.ctxt, s.iperf.bytes))
}
fn g_intr_gbit(s: &Sample) -> Option<f64> {
    Some(cpu::per_gbit(s.usage.intr, s.iperf.bytes))
}
fn g_retr(s: &Sample) -> Option<f64> {
    s.iperf.retransmits.map(|x| x as f64)
}
fn g_cyc_pkt(s: &Sample) -> Option<f64> {
    cpu::cycles_per_packet(s.usage.perf.cycles, s.rx_packets)
}

fn figure(r: &Results, id: &str, title: &str, y: &str, f: Get) -> Figure {
    let series = engines_in(r)
        .into_iter()
        .map(|e| Series {
            name: e.name().into(),
            points: r
                .options
                .streams
                .iter()
                .map(|&n| (n as f64, med(r, e, n, f)))
                .collect(),
        })
        .collect();
    Figure {
        id: id.into(),
        title: title.into(),
        x_label: "parallel TCP streams (iperf3 -P)".into(),
        y_label: y.into(),
        log_x: true,
        series,
    }
}

pub fn figures(r: &Results) -> Vec<Figure> {
    vec![
        figure(
            r,
            "cpu",
            "CPU usage vs parallel streams (cf. doc 000 fig. 5.3/5.5)",
            "machine CPU busy (% of all cores)",
            g_busy_pct,
        ),
        figure(
            r,
            "throughput",
            "Throughput vs parallel streams (cf. doc 000 fig. 5.4/5.6)",
            "TCP throughput (Gbit/s)",
            g_gbps,
        ),
        figure(
            r,
            "cpu-per-gbit",
            "CPU cost per Gbit vs parallel streams",
            "machine CPU seconds per Gbit (s/Gbit)",
            g_s_per_gbit,
        ),
        figure(
            r,
            "process-cpu-per-gbit",
            "Switch + iperf3 process CPU per Gbit vs parallel streams",
            "process CPU seconds per Gbit (s/Gbit)",
            g_proc_s_per_gbit,
        ),
    ]
}

pub fn markdown(r: &Results, figs: &[Figure]) -> String {
    let o = &r.options;
    let mut s = String::new();
    let _ = writeln!(s, "# nicflow bench streams\n");
    let _ = writeln!(s, "{}", report::machine_section(&r.perf));
    let _ = writeln!(
        s,
        "{} repetition(s) of {} s `iperf3 -c -P n` runs per engine and stream count ({}), \
         medians shown; host offloads {:?}; pairwise rules (`in_port=p1,actions=output:p2` and \
         back) for nicflow and OVS, a learning bridge for linux-bridge; engines interleaved, \
         each repetition on a freshly built lab.{}\n",
        o.reps,
        o.seconds,
        o.streams
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        o.host_offload,
        if o.quick {
            " **Quick run** (`--quick`)."
        } else {
            ""
        }
    );
    let mut bg: Vec<f64> = r
        .runs
        .iter()
        .map(|x| x.background_busy_cores)
        .filter(|x| x.is_finite())
        .collect();
    if !bg.is_empty() {
        let hi = bg.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "Other load on the shared machine before each engine's tests (lab idle, switch \
             process excluded): median {:.2}, max {:.2} cores.\n",
            median(&mut bg),
            hi
        );
        let busy = r
            .runs
            .iter()
            .filter(|x| x.background_busy_cores > BUSY_BACKGROUND)
            .count();
        if busy > 0 {
            let _ = writeln!(
                s,
                "**Warning: other load above {BUSY_BACKGROUND} cores before {busy} of {} engine \
                 runs.** Those runs shared the CPUs with someone else's work: throughput is \
                 depressed and machine-wide CPU figures include the other load (busy % near \
                 100 whatever the engine). The process CPU per Gbit (switch + iperf3) is the \
                 figure least affected.\n",
                r.runs.len()
            );
        }
    }
    let _ = writeln!(s, "## Figures\n");
    for (f, d) in figs.iter().zip([1usize, 2, 3, 3]) {
        let _ = writeln!(s, "{}", f.markdown(d));
    }
    let _ = writeln!(s, "## Details (medians)\n");
    let _ = writeln!(
        s,
        "CPU columns are shares of all {} cores over the run (user includes nice; softirq is \
         where veth delivery and the kernel bridge run). switch = the switch process's \
         utime+stime (nicflow daemon, ovs-vswitchd; none for the kernel bridge); iperf3 = client \
         (rusage) + server (`/proc`) CPU seconds. ctxt and intr per Gbit from `/proc/stat`. \
         veth ring drops: frames the pair's four veth ends dropped for want of ring space \
         (`ethtool -S` `xdp_xmit_errors` plus `tx_dropped`: a veth sending into a peer that \
         runs XDP queues into its 256-slot ring). \
         cycles/packet needs hardware counters: {}.\n",
        cpu::cores(),
        r.perf
    );
    let _ = writeln!(
        s,
        "| engine | streams | Gbit/s | busy % | user % | system % | softirq % | switch cores | iperf3 CPU s | CPU s/Gbit | ctxt/Gbit | intr/Gbit | retransmits | veth ring drops | cycles/pkt |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for e in engines_in(r) {
        for &n in &o.streams {
            let m = |f: Get| med(r, e, n, f);
            let _ = writeln!(
                s,
                "| {} | {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                e.name(),
                report::cell(m(g_gbps), 2),
                report::cell(m(g_busy_pct), 0),
                report::cell(m(g_user_pct), 0),
                report::cell(m(g_sys_pct), 0),
                report::cell(m(g_softirq_pct), 0),
                report::cell(m(g_switch_cores), 2),
                report::cell(m(g_iperf_cpu_s), 2),
                report::cell(m(g_s_per_gbit), 3),
                report::cell(m(g_ctxt_gbit), 0),
                report::cell(m(g_intr_gbit), 0),
                report::cell(m(g_retr), 0),
                report::cell(m(g_veth_drops), 0),
                match m(g_cyc_pkt) {
                    Some(v) => format!("{v:.0}"),
                    None => "n/a".into(),
                }
            );
        }
    }
    if o.latency {
        let _ = writeln!(
            s,
            "\n## Idle round-trip latency (sockperf UDP ping-pong, 64-byte messages, 2 s, median of repetitions)\n"
        );
        let _ = writeln!(s, "| engine | p50 µs | p99 µs | p99.9 µs |");
        let _ = writeln!(s, "|---|---:|---:|---:|");
        for e in engines_in(r) {
            let lat: Vec<&Latency> = r
                .runs
                .iter()
                .filter(|x| x.engine == e)
                .filter_map(|x| x.latency.as_ref())
                .collect();
            let m = |f: fn(&Latency) -> f64| {
                let mut v: Vec<f64> = lat.iter().map(|l| f(l)).collect();
                (!v.is_empty()).then(|| median(&mut v))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                e.name(),
                report::cell(m(|l| l.p50_us), 0),
                report::cell(m(|l| l.p99_us), 0),
                report::cell(m(|l| l.p999_us), 0)
            );
        }
    }
    let fails: Vec<String> = r
        .runs
        .iter()
        .flat_map(|x| {
            let mut v = Vec::new();
            if let Some(e) = &x.error {
                v.push(format!("{} rep {}: {e}", x.engine.name(), x.rep + 1));
            }
            if let Some(e) = &x.latency_error {
                v.push(format!(
                    "{} rep {} latency: {e}",
                    x.engine.name(),
                    x.rep + 1
                ));
            }
            for smp in &x.samples {
                if let Some(e) = &smp.iperf.error {
                    v.push(format!(
                        "{} rep {} streams {}: {e}",
                        x.engine.name(),
                        x.rep + 1,
                        smp.streams
                    ));
                }
            }
            v
        })
        .collect();
    if !fails.is_empty() {
        let _ = writeln!(s, "\n## Failures\n");
        for f in fails {
            let _ = writeln!(s, "- {f}");
        }
    }
    let _ = writeln!(s, "\n## Commands\n");
    let _ = writeln!(
        s,
        "```sh\nnicflow bench streams --engines {} --reps {} --seconds {} --streams {} --host-offload {}\n\
         # per engine, repetition and stream count n (c1, s1: the testbed's namespaces):\n\
         ip netns exec <s1> iperf3 -s -p {PORT}\n\
         ip netns exec <c1> iperf3 -c 198.18.2.1 -p {PORT} -t {} -P n -J --connect-timeout 3000\n\
         ip netns exec <s1> sockperf server -i 198.18.2.1 -p {LAT_PORT}\n\
         ip netns exec <c1> sockperf ping-pong -i 198.18.2.1 -p {LAT_PORT} -t 2 -m 64\n```",
        o.engines
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(","),
        o.reps,
        o.seconds,
        o.streams
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(","),
        match o.host_offload {
            HostOffload::Default => "default",
            HostOffload::Off => "off",
        },
        o.seconds
    );
    s
}
