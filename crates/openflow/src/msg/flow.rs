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
use crate::error::{e, FlowModFailed, OfpError};
use crate::oxm;
use crate::wire::{self, Reader};
use nicflow_flow::{Field, Match};

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
    /// Eviction precedence (OpenFlow 1.4+; padding, so 0, in 1.3). nicflow
    /// does not evict; it is kept so the rule reads back as sent.
    pub importance: u16,
    pub r#match: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<FlowMod, OfpError> {
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
        let importance = r.u16()?;
        let importance = if version >= super::OFP14_VERSION {
            importance
        } else {
            0
        };
        let command = FlowModCommand::from_u8(command)
            .ok_or(OfpError::FlowModFailed(FlowModFailed::BAD_COMMAND))?;
        if flags & !self::flags::ALL != 0 {
            return Err(OfpError::FlowModFailed(FlowModFailed::BAD_FLAGS));
        }
        if table_id == 0xff && command == FlowModCommand::Add {
            return Err(OfpError::FlowModFailed(FlowModFailed::BAD_TABLE_ID));
        }
        let r#match = oxm::decode_match(r)?;
        let mut instructions = action::decode_instructions(r.rest())?;
        if version >= super::OFP15_VERSION {
            instructions = action::meter_as_action(&instructions);
        }
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
            importance,
            r#match,
            instructions,
        })
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
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
        let importance = if version >= super::OFP14_VERSION {
            self.importance
        } else {
            0
        };
        wire::put_u16(out, importance);
        oxm::encode_match(&self.r#match, out);
        action::encode_instructions_as(version, &self.instructions, out);
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

/// OXS (OpenFlow 1.5 statistics) class and fields.
pub(crate) mod oxs {
    pub const CLASS: u16 = 0x8002;
    pub const DURATION: u8 = 0;
    pub const IDLE_TIME: u8 = 1;
    pub const FLOW_COUNT: u8 = 3;
    pub const PACKET_COUNT: u8 = 4;
    pub const BYTE_COUNT: u8 = 5;
}

/// OpenFlow 1.5 `ofp_stats`: duration, packet and byte counts (and, for
/// aggregates, the flow count) as OXS TLVs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OxsStats {
    pub duration: Option<(u32, u32)>,
    pub idle_age: Option<u32>,
    pub packet_count: Option<u64>,
    pub byte_count: Option<u64>,
    pub flow_count: Option<u32>,
}

impl OxsStats {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<OxsStats, OfpError> {
        r.skip(2)?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(r.short_error());
        }
        let mut s = r.sub(len - 4, r.short_error())?;
        r.pad((len.next_multiple_of(8) - len).min(r.remaining()))?;
        let mut out = OxsStats::default();
        while !s.is_empty() {
            let h = s.u32()?;
            if (h >> 16) as u16 != oxs::CLASS {
                return Err(e::BRC_BAD_LEN);
            }
            let field = ((h >> 9) & 0x7f) as u8;
            let n = (h & 0xff) as usize;
            let mut v = s.sub(n, s.short_error())?;
            let want = if field == oxs::FLOW_COUNT { 4 } else { 8 };
            if n != want {
                // Unknown OXS fields are skipped as OVS does; known ones
                // must have their size.
                if field <= oxs::BYTE_COUNT {
                    return Err(e::BRC_BAD_LEN);
                }
                continue;
            }
            match field {
                oxs::DURATION => out.duration = Some((v.u32()?, v.u32()?)),
                oxs::IDLE_TIME => out.idle_age = Some(v.u32()?),
                oxs::FLOW_COUNT => out.flow_count = Some(v.u32()?),
                oxs::PACKET_COUNT => out.packet_count = Some(v.u64()?),
                oxs::BYTE_COUNT => out.byte_count = Some(v.u64()?),
                _ => {}
            }
        }
        Ok(out)
    }

    /// In OVS's order (`oxs_put_stats`), padded to 8.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u16(out, 0);
        wire::put_u16(out, 0);
        let hdr = |out: &mut Vec<u8>, field: u8, n: u32| {
            wire::put_u32(
                out,
                (u32::from(oxs::CLASS) << 16) | (u32::from(field) << 9) | n,
            )
        };
        if let Some((s, ns)) = self.duration {
            hdr(out, oxs::DURATION, 8);
            wire::put_u32(out, s);
            wire::put_u32(out, ns);
        }
        if let Some(a) = self.idle_age {
            hdr(out, oxs::IDLE_TIME, 8);
            wire::put_u32(out, a);
            wire::put_u32(out, 0);
        }
        if let Some(p) = self.packet_count {
            hdr(out, oxs::PACKET_COUNT, 8);
            wire::put_u64(out, p);
        }
        if let Some(b) = self.byte_count {
            hdr(out, oxs::BYTE_COUNT, 8);
            wire::put_u64(out, b);
        }
        if let Some(f) = self.flow_count {
            hdr(out, oxs::FLOW_COUNT, 4);
            wire::put_u32(out, f);
        }
        let len = wire::len16(out, start);
        wire::patch_u16(out, start + 2, len);
        wire::pad8_from(out, start);
    }
}

