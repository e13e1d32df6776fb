//! OpenFlow requests carried out on a bridge, and the replies.
//!
//! Each handler turns a decoded message into [`Bridge`] calls (the same
//! ones the CLI verbs make) and queues the answer on the session: a reply,
//! or an `OFPT_ERROR` with the type and code OpenFlow 1.3 (as Open vSwitch
//! reads it) gives for the refusal. Nothing here panics on peer input.

use super::session::Session;
use crate::bridge::Bridge;
use crate::ofproto::flow_mod::{self, FlowModCommand, FlowModError, FlowSelector};
use crate::ofproto::group::GroupError;
use crate::ofproto::meter::MeterError;
use crate::ofproto::OfprotoError;
use nicflow_flow::{ofp, Action, Field, Match};
use nicflow_ofctl::{GroupSpec, GroupType};
use nicflow_openflow::action::convert;
use nicflow_openflow::action::OfAction;
use nicflow_openflow::error::{
    BadAction, BadInstruction, BadRequest, FlowModFailed, GroupModFailed, MeterModFailed,
    PortModFailed, TableFeaturesFailed, TableModFailed,
};
use nicflow_openflow::msg::basic::capabilities;
use nicflow_openflow::msg::flow::{FlowModCommand as WireCmd, ANY, NO_BUFFER};
use nicflow_openflow::msg::group::{command as gcmd, group_type, OFPG_ALL};
use nicflow_openflow::msg::multipart::{
    AggregateStats, Desc, FlowStats, FlowStatsRequest, GroupDesc, GroupFeatures, GroupStats,
    MeterConfig, MeterFeatures, MeterStats, MultipartReply, PortStats, ReplyBody, RequestBody,
    TableFeatures, TableStats, MORE,
};
use nicflow_openflow::msg::{
    self, Bucket, Decoded, Message, NxMessage, Port, SwitchConfig, SwitchFeatures,
};
use nicflow_openflow::OfpError;
use std::time::Instant;

/// Tables nicflow has (0..=254).
pub const N_TABLES: u8 = crate::ofproto::N_TABLES as u8;
/// Room for a multipart reply's body in one message.
const MP_ROOM: usize = 65535 - 16;

/// What a handled message changed, for the caller.
#[derive(Default, Debug)]
pub struct Effects {
    /// Rules or groups changed: the config file is due.
    pub tables_changed: bool,
}

/// The datapath id of a bridge: stable for its name (OVS derives it from
/// a MAC; nicflow has none to derive from).
pub fn datapath_id(bridge: &str) -> u64 {
    // FNV-1a, 48 bits, like a MAC.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bridge.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h & 0x0000_ffff_ffff_ffff
}

pub(super) fn err_data(d: &Decoded) -> Vec<u8> {
    // The codec kept no raw bytes; re-encode the start of the request in
    // its version.
    let mut v = msg::encode_to_vec_as(&d.message, d.version, d.xid).unwrap_or_default();
    v.truncate(64);
    v
}

fn is_slave_refused(m: &Message) -> bool {
    matches!(
        m,
        Message::FlowMod(_)
            | Message::GroupMod(_)
            | Message::PortMod(_)
            | Message::TableMod(_)
            | Message::PacketOut(_)
            | Message::MeterMod(_)
            | Message::BundleControl(_)
            | Message::BundleAdd(_)
            | Message::Nx(NxMessage::CtFlushZone(_) | NxMessage::CtFlush(_))
    )
}

/// Handle one message from a negotiated connection (roles are dealt with
/// by the caller, which sees every connection of the bridge).
pub fn handle(s: &mut Session, br: &mut Bridge, d: Decoded, now: Instant) -> Effects {
    let mut fx = Effects::default();
    let xid = d.xid;
    if s.role == nicflow_openflow::msg::basic::role::SLAVE && is_slave_refused(&d.message) {
        s.send_error(
            OfpError::BadRequest(BadRequest::IS_SLAVE),
            xid,
            &err_data(&d),
        );
        return fx;
    }
    let result: Result<(), OfpError> = match &d.message {
        Message::FeaturesRequest => {
            s.send(
                &Message::FeaturesReply(SwitchFeatures {
                    datapath_id: datapath_id(&br.name),
                    n_buffers: 0,
                    n_tables: N_TABLES,
                    auxiliary_id: 0,
                    capabilities: capabilities::FLOW_STATS
                        | capabilities::TABLE_STATS
                        | capabilities::PORT_STATS
                        | capabilities::GROUP_STATS,
                    reserved: 0,
                }),
                xid,
            );
            Ok(())
        }
        Message::GetConfigRequest => {
            s.send(
                &Message::GetConfigReply(SwitchConfig {
                    flags: s.config_flags,
                    miss_send_len: s.miss_send_len,
                }),
                xid,
            );
            Ok(())
        }
        Message::SetConfig(c) => {
            // Fragments are always handled normally (OFPC_FRAG_NORMAL);
            // other flags are remembered and echoed.
            s.config_flags = c.flags;
            s.miss_send_len = c.miss_send_len;
            Ok(())
        }
        Message::BarrierRequest => {
            // Every request before it is done: they run synchronously.
            s.send(&Message::BarrierReply, xid);
            Ok(())
        }
        Message::GetAsyncRequest => {
            s.send(&Message::GetAsyncReply(s.async_cfg), xid);
            Ok(())
        }
        Message::SetAsync(a) => {
            s.async_cfg = *a;
            Ok(())
        }
        Message::FlowMod(fm) => flow_mod(br, fm, now).map(|changed| {
            fx.tables_changed = changed;
        }),
        Message::GroupMod(gm) => group_mod(br, gm, now).map(|_| {
            fx.tables_changed = true;
        }),
        Message::PacketOut(po) => packet_out(br, po, now),
        Message::MultipartRequest(req) => multipart(s, br, &req.body, xid, now),
        Message::PortMod(p) => port_mod(br, p),
        Message::TableMod(t) => {
            // Every table id exists (0..=254, 255 = all).
            if t.config != 0 {
                Err(OfpError::TableModFailed(TableModFailed::BAD_CONFIG))
            } else {
                Ok(())
            }
        }
        Message::MeterMod(mm) => meter_mod(br, mm, now).map(|_| {
            fx.tables_changed = true;
        }),
        Message::Experimenter(_) => Err(OfpError::BadRequest(BadRequest::BAD_EXPERIMENTER)),
        Message::Nx(NxMessage::CtFlushZone(zone)) => {
            let f = nicflow_conntrack::FlushFilter {
                zone: Some(*zone),
                ..Default::default()
            };
            let n = br.flush_conntrack(&f);
            tracing::debug!(bridge = %br.name, zone, flushed = n, "NXT_CT_FLUSH_ZONE");
            Ok(())
        }
        Message::Nx(NxMessage::CtFlush(f)) => ct_flush(f).map(|f| {
            let n = br.flush_conntrack(&f);
            tracing::debug!(bridge = %br.name, flushed = n, "NXT_CT_FLUSH");
        }),
        Message::Nx(NxMessage::SetPacketInFormat(f)) => {
            use nicflow_openflow::msg::nx::packet_in_format as pif;
            match *f {
                pif::STANDARD | pif::NXT_PACKET_IN2 => {
                    s.packet_in_format = *f;
                    Ok(())
                }
                // NXT_PACKET_IN (the OpenFlow 1.0-era format) is not
                // encoded by nicflow; unknown formats as OVS refuses them.
                _ => Err(OfpError::BadRequest(BadRequest::EPERM)),
            }
        }
        Message::Nx(NxMessage::SetControllerId(id)) => {
            s.controller_id = *id;
            Ok(())
        }
        Message::Nx(NxMessage::SetFlowFormat(f)) => {
            use nicflow_openflow::msg::nx::flow_format;
            // OXM/NXM matches are what 1.3 and 1.5 carry anyway.
            match *f {
                flow_format::OPENFLOW10 | flow_format::NXM => Ok(()),
                _ => Err(OfpError::BadRequest(BadRequest::EPERM)),
            }
        }
        Message::Nx(NxMessage::Resume(pin)) => {
            use super::continuation::{self, Refused};
            match continuation::decode(&br.name, pin.continuation.as_deref(), &pin.packet) {
                Ok(paused) => {
                    let md = pin.metadata.unwrap_or_else(Match::catchall);
                    let in_port = Field::InPort.read(md.key()) as u32;
                    let mut md = pipeline_only(&md);
                    md.set(Field::InPort, in_port.into(), Field::InPort.full_mask());
                    if !packet_out_port_ok(br, in_port) {
                        Err(OfpError::BadRequest(BadRequest::BAD_PORT))
                    } else if br.resume(&md, &pin.packet, &paused, now) {
                        Ok(())
                    } else {
                        Err(OfpError::BadRequest(BadRequest::BAD_PACKET))
                    }
                }
                Err(Refused::Error(e)) => Err(e),
                Err(Refused::Stale) => {
                    s.send_error(
                        super::tlv::nx_error(continuation::NXR_STALE),
                        xid,
                        &super::tlv::nx_error_data(&err_data(&d)),
                    );
                    Ok(())
                }
            }
        }
        // Decoded by the codec (issue 30), not handled by the switch yet.
        Message::Nx(_) => Err(OfpError::BadRequest(BadRequest::BAD_EXP_TYPE)),
        Message::BundleControl(bc) => super::bundle::control(s, br, bc, xid, now).map(|c| {
            fx.tables_changed = c;
        }),
        Message::BundleAdd(ba) => super::bundle::add(s, ba, d.version, xid, now),
        // Replies and switch-to-controller messages make no sense here.
        Message::FeaturesReply(_)
        | Message::GetConfigReply(_)
        | Message::PacketIn(_)
        | Message::FlowRemoved(_)
        | Message::PortStatus(_)
        | Message::MultipartReply(_)
        | Message::BarrierReply
        | Message::RoleReply(_)
        | Message::GetAsyncReply(_) => Err(OfpError::BadRequest(BadRequest::BAD_TYPE)),
        // Handled by the session or the manager.
        Message::Hello(_)
        | Message::Error(_)
        | Message::EchoRequest(_)
        | Message::EchoReply(_)
        | Message::RoleRequest(_) => Ok(()),
    };
    if let Err(e) = result {
        s.send_error(e, xid, &err_data(&d));
    }
    fx
}

