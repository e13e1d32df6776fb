//! Ports as OpenFlow describes them (`ofp_port`), `PORT_STATUS` (a port
//! came, went or changed) and `PORT_MOD` (a controller changes a port's
//! config bits; decoded so the daemon can apply or refuse it).

use crate::error::{BadProperty, OfpError};
use crate::wire::{self, Reader};

use super::prop;

/// `OFPPDPT14_ETHERNET` (port description) / `OFPPMPT14_ETHERNET` (port
/// mod) property type.
const PROP_ETHERNET: u16 = 0;

/// `OFP_MAX_PORT_NAME_LEN`.
pub const PORT_NAME_LEN: usize = 16;

/// `OFPPC_*` config bits.
pub mod config {
    pub const PORT_DOWN: u32 = 1 << 0;
    pub const NO_RECV: u32 = 1 << 2;
    pub const NO_FWD: u32 = 1 << 5;
    pub const NO_PACKET_IN: u32 = 1 << 6;
}

/// `OFPPS_*` state bits.
pub mod state {
    pub const LINK_DOWN: u32 = 1 << 0;
    pub const BLOCKED: u32 = 1 << 1;
    pub const LIVE: u32 = 1 << 2;
}

/// `ofp_port` (64 bytes).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Port {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    /// At most 15 bytes (NUL-terminated on the wire).
    pub name: String,
    pub config: u32,
    pub state: u32,
    /// `OFPPF_*` feature bitmaps.
    pub curr: u32,
    pub advertised: u32,
    pub supported: u32,
    pub peer: u32,
    /// kbit/s.
    pub curr_speed: u32,
    pub max_speed: u32,
}

impl Port {
    pub const LEN: usize = 64;

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Port, OfpError> {
        let port_no = r.u32()?;
        r.pad(4)?;
        let hw_addr = r.array()?;
        r.pad(2)?;
        Ok(Port {
            port_no,
            hw_addr,
            name: wire::get_str(r, PORT_NAME_LEN)?,
            config: r.u32()?,
            state: r.u32()?,
            curr: r.u32()?,
            advertised: r.u32()?,
            supported: r.u32()?,
            peer: r.u32()?,
            curr_speed: r.u32()?,
            max_speed: r.u32()?,
        })
    }

    /// `ofp14_port` (OpenFlow 1.4+): the features move into an Ethernet
    /// property; other properties (optical) are skipped.
    pub(crate) fn decode14(r: &mut Reader<'_>) -> Result<Port, OfpError> {
        let port_no = r.u32()?;
        let len = usize::from(r.u16()?);
        if len < 40 || len - 6 > r.remaining() {
            return Err(r.short_error());
        }
        let mut r = r.sub(len - 6, r.short_error())?;
        r.pad(2)?;
        let hw_addr = r.array()?;
        r.pad(2)?;
        let mut p = Port {
            port_no,
            hw_addr,
            name: wire::get_str(&mut r, PORT_NAME_LEN)?,
            config: r.u32()?,
            state: r.u32()?,
            ..Port::default()
        };
        let bad = OfpError::BadProperty(BadProperty::BAD_LEN);
        for pr in prop::read_all(&mut r, bad)? {
            if pr.ty == PROP_ETHERNET {
                let mut e = Reader::new(pr.value, bad);
                e.pad(4)?;
                p.curr = e.u32()?;
                p.advertised = e.u32()?;
                p.supported = e.u32()?;
                p.peer = e.u32()?;
                p.curr_speed = e.u32()?;
                p.max_speed = e.u32()?;
            }
        }
        Ok(p)
    }

