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
