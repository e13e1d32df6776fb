//! Tracker-wide counters (what `dpctl/ct-stats-show` and the coverage
//! counters of lib/conntrack.c report, with one counter per invalid reason).

use crate::error::InvalidReason;
use crate::tuple::{ConnKey, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};

/// A snapshot of the tracker's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtStats {
    /// Connections in the table (including expired ones not yet swept).
    pub connections: usize,
    /// Live connections per protocol.
    pub tcp: usize,
    pub udp: usize,
    pub sctp: usize,
    pub icmp: usize,
    pub icmpv6: usize,
    pub other: usize,
    /// Invalid packets, indexed by [`InvalidReason::index`].
    pub invalid: [u64; InvalidReason::COUNT],
    /// Commits refused because the table was at [`crate::Config::limit`].
    pub limit_drops: u64,
    /// Commits with `nat(src=..)`/`nat(dst=..)` refused because no free
    /// translated tuple was found (OVS `nat_res_exhaustion`), or the NAT
    /// range was of the other address family.
    pub nat_exhausted: u64,
    /// Connections ever created.
    pub created: u64,
    /// Connections removed because they timed out.
    pub expired: u64,
    /// Connections removed otherwise: flush, `force`, or replaced by a new
    /// SYN on a closed connection.
    pub removed: u64,
}

impl CtStats {
    /// Invalid packets counted under `reason`.
    pub fn invalid_count(&self, reason: InvalidReason) -> u64 {
        self.invalid[reason.index()]
    }

    /// All invalid packets.
    pub fn invalid_total(&self) -> u64 {
        self.invalid.iter().sum()
    }

    pub(crate) fn per_proto_mut(&mut self, class: ProtoClass) -> &mut usize {
        match class {
            ProtoClass::Tcp => &mut self.tcp,
            ProtoClass::Udp => &mut self.udp,
            ProtoClass::Sctp => &mut self.sctp,
            ProtoClass::Icmp => &mut self.icmp,
            ProtoClass::Icmpv6 => &mut self.icmpv6,
            ProtoClass::Other => &mut self.other,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProtoClass {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmpv6,
    Other,
}

pub(crate) fn proto_class(k: &ConnKey) -> ProtoClass {
    match k.nw_proto {
        IPPROTO_TCP => ProtoClass::Tcp,
        IPPROTO_UDP => ProtoClass::Udp,
        IPPROTO_SCTP => ProtoClass::Sctp,
        _ if k.is_icmp() && k.ipv6 => ProtoClass::Icmpv6,
        _ if k.is_icmp() => ProtoClass::Icmp,
        _ => ProtoClass::Other,
    }
}
