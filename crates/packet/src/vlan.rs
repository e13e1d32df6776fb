//! IEEE 802.1Q / 802.1ad VLAN tags.
//!
//! Tags sit between the MAC addresses and the real EtherType, so on the path
//! port rx ring -> parse -> flow key -> classifier/caches -> actions -> port
//! tx they are what the parser must step over before it can find L3, what the
//! flow key records (up to two TCIs, like Open vSwitch's `vlans[2]`), and what
//! push/pop/set-VLAN actions edit.
//!
//! On the wire a tag is TPID (2 bytes, in the position of the outer
//! EtherType) followed by the TCI and the next EtherType. Because the TPID is
//! read as "the EtherType of the previous header", this view covers only the
//! 4 bytes *after* the TPID — TCI and inner EtherType — so views chain:
//! `ethernet::Packet::ethertype() == ETHERTYPE_VLAN` ->
//! `vlan::Packet::new_checked(eth.payload())`.

use crate::{bytes, Error, Result};

pub use crate::{ETHERTYPE_QINQ, ETHERTYPE_VLAN};

mod field {
    pub const TCI: usize = 0;
    pub const ETHERTYPE: usize = 2;
    pub const PAYLOAD: usize = 4;
}

/// Length of the part of a tag this view covers (TCI + EtherType); also the
/// number of bytes a tag adds to a frame.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Mask of the VLAN identifier within a TCI.
pub const VID_MASK: u16 = 0x0fff;
/// The drop-eligible indicator (formerly CFI) bit of a TCI.
pub const DEI_BIT: u16 = 0x1000;
/// Shift of the 3-bit priority code point within a TCI.
pub const PCP_SHIFT: u16 = 13;

/// Does `ethertype` announce a VLAN tag the parser steps over? Only the 802.1Q
/// and 802.1ad TPIDs count (the pre-standard 0x9100 does not), matching Open
/// vSwitch.
#[inline]
pub const fn is_vlan_tpid(ethertype: u16) -> bool {
    ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ
}

/// The 12-bit VLAN identifier of a TCI.
#[inline]
pub const fn vid(tci: u16) -> u16 {
    tci & VID_MASK
}

/// The 3-bit priority code point of a TCI.
#[inline]
pub const fn pcp(tci: u16) -> u8 {
    (tci >> PCP_SHIFT) as u8
}

/// The drop-eligible indicator of a TCI.
#[inline]
pub const fn dei(tci: u16) -> bool {
    tci & DEI_BIT != 0
}

/// Assembles a TCI; out-of-range `pcp` / `vid` bits are masked off.
#[inline]
pub const fn tci(pcp: u8, dei: bool, vid: u16) -> u16 {
    (((pcp & 7) as u16) << PCP_SHIFT) | if dei { DEI_BIT } else { 0 } | (vid & VID_MASK)
}

/// A read/write view of the TCI and inner EtherType of one VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic unless
    /// [`check_len`](Self::check_len) succeeded.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Ensures every accessor is in bounds.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Tag control information (PCP, DEI, VID).
    pub fn tci(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::TCI)
    }

    /// VLAN identifier.
    pub fn vid(&self) -> u16 {
        vid(self.tci())
    }

    /// Priority code point.
    pub fn pcp(&self) -> u8 {
        pcp(self.tci())
    }

    /// Drop-eligible indicator.
    pub fn dei(&self) -> bool {
        dei(self.tci())
    }

    /// EtherType (or next TPID) following this tag.
    pub fn ethertype(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Bytes after the tag.
    pub fn payload(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::PAYLOAD, usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the whole TCI.
    pub fn set_tci(&mut self, tci: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::TCI, tci);
    }

    /// Sets the VLAN identifier, keeping PCP and DEI.
    pub fn set_vid(&mut self, vid: u16) {
        let t = self.tci();
        self.set_tci((t & !VID_MASK) | (vid & VID_MASK));
    }

    /// Sets the priority code point, keeping DEI and VID.
    pub fn set_pcp(&mut self, pcp: u8) {
        let t = self.tci();
        self.set_tci((t & !(7 << PCP_SHIFT)) | (u16::from(pcp & 7) << PCP_SHIFT));
    }

    /// Sets the EtherType following this tag.
    pub fn set_ethertype(&mut self, ethertype: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype);
    }

    /// Mutable access to the bytes after the tag.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        bytes::clamped_mut(self.buffer.as_mut(), field::PAYLOAD, usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tci_helpers() {
        let t = tci(5, true, 100);
        assert_eq!(t, 0xb064);
        assert_eq!(vid(t), 100);
        assert_eq!(pcp(t), 5);
        assert!(dei(t));
        assert_eq!(tci(9, false, 0xffff), 0x2fff);
        assert!(is_vlan_tpid(0x8100) && is_vlan_tpid(0x88a8) && !is_vlan_tpid(0x9100));
    }

    #[test]
    fn view_and_setters() {
        let mut buf = [0xb0, 0x64, 0x08, 0x00, 0x45];
        {
            let p = Packet::new_checked(&buf[..]).unwrap();
            assert_eq!((p.pcp(), p.dei(), p.vid()), (5, true, 100));
            assert_eq!(p.ethertype(), 0x0800);
            assert_eq!(p.payload(), &[0x45]);
        }
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_vid(0xabc);
        p.set_pcp(2);
        assert_eq!(p.tci(), tci(2, true, 0xabc));
        p.set_ethertype(0x86dd);
        assert_eq!(&buf[..4], &[0x5a, 0xbc, 0x86, 0xdd]);
        assert_eq!(
            Packet::new_checked(&buf[..3]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn etherparse_agrees() {
        let buf = [0xb0, 0x64, 0x08, 0x00];
        let e = etherparse::SingleVlanHeaderSlice::from_slice(&buf).unwrap();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(e.vlan_identifier().value(), p.vid());
        assert_eq!(e.priority_code_point().value(), p.pcp());
        assert_eq!(e.drop_eligible_indicator(), p.dei());
        assert_eq!(e.ether_type().0, p.ethertype());
    }
}
