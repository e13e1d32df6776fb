//! One test body per behaviour of the kernel engines, run on every engine,
//! as OVS's `tests/system-traffic.at` runs one body on every datapath.
//!
//! An [`Engine`] says what differs between the TC program (`tc_dp.c`) and
//! the XDP one (`xdp_dp.c`) as data: its verdicts, its encoder, how an
//! interface becomes one of its ports, which cases it refuses and why.
//! The bodies here hold the behaviour; `tc_offload.rs` and `xdp_offload.rs`
//! are [`engine_tests!`](crate::engine_tests) with their engine (one
//! `#[test]` per behaviour, so a failure names the engine by its test
//! binary) plus the tests of what only one engine does.
//!
//! Every body runs in a thread with its own network namespace
//! ([`super::dp::in_netns`]); interface names carry the engine's prefix.

use super::dp::*;
use super::must;
use super::tun::*;
use nicflow::datapath::{DpAction, DropReason};
use nicflow::offload::kernel::encode::PortSlots;
use nicflow::offload::kernel::{
    pack, EncodedFlow, EngineKind, NotOffloadable, XdpAction, XdpEngine, XdpEngineConfig,
};
use nicflow::port::tunnel::TunnelConfig;
use nicflow_flow::{extract, FlowKey, FlowMask, Match};
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use nicflow_packet::tcp::FLAG_ACK;
use std::collections::HashMap;
use std::time::{Duration, Instant};

type Encode =
    fn(&FlowKey, &FlowMask, &[DpAction], &dyn PortSlots) -> Result<EncodedFlow, NotOffloadable>;

/// A frame a kernel engine must hand on whole: (why, frame, sent on the
/// underlay rather than the input port).
pub type Untouched = (&'static str, Vec<u8>, bool);

/// What differs between the kernel engines, as data.
#[derive(Clone, Copy)]
pub struct Engine {
    pub kind: EngineKind,
    /// For messages and skips: `TC`, `XDP`.
    pub name: &'static str,
    /// Interface name prefix of this engine's tests.
    pub ifp: &'static str,
    /// The verdict of a frame sent to an output port.
    pub redirect: u32,
    /// The verdict of a dropped frame.
    pub drop: u32,
    /// The verdict of a frame handed on whole when no receiver for
    /// userspace is set (TC: the next program on the hook; XDP: the stack).
    pub pass: u32,
    pub encode: Encode,
    /// Make `ifindex` the engine's port `in_port`, with no receiver for
    /// misses.
    pub add_port: fn(&mut XdpEngine, u32, u32),
    /// Whether a case's output can be checked through
    /// `BPF_PROG_TEST_RUN` (TC keeps the outer VLAN tag in skb metadata,
    /// which the test run does not return: those cases are checked on real
    /// veths in `tc_lab.rs`).
    pub test_run_sees: fn(&[DpAction]) -> bool,
    /// Whether refusing the differential case `name` with `reason` is this
    /// engine's documented limit.
    pub may_refuse: fn(&str, &str) -> bool,
    /// Fewest differential cases this engine leaves to other tests
    /// (`test_run_sees` false): a floor, so the list cannot silently
    /// empty.
    pub min_not_test_run: usize,
    /// Tunnel cases only this engine runs in
    /// [`tunnel_decap_and_encap_match_userspace`], beyond the shared ones.
    pub tun_cases: fn(&TunnelConfig, &TunnelConfig, &TunFrames) -> Vec<TunCase>,
    /// Frames only this engine must also hand on whole: (why, frame, sent
    /// on the underlay rather than the input port).
    pub tun_untouched: fn(&TunnelConfig, &TunFrames) -> Vec<Untouched>,
    /// Decapsulations and encapsulations the tunnel cases make, and punts
    /// of the frames left whole.
    pub tun_counts: (u64, u64, u64),
}

/// `TC_ACT_UNSPEC` (tcx: `TCX_NEXT`): the next program on the hook decides.
pub const TC_ACT_NEXT: u32 = u32::MAX;
pub const TC_ACT_SHOT: u32 = 2;
pub const TC_ACT_REDIRECT: u32 = 7;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_REDIRECT: u32 = 4;

pub const TC: Engine = Engine {
    kind: EngineKind::Tc,
    name: "TC",
    ifp: "nftc",
    redirect: TC_ACT_REDIRECT,
    drop: TC_ACT_SHOT,
    pass: TC_ACT_NEXT,
    encode: nicflow::offload::kernel::encode_tc,
    add_port: |e, ifindex, in_port| e.set_port_upcall(ifindex, in_port, 0).unwrap(),
    test_run_sees: |acts| {
        !acts
            .iter()
            .any(|a| matches!(a, DpAction::PushVlan { .. } | DpAction::PopVlan))
    },
    // Only ARP-rewriting cases stay in userspace.
    may_refuse: |name, reason| name.starts_with("arp") && reason == "tc:arp-rewrite",
    min_not_test_run: 3,
    tun_cases: tc_tun_cases,
    tun_untouched: tc_tun_untouched,
    tun_counts: (7, 3, 4),
};

/// TC: decap of IPv6 to a port, encap of IPv6 by the `key=flow` Geneve
/// port.
fn tc_tun_cases(vx: &TunnelConfig, _gn: &TunnelConfig, f: &TunFrames) -> Vec<TunCase> {
    vec![
        TunCase {
            name: "vxlan decap, ipv6 (DECAP_L3_IPV6), to a port".into(),
            frame: wire_csum(vx, &f.udp6, VX_VNI, false),
            inner: Some((f.udp6.clone(), VX_PORT, meta(vx, VX_VNI))),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.tun_id = u64::MAX;
                m.vlan_tci = 0xffff;
            }),
            actions: vec![DpAction::Output(2)],
        },
        TunCase {
            name: "encap, key=flow geneve, set_tunnel, ipv6".into(),
            frame: f.udp6.clone(),
            inner: None,
            mask: mask(|m| m.nw_proto = 0xff),
            actions: vec![DpAction::SetTunnelId(0x99_0001), DpAction::Output(GN_PORT)],
        },
    ]
}

/// TC also hands on whole: a wrong outer UDP checksum with the outer IPv4
/// ID 0xffff (the probe that asks the skb whether its checksums are pending
/// must write the ID back exactly, not as the 0x0000 a one's-complement
/// round trip gives), and tagged frames into or out of a tunnel
/// (`skb->protocol` would stay the outer one).
fn tc_tun_untouched(vx: &TunnelConfig, f: &TunFrames) -> Vec<Untouched> {
    let mut csum_id_ffff = wire_csum(vx, &f.tcp4, VX_VNI, true);
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
    vec![
        (
            "wrong outer UDP checksum, IPv4 ID 0xffff",
            csum_id_ffff,
            true,
        ),
        ("tagged frame into a tunnel", f.udp6_tagged.clone(), false),
        (
            "tagged frame out of a tunnel",
            wire_csum(vx, &f.udp6_tagged, VX_VNI, false),
            true,
        ),
    ]
}

pub const XDP: Engine = Engine {
    kind: EngineKind::Xdp,
    name: "XDP",
    ifp: "nfxo",
    redirect: XDP_REDIRECT,
    drop: XDP_DROP,
    pass: XDP_PASS,
    encode: nicflow::offload::kernel::encode,
    add_port: |e, ifindex, in_port| e.set_port(ifindex, in_port).unwrap(),
    test_run_sees: |_| true,
    may_refuse: |_, _| false,
    min_not_test_run: 0,
    tun_cases: xdp_tun_cases,
    tun_untouched: |_, _| Vec::new(),
    tun_counts: (7, 4, 3),
};

/// XDP: decap re-encapsulated by the `key=flow` Geneve port (tunnel to
/// tunnel), encap of a tagged IPv6 frame with its tag popped.
fn xdp_tun_cases(vx: &TunnelConfig, _gn: &TunnelConfig, f: &TunFrames) -> Vec<TunCase> {
    vec![
        TunCase {
            name: "vxlan decap, re-encapsulated by the key=flow geneve port (VNI from the key)"
                .into(),
            frame: wire_csum(vx, &f.udp6_tagged, VX_VNI, false),
            inner: Some((f.udp6_tagged.clone(), VX_PORT, meta(vx, VX_VNI))),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.vlan_tci = 0xffff;
            }),
            actions: vec![DpAction::Output(GN_PORT)],
        },
        TunCase {
            name: "encap, key=flow geneve, set_tunnel, tagged ipv6 popped".into(),
            frame: f.udp6_tagged.clone(),
            inner: None,
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.vlan_tci = 0xffff;
            }),
            actions: vec![
                DpAction::SetTunnelId(0x99_0001),
                DpAction::PopVlan,
                DpAction::Output(GN_PORT),
            ],
        },
    ]
}

