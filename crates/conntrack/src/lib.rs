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
//! # NAT
//!
//! `ct(commit, nat(src=..))` / `nat(dst=..)` / plain `nat`
//! ([`CtRequest::nat`], OVS `ofpact_nat` → `nat_action_info_t`), ported
//! from lib/conntrack.c (`conn_not_found`, `nat_get_unique_tuple`,
//! `handle_nat`, `nat_packet`). This crate decides; the datapath rewrites
//! the packet with its own checksum-aware helpers, using
//! [`CtResult::nat`] ([`NatRewrite`]: new addresses, ports, ICMP id).
//!
//! - A new connection committed with `nat(src=..)`/`nat(dst=..)` gets a
//!   translated tuple that no other connection of the zone uses: the
//!   connection is stored under its original key and the reply key of the
//!   translated tuple, so replies to the NATed address find it. OVS picks
//!   one address of the range by hash (of the whole tuple with a random
//!   seed; of the source address alone with `persistent`) and searches
//!   only ports on it: SNAT the source port (configured range from a
//!   hash- or `random`-chosen start; without a range the original port
//!   first, then its class 1-511 / 600-1023 / 1024-65535); DNAT the
//!   configured destination port range, then the client's source port as
//!   for SNAT. At most 128 + 64 + 32 + 16 ports are tried
//!   (`nat_get_unique_l4`), so a large, nearly full range can report
//!   exhaustion before every port was tried, as in OVS.
//! - The packet that creates it is `+trk+new+snat` / `+dnat` with the
//!   forward rewrite. Later packets, when the `ct` action has `nat`: the
//!   same rewrite forward; the reverse one (un-NAT) in the reply
//!   direction, with the opposite bit (`+dnat` for replies of an SNAT
//!   connection, as OVS's `nat_action_reverse`). A `ct` without `nat`
//!   never rewrites and never sets the bits. Plain `nat` sets nothing up
//!   on a new connection. Invalid packets of a NATed connection are
//!   NATed too and keep `+inv` (`+trk+inv+snat`), as in OVS.
//! - No free tuple (`nat_res_exhaustion`): nothing is created, the packet
//!   stays `+trk+new` without rewrite, [`CtStats::nat_exhausted`] counts
//!   it, and a warning is logged at most every 5 s. An address range of
//!   the other family is treated the same way.
//! - ICMPv4 echo-like connections: the echo id is the "port" (kept if
//!   free, else the next free one in its class) and is rewritten. ICMPv6
//!   and port-less protocols are translated by address only: one address
//!   is tried, collision means exhaustion (OVS `pat_proto`).
//! - A second `ct` in the same zone: [`Conntrack::process_known`]
//!   (`process_one_fast` + `handle_nat`): a packet that already got
//!   `+snat`/`+dnat` in the zone is not translated again.
//! - ICMP/ICMPv6 errors related to a NATed connection (`+rel`), under a
//!   `ct` with `nat`, as OVS (`nat_packet` with `related`,
//!   `nat_inner_packet`): the error's own header gets the address write
//!   of its direction (a port unreachable from a DNAT backend comes from
//!   the virtual address; a TTL exceeded for an SNATed client goes to
//!   the client), and the packet it quotes is translated back to what
//!   its sender sent (addresses, ports, ICMPv4 echo id) in
//!   [`NatRewrite::inner`]; the state gets the bit of that direction
//!   (`+trk+rel+rpl+snat` for the backend's error). The caller fixes the
//!   outer ICMP checksum, the quoted IPv4 header checksum and the quoted
//!   L4 checksum.
//! - Dumps show the translated reply tuple
//!   (`reply=(src=<server>,dst=<SNAT address>,..)`, the reply ICMP id).
//!
//! Not done: ALG (FTP/TFTP) NAT, and OVS's lookup of an already-NATed
//! packet by its reversed key / `ct_orig_tuple` in `process_one`
//! (`initial_conn_lookup`, `check_orig_tuple`) — [`Conntrack::process`]
//! starts from an empty `ct_state`; the same-zone case is covered by
//! `process_known`.
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
//! expiration, mark, label, id, TCP peers, counters, NAT kind) plus two hashbrown
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
//! checks that the established path allocates nothing, with and without
//! NAT (a NATed connection has the same layout: only its reply key
//! differs).
//!
//! # Invalid input
//!
//! [`Conntrack::process`] never panics on any byte string; malformed,
//! truncated or hostile packets are `+trk+inv` (plus `+snat`/`+dnat` for
//! an invalid packet of a NATed connection under a `ct` with `nat`) with a
//! per-reason counter
//! ([`CtStats::invalid`]). A proptest and the `conntrack_input` fuzz target
//! check this.

