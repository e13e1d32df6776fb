//! ICMPv6 (RFC 4443) and the neighbor-discovery fields a switch matches on
//! (RFC 4861).
//!
//! On the path port rx ring -> parse -> flow key -> classifier/caches ->
//! actions -> port tx, ICMPv6 type and code stand in for transport ports in
//! the flow key, and neighbor solicitations/advertisements add the ND target
//! and link-layer address options (`nd_target`, `nd_sll`, `nd_tll`) that
//! anti-spoofing rules match on. Unlike ICMPv4, the checksum includes the IPv6
//! pseudo header, so rewriting an IPv6 address must patch it.
//!
//! As with ICMPv4 only the 4-byte common part is guaranteed by
//! [`Packet::check_len`]; message-specific accessors return `Option`.

use std::net::Ipv6Addr;

use crate::{bytes, checksum, Error, MacAddr, Result, IPPROTO_ICMPV6};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const BODY: usize = 4;
    pub const IDENT: usize = 4;
    pub const SEQ: usize = 6;
    pub const DATA: usize = 8;
    pub const ND_TARGET: usize = 8;
    pub const ND_OPTIONS: usize = 24;
}

/// Bytes every ICMPv6 message has: type, code and checksum.
pub const MIN_LEN: usize = field::BODY;
/// Length of the ICMPv6 header including the 4 message-specific bytes that
/// every defined message type has.
pub const HEADER_LEN: usize = field::DATA;
/// Byte offset of the checksum, for callers patching it in place.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM;

/// Destination unreachable.
pub const TYPE_DEST_UNREACHABLE: u8 = 1;
/// Packet too big.
pub const TYPE_PACKET_TOO_BIG: u8 = 2;
/// Time exceeded.
pub const TYPE_TIME_EXCEEDED: u8 = 3;
/// Parameter problem.
pub const TYPE_PARAM_PROBLEM: u8 = 4;
/// Echo request.
pub const TYPE_ECHO_REQUEST: u8 = 128;
/// Echo reply.
pub const TYPE_ECHO_REPLY: u8 = 129;
/// Router solicitation.
pub const TYPE_ROUTER_SOLICIT: u8 = 133;
/// Router advertisement.
pub const TYPE_ROUTER_ADVERT: u8 = 134;
/// Neighbor solicitation.
pub const TYPE_NEIGHBOR_SOLICIT: u8 = 135;
/// Neighbor advertisement.
pub const TYPE_NEIGHBOR_ADVERT: u8 = 136;

/// ND option: source link-layer address.
pub const ND_OPT_SOURCE_LL: u8 = 1;
/// ND option: target link-layer address.
pub const ND_OPT_TARGET_LL: u8 = 2;

/// A read/write view of an ICMPv6 message (the whole upper-layer payload).
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

    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::DATA, usize::MAX)
    }

    /// Is this a neighbor solicitation or advertisement with code 0?
    pub fn is_nd(&self) -> bool {
        matches!(
            self.msg_type(),
            TYPE_NEIGHBOR_SOLICIT | TYPE_NEIGHBOR_ADVERT
        ) && self.msg_code() == 0
    }

    /// ND target address of a neighbor solicitation/advertisement; `None` for
    /// other messages or if truncated.
    pub fn nd_target(&self) -> Option<Ipv6Addr> {
        if !self.is_nd() {
            return None;
        }
        bytes::get_array::<16>(self.buffer.as_ref(), field::ND_TARGET).map(Ipv6Addr::from)
    }

    /// Iterates over the ND options of a neighbor solicitation/advertisement
    /// as `(type, option bytes including type and length)`. Iteration stops at
    /// the first malformed option (length 0 or past the end), as RFC 4861
    /// says such a message must be discarded; the parser leaves that decision
    /// to the classifier.
    pub fn nd_options(&self) -> NdOptions<'_> {
        let b = self.buffer.as_ref();
        let rest = if self.is_nd() {
            bytes::clamped(b, field::ND_OPTIONS, usize::MAX)
        } else {
            &[]
        };
        NdOptions { rest }
    }

    /// Source link-layer address option of a neighbor solicitation (the first
    /// such option with an Ethernet-sized address).
    pub fn nd_sll(&self) -> Option<MacAddr> {
        if self.msg_type() != TYPE_NEIGHBOR_SOLICIT {
            return None;
        }
        self.nd_ll_option(ND_OPT_SOURCE_LL)
    }

    /// Target link-layer address option of a neighbor advertisement.
    pub fn nd_tll(&self) -> Option<MacAddr> {
        if self.msg_type() != TYPE_NEIGHBOR_ADVERT {
            return None;
        }
        self.nd_ll_option(ND_OPT_TARGET_LL)
    }

    fn nd_ll_option(&self, kind: u8) -> Option<MacAddr> {
        self.nd_options()
            .find(|(k, opt)| *k == kind && opt.len() == 8)
            .and_then(|(_, opt)| bytes::get_array::<6>(opt, 2))
    }

    /// Does the checksum verify, given the IPv6 pseudo-header addresses?
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::l4_checksum_ipv6(src, dst, IPPROTO_ICMPV6, self.buffer.as_ref()) == 0
    }
}

