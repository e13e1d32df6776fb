//! What `bench containers` and `bench overlay` share: N client/server
//! container pairs measured in *points* (engine, pair count, repetition),
//! each point in the phases of document 001, figure 4:
//!
//! 1. *calibration*: the built-in [`Load`] (one busy thread per core
//!    counting loop iterations, like `stress -c`) runs alone with the lab
//!    up and idle; its work rate is the 100% of "CPU left";
//! 2. *traffic*: every client runs one iperf3 TCP stream to its server at
//!    once; throughput is the sum, CPU accounting ([`super::cpu`]) gives
//!    context switches, interrupts, softirq and the processes' CPU;
//! 3. *traffic + load*: the same with the load running beside it; "CPU
//!    left" = its work rate now / the idle-lab rate;
//! 4. calibration again (the idle rate is the mean of both).
//!
//! The experiments differ in how they build the lab and start iperf3
//! (a [`Client`] each); the phases ([`measure_point`], [`measure_phase`]),
//! the sweep over repetitions, pair counts and engines ([`sweep`]) and the
//! report's figures, getters and tables ([`PointRun`]) are here once.

use super::cpu::{self, PerfSupport, Snapshot, Usage};
use super::forward::{self, interrupted};
use super::median;
use super::report::{self, Figure, Series};
use super::testbed::IperfResult;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
pub fn idle_rate(threads: usize, dur: Duration) -> f64 {
    let load = Load::start(threads);
    // Let the threads get scheduled before counting.
    std::thread::sleep(Duration::from_millis(200));
    let (c0, t0) = (load.count(), Instant::now());
    std::thread::sleep(dur);
    let rate = (load.count() - c0) as f64 / t0.elapsed().as_secs_f64();
    load.stop();
    rate
}

/// How long each calibration runs, for phases of `seconds`.
pub fn calibration_s(seconds: u64) -> u64 {
    seconds.clamp(2, 3)
}

/// The load's threads: `--load-threads`, else one per core.
pub fn load_threads(arg: Option<usize>) -> usize {
    arg.unwrap_or_else(|| cpu::cores() as usize).max(1)
}

// ---------------------------------------------------------------------------
// One point: phases and their results
// ---------------------------------------------------------------------------

/// One traffic phase: all pairs at once.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Phase {
    pub errors: Vec<String>,
    pub bytes: u64,
    /// Sum over pairs of each receiver's rate.
    pub gbps: f64,
    /// Sum over pairs of the senders' retransmits (experiments that
    /// report them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    pub usage: Usage,
    /// Load work rate (iterations/s) during the phase, if the load ran.
    pub load_rate: Option<f64>,
    /// The load threads' own CPU time (utime+stime) over the phase, as a
    /// share of all cores' time: the absolute "user CPU left".
    #[serde(default)]
    pub load_cpu_share: Option<f64>,
}

/// The measured part of a point (flattened into each experiment's run, so
/// the fields stand in samples.json as they always have).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Point {
    /// Load work rate with the lab idle (iterations/s).
    #[serde(default)]
    pub idle_load_rate: Option<f64>,
    /// The same measured again after the traffic phases; "CPU left" is
    /// relative to the mean of both, so other load on a shared machine
    /// that starts or stops during the run biases it less.
    #[serde(default)]
    pub idle_load_rate_after: Option<f64>,
    pub traffic: Option<Phase>,
    pub traffic_with_load: Option<Phase>,
}

impl Point {
    /// The idle-lab load rate: mean of the calibrations before and after
    /// the traffic (whichever exist).
    pub fn idle_rate(&self) -> f64 {
        let v: Vec<f64> = [self.idle_load_rate, self.idle_load_rate_after]
            .into_iter()
            .flatten()
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }
}

/// A running iperf3 client of one pair.
pub trait Client {
    fn pid(&self) -> u32;
    /// Wait (at most until `deadline`) and read the result.
    fn finish(self, deadline: Instant) -> IperfResult;
}

impl Client for super::testbed::IperfClient {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn finish(self, deadline: Instant) -> IperfResult {
        super::testbed::IperfClient::finish(self, deadline)
    }
}

/// What a phase needs besides the clients.
pub struct PhaseSetup<'a> {
    pub perf: &'a PerfSupport,
    /// Scratch directory (perf output).
    pub dir: &'a Path,
    pub load_threads: usize,
    pub seconds: u64,
    /// The iperf3 servers' pids, pair 1 first.
    pub servers: Vec<u32>,
    /// The switch processes, labelled `switch...`.
    pub switches: Vec<(String, u32)>,
    /// Sum the senders' retransmits into [`Phase::retransmits`].
    pub retransmits: bool,
}

