//! `nicflow bench containers`: 1 to 20 client/server "container" pairs
//! (network namespaces) on one host, all talking through one switch
//! (document 001, figure 4: total throughput, context switches and
//! interrupts per Gbit, and the user CPU left to a `stress` load, for 1-20
//! container pairs, Docker overlay vs DPU offload).
//!
//! Per repetition, pair count N and engine: a fresh N-pair [`Testbed`]
//! with pairwise rules and one `iperf3 -s` per server, then three phases:
//!
//! 1. *calibration*: the built-in load ([`Load`]: one busy thread per core
//!    counting loop iterations, like `stress -c`) runs alone with the lab
//!    up and idle; its work rate is the 100% of "CPU left";
//! 2. *traffic*: every client runs one iperf3 TCP stream to its server at
//!    once; throughput is the sum, CPU accounting ([`super::cpu`]) gives
//!    context switches, interrupts, softirq and the processes' CPU;
//! 3. *traffic + load*: the same with the load running beside it; "CPU
//!    left" = its work rate now / its rate in phase 1. The paper's
//!    "percentage of available CPU cycles" measured user CPU under
//!    `stress` with mpstat; our rate ratio measures the same thing (what a
//!    co-located user process still gets) without counting iperf3's or the
//!    switch's own user time as "left".
//!
//! Engines are interleaved inside each (repetition, N); the report shows
//! medians over repetitions.

use super::cpu::{self, PerfSupport, Snapshot, Usage};
use super::forward::{self, interrupted, Engine, HostOffload};
use super::median;
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated (any engine `bench forward` knows).
    #[arg(
        long,
        default_value = "nicflow-afpacket,nicflow-afxdp,linux-bridge,ovs"
    )]
    pub engines: String,
    /// Repetitions (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds per traffic phase.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Container pair counts.
    #[arg(long, default_value = "1,2,5,10,20")]
    pub pairs: String,
    /// Threads of the CPU load (default: one per core).
    #[arg(long)]
    pub load_threads: Option<usize>,
    /// Host-side veth offloads: default (kernel defaults) or off.
    #[arg(long, default_value = "default")]
    pub host_offload: String,
    /// Directory for the run (default: bench-containers-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Smoke test: 1 repetition, 2-second phases.
    #[arg(long)]
    pub quick: bool,
    /// Rewrite the report of an earlier run from its samples.json.
    #[arg(long, value_name = "SAMPLES_JSON")]
    pub render: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    pub engines: Vec<Engine>,
    pub reps: usize,
    pub seconds: u64,
    pub pairs: Vec<usize>,
    pub load_threads: usize,
    pub host_offload: HostOffload,
    pub quick: bool,
}

/// One traffic phase: all pairs at once.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Phase {
    pub errors: Vec<String>,
    pub bytes: u64,
    /// Sum over pairs of each receiver's rate.
    pub gbps: f64,
    pub usage: Usage,
    /// Load work rate (iterations/s) during the phase, if the load ran.
    pub load_rate: Option<f64>,
    /// The load threads' own CPU time (utime+stime) over the phase, as a
    /// share of all cores' time: the absolute "user CPU left".
    #[serde(default)]
    pub load_cpu_share: Option<f64>,
}

/// One engine, one pair count, one repetition.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub engine: Engine,
    pub pairs: usize,
    pub rep: usize,
    pub lab: String,
    pub error: Option<String>,
    /// Load work rate with the lab idle (iterations/s).
    pub idle_load_rate: f64,
    /// The same measured again after the traffic phases; "CPU left" is
    /// relative to the mean of both, so other load on a shared machine
    /// that starts or stops during the run biases it less.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub idle_load_rate_after: f64,
    pub traffic: Option<Phase>,
    pub traffic_with_load: Option<Phase>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub perf: String,
    pub options: Options,
    pub started_unix: u64,
    pub runs: Vec<Run>,
}

const PORT: u16 = 5201;

fn nan() -> f64 {
    f64::NAN
}

/// JSON has no NaN: serde_json writes null; read it back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl Run {
    /// The idle-lab load rate: mean of the calibrations before and after
    /// the traffic (whichever exist).
    pub fn idle_rate(&self) -> f64 {
        let v: Vec<f64> = [self.idle_load_rate, self.idle_load_rate_after]
            .into_iter()
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }
}

