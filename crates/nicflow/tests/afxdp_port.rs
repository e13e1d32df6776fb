//! AF_XDP ports on veth pairs. Needs root (skipped otherwise) and a kernel
//! that allows AF_XDP and XDP (skipped with a message otherwise).
//!
//! Each test builds its own lab: network namespaces `nfxdp-<pid>-<tag>-a/b`,
//! each holding the `veth0` end of a veth pair whose other end
//! (`nfx<pid><tag>a/b`) stays in the root namespace for the switch. The
//! namespace ends keep their default offloads (checksum offload, TSO), so the
//! switch receives what a local sender really produces. A guard deletes
//! everything on drop, panics included; the switch thread (which owns the
//! ports, so their XDP programs) is declared after the guard, so it is
//! stopped and the programs detached before the lab goes.

mod common;
use common::port::{poll_readable, show};
use common::{have, lab_possible, must, run};
use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::afpacket::{AfPacketOptions, AfPacketPort};
use nicflow::port::afxdp::{AfXdpCounters, AfXdpOptions, AfXdpPort, AttachMode, BindMode, XdpMode};
use nicflow::port::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::checksum::verify_l4;
use nicflow_packet::parse::parse;
use std::cell::RefCell;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Command, Output, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Namespaces and veth pairs of one test; removed on drop.
struct Lab {
    ns: Vec<String>,
    sw: Vec<String>,
}

