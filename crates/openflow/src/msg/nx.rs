//! Nicira extension messages (`OFPT_EXPERIMENTER`, experimenter
//! `0x00002320`) that OVN's ovn-controller sends or expects: the Geneve
//! option map (`NXT_TLV_TABLE_*`), conntrack flushes (`NXT_CT_FLUSH_ZONE`,
//! `NXT_CT_FLUSH`), the packet-in format switch and `NXT_PACKET_IN2` with
//! its continuation, `NXT_RESUME`, and the two session settings
//! `NXT_SET_FLOW_FORMAT` / `NXT_SET_CONTROLLER_ID`.
//!
//! Layouts follow Open vSwitch's `nicira-ext.h`; properties are OpenFlow
//! 1.4-style ([`super::prop`]). Unknown Nicira subtypes stay
//! [`super::Experimenter`] so the switch can answer them with
//! `OFPBRC_BAD_EXP_TYPE`.

use super::prop::{self, Prop};
use crate::error::{e, BadProperty, BadRequest, OfpError};
use crate::oxm;
use crate::wire::{self, Reader};
use nicflow_flow::Match;
use std::net::Ipv6Addr;

/// Nicira's experimenter id.
pub const NX_VENDOR_ID: u32 = 0x0000_2320;

/// `NXT_*` subtypes handled here.
pub mod nxt {
    pub const SET_FLOW_FORMAT: u32 = 12;
    pub const SET_PACKET_IN_FORMAT: u32 = 16;
    pub const SET_CONTROLLER_ID: u32 = 20;
    pub const TLV_TABLE_MOD: u32 = 24;
    pub const TLV_TABLE_REQUEST: u32 = 25;
    pub const TLV_TABLE_REPLY: u32 = 26;
    pub const RESUME: u32 = 28;
    pub const CT_FLUSH_ZONE: u32 = 29;
    pub const PACKET_IN2: u32 = 30;
    pub const CT_FLUSH: u32 = 32;
}

/// `NXPIF_*` packet-in formats (`NXT_SET_PACKET_IN_FORMAT`).
pub mod packet_in_format {
    /// The standard `OFPT_PACKET_IN` of the negotiated version.
    pub const STANDARD: u32 = 0;
    /// `NXT_PACKET_IN` (OpenFlow 1.0 era).
    pub const NXT_PACKET_IN: u32 = 1;
    /// `NXT_PACKET_IN2` (what ovn-controller asks for).
    pub const NXT_PACKET_IN2: u32 = 2;
}

/// `NXFF_*` flow formats (`NXT_SET_FLOW_FORMAT`).
pub mod flow_format {
    pub const OPENFLOW10: u32 = 0;
    pub const NXM: u32 = 2;
}

/// `NXTTMC_*` TLV table commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum TlvTableCommand {
    /// Add mappings (an option or index already mapped is an error).
    Add = 0,
    /// Delete the mappings of these indexes.
    Delete = 1,
    /// Delete every mapping.
    Clear = 2,
}

/// `nx_tlv_map`: Geneve option (class, type, length) ↔ `tun_metadata<index>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TlvMap {
    pub option_class: u16,
    pub option_type: u8,
    /// Option length in bytes (a multiple of 4, at most 124).
    pub option_len: u8,
    /// `tun_metadata<index>`, 0..=63.
    pub index: u16,
}

/// Most `tun_metadata` fields (OVS's `TUN_METADATA_NUM_OPTS`).
pub const TUN_METADATA_NUM_OPTS: u16 = 64;

impl TlvMap {
    fn decode_list(r: &mut Reader<'_>) -> Result<Vec<TlvMap>, OfpError> {
        if !r.remaining().is_multiple_of(8) {
            return Err(e::BRC_BAD_LEN);
        }
        let mut out = Vec::new();
        while !r.is_empty() {
            let m = TlvMap {
                option_class: r.u16()?,
                option_type: r.u8()?,
                option_len: r.u8()?,
                index: r.u16()?,
            };
            r.pad(2)?;
            out.push(m);
        }
        Ok(out)
    }

