//! The sampler of congestion-aware select groups (`selection_method=splb`).
//!
//! Every [`PERIOD`] (while some bridge has such a group) it measures each
//! bucket's path — the port the bucket's first output goes to — and
//! publishes per-bucket weights to the bridge, which hands them to the
//! userspace executor's per-group state and to the kernel engines'
//! `dp_select_w` map: packets are then sprayed by smooth weighted round
//! robin over those weights, so the least congested path takes most of
//! them. The measure of a path is its congestion at the transmit side:
//! the bytes its root qdisc holds (`RTM_GETQDISC` backlog), plus an MTU's
//! worth for every packet the qdisc or the device dropped on transmit
//! since the last sample (qdisc `drops`, the link's `tx_dropped` from one
//! `RTM_GETLINK` dump). Paths are interfaces by index, as the bridge's
//! ports hold them: an interface deleted and created again under the same
//! name is another path, never measured with the old one's counters. A path's weight is its bucket's weight × [`SCALE`],
//! halved for every [`HALF_COST`] bytes of that measure, never below 1 (a
//! congested path still sees a trickle, so its recovery is seen too).

use super::switch::Switch;
use nicflow_os::netlink::Rtnl;
use nicflow_os::qdisc::{root_queue_stats, QueueStats};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often paths are measured (a bounded rate: one qdisc dump and a few
/// sysfs reads per period, only while an splb group exists).
pub const PERIOD: Duration = Duration::from_millis(20);
/// An uncongested bucket's weight per unit of its configured weight.
pub const SCALE: u32 = 64;
/// Bytes of congestion that halve a path's weight.
pub const HALF_COST: u64 = 3000;
/// Bytes one dropped packet counts as.
const DROP_COST: u64 = 1500;

/// The weight of a bucket of configured weight `w` whose path measures
/// `cost` bytes of congestion.
pub fn weight(w: u16, cost: u64) -> u32 {
    let full = u64::from(w) * u64::from(SCALE);
    ((full * HALF_COST) / (HALF_COST + cost)).max(1) as u32
}

#[derive(Default)]
pub struct SplbSampler {
    next: Option<Instant>,
    /// Whether the last sample found an splb group (the loop wakes for
    /// the next one only then).
    active: bool,
    rtnl: Option<Rtnl>,
    rtnl_failed: bool,
    /// Per interface index: (qdisc drops, tx_dropped) at the last sample.
    prev: HashMap<u32, (u32, u64)>,
}

impl SplbSampler {
    /// Milliseconds until the next sample is due, for the loop's poll
    /// timeout (`None`: no splb group, nothing to wake for).
    pub fn wait_ms(&self, now: Instant) -> Option<u64> {
        let next = self.next?;
        self.active
            .then(|| next.saturating_duration_since(now).as_millis() as u64)
    }

    /// Measure and publish, if a period has passed.
    pub fn sample(&mut self, sw: &mut Switch, now: Instant) {
        if self.next.is_some_and(|n| now < n) {
            return;
        }
        self.next = Some(now + PERIOD);
        type Groups = Vec<(u32, Vec<nicflow_dataplane::bridge::SplbPath>)>;
        let groups: Vec<(String, Groups)> = sw
            .bridges_mut()
            .map(|b| (b.name.clone(), b.splb_paths()))
            .filter(|(_, g)| !g.is_empty())
            .collect();
        self.active = !groups.is_empty();
        if !self.active {
            self.prev.clear();
            return;
        }
        let (qdiscs, tx_dropped) = self.read_counters();
        let mut costs: HashMap<u32, u64> = HashMap::new();
        for (_, gs) in &groups {
            for (_, buckets) in gs {
                for ifindex in buckets.iter().filter_map(|b| b.1) {
                    if let std::collections::hash_map::Entry::Vacant(e) = costs.entry(ifindex) {
                        let q = qdiscs.get(&ifindex).copied().unwrap_or_default();
                        let td = tx_dropped.get(&ifindex).copied().unwrap_or(0);
                        e.insert(cost(&mut self.prev, ifindex, q, td));
                    }
                }
            }
        }
        // Interfaces no bucket goes to any more are forgotten (an index
        // can be given to a new interface later).
        self.prev.retain(|i, _| costs.contains_key(i));
        for br in sw.bridges_mut() {
            let Some((_, gs)) = groups.iter().find(|(n, _)| *n == br.name) else {
                continue;
            };
            for (group, buckets) in gs {
                let w: Vec<u32> = buckets
                    .iter()
                    .map(|(w, port)| {
                        let c = port.and_then(|p| costs.get(&p)).copied();
                        weight(*w, c.unwrap_or(0))
                    })
                    .collect();
                br.publish_splb(*group, &w);
            }
        }
    }

    /// Root qdisc counters and devices' `tx_dropped`, by ifindex (empty
    /// when they cannot be read: the paths then look uncongested).
    fn read_counters(&mut self) -> (HashMap<u32, QueueStats>, HashMap<u32, u64>) {
        if self.rtnl.is_none() && !self.rtnl_failed {
            match Rtnl::open_here() {
                Ok(r) => self.rtnl = Some(r),
                Err(e) => {
                    tracing::warn!("splb: no netlink socket, paths not measured: {e}");
                    self.rtnl_failed = true;
                }
            }
        }
        let Some(rt) = self.rtnl.as_mut() else {
            return (HashMap::new(), HashMap::new());
        };
        let qdiscs = root_queue_stats(rt).unwrap_or_else(|e| {
            tracing::debug!("splb: qdisc dump: {e}");
            HashMap::new()
        });
        let links = nicflow_os::link::list(rt).unwrap_or_else(|e| {
            tracing::debug!("splb: link dump: {e}");
            Vec::new()
        });
        let tx_dropped = links
            .iter()
            .filter_map(|l| Some((l.index, l.stats?.tx_dropped)))
            .collect();
        (qdiscs, tx_dropped)
    }
}

/// Interface `ifindex`'s congestion in bytes (see the module docs), from
/// its root qdisc `q` and its device's `tx_dropped`; `prev` keeps the drop
/// counters of the last sample.
fn cost(prev: &mut HashMap<u32, (u32, u64)>, ifindex: u32, q: QueueStats, tx_dropped: u64) -> u64 {
    let (qd, td) = prev
        .insert(ifindex, (q.drops, tx_dropped))
        .unwrap_or((q.drops, tx_dropped));
    // A counter that went down was reset (the qdisc replaced or gone): no
    // drops in this period, never a wrap-around's billions.
    let dropped = u64::from(q.drops.saturating_sub(qd)) + tx_dropped.saturating_sub(td);
    u64::from(q.backlog) + dropped * DROP_COST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_fall_with_congestion_and_never_reach_zero() {
        assert_eq!(weight(1, 0), SCALE);
        assert_eq!(weight(3, 0), 3 * SCALE);
        assert_eq!(weight(1, HALF_COST), SCALE / 2);
        assert_eq!(weight(1, 3 * HALF_COST), SCALE / 4);
        assert_eq!(weight(1, 1 << 40), 1);
        assert!(weight(1, 100) > weight(1, 5000));
    }

    #[test]
    fn drops_are_counted_per_interface_index() {
        let mut prev = HashMap::new();
        let q = |backlog, drops| QueueStats {
            backlog,
            drops,
            ..QueueStats::default()
        };
        // First sample: only the backlog counts.
        assert_eq!(cost(&mut prev, 7, q(500, 10), 3), 500);
        // Two more drops on 7.
        assert_eq!(cost(&mut prev, 7, q(0, 12), 3), 2 * DROP_COST);
        // Another interface with bigger counters is not compared with 7's.
        assert_eq!(cost(&mut prev, 9, q(0, 1000), 50), 0);
        // Counters that went down (a new qdisc) are no drops.
        assert_eq!(cost(&mut prev, 7, q(0, 1), 0), 0);
    }
}
