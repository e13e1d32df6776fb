//! The TC datapath (`bpf/tc_dp.c`: the shared `dp_core.h`/`dp_exec.h` at TC
//! ingress) in the real kernel. Needs root (skipped with a message
//! otherwise).
//!
//! * `verifier_accepts_tc_dp`: both programs of the object load.
//! * `differential_test_run_matches_userspace_executor`: the XDP engine's
//!   cases (`common::dp::cases`), installed through `encode_tc`, each frame
//!   through `BPF_PROG_TEST_RUN` with an skb context: verdict and output
//!   frame equal the userspace executor's, checksums valid, counters
//!   counted. The cases the TC encoder refuses are listed with their
//!   reasons, so a refusal cannot creep in silently.
//! * `gso_super_frames_count_as_their_segments`: an skb marked GSO is
//!   forwarded whole and counted as `gso_segs` packets.
//! * `misses_go_to_the_upcall_device`: no flow, unparsed frames and failed
//!   pre-checks are redirected to the port's upcall interface untouched
//!   (the next program on the hook without one, as for frames of
//!   interfaces that are not ports).
//!
//! Every test runs in a thread with its own network namespace (names
//! carry the `nftc` prefix).

mod common;

use common::dp::*;
use common::must;
use nicflow::datapath::DpAction;
use nicflow::offload::xdp::{encode_tc, pack, EngineKind, XdpAction, XdpEngine, XdpEngineConfig};
use nicflow_flow::{extract, FlowKey, Match};
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use nicflow_packet::tcp::{FLAG_ACK, FLAG_PSH};
use std::time::Duration;

/// TC_ACT_UNSPEC (tcx: TCX_NEXT): the next program on the hook decides.
const TC_ACT_NEXT: u32 = u32::MAX;
const TC_ACT_SHOT: u32 = 2;
const TC_ACT_REDIRECT: u32 = 7;

fn skip() -> bool {
    common::dp::skip("TC")
}

fn load(cfg: XdpEngineConfig) -> XdpEngine {
    common::dp::load(EngineKind::Tc, cfg)
}

fn userspace(frame: &[u8], actions: &[DpAction]) -> (u32, Vec<u8>) {
    userspace_verdict(frame, actions, TC_ACT_REDIRECT, TC_ACT_SHOT)
}

#[test]
fn verifier_accepts_tc_dp() {
    if skip() {
        return;
    }
    let e = load(XdpEngineConfig::default());
    eprintln!(
        "tc_dp: verifier accepted, {} instructions processed (kernel {})",
        e.verified_insns()
            .map_or("?".to_string(), |n| n.to_string()),
        must(&["uname", "-r"]).trim()
    );
    assert_eq!(e.kind(), EngineKind::Tc);
}

