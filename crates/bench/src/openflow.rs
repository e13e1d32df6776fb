//! `nicflow bench openflow`: the OpenFlow control path of nicflow against
//! Open vSwitch in the same run (issue 14's benchmark; document 002 on rule
//! insertion rates).
//!
//! For each engine a one-pair testbed ([`super::testbed`]: `c1 - p1 [switch]
//! p2 - s1`, no rules) is built, the bridge is given a listener
//! `ptcp:6653:127.0.0.1` (nicflow: `set-controller`, OVS: `ovs-vsctl
//! set-controller` with `protocols=OpenFlow13`; both `fail-mode=secure`),
//! and this process connects to it over TCP from the switch's namespace
//! (a thread joins the namespace with `setns` to open the socket) with a
//! blocking socket and our own codec ([`nicflow_openflow`]): `HELLO` first,
//! then requests. The same client, the same bytes, for both switches.
//!
//! 1. **Flow installation.** For N rules `priority=100,ip,nw_src=10.A.B.C,
//!    nw_dst=198.19.0.1,actions=output:2` (distinct sources 10.0.0.1
//!    upwards), the `FLOW_MOD` ADDs are encoded before the clock starts,
//!    then sent in batches of `batch` (1,000) each followed by a
//!    `BARRIER_REQUEST`; the next batch is written only after that
//!    barrier's `BARRIER_REPLY` arrived (stop-and-wait per batch: at most
//!    one batch and one barrier in flight). flows/s = N / time from the
//!    first byte written to the last `BARRIER_REPLY` read. Then an
//!    `AGGREGATE` stats request checks the switch holds N rules, and a
//!    `FLOW_MOD` DELETE of every table (plus a barrier, also timed) empties
//!    it before the next repetition. `reps` repetitions per N, medians.
//! 2. **PACKET_IN round trip.** With the table-miss rule
//!    `priority=0,actions=CONTROLLER:65535` only: one `PACKET_OUT`
//!    (`in_port` 1, `output:TABLE`, a 64-byte UDP frame carrying a sequence
//!    number) at a time; the time from writing it to reading the
//!    `PACKET_IN` with that sequence number (the switch runs the frame
//!    through table 0, misses, and sends it to the controller). Median and
//!    99th percentile over `rtt_samples`, after 20 unmeasured.
//! 3. **PACKET_IN rate.** Same rule; `nicflow gen` in host c1 sends UDP
//!    frames over `pin_flows` distinct source ports at `pin_rate` frames/s
//!    for `pin_secs` seconds into port 1 (AF_PACKET). Every frame misses
//!    and should become a `PACKET_IN`. Rate = the `PACKET_IN`s of those
//!    frames received by this process / the time between the first and the
//!    last of them; the offered frames (the generator's count) and the
//!    share that arrived are reported beside it.

use super::forward::{ovs, Engine};
use super::report::{self, Figure, Series};
use super::testbed::{self, Rules, Testbed, TestbedSpec, BRIDGE};
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::sys;
use nicflow_ofctl::{parse_flow, NumericPorts};
use nicflow_openflow::action;
use nicflow_openflow::msg::flow::{FlowMod, FlowModCommand, PacketIn, PacketOut, ANY, NO_BUFFER};
use nicflow_openflow::msg::hello::Hello;
use nicflow_openflow::msg::multipart::{
    FlowStatsRequest, MultipartRequest, ReplyBody, RequestBody,
};
use nicflow_openflow::msg::SwitchConfig;
use nicflow_openflow::msg::{self, Decoded, Message};
use nicflow_openflow::DecodeError;
use nicflow_packet::builder::FrameBuilder;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

/// The listener's port (inside the switch's private namespace, so any
/// fixed port is free).
pub const OF_PORT: u16 = 6653;
/// `OFPP_TABLE`.
pub const OFPP_TABLE: u32 = 0xffff_fff9;
/// `OFPP_CONTROLLER`.
pub const OFPP_CONTROLLER: u32 = 0xffff_fffd;
/// `OFPTT_ALL`.
pub const ALL_TABLES: u8 = 0xff;
/// Round trips sent before the measured ones.
const RTT_WARMUP: usize = 20;
/// Marker at the start of a probe frame's UDP payload.
const MAGIC: &[u8; 4] = b"NFOF";
/// Most rules (distinct sources in 10.0.0.0/8).
pub const MAX_FLOWS: usize = (1 << 24) - 2;
/// How long one reply may take before the run fails.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

const PROBE_SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0f, 0x01];
const PROBE_DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0f, 0x02];

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Rule counts, comma-separated (each installed `reps` times).
    #[arg(long, default_value = "1000,10000,100000")]
    pub flows: String,
    /// FLOW_MODs per BARRIER_REQUEST.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Repetitions per rule count (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// PACKET_OUT -> PACKET_IN round trips measured (after 20 warm-up).
    #[arg(long, default_value_t = 200)]
    pub rtt_samples: usize,
    /// Offered frames/s from host c1 for the PACKET_IN rate.
    #[arg(long, default_value_t = 100_000.0)]
    pub pin_rate: f64,
    /// Seconds the generator sends for the PACKET_IN rate.
    #[arg(long, default_value_t = 3.0)]
    pub pin_secs: f64,
    /// Distinct UDP flows (source ports) of the generator.
    #[arg(long, default_value_t = 1000)]
    pub pin_flows: u32,
    /// Switches (`nicflow` is nicflow-tc, the defaults; `ovs` is Open
    /// vSwitch userspace, netdev datapath).
    #[arg(long, default_value = "nicflow,ovs")]
    pub engines: String,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// What one run measures.
#[derive(Clone, Debug)]
pub struct Options {
    pub flows: Vec<usize>,
    pub batch: usize,
    pub reps: usize,
    pub rtt_samples: usize,
    pub pin_rate: f64,
    pub pin_secs: f64,
    pub pin_flows: u32,
    pub engines: Vec<Engine>,
}

