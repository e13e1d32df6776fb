//! AF_PACKET ports on real (virtual) interfaces. Needs root; skipped
//! otherwise.
//!
//! Each test builds its own lab: network namespaces `nfap-<pid>-<tag>-a/b`,
//! each holding the `veth0` end of a veth pair whose other end
//! (`nfap<pid><tag>a/b`) stays in the root namespace for the switch. The
//! namespace ends keep their default offloads (checksum offload, TSO), so the
//! switch receives what a local sender really produces: partial checksums,
//! GSO super-frames and VLAN tags moved into metadata. Each test finishes
//! in about 5 s (iperf3 runs 2 s over IPv4, 1 s over IPv6). A guard deletes
//! everything on drop, panics included; bridges, ports and child processes
//! are declared after the guard so they are gone before it runs.

mod common;
use common::port::{poll_readable, show};
use common::{have, lab_possible, must, run};
use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::afpacket::{AfPacketCounters, AfPacketOptions, AfPacketPort};
use nicflow::port::tap::TapPort;
use nicflow::port::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::checksum::verify_l4;
use nicflow_packet::parse::parse;
use std::cell::RefCell;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Child, Command, Output, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The port without `vnet_hdr`: checksums completed and super-frames
/// segmented in software on receive, switch-end offloads off.
fn software_fixups() -> AfPacketOptions {
    AfPacketOptions {
        vnet_hdr: false,
        ..Default::default()
    }
}

/// Namespaces and veth pairs of one test; removed on drop.
struct Lab {
    ns: Vec<String>,
    sw: Vec<String>,
}

impl Lab {
    /// `sides` namespaces, each with `veth0` (address `198.18.<net>.<i+1>/24`
    /// and `2001:db8:<net>::<i+1>/64`) paired with a switch end in the root
    /// namespace, up, with IPv6 off so the host stays quiet on it.
    fn new(tag: &str, sides: usize, net: u8) -> Lab {
        let pid = std::process::id();
        let mut lab = Lab {
            ns: Vec::new(),
            sw: Vec::new(),
        };
        for i in 0..sides {
            let side = (b'a' + i as u8) as char;
            let ns = format!("nfap-{pid}-{tag}-{side}");
            let sw = format!("nfap{pid}{tag}{side}");
            assert!(sw.len() <= 15, "{sw}: interface name too long");
            must(&["ip", "netns", "add", &ns]);
            lab.ns.push(ns.clone());
            must(&[
                "ip", "link", "add", &sw, "type", "veth", "peer", "name", "veth0", "netns", &ns,
            ]);
            lab.sw.push(sw.clone());
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{sw}/disable_ipv6"), "1")
                .expect("disable IPv6 on the switch end");
            must(&["ip", "link", "set", &sw, "up"]);
            let v4 = format!("198.18.{net}.{}/24", i + 1);
            let v6 = format!("2001:db8:{net}::{}/64", i + 1);
            must(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            must(&["ip", "-n", &ns, "addr", "add", &v4, "dev", "veth0"]);
            must(&["ip", "-n", &ns, "addr", "add", &v6, "dev", "veth0", "nodad"]);
            must(&["ip", "-n", &ns, "link", "set", "veth0", "up"]);
        }
        lab
    }

    /// A VLAN subinterface `veth0.<vid>` in namespace `i` with
    /// `198.18.<net>.<i+1>/24`; false if the kernel has no 802.1Q support
    /// (CONFIG_VLAN_8021Q unset, as on some VM kernels).
    fn add_vlan(&self, i: usize, vid: u16, net: u8) -> bool {
        let ns = &self.ns[i];
        let dev = format!("veth0.{vid}");
        if let Err(e) = run(&[
            "ip",
            "-n",
            ns,
            "link",
            "add",
            "link",
            "veth0",
            "name",
            &dev,
            "type",
            "vlan",
            "id",
            &vid.to_string(),
        ]) {
            eprintln!("no VLAN subinterfaces here: {e}");
            return false;
        }
        let v4 = format!("198.18.{net}.{}/24", i + 1);
        must(&["ip", "-n", ns, "addr", "add", &v4, "dev", &dev]);
        must(&["ip", "-n", ns, "link", "set", &dev, "up"]);
        true
    }

    /// An AF_PACKET port on `veth0` *inside* namespace `i`, standing in for
    /// a host there that sends and receives raw (e.g. VLAN-tagged) frames.
    /// Opened from a thread that joined the namespace; the socket stays in
    /// it. The namespace end keeps its default offloads.
    fn host_port(&self, i: usize) -> AfPacketPort {
        let path = format!("/var/run/netns/{}", self.ns[i]);
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).expect("netns file");
            // SAFETY: plain setns(2) on a descriptor we own; it only changes
            // this short-lived thread's network namespace.
            let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
            AfPacketPort::open(
                "veth0",
                AfPacketOptions {
                    disable_offloads: false,
                    ..Default::default()
                },
            )
        })
        .join()
        .expect("netns thread")
        .expect("open veth0 in the namespace")
    }

    fn exec(&self, i: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i]]).args(args);
        c
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for sw in &self.sw {
            let _ = run(&["ip", "link", "del", sw]);
        }
        for ns in &self.ns {
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}

