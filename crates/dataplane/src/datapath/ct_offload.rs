//! Established connections in the kernel engines.
//!
//! A tracked flow takes two passes in userspace: the first pass's flow runs
//! `ct` and recirculates, the second pass's flow decides with the verdict
//! (`ct_state=+est`...). Neither can live in a kernel engine: they need the
//! tracker. But once a connection is established, every later packet of it
//! in one direction takes the same two flows and gets the same verdict and
//! NAT rewrite, until the connection ends. So for each direction of an
//! established connection this module installs one kernel entry, composed
//! from the two flows: the first pass's match narrowed to the connection's
//! exact 5-tuple, the NAT rewrite of that direction, then the second pass's
//! actions. TCP segments with SYN, FIN or RST do not match it (the entry
//! masks those flags to zero), so the tracker still sees the connection
//! end; everything else stays in the kernel.
//!
//! The tracker is told what it did not see: the engine's counters are
//! credited to the connection at every sync (refreshing its timeout), and
//! the connection is tracked without the TCP window check from the moment
//! it is offloaded (the kernel forwarded segments the window tracker never
//! saw; Linux's flowtable marks such connections liberal the same way). The
//! entry goes when the connection is no longer established (a FIN or RST
//! reached the tracker), when it is gone (flush, expiry), or when either
//! flow it was built from changes or goes (revalidation, aging).
//!
//! **Set-up in the kernel** ([`CtOffloads::setup`], issue 36; on by default,
//! see [`setup_default`]): a short
//! connection never reaches the packet count above, so every packet of it
//! would cross the daemon. When the first packet of a TCP connection (a
//! bare SYN) is committed and the flows its later packets will take are
//! already cached — the `+trk+est` second pass of its direction, and the
//! first and `+trk+est+rpl` second passes of the reply, found by looking
//! the keys those packets will have up in the megaflow cache — all of the
//! connection's entries are installed at once, before the SYN is sent on:
//! one per direction that lets everything but SYN and RST through (FIN
//! too), and one for the reply's SYN-ACK. The handshake, the data and the
//! close then run in the kernel; the engine ORs the TCP flags each entry
//! saw into its counters, and a poll 20 ms after the set-up
//! ([`CtOffloads::poll_setup`]) and each sync hand them to the tracker
//! (`Conntrack::kernel_tcp_flags`), which moves the connection to
//! ESTABLISHED, then to TIME_WAIT when both FINs went, when its entries
//! go. A RST still goes up. A megaflow guarantees its actions for every
//! key its mask covers, so an entry composed from the megaflows a guessed
//! key hits is exact for every packet that matches the entry; a packet
//! that differs where a mask looks (another MAC, say) just misses it and
//! goes up as before.
//!
//! With NAT (a load balancer's DNAT) the keys are those each pass sees:
//! the first pass's the packet as it arrives, the second's with the
//! direction's rewrite written in (the first pass's `ct(nat)` translated
//! it); each entry matches the untranslated packet and does the rewrite,
//! then the second pass's actions, as an established NATed direction's
//! does. The reply is guessed from the originator's packet as it leaves
//! (translated, its MACs rewritten), the other way round. A reply flow
//! that is not cached is translated ahead (`Datapath::install_for_setup`).
//!
//! **Set-up in the program** (`setup_bpf`, on by default, see
//! [`setup_bpf_default`]): a daemon set-up without NAT also writes a
//! *template* for the SYN's input port and EtherType
//! ([`CtOffloads::write_template`]): the three entries' values and mask
//! slots, and what every flow involved looked at as fields of the SYN's
//! key. The TC program then sets a later bare SYN that agrees with it up
//! itself (`tc_dp.c`, `dp_ct_setup`: the entries inserted with
//! `BPF_NOEXIST` after a report was reserved in its ring buffer, the SYN
//! forwarded), and the daemon takes the reports in
//! ([`CtOffloads::take_events`]): the tracker commits the SYN, and the
//! entries are taken into the books only if they are exactly what
//! [`CtOffloads::setup`] would have installed from the flows cached now
//! (deleted otherwise). A template goes when a flow it came from changes or
//! goes ([`CtOffloads::check_templates`], at every revalidation).

use super::offload::{CtEvent, CtTemplateSpec, FlowHashKey};
use super::{DpAction, DpFlow, FlowOffload};
use nicflow_classifier::{Classifier, RuleId};
use nicflow_conntrack::{state, ConnHandle, Conntrack, CtRequest, NatRewrite, OffloadInfo};
use nicflow_flow::{FlowKey, FlowMask, Match, FLOW_WORDS};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

/// A hash map with foldhash's randomly seeded hasher.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// TCP flags the kernel entry looks at: SYN, FIN, RST must be clear and
/// ACK set. Segments with SYN/FIN/RST change the connection's state, and
/// those without ACK (null scans, PSH or URG alone) are ones the tracker
/// calls invalid (`tcp_invalid_flags`): all must reach it.
const TCP_CHECKED: u16 = 0x017;
const TCP_ACK: u16 = 0x010;
const TCP_SYN: u16 = 0x002;
const TCP_FIN: u16 = 0x001;
const TCP_RST: u16 = 0x004;

/// TCP flags a set-up entry looks at (see [`CtOffloads::setup`]): ACK
/// set, SYN and RST clear. FIN passes: the tracker learns it from the
/// entry's flags. A segment with ACK and without SYN/RST is never one
/// the tracker calls invalid by its flags (`tcp_invalid_flags`).
const SETUP_CHECKED: u16 = TCP_SYN | TCP_RST | TCP_ACK;

/// Which entry of a connection's direction: the one every kind of entry
/// has, or a set-up reply direction's second one, for its SYN-ACK.
const MAIN: u8 = 0;
const SYNACK: u8 = 1;

/// The `live` keys a connection's entries may have: both directions, each
/// with its main and its SYN-ACK slot.
fn live_keys(h: ConnHandle) -> [(ConnHandle, u8); 4] {
    let (a, b) = (h.direction_key(), h.reversed());
    [(a, MAIN), (a, SYNACK), (b, MAIN), (b, SYNACK)]
}

/// Packets a connection must have carried before it moves: installing and
/// removing its two kernel entries costs four map updates and a counter
/// read per tick, more than a short request/response exchange (an
/// HTTP/1.0 fetch is about a dozen packets) costs in userspace. Measured
/// with `nicflow bench conntrack`: offloading every connection at once
/// cost new connections/s; this keeps short ones where they are.
pub const MIN_PACKETS: u64 = 24;

/// One direction of an established connection in the kernel.
#[derive(Clone, Debug)]
pub struct CtOffload {
    pub kernel_id: u64,
    /// The two flows it was composed from, with the actions they had.
    pub flows: [(RuleId, Vec<DpAction>); 2],
    pub matching: Match,
    pub actions: Vec<DpAction>,
    pub reply: bool,
    /// The connection's mark and label the entry was decided with.
    mark_label: (u32, u128),
    /// Engine counters already credited (packets, bytes).
    credited: (u64, u64),
    /// Installed at the connection's first packet ([`CtOffloads::setup`]):
    /// it carries the handshake and the close, and stays until the
    /// connection ends rather than while it is established.
    pub setup: bool,
}

impl CtOffload {
    /// Whether the connection (`info`, `None` if gone) still allows the
    /// entry: the same mark and label, and established (an entry set up
    /// in the kernel: not yet closed both ways).
    fn holds(&self, info: Option<OffloadInfo>) -> bool {
        info.is_some_and(|i| {
            (i.mark, i.label) == self.mark_label
                && if self.setup { !i.ended } else { i.established }
        })
    }
}

impl CtOffload {
    /// Engine counters as of the last sync (packets, bytes).
    pub fn counted(&self) -> (u64, u64) {
        self.credited
    }
}

/// A set-up connection's original-direction tuple (addresses, ports,
/// EtherType; TCP), what a bare SYN of it is found by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tuple {
    dl_type: u16,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
}

impl Tuple {
    fn of(k: &FlowKey) -> Tuple {
        let (src, dst) = if k.dl_type == 0x86dd {
            (k.ipv6_src, k.ipv6_dst)
        } else {
            let mut s = [0; 16];
            let mut d = [0; 16];
            s[..4].copy_from_slice(&k.nw_src.to_be_bytes());
            d[..4].copy_from_slice(&k.nw_dst.to_be_bytes());
            (s, d)
        };
        Tuple {
            dl_type: k.dl_type,
            src,
            dst,
            sport: k.tp_src,
            dport: k.tp_dst,
        }
    }

    fn reversed(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }
}

/// A connection set up in the kernel (keyed by its original direction).
#[derive(Clone, Copy, Debug)]
struct SetupConn {
    /// Its original tuple, and the tuple its packets leave with (the
    /// same without NAT; translated with it, the reply entries' match).
    tuples: [Tuple; 2],
    /// The reply's SYN-ACK was seen (its entries no longer count against
    /// [`CtOffloads::setup_pending_max`]).
    answered: bool,
    /// When a bare SYN last made the entries be read
    /// ([`CtOffloads::refresh_for_syn`]): a flood of SYNs on one tuple
    /// reads them at most once per [`SYN_REFRESH_MIN`], not per packet.
    syn_read: Option<Instant>,
}

/// Least time between two reads of a set-up connection's entries on
/// behalf of bare SYNs (each read is three system calls).
const SYN_REFRESH_MIN: std::time::Duration = std::time::Duration::from_millis(1);

