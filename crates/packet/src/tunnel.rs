//! VXLAN (RFC 7348) and Geneve (RFC 8926) encapsulation and decapsulation.
//!
//! Tunnel ports sit at both ends of port rx ring -> parse -> flow key ->
//! classifier/caches -> actions -> port tx. On output, once the actions are
//! done with the inner frame, [`encap`] prepends the outer Ethernet, IP, UDP
//! and tunnel headers into the [`PacketBuf`] headroom (so only the new bytes
//! are written, the inner frame is never moved) and the result leaves on the
//! underlay. On receive from the underlay, [`parse`] recognises a tunnel
//! packet, validates the outer headers once, and returns a [`Decap`]: the
//! tunnel metadata the flow key matches on (VNI, outer addresses, TOS/TTL,
//! Geneve options) and the offset of the inner frame, which then enters the
//! ordinary parse step as if it had arrived on the tunnel port.
//!
//! Like the rest of the crate, nothing here panics on malformed input and
//! nothing on the receive path allocates. Outer IPv4 options and one outer
//! 802.1Q tag are accepted on receive; outer IPv6 extension headers are not
//! (such packets are reported as "not a tunnel packet", `Ok(None)`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::buf::PacketBuf;
use crate::parse::{L3Kind, L4Kind};
use crate::{bytes, checksum, ethernet, ipv4, ipv6, udp};
use crate::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, IPPROTO_UDP};

/// IANA-assigned UDP destination port of VXLAN (RFC 7348 §5).
pub const VXLAN_PORT: u16 = 4789;
/// IANA-assigned UDP destination port of Geneve (RFC 8926 §3.3).
pub const GENEVE_PORT: u16 = 6081;
/// EtherType Geneve carries for an Ethernet inner frame (Transparent Ethernet Bridging).
pub const ETHERTYPE_TEB: u16 = 0x6558;

/// Length of the VXLAN header.
pub const VXLAN_HEADER_LEN: usize = 8;
/// Length of the fixed Geneve header (options follow it).
pub const GENEVE_HEADER_LEN: usize = 8;
/// VXLAN "I" flag: the VNI is valid. RFC 7348 requires it set on transmit;
/// a packet without it carries no usable VNI, so receive rejects it.
pub const VXLAN_FLAG_I: u8 = 0x08;
/// Most option bytes a Geneve header can announce (6-bit length in 4-byte
/// words).
pub const GENEVE_MAX_OPTIONS_LEN: usize = 252;
/// Most data bytes one Geneve option TLV can carry (5-bit length in 4-byte
/// words).
pub const GENEVE_MAX_OPT_DATA_LEN: usize = 124;
/// Bit of a Geneve option type meaning "critical": an endpoint that does not
/// understand the option must drop the packet rather than ignore it.
pub const GENEVE_OPT_CRITICAL: u8 = 0x80;
/// Largest VNI: VXLAN and Geneve both carry 24 bits.
pub const MAX_VNI: u32 = 0x00ff_ffff;
/// Lowest port [`entropy_port`] returns: the start of the dynamic range
/// (RFC 6335), which RFC 7348 §5 recommends for the source port.
pub const ENTROPY_PORT_MIN: u16 = 49152;

const ETH_LEN: usize = ethernet::HEADER_LEN;
const UDP_LEN: usize = udp::HEADER_LEN;

/// Which encapsulation a tunnel packet uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// VXLAN (RFC 7348): a fixed 8-byte header carrying a 24-bit VNI.
    Vxlan,
    /// Geneve (RFC 8926): VXLAN's header plus a protocol type and TLV
    /// options, so tunnel metadata can grow without a new port.
    Geneve,
}

impl TunnelKind {
    /// The IANA-assigned UDP destination port of this encapsulation.
    pub const fn default_port(self) -> u16 {
        match self {
            TunnelKind::Vxlan => VXLAN_PORT,
            TunnelKind::Geneve => GENEVE_PORT,
        }
    }

    /// Stable lowercase name, for configuration and log labels.
    pub const fn name(self) -> &'static str {
        match self {
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::Geneve => "geneve",
        }
    }
}

/// The `kind_of` mapping for [`parse`] when tunnels use the IANA ports
/// ([`VXLAN_PORT`], [`GENEVE_PORT`]); ports configured otherwise need their
/// own closure.
pub const fn default_kind(udp_dst: u16) -> Option<TunnelKind> {
    match udp_dst {
        VXLAN_PORT => Some(TunnelKind::Vxlan),
        GENEVE_PORT => Some(TunnelKind::Geneve),
        _ => None,
    }
}

