//! Heap bytes per connection, measured with a counting global allocator.
//! Run with `cargo test -p nicflow-conntrack --test memory -- --nocapture`
//! to see the figure quoted in the crate docs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use nicflow_conntrack::{Config, Conntrack, CtRequest};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only adding bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn udp(sport: u16, dst_last: u8) -> Vec<u8> {
    let mut v = vec![0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0];
    v.extend_from_slice(&[198, 18, 0, 1, 198, 18, 1, dst_last]);
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
    v
}

#[test]
fn bytes_per_connection() {
    const N: usize = 100_000;
    // Build the packets first so their memory is not counted.
    let pkts: Vec<Vec<u8>> = (0..N)
        .map(|i| udp(1 + (i % 60_000) as u16, (i / 60_000) as u8))
        .collect();
    let now = Instant::now();
    let req = CtRequest {
        commit: true,
        ..CtRequest::default()
    };
    let before = LIVE.load(Ordering::Relaxed);
    let mut ct = Conntrack::new(Config::default());
    for p in &pkts {
        ct.process(0x0800, p, &req, now);
    }
    assert_eq!(ct.len(), N);
    let grown = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "conntrack: {N} connections use {grown} heap bytes = {} bytes/connection",
        grown as usize / N
    );

    // The established path allocates nothing.
    let before = LIVE.load(Ordering::Relaxed);
    for p in &pkts {
        ct.process(0x0800, p, &CtRequest::default(), now);
    }
    assert_eq!(LIVE.load(Ordering::Relaxed), before);
    drop(ct);
}