fn options(a: &Args) -> anyhow::Result<Options> {
    let (reps, seconds) = if a.quick {
        (1, 2)
    } else {
        (a.reps.max(1), a.seconds.max(1))
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let pairs = testbed::parse_counts(&a.pairs)?;
    if let Some(p) = pairs.iter().find(|&&p| p > testbed::MAX_PAIRS) {
        anyhow::bail!("--pairs {p}: at most {}", testbed::MAX_PAIRS);
    }
    Ok(Options {
        engines: testbed::parse_engines(&a.engines)?,
        reps,
        seconds,
        pairs,
        load_threads: a.load_threads.unwrap_or(cores).max(1),
        host_offload: testbed::parse_host_offload(&a.host_offload)?,
        quick: a.quick,
    })
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    if let Some(p) = &args.render {
        let (r, dir) = report::load_render::<Results>(p, args.out.as_deref())?;
        return write(&dir, &r);
    }
    let opts = options(args)?;
    forward::install_signal_handlers();
    let r = run(&opts)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| report::default_dir("containers"));
    write(&dir, &r)
}

fn write(dir: &std::path::Path, r: &Results) -> anyhow::Result<()> {
    let figs = figures(r);
    report::publish(dir, r, &figs, &markdown(r, &figs))
}

fn progress(s: &str) {
    eprintln!("[containers] {s}");
}

// ---------------------------------------------------------------------------
// The load
// ---------------------------------------------------------------------------

