//! Unit tests of the nfp model: one per modelled rule, each citing the
//! Linux 6.1 function that decides (drivers/net/ethernet/netronome/nfp/flower/).

use super::*;
use crate::model::{CtAction, GeneveOpt, Masked, NatKind, Port, TunnelMatch, VlanMatch};

fn port(no: u32, kind: PortKind) -> Port {
    Port {
        no,
        name: format!("p{no}"),
        kind,
    }
}
fn repr(no: u32) -> Port {
    port(no, PortKind::Representor)
}
fn vxlan_dev(no: u32) -> Port {
    port(
        no,
        PortKind::Tunnel {
            tunnel: TunnelType::Vxlan,
            dst_port: 4789,
        },
    )
}
fn geneve_dev(no: u32) -> Port {
    port(
        no,
        PortKind::Tunnel {
            tunnel: TunnelType::Geneve,
            dst_port: 6081,
        },
    )
}
fn out(p: Port) -> TcAction {
    TcAction::Mirred {
        port: p,
        ingress: false,
    }
}

/// An IPv4 TCP 5-tuple-ish match.
fn ipv4_key() -> DpMatch {
    DpMatch {
        eth_type: Masked::exact(0x0800),
        ipv4_dst: Masked::exact(0x0a00_0002),
        nw_proto: Masked::exact(6),
        tp_dst: Masked::exact(80),
        ..DpMatch::default()
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

fn nfp() -> Nfp {
    Nfp::new(Caps::agilio())
}

fn refused(n: &Nfp, f: &TcFlower) -> (String, &'static str) {
    let e = n.check(f).expect_err("expected a refusal");
    assert_eq!(e.stage, Stage::Driver);
    (e.reason, e.source_fn)
}

fn vxlan_tunnel_key() -> TunnelMatch {
    TunnelMatch {
        tun_id: Masked::exact(42),
        ipv4_src: Masked::exact(0xc0a8_0001),
        ipv4_dst: Masked::exact(0xc0a8_0002),
        tp_dst: Masked::exact(4789),
        ..TunnelMatch::default()
    }
}

fn tunnel_set(tp_dst: u16, opts: Vec<GeneveOpt>) -> TcAction {
    TcAction::TunnelSet {
        tunnel: TunnelType::Vxlan,
        id: 7,
        ipv4_src: 0xc0a8_0001,
        ipv4_dst: 0xc0a8_0002,
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

// --- accepted pipelines ---------------------------------------------------

/// offload.c:nfp_flower_add_offload (6.1): an L3 flow between two reprs.
#[test]
fn l3_between_reprs_is_accepted() {
    let f = flower(repr(1), ipv4_key(), vec![out(repr(2))]);
    assert_eq!(nfp().check(&f), Ok(()));
}

/// action.c:nfp_flower_loop_action (6.1): FLOW_ACTION_DROP sets the drop shortcut.
#[test]
fn drop_is_accepted() {
    let f = flower(repr(1), ipv4_key(), vec![TcAction::Drop]);
    assert_eq!(nfp().check(&f), Ok(()));
}

/// action.c:nfp_flower_loop_action (6.1): VLAN push and pop are offloaded.
#[test]
fn vlan_push_pop_accepted() {
    let mut k = ipv4_key();
    k.vlans = vec![VlanMatch {
        tpid: 0x8100,
        tci: Masked::exact(0x1000 | 10),
    }];
    let f = flower(repr(1), k, vec![TcAction::VlanPop, out(repr(2))]);
    assert_eq!(nfp().check(&f), Ok(()));
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![
            TcAction::VlanPush {
                tpid: 0x8100,
                vid: 10,
                prio: 0,
            },
            out(repr(2)),
        ],
    );
    assert_eq!(nfp().check(&f), Ok(()));
}

// --- binding and protocol ------------------------------------------------

/// offload.c:nfp_flower_indr_setup_tc_cb (6.1): no callback for non-nfp devices.
#[test]
fn other_indev_has_no_callback() {
    let f = flower(
        port(
            3,
            PortKind::Other {
                what: "tap".to_string(),
            },
        ),
        ipv4_key(),
        vec![out(repr(2))],
    );
    let (r, s) = refused(&nfp(), &f);
    assert_eq!(s, INDR_CB);
    assert!(
        r.starts_with("nfp_fl_is_netdev_to_offload: p3 (tap)"),
        "{r}"
    );
}

/// offload.c:nfp_flower_setup_indr_tc_block (6.1): internal ports bind at egress only.
#[test]
fn internal_indev_is_not_bound_at_ingress() {
    let f = flower(port(4, PortKind::Internal), ipv4_key(), vec![out(repr(2))]);
    assert_eq!(refused(&nfp(), &f).1, INDR_BLOCK);
}

/// offload.c:nfp_flower_repr_offload (6.1): eth_proto_is_802_3(protocol).
#[test]
fn protocol_all_is_refused() {
    let f = flower(
        repr(1),
        DpMatch {
            eth_dst: Masked::exact([2, 0, 0, 0, 0, 1]),
            ..DpMatch::default()
        },
        vec![out(repr(2))],
    );
    let (r, s) = refused(&nfp(), &f);
    assert_eq!(s, REPR_OFFLOAD);
    assert!(r.contains("0x0003"), "{r}");
}

// --- nfp_flower_calculate_key_layers --------------------------------------

fn key_layers_refusal(k: DpMatch) -> String {
    let f = flower(repr(1), k, vec![out(repr(2))]);
    let (r, s) = refused(&nfp(), &f);
    assert_eq!(s, KEY_LAYERS, "{r}");
    r
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): ETH_P_ARP.
#[test]
fn arp_is_refused() {
    let k = DpMatch {
        eth_type: Masked::exact(0x0806),
        ..DpMatch::default()
    };
    assert_eq!(
        key_layers_refusal(k),
        "unsupported offload: ARP not supported"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): keys outside the whitelist (ARP fields).
#[test]
fn arp_fields_are_not_whitelisted() {
    let k = DpMatch {
        eth_type: Masked::exact(0x0806),
        ipv4_dst: Masked::exact(1),
        ..DpMatch::default()
    };
    assert_eq!(
        key_layers_refusal(k),
        "unsupported offload: match not supported"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): ICMP type/code is FLOW_DISSECTOR_KEY_ICMP.
#[test]
fn icmp_type_is_not_whitelisted() {
    let k = DpMatch {
        eth_type: Masked::exact(0x0800),
        nw_proto: Masked::exact(1),
        tp_src: Masked::exact(8),
        ..DpMatch::default()
    };
    assert_eq!(
        key_layers_refusal(k),
        "unsupported offload: match not supported"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): other EtherTypes.
#[test]
fn lldp_ethertype_is_refused() {
    let k = DpMatch {
        eth_type: Masked::exact(0x88cc),
        ..DpMatch::default()
    };
    assert_eq!(
        key_layers_refusal(k),
        "unsupported offload: match on given EtherType is not supported"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): L3 keys without n_proto.
#[test]
fn l3_without_ethertype_is_refused() {
    let k = DpMatch {
        vlans: vec![VlanMatch {
            tpid: 0x8100,
            tci: Masked::exact(0x1000 | 5),
        }],
        ipv4_dst: Masked::exact(1),
        ..DpMatch::default()
    };
    assert_eq!(
        key_layers_refusal(k),
        "unsupported offload: cannot match above L2 without specified EtherType"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): L4 ports without ip_proto.
#[test]
fn l4_without_ip_proto_is_refused() {
    let mut k = ipv4_key();
    k.nw_proto = Masked::default();
    assert_eq!(
        key_layers_refusal(k),
        "unsupported offload: cannot match on L4 information without specified IP protocol type"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): NFP_FLOWER_SUPPORTED_TCPFLAGS.
#[test]
fn tcp_ack_flag_is_refused_syn_accepted() {
    let mut k = ipv4_key();
    k.tcp_flags = Masked {
        value: 0x10,
        mask: 0x10,
    };
    assert_eq!(
        key_layers_refusal(k.clone()),
        "unsupported offload: no match support for selected TCP flags"
    );
    k.tcp_flags = Masked {
        value: 0x08,
        mask: 0x08,
    };
    assert_eq!(
        key_layers_refusal(k.clone()),
        "unsupported offload: PSH and URG is only supported when used with FIN, SYN or RST"
    );
    k.tcp_flags = Masked {
        value: 0x02,
        mask: 0x12,
    };
    let f = flower(repr(1), k, vec![out(repr(2))]);
    assert_eq!(nfp().check(&f), Ok(()));
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): fragment matches are
/// FLOW_DIS_IS_FRAGMENT / FIRST_FRAG, both in NFP_FLOWER_SUPPORTED_CTLFLAGS.
#[test]
fn fragment_match_is_accepted() {
    let mut k = ipv4_key();
    k.nw_frag = Masked { value: 1, mask: 3 };
    let f = flower(repr(1), k, vec![out(repr(2))]);
    assert_eq!(nfp().check(&f), Ok(()));
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): NFP_FL_FEATS_VLAN_PCP / VLAN_QINQ.
#[test]
fn vlan_pcp_and_qinq_need_firmware_features() {
    let mut caps = Caps::agilio();
    caps.vlan_pcp = false;
    caps.vlan_qinq = false;
    let n = Nfp::new(caps);
    let mut k = ipv4_key();
    k.vlans = vec![VlanMatch {
        tpid: 0x8100,
        tci: Masked::exact(0x1000 | (3 << 13) | 10),
    }];
    let f = flower(repr(1), k.clone(), vec![out(repr(2))]);
    assert_eq!(
        refused(&n, &f).0,
        "unsupported offload: loaded firmware does not support VLAN PCP offload"
    );
    k.vlans = vec![
        VlanMatch {
            tpid: 0x88a8,
            tci: Masked::exact(0x1000 | 10),
        },
        VlanMatch {
            tpid: 0x8100,
            tci: Masked::exact(0x1000 | 20),
        },
    ];
    let f = flower(repr(1), k, vec![out(repr(2))]);
    assert_eq!(
        refused(&n, &f).0,
        "unsupported offload: loaded firmware does not support VLAN QinQ offload"
    );
    assert_eq!(nfp().check(&f), Ok(()));
}

// --- tunnels (decap) --------------------------------------------------------

fn decap(indev: Port, t: TunnelMatch) -> TcFlower {
    let mut k = ipv4_key();
    k.tunnel = Some(t);
    flower(indev, k, vec![out(repr(2))])
}

/// offload.c:nfp_flower_calc_udp_tun_layer (6.1): VXLAN 4789 on a vxlan device.
#[test]
fn vxlan_decap_is_accepted() {
    assert_eq!(
        nfp().check(&decap(vxlan_dev(9), vxlan_tunnel_key())),
        Ok(())
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): enc ipv4 dst must be exact.
#[test]
fn tunnel_dst_must_be_exact() {
    let mut t = vxlan_tunnel_key();
    t.ipv4_dst.mask = 0xffff_ff00;
    let (r, s) = refused(&nfp(), &decap(vxlan_dev(9), t));
    assert_eq!(s, KEY_LAYERS);
    assert_eq!(
        r,
        "unsupported offload: only an exact match IPv4 destination address is supported"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): UDP tunnels need enc dst port.
#[test]
fn tunnel_without_port_is_refused() {
    let mut t = vxlan_tunnel_key();
    t.tp_dst = Masked::default();
    assert_eq!(
        refused(&nfp(), &decap(vxlan_dev(9), t)).0,
        "unsupported offload: an exact match on L4 destination port is required for non-GRE tunnels"
    );
}

/// offload.c:nfp_flower_calc_udp_tun_layer (6.1): only 4789 and 6081 are known.
#[test]
fn nonstandard_tunnel_port_is_unknown() {
    let mut t = vxlan_tunnel_key();
    t.tp_dst = Masked::exact(4790);
    let dev = port(
        9,
        PortKind::Tunnel {
            tunnel: TunnelType::Vxlan,
            dst_port: 4790,
        },
    );
    let (r, s) = refused(&nfp(), &decap(dev, t));
    assert_eq!(
        (r.as_str(), s),
        ("unsupported offload: tunnel type unknown", UDP_TUN)
    );
}

/// offload.c:nfp_flower_calc_udp_tun_layer (6.1): no options on VXLAN.
#[test]
fn vxlan_options_are_refused() {
    let mut t = vxlan_tunnel_key();
    t.geneve_opts = vec![GeneveOpt {
        class: 0x102,
        typ: 0x80,
        value: vec![0; 4],
        mask: vec![0xff; 4],
    }];
    assert_eq!(
        refused(&nfp(), &decap(vxlan_dev(9), t)).0,
        "unsupported offload: encap options not supported on vxlan tunnels"
    );
}

/// offload.c:nfp_flower_calc_opt_layer (6.1): NFP_FL_MAX_GENEVE_OPT_KEY = 32 bytes.
#[test]
fn geneve_options_length_limit() {
    let mut t = vxlan_tunnel_key();
    t.tp_dst = Masked::exact(6081);
    t.geneve_opts = vec![GeneveOpt {
        class: 0x102,
        typ: 0x80,
        value: vec![0; 8],
        mask: vec![0xff; 8],
    }];
    // OVN's 12-byte option (4 header + 8) fits.
    assert_eq!(nfp().check(&decap(geneve_dev(9), t.clone())), Ok(()));
    t.geneve_opts[0].value = vec![0; 32];
    t.geneve_opts[0].mask = vec![0xff; 32];
    let (r, s) = refused(&nfp(), &decap(geneve_dev(9), t));
    assert_eq!(
        (r.as_str(), s),
        (
            "unsupported offload: geneve options exceed maximum length",
            OPT_LAYER
        )
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): nfp_fl_netdev_is_tunnel_type(ingress).
#[test]
fn tunnel_match_on_wrong_device() {
    assert_eq!(
        refused(&nfp(), &decap(geneve_dev(9), vxlan_tunnel_key())).0,
        "unsupported offload: ingress netdev does not match the expected tunnel type"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): the required tunnel key set.
#[test]
fn tunnel_id_alone_is_refused() {
    let t = TunnelMatch {
        tun_id: Masked::exact(42),
        ..TunnelMatch::default()
    };
    assert_eq!(
        refused(&nfp(), &decap(vxlan_dev(9), t)).0,
        "unsupported offload: tunnel match not supported"
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): NFP_FL_FEATS_IPV6_TUN.
#[test]
fn ipv6_tunnel_needs_feature() {
    let mut caps = Caps::agilio();
    caps.ipv6_tun = false;
    let t = TunnelMatch {
        ipv6_dst: Masked::exact(1),
        tp_dst: Masked::exact(4789),
        ..TunnelMatch::default()
    };
    assert_eq!(
        refused(&Nfp::new(caps), &decap(vxlan_dev(9), t)).0,
        "unsupported offload: firmware does not support IPv6 tunnels"
    );
}

/// match.c:nfp_flower_compile_port (6.1): a tunnel device without enc keys has no port id.
#[test]
fn tunnel_device_without_enc_match() {
    let f = flower(vxlan_dev(9), ipv4_key(), vec![out(repr(2))]);
    let (r, s) = refused(&nfp(), &f);
    assert_eq!(
        (r.as_str(), s),
        (
            "unsupported offload: invalid ingress interface for match offload",
            COMPILE_PORT
        )
    );
}

// --- actions ------------------------------------------------------------

/// action.c:nfp_fl_output (6.1): egress must be an nfp repr on the same device.
#[test]
fn output_to_non_nfp_port() {
    let other = port(
        5,
        PortKind::Other {
            what: "tap".to_string(),
        },
    );
    let f = flower(repr(1), ipv4_key(), vec![out(other.clone())]);
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: ingress and egress interfaces are on different devices"
                .to_string(),
            FL_OUTPUT
        )
    );
    let f = decap(vxlan_dev(9), vxlan_tunnel_key());
    let f = TcFlower {
        actions: vec![out(other)],
        ..f
    };
    assert_eq!(
        refused(&nfp(), &f).0,
        "unsupported offload: egress interface is not an nfp port"
    );
}

/// action.c:nfp_fl_output / nfp_fl_get_tun_from_act (6.1): encap to VXLAN.
#[test]
fn vxlan_encap_rules() {
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(4789, vec![]), out(vxlan_dev(9))],
    );
    assert_eq!(nfp().check(&f), Ok(()));
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(4789, vec![]), out(repr(2))],
    );
    assert_eq!(
        refused(&nfp(), &f).0,
        "unsupported offload: egress interface does not match the required tunnel type"
    );
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![
            tunnel_set(4789, vec![]),
            out(vxlan_dev(9)),
            tunnel_set(4789, vec![]),
            out(vxlan_dev(9)),
        ],
    );
    assert_eq!(
        refused(&nfp(), &f).0,
        "unsupported offload: cannot offload more than one tunnel mirred output per filter"
    );
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(4790, vec![]), out(vxlan_dev(9))],
    );
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: unsupported tunnel type in action list".to_string(),
            LOOP_ACTION
        )
    );
}

/// action.c:nfp_fl_push_geneve_options / nfp_fl_set_tun (6.1): geneve option limits.
#[test]
fn geneve_encap_options() {
    let opt = |n: usize| GeneveOpt {
        class: 0x102,
        typ: 0x80,
        value: vec![0; n],
        mask: vec![0xff; n],
    };
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(6081, vec![opt(8)]), out(geneve_dev(9))],
    );
    assert_eq!(nfp().check(&f), Ok(()));
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(6081, vec![opt(16), opt(16)]), out(geneve_dev(9))],
    );
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: maximum allowed action list size exceeded at push geneve options"
                .to_string(),
            GENEVE_PUSH
        )
    );
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(4789, vec![opt(4)]), out(vxlan_dev(9))],
    );
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: loaded firmware does not support geneve options offload"
                .to_string(),
            SET_TUN
        )
    );
}

