//! P4 programs as a bridge's slow path (`nicflow p4 load`).
//!
//! A bridge in P4 mode sends the packets that miss its caches here instead
//! of to the OpenFlow tables: the program (PNA, v1model or PSA, run by the
//! `nicflow-p4` interpreter) decides, and [`megaflow`] turns the run into a
//! datapath flow — the bits read become the mask, the changed fields
//! become `set(...)` actions — which the same caches and engines
//! (userspace, TC, XDP) execute from then on, as PISCES did with OVS.
//! Decisions that depend on per-packet state (registers, meters, ...) or
//! rewrite what no datapath action can (a pushed header) are not cached:
//! the interpreter's own output frames are sent, for every packet, and
//! [`P4Path::slow_path_reasons`] says why.
//!
//! Port numbers: the program sees a bridge port under its OpenFlow number
//! unless a [`PortMap`] says otherwise (the STF runner maps P4 port N to
//! bridge port N + 1, since bridge ports start at 1).
//!
//! Table changes revalidate only the cached flows they could affect: each
//! cached run remembers, per table it applied, the table's generation,
//! the pipeline's change sequence number, the entry it hit and the key
//! values it looked up. Flows whose tables did not change are untouched;
//! for the others the pipeline's change log decides
//! ([`Pipeline::apply_unaffected`]): a flow stays when no change since
//! its run could alter any lookup it made (an added entry that cannot
//! match its keys, a deleted one it did not hit, ...), else it goes.
//!
//! The CPU port (P4Runtime's PacketIn/PacketOut, BMv2's `--cpu-port`): a
//! copy the program sends to it is queued for the controller instead of
//! transmitted (with its `packet_in` header in front, which the P4Runtime
//! server strips), and such runs are never cached: every packet has to
//! reach the controller. [`P4Path::inject`] runs a controller's frame into
//! the program as arriving on the CPU port.

pub mod megaflow;
pub mod stf;

use crate::datapath::{RuleRef, UpcallHandler, XlateOut};
use nicflow_classifier::RuleId;
use nicflow_flow::FlowKey;
use nicflow_p4::{Outcome, Pipeline, Trace};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// P4 port numbers <-> bridge port numbers.
#[derive(Clone, Debug, Default)]
pub struct PortMap {
    to_bridge: BTreeMap<u32, u32>,
    to_p4: BTreeMap<u32, u32>,
    /// Without an explicit entry, a port keeps its number.
    pub identity: bool,
}

impl PortMap {
    /// Every port under its own number.
    pub fn identity() -> PortMap {
        PortMap {
            identity: true,
            ..PortMap::default()
        }
    }

    /// P4 port `p4` is bridge port `bridge`.
    pub fn insert(&mut self, p4: u32, bridge: u32) {
        self.to_bridge.insert(p4, bridge);
        self.to_p4.insert(bridge, p4);
    }

    pub fn to_bridge(&self, p4: u32) -> Option<u32> {
        match self.to_bridge.get(&p4) {
            Some(b) => Some(*b),
            None if self.identity => Some(p4),
            None => None,
        }
    }

    pub fn to_p4(&self, bridge: u32) -> Option<u32> {
        match self.to_p4.get(&bridge) {
            Some(p) => Some(*p),
            None if self.identity => Some(bridge),
            None => None,
        }
    }
}

/// What a cached flow came from: the tables its run applied (with their
/// generation then), the run's trace (for crediting counters and entry
/// hit times) and the decision, for revalidation.
struct CachedRun {
    /// The key of the packet that made it (its flow's translation key).
    key: FlowKey,
    /// Per apply of `trace.tables` (same order): the bridge's generation
    /// of the table and the pipeline's change sequence number then.
    tables: Vec<(std::sync::Arc<str>, u64, u64)>,
    trace: Trace,
    out: XlateOut,
    /// The first packet was counted by the interpreter itself: the flow's
    /// first credited packet and bytes are skipped.
    skip: Option<(u64, u64)>,
}

