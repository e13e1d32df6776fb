//! `OFPT_MULTIPART_REQUEST` / `OFPT_MULTIPART_REPLY`: statistics and
//! descriptions (switch description, flows, aggregates, tables, ports,
//! groups, meters, table features).
//!
//! Replies larger than one message (64 KiB) are the caller's to split into
//! several replies with `OFPMPF_REPLY_MORE` set on all but the last;
//! [`crate::msg::encode`] refuses an oversized one.

use super::flow::OxsStats;
use super::group::{self, Bucket, SelectionMethod};
use super::meter::{check_flags, MeterBand};
use super::port::Port;
use super::OFP15_VERSION;
use crate::action::{self, Instruction};
use crate::error::{e, BadRequest, OfpError, TableFeaturesFailed};
use crate::oxm::{self, OxmField, OxmHeader, OxmId};
use crate::wire::{self, Reader};
use nicflow_flow::Match;

/// `OFPMP_*`.
pub mod ofpmp {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const GROUP: u16 = 6;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const TABLE_FEATURES: u16 = 12;
    pub const PORT_DESC: u16 = 13;
}

/// `OFPMPF_REQ_MORE` / `OFPMPF_REPLY_MORE`.
pub const MORE: u16 = 1;

fn tf_len() -> OfpError {
    OfpError::TableFeaturesFailed(TableFeaturesFailed::BAD_LEN)
}

/// Body of a flow or aggregate stats request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStatsRequest {
    /// 0xff = all tables.
    pub table_id: u8,
    pub out_port: u32,
    pub out_group: u32,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub r#match: Match,
}

impl FlowStatsRequest {
    fn decode(r: &mut Reader<'_>) -> Result<FlowStatsRequest, OfpError> {
        let table_id = r.u8()?;
        r.pad(3)?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        r.pad(4)?;
        Ok(FlowStatsRequest {
            table_id,
            out_port,
            out_group,
            cookie: r.u64()?,
            cookie_mask: r.u64()?,
            r#match: oxm::decode_match(r)?,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u8(out, self.table_id);
        wire::put_zeros(out, 3);
        wire::put_u32(out, self.out_port);
        wire::put_u32(out, self.out_group);
        wire::put_zeros(out, 4);
        wire::put_u64(out, self.cookie);
        wire::put_u64(out, self.cookie_mask);
        oxm::encode_match(&self.r#match, out);
    }
}

/// What is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestBody {
    Desc,
    Flow(FlowStatsRequest),
    Aggregate(FlowStatsRequest),
    Table,
    /// `OFPP_ANY` for all ports.
    PortStats {
        port_no: u32,
    },
    PortDesc,
    /// `OFPG_ALL` for all groups.
    Group {
        group_id: u32,
    },
    GroupDesc,
    GroupFeatures,
    /// `OFPM_ALL` for all meters.
    Meter {
        meter_id: u32,
    },
    MeterConfig {
        meter_id: u32,
    },
    MeterFeatures,
    /// Empty: "tell me"; non-empty: "set the pipeline to this".
    TableFeatures(Vec<TableFeatures>),
}

/// `OFPT_MULTIPART_REQUEST`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipartRequest {
    /// `OFPMPF_REQ_MORE`.
    pub flags: u16,
    pub body: RequestBody,
}

fn u32_pad4(r: &mut Reader<'_>) -> Result<u32, OfpError> {
    let v = r.u32()?;
    r.pad(4)?;
    Ok(v)
}

impl MultipartRequest {
    /// In 1.5, `PORT_DESC` and `GROUP_DESC` requests carry a port / group
    /// to describe; nicflow answers only "all" (`OFPP_ANY` / `OFPG_ALL`,
    /// what `ovs-ofctl` and OVN send) and refuses one port with
    /// `OFPBRC_BAD_PORT` and one group with `OFPBRC_BAD_MULTIPART`.
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<MultipartRequest, OfpError> {
        let ty = r.u16()?;
        let flags = r.u16()?;
        r.pad(4)?;
        use RequestBody as B;
        let body = match ty {
            ofpmp::DESC => B::Desc,
            ofpmp::FLOW => B::Flow(FlowStatsRequest::decode(r)?),
            ofpmp::AGGREGATE => B::Aggregate(FlowStatsRequest::decode(r)?),
            ofpmp::TABLE => B::Table,
            ofpmp::PORT_STATS => B::PortStats {
                port_no: u32_pad4(r)?,
            },
            ofpmp::PORT_DESC if version >= OFP15_VERSION => {
                if u32_pad4(r)? != 0xffff_ffff {
                    return Err(e::brc(BadRequest::BAD_PORT));
                }
                B::PortDesc
            }
            ofpmp::PORT_DESC => B::PortDesc,
            ofpmp::GROUP => B::Group {
                group_id: u32_pad4(r)?,
            },
            ofpmp::GROUP_DESC if version >= OFP15_VERSION => {
                if u32_pad4(r)? != group::OFPG_ALL {
                    return Err(e::brc(BadRequest::BAD_MULTIPART));
                }
                B::GroupDesc
            }
            ofpmp::GROUP_DESC => B::GroupDesc,
            ofpmp::GROUP_FEATURES => B::GroupFeatures,
            ofpmp::METER => B::Meter {
                meter_id: u32_pad4(r)?,
            },
            ofpmp::METER_CONFIG => B::MeterConfig {
                meter_id: u32_pad4(r)?,
            },
            ofpmp::METER_FEATURES => B::MeterFeatures,
            ofpmp::TABLE_FEATURES => B::TableFeatures(TableFeatures::decode_list(r)?),
            _ => return Err(e::brc(BadRequest::BAD_MULTIPART)),
        };
        Ok(MultipartRequest { flags, body })
    }