fn flow_mod_error(e: FlowModError) -> OfpError {
    match e {
        FlowModError::Overlap(_) => OfpError::FlowModFailed(FlowModFailed::OVERLAP),
        FlowModError::AddToAllTables => OfpError::FlowModFailed(FlowModFailed::BAD_TABLE_ID),
        FlowModError::Ofproto(o) => ofproto_error(o),
    }
}

fn ofproto_error(o: OfprotoError) -> OfpError {
    match o {
        OfprotoError::BadTable(_) => OfpError::FlowModFailed(FlowModFailed::BAD_TABLE_ID),
        OfprotoError::BadGoto { .. } => OfpError::BadInstruction(BadInstruction::BAD_TABLE_ID),
        OfprotoError::BadOutGroup(_) => OfpError::BadAction(BadAction::BAD_OUT_GROUP),
        OfprotoError::UnknownMeter(_) => OfpError::MeterModFailed(MeterModFailed::UNKNOWN_METER),
        OfprotoError::Group(g) => group_error(g),
    }
}

fn meter_error(m: MeterError) -> OfpError {
    OfpError::MeterModFailed(match m {
        MeterError::Exists(_) => MeterModFailed::METER_EXISTS,
        MeterError::Unknown(_) => MeterModFailed::UNKNOWN_METER,
        MeterError::TooManyBands(..) => MeterModFailed::OUT_OF_BANDS,
        MeterError::OutOfMeters(_) => MeterModFailed::OUT_OF_METERS,
    })
}

/// `OFPT_METER_MOD` on the bridge's meters (`ofproto::meter`).
fn meter_mod(br: &mut Bridge, mm: &msg::MeterMod, now: Instant) -> Result<(), OfpError> {
    use nicflow_ofctl::meter::{BandType, MeterBand, MeterSpec, OFPM_MAX};
    use nicflow_openflow::msg::meter::{command as mcmd, flags as mflags, BandKind, OFPM_ALL};
    let bad = OfpError::MeterModFailed;
    if mm.command == mcmd::DELETE {
        br.del_meters((mm.meter_id != OFPM_ALL).then_some(mm.meter_id), now);
        return Ok(());
    }
    if mm.meter_id == 0 || mm.meter_id > OFPM_MAX {
        return Err(bad(MeterModFailed::INVALID_METER));
    }
    if mm.flags & (mflags::KBPS | mflags::PKTPS) == mflags::KBPS | mflags::PKTPS {
        return Err(bad(MeterModFailed::BAD_FLAGS));
    }
    let mut bands = Vec::with_capacity(mm.bands.len());
    for b in &mm.bands {
        let kind = match b.kind {
            BandKind::Drop => BandType::Drop,
            BandKind::DscpRemark { prec_level } => BandType::DscpRemark { prec_level },
            BandKind::Experimenter { .. } => return Err(bad(MeterModFailed::BAD_BAND)),
        };
        if b.rate == 0 {
            return Err(bad(MeterModFailed::BAD_RATE));
        }
        bands.push(MeterBand {
            kind,
            rate: b.rate,
            burst_size: b.burst_size,
        });
    }
    let spec = MeterSpec {
        meter_id: mm.meter_id,
        flags: mm.flags,
        bands,
    };
    br.add_meters(&[spec], mm.command == mcmd::MODIFY, now)
        .map_err(|e| match e {
            crate::bridge::BridgeError::Meter(m) => meter_error(m),
            crate::bridge::BridgeError::Ofproto(o) => ofproto_error(o),
            _ => bad(MeterModFailed::UNKNOWN),
        })
}

fn group_error(g: GroupError) -> OfpError {
    OfpError::GroupModFailed(match g {
        GroupError::Exists(_) => GroupModFailed::GROUP_EXISTS,
        GroupError::Unknown(_) => GroupModFailed::UNKNOWN_GROUP,
        GroupError::BadOutGroup { .. } => GroupModFailed::UNKNOWN_GROUP,
        GroupError::Loop(_) => GroupModFailed::LOOP,
    })
}

