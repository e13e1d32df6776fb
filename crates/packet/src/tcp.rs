//! TCP header (RFC 9293).
//!
//! On the path port rx ring -> parse -> flow key -> classifier/caches ->
//! actions -> port tx, TCP contributes ports and flags to the flow key (the
//! megaflow cache often wildcards everything but `tp_dst`), and port rewrites
//! (NAT, load balancing) must patch its checksum, which also covers the IP
//! addresses through the pseudo header.
//!
//! A view's buffer is the whole segment — header and payload exactly as the
//! IP length delimits them — because the checksum helpers sum the entire
//! buffer.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{bytes, checksum, Error, Result, IPPROTO_TCP};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const FLAGS: usize = 12;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = 20;
/// Byte offset of the checksum, for callers patching it in place.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM;

/// FIN flag.
pub const FLAG_FIN: u16 = 0x001;
/// SYN flag.
pub const FLAG_SYN: u16 = 0x002;
/// RST flag.
pub const FLAG_RST: u16 = 0x004;
/// PSH flag.
pub const FLAG_PSH: u16 = 0x008;
/// ACK flag.
pub const FLAG_ACK: u16 = 0x010;
/// URG flag.
pub const FLAG_URG: u16 = 0x020;
/// ECE flag.
pub const FLAG_ECE: u16 = 0x040;
/// CWR flag.
pub const FLAG_CWR: u16 = 0x080;
/// NS (ECN nonce) flag.
pub const FLAG_NS: u16 = 0x100;
/// All 12 bits below the data offset, as Open vSwitch's `tcp_flags` field
/// carries them (the three reserved bits included).
pub const FLAGS_MASK: u16 = 0x0fff;

/// A read/write view of a TCP segment.
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

    /// Ensures the fixed header fits, the data offset is at least 5 and the
    /// options fit.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(self.header_len());
        if hl < HEADER_LEN {
            Err(Error::Malformed)
        } else if len < hl {
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

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        bytes::u32_at(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgement number.
    pub fn ack_number(&self) -> u32 {
        bytes::u32_at(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) * 4
    }

    /// The 12 flag bits ([`FLAGS_MASK`]).
    pub fn flags(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::FLAGS) & FLAGS_MASK
    }

    /// SYN flag.
    pub fn syn(&self) -> bool {
        self.flags() & FLAG_SYN != 0
    }

    /// ACK flag.
    pub fn ack(&self) -> bool {
        self.flags() & FLAG_ACK != 0
    }

    /// FIN flag.
    pub fn fin(&self) -> bool {
        self.flags() & FLAG_FIN != 0
    }

    /// RST flag.
    pub fn rst(&self) -> bool {
        self.flags() & FLAG_RST != 0
    }

    /// Receive window.
    pub fn window(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::WINDOW)
    }

    /// Stored checksum.
    pub fn checksum(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::URGENT)
    }

    /// Options (empty for data offset 5).
    pub fn options(&self) -> &[u8] {
        let hl = usize::from(self.header_len());
        bytes::clamped(self.buffer.as_ref(), HEADER_LEN, hl)
    }

    /// Segment payload.
    pub fn payload(&self) -> &[u8] {
        let hl = usize::from(self.header_len());
        bytes::clamped(self.buffer.as_ref(), hl, usize::MAX)
    }

    /// Does the checksum verify for a segment carried over IPv4?
    pub fn verify_checksum_ipv4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        checksum::l4_checksum_ipv4(src, dst, IPPROTO_TCP, self.buffer.as_ref()) == 0
    }

    /// Does the checksum verify for a segment carried over IPv6?
    pub fn verify_checksum_ipv6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::l4_checksum_ipv6(src, dst, IPPROTO_TCP, self.buffer.as_ref()) == 0
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

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, seq: u32) {
        bytes::set_u32(self.buffer.as_mut(), field::SEQ, seq);
    }

    /// Sets the acknowledgement number.
    pub fn set_ack_number(&mut self, ack: u32) {
        bytes::set_u32(self.buffer.as_mut(), field::ACK, ack);
    }

    /// Sets header length (bytes, rounded down to 4) and the 12 flag bits
    /// together, since they share a word.
    pub fn set_header_len_and_flags(&mut self, header_len: u8, flags: u16) {
        let w = (u16::from(header_len / 4) << 12) | (flags & FLAGS_MASK);
        bytes::set_u16(self.buffer.as_mut(), field::FLAGS, w);
    }

    /// Sets the flag bits, keeping the data offset.
    pub fn set_flags(&mut self, flags: u16) {
        let hl = self.header_len();
        self.set_header_len_and_flags(hl, flags);
    }

    /// Sets the receive window.
    pub fn set_window(&mut self, window: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::WINDOW, window);
    }

    /// Stores a checksum value.
    pub fn set_checksum(&mut self, csum: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHECKSUM, csum);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, urgent: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::URGENT, urgent);
    }

    /// Mutable options.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        bytes::clamped_mut(self.buffer.as_mut(), HEADER_LEN, hl)
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        bytes::clamped_mut(self.buffer.as_mut(), hl, usize::MAX)
    }

    /// Computes and stores the checksum for a segment carried over IPv4.
    pub fn fill_checksum_ipv4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_ipv4(src, dst, IPPROTO_TCP, self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Computes and stores the checksum for a segment carried over IPv6.
    pub fn fill_checksum_ipv6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_ipv6(src, dst, IPPROTO_TCP, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut v = vec![0u8; 24];
        let mut p = Packet::new_unchecked(&mut v[..]);
        p.set_src_port(49152);
        p.set_dst_port(80);
        p.set_seq_number(0x0102_0304);
        p.set_ack_number(0);
        p.set_header_len_and_flags(24, FLAG_SYN | FLAG_ECE | FLAG_CWR);
        p.set_window(64240);
        p.options_mut().copy_from_slice(&[2, 4, 0x05, 0xb4]); // MSS 1460
        v.extend_from_slice(b"hi");
        v
    }

    #[test]
    fn fields_and_checksum_against_etherparse() {
        let mut buf = sample();
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum_ipv4(src, dst);
        assert!(p.verify_checksum_ipv4(src, dst));
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[2, 4, 5, 0xb4]);
        assert_eq!(p.payload(), b"hi");
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst());

        let e = etherparse::TcpHeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(e.source_port(), 49152);
        assert_eq!(e.destination_port(), 80);
        assert_eq!(e.sequence_number(), 0x0102_0304);
        assert!(e.syn() && e.ece() && e.cwr());
        assert_eq!(e.window_size(), 64240);
        assert_eq!(
            e.calc_checksum_ipv4_raw(src.octets(), dst.octets(), b"hi")
                .unwrap(),
            Packet::new_checked(&buf[..]).unwrap().checksum()
        );
    }

    #[test]
    fn ipv6_checksum() {
        let mut buf = sample();
        let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum_ipv6(src, dst);
        let c = p.checksum();
        assert!(p.verify_checksum_ipv6(src, dst));
        let e = etherparse::TcpHeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(
            e.calc_checksum_ipv6_raw(src.octets(), dst.octets(), b"hi")
                .unwrap(),
            c
        );
    }

    #[test]
    fn length_checks() {
        let buf = sample();
        assert_eq!(
            Packet::new_checked(&buf[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&buf[..23]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = buf;
        bad[12] = 0x40;
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
    }
}
