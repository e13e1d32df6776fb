//! ARP for IPv4 over Ethernet (RFC 826).
//!
//! ARP frames take the same path as IP (port rx ring -> parse -> flow key ->
//! classifier/caches -> actions -> port tx) because OpenFlow matches on
//! `arp_op`, `arp_spa`, `arp_tpa`, `arp_sha`, `arp_tha` and can rewrite them
//! (proxy ARP, ARP responders built from flows).
//!
//! Only the Ethernet/IPv4 format (hardware type 1, protocol 0x0800, lengths
//! 6 and 4) is given a view: it is the only one a virtual switch matches on,
//! and fixing the lengths means every field has a constant offset. Other
//! hardware/protocol combinations are rejected with [`Error::Malformed`] here
//! and classified as [`crate::L3Kind::Other`] by the parser.

use std::net::Ipv4Addr;

use crate::{bytes, Error, MacAddr, Result};

mod field {
    use core::ops::Range;
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

/// Length of the fixed part shared by every ARP format (up to the opcode).
pub const FIXED_LEN: usize = 8;
/// Length of an Ethernet/IPv4 ARP packet.
pub const HEADER_LEN: usize = 28;

/// Hardware type of Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;
/// ARP request.
pub const OP_REQUEST: u16 = 1;
/// ARP reply.
pub const OP_REPLY: u16 = 2;

/// Does this ARP body (at least [`FIXED_LEN`] bytes) announce the
/// Ethernet/IPv4 format? `false` for shorter input.
pub fn is_eth_ipv4(body: &[u8]) -> bool {
    matches!(
        body.get(..FIXED_LEN),
        Some([0x00, 0x01, 0x08, 0x00, 6, 4, _, _])
    )
}

/// A read/write view of an Ethernet/IPv4 ARP packet.
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

    /// Ensures the buffer holds an Ethernet/IPv4 ARP packet:
    /// [`Error::Truncated`] if it is shorter than its format needs,
    /// [`Error::Malformed`] if the format is not Ethernet/IPv4.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN {
            Err(Error::Truncated)
        } else if !is_eth_ipv4(b) {
            Err(Error::Malformed)
        } else if b.len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type (0x0800 for IPv4).
    pub fn protocol_type(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::PTYPE)
    }

    /// Hardware address length (6).
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length (4).
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation ([`OP_REQUEST`], [`OP_REPLY`], ...).
    pub fn operation(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::OPER)
    }

    /// Sender hardware address.
    pub fn sha(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SHA]);
        a
    }

    /// Sender protocol address.
    pub fn spa(&self) -> Ipv4Addr {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SPA]);
        Ipv4Addr::from(a)
    }

    /// Target hardware address.
    pub fn tha(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::THA]);
        a
    }

    /// Target protocol address.
    pub fn tpa(&self) -> Ipv4Addr {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::TPA]);
        Ipv4Addr::from(a)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the Ethernet/IPv4 format fields (htype, ptype, hlen, plen), for
    /// building a packet in a fresh buffer.
    pub fn set_eth_ipv4_format(&mut self) {
        let b = self.buffer.as_mut();
        bytes::set_u16(b, field::HTYPE, HTYPE_ETHERNET);
        bytes::set_u16(b, field::PTYPE, crate::ETHERTYPE_IPV4);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
    }

    /// Sets the operation.
    pub fn set_operation(&mut self, op: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::OPER, op);
    }

    /// Sets the sender hardware address.
    pub fn set_sha(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&mac);
    }

    /// Sets the sender protocol address.
    pub fn set_spa(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&ip.octets());
    }

    /// Sets the target hardware address.
    pub fn set_tha(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&mac);
    }

    /// Sets the target protocol address.
    pub fn set_tpa(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&ip.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // who-has 10.0.0.2 tell 10.0.0.1
    const REQ: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // fixed
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0, 0, 1, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 10, 0, 0, 2, // target
    ];

    #[test]
    fn read_fields() {
        let p = Packet::new_checked(&REQ[..]).unwrap();
        assert_eq!(p.hardware_type(), 1);
        assert_eq!(p.protocol_type(), 0x0800);
        assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
        assert_eq!(p.operation(), OP_REQUEST);
        assert_eq!(p.sha(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.spa(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.tha(), [0; 6]);
        assert_eq!(p.tpa(), Ipv4Addr::new(10, 0, 0, 2));
    }

    #[test]
    fn build_matches_known_bytes() {
        let mut buf = [0u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_eth_ipv4_format();
        p.set_operation(OP_REQUEST);
        p.set_sha([2, 0, 0, 0, 0, 1]);
        p.set_spa(Ipv4Addr::new(10, 0, 0, 1));
        p.set_tha([0; 6]);
        p.set_tpa(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(buf, REQ);
    }

    #[test]
    fn length_and_format_checks() {
        assert_eq!(
            Packet::new_checked(&REQ[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&REQ[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut other = REQ;
        other[1] = 6; // IEEE 802 hardware type
        assert_eq!(
            Packet::new_checked(&other[..]).unwrap_err(),
            Error::Malformed
        );
        assert!(!is_eth_ipv4(&other));
        assert!(is_eth_ipv4(&REQ));
    }

    #[test]
    fn etherparse_agrees() {
        let e = etherparse::ArpPacketSlice::from_slice(&REQ).unwrap();
        let p = Packet::new_checked(&REQ[..]).unwrap();
        assert_eq!(e.operation().0, p.operation());
        assert_eq!(e.sender_hw_addr(), &p.sha());
        assert_eq!(e.sender_protocol_addr(), &p.spa().octets());
        assert_eq!(e.target_hw_addr(), &p.tha());
        assert_eq!(e.target_protocol_addr(), &p.tpa().octets());
    }
}
