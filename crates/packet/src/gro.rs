//! Receive coalescing (GRO) of TCP/IPv4 segments into one super-frame.
//!
//! Place in the packet's path: right after a port has produced frames that
//! the kernel never saw whole — a tunnel port's decapsulated (and, with
//! IPsec, decrypted) inner frames — and before they enter the bridge. The
//! sender's stack cut its data into MSS-sized segments for the wire; this
//! glues consecutive segments of one TCP connection back into one frame
//! with GSO metadata ([`Offload`]), as Linux's GRO does for a NIC. The
//! switch then moves one frame instead of dozens, and a port that speaks
//! virtio-net headers hands the receiver's stack one super-frame; a port
//! that does not segments it again on output (`port::fixup`), so nothing
//! downstream has to know.
//!
//! The rules are Linux's (`tcp_gro_receive`, `inet_gro_receive`), so that
//! re-segmenting a merged frame gives back exactly the segments that were
//! merged: same Ethernet header, IPv4 without options or fragments, same
//! TOS, TTL, DF and addresses, IP IDs counting up by one (cutting the frame
//! again counts them up from the first; Linux also merges DF segments
//! with one fixed ID, which nicflow leaves unmerged), same ports, ACK number, window,
//! header length and options (timestamps included), flags ACK only on all
//! but the last (which may add PSH, and ends the super-frame), sequence
//! numbers contiguous, every segment but the last exactly `gso_size` bytes
//! of payload. Each segment's IPv4 and TCP checksums are verified before it
//! is merged: the merged frame carries a partial checksum
//! (`CHECKSUM_PARTIAL`), so a corrupted segment must not hide in it.

use crate::buf::{GsoType, Offload, PacketBuf, TunnelMeta};
use crate::checksum::{copy_sum_words, fold, pseudo_header_ipv4, sum_words};
use std::net::Ipv4Addr;

/// Largest IPv4 total length of a merged frame.
pub const GRO_MAX_IP_LEN: usize = 65535;
/// Most segments in one merged frame: 64 KiB of 1,448-byte segments (Linux
/// bounds by the 64 KiB alone).
pub const GRO_MAX_SEGS: usize = 44;

const ETH: usize = 14;
const IP: usize = ETH; // IPv4 header offset
const TCP: usize = ETH + 20; // TCP header offset (no IP options)
const F_PSH: u8 = 0x08;
const F_ACK: u8 = 0x10;

/// Why [`merge`] did not append a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not mergeable with this head (another flow, a gap, other flags,
    /// options or sizes, a bad checksum, the head is complete): the
    /// segment starts a frame of its own.
    No,
    /// Mergeable, but the head's buffer has no room for the payload: move
    /// the head into a larger buffer ([`GRO_BUF_CAPACITY`]) and try again.
    NeedRoom,
}

/// Capacity of a buffer that can hold any merged frame.
pub const GRO_BUF_CAPACITY: usize = ETH + GRO_MAX_IP_LEN + 64;

/// A plain TCP/IPv4 segment's fields GRO compares.
#[derive(Clone, Copy, Debug)]
struct Seg {
    /// IPv4 total length.
    ip_len: usize,
    /// TCP header length.
    thl: usize,
    flags: u8,
    seq: u32,
    id: u16,
    df: bool,
}

impl Seg {
    fn payload(&self) -> usize {
        self.ip_len - 20 - self.thl
    }
}

fn rd16(f: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([f[o], f[o + 1]])
}

fn rd32(f: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([f[o], f[o + 1], f[o + 2], f[o + 3]])
}

/// Parses `f` as Ethernet + IPv4 (no options, no fragment) + TCP with a
/// payload and no flags but ACK and PSH.
fn parse(f: &[u8]) -> Option<Seg> {
    if f.len() < TCP + 20 || rd16(f, 12) != 0x0800 || f[IP] != 0x45 || f[IP + 9] != 6 {
        return None;
    }
    let ip_len = rd16(f, IP + 2) as usize;
    let frag = rd16(f, IP + 6);
    if frag & 0x3fff != 0 || ip_len < 40 || ETH + ip_len > f.len() {
        return None;
    }
    let thl = ((f[TCP + 12] >> 4) as usize) * 4;
    let flags = f[TCP + 13];
    if thl < 20 || 20 + thl >= ip_len || f[TCP + 12] & 0x0f != 0 {
        return None;
    }
    if flags & !(F_ACK | F_PSH) != 0 || flags & F_ACK == 0 {
        return None;
    }
    Some(Seg {
        ip_len,
        thl,
        flags,
        seq: rd32(f, TCP + 4),
        id: rd16(f, IP + 4),
        df: frag & 0x4000 != 0,
    })
}

