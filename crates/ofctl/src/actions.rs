//! The action part of a rule: what happens to a packet the rule matched.
//!
//! The slow path runs these [`Action`]s against the packet's key when it
//! misses the fast path cache; the resulting datapath actions are then cached
//! and replayed for the rest of the flow. So anything accepted here will run
//! on real traffic, and the checks that OVS makes at `add-flow` time are made
//! here too: `set_field` (and the `mod_*` actions) may only touch a field the
//! match guarantees exists (`mod_tp_dst` needs `tcp`, `udp` or `sctp`),
//! `drop` must stand alone, and `goto_table` must be last and go forward, so
//! a table walk always terminates.
//!
//! Action names are matched without regard to case (`NORMAL`, `normal`).
//! A bare number or a known port name is `output` to that port.

use nicflow_flow::field::ValueKind;
use nicflow_flow::{
    ofp, Action, ControllerOpts, CtAction, CtMove, CtNat, CtZone, Field, Match, NatKind, Prereq,
};

use crate::error::{err, RuleError};
use crate::lexer::{split_actions, split_args, split_key};
use crate::matchp::Need;
use crate::ports::{classify_port, resolve_name, PortMap, PortText};
use crate::values::{full, parse_mac, parse_masked, parse_max, parse_uint};
use std::net::{IpAddr, Ipv4Addr};

/// Default `max_len` of `controller`: the whole packet.
pub const CONTROLLER_MAX_LEN: u16 = u16::MAX;

/// What a rule's own match must establish before an action may write `f`.
/// Stricter than matching for IPv4 addresses: `nw_src` under `arp` would be
/// the ARP sender address, which has its own name (`arp_spa`).
pub(crate) fn set_need(f: Field) -> Need {
    match f {
        Field::NwSrc | Field::NwDst => Need::P(Prereq::Ipv4),
        _ => Need::P(f.prereq()),
    }
}

/// Why a write to `f` is refused (see [`Field::settable`]).
fn not_settable(f: Field) -> String {
    if f == Field::Ipv6Label {
        // OVS writes it; nicflow's datapaths have no flow-label rewrite.
        "field ipv6_label cannot be set (no flow-label rewrite in nicflow's datapaths)".into()
    } else {
        format!("field {} cannot be set", f.name())
    }
}

/// Validate and build a `SetField`; every way of writing one ends here.
fn set_field(
    piece: &str,
    f: Field,
    v: u128,
    m: u128,
    matching: &Match,
) -> Result<Action, RuleError> {
    if !f.settable() {
        return err(piece, not_settable(f));
    }
    if f == Field::NwTos && m != 0xfc && m != 0x03 {
        return err(
            piece,
            "nw_tos can only be set as DSCP (mod_nw_tos, ip_dscp) or ECN (nw_ecn)",
        );
    }
    if f == Field::InPort && m == 0xffff {
        // A write of the 16-bit NXM_OF_IN_PORT: its reserved numbers
        // (0xfff8..) are nicflow's 32-bit ones.
        let v = if v >= 0xff00 { v | 0xffff_0000 } else { v };
        return set_field(piece, f, v, full(32), matching);
    }
    if f == Field::InPort {
        if m != full(32) {
            return err(piece, "in_port cannot be set partially");
        }
        if !(1..=u128::from(ofp::MAX)).contains(&v) && v != u128::from(ofp::LOCAL) {
            return err(piece, "in_port must be set to a real port or LOCAL");
        }
    }
    set_need(f).check(matching, piece, f.name())?;
    Ok(Action::SetField {
        field: f,
        value: v & m,
        mask: m,
    })
}

/// A port written after `output:`; reserved names become their actions.
/// As in OVS, what is not a port is tried as a field (`output:reg0[0..15]`,
/// `output:NXM_NX_REG0[]`, `output:reg1`): output to the port number held
/// there when the action runs.
fn output(
    piece: &str,
    arg: &str,
    ports: &dyn PortMap,
    matching: &Match,
) -> Result<Action, RuleError> {
    let field_like = arg.contains('[')
        || (nxm_field(arg).is_some()
            && ports.known_port(arg).is_none()
            && matches!(classify_port(arg), Ok(PortText::Name)));
    if field_like {
        let sub = if arg.contains('[') {
            arg.to_string()
        } else {
            format!("{arg}[]")
        };
        let (field, ofs, nbits) = parse_subfield(piece, &sub)?;
        Need::P(field.prereq()).check(matching, piece, field.name())?;
        return Ok(Action::OutputReg {
            field,
            ofs: ofs as u8,
            nbits: nbits as u8,
            max_len: u16::MAX,
        });
    }
    match classify_port(arg) {
        Ok(PortText::Number(n)) => Ok(Action::Output(n)),
        Ok(PortText::Reserved(r)) => reserved_action(piece, r),
        Ok(PortText::Name) => resolve_name(arg, ports, true)
            .map(Action::Output)
            .map_err(|r| RuleError::new(piece, r)),
        Err(r) => err(piece, r),
    }
}

fn reserved_action(piece: &str, port: u32) -> Result<Action, RuleError> {
    Ok(match port {
        ofp::IN_PORT => Action::InPort,
        ofp::NORMAL => Action::Normal,
        ofp::FLOOD => Action::Flood,
        ofp::ALL => Action::All,
        ofp::LOCAL => Action::Local,
        ofp::CONTROLLER => Action::Controller {
            max_len: CONTROLLER_MAX_LEN,
        },
        _ => return err(piece, "cannot output to this reserved port"),
    })
}

