//! The XDP datapath (`bpf/xdp_dp.c`, `nicflow::offload::kernel`) in the real
//! kernel. Needs root (skipped with a message otherwise).
//!
//! * The behaviours both kernel engines have, one body each in
//!   `common::engine` run here on the XDP engine ([`engine_tests!`]):
//!   `verifier_accepts_the_program_and_map_sizes`,
//!   `meters_match_the_userspace_datapath`,
//!   `differential_test_run_matches_userspace_executor` (flows built from
//!   real `FlowKey`s and masks, installed all at once so the mask loop is
//!   exercised; verdict and output frame equal `datapath::execute`'s),
//!   `misses_go_to_userspace_untouched` (to the queue's AF_XDP socket;
//!   XDP_PASS without one), `drops_are_counted_by_reason_in_the_kernel`,
//!   `full_maps_refuse_installs_and_traffic_still_reaches_userspace`
//!   (`flow-map-full` / `mask-table-full`, slot reuse after removal),
//!   `counters_off_leaves_packets_and_bytes_but_not_last_used`,
//!   `batched_counter_read_covers_every_flow`,
//!   `tunnel_decap_and_encap_match_userspace` (VXLAN/Geneve against the
//!   userspace tunnel port and executor, byte for byte).
//! * `misses_and_punts_go_to_userspace`: beyond the shared body, frames
//!   the program does not parse (extension headers, bad lengths), no flow, unparsed frames and
//!   failed pre-checks all end in the XSKMAP (XDP_REDIRECT with a socket
//!   registered, XDP_PASS without), untouched.
//! * `veth_end_to_end_redirect_rewrites`: the program attached natively on
//!   a veth, a flow redirecting through the devmap to another veth, raw
//!   frames sent on one peer arriving rewritten on the other.
//!
//! Every test runs in a thread that unshared its own network namespace:
//! `ip` commands, devmap ifindexes and `BPF_PROG_TEST_RUN`'s ingress
//! ifindex all resolve there, and the interfaces vanish with the thread,
//! panics included (interface names carry the `nfxo` prefix).

mod common;

use common::dp::*;
use nicflow::datapath::DpAction;
use nicflow::offload::kernel::{
    encode, pack, AttachMode, EngineKind, XdpAction, XdpEngine, XdpEngineConfig,
};
use nicflow_flow::{extract, FlowKey};
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use nicflow_packet::tcp::FLAG_SYN;
use std::time::{Duration, Instant};

use common::engine::{xdp_socket, XDP_DROP, XDP_PASS, XDP_REDIRECT};

// The behaviours both kernel engines have: one body each in
// `common::engine`, run here on the XDP engine.
crate::engine_tests!(common::engine::XDP);

fn skip() -> bool {
    common::dp::skip("XDP")
}

fn load(cfg: XdpEngineConfig) -> XdpEngine {
    common::dp::load(EngineKind::Xdp, cfg)
}

fn userspace(frame: &[u8], actions: &[DpAction]) -> (u32, Vec<u8>) {
    userspace_verdict(frame, actions, XDP_REDIRECT, XDP_DROP)
}

