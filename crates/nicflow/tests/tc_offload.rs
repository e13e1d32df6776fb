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

/// The tunnel ports ovn-controller creates: Geneve, `key=flow`,
/// `csum=true`, with OVN's option map
/// (`{class=0x0102,type=0x80,len=4}->tun_metadata0`) plus a second,
/// non-critical option on slot 1; and a fixed-key VXLAN port with
/// `csum=true`.
const GO_PORT: u32 = 9;
const VC_PORT: u32 = 10;

fn ovn_tunnels() -> (
    nicflow::port::tunnel::TunnelConfig,
    nicflow::port::tunnel::TunnelConfig,
) {
    use common::tun::*;
    let cfg = |kind, remote: u32, extra: &[(&str, &str)]| {
        let mut opts: nicflow::control::proto::PortOptions = [
            ("underlay", "ul".to_string()),
            ("local_ip", v4(0x1401).to_string()),
            ("remote_ip", v4(remote).to_string()),
            ("csum", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in extra {
            opts.insert(k.to_string(), v.to_string());
        }
        nicflow::port::tunnel::TunnelConfig::from_options(kind, &opts).unwrap()
    };
    let _ = VX_VNI;
    (
        cfg(
            nicflow_packet::tunnel::TunnelKind::Geneve,
            0x1405,
            &[
                ("key", "flow"),
                (
                    "tlv_map",
                    "{class=0x0102,type=0x80,len=4}->tun_metadata0,{class=0x0103,type=0x01,len=4}->tun_metadata1",
                ),
            ],
        ),
        cfg(
            nicflow_packet::tunnel::TunnelKind::Vxlan,
            0x1406,
            &[("key", "4243")],
        ),
    )
}

/// Output slots: port 2 in slot 0, the Geneve port in header slot 6, the
/// VXLAN one in slot 7, each with its TLV map.
struct OvnSlots(nicflow::offload::kernel::TunnelTlv);

impl nicflow::offload::kernel::PortSlots for OvnSlots {
    fn slot(&self, port: u32) -> Option<u32> {
        (port == 2).then_some(0)
    }
    fn tunnel(&self, port: u32) -> Option<nicflow::offload::kernel::TunnelSlot> {
        use nicflow::offload::kernel::{TunnelSlot, TunnelTlv};
        match port {
            GO_PORT => Some(TunnelSlot {
                slot: 6,
                flow_key: true,
                tlv: self.0,
            }),
            VC_PORT => Some(TunnelSlot {
                slot: 7,
                flow_key: false,
                tlv: TunnelTlv::default(),
            }),
            _ => None,
        }
    }
}

/// One 4-byte Geneve option TLV.
fn opt(class: u16, typ: u8, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    nicflow_packet::tunnel::push_geneve_option(&mut v, class, typ, data).unwrap();
    v
}

/// What OVN's tunnels need from the TC engine, through
/// `BPF_PROG_TEST_RUN` against the userspace executor and tunnel port:
/// * encapsulation into `csum=true` ports (Geneve with OVN's option, two
///   options, none; VXLAN) of TCP, UDP, UDP without a checksum, ICMP and
///   IPv6 frames, and UDP frames giving every 0-3 byte tail of the sum:
///   the same frames byte for byte, outer UDP checksum included (the test
///   run's skbs are not CHECKSUM_PARTIAL: the sum over the bytes);
/// * decapsulation of Geneve with options and an outer checksum: the
///   option the map names slot 0 is `tun_metadata0` in the key (matched
///   under OVN's mask), an unknown non-critical option is ignored;
/// * left whole to userspace: an unknown critical option, a TLV running
///   past the option block, OVN's option with the wrong length, and a
///   `tun_metadata0` no flow matches.
#[test]
fn geneve_options_and_csum_tunnels_match_userspace() {
    use common::tun::*;
    use nicflow::offload::kernel::layout::{
        TunRx, TunRxKey, TunTx, TUN_GENEVE, TUN_TX_CSUM, TUN_VXLAN, VNI_ANY,
    };
    use nicflow_packet::buf::{TunnelMeta, TUN_F_CSUM, TUN_F_KEY};
    if skip() {
        return;
    }
    in_netns(|| {
        veth("nftc-oi", "nftc-oip");
        veth("nftc-oo", "nftc-oop");
        veth("nftc-ou", "nftc-oup");
        let (in_if, o2, ul_if) = (ifindex("nftc-oi"), ifindex("nftc-oo"), ifindex("nftc-ou"));
        let mut e = load(XdpEngineConfig::default());
        e.set_port_upcall(in_if, IN_PORT, 0).unwrap();
        e.set_tx_port(0, o2).unwrap();
        e.set_tx_port(5, ul_if).unwrap();
        e.set_underlay(ul_if, 0, UL_MAC, 1500, 0).unwrap();
        let (gn, vx) = ovn_tunnels();
        for (cfg, port, kind, vni, slot) in [
            (&gn, GO_PORT, TUN_GENEVE, VNI_ANY, 6),
            (&vx, VC_PORT, TUN_VXLAN, 4243, 7),
        ] {
            let key = TunRxKey {
                ifindex: ul_if,
                local: u32::from(cfg.local_ip),
                remote: u32::from(cfg.remote_ip),
                vni,
                dst_port: cfg.dst_port,
                pad: 0,
            };
            e.set_tunnel_rx(key, TunRx::new(port, kind, &cfg.tlv_map))
                .unwrap();
            let tx = TunTx {
                lock: 0,
                valid: 1,
                tx_slot: 5,
                inner_mtu: 1500 - cfg.overhead() as u32,
                hdr: nicflow::port::tunnel::header_template(cfg, UL_MAC, REMOTE_MAC).unwrap(),
                flags: TUN_TX_CSUM,
            };
            e.set_tunnel_tx(slot, tx).unwrap();
        }
        let slots = OvnSlots(nicflow::offload::kernel::TunnelTlv::new(&gn.tlv_map));
        let f = tun_frames();
        let pay = b"ovn east-west over geneve with options";
        let udp4 = |sport: u16, n: usize| {
            FrameBuilder::new(A, B)
                .ipv4(v4(0x3c01), v4(0x3c65))
                .udp(sport, 4000)
                .payload(&vec![0x5a; n])
                .build()
        };
        let mut udp_no_csum = udp4(31000, 200);
        udp_no_csum[14 + 20 + 6] = 0;
        udp_no_csum[14 + 20 + 7] = 0;
        let tcp = FrameBuilder::new(A, B)
            .ipv4(v4(0x3c01), v4(0x3c66))
            .tcp(40001, 8080, FLAG_ACK | FLAG_PSH)
            .payload(pay)
            .build();
        let ports_mask = || {
            mask(|m| {
                m.nw_proto = 0xff;
                m.tp_src = 0xffff;
                m.tp_dst = 0xffff;
            })
        };
        let ovn_md = |v: u32| {
            vec![
                DpAction::SetTunnelId(0x11),
                DpAction::SetTunnelMetadata { slot: 0, value: v },
                DpAction::Output(GO_PORT),
            ]
        };
        // Encapsulations: (name, frame, actions).
        let mut encaps: Vec<(String, Vec<u8>, Vec<DpAction>)> = vec![
            ("tcp, OVN's option".into(), tcp.clone(), ovn_md(0x0003_0004)),
            (
                "ipv6 udp, two options in map order".into(),
                f.udp6.clone(),
                vec![
                    DpAction::SetTunnelMetadata {
                        slot: 1,
                        value: 0xabcd,
                    },
                    DpAction::SetTunnelMetadata { slot: 0, value: 7 },
                    DpAction::Output(GO_PORT),
                ],
            ),
            (
                "udp without a checksum, no options".into(),
                udp_no_csum,
                vec![DpAction::Output(GO_PORT)],
            ),
            (
                "icmp into csum vxlan".into(),
                f.icmp4.clone(),
                vec![DpAction::Output(VC_PORT)],
            ),
        ];
        for n in 0..4u16 {
            encaps.push((
                format!("udp, sum tail {n}"),
                udp4(32000 + n, 1000 + usize::from(n)),
                ovn_md(0x0001_0000 + u32::from(n)),
            ));
        }
        let mut handles = Vec::new();
        for (name, frame, acts) in &encaps {
            let mut k = FlowKey::default();
            extract(frame, IN_PORT, &mut k).unwrap();
            let enc = encode_tc(&k, &ports_mask(), acts, &slots)
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            handles.push(e.install(&enc).unwrap());
        }
        for ((name, frame, acts), h) in encaps.iter().zip(&handles) {
            let (_, port, uframe, utun) =
                userspace_on(frame, IN_PORT, None, acts, TC_ACT_REDIRECT, TC_ACT_SHOT);
            let cfg = if port == GO_PORT { &gn } else { &vx };
            let want = userspace_encap(cfg, &uframe, utun);
            let (verdict, out) = e.test_run(frame, in_if, 0).unwrap();
            assert_eq!(verdict, TC_ACT_REDIRECT, "{name}: verdict");
            assert_eq!(out, want, "{name}: output differs from userspace");
            // The remote's parser verifies the outer checksum.
            let d = nicflow_packet::tunnel::parse(&out, nicflow_packet::tunnel::default_kind)
                .unwrap()
                .unwrap();
            assert!(d.udp_csum_present, "{name}: outer UDP checksum");
            assert_eq!(e.counters(h).unwrap().packets, 1, "{name}");
        }
        // OVN's option on the wire: class 0x0102, type 0x80, 4 bytes, and
        // the C bit.
        let (_, first) = e.test_run(&encaps[0].1, in_if, 0).unwrap();
        assert_eq!(
            &first[42..58],
            &[2, 0x40, 0x65, 0x58, 0, 0, 0x11, 0, 1, 2, 0x80, 1, 0, 3, 0, 4]
        );

        // Decapsulation with options and an outer checksum.
        let ovn_opt = |v: u32| opt(0x0102, 0x80, &v.to_be_bytes());
        let mut two = opt(0x0999, 0x01, &[9; 8]);
        two.extend(ovn_opt(0x0005_0006));
        let decaps: Vec<(&str, Vec<u8>, Vec<u8>, u32)> = vec![
            (
                "OVN's option, csum",
                f.tcp4.clone(),
                ovn_opt(0x0001_0002),
                0x0001_0002,
            ),
            (
                "unknown non-critical option first",
                f.icmp4.clone(),
                two,
                0x0005_0006,
            ),
        ];
        let md_mask = || {
            mask(|m| {
                m.nw_proto = 0xff;
                m.tun_id = u64::MAX;
                m.tun_metadata[0] = 0x7fff_ffff;
            })
        };
        for (name, inner, opts, md0) in &decaps {
            let frame = wire_opts(&gn, inner, 0x11, true, opts);
            let t = TunnelMeta {
                id: 0x11,
                src: u32::from(gn.remote_ip),
                dst: u32::from(gn.local_ip),
                flags: TUN_F_KEY | TUN_F_CSUM,
                md_present: 1,
                metadata: [*md0, 0, 0, 0, 0, 0, 0, 0],
            };
            let mut k = FlowKey::default();
            extract(inner, GO_PORT, &mut k).unwrap();
            k.tun_id = t.id;
            k.tun_src = t.src;
            k.tun_dst = t.dst;
            k.tun_flags = t.flags;
            k.tun_metadata = t.metadata;
            let acts = [DpAction::Output(2)];
            let h = e
                .install(&encode_tc(&k, &md_mask(), &acts, &slots).unwrap())
                .unwrap();
            let (uv, _, uframe, _) =
                userspace_on(inner, GO_PORT, Some(t), &acts, TC_ACT_REDIRECT, TC_ACT_SHOT);
            let (verdict, out) = e.test_run(&frame, ul_if, 0).unwrap();
            assert_eq!((verdict, &out), (uv, &uframe), "{name}");
            assert_eq!(e.counters(&h).unwrap().packets, 1, "{name}");
        }
        // Left whole: userspace drops or decides.
        // The option says 8 data bytes; the block holds 4.
        let mut past = wire_opts(&gn, &f.tcp4, 0x11, false, &ovn_opt(1));
        past[50 + 3] = 2;
        let untouched: Vec<(&str, Vec<u8>)> = vec![
            (
                "unknown critical option",
                wire_opts(&gn, &f.tcp4, 0x11, true, &opt(0x0999, 0x81, &[1; 4])),
            ),
            ("TLV past the option block", past),
            (
                "OVN's option with 8 bytes",
                wire_opts(&gn, &f.tcp4, 0x11, false, &opt(0x0102, 0x80, &[1; 8])),
            ),
            (
                "a tun_metadata0 no flow matches",
                wire_opts(&gn, &f.tcp4, 0x11, true, &ovn_opt(0x0001_0003)),
            ),
        ];
        for (name, frame) in &untouched {
            // The wrong TLV length is this test's own doing: re-check what
            // userspace makes of the others.
            let (verdict, out) = e.test_run(frame, ul_if, 0).unwrap();
            assert_eq!(
                (verdict, &out),
                (TC_ACT_NEXT, frame),
                "{name}: not left whole"
            );
        }
        let s = e.stats().unwrap();
        eprintln!("TC ovn tunnels: {s:?}");
        assert_eq!(s.aborted, 0);
    });
}

/// Runs `f` on a thread inside the named network namespace `ns`.
fn in_named_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on this thread only, with a namespace fd we own.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// A local sender's UDP datagram (CHECKSUM_PARTIAL: the veth keeps tx
/// checksum offload on) encapsulated by `tc_dp` into a `csum=true` Geneve
/// port with OVN's option, on real veths: the outer UDP checksum comes
/// from the headers (local checksum offload), and once the inner checksum
/// is finished the frame is byte for byte what the userspace tunnel port
/// sends (the remote's parser verifies the outer checksum).
#[test]
fn partial_checksum_frames_get_the_outer_checksum_from_the_headers() {
    use common::tun::*;
    use nicflow::offload::kernel::layout::{TunTx, TUN_TX_CSUM};
    use std::time::Duration;
    if skip() {
        return;
    }
    let lab = common::NsLab::new("nftc", "lco", &["h", "sw", "r"]);
    lab.veth("eth0", "h", "p1", "sw");
    lab.veth("ul", "sw", "eth0", "r");
    lab.must("h", &["ip", "addr", "add", "198.18.40.1/24", "dev", "eth0"]);
    lab.must(
        "h",
        &[
            "ip",
            "neigh",
            "add",
            "198.18.40.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    );
    let (gn, _) = ovn_tunnels();
    let acts = vec![
        DpAction::SetTunnelId(0x11),
        DpAction::SetTunnelMetadata {
            slot: 0,
            value: 0x0003_0004,
        },
        DpAction::Output(GO_PORT),
    ];
    let (acts2, gn2) = (acts.clone(), gn.clone());
    // The engine lives on a thread in the switch's namespace until the
    // capture is over.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let sw = std::thread::spawn({
        let ns = lab.ns("sw");
        move || {
            in_named_ns(&ns, move || {
                let (p1, ul) = (ifindex("p1"), ifindex("ul"));
                let mut e = load(XdpEngineConfig::default());
                e.set_port_upcall(p1, IN_PORT, 0).unwrap();
                e.attach_tc(p1, "p1").unwrap();
                e.set_tx_port(5, ul).unwrap();
                e.set_tunnel_tx(
                    6,
                    TunTx {
                        lock: 0,
                        valid: 1,
                        tx_slot: 5,
                        inner_mtu: 1400,
                        hdr: nicflow::port::tunnel::header_template(&gn2, UL_MAC, REMOTE_MAC)
                            .unwrap(),
                        flags: TUN_TX_CSUM,
                    },
                )
                .unwrap();
                let k = FlowKey {
                    in_port: IN_PORT,
                    dl_type: 0x0800,
                    nw_proto: 17,
                    tp_dst: 4000,
                    ..FlowKey::default()
                };
                let m = mask(|m| {
                    m.nw_proto = 0xff;
                    m.tp_dst = 0xffff;
                });
                let slots = OvnSlots(nicflow::offload::kernel::TunnelTlv::new(&gn2.tlv_map));
                e.install(&encode_tc(&k, &m, &acts2, &slots).unwrap())
                    .unwrap();
                ready_tx.send(()).unwrap();
                let _ = done_rx.recv_timeout(Duration::from_secs(20));
                let s = e.stats().unwrap();
                e.detach_tc(p1).unwrap();
                s
            })
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let fd = common::oflab::raw_socket(&lab.ns("r"));
    in_named_ns(&lab.ns("h"), || {
        let s = std::net::UdpSocket::bind("198.18.40.1:0").unwrap();
        s.send_to(b"local checksum offload", "198.18.40.2:4000")
            .unwrap();
    });
    let got = common::oflab::capture(&fd, Duration::from_millis(800), |f| {
        f.len() > 60 && f[12..14] == [8, 0] && f[23] == 17 && f[36..38] == 6081u16.to_be_bytes()
    });
    done_tx.send(()).unwrap();
    let stats = sw.join().unwrap();
    eprintln!("TC partial-checksum encap: {stats:?}");
    assert_eq!(got.len(), 1, "one encapsulated frame");
    let out = &got[0].1;
    // The inner frame after the options, its UDP checksum finished here as
    // a NIC or the receiver's upcall device would.
    let at = 50 + 8;
    let mut fin = out[at..].to_vec();
    let (src, dst) = (
        std::net::Ipv4Addr::new(fin[26], fin[27], fin[28], fin[29]),
        std::net::Ipv4Addr::new(fin[30], fin[31], fin[32], fin[33]),
    );
    fin[40] = 0;
    fin[41] = 0;
    let mut c = nicflow_packet::checksum::l4_checksum_ipv4(src, dst, 17, &fin[34..]);
    if c == 0 {
        c = 0xffff;
    }
    fin[40..42].copy_from_slice(&c.to_be_bytes());
    assert_ne!(
        &out[at..],
        &fin[..],
        "the inner checksum left pending (CHECKSUM_PARTIAL)"
    );
    let mut finished = out[..at].to_vec();
    finished.extend_from_slice(&fin);
    let d = nicflow_packet::tunnel::parse(&finished, nicflow_packet::tunnel::default_kind)
        .expect("the outer UDP checksum verifies")
        .unwrap();
    assert!(d.udp_csum_present);
    let (_, _, uframe, utun) =
        userspace_on(&fin, IN_PORT, None, &acts, TC_ACT_REDIRECT, TC_ACT_SHOT);
    assert_eq!(finished, userspace_encap(&gn, &uframe, utun));
    assert_eq!((stats.encap, stats.aborted), (1, 0));
}

/// Review of ctbpf, MUST-FIX 2: a daemon that dies without unwinding
/// (no Drop: SIGKILL, OOM, abort) leaves its set-up templates in the
/// pinned program's map. The next daemon adopts the engine from the pins:
/// it must see the template map (pinned with the others) and find it
/// cleared, so no SYN is set up by the dead daemon's rules.
#[test]
fn templates_of_a_daemon_that_died_are_cleared_on_adoption() {
    use nicflow::offload::kernel::layout::{CtTpl, CtTplKey};
    use nicflow::offload::kernel::{DpKey, FlowValue};
    if skip() {
        return;
    }
    let dir = std::path::PathBuf::from(format!("/sys/fs/bpf/nf-ctpin-{}", std::process::id()));
    if !nicflow::offload::pin::is_bpffs(std::path::Path::new("/sys/fs/bpf")) {
        eprintln!("SKIPPED: no bpffs at /sys/fs/bpf");
        return;
    }
    // The pins go whatever the asserts say.
    struct Unpin(std::path::PathBuf);
    impl Drop for Unpin {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _unpin = Unpin(dir.clone());
    let cfg = XdpEngineConfig::default();
    let mut first = XdpEngine::open_kind(EngineKind::Tc, cfg, Some(&dir)).unwrap();
    assert!(first.ct_templates(), "the engine has no set-up templates");
    let tpl = CtTpl {
        gen: 7,
        out_port: 2,
        syn_slot: 0,
        mask_idx: [0; 3],
        tcp_flags: [0; 3],
        pad: 0,
        pad2: 0,
        vmask: DpKey::default(),
        vkey: DpKey::default(),
        entry: [FlowValue::default(); 3],
    };
    let key = CtTplKey {
        in_port: 1,
        dl_type: 0x0800,
        pad: 0,
    };
    first.set_ct_template(key, &tpl).unwrap();
    assert_eq!(first.ct_template_count(), 1);
    // The daemon dies: no Drop, the pins and the template stay.
    std::mem::forget(first);
    let second = XdpEngine::open_kind(EngineKind::Tc, cfg, Some(&dir)).unwrap();
    assert!(
        second.ct_templates(),
        "the adopted engine does not see the template map (not pinned)"
    );
    assert_eq!(
        second.ct_template_count(),
        0,
        "the dead daemon's template survived the adoption"
    );
    drop(second);
}
