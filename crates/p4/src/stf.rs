//! STF, the "simple test framework" of p4c's BMv2 tests: table entries,
//! packets to send and packets expected back, one command per line.
//!
//! This module reads the dialect as p4c's `bmv2stf.py` applies it (see
//! ../shared/p4-corpus/README.md) and runs a test against any
//! [`StfTarget`]: the interpreter alone, or a bridge whose cache sits in
//! front of it (the runner sends each packet several times so the later
//! copies go through the cached flows). Expectations are checked per
//! port, in order and in number; `*` nibbles match anything; a trailing
//! `$` requires the exact length, otherwise the received packet may be
//! longer.

use num_bigint::BigUint;
use num_traits::Num;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// A malformed STF line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}:{line}: {msg}")]
pub struct StfError {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

/// A key value as an STF `add` line writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyValue {
    /// A plain number (exact, or the value of an optional match).
    Exact(BigUint),
    /// `value/prefix_len`.
    Lpm(BigUint, u32),
    /// `0x**01` nibble wildcards or `value&&&mask`.
    Ternary(BigUint, BigUint),
    /// `lo..hi` (or `lo->hi`).
    Range(BigUint, BigUint),
}

/// `name(arg:value, ...)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionCall {
    pub name: String,
    pub args: Vec<(String, BigUint)>,
}

/// An `add` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableAdd {
    pub table: String,
    /// STF priority: larger wins.
    pub priority: Option<u32>,
    pub keys: Vec<(String, KeyValue)>,
    pub action: ActionCall,
}

/// An expected packet: nibbles (`None` = `*`) and whether the length must
/// match exactly (`$`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    pub nibbles: Vec<Option<u8>>,
    pub exact_len: bool,
}

impl Pattern {
    /// Does `data` match? Extra bytes are allowed unless `exact_len`.
    pub fn matches(&self, data: &[u8]) -> bool {
        let have = data.len() * 2;
        if have < self.nibbles.len() || (self.exact_len && have != self.nibbles.len()) {
            return false;
        }
        self.nibbles.iter().enumerate().all(|(i, n)| match n {
            None => true,
            Some(v) => {
                let b = data[i / 2];
                let got = if i % 2 == 0 { b >> 4 } else { b & 0xf };
                got == *v
            }
        })
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in &self.nibbles {
            match n {
                Some(v) => write!(f, "{v:x}")?,
                None => f.write_str("*")?,
            }
        }
        if self.exact_len {
            f.write_str("$")?;
        }
        Ok(())
    }
}

/// One STF command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Add(TableAdd),
    SetDefault {
        table: String,
        action: ActionCall,
    },
    Packet {
        port: u32,
        data: Vec<u8>,
    },
    Expect {
        port: u32,
        pattern: Pattern,
    },
    /// Let queued packets drain (a no-op for synchronous targets).
    Wait,
    /// BMv2's `mirroring_add SESSION PORT`: clone session -> port.
    MirroringAdd {
        session: u32,
        port: u32,
    },
    /// `mc_mgrp_create GROUP`.
    McGroupCreate {
        group: u32,
    },
    /// `mc_node_create RID PORT...`: a node (handles count from 0).
    McNodeCreate {
        rid: u32,
        ports: Vec<u32>,
    },
    /// `mc_node_associate GROUP NODE-HANDLE`.
    McNodeAssociate {
        group: u32,
        node: u32,
    },
    /// A command this runner does not implement (BMv2 CLI commands such
    /// as `mirroring_add`, `mc_mgrp_create`, `register_read`): running a
    /// test that holds one fails naming it.
    Unsupported {
        name: String,
    },
}

/// A parsed STF file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StfTest {
    pub file: String,
    /// (1-based line, command).
    pub commands: Vec<(usize, Command)>,
}

