//! Frame builder for tests, traffic generation and benchmarks.
//!
//! The data plane itself never builds frames from scratch (port rx ring ->
//! parse -> flow key -> classifier/caches -> actions -> port tx only edits
//! what it received), but every test, benchmark and traffic generator needs
//! frames whose lengths and checksums are right, or it ends up testing the
//! parser's error paths by accident. [`FrameBuilder`] assembles Ethernet,
//! up to any number of VLAN tags, ARP / IPv4 (with options, fragment fields) /
//! IPv6 (with extension headers), and TCP / UDP / ICMP / ICMPv6 / SCTP, and
//! fills every length and checksum.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use nicflow_packet::builder::FrameBuilder;
//!
//! let frame = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
//!     .vlan(100)
//!     .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
//!     .ttl(64)
//!     .udp(1234, 53)
//!     .payload(b"query")
//!     .build();
//! let layout = nicflow_packet::parse(&frame).unwrap();
//! assert_eq!(layout.n_vlan, 1);
//! ```
//!
//! Options apply regardless of the order they are given in (`.ttl()` before
//! or after `.ipv4()`). The builder does not fragment: the fragment options
//! only set header fields, and the L4 checksum covers what is present. Later
//! fragments should use [`FrameBuilder::raw_l4`] so no transport header is
//! emitted.
//!
//! # Panics
//! [`FrameBuilder::build`] panics if the result exceeds the IPv4/IPv6/UDP
//! length fields (64 KiB), which is a bug in the test using it.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::buf::PacketBuf;
use crate::{
    arp, checksum, icmp, icmpv6, ipv4, ipv6, sctp, tcp, udp, MacAddr, ETHERTYPE_ARP,
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP,
    IPPROTO_TCP, IPPROTO_UDP,
};

#[derive(Debug, Clone)]
enum L3 {
    None,
    Ipv4(Ipv4Addr, Ipv4Addr),
    Ipv6(Ipv6Addr, Ipv6Addr),
    Arp {
        op: u16,
        sha: MacAddr,
        spa: Ipv4Addr,
        tha: MacAddr,
        tpa: Ipv4Addr,
    },
}

#[derive(Debug, Clone)]
enum L4 {
    None,
    Tcp { sport: u16, dport: u16, flags: u16 },
    Udp { sport: u16, dport: u16 },
    Icmp { ty: u8, code: u8 },
    Icmpv6 { ty: u8, code: u8 },
    Sctp { sport: u16, dport: u16 },
    Raw(u8),
}

#[derive(Debug, Clone)]
enum Ext {
    HopByHop(u8),
    DestOpts(u8),
    Routing(u8),
    Auth(u8),
    Fragment { offset: u16, more: bool, ident: u32 },
}

impl Ext {
    fn kind(&self) -> u8 {
        match self {
            Ext::HopByHop(_) => ipv6::NEXT_HOP_BY_HOP,
            Ext::DestOpts(_) => ipv6::NEXT_DEST_OPTS,
            Ext::Routing(_) => ipv6::NEXT_ROUTING,
            Ext::Auth(_) => ipv6::NEXT_AUTH,
            Ext::Fragment { .. } => ipv6::NEXT_FRAGMENT,
        }
    }

    fn write(&self, next: u8, out: &mut Vec<u8>) {
        let start = out.len();
        match *self {
            Ext::HopByHop(len) | Ext::DestOpts(len) => {
                let total = (usize::from(len) + 1) * 8;
                out.extend_from_slice(&[next, len]);
                // Pad1 / PadN options fill the rest (RFC 8200 §4.2); PadN
                // carries at most 255 bytes, so long headers need several.
                let mut left = total - 2;
                while left > 0 {
                    if left == 1 {
                        out.push(0);
                        left = 0;
                    } else {
                        let n = left.min(257);
                        out.extend_from_slice(&[1, (n - 2) as u8]);
                        out.resize(out.len() + n - 2, 0);
                        left -= n;
                    }
                }
                debug_assert_eq!(out.len(), start + total);
            }
            Ext::Routing(len) => {
                // Segment routing header (type 4) with segments left 0: the
                // IPv6 destination is final, so checksums use it.
                let total = (usize::from(len) + 1) * 8;
                out.extend_from_slice(&[next, len, 4, 0]);
                out.resize(start + total, 0);
            }
            Ext::Auth(len) => {
                let total = (usize::from(len) + 2) * 4;
                out.extend_from_slice(&[next, len]);
                out.resize(start + total.max(2), 0);
            }
            Ext::Fragment {
                offset,
                more,
                ident,
            } => {
                out.extend_from_slice(&[next, 0]);
                out.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
                out.extend_from_slice(&ident.to_be_bytes());
            }
        }
    }
}

