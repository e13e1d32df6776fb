//! OpenFlow 1.3 instructions and actions on the wire, and their mapping to
//! nicflow's [`Action`](nicflow_flow::Action) list.
//!
//! Two layers, so each has one job:
//!
//! * this module and [`nx`]: the wire forms as Rust values
//!   ([`Instruction`], [`OfAction`]) — decoding checks structure (lengths,
//!   known types, known fields) and encoding is its exact inverse, so bytes
//!   from a controller re-encode to the same bytes;
//! * [`convert`]: meaning — what nicflow's slow path runs for a list of
//!   instructions, and back, refusing with OpenFlow's error codes what
//!   nicflow cannot do (`OFPBIC_UNSUP_INST` for a non-empty
//!   `WRITE_ACTIONS`, since nicflow has no action set;
//!   `OFPBAC_BAD_TYPE` / `OFPBAC_BAD_EXP_TYPE` for actions it lacks).

pub mod convert;
pub mod nx;

pub use convert::{from_nicflow, to_nicflow, Translated};
pub use nx::{NxCt, NxNat};

use crate::error::{e, BadAction, BadInstruction, OfpError};
use crate::oxm::{self, Ctx, OxmEntry, OxmField};
use crate::wire::{self, Reader};

/// `OFPAT_*` action types used by nicflow.
pub mod ofpat {
    pub const OUTPUT: u16 = 0;
    pub const PUSH_VLAN: u16 = 17;
    pub const POP_VLAN: u16 = 18;
    pub const GROUP: u16 = 22;
    pub const SET_NW_TTL: u16 = 23;
    pub const DEC_NW_TTL: u16 = 24;
    pub const SET_FIELD: u16 = 25;
    /// OpenFlow 1.5's `move:` (OVS sends it for every `move:` in 1.5, in
    /// place of NXAST_REG_MOVE).
    pub const COPY_FIELD: u16 = 28;
    /// OpenFlow 1.5: the meter is an action (1.3's `OFPIT_METER`
    /// instruction is deprecated there; `ovs-ofctl -O OpenFlow15` sends
    /// this).
    pub const METER: u16 = 29;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// `OFPIT_*` instruction types.
pub mod ofpit {
    pub const GOTO_TABLE: u16 = 1;
    pub const WRITE_METADATA: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 3;
    pub const APPLY_ACTIONS: u16 = 4;
    pub const CLEAR_ACTIONS: u16 = 5;
    pub const METER: u16 = 6;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// One OpenFlow 1.3 instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    GotoTable(u8),
    WriteMetadata { metadata: u64, mask: u64 },
    WriteActions(Vec<OfAction>),
    ApplyActions(Vec<OfAction>),
    ClearActions,
    Meter(u32),
}

/// One action as on the wire: the standard OpenFlow 1.3 actions nicflow
/// can run plus the Nicira extensions `ovs-ofctl` sends for nicflow's
/// extras.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OfAction {
    /// `OFPAT_OUTPUT`; `max_len` only matters for `OFPP_CONTROLLER`.
    Output {
        port: u32,
        max_len: u16,
    },
    Group(u32),
    /// `OFPAT_METER` (OpenFlow 1.5).
    Meter(u32),
    /// `OFPAT_SET_FIELD` (no mask in OpenFlow 1.3).
    SetField(OxmEntry),
    PushVlan(u16),
    PopVlan,
    SetNwTtl(u8),
    DecNwTtl,
    /// `NXAST_RESUBMIT` (`table: None`) or `NXAST_RESUBMIT_TABLE`
    /// (`Some(255)` = the current table). `in_port` is a 16-bit port,
    /// 0xfff8 (`OFPP_IN_PORT`) for the packet's own.
    Resubmit {
        in_port: u16,
        table: Option<u8>,
    },
    /// `NXAST_REG_MOVE`.
    RegMove {
        src: OxmField,
        src_ofs: u16,
        dst: OxmField,
        dst_ofs: u16,
        n_bits: u16,
    },
    /// `NXAST_REG_LOAD`: `value` into bits `ofs..ofs+n_bits` of `dst`.
    RegLoad {
        dst: OxmField,
        ofs: u16,
        n_bits: u8,
        value: u64,
    },
    /// `NXAST_REG_LOAD2`: an OXM entry, maybe masked.
    RegLoad2(OxmEntry),
    /// `NXAST_OUTPUT_REG`.
    OutputReg {
        src: OxmField,
        ofs: u16,
        n_bits: u8,
        max_len: u16,
    },
    /// `NXAST_CONTROLLER`.
    Controller {
        max_len: u16,
        controller_id: u16,
        reason: u8,
    },
    /// `NXAST_CT` with its nested actions.
    Ct(NxCt),
    /// `NXAST_NAT` (only valid inside `Ct`).
    Nat(NxNat),
    /// `NXAST_CT_CLEAR`.
    CtClear,
    /// `NXAST_CONTROLLER2`: properties, each only when not the default.
    Controller2(Box<nicflow_flow::ControllerOpts>),
    /// `NXAST_CONJUNCTION`: `clause` is 0-based on the wire (the rule
    /// language's `k` minus one).
    Conjunction {
        id: u32,
        clause: u8,
        n_clauses: u8,
    },
    /// `NXAST_CHECK_PKT_LARGER`: bit `ofs` of `dst` := frame longer
    /// than `pkt_len`.
    CheckPktLarger {
        pkt_len: u16,
        dst: OxmField,
        ofs: u16,
    },
    /// `NXAST_LEARN`.
    Learn(Box<nx::NxLearn>),
    /// `NXAST_DEC_TTL_CNT_IDS`: `dec_ttl(ID,...)`.
    DecTtlCntIds(Vec<u16>),
    /// `NXAST_CLONE` with its nested actions.
    Clone(Vec<OfAction>),
    /// `NXAST_STACK_PUSH` / `NXAST_STACK_POP` of bits `ofs..ofs+n_bits`
    /// of `field`.
    StackPush {
        field: OxmField,
        ofs: u16,
        n_bits: u16,
    },
    StackPop {
        field: OxmField,
        ofs: u16,
        n_bits: u16,
    },
}

