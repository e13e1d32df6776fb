//! `OFPT_GROUP_MOD` and group buckets (also used by the `GROUP_DESC`
//! multipart reply). Bucket actions stay in wire form;
//! [`Bucket::translate`] gives nicflow's action list.
//!
//! OpenFlow 1.5 changes the layout: buckets carry an id, and weight and
//! watch port/group become bucket properties; a group mod names a bucket
//! (`command_bucket_id`) for the new `INSERT_BUCKET` / `REMOVE_BUCKET`
//! commands; and a group may carry properties, of which Open vSwitch's
//! Netronome selection method (`selection_method=dp_hash`, what OVN's load
//! balancers use) is understood ([`SelectionMethod`]). In 1.3 bucket ids are
//! the buckets' positions, as Open vSwitch numbers them.

use crate::action::{self, OfAction};
use crate::error::{BadProperty, GroupModFailed, OfpError};
use crate::oxm::{self, OxmEntry};
use crate::wire::{self, Reader};
use nicflow_flow::{Action, Match};

use super::prop;

/// `OFPGC_*` (`OFPGC15_*` from 3 on).
pub mod command {
    pub const ADD: u16 = 0;
    pub const MODIFY: u16 = 1;
    pub const DELETE: u16 = 2;
    /// OpenFlow 1.5: insert the buckets before/after `command_bucket_id`.
    pub const INSERT_BUCKET: u16 = 3;
    /// OpenFlow 1.5: remove bucket `command_bucket_id` (or all, first, last).
    pub const REMOVE_BUCKET: u16 = 5;
    /// Open vSwitch extension (1.5 here): add, or modify if it exists.
    pub const ADD_OR_MOD: u16 = 0x8000;
}

/// `OFPG15_BUCKET_*` special values of `command_bucket_id`.
pub mod bucket_id {
    /// Highest real bucket id.
    pub const MAX: u32 = 0xffff_ff00;
    pub const FIRST: u32 = 0xffff_fffd;
    pub const LAST: u32 = 0xffff_fffe;
    pub const ALL: u32 = 0xffff_ffff;
}

/// `OFPGBPT15_*` bucket properties.
mod bucket_prop {
    pub const WEIGHT: u16 = 0;
    pub const WATCH_PORT: u16 = 1;
    pub const WATCH_GROUP: u16 = 2;
}

/// `OFPGPT15_EXPERIMENTER` and Netronome's selection-method property.
const GROUP_PROP_EXPERIMENTER: u16 = 0xffff;
pub const NTR_VENDOR_ID: u32 = 0x0000_154d;
const NTRT_SELECTION_METHOD: u32 = 1;
/// `NTR_MAX_SELECTION_METHOD_LEN`.
const SELECTION_METHOD_LEN: usize = 16;

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

/// `ofp_bucket` / `ofp15_bucket`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// OpenFlow 1.5's bucket id (at most [`bucket_id::MAX`]); in 1.3 the
    /// bucket's position, not on the wire.
    pub bucket_id: u32,
    /// Select groups. In 1.5 a bucket without a weight property reads as 1.
    pub weight: u16,
    pub watch_port: u32,
    pub watch_group: u32,
    pub actions: Vec<OfAction>,
}

/// `ntr_group_prop_selection_method`: how a select group picks a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectionMethod {
    /// `"hash"` or `"dp_hash"` (OVN uses `dp_hash`); at most 15 bytes.
    pub method: String,
    /// For `dp_hash`: the hash algorithm and bucket bits, as OVS packs them.
    pub param: u64,
    /// For `hash`: the fields hashed (OXM TLVs whose value is a mask).
    pub fields: Vec<OxmEntry>,
}

