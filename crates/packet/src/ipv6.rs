//! IPv6 header (RFC 8200) and the extension headers the parser steps over.
//!
//! On the path port rx ring -> parse -> flow key -> classifier/caches ->
//! actions -> port tx, IPv6 supplies the `ipv6_*` / `nw_*` flow fields. The
//! hard part is not the fixed header but the chain behind it: the transport
//! header (and hence the ports the classifier matches on) is found only after
//! walking hop-by-hop, routing, fragment, destination-options and AH headers,
//! and a fragment header with a non-zero offset means there is no transport
//! header at all. [`ext_header_len`], [`ExtHeader`] and [`FragmentHeader`]
//! are the pieces that walk uses.
//!
//! IPv6 has no header checksum, so rewriting the fixed header only matters to
//! checksums through the pseudo header (addresses), see [`crate::rewrite`].

use std::net::Ipv6Addr;

use crate::parse::{L3Kind, Layout};
use crate::{bytes, Error, Result};

pub use crate::{IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Byte offset of the source address.
pub const SRC_OFFSET: usize = field::SRC.start;
/// Byte offset of the destination address.
pub const DST_OFFSET: usize = field::DST.start;

/// Next-header value of the hop-by-hop options header.
pub const NEXT_HOP_BY_HOP: u8 = 0;
/// Next-header value of the routing header.
pub const NEXT_ROUTING: u8 = 43;
/// Next-header value of the fragment header.
pub const NEXT_FRAGMENT: u8 = 44;
/// Next-header value of ESP (opaque: the parser stops there).
pub const NEXT_ESP: u8 = 50;
/// Next-header value of the authentication header.
pub const NEXT_AUTH: u8 = 51;
/// "No next header": nothing follows.
pub const NEXT_NONE: u8 = 59;
/// Next-header value of the destination options header.
pub const NEXT_DEST_OPTS: u8 = 60;

/// Length of the fragment extension header.
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// Is `next_header` an extension header the parser skips to reach the
/// transport header? ESP, mobility, HIP and shim6 are not: ESP is opaque and
/// the others are treated as upper-layer protocols, as Open vSwitch does.
#[inline]
pub const fn is_ext_header(next_header: u8) -> bool {
    matches!(
        next_header,
        NEXT_HOP_BY_HOP | NEXT_ROUTING | NEXT_FRAGMENT | NEXT_AUTH | NEXT_DEST_OPTS
    )
}

/// Length in bytes of the extension header of type `kind` whose bytes start
/// at `hdr`: `(len + 1) * 8` for options/routing headers, `(len + 2) * 4` for
/// AH, 8 for the fragment header. `None` if `kind` is not an extension header
/// (see [`is_ext_header`]) or `hdr` is too short to hold its length byte.
pub fn ext_header_len(kind: u8, hdr: &[u8]) -> Option<usize> {
    match kind {
        NEXT_HOP_BY_HOP | NEXT_ROUTING | NEXT_DEST_OPTS => {
            Some((usize::from(*hdr.get(1)?) + 1) * 8)
        }
        NEXT_AUTH => Some((usize::from(*hdr.get(1)?) + 2) * 4),
        NEXT_FRAGMENT => Some(FRAGMENT_HEADER_LEN),
        _ => None,
    }
}

/// Segments left of the first routing header between the fixed IPv6 header
/// and the transport header of a parsed frame; `Some(0)` if there is none.
///
/// A non-zero value means the transport checksum's pseudo header uses the
/// final destination from the routing header, not the IPv6 destination, so
/// rewriting the destination must not patch the transport checksum. `None` if
/// the frame is not IPv6 or does not match the layout.
pub fn routing_segments_left(frame: &[u8], layout: &Layout) -> Option<u8> {
    if layout.l3 != L3Kind::Ipv6 {
        return None;
    }
    let l3 = usize::from(layout.l3_offset);
    let end = usize::from(layout.l4_offset);
    let mut nh = bytes::get_u8(frame, l3 + field::NXT_HDR)?;
    let mut off = l3 + HEADER_LEN;
    while off < end && is_ext_header(nh) {
        let hdr = frame.get(off..end)?;
        if nh == NEXT_ROUTING {
            return bytes::get_u8(hdr, 3);
        }
        let len = ext_header_len(nh, hdr)?;
        nh = hdr[0];
        off = off.checked_add(len)?;
    }
    Some(0)
}

/// A read/write view of an IPv6 packet (fixed header plus `payload_len`
/// bytes; anything after that, such as Ethernet padding, is ignored).
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

    /// Ensures the fixed header and `payload_len` bytes fit the buffer. The
    /// version is not checked (the parser does). Jumbograms (payload length 0
    /// plus a jumbo option) are not supported: their payload appears empty.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + usize::from(self.payload_len()) {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IP version (6 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// Traffic class (DSCP << 2 | ECN), the IPv6 counterpart of the TOS byte.
    pub fn traffic_class(&self) -> u8 {
        let b = self.buffer.as_ref();
        (b[0] << 4) | (b[1] >> 4)
    }

    /// DSCP part of the traffic class.
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN part of the traffic class.
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        bytes::u32_at(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }

    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Next header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }

    /// Bytes after the fixed header, up to `payload_len`.
    pub fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        bytes::clamped(self.buffer.as_ref(), HEADER_LEN, end)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version nibble.
    pub fn set_version(&mut self, version: u8) {
        let b = self.buffer.as_mut();
        b[0] = (b[0] & 0x0f) | (version << 4);
    }

    /// Sets the traffic class, keeping version and flow label.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let b = self.buffer.as_mut();
        b[0] = (b[0] & 0xf0) | (tc >> 4);
        b[1] = (b[1] & 0x0f) | (tc << 4);
    }

    /// Sets the 20-bit flow label (upper bits ignored).
    pub fn set_flow_label(&mut self, label: u32) {
        let b = self.buffer.as_mut();
        let w = bytes::u32_at(b, 0);
        bytes::set_u32(b, 0, (w & 0xfff0_0000) | (label & 0x000f_ffff));
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the next header of the fixed header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = nh;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hl: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hl;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, ip: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&ip.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, ip: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&ip.octets());
    }

    /// Mutable bytes after the fixed header, up to `payload_len`.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        bytes::clamped_mut(self.buffer.as_mut(), HEADER_LEN, end)
    }
}

