//! The flat headers (`Pipeline::flat_headers`): PNA programs whose
//! headers struct is held as one array per packet on the data path must
//! give the walker's (`process_reference`) outputs and whole traces, and
//! programs the flat layout cannot hold must say so and still agree.

mod interp_support;
use interp_support::{add_routes, agree_on, corpus, load, load_text, xorshift};
use nicflow_p4::Pipeline;

/// A PNA program using what the flat path compiles: extract/emit, field
/// reads and writes, `bool`, `int<7>`, `bit<128>`, isValid, a whole
/// header assigned, a header passed `inout` to a function, a field
/// passed `inout` to an action, a table key; an action and functions taking headers
/// `inout` (compiled for the flat array: `Pipeline::flat_calls`), one
/// of them reading them in checksum method arguments, one passing its
/// parameter on, one (`inval`, called only by some `MAIN`s) that cannot
/// be compiled so. `EXTRA` goes into the headers struct, `MAIN` at the
/// start of the main control's apply.
const TEMPLATE: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header a_t { bit<48> d; bit<48> s; bit<16> t; }
header b_t { bool f; int<7> n; bit<128> w; bit<8> x; bit<8> y; }
struct headers_t { a_t a; b_t b; b_t c; EXTRA }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start {
        pkt.extract(hdr.a);
        transition select(hdr.a.t) { 0x0800: pb; 0x0801: pbc; default: accept; }
    }
    state pb { pkt.extract(hdr.b); transition accept; }
    state pbc { pkt.extract(hdr.b); pkt.extract(hdr.c); transition accept; }
}
void swap(inout b_t b, out bit<8> old) { old = b.x; b.x = b.y; b.y = old; }
void twice(inout b_t b, out bit<8> o) { swap(b, o); b.x = b.x + o; swap(b, o); }
void csum(InternetChecksum chk, inout a_t a, inout b_t b) {
    chk.clear();
    chk.set_state(~a.t);
    chk.add({ a.t, b.x, b.w });
    chk.subtract(b.y);
    b.y = chk.get()[7:0];
    a.t = a.t ^ chk.get();
}
void inval(inout b_t b) { b.setInvalid(); }
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    bit<8> keep;
    action bump(inout bit<8> v) { v = v + 1; }
    action hbump(inout b_t bb) { bb.x = bb.x + 3; hdr.a.d = hdr.a.d + 1; }
    action hclash(inout b_t bb) { bb.x = bb.x + 1; hdr.c.x = 7; }
    action fwd(PortId_t port) { send_to_port(port); }
    table t { key = { hdr.b.x : exact; } actions = { fwd; } default_action = fwd((PortId_t)1); }
    apply {
        MAIN
        if (hdr.b.isValid()) {
            if (hdr.b.f) {
                swap(hdr.b, keep);
                hdr.a.s = (bit<48>) keep;
            } else {
                bump(hdr.b.y);
                hdr.b.n = hdr.b.n - 1;
            }
            if (!hdr.c.isValid()) {
                hdr.c = hdr.b;
                hdr.c.w = hdr.c.w + 1;
            }
            hbump(hdr.c);
            t.apply();
        } else {
            send_to_port((PortId_t)2);
        }
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    InternetChecksum() chk;
    bit<8> k2;
    apply {
        pkt.emit(hdr.a);
        if (hdr.b.isValid()) { csum(chk, hdr.a, hdr.b); }
        if (hdr.c.isValid()) { twice(hdr.c, k2); }
        pkt.emit(hdr.b);
        pkt.emit(hdr.c);
    }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

fn build(extra: &str, main: &str) -> Option<Pipeline> {
    let text = TEMPLATE.replace("EXTRA", extra).replace("MAIN", main);
    load_text("flat.p4", &text)
}

/// Packets for the template: ethertypes that parse one, two or no `b_t`,
/// lengths from empty to a few bytes past two `b_t`s (short ones reject).
fn packets(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut next = xorshift(seed);
    (0..n)
        .map(|_| {
            let len = (next() % 60) as usize;
            let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 14 {
                let t: u16 = [0x0800, 0x0801, 0x0806][(next() % 3) as usize];
                p[12..14].copy_from_slice(&t.to_be_bytes());
            }
            p
        })
        .collect()
}

/// Each packet through `fast.process` and `reference.process_reference`:
/// outputs and whole traces equal.
fn agree(what: &str, fast: &mut Pipeline, reference: &mut Pipeline, pkts: &[Vec<u8>]) -> usize {
    agree_on(what, fast, reference, pkts, |i| (i % 3) as u32)
}

#[test]
fn flat_headers_agree_with_the_walker() {
    let (Some(mut fast), Some(mut reference)) = (build("", ""), build("", "")) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    // swap(hdr.b, ..), hbump(hdr.c), csum, twice(hdr.c, ..) and
    // swap(hdr.c, ..) in it.
    assert_eq!(fast.flat_calls(), 5);
    let sent = agree("template", &mut fast, &mut reference, &packets(7, 400));
    assert!(
        sent > 100,
        "too few packets forwarded ({sent}) to compare much"
    );
    // A function whose body hands its header to the walker: copied in
    // and out as before, the rest still flat.
    let main = "if (hdr.a.t == 0x0801) { inval(hdr.c); }";
    let (Some(mut fast), Some(mut reference)) = (build("", main), build("", main)) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    assert_eq!(fast.flat_calls(), 5);
    agree("inval", &mut fast, &mut reference, &packets(9, 400));
    // An action writing its header argument's header through `hdr` too:
    // copied in and out (the copy-out wins), not compiled for the array.
    let main = "if (hdr.c.isValid()) { hclash(hdr.c); }";
    let (Some(mut fast), Some(mut reference)) = (build("", main), build("", main)) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    assert_eq!(fast.flat_calls(), 5);
    agree("hclash", &mut fast, &mut reference, &packets(19, 400));
}

#[test]
fn routing_holds_its_headers_flat_and_agrees_with_the_walker() {
    let (Some(mut fast), Some(mut reference)) = (load("pna/routing.p4"), load("pna/routing.p4"))
    else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    // ip_ttl_dec(chk, hdr.ip) on the array.
    assert_eq!(fast.flat_calls(), 1);
    let routes = [(0xc612_0000, 16), (0xc613_0100, 24)];
    add_routes(&mut fast, &routes, 3);
    add_routes(&mut reference, &routes, 3);
    let mut ip = vec![
        0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00, // ethernet
        0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 19, 1, 9,
    ];
    let mut pkts = vec![ip.clone()];
    ip[22] = 1; // ttl 1: dropped
    pkts.push(ip.clone());
    ip[22] = 9;
    ip[31] = 2; // no route but the default
    pkts.push(ip.clone());
    pkts.push(ip[..20].to_vec()); // short: parser error
    ip[12] = 0x86; // not IPv4
    pkts.push(ip.clone());
    pkts.extend(packets(11, 200));
    let sent = agree("routing.p4", &mut fast, &mut reference, &pkts);
    assert!(sent >= 1, "routing.p4 forwarded nothing");
    // No block names its metadata: only the packet and the (flat)
    // headers are bound.
    let unbound = fast.unbound_params();
    assert_eq!(unbound.len(), 7, "{unbound:?}");
    for p in ["meta", "istd", "ostd"] {
        assert!(
            unbound.iter().any(|u| u.ends_with(&format!(".{p}"))),
            "{unbound:?}"
        );
    }
}

/// A PNA program whose metadata are named by some main blocks and not
/// by others: the parser writes `meta`, `MAIN_META` in the main control
/// may name it (or not), the deparser reads it; `istd` is named by the
/// main control only, `ostd` by none. `MAIN_META` goes at the start of
/// the main control's apply.
const META: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t { bit<8> m; bool seen; bit<16> port; }
header a_t { bit<48> d; bit<48> s; bit<16> t; }
struct headers_t { a_t a; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start {
        pkt.extract(hdr.a);
        meta.m = hdr.a.t[7:0];
        meta.seen = true;
        transition accept;
    }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    apply {
        MAIN_META
        if (hdr.a.t[0:0] == 1) {
            send_to_port(istd.input_port);
        } else {
            send_to_port((PortId_t)7);
        }
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    apply {
        if (meta.seen) { hdr.a.s = (bit<48>) meta.m + (bit<48>) meta.port; }
        pkt.emit(hdr.a);
    }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

fn build_meta(main: &str) -> Option<Pipeline> {
    let text = META.replace("MAIN_META", main);
    load_text("meta.p4", &text)
}

#[test]
fn metadata_no_block_names_are_not_bound_and_agree_with_the_walker() {
    // The main control does not name `meta`: the parser's writes must
    // still reach the deparser.
    let (Some(mut fast), Some(mut reference)) = (build_meta(""), build_meta("")) else {
        return;
    };
    let unbound = fast.unbound_params();
    assert_eq!(unbound.len(), 4, "{unbound:?}");
    assert!(unbound.iter().all(|u| !u.ends_with(".hdr")), "{unbound:?}");
    let sent = agree("meta unnamed", &mut fast, &mut reference, &packets(13, 300));
    assert!(sent > 100, "too few packets forwarded ({sent})");
    // The main control writes `meta` too: bound there, not in the
    // parser's `istd` nor anyone's `ostd`.
    let main = "meta.port = (bit<16>) istd.input_port; meta.m = meta.m + 1;";
    let (Some(mut fast), Some(mut reference)) = (build_meta(main), build_meta(main)) else {
        return;
    };
    let unbound = fast.unbound_params();
    assert_eq!(unbound.len(), 3, "{unbound:?}");
    assert!(unbound.iter().all(|u| !u.ends_with(".meta")), "{unbound:?}");
    let sent = agree("meta named", &mut fast, &mut reference, &packets(17, 300));
    assert!(sent > 100, "too few packets forwarded ({sent})");
}

#[test]
fn programs_the_flat_layout_cannot_hold_take_the_tree() {
    // A header stack in the struct: no flat layout.
    let (Some(mut fast), Some(mut reference)) = (build("b_t[2] st;", ""), build("b_t[2] st;", ""))
    else {
        return;
    };
    let why = fast.flat_headers().unwrap_err();
    assert!(why.contains("fixed-width headers"), "{why}");
    agree("stack", &mut fast, &mut reference, &packets(3, 200));
    // The headers handed to the walker (setInvalid is not compiled).
    let main = "if (hdr.a.t == 0x0801) { hdr.c.setInvalid(); }";
    let (Some(mut fast), Some(mut reference)) = (build("", main), build("", main)) else {
        return;
    };
    let why = fast.flat_headers().unwrap_err();
    assert!(why.contains("walker"), "{why}");
    agree("setInvalid", &mut fast, &mut reference, &packets(5, 200));
}

#[test]
fn which_corpus_programs_hold_their_headers_flat() {
    // Visible in the test log (`--nocapture`); at least routing.p4 is.
    let Some(c) = corpus() else { return };
    let mut flat = 0;
    for dir in ["pna", "psa", "v1model", "netronome"] {
        let Ok(rd) = std::fs::read_dir(c.join(dir)) else {
            continue;
        };
        let mut names: Vec<_> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "p4"))
            .collect();
        names.sort();
        for p in names {
            if let Ok(pl) = Pipeline::load(&p, &[c.join("include")], None) {
                let r = pl.flat_headers();
                flat += r.is_ok() as usize;
                eprintln!("{}: {:?}", p.display(), r);
            }
        }
    }
    assert!(flat >= 1);
}

/// A PSA program whose headers the flat layout could hold and whose
/// function takes a header `inout`: PSA runs keep the tree, so the call
/// compiled for the flat array must fall back to copying (and agree).
const PSA: &str = r#"
#include <core.p4>
#include "bmv2/psa.p4"
header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
struct empty_metadata_t {}
struct metadata_t {}
struct headers_t { ethernet_t ethernet; }
void f(inout ethernet_t e) { e.srcAddr = e.dstAddr; e.etherType = e.etherType + 1; }
parser IngressParserImpl(packet_in pkt, out headers_t hdr, inout metadata_t user_meta,
                         in psa_ingress_parser_input_metadata_t istd,
                         in empty_metadata_t resubmit_meta,
                         in empty_metadata_t recirculate_meta) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control cIngress(inout headers_t hdr, inout metadata_t user_meta,
                 in psa_ingress_input_metadata_t istd,
                 inout psa_ingress_output_metadata_t ostd) {
    apply {
        f(hdr.ethernet);
        send_to_port(ostd, (PortId_t) 1);
    }
}
parser EgressParserImpl(packet_in buffer, out headers_t hdr, inout metadata_t user_meta,
                        in psa_egress_parser_input_metadata_t istd,
                        in empty_metadata_t normal_meta,
                        in empty_metadata_t clone_i2e_meta,
                        in empty_metadata_t clone_e2e_meta) {
    state start { buffer.extract(hdr.ethernet); transition accept; }
}
control cEgress(inout headers_t hdr, inout metadata_t user_meta,
                in psa_egress_input_metadata_t istd,
                inout psa_egress_output_metadata_t ostd) {
    apply { }
}
control IngressDeparserImpl(packet_out buffer, out empty_metadata_t clone_i2e_meta,
                            out empty_metadata_t resubmit_meta,
                            out empty_metadata_t normal_meta,
                            inout headers_t hdr, in metadata_t meta,
                            in psa_ingress_output_metadata_t istd) {
    apply { buffer.emit(hdr.ethernet); }
}
control EgressDeparserImpl(packet_out buffer, out empty_metadata_t clone_e2e_meta,
                           out empty_metadata_t recirculate_meta,
                           inout headers_t hdr, in metadata_t meta,
                           in psa_egress_output_metadata_t istd,
                           in psa_egress_deparser_input_metadata_t edstd) {
    apply { buffer.emit(hdr.ethernet); }
}
IngressPipeline(IngressParserImpl(), cIngress(), IngressDeparserImpl()) ip;
EgressPipeline(EgressParserImpl(), cEgress(), EgressDeparserImpl()) ep;
PSA_Switch(ip, PacketReplicationEngine(), ep, BufferingQueueingEngine()) main;
"#;

#[test]
fn a_flat_call_in_a_program_run_with_the_tree_copies_and_agrees() {
    let Some(c) = corpus() else { return };
    let load = || {
        let prog = nicflow_p4::front::parse_str("psa.p4", PSA, &[c.join("include")])
            .unwrap_or_else(|e| panic!("{e}"));
        Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}"))
    };
    let (mut fast, mut reference) = (load(), load());
    assert_eq!(fast.flat_headers(), Err("not a PNA program"));
    assert_eq!(fast.flat_calls(), 1);
    let sent = agree("psa", &mut fast, &mut reference, &packets(23, 200));
    assert!(sent > 50, "too few packets forwarded ({sent})");
}

