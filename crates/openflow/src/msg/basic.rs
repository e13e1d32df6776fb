//! Small fixed-layout messages: errors, switch features and configuration,
//! roles, asynchronous-message configuration, table configuration,
//! experimenter messages.

use crate::error::OfpError;
use crate::wire::{self, Reader};

/// `OFPT_ERROR`. For an experimenter error (`type` 0xffff) the error is
/// `Other { ty: 0xffff, code: exp_type }` and `data` starts with the
/// 4-byte experimenter id, so the message re-encodes unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorMsg {
    /// Header version (1.3, or the peer's when refusing a hello).
    pub version: u8,
    pub error: OfpError,
    /// Usually the first 64 bytes of the offending message.
    pub data: Vec<u8>,
}

impl ErrorMsg {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<ErrorMsg, OfpError> {
        let ty = r.u16()?;
        let code = r.u16()?;
        Ok(ErrorMsg {
            version,
            error: OfpError::from_type_code(ty, code),
            data: r.rest().to_vec(),
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let (ty, code) = self.error.type_code();
        wire::put_u16(out, ty);
        wire::put_u16(out, code);
        out.extend_from_slice(&self.data);
    }
}

/// `OFPT_EXPERIMENTER`: kept opaque (nicflow answers unknown ones with
/// `OFPBRC_BAD_EXPERIMENTER`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Experimenter {
    pub experimenter: u32,
    pub exp_type: u32,
    pub data: Vec<u8>,
}

impl Experimenter {
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u32(out, self.experimenter);
        wire::put_u32(out, self.exp_type);
        out.extend_from_slice(&self.data);
    }
}

/// `OFPC_*` capability bits of [`SwitchFeatures`].
pub mod capabilities {
    pub const FLOW_STATS: u32 = 1 << 0;
    pub const TABLE_STATS: u32 = 1 << 1;
    pub const PORT_STATS: u32 = 1 << 2;
    pub const GROUP_STATS: u32 = 1 << 3;
    pub const IP_REASM: u32 = 1 << 5;
    pub const QUEUE_STATS: u32 = 1 << 6;
    pub const PORT_BLOCKED: u32 = 1 << 8;
}

/// `OFPT_FEATURES_REPLY` (OpenFlow 1.3: no port list; ports come from a
/// `PORT_DESC` multipart request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SwitchFeatures {
    pub datapath_id: u64,
    pub n_buffers: u32,
    pub n_tables: u8,
    pub auxiliary_id: u8,
    pub capabilities: u32,
    pub reserved: u32,
}

impl SwitchFeatures {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<SwitchFeatures, OfpError> {
        let f = SwitchFeatures {
            datapath_id: r.u64()?,
            n_buffers: r.u32()?,
            n_tables: r.u8()?,
            auxiliary_id: r.u8()?,
            capabilities: {
                r.pad(2)?;
                r.u32()?
            },
            reserved: r.u32()?,
        };
        Ok(f)
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u64(out, self.datapath_id);
        wire::put_u32(out, self.n_buffers);
        wire::put_u8(out, self.n_tables);
        wire::put_u8(out, self.auxiliary_id);
        wire::put_zeros(out, 2);
        wire::put_u32(out, self.capabilities);
        wire::put_u32(out, self.reserved);
    }
}

/// `OFPT_GET_CONFIG_REPLY` / `OFPT_SET_CONFIG`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SwitchConfig {
    /// `OFPC_FRAG_*`.
    pub flags: u16,
    /// Bytes of a table-miss packet sent to the controller
    /// (`OFPCML_NO_BUFFER` = 0xffff: all).
    pub miss_send_len: u16,
}

