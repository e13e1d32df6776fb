//! One test (at least) per rule of the gate, each citing where OVS v3.1.0
//! decides it; then acceptance tests showing the translation.

use super::*;
use crate::model::{CtAction, GeneveOpt, NatKind, TunnelMatch, VlanMatch};

const UPLINK: u32 = 1;
const VF0: u32 = 2;
const VF1: u32 = 3;
const VXLAN: u32 = 4;
const GENEVE: u32 = 5;
const BR_INT: u32 = 6;
const TAP: u32 = 7;

fn ports() -> Vec<Port> {
    let p = |no, name: &str, kind| Port {
        no,
        name: name.to_string(),
        kind,
    };
    vec![
        p(UPLINK, "p0", PortKind::Uplink),
        p(VF0, "pf0vf0", PortKind::Representor),
        p(VF1, "pf0vf1", PortKind::Representor),
        p(
            VXLAN,
            "vxlan_sys_4789",
            PortKind::Tunnel {
                tunnel: TunnelType::Vxlan,
                dst_port: 4789,
            },
        ),
        p(
            GENEVE,
            "genev_sys_6081",
            PortKind::Tunnel {
                tunnel: TunnelType::Geneve,
                dst_port: 6081,
            },
        ),
        p(BR_INT, "br-int", PortKind::Internal),
        p(
            TAP,
            "tap0",
            PortKind::Other {
                what: "tap".to_string(),
            },
        ),
    ]
}

fn port(no: u32) -> Port {
    ports().into_iter().find(|p| p.no == no).unwrap()
}

/// An IPv4/TCP megaflow as OVS's ct firewall would leave it: eth_type,
/// nw_proto and nw_frag exact, the addresses matched.
fn tcp4(in_port: u32) -> DpMatch {
    DpMatch {
        in_port,
        eth_dst: Masked::exact([0, 0, 0, 0, 0, 2]),
        eth_type: Masked::exact(ETH_P_IP),
        ipv4_src: Masked::exact(0x0a00_0001),
        ipv4_dst: Masked::exact(0x0a00_0002),
        nw_proto: Masked::exact(IPPROTO_TCP),
        nw_frag: Masked { value: 0, mask: 3 },
        tp_dst: Masked::exact(80),
        ..DpMatch::default()
    }
}

fn l2(in_port: u32) -> DpMatch {
    DpMatch {
        in_port,
        eth_dst: Masked::exact([0, 0, 0, 0, 0, 2]),
        ..DpMatch::default()
    }
}

fn flow(matching: DpMatch, actions: Vec<DpAction>) -> DpFlow {
    DpFlow { matching, actions }
}

fn out(port: u32) -> DpAction {
    DpAction::Output { port }
}

fn gate_ok(f: &DpFlow) -> TcFlower {
    match gate(f, &ports()) {
        Ok(tc) => tc,
        Err(e) => panic!("refused: {e}"),
    }
}

fn refused(f: &DpFlow) -> Refusal {
    match gate(f, &ports()) {
        Ok(tc) => panic!("accepted: {tc:?}"),
        Err(e) => e,
    }
}

fn assert_refusal(f: &DpFlow, source: &str, reason: &str) {
    let e = refused(f);
    assert_eq!(e.stage, Stage::Ovs, "{e:?}");
    assert_eq!(e.source_fn, source, "{e:?}");
    assert_eq!(e.reason, reason, "{e:?}");
}

fn unknown(f: &DpFlow) {
    assert_refusal(f, SRC_TEST, "offloading isn't supported, unknown attribute");
}

fn ct(zone: u16) -> CtAction {
    CtAction {
        zone,
        commit: false,
        force: false,
        mark: None,
        label: None,
        nat: None,
        helper: None,
    }
}

fn vxlan_decap_match() -> DpMatch {
    DpMatch {
        tunnel: Some(TunnelMatch {
            tun_id: Masked::exact(42),
            ipv4_src: Masked::exact(0xc0a8_0001),
            ipv4_dst: Masked::exact(0xc0a8_0002),
            tp_dst: Masked::exact(4789),
            // tnl_wc_init(): DF, CSUM, KEY matched exactly.
            flags: Masked {
                value: FLOW_TNL_F_KEY,
                mask: FLOW_TNL_F_KEY | FLOW_TNL_F_CSUM | FLOW_TNL_F_DONT_FRAGMENT,
            },
            ..TunnelMatch::default()
        }),
        ..l2(VXLAN)
    }
}

// ---- lib/dpif-netlink.c:parse_flow_put (v3.1.0) ----

#[test]
fn dpif_parse_flow_put_in_port_without_netdev() {
    // parse_flow_put: netdev_ports_get(in_port) NULL -> EOPNOTSUPP.
    let f = flow(l2(99), vec![out(VF0)]);
    assert_refusal(
        &f,
        SRC_DPIF,
        "parse_flow_put: netdev_ports_get found no netdev for in_port 99",
    );
}