/// action.c:nfp_flower_loop_action / nfp_flower_output_action (6.1): pedit needs matching csum.
#[test]
fn pedit_and_csum() {
    let nat = TcAction::Pedit {
        fields: vec![PeditField::Ipv4Dst, PeditField::TcpDport],
    };
    let ok = flower(
        repr(1),
        ipv4_key(),
        vec![
            nat.clone(),
            TcAction::Csum {
                flags: csum_flag::IPV4HDR | csum_flag::TCP,
            },
            out(repr(2)),
        ],
    );
    assert_eq!(nfp().check(&ok), Ok(()));
    let no_csum = flower(repr(1), ipv4_key(), vec![nat.clone(), out(repr(2))]);
    assert_eq!(
        refused(&nfp(), &no_csum),
        (
            "unsupported offload: set actions without updating checksums are not supported"
                .to_string(),
            OUTPUT_ACTION
        )
    );
    let icmp_csum = flower(
        repr(1),
        ipv4_key(),
        vec![
            nat,
            TcAction::Csum {
                flags: csum_flag::IPV4HDR | csum_flag::TCP | csum_flag::ICMP,
            },
            out(repr(2)),
        ],
    );
    assert_eq!(
        refused(&nfp(), &icmp_csum).0,
        "unsupported offload: unsupported csum update action in action list"
    );
    let mac = flower(
        repr(1),
        ipv4_key(),
        vec![
            TcAction::Pedit {
                fields: vec![PeditField::EthSrc, PeditField::EthDst],
            },
            out(repr(2)),
        ],
    );
    assert_eq!(nfp().check(&mac), Ok(()));
}

