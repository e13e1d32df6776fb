//! `nicflow bench ovs-l3`: document 004's L3 forwarding benchmark
//! (figure 6, "Netronome OVS Offload Performance Comparison") on the lab.
//!
//! The document installs N OpenFlow entries, one per destination address,
//! and sends N concurrent microflows, one per entry, for N = 100, 1024,
//! 9728 and 65536, and reports packets/s and host CPU for OVS offloaded to
//! an Agilio NIC and for kernel OVS. Here every engine gets a one-pair
//! [`Testbed`]; rule `i` is
//! `ip,in_port=c1,nw_dst=198.19.<i/256>.<i%256>,actions=mod_dl_src,mod_dl_dst,dec_ttl,output:s1`
//! (what an L3 forwarding entry does to a packet), `nicflow gen` in `c1`
//! sends 64-byte UDP frames to N destinations round robin as fast as it
//! can, and `nicflow sink` in `s1` counts what the switch forwarded
//! ([`super::pktrate`]). Entries are added cumulatively (the 1024-entry run
//! has the 100 entries of the first one plus 924 more). The Linux bridge
//! has no OpenFlow table: it forwards the same frames by MAC address and
//! stands for "the kernel" (there is no kernel OVS module here).

use super::cpu::PerfSupport;
use super::forward::{self, Engine, HostOffload};
use super::pktrate::{self, Burst, Traffic};
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated (nicflow-afpacket, nicflow-afxdp,
    /// linux-bridge, ovs, ...).
    #[arg(
        long,
        default_value = "nicflow-tc,nicflow-afpacket,nicflow-afxdp,nicflow-xdp,linux-bridge,ovs"
    )]
    pub engines: String,
    /// OpenFlow entries (= concurrent microflows), comma-separated.
    #[arg(long, default_value = "100,1024,9728,65536")]
    pub entries: String,
    /// Seconds per measured burst.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Bursts per engine and entry count (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Frame size with FCS.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// One engine at one entry count, one burst.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub engine: Engine,
    pub entries: usize,
    pub rep: usize,
    /// Seconds to install the entries added for this point.
    pub install_s: f64,
    pub burst: Option<Burst>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub perf: String,
    pub engines: Vec<Engine>,
    pub entries: Vec<usize>,
    pub seconds: f64,
    pub reps: usize,
    pub size: usize,
    pub command: String,
    pub points: Vec<Point>,
    pub setup_errors: Vec<(Engine, String)>,
}

/// The destination address of entry `i`.
pub fn entry_dst(i: usize) -> String {
    format!("198.19.{}.{}", (i >> 8) & 0xff, i & 0xff)
}

/// Entries `from..to` as rule lines (placeholders for the testbed).
pub fn entry_rules(from: usize, to: usize) -> Vec<String> {
    (from..to)
        .map(|i| {
            format!(
                "priority=10,ip,in_port={{c1}},nw_dst={},actions=mod_dl_src:02:00:00:00:00:fe,mod_dl_dst:{{s1.mac}},dec_ttl,output:{{s1}}",
                entry_dst(i)
            )
        })
        .collect()
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    report::cli(&args.run, "ovs-l3", || run(args), figures, markdown)
}

