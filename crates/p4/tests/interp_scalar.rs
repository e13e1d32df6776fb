//! The scalar tier (`fast::scalar`): expressions on `bit<W>`/`int<W>`/
//! `bool` evaluated on `u128` must give the walker's
//! (`process_reference`) outputs and whole traces, for every operator
//! the tier takes at widths 1 to 128, signed and unsigned (wrap-around,
//! shifts by the width and more, slices, casts, signed comparisons), in
//! flat header fields and in local variables, in `if` conditions,
//! assignments, select keys and table keys; bool fields and variables,
//! `isValid`, constants and invalid headers' fields, flat and in a tree;
//! the tier must be in use (`Pipeline::scalar_sites`) and run per packet
//! (`Pipeline::scalar_runs`), and count the walker's steps (a parser
//! loop fails with the step limit at the walker's iteration).

mod interp_support;
use interp_support::{corpus, load, load_text, passes, walker_limit, xorshift};
use nicflow_p4::Pipeline;
use proptest::prelude::*;

const WIDTHS: [u32; 10] = [1, 7, 8, 16, 31, 32, 48, 63, 64, 128];

/// One input and one output header per (width, signedness), the main
/// control computing every operator into the output's fields.
fn program() -> String {
    let mut hdrs = String::new();
    let mut members = String::new();
    let mut extracts = String::new();
    let mut emits = String::new();
    let mut body = String::new();
    for w in WIDTHS {
        for signed in [false, true] {
            let id = format!("{}{w}", if signed { "s" } else { "u" });
            let t = format!("{}<{w}>", if signed { "int" } else { "bit" });
            let half = w / 2;
            let sw = w - half;
            let cat = if w <= 64 {
                format!("{}<{}> cat;", if signed { "int" } else { "bit" }, 2 * w)
            } else {
                String::new()
            };
            hdrs.push_str(&format!(
                "header i{id}_t {{ {t} a; {t} b; bit<8> n; }}\n\
                 header o{id}_t {{ {t} add; {t} sub; {t} mul; {t} band; {t} bor; {t} bxor;\n\
                   {t} bnot; {t} neg; {t} pos; {t} shl; {t} shr; {t} shl3; {t} shr3; {t} shlw;\n\
                   {t} shrw; {t} addl; {t} subl; {t} x1; {t} x2; {t} sel; bool eq; bool ne;\n\
                   bool lt; bool le; bool gt; bool ge; bool lg; bit<1> c1; bit<{sw}> sl;\n\
                   bit<1> top; bit<8> c8; bit<128> c128; int<64> s64; {t} back; {cat} }}\n"
            ));
            members.push_str(&format!("    i{id}_t i{id}; o{id}_t o{id};\n"));
            extracts.push_str(&format!(
                "        pkt.extract(hdr.i{id}); pkt.extract(hdr.o{id});\n"
            ));
            emits.push_str(&format!(
                "        pkt.emit(hdr.i{id}); pkt.emit(hdr.o{id});\n"
            ));
            let i = format!("hdr.i{id}");
            let o = format!("hdr.o{id}");
            let cat_line = if w <= 64 {
                format!("{o}.cat = {i}.a ++ {i}.b;")
            } else {
                String::new()
            };
            // bit<W> <-> int<W> for the casts that change the width: the
            // checker's rule (a cast changes the sign or the width).
            let (to_bits, from_bits) = if signed {
                (
                    format!("(bit<{w}>) {i}.a"),
                    format!("(int<{w}>) {o}.c128[{}:0]", w - 1),
                )
            } else {
                (format!("{i}.a"), format!("{o}.c128[{}:0]", w - 1))
            };
            body.push_str(&format!(
                "        {{
            {o}.add = {i}.a + {i}.b;
            {o}.sub = {i}.a - {i}.b;
            {o}.mul = {i}.a * {i}.b;
            {o}.band = {i}.a & {i}.b;
            {o}.bor = {i}.a | {i}.b;
            {o}.bxor = {i}.a ^ {i}.b;
            {o}.bnot = ~{i}.a;
            {o}.neg = -{i}.a;
            {o}.pos = +{i}.b;
            {o}.shl = {i}.a << {i}.n;
            {o}.shr = {i}.a >> {i}.n;
            {o}.shl3 = {i}.a << 3;
            {o}.shr3 = {i}.b >> 3;
            {o}.shlw = {i}.a << {w};
            {o}.shrw = {i}.b >> 200;
            {o}.addl = {i}.a + 1;
            {o}.subl = 3 - {i}.b;
            {o}.eq = {i}.a == {i}.b;
            {o}.ne = {i}.a != {i}.b;
            {o}.lt = {i}.a < {i}.b;
            {o}.le = {i}.a <= {i}.b;
            {o}.gt = {i}.a > {i}.b;
            {o}.ge = {i}.a >= 0;
            {o}.lg = !({i}.a < {i}.b) && {o}.ne || {i}.n[0:0] == 1;
            {o}.c1 = (bit<1>) ({i}.a < {i}.b);
            {o}.sl = (bit<{sw}>) ({to_bits})[{hi}:{half}];
            {o}.top = ((bit<{w}>) ({to_bits}))[{hi}:{hi}];
            {o}.c8 = (bit<8>) ({to_bits});
            {o}.c128 = (bit<128>) ({to_bits}) + (bit<128>) {i}.n;
            {o}.s64 = (int<64>) {i}.b;
            {o}.back = {from_bits} ^ {i}.b;
            {cat_line}
            if ({i}.a > {i}.b && !({i}.a == 0) || {i}.n > 200) {{
                {o}.sel = {i}.a;
            }} else {{
                {o}.sel = {i}.b - 1;
            }}
            {t} x = {i}.a;
            {t} y = {i}.b;
            {o}.x1 = x * y + (x ^ 5) - (y >> {i}.n);
            x = x + y;
            if (x < y || x == 0) {{ x = ~x; }}
            {o}.x2 = x;
        }}
",
                hi = w - 1,
            ));
        }
    }
    format!(
        r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {{}}
header k_t {{ bit<8> k; }}
header pad_t {{ bit<{pad}> p; }}
{hdrs}
struct headers_t {{
    k_t k0; k_t k1;
{members}    pad_t pad;
}}
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {{
    state start {{
        pkt.extract(hdr.iu8);
        transition select(hdr.iu8.a[1:0], hdr.iu8.n[0:0] ^ hdr.iu8.b[7:7]) {{
            (2w0, _): p0;
            (2w1, 1w1): p1;
            (3, 0): p1;
            default: rest;
        }}
    }}
    state p0 {{ pkt.extract(hdr.k0); transition rest; }}
    state p1 {{ pkt.extract(hdr.k1); transition rest; }}
    state rest {{
        pkt.extract(hdr.ou8);
{extracts}        pkt.extract(hdr.pad);
        transition accept;
    }}
}}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {{
    action nop() {{ }}
    table t {{
        key = {{ hdr.iu8.a ^ hdr.iu8.b : exact; hdr.is16.a[7:0] + 1 : exact; }}
        actions = {{ nop; }}
        default_action = nop;
    }}
    apply {{
{body}        t.apply();
        send_to_port((PortId_t) 1);
    }}
}}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {{
    apply {{
        pkt.emit(hdr.k0);
        pkt.emit(hdr.k1);
{emits}        pkt.emit(hdr.pad);
    }}
}}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#,
        pad = pad_bits()
    )
    .replace("        pkt.extract(hdr.iu8); pkt.extract(hdr.ou8);\n", "")
}