/// action.c:nfp_flower_loop_action (6.1): FLOW_ACTION_POLICE needs NFP_FL_FEATS_QOS_METER.
#[test]
fn police_needs_qos_meter() {
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Police { meter: 1 }, out(repr(2))],
    );
    assert_eq!(nfp().check(&f), Ok(()));
    let mut caps = Caps::agilio();
    caps.qos_meter = false;
    assert_eq!(
        refused(&Nfp::new(caps), &f).0,
        "unsupported offload: unsupported police action in action list"
    );
}

/// action.c:nfp_flower_output_action (6.1): NFP_FL_MAX_A_SIZ (1216 bytes).
#[test]
fn action_list_size_limit() {
    let acts: Vec<TcAction> = (0..160).map(|i| out(repr(10 + i))).collect();
    let f = flower(repr(1), ipv4_key(), acts);
    assert_eq!(
        refused(&nfp(), &f).0,
        "unsupported offload: mirred output increases action list size beyond the allowed maximum"
    );
    let acts: Vec<TcAction> = (0..152).map(|i| out(repr(10 + i))).collect();
    assert_eq!(nfp().check(&flower(repr(1), ipv4_key(), acts)), Ok(()));
}

/// action.c:nfp_fl_set_tun (6.1): IPv6 encap needs NFP_FL_FEATS_IPV6_TUN (bare -EOPNOTSUPP).
#[test]
fn ipv6_encap_needs_feature() {
    let mut caps = Caps::agilio();
    caps.ipv6_tun = false;
    let set = TcAction::TunnelSet {
        tunnel: TunnelType::Vxlan,
        id: 7,
        ipv4_src: 0,
        ipv4_dst: 0,
        ipv6_src: 1,
        ipv6_dst: 2,
        tos: 0,
        ttl: 64,
        tp_dst: 4789,
        csum: true,
        dont_frag: false,
        opts: vec![],
    };
    let f = flower(repr(1), ipv4_key(), vec![set, out(vxlan_dev(9))]);
    assert_eq!(nfp().check(&f), Ok(()));
    assert_eq!(refused(&Nfp::new(caps), &f).1, SET_TUN);
}

