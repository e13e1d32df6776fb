//! Variables on the data path (docs/results/p4.md 2q): blocks that bind
//! no name run in their parent's frame (`fast::binds`), and a variable's
//! chain finds its root through the place it was found last
//! (`Chain::slot`) when its name is bound once in view. Both must give
//! the walker's (`process_reference`) outputs and whole traces: a block
//! that binds keeps its frame (its names shadow, not overwrite), a name
//! bound twice in view is searched (the innermost wins, as in the
//! walker), and a stale place (the same site at another nesting) is
//! noticed.

mod interp_support;
use interp_support::{agree_on, corpus, load, load_text, xorshift};
use nicflow_p4::Pipeline;

/// The test programs' shared parts: headers `a_t` and `b_t` before
/// `body` (a parser and `Main`), a deparser emitting both after it.
fn program(body: &str) -> String {
    format!("{HEAD}{body}{TAIL}")
}

const HEAD: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header a_t { bit<48> d; bit<48> s; bit<16> t; }
header b_t { bit<8> x; bit<8> y; bit<8> z; bit<8> w; }
struct headers_t { a_t a; b_t b; }
"#;

const TAIL: &str = r#"control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    apply {
        pkt.emit(hdr.a);
        pkt.emit(hdr.b);
    }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

/// `K` is a constant unless `pk`'s parameter is in view (`rk` called
/// from `pk`: the walker's dynamic scope). `v` is bound three times in `Main` (a block variable, a nested
/// block's variable, an action parameter): never slotted. `u` is bound
/// once: slotted, and `ru` reads it from two nestings (inside a block
/// that binds, and at the top), so its place goes stale between calls.
/// `rd` reads `v` by the walker's dynamic scope: the block's `v` from
/// `apply`, `pv`'s parameter when `pv` calls it (first from a block that
/// binds, at the same depth as `pv`'s frame later). `MAIN` goes at the
/// end of `apply`.
const TEMPLATE: &str = r#"
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start {
        pkt.extract(hdr.a);
        transition select(hdr.a.t) { 0x0800: pb; 0x0801: pc; default: accept; }
    }
    state pb { pkt.extract(hdr.b); transition accept; }
    state pc { bit<8> k = 7; pkt.extract(hdr.b); hdr.b.w = k; transition accept; }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    bit<8> u;
    bit<8> v;
    const bit<8> K = 3;
    action rk() { hdr.b.x = hdr.b.x + K; }
    action pk(bit<8> K) { rk(); }
    action rd() { hdr.b.z = v; }
    action ru() { hdr.b.w = hdr.b.w + u; }
    action pv(bit<8> w, bit<8> v) { rd(); hdr.b.w = hdr.b.w + v + w; }
    apply {
        if (hdr.b.isValid()) {
            u = hdr.b.x;
            v = hdr.b.y;
            {
                bit<8> v = 9;
                hdr.b.y = hdr.b.y ^ v;
            }
            hdr.b.x = v;
            if (hdr.b.x > 128) {
                bit<8> q = 3;
                rd();
                ru();
                hdr.b.w = hdr.b.w + q;
            } else {
                bit<8> q = 4;
                rd();
                ru();
                hdr.b.w = hdr.b.w - q;
            }
            ru();
            pv(hdr.b.z, 5);
            rk();
            pk(hdr.b.y);
            MAIN
        }
        send_to_port((PortId_t)1);
    }
}
"#;

fn build(main: &str) -> Option<Pipeline> {
    let text = program(TEMPLATE).replace("MAIN", main);
    load_text("vars.p4", &text)
}

/// Packets that parse `b_t` through either state, or not at all.
fn packets(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut next = xorshift(seed);
    (0..n)
        .map(|_| {
            let len = 14 + (next() % 8) as usize;
            let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let t: u16 = [0x0800, 0x0801, 0x0806][(next() % 3) as usize];
            p[12..14].copy_from_slice(&t.to_be_bytes());
            p
        })
        .collect()
}

/// Each packet through `fast.process` and `reference.process_reference`:
/// outputs and whole traces equal; the outputs sent.
fn agree(what: &str, fast: &mut Pipeline, reference: &mut Pipeline, pkts: &[Vec<u8>]) -> usize {
    agree_on(what, fast, reference, pkts, |_| 0)
}

