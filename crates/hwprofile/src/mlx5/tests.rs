//! Each test names the Linux 6.1 function whose rule it checks (file and
//! function in `drivers/net/ethernet/mellanox/mlx5/core/`).

use super::*;
use crate::model::{
    cs, CtAction, DpMatch, GeneveOpt, Masked, NatKind, Port, PortKind, TunnelMatch, TunnelType,
    VlanMatch,
};
use crate::tc::{csum_flag, PeditField, TcAction, TcFlower};
use crate::{Driver, Profile, Stage};

fn port(no: u32, name: &str, kind: PortKind) -> Port {
    Port {
        no,
        name: name.into(),
        kind,
    }
}
fn uplink() -> Port {
    port(1, "p0", PortKind::Uplink)
}
fn rep(no: u32) -> Port {
    port(no, &format!("pf0vf{no}"), PortKind::Representor)
}
fn internal() -> Port {
    port(100, "br-int", PortKind::Internal)
}
fn tap() -> Port {
    port(50, "tap0", PortKind::Other { what: "tap".into() })
}
fn vxlan_dev(dst_port: u16) -> Port {
    port(
        200,
        "vxlan_sys_4789",
        PortKind::Tunnel {
            tunnel: TunnelType::Vxlan,
            dst_port,
        },
    )
}
fn geneve_dev() -> Port {
    port(
        201,
        "genev_sys_6081",
        PortKind::Tunnel {
            tunnel: TunnelType::Geneve,
            dst_port: 6081,
        },
    )
}

/// An IPv4 TCP 5-tuple match, as an OVS megaflow for a connection.
fn ipv4_tcp() -> DpMatch {
    DpMatch {
        eth_type: Masked::exact(0x0800),
        ipv4_src: Masked::exact(0x0a00_0001),
        ipv4_dst: Masked::exact(0x0a00_0002),
        nw_proto: Masked::exact(6),
        nw_frag: Masked { value: 0, mask: 3 },
        tp_dst: Masked::exact(80),
        ..Default::default()
    }
}
fn l2() -> DpMatch {
    DpMatch {
        eth_dst: Masked::exact([0, 1, 2, 3, 4, 5]),
        ..Default::default()
    }
}
fn tunnel_match(tp_dst: u16) -> TunnelMatch {
    TunnelMatch {
        tun_id: Masked::exact(42),
        ipv4_src: Masked::exact(0xc0a8_0001),
        ipv4_dst: Masked::exact(0xc0a8_0002),
        tp_dst: Masked::exact(tp_dst),
        ..Default::default()
    }
}
fn flower(indev: Port, key: DpMatch, actions: Vec<TcAction>) -> TcFlower {
    TcFlower {
        chain: 0,
        indev,
        key,
        actions,
    }
}
fn out(p: Port) -> TcAction {
    TcAction::Mirred {
        port: p,
        ingress: false,
    }
}
fn ct(zone: u16) -> TcAction {
    TcAction::Ct(CtAction {
        zone,
        commit: false,
        force: false,
        mark: None,
        label: None,
        nat: None,
        helper: None,
    })
}
fn tunnel_set(
    tunnel: TunnelType,
    id: u64,
    dst: u32,
    tp_dst: u16,
    opts: Vec<GeneveOpt>,
) -> TcAction {
    TcAction::TunnelSet {
        tunnel,
        id,
        ipv4_src: 0xc0a8_0002,
        ipv4_dst: dst,
        ipv6_src: 0,
        ipv6_dst: 0,
        tos: 0,
        ttl: 64,
        tp_dst,
        csum: false,
        dont_frag: false,
        opts,
    }
}
fn cx7() -> Mlx5 {
    Mlx5::new(Caps::for_profile(Profile::Cx7))
}
fn with(edit: impl FnOnce(&mut Caps)) -> Mlx5 {
    let mut c = Caps::for_profile(Profile::Cx7);
    edit(&mut c);
    Mlx5::new(c)
}

#[track_caller]
fn refused(d: &Mlx5, f: &TcFlower, source_fn: &str, reason: &str) {
    let r = d.check(f).expect_err("should be refused");
    assert_eq!(r.stage, Stage::Driver);
    assert_eq!(r.reason, reason);
    assert_eq!(
        r.source_fn,
        format!("drivers/net/ethernet/mellanox/mlx5/core/{source_fn}")
    );
}

// ---- accepted pipelines -------------------------------------------------

#[test]
fn l2_switching_between_representors_is_offloaded() {
    for p in [Profile::Cx7, Profile::Bf2, Profile::Bf3] {
        let d = Mlx5::new(Caps::for_profile(p));
        d.check(&flower(rep(2), l2(), vec![out(rep(3))])).unwrap();
        d.check(&flower(uplink(), l2(), vec![out(rep(3))])).unwrap();
    }
}

#[test]
fn vxlan_decap_and_encap_are_offloaded() {
    let d = cx7();
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    d.check(&flower(vxlan_dev(4789), k, vec![out(rep(2))]))
        .unwrap();
    let encap = vec![
        tunnel_set(TunnelType::Vxlan, 42, 0xc0a8_0001, 4789, vec![]),
        out(vxlan_dev(4789)),
    ];
    d.check(&flower(rep(2), l2(), encap)).unwrap();
}

#[test]
fn ct_firewall_established_and_nat_are_offloaded() {
    let d = cx7();
    // recirc(0) -> ct(zone=5,nat) -> recirc(1)
    let mut a = ct(5);
    if let TcAction::Ct(c) = &mut a {
        c.nat = Some(NatKind::Existing);
    }
    d.check(&flower(
        rep(2),
        ipv4_tcp(),
        vec![a, TcAction::Goto { chain: 1 }],
    ))
    .unwrap();
    let mut k = ipv4_tcp();
    k.ct_state = Masked {
        value: cs::TRACKED | cs::ESTABLISHED,
        mask: cs::TRACKED | cs::ESTABLISHED | cs::NEW | cs::INVALID,
    };
    let mut f = flower(rep(2), k, vec![out(rep(3))]);
    f.chain = 1;
    d.check(&f).unwrap();
}

#[test]
fn meter_then_output_is_offloaded() {
    cx7()
        .check(&flower(
            rep(2),
            ipv4_tcp(),
            vec![TcAction::Police { meter: 1 }, out(rep(3))],
        ))
        .unwrap();
}

// ---- en/rep/tc.c --------------------------------------------------------

