//! `nicflow bench table-scale`: document 003's flow-table benchmark
//! (figure 3, tables II and III) on the lab.
//!
//! The document fills a BlueField flow table with exact 5-tuple entries
//! (64K to 4M) and sends one UDP flow per entry, and separately chains
//! pipes 1 to 25 deep; it reports packets/s and latency and finds the
//! packet rate falls with the number of *used* entries (on BlueField-2,
//! because of per-entry counters) and with pipeline depth. Here, per
//! engine, on a one-pair [`Testbed`]:
//!
//! * **entries**: E exact IPv6 UDP 5-tuple rules
//!   (`udp6,in_port=c1,ipv6_src=2001:db8:a::<i>,ipv6_dst=<s1>,tp_src=10000,tp_dst=9,actions=output:s1`),
//!   added cumulatively for each E, and E flows from `nicflow gen`
//!   (`--ipv6 --vary src-ip`) — every entry used, as in table II. IPv6
//!   because the IPv4 lab range holds only 128K source addresses.
//! * **depth**: D OpenFlow tables chained by `goto_table` (each with one
//!   entry sending c1's traffic on), the last one outputting to s1; a
//!   fixed number of flows; packets/s and the sockperf UDP round trip.
//!
//! **Counters on/off** (table II's two columns): engines whose per-entry
//! counters can be switched off run the entries part a second time with
//! them off. Only `nicflow-xdp` can (`offload_options = { counters = "off" }`
//! skips the per-flow atomic adds in the kernel); nicflow's userspace
//! engine and OVS always count, and the bridge has no entries.
//!
//! Both software switches cache the outcome of the whole table walk in one
//! datapath flow per microflow, so established flows should not see the
//! table size or the depth; what they do see is the number of *flows*
//! (cache capacity: 200,000 datapath flows in nicflow and OVS by default,
//! beyond which packets take the slow path). The Linux bridge has no
//! OpenFlow tables and forwards the same frames by MAC address, as a
//! reference.

use super::cpu::PerfSupport;
use super::forward::{self, Engine, HostOffload};
use super::latency::{self, Latency};
use super::pktrate::{self, Burst, Traffic};
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated.
    #[arg(
        long,
        default_value = "nicflow-tc,nicflow-afpacket,nicflow-afxdp,nicflow-xdp,linux-bridge,ovs"
    )]
    pub engines: String,
    /// Exact 5-tuple entries, comma-separated; every entry up to the
    /// generator's 1,048,576 flows is used.
    #[arg(long, default_value = "65536,1048576,4194304")]
    pub entries: String,
    /// Open vSwitch gets at most this many entries (installing millions of
    /// rules through ovs-ofctl takes minutes and gigabytes; larger points
    /// are reported as skipped).
    #[arg(long, default_value_t = 1_048_576)]
    pub ovs_max_entries: usize,
    /// Pipeline depths (tables chained by goto_table), comma-separated.
    #[arg(long, default_value = "1,3,5,10,25")]
    pub depths: String,
    /// Measure the entries part with per-entry counters off too, for the
    /// engines that can turn them off (nicflow-xdp).
    #[arg(long, default_value = "on,off")]
    pub counters: String,
    /// The XDP engine's flow map size (offload_options max_flows): room
    /// for every datapath flow the slow path keeps (flow_limit 200,000).
    #[arg(long, default_value_t = 262_144)]
    pub xdp_max_flows: u32,
    /// Flows sent in the depth runs.
    #[arg(long, default_value_t = 1000)]
    pub depth_flows: u32,
    /// Seconds per measured burst.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Bursts per point (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Frame size with FCS (IPv6 UDP with the generator's payload header
    /// needs at least 90).
    #[arg(long, default_value_t = 128)]
    pub size: usize,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// Which half of the experiment a point belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    Entries,
    Depth,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub engine: Engine,
    pub part: Part,
    /// Entries or depth.
    pub x: usize,
    pub rep: usize,
    pub install_s: f64,
    pub burst: Option<Burst>,
    /// Unloaded UDP round trip (depth part, first repetition).
    pub latency: Option<Latency>,
    pub error: Option<String>,
    /// Measured with per-entry counters off (entries part only).
    #[serde(default)]
    pub counters_off: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub perf: String,
    pub engines: Vec<Engine>,
    pub entries: Vec<usize>,
    pub depths: Vec<usize>,
    pub depth_flows: u32,
    pub ovs_max_entries: usize,
    pub seconds: f64,
    pub reps: usize,
    pub size: usize,
    pub command: String,
    pub points: Vec<Point>,
    pub setup_errors: Vec<(Engine, String)>,
    /// Engines also measured with per-entry counters off.
    #[serde(default)]
    pub counters_off: Vec<Engine>,
    #[serde(default)]
    pub xdp_max_flows: u32,
}