#[test]
fn differential_test_run_matches_userspace_executor() {
    if skip() {
        return;
    }
    in_netns(|| {
        veth("nftc-in", "nftc-inp");
        veth("nftc-o2", "nftc-o2p");
        veth("nftc-o3", "nftc-o3p");
        let in_if = ifindex("nftc-in");
        let mut e = load(XdpEngineConfig::default());
        e.set_port_upcall(in_if, IN_PORT, 0).unwrap();
        e.set_tx_port(0, ifindex("nftc-o2")).unwrap();
        e.set_tx_port(1, ifindex("nftc-o3")).unwrap();
        let all = cases();
        let keys: Vec<FlowKey> = all
            .iter()
            .map(|c| {
                let mut k = FlowKey::default();
                extract(&c.frame, IN_PORT, &mut k).unwrap();
                k
            })
            .collect();
        let mut refused = Vec::new();
        let mut run = Vec::new();
        let mut vlan_moves = Vec::new();
        for (i, c) in all.iter().enumerate() {
            match encode_tc(&keys[i], &c.mask, &c.actions, &ports()) {
                // BPF_PROG_TEST_RUN returns the frame's bytes only, and the
                // VLAN helpers keep the outer tag in skb metadata: these
                // cases are checked on real veths (tc_lab.rs) instead.
                Ok(_)
                    if c.actions
                        .iter()
                        .any(|a| matches!(a, DpAction::PushVlan { .. } | DpAction::PopVlan)) =>
                {
                    vlan_moves.push(c.name)
                }
                Ok(enc) => run.push((i, e.install(&enc).unwrap())),
                Err(err) => refused.push((c.name, err.reason)),
            }
        }
        // Only ARP-rewriting cases stay in userspace.
        for (name, reason) in &refused {
            assert!(
                name.starts_with("arp") && *reason == "tc:arp-rewrite",
                "{name}: refused with {reason}"
            );
        }
        assert!(vlan_moves.len() >= 3, "{vlan_moves:?}");
        assert!(
            run.len() >= 10,
            "{} cases ran, refused: {refused:?}",
            run.len()
        );
        for round in 1..=2u64 {
            for (i, h) in &run {
                let c = &all[*i];
                // The frames of the refused cases must not hit a flow of
                // another case (the cases' masks are disjoint per frame).
                for (j, k) in keys.iter().enumerate() {
                    assert_eq!(Match::new(keys[*i], c.mask).matches(k), *i == j);
                }
                let (verdict, out) = e.test_run(&c.frame, in_if, 0).unwrap();
                let (want_verdict, want) = userspace(&c.frame, &c.actions);
                assert_eq!(verdict, want_verdict, "{}: verdict", c.name);
                assert_eq!(out, want, "{}: output frame differs from userspace", c.name);
                assert!(all_checksums_valid(&out), "{}: checksums", c.name);
                let n = e.counters(h).unwrap();
                assert_eq!(n.packets, round, "{}: packets", c.name);
                assert_eq!(n.bytes, round * c.frame.len() as u64, "{}: bytes", c.name);
                assert!(n.idle.unwrap() < Duration::from_secs(5));
            }
        }
        let s = e.stats().unwrap();
        let n = run.len() as u64 * 2;
        assert_eq!((s.hit, s.aborted, s.punt), (n, 0, 0));
        eprintln!(
            "tc_dp differential: {} cases equal to userspace, {} refused: {refused:?}, \
             {} with VLAN push/pop left to tc_lab: {vlan_moves:?}",
            run.len(),
            refused.len(),
            vlan_moves.len()
        );
    });
}

#[test]
fn gso_super_frames_count_as_their_segments() {
    if skip() {
        return;
    }
    in_netns(|| {
        veth("nftc-g", "nftc-gp");
        veth("nftc-go", "nftc-gop");
        let in_if = ifindex("nftc-g");
        let mut e = load(XdpEngineConfig::default());
        e.set_port_upcall(in_if, IN_PORT, 0).unwrap();
        e.set_tx_port(0, ifindex("nftc-go")).unwrap();
        // BPF_PROG_TEST_RUN takes at most about a page of data.
        let payload = vec![0x5a; 2 * 1448];
        let frame = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .tcp(40000, 5201, FLAG_ACK | FLAG_PSH)
            .payload(&payload)
            .build();
        let m = mask(|m| {
            m.nw_proto = 0xff;
            m.nw_dst = u32::MAX;
        });
        let mut k = FlowKey::default();
        extract(&frame, IN_PORT, &mut k).unwrap();
        let acts = [DpAction::SetIpv4Dst(v4(9).into()), DpAction::Output(2)];
        let h = e
            .install(&encode_tc(&k, &m, &acts, &ports()).unwrap())
            .unwrap();
        let (v, out) = e.test_run_gso(&frame, in_if, 0, Some((2, 1448))).unwrap();
        assert_eq!(v, TC_ACT_REDIRECT);
        assert_eq!(out, userspace(&frame, &acts).1, "rewritten whole");
        let n = e.counters(&h).unwrap();
        assert_eq!((n.packets, n.bytes), (2, frame.len() as u64));
    });
}

