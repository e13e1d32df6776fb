//! Bundles (OpenFlow 1.4+, used by `ovs-ofctl --bundle` and OVN):
//! `OFPT_BUNDLE_CONTROL` opens, closes, commits or discards a bundle;
//! `OFPT_BUNDLE_ADD_MESSAGE` adds one message to an open bundle. The inner
//! message is decoded with the same decoder as a message on its own, so a
//! bad `FLOW_MOD` inside a bundle gets the same error as outside one.
//!
//! The codec only frames bundles; applying a committed bundle all at once
//! (atomic: all or nothing; ordered: in the order added) is the switch's
//! job.

use super::{Message, HEADER_LEN};
use crate::error::{e, BundleFailed, OfpError};
use crate::wire::{self, Reader};

/// `OFPBF_*` bundle flags.
pub mod flags {
    /// All or nothing.
    pub const ATOMIC: u16 = 1 << 0;
    /// Apply in the order added.
    pub const ORDERED: u16 = 1 << 1;
    pub const ALL: u16 = ATOMIC | ORDERED;
}

fn bf(c: BundleFailed) -> OfpError {
    OfpError::BundleFailed(c)
}

/// `OFPBCT_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum BundleCtrlType {
    OpenRequest = 0,
    OpenReply = 1,
    CloseRequest = 2,
    CloseReply = 3,
    CommitRequest = 4,
    CommitReply = 5,
    DiscardRequest = 6,
    DiscardReply = 7,
}

impl BundleCtrlType {
    pub fn from_u16(v: u16) -> Option<BundleCtrlType> {
        use BundleCtrlType as T;
        Some(match v {
            0 => T::OpenRequest,
            1 => T::OpenReply,
            2 => T::CloseRequest,
            3 => T::CloseReply,
            4 => T::CommitRequest,
            5 => T::CommitReply,
            6 => T::DiscardRequest,
            7 => T::DiscardReply,
            _ => return None,
        })
    }

    /// The reply type answering a request type (`None` for a reply).
    pub fn reply(self) -> Option<BundleCtrlType> {
        use BundleCtrlType as T;
        Some(match self {
            T::OpenRequest => T::OpenReply,
            T::CloseRequest => T::CloseReply,
            T::CommitRequest => T::CommitReply,
            T::DiscardRequest => T::DiscardReply,
            _ => return None,
        })
    }
}

/// `OFPT_BUNDLE_CONTROL` (`ofp14_bundle_ctrl_msg`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleControl {
    pub bundle_id: u32,
    pub ctrl: BundleCtrlType,
    /// `OFPBF_*` ([`flags`]).
    pub flags: u16,
    /// Bundle properties as on the wire (OpenFlow defines only
    /// experimenter ones; nicflow uses none).
    pub properties: Vec<u8>,
}

impl BundleControl {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<BundleControl, OfpError> {
        let bundle_id = r.u32()?;
        let ctrl = r.u16()?;
        let flags = r.u16()?;
        let ctrl = BundleCtrlType::from_u16(ctrl).ok_or(bf(BundleFailed::BAD_TYPE))?;
        if flags & !flags::ALL != 0 {
            return Err(bf(BundleFailed::BAD_FLAGS));
        }
        Ok(BundleControl {
            bundle_id,
            ctrl,
            flags,
            properties: r.rest().to_vec(),
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u32(out, self.bundle_id);
        wire::put_u16(out, self.ctrl as u16);
        wire::put_u16(out, self.flags);
        out.extend_from_slice(&self.properties);
    }

    /// The reply to this request (same bundle id and flags, no
    /// properties), or `None` if this is a reply.
    pub fn reply(&self) -> Option<BundleControl> {
        Some(BundleControl {
            bundle_id: self.bundle_id,
            ctrl: self.ctrl.reply()?,
            flags: self.flags,
            properties: Vec::new(),
        })
    }
}

/// `OFPT_BUNDLE_ADD_MESSAGE`: one message for bundle `bundle_id`. On the
/// wire the inner message has the outer message's version and xid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleAdd {
    pub bundle_id: u32,
    pub flags: u16,
    /// `FLOW_MOD`, `GROUP_MOD`, `PORT_MOD`, `METER_MOD` or `PACKET_OUT`
    /// (others are `OFPBFC_MSG_UNSUP` when decoding).
    pub message: Box<Message>,
    /// Properties after the inner message, as on the wire (without the
    /// padding that aligns them).
    pub properties: Vec<u8>,
}

impl BundleAdd {
    /// Whether `m` may be put in a bundle (what Open vSwitch accepts that
    /// nicflow also handles).
    pub fn bundlable(m: &Message) -> bool {
        matches!(
            m,
            Message::FlowMod(_)
                | Message::GroupMod(_)
                | Message::PortMod(_)
                | Message::MeterMod(_)
                | Message::PacketOut(_)
        )
    }

    pub(super) fn decode(version: u8, xid: u32, r: &mut Reader<'_>) -> Result<BundleAdd, OfpError> {
        let bundle_id = r.u32()?;
        r.pad(2)?;
        let flags = r.u16()?;
        if flags & !flags::ALL != 0 {
            return Err(bf(BundleFailed::BAD_FLAGS));
        }
        let start = r.pos();
        let inner = r.rest();
        if inner.len() < HEADER_LEN {
            return Err(bf(BundleFailed::MSG_BAD_LEN));
        }
        let len = usize::from(u16::from_be_bytes([inner[2], inner[3]]));
        if len < HEADER_LEN || len > inner.len() {
            return Err(bf(BundleFailed::MSG_BAD_LEN));
        }
        let inner_xid = u32::from_be_bytes([inner[4], inner[5], inner[6], inner[7]]);
        if inner_xid != xid {
            return Err(bf(BundleFailed::MSG_BAD_XID));
        }
        if inner[0] != version {
            return Err(e::brc(crate::error::BadRequest::BAD_VERSION));
        }
        let message = super::decode_body(version, xid, inner[1], &inner[HEADER_LEN..len])?;
        if !Self::bundlable(&message) {
            return Err(bf(BundleFailed::MSG_UNSUP));
        }
        // Properties start 8-aligned from the start of the outer message
        // (header 8 + 8 bytes before the inner message).
        let mut tail = &inner[len..];
        if !tail.is_empty() {
            let pad = (start + len).next_multiple_of(8) - (start + len);
            if tail.len() < pad {
                return Err(bf(BundleFailed::MSG_BAD_LEN));
            }
            tail = &tail[pad..];
        }
        Ok(BundleAdd {
            bundle_id,
            flags,
            message: Box::new(message),
            properties: tail.to_vec(),
        })
    }

    pub(super) fn encode(&self, version: u8, xid: u32, out: &mut Vec<u8>) {
        wire::put_u32(out, self.bundle_id);
        wire::put_zeros(out, 2);
        wire::put_u16(out, self.flags);
        let at = out.len();
        wire::put_u8(out, version);
        wire::put_u8(out, self.message.msg_type());
        wire::put_u16(out, 0);
        wire::put_u32(out, xid);
        super::encode_body(version, xid, &self.message, out);
        let len = wire::len16(out, at);
        wire::patch_u16(out, at + 2, len);
        if !self.properties.is_empty() {
            wire::pad8_from(out, at);
            out.extend_from_slice(&self.properties);
        }
    }
}
