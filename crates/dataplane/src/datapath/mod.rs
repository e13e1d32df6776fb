//! The userspace fast path: exact-match cache, megaflow cache, action executor.
//!
//! A batch of frames from one port's receive ring comes in; each frame is
//! parsed once into a [`FlowKey`], looked up in the [`emc`] and then in the
//! megaflow cache (a classifier of masked datapath flows, all one priority),
//! and the matching flow's [`DpAction`] list is executed on it. Frames that
//! miss both tiers become *upcalls*: the [`UpcallHandler`] (the slow path,
//! `ofproto`) decides, the frame is executed with that decision, and the
//! decision is installed as a new datapath flow so the rest of the flow stays
//! in the fast path. Outputs are appended to a [`TxBatch`] that the caller
//! hands to the ports' transmit rings.
//!
//! Revalidation keeps the cache honest: when rules or MAC-learning state
//! change, [`Datapath::revalidate`] re-translates every datapath flow from the
//! key that created it and fixes or removes the ones whose decision changed,
//! before the change is acknowledged to whoever made it.
//!
//! Nothing on the per-packet path allocates once the scratch vectors and the
//! buffer pool have warmed up.

pub mod action;
pub mod ct;
pub mod ct_offload;
pub mod emc;
pub mod execute;
pub mod meter;
pub mod offload;
pub mod select;

pub use action::{format_actions, DpAction, DropReason};
pub use execute::TxBatch;
pub use offload::{
    EngineStats, FlowOffload, KernelCounters, ManagerCounters, Placement, PlacementCounts,
    PortOffload, PortOffloadError, ProfileStatus, ProviderStatus,
};

use nicflow_classifier::{Classifier, RuleId};
use nicflow_flow::{FlowKey, FlowMask, Match, FLOW_WORDS};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::parse::ParseError;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Default most datapath flows a bridge caches (`flow_limit`), as OVS's
/// `other_config:flow-limit` default. Beyond it packets are still
/// forwarded, each through the slow path.
pub const DEFAULT_FLOW_LIMIT: usize = 200_000;

/// Default upcalls per bridge per daemon round (`round_upcalls`).
pub const DEFAULT_ROUND_UPCALLS: usize = 256;

/// Default time one daemon round may take frames for (`round_time`): the
/// control socket is served between rounds, so this bounds how long a
/// flood of new flows can hold a request up.
pub const DEFAULT_ROUND_TIME: Duration = Duration::from_millis(5);

/// Most spare buffers the datapath keeps for reuse.
pub const POOL_MAX: usize = 4096;

/// Most passes one received packet may make through the datapath (the
/// first plus recirculations), as OVS's `MAX_RECIRC_DEPTH` bounds it.
pub const MAX_RECIRC: u32 = 6;

/// Most recirculated copies of one received packet in all (a rule set
/// with several `ct(table=N)` per action list would otherwise fan out to
/// k^5 passes).
pub const MAX_PASSES: u32 = 64;

/// Most flows one connection's set-up in the kernel translates and caches
/// ahead of its packets (`install_for_setup`): the originator's two passes
/// and the reply's two, for its ACK and its SYN-ACK.
const SETUP_XLATE_MAX: usize = 6;

/// Reference from a datapath flow to what its translation went through, so
/// the flow's counters can be credited there (OVS's xlate cache): one per
/// table lookup, with the rule it hit (`dump-flows`) or `None` for a miss
/// (table statistics count both), and one per group and bucket it ran (in
/// the slow path's reserved group table, always with a rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleRef {
    pub table: u8,
    pub rule: Option<RuleId>,
}

/// The slow path's answer for one packet.
#[derive(Clone, Debug, Default)]
pub struct XlateOut {
    /// Bits of the key the decision depended on: the megaflow mask.
    pub mask: FlowMask,
    pub actions: Vec<DpAction>,
    /// Table lookups (and the rules they hit) and groups of the walk
    /// through the tables, for statistics.
    pub rules: Vec<RuleRef>,
    /// False when the decision must not be cached (e.g. it had side effects
    /// that must happen for every packet).
    pub install: bool,
    /// The (VLAN, MAC, port) the `normal` action learned from this flow's
    /// source, refreshed while the flow carries traffic.
    pub learned: Option<(u16, [u8; 6], u32)>,
    /// The translation changed slow-path state other flows may depend on
    /// (MAC learning): every cached flow must be revalidated before the next
    /// packet is processed.
    pub state_changed: bool,
    /// Frames the slow path built itself, sent as they are instead of
    /// running `actions` on the packet (a P4 program's deparser output
    /// that no datapath action list expresses, e.g. a pushed header).
    /// Only for decisions that are not installed.
    pub emitted: Vec<(u32, Vec<u8>)>,
}

/// Frames a slow path built itself: (output port, bytes).
pub type Frames = Vec<(u32, Vec<u8>)>;

/// Does the L4 header sit elsewhere than right after a fixed-size IP
/// header (IPv4 options, IPv6 extension headers)?
pub fn odd_ip_layout(l: &nicflow_packet::parse::Layout) -> bool {
    use nicflow_packet::parse::L3Kind;
    let (l3, l4) = (l.l3_offset, l.l4_offset);
    match l.l3 {
        L3Kind::Ipv4 => l4 != l3 + 20,
        L3Kind::Ipv6 => l4 != l3 + 40,
        _ => false,
    }
}

/// The slow path as the datapath sees it.
pub trait UpcallHandler {
    /// Decide for a packet that missed the caches. May have side effects
    /// (MAC learning).
    fn upcall(&mut self, key: &FlowKey, packet: &[u8], now: Instant) -> XlateOut;
    /// Decide again for an installed flow's key, without side effects.
    fn revalidate(&mut self, key: &FlowKey) -> XlateOut;
    /// A frame nicflow's parser refused (too short for Ethernet, bad IP
    /// header): `None` drops it as a parse error (OpenFlow tables match
    /// on parsed fields only); a P4 program parses frames itself and
    /// answers with the frames it sends. Nothing is cached.
    /// The `bool`: the slow path's state changed (a P4 program learned
    /// an entry): cached flows must be revalidated.
    fn unparsed(&mut self, _in_port: u32, _packet: &[u8], _now: Instant) -> Option<(Frames, bool)> {
        None
    }
    /// Which cached flows the state changes since the last call could
    /// affect, so that a change reported by an upcall (`state_changed`)
    /// re-translates those flows only instead of every cached one: their
    /// translation keys are pushed onto `keys` and `true` is returned.
    /// `false` (the default, as for OpenFlow's MAC learning, which any
    /// flow may depend on): any flow, revalidate them all. Each call
    /// starts a new period of changes.
    fn changed_scope(&mut self, _keys: &mut Vec<FlowKey>) -> bool {
        false
    }
    /// Credit traffic seen by a datapath flow to the rules it came from (and
    /// keep the MAC it learned from alive).
    fn credit(
        &mut self,
        rules: &[RuleRef],
        learned: Option<(u16, [u8; 6], u32)>,
        packets: u64,
        bytes: u64,
        used: Instant,
    );
}

