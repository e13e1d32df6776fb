// Microbenchmark: copy + sum_words against copy_sum_words (and a tried 32-byte-block variant, v2.rs, not kept).
// fns.rs is sum_words .. finish_lanes as of commit d7be43e, extracted, not kept here:
// git show d7be43e:crates/packet/src/checksum.rs | sed -n '/^pub fn sum_words/,/^\/\/\/ Folds a running sum/p' | grep -v '^/// Folds' > fns.rs
// rustc --edition 2021 -O mb.rs -o mb && flock -x /work/wt/quiet.lock ./mb
use std::time::Instant;
include!("fns.rs");
include!("v2.rs");
fn main() {
    // 64 segments hot (92 KB, L2) and a 16 MiB cold-ish sweep.
    for &(name_set, total) in &[("hot 92K", 1448usize * 64), ("cold 16M", 1448 * 11586)] {
        let src: Vec<u8> = (0..total).map(|i| (i * 131 + 7) as u8).collect();
        let mut dst = vec![0u8; total + 64];
        let iters = (20000 * 64 * 1448 / total).max(20);
        for round in 0..3 {
            for mode in ["copy+sum", "copy_sum", "copy_sum2", "copy only"] {
                let t = Instant::now();
                let mut x = 0u32;
                for _ in 0..iters {
                    for (k, s) in src.chunks(1448).enumerate() {
                        let d = &mut dst[k * 1448 + 1..k * 1448 + 1 + s.len()];
                        let s = std::hint::black_box(s);
                        match mode {
                            "copy+sum" => { d.copy_from_slice(s); x = x.wrapping_add(sum_words(s, 7)); }
                            "copy_sum" => { x = x.wrapping_add(copy_sum_words(d, s, 7)); }
                            "copy_sum2" => { x = x.wrapping_add(copy_sum_words2(d, s, 7)); }
                            _ => { d.copy_from_slice(s); }
                        }
                    }
                    std::hint::black_box(&mut dst);
                }
                let segs = (iters * (total / 1448)) as f64;
                let ns = t.elapsed().as_nanos() as f64 / segs;
                println!("{name_set} {round} {mode}: {ns:.1} ns/seg ({:.1} GB/s) {x}", 1448.0 / ns);
            }
        }
    }
}
