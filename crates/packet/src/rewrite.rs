//! In-place header rewrites with incremental checksum maintenance.
//!
//! This is the "actions rewrite headers" step of port rx ring -> parse ->
//! flow key -> classifier/caches -> **actions** -> port tx. Set-field actions
//! run once per packet on the fast path, so each function here touches only
//! the bytes of its field and the checksums that cover them, patched with
//! RFC 1624 ([`crate::checksum::update16`] and friends) — never a pass over
//! the payload. The one exception is an SCTP port rewrite, whose CRC32c has
//! no cheap incremental form.
//!
//! Conventions shared by every function:
//! * Field rewrites take the frame and the [`Layout`] that [`crate::parse()`]
//!   produced for it; they do not re-parse. Ethernet-address and outer-VLAN
//!   rewrites take no layout: their fields sit at fixed offsets.
//! * Addresses are accepted as anything convertible to `Ipv4Addr` /
//!   `Ipv6Addr` (`u32`, `[u8; 4]`, `[u8; 16]`, `u128`, ...), so flow keys
//!   that store raw words need no conversion at the call site.
//! * They return `true` if the field exists in this frame and was written
//!   (even when the new value equals the old one). They return `false` and
//!   leave the frame untouched when the field does not apply — e.g. setting
//!   an IPv4 source on an ARP or IPv6 frame, a transport port on a later
//!   fragment or on ICMP, a VLAN field on an untagged frame — or when the
//!   frame is shorter than the layout claims. They never panic and never
//!   allocate.
//! * Checksums: the IPv4 header checksum is patched for IPv4 fields; TCP,
//!   UDP and ICMPv6 checksums are patched when a pseudo-header field
//!   (address) or a covered field (port) changes. A UDP checksum of 0 means
//!   "none" and stays 0; a patched UDP checksum that comes out 0 is stored as
//!   0xffff. On later fragments there is no L4 header to patch; on first
//!   fragments the L4 checksum covers the whole datagram and the incremental
//!   patch is still exact. An IPv6 destination change does not patch the L4
//!   checksum when a routing header with segments left is present (the
//!   pseudo header uses the final destination, as Open vSwitch also assumes).
//! * [`push_vlan`] / [`pop_vlan`] change the frame length and work on a
//!   [`PacketBuf`]; every offset in the old layout is stale afterwards and
//!   the caller must parse again before any further layout-based rewrite.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::buf::PacketBuf;
use crate::checksum::{update16, update32, update_bytes};
use crate::parse::{L3Kind, L4Kind, Layout};
use crate::{bytes, ipv4, ipv6, sctp, vlan, MacAddr};

/// Where the transport checksum that covers the IP pseudo header is, and
/// whether it follows UDP's zero rule. `None` if there is none to patch.
fn pseudo_l4_csum(frame: &[u8], layout: &Layout) -> Option<(usize, bool)> {
    if layout.is_later_fragment() {
        return None;
    }
    let l4 = usize::from(layout.l4_offset);
    let (off, udp) = match (layout.l3, layout.l4) {
        (L3Kind::Ipv4 | L3Kind::Ipv6, L4Kind::Tcp) => (l4 + 16, false),
        (L3Kind::Ipv4 | L3Kind::Ipv6, L4Kind::Udp) => (l4 + 6, true),
        (L3Kind::Ipv6, L4Kind::Icmpv6) => (l4 + 2, false),
        _ => return None,
    };
    (off + 2 <= frame.len()).then_some((off, udp))
}

/// Rewrites the 16-bit checksum at `off` with `patch`, honouring UDP's
/// "0 = no checksum" rule when `udp`.
fn patch_csum(frame: &mut [u8], off: usize, udp: bool, patch: impl FnOnce(u16) -> u16) {
    let old = bytes::u16_at(frame, off);
    if udp && old == 0 {
        return;
    }
    let mut new = patch(old);
    if udp && new == 0 {
        new = 0xffff;
    }
    bytes::set_u16(frame, off, new);
}

/// Patches a *partial* L4 checksum field (`CHECKSUM_PARTIAL`: it holds the
/// folded pseudo-header sum `P`, not complemented) for a pseudo-header
/// field changing from `old` to `new` (`old`/`new` as 16-bit words):
/// `P' = P - old + new`, i.e. the complement of [`update16`] applied to the
/// complemented field. This is what the kernel's
/// `inet_proto_csum_replace4(..., pseudohdr = true)` does for a
/// `CHECKSUM_PARTIAL` skb (`~csum_fold(csum_partial({~from, to}, P))`).
/// UDP's zero rule does not apply: the field is not a checksum yet.
fn patch_partial(frame: &mut [u8], off: usize, patch: impl FnOnce(u16) -> u16) {
    let old = bytes::u16_at(frame, off);
    bytes::set_u16(frame, off, !patch(!old));
}

/// Does the frame hold everything the layout describes? Checked up front so
/// that a rewrite either applies completely or not at all.
fn fits(frame: &[u8], layout: &Layout) -> bool {
    frame.len() >= layout.l4_end()
}

/// Offset of the IPv4 header if the frame is IPv4 and matches the layout.
fn ipv4_l3(frame: &[u8], layout: &Layout) -> Option<usize> {
    let l3 = usize::from(layout.l3_offset);
    (layout.l3 == L3Kind::Ipv4 && frame.len() >= l3 + ipv4::HEADER_LEN && fits(frame, layout))
        .then_some(l3)
}

/// Offset of the IPv6 header if the frame is IPv6 and matches the layout.
fn ipv6_l3(frame: &[u8], layout: &Layout) -> Option<usize> {
    let l3 = usize::from(layout.l3_offset);
    (layout.l3 == L3Kind::Ipv6 && frame.len() >= l3 + ipv6::HEADER_LEN && fits(frame, layout))
        .then_some(l3)
}

/// Offset of the ARP body if the frame is Ethernet/IPv4 ARP.
fn arp_l3(frame: &[u8], layout: &Layout) -> Option<usize> {
    let l3 = usize::from(layout.l3_offset);
    (layout.l3 == L3Kind::Arp && frame.len() >= l3 + crate::arp::HEADER_LEN).then_some(l3)
}

/// Rewrites a 16-bit word of the IPv4 header, patching the header checksum.
fn ipv4_set_word(frame: &mut [u8], l3: usize, word_off: usize, new: u16) {
    let at = l3 + word_off;
    let old = bytes::u16_at(frame, at);
    bytes::set_u16(frame, at, new);
    let c = l3 + ipv4::CHECKSUM_OFFSET;
    let csum = bytes::u16_at(frame, c);
    bytes::set_u16(frame, c, update16(csum, old, new));
}

/// Sets the Ethernet source address. Needs no layout: the address is at a
/// fixed offset and no checksum covers it. `false` only for frames shorter
/// than 12 bytes.
pub fn set_eth_src(frame: &mut [u8], mac: MacAddr) -> bool {
    match frame.get_mut(6..12) {
        Some(s) => {
            s.copy_from_slice(&mac);
            true
        }
        None => false,
    }
}

/// Sets the Ethernet destination address; see [`set_eth_src`].
pub fn set_eth_dst(frame: &mut [u8], mac: MacAddr) -> bool {
    match frame.get_mut(0..6) {
        Some(s) => {
            s.copy_from_slice(&mac);
            true
        }
        None => false,
    }
}

