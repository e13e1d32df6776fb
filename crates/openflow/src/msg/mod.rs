//! OpenFlow 1.3 and 1.5 messages: the header, framing, and every message
//! nicflow speaks as Rust values.
//!
//! [`decode`] takes the front of a byte stream and returns one message and
//! how many bytes it used, or tells "need more bytes"
//! ([`DecodeError::Incomplete`]) apart from "this message is wrong"
//! ([`DecodeError::Malformed`], which carries the `OFPT_ERROR` to send back
//! and how many bytes to skip). [`encode`] appends one message.
//! `decode(encode(m)) == m` for every message, and for messages in
//! canonical form (as Open vSwitch writes them) `encode(decode(b)) == b`.
//!
//! Every message is decoded in OpenFlow 1.3 (0x04) and 1.5 (0x06): the
//! header's version picks the layout where the two differ (`FLOW_MOD`'s
//! importance, 1.5 `GROUP_MOD` with bucket ids and properties, 1.5
//! `PACKET_OUT` with a match, 1.4+ ports with properties, 1.5
//! `FLOW_REMOVED` with OXS statistics, 1.4+ asynchronous configuration),
//! and [`encode_as`] writes a message in a given version. Bundles
//! ([`bundle`]) and Nicira extension messages ([`nx`]) are decoded in both.
//! Only `HELLO` and `ERROR` are accepted in other OpenFlow versions — enough
//! to negotiate ([`hello::negotiate_with`]) and to refuse an OpenFlow
//! 1.0-only peer with `OFPET_HELLO_FAILED` / `OFPHFC_INCOMPATIBLE`;
//! anything else in another version (1.4 included) is `OFPBRC_BAD_VERSION`.

pub mod basic;
pub mod bundle;
pub mod flow;
pub mod group;
pub mod hello;
pub mod meter;
pub mod multipart;
pub mod nx;
pub mod port;
pub(crate) mod prop;

pub use basic::{
    AsyncConfig, ErrorMsg, Experimenter, Role, SwitchConfig, SwitchFeatures, TableMod,
};
pub use bundle::{BundleAdd, BundleControl, BundleCtrlType};
pub use flow::{FlowMod, FlowModCommand, FlowRemoved, PacketIn, PacketOut};
pub use group::{Bucket, GroupMod};
pub use hello::Hello;
pub use meter::{MeterBand, MeterMod};
pub use multipart::{MultipartReply, MultipartRequest};
pub use nx::NxMessage;
pub use port::{Port, PortMod, PortStatus};

use crate::error::{e, BadRequest, DecodeError, Malformed, OfpError};
use crate::wire::{self, Reader};

pub const OFP10_VERSION: u8 = 0x01;
pub const OFP13_VERSION: u8 = 0x04;
pub const OFP14_VERSION: u8 = 0x05;
pub const OFP15_VERSION: u8 = 0x06;
/// The versions nicflow speaks, lowest first.
pub const SUPPORTED_VERSIONS: [u8; 2] = [OFP13_VERSION, OFP15_VERSION];
/// Size of `ofp_header`.
pub const HEADER_LEN: usize = 8;

/// `OFPT_*` message types of OpenFlow 1.3.
pub mod ofpt {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
    /// OpenFlow 1.4+.
    pub const BUNDLE_CONTROL: u8 = 33;
    /// OpenFlow 1.4+.
    pub const BUNDLE_ADD_MESSAGE: u8 = 34;
}

/// One OpenFlow message (without its header's version, length and xid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Hello(Hello),
    Error(ErrorMsg),
    EchoRequest(Vec<u8>),
    EchoReply(Vec<u8>),
    Experimenter(Experimenter),
    FeaturesRequest,
    FeaturesReply(SwitchFeatures),
    GetConfigRequest,
    GetConfigReply(SwitchConfig),
    SetConfig(SwitchConfig),
    PacketIn(PacketIn),
    FlowRemoved(FlowRemoved),
    PortStatus(PortStatus),
    PacketOut(PacketOut),
    FlowMod(FlowMod),
    GroupMod(GroupMod),
    PortMod(PortMod),
    TableMod(TableMod),
    MultipartRequest(MultipartRequest),
    MultipartReply(MultipartReply),
    BarrierRequest,
    BarrierReply,
    RoleRequest(Role),
    RoleReply(Role),
    GetAsyncRequest,
    GetAsyncReply(AsyncConfig),
    SetAsync(AsyncConfig),
    MeterMod(MeterMod),
    /// OpenFlow 1.4+ only.
    BundleControl(BundleControl),
    /// OpenFlow 1.4+ only.
    BundleAdd(BundleAdd),
    /// A Nicira extension message (`OFPT_EXPERIMENTER`, experimenter
    /// 0x2320) with a subtype nicflow knows; other experimenter messages
    /// stay [`Message::Experimenter`].
    Nx(NxMessage),
}