/// en/rep/tc.c:mlx5e_rep_indr_setup_block (6.1): no block for a foreign netdev.
#[test]
fn foreign_filter_device_is_not_bound() {
    let r = cx7()
        .check(&flower(tap(), l2(), vec![out(rep(2))]))
        .unwrap_err();
    assert_eq!(
        r.source_fn,
        "drivers/net/ethernet/mellanox/mlx5/core/en/rep/tc.c:mlx5e_rep_indr_setup_block"
    );
    assert!(r.reason.contains("tap0"));
}

// ---- en_tc.c:__parse_cls_flower -----------------------------------------

/// en_tc.c:__parse_cls_flower (6.1): FLOW_DISSECTOR_KEY_ARP is not in the list.
#[test]
fn arp_fields_are_an_unsupported_key() {
    let k = DpMatch {
        eth_type: Masked::exact(0x0806),
        nw_proto: Masked::exact(1),
        ipv4_dst: Masked::exact(0x0a00_0001),
        ..Default::default()
    };
    refused(
        &cx7(),
        &flower(rep(2), k, vec![out(rep(3))]),
        "en_tc.c:__parse_cls_flower",
        "Unsupported key",
    );
}

/// en_tc.c:__parse_cls_flower (6.1): CVLAN needs ft_field_support.outer_second_vid.
#[test]
fn qinq_match_needs_outer_second_vid() {
    let mut k = l2();
    k.vlans = vec![
        VlanMatch {
            tpid: 0x88a8,
            tci: Masked::exact(0x1064),
        },
        VlanMatch {
            tpid: 0x8100,
            tci: Masked::exact(0x1010),
        },
    ];
    let f = flower(rep(2), k, vec![out(rep(3))]);
    cx7().check(&f).unwrap();
    refused(
        &with(|c| c.outer_second_vid = false),
        &f,
        "en_tc.c:__parse_cls_flower",
        "Matching on CVLAN is not supported",
    );
}

/// en_tc.c:__parse_cls_flower (6.1): FLOW_DIS_FIRST_FRAG.
#[test]
fn later_fragment_match_is_refused() {
    let mut k = ipv4_tcp();
    k.tp_dst = Masked::default();
    k.nw_frag = Masked { value: 1, mask: 3 };
    refused(
        &cx7(),
        &flower(rep(2), k, vec![out(rep(3))]),
        "en_tc.c:__parse_cls_flower",
        "Match on frag first/later is not supported",
    );
}

/// en_tc.c:__parse_cls_flower (6.1): TTL needs ft_field_support.outer_ipv4_ttl.
#[test]
fn ttl_match_needs_cap() {
    let mut k = ipv4_tcp();
    k.nw_ttl = Masked::exact(64);
    refused(
        &with(|c| c.outer_ipv4_ttl = false),
        &flower(rep(2), k, vec![out(rep(3))]),
        "en_tc.c:__parse_cls_flower",
        "Matching on TTL is not supported",
    );
}

/// en_tc.c:__parse_cls_flower (6.1): ports only for TCP/UDP (SCTP refused).
#[test]
fn sctp_ports_are_refused() {
    let mut k = ipv4_tcp();
    k.nw_proto = Masked::exact(132);
    refused(
        &cx7(),
        &flower(rep(2), k, vec![out(rep(3))]),
        "en_tc.c:__parse_cls_flower",
        "Only UDP and TCP transports are supported for L4 matching",
    );
}

/// en_tc.c:__parse_cls_flower (6.1): ICMP type/code need the flex parser.
#[test]
fn icmp_type_needs_flex_parser() {
    let mut k = ipv4_tcp();
    k.nw_proto = Masked::exact(1);
    k.tp_dst = Masked::default();
    k.tp_src = Masked::exact(8);
    let f = flower(rep(2), k, vec![out(rep(3))]);
    cx7().check(&f).unwrap();
    refused(
        &with(|c| c.flex_icmp = false),
        &f,
        "en_tc.c:__parse_cls_flower",
        "Match on Flex protocols for ICMP is not supported",
    );
}

// ---- en/tc_tun*.c, en_tc.c:parse_tunnel_attr ----------------------------

/// en/tc_tun.c:mlx5e_tc_tun_parse_udp_ports (6.1).
#[test]
fn decap_needs_full_enc_dst_port() {
    let d = cx7();
    let f = flower(vxlan_dev(4789), l2(), vec![out(rep(2))]);
    refused(
        &d,
        &f,
        "en/tc_tun.c:mlx5e_tc_tun_parse_udp_ports",
        "UDP tunnel decap filter must include enc_dst_port condition",
    );
    let mut k = l2();
    let mut t = tunnel_match(4789);
    t.tp_dst.mask = 0xff00;
    k.tunnel = Some(t);
    refused(
        &d,
        &flower(vxlan_dev(4789), k, vec![out(rep(2))]),
        "en/tc_tun.c:mlx5e_tc_tun_parse_udp_ports",
        "UDP tunnel decap filter must match enc_dst_port fully",
    );
}

/// en/tc_tun_geneve.c:mlx5e_tc_tun_check_udp_dport_geneve (6.1): only 6081.
#[test]
fn geneve_on_another_port_is_refused() {
    let mut k = l2();
    k.tunnel = Some(tunnel_match(6082));
    refused(
        &cx7(),
        &flower(geneve_dev(), k, vec![out(rep(2))]),
        "en/tc_tun_geneve.c:mlx5e_tc_tun_check_udp_dport_geneve",
        "Matched UDP dst port is not registered as a GENEVE port",
    );
}

/// en/tc_tun_vxlan.c:mlx5e_tc_tun_parse_vxlan (6.1): VNI match cap.
#[test]
fn vxlan_vni_match_needs_cap() {
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    refused(
        &with(|c| c.outer_vxlan_vni = false),
        &flower(vxlan_dev(4789), k, vec![out(rep(2))]),
        "en/tc_tun_vxlan.c:mlx5e_tc_tun_parse_vxlan",
        "Matching on VXLAN VNI is not supported",
    );
}

fn ovn_opt(data: [u8; 4], mask: [u8; 4]) -> GeneveOpt {
    GeneveOpt {
        class: 0x0102,
        typ: 0x80,
        value: data.to_vec(),
        mask: mask.to_vec(),
    }
}