/// Can the engine's per-entry counters be switched off?
pub fn counters_switchable(e: Engine) -> bool {
    matches!(e, Engine::NicflowXdp | Engine::NicflowTc)
}

/// Source address of entry / flow `i`.
pub fn entry_src(i: usize) -> String {
    let v = 0x2001_0db8_000a_0000_0000_0000_0000_0000u128 + i as u128;
    std::net::Ipv6Addr::from(v).to_string()
}

/// Entries `from..to` as rule lines (testbed placeholders).
pub fn entry_rules(from: usize, to: usize) -> Vec<String> {
    (from..to)
        .map(|i| {
            format!(
                "priority=10,udp6,in_port={{c1}},ipv6_src={},ipv6_dst={{s1.ip6}},tp_src=10000,tp_dst=9,actions=output:{{s1}}",
                entry_src(i)
            )
        })
        .collect()
}

/// A chain of `depth` tables forwarding c1's traffic to s1, plus the
/// return path (s1 to c1 in table 0) for the latency test's replies.
pub fn depth_rules(depth: usize) -> Vec<String> {
    let mut v = vec!["table=0,priority=20,in_port={s1},actions=output:{c1}".to_string()];
    for t in 0..depth {
        if t + 1 < depth {
            v.push(format!(
                "table={t},priority=1,in_port={{c1}},actions=goto_table:{}",
                t + 1
            ));
        } else {
            v.push(format!(
                "table={t},priority=1,in_port={{c1}},actions=output:{{s1}}"
            ));
        }
    }
    v
}

fn traffic(tb: &Testbed, flows: u32, size: usize, seconds: f64) -> Traffic {
    Traffic {
        flows,
        vary: "src-ip".into(),
        gen_args: vec![
            "--ipv6".into(),
            "--src-ip".into(),
            entry_src(0),
            "--dst-ip".into(),
            tb.server(0).ip6.to_string(),
            "--src-port".into(),
            "10000".into(),
            "--dst-port".into(),
            "9".into(),
        ],
        size,
        seconds,
    }
}

/// Add rules in chunks (one control request or ovs-ofctl call each), so
/// millions of entries never travel as one message.
fn install(tb: &Testbed, lines: Vec<String>) -> anyhow::Result<()> {
    for chunk in lines.chunks(100_000) {
        tb.add_flows(chunk)?;
        if forward::interrupted() {
            anyhow::bail!("interrupted");
        }
    }
    Ok(())
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    report::cli(&args.run, "table-scale", || run(args), figures, markdown)
}