#[test]
fn misses_and_punts_go_to_userspace() {
    if skip() {
        return;
    }
    in_netns(|| {
        use std::os::fd::AsRawFd;
        veth("nfxo-in", "nfxo-inp");
        veth("nfxo-o2", "nfxo-o2p");
        let in_if = ifindex("nfxo-in");
        let mut e = load(XdpEngineConfig::default());
        let tcp = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .ttl(1)
            .tcp(1, 2, FLAG_SYN)
            .build();
        // No dp_ports entry for the interface: straight to userspace.
        assert_eq!(e.test_run(&tcp, in_if, 0).unwrap(), (XDP_PASS, tcp.clone()));
        assert_eq!(e.stats().unwrap().no_port, 1);
        e.set_port(in_if, IN_PORT).unwrap();
        // No flow: miss.
        assert_eq!(e.test_run(&tcp, in_if, 0).unwrap(), (XDP_PASS, tcp.clone()));
        assert_eq!(e.stats().unwrap().miss, 1);
        // With an AF_XDP socket for the queue the miss is redirected to it.
        let xsk = xdp_socket();
        e.register_xsk(0, xsk.as_raw_fd()).unwrap();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (XDP_REDIRECT, tcp.clone())
        );

        // Frames the program does not parse itself: userspace sees them.
        let ext = FrameBuilder::new(A, B)
            .ipv6(v6(1), v6(2))
            .ipv6_hop_by_hop(0)
            .udp(1, 2)
            .build();
        let three_tags = FrameBuilder::new(A, B)
            .vlan(1)
            .vlan(2)
            .vlan(3)
            .ipv4(v4(1), v4(2))
            .build();
        let mut bad_tcp = tcp.clone();
        bad_tcp[14 + 20 + 12] = 0x40; // data offset 16 bytes
        let mut bad_total = tcp.clone();
        bad_total[14 + 2..14 + 4].copy_from_slice(&200u16.to_be_bytes());
        let mut cut_vlan = tcp[..16].to_vec();
        cut_vlan[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        let mut k = FlowKey::default();
        for f in [&three_tags, &bad_tcp, &bad_total, &cut_vlan] {
            assert!(
                extract(f, IN_PORT, &mut k).is_err(),
                "userspace refuses it too"
            );
        }
        for f in [&ext, &three_tags, &bad_tcp, &bad_total, &cut_vlan] {
            assert_eq!(e.test_run(f, in_if, 0).unwrap(), (XDP_REDIRECT, f.clone()));
        }
        assert_eq!(e.stats().unwrap().unparsed, 5);

        // Pre-checks: a flow the kernel cannot finish leaves the frame
        // untouched for userspace and is not counted.
        let mut key = FlowKey::default();
        extract(&tcp, IN_PORT, &mut key).unwrap();
        let m = mask(|m| m.nw_src = u32::MAX);
        let mut enc = encode(
            &key,
            &m,
            &[DpAction::SetIpv4Src(5), DpAction::Output(2)],
            &ports(),
        )
        .unwrap();
        let h = e.install(&enc).unwrap();
        // Output slot 0 is empty: punt.
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (XDP_REDIRECT, tcp.clone())
        );
        e.set_tx_port(0, ifindex("nfxo-o2")).unwrap();
        let (v, out) = e.test_run(&tcp, in_if, 0).unwrap();
        assert_eq!(
            (v, out),
            userspace(&tcp, &[DpAction::SetIpv4Src(5), DpAction::Output(2)])
        );
        e.clear_tx_port(0).unwrap();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (XDP_REDIRECT, tcp.clone())
        );
        // dec_ttl with TTL 1: punt.
        enc.value = pack(&[XdpAction::DecTtl, XdpAction::Drop { reason: 0 }]).unwrap();
        e.modify(&h, &enc).unwrap();
        assert_eq!(
            e.test_run(&tcp, in_if, 0).unwrap(),
            (XDP_REDIRECT, tcp.clone())
        );
        // SCTP port rewrite under a mask that does not pin the protocol.
        let sctp = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .sctp(1, 2)
            .payload(&[0; 16])
            .build();
        enc.value = pack(&[XdpAction::SetTpDst(9), XdpAction::Drop { reason: 0 }]).unwrap();
        e.modify(&h, &enc).unwrap();
        assert_eq!(
            e.test_run(&sctp, in_if, 0).unwrap(),
            (XDP_REDIRECT, sctp.clone())
        );
        assert_eq!(e.test_run(&tcp, in_if, 0).unwrap().0, XDP_DROP);
        let s = e.stats().unwrap();
        assert_eq!((s.punt, s.aborted), (4, 0));
        assert_eq!(
            e.counters(&h).unwrap().packets,
            2,
            "only executed hits count"
        );
        // dec_ttl proper, IPv4 and IPv6, against rewrite::dec_ttl.
        let tcp64 = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .ttl(64)
            .tcp(1, 2, FLAG_SYN)
            .build();
        enc.value = pack(&[XdpAction::DecTtl, XdpAction::Drop { reason: 0 }]).unwrap();
        e.modify(&h, &enc).unwrap();
        let (v, out) = e.test_run(&tcp64, in_if, 0).unwrap();
        assert_eq!(v, XDP_DROP);
        let mut want = tcp64.clone();
        let l = nicflow_packet::parse(&want).unwrap();
        assert_eq!(nicflow_packet::rewrite::dec_ttl(&mut want, &l), Some(63));
        assert_eq!(out, want);
        assert!(all_checksums_valid(&out));
        assert_eq!(e.stats().unwrap().aborted, 0);
    });
}

/// A raw AF_PACKET socket bound to `ifname` (all protocols).
struct RawSock(std::os::fd::OwnedFd);

impl RawSock {
    fn open(ifname: &str) -> RawSock {
        use std::os::fd::{AsRawFd, FromRawFd};
        let proto = (libc::ETH_P_ALL as u16).to_be() as i32;
        // SAFETY: plain socket(2), owned right away.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto) };
        assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
        // SAFETY: fresh descriptor.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let idx = ifindex(ifname);
        // SAFETY: zeroed sockaddr_ll is valid; fields set below.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto as u16;
        sa.sll_ifindex = idx as i32;
        // SAFETY: sa is a valid sockaddr_ll of the size passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        RawSock(fd)
    }