#[derive(Clone, Copy, Debug, Default)]
pub struct FlowStats {
    pub packets: u64,
    pub bytes: u64,
    pub used: Option<Instant>,
    /// OR of the TCP flags seen, as `ovs-dpctl` shows them.
    pub tcp_flags: u16,
}

/// One cached decision.
#[derive(Clone, Debug)]
pub struct DpFlow {
    pub matching: Match,
    pub actions: Vec<DpAction>,
    pub stats: FlowStats,
    pub created: Instant,
    /// The key of the packet that created the flow, re-translated during
    /// revalidation.
    pub xlate_key: FlowKey,
    pub rules: Vec<RuleRef>,
    pub learned: Option<(u16, [u8; 6], u32)>,
    /// Counters already credited to `rules` (totals: userspace + kernel).
    credited: (u64, u64),
    /// Where the flow runs when the datapath has an offload engine: `None`
    /// without one.
    pub placement: Option<Placement>,
    /// The kernel's share of the traffic: counters of removed kernel
    /// entries plus the live entry's as last read.
    pub kernel: offload::KernelShare,
    /// Packets and bytes of established connections composed from this
    /// flow (`ct_offload`) that ran in the kernel: credited into `stats`
    /// too, kept apart for `offload-plan`'s host/kernel split.
    pub ct_kernel: (u64, u64),
}

impl DpFlow {
    /// Userspace and kernel counters together: what the flow handled.
    pub fn total(&self) -> FlowStats {
        let k = self.kernel.stats();
        FlowStats {
            packets: self.stats.packets + k.packets,
            bytes: self.stats.bytes + k.bytes,
            used: match (self.stats.used, k.used) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
            tcp_flags: self.stats.tcp_flags | k.tcp_flags,
        }
    }
}

#[derive(Clone, Debug)]
pub struct DatapathConfig {
    /// Exact-match cache slots (power of two; 0 disables the EMC).
    pub emc_entries: usize,
    /// Most datapath flows held at once; beyond it packets are still
    /// forwarded, via the slow path, but nothing new is cached.
    pub flow_limit: usize,
    /// A datapath flow unused for this long is removed.
    pub idle_timeout: Duration,
    /// Upcalls allowed per processed batch; misses beyond it are dropped and
    /// counted, so a flood of new flows cannot starve established ones.
    pub upcall_budget: usize,
    /// Upcalls one daemon round may make per bridge ([`DEFAULT_ROUND_UPCALLS`]):
    /// once spent, the bridge takes no more frames from its rings this
    /// round, so the daemon serves control requests before going on. What
    /// stays in a ring waits for the next round (deferred, not dropped);
    /// only a ring that overflows drops, and the port counts it.
    pub round_upcalls: usize,
    /// The same bound in time ([`DEFAULT_ROUND_TIME`]): a round stops
    /// taking frames once it has run this long, whatever it spent it on.
    pub round_time: Duration,
    /// When false every packet goes to the slow path (the reference side of
    /// the differential test).
    pub caches_enabled: bool,
    /// Bound of the controller queue.
    pub controller_queue_len: usize,
}

impl Default for DatapathConfig {
    fn default() -> Self {
        DatapathConfig {
            emc_entries: 8192,
            flow_limit: DEFAULT_FLOW_LIMIT,
            idle_timeout: Duration::from_secs(10),
            upcall_budget: 1024,
            round_upcalls: DEFAULT_ROUND_UPCALLS,
            round_time: DEFAULT_ROUND_TIME,
            caches_enabled: true,
            controller_queue_len: 1024,
        }
    }
}

/// Counters for every cache tier and every drop reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DpStats {
    pub packets: u64,
    pub emc_hits: u64,
    pub megaflow_hits: u64,
    pub upcalls: u64,
    /// Flows installed / removed (by aging, revalidation or flush).
    pub flows_installed: u64,
    pub flows_removed: u64,
    /// Upcalls whose flow could not be cached because of `flow_limit`.
    pub flow_limit_hits: u64,
    /// Misses dropped because the batch's upcall budget was spent.
    pub upcall_budget_drops: u64,
    /// Malformed frames, per `ParseError::index()`.
    pub parse_drops: Vec<u64>,
    /// Deliberate drops per `DropReason` (same order as `DropReason::ALL`).
    pub action_drops: Vec<u64>,
    /// Packets whose action list was empty (`actions=drop`, table miss).
    pub policy_drops: u64,
    pub controller_packets: u64,
    pub controller_queue_drops: u64,
    pub revalidations: u64,
    /// Revalidations of only the flows a slow path's state change named
    /// ([`UpcallHandler::changed_scope`]; counted in `revalidations` too).
    pub scoped_revalidations: u64,
    pub flows_fixed: u64,
    /// Passes made by recirculated packets (after `ct(table=N)`).
    pub recirculations: u64,
}

impl DpStats {
    fn new() -> Self {
        DpStats {
            parse_drops: vec![0; ParseError::ALL.len()],
            action_drops: vec![0; DropReason::ALL.len()],
            ..Default::default()
        }
    }

    /// (reason, count) for every non-zero drop counter.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let mut v = Vec::new();
        for e in ParseError::ALL {
            let n = self.parse_drops[e.index()];
            if n > 0 {
                v.push((e.reason(), n));
            }
        }
        for (i, r) in DropReason::ALL.iter().enumerate() {
            if self.action_drops[i] > 0 {
                v.push((r.name(), self.action_drops[i]));
            }
        }
        if self.upcall_budget_drops > 0 {
            v.push(("upcall_budget", self.upcall_budget_drops));
        }
        if self.controller_queue_drops > 0 {
            v.push(("controller_queue_full", self.controller_queue_drops));
        }
        if self.policy_drops > 0 {
            v.push(("policy", self.policy_drops));
        }
        v
    }

    pub fn total_drops(&self) -> u64 {
        self.drops().iter().map(|(_, n)| n).sum()
    }
}

/// A packet queued for the controller.
#[derive(Clone, Debug)]
pub struct ControllerPacket {
    pub in_port: u32,
    /// The frame, cut to the action's `max_len`.
    pub data: Vec<u8>,
    /// The frame's length before the cut.
    pub total_len: usize,
    /// `OFPR_NO_MATCH` (0: a table-miss rule sent it), `OFPR_ACTION` (1).
    pub reason: u8,
    pub table_id: u8,
    /// The cookie of the rule whose action sent it.
    pub cookie: u64,
    /// `controller(userdata=..)` and the pipeline fields, when the action
    /// had options (`NXT_PACKET_IN2`).
    pub extra: Option<Box<action::ControllerExtra>>,
}

