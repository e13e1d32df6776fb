//! Stage 1: Open vSwitch 3.1's TC gate — what `netdev_tc_flow_put()`
//! (`lib/netdev-offload-tc.c`, v3.1.0) and the netlink encoder behind it
//! (`lib/tc.c`: `nl_msg_put_flower_acts`, `csum_update_flag`) make of a
//! kernel-datapath flow when `other_config:hw-offload=true`.
//!
//! Place in a packet's path: none — this runs where OVS's revalidator /
//! handler thread would call `dpif_netlink_operate()` → `parse_flow_put()`
//! for a new megaflow, before the flow reaches TC and the NIC driver. A
//! refusal here means OVS keeps the flow in the kernel datapath only, for
//! every NIC alike.
//!
//! The checks run in OVS's order, because the first refusal decides and
//! its message is the contract:
//!
//! 1. `lib/dpif-netlink.c:parse_flow_put` — the in_port and every
//!    top-level output port must have a netdev in OVS's port map;
//! 2. `netdev_tc_flow_put` — the match is consumed field by field into
//!    the flower key (tunnel → `enc_*`, VLAN tags, L2, ARP, L3/L4,
//!    conntrack), each consumed field's mask cleared;
//! 3. `test_key_and_mask` — named refusals (pkt_mark, dp_hash, ...), then
//!    any mask bit left over ("unknown attribute");
//! 4. `netdev_tc_parse_nl_actions` — actions in order, at most
//!    `TCA_ACT_MAX_NUM` (16) of them;
//! 5. `lib/tc.c:nl_msg_put_flower_acts` — pedit checksum flags
//!    (`csum_update_flag`), tunnel release before output, no goto after
//!    a release.
//!
//! Assumptions about the running system (OVS probes them at start-up;
//! Linux 6.1 passes every probe): `ct_state_support` holds all six
//! flower ct flags (NEW, ESTABLISHED, RELATED, REPLY, INVALID, TRACKED),
//! the datapath has `OVS_DP_F_TC_RECIRC_SHARING`, and every meter a flow
//! names was offloaded as a police action (OVS maps only meters whose
//! first band is `drop`: `meter_tc_set_policer`; the model's
//! [`DpAction::Meter`] carries no bands).
//!
//! As in OVS, checks read the match's *values* even under a zero mask
//! (OVS's `match->flow` is the full datapath key): e.g. a
//! `set(ipv4(...))` on a flow that does not match `nw_proto` takes its
//! checksum flag from the packet's protocol in the key's value and then
//! makes the filter match that protocol exactly (`csum_update_flag`'s
//! `needs_full_ip_proto_mask`).

use crate::model::{
    cs, DpAction, DpFlow, DpMatch, Masked, Port, PortKind, SetHeader, TunnelSet, TunnelType,
};
use crate::tc::{csum_flag, PeditField, TcAction, TcFlower};
use crate::{Refusal, Stage};

/// `TCA_ACT_MAX_NUM` in `lib/tc.h` (v3.1.0): the most actions one flower
/// filter of OVS's may have.
pub const TCA_ACT_MAX_NUM: usize = 16;

/// `OVS_ACTION_ATTR_*` (`include/linux/openvswitch.h` in OVS's tree,
/// v3.1.0): the numbers OVS prints in "unsupported put action type: %d".
pub mod action_attr {
    pub const USERSPACE: u32 = 2;
    pub const SAMPLE: u32 = 6;
    pub const HASH: u32 = 8;
    pub const TRUNC: u32 = 13;
    pub const PUSH_ETH: u32 = 14;
    pub const POP_ETH: u32 = 15;
    pub const PUSH_NSH: u32 = 17;
    pub const POP_NSH: u32 = 18;
    pub const CLONE: u32 = 20;
    pub const ADD_MPLS: u32 = 22;
    pub const TUNNEL_PUSH: u32 = 23;
    pub const TUNNEL_POP: u32 = 24;
    pub const LB_OUTPUT: u32 = 26;
}

/// `OVS_KEY_ATTR_*` (same header): the numbers OVS prints in
/// "unsupported set action type: %d".
pub mod key_attr {
    pub const PRIORITY: u32 = 2;
    pub const ETHERNET: u32 = 4;
    pub const IPV4: u32 = 7;
    pub const IPV6: u32 = 8;
    pub const TCP: u32 = 9;
    pub const UDP: u32 = 10;
    pub const ARP: u32 = 13;
    pub const ND: u32 = 14;
    pub const SKB_MARK: u32 = 15;
    pub const SCTP: u32 = 17;
}

