//! `nicflow bench containers`: 1 to 20 client/server "container" pairs
//! (network namespaces) on one host, all talking through one switch
//! (document 001, figure 4: total throughput, context switches and
//! interrupts per Gbit, and the user CPU left to a `stress` load, for 1-20
//! container pairs, Docker overlay vs DPU offload).
//!
//! Per repetition, pair count N and engine: a fresh N-pair [`Testbed`]
//! with pairwise rules and one `iperf3 -s` per server, then the phases of
//! [`super::colocated`]:
//!
//! 1. *calibration*: the built-in load ([`co::Load`]: one busy thread per
//!    core counting loop iterations, like `stress -c`) runs alone with the
//!    lab up and idle; its work rate is the 100% of "CPU left";
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

use super::colocated::{self as co, FigureSpec, Get, PhaseSetup};
use super::cpu::{self, PerfSupport};
use super::forward::{self, Engine, HostOffload};
use super::report::{self, Figure};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated (any engine `bench forward` knows).
    #[arg(
        long,
        default_value = "nicflow-tc,nicflow-afpacket,nicflow-afxdp,linux-bridge,ovs"
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
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
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

/// One engine, one pair count, one repetition.
pub type Run = co::Run<Engine, ()>;

pub type Results = co::Results<Options, Run>;

const PORT: u16 = 5201;

fn options(a: &Args) -> anyhow::Result<Options> {
    let (reps, seconds) = if a.run.quick {
        (1, 2)
    } else {
        (a.reps.max(1), a.seconds.max(1))
    };
    let pairs = testbed::parse_counts(&a.pairs)?;
    if let Some(p) = pairs.iter().find(|&&p| p > testbed::MAX_PAIRS) {
        anyhow::bail!("--pairs {p}: at most {}", testbed::MAX_PAIRS);
    }
    Ok(Options {
        engines: testbed::parse_engines(&a.engines)?,
        reps,
        seconds,
        pairs,
        load_threads: co::load_threads(a.load_threads),
        host_offload: testbed::parse_host_offload(&a.host_offload)?,
        quick: a.run.quick,
    })
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    let measure = || run(&options(args)?);
    report::cli(&args.run, "containers", measure, figures, markdown)
}