pub struct Datapath {
    cfg: DatapathConfig,
    /// Packets whose L4 header does not follow a fixed-size IP header
    /// (IPv4 options, IPv6 extension headers) skip the caches: a P4
    /// program reads headers at the offsets its parser computes, which
    /// the flow key cannot tell apart (set in P4 mode).
    pub(crate) bypass_odd_ip: bool,
    /// Flows are indexed by their translation key (`by_xlate`) for
    /// revalidating only those a state change names
    /// ([`UpcallHandler::changed_scope`]). Set in P4 mode, the one slow
    /// path that names them: elsewhere the index would cost every install
    /// and removal (the OpenFlow slow path ~9 % per upcall) for nothing.
    /// Changed only with the cache empty (after a flush).
    pub(crate) scoped_revalidation: bool,
    flows: Classifier<FLOW_WORDS, DpFlow>,
    emc: emc::Emc,
    seed: u64,
    stats: DpStats,
    pub(crate) pool: Vec<PacketBuf>,
    controller: VecDeque<ControllerPacket>,
    /// The bridge's meters (`meter:N`), shared by every flow naming them.
    pub meters: meter::Meters,
    /// Per-packet select groups' rotation state (`DpAction::Select`).
    pub select: select::SelectStates,
    /// The engine flows are offloaded to (the bridge's XDP program), if any.
    offload: Option<Box<dyn FlowOffload>>,
    /// The bridge's connection tracker, run by `ct` datapath actions.
    pub conntrack: nicflow_conntrack::Conntrack,
    /// Passes still to make for the packet being processed (recirculated
    /// copies), reused across packets.
    recirc: Vec<(ct::Recirculated, u32)>,
    /// Established connections running in the offload engine.
    pub ct_offloads: ct_offload::CtOffloads,
    /// The tracker's verdict at the end of the last pass (after its
    /// actions: a `ct(commit)` there names the connection it created).
    pass_ct: Option<nicflow_conntrack::CtResult>,
    /// Where the flows run, kept up to date as they move (for `stats`).
    placements: PlacementCounts,
    /// Flows by the hash of their translation key (the EMC's hash: a
    /// 312-byte key hashed by SipHash at every install cost the learning
    /// phase ~10%), for revalidating the few flows a slow path's state
    /// change could affect ([`UpcallHandler::changed_scope`]) without
    /// walking the cache. Entries may be stale (checked on use: the flow
    /// must exist and have that key).
    by_xlate: HashMap<u64, RuleId>,
    /// Two live flows had the same translation key (or key hash), which
    /// `by_xlate` cannot tell apart: scoped revalidations walk every flow
    /// until the next flush.
    xlate_dups: bool,
    /// Translation keys of a scoped revalidation, reused.
    scope: Vec<FlowKey>,
}

