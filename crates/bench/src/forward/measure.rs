//! What `bench forward` reads off the machine: CPU counters, interface
//! counters, offload settings, and iperf3 runs between two lab hosts.

use super::interrupted;
use nicflow::lab::sys;
use nicflow::os;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc/stat` and `/proc/<pid>/stat`.
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Machine-wide CPU time from the first line of `/proc/stat`, in seconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct MachineCpu {
    /// user + nice + system + irq + softirq (guest time is inside user).
    pub busy: f64,
    /// idle + iowait.
    pub idle: f64,
    /// Time the hypervisor ran something else while we wanted the CPU.
    pub steal: f64,
}

impl MachineCpu {
    pub fn read() -> MachineCpu {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let line = text.lines().find(|l| l.starts_with("cpu ")).unwrap_or("");
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let f = |i: usize| v.get(i).copied().unwrap_or(0.0);
        let tck = clk_tck();
        MachineCpu {
            busy: (f(0) + f(1) + f(2) + f(5) + f(6)) / tck,
            idle: (f(3) + f(4)) / tck,
            steal: f(7) / tck,
        }
    }

    pub fn since(&self, before: &MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: self.busy - before.busy,
            idle: self.idle - before.idle,
            steal: self.steal - before.steal,
        }
    }
}

/// utime + stime of process `pid` (all its threads, live and exited), in
/// seconds; None if it is gone.
pub fn process_cpu(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after `(comm)`: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck())
}

/// Packet and byte counters of an interface inside a namespace.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct IfaceCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_dropped: u64,
}

impl IfaceCounters {
    /// The 64-bit counters of `IFACE` in `NS` (`IFLA_STATS64`, what `ip
    /// -n NS -s link show dev IFACE` prints); None if it cannot be read.
    pub fn read(ns: &str, iface: &str) -> Option<IfaceCounters> {
        let mut rt = os::netlink::Rtnl::open(Some(ns)).ok()?;
        let s = os::link::get(&mut rt, iface).ok()?.stats?;
        Some(IfaceCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            rx_dropped: s.rx_dropped,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            tx_dropped: s.tx_dropped,
        })
    }

    pub fn since(&self, b: &IfaceCounters) -> IfaceCounters {
        IfaceCounters {
            rx_packets: self.rx_packets.saturating_sub(b.rx_packets),
            rx_bytes: self.rx_bytes.saturating_sub(b.rx_bytes),
            rx_dropped: self.rx_dropped.saturating_sub(b.rx_dropped),
            tx_packets: self.tx_packets.saturating_sub(b.tx_packets),
            tx_bytes: self.tx_bytes.saturating_sub(b.tx_bytes),
            tx_dropped: self.tx_dropped.saturating_sub(b.tx_dropped),
        }
    }
}

/// The offload features the report shows, as `ethtool -k` prints them.
/// `tx-tcp-segmentation` rather than the `tcp-segmentation-offload`
/// summary: on Linux 6.18 the summary stays `on` after `tx off` because
/// `tx-tcp-accecn-segmentation` does.
pub const SHOWN_FEATURES: &[&str] = &[
    "tx-checksumming",
    "tx-tcp-segmentation",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "rx-udp-gro-forwarding",
];

/// What `ethtool -k IFACE` in `ns` shows for the features of
/// [`SHOWN_FEATURES`], as `(name, "on"/"off")`, in that order; empty if the
/// features cannot be read. The active state, from
/// [`os::ethtool::active`].
pub fn offloads(ns: &str, iface: &str) -> Vec<(String, String)> {
    let Ok(active) = os::ethtool::active(Some(ns), iface) else {
        return Vec::new();
    };
    shown_offloads(&active)
}

/// [`SHOWN_FEATURES`] from the kernel's feature names and states, as
/// ethtool words them: its summary lines stand for kernel features
/// (`tx-checksumming` is on if any `tx-checksum-*` is, the legacy
/// `ETHTOOL_GTXCSUM`; `generic-segmentation-offload` is
/// `tx-generic-segmentation`, `generic-receive-offload` `rx-gro`); the
/// others are kernel names. A feature the kernel does not list is left
/// out.
pub fn shown_offloads(active: &[(String, bool)]) -> Vec<(String, String)> {
    let any = |pick: &dyn Fn(&str) -> bool| -> Option<bool> {
        let mut found = active.iter().filter(|(n, _)| pick(n)).peekable();
        found.peek()?;
        Some(found.any(|(_, on)| *on))
    };
    SHOWN_FEATURES
        .iter()
        .filter_map(|&f| {
            let on = match f {
                "tx-checksumming" => any(&os::ethtool::is_tx_checksum),
                "generic-segmentation-offload" => any(&|n| n == "tx-generic-segmentation"),
                "generic-receive-offload" => any(&os::ethtool::is_gro),
                _ => any(&|n| n == f),
            }?;
            Some((f.to_string(), if on { "on" } else { "off" }.to_string()))
        })
        .collect()
}

