//! Received-frame fix-ups: completing partial L4 checksums and cutting TCP
//! super-frames into MTU-sized segments. Pure functions over byte slices,
//! unit tested without root.
//!
//! These mirror the AF_PACKET port's (`port::afpacket`), with one
//! difference: AF_XDP gives no per-frame metadata, so there is no
//! `TP_STATUS_CSUMNOTREADY` telling which frames carry a partial checksum.
//! [`complete_partial_checksum`] recognises one by its value instead (see
//! there).

use nicflow_packet::buf::PacketBuf;
use nicflow_packet::checksum::{
    checksum, fold, l4_checksum_ipv4, l4_checksum_ipv6, pseudo_header_ipv4, pseudo_header_ipv6,
    udp_fixup,
};
use nicflow_packet::parse::{L3Kind, L4Kind, Layout};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Capacity of buffers this port allocates when the pool is dry or its
/// buffer is too small: a jumbo frame plus tags, like the datapath's pool.
pub(super) const RX_BUF_CAPACITY: usize = 9216 + 64;

/// A buffer holding the concatenation of `parts`, taken from `pool` when
/// its buffer is big enough (a too-small one is dropped), else allocated.
pub(super) fn fill(pool: &mut Vec<PacketBuf>, parts: &[&[u8]]) -> PacketBuf {
    if let Some(mut b) = pool.pop() {
        if fill_into(&mut b, parts) {
            return b;
        }
    }
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut b = PacketBuf::with_capacity(total.max(RX_BUF_CAPACITY));
    let ok = fill_into(&mut b, parts);
    debug_assert!(ok, "a buffer sized for the frame must hold it");
    b
}

fn fill_into(b: &mut PacketBuf, parts: &[&[u8]]) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return b.set_data(&[]);
    };
    let rest_len: usize = rest.iter().map(|p| p.len()).sum();
    if !b.set_data(first) || b.tailroom() < rest_len {
        return false;
    }
    let Some(mut tail) = b.extend_back(rest_len) else {
        return false;
    };
    for p in rest {
        let (head, t) = tail.split_at_mut(p.len());
        head.copy_from_slice(p);
        tail = t;
    }
    true
}

pub(super) fn be16(d: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(d.get(off..off + 2)?.try_into().ok()?))
}

fn be32(d: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(off..off + 4)?.try_into().ok()?))
}