/// en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_options (6.1).
#[test]
fn geneve_option_rules() {
    let d = cx7();
    let s = "en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_options";
    let mut t = tunnel_match(6081);
    t.geneve_opts = vec![ovn_opt([0, 1, 0, 2], [0xff; 4])];
    let mut k = l2();
    k.tunnel = Some(t.clone());
    d.check(&flower(geneve_dev(), k.clone(), vec![out(rep(2))]))
        .unwrap();
    // All-zero data cannot be matched.
    t.geneve_opts = vec![ovn_opt([0; 4], [0xff; 4])];
    k.tunnel = Some(t.clone());
    refused(
        &d,
        &flower(geneve_dev(), k.clone(), vec![out(rep(2))]),
        s,
        "Matching on GENEVE options: can't match on 0 data field",
    );
    // More words than (max_geneve_tlv_option_data_len + 1) * options.
    t.geneve_opts = vec![GeneveOpt {
        class: 0x0102,
        typ: 0x80,
        value: vec![1; 32],
        mask: vec![0xff; 32],
    }];
    k.tunnel = Some(t);
    refused(
        &d,
        &flower(geneve_dev(), k, vec![out(rep(2))]),
        s,
        "Matching on GENEVE options: unsupported options len",
    );
}

/// en_tc.c:mlx5e_tc_verify_tunnel_ecn (6.1).
#[test]
fn tunnel_ecn_rules() {
    let d = cx7();
    let s = "en_tc.c:mlx5e_tc_verify_tunnel_ecn";
    let mut k = l2();
    let mut t = tunnel_match(4789);
    t.tos = Masked { value: 0, mask: 1 };
    k.tunnel = Some(t.clone());
    refused(
        &d,
        &flower(vxlan_dev(4789), k.clone(), vec![out(rep(2))]),
        s,
        "Partial match on enc_tos ecn bits isn't supported",
    );
    t.tos = Masked::default();
    k.tunnel = Some(t.clone());
    k.nw_tos = Masked::exact(0);
    k.eth_type = Masked::exact(0x0800);
    refused(
        &d,
        &flower(vxlan_dev(4789), k.clone(), vec![out(rep(2))]),
        s,
        "Matching on tos ecn bits without also matching enc_tos ecn bits isn't supported",
    );
    t.tos = Masked::exact(1);
    k.tunnel = Some(t);
    refused(
        &d,
        &flower(vxlan_dev(4789), k, vec![out(rep(2))]),
        s,
        "Match on enc_tos ecn = ECT(1) isn't supported",
    );
}

/// en_tc.c:parse_tunnel_attr (6.1): chain > 0 needs register loopback.
#[test]
fn tunnel_chains_need_reg_c1_loopback() {
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    let mut f = flower(vxlan_dev(4789), k, vec![out(rep(2))]);
    f.chain = 1;
    refused(
        &with(|c| c.reg_c1_loopback = false),
        &f,
        "en_tc.c:parse_tunnel_attr",
        "Chains on tunnel devices isn't supported without register loopback support",
    );
}

/// en_tc.c:enc_opts_is_dont_care_or_full_match (6.1).
#[test]
fn partial_tunnel_options_in_chain_above_zero() {
    let mut t = tunnel_match(6081);
    t.geneve_opts = vec![ovn_opt([0, 1, 0, 2], [0xff, 0xff, 0, 0])];
    let mut k = l2();
    k.tunnel = Some(t);
    let mut f = flower(geneve_dev(), k, vec![out(rep(2))]);
    f.chain = 4;
    refused(
        &cx7(),
        &f,
        "en_tc.c:enc_opts_is_dont_care_or_full_match",
        "Partial match of tunnel options in chain > 0 isn't supported",
    );
}

// ---- en/tc_ct.c:mlx5_tc_ct_match_add ------------------------------------

/// en/tc_ct.c:mlx5_tc_ct_match_add (6.1): +new, +rel, +inv, unknown bits.
#[test]
fn ct_state_rules() {
    let d = cx7();
    let s = "en/tc_ct.c:mlx5_tc_ct_match_add";
    for (bit, msg) in [
        (cs::NEW, "matching on ct_state +new isn't supported"),
        (cs::RELATED, "matching on ct_state +rel isn't supported"),
        (cs::INVALID, "matching on ct_state +inv isn't supported"),
    ] {
        let mut k = ipv4_tcp();
        k.ct_state = Masked {
            value: cs::TRACKED | bit,
            mask: cs::TRACKED | bit,
        };
        refused(&d, &flower(rep(2), k, vec![out(rep(3))]), s, msg);
    }
    let mut k = ipv4_tcp();
    k.ct_state = Masked {
        value: cs::TRACKED | cs::DST_NAT,
        mask: cs::TRACKED | cs::DST_NAT,
    };
    refused(
        &d,
        &flower(rep(2), k.clone(), vec![out(rep(3))]),
        s,
        "only ct_state trk, est, new and rpl are supported for offload",
    );
    k.ct_state = Masked {
        value: cs::TRACKED,
        mask: cs::TRACKED,
    };
    refused(
        &with(|c| c.ct_offload = false),
        &flower(rep(2), k, vec![out(rep(3))]),
        s,
        "offload of ct matching isn't available",
    );
}

// ---- en/tc/act/*.c ------------------------------------------------------

/// en/tc/act/ct.c:tc_act_can_offload_ct (6.1).
#[test]
fn two_ct_actions_are_refused() {
    refused(
        &cx7(),
        &flower(
            rep(2),
            ipv4_tcp(),
            vec![ct(1), ct(2), TcAction::Goto { chain: 1 }],
        ),
        "en/tc/act/ct.c:tc_act_can_offload_ct",
        "Multiple CT actions are not supported",
    );
}

/// en/tc_ct.c:mlx5_tc_ct_parse_action (6.1): no ct_priv.
#[test]
fn ct_action_without_ct_offload() {
    refused(
        &with(|c| c.ct_offload = false),
        &flower(rep(2), ipv4_tcp(), vec![ct(1), TcAction::Goto { chain: 1 }]),
        "en/tc_ct.c:mlx5_tc_ct_parse_action",
        "offload of ct action isn't available",
    );
}

/// en/tc/act/csum.c:csum_offload_supported (6.1).
#[test]
fn csum_rules() {
    let d = cx7();
    let s = "en/tc/act/csum.c:csum_offload_supported";
    let pedit = TcAction::Pedit {
        fields: vec![PeditField::Ipv4Dst],
    };
    let csum = TcAction::Csum {
        flags: csum_flag::IPV4HDR | csum_flag::TCP,
    };
    d.check(&flower(
        rep(2),
        ipv4_tcp(),
        vec![pedit.clone(), csum.clone(), out(rep(3))],
    ))
    .unwrap();
    refused(
        &d,
        &flower(rep(2), ipv4_tcp(), vec![csum, out(rep(3))]),
        s,
        "TC csum action is only offloaded with pedit",
    );
    refused(
        &d,
        &flower(
            rep(2),
            ipv4_tcp(),
            vec![
                pedit,
                TcAction::Csum {
                    flags: csum_flag::IPV4HDR | csum_flag::SCTP,
                },
                out(rep(3)),
            ],
        ),
        s,
        "can't offload TC csum action for some header/s",
    );
}