fn set_ipv4_addr(
    frame: &mut [u8],
    layout: &Layout,
    field: usize,
    ip: Ipv4Addr,
    partial: bool,
) -> bool {
    let Some(l3) = ipv4_l3(frame, layout) else {
        return false;
    };
    let l4 = pseudo_l4_csum(frame, layout);
    let at = l3 + field;
    let old = bytes::u32_at(frame, at);
    let new = u32::from(ip);
    bytes::set_u32(frame, at, new);
    let c = l3 + ipv4::CHECKSUM_OFFSET;
    let csum = bytes::u16_at(frame, c);
    bytes::set_u16(frame, c, update32(csum, old, new));
    match l4 {
        Some((off, _)) if partial => patch_partial(frame, off, |c| update32(c, old, new)),
        Some((off, udp)) => patch_csum(frame, off, udp, |c| update32(c, old, new)),
        None => {}
    }
    true
}

/// Sets the IPv4 source address, patching the IPv4 header checksum and the
/// TCP/UDP checksum (pseudo header). `false` if not IPv4.
pub fn set_ipv4_src(frame: &mut [u8], layout: &Layout, ip: impl Into<Ipv4Addr>) -> bool {
    set_ipv4_addr(frame, layout, ipv4::SRC_OFFSET, ip.into(), false)
}

/// Sets the IPv4 destination address; see [`set_ipv4_src`].
pub fn set_ipv4_dst(frame: &mut [u8], layout: &Layout, ip: impl Into<Ipv4Addr>) -> bool {
    set_ipv4_addr(frame, layout, ipv4::DST_OFFSET, ip.into(), false)
}

/// [`set_ipv4_src`] for a frame whose L4 checksum may be partial
/// (`csum_partial`: the field holds the pseudo-header sum, see
/// [`crate::buf::Offload`]); the partial sum is kept consistent with the new
/// pseudo header, so finishing it later gives the right checksum.
pub fn set_ipv4_src_ext(
    frame: &mut [u8],
    layout: &Layout,
    ip: impl Into<Ipv4Addr>,
    csum_partial: bool,
) -> bool {
    set_ipv4_addr(frame, layout, ipv4::SRC_OFFSET, ip.into(), csum_partial)
}

/// [`set_ipv4_dst`] for a frame whose L4 checksum may be partial; see
/// [`set_ipv4_src_ext`].
pub fn set_ipv4_dst_ext(
    frame: &mut [u8],
    layout: &Layout,
    ip: impl Into<Ipv4Addr>,
    csum_partial: bool,
) -> bool {
    set_ipv4_addr(frame, layout, ipv4::DST_OFFSET, ip.into(), csum_partial)
}

fn set_ipv6_addr(
    frame: &mut [u8],
    layout: &Layout,
    field: usize,
    ip: Ipv6Addr,
    partial: bool,
) -> bool {
    let Some(l3) = ipv6_l3(frame, layout) else {
        return false;
    };
    let mut l4 = pseudo_l4_csum(frame, layout);
    if field == ipv6::DST_OFFSET && ipv6::routing_segments_left(frame, layout) != Some(0) {
        l4 = None;
    }
    let at = l3 + field;
    let Some(old) = bytes::get_array::<16>(frame, at) else {
        return false;
    };
    let new = ip.octets();
    frame[at..at + 16].copy_from_slice(&new);
    match l4 {
        Some((off, _)) if partial => patch_partial(frame, off, |c| update_bytes(c, &old, &new)),
        Some((off, udp)) => patch_csum(frame, off, udp, |c| update_bytes(c, &old, &new)),
        None => {}
    }
    true
}

/// Sets the IPv6 source address, patching the TCP/UDP/ICMPv6 checksum.
/// `false` if not IPv6.
pub fn set_ipv6_src(frame: &mut [u8], layout: &Layout, ip: impl Into<Ipv6Addr>) -> bool {
    set_ipv6_addr(frame, layout, ipv6::SRC_OFFSET, ip.into(), false)
}

/// [`set_ipv6_src`] for a frame whose L4 checksum may be partial; see
/// [`set_ipv4_src_ext`].
pub fn set_ipv6_src_ext(
    frame: &mut [u8],
    layout: &Layout,
    ip: impl Into<Ipv6Addr>,
    csum_partial: bool,
) -> bool {
    set_ipv6_addr(frame, layout, ipv6::SRC_OFFSET, ip.into(), csum_partial)
}

/// [`set_ipv6_dst`] for a frame whose L4 checksum may be partial; see
/// [`set_ipv4_src_ext`].
pub fn set_ipv6_dst_ext(
    frame: &mut [u8],
    layout: &Layout,
    ip: impl Into<Ipv6Addr>,
    csum_partial: bool,
) -> bool {
    set_ipv6_addr(frame, layout, ipv6::DST_OFFSET, ip.into(), csum_partial)
}

/// Sets the IPv6 destination address, patching the TCP/UDP/ICMPv6 checksum
/// unless a routing header with segments left is present. `false` if not
/// IPv6.
pub fn set_ipv6_dst(frame: &mut [u8], layout: &Layout, ip: impl Into<Ipv6Addr>) -> bool {
    set_ipv6_addr(frame, layout, ipv6::DST_OFFSET, ip.into(), false)
}

/// Current TOS byte (IPv4) or traffic class (IPv6); `None` if not IP.
pub fn ip_tos(frame: &[u8], layout: &Layout) -> Option<u8> {
    if let Some(l3) = ipv4_l3(frame, layout) {
        Some(frame[l3 + 1])
    } else {
        ipv6_l3(frame, layout).map(|l3| (frame[l3] << 4) | (frame[l3 + 1] >> 4))
    }
}

/// Sets the whole IPv4 TOS byte (patching the header checksum) or the IPv6
/// traffic class. `false` if not IP.
pub fn set_ip_tos(frame: &mut [u8], layout: &Layout, tos: u8) -> bool {
    if let Some(l3) = ipv4_l3(frame, layout) {
        let w = u16::from_be_bytes([frame[l3], tos]);
        ipv4_set_word(frame, l3, 0, w);
        true
    } else if let Some(l3) = ipv6_l3(frame, layout) {
        frame[l3] = (frame[l3] & 0xf0) | (tos >> 4);
        frame[l3 + 1] = (frame[l3 + 1] & 0x0f) | (tos << 4);
        true
    } else {
        false
    }
}

/// Sets the DSCP (upper six bits of TOS / traffic class), keeping ECN.
/// Bits of `dscp` above the sixth are ignored. `false` if not IP.
pub fn set_ip_dscp(frame: &mut [u8], layout: &Layout, dscp: u8) -> bool {
    match ip_tos(frame, layout) {
        Some(tos) => set_ip_tos(frame, layout, (dscp << 2) | (tos & 0x03)),
        None => false,
    }
}

/// Sets the ECN bits (lower two bits of TOS / traffic class), keeping DSCP.
/// `false` if not IP.
pub fn set_ip_ecn(frame: &mut [u8], layout: &Layout, ecn: u8) -> bool {
    match ip_tos(frame, layout) {
        Some(tos) => set_ip_tos(frame, layout, (tos & !0x03) | (ecn & 0x03)),
        None => false,
    }
}

/// Current IPv4 TTL or IPv6 hop limit; `None` if not IP.
pub fn ttl(frame: &[u8], layout: &Layout) -> Option<u8> {
    if let Some(l3) = ipv4_l3(frame, layout) {
        Some(frame[l3 + 8])
    } else {
        ipv6_l3(frame, layout).map(|l3| frame[l3 + 7])
    }
}

/// Sets the IPv4 TTL (patching the header checksum) or the IPv6 hop limit.
/// `false` if not IP.
pub fn set_ttl(frame: &mut [u8], layout: &Layout, ttl: u8) -> bool {
    if let Some(l3) = ipv4_l3(frame, layout) {
        let w = u16::from_be_bytes([ttl, frame[l3 + 9]]);
        ipv4_set_word(frame, l3, 8, w);
        true
    } else if let Some(l3) = ipv6_l3(frame, layout) {
        frame[l3 + 7] = ttl;
        true
    } else {
        false
    }
}

