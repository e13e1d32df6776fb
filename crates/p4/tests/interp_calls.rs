//! Function calls compiled at load (issue 32, docs/results/p4.md 2v): a
//! function's extern instance parameter bound to the caller's instance
//! in its specialised body (`fast::FlatSpec::insts`), `InternetChecksum`
//! methods on an instance known at load (`fast::CExpr::Csum`), and the
//! copy-in/copy-out cases around them. Every program must give the
//! walker's (`process_reference`) outputs and whole traces; the
//! load-time counts (`Pipeline::bound_sites`) say the compiled forms
//! were built, and the step limit falls where the walker's does.

mod interp_support;
use interp_support::{agree_on, load_text, passes, walker_limit, xorshift};

/// Two checksum instances in the deparser, each given to functions that
/// take an instance and a header `inout` (specialised: the header flat,
/// the instance bound): `upd` as routing.p4's `ip_ttl_dec`, `acc`
/// passing its instance on to `upd2` (bound from the caller's bound
/// parameter), called once per instance so that the two bodies hold
/// different instances (a body bound to the wrong one gives another
/// checksum). `shadowed` declares a local of its parameter's name in a
/// nested block: that parameter is not bound (it stays in the frame).
/// The main control: an `in` argument naming a field of the `inout`
/// header argument (`alias_in(hdr.p, hdr.p.x)`: the argument's value
/// before the body's writes), a block action given `hdr.p` that also
/// writes `hdr.p` itself (its write lost at copy-out), an `out` header
/// argument left invalid unless the body makes it valid (`mk`), and the
/// block's own checksum instance used directly (`Csum` in a block body:
/// its list arguments are block variables, as a block body's arguments
/// naming `hdr` would hand the headers to the walker).
const CALLS: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header p_t { bit<8> x; bit<8> y; bit<16> c; }
header q_t { bit<8> x; bit<8> y; bit<16> c; }
struct headers_t { p_t p; q_t q; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start {
        pkt.extract(hdr.p);
        transition select(hdr.p.x[0:0]) { 0: pq; default: accept; }
    }
    state pq { pkt.extract(hdr.q); transition accept; }
}
void upd(InternetChecksum chk, inout p_t h) {
    chk.clear();
    chk.set_state(~h.c);
    chk.subtract({ h.x, h.y });
    h.x = h.x - 1;
    chk.add({ h.x, h.y });
    h.c = chk.get();
}
void upd2(InternetChecksum k, inout q_t h) {
    k.subtract({ h.y, 8w3 });
    h.c = k.get_state();
}
void acc(InternetChecksum k, inout q_t h) {
    k.add({ h.x, h.c });
    h.y = h.y ^ k.get()[7:0];
    upd2(k, h);
}
void shadowed(InternetChecksum chk, inout p_t h) {
    chk.add({ h.y });
    if (h.y > 100) {
        bit<8> chk = h.x;
        h.y = chk + 1;
    }
}
void alias_in(inout p_t h, in bit<8> old) {
    h.x = h.x + 5;
    h.y = h.y ^ old;
}
void mk(out q_t h, in bit<8> v) {
    if (v > 128) {
        h.setValid();
        h.x = v;
        h.y = 1;
        h.c = 2;
    }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    InternetChecksum() mc;
    bit<8> mx;
    bit<8> my;
    action ab(inout p_t h) { h.x = 1; hdr.p.y = h.x + hdr.p.x; }
    apply {
        alias_in(hdr.p, hdr.p.x);
        if (hdr.p.y[1:1] == 1) { ab(hdr.p); }
        if (hdr.p.y[2:2] == 1) { mk(hdr.q, hdr.p.x); }
        mx = hdr.p.x;
        my = hdr.p.y;
        mc.clear();
        mc.add({ mx, my });
        mc.subtract({ 8w7 });
        hdr.p.c = hdr.p.c ^ mc.get();
        send_to_port((PortId_t)1);
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    InternetChecksum() c1;
    InternetChecksum() c2;
    bit<16> pc;
    apply {
        pc = hdr.p.c;
        c2.clear();
        c2.set_state(pc);
        upd(c1, hdr.p);
        if (hdr.q.isValid()) {
            acc(c2, hdr.q);
            acc(c1, hdr.q);
        }
        shadowed(c2, hdr.p);
        hdr.p.y = hdr.p.y ^ c2.get()[7:0];
        pkt.emit(hdr.p);
        pkt.emit(hdr.q);
    }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

/// Packets of 0 to 12 bytes, random (short ones reject).
fn packets(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut next = xorshift(seed);
    (0..n)
        .map(|_| {
            let len = (next() % 13) as usize;
            (0..len).map(|_| next() as u8).collect()
        })
        .collect()
}

#[test]
fn calls_with_bound_instances_agree_with_the_walker() {
    let (Some(mut fast), Some(mut reference)) =
        (load_text("calls.p4", CALLS), load_text("calls.p4", CALLS))
    else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    // Specialised: upd(c1, p), acc(c2, q) and its upd2(c2, q), acc(c1, q)
    // and its upd2(c1, q), shadowed(c2, p) (its header only).
    assert_eq!(fast.flat_calls(), 6);
    // Checksum calls on an instance known at load (`Csum`): none in the
    // plain function bodies (their receivers are parameters); upd's 5,
    // acc's 2 twice, upd2's `get_state` twice (its list holds a literal,
    // not a scalar-tier item), none in shadowed (its `chk` is not
    // bound); Main's and the Deparser's `clear` and `get` (their list and
    // `set_state` arguments are not compiled in a block body).
    assert_eq!(fast.bound_sites(), (5 + 2 * 2 + 2 + 2 + 2, 5));
    let pkts = packets(7, 1500);
    let sent = agree_on("calls", &mut fast, &mut reference, &pkts, |i| {
        (i % 3) as u32
    });
    assert!(sent > 500, "too few packets forwarded ({sent})");
}

/// A function given a header stack element (`upd(c1, hdr.s[1])`): the
/// program keeps the tree (no flat layout holds a stack), the call copies
/// the element in and out; the instance argument is evaluated by the
/// walker. Outputs and traces as the walker's.
const STACK: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header p_t { bit<8> x; bit<8> y; bit<16> c; }
struct headers_t { p_t[2] s; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.s[0]); pkt.extract(hdr.s[1]); transition accept; }
}
void upd(InternetChecksum chk, inout p_t h) {
    chk.clear();
    chk.set_state(~h.c);
    chk.subtract({ h.x, h.y });
    h.x = h.x - 1;
    chk.add({ h.x, h.y });
    h.c = chk.get();
}
void mk(out p_t h, in bit<8> v) {
    if (v > 128) { h.setValid(); h.x = v; h.y = 1; h.c = 2; }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    apply {
        if (hdr.s[0].y[0:0] == 1) { mk(hdr.s[1], hdr.s[0].x); }
        send_to_port((PortId_t)1);
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    InternetChecksum() c1;
    apply {
        if (hdr.s[1].isValid()) { upd(c1, hdr.s[1]); }
        upd(c1, hdr.s[0]);
        pkt.emit(hdr.s);
    }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

#[test]
fn a_function_given_a_header_stack_element_agrees_with_the_walker() {
    let (Some(mut fast), Some(mut reference)) =
        (load_text("stack.p4", STACK), load_text("stack.p4", STACK))
    else {
        return;
    };
    assert!(fast.flat_headers().is_err());
    let pkts = packets(11, 800);
    let sent = agree_on("stack", &mut fast, &mut reference, &pkts, |i| {
        (i % 3) as u32
    });
    assert!(sent > 200, "too few packets forwarded ({sent})");
}

/// A PNA program whose parser extracts header `l` (fields `fields`, the
/// first `bit<8> v`) in a loop until `v` is 0, running `stmt` each time
/// (after `top`'s declarations, with parser local `local`); `Main` runs
/// `main`. The step-limit programs below differ only there.
fn looping(fields: &str, top: &str, local: &str, stmt: &str, main: &str) -> String {
    format!(
        r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {{}}
header l_t {{ {fields} }}
struct headers_t {{ l_t l; }}
{top}
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {{
    {local}
    state start {{ transition more; }}
    state more {{
        pkt.extract(hdr.l);
        {stmt}
        transition select(hdr.l.v) {{ 0: accept; default: more; }}
    }}
}}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {{
    apply {{ {main} }}
}}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {{
    apply {{ pkt.emit(hdr.l); }}
}}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#
    )
}

/// `n` headers of `len` bytes of 1 (the loop goes on) and one whose `v`
/// is 0 (accept).
fn loop_pkt(len: usize) -> impl Fn(usize) -> Vec<u8> {
    move |n| {
        let mut p = vec![1u8; len * n + len];
        p[len * n] = 0;
        p
    }
}

/// A parser loop calling a function with a bound instance and checksum
/// calls per iteration (one byte pair per iteration): the run fails with
/// the step limit at the walker's iteration count, not later nor
/// earlier (the bound argument, `Csum`'s and its statement form's steps
/// are the walker's).
fn loop_program() -> String {
    looping(
        "bit<8> v; bit<8> w;",
        "void f(InternetChecksum c, inout l_t l) {
    c.clear();
    c.set_state(~l.w);
    c.add({ l.v, l.w });
    l.w = c.get()[7:0];
    c.subtract({ l.w });
}",
        "InternetChecksum() ck;",
        "f(ck, hdr.l);",
        "send_to_port((PortId_t) 1);",
    )
}

#[test]
fn the_step_limit_in_bound_calls_is_the_walkers() {
    let Some(fast) = load_text("loop.p4", &loop_program()) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    assert_eq!(fast.bound_sites(), (5, 1));
    limit_agrees("loop.p4", &loop_program(), loop_pkt(2));
}

/// The largest `n` for which `mk(n)` passes the walker and the program
/// (run `fast`) passes it too, and fails at `n + 1` as the walker does
/// (the step limit falls at the walker's iteration). `mk(n)`: a packet
/// looping `n` times in the parser.
fn limit_agrees(name: &str, text: &str, mk: impl Fn(usize) -> Vec<u8>) {
    let (Some(mut fast), Some(mut reference)) = (load_text(name, text), load_text(name, text))
    else {
        return;
    };
    let (lo, hi) = walker_limit(&mut reference, (10, 40_000), &mk);
    assert!(
        passes(&mut fast, &mk(lo), false),
        "{name}: fast fails at {lo}, the walker at {hi}"
    );
    assert!(
        !passes(&mut fast, &mk(hi), false),
        "{name}: fast passes at {hi}, the walker fails"
    );
}

/// A checksum list of 136 bits in a specialised body: not `CExpr::Csum`
/// (over 128 bits), so the method form with compiled arguments, whose
/// scalar sum declines at the third item (after counting the first two)
/// and takes the items' `Value`s (`data_sum_items` -> `list_vals`).
fn wide_program() -> String {
    looping(
        "bit<8> v; bit<64> a; bit<64> b;",
        "void f(InternetChecksum c, inout l_t l) {
    c.clear();
    c.add({ l.v, l.a, l.b });
    l.b = (bit<64>) c.get();
}",
        "InternetChecksum() ck;",
        "f(ck, hdr.l);",
        "send_to_port((PortId_t) 1);",
    )
}

#[test]
fn the_step_limit_in_a_wide_checksum_list_is_the_walkers() {
    limit_agrees("wide.p4", &wide_program(), loop_pkt(17));
}

/// `send_to_port` of an expression in the scalar tier (`ExternFn`'s
/// `port`) once per parser iteration.
fn port_program() -> String {
    looping(
        "bit<8> v; bit<8> w;",
        "",
        "",
        "send_to_port((PortId_t) (hdr.l.w + 8w1));",
        "send_to_port((PortId_t) (hdr.l.w + 8w1));",
    )
}

#[test]
fn the_step_limit_in_send_to_port_is_the_walkers() {
    limit_agrees("port.p4", &port_program(), loop_pkt(2));
}