/// Calls whose aliasing would differ from copy-in/copy-out (review of
/// issue 32): `PARSE` goes at the end of the parser's start state, `MAIN`
/// in the main control's apply, `EXTRA` into the headers struct.
const ALIASING: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header e_t { bit<48> d; bit<48> s; bit<16> t; }
header p_t { bit<8> x; bit<8> y; }
header len_t { bit<32> bits; }
struct headers_t { e_t e; p_t p; p_t q; EXTRA }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.e); pkt.extract(hdr.p); pkt.extract(hdr.q); PARSE transition accept; }
}
void skip_by(packet_in pk, inout len_t l) { pk.advance(l.bits); }
void put(inout p_t h, in bit<8> v) { h.x = v; }
void put_next(inout p_t h) { put(h, h.y + 1); }
void put_three(inout p_t h) { put(h, 3); }
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    action peek() { hdr.p.y = hdr.q.x; hdr.q.x = 9; }
    action set_then_peek(inout p_t h) { h.x = 5; peek(); }
    Hash<bit<8>>(PNA_HashAlgorithm_t.CRC16) hs;
    action hash_into(inout p_t h) { h.y = hs.get_hash({ h.x }); }
    action put_other(inout p_t h) { put(h, hdr.q.x); }
    apply {
        send_to_port((PortId_t)1);
        MAIN
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.e); pkt.emit(hdr.p); pkt.emit(hdr.q); }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