impl SelectionMethod {
    fn decode(p: &[u8]) -> Result<SelectionMethod, OfpError> {
        let bad = OfpError::BadProperty(BadProperty::BAD_LEN);
        let mut r = Reader::new(p, bad);
        let exp_type = r.u32()?;
        if exp_type != NTRT_SELECTION_METHOD {
            return Err(OfpError::BadProperty(BadProperty::BAD_EXP_TYPE));
        }
        r.pad(4)?;
        let method = wire::get_str(&mut r, SELECTION_METHOD_LEN)?;
        let param = r.u64()?;
        let mut fields = Vec::new();
        let mut f = Reader::new(r.rest(), crate::error::e::BMC_BAD_LEN);
        while !f.is_empty() {
            let e = oxm::read_entry(&mut f, oxm::Ctx::Match)?;
            if e.mask.is_some() {
                return Err(OfpError::BadMatch(crate::error::BadMatch::BAD_MASK));
            }
            fields.push(e);
        }
        Ok(SelectionMethod {
            method,
            param,
            fields,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let at = prop::start(out, GROUP_PROP_EXPERIMENTER);
        wire::put_u32(out, NTR_VENDOR_ID);
        wire::put_u32(out, NTRT_SELECTION_METHOD);
        wire::put_zeros(out, 4);
        wire::put_str(out, &self.method, SELECTION_METHOD_LEN);
        wire::put_u64(out, self.param);
        for f in &self.fields {
            oxm::write_entry(out, f.field, false, f.value, None);
        }
        prop::end(out, at);
    }
}

/// Group properties of a 1.5 group mod or group description.
fn decode_group_props(r: &mut Reader<'_>) -> Result<Option<SelectionMethod>, OfpError> {
    let bad = OfpError::BadProperty(BadProperty::BAD_LEN);
    let mut sel = None;
    for p in prop::read_all(r, bad)? {
        if p.ty != GROUP_PROP_EXPERIMENTER {
            return Err(OfpError::BadProperty(BadProperty::BAD_TYPE));
        }
        let mut v = Reader::new(p.value, bad);
        if v.u32()? != NTR_VENDOR_ID {
            return Err(OfpError::BadProperty(BadProperty::BAD_EXPERIMENTER));
        }
        if sel.is_some() {
            return Err(OfpError::BadProperty(BadProperty::DUP_TYPE));
        }
        sel = Some(SelectionMethod::decode(v.rest())?);
    }
    Ok(sel)
}

/// The 1.5 layout shared by `GROUP_MOD` and `GROUP_DESC` after their
/// headers: `bucket_len` bytes of buckets, then group properties.
pub(crate) fn decode_buckets15(
    r: &mut Reader<'_>,
    bucket_len: usize,
) -> Result<(Vec<Bucket>, Option<SelectionMethod>), OfpError> {
    let mut b = r.sub(bucket_len, gm(GroupModFailed::BAD_BUCKET))?;
    let buckets = Bucket::decode_list15(&mut b)?;
    Ok((buckets, decode_group_props(r)?))
}

pub(crate) fn encode_buckets15(
    buckets: &[Bucket],
    group_type: u8,
    sel: &Option<SelectionMethod>,
    len_at: usize,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    for b in buckets {
        b.encode15(group_type, out);
    }
    let len = wire::len16(out, start);
    wire::patch_u16(out, len_at, len);
    if let Some(s) = sel {
        s.encode(out);
    }
}

impl Bucket {
    /// Decode 1.5 buckets until `r` is empty.
    fn decode_list15(r: &mut Reader<'_>) -> Result<Vec<Bucket>, OfpError> {
        let bad = gm(GroupModFailed::BAD_BUCKET);
        let mut out = Vec::new();
        while !r.is_empty() {
            let len = usize::from(r.peek_u16().ok_or(bad)?);
            if len < 8 || len > r.remaining() {
                return Err(bad);
            }
            let mut b = r.sub(len, bad)?;
            b.skip(2)?;
            let actions_len = usize::from(b.u16()?);
            let bucket_id = b.u32()?;
            if bucket_id > bucket_id::MAX {
                return Err(bad);
            }
            let actions = action::decode_actions(b.bytes(actions_len)?)?;
            let mut bucket = Bucket {
                bucket_id,
                weight: 1,
                watch_port: WATCH_NONE,
                watch_group: WATCH_NONE,
                actions,
            };
            let pbad = OfpError::BadProperty(BadProperty::BAD_LEN);
            for p in prop::read_all(&mut b, pbad)? {
                match p.ty {
                    bucket_prop::WEIGHT => {
                        let v: [u8; 4] = prop::exact(&p, pbad)?;
                        bucket.weight = u16::from_be_bytes([v[0], v[1]]);
                    }
                    bucket_prop::WATCH_PORT => bucket.watch_port = prop::get_u32(&p, pbad)?,
                    bucket_prop::WATCH_GROUP => bucket.watch_group = prop::get_u32(&p, pbad)?,
                    _ => return Err(OfpError::BadProperty(BadProperty::BAD_TYPE)),
                }
            }
            if out.iter().any(|o: &Bucket| o.bucket_id == bucket_id) {
                return Err(gm(GroupModFailed::BUCKET_EXISTS));
            }
            out.push(bucket);
        }
        Ok(out)
    }

    /// A 1.5 bucket: the weight property for select groups (and whenever
    /// it is not the default 1), watch properties when set.
    fn encode15(&self, group_type: u8, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u16(out, 0);
        wire::put_u16(out, 0);
        wire::put_u32(out, self.bucket_id);
        let astart = out.len();
        action::encode_actions_as(super::OFP15_VERSION, &self.actions, out);
        let alen = wire::len16(out, astart);
        wire::patch_u16(out, start + 2, alen);
        if group_type == group_type::SELECT || self.weight != 1 {
            let mut w = [0u8; 4];
            w[..2].copy_from_slice(&self.weight.to_be_bytes());
            prop::put(out, bucket_prop::WEIGHT, &w);
        }
        if self.watch_port != WATCH_NONE {
            prop::put_u32(out, bucket_prop::WATCH_PORT, self.watch_port);
        }
        if self.watch_group != WATCH_NONE {
            prop::put_u32(out, bucket_prop::WATCH_GROUP, self.watch_group);
        }
        let len = wire::len16(out, start);
        wire::patch_u16(out, start, len);
    }

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
                bucket_id: out.len() as u32,
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
    /// [`command`]: 1.3 has ADD, MODIFY, DELETE; 1.5 adds INSERT_BUCKET,
    /// REMOVE_BUCKET and OVS's ADD_OR_MOD.
    pub command: u16,
    pub group_type: u8,
    pub group_id: u32,
    /// OpenFlow 1.5: the bucket `INSERT_BUCKET` inserts before (or
    /// [`bucket_id::FIRST`]/[`bucket_id::LAST`]) and `REMOVE_BUCKET`
    /// removes ([`bucket_id::ALL`]: all). [`bucket_id::ALL`] in 1.3.
    pub command_bucket_id: u32,
    pub buckets: Vec<Bucket>,
    /// OpenFlow 1.5 group property; `None` in 1.3.
    pub selection_method: Option<SelectionMethod>,
}

impl GroupMod {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<GroupMod, OfpError> {
        let command = r.u16()?;
        let group_type = r.u8()?;
        r.pad(1)?;
        let group_id = r.u32()?;
        if group_type > group_type::FF {
            return Err(gm(GroupModFailed::BAD_TYPE));
        }
        if version >= super::OFP15_VERSION {
            if !matches!(
                command,
                command::ADD
                    | command::MODIFY
                    | command::DELETE
                    | command::INSERT_BUCKET
                    | command::REMOVE_BUCKET
                    | command::ADD_OR_MOD
            ) {
                return Err(gm(GroupModFailed::BAD_COMMAND));
            }
            let bucket_len = usize::from(r.u16()?);
            r.pad(2)?;
            let command_bucket_id = r.u32()?;
            if command_bucket_id > bucket_id::MAX
                && !matches!(
                    command_bucket_id,
                    bucket_id::FIRST | bucket_id::LAST | bucket_id::ALL
                )
            {
                return Err(gm(GroupModFailed::UNKNOWN_BUCKET));
            }
            let (buckets, selection_method) = decode_buckets15(r, bucket_len)?;
            return Ok(GroupMod {
                command,
                group_type,
                group_id,
                command_bucket_id,
                buckets,
                selection_method,
            });
        }
        if command > command::DELETE {
            return Err(gm(GroupModFailed::BAD_COMMAND));
        }
        Ok(GroupMod {
            command,
            group_type,
            group_id,
            command_bucket_id: bucket_id::ALL,
            buckets: Bucket::decode_list(r)?,
            selection_method: None,
        })
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        if version >= super::OFP15_VERSION {
            wire::put_u16(out, self.command);
            wire::put_u8(out, self.group_type);
            wire::put_zeros(out, 1);
            wire::put_u32(out, self.group_id);
            let len_at = out.len();
            wire::put_u16(out, 0);
            wire::put_zeros(out, 2);
            wire::put_u32(out, self.command_bucket_id);
            encode_buckets15(
                &self.buckets,
                self.group_type,
                &self.selection_method,
                len_at,
                out,
            );
            return;
        }
        wire::put_u16(out, self.command);
        wire::put_u8(out, self.group_type);
        wire::put_zeros(out, 1);
        wire::put_u32(out, self.group_id);
        for b in &self.buckets {
            b.encode(out);
        }
    }
}