macro_rules! tunnel_errors {
    ($( $(#[$doc:meta])* $name:ident => $reason:literal, $msg:literal; )*) => {
        /// Why a tunnel packet could not be decapsulated, or a frame could
        /// not be encapsulated. Each variant is one drop counter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
        #[repr(u8)]
        pub enum TunnelError {
            $( $(#[$doc])* #[error($msg)] $name, )*
        }

        impl TunnelError {
            /// Every variant, in [`index`](Self::index) order.
            pub const ALL: &'static [TunnelError] = &[ $(TunnelError::$name),* ];

            /// Number of variants: the size of a per-reason counter array.
            pub const COUNT: usize = Self::ALL.len();

            /// Dense index in `0..COUNT`, for indexing counter arrays.
            #[inline]
            pub const fn index(&self) -> usize {
                *self as usize
            }

            /// Stable snake_case name, for counter and log labels.
            pub const fn name(&self) -> &'static str {
                match self {
                    $( TunnelError::$name => $reason, )*
                }
            }
        }
    };
}

tunnel_errors! {
    /// The frame ends before the IP datagram, UDP header or tunnel header
    /// its length fields announce.
    Truncated => "truncated", "tunnel packet truncated";
    /// Outer IPv4 total length smaller than the IPv4 header.
    BadIpLength => "bad_ip_length", "outer IP length smaller than its header";
    /// Bytes after the outer IP datagram. An outer frame is at least 64
    /// bytes, so Ethernet padding cannot explain them, and the inner frame is
    /// defined to run to the end of the outer one.
    TrailingBytes => "trailing_bytes", "bytes after the outer IP datagram";
    /// Outer IPv4 header checksum does not verify.
    BadIpChecksum => "bad_ip_checksum", "outer IPv4 header checksum wrong";
    /// Outer IPv4 packet is a first fragment; tunnel packets are not
    /// reassembled here.
    Fragment => "fragment", "outer IPv4 packet is a fragment";
    /// UDP length differs from the IP payload length.
    BadUdpLength => "bad_udp_length", "UDP length inconsistent with IP length";
    /// Non-zero UDP checksum that does not verify.
    BadUdpChecksum => "bad_udp_checksum", "outer UDP checksum wrong";
    /// Zero UDP checksum over IPv6 (RFC 8200 §8.1 forbids it by default).
    ZeroUdpChecksumV6 => "zero_udp_checksum_v6", "zero UDP checksum over IPv6";
    /// VXLAN header without the I flag: no valid VNI.
    VxlanIFlag => "vxlan_i_flag", "VXLAN I flag clear";
    /// Geneve version other than 0.
    GeneveVersion => "geneve_version", "unknown Geneve version";
    /// Geneve protocol type other than Transparent Ethernet Bridging.
    GeneveProtocol => "geneve_protocol", "Geneve protocol type is not Ethernet";
    /// Geneve options run past the packet, or a TLV overruns the options
    /// length (or, on encapsulation, the options are not a whole number of
    /// 4-byte words).
    GeneveOptLen => "geneve_opt_len", "Geneve option length inconsistent";
    /// More than [`GENEVE_MAX_OPTIONS_LEN`] bytes of Geneve options to encapsulate.
    GeneveOptionsTooLong => "geneve_options_too_long", "Geneve options longer than 252 bytes";
    /// Geneve option data not a multiple of 4 bytes or longer than
    /// [`GENEVE_MAX_OPT_DATA_LEN`].
    GeneveOptData => "geneve_opt_data", "Geneve option data length invalid";
    /// Options given for VXLAN, which has none.
    VxlanOptions => "vxlan_options", "VXLAN has no options";
    /// Inner frame shorter than an Ethernet header.
    InnerTruncated => "inner_truncated", "inner frame shorter than an Ethernet header";
    /// Outer source and destination addresses of different IP versions.
    AddressFamily => "address_family", "outer addresses of different IP versions";
    /// VNI wider than 24 bits.
    VniRange => "vni_range", "VNI wider than 24 bits";
    /// Encapsulated datagram too long for the IP/UDP length fields.
    TooLong => "too_long", "encapsulated datagram longer than 65535 bytes";
    /// Not enough headroom in the buffer for the outer headers.
    Headroom => "headroom", "not enough headroom for the outer headers";
}

/// Outer header parameters for encapsulation.
///
/// One `Encap` usually describes a tunnel port's configuration plus the
/// per-packet bits (VNI from the `set_tunnel` action, entropy source port),
/// so it borrows its options rather than owning them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encap<'a> {
    /// VXLAN or Geneve.
    pub kind: TunnelKind,
    /// Outer source MAC (the local underlay interface).
    pub eth_src: [u8; 6],
    /// Outer destination MAC (the underlay next hop).
    pub eth_dst: [u8; 6],
    /// Outer source address; same IP version as `ip_dst`, else
    /// [`TunnelError::AddressFamily`].
    pub ip_src: IpAddr,
    /// Outer destination address (the remote tunnel endpoint).
    pub ip_dst: IpAddr,
    /// IPv4 TOS / IPv6 traffic class.
    pub tos: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 DF bit (ignored for IPv6, which routers never fragment).
    pub df: bool,
    /// UDP source port; use [`entropy_port`] so that underlay ECMP and RSS
    /// spread flows (RFC 7348 §5).
    pub udp_src: u16,
    /// UDP destination port ([`TunnelKind::default_port`] unless the peer is
    /// configured otherwise).
    pub udp_dst: u16,
    /// Compute the outer UDP checksum. IPv4: optional (0 when false); IPv6:
    /// always computed regardless (RFC 8200/6935: zero checksum not allowed
    /// by default). Skipping it over IPv4 saves a pass over the inner frame,
    /// which the inner L4 checksum already protects.
    pub csum: bool,
    /// Virtual network identifier, 24 bits; wider values are
    /// [`TunnelError::VniRange`].
    pub vni: u32,
    /// Geneve only: raw option TLVs (each: class u16, type u8 (high bit =
    /// critical), 3 reserved bits + 5-bit length in 4-byte words, data),
    /// total a multiple of 4 and at most 252 bytes; must be empty for VXLAN.
    /// Build them with [`push_geneve_option`]. The header's C bit is set
    /// when any option is critical.
    pub geneve_options: &'a [u8],
    /// Geneve O (control/OAM) bit.
    pub geneve_oam: bool,
}

/// Outer overhead in bytes (Ethernet 14 + IPv4 20 / IPv6 40 + UDP 8 + VXLAN 8 / Geneve 8+options).
///
/// Callers size MTUs and headroom with it; VXLAN ignores
/// `geneve_options_len`.
pub fn overhead(kind: TunnelKind, ipv6: bool, geneve_options_len: usize) -> usize {
    let ip = if ipv6 {
        ipv6::HEADER_LEN
    } else {
        ipv4::HEADER_LEN
    };
    let tunnel = match kind {
        TunnelKind::Vxlan => VXLAN_HEADER_LEN,
        TunnelKind::Geneve => GENEVE_HEADER_LEN.saturating_add(geneve_options_len),
    };
    (ETH_LEN + ip + UDP_LEN).saturating_add(tunnel)
}

/// Walks a Geneve options block, returning whether any option is critical.
/// Every TLV must fit the block exactly; shared by [`parse`] and [`encap`]
/// so that encapsulation never produces what decapsulation rejects.
fn check_options(opts: &[u8]) -> Result<bool, TunnelError> {
    let mut critical = false;
    let mut rest = opts;
    while !rest.is_empty() {
        let hdr = bytes::get_array::<4>(rest, 0).ok_or(TunnelError::GeneveOptLen)?;
        let len = 4 + usize::from(hdr[3] & 0x1f) * 4;
        rest = rest.get(len..).ok_or(TunnelError::GeneveOptLen)?;
        critical |= hdr[2] & GENEVE_OPT_CRITICAL != 0;
    }
    Ok(critical)
}

#[derive(Clone, Copy)]
enum Addrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

/// Prepends the outer Ethernet, IPv4/IPv6, UDP and VXLAN/Geneve headers to
/// the inner Ethernet frame in `buf`, filling every length, the IPv4 header
/// checksum and the UDP checksum as [`Encap::csum`] says (a computed 0 is
/// sent as 0xffff). The inner frame is not modified.
///
/// Why these choices:
/// * the frame grows at the front only ([`PacketBuf::push_front`]), so the
///   inner frame is never copied; [`PacketBuf::DEFAULT_HEADROOM`] covers
///   VXLAN and Geneve with up to 56 option bytes over IPv6 (76 over IPv4),
///   deeper ones need [`PacketBuf::reserve_headroom`] first, else
///   [`TunnelError::Headroom`];
/// * the IPv4 identification is 0 and the IPv6 flow label 0: tunnel packets
///   are normally sent with DF (RFC 6864 allows a constant ID for atomic
///   datagrams), and the UDP source port already carries the flow entropy;
/// * the outer UDP checksum covers the inner frame, so any offload the
///   inner frame still needs (partial checksum, GSO) must be finished
///   *before* calling this; `buf.offload` is cleared because its offsets
///   would describe the inner frame, not the packet on the wire.
///
/// Every argument is validated before the buffer is touched: on error the
/// buffer is unchanged.
pub fn encap(buf: &mut PacketBuf, e: &Encap) -> Result<(), TunnelError> {
    let addrs = match (e.ip_src, e.ip_dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Addrs::V4(s, d),
        (IpAddr::V6(s), IpAddr::V6(d)) => Addrs::V6(s, d),
        _ => return Err(TunnelError::AddressFamily),
    };
    if e.vni > MAX_VNI {
        return Err(TunnelError::VniRange);
    }
    let opts = e.geneve_options;
    let critical = match e.kind {
        TunnelKind::Vxlan => {
            if !opts.is_empty() {
                return Err(TunnelError::VxlanOptions);
            }
            false
        }
        TunnelKind::Geneve => {
            if opts.len() > GENEVE_MAX_OPTIONS_LEN {
                return Err(TunnelError::GeneveOptionsTooLong);
            }
            if opts.len() % 4 != 0 {
                return Err(TunnelError::GeneveOptLen);
            }
            check_options(opts)?
        }
    };
    if buf.len() < ETH_LEN {
        return Err(TunnelError::InnerTruncated);
    }
    let is_v6 = matches!(addrs, Addrs::V6(..));
    let n = overhead(e.kind, is_v6, opts.len());
    let ip_hdr = if is_v6 {
        ipv6::HEADER_LEN
    } else {
        ipv4::HEADER_LEN
    };
    let l4 = ETH_LEN + ip_hdr;
    // UDP header + tunnel header + options + inner frame.
    let udp_len = (n - l4).saturating_add(buf.len());
    let ip_len = if is_v6 { udp_len } else { udp_len + ip_hdr };
    let (Ok(udp_len16), Ok(ip_len16)) = (u16::try_from(udp_len), u16::try_from(ip_len)) else {
        return Err(TunnelError::TooLong);
    };

    let hdr = buf.push_front(n).ok_or(TunnelError::Headroom)?;
    let mut eth = ethernet::Packet::new_unchecked(&mut hdr[..ETH_LEN]);
    eth.set_dst_addr(e.eth_dst);
    eth.set_src_addr(e.eth_src);
    match addrs {
        Addrs::V4(src, dst) => {
            eth.set_ethertype(ETHERTYPE_IPV4);
            let mut ip = ipv4::Packet::new_unchecked(&mut hdr[ETH_LEN..l4]);
            ip.set_version_and_header_len(4, ipv4::HEADER_LEN as u8);
            ip.set_tos(e.tos);
            ip.set_total_len(ip_len16);
            ip.set_ident(0);
            ip.set_flags_frag(if e.df { ipv4::FLAG_DF } else { 0 });
            ip.set_ttl(e.ttl);
            ip.set_protocol(IPPROTO_UDP);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            ip.fill_checksum();
        }
        Addrs::V6(src, dst) => {
            eth.set_ethertype(ETHERTYPE_IPV6);
            let mut ip = ipv6::Packet::new_unchecked(&mut hdr[ETH_LEN..l4]);
            ip.set_version(6);
            ip.set_traffic_class(e.tos);
            ip.set_flow_label(0);
            ip.set_payload_len(ip_len16);
            ip.set_next_header(IPPROTO_UDP);
            ip.set_hop_limit(e.ttl);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
        }
    }
    let mut u = udp::Packet::new_unchecked(&mut hdr[l4..l4 + UDP_LEN]);
    u.set_src_port(e.udp_src);
    u.set_dst_port(e.udp_dst);
    u.set_len(udp_len16);
    u.set_checksum(0);

    let t = &mut hdr[l4 + UDP_LEN..];
    match e.kind {
        TunnelKind::Vxlan => {
            t[0] = VXLAN_FLAG_I;
        }
        TunnelKind::Geneve => {
            // Version 0; opt_len <= 63 words, checked above.
            t[0] = (opts.len() / 4) as u8;
            t[1] = (u8::from(e.geneve_oam) << 7) | (u8::from(critical) << 6);
            bytes::set_u16(t, 2, ETHERTYPE_TEB);
            t[GENEVE_HEADER_LEN..].copy_from_slice(opts);
        }
    }
    // VNI in bytes 4..7, byte 7 reserved (0): same place in both headers.
    bytes::set_u32(t, 4, e.vni << 8);

    // The inner frame's offload offsets would now be wrong and nobody may
    // act on them after the outer checksum has covered the inner bytes.
    buf.offload = None;
    let seg = buf.data_mut().get_mut(l4..).unwrap_or_default();
    let mut u = udp::Packet::new_unchecked(seg);
    match addrs {
        Addrs::V4(src, dst) if e.csum => u.fill_checksum_ipv4(src, dst),
        Addrs::V4(..) => {}
        Addrs::V6(src, dst) => u.fill_checksum_ipv6(src, dst),
    }
    Ok(())
}

/// Entropy UDP source port (RFC 7348 §5 / RFC 8926 §3.3) for the inner
/// frame `inner`: a hash of its Ethernet addresses and EtherType and, when
/// [`crate::parse()`] finds them, its IPv4/IPv6 addresses, protocol and L4
/// ports, mapped into 49152..=65535. A frame that does not parse is hashed
/// on its Ethernet header alone.
///
/// The underlay only sees the outer headers, so without this every flow
/// between two tunnel endpoints would share one ECMP path and one receive
/// queue. Ports are left out for IP fragments (first or later) so that all
/// fragments of a datagram take the same path. The hash has no seed so that
/// every switch instance, and every restart, picks the same port for a flow,
/// which keeps the underlay path (and packet order) stable.
pub fn entropy_port(inner: &[u8]) -> u16 {
    let mut h = Fnv1a::new();
    match crate::parse(inner) {
        Ok(l) => {
            h.write(bytes::clamped(inner, 0, 12));
            h.write(&l.ethertype.to_be_bytes());
            let l3 = usize::from(l.l3_offset);
            let addrs = match l.l3 {
                L3Kind::Ipv4 => Some((ipv4::SRC_OFFSET, 8)),
                L3Kind::Ipv6 => Some((ipv6::SRC_OFFSET, 32)),
                _ => None,
            };
            if let Some((off, len)) = addrs {
                h.write(bytes::clamped(inner, l3 + off, l3 + off + len));
                h.write(&[l.ip_proto]);
                if matches!(l.l4, L4Kind::Tcp | L4Kind::Udp | L4Kind::Sctp) && !l.is_fragment() {
                    let l4 = usize::from(l.l4_offset);
                    h.write(bytes::clamped(inner, l4, l4 + 4));
                }
            }
        }
        Err(_) => h.write(bytes::clamped(inner, 0, ETH_LEN)),
    }
    // The top 14 bits of a well-mixed hash select one of the 16384 ports.
    ENTROPY_PORT_MIN + (fmix64(h.0) >> 50) as u16
}

/// FNV-1a: cheap, seedless, allocation-free; [`fmix64`] fixes its weak
/// high-bit avalanche.
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, data: &[u8]) {
        for &b in data {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// MurmurHash3's 64-bit finaliser.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// A parsed tunnel packet as received on the underlay.
///
/// Everything the flow key's tunnel fields need, by value, plus offsets into
/// the frame so that the caller can strip the outer headers
/// ([`PacketBuf::pull_front`] by `inner_off`) without parsing again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decap {
    /// VXLAN or Geneve, as decided by `kind_of`.
    pub kind: TunnelKind,
    /// Outer source MAC.
    pub eth_src: [u8; 6],
    /// Outer destination MAC.
    pub eth_dst: [u8; 6],
    /// Outer source address (the remote tunnel endpoint).
    pub ip_src: IpAddr,
    /// Outer destination address (a local address).
    pub ip_dst: IpAddr,
    /// IPv4 TOS / IPv6 traffic class.
    pub tos: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
    /// Outer UDP source port.
    pub udp_src: u16,
    /// Outer UDP destination port.
    pub udp_dst: u16,
    /// Non-zero UDP checksum (it was verified).
    pub udp_csum_present: bool,
    /// Virtual network identifier (24 bits).
    pub vni: u32,
    /// Geneve O bit (control/OAM packet); false for VXLAN.
    pub geneve_oam: bool,
    /// Geneve C bit (critical options present); false for VXLAN.
    pub geneve_critical: bool,
    /// Offset and length of the Geneve options inside the frame (0,0 for VXLAN).
    pub options_off: usize,
    /// Length of the Geneve options (0 for VXLAN).
    pub options_len: usize,
    /// Offset of the inner Ethernet frame.
    ///
    /// The inner frame runs to the end of the outer frame: [`parse`] rejects
    /// bytes after the outer datagram ([`TunnelError::TrailingBytes`]).
    pub inner_off: usize,
}

impl Decap {
    /// The Geneve options block of `frame` (the frame this was parsed from);
    /// empty for VXLAN. Never panics, even given another frame.
    pub fn options<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        bytes::clamped(
            frame,
            self.options_off,
            self.options_off.saturating_add(self.options_len),
        )
    }

    /// The inner Ethernet frame of `frame` (the frame this was parsed from).
    pub fn inner<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        bytes::clamped(frame, self.inner_off, usize::MAX)
    }
}