impl Engine {
    pub fn load(&self, cfg: XdpEngineConfig) -> XdpEngine {
        super::dp::load(self.kind, cfg)
    }

    /// An engine between two new veths (`<tag>i`, port IN_PORT, and
    /// `<tag>2`, the output port 2's): the engine and the input's ifindex.
    pub fn load_between(&self, tag: &str, cfg: XdpEngineConfig) -> (XdpEngine, u32) {
        let in_if = self.veth(&format!("{tag}i"));
        let out_if = self.veth(&format!("{tag}2"));
        let mut e = self.load(cfg);
        (self.add_port)(&mut e, in_if, IN_PORT);
        e.set_tx_port(0, out_if).unwrap();
        (e, in_if)
    }

    /// The engine tests need root; says why not.
    pub fn skip(&self) -> bool {
        super::dp::skip(self.name)
    }

    /// `<prefix>-<tag>` and its veth peer `<prefix>-<tag>p`, created; the
    /// first end's ifindex.
    pub fn veth(&self, tag: &str) -> u32 {
        let a = format!("{}-{tag}", self.ifp);
        veth(&a, &format!("{a}p"));
        ifindex(&a)
    }

    pub fn userspace(&self, frame: &[u8], actions: &[DpAction]) -> (u32, Vec<u8>) {
        userspace_verdict(frame, actions, self.redirect, self.drop)
    }
}

/// One `#[test]` per shared behaviour for engine `$eng` (a path to an
/// [`Engine`] const). The test names are the behaviours'; the test binary
/// (`tc_offload`, `xdp_offload`) names the engine.
#[macro_export]
macro_rules! engine_tests {
    ($eng:path) => {
        $crate::engine_tests!(@one $eng, verifier_accepts_the_program_and_map_sizes);
        $crate::engine_tests!(@one $eng, meters_match_the_userspace_datapath);
        $crate::engine_tests!(@one $eng, differential_test_run_matches_userspace_executor);
        $crate::engine_tests!(@one $eng, misses_go_to_userspace_untouched);
        $crate::engine_tests!(@one $eng, drops_are_counted_by_reason_in_the_kernel);
        $crate::engine_tests!(@one $eng, full_maps_refuse_installs_and_traffic_still_reaches_userspace);
        $crate::engine_tests!(@one $eng, counters_off_leaves_packets_and_bytes_but_not_last_used);
        $crate::engine_tests!(@one $eng, batched_counter_read_covers_every_flow);
        $crate::engine_tests!(@one $eng, staged_installs_leave_the_map_single_installs_leave);
        $crate::engine_tests!(@one $eng, a_staged_commit_into_a_full_map_leaves_nothing);
        $crate::engine_tests!(@one $eng, queued_removals_are_deleted_at_the_commit);
        $crate::engine_tests!(@one $eng, a_queued_removal_already_gone_is_skipped);
        $crate::engine_tests!(@one $eng, a_queued_flow_installed_again_keeps_its_slot);
        $crate::engine_tests!(@one $eng, tunnel_decap_and_encap_match_userspace);
        $crate::engine_tests!(@one $eng, mask_hints_find_every_flow_and_survive_slot_reuse);
        $crate::engine_tests!(@one $eng, ports_sharing_a_direct_mapped_slot_are_both_served);
        $crate::engine_tests!(@one $eng, per_packet_select_matches_userspace_executor);
    };
    (@one $eng:path, $name:ident) => {
        #[test]
        fn $name() {
            if $eng.skip() {
                return;
            }
            $crate::common::engine::$name(&$eng);
        }
    };
}

/// The program loads (verifier included) with default and non-default map
/// sizes; a mask table above the program's bound is refused at load.
pub fn verifier_accepts_the_program_and_map_sizes(eng: &Engine) {
    let e = eng.load(XdpEngineConfig::default());
    eprintln!(
        "{}_dp: verifier accepted, {} instructions processed (kernel {})",
        eng.kind.as_str(),
        e.verified_insns()
            .map_or("?".to_string(), |n| n.to_string()),
        must(&["uname", "-r"]).trim()
    );
    assert_eq!(e.kind(), eng.kind);
    drop(e);
    let small = eng.load(XdpEngineConfig {
        max_flows: 8,
        max_masks: 64,
        max_tx_ports: 4,
        max_ifaces: 2,
        max_queues: 1,
        counters: true,
        ct_events_bytes: 4096,
    });
    assert_eq!(small.config().max_masks, 64);
    assert!(XdpEngine::load_kind(
        eng.kind,
        XdpEngineConfig {
            max_masks: 65,
            ..XdpEngineConfig::default()
        }
    )
    .is_err());
}

/// `meter:N` flows (drop and `dscp_remark` bands, packet/s and kbit/s) give
/// the verdicts, bytes and meter counters of the userspace meters
/// ([`meter_differential`]).
pub fn meters_match_the_userspace_datapath(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let (mut e, in_if) = eng.load_between("m", XdpEngineConfig::default());
        meter_differential(
            &mut e,
            eng.redirect,
            eng.drop,
            |e, f| e.test_run(f, in_if, 0).unwrap(),
            |k, m, a| (eng.encode)(k, m, a, &ports()).unwrap(),
        );
    });
}