/// Decode an action list (e.g. the body of `APPLY_ACTIONS`).
pub fn decode_actions(bytes: &[u8]) -> Result<Vec<OfAction>, OfpError> {
    let mut r = Reader::new(bytes, e::BAC_BAD_LEN);
    let mut out = Vec::new();
    while !r.is_empty() {
        out.push(decode_action(&mut r)?);
    }
    Ok(out)
}

/// Decode one action from `r`.
pub fn decode_action(r: &mut Reader<'_>) -> Result<OfAction, OfpError> {
    let ty = r.peek_u16().ok_or(e::BAC_BAD_LEN)?;
    let len = usize::from(r.peek_u16_at(2).ok_or(e::BAC_BAD_LEN)?);
    if len < 8 || !len.is_multiple_of(8) || len > r.remaining() {
        return Err(e::BAC_BAD_LEN);
    }
    let mut a = r.sub(len, e::BAC_BAD_LEN)?;
    a.skip(4)?;
    let fixed = |want: usize| {
        if len == want {
            Ok(())
        } else {
            Err(e::BAC_BAD_LEN)
        }
    };
    Ok(match ty {
        ofpat::OUTPUT => {
            fixed(16)?;
            let port = a.u32()?;
            let max_len = a.u16()?;
            OfAction::Output { port, max_len }
        }
        ofpat::GROUP => {
            fixed(8)?;
            OfAction::Group(a.u32()?)
        }
        ofpat::METER => {
            fixed(8)?;
            OfAction::Meter(a.u32()?)
        }
        ofpat::PUSH_VLAN => {
            fixed(8)?;
            OfAction::PushVlan(a.u16()?)
        }
        ofpat::POP_VLAN => {
            fixed(8)?;
            OfAction::PopVlan
        }
        ofpat::SET_NW_TTL => {
            fixed(8)?;
            OfAction::SetNwTtl(a.u8()?)
        }
        ofpat::DEC_NW_TTL => {
            fixed(8)?;
            OfAction::DecNwTtl
        }
        ofpat::SET_FIELD => {
            let entry = oxm::read_entry(&mut a, Ctx::Action)?;
            if entry.mask.is_some() {
                // A masked set-field is 1.5's reg_load (a partial write,
                // within the field's wire width by construction): checked
                // as NXAST_REG_LOAD/LOAD2 are — it may write part of
                // vlan_vid without its present bit, or in_port
                // (`load:0->NXM_OF_IN_PORT[]`).
            } else {
                check_set_value(&entry)?;
            }
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
            }
            if entry.mask.is_some() {
                // OpenFlow 1.5 set-field may carry a mask: it is how OVS
                // (and so ovn-controller) encodes every partial load
                // (`load:1->NXM_NX_REG10[0]`, `set_field:0x2/0x2->ct_mark`)
                // in 1.5, where it dropped NXAST_REG_LOAD. It means exactly
                // what reg_load2 means. (1.3 forbids the mask; the decoder
                // has no version, so it is accepted there too.)
                OfAction::RegLoad2(entry)
            } else {
                OfAction::SetField(entry)
            }
        }
        ofpat::COPY_FIELD => {
            // n_bits, src_offset, dst_offset, pad[2], then the source and
            // destination OXM headers, zero-padded to 8 bytes: the same
            // move as NXAST_REG_MOVE.
            if len < 24 {
                return Err(e::BAC_BAD_LEN);
            }
            let n_bits = a.u16()?;
            let src_ofs = a.u16()?;
            let dst_ofs = a.u16()?;
            a.skip(2)?;
            let (src, _) = oxm::read_field_header(&mut a, Ctx::Action)?;
            let (dst, _) = oxm::read_field_header(&mut a, Ctx::Action)?;
            if a.rest().iter().any(|&b| b != 0) {
                return Err(e::BAC_BAD_ARG);
            }
            nx::check_range(src, src_ofs, n_bits.into())?;
            nx::check_range(dst, dst_ofs, n_bits.into())?;
            OfAction::RegMove {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            }
        }
        ofpat::EXPERIMENTER => nx::decode(&mut a, len)?,
        _ => return Err(e::bac(BadAction::BAD_TYPE)),
    })
}

