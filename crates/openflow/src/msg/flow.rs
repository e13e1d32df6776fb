//! Messages about rules and packets: `FLOW_MOD` (a controller changes the
//! tables), `FLOW_REMOVED` (a rule expired), `PACKET_IN` (the slow path
//! hands a packet to the controller), `PACKET_OUT` (the controller sends
//! one).
//!
//! Matches are nicflow [`Match`]es (decoded by [`crate::oxm`]);
//! instructions and actions stay in wire form
//! ([`crate::action::Instruction`]) so they re-encode exactly, and
//! [`FlowMod::translate`] turns them into what nicflow's tables run.

use crate::action::{self, Instruction, OfAction, Translated};
use crate::error::{FlowModFailed, OfpError};
use crate::oxm;
use crate::wire::{self, Reader};
use nicflow_flow::Match;

/// `OFP_NO_BUFFER`.
pub const NO_BUFFER: u32 = 0xffff_ffff;
/// `OFPP_ANY` / `OFPG_ANY`: "no restriction" in `out_port` / `out_group`.
pub const ANY: u32 = 0xffff_ffff;

/// `OFPFF_*` flow-mod flags.
pub mod flags {
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    pub const RESET_COUNTS: u16 = 1 << 2;
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
    pub const ALL: u16 = 0x1f;
}

/// `OFPFC_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FlowModCommand {
    Add = 0,
    Modify = 1,
    ModifyStrict = 2,
    Delete = 3,
    DeleteStrict = 4,
}

impl FlowModCommand {
    pub fn from_u8(v: u8) -> Option<FlowModCommand> {
        Some(match v {
            0 => FlowModCommand::Add,
            1 => FlowModCommand::Modify,
            2 => FlowModCommand::ModifyStrict,
            3 => FlowModCommand::Delete,
            4 => FlowModCommand::DeleteStrict,
            _ => return None,
        })
    }
}

