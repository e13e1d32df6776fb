//! Offline pipeline through capture files, library and CLI.
//!
//! Invariant protected: frames read from a pcap go through the bridge
//! exactly as from a NIC, and what the bridge transmits lands, byte-exact
//! and with valid checksums, in an output capture that standard tools
//! (tshark) decode — both through `PcapPort` directly and through the
//! `nicflow pcap` command. Also: `nicflow check-flows` prints rules in a
//! canonical form that reads back to itself, and rejects a bad file with the
//! line number and the offending token.

use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::pcap::PcapPort;
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Where `in_port=p1,udp,tp_dst=5000` traffic is redirected.
const IP_NEW: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 7);

const FLOWS: &str = "\
# steer UDP 5000 from p1 to p2 with a new destination
priority=100,in_port=p1,udp,tp_dst=5000,actions=mod_nw_dst:198.18.7.7,output:p2
priority=90,tcp,actions=drop
priority=0,actions=normal
";

/// What one input frame is, and so where it must come out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Steered,
    Tcp,
    Normal,
}

/// 40 frames (more than one 32-frame receive batch): UDP to port 5000 from
/// several sources, TCP, and other traffic for `normal` (unicast to an
/// unknown MAC, broadcast ARP, ICMP).
fn input_frames() -> Vec<(Kind, Vec<u8>)> {
    let mut v = Vec::new();
    for i in 0..40u16 {
        let src = Ipv4Addr::new(198, 18, 1, (i % 7) as u8 + 1);
        let f = match i % 5 {
            0 | 3 => (
                Kind::Steered,
                FrameBuilder::new(MAC_A, MAC_B)
                    .ipv4(src, IP_B)
                    .udp(1000 + i, 5000)
                    .payload(format!("steered {i}").as_bytes())
                    .build(),
            ),
            1 => (
                Kind::Tcp,
                FrameBuilder::new(MAC_A, MAC_B)
                    .ipv4(src, IP_B)
                    .tcp(2000 + i, 80, 0x02)
                    .build(),
            ),
            2 => (
                Kind::Normal,
                FrameBuilder::new(MAC_A, MAC_B)
                    .ipv4(IP_A, IP_B)
                    .udp(3000 + i, 53)
                    .payload(b"query")
                    .build(),
            ),
            _ if i % 2 == 0 => (
                Kind::Normal,
                FrameBuilder::new(MAC_A, [0xff; 6])
                    .arp(1, MAC_A, IP_A, [0; 6], IP_B)
                    .build(),
            ),
            _ => (
                Kind::Normal,
                FrameBuilder::new(MAC_A, MAC_B)
                    .vlan(100)
                    .ipv4(IP_A, IP_B)
                    .icmp(8, 0)
                    .echo(1, i)
                    .build(),
            ),
        };
        v.push(f);
    }
    v
}

/// The frame a steered input must become: same bytes, new destination,
/// checksums recomputed from scratch by the builder.
fn steered_output(input: &[u8]) -> Vec<u8> {
    let l = nicflow_packet::parse(input).expect("input parses");
    let l3 = l.l3_offset as usize;
    let src = Ipv4Addr::new(
        input[l3 + 12],
        input[l3 + 13],
        input[l3 + 14],
        input[l3 + 15],
    );
    let l4 = l.l4_offset as usize;
    let sport = u16::from_be_bytes([input[l4], input[l4 + 1]]);
    let payload = &input[l4 + 8..];
    FrameBuilder::new(MAC_A, MAC_B)
        .ipv4(src, IP_NEW)
        .udp(sport, 5000)
        .payload(payload)
        .build()
}