#[test]
fn shadowed_stale_and_slotted_variables_agree_with_the_walker() {
    let (Some(mut fast), Some(mut reference)) = (build(""), build("")) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    let sent = agree("template", &mut fast, &mut reference, &packets(3, 600));
    assert!(sent > 300, "too few packets forwarded ({sent})");
    // The nested block's and the `if` branches' declarations keep their
    // frames; `apply` itself, the outer `if`'s block and state `pb` bind
    // nothing and get none.
    let (framed, all) = fast.block_frames();
    assert!(
        framed < all,
        "no block runs without a frame: {framed} of {all}"
    );
    // `u` in `ru` and the receivers `pkt` are slotted; `v` (bound three
    // times in `Main`) is not.
    let (slotted, peeks) = fast.slot_peeks();
    assert!(
        slotted > 0 && slotted < peeks,
        "slotted {slotted} of {peeks}"
    );
    // The same with a later `v` read at the top after `pv` (the slot of
    // `rd`'s `v` is never used: a stale one would give `pv`'s 5).
    let main = "hdr.b.y = v; rd();";
    let (Some(mut fast), Some(mut reference)) = (build(main), build(main)) else {
        return;
    };
    agree("after pv", &mut fast, &mut reference, &packets(5, 600));
}

#[test]
fn routing_runs_without_empty_frames_and_slots_its_receivers() {
    let (Some(mut fast), Some(mut reference)) = (load("pna/routing.p4"), load("pna/routing.p4"))
    else {
        return;
    };
    // routing.p4 declares no variable in any body: no block, state or
    // `apply` needs a frame of its own (the `if`'s block, three states,
    // three `apply`s).
    assert_eq!(fast.block_frames(), (0, 7));
    // Every variable look-up of the compiled code is slotted: the
    // receivers `pkt` (4) and `chk` (5 in `ip_ttl_dec`, in its plain and
    // its flat body), `nh_index`, `index`, `dmac`, ...
    let (slotted, peeks) = fast.slot_peeks();
    assert_eq!(slotted, peeks);
    assert!(peeks >= 9, "{peeks}");
    // The packet receivers `pkt` (2 extracts, 2 emits) are known at load,
    // `chk` (a function's parameter) is looked at where it sits.
    let (known, receivers) = fast.packet_receivers();
    assert_eq!(known, 4, "{known} of {receivers}");
    assert!(receivers > known, "{receivers}");
    // `nh_index` is held in the slot array.
    assert_eq!(fast.var_slots(), 1);
    interp_support::add_routes(&mut fast, &[(0xc612_0000, 16), (0xc613_0000, 24)], 2);
    interp_support::add_routes(&mut reference, &[(0xc612_0000, 16), (0xc613_0000, 24)], 2);
    let mut next = xorshift(11);
    for i in 0..300u64 {
        let mut p = vec![0u8; 34];
        p[12..14].copy_from_slice(&[0x08, 0x00]);
        p[14] = 0x45;
        p[22] = (next() % 4) as u8;
        let dst: u32 = 0xc612_0000 | (next() as u32 & 0x1_ffff);
        p[30..34].copy_from_slice(&dst.to_be_bytes());
        let a = fast.process(0, &p, i);
        let b = reference.process_reference(0, &p, i);
        assert_eq!(a, b, "packet {i}");
    }
}