impl Datapath {
    pub fn new(cfg: DatapathConfig) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed)
            ^ (std::process::id() as u64).rotate_left(32);
        Datapath {
            emc: emc::Emc::new(if cfg.caches_enabled {
                cfg.emc_entries
            } else {
                0
            }),
            cfg,
            bypass_odd_ip: false,
            scoped_revalidation: false,
            flows: Classifier::new(),
            seed,
            stats: DpStats::new(),
            pool: Vec::new(),
            controller: VecDeque::new(),
            meters: meter::Meters::default(),
            select: select::SelectStates::default(),
            offload: None,
            conntrack: nicflow_conntrack::Conntrack::new(Default::default()),
            recirc: Vec::new(),
            ct_offloads: Default::default(),
            pass_ct: None,
            placements: PlacementCounts::default(),
            by_xlate: HashMap::new(),
            xlate_dups: false,
            scope: Vec::new(),
        }
    }

    /// Replace the offload engine. Every cached flow is flushed first (its
    /// traffic, kernel part included, credited to its rules, its kernel
    /// entry removed), so no flow is left behind in an engine that goes
    /// away and the new one starts empty: the next packet of each flow
    /// takes the slow path and is offloaded (or not) afresh. Returns the
    /// previous engine.
    pub fn set_offload(
        &mut self,
        offload: Option<Box<dyn FlowOffload>>,
        handler: &mut dyn UpcallHandler,
    ) -> Option<Box<dyn FlowOffload>> {
        self.flush(handler);
        let mut offload = offload;
        if let Some(off) = offload.as_deref_mut() {
            for m in self.meters.iter() {
                off.set_meter(&m.spec);
            }
        }
        std::mem::replace(&mut self.offload, offload)
    }

    /// Add or reconfigure a meter, here and in the offload engine.
    pub fn set_meter(&mut self, spec: nicflow_ofctl::meter::MeterSpec, now: Instant) {
        if let Some(off) = self.offload.as_deref_mut() {
            off.set_meter(&spec);
        }
        self.meters.set(spec, now);
    }

    /// Remove a meter, here and in the offload engine.
    pub fn remove_meter(&mut self, id: u32) {
        if let Some(off) = self.offload.as_deref_mut() {
            off.remove_meter(id);
        }
        self.meters.remove(id);
    }

    pub fn offload(&self) -> Option<&dyn FlowOffload> {
        self.offload.as_deref()
    }

    pub fn offload_mut(&mut self) -> Option<&mut (dyn FlowOffload + 'static)> {
        self.offload.as_deref_mut()
    }

    /// Read every offloaded flow's kernel counters (batched per engine).
    pub fn sync_offload(&mut self) {
        let Some(off) = self.offload.as_deref_mut() else {
            return;
        };
        off.prefetch_counters();
        self.ct_offloads
            .sync(&mut self.conntrack, off, &mut self.flows, Instant::now());
        for id in self.flows.ids() {
            if let Some(f) = self.flows.get_mut(id) {
                offload::sync(off, f);
            }
        }
        off.drop_prefetched();
    }

    /// Re-decide the placement of every flow: kernel flows whose decision
    /// the engine no longer accepts (an output port that stopped taking
    /// redirects) go back to userspace, userspace flows whose reason went
    /// away are offloaded. Returns how many flows moved.
    pub fn replace_flows(&mut self) -> usize {
        let Some(off) = self.offload.as_deref_mut() else {
            return 0;
        };
        let mut moved = 0;
        for id in self.flows.ids() {
            if let Some(f) = self.flows.get_mut(id) {
                let before = f.placement;
                offload::update(off, f, &mut self.placements);
                moved += (before != f.placement) as usize;
            }
        }
        moved
    }

    /// Take over kernel flows an offload engine adopted from a daemon that
    /// died (`(engine id, match, counters so far)`): the slow path first
    /// relearns what their first packets taught it (MAC learning, as each
    /// flow's upcall would), then each flow is translated again against
    /// the restored rules. One whose decision still fits its match becomes
    /// a datapath flow with the new actions written over its kernel entry
    /// (counters kept: the kernel entry was never removed); the others are
    /// removed and their next packet takes the slow path. Returns (kept,
    /// removed).
    pub fn adopt_flows(
        &mut self,
        flows: Vec<(u64, Match, offload::KernelCounters)>,
        handler: &mut dyn UpcallHandler,
        now: Instant,
    ) -> (usize, usize) {
        if self.offload.is_none() {
            return (0, flows.len());
        }
        for (_, m, _) in &flows {
            let _ = handler.upcall(m.key(), &[], now);
        }
        let (mut kept, mut removed) = (0, 0);
        for (id, matching, live) in flows {
            let Some(off) = self.offload.as_deref_mut() else {
                break;
            };
            let key = *matching.key();
            let out = handler.revalidate(&key);
            if !out.install || !out.mask.is_subset_of(matching.mask()) {
                let _ = off.remove(id);
                removed += 1;
                continue;
            }
            // The match a fresh install would have made (the translation's
            // mask, refined) when it has the same kernel part: registers,
            // metadata, conntrack fields are then exact only where the
            // rules looked at them, as before the restart.
            let mut mask = out.mask;
            off.refine_mask(&key, &mut mask);
            let visible = |m: &FlowMask| {
                let mut k = m.0;
                k.clear_userspace_only();
                k.recirc_id = 0;
                k
            };
            let matching = if mask.is_subset_of(matching.mask())
                && visible(&mask) == visible(matching.mask())
            {
                Match::new(key, mask)
            } else {
                matching
            };
            let mut flow = DpFlow {
                matching,
                actions: out.actions,
                stats: FlowStats::default(),
                created: now,
                xlate_key: key,
                rules: out.rules,
                learned: out.learned,
                // Traffic before the restart was credited by the daemon
                // that saw it.
                credited: (live.packets, live.bytes),
                placement: Some(Placement::Kernel(id)),
                kernel: offload::KernelShare {
                    live,
                    ..Default::default()
                },
                ct_kernel: (0, 0),
            };
            // Counted as it stands (in the kernel) before `update`
            // moves it, as every other flow is counted when placed.
            self.placements.add(flow.placement);
            offload::update(off, &mut flow, &mut self.placements);
            self.stats.flows_installed += 1;
            let (new_id, old) =
                self.flows
                    .insert(matching.key().words(), matching.mask().words(), 0, flow);
            if let Some(mut old) = old {
                offload::unplace(off, &mut old, &mut self.placements);
                self.placements.sub(old.placement);
                self.prune_xlate(&old.xlate_key);
            }
            self.index_xlate(key, new_id);
            kept += 1;
        }
        (kept, removed)
    }

    /// Credit offloaded connections' kernel traffic and remove the entries
    /// of connections that ended, changed or went (after a flush).
    pub fn sync_ct_offloads(&mut self, now: Instant) {
        self.forget_gone_conns(now);
        if let Some(off) = self.offload.as_deref_mut() {
            if self.ct_offloads.is_empty() && self.ct_offloads.n_templates() == 0 {
                return;
            }
            off.prefetch_counters();
            self.ct_offloads
                .sync(&mut self.conntrack, off, &mut self.flows, now);
            off.drop_prefetched();
        }
    }

    /// Take in the connections the TC program set up itself and reported
    /// (`CtOffloads::take_events`). The bridge calls this before each
    /// round of receives: the tracker learns of them at once.
    pub fn take_ct_events(&mut self, now: Instant) {
        if let Some(off) = self.offload.as_deref_mut() {
            self.ct_offloads
                .take_events(&mut self.conntrack, off, &mut self.flows, now);
        }
    }

    /// The descriptor readable when the TC program reported a set-up.
    pub fn ct_events_fd(&self) -> Option<std::os::fd::RawFd> {
        self.offload.as_deref().and_then(|o| o.ct_events_fd())
    }

    /// Longest the daemon may sleep before reading the TC program's
    /// reports (`CtOffloads::events_wait`): the program wakes it only when
    /// an eighth of the ring is unread.
    pub fn ct_events_wait(&self) -> Option<Duration> {
        self.offload.as_ref()?;
        self.ct_offloads.events_wait()
    }

    /// Remove the kernel entries of connections that left the tracker
    /// (`Conntrack::take_replaced`); without an engine there are none.
    pub fn forget_gone_conns(&mut self, now: Instant) {
        if !self.conntrack.has_replaced() {
            return;
        }
        match self.offload.as_deref_mut() {
            Some(off) => {
                self.ct_offloads
                    .forget_gone(&mut self.conntrack, off, &mut self.flows, now)
            }
            None => self.conntrack.take_replaced().for_each(drop),
        }
    }

    /// Every recirculation id a cached flow refers to (in its key, or in a
    /// `recirc` action), so the slow path can forget the others.
    pub fn recirc_ids_in_use(&self) -> std::collections::HashSet<u32> {
        let mut ids = std::collections::HashSet::new();
        for r in self.flows.iter() {
            let f = r.value;
            if f.matching.key().recirc_id != 0 {
                ids.insert(f.matching.key().recirc_id);
            }
            action::walk(&f.actions, &mut |a| {
                if let DpAction::Recirc(id) = a {
                    ids.insert(*id);
                }
            });
        }
        ids
    }

    pub fn config(&self) -> &DatapathConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &DpStats {
        &self.stats
    }

    pub fn n_flows(&self) -> usize {
        self.flows.len()
    }

    /// Flows per placement and offload refusals, kept incrementally.
    pub fn placements(&self) -> &PlacementCounts {
        &self.placements
    }

    /// Change the most datapath flows held at once (`set BR
    /// flow_limit=N`, OVS's `other_config:flow-limit`). Flows above a
    /// lowered limit stay until they age out; no new one is cached while
    /// the count is at or above it.
    pub fn set_flow_limit(&mut self, limit: usize) {
        self.cfg.flow_limit = limit;
    }

    /// The most datapath flows held at once.
    pub fn flow_limit(&self) -> usize {
        self.cfg.flow_limit
    }

    /// Installed flows with their handles.
    pub fn flows(&self) -> impl Iterator<Item = (RuleId, &DpFlow)> {
        self.flows.iter().map(|r| (r.id, r.value))
    }

    /// Packets queued by `controller` actions, oldest first.
    pub fn take_controller_packets(&mut self) -> Vec<ControllerPacket> {
        self.controller.drain(..).collect()
    }

    pub fn controller_queue_len(&self) -> usize {
        self.controller.len()
    }

    /// Process one received batch from `in_port`. Frames are taken out of
    /// `pkts` (left empty); copies to transmit land in `tx`.
    ///
    /// Packets are handled strictly in arrival order: lookup, upcall on a
    /// miss, execute, and — when an upcall changed slow-path state such as
    /// the MAC table — revalidation before the next packet is looked up. So
    /// a packet never follows a decision older than the packets before it,
    /// which is what makes the cached path indistinguishable from the slow
    /// path (the differential test). A batch still amortises the port's
    /// receive and transmit calls.
    pub fn process_batch(
        &mut self,
        in_port: u32,
        pkts: &mut Vec<PacketBuf>,
        handler: &mut dyn UpcallHandler,
        now: Instant,
        tx: &mut TxBatch,
    ) {
        self.stats.packets += pkts.len() as u64;
        let mut budget = self.cfg.upcall_budget;
        let mut passes = std::mem::take(&mut self.recirc);
        for pkt in pkts.drain(..) {
            let first = self.pass(
                in_port,
                pkt,
                None,
                handler,
                now,
                tx,
                &mut budget,
                &mut passes,
            );
            // Recirculated copies go before the next received packet.
            self.recirculate(in_port, first, &mut passes, handler, now, tx, &mut budget);
        }
        self.recirc = passes;
    }

    /// Connections set up in the kernel that are likely over: their
    /// entries are read and those of closed connections removed
    /// (`CtOffloads::poll_setup`). The bridge calls this after each
    /// received batch, once the batch's frames are sent: the poll's map
    /// reads and removals (about a dozen system calls per connection)
    /// would otherwise delay them, a just set-up connection's SYN among
    /// them.
    pub fn poll_ct_setup(&mut self, now: Instant) {
        if let Some(off) = self.offload.as_deref_mut() {
            self.ct_offloads
                .poll_setup(&mut self.conntrack, off, &mut self.flows, now, 64);
        }
    }

    /// Run the copies a packet's actions recirculated (`passes`), in the
    /// order the actions made them, each copy's own copies right after it;
    /// a copy past [`MAX_RECIRC`] passes deep or [`MAX_PASSES`] in all is
    /// dropped and counted. `first` is the packet's first-pass flow, for
    /// moving its connection to the kernel once established.
    #[allow(clippy::too_many_arguments)]
    fn recirculate(
        &mut self,
        in_port: u32,
        first: Option<(RuleId, FlowKey)>,
        passes: &mut Vec<(ct::Recirculated, u32)>,
        handler: &mut dyn UpcallHandler,
        now: Instant,
        tx: &mut TxBatch,
        budget: &mut usize,
    ) {
        passes.reverse();
        let mut made = 0;
        while let Some(((pkt, meta, id), depth)) = passes.pop() {
            made += 1;
            if depth >= MAX_RECIRC || made > MAX_PASSES {
                let idx = DropReason::ALL
                    .iter()
                    .position(|d| *d == DropReason::RecircLimit)
                    .unwrap_or(0);
                self.stats.action_drops[idx] += 1;
                give_back(&mut self.pool, pkt);
                continue;
            }
            self.stats.recirculations += 1;
            let at = passes.len();
            let second = self.pass(
                in_port,
                pkt,
                Some((meta, id, depth)),
                handler,
                now,
                tx,
                budget,
                passes,
            );
            let after = self.pass_ct.take();
            passes[at..].reverse();
            if depth == 1 {
                self.consider_ct_offload(first, second, &meta, after, handler, now);
            }
        }
    }

    /// A packet's second pass is done: if its connection is established
    /// and the two flows it took allow it, that direction of the
    /// connection moves to the offload engine (see `ct_offload`).
    fn consider_ct_offload(
        &mut self,
        first: Option<(RuleId, FlowKey)>,
        second: Option<(RuleId, FlowKey)>,
        meta: &ct::CtMeta,
        after: Option<nicflow_conntrack::CtResult>,
        handler: &mut dyn UpcallHandler,
        now: Instant,
    ) {
        let (Some((f1, key)), Some((f2, key2))) = (first, second) else {
            return;
        };
        if self.offload.is_none() {
            return;
        }
        let Some(r) = meta.result else {
            return;
        };
        if r.state & nicflow_conntrack::state::NEW != 0 {
            // A new connection, committed by the second pass (its own
            // verdict names it): set it up in the kernel if the flows of
            // its later packets are cached.
            let Some(h) = after
                .filter(|a| a.state & nicflow_conntrack::state::NEW != 0 && a.zone == r.zone)
                .and_then(|a| a.conn)
            else {
                return;
            };
            // A flow the connection's later packets will take that is not
            // cached yet is translated now, as revalidation translates
            // (no side effects), and installed; then the set-up tries
            // again. A load balancer's reply flows need this: its table
            // looks at the destination port for the VIP's new
            // connections, so the replies' megaflows carry the client's
            // port and no earlier connection cached them.
            for i in 0..=SETUP_XLATE_MAX {
                let Some(off) = self.offload.as_deref_mut() else {
                    return;
                };
                let Some(miss) = self.ct_offloads.setup(
                    h,
                    (f1, &key),
                    (f2, &key2),
                    &self.flows,
                    &mut self.conntrack,
                    off,
                    now,
                ) else {
                    return;
                };
                if i == SETUP_XLATE_MAX {
                    break;
                }
                if !self.install_for_setup(&miss, handler, now) {
                    self.ct_offloads.refuse_setup("ct:setup-xlate-refused");
                    return;
                }
            }
            self.ct_offloads.refuse_setup("ct:setup-not-cached");
            return;
        }
        let Some(off) = self.offload.as_deref_mut() else {
            return;
        };
        let Some(h) = r.conn else {
            return;
        };
        if r.state & nicflow_conntrack::state::EST == 0 {
            return;
        }
        let (Some(a), Some(b)) = (self.flows.get(f1), self.flows.get(f2)) else {
            return;
        };
        self.ct_offloads
            .consider(h, (f1, a, &key), (f2, b), &mut self.conntrack, off, now);
    }

    /// One pass of one packet: key, lookup (or upcall), actions. `recirc` is
    /// the verdict, id and depth of a recirculated pass; the copies this
    /// pass recirculates are pushed onto `passes`.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &mut self,
        in_port: u32,
        pkt: PacketBuf,
        recirc: Option<(ct::CtMeta, u32, u32)>,
        handler: &mut dyn UpcallHandler,
        now: Instant,
        tx: &mut TxBatch,
        budget: &mut usize,
        passes: &mut Vec<(ct::Recirculated, u32)>,
    ) -> Option<(RuleId, FlowKey)> {
        self.pass_ct = None;
        let mut key = FlowKey::default();
        let mut layout = match nicflow_flow::extract(pkt.data(), in_port, &mut key) {
            Ok(l) => l,
            Err(e) => {
                let mut changed = false;
                match handler.unparsed(in_port, pkt.data(), now) {
                    Some((frames, c)) => {
                        self.stats.upcalls += 1;
                        self.emit(frames, tx);
                        changed = c;
                    }
                    None => self.stats.parse_drops[e.index()] += 1,
                }
                give_back(&mut self.pool, pkt);
                if changed {
                    self.revalidate_changed(handler);
                }
                return None;
            }
        };
        if let Some(t) = &pkt.tun {
            // Decapsulated by a tunnel port: the outer headers are part
            // of the key, as in OVS (`tun_id`, `tun_src`, ...).
            key.tun_id = t.id;
            key.tun_src = t.src;
            key.tun_dst = t.dst;
            key.tun_flags = t.flags;
            key.tun_metadata = t.metadata;
        }
        let first_pass = recirc.is_none();
        let (meta, depth) = match recirc {
            Some((meta, id, depth)) => {
                key.recirc_id = id;
                meta.write_key(&mut key);
                (meta, depth)
            }
            None => (ct::CtMeta::default(), 0),
        };
        if first_pass
            && key.nw_proto == 6
            && key.tcp_flags & 0x017 == 0x002
            && self.ct_offloads.has_setup()
        {
            // A bare SYN of a connection set up in the kernel: the tracker
            // learns what the kernel saw before it judges the SYN.
            if let Some(off) = self.offload.as_deref_mut() {
                self.ct_offloads.refresh_for_syn(
                    &key,
                    &mut self.conntrack,
                    off,
                    &mut self.flows,
                    now,
                );
            }
        }
        let mut hit = None;
        if self.cfg.caches_enabled && !(self.bypass_odd_ip && odd_ip_layout(&layout)) {
            let hash = emc::hash_key(key.words(), self.seed);
            if let Some(id) = self.emc.lookup(hash, &key) {
                if self.flows.get(id).is_some() {
                    self.stats.emc_hits += 1;
                    hit = Some(id);
                }
            }
            if hit.is_none() {
                if let Some((id, _)) = self.flows.lookup(key.words()) {
                    self.stats.megaflow_hits += 1;
                    self.emc.insert(hash, &key, id);
                    hit = Some(id);
                }
            }
        }
        let mut uncached = None;
        let mut revalidate = false;
        if hit.is_none() {
            if *budget == 0 {
                self.stats.upcall_budget_drops += 1;
                give_back(&mut self.pool, pkt);
                return None;
            }
            *budget -= 1;
            self.stats.upcalls += 1;
            let mut out = handler.upcall(&key, pkt.data(), now);
            revalidate = out.state_changed;
            if !out.install && !out.emitted.is_empty() {
                handler.credit(&out.rules, out.learned, 1, pkt.len() as u64, now);
                self.emit(std::mem::take(&mut out.emitted), tx);
                give_back(&mut self.pool, pkt);
                if revalidate {
                    self.revalidate_changed(handler);
                }
                return None;
            }
            if self.cfg.caches_enabled && out.install && self.flows.len() < self.cfg.flow_limit {
                hit = Some(self.install(&key, out, now));
            } else {
                if self.cfg.caches_enabled && out.install {
                    self.stats.flow_limit_hits += 1;
                }
                // No datapath flow will carry this packet's counters to its
                // rules and tables: credit it now.
                handler.credit(&out.rules, out.learned, 1, pkt.len() as u64, now);
                uncached = Some(out.actions);
            }
        }
        let actions: &[DpAction] = match (hit, &uncached) {
            (Some(id), _) => match self.flows.get_mut(id) {
                Some(flow) => {
                    flow.stats.packets += 1;
                    flow.stats.bytes += pkt.len() as u64;
                    flow.stats.used = Some(now);
                    flow.stats.tcp_flags |= key.tcp_flags;
                    &flow.actions
                }
                None => {
                    give_back(&mut self.pool, pkt);
                    return None;
                }
            },
            (None, Some(a)) => a,
            (None, None) => {
                give_back(&mut self.pool, pkt);
                return None;
            }
        };
        let mut stage = ct::CtStage {
            tracker: &mut self.conntrack,
            meta,
            now,
            depth: depth + 1,
            recirc: passes,
        };
        let r = execute::execute(
            actions,
            in_port,
            pkt,
            &mut layout,
            tx,
            &mut self.pool,
            &mut self.controller,
            self.cfg.controller_queue_len,
            &mut self.meters,
            &mut self.select,
            &mut stage,
        );
        // The packet went through the tracker here: if it ended or changed
        // an offloaded connection, its kernel entries go now.
        self.pass_ct = stage.meta.result;
        let tracked = stage.meta.result.and_then(|r| r.conn);
        // A connection with kernel entries left the tracker (a new SYN
        // replaced it, it expired): its entries have the tuple a new
        // connection may take now, so they go first.
        self.forget_gone_conns(now);
        if let (Some(h), Some(off)) = (tracked, self.offload.as_deref_mut()) {
            self.ct_offloads
                .check(h, &mut self.conntrack, off, &mut self.flows, now);
        }
        self.stats.policy_drops += r.policy_drop as u64;
        if let Some(reason) = r.drop {
            let idx = DropReason::ALL
                .iter()
                .position(|d| *d == reason)
                .unwrap_or(0);
            self.stats.action_drops[idx] += 1;
        }
        self.stats.controller_packets += r.controller as u64;
        self.stats.controller_queue_drops += r.controller_dropped as u64;
        if let Some(p) = r.leftover {
            give_back(&mut self.pool, p);
        }
        if revalidate {
            self.revalidate_changed(handler);
        }
        hit.map(|id| (id, key))
    }

    /// Queue frames the slow path built for transmission.
    fn emit(&mut self, frames: Vec<(u32, Vec<u8>)>, tx: &mut TxBatch) {
        for (port, data) in frames {
            let mut b = self
                .pool
                .pop()
                .unwrap_or_else(|| PacketBuf::with_capacity(execute::BUF_CAPACITY));
            if !b.set_data(&data) {
                b = PacketBuf::from_slice(&data);
            }
            tx.pkts.push((port, b));
        }
    }

    /// Translate `key` (a later packet of a connection being set up in
    /// the kernel) without side effects and cache the decision, as an
    /// upcall of that packet would. Only a decision that can be cached
    /// and learns nothing (no MAC learning, no state change: those must
    /// happen when the packet is really seen) is installed. Whether it
    /// was.
    fn install_for_setup(
        &mut self,
        key: &FlowKey,
        handler: &mut dyn UpcallHandler,
        now: Instant,
    ) -> bool {
        // Flows installed ahead stay until idle expiry even if the set-up
        // fails: never more than half the cache, so that a SYN flood
        // cannot keep real upcalls from installing.
        if !self.cfg.caches_enabled || self.flows.len() >= self.cfg.flow_limit / 2 {
            return false;
        }
        let out = handler.revalidate(key);
        if !out.install || out.learned.is_some() || out.state_changed || !out.emitted.is_empty() {
            return false;
        }
        self.ct_offloads.setup_xlates += 1;
        self.install(key, out, now);
        true
    }

    fn install(&mut self, key: &FlowKey, out: XlateOut, now: Instant) -> RuleId {
        let mut mask = out.mask;
        if let Some(off) = self.offload.as_deref() {
            off.refine_mask(key, &mut mask);
        }
        let matching = Match::new(*key, mask);
        let flow = DpFlow {
            matching,
            actions: out.actions,
            stats: FlowStats::default(),
            created: now,
            xlate_key: *key,
            rules: out.rules,
            learned: out.learned,
            credited: (0, 0),
            placement: None,
            kernel: Default::default(),
            ct_kernel: (0, 0),
        };
        self.stats.flows_installed += 1;
        let (id, old) = self
            .flows
            .insert(matching.key().words(), matching.mask().words(), 0, flow);
        self.index_xlate(*key, id);
        if let Some(mut old) = old {
            self.prune_xlate(&old.xlate_key);
            self.stats.flows_removed += 1;
            // Its kernel entry has the same map key as the new flow's:
            // remove it before the new one is offloaded.
            if let Some(off) = self.offload.as_deref_mut() {
                offload::unplace(off, &mut old, &mut self.placements);
            }
            self.placements.sub(old.placement);
        }
        if let Some(off) = self.offload.as_deref_mut() {
            if let Some(f) = self.flows.get_mut(id) {
                offload::update(off, f, &mut self.placements);
            }
        }
        id
    }

    /// Credit every flow's not-yet-credited traffic (kernel part
    /// included) to its rules.
    pub fn push_stats(&mut self, handler: &mut dyn UpcallHandler) {
        self.sync_offload();
        for id in self.flows.ids() {
            if let Some(f) = self.flows.get_mut(id) {
                credit(f, handler);
            }
        }
    }

    /// Record that flow `id` was translated from `key`.
    fn index_xlate(&mut self, key: FlowKey, id: RuleId) {
        if !self.scoped_revalidation {
            return;
        }
        let h = emc::hash_key(key.words(), self.seed);
        if let Some(old) = self.by_xlate.insert(h, id) {
            if old != id && self.flows.get(old).is_some() {
                self.xlate_dups = true;
            }
        }
    }

    /// Forget `key`'s index entry if its flow went. An entry naming a
    /// live flow stays, whatever that flow's key: the entry is the only
    /// way to it (a flow with another key under the same hash, indexed
    /// just before, must not lose its entry).
    fn prune_xlate(&mut self, key: &FlowKey) {
        if !self.scoped_revalidation {
            return;
        }
        let h = emc::hash_key(key.words(), self.seed);
        if let Some(&id) = self.by_xlate.get(&h) {
            if self.flows.get(id).is_none() {
                self.by_xlate.remove(&h);
            }
        }
    }

    /// Forget `key`'s index entry if it names flow `id`.
    fn unindex_xlate(&mut self, key: &FlowKey, id: RuleId) {
        if !self.scoped_revalidation {
            return;
        }
        let h = emc::hash_key(key.words(), self.seed);
        if self.by_xlate.get(&h) == Some(&id) {
            self.by_xlate.remove(&h);
        }
    }

    /// Re-translate every flow; fix those whose actions changed and whose
    /// mask still covers what the new decision depends on, remove the rest.
    /// Returns (fixed, removed).
    pub fn revalidate(&mut self, handler: &mut dyn UpcallHandler) -> (usize, usize) {
        self.stats.revalidations += 1;
        let mut counts = (0, 0);
        if let Some(off) = self.offload.as_deref_mut() {
            off.prefetch_counters();
        }
        for id in self.flows.ids() {
            self.revalidate_flow(id, handler, &mut counts);
        }
        self.revalidated(counts)
    }

    /// After an upcall changed the slow path's state: re-translate only
    /// the flows the handler says the change could affect
    /// ([`UpcallHandler::changed_scope`]; a P4 program's learning touches
    /// the flows that applied the tables it added to, not the thousands
    /// of others), or every flow when it cannot say. Every other flow is
    /// untouched: its traffic is credited later, as usual.
    fn revalidate_changed(&mut self, handler: &mut dyn UpcallHandler) -> (usize, usize) {
        let mut keys = std::mem::take(&mut self.scope);
        keys.clear();
        let scoped = handler.changed_scope(&mut keys);
        if !scoped || self.xlate_dups || !self.scoped_revalidation {
            self.scope = bounded_scope(keys);
            return self.revalidate(handler);
        }
        self.stats.revalidations += 1;
        self.stats.scoped_revalidations += 1;
        let mut counts = (0, 0);
        if !keys.is_empty() {
            if let Some(off) = self.offload.as_deref_mut() {
                off.prefetch_counters();
            }
        }
        for key in &keys {
            let h = emc::hash_key(key.words(), self.seed);
            let Some(&id) = self.by_xlate.get(&h) else {
                continue;
            };
            if self.flows.get(id).is_some_and(|f| f.xlate_key == *key) {
                self.revalidate_flow(id, handler, &mut counts);
            } else if self.flows.get(id).is_none() {
                // Its flow went (expiry, replaced): nothing to revalidate.
                self.by_xlate.remove(&h);
            }
        }
        self.scope = bounded_scope(keys);
        self.revalidated(counts)
    }

    /// Re-translate flow `id`: fix it, or remove it; counted in
    /// `counts` (fixed, removed).
    fn revalidate_flow(
        &mut self,
        id: RuleId,
        handler: &mut dyn UpcallHandler,
        counts: &mut (usize, usize),
    ) {
        let Some(f) = self.flows.get_mut(id) else {
            return;
        };
        if let Some(off) = self.offload.as_deref_mut() {
            offload::sync(off, f);
        }
        credit(f, handler);
        let out = handler.revalidate(&f.xlate_key);
        let keep = out.install && out.mask.is_subset_of(f.matching.mask());
        if keep {
            let changed = out.actions != f.actions;
            if changed || out.rules != f.rules {
                f.actions = out.actions;
                f.rules = out.rules;
                f.learned = out.learned;
                let t = f.total();
                f.credited = (t.packets, t.bytes);
                counts.0 += 1;
            }
            // In the same round as userspace: the kernel entry gets the
            // new actions (or goes), a userspace flow whose reason went
            // away is offloaded.
            if let Some(off) = self.offload.as_deref_mut() {
                if changed || !matches!(f.placement, Some(Placement::Kernel(_))) {
                    offload::update(off, f, &mut self.placements);
                }
            }
        } else {
            if let Some(mut f) = self.flows.remove(id) {
                if let Some(off) = self.offload.as_deref_mut() {
                    offload::unplace(off, &mut f, &mut self.placements);
                }
                self.placements.sub(f.placement);
                self.unindex_xlate(&f.xlate_key, id);
            }
            counts.1 += 1;
        }
    }

    /// The end of a revalidation (full or scoped) that fixed and removed
    /// `counts` flows.
    fn revalidated(&mut self, (fixed, removed): (usize, usize)) -> (usize, usize) {
        self.stats.flows_fixed += fixed as u64;
        self.stats.flows_removed += removed as u64;
        // Connection entries built from flows that changed or went must
        // go before the change is acknowledged.
        self.ct_offloads.forget_refusals();
        if let Some(off) = self.offload.as_deref_mut() {
            off.drop_prefetched();
            self.ct_offloads
                .sync(&mut self.conntrack, off, &mut self.flows, Instant::now());
        }
        (fixed, removed)
    }

    /// Remove flows idle for longer than the configured timeout. Returns how
    /// many were removed.
    pub fn expire(&mut self, now: Instant, handler: &mut dyn UpcallHandler) -> usize {
        let timeout = self.cfg.idle_timeout;
        // Offloaded connections' traffic first: it keeps their flows busy.
        if let Some(off) = self.offload.as_deref_mut() {
            off.prefetch_counters();
            self.ct_offloads
                .sync(&mut self.conntrack, off, &mut self.flows, now);
        }
        let mut n = 0;
        for id in self.flows.ids() {
            let Some(f) = self.flows.get_mut(id) else {
                continue;
            };
            // A flow busy in the kernel is not idle: its last use is the
            // later of the two engines'.
            if let Some(off) = self.offload.as_deref_mut() {
                offload::sync(off, f);
            }
            let last = f.total().used.unwrap_or(f.created);
            if now.saturating_duration_since(last) >= timeout {
                if let Some(off) = self.offload.as_deref_mut() {
                    // Hits between the read above and the removal are
                    // folded in before crediting.
                    offload::unplace(off, f, &mut self.placements);
                }
                credit(f, handler);
                self.placements.sub(f.placement);
                let key = f.xlate_key;
                self.flows.remove(id);
                self.unindex_xlate(&key, id);
                n += 1;
            }
        }
        if let Some(off) = self.offload.as_deref_mut() {
            off.drop_prefetched();
        }
        self.stats.flows_removed += n as u64;
        n
    }

    /// Remove every flow (after crediting their stats).
    pub fn flush(&mut self, handler: &mut dyn UpcallHandler) {
        if let Some(off) = self.offload.as_deref_mut() {
            self.ct_offloads
                .clear(&mut self.conntrack, off, &mut self.flows, Instant::now());
            for id in self.flows.ids() {
                if let Some(f) = self.flows.get_mut(id) {
                    offload::unplace(off, f, &mut self.placements);
                }
            }
        }
        self.push_stats(handler);
        self.stats.flows_removed += self.flows.len() as u64;
        self.flows.clear();
        self.by_xlate.clear();
        self.xlate_dups = false;
        self.placements.kernel = 0;
        self.placements.userspace.clear();
        self.emc.clear();
    }

    /// Run `actions` — translated for this one frame, not cached (an
    /// OpenFlow `PACKET_OUT`) — on `pkt` received from `in_port`;
    /// copies a `ct(table=N)` recirculates then go through the caches like
    /// received frames. Returns `false` (and drops the frame) when it does
    /// not parse.
    pub fn execute_once(
        &mut self,
        in_port: u32,
        pkt: PacketBuf,
        actions: &[DpAction],
        handler: &mut dyn UpcallHandler,
        now: Instant,
        tx: &mut TxBatch,
    ) -> bool {
        let mut key = FlowKey::default();
        let mut layout = match nicflow_flow::extract(pkt.data(), in_port, &mut key) {
            Ok(l) => l,
            Err(e) => {
                self.stats.parse_drops[e.index()] += 1;
                give_back(&mut self.pool, pkt);
                return false;
            }
        };
        let mut passes = std::mem::take(&mut self.recirc);
        let mut stage = ct::CtStage {
            tracker: &mut self.conntrack,
            meta: ct::CtMeta::default(),
            now,
            depth: 1,
            recirc: &mut passes,
        };
        let r = execute::execute(
            actions,
            in_port,
            pkt,
            &mut layout,
            tx,
            &mut self.pool,
            &mut self.controller,
            self.cfg.controller_queue_len,
            &mut self.meters,
            &mut self.select,
            &mut stage,
        );
        self.stats.controller_packets += r.controller as u64;
        self.stats.controller_queue_drops += r.controller_dropped as u64;
        if let Some(p) = r.leftover {
            give_back(&mut self.pool, p);
        }
        let mut budget = self.cfg.upcall_budget;
        self.recirculate(in_port, None, &mut passes, handler, now, tx, &mut budget);
        self.recirc = passes;
        true
    }

    /// Take a buffer from the pool (or allocate one when the pool is dry).
    pub fn alloc_buf(&mut self) -> PacketBuf {
        self.pool
            .pop()
            .unwrap_or_else(|| PacketBuf::with_capacity(execute::BUF_CAPACITY))
    }

    /// Give transmitted buffers back (the pool keeps at most
    /// [`POOL_MAX`] of them, and only full-size ones: see [`poolable`]).
    pub fn recycle(&mut self, mut bufs: Vec<PacketBuf>) -> Vec<PacketBuf> {
        for buf in bufs.drain(..) {
            give_back(&mut self.pool, buf);
        }
        bufs
    }
}