/// `enqueue:PORT:QUEUE` or `enqueue(PORT,QUEUE)` (OVS also separates with
/// `q`: `enqueue:1q2`). The port must be a real port, `IN_PORT` or `LOCAL`,
/// as OVS's `check_ENQUEUE` says.
fn parse_enqueue(piece: &str, arg: &str, ports: &dyn PortMap) -> Result<Action, RuleError> {
    let split = arg.split_once([':', ',']).or_else(|| {
        arg.split_once('q')
            .filter(|(p, _)| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    });
    let Some((p, q)) = split else {
        return err(piece, "enqueue wants PORT:QUEUE or (PORT,QUEUE)");
    };
    let (p, q) = (p.trim(), q.trim());
    let port = match classify_port(p) {
        Ok(PortText::Number(n)) => n,
        Ok(PortText::Reserved(r @ (ofp::IN_PORT | ofp::LOCAL))) => r,
        Ok(PortText::Reserved(_)) => {
            return err(piece, "enqueue port must be a real port, IN_PORT or LOCAL")
        }
        Ok(PortText::Name) => resolve_name(p, ports, true).map_err(|r| RuleError::new(piece, r))?,
        Err(r) => return err(piece, r),
    };
    let queue = parse_max(q, u128::from(u32::MAX)).map_err(|r| RuleError::new(piece, r))? as u32;
    Ok(Action::Enqueue { port, queue })
}

/// The port of a `resubmit`: `None` for the packet's own input port.
fn resubmit_port(piece: &str, s: &str, ports: &dyn PortMap) -> Result<Option<u32>, RuleError> {
    if s.is_empty() {
        return Ok(None);
    }
    match classify_port(s) {
        Ok(PortText::Number(n)) => Ok(Some(n)),
        Ok(PortText::Reserved(ofp::IN_PORT)) => Ok(None),
        Ok(PortText::Reserved(_)) => err(piece, "resubmit port must be a real port or in_port"),
        Ok(PortText::Name) => resolve_name(s, ports, true)
            .map(Some)
            .map_err(|r| RuleError::new(piece, r)),
        Err(r) => err(piece, r),
    }
}

fn table_no(piece: &str, s: &str) -> Result<u8, RuleError> {
    let t = parse_max(s, 255).map_err(|r| RuleError::new(piece, r))?;
    if t == 255 {
        return err(piece, "table 255 is reserved");
    }
    Ok(t as u8)
}

/// `set_field:VALUE[/MASK]->FIELD`.
fn parse_set_field(
    piece: &str,
    arg: &str,
    ports: &dyn PortMap,
    matching: &Match,
) -> Result<Action, RuleError> {
    let Some((val, name)) = arg.rsplit_once("->") else {
        return err(piece, "set_field wants VALUE->FIELD");
    };
    let bad = |r: String| RuleError::new(piece, r);
    let ip_need = Need::P(Prereq::Ip);
    let exact = |max: u128| -> Result<u128, RuleError> {
        if val.contains('/') {
            return err(piece, format!("{name} cannot be set under a mask"));
        }
        parse_max(val, max).map_err(bad)
    };
    match name {
        "vlan_vid" => {
            // OXM's vlan_vid carries the "tag present" bit 0x1000; accept both.
            Ok(Action::ModVlanVid((exact(0x1fff)? & 0xfff) as u16))
        }
        "vlan_pcp" => Ok(Action::ModVlanPcp(exact(7)? as u8)),
        "ip_dscp" => {
            ip_need.check(matching, piece, name)?;
            set_field(piece, Field::NwTos, exact(63)? << 2, 0xfc, matching)
        }
        "nw_ecn" | "ip_ecn" => {
            ip_need.check(matching, piece, name)?;
            set_field(piece, Field::NwTos, exact(3)?, 0x03, matching)
        }
        "nw_tos" => {
            let v = exact(255)?;
            if v & 3 != 0 {
                return err(piece, "nw_tos must have its two low (ECN) bits clear");
            }
            set_field(piece, Field::NwTos, v, 0xfc, matching)
        }
        "in_port" => {
            let no = match classify_port(val) {
                Ok(PortText::Number(n)) => n,
                Ok(PortText::Reserved(ofp::LOCAL)) => ofp::LOCAL,
                Ok(PortText::Reserved(_)) => {
                    return err(piece, "in_port must be set to a real port or LOCAL")
                }
                Ok(PortText::Name) => {
                    resolve_name(val, ports, true).map_err(|r| RuleError::new(piece, r))?
                }
                Err(r) => return err(piece, r),
            };
            set_field(piece, Field::InPort, no.into(), full(32), matching)
        }
        _ => {
            let (f, extra) = match name {
                "tcp_src" | "tcp_dst" | "udp_src" | "udp_dst" | "sctp_src" | "sctp_dst" => {
                    let need = match &name[..3] {
                        "tcp" => Need::IpProto(6, "tcp"),
                        "udp" => Need::IpProto(17, "udp"),
                        _ => Need::IpProto(132, "sctp"),
                    };
                    let f = if name.ends_with("_src") {
                        Field::TpSrc
                    } else {
                        Field::TpDst
                    };
                    (f, Some(need))
                }
                _ => (
                    Field::from_name(name)
                        .map_err(|_| RuleError::new(piece, format!("unknown field {name}")))?,
                    None,
                ),
            };
            if let Some(need) = extra {
                need.check(matching, piece, name)?;
            }
            if !f.settable() {
                return err(piece, not_settable(f));
            }
            let (v, m) = parse_masked(f.kind(), f.bits(), val, true).map_err(bad)?;
            set_field(piece, f, v, m, matching)
        }
    }
}

/// NXM/OXM names of fields, as `ovs-ofctl` writes subfields
/// (`load`, `move`, `ct(zone=..)`); the first name of a field is the one
/// printed. Registers (`NXM_NX_REG0`..) are handled by `Field::from_name`.
pub(crate) const NXM_NAMES: &[(&str, Field)] = &[
    ("NXM_OF_IN_PORT", Field::InPort),
    ("NXM_OF_ETH_SRC", Field::DlSrc),
    ("NXM_OF_ETH_DST", Field::DlDst),
    ("NXM_OF_ETH_TYPE", Field::DlType),
    ("NXM_OF_VLAN_TCI", Field::VlanTci),
    ("NXM_OF_IP_TOS", Field::NwTos),
    ("NXM_OF_IP_PROTO", Field::NwProto),
    ("NXM_OF_IP_SRC", Field::NwSrc),
    ("NXM_OF_IP_DST", Field::NwDst),
    ("NXM_OF_TCP_SRC", Field::TpSrc),
    ("NXM_OF_TCP_DST", Field::TpDst),
    ("NXM_OF_UDP_SRC", Field::TpSrc),
    ("NXM_OF_UDP_DST", Field::TpDst),
    ("NXM_OF_ICMP_TYPE", Field::IcmpType),
    ("NXM_OF_ICMP_CODE", Field::IcmpCode),
    ("NXM_OF_ARP_OP", Field::ArpOp),
    ("NXM_OF_ARP_SPA", Field::ArpSpa),
    ("NXM_OF_ARP_TPA", Field::ArpTpa),
    ("NXM_NX_ARP_SHA", Field::ArpSha),
    ("NXM_NX_ARP_THA", Field::ArpTha),
    ("NXM_NX_IP_TTL", Field::NwTtl),
    ("NXM_NX_IPV6_SRC", Field::Ipv6Src),
    ("NXM_NX_IPV6_DST", Field::Ipv6Dst),
    ("NXM_NX_IPV6_LABEL", Field::Ipv6Label),
    ("NXM_NX_ICMPV6_TYPE", Field::Icmpv6Type),
    ("NXM_NX_ICMPV6_CODE", Field::Icmpv6Code),
    ("NXM_NX_ND_TARGET", Field::NdTarget),
    ("NXM_NX_ND_SLL", Field::NdSll),
    ("NXM_NX_ND_TLL", Field::NdTll),
    ("NXM_NX_TUN_ID", Field::TunId),
    ("NXM_NX_TUN_IPV4_SRC", Field::TunSrc),
    ("NXM_NX_TUN_IPV4_DST", Field::TunDst),
    ("NXM_NX_TCP_FLAGS", Field::TcpFlags),
    ("NXM_NX_CT_STATE", Field::CtState),
    ("NXM_NX_CT_ZONE", Field::CtZone),
    ("NXM_NX_CT_MARK", Field::CtMark),
    ("NXM_NX_CT_LABEL", Field::CtLabel),
    ("NXM_NX_CT_NW_SRC", Field::CtNwSrc),
    ("NXM_NX_CT_NW_DST", Field::CtNwDst),
    ("NXM_NX_CT_NW_PROTO", Field::CtNwProto),
    ("NXM_NX_CT_TP_SRC", Field::CtTpSrc),
    ("NXM_NX_CT_TP_DST", Field::CtTpDst),
    ("OXM_OF_METADATA", Field::Metadata),
    ("NXM_NX_PKT_MARK", Field::PktMark),
];

/// A field by NXM/OXM name or plain name.
fn nxm_field(name: &str) -> Option<Field> {
    match name {
        "tcp_src" | "udp_src" | "sctp_src" => return Some(Field::TpSrc),
        "tcp_dst" | "udp_dst" | "sctp_dst" => return Some(Field::TpDst),
        _ => {}
    }
    NXM_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .or_else(|| Field::from_name(name).ok())
}

/// The name `ovs-ofctl` prints for a subfield's field.
pub(crate) fn nxm_name(f: Field) -> String {
    match f {
        Field::Reg(i) => format!("NXM_NX_REG{i}"),
        Field::XReg(i) => format!("OXM_OF_PKT_REG{i}"),
        Field::XXReg(i) => format!("NXM_NX_XXREG{i}"),
        f => NXM_NAMES
            .iter()
            .find(|(_, g)| *g == f)
            .map(|(n, _)| n.to_string())
            .unwrap_or_else(|| f.name().to_string()),
    }
}

/// `FIELD[]`, `FIELD[start..end]` or `FIELD[bit]`: (field, low bit, width).
fn parse_subfield(piece: &str, s: &str) -> Result<(Field, u32, u32), RuleError> {
    let Some((name, range)) = s.strip_suffix(']').and_then(|d| d.split_once('[')) else {
        return err(piece, "want FIELD[] or FIELD[start..end]");
    };
    let f =
        nxm_field(name).ok_or_else(|| RuleError::new(piece, format!("unknown field {name}")))?;
    // OVS's NXM_OF_IN_PORT (`in_port`) is the 16-bit OpenFlow 1.0 port;
    // OXM_OF_IN_PORT all 32 bits of nicflow's.
    let bits = if matches!(name, "NXM_OF_IN_PORT" | "in_port") {
        16
    } else {
        f.bits()
    };
    let (lo, hi) = if range.is_empty() {
        (0, bits - 1)
    } else {
        let (a, b) = range.split_once("..").unwrap_or((range, range));
        let bit = |s: &str| {
            s.parse::<u32>()
                .ok()
                .filter(|b| *b < bits && s.chars().all(|c| c.is_ascii_digit()))
        };
        match (bit(a), bit(b)) {
            (Some(a), Some(b)) if a <= b => (a, b),
            _ => return err(piece, format!("bit range must lie within 0..{bits}")),
        }
    };
    Ok((f, lo, hi - lo + 1))
}

/// `load:VALUE->DST[]`, `DST[start..end]` or `DST[bit]`.
fn parse_load(piece: &str, arg: &str, matching: &Match) -> Result<Action, RuleError> {
    let Some((val, dst)) = arg.rsplit_once("->") else {
        return err(piece, "load wants VALUE->FIELD[bits]");
    };
    let (f, lo, width) = parse_subfield(piece, dst)?;
    let v = parse_uint(val)
        .filter(|v| *v <= full(width))
        .ok_or_else(|| {
            RuleError::new(
                piece,
                format!("value must be a number that fits in {width} bits"),
            )
        })?;
    set_field(piece, f, v << lo, full(width) << lo, matching)
}

/// A learn element's field: `FIELD[..]` or a bare field name (all of it).
fn learn_field(piece: &str, s: &str) -> Result<(Field, u32, u32), RuleError> {
    if s.ends_with(']') {
        return parse_subfield(piece, s);
    }
    let f = nxm_field(s).ok_or_else(|| RuleError::new(piece, format!("unknown field {s}")))?;
    let bits = if matches!(s, "NXM_OF_IN_PORT" | "in_port") {
        16
    } else {
        f.bits()
    };
    Ok((f, 0, bits))
}

/// `learn(...)`, as OVS's `learn_parse`: the learned rule's head
/// (`table`, timeouts, `priority`, `cookie`, `send_flow_rem`,
/// `delete_learned`), then its match (`FIELD[..]`, `DST[..]=SRC[..]`,
/// `FIELD=VALUE`) and actions (`load:SRC->DST[..]`, `output:SRC[..]`).
/// Source fields need their prerequisites in this rule's match; a
/// learned match field needs them among the constants learned before it
/// (`eth_type=0x800` before `ip_dst=..`), a loaded field must be
/// writable. `limit` and `result_dst` are refused.
fn parse_learn(piece: &str, inner: &str, matching: &Match) -> Result<Action, RuleError> {
    use nicflow_flow::{LearnPart, LearnSpec, LearnSrc};
    let mut l = LearnSpec {
        table: 1,
        idle_timeout: 0,
        hard_timeout: 0,
        fin_idle_timeout: 0,
        fin_hard_timeout: 0,
        priority: 32768,
        cookie: 0,
        send_flow_rem: false,
        delete_learned: false,
        parts: Vec::new(),
    };
    // The constants of the learned match, for its prerequisites.
    let mut learned = Match::catchall();
    let num = |v: &str, max: u128| {
        parse_max(v, max).map_err(|e| RuleError::new(piece, format!("learn: {e}")))
    };
    let src_of = |s: &str, width: u32| -> Result<LearnSrc, RuleError> {
        let (f, o, w) = learn_field(piece, s)?;
        if w != width {
            return err(
                piece,
                format!("learn: source is {w} bits wide, destination {width} bits"),
            );
        }
        Need::P(f.prereq()).check(matching, piece, f.name())?;
        Ok(LearnSrc::Field {
            field: f,
            ofs: o as u8,
        })
    };
    for arg in split_args(inner) {
        if let Some(rest) = arg.strip_prefix("load:") {
            let Some((src, dst)) = rest.rsplit_once("->") else {
                return err(piece, "learn: load wants SRC->DST[bits]");
            };
            let (df, d_o, dw) = parse_subfield(piece, dst)?;
            if !df.settable() {
                return err(piece, not_settable(df));
            }
            let src = if src.ends_with(']') {
                src_of(src, dw)?
            } else {
                let v = parse_uint(src).filter(|v| *v <= full(dw)).ok_or_else(|| {
                    RuleError::new(piece, format!("learn: value must fit in {dw} bits"))
                })?;
                LearnSrc::Imm(v)
            };
            l.parts.push(LearnPart::Load {
                dst: df,
                dst_ofs: d_o as u8,
                n_bits: dw as u8,
                src,
            });
            continue;
        }
        if let Some(rest) = arg.strip_prefix("output:") {
            let (f, o, w) = learn_field(piece, rest)?;
            Need::P(f.prereq()).check(matching, piece, f.name())?;
            l.parts.push(LearnPart::Output {
                src: f,
                ofs: o as u8,
                n_bits: w as u8,
            });
            continue;
        }
        match arg.split_once('=') {
            None if arg == "send_flow_rem" => l.send_flow_rem = true,
            None if arg == "delete_learned" => l.delete_learned = true,
            None => {
                let (f, o, w) = learn_field(piece, arg)?;
                Need::P(f.prereq()).check(&learned, piece, f.name())?;
                l.parts.push(LearnPart::Match {
                    dst: f,
                    dst_ofs: o as u8,
                    n_bits: w as u8,
                    src: src_of(arg, w)?,
                });
            }
            Some(("table", v)) => l.table = num(v, 254)? as u8,
            Some(("idle_timeout", v)) => l.idle_timeout = num(v, 0xffff)? as u16,
            Some(("hard_timeout", v)) => l.hard_timeout = num(v, 0xffff)? as u16,
            Some(("fin_idle_timeout", v)) => l.fin_idle_timeout = num(v, 0xffff)? as u16,
            Some(("fin_hard_timeout", v)) => l.fin_hard_timeout = num(v, 0xffff)? as u16,
            Some(("priority", v)) => l.priority = num(v, 0xffff)? as u16,
            Some(("cookie", v)) => l.cookie = num(v, u64::MAX.into())? as u64,
            Some(("limit" | "result_dst", _)) => {
                return err(piece, "learn: limit and result_dst are not supported")
            }
            Some((dst, src)) if src.ends_with(']') => {
                let (f, o, w) = learn_field(piece, dst)?;
                Need::P(f.prereq()).check(&learned, piece, f.name())?;
                l.parts.push(LearnPart::Match {
                    dst: f,
                    dst_ofs: o as u8,
                    n_bits: w as u8,
                    src: src_of(src, w)?,
                });
            }
            Some((dst, value)) => {
                let (f, o, w) = learn_field(piece, dst)?;
                if dst.ends_with(']') {
                    return err(
                        piece,
                        "learn: a constant goes into a whole field (FIELD=VALUE)",
                    );
                }
                Need::P(f.prereq()).check(&learned, piece, f.name())?;
                let (v, _) = parse_masked(f.kind(), w, value, false)
                    .map_err(|e| RuleError::new(piece, format!("learn: {e}")))?;
                learned.set(f, v << o, full(w) << o);
                l.parts.push(LearnPart::Match {
                    dst: f,
                    dst_ofs: o as u8,
                    n_bits: w as u8,
                    src: LearnSrc::Imm(v),
                });
            }
        }
    }
    Ok(Action::Learn(Box::new(l)))
}

/// `move:SRC[a..b]->DST[c..d]`: same widths; the destination must be
/// settable and both fields' prerequisites met by the rule's match.
fn parse_move(piece: &str, arg: &str, matching: &Match) -> Result<Action, RuleError> {
    let Some((src, dst)) = arg.split_once("->") else {
        return err(piece, "move wants SRC[bits]->DST[bits]");
    };
    let (sf, so, sw) = parse_subfield(piece, src)?;
    let (df, d_o, dw) = parse_subfield(piece, dst)?;
    if sw != dw {
        return err(
            piece,
            format!("source is {sw} bits wide, destination {dw} bits"),
        );
    }
    if !df.settable() {
        return err(piece, not_settable(df));
    }
    Need::P(sf.prereq()).check(matching, piece, sf.name())?;
    set_need(df).check(matching, piece, df.name())?;
    Ok(Action::Move {
        src: sf,
        src_ofs: so as u8,
        dst: df,
        dst_ofs: d_o as u8,
        n_bits: sw as u8,
    })
}

/// An address range and an optional port range, both inclusive.
type NatRange = ((IpAddr, IpAddr), Option<(u16, u16)>);

/// `ADDR[-ADDR][:PORT[-PORT]]` of a `nat(src=..)`; IPv6 addresses in
/// brackets when a port follows (`[2001:db8::1]-[2001:db8::2]:80`).
fn parse_nat_range(piece: &str, s: &str) -> Result<NatRange, RuleError> {
    let bad = |why: &str| RuleError::new(piece, why.to_string());
    // Split off the port part: after the last ':' that is outside brackets,
    // and only when the address part is IPv4 or bracketed.
    let (addrs, ports) = if s.starts_with('[') {
        match s.rfind("]:") {
            Some(i) => (&s[..=i], Some(&s[i + 2..])),
            None => (s, None),
        }
    } else if s.matches(':').count() == 1 {
        let (a, p) = s.split_once(':').unwrap_or((s, ""));
        (a, Some(p))
    } else {
        (s, None)
    };
    let addr = |t: &str| -> Result<IpAddr, RuleError> {
        let t = t.trim_start_matches('[').trim_end_matches(']');
        t.parse::<IpAddr>()
            .map_err(|_| bad("nat range: bad address"))
    };
    if addrs.is_empty() {
        return Err(bad("nat range: an address is needed"));
    }
    let range = {
        // IPv6 ranges are bracketed ("[a]-[b]") or unbracketed without a
        // port; an IPv6 address has no '-', so the first '-' splits.
        let (a, b) = match addrs.split_once('-') {
            Some((a, b)) => (addr(a)?, addr(b)?),
            None => {
                let a = addr(addrs)?;
                (a, a)
            }
        };
        if a.is_ipv4() != b.is_ipv4() {
            return Err(bad("nat range: both ends must be the same address family"));
        }
        if a > b {
            return Err(bad("nat range: the first address is above the last"));
        }
        (a, b)
    };
    let ports = match ports {
        None => None,
        Some(p) => {
            let port = |t: &str| {
                t.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| bad("nat range: bad port (1..=65535)"))
            };
            let (lo, hi) = match p.split_once('-') {
                Some((a, b)) => (port(a)?, port(b)?),
                None => {
                    let a = port(p)?;
                    (a, a)
                }
            };
            if lo > hi {
                return Err(bad("nat range: the first port is above the last"));
            }
            Some((lo, hi))
        }
    };
    Ok((range, ports))
}

