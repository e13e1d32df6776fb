//! `nicflow gen`: put test frames on an interface as fast as the kernel
//! takes them, or at a fixed rate.
//!
//! The run is planned here — flows from the command line
//! ([`template::build_flows`]), one template per flow, flows split over the
//! transmit threads — and each thread drives one transmit engine: AF_XDP
//! ([`super::xdp_tx`], one socket per interface queue) or, as a fallback,
//! an AF_PACKET transmit ring ([`super::packet_tx`]). Frames carry the
//! [`super::payload`] header that `nicflow sink` reads on the far side.

use super::payload::MAX_FLOWS;
use super::plan::{Plan, ThreadOut};
use super::template::{self, build_flows, FlowSpec, Order, Proto, Template, Vary};
use super::{packet_tx::PacketTx, xdp_tx::XdpTx, Mac, PortType, TrafficError};
use anyhow::Context;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Default `--duration` when neither it nor `--count` is given.
const DEFAULT_SECS: f64 = 10.0;
/// Where frames go when `--dst-mac` is absent and the kernel knows no
/// neighbour for `--dst-ip`: locally administered unicast, so no host stack
/// takes them as broadcast and no switch floods them as broadcast.
pub const FALLBACK_DST_MAC: Mac = Mac([0x02, 0, 0, 0, 0, 0x02]);

