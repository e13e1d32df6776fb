//! Layer 1 of the nicflow data plane: packet bytes.
//!
//! A frame's life in the switch is: port rx ring -> **parse** -> flow key ->
//! classifier / caches -> actions **rewrite headers** -> port tx. This crate
//! owns the two byte-touching ends of that path and nothing else:
//!
//! * [`parse::parse`] walks a frame once and records where every header lives
//!   (a [`Layout`]). Flow extraction reads fields through that layout, and the
//!   action executor rewrites through the same layout, so nothing is parsed
//!   twice per packet.
//! * [`rewrite`] changes header fields in place and patches checksums
//!   incrementally (RFC 1624) instead of recomputing them, because a set-field
//!   action must cost a few instructions, not a pass over the payload.
//! * [`buf::PacketBuf`] gives frames headroom, so pushing a VLAN tag or a
//!   tunnel header moves 12 bytes rather than the whole packet.
//! * The per-protocol modules ([`ethernet`], [`vlan`], [`arp`], [`ipv4`],
//!   [`ipv6`], [`tcp`], [`udp`], [`icmp`], [`icmpv6`], [`sctp`]) are zero-copy
//!   views in the style of smoltcp's `wire` module: `Packet::new_checked`
//!   validates lengths once, after which no accessor can panic.
//! * [`builder`] produces correct frames for tests, traffic generation and
//!   benchmarks.
//!
//! Nothing on the parse or rewrite path allocates, and no function in this
//! crate panics on malformed input; [`fuzz_parse`] exists to keep it that way.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod arp;
pub mod buf;
pub mod builder;
pub mod checksum;
pub mod ethernet;
pub mod gro;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod parse;
pub mod rewrite;
pub mod sctp;
pub mod tcp;
pub mod tunnel;
pub mod udp;
pub mod udp_gso;
pub mod vlan;

mod fuzz;

pub use buf::PacketBuf;
pub use fuzz::fuzz_parse;
pub use parse::{parse, L3Kind, L4Kind, Layout, ParseError, IS_FRAGMENT, LATER_FRAGMENT};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of RARP; parsed exactly like ARP, as Open vSwitch does.
pub const ETHERTYPE_RARP: u16 = 0x8035;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// TPID of an IEEE 802.1Q (customer) VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// TPID of an IEEE 802.1ad (service, "QinQ") VLAN tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;

/// IP protocol number of ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;
/// IP protocol number of SCTP.
pub const IPPROTO_SCTP: u8 = 132;

/// A MAC address as it appears on the wire.
pub type MacAddr = [u8; 6];

/// Why a header view refused a buffer.
///
/// Views only distinguish "not enough bytes" from "the bytes contradict
/// themselves"; the finer-grained reasons the data plane counts drops by live
/// in [`ParseError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header (or than a length field claims).
    #[error("buffer too short for header")]
    Truncated,
    /// A length or version field is inconsistent with the header format.
    #[error("malformed header")]
    Malformed,
}

/// Result type of the header views.
pub type Result<T> = core::result::Result<T, Error>;

/// Big-endian field access shared by the views.
///
/// The views call these only after `check_len`, and the parser only through the
/// `Option` forms, which is what makes "no panic after one check" hold.
pub(crate) mod bytes {
    #[inline]
    pub fn u16_at(b: &[u8], off: usize) -> u16 {
        u16::from_be_bytes([b[off], b[off + 1]])
    }

    #[inline]
    pub fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }

    #[inline]
    pub fn set_u16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_u32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn get_u8(b: &[u8], off: usize) -> Option<u8> {
        b.get(off).copied()
    }

    #[inline]
    pub fn get_u16(b: &[u8], off: usize) -> Option<u16> {
        let s = b.get(off..off.checked_add(2)?)?;
        Some(u16::from_be_bytes([s[0], s[1]]))
    }

    #[inline]
    pub fn get_array<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
        let s = b.get(off..off.checked_add(N)?)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Some(out)
    }

    /// `&b[start..end]` clamped to the buffer, so that a view whose length
    /// fields were changed by a setter degrades to short slices, not panics.
    #[inline]
    pub fn clamped(b: &[u8], start: usize, end: usize) -> &[u8] {
        let end = end.min(b.len());
        let start = start.min(end);
        &b[start..end]
    }

    #[inline]
    pub fn clamped_mut(b: &mut [u8], start: usize, end: usize) -> &mut [u8] {
        let end = end.min(b.len());
        let start = start.min(end);
        &mut b[start..end]
    }
}
