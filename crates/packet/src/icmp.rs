//! ICMP for IPv4 (RFC 792).
//!
//! On the path port rx ring -> parse -> flow key -> classifier/caches ->
//! actions -> port tx, ICMP's type and code take the place of the transport
//! ports in the flow key (Open vSwitch stores them in `tp_src` / `tp_dst`),
//! which is why the parser only insists on the first 4 bytes. Everything
//! beyond type, code and checksum is message-specific, so the accessors for
//! it return `Option` rather than trusting a length check that only covered
//! the common part.
//!
//! The ICMPv4 checksum covers the ICMP message only (no pseudo header), so no
//! IP-level rewrite ever needs to touch it.

use crate::{bytes, checksum, Error, Result};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const IDENT: usize = 4;
    pub const SEQ: usize = 6;
    pub const BODY: usize = 4;
    pub const DATA: usize = 8;
}

/// Bytes every ICMP message has: type, code and checksum. This is what
/// [`Packet::check_len`] requires.
pub const MIN_LEN: usize = field::BODY;
/// Length of the ICMP header including the 4-byte rest-of-header.
pub const HEADER_LEN: usize = field::DATA;

/// Echo reply.
pub const TYPE_ECHO_REPLY: u8 = 0;
/// Destination unreachable.
pub const TYPE_DEST_UNREACHABLE: u8 = 3;
/// Redirect.
pub const TYPE_REDIRECT: u8 = 5;
/// Echo request.
pub const TYPE_ECHO_REQUEST: u8 = 8;
/// Time exceeded.
pub const TYPE_TIME_EXCEEDED: u8 = 11;
/// Parameter problem.
pub const TYPE_PARAM_PROBLEM: u8 = 12;

/// A read/write view of an ICMPv4 message (the whole IP payload).
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

    /// Ensures type, code and checksum fit ([`MIN_LEN`]).
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MIN_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Stored checksum.
    pub fn checksum(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The 4-byte rest-of-header, if present.
    pub fn rest_of_header(&self) -> Option<[u8; 4]> {
        bytes::get_array(self.buffer.as_ref(), field::BODY)
    }

    /// Echo identifier (meaningful for echo request/reply), if present.
    pub fn echo_ident(&self) -> Option<u16> {
        bytes::get_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Echo sequence number (meaningful for echo request/reply), if present.
    pub fn echo_seq_no(&self) -> Option<u16> {
        bytes::get_u16(self.buffer.as_ref(), field::SEQ)
    }

    /// Everything after type, code and checksum.
    pub fn body(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::BODY, usize::MAX)
    }

    /// Everything after the 8-byte header (echo data, or the offending
    /// datagram's header for error messages).
    pub fn data(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::DATA, usize::MAX)
    }

    /// Does the checksum verify?
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, ty: u8) {
        self.buffer.as_mut()[field::TYPE] = ty;
    }

    /// Sets the message code.
    pub fn set_msg_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
    }

    /// Stores a checksum value.
    pub fn set_checksum(&mut self, csum: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHECKSUM, csum);
    }

    /// Sets the echo identifier; returns `false` (and writes nothing) if the
    /// message is too short to hold it.
    pub fn set_echo_ident(&mut self, ident: u16) -> bool {
        match self.buffer.as_mut().get_mut(field::IDENT..field::IDENT + 2) {
            Some(s) => {
                s.copy_from_slice(&ident.to_be_bytes());
                true
            }
            None => false,
        }
    }

    /// Sets the echo sequence number; returns `false` (and writes nothing) if
    /// the message is too short to hold it.
    pub fn set_echo_seq_no(&mut self, seq: u16) -> bool {
        match self.buffer.as_mut().get_mut(field::SEQ..field::SEQ + 2) {
            Some(s) => {
                s.copy_from_slice(&seq.to_be_bytes());
                true
            }
            None => false,
        }
    }

    /// Mutable access to everything after type, code and checksum.
    pub fn body_mut(&mut self) -> &mut [u8] {
        bytes::clamped_mut(self.buffer.as_mut(), field::BODY, usize::MAX)
    }

    /// Computes and stores the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_request_known_bytes() {
        // ping -c1: type 8, id 0x1234, seq 1, data "abcd".
        let mut buf = vec![8, 0, 0, 0, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd'];
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.msg_type(), TYPE_ECHO_REQUEST);
        assert_eq!(p.echo_ident(), Some(0x1234));
        assert_eq!(p.echo_seq_no(), Some(1));
        assert_eq!(p.data(), b"abcd");
        let e = etherparse::Icmpv4Slice::from_slice(&buf).unwrap();
        assert_eq!(e.checksum(), e.icmp_type().calc_checksum(e.payload()));
        match e.icmp_type() {
            etherparse::Icmpv4Type::EchoRequest(h) => assert_eq!((h.id, h.seq), (0x1234, 1)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_messages() {
        assert_eq!(
            Packet::new_checked(&[8u8, 0, 0][..]).unwrap_err(),
            Error::Truncated
        );
        let mut b = [3u8, 1, 0, 0, 0, 0];
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.echo_ident(), Some(0));
        assert_eq!(p.echo_seq_no(), None);
        assert_eq!(p.rest_of_header(), None);
        assert!(!p.set_echo_seq_no(1));
        assert!(p.set_echo_ident(7));
        assert!(p.data().is_empty());
        assert_eq!(p.body(), &[0, 7]);
    }
}