/// `nat(src|dst[=RANGE][,persistent][,hash|random])`, checked as OVS's
/// `parse_NAT`/`check_NAT`: one of src/dst, `hash` and `random` exclusive,
/// the range's family that of the rule.
fn parse_nat(piece: &str, body: &str, matching: &Match) -> Result<CtNat, RuleError> {
    let mut n = CtNat::default();
    for a in body.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let (k, v) = match a.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (a, None),
        };
        match (k, v) {
            ("src" | "dst", _) => {
                if n.kind.is_some() {
                    return err(piece, "nat: give one of src and dst");
                }
                n.kind = Some(if k == "src" {
                    NatKind::Src
                } else {
                    NatKind::Dst
                });
                if let Some(r) = v {
                    let (addr, ports) = parse_nat_range(piece, r)?;
                    n.addr = Some(addr);
                    n.ports = ports;
                }
            }
            ("persistent", None) => n.persistent = true,
            ("hash", None) => n.hash = true,
            ("random", None) => n.random = true,
            _ => {
                return err(
                    piece,
                    format!("nat: unknown argument `{a}` (src=, dst=, persistent, hash, random)"),
                )
            }
        }
    }
    if n.hash && n.random {
        return err(piece, "nat: hash and random are exclusive");
    }
    if n.kind.is_none() && (n.persistent || n.hash || n.random) {
        return err(piece, "nat: flags need src= or dst=");
    }
    if let Some((a, _)) = n.addr {
        let (dl, dlm) = matching.get(Field::DlType);
        if dlm == 0xffff && (dl == 0x0800) != a.is_ipv4() {
            return err(piece, "nat: the range's address family is not the rule's");
        }
    }
    Ok(n)
}

