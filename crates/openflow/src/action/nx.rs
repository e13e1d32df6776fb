//! Nicira extension actions (`OFPAT_EXPERIMENTER`, vendor 0x00002320), the
//! ones `ovs-ofctl` emits for nicflow's extras: `resubmit`, `move`,
//! `load` / masked `set_field`, `ct(...)` with nested `nat` and
//! `ct_mark`/`ct_label` writes, `ct_clear`, `output:REG`, `controller(...)`.
//! Layouts follow Open vSwitch's `lib/ofp-actions.c`.

use super::{decode_actions, OfAction};
use crate::error::{e, BadAction, OfpError};
use crate::oxm::{self, table::NX_EXPERIMENTER, Ctx, OxmField};
use crate::wire::{self, Reader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `NXAST_*` subtypes.
pub mod nxast {
    pub const RESUBMIT: u16 = 1;
    pub const REG_MOVE: u16 = 6;
    pub const REG_LOAD: u16 = 7;
    pub const RESUBMIT_TABLE: u16 = 14;
    pub const OUTPUT_REG: u16 = 15;
    pub const CONTROLLER: u16 = 20;
    pub const DEC_TTL_CNT_IDS: u16 = 21;
    pub const REG_LOAD2: u16 = 33;
    pub const CT: u16 = 35;
    pub const NAT: u16 = 36;
    pub const CT_CLEAR: u16 = 43;
    pub const STACK_PUSH: u16 = 27;
    pub const STACK_POP: u16 = 28;
    pub const CONJUNCTION: u16 = 34;
    pub const CLONE: u16 = 42;
    pub const CONTROLLER2: u16 = 37;
    pub const CHECK_PKT_LARGER: u16 = 49;
    pub const LEARN: u16 = 16;
}

/// `NX_LEARN_F_*`.
pub const LEARN_F_SEND_FLOW_REM: u16 = 1;
pub const LEARN_F_DELETE_LEARNED: u16 = 2;

/// `NXAST_LEARN` as on the wire (OVS's `nx_action_learn`, 32 bytes, then
/// the flow_mod_specs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NxLearn {
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub cookie: u64,
    /// `NX_LEARN_F_*` (`WRITE_RESULT` is refused).
    pub flags: u16,
    pub table_id: u8,
    pub fin_idle_timeout: u16,
    pub fin_hard_timeout: u16,
    pub specs: Vec<NxLearnSpec>,
}