/// Is `run` still what its packet would give (every table it applied
/// unchanged, or changed in no way that matters to it)? Returns (fresh,
/// changed): a fresh run whose tables changed is brought up to date.
/// `coarse`: any change of a table it applied makes it stale.
fn refresh(
    run: &mut CachedRun,
    pipeline: &Pipeline,
    gens: &HashMap<String, u64>,
    coarse: bool,
) -> (bool, bool) {
    let gen = |t: &str| gens.get(t).copied().unwrap_or(0);
    let mut changed = false;
    let fresh = run
        .tables
        .iter()
        .zip(&run.trace.tables)
        .all(|((t, g, s), a)| {
            let seq = pipeline.table_change_seq(a.index);
            if gen(t) == *g && seq == *s {
                return true;
            }
            changed = true;
            // A generation moved with nothing in the table's log: a change
            // the log does not describe (`pipeline_mut_for` with a change
            // no table operation records): it may alter anything.
            !coarse && seq != *s && pipeline.apply_unaffected(&run.trace, a, *s)
        });
    if fresh && changed {
        for ((t, g, s), a) in run.tables.iter_mut().zip(&run.trace.tables) {
            *g = gen(t);
            *s = pipeline.table_change_seq(a.index);
        }
    }
    (fresh, changed)
}

/// Counters of the P4 slow path.
#[derive(Clone, Debug, Default)]
pub struct P4Stats {
    /// Packets the interpreter ran.
    pub runs: u64,
    /// Runs whose decision was cached as a datapath flow.
    pub cached: u64,
    /// Revalidations of a flow whose tables changed that kept it: no
    /// change since its run could alter its lookups.
    pub kept: u64,
    /// Revalidations that removed a flow because a change could alter its
    /// run (its next packet runs the program again).
    pub stale: u64,
    /// Runs that ended on an interpreter error (dropped).
    pub errors: u64,
    /// Output copies to a port number no bridge port has (dropped).
    pub unknown_port: u64,
    /// Copies sent to the CPU port, queued for the controller.
    pub packet_in: u64,
    /// Copies to the CPU port dropped because the queue was full (no
    /// controller is taking them, or not fast enough).
    pub packet_in_dropped: u64,
}

/// Frames to the CPU port kept for the controller at most; more are
/// dropped and counted (`packet_in_dropped`).
pub const PACKET_IN_QUEUE: usize = 1024;

/// The P4 slow path of one bridge.
pub struct P4Path {
    pipeline: Pipeline,
    /// What was loaded (a path, or `p4runtime`), for `show`.
    pub source: String,
    pub ports: PortMap,
    epoch: Instant,
    /// Cached runs by the key of the packet that made them.
    runs: HashMap<FlowKey, u32>,
    credits: Vec<Option<CachedRun>>,
    free: Vec<u32>,
    /// Table generations: bumped on every change of the table.
    gens: HashMap<String, u64>,
    next_gen: u64,
    /// Uncached runs by reason.
    slow: BTreeMap<String, u64>,
    pub stats: P4Stats,
    /// Idle entries already reported, and reports not yet taken.
    notified: std::collections::HashSet<(String, nicflow_p4::EntryId)>,
    idle: Vec<(String, nicflow_p4::EntryId)>,
    /// The program's CPU port number, if the controller has one.
    cpu_port: Option<u32>,
    /// Frames the program sent to the CPU port, oldest first.
    packet_ins: std::collections::VecDeque<Vec<u8>>,
    /// Revalidation removes every flow that applied a changed table, as
    /// before the change logs (`set_coarse_revalidation`).
    coarse: bool,
    /// Per table index: the slots of the cached runs that applied it, so
    /// that a change of a few tables names the few flows it could affect
    /// ([`UpcallHandler::changed_scope`]).
    applied: Vec<std::collections::HashSet<u32>>,
    /// Table indices by qualified name (for the tables changes name).
    index: HashMap<String, u32>,
    /// Per table index: marked (`bump`) since the last `changed_scope`.
    pending: Vec<bool>,
    /// A table that is not the program's was marked: the scope is every
    /// flow.
    pending_unknown: bool,
    /// Per table index: its change sequence number at the last
    /// `changed_scope` (a change made through `pipeline_mut`, which marks
    /// nothing, is still seen).
    seen_seq: Vec<u64>,
}