impl SwitchConfig {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<SwitchConfig, OfpError> {
        Ok(SwitchConfig {
            flags: r.u16()?,
            miss_send_len: r.u16()?,
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u16(out, self.flags);
        wire::put_u16(out, self.miss_send_len);
    }
}

/// `OFPCR_ROLE_*`.
pub mod role {
    pub const NOCHANGE: u32 = 0;
    pub const EQUAL: u32 = 1;
    pub const MASTER: u32 = 2;
    pub const SLAVE: u32 = 3;
}

/// `OFPT_ROLE_REQUEST` / `OFPT_ROLE_REPLY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Role {
    pub role: u32,
    pub generation_id: u64,
}

impl Role {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<Role, OfpError> {
        let role = r.u32()?;
        r.pad(4)?;
        Ok(Role {
            role,
            generation_id: r.u64()?,
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u32(out, self.role);
        wire::put_zeros(out, 4);
        wire::put_u64(out, self.generation_id);
    }
}

/// `OFPT_GET_ASYNC_REPLY` / `OFPT_SET_ASYNC`: which asynchronous messages a
/// controller gets, `[0]` in the master/equal role, `[1]` as a slave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AsyncConfig {
    /// Bitmaps of `OFPR_*` packet-in reasons.
    pub packet_in_mask: [u32; 2],
    /// Bitmaps of `OFPPR_*` port-status reasons.
    pub port_status_mask: [u32; 2],
    /// Bitmaps of `OFPRR_*` flow-removed reasons.
    pub flow_removed_mask: [u32; 2],
}

/// `OFPACPT_*` (OpenFlow 1.4+): property `2k` is the slave mask and
/// `2k + 1` the master mask of packet-in, port-status, flow-removed.
const ASYNC_PROPS: u16 = 6;

impl AsyncConfig {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<AsyncConfig, OfpError> {
        let mut a = AsyncConfig::default();
        if version >= super::OFP14_VERSION {
            // Properties; types nicflow has no mask for (role status,
            // table status, request forward, experimenter) are ignored.
            let bad = OfpError::BadProperty(crate::error::BadProperty::BAD_LEN);
            for p in super::prop::read_all(r, bad)? {
                if p.ty < ASYNC_PROPS {
                    let v = super::prop::get_u32(&p, bad)?;
                    let m = match p.ty / 2 {
                        0 => &mut a.packet_in_mask,
                        1 => &mut a.port_status_mask,
                        _ => &mut a.flow_removed_mask,
                    };
                    m[usize::from(p.ty % 2 == 0)] = v;
                }
            }
            return Ok(a);
        }
        for m in [
            &mut a.packet_in_mask,
            &mut a.port_status_mask,
            &mut a.flow_removed_mask,
        ] {
            m[0] = r.u32()?;
            m[1] = r.u32()?;
        }
        Ok(a)
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        if version >= super::OFP14_VERSION {
            for ty in 0..ASYNC_PROPS {
                let m = match ty / 2 {
                    0 => &self.packet_in_mask,
                    1 => &self.port_status_mask,
                    _ => &self.flow_removed_mask,
                };
                super::prop::put_u32(out, ty, m[usize::from(ty % 2 == 0)]);
            }
            return;
        }
        for m in [
            &self.packet_in_mask,
            &self.port_status_mask,
            &self.flow_removed_mask,
        ] {
            wire::put_u32(out, m[0]);
            wire::put_u32(out, m[1]);
        }
    }
}

/// `OFPT_TABLE_MOD` (OpenFlow 1.3 defines no config bits; 0xff = all
/// tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TableMod {
    pub table_id: u8,
    pub config: u32,
}

impl TableMod {
    /// At 1.4+ properties (eviction, vacancy) may follow; nicflow has
    /// neither, so they are skipped (checked for framing only).
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<TableMod, OfpError> {
        let table_id = r.u8()?;
        r.pad(3)?;
        let t = TableMod {
            table_id,
            config: r.u32()?,
        };
        if version >= super::OFP14_VERSION {
            let bad = OfpError::BadProperty(crate::error::BadProperty::BAD_LEN);
            super::prop::read_all(r, bad)?;
        }
        Ok(t)
    }

    pub(super) fn encode(&self, _version: u8, out: &mut Vec<u8>) {
        wire::put_u8(out, self.table_id);
        wire::put_zeros(out, 3);
        wire::put_u32(out, self.config);
    }
}