/// A background process, killed on drop (before the lab's namespaces go).
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the switch received on a port, checked frame by frame.
#[derive(Debug, Default)]
struct Seen {
    frames: u64,
    max_untagged: usize,
    max_tagged: usize,
    tagged: u64,
    l4_verified: u64,
    l4_bad: u64,
    /// Frames with a partial checksum (vnet_hdr ports), not verified.
    partial: u64,
}

/// Lets the test keep a handle on a port the bridge owns, and inspects every
/// frame the port hands to the switch.
struct Tap {
    name: String,
    port: Rc<RefCell<AfPacketPort>>,
    seen: Rc<RefCell<Seen>>,
}

impl Tap {
    fn new(p: AfPacketPort) -> (Tap, Rc<RefCell<AfPacketPort>>, Rc<RefCell<Seen>>) {
        let port = Rc::new(RefCell::new(p));
        let seen = Rc::new(RefCell::new(Seen::default()));
        let name = port.borrow().name().to_string();
        (
            Tap {
                name,
                port: port.clone(),
                seen: seen.clone(),
            },
            port,
            seen,
        )
    }
}

impl Port for Tap {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let start = out.len();
        let n = self.port.borrow_mut().recv_batch(out, max, pool)?;
        let mut s = self.seen.borrow_mut();
        for b in &out[start..] {
            s.frames += 1;
            let Ok(l) = parse(b.data()) else { continue };
            if l.n_vlan > 0 {
                s.tagged += 1;
                s.max_tagged = s.max_tagged.max(b.len());
            } else {
                s.max_untagged = s.max_untagged.max(b.len());
            }
            if b.csum_partial() {
                // Finished downstream (vnet_hdr): not checkable here.
                s.partial += 1;
                continue;
            }
            match verify_l4(b.data(), &l) {
                Some(true) => s.l4_verified += 1,
                Some(false) => {
                    s.l4_bad += 1;
                    eprintln!("bad L4 checksum from {}: {b:?}", self.name);
                }
                None => {}
            }
        }
        Ok(n)
    }

    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        self.port.borrow_mut().send_batch(pkts, done)
    }

    fn stats(&self) -> PortStats {
        self.port.borrow().stats()
    }

    fn rx_fd(&self) -> Option<RawFd> {
        self.port.borrow().rx_fd()
    }

    fn accepts_offloads(&self) -> bool {
        self.port.borrow().accepts_offloads()
    }
}

/// The switch's poll loop: rounds while frames flow, a short poll on the
/// ports' descriptors when idle, housekeeping every second.
struct Loop {
    br: Bridge,
    fds: Vec<RawFd>,
    last_tick: Instant,
}

impl Loop {
    fn spin_until(&mut self, deadline: Instant, mut done: impl FnMut() -> bool) {
        while Instant::now() < deadline && !done() {
            let now = Instant::now();
            let n = self.br.run_once(now);
            if now.duration_since(self.last_tick) >= Duration::from_secs(1) {
                self.br.tick(now);
                self.last_tick = now;
            }
            if n == 0 {
                poll_readable(&self.fds, 2);
            }
        }
    }

