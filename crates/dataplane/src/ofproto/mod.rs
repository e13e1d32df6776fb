//! The slow path: OpenFlow-style tables that decide what happens to a flow.
//!
//! A packet reaches this module only when it missed every datapath cache.
//! [`xlate`] walks it through the numbered tables (0-254; `goto_table`,
//! `resubmit`), runs each matched rule's actions against the packet's key,
//! and records which key bits every lookup examined. The result is one
//! datapath flow — a match with the widest mask that still gives the same
//! decision, plus a flat action list — which the datapath caches so the rest
//! of the flow never comes back here.
//!
//! Rule changes ([`Ofproto::add_flows`], [`Ofproto::del_flows`], timeouts)
//! are atomic: a batch is validated as a whole before any table changes. The
//! caller (the bridge) revalidates the datapath after each change.

pub mod flow_mod;
pub mod group;
pub mod mac_learning;
pub mod meter;
pub mod xlate;

use crate::datapath::{RuleRef, UpcallHandler, XlateOut};
use group::{GroupError, GroupStats, Groups};
use mac_learning::MacTable;
use nicflow_classifier::{Classifier, RuleId};
use nicflow_flow::{Action, FlowKey, Match, FLOW_WORDS};
use nicflow_ofctl::{FlowSpec, GroupSpec, MatchSpec};
use std::time::{Duration, Instant};