/// Are the IPv4 header and TCP checksums of `f` (parsed as `seg`) right?
fn checksums_ok(f: &[u8], seg: &Seg) -> bool {
    header_sums(f, seg)
        .is_some_and(|h| fold(sum_words(&f[TCP + seg.thl..ETH + seg.ip_len], h)) == 0xffff)
}

/// `None` when the IPv4 header checksum of `f` (parsed as `seg`) is
/// wrong; else the TCP checksum's sum so far: the pseudo header and the
/// TCP header (the payload, summed on, completes it: [`checksums_ok`], or
/// [`merge`] while it copies the payload).
fn header_sums(f: &[u8], seg: &Seg) -> Option<u32> {
    if fold(sum_words(&f[IP..TCP], 0)) != 0xffff {
        return None;
    }
    let (s, d) = addrs(f);
    let pseudo = pseudo_header_ipv4(s, d, 6, (seg.ip_len - 20) as u16);
    Some(sum_words(&f[TCP..TCP + seg.thl], pseudo))
}

fn addrs(f: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
    let a = |o: usize| Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]);
    (a(IP + 12), a(IP + 16))
}

/// Do `a` and `b` belong to the same TCP/IPv4 connection (same Ethernet
/// header, addresses and ports)? Cheap: no checksum, no other field.
pub fn same_flow(a: &[u8], b: &[u8]) -> bool {
    a.len() >= TCP + 4
        && b.len() >= TCP + 4
        && a[..ETH] == b[..ETH]
        && rd16(a, 12) == 0x0800
        && a[IP + 9] == 6
        && b[IP + 9] == 6
        && a[IP + 12..IP + 20] == b[IP + 12..IP + 20]
        && a[IP] == 0x45
        && b[IP] == 0x45
        && a[TCP..TCP + 4] == b[TCP..TCP + 4]
}

/// Can `b` start a merged frame (a verified TCP/IPv4 data segment)? The
/// caller merges later segments into it with [`merge`].
pub fn is_candidate(b: &PacketBuf) -> bool {
    b.offload.is_none() && parse(b.data()).is_some()
}

/// Appends the payload of segment `next` to `head` (a segment, or a frame
/// this function built) when Linux's GRO would merge them; see the module
/// docs. On success `head` is a TCP/IPv4 super-frame with a partial
/// checksum and `next` may be recycled. On refusal nothing changed.
pub fn merge(head: &mut PacketBuf, next: &PacketBuf) -> Result<(), Refused> {
    if next.offload.is_some() {
        return Err(Refused::No);
    }
    merge_slice(head, next.data(), next.tun)
}