/// The datapath's table of offloaded connection directions.
/// Its maps hash with foldhash (randomly seeded, as the tracker's table)
/// rather than SipHash: a set-up connection inserts, looks up and removes
/// several entries in each.
pub struct CtOffloads {
    live: Map<(ConnHandle, u8), CtOffload>,
    /// Connections set up in the kernel that still have entries, and the
    /// same by original tuple: one at a time per tuple (a second would
    /// install entries with the same match), found by a bare SYN.
    setup_conns: Map<ConnHandle, SetupConn>,
    by_tuple: Map<Tuple, ConnHandle>,
    /// Set-up connections whose SYN-ACK has not been seen yet.
    pending: usize,
    /// Most of those at once (3 entries each): beyond it set-up is refused
    /// (`ct:setup-pending-full`), so a SYN flood cannot fill the map the
    /// established and megaflow entries need. A quarter of the default
    /// 65,536-entry map.
    pub setup_pending_max: usize,
    /// Set-up refusals by reason (counted, not remembered: the next SYN
    /// of the kind tries again).
    pub setup_refused: std::collections::BTreeMap<&'static str, u64>,
    /// Set-up connections whose entries went because the handshake did
    /// not complete within [`SETUP_HANDSHAKE_MAX`].
    pub setup_timeouts: u64,
    /// Connections set up since the last [`CtOffloads::poll_setup`]: the
    /// least it looks at in its next call (if that many are due), so the
    /// poll keeps pace with the set-ups whatever its time bound.
    setups_since_poll: usize,
    /// Set-up connections still unanswered at their first poll, looked at
    /// again [`SETUP_HANDSHAKE_MAX`] after their set-up.
    handshake_queue: VecDeque<(ConnHandle, Instant)>,
    /// Directions the engine or the composition refused, with the reason,
    /// so the attempt is not repeated for every packet. Forgotten when
    /// flows change.
    refused: Map<ConnHandle, &'static str>,
    /// Totals for `stats`.
    pub offloaded: u64,
    pub removed: u64,
    /// Connections set up in the kernel at their first packet.
    pub set_up: u64,
    /// Flows a set-up translated and cached for packets not yet seen
    /// (`Datapath::install_for_setup`).
    pub setup_xlates: u64,
    /// Connections set up in the kernel, in the order they were, for
    /// [`CtOffloads::poll_setup`] (original direction, when).
    setup_queue: VecDeque<(ConnHandle, Instant)>,
    /// Set-up in the kernel on (on by default, see [`setup_default`]);
    /// off, connections move only once established ([`MIN_PACKETS`]).
    pub setup_enabled: bool,
    /// Set-up of NATed connections on (on by default: it raised the load
    /// balancer's connections/s, see [`setup_nat_default`]).
    pub setup_nat: bool,
    /// Set-up in the BPF program itself (templates, see
    /// [`CtOffloads::take_events`]); needs `setup_enabled`. Default: see
    /// [`setup_bpf_default`].
    pub setup_bpf: bool,
    /// Templates written to the engine, by (input port, EtherType).
    templates: Map<(u32, u16), Template>,
    /// The next template's id (the program's reports name it).
    next_gen: u64,
    /// Connections the program set up (reported, taken in).
    pub bpf_set_up: u64,
    /// Reports whose entries were deleted instead (`setup_refused` says
    /// why: `ct:bpf-...`).
    pub bpf_undone: u64,
    /// Templates written and removed.
    pub templates_written: u64,
    pub templates_removed: u64,
    /// The reports' buffer, reused.
    events: Vec<CtEvent>,
    /// Tests only (`set BRIDGE ct_setup_bpf=hold`): the program's reports
    /// are left in its ring buffer, which fills (then SYNs go up).
    pub events_held: bool,
    /// Templates replaced or removed lately, for reports made from them
    /// before ([`CtOffloads::retire`]).
    retired: Retired<TemplateCore>,
}

/// Cores of removed templates, kept by drains of the report ring, not by
/// count: a core goes only after the ring was found empty twice since it
/// was retired, the two at least `RETIRED_TICK` apart (every report made
/// from it has been taken by then; a program instance that looked the
/// template up before its delete ends within microseconds, and `sync`
/// drains twice in a row, hence the tick). Keeping a fixed number (16 before) lost the
/// core of a template whose reports waited behind more than that many
/// rewrites (a loaded round, per-service templates alternating on one
/// port): the SYN, already forwarded, was never committed (review of
/// ctbpf, MUST-FIX 3). `RETIRED_CAP` only bounds memory.
#[derive(Debug)]
struct Retired<T> {
    items: VecDeque<(u64, T)>,
    /// Times the ring was found empty, `RETIRED_TICK` apart.
    drains: u64,
    last_drain: Option<Instant>,
}

impl<T> Default for Retired<T> {
    fn default() -> Self {
        Retired {
            items: VecDeque::new(),
            drains: 0,
            last_drain: None,
        }
    }
}

impl<T> Retired<T> {
    fn push(&mut self, t: T) {
        if self.items.len() >= RETIRED_CAP {
            self.items.pop_front();
        }
        self.items.push_back((self.drains, t));
    }

    /// The ring was found empty: forget what was retired before the
    /// previous such drain.
    fn drained(&mut self, now: Instant) {
        if self
            .last_drain
            .is_some_and(|l| now.saturating_duration_since(l) < RETIRED_TICK)
        {
            return;
        }
        self.last_drain = Some(now);
        self.drains += 1;
        while self
            .items
            .front()
            .is_some_and(|(d, _)| d + 2 <= self.drains)
        {
            self.items.pop_front();
        }
    }

    fn find(&self, f: impl Fn(&T) -> bool) -> Option<&T> {
        self.items.iter().map(|(_, t)| t).find(|t| f(t))
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A set-up template written to the engine ([`FlowOffload::set_ct_template`]):
/// what the daemon needs to take in the program's reports of it, and to
/// notice when it no longer holds.
#[derive(Clone, Debug)]
struct Template {
    gen: u64,
    /// Every flow it was derived from (the SYN's two passes, each entry's
    /// two), with its match and actions as they were: a flow that changes
    /// (revalidation: its actions, or its mask) or goes removes it.
    flows: Vec<(RuleId, Match, Vec<DpAction>)>,
    /// The SYN's two flows, credited with each SYN the program forwards.
    syn_flows: [RuleId; 2],
    /// The commit the SYN's second pass makes: the tracker is asked the
    /// same for each reported SYN.
    req: CtRequest,
    /// The SYN's first pass's recirculation id (its second-pass key's).
    recirc: u32,
    /// vmask/vkey as written (a set-up whose template would be the same
    /// writes nothing).
    vmask: FlowKey,
    vkey: FlowKey,
}

/// What taking in a template's reports needs (kept after it is gone).
#[derive(Clone, Copy, Debug)]
struct TemplateCore {
    gen: u64,
    syn_flows: [RuleId; 2],
    req: CtRequest,
    recirc: u32,
}

impl TemplateCore {
    fn of(t: &Template) -> TemplateCore {
        TemplateCore {
            gen: t.gen,
            syn_flows: t.syn_flows,
            req: t.req,
            recirc: t.recirc,
        }
    }
}

/// Longest the daemon sleeps while the TC program may report set-ups
/// below its wake-up mark ([`CtOffloads::events_wait`]): 2 ms is ~56
/// reports at the firewall benchmark's 28k connections/s (under half the
/// default ring's wake-up mark of 124), and 500 wake-ups/s of an otherwise
/// idle daemon for as long as templates exist (they go with their flows).
pub const CT_EVENTS_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Removed templates' cores kept at most (memory bound only, see
/// [`Retired`]): far more than the rewrites of one round.
const RETIRED_CAP: usize = 4096;

/// Least time between two drains that count for [`Retired`].
const RETIRED_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// Fold a flow's mask `m` into a template's `vmask`, as fields of the
/// SYN's key: a flow of a reply packet looked at the SYN's fields the
/// other way round (addresses, ports, MACs swapped; its `in_port` and
/// TCP flags are the template's constants, as are the flags of the
/// originator's later segments: `syn` says whether the flow is one of
/// the SYN's own). The connection's original tuple (`ct_nw_src`...) is
/// the SYN's, in either direction. What only userspace has (registers,
/// metadata, the ct state, zone, mark and label, the recirculation) is
/// the same for every SYN the template takes: fixed by the flows
/// themselves and the commit's fixed zone and mark.
fn fold_mask(v: &mut FlowKey, m: &FlowKey, reply: bool, syn: bool) {
    fn or<const N: usize>(a: &mut [u8; N], b: &[u8; N]) {
        for (x, y) in a.iter_mut().zip(b) {
            *x |= *y;
        }
    }
    v.dl_type |= m.dl_type;
    v.vlan_tci |= m.vlan_tci;
    v.vlan_tci2 |= m.vlan_tci2;
    or(&mut v.arp_sha, &m.arp_sha);
    or(&mut v.arp_tha, &m.arp_tha);
    v.ipv6_label |= m.ipv6_label;
    v.nw_proto |= m.nw_proto;
    v.nw_tos |= m.nw_tos;
    v.nw_ttl |= m.nw_ttl;
    v.nw_frag |= m.nw_frag;
    v.tun_id |= m.tun_id;
    v.tun_src |= m.tun_src;
    v.tun_dst |= m.tun_dst;
    v.tun_flags |= m.tun_flags;
    v.tun_metadata[0] |= m.tun_metadata[0];
    if reply {
        or(&mut v.dl_dst, &m.dl_src);
        or(&mut v.dl_src, &m.dl_dst);
        v.nw_src |= m.nw_dst;
        v.nw_dst |= m.nw_src;
        or(&mut v.ipv6_src, &m.ipv6_dst);
        or(&mut v.ipv6_dst, &m.ipv6_src);
        v.tp_src |= m.tp_dst;
        v.tp_dst |= m.tp_src;
    } else {
        v.in_port |= m.in_port;
        or(&mut v.dl_dst, &m.dl_dst);
        or(&mut v.dl_src, &m.dl_src);
        v.nw_src |= m.nw_src;
        v.nw_dst |= m.nw_dst;
        or(&mut v.ipv6_src, &m.ipv6_src);
        or(&mut v.ipv6_dst, &m.ipv6_dst);
        v.tp_src |= m.tp_src;
        v.tp_dst |= m.tp_dst;
    }
    if syn {
        v.tcp_flags |= m.tcp_flags;
    }
    v.nw_src |= m.ct_nw_src;
    v.nw_dst |= m.ct_nw_dst;
    or(&mut v.ipv6_src, &m.ct_ipv6_src);
    or(&mut v.ipv6_dst, &m.ct_ipv6_dst);
    v.tp_src |= m.ct_tp_src;
    v.tp_dst |= m.ct_tp_dst;
    v.nw_proto |= m.ct_nw_proto;
}

impl Default for CtOffloads {
    fn default() -> Self {
        CtOffloads {
            live: Map::default(),
            setup_conns: Map::default(),
            by_tuple: Map::default(),
            pending: 0,
            setup_pending_max: SETUP_PENDING_MAX,
            setup_refused: Default::default(),
            setup_timeouts: 0,
            setups_since_poll: 0,
            handshake_queue: VecDeque::new(),
            refused: Map::default(),
            offloaded: 0,
            removed: 0,
            set_up: 0,
            setup_xlates: 0,
            setup_queue: VecDeque::new(),
            setup_enabled: setup_default(),
            setup_nat: setup_nat_default(),
            setup_bpf: setup_bpf_default(),
            templates: Map::default(),
            next_gen: 1,
            bpf_set_up: 0,
            bpf_undone: 0,
            templates_written: 0,
            templates_removed: 0,
            events: Vec::new(),
            events_held: false,
            retired: Retired::default(),
        }
    }
}

/// Set-up in the kernel is on unless `NICFLOW_CT_SETUP=0` is in the
/// daemon's environment (or `set BRIDGE ct_setup=off`). Measured with
/// `nicflow bench conntrack --modes cps` (docs/results/conntrack.md,
/// 2026-12-05, an Intel Xeon host): 1.24-1.33x the firewall's
/// connections/s of set-up off, above nftables. (On 2026-12-04, on an AMD EPYC host where
/// the client rather than the daemon was the limit, it was 1.00-1.04x, and
/// off by default; issue 36 keeps it where connections/s rise.)
fn setup_default() -> bool {
    env_switch("NICFLOW_CT_SETUP", true)
}

/// Set-up of NATed connections is on unless `NICFLOW_CT_SETUP_NAT=0` is
/// in the daemon's environment (or `set BRIDGE ct_setup_nat=off`); it
/// needs set-up itself on. Measured with `nicflow bench conntrack
/// --scenario lb --modes cps` (docs/results/conntrack.md, 2026-12-05):
/// 1.18x the load balancer's connections/s of set-up off, nine frames
/// in ten in the TC engine. (Its 0.94x of 2026-12-04 was the slow poll's,
/// since fixed.)
fn setup_nat_default() -> bool {
    env_switch("NICFLOW_CT_SETUP_NAT", true)
}

/// Set-up in the BPF program is on unless `NICFLOW_CT_SETUP_BPF=0` is in
/// the daemon's environment (or `set BRIDGE ct_setup_bpf=off`); it needs
/// set-up itself on. Decided by `nicflow bench conntrack --modes cps` with
/// two wrk threads (docs/results/conntrack.md, 2026-12-06 "...with two wrk
/// threads"): 1.15x the firewall's connections/s of the daemon's set-up,
/// every pair; with one wrk thread the client was the limit and it was
/// measured at 0.95x.
fn setup_bpf_default() -> bool {
    env_switch("NICFLOW_CT_SETUP_BPF", true)
}

/// An on/off switch from the environment: `0|off|false|no` and
/// `1|on|true|yes` (as `set BRIDGE ct_setup=...` takes them); unset: the
/// default; anything else: the default, with a warning, so a mistyped
/// "turn it off" is not silently ignored.
fn env_switch(var: &str, default: bool) -> bool {
    let Some(v) = std::env::var_os(var) else {
        return default;
    };
    parse_switch(&v.to_string_lossy()).unwrap_or_else(|| {
        tracing::warn!(
            "{var}={v:?} is neither on (1/on/true/yes) nor off (0/off/false/no): using {default}"
        );
        default
    })
}

fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "false" | "no" => Some(false),
        "1" | "on" | "true" | "yes" => Some(true),
        _ => None,
    }
}