/// en/tc/act/vlan.c:parse_tc_vlan_action (6.1): MLX5_FS_VLAN_DEPTH 2.
#[test]
fn vlan_push_depth_rules() {
    let push = TcAction::VlanPush {
        tpid: 0x8100,
        vid: 10,
        prio: 0,
    };
    let s = "en/tc/act/vlan.c:parse_tc_vlan_action";
    let d = cx7();
    d.check(&flower(
        rep(2),
        l2(),
        vec![push.clone(), push.clone(), out(uplink())],
    ))
    .unwrap();
    refused(
        &d,
        &flower(
            rep(2),
            l2(),
            vec![push.clone(), push.clone(), push.clone(), out(uplink())],
        ),
        s,
        "Total vlans used is greater than supported",
    );
    refused(
        &with(|c| c.vlan_actions_depth = 1),
        &flower(rep(2), l2(), vec![push.clone(), push, out(uplink())]),
        s,
        "vlan push action is not supported for vlan depth > 1",
    );
    refused(
        &with(|c| c.vlan_actions_depth = 1),
        &flower(
            uplink(),
            l2(),
            vec![TcAction::VlanPop, TcAction::VlanPop, out(rep(2))],
        ),
        s,
        "vlan pop action is not supported",
    );
}

/// en/tc/act/mirred.c:tc_act_can_offload_mirred (6.1).
#[test]
fn output_to_a_foreign_device() {
    refused(
        &cx7(),
        &flower(rep(2), l2(), vec![out(tap())]),
        "en/tc/act/mirred.c:tc_act_can_offload_mirred",
        "devices are not on same switch HW, can't offload forwarding",
    );
    // From an indirect block (tunnel device): refused without a message.
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    let r = cx7()
        .check(&flower(vxlan_dev(4789), k, vec![out(tap())]))
        .unwrap_err();
    assert_eq!(
        r.source_fn,
        "drivers/net/ethernet/mellanox/mlx5/core/en/tc/act/mirred.c:tc_act_can_offload_mirred"
    );
    assert!(r.reason.contains("without a message"));
}

/// en/tc/act/mirred.c:is_duplicated_output_device (6.1).
#[test]
fn duplicate_output_is_refused() {
    refused(
        &cx7(),
        &flower(rep(2), l2(), vec![out(rep(3)), out(rep(3))]),
        "en/tc/act/mirred.c:is_duplicated_output_device",
        "can't duplicate output to same device",
    );
}

/// en/tc/act/mirred.c:parse_mirred (6.1).
#[test]
fn vf_to_itself_is_refused() {
    refused(
        &cx7(),
        &flower(rep(2), l2(), vec![out(rep(2))]),
        "en/tc/act/mirred.c:parse_mirred",
        "can't forward from a VF to itself",
    );
}

/// en/tc/act/mirred.c:verify_uplink_forwarding (6.1).
#[test]
fn uplink_hairpin_needs_termination_tables() {
    refused(
        &with(|c| c.termination_table_raw_traffic = false),
        &flower(uplink(), l2(), vec![out(uplink())]),
        "en/tc/act/mirred.c:verify_uplink_forwarding",
        "devices are both uplink, can't offload forwarding",
    );
}

/// en/tc/act/redirect_ingress.c:tc_act_can_offload_redirect_ingress and
/// en_tc.c:parse_tc_actions (6.1): OVS's output to an internal port.
#[test]
fn output_to_internal_port_rules() {
    let d = cx7();
    let to_int = TcAction::Mirred {
        port: internal(),
        ingress: true,
    };
    d.check(&flower(rep(2), l2(), vec![to_int.clone()]))
        .unwrap();
    // Not last: `mirred ingress mirror` has no FDB parser.
    refused(
        &d,
        &flower(rep(2), l2(), vec![to_int.clone(), out(rep(3))]),
        "en_tc.c:parse_tc_actions",
        "Not implemented offload action",
    );
    refused(
        &d,
        &flower(internal(), l2(), vec![to_int]),
        "en/tc/act/redirect_ingress.c:tc_act_can_offload_redirect_ingress",
        "redirect to ingress is not supported from internal port",
    );
    refused(
        &d,
        &flower(
            rep(2),
            l2(),
            vec![TcAction::Mirred {
                port: rep(3),
                ingress: true,
            }],
        ),
        "en/tc/act/redirect_ingress.c:tc_act_can_offload_redirect_ingress",
        "redirect to ingress is supported only for OVS internal ports",
    );
}

/// en_tc.c:parse_tc_fdb_actions (6.1): internal ports.
#[test]
fn internal_port_destination_rules() {
    refused(
        &cx7(),
        &flower(internal(), l2(), vec![out(rep(2)), out(rep(3))]),
        "en_tc.c:parse_tc_fdb_actions",
        "Rules with internal port can have only one destination",
    );
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    refused(
        &cx7(),
        &flower(
            vxlan_dev(4789),
            k,
            vec![TcAction::Mirred {
                port: internal(),
                ingress: true,
            }],
        ),
        "en_tc.c:parse_tc_fdb_actions",
        "Forwarding from tunnel/internal port to internal port is not supported",
    );
}

/// en_tc.c:mlx5e_tc_add_fdb_flow (6.1): internal-port filters on chain 0.
#[test]
fn internal_port_rule_only_on_chain_0() {
    let mut f = flower(internal(), l2(), vec![out(rep(2))]);
    f.chain = 3;
    refused(
        &cx7(),
        &f,
        "en_tc.c:mlx5e_tc_add_fdb_flow",
        "Internal port rule is only supported on chain 0",
    );
}

