//! `nicflow sink`: the far end of a generated frame's path. Receives
//! frames on an interface and accounts for the generator's: per-flow
//! counts, loss, reordering, duplicates and one-way latency.
//!
//! Frames arrive through the switch's own receive ports — an
//! [`AfXdpPort`](nicflow_port::afxdp::AfXdpPort) (its XDP program redirects
//! queue 0 to the socket) or an
//! [`AfPacketPort`](nicflow_port::afpacket::AfPacketPort) (TPACKET_V3,
//! promiscuous) — in batches; the receive time is read once per batch.
//! [`SinkStats::account`] finds the [`payload`] header behind the L4
//! header of IPv4/IPv6 UDP, TCP and ICMP frames; anything else is counted
//! as foreign. Sequence numbers are per flow from 0: a frame below the
//! highest seen is reordered (RFC 4737) unless a 128-entry window says it
//! was already seen (duplicate); loss is expected minus distinct frames
//! received, where expected is the highest sequence number + 1, or, with
//! `--expect N --flows F`, the generator's round-robin share of `N`.

use super::latency::{Latency, LatencySummary};
use super::payload;
use super::{monotonic_ns, PortType};
use anyhow::Context;
use nicflow_packet::buf::PacketBuf;
use nicflow_port::afpacket::{AfPacketOptions, AfPacketPort};
use nicflow_port::afxdp::{AfXdpOptions, AfXdpPort};
use nicflow_port::Port;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Interface to receive on.
    #[arg(long)]
    pub iface: String,
    /// auto: AF_XDP, falling back to AF_PACKET (logged).
    #[arg(long, value_enum, default_value_t)]
    pub port_type: PortType,
    /// Stop after this many seconds (default: run until another condition
    /// or Ctrl-C).
    #[arg(long, value_parser = super::parse_nonneg)]
    pub duration: Option<f64>,
    /// Stop after this many milliseconds without frames, once one arrived.
    #[arg(long)]
    pub idle_exit: Option<u64>,
    /// Frames the generator sends in total (its --count): loss is counted
    /// against it, and the sink stops once that many distinct frames came.
    #[arg(long)]
    pub expect: Option<u64>,
    /// Flows the generator sends (its --flows): flows that never arrived
    /// count as lost too (with --expect).
    #[arg(long)]
    pub flows: Option<u32>,
    /// Create this file once the sink is receiving.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Include per-flow figures.
    #[arg(long)]
    pub per_flow: bool,
}

/// Source, destination, IP protocol, source port, destination port (ICMP:
/// echo identifier and sequence).
type Tuple = (IpAddr, IpAddr, u8, u16, u16);

/// One flow's accounting.
#[derive(Clone, Debug, Default)]
struct Flow {
    seen: bool,
    received: u64,
    /// Highest extended sequence number + 1.
    next: u64,
    /// Bit i: sequence `next - 1 - i` was received.
    window: u128,
    reordered: u64,
    duplicates: u64,
    first: Option<Tuple>,
}

/// What the sink saw: the state [`SinkStats::account`] updates per frame.
pub struct SinkStats {
    pub received: u64,
    pub ours: u64,
    pub foreign: u64,
    pub latency: Latency,
    flows: Vec<Flow>,
    first_ns: u64,
    last_ns: u64,
}

/// One flow in the `--per-flow` report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FlowReport {
    pub flow: u32,
    pub src: String,
    pub dst: String,
    pub proto: u8,
    pub received: u64,
    pub expected: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
}

/// The summary `--json` prints.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SinkReport {
    pub received: u64,
    pub ours: u64,
    pub foreign: u64,
    pub flows: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    pub seconds: f64,
    pub pps: f64,
    pub latency_ns: LatencySummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_flow: Option<Vec<FlowReport>>,
}

