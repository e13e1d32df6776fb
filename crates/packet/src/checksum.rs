//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Checksums matter at both ends of a packet's path through the switch
//! (port rx ring -> parse -> flow key -> classifier/caches -> actions rewrite
//! headers -> port tx): builders compute them from scratch, but the action
//! executor must never re-read a payload just because it changed an address
//! or a port. Every rewrite therefore goes through [`update16`] /
//! [`update32`] / [`update_bytes`], which cost O(size of the changed field).
//!
//! Conventions used throughout:
//! * a *sum* (`u32`) is an unfolded ones'-complement accumulator, as returned
//!   by [`sum_words`] and the pseudo-header helpers; sums can be chained;
//! * [`fold`] reduces a sum to 16 bits **without** complementing it, and
//!   [`finish`] folds **and** complements, giving the value to store;
//! * a checksum "verifies" when [`checksum`] over the covered bytes (stored
//!   checksum included) returns 0.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::parse::{L3Kind, L4Kind, Layout};
use crate::{bytes, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP};

/// Adds `data`, as big-endian 16-bit words, to the running sum `initial`.
///
/// An odd trailing byte is padded with a zero low byte, as RFC 1071 requires.
/// That is only right at the very end of the covered data, so when a checksum
/// spans several slices every slice but the last must have even length.
///
/// The accumulator never overflows: 32-bit words are added into 64 bits and
/// folded back, which is congruent modulo 0xffff because 2^16 ≡ 1.
///
/// Why the words are read little-endian: the ones'-complement sum does not
/// depend on byte order (RFC 1071 §2(B)), so the data is summed as
/// little-endian words, in four independent lanes, and the folded 16 bits
/// are swapped once at the end, instead of swapping every word. On a
/// little-endian host (x86-64, aarch64) that is the data as the CPU loads
/// it, and without the per-word swap the compiler vectorises the loop (a
/// big-endian host swaps at each load instead: still correct, not faster).
/// Worth it because the checksum of every TCP segment sealed or glued by
/// an IPsec tunnel is a pass of its own over the payload (issue 34: 4-5 %
/// of the daemons' samples on each side).
pub fn sum_words(data: &[u8], initial: u32) -> u32 {
    let mut lanes = [0u64; 4];
    let mut blocks = data.chunks_exact(16);
    for b in &mut blocks {
        for (k, lane) in lanes.iter_mut().enumerate() {
            *lane += le_word(&b[4 * k..4 * k + 4]);
        }
    }
    finish_lanes(lanes, blocks.remainder(), initial)
}

/// Copies `src` into `dst` and returns [`sum_words`]`(src, initial)`: the
/// copy and the sum in one pass over `src`, each byte read once.
///
/// Why: where a payload is both copied and checksummed (a TCP segment cut
/// out of a super-frame into the ESP packet that carries it; an opened
/// segment glued onto a GRO super-frame), a separate sum is a second read
/// of every byte, and on a payload the kernel just wrote (or the
/// decryption just wrote) that read is not free (issue 34: 4-5 % of each
/// IPsec daemon's samples). Summed the same way as [`sum_words`] (four
/// little-endian lanes, swapped once), so the result is bit-for-bit
/// [`sum_words`]'s, and chains the same way.
///
/// # Panics
/// When `dst` and `src` differ in length, as `copy_from_slice` does.
pub fn copy_sum_words(dst: &mut [u8], src: &[u8], initial: u32) -> u32 {
    assert_eq!(dst.len(), src.len(), "copy_sum_words: lengths differ");
    let mut lanes = [0u64; 4];
    let mut from = src.chunks_exact(16);
    let mut to = dst.chunks_exact_mut(16);
    for (s, d) in (&mut from).zip(&mut to) {
        // One load of the block, stored and summed from the register.
        let b: [u8; 16] = s.try_into().expect("chunks_exact(16)");
        d.copy_from_slice(&b);
        for (k, lane) in lanes.iter_mut().enumerate() {
            *lane += le_word(&b[4 * k..4 * k + 4]);
        }
    }
    let rest = from.remainder();
    to.into_remainder().copy_from_slice(rest);
    finish_lanes(lanes, rest, initial)
}