/// Parse an STF file's text. `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<StfTest, StfError> {
    let mut commands = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |msg: String| StfError {
            file: file.to_string(),
            line: line_no,
            msg,
        };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (cmd, rest) = match line.find(char::is_whitespace) {
            Some(p) => (&line[..p], line[p..].trim()),
            None => (line, ""),
        };
        let c = match cmd.to_ascii_lowercase().as_str() {
            "packet" => {
                let (port, hex) = port_and_rest(rest).map_err(err)?;
                let pat = parse_pattern(hex).map_err(err)?;
                if pat.nibbles.iter().any(Option::is_none) {
                    return Err(err("`*` is not allowed in a packet to send".into()));
                }
                let nib: Vec<u8> = pat.nibbles.iter().map(|n| n.unwrap_or(0)).collect();
                if nib.len() % 2 != 0 {
                    return Err(err(format!("odd number of hex digits ({})", nib.len())));
                }
                let data = nib.chunks(2).map(|c| (c[0] << 4) | c[1]).collect();
                Command::Packet { port, data }
            }
            "expect" => {
                let (port, hex) = port_and_rest(rest).map_err(err)?;
                Command::Expect {
                    port,
                    pattern: parse_pattern(hex).map_err(err)?,
                }
            }
            "add" => Command::Add(parse_add(rest).map_err(err)?),
            "setdefault" => {
                let (table, act) = rest
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| err("setdefault needs a table and an action".into()))?;
                Command::SetDefault {
                    table: table.to_string(),
                    action: parse_action(act.trim()).map_err(err)?,
                }
            }
            "wait" => Command::Wait,
            "mirroring_add" | "mc_mgrp_create" | "mc_node_create" | "mc_node_associate" => {
                let nums = rest
                    .split_whitespace()
                    .map(parse_u32)
                    .collect::<Result<Vec<u32>, String>>()
                    .map_err(err)?;
                let need = |n: usize| -> Result<(), StfError> {
                    if nums.len() < n {
                        Err(err(format!("{cmd} needs {n} numbers")))
                    } else {
                        Ok(())
                    }
                };
                match cmd {
                    "mirroring_add" => {
                        need(2)?;
                        Command::MirroringAdd {
                            session: nums[0],
                            port: nums[1],
                        }
                    }
                    "mc_mgrp_create" => {
                        need(1)?;
                        Command::McGroupCreate { group: nums[0] }
                    }
                    "mc_node_create" => {
                        need(1)?;
                        Command::McNodeCreate {
                            rid: nums[0],
                            ports: nums[1..].to_vec(),
                        }
                    }
                    _ => {
                        need(2)?;
                        Command::McNodeAssociate {
                            group: nums[0],
                            node: nums[1],
                        }
                    }
                }
            }
            other => Command::Unsupported {
                name: other.to_string(),
            },
        };
        commands.push((line_no, c));
    }
    Ok(StfTest {
        file: file.to_string(),
        commands,
    })
}

fn port_and_rest(rest: &str) -> Result<(u32, &str), String> {
    let (p, hex) = rest
        .split_once(char::is_whitespace)
        .ok_or_else(|| "expected a port and a packet".to_string())?;
    let port = parse_u32(p)?;
    Ok((port, hex))
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let v = parse_number(s)?;
    u32::try_from(v).map_err(|_| format!("`{s}` does not fit 32 bits"))
}

/// Hex digits with whitespace anywhere, `*` wildcards, optional `$` at the end.
fn parse_pattern(text: &str) -> Result<Pattern, String> {
    let mut nibbles = Vec::new();
    let mut exact_len = false;
    for c in text.chars() {
        if exact_len && !c.is_whitespace() {
            return Err("`$` must end the packet".into());
        }
        match c {
            '$' => exact_len = true,
            '*' => nibbles.push(None),
            c if c.is_whitespace() => {}
            c => match c.to_digit(16) {
                Some(d) => nibbles.push(Some(d as u8)),
                None => return Err(format!("`{c}` is not a hex digit")),
            },
        }
    }
    Ok(Pattern { nibbles, exact_len })
}

/// A number: `0x..`, `0b..`, `0o..`, `0d..` or decimal.
pub fn parse_number(s: &str) -> Result<BigUint, String> {
    let t = s.trim();
    let (radix, digits) = match t.get(..2).map(str::to_ascii_lowercase).as_deref() {
        Some("0x") => (16, &t[2..]),
        Some("0b") => (2, &t[2..]),
        Some("0o") => (8, &t[2..]),
        Some("0d") => (10, &t[2..]),
        _ => (10, t),
    };
    let digits: String = digits.chars().filter(|c| *c != '_').collect();
    if digits.is_empty() {
        return Err(format!("`{s}` is not a number"));
    }
    BigUint::from_str_radix(&digits, radix).map_err(|_| format!("`{s}` is not a number"))
}