/// One flow_mod_spec: `n_bits` from `src` to `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NxLearnSpec {
    pub n_bits: u16,
    pub src: NxLearnSrc,
    pub dst: NxLearnDst,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NxLearnSrc {
    /// Bits of a field of the learning packet, from `ofs`.
    Field(OxmField, u16),
    /// A constant, right-aligned.
    Imm(u128),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NxLearnDst {
    /// Bits of the learned rule's match.
    Match(OxmField, u16),
    /// A `load` in the learned rule's actions.
    Load(OxmField, u16),
    /// An `output` to the port in the source bits.
    Output,
}

const LEARN_SRC_IMMEDIATE: u16 = 1 << 13;
const LEARN_DST_MASK: u16 = 3 << 11;
const LEARN_DST_LOAD: u16 = 1 << 11;
const LEARN_DST_OUTPUT: u16 = 2 << 11;

/// The flow_mod_specs of `NXAST_LEARN` (OVS's `learn_decode_specs`): a
/// 16-bit header (source type, destination type, bit count), the source
/// (field header and offset, or the constant in 2-byte units), the
/// destination (field header and offset; nothing for `output`); a zero
/// header or the end stops them, and what follows must be zero.
fn decode_learn_specs(r: &mut Reader<'_>) -> Result<Vec<NxLearnSpec>, OfpError> {
    let mut specs = Vec::new();
    while r.remaining() >= 2 {
        let h = r.u16()?;
        if h == 0 {
            break;
        }
        let n_bits = h & 0x3ff;
        let dst_type = h & LEARN_DST_MASK;
        if n_bits == 0 || n_bits > 128 || h & 0xc000 != 0 || dst_type == LEARN_DST_MASK {
            return Err(e::BAC_BAD_ARG);
        }
        let src = if h & LEARN_SRC_IMMEDIATE != 0 {
            if dst_type == LEARN_DST_OUTPUT {
                return Err(e::BAC_BAD_ARG);
            }
            let n = 2 * usize::from(n_bits.div_ceil(16));
            let mut v = 0u128;
            for _ in 0..n {
                v = v.checked_shl(8).unwrap_or(0) | u128::from(r.u8()?);
            }
            if n_bits < 128 && v >> n_bits != 0 {
                return Err(e::BAC_BAD_ARG);
            }
            NxLearnSrc::Imm(v)
        } else {
            let (f, _) = oxm::read_field_header(r, Ctx::Action)?;
            let ofs = r.u16()?;
            check_range(f, ofs, n_bits.into())?;
            NxLearnSrc::Field(f, ofs)
        };
        let dst = if dst_type == LEARN_DST_OUTPUT {
            NxLearnDst::Output
        } else {
            let (f, _) = oxm::read_field_header(r, Ctx::Action)?;
            let ofs = r.u16()?;
            check_range(f, ofs, n_bits.into())?;
            if dst_type == LEARN_DST_LOAD {
                NxLearnDst::Load(f, ofs)
            } else {
                NxLearnDst::Match(f, ofs)
            }
        };
        specs.push(NxLearnSpec { n_bits, src, dst });
    }
    if r.rest().iter().any(|&b| b != 0) {
        return Err(e::BAC_BAD_ARG);
    }
    Ok(specs)
}

fn encode_learn(l: &NxLearn, out: &mut Vec<u8>) {
    let at = start(out, nxast::LEARN);
    wire::put_u16(out, l.idle_timeout);
    wire::put_u16(out, l.hard_timeout);
    wire::put_u16(out, l.priority);
    wire::put_u64(out, l.cookie);
    wire::put_u16(out, l.flags);
    wire::put_u8(out, l.table_id);
    wire::put_u8(out, 0);
    wire::put_u16(out, l.fin_idle_timeout);
    wire::put_u16(out, l.fin_hard_timeout);
    for s in &l.specs {
        let mut h = s.n_bits & 0x3ff;
        if matches!(s.src, NxLearnSrc::Imm(_)) {
            h |= LEARN_SRC_IMMEDIATE;
        }
        h |= match s.dst {
            NxLearnDst::Match(..) => 0,
            NxLearnDst::Load(..) => LEARN_DST_LOAD,
            NxLearnDst::Output => LEARN_DST_OUTPUT,
        };
        wire::put_u16(out, h);
        match s.src {
            NxLearnSrc::Field(f, ofs) => {
                oxm::write_field_header(out, f, true);
                wire::put_u16(out, ofs);
            }
            NxLearnSrc::Imm(v) => {
                let n = 2 * usize::from(s.n_bits.div_ceil(16));
                out.extend_from_slice(&v.to_be_bytes()[16 - n..]);
            }
        }
        if let NxLearnDst::Match(f, ofs) | NxLearnDst::Load(f, ofs) = s.dst {
            oxm::write_field_header(out, f, true);
            wire::put_u16(out, ofs);
        }
    }
    finish(out, at, 32);
}

/// `NXAC2PT_*`: the properties of `NXAST_CONTROLLER2`.
pub mod nxac2pt {
    pub const MAX_LEN: u16 = 0;
    pub const CONTROLLER_ID: u16 = 1;
    pub const REASON: u16 = 2;
    pub const USERDATA: u16 = 3;
    pub const PAUSE: u16 = 4;
    pub const METER_ID: u16 = 5;
}

/// `NX_CT_F_*`.
pub const CT_F_COMMIT: u16 = 1;
pub const CT_F_FORCE: u16 = 2;
/// `NX_CT_RECIRC_NONE`.
pub const CT_RECIRC_NONE: u8 = 0xff;

/// `NX_NAT_F_*`.
pub const NAT_F_SRC: u16 = 1;
pub const NAT_F_DST: u16 = 2;
pub const NAT_F_PERSISTENT: u16 = 4;
pub const NAT_F_PROTO_HASH: u16 = 8;
pub const NAT_F_PROTO_RANDOM: u16 = 16;
const NAT_F_MASK: u16 = 31;

const RANGE_IPV4_MIN: u16 = 1;
const RANGE_IPV4_MAX: u16 = 2;
const RANGE_IPV6_MIN: u16 = 4;
const RANGE_IPV6_MAX: u16 = 8;
const RANGE_PROTO_MIN: u16 = 16;
const RANGE_PROTO_MAX: u16 = 32;

/// `NXAST_CT` as on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NxCt {
    /// `NX_CT_F_*`.
    pub flags: u16,
    /// The zone comes from bits of this field (`zone` is then
    /// `ofs << 6 | (n_bits - 1)`), or is the immediate `zone`.
    pub zone_src: Option<OxmField>,
    pub zone: u16,
    /// [`CT_RECIRC_NONE`] or a table to continue in.
    pub recirc_table: u8,
    /// Application-layer gateway port (0 = none).
    pub alg: u16,
    /// Nested actions: `NAT`, writes to `ct_mark` / `ct_label`.
    pub actions: Vec<OfAction>,
}