#[inline(always)]
fn le_word(c: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// The end of [`sum_words`] and [`copy_sum_words`]: adds the lanes and
/// `rest` (the bytes after the last whole 16-byte block), folds, swaps back
/// to network order and adds `initial`.
#[inline(always)]
fn finish_lanes(lanes: [u64; 4], rest: &[u8], initial: u32) -> u32 {
    // Each lane gains less than 2^32 per 16 bytes, so after n bytes the
    // four lanes together, and `acc` below, stay under n * 2^30: they wrap
    // from 16 GiB (2^34 bytes) of data, far beyond any packet. Plain `+`:
    // a debug build panics there rather than return a wrong sum.
    let mut acc = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    let mut words = rest.chunks_exact(4);
    for c in &mut words {
        acc += le_word(c);
    }
    let tail = words.remainder();
    let mut i = 0;
    while i + 1 < tail.len() {
        acc += u64::from(u16::from_le_bytes([tail[i], tail[i + 1]]));
        i += 2;
    }
    if i < tail.len() {
        // The high byte of a big-endian word is the low byte here.
        acc += u64::from(tail[i]);
    }
    // Fold to 16 bits (0 only for all-zero data), back to network order.
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    let mut sum = u64::from(initial) + u64::from((acc as u16).swap_bytes());
    while sum > u64::from(u32::MAX) {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    sum as u32
}

/// Folds a running sum to 16 bits with end-around carry. Not complemented:
/// see [`finish`] for the value to store in a header.
///
/// The result is 0 only when `sum` is 0; any other multiple of 0xffff folds to
/// 0xffff (ones'-complement "negative zero").
#[inline]
pub fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Folds and complements a running sum: the checksum field value.
#[inline]
pub fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// The Internet checksum of `data`, ready to store (computed with the
/// checksum field zeroed), or 0 when verifying data that includes a correct
/// checksum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum_words(data, 0))
}

/// RFC 1624 eqn. 3 update of a stored checksum after one 16-bit word of the
/// covered data changed from `old` to `new`: `HC' = ~(~HC + ~m + m')`.
///
/// Eqn. 3 is used rather than the older RFC 1141 form `HC' = HC + m + ~m'`
/// because the latter can produce 0xffff ("negative zero") where a full
/// recomputation gives 0x0000. With eqn. 3 the result is bit-for-bit what a
/// recomputation over the new data would give, as long as that data does not
/// sum to zero — which no real header does (IPv4 has its version byte, TCP,
/// UDP and ICMPv6 their pseudo header). When `old == new` the checksum is
/// returned untouched, so a no-op rewrite is a no-op on the wire too.
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    if old == new {
        return csum;
    }
    let sum = u32::from(!csum) + u32::from(!old) + u32::from(new);
    finish(sum)
}

/// [`update16`] for an aligned 32-bit field (an IPv4 address, a TCP sequence
/// number).
#[inline]
pub fn update32(csum: u16, old: u32, new: u32) -> u16 {
    if old == new {
        return csum;
    }
    let sum = u32::from(!csum)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    finish(sum)
}

/// [`update16`] for a run of bytes (an IPv6 address, a MAC address inside an
/// ICMPv6 option).
///
/// `old` and `new` must have the same length and start at an even offset from
/// the beginning of the checksummed data; an odd length is handled as if the
/// field were followed by a zero byte, which is only right at the end of the
/// covered data. Mismatched lengths do not panic but give a meaningless result.
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    if old == new {
        return csum;
    }
    // Σ~m ≡ ~Σm in ones'-complement arithmetic.
    let neg_old = u32::from(!fold(sum_words(old, 0)));
    let sum = sum_words(new, u32::from(!csum) + neg_old);
    finish(sum)
}

/// Running sum of the IPv4 pseudo header (RFC 793 / 768) for an L4 segment of
/// `len` bytes carrying protocol `proto`.
#[inline]
pub fn pseudo_header_ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> u32 {
    let s = src.octets();
    let d = dst.octets();
    u32::from(u16::from_be_bytes([s[0], s[1]]))
        + u32::from(u16::from_be_bytes([s[2], s[3]]))
        + u32::from(u16::from_be_bytes([d[0], d[1]]))
        + u32::from(u16::from_be_bytes([d[2], d[3]]))
        + u32::from(proto)
        + u32::from(len)
}

