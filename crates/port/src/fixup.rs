//! Receive-side frame fix-ups shared by the real-interface ports
//! ([`afpacket`](super::afpacket), [`afxdp`](super::afxdp)).
//!
//! Place in a frame's path: driver -> the port's ring -> **here**, while
//! the port's `recv_batch` copies the frame out of the ring into a pooled
//! [`PacketBuf`] -> parse -> flow key -> classifier / caches -> actions.
//! Both sockets hand over what a *local* sender's stack produced rather
//! than wire frames: TCP/UDP checksums left partial for offload hardware,
//! and TCP super-frames (GSO) of up to 64 KiB that no port can transmit. A
//! switch forwards wire frames, so both ports complete the checksums and
//! cut super-frames into MTU-sized segments here, with the same code, before
//! the switch sees them. The ports differ only in how they learn that a
//! checksum is partial (AF_PACKET is told, AF_XDP has to recognise it), hence
//! the two completion functions. Pure functions over byte slices, unit
//! tested without root.

use nicflow_packet::buf::{GsoType, Offload, PacketBuf};
use nicflow_packet::checksum::{
    checksum, copy_sum_words, finish, fold, l4_checksum_ipv4, l4_checksum_ipv6, pseudo_header_ipv4,
    pseudo_header_ipv6, sum_words, udp_fixup,
};
use nicflow_packet::parse::{self, L3Kind, L4Kind, Layout};
use nicflow_packet::{IPPROTO_TCP, IPPROTO_UDP};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Ethernet header without tags.
pub(super) const ETH_HLEN: usize = 14;
/// One 802.1Q/802.1ad tag.
pub(super) const VLAN_HLEN: usize = 4;

/// Capacity of buffers a port allocates when the pool is dry or its buffer
/// is too small: a jumbo frame plus tags, like the datapath's pool.
pub(super) const RX_BUF_CAPACITY: usize = 9216 + 64;

/// Capacity of a buffer for a GSO super-frame: 64 KiB of IP datagram plus
/// Ethernet header and tags.
pub(super) const GSO_BUF_CAPACITY: usize = 65535 + 64;

/// The longest frame an interface with `mtu` sends: the MTU bounds the IP
/// datagram, the Ethernet header and every VLAN tag of `layout` come on top
/// (no layout: untagged). Anything longer is a super-frame.
pub(super) fn max_frame_len(mtu: usize, layout: Option<&Layout>) -> usize {
    mtu + ETH_HLEN + VLAN_HLEN * layout.map_or(0, |l| usize::from(l.n_vlan))
}