/// `OVS_TUNNEL_KEY_ATTR_OAM` (same header): `set(tunnel(...,flags(oam)))`
/// has no TC equivalent.
const OVS_TUNNEL_KEY_ATTR_OAM: u32 = 7;

/// OVS's `FLOW_TNL_F_*` (`lib/packets.h`).
const FLOW_TNL_F_DONT_FRAGMENT: u16 = 1;
const FLOW_TNL_F_CSUM: u16 = 2;
const FLOW_TNL_F_KEY: u16 = 4;
const FLOW_TNL_F_OAM: u16 = 8;

/// `FLOW_NW_FRAG_*`.
const FLOW_NW_FRAG_ANY: u8 = 1;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IPV6: u16 = 0x86dd;
/// `OFP_DL_TYPE_NOT_ETH_TYPE`: an 802.3 frame without an Ethertype.
const OFP_DL_TYPE_NOT_ETH_TYPE: u16 = 0x05ff;

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_IGMP: u8 = 2;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_SCTP: u8 = 132;

const VLAN_VID_MASK: u16 = 0x0fff;
const VLAN_PCP_MASK: u16 = 0xe000;
const VLAN_CFI: u16 = 0x1000;

/// The OVS `CS_*` bits `parse_match_ct_state_to_flower` maps to
/// `TCA_FLOWER_KEY_CT_FLAGS_*`, as `probe_ct_state_support` finds them on
/// Linux 6.1 (all probes pass). SRC_NAT / DST_NAT have no flower flag.
const CT_STATE_SUPPORT: u32 =
    cs::NEW | cs::ESTABLISHED | cs::RELATED | cs::REPLY_DIR | cs::INVALID | cs::TRACKED;

const SRC_PUT: &str = "lib/netdev-offload-tc.c:netdev_tc_flow_put";
const SRC_TEST: &str = "lib/netdev-offload-tc.c:test_key_and_mask";
const SRC_ACTS: &str = "lib/netdev-offload-tc.c:netdev_tc_parse_nl_actions";
const SRC_SET_MASKED: &str = "lib/netdev-offload-tc.c:parse_put_flow_set_masked_action";
const SRC_SET: &str = "lib/netdev-offload-tc.c:parse_put_flow_set_action";
const SRC_CT: &str = "lib/netdev-offload-tc.c:parse_put_flow_ct_action";
const SRC_DPIF: &str = "lib/dpif-netlink.c:parse_flow_put";
const SRC_CSUM: &str = "lib/tc.c:csum_update_flag";
const SRC_TC_ACTS: &str = "lib/tc.c:nl_msg_put_flower_acts";
/// Not OVS: a form OVS 3.1 offloads that the shared types cannot carry
/// (reported to the lead; see [`model_gap`]).
const SRC_MODEL: &str = "crates/hwprofile/src/tc.rs:TcAction";

fn refuse(source: &'static str, reason: impl Into<String>) -> Refusal {
    Refusal::new(Stage::Ovs, source, reason)
}

/// A flow OVS 3.1 *would* offload but whose translation the shared types
/// ([`DpAction`], [`TcAction`]) cannot express. Refused, never silently
/// accepted with a wrong filter; the reason says it is the model's gap.
fn model_gap(what: &str) -> Refusal {
    refuse(
        SRC_MODEL,
        format!("model gap: OVS 3.1 offloads {what}, which the shared types cannot carry"),
    )
}

/// The filter OVS would install for `flow`, or its refusal.
pub fn gate(flow: &DpFlow, ports: &[Port]) -> Result<TcFlower, Refusal> {
    let m = &flow.matching;
    let port = |no: u32| ports.iter().find(|p| p.no == no);

    // lib/dpif-netlink.c:parse_flow_put: netdev_ports_get() for the in_port,
    // then for every top-level output port, before netdev_flow_put().
    let indev = port(m.in_port).ok_or_else(|| {
        refuse(
            SRC_DPIF,
            format!(
                "parse_flow_put: netdev_ports_get found no netdev for in_port {}",
                m.in_port
            ),
        )
    })?;
    for a in &flow.actions {
        if let DpAction::Output { port: no } = a {
            if port(*no).is_none() {
                return Err(refuse(
                    SRC_DPIF,
                    format!(
                        "parse_flow_put: netdev_ports_get found no netdev for output port {no}"
                    ),
                ));
            }
        }
    }

    let (mut key, tunnel) = put_match(m, indev)?;
    let acts = parse_actions(&flow.actions, ports)?;
    // `(chain || recirc_act) && !info->recirc_id_shared_with_tc`: Linux 6.1
    // has OVS_DP_F_TC_RECIRC_SHARING, so chains are accepted.
    let actions = put_flower_acts(acts, &mut key, tunnel)?;

    // OVS is done and would install the filter. A port that is on no NIC
    // (a TAP, a veth) still gets OVS's `linux_tc` flow API
    // (`netdev_tc_init_flow_api` only needs an ifindex), so OVS accepts;
    // but the filter sits on a block with no driver callback, and the
    // kernel keeps it in software only (`in_hw_count` 0). No driver stage
    // sees it, so it is decided here, as the kernel's outcome.
    if let PortKind::Other { what } = &indev.kind {
        return Err(Refusal::new(
            Stage::Driver,
            "net/sched/cls_api.c:tc_setup_cb_add",
            format!(
                "tc_setup_cb_add: no offload callback on the block of {} ({what}): the filter stays in software (in_hw_count 0)",
                indev.name
            ),
        ));
    }

    Ok(TcFlower {
        chain: m.recirc_id,
        indev: indev.clone(),
        key,
        actions,
    })
}

