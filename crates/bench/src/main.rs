//! `nicflow-bench`: the experiments behind `nicflow bench` (that verb runs
//! this program). Each one builds a namespace testbed, runs nicflow and its
//! peers (the Linux bridge, Open vSwitch, nftables, strongSwan) on it and
//! prints a report whose ratios come from baselines measured in the same run.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "nicflow bench",
    bin_name = "nicflow bench",
    version,
    about = "nicflow's experiments: testbeds, peers and reports"
)]
struct Cli {
    #[command(subcommand)]
    which: BenchCmd,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Classifier ns/lookup and datapath packets/s against rule count.
    Classifier {
        /// Comma-separated rule counts.
        #[arg(long, default_value = "10,1000,20000,100000")]
        rules: String,
        /// Repetitions (the report shows medians).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Write the Markdown report here as well.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Smaller, faster run (for CI smoke tests).
        #[arg(long)]
        quick: bool,
        /// ClassBench rule files instead of random rules: a file, a
        /// directory of `*.rules[.gz]`, or a comma-separated list
        /// (default: $NICFLOW_CLASSBENCH). bench-data/classbench has some.
        #[arg(long)]
        classbench: Option<String>,
        /// Directory of the TupleMerge reference's traces
        /// (`<rule file stem>.trace`) to time as well.
        #[arg(long)]
        classbench_traces: Option<PathBuf>,
    },
    /// Forwarding between two lab hosts: nicflow vs the Linux bridge vs Open
    /// vSwitch's userspace datapath (iperf3 TCP/UDP, CPU cost).
    Forward(nicflow_bench::forward::Args),
    /// iperf3 TCP with 1-32 parallel streams per engine: throughput and CPU
    /// (document 000, figures 5.3-5.6).
    Streams(nicflow_bench::streams::Args),
    /// `nicflow gen` against trafgen on one veth pair, in one run: packets/s
    /// of 64-byte frames sent and received.
    Gen(nicflow_bench::generator::Args),
    /// 1-20 client/server container pairs through one switch: throughput,
    /// context switches and interrupts per Gbit, CPU left to a co-located load
    /// (document 001, figure 4).
    Containers(nicflow_bench::containers::Args),
    /// Container overlay across two hosts (VXLAN, 1-20 pairs): kernel
    /// vxlan + bridge vs nicflow vs nicflow with XDP offload (document 001,
    /// figure 4).
    Overlay(nicflow_bench::overlay::Args),
    /// 100-65536 OpenFlow entries with as many microflows: packets/s and host
    /// CPU (document 004, figure 6).
    OvsL3(nicflow_bench::ovs_l3::Args),
    /// Two-chassis OVN lab: cross-chassis TCP 1/4 streams and TCP RR over
    /// Geneve, NB topology and 1,000-ACL install time, daemon CPU;
    /// ovs-vswitchd baseline vs nicflow vswitchd (issue 30).
    Ovn(nicflow_bench::ovn::Args),
    /// 64K-4M exact 5-tuple entries, counters on/off, pipeline depth 1-25:
    /// packets/s and latency (document 003, figure 3, tables II-III).
    TableScale(nicflow_bench::table_scale::Args),
    /// New TCP connections/s and transactions/s through a stateful firewall
    /// table: nicflow vs Open vSwitch userspace conntrack vs nftables
    /// (document 003, table VII; issue 13).
    Conntrack(nicflow_bench::conntrack::Args),
    /// 1K-1M TCP connections tracked through the switch (in-process): handshakes/s,
    /// ns/packet with and without ct, memory per connection (issue 13).
    CtScale(nicflow_bench::ct_scale::Args),
    /// VXLAN over IPsec (ESP AES-GCM) between two hosts, 1..32 TCP
    /// streams: nicflow with and without IPsec vs strongSwan's userspace
    /// ESP (charon kernel-libipsec) (issue 15).
    Ipsec(nicflow_bench::ipsec::Args),
    /// OpenFlow flow installation (FLOW_MODs, a barrier per 1,000) and
    /// PACKET_IN round trip and rate: nicflow vs Open vSwitch (issue 14).
    Openflow(nicflow_bench::openflow::Args),
    /// Meter accuracy: a meter at R against the rate that passes it, 10
    /// Mbit/s to 5 Gbit/s: nicflow vs Open vSwitch userspace meters
    /// (issue 14).
    Meters(nicflow_bench::meters::Args),
    /// Per-packet multipath scheduling (select groups with rr/wrr/splb)
    /// against ECMP hashing on a lab of unequal tbf paths: max and p99
    /// flow completion time, reordering, daemon CPU (seed 003; issue 35).
    Scheduler(nicflow_bench::scheduler::Args),
    /// P4 mode (issue 32): routing.p4 vs the same OpenFlow rules vs Open
    /// vSwitch userspace (hit packets/s, slow-path µs, megaflows), the
    /// interpreter alone vs BMv2's published rate, add_on_miss learning
    /// and idle-timeout accuracy.
    P4(nicflow_bench::p4::Args),
    /// TCP throughput against ACL rule count (1-20,000 rules plus
    /// allow-established): nicflow vs nftables (linear chain, set) vs Open
    /// vSwitch userspace (document 003's stateful firewall; issue 13).
    Firewall(nicflow_bench::firewall::Args),
    /// A front end fanning out to three backends (one node-local, two
    /// across a VXLAN overlay) in pods added by CNI on two nodes, driven by
    /// wrk: requests/s and latency p50/p99 for nicflow (offload on/off),
    /// the reference bridge plugin with kernel VXLAN and Open vSwitch
    /// userspace (document 000's microservices experiment; issue 16).
    Microservices(nicflow_bench::microservices::Args),
    /// What one run of the kernel datapath programs costs on a hit
    /// (`BPF_PROG_TEST_RUN`), against bare redirect programs in the same run.
    Progcost(nicflow_bench::progcost::Args),
    /// The `xdp-redirect` engine's process: a minimal XDP program pairing
    /// ports, held until SIGTERM (started by the experiments' testbed).
    #[command(hide = true)]
    XdpRedirect(nicflow_bench::xdp_baseline::Args),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`nicflow bench ... | head`).
    // SAFETY: restoring the default disposition of a signal.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NICFLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(Cli::parse().which) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nicflow bench: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(which: BenchCmd) -> Result<ExitCode> {
    match which {
        BenchCmd::Classifier {
            rules,
            reps,
            out,
            quick,
            classbench,
            classbench_traces,
        } => {
            let mut opts = nicflow_bench::classifier::Options {
                sizes: parse_sizes(&rules)?,
                reps,
                ..Default::default()
            };
            if classbench.is_some() {
                opts.classbench = classbench;
            }
            if classbench_traces.is_some() {
                opts.classbench_traces = classbench_traces;
            }
            if let Some(spec) = &opts.classbench {
                // Say what is wrong with the files before any work.
                nicflow_bench::classifier::classbench_files(spec)
                    .map_err(|e| anyhow::anyhow!("--classbench {spec}: {e}"))?;
            }
            if quick {
                opts.lookups = 20_000;
                opts.dp_time = std::time::Duration::from_millis(50);
                opts.reps = opts.reps.min(3);
            }
            let rows = nicflow_bench::classifier::run(&opts, |m| eprintln!("  {m}"));
            let report = nicflow_bench::classifier::report(&rows, &opts);
            print!("{report}");
            if let Some(p) = out {
                std::fs::write(&p, &report).with_context(|| format!("writing {}", p.display()))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCmd::Forward(args) => nicflow_bench::forward::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Gen(args) => nicflow_bench::generator::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Streams(args) => nicflow_bench::streams::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Containers(args) => {
            nicflow_bench::containers::cli(&args).map(|()| ExitCode::SUCCESS)
        }
        BenchCmd::Overlay(args) => nicflow_bench::overlay::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::OvsL3(args) => nicflow_bench::ovs_l3::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Ovn(args) => nicflow_bench::ovn::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::TableScale(args) => {
            nicflow_bench::table_scale::cli(&args).map(|()| ExitCode::SUCCESS)
        }
        BenchCmd::Conntrack(args) => {
            nicflow_bench::conntrack::cli(&args).map(|()| ExitCode::SUCCESS)
        }
        BenchCmd::CtScale(args) => nicflow_bench::ct_scale::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Ipsec(args) => nicflow_bench::ipsec::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Openflow(args) => nicflow_bench::openflow::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Meters(args) => nicflow_bench::meters::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Scheduler(args) => {
            nicflow_bench::scheduler::cli(&args).map(|()| ExitCode::SUCCESS)
        }
        BenchCmd::P4(args) => nicflow_bench::p4::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Firewall(args) => nicflow_bench::firewall::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::Microservices(args) => {
            nicflow_bench::microservices::cli(&args).map(|()| ExitCode::SUCCESS)
        }
        BenchCmd::Progcost(args) => nicflow_bench::progcost::cli(&args).map(|()| ExitCode::SUCCESS),
        BenchCmd::XdpRedirect(args) => {
            nicflow_bench::xdp_baseline::cli(&args).map(|()| ExitCode::SUCCESS)
        }
    }
}

fn parse_sizes(s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|t| {
            t.trim()
                .replace('_', "")
                .parse::<usize>()
                .with_context(|| format!("bad rule count `{t}`"))
        })
        .collect()
}