fn run(args: &Args) -> anyhow::Result<Results> {
    let engines = testbed::parse_engines(&args.engines)?;
    let entries = testbed::parse_counts(&args.entries)?;
    if let Some(&n) = entries.iter().find(|&&n| n > 65536) {
        anyhow::bail!("--entries {n}: at most 65536 (one /16 of destinations)");
    }
    let (seconds, reps) = if args.run.quick {
        (2.0, 1)
    } else {
        (args.seconds, args.reps.max(1))
    };
    forward::install_signal_handlers();
    let mut sorted = entries.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let perf = PerfSupport::detect();
    let mut r = Results {
        machine: super::machine_description(),
        perf: perf.describe(),
        engines: engines.clone(),
        entries: sorted.clone(),
        seconds,
        reps,
        size: args.size,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        points: Vec::new(),
        setup_errors: Vec::new(),
    };
    for &engine in &engines {
        if forward::interrupted() {
            break;
        }
        eprintln!("[ovs-l3] {}: building the testbed", engine.name());
        let spec = TestbedSpec {
            rules: Rules::Custom(Vec::new()),
            // The hosts' own traffic (ARP, sockperf) must carry finished
            // checksums too, or the XDP engine (told they are complete) would
            // forward partial ones: host checksum offload off, for every engine.
            host_offload: HostOffload::Off,
            ..TestbedSpec::new(engine, 1, "ovsl")
        };
        let tb = match Testbed::up(&spec) {
            Ok(tb) => tb,
            Err(e) => {
                eprintln!("[ovs-l3] {}: {e:#}", engine.name());
                r.setup_errors.push((engine, format!("{e:#}")));
                continue;
            }
        };
        let mut installed = 0;
        for &n in &sorted {
            if forward::interrupted() {
                break;
            }
            let t0 = Instant::now();
            let mut err = None;
            if engine.has_rules() && n > installed {
                if let Err(e) = tb.add_flows(&entry_rules(installed, n)) {
                    err = Some(format!("installing entries: {e:#}"));
                }
            }
            installed = installed.max(n);
            let install_s = t0.elapsed().as_secs_f64();
            let traffic = Traffic {
                flows: n as u32,
                vary: "dst-ip".into(),
                gen_args: vec![
                    "--src-ip".into(),
                    tb.client(0).ip4.to_string(),
                    "--dst-ip".into(),
                    entry_dst(0),
                ],
                size: args.size,
                seconds,
            };
            if err.is_none() {
                if let Err(e) = pktrate::warm_up(&tb, &traffic, 3) {
                    err = Some(format!("warm-up: {e:#}"));
                }
            }
            for rep in 0..reps {
                let (burst, error) = match &err {
                    Some(e) => (None, Some(e.clone())),
                    None => match pktrate::burst(&tb, &traffic) {
                        Ok(b) => (Some(b), None),
                        Err(e) => (None, Some(format!("{e:#}"))),
                    },
                };
                match (&burst, &error) {
                    (Some(b), _) => eprintln!(
                        "[ovs-l3] {} entries={n} rep {}: sent {:.0} kpps, forwarded {:.0} kpps, switch {:.2} cores, machine {:.2} cores",
                        engine.name(),
                        rep + 1,
                        b.sent_pps / 1e3,
                        b.rx_pps / 1e3,
                        b.switch_cores,
                        b.machine_cores
                    ),
                    (_, Some(e)) => eprintln!("[ovs-l3] {} entries={n}: {e}", engine.name()),
                    _ => {}
                }
                r.points.push(Point {
                    engine,
                    entries: n,
                    rep,
                    install_s,
                    burst,
                    error,
                });
            }
        }
        if let Err(e) = tb.down() {
            eprintln!("[ovs-l3] teardown: {e:#}");
        }
    }
    Ok(r)
}

/// Median of `f` over the bursts of one engine and entry count.
fn med(r: &Results, e: Engine, n: usize, f: impl Fn(&Burst) -> f64) -> Option<f64> {
    let mut v: Vec<f64> = r
        .points
        .iter()
        .filter(|p| p.engine == e && p.entries == n)
        .filter_map(|p| p.burst.as_ref().map(&f))
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| super::median(&mut v))
}

fn figures(r: &Results) -> Vec<Figure> {
    let fig = |id: &str, title: &str, y: &str, f: &dyn Fn(&Burst) -> f64| Figure {
        id: id.into(),
        title: title.into(),
        x_label: "OpenFlow entries = concurrent microflows".into(),
        y_label: y.into(),
        log_x: true,
        series: r
            .engines
            .iter()
            .map(|&e| Series {
                name: e.name().into(),
                points: r
                    .entries
                    .iter()
                    .map(|&n| (n as f64, med(r, e, n, f)))
                    .collect(),
            })
            .collect(),
    };
    vec![
        fig(
            "packet-rate",
            "L3 forwarding, 64-byte frames: packets forwarded",
            "packet rate (Mpps)",
            &|b| b.rx_pps / 1e6,
        ),
        fig(
            "switch-cpu",
            "CPU of the switch process",
            "switch CPU (cores)",
            &|b| b.switch_cores,
        ),
        fig(
            "machine-cpu",
            "CPU of the whole machine (generator, sink, switch, kernel)",
            "machine CPU (busy cores of 2)",
            &|b| b.machine_cores,
        ),
        fig(
            "switch-cpu-per-packet",
            "Switch CPU per forwarded packet",
            "switch CPU per packet (µs)",
            &|b| b.switch_us_per_pkt,
        ),
    ]
}