fn run(args: &Args) -> anyhow::Result<Results> {
    let engines = testbed::parse_engines(&args.engines)?;
    let (mut entries, mut depths, seconds, reps) = if args.run.quick {
        (vec![4096, 65536], vec![1, 5, 25], 2.0, 1)
    } else {
        (
            testbed::parse_counts(&args.entries)?,
            testbed::parse_counts(&args.depths)?,
            args.seconds,
            args.reps.max(1),
        )
    };
    entries.sort_unstable();
    entries.dedup();
    depths.sort_unstable();
    depths.dedup();
    if let Some(&d) = depths.iter().find(|&&d| d > 254) {
        anyhow::bail!("--depths {d}: at most 254 tables");
    }
    if let Some(&n) = entries.iter().find(|&&n| n > 16_777_216) {
        anyhow::bail!("--entries {n}: at most 16M");
    }
    let mut with_off = false;
    for c in args.counters.split(',').map(str::trim) {
        match c {
            "on" => {}
            "off" => with_off = true,
            _ => anyhow::bail!("--counters: `{c}` is not on or off"),
        }
    }
    forward::install_signal_handlers();
    let perf = PerfSupport::detect();
    let mut r = Results {
        machine: super::machine_description(),
        perf: perf.describe(),
        engines: engines.clone(),
        entries: entries.clone(),
        depths: depths.clone(),
        depth_flows: args.depth_flows,
        ovs_max_entries: args.ovs_max_entries,
        seconds,
        reps,
        size: args.size,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        points: Vec::new(),
        setup_errors: Vec::new(),
        counters_off: if with_off {
            engines
                .iter()
                .copied()
                .filter(|&e| counters_switchable(e))
                .collect()
        } else {
            Vec::new()
        },
        xdp_max_flows: args.xdp_max_flows,
    };
    for &engine in &engines {
        if forward::interrupted() {
            break;
        }
        if let Err(e) = run_engine(engine, &mut r) {
            eprintln!("[table-scale] {}: {e:#}", engine.name());
            r.setup_errors.push((engine, format!("{e:#}")));
        }
        if r.counters_off.contains(&engine) && !forward::interrupted() {
            if let Err(e) = run_entries(engine, true, &mut r) {
                eprintln!("[table-scale] {} counters off: {e:#}", engine.name());
                r.setup_errors
                    .push((engine, format!("counters off: {e:#}")));
            }
        }
    }
    Ok(r)
}

fn spec(engine: Engine, counters_off: bool, xdp_max_flows: u32) -> TestbedSpec {
    let mut offload_options = vec![("max_flows".to_string(), xdp_max_flows.to_string())];
    if counters_off {
        offload_options.push(("counters".into(), "off".into()));
    }
    TestbedSpec {
        offload_options,
        rules: Rules::Custom(Vec::new()),
        // The hosts' own traffic (ARP, sockperf) must carry finished
        // checksums too, or the XDP engine (told they are complete) would
        // forward partial ones: host checksum offload off, for every engine.
        host_offload: HostOffload::Off,
        ..TestbedSpec::new(engine, 1, "tscale")
    }
}

fn log_point(engine: Engine, what: &str, b: &Option<Burst>, e: &Option<String>) {
    match (b, e) {
        (Some(b), _) => eprintln!(
            "[table-scale] {} {what}: sent {:.0} kpps, forwarded {:.0} kpps, switch {:.2} cores",
            engine.name(),
            b.sent_pps / 1e3,
            b.rx_pps / 1e3,
            b.switch_cores
        ),
        (_, Some(e)) => eprintln!("[table-scale] {} {what}: {e}", engine.name()),
        _ => {}
    }
}

fn run_engine(engine: Engine, r: &mut Results) -> anyhow::Result<()> {
    run_entries(engine, false, r)?;
    run_depth(engine, r)
}

/// Part 1: entries, installed cumulatively on one testbed.
fn run_entries(engine: Engine, counters_off: bool, r: &mut Results) -> anyhow::Result<()> {
    let has_rules = engine.has_rules();
    let label = if counters_off { " (counters off)" } else { "" };
    eprintln!("[table-scale] {}{label}: entries", engine.name());
    let tb = Testbed::up(&spec(engine, counters_off, r.xdp_max_flows))?;
    let mut installed = 0;
    for &n in &r.entries.clone() {
        if forward::interrupted() {
            break;
        }
        let mut err = None;
        if engine.is_ovs() && n > r.ovs_max_entries {
            err = Some(format!(
                "skipped: more than --ovs-max-entries {}",
                r.ovs_max_entries
            ));
        }
        let t0 = Instant::now();
        if err.is_none() && has_rules && n > installed {
            match install(&tb, entry_rules(installed, n)) {
                Ok(()) => installed = n,
                Err(e) => err = Some(format!("installing entries: {e:#}")),
            }
        }
        let install_s = t0.elapsed().as_secs_f64();
        // The generator numbers at most MAX_FLOWS flows; beyond that the
        // extra entries are unused, as in the document's figure 3a.
        let flows = n.min(nicflow::traffic::payload::MAX_FLOWS as usize) as u32;
        let t = traffic(&tb, flows, r.size, r.seconds);
        if err.is_none() {
            if let Err(e) = pktrate::warm_up(&tb, &t, 2) {
                err = Some(format!("warm-up: {e:#}"));
            }
        }
        for rep in 0..r.reps {
            let (burst, error) = match &err {
                Some(e) => (None, Some(e.clone())),
                None => match pktrate::burst(&tb, &t) {
                    Ok(b) => (Some(b), None),
                    Err(e) => (None, Some(format!("{e:#}"))),
                },
            };
            log_point(engine, &format!("entries={n}{label}"), &burst, &error);
            r.points.push(Point {
                engine,
                part: Part::Entries,
                x: n,
                rep,
                install_s,
                burst,
                latency: None,
                error,
                counters_off,
            });
        }
        if err.as_deref().is_some_and(|e| !e.starts_with("skipped")) {
            break;
        }
    }
    tb.down()
}