/// `ct(ARG,...)`: arguments in any order, as `ovs-ofctl` takes them.
/// Refused with the offending argument: `nat` (not built yet), `alg=`
/// (no application-layer gateways), `exec` actions other than writes of
/// `ct_mark`/`ct_label`, and `exec`/`force` without `commit`.
fn parse_ct(piece: &str, inner: &str, matching: &Match) -> Result<Action, RuleError> {
    let mut ct = CtAction {
        commit: false,
        force: false,
        zone: CtZone::Imm(0),
        table: None,
        set_mark: None,
        set_label: None,
        nat: None,
        moves: Vec::new(),
    };
    let mut exec_given = false;
    for arg in split_actions(inner)? {
        let (k, delim, v) = split_key(arg);
        let bad = |r: String| RuleError::new(arg, r);
        match (k, delim) {
            ("commit", None) => ct.commit = true,
            ("force", None) => ct.force = true,
            ("table", Some('=')) => ct.table = Some(table_no(arg, v)?),
            ("zone", Some('=')) => {
                ct.zone = if v.contains('[') {
                    let (field, lo, width) = parse_subfield(arg, v)?;
                    if width != 16 {
                        return err(arg, "a zone subfield must be 16 bits wide");
                    }
                    Need::P(field.prereq()).check(matching, arg, field.name())?;
                    CtZone::Field {
                        field,
                        ofs: lo as u8,
                        nbits: width as u8,
                    }
                } else {
                    CtZone::Imm(parse_max(v, 0xffff).map_err(bad)? as u16)
                }
            }
            ("exec", Some('(')) => {
                let Some(body) = v.strip_suffix(')') else {
                    return err(arg, "malformed exec(...)");
                };
                exec_given = true;
                for a in split_actions(body)? {
                    if let Some(("move", arg)) = a.split_once(':') {
                        ct.moves.push(parse_ct_move(a, arg, matching)?);
                        continue;
                    }
                    // Later writes combine with earlier ones bit by bit.
                    let (f, value, mask) = parse_ct_exec(a)?;
                    if f == Field::CtMark {
                        let (ov, om) = ct.set_mark.unwrap_or((0, 0));
                        let (v, m) = (value as u32, mask as u32);
                        ct.set_mark = Some(((ov & !m) | v, om | m));
                    } else {
                        let (ov, om) = ct.set_label.unwrap_or((0, 0));
                        ct.set_label = Some(((ov & !mask) | value, om | mask));
                    }
                }
            }
            ("nat", None) => ct.nat = Some(CtNat::default()),
            ("nat", Some('(')) => {
                let Some(body) = v.strip_suffix(')') else {
                    return err(arg, "malformed nat(...)");
                };
                ct.nat = Some(parse_nat(arg, body, matching)?);
            }
            ("alg", _) => {
                return err(
                    arg,
                    "ct alg= is not supported: nicflow has no application-layer gateways",
                );
            }
            _ => {
                return err(
                    arg,
                    "unknown ct argument (commit, force, zone=, table=, exec())",
                )
            }
        }
    }
    if exec_given && !ct.commit {
        return err(piece, "ct exec requires commit");
    }
    if ct.force && !ct.commit {
        return err(piece, "ct force requires commit");
    }
    // As OVS's check_CT: conntrack needs IP, and committing packets the
    // match says are invalid cannot work.
    Need::P(Prereq::Ip).check(matching, piece, "ct")?;
    let (st, stm) = matching.get(Field::CtState);
    if ct.commit && st & stm & 0x10 != 0 {
        return err(piece, "ct commit cannot be used on packets matched as +inv");
    }
    Ok(Action::Ct(ct))
}