#[test]
fn dpif_parse_flow_put_output_without_netdev() {
    // parse_flow_put: "Check the output port for a tunnel." loop, before
    // any match check (pkt_mark would be refused later).
    let mut m = l2(VF0);
    m.pkt_mark = Masked::exact(5);
    let f = flow(m, vec![out(77)]);
    assert_refusal(
        &f,
        SRC_DPIF,
        "parse_flow_put: netdev_ports_get found no netdev for output port 77",
    );
}

// ---- lib/netdev-offload-tc.c:test_key_and_mask (v3.1.0) ----

#[test]
fn test_key_and_mask_pkt_mark() {
    let mut m = l2(VF0);
    m.pkt_mark = Masked::exact(0x10);
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading attribute pkt_mark isn't supported",
    );
}

#[test]
fn netdev_tc_flow_put_ignores_exact_pkt_mark_zero() {
    // netdev_tc_flow_put: "ignore exact match on skb_mark of 0."
    let mut m = l2(VF0);
    m.pkt_mark = Masked::exact(0);
    let tc = gate_ok(&flow(m, vec![out(VF1)]));
    assert!(tc.key.pkt_mark.is_wild());
}

#[test]
fn test_key_and_mask_dp_hash() {
    // select groups / bonds: recirc after hash() matches dp_hash.
    let mut m = l2(VF0);
    m.recirc_id = 3;
    m.dp_hash = Masked {
        value: 1,
        mask: 0xf,
    };
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading attribute dp_hash isn't supported",
    );
}

#[test]
fn test_key_and_mask_skb_priority() {
    let mut m = l2(VF0);
    m.skb_priority = Masked::exact(7);
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading attribute skb_priority isn't supported",
    );
}

#[test]
fn test_key_and_mask_nw_tos_only_when_not_consumed() {
    // IP flows: netdev_tc_flow_put consumes nw_tos into ip_tos.
    let mut m = tcp4(VF0);
    m.nw_tos = Masked::exact(0x10);
    gate_ok(&flow(m, vec![out(VF1)]));
    // An IPv6 fragment skips the IP block: nw_tos is left and its check
    // comes before the fragment's.
    let m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_IPV6),
        nw_frag: Masked::exact(FLOW_NW_FRAG_ANY),
        nw_tos: Masked::exact(0),
        ..DpMatch::default()
    };
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading attribute nw_tos isn't supported",
    );
}

#[test]
fn test_key_and_mask_igmp_type_and_code() {
    let mut m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_IP),
        nw_proto: Masked::exact(IPPROTO_IGMP),
        tp_src: Masked::exact(0x16),
        ..DpMatch::default()
    };
    assert_refusal(
        &flow(m.clone(), vec![out(VF1)]),
        SRC_TEST,
        "offloading attribute igmp_type isn't supported",
    );
    m.tp_src = Masked::default();
    m.tp_dst = Masked::exact(0);
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading attribute igmp_code isn't supported",
    );
}

#[test]
fn test_key_and_mask_non_ethernet() {
    let m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(OFP_DL_TYPE_NOT_ETH_TYPE),
        ..DpMatch::default()
    };
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading of non-ethernet packets isn't supported",
    );
}

#[test]
fn test_key_and_mask_ipv6_fragments() {
    // is_ipv6_fragment_and_masked(): nw_frag ANY set and matched...
    let m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_IPV6),
        ipv6_dst: Masked::exact(1),
        nw_frag: Masked {
            value: FLOW_NW_FRAG_ANY,
            mask: 3,
        },
        ..DpMatch::default()
    };
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading of IPv6 fragments isn't supported",
    );
    // ... or nw_proto 44 (the fragment header) matched.
    let m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_IPV6),
        nw_proto: Masked::exact(IPPROTO_FRAGMENT),
        ..DpMatch::default()
    };
    assert_refusal(
        &flow(m, vec![out(VF1)]),
        SRC_TEST,
        "offloading of IPv6 fragments isn't supported",
    );
    // An IPv4 fragment is a flower flag (TCA_FLOWER_KEY_FLAGS_IS_FRAGMENT).
    let mut m = tcp4(VF0);
    m.nw_frag = Masked {
        value: FLOW_NW_FRAG_ANY,
        mask: 3,
    };
    m.tp_dst = Masked::default();
    gate_ok(&flow(m, vec![out(VF1)]));
}

#[test]
fn test_key_and_mask_unknown_ipv6_label() {
    // netdev_tc_flow_put never consumes ipv6_label.
    let m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_IPV6),
        ipv6_label: Masked::exact(0x12345),
        ..DpMatch::default()
    };
    unknown(&flow(m, vec![out(VF1)]));
}