    fn send(&self, frame: &[u8]) {
        use std::os::fd::AsRawFd;
        // SAFETY: frame is a valid buffer of frame.len() bytes.
        let n = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(
            n,
            frame.len() as isize,
            "send: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Frames received within `wait` that satisfy `want`.
    fn recv_matching(&self, wait: Duration, want: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
        use std::os::fd::AsRawFd;
        let deadline = Instant::now() + wait;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        while Instant::now() < deadline {
            let mut pfd = libc::pollfd {
                fd: self.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 50) };
            if pfd.revents & libc::POLLIN == 0 {
                continue;
            }
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: buf and sa are valid for the sizes passed.
            let n = unsafe {
                libc::recvfrom(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut sa as *mut _ as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n <= 0 || sa.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let f = &buf[..n as usize];
            if want(f) {
                got.push(f.to_vec());
            }
        }
        got
    }
}

#[test]
fn veth_end_to_end_redirect_rewrites() {
    if skip() {
        return;
    }
    in_netns(|| {
        // host A (nfxo-ha) <-> switch port nfxo-sa  [xdp_dp, native]
        // switch port nfxo-sb [devmap slot 0] <-> host B (nfxo-hb)
        veth("nfxo-sa", "nfxo-ha");
        veth("nfxo-sb", "nfxo-hb");
        for i in ["nfxo-sa", "nfxo-ha", "nfxo-sb", "nfxo-hb"] {
            // Keep the hosts' own stacks quiet (no IPv6 autoconf chatter).
            let _ = common::run(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{i}.disable_ipv6=1"),
            ]);
        }
        let sa = ifindex("nfxo-sa");
        let hb = ifindex("nfxo-hb");
        let mut e = load(XdpEngineConfig::default());
        e.set_port(sa, IN_PORT).unwrap();
        e.set_tx_port(0, ifindex("nfxo-sb")).unwrap();
        e.attach(sa, AttachMode::Native)
            .expect("native XDP on veth");
        // A redirect into a veth is only delivered when its peer runs NAPI:
        // give nfxo-hb an XDP program too (no dp_ports entry there, so it
        // passes everything to the stack).
        e.attach(hb, AttachMode::Native)
            .expect("native XDP on the peer");

        let tx = RawSock::open("nfxo-ha");
        let rx = RawSock::open("nfxo-hb");
        let frames: Vec<Vec<u8>> = (0..5u16)
            .map(|i| {
                FrameBuilder::new(A, B)
                    .ipv4(v4(1), v4(0x0102))
                    .ttl(64)
                    .udp(7000 + i, 9000)
                    .payload(b"end to end through xdp_dp")
                    .build()
            })
            .collect();
        let mut key = FlowKey::default();
        extract(&frames[0], IN_PORT, &mut key).unwrap();
        let m = mask(|m| {
            m.nw_proto = 0xff;
            m.nw_dst = u32::MAX;
            m.tp_dst = 0xffff;
            m.nw_ttl = 0xff;
        });
        let actions = vec![
            DpAction::SetEthDst([2, 0, 0, 0, 0, 0xbb]),
            DpAction::SetIpv4Dst(0xc613_0202),
            DpAction::SetTtl(63),
            DpAction::SetTpDst(9999),
            DpAction::Output(2),
        ];
        let h = e
            .install(&encode(&key, &m, &actions, &ports()).unwrap())
            .unwrap();
        for f in &frames {
            tx.send(f);
        }
        let got = rx.recv_matching(Duration::from_millis(1500), |f| {
            f.len() >= 14 && f[..6] == [2, 0, 0, 0, 0, 0xbb]
        });
        let mut want: Vec<Vec<u8>> = frames.iter().map(|f| userspace(f, &actions).1).collect();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        want.sort();
        assert_eq!(got_sorted, want, "frames at the other veth's peer");
        assert!(got.iter().all(|f| all_checksums_valid(f)));
        let c = e.counters(&h).unwrap();
        assert_eq!(c.packets, frames.len() as u64);
        assert_eq!(c.bytes, frames.iter().map(|f| f.len() as u64).sum::<u64>());

        // A frame without a flow does not cross: it misses to userspace
        // (XDP_PASS here, no socket) and never shows up at host B.
        let other = FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(0x0102))
            .udp(7000, 9001)
            .build();
        let misses = e.stats().unwrap().miss;
        tx.send(&other);
        let got = rx.recv_matching(Duration::from_millis(500), |f| {
            f.len() > 37 && f[36..38] == 9001u16.to_be_bytes()
        });
        assert!(got.is_empty(), "an unmatched frame was forwarded");
        assert_eq!(e.stats().unwrap().miss, misses + 1);
        e.detach(sa).unwrap();
        e.detach(hb).unwrap();
    });
}