/// One phase: `spawn` starts every pair's client at once; with the load
/// beside them if `with_load`.
pub fn measure_phase<C: Client>(
    s: &PhaseSetup,
    with_load: bool,
    spawn: impl FnOnce() -> anyhow::Result<Vec<C>>,
) -> anyhow::Result<Phase> {
    let mut pids: Vec<(String, u32)> = s
        .servers
        .iter()
        .enumerate()
        .map(|(i, &pid)| (format!("iperf3-server-{}", i + 1), pid))
        .collect();
    pids.extend(s.switches.iter().cloned());
    let load = with_load.then(|| Load::start(s.load_threads));
    if load.is_some() {
        std::thread::sleep(Duration::from_millis(200));
    }
    let p = cpu::Perf::start(s.perf, s.dir, if with_load { "load" } else { "traffic" });
    let l0 = load.as_ref().map(Load::count);
    let lc0 = load.as_ref().map(Load::cpu_s);
    let a = Snapshot::take(&pids);
    let clients = spawn()?;
    let pids_c: Vec<u32> = clients.iter().map(C::pid).collect();
    let deadline = Instant::now() + Duration::from_secs(s.seconds + 20);
    let results: Vec<IperfResult> = clients.into_iter().map(|c| c.finish(deadline)).collect();
    let b = Snapshot::take(&pids);
    let l1 = load.as_ref().map(Load::count);
    let lc1 = load.as_ref().map(Load::cpu_s);
    let mut usage = Usage::between(&a, &b);
    usage.perf = cpu::perf_or_note(p, s.perf);
    if let Some(l) = load {
        l.stop();
    }
    let mut ph = Phase {
        load_rate: match (l0, l1) {
            (Some(x), Some(y)) => Some((y - x) as f64 / usage.wall_s),
            _ => None,
        },
        load_cpu_share: match (lc0, lc1) {
            (Some(x), Some(y)) => Some(cpu::ratio(y - x, usage.wall_s * cpu::cores())),
            _ => None,
        },
        retransmits: s.retransmits.then_some(0),
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
                if let Some(t) = ph.retransmits.as_mut() {
                    *t += r.retransmits.unwrap_or(0);
                }
            }
        }
    }
    ph.usage = usage;
    Ok(ph)
}

/// A point's phases: calibration, traffic, traffic + load, calibration.
/// `phase(with_load)` measures one traffic phase; `after(with_load, &phase,
/// idle rate)` sees it before it is stored (progress lines, extra reads).
pub fn measure_point(
    point: &mut Point,
    load_threads: usize,
    seconds: u64,
    mut phase: impl FnMut(bool) -> anyhow::Result<Phase>,
    mut after: impl FnMut(bool, &Phase, Option<f64>),
) -> anyhow::Result<()> {
    let calib = Duration::from_secs(calibration_s(seconds));
    point.idle_load_rate = Some(idle_rate(load_threads, calib));
    for with_load in [false, true] {
        if interrupted() {
            anyhow::bail!("interrupted");
        }
        let ph = phase(with_load)?;
        after(with_load, &ph, point.idle_load_rate);
        if with_load {
            point.traffic_with_load = Some(ph);
        } else {
            point.traffic = Some(ph);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    point.idle_load_rate_after = Some(idle_rate(load_threads, calib));
    Ok(())
}

/// The progress line of one phase; `switch_cores` adds the switch
/// processes' CPU.
pub fn phase_line(
    engine: &str,
    pairs: usize,
    with_load: bool,
    ph: &Phase,
    idle: Option<f64>,
    switch_cores: bool,
) -> String {
    let left = ph
        .load_rate
        .zip(idle)
        .map(|(r, i)| format!(", CPU left {:.0}% of the idle-lab rate", 100.0 * r / i))
        .unwrap_or_default();
    let switch = if switch_cores {
        format!(", switch {:.2} cores", switch_of(ph).unwrap_or(0.0))
    } else {
        String::new()
    };
    format!(
        "{engine} {pairs} pairs{}: {:.2} Gbit/s, {:.0} ctxt/Gbit, {:.0} intr/Gbit{switch}{left}{}",
        if with_load { " + load" } else { "" },
        ph.gbps,
        cpu::per_gbit(ph.usage.ctxt, ph.bytes),
        cpu::per_gbit(ph.usage.intr, ph.bytes),
        if ph.errors.is_empty() {
            String::new()
        } else {
            format!(" ({} failed: {})", ph.errors.len(), ph.errors[0])
        }
    )
}

// ---------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------

/// An engine of an experiment.
pub trait Named: Copy + PartialEq {
    fn name(self) -> &'static str;
}

impl Named for forward::Engine {
    fn name(self) -> &'static str {
        forward::Engine::name(self)
    }
}

/// One engine, one pair count, one repetition; `X`: what an experiment
/// records besides (flattened, like [`Point`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run<E, X> {
    pub engine: E,
    pub pairs: usize,
    pub rep: usize,
    pub lab: String,
    pub error: Option<String>,
    /// Calibrations and traffic phases.
    #[serde(flatten)]
    pub point: Point,
    #[serde(flatten)]
    pub extra: X,
}