/// Builds one frame; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct FrameBuilder {
    src: MacAddr,
    dst: MacAddr,
    vlans: Vec<(u16, u16)>,
    ethertype: Option<u16>,
    l3: L3,
    ttl: u8,
    tos: u8,
    ident: u16,
    dont_frag: bool,
    frag_offset: u16,
    more_frags: bool,
    ipv4_options: Vec<u8>,
    flow_label: u32,
    exts: Vec<Ext>,
    l4: L4,
    tcp_seq: u32,
    tcp_ack: u32,
    tcp_window: u16,
    tcp_options: Vec<u8>,
    udp_checksum: bool,
    icmp_rest: [u8; 4],
    sctp_vtag: u32,
    payload: Vec<u8>,
    pad_to: usize,
}

impl FrameBuilder {
    /// Starts a frame from `src_mac` to `dst_mac`. Defaults: no tags, no L3,
    /// TTL 64, TOS 0, TCP window 65535, UDP checksum on.
    pub fn new(src_mac: MacAddr, dst_mac: MacAddr) -> Self {
        FrameBuilder {
            src: src_mac,
            dst: dst_mac,
            vlans: Vec::new(),
            ethertype: None,
            l3: L3::None,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: false,
            frag_offset: 0,
            more_frags: false,
            ipv4_options: Vec::new(),
            flow_label: 0,
            exts: Vec::new(),
            l4: L4::None,
            tcp_seq: 0,
            tcp_ack: 0,
            tcp_window: 65535,
            tcp_options: Vec::new(),
            udp_checksum: true,
            icmp_rest: [0; 4],
            sctp_vtag: 0,
            payload: Vec::new(),
            pad_to: 0,
        }
    }

    /// Adds an 802.1Q tag (TPID 0x8100). Tags appear on the wire in call
    /// order: the first call is the outermost tag.
    pub fn vlan(self, tci: u16) -> Self {
        self.vlan_tpid(ETHERTYPE_VLAN, tci)
    }

    /// Adds a tag with an explicit TPID (e.g. 0x88a8 for an 802.1ad S-tag).
    pub fn vlan_tpid(mut self, tpid: u16, tci: u16) -> Self {
        self.vlans.push((tpid, tci));
        self
    }

    /// Uses a raw EtherType with no L3 header; the payload follows the tags.
    /// Also overrides the EtherType of an IP/ARP frame (to build bad frames).
    pub fn ethertype(mut self, ethertype: u16) -> Self {
        self.ethertype = Some(ethertype);
        self
    }

    /// IPv4 from `src` to `dst`.
    pub fn ipv4(mut self, src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        self.l3 = L3::Ipv4(src, dst);
        self
    }