fn fmt(x: Option<f64>, d: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.d$}"),
        _ => "—".into(),
    }
}

fn markdown(r: &Results, figs: &[Figure]) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# nicflow bench ovs-l3\n");
    let _ = writeln!(m, "{}", report::machine_section(&r.perf));
    let _ = writeln!(
        m,
        "Document 004, figure 6: N OpenFlow L3 entries (one per destination \
         address: `ip,in_port=c1,nw_dst=198.19.x.y,actions=mod_dl_src,mod_dl_dst,dec_ttl,output:s1`) \
         and N concurrent microflows, one per entry. `nicflow gen` in host c1 sends {}-byte UDP \
         frames round robin over the N destinations as fast as it can for {} s, after a warm-up \
         that sends every flow three times; `nicflow sink` (AF_XDP) in s1 counts what the switch \
         forwarded. Medians of {} burst(s). The Linux bridge has no OpenFlow table and forwards \
         by MAC address (there is no kernel OVS module on this machine).\n",
        r.size, r.seconds, r.reps
    );
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    let _ = writeln!(
        m,
        "| entries | engine | sent kpps | forwarded kpps | switch cores | machine cores | switch µs/pkt | one-way latency p50 / p99 µs | install s |"
    );
    let _ = writeln!(m, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &r.entries {
        for &e in &r.engines {
            let install = r
                .points
                .iter()
                .find(|p| p.engine == e && p.entries == n)
                .map(|p| p.install_s);
            let err = r
                .points
                .iter()
                .find(|p| p.engine == e && p.entries == n && p.error.is_some())
                .and_then(|p| p.error.clone());
            if med(r, e, n, |b| b.rx_pps).is_none() {
                let why = err.unwrap_or_else(|| "not measured".into());
                let _ = writeln!(
                    m,
                    "| {n} | {} | failed: {} |||||||",
                    e.name(),
                    why.replace('|', "/")
                );
                continue;
            }
            let _ = writeln!(
                m,
                "| {n} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
                e.name(),
                fmt(med(r, e, n, |b| b.sent_pps / 1e3), 0),
                fmt(med(r, e, n, |b| b.rx_pps / 1e3), 0),
                fmt(med(r, e, n, |b| b.switch_cores), 2),
                fmt(med(r, e, n, |b| b.machine_cores), 2),
                fmt(med(r, e, n, |b| b.switch_us_per_pkt), 2),
                fmt(med(r, e, n, |b| b.latency_p50_ns as f64 / 1e3), 0),
                fmt(med(r, e, n, |b| b.latency_p99_ns as f64 / 1e3), 0),
                fmt(install, 2),
            );
        }
    }
    for (e, why) in &r.setup_errors {
        let _ = writeln!(m, "\n{} could not be set up: {why}", e.name());
    }
    let _ = writeln!(m);
    for f in figs {
        let _ = writeln!(m, "### {}\n\n{}", f.title, f.markdown(3));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_cover_a_slash_16_without_repeats() {
        assert_eq!(entry_dst(0), "198.19.0.0");
        assert_eq!(entry_dst(257), "198.19.1.1");
        assert_eq!(entry_dst(65535), "198.19.255.255");
        let rules = entry_rules(100, 102);
        assert_eq!(rules.len(), 2);
        assert!(rules[0].contains("nw_dst=198.19.0.100,"), "{}", rules[0]);
        assert!(rules[0].contains("in_port={c1}"));
    }
}
