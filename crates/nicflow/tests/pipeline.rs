//! Whole-pipeline behaviour through in-memory ports: rules steer, drop,
//! rewrite; the first packet of a flow is an upcall and the rest hit the
//! caches; rule changes are revalidated before they are acknowledged.

#[path = "common/membridge.rs"]
mod membridge;
use membridge::{bridge, bridge_cfg};
use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::MemPort;
use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
const MAC_C: [u8; 6] = [0x02, 0, 0, 0, 0, 0xc];
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

fn udp(src: [u8; 6], dst: [u8; 6], sport: u16, dport: u16) -> Vec<u8> {
    FrameBuilder::new(src, dst)
        .ipv4(IP_A, IP_B)
        .udp(sport, dport)
        .payload(b"hello nicflow")
        .build()
}

#[test]
fn steer_and_drop_with_one_upcall_per_flow() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_flows_str(
        "priority=100,udp,tp_dst=53,actions=drop\n\
         priority=10,in_port=p1,actions=output:p2\n",
        now,
    )
    .unwrap();
    for _ in 0..10 {
        h[0].inject(&udp(MAC_A, MAC_B, 1000, 80));
        h[0].inject(&udp(MAC_A, MAC_B, 1000, 53));
    }
    br.run_until_idle(now);
    let out = h[1].take_tx();
    assert_eq!(out.len(), 10);
    assert!(h[2].take_tx().is_empty());
    let s = br.dp_stats();
    assert_eq!(s.upcalls, 2, "one upcall per flow: {s:?}");
    assert_eq!(s.emc_hits + s.megaflow_hits, 18);
    assert_eq!(s.policy_drops, 10);
    // Counters reach the rules.
    let dump = br.dump_flows(now);
    let by_prio: Vec<(u16, u64)> = dump
        .iter()
        .map(|d| (d.spec.priority, d.n_packets))
        .collect();
    assert_eq!(by_prio, vec![(100, 10), (10, 10)]);
}

#[test]
fn normal_learns_and_floods() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_flow_str("actions=normal", now).unwrap();
    // A -> B: B unknown, flooded to p2 and p3.
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    assert_eq!(h[2].take_tx().len(), 1);
    // B -> A: A was learned on p1, unicast.
    h[1].inject(&udp(MAC_B, MAC_A, 2, 1));
    br.run_until_idle(now);
    assert_eq!(h[0].take_tx().len(), 1);
    assert!(h[2].take_tx().is_empty());
    // A -> B again: B now learned; the cached flood flow must have been
    // revalidated into a unicast one.
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    assert!(h[2].take_tx().is_empty(), "stale flood decision");
    // C broadcasts: everyone but C.
    h[2].inject(&udp(MAC_C, [0xff; 6], 3, 4));
    br.run_until_idle(now);
    assert_eq!(h[0].take_tx().len(), 1);
    assert_eq!(h[1].take_tx().len(), 1);
    assert!(h[2].take_tx().is_empty());
}

#[test]
fn deleting_a_rule_revalidates_before_returning() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str("priority=10,in_port=p1,actions=output:p2", now)
        .unwrap();
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    assert_eq!(br.n_dp_flows(), 1);
    assert_eq!(br.del_flows_str("in_port=p1").unwrap(), 1);
    // Revalidation either removed the flow or fixed it into a drop flow.
    assert!(
        br.dp_flows().all(|f| f.actions.is_empty()),
        "a datapath flow still forwards after its rule was deleted"
    );
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    assert!(h[1].take_tx().is_empty());
}

#[test]
fn rewrites_keep_checksums_valid() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str(
        "udp,in_port=p1,actions=mod_nw_src:198.18.9.9,mod_tp_dst:9999,mod_dl_src:02:00:00:00:00:99,dec_ttl,mod_nw_tos:32,output:p2",
        now,
    )
    .unwrap();
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    let out = h[1].take_tx();
    assert_eq!(out.len(), 1);
    let f = &out[0];
    assert!(all_checksums_valid(f));
    assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 0x99]);
    assert_eq!(&f[26..30], &[198, 18, 9, 9]);
    assert_eq!(f[22], 63, "ttl decremented");
    assert_eq!(f[15], 32);
    assert_eq!(u16::from_be_bytes([f[36], f[37]]), 9999);
}

