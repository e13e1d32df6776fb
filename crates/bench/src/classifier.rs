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
//!
//! With `NICFLOW_CLASSBENCH` set (a ClassBench rule file, a directory of
//! them, or a comma-separated list; `.gz` files are read through `gzip -dc`)
//! it measures those rule sets instead: see [`run_classbench`]. The CLI has
//! no flag for it yet, hence the environment variable.

use super::workload::{gen_5tuple_rules, gen_frames, gen_keys};
use super::{median, ns};
use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::MemPort;
use nicflow_classifier::{Classifier, FieldRange, LinearClassifier};
use nicflow_flow::FLOW_WORDS;
use std::hint::black_box;
use std::path::{Path, PathBuf};
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
    /// Set in ClassBench mode (`Options::classbench`), where it is the only
    /// meaningful field.
    pub classbench: Option<Box<ClassbenchRow>>,
}

pub struct Options {
    pub sizes: Vec<usize>,
    pub reps: usize,
    pub lookups: usize,
    /// Wall time per datapath measurement.
    pub dp_time: Duration,
    pub flows: usize,
    /// ClassBench rule files to measure instead of the random rules (default:
    /// `$NICFLOW_CLASSBENCH`).
    pub classbench: Option<String>,
    /// Directory of packet traces `<rule file stem>.trace` (the TupleMerge
    /// reference's `pout=` format) to time as well (default:
    /// `$NICFLOW_CLASSBENCH_TRACES`).
    pub classbench_traces: Option<PathBuf>,
    /// The TupleMerge reference's `main` binary (github.com/drjdaly/tuplemerge,
    /// built outside the project), run on the same rule file and trace
    /// alternately with nicflow's timed trace passes (default:
    /// `$NICFLOW_CLASSBENCH_REFERENCE`).
    pub classbench_reference: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sizes: vec![10, 1_000, 20_000, 100_000],
            reps: 5,
            lookups: 200_000,
            dp_time: Duration::from_millis(400),
            flows: 1_000,
            classbench: std::env::var("NICFLOW_CLASSBENCH").ok(),
            classbench_traces: std::env::var_os("NICFLOW_CLASSBENCH_TRACES").map(PathBuf::from),
            classbench_reference: std::env::var_os("NICFLOW_CLASSBENCH_REFERENCE")
                .map(PathBuf::from),
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

/// ns per lookup over a whole packet trace, in order: each packet's five
/// header fields are written into one `FlowKey` buffer and that is looked
/// up, as the datapath's key extraction fills its key. (Keeping a 312-byte
/// key per packet of a 500,000-packet trace instead streams 150 MB through
/// the caches, where the reference reads 20-byte packets.)
fn time_trace<F: FnMut(&[u64; FLOW_WORDS]) -> bool>(packets: &[CbPacket], mut f: F) -> f64 {
    let mut k = nicflow_flow::FlowKey {
        dl_type: 0x0800,
        ..Default::default()
    };
    let t = Instant::now();
    let mut hits = 0u64;
    for p in packets {
        k.nw_src = p.src;
        k.nw_dst = p.dst;
        k.nw_proto = p.proto;
        k.tp_src = p.sport;
        k.tp_dst = p.dport;
        if f(black_box(k.words())) {
            hits += 1;
        }
    }
    black_box(hits);
    ns(t.elapsed(), packets.len() as u64)
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
    if let Some(spec) = &opts.classbench {
        // The CLI checked the files before calling; nothing left means nothing to measure.
        let files = classbench_files(spec).unwrap_or_default();
        return run_classbench(
            &files,
            opts.classbench_traces.as_deref(),
            opts.classbench_reference.as_deref(),
            opts.reps,
            opts.lookups,
            progress,
        )
        .into_iter()
        .map(|c| ClassifierRow {
            rules: c.rules,
            subtables: c.tss.tables,
            hit_ns: c.tss.hit_ns,
            miss_ns: c.tss.miss_ns,
            merge_tables: c.merge.tables,
            merge_hit_ns: c.merge.hit_ns,
            merge_miss_ns: c.merge.miss_ns,
            linear_ns: None,
            emc_mpps: f64::NAN,
            megaflow_mpps: f64::NAN,
            upcall_us: f64::NAN,
            dp_flows: 0,
            classbench: Some(Box::new(c)),
        })
        .collect();
    }
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
            classbench: None,
        });
    }
    rows
}