pub(super) fn put16(d: &mut [u8], off: usize, v: u16) {
    d[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

fn v4_addrs(frame: &[u8], l3: usize) -> Option<(Ipv4Addr, Ipv4Addr)> {
    let src: [u8; 4] = frame.get(l3 + 12..l3 + 16)?.try_into().ok()?;
    let dst: [u8; 4] = frame.get(l3 + 16..l3 + 20)?.try_into().ok()?;
    Some((src.into(), dst.into()))
}

fn v6_addrs(frame: &[u8], layout: &Layout) -> Option<(Ipv6Addr, Ipv6Addr)> {
    // With segments left in a routing header the pseudo header uses the
    // final destination, which is not in the fixed header.
    if nicflow_packet::ipv6::routing_segments_left(frame, layout)? != 0 {
        return None;
    }
    let l3 = usize::from(layout.l3_offset);
    let src: [u8; 16] = frame.get(l3 + 8..l3 + 24)?.try_into().ok()?;
    let dst: [u8; 16] = frame.get(l3 + 24..l3 + 40)?.try_into().ok()?;
    Some((src.into(), dst.into()))
}

/// TCP/UDP checksum over `frame[l4..end]` with the pseudo header of the IP
/// header described by `layout`; `None` when the pseudo header cannot be
/// built from this frame.
fn l4_sum(frame: &[u8], layout: &Layout, proto: u8, l4: usize, end: usize) -> Option<u16> {
    let seg = frame.get(l4..end)?;
    match layout.l3 {
        L3Kind::Ipv4 => {
            let (s, d) = v4_addrs(frame, usize::from(layout.l3_offset))?;
            Some(l4_checksum_ipv4(s, d, proto, seg))
        }
        L3Kind::Ipv6 => {
            let (s, d) = v6_addrs(frame, layout)?;
            Some(l4_checksum_ipv6(s, d, proto, seg))
        }
        _ => None,
    }
}

/// The value a Linux sender with checksum offload leaves in the L4 checksum
/// field (`CHECKSUM_PARTIAL`): the pseudo-header sum, folded, not
/// complemented (`~tcp_v4_check(len, saddr, daddr, 0)` and friends).
fn partial_value(frame: &[u8], layout: &Layout, proto: u8, len: usize) -> Option<u16> {
    let sum = match layout.l3 {
        L3Kind::Ipv4 => {
            let (s, d) = v4_addrs(frame, usize::from(layout.l3_offset))?;
            pseudo_header_ipv4(s, d, proto, u16::try_from(len).ok()?)
        }
        L3Kind::Ipv6 => {
            let (s, d) = v6_addrs(frame, layout)?;
            pseudo_header_ipv6(s, d, proto, u32::try_from(len).ok()?)
        }
        _ => return None,
    };
    Some(fold(sum))
}

/// What [`complete_partial_checksum`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Csum {
    /// Not TCP/UDP over IPv4/IPv6, a fragment, or not decidable: untouched.
    NotApplicable,
    /// The field does not hold a partial checksum: untouched (a correct
    /// checksum, or a wrong one that is forwarded as it is).
    Left,
    /// The field held the pseudo-header sum: replaced by the full checksum.
    Completed,
}

/// Complete a partial TCP/UDP checksum in place.
///
/// AF_XDP delivers bytes only, so whether the sender left the checksum to
/// "hardware" is guessed from the field itself: a partial checksum is
/// exactly the folded pseudo-header sum (see [`partial_value`]). Only then
/// is the whole checksum recomputed. The guess cannot break a correct frame
/// (recomputing a correct checksum gives the same value); the one frame in
/// 65,536 whose *wrong* checksum happens to equal the pseudo-header sum gets
/// a correct one, where a pure forwarder would have passed the error on.
/// Costs one pseudo-header sum per TCP/UDP frame, and a pass over the
/// segment only for partial ones.
pub(super) fn complete_partial_checksum(frame: &mut [u8], layout: &Layout) -> Csum {
    if layout.is_fragment() || !layout.is_ip() {
        return Csum::NotApplicable;
    }
    let l4 = usize::from(layout.l4_offset);
    let end = layout.l4_end();
    if end > frame.len() {
        return Csum::NotApplicable;
    }
    let (proto, field, end) = match layout.l4 {
        L4Kind::Tcp => (nicflow_packet::IPPROTO_TCP, 16, end),
        L4Kind::Udp => {
            let ulen = be16(frame, l4 + 4).map_or(0, usize::from);
            if ulen < 8 || l4 + ulen > end {
                return Csum::NotApplicable;
            }
            (nicflow_packet::IPPROTO_UDP, 6, l4 + ulen)
        }
        _ => return Csum::NotApplicable,
    };
    if l4 + field + 2 > end {
        return Csum::NotApplicable;
    }
    let Some(partial) = partial_value(frame, layout, proto, end - l4) else {
        return Csum::NotApplicable;
    };
    let old = be16(frame, l4 + field).unwrap_or(0);
    // 0 and 0xffff are the same number in ones' complement.
    let is_partial = old == partial || (partial == 0xffff && old == 0);
    if !is_partial || (proto == nicflow_packet::IPPROTO_UDP && old == 0) {
        // (A UDP checksum of 0 means "none": leave it.)
        return Csum::Left;
    }
    put16(frame, l4 + field, 0);
    match l4_sum(frame, layout, proto, l4, end) {
        Some(c) => {
            let c = if proto == nicflow_packet::IPPROTO_UDP {
                udp_fixup(c)
            } else {
                c
            };
            put16(frame, l4 + field, c);
            Csum::Completed
        }
        None => {
            put16(frame, l4 + field, old);
            Csum::NotApplicable
        }
    }
}

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Split a TCP super-frame into frames of at most `mtu` bytes of IP
/// datagram, appended to `segs` with every header and checksum fixed, as
/// the kernel's `tcp_gso_segment` does: payload cut at `mtu - IP headers -
/// TCP header`, IPv4 total length, ID (incremented per segment) and header
/// checksum, IPv6 payload length, sequence number, FIN/PSH (last segment
/// only), CWR (first only) and the TCP checksum fixed per segment. Returns
/// false (and appends nothing) when the frame is not an unfragmented TCP
/// segment over IPv4/IPv6 that `layout` describes.
pub(super) fn segment_tcp(
    frame: &[u8],
    layout: &Layout,
    mtu: usize,
    pool: &mut Vec<PacketBuf>,
    segs: &mut Vec<PacketBuf>,
) -> bool {
    if layout.l4 != L4Kind::Tcp || layout.is_fragment() || !layout.is_ip() {
        return false;
    }
    let l3 = usize::from(layout.l3_offset);
    let l4 = usize::from(layout.l4_offset);
    let end = layout.l4_end();
    let Some(doff) = frame.get(l4 + 12).map(|b| usize::from(b >> 4) * 4) else {
        return false;
    };
    let hdr_end = l4 + doff;
    if doff < 20 || hdr_end > end || end > frame.len() {
        return false;
    }
    let ip_hdrs = l4 - l3;
    let mss = match mtu.checked_sub(ip_hdrs + doff) {
        Some(m) if m >= 8 => m,
        _ => return false,
    };
    let (Some(seq0), Some(id0)) = (be32(frame, l4 + 4), be16(frame, l3 + 4)) else {
        return false;
    };
    if layout.l3 == L3Kind::Ipv6 && v6_addrs(frame, layout).is_none() {
        return false;
    }
    let flags0 = frame[l4 + 13];
    let payload = &frame[hdr_end..end];
    let n = payload.len().div_ceil(mss).max(1);
    let first = segs.len();
    for i in 0..n {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        let mut b = fill(pool, &[&frame[..hdr_end], chunk]);
        let d = b.data_mut();
        let ip_len = ip_hdrs + doff + chunk.len();
        if layout.l3 == L3Kind::Ipv4 {
            put16(d, l3 + 2, ip_len as u16);
            put16(d, l3 + 4, id0.wrapping_add(i as u16));
            put16(d, l3 + 10, 0);
            let c = checksum(&d[l3..l4]);
            put16(d, l3 + 10, c);
        } else {
            put16(d, l3 + 4, (ip_len - 40) as u16);
        }
        d[l4 + 4..l4 + 8].copy_from_slice(&seq0.wrapping_add((i * mss) as u32).to_be_bytes());
        let mut flags = flags0;
        if i > 0 {
            flags &= !TCP_CWR;
        }
        if i + 1 < n {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        d[l4 + 13] = flags;
        put16(d, l4 + 16, 0);
        let total = d.len();
        match l4_sum(d, layout, nicflow_packet::IPPROTO_TCP, l4, total) {
            Some(c) => put16(d, l4 + 16, c),
            None => {
                segs.truncate(first);
                return false;
            }
        }
        segs.push(b);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
    use nicflow_packet::checksum::verify_l4;
    use nicflow_packet::parse;

    const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
    const V4A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const V4B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// What a Linux sender with checksum offload puts on the wire: the
    /// checksum field holds the folded pseudo-header sum.
    fn make_partial(good: &[u8]) -> Vec<u8> {
        let l = parse::parse(good).unwrap();
        let l4 = usize::from(l.l4_offset);
        let (proto, field, len) = match l.l4 {
            L4Kind::Tcp => (nicflow_packet::IPPROTO_TCP, 16, l.l4_end() - l4),
            _ => (
                nicflow_packet::IPPROTO_UDP,
                6,
                usize::from(be16(good, l4 + 4).unwrap()),
            ),
        };
        let mut f = good.to_vec();
        let p = partial_value(&f, &l, proto, len).unwrap();
        put16(&mut f, l4 + field, p);
        f
    }

    #[test]
    fn partial_checksums_are_completed_v4_v6_tcp_udp() {
        let frames = [
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv4(V4A, V4B)
                .tcp(1, 2, 0x18)
                .payload(&[7; 101])
                .build(),
            FrameBuilder::new(MAC_A, MAC_B)
                .vlan(100)
                .ipv4(V4A, V4B)
                .udp(1, 2)
                .payload(b"nicflow")
                .build(),
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
                .udp(1, 2)
                .payload(&[9; 33])
                .build(),
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
                .ipv6_hop_by_hop(0)
                .tcp(1, 2, 0x10)
                .payload(&[3; 7])
                .build(),
        ];
        for good in frames {
            let l = parse::parse(&good).unwrap();
            let mut f = make_partial(&good);
            assert_ne!(f, good, "the partial form differs from the full one");
            assert_eq!(verify_l4(&f, &l), Some(false));
            assert_eq!(complete_partial_checksum(&mut f, &l), Csum::Completed);
            assert_eq!(f, good);
            // A correct checksum is left alone.
            assert_eq!(complete_partial_checksum(&mut f, &l), Csum::Left);
            assert_eq!(f, good);
        }
    }

    #[test]
    fn wrong_checksums_and_other_frames_are_left_alone() {
        let good = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .tcp(1, 2, 0x18)
            .payload(&[7; 64])
            .build();
        let l = parse::parse(&good).unwrap();
        let mut bad = good.clone();
        let at = usize::from(l.l4_offset) + 16;
        let c = be16(&bad, at).unwrap();
        put16(&mut bad, at, c ^ 0x0101);
        let copy = bad.clone();
        assert_eq!(complete_partial_checksum(&mut bad, &l), Csum::Left);
        assert_eq!(bad, copy, "a corrupted checksum is forwarded as it is");

        let icmp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .icmp(8, 0)
            .echo(1, 1)
            .build();
        let mut f = icmp.clone();
        assert_eq!(
            complete_partial_checksum(&mut f, &parse::parse(&icmp).unwrap()),
            Csum::NotApplicable
        );
        assert_eq!(f, icmp);
        let frag = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .ipv4_fragment(0, true)
            .udp(1, 2)
            .payload(&[1; 16])
            .build();
        let mut f = frag.clone();
        assert_eq!(
            complete_partial_checksum(&mut f, &parse::parse(&frag).unwrap()),
            Csum::NotApplicable
        );
        assert_eq!(f, frag);
        // UDP over IPv4 without a checksum (0) stays without one.
        let mut nocsum = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .udp(1, 2)
            .payload(&[1; 16])
            .build();
        let l = parse::parse(&nocsum).unwrap();
        put16(&mut nocsum, usize::from(l.l4_offset) + 6, 0);
        let copy = nocsum.clone();
        assert_eq!(complete_partial_checksum(&mut nocsum, &l), Csum::Left);
        assert_eq!(nocsum, copy);
    }

    #[test]
    fn super_frames_are_segmented() {
        let payload: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let v4 = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .ident(0xfffe)
            .dont_fragment()
            .tcp(40000, 5201, 0x80 | 0x18 | 0x01)
            .tcp_seq(0xffff_f000)
            .tcp_options(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2])
            .payload(&payload)
            .build();
        let v6f = FrameBuilder::new(MAC_A, MAC_B)
            .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
            .tcp(40000, 5201, 0x10)
            .payload(&payload[..4000])
            .build();
        for (big, mtu) in [(&v4, 1500usize), (&v6f, 1280)] {
            // As the sender leaves it: partial checksum.
            let big = make_partial(big);
            let l = parse::parse(&big).unwrap();
            let (mut pool, mut segs) = (Vec::new(), Vec::new());
            assert!(segment_tcp(&big, &l, mtu, &mut pool, &mut segs));
            let l4 = usize::from(l.l4_offset);
            let doff = usize::from(big[l4 + 12] >> 4) * 4;
            let mut joined = Vec::new();
            for (i, s) in segs.iter().enumerate() {
                let d = s.data();
                let sl = parse::parse(d).unwrap();
                assert!(d.len() - usize::from(l.l3_offset) <= mtu);
                assert!(all_checksums_valid(d), "segment {i}");
                assert_eq!(verify_l4(d, &sl), Some(true));
                assert_eq!(
                    be32(d, l4 + 4).unwrap(),
                    be32(&big, l4 + 4)
                        .unwrap()
                        .wrapping_add(joined.len() as u32)
                );
                let last = i + 1 == segs.len();
                assert_eq!(
                    d[l4 + 13] & (TCP_FIN | TCP_PSH) != 0,
                    last && big[l4 + 13] & 0x09 != 0
                );
                assert_eq!(
                    d[l4 + 13] & TCP_CWR != 0,
                    i == 0 && big[l4 + 13] & TCP_CWR != 0
                );
                joined.extend_from_slice(&d[l4 + doff..sl.l4_end()]);
            }
            assert_eq!(joined, &big[l4 + doff..l.l4_end()]);
        }
        let udp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .udp(1, 2)
            .payload(&payload[..3000])
            .build();
        let mut segs = Vec::new();
        assert!(!segment_tcp(
            &udp,
            &parse::parse(&udp).unwrap(),
            1500,
            &mut Vec::new(),
            &mut segs
        ));
        assert!(segs.is_empty());
    }

    #[test]
    fn fill_reuses_or_allocates() {
        let mut pool = vec![PacketBuf::with_capacity(8)];
        let b = fill(&mut pool, &[b"abc", b"de"]);
        assert_eq!(b.data(), b"abcde");
        assert!(pool.is_empty());
        let mut pool = vec![PacketBuf::with_capacity(4)];
        let b = fill(&mut pool, &[b"abc", b"defgh"]);
        assert_eq!(b.data(), b"abcdefgh");
        assert!(b.capacity() >= RX_BUF_CAPACITY);
    }
}