#[test]
fn dec_ttl_drops_at_one() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str("ip,actions=dec_ttl,output:p2", now)
        .unwrap();
    let f = FrameBuilder::new(MAC_A, MAC_B)
        .ipv4(IP_A, IP_B)
        .ttl(1)
        .udp(1, 2)
        .build();
    h[0].inject(&f);
    br.run_until_idle(now);
    assert!(h[1].take_tx().is_empty());
    assert_eq!(br.dp_stats().drops(), vec![("ttl_exceeded", 1)]);
}

#[test]
fn vlan_push_pop() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flows_str(
        "in_port=p1,actions=mod_vlan_vid:100,output:p2\n\
         in_port=p2,dl_vlan=100,actions=strip_vlan,output:p1\n",
        now,
    )
    .unwrap();
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    let tagged = h[1].take_tx();
    assert_eq!(tagged.len(), 1);
    assert_eq!(&tagged[0][12..16], &[0x81, 0x00, 0x00, 100]);
    h[1].inject(&tagged[0]);
    br.run_until_idle(now);
    let back = h[0].take_tx();
    assert_eq!(back, vec![udp(MAC_A, MAC_B, 1, 2)]);
}

#[test]
fn malformed_frames_counted_and_dropped() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str("actions=output:p2", now).unwrap();
    let good = udp(MAC_A, MAC_B, 1, 2);
    h[0].inject(&good[..10]); // runt
    h[0].inject(&good[..20]); // truncated IPv4
    h[0].inject(&good);
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    let drops = br.dp_stats().drops();
    assert_eq!(drops.iter().map(|(_, n)| n).sum::<u64>(), 2, "{drops:?}");
}

#[test]
fn goto_table_and_resubmit() {
    let (mut br, h) = bridge(3);
    let now = Instant::now();
    br.add_flows_str(
        "table=0,in_port=p1,actions=set_field:7->reg0,goto_table:1\n\
         table=1,reg0=7,actions=resubmit(,2),output:p3\n\
         table=2,actions=output:p2\n",
        now,
    )
    .unwrap();
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    assert_eq!(h[2].take_tx().len(), 1);
}

#[test]
fn idle_aging_removes_datapath_flows() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str("actions=output:p2", now).unwrap();
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    assert_eq!(br.n_dp_flows(), 1);
    br.tick(now + Duration::from_secs(5));
    assert_eq!(br.n_dp_flows(), 1);
    br.tick(now + Duration::from_secs(11));
    assert_eq!(br.n_dp_flows(), 0);
}

#[test]
fn rule_hard_timeout_expires() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str("hard_timeout=5,actions=output:p2", now)
        .unwrap();
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 1);
    br.tick(now + Duration::from_secs(6));
    assert_eq!(br.ofproto().n_rules(), 0);
    h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    br.run_until_idle(now + Duration::from_secs(6));
    assert!(h[1].take_tx().is_empty());
}

#[test]
fn flow_limit_still_forwards() {
    let cfg = DatapathConfig {
        flow_limit: 2,
        ..Default::default()
    };
    let (mut br, h) = bridge_cfg(2, cfg);
    let now = Instant::now();
    // The higher-priority tp_src rule makes every lookup examine tp_src, so
    // each source port is its own megaflow.
    br.add_flow_str("priority=10,udp,actions=output:p2", now)
        .unwrap();
    br.add_flow_str("priority=50,udp,tp_src=1,actions=output:p2", now)
        .unwrap();
    for i in 0..5u16 {
        h[0].inject(&udp(MAC_A, MAC_B, i, 2));
    }
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 5);
    assert!(br.n_dp_flows() <= 2);
    assert!(br.dp_stats().flow_limit_hits > 0);
}