/// Flows built from real `FlowKey`s (`extract` on the same frames) and
/// masks ([`cases`]), installed all at once (so the mask loop is
/// exercised); each frame through `BPF_PROG_TEST_RUN`: verdict and output
/// frame equal what `datapath::execute` produces with the same actions,
/// checksums valid, the flow's counters (packets, bytes, last use, TCP
/// flags) counted, and one batched counter read equal to the single reads.
/// Then modify keeps counters and changes what happens, and removing every
/// flow frees the masks. The cases the engine refuses are checked against
/// its documented limits, so a refusal cannot creep in silently.
pub fn differential_test_run_matches_userspace_executor(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let in_if = eng.veth("in");
        let o2 = eng.veth("o2");
        let o3 = eng.veth("o3");
        let mut e = eng.load(XdpEngineConfig::default());
        (eng.add_port)(&mut e, in_if, IN_PORT);
        e.set_tx_port(0, o2).unwrap();
        e.set_tx_port(1, o3).unwrap();
        let all = cases();
        let keys: Vec<FlowKey> = all
            .iter()
            .map(|c| {
                let mut k = FlowKey::default();
                extract(&c.frame, IN_PORT, &mut k).unwrap();
                k
            })
            .collect();
        // The test's own premise: each frame falls under its own flow only
        // (megaflows are disjoint per packet, as the slow path makes them).
        for (i, c) in all.iter().enumerate() {
            for (j, k) in keys.iter().enumerate() {
                assert_eq!(
                    Match::new(keys[i], c.mask).matches(k),
                    i == j,
                    "case {} / frame of {}",
                    c.name,
                    all[j].name
                );
            }
        }
        let (mut run, mut refused, mut elsewhere) = (Vec::new(), Vec::new(), Vec::new());
        for (i, c) in all.iter().enumerate() {
            match (eng.encode)(&keys[i], &c.mask, &c.actions, &ports()) {
                Ok(_) if !(eng.test_run_sees)(&c.actions) => elsewhere.push(c.name),
                Ok(enc) => run.push((i, e.install(&enc).unwrap())),
                Err(err) => refused.push((c.name, err.reason)),
            }
        }
        for (name, reason) in &refused {
            assert!(
                (eng.may_refuse)(name, reason),
                "{name}: refused with {reason}"
            );
        }
        assert!(elsewhere.len() >= eng.min_not_test_run, "{elsewhere:?}");
        assert!(
            run.len() >= 10,
            "{} cases ran, refused: {refused:?}",
            run.len()
        );
        let distinct: std::collections::HashSet<_> =
            run.iter().map(|(i, _)| all[*i].mask).collect();
        assert_eq!(e.masks().len(), distinct.len());
        for round in 1..=2u64 {
            for (i, h) in &run {
                let c = &all[*i];
                let (verdict, out) = e.test_run(&c.frame, in_if, 0).unwrap();
                let (want_verdict, want) = eng.userspace(&c.frame, &c.actions);
                assert_eq!(verdict, want_verdict, "{}: verdict", c.name);
                assert_eq!(out, want, "{}: output frame differs from userspace", c.name);
                assert!(all_checksums_valid(&out), "{}: checksums", c.name);
                let n = e.counters(h).unwrap();
                assert_eq!(n.packets, round, "{}: packets", c.name);
                assert_eq!(n.bytes, round * c.frame.len() as u64, "{}: bytes", c.name);
                assert!(n.idle.unwrap() < Duration::from_secs(5), "{}", c.name);
                assert!(n.used.unwrap() <= Instant::now());
                assert_eq!(n.tcp_flags, keys[*i].tcp_flags, "{}: tcp flags", c.name);
            }
        }
        // One batched read gives every flow's counters, as one by one.
        let batch = e
            .counters_batch()
            .unwrap()
            .expect("Linux 5.6+ batches hash-map reads");
        assert_eq!(batch.len(), run.len());
        for (i, h) in &run {
            let (a, b) = (batch[h], e.counters(h).unwrap());
            assert_eq!(
                (a.packets, a.bytes, a.tcp_flags),
                (b.packets, b.bytes, b.tcp_flags),
                "{}: batched counters",
                all[*i].name
            );
        }
        let s = e.stats().unwrap();
        let n = run.len() as u64 * 2;
        assert_eq!((s.rx, s.hit, s.miss, s.aborted, s.punt), (n, n, 0, 0, 0));
        let outputs = run
            .iter()
            .filter(|(i, _)| {
                all[*i]
                    .actions
                    .iter()
                    .any(|a| matches!(a, DpAction::Output(_)))
            })
            .count() as u64;
        assert_eq!((s.output, s.drop), (outputs * 2, n - outputs * 2));

        // Modify keeps counters and changes what happens; remove frees the
        // masks again.
        let (i0, h0) = run[0];
        let c = &all[i0];
        let mut enc = (eng.encode)(&keys[i0], &c.mask, &[DpAction::Output(3)], &ports()).unwrap();
        e.modify(&h0, &enc).unwrap();
        let (verdict, out) = e.test_run(&c.frame, in_if, 0).unwrap();
        assert_eq!((verdict, &out), (eng.redirect, &c.frame));
        assert_eq!(e.counters(&h0).unwrap().packets, 3);
        // Installing the same match again is a modify, not a second flow.
        enc.value = pack(&[XdpAction::Drop { reason: 0 }]).unwrap();
        let again = e.install(&enc).unwrap();
        assert_eq!(again, h0);
        assert_eq!(e.n_flows(), run.len());
        assert_eq!(e.test_run(&c.frame, in_if, 0).unwrap().0, eng.drop);
        // Remove hands back the flow's last counters (read and deleted in
        // one call where the kernel allows) and the flow is gone.
        let seen = e.counters(&h0).unwrap().packets;
        assert_eq!(seen, 4, "three runs before the modify, one after");
        assert_eq!(e.remove(&h0).unwrap().packets, seen);
        assert!(e.counters(&h0).is_err());
        for (_, h) in &run[1..] {
            e.remove(h).unwrap();
        }
        assert_eq!(
            (e.n_flows(), e.masks().len(), e.masks().n_masks()),
            (0, 0, 0)
        );
        let (verdict, out) = e.test_run(&c.frame, in_if, 0).unwrap();
        assert_eq!((verdict, &out), (eng.pass, &c.frame));
        eprintln!(
            "{}_dp differential: {} cases equal to userspace, {} refused: {refused:?}, \
             {} checked elsewhere: {elsewhere:?}",
            eng.kind.as_str(),
            run.len(),
            refused.len(),
            elsewhere.len()
        );
    });
}

/// Frames the program does not finish reach userspace untouched: a frame
/// of an interface that is not a port and a miss without a receiver are
/// handed on ([`Engine::pass`]); with a receiver (TC: the port's upcall
/// device; XDP: an AF_XDP socket for the queue) a miss, an unparsed frame
/// (a third VLAN tag) and a flow whose pre-checks fail (dec_ttl at TTL 1,
/// an empty output slot) are redirected to it, untouched, and counted as
/// such; the same flow forwards a TTL-64 frame with the TTL decremented.
pub fn misses_go_to_userspace_untouched(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let in_if = eng.veth("mi");
        let up = eng.veth("up");
        let out_if = eng.veth("x");
        let mut e = eng.load(XdpEngineConfig::default());
        let tcp = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .ttl(1)
            .tcp(1, 2, FLAG_ACK)
            .build();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (eng.pass, tcp.clone()),
            "not a port"
        );
        (eng.add_port)(&mut e, in_if, IN_PORT);
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (eng.pass, tcp.clone()),
            "miss without a receiver"
        );
        // The receiver: kept alive until the end of the test.
        let _receiver = match eng.kind {
            EngineKind::Tc => {
                e.set_port_upcall(in_if, IN_PORT, up).unwrap();
                None
            }
            EngineKind::Xdp => {
                use std::os::fd::AsRawFd;
                let xsk = xdp_socket();
                e.register_xsk(0, xsk.as_raw_fd()).unwrap();
                Some(xsk)
            }
        };
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (eng.redirect, tcp.clone()),
            "miss"
        );
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
            (eng.redirect, three.clone()),
            "unparsed"
        );
        let mut k = FlowKey::default();
        extract(&tcp, IN_PORT, &mut k).unwrap();
        let m = mask(|m| m.nw_proto = 0xff);
        let mut enc = (eng.encode)(&k, &m, &[DpAction::Output(2)], &ports()).unwrap();
        enc.value = pack(&[XdpAction::DecTtl, XdpAction::Output { slot: 0 }]).unwrap();
        e.install(&enc).unwrap();
        e.set_tx_port(0, out_if).unwrap();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (eng.redirect, tcp.clone()),
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
        assert_eq!(v, eng.redirect);
        assert_eq!(out[14 + 8], 63, "forwarded with the TTL decremented");
        e.clear_tx_port(0).unwrap();
        assert_eq!(
            e.test_run(&tcp64, in_if, 0).unwrap(),
            (eng.redirect, tcp64.clone()),
            "empty output slot: punted, untouched"
        );
        let s = e.stats().unwrap();
        assert_eq!((s.punt, s.aborted), (2, 0));
    });
}

/// Drops in the kernel are counted by the reason the userspace datapath
/// gives the same frame, so `nicflow stats` does not undercount once flows
/// are offloaded: an empty action list is `policy`, a `Drop` action its
/// [`DropReason`]. A flow with actions but no output ends the frame without
/// a reason, as userspace's leftover buffer does.
pub fn drops_are_counted_by_reason_in_the_kernel(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let in_if = eng.veth("dr");
        let mut e = eng.load(XdpEngineConfig::default());
        (eng.add_port)(&mut e, in_if, IN_PORT);
        let m = mask(|m| {
            m.nw_proto = 0xff;
            m.tp_dst = 0xffff;
        });
        let frame = |dport: u16| {
            FrameBuilder::new(A, B)
                .ipv4(v4(1), v4(2))
                .udp(1000, dport)
                .build()
        };
        let flows: [(u16, Vec<DpAction>, u64); 4] = [
            (1, vec![], 3),
            (2, vec![DpAction::Drop(DropReason::TtlExceeded)], 2),
            (3, vec![DpAction::Drop(DropReason::RecursionLimit)], 1),
            (4, vec![DpAction::SetTpSrc(7)], 2),
        ];
        let mut want_userspace: HashMap<&str, u64> = HashMap::new();
        for (dport, actions, n) in &flows {
            let f = frame(*dport);
            let mut k = FlowKey::default();
            extract(&f, IN_PORT, &mut k).unwrap();
            e.install(&(eng.encode)(&k, &m, actions, &ports()).unwrap())
                .unwrap();
            // What the userspace executor says about the same frame.
            let (r, _) = userspace_exec(&f, actions);
            let reason = match (r.policy_drop, r.drop) {
                (true, _) => Some("policy"),
                (_, Some(d)) => Some(d.name()),
                _ => None,
            };
            for _ in 0..*n {
                assert_eq!(e.test_run(&f, in_if, 0).unwrap().0, eng.drop);
                if let Some(r) = reason {
                    *want_userspace.entry(r).or_insert(0) += 1;
                }
            }
        }
        let s = e.stats().unwrap();
        let got: HashMap<&str, u64> = s.drops().into_iter().collect();
        assert_eq!(got, want_userspace, "kernel drops by reason vs userspace");
        assert_eq!(
            got,
            HashMap::from([("policy", 3), ("ttl_exceeded", 2), ("recursion_limit", 1)])
        );
        assert_eq!(s.drop, 8, "every frame ended in the kernel");
    });
}

