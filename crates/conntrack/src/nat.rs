//! NAT: choosing a translated tuple for a new connection and computing
//! what a packet of a NATed connection must be rewritten to. A port of
//! `nat_get_unique_tuple`, `nat_get_unique_l4`, `nat_range_hash`,
//! `set_sport_range`, `set_dport_range`, `find_addr`/`get_addr_in_range`,
//! `nat_action_reverse`, `nat_packet`/`pat_packet` and `nat_inner_packet`
//! in OVS lib/conntrack.c (openvswitch/ovs d6a632a9).
//!
//! The packet itself is not touched here: [`rewrite`] says which header
//! fields get which values and the datapath writes them with its own
//! checksum-aware helpers.

use std::hash::BuildHasher;
use std::net::IpAddr;

use foldhash::fast::{FixedState, RandomState};

use crate::tuple::{ConnKey, IPPROTO_ICMP, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};
use crate::{state, NatAction, NatInner, NatKind, NatRewrite};

/// `MIN_NAT_EPHEMERAL_PORT` / `MAX_NAT_EPHEMERAL_PORT` (conntrack-private.h).
const MIN_EPHEMERAL: u16 = 1024;
const MAX_EPHEMERAL: u16 = 65535;

/// `nat_get_unique_l4`'s first-round attempt cap.
const MAX_ATTEMPTS: u32 = 128;

/// IPv6 ranges are limited to 2^32 - 1 addresses (`nat_ipv6_addrs_delta`).
const MAX_V6_DELTA: u128 = 0xffff_fffe;

impl NatKind {
    /// `nat_action_reverse`.
    pub(crate) fn reversed(self) -> NatKind {
        match self {
            NatKind::Src => NatKind::Dst,
            NatKind::Dst => NatKind::Src,
        }
    }

    /// The `ct_state` bit a packet NATed this way gets (`nat_packet`).
    pub(crate) fn state_bit(self) -> u32 {
        match self {
            NatKind::Src => state::SNAT,
            NatKind::Dst => state::DNAT,
        }
    }
}

/// Whether OVS translates the L4 "port" of this protocol (`pat_proto` in
/// `nat_get_unique_tuple`): TCP, UDP, SCTP and ICMPv4 (the echo id). Not
/// ICMPv6: its connections are NATed by address only.
fn pat_proto(k: &ConnKey) -> bool {
    matches!(k.nw_proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP)
        || (!k.ipv6 && k.nw_proto == IPPROTO_ICMP)
}

/// A 16-byte key address for `a`, if it has the key's family.
fn key_addr(k: &ConnKey, a: IpAddr) -> Option<[u8; 16]> {
    match (a, k.ipv6) {
        (IpAddr::V4(v4), false) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            Some(b)
        }
        (IpAddr::V6(v6), true) => Some(v6.octets()),
        _ => None,
    }
}

fn addr_num(k: &ConnKey, a: &[u8; 16]) -> u128 {
    if k.ipv6 {
        u128::from_be_bytes(*a)
    } else {
        u128::from(u32::from_be_bytes([a[0], a[1], a[2], a[3]]))
    }
}

fn num_addr(k: &ConnKey, n: u128) -> [u8; 16] {
    if k.ipv6 {
        n.to_be_bytes()
    } else {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&(n as u32).to_be_bytes());
        b
    }
}

/// The validated form of a [`NatAction`] that sets NAT up (`struct
/// nat_action_info_t` as dpif-netdev builds it from `OVS_CT_ATTR_NAT`).
struct Range {
    /// `None`: keep the address (OVS's all-zero `min_addr`).
    addrs: Option<(u128, u128)>,
    /// `NAT_ACTION_SRC_PORT` / `NAT_ACTION_DST_PORT`: (min, max).
    ports: Option<(u16, u16)>,
    random: bool,
    persistent: bool,
}