/// How old a connection set up in the kernel is when
/// [`CtOffloads::poll_setup`] looks at it: long enough for a one-request
/// exchange on a local network to be over.
pub const SETUP_POLL_AGE: std::time::Duration = std::time::Duration::from_millis(20);

/// Default of [`CtOffloads::setup_pending_max`]: unanswered set-up
/// connections' entries take at most a quarter of a 65,536-entry map.
pub const SETUP_PENDING_MAX: usize = 65_536 / 4 / 3;

/// How long a set-up connection may wait for its SYN-ACK: after that its
/// entries go and the tracker carries it in userspace (a SYN scan's
/// unanswered connections hold no entries for their 30-s opening timer).
pub const SETUP_HANDSHAKE_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Most wall-clock time one [`CtOffloads::poll_setup`] spends looking at
/// connections beyond those it owes (one per connection set up since its
/// last call). The batched delete of the closed connections' entries at
/// the end of the poll falls outside it: one system call for the whole
/// poll, made after the last time check, its time not measured on its
/// own (the daemon's whole cost per connection with it is in
/// docs/results/conntrack.md's ctdel section).
///
/// Not a bound on the poll's throughput: before that batch, each closed
/// connection cost about a dozen system calls (three counter reads, three
/// removals of two reads and a delete each), some 15-20 µs on the bench's
/// VM (now three reads and its share of the batch, not measured apart),
/// so a fixed 250 µs every 2 ms (the first version of this bound) polled
/// about 6,000 connections a second. Set up faster than that, the
/// unpolled connections held their entries until the tick, counted as
/// unanswered until then, filled [`SETUP_PENDING_MAX`] within a fraction
/// of a second (every later SYN refused as `ct:setup-pending-full`, its
/// connection carried in userspace), and the tick's sync then removed
/// thousands of entries in one stall: 0.94x the connections/s of set-up off
/// (docs/results/conntrack.md, "Connection set-up in the kernel: why it
/// lowered connections/s").
const SETUP_POLL_TIME: std::time::Duration = std::time::Duration::from_micros(250);

/// Most connections queued for [`CtOffloads::poll_setup`] (beyond it, the
/// tick's sync alone handles them).
const SETUP_QUEUE_MAX: usize = 1 << 20;

/// Most refusals remembered; beyond it they are forgotten wholesale (a
/// retry costs one composition, so nothing is lost but a little CPU).
const REFUSED_MAX: usize = 65_536;

impl CtOffloads {
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &CtOffload> {
        self.live.values()
    }

    /// After a packet's second pass: offload its connection's direction if
    /// it is established and both passes' flows allow it. `first` is the
    /// first pass's flow and key, `second` the recirculated pass's flow.
    #[allow(clippy::too_many_arguments)]
    pub fn consider(
        &mut self,
        h: ConnHandle,
        first: (RuleId, &DpFlow, &FlowKey),
        second: (RuleId, &DpFlow),
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        now: Instant,
    ) {
        let h = h.direction_key();
        if self.live.contains_key(&(h, MAIN)) || self.refused.contains_key(&h) {
            return;
        }
        let Some(info) = tracker.offload_info(h, now) else {
            return;
        };
        if !info.established || info.packets < MIN_PACKETS {
            // Asked again by a later packet, once it is.
            return;
        }
        let reply = h.is_reply();
        let composed = compose(
            first.1,
            first.2,
            second.1,
            info.tcp.then_some((TCP_CHECKED, TCP_ACK)),
            info.nat[usize::from(reply)],
        );
        let (mut matching, actions) = match composed {
            Ok(c) => c,
            Err(why) => {
                self.refuse(h, why);
                return;
            }
        };
        let mut mask = *matching.mask();
        off.refine_mask(matching.key(), &mut mask);
        matching = Match::new(*matching.key(), mask);
        let from = ComposedFrom([(first.0, first.1), second]);
        match off.offload_ct(&matching, &actions, from.parts()) {
            Ok(kernel_id) => {
                // From now on the tracker does not see every segment.
                tracker.credit(h, reply, 0, 0, now, now);
                tracker.kernel_entries(h);
                self.offloaded += 1;
                self.live.insert(
                    (h, MAIN),
                    CtOffload {
                        kernel_id,
                        flows: from.kept(),
                        matching,
                        actions,
                        reply,
                        mark_label: (info.mark, info.label),
                        credited: (0, 0),
                        setup: false,
                    },
                );
            }
            Err(why) => self.refuse(h, why),
        }
    }

