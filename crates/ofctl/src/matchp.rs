//! The match part of a rule: which packets it applies to.
//!
//! Each `key=value` piece becomes bits of a [`Match`] (a flow key plus mask),
//! which is exactly what the classifier compares every packet's key against.
//! The same step reads the rule's metadata (`table`, `priority`, `cookie`,
//! timeouts), which decide where the rule sits and how long it lives.
//!
//! Two checks keep the match meaningful, as in Open vSwitch:
//! * **prerequisites** — `tp_dst=80` says nothing unless the rule also says
//!   the packet is TCP, UDP or SCTP, because the bits that hold a TCP port
//!   hold ICMP type/code for ICMP and nothing at all for ARP. They are checked
//!   once the whole match is read, so order is free (`tp_dst=80,tcp` is fine).
//! * **conflicts** — a field may be repeated only with the same value, and
//!   different spellings that touch the same bits (`tcp` and `nw_proto=17`,
//!   `dl_vlan=5` and `vlan_tci=...`) must agree on every bit they share.

use nicflow_flow::field::{ValueKind, CT_STATE_FLAGS};
use nicflow_flow::{ofp, Field, FlowKey, Match, Prereq};

use crate::error::{err, RuleError};
use crate::lexer::split_rule;
use crate::ports::{classify_port, resolve_name, PortMap, PortText};
use crate::values::{parse_masked, parse_max};

/// Protocol shorthands: `(keyword, dl_type, nw_proto)`.
pub(crate) const SHORTHANDS: &[(&str, u16, Option<u8>)] = &[
    ("ip", 0x0800, None),
    ("ipv6", 0x86dd, None),
    ("arp", 0x0806, None),
    ("tcp", 0x0800, Some(6)),
    ("udp", 0x0800, Some(17)),
    ("sctp", 0x0800, Some(132)),
    ("icmp", 0x0800, Some(1)),
    ("tcp6", 0x86dd, Some(6)),
    ("udp6", 0x86dd, Some(17)),
    ("sctp6", 0x86dd, Some(132)),
    ("icmp6", 0x86dd, Some(58)),
    ("rarp", 0x8035, None),
];

/// `ip_frag` names: `(name, nw_frag value, mask)`.
pub(crate) const FRAGS: &[(&str, u8, u8)] = &[
    ("no", 0, 1),
    ("yes", 1, 1),
    ("first", 1, 3),
    ("later", 3, 3),
    ("not_later", 0, 2),
];

/// TCP flag names in bit order.
pub(crate) const TCP_FLAGS: &[(&str, u16)] = &[
    ("fin", 0x001),
    ("syn", 0x002),
    ("rst", 0x004),
    ("psh", 0x008),
    ("ack", 0x010),
    ("urg", 0x020),
    ("ece", 0x040),
    ("cwr", 0x080),
    ("ns", 0x100),
];

/// Bits of `tcp_flags` that have names.
pub(crate) const TCP_FLAGS_NAMED: u16 = 0x1ff;

/// What a piece of the rule needs the rest of the match to establish.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Need {
    P(Prereq),
    /// `nw_proto`: IP protocol under ip/ipv6, opcode under arp.
    IpOrArp,
    /// `tcp_src`, `udp_dst`...: IP with this exact protocol.
    IpProto(u8, &'static str),
}

impl Need {
    pub(crate) fn satisfied(self, key: &FlowKey, mask: &FlowKey) -> bool {
        match self {
            Need::P(p) => p.satisfied(key, mask),
            Need::IpOrArp => Prereq::Ip.satisfied(key, mask) || Prereq::Arp.satisfied(key, mask),
            Need::IpProto(p, _) => {
                Prereq::Ip.satisfied(key, mask) && mask.nw_proto == 0xff && key.nw_proto == p
            }
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Need::P(p) => p.describe(),
            Need::IpOrArp => "ip, ipv6 or arp",
            Need::IpProto(_, name) => name,
        }
    }

    /// `Err` naming `what` and the missing prerequisite unless `m` satisfies it.
    pub(crate) fn check(self, m: &Match, token: &str, what: &str) -> Result<(), RuleError> {
        if self.satisfied(m.key(), &m.mask().0) {
            Ok(())
        } else {
            err(token, format!("{what} requires {}", self.describe()))
        }
    }
}

/// Fields that only take exact values.
fn exact_only(f: Field) -> bool {
    matches!(
        f,
        Field::InPort
            | Field::ConjId
            | Field::DlType
            | Field::NwProto
            | Field::NwTtl
            | Field::ArpOp
            | Field::IcmpType
            | Field::IcmpCode
            | Field::Icmpv6Type
            | Field::Icmpv6Code
            | Field::CtZone
            | Field::CtNwProto
    )
}