impl Message {
    /// The `OFPT_*` type.
    pub fn msg_type(&self) -> u8 {
        use Message as M;
        match self {
            M::Hello(_) => ofpt::HELLO,
            M::Error(_) => ofpt::ERROR,
            M::EchoRequest(_) => ofpt::ECHO_REQUEST,
            M::EchoReply(_) => ofpt::ECHO_REPLY,
            M::Experimenter(_) => ofpt::EXPERIMENTER,
            M::FeaturesRequest => ofpt::FEATURES_REQUEST,
            M::FeaturesReply(_) => ofpt::FEATURES_REPLY,
            M::GetConfigRequest => ofpt::GET_CONFIG_REQUEST,
            M::GetConfigReply(_) => ofpt::GET_CONFIG_REPLY,
            M::SetConfig(_) => ofpt::SET_CONFIG,
            M::PacketIn(_) => ofpt::PACKET_IN,
            M::FlowRemoved(_) => ofpt::FLOW_REMOVED,
            M::PortStatus(_) => ofpt::PORT_STATUS,
            M::PacketOut(_) => ofpt::PACKET_OUT,
            M::FlowMod(_) => ofpt::FLOW_MOD,
            M::GroupMod(_) => ofpt::GROUP_MOD,
            M::PortMod(_) => ofpt::PORT_MOD,
            M::TableMod(_) => ofpt::TABLE_MOD,
            M::MultipartRequest(_) => ofpt::MULTIPART_REQUEST,
            M::MultipartReply(_) => ofpt::MULTIPART_REPLY,
            M::BarrierRequest => ofpt::BARRIER_REQUEST,
            M::BarrierReply => ofpt::BARRIER_REPLY,
            M::RoleRequest(_) => ofpt::ROLE_REQUEST,
            M::RoleReply(_) => ofpt::ROLE_REPLY,
            M::GetAsyncRequest => ofpt::GET_ASYNC_REQUEST,
            M::GetAsyncReply(_) => ofpt::GET_ASYNC_REPLY,
            M::SetAsync(_) => ofpt::SET_ASYNC,
            M::MeterMod(_) => ofpt::METER_MOD,
            M::BundleControl(_) => ofpt::BUNDLE_CONTROL,
            M::BundleAdd(_) => ofpt::BUNDLE_ADD_MESSAGE,
            M::Nx(_) => ofpt::EXPERIMENTER,
        }
    }

    /// The header version [`encode`] sends this message with: 1.3, except
    /// `HELLO` and `ERROR`, which carry their own (to talk to other
    /// versions), and bundles, which exist from 1.4 on (1.5).
    pub fn version(&self) -> u8 {
        match self {
            Message::Hello(h) => h.version,
            Message::Error(e) => e.version,
            Message::BundleControl(_) | Message::BundleAdd(_) => OFP15_VERSION,
            _ => OFP13_VERSION,
        }
    }
}

/// A decoded message with its header fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub version: u8,
    pub xid: u32,
    pub message: Message,
}

/// The message did not fit in 16 bits of length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("OpenFlow message of {len} bytes exceeds 65535 (split multipart replies)")]
pub struct TooLong {
    pub len: usize,
}

/// Decode the message at the front of `buf`: the message and the number of
/// bytes it used.
pub fn decode(buf: &[u8]) -> Result<(Decoded, usize), DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::Incomplete {
            needed: HEADER_LEN - buf.len(),
        });
    }
    let version = buf[0];
    let msg_type = buf[1];
    let length = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
    let xid = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let malformed = |error: OfpError, reason: String, skip: Option<usize>| {
        DecodeError::Malformed(Box::new(Malformed {
            version,
            msg_type,
            xid,
            error,
            reason,
            skip,
            data: buf[..buf.len().min(length.max(HEADER_LEN)).min(64)].to_vec(),
        }))
    };
    if length < HEADER_LEN {
        return Err(malformed(
            e::BRC_BAD_LEN,
            format!("header length {length} is shorter than the header"),
            None,
        ));
    }
    if buf.len() < length {
        return Err(DecodeError::Incomplete {
            needed: length - buf.len(),
        });
    }
    let body = &buf[HEADER_LEN..length];
    match decode_body(version, xid, msg_type, body) {
        Ok(message) => Ok((
            Decoded {
                version,
                xid,
                message,
            },
            length,
        )),
        Err(err) => Err(malformed(
            err,
            format!("cannot decode message type {msg_type}"),
            Some(length),
        )),
    }
}