#[test]
fn misses_go_to_the_upcall_device() {
    if skip() {
        return;
    }
    in_netns(|| {
        veth("nftc-m", "nftc-mp");
        veth("nftc-up", "nftc-upp");
        veth("nftc-x", "nftc-xp");
        let in_if = ifindex("nftc-m");
        let up = ifindex("nftc-up");
        let mut e = load(XdpEngineConfig::default());
        let tcp = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .ttl(1)
            .tcp(1, 2, FLAG_ACK)
            .build();
        // Not a port: the next program's (the port's own tc_upcall).
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (TC_ACT_NEXT, tcp.clone())
        );
        e.set_port_upcall(in_if, IN_PORT, 0).unwrap();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (TC_ACT_NEXT, tcp.clone()),
            "miss without an upcall device"
        );
        e.set_port_upcall(in_if, IN_PORT, up).unwrap();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (TC_ACT_REDIRECT, tcp.clone()),
            "miss"
        );
        // Unparsed (a third tag) and a failed pre-check (dec_ttl at TTL 1,
        // output slot empty) go up untouched too.
        let mut three = FrameBuilder::new(A, B)
            .vlan(1)
            .vlan(2)
            .vlan(3)
            .ipv4(v4(1), v4(2))
            .udp(1, 2)
            .build();
        three.truncate(60);
        assert_eq!(
            e.test_run(&three, in_if, 0).unwrap(),
            (TC_ACT_REDIRECT, three.clone())
        );
        let mut k = FlowKey::default();
        extract(&tcp, IN_PORT, &mut k).unwrap();
        let m = mask(|m| m.nw_proto = 0xff);
        let mut enc = encode_tc(&k, &m, &[DpAction::Output(2)], &ports()).unwrap();
        enc.value = pack(&[XdpAction::DecTtl, XdpAction::Output { slot: 0 }]).unwrap();
        e.install(&enc).unwrap();
        e.set_tx_port(0, ifindex("nftc-x")).unwrap();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (TC_ACT_REDIRECT, tcp.clone()),
            "ttl 1 punted"
        );
        let s = e.stats().unwrap();
        assert_eq!((s.no_port, s.miss, s.unparsed, s.punt), (1, 2, 1, 1));
        let tcp64 = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .ttl(64)
            .tcp(1, 2, FLAG_ACK)
            .build();
        let (v, out) = e.test_run(&tcp64, in_if, 0).unwrap();
        assert_eq!(v, TC_ACT_REDIRECT);
        assert_eq!(out[14 + 8], 63, "forwarded with the TTL decremented");
        e.clear_tx_port(0).unwrap();
        assert_eq!(
            e.test_run(&tcp64, in_if, 0).unwrap(),
            (TC_ACT_REDIRECT, tcp64.clone()),
            "empty output slot: punted, untouched"
        );
        assert_eq!(e.stats().unwrap().punt, 2);
    });
}