/// Outer IP fields [`parse`] has read once it knows the packet is a tunnel
/// packet.
struct Outer {
    ip_src: IpAddr,
    ip_dst: IpAddr,
    tos: u8,
    ttl: u8,
}

/// Parses a frame received from the underlay: Ethernet, at most one 802.1Q
/// tag, IPv4 (options allowed) or IPv6 (no extension headers), UDP, then the
/// VXLAN or Geneve header that `kind_of(udp_dst)` selects. `kind_of` is a
/// closure so that tunnel ports configured with non-IANA destination ports
/// work.
///
/// * `Ok(None)`: not a tunnel packet (see below);
/// * `Err`: a tunnel packet that is malformed: IPv4 header checksum wrong,
///   IPv4 fragment, UDP length inconsistent with the IP length, non-zero UDP
///   checksum that does not verify, zero UDP checksum over IPv6, VXLAN I flag
///   clear, Geneve version not 0 or protocol not [`ETHERTYPE_TEB`], Geneve
///   options running past the packet or a TLV overrunning them, an inner
///   frame shorter than 14 bytes, or a length field promising more bytes than
///   the frame has;
/// * `Ok(Some)`: every check passed; the UDP checksum, if present, verified.
///
/// A frame is a tunnel packet as soon as the UDP destination port can be
/// read and `kind_of` claims it; everything before that point that does not
/// match (too short to hold the port, other EtherType, IP version or
/// protocol, IPv4 header length below 20, a non-first IPv4 fragment, which
/// has no UDP header) is `Ok(None)`, so the caller hands the frame to the
/// ordinary pipeline, whose parser counts its own errors. After that point
/// every inconsistency is an error, because the frame was addressed to the
/// tunnel endpoint and forwarding it as-is would be wrong. [`default_kind`]
/// is the `kind_of` for the IANA ports.
///
/// The UDP datagram must end exactly where the IP datagram and the frame
/// end, so that the inner frame is `frame[inner_off..]`.
pub fn parse(
    frame: &[u8],
    kind_of: impl Fn(u16) -> Option<TunnelKind>,
) -> Result<Option<Decap>, TunnelError> {
    let Some(mut ethertype) = bytes::get_u16(frame, 12) else {
        return Ok(None);
    };
    let mut l3 = ETH_LEN;
    if ethertype == ETHERTYPE_VLAN {
        let Some(inner_type) = bytes::get_u16(frame, ETH_LEN + 2) else {
            return Ok(None);
        };
        ethertype = inner_type;
        l3 += 4;
    }
    let ip = bytes::clamped(frame, l3, usize::MAX);
    let (kind, outer, udp_off, seg) = match ethertype {
        ETHERTYPE_IPV4 => match parse_ipv4(ip, &kind_of)? {
            Some((kind, outer, ihl, seg)) => (kind, outer, l3 + ihl, seg),
            None => return Ok(None),
        },
        ETHERTYPE_IPV6 => match parse_ipv6(ip, &kind_of)? {
            Some((kind, outer, seg)) => (kind, outer, l3 + ipv6::HEADER_LEN, seg),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    // `seg` is the UDP datagram, verified to end at the end of `frame`.
    let tun_off = udp_off + UDP_LEN;
    let t = bytes::clamped(seg, UDP_LEN, usize::MAX);
    let hdr = bytes::get_array::<8>(t, 0).ok_or(TunnelError::Truncated)?;
    let vni = u32::from_be_bytes([0, hdr[4], hdr[5], hdr[6]]);
    let (oam, critical, options_off, options_len) = match kind {
        TunnelKind::Vxlan => {
            if hdr[0] & VXLAN_FLAG_I == 0 {
                return Err(TunnelError::VxlanIFlag);
            }
            (false, false, 0, 0)
        }
        TunnelKind::Geneve => {
            if hdr[0] >> 6 != 0 {
                return Err(TunnelError::GeneveVersion);
            }
            if u16::from_be_bytes([hdr[2], hdr[3]]) != ETHERTYPE_TEB {
                return Err(TunnelError::GeneveProtocol);
            }
            let len = usize::from(hdr[0] & 0x3f) * 4;
            let opts = t
                .get(GENEVE_HEADER_LEN..GENEVE_HEADER_LEN + len)
                .ok_or(TunnelError::GeneveOptLen)?;
            check_options(opts)?;
            (
                hdr[1] & 0x80 != 0,
                hdr[1] & 0x40 != 0,
                tun_off + GENEVE_HEADER_LEN,
                len,
            )
        }
    };
    // Both headers are 8 bytes; Geneve's options follow its header.
    let inner_off = tun_off + VXLAN_HEADER_LEN + options_len;
    if frame.len().saturating_sub(inner_off) < ETH_LEN {
        return Err(TunnelError::InnerTruncated);
    }
    Ok(Some(Decap {
        kind,
        eth_src: bytes::get_array::<6>(frame, 6).unwrap_or_default(),
        eth_dst: bytes::get_array::<6>(frame, 0).unwrap_or_default(),
        ip_src: outer.ip_src,
        ip_dst: outer.ip_dst,
        tos: outer.tos,
        ttl: outer.ttl,
        udp_src: bytes::get_u16(seg, 0).unwrap_or_default(),
        udp_dst: bytes::get_u16(seg, 2).unwrap_or_default(),
        udp_csum_present: bytes::get_u16(seg, 6).unwrap_or_default() != 0,
        vni,
        geneve_oam: oam,
        geneve_critical: critical,
        options_off,
        options_len,
        inner_off,
    }))
}

/// Parsed outer IPv4: tunnel kind, IP fields, header length, UDP datagram.
type V4Outer<'a> = (TunnelKind, Outer, usize, &'a [u8]);

fn parse_ipv4<'a>(
    ip: &'a [u8],
    kind_of: &impl Fn(u16) -> Option<TunnelKind>,
) -> Result<Option<V4Outer<'a>>, TunnelError> {
    let (Some(ver_ihl), Some(proto), Some(ff)) = (
        bytes::get_u8(ip, 0),
        bytes::get_u8(ip, 9),
        bytes::get_u16(ip, 6),
    ) else {
        return Ok(None);
    };
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    if ver_ihl >> 4 != 4
        || ihl < ipv4::HEADER_LEN
        || proto != IPPROTO_UDP
        || ff & ipv4::FRAG_OFFSET_MASK != 0
    {
        return Ok(None);
    }
    let Some(kind) = bytes::get_u16(ip, ihl + 2).and_then(kind_of) else {
        return Ok(None);
    };
    // A tunnel packet from here on. The port was read behind the header, so
    // the whole header is present.
    let hdr = bytes::clamped(ip, 0, ihl);
    if checksum::checksum(hdr) != 0 {
        return Err(TunnelError::BadIpChecksum);
    }
    if ff & ipv4::FLAG_MF != 0 {
        return Err(TunnelError::Fragment);
    }
    let total = usize::from(bytes::get_u16(ip, 2).unwrap_or_default());
    check_ip_len(ip.len(), ihl, total)?;
    let seg = bytes::clamped(ip, ihl, total);
    check_udp_len(seg)?;
    let src = Ipv4Addr::from(bytes::get_array::<4>(ip, ipv4::SRC_OFFSET).unwrap_or_default());
    let dst = Ipv4Addr::from(bytes::get_array::<4>(ip, ipv4::DST_OFFSET).unwrap_or_default());
    if bytes::get_u16(seg, udp::CHECKSUM_OFFSET) != Some(0)
        && checksum::l4_checksum_ipv4(src, dst, IPPROTO_UDP, seg) != 0
    {
        return Err(TunnelError::BadUdpChecksum);
    }
    let outer = Outer {
        ip_src: src.into(),
        ip_dst: dst.into(),
        tos: bytes::get_u8(ip, 1).unwrap_or_default(),
        ttl: bytes::get_u8(ip, 8).unwrap_or_default(),
    };
    Ok(Some((kind, outer, ihl, seg)))
}

