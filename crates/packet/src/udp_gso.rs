//! UDP segmentation offload (Linux `SKB_GSO_UDP_L4`, virtio-net
//! `GSO_UDP_L4`): many UDP/IPv4 datagrams of one flow carried as one
//! super-frame, cut again at `gso_size` payload bytes.
//!
//! Place in the packet's path: at the underlay of an encrypted tunnel
//! port. On transmit, the ESP-in-UDP packets (RFC 3948) a batch sealed for
//! one peer are glued with [`append`] into one super-frame, which the
//! AF_PACKET port hands to the kernel behind a virtio-net header: the
//! kernel and a veth carry one skb instead of dozens, and whatever must
//! send single datagrams (a NIC with USO, or the kernel's software GSO in
//! front of a device without it) cuts it exactly as [`Cut`] does. On
//! receive, a super-frame that reached the AF_PACKET port whole (a veth
//! from a local sender) is cut with [`plan`] / [`Cut::write`] into the
//! datagrams it stands for, before anything looks at them.
//!
//! The rules are the kernel's (`__udp_gso_segment`, `inet_gso_segment`):
//! every segment gets a copy of the Ethernet, IPv4 and UDP headers; its
//! IPv4 total length, ID (the first segment's plus its index) and header
//! checksum, and its UDP length and checksum are its own; every segment
//! but the last carries exactly `gso_size` payload bytes, the last at most
//! that. IPv4 without fragments only (IPv6 super-frames are refused and
//! counted by the caller). Nothing here allocates or panics on malformed
//! input.

use crate::buf::{GsoType, Offload, PacketBuf};
use crate::checksum::{fold, pseudo_header_ipv4, sum_words, udp_fixup};
use std::net::Ipv4Addr;

/// Largest IPv4 total length of a super-frame.
pub const UDP_GSO_MAX_IP_LEN: usize = 65535;
/// Most datagrams in one super-frame [`append`] builds (the kernel's
/// `UDP_MAX_SEGMENTS` was 64 before Linux 6.x raised it).
pub const UDP_GSO_MAX_SEGS: usize = 64;
/// Most segments [`plan`] accepts in a received super-frame (the kernel's
/// `UDP_MAX_SEGMENTS` on recent kernels).
pub const UDP_GSO_MAX_RX_SEGS: usize = 128;
/// Capacity of a buffer that can hold any super-frame.
pub const UDP_GSO_BUF_CAPACITY: usize = 18 + UDP_GSO_MAX_IP_LEN + 64;

const ETH: usize = 14;
const UDP_HLEN: usize = 8;

/// Why [`append`] did not glue a datagram to a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not the same flow, other headers, a bigger payload than the head's
    /// segments, a head that is complete (its last segment is short, or
    /// it holds [`UDP_GSO_MAX_SEGS`] or 64 KiB): the datagram goes on its
    /// own (or starts a new head).
    No,
    /// The head's buffer has no room: move it into a buffer of
    /// [`UDP_GSO_BUF_CAPACITY`] and try again.
    NeedRoom,
}

/// Why a received super-frame could not be cut (the caller counts and
/// drops it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutError {
    /// Not Ethernet (one VLAN tag at most) + IPv4 without fragments + UDP.
    NotUdpIpv4,
    /// IPv4 total length or UDP length disagree with each other or with
    /// the frame, or leave no payload.
    BadLength,
    /// `gso_size` of 0, or so small that the frame would be more than
    /// [`UDP_GSO_MAX_RX_SEGS`] datagrams.
    BadGsoSize,
}

impl CutError {
    /// Counter-friendly name.
    pub fn name(self) -> &'static str {
        match self {
            CutError::NotUdpIpv4 => "not_udp_ipv4",
            CutError::BadLength => "bad_length",
            CutError::BadGsoSize => "bad_gso_size",
        }
    }
}

fn rd16(f: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([f[o], f[o + 1]])
}

/// Where the headers of a UDP/IPv4 frame are.
#[derive(Clone, Copy, Debug)]
struct Hdrs {
    /// IPv4 header offset (14, or 18 behind one VLAN tag).
    l3: usize,
    ihl: usize,
    /// IPv4 total length.
    ip_len: usize,
}

impl Hdrs {
    fn l4(&self) -> usize {
        self.l3 + self.ihl
    }
    fn payload_at(&self) -> usize {
        self.l4() + UDP_HLEN
    }
    fn payload(&self) -> usize {
        self.ip_len - self.ihl - UDP_HLEN
    }
}