#[test]
fn test_key_and_mask_unknown_nd_target_and_sll() {
    // IPv6 ND (OVN's nd_na responder flows): ICMPv6 type/code consumed,
    // nd_target and nd_sll (arp_sha in OVS's struct flow) not.
    let base = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_IPV6),
        nw_proto: Masked::exact(IPPROTO_ICMPV6),
        tp_src: Masked::exact(135),
        tp_dst: Masked::exact(0),
        ..DpMatch::default()
    };
    gate_ok(&flow(base.clone(), vec![out(VF1)]));
    let mut m = base.clone();
    m.nd_target = Masked::exact(0xfe80 << 112);
    unknown(&flow(m, vec![out(VF1)]));
    let mut m = base;
    m.arp_sha = Masked::exact([0, 0, 0, 0, 0, 9]);
    unknown(&flow(m, vec![out(VF1)]));
}

#[test]
fn test_key_and_mask_unknown_tcp_flags_on_udp() {
    // tcp_flags consumed only when key->nw_proto is TCP.
    let mut m = tcp4(VF0);
    m.tcp_flags = Masked::exact(0x02);
    gate_ok(&flow(m.clone(), vec![out(VF1)]));
    m.nw_proto = Masked::exact(IPPROTO_UDP);
    unknown(&flow(m, vec![out(VF1)]));
}

#[test]
fn test_key_and_mask_unknown_ports_of_other_protocols() {
    // GRE (47): tp_src/tp_dst consumed only for TCP/UDP/SCTP/ICMP/ICMPv6.
    let mut m = tcp4(VF0);
    m.nw_proto = Masked::exact(47);
    unknown(&flow(m, vec![out(VF1)]));
}

#[test]
fn test_key_and_mask_unknown_nw_frag_later_alone() {
    // nw_frag is consumed only when its mask has FLOW_NW_FRAG_ANY.
    let mut m = tcp4(VF0);
    m.nw_frag = Masked { value: 0, mask: 2 };
    unknown(&flow(m, vec![out(VF1)]));
}

#[test]
fn test_key_and_mask_unknown_ct_tuple() {
    // ct_nw_src/... (OVN's load balancer hairpin flows) have no flower key.
    let mut m = tcp4(VF0);
    m.ct_tuple_matched = true;
    unknown(&flow(m, vec![out(VF1)]));
}

#[test]
fn parse_match_ct_state_to_flower_nat_bits_left_unknown() {
    // parse_match_ct_state_to_flower: (ct_state_support & mask) != mask ->
    // nothing consumed; +dnat has no TCA_FLOWER_KEY_CT_FLAGS_* bit.
    let mut m = tcp4(VF0);
    m.ct_state = Masked {
        value: cs::TRACKED | cs::ESTABLISHED | cs::DST_NAT,
        mask: cs::TRACKED | cs::ESTABLISHED | cs::DST_NAT,
    };
    unknown(&flow(m, vec![out(VF1)]));
}

#[test]
fn parse_match_ct_state_to_flower_translation() {
    // +est clears the NEW bit; a state without +trk gets +trk.
    let mut m = tcp4(VF0);
    m.recirc_id = 1;
    m.ct_state = Masked {
        value: cs::ESTABLISHED,
        mask: cs::ESTABLISHED | cs::NEW | cs::INVALID,
    };
    m.ct_zone = Masked::exact(5);
    m.ct_mark = Masked { value: 1, mask: 1 };
    m.ct_label = Masked {
        value: 1 << 64,
        mask: 1 << 64,
    };
    let tc = gate_ok(&flow(m, vec![out(VF1)]));
    assert_eq!(
        tc.key.ct_state,
        Masked {
            value: cs::ESTABLISHED | cs::TRACKED,
            mask: cs::ESTABLISHED | cs::INVALID | cs::TRACKED,
        }
    );
    assert_eq!(tc.key.ct_zone, Masked::exact(5));
    assert_eq!(tc.chain, 1);
}

#[test]
fn netdev_tc_flow_put_arp_fields_consumed() {
    // ARP: spa/tpa/op/sha/tha are flower keys.
    let m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_ARP),
        nw_proto: Masked::exact(1),
        ipv4_dst: Masked::exact(0x0a00_0001),
        arp_sha: Masked::exact([0, 0, 0, 0, 0, 1]),
        arp_tha: Masked::exact([0; 6]),
        ..DpMatch::default()
    };
    gate_ok(&flow(m, vec![out(VF1)]));
}

// ---- netdev_tc_flow_put: VLAN (v3.1.0) ----