    /// A bare TCP SYN just committed connection `h` (its second pass
    /// done): install the entries of both directions now, if the flows
    /// their packets will take are cached and allow it (see the module
    /// doc). `first` is the SYN's first-pass flow and key, `second_key`
    /// its recirculated pass's key (with the verdict in its ct fields).
    /// Returns the key of a later packet whose flow is not cached, for
    /// the datapath to translate and install before it calls again (or
    /// to give up on: [`CtOffloads::refuse_setup`] with
    /// `ct:setup-not-cached`); other refusals are counted here.
    #[allow(clippy::too_many_arguments)]
    pub fn setup(
        &mut self,
        h: ConnHandle,
        first: (RuleId, &FlowKey),
        second: (RuleId, &FlowKey),
        flows: &Classifier<FLOW_WORDS, DpFlow>,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        now: Instant,
    ) -> Option<Box<FlowKey>> {
        let second_key = second.1;
        let h = h.direction_key();
        let key = first.1;
        if !self.setup_enabled
            || h.is_reply()
            || key.nw_proto != 6
            || key.tcp_flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN) != TCP_SYN
            || self.live.contains_key(&(h, MAIN))
            || self.live.contains_key(&(h.reversed(), MAIN))
        {
            return None;
        }
        let info = tracker.offload_info(h, now)?;
        // Entries of another connection with this tuple (either way
        // round) are still in the engine (it left the tracker, its
        // entries not yet removed): new ones would have the same match,
        // and the engine would replace them in place, counters, flags
        // and all.
        let tuple = Tuple::of(key);
        if self.by_tuple.contains_key(&tuple) || self.by_tuple.contains_key(&tuple.reversed()) {
            self.refuse_setup("ct:setup-tuple-busy");
            return None;
        }
        if self.pending >= self.setup_pending_max {
            self.refuse_setup("ct:setup-pending-full");
            return None;
        }
        match self.compose_setup(key, second_key, flows, info) {
            Ok((mut entries, sent)) => {
                // A NATed connection's reply entries match the translated
                // tuple: it must not be another set-up connection's either.
                if sent != tuple
                    && (self.by_tuple.contains_key(&sent)
                        || self.by_tuple.contains_key(&sent.reversed()))
                {
                    self.refuse_setup("ct:setup-tuple-busy");
                    return None;
                }
                for (_, _, e) in &mut entries {
                    let mut mask = *e.matching.mask();
                    off.refine_mask(e.matching.key(), &mut mask);
                    e.matching = Match::new(*e.matching.key(), mask);
                }
                // The three entries go to the kernel together, at the
                // commit: one system call instead of three. `ids[..n]`:
                // the kernel ids of those offloaded so far.
                let mut ids = [0u64; 3];
                let mut n = 0;
                off.begin_ct();
                let mut refused = None;
                for (_, _, e) in &entries {
                    match off.offload_ct(&e.matching, &e.actions, e.from.parts()) {
                        Ok(id) => {
                            ids[n] = id;
                            n += 1;
                        }
                        Err(why) => {
                            refused = Some(why);
                            break;
                        }
                    }
                }
                // The commit always ends the staging. A refused install,
                // a failed commit or a tracker that will not take the
                // set-up: every entry offloaded for it goes, once (a
                // refused install's earlier entries are written by the
                // commit, then removed: a rare path, kept simple).
                let committed = off.commit_ct();
                let refused = refused.or(committed.err());
                if refused.is_some() || !tracker.kernel_setup(h) {
                    for &id in &ids[..n] {
                        off.remove(id);
                    }
                    if let Some(why) = refused {
                        self.refuse_setup(why);
                    }
                    return None;
                }
                self.set_up += 1;
                if self.setup_bpf && sent == tuple && off.ct_templates(key.in_port) {
                    self.write_template(key, (first.0, second.0), &entries, flows, off);
                }
                self.record_setup(h, [tuple, sent], entries, ids, n, info, now);
            }
            Err(Refusal::Why(why)) => self.refuse_setup(why),
            Err(Refusal::NotCached(k)) => return Some(k),
        }
        None
    }

    /// The books of a connection set up in the kernel whose three entries
    /// (`entries`, kernel ids `ids[..n]`) are installed: its tuples, the
    /// poll's queue, the live entries.
    #[allow(clippy::too_many_arguments)]
    fn record_setup(
        &mut self,
        h: ConnHandle,
        [tuple, sent]: [Tuple; 2],
        entries: SetupEntries<'_>,
        ids: [u64; 3],
        n: usize,
        info: OffloadInfo,
        now: Instant,
    ) {
        {
            {
                self.pending += 1;
                self.setups_since_poll += 1;
                self.setup_conns.insert(
                    h,
                    SetupConn {
                        tuples: [tuple, sent],
                        answered: false,
                        syn_read: None,
                    },
                );
                self.by_tuple.insert(tuple, h);
                self.by_tuple.insert(sent, h);
                if self.setup_queue.len() < SETUP_QUEUE_MAX {
                    self.setup_queue.push_back((h, now));
                }
                // Nothing refused: all three installed, so the zip below
                // pairs every entry with its own kernel id.
                debug_assert_eq!(n, entries.len());
                for ((slot, reply, e), kernel_id) in entries.into_iter().zip(ids) {
                    self.offloaded += 1;
                    let d = if reply { h.reversed() } else { h };
                    self.live.insert(
                        (d, slot),
                        CtOffload {
                            kernel_id,
                            flows: e.from.kept(),
                            matching: e.matching,
                            actions: e.actions,
                            reply,
                            mark_label: (info.mark, info.label),
                            credited: (0, 0),
                            setup: true,
                        },
                    );
                }
            }
        }
    }

    /// Count a set-up refusal (`stats`: `ct:setup-...:N`).
    pub fn refuse_setup(&mut self, why: &'static str) {
        *self.setup_refused.entry(why).or_default() += 1;
    }

    /// The three entries of [`CtOffloads::setup`] (orig, reply, reply
    /// SYN-ACK), each with its slot and direction, and the tuple the
    /// originator's packets leave with (translated, for a NATed
    /// connection: the reply entries match it the other way round), or
    /// why not.
    fn compose_setup<'a>(
        &self,
        key: &FlowKey,
        second_key: &FlowKey,
        flows: &'a Classifier<FLOW_WORDS, DpFlow>,
        info: OffloadInfo,
    ) -> Result<(SetupEntries<'a>, Tuple), Refusal> {
        if !info.tcp || info.ended {
            return Err("ct:setup-not-tcp".into());
        }
        if info
            .nat
            .iter()
            .any(|n| n.icmp_id.is_some() || n.inner.is_some())
        {
            return Err("ct:icmp-nat".into());
        }
        if !self.setup_nat && info.nat_state.iter().any(|b| *b != 0) {
            return Err("ct:setup-nat".into());
        }
        let zone = second_key.ct_zone;
        // What the tracker writes into every later packet's second-pass
        // key: the verdict, the mark and label the commit left (the SYN's
        // own key has them from before), and the connection's original
        // tuple — the SYN's, untranslated.
        let ct_fields = |k2: &mut FlowKey, st: u32| {
            k2.ct_state = st;
            k2.ct_zone = zone;
            k2.ct_mark = info.mark;
            k2.ct_label = info.label.to_be_bytes();
            k2.ct_nw_src = 0;
            k2.ct_nw_dst = 0;
            k2.ct_ipv6_src = [0; 16];
            k2.ct_ipv6_dst = [0; 16];
            if key.dl_type == 0x86dd {
                k2.ct_ipv6_src = key.ipv6_src;
                k2.ct_ipv6_dst = key.ipv6_dst;
            } else {
                k2.ct_nw_src = key.nw_src;
                k2.ct_nw_dst = key.nw_dst;
            }
            k2.ct_nw_proto = key.nw_proto;
            k2.ct_tp_src = key.tp_src;
            k2.ct_tp_dst = key.tp_dst;
        };
        // The originator's later segments: the first pass (its `ct(nat)`,
        // if any, translates them), then the `+trk+est` second pass on
        // the translated packet.
        let mut k1 = *key;
        k1.tcp_flags = TCP_ACK;
        // The originator's flows must be cached: a connection of the kind
        // went through userspace before (only the reply's are translated
        // ahead, see `Refusal::NotCached`).
        let (f1, r1, (bit, nat1)) =
            plain_first_pass(flows, &k1, zone, (info.nat_state[0], info.nat[0]))
                .map_err(Refusal::orig)?;
        let mut k2 = k1;
        k2.recirc_id = r1;
        apply_nat(&mut k2, &nat1);
        ct_fields(&mut k2, state::TRK | state::EST | bit);
        let f2 = cached(flows, &k2).map_err(Refusal::orig)?;
        // The packet as it leaves: translated, with the second pass's
        // MAC rewrites (a load balancer's `mod_dl_dst`).
        let (out, sent) = leaves(&f2.1.actions, &k2, key.in_port)?;
        let orig = SetupEntry::compose(f1, &k1, f2, (SETUP_CHECKED, TCP_ACK), nat1)?;
        // The responder's: in on the port the originator's go out of, to
        // what they came from — the packet as sent, the other way round.
        let reply_key = |flags: u16| -> FlowKey {
            let mut k = sent;
            k.recirc_id = 0;
            k.clear_ct();
            k.in_port = out;
            std::mem::swap(&mut k.dl_src, &mut k.dl_dst);
            std::mem::swap(&mut k.nw_src, &mut k.nw_dst);
            std::mem::swap(&mut k.ipv6_src, &mut k.ipv6_dst);
            std::mem::swap(&mut k.tp_src, &mut k.tp_dst);
            k.tcp_flags = flags;
            k
        };
        // The two passes a reply segment (first-pass key `k1`) takes: its
        // first-pass flow, then the second-pass flow its translated,
        // tracked key hits.
        let passes = |k1: &FlowKey| -> Result<ReplyPasses<'a>, Refusal> {
            let first = plain_first_pass(flows, k1, zone, (info.nat_state[1], info.nat[1]))?;
            let (_, r1, (bit, nat1)) = first;
            let mut k2 = *k1;
            k2.recirc_id = r1;
            apply_nat(&mut k2, &nat1);
            ct_fields(&mut k2, state::TRK | state::EST | state::RPL | bit);
            Ok((first, cached(flows, &k2)?))
        };
        // A reply entry for the segment `k1` (its `flags` checked as
        // `checked`) from the passes it takes.
        let entry = |slot: u8,
                     k1: &FlowKey,
                     checked: u16,
                     ((f1, _, (_, nat1)), f2): ReplyPasses<'a>|
         -> Result<_, Refusal> {
            let e = SetupEntry::compose(f1, k1, f2, (checked, k1.tcp_flags), nat1)?;
            Ok((slot, true, e))
        };
        let ack_key = reply_key(TCP_ACK);
        let ack_passes = passes(&ack_key)?;
        let ack = entry(MAIN, &ack_key, SETUP_CHECKED, ack_passes)?;
        // The SYN-ACK's key differs from the ACK's in the SYN bit only:
        // when neither of the ACK's flows looks at it, the SYN-ACK's key
        // hits them too, with the same decision, and two lookups are
        // saved. This assumes the cached flows do not overlap (the cache
        // has no priorities: a lookup returns any flow that matches).
        // Revalidation may leave a stale flow that does look at SYN
        // beside the ACK's, which a lookup of the SYN-ACK's key could hit
        // instead; the reuse takes the ACK's flow, which the rules
        // translated for a key with either SYN bit. A flow the entry was
        // composed from that changes or goes removes the entry at the
        // sync.
        let syn_free = |f: &DpFlow| f.matching.mask().0.tcp_flags & TCP_SYN == 0;
        let ((ack_f1, _, _), ack_f2) = ack_passes;
        let synack_key = reply_key(TCP_SYN | TCP_ACK);
        let synack_passes = if syn_free(ack_f1.1) && syn_free(ack_f2.1) {
            ack_passes
        } else {
            passes(&synack_key)?
        };
        let synack = entry(SYNACK, &synack_key, TCP_CHECKED, synack_passes)?;
        let entries = [(MAIN, false, orig), ack, synack];
        Ok((entries, Tuple::of(&sent)))
    }

    /// Set-up in the program: after the daemon set connection `key` up
    /// from cached flows (`syn_flows`: the SYN's two; `entries`: the three
    /// entries composed, masks refined), write a template for the SYN's
    /// port and EtherType, unless the one there is the same. Only for a
    /// connection without NAT whose packets leave with the MACs they came
    /// with (the program builds the reply's keys by swapping the SYN's),
    /// untagged, not from a tunnel, and whose SYN's second pass is exactly
    /// "commit (no NAT) in the first pass's zone, then one output".
    fn write_template(
        &mut self,
        key: &FlowKey,
        (s1, s2): (RuleId, RuleId),
        entries: &SetupEntries<'_>,
        flows: &Classifier<FLOW_WORDS, DpFlow>,
        off: &mut dyn FlowOffload,
    ) {
        if key.vlan_tci != 0
            || key.vlan_tci2 != 0
            || key.tun_id != 0
            || key.tun_flags != 0
            || key.tun_src != 0
            || key.tun_dst != 0
        {
            self.refuse_setup("ct:bpf-tagged");
            return;
        }
        let (Some(f1), Some(f2)) = (flows.get(s1), flows.get(s2)) else {
            return;
        };
        let (req, syn_out) = match f2.actions.as_slice() {
            [DpAction::Ct {
                zone,
                commit: true,
                force,
                mark,
                label,
                nat: None,
            }, DpAction::Output(p)]
                if *p != key.in_port =>
            {
                (
                    CtRequest {
                        zone: *zone,
                        commit: true,
                        force: *force,
                        set_mark: *mark,
                        set_label: *label,
                        nat: None,
                    },
                    *p,
                )
            }
            _ => {
                self.refuse_setup("ct:bpf-syn-actions");
                return;
            }
        };
        let recirc = match f1.actions.as_slice() {
            [DpAction::Ct {
                zone,
                commit: false,
                nat: None,
                ..
            }, DpAction::Recirc(r)]
                if *zone == req.zone =>
            {
                *r
            }
            _ => {
                self.refuse_setup("ct:bpf-syn-first-pass");
                return;
            }
        };
        let mut vmask = FlowKey::default();
        let mut kept = Vec::with_capacity(8);
        for (id, f) in [(s1, f1), (s2, f2)] {
            fold_mask(&mut vmask, &f.matching.mask().0, false, true);
            kept.push((id, f.matching, f.actions.clone()));
        }
        for (_, reply, e) in entries {
            for (id, f) in e.from.0 {
                fold_mask(&mut vmask, &f.matching.mask().0, *reply, false);
                kept.push((id, f.matching, f.actions.clone()));
            }
        }
        vmask.in_port = u32::MAX;
        vmask.dl_type = 0xffff;
        let mut vkey = *key;
        for (a, b) in vkey.words_mut().iter_mut().zip(vmask.words()) {
            *a &= b;
        }
        let at = (key.in_port, key.dl_type);
        if self
            .templates
            .get(&at)
            .is_some_and(|t| t.vmask == vmask && t.vkey == vkey && t.flows == kept)
        {
            return;
        }
        let gen = self.next_gen;
        self.next_gen += 1;
        let entry = |i: usize| (entries[i].2.matching, entries[i].2.actions.clone());
        let spec = CtTemplateSpec {
            gen,
            in_port: key.in_port,
            dl_type: key.dl_type,
            vmask,
            vkey,
            entries: [entry(0), entry(1), entry(2)],
            out_port: entries[1].2.matching.key().in_port,
            tcp_flags: [0, 1, 2].map(|i| entries[i].2.matching.key().tcp_flags),
            syn_out,
        };
        match off.set_ct_template(&spec) {
            Ok(()) => {
                self.templates_written += 1;
                let t = Template {
                    gen,
                    flows: kept,
                    syn_flows: [s1, s2],
                    req,
                    recirc,
                    vmask,
                    vkey,
                };
                if let Some(old) = self.templates.insert(at, t) {
                    self.retire(old);
                }
            }
            Err(why) => self.refuse_setup(why),
        }
    }

    /// Keep a replaced or removed template's core for a while: the
    /// program may have reported set-ups from it not taken in yet.
    fn retire(&mut self, t: Template) {
        self.retired.push(TemplateCore::of(&t));
    }

    /// Remove the templates that no longer hold (a flow they came from
    /// changed or went; or set-up in the program was turned off), then
    /// take in what the program reported before.
    pub fn check_templates(
        &mut self,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        if self.templates.is_empty() {
            return;
        }
        let on = self.setup_bpf && self.setup_enabled;
        let stale: Vec<(u32, u16)> = self
            .templates
            .iter()
            .filter(|(_, t)| {
                !on || t.flows.iter().any(|(id, m, a)| {
                    flows
                        .get(*id)
                        .is_none_or(|f| f.matching != *m || f.actions != *a)
                })
            })
            .map(|(k, _)| *k)
            .collect();
        if stale.is_empty() {
            return;
        }
        for k in stale {
            off.remove_ct_template(k.0, k.1);
            if let Some(t) = self.templates.remove(&k) {
                self.templates_removed += 1;
                self.retire(t);
            }
        }
        self.take_events(tracker, off, flows, now);
    }

    /// Remove every template (the engine goes, set-up turned off).
    fn drop_templates(&mut self, off: &mut dyn FlowOffload) {
        let keys: Vec<(u32, u16)> = self.templates.keys().copied().collect();
        for k in keys {
            off.remove_ct_template(k.0, k.1);
            if let Some(t) = self.templates.remove(&k) {
                self.templates_removed += 1;
                self.retire(t);
            }
        }
    }

    /// Templates in the engine now.
    pub fn n_templates(&self) -> usize {
        self.templates.len()
    }

    /// How long the daemon may sleep with reports possibly unread: the
    /// program wakes it only when an eighth of the ring is unread
    /// (`dp_ct_ev_wakeup` in `tc_dp.c`: a wake-up per report cost the
    /// sending CPU a self-IPI each), so while templates exist (or reports
    /// made from retired ones may come) the daemon's sleep is capped at
    /// [`CT_EVENTS_WAIT`] and the reports below the mark are read by that
    /// round. `None`: no report can come (or they are held, tests).
    pub fn events_wait(&self) -> Option<std::time::Duration> {
        (!self.events_held && (!self.templates.is_empty() || !self.retired.is_empty()))
            .then_some(CT_EVENTS_WAIT)
    }

    /// Take in the set-ups the program reported (see the module doc): for
    /// each, the tracker commits the SYN as its second pass would have
    /// (the program forwarded it), and the three entries the program
    /// inserted are taken into the books as if [`Self::setup`] had
    /// installed them, after checking that they are exactly what it would
    /// have composed for this SYN from the flows cached now; otherwise
    /// they are deleted and the connection goes on in userspace.
    pub fn take_events(
        &mut self,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        // With no template (none written, or all cleared when an engine
        // was adopted from the pins of a daemon that died) the ring is
        // still drained: reports the program made before are undone as
        // `ct:bpf-unknown-template`, not left in the ring, where they
        // would keep its descriptor readable (a busy poll) and their
        // entries in the kernel. An empty ring costs two loads here.
        if self.events_held {
            return;
        }
        loop {
            let mut evs = std::mem::take(&mut self.events);
            off.drain_ct_events(&mut evs, 256);
            if evs.is_empty() {
                self.events = evs;
                self.retired.drained(now);
                return;
            }
            for ev in evs.drain(..) {
                self.take_event(&ev, tracker, off, flows, now);
            }
            self.events = evs;
        }
    }

    fn take_event(
        &mut self,
        ev: &CtEvent,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        let hks = ev.hk;
        let core = self
            .templates
            .values()
            .find(|t| t.gen == ev.gen)
            .map(TemplateCore::of)
            .or_else(|| self.retired.find(|t| t.gen == ev.gen).copied());
        let Some(core) = core else {
            self.undo(off, &hks, "ct:bpf-unknown-template");
            return;
        };
        let frame = ev.frame();
        let mut key = FlowKey::default();
        let Ok(layout) = nicflow_flow::extract(frame, ev.in_port, &mut key) else {
            self.undo(off, &hks, "ct:bpf-unparsed");
            return;
        };
        // The program forwarded the SYN: the tracker and the SYN's flows
        // see it as if it had crossed userspace.
        let l3 = frame.get(usize::from(layout.l3_offset)..).unwrap_or(&[]);
        let res = tracker.process(layout.ethertype, l3, &core.req, now);
        for id in core.syn_flows {
            if let Some(f) = flows.get_mut(id) {
                f.stats.packets += 1;
                f.stats.bytes += u64::from(ev.len);
                f.stats.used = Some(f.stats.used.map_or(now, |u| u.max(now)));
            }
        }
        let h = match res.conn {
            Some(c) if res.state & state::NEW != 0 && !c.is_reply() => c.direction_key(),
            _ => {
                self.undo(off, &hks, "ct:bpf-not-new");
                return;
            }
        };
        // A connection the SYN replaced loses its entries first.
        self.forget_gone(tracker, off, flows, now);
        if self.pending >= self.setup_pending_max {
            self.undo(off, &hks, "ct:setup-pending-full");
            return;
        }
        let tuple = Tuple::of(&key);
        if self.by_tuple.contains_key(&tuple) || self.by_tuple.contains_key(&tuple.reversed()) {
            self.undo(off, &hks, "ct:setup-tuple-busy");
            return;
        }
        let Some(info) = tracker.offload_info(h, now) else {
            self.undo(off, &hks, "ct:bpf-gone");
            return;
        };
        let mut k2 = key;
        k2.recirc_id = core.recirc;
        k2.ct_zone = core.req.zone;
        let flows: &Classifier<FLOW_WORDS, DpFlow> = flows;
        let (mut entries, sent) = match self.compose_setup(&key, &k2, flows, info) {
            Ok((e, sent)) if sent == tuple => (e, sent),
            Ok(_) => {
                self.undo(off, &hks, "ct:bpf-nat");
                return;
            }
            Err(Refusal::Why(why)) => {
                self.undo(off, &hks, why);
                return;
            }
            Err(Refusal::NotCached(_)) => {
                self.undo(off, &hks, "ct:bpf-not-cached");
                return;
            }
        };
        for (_, _, e) in &mut entries {
            let mut mask = *e.matching.mask();
            off.refine_mask(e.matching.key(), &mut mask);
            e.matching = Match::new(*e.matching.key(), mask);
        }
        let mut ids = [0u64; 3];
        let mut n = 0;
        let mut failed = None;
        for (i, (_, _, e)) in entries.iter().enumerate() {
            match off.adopt_ct(&e.matching, &e.actions, &hks[i]) {
                Ok(id) => {
                    ids[i] = id;
                    n += 1;
                }
                Err(why) => {
                    failed = Some(why);
                    break;
                }
            }
        }
        let failed = failed.or_else(|| (!tracker.kernel_setup(h)).then_some("ct:bpf-gone"));
        if let Some(why) = failed {
            for &id in &ids[..n] {
                off.remove(id);
            }
            self.undo(off, &hks[n..], why);
            return;
        }
        self.bpf_set_up += 1;
        self.record_setup(h, [tuple, sent], entries, ids, n, info, now);
    }

    /// Delete entries the program inserted that are not taken, and count
    /// why.
    fn undo(&mut self, off: &mut dyn FlowOffload, hks: &[FlowHashKey], why: &'static str) {
        for hk in hks {
            off.delete_ct_entry(hk);
        }
        self.bpf_undone += 1;
        self.refuse_setup(why);
    }

    fn refuse(&mut self, h: ConnHandle, why: &'static str) {
        if self.refused.len() >= REFUSED_MAX {
            self.refused.clear();
        }
        self.refused.insert(h, why);
    }

    /// Credit engine counters to the connections (and to the flows they
    /// were built from, so rules count them and aging sees them busy),
    /// then remove entries whose connection ended or whose flows changed.
    pub fn sync(
        &mut self,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        self.check_templates(tracker, off, flows, now);
        self.take_events(tracker, off, flows, now);
        self.forget_gone(tracker, off, flows, now);
        let mut gone = Vec::new();
        // Set-up connections: the flags their entries saw, per direction,
        // and the last hit (keyed by the original direction).
        let mut seen: Map<ConnHandle, ([u16; 2], Instant)> = Map::default();
        for (&(h, slot), o) in self.live.iter_mut() {
            let c = off.counters(o.kernel_id).unwrap_or_default();
            let (dp, db) = (
                c.packets.saturating_sub(o.credited.0),
                c.bytes.saturating_sub(o.credited.1),
            );
            o.credited = (c.packets.max(o.credited.0), c.bytes.max(o.credited.1));
            let used = c.used.unwrap_or(now);
            let alive = tracker.credit(h, o.reply, dp, db, used, now);
            if o.setup && c.used.is_some() {
                let orig = if o.reply { h.reversed() } else { h };
                let e = seen.entry(orig).or_insert(([0; 2], used));
                e.0[usize::from(o.reply)] |= c.tcp_flags;
                e.1 = e.1.max(used);
            }
            let mut flows_ok = true;
            for (id, actions) in &o.flows {
                match flows.get_mut(*id) {
                    Some(f) => {
                        flows_ok &= f.actions == *actions;
                        if dp > 0 {
                            f.stats.packets += dp;
                            f.stats.bytes += db;
                            f.ct_kernel.0 += dp;
                            f.ct_kernel.1 += db;
                            f.stats.used = Some(f.stats.used.map_or(used, |u| u.max(used)));
                        }
                    }
                    None => flows_ok = false,
                }
            }
            if !alive || !flows_ok {
                gone.push((h, slot));
            }
        }
        for (h, (flags, used)) in seen {
            tracker.kernel_tcp_flags(h, flags, used, now);
            self.note_flags(h, flags);
        }
        for (&(h, slot), o) in &self.live {
            if !o.holds(tracker.offload_info(h, now)) {
                gone.push((h, slot));
            }
        }
        // (An entry listed twice is removed once: the second finds nothing.)
        for k in gone {
            self.remove(k, tracker, off, flows, now);
        }
        // Refusals hold until the next tick: some are the engine's of the
        // moment (a full map, a port not yet taking redirects).
        self.refused.clear();
    }

    /// Look at connections set up in the kernel at least
    /// [`SETUP_POLL_AGE`] ago, oldest first: as many as were set up since
    /// the last call (so the poll keeps pace with the set-ups: each call's
    /// own share is what the batch before it added), and beyond those at
    /// most `budget` and for at most [`SETUP_POLL_TIME`] (a backlog is
    /// worked off a bounded slice at a time). Read their entries' flags
    /// (one counter read each) and hand them to the tracker; the entries
    /// of those that closed go now, instead of at the next tick's sync. A short
    /// connection is over by then, so its entries do not pile up in the
    /// kernel map for a second and are not all removed in one burst.
    /// Those still open are left to the sync, except those whose SYN-ACK
    /// was not seen: they are looked at again [`SETUP_HANDSHAKE_MAX`]
    /// after their set-up, and if still unanswered their entries go (the
    /// tracker carries them in userspace). The entries of closed
    /// connections go to the engine together
    /// ([`FlowOffload::begin_removals`]): one batched delete at the end of
    /// the call; those of timed-out (open) ones at once.
    pub fn poll_setup(
        &mut self,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
        budget: usize,
    ) {
        self.forget_gone(tracker, off, flows, now);
        let owed = std::mem::take(&mut self.setups_since_poll);
        if self.setup_queue.is_empty() && self.handshake_queue.is_empty() {
            return;
        }
        // The entries of the connections found closed go in one batched
        // delete at the end (three per connection: one system call for
        // them all instead of one each); their counters are those `look`
        // reads, and they forward until the delete: frames the kernel
        // counts on them in between (up to the rest of this poll; for a
        // closed connection at most its last ACK) are lost to the
        // connection's and flows' counters. An open connection's entries
        // (a handshake timed out) go at once instead: a SYN-ACK they
        // forwarded meanwhile would reach the client unseen by the
        // tracker.
        off.begin_removals();
        let started = Instant::now();
        let (mut n, mut skipped) = (0, 0);
        let skip_max = 16 * budget.max(owed).max(1);
        while skipped < skip_max
            && (n < owed || (n < owed + budget && started.elapsed() < SETUP_POLL_TIME))
        {
            let due = |q: &VecDeque<(ConnHandle, Instant)>, age| {
                q.front()
                    .copied()
                    .filter(|(_, at)| now.saturating_duration_since(*at) >= age)
            };
            let (h, at, last) =
                if let Some((h, at)) = due(&self.handshake_queue, SETUP_HANDSHAKE_MAX) {
                    self.handshake_queue.pop_front();
                    (h, at, true)
                } else if let Some((h, at)) = due(&self.setup_queue, SETUP_POLL_AGE) {
                    self.setup_queue.pop_front();
                    (h, at, false)
                } else {
                    break;
                };
            let Some(sc) = self.setup_conns.get(&h) else {
                // Its entries already went (the sync, a FIN or RST seen
                // in userspace): nothing to read.
                skipped += 1;
                continue;
            };
            if last && sc.answered {
                // Answered since (a sync saw the SYN-ACK): the sync's.
                skipped += 1;
                continue;
            }
            n += 1;
            self.look(h, tracker, off, flows, now);
            if self.setup_conns.get(&h).is_some_and(|c| !c.answered) {
                if last {
                    self.setup_timeouts += 1;
                    self.forget_at_once(h, tracker, off, flows, now);
                } else if self.handshake_queue.len() < SETUP_QUEUE_MAX {
                    self.handshake_queue.push_back((h, at));
                }
            }
        }
        off.commit_removals();
    }

    /// A bare TCP SYN (first-pass key `key`) is about to reach the
    /// tracker: if a connection with its tuple is set up in the kernel,
    /// the tracker first learns what the entries saw (so the SYN is
    /// judged against the connection's real state: replacing it if it
    /// closed, a retransmission if it is still opening), and the entries
    /// of a connection that ended go.
    pub fn refresh_for_syn(
        &mut self,
        key: &FlowKey,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        let t = Tuple::of(key);
        let Some(&h) = self.by_tuple.get(&t) else {
            return;
        };
        if let Some(sc) = self.setup_conns.get_mut(&h) {
            if sc.tuples[0] != t {
                // The translated tuple of a NATed connection (kept for
                // the busy check): this SYN is another connection's.
                return;
            }
            if sc
                .syn_read
                .is_some_and(|t| now.saturating_duration_since(t) < SYN_REFRESH_MIN)
            {
                return;
            }
            sc.syn_read = Some(now);
        }
        self.look(h, tracker, off, flows, now);
    }

    /// Whether any connection is set up in the kernel now.
    pub fn has_setup(&self) -> bool {
        !self.setup_conns.is_empty()
    }

    /// Read the entries of set-up connection `h` (original direction),
    /// hand their flags to the tracker, and remove those that no longer
    /// hold.
    fn look(
        &mut self,
        h: ConnHandle,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        let keys = [(h, MAIN), (h.reversed(), MAIN), (h.reversed(), SYNACK)];
        let mut seen = [0u16; 2];
        let mut used = None;
        for k in keys {
            let Some(o) = self.live.get(&k).filter(|o| o.setup) else {
                continue;
            };
            if let Some(c) = off.counters(o.kernel_id) {
                seen[usize::from(o.reply)] |= c.tcp_flags;
                used = used.max(c.used);
            }
        }
        if let Some(u) = used {
            tracker.kernel_tcp_flags(h, seen, u, now);
            self.note_flags(h, seen);
        }
        let info = tracker.offload_info(h, now);
        if info.is_some_and(|i| i.established) {
            // Answered, maybe by a SYN-ACK that missed its entry and went
            // through userspace.
            self.answered(h);
        }
        for k in keys {
            if self.live.get(&k).is_some_and(|o| !o.holds(info)) {
                self.remove(k, tracker, off, flows, now);
            }
        }
    }

    /// Flags the entries of set-up connection `h` saw: a SYN back means
    /// the handshake was answered.
    fn note_flags(&mut self, h: ConnHandle, seen: [u16; 2]) {
        if seen[1] & TCP_SYN != 0 {
            self.answered(h);
        }
    }

    /// Set-up connection `h`'s handshake was answered: its entries no
    /// longer count as pending.
    fn answered(&mut self, h: ConnHandle) {
        if let Some(c) = self.setup_conns.get_mut(&h).filter(|c| !c.answered) {
            c.answered = true;
            self.pending = self.pending.saturating_sub(1);
        }
    }

    /// Remove the entries of connections that left the tracker
    /// (`Conntrack::take_replaced`: replaced, expired, swept, flushed).
    pub fn forget_gone(
        &mut self,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        if !tracker.has_replaced() {
            return;
        }
        let gone: Vec<_> = tracker.take_replaced().collect();
        for h in gone {
            self.forget(h, tracker, off, flows, now);
        }
    }

    /// A packet of connection `h` just went through the tracker in
    /// userspace (a FIN or RST, a commit writing its mark or label...): if
    /// the connection has kernel entries that no longer hold, they go now,
    /// not at the next sync.
    pub fn check(
        &mut self,
        h: ConnHandle,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        if self.live.is_empty() {
            return;
        }
        for (d, slot) in live_keys(h) {
            let Some(o) = self.live.get(&(d, slot)) else {
                continue;
            };
            if !o.holds(tracker.offload_info(d, now)) {
                self.remove((d, slot), tracker, off, flows, now);
            }
        }
    }

    /// Connection `h` is gone (replaced by a new one with its tuple): its
    /// entries go now, before the new connection's are installed.
    pub fn forget(
        &mut self,
        h: ConnHandle,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        for key in live_keys(h) {
            self.remove(key, tracker, off, flows, now);
        }
    }

    /// [`Self::forget`] inside the poll's batch of removals, for an open
    /// connection: its entries are deleted at once, not at the commit (a
    /// frame they forward until then, a SYN-ACK, would be unseen by the
    /// tracker).
    fn forget_at_once(
        &mut self,
        h: ConnHandle,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        for key in live_keys(h) {
            if let Some(o) = self.live.get(&key) {
                off.exempt_from_batch(o.kernel_id);
            }
        }
        self.forget(h, tracker, off, flows, now);
    }

    fn remove(
        &mut self,
        (h, slot): (ConnHandle, u8),
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        if let Some(o) = self.live.remove(&(h, slot)) {
            if let Some(c) = off.remove(o.kernel_id) {
                let dp = c.packets.saturating_sub(o.credited.0);
                let db = c.bytes.saturating_sub(o.credited.1);
                let used = c.used.unwrap_or(now);
                if o.setup && c.used.is_some() {
                    // What the entry saw last, before it is forgotten.
                    let mut f = [0; 2];
                    f[usize::from(o.reply)] = c.tcp_flags;
                    let orig = if o.reply { h.reversed() } else { h };
                    tracker.kernel_tcp_flags(orig, f, used, now);
                    self.note_flags(orig, f);
                }
                tracker.credit(h, o.reply, dp, db, used, now);
                if dp > 0 {
                    for (id, _) in &o.flows {
                        if let Some(f) = flows.get_mut(*id) {
                            f.stats.packets += dp;
                            f.stats.bytes += db;
                            f.ct_kernel.0 += dp;
                            f.ct_kernel.1 += db;
                            f.stats.used = Some(f.stats.used.map_or(used, |u| u.max(used)));
                        }
                    }
                }
            }
            self.removed += 1;
            let orig = if o.reply { h.reversed() } else { h };
            let any = [MAIN, SYNACK].iter().any(|&s| {
                self.live.contains_key(&(orig, s)) || self.live.contains_key(&(orig.reversed(), s))
            });
            if !any {
                // Its last entry: the tracker sees every packet again.
                tracker.kernel_entries_gone(orig);
                if let Some(sc) = self.setup_conns.remove(&orig) {
                    if !sc.answered {
                        self.pending = self.pending.saturating_sub(1);
                    }
                    for t in sc.tuples {
                        if self.by_tuple.get(&t) == Some(&orig) {
                            self.by_tuple.remove(&t);
                        }
                    }
                }
            }
        }
    }

    /// Remove every entry (the engine goes away, or all flows are flushed).
    pub fn clear(
        &mut self,
        tracker: &mut Conntrack,
        off: &mut dyn FlowOffload,
        flows: &mut Classifier<FLOW_WORDS, DpFlow>,
        now: Instant,
    ) {
        self.drop_templates(off);
        self.take_events(tracker, off, flows, now);
        let hs: Vec<(ConnHandle, u8)> = self.live.keys().copied().collect();
        for h in hs {
            self.remove(h, tracker, off, flows, now);
        }
        self.refused.clear();
    }

    /// Flows changed: refusals may no longer hold.
    pub fn forget_refusals(&mut self) {
        self.refused.clear();
    }
}

