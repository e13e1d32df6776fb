//! `nicflow bench ipsec`: an encrypted container overlay across two hosts
//! (issue 15; document 000, figures 5.15-5.18): VXLAN over IPsec (ESP
//! AES-GCM-128, tunnel mode, UDP encapsulation) between hosts H1 and H2,
//! one client container c1 behind H1 and one server container s1 behind
//! H2, one iperf3 client with 1..N parallel TCP streams (`-P N`).
//!
//! ```text
//!  c1 (eth0 198.18.62.1) ── vc1 ┐ H1  u1 ══ESP══ u2  H2 ┌ vs1 ── (eth0 198.18.62.101) s1
//!                               198.18.52.1      .52.2
//! ```
//!
//! Engines, the same topology for each:
//!
//! * `nicflow-ipsec`: on each host its own `nicflow daemon` (two
//!   processes: one seals, the other opens, as two real hosts), bridge br0
//!   with the defaults (offload `auto`: the TC engine; `actions=normal`),
//!   the container veth as a port of type `auto` (a TC port) and a VXLAN
//!   tunnel port `vx0` (`auto` underlay: a TC port) with `ipsec=manual`
//!   (fresh random keys per lab, SPIs mirrored), `esp_mode=tunnel`,
//!   `esp_encap=udp`: the same packets on the wire as strongSwan's.
//! * `nicflow-ipsec-afxdp`: the configuration and path of the first
//!   measurements (issue 15): `offload = "none"`, the container veth and
//!   the underlay AF_XDP ports, `gro=false` on the tunnel port.
//! * `nicflow-ipsec-transport`: `nicflow-ipsec` with `esp_mode=transport`
//!   (nicflow's default; the other engines run tunnel mode, the only one
//!   strongSwan's kernel-libipsec has), so both modes are measured in one
//!   run.
//! * `nicflow`: `nicflow-ipsec` without IPsec (the unencrypted overlay in
//!   the TC engine, as `bench overlay --engines nicflow`).
//! * `strongswan`: on each host charon 5.9.8 with kernel-libipsec (ESP in
//!   user space on a TUN device; this kernel has no ESP crypto) with the
//!   private configuration of `crates/ipsec/tests/strongswan` and
//!   `install_routes = yes`, PSK, tunnel mode between the underlay
//!   addresses, `encap = yes`; a kernel `vxlan` device and a Linux bridge:
//!   the kernel's VXLAN packets to the peer are routed into charon's TUN,
//!   charon encrypts them and sends ESP in UDP 4500.
//!
//! Container MTU 1350 for every engine: the VXLAN packet (1400) fits
//! kernel-libipsec's TUN (MTU 1400) and the ESP packet (about 1464) the
//! 1500-byte underlay.
//!
//! Per point (engine, stream count, repetition) the phases of `bench
//! containers` ([`super::colocated`]): calibration of the CPU load with
//! the lab idle, traffic, traffic beside the load, calibration again.
//! During the traffic phase without load the bench also reads the
//! daemons' ESP counters and the underlay's packet counters: the daemons'
//! CPU time over the packets gives nicflow's cost per ESP packet, which
//! the report sets beside the raw AES-GCM cost of `cargo bench -p
//! nicflow-ipsec --bench esp` (`--esp-bench`).
//!
//! `--mode pps` measures a packet rate instead (64-byte frames by
//! default): `nicflow gen` in c1, `nicflow sink` in s1 ([`super::pktrate`]),
//! frames delivered to s1 per second beside the ESP packets sealed on H1
//! and opened on H2 over the same burst (section "Packet rate" below).
//!
//! Names: namespaces `nfbip<pid>x<seq><tag>-h1`, `-h2`, `-c1`, `-s1`;
//! configs, sockets, logs, charon's files in `$TMPDIR/nfbip<pid>x<seq><tag>`.
//! Dropping the lab (also on error and Ctrl-C) stops the daemons and
//! charons, kills every process left in the namespaces and deletes them;
//! `up` first removes labs of dead runs.

use super::colocated::{self as co, FigureSpec, Get, PhaseSetup};
use super::cpu::{self, PerfSupport};
use super::forward::interrupted;
use super::forward::measure::IfaceCounters;
use super::lab::{self, wait_ready, Lab, ProcId};
use super::nicflow_bin;
use super::overlay::{apply_steps, run_in, start_server, NetStep};
use super::pktrate;
use super::report::{self, Figure};
use super::testbed;
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::sys;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Namespace / state directory prefix of this experiment.
pub const PREFIX: &str = "nfbip";
pub const VNI: u32 = 100;
/// Container MTU: VXLAN packets of 1400 fit kernel-libipsec's TUN.
pub const CONTAINER_MTU: u32 = 1350;
/// Most parallel streams of one iperf3 client.
pub const MAX_STREAMS: usize = 128;
const DEFAULT_STREAMS: &str = "1,4,16";
const DEFAULT_FLOWS: &str = "1,16,256";
/// Most distinct flows of the pps mode (source ports from 10000 up).
pub const MAX_FLOWS: usize = 50_000;
const PORT: u16 = 5201;
const BRIDGE: &str = "br0";
const TUNNEL: &str = "vx0";
const CHARON: &str = "/usr/lib/ipsec/charon";
const PSK: &str = "nicflow-bench-ipsec-psk";
const STRONGSWAN_CONF: &str = include_str!("../../ipsec/tests/strongswan/strongswan.conf.in");
const SWANCTL_CONF: &str = include_str!("../../ipsec/tests/strongswan/swanctl.conf.in");

/// An engine of the encrypted overlay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IpEngine {
    /// Two nicflow daemons with their defaults (bridge offload `auto`: the
    /// TC engine; the container veth and the underlay TC ports), VXLAN
    /// tunnel port with `ipsec=manual`.
    NicflowIpsec,
    /// The same with the configuration and path of the first measurements
    /// (issue 15): `offload = "none"`, the container veth and the underlay
    /// as AF_XDP ports (copy mode on veths), no receive coalescing
    /// (`gro=false`, which did not exist then).
    NicflowIpsecAfxdp,
    /// [`IpEngine::NicflowIpsec`] with `esp_gso=false`: every ESP-in-UDP
    /// packet a sendmmsg message of its own (the path before UDP GSO).
    NicflowIpsecNogso,
    /// [`IpEngine::NicflowIpsec`] with `esp_encap=none`: ESP as IP
    /// protocol 50, which UDP GSO cannot glue.
    NicflowIpsecEsp,
    /// [`IpEngine::NicflowIpsec`] with `esp_mode=transport` (nicflow's
    /// own default; the other engines use tunnel mode for strongSwan's
    /// sake): ESP protects the outer UDP payload, 20 bytes less per packet.
    NicflowIpsecTransport,
    /// [`IpEngine::NicflowIpsec`] without IPsec: the unencrypted overlay
    /// with the defaults (the TC engine).
    Nicflow,
    /// charon kernel-libipsec + kernel vxlan + Linux bridge.
    Strongswan,
}

impl IpEngine {
    pub fn name(self) -> &'static str {
        match self {
            IpEngine::NicflowIpsec => "nicflow-ipsec",
            IpEngine::NicflowIpsecAfxdp => "nicflow-ipsec-afxdp",
            IpEngine::NicflowIpsecNogso => "nicflow-ipsec-nogso",
            IpEngine::NicflowIpsecEsp => "nicflow-ipsec-esp",
            IpEngine::NicflowIpsecTransport => "nicflow-ipsec-transport",
            IpEngine::Nicflow => "nicflow",
            IpEngine::Strongswan => "strongswan",
        }
    }

    pub fn parse(s: &str) -> Option<IpEngine> {
        Some(match s.trim() {
            "nicflow-ipsec" | "ipsec" => IpEngine::NicflowIpsec,
            "nicflow-ipsec-afxdp" | "ipsec-afxdp" => IpEngine::NicflowIpsecAfxdp,
            "nicflow-ipsec-nogso" | "ipsec-nogso" => IpEngine::NicflowIpsecNogso,
            "nicflow-ipsec-esp" | "ipsec-esp" => IpEngine::NicflowIpsecEsp,
            "nicflow-ipsec-transport" | "ipsec-transport" => IpEngine::NicflowIpsecTransport,
            "nicflow" => IpEngine::Nicflow,
            "strongswan" | "charon" | "libipsec" => IpEngine::Strongswan,
            _ => return None,
        })
    }

    fn tag(self) -> &'static str {
        match self {
            IpEngine::NicflowIpsec => "e",
            IpEngine::NicflowIpsecAfxdp => "x",
            IpEngine::NicflowIpsecNogso => "g",
            IpEngine::NicflowIpsecEsp => "p",
            IpEngine::NicflowIpsecTransport => "t",
            IpEngine::Nicflow => "n",
            IpEngine::Strongswan => "s",
        }
    }

    fn is_nicflow(self) -> bool {
        self != IpEngine::Strongswan
    }

    fn is_ipsec(self) -> bool {
        matches!(
            self,
            IpEngine::NicflowIpsec
                | IpEngine::NicflowIpsecAfxdp
                | IpEngine::NicflowIpsecNogso
                | IpEngine::NicflowIpsecEsp
                | IpEngine::NicflowIpsecTransport
        )
    }

    /// The ESP mode of a nicflow engine with IPsec.
    fn esp_mode(self) -> EspMode {
        if self == IpEngine::NicflowIpsecTransport {
            EspMode::Transport
        } else {
            EspMode::Tunnel
        }
    }

    /// How the engine's ESP travels.
    fn wire(self) -> EspWire {
        match self {
            IpEngine::NicflowIpsecNogso => EspWire::Udp,
            IpEngine::NicflowIpsecEsp => EspWire::Esp,
            _ => EspWire::UdpGso,
        }
    }

    /// The daemons' port configuration.
    fn ports(self) -> Ports {
        if self == IpEngine::NicflowIpsecAfxdp {
            Ports::Afxdp
        } else {
            Ports::Defaults
        }
    }
}

/// How a nicflow engine's ESP travels between the hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EspWire {
    /// `esp_encap=udp` with the default `esp_gso` (on).
    UdpGso,
    /// `esp_encap=udp`, `esp_gso=false`.
    Udp,
    /// `esp_encap=none` (IP protocol 50).
    Esp,
}

/// `esp_mode` of a nicflow engine's tunnel port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EspMode {
    /// `esp_mode=tunnel`: the whole outer IPv4 packet inside ESP, as
    /// strongSwan's kernel-libipsec does it.
    Tunnel,
    /// `esp_mode=transport`: the outer IPv4 header stays, ESP protects its
    /// payload (nicflow's default).
    Transport,
}

impl EspMode {
    fn word(self) -> &'static str {
        match self {
            EspMode::Tunnel => "tunnel",
            EspMode::Transport => "transport",
        }
    }
}

/// How a nicflow engine's daemons attach their interfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ports {
    /// Nothing said: the bridge's offload mode `auto` (the TC engine), the
    /// ports and the underlay of type `auto` (TC ports), what `nicflow
    /// add-port br0 IFACE` gives.
    Defaults,
    /// `offload = "none"`, the container veth and the underlay AF_XDP,
    /// no receive coalescing (`gro=false`): the path as issue 15 measured it.
    Afxdp,
}

impl co::Named for IpEngine {
    fn name(self) -> &'static str {
        IpEngine::name(self)
    }
}

fn parse_engines(list: &str) -> anyhow::Result<Vec<IpEngine>> {
    testbed::parse_engine_list(
        list,
        "nicflow-ipsec, nicflow-ipsec-afxdp, nicflow-ipsec-nogso, nicflow-ipsec-esp, \
         nicflow-ipsec-transport, nicflow, strongswan",
        IpEngine::parse,
    )
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated: nicflow-ipsec, nicflow-ipsec-afxdp,
    /// nicflow-ipsec-nogso (esp_gso=false), nicflow-ipsec-esp
    /// (esp_encap=none), nicflow-ipsec-transport (esp_mode=transport),
    /// nicflow, strongswan.
    #[arg(
        long,
        default_value = "nicflow-ipsec,nicflow-ipsec-afxdp,nicflow,strongswan"
    )]
    pub engines: String,
    /// What to measure: `throughput` (iperf3 TCP streams) or `pps`
    /// (small UDP frames from c1 to s1, packets per second delivered to
    /// s1; `--flows`, `--size`).
    #[arg(long, value_enum, default_value_t = Mode::Throughput)]
    pub mode: Mode,
    /// pps: distinct UDP flows (source ports) of the generator,
    /// comma-separated counts (one lab per count).
    #[arg(long, default_value = DEFAULT_FLOWS)]
    pub flows: String,
    /// pps: Ethernet frame size with FCS as the container sends it (64:
    /// 18 bytes of UDP payload).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Parallel TCP stream counts of the one container pair (iperf3 -P),
    /// up to 128.
    #[arg(long, default_value = DEFAULT_STREAMS)]
    pub streams: String,
    /// Repetitions (the report shows medians).
    #[arg(long, default_value_t = 1)]
    pub reps: usize,
    /// Seconds per traffic phase.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Threads of the CPU load (default: one per core).
    #[arg(long)]
    pub load_threads: Option<usize>,
    /// The output of `ESP_BENCH_SUMMARY_ONLY=1 cargo bench -p
    /// nicflow-ipsec --bench esp`: the report sets nicflow's ESP cost per
    /// packet beside the raw AES-GCM cost of its aes-gcm-128/1400 line.
    #[arg(long, value_name = "FILE")]
    pub esp_bench: Option<PathBuf>,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// What `bench ipsec` measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// iperf3 TCP streams: Gbit/s, CPU per Gbit, CPU left to a load.
    #[default]
    Throughput,
    /// Small UDP frames as fast as `nicflow gen` sends them: packets per
    /// second delivered to the receiving container.
    Pps,
}

