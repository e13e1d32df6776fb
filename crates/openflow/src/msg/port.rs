//! Ports as OpenFlow describes them (`ofp_port`), `PORT_STATUS` (a port
//! came, went or changed) and `PORT_MOD` (a controller changes a port's
//! config bits; decoded so the daemon can apply or refuse it).

use crate::error::OfpError;
use crate::wire::{self, Reader};

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
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<PortStatus, OfpError> {
        let reason = r.u8()?;
        r.pad(7)?;
        Ok(PortStatus {
            reason,
            desc: Port::decode(r)?,
        })
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u8(out, self.reason);
        wire::put_zeros(out, 7);
        self.desc.encode(out);
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
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<PortMod, OfpError> {
        let port_no = r.u32()?;
        r.pad(4)?;
        let hw_addr = r.array()?;
        r.pad(2)?;
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

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        wire::put_u32(out, self.port_no);
        wire::put_zeros(out, 4);
        out.extend_from_slice(&self.hw_addr);
        wire::put_zeros(out, 2);
        wire::put_u32(out, self.config);
        wire::put_u32(out, self.mask);
        wire::put_u32(out, self.advertise);
        wire::put_zeros(out, 4);
    }
}
