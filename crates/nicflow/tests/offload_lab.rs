//! The XDP offload engine wired into the switch, over the namespace lab:
//! a flow's first packet goes to userspace and the rest stay in the
//! kernel; the same traffic with offload on and off gives byte-identical
//! frames at the receiving host; a rule change while traffic runs takes
//! effect in the kernel in the same call; a full flow map degrades to
//! userspace handling without losing traffic.
//!
//! Root only (prints "skipping: needs root" otherwise). Every test has its
//! own lab (`o<pid><tag>`) and a guard that runs `lab down` even when an
//! assertion fails. Frames are sent and captured with raw AF_PACKET
//! sockets opened from a thread that entered the host's namespace, so the
//! frames are exactly the ones built here (complete checksums) and exactly
//! the ones the receiving veth delivered.

mod common;

use nicflow::control::daemon::request;
use nicflow::control::proto::Request;
use nicflow::lab::{self, names, LabOptions, Topology};
use nicflow_packet::builder::FrameBuilder;
use serde_json::Value;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn notice(msg: &str) {
    match msg.strip_prefix("skipping: ") {
        Some(reason) => common::skipped(reason),
        None => {
            let _ = writeln!(std::io::stderr(), "{msg}");
        }
    }
}

fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        notice("skipping: needs root");
    }
    root
}

fn opts() -> LabOptions {
    LabOptions::with_binary(PathBuf::from(env!("CARGO_BIN_EXE_nicflow")))
}

struct Lab {
    name: String,
    topo: Topology,
    opts: LabOptions,
    socket: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = lab::down(&self.name, &self.opts) {
            notice(&format!("guard: down {}: {e}", self.name));
        }
    }
}

impl Lab {
    /// Two hosts `<tag>1` (198.18.0.1) and `<tag>2` (198.18.0.2) on switch
    /// sw1 (AF_XDP ports, own namespace); `extra` goes into the switch
    /// section (offload settings, port options).
    fn up(tag: &str, extra: &str, flows: &[&str]) -> Lab {
        let name = format!("o{}{tag}", std::process::id());
        let flows = flows
            .iter()
            .map(|f| format!("{f:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let topo = Topology::parse(&format!(
            r#"
            name = "{name}"
            [[host]]
            name = "{tag}1"
            sysctl = {{ "net.ipv6.conf.all.disable_ipv6" = 1 }}
            [[host]]
            name = "{tag}2"
            sysctl = {{ "net.ipv6.conf.all.disable_ipv6" = 1 }}
            [[switch]]
            name = "sw1"
            {extra}
            [[switch.bridge]]
            name = "br0"
            flows = [{flows}]
            [[link]]
            a = "{tag}1:eth0"
            b = "sw1:p1"
            addresses = ["198.18.0.1/24"]
            [[link]]
            a = "{tag}2:eth0"
            b = "sw1:p2"
            addresses = ["198.18.0.2/24"]
            "#
        ))
        .expect("test topology");
        let opts = opts();
        let socket = opts.lab_dir(&name).join("sw1.sock");
        let lab = Lab {
            name,
            topo,
            opts,
            socket,
        };
        lab::up(&lab.topo, &lab.opts).expect("lab up");
        lab
    }

    fn ns(&self, host: &str) -> String {
        names::namespace(&self.name, host)
    }

    fn req(&self, r: Request) -> Value {
        let resp = request(&self.socket, &r).expect("control request");
        assert!(resp.ok, "{r:?}: {:?}", resp.error);
        resp.data
    }

    fn dp_flows(&self) -> Vec<Value> {
        self.req(Request::DumpDpFlows {
            bridge: "br0".into(),
        })
        .as_array()
        .cloned()
        .unwrap_or_default()
    }

    fn stats(&self) -> Value {
        self.req(Request::Stats)[0].clone()
    }