/// action.c:nfp_fl_output (6.1): an internal port as egress needs ptype HOST
/// (OVS 3.1 adds it only to ingress redirects).
#[test]
fn internal_egress_needs_ptype_host() {
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Mirred {
            port: port(4, PortKind::Internal),
            ingress: false,
        }],
    );
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: pre-tunnel rules require single egress dev and ptype HOST action"
                .to_string(),
            FL_OUTPUT
        )
    );
}

/// action.c:nfp_flower_loop_action (6.1): goto outside a pre_ct flow.
#[test]
fn goto_without_ct_is_refused() {
    let f = flower(repr(1), ipv4_key(), vec![TcAction::Goto { chain: 3 }]);
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: unsupported action in action list".to_string(),
            LOOP_ACTION
        )
    );
}

/// action.c:nfp_fl_output + offload.c:nfp_flower_validate_pre_tun_rule (6.1).
#[test]
fn output_to_internal_port_is_a_pre_tunnel_rule() {
    let internal = TcAction::Mirred {
        port: port(4, PortKind::Internal),
        ingress: true,
    };
    // L4 match: TP layer is not a pre-tunnel field.
    let mut k = ipv4_key();
    k.eth_dst = Masked::exact([2, 0, 0, 0, 0, 4]);
    k.eth_src = Masked::exact([2, 0, 0, 0, 0, 5]);
    let f = flower(repr(1), k, vec![internal.clone()]);
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported pre-tunnel rule: too many match fields".to_string(),
            PRE_TUN
        )
    );
    let k = DpMatch {
        eth_type: Masked::exact(0x0800),
        eth_dst: Masked::exact([2, 0, 0, 0, 0, 4]),
        eth_src: Masked::exact([2, 0, 0, 0, 0, 5]),
        nw_frag: Masked::exact(0),
        ..DpMatch::default()
    };
    let f = flower(repr(1), k.clone(), vec![internal.clone()]);
    let mut n = nfp();
    assert_eq!(n.reserve(&f), Ok(()));
    // metadata.c: pre-tunnel rules take a stats context, no mask id.
    assert_eq!(n.resources()["mask_ids"].used, 0);
    assert_eq!(n.resources()["stats_contexts"].used, 1);
    let f = flower(repr(1), k, vec![internal, out(repr(2))]);
    assert_eq!(
        refused(&nfp(), &f).0,
        "unsupported pre-tunnel rule: egress is not the last action"
    );
}

// --- chains and conntrack -------------------------------------------------

/// offload.c:offload_pre_check (6.1): chain != 0 outside conntrack.
#[test]
fn non_zero_chain_is_refused() {
    let mut f = flower(repr(1), ipv4_key(), vec![out(repr(2))]);
    f.chain = 5;
    let (r, s) = refused(&nfp(), &f);
    assert_eq!(s, PRE_CHECK);
    assert!(r.contains("chain 5"), "{r}");
}

/// offload.c:offload_pre_check (6.1): ct keys without +est.
#[test]
fn ct_new_match_is_refused() {
    let mut k = ipv4_key();
    k.ct_state = Masked {
        value: cs::TRACKED | cs::NEW,
        mask: cs::TRACKED | cs::NEW,
    };
    let f = flower(repr(1), k, vec![out(repr(2))]);
    assert_eq!(refused(&nfp(), &f).1, PRE_CHECK);
}