/// Why no translated tuple was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NatFail {
    /// `nat_res_exhaustion`: every tuple tried collides.
    Exhausted,
    /// The address range is not of the packet's family.
    Family,
}

impl Range {
    fn new(k: &ConnKey, na: &NatAction) -> Result<Range, NatFail> {
        let addrs = match na.addr_min {
            None => None,
            Some(min) => {
                let min = addr_num(k, &key_addr(k, min).ok_or(NatFail::Family)?);
                // put_ct_nat sends a maximum only when it is above the
                // minimum; dpif-netdev then uses max = min.
                let max = match na.addr_max {
                    Some(m) => addr_num(k, &key_addr(k, m).ok_or(NatFail::Family)?),
                    None => min,
                };
                // find_addr: an all-zero minimum means "keep the address".
                (min != 0).then_some((min, max.max(min)))
            }
        };
        let ports = (na.port_min != 0).then(|| (na.port_min, na.port_max.max(na.port_min)));
        Ok(Range {
            addrs,
            ports,
            random: na.random,
            persistent: na.persistent,
        })
    }
}

/// `set_sport_range` without a configured source port range: keep the
/// port's class (1-511, 600-1023 or the ephemeral 1024-65535).
fn port_class(p: u16) -> (u16, u16) {
    if p < 512 {
        (1, 511)
    } else if p < 1024 {
        (600, 1023)
    } else {
        (MIN_EPHEMERAL, MAX_EPHEMERAL)
    }
}

/// Which port of the reply key `nat_get_unique_l4` varies.
#[derive(Clone, Copy)]
enum Side {
    Src,
    Dst,
}

fn set_port(k: &mut ConnKey, side: Side, with_peer: bool, port: u16) {
    match side {
        Side::Src => k.src.port = port,
        Side::Dst => k.dst.port = port,
    }
    if with_peer {
        // ICMP: the id is on both endpoints of the key.
        match side {
            Side::Src => k.dst.port = port,
            Side::Dst => k.src.port = port,
        }
    }
}

/// `nat_get_unique_l4`: up to 128 consecutive ports from `curr` (wrapping
/// inside [min, max]), then rounds of 64, 32 and 16 from random starts
/// while the range is larger than the attempts. Leaves `curr` in the key
/// when nothing is free.
#[allow(clippy::too_many_arguments)]
fn unique_l4(
    rev: &mut ConnKey,
    side: Side,
    with_peer: bool,
    mut curr: u16,
    min: u16,
    max: u16,
    rng: &mut u64,
    in_use: &mut dyn FnMut(&ConnKey) -> bool,
) -> bool {
    let range = u32::from(max - min) + 1;
    let orig = curr;
    let mut attempts = range.min(MAX_ATTEMPTS);
    loop {
        // FOR_EACH_PORT_IN_RANGE: an out-of-range start costs one extra
        // attempt, then min..=max wrapping.
        let mut i = 0;
        let in_range = |c: u16| (min..=max).contains(&c);
        let mut n = if in_range(curr) { range } else { range + 1 };
        while n > 0 {
            if i >= attempts {
                break;
            }
            i += 1;
            set_port(rev, side, with_peer, curr);
            if !in_use(rev) {
                return true;
            }
            n -= 1;
            curr = if !in_range(curr) || curr == max {
                min
            } else {
                curr + 1
            };
        }
        if attempts < range && attempts >= 16 {
            attempts /= 2;
            curr = min + (next_random(rng) % range) as u16;
            continue;
        }
        break;
    }
    set_port(rev, side, with_peer, orig);
    false
}

/// xorshift64*: `random_uint32()` for port offsets and retry starts.
pub(crate) fn next_random(s: &mut u64) -> u32 {
    let mut x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
}