/// What the report needs of a run (the getters below are generic over it).
pub trait PointRun {
    type Engine: Copy + PartialEq;
    fn engine_name(e: Self::Engine) -> &'static str;
    fn engine(&self) -> Self::Engine;
    fn pairs(&self) -> usize;
    fn rep(&self) -> usize;
    fn error(&self) -> Option<&str>;
    fn point(&self) -> &Point;
}

impl<E: Named, X> PointRun for Run<E, X> {
    type Engine = E;
    fn engine_name(e: E) -> &'static str {
        e.name()
    }
    fn engine(&self) -> E {
        self.engine
    }
    fn pairs(&self) -> usize {
        self.pairs
    }
    fn rep(&self) -> usize {
        self.rep
    }
    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
    fn point(&self) -> &Point {
        &self.point
    }
}

/// Everything one experiment run measured (its samples.json).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results<O, R> {
    pub machine: String,
    pub perf: String,
    pub options: O,
    pub started_unix: u64,
    pub runs: Vec<R>,
}

/// Every repetition, pair count and engine, engines interleaved inside each
/// (repetition, N): `body` measures each run; its error is recorded in the
/// run.
pub fn sweep<O: Clone, E: Named, X: Default>(
    options: &O,
    (reps, pairs, engines): (usize, &[usize], &[E]),
    progress: fn(&str),
    mut body: impl FnMut(&PerfSupport, &mut Run<E, X>) -> anyhow::Result<()>,
) -> anyhow::Result<Results<O, Run<E, X>>> {
    let perf = PerfSupport::detect();
    let mut r = Results {
        machine: super::machine_description(),
        perf: perf.describe(),
        options: options.clone(),
        started_unix: report::unix_now(),
        runs: Vec::new(),
    };
    let runs = &mut r.runs;
    'all: for rep in 0..reps {
        for &n in pairs {
            for &engine in engines {
                if interrupted() {
                    break 'all;
                }
                let name = engine.name();
                progress(&format!("rep {}/{reps}: {n} pair(s), {name}", rep + 1));
                let mut run = Run {
                    engine,
                    pairs: n,
                    rep,
                    lab: String::new(),
                    error: None,
                    point: Point::default(),
                    extra: X::default(),
                };
                if let Err(e) = body(&perf, &mut run) {
                    progress(&format!("{name} {n} pairs rep {}: {e:#}", rep + 1));
                    run.error = Some(format!("{e:#}"));
                }
                runs.push(run);
            }
        }
    }
    if interrupted() {
        anyhow::bail!("interrupted; everything the bench created has been removed");
    }
    Ok(r)
}

// ---------------------------------------------------------------------------
// Report: getters, medians, figures, tables
// ---------------------------------------------------------------------------

/// A figure of one point.
pub type Get<R> = fn(&R) -> Option<f64>;

fn ok_phase(p: &Option<Phase>) -> Option<&Phase> {
    p.as_ref().filter(|p| p.errors.is_empty() && p.bytes > 0)
}
fn traffic<R: PointRun>(r: &R) -> Option<&Phase> {
    ok_phase(&r.point().traffic)
}
fn with_load<R: PointRun>(r: &R) -> Option<&Phase> {
    r.point().traffic_with_load.as_ref()
}
fn share(s: f64, p: &Phase) -> f64 {
    100.0 * cpu::ratio(s, p.usage.wall_s) / cpu::cores()
}
fn switch_of(p: &Phase) -> Option<f64> {
    p.usage.procs_cpu("switch").map(|c| c / p.usage.wall_s)
}