/// Running sum of the IPv6 pseudo header (RFC 8200 §8.1) for an upper-layer
/// packet of `len` bytes with next header `next_header`.
#[inline]
pub fn pseudo_header_ipv6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let s = sum_words(&src.octets(), 0);
    let s = sum_words(&dst.octets(), s);
    // Fold before adding so the total cannot overflow u32.
    u32::from(fold(s)) + (len >> 16) + (len & 0xffff) + u32::from(next_header)
}

/// Checksum of a TCP/UDP segment over IPv4, pseudo header included.
///
/// With the segment's checksum field zeroed this is the value to store (UDP
/// callers must map 0 to 0xffff, see [`udp_fixup`]); over a segment holding a
/// correct checksum it is 0.
pub fn l4_checksum_ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, segment: &[u8]) -> u16 {
    let len = segment.len().min(usize::from(u16::MAX)) as u16;
    finish(sum_words(segment, pseudo_header_ipv4(src, dst, proto, len)))
}

/// Checksum of a TCP/UDP/ICMPv6 packet over IPv6, pseudo header included.
/// Same conventions as [`l4_checksum_ipv4`].
pub fn l4_checksum_ipv6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, segment: &[u8]) -> u16 {
    let len = segment.len().min(u32::MAX as usize) as u32;
    finish(sum_words(
        segment,
        pseudo_header_ipv6(src, dst, next_header, len),
    ))
}

/// UDP reserves a transmitted checksum of 0 for "no checksum", so a computed
/// 0 is sent as 0xffff (its ones'-complement twin).
#[inline]
pub fn udp_fixup(csum: u16) -> u16 {
    if csum == 0 {
        0xffff
    } else {
        csum
    }
}

/// Does the IPv4 header described by `layout` carry a correct header
/// checksum? `None` if the frame is not IPv4 or does not match the layout.
pub fn verify_ipv4_header(frame: &[u8], layout: &Layout) -> Option<bool> {
    if layout.l3 != L3Kind::Ipv4 {
        return None;
    }
    let hdr = frame.get(usize::from(layout.l3_offset)..usize::from(layout.l4_offset))?;
    if hdr.len() < 20 {
        return None;
    }
    Some(checksum(hdr) == 0)
}