    /// IPv6 from `src` to `dst`.
    pub fn ipv6(mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Self {
        self.l3 = L3::Ipv6(src, dst);
        self
    }

    /// Ethernet/IPv4 ARP; the payload, if any, is appended as trailer.
    pub fn arp(
        mut self,
        op: u16,
        sha: MacAddr,
        spa: Ipv4Addr,
        tha: MacAddr,
        tpa: Ipv4Addr,
    ) -> Self {
        self.l3 = L3::Arp {
            op,
            sha,
            spa,
            tha,
            tpa,
        };
        self
    }

    /// IPv4 TTL or IPv6 hop limit.
    pub fn ttl(mut self, ttl: u8) -> Self {
        self.ttl = ttl;
        self
    }

    /// IPv4 TOS byte or IPv6 traffic class.
    pub fn tos(mut self, tos: u8) -> Self {
        self.tos = tos;
        self
    }

    /// IPv4 identification.
    pub fn ident(mut self, ident: u16) -> Self {
        self.ident = ident;
        self
    }

    /// Sets the IPv4 DF flag.
    pub fn dont_fragment(mut self) -> Self {
        self.dont_frag = true;
        self
    }

    /// IPv4 fragment fields: offset in 8-byte units, MF flag.
    pub fn ipv4_fragment(mut self, offset_units: u16, more: bool) -> Self {
        self.frag_offset = offset_units & ipv4::FRAG_OFFSET_MASK;
        self.more_frags = more;
        self
    }

    /// IPv4 options, zero-padded (EOL) to a multiple of 4 bytes; at most 40.
    pub fn ipv4_options(mut self, options: &[u8]) -> Self {
        self.ipv4_options = options.to_vec();
        let padded = options.len().div_ceil(4) * 4;
        self.ipv4_options.resize(padded.min(40), 0);
        self
    }

    /// IPv6 flow label (20 bits).
    pub fn flow_label(mut self, label: u32) -> Self {
        self.flow_label = label & 0x000f_ffff;
        self
    }

    /// Appends a hop-by-hop options header of `(len + 1) * 8` bytes
    /// (padding only).
    pub fn ipv6_hop_by_hop(mut self, len: u8) -> Self {
        self.exts.push(Ext::HopByHop(len));
        self
    }

    /// Appends a destination options header of `(len + 1) * 8` bytes.
    pub fn ipv6_dest_opts(mut self, len: u8) -> Self {
        self.exts.push(Ext::DestOpts(len));
        self
    }

    /// Appends a routing header (segment routing, segments left 0) of
    /// `(len + 1) * 8` bytes.
    pub fn ipv6_routing(mut self, len: u8) -> Self {
        self.exts.push(Ext::Routing(len));
        self
    }

    /// Appends an authentication header of `(len + 2) * 4` bytes (zero SPI
    /// and ICV; only the length matters to the parser).
    pub fn ipv6_auth(mut self, len: u8) -> Self {
        self.exts.push(Ext::Auth(len));
        self
    }

    /// Appends a fragment header: offset in 8-byte units, M flag, ident.
    pub fn ipv6_fragment(mut self, offset_units: u16, more: bool, ident: u32) -> Self {
        self.exts.push(Ext::Fragment {
            offset: offset_units & 0x1fff,
            more,
            ident,
        });
        self
    }

    /// TCP with the given flags ([`crate::tcp::FLAG_SYN`] etc.).
    pub fn tcp(mut self, sport: u16, dport: u16, flags: u16) -> Self {
        self.l4 = L4::Tcp {
            sport,
            dport,
            flags,
        };
        self
    }

    /// TCP sequence number.
    pub fn tcp_seq(mut self, seq: u32) -> Self {
        self.tcp_seq = seq;
        self
    }

    /// TCP acknowledgement number.
    pub fn tcp_ack(mut self, ack: u32) -> Self {
        self.tcp_ack = ack;
        self
    }

    /// TCP window.
    pub fn tcp_window(mut self, window: u16) -> Self {
        self.tcp_window = window;
        self
    }

    /// TCP options, zero-padded to a multiple of 4 bytes; at most 40.
    pub fn tcp_options(mut self, options: &[u8]) -> Self {
        self.tcp_options = options.to_vec();
        let padded = options.len().div_ceil(4) * 4;
        self.tcp_options.resize(padded.min(40), 0);
        self
    }

    /// UDP.
    pub fn udp(mut self, sport: u16, dport: u16) -> Self {
        self.l4 = L4::Udp { sport, dport };
        self
    }

    /// Leaves the UDP checksum 0 ("none"; meaningful over IPv4 only).
    pub fn no_udp_checksum(mut self) -> Self {
        self.udp_checksum = false;
        self
    }

    /// ICMP (for IPv4) message `ty` / `code` with an 8-byte header; the
    /// payload follows the rest-of-header.
    pub fn icmp(mut self, ty: u8, code: u8) -> Self {
        self.l4 = L4::Icmp { ty, code };
        self
    }

    /// ICMPv6 message `ty` / `code` with an 8-byte header.
    pub fn icmpv6(mut self, ty: u8, code: u8) -> Self {
        self.l4 = L4::Icmpv6 { ty, code };
        self
    }

    /// ICMP/ICMPv6 echo identifier and sequence number (the rest-of-header).
    pub fn echo(mut self, ident: u16, seq: u16) -> Self {
        self.icmp_rest[..2].copy_from_slice(&ident.to_be_bytes());
        self.icmp_rest[2..].copy_from_slice(&seq.to_be_bytes());
        self
    }

    /// Raw ICMP/ICMPv6 rest-of-header bytes.
    pub fn icmp_rest(mut self, rest: [u8; 4]) -> Self {
        self.icmp_rest = rest;
        self
    }

    /// SCTP common header (CRC32c filled); the payload is the chunks.
    pub fn sctp(mut self, sport: u16, dport: u16) -> Self {
        self.l4 = L4::Sctp { sport, dport };
        self
    }

    /// SCTP verification tag.
    pub fn sctp_vtag(mut self, vtag: u32) -> Self {
        self.sctp_vtag = vtag;
        self
    }

    /// No transport header: the IP payload is the payload, with protocol /
    /// next header `proto`. Use for later fragments and unknown protocols.
    pub fn raw_l4(mut self, proto: u8) -> Self {
        self.l4 = L4::Raw(proto);
        self
    }

    /// Application payload (or the L3 payload when there is no L4).
    pub fn payload(mut self, payload: &[u8]) -> Self {
        self.payload = payload.to_vec();
        self
    }

    /// Pads the finished frame with zeros to at least `len` bytes (60 is the
    /// Ethernet minimum without FCS); the padding is not counted in any
    /// length field.
    pub fn pad_to(mut self, len: usize) -> Self {
        self.pad_to = len;
        self
    }

    fn l4_proto(&self) -> Option<u8> {
        match self.l4 {
            L4::None => None,
            L4::Tcp { .. } => Some(IPPROTO_TCP),
            L4::Udp { .. } => Some(IPPROTO_UDP),
            L4::Icmp { .. } => Some(IPPROTO_ICMP),
            L4::Icmpv6 { .. } => Some(IPPROTO_ICMPV6),
            L4::Sctp { .. } => Some(IPPROTO_SCTP),
            L4::Raw(p) => Some(p),
        }
    }

    /// Transport header + payload with checksum, given the IP addresses.
    fn segment(&self, l3: &L3) -> Vec<u8> {
        let mut seg = Vec::new();
        match self.l4 {
            L4::None | L4::Raw(_) => seg.extend_from_slice(&self.payload),
            L4::Tcp {
                sport,
                dport,
                flags,
            } => {
                let hl = tcp::HEADER_LEN + self.tcp_options.len();
                seg.resize(hl, 0);
                seg.extend_from_slice(&self.payload);
                let mut p = tcp::Packet::new_unchecked(&mut seg[..]);
                p.set_src_port(sport);
                p.set_dst_port(dport);
                p.set_seq_number(self.tcp_seq);
                p.set_ack_number(self.tcp_ack);
                p.set_header_len_and_flags(hl as u8, flags);
                p.set_window(self.tcp_window);
                p.options_mut().copy_from_slice(&self.tcp_options);
                match *l3 {
                    L3::Ipv4(s, d) => p.fill_checksum_ipv4(s, d),
                    L3::Ipv6(s, d) => p.fill_checksum_ipv6(s, d),
                    _ => {}
                }
            }
            L4::Udp { sport, dport } => {
                let len = udp::HEADER_LEN + self.payload.len();
                let len16 = u16::try_from(len).expect("UDP datagram longer than 65535 bytes");
                seg.resize(udp::HEADER_LEN, 0);
                seg.extend_from_slice(&self.payload);
                let mut p = udp::Packet::new_unchecked(&mut seg[..]);
                p.set_src_port(sport);
                p.set_dst_port(dport);
                p.set_len(len16);
                if self.udp_checksum {
                    match *l3 {
                        L3::Ipv4(s, d) => p.fill_checksum_ipv4(s, d),
                        L3::Ipv6(s, d) => p.fill_checksum_ipv6(s, d),
                        _ => {}
                    }
                }
            }
            L4::Icmp { ty, code } | L4::Icmpv6 { ty, code } => {
                seg.extend_from_slice(&[ty, code, 0, 0]);
                seg.extend_from_slice(&self.icmp_rest);
                seg.extend_from_slice(&self.payload);
                match (&self.l4, l3) {
                    (L4::Icmpv6 { .. }, L3::Ipv6(s, d)) => {
                        icmpv6::Packet::new_unchecked(&mut seg[..]).fill_checksum(*s, *d)
                    }
                    _ => icmp::Packet::new_unchecked(&mut seg[..]).fill_checksum(),
                }
            }
            L4::Sctp { sport, dport } => {
                seg.resize(sctp::HEADER_LEN, 0);
                seg.extend_from_slice(&self.payload);
                let mut p = sctp::Packet::new_unchecked(&mut seg[..]);
                p.set_src_port(sport);
                p.set_dst_port(dport);
                p.set_verification_tag(self.sctp_vtag);
                p.fill_checksum();
            }
        }
        seg
    }

    /// Assembles the frame.
    pub fn build(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(64 + self.payload.len());
        f.extend_from_slice(&self.dst);
        f.extend_from_slice(&self.src);
        for &(tpid, tci) in &self.vlans {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        let natural = match self.l3 {
            L3::None => 0x88b5, // IEEE local experimental
            L3::Ipv4(..) => ETHERTYPE_IPV4,
            L3::Ipv6(..) => ETHERTYPE_IPV6,
            L3::Arp { .. } => ETHERTYPE_ARP,
        };
        f.extend_from_slice(&self.ethertype.unwrap_or(natural).to_be_bytes());

        match self.l3 {
            L3::None => f.extend_from_slice(&self.payload),
            L3::Arp {
                op,
                sha,
                spa,
                tha,
                tpa,
            } => {
                let start = f.len();
                f.resize(start + arp::HEADER_LEN, 0);
                let mut p = arp::Packet::new_unchecked(&mut f[start..]);
                p.set_eth_ipv4_format();
                p.set_operation(op);
                p.set_sha(sha);
                p.set_spa(spa);
                p.set_tha(tha);
                p.set_tpa(tpa);
                f.extend_from_slice(&self.payload);
            }
            L3::Ipv4(src, dst) => {
                let seg = self.segment(&self.l3);
                let hl = ipv4::HEADER_LEN + self.ipv4_options.len();
                let total =
                    u16::try_from(hl + seg.len()).expect("IPv4 datagram longer than 65535 bytes");
                let start = f.len();
                f.resize(start + hl, 0);
                let mut p = ipv4::Packet::new_unchecked(&mut f[start..]);
                p.set_version_and_header_len(4, hl as u8);
                p.set_tos(self.tos);
                p.set_total_len(total);
                p.set_ident(self.ident);
                let mut ff = self.frag_offset;
                if self.dont_frag {
                    ff |= ipv4::FLAG_DF;
                }
                if self.more_frags {
                    ff |= ipv4::FLAG_MF;
                }
                p.set_flags_frag(ff);
                p.set_ttl(self.ttl);
                p.set_protocol(self.l4_proto().unwrap_or(ipv6::NEXT_NONE));
                p.set_src_addr(src);
                p.set_dst_addr(dst);
                p.options_mut().copy_from_slice(&self.ipv4_options);
                p.fill_checksum();
                f.extend_from_slice(&seg);
            }
            L3::Ipv6(src, dst) => {
                let seg = self.segment(&self.l3);
                let mut exts = Vec::new();
                for (i, e) in self.exts.iter().enumerate() {
                    let next = match self.exts.get(i + 1) {
                        Some(n) => n.kind(),
                        None => self.l4_proto().unwrap_or(ipv6::NEXT_NONE),
                    };
                    e.write(next, &mut exts);
                }
                let first = match self.exts.first() {
                    Some(e) => e.kind(),
                    None => self.l4_proto().unwrap_or(ipv6::NEXT_NONE),
                };
                let plen = u16::try_from(exts.len() + seg.len())
                    .expect("IPv6 payload longer than 65535 bytes");
                let start = f.len();
                f.resize(start + ipv6::HEADER_LEN, 0);
                let mut p = ipv6::Packet::new_unchecked(&mut f[start..]);
                p.set_version(6);
                p.set_traffic_class(self.tos);
                p.set_flow_label(self.flow_label);
                p.set_payload_len(plen);
                p.set_next_header(first);
                p.set_hop_limit(self.ttl);
                p.set_src_addr(src);
                p.set_dst_addr(dst);
                f.extend_from_slice(&exts);
                f.extend_from_slice(&seg);
            }
        }
        if f.len() < self.pad_to {
            f.resize(self.pad_to, 0);
        }
        f
    }

    /// Assembles the frame into a [`PacketBuf`] with default headroom.
    pub fn build_buf(&self) -> PacketBuf {
        PacketBuf::from_slice(&self.build())
    }
}

/// Convenience: the IPv4 checksum helpers expect addresses, not frames; this
/// recomputes every checksum of a built frame from scratch and reports
/// whether they all verify. Intended for tests of code that edits frames.
pub fn all_checksums_valid(frame: &[u8]) -> bool {
    let Ok(l) = crate::parse(frame) else {
        return false;
    };
    checksum::verify_ipv4_header(frame, &l) != Some(false)
        && checksum::verify_l4(frame, &l) != Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse, L3Kind, L4Kind, IS_FRAGMENT, LATER_FRAGMENT};
    use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

    const A: MacAddr = [2, 0, 0, 0, 0, 1];
    const B: MacAddr = [2, 0, 0, 0, 0, 2];

    #[test]
    fn ipv4_udp_matches_etherparse_bytes() {
        let ours = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
            .ttl(20)
            .dont_fragment()
            .udp(1234, 53)
            .payload(b"hello")
            .build();
        let mut theirs = Vec::new();
        PacketBuilder::ethernet2(A, B)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 20)
            .udp(1234, 53)
            .write(&mut theirs, b"hello")
            .unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn ipv6_tcp_matches_etherparse_bytes() {
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let ours = FrameBuilder::new(A, B)
            .vlan(0x2064)
            .ipv6(s, d)
            .ttl(33)
            .tcp(443, 50000, tcp::FLAG_ACK | tcp::FLAG_PSH)
            .tcp_seq(7)
            .tcp_ack(9)
            .tcp_window(1000)
            .payload(b"data")
            .build();
        let mut theirs = Vec::new();
        PacketBuilder::ethernet2(A, B)
            .single_vlan(etherparse::VlanId::try_new(0x064).unwrap())
            .ipv6(s.octets(), d.octets(), 33)
            .tcp(443, 50000, 7, 1000)
            .ack(9)
            .psh()
            .write(&mut theirs, b"data")
            .unwrap();
        // etherparse's single_vlan writes PCP 0; patch ours for comparison.
        let mut ours_pcp0 = ours.clone();
        ours_pcp0[14] &= 0x1f;
        assert_eq!(ours_pcp0, theirs);
    }

    #[test]
    fn icmp_echo_matches_etherparse() {
        let ours = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(8, 8, 8, 8))
            .dont_fragment()
            .icmp(icmp::TYPE_ECHO_REQUEST, 0)
            .echo(0x77, 3)
            .payload(b"ping")
            .build();
        let mut theirs = Vec::new();
        PacketBuilder::ethernet2(A, B)
            .ipv4([1, 1, 1, 1], [8, 8, 8, 8], 64)
            .icmpv4_echo_request(0x77, 3)
            .write(&mut theirs, b"ping")
            .unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn icmpv6_echo_matches_etherparse() {
        let s: Ipv6Addr = "fe80::1".parse().unwrap();
        let d: Ipv6Addr = "fe80::2".parse().unwrap();
        let ours = FrameBuilder::new(A, B)
            .ipv6(s, d)
            .icmpv6(icmpv6::TYPE_ECHO_REPLY, 0)
            .echo(1, 2)
            .payload(b"pong")
            .build();
        let mut theirs = Vec::new();
        PacketBuilder::ethernet2(A, B)
            .ipv6(s.octets(), d.octets(), 64)
            .icmpv6_echo_reply(1, 2)
            .write(&mut theirs, b"pong")
            .unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn arp_frame() {
        let f = FrameBuilder::new(A, crate::ethernet::BROADCAST)
            .arp(
                arp::OP_REQUEST,
                A,
                Ipv4Addr::new(10, 0, 0, 1),
                [0; 6],
                Ipv4Addr::new(10, 0, 0, 2),
            )
            .pad_to(60)
            .build();
        assert_eq!(f.len(), 60);
        let l = parse(&f).unwrap();
        assert_eq!(l.l3, L3Kind::Arp);
        let e = SlicedPacket::from_ethernet(&f).unwrap();
        match e.net {
            Some(NetSlice::Arp(a)) => {
                assert_eq!(a.operation().0, 1);
                assert_eq!(a.target_protocol_addr(), &[10, 0, 0, 2]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let f = FrameBuilder::new(A, B)
            .ipv6(s, d)
            .ipv6_hop_by_hop(0)
            .ipv6_dest_opts(2)
            .ipv6_routing(1)
            .ipv6_auth(4)
            .udp(1, 2)
            .payload(b"x")
            .build();
        let l = parse(&f).unwrap();
        assert_eq!(l.l4, L4Kind::Udp);
        assert_eq!(usize::from(l.l4_offset), 14 + 40 + 8 + 24 + 16 + 24);
        assert!(all_checksums_valid(&f));
        let e = SlicedPacket::from_ethernet(&f).unwrap();
        match e.transport {
            Some(TransportSlice::Udp(u)) => assert_eq!(u.payload(), b"x"),
            other => panic!("{other:?}"),
        }

        let later = FrameBuilder::new(A, B)
            .ipv6(s, d)
            .ipv6_fragment(10, true, 42)
            .raw_l4(IPPROTO_TCP)
            .payload(&[0; 16])
            .build();
        let l = parse(&later).unwrap();
        assert_eq!(l.frag, IS_FRAGMENT | LATER_FRAGMENT);
        assert_eq!((l.l4, l.ip_proto), (L4Kind::None, IPPROTO_TCP));
    }

    #[test]
    fn ipv4_options_and_padding() {
        let f = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
            .ipv4_options(&[0x94, 0x04, 0, 0, 1]) // router alert + NOP
            .tcp(1, 2, tcp::FLAG_SYN)
            .tcp_options(&[2, 4, 5, 0xb4, 1])
            .pad_to(128)
            .build();
        assert_eq!(f.len(), 128);
        let l = parse(&f).unwrap();
        assert_eq!((l.l4_offset, l.l4_len), (14 + 28, 28));
        assert!(all_checksums_valid(&f));
        let e = SlicedPacket::from_ethernet(&f).unwrap();
        match (e.net, e.transport) {
            (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(t))) => {
                assert_eq!(ip.header().options(), &[0x94, 4, 0, 0, 1, 0, 0, 0]);
                assert_eq!(t.options(), &[2, 4, 5, 0xb4, 1, 0, 0, 0]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sctp_and_raw() {
        let f = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
            .sctp(2905, 2905)
            .sctp_vtag(1)
            .payload(&[0, 0, 0, 4])
            .build();
        let l = parse(&f).unwrap();
        assert_eq!(l.l4, L4Kind::Sctp);
        let p = sctp::Packet::new_checked(&f[usize::from(l.l4_offset)..]).unwrap();
        assert!(p.verify_checksum());
        let raw = FrameBuilder::new(A, B)
            .ethertype(0x88cc)
            .payload(&[1, 2])
            .build();
        assert_eq!(raw.len(), 16);
        assert_eq!(parse(&raw).unwrap().l3, L3Kind::Other);
    }
}