#[test]
fn upcall_budget_drops_excess_misses() {
    let cfg = DatapathConfig {
        upcall_budget: 4,
        ..Default::default()
    };
    let (mut br, h) = bridge_cfg(2, cfg);
    let now = Instant::now();
    br.add_flow_str("priority=10,udp,actions=output:p2", now)
        .unwrap();
    br.add_flow_str("priority=50,udp,tp_src=10000,actions=output:p2", now)
        .unwrap();
    for i in 0..10u16 {
        h[0].inject(&udp(MAC_A, MAC_B, i, 2));
    }
    br.run_until_idle(now);
    let s = br.dp_stats().clone();
    assert_eq!(s.upcalls, 4, "{s:?}");
    assert_eq!(
        h[1].take_tx().len() as u64 + s.upcall_budget_drops,
        10,
        "{s:?}"
    );
}

#[test]
fn controller_queue_is_counted() {
    let (mut br, h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str("actions=controller:64,output:p2", now)
        .unwrap();
    for _ in 0..3 {
        h[0].inject(&udp(MAC_A, MAC_B, 1, 2));
    }
    br.run_until_idle(now);
    assert_eq!(h[1].take_tx().len(), 3);
    assert_eq!(br.dp_stats().controller_packets, 3);
    let q = br.datapath_mut().take_controller_packets();
    assert_eq!(q.len(), 3);
    assert!(q[0].data.len() <= 64);
}

#[test]
fn bad_rule_changes_nothing() {
    let (mut br, _h) = bridge(2);
    let now = Instant::now();
    br.add_flow_str("actions=output:p2", now).unwrap();
    let err = br
        .add_flows_str("priority=5,actions=drop\ntp_dst=80,actions=drop\n", now)
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("line 2") && msg.contains("tp_dst=80"), "{msg}");
    assert_eq!(br.ofproto().n_rules(), 1, "all or nothing");
}

/// A stand-in for a tunnel port: frames arrive with tunnel metadata (as a
/// decapsulating port delivers them) and leave with whatever metadata the
/// datapath gave them (what an encapsulating port would use).
struct TunPort {
    rx: std::collections::VecDeque<(Vec<u8>, TunnelMeta)>,
    tx: Sent,
}

/// What the stand-in tunnel port transmitted: frame and metadata.
type Sent = std::sync::Arc<std::sync::Mutex<Vec<(Vec<u8>, Option<TunnelMeta>)>>>;

impl nicflow::port::Port for TunPort {
    fn name(&self) -> &str {
        "t"
    }
    fn recv_batch(
        &mut self,
        out: &mut Vec<nicflow_packet::PacketBuf>,
        max: usize,
        _pool: &mut Vec<nicflow_packet::PacketBuf>,
    ) -> std::io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some((f, t)) = self.rx.pop_front() else {
                break;
            };
            let mut b = nicflow_packet::PacketBuf::from_slice(&f);
            b.tun = Some(t);
            out.push(b);
            n += 1;
        }
        Ok(n)
    }
    fn send_batch(
        &mut self,
        pkts: &mut Vec<nicflow_packet::PacketBuf>,
        done: &mut Vec<nicflow_packet::PacketBuf>,
    ) -> std::io::Result<usize> {
        let n = pkts.len();
        let mut tx = self.tx.lock().unwrap();
        for p in pkts.drain(..) {
            tx.push((p.data().to_vec(), p.tun));
            done.push(p);
        }
        Ok(n)
    }
    fn stats(&self) -> nicflow::port::PortStats {
        Default::default()
    }
    fn rx_exhausted(&self) -> bool {
        self.rx.is_empty()
    }
}

use nicflow_packet::buf::{TunnelMeta, TUN_F_KEY};