/// Values a set-field may carry: in range for the field, and `vlan_vid`
/// with OFPVID_PRESENT (as Open vSwitch requires).
pub(crate) fn check_set_value(entry: &OxmEntry) -> Result<(), OfpError> {
    let d = entry.field.def();
    let vlan_absent = entry.field == OxmField::VlanVid && entry.value & 0x1000 == 0;
    if entry.value & !d.valid != 0 || vlan_absent || entry.field == OxmField::InPort {
        return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
    }
    Ok(())
}

/// Encode an action list.
pub fn encode_actions(actions: &[OfAction], out: &mut Vec<u8>) {
    encode_actions_as(crate::msg::OFP13_VERSION, actions, out)
}

/// [`encode_actions`] in OpenFlow `version`: 1.5 has no `NXAST_REG_MOVE`,
/// `NXAST_REG_LOAD` or `NXAST_REG_LOAD2` (Open vSwitch refuses them there,
/// `OFPBAC_BAD_VENDOR_TYPE`, and so cannot read a flow dump that has them):
/// a move is `OFPAT_COPY_FIELD` and a load a set-field with a mask, as OVS
/// writes them. Nested lists (`ct(exec(..))`, `clone(..)`) follow.
pub fn encode_actions_as(version: u8, actions: &[OfAction], out: &mut Vec<u8>) {
    for a in actions {
        encode_action_as(version, a, out);
    }
}

/// Encode one action.
pub fn encode_action(a: &OfAction, out: &mut Vec<u8>) {
    encode_action_as(crate::msg::OFP13_VERSION, a, out)
}