/// [`merge`] of a segment that is not in a buffer of its own: `next` is
/// the frame's bytes (no offload state), `next_tun` its tunnel metadata.
/// A tunnel underlay glues the segments it opened inside a received UDP
/// super-frame straight from there, with one copy of each payload.
pub fn merge_slice(
    head: &mut PacketBuf,
    next: &[u8],
    next_tun: Option<TunnelMeta>,
) -> Result<(), Refused> {
    // Tunnel metadata is part of the flow key (a `key=flow` port receives
    // many VNIs): frames from different tunnels never merge.
    if head.tun != next_tun {
        return Err(Refused::No);
    }
    let built = match head.offload {
        None => false,
        Some(o)
            if o.gso_type == GsoType::TcpV4 && o.csum_partial && o.csum_start as usize == TCP =>
        {
            true
        }
        Some(_) => return Err(Refused::No),
    };
    let (h, n) = (head.data(), next);
    if !same_flow(h, n) {
        return Err(Refused::No);
    }
    let hs = parse(h).ok_or(Refused::No)?;
    let ns = parse(n).ok_or(Refused::No)?;
    let gso_size = match head.offload {
        Some(o) => o.gso_size as usize,
        None => hs.payload(),
    };
    let segs = hs.payload().div_ceil(gso_size.max(1));
    let np = ns.payload();
    let same = |a: usize, b: usize| h[a..b] == n[a..b];
    let ok = hs.flags & F_PSH == 0
        && hs.payload() == segs * gso_size
        && np <= gso_size
        && segs < GRO_MAX_SEGS
        && hs.ip_len + np <= GRO_MAX_IP_LEN
        && hs.thl == ns.thl
        && hs.df == ns.df
        && ns.id == hs.id.wrapping_add(segs as u16)
        && h[IP + 1] == n[IP + 1] // TOS
        && h[IP + 8] == n[IP + 8] // TTL
        && same(TCP + 8, TCP + 12) // ACK number
        && same(TCP + 14, TCP + 16) // window
        && same(TCP + 20, TCP + hs.thl) // options
        && ns.seq == hs.seq.wrapping_add(hs.payload() as u32);
    // Checksums last: the cheap rules refuse most frames first. A built
    // head's checksum is partial: it was verified segment by segment.
    if !ok || (!built && !checksums_ok(h, &hs)) {
        return Err(Refused::No);
    }
    let h_end = ETH + hs.ip_len;
    if head.len() != h_end || head.tailroom() < np {
        // (A head with Ethernet padding is trimmed by the caller's move.)
        // Rare (once per growth): the segment is verified first, so a bad
        // one never makes the caller move the head for nothing.
        if !checksums_ok(n, &ns) {
            return Err(Refused::No);
        }
        return Err(Refused::NeedRoom);
    }
    // The segment's TCP checksum is summed while its payload is copied
    // (issue 34: a pass of its own, `checksums_ok`, was ~4.6 % of the
    // opening daemon's samples): headers and pseudo header first, then the
    // payload as it is appended; a wrong sum takes the payload off again.
    let payload_at = TCP + ns.thl;
    let Some(head_sum) = header_sums(n, &ns) else {
        return Err(Refused::No);
    };
    let Some(dst) = head.extend_back_unzeroed(np) else {
        return Err(Refused::NeedRoom);
    };
    if fold(copy_sum_words(
        dst,
        &n[payload_at..payload_at + np],
        head_sum,
    )) != 0xffff
    {
        head.truncate(h_end);
        return Err(Refused::No);
    }
    let ip_len = hs.ip_len + np;
    let (s, d) = addrs(head.data());
    let f = head.data_mut();
    f[IP + 2..IP + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    f[IP + 10..IP + 12].copy_from_slice(&[0, 0]);
    let ipc = !fold(sum_words(&f[IP..TCP], 0));
    f[IP + 10..IP + 12].copy_from_slice(&ipc.to_be_bytes());
    f[TCP + 13] |= ns.flags & F_PSH;
    let partial = fold(pseudo_header_ipv4(s, d, 6, (ip_len - 20) as u16));
    f[TCP + 16..TCP + 18].copy_from_slice(&partial.to_be_bytes());
    head.offload = Some(Offload {
        gso_type: GsoType::TcpV4,
        gso_size: gso_size as u16,
        hdr_len: (TCP + hs.thl) as u16,
        csum_start: TCP as u16,
        csum_offset: 16,
        csum_partial: true,
    });
    Ok(())
}

/// Moves `head`'s frame into `big`, trimming Ethernet padding, and returns
/// the old buffer for recycling. Keeps the offload and tunnel metadata.
/// `Err(big)`, `head` untouched, when the frame does not fit in `big`
/// behind its headroom.
pub fn grow(head: &mut PacketBuf, mut big: PacketBuf) -> Result<PacketBuf, PacketBuf> {
    let len = parse_len(head.data()).unwrap_or(head.len());
    if !big.set_data(&head.data()[..len]) {
        return Err(big);
    }
    big.offload = head.offload;
    big.tun = head.tun;
    std::mem::swap(head, &mut big);
    Ok(big)
}

/// Is `b` a buffer [`grow`] can move any merged frame into?
pub fn is_big(b: &PacketBuf) -> bool {
    b.capacity() >= GRO_BUF_CAPACITY + PacketBuf::DEFAULT_HEADROOM
}

fn parse_len(f: &[u8]) -> Option<usize> {
    (f.len() >= TCP && rd16(f, 12) == 0x0800).then(|| (ETH + rd16(f, IP + 2) as usize).min(f.len()))
}

#[cfg(test)]
mod tests;