#[test]
fn tunnel_metadata_is_matched_and_set() {
    let meta = |id| TunnelMeta {
        id,
        src: u32::from(Ipv4Addr::new(198, 18, 20, 1)),
        dst: u32::from(Ipv4Addr::new(198, 18, 20, 2)),
        flags: TUN_F_KEY,
        ..TunnelMeta::default()
    };
    let mut rx = std::collections::VecDeque::new();
    for _ in 0..5 {
        rx.push_back((udp(MAC_A, MAC_B, 1000, 80), meta(4242)));
        rx.push_back((udp(MAC_A, MAC_B, 1000, 80), meta(4343)));
    }
    let tx = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut br = Bridge::new("br0", DatapathConfig::default());
    br.add_port(Box::new(TunPort { rx, tx: tx.clone() }))
        .unwrap();
    let (p2, h2) = MemPort::new("p2");
    br.add_port(Box::new(p2)).unwrap();
    let now = Instant::now();
    br.add_flows_str(
        "priority=10,in_port=t,tun_id=4242,tun_src=198.18.20.1,actions=output:p2\n\
         priority=10,in_port=t,tun_id=4343,actions=drop\n\
         priority=10,in_port=p2,actions=set_field:5000->tun_id,output:t\n",
        now,
    )
    .unwrap();
    br.run_until_idle(now);
    // Only tenant 4242 reaches p2; same frames, two datapath flows.
    assert_eq!(h2.take_tx().len(), 5);
    assert_eq!(br.dp_stats().upcalls, 2);
    // The other way: the frame leaves for the tunnel with VNI 5000.
    h2.inject(&udp(MAC_B, MAC_A, 80, 1000));
    h2.inject(&udp(MAC_B, MAC_A, 80, 1000));
    br.run_until_idle(now);
    let out = tx.lock().unwrap().clone();
    assert_eq!(out.len(), 2);
    for (f, t) in out {
        assert_eq!(
            f,
            udp(MAC_B, MAC_A, 80, 1000),
            "the frame itself is unchanged"
        );
        assert_eq!(t.map(|t| t.id), Some(5000));
    }
    assert_eq!(br.dp_stats().upcalls, 3, "the second packet hit the cache");
}

/// Geneve options mapped to `tun_metadata0..7` are matched like any field,
/// and `set_field:...->tun_metadataN` marks the slot present for the
/// tunnel port (which sends it as an option: tests/overlay.rs, scapy).
#[test]
fn tun_metadata_is_matched_and_set() {
    let meta = |md0: Option<u32>| {
        let mut t = TunnelMeta {
            id: 4343,
            flags: TUN_F_KEY,
            ..TunnelMeta::default()
        };
        if let Some(v) = md0 {
            t.metadata[0] = v;
            t.md_present = 1;
        }
        t
    };
    let mut rx = std::collections::VecDeque::new();
    for _ in 0..3 {
        rx.push_back((udp(MAC_A, MAC_B, 1000, 80), meta(Some(0xabcd))));
        rx.push_back((udp(MAC_A, MAC_B, 1000, 80), meta(None)));
    }
    let tx = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut br = Bridge::new("br0", DatapathConfig::default());
    br.add_port(Box::new(TunPort { rx, tx: tx.clone() }))
        .unwrap();
    let (p2, h2) = MemPort::new("p2");
    br.add_port(Box::new(p2)).unwrap();
    let now = Instant::now();
    br.add_flows_str(
        "priority=20,in_port=t,tun_metadata0=0xabcd,actions=output:p2\n\
         priority=10,in_port=t,actions=drop\n\
         priority=10,in_port=p2,actions=set_field:0x5a5a->tun_metadata2,output:t\n",
        now,
    )
    .unwrap();
    br.run_until_idle(now);
    assert_eq!(h2.take_tx().len(), 3, "only the frames with the option");
    assert_eq!(br.dp_stats().upcalls, 2);
    h2.inject(&udp(MAC_B, MAC_A, 80, 1000));
    br.run_until_idle(now);
    let out = tx.lock().unwrap().clone();
    assert_eq!(out.len(), 1);
    let t = out[0].1.expect("tunnel metadata");
    assert_eq!((t.metadata[2], t.md_present), (0x5a5a, 1 << 2));
}