/// Encode one action in OpenFlow `version` (see [`encode_actions_as`]).
pub fn encode_action_as(version: u8, a: &OfAction, out: &mut Vec<u8>) {
    let start = out.len();
    if version >= crate::msg::OFP15_VERSION {
        match a {
            OfAction::RegMove {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            } => {
                wire::put_u16(out, ofpat::COPY_FIELD);
                wire::put_u16(out, 0);
                wire::put_u16(out, *n_bits);
                wire::put_u16(out, *src_ofs);
                wire::put_u16(out, *dst_ofs);
                wire::put_zeros(out, 2);
                oxm::write_field_header(out, *src, true);
                oxm::write_field_header(out, *dst, true);
                wire::pad8_from(out, start);
                let len = wire::len16(out, start);
                wire::patch_u16(out, start + 2, len);
                return;
            }
            OfAction::RegLoad {
                dst,
                ofs,
                n_bits,
                value,
            } => {
                let bits = u32::from(*n_bits).min(128);
                let ones = if bits >= 128 {
                    u128::MAX
                } else {
                    (1u128 << bits) - 1
                };
                let sh = u32::from(*ofs);
                let (v, m) = if sh >= 128 {
                    (0, 0)
                } else {
                    ((u128::from(*value) & ones) << sh, ones << sh)
                };
                set_field_masked(out, start, *dst, v, Some(m));
                return;
            }
            OfAction::RegLoad2(en) => {
                // Always with a mask, so that it reads back as a load
                // (an unmasked set-field of in_port is refused).
                let full = match u32::from(en.field.def().bytes) * 8 {
                    b if b >= 128 => u128::MAX,
                    b => (1u128 << b) - 1,
                };
                set_field_masked(
                    out,
                    start,
                    en.field,
                    en.value,
                    Some(en.mask.unwrap_or(full)),
                );
                return;
            }
            _ => {}
        }
    }
    let simple = |out: &mut Vec<u8>, ty: u16| {
        wire::put_u16(out, ty);
        wire::put_u16(out, 8);
    };
    match a {
        OfAction::Output { port, max_len } => {
            wire::put_u16(out, ofpat::OUTPUT);
            wire::put_u16(out, 16);
            wire::put_u32(out, *port);
            wire::put_u16(out, *max_len);
            wire::put_zeros(out, 6);
        }
        OfAction::Group(g) => {
            simple(out, ofpat::GROUP);
            wire::put_u32(out, *g);
        }
        OfAction::Meter(m) => {
            simple(out, ofpat::METER);
            wire::put_u32(out, *m);
        }
        OfAction::PushVlan(t) => {
            simple(out, ofpat::PUSH_VLAN);
            wire::put_u16(out, *t);
            wire::put_zeros(out, 2);
        }
        OfAction::PopVlan => {
            simple(out, ofpat::POP_VLAN);
            wire::put_zeros(out, 4);
        }
        OfAction::SetNwTtl(t) => {
            simple(out, ofpat::SET_NW_TTL);
            wire::put_u8(out, *t);
            wire::put_zeros(out, 3);
        }
        OfAction::DecNwTtl => {
            simple(out, ofpat::DEC_NW_TTL);
            wire::put_zeros(out, 4);
        }
        OfAction::SetField(entry) => set_field_masked(out, start, entry.field, entry.value, None),
        _ => nx::encode(version, a, out),
    }
}

/// `OFPAT_SET_FIELD` with an optional mask (OpenFlow 1.5's partial load).
fn set_field_masked(
    out: &mut Vec<u8>,
    start: usize,
    field: OxmField,
    value: u128,
    mask: Option<u128>,
) {
    wire::put_u16(out, ofpat::SET_FIELD);
    wire::put_u16(out, 0);
    oxm::write_entry(out, field, false, value, mask);
    wire::pad8_from(out, start);
    let len = wire::len16(out, start);
    wire::patch_u16(out, start + 2, len);
}

/// Decode an instruction list (the tail of a `FLOW_MOD` or flow stats).
pub fn decode_instructions(bytes: &[u8]) -> Result<Vec<Instruction>, OfpError> {
    let mut r = Reader::new(bytes, e::BIC_BAD_LEN);
    let mut out = Vec::new();
    while !r.is_empty() {
        let ty = r.peek_u16().ok_or(e::BIC_BAD_LEN)?;
        let len = usize::from(r.peek_u16_at(2).ok_or(e::BIC_BAD_LEN)?);
        if len < 8 || !len.is_multiple_of(8) || len > r.remaining() {
            return Err(e::BIC_BAD_LEN);
        }
        let mut i = r.sub(len, e::BIC_BAD_LEN)?;
        i.skip(4)?;
        let fixed = |want: usize| {
            if len == want {
                Ok(())
            } else {
                Err(e::BIC_BAD_LEN)
            }
        };
        out.push(match ty {
            ofpit::GOTO_TABLE => {
                fixed(8)?;
                Instruction::GotoTable(i.u8()?)
            }
            ofpit::WRITE_METADATA => {
                fixed(24)?;
                i.pad(4)?;
                let metadata = i.u64()?;
                let mask = i.u64()?;
                Instruction::WriteMetadata { metadata, mask }
            }
            ofpit::WRITE_ACTIONS | ofpit::APPLY_ACTIONS => {
                i.pad(4)?;
                let acts = decode_actions(i.rest())?;
                if ty == ofpit::WRITE_ACTIONS {
                    Instruction::WriteActions(acts)
                } else {
                    Instruction::ApplyActions(acts)
                }
            }
            ofpit::CLEAR_ACTIONS => {
                fixed(8)?;
                Instruction::ClearActions
            }
            ofpit::METER => {
                fixed(8)?;
                Instruction::Meter(i.u32()?)
            }
            ofpit::EXPERIMENTER => {
                return Err(OfpError::BadInstruction(BadInstruction::BAD_EXPERIMENTER))
            }
            _ => return Err(OfpError::BadInstruction(BadInstruction::UNKNOWN_INST)),
        });
    }
    Ok(out)
}

