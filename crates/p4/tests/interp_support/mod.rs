//! Test support for the interpreter tests: locating the corpus, loading
//! programs and a tiny STF reader (the real STF runner is crate::stf).

#![allow(dead_code)]

use nicflow_p4::runtime::{EntrySpec, KeyMatch, MatchKind};
use nicflow_p4::Pipeline;
use num_bigint::BigUint;
use num_traits::Num;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;

/// A xorshift64 generator from `seed` (made odd, so never stuck at 0):
/// the random tests' packets, reproducible from their printed seeds.
pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

pub fn corpus() -> Option<PathBuf> {
    let found =
        nicflow_p4::corpus::find_corpus(&[std::path::Path::new(env!("CARGO_MANIFEST_DIR"))]);
    if found.is_none() {
        eprintln!("p4 corpus not found; skipping");
    }
    found
}

/// A program given as text (`name` for its errors), parsed with the
/// corpus's include files and loaded; `None` when the corpus is not on
/// this machine, a panic naming the error when it does not load.
#[allow(dead_code)] // not every test binary that includes this uses it
pub fn load_text(name: &str, text: &str) -> Option<Pipeline> {
    let c = corpus()?;
    let prog = nicflow_p4::front::parse_str(name, text, &[c.join("include")])
        .unwrap_or_else(|e| panic!("{e}"));
    Some(Pipeline::load_program(prog, None).unwrap_or_else(|e| panic!("{e}")))
}

pub fn load(rel: &str) -> Option<Pipeline> {
    let c = corpus()?;
    let inc = vec![c.join("include")];
    match Pipeline::load(&c.join(rel), &inc, None) {
        Ok(p) => Some(p),
        Err(e) => panic!("{rel}: {e}"),
    }
}

/// routing.p4's tables filled for forwarding: one `fib_table` route per
/// `(prefix, length)`, all to next hop 1, which sends out of `port` with
/// destination MAC 1.
#[allow(dead_code)] // not every test binary that includes this uses it
pub fn add_routes(p: &mut Pipeline, routes: &[(u32, u32)], port: u8) {
    use nicflow_p4::runtime::{EntrySpec, KeyMatch};
    for &(prefix, len) in routes {
        p.table_add(
            "fib_table",
            EntrySpec {
                keys: vec![KeyMatch::Lpm(BigUint::from(prefix), len)],
                action: "set_nhid".into(),
                params: vec![("index".into(), BigUint::from(1u8))],
                priority: None,
            },
        )
        .unwrap();
    }
    p.table_add(
        "nh_table",
        EntrySpec {
            keys: vec![KeyMatch::Exact(BigUint::from(1u8))],
            action: "set_nh".into(),
            params: vec![
                ("dmac".into(), BigUint::from(1u8)),
                ("port".into(), BigUint::from(port)),
            ],
            priority: None,
        },
    )
    .unwrap();
}

fn parse_num(s: &str) -> BigUint {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        BigUint::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {s}"))
    } else if let Some(b) = s.strip_prefix("0b") {
        BigUint::from_str_radix(b, 2).unwrap()
    } else {
        BigUint::from_str_radix(s, 10).unwrap_or_else(|_| panic!("bad number {s}"))
    }
}

/// `0x****0101` -> (value, mask), nibble wildcards.
fn parse_ternary(s: &str, width: u32) -> (BigUint, BigUint) {
    if let Some((v, m)) = s.split_once("&&&") {
        return (parse_num(v), parse_num(m));
    }
    let h = s.strip_prefix("0x").unwrap_or(s);
    if !h.contains('*') {
        let v = parse_num(s);
        let m = (BigUint::from(1u8) << width) - 1u8;
        return (v, m);
    }
    let mut v = BigUint::from(0u8);
    let mut m = BigUint::from(0u8);
    for c in h.chars() {
        v <<= 4;
        m <<= 4;
        if c != '*' {
            v += c.to_digit(16).unwrap();
            m += 15u8;
        }
    }
    (v, m)
}