#[test]
fn netdev_tc_flow_put_vlan_partial_mask() {
    // vlan_tci=0x1000/0x1000 ("any tagged frame"): CFI alone is a partial
    // mask -> bare EOPNOTSUPP.
    let mut m = l2(UPLINK);
    m.vlans = vec![VlanMatch {
        tpid: 0x8100,
        tci: Masked {
            value: 0x1000,
            mask: 0x1000,
        },
    }];
    assert_refusal(
        &flow(m.clone(), vec![out(VF0)]),
        SRC_PUT,
        "netdev_tc_flow_put: vlans[0].tci mask 0x1000 on 0x1000 is a partial mask (flower takes the whole VID and/or PCP of a present tag)",
    );
    // A VID match (CFI + all 12 bits) is a flower vlan_id key.
    m.vlans[0].tci = Masked {
        value: 0x1000 | 100,
        mask: 0x1fff,
    };
    let tc = gate_ok(&flow(m.clone(), vec![DpAction::PopVlan, out(VF0)]));
    assert_eq!(tc.key.vlans.len(), 1);
    assert_eq!(tc.actions[0], TcAction::VlanPop);
    // Part of the VID: partial.
    m.vlans[0].tci.mask = 0x10ff;
    assert_eq!(refused(&flow(m, vec![out(VF0)])).source_fn, SRC_PUT);
}

#[test]
fn netdev_tc_flow_put_vlan_exact_none_and_second_tag() {
    // "exact && no vlan" needs no key; QinQ inner tag checked the same way.
    let mut m = l2(UPLINK);
    m.vlans = vec![
        VlanMatch {
            tpid: 0x88a8,
            tci: Masked::exact(0x1000 | 10),
        },
        VlanMatch {
            tpid: 0x8100,
            tci: Masked {
                value: 0x1000 | 20,
                mask: 0x1fff,
            },
        },
    ];
    assert!(gate_ok(&flow(m.clone(), vec![out(VF0)])).key.vlans.len() == 2);
    m.vlans[1].tci = Masked {
        value: 0x1000,
        mask: 0x1000,
    };
    assert_refusal(
        &flow(m.clone(), vec![out(VF0)]),
        SRC_PUT,
        "netdev_tc_flow_put: vlans[1].tci mask 0x1000 on 0x1000 is a partial mask (flower takes the whole VID and/or PCP of a present tag)",
    );
    m.vlans = vec![VlanMatch {
        tpid: 0,
        tci: Masked::exact(0),
    }];
    assert!(gate_ok(&flow(m, vec![out(VF0)])).key.vlans.is_empty());
}

#[test]
fn netdev_tc_flow_put_three_tags_cannot_be_an_ovs_flow() {
    let mut m = l2(UPLINK);
    m.vlans = vec![
        VlanMatch {
            tpid: 0x88a8,
            tci: Masked::exact(0x1001),
        };
        3
    ];
    assert_refusal(
        &flow(m, vec![out(VF0)]),
        SRC_PUT,
        "netdev_tc_flow_put: 3 vlan tags matched, OVS's struct flow holds FLOW_MAX_VLAN_HEADERS (2)",
    );
}

// ---- netdev_tc_flow_put: tunnel match (v3.1.0) ----

#[test]
fn netdev_tc_flow_put_vxlan_decap() {
    // enc_* keys; tp_dst degraded to an exact mask; tun_id kept with
    // FLOW_TNL_F_KEY; DF/CSUM flag masks dropped ("XXX: This is wrong!").
    let mut m = vxlan_decap_match();
    if let Some(t) = &mut m.tunnel {
        t.tp_dst.mask = 0xff00;
    }
    let tc = gate_ok(&flow(m, vec![out(VF0)]));
    assert_eq!(tc.indev.name, "vxlan_sys_4789");
    let t = tc.key.tunnel.expect("enc keys");
    assert_eq!(t.tp_dst.mask, 0xffff);
    assert_eq!(t.tun_id, Masked::exact(42));
    assert!(t.flags.is_wild());
    assert_eq!(
        tc.actions,
        vec![TcAction::Mirred {
            port: port(VF0),
            ingress: false
        }]
    );
}

#[test]
fn netdev_tc_flow_put_tun_id_needs_key_flag() {
    // flower.mask.tunnel.id = (tnl->flags & FLOW_TNL_F_KEY) ? mask : 0.
    let mut m = vxlan_decap_match();
    if let Some(t) = &mut m.tunnel {
        t.flags.value = 0;
    }
    let tc = gate_ok(&flow(m, vec![out(VF0)]));
    assert!(tc.key.tunnel.unwrap().tun_id.is_wild());
}

#[test]
fn netdev_tc_flow_put_tunnel_oam_flag_left_unknown() {
    // Only KEY, DF and CSUM are cleared from the tunnel flags' mask.
    let mut m = vxlan_decap_match();
    if let Some(t) = &mut m.tunnel {
        t.flags.mask |= FLOW_TNL_F_OAM;
    }
    unknown(&flow(m, vec![out(VF0)]));
}