/// en/tc/act/goto.c:validate_goto_chain and en_tc.c:mlx5e_tc_add_fdb_flow
/// (6.1): without ignore_flow_level, chains 0..3 going forward only.
#[test]
fn chain_limits_without_ignore_flow_level() {
    let d = with(|c| c.ignore_flow_level = false);
    let mut f = flower(rep(2), ipv4_tcp(), vec![TcAction::Goto { chain: 1 }]);
    f.chain = 2;
    refused(
        &d,
        &f,
        "en/tc/act/goto.c:validate_goto_chain",
        "Goto lower numbered chain isn't supported",
    );
    refused(
        &d,
        &flower(rep(2), ipv4_tcp(), vec![TcAction::Goto { chain: 7 }]),
        "en/tc/act/goto.c:validate_goto_chain",
        "Requested destination chain is out of supported range",
    );
    let mut f = flower(rep(2), ipv4_tcp(), vec![out(rep(3))]);
    f.chain = 9;
    refused(
        &d,
        &f,
        "en_tc.c:mlx5e_tc_add_fdb_flow",
        "Requested chain is out of supported range",
    );
    // With it (every profile), backwards and large chains are fine.
    let mut f = flower(rep(2), ipv4_tcp(), vec![TcAction::Goto { chain: 1 }]);
    f.chain = 2000;
    cx7().check(&f).unwrap();
}

/// en/tc/act/goto.c:tc_act_post_parse_goto (6.1).
#[test]
fn decap_with_goto_is_refused() {
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    refused(
        &cx7(),
        &flower(
            vxlan_dev(4789),
            k,
            vec![out(rep(2)), TcAction::Goto { chain: 1 }],
        ),
        "en/tc/act/goto.c:tc_act_post_parse_goto",
        "Decap with goto isn't supported",
    );
}

/// en/tc/act/police.c:tc_act_can_offload_police (6.1): no flow meters.
#[test]
fn meter_needs_flow_meter_aso() {
    let r = with(|c| c.flow_meter_aso = false)
        .check(&flower(
            rep(2),
            ipv4_tcp(),
            vec![TcAction::Police { meter: 1 }, out(rep(3))],
        ))
        .unwrap_err();
    assert!(r
        .source_fn
        .ends_with("en/tc/act/police.c:tc_act_can_offload_police"));
}

// ---- en_tc.c:actions_match_supported, modify_header_match_supported -----

/// en_tc.c:actions_match_supported (6.1).
#[test]
fn forward_drop_rules() {
    let d = cx7();
    let s = "en_tc.c:actions_match_supported";
    refused(
        &d,
        &flower(rep(2), ipv4_tcp(), vec![ct(1)]),
        s,
        "Rule must have at least one forward/drop action",
    );
    refused(
        &d,
        &flower(rep(2), ipv4_tcp(), vec![out(rep(3)), TcAction::Drop]),
        s,
        "Rule cannot support forward+drop action",
    );
    // ct_clear writes registers: a modify header.
    refused(
        &d,
        &flower(rep(2), ipv4_tcp(), vec![TcAction::CtClear, TcAction::Drop]),
        s,
        "Drop with modify header action is not supported",
    );
    d.check(&flower(rep(2), ipv4_tcp(), vec![])).unwrap();
}

/// en_tc.c:is_action_keys_supported (6.1): NAT by pedit with ct.
#[test]
fn address_rewrite_with_ct_is_refused() {
    refused(
        &cx7(),
        &flower(
            rep(2),
            ipv4_tcp(),
            vec![
                ct(1),
                TcAction::Pedit {
                    fields: vec![PeditField::Ipv4Dst],
                },
                TcAction::Goto { chain: 1 },
            ],
        ),
        "en_tc.c:is_action_keys_supported",
        "can't offload re-write of ipv4 address with action ct",
    );
    refused(
        &cx7(),
        &flower(
            rep(2),
            ipv4_tcp(),
            vec![
                ct(1),
                TcAction::Pedit {
                    fields: vec![PeditField::TcpDport],
                },
                TcAction::Goto { chain: 1 },
            ],
        ),
        "en_tc.c:is_action_keys_supported",
        "can't offload re-write of transport header ports with action ct",
    );
}

/// en_tc.c:modify_tuple_supported (6.1): +trk match, tuple rewrite.
#[test]
fn tuple_rewrite_after_trk_match() {
    let mut k = ipv4_tcp();
    k.ct_state = Masked {
        value: cs::TRACKED,
        mask: cs::TRACKED | cs::ESTABLISHED,
    };
    refused(
        &cx7(),
        &flower(
            rep(2),
            k,
            vec![
                TcAction::Pedit {
                    fields: vec![PeditField::Ipv4Src],
                },
                out(rep(3)),
            ],
        ),
        "en_tc.c:modify_tuple_supported",
        "can't offload tuple modification with ct matches and no ct(clear) action",
    );
}

/// en_tc.c:modify_header_match_supported (6.1).
#[test]
fn ip_rewrite_needs_l4_protocol_match() {
    let mut k = ipv4_tcp();
    k.nw_proto = Masked::default();
    k.tp_dst = Masked::default();
    let f = |fields| {
        flower(
            rep(2),
            k.clone(),
            vec![TcAction::Pedit { fields }, out(rep(3))],
        )
    };
    refused(
        &cx7(),
        &f(vec![PeditField::Ipv4Src]),
        "en_tc.c:modify_header_match_supported",
        "can't offload re-write of non TCP/UDP",
    );
    // A TTL decrement alone is not an IP header rewrite.
    cx7()
        .check(&f(vec![PeditField::Ipv4Ttl, PeditField::EthSrc]))
        .unwrap();
}

// ---- encap (en/tc_tun_encap.c, en/tc_tun.c) -----------------------------

/// en/tc_tun_encap.c:is_duplicated_encap_entry (6.1).
#[test]
fn duplicate_encap_is_refused() {
    let t = tunnel_set(TunnelType::Vxlan, 7, 0xc0a8_0009, 4789, vec![]);
    refused(
        &cx7(),
        &flower(
            rep(2),
            l2(),
            vec![t.clone(), out(vxlan_dev(4789)), t, out(vxlan_dev(4789))],
        ),
        "en/tc_tun_encap.c:is_duplicated_encap_entry",
        "can't duplicate encap action",
    );
}

/// en/tc_tun.c:mlx5e_tc_tun_create_header_ipv4 (6.1): max_encap_header_size.
#[test]
fn encap_header_too_big() {
    let opts = vec![GeneveOpt {
        class: 1,
        typ: 1,
        value: vec![1; 80],
        mask: vec![0xff; 80],
    }];
    refused(
        &cx7(),
        &flower(
            rep(2),
            l2(),
            vec![
                tunnel_set(TunnelType::Geneve, 7, 0xc0a8_0009, 6081, opts),
                out(geneve_dev()),
            ],
        ),
        "en/tc_tun.c:mlx5e_tc_tun_create_header_ipv4",
        "encap size 134 too big, max supported is 128",
    );
}

