//! One test body per behaviour of the real-interface ports (AF_PACKET and
//! AF_XDP), run for each port type, as OVS's `tests/system-traffic.at`
//! runs one body on every datapath. `afpacket_port.rs` and `afxdp_port.rs`
//! build their lab (a namespace holding `veth0`, the switch end in the root
//! namespace), open their port type on it, call the body, and then check
//! what only their type does (AF_PACKET's ring overflow, AF_XDP's
//! zero-copy refusal and program detach). Helpers both files use live here
//! too.

use nicflow::port::Port;
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::checksum::verify_l4;
use nicflow_packet::parse::{parse, L4Kind};
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A command's status and output, for assertion messages.
pub fn show(o: &Output) -> String {
    format!(
        "{}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether any of `fds` polls readable within `timeout_ms`.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> bool {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` holds `p.len()` initialized pollfds for the whole call.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    r > 0
}

/// `argv` inside namespace `ns`.
pub fn in_ns(ns: &str, argv: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(argv);
    c.stdin(Stdio::null());
    c
}

/// The MAC of `veth0` in namespace `ns`.
pub fn veth0_mac(ns: &str) -> [u8; 6] {
    let out = in_ns(ns, &["cat", "/sys/class/net/veth0/address"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// Frames of a UDP burst [`reads_burst_in_order_and_transmits`] sends.
pub const BURST_N: usize = 100;

/// What [`reads_burst_in_order_and_transmits`] leaves for the port type's
/// own checks.
pub struct Burst {
    /// The fake peer the port speaks for (198.18.`net`.2).
    pub peer_mac: [u8; 6],
    /// `veth0` in the namespace (198.18.`net`.1).
    pub ns_mac: [u8; 6],
    pub peer_ip: Ipv4Addr,
    pub ns_ip: Ipv4Addr,
    /// The echo request the port transmitted.
    pub req: Vec<u8>,
}

/// One port, no bridge, on the switch end of `veth0` in namespace `ns`
/// (198.18.`net`.1/24): a burst of [`BURST_N`] UDP datagrams from a local
/// socket (partial checksums) is read at most 3 frames per call, in order,
/// every checksum complete, and the fd polls readable; an echo request
/// sent through the port is answered and the port's own transmission never
/// comes back to it; a frame longer than the MTU is refused and counted
/// while the rest of its batch goes out. With `idle_fd_quiet`, an idle
/// port's fd must not poll readable once drained (AF_XDP's rx ring; an
/// AF_PACKET ring retires blocks on a timer, so it is not asked).
/// `tag` prefixes the payloads.
pub fn reads_burst_in_order_and_transmits(
    port: &mut dyn Port,
    ns: &str,
    net: u8,
    tag: &str,
    idle_fd_quiet: bool,
) -> Burst {
    let peer_ip = Ipv4Addr::new(198, 18, net, 2);
    let ns_ip = Ipv4Addr::new(198, 18, net, 1);
    let peer_mac = [0x02, 0, 0, 0, net, 0x02];
    let lladdr = peer_mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    super::must(&[
        "ip",
        "-n",
        ns,
        "neigh",
        "add",
        &peer_ip.to_string(),
        "lladdr",
        &lladdr,
        "dev",
        "veth0",
    ]);
    let fd = port.rx_fd().expect("the port has an rx fd");
    let mut pool = Vec::new();
    if idle_fd_quiet {
        // Drain what the namespace sent while coming up (IPv6 ND, MLD...).
        std::thread::sleep(Duration::from_millis(300));
        loop {
            let mut out = Vec::new();
            if port.recv_batch(&mut out, 64, &mut pool).unwrap() == 0 {
                break;
            }
        }
        assert!(
            !poll_readable(&[fd], 0),
            "idle port: fd must not be readable"
        );
    }

    let script = format!(
        "for i in $(seq 0 {}); do echo \"{tag} $i\" > /dev/udp/{peer_ip}/9; done",
        BURST_N - 1
    );
    let o = in_ns(ns, &["bash", "-c", &script]).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert!(poll_readable(&[fd], 1000), "rx fd never became readable");

    let mut got = Vec::new();
    let mut calls = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < BURST_N && Instant::now() < deadline {
        let mut out = Vec::new();
        let n = port.recv_batch(&mut out, 3, &mut pool).unwrap();
        assert_eq!(n, out.len());
        assert!(n <= 3);
        calls += 1;
        for b in out {
            let l = parse(b.data()).unwrap();
            if l.l4 != L4Kind::Udp {
                continue; // IPv6 ND/MLD from the namespace
            }
            assert_eq!(verify_l4(b.data(), &l), Some(true), "{b:?}");
            let payload = &b.data()[usize::from(l.l4_offset) + 8..l.l4_end()];
            got.push(String::from_utf8_lossy(payload).trim().to_string());
        }
        if n == 0 {
            poll_readable(&[fd], 10);
        }
    }
    let want: Vec<String> = (0..BURST_N).map(|i| format!("{tag} {i}")).collect();
    assert_eq!(got, want, "after {calls} calls");
    let extra = port.extra_counters();
    eprintln!("burst: {calls} calls, counters {extra:?}");
    let completed = extra
        .iter()
        .find(|(k, _)| *k == "rx_csum_completed")
        .map(|(_, v)| *v);
    assert!(
        completed >= Some(BURST_N as u64),
        "UDP from a local socket over veth arrives with partial checksums: {extra:?}"
    );

    // Transmit: an echo request from the (fake) peer; the namespace answers.
    let ns_mac = veth0_mac(ns);
    let req = FrameBuilder::new(peer_mac, ns_mac)
        .ipv4(peer_ip, ns_ip)
        .icmp(8, 0)
        .echo(0x4e46, 1)
        .payload(format!("nicflow {tag}").as_bytes())
        .build();
    let s0 = port.stats();
    let (mut pkts, mut done) = (vec![PacketBuf::from_slice(&req)], Vec::new());
    assert_eq!(port.send_batch(&mut pkts, &mut done).unwrap(), 1);
    assert!(pkts.is_empty() && done.len() == 1);
    let mut reply = None;
    let deadline = Instant::now() + Duration::from_secs(3);
    while reply.is_none() && Instant::now() < deadline {
        let mut out = Vec::new();
        port.recv_batch(&mut out, 32, &mut pool).unwrap();
        for b in out {
            let d = b.data();
            assert_ne!(d, &req[..], "own transmission must not come back");
            let Ok(l) = parse(d) else { continue };
            if l.l4 == L4Kind::Icmp && d[usize::from(l.l4_offset)] == 0 {
                assert_eq!(&d[..6], &peer_mac);
                assert_eq!(verify_l4(d, &l), Some(true));
                reply = Some(b);
            }
        }
        poll_readable(&[fd], 10);
    }
    assert!(reply.is_some(), "no echo reply to the transmitted request");
    let s = port.stats();
    assert_eq!(
        (
            s.tx_packets - s0.tx_packets,
            s.tx_bytes - s0.tx_bytes,
            s.tx_dropped - s0.tx_dropped
        ),
        (1, req.len() as u64, 0),
        "{s:?}"
    );
    assert!(s.rx_packets > BURST_N as u64, "{s:?}");

    // An oversize frame is refused: dropped and counted, the rest of the
    // batch sent.
    let big = FrameBuilder::new(peer_mac, ns_mac)
        .ipv4(peer_ip, ns_ip)
        .udp(9, 9)
        .payload(&[0; 3000])
        .build();
    let s0 = port.stats();
    let mut pkts = vec![PacketBuf::from_slice(&big), PacketBuf::from_slice(&req)];
    assert_eq!(port.send_batch(&mut pkts, &mut done).unwrap(), 1);
    let s = port.stats();
    assert_eq!(
        (s.tx_packets - s0.tx_packets, s.tx_dropped - s0.tx_dropped),
        (1, 1),
        "{s:?}"
    );
    Burst {
        peer_mac,
        ns_mac,
        peer_ip,
        ns_ip,
        req,
    }
}