/// A `stress -c`-style load: `n` threads spinning on arithmetic, each
/// counting its iterations; the count per second is the work the load got
/// done, i.e. the CPU the rest of the machine left it. Threads are not
/// pinned, so the scheduler shares the cores between the load and the
/// traffic as it would for a co-located container.
pub struct Load {
    stop: Arc<AtomicBool>,
    counts: Vec<Arc<AtomicU64>>,
    /// Kernel thread ids, for their CPU time in /proc/self/task.
    tids: Arc<std::sync::Mutex<Vec<i32>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Iterations between updates of the shared counter.
const LOAD_CHUNK: u64 = 1 << 14;

impl Load {
    pub fn start(n: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut counts = Vec::new();
        let mut threads = Vec::new();
        let tids = Arc::new(std::sync::Mutex::new(Vec::new()));
        for _ in 0..n {
            let tids = tids.clone();
            let c = Arc::new(AtomicU64::new(0));
            counts.push(c.clone());
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                if let Ok(mut t) = tids.lock() {
                    t.push(tid);
                }
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..LOAD_CHUNK {
                        // xorshift: cheap, not optimisable away.
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                    }
                    std::hint::black_box(x);
                    c.fetch_add(LOAD_CHUNK, Ordering::Relaxed);
                }
            }));
        }
        Load {
            stop,
            counts,
            tids,
            threads,
        }
    }

    /// Iterations done so far by all threads.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// CPU seconds (utime + stime) the load threads have used so far.
    pub fn cpu_s(&self) -> f64 {
        let tids = self.tids.lock().map(|t| t.clone()).unwrap_or_default();
        tids.iter()
            .filter_map(|tid| {
                let t = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
                cpu::parse_pid_stat(&t, forward::measure::clk_tck())
            })
            .map(|c| c.user + c.system)
            .sum()
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The load's rate (iterations/s) over `dur` with nothing else started.
fn idle_rate(threads: usize, dur: Duration) -> f64 {
    let load = Load::start(threads);
    // Let the threads get scheduled before counting.
    std::thread::sleep(Duration::from_millis(200));
    let (c0, t0) = (load.count(), Instant::now());
    std::thread::sleep(dur);
    let rate = (load.count() - c0) as f64 / t0.elapsed().as_secs_f64();
    load.stop();
    rate
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

pub fn run(opts: &Options) -> anyhow::Result<Results> {
    let perf = PerfSupport::detect();
    let mut results = Results {
        machine: super::machine_description(),
        perf: perf.describe(),
        options: opts.clone(),
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        runs: Vec::new(),
    };
    let mut engines = opts.engines.clone();
    if engines.iter().any(|e| e.is_ovs()) {
        if let Err(e) = forward::ovs::ensure_installed(&mut |s| progress(s)) {
            progress(&format!("skipping OVS engines: {e}"));
            engines.retain(|e| !e.is_ovs());
        }
    }
    'all: for rep in 0..opts.reps {
        for &n in &opts.pairs {
            for &engine in &engines {
                if interrupted() {
                    break 'all;
                }
                progress(&format!(
                    "rep {}/{}: {} pair(s), {}",
                    rep + 1,
                    opts.reps,
                    n,
                    engine.name()
                ));
                let mut run = Run {
                    engine,
                    pairs: n,
                    rep,
                    lab: String::new(),
                    error: None,
                    idle_load_rate: f64::NAN,
                    idle_load_rate_after: f64::NAN,
                    traffic: None,
                    traffic_with_load: None,
                };
                if let Err(e) = body(opts, &perf, &mut run) {
                    progress(&format!(
                        "{} {n} pairs rep {}: {e:#}",
                        engine.name(),
                        rep + 1
                    ));
                    run.error = Some(format!("{e:#}"));
                }
                results.runs.push(run);
            }
        }
    }
    if interrupted() {
        anyhow::bail!("interrupted; everything the bench created has been removed");
    }
    Ok(results)
}

fn body(opts: &Options, perf: &PerfSupport, run: &mut Run) -> anyhow::Result<()> {
    let spec = TestbedSpec {
        host_offload: opts.host_offload,
        rules: Rules::Explicit,
        ..TestbedSpec::new(run.engine, run.pairs, "ctr")
    };
    let tb = Testbed::up(&spec)?;
    run.lab = tb.lab_name().to_string();
    let servers: Vec<testbed::IperfServer> = (0..run.pairs)
        .map(|i| tb.start_iperf_server(i, PORT))
        .collect::<anyhow::Result<_>>()?;
    let dir = tb.scratch_dir()?;
    let calib = Duration::from_secs(opts.seconds.clamp(2, 3));
    run.idle_load_rate = idle_rate(opts.load_threads, calib);
    for with_load in [false, true] {
        if interrupted() {
            anyhow::bail!("interrupted");
        }
        let ph = phase(&tb, &servers, opts, perf, &dir, with_load)?;
        let left = ph
            .load_rate
            .map(|r| {
                format!(
                    ", CPU left {:.0}% of the idle-lab rate",
                    100.0 * r / run.idle_load_rate
                )
            })
            .unwrap_or_default();
        progress(&format!(
            "{} {} pairs{}: {:.2} Gbit/s, {:.0} ctxt/Gbit, {:.0} intr/Gbit{left}{}",
            run.engine.name(),
            run.pairs,
            if with_load { " + load" } else { "" },
            ph.gbps,
            cpu::per_gbit(ph.usage.ctxt, ph.bytes),
            cpu::per_gbit(ph.usage.intr, ph.bytes),
            if ph.errors.is_empty() {
                String::new()
            } else {
                format!(" ({} failed: {})", ph.errors.len(), ph.errors[0])
            }
        ));
        if with_load {
            run.traffic_with_load = Some(ph);
        } else {
            run.traffic = Some(ph);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    run.idle_load_rate_after = idle_rate(opts.load_threads, calib);
    drop(servers);
    tb.down()
}

fn phase(
    tb: &Testbed,
    servers: &[testbed::IperfServer],
    opts: &Options,
    perf: &PerfSupport,
    dir: &std::path::Path,
    with_load: bool,
) -> anyhow::Result<Phase> {
    let mut pids: Vec<(String, u32)> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("iperf3-server-{}", i + 1), s.pid))
        .collect();
    if let Some(p) = tb.switch_pid() {
        pids.push(("switch".into(), p));
    }
    let load = with_load.then(|| Load::start(opts.load_threads));
    if load.is_some() {
        std::thread::sleep(Duration::from_millis(200));
    }
    let p = cpu::Perf::start(perf, dir, if with_load { "load" } else { "traffic" });
    let l0 = load.as_ref().map(Load::count);
    let lc0 = load.as_ref().map(Load::cpu_s);
    let a = Snapshot::take(&pids);
    let clients = (0..tb.pairs())
        .map(|i| tb.spawn_iperf_client(i, PORT, opts.seconds, 1, dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pids_c: Vec<u32> = clients.iter().map(|c| c.pid).collect();
    let deadline = Instant::now() + Duration::from_secs(opts.seconds + 20);
    let results: Vec<testbed::IperfResult> =
        clients.into_iter().map(|c| c.finish(deadline)).collect();
    let b = Snapshot::take(&pids);
    let l1 = load.as_ref().map(Load::count);
    let lc1 = load.as_ref().map(Load::cpu_s);
    let mut usage = Usage::between(&a, &b);
    usage.perf = cpu::perf_or_note(p, perf);
    if let Some(l) = load {
        l.stop();
    }
    let mut ph = Phase {
        load_rate: match (l0, l1) {
            (Some(x), Some(y)) => Some((y - x) as f64 / usage.wall_s),
            _ => None,
        },
        load_cpu_share: match (lc0, lc1) {
            (Some(x), Some(y)) => Some(cpu::ratio(y - x, usage.wall_s * cores())),
            _ => None,
        },
        ..Default::default()
    };
    for (i, (r, pid)) in results.iter().zip(pids_c).enumerate() {
        usage.add_process(
            &format!("iperf3-client-{}", i + 1),
            pid,
            r.user_s,
            r.system_s,
        );
        match &r.error {
            Some(e) => ph.errors.push(format!("pair {}: {e}", i + 1)),
            None => {
                ph.bytes += r.bytes;
                ph.gbps += r.gbps;
            }
        }
    }
    ph.usage = usage;
    Ok(ph)
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

type Get = fn(&Run) -> Option<f64>;

fn ok_phase(p: &Option<Phase>) -> Option<&Phase> {
    p.as_ref().filter(|p| p.errors.is_empty() && p.bytes > 0)
}

fn g_gbps(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).map(|p| p.gbps)
}
fn g_ctxt(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).map(|p| cpu::per_gbit(p.usage.ctxt, p.bytes))
}
fn g_intr(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).map(|p| cpu::per_gbit(p.usage.intr, p.bytes))
}
fn g_irqs(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).map(|p| cpu::per_gbit(p.usage.interrupts, p.bytes))
}
fn g_left(r: &Run) -> Option<f64> {
    let p = r.traffic_with_load.as_ref()?;
    p.load_rate.map(|x| 100.0 * cpu::ratio(x, r.idle_rate()))
}
fn g_gbps_load(r: &Run) -> Option<f64> {
    r.traffic_with_load
        .as_ref()
        .filter(|p| p.errors.is_empty())
        .map(|p| p.gbps)
}
fn cores() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64
}
fn g_busy(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).map(|p| 100.0 * p.usage.busy_cores() / cores())
}
fn g_softirq(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).map(|p| 100.0 * cpu::ratio(p.usage.softirq_s, p.usage.wall_s) / cores())
}
fn g_switch(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).and_then(|p| p.usage.procs_cpu("switch").map(|c| c / p.usage.wall_s))
}
fn g_s_gbit(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).map(|p| cpu::cpu_s_per_gbit(p.usage.busy_s, p.bytes))
}
/// Switch + iperf3 process CPU per Gbit (not inflated by other load).
fn g_proc_s_gbit(r: &Run) -> Option<f64> {
    ok_phase(&r.traffic).and_then(|p| {
        let c = p.usage.procs_cpu("iperf3")? + p.usage.procs_cpu("switch").unwrap_or(0.0);
        Some(cpu::cpu_s_per_gbit(c, p.bytes))
    })
}
fn g_load_share(r: &Run) -> Option<f64> {
    r.traffic_with_load
        .as_ref()
        .and_then(|p| p.load_cpu_share)
        .map(|x| 100.0 * x)
}
fn g_user_load(r: &Run) -> Option<f64> {
    r.traffic_with_load
        .as_ref()
        .map(|p| 100.0 * cpu::ratio(p.usage.user_s, p.usage.wall_s) / cores())
}