// ---- stage 3 -------------------------------------------------------------

fn masked_dst(mask: u32) -> TcFlower {
    let mut k = ipv4_tcp();
    k.ipv4_dst = Masked {
        value: 0x0a00_0002 & mask,
        mask,
    };
    flower(rep(2), k, vec![out(rep(3))])
}

/// fs_core.c:try_add_to_existing_fg / alloc_auto_flow_group (6.1): one
/// group per distinct mask; release gives it back.
#[test]
fn same_mask_shares_a_group() {
    let mut d = cx7();
    let mut a = masked_dst(!0);
    let mut b = masked_dst(!0);
    b.key.ipv4_dst.value = 0x0a00_0003;
    a.key.tp_dst.value = 22;
    d.reserve(&a).unwrap();
    d.reserve(&b).unwrap();
    let r = d.resources();
    assert_eq!(r["flow_groups"].used, 1);
    assert_eq!(r["fdb_entries"].used, 2);
    let c = masked_dst(0xffff_ff00);
    d.reserve(&c).unwrap();
    assert_eq!(d.resources()["flow_groups"].used, 2);
    d.release(&c);
    assert_eq!(d.resources()["flow_groups"].used, 1);
    d.release(&a);
    d.release(&b);
    let r = d.resources();
    assert_eq!(r["flow_groups"].used, 0);
    assert_eq!(r["fdb_tables"].used, 0);
}

/// fs_core.c:alloc_auto_flow_group (6.1): in a 128-entry table (126 after
/// the two reserved), 15 groups of 126/16 = 7 entries, then 21 one-entry
/// groups: the 37th distinct mask has no room.
#[test]
fn distinct_masks_beyond_the_table_are_refused() {
    let mut d = with(|c| c.log_max_ft_size = 7);
    let flows: Vec<TcFlower> = (1..=37u32).map(|m| masked_dst(m << 8 | 0xff)).collect();
    for f in &flows[..36] {
        d.reserve(f).unwrap();
    }
    assert_eq!(d.resources()["flow_groups"].used, 36);
    let r = d.reserve(&flows[36]).unwrap_err();
    assert_eq!(r.stage, Stage::Resource);
    assert_eq!(
        r.source_fn,
        "drivers/net/ethernet/mellanox/mlx5/core/fs_core.c:alloc_auto_flow_group"
    );
    assert_eq!(
        r.reason,
        "alloc_auto_flow_group: no room for a new flow group of 1 entries in the table of chain 0 prio 2 level 0 (128 entries, 36 groups): -ENOSPC"
    );
    d.release(&flows[0]);
    d.reserve(&flows[36]).unwrap();
}

/// fs_ft_pool.c:mlx5_ft_pool_get_avail_sz (6.1): the four 4M tables go at
/// init (root, post_act, ct, ct_nat); OVS's first table is a 1M one; IPv4
/// and IPv6 are two prios, hence two tables.
#[test]
fn tables_come_from_the_pools() {
    let mut d = cx7();
    d.reserve(&masked_dst(!0)).unwrap();
    let mut v6 = masked_dst(!0);
    v6.key.eth_type = Masked::exact(0x86dd);
    v6.key.ipv4_dst = Masked::default();
    v6.key.ipv4_src = Masked::default();
    v6.key.ipv6_dst = Masked::exact(1);
    d.reserve(&v6).unwrap();
    let r = d.resources();
    assert_eq!(r["ft_pool_4m"].used, 4);
    assert_eq!(r["ft_pool_1m"].used, 2);
    assert_eq!(r["fdb_tables"].used, 2);
}

/// en_tc.c:offload_pedit_fields (6.1): max_modify_header_actions per rule.
#[test]
fn too_many_modify_actions_is_a_resource_refusal() {
    let mut d = with(|c| c.max_modify_header_actions = 8);
    let mut k = ipv4_tcp();
    k.eth_type = Masked::exact(0x86dd);
    let f = flower(
        rep(2),
        k,
        vec![
            TcAction::Pedit {
                fields: vec![PeditField::Ipv6Src, PeditField::Ipv6Dst, PeditField::EthDst],
            },
            out(rep(3)),
        ],
    );
    d.check(&f).unwrap();
    let r = d.reserve(&f).unwrap_err();
    assert_eq!(r.stage, Stage::Resource);
    assert_eq!(r.reason, "too many pedit actions, can't offload");
    assert!(r.source_fn.ends_with("en_tc.c:offload_pedit_fields"));
    let mut d = cx7();
    d.reserve(&f).unwrap();
    assert_eq!(d.resources()["modify_header_actions_max_per_rule"].used, 10);
}

/// en/tc_tun_encap.c:mlx5e_encap_get (6.1): one entry per tunnel key.
#[test]
fn encap_entries_are_shared() {
    let mut d = cx7();
    let t = tunnel_set(TunnelType::Vxlan, 7, 0xc0a8_0009, 4789, vec![]);
    let a = flower(rep(2), l2(), vec![t.clone(), out(vxlan_dev(4789))]);
    let mut b = a.clone();
    b.indev = rep(3);
    d.reserve(&a).unwrap();
    d.reserve(&b).unwrap();
    assert_eq!(d.resources()["encap_entries"].used, 1);
    let c = flower(
        rep(2),
        l2(),
        vec![
            tunnel_set(TunnelType::Vxlan, 8, 0xc0a8_0009, 4789, vec![]),
            out(vxlan_dev(4789)),
        ],
    );
    d.reserve(&c).unwrap();
    assert_eq!(d.resources()["encap_entries"].used, 2);
    d.release(&a);
    d.release(&b);
    assert_eq!(d.resources()["encap_entries"].used, 1);
}

/// lib/geneve.c:mlx5_geneve_tlv_option_add (6.1): one class/type at a time.
#[test]
fn second_geneve_option_class_is_refused() {
    let mut d = cx7();
    let f = |class: u16| {
        let mut t = tunnel_match(6081);
        let mut o = ovn_opt([0, 1, 0, 2], [0xff; 4]);
        o.class = class;
        t.geneve_opts = vec![o];
        let mut k = l2();
        k.tunnel = Some(t);
        flower(geneve_dev(), k, vec![out(rep(2))])
    };
    d.reserve(&f(0x0102)).unwrap();
    let r = d.reserve(&f(0x0103)).unwrap_err();
    assert_eq!(r.stage, Stage::Resource);
    assert_eq!(
        r.reason,
        "Matching on GENEVE options: failed creating TLV opt object"
    );
    d.release(&f(0x0102));
    d.reserve(&f(0x0103)).unwrap();
}

