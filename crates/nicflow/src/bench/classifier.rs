//! `nicflow bench classifier`: classifier and datapath cost against rule count.
//!
//! For each rule-set size it measures, in one process:
//! - the tuple-space classifier: ns per lookup (hits, and misses), and a
//!   linear scan of the same rules as the baseline it replaces;
//! - the in-memory datapath (two mem ports, one rule table, 1,000 flows of
//!   64-byte UDP/TCP frames): packets/s with the EMC, with the megaflow cache
//!   only, and the cost of an upcall (every packet through the slow path).
//!
//! Figures are medians of `reps` repetitions.

use super::workload::{gen_5tuple_rules, gen_frames, gen_keys};
use super::{median, ns};
use crate::bridge::Bridge;
use crate::datapath::DatapathConfig;
use crate::port::mem::MemPort;
use nicflow_classifier::{Classifier, LinearClassifier};
use nicflow_flow::FLOW_WORDS;
use std::hint::black_box;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ClassifierRow {
    pub rules: usize,
    pub subtables: usize,
    pub hit_ns: f64,
    pub miss_ns: f64,
    /// TupleMerge mode (what the OpenFlow tables use).
    pub merge_tables: usize,
    pub merge_hit_ns: f64,
    pub merge_miss_ns: f64,
    /// None when the linear scan would take too long to be worth timing.
    pub linear_ns: Option<f64>,
    pub emc_mpps: f64,
    pub megaflow_mpps: f64,
    pub upcall_us: f64,
    pub dp_flows: usize,
}

pub struct Options {
    pub sizes: Vec<usize>,
    pub reps: usize,
    pub lookups: usize,
    /// Wall time per datapath measurement.
    pub dp_time: Duration,
    pub flows: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sizes: vec![10, 1_000, 20_000, 100_000],
            reps: 5,
            lookups: 200_000,
            dp_time: Duration::from_millis(400),
            flows: 1_000,
        }
    }
}

fn time_lookups<F: FnMut(&[u64; FLOW_WORDS]) -> bool>(
    keys: &[[u64; FLOW_WORDS]],
    n: usize,
    mut f: F,
) -> f64 {
    let t = Instant::now();
    let mut hits = 0u64;
    for i in 0..n {
        if f(&keys[i % keys.len()]) {
            hits += 1;
        }
    }
    black_box(hits);
    ns(t.elapsed(), n as u64)
}