impl P4Path {
    pub fn new(mut pipeline: Pipeline, source: String, ports: PortMap) -> P4Path {
        // Revalidation compares table changes with the keys each cached
        // run looked up.
        pipeline.record_table_keys(true);
        let index: HashMap<String, u32> = pipeline
            .tables()
            .into_iter()
            .enumerate()
            .map(|(i, t)| (t.name, i as u32))
            .collect();
        let n = index.len();
        let seen_seq = (0..n as u32)
            .map(|i| pipeline.table_change_seq(i))
            .collect();
        P4Path {
            pipeline,
            source,
            ports,
            epoch: Instant::now(),
            runs: HashMap::new(),
            credits: Vec::new(),
            free: Vec::new(),
            gens: HashMap::new(),
            next_gen: 1,
            slow: BTreeMap::new(),
            stats: P4Stats::default(),
            notified: Default::default(),
            idle: Vec::new(),
            cpu_port: None,
            packet_ins: Default::default(),
            coarse: false,
            applied: vec![Default::default(); n],
            index,
            pending: vec![false; n],
            pending_unknown: false,
            seen_seq,
        }
    }

    /// Per-table revalidation (every flow that applied a changed table
    /// goes, whatever the change) instead of the change logs: what
    /// nicflow did before, kept so that the benchmark can measure both
    /// on one build. Not for use otherwise.
    #[doc(hidden)]
    pub fn set_coarse_revalidation(&mut self, on: bool) {
        self.coarse = on;
    }

    /// P4 port `port` is the CPU port (None: the program has none): its
    /// copies go to the controller ([`P4Path::take_packet_ins`]).
    pub fn set_cpu_port(&mut self, port: Option<u32>) {
        self.cpu_port = port;
    }

    pub fn cpu_port(&self) -> Option<u32> {
        self.cpu_port
    }

    /// Frames sent to the CPU port not yet taken, oldest first.
    pub fn take_packet_ins(&mut self, max: usize) -> Vec<Vec<u8>> {
        let n = max.min(self.packet_ins.len());
        self.packet_ins.drain(..n).collect()
    }

    /// Runs a controller's frame (PacketOut, its `packet_out` header
    /// already in front) through the program as arriving on the CPU port.
    /// Returns the copies for bridge ports; copies back to the CPU port
    /// are queued as packet-ins. Nothing is cached: the frame did not come
    /// from a port. Tables the run changed (add_on_miss) are marked.
    pub fn inject(&mut self, packet: &[u8], now: Instant) -> Result<Vec<(u32, Vec<u8>)>, String> {
        let cpu = self
            .cpu_port
            .ok_or("the bridge's P4 program has no CPU port (load it with --cpu-port)")?;
        self.stats.runs += 1;
        let out = self.pipeline.process(cpu, packet, self.now_ns(now));
        self.bump_changed(&out.trace);
        if let Some(e) = &out.trace.error {
            self.stats.errors += 1;
            return Err(format!("the program failed on the frame: {e}"));
        }
        let (outputs, _) = self.map_outputs(out.outputs);
        *self.slow.entry("p4-packet-out".into()).or_default() += 1;
        Ok(outputs)
    }