    pub(crate) fn encode14(&self, out: &mut Vec<u8>) {
        let start = out.len();
        wire::put_u32(out, self.port_no);
        wire::put_u16(out, 0);
        wire::put_zeros(out, 2);
        out.extend_from_slice(&self.hw_addr);
        wire::put_zeros(out, 2);
        wire::put_str(out, &self.name, PORT_NAME_LEN);
        wire::put_u32(out, self.config);
        wire::put_u32(out, self.state);
        let at = prop::start(out, PROP_ETHERNET);
        wire::put_zeros(out, 4);
        for v in [
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            wire::put_u32(out, v);
        }
        prop::end(out, at);
        let len = wire::len16(out, start);
        wire::patch_u16(out, start + 4, len);
    }

    /// The port in `version`'s layout.
    pub(crate) fn decode_v(version: u8, r: &mut Reader<'_>) -> Result<Port, OfpError> {
        if version >= super::OFP14_VERSION {
            Port::decode14(r)
        } else {
            Port::decode(r)
        }
    }

    pub(crate) fn encode_v(&self, version: u8, out: &mut Vec<u8>) {
        if version >= super::OFP14_VERSION {
            self.encode14(out)
        } else {
            self.encode(out)
        }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u32(out, self.port_no);
        wire::put_zeros(out, 4);
        out.extend_from_slice(&self.hw_addr);
        wire::put_zeros(out, 2);
        wire::put_str(out, &self.name, PORT_NAME_LEN);
        for v in [
            self.config,
            self.state,
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            wire::put_u32(out, v);
        }
    }
}

/// `OFPPR_*`.
pub mod reason {
    pub const ADD: u8 = 0;
    pub const DELETE: u8 = 1;
    pub const MODIFY: u8 = 2;
}

/// `OFPT_PORT_STATUS`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PortStatus {
    pub reason: u8,
    pub desc: Port,
}

impl PortStatus {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<PortStatus, OfpError> {
        let reason = r.u8()?;
        r.pad(7)?;
        Ok(PortStatus {
            reason,
            desc: Port::decode_v(version, r)?,
        })
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        wire::put_u8(out, self.reason);
        wire::put_zeros(out, 7);
        self.desc.encode_v(version, out);
    }
}

/// `OFPT_PORT_MOD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PortMod {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    pub config: u32,
    /// Which `config` bits to change.
    pub mask: u32,
    /// `OFPPF_*` to advertise; 0 = unchanged.
    pub advertise: u32,
}

impl PortMod {
    pub(super) fn decode(version: u8, r: &mut Reader<'_>) -> Result<PortMod, OfpError> {
        let port_no = r.u32()?;
        r.pad(4)?;
        let hw_addr = r.array()?;
        r.pad(2)?;
        if version >= super::OFP14_VERSION {
            let mut p = PortMod {
                port_no,
                hw_addr,
                config: r.u32()?,
                mask: r.u32()?,
                advertise: 0,
            };
            let bad = OfpError::BadProperty(BadProperty::BAD_LEN);
            for pr in prop::read_all(r, bad)? {
                match pr.ty {
                    PROP_ETHERNET => p.advertise = prop::get_u32(&pr, bad)?,
                    // Optical and experimenter properties: nicflow has no
                    // such ports.
                    _ => return Err(OfpError::BadProperty(BadProperty::BAD_TYPE)),
                }
            }
            return Ok(p);
        }
        let p = PortMod {
            port_no,
            hw_addr,
            config: r.u32()?,
            mask: r.u32()?,
            advertise: r.u32()?,
        };
        r.pad(4)?;
        Ok(p)
    }

    pub(super) fn encode(&self, version: u8, out: &mut Vec<u8>) {
        wire::put_u32(out, self.port_no);
        wire::put_zeros(out, 4);
        out.extend_from_slice(&self.hw_addr);
        wire::put_zeros(out, 2);
        wire::put_u32(out, self.config);
        wire::put_u32(out, self.mask);
        if version >= super::OFP14_VERSION {
            if self.advertise != 0 {
                prop::put_u32(out, PROP_ETHERNET, self.advertise);
            }
            return;
        }
        wire::put_u32(out, self.advertise);
        wire::put_zeros(out, 4);
    }
}