/// Why a set-up was not possible: a reason for `stats`, or the key of a
/// reply packet whose flow is not cached (the datapath may translate it
/// and try again, see [`CtOffloads::setup`]). Only the reply's: a load
/// balancer's reply megaflows carry the client's port (its table looks at
/// the destination port for the VIP's new connections, so the reply's
/// lookup un-wildcards it), so no earlier connection cached them; the
/// originator's must be cached, so that the first connection of a kind
/// still goes through userspace.
#[derive(Debug)]
enum Refusal {
    Why(&'static str),
    NotCached(Box<FlowKey>),
}

impl Refusal {
    /// A miss of the originator's flows is a plain refusal: the first
    /// connection of a kind goes through userspace.
    fn orig(r: Refusal) -> Refusal {
        match r {
            Refusal::NotCached(_) => Refusal::Why("ct:setup-not-cached"),
            r => r,
        }
    }
}

impl From<&'static str> for Refusal {
    fn from(why: &'static str) -> Refusal {
        Refusal::Why(why)
    }
}

/// A set-up's entries: slot, reply direction, entry.
type SetupEntries<'a> = [(u8, bool, SetupEntry<'a>); 3];

/// A first pass found for a set-up: the flow, its recirculation id, and
/// the `ct_state` NAT bit and rewrite it gives the packet.
type FirstPass<'a> = ((RuleId, &'a DpFlow), u32, (u32, NatRewrite));

