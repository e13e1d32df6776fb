//! IPv4 header (RFC 791), options included.
//!
//! On the path port rx ring -> parse -> flow key -> classifier/caches ->
//! actions -> port tx, IPv4 supplies the `nw_*` fields of the flow key
//! (addresses, protocol, TOS, TTL, fragment state) and is the most common
//! target of set-field actions. The view's setters are raw: they do *not*
//! touch the header checksum, because the action executor patches it
//! incrementally ([`crate::rewrite`]) and builders fill it once at the end
//! ([`Packet::fill_checksum`]).

use std::net::Ipv4Addr;

use crate::{bytes, checksum, Error, Result};

pub use crate::{IPPROTO_ICMP, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// Longest possible IPv4 header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

/// "Don't fragment" flag within the flags/offset word.
pub const FLAG_DF: u16 = 0x4000;
/// "More fragments" flag within the flags/offset word.
pub const FLAG_MF: u16 = 0x2000;
/// Fragment offset (in 8-byte units) within the flags/offset word.
pub const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// Byte offset of the header checksum, for callers patching it in place.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM;
/// Byte offset of the source address.
pub const SRC_OFFSET: usize = field::SRC.start;
/// Byte offset of the destination address.
pub const DST_OFFSET: usize = field::DST.start;

/// A read/write view of an IPv4 packet (header, options and payload up to
/// `total_len`; bytes beyond it, such as Ethernet padding, are ignored).
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

    /// Ensures every accessor is in bounds: the fixed header, the options
    /// (IHL >= 5) and `total_len` bytes must fit the buffer, and `total_len`
    /// must cover the header. The version is not checked (the parser does).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(self.header_len());
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < hl {
            return Err(Error::Truncated);
        }
        let tl = usize::from(self.total_len());
        if tl < hl {
            return Err(Error::Malformed);
        }
        if len < tl {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IP version (4 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The whole TOS byte (DSCP << 2 | ECN).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Differentiated services code point.
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// Explicit congestion notification bits.
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x03
    }

    /// Total length of header and payload.
    pub fn total_len(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification (fragment reassembly key).
    pub fn ident(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::IDENT)
    }

    /// Raw flags/fragment-offset word.
    pub fn flags_frag(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::FLG_OFF)
    }

    /// "Don't fragment" flag.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    /// "More fragments" flag.
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the wire field × 8).
    pub fn frag_offset(&self) -> u16 {
        (self.flags_frag() & FRAG_OFFSET_MASK) << 3
    }

    /// Is this any fragment of a larger datagram (MF set or offset non-zero)?
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    /// Is this a non-first fragment, i.e. one without an L4 header?
    pub fn is_later_fragment(&self) -> bool {
        self.flags_frag() & FRAG_OFFSET_MASK != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Stored header checksum.
    pub fn checksum(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv4Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv4Addr::from(a)
    }

    /// The header options (empty for IHL 5).
    pub fn options(&self) -> &[u8] {
        bytes::clamped(
            self.buffer.as_ref(),
            HEADER_LEN,
            usize::from(self.header_len()),
        )
    }

    /// The payload, up to `total_len` (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        bytes::clamped(
            self.buffer.as_ref(),
            usize::from(self.header_len()),
            usize::from(self.total_len()),
        )
    }

    /// Does the header checksum verify?
    pub fn verify_checksum(&self) -> bool {
        let hl = usize::from(self.header_len());
        checksum::checksum(bytes::clamped(self.buffer.as_ref(), 0, hl)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version and header length (bytes, rounded down to 4) together,
    /// since they share a byte.
    pub fn set_version_and_header_len(&mut self, version: u8, header_len: u8) {
        self.buffer.as_mut()[field::VER_IHL] = (version << 4) | ((header_len / 4) & 0x0f);
    }

    /// Sets the whole TOS byte.
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::TOS] = tos;
    }

    /// Sets the DSCP, keeping ECN.
    pub fn set_dscp(&mut self, dscp: u8) {
        let ecn = self.ecn();
        self.set_tos((dscp << 2) | ecn);
    }

    /// Sets the ECN bits, keeping DSCP.
    pub fn set_ecn(&mut self, ecn: u8) {
        let tos = self.tos();
        self.set_tos((tos & !0x03) | (ecn & 0x03));
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, ident: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::IDENT, ident);
    }

    /// Sets the raw flags/fragment-offset word.
    pub fn set_flags_frag(&mut self, v: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::FLG_OFF, v);
    }

    /// Sets the "don't fragment" flag.
    pub fn set_dont_frag(&mut self, df: bool) {
        let v = self.flags_frag();
        self.set_flags_frag(if df { v | FLAG_DF } else { v & !FLAG_DF });
    }

    /// Sets the "more fragments" flag.
    pub fn set_more_frags(&mut self, mf: bool) {
        let v = self.flags_frag();
        self.set_flags_frag(if mf { v | FLAG_MF } else { v & !FLAG_MF });
    }

    /// Sets the fragment offset in bytes (must be a multiple of 8; the low
    /// three bits are dropped).
    pub fn set_frag_offset(&mut self, offset: u16) {
        let v = self.flags_frag();
        self.set_flags_frag((v & !FRAG_OFFSET_MASK) | (offset >> 3));
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the payload protocol.
    pub fn set_protocol(&mut self, proto: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = proto;
    }

    /// Stores a header checksum value.
    pub fn set_checksum(&mut self, csum: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHECKSUM, csum);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&ip.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&ip.octets());
    }

    /// Recomputes and stores the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = usize::from(self.header_len());
        let c = checksum::checksum(bytes::clamped(self.buffer.as_ref(), 0, hl));
        self.set_checksum(c);
    }

    /// Mutable header options.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        bytes::clamped_mut(self.buffer.as_mut(), HEADER_LEN, hl)
    }

    /// Mutable payload, up to `total_len`.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        let tl = usize::from(self.total_len());
        bytes::clamped_mut(self.buffer.as_mut(), hl, tl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 192.168.0.1 -> 192.168.0.199, UDP, DF, total length 0x73 (truncated
    // payload stands in for the rest).
    fn sample() -> Vec<u8> {
        let mut v = vec![
            0x45, 0x00, 0x00, 0x1c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        v.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let c = checksum::checksum(&v[..20]);
        v[10..12].copy_from_slice(&c.to_be_bytes());
        v
    }

    #[test]
    fn read_fields() {
        let buf = sample();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IPPROTO_UDP);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.verify_checksum());
        assert!(p.options().is_empty());
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn padding_is_ignored() {
        let mut buf = sample();
        buf.extend_from_slice(&[0; 18]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn length_checks() {
        let buf = sample();
        assert_eq!(
            Packet::new_checked(&buf[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&buf[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = buf.clone();
        bad[0] = 0x44;
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = buf.clone();
        bad[0] = 0x4f; // 60-byte header in a 28-byte buffer
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Truncated);
        let mut bad = buf;
        bad[3] = 19;
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn setters_and_fill_checksum() {
        let mut buf = sample();
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_ttl(3);
        p.set_dscp(46);
        p.set_ecn(1);
        p.set_more_frags(true);
        p.set_frag_offset(1480);
        p.set_src_addr(Ipv4Addr::new(10, 1, 2, 3));
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.dscp(), p.ecn(), p.tos()), (46, 1, 46 << 2 | 1));
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.is_fragment() && p.is_later_fragment() && p.dont_frag());
        let e = etherparse::Ipv4HeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(e.ttl(), 3);
        assert_eq!(e.fragments_offset().value(), 1480 / 8);
        assert!(e.more_fragments());
        assert_eq!(e.source_addr(), Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(e.header_checksum(), e.to_header().calc_header_checksum());
    }

    #[test]
    fn options_view() {
        let mut buf = vec![0u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version_and_header_len(4, 24);
        p.set_total_len(28);
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        p.fill_checksum();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload().len(), 4);
        assert!(p.verify_checksum());
        let e = etherparse::Ipv4HeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(e.options(), &[1, 1, 1, 0]);
    }
}
