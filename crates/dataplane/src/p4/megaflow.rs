//! From one run of a P4 program to one datapath flow (PISCES's cache).
//!
//! The interpreter reports which bits of the received packet its decision
//! and its written values depended on, and the packets it sent. This
//! module turns that into what the datapath caches: a mask over the flow
//! key (each packet bit read maps to the key field nicflow's own parser
//! fills from the same bytes) and a flat action list (`set(...)` for every
//! field whose bytes changed, then `output`). A decision that reads or
//! writes bytes no key field or action covers (the IPv4 identification, a
//! custom header, a pushed header) is not cached: the packet is handled by
//! the interpreter, and so is every packet after it, with the reason
//! named. Before anything is cached the derived actions are replayed on
//! the packet with the executor's own rewrite code: only if that gives
//! the program's output byte for byte is the flow installed.

use crate::datapath::execute::apply_rewrite;
use crate::datapath::DpAction;
use nicflow_flow::{Field, FlowKey, FlowMask, Match};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::parse::{L3Kind, L4Kind, Layout};

/// Why a P4 decision stays in the slow path (as `dump-dp-flows` shows it,
/// after `not_offloaded:`). Reasons from the interpreter itself
/// (`p4-register`, ...) are passed through as text.
pub const UNKEYED_READ: &str = "p4-unkeyed-read";
pub const UNKEYED_WRITE: &str = "p4-unkeyed-write";
pub const HEADER_LAYOUT: &str = "p4-header-layout";
pub const UNVERIFIED: &str = "p4-unverified-rewrite";
pub const QINQ: &str = "p4-qinq";
pub const UNKNOWN_PORT: &str = "p4-unknown-port";
/// A copy went to the CPU port: each packet must reach the controller.
pub const PACKET_IN: &str = "p4-packet-in";
pub const MULTICAST: &str = "p4-multicast";
pub const MIN_LENGTH: &str = "p4-min-length";
pub const IP_OPTIONS: &str = "p4-ip-options";
pub const L2_LENGTH: &str = "p4-802.3-length";

/// How a span of packet bytes maps onto the flow key.
#[derive(Clone, Copy, Debug)]
enum Seg {
    /// `len` bytes holding the key field's value, big-endian.
    Field(Field),
    /// Bytes whose value the key fixes anyway (IPv4 version, with
    /// `dl_type` always matched): reading them adds nothing.
    Implied,
    /// A checksum the executor keeps right when it rewrites a field:
    /// reading it cannot be cached, writing it is left to the replay
    /// check.
    Checksum,
}

/// The byte map of one packet: (first byte, length, meaning), sorted.
struct ByteMap {
    segs: Vec<(usize, usize, Seg)>,
    /// First byte of the L4 header (reads there need `nw_proto`/`nw_frag`).
    l4: usize,
    l3: usize,
}