/// `NXT_CT_FLUSH` as a conntrack filter: the zone (none: every zone),
/// the protocol, and the original and reply tuples' fields (absent: any),
/// as OVS's `ofp_ct_match`. Mark and labels (OVS 3.2's additions) are
/// not filtered on: refused with `OFPBPC_BAD_TYPE`, as OVS 3.1 answers
/// properties it does not know.
fn ct_flush(
    f: &nicflow_openflow::msg::nx::CtFlush,
) -> Result<nicflow_conntrack::FlushFilter, OfpError> {
    use nicflow_openflow::error::BadProperty;
    use std::net::IpAddr;
    if f.mark.is_some() || f.mark_mask.is_some() || f.labels.is_some() || f.labels_mask.is_some() {
        return Err(OfpError::BadProperty(BadProperty::BAD_TYPE));
    }
    let ip = |a: std::net::Ipv6Addr| match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    };
    let icmp = matches!(f.ip_proto, 1 | 58);
    // nicflow keeps an ICMP connection's type and code as its ports.
    let ports = |t: &nicflow_openflow::msg::nx::CtTuple| {
        if icmp {
            (
                t.icmp_type.map(u16::from),
                t.icmp_code.map(u16::from),
                t.icmp_id,
            )
        } else {
            (t.src_port, t.dst_port, None)
        }
    };
    let mut out = nicflow_conntrack::FlushFilter {
        zone: f.zone,
        proto: (f.ip_proto != 0).then_some(f.ip_proto),
        ..Default::default()
    };
    if let Some(t) = &f.orig {
        let (sp, dp, id) = ports(t);
        out.src = t.src.map(ip);
        out.dst = t.dst.map(ip);
        out.sport = sp;
        out.dport = dp;
        out.icmp_id = id;
    }
    if let Some(t) = &f.reply {
        let (sp, dp, id) = ports(t);
        out.reply_src = t.src.map(ip);
        out.reply_dst = t.dst.map(ip);
        out.reply_sport = sp;
        out.reply_dport = dp;
        out.reply_icmp_id = id;
    }
    Ok(out)
}

/// `PORT_MOD`: port configuration (down, no-flood...) is not modelled.
pub(super) fn port_mod(br: &Bridge, p: &msg::PortMod) -> Result<(), OfpError> {
    if br.of_ports().iter().any(|(no, _, _)| *no == p.port_no) {
        Err(OfpError::PortModFailed(PortModFailed::EPERM))
    } else {
        Err(OfpError::PortModFailed(PortModFailed::BAD_PORT))
    }
}

/// What a `FLOW_MOD` would be refused for before it reaches the tables
/// (its actions), for a bundle to refuse it when it is added.
pub(super) fn check_flow_mod(fm: &msg::FlowMod) -> Result<(), OfpError> {
    match fm.command {
        WireCmd::Delete | WireCmd::DeleteStrict => Ok(()),
        _ => fm.translate().map(drop),
    }
}

/// Returns whether the tables changed.
pub(super) fn flow_mod(br: &mut Bridge, fm: &msg::FlowMod, now: Instant) -> Result<bool, OfpError> {
    let command = match fm.command {
        WireCmd::Add => FlowModCommand::Add,
        WireCmd::Modify => FlowModCommand::Modify,
        WireCmd::ModifyStrict => FlowModCommand::ModifyStrict,
        WireCmd::Delete => FlowModCommand::Delete,
        WireCmd::DeleteStrict => FlowModCommand::DeleteStrict,
    };
    let deleting = matches!(
        command,
        FlowModCommand::Delete | FlowModCommand::DeleteStrict
    );
    let actions = if deleting {
        Vec::new()
    } else {
        fm.translate()?.actions
    };
    let ours = flow_mod::FlowMod {
        command,
        table: (fm.table_id != 0xff).then_some(fm.table_id),
        priority: fm.priority,
        cookie: fm.cookie,
        cookie_mask: if command == FlowModCommand::Add {
            0
        } else {
            fm.cookie_mask
        },
        new_cookie: match command {
            FlowModCommand::Modify | FlowModCommand::ModifyStrict if fm.cookie_mask == 0 => {
                Some(fm.cookie)
            }
            _ => None,
        },
        idle_timeout: fm.idle_timeout,
        hard_timeout: fm.hard_timeout,
        flags: fm.flags,
        out_port: (deleting && fm.out_port != ANY).then_some(fm.out_port),
        out_group: (deleting && fm.out_group != ANY).then_some(fm.out_group),
        matching: fm.r#match,
        actions,
    };
    br.flow_mod(&ours, now).map_err(flow_mod_error)?;
    if fm.buffer_id != NO_BUFFER && !deleting {
        // The rule is in; the buffer it names never existed (n_buffers 0).
        return Err(OfpError::BadRequest(BadRequest::BUFFER_UNKNOWN));
    }
    Ok(true)
}

pub(super) fn group_mod(br: &mut Bridge, gm: &msg::GroupMod, now: Instant) -> Result<(), OfpError> {
    use nicflow_openflow::msg::group::bucket_id as bid;
    let gmf = OfpError::GroupModFailed;
    match gm.command {
        gcmd::DELETE => {
            let id = (gm.group_id != OFPG_ALL).then_some(gm.group_id);
            br.del_groups_id(id);
            return Ok(());
        }
        gcmd::ADD | gcmd::MODIFY | gcmd::ADD_OR_MOD => {}
        gcmd::INSERT_BUCKET | gcmd::REMOVE_BUCKET => return edit_buckets(br, gm, now),
        _ => return Err(gmf(GroupModFailed::BAD_COMMAND)),
    }
    if gm.group_id > nicflow_ofctl::group::OFPG_MAX {
        return Err(gmf(GroupModFailed::INVALID_GROUP));
    }
    let kind = match gm.group_type {
        group_type::ALL => GroupType::All,
        group_type::SELECT => GroupType::Select,
        group_type::INDIRECT => GroupType::Indirect,
        group_type::FF => GroupType::FastFailover,
        _ => return Err(gmf(GroupModFailed::BAD_TYPE)),
    };
    if kind == GroupType::Indirect && gm.buckets.len() != 1 {
        return Err(gmf(GroupModFailed::BAD_BUCKET));
    }
    let buckets = buckets_in(&gm.buckets)?;
    let mut ids: Vec<u32> = buckets.iter().map(|b| b.bucket_id).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) || ids.last().is_some_and(|i| *i > bid::MAX) {
        return Err(gmf(GroupModFailed::BAD_BUCKET));
    }
    let (selection_method, selection_method_param) = match &gm.selection_method {
        None => (None, 0),
        Some(m) if kind != GroupType::Select => {
            let _ = m;
            return Err(gmf(GroupModFailed::BAD_TYPE));
        }
        // OVN's load balancers: nicflow hashes the 5-tuple (docs/groups).
        Some(m) if m.method == "dp_hash" && m.fields.is_empty() => {
            (Some(nicflow_ofctl::group::SelectionMethod::DpHash), m.param)
        }
        // nicflow's per-packet methods (rr, wrr, splb) travel in the same
        // NTR property; they take no fields.
        Some(m)
            if m.fields.is_empty()
                && nicflow_ofctl::group::SelectionMethod::from_name(&m.method)
                    .is_some_and(|s| s.per_packet()) =>
        {
            (
                nicflow_ofctl::group::SelectionMethod::from_name(&m.method),
                m.param,
            )
        }
        Some(m) if m.method.is_empty() => (None, 0),
        // `hash` with fields: not mapped from OXM here.
        Some(_) => {
            return Err(OfpError::BadProperty(
                nicflow_openflow::error::BadProperty::BAD_VALUE,
            ))
        }
    };
    let spec = GroupSpec {
        group_id: gm.group_id,
        kind,
        selection_method,
        selection_method_param,
        fields: Vec::new(),
        buckets,
    };
    let modify = match gm.command {
        gcmd::MODIFY => true,
        gcmd::ADD_OR_MOD => br.group_specs().iter().any(|g| g.group_id == gm.group_id),
        _ => false,
    };
    add_group_spec(br, spec, modify, now)
}

