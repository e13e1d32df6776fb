//! Ethernet II frame header.
//!
//! The first header every frame has on its way port rx ring -> parse -> flow
//! key -> classifier/caches -> actions -> port tx. The parser reads the
//! EtherType here to decide whether VLAN tags or an L3 header follow; the
//! action executor rewrites the MAC addresses in place (no checksum covers
//! them, the FCS is the NIC's business).
//!
//! Frames whose EtherType field is below 0x0600 are IEEE 802.3 length-field
//! frames; this view does not interpret them and the parser reports the raw
//! value (see [`crate::parse()`]).

use crate::{bytes, Error, MacAddr, Result};

pub use crate::{ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN};

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet II header (no FCS, no tags).
pub const HEADER_LEN: usize = field::PAYLOAD;

/// The broadcast address.
pub const BROADCAST: MacAddr = [0xff; 6];

/// Is this a group (multicast or broadcast) address? Switches flood these
/// rather than learning them, so the I/G bit is checked on every lookup.
#[inline]
pub fn is_multicast(mac: &MacAddr) -> bool {
    mac[0] & 0x01 != 0
}

/// Is this the all-ones broadcast address?
#[inline]
pub fn is_broadcast(mac: &MacAddr) -> bool {
    *mac == BROADCAST
}

/// A read/write view of an Ethernet II header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// smoltcp's name for the same view.
pub type Frame<T> = Packet<T>;

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

    /// Destination MAC address.
    pub fn dst_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// Source MAC address.
    pub fn src_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// The EtherType field (a VLAN TPID if the frame is tagged).
    pub fn ethertype(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Everything after the 14-byte header (tags, L3, Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::PAYLOAD, usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the destination MAC address.
    pub fn set_dst_addr(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac);
    }

    /// Sets the source MAC address.
    pub fn set_src_addr(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac);
    }

    /// Sets the EtherType field.
    pub fn set_ethertype(&mut self, ethertype: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype);
    }

    /// Mutable access to everything after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        bytes::clamped_mut(self.buffer.as_mut(), field::PAYLOAD, usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 18] = [
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, // dst
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, // src
        0x08, 0x00, // IPv4
        0xaa, 0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn read_fields() {
        let p = Packet::new_checked(&FRAME[..]).unwrap();
        assert_eq!(p.dst_addr(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(p.src_addr(), [0x11, 0x12, 0x13, 0x14, 0x15, 0x16]);
        assert_eq!(p.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn write_fields() {
        let mut buf = FRAME;
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_dst_addr(BROADCAST);
        p.set_src_addr([2, 0, 0, 0, 0, 1]);
        p.set_ethertype(ETHERTYPE_IPV6);
        p.payload_mut()[0] = 0x11;
        assert_eq!(&buf[..6], &BROADCAST);
        assert_eq!(&buf[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&buf[12..15], &[0x86, 0xdd, 0x11]);
    }

    #[test]
    fn short_buffer() {
        assert_eq!(
            Packet::new_checked(&FRAME[..13]).unwrap_err(),
            Error::Truncated
        );
        assert!(Packet::new_checked(&FRAME[..14])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn address_classes() {
        assert!(is_broadcast(&BROADCAST));
        assert!(is_multicast(&BROADCAST));
        assert!(is_multicast(&[0x01, 0x00, 0x5e, 0, 0, 1]));
        assert!(!is_multicast(&[0x02, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn etherparse_agrees() {
        let e = etherparse::Ethernet2HeaderSlice::from_slice(&FRAME).unwrap();
        let p = Packet::new_checked(&FRAME[..]).unwrap();
        assert_eq!(e.destination(), p.dst_addr());
        assert_eq!(e.source(), p.src_addr());
        assert_eq!(e.ether_type().0, p.ethertype());
    }
}
