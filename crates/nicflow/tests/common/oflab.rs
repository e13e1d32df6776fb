//! A two-host lab around one nicflow switch for the offload tests
//! (`offload_lab.rs`: XDP engine, `tc_lab.rs`: TC engine), torn down by a
//! guard even when an assertion fails, and raw AF_PACKET sockets opened in
//! a host's namespace to send and capture exact frames.

use super::skipped;
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

pub fn notice(msg: &str) {
    match msg.strip_prefix("skipping: ") {
        Some(reason) => skipped(reason),
        None => {
            let _ = writeln!(std::io::stderr(), "{msg}");
        }
    }
}

pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        notice("skipping: needs root");
    }
    root
}

pub fn opts() -> LabOptions {
    LabOptions::with_binary(PathBuf::from(env!("CARGO_BIN_EXE_nicflow")))
}

pub struct Lab {
    pub name: String,
    pub topo: Topology,
    pub opts: LabOptions,
    pub socket: PathBuf,
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
    pub fn up(tag: &str, extra: &str, flows: &[&str]) -> Lab {
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

    /// The switch's end of link `n` (1: p1, 2: p2) and its namespace.
    pub fn switch_iface(&self, n: usize) -> String {
        names::veth_name(&self.name, n - 1, names::Side::B)
    }

    pub fn switch_ns(&self) -> String {
        names::namespace(&self.name, "sw1")
    }

    pub fn ns(&self, host: &str) -> String {
        names::namespace(&self.name, host)
    }

    pub fn req(&self, r: Request) -> Value {
        let resp = request(&self.socket, &r).expect("control request");
        assert!(resp.ok, "{r:?}: {:?}", resp.error);
        resp.data
    }

    pub fn dp_flows(&self) -> Vec<Value> {
        self.req(Request::DumpDpFlows {
            bridge: "br0".into(),
        })
        .as_array()
        .cloned()
        .unwrap_or_default()
    }

    pub fn stats(&self) -> Value {
        self.req(Request::Stats)[0].clone()
    }

    pub fn port_rx(&self, port: &str) -> u64 {
        self.stats()["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port)
            .map(|p| p["rx_packets"].as_u64().unwrap())
            .unwrap()
    }

    pub fn exec(&self, host: &str, cmd: &[&str]) -> String {
        let out = lab::exec_output(Some(&self.topo), host, cmd, &self.opts).expect("exec");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn mac(&self, host: &str) -> [u8; 6] {
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
pub fn raw_socket(ns: &str) -> OwnedFd {
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

pub fn send(fd: &OwnedFd, frame: &[u8]) {
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
pub fn capture(
    fd: &OwnedFd,
    wait: Duration,
    want: impl Fn(&[u8]) -> bool,
) -> Vec<(Instant, Vec<u8>)> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    // The receive path keeps a frame's outer VLAN tag out of its bytes:
    // PACKET_AUXDATA reports it, and it is put back below, so captures
    // show the tag a switch pushed or kept.
    let on: libc::c_int = 1;
    // SAFETY: an int option on our own socket.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_AUXDATA,
            (&on as *const libc::c_int).cast(),
            4,
        )
    };
    while Instant::now() < deadline {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 20) };
        loop {
            // SAFETY: zeroed sockaddr_ll / msghdr are valid.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut cmsg = [0u64; 16];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: see above.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut sa as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsg.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&cmsg);
            // SAFETY: every pointer in msg is valid for its length.
            let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            if n <= 0 {
                break;
            }
            if sa.sll_pkttype as u8 == libc::PACKET_OUTGOING {
                continue;
            }
            let mut f = buf[..n as usize].to_vec();
            // SAFETY: walking the control buffer the kernel filled.
            let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
            while !c.is_null() {
                // SAFETY: c points into cmsg, within msg_controllen.
                let h = unsafe { &*c };
                if h.cmsg_level == libc::SOL_PACKET && h.cmsg_type == libc::PACKET_AUXDATA {
                    // SAFETY: the kernel wrote a tpacket_auxdata here.
                    let aux: libc::tpacket_auxdata =
                        unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()) };
                    if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 && f.len() >= 12 {
                        let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                            aux.tp_vlan_tpid
                        } else {
                            0x8100
                        };
                        let mut tag = tpid.to_be_bytes().to_vec();
                        tag.extend_from_slice(&aux.tp_vlan_tci.to_be_bytes());
                        f.splice(12..12, tag);
                    }
                }
                // SAFETY: as above.
                c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
            }
            if want(&f) {
                got.push((Instant::now(), f));
            }
        }
    }
    got
}