/// The three traffic tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Test {
    /// TCP, one stream, h1 -> h2.
    Tcp1,
    /// TCP, four parallel streams (`-P 4`).
    Tcp4,
    /// UDP, 18-byte payloads (60-byte frames on the veth, 64 with an FCS),
    /// unlimited rate (`-u -l 18 -b 0`).
    Udp64,
    /// The same datagrams from the in-process sendmmsg generator.
    Udp64Mmsg,
}

impl Test {
    pub const ALL: [Test; 4] = [Test::Tcp1, Test::Tcp4, Test::Udp64, Test::Udp64Mmsg];

    pub fn is_udp(self) -> bool {
        matches!(self, Test::Udp64 | Test::Udp64Mmsg)
    }

    pub fn name(self) -> &'static str {
        match self {
            Test::Tcp1 => "tcp1",
            Test::Tcp4 => "tcp4",
            Test::Udp64 => "udp64",
            Test::Udp64Mmsg => "udp64-mmsg",
        }
    }

    /// iperf3 client arguments specific to the test.
    pub fn iperf_args(self) -> Vec<String> {
        match self {
            Test::Tcp1 => vec![],
            Test::Tcp4 => vec!["-P".into(), "4".into()],
            Test::Udp64 => ["-u", "-l", &UDP_PAYLOAD.to_string(), "-b", "0"]
                .map(String::from)
                .to_vec(),
            Test::Udp64Mmsg => vec![],
        }
    }
}

/// UDP payload bytes: 18 + UDP 8 + IPv4 20 + Ethernet 14 = 60-byte frames
/// on the veth (no FCS there), the 64-byte minimum with a 4-byte FCS.
pub const UDP_PAYLOAD: usize = 18;
pub const UDP_FRAME_ON_VETH: usize = UDP_PAYLOAD + 8 + 20 + 14;

/// Where iperf3 runs: the server in `server_ns`, the client in `client_ns`.
pub struct IperfSetup<'a> {
    pub client_ns: &'a str,
    pub server_ns: &'a str,
    pub server_addr: &'a str,
    pub port: u16,
    pub seconds: u64,
    /// Scratch directory for the JSON outputs.
    pub dir: &'a Path,
    /// The switch process whose CPU time is measured (None: kernel bridge).
    pub switch_pid: Option<u32>,
}

/// Everything measured in one test run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TestSample {
    pub test: String,
    /// Why the run produced no figures (iperf3's own error if it gave one).
    pub error: Option<String>,
    /// The client command line.
    pub command: String,
    /// Wall time from just before the client started to just after it exited.
    pub wall_s: f64,
    /// Test duration as the receiver measured it.
    pub receiver_s: f64,
    pub bytes_received: u64,
    /// Receiver throughput (TCP and UDP payload), Gbit/s.
    pub gbps: f64,
    pub sender_gbps: f64,
    pub retransmits: Option<u64>,
    /// UDP: datagrams the client sent per second.
    pub udp_sent_pps: Option<f64>,
    /// UDP: datagrams the iperf3 server received per second.
    pub udp_received_pps: Option<f64>,
    pub udp_lost: Option<u64>,
    /// Frames h2's eth0 received per second (whatever the switch delivered,
    /// before the receiver's socket could drop them).
    pub h2_rx_pps: f64,
    /// Frames h1's eth0 sent per second.
    pub h1_tx_pps: f64,
    pub h1: IfaceCounters,
    pub h2: IfaceCounters,
    /// Machine-wide busy CPU seconds during the run.
    pub machine_cpu_s: f64,
    pub machine_idle_s: f64,
    pub steal_s: f64,
    /// The switch process's utime + stime during the run.
    pub switch_cpu_s: Option<f64>,
    /// sendmmsg generator: CPU seconds of the sending and receiving threads
    /// (a sender near `receiver_s` seconds of CPU was CPU-bound).
    pub generator_cpu_s: Option<f64>,
    pub receiver_cpu_s: Option<f64>,
    pub client_json: serde_json::Value,
    pub server_json: serde_json::Value,
}