fn med(r: &Results, e: Engine, n: usize, f: Get) -> Option<f64> {
    let mut v: Vec<f64> = r
        .runs
        .iter()
        .filter(|x| x.engine == e && x.pairs == n && x.error.is_none())
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

fn figure(r: &Results, id: &str, title: &str, y: &str, f: Get) -> Figure {
    Figure {
        id: id.into(),
        title: title.into(),
        x_label: "client/server container pairs".into(),
        y_label: y.into(),
        log_x: true,
        series: engines_in(r)
            .into_iter()
            .map(|e| Series {
                name: e.name().into(),
                points: r
                    .options
                    .pairs
                    .iter()
                    .map(|&n| (n as f64, med(r, e, n, f)))
                    .collect(),
            })
            .collect(),
    }
}

pub fn figures(r: &Results) -> Vec<Figure> {
    vec![
        figure(
            r,
            "cpu-left",
            "CPU left to a co-located load (cf. doc 001 fig. 4a)",
            "load work rate vs idle lab (% of available CPU)",
            g_left,
        ),
        figure(
            r,
            "interrupts-per-gbit",
            "Interrupts per Gbit (cf. doc 001 fig. 4b)",
            "interrupts per Gbit (/proc/stat intr)",
            g_intr,
        ),
        figure(
            r,
            "throughput",
            "Total throughput (cf. doc 001 fig. 4c)",
            "sum of iperf3 TCP throughput (Gbit/s)",
            g_gbps,
        ),
        figure(
            r,
            "ctxt-per-gbit",
            "Context switches per Gbit (cf. doc 001 fig. 4d)",
            "context switches per Gbit (/proc/stat ctxt)",
            g_ctxt,
        ),
    ]
}

fn fmt(v: Option<f64>, d: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.d$}"),
        _ => "—".into(),
    }
}