/// The Markdown report.
pub fn report(rows: &[ClassifierRow], opts: &Options) -> String {
    if opts.classbench.is_some() {
        let cb: Vec<ClassbenchRow> = rows
            .iter()
            .filter_map(|r| r.classbench.as_deref().cloned())
            .collect();
        return report_classbench(&cb, opts.reps);
    }
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

// ---------------------------------------------------------------------------
// ClassBench rule sets
// ---------------------------------------------------------------------------

/// One ClassBench filter: `@sip/len dip/len sp_lo : sp_hi dp_lo : dp_hi
/// proto/mask [flags/mask]`. Addresses are host-order `(value, mask)`; the
/// TCP flags column (when present) is ignored, as the TupleMerge reference
/// does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbRule {
    pub src: (u32, u32),
    pub dst: (u32, u32),
    pub sport: (u16, u16),
    pub dport: (u16, u16),
    pub proto: (u8, u8),
}

/// A packet header as a ClassBench trace has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbPacket {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
}

impl CbRule {
    pub fn matches(&self, p: &CbPacket) -> bool {
        (p.src ^ self.src.0) & self.src.1 == 0
            && (p.dst ^ self.dst.0) & self.dst.1 == 0
            && (self.sport.0..=self.sport.1).contains(&p.sport)
            && (self.dport.0..=self.dport.1).contains(&p.dport)
            && (p.proto ^ self.proto.0) & self.proto.1 == 0
    }
}

fn prefix32(len: u32) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len)
    }
}

fn parse_prefix(s: &str) -> Result<(u32, u32), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| format!("no '/' in {s:?}"))?;
    let a: std::net::Ipv4Addr = a.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let l: u32 = l.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if l > 32 {
        return Err(format!("{s:?}: prefix length over 32"));
    }
    let m = prefix32(l);
    Ok((u32::from(a) & m, m))
}

fn parse_hex_u8(s: &str) -> Result<u8, String> {
    let h = s.trim_start_matches("0x").trim_start_matches("0X");
    u8::from_str_radix(h, 16).map_err(|e| format!("{s:?}: {e}"))
}

/// Parses a ClassBench filter file (first rule = highest priority).
pub fn parse_classbench(text: &str) -> Result<Vec<CbRule>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let err = |e: String| format!("line {}: {e}", n + 1);
        let body = line
            .strip_prefix('@')
            .ok_or_else(|| err("does not start with '@'".into()))?;
        let t: Vec<&str> = body.split_whitespace().collect();
        if t.len() < 9 || t[3] != ":" || t[6] != ":" {
            return Err(err(format!("unexpected fields: {line:?}")));
        }
        let port = |s: &str| s.parse::<u16>().map_err(|e| err(format!("{s:?}: {e}")));
        let (pv, pm) = t[8]
            .split_once('/')
            .ok_or_else(|| err(format!("protocol {:?}", t[8])))?;
        let r = CbRule {
            src: parse_prefix(t[0]).map_err(err)?,
            dst: parse_prefix(t[1]).map_err(err)?,
            sport: (port(t[2])?, port(t[4])?),
            dport: (port(t[5])?, port(t[7])?),
            proto: {
                let m = parse_hex_u8(pm).map_err(err)?;
                (parse_hex_u8(pv).map_err(err)? & m, m)
            },
        };
        if r.sport.0 > r.sport.1 || r.dport.0 > r.dport.1 {
            return Err(err("empty port range".into()));
        }
        out.push(r);
    }
    Ok(out)
}

/// Parses a trace in the TupleMerge reference's format: `sip dip sport dport
/// proto ...` in decimal, one packet a line.
pub fn parse_cb_trace(text: &str) -> Result<Vec<CbPacket>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            let v: Vec<u64> = l
                .split_whitespace()
                .take(5)
                .map(|x| x.parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("trace line {}: {e}", n + 1))?;
            if v.len() < 5 {
                return Err(format!("trace line {}: fewer than 5 fields", n + 1));
            }
            Ok(CbPacket {
                src: v[0] as u32,
                dst: v[1] as u32,
                sport: v[2] as u16,
                dport: v[3] as u16,
                proto: v[4] as u8,
            })
        })
        .collect()
}

/// The classic split of a port range into prefixes: `(value, mask)` pairs
/// covering exactly `lo..=hi`, at most 30 of them.
pub fn range_to_prefixes(lo: u16, hi: u16) -> Vec<(u16, u16)> {
    let (mut lo, hi) = (u32::from(lo), u32::from(hi));
    let mut out = Vec::new();
    while lo <= hi {
        // The largest aligned block starting at lo that stays within hi.
        let mut size = if lo == 0 {
            1u32 << 16
        } else {
            lo & lo.wrapping_neg()
        };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        out.push((lo as u16, !(size - 1) as u16));
        lo += size;
    }
    out
}