fn build() -> Option<Pipeline> {
    load_text("scalar.p4", &program())
}

/// Bits of the input and output headers over all (width, signedness).
fn header_bits() -> u32 {
    let per: u32 = WIDTHS.iter().map(|w| 2 * w + 8).sum::<u32>() * 2;
    let out: u32 = WIDTHS
        .iter()
        .map(|&w| {
            let cat = if w <= 64 { 2 * w } else { 0 };
            20 * w + 7 + 1 + (w - w / 2) + 1 + 8 + 128 + 64 + w + cat
        })
        .sum::<u32>()
        * 2;
    per + out
}

/// The last header's width: the emitted bits a whole number of bytes.
fn pad_bits() -> u32 {
    8 + (8 - header_bits() % 8) % 8
}

/// Bytes of all headers (one `k_t` of the parser's optional ones), and two.
fn packet_len() -> usize {
    ((header_bits() + pad_bits() + 8) / 8 + 2) as usize
}

/// `seed`'s packets: random bytes, some with the shift amounts small or
/// the operands equal, some cut short (the parser rejects them).
fn packets(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut next = xorshift(seed);
    let len = packet_len();
    (0..n)
        .map(|k| {
            let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            match k % 5 {
                // Small values everywhere (shift amounts below the width,
                // equal and zero operands more often).
                0 => p.iter_mut().for_each(|b| *b &= 0x03),
                1 => p
                    .iter_mut()
                    .for_each(|b| *b = if *b & 1 == 0 { 0 } else { 0xff }),
                2 => p.truncate((next() as usize) % len),
                _ => {}
            }
            p
        })
        .collect()
}