    fn mp_type(&self) -> u16 {
        use RequestBody as B;
        match self.body {
            B::Desc => ofpmp::DESC,
            B::Flow(_) => ofpmp::FLOW,
            B::Aggregate(_) => ofpmp::AGGREGATE,
            B::Table => ofpmp::TABLE,
            B::PortStats { .. } => ofpmp::PORT_STATS,
            B::PortDesc => ofpmp::PORT_DESC,
            B::Group { .. } => ofpmp::GROUP,
            B::GroupDesc => ofpmp::GROUP_DESC,
            B::GroupFeatures => ofpmp::GROUP_FEATURES,
            B::Meter { .. } => ofpmp::METER,
            B::MeterConfig { .. } => ofpmp::METER_CONFIG,
            B::MeterFeatures => ofpmp::METER_FEATURES,
            B::TableFeatures(_) => ofpmp::TABLE_FEATURES,
        }
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        wire::put_u16(out, self.mp_type());
        wire::put_u16(out, self.flags);
        wire::put_zeros(out, 4);
        use RequestBody as B;
        match &self.body {
            B::PortDesc if version >= OFP15_VERSION => {
                wire::put_u32(out, 0xffff_ffff);
                wire::put_zeros(out, 4);
            }
            B::GroupDesc if version >= OFP15_VERSION => {
                wire::put_u32(out, group::OFPG_ALL);
                wire::put_zeros(out, 4);
            }
            B::Flow(f) | B::Aggregate(f) => f.encode(out),
            B::PortStats { port_no: v }
            | B::Group { group_id: v }
            | B::Meter { meter_id: v }
            | B::MeterConfig { meter_id: v } => {
                wire::put_u32(out, *v);
                wire::put_zeros(out, 4);
            }
            B::TableFeatures(t) => t.iter().for_each(|t| t.encode(out)),
            B::Desc
            | B::Table
            | B::PortDesc
            | B::GroupDesc
            | B::GroupFeatures
            | B::MeterFeatures => {}
        }
    }
}

/// `ofp_desc`: who the switch is.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Desc {
    pub mfr_desc: String,
    pub hw_desc: String,
    pub sw_desc: String,
    pub serial_num: String,
    pub dp_desc: String,
}

const DESC_STR_LEN: usize = 256;
const SERIAL_NUM_LEN: usize = 32;