/// `nat_range_hash`. Not persistent: the whole forward key with the
/// tracker's random seed. Persistent (`basis == 0` in OVS): only the
/// source address, with a fixed seed, so a client always gets the same
/// address from a given range.
fn range_hash(k: &ConnKey, r: &Range, seeded: Option<&RandomState>) -> u64 {
    let rest = (r.addrs, r.ports, k.ipv6, k.nw_proto, k.zone);
    match seeded {
        Some(s) => s.hash_one((k.src, k.dst, rest)),
        None => FixedState::with_seed(0).hash_one((k.src.addr, rest)),
    }
}

/// `nat_get_unique_tuple`: the reply key of the translated connection, or
/// why there is none. `in_use` answers whether a key is taken by a live
/// connection in the table (`conn_lookup`).
///
/// As in OVS (current master, not the older address-walking versions) one
/// address is chosen, by hash, and only ports are searched:
/// - SNAT: the source port from the configured range (starting at a
///   hash- or `random`-derived offset), or without a range the original
///   port first, then its class (1-511, 600-1023, 1024-65535).
/// - DNAT: with a port range, the destination port from it first; then
///   (also without a range) the client's source port as for SNAT.
/// - Protocols without ports (and ICMPv6): the one address, no search.
pub(crate) fn unique_tuple(
    fwd: &ConnKey,
    kind: NatKind,
    na: &NatAction,
    seed: &RandomState,
    rng: &mut u64,
    in_use: &mut dyn FnMut(&ConnKey) -> bool,
) -> Result<ConnKey, NatFail> {
    let r = Range::new(fwd, na)?;
    let mut rev = fwd.reversed();
    let pat = pat_proto(fwd);

    let hash = range_hash(fwd, &r, (!r.persistent).then_some(seed));
    let port_off = if r.random {
        u64::from(next_random(rng))
    } else if r.persistent {
        range_hash(fwd, &r, Some(seed))
    } else {
        hash
    };

    // find_addr / get_addr_in_range.
    let addr = match r.addrs {
        None => match kind {
            NatKind::Src => fwd.src.addr,
            NatKind::Dst => fwd.dst.addr,
        },
        Some((min, max)) => {
            let delta = if fwd.ipv6 {
                (max - min).min(MAX_V6_DELTA)
            } else {
                max - min
            };
            num_addr(fwd, min + u128::from(hash) % (delta + 1))
        }
    };

    // set_sport_range / set_dport_range.
    let sport_range = match (kind, r.ports) {
        (NatKind::Src, Some((min, max))) => {
            let off = (port_off % (u64::from(max - min) + 1)) as u16;
            (min + off, min, max)
        }
        _ => {
            let (min, max) = port_class(fwd.src.port);
            (fwd.src.port, min, max)
        }
    };
    let dport_range = match (kind, r.ports) {
        (NatKind::Dst, Some((min, max))) => {
            let off = (port_off % (u64::from(max - min) + 1)) as u16;
            Some((min + off, min, max))
        }
        _ => None,
    };

    if pat {
        rev.src.port = dport_range.map_or(fwd.dst.port, |d| d.0);
        rev.dst.port = sport_range.0;
    }
    // store_addr_to_key.
    match kind {
        NatKind::Src => rev.dst.addr = addr,
        NatKind::Dst => rev.src.addr = addr,
    }
    if !pat {
        return if in_use(&rev) {
            Err(NatFail::Exhausted)
        } else {
            Ok(rev)
        };
    }

    let icmp = fwd.is_icmp();
    let mut found = false;
    // OVS varies only the reply key's src port here, which for ICMP would
    // split the echo id between the two endpoints and break the
    // connection, so ICMP skips this step (ports mean nothing to ICMP).
    if let (Some((curr, min, max)), false) = (dport_range, icmp) {
        found = unique_l4(&mut rev, Side::Src, false, curr, min, max, rng, in_use);
    }
    if !found {
        let (curr, min, max) = sport_range;
        found = unique_l4(&mut rev, Side::Dst, icmp, curr, min, max, rng, in_use);
    }
    if found {
        Ok(rev)
    } else {
        Err(NatFail::Exhausted)
    }
}