/// Part 2: depth, on a fresh testbed per depth (tables start empty).
fn run_depth(engine: Engine, r: &mut Results) -> anyhow::Result<()> {
    let has_rules = engine.has_rules();
    eprintln!("[table-scale] {}: pipeline depth", engine.name());
    for &d in &r.depths.clone() {
        if forward::interrupted() {
            break;
        }
        let tb = Testbed::up(&spec(engine, false, r.xdp_max_flows))?;
        let t0 = Instant::now();
        let mut err = None;
        if has_rules {
            if let Err(e) = install(&tb, depth_rules(d)) {
                err = Some(format!("installing the chain: {e:#}"));
            }
        }
        let install_s = t0.elapsed().as_secs_f64();
        let t = traffic(&tb, r.depth_flows, r.size, r.seconds);
        let lat = if err.is_none() {
            latency::ping_pong(
                &tb.client(0).netns,
                &tb.server(0).netns,
                &tb.server(0).ip4.to_string(),
                11111,
                3,
                64,
            )
            .map_err(|e| eprintln!("[table-scale] {} depth={d}: sockperf: {e:#}", engine.name()))
            .ok()
        } else {
            None
        };
        if err.is_none() {
            if let Err(e) = pktrate::warm_up(&tb, &t, 3) {
                err = Some(format!("warm-up: {e:#}"));
            }
        }
        for rep in 0..r.reps {
            let (burst, error) = match &err {
                Some(e) => (None, Some(e.clone())),
                None => match pktrate::burst(&tb, &t) {
                    Ok(b) => (Some(b), None),
                    Err(e) => (None, Some(format!("{e:#}"))),
                },
            };
            log_point(engine, &format!("depth={d}"), &burst, &error);
            r.points.push(Point {
                engine,
                part: Part::Depth,
                x: d,
                rep,
                install_s,
                burst,
                latency: if rep == 0 { lat.clone() } else { None },
                error,
                counters_off: false,
            });
        }
        tb.down()?;
    }
    Ok(())
}

/// An engine, or an engine with its per-entry counters off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Variant {
    engine: Engine,
    counters_off: bool,
}

impl Variant {
    fn name(self) -> String {
        if self.counters_off {
            format!("{} (counters off)", self.engine.name())
        } else {
            self.engine.name().to_string()
        }
    }

    fn has(self, p: &Point) -> bool {
        p.engine == self.engine && p.counters_off == self.counters_off
    }
}

/// The series of a part: every engine, plus the counters-off variants in
/// the entries part.
fn variants(r: &Results, part: Part) -> Vec<Variant> {
    let mut v = Vec::new();
    for &engine in &r.engines {
        v.push(Variant {
            engine,
            counters_off: false,
        });
        if part == Part::Entries && r.counters_off.contains(&engine) {
            v.push(Variant {
                engine,
                counters_off: true,
            });
        }
    }
    v
}

fn med_of(
    r: &Results,
    e: Variant,
    part: Part,
    x: usize,
    f: &dyn Fn(&Point) -> Option<f64>,
) -> Option<f64> {
    let mut v: Vec<f64> = r
        .points
        .iter()
        .filter(|p| e.has(p) && p.part == part && p.x == x)
        .filter_map(f)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| super::median(&mut v))
}