    fn port_rx(&self, port: &str) -> u64 {
        self.stats()["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port)
            .map(|p| p["rx_packets"].as_u64().unwrap())
            .unwrap()
    }

    fn exec(&self, host: &str, cmd: &[&str]) -> String {
        let out = lab::exec_output(Some(&self.topo), host, cmd, &self.opts).expect("exec");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn mac(&self, host: &str) -> [u8; 6] {
        let out = self.exec(host, &["cat", "/sys/class/net/eth0/address"]);
        let mut m = [0u8; 6];
        for (i, b) in out.trim().split(':').enumerate() {
            m[i] = u8::from_str_radix(b, 16).unwrap();
        }
        m
    }
}

/// A raw socket on `eth0` of namespace `ns` (opened from a thread that
/// entered it; the socket stays bound there).
fn raw_socket(ns: &str) -> OwnedFd {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on this thread only, with a namespace fd we own.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32) };
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let name = std::ffi::CString::new("eth0").unwrap();
        // SAFETY: NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert_ne!(ifindex, 0);
        // SAFETY: zeroed sockaddr_ll is valid; filled below.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto;
        sa.sll_ifindex = ifindex as i32;
        // SAFETY: sa is a valid sockaddr_ll for its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        fd
    })
    .join()
    .unwrap()
}

fn send(fd: &OwnedFd, frame: &[u8]) {
    // SAFETY: a valid buffer.
    let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    assert_eq!(
        n,
        frame.len() as isize,
        "send: {}",
        std::io::Error::last_os_error()
    );
}

/// Incoming frames for `wait` that `want` selects, with arrival times.
fn capture(fd: &OwnedFd, wait: Duration, want: impl Fn(&[u8]) -> bool) -> Vec<(Instant, Vec<u8>)> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    while Instant::now() < deadline {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 20) };
        loop {
            // SAFETY: zeroed sockaddr_ll is valid.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: buffers valid for the sizes passed.
            let n = unsafe {
                libc::recvfrom(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut sa as *mut _ as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n <= 0 {
                break;
            }
            if sa.sll_pkttype as u8 == libc::PACKET_OUTGOING {
                continue;
            }
            let f = &buf[..n as usize];
            if want(f) {
                got.push((Instant::now(), f.to_vec()));
            }
        }
    }
    got
}

fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, last)
}

/// Test frames: UDP (marker in the payload), TCP SYNs and ICMP echoes from
/// host 1 to host 2, with complete checksums.
fn test_frames(src: [u8; 6], dst: [u8; 6], per_flow: usize) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..per_flow {
        for f in 0..3u16 {
            v.push(
                FrameBuilder::new(src, dst)
                    .ipv4(v4(1), v4(2))
                    .ttl(64)
                    .udp(40000 + f, 7000 + f)
                    .payload(format!("nfo-diff udp flow {f} seq {i}").as_bytes())
                    .build(),
            );
        }
        v.push(
            FrameBuilder::new(src, dst)
                .ipv4(v4(1), v4(2))
                .ttl(64)
                .tcp(41000, 8000, 0x02)
                .tcp_seq(1000 + i as u32)
                .payload(b"nfo-diff tcp")
                .build(),
        );
        v.push(
            FrameBuilder::new(src, dst)
                .ipv4(v4(1), v4(2))
                .ttl(64)
                .icmp(8, 0)
                .echo(0x4e46, i as u16)
                .payload(b"nfo-diff icmp")
                .build(),
        );
    }
    v
}

fn is_test_frame(f: &[u8]) -> bool {
    f.windows(8).any(|w| w == b"nfo-diff")
}

/// The frames host 2 receives for `frames` sent one at a time from host 1.
fn run_traffic(lab: &Lab, tx: &OwnedFd, rx: &OwnedFd, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    // Drain anything queued before.
    let _ = capture(rx, Duration::from_millis(50), |_| false);
    let mut got = Vec::new();
    for f in frames {
        send(tx, f);
        // Paced so that each flow's first frame has been through the slow
        // path (and the flow installed) before the next of the same flow.
        got.extend(capture(rx, Duration::from_millis(15), is_test_frame));
    }
    got.extend(capture(rx, Duration::from_millis(300), is_test_frame));
    let _ = lab;
    got.into_iter().map(|(_, f)| f).collect()
}