    fn encode_list(maps: &[TlvMap], out: &mut Vec<u8>) {
        for m in maps {
            wire::put_u16(out, m.option_class);
            wire::put_u8(out, m.option_type);
            wire::put_u8(out, m.option_len);
            wire::put_u16(out, m.index);
            wire::put_zeros(out, 2);
        }
    }
}

/// `NXT_TLV_TABLE_MOD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlvTableMod {
    pub command: TlvTableCommand,
    pub maps: Vec<TlvMap>,
}

/// `NXT_TLV_TABLE_REPLY`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TlvTableReply {
    /// Most option bytes the switch can map in total.
    pub max_option_space: u32,
    /// Most mappings (`tun_metadata` fields).
    pub max_fields: u16,
    pub maps: Vec<TlvMap>,
}

/// `NXT_CT_FLUSH` tuple: each part optional (absent = any). Addresses are
/// IPv6, IPv4 ones mapped (`::ffff:a.b.c.d`), as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CtTuple {
    pub src: Option<Ipv6Addr>,
    pub dst: Option<Ipv6Addr>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub icmp_id: Option<u16>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
}

/// `NXT_CT_TUPLE_*` property types.
mod ct_tuple {
    pub const SRC: u16 = 0;
    pub const DST: u16 = 1;
    pub const SRC_PORT: u16 = 2;
    pub const DST_PORT: u16 = 3;
    pub const ICMP_ID: u16 = 4;
    pub const ICMP_TYPE: u16 = 5;
    pub const ICMP_CODE: u16 = 6;
}

/// `NXT_CT_*` property types of `NXT_CT_FLUSH`.
mod ct_flush_prop {
    pub const ORIG_TUPLE: u16 = 0;
    pub const REPLY_TUPLE: u16 = 1;
    pub const ZONE_ID: u16 = 2;
    pub const MARK: u16 = 3;
    pub const MARK_MASK: u16 = 4;
    pub const LABELS: u16 = 5;
    pub const LABELS_MASK: u16 = 6;
}

fn bpc(c: BadProperty) -> OfpError {
    OfpError::BadProperty(c)
}

/// Set `slot` from a property, refusing a second one of the same type.
fn once<T>(slot: &mut Option<T>, v: T) -> Result<(), OfpError> {
    if slot.is_some() {
        return Err(bpc(BadProperty::DUP_TYPE));
    }
    *slot = Some(v);
    Ok(())
}

impl CtTuple {
    fn decode(b: &[u8]) -> Result<CtTuple, OfpError> {
        let bad = bpc(BadProperty::BAD_LEN);
        let mut t = CtTuple::default();
        for p in prop::read_all(&mut Reader::new(b, bad), bad)? {
            match p.ty {
                ct_tuple::SRC => once(&mut t.src, Ipv6Addr::from(prop::exact::<16>(&p, bad)?))?,
                ct_tuple::DST => once(&mut t.dst, Ipv6Addr::from(prop::exact::<16>(&p, bad)?))?,
                ct_tuple::SRC_PORT => once(&mut t.src_port, prop::get_u16(&p, bad)?)?,
                ct_tuple::DST_PORT => once(&mut t.dst_port, prop::get_u16(&p, bad)?)?,
                ct_tuple::ICMP_ID => once(&mut t.icmp_id, prop::get_u16(&p, bad)?)?,
                ct_tuple::ICMP_TYPE => once(&mut t.icmp_type, prop::get_u8(&p, bad)?)?,
                ct_tuple::ICMP_CODE => once(&mut t.icmp_code, prop::get_u8(&p, bad)?)?,
                _ => return Err(bpc(BadProperty::BAD_TYPE)),
            }
        }
        Ok(t)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        if let Some(a) = self.src {
            prop::put(out, ct_tuple::SRC, &a.octets());
        }
        if let Some(a) = self.dst {
            prop::put(out, ct_tuple::DST, &a.octets());
        }
        // OVS writes either the ICMP fields or the ports; with both set the
        // ports come after, so a round trip keeps its order.
        if let Some(v) = self.icmp_id {
            prop::put_u16(out, ct_tuple::ICMP_ID, v);
        }
        if let Some(v) = self.icmp_type {
            prop::put_u8(out, ct_tuple::ICMP_TYPE, v);
        }
        if let Some(v) = self.icmp_code {
            prop::put_u8(out, ct_tuple::ICMP_CODE, v);
        }
        if let Some(v) = self.src_port {
            prop::put_u16(out, ct_tuple::SRC_PORT, v);
        }
        if let Some(v) = self.dst_port {
            prop::put_u16(out, ct_tuple::DST_PORT, v);
        }
    }
}

