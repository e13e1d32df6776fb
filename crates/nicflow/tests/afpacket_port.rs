//! AF_PACKET ports on real (virtual) interfaces. Needs root; skipped
//! otherwise.
//!
//! The behaviours every real-interface port type has are one body each in
//! `common::port`, run here on AF_PACKET ([`port_tests!`]) with the port
//! without `vnet_hdr` (checksums completed and super-frames segmented in
//! software, switch-end offloads off; checked on open):
//! `bridge_ping_vlan_tcp` (a VLAN tag the sender's stack kept as metadata
//! is restored, counted as `rx_vlan_restored`), `jumbo_frames_cross_the_switch`,
//! `port_reads_burst_in_order_and_transmits`. What only AF_PACKET does is
//! tested here: a full ring drops and counts, `vnet_hdr` super-frames
//! crossing whole (or segmented for a port that cannot take them), and
//! the daemon's port factory.
//!
//! Each test builds its own lab (`common::port::PortLab`, prefix `nfap`),
//! deleted on drop, panics included.

mod common;
use common::port::{
    counter, fake_peer, poll_readable, udp_burst, BoxPort, PortLab, PortType, Switch, BURST_N,
};
use common::{have, lab_possible, must};
use nicflow::port::afpacket::{AfPacketOptions, AfPacketPort};
use nicflow::port::tap::TapPort;
use nicflow::port::Port;
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::parse::{parse, L4Kind};
use std::time::{Duration, Instant};

/// The port without `vnet_hdr`: checksums completed and super-frames
/// segmented in software on receive, switch-end offloads off.
fn software_fixups() -> AfPacketOptions {
    AfPacketOptions {
        vnet_hdr: false,
        ..Default::default()
    }
}

/// AF_PACKET with software fix-ups: `open` turns the switch end's offloads
/// off (the namespace end keeps its defaults).
const AFPACKET: PortType = PortType {
    name: "AF_PACKET",
    prefix: "nfap",
    tag: "",
    open: |sw, mtu| {
        let p =
            AfPacketPort::open(sw, software_fixups()).unwrap_or_else(|e| panic!("open {sw}: {e}"));
        assert_eq!(p.mtu(), mtu, "{sw}");
        if have("ethtool") {
            let k = must(&["ethtool", "-k", sw]);
            for f in [
                "rx-checksumming",
                "tx-checksumming",
                "tcp-segmentation-offload",
                "generic-segmentation-offload",
                "generic-receive-offload",
            ] {
                assert!(k.contains(&format!("{f}: off")), "{sw}: {f} still on:\n{k}");
            }
        }
        Some(Box::new(p) as BoxPort)
    },
    metadata_vlan: true,
    idle_fd_quiet: false,
    after_close: |_| {},
    check: |_| {},
};

crate::port_tests!(AFPACKET);

/// The same behaviours with the receive ring off (`rx_ring=false`, how a
/// TC port reads its upcall device): `recvmmsg` on the plain socket, the
/// ring header's fields from `PACKET_AUXDATA`.
mod socket_rx {
    use super::*;

    pub const AFPACKET_SOCKET: PortType = PortType {
        name: "AF_PACKET (socket receive)",
        prefix: "nfas",
        open: |sw, mtu| {
            let p = AfPacketPort::open(
                sw,
                AfPacketOptions {
                    rx_ring: false,
                    ..software_fixups()
                },
            )
            .unwrap_or_else(|e| panic!("open {sw}: {e}"));
            assert_eq!(p.mtu(), mtu, "{sw}");
            Some(Box::new(p) as BoxPort)
        },
        // Readable per frame, not per retired block.
        idle_fd_quiet: true,
        ..AFPACKET
    };

    crate::port_tests!(AFPACKET_SOCKET);

    /// Super-frames cross whole through socket-receive `vnet_hdr` ports,
    /// as through ring ones.
    #[test]
    fn vnet_hdr_forwards_super_frames_intact_socket() {
        super::vnet_hdr_super_frames(
            AfPacketOptions {
                rx_ring: false,
                ..Default::default()
            },
            32,
            "w",
        );
    }

