//! Benchmarks that print reports: `nicflow bench classifier`.
//!
//! Every figure is a median over repeated runs measured in this process, and
//! every report carries its own baseline from the same run (10 rules, and a
//! linear scan of the same rules), so ratios stay meaningful across machines.

pub mod classifier;
pub mod colocated;
pub mod conntrack;
pub mod containers;
pub mod cpu;
pub mod ct_scale;
pub mod firewall;
pub mod forward;
pub mod generator;
pub mod host_tools;
pub mod hwprofile;
pub mod ipsec;
pub mod lab;
pub mod latency;
pub mod meters;
pub mod microservices;
pub mod openflow;
pub mod overlay;
pub mod ovn;
pub mod ovs_l3;
pub mod p4;
pub mod pktrate;
pub mod progcost;
pub mod report;
pub mod scheduler;
pub mod streams;
pub mod table_scale;
pub mod testbed;
pub mod workload;
pub mod xdp_baseline;

use std::time::Duration;

/// The options every experiment shares, flattened into its arguments:
/// where the run directory goes, re-rendering an earlier run without
/// measuring, and a smoke run. [`report::cli`] is the run loop that reads
/// them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// Directory for the run (default: bench-<experiment>-<time>).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Rewrite the report of an earlier run from its samples.json (measures
    /// nothing).
    #[arg(long, value_name = "SAMPLES_JSON")]
    pub render: Option<std::path::PathBuf>,
    /// Smoke run: one repetition of short phases over fewer points.
    #[arg(long)]
    pub quick: bool,
}

/// The `nicflow` binary the experiments run (daemons, `gen`, `sink`,
/// `bench xdp-redirect`): `$NICFLOW_BIN`, else the one next to this
/// program (cargo and an install put `nicflow` and `nicflow-bench` in one
/// directory; a test's executable sits one level below, in `deps/`).
pub fn nicflow_bin() -> anyhow::Result<std::path::PathBuf> {
    if let Some(b) = std::env::var_os("NICFLOW_BIN") {
        return Ok(b.into());
    }
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("locating this program to find nicflow next to it: {e}"))?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("nicflow"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no `nicflow` binary next to {} (build it: `cargo build --release -p nicflow`, \
                 or set NICFLOW_BIN)",
                exe.display()
            )
        })
}

/// Median of a set of samples (sorted in place).
pub fn median(samples: &mut [f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// One line describing the machine, for reports.
pub fn machine_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {kernel}")
}

pub fn ns(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n.max(1) as f64
}
