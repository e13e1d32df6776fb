//! Lookup cost of the classifier on IPv4 5-tuple ACLs over 256-byte keys:
//! tuple space search (group `classifier`), TupleMerge with the FlowKey
//! relaxation and the default collision limit (group `tuplemerge`), and the
//! linear reference (group `linear`).
//!
//! Each iteration is one lookup (keys are cycled from a pre-generated set),
//! so criterion's time per iteration is ns per lookup.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use nicflow_classifier::bench_support::{
    build_classifier, build_classifier_merge, build_linear, gen_5tuple_rules, gen_keys_hitting,
    gen_keys_missing, BenchRule, WORDS,
};
use nicflow_classifier::{Classifier, DEFAULT_COLLISION_LIMIT};

const SIZES: [usize; 4] = [10, 1_000, 20_000, 100_000];
const LINEAR_SIZES: [usize; 2] = [10, 1_000];
/// Power of two; 1024 keys * 160 bytes stays in L2, so the benchmark
/// measures the classifier rather than key fetches.
const N_KEYS: usize = 1024;

fn cycle<'a>(keys: &'a [[u64; WORDS]]) -> impl FnMut() -> &'a [u64; WORDS] {
    let mut i = 0;
    move || {
        i = (i + 1) & (N_KEYS - 1);
        &keys[i]
    }
}

fn rules(n: usize) -> Vec<BenchRule> {
    gen_5tuple_rules(n, 0x006e_6963_666c_6f77)
}

fn bench_tss(c: &mut Criterion) {
    let mut g = c.benchmark_group("classifier");
    for n in SIZES {
        let rules = rules(n);
        let cls = build_classifier(&rules);
        let hits = gen_keys_hitting(&rules, N_KEYS, 1);
        let misses = gen_keys_missing(N_KEYS, 2);
        assert!(hits.iter().all(|k| cls.lookup(k).is_some()));
        assert!(misses.iter().all(|k| cls.lookup(k).is_none()));
        eprintln!("classifier n={n}: {} subtables", cls.n_subtables());

        let mut next = cycle(&hits);
        g.bench_with_input(BenchmarkId::new("hit", n), &n, |b, _| {
            b.iter(|| black_box(cls.lookup(black_box(next()))))
        });
        let mut next = cycle(&misses);
        g.bench_with_input(BenchmarkId::new("miss", n), &n, |b, _| {
            b.iter(|| black_box(cls.lookup(black_box(next()))))
        });
        let mut next = cycle(&hits);
        g.bench_with_input(BenchmarkId::new("hit_wc", n), &n, |b, _| {
            b.iter(|| {
                let mut wc = [0u64; WORDS];
                black_box(cls.lookup_wc(black_box(next()), &mut wc).map(|r| r.0));
                black_box(wc)
            })
        });

        // Megaflow-cache shape: same rules, one priority, first hit wins.
        let mut mega: Classifier<WORDS, usize> = Classifier::new();
        for (i, (k, m, _)) in rules.iter().enumerate() {
            mega.insert(k, m, 0, i);
        }
        let mut next = cycle(&hits);
        g.bench_with_input(BenchmarkId::new("megaflow_hit", n), &n, |b, _| {
            b.iter(|| black_box(mega.lookup(black_box(next()))))
        });
    }
    g.finish();
}

fn bench_tuplemerge(c: &mut Criterion) {
    let mut g = c.benchmark_group("tuplemerge");
    for n in SIZES {
        let rules = rules(n);
        let cls = build_classifier_merge(&rules, DEFAULT_COLLISION_LIMIT);
        let hits = gen_keys_hitting(&rules, N_KEYS, 1);
        let misses = gen_keys_missing(N_KEYS, 2);
        assert!(hits.iter().all(|k| cls.lookup(k).is_some()));
        assert!(misses.iter().all(|k| cls.lookup(k).is_none()));
        eprintln!("tuplemerge n={n}: {} tables", cls.n_subtables());

        let mut next = cycle(&hits);
        g.bench_with_input(BenchmarkId::new("hit", n), &n, |b, _| {
            b.iter(|| black_box(cls.lookup(black_box(next()))))
        });
        let mut next = cycle(&misses);
        g.bench_with_input(BenchmarkId::new("miss", n), &n, |b, _| {
            b.iter(|| black_box(cls.lookup(black_box(next()))))
        });
        let mut next = cycle(&hits);
        g.bench_with_input(BenchmarkId::new("hit_wc", n), &n, |b, _| {
            b.iter(|| {
                let mut wc = [0u64; WORDS];
                black_box(cls.lookup_wc(black_box(next()), &mut wc).map(|r| r.0));
                black_box(wc)
            })
        });
    }
    g.finish();
}

fn bench_linear(c: &mut Criterion) {
    let mut g = c.benchmark_group("linear");
    for n in LINEAR_SIZES {
        let rules = rules(n);
        let lin = build_linear(&rules);
        let hits = gen_keys_hitting(&rules, N_KEYS, 1);
        let misses = gen_keys_missing(N_KEYS, 2);
        let mut next = cycle(&hits);
        g.bench_with_input(BenchmarkId::new("hit", n), &n, |b, _| {
            b.iter(|| black_box(lin.lookup(black_box(next()))))
        });
        let mut next = cycle(&misses);
        g.bench_with_input(BenchmarkId::new("miss", n), &n, |b, _| {
            b.iter(|| black_box(lin.lookup(black_box(next()))))
        });
    }
    g.finish();
}

fn config() -> Criterion {
    // The build machine is shared: keep the whole run around two minutes.
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_tss, bench_tuplemerge, bench_linear
}
criterion_main!(benches);