/// Each packet through `fast.process` and `reference.process_reference`:
/// outputs and whole traces equal.
fn agree(fast: &mut Pipeline, reference: &mut Pipeline, pkts: &[Vec<u8>]) -> usize {
    let mut sent = 0;
    for (i, p) in pkts.iter().enumerate() {
        let runs = fast.scalar_runs();
        let a = fast.process(0, p, i as u64);
        let b = reference.process_reference(0, p, i as u64);
        // The tier ran for this packet (its results equal the walker's,
        // so only the count can say so).
        if !a.outputs.is_empty() {
            assert!(
                fast.scalar_runs() > runs,
                "packet {i}: the tier did not run"
            );
        }
        assert_eq!(
            a,
            b,
            "packet {i} ({} bytes): scalar tier != walker",
            p.len()
        );
        sent += a.outputs.len();
    }
    assert_eq!(fast.error_count(), reference.error_count());
    sent
}

#[test]
fn every_operator_at_every_width_agrees_with_the_walker() {
    let (Some(mut fast), Some(mut reference)) = (build(), build()) else {
        return;
    };
    assert_eq!(fast.flat_headers(), Ok(()));
    let (scalar, all) = fast.scalar_sites();
    // Every assignment, condition, initialiser, select key and table key
    // of the program is of the tier's shapes; the one site that is not is
    // `send_to_port`'s constant argument (compiled, a literal left a
    // literal).
    assert_eq!(
        scalar + 1,
        all,
        "{scalar} of {all} sites in the scalar tier"
    );
    assert!(scalar > 20 * WIDTHS.len() * 2, "{scalar}");
    let sent = agree(&mut fast, &mut reference, &packets(7, 300));
    assert!(sent >= 100, "only {sent} forwarded");
}

#[test]
fn routing_uses_the_scalar_tier() {
    let Some(p) = load("pna/routing.p4") else {
        return;
    };
    // routing.p4's compiled value sites: the `if` condition, the select
    // key, both table keys, the actions' two assignments, `send_to_port`'s
    // argument (compiled: `CExpr::ExternFn`'s `cargs`), and in
    // `ip_ttl_dec` (its plain body and its body for the flat `hdr.ip`)
    // `ip.ttl = ip.ttl - 1`, the `set_state` argument and the four
    // checksum list items; only `ip.hdrChecksum = chk.get()` (twice) is
    // not of the tier's shapes.
    assert_eq!(p.scalar_sites(), (14, 16));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_values_agree_with_the_walker(bytes in proptest::collection::vec(any::<u8>(), 16..64), fill in any::<u8>()) {
        let (Some(mut fast), Some(mut reference)) = (build(), build()) else {
            return Ok(());
        };
        // The random bytes repeated over the whole packet, every other
        // repetition xored with `fill` (operands equal or not).
        let len = packet_len();
        let p: Vec<u8> = (0..len)
            .map(|i| bytes[i % bytes.len()] ^ if (i / bytes.len()) % 2 == 1 { fill } else { 0 })
            .collect();
        let a = fast.process(0, &p, 1);
        let b = reference.process_reference(0, &p, 1);
        prop_assert_eq!(a, b);
    }
}