/// The `ALIASING` program both ways on a few packets: the flat headers
/// held, `calls` specialised bodies, outputs and traces as the walker's.
fn aliasing_agrees(extra: &str, parse: &str, main: &str, calls: usize) {
    let Some(c) = corpus() else {
        eprintln!("skipping aliasing case {main:?}: no P4 corpus (core.p4, tc/pna.p4)");
        return;
    };
    let load = || {
        let text = ALIASING
            .replace("EXTRA", extra)
            .replace("PARSE", parse)
            .replace("MAIN", main);
        let prog = nicflow_p4::front::parse_str("aliasing.p4", &text, &[c.join("include")])
            .unwrap_or_else(|e| panic!("{e}"));
        Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}"))
    };
    let (mut fast, mut reference) = (load(), load());
    assert!(
        fast.flat_headers().is_ok(),
        "{main}: {:?}",
        fast.flat_headers()
    );
    let pkts: Vec<Vec<u8>> = (0..4u8)
        .map(|k| (0..24 + k).map(|b| b.wrapping_mul(7 + k)).collect())
        .collect();
    let sent = agree(main, &mut fast, &mut reference, &pkts);
    assert_eq!(sent, pkts.len(), "{main}: every packet forwarded");
    assert_eq!(fast.flat_calls(), calls, "{main}: specialised bodies");
}