impl TestSample {
    /// Gigabits the receiver got.
    pub fn gbit(&self) -> f64 {
        self.bytes_received as f64 * 8.0 / 1e9
    }
    pub fn machine_s_per_gbit(&self) -> Option<f64> {
        (self.error.is_none() && self.gbit() > 0.0).then(|| self.machine_cpu_s / self.gbit())
    }
    pub fn switch_s_per_gbit(&self) -> Option<f64> {
        let s = self.switch_cpu_s?;
        (self.error.is_none() && self.gbit() > 0.0).then(|| s / self.gbit())
    }
    /// UDP: machine CPU microseconds per datagram delivered to h2's eth0.
    pub fn machine_us_per_pkt(&self) -> Option<f64> {
        let pkts = self.h2_rx_pps * self.receiver_s;
        (self.error.is_none() && pkts > 0.0).then(|| self.machine_cpu_s * 1e6 / pkts)
    }
}

fn spawn_to_file(mut cmd: Command, path: &Path) -> Result<Child, String> {
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let line = sys::describe(&cmd);
    cmd.stdin(Stdio::null())
        .stdout(f)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running `{line}`: {e}"))
}

/// Wait for `child` until `deadline`; kill it if the deadline passes or the
/// bench is interrupted. Returns whether it exited by itself.
pub fn wait_child(child: &mut Child, deadline: Instant) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) => {}
            Err(_) => return false,
        }
        if Instant::now() >= deadline || interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether something listens on TCP `port` inside `ns`.
fn listening(ns: &str, port: u16) -> bool {
    let filter = format!("sport = :{port}");
    sys::run(&mut sys::in_ns(Some(ns), &["ss", "-Hltn", &filter]))
        .map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
        .unwrap_or(false)
}