/// lib/vxlan.h, en/tc_tun_vxlan.c (6.1): 4789 plus max_vxlan_udp_ports - 1.
#[test]
fn vxlan_ports_table_fills() {
    let mut d = cx7();
    let f = |p: u16| {
        let mut k = l2();
        k.tunnel = Some(tunnel_match(p));
        flower(vxlan_dev(p), k, vec![out(rep(2))])
    };
    d.reserve(&f(4789)).unwrap();
    for p in [4790, 4791, 4792] {
        d.reserve(&f(p)).unwrap();
    }
    let r = d.reserve(&f(4793)).unwrap_err();
    assert_eq!(
        r.reason,
        "Matched UDP dst port is not registered as a VXLAN port"
    );
    assert_eq!(d.resources()["vxlan_udp_ports"].used, 4);
}

/// en/tc_ct.c (6.1): connections go through a zone's flowtable only when a
/// held filter's ct action registered it; each takes two rules per table.
#[test]
fn conntrack_entries() {
    let mut d = cx7();
    assert_eq!(d.account_ct(100), 0);
    let f = flower(rep(2), ipv4_tcp(), vec![ct(5), TcAction::Goto { chain: 1 }]);
    d.reserve(&f).unwrap();
    assert_eq!(d.account_ct(100), 100);
    let r = d.resources();
    assert_eq!(r["ct_entries"].used, 200);
    assert_eq!(r["ct_zones"].used, 1);
    assert_eq!(r["post_act_entries"].used, 1);
    let cap = (r["ct_entries"].limit) / 2;
    assert_eq!(d.account_ct(u64::MAX), cap);
    d.release(&f);
    assert_eq!(d.resources()["ct_zones"].used, 0);
}

/// en/tc_tun_encap.c:mlx5e_attach_encap (6.1): the mirred device after
/// `tunnel_key set` must be a tunnel device.
#[test]
fn encap_to_a_non_tunnel_device() {
    refused(
        &cx7(),
        &flower(
            rep(2),
            l2(),
            vec![
                tunnel_set(TunnelType::Vxlan, 7, 0xc0a8_0009, 4789, vec![]),
                out(uplink()),
            ],
        ),
        "en/tc_tun_encap.c:mlx5e_attach_encap",
        "Unsupported tunnel",
    );
}

/// en/tc_tun_vxlan.c:mlx5e_tc_tun_init_encap_attr_vxlan (6.1): an encap to
/// a VXLAN port the NIC's table has no room for.
#[test]
fn encap_to_an_unregistered_vxlan_port() {
    let mut d = with(|c| c.max_vxlan_udp_ports = 1);
    let f = flower(
        rep(2),
        l2(),
        vec![
            tunnel_set(TunnelType::Vxlan, 7, 0xc0a8_0009, 8472, vec![]),
            out(vxlan_dev(8472)),
        ],
    );
    let r = d.reserve(&f).unwrap_err();
    assert_eq!(r.stage, Stage::Resource);
    assert_eq!(r.reason, "vxlan udp dport was not registered with the HW");
}

/// The profiles differ in max_modify_header_actions (GUESS values, see
/// caps.rs): ConnectX-6 Dx (BF2) 32, ConnectX-7 class 64.
#[test]
fn profiles_modify_header_limits() {
    let bf2 = Mlx5::new(Caps::for_profile(Profile::Bf2));
    let cx7 = cx7();
    assert_eq!(bf2.caps.max_modify_header_actions, 32);
    assert_eq!(cx7.caps.max_modify_header_actions, 64);
}

/// Enc keys on a representor's filter are not matched (parse_tunnel_attr
/// runs only for tunnel devices), not refused.
#[test]
fn enc_keys_off_a_tunnel_device_pass() {
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    cx7().check(&flower(rep(2), k, vec![out(rep(3))])).unwrap();
}

/// en/tc/act/vlan_mangle.c:mlx5e_tc_act_vlan_add_rewrite_action (6.1):
/// OVS's VLAN retag (pop, push) is a VID rewrite.
#[test]
fn vlan_retag_rules() {
    let s = "en/tc/act/vlan_mangle.c:mlx5e_tc_act_vlan_add_rewrite_action";
    let retag = |prio| {
        vec![
            TcAction::VlanPop,
            TcAction::VlanPush {
                tpid: 0x8100,
                vid: 20,
                prio,
            },
            out(rep(3)),
        ]
    };
    let mut k = l2();
    k.vlans = vec![VlanMatch {
        tpid: 0x8100,
        tci: Masked {
            value: 0x1000 | 10,
            mask: 0x1fff,
        },
    }];
    cx7().check(&flower(uplink(), k.clone(), retag(0))).unwrap();
    refused(
        &cx7(),
        &flower(uplink(), k.clone(), retag(3)),
        s,
        "Changing VLAN prio is not supported",
    );
    k.vlans[0].tpid = 0x88a8;
    refused(
        &cx7(),
        &flower(uplink(), k, retag(0)),
        s,
        "VLAN rewrite action must have VLAN protocol match",
    );
}

/// en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_params / _vni / _options
/// (6.1): the capability checks of a Geneve decap.
#[test]
fn geneve_capability_rules() {
    let mut t = tunnel_match(6081);
    t.geneve_opts = vec![ovn_opt([0, 1, 0, 2], [0xff; 4])];
    let mut k = l2();
    k.tunnel = Some(t);
    let f = flower(geneve_dev(), k, vec![out(rep(2))]);
    refused(
        &with(|c| c.outer_geneve_oam = false),
        &f,
        "en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_params",
        "Matching on GENEVE OAM is not supported",
    );
    refused(
        &with(|c| c.outer_geneve_vni = false),
        &f,
        "en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_vni",
        "Matching on GENEVE VNI is not supported",
    );
    let s = "en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_options";
    refused(
        &with(|c| c.geneve_tlv_option_0_data = false),
        &f,
        s,
        "Matching on GENEVE options is not supported",
    );
    refused(
        &with(|c| c.outer_geneve_opt_len = false),
        &f,
        s,
        "Matching on GENEVE options len is not supported",
    );
    refused(
        &with(|c| {
            c.max_geneve_tlv_option_data_len = 0;
            c.max_geneve_tlv_options = 4;
        }),
        &f,
        s,
        "Matching on GENEVE options: unsupported option len",
    );
    // A decap on a Geneve device the NIC cannot parse is never bound.
    let r = with(|c| c.flex_geneve = false).check(&f).unwrap_err();
    assert!(r
        .source_fn
        .ends_with("en/rep/tc.c:mlx5e_rep_indr_setup_block"));
}

