//! Tables and block frames on the data path against the walker
//! (`process_reference`), packet by packet, outputs and whole traces:
//! table keys read where they sit (`Run::key_bits`: flat header fields,
//! metadata fields, block variables, `bool` and `int<W>` keys, next to
//! keys that are evaluated), exact/lpm/ternary/range tables, actions
//! with 0 to 3 parameters of odd widths, default actions with data,
//! actions that `exit` or `return`, an action with a parameter bound by
//! the table next to one from the data, defaults set at run time with
//! data, the recorded lookup keys and examined bits (`record_table_keys`),
//! `switch (t.apply().action_run)`, `if (t.apply().hit)`, and main blocks
//! whose frames hold only the parameters they name (the headers flat,
//! some metadata bound, some not), with and without a block variable.

mod interp_support;
use interp_support::{load_text, run_stf_on, xorshift};
use nicflow_p4::Pipeline;

/// `VDECL` declares the main control's variable (or nothing), `VV` is
/// where its value lives (`v` or `meta.v`), `EXTRA` goes at the end of
/// the main control's apply (a slice there keeps the headers a tree).
const PROG: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t { bit<12> m; bool f; bit<9> v; }
header a_t { bit<48> d; bit<48> s; bit<16> t; }
header b_t { bit<7> x; bool f; bit<9> y; int<8> n; bit<32> ip; bit<16> port; bit<12> m; bit<3> pad; }
struct headers_t { a_t a; b_t b; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start {
        pkt.extract(hdr.a);
        meta.f = hdr.a.t == 0x0800;
        transition select(hdr.a.t) { 0x0800: pb; 0x0801: pb; default: accept; }
    }
    state pb { pkt.extract(hdr.b); meta.m = hdr.b.m; transition accept; }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    VDECL
    action nop() {}
    action a1(bit<7> p) { hdr.b.x = hdr.b.x + p; }
    action a2(bit<9> q, bit<48> mac) { VV = VV + q; hdr.a.d = mac; }
    action a3(bit<7> p, bit<9> q, bit<16> port) {
        hdr.b.x = p; VV = q; hdr.b.port = port; meta.m = meta.m + 1;
    }
    action gone() { drop_packet(); }
    // `exit` and `return` in a table's action (the compiled call's
    // early ends).
    action ax(bit<7> p) {
        if (p == 1) { exit; }
        if (p == 2) { return; }
        hdr.b.x = hdr.b.x ^ p;
    }
    // A directional parameter bound by the table next to one from the
    // entry's data (not `call_table_action`: its fallback).
    action am(inout bit<9> w, bit<9> q) { w = w + q; hdr.b.port = hdr.b.port + 1; }
    table t_exact {
        key = { hdr.b.y : exact; meta.m : exact; }
        actions = { a1; a2; nop; }
        default_action = nop();
    }
    table t_lpm {
        key = { hdr.b.ip : lpm; }
        actions = { a2; a3; nop; }
        default_action = a2(3, 0x0a0b0c0d0e0f);
    }
    table t_tern {
        key = { hdr.b.x : ternary; hdr.b.f : exact; meta.f : exact; }
        actions = { a1; a3; gone; nop; }
        default_action = nop();
    }
    table t_range {
        key = { hdr.b.port : range; VV : exact @name("vv"); hdr.b.n : exact; }
        actions = { a1; a3; nop; }
        default_action = nop();
    }
    table t_dflt {
        key = { hdr.a.s : exact; }
        actions = { a3; nop; }
        default_action = a3(0x55, 0x1ff, 0xabcd);
    }
    table t_expr {
        key = { hdr.b.y + 1 : exact @name("y1"); }
        actions = { a1; ax; nop; }
        default_action = nop();
    }
    table t_mix {
        key = { hdr.b.n : exact; }
        actions = { am(VV); ax; nop; }
        default_action = nop();
    }
    apply {
        send_to_port((PortId_t)2);
        if (hdr.b.isValid()) {
            VV = hdr.b.y;
            switch (t_exact.apply().action_run) {
                a1: { t_lpm.apply(); }
                a2: { t_tern.apply(); }
                default: { t_expr.apply(); }
            }
            if (t_range.apply().hit) {
                t_dflt.apply();
            } else {
                t_expr.apply();
            }
            if (!t_tern.apply().hit) {
                t_lpm.apply();
            }
            t_mix.apply();
            hdr.b.y = VV;
            hdr.b.m = meta.m;
            EXTRA
        }
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    apply {
        if (meta.f) {
            pkt.emit(hdr.a);
        }
        pkt.emit(hdr.b);
    }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

/// The entries both pipelines get (the interp_support STF reader).
const ENTRIES: &str = "
add t_exact hdr.b.y:1 meta.m:5 a1(p:3)
add t_exact hdr.b.y:2 meta.m:5 a2(q:7, mac:0x020000000002)
add t_exact hdr.b.y:3 meta.m:6 a2(q:0x1ff, mac:0x020000000003)
add t_exact hdr.b.y:4 meta.m:7 nop()
add t_lpm hdr.b.ip:0x0a000000/8 a3(p:0x7f, q:0x101, port:0x1234)
add t_lpm hdr.b.ip:0x0a010000/16 a2(q:1, mac:0x020000000004)
add t_lpm hdr.b.ip:0x0a010203/32 nop()
add t_tern 10 hdr.b.x:0x05&&&0x0f hdr.b.f:1 meta.f:1 a1(p:0x11)
add t_tern 20 hdr.b.x:0x15&&&0x7f hdr.b.f:0 meta.f:1 a3(p:1, q:2, port:3)
add t_tern 5 hdr.b.x:0x00&&&0x00 hdr.b.f:1 meta.f:0 gone()
add t_range 1 hdr.b.port:1->60 vv:1 hdr.b.n:0xff a1(p:1)
add t_range 1 hdr.b.port:40->600 vv:2 hdr.b.n:0x7f a3(p:2, q:3, port:4)
add t_range 1 hdr.b.port:0->0xffff vv:3 hdr.b.n:0x80 nop()
add t_range 1 hdr.b.port:0->0xffff vv:0x1ff hdr.b.n:0 a1(p:9)
add t_dflt hdr.a.s:0x020000000009 nop()
add t_expr y1:2 a1(p:0x40)
add t_expr y1:5 nop()
add t_expr y1:3 ax(p:1)
add t_expr y1:4 ax(p:2)
add t_expr y1:0x1ff ax(p:0x33)
add t_mix hdr.b.n:0xff am(q:0x21)
add t_mix hdr.b.n:0x7f ax(p:1)
add t_mix hdr.b.n:0x80 ax(p:0x0c)
setdefault t_mix am(q:0x101)
setdefault t_exact a1(p:0x2a)
";

fn build(vdecl: &str, vv: &str, extra: &str) -> Option<Pipeline> {
    let text = PROG
        .replace("VDECL", vdecl)
        .replace("VV", vv)
        .replace("EXTRA", extra);
    load_text("tables.p4", &text)
}

/// Appends the low `w` bits of `v` to `bits` (first on the wire first).
fn put(bits: &mut Vec<bool>, v: u64, w: u32) {
    for i in (0..w).rev() {
        bits.push((v >> i) & 1 == 1);
    }
}

/// Frames whose fields come from small sets, so that every table hits
/// and misses: one `a_t`, then (ethertype 0x0800/0x0801) a `b_t`, some
/// cut short (the parser rejects them), some with another ethertype.
fn packets(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut next = xorshift(seed);
    let mut pick = |set: &[u64]| set[(next() % set.len() as u64) as usize];
    (0..n)
        .map(|_| {
            let mut bits = Vec::new();
            put(&mut bits, 0x0200_0000_0001, 48);
            put(&mut bits, pick(&[0x0200_0000_0009, 0x0200_0000_0008]), 48);
            put(&mut bits, pick(&[0x0800, 0x0800, 0x0801, 0x0806]), 16);
            put(&mut bits, pick(&[0x05, 0x15, 0x25, 0x7f, 0x00]), 7);
            put(&mut bits, pick(&[0, 1]), 1);
            put(&mut bits, pick(&[1, 2, 3, 4, 0x1fe]), 9);
            put(&mut bits, pick(&[0xff, 0x7f, 0x80, 0x00]), 8);
            put(
                &mut bits,
                pick(&[0x0a00_0001, 0x0a01_0009, 0x0a01_0203, 0x0b00_0001]),
                32,
            );
            put(&mut bits, pick(&[5, 50, 500, 5000]), 16);
            put(&mut bits, pick(&[5, 6, 7]), 12);
            put(&mut bits, pick(&[0, 5]), 3);
            put(&mut bits, 0xdead_beef, 32);
            let mut p: Vec<u8> = bits
                .chunks(8)
                .map(|c| c.iter().fold(0u8, |a, &b| (a << 1) | u8::from(b)))
                .collect();
            if pick(&[0, 0, 0, 1]) == 1 {
                let cut = (pick(&[3, 10, 16, 20]) as usize).min(p.len());
                p.truncate(cut);
            }
            p
        })
        .collect()
}

/// Fills both pipelines' tables, then runs every packet through
/// `fast.process` and `reference.process_reference`: outputs and whole
/// traces equal. Returns how many packets were sent.
fn agree(what: &str, fast: &mut Pipeline, reference: &mut Pipeline) -> usize {
    let fails = run_stf_on(
        &mut [&mut *fast, &mut *reference],
        ENTRIES,
        &mut |ps, port, p, now| ps[0].process(port, p, now),
    );
    assert!(fails.is_empty(), "{what}: {fails:?}");
    // The lookup keys and their examined bits (the revalidation input)
    // are in the traces compared.
    fast.record_table_keys(true);
    reference.record_table_keys(true);
    let mut sent = 0;
    let mut hit = 0;
    let mut keys = 0;
    let reads = fast.key_bits_reads();
    for (i, p) in packets(0x5eed ^ what.len() as u64, 3000).iter().enumerate() {
        let port = (i % 3) as u32;
        let a = fast.process(port, p, i as u64);
        let b = reference.process_reference(port, p, i as u64);
        assert_eq!(a, b, "{what}: packet {i} {p:02x?}: data path != walker");
        assert!(a.trace.error.is_none(), "{what}: {:?}", a.trace.error);
        sent += a.outputs.len();
        hit += a.trace.tables.iter().filter(|t| t.entry.is_some()).count();
        keys += a.trace.keys.len();
    }
    assert_eq!(fast.error_count(), reference.error_count(), "{what}");
    // The entries are reached (not only the defaults).
    assert!(hit > 1000, "{what}: only {hit} table hits");
    assert!(keys > 3000, "{what}: only {keys} lookup keys recorded");
    // The keys were read as bits where they sit (`Run::key_bits`), not
    // through a `Value` each: the results are the same either way, so
    // only this count shows the fast path was not bypassed (it was, once,
    // when table keys became `CExpr::Scalar`s).
    let reads = fast.key_bits_reads() - reads;
    assert!(reads > 3000, "{what}: only {reads} keys read by key_bits");
    assert_eq!(reference.key_bits_reads(), 0, "{what}");
    sent
}

#[test]
fn tables_and_frames_agree_with_the_walker_flat() {
    let (Some(mut fast), Some(mut reference)) =
        (build("bit<9> v;", "v", ""), build("bit<9> v;", "v", ""))
    else {
        return;
    };
    // The keys on header fields are read from the flat array.
    assert_eq!(fast.flat_headers(), Ok(()));
    // Every block names `meta` (bound in each frame, written back by
    // slot); `istd`/`ostd` are named nowhere (no frame entry).
    assert_eq!(
        fast.unbound_params(),
        [
            "main_parser.istd",
            "main_control.istd",
            "main_control.ostd",
            "main_deparser.ostd"
        ]
    );
    let sent = agree("flat, block variable", &mut fast, &mut reference);
    assert!(sent > 500 && sent < 3000, "{sent} sent");
}

#[test]
fn tables_and_frames_agree_with_the_walker_without_a_block_variable() {
    let (Some(mut fast), Some(mut reference)) = (build("", "meta.v", ""), build("", "meta.v", ""))
    else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    let sent = agree("flat, metadata key", &mut fast, &mut reference);
    assert!(sent > 500 && sent < 3000, "{sent} sent");
}

#[test]
fn tables_and_frames_agree_with_the_walker_on_header_trees() {
    // A conditional expression is the walker's (slices are compiled since
    // the scalar tier): the headers stay a tree, so header field keys are
    // read through the frames' values.
    let extra = "hdr.b.pad = hdr.b.m[0:0] == 1w1 ? 3w5 : 3w2;";
    let (Some(mut fast), Some(mut reference)) = (
        build("bit<9> v;", "v", extra),
        build("bit<9> v;", "v", extra),
    ) else {
        return;
    };
    assert!(fast.flat_headers().is_err());
    let sent = agree("tree", &mut fast, &mut reference);
    assert!(sent > 500 && sent < 3000, "{sent} sent");
}