/// A figure's value of one point.
type PointFn = Box<dyn Fn(&Point) -> Option<f64>>;

fn burst_f(f: impl Fn(&Burst) -> f64 + 'static) -> PointFn {
    Box::new(move |p: &Point| p.burst.as_ref().map(&f))
}

fn figures(r: &Results) -> Vec<Figure> {
    let fig = |id: &str, title: &str, part: Part, xl: &str, y: &str, f: PointFn| {
        let xs = match part {
            Part::Entries => &r.entries,
            Part::Depth => &r.depths,
        };
        Figure {
            id: id.into(),
            title: title.into(),
            x_label: xl.into(),
            y_label: y.into(),
            log_x: part == Part::Entries,
            series: variants(r, part)
                .into_iter()
                .map(|e| Series {
                    name: e.name(),
                    points: xs
                        .iter()
                        .map(|&x| (x as f64, med_of(r, e, part, x, &*f)))
                        .collect(),
                })
                .collect(),
        }
    };
    let ex = "exact 5-tuple entries = UDP flows";
    let dx = "pipeline depth (tables)";
    vec![
        fig(
            "entries-packet-rate",
            "Packet rate against used entries (fig. 3a, table II)",
            Part::Entries,
            ex,
            "packet rate (Mpps)",
            burst_f(|b| b.rx_pps / 1e6),
        ),
        fig(
            "entries-switch-cpu-per-packet",
            "Switch CPU per packet against used entries",
            Part::Entries,
            ex,
            "switch CPU per packet (µs)",
            burst_f(|b| b.switch_us_per_pkt),
        ),
        fig(
            "depth-packet-rate",
            "Packet rate against pipeline depth (fig. 3c, table III)",
            Part::Depth,
            dx,
            "packet rate (Mpps)",
            burst_f(|b| b.rx_pps / 1e6),
        ),
        fig(
            "depth-latency",
            "UDP round trip against pipeline depth (fig. 3d, table III)",
            Part::Depth,
            dx,
            "sockperf round trip p50 (µs)",
            Box::new(|p: &Point| p.latency.as_ref().map(|l| l.p50_us)),
        ),
    ]
}

fn fmt(x: Option<f64>, d: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.d$}"),
        _ => "—".into(),
    }
}

fn first_error(r: &Results, e: Variant, part: Part, x: usize) -> Option<String> {
    r.points
        .iter()
        .find(|p| e.has(p) && p.part == part && p.x == x && p.error.is_some())
        .and_then(|p| p.error.clone())
}