pub fn markdown(r: &Results, figs: &[Figure]) -> String {
    let o = &r.options;
    let mut s = String::new();
    let _ = writeln!(s, "# nicflow bench containers\n");
    let _ = writeln!(s, "{}", report::machine_section(&r.perf));
    let _ = writeln!(
        s,
        "{} repetition(s); per engine and pair count ({}): a fresh lab of N client and N \
         server namespaces (\"containers\") on one switch, pairwise rules (nicflow, OVS) or a \
         learning bridge; one iperf3 TCP stream per pair, all pairs at once, {} s. CPU left: \
         {} load thread(s) (one busy loop each, unpinned, like `stress -c`) counted with the \
         lab idle for {} s before and again after the traffic, and during a second traffic \
         phase; \"CPU left\" is its work rate during that phase as a share of the mean idle-lab \
         rate, \"load CPU %\" the load threads' own CPU time as a share of all cores (the \
         absolute figure). Host offloads {:?}. Medians over repetitions.{}\n",
        o.reps,
        o.pairs
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        o.seconds,
        o.load_threads,
        o.seconds.clamp(2, 3),
        o.host_offload,
        if o.quick {
            " **Quick run** (`--quick`)."
        } else {
            ""
        }
    );
    let _ = writeln!(s, "## Figures\n");
    for (f, d) in figs.iter().zip([0usize, 0, 2, 0]) {
        let _ = writeln!(s, "{}", f.markdown(d));
    }
    let _ = writeln!(s, "## Details (medians, traffic phase without load)\n");
    let _ = writeln!(
        s,
        "busy and softirq: shares of all {} cores; switch: cores used by the switch process \
         (none for the kernel bridge); CPU s/Gbit: machine-wide busy seconds per Gbit; process CPU s/Gbit: the switch \
         process and every iperf3 client and server (not inflated by other load on the machine); \
         /proc/interrupts per Gbit: the sum of the per-CPU interrupt table (device and \
         architecture interrupts, incl. timer and IPIs) — /proc/stat intr counts more sources; \
         with load: throughput and the machine's user share in the phase with the load.\n",
        cores()
    );
    let _ = writeln!(
        s,
        "| engine | pairs | Gbit/s | busy % | softirq % | switch cores | CPU s/Gbit | process CPU s/Gbit | ctxt/Gbit | intr/Gbit | /proc/interrupts per Gbit | Gbit/s with load | user % with load | load CPU % | CPU left % |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for e in engines_in(r) {
        for &n in &o.pairs {
            let m = |f: Get| med(r, e, n, f);
            let _ = writeln!(
                s,
                "| {} | {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                e.name(),
                fmt(m(g_gbps), 2),
                fmt(m(g_busy), 0),
                fmt(m(g_softirq), 0),
                fmt(m(g_switch), 2),
                fmt(m(g_s_gbit), 3),
                fmt(m(g_proc_s_gbit), 3),
                fmt(m(g_ctxt), 0),
                fmt(m(g_intr), 0),
                fmt(m(g_irqs), 0),
                fmt(m(g_gbps_load), 2),
                fmt(m(g_user_load), 0),
                fmt(m(g_load_share), 0),
                fmt(m(g_left), 0),
            );
        }
    }
    let fails: Vec<String> = r
        .runs
        .iter()
        .flat_map(|x| {
            let mut v = Vec::new();
            let tag = format!("{} {} pairs rep {}", x.engine.name(), x.pairs, x.rep + 1);
            if let Some(e) = &x.error {
                v.push(format!("{tag}: {e}"));
            }
            for (p, name) in [(&x.traffic, "traffic"), (&x.traffic_with_load, "with load")] {
                if let Some(p) = p {
                    if !p.errors.is_empty() {
                        v.push(format!(
                            "{tag} {name}: {} of {} pairs failed ({})",
                            p.errors.len(),
                            x.pairs,
                            p.errors[0]
                        ));
                    }
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
        "```sh\nnicflow bench containers --engines {} --reps {} --seconds {} --pairs {} --host-offload {}\n\
         # per engine, repetition and pair count N, for i in 1..N (ci, si: the testbed's namespaces):\n\
         ip netns exec <si> iperf3 -s -p {PORT}\n\
         ip netns exec <ci> iperf3 -c 198.18.2.i -p {PORT} -t {} -P 1 -J --connect-timeout 3000   # all i at once\n```",
        o.engines
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(","),
        o.reps,
        o.seconds,
        o.pairs
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
