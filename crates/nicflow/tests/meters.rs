//! Meters through the whole pipeline on in-memory ports: a rule's
//! `meter:N` limits what it forwards, by packets or bits, in the cached
//! path too; rules cannot name a meter that does not exist; deleting a
//! meter deletes its rules (as Open vSwitch does); counters and the
//! `ovs-ofctl` printing.

mod common;

use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::{MemHandle, MemPort};
use nicflow_packet::builder::FrameBuilder;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

fn bridge() -> (Bridge, Vec<MemHandle>) {
    let mut br = Bridge::new("br0", DatapathConfig::default());
    let mut hs = Vec::new();
    for i in 1..=2 {
        let (p, h) = MemPort::new(&format!("p{i}"));
        br.add_port(Box::new(p)).unwrap();
        hs.push(h);
    }
    (br, hs)
}

fn udp(len: usize, tos: u8) -> Vec<u8> {
    FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
        .tos(tos)
        .udp(1000, 2000)
        .payload(&vec![0u8; len])
        .build()
}

/// Offer `n` frames, one every `gap`, starting at `t0`; count what p2 got.
fn offer(
    br: &mut Bridge,
    h: &[MemHandle],
    frame: &[u8],
    n: u32,
    gap: Duration,
    t0: Instant,
) -> usize {
    let mut got = 0;
    for i in 0..n {
        h[0].inject(frame);
        br.run_until_idle(t0 + gap * i);
        got += h[1].take_tx().len();
    }
    got
}

#[test]
fn a_pktps_meter_limits_what_its_rule_forwards() {
    let (mut br, h) = bridge();
    let t0 = Instant::now();
    br.add_meter_str(
        "meter=1,pktps,burst,stats,bands=type=drop,rate=100,burst_size=10",
        false,
        t0,
    )
    .unwrap();
    br.add_flows_str("in_port=p1,actions=meter:1,output:p2\n", t0)
        .unwrap();
    // 1,000 packets/s for 2 s: 10 (burst) + 200 pass.
    let got = offer(&mut br, &h, &udp(64, 0), 2000, Duration::from_millis(1), t0);
    assert!((209..=212).contains(&got), "{got} passed");
    let st = br.meter_stats(Some(1), t0 + Duration::from_secs(2));
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].packets_in, 2000);
    assert_eq!(st[0].flow_count, 1);
    assert_eq!(st[0].bands[0].0, 2000 - got as u64);
    let text = st[0].format();
    assert!(
        text.starts_with("meter:1 flow_count:1 packet_in_count:2000 byte_in_count:"),
        "{text}"
    );
    assert!(
        text.contains(&format!("0: packet_count:{} byte_count:", 2000 - got)),
        "{text}"
    );
    // Not one of the kernel's: the flow says why it stays in userspace.
    let dp = br.dump_dp_flows(t0);
    assert!(dp.iter().any(|f| f.actions.contains("meter(1)")), "{dp:?}");
}

#[test]
fn a_kbps_meter_passes_its_rate_in_bits() {
    let (mut br, h) = bridge();
    let t0 = Instant::now();
    // 8,000 kbit/s; 1,000-byte frames (with headers) every 0.5 ms = 16 Mbit/s offered.
    br.add_meter_str("meter=5,kbps,bands=type=drop,rate=8000", false, t0)
        .unwrap();
    br.add_flows_str("in_port=p1,actions=meter:5,output:p2\n", t0)
        .unwrap();
    let frame = udp(1000 - 42, 0);
    assert_eq!(frame.len(), 1000);
    let got = offer(&mut br, &h, &frame, 4000, Duration::from_micros(500), t0);
    // 2 s at 8 Mbit/s = 2,000 frames of 8 kbit, plus a 1-s burst (1,000).
    assert!((2995..=3002).contains(&got), "{got} passed");
}

#[test]
fn dscp_remark_raises_the_drop_precedence_of_what_exceeds() {
    let (mut br, h) = bridge();
    let t0 = Instant::now();
    br.add_meter_str(
        "meter=2,pktps,burst,bands=type=dscp_remark,rate=10,burst_size=1,prec_level=1",
        false,
        t0,
    )
    .unwrap();
    br.add_flows_str("in_port=p1,actions=meter:2,output:p2\n", t0)
        .unwrap();
    // AF11 (DSCP 10, TOS 0x28): the first passes as is, the second is AF12.
    for want in [0x28u8, 0x30] {
        h[0].inject(&udp(64, 0x28));
        br.run_until_idle(t0);
        let out = h[1].take_tx();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][15], want, "TOS byte");
        assert!(nicflow_packet::builder::all_checksums_valid(&out[0]));
    }
}