pub fn options(a: &Args) -> anyhow::Result<Options> {
    let mut flows = if a.run.quick {
        vec![1000, 10_000]
    } else {
        testbed::parse_counts(&a.flows)?
    };
    flows.sort_unstable();
    flows.dedup();
    if let Some(&n) = flows.iter().find(|&&n| n == 0 || n > MAX_FLOWS) {
        bail!("--flows {n}: 1..={MAX_FLOWS}");
    }
    if a.batch == 0 || a.reps == 0 || a.rtt_samples == 0 || a.pin_flows == 0 {
        bail!("--batch, --reps, --rtt-samples and --pin-flows must be positive");
    }
    if !(a.pin_rate > 0.0 && a.pin_secs > 0.0) {
        bail!("--pin-rate and --pin-secs must be positive");
    }
    let engines = testbed::parse_engines(&a.engines)?;
    if let Some(e) = engines.iter().find(|e| !e.is_nicflow() && !e.is_ovs()) {
        bail!("engine {}: has no OpenFlow", e.name());
    }
    let (reps, rtt_samples, pin_secs) = if a.run.quick {
        (a.reps.min(2), a.rtt_samples.min(100), a.pin_secs.min(1.0))
    } else {
        (a.reps, a.rtt_samples, a.pin_secs)
    };
    Ok(Options {
        flows,
        batch: a.batch,
        reps,
        rtt_samples,
        pin_rate: a.pin_rate,
        pin_secs,
        pin_flows: a.pin_flows,
        engines,
    })
}

pub fn command_line(o: &Options) -> String {
    format!(
        "nicflow bench openflow --flows {} --batch {} --reps {} --rtt-samples {} --pin-rate {} --pin-secs {} --pin-flows {} --engines {}",
        report::join(&o.flows, ","),
        o.batch,
        o.reps,
        o.rtt_samples,
        o.pin_rate,
        o.pin_secs,
        o.pin_flows,
        report::join(&o.engines.iter().map(|e| e.name()).collect::<Vec<_>>(), ",")
    )
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    let measure = || run(&options(args)?, progress);
    report::cli(&args.run, "openflow", measure, figures, markdown)
}

fn progress(s: &str) {
    eprintln!("[openflow] {s}");
}

// ---------------------------------------------------------------------------
// Messages (pure)
// ---------------------------------------------------------------------------

/// Rule `i`'s text (`i < MAX_FLOWS`).
pub fn rule_text(i: usize) -> String {
    let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + i as u32 + 1);
    format!("priority=100,ip,nw_src={src},nw_dst=198.19.0.1,actions=output:2")
}

/// An ADD `FLOW_MOD` for an `ovs-ofctl` rule line (numeric ports).
pub fn flow_mod(text: &str) -> anyhow::Result<FlowMod> {
    let spec = parse_flow(text, &NumericPorts).map_err(|e| anyhow::anyhow!("{text}: {e}"))?;
    let instructions = action::from_nicflow(&spec.actions, &spec.r#match)
        .map_err(|e| anyhow::anyhow!("{text}: {e:?}"))?;
    Ok(FlowMod {
        cookie: spec.cookie,
        cookie_mask: 0,
        table_id: spec.table,
        command: FlowModCommand::Add,
        idle_timeout: spec.idle_timeout,
        hard_timeout: spec.hard_timeout,
        priority: spec.priority,
        buffer_id: NO_BUFFER,
        out_port: ANY,
        out_group: ANY,
        flags: 0,
        importance: 0,
        r#match: spec.r#match,
        instructions,
    })
}

/// `FLOW_MOD` DELETE of every rule of every table.
pub fn delete_all() -> Message {
    Message::FlowMod(FlowMod {
        cookie: 0,
        cookie_mask: 0,
        table_id: ALL_TABLES,
        command: FlowModCommand::Delete,
        idle_timeout: 0,
        hard_timeout: 0,
        priority: 0,
        buffer_id: NO_BUFFER,
        out_port: ANY,
        out_group: ANY,
        flags: 0,
        importance: 0,
        r#match: Default::default(),
        instructions: Vec::new(),
    })
}

/// `AGGREGATE` stats of every rule of every table.
pub fn aggregate_request() -> Message {
    Message::MultipartRequest(MultipartRequest {
        flags: 0,
        body: RequestBody::Aggregate(FlowStatsRequest {
            table_id: ALL_TABLES,
            out_port: ANY,
            out_group: ANY,
            cookie: 0,
            cookie_mask: 0,
            r#match: Default::default(),
        }),
    })
}

/// The flow count of an `AGGREGATE` reply.
pub fn flow_count(m: &Message) -> Option<u32> {
    match m {
        Message::MultipartReply(r) => match &r.body {
            ReplyBody::Aggregate(a) => Some(a.flow_count),
            _ => None,
        },
        _ => None,
    }
}

/// Xid of batch `b`'s barrier; FLOW_MODs use their rule index (below
/// 2^24), so the two never collide.
pub fn barrier_xid(b: usize) -> u32 {
    0x8000_0000 | b as u32
}

/// Rules `0..n` as wire bytes: one buffer per batch of `batch` ADDs, each
/// ending in a `BARRIER_REQUEST` with [`barrier_xid`] of its index.
pub fn install_batches(n: usize, batch: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let mut buf = Vec::with_capacity((end - i) * 120 + 8);
        for k in i..end {
            let fm = flow_mod(&rule_text(k))?;
            msg::encode(&Message::FlowMod(fm), k as u32, &mut buf)?;
        }
        msg::encode(&Message::BarrierRequest, barrier_xid(out.len()), &mut buf)?;
        out.push(buf);
        i = end;
    }
    Ok(out)
}

