//! The evaluator's per-packet fast paths (literals converted without big
//! integers, buffers and header/metadata storage reused from packet to
//! packet) against its reference paths (`Pipeline::process_reference`,
//! the evaluator as it was before them): for every STF test of the corpus,
//! its packets and random packets derived from them give the same output
//! frames, ports, drops and the same trace (the megaflow cache is built
//! from the trace, so it must not differ by a bit). Random: prints its
//! seed; `P4_DIFF_SEED=N` replays it.

mod interp_support;
use interp_support::{corpus, load, run_stf_on};
use nicflow_p4::{Outcome, Pipeline};

/// Derived packets per STF packet.
const DERIVED: usize = 12;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// Every (program, STF) pair of the corpus: an STF file runs the
/// program of its own name, or else of the longest name it starts with
/// (`routing_default.stf` runs `routing.p4`).
fn pairs() -> Vec<(String, String)> {
    let Some(c) = corpus() else { return vec![] };
    let mut out = Vec::new();
    for dir in ["pna", "psa", "v1model"] {
        let mut names: Vec<String> = std::fs::read_dir(c.join(dir))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        let p4s: Vec<&str> = names.iter().filter_map(|n| n.strip_suffix(".p4")).collect();
        for stf in names.iter().filter_map(|n| n.strip_suffix(".stf")) {
            let prog = p4s
                .iter()
                .filter(|p| stf.starts_with(**p))
                .max_by_key(|p| p.len());
            if let Some(prog) = prog {
                out.push((format!("{dir}/{prog}.p4"), format!("{dir}/{stf}.stf")));
            }
        }
    }
    out
}

fn derive(rng: &mut Rng, pkt: &[u8]) -> Vec<u8> {
    let mut p = pkt.to_vec();
    match rng.below(4) {
        // A few bytes changed anywhere (headers most of the time: they
        // are at the front).
        0 | 1 => {
            for _ in 0..=rng.below(3) {
                if p.is_empty() {
                    break;
                }
                let at = if rng.below(4) == 0 {
                    rng.below(p.len() as u64)
                } else {
                    rng.below(p.len().min(64) as u64)
                } as usize;
                p[at] ^= 1 << rng.below(8);
            }
        }
        // One byte set to a random value.
        2 => {
            if !p.is_empty() {
                let at = rng.below(p.len().min(64) as u64) as usize;
                p[at] = rng.next() as u8;
            }
        }
        // Truncated.
        _ => p.truncate(rng.below(p.len() as u64 + 1) as usize),
    }
    p
}

fn same(prog: &str, what: &str, fast: &Outcome, reference: &Outcome) {
    assert_eq!(
        fast, reference,
        "{prog}: {what}: the fast paths differ from the reference evaluator"
    );
}

#[test]
fn fast_paths_equal_the_reference_evaluator() {
    let seed = std::env::var("P4_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("P4_DIFF_SEED={seed}");
    let pairs = pairs();
    if pairs.is_empty() {
        return;
    }
    let mut packets = 0usize;
    for (prog, stf) in &pairs {
        let (Some(mut fast), Some(mut reference)) = (load(prog), load(prog)) else {
            return;
        };
        let text = interp_support::stf_text(stf).unwrap();
        let mut rng = Rng(seed ^ (prog.len() as u64 * 0x9e37_79b9));
        let mut run = |ps: &mut [&mut Pipeline], port: u32, bytes: &[u8], now: u64| {
            let a = ps[0].process(port, bytes, now);
            let b = ps[1].process_reference(port, bytes, now);
            same(prog, &format!("STF packet on port {port}"), &a, &b);
            packets += 1;
            for i in 0..DERIVED {
                let d = derive(&mut rng, bytes);
                let port = if rng.below(4) == 0 {
                    rng.below(8) as u32
                } else {
                    port
                };
                let now = now + i as u64;
                let x = ps[0].process(port, &d, now);
                let y = ps[1].process_reference(port, &d, now);
                same(
                    prog,
                    &format!("derived packet {:02x?} on port {port}", d),
                    &x,
                    &y,
                );
                packets += 1;
            }
            a
        };
        // The STF's expectations may fail here (derived packets change
        // registers and learnt entries): interp_stf checks them; this
        // test checks that both evaluators agree.
        let _ = run_stf_on(&mut [&mut fast, &mut reference], &text, &mut run);
        assert_eq!(fast.error_count(), reference.error_count(), "{prog}");
    }
    eprintln!(
        "{} programs/STF files, {packets} packets compared",
        pairs.len()
    );
    assert!(packets > 0);
}