/// One action inside `ct(exec(...))`: `set_field:V[/M]->ct_mark|ct_label`
/// or `load:V->NXM_NX_CT_MARK[..]`; the only writes OVS allows there.
fn parse_ct_exec(a: &str) -> Result<(Field, u128, u128), RuleError> {
    let (name, delim, arg) = split_key(a);
    let only = || err(a, "ct exec may only set ct_mark or ct_label");
    if !matches!(delim, Some(':')) {
        return only();
    }
    let ct_field = |f: Field| matches!(f, Field::CtMark | Field::CtLabel);
    match name.to_ascii_lowercase().as_str() {
        "set_field" => {
            let Some((val, fname)) = arg.rsplit_once("->") else {
                return err(a, "set_field wants VALUE->FIELD");
            };
            match Field::from_name(fname) {
                Ok(f) if ct_field(f) => {
                    let (v, m) = parse_masked(ValueKind::Hex, f.bits(), val, true)
                        .map_err(|r| RuleError::new(a, r))?;
                    Ok((f, v & m, m))
                }
                _ => only(),
            }
        }
        "load" => {
            let Some((val, dst)) = arg.rsplit_once("->") else {
                return err(a, "load wants VALUE->FIELD[bits]");
            };
            let (f, lo, width) = parse_subfield(a, dst)?;
            if !ct_field(f) {
                return only();
            }
            let v = parse_uint(val)
                .filter(|v| *v <= full(width))
                .ok_or_else(|| {
                    RuleError::new(
                        a,
                        format!("value must be a number that fits in {width} bits"),
                    )
                })?;
            Ok((f, v << lo, full(width) << lo))
        }
        _ => only(),
    }
}