/// A reply segment's first pass and second-pass flow, as
/// [`CtOffloads::compose_setup`] found them.
type ReplyPasses<'a> = (FirstPass<'a>, (RuleId, &'a DpFlow));

/// One entry [`CtOffloads::setup`] installs: the flows it was composed
/// from (with their matches, for the engine's judgement), its match and
/// actions.
/// The two flows are borrowed from the cache (it does not change during a
/// set-up): their actions are cloned only into the [`CtOffload`] of an
/// entry actually installed, and their matches (624 bytes each) are not
/// copied at all.
struct SetupEntry<'a> {
    from: ComposedFrom<'a>,
    matching: Match,
    actions: Vec<DpAction>,
}

impl<'a> SetupEntry<'a> {
    fn compose(
        f1: (RuleId, &'a DpFlow),
        k1: &FlowKey,
        f2: (RuleId, &'a DpFlow),
        tcp: (u16, u16),
        nat: NatRewrite,
    ) -> Result<SetupEntry<'a>, &'static str> {
        let (matching, actions) = compose(f1.1, k1, f2.1, Some(tcp), nat)?;
        Ok(SetupEntry {
            from: ComposedFrom([f1, f2]),
            matching,
            actions,
        })
    }
}

/// The two cached flows (first pass, second pass) a connection entry is
/// composed from, borrowed from the cache. [`CtOffloads::consider`] and
/// [`CtOffloads::setup`] both hand them to the engine and keep them the
/// same way; one place builds both forms.
#[derive(Clone, Copy)]
struct ComposedFrom<'a>([(RuleId, &'a DpFlow); 2]);