/// A program mixing the tier's leaves and nodes the differential above
/// does not reach (after the p4scalar review's own test): reads of an
/// invalid header's fields, `isValid` on flat headers and on a header
/// variable, block constants, `bool` variables and `bool` header fields
/// in `&&`/`||`/`if` (each read there only: its source must be recorded there), a field read only through
/// a local (the variable leaf's source), unary `-` compared and shifted
/// (its mask), slices of slices, huge shift literals, `int<128>`.
fn misc_program(body: &str) -> String {
    format!(
        r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {{}}
const bit<8> KC = 7;
const int<8> KS = -3;
header a_t {{ bit<8> x; bit<8> y; int<8> s; int<8> t; bit<8> n; bit<1> one; bit<7> r;
  bit<128> w; int<128> sw; bit<16> x16; bool f; bool g; bool h; bool k; bit<4> r2; bit<8> lo; bit<8> lo2; }}
header b_t {{ bit<8> x; bit<8> y; int<8> s; bit<8> n; }}
header l_t {{ bit<8> v; }}
header o_t {{ bit<8> o1; bit<8> o2; bit<8> o3; bit<8> o4; bit<8> o5; bit<8> o6; bit<8> o7; bit<8> o8;
  int<8> s1; int<8> s2; int<16> s3; bit<16> u3; bit<128> w1; bit<128> w2; int<128> sw1; int<128> sw2;
  bit<8> b1; bit<8> b2; bit<8> b3; bit<8> b4; bit<8> m1; bit<8> m2; bit<8> m3; bit<8> m4; }}
struct headers_t {{ a_t a; b_t b; l_t l; o_t o; }}
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {{
    state start {{
        pkt.extract(hdr.a);
        pkt.extract(hdr.o);
        transition select(hdr.a.x[0:0]) {{
            1: getb;
            default: accept;
        }}
    }}
    state getb {{ pkt.extract(hdr.b); transition accept; }}
}}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {{
    action setv(bit<8> v) {{ hdr.o.b4 = v + hdr.a.x; }}
    apply {{
{body}
        send_to_port((PortId_t) 1);
    }}
}}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {{
    apply {{ pkt.emit(hdr.a); pkt.emit(hdr.o); pkt.emit(hdr.b); pkt.emit(hdr.l); }}
}}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#
    )
}