/// Where the L4 payload starts, and the flow's addresses, ports and
/// protocol, for IPv4/IPv6 UDP, TCP, ICMP and ICMPv6 (VLAN tags skipped).
fn locate(f: &[u8]) -> Option<(usize, Tuple)> {
    let mut off = 12;
    let mut et = u16::from_be_bytes([*f.get(off)?, *f.get(off + 1)?]);
    while et == 0x8100 || et == 0x88a8 {
        off += 4;
        et = u16::from_be_bytes([*f.get(off)?, *f.get(off + 1)?]);
    }
    let l3 = off + 2;
    let (proto, l4, src, dst) = match et {
        0x0800 => {
            let ip = f.get(l3..l3 + 20)?;
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if ip[0] >> 4 != 4 || ihl < 20 || u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff != 0 {
                return None; // not v4, or a non-first fragment
            }
            let s = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
            let d = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
            (ip[9], l3 + ihl, s, d)
        }
        0x86dd => {
            let ip = f.get(l3..l3 + 40)?;
            let s: [u8; 16] = ip[8..24].try_into().ok()?;
            let d: [u8; 16] = ip[24..40].try_into().ok()?;
            (
                ip[6],
                l3 + 40,
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
            )
        }
        _ => return None,
    };
    let h = f.get(l4..l4 + 8)?;
    let (hlen, sp, dp) = match proto {
        17 => (
            8,
            u16::from_be_bytes([h[0], h[1]]),
            u16::from_be_bytes([h[2], h[3]]),
        ),
        6 => {
            let doff = usize::from(*f.get(l4 + 12)? >> 4) * 4;
            (
                doff.max(20),
                u16::from_be_bytes([h[0], h[1]]),
                u16::from_be_bytes([h[2], h[3]]),
            )
        }
        1 | 58 => (
            8,
            u16::from_be_bytes([h[4], h[5]]),
            u16::from_be_bytes([h[6], h[7]]),
        ),
        _ => return None,
    };
    Some((l4 + hlen, (src, dst, proto, sp, dp)))
}

impl Default for SinkStats {
    fn default() -> Self {
        Self::new()
    }
}

impl SinkStats {
    pub fn new() -> SinkStats {
        SinkStats {
            received: 0,
            ours: 0,
            foreign: 0,
            latency: Latency::new(),
            flows: Vec::new(),
            first_ns: 0,
            last_ns: 0,
        }
    }

    /// Account one received frame, received at `rx_ns` (`CLOCK_MONOTONIC`).
    #[inline]
    pub fn account(&mut self, frame: &[u8], rx_ns: u64) {
        self.received += 1;
        let Some((off, tuple)) = locate(frame) else {
            self.foreign += 1;
            return;
        };
        let Some(st) = frame.get(off..).and_then(payload::read) else {
            self.foreign += 1;
            return;
        };
        self.ours += 1;
        if self.first_ns == 0 {
            self.first_ns = rx_ns;
        }
        self.last_ns = rx_ns;
        self.latency.record(st.ts_ns, rx_ns);
        let i = st.flow as usize;
        if i >= self.flows.len() {
            self.flows.resize(i + 1, Flow::default());
        }
        let fl = &mut self.flows[i];
        if !fl.seen {
            fl.seen = true;
            fl.first = Some(tuple);
        }
        let seq = payload::extend_seq(st.seq, fl.next.saturating_sub(1));
        if seq >= fl.next {
            let shift = seq - fl.next + 1;
            fl.window = if shift >= 128 { 0 } else { fl.window << shift };
            fl.window |= 1;
            fl.next = seq + 1;
            fl.received += 1;
        } else {
            let back = fl.next - 1 - seq;
            if back < 128 && fl.window & (1u128 << back) != 0 {
                fl.duplicates += 1;
            } else {
                if back < 128 {
                    fl.window |= 1u128 << back;
                }
                fl.reordered += 1;
                fl.received += 1;
            }
        }
    }

    /// Distinct frames of ours received.
    pub fn unique(&self) -> u64 {
        self.flows.iter().map(|f| f.received).sum()
    }

