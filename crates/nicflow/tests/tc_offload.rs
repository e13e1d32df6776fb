//! The TC datapath (`bpf/tc_dp.c`: the shared `dp_core.h`/`dp_exec.h` at TC
//! ingress) in the real kernel. Needs root (skipped with a message
//! otherwise).
//!
//! * The behaviours both kernel engines have, one body each in
//!   `common::engine` run here on the TC engine ([`engine_tests!`]):
//!   `verifier_accepts_the_program_and_map_sizes`,
//!   `meters_match_the_userspace_datapath`,
//!   `differential_test_run_matches_userspace_executor` (the cases the TC
//!   encoder refuses must be ARP rewrites; VLAN push/pop cases are checked
//!   on real veths in `tc_lab.rs`, as the test run does not return skb
//!   metadata), `misses_go_to_userspace_untouched` (to the port's upcall
//!   device; the next program on the hook without one),
//!   `drops_are_counted_by_reason_in_the_kernel`,
//!   `full_maps_refuse_installs_and_traffic_still_reaches_userspace`,
//!   `counters_off_leaves_packets_and_bytes_but_not_last_used`,
//!   `batched_counter_read_covers_every_flow`.
//! * `gso_super_frames_count_as_their_segments`: an skb marked GSO is
//!   forwarded whole and counted as `gso_segs` packets.
//! * `tunnel_decap_and_encap_match_userspace`: VXLAN/Geneve in the TC
//!   program against the userspace tunnel port.
//!
//! Every test runs in a thread with its own network namespace (names
//! carry the `nftc` prefix).

mod common;

use common::dp::*;
use nicflow::datapath::DpAction;
use nicflow::offload::kernel::{encode_tc, EngineKind, XdpEngine, XdpEngineConfig};
use nicflow_flow::{extract, FlowKey};
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::tcp::{FLAG_ACK, FLAG_PSH};

use common::engine::{TC_ACT_NEXT, TC_ACT_REDIRECT, TC_ACT_SHOT};

