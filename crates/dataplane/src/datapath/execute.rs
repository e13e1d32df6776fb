//! The action executor: replays a datapath flow's actions on one frame.
//!
//! Header rewrites happen in place with incremental checksum updates
//! (`nicflow_packet::rewrite`); VLAN push/pop use the buffer's headroom and
//! re-parse the layout. An `Output` that is the last action hands the buffer
//! itself to the transmit batch; earlier outputs copy into pooled buffers, so
//! a unicast flow never copies and nothing allocates once the pool is warm.

use super::action::{DpAction, DropReason};
use super::ct::{CtMeta, CtStage};
use super::select::SelectStates;
use super::ControllerPacket;
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::parse::{self, Layout};
use nicflow_packet::rewrite;
use std::collections::VecDeque;

/// Capacity of pooled buffers: a jumbo frame plus room for tags.
pub const BUF_CAPACITY: usize = 9216 + 64;

/// Frames to transmit, in order, tagged with their output port number.
#[derive(Default)]
pub struct TxBatch {
    pub pkts: Vec<(u32, PacketBuf)>,
}

impl TxBatch {
    pub fn clear(&mut self) {
        self.pkts.clear();
    }
}

#[derive(Default)]
pub struct ExecResult {
    pub policy_drop: bool,
    pub drop: Option<DropReason>,
    pub controller: bool,
    pub controller_dropped: bool,
    /// The frame's own buffer when no output took it.
    pub leftover: Option<PacketBuf>,
}

/// What the rest of the frame's walk gets from one action list.
enum Flow {
    /// The list ran out: go on with the frame.
    Next(PacketBuf),
    /// The frame itself went out (or into a recirculation) as the list's
    /// last action, with nothing after it.
    Taken,
    /// A drop: nothing after runs.
    Stop(PacketBuf),
}

/// Everything but the frame and its actions that [`execute`] needs.
struct Env<'a, 'b> {
    in_port: u32,
    tx: &'a mut TxBatch,
    pool: &'a mut Vec<PacketBuf>,
    controller: &'a mut VecDeque<ControllerPacket>,
    controller_cap: usize,
    meters: &'a mut super::meter::Meters,
    select: &'a mut SelectStates,
    ct: &'a mut CtStage<'b>,
}

#[allow(clippy::too_many_arguments)]
pub fn execute(
    actions: &[DpAction],
    in_port: u32,
    pkt: PacketBuf,
    layout: &mut Layout,
    tx: &mut TxBatch,
    pool: &mut Vec<PacketBuf>,
    controller: &mut VecDeque<ControllerPacket>,
    controller_cap: usize,
    meters: &mut super::meter::Meters,
    select: &mut SelectStates,
    ct: &mut CtStage<'_>,
) -> ExecResult {
    let mut r = ExecResult::default();
    if actions.is_empty() {
        r.policy_drop = true;
        r.leftover = Some(pkt);
        return r;
    }
    let mut env = Env {
        in_port,
        tx,
        pool,
        controller,
        controller_cap,
        meters,
        select,
        ct,
    };
    match run(actions, true, pkt, layout, &mut env, &mut r) {
        Flow::Next(p) | Flow::Stop(p) => r.leftover = Some(p),
        Flow::Taken => {}
    }
    r
}