    /// The summary; `expect`/`flows` as the sink's options.
    pub fn report(&self, expect: Option<u64>, flows: Option<u32>, per_flow: bool) -> SinkReport {
        let nflows = flows.map(|f| f as usize).unwrap_or(0).max(self.flows.len());
        let mut lost = 0u64;
        let mut out = Vec::new();
        let empty = Flow::default();
        for i in 0..nflows {
            let fl = self.flows.get(i).unwrap_or(&empty);
            let mut expected = fl.next;
            if let (Some(n), Some(f)) = (expect, flows) {
                if (i as u64) < u64::from(f) {
                    expected = expected.max(super::gen::expected_per_flow(n, f.into(), i as u64));
                }
            }
            let l = expected.saturating_sub(fl.received);
            lost += l;
            if per_flow && (fl.seen || expected > 0) {
                let (src, dst, proto) = match fl.first {
                    Some((s, d, p, sp, dp)) => (format_ep(s, sp), format_ep(d, dp), p),
                    None => (String::new(), String::new(), 0),
                };
                out.push(FlowReport {
                    flow: i as u32,
                    src,
                    dst,
                    proto,
                    received: fl.received,
                    expected,
                    lost: l,
                    reordered: fl.reordered,
                    duplicates: fl.duplicates,
                });
            }
        }
        if let (Some(n), None) = (expect, flows) {
            lost = lost.max(n.saturating_sub(self.unique()));
        }
        let seconds = self.last_ns.saturating_sub(self.first_ns) as f64 / 1e9;
        SinkReport {
            received: self.received,
            ours: self.ours,
            foreign: self.foreign,
            flows: self.flows.iter().filter(|f| f.seen).count() as u64,
            lost,
            reordered: self.flows.iter().map(|f| f.reordered).sum(),
            duplicates: self.flows.iter().map(|f| f.duplicates).sum(),
            seconds,
            pps: if seconds > 0.0 {
                self.ours.saturating_sub(1) as f64 / seconds
            } else {
                0.0
            },
            latency_ns: self.latency.summary(),
            per_flow: per_flow.then_some(out),
        }
    }
}