fn parse_key_value(s: &str) -> Result<KeyValue, String> {
    if let Some((v, m)) = s.split_once("&&&") {
        return Ok(KeyValue::Ternary(parse_number(v)?, parse_number(m)?));
    }
    if let Some((v, len)) = s.split_once('/') {
        return Ok(KeyValue::Lpm(parse_number(v)?, parse_u32(len)?));
    }
    if let Some((lo, hi)) = s.split_once("..").or_else(|| s.split_once("->")) {
        return Ok(KeyValue::Range(parse_number(lo)?, parse_number(hi)?));
    }
    if s.contains('*') {
        // Nibble (hex) or bit (binary) wildcards.
        let lower = s.to_ascii_lowercase();
        let (bits, digits) = if let Some(d) = lower.strip_prefix("0x") {
            (4, d)
        } else if let Some(d) = lower.strip_prefix("0b") {
            (1, d)
        } else {
            return Err(format!("`{s}`: wildcards need a 0x or 0b value"));
        };
        let mut v = BigUint::default();
        let mut m = BigUint::default();
        let full = (1u32 << bits) - 1;
        for c in digits.chars().filter(|c| *c != '_') {
            v <<= bits;
            m <<= bits;
            if c == '*' {
                continue;
            }
            let d = c
                .to_digit(1 << bits)
                .ok_or_else(|| format!("`{s}`: bad digit `{c}`"))?;
            v += d;
            m += full;
        }
        return Ok(KeyValue::Ternary(v, m));
    }
    Ok(KeyValue::Exact(parse_number(s)?))
}

/// `name(a:1, b:2)`; the comma may be missing (p4tc files).
fn parse_action(s: &str) -> Result<ActionCall, String> {
    let s = s.trim();
    let (name, args) = match s.find('(') {
        Some(p) => {
            let close = s
                .rfind(')')
                .filter(|c| *c > p)
                .ok_or_else(|| format!("`{s}`: missing `)`"))?;
            if !s[close + 1..].trim().is_empty() {
                return Err(format!("`{s}`: text after the action"));
            }
            (&s[..p], &s[p + 1..close])
        }
        None => (s, ""),
    };
    let mut out = Vec::new();
    for item in args
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
    {
        let (k, v) = item
            .split_once(':')
            .ok_or_else(|| format!("action argument `{item}` is not name:value"))?;
        out.push((k.trim().to_string(), parse_number(v)?));
    }
    if name.trim().is_empty() {
        return Err("missing action name".into());
    }
    Ok(ActionCall {
        name: name.trim().to_string(),
        args: out,
    })
}

fn parse_add(rest: &str) -> Result<TableAdd, String> {
    // The action call starts at the last token before '(' (or is the last
    // token without parentheses).
    let act_start = match rest.find('(') {
        Some(p) => rest[..p]
            .rfind(char::is_whitespace)
            .map(|w| w + 1)
            .ok_or("missing table name")?,
        None => rest
            .rfind(char::is_whitespace)
            .map(|w| w + 1)
            .ok_or("missing action")?,
    };
    let action = parse_action(&rest[act_start..])?;
    let mut toks = rest[..act_start].split_whitespace();
    let table = toks.next().ok_or("missing table name")?.to_string();
    let mut priority = None;
    let mut keys = Vec::new();
    for t in toks {
        match t.split_once(':') {
            Some((k, v)) => keys.push((k.to_string(), parse_key_value(v)?)),
            None if keys.is_empty() && priority.is_none() => priority = Some(parse_u32(t)?),
            None => return Err(format!("`{t}` is not key:value")),
        }
    }
    Ok(TableAdd {
        table,
        priority,
        keys,
        action,
    })
}

