//! Flow key extraction: one pass from frame bytes to a [`FlowKey`].
//!
//! `nicflow_packet::parse::parse` has already validated every length this
//! reads (a frame it accepts has all the headers its [`Layout`] names), so
//! extraction is straight loads at known offsets. The `Layout` is returned
//! too: the action executor reuses it to rewrite headers without parsing
//! again.

use crate::key::{FlowKey, FRAG_ANY, FRAG_LATER, VLAN_CFI};
use nicflow_packet::parse::{self, L3Kind, L4Kind, Layout, ParseError};

#[inline]
fn be16(f: &[u8], at: usize) -> u16 {
    match f.get(at..at + 2) {
        Some(b) => u16::from_be_bytes([b[0], b[1]]),
        None => 0,
    }
}

#[inline]
fn be32(f: &[u8], at: usize) -> u32 {
    match f.get(at..at + 4) {
        Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

#[inline]
fn copy<const N: usize>(f: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(b) = f.get(at..at + N) {
        out.copy_from_slice(b);
    }
    out
}

#[inline]
fn byte(f: &[u8], at: usize) -> u8 {
    f.get(at).copied().unwrap_or(0)
}

/// Parse `frame` and fill `key` (which is fully overwritten). Malformed
/// frames return the reason; the caller counts and drops them.
#[inline]
pub fn extract(frame: &[u8], in_port: u32, key: &mut FlowKey) -> Result<Layout, ParseError> {
    let l = parse::parse(frame)?;
    *key = FlowKey::default();
    key.in_port = in_port;
    key.dl_dst = copy(frame, 0);
    key.dl_src = copy(frame, 6);
    if l.n_vlan >= 1 {
        key.vlan_tci = l.vlan_tags[0] | VLAN_CFI;
    }
    if l.n_vlan >= 2 {
        key.vlan_tci2 = l.vlan_tags[1] | VLAN_CFI;
    }
    // 802.3 length field instead of an ethertype: OVS's FLOW_DL_TYPE_NONE.
    key.dl_type = if l.ethertype < 0x0600 {
        0x05ff
    } else {
        l.ethertype
    };
    let l3 = l.l3_offset as usize;
    match l.l3 {
        L3Kind::Ipv4 => {
            key.nw_tos = byte(frame, l3 + 1);
            key.nw_ttl = byte(frame, l3 + 8);
            key.nw_proto = byte(frame, l3 + 9);
            key.nw_src = be32(frame, l3 + 12);
            key.nw_dst = be32(frame, l3 + 16);
        }
        L3Kind::Ipv6 => {
            let w = be32(frame, l3);
            key.nw_tos = (w >> 20) as u8;
            key.ipv6_label = w & 0x000f_ffff;
            key.nw_ttl = byte(frame, l3 + 7);
            key.nw_proto = l.ip_proto;
            key.ipv6_src = copy(frame, l3 + 8);
            key.ipv6_dst = copy(frame, l3 + 24);
        }
        L3Kind::Arp => {
            let op = be16(frame, l3 + 6);
            if op <= 0xff {
                key.nw_proto = op as u8;
            }
            key.arp_sha = copy(frame, l3 + 8);
            key.nw_src = be32(frame, l3 + 14);
            key.arp_tha = copy(frame, l3 + 18);
            key.nw_dst = be32(frame, l3 + 24);
        }
        _ => {}
    }
    if matches!(l.l3, L3Kind::Ipv4 | L3Kind::Ipv6) {
        key.nw_frag = 0;
        if l.is_fragment() {
            key.nw_frag |= FRAG_ANY;
        }
        if l.is_later_fragment() {
            key.nw_frag |= FRAG_LATER;
        }
    }
    let l4 = l.l4_offset as usize;
    match l.l4 {
        L4Kind::Tcp => {
            key.tp_src = be16(frame, l4);
            key.tp_dst = be16(frame, l4 + 2);
            key.tcp_flags = be16(frame, l4 + 12) & 0x0fff;
        }
        L4Kind::Udp | L4Kind::Sctp => {
            key.tp_src = be16(frame, l4);
            key.tp_dst = be16(frame, l4 + 2);
        }
        L4Kind::Icmp | L4Kind::Icmpv6 => {
            key.tp_src = byte(frame, l4) as u16;
            key.tp_dst = byte(frame, l4 + 1) as u16;
        }
        _ => {}
    }
    Ok(l)
}