/// Classifier entries of one rule: the cross product of its port prefixes,
/// all with the rule's priority. `(key, mask)` over `FlowKey` words.
pub fn expand_rule(r: &CbRule) -> Vec<([u64; FLOW_WORDS], [u64; FLOW_WORDS])> {
    use nicflow_flow::FlowKey;
    let mut out = Vec::new();
    for (sp, spm) in range_to_prefixes(r.sport.0, r.sport.1) {
        for (dp, dpm) in range_to_prefixes(r.dport.0, r.dport.1) {
            let key = FlowKey {
                dl_type: 0x0800,
                nw_src: r.src.0,
                nw_dst: r.dst.0,
                nw_proto: r.proto.0,
                tp_src: sp,
                tp_dst: dp,
                ..FlowKey::default()
            };
            let mask = FlowKey {
                dl_type: 0xffff,
                nw_src: r.src.1,
                nw_dst: r.dst.1,
                nw_proto: r.proto.1,
                tp_src: spm,
                tp_dst: dpm,
                ..FlowKey::default()
            };
            out.push((*key.words(), *mask.words()));
        }
    }
    out
}

/// The one classifier entry of a rule with its port ranges kept
/// ([`Classifier::insert_ranges`]): addresses and protocol as masks, the two
/// ports as [`FieldRange`]s over `FlowKey`'s `tp_src` / `tp_dst`.
pub fn native_rule(r: &CbRule) -> ([u64; FLOW_WORDS], [u64; FLOW_WORDS], [FieldRange; 2]) {
    use nicflow_classifier::bench_support as bs;
    use nicflow_flow::FlowKey;
    let key = FlowKey {
        dl_type: 0x0800,
        nw_src: r.src.0,
        nw_dst: r.dst.0,
        nw_proto: r.proto.0,
        ..FlowKey::default()
    };
    let mask = FlowKey {
        dl_type: 0xffff,
        nw_src: r.src.1,
        nw_dst: r.dst.1,
        nw_proto: r.proto.1,
        ..FlowKey::default()
    };
    let range = |word: usize, shift: u32, (lo, hi): (u16, u16)| FieldRange {
        word: word as u8,
        shift: shift as u8,
        lo,
        hi,
    };
    (
        *key.words(),
        *mask.words(),
        [
            range(bs::TP_SRC_WORD, bs::TP_SRC_SHIFT, r.sport),
            range(bs::TP_DST_WORD, bs::TP_DST_SHIFT, r.dport),
        ],
    )
}

fn packet_key(p: &CbPacket) -> [u64; FLOW_WORDS] {
    let k = nicflow_flow::FlowKey {
        dl_type: 0x0800,
        nw_src: p.src,
        nw_dst: p.dst,
        nw_proto: p.proto,
        tp_src: p.sport,
        tp_dst: p.dport,
        ..Default::default()
    };
    *k.words()
}

/// Deterministic SplitMix64 for key generation.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A packet inside a random rule (it may match an earlier rule too).
fn packets_hitting(rules: &[CbRule], n: usize, seed: u64) -> Vec<CbPacket> {
    let mut rng = Mix(seed);
    (0..n)
        .map(|_| {
            let r = &rules[rng.below(rules.len() as u64) as usize];
            let port =
                |rng: &mut Mix, (lo, hi): (u16, u16)| lo + rng.below(u64::from(hi - lo) + 1) as u16;
            CbPacket {
                src: r.src.0 | (rng.next() as u32 & !r.src.1),
                dst: r.dst.0 | (rng.next() as u32 & !r.dst.1),
                sport: port(&mut rng, r.sport),
                dport: port(&mut rng, r.dport),
                proto: r.proto.0 | ([6u8, 17][rng.below(2) as usize] & !r.proto.1),
            }
        })
        .collect()
}

/// Uniformly random headers (protocol TCP, UDP, ICMP or random).
fn packets_random(n: usize, seed: u64) -> Vec<CbPacket> {
    let mut rng = Mix(seed);
    (0..n)
        .map(|_| CbPacket {
            src: rng.next() as u32,
            dst: rng.next() as u32,
            sport: rng.next() as u16,
            dport: rng.next() as u16,
            proto: [6, 17, 1, rng.next() as u8][rng.below(4) as usize],
        })
        .collect()
}

/// Figures of one classifier mode on one rule set.
#[derive(Clone, Debug, Default)]
pub struct ModeFigures {
    /// Classifier entries (rules after any port-range expansion).
    pub entries: usize,
    pub tables: usize,
    pub hit_ns: f64,
    pub random_ns: f64,
    pub miss_ns: f64,
    pub trace_ns: Option<f64>,
    /// Mean tables probed per lookup.
    pub probes_hit: f64,
    pub probes_random: f64,
    pub probes_miss: f64,
    pub probes_trace: Option<f64>,
    pub memory_bytes: usize,
    /// Entries inserted per second (building from empty).
    pub inserts_per_s: f64,
    /// Entries removed per second (emptying it in random order).
    pub deletes_per_s: f64,
    /// Mean bits set in the megaflow mask `lookup_wc` returns for the hit keys.
    pub wc_bits_hit: f64,
    /// Lookups checked against the first-match scan, and how many disagreed.
    pub checked: usize,
    pub wrong: usize,
}