/// Does the TCP/UDP/ICMP/ICMPv6 checksum of the frame verify?
///
/// `None` when it cannot be decided from this frame alone: not one of those
/// protocols, any IP fragment (the checksum covers the whole datagram), an
/// IPv6 routing header with segments left (the pseudo header uses the final
/// destination, which this crate does not resolve), or a frame that does not
/// match the layout. A UDP checksum of 0 ("none") counts as `Some(true)` over
/// IPv4; over IPv6 it is `Some(false)` (RFC 8200 makes it mandatory).
pub fn verify_l4(frame: &[u8], layout: &Layout) -> Option<bool> {
    if layout.is_fragment() {
        return None;
    }
    let l3 = usize::from(layout.l3_offset);
    let l4 = usize::from(layout.l4_offset);
    let seg = frame.get(l4..l4.checked_add(usize::from(layout.l4_len))?)?;
    let proto = match layout.l4 {
        L4Kind::Tcp => IPPROTO_TCP,
        L4Kind::Udp => IPPROTO_UDP,
        L4Kind::Icmpv6 => IPPROTO_ICMPV6,
        L4Kind::Icmp => return Some(checksum(seg) == 0),
        _ => return None,
    };
    let seg = if proto == IPPROTO_UDP {
        if bytes::get_u16(seg, 6)? == 0 {
            return Some(layout.l3 == L3Kind::Ipv4);
        }
        // The UDP length, not the IP payload, delimits what is covered.
        seg.get(..usize::from(bytes::get_u16(seg, 4)?))?
    } else {
        seg
    };
    match layout.l3 {
        L3Kind::Ipv4 => {
            let src = Ipv4Addr::from(bytes::get_array::<4>(frame, l3 + 12)?);
            let dst = Ipv4Addr::from(bytes::get_array::<4>(frame, l3 + 16)?);
            Some(l4_checksum_ipv4(src, dst, proto, seg) == 0)
        }
        L3Kind::Ipv6 => {
            if crate::ipv6::routing_segments_left(frame, layout)? != 0 {
                return None;
            }
            let src = Ipv6Addr::from(bytes::get_array::<16>(frame, l3 + 8)?);
            let dst = Ipv6Addr::from(bytes::get_array::<16>(frame, l3 + 24)?);
            Some(l4_checksum_ipv6(src, dst, proto, seg) == 0)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straight RFC 1071 reference, 16 bits at a time.
    fn reference(data: &[u8]) -> u16 {
        let mut sum: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            sum += u64::from(w);
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_words(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn known_ipv4_header() {
        // Wikipedia's IPv4 header checksum example.
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
        hdr[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(&hdr), 0);
    }

    #[test]
    fn odd_lengths_match_reference() {
        for len in 0..70 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(checksum(&data), reference(&data), "len {len}");
        }
    }

    /// The little-endian lanes give what a sum of big-endian words gives
    /// (modulo 0xffff, and folded) for every length from 0 to 199 and a few
    /// segment-sized ones (1448, 1449, 1500, 2999), at three alignments,
    /// with each of three initial sums (0, a random one, `u32::MAX`),
    /// whole and chained over an even split; 0 only for all-zero data
    /// with no initial sum.
    #[test]
    fn sum_words_matches_the_big_endian_sum() {
        fn be_sum(data: &[u8], initial: u32) -> u64 {
            let mut acc = u64::from(initial);
            for c in data.chunks(2) {
                acc += u64::from(c[0]) << 8 | c.get(1).map_or(0, |&b| u64::from(b));
            }
            acc
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let buf: Vec<u8> = (0..3004).map(|_| next() as u8).collect();
        for len in (0..200).chain([1448, 1449, 1500, 2999]) {
            for (off, init) in (0..3).flat_map(|o| [(o, 0), (o, next() as u32), (o, u32::MAX)]) {
                let d = &buf[off..off + len];
                let s = sum_words(d, init);
                assert_eq!(
                    u64::from(s) % 0xffff,
                    be_sum(d, init) % 0xffff,
                    "len {len} off {off} init {init:#x}"
                );
                assert_eq!(
                    fold(s),
                    {
                        let mut v = be_sum(d, init);
                        while v > 0xffff {
                            v = (v & 0xffff) + (v >> 16);
                        }
                        v as u16
                    },
                    "len {len} off {off} init {init:#x}"
                );
                // Chained over an even split.
                let cut = (len / 2) & !1;
                assert_eq!(
                    fold(sum_words(&d[cut..], sum_words(&d[..cut], init))),
                    fold(s),
                    "len {len} off {off} init {init:#x}"
                );
            }
        }
        assert_eq!(sum_words(&[0; 100], 0), 0);
        assert_eq!(fold(sum_words(&[0xff; 64], 0)), 0xffff);
    }

    /// The copy-and-sum gives [`sum_words`]'s sum bit for bit and an exact
    /// copy, for every length 0-199 and the segment sizes (1448, 1449,
    /// 1500, 2999), at four source and three destination alignments, with
    /// the initial sums 0, random and `u32::MAX`, whole and chained over
    /// an even split (as a header's sum chains onto a payload's); the
    /// bytes around the destination are left alone.
    #[test]
    fn copy_sum_words_is_a_copy_and_sum_words() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let buf: Vec<u8> = (0..3008).map(|_| next() as u8).collect();
        let mut out = vec![0u8; 3012];
        for len in (0..200).chain([1448, 1449, 1500, 2999]) {
            for src_off in 0..4 {
                for dst_off in [0, 1, 3] {
                    for init in [0, next() as u32, u32::MAX] {
                        let src = &buf[src_off..src_off + len];
                        out.fill(0x5a);
                        let got = copy_sum_words(&mut out[dst_off..dst_off + len], src, init);
                        let what = format!("len {len} src {src_off} dst {dst_off} init {init:#x}");
                        assert_eq!(got, sum_words(src, init), "{what}");
                        assert_eq!(&out[dst_off..dst_off + len], src, "{what}");
                        assert!(out[..dst_off].iter().all(|&b| b == 0x5a), "{what}");
                        assert!(out[dst_off + len..].iter().all(|&b| b == 0x5a), "{what}");
                        // Chained: an even first part, then the rest.
                        let cut = (len / 3) & !1;
                        let first = copy_sum_words(&mut out[..cut], &src[..cut], init);
                        let both = copy_sum_words(&mut out[cut..len], &src[cut..], first);
                        assert_eq!(fold(both), fold(sum_words(src, init)), "{what} chained");
                        assert_eq!(&out[..len], src, "{what} chained");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn copy_sum_words_refuses_different_lengths() {
        copy_sum_words(&mut [0; 3], &[1, 2], 0);
    }

    #[test]
    fn large_buffers_do_not_overflow() {
        let data = vec![0xffu8; 1 << 20];
        assert_eq!(checksum(&data), reference(&data));
        assert_eq!(sum_words(&data, u32::MAX) as u64 % 0xffff, {
            // u32::MAX ≡ 0 mod 0xffff, all-ones data ≡ 0 too.
            0
        });
    }

    #[test]
    fn fold_and_finish() {
        assert_eq!(fold(0), 0);
        assert_eq!(fold(0xffff), 0xffff);
        assert_eq!(fold(0x1_fffe), 0xffff);
        assert_eq!(fold(u32::MAX), 0xffff);
        assert_eq!(finish(0x1234), !0x1234);
    }

    #[test]
    fn update16_rfc1624_corner_case() {
        // RFC 1624's worked example: the other header words sum to 0xcd7a,
        // so HC = 0xdd2f; m = 0x5555 becomes m' = 0x3285. Recomputation
        // gives 0x0000, eqn. 3 agrees, the RFC 1141 form would give 0xffff.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
        assert_eq!(update16(0xdd2f, 0x5555, 0x5555), 0xdd2f);
    }

    #[test]
    fn rfc1141_form_would_be_wrong_here() {
        let hc: u16 = 0xdd2f;
        let rfc1141 = fold(u32::from(hc) + 0x5555 + u32::from(!0x3285u16));
        assert_eq!(rfc1141, 0xffff);
        assert_eq!(checksum(&[0xcd, 0x7a, 0x32, 0x85]), 0x0000);
    }

    #[test]
    fn update_matches_recompute() {
        let mut data: Vec<u8> = (0..40u8)
            .map(|i| i.wrapping_mul(71).wrapping_add(3))
            .collect();
        let c0 = checksum(&data);
        let old16 = u16::from_be_bytes([data[6], data[7]]);
        data[6..8].copy_from_slice(&0xbeefu16.to_be_bytes());
        let c1 = update16(c0, old16, 0xbeef);
        assert_eq!(c1, checksum(&data));
        let old32 = u32::from_be_bytes([data[12], data[13], data[14], data[15]]);
        data[12..16].copy_from_slice(&0xdead_f00du32.to_be_bytes());
        let c2 = update32(c1, old32, 0xdead_f00d);
        assert_eq!(c2, checksum(&data));
        let old: [u8; 16] = data[20..36].try_into().unwrap();
        let new = [0xa5u8; 16];
        data[20..36].copy_from_slice(&new);
        assert_eq!(update_bytes(c2, &old, &new), checksum(&data));
    }

    #[test]
    fn pseudo_header_v6_matches_bytes() {
        let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst: Ipv6Addr = "fe80::ffff:1".parse().unwrap();
        let mut ph = Vec::new();
        ph.extend_from_slice(&src.octets());
        ph.extend_from_slice(&dst.octets());
        ph.extend_from_slice(&0x0001_0004u32.to_be_bytes());
        ph.extend_from_slice(&[0, 0, 0, 17]);
        assert_eq!(
            fold(pseudo_header_ipv6(src, dst, 17, 0x0001_0004)),
            fold(sum_words(&ph, 0))
        );
    }

    #[test]
    fn udp_zero_maps_to_ffff() {
        assert_eq!(udp_fixup(0), 0xffff);
        assert_eq!(udp_fixup(7), 7);
    }
}