/// Review p4early SHOULD-FIX 1's cases, each through `agree`:
/// (a) `ra` reads the block variable `u` (bound once: slotted) from a
/// table applied at two nestings, chosen per packet by the low bit of
/// `hdr.b.x` (even inside a block that binds `y`, odd at the top), so
/// the slot the last packet left is stale for the next;
/// (b) `av` reads `v`, bound twice in `Main` (the block's and a nested
/// block's): the walker finds the nested one, so the name must not be
/// slotted;
/// (c) parser state `lp` loops on itself declaring a local `k` (a frame
/// per visit), next to `pb`, which binds nothing;
/// (d) nested blocks with and without declarations and shadowing.
const CASES_P4: &str = r#"
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    bit<8> c;
    state start {
        c = 0;
        pkt.extract(hdr.a);
        transition select(hdr.a.t) { 0x0800: pb; 0x0801: lp; default: accept; }
    }
    state pb { pkt.extract(hdr.b); transition accept; }
    state lp {
        bit<8> k = c + 1;
        c = k;
        transition select(k) { 3: fin; default: lp; }
    }
    state fin { pkt.extract(hdr.b); hdr.b.w = hdr.b.w + c; transition accept; }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    bit<8> u;
    bit<8> v;
    action ra() { hdr.b.z = hdr.b.z + u; }
    action av() { hdr.b.w = hdr.b.w ^ v; }
    table t {
        key = { hdr.b.y : exact; }
        actions = { ra; }
        default_action = ra();
    }
    apply {
        if (hdr.b.isValid()) {
            u = hdr.b.y;
            v = hdr.b.x;
            if (hdr.b.x[0:0] == 0) {
                bit<8> y = hdr.b.x + 1;
                t.apply();
                hdr.b.y = hdr.b.y + y;
            } else {
                t.apply();
            }
            {
                bit<8> v = hdr.b.y ^ 0x5a;
                av();
            }
            av();
            {
                bit<8> x = 1;
                { x = 2; }
                { bit<8> x = 3; hdr.b.y = hdr.b.y + x; }
                hdr.b.x = hdr.b.x + x;
            }
        }
        send_to_port((PortId_t)1);
    }
}
"#;

#[test]
fn review_cases_agree_with_the_walker() {
    let load_cases = || -> Option<Pipeline> {
        let c = corpus()?;
        let prog =
            nicflow_p4::front::parse_str("cases.p4", &program(CASES_P4), &[c.join("include")])
                .unwrap_or_else(|e| panic!("{e}"));
        Some(Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}")))
    };
    let (Some(mut fast), Some(mut reference)) = (load_cases(), load_cases()) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    // (a): `hdr.b.x` alternates even/odd from one parsed packet to the
    // next (every third is not parsed); (c): every third goes through
    // the loop.
    let mut next = xorshift(17);
    let pkts: Vec<Vec<u8>> = (0..600u64)
        .map(|i| {
            let mut p: Vec<u8> = (0..18).map(|_| next() as u8).collect();
            let t: u16 = [0x0800, 0x0801, 0x0806][(i % 3) as usize];
            p[12..14].copy_from_slice(&t.to_be_bytes());
            p[14] = (p[14] & !1) | ((i - i / 3) % 2) as u8;
            p
        })
        .collect();
    let sent = agree("review cases", &mut fast, &mut reference, &pkts);
    assert!(sent >= 600, "too few packets forwarded ({sent})");
    // `u` (and the receivers) slotted, `v` not.
    let (slotted, peeks) = fast.slot_peeks();
    assert!(
        slotted > 0 && slotted < peeks,
        "slotted {slotted} of {peeks}"
    );
}