fn parse_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (64..=9000).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{s}`: frame size with FCS must be a whole number from 64 to 9000"
        )),
    }
}

fn parse_flows(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (1..=MAX_FLOWS).contains(&n) => Ok(n),
        _ => Err(format!("`{s}`: flows must be from 1 to {MAX_FLOWS}")),
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Interface to send on.
    #[arg(long)]
    pub iface: String,
    /// auto: AF_XDP, falling back to an AF_PACKET tx ring (logged).
    #[arg(long, value_enum, default_value_t)]
    pub port_type: PortType,
    #[arg(long, value_enum, default_value_t)]
    pub proto: Proto,
    /// IPv6 (default addresses 2001:db8::1 -> 2001:db8::2).
    #[arg(long)]
    pub ipv6: bool,
    /// Ethernet frame size including the 4-byte FCS (RFC 2544): 64..9000;
    /// the frame written is 4 bytes shorter.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub size: usize,
    /// Default: the interface's own address.
    #[arg(long)]
    pub src_mac: Option<Mac>,
    /// Default: the kernel's neighbour entry for --dst-ip on the interface,
    /// else 02:00:00:00:00:02.
    #[arg(long)]
    pub dst_mac: Option<Mac>,
    /// Default 198.18.0.1 (2001:db8::1 with --ipv6).
    #[arg(long)]
    pub src_ip: Option<IpAddr>,
    /// Default 198.18.0.2 (2001:db8::2 with --ipv6).
    #[arg(long)]
    pub dst_ip: Option<IpAddr>,
    /// UDP/TCP source port; ICMP echo identifier.
    #[arg(long, default_value_t = 10000)]
    pub src_port: u16,
    /// UDP/TCP destination port; ICMP echo sequence number.
    #[arg(long, default_value_t = 9)]
    pub dst_port: u16,
    /// Distinct flows, sent round robin.
    #[arg(long, default_value = "1", value_parser = parse_flows)]
    pub flows: u32,
    /// The field that differs between flows.
    #[arg(long, value_enum, default_value_t)]
    pub vary: Vary,
    /// seq: base, base+1, ...; random: distinct random values above the base.
    #[arg(long, value_enum, default_value_t)]
    pub order: Order,
    /// Seed for --order random.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Packets per second in total; 0 or absent: as fast as possible.
    #[arg(long, default_value = "0", value_parser = super::parse_nonneg)]
    pub rate: f64,
    /// Seconds to send (default 10 unless --count is given).
    #[arg(long, conflicts_with = "count", value_parser = super::parse_nonneg)]
    pub duration: Option<f64>,
    /// Packets to send in total.
    #[arg(long)]
    pub count: Option<u64>,
    /// Transmit threads (AF_XDP: at most one per interface queue).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Most frames per batch (ring write and kick).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Print one JSON object with the totals on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The totals of a run, as `--json` prints them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GenReport {
    pub sent: u64,
    pub seconds: f64,
    pub pps: f64,
    /// Frame bits (FCS included, preamble and gap not) per second / 1e9.
    pub gbps: f64,
    pub errors: u64,
    pub engine: String,
    pub flows: u64,
    pub size: u32,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    super::catch_stop_signals();
    let report = run(args)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "sent {} frames of {} bytes in {:.3} s: {:.0} pps, {:.3} Gbit/s ({} flows, {}, {} errors; cpu user {:.2} s sys {:.2} s)",
            report.sent,
            report.size,
            report.seconds,
            report.pps,
            report.gbps,
            report.flows,
            report.engine,
            report.errors,
            report.cpu_user_s,
            report.cpu_sys_s
        );
    }
    Ok(())
}

/// The first flow's addresses from the arguments and the interface.
pub fn base_flow(args: &Args) -> Result<FlowSpec, TrafficError> {
    let v6 = args.ipv6
        || args.src_ip.is_some_and(|a| a.is_ipv6())
        || args.dst_ip.is_some_and(|a| a.is_ipv6());
    let def = |v4: &str, v6a: &str| -> IpAddr {
        let lit = if v6 { v6a } else { v4 };
        lit.parse().expect("valid literal")
    };
    let src_ip = args
        .src_ip
        .unwrap_or_else(|| def("198.18.0.1", "2001:db8::1"));
    let dst_ip = args
        .dst_ip
        .unwrap_or_else(|| def("198.18.0.2", "2001:db8::2"));
    for (what, ip) in [("--src-ip", src_ip), ("--dst-ip", dst_ip)] {
        if ip.is_ipv6() != v6 {
            return Err(TrafficError::bad(
                what,
                ip,
                if v6 {
                    "an IPv4 address in an IPv6 run (--ipv6 or another IPv6 address given)"
                } else {
                    "address families of --src-ip and --dst-ip differ"
                },
            ));
        }
    }
    let src_mac = match args.src_mac {
        Some(m) => m,
        None => super::sysfs(&args.iface, "address")?
            .parse()
            .map_err(|e: String| TrafficError::bad("interface", &args.iface, e))?,
    };
    let dst_mac = match args.dst_mac {
        Some(m) => m,
        None => match neighbour(&args.iface, dst_ip) {
            Some(m) => {
                tracing::info!(%dst_ip, mac = %m, "destination MAC from the neighbour table");
                m
            }
            None => {
                tracing::warn!(
                    %dst_ip,
                    "no --dst-mac and no neighbour entry for {dst_ip} on {}: sending to {FALLBACK_DST_MAC}",
                    args.iface
                );
                FALLBACK_DST_MAC
            }
        },
    };
    Ok(FlowSpec {
        src_mac,
        dst_mac,
        src_ip,
        dst_ip,
        src_port: args.src_port,
        dst_port: args.dst_port,
        proto: args.proto,
    })
}

/// The kernel's resolved neighbour entry for `ip` on `iface` (this
/// namespace): `/proc/net/arp` for IPv4, the neighbour table over netlink
/// (`RTM_GETNEIGH`, [`nicflow_os::neigh`]) for IPv6.
fn neighbour(iface: &str, ip: IpAddr) -> Option<Mac> {
    match ip {
        IpAddr::V4(a) => {
            let arp = std::fs::read_to_string("/proc/net/arp").ok()?;
            arp.lines().skip(1).find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 6 && f[0] == a.to_string() && f[5] == iface && f[2] == "0x2")
                    .then(|| f[3].parse().ok())
                    .flatten()
            })
        }
        IpAddr::V6(_) => {
            let mut rt = nicflow_os::netlink::Rtnl::open(None).ok()?;
            let lladdr = nicflow_os::neigh::lookup(&mut rt, iface, ip).ok()??;
            Some(Mac(lladdr.try_into().ok()?))
        }
    }
}

/// Frames flow `i` of `flows` sends when `total` are sent round robin.
pub fn expected_per_flow(total: u64, flows: u64, i: u64) -> u64 {
    total / flows + u64::from(i < total % flows)
}

/// Plan and run the generator; returns the totals.
pub fn run(args: &Args) -> anyhow::Result<GenReport> {
    let base = base_flow(args)?;
    let frame_len = args.size - 4;
    let mtu: usize = super::sysfs(&args.iface, "mtu")?.parse().unwrap_or(1500);
    if frame_len > mtu + 14 {
        return Err(TrafficError::bad(
            "--size",
            args.size,
            format!(
                "frame longer than the MTU {mtu} of {} allows ({} bytes with FCS)",
                args.iface,
                mtu + 18
            ),
        )
        .into());
    }
    let specs = build_flows(&base, args.flows, args.vary, args.order, args.seed)?;
    for s in [specs.first(), specs.last()].into_iter().flatten() {
        for ip in [s.src_ip, s.dst_ip] {
            if !template::is_lab_address(ip) {
                tracing::warn!(%ip, "address outside the lab prefixes 198.18.0.0/15 and 2001:db8::/32");
            }
        }
    }
    let templates: Vec<Template> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| Template::build(s, i as u32, frame_len))
        .collect::<Result<_, _>>()?;

    // Engine and thread count.
    let mut engine = args.port_type;
    if engine == PortType::Auto && frame_len > 4096 {
        tracing::info!(
            "frames above 4096 bytes: using the AF_PACKET tx ring (AF_XDP needs one UMEM frame per packet here)"
        );
        engine = PortType::Afpacket;
    }
    let mut threads = args.threads.max(1).min(args.flows as usize);
    if engine != PortType::Afpacket {
        let q = super::tx_queues(&args.iface);
        if threads > q {
            tracing::warn!(
                queues = q,
                "AF_XDP: one socket per queue; {} has {q} tx queue(s), using {q} thread(s)",
                args.iface
            );
            threads = q;
        }
    }
    if threads < args.threads {
        tracing::info!(threads, "transmit threads reduced");
    }

    // Open every socket first, so all threads start together and a failure
    // (or the fallback) is decided before anything is sent.
    enum Eng {
        Xdp(XdpTx),
        Packet(PacketTx),
    }
    let mut engines = Vec::with_capacity(threads);
    for t in 0..threads {
        let e = match engine {
            PortType::Afpacket => Eng::Packet(PacketTx::open(&args.iface, frame_len)?),
            PortType::Afxdp => Eng::Xdp(XdpTx::open(&args.iface, t as u32, frame_len)?),
            PortType::Auto => match XdpTx::open(&args.iface, t as u32, frame_len) {
                Ok(x) => Eng::Xdp(x),
                Err(e) => {
                    if t > 0 {
                        return Err(e.into());
                    }
                    tracing::warn!("AF_XDP unavailable ({e}); falling back to AF_PACKET tx ring");
                    engine = PortType::Afpacket;
                    Eng::Packet(PacketTx::open(&args.iface, frame_len)?)
                }
            },
        };
        engines.push(e);
    }

    // Flow i goes to thread i % threads; each thread's count is what its
    // flows get under round robin of the whole count.
    let per_thread: Vec<Vec<Template>> = (0..threads)
        .map(|t| templates.iter().skip(t).step_by(threads).cloned().collect())
        .collect();
    let flows = u64::from(args.flows);
    let targets: Vec<Option<u64>> = (0..threads)
        .map(|t| {
            args.count.map(|n| {
                (t as u64..flows)
                    .step_by(threads)
                    .map(|i| expected_per_flow(n, flows, i))
                    .sum()
            })
        })
        .collect();
    let duration = match (args.duration, args.count) {
        (Some(d), _) => Duration::from_secs_f64(d),
        (None, Some(_)) => Duration::from_secs(365 * 24 * 3600),
        (None, None) => Duration::from_secs_f64(DEFAULT_SECS),
    };
    // Each thread paces its own flows at the per-flow rate, so flows stay
    // in step even when threads hold different numbers of flows.
    let per_flow_rate = args.rate / flows as f64;
    let stop = AtomicBool::new(false);
    let (u0, s0) = super::cpu_times();
    let outs: Vec<anyhow::Result<ThreadOut>> = std::thread::scope(|sc| {
        let handles: Vec<_> = engines
            .into_iter()
            .enumerate()
            .map(|(t, e)| {
                let tmpl = &per_thread[t];
                let target = targets[t];
                let stop = &stop;
                let batch = args.batch;
                sc.spawn(move || -> anyhow::Result<ThreadOut> {
                    let rate = per_flow_rate * tmpl.len() as f64;
                    let mut plan = Plan::new(tmpl, frame_len, target, duration, rate, batch, stop);
                    let r = match e {
                        Eng::Xdp(mut x) => x.run(&mut plan),
                        Eng::Packet(mut p) => p.run(&mut plan),
                    };
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    Ok(r?)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("transmit thread panicked")))
            })
            .collect()
    });
    let (u1, s1) = super::cpu_times();
    let mut sent = 0;
    let mut errors = 0;
    let mut seconds: f64 = 0.0;
    let mut eng = String::new();
    for o in outs {
        let o = o.context("transmit thread")?;
        sent += o.sent;
        errors += o.errors;
        seconds = seconds.max(o.seconds);
        eng = o.engine;
    }
    let pps = if seconds > 0.0 {
        sent as f64 / seconds
    } else {
        0.0
    };
    Ok(GenReport {
        sent,
        seconds,
        pps,
        gbps: pps * args.size as f64 * 8.0 / 1e9,
        errors,
        engine: eng,
        flows,
        size: args.size as u32,
        cpu_user_s: u1 - u0,
        cpu_sys_s: s1 - s0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_split() {
        assert_eq!(expected_per_flow(10, 4, 0), 3);
        assert_eq!(expected_per_flow(10, 4, 1), 3);
        assert_eq!(expected_per_flow(10, 4, 2), 2);
        assert_eq!(expected_per_flow(10, 4, 3), 2);
        assert_eq!(
            (0..7).map(|i| expected_per_flow(100, 7, i)).sum::<u64>(),
            100
        );
    }

    #[test]
    fn size_parser_names_the_token() {
        assert!(parse_size("63").unwrap_err().contains("`63`"));
        assert!(parse_size("9001").unwrap_err().contains("`9001`"));
        assert_eq!(parse_size("9000"), Ok(9000));
        assert!(parse_flows("0").is_err());
    }
}