/// What a test runs against.
pub trait StfTarget {
    /// Apply a control command (`add`, `setdefault`); an error fails the
    /// test at that line.
    fn apply(&mut self, cmd: &Command) -> Result<(), String>;
    /// Send one packet; return every packet that came out, in order.
    fn send(&mut self, port: u32, data: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, String>;
}

/// Why a test failed: the first difference, with the line it concerns.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}:{line}: {msg}")]
pub struct StfFailure {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

/// What a passing run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StfReport {
    pub sent: usize,
    pub received: usize,
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Run `test` against `target`, sending every packet `repeat` times in a
/// row (and expecting each expected packet as many times). As p4c's
/// runner does, the packets that came out are compared with the expected
/// ones at the end, per port, in order and in number (an `expect` may
/// come before or after the packet that causes it).
pub fn run(
    test: &StfTest,
    target: &mut dyn StfTarget,
    repeat: usize,
) -> Result<StfReport, StfFailure> {
    let repeat = repeat.max(1);
    let fail = |line: usize, msg: String| StfFailure {
        file: test.file.clone(),
        line,
        msg,
    };
    let mut expected: BTreeMap<u32, Vec<(usize, &Pattern)>> = BTreeMap::new();
    // Per port: (line of the packet that caused it, copy, bytes).
    let mut got: BTreeMap<u32, VecDeque<(usize, usize, Vec<u8>)>> = BTreeMap::new();
    let mut report = StfReport::default();
    for (line, cmd) in &test.commands {
        match cmd {
            Command::Expect { port, pattern } => {
                for _ in 0..repeat {
                    expected.entry(*port).or_default().push((*line, pattern));
                }
            }
            Command::Packet { port, data } => {
                for copy in 0..repeat {
                    let out = target
                        .send(*port, data)
                        .map_err(|e| fail(*line, format!("sending packet: {e}")))?;
                    report.sent += 1;
                    for (p, bytes) in out {
                        report.received += 1;
                        got.entry(p)
                            .or_default()
                            .push_back((*line, copy + 1, bytes));
                    }
                }
            }
            Command::Wait => {}
            Command::Unsupported { name } => {
                return Err(fail(*line, format!("unsupported STF command `{name}`")))
            }
            Command::Add(_)
            | Command::SetDefault { .. }
            | Command::MirroringAdd { .. }
            | Command::McGroupCreate { .. }
            | Command::McNodeCreate { .. }
            | Command::McNodeAssociate { .. } => {
                target.apply(cmd).map_err(|e| fail(*line, e.to_string()))?
            }
        }
    }
    for (port, outs) in &mut got {
        let exp = expected.get(port).map(Vec::as_slice).unwrap_or(&[]);
        for (i, (pline, copy, bytes)) in outs.iter().enumerate() {
            match exp.get(i) {
                None => {
                    return Err(fail(
                        *pline,
                        format!(
                            "copy {copy} of this packet: unexpected packet on port {port} (only {} expected there): {}",
                            exp.len(),
                            hex(bytes)
                        ),
                    ))
                }
                Some((eline, pat)) if !pat.matches(bytes) => {
                    return Err(fail(
                        *eline,
                        format!(
                            "port {port}, packet {} there (copy {copy} of the packet sent at line {pline}): expected {pat}, got {}",
                            i + 1,
                            hex(bytes)
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    for (port, exp) in &expected {
        let n = got.get(port).map_or(0, VecDeque::len);
        if let Some((line, pat)) = exp.get(n) {
            return Err(fail(
                *line,
                format!(
                    "expected packet on port {port} never came ({} missing): {pat}",
                    exp.len() - n
                ),
            ));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_dialect() {
        let t = parse(
            "t.stf",
            "add Main.fib_table prefix:0x0a000000/8 Main.set_nhid(index:0x1)\n\
             add test1 503 data.f1:0x****0202 ingress.setb1(val:7, port:3)\n\
             add Main.nh_table nh_index:0x0 Main.set_nh(dmac:0xAABBCCDDEEFF port:0x1)\n\
             setdefault t a()\n\
             # comment\n\
             packet 0 0a0b 0c\n\
             expect 1 0a** $\n\
             wait\n\
             mirroring_add 5 6\n",
        )
        .unwrap();
        assert_eq!(t.commands.len(), 8);
        let Command::Add(a) = &t.commands[0].1 else {
            panic!()
        };
        assert_eq!(a.keys[0].1, KeyValue::Lpm(0x0a000000u32.into(), 8));
        let Command::Add(b) = &t.commands[1].1 else {
            panic!()
        };
        assert_eq!(b.priority, Some(503));
        assert_eq!(
            b.keys[0].1,
            KeyValue::Ternary(0x0202u32.into(), 0xffffu32.into())
        );
        assert_eq!(b.action.args[1], ("port".to_string(), 3u32.into()));
        let Command::Add(c) = &t.commands[2].1 else {
            panic!()
        };
        assert_eq!(c.action.args.len(), 2, "missing comma accepted");
        assert_eq!(
            t.commands[4].1,
            Command::Packet {
                port: 0,
                data: vec![0x0a, 0x0b, 0x0c]
            }
        );
        let Command::Expect { pattern, .. } = &t.commands[5].1 else {
            panic!()
        };
        assert!(pattern.matches(&[0x0a, 0xff]));
        assert!(!pattern.matches(&[0x0a, 0xff, 0]));
        assert!(!pattern.matches(&[0x0b, 0xff]));
        assert!(matches!(
            t.commands[7].1,
            Command::MirroringAdd {
                session: 5,
                port: 6
            }
        ));
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("x.stf", "packet 0 00\npacket 1 0g\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().starts_with("x.stf:2:"), "{e}");
        assert!(parse("x.stf", "packet 0 0\n").is_err());
        assert!(parse("x.stf", "add t k:zz a()\n").is_err());
    }

    struct Echo;
    impl StfTarget for Echo {
        fn apply(&mut self, _: &Command) -> Result<(), String> {
            Ok(())
        }
        fn send(&mut self, port: u32, data: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, String> {
            Ok(vec![(port + 1, data.to_vec())])
        }
    }

    #[test]
    fn runner_checks_order_count_and_ports() {
        let ok = parse("t", "expect 1 aa\npacket 0 aabb\n").unwrap();
        assert_eq!(run(&ok, &mut Echo, 3).unwrap().received, 3);
        let wrong_port = parse("t", "expect 2 aa\npacket 0 aabb\n").unwrap();
        assert!(run(&wrong_port, &mut Echo, 1).is_err());
        let exact = parse("t", "expect 1 aa$\npacket 0 aabb\n").unwrap();
        assert!(run(&exact, &mut Echo, 1).is_err());
        let missing = parse("t", "expect 1 aa\nexpect 1 aa\npacket 0 aabb\n").unwrap();
        let e = run(&missing, &mut Echo, 1).unwrap_err();
        assert!(e.msg.contains("never came"), "{e}");
    }
}

/// BMv2's packet replication engine as STF configures it: multicast
/// nodes (by handle, in creation order) and groups.
#[derive(Clone, Debug, Default)]
pub struct Replication {
    nodes: Vec<(u32, Vec<u32>)>,
    groups: BTreeMap<u32, Vec<usize>>,
}

/// Apply an STF control command (`add`, `setdefault`, mirroring and
/// multicast) to a pipeline. Returns the qualified name of the table it
/// changed, if any.
pub fn apply_to(
    pipeline: &mut crate::Pipeline,
    pre: &mut Replication,
    cmd: &Command,
) -> Result<Option<String>, String> {
    match cmd {
        Command::MirroringAdd { session, port } => {
            pipeline.mirroring_add(*session, *port);
            Ok(None)
        }
        Command::McGroupCreate { group } => {
            pre.groups.entry(*group).or_default();
            pipeline.multicast_group_set(*group, Vec::new());
            Ok(None)
        }
        Command::McNodeCreate { rid, ports } => {
            pre.nodes.push((*rid, ports.clone()));
            Ok(None)
        }
        Command::McNodeAssociate { group, node } => {
            if *node as usize >= pre.nodes.len() {
                return Err(format!("no multicast node {node}"));
            }
            let members = pre.groups.entry(*group).or_default();
            members.push(*node as usize);
            let list = members
                .iter()
                .flat_map(|n| {
                    let (rid, ports) = &pre.nodes[*n];
                    ports.iter().map(move |p| (*p, *rid))
                })
                .collect();
            pipeline.multicast_group_set(*group, list);
            Ok(None)
        }
        Command::Add(add) => {
            let info = pipeline.table_info(&add.table).map_err(|e| e.to_string())?;
            let spec = crate::entries::from_stf(&info, add)?;
            pipeline
                .table_add(&info.name, spec)
                .map_err(|e| e.to_string())?;
            Ok(Some(info.name))
        }
        Command::SetDefault { table, action } => {
            let info = pipeline.table_info(table).map_err(|e| e.to_string())?;
            pipeline
                .set_default(&info.name, &action.name, action.args.clone())
                .map_err(|e| e.to_string())?;
            Ok(Some(info.name))
        }
        _ => Ok(None),
    }
}

/// The interpreter alone as an STF target (no cache).
pub struct InterpTarget<'a> {
    pub pipeline: &'a mut crate::Pipeline,
    pub pre: Replication,
    /// The interpreter's clock: 1 µs per packet.
    pub now_ns: u64,
}

impl StfTarget for InterpTarget<'_> {
    fn apply(&mut self, cmd: &Command) -> Result<(), String> {
        apply_to(self.pipeline, &mut self.pre, cmd).map(|_| ())
    }

    fn send(&mut self, port: u32, data: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, String> {
        self.now_ns += 1_000;
        let out = self.pipeline.process(port, data, self.now_ns);
        if let Some(e) = out.trace.error {
            return Err(format!("interpreter error: {e}"));
        }
        Ok(out.outputs)
    }
}