    /// Maps the program's output ports to bridge ports: copies to the CPU
    /// port are queued for the controller, copies to unknown ports are
    /// dropped and counted. The flag says a copy went to the CPU port.
    fn map_outputs(&mut self, outputs: Vec<(u32, Vec<u8>)>) -> (Vec<(u32, Vec<u8>)>, bool) {
        let mut to_cpu = false;
        let mut mapped = Vec::with_capacity(outputs.len());
        for (p, d) in outputs {
            if Some(p) == self.cpu_port {
                to_cpu = true;
                if self.packet_ins.len() < PACKET_IN_QUEUE {
                    self.stats.packet_in += 1;
                    self.packet_ins.push_back(d);
                } else {
                    self.stats.packet_in_dropped += 1;
                }
            } else if let Some(b) = self.ports.to_bridge(p) {
                mapped.push((b, d));
            } else {
                self.stats.unknown_port += 1;
            }
        }
        (mapped, to_cpu)
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The pipeline for a control-plane change of `tables` (qualified
    /// names). Their cached flows are checked against the tables' change
    /// logs at the next revalidation; a flow of a table whose log shows
    /// no change since its run goes (the change, whatever it was, is not
    /// one the log describes).
    pub fn pipeline_mut_for(&mut self, tables: &[&str]) -> &mut Pipeline {
        for t in tables {
            self.bump(t);
        }
        &mut self.pipeline
    }

    /// The pipeline for a change that affects no cached decision (counter
    /// and register reads, meter rates of uncached runs).
    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    fn bump(&mut self, table: &str) {
        self.next_gen += 1;
        self.gens.insert(table.to_string(), self.next_gen);
        match self.index.get(table) {
            Some(&i) => self.pending[i as usize] = true,
            None => self.pending_unknown = true,
        }
    }

    fn gen(&self, table: &str) -> u64 {
        self.gens.get(table).copied().unwrap_or(0)
    }

    /// Nanoseconds since the path was made: the interpreter's clock.
    pub fn now_ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    /// Uncached runs by reason (`p4-register`, `p4-header-layout`, ...).
    pub fn slow_path_reasons(&self) -> &BTreeMap<String, u64> {
        &self.slow
    }

    /// Run one packet through the program and map its output ports; the
    /// flag says a copy went to the CPU port (the run must not be cached).
    fn run(&mut self, key: &FlowKey, packet: &[u8], now: Instant) -> Option<(Outcome, bool)> {
        self.stats.runs += 1;
        let in_port = self.ports.to_p4(key.in_port)?;
        let mut out = self.pipeline.process(in_port, packet, self.now_ns(now));
        if out.trace.error.is_some() {
            self.stats.errors += 1;
            out.outputs.clear();
        }
        let (outputs, to_cpu) = self.map_outputs(std::mem::take(&mut out.outputs));
        out.outputs = outputs;
        Some((out, to_cpu))
    }

    fn slow_path(&mut self, reason: &str, outputs: Vec<(u32, Vec<u8>)>) -> XlateOut {
        *self.slow.entry(reason.to_string()).or_default() += 1;
        XlateOut {
            install: false,
            emitted: outputs,
            ..XlateOut::default()
        }
    }
}

impl P4Path {
    /// Mark the tables a run changed; true if there were any.
    fn bump_changed(&mut self, trace: &Trace) -> bool {
        for t in &trace.tables_changed {
            self.bump(t);
        }
        !trace.tables_changed.is_empty()
    }

    /// The flow (or the uncached answer) for one run.
    fn decide(&mut self, key: &FlowKey, packet: &[u8], out: Outcome) -> XlateOut {
        let Outcome { outputs, trace } = out;
        if let Some(e) = &trace.error {
            tracing::debug!("p4: run failed: {e}");
            return self.slow_path("p4-error", Vec::new());
        }
        if let Some(reason) = trace.uncacheable.clone() {
            return self.slow_path(&reason, outputs);
        }
        let mut k = FlowKey::default();
        let Ok(layout) = nicflow_flow::extract(packet, key.in_port, &mut k) else {
            return self.slow_path(megaflow::HEADER_LAYOUT, outputs);
        };
        let reads: Vec<(u32, u32)> = trace.read_bits.iter().map(|r| (r.offset, r.len)).collect();
        let emitted: Vec<(u32, u32, Option<u32>)> = trace
            .emitted
            .iter()
            .map(|e| (e.out, e.len, e.from))
            .collect();
        let d = megaflow::Decision {
            reads: &reads,
            in_port_read: trace.in_port_read,
            outputs: &outputs,
            emitted: &emitted,
            min_len: trace.min_packet_len,
        };
        let (mask, actions) = match megaflow::derive(key, packet, &layout, &d) {
            Ok(x) => x,
            Err(reason) => return self.slow_path(reason, outputs),
        };
        self.stats.cached += 1;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.credits.push(None);
                (self.credits.len() - 1) as u32
            }
        };
        let rules = vec![RuleRef {
            table: 0,
            rule: Some(RuleId::external(slot)),
        }];
        let out = XlateOut {
            mask,
            actions,
            rules,
            install: true,
            ..XlateOut::default()
        };
        let tables = trace
            .tables
            .iter()
            .map(|t| {
                (
                    t.table.clone(),
                    self.gen(&t.table),
                    self.pipeline.table_change_seq(t.index),
                )
            })
            .collect();
        if let Some(old) = self.runs.insert(*key, slot) {
            self.release(old);
        }
        for t in &trace.tables {
            if let Some(set) = self.applied.get_mut(t.index as usize) {
                set.insert(slot);
            }
        }
        self.credits[slot as usize] = Some(CachedRun {
            key: *key,
            tables,
            trace,
            out: out.clone(),
            skip: Some((1, packet.len() as u64)),
        });
        out
    }
}