/// Number of usable tables (0..=254).
pub const N_TABLES: usize = 255;
/// `resubmit`/`goto_table` nesting limit, as in OVS.
pub const MAX_DEPTH: u32 = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OfprotoError {
    #[error("table {0} does not exist (tables are 0-254)")]
    BadTable(u8),
    #[error("goto_table:{target} in table {table}: must go to a later table")]
    BadGoto { table: u8, target: u8 },
    /// `group:N` for a group that does not exist (OFPBAC_BAD_OUT_GROUP).
    #[error("group:{0}: group {0} does not exist (add it with add-group first)")]
    BadOutGroup(u32),
    /// `meter:N` for a meter that does not exist (OFPMMFC_UNKNOWN_METER).
    #[error("meter:{0}: meter {0} does not exist (add it with add-meter first)")]
    UnknownMeter(u32),
    #[error(transparent)]
    Group(#[from] GroupError),
}

/// An OpenFlow rule with its counters.
#[derive(Clone, Debug)]
pub struct Rule {
    pub priority: u16,
    pub cookie: u64,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    /// `OFPFF_*` flags from the `FLOW_MOD` that added it (from the CLI:
    /// `SEND_FLOW_REM` when the rule says `send_flow_rem`).
    pub flags: u16,
    pub matching: Match,
    pub actions: Vec<Action>,
    pub created: Instant,
    pub last_used: Instant,
    pub n_packets: u64,
    pub n_bytes: u64,
}

impl Rule {
    pub fn spec(&self, table: u8) -> FlowSpec {
        FlowSpec {
            table,
            priority: self.priority,
            cookie: self.cookie,
            idle_timeout: self.idle_timeout,
            hard_timeout: self.hard_timeout,
            send_flow_rem: self.flags & flow_mod::flags::SEND_FLOW_REM != 0,
            r#match: self.matching,
            actions: self.actions.clone(),
        }
    }

    /// The rule as `dump-flows` and flow statistics show it.
    pub fn dump(&self, table: u8, now: Instant) -> RuleDump {
        RuleDump {
            spec: self.spec(table),
            n_packets: self.n_packets,
            n_bytes: self.n_bytes,
            duration: now.saturating_duration_since(self.created),
            idle_age: now.saturating_duration_since(self.last_used),
            flags: self.flags,
        }
    }
}

/// One rule as `dump-flows` shows it.
#[derive(Clone, Debug)]
pub struct RuleDump {
    pub spec: FlowSpec,
    pub n_packets: u64,
    pub n_bytes: u64,
    pub duration: Duration,
    pub idle_age: Duration,
    /// `OFPFF_*` flags (flow statistics echo them).
    pub flags: u16,
}

pub(crate) type Table = Classifier<FLOW_WORDS, Rule>;

/// OpenFlow tables use the classifier's TupleMerge mode: rules whose masks
/// differ only in IP prefix lengths and port wildcards share one hash table,
/// so a lookup probes a handful of tables however varied the ACL is.
fn new_table() -> Table {
    Classifier::with_relax(nicflow_classifier::relax_flowkey)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OfprotoStats {
    pub xlates: u64,
    pub table_misses: u64,
    pub rules_added: u64,
    pub rules_removed: u64,
    pub rules_expired: u64,
}

/// Where a table walk stopped at `ct(table=N)` and what it carried: the
/// recirculated pass resumes from this (OVS's frozen state). The datapath
/// key holds only the id, so everything the next pass needs that is not in
/// the packet's bytes or ct fields is here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frozen {
    pub table: u8,
    pub regs: [u32; 8],
    pub regs_hi: [u32; 8],
    pub metadata: u64,
    pub pkt_mark: u32,
    /// The walk's `in_port` (a `resubmit` may have changed it).
    pub in_port: u32,
    /// Resubmit depth so far: recirculation cannot escape the limit.
    pub depth: u32,
}

pub struct Ofproto {
    tables: Vec<Option<Box<Table>>>,
    /// Recirculation ids by frozen state and back. Ids are never reused, so
    /// a datapath flow's id always means what it meant when it was made.
    frozen: std::collections::HashMap<Frozen, u32>,
    thawed: std::collections::HashMap<u32, Frozen>,
    /// The last recirculation id handed out.
    next_recirc: u32,
    pub mac: MacTable,
    /// Port numbers of the bridge, ascending: the flood order.
    ports: Vec<u32>,
    stats: OfprotoStats,
    /// The group table (`add-group`, `group:N`).
    pub(crate) groups: Groups,
    /// Rules with `SEND_FLOW_REM` that left, waiting for the controller
    /// connections ([`Ofproto::take_flow_removed`]).
    removed: Vec<flow_mod::RemovedRule>,
    /// Meters by id (configuration; the buckets are the datapath's).
    meters: std::collections::BTreeMap<u32, nicflow_ofctl::meter::MeterSpec>,
    /// Per table: packets looked up in it and packets that hit a rule
    /// there (`OFPMP_TABLE`), credited like rule counters.
    lookups: Vec<TableCounters>,
    /// A P4 program replaces the tables as the slow path (`nicflow p4
    /// load`): every upcall, revalidation and credit goes to it.
    pub p4: Option<Box<crate::p4::P4Path>>,
}

/// A table's lookup counters, as Open vSwitch counts them: every packet a
/// translation looked up in the table (each time: a `resubmit` back to it
/// counts again), and those of them that hit a rule. Packets of cached
/// datapath flows are credited to the tables their translation looked up,
/// when the datapath's counters are pushed (OVS's xlate cache `XC_TABLE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounters {
    pub lookup_count: u64,
    pub matched_count: u64,
}

/// A copy of an [`Ofproto`]'s rules (with their counters), groups and
/// meters: what a control request changes, kept so that a change the
/// daemon could not write to its config file is put back
/// ([`Ofproto::restore_rules`]).
#[derive(Clone)]
pub struct RuleState {
    tables: Vec<Option<Box<Table>>>,
    groups: Groups,
    meters: std::collections::BTreeMap<u32, nicflow_ofctl::meter::MeterSpec>,
    /// Length of the `FLOW_REMOVED` queue: notices queued by the change go
    /// with it.
    removed: usize,
}

impl Default for Ofproto {
    fn default() -> Self {
        Self::new()
    }
}

impl Ofproto {
    pub fn new() -> Self {
        Ofproto {
            tables: (0..N_TABLES).map(|_| None).collect(),
            frozen: Default::default(),
            removed: Vec::new(),
            meters: Default::default(),
            thawed: Default::default(),
            next_recirc: 0,
            mac: MacTable::default(),
            ports: Vec::new(),
            stats: OfprotoStats::default(),
            groups: Groups::new(),
            lookups: vec![TableCounters::default(); N_TABLES],
            p4: None,
        }
    }

