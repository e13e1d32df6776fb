//! Connection tracking for nicflow's userspace datapath: the state behind
//! OpenFlow `ct()` actions and `ct_state`/`ct_zone`/`ct_mark`/`ct_label`/
//! `ct_nw_*`/`ct_tp_*` matches.
//!
//! # Where it sits
//!
//! When a datapath flow's actions contain `ct(...)`, the userspace datapath
//! executes it by calling [`Conntrack::process`] with the packet's Ethernet
//! type, its bytes from the IP header on, and a [`CtRequest`] (zone,
//! `commit`, `force`, `exec(set_field:..->ct_mark/ct_label)`). The returned
//! [`CtResult`] is written into the packet's metadata: `ct_state`, zone,
//! mark, label and the original-direction tuple. The packet then
//! recirculates and the next table pass matches on those fields. This is
//! `conntrack_execute` → `process_one` → `write_ct_md` in Open vSwitch's
//! lib/conntrack.c, and this crate ports that code and its protocol
//! trackers: lib/conntrack-tcp.c (pf-derived TCP window tracking),
//! lib/conntrack-other.c (UDP, SCTP and anything else), lib/conntrack-icmp.c
//! (echo-like ICMP/ICMPv6), lib/conntrack-tp.c (default timeouts) and
//! lib/ct-dpif.c (the `dpctl/dump-conntrack` text format). Doc comments
//! name the OVS function each piece comes from.
//!
//! Behaviour in brief (all as OVS userspace):
//! - Zones are separate tables.
//! - Without `commit` a new connection is `+trk+new` and nothing is stored.
//!   With `commit` it is stored and `set_mark`/`set_label` are applied;
//!   they are applied again each time a committing `ct` runs on the
//!   connection.
//! - Later packets are `+trk+est` (`+rpl` in the reply direction) unless the
//!   protocol tracker still calls them new: a retransmitted SYN, UDP seen
//!   one way only, repeated ICMP requests without a reply.
//! - TCP: SYN+ACK or bad flags cannot create a connection; out-of-window
//!   segments are `+inv`; a SYN on a connection closed both ways replaces
//!   it.
//! - ICMP/ICMPv6 errors quoting a tracked connection are `+trk+rel`
//!   (`+rpl` when the error travels in the connection's reply direction,
//!   i.e. it answers an original-direction packet); errors for unknown
//!   connections are `+inv`.
//! - `force`: a connection found in the reply direction is deleted and the
//!   packet handled as new.
//! - At [`Config::limit`] a commit creates nothing and the packet stays
//!   `+trk+new` (OVS `conn_not_found` returns no connection after setting
//!   `CS_NEW`); it is counted in [`CtStats::limit_drops`] and logged at most
//!   every 5 s.
//! - [`CtResult::orig`] follows `write_ct_md`: the connection's original
//!   tuple when a connection was found (even if this packet is invalid),
//!   otherwise the packet's own tuple; `None` only when the packet could
//!   not be parsed.
//!
//! # Default timeouts
//!
//! `ct_dpif_netdev_tp_def` (see [`Timeouts`]):
//!
//! | Timeout policy attribute | OVS timer              | Default |
//! |--------------------------|------------------------|---------|
//! | `tcp_syn_sent`           | TCP_FIRST_PACKET       | 30 s    |
//! | `tcp_syn_recv`           | TCP_OPENING            | 30 s    |
//! | `tcp_established`        | TCP_ESTABLISHED        | 24 h    |
//! | `tcp_fin_wait`           | TCP_CLOSING            | 15 min  |
//! | `tcp_time_wait`          | TCP_FIN_WAIT           | 45 s    |
//! | `tcp_close`              | TCP_CLOSED             | 30 s    |
//! | `udp_first`              | OTHER_FIRST            | 60 s    |
//! | `udp_single`             | OTHER_MULTIPLE         | 60 s    |
//! | `udp_multiple`           | OTHER_BIDIR            | 30 s    |
//! | `icmp_first`             | ICMP_FIRST             | 60 s    |
//! | `icmp_reply`             | ICMP_REPLY             | 30 s    |
//!
//! # What is not done (yet)
//!
//! - **NAT.** Not implemented. The table already stores separate original
//!   and reply keys per connection with one map entry each (OVS's
//!   `key_node[2]`), so NAT can rewrite the reply key without changing the
//!   layout; `state::SNAT`/`state::DNAT` are defined but never set.
//! - **ALGs** (FTP/TFTP helpers, expectations): not implemented.
//! - **Fragment reassembly** (OVS lib/ipf.c): not done. Every IPv4 or IPv6
//!   fragment is `+trk+inv`, counted as [`InvalidReason::Fragment`].
//! - **Checksums are not validated.** OVS userspace checks L3/L4 checksums
//!   unless the NIC vouched for them; nicflow hands packets whose checksums
//!   may be partial (offloaded), so a bad checksum is not a reason for
//!   `+inv` here. Callers that need it must validate before `ct`.
//! - Timeout policies per zone, per-zone limits, and SCTP's own state
//!   machine (OVS tracks SCTP with the "other" tracker, as here).
//!
//! # Memory per connection
//!
//! A connection is one slab slot (`Option<Conn>`, 192 bytes: both keys,
//! expiration, mark, label, id, TCP peers, counters) plus two hashbrown
//! entries (44-byte key + 8-byte value = 52 bytes, + 1 control byte each).
//! Nothing else is allocated per connection, and nothing per packet.
//!
//! Measured by `tests/memory.rs`, a test binary with a counting global
//! allocator (`cargo test -p nicflow-conntrack --test memory --
//! --nocapture`): 100,000 committed UDP connections grow the heap by
//! 39,059,472 bytes = **390 bytes per connection**. That is exactly
//! 131,072 slab slots × 192 B + 262,144 map buckets × 53 B (+16): both
//! grow by doubling, so the figure ranges from ~310 bytes (tables just
//! full) to ~620 bytes (just doubled) per connection. At the default limit
//! of 3,000,000 connections expect roughly 1.0-1.9 GB. The same test
//! checks that the established path allocates nothing.
//!
//! # Invalid input
//!
//! [`Conntrack::process`] never panics on any byte string; malformed,
//! truncated or hostile packets are `+trk+inv` with a per-reason counter
//! ([`CtStats::invalid`]). A proptest and the `conntrack_input` fuzz target
//! check this.