impl ByteMap {
    fn new(layout: &Layout) -> ByteMap {
        let mut segs = vec![
            (0, 6, Seg::Field(Field::DlDst)),
            (6, 6, Seg::Field(Field::DlSrc)),
        ];
        let mut off = 12;
        if layout.n_vlan >= 1 {
            // The TPID (0x8100 or 0x88a8) is not in the key: reading it
            // cannot be cached; the tag itself is.
            segs.push((14, 2, Seg::Field(Field::VlanTci)));
            off = 16;
        }
        if layout.ethertype >= 0x0600 {
            // An 802.3 length is not in the key (all lengths are 0x05ff).
            segs.push((off, 2, Seg::Field(Field::DlType)));
        }
        let l3 = layout.l3_offset as usize;
        match layout.l3 {
            L3Kind::Ipv4 => {
                segs.push((l3 + 1, 1, Seg::Field(Field::NwTos)));
                segs.push((l3 + 8, 1, Seg::Field(Field::NwTtl)));
                segs.push((l3 + 9, 1, Seg::Field(Field::NwProto)));
                segs.push((l3 + 10, 2, Seg::Checksum));
                segs.push((l3 + 12, 4, Seg::Field(Field::NwSrc)));
                segs.push((l3 + 16, 4, Seg::Field(Field::NwDst)));
            }
            L3Kind::Ipv6 => {
                segs.push((l3 + 7, 1, Seg::Field(Field::NwTtl)));
                if layout.l4_offset as usize == l3 + 40 {
                    segs.push((l3 + 6, 1, Seg::Field(Field::NwProto)));
                }
                segs.push((l3 + 8, 16, Seg::Field(Field::Ipv6Src)));
                segs.push((l3 + 24, 16, Seg::Field(Field::Ipv6Dst)));
            }
            L3Kind::Arp => {
                // htype/ptype/hlen/plen: nicflow's parser fills the ARP
                // fields only for Ethernet/IPv4 ARP, so they are implied
                // by an ARP opcode in the key (see `derive`).
                segs.push((l3, 6, Seg::Implied));
                segs.push((l3 + 6, 2, Seg::Field(Field::ArpOp)));
                segs.push((l3 + 8, 6, Seg::Field(Field::ArpSha)));
                segs.push((l3 + 14, 4, Seg::Field(Field::ArpSpa)));
                segs.push((l3 + 18, 6, Seg::Field(Field::ArpTha)));
                segs.push((l3 + 24, 4, Seg::Field(Field::ArpTpa)));
            }
            _ => {}
        }
        let l4 = layout.l4_offset as usize;
        match layout.l4 {
            L4Kind::Tcp => {
                segs.push((l4, 2, Seg::Field(Field::TpSrc)));
                segs.push((l4 + 2, 2, Seg::Field(Field::TpDst)));
                segs.push((l4 + 16, 2, Seg::Checksum));
            }
            L4Kind::Udp => {
                segs.push((l4, 2, Seg::Field(Field::TpSrc)));
                segs.push((l4 + 2, 2, Seg::Field(Field::TpDst)));
                segs.push((l4 + 6, 2, Seg::Checksum));
            }
            L4Kind::Icmp | L4Kind::Icmpv6 => {
                segs.push((l4, 1, Seg::Field(Field::TpSrc)));
                segs.push((l4 + 1, 1, Seg::Field(Field::TpDst)));
                segs.push((l4 + 2, 2, Seg::Checksum));
            }
            _ => {}
        }
        segs.sort_by_key(|s| s.0);
        ByteMap { segs, l4, l3 }
    }

    fn find(&self, byte: usize) -> Option<(usize, usize, Seg)> {
        self.segs
            .iter()
            .copied()
            .find(|(s, n, _)| byte >= *s && byte < s + n)
    }
}

/// Bits of special layouts that are not whole bytes: IPv4's version
/// nibble (implied by `dl_type`), IPv6's first word (version, traffic
/// class = `nw_tos`, flow label), TCP flags.
fn sub_byte(layout: &Layout, bit: usize) -> Option<(Field, u32)> {
    let l3 = layout.l3_offset as usize * 8;
    match layout.l3 {
        L3Kind::Ipv6 if bit >= l3 && bit < l3 + 32 => {
            let b = bit - l3;
            if b < 4 {
                None // version: implied (handled by the caller)
            } else if b < 12 {
                Some((Field::NwTos, (11 - b) as u32))
            } else {
                Some((Field::Ipv6Label, (31 - b) as u32))
            }
        }
        _ => {
            let l4 = layout.l4_offset as usize * 8;
            if layout.l4 == L4Kind::Tcp && bit >= l4 + 100 && bit < l4 + 112 {
                return Some((Field::TcpFlags, (l4 + 111 - bit) as u32));
            }
            None
        }
    }
}

/// What one run of the program decided, in packet terms.
pub struct Decision<'a> {
    /// (bit offset, bit count) ranges of the received packet it depended on.
    pub reads: &'a [(u32, u32)],
    pub in_port_read: bool,
    /// Packets sent: (bridge port, bytes), in order.
    pub outputs: &'a [(u32, Vec<u8>)],
    /// Provenance of the (last) output frame's bits: (bit offset in the
    /// frame, bit count, bit offset in the received packet if these are
    /// the packet's own bits unchanged, `None` if the program wrote them).
    pub emitted: &'a [(u32, u32, Option<u32>)],
    /// Bytes the program's parser needed: every packet of the flow must
    /// be at least this long, or it would have parsed differently.
    pub min_len: u32,
}