/// One line of the esp bench's summary table (ns per packet).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EspBench {
    pub case: String,
    pub esp_seal_ns: f64,
    pub ring_seal_ns: f64,
    pub esp_open_ns: f64,
    pub ring_open_ns: f64,
    /// The whole summary, as printed.
    pub text: String,
}

/// The `case` line of the esp bench's summary (`aes-gcm-128/1400 seal ns
/// ring ns ratio open ns ring ns ratio ...`).
pub fn parse_esp_bench(text: &str, case: &str) -> Option<EspBench> {
    let l = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(case))?;
    let v: Vec<f64> = l
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse::<f64>())
        .collect::<Result<_, _>>()
        .ok()?;
    if v.len() < 5 {
        return None;
    }
    Some(EspBench {
        case: case.to_string(),
        esp_seal_ns: v[0],
        ring_seal_ns: v[1],
        esp_open_ns: v[3],
        ring_open_ns: v[4],
        text: text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("Gnuplot"))
            .collect::<Vec<_>>()
            .join("\n"),
    })
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    pub engines: Vec<IpEngine>,
    pub reps: usize,
    pub seconds: u64,
    pub streams: Vec<usize>,
    pub load_threads: usize,
    #[serde(default)]
    pub esp_bench: Option<EspBench>,
}

/// Packet counters over the traffic phase without load.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Packets {
    /// ESP packets sealed / opened, both daemons.
    pub esp_tx: u64,
    pub esp_rx: u64,
    /// The tunnel port's own packet counters, both daemons.
    pub tunnel_tx: u64,
    pub tunnel_rx: u64,
    /// The underlay veth ends' counters (`ip -s link`), both hosts.
    pub underlay_tx: u64,
    pub underlay_rx: u64,
    /// ESP drops of any reason, both daemons.
    pub esp_drops: u64,
    /// ESP packets of TCP super-frames sealed straight into their UDP
    /// super-frame (`esp_tx_gso_in_place`), both daemons.
    #[serde(default)]
    pub esp_tx_in_place: u64,
    /// ESP packets opened where they lay in a received UDP super-frame
    /// (`esp_rx_in_place`), both daemons.
    #[serde(default)]
    pub esp_rx_in_place: u64,
    /// Receive buffers the underlay ports allocated for whole UDP
    /// super-frames (`underlay_rx_buf_allocs`), both daemons.
    #[serde(default)]
    pub underlay_rx_buf_allocs: u64,
    /// Big buffers the tunnel ports allocated for UDP super-frames of ESP
    /// to send (`underlay_tx_gso_buf_allocs`; 0 from a daemon that does
    /// not count them), both daemons.
    #[serde(default)]
    pub underlay_tx_buf_allocs: u64,
    /// The ESP drop counters by name (`esp_rx_drop_replay`, ...), both
    /// daemons, the non-zero ones; beside them (not in `esp_drops`: they
    /// count frames, not ESP packets) the underlay port's receive drops
    /// (`underlay_port_rx_drop_ring_full`, ...: frames the kernel or the port
    /// dropped before the tunnel read them, a UDP super-frame being many ESP packets) and
    /// the container ports' (`vc1:rx_drop_ring_full`, ...).
    #[serde(default)]
    pub drops_by: std::collections::BTreeMap<String, u64>,
    /// Frames the underlay ports lost before the daemon read them (the sum
    /// of `underlay_port_rx_drop_*`), both daemons.
    #[serde(default)]
    pub underlay_rx_drops: u64,
    /// Frames the daemons' container-side ports (`vc1`, `vs1`) could not
    /// send (their `tx_dropped`), both daemons.
    #[serde(default)]
    pub end_tx_drops: u64,
    /// UDP super-frames of ESP sent and the ESP packets in them
    /// (`esp_tx_gso_frames`, `esp_tx_gso_packets`), both daemons.
    #[serde(default)]
    pub esp_gso_frames: u64,
    #[serde(default)]
    pub esp_gso_packets: u64,
    /// TCP super-frames the container-side ports (`vc1`, `vs1`) received
    /// (`rx_gso_kept`), of them those handed over in their receive buffer
    /// (`rx_gso_whole`: not copied out), and the receive buffers those
    /// ports allocated because none came back in time (`rx_buf_allocs`),
    /// both daemons.
    #[serde(default)]
    pub end_rx_gso_kept: u64,
    #[serde(default)]
    pub end_rx_gso_whole: u64,
    #[serde(default)]
    pub end_rx_buf_allocs: u64,
    /// The daemons' socket calls over the phase, per host and port:
    /// `h1:vc1:rx_recvmmsg_calls`, `h2:underlay:tx_sendmmsg_calls`, ...
    /// (`recvmmsg` calls, those that found nothing, frames they returned;
    /// `sendmmsg` calls, and `tx_packets` beside them): the batch sizes
    /// and how often each daemon looked for work (issue 34's idle). Empty
    /// from daemons that do not count them.
    #[serde(default)]
    pub syscalls: std::collections::BTreeMap<String, u64>,
}

/// The socket-call counters [`Packets::syscalls`] keeps, as a port reports
/// them (the tunnel reports its underlay's with an `underlay_` prefix).
const SYSCALL_COUNTERS: [&str; 4] = [
    "rx_recvmmsg_calls",
    "rx_recvmmsg_empty",
    "rx_recvmmsg_frames",
    "tx_sendmmsg_calls",
];

/// Frames per call of one host and port in [`Packets::syscalls`]: receive
/// (frames per `recvmmsg` that found any) and transmit (frames per
/// `sendmmsg`), and the share of `recvmmsg` calls that found nothing;
/// `None` where the daemon did not count.
pub fn batch_sizes(
    s: &std::collections::BTreeMap<String, u64>,
    key: &str,
) -> Option<(f64, f64, f64)> {
    let g = |k: &str| s.get(&format!("{key}:{k}")).copied().unwrap_or(0) as f64;
    let calls = g("rx_recvmmsg_calls");
    if calls == 0.0 {
        return None;
    }
    let empty = g("rx_recvmmsg_empty");
    let rx = g("rx_recvmmsg_frames") / (calls - empty).max(1.0);
    let tx = g("tx_packets") / g("tx_sendmmsg_calls").max(1.0);
    Some((rx, tx, empty / calls))
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Extra {
    pub streams: usize,
    #[serde(default)]
    pub packets: Option<Packets>,
}

impl Default for Extra {
    fn default() -> Extra {
        Extra {
            streams: 1,
            packets: None,
        }
    }
}

pub type Run = co::Run<IpEngine, Extra>;
pub type Results = co::Results<Options, Run>;

fn options(a: &Args) -> anyhow::Result<Options> {
    let mut streams = testbed::parse_counts(&a.streams).context("--streams")?;
    if let Some(n) = streams.iter().find(|&&n| n > MAX_STREAMS) {
        bail!("--streams {n}: iperf3 runs at most {MAX_STREAMS} parallel streams");
    }
    let esp_bench = match &a.esp_bench {
        None => None,
        Some(p) => {
            let t =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Some(parse_esp_bench(&t, "aes-gcm-128/1400").with_context(|| {
                format!(
                    "{}: no aes-gcm-128/1400 line of the esp bench's summary",
                    p.display()
                )
            })?)
        }
    };
    let (reps, seconds) = if a.run.quick {
        streams.truncate(1);
        (1, 2)
    } else {
        (a.reps.max(1), a.seconds.max(1))
    };
    Ok(Options {
        engines: parse_engines(&a.engines)?,
        reps,
        seconds,
        streams,
        load_threads: co::load_threads(a.load_threads),
        esp_bench,
    })
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    match args.mode {
        Mode::Throughput => {
            let measure = || run(&options(args)?);
            report::cli(&args.run, "ipsec", measure, figures, markdown)
        }
        Mode::Pps => {
            let measure = || run_pps(&pps_options(args)?);
            report::cli(&args.run, "ipsec-pps", measure, pps_figures, pps_markdown)
        }
    }
}

fn progress(s: &str) {
    let s = s
        .replacen(" pair(s),", " stream(s),", 1)
        .replacen(" pairs rep ", " streams rep ", 1)
        .replacen(" pairs:", " streams:", 1)
        .replacen(" pairs + load:", " streams + load:", 1);
    eprintln!("[ipsec] {s}");
}

// ---------------------------------------------------------------------------
// Address plan and configuration text (pure)
// ---------------------------------------------------------------------------

/// Underlay address of host 1 or 2: 198.18.52.h.
pub fn underlay_ip(host: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 52, host as u8)
}

/// c1 198.18.62.1, s1 198.18.62.101.
pub fn container_ip(server: bool) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 62, if server { 101 } else { 1 })
}

fn underlay_iface(host: usize) -> String {
    format!("u{host}")
}

fn host_end(host: usize) -> &'static str {
    if host == 1 {
        "vc1"
    } else {
        "vs1"
    }
}

/// The manual SAs of a lab: SPI and key (AES-128 key || salt, hex) of the
/// direction H1 -> H2 and H2 -> H1.
#[derive(Clone, Debug)]
pub struct Keys {
    pub spi_12: u32,
    pub key_12: String,
    pub spi_21: u32,
    pub key_21: String,
}

impl Keys {
    /// Fresh random keys (no nonce is ever reused across labs).
    fn random() -> anyhow::Result<Keys> {
        let mut b = [0u8; 40];
        let mut f = std::fs::File::open("/dev/urandom")?;
        std::io::Read::read_exact(&mut f, &mut b)?;
        let hex = |s: &[u8]| s.iter().map(|x| format!("{x:02x}")).collect::<String>();
        Ok(Keys {
            spi_12: 0x1201,
            key_12: format!("0x{}", hex(&b[..20])),
            spi_21: 0x2101,
            key_21: format!("0x{}", hex(&b[20..])),
        })
    }
}

/// The nicflow daemon's config on host 1 or 2 (`keys`: with IPsec).
pub fn nicflow_config(
    host: usize,
    keys: Option<&Keys>,
    ports: Ports,
    wire: EspWire,
    mode: EspMode,
) -> String {
    let peer = 3 - host;
    let p = host_end(host);
    let (offload, port_type, underlay_type) = match ports {
        // `type` is required in the file; `auto` is what `add-port`
        // without `--type` writes.
        Ports::Defaults => ("", "\ntype = \"auto\"", ""),
        Ports::Afxdp => (
            "\noffload = \"none\"",
            "\ntype = \"afxdp\"",
            ", underlay_type = \"afxdp\", gro = \"false\"",
        ),
    };
    let mut t = String::new();
    let _ = writeln!(
        t,
        "[[bridge]]\nname = \"{BRIDGE}\"{offload}\nflows = [\"priority=0,actions=normal\"]"
    );
    let _ = writeln!(
        t,
        "[[bridge.port]]\nname = \"{p}\"\niface = \"{p}\"{port_type}"
    );
    let ipsec = match keys {
        None => String::new(),
        Some(k) => {
            let (so, ko, si, ki) = if host == 1 {
                (k.spi_12, &k.key_12, k.spi_21, &k.key_21)
            } else {
                (k.spi_21, &k.key_21, k.spi_12, &k.key_12)
            };
            let encap = match wire {
                EspWire::UdpGso => "esp_encap = \"udp\"",
                EspWire::Udp => "esp_encap = \"udp\", esp_gso = \"false\"",
                EspWire::Esp => "esp_encap = \"none\"",
            };
            format!(
                ", ipsec = \"manual\", esp_spi_out = \"{so:#x}\", esp_key_out = \"{ko}\", \
                 esp_spi_in = \"{si:#x}\", esp_key_in = \"{ki}\", esp_mode = \"{}\", {encap}",
                mode.word()
            )
        }
    };
    let _ = writeln!(
        t,
        "[[bridge.port]]\nname = \"{TUNNEL}\"\niface = \"{TUNNEL}\"\ntype = \"vxlan\"\n\
         options = {{ underlay = \"{}\", local_ip = \"{}\", remote_ip = \"{}\", key = \"{VNI}\"{underlay_type}{ipsec} }}",
        underlay_iface(host),
        underlay_ip(host),
        underlay_ip(peer)
    );
    t
}

/// The `ip` commands (after `ip -n <Hh>`) of the strongswan engine's
/// kernel overlay on host 1 or 2.
pub fn kernel_steps(host: usize) -> Vec<NetStep> {
    let peer = 3 - host;
    vec![
        NetStep::Addr {
            dev: underlay_iface(host),
            ip: underlay_ip(host).into(),
            prefix: 24,
        },
        // No `dev`: the route lookup of the VXLAN packets must reach
        // charon's routing table 220 (its TUN), not the veth.
        NetStep::Vxlan(nicflow::os::link::Vxlan {
            name: TUNNEL.into(),
            vni: VNI,
            local: underlay_ip(host).into(),
            remote: underlay_ip(peer).into(),
            port: 4789,
            dev: None,
        }),
        NetStep::Bridge(BRIDGE.into()),
        NetStep::master(TUNNEL, BRIDGE),
        NetStep::master(host_end(host), BRIDGE),
        NetStep::Up(TUNNEL.into()),
        NetStep::Up(BRIDGE.into()),
    ]
}

/// [`kernel_steps`] as the `ip` commands (arguments after `ip -n NS`)
/// that do the same, for the report.
pub fn kernel_commands(host: usize) -> Vec<Vec<String>> {
    kernel_steps(host).iter().map(NetStep::words).collect()
}