/// The body; `TREE` lines (header variables, `setInvalid`, `setValid`)
/// keep the headers a tree, without them they are flat.
const MISC_BODY: &str = r#"
        hdr.o.o1 = hdr.b.x + hdr.b.y;
        if (hdr.b.x == 0 && !hdr.b.isValid()) { hdr.o.o2 = 1; } else { hdr.o.o2 = 2; }
        if (hdr.b.isValid() && hdr.b.n > 3) { hdr.o.o3 = 1; } else { hdr.o.o3 = hdr.b.y + 3; }
        if (!hdr.b.isValid() || hdr.b.s < 0) { hdr.o.o4 = hdr.b.n >> 1; }
        b_t tmp = hdr.b; // TREE
        hdr.b.setInvalid(); // TREE
        hdr.o.o5 = hdr.b.x ^ hdr.a.y;
        if (tmp.isValid() && tmp.x == hdr.a.y) { hdr.o.o6 = tmp.y; } // TREE
        bool fl = hdr.a.x > KC;
        bool g = fl || hdr.a.s < KS;
        if (g && !fl) { hdr.o.o7 = KC + hdr.a.n; }
        hdr.o.o8 = (bit<8>) fl + (bit<8>) (bit<1>) g;
        if (hdr.a.f) { hdr.o.m1 = 1; }
        if (hdr.a.x16 == 3 && hdr.a.g) { hdr.o.m2 = 2; }
        if (hdr.a.x16 == 5 || hdr.a.h) { hdr.o.m3 = 3; }
        bool hf = hdr.a.k;
        if (hf) { hdr.o.m4 = hdr.o.m4 + 1; }
        bit<8> only = hdr.a.lo;
        if (only == 2) { hdr.o.m4 = hdr.o.m4 ^ 8; }
        bit<8> only2 = hdr.a.lo2;
        hdr.o.m1 = hdr.o.m1 + only2;
        if ((-hdr.a.y) == hdr.a.n) { hdr.o.m2 = hdr.o.m2 + 16; }
        hdr.o.m3 = hdr.o.m3 + ((-hdr.a.y) >> 1);
        hdr.o.s1 = hdr.a.s >> hdr.a.n;
        if (hdr.a.s < -1) { hdr.o.s2 = hdr.a.s; } else { hdr.o.s2 = -hdr.a.t; }
        hdr.o.s3 = (int<16>) hdr.a.s + (int<16>) hdr.a.t * 300;
        if (((bit<16>) ((int<16>) hdr.a.s)) == 0) { hdr.o.u3 = 1; } else { hdr.o.u3 = (bit<16>)(hdr.a.s ++ hdr.a.x); }
        hdr.o.w1 = hdr.a.w >> 18446744073709551616;
        hdr.o.w2 = hdr.a.w << 340282366920938463463374607431768211456 | hdr.a.w[127:64] ++ hdr.a.w[63:0];
        hdr.o.sw1 = hdr.a.sw >> 100000000000000000000000;
        hdr.o.sw2 = (hdr.a.sw >> hdr.a.n) * hdr.a.sw - (int<128>) hdr.a.x;
        hdr.o.b1 = (bit<8>) (int<8>) -1 + (bit<8>) 300 + (bit<8>) (bool) 1;
        hdr.o.b2 = hdr.a.x16[11:4][6:2] ++ hdr.a.one ++ hdr.a.r[1:0];
        if (hdr.a.one == 1 || hdr.b.x[3:0] == 4w3) { hdr.o.b3 = hdr.a.x16[15:8]; }
        if (hdr.a.s >= -128 && hdr.a.t <= 127 && hdr.a.s != KS) { setv(hdr.a.y); }
        bit<8> q = hdr.a.x;
        q = q - 1;
        if (q > hdr.a.y) { q = q * q; }
        hdr.l.setValid(); // TREE
        hdr.l.v = q; // TREE
"#;

/// `seed`'s `n` packets of `len` bytes: random, small (0..=3) or
/// all-0/all-1 bytes.
fn misc_packets(seed: u64, n: usize, len: usize) -> Vec<Vec<u8>> {
    let mut next = xorshift(seed);
    (0..n)
        .map(|k| {
            let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            match k % 4 {
                0 => p.iter_mut().for_each(|b| *b &= 3),
                1 => p
                    .iter_mut()
                    .for_each(|b| *b = if *b & 1 == 0 { 0 } else { 0xff }),
                _ => {}
            }
            p
        })
        .collect()
}

fn build_src(src: &str) -> Option<Pipeline> {
    load_text("misc.p4", src)
}