/// conntrack.c:is_pre_ct_flow / nfp_fl_ct_handle_pre_ct (6.1).
#[test]
fn pre_ct_needs_goto() {
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Ct(ct(5)), TcAction::Goto { chain: 1 }],
    );
    assert_eq!(nfp().check(&f), Ok(()));
    let f = flower(repr(1), ipv4_key(), vec![TcAction::Ct(ct(5))]);
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: Conntrack requires ACTION_GOTO".to_string(),
            PRE_CT
        )
    );
}

/// conntrack.c:is_pre_ct_flow (6.1): ct commit / nat with a range is not a
/// pre_ct flow, so the ct action reaches action.c:nfp_flower_loop_action;
/// `ct(nat)` alone (TCA_CT_ACT_NAT) is a pre_ct flow since 6.1.
#[test]
fn ct_commit_and_nat_range_are_refused() {
    let mut c = ct(5);
    c.commit = true;
    let f = flower(repr(1), ipv4_key(), vec![TcAction::Ct(c), out(repr(2))]);
    assert_eq!(
        refused(&nfp(), &f).0,
        "unsupported offload: unsupported action in action list"
    );
    let mut c = ct(5);
    c.commit = true;
    c.nat = Some(NatKind::Src);
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Ct(c), TcAction::Goto { chain: 1 }],
    );
    assert_eq!(refused(&nfp(), &f).1, LOOP_ACTION);
    let mut c = ct(5);
    c.nat = Some(NatKind::Existing);
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Ct(c), TcAction::Goto { chain: 1 }],
    );
    assert_eq!(nfp().check(&f), Ok(()));
}

/// conntrack.c:is_post_ct_flow (6.1): +est with ct(commit) is not post_ct,
/// so offload.c:offload_pre_check refuses its ct match.
#[test]
fn est_with_commit_is_not_post_ct() {
    let mut f = post_ct(Masked::exact(5));
    let mut c = ct(5);
    c.commit = true;
    f.actions.insert(0, TcAction::Ct(c));
    assert_eq!(refused(&nfp(), &f).1, PRE_CHECK);
}

/// conntrack.c:is_post_ct_flow (6.1): after a NAT, a chain-N flow with
/// ct_clear and no ct match is a post_ct flow (wildcarded zone).
#[test]
fn ct_clear_on_chain_is_post_ct() {
    let mut f = flower(repr(1), ipv4_key(), vec![TcAction::CtClear, out(repr(2))]);
    f.chain = 2;
    assert_eq!(nfp().check(&f), Ok(()));
    // On chain 0 it is an ordinary flow with a ct action.
    f.chain = 0;
    assert_eq!(refused(&nfp(), &f).1, LOOP_ACTION);
}

fn post_ct(zone: Masked<u16>) -> TcFlower {
    let mut k = ipv4_key();
    k.ct_state = Masked {
        value: cs::TRACKED | cs::ESTABLISHED,
        mask: cs::TRACKED | cs::ESTABLISHED | cs::NEW,
    };
    k.ct_zone = zone;
    let mut f = flower(repr(1), k, vec![out(repr(2))]);
    f.chain = 1;
    f
}

/// conntrack.c:is_post_ct_flow / nfp_fl_ct_handle_post_ct (6.1).
#[test]
fn post_ct_zone_mask() {
    assert_eq!(nfp().check(&post_ct(Masked::exact(5))), Ok(()));
    assert_eq!(nfp().check(&post_ct(Masked::default())), Ok(()));
    assert_eq!(
        refused(
            &nfp(),
            &post_ct(Masked {
                value: 5,
                mask: 0xff
            })
        ),
        (
            "unsupported offload: partially wildcarded ct_zone is not supported".to_string(),
            POST_CT
        )
    );
}

// --- resources (metadata.c) ------------------------------------------------

/// metadata.c:nfp_check_mask_add (6.1): same mask -> same id, refcounted.
#[test]
fn same_mask_shares_an_id() {
    let mut n = nfp();
    let a = flower(repr(1), ipv4_key(), vec![out(repr(2))]);
    let mut k = ipv4_key();
    k.ipv4_dst = Masked::exact(0x0a00_0009);
    k.tp_dst = Masked::exact(443);
    let b = flower(repr(3), k, vec![out(repr(2))]);
    n.reserve(&a).unwrap();
    n.reserve(&b).unwrap();
    let r = n.resources();
    assert_eq!(r["mask_ids"].used, 1);
    assert_eq!(r["stats_contexts"].used, 2);
    assert_eq!(r["flows"].used, 2);
    n.release(&a);
    assert_eq!(n.resources()["mask_ids"].used, 1);
    n.release(&b);
    assert_eq!(n.resources()["mask_ids"].used, 0);
    assert_eq!(n.resources()["stats_contexts"].used, 0);
}

fn masked_flow(i: u32) -> TcFlower {
    let mut k = ipv4_key();
    k.ipv4_src = Masked { value: 0, mask: i };
    flower(repr(1), k, vec![out(repr(2))])
}

/// metadata.c:nfp_compile_flow_metadata / nfp_mask_alloc (6.1): 255 ids.
#[test]
fn the_256th_mask_is_refused_and_release_frees() {
    let mut n = nfp();
    for i in 1..=255 {
        n.reserve(&masked_flow(i)).unwrap();
    }
    let e = n.reserve(&masked_flow(256)).unwrap_err();
    assert_eq!(e.stage, Stage::Resource);
    assert_eq!(e.reason, "invalid entry: cannot allocate a new mask id");
    assert_eq!(e.source_fn, METADATA);
    // Nothing taken by the refused flow.
    assert_eq!(n.resources()["stats_contexts"].used, 255);
    // A flow with an existing mask still fits.
    n.reserve(&masked_flow(7)).unwrap();
    n.release(&masked_flow(1));
    n.reserve(&masked_flow(256)).unwrap();
    assert_eq!(n.resources()["mask_ids"].used, 255);
}

/// metadata.c:nfp_get_stats_entry (6.1): stats contexts run out.
#[test]
fn stats_contexts_run_out() {
    let mut caps = Caps::agilio();
    caps.host_ctx_count = 2;
    let mut n = Nfp::new(caps);
    let f = flower(repr(1), ipv4_key(), vec![out(repr(2))]);
    n.reserve(&f).unwrap();
    n.reserve(&f).unwrap();
    let e = n.reserve(&f).unwrap_err();
    assert_eq!(
        (e.stage, e.reason.as_str()),
        (
            Stage::Resource,
            "invalid entry: cannot allocate new stats context"
        )
    );
}

