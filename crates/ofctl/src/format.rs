//! Printing rules back as text, in one canonical form.
//!
//! This is the way back from the tables to the operator: `dump-flows`, error
//! reports from the slow path, `check-flows` output. Because a rule prints
//! exactly one way and that text parses back to the same rule, printed rules
//! can be diffed, stored and re-applied safely.
//!
//! # The canonical form
//!
//! ```text
//! table=1, priority=100, cookie=0x5, idle_timeout=10, hard_timeout=60, tcp,in_port=1,nw_src=198.18.0.0/16,tp_dst=80 actions=mod_dl_src:00:11:22:33:44:55,output:2
//! ```
//!
//! * Metadata first, each followed by `", "`, in the order `table`,
//!   `priority`, `cookie` (hex), `idle_timeout`, `hard_timeout`; defaults
//!   (table 0, priority 32768, cookie 0, timeouts 0) are left out.
//! * Then the match, comma-separated without spaces: the protocol shorthand
//!   (`ip`, `ipv6`, `arp`, `tcp`, `udp`, `sctp`, `icmp`, `tcp6`, `udp6`,
//!   `sctp6`, `icmp6`) when `dl_type` (and `nw_proto`) say so, otherwise
//!   `dl_type=0x....`; then the fields in [`Field::ALL`] order, each under its
//!   protocol-specific name (`arp_spa`/`arp_tpa`/`arp_op` under `arp`,
//!   `icmp_type`/`icmp_code` under `icmp`, `icmpv6_type`/`icmpv6_code` under
//!   `icmp6`, `nw_src`/`tp_src`... otherwise). Fields implied by the
//!   shorthand are skipped.
//! * Values: decimal for small integers, `0x` hex for registers, metadata,
//!   tunnel ids, `dl_type`, `vlan_tci` and `ipv6_label`; `value/mask` in hex
//!   when an integer is masked; addresses with `/len` when the mask is a
//!   prefix (nothing for a full mask), `/mask` otherwise.
//! * Special fields: `vlan_tci` prints as `dl_vlan=N` (mask 0x1fff),
//!   `dl_vlan_pcp=N` (mask 0xf000) or `vlan_tci=0x....[/0x....]`; the TOS byte
//!   as `nw_tos=N` (DSCP bits) and/or `nw_ecn=N`; fragments as
//!   `ip_frag=no|yes|first|later|not_later` (any other combination as
//!   `nw_frag=V/M`); `tcp_flags` as `+syn-ack` flag syntax when only named
//!   flags are masked, hex otherwise.
//! * Ports print by name when the [`PortMap`] has a name that reads back as
//!   the same number, reserved ports in capitals (`LOCAL`).
//! * A space, then `actions=` and the actions comma-separated, `drop` for
//!   none: `output:P`, `IN_PORT`, `NORMAL`, `FLOOD`, `ALL`, `LOCAL`,
//!   `CONTROLLER:N`, `mod_dl_src:`/`mod_dl_dst:`/`mod_nw_src:`/`mod_nw_dst:`/
//!   `mod_nw_ttl:`/`mod_tp_src:`/`mod_tp_dst:` for whole-field writes of those
//!   fields, `mod_nw_tos:` for a DSCP write, `set_field:V[/M]->FIELD` for
//!   everything else, `push_vlan:0x8100`, `pop_vlan`, `mod_vlan_vid:N`,
//!   `mod_vlan_pcp:N`, `dec_ttl`, `goto_table:N`, `resubmit:P` or
//!   `resubmit(P,T)` / `resubmit(,T)`.
//! * An empty match with no metadata prints as just `actions=...`.

use nicflow_flow::field::ValueKind;
use nicflow_flow::field::CT_STATE_FLAGS;
use nicflow_flow::{Action, CtAction, CtNat, CtZone, Field, Match, NatKind};

use crate::matchp::{FRAGS, SHORTHANDS, TCP_FLAGS, TCP_FLAGS_NAMED};
use crate::ports::{format_port, PortMap};
use crate::values::{format_masked, full};
use crate::{FlowSpec, MatchSpec, OFP_DEFAULT_PRIORITY};

fn tcp_flags(v: u128, m: u128) -> String {
    if m & !u128::from(TCP_FLAGS_NAMED) != 0 {
        return format_masked(ValueKind::Hex, 12, v, m);
    }
    let mut s = String::new();
    for &(name, bit) in TCP_FLAGS {
        let bit = u128::from(bit);
        if m & bit != 0 {
            s.push(if v & bit != 0 { '+' } else { '-' });
            s.push_str(name);
        }
    }
    s
}