fn misc(flat: bool) {
    let body: String = MISC_BODY
        .lines()
        .filter(|l| !flat || !l.ends_with("// TREE"))
        .map(|l| format!("{l}\n"))
        .collect();
    let src = misc_program(&body);
    let (Some(mut fast), Some(mut reference)) = (build_src(&src), build_src(&src)) else {
        return;
    };
    assert_eq!(
        fast.flat_headers().is_ok(),
        flat,
        "{:?}",
        fast.flat_headers()
    );
    let sent = agree(&mut fast, &mut reference, &misc_packets(3, 2000, 140));
    assert!(sent >= 1000, "only {sent} forwarded");
}

#[test]
fn misc_leaves_agree_with_the_walker_flat() {
    misc(true)
}

#[test]
fn misc_leaves_agree_with_the_walker_tree() {
    misc(false)
}

/// A parser loop of one byte per iteration whose select keys are in the
/// tier (slices, a concatenation): the run fails with the step limit at
/// the walker's iteration count, not later (the tier charges the
/// walker's steps per node: 3 per slice) nor earlier; in flat headers
/// and in a tree (`setInvalid` in the control).
fn step_limit(tree: bool) {
    let src = format!(
        r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {{}}
header l_t {{ bit<8> v; }}
struct headers_t {{ l_t l; }}
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {{
    state start {{ transition more; }}
    state more {{
        pkt.extract(hdr.l);
        transition select(hdr.l.v[7:4] ++ hdr.l.v[3:0], hdr.l.v[3:0]) {{
            (0, _): accept;
            default: more;
        }}
    }}
}}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {{
    apply {{
        {}
        send_to_port((PortId_t) 1);
    }}
}}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {{
    apply {{ pkt.emit(hdr.l); }}
}}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#,
        if tree { "hdr.l.setInvalid();" } else { "" }
    );
    let (Some(mut fast), Some(mut reference)) = (build_src(&src), build_src(&src)) else {
        return;
    };
    assert_eq!(fast.flat_headers().is_ok(), !tree);
    // `n` bytes of 1 (the loop goes on) and a 0 (accept).
    let pkt = |n: usize| {
        let mut p = vec![1u8; n + 1];
        p[n] = 0;
        p
    };
    // The walker's first failing count (it passes at 100, fails at 60000).
    let (lo, hi) = walker_limit(&mut reference, (100, 60_000), &pkt);
    let runs = fast.scalar_runs();
    assert!(
        passes(&mut fast, &pkt(lo), false),
        "fast fails at {lo}, the walker at {hi}"
    );
    assert!(fast.scalar_runs() > runs, "the tier did not run");
    assert!(
        !passes(&mut fast, &pkt(hi), false),
        "fast passes at {hi}, the walker fails"
    );
}

#[test]
fn step_limit_is_the_walkers_in_flat_headers() {
    step_limit(false)
}

#[test]
fn step_limit_is_the_walkers_in_a_tree() {
    step_limit(true)
}

/// Actions whose parameters are action data of the tier's types, bound
/// as scalars (`fast::SAction`) or, when the body needs them in the
/// frame, not: each table's action reads its parameters by value in
/// assignments, conditions, arithmetic, casts, slices and `send_to_port`
/// (compiled, the headers kept flat), one hides a parameter under a
/// local of the same name in a nested block, one passes a parameter to a
/// function (the frame's way). (No entry gives fewer data than
/// parameters, so `call_scalar_action`'s arm for a missing datum is not
/// run here.) Outputs and traces must be the walker's, and the
/// scalar-bound calls must run (`Pipeline::scalar_action_calls`).
const ACTIONS_P4: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header h_t { bit<8> k; bit<8> a; bit<16> b; bit<48> m; bit<8> o1; bit<16> o2; int<16> o3; bit<8> o4; bit<32> port; }
struct headers_t { h_t h; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.h); transition accept; }
}
bit<8> twice(in bit<8> x) { return x + x; }
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    bit<16> v16;
    action fwd(bit<48> dmac, PortId_t port) {
        hdr.h.m = dmac;
        send_to_port(port);
    }
    action mix(int<16> s, bool f, bit<8> n) {
        hdr.h.o3 = s + (int<16>) hdr.h.b;
        if (f && n > hdr.h.a) {
            hdr.h.o1 = n ^ hdr.h.a;
        } else {
            hdr.h.o1 = n[3:0] ++ hdr.h.a[3:0];
        }
        v16 = (bit<16>) n + hdr.h.b;
        hdr.h.o2 = v16;
        send_to_port((PortId_t) n);
    }
    action hide(bit<8> n) {
        hdr.h.o1 = n;
        {
            bit<8> n = hdr.h.a + 1;
            hdr.h.o4 = n;
        }
        hdr.h.o2 = (bit<16>) n;
        send_to_port(2);
    }
    action pass(bit<8> n) {
        hdr.h.o4 = twice(n);
        send_to_port(3);
    }
    action none() { drop_packet(); }
    table t {
        key = { hdr.h.k : exact; }
        actions = { fwd; mix; hide; pass; none; }
        default_action = mix(-3, true, 7);
    }
    apply { t.apply(); }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