/// `NXT_CT_FLUSH`: flush the conntrack entries matching every part given
/// (absent parts match anything; `ip_proto` 0 = any).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CtFlush {
    pub ip_proto: u8,
    pub zone: Option<u16>,
    pub orig: Option<CtTuple>,
    pub reply: Option<CtTuple>,
    pub mark: Option<u32>,
    pub mark_mask: Option<u32>,
    pub labels: Option<u128>,
    pub labels_mask: Option<u128>,
}

impl CtFlush {
    fn decode(r: &mut Reader<'_>) -> Result<CtFlush, OfpError> {
        let ip_proto = r.u8()?;
        r.pad(7)?;
        let bad = bpc(BadProperty::BAD_LEN);
        let mut f = CtFlush {
            ip_proto,
            ..CtFlush::default()
        };
        for p in prop::read_all(r, bad)? {
            match p.ty {
                ct_flush_prop::ORIG_TUPLE => {
                    once(&mut f.orig, CtTuple::decode(prop::nested(&p, bad)?)?)?
                }
                ct_flush_prop::REPLY_TUPLE => {
                    once(&mut f.reply, CtTuple::decode(prop::nested(&p, bad)?)?)?
                }
                ct_flush_prop::ZONE_ID => once(&mut f.zone, prop::get_u16(&p, bad)?)?,
                ct_flush_prop::MARK => once(&mut f.mark, prop::get_u32(&p, bad)?)?,
                ct_flush_prop::MARK_MASK => once(&mut f.mark_mask, prop::get_u32(&p, bad)?)?,
                ct_flush_prop::LABELS => {
                    once(&mut f.labels, u128::from_be_bytes(prop::exact(&p, bad)?))?
                }
                ct_flush_prop::LABELS_MASK => once(
                    &mut f.labels_mask,
                    u128::from_be_bytes(prop::exact(&p, bad)?),
                )?,
                _ => return Err(bpc(BadProperty::BAD_TYPE)),
            }
        }
        Ok(f)
    }

    /// In Open vSwitch's order (`ofp_ct_match_encode`): tuples, zone,
    /// mark, labels.
    fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u8(out, self.ip_proto);
        wire::put_zeros(out, 7);
        for (ty, t) in [
            (ct_flush_prop::ORIG_TUPLE, &self.orig),
            (ct_flush_prop::REPLY_TUPLE, &self.reply),
        ] {
            if let Some(t) = t {
                let at = prop::start_nested(out, ty);
                t.encode(out);
                prop::end(out, at);
            }
        }
        if let Some(z) = self.zone {
            prop::put_u16(out, ct_flush_prop::ZONE_ID, z);
        }
        if let Some(v) = self.mark {
            prop::put_u32(out, ct_flush_prop::MARK, v);
        }
        if let Some(v) = self.mark_mask {
            prop::put_u32(out, ct_flush_prop::MARK_MASK, v);
        }
        if let Some(v) = self.labels {
            prop::put(out, ct_flush_prop::LABELS, &v.to_be_bytes());
        }
        if let Some(v) = self.labels_mask {
            prop::put(out, ct_flush_prop::LABELS_MASK, &v.to_be_bytes());
        }
    }
}