/// Packets/s through a bridge with these rules, replaying `frames` on port 1.
fn dp_rate(
    rules: &[nicflow_ofctl::FlowSpec],
    frames: &[Vec<u8>],
    cfg: DatapathConfig,
    dur: Duration,
) -> (f64, usize) {
    let mut br = Bridge::new("bench", cfg);
    let (p1, _h1) = MemPort::replay("p1", frames.to_vec());
    let (p2, _h2) = MemPort::replay("p2", Vec::new());
    br.add_port(Box::new(p1)).expect("port");
    br.add_port(Box::new(p2)).expect("port");
    let now = Instant::now();
    br.add_flows(rules, now).expect("rules");
    // Warm up: every flow's first packet is an upcall.
    let mut warm = 0;
    while warm < frames.len() * 2 {
        warm += br.run_once(now);
    }
    let t = Instant::now();
    let mut n = 0usize;
    while t.elapsed() < dur {
        for _ in 0..64 {
            n += br.run_once(now);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    (n as f64 / secs, br.n_dp_flows())
}

pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> Vec<ClassifierRow> {
    let mut rows = Vec::new();
    for &n in &opts.sizes {
        progress(&format!("{n} rules: building"));
        let rules = gen_5tuple_rules(n, 42 + n as u64, 2);
        let mut cls: Classifier<FLOW_WORDS, u32> = Classifier::new();
        let mut merge: Classifier<FLOW_WORDS, u32> =
            Classifier::with_relax(nicflow_classifier::relax_flowkey);
        let mut lin: LinearClassifier<FLOW_WORDS, u32> = LinearClassifier::new();
        for (i, r) in rules.iter().enumerate() {
            let k = r.r#match.key().words();
            let m = r.r#match.mask().words();
            cls.insert(k, m, r.priority as u32, i as u32);
            merge.insert(k, m, r.priority as u32, i as u32);
            lin.insert(k, m, r.priority as u32, i as u32);
        }
        let keys: Vec<[u64; FLOW_WORDS]> = gen_keys(&rules, 4096, 7)
            .iter()
            .map(|k| *k.words())
            .collect();
        let miss_keys: Vec<[u64; FLOW_WORDS]> = gen_keys(&rules, 4096, 8)
            .iter()
            .map(|k| {
                let mut k = *k;
                // IPv6 never matches an IPv4 rule: every subtable is probed
                // and misses.
                k.dl_type = 0x86dd;
                *k.words()
            })
            .collect();

        progress(&format!("{n} rules: classifier"));
        let mut hit = Vec::new();
        let mut miss = Vec::new();
        let mut mhit = Vec::new();
        let mut mmiss = Vec::new();
        let mut linear = Vec::new();
        // Linear scan cost grows with n: time fewer lookups for big sets.
        let lin_lookups = (opts.lookups * 10 / n.max(10)).clamp(200, opts.lookups);
        for _ in 0..opts.reps {
            hit.push(time_lookups(&keys, opts.lookups, |k| {
                cls.lookup(black_box(k)).is_some()
            }));
            miss.push(time_lookups(&miss_keys, opts.lookups, |k| {
                cls.lookup(black_box(k)).is_some()
            }));
            mhit.push(time_lookups(&keys, opts.lookups, |k| {
                merge.lookup(black_box(k)).is_some()
            }));
            mmiss.push(time_lookups(&miss_keys, opts.lookups, |k| {
                merge.lookup(black_box(k)).is_some()
            }));
            linear.push(time_lookups(&keys, lin_lookups, |k| {
                lin.lookup(black_box(k)).is_some()
            }));
        }

        progress(&format!("{n} rules: datapath"));
        let frames = gen_frames(&rules, opts.flows, 64, 9);
        let mut emc = Vec::new();
        let mut mega = Vec::new();
        let mut dp_flows = 0;
        for _ in 0..opts.reps.min(3) {
            let (r, f) = dp_rate(&rules, &frames, DatapathConfig::default(), opts.dp_time);
            emc.push(r);
            dp_flows = f;
            let cfg = DatapathConfig {
                emc_entries: 0,
                ..Default::default()
            };
            mega.push(dp_rate(&rules, &frames, cfg, opts.dp_time).0);
        }
        progress(&format!("{n} rules: upcalls"));
        let mut up = Vec::new();
        for _ in 0..opts.reps.min(3) {
            let cfg = DatapathConfig {
                caches_enabled: false,
                ..Default::default()
            };
            let rate = dp_rate(&rules, &frames, cfg, opts.dp_time / 2).0;
            up.push(1e6 / rate);
        }
        rows.push(ClassifierRow {
            rules: n,
            subtables: cls.n_subtables(),
            hit_ns: median(&mut hit),
            miss_ns: median(&mut miss),
            merge_tables: merge.n_subtables(),
            merge_hit_ns: median(&mut mhit),
            merge_miss_ns: median(&mut mmiss),
            linear_ns: Some(median(&mut linear)),
            emc_mpps: median(&mut emc) / 1e6,
            megaflow_mpps: median(&mut mega) / 1e6,
            upcall_us: median(&mut up),
            dp_flows,
        });
    }
    rows
}

/// The Markdown report.
pub fn report(rows: &[ClassifierRow], opts: &Options) -> String {
    let mut s = String::new();
    s.push_str("# nicflow bench classifier\n\n");
    s.push_str(&format!("Machine: {}\n\n", super::machine_description()));
    s.push_str(&format!(
        "Medians of {} runs. Rules: random IPv4 5-tuple prefixes (/8,/16,/24,/32), TCP/UDP, \
         dst port exact (70%) or wildcard, src port exact (20%), random priorities. \
         Datapath: {} flows of 64-byte frames, two mem ports, one thread, OpenFlow table in \
         TupleMerge mode.\n\n",
        opts.reps, opts.flows
    ));
    s.push_str("## Classifier, ns per lookup\n\n");
    s.push_str("TSS = tuple space search (one hash table per mask). TupleMerge = the mode the OpenFlow tables use (tables keyed on relaxed masks, bounded chains). Linear = scan of the same rules.\n\n");
    s.push_str("| rules | TSS tables | TSS hit | TSS miss | TupleMerge tables | TupleMerge hit | TupleMerge miss | TupleMerge hit vs 10 rules | linear | linear / TupleMerge |\n");
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let base = rows.first().map(|r| r.merge_hit_ns).unwrap_or(f64::NAN);
    for r in rows {
        let lin = r.linear_ns.unwrap_or(f64::NAN);
        s.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {:.2}x | {:.1} | {:.0}x |\n",
            r.rules,
            r.subtables,
            r.hit_ns,
            r.miss_ns,
            r.merge_tables,
            r.merge_hit_ns,
            r.merge_miss_ns,
            r.merge_hit_ns / base,
            lin,
            lin / r.merge_hit_ns,
        ));
    }
    s.push_str("\n## In-memory datapath\n\n");
    s.push_str("| rules | EMC Mpps | megaflow-only Mpps | every packet an upcall: us/pkt | datapath flows |\n");
    s.push_str("|---:|---:|---:|---:|---:|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {} |\n",
            r.rules, r.emc_mpps, r.megaflow_mpps, r.upcall_us, r.dp_flows
        ));
    }
    s
}