#[test]
fn netdev_tc_flow_put_tunnel_without_addresses_is_cleared() {
    // No src/dst: "mask bits set due to flow translation artifacts" cleared.
    let m = DpMatch {
        tunnel: Some(TunnelMatch {
            tun_id: Masked::exact(0),
            ..TunnelMatch::default()
        }),
        ..l2(VF0)
    };
    let tc = gate_ok(&flow(m, vec![out(VF1)]));
    assert!(tc.key.tunnel.is_none());
}

#[test]
fn flower_match_to_tun_opt_geneve_only() {
    // OVN's Geneve overlay: the port-binding option (class 0x0102).
    let opt = GeneveOpt {
        class: 0x0102,
        typ: 0x80,
        value: vec![0, 1, 0, 2],
        mask: vec![0xff; 4],
    };
    let mut m = vxlan_decap_match();
    m.in_port = GENEVE;
    if let Some(t) = &mut m.tunnel {
        t.tp_dst = Masked::exact(6081);
        t.geneve_opts = vec![opt.clone()];
    }
    let tc = gate_ok(&flow(m.clone(), vec![out(VF0)]));
    assert_eq!(tc.key.tunnel.unwrap().geneve_opts, vec![opt]);
    // flower_match_to_tun_opt() runs for a "geneve" netdev only: on the
    // vxlan port the options stay in the mask.
    m.in_port = VXLAN;
    unknown(&flow(m, vec![out(VF0)]));
}

// ---- netdev_tc_parse_nl_actions (v3.1.0) ----

#[test]
fn netdev_tc_parse_nl_actions_unsupported_types() {
    // "unsupported put action type: %d", OVS_ACTION_ATTR_* numbers.
    let cases = [
        (DpAction::Userspace, 2), // controller, sFlow/IPFIX
        (DpAction::Sample, 6),
        (DpAction::Hash, 8), // select group, balance-tcp bond
        (DpAction::Trunc, 13),
        (DpAction::Clone, 20),
        (
            DpAction::Other {
                name: "tnl_push".into(),
            },
            23,
        ),
        (
            DpAction::Other {
                name: "push_eth".into(),
            },
            14,
        ),
        (
            DpAction::Other {
                name: "lb_output".into(),
            },
            26,
        ),
    ];
    for (a, n) in cases {
        assert_refusal(
            &flow(tcp4(VF0), vec![out(VF1), a]),
            SRC_ACTS,
            &format!("unsupported put action type: {n}"),
        );
    }
}

#[test]
fn netdev_tc_parse_nl_actions_unknown_name() {
    assert_refusal(
        &flow(
            l2(VF0),
            vec![DpAction::Other {
                name: "frobnicate".into(),
            }],
        ),
        SRC_ACTS,
        "netdev_tc_parse_nl_actions: no branch for action frobnicate",
    );
}

#[test]
fn netdev_tc_parse_nl_actions_explicit_drop_is_gact() {
    // OVS_ACTION_ATTR_DROP -> TC_ACT_GOTO chain 0 -> gact shot.
    let tc = gate_ok(&flow(
        l2(VF0),
        vec![DpAction::Other {
            name: "drop".into(),
        }],
    ));
    assert_eq!(tc.actions, vec![TcAction::Drop]);
}

#[test]
fn model_gaps_check_pkt_len_and_mpls() {
    // OVS 3.1 offloads both (parse_check_pkt_len_action, TC_ACT_MPLS_*);
    // the shared types cannot carry them, so the model refuses, saying so.
    let e = refused(&flow(l2(VF0), vec![DpAction::CheckPktLen]));
    assert_eq!(e.source_fn, SRC_MODEL);
    assert!(e
        .reason
        .starts_with("model gap: OVS 3.1 offloads check_pkt_len"));
    let e = refused(&flow(l2(VF0), vec![DpAction::Mpls, out(VF1)]));
    assert_eq!(e.source_fn, SRC_MODEL);
}

#[test]
fn netdev_tc_parse_nl_actions_max_16() {
    // TCA_ACT_MAX_NUM (lib/tc.h) is 16: the 17th action is refused.
    let sixteen: Vec<_> = (0..16).map(|_| out(VF1)).collect();
    let tc = gate_ok(&flow(l2(VF0), sixteen.clone()));
    assert_eq!(tc.actions.len(), 16);
    let mut seventeen = sixteen;
    seventeen.push(out(UPLINK));
    assert_refusal(
        &flow(l2(VF0), seventeen),
        SRC_ACTS,
        "Can only support 16 actions",
    );
}

#[test]
fn match_refusal_comes_before_action_refusal() {
    // netdev_tc_flow_put: test_key_and_mask() runs before the actions.
    let mut m = l2(VF0);
    m.dp_hash = Masked::exact(1);
    assert_refusal(
        &flow(m, vec![DpAction::Userspace]),
        SRC_TEST,
        "offloading attribute dp_hash isn't supported",
    );
}