/// Which parts of a rule a caller accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `add-flow`: timeouts allowed, exact cookie, actions expected.
    Flow,
    /// `del-flows`/`dump-flows` filter: cookie mask allowed, no timeouts.
    Filter,
}

/// A rule's text read up to (not including) its actions.
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub table: Option<u8>,
    pub priority: Option<u16>,
    pub cookie: Option<(u64, u64)>,
    pub idle_timeout: Option<u16>,
    pub hard_timeout: Option<u16>,
    /// The `send_flow_rem` flag was given.
    pub send_flow_rem: bool,
    pub m: Match,
    /// `(whole "actions=..." piece, text after "actions=")`.
    pub actions: Option<(&'a str, &'a str)>,
}

struct Builder<'a> {
    m: Match,
    /// `(key as written, field, value, mask)` of every setting so far.
    seen: Vec<(&'a str, Field, u128, u128)>,
    /// `(piece, key, need)` to check once the whole match is known.
    needs: Vec<(&'a str, &'a str, Need)>,
}

impl<'a> Builder<'a> {
    fn apply(
        &mut self,
        tok: &'a str,
        key: &'a str,
        f: Field,
        v: u128,
        m: u128,
    ) -> Result<(), RuleError> {
        let v = v & m;
        if let Some(&(_, _, pv, pm)) = self.seen.iter().find(|s| s.0 == key && s.1 == f) {
            if (pv, pm) != (v, m) {
                return err(
                    tok,
                    format!("{key} given more than once with different values"),
                );
            }
        }
        let (ov, om) = self.m.get(f);
        if (ov ^ v) & om & m != 0 {
            return err(
                tok,
                format!("{key} conflicts with an earlier field of the rule"),
            );
        }
        self.seen.push((key, f, v, m));
        self.m.set(f, v, m);
        Ok(())
    }
}

/// Set a metadata slot, allowing an identical repeat.
fn meta<T: PartialEq + Copy>(
    slot: &mut Option<T>,
    v: T,
    tok: &str,
    key: &str,
) -> Result<(), RuleError> {
    match *slot {
        Some(old) if old != v => err(
            tok,
            format!("{key} given more than once with different values"),
        ),
        _ => {
            *slot = Some(v);
            Ok(())
        }
    }
}

fn parse_tcp_flags(s: &str) -> Result<(u128, u128), String> {
    if s.starts_with(|c: char| c.is_ascii_alphabetic()) {
        // `syn|ack`: every flag matched, these set (as OVS prints a full mask).
        let mut v = 0u16;
        for name in s.split('|') {
            let bit = TCP_FLAGS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| *b)
                .ok_or_else(|| format!("unknown TCP flag `{name}`"))?;
            v |= bit;
        }
        return Ok((v.into(), 0xfff));
    }
    if !s.starts_with(['+', '-']) {
        return parse_masked(ValueKind::Hex, 12, s, true);
    }
    let (mut v, mut m) = (0u16, 0u16);
    let mut rest = s;
    while let Some(sign) = rest.chars().next() {
        let set = match sign {
            '+' => true,
            '-' => false,
            _ => return Err("TCP flags are written +flag or -flag".into()),
        };
        rest = &rest[1..];
        let end = rest.find(['+', '-']).unwrap_or(rest.len());
        let name = &rest[..end];
        rest = &rest[end..];
        let bit = TCP_FLAGS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                format!("unknown TCP flag `{name}` (known: fin syn rst psh ack urg ece cwr ns)")
            })?;
        if m & bit != 0 && (v & bit != 0) != set {
            return Err(format!("TCP flag {name} is both set and cleared"));
        }
        m |= bit;
        if set {
            v |= bit;
        }
    }
    Ok((v.into(), m.into()))
}

/// `ct_state=+trk-inv` (flags, OVS names), `ct_state=new|trk` (every
/// flag matched: these set, the rest clear, as OVS prints a full mask), or
/// a number with an optional mask (`0x21/0x21`; no mask = all 8 bits).
fn parse_ct_state(s: &str) -> Result<(u128, u128), String> {
    let flag = |name: &str| {
        CT_STATE_FLAGS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                format!("unknown ct_state flag `{name}` (known: new est rel rpl inv trk snat dnat)")
            })
    };
    if !s.starts_with(['+', '-']) {
        if s.starts_with(|c: char| c.is_ascii_alphabetic()) {
            let mut v = 0u32;
            for name in s.split('|') {
                let bit = flag(name)?;
                if v & bit != 0 {
                    return Err(format!("ct_state flag {name} given twice"));
                }
                v |= bit;
            }
            return Ok((v.into(), 0xff));
        }
        let (v, m) = if s.contains('/') {
            parse_masked(ValueKind::Hex, 32, s, true)?
        } else {
            (parse_masked(ValueKind::Hex, 32, s, false)?.0, 0xff)
        };
        if (v | m) & !0xff != 0 {
            return Err("ct_state has only 8 bits (0xff)".into());
        }
        return Ok((v, m));
    }
    let (mut v, mut m) = (0u32, 0u32);
    let mut rest = s;
    while let Some(sign) = rest.chars().next() {
        let set = match sign {
            '+' => true,
            '-' => false,
            _ => return Err("ct_state flags are written +flag or -flag".into()),
        };
        rest = &rest[1..];
        let end = rest.find(['+', '-']).unwrap_or(rest.len());
        let name = &rest[..end];
        rest = &rest[end..];
        let bit = flag(name)?;
        if m & bit != 0 {
            // OVS: "Each ct_state flag can be specified only once".
            return Err(format!("ct_state flag {name} given more than once"));
        }
        m |= bit;
        if set {
            v |= bit;
        }
    }
    Ok((v.into(), m.into()))
}

