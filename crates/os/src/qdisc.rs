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

/// Every interface's root qdisc counters, by ifindex. Interfaces without a
/// queue (`noqueue`, a veth's default) report zeros or are absent. A root
/// qdisc's counters include its children's (classful qdiscs, `mq`), so
/// only roots are read.
pub fn root_queue_stats(rt: &mut Rtnl) -> Result<HashMap<u32, QueueStats>> {
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
        let mut s = QueueStats::default();
        for a in &m.attributes {
            if let TcAttribute::Stats2(v) = a {
                for st in v {
                    if let TcStats2::Queue(q) = st {
                        s = QueueStats {
                            backlog: q.backlog,
                            qlen: q.qlen,
                            drops: q.drops,
                        };
                    }
                }
            }
        }
        out.insert(m.header.index as u32, s);
    }
    Ok(out)
}
