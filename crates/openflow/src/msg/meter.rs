//! Meters: `OFPT_METER_MOD` and meter bands (shared with the
//! `METER_CONFIG` multipart reply). nicflow does not run meters yet; these
//! are decoded so the daemon can store, report or refuse them with the
//! right `OFPMMFC_*` code.

use crate::error::{e, MeterModFailed, OfpError};
use crate::wire::{self, Reader};

/// `OFPMC_*`.
pub mod command {
    pub const ADD: u16 = 0;
    pub const MODIFY: u16 = 1;
    pub const DELETE: u16 = 2;
}

/// `OFPMF_*`.
pub mod flags {
    pub const KBPS: u16 = 1 << 0;
    pub const PKTPS: u16 = 1 << 1;
    pub const BURST: u16 = 1 << 2;
    pub const STATS: u16 = 1 << 3;
    pub const ALL: u16 = 0xf;
}

/// `OFPMBT_*`.
pub mod band_type {
    pub const DROP: u16 = 1;
    pub const DSCP_REMARK: u16 = 2;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// `OFPM_ALL`: every meter (stats requests, delete).
pub const OFPM_ALL: u32 = 0xffff_ffff;

fn mm(c: MeterModFailed) -> OfpError {
    OfpError::MeterModFailed(c)
}

/// What a band does once its rate is exceeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BandKind {
    Drop,
    DscpRemark { prec_level: u8 },
    Experimenter { experimenter: u32, data: Vec<u8> },
}

/// One meter band.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterBand {
    /// kbit/s or packet/s, per the meter's flags.
    pub rate: u32,
    pub burst_size: u32,
    pub kind: BandKind,
}

impl MeterBand {
    pub(crate) fn decode_list(r: &mut Reader<'_>) -> Result<Vec<MeterBand>, OfpError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let ty = r.peek_u16().ok_or(e::BRC_BAD_LEN)?;
            let len = usize::from(r.peek_u16_at(2).ok_or(e::BRC_BAD_LEN)?);
            if len < 16 || !len.is_multiple_of(8) || len > r.remaining() {
                return Err(e::BRC_BAD_LEN);
            }
            let mut b = r.sub(len, e::BRC_BAD_LEN)?;
            b.skip(4)?;
            let rate = b.u32()?;
            let burst_size = b.u32()?;
            let kind = match ty {
                band_type::DROP => BandKind::Drop,
                band_type::DSCP_REMARK => BandKind::DscpRemark {
                    prec_level: b.u8()?,
                },
                band_type::EXPERIMENTER => BandKind::Experimenter {
                    experimenter: b.u32()?,
                    data: b.rest().to_vec(),
                },
                _ => return Err(mm(MeterModFailed::BAD_BAND)),
            };
            out.push(MeterBand {
                rate,
                burst_size,
                kind,
            });
        }
        Ok(out)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let ty = match self.kind {
            BandKind::Drop => band_type::DROP,
            BandKind::DscpRemark { .. } => band_type::DSCP_REMARK,
            BandKind::Experimenter { .. } => band_type::EXPERIMENTER,
        };
        wire::put_u16(out, ty);
        wire::put_u16(out, 0);
        wire::put_u32(out, self.rate);
        wire::put_u32(out, self.burst_size);
        match &self.kind {
            BandKind::Drop => wire::put_zeros(out, 4),
            BandKind::DscpRemark { prec_level } => {
                wire::put_u8(out, *prec_level);
                wire::put_zeros(out, 3);
            }
            BandKind::Experimenter { experimenter, data } => {
                wire::put_u32(out, *experimenter);
                out.extend_from_slice(data);
                wire::pad8_from(out, start);
            }
        }
        let len = wire::len16(out, start);
        wire::patch_u16(out, start + 2, len);
    }
}

/// Check meter flags as Open vSwitch does: known bits, not both rate units.
pub(crate) fn check_flags(f: u16) -> Result<(), OfpError> {
    if f & !flags::ALL != 0 || (f & flags::KBPS != 0 && f & flags::PKTPS != 0) {
        return Err(mm(MeterModFailed::BAD_FLAGS));
    }
    Ok(())
}

/// `OFPT_METER_MOD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterMod {
    pub command: u16,
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<MeterBand>,
}

impl MeterMod {
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<MeterMod, OfpError> {
        let command = r.u16()?;
        let flags = r.u16()?;
        let meter_id = r.u32()?;
        if command > command::DELETE {
            return Err(mm(MeterModFailed::BAD_COMMAND));
        }
        check_flags(flags)?;
        Ok(MeterMod {
            command,
            flags,
            meter_id,
            bands: MeterBand::decode_list(r)?,
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u16(out, self.command);
        wire::put_u16(out, self.flags);
        wire::put_u32(out, self.meter_id);
        for b in &self.bands {
            b.encode(out);
        }
    }
}