impl UpcallHandler for P4Path {
    fn upcall(&mut self, key: &FlowKey, packet: &[u8], now: Instant) -> XlateOut {
        let Some((out, to_cpu)) = self.run(key, packet, now) else {
            return self.slow_path(megaflow::UNKNOWN_PORT, Vec::new());
        };
        // The run added table entries (add_on_miss): flows that applied
        // those tables may be stale, whatever became of this run.
        let changed = self.bump_changed(&out.trace);
        if to_cpu && out.trace.error.is_none() {
            // Every packet of such a flow must reach the controller.
            let mut x = self.slow_path(megaflow::PACKET_IN, out.outputs);
            x.state_changed |= changed;
            return x;
        }
        let mut x = self.decide(key, packet, out);
        x.state_changed |= changed;
        x
    }

    fn unparsed(
        &mut self,
        in_port: u32,
        packet: &[u8],
        now: Instant,
    ) -> Option<(crate::datapath::Frames, bool)> {
        let key = FlowKey {
            in_port,
            ..FlowKey::default()
        };
        let (outputs, changed) = match self.run(&key, packet, now) {
            Some((o, _)) => {
                let changed = self.bump_changed(&o.trace);
                let outs = if o.trace.error.is_none() {
                    o.outputs
                } else {
                    Vec::new()
                };
                (outs, changed)
            }
            None => (Vec::new(), false),
        };
        *self.slow.entry("p4-unparsed-frame".into()).or_default() += 1;
        Some((outputs, changed))
    }

    /// The cached flows that applied a table marked or changed since the
    /// last call and that the changes could affect: a flow that applied
    /// none cannot be (its revalidation compares exactly those tables'
    /// generations and change sequence numbers), and one the change logs
    /// show unaffected is brought up to date here, as its revalidation
    /// would, without the datapath touching it (its decision stays the
    /// same: nothing to fix). Only the others are named, for the datapath
    /// to revalidate (they go).
    fn changed_scope(&mut self, keys: &mut Vec<FlowKey>) -> bool {
        let unknown = std::mem::take(&mut self.pending_unknown);
        for (i, seen) in self.seen_seq.iter_mut().enumerate() {
            let seq = self.pipeline.table_change_seq(i as u32);
            let marked = std::mem::take(&mut self.pending[i]);
            if !marked && seq == *seen {
                continue;
            }
            *seen = seq;
            if unknown {
                continue;
            }
            for &slot in &self.applied[i] {
                let Some(Some(run)) = self.credits.get_mut(slot as usize) else {
                    continue;
                };
                match refresh(run, &self.pipeline, &self.gens, self.coarse) {
                    (true, changed) => self.stats.kept += changed as u64,
                    (false, _) => keys.push(run.key),
                }
            }
        }
        !unknown
    }