/// A view of a generic extension header: hop-by-hop, routing, destination
/// options or AH. Its length encoding depends on the type, so the view
/// remembers which one it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
    kind: u8,
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Wraps the bytes of an extension header of type `kind` (the previous
    /// header's next-header value) after checking the whole header fits.
    /// [`Error::Malformed`] if `kind` is not an extension header.
    pub fn new_checked(buffer: T, kind: u8) -> Result<Self> {
        if !is_ext_header(kind) {
            return Err(Error::Malformed);
        }
        let b = buffer.as_ref();
        let len = ext_header_len(kind, b).ok_or(Error::Truncated)?;
        if b.len() < len.max(2) {
            return Err(Error::Truncated);
        }
        Ok(ExtHeader { buffer, kind })
    }

    /// The type this header was opened as.
    pub fn kind(&self) -> u8 {
        self.kind
    }

    /// Next header after this one.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Total length of this header in bytes.
    pub fn header_len(&self) -> usize {
        ext_header_len(self.kind, self.buffer.as_ref()).unwrap_or(0)
    }

    /// The header's own data (after next-header and length bytes).
    pub fn data(&self) -> &[u8] {
        let end = self.header_len();
        bytes::clamped(self.buffer.as_ref(), 2, end)
    }

    /// Bytes after this header.
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        bytes::clamped(self.buffer.as_ref(), start, usize::MAX)
    }
}