/// Run one action list on the frame. `tail`: nothing runs after this list,
/// so its last output may hand the frame itself over. A
/// [`DpAction::Select`]'s bucket runs here too, inline, as the rest of its
/// list (a bucket leaves the frame as it found it).
fn run(
    actions: &[DpAction],
    tail: bool,
    mut pkt: PacketBuf,
    layout: &mut Layout,
    env: &mut Env<'_, '_>,
    r: &mut ExecResult,
) -> Flow {
    let Env {
        in_port: _in_port,
        tx,
        pool,
        controller,
        controller_cap,
        meters,
        select,
        ct,
    } = env;
    let controller_cap = *controller_cap;
    let _in_port = *_in_port;
    if actions.is_empty() {
        return Flow::Next(pkt);
    }
    let last = actions.len() - 1;
    for (i, a) in actions.iter().enumerate() {
        match a {
            DpAction::Output(port) => {
                if tail && i == last {
                    tx.pkts.push((*port, pkt));
                    return Flow::Taken;
                }
                let mut copy = pool
                    .pop()
                    .unwrap_or_else(|| PacketBuf::with_capacity(BUF_CAPACITY));
                if !copy.set_data(pkt.data()) {
                    // A GSO super-frame (up to 64 KiB) does not fit a pooled
                    // buffer: allocated (dropped, not pooled, by recycle if
                    // it is oversized... it is simply a bigger buffer).
                    copy = PacketBuf::from_slice(pkt.data());
                }
                copy.offload = pkt.offload;
                copy.tun = pkt.tun;
                tx.pkts.push((*port, copy));
            }
            DpAction::SetEthSrc(_)
            | DpAction::SetEthDst(_)
            | DpAction::SetIpv4Src(_)
            | DpAction::SetIpv4Dst(_)
            | DpAction::SetIpv6Src(_)
            | DpAction::SetIpv6Dst(_)
            | DpAction::SetArpSpa(_)
            | DpAction::SetArpTpa(_)
            | DpAction::SetArpSha(_)
            | DpAction::SetArpTha(_)
            | DpAction::SetArpOp(_)
            | DpAction::SetNdTarget(_)
            | DpAction::SetNdSll(_)
            | DpAction::SetNdTll(_)
            | DpAction::SetTos(_)
            | DpAction::SetTtl(_)
            | DpAction::SetTpSrc(_)
            | DpAction::SetTpDst(_)
            | DpAction::PushVlan { .. }
            | DpAction::PopVlan
            | DpAction::SetVlanTci(_) => {
                apply_rewrite(a, &mut pkt, layout);
            }
            DpAction::Controller {
                max_len,
                reason,
                table_id,
                cookie,
                extra,
            } => {
                // controller(meter_id=N): copies over the meter's rate are
                // not sent; the packet's walk goes on either way.
                let metered_out = extra.as_ref().and_then(|e| e.meter_id).is_some_and(|id| {
                    meters
                        .get_mut(id)
                        .map(|m| m.run(ct.now, pkt.len()))
                        .is_some_and(|v| v == super::meter::Verdict::Drop)
                });
                if metered_out {
                    // Counted by the meter's band.
                } else if controller.len() >= controller_cap {
                    r.controller_dropped = true;
                } else {
                    let n = (*max_len as usize).min(pkt.len());
                    let n = if *max_len == 0 { pkt.len() } else { n };
                    let mut data = pkt.data().to_vec();
                    if pkt.csum_partial() {
                        // The controller gets a finished checksum. A GSO
                        // super-frame is sent up whole (its IP length is
                        // its real length), not segmented.
                        nicflow_port::complete_checksum(&mut data, layout);
                    }
                    let total_len = data.len();
                    data.truncate(n);
                    controller.push_back(ControllerPacket {
                        in_port: _in_port,
                        data,
                        total_len,
                        reason: *reason,
                        table_id: *table_id,
                        cookie: *cookie,
                        extra: extra.clone(),
                    });
                    r.controller = true;
                }
            }
            DpAction::Drop(reason) => {
                r.drop = Some(*reason);
                return Flow::Stop(pkt);
            }
            DpAction::Meter(id) => {
                // A meter removed since this flow was cached meters nothing
                // (the flow goes at the next revalidation).
                let verdict = meters
                    .get_mut(*id)
                    .map(|m| m.run(ct.now, pkt.len()))
                    .unwrap_or(super::meter::Verdict::Pass);
                match verdict {
                    super::meter::Verdict::Pass => {}
                    super::meter::Verdict::Drop => {
                        r.drop = Some(DropReason::Meter);
                        return Flow::Stop(pkt);
                    }
                    super::meter::Verdict::Remark(prec) => remark(&mut pkt, layout, prec),
                }
            }
            DpAction::SetTunnelId(id) => {
                let mut t = pkt.tun.unwrap_or_default();
                t.id = *id;
                t.flags |= nicflow_packet::buf::TUN_F_KEY;
                pkt.tun = Some(t);
            }
            DpAction::SetTunnelMetadata { slot, value } => {
                let mut t = pkt.tun.unwrap_or_default();
                let i = usize::from(*slot & 7);
                t.metadata[i] = *value;
                t.md_present |= 1 << i;
                pkt.tun = Some(t);
            }
            DpAction::Ct {
                zone,
                commit,
                force,
                mark,
                label,
                nat,
            } => {
                let l3 = pkt
                    .data()
                    .get(usize::from(layout.l3_offset)..)
                    .unwrap_or(&[]);
                let req = nicflow_conntrack::CtRequest {
                    zone: *zone,
                    commit: *commit,
                    force: *force,
                    set_mark: *mark,
                    set_label: *label,
                    nat: *nat,
                };
                let rw = ct.track(layout.ethertype, l3, &req);
                if !rw.is_empty() {
                    nat_rewrite(&mut pkt, layout, &rw);
                }
            }
            DpAction::CtClear => ct.meta = CtMeta::default(),
            DpAction::Recirc(id) => {
                if tail && i == last {
                    ct.recirc.push(((pkt, ct.meta, *id), ct.depth));
                    return Flow::Taken;
                }
                let mut copy = pool
                    .pop()
                    .unwrap_or_else(|| PacketBuf::with_capacity(BUF_CAPACITY));
                if !copy.set_data(pkt.data()) {
                    copy = PacketBuf::from_slice(pkt.data());
                }
                copy.offload = pkt.offload;
                copy.tun = pkt.tun;
                ct.recirc.push(((copy, ct.meta, *id), ct.depth));
            }
            DpAction::Select {
                group,
                method,
                buckets,
            } => {
                let Some(b) = select.choose(*group, *method, buckets) else {
                    continue;
                };
                select.count(*group, buckets[b].index, pkt.len());
                match run(&buckets[b].actions, tail && i == last, pkt, layout, env, r) {
                    Flow::Next(p) => pkt = p,
                    done => return done,
                }
                // The rest of the list runs after the bucket, as a list of
                // its own (so `env` is lent to one walk at a time).
                return run(&actions[i + 1..], tail, pkt, layout, env, r);
            }
        }
    }
    Flow::Next(pkt)
}