/// Block variables held in the slot array (`fast::VSlot`, docs/results/
/// p4.md 2w) against the walker: `s` (`bit<16>`) written by a table's
/// action and read as the next table's key, left at its default on the
/// packets no entry sets it (read before written: the walker's 0 each
/// packet, not the last packet's value); `f` (`bool`) the same way; `g`
/// (`int<8>`) signed arithmetic and a signed compare; `k` with an
/// initialiser (the walker's, at every entry of the block) read by an
/// action and written by the block; parser variable `pv` set in one
/// state and read in the next state's body and select. Not slotted, and
/// still the walker's: `sh` (an action parameter has the same name, the
/// action reads its own), `wv` (an argument of a function: copied in and
/// out by the walker), `tmp` (a header). `SHADOW` goes at the end of
/// `apply`.
const SLOTS_P4: &str = r#"
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    bit<8> pv;
    state start {
        pkt.extract(hdr.a);
        pv = hdr.a.d[7:0];
        transition select(hdr.a.t) { 0x0800: pb; default: accept; }
    }
    state pb {
        pkt.extract(hdr.b);
        hdr.b.z = hdr.b.z ^ pv;
        transition select(pv[0:0]) { 1: accept; default: accept; }
    }
}
void bump(inout bit<8> a) { a = a + 1; }
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    bit<16> s;
    bool f;
    int<8> g;
    bit<8> k = 7;
    bit<8> sh;
    bit<8> wv;
    a_t tmp;
    action set_s(bit<16> v) { s = v; f = true; }
    action set_w(bit<8> v) { hdr.b.w = v + k; }
    action hide(bit<8> sh) { hdr.b.y = hdr.b.y + sh; }
    action rd_sh() { hdr.b.z = hdr.b.z + sh; }
    table route {
        key = { hdr.b.x : exact; }
        actions = { set_s; NoAction; }
        const entries = { 1 : set_s(5); 2 : set_s(7); 3 : set_s(0x109); }
        default_action = NoAction();
    }
    table nh {
        key = { s : exact; }
        actions = { set_w; NoAction; }
        const entries = { 5 : set_w(0x11); 7 : set_w(0x22); 0 : set_w(0x33); }
        default_action = NoAction();
    }
    apply {
        if (hdr.b.isValid()) {
            route.apply();
            nh.apply();
            hdr.b.y = hdr.b.y + (bit<8>) s;
            if (f) { hdr.b.z = hdr.b.z + 1; }
            g = (int<8>) hdr.b.y;
            g = g - 100;
            if (g < 0) { hdr.b.z = hdr.b.z ^ 0x80; }
            k = k + hdr.b.x;
            hdr.b.w = hdr.b.w + k;
            sh = hdr.b.y;
            hide(hdr.b.x);
            rd_sh();
            wv = hdr.b.w;
            bump(wv);
            hdr.b.w = wv;
            tmp.setValid();
            tmp.t = (bit<16>) hdr.b.x;
            hdr.b.x = tmp.t[7:0] + 1;
            SHADOW
        }
        send_to_port((PortId_t)1);
    }
}
"#;

#[test]
fn block_variables_in_the_slot_array_agree_with_the_walker() {
    let build = |shadow: &str| load_text("slots.p4", &program(SLOTS_P4).replace("SHADOW", shadow));
    let (Some(mut fast), Some(mut reference)) = (build(""), build("")) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    // `pv`, `s`, `f`, `g`, `k`; not `sh`, `wv`, `tmp`.
    assert_eq!(fast.var_slots(), 5);
    // `hdr.b.x` in 0..=4 (entries for 1, 2, 3) on most packets: `s` and
    // `f` are set on some and read before written on the others.
    let mut next = xorshift(23);
    let pkts: Vec<Vec<u8>> = (0..600u64)
        .map(|i| {
            let mut p: Vec<u8> = (0..18).map(|_| next() as u8).collect();
            let t: u16 = [0x0800, 0x0800, 0x0806][(i % 3) as usize];
            p[12..14].copy_from_slice(&t.to_be_bytes());
            if i % 5 != 0 {
                p[14] %= 5;
            }
            p
        })
        .collect();
    let sent = agree("slots", &mut fast, &mut reference, &pkts);
    assert!(sent >= 600, "too few packets forwarded ({sent})");
    // A nested block's declaration of `s` makes it bound twice in
    // `Main`: not slotted (the walker's innermost wins), `f` still is.
    let shadow =
        "{ bit<16> s = 3; hdr.b.y = hdr.b.y + (bit<8>) s; } hdr.b.z = hdr.b.z + (bit<8>) s;";
    let (Some(mut fast), Some(mut reference)) = (build(shadow), build(shadow)) else {
        return;
    };
    assert_eq!(fast.var_slots(), 4);
    agree("slots, s shadowed", &mut fast, &mut reference, &pkts);
    // Walked code naming a variable (`tmp.setValid()` is the walker's
    // anyway; here `f` in a walked statement): `f` left to the frame.
    let walked = "switch (route.apply().action_run) { set_s: { f = false; } default: {} }";
    let (Some(mut fast), Some(mut reference)) = (build(walked), build(walked)) else {
        return;
    };
    assert_eq!(fast.var_slots(), 4);
    agree("slots, f walked", &mut fast, &mut reference, &pkts);
}