fn write_pcap(path: &Path, frames: &[(Kind, Vec<u8>)]) {
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        snaplen: 65535,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(File::create(path).unwrap(), header).unwrap();
    for (i, (_, f)) in frames.iter().enumerate() {
        let ts = Duration::from_millis(1_700_000_000_000 + i as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .unwrap();
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(File::open(path).unwrap()).unwrap();
    assert_eq!(r.header().datalink, DataLink::ETHERNET);
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(
            p.orig_len as usize,
            p.data.len(),
            "frame truncated in capture"
        );
        out.push(p.data.into_owned());
    }
    out
}

/// What each output port must carry, in order. `normal` floods (the
/// destination MAC never sends), so every `Normal` frame goes to every port
/// but p1.
fn expected(frames: &[(Kind, Vec<u8>)], n_ports: usize) -> Vec<Vec<Vec<u8>>> {
    let mut out = vec![Vec::new(); n_ports];
    for (k, f) in frames {
        match k {
            Kind::Steered => out[1].push(steered_output(f)),
            Kind::Tcp => {}
            Kind::Normal => {
                for o in out.iter_mut().skip(1) {
                    o.push(f.clone());
                }
            }
        }
    }
    out
}

fn assert_same_frames(port: &str, got: &[Vec<u8>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len(), "{port}: frame count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(all_checksums_valid(g), "{port} frame {i}: bad checksum");
        assert_eq!(g, w, "{port} frame {i} differs");
    }
}

/// `tshark -r FILE [OPTS] -T fields -e F...`, one row of fields per frame,
/// or `None` when tshark is not installed.
fn tshark_fields(path: &Path, opts: &[&str], fields: &[&str]) -> Option<Vec<Vec<String>>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(path).args(opts).args(["-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("running tshark: {e}"),
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect(),
    )
}

/// tshark must see the rewritten destination on every UDP 5000 frame,
/// exactly as many such frames as were steered, and no bad IPv4 or UDP
/// checksum anywhere (an oracle independent of our own checksum code).
fn check_with_tshark(path: &Path, n_frames: usize, n_steered: usize) {
    let Some(rows) = tshark_fields(path, &[], &["ip.dst", "udp.dstport"]) else {
        println!("tshark not installed: skipping decode check");
        return;
    };
    assert_eq!(rows.len(), n_frames, "tshark rows: {rows:?}");
    let steered: Vec<_> = rows.iter().filter(|r| r[1] == "5000").collect();
    assert_eq!(steered.len(), n_steered, "tshark rows: {rows:?}");
    for r in steered {
        assert_eq!(r[0], IP_NEW.to_string(), "tshark rows: {rows:?}");
    }
    let status = tshark_fields(
        path,
        &[
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
        ],
        &["ip.checksum.status", "udp.checksum.status"],
    )
    .expect("tshark ran a moment ago");
    // 0 = bad, 1 = good, 2 = unverified; empty = no such header.
    let good = status.iter().flatten().filter(|s| *s == "1").count();
    assert!(
        status.iter().flatten().all(|s| s.is_empty() || s == "1"),
        "tshark checksum verdicts: {status:?}"
    );
    assert!(
        good >= 2 * n_steered,
        "tshark verified too few checksums: {status:?}"
    );
}

#[test]
fn pcap_ports_steer_rewrite_and_flood() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let outs: Vec<_> = (1..=3)
        .map(|i| dir.path().join(format!("o{i}.pcap")))
        .collect();
    let frames = input_frames();
    write_pcap(&input, &frames);

    let now = Instant::now();
    let mut br = Bridge::new("pcap", DatapathConfig::default());
    br.add_port(Box::new(
        PcapPort::open("p1", Some(&input), Some(&outs[0])).unwrap(),
    ))
    .unwrap();
    for (i, o) in outs.iter().enumerate().skip(1) {
        let name = format!("p{}", i + 1);
        br.add_port(Box::new(PcapPort::open(&name, None, Some(o)).unwrap()))
            .unwrap();
    }
    assert_eq!(br.add_flows_str(FLOWS, now).unwrap(), 3);
    assert_eq!(br.run_until_idle(now), frames.len());
    let s = br.dp_stats().clone();
    let stats = br.port_stats();
    drop(br); // flushes the output captures

    let n_steered = frames.iter().filter(|f| f.0 == Kind::Steered).count();
    let n_tcp = frames.iter().filter(|f| f.0 == Kind::Tcp).count();
    assert_eq!(s.policy_drops, n_tcp as u64, "{s:?}");
    assert!(s.emc_hits + s.megaflow_hits > 0, "{s:?}");
    assert_eq!(stats[0].2.rx_packets, frames.len() as u64);

    let want = expected(&frames, 3);
    for (i, o) in outs.iter().enumerate() {
        let got = read_pcap(o);
        assert_same_frames(&format!("p{}", i + 1), &got, &want[i]);
        assert_eq!(stats[i].2.tx_packets, got.len() as u64);
    }
    assert!(
        read_pcap(&outs[1])
            .iter()
            .filter(|f| f.len() >= 34)
            .any(|f| f[30..34] == IP_NEW.octets()),
        "no rewritten frame on p2"
    );
    check_with_tshark(&outs[1], want[1].len(), n_steered);
    dir.close().unwrap();
}

fn nicflow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nicflow"))
}