/// Decrements the IPv4 TTL / IPv6 hop limit, as a router's `dec_ttl` does.
/// Returns the new value, or `None` without touching the frame if the frame
/// is not IP or the TTL is already 0 or 1 (the packet must then be dropped
/// or punted, which is the caller's policy).
pub fn dec_ttl(frame: &mut [u8], layout: &Layout) -> Option<u8> {
    let t = ttl(frame, layout)?;
    if t <= 1 {
        return None;
    }
    set_ttl(frame, layout, t - 1).then_some(t - 1)
}

fn set_tp_port(frame: &mut [u8], layout: &Layout, field: usize, port: u16, partial: bool) -> bool {
    let l4 = usize::from(layout.l4_offset);
    if !layout.is_ip() || !fits(frame, layout) {
        return false;
    }
    match layout.l4 {
        L4Kind::Tcp | L4Kind::Udp => {
            let udp = layout.l4 == L4Kind::Udp;
            let (hdr_len, csum_off) = if udp { (8, 6) } else { (20, 16) };
            if frame.len() < l4 + hdr_len {
                return false;
            }
            let old = bytes::u16_at(frame, l4 + field);
            bytes::set_u16(frame, l4 + field, port);
            // A partial checksum covers only the pseudo header so far: the
            // port is summed when the checksum is finished.
            if !partial {
                patch_csum(frame, l4 + csum_off, udp, |c| update16(c, old, port));
            }
            true
        }
        L4Kind::Sctp => {
            let end = l4 + usize::from(layout.l4_len);
            let Some(seg) = frame.get_mut(l4..end) else {
                return false;
            };
            if seg.len() < sctp::HEADER_LEN {
                return false;
            }
            let mut p = sctp::Packet::new_unchecked(seg);
            // The CRC covers the whole SCTP packet, which a fragment does not
            // hold; and a packet whose CRC was already wrong must stay wrong.
            let fix = !layout.is_fragment() && p.verify_checksum();
            if field == 0 {
                p.set_src_port(port);
            } else {
                p.set_dst_port(port);
            }
            if fix {
                p.fill_checksum();
            }
            true
        }
        _ => false,
    }
}

/// Sets the TCP/UDP/SCTP source port, patching the TCP/UDP checksum or
/// recomputing the SCTP CRC32c (only for unfragmented packets whose CRC was
/// correct). `false` for other protocols and for later fragments.
pub fn set_tp_src(frame: &mut [u8], layout: &Layout, port: u16) -> bool {
    set_tp_port(frame, layout, 0, port, false)
}

/// Sets the TCP/UDP/SCTP destination port; see [`set_tp_src`].
pub fn set_tp_dst(frame: &mut [u8], layout: &Layout, port: u16) -> bool {
    set_tp_port(frame, layout, 2, port, false)
}

/// [`set_tp_src`] for a frame whose L4 checksum may be partial: a partial
/// TCP/UDP checksum field is left alone (ports are not in the pseudo
/// header; they are summed when the checksum is finished).
pub fn set_tp_src_ext(frame: &mut [u8], layout: &Layout, port: u16, csum_partial: bool) -> bool {
    set_tp_port(frame, layout, 0, port, csum_partial)
}

/// [`set_tp_dst`] for a frame whose L4 checksum may be partial; see
/// [`set_tp_src_ext`].
pub fn set_tp_dst_ext(frame: &mut [u8], layout: &Layout, port: u16, csum_partial: bool) -> bool {
    set_tp_port(frame, layout, 2, port, csum_partial)
}

/// Sets the identifier of an ICMPv4 echo/timestamp/information message
/// (NAT of ICMP "connections"), patching the ICMP checksum (which has no
/// pseudo header). `false` for anything else or a short frame.
pub fn set_icmp_id(frame: &mut [u8], layout: &Layout, id: u16) -> bool {
    if layout.l4 != L4Kind::Icmp || layout.is_fragment() {
        return false;
    }
    let l4 = usize::from(layout.l4_offset);
    if frame.len() < l4 + 8 || !matches!(frame[l4], 0 | 8 | 13 | 14 | 15 | 16) {
        return false;
    }
    let old = bytes::u16_at(frame, l4 + 4);
    bytes::set_u16(frame, l4 + 4, id);
    let c = bytes::u16_at(frame, l4 + 2);
    bytes::set_u16(frame, l4 + 2, update16(c, old, id));
    true
}

/// Where the pieces of the packet an ICMPv4/ICMPv6 error quotes are.
struct Quoted {
    /// Offset of the error's own checksum, which covers the quote.
    csum: usize,
    /// Offset of the quoted IP header (complete: checked by [`quoted`]).
    ip: usize,
    v6: bool,
    /// Offset of the quoted L4 header; `None` when the quote has none (a
    /// later fragment, truncated IPv6 extension headers).
    l4: Option<usize>,
    /// The quoted packet's L4 protocol.
    proto: u8,
    /// End of the quote: the end of the error per its IP length (link
    /// padding excluded).
    end: usize,
    /// IPv6: a routing header with segments left comes before the quoted
    /// L4 header, whose pseudo header then holds the final destination.
    routed: bool,
}

/// The quote of an ICMPv4 error (destination unreachable, source quench,
/// redirect, time exceeded, parameter problem) or ICMPv6 error (types
/// 1-4) whose quoted IP header is complete.
fn quoted(frame: &[u8], layout: &Layout) -> Option<Quoted> {
    if layout.is_fragment() || !fits(frame, layout) {
        return None;
    }
    let icmp = usize::from(layout.l4_offset);
    let end = layout.l4_end();
    let ty = *frame.get(icmp)?;
    let v6 = match (layout.l3, layout.l4) {
        (L3Kind::Ipv4, L4Kind::Icmp) if matches!(ty, 3 | 4 | 5 | 11 | 12) => false,
        (L3Kind::Ipv6, L4Kind::Icmpv6) if (1..=4).contains(&ty) => true,
        _ => return None,
    };
    let ip = icmp + 8;
    let hdr = frame.get(ip..end)?;
    let mut q = Quoted {
        csum: icmp + 2,
        ip,
        v6,
        l4: None,
        proto: 0,
        end,
        routed: false,
    };
    if !v6 {
        if hdr.len() < ipv4::HEADER_LEN || hdr[0] >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(hdr[0] & 0x0f) * 4;
        if ihl < ipv4::HEADER_LEN || ihl > hdr.len() {
            return None;
        }
        q.proto = hdr[9];
        // A first fragment still starts with the L4 header.
        q.l4 = (bytes::u16_at(hdr, 6) & 0x1fff == 0).then_some(ip + ihl);
        return Some(q);
    }
    if hdr.len() < ipv6::HEADER_LEN || hdr[0] >> 4 != 6 {
        return None;
    }
    let mut nh = hdr[6];
    let mut off = ip + ipv6::HEADER_LEN;
    while ipv6::is_ext_header(nh) {
        let ext = &frame[off.min(end)..end];
        let Some(len) = ipv6::ext_header_len(nh, ext).filter(|&l| l <= ext.len()) else {
            // Truncated inside the extension headers: no L4 header.
            return Some(q);
        };
        match nh {
            ipv6::NEXT_FRAGMENT if bytes::u16_at(ext, 2) & 0xfff8 != 0 => return Some(q),
            ipv6::NEXT_ROUTING if ext[3] != 0 => q.routed = true,
            _ => {}
        }
        nh = ext[0];
        off += len;
    }
    q.proto = nh;
    q.l4 = Some(off);
    Some(q)
}