fn actions_pipeline() -> Option<Pipeline> {
    use nicflow_p4::runtime::{EntrySpec, KeyMatch};
    use num_bigint::BigUint;
    let c = corpus()?;
    let prog = nicflow_p4::front::parse_str("actions.p4", ACTIONS_P4, &[c.join("include")])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut p = Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}"));
    // (key, action, (parameter, value)s).
    type Entry<'e> = (u8, &'e str, &'e [(&'e str, u64)]);
    let entries: [Entry; 6] = [
        (1, "fwd", &[("dmac", 0x0a0b_0c0d_0e0f), ("port", 7)]),
        (2, "mix", &[("s", 0xfff0), ("f", 1), ("n", 200)]),
        (3, "mix", &[("s", 5), ("f", 0), ("n", 9)]),
        (4, "hide", &[("n", 77)]),
        (5, "pass", &[("n", 21)]),
        (6, "none", &[]),
    ];
    for (k, action, params) in entries {
        p.table_add(
            "t",
            EntrySpec {
                keys: vec![KeyMatch::Exact(BigUint::from(k))],
                action: action.into(),
                params: params
                    .iter()
                    .map(|(n, v)| (n.to_string(), BigUint::from(*v)))
                    .collect(),
                priority: None,
            },
        )
        .unwrap_or_else(|e| panic!("{action}: {e:?}"));
    }
    Some(p)
}

#[test]
fn action_parameters_bound_as_scalars_agree_with_the_walker() {
    let (Some(mut fast), Some(mut reference)) = (actions_pipeline(), actions_pipeline()) else {
        return;
    };
    // `send_to_port`'s compiled argument keeps the headers flat.
    assert_eq!(fast.flat_headers(), Ok(()));
    let mut next = xorshift(41);
    let mut bound = 0;
    for i in 0..400u64 {
        let mut p: Vec<u8> = (0..24).map(|_| next() as u8).collect();
        // Keys 0-7: every entry, the default (mix) for 0 and 7.
        p[0] &= 7;
        if i % 7 == 0 {
            p.truncate((next() as usize) % 24);
        }
        let calls = fast.scalar_action_calls();
        let a = fast.process(0, &p, i);
        let b = reference.process_reference(0, &p, i);
        assert_eq!(a, b, "packet {i} ({} bytes, key {:?})", p.len(), p.first());
        // Which calls are scalar-bound: fwd, mix (entries and default)
        // and hide; not pass (its parameter goes to a function) nor none
        // (no parameters).
        let scalar = p.len() >= 20 && !matches!(p[0], 5 | 6);
        assert_eq!(
            fast.scalar_action_calls() - calls,
            u64::from(scalar),
            "packet {i}: key {}",
            p[0]
        );
        bound += u64::from(scalar);
    }
    assert!(bound > 200, "{bound}");
    assert_eq!(fast.error_count(), reference.error_count());
    assert_eq!(fast.error_count(), 0);
}

