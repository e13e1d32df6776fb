//! Heap bytes per connection, measured with a counting global allocator.
//! Run with `cargo test -p nicflow-conntrack --test memory -- --nocapture`
//! to see the figure quoted in the crate docs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use std::net::{IpAddr, Ipv4Addr};

use nicflow_conntrack::{Config, Conntrack, CtRequest, NatAction, NatKind};

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

/// The tests share the global counter: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn udp(sport: u16, dst_last: u8) -> Vec<u8> {
    let mut v = vec![0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0];
    v.extend_from_slice(&[198, 18, 0, 1, 198, 18, 1, dst_last]);
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
    v
}

#[test]
fn bytes_per_connection() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // CT_MEMORY_CONNECTIONS=1000000 measures the 1M point.
    let n_env = std::env::var("CT_MEMORY_CONNECTIONS").ok();
    let n: usize = n_env.and_then(|v| v.parse().ok()).unwrap_or(100_000);
    assert!(n <= 60_000 * 255, "at most 15.3M distinct test tuples");
    #[allow(non_snake_case)]
    let N = n;
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
    let t = std::time::Instant::now();
    for p in &pkts {
        ct.process(0x0800, p, &req, now);
    }
    let insert = t.elapsed();
    assert_eq!(ct.len(), N);
    let grown = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "conntrack: {N} connections use {grown} heap bytes = {} bytes/connection; \
         commit {:.0} ns/connection (informational: debug builds are slower)",
        grown as usize / N,
        insert.as_nanos() as f64 / N as f64
    );

    // The established path allocates nothing.
    let before = LIVE.load(Ordering::Relaxed);
    let t = std::time::Instant::now();
    for p in &pkts {
        ct.process(0x0800, p, &CtRequest::default(), now);
    }
    let lookup = t.elapsed();
    // Read before printing: the test harness's output capture allocates.
    let after = LIVE.load(Ordering::Relaxed);
    println!(
        "conntrack: lookup of an established connection among {N}: {:.0} ns",
        lookup.as_nanos() as f64 / N as f64
    );
    assert_eq!(after, before);
    drop(ct);
}

#[test]
fn nat_established_path_allocates_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 20_000;
    let pkts: Vec<Vec<u8>> = (0..N).map(|i| udp(1024 + i as u16, 1)).collect();
    let now = Instant::now();
    let nat = NatAction {
        kind: Some(NatKind::Src),
        addr_min: Some(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1))),
        ..NatAction::default()
    };
    let req = CtRequest {
        commit: true,
        nat: Some(nat),
        ..CtRequest::default()
    };
    let mut ct = Conntrack::new(Config::default());
    let before = LIVE.load(Ordering::Relaxed);
    for p in &pkts {
        assert!(!ct.process(0x0800, p, &req, now).nat.is_empty());
    }
    let grown = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "conntrack: {N} SNAT connections use {grown} heap bytes = {} bytes/connection",
        grown as usize / N
    );
    let before = LIVE.load(Ordering::Relaxed);
    for p in &pkts {
        let r = ct.process(0x0800, p, &req, now);
        assert!(!r.nat.is_empty());
        let r2 = ct.process_known(&r, &req).unwrap();
        assert!(r2.nat.is_empty());
    }
    assert_eq!(LIVE.load(Ordering::Relaxed), before);
}
