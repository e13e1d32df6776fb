//! Printing rules back as text, in one canonical form.
//!
//! This is the way back from the tables to the operator: `dump-flows`, error
//! reports from the slow path, `check-flows` output. Because a rule prints
//! exactly one way and that text parses back to the same rule, printed rules
//! can be diffed, stored and re-applied safely.
//!
//! # The canonical form
//!
//! A rule prints as `ovs-ofctl dump-flows --no-stats` (Open vSwitch 3.1,
//! default protocol) prints it; `tests/ovs_compare.rs` checks this against
//! the installed `ovs-ofctl` over a few hundred rules and lists the
//! remaining differences with their reasons.
//!
//! ```text
//! cookie=0x5, table=1, idle_timeout=10, hard_timeout=60, send_flow_rem priority=100,tcp,in_port=1,nw_src=198.18.0.0/16,tp_dst=80 actions=mod_dl_src:00:11:22:33:44:55,output:2
//! ```
//!
//! * The head (`ofputil_flow_stats_format`): `cookie` (hex), `table`,
//!   `idle_timeout`, `hard_timeout`, each followed by `", "`, then
//!   `send_flow_rem ` (a space); defaults (cookie 0, table 0, timeouts 0,
//!   no flag) are left out.
//! * Then `priority=N` (unless 32768) and the match, comma-separated
//!   without spaces, in the order of OVS's `match_format` (see
//!   [`format_match`]): `pkt_mark`, connection-tracking fields, the
//!   protocol shorthand (`ip`, `tcp6`, ...; else `dl_type=0x....`),
//!   registers, tunnel, `metadata`, `in_port`, VLAN, Ethernet, L3, L4.
//! * Values as OVS prints them: `%#x` for registers, marks, metadata and
//!   tunnel ids (`0x5`, and `0` for zero), decimal for small integers,
//!   `0x%x/0x%x` for a masked small integer, `0x%05x` for `ipv6_label`,
//!   addresses with `/len` for a prefix mask and `/mask` otherwise.
//! * Special fields: VLAN as `dl_vlan=N` and/or `dl_vlan_pcp=N` when the
//!   tag bit is matched as present and VID/PCP wholly or not at all,
//!   `vlan_tci=0x....[/0x....]` otherwise; the TOS byte as `nw_tos=N`
//!   (DSCP bits) and/or `nw_ecn=N`; fragments as
//!   `nw_frag=no|yes|first|later|not_later` (a combination no name stands
//!   for, which only OpenFlow can send, as `nw_frag=V/M`); ICMP and ICMPv6
//!   type/code as `icmp_type`/`icmp_code`; `tcp_flags` as `syn|ack` when all
//!   12 bits are matched, `+syn-ack` for named bits, hex otherwise.
//! * Ports print by name when the [`PortMap`] has a name that reads back as
//!   the same number, reserved ports in capitals (`LOCAL`).
//! * A space, then `actions=` and the actions comma-separated, `drop` for
//!   none: `output:P`, `IN_PORT`, `NORMAL`, `FLOOD`, `ALL`, `LOCAL`,
//!   `CONTROLLER:N`, `enqueue:P:Q`, `output:FIELD[a..b]`;
//!   `mod_dl_src:`/`mod_dl_dst:`/`mod_nw_src:`/`mod_nw_dst:`/`mod_tp_src:`/
//!   `mod_tp_dst:` for whole-field writes of those fields, `mod_nw_tos:` for
//!   a DSCP write, `load:V->FIELD[a..b]` for other writes with a contiguous
//!   mask (up to 64 bits), `set_field:V[/M]->FIELD` for the rest (as
//!   OpenFlow 1.0 + NXM carries them); `push_vlan:0x8100`, `strip_vlan`,
//!   `mod_vlan_vid:N`, `mod_vlan_pcp:N`, `dec_ttl`, `resubmit:P` or
//!   `resubmit(P,T)` / `resubmit(,T)`, `ct(...)`, `group:N`, `meter:N`,
//!   `write_metadata:V[/M]`, `goto_table:N` (the last two as OpenFlow 1.3
//!   prints them).
//! * An empty match prints as just `actions=...` after the head.

use nicflow_flow::field::ValueKind;
use nicflow_flow::field::CT_STATE_FLAGS;
use nicflow_flow::{Action, CtAction, CtNat, CtZone, Field, Match, NatKind};