/// `f` as Ethernet (+ one 802.1Q tag) + IPv4 (no fragment) + UDP, with the
/// IPv4 total length inside the frame and the UDP length equal to the IP
/// payload's.
fn parse(f: &[u8]) -> Result<Hdrs, CutError> {
    if f.len() < ETH + 20 + UDP_HLEN {
        return Err(CutError::NotUdpIpv4);
    }
    let l3 = match rd16(f, 12) {
        0x0800 => ETH,
        0x8100 if f.len() >= ETH + 4 + 20 + UDP_HLEN && rd16(f, 16) == 0x0800 => ETH + 4,
        _ => return Err(CutError::NotUdpIpv4),
    };
    let ihl = usize::from(f[l3] & 0x0f) * 4;
    if f[l3] >> 4 != 4 || ihl < 20 || f[l3 + 9] != 17 || rd16(f, l3 + 6) & 0x3fff != 0 {
        return Err(CutError::NotUdpIpv4);
    }
    let ip_len = usize::from(rd16(f, l3 + 2));
    if ip_len < ihl + UDP_HLEN || l3 + ip_len > f.len() {
        return Err(CutError::BadLength);
    }
    if usize::from(rd16(f, l3 + ihl + 4)) != ip_len - ihl {
        return Err(CutError::BadLength);
    }
    Ok(Hdrs { l3, ihl, ip_len })
}

fn addrs(f: &[u8], l3: usize) -> (Ipv4Addr, Ipv4Addr) {
    let a = |o: usize| Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]);
    (a(l3 + 12), a(l3 + 16))
}

/// Glues datagram `next` behind `head` (a datagram, or a super-frame this
/// function built): `head` becomes a UDP GSO super-frame whose segments
/// are the datagrams appended, in order, with a partial UDP checksum
/// (`CHECKSUM_PARTIAL`, the pseudo header over the whole length) for
/// whoever cuts it to complete per segment. `next` may then be recycled.
///
/// Both must be Ethernet + IPv4 (no fragment) + UDP with the same Ethernet
/// header, the same IPv4 header but for total length, ID and checksum,
/// and the same ports; `next`'s payload at most the head's segment size
/// (the first datagram's), the head's segments all of that size (a short
/// one closes the frame). `next`'s IP ID and UDP checksum are not kept:
/// cutting numbers the IDs up from the head's and computes each
/// checksum, so the caller vouches for the datagrams (built, not
/// received). On refusal nothing changed.
pub fn append(head: &mut PacketBuf, next: &PacketBuf) -> Result<(), Refused> {
    if next.offload.is_some() || head.tun != next.tun {
        return Err(Refused::No);
    }
    let n = next.data();
    let ns = parse(n).map_err(|_| Refused::No)?;
    let np = ns.payload();
    let from = ns.payload_at();
    let slot = admit(head, n, ns.l3, ns.ihl, np)?;
    if !head.append(&n[from..from + np]) {
        return Err(Refused::NeedRoom);
    }
    commit(head, slot);
    Ok(())
}