impl Desc {
    fn decode(r: &mut Reader<'_>) -> Result<Desc, OfpError> {
        Ok(Desc {
            mfr_desc: wire::get_str(r, DESC_STR_LEN)?,
            hw_desc: wire::get_str(r, DESC_STR_LEN)?,
            sw_desc: wire::get_str(r, DESC_STR_LEN)?,
            serial_num: wire::get_str(r, SERIAL_NUM_LEN)?,
            dp_desc: wire::get_str(r, DESC_STR_LEN)?,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        wire::put_str(out, &self.mfr_desc, DESC_STR_LEN);
        wire::put_str(out, &self.hw_desc, DESC_STR_LEN);
        wire::put_str(out, &self.sw_desc, DESC_STR_LEN);
        wire::put_str(out, &self.serial_num, SERIAL_NUM_LEN);
        wire::put_str(out, &self.dp_desc, DESC_STR_LEN);
    }
}

/// `ofp_flow_stats`: one rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStats {
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub cookie: u64,
    pub packet_count: u64,
    pub byte_count: u64,
    pub r#match: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowStats {
    fn decode(r: &mut Reader<'_>) -> Result<FlowStats, OfpError> {
        let len = usize::from(r.peek_u16().ok_or(e::BRC_BAD_LEN)?);
        if len < 56 || len > r.remaining() {
            return Err(e::BRC_BAD_LEN);
        }
        let mut f = r.sub(len, e::BRC_BAD_LEN)?;
        f.skip(2)?;
        let table_id = f.u8()?;
        f.pad(1)?;
        let duration_sec = f.u32()?;
        let duration_nsec = f.u32()?;
        let priority = f.u16()?;
        let idle_timeout = f.u16()?;
        let hard_timeout = f.u16()?;
        let flags = f.u16()?;
        f.pad(4)?;
        Ok(FlowStats {
            table_id,
            duration_sec,
            duration_nsec,
            priority,
            idle_timeout,
            hard_timeout,
            flags,
            cookie: f.u64()?,
            packet_count: f.u64()?,
            byte_count: f.u64()?,
            r#match: oxm::decode_match(&mut f)?,
            instructions: action::decode_instructions(f.rest())?,
        })
    }

    /// `ofp15_flow_desc`: the counters move into OXS statistics after the
    /// match. Its importance is read and dropped (nicflow does not evict;
    /// 0 is written).
    fn decode15(r: &mut Reader<'_>) -> Result<FlowStats, OfpError> {
        let len = usize::from(r.peek_u16().ok_or(e::BRC_BAD_LEN)?);
        if len < 24 || len > r.remaining() {
            return Err(e::BRC_BAD_LEN);
        }
        let mut f = r.sub(len, e::BRC_BAD_LEN)?;
        f.skip(4)?;
        let table_id = f.u8()?;
        f.pad(1)?;
        let priority = f.u16()?;
        let idle_timeout = f.u16()?;
        let hard_timeout = f.u16()?;
        let flags = f.u16()?;
        let _importance = f.u16()?;
        let cookie = f.u64()?;
        let r#match = oxm::decode_match(&mut f)?;
        let st = OxsStats::decode(&mut f)?;
        let (duration_sec, duration_nsec) = st.duration.unwrap_or((0, 0));
        Ok(FlowStats {
            table_id,
            duration_sec,
            duration_nsec,
            priority,
            idle_timeout,
            hard_timeout,
            flags,
            cookie,
            packet_count: st.packet_count.unwrap_or(0),
            byte_count: st.byte_count.unwrap_or(0),
            r#match,
            instructions: action::meter_as_action(&action::decode_instructions(f.rest())?),
        })
    }

    fn encode15(&self, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u16(out, 0);
        wire::put_zeros(out, 2);
        wire::put_u8(out, self.table_id);
        wire::put_zeros(out, 1);
        wire::put_u16(out, self.priority);
        wire::put_u16(out, self.idle_timeout);
        wire::put_u16(out, self.hard_timeout);
        wire::put_u16(out, self.flags);
        wire::put_u16(out, 0);
        wire::put_u64(out, self.cookie);
        oxm::encode_match(&self.r#match, out);
        OxsStats {
            duration: Some((self.duration_sec, self.duration_nsec)),
            packet_count: Some(self.packet_count),
            byte_count: Some(self.byte_count),
            ..OxsStats::default()
        }
        .encode(out);
        action::encode_instructions_as(super::OFP15_VERSION, &self.instructions, out);
        let len = wire::len16(out, start);
        wire::patch_u16(out, start, len);
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u16(out, 0);
        wire::put_u8(out, self.table_id);
        wire::put_zeros(out, 1);
        wire::put_u32(out, self.duration_sec);
        wire::put_u32(out, self.duration_nsec);
        wire::put_u16(out, self.priority);
        wire::put_u16(out, self.idle_timeout);
        wire::put_u16(out, self.hard_timeout);
        wire::put_u16(out, self.flags);
        wire::put_zeros(out, 4);
        wire::put_u64(out, self.cookie);
        wire::put_u64(out, self.packet_count);
        wire::put_u64(out, self.byte_count);
        oxm::encode_match(&self.r#match, out);
        action::encode_instructions(&self.instructions, out);
        let len = wire::len16(out, start);
        wire::patch_u16(out, start, len);
    }
}

/// `ofp_aggregate_stats_reply`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AggregateStats {
    pub packet_count: u64,
    pub byte_count: u64,
    pub flow_count: u32,
}

/// `ofp_table_stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TableStats {
    pub table_id: u8,
    pub active_count: u32,
    pub lookup_count: u64,
    pub matched_count: u64,
}

/// `ofp_port_stats` (all-ones for a counter nicflow does not keep).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PortStats {
    pub port_no: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub rx_frame_err: u64,
    pub rx_over_err: u64,
    pub rx_crc_err: u64,
    pub collisions: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
}

impl PortStats {
    fn counters(&mut self) -> [&mut u64; 12] {
        [
            &mut self.rx_packets,
            &mut self.tx_packets,
            &mut self.rx_bytes,
            &mut self.tx_bytes,
            &mut self.rx_dropped,
            &mut self.tx_dropped,
            &mut self.rx_errors,
            &mut self.tx_errors,
            &mut self.rx_frame_err,
            &mut self.rx_over_err,
            &mut self.rx_crc_err,
            &mut self.collisions,
        ]
    }
}

/// `(packet_count, byte_count)` of one bucket or band.
pub type Counters = (u64, u64);

/// `ofp_group_stats`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GroupStats {
    pub group_id: u32,
    pub ref_count: u32,
    pub packet_count: u64,
    pub byte_count: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub bucket_stats: Vec<Counters>,
}

/// `ofp_group_desc` / `ofp15_group_desc_stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDesc {
    pub group_type: u8,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
    /// OpenFlow 1.5 only (`None` in 1.3).
    pub selection_method: Option<SelectionMethod>,
}