/// `move:SRC[..]->NXM_NX_CT_MARK[..]|NXM_NX_CT_LABEL[..]` inside
/// `ct(exec(...))`: the only destinations OVS allows there.
fn parse_ct_move(piece: &str, arg: &str, matching: &Match) -> Result<CtMove, RuleError> {
    let Some((src, dst)) = arg.split_once("->") else {
        return err(piece, "move wants SRC[bits]->DST[bits]");
    };
    let (sf, so, sw) = parse_subfield(piece, src)?;
    let (df, d_o, dw) = parse_subfield(piece, dst)?;
    if !matches!(df, Field::CtMark | Field::CtLabel) {
        return err(piece, "ct exec may only set ct_mark or ct_label");
    }
    if sw != dw {
        return err(
            piece,
            format!("source is {sw} bits wide, destination {dw} bits"),
        );
    }
    Need::P(sf.prereq()).check(matching, piece, sf.name())?;
    Ok(CtMove {
        src: sf,
        src_ofs: so as u8,
        dst: df,
        dst_ofs: d_o as u8,
        n_bits: sw as u8,
    })
}

/// `PACKET_IN` reason names, as `ovs-ofctl` spells them (`OFPR_*`).
pub(crate) const PACKET_IN_REASONS: [&str; 6] = [
    "no_match",
    "action",
    "invalid_ttl",
    "action_set",
    "group",
    "packet_out",
];

/// `controller(key=value,...)`: `max_len`, `reason`, `id`, `userdata`
/// (hex bytes, `.`-separated or not), `pause`, `meter_id`. With nothing but
/// `max_len` it is the plain `controller:N`, as OVS encodes and prints it.
fn parse_controller(piece: &str, inner: &str) -> Result<Action, RuleError> {
    let bad = |r: String| RuleError::new(piece, r);
    let mut o = ControllerOpts {
        max_len: CONTROLLER_MAX_LEN,
        controller_id: 0,
        reason: 1,
        userdata: Vec::new(),
        pause: false,
        meter_id: None,
    };
    for a in split_args(inner) {
        match a.split_once('=') {
            _ if a.is_empty() => {}
            None if a == "pause" => o.pause = true,
            Some(("max_len", v)) => o.max_len = parse_max(v, 0xffff).map_err(bad)? as u16,
            Some(("id", v)) => o.controller_id = parse_max(v, 0xffff).map_err(bad)? as u16,
            // 0 is OVS's NX_CTLR_NO_METER.
            Some(("meter_id", v)) => {
                o.meter_id =
                    Some(parse_max(v, 0xffff_ffff).map_err(bad)? as u32).filter(|m| *m != 0)
            }
            Some(("reason", v)) => {
                o.reason = PACKET_IN_REASONS
                    .iter()
                    .position(|r| *r == v)
                    .ok_or_else(|| bad(format!("unknown reason \"{v}\"")))?
                    as u8
            }
            Some(("userdata", v)) => {
                let hex: String = v.chars().filter(|c| *c != '.').collect();
                if !hex.len().is_multiple_of(2) || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return err(piece, "userdata wants hex bytes (00.01.ff)");
                }
                o.userdata = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
                    .collect();
            }
            _ => {
                return err(
                    piece,
                    "unknown controller option (max_len, reason, id, userdata, pause, meter_id)",
                )
            }
        }
    }
    Ok(controller_action(o))
}

/// The plainest action for these options (`Controller` when only
/// `max_len` is set), so that one rule has one form.
pub fn controller_action(o: ControllerOpts) -> Action {
    if o.controller_id == 0
        && o.reason == 1
        && o.userdata.is_empty()
        && !o.pause
        && o.meter_id.is_none()
    {
        Action::Controller { max_len: o.max_len }
    } else {
        Action::Controller2(Box::new(o))
    }
}

/// `LEN)->DST[bit]` after `check_pkt_larger(`: a one-bit, settable
/// destination, as OVS requires.
fn parse_check_pkt_larger(piece: &str, arg: &str, matching: &Match) -> Result<Action, RuleError> {
    let Some((len, dst)) = arg.split_once(")->") else {
        return err(piece, "check_pkt_larger wants (LEN)->DST[bit]");
    };
    let len = parse_max(len.trim(), 0xffff).map_err(|r| RuleError::new(piece, r))? as u16;
    let (dst, ofs, width) = parse_subfield(piece, dst.trim())?;
    if width != 1 {
        return err(piece, "check_pkt_larger writes one bit (DST[bit])");
    }
    if !dst.settable() {
        return err(piece, not_settable(dst));
    }
    set_need(dst).check(matching, piece, dst.name())?;
    Ok(Action::CheckPktLarger {
        len,
        dst,
        ofs: ofs as u8,
    })
}