/// VXLAN/Geneve in the TC program, through `BPF_PROG_TEST_RUN` with an skb,
/// against the userspace tunnel port and executor on the same frames (as
/// the XDP engine's `tunnel_decap_and_encap_match_userspace`): decap on the
/// underlay (the inner frame looked up in place, the outer header removed
/// with `bpf_skb_adjust_room` only on a hit), encap towards it (outer
/// header, entropy port, VNI, lengths, checksums byte for byte), the outer
/// UDP checksum of an skb that does not vouch for it verified over the
/// bytes, and every frame the program must not finish going up untouched:
/// the probe that asks the skb whether its checksums are pending writes
/// the outer IPv4 ID back when it had to change it.
#[test]
fn tunnel_decap_and_encap_match_userspace() {
    use common::tun::*;
    use nicflow::offload::xdp::layout::{TunRx, TunRxKey, TunTx, TUN_GENEVE, TUN_VXLAN, VNI_ANY};
    use nicflow::offload::xdp::{PortSlots, TunnelSlot};
    if skip() {
        return;
    }
    struct Slots;
    impl PortSlots for Slots {
        fn slot(&self, port: u32) -> Option<u32> {
            (port == 2).then_some(0)
        }
        fn tunnel(&self, port: u32) -> Option<TunnelSlot> {
            match port {
                VX_PORT => Some(TunnelSlot {
                    slot: 3,
                    flow_key: false,
                }),
                GN_PORT => Some(TunnelSlot {
                    slot: 4,
                    flow_key: true,
                }),
                _ => None,
            }
        }
    }
    in_netns(|| {
        veth("nftc-in", "nftc-inp");
        veth("nftc-o2", "nftc-o2p");
        veth("nftc-ul", "nftc-ulp");
        let (in_if, ul_if) = (ifindex("nftc-in"), ifindex("nftc-ul"));
        let mut e = load(XdpEngineConfig::default());
        e.set_port_upcall(in_if, IN_PORT, 0).unwrap();
        e.set_tx_port(0, ifindex("nftc-o2")).unwrap();
        e.set_tx_port(5, ul_if).unwrap();
        e.set_underlay(ul_if, 0, UL_MAC, 1500, 0).unwrap();
        let vx = tunnel_cfg("vxlan", 0x1402, &VX_VNI.to_string());
        let gn = tunnel_cfg("geneve", 0x1403, "flow");
        for (cfg, port, kind, vni) in [
            (&vx, VX_PORT, TUN_VXLAN, VX_VNI),
            (&gn, GN_PORT, TUN_GENEVE, VNI_ANY),
        ] {
            let key = TunRxKey {
                ifindex: ul_if,
                local: u32::from(cfg.local_ip),
                remote: u32::from(cfg.remote_ip),
                vni,
                dst_port: cfg.dst_port,
                pad: 0,
            };
            e.set_tunnel_rx(
                key,
                TunRx {
                    in_port: port,
                    kind,
                },
            )
            .unwrap();
        }
        let tx = |cfg, mtu| TunTx {
            lock: 0,
            valid: 1,
            tx_slot: 5,
            inner_mtu: mtu,
            hdr: nicflow::port::tunnel::header_template(cfg, UL_MAC, REMOTE_MAC).unwrap(),
            pad: 0,
        };
        e.set_tunnel_tx(3, tx(&vx, 1450)).unwrap();
        e.set_tunnel_tx(4, tx(&gn, 1450)).unwrap();

        let pay = b"nicflow tc tunnel differential payload";
        let tcp4 = FrameBuilder::new(A, B)
            .ipv4(v4(0x3c01), v4(0x3c65))
            .tcp(40000, 5201, FLAG_ACK | FLAG_PSH)
            .payload(pay)
            .build();
        let udp6 = FrameBuilder::new(B, A)
            .ipv6(v6(1), v6(2))
            .udp(5000, 53)
            .payload(pay)
            .build();
        let udp6_tagged = FrameBuilder::new(B, A)
            .vlan(0x0064)
            .ipv6(v6(1), v6(2))
            .udp(5000, 53)
            .payload(pay)
            .build();
        let icmp4 = FrameBuilder::new(B, A)
            .ipv4(v4(0x3c65), v4(0x3c01))
            .icmp(0, 0)
            .echo(7, 1)
            .payload(pay)
            .build();
        let wire = |cfg, inner: &[u8], vni| wire_csum(cfg, inner, vni, false);
        // (name, frame, Some((inner, tunnel port, metadata)) for underlay
        // frames, mask, actions)
        type TCase = (
            String,
            Vec<u8>,
            Option<(Vec<u8>, u32, nicflow_packet::buf::TunnelMeta)>,
            nicflow_flow::FlowMask,
            Vec<DpAction>,
        );
        let tun_mask = mask(|m| {
            m.nw_proto = 0xff;
            m.tun_id = u64::MAX;
            m.tun_src = u32::MAX;
        });
        // With an outer UDP checksum (the kernel's vxlan default) on an skb
        // that does not vouch for it (test runs are CHECKSUM_NONE): verified
        // over the bytes; every tail length.
        let mut cases: Vec<TCase> = (0..4u16)
            .map(|n| {
                let inner = FrameBuilder::new(A, B)
                    .ipv4(v4(0x3c01), v4(0x3c65))
                    .udp(30000 + n, 4789)
                    .payload(&vec![0x5a; 1000 + usize::from(n)])
                    .build();
                let mut m = meta(&vx, VX_VNI);
                m.flags |= nicflow_packet::buf::TUN_F_CSUM;
                (
                    format!("csum tail {n}"),
                    wire_csum(&vx, &inner, VX_VNI, true),
                    Some((inner, VX_PORT, m)),
                    mask(|m| {
                        m.nw_proto = 0xff;
                        m.tp_src = 0xffff;
                        m.tun_flags = 0xffff;
                    }),
                    vec![DpAction::Output(2)],
                )
            })
            .collect();
        cases.extend(vec![
            (
                "vxlan decap, tcp, tun_id matched, to a port".into(),
                wire(&vx, &tcp4, VX_VNI),
                Some((tcp4.clone(), VX_PORT, meta(&vx, VX_VNI))),
                tun_mask,
                vec![DpAction::Output(2)],
            ),
            (
                "geneve key=flow decap, icmp, rewrite, to a port".into(),
                wire(&gn, &icmp4, 77),
                Some((icmp4.clone(), GN_PORT, meta(&gn, 77))),
                tun_mask,
                vec![
                    DpAction::SetEthDst([2, 0, 0, 0, 0, 0x33]),
                    DpAction::Output(2),
                ],
            ),
            (
                "vxlan decap, ipv6 (DECAP_L3_IPV6), to a port".into(),
                wire(&vx, &udp6, VX_VNI),
                Some((udp6.clone(), VX_PORT, meta(&vx, VX_VNI))),
                mask(|m| {
                    m.nw_proto = 0xff;
                    m.tun_id = u64::MAX;
                    m.vlan_tci = 0xffff;
                }),
                vec![DpAction::Output(2)],
            ),
            (
                "encap, fixed vxlan key, tcp with rewrites".into(),
                tcp4.clone(),
                None,
                mask(|m| m.nw_proto = 0xff),
                vec![
                    DpAction::SetIpv4Dst(v4(0x3c66).into()),
                    DpAction::SetTpSrc(41000),
                    DpAction::Output(VX_PORT),
                ],
            ),
            (
                "encap, key=flow geneve, set_tunnel, ipv6".into(),
                udp6.clone(),
                None,
                mask(|m| m.nw_proto = 0xff),
                vec![DpAction::SetTunnelId(0x99_0001), DpAction::Output(GN_PORT)],
            ),
            (
                "encap, key=flow geneve without set_tunnel: VNI 0".into(),
                icmp4.clone(),
                None,
                mask(|m| m.nw_proto = 0xff),
                vec![DpAction::Output(GN_PORT)],
            ),
        ]);
        let mut handles = Vec::new();
        for (name, frame, inner, m, actions) in &cases {
            let mut k = FlowKey::default();
            match inner {
                Some((f, port, t)) => {
                    extract(f, *port, &mut k).unwrap();
                    k.tun_id = t.id;
                    k.tun_src = t.src;
                    k.tun_dst = t.dst;
                    k.tun_flags = t.flags;
                }
                None => {
                    extract(frame, IN_PORT, &mut k).unwrap();
                }
            }
            let enc =
                encode_tc(&k, m, actions, &Slots).unwrap_or_else(|err| panic!("{name}: {err}"));
            handles.push(e.install(&enc).unwrap());
        }
        for (i, (name, frame, inner, _, actions)) in cases.iter().enumerate() {
            let (on_if, (uv, uport, uframe, utun)) = match inner {
                Some((f, port, t)) => (
                    ul_if,
                    userspace_on(f, *port, Some(*t), actions, TC_ACT_REDIRECT, TC_ACT_SHOT),
                ),
                None => (
                    in_if,
                    userspace_on(frame, IN_PORT, None, actions, TC_ACT_REDIRECT, TC_ACT_SHOT),
                ),
            };
            let want = match uport {
                VX_PORT => userspace_encap(&vx, &uframe, utun),
                GN_PORT => userspace_encap(&gn, &uframe, utun),
                _ => uframe,
            };
            let (verdict, out) = e.test_run(frame, on_if, 0).unwrap();
            assert_eq!(verdict, uv, "{name}: verdict");
            assert_eq!(out, want, "{name}: output differs from userspace");
            assert!(all_checksums_valid(&out), "{name}: checksums");
            if matches!(uport, VX_PORT | GN_PORT) {
                let d = nicflow_packet::tunnel::parse(&out, |p| match p {
                    4789 => Some(nicflow_packet::tunnel::TunnelKind::Vxlan),
                    6081 => Some(nicflow_packet::tunnel::TunnelKind::Geneve),
                    _ => None,
                })
                .unwrap()
                .unwrap();
                assert!(d.udp_src >= 49152, "{name}: entropy port");
            }
            let c = e.counters(&handles[i]).unwrap();
            assert_eq!(c.packets, 1, "{name}");
            // The inner frame's bytes, as userspace counts on the tunnel port.
            let bytes = inner.as_ref().map_or(frame.len(), |(f, _, _)| f.len());
            assert_eq!(c.bytes, bytes as u64, "{name}: bytes");
        }
        let s = e.stats().unwrap();
        assert_eq!((s.decap, s.encap, s.aborted), (7, 3, 0));

        // Refused for this engine: a flow from a tunnel into a tunnel.
        let mut k = FlowKey::default();
        extract(&tcp4, VX_PORT, &mut k).unwrap();
        let r = encode_tc(&k, &tun_mask, &[DpAction::Output(GN_PORT)], &Slots).unwrap_err();
        assert_eq!(r.reason, "tc:tunnel-to-tunnel");
        // And tagged inner frames (skb->protocol would stay the outer one).
        let vlan_mask = mask(|m| {
            m.nw_proto = 0xff;
            m.vlan_tci = 0xffff;
        });
        let mut k = FlowKey::default();
        extract(&udp6_tagged, VX_PORT, &mut k).unwrap();
        let r = encode_tc(&k, &vlan_mask, &[DpAction::Output(2)], &Slots).unwrap_err();
        assert_eq!(r.reason, "tc:tunnel-inner-vlan");
        let mut k = FlowKey::default();
        extract(&udp6_tagged, IN_PORT, &mut k).unwrap();
        let r = encode_tc(&k, &vlan_mask, &[DpAction::Output(VX_PORT)], &Slots).unwrap_err();
        assert_eq!(r.reason, "tc:tagged-into-tunnel");

        // Frames the program must hand up whole (no upcall device: the next
        // program on the hook), each with a reason of its own.
        let l4 = 14 + 20;
        let mut csum = wire_csum(&vx, &tcp4, VX_VNI, true);
        csum[l4 + 6] ^= 0x12; // a wrong UDP checksum: userspace counts it
        let mut csum_id_ffff = wire_csum(&vx, &tcp4, VX_VNI, true);
        // Outer IPv4 ID 0xffff (header checksum kept right): the probe's
        // write-back must restore it exactly, not as 0x0000.
        {
            let ip = &mut csum_id_ffff[14..34];
            ip[4] = 0xff;
            ip[5] = 0xff;
            ip[10] = 0;
            ip[11] = 0;
            let c = nicflow_packet::checksum::checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            csum_id_ffff[l4 + 6] ^= 0x01;
        }
        let mut critical = wire(&gn, &icmp4, 77);
        critical[l4 + 8 + 1] |= 0x40;
        let mut bad_ip = wire(&vx, &tcp4, VX_VNI);
        bad_ip[14 + 8] = 1; // TTL changed, header checksum not
        let mut not_ours = wire(&vx, &tcp4, VX_VNI);
        not_ours[0..6].copy_from_slice(&[2, 0, 0, 0, 0x0a, 9]);
        let big = FrameBuilder::new(A, B)
            .ipv4(v4(0x3c01), v4(0x3c65))
            .tcp(40000, 5201, FLAG_ACK)
            .payload(&[0u8; 1500])
            .build();
        let untouched: Vec<(&str, Vec<u8>, u32)> = vec![
            ("unknown VNI", wire(&vx, &tcp4, 4243), ul_if),
            ("wrong outer UDP checksum", csum, ul_if),
            (
                "wrong outer UDP checksum, IPv4 ID 0xffff",
                csum_id_ffff,
                ul_if,
            ),
            ("geneve critical bit", critical, ul_if),
            ("bad outer IPv4 checksum", bad_ip, ul_if),
            ("outer destination MAC not the underlay's", not_ours, ul_if),
            (
                "outer frame over the underlay MTU",
                wire(&vx, &big, VX_VNI),
                ul_if,
            ),
            ("over the tunnel MTU", big, in_if),
            ("tagged frame into a tunnel", udp6_tagged.clone(), in_if),
            (
                "tagged frame out of a tunnel",
                wire(&vx, &udp6_tagged, VX_VNI),
                ul_if,
            ),
        ];
        for (name, f, on) in &untouched {
            let (verdict, out) = e.test_run(f, *on, 0).unwrap();
            assert_eq!((verdict, &out), (TC_ACT_NEXT, f), "{name}: not left whole");
        }
        // An unresolved remote: punted, untouched.
        e.set_tunnel_tx(3, TunTx::default()).unwrap();
        let f = &cases[7].1;
        assert!(cases[7].0.starts_with("encap, fixed vxlan key"));
        let (verdict, out) = e.test_run(f, in_if, 0).unwrap();
        assert_eq!((verdict, &out), (TC_ACT_NEXT, f));
        let s = e.stats().unwrap();
        assert_eq!(s.aborted, 0);
    });
}