pub fn full_maps_refuse_installs_and_traffic_still_reaches_userspace(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let in_if = eng.veth("in");
        let o2 = eng.veth("o2");
        let mut e = eng.load(XdpEngineConfig {
            max_flows: 4,
            max_masks: 2,
            ..XdpEngineConfig::default()
        });
        (eng.add_port)(&mut e, in_if, IN_PORT);
        e.set_tx_port(0, o2).unwrap();
        let frame = |n: u16| {
            FrameBuilder::new(A, B)
                .ipv4(v4(1), v4(2))
                .udp(1000, n)
                .build()
        };
        let by_port = mask(|m| {
            m.nw_proto = 0xff;
            m.tp_dst = 0xffff;
        });
        let flow = |f: &[u8], m: &FlowMask| output2(&eng, f, m);
        let mut hs = Vec::new();
        for n in 0..4 {
            hs.push(e.install(&flow(&frame(n), &by_port)).unwrap());
        }
        let err = e.install(&flow(&frame(4), &by_port)).unwrap_err();
        assert_eq!(err.reason(), Some("flow-map-full"), "{err}");
        assert_eq!(e.n_flows(), 4);
        // The refused flow's traffic is not dropped: it misses to userspace.
        let before = e.stats().unwrap().miss;
        assert_eq!(
            e.test_run(&frame(4), in_if, 0).unwrap(),
            (eng.pass, frame(4))
        );
        assert_eq!(e.stats().unwrap().miss, before + 1);
        assert_eq!(e.test_run(&frame(3), in_if, 0).unwrap().0, eng.redirect);
        // Room again after a removal.
        e.remove(&hs.pop().unwrap()).unwrap();
        hs.push(e.install(&flow(&frame(4), &by_port)).unwrap());
        assert_eq!(e.test_run(&frame(4), in_if, 0).unwrap().0, eng.redirect);

        // Masks: two slots. A second mask fits, a third does not.
        for h in hs.drain(..) {
            e.remove(&h).unwrap();
        }
        let by_src = mask(|m| m.nw_src = u32::MAX);
        let by_dst = mask(|m| m.nw_dst = u32::MAX);
        let h1 = e.install(&flow(&frame(1), &by_port)).unwrap();
        let h2 = e.install(&flow(&frame(2), &by_src)).unwrap();
        let err = e.install(&flow(&frame(3), &by_dst)).unwrap_err();
        assert_eq!(err.reason(), Some("mask-table-full"), "{err}");
        assert_eq!(e.masks().len(), 2);
        // Freeing a mask's last flow frees its slot for the next mask.
        e.remove(&h1).unwrap();
        let h3 = e.install(&flow(&frame(3), &by_dst)).unwrap();
        assert_eq!(h3.mask_slot(), h1.mask_slot());
        assert_eq!(e.test_run(&frame(3), in_if, 0).unwrap().0, eng.redirect);
        assert_ne!(h2.mask_slot(), h3.mask_slot());
    });
}

/// `counters = false` (table-scale's "counters off"): the same frames come
/// out, per-flow packets/bytes stay at zero, the last-used time still moves
/// (aging depends on it).
pub fn counters_off_leaves_packets_and_bytes_but_not_last_used(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let in_if = eng.veth("in");
        let o2 = eng.veth("o2");
        let o3 = eng.veth("o3");
        let mut e = eng.load(XdpEngineConfig {
            counters: false,
            ..XdpEngineConfig::default()
        });
        (eng.add_port)(&mut e, in_if, IN_PORT);
        e.set_tx_port(0, o2).unwrap();
        e.set_tx_port(1, o3).unwrap();
        let mut ran = 0;
        for c in cases() {
            let mut k = FlowKey::default();
            extract(&c.frame, IN_PORT, &mut k).unwrap();
            // What the engine refuses or the test run cannot show is
            // `differential_test_run_matches_userspace_executor`'s to check.
            let Ok(enc) = (eng.encode)(&k, &c.mask, &c.actions, &ports()) else {
                continue;
            };
            if !(eng.test_run_sees)(&c.actions) {
                continue;
            }
            ran += 1;
            let h = e.install(&enc).unwrap();
            for _ in 0..3 {
                let (verdict, out) = e.test_run(&c.frame, in_if, 0).unwrap();
                assert_eq!(
                    (verdict, out),
                    eng.userspace(&c.frame, &c.actions),
                    "{}",
                    c.name
                );
            }
            let n = e.counters(&h).unwrap();
            assert_eq!((n.packets, n.bytes), (0, 0), "{}: counters off", c.name);
            assert!(n.idle.unwrap() < Duration::from_secs(5), "{}: used", c.name);
            e.remove(&h).unwrap();
        }
        let s = e.stats().unwrap();
        assert!(ran >= 10, "{ran} cases ran");
        assert_eq!(s.hit, ran * 3, "engine stats still count");
    });
}

/// The batched counter read (`XdpEngine::counters_batch`, one
/// `BPF_MAP_LOOKUP_BATCH` per 256 flows) sees every installed flow across
/// several chunks, with the counts the program left.
pub fn batched_counter_read_covers_every_flow(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let (mut e, in_if) = eng.load_between("b", XdpEngineConfig::default());
        let mask = exact_mask();
        let mut flows = Vec::new();
        for i in 0..700u32 {
            let frame = udp_frame(0x0100 + i, b"batched");
            let enc = output2(&eng, &frame, &mask);
            flows.push((e.install(&enc).unwrap(), frame));
        }
        // Every seventh flow gets i % 3 + 1 packets.
        for (i, (_, frame)) in flows.iter().enumerate().filter(|(i, _)| i % 7 == 0) {
            for _ in 0..(i % 3 + 1) {
                assert_eq!(e.test_run(frame, in_if, 0).unwrap().0, eng.redirect);
            }
        }
        let t = Instant::now();
        let batch = e.counters_batch().unwrap().expect("batched reads");
        let batched = t.elapsed();
        let t = Instant::now();
        for (h, _) in &flows {
            e.counters(h).unwrap();
        }
        // A figure, not a check (timing asserts fail by chance).
        eprintln!(
            "700 flows: batched read {batched:?}, flow by flow {:?}",
            t.elapsed()
        );
        assert_eq!(batch.len(), 700);
        for (i, (h, frame)) in flows.iter().enumerate() {
            let want = if i % 7 == 0 { (i % 3 + 1) as u64 } else { 0 };
            let c = batch[h];
            assert_eq!(
                (c.packets, c.bytes),
                (want, want * frame.len() as u64),
                "flow {i}"
            );
        }
    });
}