/// Throughput (Gbit/s) without the load.
pub fn gbps<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| p.gbps)
}
/// Context switches per Gbit (/proc/stat ctxt).
pub fn ctxt<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(p.usage.ctxt, p.bytes))
}
/// Interrupts per Gbit (/proc/stat intr).
pub fn intr<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(p.usage.intr, p.bytes))
}
/// /proc/interrupts per Gbit.
pub fn irqs<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(p.usage.interrupts, p.bytes))
}
fn by_source(rows: &[(String, u64)], name: &str) -> u64 {
    rows.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c)
}
/// Local timer interrupts (LOC) per Gbit.
pub fn irq_loc<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(by_source(&p.usage.interrupts_by, "LOC"), p.bytes))
}
/// Rescheduling IPIs (RES: a wake-up of a task on the other CPU) per Gbit.
pub fn irq_res<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(by_source(&p.usage.interrupts_by, "RES"), p.bytes))
}
/// Function-call IPIs (CAL) per Gbit.
pub fn irq_cal<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(by_source(&p.usage.interrupts_by, "CAL"), p.bytes))
}
/// Every other /proc/interrupts source (devices, TLB shootdowns...) per Gbit.
pub fn irq_other<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| {
        let named: u64 = ["LOC", "RES", "CAL"]
            .iter()
            .map(|n| by_source(&p.usage.interrupts_by, n))
            .sum();
        cpu::per_gbit(p.usage.interrupts.saturating_sub(named), p.bytes)
    })
}
/// NET_RX softirqs per Gbit.
pub fn softirq_net_rx<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(by_source(&p.usage.softirqs_by, "NET_RX"), p.bytes))
}
/// TIMER softirqs per Gbit (expired timer-wheel timers, e.g. TPACKET_V3 block retirement).
pub fn softirq_timer<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(by_source(&p.usage.softirqs_by, "TIMER"), p.bytes))
}
/// SCHED softirqs (load balancing between the CPUs) per Gbit.
pub fn softirq_sched<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::per_gbit(by_source(&p.usage.softirqs_by, "SCHED"), p.bytes))
}
/// CPU left to the load: its rate beside the traffic / the idle-lab rate, %.
pub fn left<R: PointRun>(r: &R) -> Option<f64> {
    let p = with_load(r)?;
    p.load_rate
        .map(|x| 100.0 * cpu::ratio(x, r.point().idle_rate()))
}
/// Throughput beside the load.
pub fn gbps_load<R: PointRun>(r: &R) -> Option<f64> {
    with_load(r).filter(|p| p.errors.is_empty()).map(|p| p.gbps)
}
/// Machine-wide busy share of all cores, %.
pub fn busy<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| 100.0 * p.usage.busy_cores() / cpu::cores())
}
/// Machine-wide system share of all cores, %.
pub fn system<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| share(p.usage.system_s, p))
}
/// Machine-wide softirq share of all cores, %.
pub fn softirq<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| share(p.usage.softirq_s, p))
}
/// Machine-wide user share of all cores beside the load, %.
pub fn user_load<R: PointRun>(r: &R) -> Option<f64> {
    with_load(r).map(|p| share(p.usage.user_s, p))
}
/// Cores used by the switch processes.
pub fn switch<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).and_then(switch_of)
}
/// Cores used by the switch processes beside the load.
pub fn switch_load<R: PointRun>(r: &R) -> Option<f64> {
    with_load(r).and_then(switch_of)
}
/// Machine-wide busy CPU seconds per Gbit.
pub fn s_gbit<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| cpu::cpu_s_per_gbit(p.usage.busy_s, p.bytes))
}
/// Switch + iperf3 process CPU per Gbit (not inflated by other load).
pub fn proc_s_gbit<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).and_then(|p| {
        let c = p.usage.procs_cpu("iperf3")? + p.usage.procs_cpu("switch").unwrap_or(0.0);
        Some(cpu::cpu_s_per_gbit(c, p.bytes))
    })
}
/// The load threads' own CPU as a share of all cores, %.
pub fn load_share<R: PointRun>(r: &R) -> Option<f64> {
    with_load(r)
        .and_then(|p| p.load_cpu_share)
        .map(|x| 100.0 * x)
}
/// Retransmits summed over pairs.
pub fn retransmits<R: PointRun>(r: &R) -> Option<f64> {
    traffic(r).map(|p| p.retransmits.unwrap_or(0) as f64)
}

/// Median of `f` over the successful repetitions of a point.
pub fn med<R: PointRun>(runs: &[R], e: R::Engine, n: usize, f: Get<R>) -> Option<f64> {
    let mut v: Vec<f64> = runs
        .iter()
        .filter(|x| x.engine() == e && x.pairs() == n && x.error().is_none())
        .filter_map(f)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| median(&mut v))
}