/// Review p4early MUST-FIX 1: a block action called from another action
/// of its block runs without a barrier, so by the walker's dynamic scope
/// it sees its caller's frame. `outer`'s parameter `v` shadows the block
/// variable `v` that `inner` reads; `outer2`'s `v` is written by `wr`
/// (the walker writes the parameter, not the block's `v`); `outer3`'s
/// `w` is a name only the callee `inner_w` reads (undeclared there: the
/// checker does not resolve names). None of them may be scalar-bound
/// (`fast::SAction`): bound, their parameters are in no frame and the
/// callee finds the block's `v` (or nothing). `plain` is, to show the
/// count works.
const SCOPE_P4: &str = r#"
#include <core.p4>
#include <tc/pna.p4>
struct metadata_t {}
header h_t { bit<8> k; bit<8> a; bit<8> o1; bit<8> o2; bit<8> o4; bit<32> port; }
struct headers_t { h_t h; }
parser Parser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
              in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control Main(inout headers_t hdr, inout metadata_t meta,
             in pna_main_input_metadata_t istd, inout pna_main_output_metadata_t ostd) {
    bit<8> v;
    action inner() { hdr.h.o1 = v; }
    action outer(bit<8> v) { inner(); }
    action wr() { v = 9; }
    action outer2(bit<8> v) { wr(); hdr.h.o4 = v; }
    action inner_w() { hdr.h.o4 = w; }
    action outer3(bit<8> w) { inner_w(); }
    action plain(bit<8> n) { hdr.h.o1 = n; }
    table t {
        key = { hdr.h.k : exact; }
        actions = { outer; outer2; outer3; plain; }
        default_action = outer(3);
    }
    apply {
        v = 5;
        t.apply();
        hdr.h.o2 = v;
        send_to_port((PortId_t) 1);
    }
}
control Deparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                 in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}
PNA_NIC(Parser(), Main(), Deparser()) main;
"#;

fn scope_pipeline() -> Option<Pipeline> {
    use nicflow_p4::runtime::{EntrySpec, KeyMatch};
    use num_bigint::BigUint;
    let c = corpus()?;
    let prog = nicflow_p4::front::parse_str("scope.p4", SCOPE_P4, &[c.join("include")])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut p = Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}"));
    let entries: [(u8, &str, &str, u64); 4] = [
        (1, "outer", "v", 40),
        (2, "outer2", "v", 41),
        (3, "outer3", "w", 42),
        (4, "plain", "n", 43),
    ];
    for (k, action, prm, v) in entries {
        p.table_add(
            "t",
            EntrySpec {
                keys: vec![KeyMatch::Exact(BigUint::from(k))],
                action: action.into(),
                params: vec![(prm.to_string(), BigUint::from(v))],
                priority: None,
            },
        )
        .unwrap_or_else(|e| panic!("{action}: {e:?}"));
    }
    Some(p)
}

#[test]
fn an_action_whose_callee_sees_its_frame_keeps_its_parameters_there() {
    let (Some(mut fast), Some(mut reference)) = (scope_pipeline(), scope_pipeline()) else {
        return;
    };
    let mut next = xorshift(43);
    for i in 0..200u64 {
        let mut p: Vec<u8> = (0..10).map(|_| next() as u8).collect();
        // Keys 0-4: every entry; the default (outer) for 0.
        p[0] %= 5;
        let calls = fast.scalar_action_calls();
        let a = fast.process(0, &p, i);
        let b = reference.process_reference(0, &p, i);
        assert_eq!(a, b, "packet {i} (key {})", p[0]);
        // Only `plain` is scalar-bound.
        assert_eq!(
            fast.scalar_action_calls() - calls,
            u64::from(p[0] == 4),
            "packet {i}: key {}",
            p[0]
        );
    }
    assert_eq!(fast.error_count(), reference.error_count());
}