#[derive(Clone, Debug)]
pub struct ClassbenchRow {
    pub name: String,
    pub rules: usize,
    /// Classifier entries after port-range expansion.
    pub entries: usize,
    pub trace_packets: usize,
    /// Share of the random keys that match some rule.
    pub random_hit_pct: f64,
    pub tss: ModeFigures,
    pub merge: ModeFigures,
    /// Every mode measured, TSS and TupleMerge included, with its label.
    /// The first is the one timed alternately with the reference.
    pub modes: Vec<(String, ModeFigures)>,
    /// The TupleMerge reference on the same rules and trace (medians).
    pub reference: Option<RefFigures>,
    /// Why the reference was not measured, if it was asked for.
    pub reference_error: Option<String>,
}

/// The TupleMerge reference's figures on one rule set (`TupleMerge-Online`,
/// collision limit [`REF_COLLISION_LIMIT`]), medians over the runs.
#[derive(Clone, Debug, Default)]
pub struct RefFigures {
    pub runs: usize,
    /// Its `Classification time` over the trace / packets.
    pub trace_ns: f64,
    pub tables: usize,
    /// Its `Average tables queried`.
    pub probes: f64,
    /// Its `Size(bytes)`: the index only, not the rules.
    pub size_bytes: usize,
    pub construction_ms: f64,
}

/// The reference's collision limit (its default, `TM.Limit.Collide=10`).
pub const REF_COLLISION_LIMIT: usize = 10;

/// One run of the reference binary on `rules` and `trace`.
fn run_reference(bin: &Path, rules: &Path, trace: &Path) -> Result<RefFigures, String> {
    let out = std::process::Command::new(bin)
        .arg(format!("f={}", rules.display()))
        .arg("c=TMOnline")
        .arg(format!("TM.Limit.Collide={REF_COLLISION_LIMIT}"))
        .arg(format!("p={}", trace.display()))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} exited with {}: {text}",
            bin.display(),
            out.status
        ));
    }
    let field = |name: &str| -> Result<f64, String> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .ok_or_else(|| format!("no `{name}` in the reference's output: {text}"))
    };
    let secs = field("Classification time:")?;
    let probes = field("Average tables queried:")?;
    let queried = field("Total tables queried:")?;
    Ok(RefFigures {
        runs: 1,
        // packets = total queried / average queried.
        trace_ns: secs * 1e9 / (queried / probes).max(1.0),
        tables: field("Tables:")? as usize,
        probes,
        size_bytes: field("Size(bytes):")? as usize,
        construction_ms: field("Construction time:")?,
    })
}

/// `spec`: a file, a directory (every `*.rules`, `*.rules.gz` in it, by
/// name), or a comma-separated list of files.
pub fn classbench_files(spec: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').filter(|s| !s.is_empty()) {
        let p = PathBuf::from(part);
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(&p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    let n = f.to_string_lossy();
                    n.ends_with(".rules") || n.ends_with(".rules.gz")
                })
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(format!("no rule files in {spec:?}"));
    }
    // Every file must read and parse: a bad one is an error here, before
    // any measurement, not a panic halfway through.
    for f in &out {
        let text = read_text(f)?;
        parse_classbench(&text).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    Ok(out)
}