/// [`append`] for a datagram that does not exist yet: `write` builds its
/// `np` payload bytes straight into the head's tailroom (an ESP packet
/// sealed where it lies), so the payload is written once instead of
/// built elsewhere and copied. `next_hdrs` is the datagram's Ethernet,
/// IPv4 and UDP headers as it would be sent on its own (lengths, ID and
/// checksums are not compared), checked against the head as `append`
/// checks a datagram. The head's buffer may be any size the caller chose.
///
/// `Err(refused)`: nothing changed, `write` not called. `Ok(Err(e))`:
/// `write` failed, the head is as it was (whatever `write` left in the
/// tailroom is not part of the frame). `Ok(Ok(()))`: glued.
pub fn append_with<E>(
    head: &mut PacketBuf,
    next_hdrs: &[u8],
    np: usize,
    write: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Result<(), E>, Refused> {
    if next_hdrs.len() < ETH + 20 + UDP_HLEN {
        return Err(Refused::No);
    }
    let l3 = match rd16(next_hdrs, 12) {
        0x0800 => ETH,
        0x8100 if next_hdrs.len() >= ETH + 4 + 20 + UDP_HLEN && rd16(next_hdrs, 16) == 0x0800 => {
            ETH + 4
        }
        _ => return Err(Refused::No),
    };
    let ihl = usize::from(next_hdrs[l3] & 0x0f) * 4;
    if next_hdrs[l3] >> 4 != 4 || ihl < 20 || next_hdrs.len() < l3 + ihl + UDP_HLEN {
        return Err(Refused::No);
    }
    let slot = admit(head, next_hdrs, l3, ihl, np)?;
    let at = head.len();
    let Some(room) = head.extend_back_unzeroed(np) else {
        return Err(Refused::NeedRoom);
    };
    if let Err(e) = write(room) {
        head.truncate(at);
        return Ok(Err(e));
    }
    commit(head, slot);
    Ok(Ok(()))
}

/// What [`admit`] found: the head's headers and segment size, and the
/// payload bytes about to be glued.
struct Slot {
    hs: Hdrs,
    gso_size: usize,
    np: usize,
}

/// May a datagram of `np` payload bytes, whose headers `n` (Ethernet at 0,
/// IPv4 at `n_l3` with `n_ihl` bytes, then UDP) start, be glued to
/// `head`? The rules of [`append`]; `n` need only hold the headers.
fn admit(
    head: &PacketBuf,
    n: &[u8],
    n_l3: usize,
    n_ihl: usize,
    np: usize,
) -> Result<Slot, Refused> {
    let h = head.data();
    let hs = parse(h).map_err(|_| Refused::No)?;
    let gso_size = match head.offload {
        None => hs.payload(),
        Some(o)
            if o.gso_type == GsoType::UdpL4
                && o.csum_partial
                && usize::from(o.csum_start) == hs.l4() =>
        {
            usize::from(o.gso_size)
        }
        Some(_) => return Err(Refused::No),
    };
    let segs = hs.payload().div_ceil(gso_size.max(1));
    let l4 = hs.l4();
    let ok = hs.l3 == n_l3
        && hs.ihl == n_ihl
        && n.len() >= l4 + 4
        && n[hs.l3 + 9] == 17
        && gso_size > 0
        && np > 0
        && np <= gso_size
        && hs.payload() == segs * gso_size
        && segs < UDP_GSO_MAX_SEGS
        && hs.ip_len + np <= UDP_GSO_MAX_IP_LEN
        && h[..hs.l3 + 2] == n[..hs.l3 + 2] // Ethernet, version, IHL, TOS
        && h[hs.l3 + 6..hs.l3 + 10] == n[hs.l3 + 6..hs.l3 + 10] // flags, TTL, proto
        && h[hs.l3 + 12..l4 + 4] == n[hs.l3 + 12..l4 + 4]; // addresses, options, ports
    if !ok {
        return Err(Refused::No);
    }
    if head.len() != hs.l3 + hs.ip_len || head.tailroom() < np {
        return Err(Refused::NeedRoom);
    }
    Ok(Slot { hs, gso_size, np })
}

/// The head's headers after `slot.np` payload bytes were added behind it:
/// IPv4 length and checksum, UDP length, the partial UDP checksum, and
/// the `GSO_UDP_L4` offload state.
fn commit(head: &mut PacketBuf, slot: Slot) {
    let Slot { hs, gso_size, np } = slot;
    let l4 = hs.l4();
    let ip_len = hs.ip_len + np;
    let udp_len = ip_len - hs.ihl;
    let l3 = hs.l3;
    let (s, d) = addrs(head.data(), l3);
    let f = head.data_mut();
    f[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    f[l3 + 10..l3 + 12].fill(0);
    let ipc = !fold(sum_words(&f[l3..l4], 0));
    f[l3 + 10..l3 + 12].copy_from_slice(&ipc.to_be_bytes());
    f[l4 + 4..l4 + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    let partial = fold(pseudo_header_ipv4(s, d, 17, udp_len as u16));
    f[l4 + 6..l4 + 8].copy_from_slice(&partial.to_be_bytes());
    head.offload = Some(Offload {
        gso_type: GsoType::UdpL4,
        gso_size: gso_size as u16,
        hdr_len: (l4 + UDP_HLEN) as u16,
        csum_start: l4 as u16,
        csum_offset: 6,
        csum_partial: true,
    });
}

/// Moves `head`'s frame into `big` (trimming anything behind the IPv4
/// packet) and returns the old buffer for recycling; offload and tunnel
/// metadata kept. `Err(big)`, `head` untouched, when it does not fit.
pub fn grow(head: &mut PacketBuf, mut big: PacketBuf) -> Result<PacketBuf, PacketBuf> {
    let len = parse(head.data()).map_or(head.len(), |h| h.l3 + h.ip_len);
    if !big.set_data(&head.data()[..len]) {
        return Err(big);
    }
    big.offload = head.offload;
    big.tun = head.tun;
    std::mem::swap(head, &mut big);
    Ok(big)
}

/// Is `b` a buffer [`grow`] can move any super-frame into?
pub fn is_big(b: &PacketBuf) -> bool {
    b.capacity() >= UDP_GSO_BUF_CAPACITY + PacketBuf::DEFAULT_HEADROOM
}

/// How each cut segment's UDP checksum is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegCsum {
    /// Partial (pseudo header only, `CHECKSUM_PARTIAL` in the segment's
    /// [`Offload`]): the super-frame's was, and whoever puts the segment
    /// on a wire completes it (or, for ESP in UDP, nobody needs it).
    Partial,
    /// Computed in full: the segment leaves with no offload state.
    Full,
}

/// A received super-frame's cut: see [`plan`].
#[derive(Clone, Copy, Debug)]
pub struct Cut {
    hdrs: Hdrs,
    gso_size: usize,
    segs: usize,
}

/// Checks `frame` as a UDP/IPv4 super-frame of `gso_size`-byte segments
/// and says how it is cut. A frame whose payload fits one segment is one
/// segment (cut = copy, lengths already right).
pub fn plan(frame: &[u8], gso_size: u16) -> Result<Cut, CutError> {
    let hdrs = parse(frame)?;
    let gso_size = usize::from(gso_size);
    if hdrs.payload() == 0 {
        return Err(CutError::BadLength);
    }
    if gso_size == 0 {
        return Err(CutError::BadGsoSize);
    }
    let segs = hdrs.payload().div_ceil(gso_size);
    if segs > UDP_GSO_MAX_RX_SEGS {
        return Err(CutError::BadGsoSize);
    }
    Ok(Cut {
        hdrs,
        gso_size,
        segs,
    })
}

impl Cut {
    /// How many datagrams the super-frame holds.
    pub fn segments(&self) -> usize {
        self.segs
    }

    /// Offset of the IPv4 header in the frame.
    pub fn l3_offset(&self) -> usize {
        self.hdrs.l3
    }

    /// Offset of the UDP header in the frame.
    pub fn l4_offset(&self) -> usize {
        self.hdrs.l4()
    }

    /// Where datagram `i`'s UDP payload lies in the frame (`None` when
    /// `i` is out of range): a reader that needs only the payloads (ESP
    /// opened where it lies) takes them from there without a cut.
    pub fn payload_range(&self, i: usize) -> Option<std::ops::Range<usize>> {
        let h = self.hdrs;
        if i >= self.segs {
            return None;
        }
        let from = h.payload_at() + i * self.gso_size;
        Some(from..(from + self.gso_size).min(h.l3 + h.ip_len))
    }

    /// Writes datagram `i` (< [`segments`](Self::segments)) of `frame` (the
    /// frame [`plan`] checked) into `out`, replacing what it held. `false`,
    /// `out` unusable until refilled, when it has no room (or `i` is out of
    /// range).
    pub fn write(&self, frame: &[u8], i: usize, out: &mut PacketBuf, csum: SegCsum) -> bool {
        let h = self.hdrs;
        if i >= self.segs {
            return false;
        }
        let from = h.payload_at() + i * self.gso_size;
        let end = (from + self.gso_size).min(h.l3 + h.ip_len);
        let hdr_end = h.payload_at();
        if !out.set_data(&frame[..hdr_end]) {
            return false;
        }
        if !out.append(&frame[from..end]) {
            return false;
        }
        let (l3, l4) = (h.l3, h.l4());
        let udp_len = UDP_HLEN + (end - from);
        let ip_len = h.ihl + udp_len;
        let (s, d) = addrs(frame, l3);
        let f = out.data_mut();
        f[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        let id = rd16(frame, l3 + 4).wrapping_add(i as u16);
        f[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
        f[l3 + 10..l3 + 12].fill(0);
        let ipc = !fold(sum_words(&f[l3..l4], 0));
        f[l3 + 10..l3 + 12].copy_from_slice(&ipc.to_be_bytes());
        f[l4 + 4..l4 + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        let pseudo = pseudo_header_ipv4(s, d, 17, udp_len as u16);
        match csum {
            SegCsum::Partial => {
                f[l4 + 6..l4 + 8].copy_from_slice(&fold(pseudo).to_be_bytes());
                out.offload = Some(Offload {
                    gso_type: GsoType::None,
                    gso_size: 0,
                    hdr_len: (l4 + UDP_HLEN) as u16,
                    csum_start: l4 as u16,
                    csum_offset: 6,
                    csum_partial: true,
                });
            }
            SegCsum::Full => {
                f[l4 + 6..l4 + 8].fill(0);
                let c = udp_fixup(!fold(sum_words(&f[l4..], pseudo)));
                f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
                out.offload = None;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests;
