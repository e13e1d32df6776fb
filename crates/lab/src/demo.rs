//! `nicflow demo`: real traffic through nicflow, then an offline pipeline.
//!
//! Part one ([`run_lab`], needs root) builds a two-host namespace lab whose
//! hosts talk through a nicflow switch daemon on veth pairs, runs ping and
//! iperf3 across it, and reports throughput, cache tiers and the datapath
//! flows the switch holds. Part two ([`run`]) is a three-port bridge fed
//! from capture files: it writes a rules file and per-port input captures (ARP, UDP and TCP flows,
//! a firewalled SSH port, a service address rewritten to a backend, and a
//! few malformed frames), runs them through a [`Bridge`] whose ports are
//! [`PcapPort`]s, and reports where every packet went: per-port counters, the
//! datapath flows the slow path created, cache hits, drops by reason, and
//! the OpenFlow rules with their counters. Output captures are left in the
//! directory for tshark.
//!
//! Part one ends with P4 mode ([`p4`]): the seed's P4 tutorial program as
//! the slow path of a second bridge whose ports are VFs in the two hosts,
//! IPv6 between them cached as datapath flows in the TC engine.

pub mod p4;

use anyhow::{Context, Result};
use nicflow_dataplane::bridge::Bridge;
use nicflow_dataplane::datapath::DatapathConfig;
use nicflow_packet::builder::FrameBuilder;
use nicflow_port::pcap::PcapPort;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use std::fmt::Write as _;
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

pub const FLOWS: &str = "\
# Firewall: no SSH into the hosts from the uplink.
table=0, priority=200, tcp, in_port=uplink, tp_dst=22, actions=drop
# Service address 198.18.0.100 is served by vm2: rewrite and forward.
table=0, priority=100, ip, nw_dst=198.18.0.100, actions=mod_nw_dst:198.18.0.2,mod_dl_dst:02:00:00:00:00:02,dec_ttl,goto_table:1
# Everything else: the learning switch.
table=0, priority=0, actions=goto_table:1
table=1, priority=0, actions=normal
";

const MAC_UP: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
const MAC_VM1: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const MAC_VM2: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const IP_UP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 254);
const IP_VM1: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_VM2: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const IP_SVC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 100);

fn write_pcap(path: &Path, frames: &[Vec<u8>]) -> Result<()> {
    let f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = PcapWriter::new(f).context("pcap header")?;
    for (i, fr) in frames.iter().enumerate() {
        let ts = Duration::from_micros(1_000_000 + i as u64 * 10);
        w.write_packet(&PcapPacket::new(ts, fr.len() as u32, fr))
            .context("pcap write")?;
    }
    Ok(())
}

/// The demo's traffic, per input port.
/// Frames to inject on one port.
type Frames = Vec<Vec<u8>>;