pub fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, last)
}

/// Test frames: UDP (marker in the payload), TCP SYNs and ICMP echoes from
/// host 1 to host 2, with complete checksums.
pub fn test_frames(src: [u8; 6], dst: [u8; 6], per_flow: usize) -> Vec<Vec<u8>> {
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

pub fn is_test_frame(f: &[u8]) -> bool {
    f.windows(8).any(|w| w == b"nfo-diff")
}

/// The frames host 2 receives for `frames` sent one at a time from host 1.
pub fn run_traffic(lab: &Lab, tx: &OwnedFd, rx: &OwnedFd, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
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

/// Rules with rewrites every kernel engine runs (and a drop for the rest),
/// from p1 to p2, for [`identical_frames_across_modes`].
pub const REWRITE_FLOWS: &[&str] = &[
    "priority=10,udp,in_port=p1,tp_dst=7000,actions=mod_nw_dst:198.18.0.77,mod_tp_dst:9999,output:p2",
    "priority=10,udp,in_port=p1,tp_dst=7001,actions=mod_dl_src:02:00:00:00:00:aa,mod_nw_tos:32,dec_ttl,output:p2",
    "priority=10,udp,in_port=p1,tp_dst=7002,actions=mod_vlan_vid:42,output:p2",
    "priority=10,tcp,in_port=p1,actions=mod_tp_src:5555,mod_nw_src:198.18.0.99,output:p2",
    "priority=10,icmp,in_port=p1,actions=mod_nw_ttl:7,output:p2",
    "priority=0,actions=drop",
];

/// Send [`test_frames`] from host `<tag>1` to `<tag>2` of a lab built with
/// [`REWRITE_FLOWS`] once per offload mode in `modes`, and check that every
/// mode delivers the same frames (sorted) as the first `"none"` run, that
/// the rewrites happened (a pushed VID 42 and a rewritten port 9999), and,
/// for every mode but `none`, that all but the first frame of each flow
/// were finished by `engine` in the kernel.
pub fn identical_frames_across_modes(lab: &Lab, tag: &str, modes: &[&str], engine: &str) {
    let (m1, m2) = (lab.mac(&format!("{tag}1")), lab.mac(&format!("{tag}2")));
    let tx = raw_socket(&lab.ns(&format!("{tag}1")));
    let rx = raw_socket(&lab.ns(&format!("{tag}2")));
    let frames = test_frames(m1, m2, 6);
    let counter = format!("{engine}_packets");
    let mut runs = Vec::new();
    for mode in modes {
        lab.req(Request::Set {
            bridge: "br0".into(),
            key: "offload".into(),
            value: mode.to_string(),
        });
        let before = lab.stats()["engines"][&counter].as_u64().unwrap_or(0);
        let mut got = run_traffic(lab, &tx, &rx, &frames);
        let after = lab.stats()["engines"][&counter].as_u64().unwrap_or(0);
        if *mode != "none" {
            assert!(
                after - before >= (frames.len() - 5) as u64,
                "{mode}: {engine} handled {} of {}: {:#?}",
                after - before,
                frames.len(),
                lab.dp_flows()
            );
            for f in lab.dp_flows() {
                if f["match"].as_str().unwrap().contains("in_port=p1") {
                    assert_eq!(f["engine"], engine, "{mode}: {f}");
                }
            }
        }
        assert_eq!(got.len(), frames.len(), "{mode}: frames received");
        got.sort();
        runs.push((*mode, got));
    }
    let none = &runs
        .iter()
        .find(|(m, _)| *m == "none")
        .expect("a none run")
        .1;
    for (mode, got) in &runs {
        assert!(got == none, "offload {mode} vs none: frames differ");
    }
    assert!(none
        .iter()
        .any(|f| f.windows(2).any(|w| w == 9999u16.to_be_bytes())));
    assert!(
        none.iter()
            .any(|f| f[12..14] == [0x81, 0x00] && f[14..16] == [0, 42]),
        "no frame tagged with VID 42"
    );
}
