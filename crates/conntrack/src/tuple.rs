//! Connection keys and their extraction from packet bytes (OVS
//! `conn_key_extract`, `extract_l3_ipv4/6`, `extract_l4_*`, `check_l4_*` in
//! lib/conntrack.c).
//!
//! Everything here works on a borrowed byte slice, bounds-checks every read
//! and never allocates: the result is a fixed-size [`ConnKey`] that is used
//! as-is as the hash map key.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::InvalidReason;

pub(crate) const ETH_TYPE_IP: u16 = 0x0800;
pub(crate) const ETH_TYPE_IPV6: u16 = 0x86dd;

pub(crate) const IPPROTO_ICMP: u8 = 1;
pub(crate) const IPPROTO_TCP: u8 = 6;
pub(crate) const IPPROTO_UDP: u8 = 17;
pub(crate) const IPPROTO_ICMPV6: u8 = 58;
pub(crate) const IPPROTO_SCTP: u8 = 132;

const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_AH: u8 = 51;
const IPPROTO_DSTOPTS: u8 = 60;

pub(crate) const ICMP4_ECHO_REPLY: u8 = 0;
const ICMP4_DST_UNREACH: u8 = 3;
const ICMP4_SOURCEQUENCH: u8 = 4;
const ICMP4_REDIRECT: u8 = 5;
pub(crate) const ICMP4_ECHO_REQUEST: u8 = 8;
const ICMP4_TIME_EXCEEDED: u8 = 11;
const ICMP4_PARAM_PROB: u8 = 12;
pub(crate) const ICMP4_TIMESTAMP: u8 = 13;
const ICMP4_TIMESTAMPREPLY: u8 = 14;
pub(crate) const ICMP4_INFOREQUEST: u8 = 15;
const ICMP4_INFOREPLY: u8 = 16;

const ICMP6_DST_UNREACH: u8 = 1;
const ICMP6_PACKET_TOO_BIG: u8 = 2;
const ICMP6_TIME_EXCEEDED: u8 = 3;
const ICMP6_PARAM_PROB: u8 = 4;
pub(crate) const ICMP6_ECHO_REQUEST: u8 = 128;
pub(crate) const ICMP6_ECHO_REPLY: u8 = 129;

/// Bytes of the embedded L4 header an ICMPv4 error must carry
/// (`ICMP_ERROR_DATA_L4_LEN`, RFC 792 guarantees 8).
const ICMP_ERROR_DATA_L4_LEN: usize = 8;

/// One side of a connection (`struct ct_endpoint`). For ICMP `port` holds
/// the echo identifier and `icmp_type`/`icmp_code` are set; for other
/// protocols the ICMP fields are zero. IPv4 addresses use the first four
/// bytes of `addr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Endpoint {
    pub addr: [u8; 16],
    pub port: u16,
    pub icmp_type: u8,
    pub icmp_code: u8,
}

/// The lookup key (`struct conn_key`): 44 bytes, `Copy`, hashed directly.
/// Field order is the dump sort order (zone, family, addresses, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ConnKey {
    pub zone: u16,
    pub ipv6: bool,
    pub src: Endpoint,
    pub dst: Endpoint,
    pub nw_proto: u8,
}

impl ConnKey {
    /// `conn_key_reverse`.
    pub fn reversed(&self) -> ConnKey {
        ConnKey {
            src: self.dst,
            dst: self.src,
            ..*self
        }
    }

    /// Whether the ICMP fields (not ports) are meaningful, per the
    /// family-specific test of `write_ct_md` / `conn_key_to_tuple`.
    pub fn is_icmp(&self) -> bool {
        if self.ipv6 {
            self.nw_proto == IPPROTO_ICMPV6
        } else {
            self.nw_proto == IPPROTO_ICMP
        }
    }

    fn ip(&self, a: &[u8; 16]) -> IpAddr {
        if self.ipv6 {
            IpAddr::V6(Ipv6Addr::from(*a))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        }
    }

