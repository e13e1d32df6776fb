//! `OFPT_GROUP_MOD` and group buckets (also used by the `GROUP_DESC`
//! multipart reply). Bucket actions stay in wire form;
//! [`Bucket::translate`] gives nicflow's action list.

use crate::action::{self, OfAction};
use crate::error::{GroupModFailed, OfpError};
use crate::wire::{self, Reader};
use nicflow_flow::{Action, Match};

/// `OFPGC_*`.
pub mod command {
    pub const ADD: u16 = 0;
    pub const MODIFY: u16 = 1;
    pub const DELETE: u16 = 2;
}

/// `OFPGT_*`.
pub mod group_type {
    pub const ALL: u8 = 0;
    pub const SELECT: u8 = 1;
    pub const INDIRECT: u8 = 2;
    pub const FF: u8 = 3;
}

/// `OFPG_ALL`: every group (delete).
pub const OFPG_ALL: u32 = 0xffff_fffc;
/// `OFPG_ANY` / `OFPP_ANY`: no watch.
pub const WATCH_NONE: u32 = 0xffff_ffff;

fn gm(c: GroupModFailed) -> OfpError {
    OfpError::GroupModFailed(c)
}

/// `ofp_bucket`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub weight: u16,
    pub watch_port: u32,
    pub watch_group: u32,
    pub actions: Vec<OfAction>,
}

impl Bucket {
    /// Decode buckets until `r` is empty.
    pub(crate) fn decode_list(r: &mut Reader<'_>) -> Result<Vec<Bucket>, OfpError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let len = usize::from(r.peek_u16().ok_or(gm(GroupModFailed::BAD_BUCKET))?);
            if len < 16 || !len.is_multiple_of(8) || len > r.remaining() {
                return Err(gm(GroupModFailed::BAD_BUCKET));
            }
            let mut b = r.sub(len, gm(GroupModFailed::BAD_BUCKET))?;
            b.skip(2)?;
            let weight = b.u16()?;
            let watch_port = b.u32()?;
            let watch_group = b.u32()?;
            b.pad(4)?;
            out.push(Bucket {
                weight,
                watch_port,
                watch_group,
                actions: action::decode_actions(b.rest())?,
            });
        }
        Ok(out)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u16(out, 0);
        wire::put_u16(out, self.weight);
        wire::put_u32(out, self.watch_port);
        wire::put_u32(out, self.watch_group);
        wire::put_zeros(out, 4);
        action::encode_actions(&self.actions, out);
        let len = wire::len16(out, start);
        wire::patch_u16(out, start, len);
    }

    /// The bucket's actions as nicflow runs them (no rule match: bucket
    /// actions are not checked against one, as in OVS).
    pub fn translate(&self) -> Result<Vec<Action>, OfpError> {
        action::convert::actions_to_nicflow(&self.actions, &Match::catchall())
    }
}

/// `OFPT_GROUP_MOD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMod {
    pub command: u16,
    pub group_type: u8,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
}

impl GroupMod {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<GroupMod, OfpError> {
        let command = r.u16()?;
        let group_type = r.u8()?;
        r.pad(1)?;
        let group_id = r.u32()?;
        if command > command::DELETE {
            return Err(gm(GroupModFailed::BAD_COMMAND));
        }
        if group_type > group_type::FF {
            return Err(gm(GroupModFailed::BAD_TYPE));
        }
        Ok(GroupMod {
            command,
            group_type,
            group_id,
            buckets: Bucket::decode_list(r)?,
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u16(out, self.command);
        wire::put_u8(out, self.group_type);
        wire::put_zeros(out, 1);
        wire::put_u32(out, self.group_id);
        for b in &self.buckets {
            b.encode(out);
        }
    }
}