/// `+trk+est` flag syntax when only named bits are masked (all are), as
/// `ovs-ofctl` prints it.
fn ct_state(v: u128, m: u128) -> String {
    if m & !0xff != 0 {
        return format_masked(ValueKind::Hex, 32, v, m);
    }
    if m == 0xff {
        // Every flag matched: OVS's `match_format` lists the set ones.
        let set: Vec<&str> = CT_STATE_FLAGS
            .iter()
            .filter(|(_, b)| v & u128::from(*b) != 0)
            .map(|(n, _)| *n)
            .collect();
        return if set.is_empty() {
            "0".into()
        } else {
            set.join("|")
        };
    }
    let mut s = String::new();
    for &(name, bit) in CT_STATE_FLAGS {
        let bit = u128::from(bit);
        if m & bit != 0 {
            s.push(if v & bit != 0 { '+' } else { '-' });
            s.push_str(name);
        }
    }
    s
}

/// `ct(...)` as OVS's `format_CT`: commit, force, table, zone, exec; zone 0
/// and empty parts left out.
fn format_ct(c: &CtAction) -> String {
    let mut parts: Vec<String> = Vec::new();
    if c.commit {
        parts.push("commit".into());
    }
    if c.force {
        parts.push("force".into());
    }
    if let Some(t) = c.table {
        parts.push(format!("table={t}"));
    }
    match c.zone {
        CtZone::Imm(0) => {}
        CtZone::Imm(z) => parts.push(format!("zone={z}")),
        CtZone::Field { field, ofs, nbits } => parts.push(format!(
            "zone={}",
            subfield(field, ofs.into(), nbits.into())
        )),
    }
    if let Some(n) = &c.nat {
        parts.push(format_nat(n));
    }
    let mut exec = Vec::new();
    let mut put = |f: Field, v: u128, m: u128| {
        exec.push(format!(
            "set_field:{}->{}",
            format_masked(ValueKind::Hex, f.bits(), v, m),
            f.name()
        ))
    };
    if let Some((v, m)) = c.set_mark {
        put(Field::CtMark, v.into(), m.into());
    }
    if let Some((v, m)) = c.set_label {
        put(Field::CtLabel, v, m);
    }
    if !exec.is_empty() {
        parts.push(format!("exec({})", exec.join(",")));
    }
    format!("ct({})", parts.join(","))
}

/// `nat(src=A-B:P-Q,persistent,hash)` as OVS's `format_NAT`: a range end
/// equal to its start is left out; IPv6 addresses are bracketed when a
/// port follows.
fn format_nat(n: &CtNat) -> String {
    let Some(kind) = n.kind else {
        return "nat".into();
    };
    let mut s = format!("nat({}", if kind == NatKind::Src { "src" } else { "dst" });
    let bracket = n.ports.is_some();
    let addr = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V6(v6) if bracket => format!("[{v6}]"),
        a => a.to_string(),
    };
    if let Some((lo, hi)) = n.addr {
        s.push('=');
        s.push_str(&addr(lo));
        if hi != lo {
            s.push('-');
            s.push_str(&addr(hi));
        }
    }
    if let Some((lo, hi)) = n.ports {
        s.push_str(&format!(":{lo}"));
        if hi != lo {
            s.push_str(&format!("-{hi}"));
        }
    }
    for (on, name) in [
        (n.persistent, "persistent"),
        (n.hash, "hash"),
        (n.random, "random"),
    ] {
        if on {
            s.push(',');
            s.push_str(name);
        }
    }
    s.push(')');
    s
}

/// `NAME[]` for a whole field, `NAME[a..b]` (or `NAME[a]`) otherwise, as
/// OVS's `mf_format_subfield`.
pub(crate) fn subfield(f: Field, ofs: u32, nbits: u32) -> String {
    let name = crate::actions::nxm_name(f);
    if ofs == 0 && nbits == f.bits() {
        format!("{name}[]")
    } else if nbits == 1 {
        format!("{name}[{ofs}]")
    } else {
        format!("{name}[{ofs}..{}]", ofs + nbits - 1)
    }
}