    /// The tuple OVS writes into the packet metadata (`write_ct_md`): for
    /// ICMP `sport` is the type and `dport` the code (of the `src` side).
    pub fn to_tuple(self) -> Tuple {
        let (sport, dport) = if self.is_icmp() {
            (u16::from(self.src.icmp_type), u16::from(self.src.icmp_code))
        } else {
            (self.src.port, self.dst.port)
        };
        Tuple {
            src: self.ip(&self.src.addr),
            dst: self.ip(&self.dst.addr),
            proto: self.nw_proto,
            sport,
            dport,
        }
    }
}

/// A connection tuple as OpenFlow sees it (`ct_nw_src/dst`,
/// `ct_ipv6_src/dst`, `ct_nw_proto`, `ct_tp_src/dst`). For ICMP and ICMPv6
/// OVS puts the ICMP type in `sport` and the code in `dport`
/// (`write_ct_md`); the echo identifier is not part of it (see
/// [`crate::EntryView::icmp_id`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

/// The TCP fields the window tracker needs, read once at extraction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpSeg {
    /// `TCP_FLAGS(tcp_ctl)`: the low 12 bits of the offset/flags word.
    pub flags: u16,
    pub seq: u32,
    pub ack: u32,
    pub win: u16,
    pub payload_len: u32,
    /// `tcp_get_wscale`, computed only for SYNs (0 otherwise).
    pub wscale: u8,
}

/// A successfully extracted packet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parsed {
    /// Key to look up. For ICMP errors this is the embedded packet's key,
    /// reversed, as in `extract_l4_icmp`.
    pub key: ConnKey,
    /// The packet is an ICMP error about `key`'s connection.
    pub icmp_related: bool,
    /// TCP segment info when `key.nw_proto` is TCP and not related.
    pub tcp: Option<TcpSeg>,
    /// L3 length (IP header + payload, padding trimmed), for byte counters.
    pub l3_len: u32,
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

fn be32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Extracts the key of one packet; `l3` starts at the IP header.
/// `conn_key_extract` in lib/conntrack.c, minus checksum validation (see the
/// crate docs) and with fragments rejected instead of reassembled.
pub(crate) fn extract(dl_type: u16, l3: &[u8], zone: u16) -> Result<Parsed, InvalidReason> {
    let mut key = ConnKey {
        zone,
        ..ConnKey::default()
    };
    let (l4, l3_len) = match dl_type {
        ETH_TYPE_IP => {
            let (hdr_len, tot_len) = ipv4_lengths(l3)?;
            let ip = &l3[..tot_len];
            if frag_off(ip) & 0x3fff != 0 {
                return Err(InvalidReason::Fragment);
            }
            fill_l3_ipv4(&mut key, ip);
            (&ip[hdr_len..], tot_len)
        }
        ETH_TYPE_IPV6 => {
            if l3.len() < 40 {
                return Err(InvalidReason::L3Truncated);
            }
            if l3[0] >> 4 != 6 {
                return Err(InvalidReason::BadL3Header);
            }
            // Trim link-layer padding like miniflow_extract's l2_pad_size.
            let plen = usize::from(u16::from_be_bytes([l3[4], l3[5]]));
            let tot = 40 + plen;
            if tot > l3.len() {
                return Err(InvalidReason::L3Truncated);
            }
            let ip = &l3[..tot];
            let l4 = fill_l3_ipv6(&mut key, ip)?;
            (l4, tot)
        }
        _ => return Err(InvalidReason::NotIp),
    };
    key.ipv6 = dl_type == ETH_TYPE_IPV6;
    let mut parsed = Parsed {
        key,
        icmp_related: false,
        tcp: None,
        // At most 65535 + 40, always fits.
        l3_len: l3_len as u32,
    };
    extract_l4_outer(&mut parsed, l4)?;
    Ok(parsed)
}

/// Returns (header length, total length) after the checks of
/// `extract_l3_ipv4` plus the total-length sanity check miniflow_extract
/// does before conntrack ever sees the packet.
fn ipv4_lengths(l3: &[u8]) -> Result<(usize, usize), InvalidReason> {
    if l3.len() < 20 {
        return Err(InvalidReason::L3Truncated);
    }
    if l3[0] >> 4 != 4 {
        return Err(InvalidReason::BadL3Header);
    }
    let hdr_len = usize::from(l3[0] & 0x0f) * 4;
    if hdr_len < 20 {
        return Err(InvalidReason::BadL3Header);
    }
    if hdr_len > l3.len() {
        return Err(InvalidReason::L3Truncated);
    }
    let tot_len = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
    if tot_len < hdr_len {
        return Err(InvalidReason::BadL3Header);
    }
    if tot_len > l3.len() {
        return Err(InvalidReason::L3Truncated);
    }
    Ok((hdr_len, tot_len))
}