/// Installs staged and committed together (`begin_staging`,
/// `commit_staged`: a connection set up at its SYN) leave the same flows,
/// values and forwarding as installs one by one, whether the commit writes
/// them with `BPF_MAP_UPDATE_BATCH` or, as on a kernel that refuses it,
/// one update each; a staged flow removed before the commit never reaches
/// the map, and one installed again while staged is written, then
/// modified in place.
pub fn staged_installs_leave_the_map_single_installs_leave(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let mask = exact_mask();
        let frame = |src: u32| udp_frame(src, b"staged");
        // 24 flows staged eight at a time, then the 25th twice in one
        // staging; the single installs install it twice too.
        let frames: Vec<Vec<u8>> = (0..25u32).map(|i| frame(0x0100 + i)).collect();
        let gone: Vec<Vec<u8>> = (0..3u32).map(|i| frame(0x0900 + i)).collect();
        let encoded = |frame: &[u8]| output2(&eng, frame, &mask);
        // (mode, engine, handles by frame)
        let mut runs = Vec::new();
        for (mode, tag) in [("single", "s"), ("batch", "b"), ("one-by-one", "o")] {
            let (mut e, in_if) = eng.load_between(tag, XdpEngineConfig::default());
            let mut handles = Vec::new();
            let (last, rest) = frames.split_last().unwrap();
            if mode == "single" {
                for f in rest {
                    handles.push(e.install(&encoded(f)).unwrap());
                }
                handles.push(e.install(&encoded(last)).unwrap());
                assert_eq!(e.install(&encoded(last)).unwrap(), handles[24]);
            } else {
                e.set_update_batch(mode == "batch");
                for (chunk, g) in rest.chunks(8).zip(&gone) {
                    e.begin_staging();
                    // A flow staged, then removed before the commit.
                    let h = e.install(&encoded(g)).unwrap();
                    e.remove(&h).unwrap();
                    let from = handles.len();
                    for f in chunk {
                        handles.push(e.install(&encoded(f)).unwrap());
                    }
                    // Staged, not written: their frames miss, the map
                    // holds none of them.
                    for f in chunk {
                        assert_eq!(e.test_run(f, in_if, 0).unwrap().0, eng.pass, "{mode}");
                    }
                    let batch = e.counters_batch().unwrap().expect("batched reads");
                    for h in &handles[from..] {
                        assert!(!batch.contains_key(h), "{mode}: staged, yet in the map");
                        // Read while staged: the value it will be written
                        // with, nothing counted.
                        let v = e.value(h).expect("a staged flow's value");
                        assert_eq!((v.packets, v.bytes), (0, 0), "{mode}");
                    }
                    if from == 0 {
                        // Modified while staged: the staging is written
                        // first (in one batch), then the entry replaced
                        // (here by a drop, then back to the output, so
                        // that the comparison below still holds).
                        let mut k = FlowKey::default();
                        extract(&chunk[0], IN_PORT, &mut k).unwrap();
                        let drop = (eng.encode)(&k, &mask, &[], &ports()).unwrap();
                        e.modify(&handles[0], &drop).unwrap();
                        let v = e.value(&handles[0]).unwrap();
                        assert_eq!(v.n_actions, drop.value.n_actions, "{mode}");
                        assert_ne!(v, e.value(&handles[1]).unwrap(), "{mode}");
                        e.modify(&handles[0], &encoded(&chunk[0])).unwrap();
                    }
                    e.commit_staged().unwrap();
                }
                // Installed again while staged: written, then modified.
                e.begin_staging();
                handles.push(e.install(&encoded(last)).unwrap());
                assert_eq!(e.install(&encoded(last)).unwrap(), handles[24], "{mode}");
                e.commit_staged().unwrap();
            }
            assert_eq!(e.n_flows(), frames.len(), "{mode}");
            // Three chunks in one `BPF_MAP_UPDATE_BATCH` each (the 25th,
            // alone when written, takes a single update); none without.
            let batches = if mode == "batch" { 3 } else { 0 };
            assert_eq!(e.update_batches(), batches, "{mode}");
            for f in &frames {
                assert_eq!(e.test_run(f, in_if, 0).unwrap().0, eng.redirect, "{mode}");
            }
            for g in &gone {
                assert_ne!(e.test_run(g, in_if, 0).unwrap().0, eng.redirect, "{mode}");
            }
            runs.push((mode, e, handles));
        }
        let (_, single, want) = &runs[0];
        for (mode, e, handles) in &runs[1..] {
            assert_eq!(handles, want, "{mode}");
            // Every entry in the map is one of these flows, with the
            // values the single installs wrote (one packet counted each).
            let batch = e.counters_batch().unwrap().expect("batched reads");
            assert_eq!(batch.len(), frames.len(), "{mode}");
            for (i, h) in handles.iter().enumerate() {
                let (mut a, mut b) = (single.value(h).unwrap(), e.value(h).unwrap());
                assert_eq!((a.packets, b.packets), (1, 1), "{mode} flow {i}");
                a.used_ns = 0;
                b.used_ns = 0;
                assert_eq!(a, b, "{mode} flow {i}");
                assert_eq!(batch[h].packets, 1, "{mode} flow {i}");
            }
        }
    });
}

/// A commit of staged flows into a map without room for them all
/// (`BPF_MAP_UPDATE_BATCH` or one update each) is refused as
/// `flow-map-full`; once the caller removes every flow it staged, nothing
/// is left: no entry, no flow, no mask slot, and the room there is takes
/// the next install.
pub fn a_staged_commit_into_a_full_map_leaves_nothing(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let mask = exact_mask();
        let frames: Vec<Vec<u8>> = (0..3u32).map(|i| udp_frame(0x0100 + i, b"full")).collect();
        let encoded = |frame: &[u8]| output2(&eng, frame, &mask);
        for (mode, tag) in [("batch", "b"), ("one-by-one", "o")] {
            let (mut e, in_if) = eng.load_between(
                tag,
                XdpEngineConfig {
                    max_flows: 1,
                    ..XdpEngineConfig::default()
                },
            );
            e.set_update_batch(mode == "batch");
            e.begin_staging();
            let hs: Vec<_> = frames
                .iter()
                .map(|f| e.install(&encoded(f)).unwrap())
                .collect();
            assert_eq!((e.n_flows(), e.masks().len()), (3, 1), "{mode}");
            let err = e.commit_staged().unwrap_err();
            assert_eq!(err.reason(), Some("flow-map-full"), "{mode}: {err}");
            assert_eq!(e.update_batches(), 0, "{mode}");
            for h in &hs {
                e.remove(h).unwrap();
            }
            assert_eq!(e.n_flows(), 0, "{mode}");
            assert!(e.masks().is_empty(), "{mode}: mask slot held");
            let left = e.counters_batch().unwrap().expect("batched reads");
            assert!(left.is_empty(), "{mode}: {left:?}");
            for f in &frames {
                assert_eq!(e.test_run(f, in_if, 0).unwrap().0, eng.pass, "{mode}");
            }
            // The map's one entry is free again.
            let h = e.install(&encoded(&frames[2])).unwrap();
            assert_eq!(e.test_run(&frames[2], in_if, 0).unwrap().0, eng.redirect);
            e.remove(&h).unwrap();

            // The staging written before the commit (a second install of
            // a staged flow), and refused there: the commit fails too,
            // though nothing is left to write.
            e.begin_staging();
            let hs: Vec<_> = frames
                .iter()
                .map(|f| e.install(&encoded(f)).unwrap())
                .collect();
            let err = e.install(&encoded(&frames[0])).unwrap_err();
            assert_eq!(err.reason(), Some("flow-map-full"), "{mode}: {err}");
            let err = e.commit_staged().unwrap_err();
            assert_eq!(err.reason(), Some("flow-staging-failed"), "{mode}: {err}");
            for h in &hs {
                e.remove(h).unwrap();
            }
            assert_eq!((e.n_flows(), e.masks().len()), (0, 0), "{mode}");
            let left = e.counters_batch().unwrap().expect("batched reads");
            assert!(left.is_empty(), "{mode}: {left:?}");
            // The next staging starts clean.
            e.begin_staging();
            let h = e.install(&encoded(&frames[1])).unwrap();
            e.commit_staged().unwrap();
            assert_eq!(e.test_run(&frames[1], in_if, 0).unwrap().0, eng.redirect);
            e.remove(&h).unwrap();
        }
    });
}