fn mac_nonzero(m: &Masked<[u8; 6]>) -> bool {
    m.mask != [0; 6]
}

/// The match half of `netdev_tc_flow_put`, then `test_key_and_mask`.
/// Returns the flower key (as a [`DpMatch`]) and `flower.tunnel`.
fn put_match(m: &DpMatch, indev: &Port) -> Result<(DpMatch, bool), Refusal> {
    // `rest` is OVS's `mask` as it is consumed: each field OVS turns into a
    // flower key has its mask cleared; what is left is refused by
    // test_key_and_mask. `key` is the flower key the filter gets.
    let mut rest = m.clone();
    let mut key = m.clone();
    key.recirc_id = 0;
    key.in_port = 0;
    rest.recirc_id = 0;
    rest.in_port = 0;

    // Tunnel: flow_tnl_dst_is_set() || flow_tnl_src_is_set() on the key.
    let mut tunnel = false;
    match &m.tunnel {
        Some(t)
            if t.ipv4_dst.value != 0
                || t.ipv6_dst.value != 0
                || t.ipv4_src.value != 0
                || t.ipv6_src.value != 0 =>
        {
            tunnel = true;
            let mut r = t.clone();
            r.ipv4_src.mask = 0;
            r.ipv4_dst.mask = 0;
            r.ipv6_src.mask = 0;
            r.ipv6_dst.mask = 0;
            r.tos.mask = 0;
            r.ttl.mask = 0;
            r.tp_src.mask = 0;
            r.tp_dst.mask = 0;
            r.tun_id.mask = 0;
            // KEY consumed; DF and CSUM ignored ("XXX: This is wrong!").
            r.flags.mask &= !(FLOW_TNL_F_KEY | FLOW_TNL_F_DONT_FRAGMENT | FLOW_TNL_F_CSUM);
            // flower_match_to_tun_opt() runs on "geneve" netdevs only.
            let geneve = matches!(
                indev.kind,
                PortKind::Tunnel {
                    tunnel: TunnelType::Geneve,
                    ..
                }
            );
            if geneve {
                r.geneve_opts.clear();
            }
            rest.tunnel = Some(r);

            let mut k = t.clone();
            // "Degrading the flow down to exact match for now": mlx5
            // refuses a masked enc_dst_port.
            k.tp_dst.mask = u16::MAX;
            if t.flags.value & FLOW_TNL_F_KEY == 0 {
                k.tun_id.mask = 0;
            }
            // Flower has no key for the tunnel flags.
            k.flags = Masked::default();
            key.tunnel = Some(k);
        }
        _ => {
            // "There is no tunnel metadata to match on, but there could be
            // some mask bits set due to flow translation artifacts."
            rest.tunnel = None;
            key.tunnel = None;
        }
    }

    // VLAN tags. FLOW_MAX_VLAN_HEADERS is 2: a datapath flow cannot carry
    // a third tag, so such an input is not a flow OVS could have.
    if m.vlans.len() > 2 {
        return Err(refuse(
            SRC_PUT,
            format!(
                "netdev_tc_flow_put: {} vlan tags matched, OVS's struct flow holds FLOW_MAX_VLAN_HEADERS (2)",
                m.vlans.len()
            ),
        ));
    }
    let mut kept_vlans = Vec::new();
    for (i, v) in m.vlans.iter().enumerate() {
        let mask = v.tci.mask;
        if mask == 0 {
            kept_vlans.push(*v);
            continue;
        }
        let vid = mask & VLAN_VID_MASK;
        let pcp = mask & VLAN_PCP_MASK;
        let cfi = mask & VLAN_CFI;
        if cfi != 0
            && v.tci.value & VLAN_CFI != 0
            && (vid == 0 || vid == VLAN_VID_MASK)
            && (pcp == 0 || pcp == VLAN_PCP_MASK)
            && (vid != 0 || pcp != 0)
        {
            kept_vlans.push(*v);
        } else if mask == 0xffff && v.tci.value == 0 {
            // "exact && no vlan": flower needs no key for it.
        } else {
            // "partial mask": bare EOPNOTSUPP.
            return Err(refuse(
                SRC_PUT,
                format!(
                    "netdev_tc_flow_put: vlans[{i}].tci mask {mask:#06x} on {:#06x} is a partial mask (flower takes the whole VID and/or PCP of a present tag)",
                    v.tci.value
                ),
            ));
        }
    }
    key.vlans = kept_vlans;
    rest.vlans.clear();

    rest.eth_dst.mask = [0; 6];
    rest.eth_src.mask = [0; 6];
    rest.eth_type.mask = 0;

    let dl_type = m.eth_type.value;
    if dl_type == ETH_P_ARP {
        rest.ipv4_src.mask = 0;
        rest.ipv4_dst.mask = 0;
        rest.nw_proto.mask = 0;
        rest.arp_sha.mask = [0; 6];
        rest.arp_tha.mask = [0; 6];
    }

    let nw_proto = m.nw_proto.value;
    let ipv6_frag = is_ipv6_fragment_and_masked(m);
    if (dl_type == ETH_P_IP || dl_type == ETH_P_IPV6) && !ipv6_frag {
        rest.nw_proto.mask = 0;
        rest.nw_tos.mask = 0;
        rest.nw_ttl.mask = 0;
        if m.nw_frag.mask & FLOW_NW_FRAG_ANY != 0 {
            rest.nw_frag.mask = 0;
        }
        match nw_proto {
            IPPROTO_TCP => {
                rest.tp_src.mask = 0;
                rest.tp_dst.mask = 0;
                rest.tcp_flags.mask = 0;
            }
            IPPROTO_UDP | IPPROTO_SCTP | IPPROTO_ICMP | IPPROTO_ICMPV6 => {
                rest.tp_src.mask = 0;
                rest.tp_dst.mask = 0;
            }
            _ => {}
        }
        if dl_type == ETH_P_IP {
            rest.ipv4_src.mask = 0;
            rest.ipv4_dst.mask = 0;
        } else {
            rest.ipv6_src.mask = 0;
            rest.ipv6_dst.mask = 0;
        }
    }

    // parse_match_ct_state_to_flower().
    if CT_STATE_SUPPORT & m.ct_state.mask == m.ct_state.mask {
        rest.ct_state.mask = 0;
        let mut k = m.ct_state;
        k.value &= k.mask;
        if k.value & cs::ESTABLISHED != 0 {
            k.value &= !cs::NEW;
            k.mask &= !cs::NEW;
        }
        if k.value != 0 && k.value & cs::TRACKED == 0 {
            k.value |= cs::TRACKED;
            k.mask |= cs::TRACKED;
        }
        key.ct_state = k;
    }
    rest.ct_zone.mask = 0;
    rest.ct_mark.mask = 0;
    rest.ct_label.mask = 0;

    // "ignore exact match on skb_mark of 0."
    if m.pkt_mark.mask == u32::MAX && m.pkt_mark.value == 0 {
        rest.pkt_mark.mask = 0;
        key.pkt_mark = Masked::default();
    }

    test_key_and_mask(m, &rest, ipv6_frag)?;
    Ok((key, tunnel))
}