impl FlowRemoved {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<FlowRemoved, OfpError> {
        if version >= super::OFP15_VERSION {
            let table_id = r.u8()?;
            let reason = r.u8()?;
            let priority = r.u16()?;
            let idle_timeout = r.u16()?;
            let hard_timeout = r.u16()?;
            let cookie = r.u64()?;
            let r#match = oxm::decode_match(r)?;
            let st = OxsStats::decode(r)?;
            let (duration_sec, duration_nsec) = st.duration.unwrap_or((0, 0));
            return Ok(FlowRemoved {
                cookie,
                priority,
                reason,
                table_id,
                duration_sec,
                duration_nsec,
                idle_timeout,
                hard_timeout,
                packet_count: st.packet_count.unwrap_or(0),
                byte_count: st.byte_count.unwrap_or(0),
                r#match,
            });
        }
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

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        if version >= super::OFP15_VERSION {
            wire::put_u8(out, self.table_id);
            wire::put_u8(out, self.reason);
            wire::put_u16(out, self.priority);
            wire::put_u16(out, self.idle_timeout);
            wire::put_u16(out, self.hard_timeout);
            wire::put_u64(out, self.cookie);
            oxm::encode_match(&self.r#match, out);
            OxsStats {
                duration: Some((self.duration_sec, self.duration_nsec)),
                packet_count: Some(self.packet_count),
                byte_count: Some(self.byte_count),
                ..OxsStats::default()
            }
            .encode(out);
            return;
        }
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

/// `OFPP_CONTROLLER`: the `in_port` of a 1.5 packet-out whose match has
/// none (as Open vSwitch reads it).
pub const OFPP_CONTROLLER: u32 = 0xffff_fffd;

/// `OFPT_PACKET_OUT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketOut {
    pub buffer_id: u32,
    /// In 1.3 a field of its own; in 1.5 the `in_port` of the match
    /// (`OFPP_CONTROLLER` when the match has none).
    pub in_port: u32,
    /// OpenFlow 1.5: the match's other pipeline fields (`metadata`,
    /// registers, tunnel fields) the packet starts with; `in_port` is never
    /// set here. Always the catch-all in 1.3, which cannot carry them.
    pub metadata: Match,
    pub actions: Vec<OfAction>,
    pub data: Vec<u8>,
}

impl PacketOut {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<PacketOut, OfpError> {
        if version >= super::OFP15_VERSION {
            let buffer_id = r.u32()?;
            let actions_len = usize::from(r.u16()?);
            r.pad(2)?;
            let mut metadata = oxm::decode_match(r)?;
            let (in_port, mask) = metadata.get(Field::InPort);
            let in_port = if mask != 0 {
                in_port as u32
            } else {
                OFPP_CONTROLLER
            };
            metadata.clear(Field::InPort);
            let actions = action::decode_actions(r.bytes(actions_len)?)?;
            return Ok(PacketOut {
                buffer_id,
                in_port,
                metadata,
                actions,
                data: r.rest().to_vec(),
            });
        }
        let buffer_id = r.u32()?;
        let in_port = r.u32()?;
        let actions_len = usize::from(r.u16()?);
        r.pad(6)?;
        let actions = action::decode_actions(r.bytes(actions_len)?)?;
        Ok(PacketOut {
            buffer_id,
            in_port,
            metadata: Match::catchall(),
            actions,
            data: r.rest().to_vec(),
        })
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        if version >= super::OFP15_VERSION {
            wire::put_u32(out, self.buffer_id);
            let len_at = out.len();
            wire::put_u16(out, 0);
            wire::put_zeros(out, 2);
            let mut m = self.metadata;
            m.set(
                Field::InPort,
                u128::from(self.in_port),
                u128::from(u32::MAX),
            );
            oxm::encode_match(&m, out);
            let start = out.len();
            action::encode_actions_as(version, &self.actions, out);
            let len = wire::len16(out, start);
            wire::patch_u16(out, len_at, len);
            out.extend_from_slice(&self.data);
            return;
        }
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
