//! Allocations per packet of a warm pipeline (issue 32): the interpreter
//! keeps its per-packet storage (frames and the stack they are pushed on,
//! headers and metadata, buffers) between packets, so a forwarded
//! routing.p4 packet allocates only what the returned `Outcome` owns.
//! A counting allocator (per thread: the test harness runs tests on
//! threads of its own) makes a regression visible as a count, not as a
//! benchmark figure.

mod interp_support;
use interp_support::{add_routes, load};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Allocations (`alloc` and `realloc` calls) made by this thread.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the thread's storage may be gone while it exits.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

/// A 60-byte IPv4/UDP frame to `dst` (ttl 64).
/// Allocations of each packet of `pkts` sent again after a warm-up round
/// (each forwarded once, then `check`ed).
fn warm_allocs(
    p: &mut nicflow_p4::Pipeline,
    pkts: &[Vec<u8>],
    check: impl Fn(&nicflow_p4::Outcome),
) -> Vec<u64> {
    for (i, f) in pkts.iter().enumerate() {
        let o = p.process(0, f, i as u64);
        assert_eq!(o.outputs.len(), 1, "warm-up packet {i} not forwarded");
    }
    let mut per_packet = Vec::new();
    for (i, f) in pkts.iter().enumerate() {
        let before = allocs();
        let o = p.process(0, f, 100 + i as u64);
        per_packet.push(allocs() - before);
        assert_eq!(o.outputs.len(), 1);
        check(&o);
    }
    per_packet
}

fn frame(dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[12] = 8;
    f[14] = 0x45;
    f[22] = 64;
    f[23] = 17;
    f[30..34].copy_from_slice(&dst.to_be_bytes());
    f
}

#[test]
fn warm_routing_packet_allocates_only_its_outcome() {
    let Some(mut p) = load("pna/routing.p4") else {
        return;
    };
    // 10/8 -> next hop 1 -> port 2.
    add_routes(&mut p, &[(0x0a00_0000, 8)], 2);
    let pkts: Vec<Vec<u8>> = (0..8).map(|i| frame(0x0a00_0100 + i)).collect();
    let per_packet = warm_allocs(&mut p, &pkts, |o| assert_eq!(o.outputs[0].0, 2));
    // What the Outcome owns: the outputs vector, the output frame and the
    // trace's read bits, tables and emitted spans. Anything more is
    // per-packet interpreter storage that was not reused.
    assert!(
        per_packet.iter().all(|&n| n <= 5),
        "allocations per warm packet: {per_packet:?} (at most 5 expected)"
    );
}

/// A v1model program whose ingress hashes `LIST` (`hash(..)` flattens it
/// into a fresh `BitBuf` per call).
const HASH: &str = r#"
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<16> c; }
struct headers { h_t h; }
struct meta_t { }
parser P(packet_in pkt, out headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout meta_t m) { apply {} }
control I(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        hash(hdr.h.c, HashAlgorithm.crc16, 16w0, LIST, 32w65536);
        sm.egress_spec = 1;
    }
}
control E(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) { apply {} }
control CC(inout headers hdr, inout meta_t m) { apply {} }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

/// Allocations of each of 8 warm packets through the HASH program.
fn hash_allocs(list: &str) -> Option<Vec<u64>> {
    let c = interp_support::corpus()?;
    let text = HASH.replace("LIST", list);
    let prog = nicflow_p4::front::parse_str("hash.p4", &text, &[c.join("include")])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut p = nicflow_p4::Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}"));
    let pkts: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i, 7 * i, 0, 0]).collect();
    Some(warm_allocs(&mut p, &pkts, |_| ()))
}

/// A list of two small fields hashed costs no more allocations than one
/// field of the same width: a fresh `BitBuf` grows once, not once for
/// the first field's fixed 16-byte copy and again for the second's
/// (review of p4meta, SHOULD-FIX 2).
#[test]
fn a_small_multi_field_hash_allocates_no_more_than_one_field() {
    let (Some(two), Some(one)) = (
        hash_allocs("{ hdr.h.a, hdr.h.b }"),
        hash_allocs("{ hdr.h.c }"),
    ) else {
        return;
    };
    assert!(
        two.iter().zip(&one).all(|(t, o)| t <= o),
        "allocations per warm packet: {{a, b}} {two:?}, {{c}} {one:?}"
    );
}