fn format_ep(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

fn open_port(iface: &str, pt: PortType) -> anyhow::Result<Box<dyn Port>> {
    let afpacket = || -> anyhow::Result<Box<dyn Port>> {
        let opts = AfPacketOptions {
            vnet_hdr: false,
            disable_offloads: true,
            promisc: true,
            ..AfPacketOptions::default()
        };
        Ok(Box::new(
            AfPacketPort::open(iface, opts).with_context(|| format!("AF_PACKET on {iface}"))?,
        ))
    };
    match pt {
        PortType::Afpacket => afpacket(),
        PortType::Afxdp => Ok(Box::new(
            AfXdpPort::open(iface, AfXdpOptions::default())
                .with_context(|| format!("AF_XDP on {iface}"))?,
        )),
        PortType::Auto => match AfXdpPort::open(iface, AfXdpOptions::default()) {
            Ok(p) => Ok(Box::new(p)),
            Err(e) => {
                tracing::warn!("AF_XDP unavailable on {iface} ({e}); falling back to AF_PACKET");
                afpacket()
            }
        },
    }
}

/// Receive until a stop condition; returns the accounting.
pub fn run(args: &Args) -> anyhow::Result<SinkStats> {
    let mut port = open_port(&args.iface, args.port_type)?;
    let fd = port.rx_fd();
    if let Some(p) = &args.ready_file {
        std::fs::write(p, "ready\n").with_context(|| format!("writing {}", p.display()))?;
    }
    let deadline = args
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    let idle = args.idle_exit.map(Duration::from_millis);
    let mut stats = SinkStats::new();
    let mut out: Vec<PacketBuf> = Vec::with_capacity(64);
    let mut pool: Vec<PacketBuf> = Vec::with_capacity(256);
    let mut last_rx: Option<Instant> = None;
    loop {
        if super::stopped() {
            break;
        }
        let n = port
            .recv_batch(&mut out, 64, &mut pool)
            .with_context(|| format!("receiving on {}", args.iface))?;
        let now = Instant::now();
        if n > 0 {
            let rx_ns = monotonic_ns();
            for b in out.drain(..) {
                stats.account(b.data(), rx_ns);
                pool.push(b);
            }
            last_rx = Some(now);
            if let Some(e) = args.expect {
                if stats.unique() >= e {
                    break;
                }
            }
            continue;
        }
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if let (Some(idle), Some(last)) = (idle, last_rx) {
            if now.duration_since(last) >= idle {
                break;
            }
        }
        // Spin briefly after a frame (the next is likely close), then sleep
        // in poll: spinning longer would take the CPU from the generator
        // and the kernel's receive work on a small machine, and cost more
        // latency than the wakeup it saves.
        if last_rx.is_some_and(|l| now.duration_since(l) < Duration::from_micros(50)) {
            std::hint::spin_loop();
            continue;
        }
        if let Some(fd) = fd {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, 5) };
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(stats)
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    super::catch_stop_signals();
    let stats = run(args)?;
    let r = stats.report(args.expect, args.flows, args.per_flow);
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "received {} frames ({} ours, {} foreign) in {} flows over {:.3} s ({:.0} pps): lost {}, reordered {}, duplicates {}",
            r.received, r.ours, r.foreign, r.flows, r.seconds, r.pps, r.lost, r.reordered, r.duplicates
        );
        let l = r.latency_ns;
        println!(
            "one-way latency (ns, {} samples): min {} p50 {} p99 {} p99.9 {} max {}",
            l.count, l.min, l.p50, l.p99, l.p999, l.max
        );
        if let Some(pf) = &r.per_flow {
            for f in pf {
                println!(
                    "flow {:>6} {} -> {} proto {}: received {} expected {} lost {} reordered {} duplicates {}",
                    f.flow, f.src, f.dst, f.proto, f.received, f.expected, f.lost, f.reordered, f.duplicates
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::template::{FlowSpec, Proto, Template};
    use super::super::Mac;
    use super::*;

    fn frame(flow: u32, seq: u32, ts: u64) -> Vec<u8> {
        let spec = FlowSpec {
            src_mac: Mac([2, 0, 0, 0, 0, 1]),
            dst_mac: Mac([2, 0, 0, 0, 0, 2]),
            src_ip: "198.18.0.1".parse().unwrap(),
            dst_ip: "198.18.0.2".parse().unwrap(),
            src_port: 10000 + flow as u16,
            dst_port: 9,
            proto: Proto::Udp,
        };
        let t = Template::build(&spec, flow, 60).unwrap();
        let mut f = t.frame();
        t.patch(&mut f, seq, ts);
        f
    }

    #[test]
    fn loss_reorder_duplicates() {
        let mut s = SinkStats::new();
        // Flow 0: 0 1 3 2 2 5 (4 lost, 2 reordered, one duplicate 2).
        for seq in [0, 1, 3, 2, 2, 5] {
            s.account(&frame(0, seq, 100), 1100);
        }
        // Flow 1: 0 1 2.
        for seq in 0..3 {
            s.account(&frame(1, seq, 100), 1100);
        }
        s.account(&[0u8; 60], 1100); // foreign
        let r = s.report(None, None, true);
        assert_eq!((r.received, r.ours, r.foreign, r.flows), (10, 9, 1, 2));
        assert_eq!((r.lost, r.reordered, r.duplicates), (1, 1, 1));
        assert_eq!(r.latency_ns.p50, 1000);
        let pf = r.per_flow.unwrap();
        assert_eq!(pf[0].src, "198.18.0.1:10000");
        assert_eq!((pf[0].received, pf[0].expected, pf[0].lost), (5, 6, 1));

        // Expect 12 over 3 flows: 4 each; flow 2 never came.
        let r = s.report(Some(12), Some(3), true);
        // Flow 0: 6 expected (its highest seq says so), 5 came; flow 1: 4
        // expected, 3 came; flow 2: 4 expected, none came.
        assert_eq!(r.lost, 1 + 1 + 4);
        assert_eq!(r.per_flow.unwrap().len(), 3);
    }
}