/// `is_ipv6_fragment_and_masked()`.
fn is_ipv6_fragment_and_masked(m: &DpMatch) -> bool {
    if m.eth_type.value != ETH_P_IPV6 {
        return false;
    }
    if m.nw_proto.mask != 0 && m.nw_proto.value == IPPROTO_FRAGMENT {
        return true;
    }
    m.nw_frag.value & (m.nw_frag.mask & FLOW_NW_FRAG_ANY) != 0
}

/// `test_key_and_mask()`: `key` is the flow, `rest` the mask left after
/// `netdev_tc_flow_put` consumed what it knows.
fn test_key_and_mask(key: &DpMatch, rest: &DpMatch, ipv6_frag: bool) -> Result<(), Refusal> {
    let attr = |name: &str| {
        Err(refuse(
            SRC_TEST,
            format!("offloading attribute {name} isn't supported"),
        ))
    };
    if rest.pkt_mark.mask != 0 {
        return attr("pkt_mark");
    }
    if rest.dp_hash.mask != 0 {
        return attr("dp_hash");
    }
    if rest.skb_priority.mask != 0 {
        return attr("skb_priority");
    }
    if rest.nw_tos.mask != 0 {
        return attr("nw_tos");
    }
    let dl_type = key.eth_type.value;
    if dl_type == ETH_P_IP && key.nw_proto.value == IPPROTO_IGMP {
        if rest.tp_src.mask != 0 {
            return attr("igmp_type");
        }
        if rest.tp_dst.mask != 0 {
            return attr("igmp_code");
        }
    } else if dl_type == OFP_DL_TYPE_NOT_ETH_TYPE {
        return Err(refuse(
            SRC_TEST,
            "offloading of non-ethernet packets isn't supported",
        ));
    }
    if ipv6_frag {
        return Err(refuse(
            SRC_TEST,
            "offloading of IPv6 fragments isn't supported",
        ));
    }
    if !mask_is_zero(rest) {
        // The log goes on with "\nUnused mask bits:\n" and a hex dump of
        // OVS's `struct flow` mask; the first line is the stable text.
        return Err(refuse(
            SRC_TEST,
            "offloading isn't supported, unknown attribute",
        ));
    }
    Ok(())
}