/// `NXPINT_*` property types of `NXT_PACKET_IN2` / `NXT_RESUME`.
pub mod pin_prop {
    pub const PACKET: u16 = 0;
    pub const FULL_LEN: u16 = 1;
    pub const BUFFER_ID: u16 = 2;
    pub const TABLE_ID: u16 = 3;
    pub const COOKIE: u16 = 4;
    pub const REASON: u16 = 5;
    pub const METADATA: u16 = 6;
    pub const USERDATA: u16 = 7;
    pub const CONTINUATION: u16 = 8;
}

/// `NXT_PACKET_IN2` (switch → controller) and `NXT_RESUME` (controller →
/// switch, the same properties). `continuation` is switch-private: the
/// switch writes what it needs to resume the paused pipeline, the
/// controller sends it back unchanged in `NXT_RESUME`, and the switch
/// alone reads it (nicflow decides its own format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketIn2 {
    pub packet: Vec<u8>,
    /// The packet's full length when `packet` is truncated.
    pub full_len: Option<u32>,
    pub buffer_id: Option<u32>,
    pub table_id: Option<u8>,
    /// Absent = `0xffff_ffff_ffff_ffff` (no rule, as OVS omits it).
    pub cookie: Option<u64>,
    /// `OFPR_*`.
    pub reason: Option<u8>,
    /// Pipeline fields (`in_port`, registers, `metadata`, tunnel fields).
    pub metadata: Option<Match>,
    /// The `controller(userdata=...)` bytes of the action that sent it.
    pub userdata: Option<Vec<u8>>,
    /// The nested properties of `NXPINT_CONTINUATION` (after its 4 bytes of
    /// alignment; present when the action was `controller(pause)`). Open
    /// vSwitch's own layout uses `NXCPT_*` properties; a switch may use any
    /// as long as it is a sequence of properties.
    pub continuation: Option<Vec<u8>>,
}