/// charon's strongswan.conf: the template of the IKE interop test with
/// routes on, its debug logging off and OpenSSL's AES-GCM first. At the
/// test's levels (`net = 2`) charon writes a line, flushed, for every ESP
/// packet it sends; and with the template's plugin order charon takes the
/// first AES-GCM loaded, its own portable `aes` + `gcm` (no AES-NI, GHASH
/// with `memxor`, about 30 Mbit/s here), while `openssl` (AES-NI,
/// PCLMULQDQ) is strongSwan's fast one: both would be measured as the cost
/// of its ESP.
pub fn strongswan_conf(dir: &Path) -> String {
    let mut t = STRONGSWAN_CONF
        .replace("@DIR@", &dir.display().to_string())
        .replace("install_routes = no", "install_routes = yes")
        .replace(
            "load = random nonce aes ",
            "load = openssl random nonce aes ",
        )
        .replace(" curve25519 openssl ", " curve25519 ");
    for (k, v) in [("ike", 2), ("cfg", 2), ("net", 2), ("knl", 2), ("chd", 4)] {
        t = t.replace(&format!(" {k} = {v}\n"), &format!(" {k} = 1\n"));
    }
    t
}

/// charon's swanctl.conf on host 1 or 2.
pub fn swanctl_conf(host: usize) -> String {
    SWANCTL_CONF
        .replace("@CHARON_IP@", &underlay_ip(host).to_string())
        .replace("@NICFLOW_IP@", &underlay_ip(3 - host).to_string())
        .replace("@PSK@", PSK)
}

// ---------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------

/// A nicflow daemon or a charon.
struct Proc {
    proc: ProcId,
    host: usize,
    /// nicflow's control socket.
    sock: Option<PathBuf>,
    /// charon's directory (vici socket, log).
    charon_dir: Option<PathBuf>,
}

/// Two hosts and two containers in a [`Lab`]; Drop removes everything.
pub struct IpsecLab {
    lab: Lab,
    engine: IpEngine,
    procs: Vec<Proc>,
}

/// Remove labs of this experiment left by dead processes.
pub fn reap_stale() -> Vec<String> {
    lab::reap_stale(PREFIX, None)
}

fn swanctl(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let uri = format!("unix://{}", dir.join("charon.vici").display());
    let o = Command::new("swanctl")
        .args(args)
        .args(["--uri", &uri])
        .output()
        .context("running swanctl")?;
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        bail!("swanctl {}: {text}", args.join(" "));
    }
    Ok(text)
}

impl IpsecLab {
    fn ns(&self, node: &str) -> String {
        self.lab.ns(node)
    }

    pub fn up(engine: IpEngine) -> anyhow::Result<IpsecLab> {
        if engine == IpEngine::Strongswan && !Path::new(CHARON).exists() {
            bail!("{CHARON} not found: install strongSwan (charon, swanctl, kernel-libipsec)");
        }
        let lab = Lab::create("the ipsec lab", PREFIX, engine.tag(), None)?;
        let mut l = IpsecLab {
            lab,
            engine,
            procs: Vec::new(),
        };
        // From here on, Drop cleans up.
        l.build()?;
        Ok(l)
    }

    fn build(&mut self) -> anyhow::Result<()> {
        for n in ["h1", "h2", "c1", "s1"] {
            // (Created with its loopback up.)
            self.lab
                .add_ns(n, &[("net.ipv6.conf.all.disable_ipv6", "1")])?;
        }
        self.lab.veth("u1", "h1", "u2", "h2")?;
        for (host, node, server) in [(1, "c1", false), (2, "s1", true)] {
            self.lab
                .veth("eth0", node, host_end(host), &format!("h{host}"))?;
            let ns = self.ns(node);
            apply_steps(
                &ns,
                &[
                    NetStep::Mtu {
                        dev: "eth0".into(),
                        mtu: CONTAINER_MTU,
                    },
                    NetStep::Addr {
                        dev: "eth0".into(),
                        ip: container_ip(server).into(),
                        prefix: 24,
                    },
                ],
            )?;
        }
        match self.engine {
            IpEngine::Strongswan => {
                for host in [1, 2] {
                    let ns = self.ns(&format!("h{host}"));
                    apply_steps(&ns, &kernel_steps(host))?;
                    self.start_charon(host)?;
                }
                let dir = self.lab.dir().join("charon-h1");
                let out = swanctl(
                    &dir,
                    &["--initiate", "--child", "nicflow", "--timeout", "20"],
                )
                .with_context(|| format!("IKE between the charons\n{}", self.logs()))?;
                if !out.contains("successfully") {
                    bail!("charon did not establish the SA: {out}\n{}", self.logs());
                }
            }
            IpEngine::Nicflow
            | IpEngine::NicflowIpsec
            | IpEngine::NicflowIpsecAfxdp
            | IpEngine::NicflowIpsecNogso
            | IpEngine::NicflowIpsecEsp
            | IpEngine::NicflowIpsecTransport => {
                let keys = if self.engine.is_ipsec() {
                    Some(Keys::random()?)
                } else {
                    None
                };
                let bin = nicflow_bin()?;
                for host in [1, 2] {
                    self.start_daemon(&bin, host, keys.as_ref())?;
                }
                for host in [1, 2] {
                    self.wait_daemon(host)?;
                }
            }
        }
        // The overlay works (the first ping resolves ARP across it).
        let dst = container_ip(true).to_string();
        let ns = self.ns("c1");
        let mut last = String::new();
        for _ in 0..10 {
            if interrupted() {
                bail!("interrupted");
            }
            match run_in(&ns, &["ping", "-n", "-q", "-c", "1", "-W", "1", &dst]) {
                Ok(_) => return Ok(()),
                Err(e) => last = format!("{e:#}"),
            }
        }
        bail!(
            "c1 cannot ping s1 ({dst}) through {}: {last}\n{}",
            self.engine.name(),
            self.logs()
        )
    }