/// `is_all_zeros(mask, sizeof *mask)` over the fields the model carries.
fn mask_is_zero(r: &DpMatch) -> bool {
    let tunnel_zero = match &r.tunnel {
        None => true,
        Some(t) => {
            t.tun_id.mask == 0
                && t.ipv4_src.mask == 0
                && t.ipv4_dst.mask == 0
                && t.ipv6_src.mask == 0
                && t.ipv6_dst.mask == 0
                && t.tos.mask == 0
                && t.ttl.mask == 0
                && t.tp_src.mask == 0
                && t.tp_dst.mask == 0
                && t.flags.mask == 0
                // Options left (not on a geneve port) leave at least their
                // length, which OVS matches exactly, in the mask.
                && t.geneve_opts.is_empty()
        }
    };
    tunnel_zero
        && r.dp_hash.mask == 0
        && r.pkt_mark.mask == 0
        && r.skb_priority.mask == 0
        && r.ct_state.mask == 0
        && r.ct_zone.mask == 0
        && r.ct_mark.mask == 0
        && r.ct_label.mask == 0
        && !r.ct_tuple_matched
        && !mac_nonzero(&r.eth_src)
        && !mac_nonzero(&r.eth_dst)
        && r.vlans.iter().all(|v| v.tci.mask == 0)
        && r.eth_type.mask == 0
        && r.ipv4_src.mask == 0
        && r.ipv4_dst.mask == 0
        && r.ipv6_src.mask == 0
        && r.ipv6_dst.mask == 0
        && r.ipv6_label.mask == 0
        && r.nw_proto.mask == 0
        && r.nw_tos.mask == 0
        && r.nw_ttl.mask == 0
        && r.nw_frag.mask == 0
        && r.tp_src.mask == 0
        && r.tp_dst.mask == 0
        && r.tcp_flags.mask == 0
        && !mac_nonzero(&r.arp_sha)
        && !mac_nonzero(&r.arp_tha)
        && r.nd_target.mask == 0
}

/// `enum pedit_header_type` of a rewritten field (`flower_pedit_map`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Htype {
    Eth,
    Ip4,
    Ip6,
    Tcp,
    Udp,
}

/// OVS's `struct tc_action` as `netdev_tc_parse_nl_actions` leaves it,
/// before `lib/tc.c` encodes it.
enum OvsAct {
    Output {
        port: Port,
        ingress: bool,
    },
    Encap(TcAction),
    Pedit(Vec<(PeditField, Htype)>),
    Plain(TcAction),
    /// `TC_ACT_GOTO`: recirc (chain N) or an explicit drop (chain 0).
    Goto(TcAction),
}