/// `nat_packet` for a non-related packet of a NATed connection: the
/// `ct_state` bit and the header writes that turn the packet's tuple
/// (`keys[reply]`) into the other direction's key reversed. Forward
/// packets get the translation, reply packets the reverse (`+dnat` for
/// replies of an SNAT connection and vice versa, like OVS). Only fields
/// whose value changes are set.
pub(crate) fn rewrite(keys: &[ConnKey; 2], kind: NatKind, reply: bool) -> (u32, NatRewrite) {
    let kind = if reply { kind.reversed() } else { kind };
    let cur = &keys[usize::from(reply)];
    let to = keys[usize::from(!reply)].reversed();
    let mut rw = NatRewrite::default();
    let t = to.to_tuple();
    match kind {
        NatKind::Src if cur.src.addr != to.src.addr => rw.src = Some(t.src),
        NatKind::Dst if cur.dst.addr != to.dst.addr => rw.dst = Some(t.dst),
        _ => {}
    }
    // pat_packet: TCP/UDP/SCTP ports, ICMPv4 echo-like id.
    if matches!(cur.nw_proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP) {
        rw.sport = (cur.src.port != to.src.port).then_some(to.src.port);
        rw.dport = (cur.dst.port != to.dst.port).then_some(to.dst.port);
    } else if cur.is_icmp() && !cur.ipv6 && cur.src.port != to.src.port {
        rw.icmp_id = Some(to.src.port);
    }
    (kind.state_bit(), rw)
}

/// `nat_packet` with `related` set: an ICMP/ICMPv6 error about a NATed
/// connection, travelling in the direction `reply` (the packet it quotes
/// travelled the other way). As OVS:
/// - the error's own header gets the address write of a packet of that
///   direction (`nat_packet_ipv4/6` with `keys[!reply]`): always written,
///   since the error's outer address may be a router's;
/// - the quoted packet is translated the other way round
///   (`nat_inner_packet` with the reversed action and key): its one NATed
///   address and both ports (`pat_packet`; the ICMPv4 echo id for a quoted
///   echo) become those of `keys[!reply]`, i.e. the packet as its sender
///   sent it. Only quoted fields that change are set.
///
/// The `ct_state` bit is the outer one, as for a non-related packet of
/// that direction.
pub(crate) fn rewrite_related(
    keys: &[ConnKey; 2],
    kind: NatKind,
    reply: bool,
) -> (u32, NatRewrite) {
    let outer = if reply { kind.reversed() } else { kind };
    // What the quoted packet looks like now: the tracker found the error
    // under keys[reply], which is the quoted packet's key reversed.
    let cur = keys[usize::from(reply)].reversed();
    let to = keys[usize::from(!reply)];
    let t = to.to_tuple();
    let mut rw = NatRewrite::default();
    // Outer: SRC writes key->dst.addr into the source, DST key->src.addr
    // into the destination (nat_packet_ipv4/6 with keys[!reply]).
    match outer {
        NatKind::Src => rw.src = Some(t.dst),
        NatKind::Dst => rw.dst = Some(t.src),
    }
    // Inner: the reversed action with the reversed key, so SRC writes
    // to.src into the quoted source and DST to.dst into its destination.
    let mut inner = NatInner::default();
    match outer.reversed() {
        NatKind::Src if cur.src.addr != to.src.addr => inner.src = Some(t.src),
        NatKind::Dst if cur.dst.addr != to.dst.addr => inner.dst = Some(t.dst),
        _ => {}
    }
    if matches!(cur.nw_proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP) {
        inner.sport = (cur.src.port != to.src.port).then_some(to.src.port);
        inner.dport = (cur.dst.port != to.dst.port).then_some(to.dst.port);
    } else if cur.is_icmp() && !cur.ipv6 && cur.src.port != to.src.port {
        inner.icmp_id = Some(to.src.port);
    }
    rw.inner = Some(inner);
    (outer.state_bit(), rw)
}