/// `NXAST_NAT` as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct NxNat {
    /// `NX_NAT_F_*`.
    pub flags: u16,
    /// Both of one family.
    pub addr_min: Option<IpAddr>,
    pub addr_max: Option<IpAddr>,
    pub proto_min: Option<u16>,
    pub proto_max: Option<u16>,
}

/// `(ofs << 6) | (n_bits - 1)`.
pub fn ofs_nbits(ofs: u16, n_bits: u8) -> u16 {
    (ofs << 6) | u16::from(n_bits.saturating_sub(1) & 63)
}

fn split_ofs_nbits(v: u16) -> (u16, u8) {
    (v >> 6, (v & 63) as u8 + 1)
}

/// Bits `ofs..ofs+n_bits` must lie inside `field`.
pub(super) fn check_range(field: OxmField, ofs: u16, n_bits: u32) -> Result<(), OfpError> {
    if n_bits == 0 || u32::from(ofs) + n_bits > field.wire_bits() {
        return Err(e::bac(BadAction::BAD_SET_LEN));
    }
    Ok(())
}

/// Decode the experimenter action in `a` (positioned after type and len).
pub(super) fn decode(a: &mut Reader<'_>, len: usize) -> Result<OfAction, OfpError> {
    let vendor = a.u32()?;
    if vendor != NX_EXPERIMENTER {
        return Err(e::bac(BadAction::BAD_EXPERIMENTER));
    }
    let subtype = a.u16()?;
    let fixed = |want: usize| {
        if len == want {
            Ok(())
        } else {
            Err(e::BAC_BAD_LEN)
        }
    };
    Ok(match subtype {
        nxast::RESUBMIT | nxast::RESUBMIT_TABLE => {
            fixed(16)?;
            let in_port = a.u16()?;
            let table = a.u8()?;
            if subtype == nxast::RESUBMIT {
                OfAction::Resubmit {
                    in_port,
                    table: None,
                }
            } else {
                if a.rest().iter().any(|&b| b != 0) {
                    return Err(e::BAC_BAD_ARG);
                }
                OfAction::Resubmit {
                    in_port,
                    table: Some(table),
                }
            }
        }
        nxast::REG_MOVE => {
            if len < 24 {
                return Err(e::BAC_BAD_LEN);
            }
            let n_bits = a.u16()?;
            let src_ofs = a.u16()?;
            let dst_ofs = a.u16()?;
            let (src, _) = oxm::read_field_header(a, Ctx::Action)?;
            let (dst, _) = oxm::read_field_header(a, Ctx::Action)?;
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::BAC_BAD_ARG);
            }
            check_range(src, src_ofs, n_bits.into())?;
            check_range(dst, dst_ofs, n_bits.into())?;
            OfAction::RegMove {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            }
        }
        nxast::REG_LOAD => {
            fixed(24)?;
            let (ofs, n_bits) = split_ofs_nbits(a.u16()?);
            let (dst, hasmask) = oxm::read_field_header(a, Ctx::Action)?;
            let value = a.u64()?;
            if hasmask {
                return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
            }
            check_range(dst, ofs, n_bits.into())?;
            if n_bits < 64 && value >> n_bits != 0 {
                return Err(e::BAC_BAD_ARG);
            }
            OfAction::RegLoad {
                dst,
                ofs,
                n_bits,
                value,
            }
        }
        nxast::REG_LOAD2 => {
            let entry = oxm::read_entry(a, Ctx::Action)?;
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
            }
            if entry.value & !entry.field.def().valid != 0 {
                return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
            }
            OfAction::RegLoad2(entry)
        }
        nxast::OUTPUT_REG => {
            fixed(24)?;
            let (ofs, n_bits) = split_ofs_nbits(a.u16()?);
            let (src, _) = oxm::read_field_header(a, Ctx::Action)?;
            let max_len = a.u16()?;
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::BAC_BAD_ARG);
            }
            check_range(src, ofs, n_bits.into())?;
            OfAction::OutputReg {
                src,
                ofs,
                n_bits,
                max_len,
            }
        }
        nxast::CONTROLLER => {
            fixed(16)?;
            let max_len = a.u16()?;
            let controller_id = a.u16()?;
            let reason = a.u8()?;
            OfAction::Controller {
                max_len,
                controller_id,
                reason,
            }
        }
        nxast::CT => {
            if len < 24 {
                return Err(e::BAC_BAD_LEN);
            }
            let flags = a.u16()?;
            let zone_src = a.u32()?;
            let zone = a.u16()?;
            let recirc_table = a.u8()?;
            a.pad(3)?;
            let alg = a.u16()?;
            let zone_src = if zone_src == 0 {
                None
            } else {
                let b = zone_src.to_be_bytes();
                let (f, _) =
                    oxm::read_field_header(&mut Reader::new(&b, e::BAC_BAD_LEN), Ctx::Action)?;
                let (ofs, n_bits) = split_ofs_nbits(zone);
                check_range(f, ofs, n_bits.into())?;
                if n_bits != 16 {
                    return Err(e::bac(BadAction::BAD_SET_LEN));
                }
                Some(f)
            };
            if flags & !(CT_F_COMMIT | CT_F_FORCE) != 0
                || (flags & CT_F_FORCE != 0 && flags & CT_F_COMMIT == 0)
            {
                return Err(e::BAC_BAD_ARG);
            }
            let actions = decode_actions(a.rest())?;
            for n in &actions {
                let ok = match n {
                    OfAction::Nat(_) => true,
                    OfAction::SetField(en) | OfAction::RegLoad2(en) => {
                        matches!(en.field, OxmField::CtMark | OxmField::CtLabel)
                    }
                    OfAction::RegLoad { dst, .. } | OfAction::RegMove { dst, .. } => {
                        matches!(dst, OxmField::CtMark | OxmField::CtLabel)
                    }
                    _ => false,
                };
                if !ok {
                    return Err(e::BAC_BAD_ARG);
                }
            }
            OfAction::Ct(NxCt {
                flags,
                zone_src,
                zone,
                recirc_table,
                alg,
                actions,
            })
        }
        nxast::NAT => OfAction::Nat(decode_nat(a)?),
        nxast::CT_CLEAR => {
            fixed(16)?;
            OfAction::CtClear
        }
        nxast::CONJUNCTION => {
            fixed(16)?;
            let clause = a.u8()?;
            let n_clauses = a.u8()?;
            let id = a.u32()?;
            // OVS: OFPERR_NXBAC_BAD_CONJUNCTION, a bad argument here.
            if !(2..=64).contains(&n_clauses) || clause >= n_clauses {
                return Err(e::BAC_BAD_ARG);
            }
            OfAction::Conjunction {
                id,
                clause,
                n_clauses,
            }
        }
        nxast::CONTROLLER2 => {
            if len < 16 {
                return Err(e::BAC_BAD_LEN);
            }
            a.pad(6)?;
            OfAction::Controller2(Box::new(decode_controller2(a.rest())?))
        }
        nxast::CHECK_PKT_LARGER => {
            fixed(24)?;
            let pkt_len = a.u16()?;
            let ofs = a.u16()?;
            let (dst, _) = oxm::read_field_header(a, Ctx::Action)?;
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::BAC_BAD_ARG);
            }
            check_range(dst, ofs, 1)?;
            OfAction::CheckPktLarger { pkt_len, dst, ofs }
        }
        nxast::LEARN => {
            if len < 32 {
                return Err(e::BAC_BAD_LEN);
            }
            let idle_timeout = a.u16()?;
            let hard_timeout = a.u16()?;
            let priority = a.u16()?;
            let cookie = a.u64()?;
            let flags = a.u16()?;
            let table_id = a.u8()?;
            let pad = a.u8()?;
            let fin_idle_timeout = a.u16()?;
            let fin_hard_timeout = a.u16()?;
            if flags & !(LEARN_F_SEND_FLOW_REM | LEARN_F_DELETE_LEARNED) != 0
                || pad != 0
                || table_id == 0xff
            {
                return Err(e::BAC_BAD_ARG);
            }
            OfAction::Learn(Box::new(NxLearn {
                idle_timeout,
                hard_timeout,
                priority,
                cookie,
                flags,
                table_id,
                fin_idle_timeout,
                fin_hard_timeout,
                specs: decode_learn_specs(a)?,
            }))
        }
        nxast::DEC_TTL_CNT_IDS => {
            // `nx_action_cnt_ids`: the count, 4 zero bytes, the ids,
            // padding to 8 (OVS's decode_NXAST_RAW_DEC_TTL_CNT_IDS).
            if len < 16 {
                return Err(e::BAC_BAD_LEN);
            }
            let n = usize::from(a.u16()?);
            if a.array::<4>()? != [0; 4] {
                return Err(e::BAC_BAD_ARG);
            }
            if len < 16 + 2 * n {
                return Err(e::BAC_BAD_LEN);
            }
            let ids = (0..n).map(|_| a.u16()).collect::<Result<Vec<_>, _>>()?;
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::BAC_BAD_ARG);
            }
            OfAction::DecTtlCntIds(ids)
        }
        nxast::CLONE => {
            if len < 16 {
                return Err(e::BAC_BAD_LEN);
            }
            a.pad(6)?;
            OfAction::Clone(decode_actions(a.rest())?)
        }
        nxast::STACK_PUSH | nxast::STACK_POP => {
            if len < 24 {
                return Err(e::BAC_BAD_LEN);
            }
            let ofs = a.u16()?;
            let (field, _) = oxm::read_field_header(a, Ctx::Action)?;
            let n_bits = a.u16()?;
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::BAC_BAD_ARG);
            }
            check_range(field, ofs, n_bits.into())?;
            if subtype == nxast::STACK_PUSH {
                OfAction::StackPush { field, ofs, n_bits }
            } else {
                OfAction::StackPop { field, ofs, n_bits }
            }
        }
        _ => return Err(e::bac(BadAction::BAD_EXP_TYPE)),
    })
}