/// `conjunction(ID,K/N)`, with OVS's limits: 2 <= N <= 64, 1 <= K <= N.
fn parse_conjunction(piece: &str, inner: &str) -> Result<Action, RuleError> {
    let bad = || RuleError::new(piece, "conjunction wants (ID,K/N)");
    let (id, kn) = inner.split_once(',').ok_or_else(bad)?;
    let (k, n) = kn.trim().split_once('/').ok_or_else(bad)?;
    let id = parse_uint(id.trim())
        .filter(|v| *v <= u128::from(u32::MAX))
        .ok_or_else(bad)? as u32;
    let num = |s: &str| s.trim().parse::<u32>().map_err(|_| bad());
    let (k, n) = (num(k)?, num(n)?);
    if n < 2 {
        return err(piece, "conjunction must have at least 2 clauses");
    }
    if n > 64 {
        return err(piece, "conjunction must have at most 64 clauses");
    }
    if k < 1 || k > n {
        return err(
            piece,
            "clause index must be positive and no more than number of clauses",
        );
    }
    Ok(Action::Conjunction {
        id,
        clause: k as u8,
        n_clauses: n as u8,
    })
}

/// One action piece.
fn action(piece: &str, ports: &dyn PortMap, matching: &Match) -> Result<Option<Action>, RuleError> {
    let (name, delim, arg) = split_key(piece);
    let lname = name.to_ascii_lowercase();
    let bad = |r: String| RuleError::new(piece, r);
    // `check_pkt_larger(LEN)->DST[bit]`: the one action with text after
    // its parentheses.
    if lname == "check_pkt_larger" && delim == Some('(') {
        return parse_check_pkt_larger(piece, arg, matching).map(Some);
    }
    // `name(args)`: the argument list must close the piece.
    let inner = if delim == Some('(') {
        match arg.strip_suffix(')') {
            Some(i) => Some(i),
            None => return err(piece, "malformed action: text after `)`"),
        }
    } else {
        None
    };
    let colon = matches!(delim, Some(':') | Some('='));
    let a = match (lname.as_str(), delim) {
        ("drop", None) => return Ok(None),
        ("normal", None) => Action::Normal,
        ("flood", None) => Action::Flood,
        ("all", None) => Action::All,
        ("local", None) => Action::Local,
        ("in_port", None) => Action::InPort,
        ("controller", None) => Action::Controller {
            max_len: CONTROLLER_MAX_LEN,
        },
        ("controller", _) if colon => Action::Controller {
            max_len: parse_max(arg, 0xffff).map_err(bad)? as u16,
        },
        ("controller", Some('(')) => parse_controller(piece, inner.unwrap_or_default())?,
        ("output", _) if colon => output(piece, arg, ports, matching)?,
        ("enqueue", _) if colon => parse_enqueue(piece, arg, ports)?,
        ("enqueue", Some('(')) => parse_enqueue(piece, inner.unwrap_or_default(), ports)?,
        ("write_metadata", _) if colon => {
            let (v, m) = match arg.split_once('/') {
                Some((v, m)) => (v, Some(m)),
                None => (arg, None),
            };
            let num = |t: &str| {
                parse_uint(t)
                    .filter(|x| *x <= u128::from(u64::MAX))
                    .ok_or_else(|| bad("write_metadata wants VALUE[/MASK], 64-bit numbers".into()))
            };
            let mask = match m {
                Some(m) => num(m)? as u64,
                None => u64::MAX,
            };
            Action::WriteMetadata {
                value: num(v)? as u64 & mask,
                mask,
            }
        }
        ("mod_dl_src" | "mod_dl_dst", _) if colon => {
            let v = parse_mac(arg).ok_or_else(|| bad("invalid MAC address".into()))?;
            let f = if lname == "mod_dl_src" {
                Field::DlSrc
            } else {
                Field::DlDst
            };
            set_field(piece, f, v, full(48), matching)?
        }
        ("mod_nw_src" | "mod_nw_dst", _) if colon => {
            let v = arg
                .parse::<Ipv4Addr>()
                .map_err(|_| bad("invalid IPv4 address".into()))?;
            let f = if lname == "mod_nw_src" {
                Field::NwSrc
            } else {
                Field::NwDst
            };
            set_field(piece, f, u32::from(v).into(), full(32), matching)?
        }
        ("mod_nw_tos", _) if colon => {
            let v = parse_max(arg, 255).map_err(bad)?;
            if v & 3 != 0 {
                return err(piece, "TOS must have its two low (ECN) bits clear");
            }
            set_field(piece, Field::NwTos, v, 0xfc, matching)?
        }
        ("mod_nw_ttl", _) if colon => {
            let v = parse_max(arg, 255).map_err(bad)?;
            set_field(piece, Field::NwTtl, v, 0xff, matching)?
        }
        ("mod_tp_src" | "mod_tp_dst", _) if colon => {
            let v = parse_max(arg, 0xffff).map_err(bad)?;
            let f = if lname == "mod_tp_src" {
                Field::TpSrc
            } else {
                Field::TpDst
            };
            set_field(piece, f, v, 0xffff, matching)?
        }
        ("set_field", _) if colon => parse_set_field(piece, arg, ports, matching)?,
        ("load", _) if colon => parse_load(piece, arg, matching)?,
        ("move", _) if colon => parse_move(piece, arg, matching)?,
        ("push_vlan", _) if colon => match parse_max(arg, 0xffff).map_err(bad)? {
            t @ (0x8100 | 0x88a8) => Action::PushVlan(t as u16),
            _ => return err(piece, "push_vlan TPID must be 0x8100 or 0x88a8"),
        },
        ("pop_vlan" | "strip_vlan", None) => Action::PopVlan,
        ("mod_vlan_vid", _) if colon => {
            Action::ModVlanVid(parse_max(arg, 4095).map_err(bad)? as u16)
        }
        ("mod_vlan_pcp", _) if colon => Action::ModVlanPcp(parse_max(arg, 7).map_err(bad)? as u8),
        ("dec_ttl", None) => Action::DecTtl,
        // `dec_ttl()` is `dec_ttl`, as in OVS; `dec_ttl(1,2)` names the
        // controllers that get the expired packet.
        ("dec_ttl", Some('(')) if inner.unwrap_or_default().trim().is_empty() => Action::DecTtl,
        ("dec_ttl", Some('(')) => {
            let ids = inner
                .unwrap_or_default()
                .split(',')
                .map(|id| parse_max(id.trim(), 0xffff).map(|v| v as u16))
                .collect::<Result<Vec<u16>, _>>()
                .map_err(|_| RuleError::new(piece, "dec_ttl wants controller ids 0-65535"))?;
            Action::DecTtlIds(ids)
        }
        ("conjunction", Some('(')) => parse_conjunction(piece, inner.unwrap_or_default())?,
        ("learn", Some('(')) => parse_learn(piece, inner.unwrap_or_default(), matching)?,
        ("clone", Some('(')) => {
            let inner = parse_actions(inner.unwrap_or_default(), ports, matching, 0)
                .map_err(|e| RuleError::new(piece, format!("in clone: {}", e.reason)))?;
            // Instructions (and soft matches) have no meaning on a copy;
            // OVS refuses them inside clone too.
            if inner.iter().any(|a| {
                matches!(
                    a,
                    Action::GotoTable(_)
                        | Action::WriteMetadata { .. }
                        | Action::Meter(_)
                        | Action::Conjunction { .. }
                )
            }) {
                return err(
                    piece,
                    "clone may not contain goto_table, write_metadata, meter or conjunction",
                );
            }
            Action::Clone(inner)
        }
        ("push", _) if colon => {
            let (field, ofs, n_bits) = parse_subfield(piece, arg)?;
            Need::P(field.prereq()).check(matching, piece, field.name())?;
            Action::StackPush {
                field,
                ofs: ofs as u8,
                n_bits: n_bits as u8,
            }
        }
        ("pop", _) if colon => {
            let (field, ofs, n_bits) = parse_subfield(piece, arg)?;
            if !field.settable() {
                return err(piece, not_settable(field));
            }
            set_need(field).check(matching, piece, field.name())?;
            Action::StackPop {
                field,
                ofs: ofs as u8,
                n_bits: n_bits as u8,
            }
        }
        ("ct", None) => parse_ct(piece, "", matching)?,
        ("ct", Some('(')) => parse_ct(piece, inner.unwrap_or_default(), matching)?,
        ("ct_clear", None) => Action::CtClear,
        ("group", _) if colon => Action::Group(crate::group::parse_group_id(piece, arg)?),
        ("meter", _) if colon => Action::Meter(crate::meter::parse_meter_id(piece, arg)?),
        ("goto_table", _) if colon => Action::GotoTable(table_no(piece, arg)?),
        ("resubmit", _) if colon => match resubmit_port(piece, arg, ports)? {
            Some(p) => Action::Resubmit {
                port: Some(p),
                table: None,
            },
            None => return err(piece, "resubmit needs a port or a table"),
        },
        ("resubmit", Some('(')) => {
            let args = split_args(inner.unwrap_or_default());
            let (p, t) = match args.as_slice() {
                [p] => (*p, ""),
                [p, t] => (*p, *t),
                _ => return err(piece, "resubmit wants (PORT,TABLE)"),
            };
            let port = resubmit_port(piece, p, ports)?;
            let table = if t.is_empty() {
                None
            } else {
                Some(table_no(piece, t)?)
            };
            if port.is_none() && table.is_none() {
                return err(piece, "resubmit needs a port or a table");
            }
            Action::Resubmit { port, table }
        }
        (
            "output" | "controller" | "mod_dl_src" | "mod_dl_dst" | "mod_nw_src" | "mod_nw_dst"
            | "mod_nw_tos" | "mod_nw_ttl" | "mod_tp_src" | "mod_tp_dst" | "set_field" | "load"
            | "push_vlan" | "pop_vlan" | "strip_vlan" | "mod_vlan_vid" | "mod_vlan_pcp" | "dec_ttl"
            | "goto_table" | "resubmit" | "drop" | "normal" | "flood" | "all" | "local" | "in_port"
            | "ct" | "ct_clear" | "move" | "group" | "meter" | "enqueue" | "write_metadata"
            | "conjunction" | "clone" | "push" | "pop" | "learn",
            _,
        ) => return err(piece, format!("malformed {lname} action")),
        (_, None) => match classify_port(piece) {
            Ok(PortText::Number(n)) => Action::Output(n),
            Ok(PortText::Reserved(r)) => reserved_action(piece, r)?,
            Ok(PortText::Name) => match resolve_name(piece, ports, false) {
                Ok(n) => Action::Output(n),
                Err(_) => return err(piece, "unknown action"),
            },
            Err(r) if piece.starts_with(|c: char| c.is_ascii_digit()) => return err(piece, r),
            Err(_) => return err(piece, "unknown action"),
        },
        _ => return err(piece, "unknown action"),
    };
    Ok(Some(a))
}