/// Writes `new` (at most 16 bytes) at `at` inside the quote, patching the
/// error's checksum, unless that is partial: it is then summed over the
/// finished bytes anyway. The caller checks that the bytes are inside the
/// quote.
fn quoted_write(frame: &mut [u8], q: &Quoted, at: usize, new: &[u8], partial: bool) {
    let n = new.len();
    let mut old = [0u8; 16];
    old[..n].copy_from_slice(&frame[at..at + n]);
    frame[at..at + n].copy_from_slice(new);
    if !partial {
        let c = bytes::u16_at(frame, q.csum);
        bytes::set_u16(frame, q.csum, update_bytes(c, &old[..n], new));
    }
}

/// Patches a checksum of the quoted packet at `off` with `patch` (UDP's
/// zero rule when `udp`), if the quote holds it.
fn quoted_csum(
    frame: &mut [u8],
    q: &Quoted,
    off: usize,
    udp: bool,
    partial: bool,
    patch: impl FnOnce(u16) -> u16,
) {
    if off + 2 > q.end {
        return;
    }
    let old = bytes::u16_at(frame, off);
    if udp && old == 0 {
        return;
    }
    let mut new = patch(old);
    if udp && new == 0 {
        new = 0xffff;
    }
    quoted_write(frame, q, off, &new.to_be_bytes(), partial);
}

fn set_icmp_inner_addr(
    frame: &mut [u8],
    layout: &Layout,
    dst: bool,
    ip: IpAddr,
    partial: bool,
) -> bool {
    let Some(q) = quoted(frame, layout) else {
        return false;
    };
    let mut new = [0u8; 16];
    let n = match ip {
        IpAddr::V4(a) if !q.v6 => {
            new[..4].copy_from_slice(&a.octets());
            4
        }
        IpAddr::V6(a) if q.v6 => {
            new = a.octets();
            16
        }
        _ => return false,
    };
    let field = match (q.v6, dst) {
        (false, false) => ipv4::SRC_OFFSET,
        (false, true) => ipv4::DST_OFFSET,
        (true, false) => ipv6::SRC_OFFSET,
        (true, true) => ipv6::DST_OFFSET,
    };
    let at = q.ip + field;
    let mut old = [0u8; 16];
    old[..n].copy_from_slice(&frame[at..at + n]);
    let (old, new) = (&old[..n], &new[..n]);
    quoted_write(frame, &q, at, new, partial);
    if !q.v6 {
        let c = q.ip + ipv4::CHECKSUM_OFFSET;
        quoted_csum(frame, &q, c, false, partial, |c| update_bytes(c, old, new));
    }
    let pseudo = match (q.l4, q.proto) {
        (Some(l4), crate::IPPROTO_TCP) => Some((l4 + 16, false)),
        (Some(l4), crate::IPPROTO_UDP) => Some((l4 + 6, true)),
        (Some(l4), crate::IPPROTO_ICMPV6) if q.v6 => Some((l4 + 2, false)),
        _ => None,
    };
    if let Some((off, udp)) = pseudo.filter(|_| !(dst && q.routed)) {
        quoted_csum(frame, &q, off, udp, partial, |c| update_bytes(c, old, new));
    }
    true
}

/// Sets the source address of the packet an ICMPv4/ICMPv6 error quotes
/// (NAT of a related error, OVS `nat_inner_packet`), patching the quoted
/// IPv4 header checksum, the quoted TCP/UDP/ICMPv6 checksum when the quote
/// holds it (pseudo header) and the error's own checksum (which covers the
/// quote; left alone when `csum_partial`, see [`set_ipv4_src_ext`]).
/// `false` if the frame is no such error, its quoted IP header is
/// incomplete, or `ip` is of the other family.
pub fn set_icmp_inner_src(
    frame: &mut [u8],
    layout: &Layout,
    ip: impl Into<IpAddr>,
    csum_partial: bool,
) -> bool {
    set_icmp_inner_addr(frame, layout, false, ip.into(), csum_partial)
}

/// Sets the destination address of the packet an ICMP error quotes; see
/// [`set_icmp_inner_src`]. Behind an IPv6 routing header with segments
/// left the quoted L4 checksum is not patched (its pseudo header holds the
/// final destination).
pub fn set_icmp_inner_dst(
    frame: &mut [u8],
    layout: &Layout,
    ip: impl Into<IpAddr>,
    csum_partial: bool,
) -> bool {
    set_icmp_inner_addr(frame, layout, true, ip.into(), csum_partial)
}

fn set_icmp_inner_port(
    frame: &mut [u8],
    layout: &Layout,
    field: usize,
    port: u16,
    partial: bool,
) -> bool {
    let Some(q) = quoted(frame, layout) else {
        return false;
    };
    let Some(l4) = q.l4 else {
        return false;
    };
    let proto = q.proto;
    let at = l4 + field;
    if !matches!(
        proto,
        crate::IPPROTO_TCP | crate::IPPROTO_UDP | crate::IPPROTO_SCTP
    ) || at + 2 > q.end
    {
        return false;
    }
    let old = bytes::u16_at(frame, at);
    quoted_write(frame, &q, at, &port.to_be_bytes(), partial);
    match proto {
        crate::IPPROTO_TCP => {
            quoted_csum(frame, &q, l4 + 16, false, partial, |c| {
                update16(c, old, port)
            });
        }
        crate::IPPROTO_UDP => {
            quoted_csum(frame, &q, l4 + 6, true, partial, |c| update16(c, old, port));
        }
        // SCTP's CRC32c covers the whole original packet, which the quote
        // does not hold: it is left as it is.
        _ => {}
    }
    true
}

/// Sets the TCP/UDP/SCTP source port of the packet an ICMPv4/ICMPv6 error
/// quotes, patching the quoted TCP/UDP checksum when the quote holds it
/// and the error's own checksum (see [`set_icmp_inner_src`]). `false` if
/// there is no such error, or the quote has no such port.
pub fn set_icmp_inner_tp_src(
    frame: &mut [u8],
    layout: &Layout,
    port: u16,
    csum_partial: bool,
) -> bool {
    set_icmp_inner_port(frame, layout, 0, port, csum_partial)
}

/// Sets the TCP/UDP/SCTP destination port of the packet an ICMP error
/// quotes; see [`set_icmp_inner_tp_src`].
pub fn set_icmp_inner_tp_dst(
    frame: &mut [u8],
    layout: &Layout,
    port: u16,
    csum_partial: bool,
) -> bool {
    set_icmp_inner_port(frame, layout, 2, port, csum_partial)
}

/// Sets the identifier of the ICMPv4 echo/timestamp/information message an
/// ICMPv4 error quotes, patching the quoted ICMP checksum (when quoted) and
/// the error's own checksum (see [`set_icmp_inner_src`]). `false` for
/// anything else.
pub fn set_icmp_inner_id(frame: &mut [u8], layout: &Layout, id: u16, csum_partial: bool) -> bool {
    let Some(q) = quoted(frame, layout) else {
        return false;
    };
    let Some(l4) = q.l4 else {
        return false;
    };
    if q.v6
        || q.proto != crate::IPPROTO_ICMP
        || l4 + 8 > q.end
        || !matches!(frame[l4], 0 | 8 | 13 | 14 | 15 | 16)
    {
        return false;
    }
    let old = bytes::u16_at(frame, l4 + 4);
    quoted_write(frame, &q, l4 + 4, &id.to_be_bytes(), csum_partial);
    quoted_csum(frame, &q, l4 + 2, false, csum_partial, |c| {
        update16(c, old, id)
    });
    true
}