/// `ofp_group_features`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GroupFeatures {
    /// Bitmap of `1 << OFPGT_*`.
    pub types: u32,
    /// `OFPGFC_*`.
    pub capabilities: u32,
    pub max_groups: [u32; 4],
    /// Bitmaps of `1 << OFPAT_*` per group type.
    pub actions: [u32; 4],
}

/// `ofp_meter_stats`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MeterStats {
    pub meter_id: u32,
    pub flow_count: u32,
    pub packet_in_count: u64,
    pub byte_in_count: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub band_stats: Vec<Counters>,
}

/// `ofp_meter_config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterConfig {
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<MeterBand>,
}

/// `ofp_meter_features`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MeterFeatures {
    pub max_meter: u32,
    /// Bitmap of `1 << OFPMBT_*`.
    pub band_types: u32,
    /// `OFPMF_*`.
    pub capabilities: u32,
    pub max_bands: u8,
    pub max_color: u8,
}

/// `OFPTFPT_*` table feature property types (odd = for the table-miss
/// rule).
pub mod tfpt {
    pub const INSTRUCTIONS: u16 = 0;
    pub const NEXT_TABLES: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 4;
    pub const APPLY_ACTIONS: u16 = 6;
    pub const MATCH: u16 = 8;
    pub const WILDCARDS: u16 = 10;
    pub const WRITE_SETFIELD: u16 = 12;
    pub const APPLY_SETFIELD: u16 = 14;
    pub const EXPERIMENTER: u16 = 0xfffe;
    pub const EXPERIMENTER_MISS: u16 = 0xffff;
}

/// One table feature property, its payload kept raw (without header and
/// padding); the accessors read the common shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableFeatureProp {
    pub prop_type: u16,
    pub data: Vec<u8>,
}

impl TableFeatureProp {
    /// A list of instruction or action ids (`type`, `len = 4`).
    pub fn type_ids(prop_type: u16, types: &[u16]) -> TableFeatureProp {
        let mut data = Vec::new();
        for t in types {
            wire::put_u16(&mut data, *t);
            wire::put_u16(&mut data, 4);
        }
        TableFeatureProp { prop_type, data }
    }

    pub fn next_tables(prop_type: u16, tables: &[u8]) -> TableFeatureProp {
        TableFeatureProp {
            prop_type,
            data: tables.to_vec(),
        }
    }

    /// A list of OXM headers (`hasmask` as given, length = value size).
    pub fn oxm_ids(prop_type: u16, fields: &[(OxmField, bool)]) -> TableFeatureProp {
        let mut data = Vec::new();
        for (f, hasmask) in fields {
            OxmHeader::for_field(*f, false, *hasmask).write(&mut data);
        }
        TableFeatureProp { prop_type, data }
    }

    /// Read instruction/action ids (types only; experimenter ids skipped).
    pub fn read_type_ids(&self) -> Vec<u16> {
        let mut r = Reader::new(&self.data, tf_len());
        let mut out = Vec::new();
        while let (Some(t), Some(len)) = (r.peek_u16(), r.peek_u16_at(2)) {
            let len = usize::from(len).max(4);
            if r.skip(len).is_err() {
                break;
            }
            out.push(t);
        }
        out
    }

    /// Read OXM ids.
    pub fn read_oxm_ids(&self) -> Vec<OxmId> {
        let mut r = Reader::new(&self.data, tf_len());
        let mut out = Vec::new();
        while let Ok(h) = OxmHeader::read(&mut r) {
            out.push(h.id);
        }
        out
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u16(out, self.prop_type);
        wire::put_u16(out, (4 + self.data.len()) as u16);
        out.extend_from_slice(&self.data);
        wire::pad8_from(out, start);
    }
}

/// `ofp_table_features`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TableFeatures {
    pub table_id: u8,
    /// OpenFlow 1.5's `command` (padding in 1.3, kept for round trips).
    pub command: u8,
    pub name: String,
    pub metadata_match: u64,
    pub metadata_write: u64,
    pub config: u32,
    pub max_entries: u32,
    pub properties: Vec<TableFeatureProp>,
}

const TABLE_NAME_LEN: usize = 32;