/// The engines of the runs, in order of appearance.
pub fn engines_in<R: PointRun>(runs: &[R]) -> Vec<R::Engine> {
    let mut v = Vec::new();
    for x in runs {
        if !v.contains(&x.engine()) {
            v.push(x.engine());
        }
    }
    v
}

/// Axes and labels of one figure.
pub struct FigureSpec<'a, R> {
    pub id: &'a str,
    pub title: &'a str,
    pub y_label: &'a str,
    pub get: Get<R>,
}

/// One figure per spec: pair counts across, one series per engine.
pub fn figures<R: PointRun>(
    runs: &[R],
    pairs: &[usize],
    x_label: &str,
    specs: &[FigureSpec<R>],
) -> Vec<Figure> {
    specs
        .iter()
        .map(|s| Figure {
            id: s.id.into(),
            title: s.title.into(),
            x_label: x_label.into(),
            y_label: s.y_label.into(),
            log_x: true,
            series: engines_in(runs)
                .into_iter()
                .map(|e| Series {
                    name: R::engine_name(e).into(),
                    points: pairs
                        .iter()
                        .map(|&n| (n as f64, med(runs, e, n, s.get)))
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

/// `## Figures`: each figure's table with its number of decimals.
pub fn write_figures(s: &mut String, figs: &[Figure], decimals: &[usize]) {
    let _ = writeln!(s, "## Figures\n");
    for (f, d) in figs.iter().zip(decimals) {
        let _ = writeln!(s, "{}", f.markdown(*d));
    }
}

/// The details table: `engine | pairs` then one column per getter (median,
/// decimals), then `extra(engine, n)`'s cells.
pub fn details_table<R: PointRun>(
    runs: &[R],
    pairs: &[usize],
    cols: &[(&str, Get<R>, usize)],
    extra: &[&str],
    extra_cells: impl Fn(R::Engine, usize) -> Vec<String>,
) -> String {
    let mut head: Vec<(&str, bool)> = vec![("engine", false), ("pairs", true)];
    head.extend(cols.iter().map(|c| (c.0, true)));
    head.extend(extra.iter().map(|c| (*c, false)));
    let mut rows = Vec::new();
    for e in engines_in(runs) {
        for &n in pairs {
            let mut row = vec![R::engine_name(e).to_string(), n.to_string()];
            row.extend(
                cols.iter()
                    .map(|&(_, f, d)| report::cell(med(runs, e, n, f), d)),
            );
            row.extend(extra_cells(e, n));
            rows.push(row);
        }
    }
    report::table(&head, &rows)
}

/// `## Failures`, if any: run errors (`first_line`: only their first line)
/// and the pairs that failed in each phase.
pub fn write_failures<R: PointRun>(s: &mut String, runs: &[R], first_line: bool) {
    let fails: Vec<String> = runs
        .iter()
        .flat_map(|x| {
            let mut v = Vec::new();
            let tag = format!(
                "{} {} pairs rep {}",
                R::engine_name(x.engine()),
                x.pairs(),
                x.rep() + 1
            );
            if let Some(e) = x.error() {
                let e = if first_line {
                    e.lines().next().unwrap_or("")
                } else {
                    e
                };
                v.push(format!("{tag}: {e}"));
            }
            let pt = x.point();
            for (p, name) in [
                (&pt.traffic, "traffic"),
                (&pt.traffic_with_load, "with load"),
            ] {
                if let Some(p) = p {
                    if !p.errors.is_empty() {
                        v.push(format!(
                            "{tag} {name}: {} of {} pairs failed ({})",
                            p.errors.len(),
                            x.pairs(),
                            p.errors[0]
                        ));
                    }
                }
            }
            v
        })
        .collect();
    report::write_list(s, "Failures", &fails);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_serde_and_idle_rate() {
        let p = Point {
            idle_load_rate: Some(10.0),
            idle_load_rate_after: None,
            traffic: Some(Phase::default()),
            traffic_with_load: None,
        };
        assert_eq!(p.idle_rate(), 10.0);
        let j = serde_json::to_string(&p).unwrap_or_default();
        assert!(!j.contains("retransmits"), "{j}");
        // NaN was written as null by the old f64 fields.
        let q: Point = serde_json::from_str(
            r#"{"idle_load_rate":null,"traffic":null,"traffic_with_load":null}"#,
        )
        .unwrap_or_default();
        assert!(q.idle_rate().is_nan());
    }
}