// ---- parse_put_flow_set_masked_action / set_action (v3.1.0) ----

#[test]
fn parse_put_flow_set_masked_action_unsupported_types() {
    let m = Masked::exact(1u16);
    let cases = [
        (SetHeader::Sctp { src: m, dst: m }, 17),
        (SetHeader::Arp, 13),
        (SetHeader::Nd, 14),
        (SetHeader::SkbMark(Masked::exact(1)), 15),
        (SetHeader::SkbPriority(1), 2),
    ];
    for (h, n) in cases {
        assert_refusal(
            &flow(tcp4(VF0), vec![DpAction::Set(h), out(VF1)]),
            SRC_SET_MASKED,
            &format!("unsupported set action type: {n}"),
        );
    }
}

#[test]
fn parse_put_flow_set_masked_action_ipv6_label() {
    // set_flower_map[OVS_KEY_ATTR_IPV6] lacks ipv6_label.
    let z = Masked::default();
    let h = SetHeader::Ipv6 {
        src: z,
        dst: z,
        tclass: Masked::default(),
        hlimit: Masked::default(),
        label: Masked::exact(1),
    };
    assert_refusal(
        &flow(tcp4(VF0), vec![DpAction::Set(h), out(VF1)]),
        SRC_SET_MASKED,
        "unsupported sub attribute of set action type 8",
    );
}

#[test]
fn parse_put_flow_set_action_tunnel_oam() {
    // "unsupported tunnel key attribute %d": OVS_TUNNEL_KEY_ATTR_OAM is 7.
    let t = TunnelSet {
        ipv4_dst: 1,
        flags: FLOW_TNL_F_OAM,
        ..TunnelSet::default()
    };
    assert_refusal(
        &flow(l2(VF0), vec![DpAction::SetTunnel(t), out(VXLAN)]),
        SRC_SET,
        "unsupported tunnel key attribute 7",
    );
}

// ---- lib/tc.c: csum_update_flag, nl_msg_put_flower_acts (v3.1.0) ----

#[test]
fn csum_update_flag_ipv4_rewrite_of_tcp() {
    // OVN DNAT-less router: set(eth), set(ipv4(ttl)) on a TCP flow -> one
    // pedit per set action, then one csum with IPV4HDR|TCP before the
    // mirred; ip_proto forced exact.
    let mut m = tcp4(VF0);
    m.nw_proto.mask = 0; // value 6 (the packet's) still read, as OVS does
    let a = vec![
        DpAction::Set(SetHeader::Eth {
            src: Masked::exact([0, 0, 0, 0, 0, 0xa]),
            dst: Masked::exact([0, 0, 0, 0, 0, 0xb]),
        }),
        DpAction::Set(SetHeader::Ipv4 {
            src: Masked::default(),
            dst: Masked::default(),
            tos: Masked::default(),
            ttl: Masked::exact(63),
        }),
        out(VF1),
    ];
    let tc = gate_ok(&flow(m, a));
    assert_eq!(
        tc.actions,
        vec![
            TcAction::Pedit {
                fields: vec![PeditField::EthSrc, PeditField::EthDst]
            },
            TcAction::Pedit {
                fields: vec![PeditField::Ipv4Ttl]
            },
            TcAction::Csum {
                flags: csum_flag::IPV4HDR | csum_flag::TCP
            },
            TcAction::Mirred {
                port: port(VF1),
                ingress: false
            },
        ]
    );
    assert_eq!(tc.key.nw_proto.mask, 0xff);
}

#[test]
fn csum_update_flag_eth_only_needs_no_csum() {
    let a = vec![
        DpAction::Set(SetHeader::Eth {
            src: Masked::default(),
            dst: Masked::exact([0, 0, 0, 0, 0, 0xb]),
        }),
        out(VF1),
    ];
    let tc = gate_ok(&flow(l2(VF0), a));
    assert_eq!(
        tc.actions[0],
        TcAction::Pedit {
            fields: vec![PeditField::EthDst]
        }
    );
    assert!(matches!(tc.actions[1], TcAction::Mirred { .. }));
}

#[test]
fn csum_update_flag_udp_and_icmpv6() {
    // L4 rewrite of UDP (LB to a UDP backend): UDP flag only.
    let mut m = tcp4(VF0);
    m.nw_proto = Masked::exact(IPPROTO_UDP);
    let a = vec![
        DpAction::Set(SetHeader::Udp {
            src: Masked::default(),
            dst: Masked::exact(53),
        }),
        out(VF1),
    ];
    let tc = gate_ok(&flow(m, a));
    assert_eq!(
        tc.actions[1],
        TcAction::Csum {
            flags: csum_flag::UDP
        }
    );
    // IPv6 hop-limit rewrite of ICMPv6: ICMP flag; the csum follows the
    // last action when that is a pedit.
    let m = DpMatch {
        in_port: VF0,
        eth_type: Masked::exact(ETH_P_IPV6),
        nw_proto: Masked::exact(IPPROTO_ICMPV6),
        ..DpMatch::default()
    };
    let h = SetHeader::Ipv6 {
        src: Masked::default(),
        dst: Masked::default(),
        tclass: Masked::default(),
        hlimit: Masked::exact(63),
        label: Masked::default(),
    };
    let tc = gate_ok(&flow(m, vec![DpAction::Set(h)]));
    assert_eq!(
        tc.actions,
        vec![
            TcAction::Pedit {
                fields: vec![PeditField::Ipv6Hlimit]
            },
            TcAction::Csum {
                flags: csum_flag::ICMP
            },
        ]
    );
}