    fn start_charon(&mut self, host: usize) -> anyhow::Result<()> {
        let dir = self.lab.dir().join(format!("charon-h{host}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("strongswan.conf"), strongswan_conf(&dir))?;
        let swanctl_file = dir.join("swanctl.conf");
        std::fs::write(&swanctl_file, swanctl_conf(host))?;
        let ns = self.ns(&format!("h{host}"));
        // A private /run (charon's pid file) in its own mount namespace;
        // `unshare` and `sh` exec, so the child's pid is charon's.
        let proc = self.lab.spawn(
            "charon",
            sys::in_ns(
                Some(&ns),
                &[
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    &format!("mount -t tmpfs tmpfs /run && exec {CHARON}"),
                ],
            )
            .env("STRONGSWAN_CONF", dir.join("strongswan.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        )?;
        self.procs.push(Proc {
            proc,
            host,
            sock: None,
            charon_dir: Some(dir.clone()),
        });
        let t0 = Instant::now();
        while !dir.join("charon.vici").exists() {
            if t0.elapsed() > Duration::from_secs(20) || interrupted() {
                bail!("charon on H{host} did not start:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(300));
        swanctl(
            &dir,
            &[
                "--load-all",
                "--clear",
                "--file",
                &swanctl_file.display().to_string(),
            ],
        )?;
        Ok(())
    }

    fn start_daemon(&mut self, bin: &Path, host: usize, keys: Option<&Keys>) -> anyhow::Result<()> {
        let cfg = self.lab.dir().join(format!("h{host}.toml"));
        std::fs::write(
            &cfg,
            nicflow_config(
                host,
                keys,
                self.engine.ports(),
                self.engine.wire(),
                self.engine.esp_mode(),
            ),
        )
        .with_context(|| format!("writing {}", cfg.display()))?;
        let sock = self.lab.dir().join(format!("h{host}.sock"));
        let log = self.lab.dir().join(format!("h{host}.log"));
        let proc = self.lab.spawn_daemon(
            format!("switch-h{host}"),
            bin,
            &format!("h{host}"),
            &cfg,
            &sock,
            &log,
        )?;
        self.procs.push(Proc {
            proc,
            host,
            sock: Some(sock),
            charon_dir: None,
        });
        Ok(())
    }

    fn wait_daemon(&mut self, host: usize) -> anyhow::Result<()> {
        let d = self
            .procs
            .iter()
            .find(|d| d.host == host && d.sock.is_some())
            .context("daemon")?;
        let sock = d.sock.clone().context("socket")?;
        let proc = d.proc;
        let r = wait_ready(self.lab.child_mut(proc), &sock, Duration::from_secs(15));
        r.map_err(|e| anyhow::anyhow!("nicflow daemon on H{host} {e}:\n{}", self.logs()))
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for d in &self.procs {
            let path = match &d.charon_dir {
                Some(c) => c.join("charon.log"),
                None => self.lab.dir().join(format!("h{}.log", d.host)),
            };
            let _ = writeln!(
                s,
                "--- H{} {} log (last lines) ---\n{}",
                d.host,
                if d.sock.is_some() {
                    "nicflow"
                } else {
                    "charon"
                },
                sys::tail(&path, 20)
            );
        }
        s
    }

    /// The daemons' (or charons') pids, labelled `switch-h1`, `switch-h2`.
    pub fn switch_pids(&self) -> Vec<(String, u32)> {
        self.procs
            .iter()
            .map(|d| (format!("switch-h{}", d.host), self.lab.pid(d.proc)))
            .collect()
    }

    /// ESP, tunnel port and underlay counters now, both hosts.
    fn packets(&self) -> Packets {
        self.packets_on(&[1, 2])
    }

    /// [`Self::packets`] summed over `hosts` only.
    fn packets_on(&self, hosts: &[usize]) -> Packets {
        let mut p = Packets::default();
        for d in self.procs.iter().filter(|d| hosts.contains(&d.host)) {
            let Some(sock) = &d.sock else { continue };
            let r = match nicflow::control::daemon::request(sock, &Request::Stats) {
                Ok(r) => r,
                Err(e) => {
                    // Counted as 0: say so, or a delta would silently span
                    // the daemon's lifetime (or be 0).
                    eprintln!(
                        "bench ipsec: warning: stats of H{}'s daemon not read ({e:#}); its ESP counters count as 0 in this reading",
                        d.host
                    );
                    continue;
                }
            };
            let ports = r.data[0]["ports"].as_array().cloned().unwrap_or_default();
            if let Some(t) = ports.iter().find(|x| x["name"] == TUNNEL) {
                let c = |k: &str| t["counters"][k].as_u64().unwrap_or(0);
                p.esp_tx += c("esp_tx_packets");
                p.esp_tx_in_place += c("esp_tx_gso_in_place");
                p.esp_rx_in_place += c("esp_rx_in_place");
                p.underlay_rx_buf_allocs += c("underlay_rx_buf_allocs");
                p.underlay_tx_buf_allocs += c("underlay_tx_gso_buf_allocs");
                p.esp_rx += c("esp_rx_packets");
                p.tunnel_tx += t["tx_packets"].as_u64().unwrap_or(0);
                p.tunnel_rx += t["rx_packets"].as_u64().unwrap_or(0);
                if let Some(m) = t["counters"].as_object() {
                    for (k, v) in m {
                        let Some(v) = v.as_u64().filter(|&v| v > 0) else {
                            continue;
                        };
                        if k.starts_with("esp_rx_drop_") || k.starts_with("esp_tx_drop_") {
                            p.esp_drops += v;
                            *p.drops_by.entry(k.clone()).or_default() += v;
                        } else if k.starts_with("underlay_port_rx_drop_") {
                            p.underlay_rx_drops += v;
                            *p.drops_by.entry(k.clone()).or_default() += v;
                        }
                    }
                }
                p.esp_gso_frames += c("esp_tx_gso_frames");
                p.esp_gso_packets += c("esp_tx_gso_packets");
                for k in SYSCALL_COUNTERS {
                    let v = c(&format!("underlay_{k}"));
                    p.syscalls.insert(format!("h{}:underlay:{k}", d.host), v);
                }
                // The underlay's frames sent (the tunnel's `tx_packets` are
                // inner frames, many per UDP super-frame).
                let v = c("underlay_tx_frames");
                p.syscalls
                    .insert(format!("h{}:underlay:tx_packets", d.host), v);
            }
            // The container's port: what it lost before the daemon read it
            // (the generator outrunning H1's daemon), by reason.
            let port = host_end(d.host);
            if let Some(c) = ports.iter().find(|x| x["name"] == port) {
                p.end_tx_drops += c["tx_dropped"].as_u64().unwrap_or(0);
                let n = |k: &str| c["counters"][k].as_u64().unwrap_or(0);
                p.end_rx_gso_kept += n("rx_gso_kept");
                p.end_rx_gso_whole += n("rx_gso_whole");
                p.end_rx_buf_allocs += n("rx_buf_allocs");
                for k in SYSCALL_COUNTERS {
                    p.syscalls.insert(format!("h{}:{port}:{k}", d.host), n(k));
                }
                p.syscalls.insert(
                    format!("h{}:{port}:tx_packets", d.host),
                    c["tx_packets"].as_u64().unwrap_or(0),
                );
                if let Some(m) = c["counters"].as_object() {
                    for (k, v) in m {
                        if k.starts_with("rx_drop_") {
                            if let Some(v) = v.as_u64().filter(|&v| v > 0) {
                                *p.drops_by.entry(format!("{port}:{k}")).or_default() += v;
                            }
                        }
                    }
                }
            }
        }
        for &host in hosts {
            if let Some(c) =
                IfaceCounters::read(&self.ns(&format!("h{host}")), &underlay_iface(host))
            {
                p.underlay_tx += c.tx_packets;
                p.underlay_rx += c.rx_packets;
            }
        }
        p
    }

    pub fn down(mut self) -> anyhow::Result<()> {
        self.lab.teardown()
    }
}

// ---------------------------------------------------------------------------
// iperf3 and the measurement
// ---------------------------------------------------------------------------

/// `after - before` of named counters, the non-zero differences.
pub fn counters_between(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, &v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn client_argv(seconds: u64, streams: usize) -> Vec<String> {
    let p = if streams > 1 {
        format!(" -P {streams}")
    } else {
        String::new()
    };
    format!(
        "iperf3 -c {} -p {PORT} -t {seconds}{p} -J --connect-timeout 3000",
        container_ip(true)
    )
    .split(' ')
    .map(str::to_string)
    .collect()
}

pub fn run(opts: &Options) -> anyhow::Result<Results> {
    co::sweep(
        opts,
        (opts.reps, &opts.streams, &opts.engines),
        progress,
        |perf, run| body(opts, perf, run),
    )
}

fn body(opts: &Options, perf: &PerfSupport, run: &mut Run) -> anyhow::Result<()> {
    // The sweep's count is the stream count of the one pair.
    let streams = run.pairs;
    run.extra.streams = streams;
    let lab = IpsecLab::up(run.engine)?;
    run.lab = lab.lab.name().to_string();
    let server = start_server(&lab.ns("s1"))?;
    let dir = lab.lab.dir().join("scratch");
    std::fs::create_dir_all(&dir)?;
    let setup = PhaseSetup {
        perf,
        dir: &dir,
        load_threads: opts.load_threads,
        seconds: opts.seconds,
        servers: vec![server.pid],
        switches: lab.switch_pids(),
        retransmits: true,
    };
    let name = run.engine.name();
    let mut packets = None;
    let client_ns = lab.ns("c1");
    co::measure_point(
        &mut run.point,
        opts.load_threads,
        opts.seconds,
        |with_load| {
            let before = (!with_load).then(|| lab.packets());
            let ph = co::measure_phase(&setup, with_load, || {
                Ok(vec![testbed::IperfClient::spawn(
                    &client_ns,
                    &client_argv(opts.seconds, streams),
                    dir.join("iperf.json"),
                )?])
            })?;
            if let Some(b) = before {
                let a = lab.packets();
                packets = Some(Packets {
                    esp_tx: a.esp_tx.saturating_sub(b.esp_tx),
                    esp_rx: a.esp_rx.saturating_sub(b.esp_rx),
                    tunnel_tx: a.tunnel_tx.saturating_sub(b.tunnel_tx),
                    tunnel_rx: a.tunnel_rx.saturating_sub(b.tunnel_rx),
                    underlay_tx: a.underlay_tx.saturating_sub(b.underlay_tx),
                    underlay_rx: a.underlay_rx.saturating_sub(b.underlay_rx),
                    esp_drops: a.esp_drops.saturating_sub(b.esp_drops),
                    esp_tx_in_place: a.esp_tx_in_place.saturating_sub(b.esp_tx_in_place),
                    esp_rx_in_place: a.esp_rx_in_place.saturating_sub(b.esp_rx_in_place),
                    underlay_rx_buf_allocs: a
                        .underlay_rx_buf_allocs
                        .saturating_sub(b.underlay_rx_buf_allocs),
                    underlay_tx_buf_allocs: a
                        .underlay_tx_buf_allocs
                        .saturating_sub(b.underlay_tx_buf_allocs),
                    drops_by: counters_between(&b.drops_by, &a.drops_by),
                    underlay_rx_drops: a.underlay_rx_drops.saturating_sub(b.underlay_rx_drops),
                    end_tx_drops: a.end_tx_drops.saturating_sub(b.end_tx_drops),
                    esp_gso_frames: a.esp_gso_frames.saturating_sub(b.esp_gso_frames),
                    esp_gso_packets: a.esp_gso_packets.saturating_sub(b.esp_gso_packets),
                    end_rx_gso_kept: a.end_rx_gso_kept.saturating_sub(b.end_rx_gso_kept),
                    end_rx_gso_whole: a.end_rx_gso_whole.saturating_sub(b.end_rx_gso_whole),
                    end_rx_buf_allocs: a.end_rx_buf_allocs.saturating_sub(b.end_rx_buf_allocs),
                    syscalls: counters_between(&b.syscalls, &a.syscalls),
                });
            }
            Ok(ph)
        },
        |with_load, ph, idle| {
            progress(&co::phase_line(name, streams, with_load, ph, idle, true));
        },
    )?;
    run.extra.packets = packets;
    if let Some(p) = &run.extra.packets {
        progress(&format!(
            "{name} {streams} streams: packets esp tx {} rx {} (drops {}, sealed in place {}, opened in place {}, receive buffers allocated {}, send buffers allocated {}), tunnel tx {} rx {}, underlay tx {} rx {}; container ports: TCP super-frames {} (in their receive buffer {}), receive buffers allocated {}",
            p.esp_tx,
            p.esp_rx,
            p.esp_drops,
            p.esp_tx_in_place,
            p.esp_rx_in_place,
            p.underlay_rx_buf_allocs,
            p.underlay_tx_buf_allocs,
            p.tunnel_tx,
            p.tunnel_rx,
            p.underlay_tx,
            p.underlay_rx,
            p.end_rx_gso_kept,
            p.end_rx_gso_whole,
            p.end_rx_buf_allocs
        ));
        let mut b = Vec::new();
        for key in ["h1:vc1", "h1:underlay", "h2:underlay", "h2:vs1"] {
            if let Some((rx, tx, empty)) = batch_sizes(&p.syscalls, key) {
                b.push(format!(
                    "{key} rx {rx:.1}/recvmmsg ({:.0} % empty) tx {tx:.1}/sendmmsg",
                    empty * 100.0
                ));
            }
        }
        if !b.is_empty() {
            progress(&format!(
                "{name} {streams} streams: batches {}",
                b.join("; ")
            ));
        }
    }
    drop(server);
    lab.down()
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

fn traffic(r: &Run) -> Option<&co::Phase> {
    r.point
        .traffic
        .as_ref()
        .filter(|p| p.errors.is_empty() && p.bytes > 0)
}

/// The daemons' (charons') CPU seconds over the traffic phase.
fn switch_s(r: &Run) -> Option<f64> {
    traffic(r).and_then(|p| p.usage.procs_cpu("switch"))
}

/// Daemon / charon CPU seconds per Gbit.
fn switch_s_gbit(r: &Run) -> Option<f64> {
    let p = traffic(r)?;
    Some(cpu::cpu_s_per_gbit(switch_s(r)?, p.bytes))
}

/// Packets on the wire (each sealed once, opened once): the ESP packets
/// sealed with IPsec; without, the underlay's transmitted packets.
fn wire_packets(r: &Run) -> Option<u64> {
    let p = r.extra.packets.as_ref()?;
    let n = if r.engine.is_ipsec() {
        p.esp_tx
    } else {
        p.underlay_tx
    };
    (n > 0).then_some(n)
}

/// Daemon CPU ns per packet on the wire (both daemons: encapsulation and
/// decapsulation, with IPsec one seal and one open).
fn ns_per_wire_packet(r: &Run) -> Option<f64> {
    if !r.engine.is_nicflow() {
        return None;
    }
    Some(switch_s(r)? * 1e9 / wire_packets(r)? as f64)
}

/// Median of `f` over the successful repetitions of a point.
fn med(runs: &[Run], e: IpEngine, n: usize, f: Get<Run>) -> Option<f64> {
    co::med(runs, e, n, f)
}

/// Figure id, title, y label, getter.
/// A figure's id, title, y label and value, as the tables below list them.
type Spec<R = Run> = (&'static str, &'static str, &'static str, Get<R>);

/// The specs of a table above as `colocated::figures` takes them.
fn figure_specs<R>(rows: &[Spec<R>]) -> Vec<FigureSpec<'static, R>> {
    rows.iter()
        .map(|&(id, title, y_label, get)| FigureSpec {
            id,
            title,
            y_label,
            get,
        })
        .collect()
}

const SPECS: [Spec; 5] = [
    (
        "throughput",
        "VXLAN over IPsec, one pair: throughput (doc 000 fig. 5.15)",
        "iperf3 TCP throughput, sum over streams (Gbit/s)",
        co::gbps,
    ),
    (
        "cpu-per-gbit",
        "VXLAN over IPsec: machine CPU per Gbit (fig. 5.16)",
        "busy CPU seconds (all cores, /proc/stat) per Gbit",
        co::s_gbit,
    ),
    (
        "switch-cpu-per-gbit",
        "VXLAN over IPsec: nicflow daemons' / charons' CPU per Gbit (fig. 5.17)",
        "CPU seconds of the two daemons (charons) per Gbit",
        switch_s_gbit,
    ),
    (
        "cpu-left",
        "VXLAN over IPsec: CPU left to a co-located load (fig. 5.18)",
        "load work rate vs idle lab (%)",
        co::left,
    ),
    (
        "switch-cores",
        "VXLAN over IPsec: nicflow daemons' / charons' cores",
        "cores used by the two daemons (charons), utime+stime",
        co::switch,
    ),
];

pub fn figures(r: &Results) -> Vec<Figure> {
    let specs = figure_specs(&SPECS);
    co::figures(
        &r.runs,
        &r.options.streams,
        "parallel TCP streams of one container pair (iperf3 -P)",
        &specs,
    )
}

fn command_line(o: &Options) -> String {
    format!(
        "nicflow bench ipsec --engines {} --streams {} --reps {} --seconds {}{}",
        report::join(&o.engines.iter().map(|e| e.name()).collect::<Vec<_>>(), ","),
        report::join(&o.streams, ","),
        o.reps,
        o.seconds,
        if o.esp_bench.is_some() {
            " --esp-bench <esp bench summary>"
        } else {
            ""
        }
    )
}

fn ratio_cell(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

/// Verdict of `value >= want` at every stream count (`None`: unmeasured).
fn verdict(values: &[Option<f64>], want: f64) -> &'static str {
    if values.is_empty() || values.iter().any(Option::is_none) {
        "not measured at every stream count"
    } else if values.iter().all(|v| v.is_some_and(|v| v >= want)) {
        "**met** at every stream count"
    } else if values.iter().any(|v| v.is_some_and(|v| v >= want)) {
        "**partly met** (not at every stream count)"
    } else {
        "**not met**"
    }
}

pub fn markdown(r: &Results, figs: &[Figure]) -> String {
    let o = &r.options;
    let runs = &r.runs;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# nicflow bench ipsec: VXLAN over IPsec between two hosts\n"
    );
    let _ = writeln!(s, "{}", report::machine_section(&r.perf));
    let _ = writeln!(
        s,
        "{} repetition(s); per engine and stream count ({}): a fresh lab of two hosts H1, H2 \
         (namespaces) joined by one veth underlay ({}/24, {}/24), a client container c1 behind \
         H1 and a server container s1 behind H2 (namespaces, veth to their host; 198.18.62.0/24, \
         MTU {CONTAINER_MTU}), one VXLAN segment (VNI {VNI}) over ESP AES-GCM-128 (tunnel mode, \
         ESP in UDP 4500). Engines: `nicflow-ipsec` = a nicflow daemon on each host (two \
         processes: one seals, the other opens), bridge br0 with its defaults (offload `auto`: \
         the TC engine) and `actions=normal`, the container veth a port of type `auto` (a TC \
         port), a VXLAN tunnel port on an `auto` underlay (a TC port) with `ipsec=manual` \
         (random keys per lab), `esp_mode=tunnel`, `esp_encap=udp`; `nicflow-ipsec-afxdp` = \
         the same with the configuration and path of the first measurements (issue 15): \
         `offload=none`, the container veth and the underlay AF_XDP ports, `gro=false` (no \
         receive coalescing, which did not exist then); `nicflow-ipsec-nogso` / \
         `nicflow-ipsec-esp` = `nicflow-ipsec` with `esp_gso=false` (no UDP GSO) / \
         `esp_encap=none` (ESP as IP protocol 50); `nicflow-ipsec-transport` = `nicflow-ipsec` \
         with `esp_mode=transport`; `nicflow` = `nicflow-ipsec` without \
         IPsec (the unencrypted overlay runs in the TC engine); `strongswan` = charon 5.9.8 with kernel-libipsec (ESP in user \
         space through a TUN device) on each host, PSK, `install_routes = yes`, `encap = yes`, \
         with a kernel vxlan device and a Linux bridge. Traffic: one iperf3 client in c1 with N \
         parallel TCP streams to s1 (`-P N`), {} s. CPU left: {} load thread(s) (busy loops) \
         counted with the lab idle before and after and beside a second traffic phase. Medians \
         over repetitions.\n",
        o.reps,
        report::join(&o.streams, ", "),
        underlay_ip(1),
        underlay_ip(2),
        o.seconds,
        o.load_threads,
    );
    co::write_figures(&mut s, figs, &[2, 2, 2, 0, 2]);

    let _ = writeln!(s, "## Details (medians, traffic phase without load)\n");
    let _ = writeln!(
        s,
        "daemon cores: utime+stime of the two nicflow daemons (strongswan: the two charons) \
         over wall time; busy %: machine-wide share of all {} cores; ns/wire pkt: the two \
         daemons' CPU time over the packets on the underlay (nicflow-ipsec: ESP packets sealed; \
         nicflow: the underlay veths' transmitted packets), i.e. one encapsulation plus one \
         decapsulation each, with IPsec one seal plus one open.\n",
        cpu::cores()
    );
    let cols: &[(&str, Get<Run>, usize)] = &[
        ("Gbit/s", co::gbps, 2),
        ("retransmits", co::retransmits, 0),
        ("busy %", co::busy, 0),
        ("CPU s/Gbit", co::s_gbit, 3),
        ("daemon cores", co::switch, 2),
        ("daemon s/Gbit", switch_s_gbit, 3),
        ("ns/wire pkt", ns_per_wire_packet, 0),
        ("Gbit/s with load", co::gbps_load, 2),
        ("CPU left %", co::left, 0),
    ];
    s.push_str(
        &co::details_table(
            runs,
            &o.streams,
            cols,
            &["packets (esp tx/rx, underlay tx; esp sealed in place, opened in place)"],
            |e, n| {
                let p = runs
                    .iter()
                    .find(|x| x.engine == e && x.pairs == n && x.error.is_none())
                    .and_then(|x| x.extra.packets.clone());
                vec![p
                    .map(|p| {
                        format!(
                            "{}/{}, {}; {}, {}",
                            p.esp_tx, p.esp_rx, p.underlay_tx, p.esp_tx_in_place, p.esp_rx_in_place
                        )
                    })
                    .unwrap_or_else(|| "—".into())]
            },
        )
        .replacen("| engine | pairs |", "| engine | streams |", 1),
    );

    // Ratios and targets.
    let g = |e, n| med(runs, e, n, co::gbps);
    let _ = writeln!(s, "\n## Ratios (same run)\n");
    let mut rows = Vec::new();
    let (mut vs_swan, mut vs_plain, mut cpu_gbit) = (Vec::new(), Vec::new(), Vec::new());
    for &n in &o.streams {
        let (ip, ax, pl, sw) = (
            g(IpEngine::NicflowIpsec, n),
            g(IpEngine::NicflowIpsecAfxdp, n),
            g(IpEngine::Nicflow, n),
            g(IpEngine::Strongswan, n),
        );
        vs_swan.push(ip.zip(sw).filter(|x| x.1 > 0.0).map(|(a, b)| a / b));
        vs_plain.push(ip.zip(pl).filter(|x| x.1 > 0.0).map(|(a, b)| a / b));
        // Below 0.3 s is the goal: as a ratio 0.3 / x >= 1.
        cpu_gbit.push(
            med(runs, IpEngine::NicflowIpsec, n, co::s_gbit)
                .filter(|x| *x > 0.0)
                .map(|x| 0.3 / x),
        );
        rows.push(vec![
            n.to_string(),
            report::cell(ip, 2),
            report::cell(ax, 2),
            report::cell(pl, 2),
            report::cell(sw, 2),
            ratio_cell(ip, ax),
            ratio_cell(ip, sw),
            ratio_cell(ip, pl),
            ratio_cell(
                med(runs, IpEngine::Strongswan, n, switch_s_gbit),
                med(runs, IpEngine::NicflowIpsec, n, switch_s_gbit),
            ),
        ]);
    }
    s.push_str(&report::table(
        &[
            ("streams", true),
            ("nicflow-ipsec Gbit/s", true),
            ("nicflow-ipsec-afxdp Gbit/s", true),
            ("nicflow Gbit/s", true),
            ("strongswan Gbit/s", true),
            ("ipsec / ipsec-afxdp", true),
            ("ipsec / strongswan", true),
            ("ipsec / nicflow", true),
            ("charon s/Gbit ÷ nicflow-ipsec daemon s/Gbit", true),
        ],
        &rows,
    ));

    // Tunnel and transport mode.
    if o.engines.contains(&IpEngine::NicflowIpsecTransport) {
        let _ = writeln!(
            s,
            "\n## Tunnel and transport mode (same run)\n\n`nicflow-ipsec` = `esp_mode=tunnel` (the \
             whole outer IPv4 packet inside ESP, a second IPv4 header: what strongSwan's \
             kernel-libipsec does); `nicflow-ipsec-transport` = `esp_mode=transport` (nicflow's \
             default: ESP between the outer IPv4 header and its UDP payload, 20 bytes less per \
             packet); everything else the same. Machine: busy CPU seconds per Gbit; daemons: the \
             two daemons' own.\n"
        );
        let (tu, tr) = (IpEngine::NicflowIpsec, IpEngine::NicflowIpsecTransport);
        let rows: Vec<Vec<String>> = o
            .streams
            .iter()
            .map(|&n| {
                vec![
                    n.to_string(),
                    report::cell(g(tu, n), 2),
                    report::cell(g(tr, n), 2),
                    ratio_cell(g(tr, n), g(tu, n)),
                    ratio_cell(g(tr, n), g(IpEngine::Nicflow, n)),
                    ratio_cell(g(tr, n), g(IpEngine::Strongswan, n)),
                    report::cell(med(runs, tu, n, co::s_gbit), 2),
                    report::cell(med(runs, tr, n, co::s_gbit), 2),
                    report::cell(med(runs, tu, n, switch_s_gbit), 2),
                    report::cell(med(runs, tr, n, switch_s_gbit), 2),
                    report::cell(med(runs, tu, n, ns_per_wire_packet), 0),
                    report::cell(med(runs, tr, n, ns_per_wire_packet), 0),
                ]
            })
            .collect();
        s.push_str(&report::table(
            &[
                ("streams", true),
                ("tunnel Gbit/s", true),
                ("transport Gbit/s", true),
                ("transport ÷ tunnel", true),
                ("transport ÷ unencrypted", true),
                ("transport ÷ strongswan", true),
                ("machine s/Gbit tunnel", true),
                ("transport", true),
                ("daemons s/Gbit tunnel", true),
                ("transport", true),
                ("ns/wire pkt tunnel", true),
                ("transport", true),
            ],
            &rows,
        ));
    }

    // UDP GSO: the same engine with the ESP wire varied.
    if o.engines
        .iter()
        .any(|e| matches!(e, IpEngine::NicflowIpsecNogso | IpEngine::NicflowIpsecEsp))
    {
        let _ = writeln!(
            s,
            "\n## UDP GSO for ESP in UDP (same run)\n\n`nicflow-ipsec` glues the ESP-in-UDP \
             packets of a batch into UDP super-frames (`esp_gso`, default on); \
             `nicflow-ipsec-nogso` sends each one as its own message (`esp_gso=false`); \
             `nicflow-ipsec-esp` sends ESP as IP protocol 50 (`esp_encap=none`). CPU: the \
             machine's busy CPU seconds per Gbit carried; daemons: the two daemons' own.\n"
        );
        let mut rows = Vec::new();
        for &n in &o.streams {
            let e3 = [
                IpEngine::NicflowIpsec,
                IpEngine::NicflowIpsecNogso,
                IpEngine::NicflowIpsecEsp,
            ];
            let mut row = vec![n.to_string()];
            for e in e3 {
                row.push(report::cell(g(e, n), 2));
            }
            row.push(ratio_cell(g(e3[0], n), g(e3[1], n)));
            row.push(ratio_cell(g(e3[0], n), g(IpEngine::Nicflow, n)));
            for e in e3 {
                row.push(report::cell(med(runs, e, n, co::s_gbit), 2));
            }
            for e in e3 {
                row.push(report::cell(med(runs, e, n, switch_s_gbit), 2));
            }
            rows.push(row);
        }
        s.push_str(&report::table(
            &[
                ("streams", true),
                ("gso Gbit/s", true),
                ("nogso Gbit/s", true),
                ("esp (proto 50) Gbit/s", true),
                ("gso ÷ nogso", true),
                ("gso ÷ unencrypted", true),
                ("machine s/Gbit gso", true),
                ("nogso", true),
                ("esp", true),
                ("daemons s/Gbit gso", true),
                ("nogso", true),
                ("esp", true),
            ],
            &rows,
        ));
    }

    // ESP cost per packet.
    let _ = writeln!(s, "\n## ESP cost per packet\n");
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &n in &o.streams {
        let ip = med(runs, IpEngine::NicflowIpsec, n, ns_per_wire_packet);
        let pl = med(runs, IpEngine::Nicflow, n, ns_per_wire_packet);
        let marginal = ip.zip(pl).map(|(a, b)| a - b);
        let raw = o
            .esp_bench
            .as_ref()
            .map(|b| b.ring_seal_ns + b.ring_open_ns);
        let lib = o.esp_bench.as_ref().map(|b| b.esp_seal_ns + b.esp_open_ns);
        let ratio = marginal.zip(raw).map(|(m, r)| m / r);
        ratios.push(ratio);
        rows.push(vec![
            n.to_string(),
            report::cell(ip, 0),
            report::cell(pl, 0),
            report::cell(marginal, 0),
            report::cell(lib, 0),
            report::cell(raw, 0),
            report::cell(ratio, 2),
            report::cell(ip.zip(raw).map(|(a, r)| a / r), 2),
        ]);
    }
    let _ = writeln!(
        s,
        "Per packet on the wire, both daemons together (one seal + one open with IPsec). \
         marginal = nicflow-ipsec − nicflow: what IPsec adds to the daemons' CPU per packet \
         (nicflow's unencrypted overlay runs in the TC engine: its daemons are nearly idle). \
         Library and raw: the esp bench's aes-gcm-128/1400 seal + open, nicflow-ipsec's ESP \
         code and ring alone on the same payload ({}).\n",
        if o.esp_bench.is_some() {
            "same machine; table below"
        } else {
            "not given: run with --esp-bench"
        }
    );
    s.push_str(&report::table(
        &[
            ("streams", true),
            ("nicflow-ipsec ns/pkt", true),
            ("nicflow ns/pkt", true),
            ("marginal ns/pkt", true),
            ("esp bench seal+open ns", true),
            ("raw ring seal+open ns", true),
            ("marginal ÷ raw", true),
            ("all-in ÷ raw", true),
        ],
        &rows,
    ));
    if let Some(b) = &o.esp_bench {
        let _ = writeln!(
            s,
            "\n`ESP_BENCH_SUMMARY_ONLY=1 cargo bench -p nicflow-ipsec --bench esp`:\n\n```text\n{}\n```",
            b.text
        );
    }

    let _ = writeln!(s, "\n## Targets (issues 15 and 34)\n");
    let fmt = |v: &[Option<f64>]| {
        v.iter()
            .zip(&o.streams)
            .map(|(x, n)| format!("{n}: {}", report::cell(*x, 2)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let inv: Vec<Option<f64>> = ratios.iter().map(|r| r.map(|x| 1.5 / x)).collect();
    let mut items = vec![
        format!(
            "nicflow-ipsec ≥ 10× strongSwan's userspace ESP (issue 34; issue 15: 3×): {} ({})",
            verdict(&vs_swan, 10.0),
            fmt(&vs_swan)
        ),
        format!(
            "machine CPU s per encrypted Gbit below 0.3 (issue 34; shown as 0.3 ÷ s/Gbit ≥ 1): {} ({})",
            verdict(&cpu_gbit, 1.0),
            fmt(&cpu_gbit)
        ),
        format!(
            "nicflow-ipsec ≥ 0.5× nicflow's unencrypted overlay with the defaults: {} ({})",
            verdict(&vs_plain, 0.5),
            fmt(&vs_plain)
        ),
        format!(
            "ESP cost per packet within 1.5× of the raw library seal/open (marginal ÷ raw ≤ 1.5): {} ({})",
            verdict(&inv, 1.0),
            fmt(&ratios)
        ),
    ];
    if o.engines.contains(&IpEngine::NicflowIpsecTransport) {
        let tr = IpEngine::NicflowIpsecTransport;
        let per =
            |f: &dyn Fn(usize) -> Option<f64>| o.streams.iter().map(|&n| f(n)).collect::<Vec<_>>();
        let sw = per(&|n| {
            g(tr, n)
                .zip(g(IpEngine::Strongswan, n))
                .filter(|x| x.1 > 0.0)
                .map(|(a, b)| a / b)
        });
        let pl = per(&|n| {
            g(tr, n)
                .zip(g(IpEngine::Nicflow, n))
                .filter(|x| x.1 > 0.0)
                .map(|(a, b)| a / b)
        });
        let cg = per(&|n| {
            med(runs, tr, n, co::s_gbit)
                .filter(|x| *x > 0.0)
                .map(|x| 0.3 / x)
        });
        items.push(format!(
            "transport mode: ≥ 10× strongSwan: {} ({}); machine CPU s per Gbit below 0.3 (as 0.3 ÷ s/Gbit): {} ({}); ≥ 0.5× unencrypted: {} ({})",
            verdict(&sw, 10.0),
            fmt(&sw),
            verdict(&cg, 1.0),
            fmt(&cg),
            verdict(&pl, 0.5),
            fmt(&pl)
        ));
    }
    for i in items {
        let _ = writeln!(s, "- {i}");
    }
    let _ = writeln!(s);
    co::write_failures(&mut s, runs, true);
    let _ = writeln!(s, "\n## Commands\n");
    let _ = writeln!(
        s,
        "```sh\n{}\n\
         # nicflow-ipsec / nicflow, on host h: ip netns exec <Hh> nicflow --socket hh.sock daemon --config hh.toml with (H1; keys random per lab, nicflow: no ipsec options):\n{}\
         # nicflow-ipsec-afxdp: the same with offload = \"none\" in [[bridge]], type = \"afxdp\" on the port, underlay_type = \"afxdp\", gro = \"false\" in the tunnel's options\n\
         # nicflow-ipsec-transport: the same with esp_mode = \"transport\"; -nogso: esp_gso = \"false\"; -esp: esp_encap = \"none\"\n\
         # strongswan, on host h in its namespace:\n{}\n\
         ip netns exec <Hh> unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /run && exec {CHARON}'   # STRONGSWAN_CONF: crates/ipsec/tests/strongswan/strongswan.conf.in, install_routes = yes\n\
         swanctl --load-all --clear --file swanctl.conf   # crates/ipsec/tests/strongswan/swanctl.conf.in, local = own underlay address\n\
         swanctl --initiate --child nicflow   # on H1\n\
         ip netns exec <s1> iperf3 -s -p {PORT}\n\
         ip netns exec <c1> {}\n```",
        command_line(o),
        nicflow_config(
            1,
            Some(&Keys {
                spi_12: 0x1201,
                key_12: "0x<20 random bytes>".into(),
                spi_21: 0x2101,
                key_21: "0x<20 random bytes>".into(),
            }),
            Ports::Defaults,
            EspWire::UdpGso,
            EspMode::Tunnel
        ),
        kernel_commands(1)
            .iter()
            .map(|c| format!("ip -n <H1> {}", c.join(" ")))
            .collect::<Vec<_>>()
            .join("\n"),
        client_argv(o.seconds, 0).join(" ").replace(" -J", " -P N -J")
    );
    s
}

// ---------------------------------------------------------------------------
// Packet rate (`--mode pps`)
// ---------------------------------------------------------------------------
//
// Small UDP frames through the encrypted overlay: `nicflow gen` in c1
// writes them onto c1's eth0 as fast as it can (AF_XDP, else an AF_PACKET
// tx ring; source ports varied over `flows` flows), `nicflow sink` in s1
// takes them off s1's eth0 (AF_XDP) and counts those carrying the
// generator's sequence numbers: the figure is packets delivered to the
// receiving container, never packets sent. Beside it the ESP packets H1
// sealed and H2 opened (and the underlay veth's packets) over the same
// burst, so the report can show that what was delivered went through ESP.

/// Options of a pps run (its samples.json).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PpsOptions {
    pub engines: Vec<IpEngine>,
    pub reps: usize,
    pub seconds: u64,
    pub flows: Vec<usize>,
    /// Frame size with FCS at the container.
    pub size: usize,
}

/// Counters over one pps burst, per direction: H1 seals, H2 opens.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PpsWire {
    /// ESP packets H1's daemon sealed.
    pub esp_tx_h1: u64,
    /// ESP packets H2's daemon opened.
    pub esp_rx_h2: u64,
    /// ESP drops of any reason, both daemons.
    pub esp_drops: u64,
    /// Packets H1's underlay veth sent / H2's received (every engine:
    /// strongSwan's ESP in UDP, the unencrypted overlay's VXLAN).
    pub underlay_tx_h1: u64,
    pub underlay_rx_h2: u64,
    /// ESP drop counters by name over the burst, both daemons (and the
    /// underlay and container ports' receive drops, see [`Packets::drops_by`]).
    #[serde(default)]
    pub drops_by: std::collections::BTreeMap<String, u64>,
    /// Frames H2's underlay port lost before H2's daemon read them (the
    /// kernel's drops, `underlay_port_rx_drop_*`), over the burst.
    #[serde(default)]
    pub underlay_rx_drops_h2: u64,
    /// ESP packets per UDP super-frame H1 sent over the burst
    /// (`esp_tx_gso_packets ÷ esp_tx_gso_frames`; 1 without super-frames).
    #[serde(default)]
    pub esp_per_frame_h1: Option<f64>,
    /// Frames H2's daemon could not send on its port `vs1` (`tx_dropped`).
    #[serde(default)]
    pub vs1_tx_drops_daemon: u64,
    /// Frames the kernel dropped on H2's veth `vs1` (`ip -s link` TX
    /// dropped: the peer's queue full).
    #[serde(default)]
    pub vs1_tx_drops_kernel: u64,
    /// Frames s1's eth0 received but dropped (`ip -s link` RX dropped): on
    /// this veth with the sink's XDP program, frames the program redirected
    /// to the sink's AF_XDP socket when its receive ring was full (or its
    /// fill ring empty): `ethtool -S` `rx_queue_0_drops`.
    #[serde(default)]
    pub sink_rx_drops: u64,
}

impl PpsWire {
    /// ESP packets sealed on H1 that H2's daemon never opened nor dropped
    /// by an ESP reason.
    pub fn esp_lost(&self) -> u64 {
        self.esp_tx_h1
            .saturating_sub(self.esp_rx_h2)
            .saturating_sub(self.esp_drops)
    }

    /// ESP packets in the frames H2's underlay port lost (the kernel counts
    /// frames: each is taken as H1's average super-frame).
    pub fn esp_in_underlay_drops(&self) -> Option<f64> {
        Some(self.underlay_rx_drops_h2 as f64 * self.esp_per_frame_h1?)
    }

    /// Of the ESP packets lost, the share the underlay's drop counters
    /// account for (about 1 when they explain the loss).
    pub fn lost_accounted(&self) -> Option<f64> {
        let lost = self.esp_lost();
        (lost > 0).then(|| self.esp_in_underlay_drops().unwrap_or(0.0) / lost as f64)
    }

    /// Frames H2's daemon opened that the sink did not count (`delivered`).
    pub fn opened_lost(&self, delivered: u64) -> u64 {
        self.esp_rx_h2.saturating_sub(delivered)
    }

    /// The drops counted between H2's daemon and the sink: the daemon's
    /// `vs1` port, the kernel's veth, s1's eth0 (the sink's socket).
    pub fn opened_drops(&self) -> u64 {
        self.vs1_tx_drops_daemon + self.vs1_tx_drops_kernel + self.sink_rx_drops
    }

    /// Of the frames opened and not delivered, the share those drops
    /// account for (about 1 when they explain the loss).
    pub fn opened_lost_accounted(&self, delivered: u64) -> Option<f64> {
        let lost = self.opened_lost(delivered);
        (lost > 0).then(|| self.opened_drops() as f64 / lost as f64)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PpsExtra {
    pub flows: usize,
    pub burst: Option<pktrate::Burst>,
    pub wire: Option<PpsWire>,
}

pub type PpsRun = co::Run<IpEngine, PpsExtra>;
pub type PpsResults = co::Results<PpsOptions, PpsRun>;

/// The pps mode's options from the command line.
pub fn pps_options(a: &Args) -> anyhow::Result<PpsOptions> {
    let mut flows = testbed::parse_counts(&a.flows).context("--flows")?;
    if let Some(n) = flows.iter().find(|&&n| n == 0 || n > MAX_FLOWS) {
        bail!("--flows {n}: from 1 to {MAX_FLOWS} flows");
    }
    // The frame must fit the container's MTU (IP packet = frame - 14 - 4).
    let max_size = CONTAINER_MTU as usize + 18;
    if a.size < 64 || a.size > max_size {
        bail!("--size {}: from 64 to {max_size} bytes (frame with FCS, container MTU {CONTAINER_MTU})", a.size);
    }
    let (reps, seconds) = if a.run.quick {
        flows.truncate(1);
        (1, 2)
    } else {
        (a.reps.max(1), a.seconds.max(1))
    };
    Ok(PpsOptions {
        engines: parse_engines(&a.engines)?,
        reps,
        seconds,
        flows,
        size: a.size,
    })
}

/// The generator's traffic: UDP from c1 to s1, source ports varied.
pub fn pps_traffic(o: &PpsOptions, flows: usize) -> pktrate::Traffic {
    pktrate::Traffic {
        flows: flows as u32,
        vary: "src-port".into(),
        gen_args: vec![
            "--src-ip".into(),
            container_ip(false).to_string(),
            "--dst-ip".into(),
            container_ip(true).to_string(),
        ],
        size: o.size,
        seconds: o.seconds as f64,
    }
}

pub fn run_pps(o: &PpsOptions) -> anyhow::Result<PpsResults> {
    let progress_pps = |s: &str| {
        let s = s
            .replacen(" pair(s),", " flow(s),", 1)
            .replacen(" pairs rep ", " flows rep ", 1);
        eprintln!("[ipsec pps] {s}");
    };
    co::sweep(o, (o.reps, &o.flows, &o.engines), progress_pps, |_, run| {
        pps_body(o, run)
    })
}

fn pps_body(o: &PpsOptions, run: &mut PpsRun) -> anyhow::Result<()> {
    let flows = run.pairs;
    run.extra.flows = flows;
    let lab = IpsecLab::up(run.engine)?;
    run.lab = lab.lab.name().to_string();
    let scratch = lab.lab.dir().join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let (c1, s1) = (lab.ns("c1"), lab.ns("s1"));
    let ends = pktrate::Ends {
        bin: nicflow_bin()?,
        client_mac: testbed::read_mac(&c1, "eth0")?,
        client_ns: c1,
        client_iface: "eth0".into(),
        server_mac: testbed::read_mac(&s1, "eth0")?,
        server_ns: s1,
        server_iface: "eth0".into(),
        scratch,
        switch_pid: None,
    };
    let t = pps_traffic(o, flows);
    pktrate::warm_up_on(&ends, &t, 2).context("warm-up")?;
    let h2 = lab.ns("h2");
    // Between H2's daemon and the sink: H2's veth vs1, s1's eth0.
    let veths = || {
        (
            IfaceCounters::read(&h2, host_end(2)).unwrap_or_default(),
            IfaceCounters::read(&ends.server_ns, "eth0").unwrap_or_default(),
        )
    };
    let (b1, b2) = (lab.packets_on(&[1]), lab.packets_on(&[2]));
    let (bv, bs) = veths();
    let burst = pktrate::burst_counting(&ends, &t, None, &lab.switch_pids())?;
    let (av, as_) = veths();
    let (a1, a2) = (lab.packets_on(&[1]), lab.packets_on(&[2]));
    let gso_frames = a1.esp_gso_frames.saturating_sub(b1.esp_gso_frames);
    let gso_packets = a1.esp_gso_packets.saturating_sub(b1.esp_gso_packets);
    let wire = PpsWire {
        underlay_rx_drops_h2: a2.underlay_rx_drops.saturating_sub(b2.underlay_rx_drops),
        vs1_tx_drops_daemon: a2.end_tx_drops.saturating_sub(b2.end_tx_drops),
        vs1_tx_drops_kernel: av.tx_dropped.saturating_sub(bv.tx_dropped),
        sink_rx_drops: as_.rx_dropped.saturating_sub(bs.rx_dropped),
        esp_per_frame_h1: if gso_frames > 0 {
            Some(gso_packets as f64 / gso_frames as f64)
        } else if run.engine.is_ipsec() {
            Some(1.0)
        } else {
            None
        },
        esp_tx_h1: a1.esp_tx.saturating_sub(b1.esp_tx),
        esp_rx_h2: a2.esp_rx.saturating_sub(b2.esp_rx),
        esp_drops: (a1.esp_drops + a2.esp_drops).saturating_sub(b1.esp_drops + b2.esp_drops),
        underlay_tx_h1: a1.underlay_tx.saturating_sub(b1.underlay_tx),
        underlay_rx_h2: a2.underlay_rx.saturating_sub(b2.underlay_rx),
        drops_by: counters_between(
            &b1.drops_by.iter().chain(&b2.drops_by).fold(
                std::collections::BTreeMap::new(),
                |mut m, (k, v)| {
                    *m.entry(k.clone()).or_default() += v;
                    m
                },
            ),
            &a1.drops_by.iter().chain(&a2.drops_by).fold(
                std::collections::BTreeMap::new(),
                |mut m, (k, v)| {
                    *m.entry(k.clone()).or_default() += v;
                    m
                },
            ),
        ),
    };
    eprintln!(
        "[ipsec pps] {} {flows} flows: sent {} ({:.0}/s, {}), delivered {} ({:.0}/s), esp sealed {} opened {} drops {} {:?}, lost {} (H2 underlay dropped {} frames, ~{:.0} ESP), opened not delivered {} (vs1 tx drops daemon {} kernel {}, s1 eth0 rx drops {}), underlay tx {} rx {}, machine {:.2} cores, daemons {:.2} cores",
        run.engine.name(),
        burst.sent,
        burst.sent_pps,
        burst.gen_engine,
        burst.received,
        burst.rx_pps,
        wire.esp_tx_h1,
        wire.esp_rx_h2,
        wire.esp_drops,
        wire.drops_by,
        wire.esp_lost(),
        wire.underlay_rx_drops_h2,
        wire.esp_in_underlay_drops().unwrap_or(0.0),
        wire.opened_lost(burst.received),
        wire.vs1_tx_drops_daemon,
        wire.vs1_tx_drops_kernel,
        wire.sink_rx_drops,
        wire.underlay_tx_h1,
        wire.underlay_rx_h2,
        burst.machine_cores,
        burst.switch_cores,
    );
    run.extra.burst = Some(burst);
    run.extra.wire = Some(wire);
    lab.down()
}

fn burst_of(r: &PpsRun) -> Option<&pktrate::Burst> {
    r.extra.burst.as_ref().filter(|b| b.received > 0)
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Packets per second delivered to s1, in millions.
fn rx_mpps(r: &PpsRun) -> Option<f64> {
    finite(burst_of(r)?.rx_pps / 1e6)
}

/// Packets per second the generator sent, in millions.
fn sent_mpps(r: &PpsRun) -> Option<f64> {
    finite(r.extra.burst.as_ref()?.sent_pps / 1e6)
}

/// Delivered ÷ sent.
fn delivered_share(r: &PpsRun) -> Option<f64> {
    let b = r.extra.burst.as_ref()?;
    (b.sent > 0).then(|| b.received as f64 / b.sent as f64)
}

/// Busy cores of the machine during the burst (generator included).
fn pps_machine_cores(r: &PpsRun) -> Option<f64> {
    finite(burst_of(r)?.machine_cores)
}

/// The two daemons' (charons') cores during the burst.
fn pps_daemon_cores(r: &PpsRun) -> Option<f64> {
    finite(burst_of(r)?.switch_cores)
}

/// The two daemons' (charons') CPU per delivered packet (µs).
fn pps_daemon_us(r: &PpsRun) -> Option<f64> {
    finite(burst_of(r)?.switch_us_per_pkt)
}

/// The machine's busy CPU per delivered packet (µs; the generator's and
/// the sink's included).
fn pps_machine_us(r: &PpsRun) -> Option<f64> {
    let b = burst_of(r)?;
    finite(b.usage.busy_s * 1e6 / b.received as f64)
}

/// Packets delivered ÷ ESP packets H2 opened (nicflow with IPsec): at most
/// 1 when everything delivered went through ESP.
pub fn delivered_per_esp(received: u64, esp_rx: u64) -> Option<f64> {
    (esp_rx > 0).then(|| received as f64 / esp_rx as f64)
}

fn delivered_per_opened(r: &PpsRun) -> Option<f64> {
    if !r.engine.is_ipsec() {
        return None;
    }
    delivered_per_esp(burst_of(r)?.received, r.extra.wire.as_ref()?.esp_rx_h2)
}

/// Packets delivered ÷ packets H2's underlay received (not for nicflow's
/// IPsec engines: with `esp_gso` the underlay carries UDP super-frames of
/// many ESP packets each).
fn delivered_per_underlay(r: &PpsRun) -> Option<f64> {
    if r.engine.is_ipsec() && r.engine.wire() == EspWire::UdpGso {
        return None;
    }
    delivered_per_esp(burst_of(r)?.received, r.extra.wire.as_ref()?.underlay_rx_h2)
}

/// ESP packets H2 opened ÷ H1 sealed (nicflow with IPsec).
fn opened_per_sealed(r: &PpsRun) -> Option<f64> {
    let w = r.extra.wire.as_ref()?;
    (r.engine.is_ipsec() && w.esp_tx_h1 > 0).then(|| w.esp_rx_h2 as f64 / w.esp_tx_h1 as f64)
}

/// ESP packets in the frames H2's underlay port counted as dropped ÷ ESP
/// packets sealed and neither opened nor dropped by an ESP reason.
fn lost_accounted(r: &PpsRun) -> Option<f64> {
    if !r.engine.is_ipsec() {
        return None;
    }
    r.extra.wire.as_ref()?.lost_accounted()
}

/// Frames H2 opened and the sink did not count: the share H2's `vs1` drops
/// (daemon, kernel) and s1's eth0 receive drops account for.
fn opened_lost_accounted(r: &PpsRun) -> Option<f64> {
    if !r.engine.is_ipsec() {
        return None;
    }
    r.extra
        .wire
        .as_ref()?
        .opened_lost_accounted(r.extra.burst.as_ref()?.received)
}

const PPS_SPECS: [Spec<PpsRun>; 4] = [
    (
        "pps",
        "VXLAN over IPsec: small UDP frames delivered per second",
        "frames delivered to the receiving container (Mpps)",
        rx_mpps,
    ),
    (
        "pps-daemon-us",
        "VXLAN over IPsec: daemons' / charons' CPU per delivered frame",
        "CPU µs of the two daemons (charons) per delivered frame",
        pps_daemon_us,
    ),
    (
        "pps-machine-cores",
        "VXLAN over IPsec: machine busy cores during the burst",
        "busy cores (all CPUs, /proc/stat; generator included)",
        pps_machine_cores,
    ),
    (
        "pps-daemon-cores",
        "VXLAN over IPsec: daemons' / charons' cores during the burst",
        "cores used by the two daemons (charons), utime+stime",
        pps_daemon_cores,
    ),
];

pub fn pps_figures(r: &PpsResults) -> Vec<Figure> {
    let specs = figure_specs(&PPS_SPECS);
    co::figures(
        &r.runs,
        &r.options.flows,
        "distinct UDP flows (source ports)",
        &specs,
    )
}

fn pps_command_line(o: &PpsOptions) -> String {
    format!(
        "nicflow bench ipsec --mode pps --engines {} --flows {} --size {} --reps {} --seconds {}",
        report::join(&o.engines.iter().map(|e| e.name()).collect::<Vec<_>>(), ","),
        report::join(&o.flows, ","),
        o.size,
        o.reps,
        o.seconds,
    )
}

pub fn pps_markdown(r: &PpsResults, figs: &[Figure]) -> String {
    let o = &r.options;
    let runs = &r.runs;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# nicflow bench ipsec --mode pps: small frames through VXLAN over IPsec\n"
    );
    let _ = writeln!(s, "{}", report::machine_section(&r.perf));
    let _ = writeln!(
        s,
        "{} repetition(s); per engine and flow count ({}): a fresh lab of `bench ipsec` (two hosts \
         H1, H2 joined by a veth underlay, container c1 behind H1, s1 behind H2, MTU \
         {CONTAINER_MTU}, one VXLAN segment, ESP AES-GCM-128 in UDP 4500; engines as in the \
         throughput report: `nicflow-ipsec` tunnel mode, `nicflow-ipsec-transport` transport \
         mode, `nicflow` no IPsec, `strongswan` charon kernel-libipsec). Traffic: `nicflow gen` \
         in c1 writes {}-byte frames (with FCS; {} bytes of UDP payload) from {} to {} onto c1's \
         eth0 as fast as it can for {} s, source ports varied over the flows (a warm-up of 2 \
         frames per flow first); `nicflow sink` in s1 takes them off s1's eth0 (AF_XDP) and \
         counts the frames carrying the generator's sequence numbers. **delivered Mpps** = \
         frames the sink counted ÷ the generator's seconds: what came out of the encrypted \
         tunnel, not what was sent. Beside it the ESP packets H1's daemon sealed and H2's \
         opened over the same burst, and H2's underlay veth's received packets. **ESP lost \
         accounted**: the ESP packets sealed but neither opened nor dropped by an ESP reason, \
         against the frames H2's underlay port lost before its daemon read them \
         (`underlay_port_rx_drop_*`: the kernel's drops, e.g. the upcall socket's receive queue \
         full), each taken as H1's average UDP super-frame of ESP packets (about 1 when the \
         counters explain the loss). CPU: \
         /proc/stat over the burst (the generator's busy loop is one of the busy cores) and \
         the two daemons' (charons') utime+stime. Medians over repetitions.\n",
        o.reps,
        report::join(&o.flows, ", "),
        o.size,
        o.size.saturating_sub(46),
        container_ip(false),
        container_ip(true),
        o.seconds,
    );
    co::write_figures(&mut s, figs, &[3, 2, 2, 2]);

    let _ = writeln!(s, "## Details (medians)\n");
    let cols: &[(&str, Get<PpsRun>, usize)] = &[
        ("delivered Mpps", rx_mpps, 3),
        ("sent Mpps", sent_mpps, 3),
        ("delivered ÷ sent", delivered_share, 3),
        ("delivered ÷ ESP opened", delivered_per_opened, 3),
        ("delivered ÷ underlay rx", delivered_per_underlay, 3),
        ("ESP opened ÷ sealed", opened_per_sealed, 3),
        ("ESP lost accounted", lost_accounted, 2),
        ("opened not delivered accounted", opened_lost_accounted, 2),
        ("machine cores", pps_machine_cores, 2),
        ("daemon cores", pps_daemon_cores, 2),
        ("daemon µs/pkt", pps_daemon_us, 2),
        ("machine µs/pkt", pps_machine_us, 2),
    ];
    s.push_str(
        &co::details_table(
            runs,
            &o.flows,
            cols,
            &["last rep: sent, delivered; esp sealed H1 / opened H2 (drops by reason); underlay tx H1 / rx H2; opened not delivered (vs1 tx drops daemon / kernel, s1 eth0 rx drops); generator"],
            |e, n| {
                let last = runs
                    .iter()
                    .rev()
                    .find(|x| x.engine == e && x.pairs == n && x.error.is_none());
                vec![last
                    .and_then(|x| Some((x.extra.burst.as_ref()?, x.extra.wire.as_ref()?)))
                    .map(|(b, w)| {
                        format!(
                            "{}, {}; {} / {} ({}); {} / {}; {} ({} / {}, {}); {}",
                            b.sent,
                            b.received,
                            w.esp_tx_h1,
                            w.esp_rx_h2,
                            if w.drops_by.is_empty() {
                                w.esp_drops.to_string()
                            } else {
                                w.drops_by
                                    .iter()
                                    .map(|(k, v)| format!("{k} {v}"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            },
                            w.underlay_tx_h1,
                            w.underlay_rx_h2,
                            w.opened_lost(b.received),
                            w.vs1_tx_drops_daemon,
                            w.vs1_tx_drops_kernel,
                            w.sink_rx_drops,
                            b.gen_engine
                        )
                    })
                    .unwrap_or_else(|| "—".into())]
            },
        )
        .replacen("| engine | pairs |", "| engine | flows |", 1),
    );

    let _ = writeln!(s, "\n## Ratios (same run, delivered packets/s)\n");
    let g = |e, n| co::med(runs, e, n, rx_mpps);
    let (tu, tr, pl, sw) = (
        IpEngine::NicflowIpsec,
        IpEngine::NicflowIpsecTransport,
        IpEngine::Nicflow,
        IpEngine::Strongswan,
    );
    let rows: Vec<Vec<String>> = o
        .flows
        .iter()
        .map(|&n| {
            vec![
                n.to_string(),
                report::cell(g(tu, n), 3),
                report::cell(g(tr, n), 3),
                report::cell(g(pl, n), 3),
                report::cell(g(sw, n), 3),
                ratio_cell(g(tr, n), g(tu, n)),
                ratio_cell(g(tu, n), g(pl, n)),
                ratio_cell(g(tr, n), g(pl, n)),
                ratio_cell(g(tu, n), g(sw, n)),
                ratio_cell(g(tr, n), g(sw, n)),
            ]
        })
        .collect();
    s.push_str(&report::table(
        &[
            ("flows", true),
            ("tunnel Mpps", true),
            ("transport Mpps", true),
            ("unencrypted Mpps", true),
            ("strongswan Mpps", true),
            ("transport ÷ tunnel", true),
            ("tunnel ÷ unencrypted", true),
            ("transport ÷ unencrypted", true),
            ("tunnel ÷ strongswan", true),
            ("transport ÷ strongswan", true),
        ],
        &rows,
    ));
    let _ = writeln!(
        s,
        "\ntunnel = `nicflow-ipsec`, transport = `nicflow-ipsec-transport`, unencrypted = \
         `nicflow`, strongswan = `strongswan`.\n"
    );
    co::write_failures(&mut s, runs, true);
    let _ = writeln!(s, "\n## Commands\n");
    let _ = writeln!(
        s,
        "```sh\n{}\n# per lab (the daemons and charons as in `nicflow bench ipsec`'s report):\n\
         ip netns exec <s1> nicflow sink --iface eth0 --duration {} --idle-exit 1000 --flows N --json\n\
         ip netns exec <c1> nicflow gen --iface eth0 --src-mac <c1 eth0> --dst-mac <s1 eth0> --size {} \
         --flows N --vary src-port --json --src-ip {} --dst-ip {} --duration {}\n```",
        pps_command_line(o),
        o.seconds + 20,
        o.size,
        container_ip(false),
        container_ip(true),
        o.seconds,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batch sizes: receive frames per `recvmmsg` that found any (the empty
    /// ones left out of the divisor), transmit frames per `sendmmsg`, the
    /// empty share; nothing for a port the daemon did not count.
    #[test]
    fn batch_sizes_leave_empty_calls_out_of_the_receive_batch() {
        let s: std::collections::BTreeMap<String, u64> = [
            ("h2:underlay:rx_recvmmsg_calls", 100),
            ("h2:underlay:rx_recvmmsg_empty", 60),
            ("h2:underlay:rx_recvmmsg_frames", 120),
            ("h2:underlay:tx_sendmmsg_calls", 10),
            ("h2:underlay:tx_packets", 45),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(batch_sizes(&s, "h2:underlay"), Some((3.0, 4.5, 0.6)));
        assert_eq!(batch_sizes(&s, "h1:vc1"), None);
        // Every call empty, nothing sent: no division by zero.
        let mut e = s.clone();
        e.insert("h2:underlay:rx_recvmmsg_empty".into(), 100);
        e.insert("h2:underlay:rx_recvmmsg_frames".into(), 0);
        e.remove("h2:underlay:tx_sendmmsg_calls");
        e.remove("h2:underlay:tx_packets");
        assert_eq!(batch_sizes(&e, "h2:underlay"), Some((0.0, 0.0, 1.0)));
    }

    #[test]
    fn configs_parse_and_mirror() {
        let k = Keys {
            spi_12: 0x1201,
            key_12: "0x00112233445566778899aabbccddeeff01020304".into(),
            spi_21: 0x2101,
            key_21: "0xffeeddccbbaa99887766554433221100a0b0c0d0".into(),
        };
        for host in [1, 2] {
            for (keys, ports) in [
                (None, Ports::Defaults),
                (Some(&k), Ports::Defaults),
                (Some(&k), Ports::Afxdp),
            ] {
                let t = nicflow_config(host, keys, ports, EspWire::UdpGso, EspMode::Tunnel);
                let cfg: nicflow::control::config::Config =
                    toml::from_str(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
                assert_eq!(cfg.bridges[0].ports.len(), 2, "{t}");
            }
        }
        let h1 = nicflow_config(
            1,
            Some(&k),
            Ports::Defaults,
            EspWire::UdpGso,
            EspMode::Tunnel,
        );
        let h2 = nicflow_config(
            2,
            Some(&k),
            Ports::Defaults,
            EspWire::UdpGso,
            EspMode::Tunnel,
        );
        assert!(h1.contains("esp_encap = \"udp\"") && !h1.contains("esp_gso"));
        let g = nicflow_config(1, Some(&k), Ports::Defaults, EspWire::Udp, EspMode::Tunnel);
        assert!(
            g.contains("esp_encap = \"udp\", esp_gso = \"false\""),
            "{g}"
        );
        let p = nicflow_config(1, Some(&k), Ports::Defaults, EspWire::Esp, EspMode::Tunnel);
        assert!(p.contains("esp_encap = \"none\""), "{p}");
        for t in [g, p] {
            let cfg: nicflow::control::config::Config =
                toml::from_str(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
            assert_eq!(cfg.bridges[0].ports.len(), 2, "{t}");
        }
        assert!(
            !h1.contains("offload") && !h1.contains("afxdp") && h1.contains("type = \"auto\""),
            "{h1}"
        );
        let x1 = nicflow_config(1, Some(&k), Ports::Afxdp, EspWire::UdpGso, EspMode::Tunnel);
        assert!(
            x1.contains("offload = \"none\"")
                && x1.contains("type = \"afxdp\"")
                && x1.contains("underlay_type = \"afxdp\", gro = \"false\""),
            "{x1}"
        );
        assert!(
            h1.contains("esp_spi_out = \"0x1201\", esp_key_out = \"0x0011"),
            "{h1}"
        );
        assert!(
            h2.contains("esp_spi_in = \"0x1201\", esp_key_in = \"0x0011"),
            "{h2}"
        );
        assert!(h2.contains("local_ip = \"198.18.52.2\", remote_ip = \"198.18.52.1\""));
        assert!(
            !nicflow_config(1, None, Ports::Defaults, EspWire::UdpGso, EspMode::Tunnel)
                .contains("ipsec")
        );
        let sw = swanctl_conf(2);
        assert!(
            sw.contains("local_addrs = 198.18.52.2") && sw.contains("remote_addrs = 198.18.52.1")
        );
        let ss = strongswan_conf(Path::new("/tmp/x"));
        assert!(ss.contains("install_routes = yes") && ss.contains("/tmp/x/charon.vici"));
        assert!(
            ss.contains("load = openssl random nonce aes sha1 sha2 hmac gcm curve25519 kdf"),
            "{ss}"
        );
        assert!(ss.contains(" net = 1\n") && !ss.contains(" net = 2") && !ss.contains("chd = 4"));
        assert_eq!(
            kernel_commands(1)[1].join(" "),
            "link add vx0 type vxlan id 100 local 198.18.52.1 remote 198.18.52.2 dstport 4789"
        );
        assert_eq!(
            parse_engines("strongswan,nicflow-ipsec").unwrap_or_default(),
            vec![IpEngine::Strongswan, IpEngine::NicflowIpsec]
        );
    }

    #[test]
    fn esp_bench_line() {
        let t = "\ncase                  seal ns    ring ns   ratio    open ns    ring ns   ratio seal Gb/s open Gb/s\n\
                 aes-gcm-128/1400        400.0      350.0    1.14      420.0      360.0    1.17     28.00     26.67\n";
        let b = parse_esp_bench(t, "aes-gcm-128/1400").unwrap_or_default();
        assert_eq!(
            (b.esp_seal_ns, b.ring_seal_ns, b.esp_open_ns, b.ring_open_ns),
            (400.0, 350.0, 420.0, 360.0)
        );
        assert!(parse_esp_bench(t, "aes-gcm-256/64").is_none());
    }

    #[test]
    fn verdicts() {
        assert_eq!(
            verdict(&[Some(3.1), Some(4.0)], 3.0),
            "**met** at every stream count"
        );
        assert_eq!(
            verdict(&[Some(2.0), Some(4.0)], 3.0),
            "**partly met** (not at every stream count)"
        );
        assert_eq!(verdict(&[Some(2.0)], 3.0), "**not met**");
        assert_eq!(verdict(&[None], 3.0), "not measured at every stream count");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        a: Args,
    }

    fn args(argv: &[&str]) -> Args {
        use clap::Parser;
        let mut v = vec!["ipsec"];
        v.extend_from_slice(argv);
        Cli::try_parse_from(v)
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"))
            .a
    }

    #[test]
    fn transport_engine() {
        assert_eq!(
            parse_engines("nicflow-ipsec-transport,ipsec-transport").unwrap_or_default(),
            vec![IpEngine::NicflowIpsecTransport],
            "an alias names the same engine once"
        );
        let e = parse_engines("nicflow-ipsec,nicflow-ipsec-transport").unwrap_or_default();
        assert_eq!(
            e,
            vec![IpEngine::NicflowIpsec, IpEngine::NicflowIpsecTransport]
        );
        let tr = IpEngine::NicflowIpsecTransport;
        assert!(tr.is_ipsec() && tr.is_nicflow());
        assert_eq!(
            (tr.esp_mode(), tr.wire(), tr.ports()),
            (EspMode::Transport, EspWire::UdpGso, Ports::Defaults)
        );
        assert_eq!(IpEngine::NicflowIpsec.esp_mode(), EspMode::Tunnel);
        // Distinct lab names per engine.
        let tags: std::collections::BTreeSet<_> = [
            IpEngine::NicflowIpsec,
            IpEngine::NicflowIpsecAfxdp,
            IpEngine::NicflowIpsecNogso,
            IpEngine::NicflowIpsecEsp,
            tr,
            IpEngine::Nicflow,
            IpEngine::Strongswan,
        ]
        .iter()
        .map(|e| e.tag())
        .collect();
        assert_eq!(tags.len(), 7);
        let k = Keys {
            spi_12: 0x1201,
            key_12: "0x00112233445566778899aabbccddeeff01020304".into(),
            spi_21: 0x2101,
            key_21: "0xffeeddccbbaa99887766554433221100a0b0c0d0".into(),
        };
        let t = nicflow_config(2, Some(&k), tr.ports(), tr.wire(), tr.esp_mode());
        assert!(
            t.contains("esp_mode = \"transport\", esp_encap = \"udp\""),
            "{t}"
        );
        let cfg: nicflow::control::config::Config =
            toml::from_str(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
        assert_eq!(cfg.bridges[0].ports.len(), 2, "{t}");
        let tu = nicflow_config(
            2,
            Some(&k),
            Ports::Defaults,
            EspWire::UdpGso,
            EspMode::Tunnel,
        );
        assert!(
            tu.contains("esp_mode = \"tunnel\"") && !tu.contains("transport"),
            "{tu}"
        );
    }

    #[test]
    fn pps_arguments() {
        let a = args(&[]);
        assert_eq!(a.mode, Mode::Throughput);
        let a = args(&[
            "--mode",
            "pps",
            "--flows",
            "1,256",
            "--reps",
            "2",
            "--seconds",
            "3",
        ]);
        assert_eq!(a.mode, Mode::Pps);
        let o = pps_options(&a).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(
            (o.flows.clone(), o.size, o.reps, o.seconds),
            (vec![1, 256], 64, 2, 3)
        );
        let t = pps_traffic(&o, 256);
        assert_eq!((t.flows, t.size, t.vary.as_str()), (256, 64, "src-port"));
        assert_eq!(
            t.gen_args.join(" "),
            "--src-ip 198.18.62.1 --dst-ip 198.18.62.101"
        );
        // Defaults: 64-byte frames over 1, 16, 256 flows.
        let o = pps_options(&args(&["--mode", "pps"])).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!((o.flows, o.size), (vec![1, 16, 256], 64));
        let q = pps_options(&args(&["--mode", "pps", "--quick", "--flows", "4,8"]))
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!((q.flows, q.reps, q.seconds), (vec![4], 1, 2));
        for bad in [
            &["--mode", "pps", "--flows", "0"][..],
            &["--mode", "pps", "--flows", "50001"],
            &["--mode", "pps", "--size", "63"],
            &["--mode", "pps", "--size", "1369"],
            &["--mode", "pps", "--engines", "nicflow,bogus"],
        ] {
            assert!(pps_options(&args(bad)).is_err(), "{bad:?}");
        }
        assert!(pps_options(&args(&["--mode", "pps", "--size", "1368"])).is_ok());
        {
            use clap::Parser;
            assert!(Cli::try_parse_from(["ipsec", "--mode", "bogus"]).is_err());
        }
    }

    #[test]
    fn counters_and_cross_check() {
        let m = |v: &[(&str, u64)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let d = counters_between(
            &m(&[("esp_rx_drop_replay", 3), ("esp_tx_drop_queue", 5)]),
            &m(&[
                ("esp_rx_drop_replay", 3),
                ("esp_tx_drop_queue", 9),
                ("esp_rx_drop_icv", 1),
            ]),
        );
        assert_eq!(d, m(&[("esp_tx_drop_queue", 4), ("esp_rx_drop_icv", 1)]));
        assert_eq!(delivered_per_esp(90, 100), Some(0.9));
        assert_eq!(delivered_per_esp(5, 0), None);
        // 1,000 sealed, 600 opened, 10 dropped by ESP: 390 lost; H2's
        // underlay dropped 13 super-frames of 30 ESP packets each.
        let w = PpsWire {
            esp_tx_h1: 1000,
            esp_rx_h2: 600,
            esp_drops: 10,
            underlay_rx_drops_h2: 13,
            esp_per_frame_h1: Some(30.0),
            ..Default::default()
        };
        assert_eq!(w.esp_lost(), 390);
        assert_eq!(w.esp_in_underlay_drops(), Some(390.0));
        assert_eq!(w.lost_accounted(), Some(1.0));
        // Nothing lost: nothing to account for.
        let none = PpsWire {
            esp_tx_h1: 10,
            esp_rx_h2: 10,
            ..Default::default()
        };
        assert_eq!(none.lost_accounted(), None);
        // 600 opened, 520 delivered: 80 lost, 70 of them dropped at s1's
        // eth0 (the sink's socket full), 10 by H2's daemon on vs1.
        let w = PpsWire {
            esp_rx_h2: 600,
            sink_rx_drops: 70,
            vs1_tx_drops_daemon: 10,
            ..Default::default()
        };
        assert_eq!(w.opened_lost(520), 80);
        assert_eq!(w.opened_lost_accounted(520), Some(1.0));
        assert_eq!(w.opened_lost_accounted(600), None);
    }

    fn pps_run(engine: IpEngine, flows: usize, rep: usize, sent: u64, received: u64) -> PpsRun {
        let burst = pktrate::Burst {
            sent,
            received,
            sent_pps: sent as f64 / 5.0,
            rx_pps: received as f64 / 5.0,
            machine_cores: 2.0,
            switch_cores: 1.0,
            switch_us_per_pkt: 5e6 / received as f64,
            ..Default::default()
        };
        co::Run {
            engine,
            pairs: flows,
            rep,
            lab: String::new(),
            error: None,
            point: Default::default(),
            extra: PpsExtra {
                flows,
                burst: Some(burst),
                wire: Some(PpsWire {
                    esp_tx_h1: if engine.is_ipsec() { sent } else { 0 },
                    esp_rx_h2: if engine.is_ipsec() { received + 10 } else { 0 },
                    underlay_rx_h2: received * 2,
                    ..Default::default()
                }),
            },
        }
    }

    #[test]
    fn pps_report() {
        let o = PpsOptions {
            engines: vec![
                IpEngine::NicflowIpsec,
                IpEngine::NicflowIpsecTransport,
                IpEngine::Nicflow,
                IpEngine::Strongswan,
            ],
            reps: 2,
            seconds: 5,
            flows: vec![16],
            size: 64,
        };
        // Medians over two repetitions: 1.0 and 1.2 Mpps -> 1.1 (tunnel).
        let runs = vec![
            pps_run(IpEngine::NicflowIpsec, 16, 0, 6_000_000, 5_000_000),
            pps_run(IpEngine::NicflowIpsec, 16, 1, 7_000_000, 6_000_000),
            pps_run(IpEngine::NicflowIpsecTransport, 16, 0, 7_000_000, 5_500_000),
            pps_run(IpEngine::Nicflow, 16, 0, 12_000_000, 11_000_000),
            pps_run(IpEngine::Strongswan, 16, 0, 2_000_000, 550_000),
        ];
        let r = PpsResults {
            machine: String::new(),
            perf: String::new(),
            options: o,
            started_unix: 0,
            runs,
        };
        let figs = pps_figures(&r);
        assert_eq!(figs.len(), 4);
        assert_eq!(figs[0].series.len(), 4);
        assert_eq!(figs[0].series[0].points, vec![(16.0, Some(1.1))]);
        let md = pps_markdown(&r, &figs);
        assert!(
            md.contains(
                "| 16 | 1.100 | 1.100 | 2.200 | 0.110 | 1.00 | 0.50 | 0.50 | 10.00 | 10.00 |"
            ),
            "{md}"
        );
        // Cross-check column: delivered ÷ ESP opened for the IPsec
        // engines only; the unencrypted overlay's underlay ratio.
        assert!(md.contains("| nicflow-ipsec | 16 | 1.100 |"), "{md}");
        assert!(
            md.contains("7000000, 6000000; 7000000 / 6000010 (0)"),
            "{md}"
        );
        assert!(md.contains("--mode pps --engines nicflow-ipsec,nicflow-ipsec-transport,nicflow,strongswan --flows 16 --size 64"), "{md}");
    }
}