/// conntrack.c:nfp_ct_do_tc_merge / nfp_ct_do_nft_merge (6.1): connections
/// are held only through a pre_ct/post_ct pair.
#[test]
fn ct_connections_need_a_merge_pair() {
    let mut n = nfp();
    assert_eq!(n.account_ct(10), 0);
    let pre = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Ct(ct(5)), TcAction::Goto { chain: 1 }],
    );
    n.reserve(&pre).unwrap();
    assert_eq!(n.account_ct(10), 0);
    n.reserve(&post_ct(Masked::exact(5))).unwrap();
    assert_eq!(n.account_ct(10), 10);
    let r = n.resources();
    assert_eq!(r["ct_merges"].used, 20);
    assert_eq!(r["stats_contexts"].used, 20);
    assert_eq!(r["mask_ids"].used, 1);
    // Idempotent: a second count replaces the first.
    assert_eq!(n.account_ct(3), 3);
    assert_eq!(n.resources()["stats_contexts"].used, 6);
    // A post_ct flow in another zone does not pair.
    let mut m = nfp();
    m.reserve(&pre).unwrap();
    m.reserve(&post_ct(Masked::exact(6))).unwrap();
    assert_eq!(m.account_ct(10), 0);
}

/// conntrack.c:nfp_ct_merge_act_check (6.1): VLAN pop in the pre_ct flow
/// fails every merge; the stats contexts bound the rest.
#[test]
fn ct_merge_limits() {
    let mut n = nfp();
    let pre = flower(
        repr(1),
        ipv4_key(),
        vec![
            TcAction::VlanPop,
            TcAction::Ct(ct(5)),
            TcAction::Goto { chain: 1 },
        ],
    );
    n.reserve(&pre).unwrap();
    n.reserve(&post_ct(Masked::exact(5))).unwrap();
    assert_eq!(n.account_ct(10), 0);
    let mut caps = Caps::agilio();
    caps.host_ctx_count = 9;
    let mut m = Nfp::new(caps);
    let pre = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Ct(ct(5)), TcAction::Goto { chain: 1 }],
    );
    m.reserve(&pre).unwrap();
    m.reserve(&post_ct(Masked::default())).unwrap();
    assert_eq!(m.account_ct(10), 4);
}

/// tunnel_conf.c:nfp_flower_xmit_pre_tun_flow (6.1): without DECAP_V2 the
/// firmware's pre-tunnel table holds NFP_TUN_PRE_TUN_RULE_LIMIT (32) rules.
#[test]
fn pre_tunnel_table_limit_without_decap_v2() {
    let mut caps = Caps::agilio();
    caps.decap_v2 = false;
    let mut n = Nfp::new(caps);
    let k = DpMatch {
        eth_type: Masked::exact(0x0800),
        eth_dst: Masked::exact([2, 0, 0, 0, 0, 4]),
        ..DpMatch::default()
    };
    let f = flower(
        repr(1),
        k,
        vec![TcAction::Mirred {
            port: port(4, PortKind::Internal),
            ingress: true,
        }],
    );
    for _ in 0..32 {
        n.reserve(&f).unwrap();
    }
    let e = n.reserve(&f).unwrap_err();
    assert_eq!(e.stage, Stage::Resource);
    assert_eq!(e.source_fn, XMIT_PRE_TUN);
    assert_eq!(n.resources()["pre_tun_rules"].used, 32);
    assert_eq!(n.resources()["flows"].used, 0);
    n.release(&f);
    assert!(n.reserve(&f).is_ok());
}

/// metadata.c:nfp_add_mask_table (6.1): the key layer is part of the mask,
/// so IPv4 and IPv6 flows, or tagged and untagged ones, never share an id.
#[test]
fn layers_are_part_of_the_mask() {
    let mut n = nfp();
    let v4 = flower(
        repr(1),
        DpMatch {
            eth_type: Masked::exact(0x0800),
            ..DpMatch::default()
        },
        vec![out(repr(2))],
    );
    let v6 = flower(
        repr(1),
        DpMatch {
            eth_type: Masked::exact(0x86dd),
            ..DpMatch::default()
        },
        vec![out(repr(2))],
    );
    let mut tagged = v4.clone();
    tagged.key.vlans = vec![VlanMatch {
        tpid: 0x8100,
        tci: Masked::exact(0x1000 | 7),
    }];
    for f in [&v4, &v6, &tagged] {
        n.reserve(f).unwrap();
    }
    assert_eq!(n.resources()["mask_ids"].used, 3);
}

/// conntrack.c:nfp_ct_merge_check (6.1): a pre_ct and a post_ct flow whose
/// matches disagree never merge; a `ct nat` pre_ct skips the address check.
#[test]
fn ct_merge_check_conflicts() {
    let pre = |nat: bool| {
        let mut c = ct(5);
        if nat {
            c.nat = Some(NatKind::Existing);
        }
        flower(
            repr(1),
            ipv4_key(),
            vec![TcAction::Ct(c), TcAction::Goto { chain: 1 }],
        )
    };
    let mut post = post_ct(Masked::exact(5));
    post.key.ipv4_dst = Masked::exact(0x0a00_0099);
    let mut n = nfp();
    n.reserve(&pre(false)).unwrap();
    n.reserve(&post).unwrap();
    assert_eq!(n.account_ct(4), 0);
    let mut m = nfp();
    m.reserve(&pre(true)).unwrap();
    m.reserve(&post).unwrap();
    assert_eq!(m.account_ct(4), 4);
}

/// conntrack.c:nfp_ct_do_nft_merge (6.1): each direction of a connection
/// merges with every viable pair of its zone (two post_ct flows after one
/// pre_ct: four merged flows per connection).
#[test]
fn ct_connection_merges_with_every_pair_of_its_zone() {
    let mut n = nfp();
    let pre = flower(
        repr(1),
        ipv4_key(),
        vec![TcAction::Ct(ct(5)), TcAction::Goto { chain: 1 }],
    );
    n.reserve(&pre).unwrap();
    n.reserve(&post_ct(Masked::exact(5))).unwrap();
    let mut other = post_ct(Masked::exact(5));
    other.key.eth_dst = Masked::exact([2, 0, 0, 0, 0, 9]);
    n.reserve(&other).unwrap();
    assert_eq!(n.account_ct(10), 10);
    assert_eq!(n.resources()["ct_merges"].used, 40);
    assert_eq!(n.resources()["mask_ids"].used, 2);
}