#[test]
fn csum_update_flag_other_ip_proto() {
    // VLOG_WARN "can't offload rewrite of IP/IPV6 with ip_proto: %d".
    let mut m = tcp4(VF0);
    m.nw_proto = Masked::exact(47);
    m.tp_dst = Masked::default();
    let a = vec![
        DpAction::Set(SetHeader::Ipv4 {
            src: Masked::default(),
            dst: Masked::exact(0x0a00_0009),
            tos: Masked::default(),
            ttl: Masked::default(),
        }),
        out(VF1),
    ];
    assert_refusal(
        &flow(m, a),
        SRC_CSUM,
        "can't offload rewrite of IP/IPV6 with ip_proto: 47",
    );
}

#[test]
fn nl_msg_put_flower_acts_no_goto_after_tunnel_release() {
    // Tunnel flow: output (tunnel_key release) then recirc -> -EOPNOTSUPP
    // ("tunnel release + output + goto"), e.g. a mirror on a decap flow.
    let f = flow(
        vxlan_decap_match(),
        vec![out(BR_INT), DpAction::Recirc { id: 9 }],
    );
    assert_refusal(
        &f,
        SRC_TC_ACTS,
        "nl_msg_put_flower_acts: goto chain 9 after the tunnel_key release of a tunnel flow's output (tunnel release + output + goto is not supported)",
    );
    // Without the output first (OVN's usual ct on decap) it is fine.
    let f = flow(
        vxlan_decap_match(),
        vec![DpAction::Ct(ct(3)), DpAction::Recirc { id: 9 }],
    );
    gate_ok(&f);
}

// ---- parse_put_flow_ct_action (v3.1.0) ----

#[test]
fn parse_put_flow_ct_action_helper() {
    let mut c = ct(1);
    c.commit = true;
    c.helper = Some("ftp".into());
    assert_refusal(
        &flow(tcp4(VF0), vec![DpAction::Ct(c), DpAction::Recirc { id: 2 }]),
        SRC_CT,
        "parse_put_flow_ct_action: OVS_CT_ATTR_HELPER (helper=ftp) is not supported in tc-ct",
    );
}

// ---- acceptance: the translation ----

#[test]
fn accept_ct_then_recirc_gives_ct_goto() {
    // ct firewall: recirc_id(0),...,actions:ct(zone=5),recirc(0x1)
    let tc = gate_ok(&flow(
        tcp4(VF0),
        vec![DpAction::Ct(ct(5)), DpAction::Recirc { id: 1 }],
    ));
    assert_eq!(tc.chain, 0);
    assert_eq!(tc.indev, port(VF0));
    assert_eq!(
        tc.actions,
        vec![TcAction::Ct(ct(5)), TcAction::Goto { chain: 1 }]
    );
}

#[test]
fn accept_ct_commit_nat_mark_label() {
    // OVN LB: ct(commit,zone=7,mark=..,label=..,nat(dst=...)) is tc-ct.
    let c = CtAction {
        zone: 7,
        commit: true,
        force: false,
        mark: Some((2, 2)),
        label: Some((1, 1)),
        nat: Some(NatKind::Dst),
        helper: None,
    };
    let mut m = tcp4(VF0);
    m.recirc_id = 4;
    m.ct_state = Masked {
        value: cs::TRACKED | cs::NEW,
        mask: cs::TRACKED | cs::NEW | cs::ESTABLISHED,
    };
    let tc = gate_ok(&flow(m, vec![DpAction::Ct(c.clone()), out(VF1)]));
    assert_eq!(tc.chain, 4);
    assert_eq!(tc.actions[0], TcAction::Ct(c));
}

#[test]
fn accept_ct_clear_meter_push_vlan() {
    let tc = gate_ok(&flow(
        l2(VF0),
        vec![
            DpAction::CtClear,
            DpAction::Meter {
                id: 3,
                drop_band: true,
            },
            DpAction::PushVlan {
                tpid: 0x8100,
                tci: 0x1000 | (5 << 13) | 100,
            },
            out(UPLINK),
        ],
    ));
    assert_eq!(
        tc.actions,
        vec![
            TcAction::CtClear,
            TcAction::Police { meter: 3 },
            TcAction::VlanPush {
                tpid: 0x8100,
                vid: 100,
                prio: 5
            },
            TcAction::Mirred {
                port: port(UPLINK),
                ingress: false
            },
        ]
    );
}