#[test]
fn first_packet_goes_to_userspace_later_ones_stay_in_the_kernel() {
    if !privileged() {
        return;
    }
    let lab = Lab::up("f", "", &["priority=0,actions=normal"]);
    // Learn both MACs (ARP), install the ICMP flows.
    let out = lab.exec("f1", &["ping", "-c", "2", "-i", "0.2", "198.18.0.2"]);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let rx1 = lab.port_rx("p1");
    let rx2 = lab.port_rx("p2");
    let out = lab.exec("f1", &["ping", "-c", "30", "-i", "0.02", "198.18.0.2"]);
    assert!(out.contains("30 received"), "{out}");
    // Userspace saw (almost) none of it: the ICMP flows run in XDP. A
    // stray ARP refresh may still go through userspace.
    let d1 = lab.port_rx("p1") - rx1;
    let d2 = lab.port_rx("p2") - rx2;
    assert!(d1 <= 2 && d2 <= 2, "userspace rx grew by {d1}/{d2}");
    let flows = lab.dp_flows();
    let icmp: Vec<&Value> = flows
        .iter()
        .filter(|f| f["match"].as_str().unwrap().starts_with("icmp,"))
        .collect();
    assert_eq!(icmp.len(), 2, "{flows:#?}");
    for f in &icmp {
        assert_eq!(f["engine"], "xdp", "{f}");
        assert!(f["kernel_packets"].as_u64().unwrap() >= 30, "{f}");
        // The first packet of each flow went through userspace.
        assert_eq!(
            f["packets"].as_u64().unwrap() - f["kernel_packets"].as_u64().unwrap(),
            1,
            "{f}"
        );
    }
    let st = lab.stats();
    assert!(st["engines"]["xdp_packets"].as_u64().unwrap() >= 60, "{st}");
    // TCP/UDP from a host at default offloads stays in userspace, with a
    // reason, and works.
    lab.exec("f2", &["iperf3", "-s", "-D", "-1"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = lab.exec("f1", &["iperf3", "-c", "198.18.0.2", "-t", "1"]);
    assert!(out.contains("receiver"), "{out}");
    let flows = lab.dp_flows();
    let tcp: Vec<&Value> = flows
        .iter()
        .filter(|f| f["match"].as_str().unwrap().starts_with("tcp,"))
        .collect();
    assert!(!tcp.is_empty(), "{flows:#?}");
    for f in tcp {
        assert_eq!(f["engine"], "userspace", "{f}");
        assert_eq!(f["not_offloaded"], "csum:partial-possible", "{f}");
    }
}

#[test]
fn offload_on_and_off_give_identical_frames() {
    if !privileged() {
        return;
    }
    // The sender is a raw socket with complete checksums: declare it, so
    // UDP and TCP are offloaded too.
    let lab = Lab::up(
        "d",
        r#"port_options = { csum_complete = "true" }"#,
        &[
            "priority=10,udp,in_port=p1,tp_dst=7000,actions=mod_nw_dst:198.18.0.77,mod_tp_dst:9999,output:p2",
            "priority=10,udp,in_port=p1,tp_dst=7001,actions=mod_dl_src:02:00:00:00:00:aa,mod_nw_tos:32,dec_ttl,output:p2",
            "priority=10,udp,in_port=p1,tp_dst=7002,actions=mod_vlan_vid:42,output:p2",
            "priority=10,tcp,in_port=p1,actions=mod_tp_src:5555,mod_nw_src:198.18.0.99,output:p2",
            "priority=10,icmp,in_port=p1,actions=mod_nw_ttl:7,output:p2",
            "priority=0,actions=drop",
        ],
    );
    let (m1, m2) = (lab.mac("d1"), lab.mac("d2"));
    let tx = raw_socket(&lab.ns("d1"));
    let rx = raw_socket(&lab.ns("d2"));
    let frames = test_frames(m1, m2, 6);

    let mut runs = Vec::new();
    for mode in ["xdp", "none", "xdp"] {
        lab.req(Request::Set {
            bridge: "br0".into(),
            key: "offload".into(),
            value: mode.into(),
        });
        let before = lab.stats()["engines"]["xdp_packets"].as_u64().unwrap_or(0);
        let mut got = run_traffic(&lab, &tx, &rx, &frames);
        let after = lab.stats()["engines"]["xdp_packets"].as_u64().unwrap_or(0);
        if mode == "xdp" {
            // Every flow's later frames were handled in the kernel.
            assert!(
                after - before >= (frames.len() - 5) as u64,
                "xdp handled {} of {}: {:#?}",
                after - before,
                frames.len(),
                lab.dp_flows()
            );
            for f in lab.dp_flows() {
                if f["match"].as_str().unwrap().contains("in_port=p1") {
                    assert_eq!(f["engine"], "xdp", "{f}");
                }
            }
        }
        assert_eq!(got.len(), frames.len(), "{mode}: frames received");
        got.sort();
        runs.push((mode, got));
    }
    assert!(runs[0].1 == runs[1].1, "offload xdp vs none: frames differ");
    assert!(
        runs[2].1 == runs[1].1,
        "offload xdp (again) vs none: frames differ"
    );
    // The rewrites did happen (not a pass-through on both sides).
    assert!(runs[1]
        .1
        .iter()
        .any(|f| f.windows(2).any(|w| w == 9999u16.to_be_bytes())));
}

#[test]
fn rule_change_while_traffic_runs_updates_kernel_flows_at_once() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(
        "r",
        r#"port_options = { csum_complete = "true" }"#,
        &[
            "priority=10,udp,in_port=p1,actions=output:p2",
            "priority=0,actions=drop",
        ],
    );
    let (m1, m2) = (lab.mac("r1"), lab.mac("r2"));
    let tx = raw_socket(&lab.ns("r1"));
    let rx = raw_socket(&lab.ns("r2"));
    let frame = move |seq: u32| {
        FrameBuilder::new(m1, m2)
            .ipv4(v4(1), v4(2))
            .udp(40000, 7000)
            .payload(format!("nfo-diff seq {seq:08}").as_bytes())
            .build()
    };
    // Traffic from a sender thread, 1 frame per ms, while rules change.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let txfd = tx.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut seq = 0u32;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            send(&txfd, &frame(seq));
            seq += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        seq
    });
    let got = capture(&rx, Duration::from_millis(500), is_test_frame);
    assert!(got.len() > 100, "traffic before the change: {}", got.len());
    let f = lab.dp_flows();
    assert!(f.iter().any(|f| f["engine"] == "xdp"), "{f:#?}");

    // Drop it: once add-flow returns, nothing more arrives.
    lab.req(Request::AddFlow {
        bridge: "br0".into(),
        flow: "priority=20,udp,in_port=p1,actions=drop".into(),
    });
    let t_drop = Instant::now();
    let got = capture(&rx, Duration::from_millis(500), is_test_frame);
    // Frames already past the program (in the veth's queue) may land just
    // after; none later than that.
    let late: Vec<_> = got
        .iter()
        .filter(|(t, _)| t.duration_since(t_drop) > Duration::from_millis(20))
        .collect();
    assert!(
        late.is_empty(),
        "{} frames followed the old rule",
        late.len()
    );
    let f = lab.dp_flows();
    let udp: Vec<&Value> = f
        .iter()
        .filter(|f| f["match"].as_str().unwrap().starts_with("udp,"))
        .collect();
    assert!(!udp.is_empty(), "{f:#?}");
    for x in &udp {
        assert_eq!(x["actions"], "drop", "{x}");
        assert_eq!(x["engine"], "xdp", "drops are offloaded too: {x}");
    }

    // Rewrite instead: every frame after the change carries the new port.
    lab.req(Request::AddFlow {
        bridge: "br0".into(),
        flow: "priority=30,udp,in_port=p1,actions=mod_tp_dst:9999,output:p2".into(),
    });
    let t_mod = Instant::now();
    let got = capture(&rx, Duration::from_millis(500), is_test_frame);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = sender.join().unwrap();
    assert!(
        got.len() > 100,
        "traffic after the rewrite rule: {}",
        got.len()
    );
    for (t, f) in &got {
        if t.duration_since(t_mod) > Duration::from_millis(20) {
            assert_eq!(&f[36..38], &9999u16.to_be_bytes(), "stale decision");
        }
    }
    let st = lab.stats();
    assert!(
        st["engines"]["xdp_packets"].as_u64().unwrap() > (sent / 2) as u64,
        "{st}"
    );
}

#[test]
fn full_flow_map_degrades_to_userspace() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(
        "m",
        r#"offload_options = { max_flows = 2 }"#,
        &["priority=0,actions=normal"],
    );
    let out = lab.exec("m1", &["ping", "-c", "20", "-i", "0.02", "198.18.0.2"]);
    assert!(out.contains("20 received"), "{out}");
    let flows = lab.dp_flows();
    let xdp = flows.iter().filter(|f| f["engine"] == "xdp").count();
    let full = flows
        .iter()
        .filter(|f| f["not_offloaded"] == "flow-map-full")
        .count();
    assert_eq!(xdp, 2, "{flows:#?}");
    assert!(full >= 1, "{flows:#?}");
    let st = lab.stats();
    assert_eq!(
        st["offload"]["not_offloaded"]["flow-map-full"], full,
        "{st}"
    );
    assert_eq!(st["datapath"]["drops"], serde_json::json!({}), "{st}");
}