/// offload.c:nfp_flower_setup_indr_tc_block + match.c:nfp_flower_compile_port
/// (6.1): without flow merge an internal port binds at ingress, but has no
/// port id to match on.
#[test]
fn internal_indev_without_flow_merge() {
    let mut caps = Caps::agilio();
    caps.flow_merge = false;
    let f = flower(port(4, PortKind::Internal), ipv4_key(), vec![out(repr(2))]);
    assert_eq!(
        refused(&Nfp::new(caps), &f),
        (
            "unsupported offload: invalid ingress interface for match offload".to_string(),
            COMPILE_PORT
        )
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): a partially masked
/// tunnel UDP port, an inexact IPv6 tunnel destination.
#[test]
fn tunnel_port_and_ipv6_dst_exactness() {
    let mut t = vxlan_tunnel_key();
    t.tp_dst.mask = 0xff00;
    assert_eq!(
        refused(&nfp(), &decap(vxlan_dev(9), t)).0,
        "unsupported offload: only an exact match L4 destination port is supported"
    );
    let t = TunnelMatch {
        ipv6_dst: Masked {
            value: 1,
            mask: !0u128 << 64,
        },
        tp_dst: Masked::exact(4789),
        ..TunnelMatch::default()
    };
    assert_eq!(
        refused(&nfp(), &decap(vxlan_dev(9), t)).0,
        "unsupported offload: only an exact match IPv6 destination address is supported"
    );
}

/// offload.c:nfp_flower_calc_udp_tun_layer / nfp_flower_calc_opt_layer (6.1):
/// NFP_FL_FEATS_GENEVE, NFP_FL_FEATS_GENEVE_OPT, the IPv6 option limit (8).
#[test]
fn geneve_decap_features() {
    let mut t = vxlan_tunnel_key();
    t.tp_dst = Masked::exact(6081);
    let mut caps = Caps::agilio();
    caps.geneve = false;
    assert_eq!(
        refused(&Nfp::new(caps), &decap(geneve_dev(9), t.clone())).0,
        "unsupported offload: loaded firmware does not support geneve offload"
    );
    t.geneve_opts = vec![GeneveOpt {
        class: 0x102,
        typ: 0x80,
        value: vec![0; 4],
        mask: vec![0xff; 4],
    }];
    let mut caps = Caps::agilio();
    caps.geneve_opt = false;
    assert_eq!(
        refused(&Nfp::new(caps), &decap(geneve_dev(9), t.clone())).0,
        "unsupported offload: loaded firmware does not support geneve option offload"
    );
    let v6 = TunnelMatch {
        ipv4_src: Masked::default(),
        ipv4_dst: Masked::default(),
        ipv6_dst: Masked::exact(1),
        geneve_opts: vec![GeneveOpt {
            class: 0x102,
            typ: 0x80,
            value: vec![0; 8],
            mask: vec![0xff; 8],
        }],
        ..t
    };
    assert_eq!(
        refused(&nfp(), &decap(geneve_dev(9), v6)),
        (
            "unsupported offload: geneve options exceed maximum length".to_string(),
            OPT_LAYER
        )
    );
}

/// offload.c:nfp_flower_calculate_key_layers (6.1): TCP flags need an IP layer.
#[test]
fn tcp_flags_need_ip() {
    let k = DpMatch {
        eth_type: Masked::exact(0x8847),
        tcp_flags: Masked {
            value: 0x02,
            mask: 0x02,
        },
        ..DpMatch::default()
    };
    assert_eq!(
        key_layers_refusal(k),
        "unsupported offload: match on TCP flags requires a match on IPv4/IPv6"
    );
}

/// action.c:nfp_flower_loop_action (6.1): a Geneve encap without
/// NFP_FL_FEATS_GENEVE is an unknown tunnel type.
#[test]
fn geneve_encap_needs_feature() {
    let mut caps = Caps::agilio();
    caps.geneve = false;
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(6081, vec![]), out(geneve_dev(9))],
    );
    assert_eq!(
        refused(&Nfp::new(caps), &f).0,
        "unsupported offload: unsupported tunnel type in action list"
    );
}

/// action.c:nfp_fl_push_geneve_options (6.1): NFP_FL_MAX_GENEVE_OPT_CNT (64)
/// is checked before the byte budget; empty options are 8 bytes each, so
/// the byte budget (32) trips first in practice.
#[test]
fn geneve_push_budget_trips_before_count() {
    let opts: Vec<GeneveOpt> = (0..5)
        .map(|_| GeneveOpt {
            class: 1,
            typ: 1,
            value: vec![],
            mask: vec![],
        })
        .collect();
    let f = flower(
        repr(1),
        ipv4_key(),
        vec![tunnel_set(6081, opts), out(geneve_dev(9))],
    );
    assert_eq!(
        refused(&nfp(), &f).0,
        "unsupported offload: maximum allowed action list size exceeded at push geneve options"
    );
}

/// action.c:nfp_flower_loop_action / nfp_flower_meter_action (6.1): the
/// per-action NFP_FL_MAX_A_SIZ checks of push vlan, pop vlan, tunnel encap
/// and meter.
#[test]
fn per_action_size_checks() {
    // 151 outputs = 1208 bytes: 8 left.
    let full = || -> Vec<TcAction> { (0..151).map(|i| out(repr(10 + i))).collect() };
    // Pop (4) fits in the 8 bytes left; a push (8) after it does not.
    let mut v = full();
    v.push(TcAction::VlanPop);
    assert_eq!(nfp().check(&flower(repr(1), ipv4_key(), v)), Ok(()));
    let mut v = full();
    v.push(TcAction::VlanPush {
        tpid: 0x8100,
        vid: 1,
        prio: 0,
    });
    v.push(TcAction::VlanPop);
    assert_eq!(
        refused(&nfp(), &flower(repr(1), ipv4_key(), v)).0,
        "unsupported offload: maximum allowed action list size exceeded at pop vlan"
    );
    let mut v = full();
    v.push(TcAction::Police { meter: 1 });
    v.push(TcAction::Police { meter: 2 });
    assert_eq!(
        refused(&nfp(), &flower(repr(1), ipv4_key(), v)),
        (
            "unsupported offload:meter action size beyond the allowed maximum".to_string(),
            METER_ACTION
        )
    );
    let mut v = full();
    v.push(tunnel_set(4789, vec![]));
    assert_eq!(
        refused(&nfp(), &flower(repr(1), ipv4_key(), v)).0,
        "unsupported offload: maximum allowed action list size exceeded at tunnel encap"
    );
    let mut v = full();
    v.push(TcAction::VlanPop);
    v.push(TcAction::VlanPush {
        tpid: 0x8100,
        vid: 1,
        prio: 0,
    });
    assert_eq!(
        refused(&nfp(), &flower(repr(1), ipv4_key(), v)).0,
        "unsupported offload: maximum allowed action list size exceeded at push vlan"
    );
}