impl TableFeatures {
    fn decode_list(r: &mut Reader<'_>) -> Result<Vec<TableFeatures>, OfpError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let len = usize::from(r.peek_u16().ok_or(tf_len())?);
            if len < 64 || !len.is_multiple_of(8) || len > r.remaining() {
                return Err(tf_len());
            }
            let mut t = r.sub(len, tf_len())?;
            t.skip(2)?;
            let table_id = t.u8()?;
            let command = t.u8()?;
            t.pad(4)?;
            let mut tf = TableFeatures {
                table_id,
                command,
                name: wire::get_str(&mut t, TABLE_NAME_LEN)?,
                metadata_match: t.u64()?,
                metadata_write: t.u64()?,
                config: t.u32()?,
                max_entries: t.u32()?,
                properties: Vec::new(),
            };
            while !t.is_empty() {
                let prop_type = t.u16()?;
                let plen = usize::from(t.u16()?);
                if plen < 4 {
                    return Err(tf_len());
                }
                let data = t.bytes(plen - 4)?.to_vec();
                // The last property's padding may be missing; be lenient.
                let pad = plen.next_multiple_of(8) - plen;
                t.skip(pad.min(t.remaining()))?;
                tf.properties.push(TableFeatureProp { prop_type, data });
            }
            out.push(tf);
        }
        Ok(out)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u16(out, 0);
        wire::put_u8(out, self.table_id);
        wire::put_u8(out, self.command);
        wire::put_zeros(out, 4);
        wire::put_str(out, &self.name, TABLE_NAME_LEN);
        wire::put_u64(out, self.metadata_match);
        wire::put_u64(out, self.metadata_write);
        wire::put_u32(out, self.config);
        wire::put_u32(out, self.max_entries);
        for p in &self.properties {
            p.encode(out);
        }
        let len = wire::len16(out, start);
        wire::patch_u16(out, start, len);
    }

    /// What nicflow's table `table_id` (of `n_tables`) supports: apply
    /// actions, clear actions (a no-op), write-metadata and goto-table to
    /// any later table; every field of [`OxmField`] to match (masks where
    /// OXM allows them) and, where settable, to set; no action set.
    pub fn nicflow(table_id: u8, n_tables: u8, max_entries: u32) -> TableFeatures {
        use crate::action::{ofpat, ofpit};
        use crate::oxm::table::{CLASS_NXM0, CLASS_NXM1};
        let instructions = [
            ofpit::GOTO_TABLE,
            ofpit::WRITE_METADATA,
            ofpit::APPLY_ACTIONS,
            ofpit::CLEAR_ACTIONS,
        ];
        let actions = [
            ofpat::OUTPUT,
            ofpat::PUSH_VLAN,
            ofpat::POP_VLAN,
            ofpat::GROUP,
            ofpat::SET_NW_TTL,
            ofpat::DEC_NW_TTL,
            ofpat::SET_FIELD,
            ofpat::EXPERIMENTER,
        ];
        let next: Vec<u8> = (table_id.saturating_add(1)..n_tables).collect();
        // Fields under their OpenFlow 1.3 names, skipping legacy NXM aliases
        // of fields that have an OXM name.
        let fields: Vec<OxmField> = OxmField::all()
            .filter(|f| {
                let id = f.id(false);
                !matches!(id.class, CLASS_NXM0 | CLASS_NXM1) || f.def().oxm.is_none()
            })
            .filter(|f| *f != OxmField::NxInPort && *f != OxmField::IpTos)
            .collect();
        let matchable: Vec<_> = fields.iter().map(|f| (*f, false)).collect();
        let wild: Vec<_> = fields
            .iter()
            .filter(|f| f.def().maskable)
            .map(|f| (*f, false))
            .collect();
        let settable: Vec<_> = fields
            .iter()
            .filter(|f| {
                (f.def().field.settable() && **f != OxmField::InPort)
                    || matches!(f, OxmField::VlanVid | OxmField::VlanPcp)
            })
            .map(|f| (*f, false))
            .collect();
        let mut props = Vec::new();
        for miss in [0, 1] {
            props.push(TableFeatureProp::type_ids(
                tfpt::INSTRUCTIONS + miss,
                &instructions,
            ));
            props.push(TableFeatureProp::next_tables(
                tfpt::NEXT_TABLES + miss,
                &next,
            ));
            props.push(TableFeatureProp::type_ids(tfpt::WRITE_ACTIONS + miss, &[]));
            props.push(TableFeatureProp::type_ids(
                tfpt::APPLY_ACTIONS + miss,
                &actions,
            ));
        }
        props.push(TableFeatureProp::oxm_ids(tfpt::MATCH, &matchable));
        props.push(TableFeatureProp::oxm_ids(tfpt::WILDCARDS, &wild));
        for miss in [0, 1] {
            props.push(TableFeatureProp::oxm_ids(tfpt::WRITE_SETFIELD + miss, &[]));
            props.push(TableFeatureProp::oxm_ids(
                tfpt::APPLY_SETFIELD + miss,
                &settable,
            ));
        }
        TableFeatures {
            table_id,
            command: 0,
            name: format!("table{table_id}"),
            metadata_match: u64::MAX,
            metadata_write: u64::MAX,
            config: 0,
            max_entries,
            properties: props,
        }
    }
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyBody {
    Desc(Desc),
    Flow(Vec<FlowStats>),
    Aggregate(AggregateStats),
    Table(Vec<TableStats>),
    PortStats(Vec<PortStats>),
    PortDesc(Vec<Port>),
    Group(Vec<GroupStats>),
    GroupDesc(Vec<GroupDesc>),
    GroupFeatures(GroupFeatures),
    Meter(Vec<MeterStats>),
    MeterConfig(Vec<MeterConfig>),
    MeterFeatures(MeterFeatures),
    TableFeatures(Vec<TableFeatures>),
}