/// An action given `hdr.q` aliased calls a block action that reads and
/// writes `hdr.q` directly: copy-in/copy-out has it read the header
/// before the caller's write and lose its own write at copy-out, so the
/// caller is not specialised.
#[test]
fn a_flat_body_calling_a_block_action_is_not_specialised() {
    aliasing_agrees("", "", "set_then_peek(hdr.q);", 0);
}

/// A nested call in a specialised body whose other argument is an
/// expression of the aliased parameter (evaluated by the walker, which
/// knows no alias): the outer body is not specialised, and the nested
/// spec compiled for it is not counted.
#[test]
fn a_nested_call_with_an_expression_of_the_alias_is_not_specialised() {
    aliasing_agrees("", "", "put_next(hdr.p);", 0);
}

/// `packet_in.advance` in a function evaluates its argument itself: a
/// field of an aliased header there keeps the function off the flat body.
#[test]
fn packet_in_methods_in_a_flat_body_do_not_take_compiled_arguments() {
    aliasing_agrees(
        "len_t l;",
        "pkt.extract(hdr.l); hdr.l.bits = 8; skip_by(pkt, hdr.l);",
        "",
        0,
    );
}

/// A nested call whose other argument names no alias is still
/// specialised, the outer body and the nested one.
#[test]
fn a_plain_nested_flat_call_is_still_specialised() {
    aliasing_agrees("", "", "put_three(hdr.p);", 2);
}