#[test]
fn accept_output_to_internal_is_ingress() {
    // is_internal_port(): mirred ingress to an internal port.
    let tc = gate_ok(&flow(l2(UPLINK), vec![out(BR_INT)]));
    assert_eq!(
        tc.actions,
        vec![TcAction::Mirred {
            port: port(BR_INT),
            ingress: true
        }]
    );
}

#[test]
fn accept_no_actions_is_drop() {
    // nl_msg_put_flower_acts: no actions -> gact drop.
    let tc = gate_ok(&flow(tcp4(VF0), vec![]));
    assert_eq!(tc.actions, vec![TcAction::Drop]);
}

#[test]
fn accept_vxlan_tunnel_push() {
    // set(tunnel(...)),output:vxlan -> tunnel_key set + mirred.
    let t = TunnelSet {
        tun_id: 42,
        ipv4_src: 0xc0a8_0002,
        ipv4_dst: 0xc0a8_0001,
        ttl: 64,
        tp_dst: 4789,
        flags: FLOW_TNL_F_KEY | FLOW_TNL_F_DONT_FRAGMENT,
        ..TunnelSet::default()
    };
    let tc = gate_ok(&flow(tcp4(VF0), vec![DpAction::SetTunnel(t), out(VXLAN)]));
    assert_eq!(
        tc.actions,
        vec![
            TcAction::TunnelSet {
                tunnel: TunnelType::Vxlan,
                id: 42,
                ipv4_src: 0xc0a8_0002,
                ipv4_dst: 0xc0a8_0001,
                ipv6_src: 0,
                ipv6_dst: 0,
                tos: 0,
                ttl: 64,
                tp_dst: 4789,
                csum: false,
                dont_frag: false,
                opts: vec![],
            },
            TcAction::Mirred {
                port: port(VXLAN),
                ingress: false
            },
        ]
    );
}

#[test]
fn accept_geneve_tunnel_push_with_options_and_csum() {
    let opt = GeneveOpt {
        class: 0x0102,
        typ: 0x80,
        value: vec![0, 1, 0, 2],
        mask: vec![0xff; 4],
    };
    let t = TunnelSet {
        tun_id: 7,
        ipv4_dst: 1,
        flags: FLOW_TNL_F_KEY | FLOW_TNL_F_CSUM,
        geneve_opts: vec![opt.clone()],
        ..TunnelSet::default()
    };
    let tc = gate_ok(&flow(l2(VF0), vec![DpAction::SetTunnel(t), out(GENEVE)]));
    match &tc.actions[0] {
        TcAction::TunnelSet {
            tunnel, csum, opts, ..
        } => {
            assert_eq!(*tunnel, TunnelType::Geneve);
            assert!(*csum);
            assert_eq!(opts, &vec![opt]);
        }
        a => panic!("{a:?}"),
    }
}

// ---- in_port on no NIC: OVS accepts, the kernel keeps it in software ----

#[test]
fn tap_in_port_stays_in_software() {
    // netdev_tc_init_flow_api() gives a tap the linux_tc API (it has an
    // ifindex): OVS installs the filter; no driver callback holds it.
    let e = refused(&flow(l2(TAP), vec![out(VF0)]));
    assert_eq!(e.stage, Stage::Driver);
    assert_eq!(e.source_fn, "net/sched/cls_api.c:tc_setup_cb_add");
    assert_eq!(
        e.reason,
        "tc_setup_cb_add: no offload callback on the block of tap0 (tap): the filter stays in software (in_hw_count 0)"
    );
    // OVS's own refusal still comes first.
    let e = refused(&flow(l2(TAP), vec![DpAction::Userspace]));
    assert_eq!(e.stage, Stage::Ovs);
}

/// lib/netdev-offload-tc.c:netdev_tc_parse_nl_actions (v3.1.0):
/// `meter_id_lookup()` fails for a meter OVS made no police action of
/// (meter_tc_set_policer: only a meter whose first band is drop).
#[test]
fn refuse_a_meter_without_a_drop_band() {
    let r = refused(&flow(
        l2(VF0),
        vec![
            DpAction::Meter {
                id: 7,
                drop_band: false,
            },
            out(VF1),
        ],
    ));
    assert_eq!(r.stage, Stage::Ovs);
    assert_eq!(
        r.source_fn,
        "lib/netdev-offload-tc.c:netdev_tc_parse_nl_actions"
    );
    assert!(
        r.reason.starts_with("meter_id_lookup: meter 7"),
        "{}",
        r.reason
    );
}