fn progress(s: &str) {
    eprintln!("[containers] {s}");
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

pub fn run(opts: &Options) -> anyhow::Result<Results> {
    let mut engines = opts.engines.clone();
    if engines.iter().any(|e| e.is_ovs()) {
        if let Err(e) = forward::ovs::ensure_installed(&mut |s| progress(s)) {
            progress(&format!("skipping OVS engines: {e}"));
            engines.retain(|e| !e.is_ovs());
        }
    }
    co::sweep(
        opts,
        (opts.reps, &opts.pairs, &engines),
        progress,
        |perf, run| body(opts, perf, run),
    )
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
    let setup = PhaseSetup {
        perf,
        dir: &dir,
        load_threads: opts.load_threads,
        seconds: opts.seconds,
        servers: servers.iter().map(|s| s.pid).collect(),
        switches: tb
            .switch_pid()
            .map(|p| ("switch".into(), p))
            .into_iter()
            .collect(),
        retransmits: false,
    };
    let (name, pairs) = (run.engine.name(), run.pairs);
    co::measure_point(
        &mut run.point,
        opts.load_threads,
        opts.seconds,
        |with_load| {
            co::measure_phase(&setup, with_load, || {
                (0..tb.pairs())
                    .map(|i| tb.spawn_iperf_client(i, PORT, opts.seconds, 1, &dir))
                    .collect()
            })
        },
        |with_load, ph, idle| progress(&co::phase_line(name, pairs, with_load, ph, idle, false)),
    )?;
    drop(servers);
    tb.down()
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

pub fn figures(r: &Results) -> Vec<Figure> {
    co::figures(
        &r.runs,
        &r.options.pairs,
        "client/server container pairs",
        &[
            FigureSpec {
                id: "cpu-left",
                title: "CPU left to a co-located load (cf. doc 001 fig. 4a)",
                y_label: "load work rate vs idle lab (% of available CPU)",
                get: co::left,
            },
            FigureSpec {
                id: "interrupts-per-gbit",
                title: "Interrupts per Gbit (cf. doc 001 fig. 4b)",
                y_label: "interrupts per Gbit (/proc/stat intr)",
                get: co::intr,
            },
            FigureSpec {
                id: "throughput",
                title: "Total throughput (cf. doc 001 fig. 4c)",
                y_label: "sum of iperf3 TCP throughput (Gbit/s)",
                get: co::gbps,
            },
            FigureSpec {
                id: "ctxt-per-gbit",
                title: "Context switches per Gbit (cf. doc 001 fig. 4d)",
                y_label: "context switches per Gbit (/proc/stat ctxt)",
                get: co::ctxt,
            },
        ],
    )
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
        report::join(&o.pairs, ", "),
        o.seconds,
        o.load_threads,
        co::calibration_s(o.seconds),
        o.host_offload,
        if o.quick {
            " **Quick run** (`--quick`)."
        } else {
            ""
        }
    );
    co::write_figures(&mut s, figs, &[0, 0, 2, 0]);
    let _ = writeln!(s, "## Details (medians, traffic phase without load)\n");
    let _ = writeln!(
        s,
        "busy and softirq: shares of all {} cores; switch: cores used by the switch process \
         (none for the kernel bridge); CPU s/Gbit: machine-wide busy seconds per Gbit; process CPU s/Gbit: the switch \
         process and every iperf3 client and server (not inflated by other load on the machine); \
         /proc/interrupts per Gbit: the sum of the per-CPU interrupt table (device and \
         architecture interrupts, incl. timer and IPIs) — /proc/stat intr counts more sources; \
         with load: throughput and the machine's user share in the phase with the load.\n",
        cpu::cores()
    );
    let cols: &[(&str, Get<Run>, usize)] = &[
        ("Gbit/s", co::gbps, 2),
        ("busy %", co::busy, 0),
        ("softirq %", co::softirq, 0),
        ("switch cores", co::switch, 2),
        ("CPU s/Gbit", co::s_gbit, 3),
        ("process CPU s/Gbit", co::proc_s_gbit, 3),
        ("ctxt/Gbit", co::ctxt, 0),
        ("intr/Gbit", co::intr, 0),
        ("/proc/interrupts per Gbit", co::irqs, 0),
        ("Gbit/s with load", co::gbps_load, 2),
        ("user % with load", co::user_load, 0),
        ("load CPU %", co::load_share, 0),
        ("CPU left %", co::left, 0),
    ];
    s.push_str(&co::details_table(&r.runs, &o.pairs, cols, &[], |_, _| {
        Vec::new()
    }));
    let _ = writeln!(
        s,
        "\n### Where the interrupts come from (per Gbit, medians, traffic phase)\n\n\
         LOC: local timer; RES: rescheduling IPIs (a task woken on the other CPU); CAL: \
         function-call IPIs; other: devices, TLB shootdowns and the rest of /proc/interrupts. \
         Softirqs from /proc/softirqs (runs, not interrupts): NET_RX, TIMER (expired \
         timer-wheel timers, such as TPACKET_V3 block retirement), SCHED (load balancing). \
         Empty where the samples predate the breakdown.\n"
    );
    let by_source: &[(&str, Get<Run>, usize)] = &[
        ("Gbit/s", co::gbps, 2),
        ("LOC", co::irq_loc, 0),
        ("RES", co::irq_res, 0),
        ("CAL", co::irq_cal, 0),
        ("other", co::irq_other, 0),
        ("softirq NET_RX", co::softirq_net_rx, 0),
        ("softirq TIMER", co::softirq_timer, 0),
        ("softirq SCHED", co::softirq_sched, 0),
    ];
    s.push_str(&co::details_table(
        &r.runs,
        &o.pairs,
        by_source,
        &[],
        |_, _| Vec::new(),
    ));
    co::write_failures(&mut s, &r.runs, false);
    let _ = writeln!(s, "\n## Commands\n");
    let _ = writeln!(
        s,
        "```sh\nnicflow bench containers --engines {} --reps {} --seconds {} --pairs {} --host-offload {}\n\
         # per engine, repetition and pair count N, for i in 1..N (ci, si: the testbed's namespaces):\n\
         ip netns exec <si> iperf3 -s -p {PORT}\n\
         ip netns exec <ci> iperf3 -c 198.18.2.i -p {PORT} -t {} -P 1 -J --connect-timeout 3000   # all i at once\n```",
        report::join(&o.engines.iter().map(|e| e.name()).collect::<Vec<_>>(), ","),
        o.reps,
        o.seconds,
        report::join(&o.pairs, ","),
        match o.host_offload {
            HostOffload::Default => "default",
            HostOffload::Off => "off",
        },
        o.seconds
    );
    s
}
