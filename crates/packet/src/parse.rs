//! One-pass frame parser: where is every header?
//!
//! This is the "parse" step of port rx ring -> **parse** -> flow key ->
//! classifier/caches -> actions rewrite headers -> port tx. It runs once per
//! received frame and produces a [`Layout`]: a small `Copy` record of header
//! offsets and kinds. Flow extraction reads field values through it, the
//! action executor ([`crate::rewrite`]) writes through it, and neither has to
//! re-walk VLAN tags or IPv6 extension headers.
//!
//! The parser validates exactly what is needed for every offset in the
//! layout to be trustworthy — lengths, versions, header-length fields — and
//! nothing else (checksums are not verified; see
//! [`crate::checksum::verify_l4`]). A frame that fails is dropped by the
//! caller and counted under [`ParseError::reason`]. Unknown EtherTypes and IP
//! protocols are *not* errors: they are forwarded by L2/L3 rules like any
//! other frame.
//!
//! `parse` never panics, never allocates, and does no unchecked arithmetic.

use crate::{arp, bytes, ipv4, ipv6, vlan};
use crate::{
    ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_RARP, IPPROTO_ICMP, IPPROTO_ICMPV6,
    IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP,
};

/// [`Layout::frag`] bit: the packet is an IP fragment, first or later
/// (Open vSwitch `FLOW_NW_FRAG_ANY`). Set for IPv4 when MF is set or the
/// offset is non-zero, and for IPv6 whenever a fragment header is present.
pub const IS_FRAGMENT: u8 = 1;
/// [`Layout::frag`] bit: the packet is a non-first fragment and carries no L4
/// header (Open vSwitch `FLOW_NW_FRAG_LATER`). Implies [`IS_FRAGMENT`].
pub const LATER_FRAGMENT: u8 = 2;

/// Smallest frame accepted: the Ethernet II header.
pub const MIN_FRAME_LEN: usize = 14;
/// Most VLAN tags the parser steps over (Open vSwitch's limit as well).
pub const MAX_VLAN_TAGS: usize = 2;

/// What follows the Ethernet/VLAN headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L3Kind {
    /// No EtherType-identified payload: an IEEE 802.3 frame whose type field
    /// is a length (< 0x0600, LLC/SNAP is not decoded). Also the default.
    #[default]
    None,
    /// IPv4, header validated.
    Ipv4,
    /// IPv6, fixed header and extension-header chain validated.
    Ipv6,
    /// ARP or RARP in the Ethernet/IPv4 format, 28 bytes present.
    Arp,
    /// Any other EtherType, including ARP/RARP in a format other than
    /// Ethernet/IPv4. `Layout::ethertype` says which.
    Other,
}

/// What the IP payload starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L4Kind {
    /// No transport header in this frame: not IP, a later fragment, or IPv6
    /// "no next header" (59).
    #[default]
    None,
    /// TCP, header (with options) present.
    Tcp,
    /// UDP, header present.
    Udp,
    /// ICMP over IPv4, type/code/checksum present.
    Icmp,
    /// ICMPv6 over IPv6, type/code/checksum present.
    Icmpv6,
    /// SCTP, common header present.
    Sctp,
    /// Any other protocol (including ICMP over IPv6 and ICMPv6 over IPv4);
    /// the payload at `l4_offset` is not interpreted.
    Other(u8),
}