fn read_json(path: &Path) -> serde_json::Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Run one iperf3 test and measure around it.
pub fn run_iperf(s: &IperfSetup<'_>, test: Test, tag: &str) -> TestSample {
    let mut sample = TestSample {
        test: test.name().into(),
        ..Default::default()
    };
    let server_out = s.dir.join(format!("{tag}-server.json"));
    let client_out = s.dir.join(format!("{tag}-client.json"));
    let port = s.port.to_string();

    // Server: one test, then exit; JSON to a file.
    let server_cmd = sys::in_ns(
        Some(s.server_ns),
        &["iperf3", "-s", "-1", "-J", "-p", port.as_str()],
    );
    let mut server = match spawn_to_file(server_cmd, &server_out) {
        Ok(c) => c,
        Err(e) => {
            sample.error = Some(e);
            return sample;
        }
    };
    let ready = Instant::now() + Duration::from_secs(5);
    while !listening(s.server_ns, s.port) {
        if Instant::now() >= ready || interrupted() || matches!(server.try_wait(), Ok(Some(_))) {
            let _ = server.kill();
            let _ = server.wait();
            sample.error = Some(format!(
                "iperf3 server in {} did not start listening",
                s.server_ns
            ));
            return sample;
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let secs = s.seconds.to_string();
    let mut argv: Vec<String> = [
        "iperf3",
        "-c",
        s.server_addr,
        "-p",
        port.as_str(),
        "-t",
        secs.as_str(),
        "-J",
        "--connect-timeout",
        "3000",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(test.iperf_args());
    let client_cmd = sys::in_ns(Some(s.client_ns), &argv);
    sample.command = format!("ip netns exec {} {}", s.client_ns, argv.join(" "));

    let h1_0 = IfaceCounters::read(s.client_ns, "eth0").unwrap_or_default();
    let h2_0 = IfaceCounters::read(s.server_ns, "eth0").unwrap_or_default();
    let sw_0 = s.switch_pid.and_then(process_cpu);
    let cpu_0 = MachineCpu::read();
    let t0 = Instant::now();
    let mut client = match spawn_to_file(client_cmd, &client_out) {
        Ok(c) => c,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            sample.error = Some(e);
            return sample;
        }
    };
    let finished = wait_child(&mut client, t0 + Duration::from_secs(s.seconds + 20));
    let cpu_1 = MachineCpu::read();
    let wall = t0.elapsed().as_secs_f64();
    let sw_1 = s.switch_pid.and_then(process_cpu);
    let h1_1 = IfaceCounters::read(s.client_ns, "eth0").unwrap_or_default();
    let h2_1 = IfaceCounters::read(s.server_ns, "eth0").unwrap_or_default();
    // The server exits after its one test; a client that never connected
    // leaves it waiting.
    wait_child(&mut server, Instant::now() + Duration::from_secs(3));

    let cpu = cpu_1.since(&cpu_0);
    sample.wall_s = wall;
    sample.machine_cpu_s = cpu.busy;
    sample.machine_idle_s = cpu.idle;
    sample.steal_s = cpu.steal;
    sample.switch_cpu_s = match (sw_0, sw_1) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    sample.h1 = h1_1.since(&h1_0);
    sample.h2 = h2_1.since(&h2_0);
    sample.client_json = read_json(&client_out);
    sample.server_json = read_json(&server_out);
    if !finished {
        sample.error = Some(if interrupted() {
            "interrupted".into()
        } else {
            format!("iperf3 client did not finish within {}s", s.seconds + 20)
        });
        return sample;
    }
    if let Some(e) = sample.client_json["error"].as_str() {
        sample.error = Some(format!("iperf3: {e}"));
        return sample;
    }
    let end = &sample.client_json["end"];
    let recv = &end["sum_received"];
    let sent = &end["sum_sent"];
    if recv.is_null() || sent.is_null() {
        sample.error = Some("iperf3 JSON has no end.sum_received/sum_sent".into());
        return sample;
    }
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    sample.receiver_s = f(recv, "seconds");
    sample.bytes_received = recv["bytes"].as_u64().unwrap_or(0);
    sample.gbps = f(recv, "bits_per_second") / 1e9;
    sample.sender_gbps = f(sent, "bits_per_second") / 1e9;
    sample.retransmits = sent["retransmits"].as_u64();
    let dur = if sample.receiver_s > 0.0 {
        sample.receiver_s
    } else {
        s.seconds as f64
    };
    sample.h2_rx_pps = sample.h2.rx_packets as f64 / dur;
    sample.h1_tx_pps = sample.h1.tx_packets as f64 / dur;
    if test == Test::Udp64 {
        let sent_pkts = sent["packets"].as_u64().unwrap_or(0);
        let sent_s = f(sent, "seconds").max(1e-9);
        sample.udp_sent_pps = Some(sent_pkts as f64 / sent_s);
        let lost = recv["lost_packets"].as_u64().unwrap_or(0);
        let got = match recv["packets"].as_u64() {
            Some(p) => p.saturating_sub(lost),
            None => sample.bytes_received / UDP_PAYLOAD as u64,
        };
        sample.udp_lost = Some(lost);
        sample.udp_received_pps = Some(got as f64 / dur);
    }
    if sample.bytes_received == 0 {
        sample.error = Some("nothing arrived at the receiver".into());
    }
    sample
}

/// Busy CPU cores over `dur` while no traffic runs: `(everything except
/// the switch process, the switch process)`. The first is other load on
/// the machine; the second is what the idle engine itself burns (a
/// busy-polling thread).
pub fn background_busy(dur: Duration, switch_pid: Option<u32>) -> (f64, f64) {
    let sw0 = switch_pid.and_then(process_cpu);
    let a = MachineCpu::read();
    let t = Instant::now();
    std::thread::sleep(dur);
    let b = MachineCpu::read();
    let sw1 = switch_pid.and_then(process_cpu);
    let secs = t.elapsed().as_secs_f64();
    let sw = match (sw0, sw1) {
        (Some(x), Some(y)) => (y - x) / secs,
        _ => 0.0,
    };
    let total = b.since(&a).busy / secs;
    ((total - sw).max(0.0), sw)
}

// ---------------------------------------------------------------------------
// A stronger UDP generator: sendmmsg from a thread inside h1's namespace,
// recvmmsg in a thread inside h2's. iperf3 (3.12, one thread, one `send`
// per datagram) tops out near 100-150k datagrams/s on this class of
// machine, below what a switch may forward.
// ---------------------------------------------------------------------------

/// Datagrams per `sendmmsg`/`recvmmsg` call.
const MMSG_BATCH: usize = 64;

/// Move the calling thread into network namespace `ns` (`/run/netns/NS`).
fn enter_netns(ns: &str) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(Path::new("/run/netns").join(ns))?;
    // SAFETY: setns on a valid namespace fd; affects only this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn udp_socket() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket(2); the fd is owned by the returned OwnedFd.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(ip: std::net::Ipv4Addr, port: u16) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain data; all-zero is valid.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_port = port.to_be();
    a.sin_addr.s_addr = u32::from(ip).to_be();
    a
}

/// CPU seconds (user + system) the calling thread has used.
fn thread_cpu() -> f64 {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a live rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn blast_receiver(
    ns: &str,
    port: u16,
    stop: &std::sync::atomic::AtomicBool,
    ready: &std::sync::atomic::AtomicBool,
) -> Result<(u64, f64), String> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    enter_netns(ns).map_err(|e| format!("setns {ns}: {e}"))?;
    let sock = udp_socket().map_err(|e| format!("socket: {e}"))?;
    let fd = sock.as_raw_fd();
    let addr = sockaddr(std::net::Ipv4Addr::UNSPECIFIED, port);
    // SAFETY: addr is a valid sockaddr_in of the given length.
    if unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } != 0
    {
        return Err(format!("bind: {}", std::io::Error::last_os_error()));
    }
    let rcvbuf: libc::c_int = 8 << 20;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: option values are live locals of the sizes given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    let mut bufs = vec![[0u8; 64]; MMSG_BATCH];
    let mut iovs: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; zeroed is "no name, no control".
    let mut msgs: Vec<libc::mmsghdr> = (0..MMSG_BATCH)
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    ready.store(true, Ordering::SeqCst);
    let cpu0 = thread_cpu();
    let mut got = 0u64;
    while !stop.load(Ordering::SeqCst) {
        // SAFETY: msgs point at iovs/bufs, which outlive the call.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                MMSG_BATCH as libc::c_uint,
                0,
                std::ptr::null_mut(),
            )
        };
        if n > 0 {
            got += n as u64;
        }
    }
    Ok((got, thread_cpu() - cpu0))
}