use crate::matchp::{FRAGS, SHORTHANDS, TCP_FLAGS, TCP_FLAGS_NAMED};
use crate::ports::{format_port, PortMap};
use crate::values::{format_masked, full};
use crate::{FlowSpec, MatchSpec, OFP_DEFAULT_PRIORITY};

/// OVS's `format_flags_masked` for TCP flags: every bit matched (0xfff)
/// lists the set flags joined by `|` (`0` for none), a partial mask
/// `+flag`/`-flag` per matched bit; hex when an unnamed bit is involved.
fn tcp_flags(v: u128, m: u128) -> String {
    if m == 0xfff && v & !u128::from(TCP_FLAGS_NAMED) == 0 {
        let set: Vec<&str> = TCP_FLAGS
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
    // As ovs-ofctl prints them: a whole-field write as `set_field`, a
    // contiguous partial one as `load:V->FIELD[bits]`.
    let mut put = |f: Field, v: u128, m: u128| {
        let lo = m.trailing_zeros();
        let width = m.checked_shr(lo).unwrap_or(0).count_ones();
        exec.push(
            if m != f.full_mask() && m != 0 && m.checked_shr(lo) == Some(full(width)) {
                format!("load:{}->{}", c_hex(v >> lo), subfield(f, lo, width))
            } else {
                format!(
                    "set_field:{}->{}",
                    format_masked(ValueKind::Hex, f.bits(), v, m),
                    f.name()
                )
            },
        )
    };
    if let Some((v, m)) = c.set_mark {
        put(Field::CtMark, v.into(), m.into());
    }
    if let Some((v, m)) = c.set_label {
        put(Field::CtLabel, v, m);
    }
    for mv in &c.moves {
        exec.push(format!(
            "move:{}->{}",
            subfield(mv.src, mv.src_ofs.into(), mv.n_bits.into()),
            subfield(mv.dst, mv.dst_ofs.into(), mv.n_bits.into())
        ));
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
    // OVS's NXM_OF_IN_PORT is the 16-bit OpenFlow 1.0 port; nicflow's
    // port numbers are 32 bits wide, OXM_OF_IN_PORT.
    let (name, bits) = match f {
        Field::InPort if ofs + nbits <= 16 => ("NXM_OF_IN_PORT".to_string(), 16),
        Field::InPort => ("OXM_OF_IN_PORT".to_string(), 32),
        f => (crate::actions::nxm_name(f), f.bits()),
    };
    if ofs == 0 && nbits == bits {
        format!("{name}[]")
    } else if nbits == 1 {
        format!("{name}[{ofs}]")
    } else {
        format!("{name}[{ofs}..{}]", ofs + nbits - 1)
    }
}

/// C's `%#x`: `0x5`, but plain `0` for zero (as `ovs-ofctl` prints
/// registers, metadata, marks and tunnel ids).
fn c_hex(v: u128) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// OVS's `format_uint32_masked` / `format_be64_masked`: `%#x[/%#x]`.
fn hex_masked(f: Field, v: u128, m: u128) -> String {
    if m == f.full_mask() {
        c_hex(v)
    } else {
        format!("{}/{}", c_hex(v), c_hex(m))
    }
}

/// OVS's `format_be16_masked` / `format_uint16_masked`: decimal when
/// exact, `0x%x/0x%x` otherwise.
fn dec_masked(f: Field, v: u128, m: u128) -> String {
    if m == f.full_mask() {
        v.to_string()
    } else {
        format!("{v:#x}/{m:#x}")
    }
}

/// `name=VALUE` for a matched field (nothing when wildcarded).
fn put(
    parts: &mut Vec<String>,
    m: &Match,
    f: Field,
    text: &dyn Fn(u128, u128) -> String,
    name: &str,
) {
    let (v, fm) = m.get(f);
    if fm != 0 {
        parts.push(format!("{name}={}", text(v, fm)));
    }
}

/// The match part alone, comma-separated; empty for a catch-all match.
///
/// Fields come in the order of OVS's `match_format` (lib/match.c):
/// `pkt_mark`, the connection-tracking fields, the protocol shorthand,
/// registers, tunnel fields, `metadata`, `in_port`, VLAN, Ethernet
/// addresses, `dl_type`, L3 addresses, `nw_proto`/`arp_op`, ARP hardware
/// addresses, `nw_tos`/`nw_ecn`/`nw_ttl`, `nw_frag`, L4 ports or ICMP
/// type/code, `tcp_flags`; each value spelled as OVS spells it.
pub fn format_match(m: &Match, ports: &dyn PortMap) -> String {
    let (k, mk) = (m.key(), &m.mask().0);
    let dl = (mk.dl_type == 0xffff).then_some(k.dl_type);
    let proto = (mk.nw_proto == 0xff).then_some(k.nw_proto);
    let mut parts: Vec<String> = Vec::new();
    let hex = |f: Field| move |v, m| hex_masked(f, v, m);
    let dec = |f: Field| move |v, m| dec_masked(f, v, m);
    let addr = |f: Field| move |v, m| format_masked(f.kind(), f.bits(), v, m);

    put(
        &mut parts,
        m,
        Field::PktMark,
        &hex(Field::PktMark),
        "pkt_mark",
    );
    put(&mut parts, m, Field::ConjId, &dec(Field::ConjId), "conj_id");
    put(&mut parts, m, Field::CtState, &ct_state, "ct_state");
    put(&mut parts, m, Field::CtZone, &dec(Field::CtZone), "ct_zone");
    put(&mut parts, m, Field::CtMark, &hex(Field::CtMark), "ct_mark");
    put(
        &mut parts,
        m,
        Field::CtLabel,
        &hex(Field::CtLabel),
        "ct_label",
    );
    put(
        &mut parts,
        m,
        Field::CtNwSrc,
        &addr(Field::CtNwSrc),
        "ct_nw_src",
    );
    put(
        &mut parts,
        m,
        Field::CtIpv6Src,
        &addr(Field::CtIpv6Src),
        "ct_ipv6_src",
    );
    put(
        &mut parts,
        m,
        Field::CtNwDst,
        &addr(Field::CtNwDst),
        "ct_nw_dst",
    );
    put(
        &mut parts,
        m,
        Field::CtIpv6Dst,
        &addr(Field::CtIpv6Dst),
        "ct_ipv6_dst",
    );
    if m.get(Field::CtNwProto).1 != 0 {
        put(
            &mut parts,
            m,
            Field::CtNwProto,
            &dec(Field::CtNwProto),
            "ct_nw_proto",
        );
        put(
            &mut parts,
            m,
            Field::CtTpSrc,
            &dec(Field::CtTpSrc),
            "ct_tp_src",
        );
        put(
            &mut parts,
            m,
            Field::CtTpDst,
            &dec(Field::CtTpDst),
            "ct_tp_dst",
        );
    }
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
    for i in 0..16 {
        let f = Field::Reg(i);
        put(&mut parts, m, f, &hex(f), f.name());
    }
    put(&mut parts, m, Field::TunId, &hex(Field::TunId), "tun_id");
    put(
        &mut parts,
        m,
        Field::TunSrc,
        &addr(Field::TunSrc),
        "tun_src",
    );
    put(
        &mut parts,
        m,
        Field::TunDst,
        &addr(Field::TunDst),
        "tun_dst",
    );
    put(
        &mut parts,
        m,
        Field::TunFlags,
        &|v, m| format_masked(ValueKind::Hex, Field::TunFlags.bits(), v, m),
        "tun_flags",
    );
    for i in 0..8 {
        let f = Field::TunMetadata(i);
        put(&mut parts, m, f, &hex(f), f.name());
    }
    put(
        &mut parts,
        m,
        Field::Metadata,
        &hex(Field::Metadata),
        "metadata",
    );
    put(
        &mut parts,
        m,
        Field::InPort,
        &|v, fm| {
            if fm == full(32) {
                format_port(v as u32, ports)
            } else {
                format!("{v:#x}/{fm:#x}")
            }
        },
        "in_port",
    );
    let (tci, tm) = m.get(Field::VlanTci);
    if tm != 0 {
        let (vid_m, pcp_m) = (tm & 0x0fff, tm & 0xe000);
        if tm & 0x1000 != 0
            && tci & 0x1000 != 0
            && (vid_m == 0 || vid_m == 0x0fff)
            && (pcp_m == 0 || pcp_m == 0xe000)
            && (vid_m | pcp_m) != 0
        {
            if vid_m != 0 {
                parts.push(format!("dl_vlan={}", tci & 0xfff));
            }
            if pcp_m != 0 {
                parts.push(format!("dl_vlan_pcp={}", tci >> 13));
            }
        } else if tm == 0xffff {
            parts.push(format!("vlan_tci={tci:#06x}"));
        } else {
            parts.push(format!("vlan_tci={tci:#06x}/{tm:#06x}"));
        }
    }
    put(&mut parts, m, Field::DlSrc, &addr(Field::DlSrc), "dl_src");
    put(&mut parts, m, Field::DlDst, &addr(Field::DlDst), "dl_dst");
    if short.is_none() {
        put(
            &mut parts,
            m,
            Field::DlType,
            &|v, fm| {
                if fm == 0xffff {
                    format!("{v:#06x}")
                } else {
                    format!("{v:#06x}/{fm:#06x}")
                }
            },
            "dl_type",
        );
    }
    let is_arp = dl == Some(0x0806);
    let is_v6 = dl == Some(0x86dd);
    if is_v6 {
        put(
            &mut parts,
            m,
            Field::Ipv6Src,
            &addr(Field::Ipv6Src),
            "ipv6_src",
        );
        put(
            &mut parts,
            m,
            Field::Ipv6Dst,
            &addr(Field::Ipv6Dst),
            "ipv6_dst",
        );
        put(
            &mut parts,
            m,
            Field::Ipv6Label,
            &|v, fm| {
                if fm == Field::Ipv6Label.full_mask() {
                    format!("0x{v:05x}")
                } else {
                    format!("0x{v:05x}/0x{fm:05x}")
                }
            },
            "ipv6_label",
        );
    } else if is_arp {
        put(
            &mut parts,
            m,
            Field::ArpSpa,
            &addr(Field::ArpSpa),
            "arp_spa",
        );
        put(
            &mut parts,
            m,
            Field::ArpTpa,
            &addr(Field::ArpTpa),
            "arp_tpa",
        );
    } else {
        put(&mut parts, m, Field::NwSrc, &addr(Field::NwSrc), "nw_src");
        put(&mut parts, m, Field::NwDst, &addr(Field::NwDst), "nw_dst");
    }
    if !proto_implied {
        let name = if is_arp { "arp_op" } else { "nw_proto" };
        put(&mut parts, m, Field::NwProto, &dec(Field::NwProto), name);
    }
    if is_arp {
        put(
            &mut parts,
            m,
            Field::ArpSha,
            &addr(Field::ArpSha),
            "arp_sha",
        );
        put(
            &mut parts,
            m,
            Field::ArpTha,
            &addr(Field::ArpTha),
            "arp_tha",
        );
    }
    let (tos, tosm) = m.get(Field::NwTos);
    match tosm & 0xfc {
        0 => {}
        0xfc => parts.push(format!("nw_tos={}", tos & 0xfc)),
        d => parts.push(format!("nw_tos={:#x}/{d:#x}", tos & d)),
    }
    match tosm & 0x03 {
        0 => {}
        3 => parts.push(format!("nw_ecn={}", tos & 3)),
        e => parts.push(format!("nw_ecn={:#x}/{e:#x}", tos & e)),
    }
    put(&mut parts, m, Field::NwTtl, &dec(Field::NwTtl), "nw_ttl");
    put(
        &mut parts,
        m,
        Field::NwFrag,
        &|v, fm| match FRAGS
            .iter()
            .find(|fr| u128::from(fr.1) == v && u128::from(fr.2) == fm)
        {
            Some(fr) => fr.0.to_string(),
            None => format_masked(ValueKind::Int, 2, v, fm),
        },
        "nw_frag",
    );
    // As OVS: chosen by the protocol *values*, ICMPv6 under OVS's
    // `icmp_type`/`icmp_code` names too.
    let icmp =
        (k.dl_type == 0x0800 && k.nw_proto == 1) || (k.dl_type == 0x86dd && k.nw_proto == 58);
    if icmp {
        put(
            &mut parts,
            m,
            Field::IcmpType,
            &dec(Field::IcmpType),
            "icmp_type",
        );
        put(
            &mut parts,
            m,
            Field::IcmpCode,
            &dec(Field::IcmpCode),
            "icmp_code",
        );
        // OVS's match_format: the ND fields after the ICMPv6 type/code.
        if k.dl_type == 0x86dd {
            put(
                &mut parts,
                m,
                Field::NdTarget,
                &addr(Field::NdTarget),
                "nd_target",
            );
            put(&mut parts, m, Field::NdSll, &addr(Field::NdSll), "nd_sll");
            put(&mut parts, m, Field::NdTll, &addr(Field::NdTll), "nd_tll");
        }
    } else {
        put(&mut parts, m, Field::TpSrc, &dec(Field::TpSrc), "tp_src");
        put(&mut parts, m, Field::TpDst, &dec(Field::TpDst), "tp_dst");
    }
    put(&mut parts, m, Field::TcpFlags, &tcp_flags, "tcp_flags");
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
                Field::TpSrc if whole => format!("mod_tp_src:{v}"),
                Field::TpDst if whole => format!("mod_tp_dst:{v}"),
                Field::NwTos if m == 0xfc => format!("mod_nw_tos:{v}"),
                Field::NwTos if m == 0x03 => format!("set_field:{v}->nw_ecn"),
                Field::InPort if whole => {
                    format!("set_field:{}->in_port", format_port(v as u32, ports))
                }
                _ => {
                    // ovs-ofctl's default protocol (OpenFlow 1.0 + NXM)
                    // carries other writes as NXAST_REG_LOAD, printed as
                    // `load:V->FIELD[bits]`: one load for a contiguous mask
                    // of a field up to 64 bits. Wider fields print as
                    // OpenFlow 1.3's `set_field`.
                    let lo = m.trailing_zeros();
                    let width = m.checked_shr(lo).unwrap_or(0).count_ones();
                    if m != 0 && width <= 64 && m.checked_shr(lo) == Some(full(width)) {
                        format!("load:{}->{}", c_hex(v >> lo), subfield(f, lo, width))
                    } else {
                        format!(
                            "set_field:{}->{}",
                            format_masked(f.kind(), f.bits(), v, m),
                            f.name()
                        )
                    }
                }
            }
        }
        Action::PushVlan(t) => format!("push_vlan:{t:#06x}"),
        // OpenFlow 1.0's name, as ovs-ofctl prints it by default.
        Action::PopVlan => "strip_vlan".into(),
        Action::ModVlanVid(v) => format!("mod_vlan_vid:{v}"),
        Action::ModVlanPcp(p) => format!("mod_vlan_pcp:{p}"),
        Action::DecTtl => "dec_ttl".into(),
        Action::DecTtlIds(ids) => format!(
            "dec_ttl({})",
            ids.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
        ),
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
        Action::OutputReg {
            field, ofs, nbits, ..
        } => format!(
            "output:{}",
            subfield(*field, (*ofs).into(), (*nbits).into())
        ),
        Action::Enqueue { port, queue } => {
            format!("enqueue:{}:{queue}", format_port(*port, ports))
        }
        Action::Controller2(o) => {
            // OVS's format_CONTROLLER: defaults left out, in this order.
            let mut parts = Vec::new();
            if o.reason != 1 {
                parts.push(format!(
                    "reason={}",
                    crate::actions::PACKET_IN_REASONS
                        .get(usize::from(o.reason))
                        .map_or_else(|| o.reason.to_string(), |r| r.to_string())
                ));
            }
            if o.max_len != u16::MAX {
                parts.push(format!("max_len={}", o.max_len));
            }
            if o.controller_id != 0 {
                parts.push(format!("id={}", o.controller_id));
            }
            if !o.userdata.is_empty() {
                let hex: Vec<String> = o.userdata.iter().map(|b| format!("{b:02x}")).collect();
                parts.push(format!("userdata={}", hex.join(".")));
            }
            if o.pause {
                parts.push("pause".into());
            }
            if let Some(m) = o.meter_id {
                parts.push(format!("meter_id={m}"));
            }
            format!("controller({})", parts.join(","))
        }
        Action::Conjunction {
            id,
            clause,
            n_clauses,
        } => format!("conjunction({id},{clause}/{n_clauses})"),
        Action::CheckPktLarger { len, dst, ofs } => {
            format!(
                "check_pkt_larger({len})->{}",
                subfield(*dst, (*ofs).into(), 1)
            )
        }
        Action::Clone(inner) => format!("clone({})", format_actions(inner, ports)),
        Action::StackPush { field, ofs, n_bits } => {
            format!("push:{}", subfield(*field, (*ofs).into(), (*n_bits).into()))
        }
        Action::StackPop { field, ofs, n_bits } => {
            format!("pop:{}", subfield(*field, (*ofs).into(), (*n_bits).into()))
        }
        Action::Learn(l) => format_learn(l),
        Action::WriteMetadata { value, mask } => {
            if *mask == u64::MAX {
                format!("write_metadata:{}", c_hex((*value).into()))
            } else {
                format!(
                    "write_metadata:{}/{}",
                    c_hex((*value).into()),
                    c_hex((*mask).into())
                )
            }
        }
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

/// A whole rule in canonical form (see the module docs): the rule as
/// `ovs-ofctl dump-flows --no-stats` prints it.
pub fn format_flow(f: &FlowSpec, ports: &dyn PortMap) -> String {
    let mut s = String::new();
    if f.cookie != 0 {
        s.push_str(&format!("cookie={:#x}, ", f.cookie));
    }
    if f.table != 0 {
        s.push_str(&format!("table={}, ", f.table));
    }
    if f.idle_timeout != 0 {
        s.push_str(&format!("idle_timeout={}, ", f.idle_timeout));
    }
    if f.hard_timeout != 0 {
        s.push_str(&format!("hard_timeout={}, ", f.hard_timeout));
    }
    if f.send_flow_rem {
        s.push_str("send_flow_rem ");
    }
    let mut m = Vec::new();
    if f.priority != OFP_DEFAULT_PRIORITY {
        m.push(format!("priority={}", f.priority));
    }
    let fm = format_match(&f.r#match, ports);
    if !fm.is_empty() {
        m.push(fm);
    }
    if !m.is_empty() {
        s.push_str(&m.join(","));
        s.push(' ');
    }
    s.push_str("actions=");
    s.push_str(&format_actions(&f.actions, ports));
    s
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

/// `learn(...)` as OVS's `format_LEARN` prints it.
fn format_learn(l: &nicflow_flow::LearnSpec) -> String {
    use nicflow_flow::{LearnPart, LearnSrc};
    let mut s = format!("learn(table={}", l.table);
    for (v, name) in [
        (l.idle_timeout, "idle_timeout"),
        (l.hard_timeout, "hard_timeout"),
        (l.fin_idle_timeout, "fin_idle_timeout"),
        (l.fin_hard_timeout, "fin_hard_timeout"),
    ] {
        if v != 0 {
            s += &format!(",{name}={v}");
        }
    }
    if l.priority != 32768 {
        s += &format!(",priority={}", l.priority);
    }
    if l.send_flow_rem {
        s += ",send_flow_rem";
    }
    if l.delete_learned {
        s += ",delete_learned";
    }
    if l.cookie != 0 {
        s += &format!(",cookie={:#x}", l.cookie);
    }
    let sub = |f: Field, o: u8, n: u8| subfield(f, o.into(), n.into());
    for p in &l.parts {
        s.push(',');
        match *p {
            LearnPart::Match {
                dst,
                dst_ofs,
                n_bits,
                src: LearnSrc::Imm(v),
            } => {
                // OVS's field names (`mf_field.name`) for a whole field.
                let name = match dst {
                    Field::DlType => "eth_type",
                    Field::DlSrc => "eth_src",
                    Field::DlDst => "eth_dst",
                    Field::NwSrc => "ip_src",
                    Field::NwDst => "ip_dst",
                    Field::TpSrc => "tcp_src",
                    Field::TpDst => "tcp_dst",
                    f => f.name(),
                };
                let _ = (dst_ofs, n_bits);
                s += &format!("{name}={}", dst.value_to_string(v));
            }
            LearnPart::Match {
                dst,
                dst_ofs,
                n_bits,
                src: LearnSrc::Field { field, ofs },
            } => {
                if (field, ofs) == (dst, dst_ofs) {
                    s += &sub(dst, dst_ofs, n_bits);
                } else {
                    s += &format!("{}={}", sub(dst, dst_ofs, n_bits), sub(field, ofs, n_bits));
                }
            }
            LearnPart::Load {
                dst,
                dst_ofs,
                n_bits,
                src,
            } => {
                let from = match src {
                    LearnSrc::Imm(v) => c_hex(v),
                    LearnSrc::Field { field, ofs } => sub(field, ofs, n_bits),
                };
                s += &format!("load:{from}->{}", sub(dst, dst_ofs, n_bits));
            }
            LearnPart::Output { src, ofs, n_bits } => {
                s += &format!("output:{}", sub(src, ofs, n_bits));
            }
        }
    }
    s.push(')');
    s
}