impl<'a> ComposedFrom<'a> {
    /// Their matches and actions, for the engine's judgement of the
    /// composed entry ([`FlowOffload::offload_ct`]); nothing copied.
    fn parts(self) -> [(&'a Match, &'a [DpAction]); 2] {
        self.0.map(|(_, f)| (&f.matching, f.actions.as_slice()))
    }

    /// Their ids with the actions the entry was composed from, as a
    /// [`CtOffload`] keeps them (to notice a flow that changed): cloned
    /// only for an entry actually installed.
    fn kept(self) -> [(RuleId, Vec<DpAction>); 2] {
        self.0.map(|(id, f)| (id, f.actions.clone()))
    }
}

/// The cached flow a key hits.
fn cached<'a>(
    flows: &'a Classifier<FLOW_WORDS, DpFlow>,
    k: &FlowKey,
) -> Result<(RuleId, &'a DpFlow), Refusal> {
    flows
        .lookup(k.words())
        .ok_or_else(|| Refusal::NotCached(Box::new(*k)))
}

/// The cached first-pass flow `k` hits, if it is exactly "track in `zone`
/// (translating, with `nat`), then recirculate": its recirculation id and
/// the `ct_state` NAT bit and rewrite it gives the connection's packets
/// (`conn_nat`, the connection's for that direction, if the `ct` has
/// `nat`; none if not).
fn plain_first_pass<'a>(
    flows: &'a Classifier<FLOW_WORDS, DpFlow>,
    k: &FlowKey,
    zone: u16,
    conn_nat: (u32, NatRewrite),
) -> Result<FirstPass<'a>, Refusal> {
    let f = cached(flows, k)?;
    match f.1.actions.as_slice() {
        [DpAction::Ct {
            zone: z,
            commit: false,
            force: false,
            mark: None,
            label: None,
            nat,
        }, DpAction::Recirc(r)]
            if *z == zone =>
        {
            // With `nat`, the packet is translated and its verdict gets
            // the connection's `+snat`/`+dnat` bit.
            let rw = if nat.is_some() {
                conn_nat
            } else {
                (0, NatRewrite::default())
            };
            Ok((f, *r, rw))
        }
        _ => Err(Refusal::Why("ct:setup-first-pass")),
    }
}

/// Write a NAT rewrite into a key, as the executor writes it into the
/// packet (so the key is what the next pass extracts).
fn apply_nat(k: &mut FlowKey, nat: &NatRewrite) {
    match nat.src {
        Some(IpAddr::V4(a)) => k.nw_src = u32::from(a),
        Some(IpAddr::V6(a)) => k.ipv6_src = a.octets(),
        None => {}
    }
    match nat.dst {
        Some(IpAddr::V4(a)) => k.nw_dst = u32::from(a),
        Some(IpAddr::V6(a)) => k.ipv6_dst = a.octets(),
        None => {}
    }
    if let Some(p) = nat.sport {
        k.tp_src = p;
    }
    if let Some(p) = nat.dport {
        k.tp_dst = p;
    }
}

/// A set-up connection's second pass must send the packet out of exactly
/// one port other than the one it came in on, with at most MAC rewrites
/// before (a load balancer's `mod_dl_dst`): that port and the key as the
/// packet leaves, from which its peer's reply is guessed.
fn leaves(actions: &[DpAction], k: &FlowKey, in_port: u32) -> Result<(u32, FlowKey), &'static str> {
    let mut sent = *k;
    let (last, sets) = actions.split_last().ok_or("ct:setup-output")?;
    for a in sets {
        match a {
            DpAction::SetEthSrc(m) => sent.dl_src = *m,
            DpAction::SetEthDst(m) => sent.dl_dst = *m,
            _ => return Err("ct:setup-output"),
        }
    }
    match last {
        DpAction::Output(p) if *p != in_port => Ok((*p, sent)),
        _ => Err("ct:setup-output"),
    }
}