/// Parse the text after `actions=`. `matching` and `table` are the rule's own
/// match and table, for prerequisite and `goto_table` checks.
pub(crate) fn parse_actions(
    text: &str,
    ports: &dyn PortMap,
    matching: &Match,
    table: u8,
) -> Result<Vec<Action>, RuleError> {
    let pieces = split_actions(text)?;
    let mut out: Vec<(&str, Action)> = Vec::with_capacity(pieces.len());
    let mut drop: Option<&str> = None;
    for piece in &pieces {
        match action(piece, ports, matching)? {
            Some(a) => out.push((piece, a)),
            None => drop = Some(piece),
        }
    }
    if let Some(d) = drop {
        if pieces.len() > 1 {
            return err(d, "drop must be the only action");
        }
    }
    // A conjunctive rule is a soft match, never run: OVS refuses any other
    // action beside its conjunctions.
    if out.iter().any(|(_, a)| a.is_conjunction()) {
        if let Some((piece, _)) = out.iter().find(|(_, a)| !a.is_conjunction()) {
            return err(
                piece,
                "\"conjunction\" actions may not be used along with any other kind of action",
            );
        }
    }
    let n = out.len();
    for (i, (piece, a)) in out.iter().enumerate() {
        // OpenFlow 1.3 applies the meter instruction before the action
        // list; ovs-ofctl refuses any other order, and a second meter.
        if let Action::Meter(_) = a {
            if i != 0 {
                let msg = if matches!(out[0].1, Action::Meter(_)) {
                    "duplicate meter instruction not allowed"
                } else {
                    "meter must appear before the other actions (OpenFlow applies it first)"
                };
                return err(piece, msg);
            }
        }
        // An instruction, as in OpenFlow 1.1+: after every action but
        // goto_table, and once (OVS: "invalid instruction ordering").
        if let Action::WriteMetadata { .. } = a {
            let later = &out[i + 1..];
            if later
                .iter()
                .any(|(_, a)| matches!(a, Action::WriteMetadata { .. }))
            {
                return err(piece, "duplicate write_metadata instruction not allowed");
            }
            if later.iter().any(|(_, a)| !a.is_goto()) {
                return err(
                    piece,
                    "write_metadata must come after every action but goto_table (OpenFlow applies it after them)",
                );
            }
        }
        if let Action::GotoTable(t) = a {
            if i + 1 != n {
                return err(piece, "goto_table must be the last action");
            }
            if *t <= table {
                return err(
                    piece,
                    format!(
                        "goto_table must go to a later table than the rule's own table {table}"
                    ),
                );
            }
        }
    }
    Ok(out.into_iter().map(|(_, a)| a).collect())
}