/// Removals queued (`queue_removal`: the set-up poll's closed
/// connections) stay in the map until `commit_removals`, which deletes
/// them all with one `BPF_MAP_DELETE_BATCH` (or, as on a kernel that
/// refuses it, one delete each) and only then frees the mask slot of
/// their last flow; the other flows keep their entries and counters; a
/// queued flow installed again before the commit keeps the new entry.
pub fn queued_removals_are_deleted_at_the_commit(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let exact = exact_mask();
        // A second mask (source port wildcarded) held by one flow only.
        let mut wide = exact;
        wide.0.tp_src = 0;
        let frame = |src: u32| udp_frame(src, b"removed");
        let frames: Vec<Vec<u8>> = (0..13u32).map(|i| frame(0x0100 + i)).collect();
        let encoded = |frame: &[u8], mask: &FlowMask| output2(&eng, frame, mask);
        for (mode, tag) in [("batch", "b"), ("one-by-one", "o")] {
            let (mut e, in_if) = eng.load_between(tag, XdpEngineConfig::default());
            e.set_delete_batch(mode == "batch");
            // Flows 0..12 exact, 12 under the wide mask; one frame each.
            let hs: Vec<_> = frames
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let m = if i == 12 { &wide } else { &exact };
                    e.install(&encoded(f, m)).unwrap()
                })
                .collect();
            assert_eq!(e.masks().len(), 2, "{mode}");
            for f in &frames {
                assert_eq!(e.test_run(f, in_if, 0).unwrap().0, eng.redirect, "{mode}");
            }
            // The odd flows and the wide one go; 1 is installed again
            // before the commit.
            let gone: Vec<usize> = (1..13).filter(|i| i % 2 == 1 || *i == 12).collect();
            for &i in &gone {
                assert_eq!(e.counters(&hs[i]).unwrap().packets, 1, "{mode}");
                assert!(e.queue_removal(&hs[i]).unwrap(), "{mode}");
            }
            assert_eq!(e.n_flows(), 13 - gone.len(), "{mode}");
            // Not deleted yet: the entries still forward, the wide mask
            // is still held.
            for &i in &gone {
                assert_eq!(e.test_run(&frames[i], in_if, 0).unwrap().0, eng.redirect);
            }
            assert_eq!(e.masks().len(), 2, "{mode}");
            let again = e.install(&encoded(&frames[1], &exact)).unwrap();
            assert_eq!(again, hs[1], "{mode}");
            e.commit_removals().unwrap();
            let batches = if mode == "batch" { 1 } else { 0 };
            assert_eq!(e.delete_batches(), batches, "{mode}");
            assert_eq!(e.n_flows(), 13 - gone.len() + 1, "{mode}");
            assert_eq!(e.masks().len(), 1, "{mode}: the wide mask's slot is free");
            for (i, f) in frames.iter().enumerate() {
                let kept = i == 1 || !gone.contains(&i);
                let want = if kept { eng.redirect } else { eng.pass };
                assert_eq!(e.test_run(f, in_if, 0).unwrap().0, want, "{mode} flow {i}");
            }
            // Only the kept flows are in the map: two frames each; the one
            // installed again started afresh (one frame since).
            let left = e.counters_batch().unwrap().expect("batched reads");
            assert_eq!(left.len(), 13 - gone.len() + 1, "{mode}: {left:?}");
            for (i, h) in hs.iter().enumerate().filter(|(i, _)| !gone.contains(i)) {
                assert_eq!(left[h].packets, 2, "{mode} flow {i}");
            }
            assert_eq!(left[&hs[1]].packets, 1, "{mode}");
            // An empty commit costs nothing.
            e.commit_removals().unwrap();
            assert_eq!(e.delete_batches(), batches, "{mode}");
        }
    });
}

/// The exact mask the engine tests install under: the fields only
/// userspace matches, and the tunnel metadata, cleared (the engines hold
/// neither).
fn exact_mask() -> FlowMask {
    let mut mask = FlowMask::exact();
    mask.0.clear_userspace_only();
    mask.0.tun_metadata = [0; 8];
    mask
}

/// A UDP frame A -> B, 1000 -> 2000, from `v4(src)` to `v4(2)`.
fn udp_frame(src: u32, payload: &[u8]) -> Vec<u8> {
    FrameBuilder::new(A, B)
        .ipv4(v4(src), v4(2))
        .udp(1000, 2000)
        .payload(payload)
        .build()
}

/// `frame`'s flow under `mask`, output to port 2, encoded for `eng`.
fn output2(eng: &Engine, frame: &[u8], mask: &FlowMask) -> EncodedFlow {
    let mut k = FlowKey::default();
    extract(frame, IN_PORT, &mut k).unwrap();
    (eng.encode)(&k, mask, &[DpAction::Output(2)], &ports()).unwrap()
}

/// Flows and frames for the queued-removal tests: `n` UDP flows under
/// the exact mask (the last `wide` of them with the source port
/// wildcarded, a second mask), their frames.
fn removal_flows(eng: &Engine, n: u32, wide: usize) -> (Vec<EncodedFlow>, Vec<Vec<u8>>) {
    let exact = exact_mask();
    let mut wide_mask = exact;
    wide_mask.0.tp_src = 0;
    let frames: Vec<Vec<u8>> = (0..n).map(|i| udp_frame(0x0200 + i, b"queued")).collect();
    let flows = frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let m = if i + wide >= n as usize {
                &wide_mask
            } else {
                &exact
            };
            output2(eng, f, m)
        })
        .collect();
    (flows, frames)
}

/// A queued removal whose entry someone else deleted first: the batched
/// delete stops at it (`ENOENT`), skips it and deletes the rest with a
/// second call; every slot is freed and nothing is left installed. One
/// by one (a kernel that refuses the batch), the same.
pub fn a_queued_removal_already_gone_is_skipped(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let (flows, frames) = removal_flows(&eng, 4, 0);
        for (mode, tag) in [("batch", "b"), ("one-by-one", "o")] {
            let (mut e, in_if) = eng.load_between(tag, XdpEngineConfig::default());
            e.set_delete_batch(mode == "batch");
            let hs: Vec<_> = flows.iter().map(|f| e.install(f).unwrap()).collect();
            for h in &hs {
                assert!(e.queue_removal(h).unwrap(), "{mode}");
            }
            // The second one's entry goes behind the engine's back.
            e.delete_entry_only(&hs[1]).unwrap();
            e.commit_removals().unwrap();
            // Batch: the first call deletes flow 0 and stops at 1; the
            // second deletes 2 and 3.
            let batches = if mode == "batch" { 1 } else { 0 };
            assert_eq!(e.delete_batches(), batches, "{mode}");
            assert_eq!(e.n_flows(), 0, "{mode}");
            assert_eq!(e.masks().len(), 0, "{mode}: the slot is free");
            for (i, f) in frames.iter().enumerate() {
                assert_eq!(
                    e.test_run(f, in_if, 0).unwrap().0,
                    eng.pass,
                    "{mode} flow {i}"
                );
            }
            let left = e.counters_batch().unwrap().expect("batched reads");
            assert!(left.is_empty(), "{mode}: {left:?}");
        }
    });
}

/// A queued flow installed again before the commit: its old entry is
/// deleted at once and its old mask reference released with it, so the
/// new flow holds the slot alone (removing it frees the slot, before any
/// commit), and the commit neither deletes the new entry nor frees a
/// slot twice.
pub fn a_queued_flow_installed_again_keeps_its_slot(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        // Flows 0, 1 exact, 2 under the wide mask.
        let (flows, frames) = removal_flows(&eng, 3, 1);
        let (mut e, in_if) = eng.load_between("r", XdpEngineConfig::default());
        let hs: Vec<_> = flows.iter().map(|f| e.install(f).unwrap()).collect();
        assert_eq!(e.masks().len(), 2);
        for h in &hs {
            assert!(e.queue_removal(h).unwrap());
        }
        // 2 and 0 installed again (2 swapped off the queue's end, 0 off
        // its front: the queue's order changes).
        let w = e.install(&flows[2]).unwrap();
        let x = e.install(&flows[0]).unwrap();
        assert_eq!((w, x), (hs[2], hs[0]));
        assert_eq!(e.masks().len(), 2);
        // The wide mask is held by flow 2 alone now: removing it frees
        // the slot at once.
        e.remove(&w).unwrap();
        assert_eq!(e.masks().len(), 1, "the wide slot is free");
        e.commit_removals().unwrap();
        assert_eq!(e.n_flows(), 1);
        assert_eq!(e.masks().len(), 1, "flow 0 holds the exact mask");
        let want = [eng.redirect, eng.pass, eng.pass];
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(e.test_run(f, in_if, 0).unwrap().0, want[i], "flow {i}");
        }
        e.remove(&x).unwrap();
        assert_eq!(e.masks().len(), 0, "every slot free");
    });
}