/// `OFPT_FLOW_MOD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowMod {
    pub cookie: u64,
    pub cookie_mask: u64,
    pub table_id: u8,
    pub command: FlowModCommand,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub buffer_id: u32,
    pub out_port: u32,
    pub out_group: u32,
    pub flags: u16,
    pub r#match: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<FlowMod, OfpError> {
        let cookie = r.u64()?;
        let cookie_mask = r.u64()?;
        let table_id = r.u8()?;
        let command = r.u8()?;
        let idle_timeout = r.u16()?;
        let hard_timeout = r.u16()?;
        let priority = r.u16()?;
        let buffer_id = r.u32()?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        let flags = r.u16()?;
        r.pad(2)?;
        let command = FlowModCommand::from_u8(command)
            .ok_or(OfpError::FlowModFailed(FlowModFailed::BAD_COMMAND))?;
        if flags & !self::flags::ALL != 0 {
            return Err(OfpError::FlowModFailed(FlowModFailed::BAD_FLAGS));
        }
        if table_id == 0xff && command == FlowModCommand::Add {
            return Err(OfpError::FlowModFailed(FlowModFailed::BAD_TABLE_ID));
        }
        let r#match = oxm::decode_match(r)?;
        let instructions = action::decode_instructions(r.rest())?;
        Ok(FlowMod {
            cookie,
            cookie_mask,
            table_id,
            command,
            idle_timeout,
            hard_timeout,
            priority,
            buffer_id,
            out_port,
            out_group,
            flags,
            r#match,
            instructions,
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u64(out, self.cookie);
        wire::put_u64(out, self.cookie_mask);
        wire::put_u8(out, self.table_id);
        wire::put_u8(out, self.command as u8);
        wire::put_u16(out, self.idle_timeout);
        wire::put_u16(out, self.hard_timeout);
        wire::put_u16(out, self.priority);
        wire::put_u32(out, self.buffer_id);
        wire::put_u32(out, self.out_port);
        wire::put_u32(out, self.out_group);
        wire::put_u16(out, self.flags);
        wire::put_zeros(out, 2);
        oxm::encode_match(&self.r#match, out);
        action::encode_instructions(&self.instructions, out);
    }

    /// What nicflow's tables run for this rule (see
    /// [`crate::action::convert`]).
    pub fn translate(&self) -> Result<Translated, OfpError> {
        action::to_nicflow(&self.instructions, &self.r#match, self.table_id)
    }
}

/// `OFPRR_*` flow-removed reasons.
pub mod removed_reason {
    pub const IDLE_TIMEOUT: u8 = 0;
    pub const HARD_TIMEOUT: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const GROUP_DELETE: u8 = 3;
}

/// `OFPT_FLOW_REMOVED`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRemoved {
    pub cookie: u64,
    pub priority: u16,
    pub reason: u8,
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub packet_count: u64,
    pub byte_count: u64,
    pub r#match: Match,
}

impl FlowRemoved {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<FlowRemoved, OfpError> {
        Ok(FlowRemoved {
            cookie: r.u64()?,
            priority: r.u16()?,
            reason: r.u8()?,
            table_id: r.u8()?,
            duration_sec: r.u32()?,
            duration_nsec: r.u32()?,
            idle_timeout: r.u16()?,
            hard_timeout: r.u16()?,
            packet_count: r.u64()?,
            byte_count: r.u64()?,
            r#match: oxm::decode_match(r)?,
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u64(out, self.cookie);
        wire::put_u16(out, self.priority);
        wire::put_u8(out, self.reason);
        wire::put_u8(out, self.table_id);
        wire::put_u32(out, self.duration_sec);
        wire::put_u32(out, self.duration_nsec);
        wire::put_u16(out, self.idle_timeout);
        wire::put_u16(out, self.hard_timeout);
        wire::put_u64(out, self.packet_count);
        wire::put_u64(out, self.byte_count);
        oxm::encode_match(&self.r#match, out);
    }
}

/// `OFPR_*` packet-in reasons.
pub mod packet_in_reason {
    pub const NO_MATCH: u8 = 0;
    pub const ACTION: u8 = 1;
    pub const INVALID_TTL: u8 = 2;
}

/// `OFPT_PACKET_IN`. The match holds the packet's pipeline fields
/// (`in_port`, `metadata`, tunnel fields, registers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketIn {
    pub buffer_id: u32,
    pub total_len: u16,
    pub reason: u8,
    pub table_id: u8,
    pub cookie: u64,
    pub r#match: Match,
    pub data: Vec<u8>,
}

impl PacketIn {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<PacketIn, OfpError> {
        let buffer_id = r.u32()?;
        let total_len = r.u16()?;
        let reason = r.u8()?;
        let table_id = r.u8()?;
        let cookie = r.u64()?;
        let r#match = oxm::decode_match(r)?;
        r.pad(2)?;
        Ok(PacketIn {
            buffer_id,
            total_len,
            reason,
            table_id,
            cookie,
            r#match,
            data: r.rest().to_vec(),
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u32(out, self.buffer_id);
        wire::put_u16(out, self.total_len);
        wire::put_u8(out, self.reason);
        wire::put_u8(out, self.table_id);
        wire::put_u64(out, self.cookie);
        oxm::encode_match(&self.r#match, out);
        wire::put_zeros(out, 2);
        out.extend_from_slice(&self.data);
    }
}

/// `OFPT_PACKET_OUT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketOut {
    pub buffer_id: u32,
    pub in_port: u32,
    pub actions: Vec<OfAction>,
    pub data: Vec<u8>,
}

impl PacketOut {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<PacketOut, OfpError> {
        let buffer_id = r.u32()?;
        let in_port = r.u32()?;
        let actions_len = usize::from(r.u16()?);
        r.pad(6)?;
        let actions = action::decode_actions(r.bytes(actions_len)?)?;
        Ok(PacketOut {
            buffer_id,
            in_port,
            actions,
            data: r.rest().to_vec(),
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u32(out, self.buffer_id);
        wire::put_u32(out, self.in_port);
        let len_at = out.len();
        wire::put_u16(out, 0);
        wire::put_zeros(out, 6);
        let start = out.len();
        action::encode_actions(&self.actions, out);
        let len = wire::len16(out, start);
        wire::patch_u16(out, len_at, len);
        out.extend_from_slice(&self.data);
    }
}
