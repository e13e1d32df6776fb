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
            if l.l4 == L4Kind::Icmpv6 {
                let end = (l4 + usize::from(l.l4_len)).min(frame.len());
                extract_nd(frame.get(l4..end).unwrap_or(&[]), key);
            }
        }
        _ => {}
    }
    Ok(l)
}

/// ICMPv6 neighbor solicitation (135) / advertisement (136).
const ND_NEIGHBOR_SOLICIT: u8 = 135;
const ND_NEIGHBOR_ADVERT: u8 = 136;
/// ND option types: source / target link-layer address.
const ND_OPT_SOURCE_LINKADDR: u8 = 1;
const ND_OPT_TARGET_LINKADDR: u8 = 2;

/// Fill `nd_target`, `nd_sll` (`arp_sha`) and `nd_tll` (`arp_tha`) from an
/// ICMPv6 message (`msg`: the ICMPv6 header to the end of the IPv6
/// payload), as Open vSwitch's `parse_icmpv6`: only for code 0 of types
/// 135/136; a message too short for its target has none; Ethernet-sized
/// (8-byte) link-layer address options are read wherever they stand (a
/// solicitation's SLL, an advertisement's TLL, or the other one); a
/// zero-length or truncated option, or a second non-zero SLL/TLL, makes
/// the options invalid and all three fields are zero then (the packet is
/// still forwarded: OVS does the same).
fn extract_nd(msg: &[u8], key: &mut FlowKey) {
    let (Some(&ty), Some(&code)) = (msg.first(), msg.get(1)) else {
        return;
    };
    if code != 0 || (ty != ND_NEIGHBOR_SOLICIT && ty != ND_NEIGHBOR_ADVERT) {
        return;
    }
    let Some(target) = msg.get(8..24) else {
        return;
    };
    key.nd_target.copy_from_slice(target);
    let mut opts = &msg[24..];
    while opts.len() >= 8 {
        let len = usize::from(opts[1]) * 8;
        if len == 0 || len > opts.len() {
            return invalid_nd(key);
        }
        if len == 8 {
            let slot = match opts[0] {
                ND_OPT_SOURCE_LINKADDR => Some(&mut key.arp_sha),
                ND_OPT_TARGET_LINKADDR => Some(&mut key.arp_tha),
                _ => None,
            };
            if let Some(slot) = slot {
                if *slot != [0; 6] {
                    return invalid_nd(key);
                }
                slot.copy_from_slice(&opts[2..8]);
            }
        }
        opts = &opts[len..];
    }
}