/// A view of the IPv6 fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// Wraps a buffer without checking it; accessors may panic unless
    /// [`check_len`](Self::check_len) succeeded.
    pub const fn new_unchecked(buffer: T) -> Self {
        FragmentHeader { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Ensures the 8-byte header fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < FRAGMENT_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Next header of the fragmented part.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), 2) & 0xfff8
    }

    /// "More fragments" flag.
    pub fn more_frags(&self) -> bool {
        bytes::u16_at(self.buffer.as_ref(), 2) & 1 != 0
    }

    /// Fragment identification.
    pub fn ident(&self) -> u32 {
        bytes::u32_at(self.buffer.as_ref(), 4)
    }

    /// Bytes after the fragment header.
    pub fn payload(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), FRAGMENT_HEADER_LEN, usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FragmentHeader<T> {
    /// Sets the next header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[0] = nh;
    }

    /// Sets offset (bytes, multiple of 8) and M flag together, clearing the
    /// reserved bits.
    pub fn set_frag_offset_and_more(&mut self, offset: u16, more: bool) {
        let b = self.buffer.as_mut();
        b[1] = 0;
        bytes::set_u16(b, 2, (offset & 0xfff8) | u16::from(more));
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, ident: u32) {
        bytes::set_u32(self.buffer.as_mut(), 4, ident);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut v = vec![
            0x6b, 0x81, 0x23, 0x45, // version 6, tc 0xb8, flow 0x12345
            0x00, 0x04, 17, 64,
        ];
        v.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&[9, 8, 7, 6]);
        v
    }

    #[test]
    fn read_fields() {
        let buf = sample();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!((p.dscp(), p.ecn()), (0xb8 >> 2, 0));
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[9, 8, 7, 6]);
        let e = etherparse::Ipv6HeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(e.traffic_class(), p.traffic_class());
        assert_eq!(e.flow_label().value(), p.flow_label());
        assert_eq!(e.source_addr(), p.src_addr());
    }

    #[test]
    fn setters() {
        let mut buf = sample();
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_traffic_class(0x21);
        p.set_flow_label(0xfffff);
        p.set_hop_limit(1);
        assert_eq!(p.traffic_class(), 0x21);
        assert_eq!(p.flow_label(), 0xfffff);
        assert_eq!(p.version(), 6);
        p.set_flow_label(0);
        assert_eq!(p.traffic_class(), 0x21);
        assert_eq!(&buf[..4], &[0x62, 0x10, 0, 0]);
    }

    #[test]
    fn length_checks() {
        let buf = sample();
        assert_eq!(
            Packet::new_checked(&buf[..39]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&buf[..43]).unwrap_err(),
            Error::Truncated
        );
        assert!(Packet::new_checked(&buf[..]).is_ok());
    }

    #[test]
    fn ext_header_lengths() {
        assert_eq!(ext_header_len(NEXT_HOP_BY_HOP, &[6, 0]), Some(8));
        assert_eq!(ext_header_len(NEXT_DEST_OPTS, &[6, 2]), Some(24));
        assert_eq!(ext_header_len(NEXT_AUTH, &[6, 4]), Some(24));
        assert_eq!(ext_header_len(NEXT_FRAGMENT, &[]), Some(8));
        assert_eq!(ext_header_len(NEXT_ROUTING, &[6]), None);
        assert_eq!(ext_header_len(6, &[6, 0]), None);
        let h = ExtHeader::new_checked(&[17u8, 0, 1, 4, 0, 0, 0, 0, 0xaa][..], 0).unwrap();
        assert_eq!(h.next_header(), 17);
        assert_eq!(h.header_len(), 8);
        assert_eq!(h.data().len(), 6);
        assert_eq!(h.payload(), &[0xaa]);
        assert_eq!(
            ExtHeader::new_checked(&[17u8, 1, 0, 0][..], 0).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn fragment_header() {
        let mut b = [0u8; 8];
        let mut f = FragmentHeader::new_checked(&mut b[..]).unwrap();
        f.set_next_header(6);
        f.set_frag_offset_and_more(1448, true);
        f.set_ident(0xdeadbeef);
        assert_eq!(b, [6, 0, 0x05, 0xa9, 0xde, 0xad, 0xbe, 0xef]);
        let f = FragmentHeader::new_checked(&b[..]).unwrap();
        assert_eq!(
            (f.frag_offset(), f.more_frags(), f.ident()),
            (1448, true, 0xdeadbeef)
        );
        let (e, _) = etherparse::Ipv6FragmentHeader::from_slice(&b).unwrap();
        assert_eq!(e.fragment_offset.value() * 8, 1448);
        assert!(e.more_fragments);
    }
}