fn buckets_in(bs: &[Bucket]) -> Result<Vec<nicflow_ofctl::group::Bucket>, OfpError> {
    let mut buckets = Vec::with_capacity(bs.len());
    for b in bs {
        let actions = b.translate()?;
        buckets.push(nicflow_ofctl::group::Bucket {
            // 1.5: the bucket's id; 1.3: its position (the codec's).
            bucket_id: b.bucket_id,
            weight: b.weight,
            watch_port: (b.watch_port != ANY).then_some(b.watch_port),
            watch_group: (b.watch_group != ANY).then_some(b.watch_group),
            actions,
        });
    }
    Ok(buckets)
}

fn add_group_spec(
    br: &mut Bridge,
    spec: GroupSpec,
    modify: bool,
    now: Instant,
) -> Result<(), OfpError> {
    let gmf = OfpError::GroupModFailed;
    br.add_groups(&[spec], modify, now).map_err(|e| match e {
        crate::bridge::BridgeError::Ofproto(o) => match o {
            OfprotoError::Group(g) => group_error(g),
            OfprotoError::BadOutGroup(_) => gmf(GroupModFailed::UNKNOWN_GROUP),
            o => ofproto_error(o),
        },
        _ => gmf(GroupModFailed::EPERM),
    })
}

/// OpenFlow 1.5 `INSERT_BUCKET` / `REMOVE_BUCKET` (OVN splits groups too
/// large for one message into an `ADD` and `INSERT_BUCKET`s): the group is
/// modified as a whole, so a failure changes nothing.
fn edit_buckets(br: &mut Bridge, gm: &msg::GroupMod, now: Instant) -> Result<(), OfpError> {
    use nicflow_openflow::msg::group::bucket_id as bid;
    let gmf = OfpError::GroupModFailed;
    let Some(mut spec) = br
        .group_specs()
        .into_iter()
        .find(|g| g.group_id == gm.group_id)
    else {
        return Err(gmf(GroupModFailed::UNKNOWN_GROUP));
    };
    let at = match gm.command_bucket_id {
        bid::FIRST => 0,
        bid::LAST | bid::ALL => spec.buckets.len(),
        id => spec
            .buckets
            .iter()
            .position(|b| b.bucket_id == id)
            .ok_or(gmf(GroupModFailed::UNKNOWN_BUCKET))?,
    };
    if gm.command == gcmd::INSERT_BUCKET {
        if gm.command_bucket_id == bid::ALL {
            return Err(gmf(GroupModFailed::UNKNOWN_BUCKET));
        }
        let new = buckets_in(&gm.buckets)?;
        for b in &new {
            if b.bucket_id > bid::MAX
                || spec.buckets.iter().any(|o| o.bucket_id == b.bucket_id)
                || new.iter().filter(|o| o.bucket_id == b.bucket_id).count() > 1
            {
                return Err(gmf(GroupModFailed::BUCKET_EXISTS));
            }
        }
        // `LAST` appends; an id inserts before that bucket, as OVS does.
        spec.buckets.splice(at..at, new);
    } else {
        match gm.command_bucket_id {
            bid::ALL => spec.buckets.clear(),
            _ if spec.buckets.is_empty() => {}
            bid::LAST => {
                spec.buckets.pop();
            }
            _ => {
                spec.buckets.remove(at);
            }
        }
    }
    if spec.kind == GroupType::Indirect && spec.buckets.len() != 1 {
        return Err(gmf(GroupModFailed::BAD_BUCKET));
    }
    add_group_spec(br, spec, true, now)
}

/// Is `in_port` one a `PACKET_OUT` may name (a port, `CONTROLLER`,
/// `LOCAL`)?
pub(super) fn packet_out_port_ok(br: &Bridge, in_port: u32) -> bool {
    matches!(in_port, ofp::CONTROLLER | ofp::LOCAL)
        || br.of_ports().iter().any(|(no, _, _)| *no == in_port)
}

/// A `PACKET_OUT`'s actions as nicflow's, after the checks that do not
/// need the bridge (no buffer, actions that convert, a frame that parses).
/// A controller-supplied frame as an exact match: what its actions'
/// prerequisites are checked against (`PACKET_OUT`, `NXT_RESUME`), as
/// OVS's `flow_extract` then `ofpacts_check_consistency`. `None` when
/// the frame is empty or does not parse.
pub(super) fn packet_match(data: &[u8], in_port: u32) -> Option<Match> {
    let mut key = nicflow_flow::FlowKey::default();
    if data.is_empty() || nicflow_flow::extract(data, in_port, &mut key).is_err() {
        return None;
    }
    Some(Match::new(key, nicflow_flow::FlowMask::exact()))
}

pub(super) fn check_packet_out(po: &msg::PacketOut) -> Result<Vec<Action>, OfpError> {
    if po.buffer_id != NO_BUFFER {
        return Err(OfpError::BadRequest(BadRequest::BUFFER_UNKNOWN));
    }
    // The actions are checked against the packet itself, as OVS does
    // (`flow_extract` then `ofpacts_check_consistency`): ovn-controller's
    // neighbour advertisements set `nd_target`/`nd_tll`, whose
    // prerequisites only the packet (an ICMPv6 NA) establishes.
    let packet =
        packet_match(&po.data, po.in_port).ok_or(OfpError::BadRequest(BadRequest::BAD_PACKET))?;
    let mut actions = Vec::with_capacity(po.actions.len());
    for a in &po.actions {
        match a {
            // OFPP_TABLE: through the tables from table 0.
            OfAction::Output { port, .. } if *port == ofp::TABLE => {
                actions.push(Action::Resubmit {
                    port: None,
                    table: Some(0),
                })
            }
            a => actions.extend(convert::actions_to_nicflow(
                std::slice::from_ref(a),
                &packet,
            )?),
        }
    }
    Ok(actions)
}

fn packet_out(br: &mut Bridge, po: &msg::PacketOut, now: Instant) -> Result<(), OfpError> {
    if po.buffer_id != NO_BUFFER {
        return Err(OfpError::BadRequest(BadRequest::BUFFER_UNKNOWN));
    }
    if !packet_out_port_ok(br, po.in_port) {
        return Err(OfpError::BadRequest(BadRequest::BAD_PORT));
    }
    let actions = check_packet_out(po)?;
    let md = pipeline_only(&po.metadata);
    if br.packet_out_with(po.in_port, &md, &po.data, &actions, now) {
        Ok(())
    } else {
        Err(OfpError::BadRequest(BadRequest::BAD_PACKET))
    }
}