#[test]
fn rules_need_their_meter_and_go_with_it() {
    let (mut br, _h) = bridge();
    let t0 = Instant::now();
    let e = br
        .add_flows_str("in_port=p1,actions=meter:9,output:p2\n", t0)
        .unwrap_err();
    assert!(e.to_string().contains("meter 9 does not exist"), "{e}");
    assert!(br
        .add_meter_str("meter=9,kbps,bands=type=drop,rate=1", true, t0)
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
    br.add_meter_str("meter=9,kbps,bands=type=drop,rate=1", false, t0)
        .unwrap();
    assert!(br
        .add_meter_str("meter=9,kbps,bands=type=drop,rate=2", false, t0)
        .unwrap_err()
        .to_string()
        .contains("already exists"));
    br.add_flows_str(
        "in_port=p1,actions=meter:9,output:p2\nin_port=p2,actions=output:p1\n",
        t0,
    )
    .unwrap();
    br.add_meter_str(
        "meter=9,kbps,burst,bands=type=drop,rate=2,burst_size=4",
        true,
        t0,
    )
    .unwrap();
    let d = br.dump_meters();
    assert_eq!(
        nicflow_ofctl::meter::format_meter_config(&d[0]),
        "meter=9 kbps burst bands=\ntype=drop rate=2 burst_size=4"
    );
    assert_eq!(br.del_meters(Some(9), t0), (1, 1));
    assert_eq!(
        br.dump_flows(t0).len(),
        1,
        "the meter's rule went, p2's stays"
    );
    assert!(br.dump_meters().is_empty());
}

/// The CLI verbs on a running daemon: `add-meter`, a rule using it,
/// `dump-meters` and `meter-stats` as `ovs-ofctl` prints them, ping through
/// a 1 packet/s meter losing what exceeds it, and meters kept in the
/// configuration file (before the rules naming them) across a restart.
#[test]
fn meter_verbs_on_the_daemon_persist_and_police_ping() {
    if !common::lab_possible() {
        return;
    }
    let mut lab = common::NsLab::new("nfmt", "m", &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h1", &["ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"]);
    lab.must("h2", &["ip", "addr", "add", "198.18.0.2/24", "dev", "eth0"]);
    lab.restart_daemon();
    for c in [
        &["add-br", "br0"][..],
        &["add-port", "br0", "p1"],
        &["add-port", "br0", "p2"],
        &[
            "add-meter",
            "br0",
            "meter=1,pktps,burst,stats,bands=type=drop,rate=1,burst_size=2",
        ],
        &["del-flows", "br0"],
        &["add-flow", "br0", "arp,actions=normal"],
        &[
            "add-flow",
            "br0",
            "in_port=p1,icmp,actions=meter:1,output:p2",
        ],
        &["add-flow", "br0", "in_port=p2,icmp,actions=output:p1"],
    ] {
        lab.cli(c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    }
    let e = lab
        .cli(&["add-flow", "br0", "in_port=p1,actions=meter:7,output:p2"])
        .unwrap_err();
    assert!(e.contains("meter 7 does not exist"), "{e}");
    let dump = lab.cli(&["dump-meters", "br0"]).unwrap();
    assert!(
        dump.contains("meter=1 pktps burst stats bands=\ntype=drop rate=1 burst_size=2"),
        "{dump}"
    );
    // 10 pings in 1 s through 1 packet/s with a burst of 2: about 3 pass.
    let out = lab
        .exec(
            "h1",
            &[
                "ping",
                "-n",
                "-c",
                "10",
                "-i",
                "0.1",
                "-W",
                "1",
                "198.18.0.2",
            ],
        )
        .unwrap_or_else(|e| e);
    let got = out
        .lines()
        .find_map(|l| {
            l.split(" received")
                .next()?
                .rsplit(", ")
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!((1..=5).contains(&got), "{got} of 10 answered:\n{out}");
    // After the first echo request the metered flow runs in the TC engine
    // (the defaults on veths), its meter in the kernel's map: the
    // counters are userspace's plus the kernel's.
    let dp = lab.cli(&["dump-dp-flows", "br0"]).unwrap();
    assert!(
        dp.lines()
            .any(|l| l.contains("meter(1)") && l.contains("engine:tc")),
        "metered flow not offloaded:\n{dp}"
    );
    let stats = lab.cli(&["meter-stats", "br0"]).unwrap();
    assert!(
        stats.starts_with("meter:1 flow_count:1 packet_in_count:10 "),
        "{stats}"
    );
    assert!(
        stats.contains(&format!("0: packet_count:{} ", 10 - got)),
        "{stats}"
    );
    // Restart: the meter comes back before the rule that names it.
    lab.stop_daemon();
    lab.restart_daemon();
    assert_eq!(lab.cli(&["dump-meters", "br0"]).unwrap(), dump);
    let flows = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(flows.contains("actions=meter:1,output:p2"), "{flows}");
    lab.cli(&["del-meters", "br0", "meter=1"]).unwrap();
    let flows = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(!flows.contains("meter:1"), "{flows}");
}