    /// Copy the rules, groups and meters (see [`RuleState`]).
    pub fn save_rules(&self) -> RuleState {
        RuleState {
            tables: self.tables.clone(),
            groups: self.groups.clone(),
            meters: self.meters.clone(),
            removed: self.removed.len(),
        }
    }

    /// Put back what [`Ofproto::save_rules`] copied. The caller
    /// revalidates (and resyncs the datapath's meters).
    pub fn restore_rules(&mut self, s: RuleState) {
        self.tables = s.tables;
        self.groups = s.groups;
        self.meters = s.meters;
        self.removed.truncate(s.removed);
    }

    /// The recirculation id of a frozen walk (allocated on first use).
    pub fn freeze(&mut self, f: Frozen) -> u32 {
        if let Some(id) = self.frozen.get(&f) {
            return *id;
        }
        // Ids are never reused (0 means "not recirculated"), so an id a
        // forgotten state had can never resume a different walk.
        self.next_recirc = self.next_recirc.checked_add(1).unwrap_or(1);
        let id = self.next_recirc;
        self.frozen.insert(f, id);
        self.thawed.insert(id, f);
        id
    }

    /// Forget frozen walks no datapath flow refers to any more (registers
    /// moved from packet fields would otherwise make one per value, for
    /// ever). `live` holds every id in a cached flow's key or actions.
    pub fn retain_frozen(&mut self, live: &std::collections::HashSet<u32>) -> usize {
        let before = self.thawed.len();
        self.thawed.retain(|id, _| live.contains(id));
        self.frozen.retain(|_, id| live.contains(id));
        before - self.thawed.len()
    }

    /// Frozen walks held.
    pub fn n_frozen(&self) -> usize {
        self.thawed.len()
    }

    /// The walk a recirculation id resumes.
    pub fn thawed(&self, id: u32) -> Option<Frozen> {
        self.thawed.get(&id).copied()
    }

    pub fn stats(&self) -> &OfprotoStats {
        &self.stats
    }

    /// Tell the slow path which ports exist (for flood/all and to skip
    /// outputs to missing ports).
    pub fn set_ports(&mut self, mut ports: Vec<u32>) {
        ports.sort_unstable();
        ports.dedup();
        for old in self.ports.clone() {
            if ports.binary_search(&old).is_err() {
                self.mac.flush_port(old);
            }
        }
        self.ports = ports;
    }

    pub fn ports(&self) -> &[u32] {
        &self.ports
    }

    pub fn n_rules(&self) -> usize {
        self.tables.iter().flatten().map(|t| t.len()).sum()
    }