fn invalid_nd(key: &mut FlowKey) {
    key.nd_target = [0; 16];
    key.arp_sha = [0; 6];
    key.arp_tha = [0; 6];
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv6 + an ICMPv6 message of `ty`/`code` with `target` and
    /// `opts` (raw option bytes); checksums are not needed to extract.
    pub(crate) fn nd_frame(ty: u8, code: u8, target: [u8; 16], opts: &[u8]) -> Vec<u8> {
        let mut f = vec![0x33, 0x33, 0xff, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let plen = 24 + opts.len();
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(plen as u16).to_be_bytes());
        f.extend_from_slice(&[58, 255]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 2]);
        f.extend_from_slice(&[ty, code, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(&target);
        f.extend_from_slice(opts);
        f
    }

    const T: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    fn key(f: &[u8]) -> FlowKey {
        let mut k = FlowKey::default();
        extract(f, 1, &mut k).unwrap();
        k
    }

    #[test]
    fn solicitation_target_and_sll() {
        let k = key(&nd_frame(135, 0, T, &[1, 1, 2, 0, 0, 0, 0, 1]));
        assert_eq!((k.tp_src, k.tp_dst, k.nw_proto), (135, 0, 58));
        assert_eq!(k.nd_target, T);
        assert_eq!(k.arp_sha, [2, 0, 0, 0, 0, 1]);
        assert_eq!(k.arp_tha, [0; 6]);
    }

    #[test]
    fn advertisement_tll_after_an_unknown_option() {
        let opts = [
            99, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // 16-byte option
            2, 1, 2, 0, 0, 0, 0, 9,
        ];
        let k = key(&nd_frame(136, 0, T, &opts));
        assert_eq!(k.nd_target, T);
        assert_eq!(k.arp_tha, [2, 0, 0, 0, 0, 9]);
        assert_eq!(k.arp_sha, [0; 6]);
    }

    #[test]
    fn no_nd_fields_unless_nd_of_code_0() {
        for (ty, code) in [(135, 1), (128, 0), (134, 0)] {
            let k = key(&nd_frame(ty, code, T, &[1, 1, 2, 0, 0, 0, 0, 1]));
            assert_eq!(k.nd_target, [0; 16], "{ty}/{code}");
            assert_eq!(k.arp_sha, [0; 6], "{ty}/{code}");
        }
        // Too short for a target: type and code only.
        let mut f = nd_frame(135, 0, T, &[]);
        f.truncate(f.len() - 8);
        f[18..20].copy_from_slice(&16u16.to_be_bytes());
        let k = key(&f);
        assert_eq!((k.tp_src, k.nd_target), (135, [0; 16]));
    }

    #[test]
    fn bad_options_clear_every_nd_field() {
        for opts in [
            // zero-length option
            vec![1, 0, 2, 0, 0, 0, 0, 1],
            // option longer than the message
            vec![1, 1, 2, 0, 0, 0, 0, 1, 2, 2, 0, 0, 0, 0, 0, 0],
            // two SLLs
            vec![1, 1, 2, 0, 0, 0, 0, 1, 1, 1, 2, 0, 0, 0, 0, 2],
        ] {
            let k = key(&nd_frame(135, 0, T, &opts));
            assert_eq!(k.nd_target, [0; 16], "{opts:?}");
            assert_eq!(k.arp_sha, [0; 6], "{opts:?}");
            assert_eq!(k.tp_src, 135);
        }
        // Ethernet padding after the message is not an option.
        let mut f = nd_frame(135, 0, T, &[1, 1, 2, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[1, 1, 9, 9, 9, 9, 9, 9]);
        let k = key(&f);
        assert_eq!(k.arp_sha, [2, 0, 0, 0, 0, 1]);
    }

    /// A plain model of OVS's `parse_icmpv6` option walk, over option
    /// lists built from (type, length in 8-byte units, fill byte).
    fn model(opts: &[(u8, u8, u8)], bytes: &[u8]) -> ([u8; 16], [u8; 6], [u8; 6]) {
        let (mut sll, mut tll) = ([0u8; 6], [0u8; 6]);
        let mut off = 0;
        for &(ty, len, _) in opts {
            // Fewer than 8 bytes left end the walk (OVS's `while (size >= 8)`).
            if bytes.len() - off < 8 {
                break;
            }
            let n = usize::from(len) * 8;
            if n == 0 || off + n > bytes.len() {
                return ([0; 16], [0; 6], [0; 6]);
            }
            if n == 8 && (ty == 1 || ty == 2) {
                let slot = if ty == 1 { &mut sll } else { &mut tll };
                if *slot != [0; 6] {
                    return ([0; 16], [0; 6], [0; 6]);
                }
                slot.copy_from_slice(&bytes[off + 2..off + 8]);
            }
            off += n;
        }
        (T, sll, tll)
    }

    proptest::proptest! {
        /// Option lists of every shape (zero-length, truncated, repeated,
        /// unknown): the key is what the model says, and nothing panics.
        #[test]
        fn nd_options_as_the_model(
            opts in proptest::collection::vec((0u8..4, 0u8..3, proptest::num::u8::ANY), 0..5),
            cut in 0usize..16,
            ty in proptest::sample::select(vec![135u8, 136]),
        ) {
            let mut bytes = Vec::new();
            for &(t, len, fill) in &opts {
                let n = (usize::from(len) * 8).max(2);
                let mut o = vec![fill; n];
                o[0] = t;
                o[1] = len;
                bytes.extend_from_slice(&o);
            }
            let cut = cut.min(bytes.len());
            bytes.truncate(bytes.len() - cut);
            let k = key(&nd_frame(ty, 0, T, &bytes));
            let (target, sll, tll) = model(&opts, &bytes);
            proptest::prop_assert_eq!(k.nd_target, target);
            proptest::prop_assert_eq!(k.arp_sha, sll);
            proptest::prop_assert_eq!(k.arp_tha, tll);
        }

        /// Any bytes after an ICMPv6 header: extraction never panics and
        /// leaves the ND fields zero unless the message is ND of code 0.
        #[test]
        fn any_icmpv6_message_is_safe(ty: u8, code: u8, rest in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let mut f = nd_frame(ty, code, T, &[]);
            f.truncate(f.len() - 24);
            f.extend_from_slice(&[ty, code, 0, 0]);
            f.extend_from_slice(&rest);
            let plen = (4 + rest.len()) as u16;
            f[18..20].copy_from_slice(&plen.to_be_bytes());
            let mut k = FlowKey::default();
            if extract(&f, 1, &mut k).is_ok() && (code != 0 || !(135..=136).contains(&ty)) {
                proptest::prop_assert_eq!(k.nd_target, [0; 16]);
                proptest::prop_assert_eq!(k.arp_sha, [0; 6]);
            }
        }
    }
}