mod conn;
mod error;
mod format;
mod icmp;
mod other;
mod stats;
mod table;
mod tcp;
mod timeouts;
mod tuple;

use std::net::IpAddr;

pub use error::InvalidReason;
pub use format::{Counters, EntryView, TcpInfo, TCPF_BE_LIBERAL, TCPF_WINDOW_SCALE};
pub use stats::CtStats;
pub use table::Conntrack;
pub use tcp::TcpState;
pub use timeouts::Timeouts;
pub use tuple::Tuple;

/// `ct_state` bits, with OVS's values (`CS_*` in lib/packets.h).
pub mod state {
    pub const NEW: u32 = 0x01;
    pub const EST: u32 = 0x02;
    pub const REL: u32 = 0x04;
    pub const RPL: u32 = 0x08;
    pub const INV: u32 = 0x10;
    pub const TRK: u32 = 0x20;
    pub const SNAT: u32 = 0x40;
    pub const DNAT: u32 = 0x80;
}

/// OVS's default `n_conn_limit` (`DEFAULT_N_CONN_LIMIT`).
pub const DEFAULT_LIMIT: usize = 3_000_000;

/// Tracker configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Maximum number of connections (`dpctl/ct-set-maxconns`); default
    /// [`DEFAULT_LIMIT`] = 3,000,000.
    pub limit: usize,
    /// Per-state timeouts; default OVS's (see the crate docs).
    pub timeouts: Timeouts,
    /// TCP sequence number checking (`dpctl/ct-enable-tcp-seq-chk`); on by
    /// default as in OVS. When off every segment passes the window check.
    pub tcp_seq_chk: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limit: DEFAULT_LIMIT,
            timeouts: Timeouts::default(),
            tcp_seq_chk: true,
        }
    }
}

/// The parameters of one `ct()` action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtRequest {
    pub zone: u16,
    /// `commit`: new connections are stored.
    pub commit: bool,
    /// `force`: a connection found in the reply direction is deleted first.
    /// OpenFlow only allows it together with `commit`.
    pub force: bool,
    /// `exec(set_field:V/M->ct_mark)`: (value, mask), applied only when
    /// committing.
    pub set_mark: Option<(u32, u32)>,
    /// `exec(set_field:V/M->ct_label)`: (value, mask), applied only when
    /// committing.
    pub set_label: Option<(u128, u128)>,
}

/// What `ct()` writes into the packet metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CtResult {
    /// `ct_state`: always includes [`state::TRK`]; exactly `INV | TRK` for
    /// invalid packets.
    pub state: u32,
    pub zone: u16,
    pub mark: u32,
    pub label: u128,
    /// The original-direction tuple (`ct_nw_src/dst`, `ct_ipv6_src/dst`,
    /// `ct_nw_proto`, `ct_tp_src/dst`), following `write_ct_md`: the
    /// connection's when one was found, else the packet's own; `None` only
    /// when the packet could not be parsed.
    pub orig: Option<Tuple>,
    /// The connection in the table the verdict came from (found or just
    /// committed); `None` for uncommitted new and unparsable packets. A
    /// later `ct` in the same zone uses it instead of running the state
    /// machine on the same packet twice (OVS's `pkt->md.conn`).
    pub conn: Option<ConnHandle>,
}

/// A reference to a connection that stays safe after it is gone: the slot
/// and the connection's id, checked on use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnHandle {
    pub(crate) slot: u32,
    pub(crate) id: u32,
}

/// Which connections [`Conntrack::flush`] deletes (`dpctl/flush-conntrack
/// [zone=N] [ct-orig-tuple]`). Every field that is `Some` must match the
/// connection's original-direction tuple; the default matches everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushFilter {
    pub zone: Option<u16>,
    /// `ct_nw_src` / `ct_ipv6_src`.
    pub src: Option<IpAddr>,
    /// `ct_nw_dst` / `ct_ipv6_dst`.
    pub dst: Option<IpAddr>,
    /// `ct_nw_proto`.
    pub proto: Option<u8>,
    /// `ct_tp_src`; for ICMP the type, as in [`Tuple`].
    pub sport: Option<u16>,
    /// `ct_tp_dst`; for ICMP the code, as in [`Tuple`].
    pub dport: Option<u16>,
    /// `icmp_id` (ICMP/ICMPv6 connections only; a filter with it never
    /// matches other protocols).
    pub icmp_id: Option<u16>,
}

impl FlushFilter {
    pub(crate) fn matches(&self, k: &tuple::ConnKey) -> bool {
        let t = k.to_tuple();
        self.zone.is_none_or(|z| z == k.zone)
            && self.src.is_none_or(|a| a == t.src)
            && self.dst.is_none_or(|a| a == t.dst)
            && self.proto.is_none_or(|p| p == t.proto)
            && self.sport.is_none_or(|p| p == t.sport)
            && self.dport.is_none_or(|p| p == t.dport)
            && self
                .icmp_id
                .is_none_or(|id| k.is_icmp() && id == k.src.port)
    }
}

#[cfg(test)]
mod tests;