/// Sets the ARP operation. `false` unless the frame is Ethernet/IPv4 ARP.
pub fn set_arp_op(frame: &mut [u8], layout: &Layout, op: u16) -> bool {
    match arp_l3(frame, layout) {
        Some(l3) => {
            bytes::set_u16(frame, l3 + 6, op);
            true
        }
        None => false,
    }
}

fn set_arp_bytes(frame: &mut [u8], layout: &Layout, off: usize, val: &[u8]) -> bool {
    match arp_l3(frame, layout) {
        Some(l3) => {
            frame[l3 + off..l3 + off + val.len()].copy_from_slice(val);
            true
        }
        None => false,
    }
}

/// Sets the ARP sender hardware address.
pub fn set_arp_sha(frame: &mut [u8], layout: &Layout, mac: MacAddr) -> bool {
    set_arp_bytes(frame, layout, 8, &mac)
}

/// Sets the ARP sender protocol address.
pub fn set_arp_spa(frame: &mut [u8], layout: &Layout, ip: impl Into<Ipv4Addr>) -> bool {
    set_arp_bytes(frame, layout, 14, &ip.into().octets())
}

/// Sets the ARP target hardware address.
pub fn set_arp_tha(frame: &mut [u8], layout: &Layout, mac: MacAddr) -> bool {
    set_arp_bytes(frame, layout, 18, &mac)
}

/// Sets the ARP target protocol address.
pub fn set_arp_tpa(frame: &mut [u8], layout: &Layout, ip: impl Into<Ipv4Addr>) -> bool {
    set_arp_bytes(frame, layout, 24, &ip.into().octets())
}

/// Offset of the outermost TCI, if the frame is tagged. The outer tag is
/// always right after the MAC addresses, so no layout is needed (which also
/// keeps these usable right after a push without re-parsing).
fn outer_tci(frame: &[u8]) -> Option<usize> {
    let tpid = bytes::get_u16(frame, 12)?;
    (vlan::is_vlan_tpid(tpid) && frame.len() >= 16).then_some(14)
}

/// Sets the whole TCI of the outermost VLAN tag. `false` if untagged.
pub fn set_vlan_tci(frame: &mut [u8], tci: u16) -> bool {
    match outer_tci(frame) {
        Some(at) => {
            bytes::set_u16(frame, at, tci);
            true
        }
        None => false,
    }
}

/// Sets the VID of the outermost VLAN tag, keeping PCP and DEI. Bits of
/// `vid` above the twelfth are ignored. `false` if untagged.
pub fn set_vlan_vid(frame: &mut [u8], vid: u16) -> bool {
    match outer_tci(frame) {
        Some(at) => {
            let t = bytes::u16_at(frame, at);
            bytes::set_u16(frame, at, (t & !vlan::VID_MASK) | (vid & vlan::VID_MASK));
            true
        }
        None => false,
    }
}

/// Sets the PCP of the outermost VLAN tag, keeping DEI and VID. Bits of
/// `pcp` above the third are ignored. `false` if untagged.
pub fn set_vlan_pcp(frame: &mut [u8], pcp: u8) -> bool {
    match outer_tci(frame) {
        Some(at) => {
            let t = bytes::u16_at(frame, at);
            let mask = 7 << vlan::PCP_SHIFT;
            bytes::set_u16(
                frame,
                at,
                (t & !mask) | (u16::from(pcp & 7) << vlan::PCP_SHIFT),
            );
            true
        }
        None => false,
    }
}

/// Inserts a VLAN tag (`tpid`, `tci`) as the new outermost tag, right after
/// the MAC addresses, growing the frame into the buffer's headroom: only the
/// 12 address bytes move. `false`, leaving the buffer unchanged, if the frame
/// is shorter than an Ethernet header or the headroom is under 4 bytes (see
/// [`PacketBuf::reserve_headroom`]).
///
/// Any number of tags can be pushed, but [`crate::parse()`] rejects frames with
/// more than two. The caller must parse again afterwards.
pub fn push_vlan(buf: &mut PacketBuf, tpid: u16, tci: u16) -> bool {
    if buf.len() < crate::ethernet::HEADER_LEN || buf.push_front(vlan::HEADER_LEN).is_none() {
        return false;
    }
    let d = buf.data_mut();
    d.copy_within(4..16, 0);
    bytes::set_u16(d, 12, tpid);
    bytes::set_u16(d, 14, tci);
    true
}