fn internal_out() -> TcAction {
    TcAction::Mirred {
        port: port(4, PortKind::Internal),
        ingress: true,
    }
}

fn pre_tun_key() -> DpMatch {
    DpMatch {
        eth_type: Masked::exact(0x0800),
        eth_dst: Masked::exact([2, 0, 0, 0, 0, 4]),
        eth_src: Masked::exact([2, 0, 0, 0, 0, 5]),
        ..DpMatch::default()
    }
}

/// offload.c:nfp_flower_validate_pre_tun_rule (6.1): each match and action
/// requirement of a pre-tunnel rule.
#[test]
fn pre_tunnel_rule_requirements() {
    let pre_tun = |k: DpMatch, acts: Vec<TcAction>| refused(&nfp(), &flower(repr(1), k, acts));
    let mut k = pre_tun_key();
    k.eth_src = Masked::default();
    k.eth_dst = Masked::default();
    assert_eq!(
        pre_tun(k, vec![internal_out()]).0,
        "unsupported pre-tunnel rule: MAC fields match required"
    );
    let k = DpMatch {
        eth_type: Masked::exact(0x8847),
        ..pre_tun_key()
    };
    assert_eq!(
        pre_tun(k, vec![internal_out()]).0,
        "unsupported pre-tunnel rule: match on ipv4/ipv6 eth_type must be present"
    );
    let mut k = pre_tun_key();
    k.eth_dst.mask = [0xff, 0xff, 0xff, 0, 0, 0];
    assert_eq!(
        pre_tun(k, vec![internal_out()]).0,
        "unsupported pre-tunnel rule: dest MAC field must not be masked"
    );
    let mut k = pre_tun_key();
    k.eth_src = Masked::default();
    assert_eq!(
        pre_tun(k, vec![internal_out()]).0,
        "unsupported pre-tunnel rule: source MAC field must not be masked"
    );
    let mut k = pre_tun_key();
    k.ipv4_dst = Masked::exact(1);
    assert_eq!(
        pre_tun(k, vec![internal_out()]).0,
        "unsupported pre-tunnel rule: only flags and proto can be matched in ip header"
    );
    let mut k = pre_tun_key();
    k.vlans = vec![VlanMatch {
        tpid: 0x8100,
        tci: Masked::exact(0x1000 | 3),
    }];
    assert_eq!(
        pre_tun(k.clone(), vec![internal_out()]).0,
        "unsupported pre-tunnel rule: match on VLAN must have VLAN pop as first action"
    );
    assert_eq!(
        nfp().check(&flower(repr(1), k, vec![TcAction::VlanPop, internal_out()])),
        Ok(())
    );
    assert_eq!(
        pre_tun(
            pre_tun_key(),
            vec![TcAction::Police { meter: 1 }, internal_out()]
        )
        .0,
        "unsupported pre-tunnel rule: non egress action detected where egress was expected"
    );
    assert_eq!(
        pre_tun(pre_tun_key(), vec![internal_out(), internal_out()]).0,
        "unsupported offload: pre-tunnel rules require single egress dev and ptype HOST action"
    );
    let mut caps = Caps::agilio();
    caps.pre_tun_rules = false;
    caps.decap_v2 = false;
    assert_eq!(
        refused(
            &Nfp::new(caps),
            &flower(repr(1), pre_tun_key(), vec![internal_out()])
        )
        .0,
        "unsupported offload: pre-tunnel rules not supported in loaded firmware"
    );
}

/// offload.c:nfp_flower_add_offload (6.1): the firmware flow table (GUESS
/// capacity), reached before the stats contexts when set smaller.
#[test]
fn flow_table_full() {
    let mut caps = Caps::agilio();
    caps.flow_table = 1;
    let mut n = Nfp::new(caps);
    let f = flower(repr(1), ipv4_key(), vec![out(repr(2))]);
    n.reserve(&f).unwrap();
    let e = n.reserve(&f).unwrap_err();
    assert_eq!((e.stage, e.source_fn), (Stage::Resource, OFFLOAD_ADD));
    assert_eq!(n.resources()["stats_contexts"].used, 1);
}

/// offload.c:offload_pre_check (6.1): "Allow special case where CT match
/// is all 0" — OVS's ct_state=-trk without a ct action on chain 0 (flower
/// stores the key masked) passes; a non-zero ct match there does not.
#[test]
fn an_all_zero_ct_match_passes_the_pre_check() {
    let mut k = ipv4_key();
    k.ct_state = Masked {
        value: 0,
        mask: cs::TRACKED,
    };
    let f = flower(repr(1), k.clone(), vec![out(repr(2))]);
    assert_eq!(nfp().check(&f), Ok(()));
    k.ct_state.value = cs::TRACKED;
    k.ct_state.mask = cs::TRACKED | cs::NEW;
    k.ct_state.value |= cs::NEW;
    let f = flower(repr(1), k, vec![out(repr(2))]);
    assert_eq!(refused(&nfp(), &f).1, PRE_CHECK);
}

/// conntrack.c:nfp_fl_ct_handle_post_ct (6.1): a post_ct flow may not
/// redirect to an OVS internal port.
#[test]
fn a_post_ct_flow_to_an_internal_port_is_refused() {
    let mut f = post_ct(Masked::exact(5));
    f.actions = vec![TcAction::Mirred {
        port: port(3, PortKind::Internal),
        ingress: true,
    }];
    assert_eq!(
        refused(&nfp(), &f),
        (
            "unsupported offload: out port is openvswitch internal port".to_string(),
            POST_CT
        )
    );
}