/// The properties of `NXAST_CONTROLLER2` (OVS's `decode_NXAST_RAW_CONTROLLER2`):
/// type, length (header included, padding not), value, padding to 8.
fn decode_controller2(mut p: &[u8]) -> Result<nicflow_flow::ControllerOpts, OfpError> {
    let mut o = nicflow_flow::ControllerOpts {
        max_len: u16::MAX,
        controller_id: 0,
        reason: 1,
        userdata: Vec::new(),
        pause: false,
        meter_id: None,
    };
    while !p.is_empty() {
        if p.len() < 4 {
            return Err(e::BAC_BAD_LEN);
        }
        let ty = u16::from_be_bytes([p[0], p[1]]);
        let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
        let padded = len.div_ceil(8) * 8;
        if len < 4 || padded > p.len() {
            return Err(e::BAC_BAD_LEN);
        }
        let v = &p[4..len];
        let want = |n: usize| {
            if v.len() == n {
                Ok(())
            } else {
                Err(e::BAC_BAD_LEN)
            }
        };
        match ty {
            nxac2pt::MAX_LEN => {
                want(2)?;
                o.max_len = u16::from_be_bytes([v[0], v[1]]);
            }
            nxac2pt::CONTROLLER_ID => {
                want(2)?;
                o.controller_id = u16::from_be_bytes([v[0], v[1]]);
            }
            nxac2pt::REASON => {
                want(1)?;
                // OFPR_* up to packet_out.
                if v[0] > 5 {
                    return Err(e::BAC_BAD_ARG);
                }
                o.reason = v[0];
            }
            nxac2pt::USERDATA => o.userdata = v.to_vec(),
            nxac2pt::PAUSE => {
                want(0)?;
                o.pause = true;
            }
            nxac2pt::METER_ID => {
                want(4)?;
                let m = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
                o.meter_id = (m != 0).then_some(m);
            }
            // OVS: OFPPROP_UNKNOWN on an unknown property.
            _ => return Err(e::BAC_BAD_ARG),
        }
        p = &p[padded..];
    }
    Ok(o)
}