/// `netdev_tc_parse_nl_actions()` over the top-level actions.
fn parse_actions(actions: &[DpAction], ports: &[Port]) -> Result<Vec<OvsAct>, Refusal> {
    let mut out: Vec<OvsAct> = Vec::new();
    let unsupported = |t: u32| {
        Err(refuse(
            SRC_ACTS,
            format!("unsupported put action type: {t}"),
        ))
    };
    for (i, a) in actions.iter().enumerate() {
        if out.len() >= TCA_ACT_MAX_NUM {
            return Err(refuse(
                SRC_ACTS,
                format!("Can only support {TCA_ACT_MAX_NUM} actions"),
            ));
        }
        let act = match a {
            DpAction::Output { port } => {
                // Present: checked by parse_flow_put.
                let Some(p) = ports.iter().find(|p| p.no == *port) else {
                    return Err(refuse(
                        SRC_ACTS,
                        format!("Can't find netdev for output port {port}"),
                    ));
                };
                // Every PortKind gets the same `linux_tc` flow API, so
                // "Flow API provider mismatch" cannot arise here.
                OvsAct::Output {
                    port: p.clone(),
                    ingress: p.kind == PortKind::Internal,
                }
            }
            DpAction::SetTunnel(t) => OvsAct::Encap(encap(t, &actions[i + 1..], ports)?),
            DpAction::Set(h) => OvsAct::Pedit(set_masked(h)?),
            DpAction::PushVlan { tpid, tci } => OvsAct::Plain(TcAction::VlanPush {
                tpid: *tpid,
                vid: tci & VLAN_VID_MASK,
                prio: (tci >> 13) as u8,
            }),
            DpAction::PopVlan => OvsAct::Plain(TcAction::VlanPop),
            DpAction::Ct(ct) => {
                if let Some(helper) = &ct.helper {
                    // "The following option we do not support in tc-ct, and
                    // should not be ignored for proper operation."
                    return Err(refuse(
                        SRC_CT,
                        format!("parse_put_flow_ct_action: OVS_CT_ATTR_HELPER (helper={helper}) is not supported in tc-ct"),
                    ));
                }
                OvsAct::Plain(TcAction::Ct(ct.clone()))
            }
            DpAction::CtClear => OvsAct::Plain(TcAction::CtClear),
            DpAction::Recirc { id } => OvsAct::Goto(TcAction::Goto { chain: *id }),
            // netdev_tc_parse_nl_actions: `if (meter_id_lookup(meter_id,
            // &police_index)) return EOPNOTSUPP;` (no log): the meter has no
            // police action when its first band is not drop.
            DpAction::Meter {
                id,
                drop_band: false,
            } => {
                return Err(Refusal::new(
                    Stage::Ovs,
                    "lib/netdev-offload-tc.c:netdev_tc_parse_nl_actions",
                    format!(
                        "meter_id_lookup: meter {id} has no TC police action \
                         (meter_tc_set_policer makes one only when the first band is drop)"
                    ),
                ))
            }
            DpAction::Meter { id, .. } => OvsAct::Plain(TcAction::Police { meter: *id }),
            DpAction::Userspace => return unsupported(action_attr::USERSPACE),
            DpAction::Sample => return unsupported(action_attr::SAMPLE),
            DpAction::Hash => return unsupported(action_attr::HASH),
            DpAction::Clone => return unsupported(action_attr::CLONE),
            DpAction::Trunc => return unsupported(action_attr::TRUNC),
            DpAction::CheckPktLen => {
                // parse_check_pkt_len_action(): police mtu + jumps over the
                // nested action lists, which DpAction::CheckPktLen omits.
                return Err(model_gap(
                    "check_pkt_len (police mtu over its nested actions)",
                ));
            }
            DpAction::Mpls => {
                return Err(model_gap(
                    "push_mpls / pop_mpls / set(mpls) (TC_ACT_MPLS_*)",
                ))
            }
            DpAction::Other { name } => match other_attr(name) {
                Some(t) => return unsupported(t),
                None if name == "drop" => {
                    // OVS_ACTION_ATTR_DROP: a gact goto chain 0, i.e. shot.
                    OvsAct::Goto(TcAction::Drop)
                }
                None => {
                    return Err(refuse(
                        SRC_ACTS,
                        format!("netdev_tc_parse_nl_actions: no branch for action {name}"),
                    ))
                }
            },
        };
        out.push(act);
    }
    Ok(out)
}

/// The `OVS_ACTION_ATTR_*` number of an action named in ODP syntax that
/// the TC translation has no branch for.
fn other_attr(name: &str) -> Option<u32> {
    Some(match name {
        "userspace" => action_attr::USERSPACE,
        "sample" => action_attr::SAMPLE,
        "hash" => action_attr::HASH,
        "trunc" => action_attr::TRUNC,
        "push_eth" => action_attr::PUSH_ETH,
        "pop_eth" => action_attr::POP_ETH,
        "push_nsh" => action_attr::PUSH_NSH,
        "pop_nsh" => action_attr::POP_NSH,
        "clone" => action_attr::CLONE,
        "add_mpls" => action_attr::ADD_MPLS,
        "tnl_push" | "tunnel_push" => action_attr::TUNNEL_PUSH,
        "tnl_pop" | "tunnel_pop" => action_attr::TUNNEL_POP,
        "lb_output" => action_attr::LB_OUTPUT,
        _ => return None,
    })
}