fn blast_sender(
    ns: &str,
    dst: std::net::Ipv4Addr,
    port: u16,
    dur: Duration,
) -> Result<(u64, f64, u64, f64), String> {
    use std::os::fd::AsRawFd;
    enter_netns(ns).map_err(|e| format!("setns {ns}: {e}"))?;
    let sock = udp_socket().map_err(|e| format!("socket: {e}"))?;
    let fd = sock.as_raw_fd();
    let addr = sockaddr(dst, port);
    // SAFETY: addr is a valid sockaddr_in of the given length.
    if unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } != 0
    {
        return Err(format!("connect: {}", std::io::Error::last_os_error()));
    }
    let payload = [0x5au8; UDP_PAYLOAD];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    // SAFETY: mmsghdr is plain data; zeroed is "no name, no control".
    let mut msgs: Vec<libc::mmsghdr> = (0..MMSG_BATCH)
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    for m in msgs.iter_mut() {
        m.msg_hdr.msg_iov = &mut iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let (mut sent, mut errors) = (0u64, 0u64);
    while t0.elapsed() < dur && !interrupted() {
        // SAFETY: every msg points at `iov`, which points at `payload`;
        // both outlive the call.
        let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), MMSG_BATCH as libc::c_uint, 0) };
        if n > 0 {
            sent += n as u64;
        } else {
            errors += 1;
        }
    }
    Ok((
        sent,
        t0.elapsed().as_secs_f64(),
        errors,
        thread_cpu() - cpu0,
    ))
}