/// A list argument of an extern method in a specialised body
/// (`hs.get_hash({ h.x })`, `h` aliased): the extern reads the list as
/// one value, which must come from the compiled items (the walker knows
/// no `h`; the packet was dropped with `unknown name h`).
#[test]
fn a_list_argument_in_a_flat_body_is_evaluated_compiled() {
    aliasing_agrees("", "", "hash_into(hdr.p);", 1);
}

/// A specialised body handing the block's headers to the walker
/// (`put(h, hdr.q.x)` in an action given `hdr.p`) refuses only that
/// specialisation: the program keeps its flat headers (it lost them
/// all).
#[test]
fn a_refused_specialisation_keeps_the_flat_headers() {
    aliasing_agrees("", "", "put_other(hdr.p);", 0);
}

/// `InternetChecksum` methods resolved at load (`fast::CsumOp`) and
/// field writes stored without a read-back: lists of odd widths and a
/// `bool` summed from their values (<= 128 bits), a list wider than 128
/// bits and one holding an unsized literal (serialized as before), a
/// single non-list argument, `get`'s result added back, `get_state`'s
/// written to a field uncast (a cast is the walker's: the call in it
/// would not be the compiled one), `set_state`, calls in a
/// control's own body (AST arguments, on the block's variables: naming
/// `hdr` there would hand the headers to the walker) and in a function
/// taking a flat header (compiled arguments), a `bool` field written and a
/// field written with its own width (a value of another width needs a
/// cast, which is the walker's: not in this program). Every shape
/// must give the walker's outputs and traces.
const CSUM: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header a_t { bit<48> d; bit<48> s; bit<16> t; }
header o_t { bit<4> v; bit<3> fl; bool b; bit<13> off; bit<3> r; bit<8> x; bit<128> w; bit<16> c; }
struct headers_t { a_t a; o_t o; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start {
        pkt.extract(hdr.a);
        transition select(hdr.a.t) { 0x0800: po; default: accept; }
    }
    state po { pkt.extract(hdr.o); transition accept; }
}
void sum_o(InternetChecksum chk, inout o_t o) {
    chk.clear();
    chk.set_state(~o.c);
    chk.subtract({ o.v, o.fl, o.b });
    o.b = !o.b;
    o.off = o.off + 1;
    chk.add({ o.v, o.fl, o.b, o.off, o.x });
    chk.add({ o.x, o.w });
    chk.subtract({ o.x, 3 });
    o.c = chk.get();
    chk.add({ o.c });
    o.c = chk.get_state();
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    apply { send_to_port((PortId_t)1); }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    InternetChecksum() chk;
    bit<16> t16;
    bit<48> d48;
    bool z;
    apply {
        t16 = hdr.a.t;
        d48 = hdr.a.d;
        z = hdr.a.s == 0;
        chk.clear();
        chk.add({ t16, d48[7:0], z, 7w3 });
        chk.add(t16);
        chk.subtract({ d48 });
        hdr.a.t = chk.get();
        pkt.emit(hdr.a);
        if (hdr.o.isValid()) { sum_o(chk, hdr.o); }
        pkt.emit(hdr.o);
    }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

#[test]
fn compiled_checksums_and_field_writes_agree_with_the_walker() {
    let Some(c) = corpus() else {
        return;
    };
    let load = || {
        let prog = nicflow_p4::front::parse_str("csum.p4", CSUM, &[c.join("include")])
            .unwrap_or_else(|e| panic!("{e}"));
        Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}"))
    };
    let (mut fast, mut reference) = (load(), load());
    assert_eq!(fast.flat_headers(), Ok(()));
    // sum_o(chk, hdr.o) on the array: its list arguments compiled.
    assert_eq!(fast.flat_calls(), 1);
    // Every method call resolved at load: the Deparser's 5, and sum_o's
    // 9 in its plain body and again in its body specialised for the
    // flat `hdr.o`. No call is cast or sliced (a cast is walked, and a
    // walked call would leave its compiled form untested).
    assert_eq!(fast.csum_sites(), 5 + 2 * 9);
    let sent = agree("csum", &mut fast, &mut reference, &packets(23, 400));
    assert!(sent > 100, "too few packets forwarded ({sent})");
}