/// `parse_put_flow_set_action()` for `set(tunnel(...))`: TC_ACT_ENCAP.
fn encap(t: &TunnelSet, after: &[DpAction], ports: &[Port]) -> Result<TcAction, Refusal> {
    if t.flags & FLOW_TNL_F_OAM != 0 {
        return Err(refuse(
            SRC_SET,
            format!("unsupported tunnel key attribute {OVS_TUNNEL_KEY_ATTR_OAM}"),
        ));
    }
    // TC's tunnel_key set names no tunnel type; the device of the output
    // that follows does. Without one, the options say Geneve.
    let tunnel = after
        .iter()
        .find_map(|a| match a {
            DpAction::Output { port } => ports.iter().find(|p| p.no == *port),
            _ => None,
        })
        .and_then(|p| match p.kind {
            PortKind::Tunnel { tunnel, .. } => Some(tunnel),
            _ => None,
        })
        .unwrap_or(if t.geneve_opts.is_empty() {
            TunnelType::Vxlan
        } else {
            TunnelType::Geneve
        });
    Ok(TcAction::TunnelSet {
        tunnel,
        // OVS_TUNNEL_KEY_ATTR_ID is emitted only with FLOW_TNL_F_KEY.
        id: if t.flags & FLOW_TNL_F_KEY != 0 {
            t.tun_id
        } else {
            0
        },
        ipv4_src: t.ipv4_src,
        ipv4_dst: t.ipv4_dst,
        ipv6_src: t.ipv6_src,
        ipv6_dst: t.ipv6_dst,
        tos: t.tos,
        ttl: t.ttl,
        tp_dst: t.tp_dst,
        // `no_csum = 1` unless OVS_TUNNEL_KEY_ATTR_CSUM.
        csum: t.flags & FLOW_TNL_F_CSUM != 0,
        // OVS_TUNNEL_KEY_ATTR_DONT_FRAGMENT is ignored ("XXX: This is
        // wrong!"): TC is never asked for DF.
        dont_frag: false,
        opts: t.geneve_opts.clone(),
    })
}

/// `parse_put_flow_set_masked_action()`: the fields of `set_flower_map`,
/// or the refusal for a header it has no entry for.
fn set_masked(h: &SetHeader) -> Result<Vec<(PeditField, Htype)>, Refusal> {
    let unsupported_type = |t: u32| {
        Err(refuse(
            SRC_SET_MASKED,
            format!("unsupported set action type: {t}"),
        ))
    };
    let mut f = Vec::new();
    let mut add = |on: bool, field: PeditField, ht: Htype| {
        if on {
            f.push((field, ht));
        }
    };
    match h {
        SetHeader::Eth { src, dst } => {
            add(mac_nonzero(src), PeditField::EthSrc, Htype::Eth);
            add(mac_nonzero(dst), PeditField::EthDst, Htype::Eth);
        }
        SetHeader::Ipv4 { src, dst, tos, ttl } => {
            add(src.mask != 0, PeditField::Ipv4Src, Htype::Ip4);
            add(dst.mask != 0, PeditField::Ipv4Dst, Htype::Ip4);
            add(ttl.mask != 0, PeditField::Ipv4Ttl, Htype::Ip4);
            add(tos.mask != 0, PeditField::Ipv4Tos, Htype::Ip4);
        }
        SetHeader::Ipv6 {
            src,
            dst,
            tclass,
            hlimit,
            label,
        } => {
            if label.mask != 0 {
                // set_flower_map[OVS_KEY_ATTR_IPV6] has no ipv6_label: its
                // mask is left after the known members are cleared.
                return Err(refuse(
                    SRC_SET_MASKED,
                    format!(
                        "unsupported sub attribute of set action type {}",
                        key_attr::IPV6
                    ),
                ));
            }
            add(hlimit.mask != 0, PeditField::Ipv6Hlimit, Htype::Ip6);
            add(src.mask != 0, PeditField::Ipv6Src, Htype::Ip6);
            add(dst.mask != 0, PeditField::Ipv6Dst, Htype::Ip6);
            add(tclass.mask != 0, PeditField::Ipv6Tclass, Htype::Ip6);
        }
        SetHeader::Tcp { src, dst } => {
            add(src.mask != 0, PeditField::TcpSport, Htype::Tcp);
            add(dst.mask != 0, PeditField::TcpDport, Htype::Tcp);
        }
        SetHeader::Udp { src, dst } => {
            add(src.mask != 0, PeditField::UdpSport, Htype::Udp);
            add(dst.mask != 0, PeditField::UdpDport, Htype::Udp);
        }
        SetHeader::Sctp { .. } => return unsupported_type(key_attr::SCTP),
        SetHeader::Arp => return unsupported_type(key_attr::ARP),
        SetHeader::Nd => return unsupported_type(key_attr::ND),
        SetHeader::SkbMark(_) => return unsupported_type(key_attr::SKB_MARK),
        SetHeader::SkbPriority(_) => return unsupported_type(key_attr::PRIORITY),
    }
    Ok(f)
}