pub(crate) fn decode_body(
    version: u8,
    xid: u32,
    msg_type: u8,
    body: &[u8],
) -> Result<Message, OfpError> {
    let mut r = Reader::new(body, e::BRC_BAD_LEN);
    let v = version;
    // HELLO and ERROR look alike in every version; nothing else does.
    if !SUPPORTED_VERSIONS.contains(&version) && msg_type != ofpt::HELLO && msg_type != ofpt::ERROR
    {
        return Err(e::brc(BadRequest::BAD_VERSION));
    }
    let empty = |r: &Reader<'_>, m: Message| {
        if r.is_empty() {
            Ok(m)
        } else {
            Err(e::BRC_BAD_LEN)
        }
    };
    let msg = match msg_type {
        ofpt::HELLO => Message::Hello(Hello {
            version,
            body: r.rest().to_vec(),
        }),
        ofpt::ERROR => Message::Error(ErrorMsg::decode(version, &mut r)?),
        ofpt::ECHO_REQUEST => Message::EchoRequest(r.rest().to_vec()),
        ofpt::ECHO_REPLY => Message::EchoReply(r.rest().to_vec()),
        ofpt::EXPERIMENTER => {
            let vendor = r.u32()?;
            let subtype = r.u32()?;
            if vendor == nx::NX_VENDOR_ID && NxMessage::known(subtype) {
                Message::Nx(NxMessage::decode(subtype, &mut r)?)
            } else {
                Message::Experimenter(Experimenter {
                    experimenter: vendor,
                    exp_type: subtype,
                    data: r.rest().to_vec(),
                })
            }
        }
        ofpt::FEATURES_REQUEST => empty(&r, Message::FeaturesRequest)?,
        ofpt::FEATURES_REPLY => Message::FeaturesReply(SwitchFeatures::decode(&mut r)?),
        ofpt::GET_CONFIG_REQUEST => empty(&r, Message::GetConfigRequest)?,
        ofpt::GET_CONFIG_REPLY => Message::GetConfigReply(SwitchConfig::decode(&mut r)?),
        ofpt::SET_CONFIG => Message::SetConfig(SwitchConfig::decode(&mut r)?),
        ofpt::PACKET_IN => Message::PacketIn(PacketIn::decode(&mut r)?),
        ofpt::FLOW_REMOVED => Message::FlowRemoved(FlowRemoved::decode(v, &mut r)?),
        ofpt::PORT_STATUS => Message::PortStatus(PortStatus::decode(v, &mut r)?),
        ofpt::PACKET_OUT => Message::PacketOut(PacketOut::decode(v, &mut r)?),
        ofpt::FLOW_MOD => Message::FlowMod(FlowMod::decode(v, &mut r)?),
        ofpt::GROUP_MOD => Message::GroupMod(GroupMod::decode(v, &mut r)?),
        ofpt::PORT_MOD => Message::PortMod(PortMod::decode(v, &mut r)?),
        ofpt::TABLE_MOD => Message::TableMod(TableMod::decode(v, &mut r)?),
        ofpt::MULTIPART_REQUEST => Message::MultipartRequest(MultipartRequest::decode(v, &mut r)?),
        ofpt::MULTIPART_REPLY => Message::MultipartReply(MultipartReply::decode(v, &mut r)?),
        ofpt::BARRIER_REQUEST => empty(&r, Message::BarrierRequest)?,
        ofpt::BARRIER_REPLY => empty(&r, Message::BarrierReply)?,
        ofpt::ROLE_REQUEST => Message::RoleRequest(Role::decode(&mut r)?),
        ofpt::ROLE_REPLY => Message::RoleReply(Role::decode(&mut r)?),
        ofpt::GET_ASYNC_REQUEST => empty(&r, Message::GetAsyncRequest)?,
        ofpt::GET_ASYNC_REPLY => Message::GetAsyncReply(AsyncConfig::decode(v, &mut r)?),
        ofpt::SET_ASYNC => Message::SetAsync(AsyncConfig::decode(v, &mut r)?),
        ofpt::METER_MOD => Message::MeterMod(MeterMod::decode(&mut r)?),
        ofpt::BUNDLE_CONTROL if v >= OFP14_VERSION => {
            Message::BundleControl(BundleControl::decode(&mut r)?)
        }
        ofpt::BUNDLE_ADD_MESSAGE if v >= OFP14_VERSION => {
            Message::BundleAdd(BundleAdd::decode(v, xid, &mut r)?)
        }
        _ => return Err(e::brc(BadRequest::BAD_TYPE)),
    };
    // Fixed-size messages must be exactly their size.
    if !r.is_empty() {
        return Err(e::BRC_BAD_LEN);
    }
    Ok(msg)
}