fn frag_off(ip: &[u8]) -> u16 {
    u16::from_be_bytes([ip[6], ip[7]])
}

/// Caller guarantees `ip.len() >= 20`.
fn fill_l3_ipv4(key: &mut ConnKey, ip: &[u8]) {
    key.src.addr[..4].copy_from_slice(&ip[12..16]);
    key.dst.addr[..4].copy_from_slice(&ip[16..20]);
    key.nw_proto = ip[9];
}

/// `extract_l3_ipv6` + `parse_ipv6_ext_hdrs` (lib/flow.c). Returns the L4
/// bytes. Caller guarantees `ip.len() >= 40`.
fn fill_l3_ipv6<'a>(key: &mut ConnKey, ip: &'a [u8]) -> Result<&'a [u8], InvalidReason> {
    key.src.addr.copy_from_slice(&ip[8..24]);
    key.dst.addr.copy_from_slice(&ip[24..40]);
    let mut nxt = ip[6];
    let mut data = &ip[40..];
    loop {
        match nxt {
            IPPROTO_HOPOPTS | IPPROTO_DSTOPTS | IPPROTO_ROUTING | IPPROTO_AH => {
                // Every extension header is at least 8 bytes.
                if data.len() < 8 {
                    return Err(InvalidReason::BadL3Header);
                }
                let len = if nxt == IPPROTO_AH {
                    (usize::from(data[1]) + 2) * 4
                } else {
                    (usize::from(data[1]) + 1) * 8
                };
                nxt = data[0];
                data = data.get(len..).ok_or(InvalidReason::BadL3Header)?;
            }
            IPPROTO_FRAGMENT => {
                if data.len() < 8 {
                    return Err(InvalidReason::BadL3Header);
                }
                // An "atomic fragment" (offset 0, M clear) is no fragment.
                if data[2] != 0 || data[3] != 0 {
                    return Err(InvalidReason::Fragment);
                }
                nxt = data[0];
                data = &data[8..];
            }
            _ => break,
        }
    }
    key.nw_proto = nxt;
    Ok(data)
}

/// `extract_l4` with a non-NULL `related`: the packet's own L4 header, with
/// the `check_l4_*` length checks (checksums deliberately skipped).
fn extract_l4_outer(p: &mut Parsed, l4: &[u8]) -> Result<(), InvalidReason> {
    let key = &mut p.key;
    match key.nw_proto {
        IPPROTO_TCP => {
            if l4.len() < 20 {
                return Err(InvalidReason::L4Truncated);
            }
            let doff = usize::from(l4[12] >> 4) * 4;
            if doff < 20 || doff > l4.len() {
                return Err(InvalidReason::BadL4Header);
            }
            ports(key, l4)?;
            let flags = u16::from_be_bytes([l4[12], l4[13]]) & 0x0fff;
            let seg = TcpSeg {
                flags,
                seq: be32(l4, 4).unwrap_or(0),
                ack: be32(l4, 8).unwrap_or(0),
                win: be16(l4, 14).unwrap_or(0),
                // doff <= len checked above.
                payload_len: (l4.len() - doff) as u32,
                wscale: if flags & crate::tcp::TCP_SYN != 0 {
                    crate::tcp::get_wscale(&l4[20..doff])
                } else {
                    0
                },
            };
            p.tcp = Some(seg);
            Ok(())
        }
        IPPROTO_UDP => {
            if l4.len() < 8 {
                return Err(InvalidReason::L4Truncated);
            }
            let udp_len = usize::from(u16::from_be_bytes([l4[4], l4[5]]));
            if udp_len < 8 || udp_len > l4.len() {
                return Err(InvalidReason::BadL4Header);
            }
            ports(key, l4)
        }
        IPPROTO_SCTP => {
            sctp_check_len(l4)?;
            ports(key, l4)
        }
        IPPROTO_ICMP if !key.ipv6 => {
            if l4.len() < 8 {
                return Err(InvalidReason::L4Truncated);
            }
            if icmp4_key(key, l4)? {
                icmp_error_inner(p, &l4[8..])
            } else {
                Ok(())
            }
        }
        IPPROTO_ICMPV6 if key.ipv6 => {
            // "All the messages that we support need at least 4 bytes
            // after the header".
            if l4.len() < 8 {
                return Err(InvalidReason::L4Truncated);
            }
            if icmp6_key(key, l4)? {
                icmp_error_inner(p, &l4[8..])
            } else {
                Ok(())
            }
        }
        // "For all other protocols we do not have L4 keys, so keep them zero."
        _ => Ok(()),
    }
}