    /// Run `cmd` to completion (at most `limit`) while the switch forwards.
    fn run(&mut self, mut cmd: Command, limit: Duration) -> Output {
        let dir = tempfile::tempdir().unwrap();
        let (o, e) = (dir.path().join("out"), dir.path().join("err"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&o).unwrap())
            .stderr(std::fs::File::create(&e).unwrap())
            .spawn()
            .expect("spawn");
        let mut child = Bg(child);
        let mut status = None;
        self.spin_until(Instant::now() + limit, || {
            status = child.0.try_wait().expect("wait");
            status.is_some()
        });
        let status = match status {
            Some(s) => s,
            None => {
                let _ = child.0.kill();
                child.0.wait().unwrap()
            }
        };
        Output {
            status,
            stdout: std::fs::read(&o).unwrap(),
            stderr: std::fs::read(&e).unwrap(),
        }
    }
}

fn rule_packets(br: &mut Bridge, needle: &str) -> u64 {
    br.dump_flows_text(Instant::now())
        .iter()
        .filter(|l| l.contains(needle))
        .map(|l| {
            let i = l.find("n_packets=").expect("n_packets") + "n_packets=".len();
            l[i..].split(',').next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

fn iperf(lp: &mut Loop, lab: &Lab, server: &str, secs: &str) -> (f64, u64) {
    let o = lp.run(
        lab.exec(
            0,
            &[
                "iperf3",
                "-c",
                server,
                "-t",
                secs,
                "-J",
                "--connect-timeout",
                "3000",
            ],
        ),
        Duration::from_secs(10),
    );
    assert!(o.status.success(), "iperf3 -c {server}: {}", show(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("iperf3 JSON");
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    (bps, retr)
}

/// Two namespaces joined by nicflow: IPv4 and IPv6 ping with `normal`;
/// 802.1Q-tagged frames steered by `dl_vlan` rules (sent from raw sockets in
/// the namespaces, plus a ping over VLAN subinterfaces when the kernel has
/// 802.1Q); TCP bulk transfer with iperf3 (if installed), whose GSO
/// super-frames cannot cross unless segmented. Every frame the switch
/// receives is checked: no longer than the MTU, valid L4 checksum.
#[test]
fn bridge_between_namespaces_ping_vlan_tcp() {
    if !lab_possible() {
        return;
    }
    let lab = Lab::new("b", 2, 10);
    let vlan_devs = lab.add_vlan(0, 100, 100) && lab.add_vlan(1, 100, 100);
    let mut taps = Vec::new();
    let mut fds = Vec::new();
    let mut br = Bridge::new("br0", DatapathConfig::default());
    for sw in &lab.sw {
        let p =
            AfPacketPort::open(sw, software_fixups()).unwrap_or_else(|e| panic!("open {sw}: {e}"));
        assert_eq!(p.mtu(), 1500);
        fds.push(p.rx_fd().unwrap());
        let (tap, port, seen) = Tap::new(p);
        br.add_port(Box::new(tap)).unwrap();
        taps.push((port, seen));
    }
    if have("ethtool") {
        // `open` turned the switch ends' offloads off; the namespace ends
        // keep their defaults (TSO on), which is what the rest relies on.
        for sw in &lab.sw {
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
        let o = lab.exec(0, &["ethtool", "-k", "veth0"]).output().unwrap();
        let k = String::from_utf8_lossy(&o.stdout);
        assert!(
            k.contains("tcp-segmentation-offload: on"),
            "namespace end:\n{k}"
        );
    }
    let (a, b) = (&lab.sw[0], &lab.sw[1]);
    let now = Instant::now();
    br.add_flows_str(
        &format!(
            "priority=10,actions=normal\n\
             priority=100,in_port={a},dl_vlan=100,actions=output:{b}\n\
             priority=100,in_port={b},dl_vlan=100,actions=output:{a}\n"
        ),
        now,
    )
    .unwrap();
    let mut lp = Loop {
        br,
        fds,
        last_tick: now,
    };

    let ping = |args: &[&str]| {
        let mut v = vec!["ping", "-c", "3", "-W", "1", "-i", "0.2"];
        v.extend_from_slice(args);
        lab.exec(0, &v)
    };
    let o = lp.run(ping(&["198.18.10.2"]), Duration::from_secs(8));
    assert!(o.status.success(), "IPv4 ping: {}", show(&o));
    let o = lp.run(ping(&["-6", "2001:db8:10::2"]), Duration::from_secs(8));
    assert!(o.status.success(), "IPv6 ping: {}", show(&o));

    if vlan_devs {
        let o = lp.run(ping(&["198.18.100.2"]), Duration::from_secs(8));
        assert!(o.status.success(), "ping over VLAN 100: {}", show(&o));
    }
    // Tagged frames from raw sockets in the namespaces (always; the only
    // VLAN traffic when the kernel lacks 802.1Q devices). The receive path
    // of the switch-end veth moves the tag into metadata exactly as it does
    // for a VLAN device's hardware-accelerated tag.
    let mut hosts = [lab.host_port(0), lab.host_port(1)];
    let macs = [[0x02, 0, 0, 0, 0x64, 0x0a], [0x02, 0, 0, 0, 0x64, 0x0b]];
    let ips = [
        Ipv4Addr::new(198, 18, 100, 1),
        Ipv4Addr::new(198, 18, 100, 2),
    ];
    const TAGGED: usize = 5;
    for (from, to) in [(0usize, 1usize), (1, 0)] {
        let tci = (5 << 13) | 100; // PCP 5, VID 100
        let frames: Vec<PacketBuf> = (0..TAGGED)
            .map(|i| {
                FrameBuilder::new(macs[from], macs[to])
                    .vlan(tci)
                    .ipv4(ips[from], ips[to])
                    .udp(4000 + from as u16, 4000 + to as u16)
                    .payload(format!("tagged {from}->{to} #{i}").as_bytes())
                    .build_buf()
            })
            .collect();
        let want: Vec<Vec<u8>> = frames.iter().map(|b| b.data().to_vec()).collect();
        let mut pkts = frames;
        let mut done = Vec::new();
        assert_eq!(
            hosts[from].send_batch(&mut pkts, &mut done).unwrap(),
            TAGGED
        );
        let mut got = Vec::new();
        let mut pool = Vec::new();
        lp.spin_until(Instant::now() + Duration::from_secs(3), || {
            let mut out = Vec::new();
            hosts[to].recv_batch(&mut out, 32, &mut pool).unwrap();
            got.extend(
                out.iter()
                    .filter(|b| b.data().get(..6) == Some(&macs[to][..]))
                    .map(|b| b.data().to_vec()),
            );
            got.len() >= TAGGED
        });
        assert_eq!(
            got, want,
            "tagged frames {from}->{to} must arrive unchanged, tag included"
        );
    }
    drop(hosts);
    let vlan_a = rule_packets(&mut lp.br, &format!("in_port={a},dl_vlan=100"));
    let vlan_b = rule_packets(&mut lp.br, &format!("in_port={b},dl_vlan=100"));
    assert!(
        vlan_a >= TAGGED as u64 && vlan_b >= TAGGED as u64,
        "dl_vlan=100 rules must see the tagged frames: {vlan_a} / {vlan_b}\n{:#?}",
        lp.br.dump_flows_text(Instant::now())
    );
    let tagged: Vec<u64> = taps.iter().map(|(_, s)| s.borrow().tagged).collect();
    assert!(
        tagged.iter().all(|&t| t >= TAGGED as u64),
        "tagged frames seen: {tagged:?}"
    );

    if have("iperf3") {
        let server = Bg(lab
            .exec(1, &["iperf3", "-s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s"));
        // Give the server time to listen while the switch runs.
        lp.spin_until(Instant::now() + Duration::from_millis(500), || false);
        let (bps4, retr4) = iperf(&mut lp, &lab, "198.18.10.2", "2");
        let (bps6, retr6) = iperf(&mut lp, &lab, "2001:db8:10::2", "1");
        drop(server);
        eprintln!(
            "iperf3 through nicflow: IPv4 {:.1} Mbit/s ({retr4} retransmits), \
             IPv6 {:.1} Mbit/s ({retr6} retransmits)",
            bps4 / 1e6,
            bps6 / 1e6
        );
        assert!(bps4 > 0.0 && bps6 > 0.0);
    } else {
        common::skipped("TCP transfer: iperf3 not installed");
    }

    let mut all = Vec::new();
    for (port, seen) in &taps {
        let p = port.borrow();
        let c: AfPacketCounters = p.counters();
        let s = seen.borrow();
        eprintln!(
            "{}: {:?}\n  counters {c:?}\n  seen {s:?}",
            p.name(),
            p.stats()
        );
        assert_eq!(
            s.l4_bad,
            0,
            "{}: frames with bad L4 checksums reached the switch",
            p.name()
        );
        assert!(s.max_untagged <= p.mtu() + 14, "{}: {s:?}", p.name());
        assert!(s.max_tagged <= p.mtu() + 18, "{}: {s:?}", p.name());
        assert!(c.vlan_restored >= TAGGED as u64, "{c:?}");
        all.push(c);
    }
    // Something went through the fix-ups (ICMP is checksummed in software,
    // but IPv6 ND/MLD and TCP from a local stack are not).
    if have("iperf3") {
        let csum: u64 = all.iter().map(|c| c.csum_completed).sum();
        assert!(csum > 0, "{all:?}");
    }
    let stats = lp.br.port_stats();
    drop(lp); // stop the switch and close the ports before the lab goes
    drop(taps);
    for (name, _, s) in stats {
        assert!(s.rx_packets > 0 && s.tx_packets > 0, "{name}: {s:?}");
    }
}

/// One port, no bridge: a burst read a few frames per call (a block
/// consumed across calls), in order, with completed checksums; the fd
/// polls readable; a frame sent through the port is answered and our own
/// transmission is not received back.
#[test]
fn port_reads_burst_in_order_and_transmits() {
    if !lab_possible() {
        return;
    }
    let lab = Lab::new("p", 1, 20);
    let mut port = AfPacketPort::open(&lab.sw[0], software_fixups()).unwrap();
    // A second socket on the same interface with a one-page, one-block ring
    // that nobody reads: the kernel must drop, and the port must count it.
    let tiny = AfPacketPort::open(
        &lab.sw[0],
        AfPacketOptions {
            block_size: 4096,
            block_count: 1,
            ..Default::default()
        },
    )
    .unwrap();
    common::port::reads_burst_in_order_and_transmits(&mut port, &lab.ns[0], 20, "nfap", false);
    let c = port.counters();
    let n = common::port::BURST_N as u64;
    assert!(
        c.csum_not_ready >= n && c.csum_completed >= n,
        "UDP from a local socket over veth arrives with partial checksums: {c:?}"
    );
    let t = tiny.counters();
    assert!(t.kernel_drops > 0, "a full ring must drop: {t:?}");
    assert!(tiny.stats().rx_dropped >= t.kernel_drops);
    drop(tiny);
    drop(port);
}

/// Start `iperf3 -s` in namespace 1 and run IPv4 (2 s) and IPv6 (1 s)
/// transfers from namespace 0 through the switch; returns the rates.
fn iperf_both(lp: &mut Loop, lab: &Lab, net: u8) -> (f64, f64) {
    let server = Bg(lab
        .exec(1, &["iperf3", "-s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -s"));
    lp.spin_until(Instant::now() + Duration::from_millis(500), || false);
    let (bps4, retr4) = iperf(lp, lab, &format!("198.18.{net}.2"), "2");
    let (bps6, retr6) = iperf(lp, lab, &format!("2001:db8:{net}::2"), "1");
    drop(server);
    eprintln!(
        "iperf3 through nicflow: IPv4 {:.1} Mbit/s ({retr4} retransmits), \
         IPv6 {:.1} Mbit/s ({retr6} retransmits)",
        bps4 / 1e6,
        bps6 / 1e6
    );
    (bps4, bps6)
}

/// Two `vnet_hdr` ports (the default): TCP GSO super-frames from the
/// namespace cross the switch whole, with their partial checksums, and the
/// kernel (the peer veth) takes them as the Linux bridge would hand them
/// over. TCP must complete over IPv4 and IPv6.
#[test]
fn vnet_hdr_forwards_super_frames_intact() {
    if !lab_possible() || !have("iperf3") {
        return;
    }
    let lab = Lab::new("v", 2, 30);
    let mut taps = Vec::new();
    let mut fds = Vec::new();
    let mut br = Bridge::new("br0", DatapathConfig::default());
    for sw in &lab.sw {
        let p = AfPacketPort::open(sw, AfPacketOptions::default())
            .unwrap_or_else(|e| panic!("open {sw}: {e}"));
        assert!(p.accepts_offloads());
        fds.push(p.rx_fd().unwrap());
        let (tap, port, seen) = Tap::new(p);
        br.add_port(Box::new(tap)).unwrap();
        taps.push((port, seen));
    }
    if have("ethtool") {
        for sw in &lab.sw {
            let k = must(&["ethtool", "-k", sw]);
            for f in ["tx-checksumming", "tcp-segmentation-offload"] {
                assert!(k.contains(&format!("{f}: on")), "{sw}: {f} off:\n{k}");
            }
        }
    }
    let now = Instant::now();
    br.add_flows_str("priority=10,actions=normal\n", now)
        .unwrap();
    let mut lp = Loop {
        br,
        fds,
        last_tick: now,
    };
    let (bps4, bps6) = iperf_both(&mut lp, &lab, 30);
    assert!(bps4 > 0.0 && bps6 > 0.0);
    let mut kept = 0;
    let mut sent = 0;
    let mut biggest = 0;
    for (port, seen) in &taps {
        let p = port.borrow();
        let c = p.counters();
        let s = seen.borrow();
        eprintln!(
            "{}: {:?}\n  counters {c:?}\n  seen {s:?}",
            p.name(),
            p.stats()
        );
        assert_eq!(s.l4_bad, 0, "{}: bad L4 checksums", p.name());
        assert_eq!((c.gso_frames, c.oversize_dropped), (0, 0), "{c:?}");
        kept += c.rx_gso_kept;
        sent += c.tx_gso_frames;
        biggest = biggest.max(s.max_untagged);
    }
    assert!(kept > 0 && sent > 0, "no super-frame crossed whole");
    assert!(biggest > 1514, "largest frame {biggest}");
    drop(lp);
    drop(taps);
}

/// A `vnet_hdr` port in, a tap port out: the tap cannot carry offloads, so
/// the bridge segments super-frames and completes checksums before the tap
/// sees them. A third port captures what the tap interface received (as
/// sent by the switch: no offload state) and checks every frame: no longer
/// than the MTU, valid L4 checksum.
#[test]
fn vnet_hdr_in_tap_out_is_segmented() {
    if !lab_possible() || !have("iperf3") {
        return;
    }
    let lab = Lab::new("m", 2, 31);
    let tapif = format!("nfap{}mt", std::process::id());
    let tap = TapPort::open("mirror", &tapif).expect("tap");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{tapif}/disable_ipv6"), "1");
    let mut fds = Vec::new();
    let mut br = Bridge::new("br0", DatapathConfig::default());
    let mut vports = Vec::new();
    for sw in &lab.sw {
        let p = AfPacketPort::open(sw, AfPacketOptions::default()).unwrap();
        fds.push(p.rx_fd().unwrap());
        let (t, port, _) = Tap::new(p);
        br.add_port(Box::new(t)).unwrap();
        vports.push(port);
    }
    br.add_port(Box::new(tap)).unwrap();
    let cap = AfPacketPort::open(
        &tapif,
        AfPacketOptions {
            disable_offloads: false,
            ..software_fixups()
        },
    )
    .unwrap();
    fds.push(cap.rx_fd().unwrap());
    let (t, cap, cap_seen) = Tap::new(cap);
    br.add_port(Box::new(t)).unwrap();
    let (a, b) = (&lab.sw[0], &lab.sw[1]);
    let now = Instant::now();
    br.add_flows_str(
        &format!(
            "priority=10,in_port={a},actions=output:{b},output:mirror\n\
             priority=10,in_port={b},actions=output:{a}\n\
             priority=10,in_port={tapif},actions=drop\n\
             priority=10,in_port=mirror,actions=drop\n"
        ),
        now,
    )
    .unwrap();
    let mut lp = Loop {
        br,
        fds,
        last_tick: now,
    };
    let (bps4, bps6) = iperf_both(&mut lp, &lab, 31);
    assert!(bps4 > 0.0 && bps6 > 0.0);
    // Let the capture drain.
    lp.spin_until(Instant::now() + Duration::from_millis(200), || false);
    let c = cap.borrow().counters();
    let s = cap_seen.borrow();
    let va = vports[0].borrow().counters();
    eprintln!("capture: counters {c:?}\n  seen {s:?}\n  {a}: {va:?}");
    assert!(va.rx_gso_kept > 0, "no super-frame entered: {va:?}");
    assert!(s.frames > 1000, "{s:?}");
    assert_eq!(s.l4_bad, 0, "{s:?}");
    assert!(s.l4_verified > 1000, "{s:?}");
    assert_eq!(
        c.gso_frames + c.oversize_dropped + c.csum_not_ready,
        0,
        "{c:?}"
    );
    assert!(c.max_frame_len <= 1514, "{c:?}");
    drop(s);
    drop(lp);
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
    let lab = Lab::new("n", 1, 21);
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