/// The match part alone, comma-separated; empty for a catch-all match.
pub fn format_match(m: &Match, ports: &dyn PortMap) -> String {
    let (k, mk) = (m.key(), &m.mask().0);
    let dl = (mk.dl_type == 0xffff).then_some(k.dl_type);
    let proto = (mk.nw_proto == 0xff).then_some(k.nw_proto);
    let mut parts: Vec<String> = Vec::new();
    // The most specific shorthand that fits.
    let short = dl.and_then(|dl| {
        SHORTHANDS
            .iter()
            .filter(|s| s.1 == dl && (s.2.is_none() || s.2 == proto))
            .max_by_key(|s| s.2.is_some())
    });
    if let Some(s) = short {
        parts.push(s.0.to_string());
    }
    let proto_implied = short.is_some_and(|s| s.2.is_some());
    let is_arp = dl == Some(0x0806);
    let icmp4 = dl == Some(0x0800) && proto == Some(1);
    let icmp6 = dl == Some(0x86dd) && proto == Some(58);

    for &f in Field::ALL {
        let show = match f {
            Field::DlType => short.is_none(),
            Field::NwProto => !is_arp && !proto_implied,
            Field::ArpOp | Field::ArpSpa | Field::ArpTpa => is_arp,
            Field::NwSrc | Field::NwDst => !is_arp,
            Field::TpSrc | Field::TpDst => !icmp4 && !icmp6,
            Field::IcmpType | Field::IcmpCode => icmp4,
            Field::Icmpv6Type | Field::Icmpv6Code => icmp6,
            _ => true,
        };
        let (v, fm) = m.get(f);
        if !show || fm == 0 {
            continue;
        }
        let name = f.name();
        match f {
            Field::InPort if fm == full(32) => {
                parts.push(format!("in_port={}", format_port(v as u32, ports)))
            }
            Field::DlType if fm == 0xffff => parts.push(format!("dl_type={v:#06x}")),
            Field::VlanTci => parts.push(match (v, fm) {
                (v, 0x1fff) if v & 0x1000 != 0 => format!("dl_vlan={}", v & 0xfff),
                (v, 0xf000) if v & 0x1000 != 0 => format!("dl_vlan_pcp={}", v >> 13),
                (v, 0xffff) => format!("vlan_tci={v:#06x}"),
                (v, m) => format!("vlan_tci={v:#06x}/{m:#06x}"),
            }),
            Field::NwTos => {
                let (dscp, ecn) = (fm & 0xfc, fm & 0x03);
                match dscp {
                    0 => {}
                    0xfc => parts.push(format!("nw_tos={}", v & 0xfc)),
                    d => parts.push(format!("nw_tos={:#x}/{d:#x}", v & d)),
                }
                match ecn {
                    0 => {}
                    3 => parts.push(format!("nw_ecn={}", v & 3)),
                    e => parts.push(format!("nw_ecn={:#x}/{e:#x}", v & e)),
                }
            }
            Field::NwFrag => parts.push(
                match FRAGS
                    .iter()
                    .find(|fr| u128::from(fr.1) == v && u128::from(fr.2) == fm)
                {
                    Some(fr) => format!("ip_frag={}", fr.0),
                    None => format!("nw_frag={}", format_masked(ValueKind::Int, 2, v, fm)),
                },
            ),
            Field::TcpFlags => parts.push(format!("tcp_flags={}", tcp_flags(v, fm))),
            Field::CtState => parts.push(format!("ct_state={}", ct_state(v, fm))),
            Field::CtZone if fm == 0xffff => parts.push(format!("ct_zone={v}")),
            _ => parts.push(format!(
                "{name}={}",
                format_masked(f.kind(), f.bits(), v, fm)
            )),
        }
    }
    parts.join(",")
}