/// Write what NAT decided into the frame. Same-size fields, so the layout
/// stays valid; checksums are patched incrementally (partial ones only in
/// the pseudo-header part, as for any address rewrite). For an ICMP error
/// related to a NATed connection `rw.inner` also rewrites the packet it
/// quotes ([`nat_rewrite_quoted`]).
fn nat_rewrite(pkt: &mut PacketBuf, layout: &Layout, rw: &nicflow_conntrack::NatRewrite) {
    use std::net::IpAddr;
    let partial = pkt.csum_partial();
    let f = pkt.data_mut();
    match rw.src {
        Some(IpAddr::V4(a)) => {
            rewrite::set_ipv4_src_ext(f, layout, u32::from(a), partial);
        }
        Some(IpAddr::V6(a)) => {
            rewrite::set_ipv6_src_ext(f, layout, a.octets(), partial);
        }
        None => {}
    }
    match rw.dst {
        Some(IpAddr::V4(a)) => {
            rewrite::set_ipv4_dst_ext(f, layout, u32::from(a), partial);
        }
        Some(IpAddr::V6(a)) => {
            rewrite::set_ipv6_dst_ext(f, layout, a.octets(), partial);
        }
        None => {}
    }
    if let Some(p) = rw.sport {
        rewrite::set_tp_src_ext(f, layout, p, partial);
    }
    if let Some(p) = rw.dport {
        rewrite::set_tp_dst_ext(f, layout, p, partial);
    }
    if let Some(id) = rw.icmp_id {
        rewrite::set_icmp_id(f, layout, id);
    }
    if let Some(inner) = &rw.inner {
        nat_rewrite_quoted(f, layout, inner, partial);
    }
}

/// The packet an ICMP/ICMPv6 error quotes, for an error related to a NATed
/// connection (OVS `nat_inner_packet`): its addresses, ports or echo id,
/// with the quoted IPv4 header and L4 checksums and the error's own
/// checksum patched incrementally. The error's own addresses were written
/// by [`nat_rewrite`] before (for ICMPv6 they are in the checksum's pseudo
/// header; the quote is not).
fn nat_rewrite_quoted(
    f: &mut [u8],
    layout: &Layout,
    inner: &nicflow_conntrack::NatInner,
    partial: bool,
) {
    if let Some(a) = inner.src {
        rewrite::set_icmp_inner_src(f, layout, a, partial);
    }
    if let Some(a) = inner.dst {
        rewrite::set_icmp_inner_dst(f, layout, a, partial);
    }
    if let Some(p) = inner.sport {
        rewrite::set_icmp_inner_tp_src(f, layout, p, partial);
    }
    if let Some(p) = inner.dport {
        rewrite::set_icmp_inner_tp_dst(f, layout, p, partial);
    }
    if let Some(id) = inner.icmp_id {
        rewrite::set_icmp_inner_id(f, layout, id, partial);
    }
}

