//! Datapath throughput per cache tier: one `Bridge::run_once` poll round
//! (one 32-frame receive batch, classified, executed and transmitted) with
//! 1,000 five-tuple rules and 1,000 distinct flows, when packets hit
//! (a) the exact-match cache, (b) the megaflow cache (EMC disabled), or
//! (c) nothing (caches disabled: every packet is an upcall through
//! `ofproto::xlate`). Throughput is reported in packets.
//!
//! `cargo bench -p nicflow --bench datapath`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nicflow::bridge::{Bridge, BATCH_SIZE};
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::MemPort;
use nicflow_bench::workload::{gen_5tuple_rules, gen_frames};
use std::hint::black_box;
use std::time::{Duration, Instant};

const RULES: usize = 1_000;
const FLOWS: usize = 1_000;
const FRAME_LEN: usize = 64;

/// A bridge whose p1 replays `FLOWS` frames forever and whose p2 counts
/// what it is sent; every rule outputs to p2.
fn bridge(cfg: DatapathConfig) -> Bridge {
    let rules = gen_5tuple_rules(RULES, 1, 2);
    let frames = gen_frames(&rules, FLOWS, FRAME_LEN, 2);
    let mut br = Bridge::new("bench", cfg);
    let (p1, _) = MemPort::replay("p1", frames);
    let (p2, _) = MemPort::replay("p2", Vec::new());
    br.add_port(Box::new(p1)).expect("p1");
    br.add_port(Box::new(p2)).expect("p2");
    br.add_flows(&rules, Instant::now()).expect("rules");
    br
}

fn datapath(c: &mut Criterion) {
    let configs = [
        ("emc_hit", DatapathConfig::default()),
        (
            "megaflow_hit",
            DatapathConfig {
                emc_entries: 0,
                ..Default::default()
            },
        ),
        (
            "upcall",
            DatapathConfig {
                caches_enabled: false,
                ..Default::default()
            },
        ),
    ];
    let mut g = c.benchmark_group("datapath_run_once_1000_rules_1000_flows");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20)
        .throughput(Throughput::Elements(BATCH_SIZE as u64));
    for (name, cfg) in configs {
        let mut br = bridge(cfg);
        let now = Instant::now();
        // Warm up: every flow has been seen (and cached, where caching is
        // on) before measuring.
        for _ in 0..4 * FLOWS.div_ceil(BATCH_SIZE) {
            br.run_once(now);
        }
        let before = br.dp_stats().clone();
        g.bench_function(name, |b| {
            b.iter(|| black_box(br.run_once(now)));
        });
        // Say which tier actually served the measured packets, so a
        // regression that silently changes the tier is visible.
        let s = br.dp_stats();
        let n = (s.packets - before.packets).max(1) as f64;
        let sent: u64 = br
            .port_stats()
            .iter()
            .filter(|p| p.0 == "p2")
            .map(|p| p.2.tx_packets)
            .sum();
        eprintln!(
            "{name}: {:.1}% emc, {:.1}% megaflow, {:.1}% upcall over {} packets; {} dp flows; {} sent to p2 in total",
            100.0 * (s.emc_hits - before.emc_hits) as f64 / n,
            100.0 * (s.megaflow_hits - before.megaflow_hits) as f64 / n,
            100.0 * (s.upcalls - before.upcalls) as f64 / n,
            n,
            br.n_dp_flows(),
            sent,
        );
        assert_eq!(sent, s.packets, "{name}: every packet must reach p2");
    }
    g.finish();
}

criterion_group!(benches, datapath);
criterion_main!(benches);