/// Parsed outer IPv6: tunnel kind, IP fields, UDP datagram.
type V6Outer<'a> = (TunnelKind, Outer, &'a [u8]);

fn parse_ipv6<'a>(
    ip: &'a [u8],
    kind_of: &impl Fn(u16) -> Option<TunnelKind>,
) -> Result<Option<V6Outer<'a>>, TunnelError> {
    let (Some(ver), Some(nh)) = (bytes::get_u8(ip, 0), bytes::get_u8(ip, 6)) else {
        return Ok(None);
    };
    if ver >> 4 != 6 || nh != IPPROTO_UDP {
        return Ok(None);
    }
    let hl = ipv6::HEADER_LEN;
    let Some(kind) = bytes::get_u16(ip, hl + 2).and_then(kind_of) else {
        return Ok(None);
    };
    let total = hl + usize::from(bytes::get_u16(ip, 4).unwrap_or_default());
    check_ip_len(ip.len(), hl, total)?;
    let seg = bytes::clamped(ip, hl, total);
    check_udp_len(seg)?;
    if bytes::get_u16(seg, udp::CHECKSUM_OFFSET) == Some(0) {
        return Err(TunnelError::ZeroUdpChecksumV6);
    }
    let src = Ipv6Addr::from(bytes::get_array::<16>(ip, ipv6::SRC_OFFSET).unwrap_or_default());
    let dst = Ipv6Addr::from(bytes::get_array::<16>(ip, ipv6::DST_OFFSET).unwrap_or_default());
    if checksum::l4_checksum_ipv6(src, dst, IPPROTO_UDP, seg) != 0 {
        return Err(TunnelError::BadUdpChecksum);
    }
    let vtc = bytes::get_u16(ip, 0).unwrap_or_default();
    let outer = Outer {
        ip_src: src.into(),
        ip_dst: dst.into(),
        tos: (vtc >> 4) as u8,
        ttl: bytes::get_u8(ip, 7).unwrap_or_default(),
    };
    Ok(Some((kind, outer, seg)))
}