/// `OFPT_MULTIPART_REPLY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipartReply {
    /// `OFPMPF_REPLY_MORE`.
    pub flags: u16,
    pub body: ReplyBody,
}

/// Decode records of `size` bytes until `r` is empty.
fn fixed_records<T>(
    r: &mut Reader<'_>,
    size: usize,
    f: impl Fn(&mut Reader<'_>) -> Result<T, OfpError>,
) -> Result<Vec<T>, OfpError> {
    if !r.remaining().is_multiple_of(size) {
        return Err(e::BRC_BAD_LEN);
    }
    let mut out = Vec::new();
    while !r.is_empty() {
        out.push(f(r)?);
    }
    Ok(out)
}

/// Decode length-prefixed records (length at `len_at`, minimum `min`).
fn sized_records<T>(
    r: &mut Reader<'_>,
    len_at: usize,
    min: usize,
    f: impl Fn(&mut Reader<'_>) -> Result<T, OfpError>,
) -> Result<Vec<T>, OfpError> {
    let mut out = Vec::new();
    while !r.is_empty() {
        let len = usize::from(r.peek_u16_at(len_at).ok_or(e::BRC_BAD_LEN)?);
        if len < min || len > r.remaining() {
            return Err(e::BRC_BAD_LEN);
        }
        let mut sub = r.sub(len, e::BRC_BAD_LEN)?;
        out.push(f(&mut sub)?);
    }
    Ok(out)
}

fn counters(r: &mut Reader<'_>) -> Result<Vec<Counters>, OfpError> {
    fixed_records(r, 16, |r| Ok((r.u64()?, r.u64()?)))
}

impl MultipartReply {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<MultipartReply, OfpError> {
        let ty = r.u16()?;
        let flags = r.u16()?;
        r.pad(4)?;
        use ReplyBody as B;
        let v15 = version >= OFP15_VERSION;
        let body = match ty {
            ofpmp::FLOW if v15 => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    v.push(FlowStats::decode15(r)?);
                }
                B::Flow(v)
            }
            ofpmp::AGGREGATE if v15 => {
                let st = OxsStats::decode(r)?;
                B::Aggregate(AggregateStats {
                    packet_count: st.packet_count.unwrap_or(0),
                    byte_count: st.byte_count.unwrap_or(0),
                    flow_count: st.flow_count.unwrap_or(0),
                })
            }
            ofpmp::PORT_STATS if v15 => B::PortStats(sized_records(r, 0, 80, |r| {
                r.skip(4)?;
                let mut p = PortStats {
                    port_no: r.u32()?,
                    duration_sec: r.u32()?,
                    duration_nsec: r.u32()?,
                    ..PortStats::default()
                };
                for c in p.counters().into_iter().take(8) {
                    *c = r.u64()?;
                }
                let bad = OfpError::BadProperty(crate::error::BadProperty::BAD_LEN);
                for pr in super::prop::read_all(r, bad)? {
                    if pr.ty == 0 {
                        let mut e = Reader::new(pr.value, bad);
                        e.pad(4)?;
                        for c in p.counters().into_iter().skip(8) {
                            *c = e.u64()?;
                        }
                    }
                }
                Ok(p)
            })?),
            ofpmp::PORT_DESC if v15 => B::PortDesc(sized_records(r, 4, 40, Port::decode14)?),
            ofpmp::GROUP_DESC if v15 => B::GroupDesc(sized_records(r, 0, 16, |g| {
                g.skip(2)?;
                let group_type = g.u8()?;
                g.pad(1)?;
                let group_id = g.u32()?;
                let bucket_len = usize::from(g.u16()?);
                g.pad(6)?;
                let (buckets, selection_method) = group::decode_buckets15(g, bucket_len)?;
                Ok(GroupDesc {
                    group_type,
                    group_id,
                    buckets,
                    selection_method,
                })
            })?),
            ofpmp::DESC => B::Desc(Desc::decode(r)?),
            ofpmp::FLOW => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    v.push(FlowStats::decode(r)?);
                }
                B::Flow(v)
            }
            ofpmp::AGGREGATE => {
                let a = AggregateStats {
                    packet_count: r.u64()?,
                    byte_count: r.u64()?,
                    flow_count: r.u32()?,
                };
                r.pad(4)?;
                B::Aggregate(a)
            }
            ofpmp::TABLE => B::Table(fixed_records(r, 24, |r| {
                let table_id = r.u8()?;
                r.pad(3)?;
                Ok(TableStats {
                    table_id,
                    active_count: r.u32()?,
                    lookup_count: r.u64()?,
                    matched_count: r.u64()?,
                })
            })?),
            ofpmp::PORT_STATS => B::PortStats(fixed_records(r, 112, |r| {
                let mut p = PortStats {
                    port_no: u32_pad4(r)?,
                    ..PortStats::default()
                };
                for c in p.counters() {
                    *c = r.u64()?;
                }
                p.duration_sec = r.u32()?;
                p.duration_nsec = r.u32()?;
                Ok(p)
            })?),
            ofpmp::PORT_DESC => B::PortDesc(fixed_records(r, Port::LEN, Port::decode)?),
            ofpmp::GROUP => B::Group(sized_records(r, 0, 40, |g| {
                g.skip(4)?;
                let group_id = g.u32()?;
                let ref_count = g.u32()?;
                g.pad(4)?;
                Ok(GroupStats {
                    group_id,
                    ref_count,
                    packet_count: g.u64()?,
                    byte_count: g.u64()?,
                    duration_sec: g.u32()?,
                    duration_nsec: g.u32()?,
                    bucket_stats: counters(g)?,
                })
            })?),
            ofpmp::GROUP_DESC => B::GroupDesc(sized_records(r, 0, 8, |g| {
                g.skip(2)?;
                let group_type = g.u8()?;
                g.pad(1)?;
                Ok(GroupDesc {
                    group_type,
                    group_id: g.u32()?,
                    buckets: Bucket::decode_list(g)?,
                    selection_method: None,
                })
            })?),
            ofpmp::GROUP_FEATURES => {
                let mut g = GroupFeatures {
                    types: r.u32()?,
                    capabilities: r.u32()?,
                    ..GroupFeatures::default()
                };
                for v in g.max_groups.iter_mut().chain(g.actions.iter_mut()) {
                    *v = r.u32()?;
                }
                B::GroupFeatures(g)
            }
            ofpmp::METER => B::Meter(sized_records(r, 4, 40, |m| {
                let meter_id = m.u32()?;
                m.skip(2)?;
                m.pad(6)?;
                Ok(MeterStats {
                    meter_id,
                    flow_count: m.u32()?,
                    packet_in_count: m.u64()?,
                    byte_in_count: m.u64()?,
                    duration_sec: m.u32()?,
                    duration_nsec: m.u32()?,
                    band_stats: counters(m)?,
                })
            })?),
            ofpmp::METER_CONFIG => B::MeterConfig(sized_records(r, 0, 8, |m| {
                m.skip(2)?;
                let flags = m.u16()?;
                check_flags(flags)?;
                Ok(MeterConfig {
                    flags,
                    meter_id: m.u32()?,
                    bands: MeterBand::decode_list(m)?,
                })
            })?),
            ofpmp::METER_FEATURES => {
                let f = MeterFeatures {
                    max_meter: r.u32()?,
                    band_types: r.u32()?,
                    capabilities: r.u32()?,
                    max_bands: r.u8()?,
                    max_color: r.u8()?,
                };
                r.pad(2)?;
                B::MeterFeatures(f)
            }
            ofpmp::TABLE_FEATURES => B::TableFeatures(TableFeatures::decode_list(r)?),
            _ => return Err(e::brc(BadRequest::BAD_MULTIPART)),
        };
        Ok(MultipartReply { flags, body })
    }

    fn mp_type(&self) -> u16 {
        use ReplyBody as B;
        match self.body {
            B::Desc(_) => ofpmp::DESC,
            B::Flow(_) => ofpmp::FLOW,
            B::Aggregate(_) => ofpmp::AGGREGATE,
            B::Table(_) => ofpmp::TABLE,
            B::PortStats(_) => ofpmp::PORT_STATS,
            B::PortDesc(_) => ofpmp::PORT_DESC,
            B::Group(_) => ofpmp::GROUP,
            B::GroupDesc(_) => ofpmp::GROUP_DESC,
            B::GroupFeatures(_) => ofpmp::GROUP_FEATURES,
            B::Meter(_) => ofpmp::METER,
            B::MeterConfig(_) => ofpmp::METER_CONFIG,
            B::MeterFeatures(_) => ofpmp::METER_FEATURES,
            B::TableFeatures(_) => ofpmp::TABLE_FEATURES,
        }
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        wire::put_u16(out, self.mp_type());
        wire::put_u16(out, self.flags);
        wire::put_zeros(out, 4);
        use ReplyBody as B;
        let v15 = version >= OFP15_VERSION;
        match &self.body {
            B::Flow(v) if v15 => v.iter().for_each(|f| f.encode15(out)),
            B::Aggregate(a) if v15 => OxsStats {
                packet_count: Some(a.packet_count),
                byte_count: Some(a.byte_count),
                flow_count: Some(a.flow_count),
                ..OxsStats::default()
            }
            .encode(out),
            B::PortStats(v) if v15 => {
                for p in v {
                    let mut p = *p;
                    let start = out.len();
                    wire::put_u16(out, 0);
                    wire::put_zeros(out, 2);
                    wire::put_u32(out, p.port_no);
                    wire::put_u32(out, p.duration_sec);
                    wire::put_u32(out, p.duration_nsec);
                    let c = p.counters();
                    for c in &c[..8] {
                        wire::put_u64(out, **c);
                    }
                    let at = super::prop::start(out, 0);
                    wire::put_zeros(out, 4);
                    for c in &c[8..] {
                        wire::put_u64(out, **c);
                    }
                    super::prop::end(out, at);
                    let len = wire::len16(out, start);
                    wire::patch_u16(out, start, len);
                }
            }
            B::PortDesc(v) if v15 => v.iter().for_each(|p| p.encode14(out)),
            B::GroupDesc(v) if v15 => {
                for g in v {
                    let start = out.len();
                    wire::put_u16(out, 0);
                    wire::put_u8(out, g.group_type);
                    wire::put_zeros(out, 1);
                    wire::put_u32(out, g.group_id);
                    let len_at = out.len();
                    wire::put_u16(out, 0);
                    wire::put_zeros(out, 6);
                    group::encode_buckets15(
                        &g.buckets,
                        g.group_type,
                        &g.selection_method,
                        len_at,
                        out,
                    );
                    let len = wire::len16(out, start);
                    wire::patch_u16(out, start, len);
                }
            }
            B::Desc(d) => d.encode(out),
            B::Flow(v) => v.iter().for_each(|f| f.encode(out)),
            B::Aggregate(a) => {
                wire::put_u64(out, a.packet_count);
                wire::put_u64(out, a.byte_count);
                wire::put_u32(out, a.flow_count);
                wire::put_zeros(out, 4);
            }
            B::Table(v) => {
                for t in v {
                    wire::put_u8(out, t.table_id);
                    wire::put_zeros(out, 3);
                    wire::put_u32(out, t.active_count);
                    wire::put_u64(out, t.lookup_count);
                    wire::put_u64(out, t.matched_count);
                }
            }
            B::PortStats(v) => {
                for p in v {
                    let mut p = *p;
                    wire::put_u32(out, p.port_no);
                    wire::put_zeros(out, 4);
                    for c in p.counters() {
                        wire::put_u64(out, *c);
                    }
                    wire::put_u32(out, p.duration_sec);
                    wire::put_u32(out, p.duration_nsec);
                }
            }
            B::PortDesc(v) => v.iter().for_each(|p| p.encode(out)),
            B::Group(v) => {
                for g in v {
                    let start = out.len();
                    wire::put_u16(out, 0);
                    wire::put_zeros(out, 2);
                    wire::put_u32(out, g.group_id);
                    wire::put_u32(out, g.ref_count);
                    wire::put_zeros(out, 4);
                    wire::put_u64(out, g.packet_count);
                    wire::put_u64(out, g.byte_count);
                    wire::put_u32(out, g.duration_sec);
                    wire::put_u32(out, g.duration_nsec);
                    for (p, b) in &g.bucket_stats {
                        wire::put_u64(out, *p);
                        wire::put_u64(out, *b);
                    }
                    let len = wire::len16(out, start);
                    wire::patch_u16(out, start, len);
                }
            }
            B::GroupDesc(v) => {
                for g in v {
                    let start = out.len();
                    wire::put_u16(out, 0);
                    wire::put_u8(out, g.group_type);
                    wire::put_zeros(out, 1);
                    wire::put_u32(out, g.group_id);
                    g.buckets.iter().for_each(|b| b.encode(out));
                    let len = wire::len16(out, start);
                    wire::patch_u16(out, start, len);
                }
            }
            B::GroupFeatures(g) => {
                wire::put_u32(out, g.types);
                wire::put_u32(out, g.capabilities);
                for v in g.max_groups.iter().chain(g.actions.iter()) {
                    wire::put_u32(out, *v);
                }
            }
            B::Meter(v) => {
                for m in v {
                    let start = out.len();
                    wire::put_u32(out, m.meter_id);
                    wire::put_u16(out, 0);
                    wire::put_zeros(out, 6);
                    wire::put_u32(out, m.flow_count);
                    wire::put_u64(out, m.packet_in_count);
                    wire::put_u64(out, m.byte_in_count);
                    wire::put_u32(out, m.duration_sec);
                    wire::put_u32(out, m.duration_nsec);
                    for (p, b) in &m.band_stats {
                        wire::put_u64(out, *p);
                        wire::put_u64(out, *b);
                    }
                    let len = wire::len16(out, start);
                    wire::patch_u16(out, start + 4, len);
                }
            }
            B::MeterConfig(v) => {
                for m in v {
                    let start = out.len();
                    wire::put_u16(out, 0);
                    wire::put_u16(out, m.flags);
                    wire::put_u32(out, m.meter_id);
                    m.bands.iter().for_each(|b| b.encode(out));
                    let len = wire::len16(out, start);
                    wire::patch_u16(out, start, len);
                }
            }
            B::MeterFeatures(f) => {
                wire::put_u32(out, f.max_meter);
                wire::put_u32(out, f.band_types);
                wire::put_u32(out, f.capabilities);
                wire::put_u8(out, f.max_bands);
                wire::put_u8(out, f.max_color);
                wire::put_zeros(out, 2);
            }
            B::TableFeatures(v) => v.iter().for_each(|t| t.encode(out)),
        }
    }
}
