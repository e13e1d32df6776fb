//! The action executor: replays a datapath flow's actions on one frame.
//!
//! Header rewrites happen in place with incremental checksum updates
//! (`nicflow_packet::rewrite`); VLAN push/pop use the buffer's headroom and
//! re-parse the layout. An `Output` that is the last action hands the buffer
//! itself to the transmit batch; earlier outputs copy into pooled buffers, so
//! a unicast flow never copies and nothing allocates once the pool is warm.

use super::action::{DpAction, DropReason};
use super::ct::{CtMeta, CtStage};
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

#[allow(clippy::too_many_arguments)]
pub fn execute(
    actions: &[DpAction],
    _in_port: u32,
    mut pkt: PacketBuf,
    layout: &mut Layout,
    tx: &mut TxBatch,
    pool: &mut Vec<PacketBuf>,
    controller: &mut VecDeque<ControllerPacket>,
    controller_cap: usize,
    ct: &mut CtStage<'_>,
) -> ExecResult {
    let mut r = ExecResult::default();
    if actions.is_empty() {
        r.policy_drop = true;
        r.leftover = Some(pkt);
        return r;
    }
    let last = actions.len() - 1;
    for (i, a) in actions.iter().enumerate() {
        match a {
            DpAction::Output(port) => {
                if i == last {
                    tx.pkts.push((*port, pkt));
                    return r;
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
            DpAction::SetTos(t) => {
                rewrite::set_ip_tos(pkt.data_mut(), layout, *t);
            }
            DpAction::SetTtl(t) => {
                rewrite::set_ttl(pkt.data_mut(), layout, *t);
            }
            DpAction::SetTpSrc(p) => {
                let partial = pkt.csum_partial();
                rewrite::set_tp_src_ext(pkt.data_mut(), layout, *p, partial);
            }
            DpAction::SetTpDst(p) => {
                let partial = pkt.csum_partial();
                rewrite::set_tp_dst_ext(pkt.data_mut(), layout, *p, partial);
            }
            DpAction::PushVlan { tpid, tci } => {
                rewrite::push_vlan(&mut pkt, *tpid, *tci);
                reparse(&pkt, layout);
            }
            DpAction::PopVlan => {
                rewrite::pop_vlan(&mut pkt);
                reparse(&pkt, layout);
            }
            DpAction::SetVlanTci(tci) => {
                // Keep the DEI bit of the frame; VID and PCP come from the flow.
                rewrite::set_vlan_vid(pkt.data_mut(), tci & 0x0fff);
                rewrite::set_vlan_pcp(pkt.data_mut(), (tci >> 13) as u8);
            }
            DpAction::Controller { max_len } => {
                if controller.len() >= controller_cap {
                    r.controller_dropped = true;
                } else {
                    let n = (*max_len as usize).min(pkt.len());
                    let n = if *max_len == 0 { pkt.len() } else { n };
                    let mut data = pkt.data().to_vec();
                    if pkt.csum_partial() {
                        // The controller gets a finished checksum. A GSO
                        // super-frame is sent up whole (its IP length is
                        // its real length), not segmented.
                        crate::port::complete_checksum(&mut data, layout);
                    }
                    data.truncate(n);
                    controller.push_back(ControllerPacket {
                        in_port: _in_port,
                        data,
                    });
                    r.controller = true;
                }
            }
            DpAction::Drop(reason) => {
                r.drop = Some(*reason);
                break;
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
                if i == last {
                    ct.recirc.push(((pkt, ct.meta, *id), ct.depth));
                    return r;
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
        }
    }
    r.leftover = Some(pkt);
    r
}

/// Write what NAT decided into the frame. Same-size fields, so the layout
/// stays valid; checksums are patched incrementally (partial ones only in
/// the pseudo-header part, as for any address rewrite).
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
}

/// Re-read the headers after a push or pop. Our own pushes may stack more
/// tags than a received frame may carry, hence the higher limit; a frame
/// that still cannot be parsed gets an empty layout, so later L3/L4
/// rewrites are skipped rather than written at stale offsets.
fn reparse(pkt: &PacketBuf, layout: &mut Layout) {
    *layout = parse::parse_with_tag_limit(pkt.data(), 8).unwrap_or_default();
}
