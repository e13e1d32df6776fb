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
//!   `batched_counter_read_covers_every_flow`,
//!   `tunnel_decap_and_encap_match_userspace` (VXLAN/Geneve against the
//!   userspace tunnel port; TC also hands on whole a wrong outer checksum
//!   with IPv4 ID 0xffff and tagged frames into or out of a tunnel).
//! * `gso_super_frames_count_as_their_segments`: an skb marked GSO is
//!   forwarded whole and counted as `gso_segs` packets.
//! * `tunnel_flows_the_tc_encoder_refuses`: tunnel to tunnel and tagged
//!   frames into or out of a tunnel stay in userspace, with their reasons.
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

use common::engine::{TC_ACT_REDIRECT, TC_ACT_SHOT};

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

/// Tunnel flows the TC encoder keeps in userspace, with stable reasons:
/// from a tunnel into a tunnel, a tagged inner frame out of a tunnel and a
/// tagged frame into one (`skb->protocol` would stay the outer one). What
/// it does offload is `tunnel_decap_and_encap_match_userspace`'s.
#[test]
fn tunnel_flows_the_tc_encoder_refuses() {
    use common::tun::*;
    let TunFrames {
        tcp4, udp6_tagged, ..
    } = tun_frames();
    let mut k = FlowKey::default();
    extract(&tcp4, VX_PORT, &mut k).unwrap();
    let r = encode_tc(&k, &tun_mask(), &[DpAction::Output(GN_PORT)], &TunSlots).unwrap_err();
    assert_eq!(r.reason, "tc:tunnel-to-tunnel");
    let vlan_mask = mask(|m| {
        m.nw_proto = 0xff;
        m.vlan_tci = 0xffff;
    });
    let mut k = FlowKey::default();
    extract(&udp6_tagged, VX_PORT, &mut k).unwrap();
    let r = encode_tc(&k, &vlan_mask, &[DpAction::Output(2)], &TunSlots).unwrap_err();
    assert_eq!(r.reason, "tc:tunnel-inner-vlan");
    let mut k = FlowKey::default();
    extract(&udp6_tagged, IN_PORT, &mut k).unwrap();
    let r = encode_tc(&k, &vlan_mask, &[DpAction::Output(VX_PORT)], &TunSlots).unwrap_err();
    assert_eq!(r.reason, "tc:tagged-into-tunnel");
}