/// Encode an instruction list.
/// OpenFlow 1.5's form of an instruction list: a meter is an
/// `OFPAT_METER` action at the front of the (first) apply-actions, as Open
/// vSwitch writes it — 1.5 deprecates the `OFPIT_METER` instruction. The
/// codec reads and writes 1.5 rules in this form (so 1.5 bytes round-trip);
/// `convert` maps both forms to the same nicflow rule.
pub fn meter_as_action(insts: &[Instruction]) -> Vec<Instruction> {
    let meters: Vec<u32> = insts
        .iter()
        .filter_map(|i| match i {
            Instruction::Meter(m) => Some(*m),
            _ => None,
        })
        .collect();
    if meters.is_empty() {
        return insts.to_vec();
    }
    let mut v: Vec<Instruction> = Vec::with_capacity(insts.len());
    let mut placed = false;
    for i in insts {
        match i {
            Instruction::Meter(_) => {}
            Instruction::ApplyActions(a) if !placed => {
                let mut acts: Vec<OfAction> = meters.iter().map(|m| OfAction::Meter(*m)).collect();
                acts.extend(a.iter().cloned());
                v.push(Instruction::ApplyActions(acts));
                placed = true;
            }
            i => v.push(i.clone()),
        }
    }
    if !placed {
        let acts = meters.iter().map(|m| OfAction::Meter(*m)).collect();
        v.insert(0, Instruction::ApplyActions(acts));
    }
    v
}

/// [`encode_instructions`] in OpenFlow `version` (1.5: [`meter_as_action`]).
pub fn encode_instructions_as(version: u8, insts: &[Instruction], out: &mut Vec<u8>) {
    if version >= crate::msg::OFP15_VERSION
        && insts.iter().any(|i| matches!(i, Instruction::Meter(_)))
    {
        encode_instructions_v(version, &meter_as_action(insts), out)
    } else {
        encode_instructions_v(version, insts, out)
    }
}

pub fn encode_instructions(insts: &[Instruction], out: &mut Vec<u8>) {
    encode_instructions_v(crate::msg::OFP13_VERSION, insts, out)
}

fn encode_instructions_v(version: u8, insts: &[Instruction], out: &mut Vec<u8>) {
    for inst in insts {
        let start = out.len();
        let (ty, fixed_len) = match inst {
            Instruction::GotoTable(_) => (ofpit::GOTO_TABLE, 8),
            Instruction::WriteMetadata { .. } => (ofpit::WRITE_METADATA, 24),
            Instruction::WriteActions(_) => (ofpit::WRITE_ACTIONS, 0),
            Instruction::ApplyActions(_) => (ofpit::APPLY_ACTIONS, 0),
            Instruction::ClearActions => (ofpit::CLEAR_ACTIONS, 8),
            Instruction::Meter(_) => (ofpit::METER, 8),
        };
        wire::put_u16(out, ty);
        wire::put_u16(out, fixed_len);
        match inst {
            Instruction::GotoTable(t) => {
                wire::put_u8(out, *t);
                wire::put_zeros(out, 3);
            }
            Instruction::WriteMetadata { metadata, mask } => {
                wire::put_zeros(out, 4);
                wire::put_u64(out, *metadata);
                wire::put_u64(out, *mask);
            }
            Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
                wire::put_zeros(out, 4);
                encode_actions_as(version, a, out);
                let len = wire::len16(out, start);
                wire::patch_u16(out, start + 2, len);
            }
            Instruction::ClearActions => wire::put_zeros(out, 4),
            Instruction::Meter(m) => wire::put_u32(out, *m),
        }
    }
}