/// The IP datagram (`total` bytes, header `hl`) must fill exactly the `avail`
/// bytes behind the L2 header.
fn check_ip_len(avail: usize, hl: usize, total: usize) -> Result<(), TunnelError> {
    if total < hl {
        Err(TunnelError::BadIpLength)
    } else if total > avail {
        Err(TunnelError::Truncated)
    } else if total < avail {
        Err(TunnelError::TrailingBytes)
    } else {
        Ok(())
    }
}

/// The UDP length must equal the IP payload length `seg.len()`.
fn check_udp_len(seg: &[u8]) -> Result<(), TunnelError> {
    match bytes::get_u16(seg, 4) {
        None => Err(TunnelError::Truncated),
        Some(len) if usize::from(len) != seg.len() || seg.len() < UDP_LEN => {
            Err(TunnelError::BadUdpLength)
        }
        Some(_) => Ok(()),
    }
}

/// One Geneve option TLV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneveOpt<'a> {
    /// Option class: the namespace (IANA-assigned) the type belongs to.
    pub class: u16,
    /// Option type; the high bit is [`GENEVE_OPT_CRITICAL`].
    pub typ: u8,
    /// Option data (a multiple of 4 bytes, at most 124).
    pub data: &'a [u8],
}

impl GeneveOpt<'_> {
    /// Must a receiver that does not understand this option drop the packet?
    pub fn critical(&self) -> bool {
        self.typ & GENEVE_OPT_CRITICAL != 0
    }
}

/// Iterates the TLVs of a Geneve options block ([`Decap::options`]).
///
/// [`parse`] has already validated the block, but the iterator accepts any
/// bytes without panicking: it stops at the first TLV that does not fit. It
/// borrows, so reading tunnel metadata from a received packet does not
/// allocate.
pub fn geneve_options(opts: &[u8]) -> impl Iterator<Item = GeneveOpt<'_>> {
    let mut rest = opts;
    std::iter::from_fn(move || {
        let next = (|| {
            let hdr = bytes::get_array::<4>(rest, 0)?;
            let len = 4 + usize::from(hdr[3] & 0x1f) * 4;
            let data = rest.get(4..len)?;
            let opt = GeneveOpt {
                class: u16::from_be_bytes([hdr[0], hdr[1]]),
                typ: hdr[2],
                data,
            };
            rest = rest.get(len..)?;
            Some(opt)
        })();
        if next.is_none() {
            rest = &[];
        }
        next
    })
}

/// Appends one Geneve option TLV to `out`. `data` must be a multiple of 4
/// bytes and at most [`GENEVE_MAX_OPT_DATA_LEN`], else
/// [`TunnelError::GeneveOptData`] and `out` is unchanged.
///
/// For building [`Encap::geneve_options`] once per tunnel port (or per flow),
/// not per packet; the reserved bits are written as 0.
pub fn push_geneve_option(
    out: &mut Vec<u8>,
    class: u16,
    typ: u8,
    data: &[u8],
) -> Result<(), TunnelError> {
    let at = out.len();
    out.resize(at + 4 + data.len(), 0);
    match write_geneve_option(&mut out[at..], class, typ, data) {
        Ok(_) => Ok(()),
        Err(e) => {
            out.truncate(at);
            Err(e)
        }
    }
}