/// `nl_msg_put_flower_acts()` (`lib/tc.c`): the TC actions in order, a
/// `csum` after each run of pedits that rewrote an IP or L4 header, and
/// its refusals. `key` is updated where `csum_update_flag` forces a full
/// `ip_proto` match.
fn put_flower_acts(
    acts: Vec<OvsAct>,
    key: &mut DpMatch,
    tunnel: bool,
) -> Result<Vec<TcAction>, Refusal> {
    let mut out = Vec::new();
    let mut csum_flags = 0u32;
    let mut released = false;
    let n = acts.len();
    let ip_proto = if matches!(key.eth_type.value, ETH_P_IP | ETH_P_IPV6)
        && !is_ipv6_fragment_and_masked(key)
    {
        key.nw_proto.value
    } else {
        0
    };
    let put_csum = |out: &mut Vec<TcAction>, flags: &mut u32| {
        if *flags != 0 {
            out.push(TcAction::Csum { flags: *flags });
            *flags = 0;
        }
    };
    for (i, act) in acts.into_iter().enumerate() {
        if !matches!(act, OvsAct::Pedit(_)) {
            put_csum(&mut out, &mut csum_flags);
        }
        match act {
            OvsAct::Pedit(fields) => {
                for (_, ht) in &fields {
                    csum_update_flag(*ht, ip_proto, &mut csum_flags, key)?;
                }
                out.push(TcAction::Pedit {
                    fields: fields.into_iter().map(|(f, _)| f).collect(),
                });
                if i == n - 1 {
                    put_csum(&mut out, &mut csum_flags);
                }
            }
            OvsAct::Output { port, ingress } => {
                // A tunnel_key release precedes the first output/encap of a
                // flow matched on a tunnel (implicit in the model: the
                // drivers decap a flow whose indev is a tunnel device).
                released |= tunnel;
                out.push(TcAction::Mirred { port, ingress });
            }
            OvsAct::Encap(a) => {
                released |= tunnel;
                out.push(a);
            }
            OvsAct::Goto(a) => {
                if released {
                    // "We don't support tunnel release + output + goto for
                    // now, as next chain by default will try and match the
                    // tunnel metadata that was released/unset." -EOPNOTSUPP.
                    let what = match a {
                        TcAction::Goto { chain } => format!("goto chain {chain}"),
                        _ => "gact drop".to_string(),
                    };
                    return Err(refuse(
                        SRC_TC_ACTS,
                        format!("nl_msg_put_flower_acts: {what} after the tunnel_key release of a tunnel flow's output (tunnel release + output + goto is not supported)"),
                    ));
                }
                out.push(a);
            }
            OvsAct::Plain(a) => out.push(a),
        }
    }
    if n == 0 {
        out.push(TcAction::Drop);
    }
    Ok(out)
}

/// `csum_update_flag()`: the checksum a rewritten header needs, by the
/// flow's `ip_proto`.
fn csum_update_flag(
    ht: Htype,
    ip_proto: u8,
    flags: &mut u32,
    key: &mut DpMatch,
) -> Result<(), Refusal> {
    if ht == Htype::Eth {
        return Ok(());
    }
    if ht == Htype::Ip4 {
        *flags |= csum_flag::IPV4HDR;
    }
    match ip_proto {
        IPPROTO_TCP => *flags |= csum_flag::TCP,
        IPPROTO_UDP => *flags |= csum_flag::UDP,
        IPPROTO_ICMP => {}
        IPPROTO_ICMPV6 => *flags |= csum_flag::ICMP,
        p => {
            return Err(refuse(
                SRC_CSUM,
                format!("can't offload rewrite of IP/IPV6 with ip_proto: {p}"),
            ))
        }
    }
    // needs_full_ip_proto_mask.
    key.nw_proto.mask = u8::MAX;
    Ok(())
}

#[cfg(test)]
mod tests;