/// A buffer holding the concatenation of `parts`, taken from `pool` when
/// its buffer is big enough (a too-small one is dropped), else allocated.
/// Taking parts lets a port put a frame back together (VLAN tag restored,
/// segment headers and payload) in the single copy out of its ring.
///
/// A frame too big for the pool's top buffer (a GSO super-frame) leaves
/// that buffer in the pool and gets a new one sized for a 64 KiB frame: an
/// allocation per super-frame until such buffers come back to the pool
/// from transmit.
pub(super) fn fill(pool: &mut Vec<PacketBuf>, parts: &[&[u8]]) -> PacketBuf {
    if let Some(mut b) = pool.pop() {
        if fill_into(&mut b, parts) {
            return b;
        }
        pool.push(b);
    }
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let cap = if total > RX_BUF_CAPACITY {
        total.max(GSO_BUF_CAPACITY)
    } else {
        RX_BUF_CAPACITY
    };
    let mut b = PacketBuf::with_capacity(cap);
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
    rest.iter().all(|p| b.append(p))
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
/// built from this frame (not IP, IPv6 routing header with segments left).
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

/// A TCP/UDP checksum a port may complete: where its field is and which
/// bytes it covers.
struct L4Checksum {
    proto: u8,
    /// Offset of the L4 header.
    l4: usize,
    /// Offset of the checksum field.
    field: usize,
    /// End of the covered bytes: the IP payload's for TCP, the UDP
    /// length's for UDP (which may stop short of the IP payload).
    end: usize,
}

/// The checksum of `frame`'s TCP or UDP header over IPv4/IPv6; `None` for
/// other protocols, fragments (the checksum covers bytes not in this
/// frame), and frames shorter than `layout` says.
fn l4_checksum_of(frame: &[u8], layout: &Layout) -> Option<L4Checksum> {
    if layout.is_fragment() || !layout.is_ip() {
        return None;
    }
    let l4 = usize::from(layout.l4_offset);
    let end = layout.l4_end();
    if end > frame.len() {
        return None;
    }
    let (proto, field, end) = match layout.l4 {
        L4Kind::Tcp => (IPPROTO_TCP, l4 + 16, end),
        L4Kind::Udp => {
            let ulen = be16(frame, l4 + 4).map_or(0, usize::from);
            if ulen < 8 || l4 + ulen > end {
                return None;
            }
            (IPPROTO_UDP, l4 + 6, l4 + ulen)
        }
        _ => return None,
    };
    (field + 2 <= end).then_some(L4Checksum {
        proto,
        l4,
        field,
        end,
    })
}

/// Recompute the whole checksum `c` (pseudo header included) and store it.
/// Returns false, leaving the frame as it was, when the pseudo header
/// cannot be built.
fn rewrite_l4_checksum(frame: &mut [u8], layout: &Layout, c: &L4Checksum) -> bool {
    let old = be16(frame, c.field).unwrap_or(0);
    put16(frame, c.field, 0);
    match l4_sum(frame, layout, c.proto, c.l4, c.end) {
        Some(sum) => {
            let sum = if c.proto == IPPROTO_UDP {
                udp_fixup(sum)
            } else {
                sum
            };
            put16(frame, c.field, sum);
            true
        }
        None => {
            put16(frame, c.field, old);
            false
        }
    }
}

/// Replace a partial (pseudo-header-only) TCP/UDP checksum by the full one,
/// for a port that is *told* the checksum is partial (AF_PACKET's
/// `TP_STATUS_CSUMNOTREADY`): the field's value is not looked at. Returns
/// false, leaving the frame alone, when the frame is not TCP/UDP over
/// IPv4/IPv6, is a fragment, or does not match `layout`.
pub(super) fn complete_l4_checksum(frame: &mut [u8], layout: &Layout) -> bool {
    l4_checksum_of(frame, layout).is_some_and(|c| rewrite_l4_checksum(frame, layout, &c))
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

/// Complete a partial TCP/UDP checksum in place, for a port that gets no
/// per-frame checksum status (AF_XDP delivers bytes only).
///
/// Whether the sender left the checksum to "hardware" is guessed from the
/// field itself: a partial checksum is exactly the folded pseudo-header sum
/// (see [`partial_value`]). Only then is the whole checksum recomputed. The
/// guess cannot break a correct frame (recomputing a correct checksum gives
/// the same value); the one frame in 65,536 whose *wrong* checksum happens
/// to equal the pseudo-header sum gets a correct one, where a pure
/// forwarder would have passed the error on. Costs one pseudo-header sum per
/// TCP/UDP frame, and a pass over the segment only for partial ones.
pub(super) fn complete_partial_checksum(frame: &mut [u8], layout: &Layout) -> Csum {
    let Some(c) = l4_checksum_of(frame, layout) else {
        return Csum::NotApplicable;
    };
    let Some(partial) = partial_value(frame, layout, c.proto, c.end - c.l4) else {
        return Csum::NotApplicable;
    };
    let old = be16(frame, c.field).unwrap_or(0);
    // 0 and 0xffff are the same number in ones' complement.
    let is_partial = old == partial || (partial == 0xffff && old == 0);
    if !is_partial || (c.proto == IPPROTO_UDP && old == 0) {
        // (A UDP checksum of 0 means "none": leave it.)
        return Csum::Left;
    }
    if rewrite_l4_checksum(frame, layout, &c) {
        Csum::Completed
    } else {
        Csum::NotApplicable
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
/// only), CWR (first only) and the TCP checksum fixed per segment (so a
/// partial checksum in the super-frame does not matter). Returns false (and
/// appends nothing) when the frame is not an unfragmented TCP segment over
/// IPv4/IPv6 that `layout` describes.
pub(super) fn segment_tcp(
    frame: &[u8],
    layout: &Layout,
    mtu: usize,
    pool: &mut Vec<PacketBuf>,
    segs: &mut Vec<PacketBuf>,
) -> bool {
    let Some(cut) = TcpCut::plan(frame, layout, mtu) else {
        return false;
    };
    let first = segs.len();
    for i in 0..cut.segments() {
        let (hdrs, chunk) = cut.parts(frame, i);
        let mut b = fill(pool, &[hdrs, chunk]);
        if !cut.fix(b.data_mut(), i) {
            segs.truncate(first);
            return false;
        }
        segs.push(b);
    }
    true
}

/// How [`segment_tcp`] cuts one TCP super-frame: where its headers are,
/// the MSS and the fields each segment gets its own value of. Shared by
/// `segment_tcp` (each segment into a buffer of its own) and the
/// encrypted tunnel's transmit path, which writes each segment straight
/// into its slot of a UDP super-frame (`tunnel`, `esp_gso`), so both cut
/// a super-frame into the same bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpCut {
    layout: Layout,
    l3: usize,
    l4: usize,
    /// End of the TCP header: every segment starts with `frame[..hdr_end]`.
    hdr_end: usize,
    /// End of the TCP payload (the IP length's end).
    end: usize,
    mss: usize,
    n: usize,
    seq0: u32,
    id0: u16,
    flags0: u8,
}

impl TcpCut {
    /// The cut of `frame` (which `layout` describes) into segments of at
    /// most `mtu` bytes of IP datagram; `None` when the frame is not an
    /// unfragmented TCP segment over IPv4/IPv6 that `segment_tcp` can cut.
    pub(crate) fn plan(frame: &[u8], layout: &Layout, mtu: usize) -> Option<TcpCut> {
        if layout.l4 != L4Kind::Tcp || layout.is_fragment() || !layout.is_ip() {
            return None;
        }
        let l3 = usize::from(layout.l3_offset);
        let l4 = usize::from(layout.l4_offset);
        let end = layout.l4_end();
        let doff = frame.get(l4 + 12).map(|b| usize::from(b >> 4) * 4)?;
        let hdr_end = l4 + doff;
        if doff < 20 || hdr_end > end || end > frame.len() {
            return None;
        }
        let mss = match mtu.checked_sub((l4 - l3) + doff) {
            Some(m) if m >= 8 => m,
            _ => return None,
        };
        let (seq0, id0) = (be32(frame, l4 + 4)?, be16(frame, l3 + 4)?);
        if layout.l3 == L3Kind::Ipv6 && v6_addrs(frame, layout).is_none() {
            return None;
        }
        let n = (end - hdr_end).div_ceil(mss).max(1);
        Some(TcpCut {
            layout: *layout,
            l3,
            l4,
            hdr_end,
            end,
            mss,
            n,
            seq0,
            id0,
            flags0: frame[l4 + 13],
        })
    }

    /// The cut of a frame carrying TCP GSO offload state `o` (its own
    /// `gso_size`), as `finish_frame` cuts it; `None` when it would not.
    pub(crate) fn of_offload(frame: &[u8], layout: &Layout, o: &Offload) -> Option<TcpCut> {
        if !o.is_gso() {
            return None;
        }
        TcpCut::plan(frame, layout, gso_mtu(frame, layout, o)?)
    }

    /// How many segments.
    pub(crate) fn segments(&self) -> usize {
        self.n
    }

    /// Length of segment `i` (< [`segments`](Self::segments)).
    pub(crate) fn seg_len(&self, i: usize) -> usize {
        let payload = self.end - self.hdr_end;
        let from = (i * self.mss).min(payload);
        let to = ((i + 1) * self.mss).min(payload);
        self.hdr_end + (to - from)
    }

    /// Segment `i`'s bytes before [`fix`](Self::fix): the super-frame's
    /// headers and its payload chunk (`frame` the one planned).
    pub(crate) fn parts<'a>(&self, frame: &'a [u8], i: usize) -> (&'a [u8], &'a [u8]) {
        let payload = &frame[self.hdr_end..self.end];
        let from = (i * self.mss).min(payload.len());
        let to = ((i + 1) * self.mss).min(payload.len());
        (&frame[..self.hdr_end], &payload[from..to])
    }

    /// Writes segment `i` of `frame` into `out` (exactly
    /// [`seg_len`](Self::seg_len) bytes) with every field fixed: one copy
    /// of its headers and payload. `false` as [`fix`](Self::fix).
    ///
    /// The TCP checksum of the payload is summed while it is copied
    /// ([`copy_sum_words`]), not read again afterwards: each payload byte
    /// is read once (issue 34: the separate pass, `l4_sum`, was ~4 % of
    /// the sealing daemon's samples). Same checksum as [`fix`](Self::fix).
    pub(crate) fn write(&self, frame: &[u8], i: usize, out: &mut [u8]) -> bool {
        let (hdrs, chunk) = self.parts(frame, i);
        let total = out.len();
        if total != hdrs.len() + chunk.len() {
            return false;
        }
        let (h, payload) = out.split_at_mut(hdrs.len());
        h.copy_from_slice(hdrs);
        self.fix_headers(h, total, i);
        let Some(pseudo) = self.pseudo_sum(h, total) else {
            return false;
        };
        // The TCP header's length is a multiple of 4, so the payload's sum
        // chains onto the header's (every slice but the last even).
        let head = sum_words(&h[self.l4..], pseudo);
        let sum = copy_sum_words(payload, chunk, head);
        put16(h, self.l4 + 16, finish(sum));
        true
    }

    /// Fixes segment `i`'s fields in `d` (its headers and chunk, as
    /// [`parts`](Self::parts) gives them): IPv4 total length, ID
    /// (incremented per segment) and header checksum, IPv6 payload length,
    /// sequence number, FIN/PSH (last segment only), CWR (first only) and
    /// the TCP checksum. `false` when the pseudo header cannot be built.
    pub(crate) fn fix(&self, d: &mut [u8], i: usize) -> bool {
        let total = d.len();
        self.fix_headers(d, total, i);
        match l4_sum(d, &self.layout, IPPROTO_TCP, self.l4, total) {
            Some(c) => {
                put16(d, self.l4 + 16, c);
                true
            }
            None => false,
        }
    }

    /// [`fix`](Self::fix) but the TCP checksum, whose field is left 0: `d`
    /// holds at least segment `i`'s headers, `total` is the segment's
    /// length.
    fn fix_headers(&self, d: &mut [u8], total: usize, i: usize) {
        let (l3, l4) = (self.l3, self.l4);
        let ip_len = total - l3;
        if self.layout.l3 == L3Kind::Ipv4 {
            put16(d, l3 + 2, ip_len as u16);
            put16(d, l3 + 4, self.id0.wrapping_add(i as u16));
            put16(d, l3 + 10, 0);
            let c = checksum(&d[l3..l4]);
            put16(d, l3 + 10, c);
        } else {
            put16(d, l3 + 4, (ip_len - 40) as u16);
        }
        d[l4 + 4..l4 + 8]
            .copy_from_slice(&self.seq0.wrapping_add((i * self.mss) as u32).to_be_bytes());
        let mut flags = self.flags0;
        if i > 0 {
            flags &= !TCP_CWR;
        }
        if i + 1 < self.n {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        d[l4 + 13] = flags;
        put16(d, l4 + 16, 0);
    }

    /// The TCP pseudo header's sum for a segment of `total` bytes whose
    /// headers are `h`, as [`l4_sum`] adds it; `None` when it cannot be
    /// built.
    fn pseudo_sum(&self, h: &[u8], total: usize) -> Option<u32> {
        let len = total - self.l4;
        match self.layout.l3 {
            L3Kind::Ipv4 => {
                let (s, d) = v4_addrs(h, self.l3)?;
                Some(pseudo_header_ipv4(
                    s,
                    d,
                    IPPROTO_TCP,
                    len.min(usize::from(u16::MAX)) as u16,
                ))
            }
            L3Kind::Ipv6 => {
                let (s, d) = v6_addrs(h, &self.layout)?;
                Some(pseudo_header_ipv6(
                    s,
                    d,
                    IPPROTO_TCP,
                    len.min(u32::MAX as usize) as u32,
                ))
            }
            _ => None,
        }
    }
}

/// A counter [`deliver_oversize`] adds to (see [`RxSide::count`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RxCount {
    /// A super-frame cut into segments.
    GsoFrames,
    /// Segments produced from super-frames.
    GsoSegments,
    /// A frame longer than the MTU that could not be segmented (the port's
    /// `oversize_dropped`).
    OversizeDropped,
    /// A received frame dropped (the port's `PortStats::rx_dropped`).
    RxDropped,
}

/// The receive state of a port, as [`deliver_oversize`] needs it. Both
/// ports' `RxState` implement it over their own counters structs, so what
/// is decided for a frame longer than the MTU (segment or drop, what is
/// counted, when to warn) is written once, here, and the two ports cannot
/// drift apart again.
pub(super) trait RxSide {
    /// The port's name, for the warning.
    fn port_name(&self) -> &str;
    /// The interface's MTU (the IP datagram's limit).
    fn mtu(&self) -> usize;
    /// Scratch vector for segments, kept between super-frames so that
    /// cutting one does not allocate a vector.
    fn segs(&mut self) -> &mut Vec<PacketBuf>;
    /// Add `n` to the counter `what`.
    fn count(&mut self, what: RxCount, n: u64);
    /// True the first time it is called on this port, false after: the
    /// oversize warning is logged once, further drops only counted.
    fn first_oversize_warning(&mut self) -> bool;
    /// Hand a frame to the switch: appended to `out` when `room > 0`,
    /// queued otherwise. Counts it received; returns how many went to `out`
    /// (0 or 1).
    fn push(&mut self, buf: PacketBuf, out: &mut Vec<PacketBuf>, room: usize) -> usize;
}

/// The receive fix-up for a frame longer than the port's MTU allows (a
/// local sender's GSO super-frame, or a GRO'd one): TCP over IPv4/IPv6 is
/// cut into MTU-sized segments by [`segment_tcp`] and handed on through
/// [`RxSide::push`], anything else is dropped and counted (and the first
/// such drop logged). Returns how many frames went to `out`; the rest are
/// queued by the port. Shared by the AF_PACKET and AF_XDP ports.
///
/// # Counting
/// A super-frame counts once in `gso_frames` and its segments in
/// `gso_segments`; the segments are **not** counted in `csum_completed`,
/// although each gets a freshly computed checksum. The two ports' copies of
/// this function used to differ here (AF_PACKET added every segment to
/// `csum_completed`, AF_XDP did not); not counting is right because:
/// - `csum_completed` then means one thing on every port and on transmit
///   ([`Finished::csum_completed`]): frames whose partial checksum was
///   completed in place. Each received frame the fix-up touched is counted
///   in exactly one of `csum_completed` and `gso_segments`, so their sum is
///   the frames fixed, with no double counting;
/// - on AF_PACKET it keeps `csum_completed <= csum_not_ready` (the kernel
///   flags a super-frame once, not once per segment), so the difference
///   still shows partial checksums that could not be completed;
/// - a segment's checksum is computed whether or not the super-frame's was
///   partial (on AF_XDP that is not even known), so counting it as a
///   "completion" would count something that did not happen.
pub(super) fn deliver_oversize<R: RxSide>(
    rx: &mut R,
    frame: &[u8],
    layout: Option<&Layout>,
    out: &mut Vec<PacketBuf>,
    room: usize,
    pool: &mut Vec<PacketBuf>,
) -> usize {
    let mtu = rx.mtu();
    let mut segs = std::mem::take(rx.segs());
    segs.clear();
    let mut n = 0;
    if layout.is_some_and(|l| segment_tcp(frame, l, mtu, pool, &mut segs)) {
        rx.count(RxCount::GsoFrames, 1);
        rx.count(RxCount::GsoSegments, segs.len() as u64);
        for s in segs.drain(..) {
            n += rx.push(s, out, room.saturating_sub(n));
        }
    } else {
        rx.count(RxCount::OversizeDropped, 1);
        rx.count(RxCount::RxDropped, 1);
        if rx.first_oversize_warning() {
            tracing::warn!(
                port = %rx.port_name(),
                len = frame.len(),
                mtu,
                "dropping frame longer than the MTU that is not TCP (GSO/GRO on \
                 the sender?); further drops are only counted"
            );
        }
    }
    *rx.segs() = segs;
    n
}

/// What [`finish_offloads`] did to a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finished {
    /// GSO super-frames cut into segments.
    pub gso_frames: u64,
    /// Segments produced from them.
    pub gso_segments: u64,
    /// Partial checksums completed (outside super-frames).
    pub csum_completed: u64,
}

/// The payload bytes per segment a super-frame's `gso_size` means, as the
/// `mtu` argument of [`segment_tcp`] (which cuts at `mtu - IP headers -
/// TCP header`).
fn gso_mtu(frame: &[u8], layout: &Layout, o: &Offload) -> Option<usize> {
    let l3 = usize::from(layout.l3_offset);
    let l4 = usize::from(layout.l4_offset);
    let doff = usize::from(*frame.get(l4 + 12)? >> 4) * 4;
    (o.gso_size > 0).then(|| (l4 - l3) + doff + usize::from(o.gso_size))
}

/// Turn a frame that carries offload work (see [`Offload`]) into wire
/// frames appended to `out`: a TCP super-frame is segmented at its
/// `gso_size` as the kernel's `tcp_gso_segment` would ([`segment_tcp`],
/// every segment's checksums complete), a partial checksum is completed.
/// The frame's metadata is cleared. A frame that cannot be finished
/// (unparsable, not TCP/UDP) is passed on as it is; a super-frame that
/// cannot be segmented is passed on whole with its checksum completed
/// (the port will refuse it if it is too long). Spare buffers go to `pool`.
pub(crate) fn finish_frame(
    mut b: PacketBuf,
    pool: &mut Vec<PacketBuf>,
    out: &mut Vec<PacketBuf>,
    done: &mut Finished,
) {
    let Some(o) = b.offload.take() else {
        out.push(b);
        return;
    };
    if o.gso_type == GsoType::UdpL4 {
        // A UDP super-frame (a tunnel's ESP in UDP, glued for a port with
        // offloads, that ended up on one without): its datagrams.
        use nicflow_packet::udp_gso::{plan, SegCsum};
        if let Ok(cut) = plan(b.data(), o.gso_size) {
            let before = out.len();
            for i in 0..cut.segments() {
                let mut s = pool
                    .pop()
                    .unwrap_or_else(|| PacketBuf::with_capacity(RX_BUF_CAPACITY));
                if !cut.write(b.data(), i, &mut s, SegCsum::Full) {
                    s = PacketBuf::with_capacity(b.len());
                    if !cut.write(b.data(), i, &mut s, SegCsum::Full) {
                        continue;
                    }
                }
                s.tun = b.tun;
                out.push(s);
            }
            done.gso_frames += 1;
            done.gso_segments += (out.len() - before) as u64;
            pool.push(b);
            return;
        }
    }
    let Ok(layout) = parse::parse(b.data()) else {
        out.push(b);
        return;
    };
    if o.is_gso() {
        if let Some(mtu) = gso_mtu(b.data(), &layout, &o) {
            let before = out.len();
            if segment_tcp(b.data(), &layout, mtu, pool, out) {
                // Segments keep the frame's tunnel metadata (the VNI a
                // `key=flow` tunnel port encapsulates them with).
                if b.tun.is_some() {
                    for s in &mut out[before..] {
                        s.tun = b.tun;
                    }
                }
                done.gso_frames += 1;
                done.gso_segments += (out.len() - before) as u64;
                pool.push(b);
                return;
            }
        }
    }
    if o.csum_partial && complete_l4_checksum(b.data_mut(), &layout) {
        done.csum_completed += 1;
    }
    out.push(b);
}

/// [`finish_frame`] over a transmit batch, in place (order kept), for a
/// port that cannot carry offloads ([`super::Port::accepts_offloads`]).
/// Costs one scan when no frame needs work.
pub fn finish_offloads(pkts: &mut Vec<PacketBuf>, pool: &mut Vec<PacketBuf>) -> Finished {
    let mut done = Finished::default();
    if !pkts.iter().any(|p| p.needs_offload_work()) {
        return done;
    }
    let mut out = Vec::with_capacity(pkts.len() + 64);
    for b in pkts.drain(..) {
        finish_frame(b, pool, &mut out, &mut done);
    }
    *pkts = out;
    done
}

/// Complete a partial TCP/UDP checksum in a copy of a frame (the
/// controller's packet-in), whatever the field holds.
pub fn complete_checksum(frame: &mut [u8], layout: &Layout) -> bool {
    complete_l4_checksum(frame, layout)
}

#[cfg(test)]
pub(super) mod tests {
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
            L4Kind::Tcp => (IPPROTO_TCP, 16, l.l4_end() - l4),
            _ => (IPPROTO_UDP, 6, usize::from(be16(good, l4 + 4).unwrap())),
        };
        let mut f = good.to_vec();
        let p = partial_value(&f, &l, proto, len).unwrap();
        put16(&mut f, l4 + field, p);
        f
    }

    /// Check that `segs` are `big` cut for `mtu` the way `tcp_gso_segment`
    /// cuts it. Shared with the ports' tests of their receive paths.
    pub(crate) fn check_segments(big: &[u8], mtu: usize, segs: &[PacketBuf]) {
        let l = parse::parse(big).unwrap();
        let l3 = usize::from(l.l3_offset);
        let l4 = usize::from(l.l4_offset);
        let doff = usize::from(big[l4 + 12] >> 4) * 4;
        let payload = &big[l4 + doff..l.l4_end()];
        let mut joined = Vec::new();
        let seq0 = be32(big, l4 + 4).unwrap();
        for (i, s) in segs.iter().enumerate() {
            let d = s.data();
            let sl = parse::parse(d).unwrap();
            assert_eq!(
                sl,
                Layout {
                    l4_len: sl.l4_len,
                    ..l
                },
                "segment {i} layout"
            );
            assert!(
                d.len() - l3 <= mtu,
                "segment {i}: {} > mtu {mtu}",
                d.len() - l3
            );
            assert!(all_checksums_valid(d), "segment {i} checksums");
            assert_eq!(verify_l4(d, &sl), Some(true));
            assert_eq!(
                &d[..l4 + 4],
                &{
                    // Headers equal the original's but for lengths/ids/checksums.
                    let mut h = big[..l4 + 4].to_vec();
                    h[..l3].copy_from_slice(&d[..l3]);
                    if l.l3 == L3Kind::Ipv4 {
                        h[l3 + 2..l3 + 6].copy_from_slice(&d[l3 + 2..l3 + 6]);
                        h[l3 + 10..l3 + 12].copy_from_slice(&d[l3 + 10..l3 + 12]);
                        let id0 = be16(big, l3 + 4).unwrap();
                        assert_eq!(be16(d, l3 + 4).unwrap(), id0.wrapping_add(i as u16));
                    } else {
                        h[l3 + 4..l3 + 6].copy_from_slice(&d[l3 + 4..l3 + 6]);
                    }
                    h
                }[..]
            );
            let seq = be32(d, l4 + 4).unwrap();
            assert_eq!(seq, seq0.wrapping_add(joined.len() as u32));
            let flags = d[l4 + 13];
            let last = i + 1 == segs.len();
            assert_eq!(
                flags & (TCP_FIN | TCP_PSH) != 0,
                last && big[l4 + 13] & (TCP_FIN | TCP_PSH) != 0
            );
            assert_eq!(flags & TCP_CWR != 0, i == 0 && big[l4 + 13] & TCP_CWR != 0);
            joined.extend_from_slice(&d[l4 + doff..sl.l4_end()]);
        }
        assert_eq!(joined, payload);
    }

    /// TCP and UDP over IPv4 and IPv6, tagged and behind an extension
    /// header, with correct checksums: what checksum completion handles.
    fn l4_frames() -> [Vec<u8>; 4] {
        [
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
        ]
    }

    /// Frames whose checksum is not completed: ICMP, and a fragment (its
    /// checksum covers bytes not in the frame).
    fn not_completable() -> [Vec<u8>; 2] {
        [
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv4(V4A, V4B)
                .icmp(8, 0)
                .echo(1, 1)
                .build(),
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv4(V4A, V4B)
                .ipv4_fragment(0, true)
                .udp(1, 2)
                .payload(&[1; 16])
                .build(),
        ]
    }

    /// TCP super-frames as a TSO sender hands them over, with the MTU to
    /// cut each for and the segments that gives: IPv4 with options, CWR,
    /// PSH and FIN set and a sequence number about to wrap; tagged IPv6.
    fn super_frames() -> [(Vec<u8>, usize, usize); 2] {
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
            .vlan(7)
            .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
            .tcp(40000, 5201, 0x10)
            .payload(&payload[..4000])
            .build();
        [(v4, 1500, 20_000usize.div_ceil(1448)), (v6f, 1280, 4)]
    }

    #[test]
    fn complete_checksum_tcp_udp_v4_v6() {
        for good in l4_frames() {
            let l = parse::parse(&good).unwrap();
            let field = usize::from(l.l4_offset) + if l.l4 == L4Kind::Tcp { 16 } else { 6 };
            let mut f = good.clone();
            put16(&mut f, field, 0xbeef);
            assert_eq!(verify_l4(&f, &l), Some(false));
            assert!(complete_l4_checksum(&mut f, &l));
            assert_eq!(f, good);
        }
        for other in not_completable() {
            let mut f = other.clone();
            assert!(!complete_l4_checksum(
                &mut f,
                &parse::parse(&other).unwrap()
            ));
            assert_eq!(f, other);
        }
    }

    #[test]
    fn partial_checksums_are_completed_v4_v6_tcp_udp() {
        for good in l4_frames() {
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

        for other in not_completable() {
            let mut f = other.clone();
            assert_eq!(
                complete_partial_checksum(&mut f, &parse::parse(&other).unwrap()),
                Csum::NotApplicable
            );
            assert_eq!(f, other);
        }
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
    fn segment_tcp_ipv4_and_ipv6() {
        for (big, mtu, expect) in super_frames() {
            let l = parse::parse(&big).unwrap();
            let (mut pool, mut segs) = (Vec::new(), Vec::new());
            assert!(segment_tcp(&big, &l, mtu, &mut pool, &mut segs));
            assert_eq!(segs.len(), expect);
            check_segments(&big, mtu, &segs);
        }
        // Not TCP: refused, nothing produced.
        let udp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .udp(1, 2)
            .payload(&[5; 3000])
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

    /// `TcpCut::write` sums the payload while copying it: each segment it
    /// writes is byte for byte the super-frame's headers and chunk fixed
    /// by `fix` (which sums the written segment again), for IPv4 with
    /// options, tagged IPv6 and IPv6 behind a hop-by-hop header, full and
    /// partial checksums, MSS from 8 bytes up (odd sizes, odd last
    /// chunks); and a wrong output length is refused.
    #[test]
    fn write_sums_while_copying_as_fix_does() {
        let payload: Vec<u8> = (0..3001u32).map(|i| (i * 13 + 5) as u8).collect();
        let hbh = FrameBuilder::new(MAC_A, MAC_B)
            .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
            .ipv6_hop_by_hop(0)
            .tcp(1, 2, 0x18)
            .payload(&payload)
            .build();
        let mut frames: Vec<Vec<u8>> = super_frames().into_iter().map(|f| f.0).collect();
        frames.push(hbh);
        frames.extend(frames.clone().iter().map(|f| make_partial(f)));
        for big in &frames {
            let l = parse::parse(big).unwrap();
            let l4 = usize::from(l.l4_offset);
            let doff = usize::from(big[l4 + 12] >> 4) * 4;
            for mss in [8, 9, 100, 1447, 1448, 1449, 2999] {
                let cut =
                    TcpCut::plan(big, &l, l4 - usize::from(l.l3_offset) + doff + mss).unwrap();
                for i in 0..cut.segments() {
                    let len = cut.seg_len(i);
                    let mut got = vec![0xa5u8; len];
                    assert!(cut.write(big, i, &mut got), "mss {mss} seg {i}");
                    let (h, c) = cut.parts(big, i);
                    let mut want = [h, c].concat();
                    assert!(cut.fix(&mut want, i));
                    assert_eq!(got, want, "mss {mss} seg {i}");
                    let sl = parse::parse(&got).unwrap();
                    assert_eq!(verify_l4(&got, &sl), Some(true), "mss {mss} seg {i}");
                    assert!(!cut.write(big, i, &mut vec![0u8; len + 1]));
                }
            }
        }
    }

    #[test]
    fn super_frames_with_partial_checksums_are_segmented() {
        for (big, mtu, expect) in super_frames() {
            // As the sender leaves it: partial checksum.
            let big = make_partial(&big);
            let l = parse::parse(&big).unwrap();
            let (mut pool, mut segs) = (Vec::new(), Vec::new());
            assert!(segment_tcp(&big, &l, mtu, &mut pool, &mut segs));
            assert_eq!(segs.len(), expect);
            check_segments(&big, mtu, &segs);
        }
    }

    #[test]
    fn fill_reuses_a_pool_buffer_that_fits() {
        let mut pool = vec![PacketBuf::with_capacity(8)];
        let b = fill(&mut pool, &[b"abc", b"de"]);
        assert_eq!(b.data(), b"abcde");
        assert!(pool.is_empty());
    }

    #[test]
    fn fill_allocates_when_the_pool_has_nothing_that_fits() {
        // Too small: a fresh, pool-sized buffer instead.
        let mut pool = vec![PacketBuf::with_capacity(4)];
        let b = fill(&mut pool, &[b"abc", b"defgh"]);
        assert_eq!(b.data(), b"abcdefgh");
        assert!(b.capacity() >= RX_BUF_CAPACITY);
        // The too-small buffer stays in the pool (a super-frame must not
        // cost the pool an ordinary buffer).
        assert_eq!(pool.len(), 1);
        let b = fill(&mut Vec::new(), &[]);
        assert!(b.is_empty());
        assert!(b.capacity() >= RX_BUF_CAPACITY);
    }

    #[test]
    fn max_frame_len_counts_tags() {
        assert_eq!(max_frame_len(1500, None), 1514);
        let tagged = FrameBuilder::new(MAC_A, MAC_B)
            .vlan(1)
            .vlan(2)
            .ipv4(V4A, V4B)
            .udp(1, 2)
            .build();
        let l = parse::parse(&tagged).unwrap();
        assert_eq!(max_frame_len(1500, Some(&l)), 1522);
    }

    #[test]
    fn finish_offloads_segments_and_completes() {
        use nicflow_packet::buf::GsoType;
        let payload = vec![0x33; 10_000];
        let big = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .tcp(5, 6, 0x18)
            .payload(&payload)
            .build();
        let l = parse::parse(&big).unwrap();
        let l4 = usize::from(l.l4_offset);
        let mut gso = PacketBuf::from_slice(&make_partial(&big));
        gso.offload = Some(Offload {
            gso_type: GsoType::TcpV4,
            gso_size: 1000,
            hdr_len: (l4 + 20) as u16,
            csum_start: l4 as u16,
            csum_offset: 16,
            csum_partial: true,
        });
        let small = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .udp(7, 8)
            .payload(b"x")
            .build();
        let mut part = PacketBuf::from_slice(&make_partial(&small));
        part.offload = Some(Offload {
            csum_partial: true,
            ..Default::default()
        });
        let plain = PacketBuf::from_slice(&small);
        let mut batch = vec![plain.clone(), gso, part];
        let mut pool = Vec::new();
        let f = finish_offloads(&mut batch, &mut pool);
        assert_eq!(
            f,
            Finished {
                gso_frames: 1,
                gso_segments: 10,
                csum_completed: 1
            }
        );
        assert_eq!(batch.len(), 12);
        assert_eq!(batch[0], plain);
        check_segments(&big, 20 + 20 + 1000, &batch[1..11]);
        assert_eq!(batch[11].data(), &small[..]);
        assert!(batch.iter().all(|b| b.offload.is_none()));
        // Nothing to do: untouched.
        let mut again = vec![plain.clone()];
        assert_eq!(finish_offloads(&mut again, &mut pool), Finished::default());
    }

    /// A port's receive side reduced to what [`deliver_oversize`] sees.
    #[derive(Default)]
    struct FakeRx {
        mtu: usize,
        segs: Vec<PacketBuf>,
        counts: Vec<(RxCount, u64)>,
        warned: bool,
        warnings: u32,
        pending: Vec<PacketBuf>,
        pushed: u64,
    }

    impl FakeRx {
        fn total(&self, what: RxCount) -> u64 {
            self.counts
                .iter()
                .filter(|(w, _)| *w == what)
                .map(|(_, n)| n)
                .sum()
        }
    }

    impl RxSide for FakeRx {
        fn port_name(&self) -> &str {
            "fake"
        }
        fn mtu(&self) -> usize {
            self.mtu
        }
        fn segs(&mut self) -> &mut Vec<PacketBuf> {
            &mut self.segs
        }
        fn count(&mut self, what: RxCount, n: u64) {
            self.counts.push((what, n));
        }
        fn first_oversize_warning(&mut self) -> bool {
            let first = !std::mem::replace(&mut self.warned, true);
            self.warnings += u32::from(first);
            first
        }
        fn push(&mut self, buf: PacketBuf, out: &mut Vec<PacketBuf>, room: usize) -> usize {
            self.pushed += 1;
            if room > 0 {
                out.push(buf);
                1
            } else {
                self.pending.push(buf);
                0
            }
        }
    }

    #[test]
    fn deliver_oversize_segments_tcp_and_counts_no_checksum_completion() {
        for v6_frame in [false, true] {
            let payload: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
            let b = FrameBuilder::new(MAC_A, MAC_B);
            let b = if v6_frame {
                b.ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
            } else {
                b.ipv4(V4A, V4B)
            };
            // As a local sender leaves it: checksum partial.
            let big = make_partial(&b.tcp(1, 2, 0x18).payload(&payload).build());
            let l = parse::parse(&big).unwrap();
            let mut rx = FakeRx {
                mtu: 1500,
                ..Default::default()
            };
            let (mut out, mut pool) = (Vec::new(), Vec::new());
            let n = deliver_oversize(&mut rx, &big, Some(&l), &mut out, 5, &mut pool);
            let hdrs = if v6_frame { 40 + 20 } else { 20 + 20 };
            let expect = payload.len().div_ceil(1500 - hdrs);
            assert_eq!((n, out.len(), rx.pending.len()), (5, 5, expect - 5));
            out.append(&mut rx.pending);
            check_segments(&big, 1500, &out);
            assert_eq!(rx.pushed, expect as u64);
            assert_eq!(rx.total(RxCount::GsoFrames), 1);
            assert_eq!(rx.total(RxCount::GsoSegments), expect as u64);
            assert_eq!(rx.total(RxCount::OversizeDropped), 0);
            assert_eq!(rx.total(RxCount::RxDropped), 0);
            // No counter for checksum completion exists in the fix-up's
            // vocabulary: the segments are counted once, as segments.
            assert_eq!(
                rx.counts.len(),
                2,
                "only gso_frames and gso_segments: {:?}",
                rx.counts
            );
            // The scratch vector came back (kept for the next super-frame).
            assert!(rx.segs.is_empty() && rx.segs.capacity() >= expect);
        }
    }

    #[test]
    fn deliver_oversize_with_no_room_queues_every_segment() {
        let big = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .tcp(1, 2, 0x18)
            .payload(&[7; 5000])
            .build();
        let l = parse::parse(&big).unwrap();
        let mut rx = FakeRx {
            mtu: 1500,
            ..Default::default()
        };
        let (mut out, mut pool) = (Vec::new(), Vec::new());
        assert_eq!(
            deliver_oversize(&mut rx, &big, Some(&l), &mut out, 0, &mut pool),
            0
        );
        assert!(out.is_empty());
        assert_eq!(rx.pending.len(), 5000usize.div_ceil(1460));
    }

    #[test]
    fn deliver_oversize_drops_what_it_cannot_segment_and_warns_once() {
        let udp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .udp(1, 2)
            .payload(&[1; 3000])
            .build();
        let l = parse::parse(&udp).unwrap();
        let mut rx = FakeRx {
            mtu: 1500,
            ..Default::default()
        };
        let (mut out, mut pool) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            assert_eq!(
                deliver_oversize(&mut rx, &udp, Some(&l), &mut out, 8, &mut pool),
                0
            );
        }
        // Unparsable (no layout): dropped the same way.
        assert_eq!(
            deliver_oversize(&mut rx, &[0u8; 3000], None, &mut out, 8, &mut pool),
            0
        );
        assert!(out.is_empty() && rx.pending.is_empty());
        assert_eq!(rx.pushed, 0);
        assert_eq!(rx.total(RxCount::OversizeDropped), 4);
        assert_eq!(rx.total(RxCount::RxDropped), 4);
        assert_eq!(rx.total(RxCount::GsoFrames), 0);
        assert_eq!(rx.warnings, 1);
        // An MTU too small for the headers cannot be cut either.
        let tcp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .tcp(1, 2, 0x18)
            .payload(&[1; 3000])
            .build();
        let lt = parse::parse(&tcp).unwrap();
        rx.mtu = 40;
        assert_eq!(
            deliver_oversize(&mut rx, &tcp, Some(&lt), &mut out, 8, &mut pool),
            0
        );
        assert_eq!(rx.total(RxCount::OversizeDropped), 5);
    }
}