/// [`push_geneve_option`] into a buffer, without allocating (per packet):
/// returns the bytes written, or [`TunnelError::GeneveOptData`] for bad
/// data and [`TunnelError::GeneveOptionsTooLong`] when `out` is too short,
/// writing nothing.
pub fn write_geneve_option(
    out: &mut [u8],
    class: u16,
    typ: u8,
    data: &[u8],
) -> Result<usize, TunnelError> {
    if data.len() % 4 != 0 || data.len() > GENEVE_MAX_OPT_DATA_LEN {
        return Err(TunnelError::GeneveOptData);
    }
    let n = 4 + data.len();
    let o = out.get_mut(..n).ok_or(TunnelError::GeneveOptionsTooLong)?;
    o[..2].copy_from_slice(&class.to_be_bytes());
    o[2] = typ;
    o[3] = (data.len() / 4) as u8;
    o[4..].copy_from_slice(data);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::Offload;
    use crate::builder::{all_checksums_valid, FrameBuilder};

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn inner_frame(sport: u16) -> Vec<u8> {
        FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
            .tcp(sport, 80, 0x02)
            .payload(b"inner payload!")
            .build()
    }

    fn v4() -> (IpAddr, IpAddr) {
        (
            Ipv4Addr::new(192, 0, 2, 1).into(),
            Ipv4Addr::new(192, 0, 2, 2).into(),
        )
    }

    fn v6() -> (IpAddr, IpAddr) {
        (
            "2001:db8::1".parse::<Ipv6Addr>().unwrap().into(),
            "2001:db8::2".parse::<Ipv6Addr>().unwrap().into(),
        )
    }

    fn encap_params<'a>(
        kind: TunnelKind,
        (ip_src, ip_dst): (IpAddr, IpAddr),
        csum: bool,
        opts: &'a [u8],
    ) -> Encap<'a> {
        Encap {
            kind,
            eth_src: [0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb],
            eth_dst: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55],
            ip_src,
            ip_dst,
            tos: 0xb8,
            ttl: 33,
            df: true,
            udp_src: 50000,
            udp_dst: kind.default_port(),
            csum,
            vni: 0x00ab_cdef,
            geneve_options: opts,
            geneve_oam: kind == TunnelKind::Geneve,
        }
    }

    fn two_options() -> Vec<u8> {
        let mut o = Vec::new();
        push_geneve_option(&mut o, 0x0102, 0x03, &[1, 2, 3, 4]).unwrap();
        push_geneve_option(&mut o, 0xffff, 0x80 | 0x05, &[9; 8]).unwrap();
        o
    }

    fn build(e: &Encap) -> (Vec<u8>, Vec<u8>) {
        let inner = inner_frame(1234);
        let mut buf = PacketBuf::from_slice(&inner);
        encap(&mut buf, e).unwrap();
        (buf.data().to_vec(), inner)
    }

    /// encap then parse gives back every field, and the checksums verify.
    fn round_trip(e: &Encap) -> Vec<u8> {
        let (f, inner) = build(e);
        assert_eq!(
            f.len(),
            inner.len() + overhead(e.kind, e.ip_src.is_ipv6(), e.geneve_options.len())
        );
        let d = parse(&f, default_kind).unwrap().expect("not recognised");
        let is_v6 = e.ip_src.is_ipv6();
        assert_eq!(d.kind, e.kind);
        assert_eq!((d.eth_src, d.eth_dst), (e.eth_src, e.eth_dst));
        assert_eq!((d.ip_src, d.ip_dst), (e.ip_src, e.ip_dst));
        assert_eq!((d.tos, d.ttl), (e.tos, e.ttl));
        assert_eq!((d.udp_src, d.udp_dst), (e.udp_src, e.udp_dst));
        assert_eq!(d.udp_csum_present, e.csum || is_v6);
        assert_eq!(d.vni, e.vni);
        assert_eq!(d.geneve_oam, e.geneve_oam);
        let critical = geneve_options(e.geneve_options).any(|o| o.critical());
        assert_eq!(d.geneve_critical, critical);
        assert_eq!(d.options(&f), e.geneve_options);
        assert_eq!(d.options_len, e.geneve_options.len());
        if e.kind == TunnelKind::Vxlan {
            assert_eq!((d.options_off, d.options_len), (0, 0));
        }
        assert_eq!(d.inner(&f), &inner[..]);
        assert_eq!(d.inner_off, f.len() - inner.len());
        assert!(all_checksums_valid(&f));

        // Independent checks of the outer headers.
        let l = crate::parse(&f).unwrap();
        let l3 = usize::from(l.l3_offset);
        let l4 = usize::from(l.l4_offset);
        let seg = &f[l4..];
        let ucsum = u16::from_be_bytes([seg[6], seg[7]]);
        match (e.ip_src, e.ip_dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                assert_eq!(checksum::checksum(&f[l3..l3 + 20]), 0);
                assert_eq!(f[l3 + 6] & 0x40, 0x40, "DF");
                assert_eq!(&f[l3 + 4..l3 + 6], &[0, 0], "ident");
                if e.csum {
                    assert_ne!(ucsum, 0);
                    assert_eq!(checksum::l4_checksum_ipv4(s, d, IPPROTO_UDP, seg), 0);
                } else {
                    assert_eq!(ucsum, 0);
                }
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                assert_ne!(ucsum, 0);
                assert_eq!(checksum::l4_checksum_ipv6(s, d, IPPROTO_UDP, seg), 0);
                let p = ipv6::Packet::new_checked(&f[l3..]).unwrap();
                assert_eq!(p.flow_label(), 0);
            }
            _ => unreachable!(),
        }
        match etherparse::SlicedPacket::from_ethernet(&f)
            .unwrap()
            .transport
        {
            Some(etherparse::TransportSlice::Udp(u)) => {
                assert_eq!(u.destination_port(), e.udp_dst);
                assert_eq!(usize::from(u.length()), f.len() - l4);
            }
            other => panic!("etherparse saw {other:?}"),
        }
        f
    }

    #[test]
    fn round_trips() {
        let opts = two_options();
        for csum in [false, true] {
            round_trip(&encap_params(TunnelKind::Vxlan, v4(), csum, &[]));
            round_trip(&encap_params(TunnelKind::Vxlan, v6(), csum, &[]));
            round_trip(&encap_params(TunnelKind::Geneve, v4(), csum, &opts));
            round_trip(&encap_params(TunnelKind::Geneve, v6(), csum, &opts));
            round_trip(&encap_params(TunnelKind::Geneve, v4(), csum, &[]));
        }
    }

    #[test]
    fn geneve_options_read_back() {
        let opts = two_options();
        let f = round_trip(&encap_params(TunnelKind::Geneve, v4(), true, &opts));
        let d = parse(&f, default_kind).unwrap().unwrap();
        assert!(d.geneve_critical);
        let got: Vec<_> = geneve_options(d.options(&f)).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].class, got[0].typ, got[0].data),
            (0x0102, 3, &[1u8, 2, 3, 4][..])
        );
        assert!(!got[0].critical());
        assert_eq!(
            (got[1].class, got[1].typ, got[1].data),
            (0xffff, 0x85, &[9u8; 8][..])
        );
        assert!(got[1].critical());
        // Only the non-critical option: C clear.
        let f = round_trip(&encap_params(TunnelKind::Geneve, v4(), true, &opts[..8]));
        assert!(!parse(&f, default_kind).unwrap().unwrap().geneve_critical);
    }

    #[test]
    fn max_geneve_options_need_reserved_headroom() {
        let mut opts = Vec::new();
        push_geneve_option(&mut opts, 1, 1, &[7; 124]).unwrap();
        push_geneve_option(&mut opts, 2, 2, &[8; 120]).unwrap();
        assert_eq!(opts.len(), GENEVE_MAX_OPTIONS_LEN);
        let e = encap_params(TunnelKind::Geneve, v6(), true, &opts);
        let inner = inner_frame(1);
        let mut buf = PacketBuf::from_slice(&inner);
        assert_eq!(encap(&mut buf, &e), Err(TunnelError::Headroom));
        assert_eq!(buf.data(), &inner[..], "buffer changed on error");
        buf.reserve_headroom(overhead(TunnelKind::Geneve, true, opts.len()));
        encap(&mut buf, &e).unwrap();
        let d = parse(buf.data(), default_kind).unwrap().unwrap();
        assert_eq!(d.options(buf.data()), &opts[..]);
        assert_eq!(geneve_options(d.options(buf.data())).count(), 2);
    }

    #[test]
    fn encap_errors() {
        let inner = inner_frame(1);
        let mut buf = PacketBuf::from_slice(&inner);
        let mut e = encap_params(TunnelKind::Vxlan, v4(), true, &[]);
        e.ip_dst = v6().1;
        assert_eq!(encap(&mut buf, &e), Err(TunnelError::AddressFamily));
        let mut e = encap_params(TunnelKind::Vxlan, v4(), true, &[]);
        e.vni = 1 << 24;
        assert_eq!(encap(&mut buf, &e), Err(TunnelError::VniRange));
        let opts = two_options();
        let e = encap_params(TunnelKind::Vxlan, v4(), true, &opts);
        assert_eq!(encap(&mut buf, &e), Err(TunnelError::VxlanOptions));
        let e = encap_params(TunnelKind::Geneve, v4(), true, &opts[..6]);
        assert_eq!(encap(&mut buf, &e), Err(TunnelError::GeneveOptLen));
        // A TLV claiming more data than the block holds.
        let bad = [0, 1, 2, 3, 0, 0, 0, 0];
        let e = encap_params(TunnelKind::Geneve, v4(), true, &bad);
        assert_eq!(encap(&mut buf, &e), Err(TunnelError::GeneveOptLen));
        let long = [0u8; 256];
        let e = encap_params(TunnelKind::Geneve, v4(), true, &long);
        assert_eq!(encap(&mut buf, &e), Err(TunnelError::GeneveOptionsTooLong));
        assert_eq!(buf.data(), &inner[..]);

        let e = encap_params(TunnelKind::Vxlan, v4(), true, &[]);
        let mut short = PacketBuf::from_slice(&[0; 13]);
        assert_eq!(encap(&mut short, &e), Err(TunnelError::InnerTruncated));
        let mut tight = PacketBuf::with_headroom(49, 256);
        assert!(tight.set_data(&inner));
        assert_eq!(encap(&mut tight, &e), Err(TunnelError::Headroom));
        let mut exact = PacketBuf::with_headroom(50, 256);
        assert!(exact.set_data(&inner));
        assert_eq!(encap(&mut exact, &e), Ok(()));

        // IPv4 total length = 20 + 8 + 8 + inner.
        let mut huge = PacketBuf::from_slice(&vec![0u8; 65535 - 36 + 1]);
        assert_eq!(encap(&mut huge, &e), Err(TunnelError::TooLong));
        let mut fits = PacketBuf::from_slice(&vec![0u8; 65535 - 36]);
        assert_eq!(encap(&mut fits, &e), Ok(()));
        assert!(parse(fits.data(), default_kind).unwrap().is_some());
        // IPv6 payload length = 8 + 8 + inner.
        let e6 = encap_params(TunnelKind::Vxlan, v6(), true, &[]);
        let mut huge = PacketBuf::from_slice(&vec![0u8; 65535 - 16 + 1]);
        assert_eq!(encap(&mut huge, &e6), Err(TunnelError::TooLong));
        let mut fits = PacketBuf::from_slice(&vec![0u8; 65535 - 16]);
        assert_eq!(encap(&mut fits, &e6), Ok(()));
        assert!(parse(fits.data(), default_kind).unwrap().is_some());
    }

    #[test]
    fn push_geneve_option_checks_length() {
        let mut o = Vec::new();
        assert_eq!(
            push_geneve_option(&mut o, 1, 2, &[0; 3]),
            Err(TunnelError::GeneveOptData)
        );
        assert_eq!(
            push_geneve_option(&mut o, 1, 2, &[0; 128]),
            Err(TunnelError::GeneveOptData)
        );
        assert!(o.is_empty());
        push_geneve_option(&mut o, 0xabcd, 0x81, &[]).unwrap();
        push_geneve_option(&mut o, 1, 2, &[5; 124]).unwrap();
        assert_eq!(&o[..4], &[0xab, 0xcd, 0x81, 0]);
        assert_eq!(&o[4..8], &[0, 1, 2, 31]);
        assert_eq!(o.len(), 4 + 4 + 124);
    }

    #[test]
    fn offload_is_cleared() {
        let inner = inner_frame(1);
        let mut buf = PacketBuf::from_slice(&inner);
        buf.offload = Some(Offload::default());
        encap(&mut buf, &encap_params(TunnelKind::Vxlan, v4(), true, &[])).unwrap();
        assert!(buf.offload.is_none());
    }

    #[test]
    fn udp_checksum_errors() {
        for ips in [v4(), v6()] {
            let (f, _) = build(&encap_params(TunnelKind::Vxlan, ips, true, &[]));
            let l4 = f.len() - inner_frame(1234).len() - 16;
            let mut bad = f.clone();
            bad[l4 + 7] ^= 1;
            assert_eq!(parse(&bad, default_kind), Err(TunnelError::BadUdpChecksum));
            let mut bad = f.clone();
            *bad.last_mut().unwrap() ^= 0x40;
            assert_eq!(parse(&bad, default_kind), Err(TunnelError::BadUdpChecksum));
            let mut zero = f.clone();
            zero[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
            let want = if ips.0.is_ipv6() {
                Err(TunnelError::ZeroUdpChecksumV6)
            } else {
                Ok(())
            };
            assert_eq!(
                parse(&zero, default_kind).map(|d| assert!(!d.unwrap().udp_csum_present)),
                want
            );
        }
    }

    /// Frame built without UDP checksum (IPv4), so header bytes can be
    /// edited freely, plus the offset of the tunnel header.
    fn editable(kind: TunnelKind, opts: &[u8]) -> (Vec<u8>, usize) {
        let (f, _) = build(&encap_params(kind, v4(), false, opts));
        (f, 14 + 20 + 8)
    }

    fn fix_ip_csum(f: &mut [u8]) {
        ipv4::Packet::new_unchecked(&mut f[14..34]).fill_checksum();
    }

    #[test]
    fn header_errors() {
        let (f, t) = editable(TunnelKind::Vxlan, &[]);
        let mut bad = f.clone();
        bad[t] = 0;
        assert_eq!(parse(&bad, default_kind), Err(TunnelError::VxlanIFlag));
        // Reserved bits are ignored (RFC 7348 §5).
        let mut ok = f.clone();
        ok[t] = 0xff;
        ok[t + 7] = 0xff;
        assert_eq!(parse(&ok, default_kind).unwrap().unwrap().vni, 0x00ab_cdef);

        let mut bad = f.clone();
        bad[14 + 8] ^= 1; // TTL
        assert_eq!(parse(&bad, default_kind), Err(TunnelError::BadIpChecksum));
        let mut frag = f.clone();
        frag[14 + 6] |= 0x20; // MF
        fix_ip_csum(&mut frag);
        assert_eq!(parse(&frag, default_kind), Err(TunnelError::Fragment));
        let mut later = f.clone();
        later[14 + 7] = 1; // offset 8: no UDP header, not ours to judge
        fix_ip_csum(&mut later);
        assert_eq!(parse(&later, default_kind), Ok(None));
        let mut ulen = f.clone();
        ulen[14 + 20 + 5] -= 1;
        assert_eq!(parse(&ulen, default_kind), Err(TunnelError::BadUdpLength));
        let mut trailing = f.clone();
        trailing.push(0);
        assert_eq!(
            parse(&trailing, default_kind),
            Err(TunnelError::TrailingBytes)
        );
        let mut iplen = f.clone();
        iplen[14 + 2..14 + 4].copy_from_slice(&19u16.to_be_bytes());
        fix_ip_csum(&mut iplen);
        assert_eq!(parse(&iplen, default_kind), Err(TunnelError::BadIpLength));

        let opts = two_options();
        let (f, t) = editable(TunnelKind::Geneve, &opts);
        assert!(parse(&f, default_kind).unwrap().unwrap().geneve_critical);
        let mut bad = f.clone();
        bad[t] |= 0x40;
        assert_eq!(parse(&bad, default_kind), Err(TunnelError::GeneveVersion));
        let mut bad = f.clone();
        bad[t + 3] = 0x00;
        assert_eq!(parse(&bad, default_kind), Err(TunnelError::GeneveProtocol));
        let mut bad = f.clone();
        bad[t] = 0x3f; // 252 option bytes in a short packet
        assert_eq!(parse(&bad, default_kind), Err(TunnelError::GeneveOptLen));
        let mut bad = f.clone();
        bad[t + 8 + 3] = 2; // first TLV now overruns the 20-byte block
        bad[t + 8 + 8 + 3] = 0x1f;
        assert_eq!(parse(&bad, default_kind), Err(TunnelError::GeneveOptLen));
        let mut bad = f.clone();
        bad[t] = 4; // block ends in the middle of the second TLV
        assert_eq!(parse(&bad, default_kind), Err(TunnelError::GeneveOptLen));
    }

    #[test]
    fn inner_too_short() {
        let e = encap_params(TunnelKind::Vxlan, v4(), false, &[]);
        let mut buf = PacketBuf::from_slice(&[0xee; 14]);
        encap(&mut buf, &e).unwrap();
        assert!(parse(buf.data(), default_kind).unwrap().is_some());
        // Shrink IP and UDP lengths by one byte together with the frame.
        let mut f = buf.data().to_vec();
        f.pop();
        f[14 + 3] -= 1;
        f[14 + 20 + 5] -= 1;
        fix_ip_csum(&mut f);
        assert_eq!(parse(&f, default_kind), Err(TunnelError::InnerTruncated));
    }

    #[test]
    fn truncation_never_panics_and_never_parses() {
        let opts = two_options();
        for (kind, o) in [
            (TunnelKind::Vxlan, &[][..]),
            (TunnelKind::Geneve, &opts[..]),
        ] {
            for ips in [v4(), v6()] {
                for csum in [false, true] {
                    let (f, _) = build(&encap_params(kind, ips, csum, o));
                    assert!(parse(&f, default_kind).unwrap().is_some());
                    for cut in 0..f.len() {
                        let r = parse(&f[..cut], default_kind);
                        assert!(!matches!(r, Ok(Some(_))), "cut {cut}: {r:?}");
                        let r = parse(&f[..cut], |_| Some(kind));
                        assert!(!matches!(r, Ok(Some(_))), "cut {cut}: {r:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn not_tunnel_packets() {
        let dns = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(2, 2, 2, 2))
            .udp(1000, 53)
            .payload(&[0; 40])
            .build();
        assert_eq!(parse(&dns, default_kind), Ok(None));
        let tcp = FrameBuilder::new(A, B)
            .ipv6("::1".parse().unwrap(), "::2".parse().unwrap())
            .tcp(1000, VXLAN_PORT, 0x02)
            .payload(&[0; 40])
            .build();
        assert_eq!(parse(&tcp, default_kind), Ok(None));
        let ext = FrameBuilder::new(A, B)
            .ipv6("::1".parse().unwrap(), "::2".parse().unwrap())
            .ipv6_dest_opts(0)
            .udp(1000, VXLAN_PORT)
            .payload(&[0; 40])
            .build();
        assert_eq!(parse(&ext, default_kind), Ok(None));
        let arp = FrameBuilder::new(A, B)
            .arp(
                1,
                A,
                Ipv4Addr::new(1, 2, 3, 4),
                B,
                Ipv4Addr::new(1, 2, 3, 5),
            )
            .build();
        assert_eq!(parse(&arp, default_kind), Ok(None));
        assert_eq!(parse(&[], default_kind), Ok(None));
        // Custom port: 8472 (the pre-IANA Linux VXLAN port) only.
        let (f, _) = build(&encap_params(TunnelKind::Vxlan, v4(), true, &[]));
        let legacy = |p| (p == 8472).then_some(TunnelKind::Vxlan);
        assert_eq!(parse(&f, legacy), Ok(None));
        let mut e = encap_params(TunnelKind::Vxlan, v4(), true, &[]);
        e.udp_dst = 8472;
        let (f, _) = build(&e);
        assert_eq!(parse(&f, legacy).unwrap().unwrap().udp_dst, 8472);
        assert_eq!(parse(&f, default_kind), Ok(None));
    }

    /// RFC 7348 §5 layout, written out by hand: outer Ethernet, IPv4
    /// 192.168.1.1 -> 192.168.1.2 (DF, TTL 64, header checksum 0xb761), UDP
    /// 49153 -> 4789 without checksum, VXLAN flags 0x08 VNI 4242, and a
    /// 20-byte inner frame.
    const KNOWN_VXLAN: [u8; 70] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // outer dst MAC
        0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, // outer src MAC
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x38, // v4, IHL 5, TOS 0, total 56
        0x00, 0x00, 0x40, 0x00, // ident 0, DF
        0x40, 0x11, 0xb7, 0x61, // TTL 64, UDP, checksum
        0xc0, 0xa8, 0x01, 0x01, // 192.168.1.1
        0xc0, 0xa8, 0x01, 0x02, // 192.168.1.2
        0xc0, 0x01, 0x12, 0xb5, // 49153 -> 4789
        0x00, 0x24, 0x00, 0x00, // UDP length 36, no checksum
        0x08, 0x00, 0x00, 0x00, // VXLAN flags: I
        0x00, 0x10, 0x92, 0x00, // VNI 4242
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // inner dst MAC
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // inner src MAC
        0x88, 0xb5, // local experimental EtherType
        b'h', b'e', b'l', b'l', b'o', b'!',
    ];

    #[test]
    fn known_vxlan_packet() {
        let d = parse(&KNOWN_VXLAN, default_kind).unwrap().unwrap();
        assert_eq!(d.kind, TunnelKind::Vxlan);
        assert_eq!(d.vni, 4242);
        assert_eq!(d.inner_off, 50);
        assert_eq!(d.ip_src, IpAddr::from([192, 168, 1, 1]));
        assert_eq!(d.ip_dst, IpAddr::from([192, 168, 1, 2]));
        assert_eq!((d.tos, d.ttl, d.udp_src, d.udp_dst), (0, 64, 49153, 4789));
        assert!(!d.udp_csum_present);
        assert_eq!(
            &d.inner(&KNOWN_VXLAN)[12..],
            &[0x88, 0xb5, b'h', b'e', b'l', b'l', b'o', b'!']
        );

        // The same packet behind an 802.1Q tag.
        let mut tagged = KNOWN_VXLAN[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        tagged.extend_from_slice(&KNOWN_VXLAN[12..]);
        let t = parse(&tagged, default_kind).unwrap().unwrap();
        assert_eq!((t.vni, t.inner_off), (4242, 54));
        assert_eq!(t.inner(&tagged), d.inner(&KNOWN_VXLAN));

        // encap reproduces it byte for byte.
        let mut buf = PacketBuf::from_slice(&KNOWN_VXLAN[50..]);
        let e = Encap {
            kind: TunnelKind::Vxlan,
            eth_src: [0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb],
            eth_dst: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55],
            ip_src: d.ip_src,
            ip_dst: d.ip_dst,
            tos: 0,
            ttl: 64,
            df: true,
            udp_src: 49153,
            udp_dst: VXLAN_PORT,
            csum: false,
            vni: 4242,
            geneve_options: &[],
            geneve_oam: false,
        };
        encap(&mut buf, &e).unwrap();
        assert_eq!(buf.data(), &KNOWN_VXLAN[..]);
    }

    #[test]
    fn entropy_port_properties() {
        let f = inner_frame(1000);
        let p = entropy_port(&f);
        assert_eq!(p, entropy_port(&f));
        assert_eq!(p, entropy_port(&inner_frame(1000)));
        let mut ports = std::collections::HashSet::new();
        for sport in 0..100 {
            let p = entropy_port(&inner_frame(2000 + sport));
            assert!(p >= ENTROPY_PORT_MIN);
            ports.insert(p);
        }
        assert!(ports.len() >= 50, "only {} distinct ports", ports.len());
        // Payload bytes do not matter, addresses do.
        let other_payload = FrameBuilder::new(A, B)
            .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
            .tcp(1000, 80, 0x10)
            .payload(b"something else entirely")
            .build();
        assert_eq!(entropy_port(&other_payload), p);
        // Fragments of one datagram agree, whatever their ports look like.
        let frag = |off: u16, l4: u16| {
            FrameBuilder::new(A, B)
                .ipv6(
                    "2001:db8::1".parse().unwrap(),
                    "2001:db8::2".parse().unwrap(),
                )
                .ipv6_fragment(off, true, 7)
                .udp(l4, l4)
                .build()
        };
        assert_eq!(entropy_port(&frag(0, 1)), entropy_port(&frag(0, 2)));
        // Unparseable or tiny frames still get a port.
        for len in 0..40 {
            assert!(entropy_port(&vec![0xa5; len]) >= ENTROPY_PORT_MIN);
        }
        let mut macs = std::collections::HashSet::new();
        for i in 0..100u8 {
            macs.insert(entropy_port(&[
                i, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xb5,
            ]));
        }
        assert!(macs.len() >= 50);
    }

    #[test]
    fn geneve_option_iterator_stops_on_garbage() {
        assert_eq!(geneve_options(&[]).count(), 0);
        assert_eq!(geneve_options(&[1, 2, 3]).count(), 0);
        assert_eq!(geneve_options(&[1, 2, 3, 1, 0, 0]).count(), 0);
        let mut o = two_options();
        o.extend_from_slice(&[0, 0, 0, 0x1f]);
        let mut it = geneve_options(&o);
        assert_eq!(it.by_ref().count(), 2);
        assert_eq!(it.next(), None);
        for len in 0..64usize {
            let data: Vec<u8> = (0..len).map(|i| (i * 29 + 3) as u8).collect();
            for opt in geneve_options(&data) {
                assert!(opt.data.len() <= GENEVE_MAX_OPT_DATA_LEN);
            }
        }
    }

    #[test]
    fn error_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for (i, e) in TunnelError::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
            assert!(names.insert(e.name()));
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(TunnelError::Headroom.name(), "headroom");
        assert_eq!(
            TunnelError::ZeroUdpChecksumV6.name(),
            "zero_udp_checksum_v6"
        );
        assert_eq!(TunnelKind::Geneve.name(), "geneve");
        assert_eq!(default_kind(GENEVE_PORT), Some(TunnelKind::Geneve));
        assert_eq!(default_kind(53), None);
    }

    #[test]
    fn overhead_values() {
        assert_eq!(overhead(TunnelKind::Vxlan, false, 0), 50);
        assert_eq!(overhead(TunnelKind::Vxlan, true, 99), 70);
        assert_eq!(overhead(TunnelKind::Geneve, false, 8), 58);
        assert_eq!(overhead(TunnelKind::Geneve, true, 252), 322);
        assert_eq!(overhead(TunnelKind::Geneve, true, usize::MAX), usize::MAX);
    }
}