/// One property of `NXAST_CONTROLLER2`, padded to 8.
fn put_prop(out: &mut Vec<u8>, ty: u16, v: &[u8]) {
    let at = out.len();
    wire::put_u16(out, ty);
    wire::put_u16(out, (4 + v.len()) as u16);
    out.extend_from_slice(v);
    wire::pad8_from(out, at);
}

fn decode_nat(a: &mut Reader<'_>) -> Result<NxNat, OfpError> {
    a.pad(2)?;
    let flags = a.u16()?;
    let present = a.u16()?;
    let bad = e::BAC_BAD_ARG;
    if flags & !NAT_F_MASK != 0
        || (flags & NAT_F_SRC != 0 && flags & NAT_F_DST != 0)
        || (flags & NAT_F_PROTO_HASH != 0 && flags & NAT_F_PROTO_RANDOM != 0)
        || present & !63 != 0
    {
        return Err(bad);
    }
    let mut opts = Reader::new(a.rest(), bad);
    let mut nat = NxNat {
        flags,
        ..NxNat::default()
    };
    let v4 = present & (RANGE_IPV4_MIN | RANGE_IPV4_MAX) != 0;
    let v6 = present & (RANGE_IPV6_MIN | RANGE_IPV6_MAX) != 0;
    if v4 && v6 {
        return Err(bad);
    }
    if v4 {
        if present & RANGE_IPV4_MIN == 0 {
            return Err(bad);
        }
        let min = Ipv4Addr::from(opts.u32()?);
        if min.is_unspecified() {
            return Err(bad);
        }
        nat.addr_min = Some(min.into());
        if present & RANGE_IPV4_MAX != 0 {
            let max = Ipv4Addr::from(opts.u32()?);
            if max < min {
                return Err(bad);
            }
            nat.addr_max = Some(max.into());
        }
    } else if v6 {
        if present & RANGE_IPV6_MIN == 0 {
            return Err(bad);
        }
        let min = Ipv6Addr::from(opts.array::<16>()?);
        if min.is_unspecified() {
            return Err(bad);
        }
        nat.addr_min = Some(min.into());
        if present & RANGE_IPV6_MAX != 0 {
            let max = Ipv6Addr::from(opts.array::<16>()?);
            if max < min {
                return Err(bad);
            }
            nat.addr_max = Some(max.into());
        }
    }
    if present & (RANGE_PROTO_MIN | RANGE_PROTO_MAX) != 0 {
        if present & RANGE_PROTO_MIN == 0 || nat.addr_min.is_none() {
            return Err(bad);
        }
        let min = opts.u16()?;
        nat.proto_min = Some(min);
        if present & RANGE_PROTO_MAX != 0 {
            let max = opts.u16()?;
            if max < min {
                return Err(bad);
            }
            nat.proto_max = Some(max);
        }
    }
    if opts.rest().iter().any(|&b| b != 0) {
        return Err(bad);
    }
    Ok(nat)
}