fn traffic(flows: u16, per_flow: u16) -> (Frames, Frames, Frames) {
    let mut up = Vec::new();
    let mut vm1 = Vec::new();
    let mut vm2 = Vec::new();
    // The VMs announce themselves (gratuitous ARP), so the switch learns them.
    vm1.push(
        FrameBuilder::new(MAC_VM1, [0xff; 6])
            .arp(1, MAC_VM1, IP_VM1, [0; 6], IP_VM1)
            .build(),
    );
    vm2.push(
        FrameBuilder::new(MAC_VM2, [0xff; 6])
            .arp(1, MAC_VM2, IP_VM2, [0; 6], IP_VM2)
            .build(),
    );
    // The uplink host asks for vm1 and gets an answer.
    up.push(
        FrameBuilder::new(MAC_UP, [0xff; 6])
            .arp(1, MAC_UP, IP_UP, [0; 6], IP_VM1)
            .build(),
    );
    vm1.push(
        FrameBuilder::new(MAC_VM1, MAC_UP)
            .arp(2, MAC_VM1, IP_VM1, MAC_UP, IP_UP)
            .build(),
    );
    for round in 0..per_flow {
        for f in 0..flows {
            let sport = 20000 + f;
            let payload = [round as u8; 18];
            // uplink -> vm1 (UDP), vm1 -> uplink replies.
            up.push(
                FrameBuilder::new(MAC_UP, MAC_VM1)
                    .ipv4(IP_UP, IP_VM1)
                    .udp(sport, 5000)
                    .payload(&payload)
                    .build(),
            );
            vm1.push(
                FrameBuilder::new(MAC_VM1, MAC_UP)
                    .ipv4(IP_VM1, IP_UP)
                    .udp(5000, sport)
                    .payload(&payload)
                    .build(),
            );
            // uplink -> service address (rewritten to vm2).
            if f % 4 == 0 {
                up.push(
                    FrameBuilder::new(MAC_UP, MAC_VM1)
                        .ipv4(IP_UP, IP_SVC)
                        .tcp(sport, 80, 0x10)
                        .payload(&payload)
                        .build(),
                );
            }
        }
        // SSH attempts from the uplink: firewalled.
        up.push(
            FrameBuilder::new(MAC_UP, MAC_VM2)
                .ipv4(IP_UP, IP_VM2)
                .tcp(40000 + round, 22, 0x02)
                .build(),
        );
    }
    // Malformed frames: a runt, a truncated IPv4 header, a bad IHL.
    let good = FrameBuilder::new(MAC_UP, MAC_VM1)
        .ipv4(IP_UP, IP_VM1)
        .udp(1, 2)
        .build();
    up.push(good[..10].to_vec());
    up.push(good[..24].to_vec());
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x43;
    up.push(bad_ihl);
    (up, vm1, vm2)
}

/// Run the demo in `dir`; returns the report text.
pub fn run(dir: &Path) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("flows.txt"), FLOWS)?;
    let (up, vm1, vm2) = traffic(64, 50);
    let total_in = up.len() + vm1.len() + vm2.len();
    let names = ["uplink", "vm1", "vm2"];
    for (name, frames) in names.iter().zip([&up, &vm1, &vm2]) {
        write_pcap(&dir.join(format!("{name}.in.pcap")), frames)?;
    }

    let mut br = Bridge::new("br0", DatapathConfig::default());
    for name in names {
        let port = PcapPort::open(
            name,
            Some(&dir.join(format!("{name}.in.pcap"))),
            Some(&dir.join(format!("{name}.out.pcap"))),
        )?;
        br.add_port(Box::new(port))?;
    }
    let now = Instant::now();
    br.add_flows_str(FLOWS, now).context("loading flows.txt")?;
    let t = Instant::now();
    let n = br.run_until_idle(now);
    let elapsed = t.elapsed();

    let mut r = String::new();
    writeln!(r, "bridge br0, ports uplink(1) vm1(2) vm2(3)")?;
    writeln!(
        r,
        "{n} frames received ({total_in} written to the input captures) in {:.1} ms",
        elapsed.as_secs_f64() * 1e3
    )?;
    writeln!(r, "\n-- ports --")?;
    for (name, no, s) in br.port_stats() {
        writeln!(
            r,
            "  {no} {name:7} rx {:6} pkts {:8} bytes   tx {:6} pkts {:8} bytes",
            s.rx_packets, s.rx_bytes, s.tx_packets, s.tx_bytes
        )?;
    }
    let s = br.dp_stats().clone();
    writeln!(r, "\n-- fast path --")?;
    let hits = s.emc_hits + s.megaflow_hits;
    writeln!(
        r,
        "  packets {}  emc hits {}  megaflow hits {}  upcalls {}  ({:.1}% handled without the slow path)",
        s.packets,
        s.emc_hits,
        s.megaflow_hits,
        s.upcalls,
        100.0 * hits as f64 / s.packets.max(1) as f64
    )?;
    writeln!(
        r,
        "  datapath flows {}  installed {}  revalidations {}  fixed {}",
        br.n_dp_flows(),
        s.flows_installed,
        s.revalidations,
        s.flows_fixed
    )?;
    writeln!(r, "  drops by reason:")?;
    for (reason, count) in s.drops() {
        writeln!(r, "    {reason:24} {count}")?;
    }
    let n = br.n_dp_flows();
    if n > 12 {
        writeln!(r, "\n-- datapath flows (the 12 busiest of {n}) --")?;
    } else {
        writeln!(r, "\n-- datapath flows ({n}) --")?;
    }
    let mut flows = br.dump_dp_flows(Instant::now());
    flows.sort_by_key(|f| std::cmp::Reverse(f.packets));
    for f in flows.iter().take(12) {
        writeln!(
            r,
            "  {}, packets:{}, bytes:{}, actions:{}",
            f.matching, f.packets, f.bytes, f.actions
        )?;
    }
    writeln!(r, "\n-- OpenFlow rules (dump-flows) --")?;
    for line in br.dump_flows_text(Instant::now()) {
        writeln!(r, "  {line}")?;
    }
    drop(br);
    writeln!(
        r,
        "\nOutput captures: {}/{{uplink,vm1,vm2}}.out.pcap",
        dir.display()
    )?;
    Ok(r)
}