/// Headers whose fields sit on the flat path's word boundaries (issue 32,
/// review SHOULD-FIX 1). `u_t` is packed (no field over 64 bits, 192
/// bits): `b` at bit 3 spans 67 bits (extract falls back to `read_bits`),
/// `c` at lead 3 ends exactly at the 64-bit load's end, `e` at lead 4
/// takes the load, and `f`, in the header's last byte, has the 8 bytes
/// the load needs only when the packet runs 7 or more bytes past the
/// header. `x_t` is packed with sub-byte fields across the emit's 64-bit
/// flush point and 3 bytes left at the end (the emit's tail); `v_t` has a
/// `bit<65>` (not packed: the field loop).
const BOUNDS: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header u_t { bit<3> a; bit<64> b; bit<61> c; bit<4> d; bit<58> e; bit<2> f; }
header x_t { bit<5> a; bit<57> b; bit<6> c; bit<63> d; bit<1> e; bit<4> f; bit<16> g; }
header v_t { bit<5> p; bit<65> q; bit<2> r; }
struct headers_t { u_t u; x_t x; v_t v; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start {
        pkt.extract(hdr.u);
        transition select(hdr.u.f) { 0: accept; 1: px; 2: pv; default: pxv; }
    }
    state px { pkt.extract(hdr.x); transition accept; }
    state pv { pkt.extract(hdr.v); transition accept; }
    state pxv { pkt.extract(hdr.x); pkt.extract(hdr.v); transition accept; }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    apply {
        hdr.u.c = hdr.u.c + 1;
        hdr.u.b = hdr.u.b ^ 64w0x8000_0000_0000_0001;
        if (hdr.x.isValid()) { hdr.x.c = hdr.x.c + 1; hdr.x.d = ~hdr.x.d; hdr.x.g = hdr.x.g + 1; }
        if (hdr.v.isValid()) { hdr.v.q = hdr.v.q + 1; }
        send_to_port((PortId_t)1);
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.u); pkt.emit(hdr.x); pkt.emit(hdr.v); }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

#[test]
fn fields_on_the_word_boundaries_agree_with_the_walker() {
    let build = || {
        let c = corpus()?;
        let prog = nicflow_p4::front::parse_str("bounds.p4", BOUNDS, &[c.join("include")])
            .unwrap_or_else(|e| panic!("{e}"));
        Some(Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}")))
    };
    let (Some(mut fast), Some(mut reference)) = (build(), build()) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    // Every length from empty to 8 bytes past u, x and v together
    // (24 + 19 + 9): short ones, ones ending exactly at a header's end
    // and 1..8 bytes after it, for each of the four parse paths.
    let mut pkts = Vec::new();
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    for len in 0..=60usize {
        for path in 0..4u8 {
            for _ in 0..3 {
                let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                if len >= 24 {
                    // u.f is the low 2 bits of u's last byte.
                    p[23] = (p[23] & !3) | path;
                }
                pkts.push(p);
            }
        }
    }
    let sent = agree("bounds", &mut fast, &mut reference, &pkts);
    // Every packet of at least u's 24 bytes on a path whose headers fit.
    assert!(sent >= 250, "too few packets forwarded ({sent})");
}
