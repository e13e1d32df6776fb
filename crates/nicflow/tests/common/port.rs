//! One test body per behaviour of the real-interface ports (AF_PACKET and
//! AF_XDP), run for each port type, as OVS's `tests/system-traffic.at`
//! runs one body on every datapath.
//!
//! A [`PortType`] says what differs between the port types as data: how a
//! port is opened on an interface (and what its type promises once open:
//! MTU, attach mode, offload state), whether it sees a VLAN tag the
//! sender's stack kept as metadata, and what must hold once it is closed
//! (AF_XDP: the program detached). The bodies here hold the behaviour;
//! `afpacket_port.rs` and `afxdp_port.rs` are [`port_tests!`](crate::port_tests)
//! with their type (AF_XDP once per attach mode, in a module named after
//! it) plus the tests of what only one type does (AF_PACKET's ring
//! overflow and `vnet_hdr` super-frames, AF_XDP's zero-copy refusal and
//! auto fallback).
//!
//! The lab ([`PortLab`]): network namespaces `<prefix>-<pid>-<tag>-<side>`,
//! each holding the `veth0` end of a veth pair whose other end
//! (`<prefix><pid><tag><side>`) stays in the root namespace for the switch.
//! The namespace ends keep their default offloads (checksum offload, TSO),
//! so the switch receives what a local sender really produces: partial
//! checksums, GSO super-frames, VLAN tags moved into metadata. The lab
//! deletes everything on drop, panics included; the switch ([`Switch`], a
//! thread owning the ports) and child processes ([`Bg`]) are declared after
//! it, so they are gone before it runs.

use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::afpacket::{AfPacketOptions, AfPacketPort};
use nicflow::port::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::checksum::verify_l4;
use nicflow_packet::parse::{parse, L4Kind};
use std::cell::RefCell;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Child, Command, Output, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{have, must, run};

/// A port as the shared bodies hold it: moved into the switch thread.
pub type BoxPort = Box<dyn Port + Send>;

/// What differs between the port types, as data.
pub struct PortType {
    /// For messages: `AF_PACKET`, `AF_XDP native`, ...
    pub name: &'static str,
    /// Prefix of the lab's namespaces and interfaces (`nfap`, `nfx`).
    pub prefix: &'static str,
    /// Tells the labs of two types sharing a prefix apart (AF_XDP modes):
    /// appended to each body's tag. At most one character, for IFNAMSIZ.
    pub tag: &'static str,
    /// Open a port of this type on `ifname`, whose MTU is `mtu`, checking
    /// what the type promises once open (MTU, attach mode, offloads).
    /// `None`: the kernel refuses the type here; the test is skipped with
    /// a message.
    pub open: fn(ifname: &str, mtu: usize) -> Option<BoxPort>,
    /// Whether a VLAN tag the sending stack kept as metadata (a VLAN
    /// device over a veth with tx-vlan offload) reaches the switch.
    /// AF_PACKET restores it (counted as `rx_vlan_restored`); XDP never
    /// sees it, so for AF_XDP the namespace ends send their tags inline
    /// (tx-vlan offload off).
    pub metadata_vlan: bool,
    /// Whether an idle port's fd stays unreadable once drained (AF_XDP's rx
    /// ring; an AF_PACKET ring retires blocks on a timer).
    pub idle_fd_quiet: bool,
    /// What must hold once the ports on these interfaces are closed.
    pub after_close: fn(sw: &[String]),
    /// Checks of one port's report after a bridge run, beyond the shared
    /// ones.
    pub check: fn(&PortReport),
}

/// One `#[test]` per shared behaviour for port type `$ty` (a path to a
/// [`PortType`] const). The test names are the behaviours'; the test
/// binary (and, for AF_XDP, the module) names the type.
#[macro_export]
macro_rules! port_tests {
    ($ty:path) => {
        $crate::port_tests!(@one $ty, bridge_ping_vlan_tcp);
        $crate::port_tests!(@one $ty, jumbo_frames_cross_the_switch);
        $crate::port_tests!(@one $ty, port_reads_burst_in_order_and_transmits);
    };
    (@one $ty:path, $name:ident) => {
        #[test]
        fn $name() {
            if !$crate::common::lab_possible() {
                return;
            }
            $crate::common::port::$name(&$ty);
        }
    };
}