/// May `buf` go into the pool? Every buffer the pool hands out must hold
/// any frame a port receives and any growth on the way out (tunnel and
/// ESP headers in place): a buffer some path sized to one short frame
/// (an ARP reply, a copied frame) would otherwise come back for a frame
/// it cannot hold (issue 34: small ESP frames dropped as too big). Such
/// buffers are freed instead.
#[inline]
fn poolable(buf: &PacketBuf) -> bool {
    buf.capacity() >= execute::BUF_CAPACITY
}

#[inline]
fn give_back(pool: &mut Vec<PacketBuf>, buf: PacketBuf) {
    if pool.len() < POOL_MAX && poolable(&buf) {
        pool.push(buf);
    }
}

fn credit(f: &mut DpFlow, handler: &mut dyn UpcallHandler) {
    let t = f.total();
    let dp = t.packets.saturating_sub(f.credited.0);
    let db = t.bytes.saturating_sub(f.credited.1);
    if dp > 0 {
        handler.credit(&f.rules, f.learned, dp, db, t.used.unwrap_or(f.created));
        f.credited = (t.packets, t.bytes);
    }
}

/// Translation keys the reused scope buffer keeps room for between
/// revalidations (312 bytes each: about 80 KB). A learning names a few
/// flows; one that named thousands (a change of a table every flow
/// applied) must not pin their memory for the datapath's lifetime.
const SCOPE_KEEP: usize = 256;