/// Write the type (`off` 0) or code (`off` 1) of an ICMP or ICMPv6 header
/// to the low byte of `v` (`set_field` on `icmp_type`, `icmpv6_code`, ...,
/// as OVS's `set(icmp(..))`/`set(icmpv6(..))`), patching the ICMP checksum
/// incrementally (both bytes are in one 16-bit word; ICMPv6's pseudo header
/// does not cover them, so a partial checksum, finished later, is left
/// alone as for TCP/UDP ports). False when the frame has no ICMP/ICMPv6
/// header (not ICMP, a later fragment, too short): the caller treats the
/// action as an L4 port write then.
fn set_icmp_byte(frame: &mut [u8], layout: &Layout, off: usize, v: u16, partial: bool) -> bool {
    use nicflow_packet::parse::L4Kind;
    if !matches!(layout.l4, L4Kind::Icmp | L4Kind::Icmpv6) {
        return false;
    }
    let l4 = usize::from(layout.l4_offset);
    let Some(hdr) = frame.get_mut(l4..l4 + 4) else {
        return false;
    };
    let old = u16::from_be_bytes([hdr[0], hdr[1]]);
    hdr[off] = v as u8;
    let new = u16::from_be_bytes([hdr[0], hdr[1]]);
    if !partial && old != new {
        let c = u16::from_be_bytes([hdr[2], hdr[3]]);
        let c = nicflow_packet::checksum::update16(c, old, new);
        hdr[2..4].copy_from_slice(&c.to_be_bytes());
    }
    true
}