mod conn;
mod error;
mod format;
mod icmp;
mod nat;
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
    /// `nat` / `nat(src=..)` / `nat(dst=..)`: `None` when the `ct` action
    /// has no `nat` (then nothing is ever rewritten, even for connections
    /// that have NAT, as in OVS where only a `ct` with `nat_action_info`
    /// calls `handle_nat`).
    pub nat: Option<NatAction>,
}

/// Source or destination NAT (`NX_NAT_F_SRC` / `NX_NAT_F_DST`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NatKind {
    Src,
    Dst,
}

/// The `nat` of a `ct` action (OVS `struct ofpact_nat`, as ofproto hands
/// it to the datapath in `put_ct_nat` and dpif-netdev turns it into
/// `nat_action_info_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct NatAction {
    /// `None`: plain `nat`. Packets of connections that already have NAT
    /// are translated (forward) or un-translated (reply); a new
    /// connection committed by it gets no NAT.
    pub kind: Option<NatKind>,
    /// Address range, inclusive, of the packet's family. `None` (or an
    /// all-zero address, OVS's "unspecified") keeps the address and only
    /// ports are translated. `addr_max` `None` or below `addr_min` means
    /// `addr_min` only. IPv6 ranges are capped at 2^32 - 1 addresses as in
    /// OVS. A range of the other family cannot translate anything: the
    /// commit fails like an exhausted range.
    pub addr_min: Option<IpAddr>,
    pub addr_max: Option<IpAddr>,
    /// Port range, inclusive; `port_min == 0` means no range
    /// (`NAT_ACTION_SRC_PORT`/`DST_PORT` unset). `port_max` below
    /// `port_min` means `port_min` only. For ICMPv4 it is the echo id range.
    pub port_min: u16,
    pub port_max: u16,
    /// `random` (`NX_NAT_F_PROTO_RANDOM`): the port search starts at a
    /// random offset in the range instead of a hash of the tuple.
    pub random: bool,
    /// `hash` (`NX_NAT_F_PROTO_HASH`): accepted and ignored, as OVS
    /// userspace does (dpif-netdev drops `OVS_NAT_ATTR_PROTO_HASH`); the
    /// hash-derived start is the default anyway.
    pub hash: bool,
    /// `persistent` (`NX_NAT_F_PERSISTENT`): the address is chosen from a
    /// hash of the source address only, with a fixed seed, so a client
    /// gets the same address for all its connections (OVS `nat_range_hash`
    /// with basis 0).
    pub persistent: bool,
}

/// What the caller must write into this packet after `ct`, in the
/// packet's own direction (`nat_packet` + `pat_packet`). Every field is
/// the new value of one header field, `None` to leave it; only fields
/// whose value changes are set, so an empty rewrite means nothing to do.
///
/// Ports are separate from addresses because DNAT can change the source
/// port without changing the source address (OVS falls back to a new
/// source port when the DNAT tuple collides), and the ICMP id is separate
/// because it is one field, 0 included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NatRewrite {
    /// IPv4/IPv6 source address.
    pub src: Option<IpAddr>,
    /// IPv4/IPv6 destination address.
    pub dst: Option<IpAddr>,
    /// TCP/UDP/SCTP source port.
    pub sport: Option<u16>,
    /// TCP/UDP/SCTP destination port.
    pub dport: Option<u16>,
    /// ICMPv4 echo/timestamp/info identifier (ICMPv6 ids are never
    /// translated, as in OVS).
    pub icmp_id: Option<u16>,
    /// Set for an ICMP/ICMPv6 error related (`+rel`) to a NATed connection
    /// (OVS `nat_packet` with `related`, then `nat_inner_packet`): what to
    /// write into the packet the error quotes, translated the other way
    /// round from the error itself. `src`/`dst` above then apply to the
    /// error's own IP header, the one of them NAT touches is always set
    /// (the error may come from a router whose address the tracker does
    /// not know; writing an equal value changes nothing), and `sport`,
    /// `dport` and `icmp_id` above are unset. The caller fixes every
    /// checksum the writes touch: the outer ICMP/ICMPv6 checksum (it
    /// covers the quoted bytes), the quoted IPv4 header checksum and the
    /// quoted TCP/UDP/ICMPv6 checksum where the error quotes it.
    pub inner: Option<NatInner>,
}