/// The scope buffer emptied for reuse, its room cut to [`SCOPE_KEEP`].
fn bounded_scope(mut keys: Vec<FlowKey>) -> Vec<FlowKey> {
    keys.clear();
    keys.shrink_to(SCOPE_KEEP);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scope buffer keeps its room up to the bound (no allocation
    /// per learning) and gives back what a large scope made it take.
    #[test]
    fn the_scope_buffer_is_bounded() {
        let small = bounded_scope(vec![FlowKey::default(); 10]);
        assert!(small.is_empty());
        assert!(small.capacity() >= 10, "small room kept for reuse");
        let big = bounded_scope(vec![FlowKey::default(); 5 * SCOPE_KEEP]);
        assert!(big.is_empty());
        // `shrink_to` promises at least the room asked for, not exactly it.
        assert!(
            big.capacity() <= SCOPE_KEEP.next_power_of_two(),
            "room {}",
            big.capacity()
        );
    }

    /// A buffer sized to one short frame is freed, not pooled: the pool
    /// must only hand out buffers that hold any frame (issue 34).
    #[test]
    fn the_pool_keeps_full_size_buffers_only() {
        let mut pool = Vec::new();
        give_back(&mut pool, PacketBuf::from_slice(&[0; 60]));
        assert!(pool.is_empty(), "a frame-sized buffer was pooled");
        give_back(&mut pool, PacketBuf::with_capacity(execute::BUF_CAPACITY));
        assert_eq!(pool.len(), 1);
        assert!(poolable(&pool[0]));
    }
}