fn format_action(a: &Action, ports: &dyn PortMap) -> String {
    match a {
        // ovs-ofctl's format_OUTPUT: `max_len` is shown for the controller only.
        Action::Output(p) | Action::OutputMaxLen { port: p, .. } => {
            format!("output:{}", format_port(*p, ports))
        }
        Action::InPort => "IN_PORT".into(),
        Action::Normal => "NORMAL".into(),
        Action::Flood => "FLOOD".into(),
        Action::All => "ALL".into(),
        Action::Local => "LOCAL".into(),
        Action::Controller { max_len } => format!("CONTROLLER:{max_len}"),
        Action::Meter(id) => format!("meter:{id}"),
        Action::SetField { field, value, mask } => {
            let (f, v, m) = (*field, *value, *mask);
            let whole = m == f.full_mask();
            let fv = |v: u128| format_masked(f.kind(), f.bits(), v, f.full_mask());
            match f {
                Field::DlSrc if whole => format!("mod_dl_src:{}", fv(v)),
                Field::DlDst if whole => format!("mod_dl_dst:{}", fv(v)),
                Field::NwSrc if whole => format!("mod_nw_src:{}", fv(v)),
                Field::NwDst if whole => format!("mod_nw_dst:{}", fv(v)),
                Field::NwTtl if whole => format!("mod_nw_ttl:{v}"),
                Field::TpSrc if whole => format!("mod_tp_src:{v}"),
                Field::TpDst if whole => format!("mod_tp_dst:{v}"),
                Field::NwTos if m == 0xfc => format!("mod_nw_tos:{v}"),
                Field::NwTos if m == 0x03 => format!("set_field:{v}->nw_ecn"),
                Field::InPort if whole => {
                    format!("set_field:{}->in_port", format_port(v as u32, ports))
                }
                _ => format!(
                    "set_field:{}->{}",
                    format_masked(f.kind(), f.bits(), v, m),
                    f.name()
                ),
            }
        }
        Action::PushVlan(t) => format!("push_vlan:{t:#06x}"),
        Action::PopVlan => "pop_vlan".into(),
        Action::ModVlanVid(v) => format!("mod_vlan_vid:{v}"),
        Action::ModVlanPcp(p) => format!("mod_vlan_pcp:{p}"),
        Action::DecTtl => "dec_ttl".into(),
        Action::GotoTable(t) => format!("goto_table:{t}"),
        Action::Resubmit { port, table } => {
            let p = port.map(|p| format_port(p, ports)).unwrap_or_default();
            match table {
                None if port.is_some() => format!("resubmit:{p}"),
                None => "resubmit(,)".into(),
                Some(t) => format!("resubmit({p},{t})"),
            }
        }
        Action::Ct(c) => format_ct(c),
        Action::Move {
            src,
            src_ofs,
            dst,
            dst_ofs,
            n_bits,
        } => format!(
            "move:{}->{}",
            subfield(*src, (*src_ofs).into(), (*n_bits).into()),
            subfield(*dst, (*dst_ofs).into(), (*n_bits).into())
        ),
        Action::CtClear => "ct_clear".into(),
        Action::Group(g) => format!("group:{g}"),
    }
}

/// The action list, comma-separated; `drop` when empty.
pub fn format_actions(a: &[Action], ports: &dyn PortMap) -> String {
    if a.is_empty() {
        return "drop".into();
    }
    a.iter()
        .map(|a| format_action(a, ports))
        .collect::<Vec<_>>()
        .join(",")
}

fn join_head(mut parts: Vec<String>, m: &Match, ports: &dyn PortMap) -> String {
    let fm = format_match(m, ports);
    if !fm.is_empty() {
        parts.push(fm);
    }
    parts.join(", ")
}

/// A whole rule in canonical form (see the module docs).
pub fn format_flow(f: &FlowSpec, ports: &dyn PortMap) -> String {
    let mut parts = Vec::new();
    if f.table != 0 {
        parts.push(format!("table={}", f.table));
    }
    if f.priority != OFP_DEFAULT_PRIORITY {
        parts.push(format!("priority={}", f.priority));
    }
    if f.cookie != 0 {
        parts.push(format!("cookie={:#x}", f.cookie));
    }
    if f.idle_timeout != 0 {
        parts.push(format!("idle_timeout={}", f.idle_timeout));
    }
    if f.hard_timeout != 0 {
        parts.push(format!("hard_timeout={}", f.hard_timeout));
    }
    let head = join_head(parts, &f.r#match, ports);
    let acts = format_actions(&f.actions, ports);
    if head.is_empty() {
        format!("actions={acts}")
    } else {
        format!("{head} actions={acts}")
    }
}

/// A flow filter in canonical form: `table=`, `priority=`, `cookie=V[/M]`
/// (each only if given), then the match as in [`format_match`]. Empty for
/// "every flow".
pub fn format_match_spec(s: &MatchSpec, ports: &dyn PortMap) -> String {
    let mut parts = Vec::new();
    if let Some(t) = s.table {
        parts.push(format!("table={t}"));
    }
    if let Some(p) = s.priority {
        parts.push(format!("priority={p}"));
    }
    if let Some((c, m)) = s.cookie {
        parts.push(if m == u64::MAX {
            format!("cookie={c:#x}")
        } else {
            format!("cookie={c:#x}/{m:#x}")
        });
    }
    join_head(parts, &s.r#match, ports)
}