impl Lab {
    /// `sides` namespaces, each with `veth0` (address `198.18.<net>.<i+1>/24`
    /// and `2001:db8:<net>::<i+1>/64`) paired with a switch end in the root
    /// namespace, up, with IPv6 off so the host stays quiet on it.
    /// `peer_txq`: TX queues of the namespace end (1 = veth default).
    fn new(tag: &str, sides: usize, net: u8, peer_txq: u32) -> Lab {
        let pid = std::process::id();
        let mut lab = Lab {
            ns: Vec::new(),
            sw: Vec::new(),
        };
        for i in 0..sides {
            let side = (b'a' + i as u8) as char;
            let ns = format!("nfxdp-{pid}-{tag}-{side}");
            let sw = format!("nfx{pid}{tag}{side}");
            assert!(sw.len() <= 15, "{sw}: interface name too long");
            must(&["ip", "netns", "add", &ns]);
            lab.ns.push(ns.clone());
            let txq = peer_txq.to_string();
            must(&[
                "ip",
                "link",
                "add",
                &sw,
                "type",
                "veth",
                "peer",
                "name",
                "veth0",
                "netns",
                &ns,
                "numtxqueues",
                &txq,
                "numrxqueues",
                &txq,
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

    /// Set the MTU of every end (namespace and switch side).
    fn set_mtu(&self, mtu: u32) {
        let m = mtu.to_string();
        for (ns, sw) in self.ns.iter().zip(&self.sw) {
            must(&["ip", "link", "set", sw, "mtu", &m]);
            must(&["ip", "-n", ns, "link", "set", "veth0", "mtu", &m]);
        }
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
        c.stdin(Stdio::null());
        c
    }

    /// `ethtool -k veth0` in namespace `i`, if ethtool is installed.
    fn ns_features(&self, i: usize) -> Option<String> {
        if !have("ethtool") {
            return None;
        }
        let o = self.exec(i, &["ethtool", "-k", "veth0"]).output().ok()?;
        Some(String::from_utf8_lossy(&o.stdout).into_owned())
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

/// What the XDP state of `ifname` is, from `ip -d link show`: "xdp"
/// (native), "xdpgeneric", or "" (none).
fn xdp_state(ifname: &str) -> String {
    let s = must(&["ip", "-d", "link", "show", "dev", ifname]);
    for w in s.split_whitespace() {
        if w == "xdpgeneric" || w == "xdp" || w == "xdpdrv" {
            return w.to_string();
        }
    }
    String::new()
}

/// Wait (up to 2 s) until `ifname` has no XDP program. Detaching happens
/// when the last reference to the BPF link's file goes; a child process
/// forked meanwhile by another test holds a copy until it execs (the
/// descriptor is close-on-exec), so the detach can lag the drop slightly.
fn wait_detached(ifname: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if xdp_state(ifname).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Open an AF_XDP port, or say why the test is skipped (kernel refuses
/// AF_XDP/XDP) and return None. Any other failure panics.
fn open_or_skip(ifname: &str, opts: AfXdpOptions) -> Option<AfXdpPort> {
    match AfXdpPort::open(ifname, opts) {
        Ok(p) => Some(p),
        Err(e) if e.is_unsupported() => {
            common::skipped(&format!("the kernel refuses AF_XDP/XDP here: {e}"));
            None
        }
        Err(e) => panic!("open {ifname}: {e}"),
    }
}

/// What the switch received on a port, checked frame by frame.
#[derive(Clone, Debug, Default)]
struct Seen {
    frames: u64,
    max_len: usize,
    l4_verified: u64,
    l4_bad: u64,
}

/// Keeps a handle on a port the bridge owns and inspects every frame the
/// port hands to the switch (after the port's fix-ups).
struct Checked {
    name: String,
    port: Rc<RefCell<AfXdpPort>>,
    seen: Rc<RefCell<Seen>>,
}

impl Port for Checked {
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
            s.max_len = s.max_len.max(b.len());
            let Ok(l) = parse(b.data()) else { continue };
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
}

/// Per port, at the end of a run.
#[derive(Debug)]
struct PortReport {
    name: String,
    mtu: usize,
    stats: PortStats,
    counters: AfXdpCounters,
    seen: Seen,
}

/// A bridge (`actions=normal`) over the given ports, run in its own thread:
/// `run_once` while frames flow, a short poll on the ports' descriptors when
/// idle, `tick` every second. Stopped (ports closed, XDP detached) on
/// `stop` or drop.
struct Switch {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<PortReport>>>,
}

impl Switch {
    fn start(ports: Vec<AfXdpPort>) -> Switch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut br = Bridge::new("br0", DatapathConfig::default());
            let mut fds = Vec::new();
            let mut handles = Vec::new();
            for p in ports {
                fds.push(p.rx_fd().unwrap());
                let name = p.name().to_string();
                let port = Rc::new(RefCell::new(p));
                let seen = Rc::new(RefCell::new(Seen::default()));
                br.add_port(Box::new(Checked {
                    name,
                    port: port.clone(),
                    seen: seen.clone(),
                }))
                .unwrap();
                handles.push((port, seen));
            }
            let mut last_tick = Instant::now();
            br.add_flow_str("actions=normal", last_tick).unwrap();
            while !flag.load(Ordering::Relaxed) {
                let now = Instant::now();
                let n = br.run_once(now);
                if now.duration_since(last_tick) >= Duration::from_secs(1) {
                    br.tick(now);
                    last_tick = now;
                }
                if n == 0 {
                    poll_readable(&fds, 5);
                }
            }
            let reports = handles
                .iter()
                .map(|(p, s)| {
                    let p = p.borrow();
                    PortReport {
                        name: p.name().to_string(),
                        mtu: p.mtu(),
                        stats: p.stats(),
                        counters: p.counters(),
                        seen: s.borrow().clone(),
                    }
                })
                .collect();
            drop(br); // closes the ports: XDP programs detached
            drop(handles);
            reports
        });
        Switch {
            stop,
            handle: Some(handle),
        }
    }

    fn stop(mut self) -> Vec<PortReport> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .unwrap()
            .join()
            .expect("switch thread panicked")
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn ping(lab: &Lab, args: &[&str]) -> Output {
    let mut v = vec!["ping", "-c", "3", "-W", "2", "-i", "0.2"];
    v.extend_from_slice(args);
    lab.exec(0, &v).output().expect("ping")
}

/// iperf3 client in namespace 0 for `secs` seconds: (bits/s received,
/// retransmits).
fn iperf(lab: &Lab, server: &str, secs: &str) -> (f64, u64) {
    let o = lab
        .exec(
            0,
            &[
                "timeout",
                "20",
                "iperf3",
                "-c",
                server,
                "-t",
                secs,
                "-J",
                "--connect-timeout",
                "3000",
            ],
        )
        .output()
        .expect("iperf3 -c");
    assert!(o.status.success(), "iperf3 -c {server}: {}", show(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("iperf3 JSON");
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    (bps, retr)
}

/// A background process, killed on drop (before the lab's namespaces go).
struct Bg(std::process::Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two namespaces joined by nicflow over AF_XDP ports in `mode`: IPv4 and
/// IPv6 ping, then a TCP bulk transfer with iperf3 (if installed). Every
/// frame the switch receives is checked: no longer than the MTU, valid L4
/// checksum. Returns the attach mode the ports got.
fn bridge_test(tag: &str, net: u8, mode: XdpMode, expect: AttachMode) {
    if !lab_possible() {
        return;
    }
    let lab = Lab::new(tag, 2, net, 1);
    let before = lab.ns_features(0);
    let mut ports = Vec::new();
    for sw in &lab.sw {
        let opts = AfXdpOptions {
            mode,
            ..Default::default()
        };
        let Some(p) = open_or_skip(sw, opts) else {
            return;
        };
        assert_eq!(p.mtu(), 1500);
        eprintln!(
            "{sw}: XDP {} mode, bound {} ({}), multi-buffer {}",
            p.attach_mode(),
            p.bind_flags(),
            if p.zerocopy() { "zero-copy" } else { "copy" },
            p.multi_buffer()
        );
        assert_eq!(p.attach_mode(), expect, "{sw}");
        let want = match expect {
            AttachMode::Native => "xdp",
            AttachMode::Generic => "xdpgeneric",
        };
        assert_eq!(xdp_state(sw), want, "{sw}: ip link must show the program");
        ports.push(p);
    }
    if let (Some(before), Some(after)) = (before, lab.ns_features(0)) {
        let line = |k: &str, s: &str| {
            s.lines()
                .find(|l| l.trim_start().starts_with(k))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        eprintln!(
            "namespace end: before attach `{}` / `{}`; after `{}` / `{}`",
            line("tcp-segmentation-offload", &before),
            line("tx-checksumming", &before),
            line("tcp-segmentation-offload", &after),
            line("tx-checksumming", &after),
        );
    }
    let switch = Switch::start(ports);

    let o = ping(&lab, &[&format!("198.18.{net}.2")]);
    assert!(o.status.success(), "IPv4 ping: {}", show(&o));
    let o = ping(&lab, &["-6", &format!("2001:db8:{net}::2")]);
    assert!(o.status.success(), "IPv6 ping: {}", show(&o));

    let tcp = have("iperf3");
    if tcp {
        let server = Bg(lab
            .exec(1, &["iperf3", "-s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s"));
        std::thread::sleep(Duration::from_millis(500));
        let (bps4, retr4) = iperf(&lab, &format!("198.18.{net}.2"), "2");
        let (bps6, retr6) = iperf(&lab, &format!("2001:db8:{net}::2"), "1");
        drop(server);
        eprintln!(
            "iperf3 through nicflow (AF_XDP, {expect} mode): IPv4 {:.1} Mbit/s \
             ({retr4} retransmits), IPv6 {:.1} Mbit/s ({retr6} retransmits)",
            bps4 / 1e6,
            bps6 / 1e6
        );
        assert!(bps4 > 0.0 && bps6 > 0.0);
    } else {
        common::skipped("TCP transfer: iperf3 not installed");
    }

    let reports = switch.stop();
    for sw in &lab.sw {
        assert!(wait_detached(sw), "{sw}: XDP program must be detached");
    }
    if let Some(f) = lab.ns_features(0) {
        let tso = f
            .lines()
            .find(|l| l.trim_start().starts_with("tcp-segmentation-offload"))
            .unwrap_or("");
        eprintln!("namespace end after detach: `{}`", tso.trim());
    }
    let mut total_csum = 0;
    for r in &reports {
        eprintln!(
            "{}: {:?}\n  counters {:?}\n  seen {:?}",
            r.name, r.stats, r.counters, r.seen
        );
        assert_eq!(
            r.seen.l4_bad, 0,
            "{}: bad L4 checksums reached the switch",
            r.name
        );
        assert!(r.seen.max_len <= r.mtu + 14, "{}: {:?}", r.name, r.seen);
        assert!(
            r.stats.rx_packets > 0 && r.stats.tx_packets > 0,
            "{}: {:?}",
            r.name,
            r.stats
        );
        assert_eq!(r.counters.rx_invalid_descs, 0);
        total_csum += r.counters.csum_completed;
        if expect == AttachMode::Native {
            // The kernel turned the peer's TSO/GSO off while we were
            // attached: no super-frames.
            assert_eq!(r.counters.gso_frames, 0, "{}: {:?}", r.name, r.counters);
        }
    }
    if tcp {
        // Local TCP senders over veth leave partial checksums.
        assert!(total_csum > 0, "{reports:?}");
        if expect == AttachMode::Generic {
            let gso: u64 = reports.iter().map(|r| r.counters.gso_frames).sum();
            eprintln!("generic mode: {gso} super-frames segmented");
        }
    }
}

#[test]
fn bridge_native_mode_ping_and_tcp() {
    bridge_test("n", 30, XdpMode::Native, AttachMode::Native);
}

#[test]
fn bridge_generic_mode_ping_and_tcp() {
    bridge_test("g", 31, XdpMode::Generic, AttachMode::Generic);
}

/// A network device in the root namespace, deleted on drop.
struct Link(String);

impl Drop for Link {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.0]);
    }
}

/// `auto` on an interface without native XDP (a Linux bridge device: no
/// `ndo_bpf`) falls back to generic mode; `native` fails with an error
/// naming the step, leaving nothing attached.
#[test]
fn auto_mode_falls_back_to_generic() {
    if !lab_possible() {
        return;
    }
    let name = format!("nfx{}f", std::process::id());
    if let Err(e) = run(&["ip", "link", "add", &name, "type", "bridge"]) {
        common::skipped(&format!("cannot create a bridge device: {e}"));
        return;
    }
    let link = Link(name);
    let sw = link.0.clone();
    must(&["ip", "link", "set", &sw, "up"]);
    let e = match AfXdpPort::open(
        &sw,
        AfXdpOptions {
            mode: XdpMode::Native,
            ..Default::default()
        },
    ) {
        Err(e) if e.is_unsupported() => {
            common::skipped(&format!("the kernel refuses AF_XDP/XDP here: {e}"));
            return;
        }
        Err(e) => e,
        Ok(p) => panic!("native attach unexpectedly accepted: {p:?}"),
    };
    eprintln!("native refused as expected: {e}");
    assert!(e.to_string().contains("native"), "{e}");
    assert!(
        wait_detached(&sw),
        "nothing left attached after a failed open"
    );
    let p = AfXdpPort::open(&sw, AfXdpOptions::default()).unwrap();
    assert_eq!(p.attach_mode(), AttachMode::Generic);
    assert_eq!(xdp_state(&sw), "xdpgeneric");
    drop(p);
    assert!(wait_detached(&sw), "detached on drop");
}

/// One port, no bridge: a UDP burst read a few frames per call, in order,
/// checksums completed; the fd polls readable; a frame sent through the
/// port is answered; an idle port's fd is not readable; a frame longer than
/// the MTU is refused and counted.
#[test]
fn port_reads_burst_in_order_and_transmits() {
    if !lab_possible() {
        return;
    }
    let lab = Lab::new("p", 1, 33, 1);
    // veth has no zero-copy support: forcing it fails, naming the step.
    match AfXdpPort::open(
        &lab.sw[0],
        AfXdpOptions {
            bind: BindMode::ZeroCopy,
            ..Default::default()
        },
    ) {
        Ok(p) => eprintln!("note: veth accepted zero-copy: {p:?}"),
        Err(e) if e.is_unsupported() => {
            common::skipped(&format!("the kernel refuses AF_XDP/XDP here: {e}"));
            return;
        }
        Err(e) => {
            eprintln!("zero-copy refused as expected: {e}");
            assert!(e.to_string().contains("XDP_ZEROCOPY"), "{e}");
            assert!(e.raw_os_error().is_some(), "{e}");
        }
    }
    assert!(
        wait_detached(&lab.sw[0]),
        "nothing left attached after a failed open"
    );
    let Some(mut port) = open_or_skip(&lab.sw[0], AfXdpOptions::default()) else {
        return;
    };
    eprintln!("{port:?}");
    let burst =
        common::port::reads_burst_in_order_and_transmits(&mut port, &lab.ns[0], 33, "nfxdp", true);
    assert_eq!(port.counters().tx_oversize, 1);
    let (peer_mac, ns_mac, mut done) = (burst.peer_mac, burst.ns_mac, Vec::new());
    let mut pool = Vec::new();

    // A big batch (more than the kernel sends per kick) all goes out: the
    // namespace counts what it receives.
    let rx_before: u64 = lab
        .exec(0, &["cat", "/sys/class/net/veth0/statistics/rx_packets"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse()
                .unwrap_or(0)
        })
        .unwrap();
    const BURST: usize = 500;
    let mut pkts: Vec<PacketBuf> = (0..BURST)
        .map(|i| {
            FrameBuilder::new(peer_mac, ns_mac)
                .ipv4(Ipv4Addr::new(198, 18, 33, 2), Ipv4Addr::new(198, 18, 33, 1))
                .udp(9, 9)
                .payload(format!("burst {i}").as_bytes())
                .build_buf()
        })
        .collect();
    assert_eq!(port.send_batch(&mut pkts, &mut done).unwrap(), BURST);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rx_after = rx_before;
    while Instant::now() < deadline && rx_after < rx_before + BURST as u64 {
        // Receiving also retries a transmission the kernel did not finish.
        let mut out = Vec::new();
        port.recv_batch(&mut out, 64, &mut pool).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        rx_after = lab
            .exec(0, &["cat", "/sys/class/net/veth0/statistics/rx_packets"])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(0)
            })
            .unwrap();
    }
    let c = port.counters();
    eprintln!(
        "tx burst: namespace got {} frames, counters {c:?}",
        rx_after - rx_before
    );
    assert!(rx_after >= rx_before + BURST as u64, "{c:?}");

    let sw = lab.sw[0].clone();
    assert_ne!(xdp_state(&sw), "");
    drop(port);
    assert!(wait_detached(&sw), "XDP program detached on drop");
}

/// Jumbo frames (MTU 9000 on every end): each ping of 8000 bytes is longer
/// than a UMEM frame, so it crosses the switch as a multi-buffer frame on
/// receive and several descriptors on transmit.
#[test]
fn jumbo_frames_cross_as_multi_buffer() {
    if !lab_possible() {
        return;
    }
    let lab = Lab::new("j", 2, 35, 1);
    lab.set_mtu(9000);
    let mut ports = Vec::new();
    for sw in &lab.sw {
        let Some(p) = open_or_skip(sw, AfXdpOptions::default()) else {
            return;
        };
        assert_eq!(p.mtu(), 9000);
        if !p.multi_buffer() {
            common::skipped("the kernel refuses multi-buffer AF_XDP (XDP_USE_SG)");
            return;
        }
        ports.push(p);
    }
    let switch = Switch::start(ports);
    let o = ping(&lab, &["-M", "do", "-s", "8000", "198.18.35.2"]);
    assert!(o.status.success(), "IPv4 jumbo ping: {}", show(&o));
    let o = ping(&lab, &["-6", "-M", "do", "-s", "8000", "2001:db8:35::2"]);
    assert!(o.status.success(), "IPv6 jumbo ping: {}", show(&o));
    let reports = switch.stop();
    for r in &reports {
        eprintln!(
            "{}: {:?}\n  counters {:?}\n  seen {:?}",
            r.name, r.stats, r.counters, r.seen
        );
        assert!(
            r.counters.multi_buffer_frames >= 6,
            "{}: {:?}",
            r.name,
            r.counters
        );
        assert!(
            r.seen.max_len > 8000 && r.seen.max_len <= 9014,
            "{:?}",
            r.seen
        );
        assert_eq!(r.seen.l4_bad, 0);
        assert_eq!(r.stats.tx_dropped, 0, "{:?}", r.stats);
    }
}

/// An 802.1Q tag that is part of the frame (sent by a raw socket) crosses an
/// AF_XDP port unchanged in both directions. (A tag the sender's stack keeps
/// as metadata -- a VLAN device over a veth with tx-vlan offload -- does
/// not: XDP never sees it. See the module docs.)
#[test]
fn inline_vlan_tags_pass_both_ways() {
    if !lab_possible() {
        return;
    }
    let lab = Lab::new("v", 1, 36, 1);
    let Some(mut port) = open_or_skip(&lab.sw[0], AfXdpOptions::default()) else {
        return;
    };
    let mut host = lab.host_port(0);
    let host_mac = common::port::veth0_mac(&lab.ns[0]);
    let far_mac = [0x02, 0, 0, 0, 0x24, 0x02];
    let mk = |src: [u8; 6], dst: [u8; 6], text: &str| {
        FrameBuilder::new(src, dst)
            .vlan((3 << 13) | 100)
            .ipv4(
                Ipv4Addr::new(198, 18, 136, 1),
                Ipv4Addr::new(198, 18, 136, 2),
            )
            .udp(4000, 4001)
            .payload(text.as_bytes())
            .build()
    };
    let up = mk(host_mac, far_mac, "tagged, from the namespace");
    let (mut done, mut pool) = (Vec::new(), Vec::new());
    assert_eq!(
        host.send_batch(&mut vec![PacketBuf::from_slice(&up)], &mut done)
            .unwrap(),
        1
    );
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.is_none() && Instant::now() < deadline {
        let mut out = Vec::new();
        port.recv_batch(&mut out, 32, &mut pool).unwrap();
        got = out
            .into_iter()
            .find(|b| b.data().get(..6) == Some(&far_mac[..]));
        poll_readable(&[port.rx_fd().unwrap()], 10);
    }
    assert_eq!(got.expect("tagged frame not received").data(), &up[..]);

    let down = mk(far_mac, host_mac, "tagged, from the switch");
    assert_eq!(
        port.send_batch(&mut vec![PacketBuf::from_slice(&down)], &mut done)
            .unwrap(),
        1
    );
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.is_none() && Instant::now() < deadline {
        let mut out = Vec::new();
        host.recv_batch(&mut out, 32, &mut pool).unwrap();
        got = out
            .into_iter()
            .find(|b| b.data().get(..6) == Some(&host_mac[..]));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(got.expect("tagged frame not delivered").data(), &down[..]);
}