impl PacketIn2 {
    /// A packet-in of `packet` with nothing else set.
    pub fn new(packet: Vec<u8>) -> PacketIn2 {
        PacketIn2 {
            packet,
            full_len: None,
            buffer_id: None,
            table_id: None,
            cookie: None,
            reason: None,
            metadata: None,
            userdata: None,
            continuation: None,
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<PacketIn2, OfpError> {
        let bad = bpc(BadProperty::BAD_LEN);
        let mut packet = None;
        let mut p = PacketIn2::new(Vec::new());
        for Prop { ty, value } in prop::read_all(r, bad)? {
            let pr = Prop { ty, value };
            match ty {
                pin_prop::PACKET => once(&mut packet, value.to_vec())?,
                pin_prop::FULL_LEN => once(&mut p.full_len, prop::get_u32(&pr, bad)?)?,
                pin_prop::BUFFER_ID => once(&mut p.buffer_id, prop::get_u32(&pr, bad)?)?,
                pin_prop::TABLE_ID => once(&mut p.table_id, prop::get_u8(&pr, bad)?)?,
                pin_prop::COOKIE => once(&mut p.cookie, prop::get_u64(&pr, bad)?)?,
                pin_prop::REASON => once(&mut p.reason, prop::get_u8(&pr, bad)?)?,
                pin_prop::METADATA => once(&mut p.metadata, oxm::decode_fields(value)?)?,
                pin_prop::USERDATA => once(&mut p.userdata, value.to_vec())?,
                pin_prop::CONTINUATION => {
                    once(&mut p.continuation, prop::nested(&pr, bad)?.to_vec())?
                }
                // OVS ignores unknown packet-in properties it does not
                // need; so does nicflow, with OpenFlow's "loose" rule for
                // experimenter-range types only.
                t if t >= 0x8000 => {}
                _ => return Err(bpc(BadProperty::BAD_TYPE)),
            }
        }
        p.packet = packet.ok_or(e::brc(BadRequest::BAD_PACKET))?;
        Ok(p)
    }

    /// In Open vSwitch's order (`ofputil_put_packet_in`).
    fn encode(&self, out: &mut Vec<u8>) {
        prop::put(out, pin_prop::PACKET, &self.packet);
        if let Some(v) = self.full_len {
            prop::put_u32(out, pin_prop::FULL_LEN, v);
        }
        if let Some(v) = self.buffer_id {
            prop::put_u32(out, pin_prop::BUFFER_ID, v);
        }
        if let Some(v) = self.table_id {
            prop::put_u8(out, pin_prop::TABLE_ID, v);
        }
        if let Some(v) = self.cookie {
            prop::put_u64(out, pin_prop::COOKIE, v);
        }
        if let Some(v) = self.reason {
            prop::put_u8(out, pin_prop::REASON, v);
        }
        if let Some(m) = &self.metadata {
            let at = prop::start(out, pin_prop::METADATA);
            oxm::encode_fields(m, out);
            prop::end(out, at);
        }
        if let Some(u) = &self.userdata {
            prop::put(out, pin_prop::USERDATA, u);
        }
        if let Some(c) = &self.continuation {
            let at = prop::start_nested(out, pin_prop::CONTINUATION);
            out.extend_from_slice(c);
            prop::end(out, at);
        }
    }
}

/// `NXCPT_*` property types of a continuation (Open vSwitch's
/// `nx_continuation_prop_type`, `lib/ofp-packet.c`).
pub mod cont_prop {
    pub const BRIDGE: u16 = 0x8000;
    pub const STACK: u16 = 0x8001;
    pub const MIRRORS: u16 = 0x8002;
    pub const CONNTRACKED: u16 = 0x8003;
    pub const TABLE_ID: u16 = 0x8004;
    pub const COOKIE: u16 = 0x8005;
    pub const ACTIONS: u16 = 0x8006;
    pub const ACTION_SET: u16 = 0x8007;
    pub const ODP_PORT: u16 = 0x8008;
}

/// The inside of `NXPINT_CONTINUATION` in Open vSwitch's layout, so
/// `ovs-ofctl ofp-print` reads nicflow's continuations too: the bridge,
/// the `push:`/`pop:` stack, and the remaining actions as groups, each
/// run under a table id and cookie (`NXCPT_TABLE_ID`/`NXCPT_COOKIE` are
/// written when they change, both starting at 0, before the group's
/// `NXCPT_ACTIONS`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Continuation {
    pub bridge: Option<[u8; 16]>,
    /// Stack entries, top first (as OVS writes them), each big-endian.
    pub stack: Vec<Vec<u8>>,
    pub mirrors: Option<u32>,
    pub conntracked: bool,
    /// (table id, cookie, actions), in the order they run.
    pub frames: Vec<(u8, u64, Vec<crate::action::OfAction>)>,
    /// `NXCPT_ACTION_SET`: nicflow has no action set and writes none.
    pub action_set: Option<Vec<crate::action::OfAction>>,
    pub odp_port: Option<u32>,
}

impl Continuation {
    /// Decode the nested properties of `NXPINT_CONTINUATION`. An unknown
    /// property is `OFPBPC_BAD_TYPE` (OVS decodes `NXT_RESUME` strictly).
    pub fn decode(bytes: &[u8]) -> Result<Continuation, OfpError> {
        let bad = bpc(BadProperty::BAD_LEN);
        let mut r = Reader::new(bytes, bad);
        let mut c = Continuation::default();
        let (mut table, mut cookie) = (0u8, 0u64);
        for pr in prop::read_all(&mut r, bad)? {
            match pr.ty {
                cont_prop::BRIDGE => once(&mut c.bridge, prop::exact(&pr, bad)?)?,
                cont_prop::STACK => {
                    // OVS's limit: one `mf_subvalue`.
                    if pr.value.len() > 128 {
                        return Err(bad);
                    }
                    c.stack.push(pr.value.to_vec());
                }
                cont_prop::MIRRORS => once(&mut c.mirrors, prop::get_u32(&pr, bad)?)?,
                cont_prop::CONNTRACKED => c.conntracked = true,
                cont_prop::TABLE_ID => table = prop::get_u8(&pr, bad)?,
                cont_prop::COOKIE => cookie = prop::get_u64(&pr, bad)?,
                cont_prop::ACTIONS => {
                    let acts = crate::action::decode_actions(prop::nested(&pr, bad)?)?;
                    c.frames.push((table, cookie, acts));
                }
                cont_prop::ACTION_SET => {
                    let acts = crate::action::decode_actions(prop::nested(&pr, bad)?)?;
                    once(&mut c.action_set, acts)?
                }
                cont_prop::ODP_PORT => once(&mut c.odp_port, prop::get_u32(&pr, bad)?)?,
                _ => return Err(bpc(BadProperty::BAD_TYPE)),
            }
        }
        Ok(c)
    }

