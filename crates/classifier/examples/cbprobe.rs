//! Development aid: builds a TupleMerge classifier from a ClassBench rule
//! file (port ranges expanded into prefixes, as `nicflow bench classifier`
//! does) and reports tables, tables probed and ns per lookup on a trace in
//! the TupleMerge reference's format, checking every answer against a
//! first-match scan.
//!
//! `cargo run --release -p nicflow-classifier --example cbprobe -- RULES TRACE [LIMIT]`
//! (plain-text files; `CBPROBE_TABLES=1` lists the tables,
//! `CBPROBE_NATIVE=1` keeps port ranges (`Classifier::insert_ranges`),
//! `CBPROBE_TM_RELAX=1` uses `bench_support::relax_flowkey_tm`,
//! `CBPROBE_REPS=N` times the trace N times instead of 3, so that the
//! difference between two runs under `perf stat` or cachegrind that differ
//! only in N gives the timed loop's counts per lookup). The real
//! measurement is `nicflow bench classifier`; this one builds in seconds.

use std::time::Instant;

use nicflow_classifier::bench_support::*;
use nicflow_classifier::{Classifier, FieldRange};

#[derive(Clone, Copy)]
struct R {
    src: (u32, u32),
    dst: (u32, u32),
    sp: (u16, u16),
    dp: (u16, u16),
    proto: (u8, u8),
}

fn pfx(s: &str) -> (u32, u32) {
    let (a, l) = s.split_once('/').unwrap();
    let a: std::net::Ipv4Addr = a.parse().unwrap();
    let l: u32 = l.parse().unwrap();
    let m = if l == 0 { 0 } else { u32::MAX << (32 - l) };
    (u32::from(a) & m, m)
}

fn hex(s: &str) -> u8 {
    u8::from_str_radix(s.trim_start_matches("0x").trim_start_matches("0X"), 16).unwrap()
}