/// One `key` or `key=value` piece of the match part.
fn piece<'a>(
    b: &mut Builder<'a>,
    p: &mut Parsed<'a>,
    tok: &'a str,
    ports: &dyn PortMap,
    mode: Mode,
) -> Result<(), RuleError> {
    let Some((key, val)) = tok.split_once('=') else {
        if tok == "send_flow_rem" {
            if mode == Mode::Filter {
                return err(tok, "send_flow_rem cannot be used to select flows");
            }
            p.send_flow_rem = true;
            return Ok(());
        }
        if let Some(&(name, dl, proto)) = SHORTHANDS.iter().find(|s| s.0 == tok) {
            b.apply(tok, name, Field::DlType, dl.into(), 0xffff)?;
            if let Some(proto) = proto {
                b.apply(tok, name, Field::NwProto, proto.into(), 0xff)?;
            }
            return Ok(());
        }
        let known = Field::from_name(tok).is_ok()
            || matches!(
                tok,
                "table" | "priority" | "cookie" | "idle_timeout" | "hard_timeout" | "dl_vlan"
            );
        return err(
            tok,
            if known {
                "missing value (want key=value)"
            } else {
                "unknown field or keyword"
            },
        );
    };
    let bad = |reason: String| RuleError::new(tok, reason);
    match key {
        "table" => {
            let t = parse_max(val, 255).map_err(bad)?;
            if t == 255 {
                return err(tok, "table 255 is reserved");
            }
            meta(&mut p.table, t as u8, tok, key)
        }
        "priority" => {
            let v = parse_max(val, 0xffff).map_err(bad)?;
            meta(&mut p.priority, v as u16, tok, key)
        }
        "idle_timeout" | "hard_timeout" => {
            if mode == Mode::Filter {
                return err(tok, format!("{key} cannot be used to select flows"));
            }
            let v = parse_max(val, 0xffff).map_err(bad)? as u16;
            let slot = if key == "idle_timeout" {
                &mut p.idle_timeout
            } else {
                &mut p.hard_timeout
            };
            meta(slot, v, tok, key)
        }
        "cookie" => {
            if mode == Mode::Flow && val.contains('/') {
                return err(tok, "a cookie mask is only allowed when selecting flows");
            }
            let (v, m) = parse_masked(ValueKind::Hex, 64, val, true).map_err(bad)?;
            meta(&mut p.cookie, (v as u64, m as u64), tok, key)
        }
        "in_port" => {
            let no = match classify_port(val) {
                Ok(PortText::Number(n)) => n,
                Ok(PortText::Reserved(ofp::LOCAL)) => ofp::LOCAL,
                Ok(PortText::Reserved(_)) => {
                    return err(tok, "in_port must be a port number, a port name or LOCAL")
                }
                Ok(PortText::Name) => resolve_name(val, ports, true).map_err(|r| bad(r.into()))?,
                Err(r) => return err(tok, r),
            };
            b.apply(tok, key, Field::InPort, no.into(), 0xffff_ffff)
        }
        "dl_vlan" => {
            let v = parse_max(val, 0xffff).map_err(bad)?;
            let (v, m) = match v {
                0xffff => (0, 0xffff),
                0..=0xfff => (0x1000 | v, 0x1fff),
                _ => return err(tok, "VLAN ID out of range 0..=4095 (0xffff = no tag)"),
            };
            b.apply(tok, key, Field::VlanTci, v, m)
        }
        "dl_vlan_pcp" => {
            let v = parse_max(val, 7).map_err(bad)?;
            b.apply(tok, key, Field::VlanTci, (v << 13) | 0x1000, 0xf000)
        }
        "nw_tos" | "ip_dscp" | "nw_ecn" | "ip_ecn" => {
            let (v, m) = match key {
                "nw_tos" => {
                    let v = parse_max(val, 255).map_err(bad)?;
                    if v & 3 != 0 {
                        return err(
                            tok,
                            "nw_tos must have its two low (ECN) bits clear; use nw_ecn for those",
                        );
                    }
                    (v, 0xfc)
                }
                "ip_dscp" => (parse_max(val, 63).map_err(bad)? << 2, 0xfc),
                _ => (parse_max(val, 3).map_err(bad)?, 0x03),
            };
            b.needs.push((tok, key, Need::P(Prereq::Ip)));
            b.apply(tok, key, Field::NwTos, v, m)
        }
        // `nw_frag` is OVS's name (the one it prints); `ip_frag` its alias.
        // A number (`nw_frag=0x2/0x2`) is nicflow's own: the printed form
        // of a combination no name stands for (only OpenFlow sends those).
        "ip_frag" | "nw_frag"
            if key == "ip_frag" || !val.starts_with(|c: char| c.is_ascii_digit()) =>
        {
            let &(_, v, m) = FRAGS.iter().find(|f| f.0 == val).ok_or_else(|| {
                bad(format!(
                    "{key} must be one of no, yes, first, later, not_later"
                ))
            })?;
            b.needs.push((tok, key, Need::P(Prereq::Ip)));
            b.apply(tok, key, Field::NwFrag, v.into(), m.into())
        }
        "ct_state" => {
            let (v, m) = parse_ct_state(val).map_err(bad)?;
            b.apply(tok, key, Field::CtState, v, m)
        }
        "recirc_id" => err(tok, "recirc_id is a datapath field; rules cannot match it"),
        "tcp_flags" => {
            let (v, m) = parse_tcp_flags(val).map_err(bad)?;
            b.needs.push((tok, key, Need::P(Prereq::Tcp)));
            b.apply(tok, key, Field::TcpFlags, v, m)
        }
        _ => {
            let (f, need) = match key {
                "tcp_src" | "tcp_dst" | "udp_src" | "udp_dst" | "sctp_src" | "sctp_dst" => {
                    let need = match &key[..3] {
                        "tcp" => Need::IpProto(6, "tcp"),
                        "udp" => Need::IpProto(17, "udp"),
                        _ => Need::IpProto(132, "sctp"),
                    };
                    let f = if key.ends_with("_src") {
                        Field::TpSrc
                    } else {
                        Field::TpDst
                    };
                    (f, need)
                }
                _ => {
                    let f =
                        Field::from_name(key).map_err(|_| RuleError::new(tok, "unknown field"))?;
                    let need = if f == Field::NwProto {
                        Need::IpOrArp
                    } else if matches!(f, Field::IcmpType | Field::IcmpCode) {
                        // OVS takes (and prints) these names under icmp6 too.
                        Need::P(Prereq::AnyIcmp)
                    } else {
                        Need::P(f.prereq())
                    };
                    (f, need)
                }
            };
            let (v, m) = parse_masked(f.kind(), f.bits(), val, !exact_only(f)).map_err(bad)?;
            b.needs.push((tok, key, need));
            b.apply(tok, key, f, v, m)
        }
    }
}