/// Append `msg` with transaction id `xid` to `out`, in the version
/// [`Message::version`] says (1.3 for most). On error `out` is left as it
/// was.
pub fn encode(msg: &Message, xid: u32, out: &mut Vec<u8>) -> Result<(), TooLong> {
    encode_as(msg, msg.version(), xid, out)
}

/// Append `msg` in OpenFlow `version` (1.3 or 1.5: the one negotiated with
/// the peer); `HELLO` and `ERROR` keep their own version. On error `out` is
/// left as it was.
pub fn encode_as(msg: &Message, version: u8, xid: u32, out: &mut Vec<u8>) -> Result<(), TooLong> {
    let version = match msg {
        Message::Hello(_) | Message::Error(_) => msg.version(),
        _ => version,
    };
    let start = out.len();
    wire::put_u8(out, version);
    wire::put_u8(out, msg.msg_type());
    wire::put_u16(out, 0);
    wire::put_u32(out, xid);
    encode_body(version, xid, msg, out);
    let len = out.len() - start;
    if len > usize::from(u16::MAX) {
        out.truncate(start);
        return Err(TooLong { len });
    }
    wire::patch_u16(out, start + 2, len as u16);
    Ok(())
}

/// [`encode_as`] into a new buffer.
pub fn encode_to_vec_as(msg: &Message, version: u8, xid: u32) -> Result<Vec<u8>, TooLong> {
    let mut v = Vec::new();
    encode_as(msg, version, xid, &mut v)?;
    Ok(v)
}

/// [`encode`] into a new buffer.
pub fn encode_to_vec(msg: &Message, xid: u32) -> Result<Vec<u8>, TooLong> {
    let mut v = Vec::new();
    encode(msg, xid, &mut v)?;
    Ok(v)
}

pub(crate) fn encode_body(v: u8, xid: u32, msg: &Message, out: &mut Vec<u8>) {
    use Message as M;
    match msg {
        M::Hello(h) => out.extend_from_slice(&h.body),
        M::Error(e) => e.encode(out),
        M::EchoRequest(d) | M::EchoReply(d) => out.extend_from_slice(d),
        M::Experimenter(x) => x.encode(out),
        M::FeaturesRequest
        | M::GetConfigRequest
        | M::BarrierRequest
        | M::BarrierReply
        | M::GetAsyncRequest => {}
        M::FeaturesReply(f) => f.encode(out),
        M::GetConfigReply(c) | M::SetConfig(c) => c.encode(out),
        M::PacketIn(p) => p.encode(out),
        M::FlowRemoved(f) => f.encode(v, out),
        M::PortStatus(p) => p.encode(v, out),
        M::PacketOut(p) => p.encode(v, out),
        M::FlowMod(f) => f.encode(v, out),
        M::GroupMod(g) => g.encode(v, out),
        M::PortMod(p) => p.encode(v, out),
        M::TableMod(t) => t.encode(v, out),
        M::MultipartRequest(m) => m.encode(v, out),
        M::MultipartReply(m) => m.encode(v, out),
        M::RoleRequest(r) | M::RoleReply(r) => r.encode(out),
        M::GetAsyncReply(a) | M::SetAsync(a) => a.encode(v, out),
        M::MeterMod(m) => m.encode(out),
        M::BundleControl(b) => b.encode(out),
        M::BundleAdd(b) => b.encode(v, xid, out),
        M::Nx(n) => n.encode(out),
    }
}

/// Lives beside [`Message`] rather than in [`crate::error`], so the error
/// types stay below the messages that carry them.
impl Malformed {
    /// The `OFPT_ERROR` message answering this one (same xid, the header's
    /// version if it is a known OpenFlow version, otherwise 1.3).
    pub fn reply(&self) -> (Message, u32) {
        let version = if (1..=6).contains(&self.version) {
            self.version
        } else {
            OFP13_VERSION
        };
        (
            Message::Error(ErrorMsg {
                version,
                error: self.error,
                data: self.data.clone(),
            }),
            self.xid,
        )
    }
}