/// Bytes every packet sharing this one's L3 kind (`dl_type`, VLAN tag
/// present) is guaranteed to have, having passed nicflow's parser; and
/// with the same `nw_proto` and fragment bits as well.
fn guaranteed_len(layout: &Layout) -> (usize, usize) {
    let l3 = layout.l3_offset as usize;
    let (l3_min, l4_at) = match layout.l3 {
        L3Kind::Ipv4 => (l3 + 20, l3 + 20),
        L3Kind::Ipv6 => (l3 + 40, l3 + 40),
        L3Kind::Arp => (l3 + 28, l3 + 28),
        _ => (l3, l3),
    };
    let l4_min = match layout.l4 {
        L4Kind::Tcp => l4_at + 20,
        L4Kind::Udp => l4_at + 8,
        L4Kind::Icmp | L4Kind::Icmpv6 => l4_at + 4,
        _ => l3_min,
    };
    (l3_min, l4_min)
}

/// The megaflow for `d`: the mask over the key and the actions. `Err` is
/// the reason it cannot be cached.
pub fn derive(
    key: &FlowKey,
    packet: &[u8],
    layout: &Layout,
    d: &Decision<'_>,
) -> Result<(FlowMask, Vec<DpAction>), &'static str> {
    if layout.n_vlan > 1 {
        return Err(QINQ);
    }
    // The datapath never looks such packets up in P4 mode
    // (`Datapath::bypass_odd_ip`): their flows would be useless, and a
    // flow made from them would not say where L4 starts.
    if crate::datapath::odd_ip_layout(layout) {
        return Err(IP_OPTIONS);
    }
    if layout.ethertype < 0x0600 {
        return Err(L2_LENGTH);
    }
    let map = ByteMap::new(layout);
    let mut m = Match::catchall();
    // The layout the byte map assumed: always part of the match.
    m.set(Field::DlType, u128::from(key.dl_type), 0xffff);
    m.set(Field::VlanTci, u128::from(key.vlan_tci), 0x1000);
    let mut l4_used = false;
    // The run read the ARP format fields or the opcode's high byte.
    let mut arp_fixed = false;
    let add = |m: &mut Match, field: Field, bit_in_field: u32| {
        m.set(field, field.read(key), 1u128 << bit_in_field);
    };
    let ipv4_version = |bit: usize| layout.l3 == L3Kind::Ipv4 && bit / 8 == map.l3 && bit % 8 < 4;
    let ipv6_version =
        |bit: usize| layout.l3 == L3Kind::Ipv6 && bit >= map.l3 * 8 && bit < map.l3 * 8 + 4;
    if d.outputs.len() > 1 {
        return Err(MULTICAST);
    }
    // Output bits the program wrote; bits it moved (the packet's own bits
    // emitted elsewhere) make the output depend on their source bits.
    let out_len = d.outputs.first().map_or(0, |(_, o)| o.len());
    let mut written = vec![false; out_len * 8];
    let mut reads: Vec<(u32, u32)> = d.reads.to_vec();
    if let Some((_, out)) = d.outputs.first() {
        if out.len() != packet.len() {
            return Err(HEADER_LAYOUT);
        }
        let mut covered = 0usize;
        for &(at, len, from) in d.emitted {
            let (at, len) = (at as usize, len as usize);
            if at + len > written.len() {
                return Err(HEADER_LAYOUT);
            }
            covered += len;
            match from {
                Some(f) if f as usize == at => {}
                Some(f) => {
                    reads.push((f, len as u32));
                    written[at..at + len].iter_mut().for_each(|w| *w = true);
                }
                None => written[at..at + len].iter_mut().for_each(|w| *w = true),
            }
        }
        if covered != written.len() {
            // No (or partial) provenance: the byte diff alone could miss a
            // field written with the value it had.
            return Err(HEADER_LAYOUT);
        }
    }
    for &(off, len) in &reads {
        for bit in off as usize..(off as usize).saturating_add(len as usize) {
            if bit / 8 >= packet.len() {
                return Err(UNKEYED_READ);
            }
            if bit / 8 >= map.l4 && layout.l4 != L4Kind::None {
                l4_used = true;
            }
            if ipv4_version(bit) || ipv6_version(bit) {
                continue;
            }
            if let Some((f, b)) = sub_byte(layout, bit) {
                add(&mut m, f, b);
                continue;
            }
            match map.find(bit / 8) {
                Some((s, n, Seg::Field(f))) => {
                    let from_end = (s + n) * 8 - 1 - bit;
                    if f == Field::ArpOp && from_end >= 8 {
                        // The key keeps the opcode's low byte (OVS's
                        // nw_proto) when the high byte is 0: a non-zero
                        // low byte in the key vouches for it.
                        arp_fixed = true;
                        continue;
                    }
                    if f == Field::VlanTci && from_end == 12 {
                        // The DEI bit: the key keeps "tag present" there.
                        return Err(UNKEYED_READ);
                    }
                    add(&mut m, f, from_end as u32);
                }
                Some((_, _, Seg::Implied)) => {
                    if layout.l3 == L3Kind::Arp {
                        arp_fixed = true;
                    }
                }
                Some((_, _, Seg::Checksum)) | None => return Err(UNKEYED_READ),
            }
        }
    }
    if arp_fixed {
        // Only Ethernet/IPv4 ARP with an opcode <= 0xff has a non-zero
        // nw_proto in the key: matching it exactly proves the format
        // fields and the zero high byte for every packet of the flow.
        if key.nw_proto == 0 {
            return Err(UNKEYED_READ);
        }
        m.set(Field::NwProto, u128::from(key.nw_proto), 0xff);
    }
    let (l3_min, l4_min) = guaranteed_len(layout);
    if d.min_len as usize > l4_min {
        return Err(MIN_LENGTH);
    }
    if d.min_len as usize > l3_min {
        l4_used = true;
    }
    if d.in_port_read {
        m.set(Field::InPort, u128::from(key.in_port), u128::from(u32::MAX));
    }
    // Actions: a `set` for every key field the program wrote (even with
    // the value it had: other packets of the flow may differ there), then
    // the output; replayed to check.
    let mut actions = Vec::new();
    if let Some((port, out)) = d.outputs.first() {
        let byte_written = |i: usize| written[i * 8..i * 8 + 8].iter().any(|w| *w);
        let mut i = 0;
        while i < out.len() {
            if !byte_written(i) && out[i] == packet[i] {
                i += 1;
                continue;
            }
            if i >= map.l4 && layout.l4 != L4Kind::None {
                l4_used = true;
            }
            let Some((s, n, seg)) = map.find(i) else {
                // Sub-byte fields: IPv6 traffic class (settable), flow
                // label and TCP flags (not).
                if layout.l3 == L3Kind::Ipv6 && i >= map.l3 && i < map.l3 + 4 {
                    let w = &written[map.l3 * 8..map.l3 * 8 + 32];
                    let old =
                        u32::from_be_bytes(packet[map.l3..map.l3 + 4].try_into().unwrap_or([0; 4]));
                    let new =
                        u32::from_be_bytes(out[map.l3..map.l3 + 4].try_into().unwrap_or([0; 4]));
                    let label_or_version_written = w[..4].iter().chain(&w[12..]).any(|b| *b);
                    if label_or_version_written || (old ^ new) & 0xf00f_ffff != 0 {
                        return Err(UNKEYED_WRITE);
                    }
                    // Traffic class bits not written keep the packet's:
                    // the flow must fix them.
                    for (b, wb) in w[4..12].iter().enumerate() {
                        if !wb {
                            m.set(Field::NwTos, u128::from(key.nw_tos), 1 << (7 - b));
                        }
                    }
                    actions.push(DpAction::SetTos((new >> 20) as u8));
                    i = map.l3 + 4;
                    continue;
                }
                return Err(UNKEYED_WRITE);
            };
            match seg {
                Seg::Checksum => {}
                Seg::Implied => {
                    if out[s..s + n] != packet[s..s + n] {
                        return Err(UNKEYED_WRITE);
                    }
                }
                Seg::Field(f) => {
                    actions.push(set_action(f, &out[s..s + n])?);
                    // Bits of the field the program did not write keep the
                    // packet's value: the flow must fix them, since the
                    // `set` writes the whole field.
                    for (bit, w) in written.iter().enumerate().take((s + n) * 8).skip(s * 8) {
                        if !w {
                            let from_end = ((s + n) * 8 - 1 - bit) as u32;
                            if f == Field::ArpOp && from_end >= 8 {
                                if packet[s] != 0 {
                                    return Err(UNKEYED_WRITE);
                                }
                                continue;
                            }
                            if f == Field::VlanTci && from_end == 12 {
                                return Err(UNKEYED_WRITE);
                            }
                            m.set(f, f.read(key), 1u128 << from_end);
                        }
                    }
                }
            }
            i = s + n;
        }
        let mut work = PacketBuf::from_slice(packet);
        let mut wl = *layout;
        for a in &actions {
            apply_rewrite(a, &mut work, &mut wl);
        }
        if work.data() != out.as_slice() {
            return Err(UNVERIFIED);
        }
        actions.push(DpAction::Output(*port));
    }
    if l4_used {
        m.set(Field::NwProto, u128::from(key.nw_proto), 0xff);
        m.set(Field::NwFrag, u128::from(key.nw_frag), 0xff);
    }
    Ok((*m.mask(), actions))
}