    fn revalidate(&mut self, key: &FlowKey) -> XlateOut {
        let Some(&slot) = self.runs.get(key) else {
            return XlateOut::default();
        };
        // Per apply: unchanged, changed in no way that matters (then
        // brought up to date), or affected.
        let (pipeline, gens, coarse) = (&self.pipeline, &self.gens, self.coarse);
        let fresh = match self.credits.get_mut(slot as usize).and_then(Option::as_mut) {
            Some(run) => {
                let (fresh, changed) = refresh(run, pipeline, gens, coarse);
                fresh.then(|| (run.out.clone(), changed))
            }
            None => None,
        };
        match fresh {
            Some((out, changed)) => {
                if changed {
                    self.stats.kept += 1;
                }
                out
            }
            None => {
                self.stats.stale += 1;
                // A table it applied changed: the flow goes and its next
                // packet runs the program again (a rerun here would count
                // counters and touch registers a second time).
                self.runs.remove(key);
                self.release(slot);
                XlateOut::default()
            }
        }
    }

    fn credit(
        &mut self,
        rules: &[RuleRef],
        _learned: Option<(u16, [u8; 6], u32)>,
        packets: u64,
        bytes: u64,
        used: Instant,
    ) {
        let now_ns = self.now_ns(used);
        for r in rules {
            let Some(slot) = r.rule.and_then(|id| id.external_index()) else {
                continue;
            };
            let Some(Some(run)) = self.credits.get_mut(slot as usize) else {
                continue;
            };
            let (mut p, mut b) = (packets, bytes);
            if let Some((sp, sb)) = run.skip.take() {
                p = p.saturating_sub(sp);
                b = b.saturating_sub(sb);
            }
            if p > 0 {
                self.pipeline.credit(&run.trace, p, b, now_ns);
            }
        }
    }
}

impl P4Path {
    /// Change one table through `f` (given the pipeline and the table's
    /// qualified name); on success its cached flows are marked stale
    /// (they go at the revalidation that follows); on error nothing
    /// changed.
    pub fn change_table<T>(
        &mut self,
        table: &str,
        f: impl FnOnce(&mut Pipeline, &str) -> Result<T, String>,
    ) -> Result<T, String> {
        let name = self
            .pipeline
            .table_info(table)
            .map_err(|e| e.to_string())?
            .name;
        let r = f(&mut self.pipeline, &name)?;
        self.bump(&name);
        Ok(r)
    }

    /// Entries idle past their timeout: those of `add_on_miss` tables are
    /// deleted (learned entries age out, as a learner table's do); for the
    /// others a notification is queued for the controller
    /// ([`P4Path::take_idle_notifications`]), once per idle period.
    /// Returns how many entries were deleted.
    pub fn expire_idle(&mut self, now: Instant) -> usize {
        let now_ns = self.now_ns(now);
        let mut deleted = 0;
        let expired = self.pipeline.expired_entries(now_ns);
        // An entry hit again (or deleted) since it was reported may be
        // reported again when it next goes idle.
        self.notified.retain(|k| expired.contains(k));
        for (table, id) in expired {
            let learner = self
                .pipeline
                .table_info(&table)
                .map(|t| t.add_on_miss)
                .unwrap_or(false);
            if learner {
                if self.pipeline.table_delete(&table, id).is_ok() {
                    self.bump(&table);
                    deleted += 1;
                }
            } else if self.notified.insert((table.clone(), id)) {
                self.idle.push((table, id));
            }
        }
        deleted
    }

    /// Idle-timeout notifications not yet taken (table, entry).
    pub fn take_idle_notifications(&mut self) -> Vec<(String, nicflow_p4::EntryId)> {
        std::mem::take(&mut self.idle)
    }

    fn release(&mut self, slot: u32) {
        if let Some(s) = self.credits.get_mut(slot as usize) {
            if let Some(run) = s.take() {
                for t in &run.trace.tables {
                    if let Some(set) = self.applied.get_mut(t.index as usize) {
                        set.remove(&slot);
                    }
                }
                self.free.push(slot);
            }
        }
    }

    /// Forget cached runs whose flows are gone (called after the datapath
    /// removed flows: expiry, flush). `live` holds the keys of the flows
    /// still cached.
    pub fn retain_runs(&mut self, live: &std::collections::HashSet<FlowKey>) {
        let gone: Vec<(FlowKey, u32)> = self
            .runs
            .iter()
            .filter(|(k, _)| !live.contains(k))
            .map(|(k, s)| (*k, *s))
            .collect();
        for (k, s) in gone {
            self.runs.remove(&k);
            self.release(s);
        }
    }
}