/// A plain-text copy of a rule file for the reference (which cannot read
/// `.gz`): the file itself if it is plain, else a temporary file.
fn plain_rules(file: &Path, text: &str) -> Result<PathBuf, String> {
    if !file.to_string_lossy().ends_with(".gz") {
        return Ok(file.to_path_buf());
    }
    let p = std::env::temp_dir().join(format!(
        "nicflow-cb-{}-{}.rules",
        std::process::id(),
        stem(file)
    ));
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

fn read_text(p: &Path) -> Result<String, String> {
    if p.extension().is_some_and(|e| e == "gz") {
        let out = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(p)
            .output()
            .map_err(|e| format!("gzip -dc {}: {e}", p.display()))?;
        if !out.status.success() {
            return Err(format!("gzip -dc {}: {}", p.display(), out.status));
        }
        String::from_utf8(out.stdout).map_err(|e| format!("{}: {e}", p.display()))
    } else {
        std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
    }
}

/// `acl1_10k.rules.gz` -> `acl1_10k`.
fn stem(p: &Path) -> String {
    let n = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = n.strip_suffix(".gz").unwrap_or(&n);
    n.strip_suffix(".rules").unwrap_or(n).to_string()
}

type Entries = Vec<([u64; FLOW_WORDS], [u64; FLOW_WORDS], u32, u32)>;

type Relax = fn(&[u64; FLOW_WORDS]) -> [u64; FLOW_WORDS];

/// One rule per entry with its port ranges kept.
type NativeEntries = Vec<(
    [u64; FLOW_WORDS],
    [u64; FLOW_WORDS],
    [FieldRange; 2],
    u32,
    u32,
)>;

/// How a mode builds its classifier.
#[derive(Clone, Copy)]
struct CbMode {
    /// `None`: tuple space search.
    merge: Option<(Relax, usize)>,
    /// Port ranges kept ([`native_rule`]) rather than expanded into prefixes.
    native: bool,
}

/// The modes measured, the first one timed alternately with the reference.
/// `NICFLOW_CLASSBENCH_MODES` (comma-separated, in that order) picks among
/// `native` (TupleMerge with the OpenFlow tables' relaxation, port ranges
/// kept: the default first), `merge` (the same with ranges expanded into
/// prefix masks, as OpenFlow matches carry them), `tm` (expanded, with the
/// reference-style relaxation `bench_support::relax_flowkey_tm`) and `tss`
/// (tuple space search, expanded; slow on fw sets). Default `native,merge`.
/// `NICFLOW_CLASSBENCH_LIMITS=10,16` adds native modes with other collision
/// limits.
fn classbench_modes() -> Vec<(String, CbMode)> {
    use nicflow_classifier::bench_support as bs;
    let tables = nicflow_classifier::relax_flowkey as Relax;
    let tm = bs::relax_flowkey_tm as Relax;
    let limit = nicflow_classifier::DEFAULT_COLLISION_LIMIT;
    let spec = std::env::var("NICFLOW_CLASSBENCH_MODES").unwrap_or_else(|_| "native,merge".into());
    let mut modes = Vec::new();
    for m in spec.split(',').map(str::trim) {
        let (label, mode) = match m {
            "native" => (
                "TupleMerge, native ranges",
                CbMode {
                    merge: Some((tables, limit)),
                    native: true,
                },
            ),
            "merge" => (
                "TupleMerge, expanded",
                CbMode {
                    merge: Some((tables, limit)),
                    native: false,
                },
            ),
            "tm" => (
                "TupleMerge, expanded, ref-style relax",
                CbMode {
                    merge: Some((tm, limit)),
                    native: false,
                },
            ),
            "native-tm" => (
                "TupleMerge, native ranges, ref-style relax",
                CbMode {
                    merge: Some((tm, limit)),
                    native: true,
                },
            ),
            "tss" => (
                "TSS, expanded",
                CbMode {
                    merge: None,
                    native: false,
                },
            ),
            _ => continue,
        };
        modes.push((label.to_string(), mode));
    }
    if let Ok(v) = std::env::var("NICFLOW_CLASSBENCH_LIMITS") {
        for l in v.split(',').filter_map(|x| x.trim().parse::<usize>().ok()) {
            if l >= 1 {
                modes.push((
                    format!("TupleMerge, native ranges, collision limit {l}"),
                    CbMode {
                        merge: Some((tables, l)),
                        native: true,
                    },
                ));
            }
        }
    }
    modes
}

#[allow(clippy::too_many_arguments)]
fn measure_mode(
    label: &str,
    mode: CbMode,
    (expanded, native): (&Entries, &NativeEntries),
    keysets: [&[[u64; FLOW_WORDS]]; 4],
    trace_pkts: &[CbPacket],
    check: &[(CbPacket, Option<u32>)],
    reps: usize,
    lookups: usize,
    progress: &mut impl FnMut(&str),
    mut between: Option<&mut dyn FnMut()>,
) -> ModeFigures {
    let new = || -> Classifier<FLOW_WORDS, u32> {
        match mode.merge {
            Some((r, limit)) => Classifier::with_relax(r).with_collision_limit(limit),
            None => Classifier::new(),
        }
    };
    let n_entries = if mode.native {
        native.len()
    } else {
        expanded.len()
    };
    let fill = |c: &mut Classifier<FLOW_WORDS, u32>| -> Vec<nicflow_classifier::RuleId> {
        if mode.native {
            native
                .iter()
                .map(|(k, m, r, p, v)| {
                    c.insert_ranges(k, m, r, *p, *v)
                        .expect("ClassBench ranges are valid")
                        .0
                })
                .collect()
        } else {
            expanded
                .iter()
                .map(|(k, m, p, v)| c.insert(k, m, *p, *v).0)
                .collect()
        }
    };
    let mut f = ModeFigures {
        entries: n_entries,
        ..ModeFigures::default()
    };
    // Inserts and deletes: build from empty, then empty it in a random
    // order (the same order every rep).
    let mut order: Vec<usize> = (0..n_entries).collect();
    let mut rng = Mix(77);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut ins = Vec::new();
    let mut del = Vec::new();
    let mut cls = new();
    for rep in 0..reps.max(1) {
        let mut c = new();
        let t = Instant::now();
        let ids = fill(&mut c);
        ins.push(n_entries as f64 / t.elapsed().as_secs_f64());
        if rep + 1 == reps.max(1) {
            cls = c;
            break;
        }
        let t = Instant::now();
        for &i in &order {
            black_box(c.remove(ids[i]));
        }
        del.push(n_entries as f64 / t.elapsed().as_secs_f64());
        assert!(c.is_empty());
    }
    if del.is_empty() {
        // One rep: measure deletes on a copy.
        let mut c = cls.clone();
        let ids: Vec<_> = c.ids();
        let t = Instant::now();
        for id in ids {
            black_box(c.remove(id));
        }
        del.push(n_entries as f64 / t.elapsed().as_secs_f64());
    }
    f.inserts_per_s = median(&mut ins);
    f.deletes_per_s = median(&mut del);
    f.tables = cls.n_subtables();
    f.memory_bytes = cls.memory_bytes();
    progress(&format!(
        "  {label}: {} tables, {:.1} MB",
        f.tables,
        f.memory_bytes as f64 / 1e6
    ));

    // Correctness: the answer (rule number) equals the first-match scan's.
    for (p, want) in check {
        let got = cls.lookup(&packet_key(p)).map(|(_, v)| *v);
        f.checked += 1;
        if got != *want {
            f.wrong += 1;
        }
    }

    let [hit, random, miss, trace] = keysets;
    let probes = |ks: &[[u64; FLOW_WORDS]]| {
        let n = ks.len().min(20_000);
        let s: usize = ks[..n].iter().map(|k| cls.lookup_probes(k).1).sum();
        s as f64 / n.max(1) as f64
    };
    f.probes_hit = probes(hit);
    f.probes_random = probes(random);
    f.probes_miss = probes(miss);
    let mut wc_bits = 0u64;
    let n_wc = hit.len().min(20_000);
    for k in &hit[..n_wc] {
        let mut wc = [0u64; FLOW_WORDS];
        black_box(cls.lookup_wc(k, &mut wc));
        wc_bits += wc.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
    }
    f.wc_bits_hit = wc_bits as f64 / n_wc.max(1) as f64;
    let (mut h, mut r, mut m, mut t) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        let look = |k: &[u64; FLOW_WORDS]| cls.lookup(black_box(k)).is_some();
        h.push(time_lookups(hit, lookups, look));
        r.push(time_lookups(random, lookups, look));
        m.push(time_lookups(miss, lookups, look));
        if !trace.is_empty() {
            // The reference's run of the same trace, right before ours.
            if let Some(b) = between.as_deref_mut() {
                b();
            }
            // The whole trace once, in order, as the reference times it.
            t.push(time_trace(trace_pkts, look));
        }
    }
    f.hit_ns = median(&mut h);
    f.random_ns = median(&mut r);
    f.miss_ns = median(&mut m);
    if !trace.is_empty() {
        f.trace_ns = Some(median(&mut t));
        f.probes_trace = Some(probes(trace));
    }
    f
}