/// The demo lab: two hosts, one switch with a firewall rule and a learning
/// switch behind it.
pub const LAB_TOPOLOGY: &str = r#"
name = "nfdemo"
[[host]]
name = "h1"
sysctl = { "net.ipv6.conf.all.accept_ra" = 0 }
[[host]]
name = "h2"
sysctl = { "net.ipv6.conf.all.accept_ra" = 0 }
[[switch]]
name = "sw1"
# Every default: ports of type auto (TC ports), offload auto (the TC
# engine), hosts at the kernel's default offloads (TSO, checksum offload).
[[switch.bridge]]
name = "br0"
flows = [
  "priority=200,tcp,tp_dst=22,actions=drop",
  "priority=0,actions=normal",
]
[[link]]
a = "h1:eth0"
b = "sw1:p1"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]
[[link]]
a = "h2:eth0"
b = "sw1:p2"
addresses = ["198.18.0.2/24", "2001:db8::2/64"]
"#;

/// Removes the demo lab however the demo ends.
struct LabGuard {
    name: String,
    opts: crate::lab::LabOptions,
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        if let Err(e) = crate::lab::down(&self.name, &self.opts) {
            eprintln!("demo: lab down failed: {e}");
        }
    }
}

fn lab_out(
    topo: &crate::lab::Topology,
    host: &str,
    argv: &[&str],
    opts: &crate::lab::LabOptions,
) -> Result<String> {
    let out = crate::lab::exec_output(Some(topo), host, argv, opts)?;
    if !out.status.success() {
        anyhow::bail!(
            "{host}: `{}` failed: {}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn iperf_rate(json: &str, udp: bool) -> Result<(f64, f64)> {
    let v: serde_json::Value = serde_json::from_str(json).context("iperf3 JSON")?;
    let end = &v["end"];
    if udp {
        let s = &end["sum"];
        let secs = s["seconds"].as_f64().unwrap_or(1.0).max(1e-9);
        let pkts = s["packets"].as_f64().unwrap_or(0.0);
        let lost = s["lost_packets"].as_f64().unwrap_or(0.0);
        Ok((
            (pkts - lost) / secs,
            s["lost_percent"].as_f64().unwrap_or(0.0),
        ))
    } else {
        let s = &end["sum_received"];
        Ok((s["bits_per_second"].as_f64().unwrap_or(0.0) / 1e9, 0.0))
    }
}

/// Part one: a namespace lab with real traffic through a nicflow daemon.
pub fn run_lab() -> Result<String> {
    use nicflow_api::client::request;
    use nicflow_api::proto::Request;
    let topo = crate::lab::Topology::parse(LAB_TOPOLOGY)?;
    let opts = crate::lab::LabOptions::from_env()?;
    // A previous demo killed hard may have left its lab behind.
    let _ = crate::lab::down(&topo.name, &opts);
    let up = crate::lab::up(&topo, &opts)?;
    let guard = LabGuard {
        name: topo.name.clone(),
        opts: opts.clone(),
    };
    let mut r = String::new();
    writeln!(r, "== nicflow demo, part 1: a lab with real traffic ==")?;
    write!(r, "{up}")?;
    let sock = crate::lab::switch_socket(&topo.name, "sw1", &opts);

    let ping4 = lab_out(
        &topo,
        "h1",
        &["ping", "-c", "3", "-i", "0.2", "198.18.0.2"],
        &opts,
    )?;
    let ping6 = lab_out(
        &topo,
        "h1",
        &["ping", "-6", "-c", "3", "-i", "0.2", "2001:db8::2"],
        &opts,
    )?;
    for (what, out) in [("IPv4", &ping4), ("IPv6", &ping6)] {
        let summary = out.lines().rev().take(2).collect::<Vec<_>>();
        writeln!(
            r,
            "ping {what}: {}",
            summary
                .iter()
                .rev()
                .cloned()
                .collect::<Vec<_>>()
                .join(" | ")
        )?;
    }
    lab_out(&topo, "h2", &["iperf3", "-s", "-D", "-1"], &opts)?;
    std::thread::sleep(Duration::from_millis(300));
    let tcp = lab_out(
        &topo,
        "h1",
        &["iperf3", "-c", "198.18.0.2", "-t", "3", "-J"],
        &opts,
    )?;
    let (gbps, _) = iperf_rate(&tcp, false)?;
    lab_out(&topo, "h2", &["iperf3", "-s", "-D", "-1"], &opts)?;
    std::thread::sleep(Duration::from_millis(300));
    let udp = lab_out(
        &topo,
        "h1",
        &[
            "iperf3",
            "-c",
            "198.18.0.2",
            "-u",
            "-b",
            "0",
            "-l",
            "18",
            "-t",
            "2",
            "-J",
        ],
        &opts,
    )?;
    let (pps, loss) = iperf_rate(&udp, true)?;
    writeln!(r, "iperf3 TCP, 1 stream, 3 s: {gbps:.2} Gbit/s")?;
    writeln!(
        r,
        "iperf3 UDP, 60-byte frames, unlimited rate, 2 s: {:.0} kpps received ({loss:.1}% lost on the way, receiver socket included)",
        pps / 1e3
    )?;
    let blocked = crate::lab::exec_output(
        Some(&topo),
        "h1",
        &[
            "timeout",
            "1",
            "bash",
            "-c",
            "echo > /dev/tcp/198.18.0.2/22",
        ],
        &opts,
    )?;
    writeln!(
        r,
        "TCP to port 22 (rule priority=200,tcp,tp_dst=22,actions=drop): {}",
        if blocked.status.success() {
            "CONNECTED (unexpected)"
        } else {
            "blocked"
        }
    )?;

    let stats = request(&sock, &Request::Stats)?;
    writeln!(
        r,
        "\n-- switch stats (nicflow stats) --\n{}",
        stats.text.trim_end()
    )?;
    let dp = request(
        &sock,
        &Request::DumpDpFlows {
            bridge: "br0".into(),
        },
    )?;
    let mut lines: Vec<&str> = dp.text.lines().collect();
    lines.sort_by_key(|l| {
        std::cmp::Reverse(
            l.split("packets:")
                .nth(1)
                .and_then(|t| t.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0),
        )
    });
    writeln!(
        r,
        "\n-- datapath flows (nicflow dump-dp-flows br0), busiest first --"
    )?;
    for l in lines.iter().take(8) {
        writeln!(r, "  {l}")?;
    }
    let in_kernel = |e: &str| lines.iter().filter(|l| l.contains(e)).count();
    let (in_tc, in_xdp) = (in_kernel("engine:tc"), in_kernel("engine:xdp"));
    let mut reasons: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split("not_offloaded:").nth(1))
        .map(|t| t.split(", actions:").next().unwrap_or(""))
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    writeln!(
        r,
        "  ({} flows: {in_tc} offloaded to the TC engine and {in_xdp} to the XDP engine (later packets forwarded in the kernel), {} in the userspace engine{})",
        lines.len(),
        lines.len() - in_tc - in_xdp,
        if reasons.is_empty() {
            String::new()
        } else {
            format!(", not offloaded because: {}", reasons.join(", "))
        }
    )?;
    offload_plans(&mut r, &sock, "the learning switch's flows")?;
    stateful_firewall(&mut r, &topo, &opts, &sock)?;
    offload_plans(&mut r, &sock, "the stateful firewall's flows")?;
    p4::section(&mut r, &topo, &opts, &sock)?;
    drop(guard);
    writeln!(r, "lab removed\n")?;
    Ok(r)
}

/// OVS's stateful firewall on the same lab: h1 may open connections to
/// h2, h2 may only answer. The connection tracker runs in the daemon; an
/// established connection then runs in the TC engine.
fn stateful_firewall(
    r: &mut String,
    topo: &crate::lab::Topology,
    opts: &crate::lab::LabOptions,
    sock: &Path,
) -> Result<()> {
    use nicflow_api::client::request;
    use nicflow_api::proto::Request;
    let flows = "table=0,priority=10,arp,actions=normal\n\
                 table=0,priority=10,ipv6,actions=normal\n\
                 table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)\n\
                 table=1,priority=1,actions=drop\n\
                 table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit),output:p2\n\
                 table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2\n\
                 table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1\n";
    let ok = |resp: nicflow_api::proto::Response| -> Result<nicflow_api::proto::Response> {
        if resp.ok {
            Ok(resp)
        } else {
            anyhow::bail!(resp.error.unwrap_or_default())
        }
    };
    ok(request(
        sock,
        &Request::DelFlows {
            bridge: "br0".into(),
            filter: None,
        },
    )?)?;
    ok(request(
        sock,
        &Request::AddFlows {
            bridge: "br0".into(),
            text: flows.into(),
        },
    )?)?;
    writeln!(
        r,
        "\n-- stateful firewall (OVS's ct tables: h1 may connect to h2, h2 only answers) --"
    )?;
    let before = request(sock, &Request::Stats)?.data[0]["engines"]["tc_packets"]
        .as_u64()
        .unwrap_or(0);
    lab_out(topo, "h2", &["iperf3", "-s", "-D", "-1"], opts)?;
    std::thread::sleep(Duration::from_millis(300));
    let tcp = lab_out(
        topo,
        "h1",
        &["iperf3", "-c", "198.18.0.2", "-t", "3", "-J"],
        opts,
    )?;
    let (gbps, _) = iperf_rate(&tcp, false)?;
    let after = request(sock, &Request::Stats)?.data[0]["engines"]["tc_packets"]
        .as_u64()
        .unwrap_or(0);
    writeln!(
        r,
        "iperf3 TCP h1 -> h2 through ct: {gbps:.2} Gbit/s ({} packets forwarded by the TC engine once established)",
        after.saturating_sub(before)
    )?;
    let back = crate::lab::exec_output(
        Some(topo),
        "h2",
        &["ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.0.1"],
        opts,
    )?;
    writeln!(
        r,
        "ping h2 -> h1 (a new connection from the answering side): {}",
        if back.status.success() {
            "CONNECTED (unexpected)"
        } else {
            "blocked"
        }
    )?;
    let ct = request(
        sock,
        &Request::DumpConntrack {
            bridge: "br0".into(),
            zone: None,
            verbose: false,
            stats: true,
        },
    )?;
    writeln!(r, "nicflow dump-conntrack br0 -s:")?;
    for l in ct.text.lines().take(4) {
        writeln!(r, "  {l}")?;
    }
    Ok(())
}

/// What a ConnectX-7 and an Agilio CX would hold of br0's flows now
/// (`nicflow offload-plan br0 --profile cx7|agilio`): the verdict lines
/// (at most 10) and the summary, the prediction marked as one.
fn offload_plans(r: &mut String, sock: &std::path::Path, what: &str) -> anyhow::Result<()> {
    use nicflow_api::client::request;
    use nicflow_api::proto::Request;
    for profile in ["cx7", "agilio"] {
        let plan = request(
            sock,
            &Request::OffloadPlan {
                bridge: "br0".into(),
                profile: profile.into(),
            },
        )?;
        writeln!(
            r,
            "\n-- {what} on a SmartNIC (nicflow offload-plan br0 --profile {profile}) --"
        )?;
        let mut verdicts = 0;
        for l in plan.text.lines() {
            let verdict = l.contains(" -> offload") || l.contains(" -> refused: ");
            if verdict {
                verdicts += 1;
                if verdicts > 10 {
                    continue;
                }
            }
            if l.starts_with("    ") && l.contains('[') {
                continue; // published figures: docs/offload-plan.md
            }
            writeln!(r, "  {l}")?;
        }
    }
    Ok(())
}