/// The pipeline fields of a controller's match (`PACKET_OUT`'s 1.5 match,
/// `NXT_RESUME`'s metadata): only these may start a walk with values the
/// frame does not carry; header fields always come from the frame's bytes.
fn pipeline_only(m: &Match) -> Match {
    let mut out = Match::catchall();
    for f in super::PIPELINE_FIELDS {
        let (v, mask) = m.get(*f);
        if mask != 0 {
            out.set(*f, v, mask);
        }
    }
    out
}

/// Split `items` into replies of at most 64 KiB: every reply but the last
/// has `OFPMPF_REPLY_MORE`.
fn send_split<T: Clone>(s: &mut Session, xid: u32, items: Vec<T>, wrap: fn(Vec<T>) -> ReplyBody) {
    let version = s.version;
    let size = |item: &T| {
        msg::encode_to_vec_as(
            &Message::MultipartReply(MultipartReply {
                flags: 0,
                body: wrap(vec![item.clone()]),
            }),
            version,
            0,
        )
        .map(|v| v.len() - 16)
        .unwrap_or(MP_ROOM + 1)
    };
    let mut chunks: Vec<Vec<T>> = vec![Vec::new()];
    let mut used = 0;
    for item in items {
        let n = size(&item);
        if n > MP_ROOM {
            // One record that cannot fit any message: left out.
            continue;
        }
        if used + n > MP_ROOM {
            chunks.push(Vec::new());
            used = 0;
        }
        used += n;
        if let Some(c) = chunks.last_mut() {
            c.push(item);
        }
    }
    let last = chunks.len() - 1;
    for (i, c) in chunks.into_iter().enumerate() {
        s.send(
            &Message::MultipartReply(MultipartReply {
                flags: if i < last { MORE } else { 0 },
                body: wrap(c),
            }),
            xid,
        );
    }
}

fn selector(r: &FlowStatsRequest) -> Result<FlowSelector, OfpError> {
    Ok(FlowSelector {
        table: (r.table_id != 0xff).then_some(r.table_id),
        out_port: (r.out_port != ANY).then_some(r.out_port),
        out_group: (r.out_group != ANY).then_some(r.out_group),
        cookie: r.cookie,
        cookie_mask: r.cookie_mask,
        matching: r.r#match,
    })
}

/// A port's `ofp_port`: nicflow does not model link speed or features;
/// the address is a locally administered one derived from the bridge and
/// port number.
fn port_desc(bridge: &str, no: u32, name: &str) -> Port {
    let dp = datapath_id(bridge).to_be_bytes();
    Port {
        port_no: no,
        hw_addr: [0x02, dp[4], dp[5], dp[6] ^ dp[7], (no >> 8) as u8, no as u8],
        name: name.chars().take(15).collect(),
        config: 0,
        state: nicflow_openflow::msg::port::state::LIVE,
        curr: 0,
        advertised: 0,
        supported: 0,
        peer: 0,
        curr_speed: 0,
        max_speed: 0,
    }
}

/// The bridge's ports as `ofp_port`s.
pub fn port_descs(br: &Bridge) -> Vec<Port> {
    br.of_ports()
        .iter()
        .map(|(no, name, _)| port_desc(&br.name, *no, name))
        .collect()
}

fn bucket_out(b: &nicflow_ofctl::group::Bucket) -> Bucket {
    Bucket {
        bucket_id: b.bucket_id,
        weight: b.weight,
        watch_port: b.watch_port.unwrap_or(ANY),
        watch_group: b.watch_group.unwrap_or(ANY),
        actions: convert::actions_from_nicflow(&b.actions, &Match::catchall()).unwrap_or_default(),
    }
}