fn parse_entry(
    p: &Pipeline,
    table: &str,
    prio: Option<u32>,
    keys: &[&str],
    action: &str,
    args: &str,
) -> EntrySpec {
    let info = p.table_info(table).unwrap_or_else(|e| panic!("{e}"));
    let mut km: Vec<KeyMatch> = info
        .keys
        .iter()
        .map(|k| match k.match_kind {
            MatchKind::Exact => KeyMatch::Exact(BigUint::from(0u8)),
            _ => KeyMatch::Any,
        })
        .collect();
    for kv in keys {
        let (name, val) = kv.split_once(':').unwrap_or_else(|| panic!("bad key {kv}"));
        let name = name
            .replace('$', "[")
            .replace(".", "].")
            .replacen("].", ".", 0);
        // `extra$0.h` -> `extra[0].h`
        let name = fix_stack_name(&name, kv);
        let i = info
            .keys
            .iter()
            .position(|k| k.is_named(&name) || k.name.ends_with(&format!(".{name}")))
            .unwrap_or_else(|| panic!("table {table} has no key {name} ({:?})", info.keys));
        let k = &info.keys[i];
        km[i] = match k.match_kind {
            MatchKind::Lpm => match val.split_once('/') {
                Some((v, l)) => KeyMatch::Lpm(parse_num(v), l.parse().unwrap()),
                None => KeyMatch::Lpm(parse_num(val), k.width),
            },
            MatchKind::Ternary => {
                let (v, m) = parse_ternary(val, k.width);
                KeyMatch::Ternary(v, m)
            }
            MatchKind::Range => match val.split_once("->") {
                Some((a, b)) => KeyMatch::Range(parse_num(a), parse_num(b)),
                None => KeyMatch::Exact(parse_num(val)),
            },
            MatchKind::Optional => KeyMatch::Optional(Some(parse_num(val))),
            _ => KeyMatch::Exact(parse_num(val)),
        };
    }
    EntrySpec {
        keys: km,
        action: action.to_string(),
        params: parse_args(args),
        priority: prio,
    }
}

fn fix_stack_name(_mangled: &str, kv: &str) -> String {
    let raw = kv.split_once(':').unwrap().0;
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' {
            out.push('[');
            while let Some(d) = chars.peek() {
                if d.is_ascii_digit() {
                    out.push(*d);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(']');
        } else {
            out.push(c);
        }
    }
    out
}

fn parse_args(args: &str) -> Vec<(String, BigUint)> {
    args.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|a| {
            let (n, v) = a.split_once(':').unwrap_or_else(|| panic!("bad arg {a}"));
            (n.trim().to_string(), parse_num(v))
        })
        .collect()
}

/// An expected frame: nibbles (None = `*`) and exact-length flag.
#[derive(Debug)]
pub struct Expect {
    pub nibbles: Vec<Option<u8>>,
    pub exact: bool,
}