// The behaviours both kernel engines have: one body each in
// `common::engine`, run here on the TC engine.
crate::engine_tests!(common::engine::TC);

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
    use nicflow::offload::kernel::layout::TunTx;
    if skip() {
        return;
    }
    in_netns(|| {
        veth("nftc-in", "nftc-inp");
        veth("nftc-o2", "nftc-o2p");
        veth("nftc-ul", "nftc-ulp");
        let (in_if, ul_if) = (ifindex("nftc-in"), ifindex("nftc-ul"));
        let mut e = load(XdpEngineConfig::default());
        e.set_port_upcall(in_if, IN_PORT, 0).unwrap();
        e.set_tx_port(0, ifindex("nftc-o2")).unwrap();
        let (vx, gn) = set_up_tunnels(&mut e, ul_if);

        let frames = tun_frames();
        let TunFrames {
            tcp4,
            udp6,
            udp6_tagged,
            ..
        } = &frames;
        let wire = |cfg, inner: &[u8], vni| wire_csum(cfg, inner, vni, false);
        let tun_mask = tun_mask();
        // With an outer UDP checksum on an skb that does not vouch for it
        // (test runs are CHECKSUM_NONE): verified over the bytes.
        let mut cases = csum_tail_cases(&vx);
        cases.extend(shared_cases(&vx, &gn, &frames));
        cases.extend(vec![
            TunCase {
                name: "vxlan decap, ipv6 (DECAP_L3_IPV6), to a port".into(),
                frame: wire(&vx, udp6, VX_VNI),
                inner: Some((udp6.clone(), VX_PORT, meta(&vx, VX_VNI))),
                mask: mask(|m| {
                    m.nw_proto = 0xff;
                    m.tun_id = u64::MAX;
                    m.vlan_tci = 0xffff;
                }),
                actions: vec![DpAction::Output(2)],
            },
            TunCase {
                name: "encap, key=flow geneve, set_tunnel, ipv6".into(),
                frame: udp6.clone(),
                inner: None,
                mask: mask(|m| m.nw_proto = 0xff),
                actions: vec![DpAction::SetTunnelId(0x99_0001), DpAction::Output(GN_PORT)],
            },
        ]);
        check_against_userspace(
            &mut e,
            &cases,
            |k, m, a| encode_tc(k, m, a, &TunSlots),
            in_if,
            ul_if,
            (&vx, &gn),
            TC_ACT_REDIRECT,
            TC_ACT_SHOT,
        );
        let s = e.stats().unwrap();
        assert_eq!((s.decap, s.encap, s.aborted), (7, 3, 0));

        // Refused for this engine: a flow from a tunnel into a tunnel.
        let mut k = FlowKey::default();
        extract(tcp4, VX_PORT, &mut k).unwrap();
        let r = encode_tc(&k, &tun_mask, &[DpAction::Output(GN_PORT)], &TunSlots).unwrap_err();
        assert_eq!(r.reason, "tc:tunnel-to-tunnel");
        // And tagged inner frames (skb->protocol would stay the outer one).
        let vlan_mask = mask(|m| {
            m.nw_proto = 0xff;
            m.vlan_tci = 0xffff;
        });
        let mut k = FlowKey::default();
        extract(udp6_tagged, VX_PORT, &mut k).unwrap();
        let r = encode_tc(&k, &vlan_mask, &[DpAction::Output(2)], &TunSlots).unwrap_err();
        assert_eq!(r.reason, "tc:tunnel-inner-vlan");
        let mut k = FlowKey::default();
        extract(udp6_tagged, IN_PORT, &mut k).unwrap();
        let r = encode_tc(&k, &vlan_mask, &[DpAction::Output(VX_PORT)], &TunSlots).unwrap_err();
        assert_eq!(r.reason, "tc:tagged-into-tunnel");

        // Frames the program must hand up whole (no upcall device: the next
        // program on the hook), each with a reason of its own.
        let mut untouched: Vec<(&str, Vec<u8>, u32)> =
            underlay_frames_left_whole(&vx, &gn, &tun_frames())
                .into_iter()
                .map(|(n, f)| (n, f, ul_if))
                .collect();
        // A wrong checksum with the outer IPv4 ID 0xffff (header checksum
        // kept right): the probe's write-back must restore it exactly, not
        // as the 0x0000 a one's-complement round trip gives.
        let mut csum_id_ffff = wire_csum(&vx, tcp4, VX_VNI, true);
        {
            let ip = &mut csum_id_ffff[14..34];
            ip[4] = 0xff;
            ip[5] = 0xff;
            ip[10] = 0;
            ip[11] = 0;
            let c = nicflow_packet::checksum::checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            csum_id_ffff[14 + 20 + 6] ^= 0x01;
        }
        untouched.extend([
            (
                "wrong outer UDP checksum, IPv4 ID 0xffff",
                csum_id_ffff,
                ul_if,
            ),
            ("over the tunnel MTU", big_frame(), in_if),
            ("tagged frame into a tunnel", udp6_tagged.clone(), in_if),
            (
                "tagged frame out of a tunnel",
                wire(&vx, udp6_tagged, VX_VNI),
                ul_if,
            ),
        ]);
        for (name, f, on) in &untouched {
            let (verdict, out) = e.test_run(f, *on, 0).unwrap();
            assert_eq!((verdict, &out), (TC_ACT_NEXT, f), "{name}: not left whole");
        }
        // An unresolved remote: punted, untouched.
        e.set_tunnel_tx(3, TunTx::default()).unwrap();
        let f = &cases
            .iter()
            .find(|c| c.name.starts_with("encap, fixed vxlan key"))
            .unwrap()
            .frame;
        let (verdict, out) = e.test_run(f, in_if, 0).unwrap();
        assert_eq!((verdict, &out), (TC_ACT_NEXT, f));
        let s = e.stats().unwrap();
        assert_eq!(s.aborted, 0);
    });
}