#[test]
fn cli_pcap_runs_the_same_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let frames = input_frames();
    write_pcap(&p("in.pcap"), &frames);
    std::fs::write(p("flows.txt"), FLOWS).unwrap();
    let out = nicflow()
        .arg("pcap")
        .arg("--flows")
        .arg(p("flows.txt"))
        .arg("--port")
        .arg(format!(
            "p1={}:{}",
            p("in.pcap").display(),
            p("o1.pcap").display()
        ))
        .arg("--port")
        .arg(format!("p2=:{}", p("o2.pcap").display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains(&format!("processed {} frames", frames.len())),
        "{stdout}"
    );
    let n_tcp = frames.iter().filter(|f| f.0 == Kind::Tcp).count();
    assert!(
        stdout.contains(&format!("drop policy: {n_tcp}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("actions:set(ipv4(dst=198.18.7.7)),2"),
        "{stdout}"
    );

    let want = expected(&frames, 2);
    assert_same_frames("o1", &read_pcap(&p("o1.pcap")), &want[0]);
    assert_same_frames("o2", &read_pcap(&p("o2.pcap")), &want[1]);
    let n_steered = frames.iter().filter(|f| f.0 == Kind::Steered).count();
    check_with_tshark(&p("o2.pcap"), want[1].len(), n_steered);

    // --no-cache gives the same captures.
    let out = nicflow()
        .arg("pcap")
        .arg("--no-cache")
        .arg("--flows")
        .arg(p("flows.txt"))
        .arg("--port")
        .arg(format!(
            "p1={}:{}",
            p("in.pcap").display(),
            p("n1.pcap").display()
        ))
        .arg("--port")
        .arg(format!("p2=:{}", p("n2.pcap").display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(read_pcap(&p("n1.pcap")), read_pcap(&p("o1.pcap")));
    assert_eq!(read_pcap(&p("n2.pcap")), read_pcap(&p("o2.pcap")));
    dir.close().unwrap();
}

#[test]
fn cli_check_flows_prints_canonical_rules_that_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.txt");
    std::fs::write(
        &good,
        "# a comment, then a blank line\n\
         \n\
         tp_dst=80,tcp,priority=100,in_port=eth0 actions=output:eth1\n\
         table=1,priority=5,ip,nw_src=198.18.0.0/15,actions=dec_ttl,mod_nw_tos:32,goto_table:2\n\
         arp,arp_op=1,actions=NORMAL\n\
         dl_vlan=10,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,actions=strip_vlan,flood\n\
         udp6,ipv6_dst=2001:db8::/32,tp_src=0x1000/0xf000,actions=set_field:5->reg0,resubmit(,3),controller:64\n\
         cookie=0x5,idle_timeout=10,tcp,tcp_flags=+syn-ack,actions=drop\n",
    )
    .unwrap();
    let run = |path: &Path| nicflow().arg("check-flows").arg(path).output().unwrap();
    let out = run(&good);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let canon = String::from_utf8(out.stdout).unwrap();
    assert_eq!(canon.lines().count(), 6, "{canon}");
    assert!(
        canon
            .lines()
            .next()
            .unwrap()
            .starts_with("priority=100,tcp,in_port=eth0,tp_dst=80 actions=output:eth1"),
        "{canon}"
    );
    // Canonical output is a fixed point: it parses, and prints as itself.
    let ports = nicflow_ofctl::AutoPorts::new();
    for line in canon.lines() {
        let spec = nicflow_ofctl::parse_flow(line, &ports)
            .unwrap_or_else(|e| panic!("canonical `{line}` does not parse: {e}"));
        assert_eq!(nicflow_ofctl::format_flow(&spec, &ports), line);
    }
    let again = dir.path().join("again.txt");
    std::fs::write(&again, &canon).unwrap();
    let out = run(&again);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), canon);

    // A bad line: exit status 1, the line number and the token on stderr,
    // nothing printed for the good lines before it.
    for (text, line, token) in [
        (
            "priority=1,actions=drop\n# comment\n\ntp_dst=80,actions=drop\n",
            4,
            "tp_dst=80",
        ),
        (
            "actions=output:1\nactions=output:2,frobnicate\n",
            2,
            "frobnicate",
        ),
    ] {
        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, text).unwrap();
        let out = run(&bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(stderr.contains(&format!("line {line}")), "{stderr}");
        assert!(stderr.contains(&format!("`{token}`")), "{stderr}");
        assert!(stderr.contains("bad.txt"), "{stderr}");
    }
    dir.close().unwrap();
}
