//! Property tests over arbitrary flows: no input makes any stage panic, a
//! refused flow takes nothing, and releasing every admitted flow gives
//! every resource back, for every profile. The seed is printed by proptest
//! on failure (scripts/test.sh fixes PROPTEST_RNG_SEED).

use nicflow_hwprofile::model::*;
use nicflow_hwprofile::plan::Nic;
use nicflow_hwprofile::Profile;
use proptest::prelude::*;

fn masked32() -> impl Strategy<Value = Masked<u32>> {
    prop_oneof![
        Just(Masked::default()),
        any::<u32>().prop_map(Masked::exact),
        (any::<u32>(), any::<u32>()).prop_map(|(v, m)| Masked {
            value: v & m,
            mask: m
        }),
    ]
}

fn masked16() -> impl Strategy<Value = Masked<u16>> {
    prop_oneof![
        Just(Masked::default()),
        any::<u16>().prop_map(Masked::exact),
        (any::<u16>(), any::<u16>()).prop_map(|(v, m)| Masked {
            value: v & m,
            mask: m
        }),
    ]
}

fn masked8() -> impl Strategy<Value = Masked<u8>> {
    prop_oneof![
        Just(Masked::default()),
        any::<u8>().prop_map(Masked::exact),
        (any::<u8>(), any::<u8>()).prop_map(|(v, m)| Masked {
            value: v & m,
            mask: m
        }),
    ]
}

fn ports() -> Vec<Port> {
    let p = |no: u32, kind: PortKind| Port {
        no,
        name: format!("p{no}"),
        kind,
    };
    vec![
        p(1, PortKind::Representor),
        p(2, PortKind::Representor),
        p(3, PortKind::Uplink),
        p(
            4,
            PortKind::Tunnel {
                tunnel: TunnelType::Vxlan,
                dst_port: 4789,
            },
        ),
        p(
            5,
            PortKind::Tunnel {
                tunnel: TunnelType::Geneve,
                dst_port: 6081,
            },
        ),
        p(6, PortKind::Internal),
        p(
            7,
            PortKind::Other {
                what: "tap port".into(),
            },
        ),
    ]
}

fn action() -> impl Strategy<Value = DpAction> {
    prop_oneof![
        (1u32..9).prop_map(|port| DpAction::Output { port }),
        (any::<u32>(), any::<u16>()).prop_map(|(id, dst)| DpAction::SetTunnel(TunnelSet {
            tun_id: u64::from(id & 0xff_ffff),
            ipv4_src: 0xc612_1402,
            ipv4_dst: 0xc612_1401,
            tp_dst: if dst % 2 == 0 { 4789 } else { 6081 },
            flags: 4,
            ttl: 64,
            ..TunnelSet::default()
        })),
        (masked32(), masked8()).prop_map(|(dst, ttl)| DpAction::Set(SetHeader::Ipv4 {
            src: Masked::default(),
            dst,
            tos: Masked::default(),
            ttl
        })),
        masked16().prop_map(|dst| DpAction::Set(SetHeader::Tcp {
            src: Masked::default(),
            dst
        })),
        Just(DpAction::Set(SetHeader::Eth {
            src: Masked::exact([2, 0, 0, 0, 0, 1]),
            dst: Masked::default()
        })),
        Just(DpAction::Set(SetHeader::Arp)),
        any::<u16>().prop_map(|tci| DpAction::PushVlan {
            tpid: 0x8100,
            tci: tci | 0x1000
        }),
        Just(DpAction::PopVlan),
        (any::<u16>(), any::<bool>(), any::<bool>()).prop_map(|(zone, commit, nat)| {
            DpAction::Ct(CtAction {
                zone,
                commit,
                force: false,
                mark: None,
                label: None,
                nat: nat.then_some(NatKind::Dst),
                helper: None,
            })
        }),
        Just(DpAction::CtClear),
        (0u32..5).prop_map(|id| DpAction::Recirc { id }),
        (1u32..4, any::<bool>()).prop_map(|(id, drop_band)| DpAction::Meter { id, drop_band }),
        Just(DpAction::Userspace),
        Just(DpAction::Hash),
    ]
}

prop_compose! {
    fn flow()(
        recirc_id in 0u32..4,
        in_port in 1u32..9,
        eth_type in prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x0806), any::<u16>()],
        nw_proto in prop_oneof![Just(6u8), Just(17), Just(1), Just(58), Just(132), any::<u8>()],
        ipv4_dst in masked32(),
        tp_dst in masked16(),
        tp_src in masked16(),
        tcp_flags in masked16(),
        nw_frag in masked8(),
        nw_ttl in masked8(),
        ct_state in (any::<u8>(), any::<u8>()),
        ct_zone in masked16(),
        vlan in prop::option::of(masked16()),
        tunnel in prop::option::of((any::<u32>(), masked16())),
        pkt_mark in masked32(),
        actions in prop::collection::vec(action(), 0..20),
    ) -> DpFlow {
        let (sv, sm) = ct_state;
        DpFlow {
            matching: DpMatch {
                recirc_id,
                in_port,
                eth_type: Masked::exact(eth_type),
                nw_proto: Masked { value: nw_proto, mask: if nw_proto % 2 == 0 { 0xff } else { 0 } },
                ipv4_dst,
                tp_dst,
                tp_src,
                tcp_flags,
                nw_frag,
                nw_ttl,
                ct_state: Masked { value: u32::from(sv & sm), mask: u32::from(sm) },
                ct_zone,
                pkt_mark,
                vlans: vlan.map(|tci| vec![VlanMatch { tpid: 0x8100, tci }]).unwrap_or_default(),
                tunnel: tunnel.map(|(vni, tp)| TunnelMatch {
                    tun_id: Masked::exact(u64::from(vni & 0xff_ffff)),
                    ipv4_src: Masked::exact(0xc612_1401),
                    ipv4_dst: Masked::exact(0xc612_1402),
                    tp_dst: tp,
                    flags: Masked { value: 4, mask: 7 },
                    ..TunnelMatch::default()
                }),
                ..DpMatch::default()
            },
            actions,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_flow_panics_and_every_resource_comes_back(flows in prop::collection::vec(flow(), 1..40)) {
        let ports = ports();
        for p in Profile::ALL {
            let mut nic = Nic::new(p);
            let before = nic.resources();
            let mut held = Vec::new();
            for f in &flows {
                let snapshot = nic.resources();
                match nic.admit(f, &ports) {
                    Ok(tc) => held.push(tc),
                    Err(r) => {
                        prop_assert!(!r.reason.is_empty(), "{p:?}: empty reason from {}", r.source_fn);
                        prop_assert!(!r.source_fn.is_empty());
                        prop_assert_eq!(&nic.resources(), &snapshot, "{:?}: a refusal took resources ({})", p, r.reason);
                    }
                }
            }
            for tc in held.iter().rev() {
                nic.release(tc);
            }
            prop_assert_eq!(&nic.resources(), &before, "{:?}: resources not given back", p);
        }
    }
}