/// Run the sendmmsg generator for `s.seconds` and measure around it like
/// [`run_iperf`] does.
pub fn run_blast(s: &IperfSetup<'_>) -> TestSample {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut sample = TestSample {
        test: Test::Udp64Mmsg.name().into(),
        command: format!(
            "in-process: sendmmsg({MMSG_BATCH} x {UDP_PAYLOAD}-byte UDP datagrams) in {} to {}:{}, recvmmsg in {}",
            s.client_ns, s.server_addr, s.port, s.server_ns
        ),
        ..Default::default()
    };
    let Ok(dst) = s.server_addr.parse::<std::net::Ipv4Addr>() else {
        sample.error = Some(format!("bad address {}", s.server_addr));
        return sample;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let rx = {
        let (ns, stop, ready, port) =
            (s.server_ns.to_string(), stop.clone(), ready.clone(), s.port);
        std::thread::spawn(move || blast_receiver(&ns, port, &stop, &ready))
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while !ready.load(Ordering::SeqCst) && !rx.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if !ready.load(Ordering::SeqCst) {
        stop.store(true, Ordering::SeqCst);
        sample.error = Some(match rx.join() {
            Ok(Err(e)) => format!("receiver: {e}"),
            _ => "receiver did not start".into(),
        });
        return sample;
    }
    let h1_0 = IfaceCounters::read(s.client_ns, "eth0").unwrap_or_default();
    let h2_0 = IfaceCounters::read(s.server_ns, "eth0").unwrap_or_default();
    let sw_0 = s.switch_pid.and_then(process_cpu);
    let cpu_0 = MachineCpu::read();
    let t0 = Instant::now();
    let tx = {
        let (ns, port, dur) = (
            s.client_ns.to_string(),
            s.port,
            Duration::from_secs(s.seconds),
        );
        std::thread::spawn(move || blast_sender(&ns, dst, port, dur))
    };
    let sent = tx.join();
    // Frames still in flight (rings, backlogs) arrive within milliseconds.
    std::thread::sleep(Duration::from_millis(50));
    let cpu_1 = MachineCpu::read();
    let wall = t0.elapsed().as_secs_f64();
    let sw_1 = s.switch_pid.and_then(process_cpu);
    let h1_1 = IfaceCounters::read(s.client_ns, "eth0").unwrap_or_default();
    let h2_1 = IfaceCounters::read(s.server_ns, "eth0").unwrap_or_default();
    stop.store(true, Ordering::SeqCst);
    let received = rx.join();

    let cpu = cpu_1.since(&cpu_0);
    sample.wall_s = wall;
    sample.machine_cpu_s = cpu.busy;
    sample.machine_idle_s = cpu.idle;
    sample.steal_s = cpu.steal;
    sample.switch_cpu_s = match (sw_0, sw_1) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    sample.h1 = h1_1.since(&h1_0);
    sample.h2 = h2_1.since(&h2_0);
    let (sent, send_s, errors, send_cpu) = match sent {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            sample.error = Some(format!("sender: {e}"));
            return sample;
        }
        Err(_) => {
            sample.error = Some("sender thread panicked".into());
            return sample;
        }
    };
    let (received, recv_cpu) = match received {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            sample.error = Some(format!("receiver: {e}"));
            return sample;
        }
        Err(_) => {
            sample.error = Some("receiver thread panicked".into());
            return sample;
        }
    };
    if interrupted() {
        sample.error = Some("interrupted".into());
        return sample;
    }
    let dur = send_s.max(1e-9);
    sample.receiver_s = dur;
    sample.bytes_received = received * UDP_PAYLOAD as u64;
    sample.gbps = sample.bytes_received as f64 * 8.0 / dur / 1e9;
    sample.sender_gbps = (sent * UDP_PAYLOAD as u64) as f64 * 8.0 / dur / 1e9;
    sample.udp_sent_pps = Some(sent as f64 / dur);
    sample.udp_received_pps = Some(received as f64 / dur);
    sample.udp_lost = Some(sent.saturating_sub(received));
    sample.h2_rx_pps = sample.h2.rx_packets as f64 / dur;
    sample.h1_tx_pps = sample.h1.tx_packets as f64 / dur;
    sample.generator_cpu_s = Some(send_cpu);
    sample.receiver_cpu_s = Some(recv_cpu);
    sample.client_json = serde_json::json!({
        "sent": sent, "send_s": send_s, "send_errors": errors, "sender_thread_cpu_s": send_cpu,
    });
    sample.server_json =
        serde_json::json!({ "received": received, "receiver_thread_cpu_s": recv_cpu });
    if received == 0 {
        sample.error = Some("nothing arrived at the receiver".into());
    }
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offloads_are_worded_as_ethtool_shows_them() {
        let active: Vec<(String, bool)> = [
            ("tx-checksum-ipv4", false),
            ("tx-checksum-ip-generic", true),
            ("tx-tcp-segmentation", false),
            ("tx-generic-segmentation", true),
            ("rx-gro", false),
        ]
        .map(|(n, on)| (n.to_string(), on))
        .to_vec();
        let shown = shown_offloads(&active);
        let w = |n: &str, v: &str| (n.to_string(), v.to_string());
        assert_eq!(
            shown,
            vec![
                w("tx-checksumming", "on"),
                w("tx-tcp-segmentation", "off"),
                w("generic-segmentation-offload", "on"),
                w("generic-receive-offload", "off"),
            ]
        );
    }
}