fn markdown(r: &Results, figs: &[Figure]) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# nicflow bench table-scale\n");
    let _ = writeln!(m, "{}", report::machine_section(&r.perf));
    let _ = writeln!(
        m,
        "Document 003, figure 3 and tables II-III. *Entries*: E exact IPv6 UDP 5-tuple rules \
         and min(E, 1,048,576) flows from `nicflow gen` in c1 (one per entry; beyond the \
         generator's flow numbering the extra entries are installed but unused), {}-byte frames, \
         as fast as the generator goes for {} s after a warm-up that sends every flow twice; \
         `nicflow sink` (AF_XDP) in s1 counts what was forwarded. Open vSwitch gets at most {} \
         entries. *Depth*: D tables chained with goto_table, {} flows, plus an unloaded sockperf \
         UDP ping-pong (64-byte messages, 3 s) for the round trip. Medians of {} burst(s). The \
         Linux bridge has no tables and forwards the same frames by MAC address, as a reference. \
         Both software switches keep at most 200,000 datapath flows (nicflow's and OVS's \
         default `flow_limit`); past that, packets of uncached flows take the slow path.\n",
        r.size, r.seconds, r.ovs_max_entries, r.depth_flows, r.reps
    );
    if !r.counters_off.is_empty() {
        let _ = writeln!(
            m,
            "*Counters off* (table II's second column): the entries part again with per-entry \
             packet/byte counters off, for the engines that can switch them off ({}: \
             `offload_options = {{ counters = \"off\" }}`, the kernel skips two atomic adds per \
             hit); nicflow's userspace engine and OVS always count. The XDP engine's flow map \
             holds {} flows.\n",
            r.counters_off
                .iter()
                .map(|e| e.name())
                .collect::<Vec<_>>()
                .join(", "),
            r.xdp_max_flows
        );
    }
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    let _ = writeln!(m, "## Entries\n");
    let _ = writeln!(
        m,
        "| entries | engine | sent kpps | forwarded kpps | flows seen by the sink | switch cores | switch µs/pkt | install s |"
    );
    let _ = writeln!(m, "|---:|---|---:|---:|---:|---:|---:|---:|");
    let p = |f: fn(&Burst) -> f64| burst_f(f);
    for &n in &r.entries {
        for e in variants(r, Part::Entries) {
            let bf = |f: fn(&Burst) -> f64| med_of(r, e, Part::Entries, n, &*p(f));
            if bf(|b| b.rx_pps).is_none() {
                let why =
                    first_error(r, e, Part::Entries, n).unwrap_or_else(|| "not measured".into());
                let _ = writeln!(
                    m,
                    "| {n} | {} | {} |||||||",
                    e.name(),
                    why.replace('|', "/")
                );
                continue;
            }
            let install = med_of(r, e, Part::Entries, n, &|pt: &Point| Some(pt.install_s));
            let _ = writeln!(
                m,
                "| {n} | {} | {} | {} | {} | {} | {} | {} |",
                e.name(),
                fmt(bf(|b| b.sent_pps / 1e3), 0),
                fmt(bf(|b| b.rx_pps / 1e3), 0),
                fmt(bf(|b| b.flows_seen as f64), 0),
                fmt(bf(|b| b.switch_cores), 2),
                fmt(bf(|b| b.switch_us_per_pkt), 2),
                fmt(install, 1),
            );
        }
    }
    let _ = writeln!(m, "\n## Pipeline depth\n");
    let _ = writeln!(
        m,
        "| depth | engine | forwarded kpps | switch µs/pkt | round trip p50 / p99 / p99.9 µs |"
    );
    let _ = writeln!(m, "|---:|---|---:|---:|---:|");
    for &d in &r.depths {
        for e in variants(r, Part::Depth) {
            let bf = |f: fn(&Burst) -> f64| med_of(r, e, Part::Depth, d, &*p(f));
            let lat = r
                .points
                .iter()
                .find(|pt| e.has(pt) && pt.part == Part::Depth && pt.x == d)
                .and_then(|pt| pt.latency.clone());
            if bf(|b| b.rx_pps).is_none() {
                let why =
                    first_error(r, e, Part::Depth, d).unwrap_or_else(|| "not measured".into());
                let _ = writeln!(m, "| {d} | {} | {} |||", e.name(), why.replace('|', "/"));
                continue;
            }
            let l = lat
                .map(|l| format!("{:.0} / {:.0} / {:.0}", l.p50_us, l.p99_us, l.p999_us))
                .unwrap_or_else(|| "—".into());
            let _ = writeln!(
                m,
                "| {d} | {} | {} | {} | {l} |",
                e.name(),
                fmt(bf(|b| b.rx_pps / 1e3), 0),
                fmt(bf(|b| b.switch_us_per_pkt), 2),
            );
        }
    }
    for (e, why) in &r.setup_errors {
        let _ = writeln!(m, "\n{} failed: {why}", e.name());
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
    fn entry_addresses_are_distinct_lab_addresses() {
        assert_eq!(entry_src(0), "2001:db8:a::");
        assert_eq!(entry_src(0x1_0001), "2001:db8:a::1:1");
        assert_eq!(entry_src(4_194_303), "2001:db8:a::3f:ffff");
        let r = entry_rules(5, 6);
        assert!(r[0].contains("ipv6_src=2001:db8:a::5,"), "{}", r[0]);
    }

    #[test]
    fn depth_chain_ends_in_output() {
        let r = depth_rules(3);
        assert_eq!(r.len(), 4);
        assert!(r[1].starts_with("table=0,") && r[1].ends_with("goto_table:1"));
        assert!(r[2].starts_with("table=1,") && r[2].ends_with("goto_table:2"));
        assert!(r[3].starts_with("table=2,") && r[3].ends_with("output:{s1}"));
        assert_eq!(depth_rules(1).len(), 2);
    }
}
