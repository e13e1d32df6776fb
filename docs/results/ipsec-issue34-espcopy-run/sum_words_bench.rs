// Microbenchmark of sum_words before (old) and after (new.rs: sum_words as of 7f30993, extracted, not kept here):
// git show 7f30993:crates/packet/src/checksum.rs | sed -n '39,75p' | sed 's/pub fn sum_words/fn new/' > new.rs
// rustc -O sum_words_bench.rs -o /tmp/swb && flock -x /work/wt/quiet.lock /tmp/swb
use std::time::Instant;
fn old(data: &[u8], initial: u32) -> u32 {
    let mut acc: u64 = u64::from(initial);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks { acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]])); }
    let rest = chunks.remainder(); let mut i = 0;
    while i + 1 < rest.len() { acc += u64::from(u16::from_be_bytes([rest[i], rest[i + 1]])); i += 2; }
    if i < rest.len() { acc += u64::from(rest[i]) << 8; }
    while acc > u64::from(u32::MAX) { acc = (acc & 0xffff_ffff) + (acc >> 32); }
    acc as u32
}
include!("new.rs");
fn main() {
    let buf: Vec<u8> = (0..1448*64).map(|i| (i * 131 + 7) as u8).collect();
    for round in 0..3 {
    for (name, f) in [("old", old as fn(&[u8], u32) -> u32), ("new", new)] {
        let t = Instant::now(); let mut x = 0u32;
        for _ in 0..20000 { for s in buf.chunks(1448) { x = x.wrapping_add(f(std::hint::black_box(s), 7)); } }
        let ns = t.elapsed().as_nanos() as f64 / (20000.0 * 64.0);
        println!("{round} {name}: {ns:.1} ns per 1448 bytes ({:.1} GB/s) {x}", 1448.0 / ns);
    }}
}