    /// Encode as the nested properties of `NXPINT_CONTINUATION`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(b) = &self.bridge {
            prop::put(&mut out, cont_prop::BRIDGE, b);
        }
        for v in &self.stack {
            prop::put(&mut out, cont_prop::STACK, v);
        }
        if let Some(m) = self.mirrors {
            prop::put_u32(&mut out, cont_prop::MIRRORS, m);
        }
        if self.conntracked {
            prop::put(&mut out, cont_prop::CONNTRACKED, &[]);
        }
        let (mut table, mut cookie) = (0u8, 0u64);
        for (t, c, acts) in &self.frames {
            if *t != table {
                prop::put_u8(&mut out, cont_prop::TABLE_ID, *t);
                table = *t;
            }
            if *c != cookie {
                prop::put_u64(&mut out, cont_prop::COOKIE, *c);
                cookie = *c;
            }
            let at = prop::start_nested(&mut out, cont_prop::ACTIONS);
            crate::action::encode_actions(acts, &mut out);
            prop::end(&mut out, at);
        }
        if let Some(acts) = &self.action_set {
            let at = prop::start_nested(&mut out, cont_prop::ACTION_SET);
            crate::action::encode_actions(acts, &mut out);
            prop::end(&mut out, at);
        }
        if let Some(p) = self.odp_port {
            prop::put_u32(&mut out, cont_prop::ODP_PORT, p);
        }
        out
    }
}

/// A Nicira extension message nicflow understands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NxMessage {
    /// `NXFF_*` ([`flow_format`]).
    SetFlowFormat(u32),
    /// `NXPIF_*` ([`packet_in_format`]).
    SetPacketInFormat(u32),
    SetControllerId(u16),
    TlvTableMod(TlvTableMod),
    TlvTableRequest,
    TlvTableReply(TlvTableReply),
    /// Flush every conntrack entry of a zone.
    CtFlushZone(u16),
    CtFlush(CtFlush),
    PacketIn2(PacketIn2),
    Resume(PacketIn2),
}

impl NxMessage {
    /// The `NXT_*` subtype.
    pub fn subtype(&self) -> u32 {
        use NxMessage as N;
        match self {
            N::SetFlowFormat(_) => nxt::SET_FLOW_FORMAT,
            N::SetPacketInFormat(_) => nxt::SET_PACKET_IN_FORMAT,
            N::SetControllerId(_) => nxt::SET_CONTROLLER_ID,
            N::TlvTableMod(_) => nxt::TLV_TABLE_MOD,
            N::TlvTableRequest => nxt::TLV_TABLE_REQUEST,
            N::TlvTableReply(_) => nxt::TLV_TABLE_REPLY,
            N::CtFlushZone(_) => nxt::CT_FLUSH_ZONE,
            N::CtFlush(_) => nxt::CT_FLUSH,
            N::PacketIn2(_) => nxt::PACKET_IN2,
            N::Resume(_) => nxt::RESUME,
        }
    }