/// Iterator over neighbor-discovery options, see [`Packet::nd_options`].
#[derive(Debug, Clone)]
pub struct NdOptions<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NdOptions<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let kind = *self.rest.first()?;
        let len = usize::from(*self.rest.get(1)?) * 8;
        if len == 0 || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let (opt, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some((kind, opt))
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

    /// Mutable access to everything after type, code and checksum.
    pub fn body_mut(&mut self) -> &mut [u8] {
        bytes::clamped_mut(self.buffer.as_mut(), field::BODY, usize::MAX)
    }

    /// Computes and stores the checksum.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_ipv6(src, dst, IPPROTO_ICMPV6, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(src_ll: Option<MacAddr>) -> Vec<u8> {
        let mut v = vec![TYPE_NEIGHBOR_SOLICIT, 0, 0, 0, 0, 0, 0, 0];
        v.extend_from_slice(&"fe80::2".parse::<Ipv6Addr>().unwrap().octets());
        if let Some(mac) = src_ll {
            v.extend_from_slice(&[ND_OPT_SOURCE_LL, 1]);
            v.extend_from_slice(&mac);
        }
        v
    }

    #[test]
    fn neighbor_solicitation() {
        let mac = [2, 0, 0, 0, 0, 9];
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst: Ipv6Addr = "ff02::1:ff00:2".parse().unwrap();
        let mut buf = ns(Some(mac));
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(src, dst);
        assert!(p.verify_checksum(src, dst));
        assert_eq!(p.nd_target(), Some("fe80::2".parse().unwrap()));
        assert_eq!(p.nd_sll(), Some(mac));
        assert_eq!(p.nd_tll(), None);
        assert_eq!(p.nd_options().count(), 1);
        let e = etherparse::Icmpv6Slice::from_slice(&buf).unwrap();
        assert!(e.is_checksum_valid(src.octets(), dst.octets()));
    }

    #[test]
    fn malformed_options_stop_iteration() {
        let mut buf = ns(None);
        buf.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]); // length 0
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.nd_options().count(), 0);
        assert_eq!(p.nd_sll(), None);
        let mut buf = ns(None);
        buf.extend_from_slice(&[1, 2, 0, 0]); // runs past the end
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.nd_options().count(), 0);
        // Truncated target.
        let p = Packet::new_checked(&buf[..20]).unwrap();
        assert_eq!(p.nd_target(), None);
    }

    #[test]
    fn echo() {
        let src = Ipv6Addr::LOCALHOST;
        let mut buf = vec![TYPE_ECHO_REQUEST, 0, 0, 0, 0xab, 0xcd, 0, 2, 1, 2, 3];
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(src, src);
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (Some(0xabcd), Some(2)));
        assert_eq!(p.data(), &[1, 2, 3]);
        assert_eq!(p.nd_target(), None);
        let e = etherparse::Icmpv6Slice::from_slice(&buf).unwrap();
        assert!(e.is_checksum_valid(src.octets(), src.octets()));
        assert_eq!(
            Packet::new_checked(&buf[..3]).unwrap_err(),
            Error::Truncated
        );
    }
}
