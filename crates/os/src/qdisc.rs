//! Queueing-discipline statistics: what a port's root qdisc holds and has
//! dropped, read with one `RTM_GETQDISC` dump. The congestion-aware
//! (`splb`) select groups weigh their paths by it.

use super::netlink::Rtnl;
use super::Result;
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcStats2};
use netlink_packet_route::RouteNetlinkMessage;
use std::collections::HashMap;

/// A root qdisc's queue counters (`struct gnet_stats_queue`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Bytes queued now.
    pub backlog: u32,
    /// Packets queued now.
    pub qlen: u32,
    /// Packets dropped since the qdisc was created.
    pub drops: u32,
}

/// One interface's root qdisc: its kind (`noqueue`, `tbf`, `htb`, ...) and
/// queue counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RootQdisc {
    pub kind: String,
    pub stats: QueueStats,
}

/// Every interface's root qdisc, by ifindex, from one dump. A root qdisc's
/// counters include its children's (classful qdiscs, `mq`), so only roots
/// are read; clsact and ingress hang off `TC_H_INGRESS` and are not in the
/// transmit path.
pub fn root_qdiscs(rt: &mut Rtnl) -> Result<HashMap<u32, RootQdisc>> {
    let replies = rt.dump(
        "RTM_GETQDISC",
        "qdiscs",
        RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
    )?;
    let mut out = HashMap::new();
    for r in replies {
        let RouteNetlinkMessage::NewQueueDiscipline(m) = r else {
            continue;
        };
        if m.header.parent != TcHandle::ROOT || m.header.index <= 0 {
            continue;
        }
        let mut q = RootQdisc::default();
        for a in &m.attributes {
            match a {
                TcAttribute::Kind(k) => q.kind = k.clone(),
                TcAttribute::Stats2(v) => {
                    for st in v {
                        if let TcStats2::Queue(s) = st {
                            q.stats = QueueStats {
                                backlog: s.backlog,
                                qlen: s.qlen,
                                drops: s.drops,
                            };
                        }
                    }
                }
                _ => {}
            }
        }
        out.insert(m.header.index as u32, q);
    }
    Ok(out)
}

/// Every interface's root qdisc counters, by ifindex. Interfaces without a
/// queue (`noqueue`, a veth's default) report zeros or are absent.
pub fn root_queue_stats(rt: &mut Rtnl) -> Result<HashMap<u32, QueueStats>> {
    Ok(root_qdiscs(rt)?
        .into_iter()
        .map(|(i, q)| (i, q.stats))
        .collect())
}

/// The kind of `ifindex`'s root qdisc; None when the dump has none.
pub fn root_kind(rt: &mut Rtnl, ifindex: u32) -> Result<Option<String>> {
    Ok(root_qdiscs(rt)?.remove(&ifindex).map(|q| q.kind))
}