    /// May this rule go into its table? (Its table exists, `goto_table`
    /// goes forward, every group it names exists.)
    pub(crate) fn check_spec(&self, spec: &FlowSpec) -> Result<(), OfprotoError> {
        Self::validate(spec)?;
        for a in Action::flatten(&spec.actions) {
            match a {
                Action::Group(g) if !self.groups.contains(*g) => {
                    return Err(OfprotoError::BadOutGroup(*g));
                }
                Action::Meter(m) if !self.meters.contains_key(m) => {
                    return Err(OfprotoError::UnknownMeter(*m));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn validate(spec: &FlowSpec) -> Result<(), OfprotoError> {
        if spec.table as usize >= N_TABLES {
            return Err(OfprotoError::BadTable(spec.table));
        }
        for a in &spec.actions {
            if let Action::GotoTable(t) = a {
                if *t <= spec.table || *t as usize >= N_TABLES {
                    return Err(OfprotoError::BadGoto {
                        table: spec.table,
                        target: *t,
                    });
                }
            }
        }
        Ok(())
    }

    /// Add rules, all or nothing. A rule with the same match and priority as
    /// an existing one in its table replaces it (counters reset), as
    /// `ovs-ofctl add-flow` does. Returns the number added.
    pub fn add_flows(&mut self, specs: &[FlowSpec], now: Instant) -> Result<usize, OfprotoError> {
        for s in specs {
            self.check_spec(s)?;
        }
        for s in specs {
            let rule = Rule {
                priority: s.priority,
                cookie: s.cookie,
                idle_timeout: s.idle_timeout,
                hard_timeout: s.hard_timeout,
                // `send_flow_rem` is the one flow-mod flag rule text carries.
                flags: if s.send_flow_rem {
                    flow_mod::flags::SEND_FLOW_REM
                } else {
                    0
                },
                matching: s.r#match,
                actions: s.actions.clone(),
                created: now,
                last_used: now,
                n_packets: 0,
                n_bytes: 0,
            };
            let t = self.tables[s.table as usize].get_or_insert_with(|| Box::new(new_table()));
            let (_, old) = t.insert(
                s.r#match.key().words(),
                s.r#match.mask().words(),
                s.priority as u32,
                rule,
            );
            if old.is_some() {
                self.stats.rules_removed += 1;
            }
            self.stats.rules_added += 1;
        }
        Ok(specs.len())
    }

    pub fn add_flow(&mut self, spec: &FlowSpec, now: Instant) -> Result<(), OfprotoError> {
        self.add_flows(std::slice::from_ref(spec), now).map(|_| ())
    }

    /// A rule from `learn(...)` (OVS's `ofproto_flow_mod_learn`): when the
    /// same rule is there already (match, priority, cookie, timeouts,
    /// flags, actions) its timeouts start over and nothing else changes;
    /// otherwise it is added, replacing the rule at the same match and
    /// priority. True when the tables changed (cached decisions must be
    /// revalidated). A rule that cannot be added (a `goto_table` backwards,
    /// a missing group) is not, and changes nothing.
    pub(crate) fn learn_flow(&mut self, spec: &FlowSpec, now: Instant) -> bool {
        if self.check_spec(spec).is_err() {
            return false;
        }
        let flags = if spec.send_flow_rem {
            flow_mod::flags::SEND_FLOW_REM
        } else {
            0
        };
        let m = &spec.r#match;
        if let Some(Some(t)) = self.tables.get_mut(spec.table as usize) {
            let id = t.find_exact(m.key().words(), m.mask().words(), spec.priority.into());
            if let Some(r) = id.and_then(|id| t.get_mut(id)) {
                if r.cookie == spec.cookie
                    && r.idle_timeout == spec.idle_timeout
                    && r.hard_timeout == spec.hard_timeout
                    && r.flags == flags
                    && r.actions == spec.actions
                {
                    r.created = now;
                    r.last_used = now;
                    return false;
                }
            }
        }
        self.add_flow(spec, now).is_ok()
    }

    /// Delete rules, `ovs-ofctl del-flows` style (non-strict): every rule in
    /// the selected table(s) whose match is at least as specific as the
    /// filter and agrees with it on the filter's bits, with the cookie
    /// filter applied. Returns how many were removed.
    pub fn del_flows(&mut self, filter: &MatchSpec) -> usize {
        let mut n = 0;
        for (tid, t) in self.tables.iter_mut().enumerate() {
            if filter.table.is_some_and(|ft| ft as usize != tid) {
                continue;
            }
            let Some(t) = t else { continue };
            t.retain(|_, key, mask, prio, rule| {
                let covered = covers(&filter.r#match, key, mask)
                    && filter.priority.is_none_or(|p| p as u32 == prio)
                    && filter.cookie.is_none_or(|(c, m)| rule.cookie & m == c & m);
                if covered {
                    n += 1;
                }
                !covered
            });
        }
        self.stats.rules_removed += n as u64;
        n
    }

    /// The group table.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// `add-group` (`modify == false`: none may exist yet) or `mod-group`
    /// (all must exist), all or nothing.
    pub fn add_groups(
        &mut self,
        specs: &[GroupSpec],
        modify: bool,
        now: Instant,
    ) -> Result<(), OfprotoError> {
        self.groups.add(specs, modify, now)?;
        Ok(())
    }

    /// `del-groups`: remove one group (or all, `None`) and, as OVS does,
    /// every rule whose actions name a removed group. Returns (groups,
    /// rules) removed.
    pub fn del_groups(&mut self, id: Option<u32>) -> (usize, usize) {
        let gone = self.groups.remove(id);
        if gone.is_empty() {
            return (0, 0);
        }
        let now = Instant::now();
        let mut removed = Vec::new();
        for (tid, t) in self.tables.iter_mut().enumerate() {
            let Some(t) = t else { continue };
            t.retain(|_, _, _, _, r| {
                let refers = Action::flatten(&r.actions)
                    .into_iter()
                    .any(|a| matches!(a, Action::Group(g) if gone.contains(g)));
                if refers {
                    let why = flow_mod::RemovedReason::GroupDelete;
                    removed.push(flow_mod::RemovedRule::of(tid as u8, r, why, now));
                }
                !refers
            });
        }
        self.stats.rules_removed += removed.len() as u64;
        self.note_removed(&removed);
        (gone.len(), removed.len())
    }

    /// Groups in id order, as added.
    pub fn dump_groups(&self) -> Vec<GroupSpec> {
        self.groups.iter().map(|g| g.spec.clone()).collect()
    }

    /// Group counters (`dump-group-stats`); `ref_count` is the number of
    /// rules naming the group.
    pub fn group_stats(&self, now: Instant) -> Vec<GroupStats> {
        let mut refs: std::collections::HashMap<u32, u32> = Default::default();
        for t in self.tables.iter().flatten() {
            for r in t.iter() {
                let mut seen: Vec<u32> = Vec::new();
                for a in Action::flatten(&r.value.actions) {
                    if let Action::Group(g) = a {
                        if !seen.contains(g) {
                            seen.push(*g);
                            *refs.entry(*g).or_default() += 1;
                        }
                    }
                }
            }
        }
        self.groups
            .iter()
            .map(|g| GroupStats {
                group_id: g.spec.group_id,
                duration: now.saturating_duration_since(g.created),
                ref_count: refs.get(&g.spec.group_id).copied().unwrap_or(0),
                packets: g.packets,
                bytes: g.bytes,
                buckets: g.buckets.clone(),
            })
            .collect()
    }

    /// Remove rules whose idle or hard timeout has passed.
    pub fn expire(&mut self, now: Instant) -> usize {
        use flow_mod::RemovedReason;
        let mut removed = Vec::new();
        for (tid, t) in self.tables.iter_mut().enumerate() {
            let Some(t) = t else { continue };
            t.retain(|_, _, _, _, r| {
                let hard = r.hard_timeout > 0
                    && now.saturating_duration_since(r.created)
                        >= Duration::from_secs(r.hard_timeout as u64);
                let idle = r.idle_timeout > 0
                    && now.saturating_duration_since(r.last_used)
                        >= Duration::from_secs(r.idle_timeout as u64);
                let why = match (hard, idle) {
                    (true, _) => Some(RemovedReason::HardTimeout),
                    (false, true) => Some(RemovedReason::IdleTimeout),
                    _ => None,
                };
                if let Some(why) = why {
                    removed.push(flow_mod::RemovedRule::of(tid as u8, r, why, now));
                }
                why.is_none()
            });
        }
        self.stats.rules_expired += removed.len() as u64;
        self.note_removed(&removed);
        removed.len()
    }

    /// All rules, table by table, highest priority first.
    pub fn dump_flows(&self, now: Instant) -> Vec<RuleDump> {
        let mut out = Vec::new();
        for (tid, t) in self.tables.iter().enumerate() {
            let Some(t) = t else { continue };
            let mut rules: Vec<&Rule> = t.iter().map(|r| r.value).collect();
            rules.sort_by_key(|r| std::cmp::Reverse(r.priority));
            out.extend(rules.into_iter().map(|r| r.dump(tid as u8, now)));
        }
        out
    }

    pub(crate) fn table(&self, id: u8) -> Option<&Table> {
        self.tables.get(id as usize)?.as_deref()
    }

    pub fn rule(&self, r: RuleRef) -> Option<&Rule> {
        self.table(r.table)?.get(r.rule?)
    }

    /// Lookup counters per table (index = table id), as far as the
    /// datapath's counters have been pushed.
    pub fn table_counters(&self) -> &[TableCounters] {
        &self.lookups
    }

    fn rule_mut(&mut self, table: u8, id: RuleId) -> Option<&mut Rule> {
        self.tables
            .get_mut(table as usize)?
            .as_deref_mut()?
            .get_mut(id)
    }

    /// Translate a packet's key into a datapath flow. `learn` enables side
    /// effects (MAC learning); revalidation runs without them.
    pub fn translate(&mut self, key: &FlowKey, learn: Option<Instant>) -> XlateOut {
        self.translate_len(key, None, learn)
    }

    /// [`Ofproto::translate`] knowing the frame's length (an upcall's).
    pub fn translate_len(
        &mut self,
        key: &FlowKey,
        pkt_len: Option<usize>,
        learn: Option<Instant>,
    ) -> XlateOut {
        self.stats.xlates += 1;
        let out = xlate::translate_len(self, key, pkt_len, learn);
        if !out.rules.iter().any(|r| r.rule.is_some()) {
            self.stats.table_misses += 1;
        }
        out
    }
}

/// Does `filter` select a rule with (key, mask)? True when every filter bit
/// is also matched by the rule, with the same value.
fn covers(filter: &Match, key: &[u64; FLOW_WORDS], mask: &[u64; FLOW_WORDS]) -> bool {
    let fk = filter.key().words();
    let fm = filter.mask().words();
    (0..FLOW_WORDS).all(|i| fm[i] & !mask[i] == 0 && key[i] & fm[i] == fk[i])
}

impl UpcallHandler for Ofproto {
    fn upcall(&mut self, key: &FlowKey, packet: &[u8], now: Instant) -> XlateOut {
        if let Some(p4) = self.p4.as_deref_mut() {
            return p4.upcall(key, packet, now);
        }
        self.translate_len(key, Some(packet.len()), Some(now))
    }

    fn revalidate(&mut self, key: &FlowKey) -> XlateOut {
        if let Some(p4) = self.p4.as_deref_mut() {
            return p4.revalidate(key);
        }
        self.translate(key, None)
    }

    fn unparsed(
        &mut self,
        in_port: u32,
        packet: &[u8],
        now: Instant,
    ) -> Option<(crate::datapath::Frames, bool)> {
        self.p4.as_deref_mut()?.unparsed(in_port, packet, now)
    }

    fn changed_scope(&mut self, keys: &mut Vec<FlowKey>) -> bool {
        // MAC learning may change any flow's decision: all of them.
        match self.p4.as_deref_mut() {
            Some(p4) => p4.changed_scope(keys),
            None => false,
        }
    }

    fn credit(
        &mut self,
        rules: &[RuleRef],
        learned: Option<(u16, [u8; 6], u32)>,
        packets: u64,
        bytes: u64,
        used: Instant,
    ) {
        if let Some(p4) = self.p4.as_deref_mut() {
            return p4.credit(rules, learned, packets, bytes, used);
        }
        for r in rules {
            if self.groups.credit(r, packets, bytes) {
                continue;
            }
            if let Some(t) = self.lookups.get_mut(r.table as usize) {
                t.lookup_count += packets;
                if r.rule.is_some() {
                    t.matched_count += packets;
                }
            }
            let Some(id) = r.rule else { continue };
            if let Some(rule) = self.rule_mut(r.table, id) {
                rule.n_packets += packets;
                rule.n_bytes += bytes;
                if used > rule.last_used {
                    rule.last_used = used;
                }
            }
        }
        // Traffic through a learned flow keeps its source MAC alive, as
        // OVS's revalidators do from datapath flow stats.
        if let Some((vlan, mac, port)) = learned {
            self.mac.refresh(vlan, mac, port, used);
        }
    }
}