/// Decapsulation on an underlay and encapsulation towards one, through
/// `BPF_PROG_TEST_RUN`, against what the userspace tunnel port and
/// executor produce from the same frames: the same frames out, byte for
/// byte (outer header, entropy port, VNI, lengths, checksums; an outer UDP
/// checksum on a frame that does not vouch for it verified over the
/// bytes), and every frame the program must not finish (wrong VNI, UDP
/// checksum present, Geneve critical bit, oversize, unresolved remote,
/// plus the engine's own) handed on untouched.
pub fn tunnel_decap_and_encap_match_userspace(eng: &Engine) {
    use nicflow::offload::kernel::layout::TunTx;
    let eng = *eng;
    in_netns(move || {
        let in_if = eng.veth("in");
        let o2 = eng.veth("o2");
        let ul_if = eng.veth("ul");
        let mut e = eng.load(XdpEngineConfig::default());
        (eng.add_port)(&mut e, in_if, IN_PORT);
        e.set_tx_port(0, o2).unwrap();
        let (vx, gn) = set_up_tunnels(&mut e, ul_if);

        let frames = tun_frames();
        let mut cases = csum_tail_cases(&vx);
        cases.extend(shared_cases(&vx, &gn, &frames));
        cases.extend((eng.tun_cases)(&vx, &gn, &frames));
        check_against_userspace(
            &mut e,
            &cases,
            |k, m, a| (eng.encode)(k, m, a, &TunSlots),
            in_if,
            ul_if,
            (&vx, &gn),
            eng.redirect,
            eng.drop,
        );
        let (decaps, encaps, punts) = eng.tun_counts;
        let s = e.stats().unwrap();
        assert_eq!((s.decap, s.encap, s.aborted), (decaps, encaps, 0));

        // Frames the program must hand on whole (no receiver for userspace
        // set), each with a reason of its own.
        let mut untouched: Vec<(&str, Vec<u8>, u32)> =
            underlay_frames_left_whole(&vx, &gn, &frames)
                .into_iter()
                .map(|(n, f)| (n, f, ul_if))
                .collect();
        // The oversize frame falls under the first encap flow's mask.
        untouched.push(("over the tunnel MTU", big_frame(), in_if));
        untouched.extend(
            (eng.tun_untouched)(&vx, &frames)
                .into_iter()
                .map(|(n, f, ul)| (n, f, if ul { ul_if } else { in_if })),
        );
        for (name, f, on) in &untouched {
            let (verdict, out) = e.test_run(f, *on, 0).unwrap();
            assert_eq!((verdict, &out), (eng.pass, f), "{name}: not left whole");
        }
        // An unresolved remote (invalid or no header): punted, untouched.
        e.set_tunnel_tx(3, TunTx::default()).unwrap();
        let f = &cases
            .iter()
            .find(|c| c.name.starts_with("encap, fixed vxlan key"))
            .unwrap()
            .frame;
        let (verdict, out) = e.test_run(f, in_if, 0).unwrap();
        assert_eq!((verdict, &out), (eng.pass, f));
        e.clear_tunnel_tx(3).unwrap();
        let (verdict, out) = e.test_run(f, in_if, 0).unwrap();
        assert_eq!((verdict, &out), (eng.pass, f));
        let s = e.stats().unwrap();
        eprintln!("{} tunnels: {s:?}", eng.name);
        assert_eq!((s.punt, s.aborted), (punts, 0));
    });
}

/// An AF_XDP socket (unbound is enough for the XSKMAP and test runs).
pub fn xdp_socket() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW, 0) };
    assert!(
        fd >= 0,
        "AF_XDP socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: fd is a fresh descriptor nobody else owns.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// The lookup's mask-hint cache (a frame's hash -> the mask slot it last
/// hit) and the hashed flow keys: six flows under six masks, each frame
/// sent in rounds of changing order, must hit its own flow every time
/// (per-flow counters say which flow counted it); after a flow is removed
/// and its mask slot reused by another mask, the old frame's hint points
/// at a slot whose flow it does not match: it misses, and the new flow's
/// frame hits.
pub fn mask_hints_find_every_flow_and_survive_slot_reuse(eng: &Engine) {
    let eng = *eng;
    in_netns(move || {
        let (mut e, in_if) = eng.load_between("mh", XdpEngineConfig::default());
        let frame = |n: u32| {
            FrameBuilder::new(A, B)
                .ipv4(v4(0x100 + n), v4(0x200 + n))
                .udp(1000 + n as u16, 2000 + n as u16)
                .payload(b"hints")
                .build()
        };
        let masks: Vec<FlowMask> = vec![
            mask(|m| m.nw_src = u32::MAX),
            mask(|m| m.nw_dst = u32::MAX),
            mask(|m| {
                m.nw_proto = 0xff;
                m.tp_src = 0xffff;
            }),
            mask(|m| {
                m.nw_proto = 0xff;
                m.tp_dst = 0xffff;
            }),
            mask(|m| m.nw_dst = 0xffff_fff0),
            mask(|m| {
                m.nw_src = u32::MAX;
                m.nw_dst = u32::MAX;
            }),
        ];
        let flow = |f: &[u8], m: &FlowMask| output2(&eng, f, m);
        // Frames 0..6 under masks 0..6; the masks do not overlap for these
        // frames (each field value is the frame's own).
        let hs: Vec<_> = masks
            .iter()
            .enumerate()
            .map(|(i, m)| e.install(&flow(&frame(i as u32 * 16), m)).unwrap())
            .collect();
        assert_eq!(e.masks().len(), 6);
        let mut sent = [0u64; 6];
        for round in 0..5usize {
            for j in 0..6usize {
                let i = (j * (round + 1) + round) % 6;
                let f = frame(i as u32 * 16);
                assert_eq!(
                    e.test_run(&f, in_if, 0).unwrap().0,
                    eng.redirect,
                    "frame {i}"
                );
                sent[i] += 1;
            }
        }
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(e.counters(h).unwrap().packets, sent[i], "flow {i}");
        }
        // Slot reuse: flow 2 (mask 2) goes, its slot takes a new mask.
        e.remove(&hs[2]).unwrap();
        let reuse = mask(|m| m.nw_tos = 0xff);
        let fresh = FrameBuilder::new(A, B)
            .ipv4(v4(0x300), v4(0x301))
            .tos(0x20)
            .udp(7, 7)
            .build();
        let h = e.install(&flow(&fresh, &reuse)).unwrap();
        assert_eq!(h.mask_slot(), hs[2].mask_slot());
        let old = frame(2 * 16);
        let miss = e.stats().unwrap().miss;
        assert_eq!(e.test_run(&old, in_if, 0).unwrap(), (eng.pass, old.clone()));
        assert_eq!(e.stats().unwrap().miss, miss + 1);
        assert_eq!(e.test_run(&fresh, in_if, 0).unwrap().0, eng.redirect);
        assert_eq!(e.counters(&h).unwrap().packets, 1);
        // The others still hit their own flows.
        for i in [0usize, 1, 3, 4, 5] {
            assert_eq!(
                e.test_run(&frame(i as u32 * 16), in_if, 0).unwrap().0,
                eng.redirect
            );
            assert_eq!(e.counters(&hs[i]).unwrap().packets, sent[i] + 1, "flow {i}");
        }
    });
}

/// Ports whose ifindexes share a slot of the program's direct-mapped port
/// table (ifindex modulo its size): the first owns the slot, the second is
/// found in the hash table behind it; each frame is looked up as received
/// on its own port; when the owner goes, the other takes the slot; when
/// both are gone, their frames are not the engine's.
pub fn ports_sharing_a_direct_mapped_slot_are_both_served(eng: &Engine) {
    use nicflow::offload::kernel::layout::PORT_SLOTS;
    let eng = *eng;
    in_netns(move || {
        let (ia, ib) = (3001u32, 3001 + PORT_SLOTS);
        for (i, n) in [(ia, "sa"), (ib, "sb")] {
            let a = format!("{}-{n}", eng.ifp);
            must(&[
                "ip",
                "link",
                "add",
                &a,
                "index",
                &i.to_string(),
                "type",
                "veth",
                "peer",
                "name",
                &format!("{a}p"),
            ]);
            must(&["ip", "link", "set", &a, "up"]);
            assert_eq!(ifindex(&a), i);
        }
        let o2 = eng.veth("s2");
        let mut e = eng.load(XdpEngineConfig::default());
        (eng.add_port)(&mut e, ia, 1);
        (eng.add_port)(&mut e, ib, 3);
        e.set_tx_port(0, o2).unwrap();
        let f = FrameBuilder::new(A, B).ipv4(v4(1), v4(2)).udp(1, 2).build();
        let mut k = FlowKey::default();
        extract(&f, 1, &mut k).unwrap();
        let by_port = mask(|m| m.in_port = u32::MAX);
        let enc =
            |k: &FlowKey| (eng.encode)(k, &by_port, &[DpAction::Output(2)], &ports()).unwrap();
        let h1 = e.install(&enc(&k)).unwrap();
        k.in_port = 3;
        let h3 = e.install(&enc(&k)).unwrap();
        let send = |e: &XdpEngine, i: u32| e.test_run(&f, i, 0).unwrap().0;
        assert_eq!(send(&e, ia), eng.redirect);
        assert_eq!(send(&e, ib), eng.redirect);
        assert_eq!(send(&e, ib), eng.redirect);
        assert_eq!(e.counters(&h1).unwrap().packets, 1);
        assert_eq!(e.counters(&h3).unwrap().packets, 2);
        e.remove_port(ia).unwrap();
        let no_port = e.stats().unwrap().no_port;
        assert_eq!(send(&e, ia), eng.pass);
        assert_eq!(e.stats().unwrap().no_port, no_port + 1);
        assert_eq!(send(&e, ib), eng.redirect);
        assert_eq!(e.counters(&h3).unwrap().packets, 3);
        e.remove_port(ib).unwrap();
        assert_eq!(send(&e, ib), eng.pass);
        assert_eq!(e.stats().unwrap().no_port, no_port + 2);
        assert_eq!(e.counters(&h1).unwrap().packets, 1);
    });
}