fn set_action(f: Field, b: &[u8]) -> Result<DpAction, &'static str> {
    let mac = || <[u8; 6]>::try_from(b).map_err(|_| UNKEYED_WRITE);
    let v4 = || {
        <[u8; 4]>::try_from(b)
            .map(u32::from_be_bytes)
            .map_err(|_| UNKEYED_WRITE)
    };
    let v6 = || <[u8; 16]>::try_from(b).map_err(|_| UNKEYED_WRITE);
    let p16 = || {
        <[u8; 2]>::try_from(b)
            .map(u16::from_be_bytes)
            .map_err(|_| UNKEYED_WRITE)
    };
    Ok(match f {
        Field::DlDst => DpAction::SetEthDst(mac()?),
        Field::DlSrc => DpAction::SetEthSrc(mac()?),
        Field::NwSrc => DpAction::SetIpv4Src(v4()?),
        Field::NwDst => DpAction::SetIpv4Dst(v4()?),
        Field::Ipv6Src => DpAction::SetIpv6Src(v6()?),
        Field::Ipv6Dst => DpAction::SetIpv6Dst(v6()?),
        Field::NwTos => DpAction::SetTos(b[0]),
        Field::NwTtl => DpAction::SetTtl(b[0]),
        Field::TpSrc if b.len() == 1 => DpAction::SetTpSrc(u16::from(b[0])),
        Field::TpDst if b.len() == 1 => DpAction::SetTpDst(u16::from(b[0])),
        Field::TpSrc => DpAction::SetTpSrc(p16()?),
        Field::TpDst => DpAction::SetTpDst(p16()?),
        Field::ArpSha => DpAction::SetArpSha(mac()?),
        Field::ArpTha => DpAction::SetArpTha(mac()?),
        Field::ArpSpa => DpAction::SetArpSpa(v4()?),
        Field::ArpTpa => DpAction::SetArpTpa(v4()?),
        Field::VlanTci => DpAction::SetVlanTci(p16()? | 0x1000),
        Field::ArpOp => match p16()? {
            op @ 0..=0xff => DpAction::SetArpOp(op as u8),
            _ => return Err(UNKEYED_WRITE),
        },
        _ => return Err(UNKEYED_WRITE),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// routing.stf's packet: Ethernet + IPv4 + UDP.
    fn pkt() -> Vec<u8> {
        let h = "0090fb65d6fe02030405060108004500001c0001000040116\
                 56c0b0000010a63000104d310e10008d4c5";
        (0..h.len() / 2)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    fn key_of(p: &[u8]) -> (FlowKey, Layout) {
        let mut k = FlowKey::default();
        let l = nicflow_flow::extract(p, 1, &mut k).unwrap();
        (k, l)
    }

    #[test]
    fn routing_decision_becomes_masked_sets_and_output() {
        let p = pkt();
        let (k, l) = key_of(&p);
        // Expected output of routing.stf: new dst MAC, TTL 63, checksum fixed.
        let mut out = p.clone();
        out[0..6].copy_from_slice(&[0x13, 0x37, 0x13, 0x37, 0x13, 0x37]);
        out[22] = 0x3f;
        out[24] = 0x66;
        out[25] = 0x6c;
        // ethertype (96..112), ttl (176..184), top 8 bits of the dst (240..248).
        let reads = [(96, 16), (176, 8), (240, 8)];
        let total = p.len() as u32 * 8;
        let emitted = [
            (0, 48, None),
            (48, 128, Some(48)),
            (176, 8, None),
            (184, 8, Some(184)),
            (192, 16, None),
            (208, total - 208, Some(208)),
        ];
        let outs = [(2, out)];
        let (mask, actions) = derive(
            &k,
            &p,
            &l,
            &Decision {
                reads: &reads,
                in_port_read: false,
                outputs: &outs,
                emitted: &emitted,
                min_len: 34,
            },
        )
        .unwrap();
        assert_eq!(Field::NwDst.read(&mask.0), 0xff00_0000);
        assert_eq!(Field::NwTtl.read(&mask.0), 0xff);
        assert_eq!(Field::NwSrc.read(&mask.0), 0);
        assert_eq!(Field::InPort.read(&mask.0), 0);
        assert_eq!(
            actions,
            vec![
                DpAction::SetEthDst([0x13, 0x37, 0x13, 0x37, 0x13, 0x37]),
                DpAction::SetTtl(63),
                DpAction::Output(2)
            ]
        );
    }

    #[test]
    fn unkeyed_bytes_are_refused() {
        let p = pkt();
        let (k, l) = key_of(&p);
        // IPv4 identification (bytes 18-19).
        let reads = [(18 * 8, 16)];
        let d = Decision {
            reads: &reads,
            in_port_read: true,
            outputs: &[],
            emitted: &[],
            min_len: 0,
        };
        assert_eq!(derive(&k, &p, &l, &d).unwrap_err(), UNKEYED_READ);
        let total = p.len() as u32 * 8;
        // The identification written with the value it had: still a write.
        let emitted = [
            (0, 144, Some(0)),
            (144, 16, None),
            (160, total - 160, Some(160)),
        ];
        let outs = [(1, p.clone())];
        let d = Decision {
            reads: &[],
            in_port_read: false,
            outputs: &outs,
            emitted: &emitted,
            min_len: 0,
        };
        assert_eq!(derive(&k, &p, &l, &d).unwrap_err(), UNKEYED_WRITE);
        let outs = [(1, p[..20].to_vec())];
        let d = Decision {
            reads: &[],
            in_port_read: false,
            outputs: &outs,
            emitted: &[],
            min_len: 0,
        };
        assert_eq!(derive(&k, &p, &l, &d).unwrap_err(), HEADER_LAYOUT);
    }

    #[test]
    fn a_field_written_with_its_own_value_still_becomes_a_set() {
        let p = pkt();
        let (k, l) = key_of(&p);
        let total = p.len() as u32 * 8;
        // The program wrote the destination MAC this packet already had.
        let emitted = [(0, 48, None), (48, total - 48, Some(48))];
        let outs = [(1, p.clone())];
        let d = Decision {
            reads: &[],
            in_port_read: false,
            outputs: &outs,
            emitted: &emitted,
            min_len: 0,
        };
        let (mask, actions) = derive(&k, &p, &l, &d).unwrap();
        assert_eq!(Field::DlDst.read(&mask.0), 0, "written, not read");
        assert_eq!(
            actions,
            vec![
                DpAction::SetEthDst([0x00, 0x90, 0xfb, 0x65, 0xd6, 0xfe]),
                DpAction::Output(1)
            ]
        );
    }

    #[test]
    fn a_wrong_checksum_fails_the_replay() {
        let p = pkt();
        let (k, l) = key_of(&p);
        let mut out = p.clone();
        out[22] = 0x3f; // TTL 63 but the checksum left alone
        let total = p.len() as u32 * 8;
        let emitted = [
            (0, 176, Some(0)),
            (176, 8, None),
            (184, total - 184, Some(184)),
        ];
        let outs = [(1, out)];
        let d = Decision {
            reads: &[],
            in_port_read: false,
            outputs: &outs,
            emitted: &emitted,
            min_len: 0,
        };
        assert_eq!(derive(&k, &p, &l, &d).unwrap_err(), UNVERIFIED);
    }
}