/// The rewrite of the packet an ICMP/ICMPv6 error quotes
/// ([`NatRewrite::inner`]): each field the new value of one header field
/// of the quoted packet, `None` to leave it; only fields whose value
/// changes are set. After it the quoted packet is the one its sender sent
/// (before NAT), so the sender's stack matches the error to its socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NatInner {
    /// Quoted IPv4/IPv6 source address.
    pub src: Option<IpAddr>,
    /// Quoted IPv4/IPv6 destination address.
    pub dst: Option<IpAddr>,
    /// Quoted TCP/UDP/SCTP source port.
    pub sport: Option<u16>,
    /// Quoted TCP/UDP/SCTP destination port.
    pub dport: Option<u16>,
    /// Quoted ICMPv4 echo-like message's identifier.
    pub icmp_id: Option<u16>,
}

impl NatInner {
    /// Nothing to write into the quoted packet.
    pub fn is_empty(&self) -> bool {
        *self == NatInner::default()
    }
}

impl NatRewrite {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        *self == NatRewrite::default()
    }
}

/// What `ct()` writes into the packet metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CtResult {
    /// `ct_state`: always includes [`state::TRK`]; exactly `INV | TRK` for
    /// invalid packets, except that a `ct` with `nat` adds
    /// [`state::SNAT`]/[`state::DNAT`] for an invalid packet of a NATed
    /// connection (and rewrites it), as OVS does.
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
    /// Header writes NAT asks for (empty when there is nothing to write).
    /// `state` then has [`state::SNAT`] or [`state::DNAT`].
    pub nat: NatRewrite,
}

impl ConnHandle {
    /// The packet that got this handle travelled in the reply direction.
    pub fn is_reply(&self) -> bool {
        self.reply
    }

    /// The same connection in the other direction.
    pub fn reversed(&self) -> ConnHandle {
        ConnHandle {
            reply: !self.reply,
            related: false,
            ..*self
        }
    }

    /// The handle with the per-packet bits cleared: one value per
    /// connection and direction, for keying caller-side state.
    pub fn direction_key(&self) -> ConnHandle {
        ConnHandle {
            related: false,
            ..*self
        }
    }
}

/// What moving an established connection to a kernel engine needs to know
/// (`Conntrack::offload_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadInfo {
    /// Established both ways (see `Conntrack::offload_info`).
    pub established: bool,
    /// TCP: both peers sent a FIN, or a RST closed it.
    pub ended: bool,
    /// TCP: the engine must hand SYN/FIN/RST segments up so the tracker
    /// sees the connection end.
    pub tcp: bool,
    /// The NAT rewrite of the [original, reply] direction (empty without
    /// NAT).
    pub nat: [NatRewrite; 2],
    /// The `ct_state` bit (`+snat`/`+dnat`) a packet of the [original,
    /// reply] direction gets from a `ct` with `nat` (0 without NAT): part
    /// of the key its next pass is looked up with.
    pub nat_state: [u32; 2],
    /// Packets the tracker has seen so far, both directions.
    pub packets: u64,
    /// The connection's mark and label now: a kernel entry was decided
    /// with them and must go when they change.
    pub mark: u32,
    pub label: u128,
}

/// A reference to a connection that stays safe after it is gone: the slot
/// and the connection's id, checked on use, plus the packet's direction
/// (for NAT in [`Conntrack::process_known`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnHandle {
    pub(crate) slot: u32,
    pub(crate) id: u32,
    /// The packet travelled in the reply direction (`pkt->md.reply`).
    pub(crate) reply: bool,
    /// The packet was an ICMP error about the connection
    /// (`pkt->md.icmp_related`).
    pub(crate) related: bool,
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
    /// The same fields of the reply-direction tuple (after NAT: what
    /// OpenFlow's `NXT_CT_FLUSH` reply tuple names, e.g. OVN's load
    /// balancer backend). `proto` and `zone` above apply to both.
    pub reply_src: Option<IpAddr>,
    pub reply_dst: Option<IpAddr>,
    pub reply_sport: Option<u16>,
    pub reply_dport: Option<u16>,
    pub reply_icmp_id: Option<u16>,
}

impl FlushFilter {
    /// A connection's original and reply keys both match.
    pub(crate) fn matches_conn(&self, keys: &[tuple::ConnKey; 2]) -> bool {
        if !self.matches(&keys[0]) {
            return false;
        }
        let r = FlushFilter {
            src: self.reply_src,
            dst: self.reply_dst,
            sport: self.reply_sport,
            dport: self.reply_dport,
            icmp_id: self.reply_icmp_id,
            ..FlushFilter::default()
        };
        r == FlushFilter::default() || r.matches(&keys[1])
    }

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