/// The output ports of [`ports`], and select group `g` in slot `g`.
struct SelectSlots;

impl PortSlots for SelectSlots {
    fn slot(&self, port: u32) -> Option<u32> {
        ports().get(&port).copied()
    }
    fn select_slot(&self, group: u32) -> Option<u32> {
        Some(group)
    }
}

/// Pin the calling thread to CPU 0: the kernel's select rotation is per
/// CPU, and `BPF_PROG_TEST_RUN` runs on the caller's CPU, so one CPU's
/// state sees the whole sequence, as userspace's one state does.
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t with CPU 0 set, for this thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Per-packet select groups (rr, wrr 3:1:2, splb with published weights)
/// in the kernel engine give, packet after packet, the bucket and bytes
/// the userspace executor gives with its own per-group state: the same
/// rotation arithmetic on both sides. Buckets rewrite the UDP source port
/// (what a multipath fabric hashes on) and the destination MAC, and go out
/// by different ports, so each output frame says which bucket ran. Also:
/// the flow's counters are the sum of its buckets', a select in the middle
/// of a list or with a bucket that floods stays in userspace with its
/// reason, and the buckets go with the flow.
pub fn per_packet_select_matches_userspace_executor(eng: &Engine) {
    use nicflow::datapath::action::{SelectBucket, SelectMethod};
    use nicflow::datapath::select::SelectStates;
    use nicflow::offload::kernel::layout::SelectWeights;
    let eng = *eng;
    in_netns(move || {
        pin_to_cpu0();
        let in_if = eng.veth("in");
        let o2 = eng.veth("o2");
        let o3 = eng.veth("o3");
        let mut e = eng.load(XdpEngineConfig::default());
        (eng.add_port)(&mut e, in_if, IN_PORT);
        e.set_tx_port(0, o2).unwrap();
        e.set_tx_port(1, o3).unwrap();
        let bucket = |index: u16, weight: u16, sport: u16, port: u32| SelectBucket {
            index,
            weight,
            actions: vec![
                DpAction::SetEthDst([2, 0, 0, 0, 0x5e, index as u8]),
                DpAction::SetTpSrc(sport),
                DpAction::Output(port),
            ],
        };
        let cases = [
            (1u32, SelectMethod::RoundRobin, [1u16, 1, 1], None),
            (2, SelectMethod::Weighted, [3, 1, 2], None),
            (3, SelectMethod::Splb, [1, 1, 1], Some([0u32, 5, 1])),
        ];
        let mut sel = SelectStates::default();
        let mut meters = nicflow::datapath::meter::Meters::default();
        for (n, (group, method, weights, published)) in cases.into_iter().enumerate() {
            let frame = FrameBuilder::new(A, B)
                .ipv4(v4(0x0900 + n as u32), v4(0x0a01))
                .udp(40000, 4789)
                .payload(b"per-packet select")
                .build();
            let mut key = FlowKey::default();
            extract(&frame, IN_PORT, &mut key).unwrap();
            let m = mask(|m| {
                m.nw_proto = 0xff;
                m.nw_src = u32::MAX;
            });
            // A rewrite before the group, in every bucket's flow.
            let actions = vec![
                DpAction::SetTos(0x20),
                DpAction::Select {
                    group,
                    method,
                    buckets: vec![
                        bucket(0, weights[0], 1001, 2),
                        bucket(1, weights[1], 1002, 3),
                        bucket(2, weights[2], 1003, 2),
                    ],
                },
            ];
            let enc = (eng.encode)(&key, &m, &actions, &SelectSlots).unwrap();
            assert_eq!(enc.buckets.len(), 3);
            let mut w = SelectWeights::default();
            for (i, d) in w.w.iter_mut().take(3).enumerate() {
                *d = match (method, published) {
                    (SelectMethod::Splb, Some(p)) => p[i],
                    (SelectMethod::RoundRobin, _) => 1,
                    _ => u32::from(weights[i]),
                };
            }
            e.set_select_weights(group, w).unwrap();
            if let Some(p) = published {
                sel.publish(group, &p);
            }
            let h = e.install(&enc).unwrap();
            let mut seen = Vec::new();
            for i in 0..24 {
                let (verdict, out) = e.test_run(&frame, in_if, 0).unwrap();
                let (r, mut tx) = userspace_exec_select(&frame, &actions, &mut meters, &mut sel);
                let (_, want) = tx.pkts.pop().expect("userspace sends every packet");
                assert!(r.drop.is_none());
                assert_eq!(verdict, eng.redirect, "{method:?} packet {i}: verdict");
                assert_eq!(
                    out,
                    want.data(),
                    "{method:?} packet {i}: the kernel chose another bucket or bytes"
                );
                assert!(all_checksums_valid(&out));
                seen.push(out[5]);
            }
            let count = |b: u8| seen.iter().filter(|x| **x == b).count();
            match method {
                SelectMethod::RoundRobin => assert_eq!(&seen[..4], &[0, 1, 2, 0]),
                SelectMethod::Weighted => {
                    assert_eq!((count(0), count(1), count(2)), (12, 4, 8), "3:1:2")
                }
                SelectMethod::Splb => {
                    assert_eq!((count(0), count(1), count(2)), (0, 20, 4), "0:5:1")
                }
            }
            let c = e.counters(&h).unwrap();
            assert_eq!(c.packets, 24, "{method:?}: the buckets count the flow");
            assert_eq!(c.bytes, 24 * frame.len() as u64);
            let batch = e.counters_batch().unwrap().expect("batched reads");
            assert_eq!(batch[&h].packets, 24);
            e.remove(&h).unwrap();
            assert_eq!(e.n_flows(), 0);
        }
        // What stays in userspace, and why.
        let frame = FrameBuilder::new(A, B)
            .ipv4(v4(0x0901), v4(0x0a01))
            .udp(40000, 4789)
            .build();
        let mut key = FlowKey::default();
        extract(&frame, IN_PORT, &mut key).unwrap();
        let m = mask(|m| m.nw_proto = 0xff);
        let sel_of = |buckets: Vec<Vec<DpAction>>| DpAction::Select {
            group: 1,
            method: SelectMethod::RoundRobin,
            buckets: buckets
                .into_iter()
                .enumerate()
                .map(|(i, actions)| SelectBucket {
                    index: i as u16,
                    weight: 1,
                    actions,
                })
                .collect(),
        };
        let one = || sel_of(vec![vec![DpAction::Output(2)], vec![DpAction::Output(3)]]);
        for (actions, reason) in [
            (vec![one(), DpAction::Output(3)], "select:not-last"),
            (
                vec![sel_of(vec![vec![DpAction::Output(2), DpAction::Output(3)]])],
                "multiple-outputs",
            ),
            (
                vec![sel_of(vec![vec![DpAction::SetTpSrc(1)]])],
                "select:bucket-output",
            ),
            (
                vec![sel_of(vec![vec![DpAction::Output(2)]; 9])],
                "select:too-many-buckets",
            ),
        ] {
            let err = (eng.encode)(&key, &m, &actions, &SelectSlots).unwrap_err();
            assert_eq!(err.reason, reason, "{actions:?}");
        }
        let err = (eng.encode)(&key, &m, &[one()], &ports()).unwrap_err();
        assert_eq!(err.reason, "select:no-slot");
    });
}