/// Compose one direction's entry from its two passes' flows and the key of
/// a packet of it. `tcp`: the TCP flags the entry checks (mask, value).
fn compose(
    f1: &DpFlow,
    key: &FlowKey,
    f2: &DpFlow,
    tcp: Option<(u16, u16)>,
    nat: NatRewrite,
) -> Result<(Match, Vec<DpAction>), &'static str> {
    // The first pass must be exactly "track, then recirculate": anything
    // else would have to run before or beside the tracker.
    let nat_in_ct = match f1.actions.as_slice() {
        [DpAction::Ct {
            commit: false,
            force: false,
            mark: None,
            label: None,
            nat,
            ..
        }, DpAction::Recirc(_)] => nat.is_some(),
        _ => return Err("ct:first-pass-not-plain"),
    };
    if f2.actions.iter().any(|a| {
        matches!(
            a,
            DpAction::Ct { .. }
                | DpAction::Recirc(_)
                | DpAction::CtClear
                | DpAction::Controller { .. }
                | DpAction::Meter(_)
        )
    }) {
        return Err("ct:second-pass-not-plain");
    }
    if let Some((mask, value)) = tcp {
        if key.tcp_flags & mask != value {
            return Err("ct:control-segment");
        }
    }
    let nat = if nat_in_ct {
        nat
    } else {
        NatRewrite::default()
    };
    if nat.icmp_id.is_some() {
        return Err("ct:icmp-nat");
    }
    // What either pass looked at, minus what only exists in userspace
    // (the recirculation, the ct fields, registers and metadata: in the
    // first pass they are zero for every packet, in the second they follow
    // from the connection and the frozen walk, both fixed here).
    let mut m = f1.matching.mask().0;
    for (a, b) in m.words_mut().iter_mut().zip(f2.matching.mask().words()) {
        *a |= *b;
    }
    m.recirc_id = 0;
    m.clear_userspace_only();
    // The connection, exactly.
    m.in_port = u32::MAX;
    m.dl_type = 0xffff;
    m.nw_proto = 0xff;
    match key.dl_type {
        0x0800 => {
            m.nw_src = u32::MAX;
            m.nw_dst = u32::MAX;
        }
        0x86dd => {
            m.ipv6_src = [0xff; 16];
            m.ipv6_dst = [0xff; 16];
        }
        _ => return Err("ct:not-ip"),
    }
    m.tp_src = 0xffff;
    m.tp_dst = 0xffff;
    m.nw_frag = 0xff;
    if let Some((mask, _)) = tcp {
        m.tcp_flags |= mask;
    }
    let mut actions = Vec::with_capacity(f2.actions.len() + 4);
    match nat.src {
        Some(IpAddr::V4(a)) => actions.push(DpAction::SetIpv4Src(u32::from(a))),
        Some(IpAddr::V6(a)) => actions.push(DpAction::SetIpv6Src(a.octets())),
        None => {}
    }
    match nat.dst {
        Some(IpAddr::V4(a)) => actions.push(DpAction::SetIpv4Dst(u32::from(a))),
        Some(IpAddr::V6(a)) => actions.push(DpAction::SetIpv6Dst(a.octets())),
        None => {}
    }
    if let Some(p) = nat.sport {
        actions.push(DpAction::SetTpSrc(p));
    }
    if let Some(p) = nat.dport {
        actions.push(DpAction::SetTpDst(p));
    }
    actions.extend(f2.actions.iter().cloned());
    let mut k = *key;
    k.recirc_id = 0;
    Ok((Match::new(k, FlowMask(m)), actions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_flow::FlowMask;

    /// MUST-FIX 3 of the ctbpf review: a retired template's core stays
    /// however many templates are retired after it until the ring was
    /// found empty twice (17 rewrites in one round lost it before).
    #[test]
    fn retired_cores_stay_until_two_drains() {
        let t0 = Instant::now();
        let ms = std::time::Duration::from_millis;
        let mut r = Retired::<u64>::default();
        for g in 0..100 {
            r.push(g);
        }
        assert!(r.find(|&g| g == 0).is_some(), "evicted by count");
        r.drained(t0);
        r.push(100);
        assert!(r.find(|&g| g == 0).is_some(), "gone at the first drain");
        // `sync` drains twice in a row: the second does not count.
        r.drained(t0 + ms(1));
        assert!(r.find(|&g| g == 0).is_some(), "gone within a tick");
        r.drained(t0 + ms(20));
        assert!(r.find(|&g| g == 0).is_none(), "kept past the second drain");
        assert!(r.find(|&g| g == 100).is_some());
        r.drained(t0 + ms(40));
        assert!(r.is_empty());
    }

    /// The TC program wakes the daemon only when an eighth of its ring is
    /// unread, so the daemon's sleep is capped while reports can come: a
    /// template in the engine, or reports of a retired one not yet
    /// drained; not with none (the setting off: no 2-ms wake-ups), nor
    /// while the reports are held (tests).
    #[test]
    fn the_daemon_sleeps_briefly_only_while_reports_can_come() {
        let mut c = CtOffloads::default();
        assert_eq!(c.events_wait(), None, "no template");
        c.templates.insert(
            (1, 0x0800),
            Template {
                gen: 6,
                flows: Vec::new(),
                syn_flows: [RuleId::external(1), RuleId::external(2)],
                req: CtRequest::default(),
                recirc: 1,
                vmask: FlowKey::default(),
                vkey: FlowKey::default(),
            },
        );
        assert_eq!(c.events_wait(), Some(CT_EVENTS_WAIT), "a template");
        c.templates.clear();
        assert_eq!(c.events_wait(), None, "its template removed, not retired");
        c.retired.push(TemplateCore {
            gen: 7,
            syn_flows: [RuleId::external(1), RuleId::external(2)],
            req: CtRequest::default(),
            recirc: 1,
        });
        assert_eq!(c.events_wait(), Some(CT_EVENTS_WAIT), "a retired template");
        c.events_held = true;
        assert_eq!(c.events_wait(), None, "held");
        c.events_held = false;
        let t0 = Instant::now();
        c.retired.drained(t0);
        c.retired.drained(t0 + RETIRED_TICK * 2);
        assert_eq!(c.events_wait(), None, "the retired core gone");
        assert!(CT_EVENTS_WAIT <= std::time::Duration::from_millis(10));
    }

    /// Review of ctpoll, MUST-FIX 1: reports left in the ring when no
    /// template exists (a daemon died under load and its successor
    /// adopted the pinned engine, whose templates it cleared) are drained
    /// and undone, not left to keep the ring readable forever.
    #[test]
    fn reports_without_a_template_are_drained_and_undone() {
        let (mut off, h) = crate::offload::dummy::DummyOffload::new(16);
        let mut c = CtOffloads::default();
        let mut tracker = Conntrack::new(Default::default());
        let mut flows = Classifier::<FLOW_WORDS, DpFlow>::new();
        let hk = |n: u64| FlowHashKey {
            mask_idx: 1,
            pad: 0,
            hash: n,
        };
        for g in 0..3u64 {
            h.report_ct(CtEvent {
                gen: 40 + g,
                hk: [hk(3 * g), hk(3 * g + 1), hk(3 * g + 2)],
                in_port: 1,
                len: 0,
                frame: [0; crate::datapath::offload::CT_EV_FRAME],
            });
        }
        assert!(c.templates.is_empty() && c.retired.is_empty());
        c.take_events(&mut tracker, &mut off, &mut flows, Instant::now());
        assert_eq!(h.ct_reports_left(), 0, "the ring was not drained");
        assert_eq!(h.ct_deleted(), (0..9).map(hk).collect::<Vec<_>>());
        assert_eq!(c.bpf_undone, 3);
    }

    /// The environment's words for on and off, as `set BRIDGE ct_setup=`
    /// takes them; anything else is no answer (the default, warned).
    #[test]
    fn env_switch_words() {
        for v in ["0", "off", "OFF", "false", "no", " no "] {
            assert_eq!(parse_switch(v), Some(false), "{v:?}");
        }
        for v in ["1", "on", "true", "Yes"] {
            assert_eq!(parse_switch(v), Some(true), "{v:?}");
        }
        for v in ["", "2", "disable", "of"] {
            assert_eq!(parse_switch(v), None, "{v:?}");
        }
    }

    /// Set-up in the kernel, with and without NAT, is on unless the
    /// environment turns it off (issue 36: it raised connections/s).
    #[test]
    fn set_up_is_on_by_default() {
        if std::env::var_os("NICFLOW_CT_SETUP").is_none() {
            assert!(setup_default());
            assert!(CtOffloads::default().setup_enabled);
        }
        if std::env::var_os("NICFLOW_CT_SETUP_NAT").is_none() {
            assert!(setup_nat_default());
            assert!(CtOffloads::default().setup_nat);
        }
        if std::env::var_os("NICFLOW_CT_SETUP_BPF").is_none() {
            assert!(setup_bpf_default());
            assert!(CtOffloads::default().setup_bpf);
        }
    }

    /// A template's vmask reads each flow's mask as fields of the SYN's
    /// key: a reply flow's source is the SYN's destination (addresses,
    /// ports, MACs), its in_port and TCP flags are the template's own, and
    /// the original tuple's ct fields are the SYN's whichever way round.
    #[test]
    fn a_reply_flow_constrains_the_syn_the_other_way_round() {
        let m = FlowKey {
            nw_src: u32::MAX,
            tp_src: 0xffff,
            dl_src: [0xff; 6],
            in_port: u32::MAX,
            tcp_flags: 0x012,
            ct_tp_dst: 0xffff,
            ct_state: 0xff,
            ..FlowKey::default()
        };
        let mut v = FlowKey::default();
        fold_mask(&mut v, &m, true, false);
        assert_eq!((v.nw_src, v.nw_dst), (0, u32::MAX));
        assert_eq!((v.tp_src, v.tp_dst), (0, 0xffff));
        assert_eq!((v.dl_src, v.dl_dst), ([0; 6], [0xff; 6]));
        assert_eq!((v.in_port, v.tcp_flags, v.ct_state), (0, 0, 0));
        // The SYN's own flow: the same way round, its flags too.
        let mut w = FlowKey::default();
        fold_mask(&mut w, &m, false, true);
        assert_eq!((w.nw_src, w.nw_dst), (u32::MAX, 0));
        assert_eq!((w.tp_src, w.tp_dst), (0xffff, 0xffff));
        assert_eq!((w.in_port, w.tcp_flags), (u32::MAX, 0x012));
    }

    fn flow(mask: FlowMask, actions: Vec<DpAction>) -> DpFlow {
        DpFlow {
            matching: Match::new(FlowKey::default(), mask),
            actions,
            stats: Default::default(),
            created: Instant::now(),
            xlate_key: FlowKey::default(),
            rules: Vec::new(),
            learned: None,
            credited: (0, 0),
            placement: None,
            kernel: Default::default(),
            ct_kernel: (0, 0),
        }
    }

    /// The established entries' TCP check.
    const EST: Option<(u16, u16)> = Some((TCP_CHECKED, TCP_ACK));

    fn ct(nat: bool) -> DpAction {
        DpAction::Ct {
            zone: 0,
            commit: false,
            force: false,
            mark: None,
            label: None,
            nat: nat.then(Default::default),
        }
    }

    /// A TCP segment's first-pass key, with `flags`.
    fn key(flags: u16) -> FlowKey {
        FlowKey {
            in_port: 1,
            dl_type: 0x0800,
            nw_proto: 6,
            nw_src: 0xc612_0001,
            nw_dst: 0xc612_0002,
            tp_src: 40000,
            tp_dst: 80,
            tcp_flags: flags,
            nw_ttl: 64,
            ..Default::default()
        }
    }

    /// First pass: `ip,ct_state=-trk`; second: `ct_state=+trk+est,dl_dst`.
    fn passes(f2_actions: Vec<DpAction>) -> (DpFlow, DpFlow) {
        let mut m1 = FlowMask::catchall();
        m1.0.in_port = u32::MAX;
        m1.0.dl_type = 0xffff;
        m1.0.ct_state = 0x20;
        m1.0.recirc_id = u32::MAX;
        let mut m2 = m1;
        m2.0.ct_state = 0x22;
        m2.0.dl_dst = [0xff; 6];
        m2.0.regs[0] = u32::MAX;
        (
            flow(m1, vec![ct(false), DpAction::Recirc(1)]),
            flow(m2, f2_actions),
        )
    }

    #[test]
    fn composes_the_exact_connection_and_the_second_pass() {
        let (f1, f2) = passes(vec![DpAction::Output(2)]);
        let (m, a) = compose(&f1, &key(0x018), &f2, EST, NatRewrite::default()).unwrap();
        assert_eq!(a, vec![DpAction::Output(2)]);
        let mask = &m.mask().0;
        // The connection exactly, what either pass looked at, and the TCP
        // flags that must go up: ACK required, SYN/FIN/RST refused.
        assert_eq!((mask.nw_src, mask.nw_dst), (u32::MAX, u32::MAX));
        assert_eq!(
            (mask.tp_src, mask.tp_dst, mask.nw_proto),
            (0xffff, 0xffff, 0xff)
        );
        assert_eq!(mask.dl_dst, [0xff; 6]);
        assert_eq!(mask.tcp_flags, TCP_CHECKED);
        assert_eq!(m.key().tcp_flags, TCP_ACK);
        // Nothing only userspace knows.
        assert_eq!((mask.ct_state, mask.recirc_id, mask.regs[0]), (0, 0, 0));
        assert_eq!(mask.nw_frag, 0xff, "fragments never match");
    }

    #[test]
    fn nat_rewrites_come_before_the_second_pass_when_the_ct_had_nat() {
        let (mut f1, f2) = passes(vec![DpAction::Output(2)]);
        let rw = NatRewrite {
            dst: Some("198.18.0.10".parse().unwrap()),
            dport: Some(8080),
            ..Default::default()
        };
        // Without `nat` in the first pass's ct, userspace writes nothing.
        let (_, a) = compose(&f1, &key(0x010), &f2, EST, rw).unwrap();
        assert_eq!(a, vec![DpAction::Output(2)]);
        f1.actions[0] = ct(true);
        let (_, a) = compose(&f1, &key(0x010), &f2, EST, rw).unwrap();
        assert_eq!(
            a,
            vec![
                DpAction::SetIpv4Dst(0xc612_000a),
                DpAction::SetTpDst(8080),
                DpAction::Output(2)
            ]
        );
        let icmp = NatRewrite {
            icmp_id: Some(7),
            ..Default::default()
        };
        assert_eq!(
            compose(&f1, &key(0x010), &f2, EST, icmp).unwrap_err(),
            "ct:icmp-nat"
        );
    }

    #[test]
    fn refuses_what_must_stay_with_the_tracker() {
        let (f1, f2) = passes(vec![DpAction::Output(2)]);
        for flags in [0x002, 0x011, 0x014, 0x000, 0x008] {
            assert_eq!(
                compose(&f1, &key(flags), &f2, EST, NatRewrite::default()).unwrap_err(),
                "ct:control-segment",
                "flags {flags:#x}"
            );
        }
        let (mut c1, _) = passes(vec![]);
        c1.actions[0] = DpAction::Ct {
            zone: 0,
            commit: true,
            force: false,
            mark: None,
            label: None,
            nat: None,
        };
        assert_eq!(
            compose(&c1, &key(0x010), &f2, EST, NatRewrite::default()).unwrap_err(),
            "ct:first-pass-not-plain"
        );
        let (f1, f2) = passes(vec![ct(false), DpAction::Recirc(2)]);
        assert_eq!(
            compose(&f1, &key(0x010), &f2, EST, NatRewrite::default()).unwrap_err(),
            "ct:second-pass-not-plain"
        );
    }
}