/// Measures each ClassBench rule file in TSS and TupleMerge mode: ns per
/// lookup (keys inside random rules, uniformly random keys, keys no rule
/// matches, and the reference's trace if `traces` has one), tables probed
/// per lookup, memory, insert and delete rates; every mode's answers are
/// checked against a first-match scan of the unexpanded rules.
pub fn run_classbench(
    files: &[PathBuf],
    traces: Option<&Path>,
    reference: Option<&Path>,
    reps: usize,
    lookups: usize,
    mut progress: impl FnMut(&str),
) -> Vec<ClassbenchRow> {
    let mut rows = Vec::new();
    for file in files {
        let name = stem(file);
        progress(&format!("{name}: reading {}", file.display()));
        let text = read_text(file).unwrap_or_else(|e| panic!("{e}"));
        let rules = parse_classbench(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let n = rules.len() as u32;
        let mut entries: Entries = Vec::new();
        let mut native: NativeEntries = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            for (k, m) in expand_rule(r) {
                entries.push((k, m, n - i as u32, i as u32));
            }
            let (k, m, ranges) = native_rule(r);
            native.push((k, m, ranges, n - i as u32, i as u32));
        }
        let trace_path = traces
            .map(|d| d.join(format!("{name}.trace")))
            .filter(|p| p.exists());
        let trace_pkts: Vec<CbPacket> = trace_path
            .as_ref()
            .map(|p| {
                read_text(p)
                    .and_then(|t| parse_cb_trace(&t))
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .unwrap_or_default();
        let hit_p = packets_hitting(&rules, 4096, 7);
        let rand_p = packets_random(4096, 8);
        let first_match = |p: &CbPacket| rules.iter().position(|r| r.matches(p)).map(|i| i as u32);
        // Checked sample: hit, random and trace packets.
        let mut check: Vec<(CbPacket, Option<u32>)> = Vec::new();
        for p in hit_p
            .iter()
            .take(1000)
            .chain(rand_p.iter().take(1000))
            .chain(trace_pkts.iter().step_by((trace_pkts.len() / 1000).max(1)))
        {
            check.push((*p, first_match(p)));
        }
        let random_hits = rand_p.iter().filter(|p| first_match(p).is_some()).count();
        let hit_k: Vec<_> = hit_p.iter().map(packet_key).collect();
        let rand_k: Vec<_> = rand_p.iter().map(packet_key).collect();
        // IPv6 keys: every rule matches dl_type 0x0800, so each table is
        // probed and misses.
        let miss_k: Vec<_> = rand_k
            .iter()
            .map(|k| {
                let mut fk = nicflow_flow::FlowKey::from_words(k);
                fk.dl_type = 0x86dd;
                *fk.words()
            })
            .collect();
        let trace_k: Vec<_> = trace_pkts.iter().map(packet_key).collect();
        progress(&format!(
            "{name}: {} rules, {} entries, {} trace packets",
            rules.len(),
            entries.len(),
            trace_k.len()
        ));
        let sets = [&hit_k[..], &rand_k[..], &miss_k[..], &trace_k[..]];
        // The reference reads plain text only.
        let mut ref_runs: Vec<RefFigures> = Vec::new();
        let mut reference_error = None;
        let ref_input = match (reference, &trace_path) {
            (Some(bin), Some(tp)) => plain_rules(file, &text).map(|f| (bin, f, tp.clone())),
            _ => Err(String::new()),
        };
        if let (Some(_), Err(e)) = (reference, &ref_input) {
            reference_error = Some(if e.is_empty() {
                format!("no trace {name}.trace")
            } else {
                e.clone()
            });
        }
        let mut run_ref = || {
            if let Ok((bin, rf, tp)) = &ref_input {
                match run_reference(bin, rf, tp) {
                    Ok(r) => ref_runs.push(r),
                    Err(e) => reference_error = Some(e),
                }
            }
        };
        let mut modes: Vec<(String, ModeFigures)> = Vec::new();
        for (i, (label, mode)) in classbench_modes().into_iter().enumerate() {
            let between: Option<&mut dyn FnMut()> = if i == 0 { Some(&mut run_ref) } else { None };
            let f = measure_mode(
                &label,
                mode,
                (&entries, &native),
                sets,
                &trace_pkts,
                &check,
                reps,
                lookups,
                &mut progress,
                between,
            );
            modes.push((label, f));
        }
        if let Ok((_, rf, _)) = &ref_input {
            if rf != file {
                let _ = std::fs::remove_file(rf);
            }
        }
        let reference = (!ref_runs.is_empty()).then(|| {
            let mut ns: Vec<f64> = ref_runs.iter().map(|r| r.trace_ns).collect();
            let mut pr: Vec<f64> = ref_runs.iter().map(|r| r.probes).collect();
            let mut ms: Vec<f64> = ref_runs.iter().map(|r| r.construction_ms).collect();
            RefFigures {
                runs: ref_runs.len(),
                trace_ns: median(&mut ns),
                tables: ref_runs[0].tables,
                probes: median(&mut pr),
                size_bytes: ref_runs[0].size_bytes,
                construction_ms: median(&mut ms),
            }
        });
        let by_label = |want: &str| {
            modes
                .iter()
                .find(|(l, _)| l.starts_with(want))
                .map(|(_, f)| f.clone())
                .unwrap_or_default()
        };
        let tss = by_label("TSS");
        let merge = by_label("TupleMerge");
        rows.push(ClassbenchRow {
            name,
            rules: rules.len(),
            entries: entries.len(),
            trace_packets: trace_k.len(),
            random_hit_pct: 100.0 * random_hits as f64 / rand_p.len() as f64,
            tss,
            merge,
            modes,
            reference,
            reference_error,
        });
    }
    rows
}

/// The Markdown report of [`run_classbench`].
pub fn report_classbench(rows: &[ClassbenchRow], reps: usize) -> String {
    let mut s = String::new();
    s.push_str("# nicflow bench classifier: ClassBench rule sets\n\n");
    s.push_str(&format!("Machine: {}\n\n", super::machine_description()));
    s.push_str(&format!(
        "Medians of {reps} runs. *native ranges*: one entry per rule, port ranges kept \
         (`Classifier::insert_ranges`); *expanded*: port ranges split into prefix masks (one \
         entry per (src prefix, dst prefix) pair), as OpenFlow matches carry them. Every entry \
         has its rule's priority (first rule highest).\n\n"
    ));
    if rows
        .iter()
        .any(|r| r.reference.is_some() || r.reference_error.is_some())
    {
        s.push_str(&format!(
            "## Against the TupleMerge reference, same rules and trace\n\n\
             Reference: `TupleMerge-Online`, collision limit {REF_COLLISION_LIMIT}, run once \
             before each of nicflow's timed passes over the trace (mode: the first below). \
             ns per lookup = the whole trace's time / packets, both. *Ratio* = nicflow / \
             reference (medians). Memory: nicflow's `memory_bytes` (rules included); the \
             reference's `Size(bytes)` (its index only).\n\n"
        ));
        s.push_str("| set | rules | trace packets | nicflow tables | ref tables | nicflow probed | ref probed | nicflow ns | ref ns | ratio | nicflow MB | ref MB (index) | ref runs |\n");
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for r in rows {
            let (Some(f), Some(rf)) = (r.modes.first().map(|m| &m.1), &r.reference) else {
                if let Some(e) = &r.reference_error {
                    s.push_str(&format!(
                        "| {} | reference not measured: {} |\n",
                        r.name,
                        e.replace('\n', " ")
                    ));
                }
                continue;
            };
            let ns = f.trace_ns.unwrap_or(f64::NAN);
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.2}x | {:.1} | {:.2} | {} |\n",
                r.name,
                r.rules,
                r.trace_packets,
                f.tables,
                rf.tables,
                f.probes_trace.unwrap_or(f64::NAN),
                rf.probes,
                ns,
                rf.trace_ns,
                ns / rf.trace_ns,
                f.memory_bytes as f64 / 1e6,
                rf.size_bytes as f64 / 1e6,
                rf.runs,
            ));
        }
        s.push('\n');
    }
    s.push_str(
        "## Every mode\n\nKeys: *hit* = inside a random rule (4,096 keys), *random* = uniform \
         headers, *miss* = IPv6 (no rule matches; every table probed), *trace* = the trace, \
         whole, in order. ns per lookup (tables probed per lookup).\n\n",
    );
    s.push_str("| set | rules | entries | mode | tables | hit | random | miss | trace | insert/s | delete/s | memory MB | wc bits | checked (wrong) |\n");
    s.push_str("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        for (mode, f) in &r.modes {
            let trace = match (f.trace_ns, f.probes_trace) {
                (Some(t), Some(p)) => format!("{t:.0} ({p:.1})"),
                _ => "-".into(),
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.0} ({:.1}) | {:.0} ({:.1}) | {:.0} ({:.1}) | {} | {:.2}M | {:.2}M | {:.1} | {:.1} | {} ({}) |\n",
                r.name,
                r.rules,
                f.entries,
                mode,
                f.tables,
                f.hit_ns,
                f.probes_hit,
                f.random_ns,
                f.probes_random,
                f.miss_ns,
                f.probes_miss,
                trace,
                f.inserts_per_s / 1e6,
                f.deletes_per_s / 1e6,
                f.memory_bytes as f64 / 1e6,
                f.wc_bits_hit,
                f.checked,
                f.wrong,
            ));
        }
    }
    s.push_str("\nRandom keys matching some rule: ");
    let v: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {:.0}%", r.name, r.random_hit_pct))
        .collect();
    s.push_str(&v.join(", "));
    s.push_str(
        ".\n\n*wc bits*: mean bits in the megaflow mask `lookup_wc` returns for the hit keys.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_split() {
        assert_eq!(range_to_prefixes(0, 65535), vec![(0, 0)]);
        assert_eq!(range_to_prefixes(80, 80), vec![(80, 0xffff)]);
        assert_eq!(range_to_prefixes(1024, 65535).len(), 6);
        assert_eq!(range_to_prefixes(1, 65534).len(), 30);
        for (lo, hi) in [(0u16, 0u16), (3, 1000), (1, 65535), (0, 1023), (7, 9)] {
            let pre = range_to_prefixes(lo, hi);
            for x in (0..=65535u32).step_by(7).chain([lo as u32, hi as u32]) {
                let x = x as u16;
                let n = pre.iter().filter(|(v, m)| x & m == *v).count();
                assert_eq!(n, usize::from((lo..=hi).contains(&x)), "{lo}-{hi} {x}");
            }
        }
    }

    #[test]
    fn classbench_small() {
        let text =
            "@10.0.0.0/8\t192.168.1.0/24\t0 : 65535\t1024 : 65535\t0x06/0xFF\t0x0000/0x0000\t\n\
                    @0.0.0.0/0\t0.0.0.0/0\t53 : 53\t0 : 65535\t0x00/0x00\t\n";
        let rules = parse_classbench(text).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].src, (0x0a00_0000, 0xff00_0000));
        assert_eq!(rules[0].proto, (6, 0xff));
        assert_eq!(rules[1].sport, (53, 53));
        let dir = std::env::temp_dir().join(format!("nicflow-cb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("tiny.rules");
        std::fs::write(&f, text).unwrap();
        let rows = run_classbench(&[f], None, None, 1, 1000, |_| {});
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(rows[0].entries, 6 + 1);
        for (_, m) in &rows[0].modes {
            assert!(m.checked > 0);
            assert_eq!(m.wrong, 0);
        }
    }
}
