//! The interpreter alone in a loop, as `nicflow-bench p4 --interp-only`
//! runs it (routing.p4, 60-byte UDP frames), without building the bench
//! crate: a quick way to profile a change to the interpreter
//! (`cargo run --release -p nicflow-p4 --example interp_loop -- CORPUS
//! [ROUTES] [SECONDS]`; ROUTES 0 = routing.stf's entries). The figures
//! for the docs come from the bench.

use nicflow_p4::stf::{apply_to, parse, Command, Replication};
use nicflow_p4::Pipeline;
use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The system allocator, counting allocations (`alloc` and `realloc`
/// calls): the loop prints allocations per packet, the figure the
/// per-packet storage work is judged by. One relaxed add per call.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn frame(src: u32, dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&46u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.to_be_bytes());
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    let mut s = 0u32;
    for c in ip.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    ip[10..12].copy_from_slice(&(!(s as u16)).to_be_bytes());
    f
}

fn apply(pl: &mut Pipeline, text: &str) {
    let t = parse("entries", text).expect("STF");
    let mut pre = Replication::default();
    for (_, c) in &t.commands {
        if matches!(c, Command::Add(_) | Command::SetDefault { .. }) {
            apply_to(pl, &mut pre, c).expect("entry");
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let corpus = PathBuf::from(
        a.get(1)
            .map(String::as_str)
            .unwrap_or("/work/shared/p4-corpus"),
    );
    let routes: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
    let secs: f64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let mut pl = Pipeline::load(
        &corpus.join("pna/routing.p4"),
        &[corpus.join("include")],
        None,
    )
    .expect("routing.p4");
    let frames: Vec<Vec<u8>> = if routes == 0 {
        apply(
            &mut pl,
            &std::fs::read_to_string(corpus.join("pna/routing.stf")).expect("routing.stf"),
        );
        (0..64u32)
            .map(|i| frame(0x0b00_0001, 0x0a63_0000 + i))
            .collect()
    } else {
        let base = |i: usize| 0xc612_0000u32 + (i as u32) * 16;
        let mut s = String::new();
        for nh in 1..=4 {
            let _ = writeln!(
                s,
                "add Main.nh_table nh_index:{nh} Main.set_nh(dmac:0x0200000001{nh:02x}, port:2)"
            );
        }
        for i in 0..routes {
            let _ = writeln!(
                s,
                "add Main.fib_table prefix:0x{:08x}/28 Main.set_nhid(index:{})",
                base(i),
                i % 4 + 1
            );
        }
        apply(&mut pl, &s);
        (0..1024usize)
            .map(|i| frame(0xc613_f001, base(i * 7919 % routes) + 1))
            .collect()
    };
    // One pass over the frames to warm the pipeline's pools up, then the
    // allocations of a second pass.
    for f in &frames {
        black_box(pl.process(0, black_box(f), 0));
    }
    let a0 = ALLOCS.load(Ordering::Relaxed);
    for f in &frames {
        black_box(pl.process(0, black_box(f), 0));
    }
    let per_pkt = (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / frames.len() as f64;
    let t = Instant::now();
    let (mut n, mut fwd) = (0u64, 0u64);
    while t.elapsed() < Duration::from_secs_f64(secs) {
        for f in &frames {
            let o = pl.process(0, black_box(f), n * 1000);
            fwd += u64::from(!o.outputs.is_empty());
            black_box(&o);
            n += 1;
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "routes {routes}: {:.0} pps ({fwd} of {n} forwarded), {per_pkt:.2} allocations per packet",
        n as f64 / s
    );
}