/// Namespaces and veth pairs of one test; removed on drop.
pub struct PortLab {
    pub ns: Vec<String>,
    /// The switch ends, in the root namespace.
    pub sw: Vec<String>,
}

impl PortLab {
    /// `sides` namespaces, each with `veth0` (address `198.18.<net>.<i+1>/24`
    /// and `2001:db8:<net>::<i+1>/64`) paired with a switch end in the root
    /// namespace, up, with IPv6 off on the switch end so the host stays
    /// quiet on it. One TX and RX queue per end.
    pub fn new(prefix: &str, tag: &str, sides: usize, net: u8) -> PortLab {
        let pid = std::process::id();
        let mut lab = PortLab {
            ns: Vec::new(),
            sw: Vec::new(),
        };
        for i in 0..sides {
            let side = (b'a' + i as u8) as char;
            let ns = format!("{prefix}-{pid}-{tag}-{side}");
            let sw = format!("{prefix}{pid}{tag}{side}");
            assert!(sw.len() <= 15, "{sw}: interface name too long");
            must(&["ip", "netns", "add", &ns]);
            lab.ns.push(ns.clone());
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
                "1",
                "numrxqueues",
                "1",
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
    pub fn set_mtu(&self, mtu: usize) {
        let m = mtu.to_string();
        for (ns, sw) in self.ns.iter().zip(&self.sw) {
            must(&["ip", "link", "set", sw, "mtu", &m]);
            must(&["ip", "-n", ns, "link", "set", "veth0", "mtu", &m]);
        }
    }

    /// A VLAN subinterface `veth0.<vid>` in namespace `i` with
    /// `198.18.<net>.<i+1>/24`; false if the kernel has no 802.1Q support
    /// (CONFIG_VLAN_8021Q unset, as on some VM kernels).
    pub fn add_vlan(&self, i: usize, vid: u16, net: u8) -> bool {
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
    pub fn host_port(&self, i: usize) -> AfPacketPort {
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

    /// `args` in namespace `i`.
    pub fn exec(&self, i: usize, args: &[&str]) -> Command {
        in_ns(&self.ns[i], args)
    }

    /// `ethtool -k veth0` in namespace `i`, if ethtool is installed.
    pub fn ns_features(&self, i: usize) -> Option<String> {
        if !have("ethtool") {
            return None;
        }
        let o = self.exec(i, &["ethtool", "-k", "veth0"]).output().ok()?;
        Some(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// Frames `veth0` in namespace `i` received so far.
    pub fn ns_rx_packets(&self, i: usize) -> u64 {
        let o = self
            .exec(i, &["cat", "/sys/class/net/veth0/statistics/rx_packets"])
            .output()
            .expect("cat rx_packets");
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    }
}

impl Drop for PortLab {
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
pub struct Bg(pub Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the switch received on a port (after the port's fix-ups), checked
/// frame by frame.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub frames: u64,
    pub max_untagged: usize,
    pub max_tagged: usize,
    pub tagged: u64,
    pub l4_verified: u64,
    pub l4_bad: u64,
    /// Frames with a partial checksum (`vnet_hdr` ports), not verified.
    pub partial: u64,
}

/// A port the bridge owns, inspected on every frame it hands the switch.
struct Checked {
    name: String,
    port: Rc<RefCell<BoxPort>>,
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

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        self.port.borrow().extra_counters()
    }

    fn rx_fd(&self) -> Option<RawFd> {
        self.port.borrow().rx_fd()
    }

    fn accepts_offloads(&self) -> bool {
        self.port.borrow().accepts_offloads()
    }

    fn kind(&self) -> &'static str {
        self.port.borrow().kind()
    }
}

/// Per port, at the end of a switch run.
#[derive(Debug)]
pub struct PortReport {
    pub name: String,
    /// The MTU the ports were opened for.
    pub mtu: usize,
    pub stats: PortStats,
    /// The port's own counters ([`Port::extra_counters`], what `nicflow
    /// stats` shows).
    pub extra: Vec<(&'static str, u64)>,
    pub seen: Seen,
}

impl PortReport {
    /// Counter `name` of the port, if its type has it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        counter(&self.extra, name)
    }
}

/// Counter `name` of `extra` (from [`Port::extra_counters`]).
pub fn counter(extra: &[(&'static str, u64)], name: &str) -> Option<u64> {
    extra.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

/// What a switch run leaves: each port's report and the flow table.
pub struct SwitchReport {
    pub ports: Vec<PortReport>,
    /// `dump_flows_text` at the end.
    pub flows: Vec<String>,
}

impl SwitchReport {
    /// Packets matched by the rules whose text contains `needle`.
    pub fn rule_packets(&self, needle: &str) -> u64 {
        self.flows
            .iter()
            .filter(|l| l.contains(needle))
            .map(|l| {
                let i = l.find("n_packets=").expect("n_packets") + "n_packets=".len();
                l[i..].split(',').next().unwrap().parse::<u64>().unwrap()
            })
            .sum()
    }
}

/// A bridge over the given ports with `flows`, run in its own thread:
/// `run_once` while frames flow, a short poll on the ports' descriptors
/// when idle, `tick` every second. Stopped (ports closed, AF_XDP programs
/// detached) on [`Switch::stop`] or drop.
pub struct Switch {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<SwitchReport>>,
}

impl Switch {
    /// `mtu`: what the ports were opened for, for the reports.
    pub fn start(ports: Vec<BoxPort>, mtu: usize, flows: &str) -> Switch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let flows = flows.to_string();
        let handle = std::thread::spawn(move || {
            let mut br = Bridge::new("br0", DatapathConfig::default());
            let mut fds = Vec::new();
            let mut handles = Vec::new();
            for p in ports {
                fds.extend(p.rx_fd());
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
            br.add_flows_str(&flows, last_tick).unwrap();
            while !flag.load(Ordering::Relaxed) {
                let now = Instant::now();
                let n = br.run_once(now);
                if now.duration_since(last_tick) >= Duration::from_secs(1) {
                    br.tick(now);
                    last_tick = now;
                }
                if n == 0 {
                    poll_readable(&fds, 2);
                }
            }
            let ports = handles
                .iter()
                .map(|(p, s)| {
                    let p = p.borrow();
                    PortReport {
                        name: p.name().to_string(),
                        mtu,
                        stats: p.stats(),
                        extra: p.extra_counters(),
                        seen: s.borrow().clone(),
                    }
                })
                .collect();
            let flows = br.dump_flows_text(Instant::now());
            drop(br); // closes the ports: AF_XDP programs detached
            drop(handles);
            SwitchReport { ports, flows }
        });
        Switch {
            stop,
            handle: Some(handle),
        }
    }

    /// Stop the switch, close its ports, and report.
    pub fn stop(mut self) -> SwitchReport {
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

/// `ping -c 3` from namespace 0 of `lab` with `args`.
pub fn ping(lab: &PortLab, args: &[&str]) -> Output {
    let mut v = vec!["ping", "-c", "3", "-W", "2", "-i", "0.2"];
    v.extend_from_slice(args);
    lab.exec(0, &v).output().expect("ping")
}

/// iperf3 client in namespace 0 for `secs` seconds: (bits/s received,
/// retransmits).
pub fn iperf(lab: &PortLab, server: &str, secs: &str) -> (f64, u64) {
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

/// Start `iperf3 -s` in namespace 1 and run IPv4 (2 s) and IPv6 (1 s)
/// transfers from namespace 0 through the switch; both must move data.
pub fn iperf_both(lab: &PortLab, net: u8, what: &str) {
    let server = Bg(lab
        .exec(1, &["iperf3", "-s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -s"));
    std::thread::sleep(Duration::from_millis(500));
    let (bps4, retr4) = iperf(lab, &format!("198.18.{net}.2"), "2");
    let (bps6, retr6) = iperf(lab, &format!("2001:db8:{net}::2"), "1");
    drop(server);
    eprintln!(
        "iperf3 through nicflow ({what}): IPv4 {:.1} Mbit/s ({retr4} retransmits), \
         IPv6 {:.1} Mbit/s ({retr6} retransmits)",
        bps4 / 1e6,
        bps6 / 1e6
    );
    assert!(bps4 > 0.0 && bps6 > 0.0, "{what}: no TCP throughput");
}

/// Open a port of type `ty` on each of `lab`'s switch ends; None if the
/// type is refused here (skipped, said why).
fn open_all(ty: &PortType, lab: &PortLab, mtu: usize) -> Option<Vec<BoxPort>> {
    lab.sw.iter().map(|sw| (ty.open)(sw, mtu)).collect()
}

/// Frames of each direction in [`bridge_ping_vlan_tcp`]'s tagged exchange.
pub const TAGGED: usize = 5;

/// Two namespaces joined by nicflow over ports of type `ty`: IPv4 and IPv6
/// ping with `normal`; 802.1Q-tagged frames steered by `dl_vlan` rules
/// both ways (sent from raw sockets in the namespaces: the tag is part of
/// the frame, and arrives unchanged), plus a ping over VLAN subinterfaces
/// when the kernel has 802.1Q; TCP bulk transfer with iperf3 (if
/// installed), whose GSO super-frames cannot cross unless segmented. Every
/// frame the switch receives is checked: no longer than the MTU, valid L4
/// checksum.
pub fn bridge_ping_vlan_tcp(ty: &PortType) {
    let net = 10;
    let lab = PortLab::new(ty.prefix, &format!("b{}", ty.tag), 2, net);
    if let Some(k) = lab.ns_features(0) {
        // What the rest relies on: the namespace ends keep TSO.
        assert!(
            k.contains("tcp-segmentation-offload: on"),
            "namespace end:\n{k}"
        );
    }
    let mut vlan_devs = lab.add_vlan(0, 100, 100) && lab.add_vlan(1, 100, 100);
    if vlan_devs && !ty.metadata_vlan {
        // The tag must be in the frame for this type to see it.
        if have("ethtool") {
            for i in 0..2 {
                let o = lab
                    .exec(i, &["ethtool", "-K", "veth0", "txvlan", "off"])
                    .output()
                    .unwrap();
                assert!(o.status.success(), "txvlan off: {}", show(&o));
            }
        } else {
            super::skipped("ping over VLAN subinterfaces: needs ethtool for inline tags");
            vlan_devs = false;
        }
    }
    let Some(ports) = open_all(ty, &lab, 1500) else {
        return;
    };
    let (a, b) = (&lab.sw[0], &lab.sw[1]);
    let switch = Switch::start(
        ports,
        1500,
        &format!(
            "priority=10,actions=normal\n\
             priority=100,in_port={a},dl_vlan=100,actions=output:{b}\n\
             priority=100,in_port={b},dl_vlan=100,actions=output:{a}\n"
        ),
    );

    let o = ping(&lab, &[&format!("198.18.{net}.2")]);
    assert!(o.status.success(), "{}: IPv4 ping: {}", ty.name, show(&o));
    let o = ping(&lab, &["-6", &format!("2001:db8:{net}::2")]);
    assert!(o.status.success(), "{}: IPv6 ping: {}", ty.name, show(&o));
    if vlan_devs {
        let o = ping(&lab, &["198.18.100.2"]);
        assert!(
            o.status.success(),
            "{}: ping over VLAN 100: {}",
            ty.name,
            show(&o)
        );
    }

    // Tagged frames from raw sockets in the namespaces (always; the only
    // VLAN traffic when the kernel lacks 802.1Q devices).
    let mut hosts = [lab.host_port(0), lab.host_port(1)];
    let macs = [[0x02, 0, 0, 0, 0x64, 0x0a], [0x02, 0, 0, 0, 0x64, 0x0b]];
    let ips = [
        Ipv4Addr::new(198, 18, 100, 1),
        Ipv4Addr::new(198, 18, 100, 2),
    ];
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
        let deadline = Instant::now() + Duration::from_secs(3);
        while got.len() < TAGGED && Instant::now() < deadline {
            let mut out = Vec::new();
            hosts[to].recv_batch(&mut out, 32, &mut pool).unwrap();
            got.extend(
                out.iter()
                    .filter(|b| b.data().get(..6) == Some(&macs[to][..]))
                    .map(|b| b.data().to_vec()),
            );
            poll_readable(&[hosts[to].rx_fd().unwrap()], 10);
        }
        assert_eq!(
            got, want,
            "{}: tagged frames {from}->{to} must arrive unchanged, tag included",
            ty.name
        );
    }
    drop(hosts);

    let tcp = have("iperf3");
    if tcp {
        iperf_both(&lab, net, ty.name);
    } else {
        super::skipped("TCP transfer: iperf3 not installed");
    }

    let report = switch.stop();
    (ty.after_close)(&lab.sw);
    let vlan_a = report.rule_packets(&format!("in_port={a},dl_vlan=100"));
    let vlan_b = report.rule_packets(&format!("in_port={b},dl_vlan=100"));
    assert!(
        vlan_a >= TAGGED as u64 && vlan_b >= TAGGED as u64,
        "dl_vlan=100 rules must see the tagged frames: {vlan_a} / {vlan_b}\n{:#?}",
        report.flows
    );
    let mut csum = 0;
    for r in &report.ports {
        eprintln!(
            "{}: {:?}\n  counters {:?}\n  seen {:?}",
            r.name, r.stats, r.extra, r.seen
        );
        assert_eq!(
            r.seen.l4_bad, 0,
            "{}: frames with bad L4 checksums reached the switch",
            r.name
        );
        assert!(
            r.seen.max_untagged <= r.mtu + 14,
            "{}: {:?}",
            r.name,
            r.seen
        );
        assert!(r.seen.max_tagged <= r.mtu + 18, "{}: {:?}", r.name, r.seen);
        assert!(r.seen.tagged >= TAGGED as u64, "{}: {:?}", r.name, r.seen);
        assert!(
            r.stats.rx_packets > 0 && r.stats.tx_packets > 0,
            "{}: {:?}",
            r.name,
            r.stats
        );
        if ty.metadata_vlan {
            let restored = r.counter("rx_vlan_restored").unwrap_or(0);
            assert!(restored >= TAGGED as u64, "{}: {:?}", r.name, r.extra);
        }
        csum += r.counter("rx_csum_completed").unwrap_or(0);
        (ty.check)(r);
    }
    if tcp {
        // Local TCP senders over veth leave partial checksums (ICMP is
        // checksummed in software).
        assert!(csum > 0, "{}: no checksum completed", ty.name);
    }
}

/// Jumbo frames (MTU 9000 on every end): pings of 8000 bytes cross the
/// switch both ways over IPv4 and IPv6, unfragmented (`-M do`), every
/// frame whole and valid. On AF_XDP each is longer than a UMEM frame, so
/// it crosses as a multi-buffer frame on receive (counted) and several
/// descriptors on transmit.
pub fn jumbo_frames_cross_the_switch(ty: &PortType) {
    let net = 35;
    let lab = PortLab::new(ty.prefix, &format!("j{}", ty.tag), 2, net);
    lab.set_mtu(9000);
    let Some(ports) = open_all(ty, &lab, 9000) else {
        return;
    };
    let switch = Switch::start(ports, 9000, "actions=normal");
    let o = ping(
        &lab,
        &["-M", "do", "-s", "8000", &format!("198.18.{net}.2")],
    );
    assert!(
        o.status.success(),
        "{}: IPv4 jumbo ping: {}",
        ty.name,
        show(&o)
    );
    let o = ping(
        &lab,
        &[
            "-6",
            "-M",
            "do",
            "-s",
            "8000",
            &format!("2001:db8:{net}::2"),
        ],
    );
    assert!(
        o.status.success(),
        "{}: IPv6 jumbo ping: {}",
        ty.name,
        show(&o)
    );
    let report = switch.stop();
    (ty.after_close)(&lab.sw);
    for r in &report.ports {
        eprintln!(
            "{}: {:?}\n  counters {:?}\n  seen {:?}",
            r.name, r.stats, r.extra, r.seen
        );
        if let Some(mb) = r.counter("rx_multi_buffer_frames") {
            assert!(mb >= 6, "{}: {:?}", r.name, r.extra);
        }
        assert!(
            r.seen.max_untagged > 8000 && r.seen.max_untagged <= 9014,
            "{}: {:?}",
            r.name,
            r.seen
        );
        assert_eq!(r.seen.l4_bad, 0, "{}: {:?}", r.name, r.seen);
        assert_eq!(r.stats.tx_dropped, 0, "{}: {:?}", r.name, r.stats);
        (ty.check)(r);
    }
}

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

/// Frames of a UDP burst [`port_reads_burst_in_order_and_transmits`] sends.
pub const BURST_N: usize = 100;

/// Frames of the transmit batch in [`port_reads_burst_in_order_and_transmits`]:
/// more than the kernel sends per kick.
pub const TX_BATCH: usize = 500;

/// The addresses of the one-port lab on net `net`: the fake peer the port
/// speaks for (198.18.`net`.2, with a static neighbour entry in namespace
/// `ns`) and `veth0` there (198.18.`net`.1).
pub fn fake_peer(ns: &str, net: u8) -> ([u8; 6], Ipv4Addr, Ipv4Addr) {
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
    (peer_mac, peer_ip, ns_ip)
}

/// [`BURST_N`] UDP datagrams `"<tag> <i>"` from a local socket in `ns` to
/// `peer_ip` port 9 (partial checksums over veth).
pub fn udp_burst(ns: &str, peer_ip: Ipv4Addr, tag: &str) {
    let script = format!(
        "for i in $(seq 0 {}); do echo \"{tag} $i\" > /dev/udp/{peer_ip}/9; done",
        BURST_N - 1
    );
    let o = in_ns(ns, &["bash", "-c", &script]).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
}

/// One port of type `ty`, no bridge, on the switch end of `veth0` in a
/// namespace (198.18.`net`.1/24): a burst of [`BURST_N`] UDP datagrams from
/// a local socket (partial checksums) is read at most 3 frames per call, in
/// order, every checksum complete, and the fd polls readable; an echo
/// request sent through the port is answered and the port's own
/// transmission never comes back to it; a frame longer than the MTU is
/// refused and counted (under `tx_drop_oversize` too when the type names
/// that reason) while the rest of its batch goes out; a batch of
/// [`TX_BATCH`] frames all reaches the namespace. With the type's
/// `idle_fd_quiet`, an idle port's fd must not poll readable once drained.
pub fn port_reads_burst_in_order_and_transmits(ty: &PortType) {
    let net = 20;
    let tag = ty.prefix;
    let lab = PortLab::new(ty.prefix, &format!("p{}", ty.tag), 1, net);
    let ns = lab.ns[0].as_str();
    let Some(mut port) = (ty.open)(&lab.sw[0], 1500) else {
        return;
    };
    let (peer_mac, peer_ip, ns_ip) = fake_peer(ns, net);
    let fd = port.rx_fd().expect("the port has an rx fd");
    let mut pool = Vec::new();
    if ty.idle_fd_quiet {
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

    udp_burst(ns, peer_ip, tag);
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
    if let Some(n) = counter(&port.extra_counters(), "tx_drop_oversize") {
        assert_eq!(n, 1, "{:?}", port.extra_counters());
    }

    // A big batch (more than the kernel sends per kick) all goes out: the
    // namespace counts what it receives.
    let rx_before = lab.ns_rx_packets(0);
    let mut pkts: Vec<PacketBuf> = (0..TX_BATCH)
        .map(|i| {
            FrameBuilder::new(peer_mac, ns_mac)
                .ipv4(peer_ip, ns_ip)
                .udp(9, 9)
                .payload(format!("burst {i}").as_bytes())
                .build_buf()
        })
        .collect();
    assert_eq!(port.send_batch(&mut pkts, &mut done).unwrap(), TX_BATCH);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rx_after = rx_before;
    while Instant::now() < deadline && rx_after < rx_before + TX_BATCH as u64 {
        // Receiving also retries a transmission the kernel did not finish.
        let mut out = Vec::new();
        port.recv_batch(&mut out, 64, &mut pool).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        rx_after = lab.ns_rx_packets(0);
    }
    eprintln!(
        "tx batch: namespace got {} frames, counters {:?}",
        rx_after - rx_before,
        port.extra_counters()
    );
    assert!(
        rx_after >= rx_before + TX_BATCH as u64,
        "{}: {:?}",
        ty.name,
        port.stats()
    );
    drop(port);
    (ty.after_close)(&lab.sw);
}