/// Open vSwitch puts `ct_nw_proto`, `ct_tp_src` and `ct_tp_dst` into a
/// rule only when the matched `ct_nw_proto` is non-zero (`nx_put_raw`), so
/// `ct_tp_dst=80` alone, or with `ct_nw_proto=0`, matches any connection
/// there. The same table must behave the same here: the pieces go, silently,
/// as in OVS.
fn drop_ct_ports_without_proto(m: &mut Match) {
    let (proto, _) = m.get(Field::CtNwProto);
    if proto == 0 {
        for f in [Field::CtNwProto, Field::CtTpSrc, Field::CtTpDst] {
            m.clear(f);
        }
    }
}

/// Read a rule up to its actions.
pub(crate) fn parse_rule<'a>(
    text: &'a str,
    ports: &dyn PortMap,
    mode: Mode,
) -> Result<Parsed<'a>, RuleError> {
    let split = split_rule(text);
    let mut p = Parsed {
        table: None,
        priority: None,
        cookie: None,
        idle_timeout: None,
        hard_timeout: None,
        send_flow_rem: false,
        m: Match::catchall(),
        actions: split.actions,
    };
    let mut b = Builder {
        m: Match::catchall(),
        seen: Vec::new(),
        needs: Vec::new(),
    };
    for tok in split.matches {
        piece(&mut b, &mut p, tok, ports, mode)?;
    }
    for &(tok, key, need) in &b.needs {
        need.check(&b.m, tok, key)?;
    }
    drop_ct_ports_without_proto(&mut b.m);
    p.m = b.m;
    Ok(p)
}