/// Reads source and destination ports; port 0 is invalid. Caller
/// guarantees 4 bytes.
fn ports(key: &mut ConnKey, l4: &[u8]) -> Result<(), InvalidReason> {
    key.src.port = u16::from_be_bytes([l4[0], l4[1]]);
    key.dst.port = u16::from_be_bytes([l4[2], l4[3]]);
    if key.src.port == 0 || key.dst.port == 0 {
        return Err(InvalidReason::PortZero);
    }
    Ok(())
}

/// `sctp_check_len`: a 12-byte common header followed by chunks whose
/// 4-byte-padded lengths add up exactly to the packet.
fn sctp_check_len(l4: &[u8]) -> Result<(), InvalidReason> {
    if l4.len() < 12 {
        return Err(InvalidReason::L4Truncated);
    }
    let mut next = 12usize;
    while next < l4.len() {
        let len = be16(l4, next + 2).ok_or(InvalidReason::BadL4Header)?;
        if len < 4 {
            return Err(InvalidReason::BadL4Header);
        }
        next += usize::from(len).div_ceil(4) * 4;
    }
    if next == l4.len() {
        Ok(())
    } else {
        Err(InvalidReason::BadL4Header)
    }
}

/// `reverse_icmp_type`; only called for the echo-like types.
pub(crate) fn reverse_icmp_type(t: u8) -> u8 {
    match t {
        ICMP4_ECHO_REQUEST => ICMP4_ECHO_REPLY,
        ICMP4_ECHO_REPLY => ICMP4_ECHO_REQUEST,
        ICMP4_TIMESTAMP => ICMP4_TIMESTAMPREPLY,
        ICMP4_TIMESTAMPREPLY => ICMP4_TIMESTAMP,
        ICMP4_INFOREQUEST => ICMP4_INFOREPLY,
        ICMP4_INFOREPLY => ICMP4_INFOREQUEST,
        other => other,
    }
}

/// `reverse_icmp6_type`.
pub(crate) fn reverse_icmp6_type(t: u8) -> u8 {
    match t {
        ICMP6_ECHO_REQUEST => ICMP6_ECHO_REPLY,
        ICMP6_ECHO_REPLY => ICMP6_ECHO_REQUEST,
        other => other,
    }
}

/// Fills the ICMPv4 part of the key (`extract_l4_icmp`). Returns `true` for
/// an error message whose embedded packet must be parsed next. Caller
/// guarantees 8 bytes.
fn icmp4_key(key: &mut ConnKey, l4: &[u8]) -> Result<bool, InvalidReason> {
    let (ty, code) = (l4[0], l4[1]);
    match ty {
        ICMP4_ECHO_REQUEST | ICMP4_ECHO_REPLY | ICMP4_TIMESTAMP | ICMP4_TIMESTAMPREPLY
        | ICMP4_INFOREQUEST | ICMP4_INFOREPLY => {
            if code != 0 {
                return Err(InvalidReason::IcmpUnsupported);
            }
            // "Separate ICMP connection: identified using id".
            let id = u16::from_be_bytes([l4[4], l4[5]]);
            key.src.port = id;
            key.dst.port = id;
            key.src.icmp_type = ty;
            key.dst.icmp_type = reverse_icmp_type(ty);
            Ok(false)
        }
        ICMP4_DST_UNREACH | ICMP4_TIME_EXCEEDED | ICMP4_PARAM_PROB | ICMP4_SOURCEQUENCH
        | ICMP4_REDIRECT => Ok(true),
        _ => Err(InvalidReason::IcmpUnsupported),
    }
}