impl Expect {
    pub fn matches(&self, got: &[u8]) -> bool {
        let gn: Vec<u8> = got.iter().flat_map(|b| [b >> 4, b & 15]).collect();
        if gn.len() < self.nibbles.len() || (self.exact && gn.len() != self.nibbles.len()) {
            return false;
        }
        self.nibbles
            .iter()
            .zip(&gn)
            .all(|(e, g)| e.map(|e| e == *g).unwrap_or(true))
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    let h: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Runs an STF file against the pipeline; returns a list of failures.
pub fn run_stf(p: &mut Pipeline, stf: &str) -> Vec<String> {
    run_stf_on(&mut [p], stf, &mut |ps, port, bytes, now| {
        ps[0].process(port, bytes, now)
    })
}

/// How [`run_stf_on`] runs one STF packet: (pipelines, port, frame, time).
pub type ProcessFn<'a> =
    dyn FnMut(&mut [&mut Pipeline], u32, &[u8], u64) -> nicflow_p4::Outcome + 'a;

/// Runs an STF file with its table, mirroring and multicast commands
/// applied to every pipeline of `ps` and its packets given to `process`
/// (which decides which pipelines run them); the expectations are
/// checked against what `process` returns.
pub fn run_stf_on(ps: &mut [&mut Pipeline], stf: &str, process: &mut ProcessFn<'_>) -> Vec<String> {
    let mut expects: BTreeMap<u32, VecDeque<(usize, Expect)>> = BTreeMap::new();
    let mut got: BTreeMap<u32, VecDeque<(usize, Vec<u8>)>> = BTreeMap::new();
    let mut fails = Vec::new();
    let mut now = 1_000_000_000u64;
    let mut packet_lines = 0;
    let mut groups: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    let mut nodes: Vec<(u32, u32)> = Vec::new();
    for (ln, line) in stf.lines().enumerate() {
        let ln = ln + 1;
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let (cmd, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        match cmd {
            "add" | "setdefault" => {
                let (before, after) = rest.split_once('(').unwrap_or((rest, ")"));
                let args = after.rsplit_once(')').map(|x| x.0).unwrap_or("");
                let toks: Vec<&str> = before.split_whitespace().collect();
                let table = toks[0];
                let action = toks[toks.len() - 1];
                if cmd == "setdefault" {
                    for p in ps.iter_mut() {
                        if let Err(e) = p.set_default(table, action, parse_args(args)) {
                            fails.push(format!("line {ln}: {e}"));
                        }
                    }
                    continue;
                }
                let mut rest_toks = &toks[1..toks.len() - 1];
                let mut prio = None;
                if let Some(t) = rest_toks.first() {
                    if !t.contains(':') {
                        prio = Some(t.parse().unwrap());
                        rest_toks = &rest_toks[1..];
                    }
                }
                for p in ps.iter_mut() {
                    let spec = parse_entry(p, table, prio, rest_toks, action, args);
                    if let Err(e) = p.table_add(table, spec) {
                        fails.push(format!("line {ln}: {e}"));
                    }
                }
            }
            "packet" => {
                let (port, hex) = rest.trim().split_once(char::is_whitespace).unwrap();
                now += 1000;
                packet_lines += 1;
                let out = process(ps, port.parse().unwrap(), &hex_bytes(hex), now);
                if let Some(e) = &out.trace.error {
                    fails.push(format!("line {ln}: internal error: {e}"));
                }
                for (port, bytes) in out.outputs {
                    got.entry(port).or_default().push_back((ln, bytes));
                }
            }
            "expect" => {
                let (port, hex) = rest
                    .trim()
                    .split_once(char::is_whitespace)
                    .unwrap_or((rest.trim(), ""));
                let mut h: String = hex.chars().filter(|c| !c.is_whitespace()).collect();
                let exact = h.ends_with('$');
                if exact {
                    h.pop();
                }
                let nibbles = h
                    .chars()
                    .map(|c| {
                        if c == '*' {
                            None
                        } else {
                            c.to_digit(16).map(|d| d as u8)
                        }
                    })
                    .collect();
                expects
                    .entry(port.parse().unwrap())
                    .or_default()
                    .push_back((ln, Expect { nibbles, exact }));
            }
            "wait" => {}
            "mirroring_add" => {
                let v: Vec<u32> = rest
                    .split_whitespace()
                    .map(|x| x.parse().unwrap())
                    .collect();
                for p in ps.iter_mut() {
                    p.mirroring_add(v[0], v[1]);
                }
            }
            "mc_mgrp_create" => {
                groups.insert(rest.trim().parse().unwrap(), Vec::new());
            }
            "mc_node_create" => {
                let v: Vec<u32> = rest
                    .split_whitespace()
                    .map(|x| x.parse().unwrap())
                    .collect();
                nodes.push((v[1], v[0]));
            }
            "mc_node_associate" => {
                let v: Vec<u32> = rest
                    .split_whitespace()
                    .map(|x| x.parse().unwrap())
                    .collect();
                let g = groups.entry(v[0]).or_default();
                g.push(nodes[v[1] as usize]);
                for p in ps.iter_mut() {
                    p.multicast_group_set(v[0], g.clone());
                }
            }
            o => fails.push(format!("line {ln}: unsupported STF command {o}")),
        }
    }
    let _ = packet_lines;
    let ports: std::collections::BTreeSet<u32> =
        expects.keys().chain(got.keys()).copied().collect();
    for port in ports {
        let e = expects.remove(&port).unwrap_or_default();
        let g = got.remove(&port).unwrap_or_default();
        if e.len() != g.len() {
            fails.push(format!(
                "port {port}: {} packets expected, {} received ({:?})",
                e.len(),
                g.len(),
                g.iter().map(|(ln, b)| (ln, hex(b))).collect::<Vec<_>>()
            ));
        }
        for ((eln, ex), (gln, gb)) in e.iter().zip(g.iter()) {
            if !ex.matches(gb) {
                fails.push(format!(
                    "port {port}: expect line {eln} vs packet line {gln}: got {}",
                    hex(gb)
                ));
            }
        }
    }
    fails
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn stf_text(rel: &str) -> Option<String> {
    let c = corpus()?;
    Some(std::fs::read_to_string(c.join(rel)).unwrap())
}

/// Loads `p4` and runs `stf`; panics with the failures.
pub fn check_stf(p4: &str, stf: &str) {
    let Some(mut p) = load(p4) else { return };
    let text = stf_text(stf).unwrap();
    let fails = run_stf(&mut p, &text);
    assert!(fails.is_empty(), "{p4} / {stf}:\n{}", fails.join("\n"));
}

/// Each packet through `fast.process` and `reference.process_reference`,
/// packet `i` on port `port_of(i)`: outputs and whole traces equal, and
/// the same error count at the end. Returns the outputs sent (so that a
/// caller can check the packets went somewhere).
#[allow(dead_code)] // not every test binary that includes this uses it
pub fn agree_on(
    what: &str,
    fast: &mut Pipeline,
    reference: &mut Pipeline,
    pkts: &[Vec<u8>],
    port_of: fn(usize) -> u32,
) -> usize {
    let mut sent = 0;
    for (i, p) in pkts.iter().enumerate() {
        let port = port_of(i);
        let a = fast.process(port, p, i as u64);
        let b = reference.process_reference(port, p, i as u64);
        assert_eq!(a, b, "{what}: packet {i} {p:02x?}: fast path != walker");
        sent += a.outputs.len();
    }
    assert_eq!(fast.error_count(), reference.error_count(), "{what}");
    sent
}

/// Whether `p` runs packet `pkt` without an error (and then sends it):
/// through the compiled path, or the walker (`process_reference`) when
/// `walker`. The step-limit parity tests' probe.
pub fn passes(p: &mut Pipeline, pkt: &[u8], walker: bool) -> bool {
    let e = p.error_count();
    let o = if walker {
        p.process_reference(0, pkt, 1)
    } else {
        p.process(0, pkt, 1)
    };
    let ok = p.error_count() == e;
    assert_eq!(ok, !o.outputs.is_empty());
    ok
}

/// The walker's `(last passing, first failing)` loop count for packets
/// `mk(n)`, by bisection between `lo` (which must pass) and `hi` (which
/// must fail): where the step limit falls for the walker, which the
/// compiled path must match.
pub fn walker_limit(
    reference: &mut Pipeline,
    (mut lo, mut hi): (usize, usize),
    mk: &dyn Fn(usize) -> Vec<u8>,
) -> (usize, usize) {
    assert!(passes(reference, &mk(lo), true) && !passes(reference, &mk(hi), true));
    while hi - lo > 1 {
        let m = (lo + hi) / 2;
        if passes(reference, &mk(m), true) {
            lo = m
        } else {
            hi = m
        }
    }
    (lo, hi)
}