/// Removes the outermost VLAN tag, moving the MAC addresses 4 bytes forward
/// (the freed bytes become headroom). `false`, leaving the buffer unchanged,
/// if the frame has no complete outer tag. The caller must parse again
/// afterwards.
pub fn pop_vlan(buf: &mut PacketBuf) -> bool {
    let d = buf.data_mut();
    if d.len() < crate::ethernet::HEADER_LEN + vlan::HEADER_LEN
        || !vlan::is_vlan_tpid(bytes::u16_at(d, 12))
    {
        return false;
    }
    d.copy_within(0..12, 4);
    buf.pull_front(vlan::HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::FrameBuilder;
    use crate::checksum::{verify_ipv4_header, verify_l4};
    use crate::parse::parse;

    const A: MacAddr = [2, 0, 0, 0, 0, 1];
    const B: MacAddr = [2, 0, 0, 0, 0, 2];

    #[test]
    fn icmp_echo_id_rewrite_keeps_the_checksum_right() {
        let mut f = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
            .icmp(8, 0)
            .echo(0x1234, 7)
            .payload(b"ping")
            .build();
        let l = parse(&f).unwrap();
        assert!(set_icmp_id(&mut f, &l, 0xbeef));
        assert!(crate::builder::all_checksums_valid(&f));
        assert_eq!(bytes::u16_at(&f, usize::from(l.l4_offset) + 4), 0xbeef);
        // Not an echo: an error message is left alone.
        let mut e = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
            .icmp(3, 1)
            .build();
        let l = parse(&e).unwrap();
        assert!(!set_icmp_id(&mut e, &l, 1));
    }

    /// Turn a correct TCP/UDP checksum into what a `CHECKSUM_PARTIAL`
    /// sender leaves: the folded pseudo-header sum.
    fn make_partial(f: &mut [u8]) -> (usize, usize) {
        use crate::checksum::{fold, pseudo_header_ipv4, pseudo_header_ipv6};
        let l = parse(f).unwrap();
        let l3 = usize::from(l.l3_offset);
        let l4 = usize::from(l.l4_offset);
        let (proto, field) = match l.l4 {
            L4Kind::Tcp => (crate::IPPROTO_TCP, l4 + 16),
            _ => (crate::IPPROTO_UDP, l4 + 6),
        };
        let len = l.l4_end() - l4;
        let sum = if l.l3 == L3Kind::Ipv4 {
            let a = |o: usize| Ipv4Addr::from(bytes::u32_at(f, l3 + o));
            pseudo_header_ipv4(a(12), a(16), proto, len as u16)
        } else {
            let a = |o: usize| Ipv6Addr::from(bytes::get_array::<16>(f, l3 + o).unwrap());
            pseudo_header_ipv6(a(8), a(24), proto, len as u32)
        };
        bytes::set_u16(f, field, fold(sum));
        (l4, field)
    }

    /// What the hardware (or `skb_checksum_help`) does to a partial frame:
    /// checksum from `csum_start` to the end, seeded by the field.
    fn finish_partial(f: &mut [u8], l4: usize, field: usize, udp: bool) {
        let mut c = crate::checksum::checksum(&f[l4..]);
        if udp && c == 0 {
            c = 0xffff;
        }
        bytes::set_u16(f, field, c);
    }

    #[test]
    fn partial_checksum_rewrites_match_direct_build() {
        use std::net::Ipv6Addr;
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        for udp in [false, true] {
            for ipv6 in [false, true] {
                let build = |src4, dst4, src6: &str, dst6: &str, sp, dp| {
                    let b = FrameBuilder::new(A, B);
                    let b = if ipv6 {
                        b.ipv6(v6(src6), v6(dst6))
                    } else {
                        b.ipv4(src4, dst4)
                    };
                    let b = if udp {
                        b.udp(sp, dp)
                    } else {
                        b.tcp(sp, dp, 0x18)
                    };
                    b.payload(&[0x5a; 301]).build()
                };
                let mut f = build(v4(1), v4(2), "2001:db8::1", "2001:db8::2", 1000, 80);
                let want = build(v4(77), v4(99), "2001:db8::77", "fe80::99", 4242, 8080);
                let (l4, field) = make_partial(&mut f);
                let l = parse(&f).unwrap();
                if ipv6 {
                    assert!(set_ipv6_src_ext(&mut f, &l, v6("2001:db8::77"), true));
                    assert!(set_ipv6_dst_ext(&mut f, &l, v6("fe80::99"), true));
                } else {
                    assert!(set_ipv4_src_ext(&mut f, &l, v4(77), true));
                    assert!(set_ipv4_dst_ext(&mut f, &l, v4(99), true));
                    assert_eq!(verify_ipv4_header(&f, &l), Some(true));
                }
                let before_ports = bytes::u16_at(&f, field);
                assert!(set_tp_src_ext(&mut f, &l, 4242, true));
                assert!(set_tp_dst_ext(&mut f, &l, 8080, true));
                assert_eq!(bytes::u16_at(&f, field), before_ports, "ports untouched");
                // Still the pseudo-header sum of the final frame.
                let mut again = f.clone();
                make_partial(&mut again);
                assert_eq!(again, f, "udp={udp} ipv6={ipv6}");
                finish_partial(&mut f, l4, field, udp);
                assert_eq!(f, want, "udp={udp} ipv6={ipv6}");
                assert_eq!(verify_l4(&f, &parse(&f).unwrap()), Some(true));
            }
        }
    }

    #[test]
    fn partial_flag_false_is_the_plain_rewrite() {
        let f0 = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .tcp(1, 2, 0x10)
            .payload(b"abc")
            .build();
        let l = parse(&f0).unwrap();
        let (mut a, mut b) = (f0.clone(), f0.clone());
        set_ipv4_src(&mut a, &l, v4(9));
        set_tp_dst(&mut a, &l, 99);
        set_ipv4_src_ext(&mut b, &l, v4(9), false);
        set_tp_dst_ext(&mut b, &l, 99, false);
        assert_eq!(a, b);
        assert_eq!(verify_l4(&a, &l), Some(true));
    }

    fn v4(a: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, a)
    }

    fn assert_valid(frame: &[u8]) {
        let l = parse(frame).unwrap();
        if l.l3 == L3Kind::Ipv4 {
            assert_eq!(verify_ipv4_header(frame, &l), Some(true));
        }
        assert_ne!(verify_l4(frame, &l), Some(false));
    }

    #[test]
    fn ipv4_tcp_rewrites_keep_checksums_valid() {
        let mut f = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .tcp(1234, 80, crate::tcp::FLAG_SYN)
            .payload(b"hello")
            .build();
        let l = parse(&f).unwrap();
        assert!(set_ipv4_src(&mut f, &l, Ipv4Addr::new(192, 168, 1, 1)));
        assert!(set_ipv4_dst(&mut f, &l, Ipv4Addr::new(172, 16, 0, 9)));
        assert!(set_tp_src(&mut f, &l, 40000));
        assert!(set_tp_dst(&mut f, &l, 8080));
        assert!(set_ip_dscp(&mut f, &l, 46));
        assert!(set_ip_ecn(&mut f, &l, 3));
        assert!(set_ttl(&mut f, &l, 7));
        assert_eq!(dec_ttl(&mut f, &l), Some(6));
        assert!(set_eth_src(&mut f, B));
        assert!(set_eth_dst(&mut f, A));
        assert_valid(&f);
        {
            let e = etherparse::SlicedPacket::from_ethernet(&f).unwrap();
            match e.net {
                Some(etherparse::NetSlice::Ipv4(ip)) => {
                    let h = ip.header();
                    assert_eq!(h.source_addr(), Ipv4Addr::new(192, 168, 1, 1));
                    assert_eq!(h.destination_addr(), Ipv4Addr::new(172, 16, 0, 9));
                    assert_eq!((h.dcp().value(), h.ecn().value(), h.ttl()), (46, 3, 6));
                    assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ttl(&f, &l), Some(6));
        assert!(!set_arp_op(&mut f, &l, 2));
        assert!(!set_ipv6_src(&mut f, &l, Ipv6Addr::LOCALHOST));
        assert!(!set_vlan_vid(&mut f, 5));
        assert!(!set_vlan_tci(&mut f, 5));
    }

    #[test]
    fn udp_zero_checksum_stays_zero() {
        let mut f = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .udp(1, 2)
            .no_udp_checksum()
            .payload(b"x")
            .build();
        let l = parse(&f).unwrap();
        assert!(set_ipv4_src(&mut f, &l, v4(99)));
        assert!(set_tp_dst(&mut f, &l, 53));
        assert_eq!(bytes::u16_at(&f, usize::from(l.l4_offset) + 6), 0);
        assert_valid(&f);
    }

    #[test]
    fn udp_patched_zero_becomes_ffff() {
        // Build a UDP datagram, then choose the new port that makes the
        // checksum come out as 0 and check it is stored as 0xffff.
        let mut f = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .udp(1000, 2000)
            .build();
        let l = parse(&f).unwrap();
        let l4 = usize::from(l.l4_offset);
        let csum = bytes::u16_at(&f, l4 + 6);
        // update16(csum, 1000, p) == 0  <=>  ~csum + ~1000 + p ≡ 0xffff
        let s = u32::from(!csum) + u32::from(!1000u16);
        let s = crate::checksum::fold(s);
        let port = 0xffff - s;
        assert!(set_tp_src(&mut f, &l, port));
        assert_eq!(bytes::u16_at(&f, l4 + 6), 0xffff);
        assert_valid(&f);
    }

    #[test]
    fn ipv6_rewrites() {
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "2001:db8::2".parse().unwrap();
        for kind in 0..3 {
            let b = FrameBuilder::new(A, B).vlan(100).ipv6(s, d);
            let b = match kind {
                0 => b.udp(5353, 5353),
                1 => b.tcp(1, 2, 0x18),
                _ => b.icmpv6(128, 0),
            };
            let mut f = b.payload(b"payload!").build();
            let l = parse(&f).unwrap();
            assert!(set_ipv6_src(
                &mut f,
                &l,
                "fe80::abcd".parse::<Ipv6Addr>().unwrap()
            ));
            assert!(set_ipv6_dst(
                &mut f,
                &l,
                "ff02::1".parse::<Ipv6Addr>().unwrap()
            ));
            assert!(set_ip_tos(&mut f, &l, 0xb9));
            assert!(set_ttl(&mut f, &l, 1));
            assert_eq!(dec_ttl(&mut f, &l), None);
            assert_eq!(kind != 2, set_tp_src(&mut f, &l, 7));
            assert!(set_vlan_vid(&mut f, 4095));
            assert!(set_vlan_pcp(&mut f, 6));
            assert_valid(&f);
            let l2 = parse(&f).unwrap();
            assert_eq!(l2.vlan_tags[0], vlan::tci(6, false, 4095));
            assert_eq!(ip_tos(&f, &l2), Some(0xb9));
            assert!(!set_ipv4_src(&mut f, &l, v4(1)));
        }
    }

    #[test]
    fn later_fragment_l4_untouched() {
        let mut f = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .ipv4_fragment(64, false)
            .raw_l4(6)
            .payload(&[0xaa; 24])
            .build();
        let l = parse(&f).unwrap();
        assert!(l.is_later_fragment());
        let before = f[usize::from(l.l4_offset)..].to_vec();
        assert!(set_ipv4_src(&mut f, &l, v4(3)));
        assert!(!set_tp_src(&mut f, &l, 9));
        assert_eq!(&f[usize::from(l.l4_offset)..], &before[..]);
        assert_eq!(verify_ipv4_header(&f, &l), Some(true));
    }

    #[test]
    fn arp_rewrites() {
        let mut f = FrameBuilder::new(A, ethernet_bcast())
            .arp(1, A, v4(1), [0; 6], v4(2))
            .build();
        let l = parse(&f).unwrap();
        assert!(set_arp_op(&mut f, &l, 2));
        assert!(set_arp_sha(&mut f, &l, B));
        assert!(set_arp_spa(&mut f, &l, v4(2)));
        assert!(set_arp_tha(&mut f, &l, A));
        assert!(set_arp_tpa(&mut f, &l, v4(1)));
        let p = crate::arp::Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(
            (p.operation(), p.sha(), p.spa(), p.tha(), p.tpa()),
            (2, B, v4(2), A, v4(1))
        );
        assert!(!set_ttl(&mut f, &l, 1));
        assert!(!set_tp_dst(&mut f, &l, 1));
    }

    fn ethernet_bcast() -> MacAddr {
        crate::ethernet::BROADCAST
    }

    #[test]
    fn push_and_pop_vlan() {
        let orig = FrameBuilder::new(A, B).ipv4(v4(1), v4(2)).udp(1, 2).build();
        let mut buf = PacketBuf::from_slice(&orig);
        assert!(!pop_vlan(&mut buf));
        assert!(push_vlan(&mut buf, 0x8100, 10));
        assert!(push_vlan(&mut buf, 0x88a8, 20));
        let l = parse(buf.data()).unwrap();
        assert_eq!(l.n_vlan, 2);
        assert_eq!(l.vlan_tpids, [0x88a8, 0x8100]);
        assert_eq!(l.vlan_tags, [20, 10]);
        assert_eq!(&buf.data()[..12], &orig[..12]);
        assert_valid(buf.data());
        assert_eq!(buf.headroom(), PacketBuf::DEFAULT_HEADROOM - 8);
        assert!(pop_vlan(&mut buf));
        let l = parse(buf.data()).unwrap();
        assert_eq!((l.n_vlan, l.vlan_tags[0]), (1, 10));
        assert!(pop_vlan(&mut buf));
        assert_eq!(buf.data(), &orig[..]);
        assert!(!pop_vlan(&mut buf));

        let mut tiny = PacketBuf::with_headroom(2, 20);
        tiny.set_data(&orig[..20]);
        assert!(!push_vlan(&mut tiny, 0x8100, 1));
        assert_eq!(tiny.data(), &orig[..20]);
        let mut runt = PacketBuf::from_slice(&orig[..13]);
        assert!(!push_vlan(&mut runt, 0x8100, 1));
    }

    #[test]
    fn short_frames_are_refused_not_panicking() {
        let f = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .tcp(1, 2, 0)
            .build();
        let l = parse(&f).unwrap();
        for cut in 0..f.len() {
            let mut g = f[..cut].to_vec();
            let _ = set_ipv4_src(&mut g, &l, v4(9));
            let _ = set_tp_dst(&mut g, &l, 9);
            let _ = set_ip_tos(&mut g, &l, 9);
            let _ = set_eth_src(&mut g, A);
            let _ = set_vlan_vid(&mut g, 1);
            let _ = set_ipv6_dst(&mut g, &l, Ipv6Addr::LOCALHOST);
        }
    }

    /// NAT of ICMP errors' quoted packets (`set_icmp_inner_*`): the
    /// rewritten error must be byte for byte the error a host would build
    /// quoting the translated packet, and every checksum must verify
    /// (checked with `checksum`'s functions, from scratch).
    mod icmp_inner {
        use super::*;
        use crate::builder::all_checksums_valid;
        use crate::checksum::checksum;

        #[derive(Clone, Copy)]
        enum Quoted {
            Udp,
            Tcp,
            Echo,
        }

        /// The packet a host sent: (src, sport/id, dst, dport), as an IP
        /// packet (no Ethernet header).
        fn inner(kind: Quoted, src: IpAddr, sp: u16, dst: IpAddr, dp: u16) -> Vec<u8> {
            let b = FrameBuilder::new(A, B);
            let b = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s, d).ident(0x44c1).dont_fragment(),
                (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s, d),
                _ => unreachable!(),
            };
            let v6 = src.is_ipv6();
            let b = match kind {
                Quoted::Udp => b.udp(sp, dp),
                Quoted::Tcp => b.tcp(sp, dp, crate::tcp::FLAG_SYN).tcp_seq(0x1234_5678),
                Quoted::Echo if v6 => b.icmpv6(128, 0).echo(sp, 9),
                Quoted::Echo => b.icmp(8, 0).echo(sp, 9),
            };
            b.payload(b"test_unreach\n").build()[14..].to_vec()
        }

        /// An error from `from` to `to` quoting `quote` (ICMPv4 port
        /// unreachable / ICMPv6 port unreachable), with Ethernet padding.
        fn error(from: IpAddr, to: IpAddr, quote: &[u8]) -> Vec<u8> {
            let b = FrameBuilder::new(B, A);
            match (from, to) {
                (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s, d).icmp(3, 3),
                (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s, d).icmpv6(1, 4),
                _ => unreachable!(),
            }
            .payload(quote)
            .pad_to(128)
            .build()
        }

        /// Every checksum of the quote that it holds completely verifies.
        fn quote_checksums_valid(frame: &[u8], quoted_len: usize) -> bool {
            let l = parse(frame).unwrap();
            let q = usize::from(l.l4_offset) + 8;
            let mut f = frame[..14].to_vec();
            f.extend_from_slice(&frame[q..q + quoted_len]);
            all_checksums_valid(&f)
        }

        type Flow = (IpAddr, u16, IpAddr, u16);

        /// Quote `from` (cut to `cut` bytes), rewrite it into `to` with the
        /// helpers, compare with a fresh build quoting `to`.
        fn case(kind: Quoted, from: Flow, to: Flow, cut: Option<usize>) {
            let (orig, want) = (
                inner(kind, from.0, from.1, from.2, from.3),
                inner(kind, to.0, to.1, to.2, to.3),
            );
            let n = cut.unwrap_or(orig.len());
            let mut f = error(from.2, from.0, &orig[..n]);
            let expected = error(from.2, from.0, &want[..n]);
            let l = parse(&f).unwrap();
            assert!(all_checksums_valid(&f));
            if from.0 != to.0 {
                assert!(set_icmp_inner_src(&mut f, &l, to.0, false));
            }
            if from.2 != to.2 {
                assert!(set_icmp_inner_dst(&mut f, &l, to.2, false));
            }
            match kind {
                Quoted::Echo => {
                    let v4 = from.0.is_ipv4();
                    assert_eq!(set_icmp_inner_id(&mut f, &l, to.1, false), v4);
                    assert!(!set_icmp_inner_tp_src(&mut f, &l, to.1, false));
                }
                _ => {
                    assert!(set_icmp_inner_tp_src(&mut f, &l, to.1, false));
                    assert!(set_icmp_inner_tp_dst(&mut f, &l, to.3, false));
                    assert!(!set_icmp_inner_id(&mut f, &l, 1, false));
                }
            }
            assert_eq!(f, expected, "{n} bytes quoted");
            // From scratch: the error's own checksum (ICMPv6 pseudo header
            // included) and, when the quote is whole, the quoted ones.
            assert!(all_checksums_valid(&f));
            let l4 = usize::from(l.l4_offset);
            if from.0.is_ipv4() {
                assert_eq!(checksum(&f[l4..l.l4_end()]), 0);
                let ihl = usize::from(f[l4 + 8] & 0xf) * 4;
                assert_eq!(checksum(&f[l4 + 8..l4 + 8 + ihl]), 0, "quoted IPv4 header");
            }
            if cut.is_none() {
                assert!(quote_checksums_valid(&f, n));
            }
        }

        fn a(s: &str) -> IpAddr {
            s.parse().unwrap()
        }

        #[test]
        fn dnat_and_snat_quotes_v4() {
            let (c, vip, be) = (a("198.18.0.1"), a("198.18.0.100"), a("198.18.0.2"));
            for kind in [Quoted::Udp, Quoted::Tcp] {
                // DNAT: the backend's error quotes client -> backend:8080;
                // the client must see client -> VIP:80.
                case(kind, (c, 1234, be, 8080), (c, 1234, vip, 80), None);
                // SNAT: a router's error quotes NAT address:40001 -> server;
                // the client must see its own address and port.
                case(kind, (vip, 40001, be, 53), (c, 40000, be, 53), None);
                // As ICMPv4 errors may quote: IP header + 8 bytes.
                case(kind, (c, 1234, be, 8080), (c, 1234, vip, 80), Some(28));
            }
            case(Quoted::Echo, (vip, 78, be, 78), (c, 77, be, 77), None);
            case(Quoted::Echo, (vip, 78, be, 78), (c, 77, be, 77), Some(28));
        }

        #[test]
        fn dnat_and_snat_quotes_v6() {
            let (c, vip, be) = (a("2001:db8::1"), a("2001:db8::100"), a("2001:db8::2"));
            for kind in [Quoted::Udp, Quoted::Tcp] {
                case(kind, (c, 1234, be, 8080), (c, 1234, vip, 80), None);
                case(kind, (vip, 40001, be, 53), (c, 40000, be, 53), None);
                // A quote cut after 8 bytes of L4 header: the quoted L4
                // checksum no longer balances the changes, the error's
                // checksum must take them.
                case(kind, (c, 1234, be, 8080), (c, 1234, vip, 80), Some(48));
            }
            // ICMPv6 echo ids are not translated: addresses only, the quoted
            // ICMPv6 checksum (pseudo header) follows.
            case(Quoted::Echo, (vip, 7, be, 7), (c, 7, be, 7), None);
        }

        #[test]
        fn outer_and_inner_together_v6() {
            // The error's own address (in its pseudo header) and the quote.
            let (c, vip, be) = (a("2001:db8::1"), a("2001:db8::100"), a("2001:db8::2"));
            let q = inner(Quoted::Udp, c, 1234, be, 8080);
            let mut f = error(be, c, &q);
            let l = parse(&f).unwrap();
            let IpAddr::V6(v) = vip else { unreachable!() };
            assert!(set_ipv6_src(&mut f, &l, v));
            assert!(set_icmp_inner_dst(&mut f, &l, vip, false));
            assert!(set_icmp_inner_tp_dst(&mut f, &l, 80, false));
            assert_eq!(f, error(vip, c, &inner(Quoted::Udp, c, 1234, vip, 80)));
            assert!(all_checksums_valid(&f));
        }

        #[test]
        fn udp_without_checksum_stays_without() {
            let q = FrameBuilder::new(A, B)
                .ipv4(v4(1), v4(2))
                .udp(1234, 8080)
                .no_udp_checksum()
                .payload(b"x")
                .build()[14..]
                .to_vec();
            let mut f = error(a("198.18.0.2"), a("198.18.0.1"), &q);
            let l = parse(&f).unwrap();
            assert!(set_icmp_inner_dst(&mut f, &l, a("198.18.0.100"), false));
            assert!(set_icmp_inner_tp_dst(&mut f, &l, 80, false));
            let q = usize::from(l.l4_offset) + 8;
            assert_eq!(bytes::u16_at(&f, q + 20 + 6), 0);
            assert!(all_checksums_valid(&f));
            assert!(quote_checksums_valid(&f, 29));
        }

        #[test]
        fn partial_outer_checksum_is_left_for_the_finisher() {
            let (c, be) = (a("198.18.0.1"), a("198.18.0.2"));
            // A whole quoted UDP packet: its own checksum balances the
            // port change, so the error's checksum would not move anyway;
            // a quote without the TCP checksum does not.
            let q = inner(Quoted::Udp, c, 1234, be, 8080);
            let t = inner(Quoted::Tcp, c, 1234, be, 8080);
            for partial in [true, false] {
                let mut f = error(be, c, &t[..28]);
                let l = parse(&f).unwrap();
                let at = usize::from(l.l4_offset) + 2;
                let before = bytes::u16_at(&f, at);
                assert!(set_icmp_inner_tp_dst(&mut f, &l, 80, partial));
                assert_eq!(bytes::u16_at(&f, at) == before, partial);
                // (A finished checksum over a partial one's bytes fails.)
                assert_eq!(all_checksums_valid(&f), !partial);
            }
            // The quoted UDP checksum is patched either way.
            let mut f = error(be, c, &q);
            let l = parse(&f).unwrap();
            assert!(set_icmp_inner_tp_dst(&mut f, &l, 80, true));
            assert!(quote_checksums_valid(&f, q.len()));
        }

        #[test]
        fn only_errors_with_a_whole_quoted_header() {
            let (c, be) = (a("198.18.0.1"), a("198.18.0.2"));
            // An echo request is no error.
            let mut echo = FrameBuilder::new(A, B)
                .ipv4(v4(1), v4(2))
                .icmp(8, 0)
                .echo(1, 1)
                .payload(&inner(Quoted::Udp, c, 1, be, 2))
                .build();
            let l = parse(&echo).unwrap();
            let orig = echo.clone();
            assert!(!set_icmp_inner_dst(&mut echo, &l, c, false));
            assert!(!set_icmp_inner_tp_dst(&mut echo, &l, 1, false));
            assert_eq!(echo, orig);
            // A plain UDP packet, the wrong family, a quoted header cut short.
            let mut udp = FrameBuilder::new(A, B).ipv4(v4(1), v4(2)).udp(1, 2).build();
            let l = parse(&udp).unwrap();
            assert!(!set_icmp_inner_src(&mut udp, &l, c, false));
            let q = inner(Quoted::Udp, c, 1234, be, 8080);
            let mut f = error(be, c, &q);
            let l = parse(&f).unwrap();
            assert!(!set_icmp_inner_src(&mut f, &l, a("2001:db8::1"), false));
            let mut short = error(be, c, &q[..19]);
            let l = parse(&short).unwrap();
            assert!(!set_icmp_inner_src(&mut short, &l, be, false));
            // Truncated frames never panic.
            let l = parse(&f).unwrap();
            for cut in 0..f.len() {
                let mut g = f[..cut].to_vec();
                let _ = set_icmp_inner_src(&mut g, &l, be, false);
                let _ = set_icmp_inner_dst(&mut g, &l, be, false);
                let _ = set_icmp_inner_tp_src(&mut g, &l, 9, false);
                let _ = set_icmp_inner_tp_dst(&mut g, &l, 9, false);
                let _ = set_icmp_inner_id(&mut g, &l, 9, false);
            }
        }
    }
}