/// `extract_l4_icmp6`. Caller guarantees 8 bytes.
fn icmp6_key(key: &mut ConnKey, l4: &[u8]) -> Result<bool, InvalidReason> {
    let (ty, code) = (l4[0], l4[1]);
    match ty {
        ICMP6_ECHO_REQUEST | ICMP6_ECHO_REPLY => {
            if code != 0 {
                return Err(InvalidReason::IcmpUnsupported);
            }
            let id = u16::from_be_bytes([l4[4], l4[5]]);
            key.src.port = id;
            key.dst.port = id;
            key.src.icmp_type = ty;
            key.dst.icmp_type = reverse_icmp6_type(ty);
            Ok(false)
        }
        ICMP6_DST_UNREACH | ICMP6_PACKET_TOO_BIG | ICMP6_TIME_EXCEEDED | ICMP6_PARAM_PROB => {
            Ok(true)
        }
        _ => Err(InvalidReason::IcmpUnsupported),
    }
}

/// The embedded-packet half of `extract_l4_icmp` / `extract_l4_icmp6`:
/// parse the quoted IP header and the start of its L4 header, require that
/// the quoted source is the error's destination, and replace the key with
/// the quoted packet's key reversed (the error travels against the quoted
/// packet's direction).
fn icmp_error_inner(p: &mut Parsed, inner: &[u8]) -> Result<(), InvalidReason> {
    let outer = p.key;
    let mut ik = ConnKey {
        zone: outer.zone,
        ipv6: outer.ipv6,
        ..ConnKey::default()
    };
    let bad = InvalidReason::IcmpBadEmbedded;
    let l4 = if outer.ipv6 {
        if inner.len() < 40 || inner[0] >> 4 != 6 {
            return Err(bad);
        }
        // extract_l3_ipv6 runs on the rest of the outer packet: no payload
        // length trimming for the quoted header.
        fill_l3_ipv6(&mut ik, inner).map_err(|_| bad)?
    } else {
        if inner.len() < 20 {
            return Err(bad);
        }
        let hdr_len = usize::from(inner[0] & 0x0f) * 4;
        if hdr_len < 20 || hdr_len > inner.len() {
            return Err(bad);
        }
        // IP_IS_LATER_FRAG: a first fragment still carries the ports.
        if frag_off(inner) & 0x1fff != 0 {
            return Err(bad);
        }
        fill_l3_ipv4(&mut ik, inner);
        &inner[hdr_len..]
    };
    if ik.src.addr != outer.dst.addr {
        return Err(bad);
    }
    // Nested extract_l4 with related == NULL: no header checks, only the
    // minimum length (8 bytes for ICMPv4 errors, the protocol header size
    // for ICMPv6), and no nested errors.
    let v4_len = (!outer.ipv6).then_some(ICMP_ERROR_DATA_L4_LEN);
    match ik.nw_proto {
        IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP => {
            let need = v4_len.unwrap_or(match ik.nw_proto {
                IPPROTO_TCP => 20,
                IPPROTO_UDP => 8,
                _ => 12,
            });
            if l4.len() < need {
                return Err(bad);
            }
            ports(&mut ik, l4).map_err(|_| bad)?;
        }
        IPPROTO_ICMP if !outer.ipv6 => inner_echo(&mut ik, l4, icmp4_key)?,
        IPPROTO_ICMPV6 if outer.ipv6 => inner_echo(&mut ik, l4, icmp6_key)?,
        _ => {}
    }
    p.key = ik.reversed();
    p.icmp_related = true;
    p.tcp = None;
    Ok(())
}

/// A quoted ICMP packet inside an ICMP error: only echo-like messages are
/// acceptable ("no such recursion is possible").
fn inner_echo(
    ik: &mut ConnKey,
    l4: &[u8],
    key_fn: fn(&mut ConnKey, &[u8]) -> Result<bool, InvalidReason>,
) -> Result<(), InvalidReason> {
    let bad = InvalidReason::IcmpBadEmbedded;
    if l4.len() < 8 || key_fn(ik, l4).map_err(|_| bad)? {
        return Err(bad);
    }
    Ok(())
}