    /// Whether `subtype` is one decoded here.
    pub fn known(subtype: u32) -> bool {
        matches!(
            subtype,
            nxt::SET_FLOW_FORMAT
                | nxt::SET_PACKET_IN_FORMAT
                | nxt::SET_CONTROLLER_ID
                | nxt::TLV_TABLE_MOD
                | nxt::TLV_TABLE_REQUEST
                | nxt::TLV_TABLE_REPLY
                | nxt::CT_FLUSH_ZONE
                | nxt::CT_FLUSH
                | nxt::PACKET_IN2
                | nxt::RESUME
        )
    }

    /// Decode the body after the experimenter id and subtype.
    pub(super) fn decode(subtype: u32, r: &mut Reader<'_>) -> Result<NxMessage, OfpError> {
        use NxMessage as N;
        Ok(match subtype {
            nxt::SET_FLOW_FORMAT => N::SetFlowFormat(r.u32()?),
            nxt::SET_PACKET_IN_FORMAT => N::SetPacketInFormat(r.u32()?),
            nxt::SET_CONTROLLER_ID => {
                r.pad(6)?;
                N::SetControllerId(r.u16()?)
            }
            nxt::TLV_TABLE_MOD => {
                let command = match r.u16()? {
                    0 => TlvTableCommand::Add,
                    1 => TlvTableCommand::Delete,
                    2 => TlvTableCommand::Clear,
                    _ => return Err(e::brc(BadRequest::BAD_EXP_TYPE)),
                };
                r.pad(6)?;
                N::TlvTableMod(TlvTableMod {
                    command,
                    maps: TlvMap::decode_list(r)?,
                })
            }
            nxt::TLV_TABLE_REQUEST => N::TlvTableRequest,
            nxt::TLV_TABLE_REPLY => {
                let max_option_space = r.u32()?;
                let max_fields = r.u16()?;
                r.pad(10)?;
                N::TlvTableReply(TlvTableReply {
                    max_option_space,
                    max_fields,
                    maps: TlvMap::decode_list(r)?,
                })
            }
            nxt::CT_FLUSH_ZONE => {
                r.pad(6)?;
                N::CtFlushZone(r.u16()?)
            }
            nxt::CT_FLUSH => N::CtFlush(CtFlush::decode(r)?),
            nxt::PACKET_IN2 => N::PacketIn2(PacketIn2::decode(r)?),
            nxt::RESUME => N::Resume(PacketIn2::decode(r)?),
            _ => return Err(e::brc(BadRequest::BAD_EXP_TYPE)),
        })
    }

    /// Encode the experimenter id, subtype and body.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        use NxMessage as N;
        wire::put_u32(out, NX_VENDOR_ID);
        wire::put_u32(out, self.subtype());
        match self {
            N::SetFlowFormat(v) | N::SetPacketInFormat(v) => wire::put_u32(out, *v),
            N::SetControllerId(v) | N::CtFlushZone(v) => {
                wire::put_zeros(out, 6);
                wire::put_u16(out, *v);
            }
            N::TlvTableMod(m) => {
                wire::put_u16(out, m.command as u16);
                wire::put_zeros(out, 6);
                TlvMap::encode_list(&m.maps, out);
            }
            N::TlvTableRequest => {}
            N::TlvTableReply(m) => {
                wire::put_u32(out, m.max_option_space);
                wire::put_u16(out, m.max_fields);
                wire::put_zeros(out, 10);
                TlvMap::encode_list(&m.maps, out);
            }
            N::CtFlush(f) => f.encode(out),
            N::PacketIn2(p) | N::Resume(p) => p.encode(out),
        }
    }
}