fn ranges(lo: u16, hi: u16) -> Vec<(u16, u16)> {
    let (mut lo, hi) = (u32::from(lo), u32::from(hi));
    let mut out = Vec::new();
    while lo <= hi {
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

fn key(src: u32, dst: u32, sp: u16, dp: u16, proto: u8) -> [u64; WORDS] {
    let mut k = [0u64; WORDS];
    k[DL_TYPE_WORD] = 0x0800 << DL_TYPE_SHIFT;
    k[NW_ADDR_WORD] = u64::from(src) | (u64::from(dst) << 32);
    k[TP_SRC_WORD] = u64::from(sp) << TP_SRC_SHIFT;
    k[TP_DST_WORD] = u64::from(dp) << TP_DST_SHIFT;
    k[NW_PROTO_WORD] = u64::from(proto);
    k
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[1]).unwrap();
    let rules: Vec<R> = text
        .lines()
        .filter(|l| l.starts_with('@'))
        .map(|l| {
            let t: Vec<&str> = l[1..].split_whitespace().collect();
            let (pv, pm) = t[8].split_once('/').unwrap();
            let m = hex(pm);
            R {
                src: pfx(t[0]),
                dst: pfx(t[1]),
                sp: (t[2].parse().unwrap(), t[4].parse().unwrap()),
                dp: (t[5].parse().unwrap(), t[7].parse().unwrap()),
                proto: (hex(pv) & m, m),
            }
        })
        .collect();
    let trace: Vec<(u32, u32, u16, u16, u8)> = std::fs::read_to_string(&args[2])
        .unwrap()
        .lines()
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .take(5)
                .map(|x| x.parse().unwrap())
                .collect();
            (
                v[0] as u32,
                v[1] as u32,
                v[2] as u16,
                v[3] as u16,
                v[4] as u8,
            )
        })
        .collect();
    let limit: usize = args
        .get(3)
        .map_or(nicflow_classifier::DEFAULT_COLLISION_LIMIT, |s| {
            s.parse().unwrap()
        });
    let n = rules.len() as u32;
    let mut c: Classifier<WORDS, u32> =
        Classifier::with_relax(if std::env::var_os("CBPROBE_TM_RELAX").is_some() {
            relax_flowkey_tm
        } else {
            nicflow_classifier::relax_flowkey
        })
        .with_collision_limit(limit);
    let t = Instant::now();
    let mut entries = 0;
    let native = std::env::var_os("CBPROBE_NATIVE").is_some();
    for (i, r) in rules.iter().enumerate() {
        if native {
            let k = key(r.src.0, r.dst.0, 0, 0, r.proto.0);
            let mut m = key(r.src.1, r.dst.1, 0, 0, r.proto.1);
            m[DL_TYPE_WORD] = 0xffff << DL_TYPE_SHIFT;
            let fr = |word: usize, shift: u32, (lo, hi): (u16, u16)| FieldRange {
                word: word as u8,
                shift: shift as u8,
                lo,
                hi,
            };
            c.insert_ranges(
                &k,
                &m,
                &[
                    fr(TP_SRC_WORD, TP_SRC_SHIFT, r.sp),
                    fr(TP_DST_WORD, TP_DST_SHIFT, r.dp),
                ],
                n - i as u32,
                i as u32,
            )
            .unwrap();
            entries += 1;
            continue;
        }
        for (sp, spm) in ranges(r.sp.0, r.sp.1) {
            for (dp, dpm) in ranges(r.dp.0, r.dp.1) {
                let k = key(r.src.0, r.dst.0, sp, dp, r.proto.0);
                let mut m = key(r.src.1, r.dst.1, spm, dpm, r.proto.1);
                m[DL_TYPE_WORD] = 0xffff << DL_TYPE_SHIFT;
                c.insert(&k, &m, n - i as u32, i as u32);
                entries += 1;
            }
        }
    }
    let build = t.elapsed();
    let keys: Vec<_> = trace.iter().map(|p| key(p.0, p.1, p.2, p.3, p.4)).collect();
    let mut wrong = 0;
    for (p, k) in trace.iter().zip(&keys).step_by(97) {
        let want = rules.iter().position(|r| {
            (p.0 ^ r.src.0) & r.src.1 == 0
                && (p.1 ^ r.dst.0) & r.dst.1 == 0
                && (r.sp.0..=r.sp.1).contains(&p.2)
                && (r.dp.0..=r.dp.1).contains(&p.3)
                && (p.4 ^ r.proto.0) & r.proto.1 == 0
        });
        let got = c.lookup(k).map(|x| *x.1 as usize);
        if got != want {
            wrong += 1;
        }
        let mut wc = [0u64; WORDS];
        let a = c.lookup_wc(k, &mut wc).map(|x| x.0);
        let k2: [u64; WORDS] = std::array::from_fn(|i| k[i] ^ !wc[i]);
        if c.lookup(&k2).map(|x| x.0) != a {
            wrong += 1;
        }
    }
    let (probes, compared) = keys
        .iter()
        .map(|k| c.lookup_cost(k))
        .fold((0, 0), |(a, b), (p, r)| (a + p, b + r));
    let mut wcbits = 0u64;
    for k in keys.iter().step_by(10) {
        let mut wc = [0u64; WORDS];
        c.lookup_wc(k, &mut wc);
        wcbits += wc.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
    }
    let reps: usize = std::env::var("CBPROBE_REPS")
        .ok()
        .map_or(3, |s| match s.parse() {
            Ok(n) if n > 0 => n,
            _ => panic!("CBPROBE_REPS: a number above 0, not {s:?}"),
        });
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        let mut h = 0u64;
        // One key buffer, each packet's fields written into it, as
        // `nicflow-bench classifier` times a trace (a stored 312-byte key
        // per packet would stream the whole trace's keys through the caches).
        let mut k = key(0, 0, 0, 0, 0);
        for &(src, dst, sp, dp, proto) in &trace {
            k[NW_ADDR_WORD] = u64::from(src) | (u64::from(dst) << 32);
            k[TP_SRC_WORD] = u64::from(sp) << TP_SRC_SHIFT;
            k[TP_DST_WORD] = u64::from(dp) << TP_DST_SHIFT;
            k[NW_PROTO_WORD] = u64::from(proto);
            h += u64::from(c.lookup(std::hint::black_box(&k)).is_some());
        }
        std::hint::black_box(h);
        best = best.min(t.elapsed().as_nanos() as f64 / keys.len() as f64);
    }
    println!(
        "{} rules {} entries: tables {} probed {:.2} compared {:.2} ns {:.0} (best of {}) wcbits {:.1} build {:.0} ms wrong {}",
        rules.len(),
        entries,
        c.n_subtables(),
        probes as f64 / keys.len() as f64,
        compared as f64 / keys.len() as f64,
        best,
        reps,
        wcbits as f64 / keys.len().div_ceil(10) as f64,
        build.as_secs_f64() * 1e3,
        wrong
    );
    if std::env::var_os("CBPROBE_TABLES").is_some() {
        for (m, p, n) in c.subtables() {
            let a = m[NW_ADDR_WORD];
            println!(
                "  src/{} dst/{} sp {:04x} dp {:04x} proto {:02x}: max {} rules {}",
                (a as u32).count_ones(),
                ((a >> 32) as u32).count_ones(),
                (m[TP_SRC_WORD] >> TP_SRC_SHIFT) as u16,
                (m[TP_DST_WORD] >> TP_DST_SHIFT) as u16,
                m[NW_PROTO_WORD] as u8,
                p,
                n
            );
        }
    }
}