/// en_tc.c:mlx5e_tc_verify_tunnel_ecn (6.1): CE outside, not CE inside;
/// partial inner ECN.
#[test]
fn tunnel_ecn_ce_rules() {
    let s = "en_tc.c:mlx5e_tc_verify_tunnel_ecn";
    let mut t = tunnel_match(4789);
    t.tos = Masked::exact(3);
    let mut k = l2();
    k.eth_type = Masked::exact(0x0800);
    k.tunnel = Some(t);
    k.nw_tos = Masked { value: 0, mask: 3 };
    refused(
        &cx7(),
        &flower(vxlan_dev(4789), k.clone(), vec![out(rep(2))]),
        s,
        "Match on tos enc_tos ecn = CE while match on tos ecn != CE isn't supported",
    );
    k.nw_tos = Masked { value: 3, mask: 3 };
    cx7()
        .check(&flower(vxlan_dev(4789), k.clone(), vec![out(rep(2))]))
        .unwrap();
    k.nw_tos = Masked { value: 1, mask: 1 };
    refused(
        &cx7(),
        &flower(vxlan_dev(4789), k, vec![out(rep(2))]),
        s,
        "Partial match on tos ecn bits with match on enc_tos ecn bits isn't supported",
    );
}

/// en/tc/act/redirect_ingress.c:tc_act_can_offload_redirect_ingress (6.1).
#[test]
fn internal_port_ingress_must_be_the_only_destination() {
    refused(
        &cx7(),
        &flower(
            rep(2),
            l2(),
            vec![
                out(rep(3)),
                TcAction::Mirred {
                    port: internal(),
                    ingress: true,
                },
            ],
        ),
        "en/tc/act/redirect_ingress.c:tc_act_can_offload_redirect_ingress",
        "redirect to int port ingress is supported only as single destination",
    );
}

/// en_tc.c:is_action_keys_supported (6.1): IPv6 address rewrite with ct.
#[test]
fn ipv6_address_rewrite_with_ct_is_refused() {
    let mut k = ipv4_tcp();
    k.eth_type = Masked::exact(0x86dd);
    refused(
        &cx7(),
        &flower(
            rep(2),
            k,
            vec![
                ct(1),
                TcAction::Pedit {
                    fields: vec![PeditField::Ipv6Src],
                },
                TcAction::Goto { chain: 1 },
            ],
        ),
        "en_tc.c:is_action_keys_supported",
        "can't offload re-write of ipv6 address with action ct",
    );
}

/// en/tc/act/ct.c (6.1): ct_clear before ct is redundant, the pair is one
/// ct action; OVN's decap-then-ct on a Geneve device is offloaded.
#[test]
fn ct_clear_then_ct_and_geneve_ct() {
    let d = cx7();
    d.check(&flower(
        rep(2),
        ipv4_tcp(),
        vec![TcAction::CtClear, ct(3), TcAction::Goto { chain: 2 }],
    ))
    .unwrap();
    let mut t = tunnel_match(6081);
    t.geneve_opts = vec![ovn_opt([0, 1, 0, 2], [0xff; 4])];
    let mut k = ipv4_tcp();
    k.tunnel = Some(t);
    d.check(&flower(
        geneve_dev(),
        k,
        vec![ct(3), TcAction::Goto { chain: 2 }],
    ))
    .unwrap();
}

/// en_tc.c:mlx5e_get_flow_tunnel_id (6.1): a tunnel filter in chain > 0
/// (or chain 0 with goto) maps its tunnel key; equal keys share an id.
#[test]
fn tunnel_mappings_are_shared() {
    let mut d = cx7();
    let mut k = l2();
    k.tunnel = Some(tunnel_match(4789));
    let mut a = flower(vxlan_dev(4789), k.clone(), vec![out(rep(2))]);
    a.chain = 1;
    let mut b = a.clone();
    b.key.eth_dst = Masked::exact([9; 6]);
    d.reserve(&a).unwrap();
    d.reserve(&b).unwrap();
    assert_eq!(d.resources()["tunnel_mappings"].used, 1);
    d.release(&a);
    d.release(&b);
    assert_eq!(d.resources()["tunnel_mappings"].used, 0);
}

/// en_tc.c:alloc_flow_attr_counter (6.1): a counter per filter, two per
/// meter (en/tc/meter.c), shared meters counted once.
#[test]
fn counters_and_meters() {
    let mut d = cx7();
    let f = |dst| {
        let mut k = ipv4_tcp();
        k.ipv4_dst = Masked::exact(dst);
        flower(rep(2), k, vec![TcAction::Police { meter: 9 }, out(rep(3))])
    };
    d.reserve(&f(1)).unwrap();
    d.reserve(&f(2)).unwrap();
    let r = d.resources();
    assert_eq!(r["flow_meters"].used, 1);
    assert_eq!(r["flow_counters"].used, 4);
    assert_eq!(r["post_act_entries"].used, 2);
    d.release(&f(1));
    d.release(&f(2));
    let r = d.resources();
    assert_eq!(r["flow_counters"].used, 0);
    assert_eq!(r["flow_meters"].used, 0);
    let mut d = with(|c| c.max_flow_counters = 1);
    d.reserve(&masked_dst(!0)).unwrap();
    let r = d.reserve(&masked_dst(0xffff_0000)).unwrap_err();
    assert_eq!(r.stage, Stage::Resource);
    assert!(r.source_fn.ends_with("en_tc.c:alloc_flow_attr_counter"));
}

/// en_tc.c:mlx5e_tc_add_fdb_flow (6.1): FDB_TC_MAX_PRIO without
/// ignore_flow_level; OVS gives each non-IP protocol its own prio from 4.
#[test]
fn prio_range_without_ignore_flow_level() {
    let mut d = with(|c| c.ignore_flow_level = false);
    let f = |proto: u16| {
        let mut k = l2();
        k.eth_type = Masked::exact(proto);
        flower(rep(2), k, vec![out(rep(3))])
    };
    for i in 0..13 {
        d.reserve(&f(0x9000 + i)).unwrap();
    }
    let r = d.reserve(&f(0x9100)).unwrap_err();
    assert_eq!(r.stage, Stage::Driver);
    assert_eq!(r.reason, "Requested priority is out of supported range");
    assert!(r.source_fn.ends_with("en_tc.c:mlx5e_tc_add_fdb_flow"));
}