fn multipart(
    s: &mut Session,
    br: &mut Bridge,
    req: &RequestBody,
    xid: u32,
    now: Instant,
) -> Result<(), OfpError> {
    let reply = |s: &mut Session, body: ReplyBody| {
        s.send(
            &Message::MultipartReply(MultipartReply { flags: 0, body }),
            xid,
        )
    };
    match req {
        RequestBody::Desc => reply(
            s,
            ReplyBody::Desc(Desc {
                mfr_desc: "nicflow".into(),
                hw_desc: "nicflow software SmartNIC".into(),
                sw_desc: env!("CARGO_PKG_VERSION").into(),
                serial_num: "None".into(),
                dp_desc: br.name.clone(),
            }),
        ),
        RequestBody::Flow(r) => {
            let sel = selector(r)?;
            let stats: Vec<FlowStats> = br
                .flow_stats(&sel, now)
                .into_iter()
                .map(|d| FlowStats {
                    table_id: d.spec.table,
                    duration_sec: d.duration.as_secs() as u32,
                    duration_nsec: d.duration.subsec_nanos(),
                    priority: d.spec.priority,
                    idle_timeout: d.spec.idle_timeout,
                    hard_timeout: d.spec.hard_timeout,
                    flags: d.flags,
                    cookie: d.spec.cookie,
                    packet_count: d.n_packets,
                    byte_count: d.n_bytes,
                    instructions: convert::from_nicflow(&d.spec.actions, &d.spec.r#match)
                        .unwrap_or_default(),
                    r#match: d.spec.r#match,
                })
                .collect();
            send_split(s, xid, stats, ReplyBody::Flow);
        }
        RequestBody::Aggregate(r) => {
            let sel = selector(r)?;
            let mut a = AggregateStats::default();
            for d in br.flow_stats(&sel, now) {
                a.packet_count += d.n_packets;
                a.byte_count += d.n_bytes;
                a.flow_count += 1;
            }
            reply(s, ReplyBody::Aggregate(a));
        }
        RequestBody::Table => {
            let per = br.table_stats();
            let tables = (0..N_TABLES)
                .map(|t| {
                    let (active, c) = per.get(t as usize).copied().unwrap_or_default();
                    TableStats {
                        table_id: t,
                        active_count: active,
                        lookup_count: c.lookup_count,
                        matched_count: c.matched_count,
                    }
                })
                .collect();
            send_split(s, xid, tables, ReplyBody::Table);
        }
        RequestBody::PortStats { port_no } => {
            let ports = br.of_ports();
            if *port_no != ANY && !ports.iter().any(|(no, _, _)| no == port_no) {
                return Err(OfpError::BadRequest(BadRequest::BAD_PORT));
            }
            let stats = ports
                .into_iter()
                .filter(|(no, _, _)| *port_no == ANY || no == port_no)
                .map(|(no, _, st)| PortStats {
                    port_no: no,
                    rx_packets: st.rx_packets,
                    tx_packets: st.tx_packets,
                    rx_bytes: st.rx_bytes,
                    tx_bytes: st.tx_bytes,
                    rx_dropped: st.rx_dropped,
                    tx_dropped: st.tx_dropped,
                    rx_errors: u64::MAX,
                    tx_errors: u64::MAX,
                    rx_frame_err: u64::MAX,
                    rx_over_err: u64::MAX,
                    rx_crc_err: u64::MAX,
                    collisions: u64::MAX,
                    duration_sec: u32::MAX,
                    duration_nsec: u32::MAX,
                })
                .collect();
            send_split(s, xid, stats, ReplyBody::PortStats);
        }
        RequestBody::PortDesc => {
            let ports = port_descs(br);
            send_split(s, xid, ports, ReplyBody::PortDesc);
        }
        RequestBody::Group { group_id } => {
            let stats: Vec<GroupStats> = br
                .group_stats(now)
                .into_iter()
                .filter(|g| *group_id == OFPG_ALL || g.group_id == *group_id)
                .map(|g| GroupStats {
                    group_id: g.group_id,
                    ref_count: g.ref_count,
                    packet_count: g.packets,
                    byte_count: g.bytes,
                    duration_sec: g.duration.as_secs() as u32,
                    duration_nsec: g.duration.subsec_nanos(),
                    bucket_stats: g.buckets,
                })
                .collect();
            send_split(s, xid, stats, ReplyBody::Group);
        }
        RequestBody::GroupDesc => {
            let descs: Vec<GroupDesc> = br
                .group_specs()
                .iter()
                .map(|g| GroupDesc {
                    group_type: match g.kind {
                        GroupType::All => group_type::ALL,
                        GroupType::Select => group_type::SELECT,
                        GroupType::Indirect => group_type::INDIRECT,
                        GroupType::FastFailover => group_type::FF,
                    },
                    group_id: g.group_id,
                    buckets: g.buckets.iter().map(bucket_out).collect(),
                    selection_method: g.selection_method.map(|m| {
                        nicflow_openflow::msg::group::SelectionMethod {
                            method: m.name().to_string(),
                            param: g.selection_method_param,
                            fields: Vec::new(),
                        }
                    }),
                })
                .collect();
            send_split(s, xid, descs, ReplyBody::GroupDesc);
        }
        RequestBody::GroupFeatures => {
            use nicflow_openflow::action::ofpat;
            let acts = [
                ofpat::OUTPUT,
                ofpat::PUSH_VLAN,
                ofpat::POP_VLAN,
                ofpat::GROUP,
                ofpat::SET_NW_TTL,
                ofpat::DEC_NW_TTL,
                ofpat::SET_FIELD,
            ]
            .iter()
            .fold(0u32, |m, a| m | (1 << a));
            reply(
                s,
                ReplyBody::GroupFeatures(GroupFeatures {
                    types: 0xf,
                    // OFPGFC_SELECT_WEIGHT | SELECT_LIVENESS | CHAINING
                    capabilities: 0x1 | 0x2 | 0x4,
                    max_groups: [0xffff_ff00; 4],
                    actions: [acts; 4],
                }),
            );
        }
        RequestBody::TableFeatures(set) => {
            if !set.is_empty() {
                return Err(OfpError::TableFeaturesFailed(TableFeaturesFailed::EPERM));
            }
            let feats: Vec<TableFeatures> = (0..N_TABLES)
                .map(|t| TableFeatures::nicflow(t, N_TABLES, 1_000_000))
                .collect();
            send_split(s, xid, feats, ReplyBody::TableFeatures);
        }
        RequestBody::Meter { meter_id } => {
            use nicflow_openflow::msg::meter::OFPM_ALL;
            let id = (*meter_id != OFPM_ALL).then_some(*meter_id);
            let stats: Vec<MeterStats> = br
                .meter_stats(id, now)
                .into_iter()
                .map(|m| MeterStats {
                    meter_id: m.meter_id,
                    flow_count: m.flow_count,
                    packet_in_count: m.packets_in,
                    byte_in_count: m.bytes_in,
                    duration_sec: m.duration.as_secs() as u32,
                    duration_nsec: m.duration.subsec_nanos(),
                    band_stats: m.bands,
                })
                .collect();
            send_split(s, xid, stats, ReplyBody::Meter);
        }
        RequestBody::MeterConfig { meter_id } => {
            use nicflow_ofctl::meter::BandType;
            use nicflow_openflow::msg::meter::{BandKind, OFPM_ALL};
            let configs: Vec<MeterConfig> = br
                .dump_meters()
                .into_iter()
                .filter(|m| *meter_id == OFPM_ALL || m.meter_id == *meter_id)
                .map(|m| MeterConfig {
                    flags: m.flags,
                    meter_id: m.meter_id,
                    bands: m
                        .bands
                        .iter()
                        .map(|b| msg::MeterBand {
                            rate: b.rate,
                            burst_size: b.burst_size,
                            kind: match b.kind {
                                BandType::Drop => BandKind::Drop,
                                BandType::DscpRemark { prec_level } => {
                                    BandKind::DscpRemark { prec_level }
                                }
                            },
                        })
                        .collect(),
                })
                .collect();
            send_split(s, xid, configs, ReplyBody::MeterConfig);
        }
        RequestBody::MeterFeatures => {
            use crate::ofproto::meter::{MAX_BANDS, MAX_METERS};
            use nicflow_openflow::msg::meter::{band_type, flags as mflags};
            reply(
                s,
                ReplyBody::MeterFeatures(MeterFeatures {
                    max_meter: MAX_METERS as u32,
                    band_types: (1 << band_type::DROP) | (1 << band_type::DSCP_REMARK),
                    capabilities: u32::from(
                        mflags::KBPS | mflags::PKTPS | mflags::BURST | mflags::STATS,
                    ),
                    max_bands: MAX_BANDS as u8,
                    max_color: 0,
                }),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::openflow::session::Conn;
    use crate::datapath::DatapathConfig;
    use nicflow_openflow::msg::{encode_to_vec, Hello};

    /// A controller's match starts a walk with pipeline fields only: an
    /// `ip_dst` in a `PACKET_OUT`/`NXT_RESUME` match must not make the
    /// walk disagree with the frame's bytes.
    #[test]
    fn only_pipeline_fields_start_a_walk() {
        let mut m = Match::catchall();
        m.set(Field::Reg(3), 7, 0xffff_ffff);
        m.set(Field::Metadata, 9, u64::MAX.into());
        m.set(Field::NwDst, 0xc612_0001, 0xffff_ffff);
        m.set(Field::DlType, 0x0800, 0xffff);
        let p = pipeline_only(&m);
        assert_eq!(p.get(Field::Reg(3)), (7, 0xffff_ffff));
        assert_eq!(p.get(Field::Metadata).0, 9);
        assert_eq!(p.get(Field::NwDst).1, 0);
        assert_eq!(p.get(Field::DlType).1, 0);
    }

    const ARP: &str =
        "ffffffffffff0001020304050806000108000604000100010203040503030303000000000000030303fe";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn session(now: Instant) -> Session {
        let mut s = Session::new(Conn::None, "t".into(), "ptcp:0".into(), now);
        s.feed(
            &encode_to_vec(&Message::Hello(Hello::ofp13()), 1).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        s.take_output();
        s
    }

    fn run(s: &mut Session, br: &mut Bridge, m: Message, now: Instant) -> Vec<Decoded> {
        s.feed(&encode_to_vec(&m, 42).unwrap(), now);
        while let Some(d) = s.poll_message() {
            handle(s, br, d, now);
        }
        let out = s.take_output();
        let mut b = &out[..];
        let mut v = Vec::new();
        while !b.is_empty() {
            let (d, n) = msg::decode(b).unwrap();
            v.push(d);
            b = &b[n..];
        }
        v
    }

    #[test]
    fn packet_out_through_the_tables_reaches_the_controller() {
        let now = Instant::now();
        let mut br = Bridge::new("br0", DatapathConfig::default());
        br.add_flow_str("priority=1,arp,actions=controller", now)
            .unwrap();
        let mut s = session(now);
        let po = msg::PacketOut {
            buffer_id: NO_BUFFER,
            in_port: ofp::CONTROLLER,
            metadata: Match::catchall(),
            actions: vec![OfAction::Output {
                port: ofp::TABLE,
                max_len: 0,
            }],
            data: hex(ARP),
        };
        let out = run(&mut s, &mut br, Message::PacketOut(po), now);
        assert!(out.is_empty(), "{out:?}");
        let pkts = br.take_controller_packets();
        assert_eq!(pkts.len(), 1);
        assert_eq!(pkts[0].data, hex(ARP));
        assert_eq!(pkts[0].reason, 1);
    }

    /// A packet-out's set-fields are checked against the packet, as in
    /// OVS: ovn-controller's neighbour advertisements (`nd_target`,
    /// `nd_tll` on an ICMPv6 NA) were OFPBAC_MATCH_INCONSISTENT.
    #[test]
    fn packet_out_actions_are_checked_against_the_packet() {
        use nicflow_openflow::oxm::{OxmEntry, OxmField};
        let po = |field, value| msg::PacketOut {
            buffer_id: NO_BUFFER,
            in_port: ofp::CONTROLLER,
            metadata: Match::catchall(),
            actions: vec![OfAction::SetField(OxmEntry {
                field,
                value,
                mask: None,
            })],
            data: hex(ARP),
        };
        assert!(check_packet_out(&po(OxmField::ArpOp, 2)).is_ok());
        assert_eq!(
            check_packet_out(&po(OxmField::TcpDst, 80)),
            Err(OfpError::BadAction(
                nicflow_openflow::error::BadAction::MATCH_INCONSISTENT
            ))
        );
    }

    #[test]
    fn refusals_are_openflow_errors() {
        let now = Instant::now();
        let mut br = Bridge::new("br0", DatapathConfig::default());
        let mut s = session(now);
        // A buffered packet-out: nicflow keeps no buffers.
        let po = msg::PacketOut {
            buffer_id: 7,
            in_port: ofp::CONTROLLER,
            metadata: Match::catchall(),
            actions: vec![],
            data: hex(ARP),
        };
        let out = run(&mut s, &mut br, Message::PacketOut(po), now);
        assert!(matches!(&out[0].message,
            Message::Error(e) if e.error == OfpError::BadRequest(BadRequest::BUFFER_UNKNOWN)));
        // A rule naming a meter that does not exist.
        let fm = msg::FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: 0,
            command: WireCmd::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority: 1,
            buffer_id: NO_BUFFER,
            out_port: ANY,
            out_group: ANY,
            flags: 0,
            importance: 0,
            r#match: Match::catchall(),
            instructions: vec![nicflow_openflow::action::Instruction::Meter(9)],
        };
        let out = run(&mut s, &mut br, Message::FlowMod(fm), now);
        assert!(matches!(&out[0].message,
            Message::Error(e) if e.error == OfpError::MeterModFailed(MeterModFailed::UNKNOWN_METER)));
        assert_eq!(out[0].xid, 42);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// Any message type with any body, on a bridge with rules, groups
        /// and a port map: answered or refused, never a panic; the session
        /// stays usable.
        #[test]
        fn arbitrary_messages_never_panic(
            ty in 0u8..32,
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            flow_mod_prefix in proptest::prelude::any::<bool>(),
        ) {
            let now = Instant::now();
            let mut br = Bridge::new("br0", DatapathConfig::default());
            br.add_flow_str("priority=1,arp,actions=controller", now).unwrap();
            br.add_groups_str("group_id=1,type=all,bucket=output:1", false, now).unwrap();
            let mut s = session(now);
            let mut m = vec![4, ty, 0, 0, 0, 0, 0, 5];
            if flow_mod_prefix && ty == 14 {
                // A valid FLOW_MOD header with an empty OXM match, then noise
                // as instructions.
                m.extend_from_slice(&[0; 40]);
                m[8 + 25] = 0;
                m.extend_from_slice(&[0, 1, 0, 4, 0, 0, 0, 0]);
            }
            m.extend_from_slice(&body);
            let len = m.len().min(65535) as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
            m.truncate(usize::from(len));
            s.feed(&m, now);
            while let Some(d) = s.poll_message() {
                handle(&mut s, &mut br, d, now);
            }
            s.take_output();
            s.feed(&encode_to_vec(&Message::BarrierRequest, 6).unwrap(), now);
            let d = s.poll_message();
            proptest::prop_assert!(matches!(d, Some(ref d) if d.xid == 6));
        }
    }

    /// A bridge with in-memory ports p1..pN (port numbers 1..N).
    fn mem_bridge(n: usize) -> (Bridge, Vec<crate::port::mem::MemHandle>) {
        mem_bridge_cfg(n, DatapathConfig::default())
    }

    fn mem_bridge_cfg(n: usize, cfg: DatapathConfig) -> (Bridge, Vec<crate::port::mem::MemHandle>) {
        let mut br = Bridge::new("br0", cfg);
        let mut hs = Vec::new();
        for i in 1..=n {
            let (p, h) = crate::port::mem::MemPort::new(&format!("p{i}"));
            br.add_port(Box::new(p)).unwrap();
            hs.push(h);
        }
        (br, hs)
    }

    fn add_flow(
        s: &mut Session,
        br: &mut Bridge,
        table: u8,
        m: Match,
        acts: Vec<OfAction>,
    ) -> Vec<Decoded> {
        let fm = msg::FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: table,
            command: WireCmd::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority: 10,
            buffer_id: NO_BUFFER,
            out_port: ANY,
            out_group: ANY,
            flags: 0,
            importance: 0,
            r#match: m,
            instructions: vec![nicflow_openflow::action::Instruction::ApplyActions(acts)],
        };
        run(s, br, Message::FlowMod(fm), Instant::now())
    }

    fn multipart(s: &mut Session, br: &mut Bridge, body: RequestBody) -> ReplyBody {
        let out = run(
            s,
            br,
            Message::MultipartRequest(msg::MultipartRequest { flags: 0, body }),
            Instant::now(),
        );
        let Some(Message::MultipartReply(r)) = out.into_iter().next().map(|d| d.message) else {
            panic!("no multipart reply")
        };
        r.body
    }

    fn table_counts(s: &mut Session, br: &mut Bridge) -> Vec<(u64, u64)> {
        let ReplyBody::Table(t) = multipart(s, br, RequestBody::Table) else {
            panic!("not a table stats reply")
        };
        t.iter()
            .map(|t| (t.lookup_count, t.matched_count))
            .collect()
    }

    fn udp_frame(dport: u16) -> Vec<u8> {
        nicflow_packet::builder::FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
            .udp(1000, dport)
            .payload(b"table stats")
            .build()
    }

    #[test]
    fn table_stats_count_lookups_and_matches_of_cached_flows() {
        table_stats(true);
    }

    #[test]
    fn table_stats_count_packets_the_datapath_does_not_cache() {
        table_stats(false);
    }

    fn table_stats(caches: bool) {
        // Table 0 sends p1's traffic to table 1; table 1 forwards UDP to
        // port 80 only. Everything else misses somewhere.
        let now = Instant::now();
        let cfg = DatapathConfig {
            caches_enabled: caches,
            ..Default::default()
        };
        let (mut br, h) = mem_bridge_cfg(3, cfg);
        br.add_flows_str(
            "table=0,in_port=p1,actions=goto_table:1\n\
             table=1,udp,tp_dst=80,actions=output:p2\n",
            now,
        )
        .unwrap();
        let mut s = session(now);
        assert!(table_counts(&mut s, &mut br).iter().all(|c| *c == (0, 0)));
        for _ in 0..5 {
            h[0].inject(&udp_frame(80)); // t0 hit, t1 hit
        }
        for _ in 0..3 {
            h[0].inject(&udp_frame(81)); // t0 hit, t1 miss
        }
        for _ in 0..2 {
            h[2].inject(&udp_frame(80)); // t0 miss
        }
        br.run_until_idle(now);
        assert_eq!(h[1].take_tx().len(), 5);
        // Cached: three datapath flows, one upcall each; the rest were
        // cache hits, credited from the flows' counters. Uncached: every
        // packet is an upcall, credited as it goes.
        assert_eq!(br.dp_stats().upcalls, if caches { 3 } else { 10 });
        let c = table_counts(&mut s, &mut br);
        assert_eq!(c.len(), usize::from(N_TABLES));
        assert_eq!(c[0], (10, 8));
        assert_eq!(c[1], (8, 5));
        assert!(c[2..].iter().all(|c| *c == (0, 0)));
        // Only the new traffic is added at the next reading.
        h[0].inject(&udp_frame(80));
        h[2].inject(&udp_frame(80));
        br.run_until_idle(now);
        let c = table_counts(&mut s, &mut br);
        assert_eq!((c[0], c[1]), ((12, 9), (9, 6)));
        // The rules count the same packets.
        let rules: Vec<u64> = br.dump_flows(now).iter().map(|d| d.n_packets).collect();
        assert_eq!(rules, vec![9, 6]);
        // Deleting the rules keeps the tables' counters (and the cached
        // flows' traffic, credited before they went).
        br.del_flows_str("").unwrap();
        assert_eq!(table_counts(&mut s, &mut br)[..2], [(12, 9), (9, 6)]);
    }

    #[test]
    fn output_max_len_reads_back_as_sent() {
        // os-ken writes OFPActionOutput(port, max_len=65509) and compares
        // the flow stats with it.
        let now = Instant::now();
        let (mut br, h) = mem_bridge(2);
        let mut s = session(now);
        let m = of_match("in_port=1");
        let acts = vec![OfAction::Output {
            port: 2,
            max_len: 65509,
        }];
        assert!(add_flow(&mut s, &mut br, 0, m, acts.clone()).is_empty());
        // Forwarding is that of a plain output.
        h[0].inject(&udp_frame(80));
        br.run_until_idle(now);
        assert_eq!(h[1].take_tx().len(), 1);
        let ReplyBody::Flow(f) = multipart(
            &mut s,
            &mut br,
            RequestBody::Flow(msg::multipart::FlowStatsRequest {
                table_id: 0xff,
                out_port: 2,
                out_group: ANY,
                cookie: 0,
                cookie_mask: 0,
                r#match: Match::catchall(),
            }),
        ) else {
            panic!("not a flow stats reply")
        };
        assert_eq!(f.len(), 1, "out_port selects it");
        assert_eq!(
            f[0].instructions,
            vec![nicflow_openflow::action::Instruction::ApplyActions(acts)]
        );
        assert_eq!(f[0].packet_count, 1);
        assert_eq!(br.dump_flows(now)[0].spec.actions.len(), 1);
    }

    fn of_match(text: &str) -> Match {
        nicflow_ofctl::parse_match(text, &nicflow_ofctl::NumericPorts)
            .unwrap()
            .r#match
    }

    fn set_field(field: nicflow_openflow::oxm::OxmField, value: u128) -> OfAction {
        OfAction::SetField(nicflow_openflow::oxm::OxmEntry {
            field,
            value,
            mask: None,
        })
    }

    #[test]
    fn set_field_icmp_type_and_code_rewrite_the_packet() {
        use nicflow_openflow::oxm::OxmField as F;
        use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
        let now = Instant::now();
        let (mut br, h) = mem_bridge(2);
        let mut s = session(now);
        let m = of_match("in_port=1,icmp");
        let acts = vec![
            set_field(F::Icmpv4Type, 0),
            set_field(F::Icmpv4Code, 9),
            OfAction::Output {
                port: 2,
                max_len: 0,
            },
        ];
        assert!(add_flow(&mut s, &mut br, 0, m, acts).is_empty());
        let m6 = of_match("in_port=1,icmp6");
        let acts6 = vec![
            set_field(F::Icmpv6Type, 129),
            set_field(F::Icmpv6Code, 3),
            OfAction::Output {
                port: 2,
                max_len: 0,
            },
        ];
        assert!(add_flow(&mut s, &mut br, 0, m6, acts6).is_empty());
        let v4 = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
            .icmp(8, 0)
            .echo(7, 1)
            .payload(b"ping")
            .build();
        let v6 = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv6(
                "2001:db8::1".parse().unwrap(),
                "2001:db8::2".parse().unwrap(),
            )
            .icmpv6(128, 0)
            .echo(7, 1)
            .payload(b"ping")
            .build();
        // Twice each: the upcall's packet and a cached flow's.
        for f in [&v4, &v6, &v4, &v6] {
            h[0].inject(f);
        }
        br.run_until_idle(now);
        let out = h[1].take_tx();
        assert_eq!(out.len(), 4);
        for (f, want) in out.iter().zip([[0u8, 9], [129, 3], [0, 9], [129, 3]]) {
            let l4 = if f[12..14] == [0x08, 0x00] { 34 } else { 54 };
            assert_eq!(f[l4..l4 + 2], want, "{f:02x?}");
            assert!(all_checksums_valid(f), "{f:02x?}");
        }
    }

    #[test]
    fn set_field_ipv6_label_is_refused() {
        use nicflow_openflow::error::BadAction;
        let now = Instant::now();
        let mut br = Bridge::new("br0", DatapathConfig::default());
        let mut s = session(now);
        let m = of_match("ipv6");
        let out = add_flow(
            &mut s,
            &mut br,
            0,
            m,
            vec![set_field(nicflow_openflow::oxm::OxmField::Ipv6Label, 5)],
        );
        assert!(matches!(&out[0].message,
            Message::Error(e) if e.error == OfpError::BadAction(BadAction::BAD_SET_ARGUMENT)));
        assert!(br.dump_flows(now).is_empty());
    }

    #[test]
    fn table_features_are_split_below_64k() {
        let now = Instant::now();
        let mut br = Bridge::new("br0", DatapathConfig::default());
        let mut s = session(now);
        let out = run(
            &mut s,
            &mut br,
            Message::MultipartRequest(msg::MultipartRequest {
                flags: 0,
                body: RequestBody::TableFeatures(vec![]),
            }),
            now,
        );
        assert!(out.len() > 1);
        let mut n = 0;
        for (i, d) in out.iter().enumerate() {
            let Message::MultipartReply(r) = &d.message else {
                panic!("{d:?}")
            };
            assert_eq!(r.flags & MORE != 0, i + 1 < out.len());
            if let ReplyBody::TableFeatures(t) = &r.body {
                n += t.len();
            }
        }
        assert_eq!(n, usize::from(N_TABLES));
    }
}