    /// The socket-call counters (issue 34's batch sizes): every
    /// `recv_batch` that reaches the socket is one `recvmmsg`, counted,
    /// an empty one also as empty, and the frames they returned; every
    /// `send_batch` one `sendmmsg`.
    #[test]
    fn socket_receive_counts_its_calls() {
        if !lab_possible() {
            return;
        }
        let net = 36;
        let lab = PortLab::new("nfas", "k", 1, net);
        let ns = lab.ns[0].as_str();
        let mut port = AfPacketPort::open(
            &lab.sw[0],
            AfPacketOptions {
                rx_ring: false,
                ..software_fixups()
            },
        )
        .unwrap_or_else(|e| panic!("open: {e}"));
        let (peer_mac, peer_ip, _) = fake_peer(ns, net);
        let fd = port.rx_fd().expect("rx fd");
        let mut pool = Vec::new();
        let c = |p: &AfPacketPort, k: &str| counter(&p.extra_counters(), k).unwrap_or(u64::MAX);
        let (c0, e0, f0, t0) = (
            c(&port, "rx_recvmmsg_calls"),
            c(&port, "rx_recvmmsg_empty"),
            c(&port, "rx_recvmmsg_frames"),
            c(&port, "tx_sendmmsg_calls"),
        );
        udp_burst(ns, peer_ip, "k");
        assert!(poll_readable(&[fd], 1000), "rx fd never became readable");
        let (mut calls, mut empty, mut frames, mut udp) = (0u64, 0u64, 0u64, 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        // Until the burst is in and then a call finds the socket empty, so
        // the empty count is exercised whatever the race with the burst.
        while Instant::now() < deadline {
            let mut out = Vec::new();
            // Small frames: none is cut, none waits in `pending`, so each
            // call reaches the socket and returns what it read.
            let n = port.recv_batch(&mut out, 8, &mut pool).unwrap();
            calls += 1;
            frames += n as u64;
            udp += out
                .iter()
                .filter(|b| parse(b.data()).is_ok_and(|l| l.l4 == L4Kind::Udp))
                .count();
            if n == 0 {
                empty += 1;
                if udp >= BURST_N {
                    break;
                }
                poll_readable(&[fd], 10);
            }
        }
        assert_eq!(udp, BURST_N);
        assert!(empty >= 1, "no receive call found the socket empty");
        assert_eq!(
            (
                c(&port, "rx_recvmmsg_calls") - c0,
                c(&port, "rx_recvmmsg_empty") - e0,
                c(&port, "rx_recvmmsg_frames") - f0
            ),
            (calls, empty, frames)
        );
        let f = FrameBuilder::new(peer_mac, [0x02, 0, 0, 0, net, 0x01])
            .ipv4(peer_ip, peer_ip)
            .udp(9, 9)
            .payload(b"k")
            .build();
        let mut pkts = vec![PacketBuf::from_slice(&f), PacketBuf::from_slice(&f)];
        assert_eq!(port.send_batch(&mut pkts, &mut Vec::new()).unwrap(), 2);
        assert_eq!(c(&port, "tx_sendmmsg_calls") - t0, 1);
    }

    /// A frame crosses a socket-receive port at once: one ping through
    /// two such ports and the test's switch loop answers well under the
    /// ring's 1 ms block timer, per round trip (the median of 20).
    #[test]
    fn socket_receive_does_not_wait_for_a_block_timer() {
        if !lab_possible() {
            return;
        }
        let net = 33;
        let lab = PortLab::new("nfas", "l", 2, net);
        let mut ports = Vec::new();
        for sw in &lab.sw {
            let p = AfPacketPort::open(
                sw,
                AfPacketOptions {
                    rx_ring: false,
                    ..Default::default()
                },
            )
            .unwrap();
            ports.push(Box::new(p) as BoxPort);
        }
        let switch = Switch::start(ports, 1500, "priority=10,actions=normal");
        let out = must(&[
            "ip",
            "netns",
            "exec",
            &lab.ns[0],
            "ping",
            "-c",
            "20",
            "-i",
            "0.02",
            "-n",
            &format!("198.18.{net}.2"),
        ]);
        drop(switch.stop());
        let mut rtts: Vec<f64> = out
            .lines()
            .filter_map(|l| l.split("time=").nth(1))
            .filter_map(|t| t.split_whitespace().next()?.parse().ok())
            .collect();
        assert!(rtts.len() >= 18, "{out}");
        rtts.sort_by(|a, b| a.total_cmp(b));
        let median = rtts[rtts.len() / 2];
        eprintln!(
            "socket receive: median RTT {median} ms over {} pings",
            rtts.len()
        );
        // Two crossings; with the ring each waits for its block timer
        // (1 ms), so a median of 2 ms or more would be the ring's.
        assert!(median < 1.0, "median RTT {median} ms: {out}");
    }
}

/// A second socket on the interface with a one-page, one-block ring that
/// nobody reads: the kernel must drop, and the port must count it. The
/// port that does read sees every datagram of the burst with its checksum
/// not ready (partial, from a local socket over veth) and completes it.
#[test]
fn full_ring_drops_and_counts() {
    if !lab_possible() {
        return;
    }
    let net = 22;
    let lab = PortLab::new("nfap", "r", 1, net);
    let mut port = AfPacketPort::open(&lab.sw[0], software_fixups()).unwrap();
    let tiny = AfPacketPort::open(
        &lab.sw[0],
        AfPacketOptions {
            block_size: 4096,
            block_count: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let (_, peer_ip, _) = fake_peer(&lab.ns[0], net);
    udp_burst(&lab.ns[0], peer_ip, "ring");
    let (mut udp, mut pool) = (0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(5);
    while udp < BURST_N && Instant::now() < deadline {
        let mut out = Vec::new();
        port.recv_batch(&mut out, 64, &mut pool).unwrap();
        udp += out
            .iter()
            .filter(|b| parse(b.data()).is_ok_and(|l| l.l4 == L4Kind::Udp))
            .count();
        poll_readable(&[port.rx_fd().unwrap()], 10);
    }
    assert_eq!(udp, BURST_N);
    let c = port.counters();
    let n = BURST_N as u64;
    assert!(
        c.csum_not_ready >= n && c.csum_completed >= n,
        "UDP from a local socket over veth arrives with partial checksums: {c:?}"
    );
    let t = tiny.counters();
    assert!(t.kernel_drops > 0, "a full ring must drop: {t:?}");
    assert!(tiny.stats().rx_dropped >= t.kernel_drops);
}

/// Two `vnet_hdr` ports (the default): TCP GSO super-frames from the
/// namespace cross the switch whole, with their partial checksums, and the
/// kernel (the peer veth) takes them as the Linux bridge would hand them
/// over. TCP must complete over IPv4 and IPv6.
#[test]
fn vnet_hdr_forwards_super_frames_intact() {
    vnet_hdr_super_frames(AfPacketOptions::default(), 30, "v");
}

fn vnet_hdr_super_frames(opts: AfPacketOptions, net: u8, tag: &str) {
    if !lab_possible() || !have("iperf3") {
        return;
    }
    let lab = PortLab::new("nfap", tag, 2, net);
    let mut ports = Vec::new();
    for sw in &lab.sw {
        let p = AfPacketPort::open(sw, opts.clone()).unwrap_or_else(|e| panic!("open {sw}: {e}"));
        assert!(p.accepts_offloads());
        ports.push(Box::new(p) as BoxPort);
    }
    if have("ethtool") {
        for sw in &lab.sw {
            let k = must(&["ethtool", "-k", sw]);
            for f in ["tx-checksumming", "tcp-segmentation-offload"] {
                assert!(k.contains(&format!("{f}: on")), "{sw}: {f} off:\n{k}");
            }
        }
    }
    let switch = Switch::start(ports, 1500, "priority=10,actions=normal");
    common::port::iperf_both(&lab, net, "AF_PACKET vnet_hdr");
    let report = switch.stop();
    let (mut kept, mut sent, mut biggest) = (0, 0, 0);
    for r in &report.ports {
        eprintln!(
            "{}: {:?}\n  counters {:?}\n  seen {:?}",
            r.name, r.stats, r.extra, r.seen
        );
        assert_eq!(r.seen.l4_bad, 0, "{}: bad L4 checksums", r.name);
        assert_eq!(
            (r.counter("rx_gso_frames"), r.counter("rx_drop_oversize")),
            (Some(0), Some(0)),
            "{:?}",
            r.extra
        );
        kept += r.counter("rx_gso_kept").unwrap();
        sent += r.counter("tx_gso_frames").unwrap();
        biggest = biggest.max(r.seen.max_untagged);
    }
    assert!(kept > 0 && sent > 0, "no super-frame crossed whole");
    assert!(biggest > 1514, "largest frame {biggest}");
}

/// A `vnet_hdr` port in, a tap port out: the tap cannot carry offloads, so
/// the bridge segments super-frames and completes checksums before the tap
/// sees them. A third port captures what the tap interface received (as
/// sent by the switch: no offload state) and checks every frame: no longer
/// than the MTU, valid L4 checksum, none partial, none needing a fix-up.
#[test]
fn vnet_hdr_in_tap_out_is_segmented() {
    if !lab_possible() || !have("iperf3") {
        return;
    }
    let net = 31;
    let lab = PortLab::new("nfap", "m", 2, net);
    let tapif = format!("nfap{}mt", std::process::id());
    let tap = TapPort::open("mirror", &tapif).expect("tap");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{tapif}/disable_ipv6"), "1");
    let mut ports = Vec::new();
    for sw in &lab.sw {
        ports
            .push(Box::new(AfPacketPort::open(sw, AfPacketOptions::default()).unwrap()) as BoxPort);
    }
    ports.push(Box::new(tap));
    let cap = AfPacketPort::open(
        &tapif,
        AfPacketOptions {
            disable_offloads: false,
            ..software_fixups()
        },
    )
    .unwrap();
    ports.push(Box::new(cap));
    let (a, b) = (&lab.sw[0], &lab.sw[1]);
    let switch = Switch::start(
        ports,
        1500,
        &format!(
            "priority=10,in_port={a},actions=output:{b},output:mirror\n\
             priority=10,in_port={b},actions=output:{a}\n\
             priority=10,in_port={tapif},actions=drop\n\
             priority=10,in_port=mirror,actions=drop\n"
        ),
    );
    common::port::iperf_both(&lab, net, "AF_PACKET vnet_hdr in, tap out");
    // Let the capture drain.
    std::thread::sleep(Duration::from_millis(200));
    let report = switch.stop();
    let va = &report.ports[0];
    let cap = report.ports.iter().find(|r| r.name == tapif).unwrap();
    eprintln!(
        "capture: counters {:?}\n  seen {:?}\n  {a}: {:?}",
        cap.extra, cap.seen, va.extra
    );
    assert!(
        counter(&va.extra, "rx_gso_kept") > Some(0),
        "no super-frame entered: {:?}",
        va.extra
    );
    let s = &cap.seen;
    assert!(s.frames > 1000, "{s:?}");
    assert_eq!((s.l4_bad, s.partial), (0, 0), "{s:?}");
    assert!(s.l4_verified > 1000, "{s:?}");
    // Nothing to segment, drop or complete: the capture port (software
    // fix-ups) completes every checksum it finds not ready.
    for k in ["rx_gso_frames", "rx_drop_oversize", "rx_csum_completed"] {
        assert_eq!(cap.counter(k), Some(0), "{k}: {:?}", cap.extra);
    }
    assert!(s.max_untagged <= 1514, "{s:?}");
}

/// `open_port` opens every kind of port under the bridge's name for it and
/// the port reports its own kind (it used to wrap each port in a renaming
/// forwarder, which once forgot to forward `rx_exhausted`).
#[test]
fn open_port_names_the_port_and_it_reports_its_kind() {
    use nicflow::control::config::{PortConfig, PortType};
    use nicflow::control::switch::open_port;
    use nicflow::offload::OffloadMode;
    if !lab_possible() {
        return;
    }
    let lab = PortLab::new("nfap", "n", 1, 21);
    for (kind, mode, want) in [
        (PortType::Afpacket, OffloadMode::Auto, "afpacket"),
        (PortType::Afxdp, OffloadMode::Auto, "afxdp"),
        (PortType::Uplink, OffloadMode::Auto, "tc"),
        (PortType::Uplink, OffloadMode::Xdp, "afxdp"),
        (PortType::Tc, OffloadMode::None, "tc"),
        // `auto` is a TC port under offload auto/tc, AF_XDP otherwise.
        (PortType::Auto, OffloadMode::Auto, "tc"),
        (PortType::Auto, OffloadMode::Tc, "tc"),
        (PortType::Auto, OffloadMode::Xdp, "afxdp"),
        (PortType::Auto, OffloadMode::None, "afxdp"),
    ] {
        let pc = PortConfig {
            name: "p9".into(),
            iface: lab.sw[0].clone(),
            kind,
            options: Default::default(),
        };
        let port = open_port(&pc, mode).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(port.name(), "p9", "{kind:?}");
        // AF_XDP may fall back to AF_PACKET on a kernel without it.
        assert!(
            port.kind() == want || (want == "afxdp" && port.kind() == "afpacket"),
            "{kind:?}: kind {}",
            port.kind()
        );
    }
}