/// What [`set_nd`] writes: the target address, or the MAC of the
/// link-layer address option of this type (1 source, 2 target).
enum NdPart<'a> {
    Target(&'a [u8; 16]),
    Option(u8, &'a [u8; 6]),
}

/// Rewrite part of an IPv6 neighbor solicitation/advertisement in place,
/// with the ICMPv6 checksum patched incrementally (neither the target nor
/// the options are in the pseudo header, so a partial checksum, finished
/// later, is left alone). As OVS's `packet_set_nd`: the first 8-byte
/// link-layer address option of the type is rewritten, and none is added
/// when the frame has none. Frames that are not ND messages of code 0, or
/// are too short, are left alone.
fn set_nd(frame: &mut [u8], layout: &Layout, part: NdPart<'_>, partial: bool) {
    use nicflow_packet::parse::L4Kind;
    if layout.l4 != L4Kind::Icmpv6 {
        return;
    }
    let l4 = usize::from(layout.l4_offset);
    let end = (l4 + usize::from(layout.l4_len)).min(frame.len());
    let Some(msg) = frame.get_mut(l4..end) else {
        return;
    };
    if msg.len() < 24 || msg[1] != 0 || !matches!(msg[0], 135 | 136) {
        return;
    }
    let (at, new): (usize, &[u8]) = match part {
        NdPart::Target(t) => (8, &t[..]),
        NdPart::Option(ty, m) => {
            let mut off = 24;
            loop {
                let Some(opt) = msg.get(off..off + 8) else {
                    return;
                };
                let len = usize::from(opt[1]) * 8;
                if len == 0 {
                    return;
                }
                if opt[0] == ty && len == 8 {
                    break (off + 2, &m[..]);
                }
                off += len;
            }
        }
    };
    let mut old = [0u8; 16];
    let old = &mut old[..new.len()];
    old.copy_from_slice(&msg[at..at + new.len()]);
    msg[at..at + new.len()].copy_from_slice(new);
    if !partial && old != new {
        let c = u16::from_be_bytes([msg[2], msg[3]]);
        // The MAC of an option starts at an even offset of the message
        // (options are 8-byte aligned, the MAC 2 bytes in), as does the
        // target: the bytes line up with the checksum's 16-bit words.
        let c = nicflow_packet::checksum::update_bytes(c, old, new);
        msg[2..4].copy_from_slice(&c.to_be_bytes());
    }
}

/// A `dscp_remark` band: raise the AF drop precedence in the IP header's
/// DSCP (ECN bits kept), checksum patched as for any TOS write.
fn remark(pkt: &mut PacketBuf, layout: &Layout, prec: u8) {
    if let Some(tos) = rewrite::ip_tos(pkt.data(), layout) {
        let dscp = super::meter::remark_dscp(tos >> 2, prec);
        if dscp != tos >> 2 {
            rewrite::set_ip_dscp(pkt.data_mut(), layout, dscp);
        }
    }
}

/// Re-read the headers after a push or pop. Our own pushes may stack more
/// tags than a received frame may carry, hence the higher limit; a frame
/// that still cannot be parsed gets an empty layout, so later L3/L4
/// rewrites are skipped rather than written at stale offsets.
fn reparse(pkt: &PacketBuf, layout: &mut Layout) {
    *layout = parse::parse_with_tag_limit(pkt.data(), 8).unwrap_or_default();
}

/// Apply one header-rewriting action (`set(...)`, VLAN push/pop) to a
/// frame, checksums kept right; `false` for any other action. The one place
/// that writes a rewrite, shared by [`execute`] and by the P4 slow path,
/// which checks that the actions it derived from a program's output give
/// exactly that output before it caches them.
pub fn apply_rewrite(a: &DpAction, pkt: &mut PacketBuf, layout: &mut Layout) -> bool {
    match a {
        DpAction::SetEthSrc(m) => {
            rewrite::set_eth_src(pkt.data_mut(), *m);
        }
        DpAction::SetEthDst(m) => {
            rewrite::set_eth_dst(pkt.data_mut(), *m);
        }
        DpAction::SetIpv4Src(a) => {
            let partial = pkt.csum_partial();
            rewrite::set_ipv4_src_ext(pkt.data_mut(), layout, *a, partial);
        }
        DpAction::SetIpv4Dst(a) => {
            let partial = pkt.csum_partial();
            rewrite::set_ipv4_dst_ext(pkt.data_mut(), layout, *a, partial);
        }
        DpAction::SetIpv6Src(a) => {
            let partial = pkt.csum_partial();
            rewrite::set_ipv6_src_ext(pkt.data_mut(), layout, *a, partial);
        }
        DpAction::SetIpv6Dst(a) => {
            let partial = pkt.csum_partial();
            rewrite::set_ipv6_dst_ext(pkt.data_mut(), layout, *a, partial);
        }
        DpAction::SetArpSpa(a) => {
            rewrite::set_arp_spa(pkt.data_mut(), layout, *a);
        }
        DpAction::SetArpTpa(a) => {
            rewrite::set_arp_tpa(pkt.data_mut(), layout, *a);
        }
        DpAction::SetArpSha(m) => {
            rewrite::set_arp_sha(pkt.data_mut(), layout, *m);
        }
        DpAction::SetArpTha(m) => {
            rewrite::set_arp_tha(pkt.data_mut(), layout, *m);
        }
        DpAction::SetArpOp(op) => {
            rewrite::set_arp_op(pkt.data_mut(), layout, u16::from(*op));
        }
        DpAction::SetNdTarget(a) => {
            let partial = pkt.csum_partial();
            set_nd(pkt.data_mut(), layout, NdPart::Target(a), partial);
        }
        DpAction::SetNdSll(m) => {
            let partial = pkt.csum_partial();
            set_nd(pkt.data_mut(), layout, NdPart::Option(1, m), partial);
        }
        DpAction::SetNdTll(m) => {
            let partial = pkt.csum_partial();
            set_nd(pkt.data_mut(), layout, NdPart::Option(2, m), partial);
        }
        DpAction::SetTos(t) => {
            rewrite::set_ip_tos(pkt.data_mut(), layout, *t);
        }
        DpAction::SetTtl(t) => {
            rewrite::set_ttl(pkt.data_mut(), layout, *t);
        }
        // The key keeps ICMP/ICMPv6 type and code in the L4 port
        // fields, so their `set_field`s arrive as these two.
        DpAction::SetTpSrc(p) => {
            let partial = pkt.csum_partial();
            if !set_icmp_byte(pkt.data_mut(), layout, 0, *p, partial) {
                rewrite::set_tp_src_ext(pkt.data_mut(), layout, *p, partial);
            }
        }
        DpAction::SetTpDst(p) => {
            let partial = pkt.csum_partial();
            if !set_icmp_byte(pkt.data_mut(), layout, 1, *p, partial) {
                rewrite::set_tp_dst_ext(pkt.data_mut(), layout, *p, partial);
            }
        }
        DpAction::PushVlan { tpid, tci } => {
            rewrite::push_vlan(pkt, *tpid, *tci);
            reparse(pkt, layout);
        }
        DpAction::PopVlan => {
            rewrite::pop_vlan(pkt);
            reparse(pkt, layout);
        }
        DpAction::SetVlanTci(tci) => {
            // Keep the DEI bit of the frame; VID and PCP come from the flow.
            rewrite::set_vlan_vid(pkt.data_mut(), tci & 0x0fff);
            rewrite::set_vlan_pcp(pkt.data_mut(), (tci >> 13) as u8);
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    //! `nat_rewrite` on ICMP errors related to NATed connections: the
    //! tracker decides, the executor writes; the bytes must be what OVS
    //! sends and every checksum must verify (checked from scratch with
    //! the packet crate's checksum functions).
    use super::*;
    use crate::datapath::ct::CtScratch;
    use nicflow_conntrack::{NatAction, NatKind};
    use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
    use nicflow_packet::checksum::{checksum, verify_ipv4_header, verify_l4};
    use std::net::{IpAddr, Ipv6Addr};
    use std::time::Instant;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn ct(commit: bool, kind: Option<NatKind>, addr: Option<IpAddr>, port: u16) -> DpAction {
        DpAction::Ct {
            zone: 0,
            commit,
            force: false,
            mark: None,
            label: None,
            nat: Some(NatAction {
                kind,
                addr_min: addr,
                port_min: port,
                ..NatAction::default()
            }),
        }
    }

    /// Runs `actions` on `frame`; returns what was output.
    fn run(actions: &[DpAction], frame: &[u8], scratch: &mut CtScratch) -> Vec<u8> {
        let mut layout = parse::parse(frame).unwrap();
        let mut tx = TxBatch::default();
        let mut controller = VecDeque::new();
        let r = execute(
            actions,
            1,
            PacketBuf::from_slice(frame),
            &mut layout,
            &mut tx,
            &mut Vec::new(),
            &mut controller,
            0,
            &mut crate::datapath::meter::Meters::default(),
            &mut crate::datapath::select::SelectStates::default(),
            &mut scratch.stage(Instant::now()),
        );
        assert!(r.drop.is_none() && !r.policy_drop);
        tx.pkts.pop().expect("output").1.data().to_vec()
    }

    /// The quoted packet as a frame of its own (the error's Ethernet
    /// header in front), for checking its checksums.
    fn quoted_frame(f: &[u8]) -> Vec<u8> {
        let l = parse::parse(f).unwrap();
        let mut q = f[..14].to_vec();
        q.extend_from_slice(&f[usize::from(l.l4_offset) + 8..l.l4_end()]);
        q
    }

    /// OVS system-traffic.at "conntrack - ICMP related NAT with single
    /// port": the same flows' actions, the same packets in, the same
    /// bytes out (with trailing link padding kept and not summed).
    #[test]
    fn icmp_error_of_dnat_connection_is_ovs_bytes() {
        let udp = hex("f00000010102f0000001010108004500002944c140004011df100a0101010a0101f004d2005000156b24646573745f756e72656163680a");
        let err = hex("f00000010101f00000010102080045c000456a3700004001f9bc0a0101020a01010103031328000000004500002944c140004011dffe0a0101010a01010204d21f9000154cd2646573745f756e72656163680a");
        let want = hex("f00000010101f00000010102080045c000456a3700004001f8ce0a0101f00a01010103031416000000004500002944c140004011df100a0101010a0101f004d2005000156b24646573745f756e72656163680a");
        for pad in [0usize, 17] {
            let mut scratch = CtScratch::default();
            let backend = Some("10.1.1.2".parse().unwrap());
            let out = run(
                &[
                    ct(true, Some(NatKind::Dst), backend, 8080),
                    DpAction::Output(2),
                ],
                &udp,
                &mut scratch,
            );
            assert_eq!(&out[30..34], &[10, 1, 1, 2], "forward DNATed");
            let mut e = err.clone();
            e.resize(err.len() + pad, 0xee);
            let out = run(
                &[ct(false, None, None, 0), DpAction::Output(1)],
                &e,
                &mut scratch,
            );
            let mut w = want.clone();
            w.resize(want.len() + pad, 0xee);
            assert_eq!(hex_str(&out), hex_str(&w), "padding {pad}");
            let l = parse::parse(&out).unwrap();
            assert_eq!(verify_ipv4_header(&out, &l), Some(true));
            assert_eq!(verify_l4(&out, &l), Some(true));
            let q = quoted_frame(&out);
            let ql = parse::parse(&q).unwrap();
            assert_eq!(verify_ipv4_header(&q, &ql), Some(true));
            assert_eq!(verify_l4(&q, &ql), Some(true));
        }
    }

    fn hex_str(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// SNAT over IPv6, TCP: a router's time exceeded for the translated
    /// SYN reaches the client quoting the client's own SYN, checksums
    /// (ICMPv6 pseudo header included) right.
    #[test]
    fn icmpv6_time_exceeded_of_snat_connection() {
        let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let (c, s, t, r) = (
            a("2001:db8::1"),
            a("2001:db8::2"),
            a("2001:db8::99"),
            a("2001:db8::fe"),
        );
        let (m1, m2) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let syn = |src| {
            FrameBuilder::new(m1, m2)
                .ipv6(src, s)
                .tcp(40000, 443, 0x002)
                .tcp_seq(77)
                .build()
        };
        let mut scratch = CtScratch::default();
        let snat = ct(true, Some(NatKind::Src), Some(IpAddr::V6(t)), 0);
        let out = run(&[snat, DpAction::Output(2)], &syn(c), &mut scratch);
        assert_eq!(out, syn(t));
        let error = |dst, quote: &[u8]| {
            FrameBuilder::new(m2, m1)
                .ipv6(r, dst)
                .icmpv6(3, 0)
                .payload(&quote[14..])
                .build()
        };
        let out = run(
            &[ct(false, None, None, 0), DpAction::Output(1)],
            &error(t, &syn(t)),
            &mut scratch,
        );
        assert_eq!(out, error(c, &syn(c)));
        assert!(all_checksums_valid(&out));
        assert!(all_checksums_valid(&quoted_frame(&out)));
    }

    /// SNAT over IPv4 with a colliding client (port translated too) and
    /// the RFC 792 minimum quote (IP header + 8 bytes): the quoted UDP
    /// checksum is in it, a quoted TCP one is not.
    #[test]
    fn icmp_time_exceeded_of_snat_connection_short_quote() {
        let a = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap();
        let (c1, c2, s, t, r) = (
            a("198.18.0.1"),
            a("198.18.0.3"),
            a("198.18.0.2"),
            a("203.0.113.1"),
            a("198.18.0.254"),
        );
        let (m1, m2) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        for tcp in [false, true] {
            let pkt = |src, sport| {
                let b = FrameBuilder::new(m1, m2).ipv4(src, s).ident(9);
                let b = if tcp {
                    b.tcp(sport, 53, 0x002)
                } else {
                    b.udp(sport, 53)
                };
                b.payload(b"query").build()
            };
            let mut scratch = CtScratch::default();
            let snat = ct(true, Some(NatKind::Src), Some(IpAddr::V4(t)), 0);
            run(
                &[snat.clone(), DpAction::Output(2)],
                &pkt(c1, 4000),
                &mut scratch,
            );
            let out = run(&[snat, DpAction::Output(2)], &pkt(c2, 4000), &mut scratch);
            assert_eq!(out, pkt(t, 4001), "second client moved to 4001");
            let error = |dst, quote: &[u8]| {
                FrameBuilder::new(m2, m1)
                    .ipv4(r, dst)
                    .icmp(11, 0)
                    .payload(&quote[14..14 + 28])
                    .pad_to(80)
                    .build()
            };
            let out = run(
                &[ct(false, None, None, 0), DpAction::Output(1)],
                &error(t, &pkt(t, 4001)),
                &mut scratch,
            );
            assert_eq!(out, error(c2, &pkt(c2, 4000)), "tcp {tcp}");
            let l = parse::parse(&out).unwrap();
            assert_eq!(verify_ipv4_header(&out, &l), Some(true));
            assert_eq!(checksum(&out[usize::from(l.l4_offset)..l.l4_end()]), 0);
            let q = usize::from(l.l4_offset) + 8;
            assert_eq!(checksum(&out[q..q + 20]), 0, "quoted IPv4 header");
        }
    }

    fn select(
        method: crate::datapath::action::SelectMethod,
        buckets: Vec<(u16, Vec<DpAction>)>,
    ) -> DpAction {
        DpAction::Select {
            group: 7,
            method,
            buckets: buckets
                .into_iter()
                .enumerate()
                .map(
                    |(i, (weight, actions))| crate::datapath::action::SelectBucket {
                        index: i as u16,
                        weight,
                        actions,
                    },
                )
                .collect(),
        }
    }

    /// Run `actions` on one frame with `sel`'s state: (port, frame) sent,
    /// and whether the frame itself was left over.
    fn run_sel(
        actions: &[DpAction],
        frame: &[u8],
        sel: &mut SelectStates,
        meters: &mut crate::datapath::meter::Meters,
    ) -> (Vec<(u32, Vec<u8>)>, ExecResult) {
        let mut layout = parse::parse(frame).unwrap();
        let mut tx = TxBatch::default();
        let mut scratch = CtScratch::default();
        let r = execute(
            actions,
            1,
            PacketBuf::from_slice(frame),
            &mut layout,
            &mut tx,
            &mut Vec::new(),
            &mut VecDeque::new(),
            0,
            meters,
            sel,
            &mut scratch.stage(Instant::now()),
        );
        let out = tx
            .pkts
            .drain(..)
            .map(|(p, b)| (p, b.data().to_vec()))
            .collect();
        (out, r)
    }

    #[test]
    fn select_runs_one_bucket_per_packet_then_the_rest() {
        use crate::datapath::action::SelectMethod;
        let frame = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
            .udp(1000, 53)
            .payload(b"select")
            .build();
        // A bucket that tags and puts the frame back, as xlate builds it.
        let acts = vec![
            select(
                SelectMethod::RoundRobin,
                vec![
                    (
                        1,
                        vec![
                            DpAction::PushVlan {
                                tpid: 0x8100,
                                tci: 10,
                            },
                            DpAction::Output(2),
                            DpAction::PopVlan,
                        ],
                    ),
                    (1, vec![DpAction::Output(3)]),
                ],
            ),
            DpAction::Output(4),
        ];
        let mut sel = SelectStates::default();
        let mut meters = crate::datapath::meter::Meters::default();
        for n in 0..4 {
            let (out, r) = run_sel(&acts, &frame, &mut sel, &mut meters);
            let ports: Vec<u32> = out.iter().map(|o| o.0).collect();
            assert_eq!(ports, vec![if n % 2 == 0 { 2 } else { 3 }, 4], "packet {n}");
            if n % 2 == 0 {
                assert_eq!(&out[0].1[12..16], &[0x81, 0, 0, 10]);
            }
            assert_eq!(out[1].1, frame, "the frame after the group is as it came");
            assert!(r.leftover.is_none(), "the last output takes the frame");
        }
        // Select last: the bucket's own last output takes the frame.
        let last = vec![select(
            SelectMethod::Weighted,
            vec![
                (3, vec![DpAction::Output(2)]),
                (1, vec![DpAction::Output(3)]),
            ],
        )];
        let mut ports = Vec::new();
        for _ in 0..8 {
            let (out, r) = run_sel(&last, &frame, &mut sel, &mut meters);
            assert!(r.leftover.is_none());
            assert_eq!(out.len(), 1);
            ports.push(out[0].0);
        }
        assert_eq!(ports, vec![2, 2, 3, 2, 2, 2, 3, 2]);
        // A drop inside a bucket ends the whole list, as it would inline.
        let dropping = vec![
            select(
                SelectMethod::RoundRobin,
                vec![(1, vec![DpAction::Drop(DropReason::TtlExceeded)])],
            ),
            DpAction::Output(4),
        ];
        let (out, r) = run_sel(&dropping, &frame, &mut sel, &mut meters);
        assert!(out.is_empty());
        assert_eq!(r.drop, Some(DropReason::TtlExceeded));
        assert!(r.leftover.is_some());
    }
}