/// Where every header of a frame is, as found by [`parse`].
///
/// Offsets are from the first byte of the frame (the destination MAC).
///
/// * `l3_offset` is always the offset right after the Ethernet header and
///   all VLAN tags (14 + 4 × `n_vlan`), whatever `l3` is; it is only 0 in a
///   `Layout::default()` that did not come from `parse`.
/// * `l4_offset` / `l4_len` describe the IP payload after the IPv4 options or
///   the last skipped IPv6 extension header, and are set whenever `l3` is
///   `Ipv4` or `Ipv6` (also for later fragments and unknown protocols, where
///   they delimit the uninterpreted payload); for any other `l3` both are 0.
///   `l4_len` is derived from the IP length fields, so Ethernet padding is
///   excluded and `l4_offset + l4_len <= frame.len()`.
/// * `ip_proto` is the IPv4 protocol or the IPv6 next header after the
///   extension headers (59 for "no next header"), set also for later
///   fragments; 0 when not IP.
///
/// After `push_vlan` / `pop_vlan` the layout is stale and the frame must be
/// parsed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    /// TCIs of the VLAN tags, outer first; unused entries are 0.
    pub vlan_tags: [u16; 2],
    /// TPIDs (0x8100 / 0x88a8) of the VLAN tags, outer first.
    pub vlan_tpids: [u16; 2],
    /// Number of VLAN tags (0..=2).
    pub n_vlan: u8,
    /// EtherType after all tags (an 802.3 length if < 0x0600).
    pub ethertype: u16,
    /// Offset of the L3 header (see the type docs).
    pub l3_offset: u16,
    /// Kind of the L3 header.
    pub l3: L3Kind,
    /// Offset of the L4 header / IP payload (see the type docs).
    pub l4_offset: u16,
    /// Kind of the L4 header.
    pub l4: L4Kind,
    /// IP protocol of the payload (see the type docs).
    pub ip_proto: u8,
    /// Fragment bits: [`IS_FRAGMENT`] | [`LATER_FRAGMENT`].
    pub frag: u8,
    /// Bytes of L4 header + payload present, per the IP length fields.
    pub l4_len: u16,
}

impl Layout {
    /// Is this any IP fragment?
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.frag & IS_FRAGMENT != 0
    }

    /// Is this a non-first IP fragment (no L4 header)?
    #[inline]
    pub fn is_later_fragment(&self) -> bool {
        self.frag & LATER_FRAGMENT != 0
    }

    /// Is L3 IPv4 or IPv6?
    #[inline]
    pub fn is_ip(&self) -> bool {
        matches!(self.l3, L3Kind::Ipv4 | L3Kind::Ipv6)
    }

    /// TPID and TCI of the outermost VLAN tag, if any.
    #[inline]
    pub fn outer_vlan(&self) -> Option<(u16, u16)> {
        (self.n_vlan > 0).then_some((self.vlan_tpids[0], self.vlan_tags[0]))
    }

    /// Offset one past the end of the IP datagram (where Ethernet padding
    /// would start); equals `l3_offset` when not IP.
    #[inline]
    pub fn l4_end(&self) -> usize {
        if self.is_ip() {
            usize::from(self.l4_offset) + usize::from(self.l4_len)
        } else {
            usize::from(self.l3_offset)
        }
    }
}