/// A 64-byte (60 without FCS) UDP frame carrying `seq`.
pub fn probe_frame(seq: u32) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.resize(18, 0);
    FrameBuilder::new(PROBE_SRC_MAC, PROBE_DST_MAC)
        .ipv4(Ipv4Addr::new(198, 18, 1, 1), Ipv4Addr::new(198, 18, 2, 1))
        .udp(40000, 9)
        .payload(&payload)
        .build()
}

/// The sequence number of a [`probe_frame`] (None for other frames).
pub fn probe_seq(frame: &[u8]) -> Option<u32> {
    if !is_ipv4_udp(frame) {
        return None;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let p = frame.get(14 + ihl + 8..14 + ihl + 16)?;
    (p[..4] == MAGIC[..]).then(|| u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
}

/// Untagged IPv4 carrying UDP.
pub fn is_ipv4_udp(frame: &[u8]) -> bool {
    frame.len() >= 42 && frame[12..14] == [0x08, 0x00] && frame[23] == 17
}

/// `PACKET_OUT` of `frame` from port `in_port` through the tables.
pub fn packet_out(in_port: u32, frame: Vec<u8>) -> Message {
    Message::PacketOut(PacketOut {
        buffer_id: NO_BUFFER,
        in_port,
        metadata: nicflow_flow::Match::catchall(),
        actions: vec![action::OfAction::Output {
            port: OFPP_TABLE,
            max_len: 0,
        }],
        data: frame,
    })
}

/// `SET_CONFIG`: normal fragments, `miss_send_len` `OFPCML_NO_BUFFER`.
pub fn set_config() -> Message {
    Message::SetConfig(SwitchConfig {
        flags: 0,
        miss_send_len: 0xffff,
    })
}

/// The table-miss rule every PACKET_IN test runs.
pub const MISS_RULE: &str = "priority=0,actions=CONTROLLER:65535";

// ---------------------------------------------------------------------------
// The connection
// ---------------------------------------------------------------------------

/// One OpenFlow 1.3 connection to a switch, blocking.
pub struct Conn {
    s: TcpStream,
    rbuf: Vec<u8>,
    /// Messages decoded but not yet handed out.
    pending: std::collections::VecDeque<Decoded>,
    /// Asynchronous messages skipped while waiting for something else.
    pub skipped: u64,
}

/// A TCP connection to `127.0.0.1:port` opened inside namespace `netns`
/// (retried until `deadline`: the listener appears asynchronously).
fn connect_in(netns: &str, port: u16, deadline: Instant) -> anyhow::Result<TcpStream> {
    let ns = netns.to_string();
    std::thread::spawn(move || -> anyhow::Result<TcpStream> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(format!("/var/run/netns/{ns}"))
            .with_context(|| format!("namespace {ns}"))?;
        // SAFETY: setns on a valid namespace fd; affects only this
        // short-lived thread. The socket keeps the namespace it was
        // created in after the thread ends.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).context("setns");
        }
        loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => return Ok(s),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e)
                        .with_context(|| format!("connecting to 127.0.0.1:{port} in {ns}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    })
    .join()
    .map_err(|_| anyhow::anyhow!("connect thread panicked"))?
}

impl Conn {
    /// Connect and exchange `HELLO`s.
    pub fn open(netns: &str, port: u16) -> anyhow::Result<Conn> {
        let s = connect_in(netns, port, Instant::now() + Duration::from_secs(15))?;
        s.set_nodelay(true)?;
        let mut c = Conn {
            s,
            rbuf: Vec::new(),
            pending: Default::default(),
            skipped: 0,
        };
        c.send(&Message::Hello(Hello::ofp13()), 1)?;
        let d = c.wait(Duration::from_secs(10), |d| {
            matches!(d.message, Message::Hello(_))
        })?;
        if d.version != msg::OFP13_VERSION {
            // The header version of a HELLO is the peer's highest; a
            // bitmap with 1.3 still negotiates 1.3.
            let h = match &d.message {
                Message::Hello(h) => h.clone(),
                _ => unreachable!(),
            };
            msg::hello::negotiate(&h).map_err(|e| anyhow::anyhow!("version: {e:?}"))?;
        }
        // Whole frames in table-miss PACKET_INs. Open vSwitch counts a
        // connection accepted by a `ptcp:` controller as a service
        // connection, which gets no asynchronous messages until it sets a
        // non-zero miss_send_len.
        c.send(&set_config(), 2)?;
        Ok(c)
    }

    pub fn send(&mut self, m: &Message, xid: u32) -> anyhow::Result<()> {
        let b = msg::encode_to_vec(m, xid)?;
        self.s.write_all(&b)?;
        Ok(())
    }

    pub fn send_bytes(&mut self, b: &[u8]) -> anyhow::Result<()> {
        self.s.write_all(b)?;
        Ok(())
    }

    /// The next message, or None after `timeout` without one. Echo
    /// requests are answered here.
    pub fn recv(&mut self, timeout: Duration) -> anyhow::Result<Option<Decoded>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(d) = self.pending.pop_front() {
                if let Message::EchoRequest(data) = &d.message {
                    let data = data.clone();
                    self.send(&Message::EchoReply(data), d.xid)?;
                    continue;
                }
                return Ok(Some(d));
            }
            // Decode what is buffered.
            let mut used = 0;
            loop {
                match msg::decode(&self.rbuf[used..]) {
                    Ok((d, n)) => {
                        used += n;
                        self.pending.push_back(d);
                    }
                    Err(DecodeError::Incomplete { .. }) => break,
                    Err(DecodeError::Malformed(m)) => match m.skip {
                        Some(n) => {
                            tracing::warn!("undecodable message from the switch: {}", m.reason);
                            used += n;
                        }
                        None => bail!("broken framing from the switch: {}", m.reason),
                    },
                }
            }
            self.rbuf.drain(..used);
            if !self.pending.is_empty() {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.s
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
            let mut tmp = [0u8; 65536];
            match self.s.read(&mut tmp) {
                Ok(0) => bail!("the switch closed the connection"),
                Ok(n) => self.rbuf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Wait for the first message `want` accepts; an `ERROR` fails, other
    /// messages are counted in `skipped`.
    pub fn wait(
        &mut self,
        timeout: Duration,
        want: impl Fn(&Decoded) -> bool,
    ) -> anyhow::Result<Decoded> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(d) = self.recv(left)? else {
                bail!("no reply within {timeout:?}");
            };
            if want(&d) {
                return Ok(d);
            }
            if let Message::Error(e) = &d.message {
                bail!("switch error (xid {}): {:?}", d.xid, e.error);
            }
            self.skipped += 1;
        }
    }

    /// Send a barrier and wait for its reply.
    pub fn barrier(&mut self, xid: u32) -> anyhow::Result<()> {
        self.send(&Message::BarrierRequest, xid)?;
        self.wait(REPLY_TIMEOUT, |d| {
            d.xid == xid && matches!(d.message, Message::BarrierReply)
        })?;
        Ok(())
    }

    /// Rules in all tables (`AGGREGATE` stats).
    pub fn count_flows(&mut self, xid: u32) -> anyhow::Result<u32> {
        self.send(&aggregate_request(), xid)?;
        let d = self.wait(REPLY_TIMEOUT, |d| {
            d.xid == xid && flow_count(&d.message).is_some()
        })?;
        Ok(flow_count(&d.message).unwrap_or(0))
    }

    /// Delete every rule; returns the time until the barrier reply.
    pub fn delete_all(&mut self, xid: u32) -> anyhow::Result<f64> {
        let t0 = Instant::now();
        self.send(&delete_all(), xid)?;
        self.barrier(xid + 1)?;
        Ok(t0.elapsed().as_secs_f64())
    }
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InstallPoint {
    pub flows: usize,
    /// Seconds from the first FLOW_MOD written to the last BARRIER_REPLY,
    /// one per repetition.
    pub install_s: Vec<f64>,
    /// Rules the switch reported (AGGREGATE) after each installation.
    pub counted: Vec<u32>,
    /// DELETE all + barrier, seconds, per repetition.
    pub delete_s: Vec<f64>,
}

fn med(v: &[f64]) -> f64 {
    super::median(&mut v.to_vec())
}

impl InstallPoint {
    pub fn flows_per_s(&self) -> f64 {
        self.flows as f64 / med(&self.install_s)
    }
    pub fn all_counted(&self) -> bool {
        self.counted.iter().all(|&c| c as usize == self.flows)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RateSample {
    /// What the generator said it sent, and over how long.
    pub sent: u64,
    pub gen_seconds: f64,
    pub gen_engine: String,
    /// PACKET_INs of generated frames (IPv4 UDP) received.
    pub received: u64,
    /// Time between the first and the last of them.
    pub span_s: f64,
    /// Other PACKET_INs (host chatter: ARP, IPv6 ND).
    pub other: u64,
}

impl RateSample {
    pub fn per_s(&self) -> Option<f64> {
        (self.received > 1 && self.span_s > 0.0).then(|| (self.received - 1) as f64 / self.span_s)
    }
    pub fn offered_per_s(&self) -> Option<f64> {
        (self.gen_seconds > 0.0).then(|| self.sent as f64 / self.gen_seconds)
    }
    pub fn delivered(&self) -> Option<f64> {
        (self.sent > 0).then(|| self.received as f64 / self.sent as f64)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EngineResult {
    pub engine: String,
    pub version: String,
    pub install: Vec<InstallPoint>,
    /// PACKET_OUT -> PACKET_IN, microseconds.
    pub rtt_us: Vec<f64>,
    /// Probes whose PACKET_IN never came (2 s each).
    pub rtt_lost: usize,
    pub rate: Option<RateSample>,
    /// Messages received while waiting for something else.
    pub skipped: u64,
    /// Why the engine's run stopped early.
    pub error: Option<String>,
}

impl EngineResult {
    pub fn point(&self, flows: usize) -> Option<&InstallPoint> {
        self.install.iter().find(|p| p.flows == flows)
    }
    pub fn rtt_median(&self) -> Option<f64> {
        (!self.rtt_us.is_empty()).then(|| med(&self.rtt_us))
    }
    pub fn rtt_p99(&self) -> Option<f64> {
        percentile(&self.rtt_us, 0.99)
    }
}

pub fn percentile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let k = ((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1;
    Some(s[k])
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    pub load_start: String,
    pub load_end: String,
    pub command: String,
    pub batch: usize,
    pub reps: usize,
    pub rtt_samples: usize,
    pub pin_rate: f64,
    pub pin_secs: f64,
    pub pin_flows: u32,
    pub engines: Vec<EngineResult>,
    pub wall_s: f64,
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// Give the testbed's switch the listener and the secure fail mode.
fn set_controller(tb: &Testbed) -> anyhow::Result<()> {
    let target = format!("ptcp:{OF_PORT}:127.0.0.1");
    // Loopback of the switch namespace (the lab may leave it down).
    let ns = tb.switch_netns();
    nicflow::os::netlink::Rtnl::open(Some(ns))
        .and_then(|mut rt| nicflow::os::link::set_up(&mut rt, "lo"))
        .map_err(|e| anyhow::anyhow!("{ns}: {e}"))?;
    if let Some(sock) = tb.nicflow_socket() {
        for req in [
            Request::SetFailMode {
                bridge: BRIDGE.into(),
                mode: "secure".into(),
            },
            Request::Set {
                bridge: BRIDGE.into(),
                key: "protocols".into(),
                value: "OpenFlow13".into(),
            },
            Request::SetController {
                bridge: BRIDGE.into(),
                targets: vec![target.clone()],
            },
        ] {
            let r = sys::request_in(Some(tb.switch_netns()), &sock, &req)?;
            if !r.ok {
                bail!("nicflow {req:?}: {}", r.error.unwrap_or_default());
            }
        }
    } else {
        let dir = std::env::temp_dir().join(format!(
            "{}{}-{}",
            ovs::DIR_PREFIX,
            std::process::id(),
            tb.lab_name()
        ));
        let db = format!("--db=unix:{}/db.sock", dir.display());
        let argv = [
            "ovs-vsctl",
            &db,
            "--timeout=20",
            "set-fail-mode",
            BRIDGE,
            "secure",
            "--",
            "set",
            "bridge",
            BRIDGE,
            "protocols=OpenFlow13",
            "--",
            "set-controller",
            BRIDGE,
            &target,
        ];
        sys::run(&mut sys::in_ns(None, &argv)).context("ovs-vsctl set-controller")?;
    }
    Ok(())
}

fn engine_version(e: Engine) -> String {
    if e.is_ovs() {
        ovs::version()
    } else {
        format!("nicflow {}", env!("CARGO_PKG_VERSION"))
    }
}

pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> anyhow::Result<Results> {
    let wall = Instant::now();
    let load_start = super::host_tools::loadavg();
    progress(&format!("encoding {:?} rules", opts.flows));
    let mut batches = Vec::new();
    for &n in &opts.flows {
        batches.push(install_batches(n, opts.batch)?);
    }
    let mut engines = Vec::new();
    for &e in &opts.engines {
        if super::forward::interrupted() {
            bail!("interrupted");
        }
        progress(&format!("{}: starting the testbed", e.name()));
        let mut spec = TestbedSpec::new(e, 1, "oflow");
        spec.rules = Rules::Custom(Vec::new());
        let tb = Testbed::up(&spec).with_context(|| format!("{} testbed", e.name()))?;
        let mut r = EngineResult {
            engine: e.name().into(),
            version: engine_version(e),
            install: Vec::new(),
            rtt_us: Vec::new(),
            rtt_lost: 0,
            rate: None,
            skipped: 0,
            error: None,
        };
        if let Err(err) = measure_engine(&tb, opts, &batches, &mut r, &mut progress) {
            progress(&format!("{}: {err:#}", e.name()));
            r.error = Some(format!("{err:#}"));
        }
        tb.down()?;
        engines.push(r);
    }
    Ok(Results {
        machine: super::machine_description(),
        load_start,
        load_end: super::host_tools::loadavg(),
        command: command_line(opts),
        batch: opts.batch,
        reps: opts.reps,
        rtt_samples: opts.rtt_samples,
        pin_rate: opts.pin_rate,
        pin_secs: opts.pin_secs,
        pin_flows: opts.pin_flows,
        engines,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

fn measure_engine(
    tb: &Testbed,
    opts: &Options,
    batches: &[Vec<Vec<u8>>],
    r: &mut EngineResult,
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<()> {
    let name = tb.engine().name();
    set_controller(tb)?;
    let mut c = Conn::open(tb.switch_netns(), OF_PORT)?;
    let mut xid = 0x4000_0000u32;
    let mut next = || {
        xid += 2;
        xid
    };
    c.delete_all(next())?;
    let left = c.count_flows(next())?;
    if left != 0 {
        bail!("{left} rules left after DELETE all");
    }
    // 1. Flow installation.
    for (&n, bufs) in opts.flows.iter().zip(batches) {
        let mut p = InstallPoint {
            flows: n,
            install_s: Vec::new(),
            counted: Vec::new(),
            delete_s: Vec::new(),
        };
        for rep in 0..opts.reps {
            if super::forward::interrupted() {
                bail!("interrupted");
            }
            let t0 = Instant::now();
            for (b, buf) in bufs.iter().enumerate() {
                c.send_bytes(buf)?;
                let want = barrier_xid(b);
                c.wait(REPLY_TIMEOUT, |d| {
                    d.xid == want && matches!(d.message, Message::BarrierReply)
                })
                .with_context(|| format!("{n} rules, batch {b}"))?;
            }
            let t = t0.elapsed().as_secs_f64();
            let counted = c.count_flows(next())?;
            let del = c.delete_all(next())?;
            progress(&format!(
                "{name}: {n} rules, rep {}: {:.0} flows/s, {counted} counted, delete {:.3} s",
                rep + 1,
                n as f64 / t,
                del
            ));
            p.install_s.push(t);
            p.counted.push(counted);
            p.delete_s.push(del);
        }
        r.install.push(p);
    }
    // 2. Round trips.
    let miss = flow_mod(MISS_RULE)?;
    c.send(&Message::FlowMod(miss), next())?;
    c.barrier(next())?;
    let in_port = tb.client(0).ofport;
    for k in 0..RTT_WARMUP + opts.rtt_samples {
        let seq = k as u32;
        let po = msg::encode_to_vec(&packet_out(in_port, probe_frame(seq)), next())?;
        let t0 = Instant::now();
        c.send_bytes(&po)?;
        let got = c.wait(Duration::from_secs(2), |d| match &d.message {
            Message::PacketIn(pi) => probe_seq(&pi.data) == Some(seq),
            _ => false,
        });
        let us = t0.elapsed().as_secs_f64() * 1e6;
        match got {
            Ok(_) if k >= RTT_WARMUP => r.rtt_us.push(us),
            Ok(_) => {}
            Err(e) if e.to_string().starts_with("no reply") => r.rtt_lost += 1,
            Err(e) => return Err(e),
        }
    }
    progress(&format!(
        "{name}: PACKET_OUT -> PACKET_IN median {:.0} us ({} lost)",
        r.rtt_median().unwrap_or(f64::NAN),
        r.rtt_lost
    ));
    // 3. Rate from a lab host.
    r.rate = Some(packet_in_rate(tb, &mut c, opts)?);
    if let Some(s) = &r.rate {
        progress(&format!(
            "{name}: {} PACKET_INs/s ({} of {} frames)",
            s.per_s().map(|x| format!("{x:.0}")).unwrap_or("-".into()),
            s.received,
            s.sent
        ));
    }
    r.skipped = c.skipped;
    Ok(())
}

fn packet_in_rate(tb: &Testbed, c: &mut Conn, opts: &Options) -> anyhow::Result<RateSample> {
    let bin = super::nicflow_bin()?;
    let server = tb.server(0);
    let argv: Vec<String> = vec![
        bin.display().to_string(),
        "gen".into(),
        "--iface".into(),
        tb.client(0).iface.clone(),
        "--port-type".into(),
        "afpacket".into(),
        "--proto".into(),
        "udp".into(),
        "--dst-ip".into(),
        server.ip4.to_string(),
        "--dst-mac".into(),
        server.mac.clone(),
        "--flows".into(),
        opts.pin_flows.to_string(),
        "--rate".into(),
        opts.pin_rate.to_string(),
        "--duration".into(),
        opts.pin_secs.to_string(),
        "--json".into(),
    ];
    let mut cmd = tb.client_cmd(0, &argv);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().context("starting nicflow gen")?;
    let mut s = RateSample::default();
    let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
    let deadline = Instant::now() + Duration::from_secs_f64(opts.pin_secs + 30.0);
    let mut exited_at: Option<Instant> = None;
    loop {
        if exited_at.is_none() && child.try_wait()?.is_some() {
            exited_at = Some(Instant::now());
        }
        // One second of quiet after the generator ended: done.
        if let Some(t) = exited_at {
            let quiet_since = last.unwrap_or(t).max(t);
            if quiet_since.elapsed() > Duration::from_secs(1) {
                break;
            }
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            bail!("the PACKET_IN rate phase did not end");
        }
        if let Some(d) = c.recv(Duration::from_millis(100))? {
            match &d.message {
                Message::PacketIn(PacketIn { data, .. }) if is_ipv4_udp(data) => {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = Some(now);
                    s.received += 1;
                }
                Message::PacketIn(_) => s.other += 1,
                Message::Error(e) => bail!("switch error: {:?}", e.error),
                _ => c.skipped += 1,
            }
        }
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nicflow gen failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("gen output {}", String::from_utf8_lossy(&out.stdout)))?;
    s.sent = v["sent"].as_u64().unwrap_or(0);
    s.gen_seconds = v["seconds"].as_f64().unwrap_or(0.0);
    s.gen_engine = v["engine"].as_str().unwrap_or("").to_string();
    if let (Some(a), Some(b)) = (first, last) {
        s.span_s = (b - a).as_secs_f64();
    }
    Ok(s)
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

fn all_flows(r: &Results) -> Vec<usize> {
    let mut v: Vec<usize> = r
        .engines
        .iter()
        .flat_map(|e| e.install.iter().map(|p| p.flows))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

pub fn figures(r: &Results) -> Vec<Figure> {
    vec![Figure {
        id: "flow_install".into(),
        title: "Flow installation over OpenFlow (barrier per batch)".into(),
        x_label: "rules installed".into(),
        y_label: "flows per second".into(),
        log_x: true,
        series: r
            .engines
            .iter()
            .map(|e| Series {
                name: e.engine.clone(),
                points: e
                    .install
                    .iter()
                    .map(|p| (p.flows as f64, Some(p.flows_per_s())))
                    .collect(),
            })
            .collect(),
    }]
}

fn is_ovs(e: &EngineResult) -> bool {
    e.engine.starts_with("ovs")
}

pub fn markdown(r: &Results, _figs: &[Figure]) -> String {
    use super::ct_scale::thousands;
    let mut m = String::new();
    let _ = writeln!(m, "# nicflow bench openflow\n");
    let _ = writeln!(
        m,
        "Machine: {}. Load average (1/5/15 min) at the start: {}, at the end: {}. \
         Whole run: {:.0} s.\n",
        r.machine, r.load_start, r.load_end, r.wall_s
    );
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    for e in &r.engines {
        let _ = writeln!(m, "- {}: {}", e.engine, e.version);
    }
    let _ = writeln!(
        m,
        "\nEach switch runs in a one-pair lab (c1 on port 1, s1 on port 2) with an OpenFlow \
         listener `ptcp:{OF_PORT}:127.0.0.1` in its namespace, fail mode secure, OpenFlow 1.3; \
         the same client (this process, our codec, one blocking TCP connection, HELLO first) \
         sends the same bytes to both.\n"
    );

    let _ = writeln!(m, "## Flow installation\n");
    let _ = writeln!(
        m,
        "N rules `priority=100,ip,nw_src=10.x.y.z,nw_dst=198.19.0.1,actions=output:2` (distinct \
         sources), encoded beforehand; FLOW_MOD ADDs written in batches of {} each followed by \
         a BARRIER_REQUEST, and the next batch written only when that barrier's reply has \
         arrived (one batch in flight). flows/s = N / time from the first byte written to the \
         last BARRIER_REPLY; median of {} repetitions. After each, AGGREGATE stats count the \
         rules, and one FLOW_MOD DELETE (all tables) plus a barrier empties the switch (timed: \
         delete s).\n",
        thousands(r.batch),
        r.reps
    );
    let flows = all_flows(r);
    let nics: Vec<&EngineResult> = r.engines.iter().filter(|e| !is_ovs(e)).collect();
    let ov = r.engines.iter().find(|e| is_ovs(e));
    let mut head: Vec<(String, bool)> = vec![("rules".into(), true)];
    for e in &r.engines {
        head.push((format!("{} flows/s", e.engine), true));
    }
    if let Some(o) = ov {
        for a in &nics {
            head.push((format!("{} / {}", a.engine, o.engine), true));
        }
    }
    for e in &r.engines {
        head.push((format!("{} delete s", e.engine), true));
    }
    for e in &r.engines {
        head.push((format!("{} rules counted", e.engine), true));
    }
    let rows: Vec<Vec<String>> = flows
        .iter()
        .map(|&n| {
            let mut row = vec![thousands(n)];
            for e in &r.engines {
                row.push(report::cell(e.point(n).map(|p| p.flows_per_s()), 0));
            }
            if let Some(b) = ov {
                for a in &nics {
                    let ratio = a
                        .point(n)
                        .zip(b.point(n))
                        .map(|(a, b)| a.flows_per_s() / b.flows_per_s());
                    row.push(
                        ratio
                            .map(|x| format!("{x:.2}x"))
                            .unwrap_or_else(|| "—".into()),
                    );
                }
            }
            for e in &r.engines {
                row.push(report::cell(e.point(n).map(|p| med(&p.delete_s)), 3));
            }
            for e in &r.engines {
                row.push(
                    e.point(n)
                        .map(|p| {
                            let ok = if p.all_counted() { "" } else { " (MISMATCH)" };
                            format!("{}{ok}", report::join(&p.counted, " "))
                        })
                        .unwrap_or_else(|| "—".into()),
                );
            }
            row
        })
        .collect();
    let head_ref: Vec<(&str, bool)> = head.iter().map(|(s, b)| (s.as_str(), *b)).collect();
    m.push_str(&report::table(&head_ref, &rows));
    let _ = writeln!(m, "\nPer repetition (flows/s):\n");
    for e in &r.engines {
        for p in &e.install {
            let _ = writeln!(
                m,
                "- {} {}: {}",
                e.engine,
                thousands(p.flows),
                report::join(
                    &p.install_s
                        .iter()
                        .map(|t| format!("{:.0}", p.flows as f64 / t))
                        .collect::<Vec<_>>(),
                    " "
                )
            );
        }
    }

    let _ = writeln!(m, "\n## PACKET_IN\n");
    let _ = writeln!(
        m,
        "Only the table-miss rule `{MISS_RULE}` installed. Round trip: one PACKET_OUT at a time \
         (in_port 1, `output:TABLE`, a 60-byte UDP frame with a sequence number), time from \
         writing it to reading the PACKET_IN carrying that number; {} measured after {RTT_WARMUP} \
         warm-up. Rate: `nicflow gen` in c1 sends 64-byte UDP frames ({} source ports) at {} \
         frames/s for {} s into port 1; every frame misses; PACKET_INs/s = (PACKET_INs of those \
         frames - 1) / time between the first and the last received; delivered = PACKET_INs / \
         frames the generator sent.\n",
        r.rtt_samples, r.pin_flows, r.pin_rate, r.pin_secs
    );
    let rows: Vec<Vec<String>> = r
        .engines
        .iter()
        .map(|e| {
            let rate = e.rate.as_ref();
            vec![
                e.engine.clone(),
                report::cell(e.rtt_median(), 0),
                report::cell(e.rtt_p99(), 0),
                format!("{}/{}", e.rtt_us.len(), e.rtt_us.len() + e.rtt_lost),
                report::cell(rate.and_then(|s| s.per_s()), 0),
                report::cell(rate.and_then(|s| s.offered_per_s()), 0),
                rate.and_then(|s| s.delivered())
                    .map(|d| format!("{:.1}%", d * 100.0))
                    .unwrap_or_else(|| "—".into()),
                rate.map(|s| format!("{} / {}", s.received, s.sent))
                    .unwrap_or_else(|| "—".into()),
                e.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    m.push_str(&report::table(
        &[
            ("switch", false),
            ("round trip median µs", true),
            ("p99 µs", true),
            ("answered", true),
            ("PACKET_INs/s", true),
            ("offered frames/s", true),
            ("delivered", true),
            ("PACKET_INs / frames sent", true),
            ("error", false),
        ],
        &rows,
    ));
    if let Some(b) = ov {
        m.push('\n');
        for a in &nics {
            let rtt = a.rtt_median().zip(b.rtt_median()).map(|(x, y)| x / y);
            let rate = a
                .rate
                .as_ref()
                .and_then(|s| s.per_s())
                .zip(b.rate.as_ref().and_then(|s| s.per_s()))
                .map(|(x, y)| x / y);
            let _ = writeln!(
                m,
                "- {} / {}: round-trip time {} (above 1: slower), PACKET_IN rate {} (above 1: more).",
                a.engine,
                b.engine,
                rtt.map(|x| format!("{x:.2}x")).unwrap_or("—".into()),
                rate.map(|x| format!("{x:.2}x")).unwrap_or("—".into())
            );
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_distinct_and_encode_as_ovs_would() {
        assert_eq!(
            rule_text(0),
            "priority=100,ip,nw_src=10.0.0.1,nw_dst=198.19.0.1,actions=output:2"
        );
        assert!(rule_text(99_999).contains("nw_src=10.1.134.160,"));
        let fm = flow_mod(&rule_text(5)).unwrap();
        assert_eq!(fm.priority, 100);
        assert_eq!(fm.command, FlowModCommand::Add);
        assert_eq!(fm.buffer_id, NO_BUFFER);
        assert_eq!(
            fm.instructions,
            vec![action::Instruction::ApplyActions(vec![
                action::OfAction::Output {
                    port: 2,
                    max_len: 0
                }
            ])]
        );
        // Decodes back to the same message.
        let b = msg::encode_to_vec(&Message::FlowMod(fm.clone()), 7).unwrap();
        let (d, n) = msg::decode(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(d.xid, 7);
        assert_eq!(d.message, Message::FlowMod(fm));
        assert_ne!(
            flow_mod(&rule_text(1)).unwrap().r#match,
            flow_mod(&rule_text(2)).unwrap().r#match
        );
    }

    #[test]
    fn batches_end_in_barriers() {
        let bufs = install_batches(2500, 1000).unwrap();
        assert_eq!(bufs.len(), 3);
        for (b, buf) in bufs.iter().enumerate() {
            let mut rest = &buf[..];
            let mut mods = 0;
            let mut last = None;
            while !rest.is_empty() {
                let (d, n) = msg::decode(rest).unwrap();
                rest = &rest[n..];
                match d.message {
                    Message::FlowMod(_) => {
                        assert!(last.is_none(), "FLOW_MOD after the barrier");
                        mods += 1;
                    }
                    Message::BarrierRequest => last = Some(d.xid),
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(mods, if b == 2 { 500 } else { 1000 });
            assert_eq!(last, Some(barrier_xid(b)));
        }
    }

    #[test]
    fn requests_and_replies() {
        let b = msg::encode_to_vec(&delete_all(), 3).unwrap();
        match msg::decode(&b).unwrap().0.message {
            Message::FlowMod(f) => {
                assert_eq!(f.command, FlowModCommand::Delete);
                assert_eq!(f.table_id, ALL_TABLES);
                assert_eq!((f.out_port, f.out_group), (ANY, ANY));
            }
            other => panic!("{other:?}"),
        }
        let b = msg::encode_to_vec(&aggregate_request(), 4).unwrap();
        assert!(matches!(
            msg::decode(&b).unwrap().0.message,
            Message::MultipartRequest(MultipartRequest {
                body: RequestBody::Aggregate(_),
                ..
            })
        ));
        let reply = Message::MultipartReply(nicflow_openflow::msg::multipart::MultipartReply {
            flags: 0,
            body: ReplyBody::Aggregate(nicflow_openflow::msg::multipart::AggregateStats {
                packet_count: 0,
                byte_count: 0,
                flow_count: 1234,
            }),
        });
        let b = msg::encode_to_vec(&reply, 4).unwrap();
        assert_eq!(flow_count(&msg::decode(&b).unwrap().0.message), Some(1234));
        assert_eq!(flow_count(&Message::BarrierReply), None);
        let miss = flow_mod(MISS_RULE).unwrap();
        assert_eq!(miss.priority, 0);
        assert!(format!("{:?}", miss.instructions).contains(&OFPP_CONTROLLER.to_string()));
    }

    #[test]
    fn probes_carry_their_sequence_number() {
        let f = probe_frame(0xdead_beef);
        assert_eq!(f.len(), 60);
        assert!(is_ipv4_udp(&f));
        assert_eq!(probe_seq(&f), Some(0xdead_beef));
        assert_eq!(probe_seq(&f[..40]), None);
        let mut other = f.clone();
        other[42] = b'X';
        assert_eq!(probe_seq(&other), None);
        // Through a PACKET_OUT and back as a PACKET_IN's data.
        let b = msg::encode_to_vec(&packet_out(1, f.clone()), 9).unwrap();
        match msg::decode(&b).unwrap().0.message {
            Message::PacketOut(p) => {
                assert_eq!(p.in_port, 1);
                assert_eq!(p.data, f);
                assert_eq!(
                    p.actions,
                    vec![action::OfAction::Output {
                        port: OFPP_TABLE,
                        max_len: 0
                    }]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_stats_and_report() {
        let a = Args {
            flows: "10000,1000,1000".into(),
            batch: 1000,
            reps: 3,
            rtt_samples: 200,
            pin_rate: 1000.0,
            pin_secs: 2.0,
            pin_flows: 10,
            engines: "nicflow,ovs".into(),
            run: crate::RunArgs::default(),
        };
        let o = options(&a).unwrap();
        assert_eq!(o.flows, vec![1000, 10000]);
        assert!(command_line(&o).contains("--flows 1000,10000 "));
        assert!(options(&Args {
            engines: "linux-bridge".into(),
            ..a.clone()
        })
        .is_err());
        let q = options(&Args {
            run: crate::RunArgs {
                quick: true,
                ..Default::default()
            },
            ..a
        })
        .unwrap();
        assert_eq!((q.reps, q.rtt_samples), (2, 100));
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 0.99), Some(4.0));
        assert_eq!(percentile(&[], 0.5), None);
        let s = RateSample {
            sent: 1000,
            gen_seconds: 2.0,
            received: 501,
            span_s: 1.0,
            ..Default::default()
        };
        assert_eq!(s.per_s(), Some(500.0));
        assert_eq!(s.offered_per_s(), Some(500.0));
        let p = InstallPoint {
            flows: 1000,
            install_s: vec![0.5, 0.1, 0.2],
            counted: vec![1000, 1000, 1000],
            delete_s: vec![0.01; 3],
        };
        assert_eq!(p.flows_per_s(), 5000.0);
        let e = |name: &str, secs: f64| EngineResult {
            engine: name.into(),
            version: "v".into(),
            install: vec![InstallPoint {
                install_s: vec![secs],
                ..p.clone()
            }],
            rtt_us: vec![100.0, 200.0, 300.0],
            rtt_lost: 0,
            rate: Some(s.clone()),
            skipped: 0,
            error: None,
        };
        let r = Results {
            machine: "m".into(),
            load_start: "0".into(),
            load_end: "0".into(),
            command: command_line(&o),
            batch: 1000,
            reps: 1,
            rtt_samples: 3,
            pin_rate: 1000.0,
            pin_secs: 2.0,
            pin_flows: 10,
            engines: vec![e("nicflow-tc", 0.1), e("ovs", 0.2)],
            wall_s: 1.0,
        };
        let md = markdown(&r, &figures(&r));
        assert!(md.contains("| 1,000 | 10000 | 5000 | 2.00x |"), "{md}");
        assert!(md.contains("nicflow-tc / ovs |"), "{md}");
        assert!(
            md.contains("nicflow-tc / ovs: round-trip time 1.00x"),
            "{md}"
        );
        let back: Results = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.engines.len(), 2);
    }
}