/// Start an NX action: header with length 0 (patched by `finish`).
fn start(out: &mut Vec<u8>, subtype: u16) -> usize {
    let at = out.len();
    wire::put_u16(out, super::ofpat::EXPERIMENTER);
    wire::put_u16(out, 0);
    wire::put_u32(out, NX_EXPERIMENTER);
    wire::put_u16(out, subtype);
    at
}

/// Pad to a multiple of 8 (at least `min` bytes) and patch the length.
fn finish(out: &mut Vec<u8>, at: usize, min: usize) {
    if out.len() - at < min {
        wire::put_zeros(out, min - (out.len() - at));
    }
    wire::pad8_from(out, at);
    let len = wire::len16(out, at);
    wire::patch_u16(out, at + 2, len);
}

/// Encode a Nicira action.
pub(super) fn encode(version: u8, a: &OfAction, out: &mut Vec<u8>) {
    match a {
        OfAction::Resubmit { in_port, table } => {
            let sub = if table.is_some() {
                nxast::RESUBMIT_TABLE
            } else {
                nxast::RESUBMIT
            };
            let at = start(out, sub);
            wire::put_u16(out, *in_port);
            wire::put_u8(out, table.unwrap_or(0));
            finish(out, at, 16);
        }
        OfAction::RegMove {
            src,
            src_ofs,
            dst,
            dst_ofs,
            n_bits,
        } => {
            let at = start(out, nxast::REG_MOVE);
            wire::put_u16(out, *n_bits);
            wire::put_u16(out, *src_ofs);
            wire::put_u16(out, *dst_ofs);
            oxm::write_field_header(out, *src, true);
            oxm::write_field_header(out, *dst, true);
            finish(out, at, 24);
        }
        OfAction::RegLoad {
            dst,
            ofs,
            n_bits,
            value,
        } => {
            let at = start(out, nxast::REG_LOAD);
            wire::put_u16(out, ofs_nbits(*ofs, *n_bits));
            oxm::write_field_header(out, *dst, true);
            wire::put_u64(out, *value);
            finish(out, at, 24);
        }
        OfAction::RegLoad2(en) => {
            let at = start(out, nxast::REG_LOAD2);
            oxm::write_entry(out, en.field, true, en.value, en.mask);
            finish(out, at, 16);
        }
        OfAction::OutputReg {
            src,
            ofs,
            n_bits,
            max_len,
        } => {
            let at = start(out, nxast::OUTPUT_REG);
            wire::put_u16(out, ofs_nbits(*ofs, *n_bits));
            oxm::write_field_header(out, *src, true);
            wire::put_u16(out, *max_len);
            finish(out, at, 24);
        }
        OfAction::Controller {
            max_len,
            controller_id,
            reason,
        } => {
            let at = start(out, nxast::CONTROLLER);
            wire::put_u16(out, *max_len);
            wire::put_u16(out, *controller_id);
            wire::put_u8(out, *reason);
            finish(out, at, 16);
        }
        OfAction::Ct(ct) => {
            let at = start(out, nxast::CT);
            wire::put_u16(out, ct.flags);
            match ct.zone_src {
                Some(f) => oxm::write_field_header(out, f, true),
                None => wire::put_u32(out, 0),
            }
            wire::put_u16(out, ct.zone);
            wire::put_u8(out, ct.recirc_table);
            wire::put_zeros(out, 3);
            wire::put_u16(out, ct.alg);
            super::encode_actions_as(version, &ct.actions, out);
            finish(out, at, 24);
        }
        OfAction::Nat(nat) => {
            let at = start(out, nxast::NAT);
            wire::put_zeros(out, 2);
            wire::put_u16(out, nat.flags);
            let present_at = out.len();
            wire::put_u16(out, 0);
            let mut present = 0;
            match (nat.addr_min, nat.addr_max) {
                (Some(IpAddr::V4(min)), max) => {
                    wire::put_u32(out, min.into());
                    present |= RANGE_IPV4_MIN;
                    if let Some(IpAddr::V4(max)) = max {
                        wire::put_u32(out, max.into());
                        present |= RANGE_IPV4_MAX;
                    }
                }
                (Some(IpAddr::V6(min)), max) => {
                    out.extend_from_slice(&min.octets());
                    present |= RANGE_IPV6_MIN;
                    if let Some(IpAddr::V6(max)) = max {
                        out.extend_from_slice(&max.octets());
                        present |= RANGE_IPV6_MAX;
                    }
                }
                _ => {}
            }
            if nat.addr_min.is_some() {
                if let Some(p) = nat.proto_min {
                    wire::put_u16(out, p);
                    present |= RANGE_PROTO_MIN;
                    if let Some(p) = nat.proto_max {
                        wire::put_u16(out, p);
                        present |= RANGE_PROTO_MAX;
                    }
                }
            }
            wire::patch_u16(out, present_at, present);
            finish(out, at, 16);
        }
        OfAction::CtClear => {
            let at = start(out, nxast::CT_CLEAR);
            finish(out, at, 16);
        }
        OfAction::Conjunction {
            id,
            clause,
            n_clauses,
        } => {
            let at = start(out, nxast::CONJUNCTION);
            wire::put_u8(out, *clause);
            wire::put_u8(out, *n_clauses);
            wire::put_u32(out, *id);
            finish(out, at, 16);
        }
        OfAction::Controller2(o) => {
            // OVS's encode_CONTROLLER: defaults are left out.
            let at = start(out, nxast::CONTROLLER2);
            wire::put_zeros(out, 6);
            if o.max_len != u16::MAX {
                put_prop(out, nxac2pt::MAX_LEN, &o.max_len.to_be_bytes());
            }
            if o.controller_id != 0 {
                put_prop(out, nxac2pt::CONTROLLER_ID, &o.controller_id.to_be_bytes());
            }
            if o.reason != 1 {
                put_prop(out, nxac2pt::REASON, &[o.reason]);
            }
            if !o.userdata.is_empty() {
                put_prop(out, nxac2pt::USERDATA, &o.userdata);
            }
            if o.pause {
                put_prop(out, nxac2pt::PAUSE, &[]);
            }
            if let Some(m) = o.meter_id {
                put_prop(out, nxac2pt::METER_ID, &m.to_be_bytes());
            }
            finish(out, at, 16);
        }
        OfAction::CheckPktLarger { pkt_len, dst, ofs } => {
            let at = start(out, nxast::CHECK_PKT_LARGER);
            wire::put_u16(out, *pkt_len);
            wire::put_u16(out, *ofs);
            oxm::write_field_header(out, *dst, true);
            finish(out, at, 24);
        }
        OfAction::Learn(l) => encode_learn(l, out),
        OfAction::DecTtlCntIds(ids) => {
            let at = start(out, nxast::DEC_TTL_CNT_IDS);
            wire::put_u16(out, ids.len() as u16);
            wire::put_zeros(out, 4);
            for id in ids {
                wire::put_u16(out, *id);
            }
            finish(out, at, 16);
        }
        OfAction::Clone(inner) => {
            let at = start(out, nxast::CLONE);
            wire::put_zeros(out, 6);
            super::encode_actions_as(version, inner, out);
            finish(out, at, 16);
        }
        OfAction::StackPush { field, ofs, n_bits } | OfAction::StackPop { field, ofs, n_bits } => {
            let sub = if matches!(a, OfAction::StackPush { .. }) {
                nxast::STACK_PUSH
            } else {
                nxast::STACK_POP
            };
            let at = start(out, sub);
            wire::put_u16(out, *ofs);
            oxm::write_field_header(out, *field, true);
            wire::put_u16(out, *n_bits);
            finish(out, at, 24);
        }
        // Standard actions are encoded by the caller.
        _ => unreachable!("not a Nicira action: {a:?}"),
    }
}