macro_rules! parse_errors {
    ($( $(#[$doc:meta])* $name:ident => $reason:literal, $msg:literal; )*) => {
        /// Why a frame could not be parsed. Each variant is one drop counter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
        #[repr(u8)]
        pub enum ParseError {
            $( $(#[$doc])* #[error($msg)] $name, )*
        }

        impl ParseError {
            /// Every variant, in [`index`](Self::index) order.
            pub const ALL: &'static [ParseError] = &[ $(ParseError::$name),* ];

            /// Number of variants: the size of a per-reason counter array.
            pub const COUNT: usize = Self::ALL.len();

            /// Dense index in `0..COUNT`, for indexing counter arrays.
            #[inline]
            pub const fn index(self) -> usize {
                self as usize
            }

            /// Stable snake_case name, for counter and log labels.
            pub const fn reason(self) -> &'static str {
                match self {
                    $( ParseError::$name => $reason, )*
                }
            }
        }
    };
}

parse_errors! {
    /// Frame shorter than the 14-byte Ethernet header.
    Runt => "runt", "frame shorter than an Ethernet header";
    /// A VLAN TPID is not followed by a 4-byte TCI + EtherType.
    TruncatedVlan => "truncated_vlan", "truncated VLAN tag";
    /// More than two VLAN tags.
    TooManyVlanTags => "too_many_vlan_tags", "more than two VLAN tags";
    /// ARP body shorter than its fixed part, or an Ethernet/IPv4 ARP shorter
    /// than 28 bytes.
    TruncatedArp => "truncated_arp", "truncated ARP packet";
    /// Fewer than 20 bytes, or fewer than IHL × 4 bytes, of IPv4 header.
    TruncatedIpv4 => "truncated_ipv4", "truncated IPv4 header";
    /// EtherType IPv4 but version field not 4.
    BadIpv4Version => "bad_ipv4_version", "IPv4 version field is not 4";
    /// IHL below 5.
    BadIpv4HeaderLen => "bad_ipv4_header_len", "IPv4 header length below 20";
    /// Total length smaller than the header or larger than the frame.
    BadIpv4TotalLen => "bad_ipv4_total_len", "IPv4 total length inconsistent with header or frame";
    /// Fewer than 40 bytes of IPv6 header.
    TruncatedIpv6 => "truncated_ipv6", "truncated IPv6 header";
    /// EtherType IPv6 but version field not 6.
    BadIpv6Version => "bad_ipv6_version", "IPv6 version field is not 6";
    /// Payload length larger than the frame.
    BadIpv6PayloadLen => "bad_ipv6_payload_len", "IPv6 payload length exceeds frame";
    /// An extension header does not fit in the IPv6 payload.
    TruncatedIpv6ExtHeader => "truncated_ipv6_ext_header", "truncated IPv6 extension header";
    /// The extension headers push the L4 offset beyond 65535.
    Ipv6ExtHeadersTooLong => "ipv6_ext_headers_too_long", "IPv6 extension headers too long";
    /// Fewer than 20 bytes of TCP header.
    TruncatedTcp => "truncated_tcp", "truncated TCP header";
    /// TCP data offset below 5 or beyond the IP payload.
    BadTcpDataOffset => "bad_tcp_data_offset", "bad TCP data offset";
    /// Fewer than 8 bytes of UDP header.
    TruncatedUdp => "truncated_udp", "truncated UDP header";
    /// UDP length below 8, or (unfragmented) beyond the IP payload.
    BadUdpLength => "bad_udp_length", "UDP length inconsistent with IP payload";
    /// Fewer than 4 bytes of ICMP.
    TruncatedIcmp => "truncated_icmp", "truncated ICMP header";
    /// Fewer than 4 bytes of ICMPv6.
    TruncatedIcmpv6 => "truncated_icmpv6", "truncated ICMPv6 header";
    /// Fewer than 12 bytes of SCTP common header.
    TruncatedSctp => "truncated_sctp", "truncated SCTP header";
}

/// Parses `frame` (starting at the destination MAC, no FCS) into a
/// [`Layout`].
///
/// Rules, in order:
/// * fewer than 14 bytes: [`ParseError::Runt`];
/// * up to two VLAN tags (TPID 0x8100 or 0x88a8) are stepped over, a third
///   is [`ParseError::TooManyVlanTags`];
/// * IPv4: version 4, IHL >= 5, header present, `IHL*4 <= total_length <=`
///   bytes available; bytes after `total_length` (Ethernet padding) are
///   ignored. MF / offset set the fragment bits;
/// * IPv6: version 6, `payload_length` fits; hop-by-hop, routing,
///   destination options, AH and fragment headers are skipped; the walk
///   stops at "no next header", at any other protocol, and after a fragment
///   header with non-zero offset;
/// * ARP/RARP: at least the 8-byte fixed part; if it announces
///   Ethernet/IPv4 the 28-byte body must be present (else
///   [`ParseError::TruncatedArp`]); other formats are [`L3Kind::Other`];
/// * L4 (except on later fragments, which have none): the TCP header and
///   its options, the 8-byte UDP header with `8 <= length <= l4_len`
///   (upper bound not enforced on first fragments, whose UDP length covers
///   the whole datagram; a length below the IP payload is accepted, the rest
///   is trailer), 4 bytes of ICMP/ICMPv6, 12 bytes of SCTP.
pub fn parse(frame: &[u8]) -> Result<Layout, ParseError> {
    parse_with_tag_limit(frame, MAX_VLAN_TAGS)
}

/// [`parse`] accepting up to `max_tags` VLAN tags. The switch's own
/// `push_vlan` can make a double-tagged frame triple-tagged; the executor
/// re-parses such a frame with a higher limit so that later rewrites find
/// their headers. Only the two outermost tags are recorded in the layout
/// (`n_vlan` counts them all, and `l3_offset` is right whatever the depth).
pub fn parse_with_tag_limit(frame: &[u8], max_tags: usize) -> Result<Layout, ParseError> {
    if frame.len() < MIN_FRAME_LEN {
        return Err(ParseError::Runt);
    }
    let mut l = Layout::default();
    let mut ethertype = bytes::u16_at(frame, 12);
    let mut off = MIN_FRAME_LEN;
    while vlan::is_vlan_tpid(ethertype) {
        let n = usize::from(l.n_vlan);
        if n >= max_tags.min(64) {
            return Err(ParseError::TooManyVlanTags);
        }
        let tci = bytes::get_u16(frame, off).ok_or(ParseError::TruncatedVlan)?;
        let next = bytes::get_u16(frame, off + 2).ok_or(ParseError::TruncatedVlan)?;
        if n < MAX_VLAN_TAGS {
            l.vlan_tpids[n] = ethertype;
            l.vlan_tags[n] = tci;
        }
        l.n_vlan += 1;
        ethertype = next;
        off += vlan::HEADER_LEN;
    }
    l.ethertype = ethertype;
    // off <= 14 + 4 * 64 here.
    l.l3_offset = off as u16;
    // Cannot fail: every byte up to `off` was read above.
    let l3 = frame.get(off..).unwrap_or(&[]);
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(l3, off, &mut l)?,
        ETHERTYPE_IPV6 => parse_ipv6(l3, off, &mut l)?,
        ETHERTYPE_ARP | ETHERTYPE_RARP => {
            if l3.len() < arp::FIXED_LEN {
                return Err(ParseError::TruncatedArp);
            }
            if arp::is_eth_ipv4(l3) {
                if l3.len() < arp::HEADER_LEN {
                    return Err(ParseError::TruncatedArp);
                }
                l.l3 = L3Kind::Arp;
            } else {
                l.l3 = L3Kind::Other;
            }
        }
        e if e < 0x0600 => l.l3 = L3Kind::None,
        _ => l.l3 = L3Kind::Other,
    }
    Ok(l)
}

fn parse_ipv4(ip: &[u8], off: usize, l: &mut Layout) -> Result<(), ParseError> {
    if ip.len() < ipv4::HEADER_LEN {
        return Err(ParseError::TruncatedIpv4);
    }
    if ip[0] >> 4 != 4 {
        return Err(ParseError::BadIpv4Version);
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ihl < ipv4::HEADER_LEN {
        return Err(ParseError::BadIpv4HeaderLen);
    }
    if ip.len() < ihl {
        return Err(ParseError::TruncatedIpv4);
    }
    let total = usize::from(bytes::u16_at(ip, 2));
    if total < ihl || total > ip.len() {
        return Err(ParseError::BadIpv4TotalLen);
    }
    l.l3 = L3Kind::Ipv4;
    let ff = bytes::u16_at(ip, 6);
    if ff & (ipv4::FLAG_MF | ipv4::FRAG_OFFSET_MASK) != 0 {
        l.frag |= IS_FRAGMENT;
    }
    if ff & ipv4::FRAG_OFFSET_MASK != 0 {
        l.frag |= LATER_FRAGMENT;
    }
    let proto = ip[9];
    l.ip_proto = proto;
    // off <= 22, ihl <= 60, total <= 65535: all fit in u16.
    l.l4_offset = (off + ihl) as u16;
    l.l4_len = (total - ihl) as u16;
    if l.is_later_fragment() {
        l.l4 = L4Kind::None;
        return Ok(());
    }
    l.l4 = parse_l4(proto, &ip[ihl..total], false, l.is_fragment())?;
    Ok(())
}

fn parse_ipv6(ip: &[u8], off: usize, l: &mut Layout) -> Result<(), ParseError> {
    if ip.len() < ipv6::HEADER_LEN {
        return Err(ParseError::TruncatedIpv6);
    }
    if ip[0] >> 4 != 6 {
        return Err(ParseError::BadIpv6Version);
    }
    let end = ipv6::HEADER_LEN + usize::from(bytes::u16_at(ip, 4));
    if end > ip.len() {
        return Err(ParseError::BadIpv6PayloadLen);
    }
    l.l3 = L3Kind::Ipv6;
    let ip = &ip[..end];
    let mut nh = ip[6];
    let mut p = ipv6::HEADER_LEN;
    while ipv6::is_ext_header(nh) {
        // p <= end always holds: every step below checks the header fits.
        let hdr = ip.get(p..).unwrap_or(&[]);
        let len = ipv6::ext_header_len(nh, hdr).ok_or(ParseError::TruncatedIpv6ExtHeader)?;
        if hdr.len() < len {
            return Err(ParseError::TruncatedIpv6ExtHeader);
        }
        if nh == ipv6::NEXT_FRAGMENT {
            l.frag |= IS_FRAGMENT;
            if bytes::u16_at(hdr, 2) & 0xfff8 != 0 {
                l.frag |= LATER_FRAGMENT;
            }
        }
        nh = hdr[0];
        p += len;
        if l.is_later_fragment() {
            break;
        }
    }
    l.ip_proto = nh;
    l.l4_offset = u16::try_from(off + p).map_err(|_| ParseError::Ipv6ExtHeadersTooLong)?;
    // end - p <= payload_length <= 65535.
    l.l4_len = (end - p) as u16;
    if l.is_later_fragment() || nh == ipv6::NEXT_NONE {
        l.l4 = L4Kind::None;
        return Ok(());
    }
    l.l4 = parse_l4(nh, &ip[p..], true, l.is_fragment())?;
    Ok(())
}

/// Validates the transport header at the start of `seg` (the IP payload).
fn parse_l4(proto: u8, seg: &[u8], is_v6: bool, is_fragment: bool) -> Result<L4Kind, ParseError> {
    match proto {
        IPPROTO_TCP => {
            if seg.len() < 20 {
                return Err(ParseError::TruncatedTcp);
            }
            let doff = usize::from(seg[12] >> 4) * 4;
            if doff < 20 || doff > seg.len() {
                return Err(ParseError::BadTcpDataOffset);
            }
            Ok(L4Kind::Tcp)
        }
        IPPROTO_UDP => {
            if seg.len() < 8 {
                return Err(ParseError::TruncatedUdp);
            }
            let ulen = usize::from(bytes::u16_at(seg, 4));
            if ulen < 8 || (!is_fragment && ulen > seg.len()) {
                return Err(ParseError::BadUdpLength);
            }
            Ok(L4Kind::Udp)
        }
        IPPROTO_ICMP if !is_v6 => {
            if seg.len() < 4 {
                return Err(ParseError::TruncatedIcmp);
            }
            Ok(L4Kind::Icmp)
        }
        IPPROTO_ICMPV6 if is_v6 => {
            if seg.len() < 4 {
                return Err(ParseError::TruncatedIcmpv6);
            }
            Ok(L4Kind::Icmpv6)
        }
        IPPROTO_SCTP => {
            if seg.len() < 12 {
                return Err(ParseError::TruncatedSctp);
            }
            Ok(L4Kind::Sctp)
        }
        other => Ok(L4Kind::Other(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth(ethertype: u16) -> Vec<u8> {
        let mut v = vec![0xff; 6];
        v.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&ethertype.to_be_bytes());
        v
    }

    fn ipv4_udp(payload: &[u8]) -> Vec<u8> {
        let mut v = eth(0x0800);
        let total = (20 + 8 + payload.len()) as u16;
        v.extend_from_slice(&[
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        v[16..18].copy_from_slice(&total.to_be_bytes());
        v.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 0, 0, 0]);
        v[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn error_table_is_dense_and_named() {
        assert_eq!(ParseError::COUNT, ParseError::ALL.len());
        let mut names = std::collections::HashSet::new();
        for (i, e) in ParseError::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
            let r = e.reason();
            assert!(r
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
            assert!(names.insert(r), "duplicate reason {r}");
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(ParseError::TruncatedIpv4.reason(), "truncated_ipv4");
    }

    #[test]
    fn runt_and_plain_ethernet() {
        assert_eq!(parse(&[0; 13]), Err(ParseError::Runt));
        let l = parse(&eth(0x88cc)).unwrap(); // LLDP
        assert_eq!(l.l3, L3Kind::Other);
        assert_eq!(l.ethertype, 0x88cc);
        assert_eq!(l.l3_offset, 14);
        assert_eq!((l.l4, l.l4_offset, l.l4_len), (L4Kind::None, 0, 0));
        let l = parse(&eth(46)).unwrap(); // 802.3 length
        assert_eq!(l.l3, L3Kind::None);
    }

    #[test]
    fn ipv4_udp_with_padding() {
        let mut f = ipv4_udp(b"hi");
        f.resize(60, 0);
        let l = parse(&f).unwrap();
        assert_eq!(l.l3, L3Kind::Ipv4);
        assert_eq!((l.l3_offset, l.l4_offset, l.l4_len), (14, 34, 10));
        assert_eq!((l.l4, l.ip_proto, l.frag), (L4Kind::Udp, 17, 0));
        assert_eq!(l.l4_end(), 44);
    }

    #[test]
    fn vlan_tags() {
        let base = ipv4_udp(b"");
        let mut f = base[..12].to_vec();
        f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0xc8]);
        f.extend_from_slice(&base[12..]);
        let l = parse(&f).unwrap();
        assert_eq!(l.n_vlan, 2);
        assert_eq!(l.vlan_tpids, [0x88a8, 0x8100]);
        assert_eq!(l.vlan_tags, [100, 0x20c8]);
        assert_eq!(l.outer_vlan(), Some((0x88a8, 100)));
        assert_eq!((l.ethertype, l.l3_offset, l.l4_offset), (0x0800, 22, 42));

        let mut three = base[..12].to_vec();
        three.extend_from_slice(&[0x81, 0, 0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3]);
        three.extend_from_slice(&base[12..]);
        assert_eq!(parse(&three), Err(ParseError::TooManyVlanTags));
        assert_eq!(parse(&f[..16]), Err(ParseError::TruncatedVlan));
        assert_eq!(parse(&f[..17]), Err(ParseError::TruncatedVlan));
    }

    #[test]
    fn ipv4_errors() {
        let f = ipv4_udp(b"abcd");
        assert_eq!(parse(&f[..33]), Err(ParseError::TruncatedIpv4));
        let mut v = f.clone();
        v[14] = 0x65;
        assert_eq!(parse(&v), Err(ParseError::BadIpv4Version));
        let mut v = f.clone();
        v[14] = 0x44;
        assert_eq!(parse(&v), Err(ParseError::BadIpv4HeaderLen));
        let mut v = f.clone();
        v[14] = 0x4f;
        assert_eq!(parse(&v), Err(ParseError::TruncatedIpv4));
        let mut v = f.clone();
        v[17] = 19;
        assert_eq!(parse(&v), Err(ParseError::BadIpv4TotalLen));
        assert_eq!(parse(&f[..f.len() - 1]), Err(ParseError::BadIpv4TotalLen));
        let mut v = f.clone();
        v[39] = 7;
        assert_eq!(parse(&v), Err(ParseError::BadUdpLength));
        let mut v = f.clone();
        v[39] = 13;
        assert_eq!(parse(&v), Err(ParseError::BadUdpLength));
        let mut v = f.clone();
        v[39] = 9; // shorter UDP length than IP payload: accepted
        assert_eq!(parse(&v).unwrap().l4_len, 12);
        // Truncated UDP header: IP total length says only 4 bytes of L4.
        let mut v = f[..38].to_vec();
        v[16..18].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(parse(&v), Err(ParseError::TruncatedUdp));
    }

    #[test]
    fn ipv4_fragments() {
        let f = ipv4_udp(b"abcd");
        // First fragment: MF set, UDP length covering more than present.
        let mut v = f.clone();
        v[20] = 0x20;
        v[39] = 200;
        let l = parse(&v).unwrap();
        assert_eq!((l.frag, l.l4), (IS_FRAGMENT, L4Kind::Udp));
        // Later fragment: garbage where the UDP header would be is fine.
        let mut v = f.clone();
        v[20] = 0x00;
        v[21] = 0x10;
        v[39] = 1;
        let l = parse(&v).unwrap();
        assert_eq!(l.frag, IS_FRAGMENT | LATER_FRAGMENT);
        assert_eq!(
            (l.l4, l.ip_proto, l.l4_offset, l.l4_len),
            (L4Kind::None, 17, 34, 12)
        );
        // Later fragment with a tiny payload.
        let mut v = f[..36].to_vec();
        v[16..18].copy_from_slice(&22u16.to_be_bytes());
        v[20] = 0x00;
        v[21] = 0x10;
        assert!(parse(&v).is_ok());
    }

    #[test]
    fn arp_formats() {
        let mut f = eth(0x0806);
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(parse(&f), Err(ParseError::TruncatedArp));
        f.extend_from_slice(&[0; 20]);
        let l = parse(&f).unwrap();
        assert_eq!((l.l3, l.l3_offset), (L3Kind::Arp, 14));
        f[15] = 6; // not Ethernet
        assert_eq!(parse(&f).unwrap().l3, L3Kind::Other);
        assert_eq!(parse(&f[..20]), Err(ParseError::TruncatedArp));
        let mut r = eth(0x8035);
        r.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 3]);
        r.extend_from_slice(&[0; 20]);
        assert_eq!(parse(&r).unwrap().l3, L3Kind::Arp);
    }

    fn ipv6_frame(nh: u8, exts: &[u8], l4: &[u8]) -> Vec<u8> {
        let mut f = eth(0x86dd);
        let plen = (exts.len() + l4.len()) as u16;
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&plen.to_be_bytes());
        f.extend_from_slice(&[nh, 64]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(exts);
        f.extend_from_slice(l4);
        f
    }

    #[test]
    fn ipv6_extension_chain() {
        let tcp = {
            let mut t = [0u8; 20];
            t[12] = 0x50;
            t
        };
        // HBH(8) -> DST(16) -> ROUTING(8) -> AH(12+4=16) -> TCP
        let mut exts = vec![60, 0, 1, 4, 0, 0, 0, 0];
        exts.extend_from_slice(&[43, 1]);
        exts.extend_from_slice(&[0; 14]);
        exts.extend_from_slice(&[51, 0, 4, 0, 0, 0, 0, 0]);
        exts.extend_from_slice(&[6, 2, 0, 0]);
        exts.extend_from_slice(&[0; 12]);
        let f = ipv6_frame(0, &exts, &tcp);
        let l = parse(&f).unwrap();
        assert_eq!(l.l3, L3Kind::Ipv6);
        assert_eq!((l.l4, l.ip_proto), (L4Kind::Tcp, 6));
        assert_eq!(l.l4_offset as usize, 14 + 40 + exts.len());
        assert_eq!(l.l4_len, 20);
        assert_eq!(l.frag, 0);

        // Truncated AH.
        let f2 = ipv6_frame(0, &exts[..40], &[]);
        assert_eq!(parse(&f2), Err(ParseError::TruncatedIpv6ExtHeader));
        // No next header.
        let f3 = ipv6_frame(59, &[], &[1, 2, 3]);
        let l = parse(&f3).unwrap();
        assert_eq!((l.l4, l.ip_proto, l.l4_len), (L4Kind::None, 59, 3));
    }

    #[test]
    fn ipv6_fragments() {
        let udp = [0x30, 0x39, 0, 53, 0, 200, 0, 0];
        // First fragment (offset 0, M=1): L4 parsed, UDP length not bounded.
        let f = ipv6_frame(44, &[17, 0, 0, 1, 0, 0, 0, 7], &udp);
        let l = parse(&f).unwrap();
        assert_eq!((l.frag, l.l4, l.ip_proto), (IS_FRAGMENT, L4Kind::Udp, 17));
        // Later fragment: no L4 even though the bytes are too short for one.
        let f = ipv6_frame(44, &[6, 0, 0x05, 0xa8, 0, 0, 0, 7], &[1, 2]);
        let l = parse(&f).unwrap();
        assert_eq!(l.frag, IS_FRAGMENT | LATER_FRAGMENT);
        assert_eq!((l.l4, l.ip_proto, l.l4_len), (L4Kind::None, 6, 2));
        // Atomic fragment (offset 0, M=0) is still flagged.
        let f = ipv6_frame(44, &[59, 0, 0, 0, 0, 0, 0, 7], &[]);
        assert_eq!(parse(&f).unwrap().frag, IS_FRAGMENT);
        // Truncated fragment header.
        let f = ipv6_frame(44, &[6, 0, 0, 0], &[]);
        assert_eq!(parse(&f), Err(ParseError::TruncatedIpv6ExtHeader));
    }

    #[test]
    fn ipv6_errors_and_l4() {
        let f = ipv6_frame(58, &[], &[128, 0, 0, 0]);
        assert_eq!(parse(&f).unwrap().l4, L4Kind::Icmpv6);
        assert_eq!(
            parse(&ipv6_frame(58, &[], &[128, 0, 0])),
            Err(ParseError::TruncatedIcmpv6)
        );
        assert_eq!(
            parse(&ipv6_frame(1, &[], &[8])).unwrap().l4,
            L4Kind::Other(1)
        );
        assert_eq!(
            parse(&ipv6_frame(132, &[], &[0; 11])),
            Err(ParseError::TruncatedSctp)
        );
        assert_eq!(
            parse(&ipv6_frame(6, &[], &[0; 19])),
            Err(ParseError::TruncatedTcp)
        );
        let mut tcp = [0u8; 20];
        tcp[12] = 0x60;
        assert_eq!(
            parse(&ipv6_frame(6, &[], &tcp)),
            Err(ParseError::BadTcpDataOffset)
        );
        tcp[12] = 0x40;
        assert_eq!(
            parse(&ipv6_frame(6, &[], &tcp)),
            Err(ParseError::BadTcpDataOffset)
        );
        let f = ipv6_frame(17, &[], &[]);
        assert_eq!(parse(&f[..53]), Err(ParseError::TruncatedIpv6));
        let mut v = f.clone();
        v[14] = 0x40;
        assert_eq!(parse(&v), Err(ParseError::BadIpv6Version));
        let mut v = ipv6_frame(59, &[], &[0; 4]);
        v[19] = 5;
        assert_eq!(parse(&v), Err(ParseError::BadIpv6PayloadLen));
    }

    #[test]
    fn ipv6_ext_headers_past_u16_offsets() {
        // 31 destination-options headers of 2048 bytes plus one of 2040 fill
        // a maximal payload, so the L4 offset would not fit a u16.
        let mut exts = Vec::new();
        for _ in 0..31 {
            exts.push(60);
            exts.push(255);
            exts.resize(exts.len() + 2046, 0);
        }
        exts.push(59);
        exts.push(254);
        exts.resize(exts.len() + 2038, 0);
        let f = ipv6_frame(60, &exts, &[0; 7]);
        assert_eq!(f.len(), 14 + 40 + 65535);
        assert_eq!(parse(&f), Err(ParseError::Ipv6ExtHeadersTooLong));
        // One header fewer fits.
        let f = ipv6_frame(60, &exts[2048..], &[0; 7]);
        let l = parse(&f).unwrap();
        assert_eq!((l.l4, l.ip_proto, l.l4_len), (L4Kind::None, 59, 7));
    }

    #[test]
    fn ipv4_icmp_and_other() {
        let mut f = ipv4_udp(b"");
        f[23] = 1; // ICMP; the 8 UDP bytes serve as ICMP
        assert_eq!(parse(&f).unwrap().l4, L4Kind::Icmp);
        f[23] = 58; // ICMPv6 over IPv4 is just "other"
        assert_eq!(parse(&f).unwrap().l4, L4Kind::Other(58));
        f[23] = 1;
        let mut short = f[..37].to_vec();
        short[16..18].copy_from_slice(&23u16.to_be_bytes());
        assert_eq!(parse(&short), Err(ParseError::TruncatedIcmp));
    }
}
