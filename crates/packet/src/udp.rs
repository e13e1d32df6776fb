//! UDP header (RFC 768).
//!
//! On the path port rx ring -> parse -> flow key -> classifier/caches ->
//! actions -> port tx, UDP contributes ports to the flow key and carries the
//! tunnels (VXLAN, Geneve) a virtual switch terminates. Its checksum has two
//! quirks every rewrite must respect: over IPv4 a stored 0 means "no
//! checksum" and must stay 0, and a computed 0 is transmitted as 0xffff.
//!
//! The datagram is delimited by the UDP length field, which may be shorter
//! than the IP payload (trailing bytes are ignored, as Linux does).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{bytes, checksum, Error, Result, IPPROTO_UDP};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;
/// Byte offset of the checksum, for callers patching it in place.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM;

/// A read/write view of a UDP datagram.
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

    /// Ensures the header fits, the length field covers the header, and the
    /// buffer holds `len` bytes.
    pub fn check_len(&self) -> Result<()> {
        let buf_len = self.buffer.as_ref().len();
        if buf_len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            Err(Error::Malformed)
        } else if buf_len < len {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length of header plus payload.
    pub fn len(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Is the length field 0 (malformed)? Provided for clippy's
    /// `len_without_is_empty`; a checked view never returns `true`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stored checksum (0 = none).
    pub fn checksum(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), HEADER_LEN, usize::from(self.len()))
    }

    fn datagram(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), 0, usize::from(self.len()))
    }

    /// Does the checksum verify over IPv4? A stored 0 ("none") verifies.
    pub fn verify_checksum_ipv4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0
            || checksum::l4_checksum_ipv4(src, dst, IPPROTO_UDP, self.datagram()) == 0
    }

    /// Does the checksum verify over IPv6? The checksum is mandatory there,
    /// so a stored 0 does not verify.
    pub fn verify_checksum_ipv6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        self.checksum() != 0
            && checksum::l4_checksum_ipv6(src, dst, IPPROTO_UDP, self.datagram()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, len: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Stores a checksum value.
    pub fn set_checksum(&mut self, csum: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHECKSUM, csum);
    }

    /// Mutable payload, up to the length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        bytes::clamped_mut(self.buffer.as_mut(), HEADER_LEN, len)
    }

    /// Computes and stores the checksum for IPv4 (never stores 0).
    pub fn fill_checksum_ipv4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_ipv4(src, dst, IPPROTO_UDP, self.datagram());
        self.set_checksum(checksum::udp_fixup(c));
    }

    /// Computes and stores the checksum for IPv6 (never stores 0).
    pub fn fill_checksum_ipv6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_ipv6(src, dst, IPPROTO_UDP, self.datagram());
        self.set_checksum(checksum::udp_fixup(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 8];
        v.extend_from_slice(payload);
        let mut p = Packet::new_unchecked(&mut v[..]);
        p.set_src_port(53);
        p.set_dst_port(33333);
        p.set_len((8 + payload.len()) as u16);
        v
    }

    #[test]
    fn fields_and_checksum_against_etherparse() {
        let mut buf = sample(b"abc");
        let src = Ipv4Addr::new(192, 0, 2, 1);
        let dst = Ipv4Addr::new(198, 51, 100, 7);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum_ipv4(src, dst);
        assert!(p.verify_checksum_ipv4(src, dst));
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (53, 33333, 11));
        assert_eq!(p.payload(), b"abc");
        let e = etherparse::UdpHeaderSlice::from_slice(&buf)
            .unwrap()
            .to_header();
        assert_eq!(
            e.calc_checksum_ipv4_raw(src.octets(), dst.octets(), b"abc")
                .unwrap(),
            e.checksum
        );

        let s6: Ipv6Addr = "fe80::1".parse().unwrap();
        let d6: Ipv6Addr = "ff02::fb".parse().unwrap();
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum_ipv6(s6, d6);
        assert!(p.verify_checksum_ipv6(s6, d6));
        let e = etherparse::UdpHeaderSlice::from_slice(&buf)
            .unwrap()
            .to_header();
        assert_eq!(
            e.calc_checksum_ipv6_raw(s6.octets(), d6.octets(), b"abc")
                .unwrap(),
            e.checksum
        );
    }

    #[test]
    fn zero_checksum_semantics() {
        let mut buf = sample(b"");
        let p = Packet::new_checked(&buf[..]).unwrap();
        let a = Ipv4Addr::new(1, 2, 3, 4);
        assert!(p.verify_checksum_ipv4(a, a));
        assert!(!p.verify_checksum_ipv6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST));

        // Find a payload whose checksum computes to 0 and check it is sent as 0xffff.
        let src = Ipv4Addr::new(0, 0, 0, 0);
        let dst = Ipv4Addr::new(0, 0, 0, 0);
        // Pseudo header + header sum: proto 17 + len 10 (twice: pseudo and
        // header) + ports 53 + 33333. Choose the payload word to make the
        // total 0xffff.
        let base: u32 = 17 + 10 + 10 + 53 + 33333;
        let word = (0xffff - base) as u16;
        buf = sample(&word.to_be_bytes());
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum_ipv4(src, dst);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum_ipv4(src, dst));
    }

    #[test]
    fn length_checks() {
        let buf = sample(b"abcd");
        assert_eq!(
            Packet::new_checked(&buf[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&buf[..11]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = buf.clone();
        bad[5] = 7;
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        // A length shorter than the buffer delimits the payload.
        let mut short = buf;
        short[5] = 9;
        assert_eq!(Packet::new_checked(&short[..]).unwrap().payload(), b"a");
    }
}
