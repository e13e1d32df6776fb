//! The per-packet interpreter: runs the checked program's parser states,
//! controls, actions, tables and deparser over one packet under the
//! architecture model, recording what it read in the [`Trace`].
//! [`Pipeline`] is the object the bridge keeps per P4 program: it owns
//! the program, the table entries and the extern state.

pub mod arch;
pub(crate) mod changes;
pub mod check;

pub(crate) mod eval;
pub(crate) mod externs;
pub(crate) mod fast;
pub(crate) mod index;
pub(crate) mod ops;
pub(crate) mod runtime_ops;
pub(crate) mod table;

use crate::ast;
use crate::interp::arch::Arch;
use crate::interp::check::{Entry, P4Error, Prog};
use crate::trace::Trace;
use crate::value::Value;
use eval::{BitBuf, Run};
use std::path::{Path, PathBuf};

/// Result of one packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// (port, frame) per transmitted copy; empty = dropped.
    pub outputs: Vec<(u32, Vec<u8>)>,
    pub trace: Trace,
}

/// Token bucket (two-rate three-colour, simplified).
#[derive(Clone, Debug, Default)]
pub(crate) struct Bucket {
    pub cfg: crate::runtime::MeterConfig,
    pub ctokens: u64,
    pub ptokens: u64,
    pub last: u64,
    pub configured: bool,
}

impl Bucket {
    /// 0 green, 1 yellow, 2 red. Unconfigured meters are green.
    pub fn color(&mut self, now: u64, bytes: u64) -> u32 {
        if !self.configured {
            return 0;
        }
        let dt = now.saturating_sub(self.last);
        self.last = now;
        let add = |rate: u64| {
            ((rate as u128 * dt as u128) / 1_000_000_000u128).min(u64::MAX as u128) as u64
        };
        self.ctokens = self
            .ctokens
            .saturating_add(add(self.cfg.cir))
            .min(self.cfg.cburst);
        self.ptokens = self
            .ptokens
            .saturating_add(add(self.cfg.pir))
            .min(self.cfg.pburst);
        if self.ptokens < bytes {
            return 2;
        }
        self.ptokens -= bytes;
        if self.ctokens < bytes {
            return 1;
        }
        self.ctokens -= bytes;
        0
    }
}

pub(crate) enum ExternState {
    None,
    Csum(u32),
    Data(BitBuf),
    Counter { packets: Vec<u64>, bytes: Vec<u64> },
    Register(Vec<u128>),
    Meter(Vec<Bucket>),
}

pub(crate) struct TableState {
    /// Runtime entries in insertion order (ids grow): change them only
    /// through `push_entry`/`remove_entry`/`clear_entries`, which keep
    /// `index` in sync.
    pub entries: Vec<Entry>,
    /// Copies of the const entries (hit counts, last-hit times).
    pub const_hits: Vec<Entry>,
    pub default: (usize, Vec<Value>),
    pub next_id: u64,
    /// How lookups find the winner without scanning (`apply_table`).
    pub index: index::TableIndex,
    /// What changed, for revalidating cached runs one by one: every
    /// change of `entries` or `default` is recorded here.
    pub log: changes::ChangeLog,
}

impl TableState {
    fn new(t: &check::TableDef) -> TableState {
        let shape: Vec<_> = t.keys.iter().map(|k| (k.kind.clone(), k.width)).collect();
        TableState {
            entries: Vec::new(),
            const_hits: t.const_entries.clone(),
            default: (t.default_action, t.default_args.clone()),
            next_id: t.const_entries.len() as u64,
            index: index::TableIndex::new(&shape, &t.const_entries),
            log: changes::ChangeLog::default(),
        }
    }

    /// Appends a runtime entry (its id must be above every present one:
    /// `next_id`).
    pub fn push_entry(&mut self, e: Entry) {
        self.log.record(changes::Change::Added {
            keys: e.keys.clone().into_boxed_slice(),
            prio: e.prio,
            order: index::runtime_order(e.id),
        });
        if self.entries.last().is_some_and(|l| l.id >= e.id) {
            // Not in id order: the index's table order would be wrong;
            // keep the entries sorted and rebuild.
            let at = self.entries.partition_point(|x| x.id < e.id);
            self.entries.insert(at, e);
            self.index.rebuild(&self.const_hits, &self.entries);
            return;
        }
        self.index.insert(index::runtime_order(e.id), &e);
        self.entries.push(e);
    }

    /// Removes the runtime entry `id`.
    pub fn remove_entry(&mut self, id: u64) -> Option<Entry> {
        let i = self.entries.iter().position(|e| e.id == id)?;
        let e = self.entries.remove(i);
        self.index.remove(index::runtime_order(id), &e);
        self.log.record(changes::Change::Deleted(id));
        Some(e)
    }

    /// Removes every runtime entry.
    pub fn clear_entries(&mut self) {
        self.log.record(changes::Change::Cleared);
        self.entries.clear();
        self.index.rebuild(&self.const_hits, &self.entries);
    }
}

pub(crate) struct State {
    pub tables: Vec<TableState>,
    pub externs: Vec<ExternState>,
    pub rng: u64,
    pub idle_timeout_ns: u64,
    /// Per-entry idle timeouts (P4Runtime's `idle_timeout_ns`: 0 = never)
    /// by (table index, entry id); entries without one use
    /// `idle_timeout_ns`.
    pub entry_ttl: std::collections::HashMap<(usize, u64), u64>,
    /// Internal errors (counted drops).
    pub errors: u64,
    /// Expressions the scalar tier evaluated to the end since load
    /// (`fast::scalar`): its results equal the `Value` path's by design,
    /// so only this count tells a test that it ran (one add per tier
    /// evaluation, no cost worth a `cfg`).
    pub scalar_runs: u64,
    /// Table calls of scalar-bound actions (`fast::SAction`) since load.
    pub scalar_actions: u64,
    /// Table keys `Run::key_bits` read without a `Value` since load
    /// (results equal the `Value` path's, so only this count tells a test
    /// that the fast path ran; one add per key).
    pub key_bits_reads: u64,
    /// Latest time seen by process()/credit(): entries added by the
    /// control plane start their idle timer there.
    pub clock: u64,
    /// v1model clone sessions: session -> port.
    pub mirror: std::collections::HashMap<u32, u32>,
    /// Multicast groups: group -> (port, rid) copies.
    pub mcast: std::collections::HashMap<u32, Vec<(u32, u32)>>,
    /// Buffers a run gives back for the next packet (no per-packet
    /// allocation for them once warm).
    pub pool: Pool,
    /// Table lookups record their key values in the trace
    /// (`Pipeline::record_table_keys`).
    pub record_keys: bool,
}

/// Per-pipeline storage reused from packet to packet.
#[derive(Default)]
pub(crate) struct Pool {
    /// Empty variable frames (their names' lifetime is the run's; see
    /// `eval::relabel`).
    pub frames: Vec<Vec<(&'static str, Value)>>,
    /// The (empty) stack those frames are pushed on while a packet runs:
    /// kept so that the first blocks and actions of a packet do not grow
    /// a fresh one (two allocations per packet on routing.p4).
    pub frame_stack: Vec<Vec<(&'static str, Value)>>,
    /// The packet buffer.
    pub pkt: Vec<u8>,
    /// The deparser's output buffer.
    pub out: Vec<u8>,
    /// Table key values, their sources and the bits a lookup examined.
    pub keys: Vec<u128>,
    pub key_srcs: Vec<crate::value::Src>,
    pub need: Vec<u128>,
    /// Action data handed to an action, block parameter values.
    pub data: Vec<Vec<Value>>,
    /// The values the blocks of the last packet shared (headers,
    /// metadata) with their keys, reset and reused by the next packet
    /// instead of building fresh ones.
    pub shared_spare: crate::value::FastMap<String, Value>,
    /// The serialized checksum data of the last `add`/`subtract`.
    pub bits: eval::BitBuf,
    /// The shared values of a PNA packet by slot
    /// (`arch::run_block_slots`), and those the last packet left.
    pub slots: Vec<Option<Value>>,
    pub slot_spare: Vec<Option<Value>>,
    /// The copies of `in` shared values the blocks of the last packet
    /// got (by slot), overwritten in place for the next packet.
    pub in_spare: Vec<Option<Value>>,
    /// An empty map for the next packet's shared values.
    pub shared_map: Option<crate::value::FastMap<String, Value>>,
    /// The (parameter, argument) lists of `invoke`'s copy-out.
    pub copy_outs: Vec<Vec<(usize, usize)>>,
    /// Headers/structs replaced by an assignment, reused by the next
    /// copy-in of an `in`/`inout` argument (`Run::eval_copy_in`).
    pub agg_spare: Vec<Value>,
    /// The flat headers of the packet being run (`fast::FlatLayout`).
    pub flat: fast::FlatStore,
    /// The parameters of the scalar-bound actions running
    /// (`fast::SAction`), each call's after its caller's.
    pub aparams: Vec<(u128, crate::value::Src)>,
    /// The block variables held by index (`fast::VSlot`): bits and
    /// source, set at the block's entry.
    pub vslots: Vec<(u128, crate::value::Src)>,
}

impl State {
    pub fn new(p: &Prog) -> State {
        let tables = p.tables.iter().map(TableState::new).collect();
        let externs = p
            .externs
            .iter()
            .map(|e| {
                let n = e
                    .args
                    .first()
                    .and_then(|v| v.as_u128())
                    .unwrap_or(0)
                    .min(1 << 20) as usize;
                match e.ty.as_str() {
                    "Counter" | "counter" => ExternState::Counter {
                        packets: vec![0; n],
                        bytes: vec![0; n],
                    },
                    "Register" | "register" => {
                        let init = e.args.get(1).and_then(|v| v.as_u128()).unwrap_or(0);
                        ExternState::Register(vec![init; n])
                    }
                    "Meter" | "meter" => ExternState::Meter(vec![Bucket::default(); n]),
                    "DirectMeter" | "direct_meter" => {
                        ExternState::Meter(vec![Bucket::default(); 1])
                    }
                    "InternetChecksum" => ExternState::Csum(0),
                    _ => ExternState::None,
                }
            })
            .collect();
        State {
            tables,
            externs,
            rng: 0x9e37_79b9_7f4a_7c15,
            idle_timeout_ns: 30_000_000_000,
            entry_ttl: Default::default(),
            errors: 0,
            scalar_runs: 0,
            scalar_actions: 0,
            key_bits_reads: 0,
            clock: 0,
            mirror: Default::default(),
            mcast: Default::default(),
            pool: Pool::default(),
            record_keys: false,
        }
    }

    pub fn next_random(&mut self, lo: u128, hi: u128) -> u128 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        if hi <= lo {
            return lo;
        }
        let span = hi - lo + 1;
        lo + (self.rng as u128 % span.max(1))
    }
}

/// A loaded program with its tables and extern state.
pub struct Pipeline {
    arch: Arch,
    pub(crate) prog: Prog,
    pub(crate) st: State,
}

impl Pipeline {
    /// Reads, checks and instantiates a P4 program. `arch`: `None` picks
    /// it from the `main` package (PNA_NIC with 3 or 4 blocks, V1Switch,
    /// PSA_Switch).
    pub fn load(
        path: &Path,
        include_dirs: &[PathBuf],
        arch: Option<Arch>,
    ) -> Result<Pipeline, P4Error> {
        let program = crate::front::parse_file(path, include_dirs)
            .map_err(|e| P4Error::Front(e.to_string()))?;
        Self::load_program(program, arch)
    }

    /// Checks and instantiates an already parsed program.
    pub fn load_program(program: ast::Program, arch: Option<Arch>) -> Result<Pipeline, P4Error> {
        // On the parser's big stack: the checker and the compilers
        // (`fast::compile`, the scalar tier) recurse once per nesting
        // level the parser accepted (up to 400), deeper than the caller's
        // thread allows in a debug build.
        let prog = crate::front::with_big_stack(move || {
            let mut prog = crate::interp::check::check(program)?;
            prog.fast = Some(fast::compile(&prog));
            Ok::<_, P4Error>(prog)
        })?;
        let detected = crate::interp::arch::detect(&prog)?;
        let arch = match arch {
            Some(a) if a != detected => {
                return Err(P4Error::Arch(format!(
                    "the program's main package is {} ({detected}), not {a}",
                    prog.package
                )))
            }
            _ => detected,
        };
        let st = State::new(&prog);
        Ok(Pipeline { arch, prog, st })
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Whether the data path holds this program's headers struct as one
    /// flat array per packet (`Ok`) or as a `Value` tree (`Err`: why).
    /// Only PNA programs run with it; the reference evaluator never does.
    pub fn flat_headers(&self) -> Result<(), &'static str> {
        match &self.prog.fast {
            Some(c) if c.flat.is_some() => {
                if matches!(self.arch, Arch::Pna | Arch::PnaTc) {
                    Ok(())
                } else {
                    Err("not a PNA program")
                }
            }
            Some(c) => Err(c.flat_off.unwrap_or("no flat layout")),
            None => Err("no compiled form"),
        }
    }

    /// How many `InternetChecksum` method calls were resolved at load
    /// (`fast::CsumOp`, run by `Run::csum_method` without the dispatch by
    /// name), over every compiled body; 0 without a compiled form.
    pub fn csum_sites(&self) -> usize {
        self.prog.fast.as_ref().map_or(0, |c| c.csum_sites())
    }

    /// The scalar tier's share of the compiled value sites, `(scalar,
    /// all)` (`fast::Code::scalar_sites`; `(0, 0)` without compiled
    /// code): decided at load, so tests can say the tier is in use.
    pub fn scalar_sites(&self) -> (usize, usize) {
        self.prog.fast.as_ref().map_or((0, 0), |c| c.scalar_sites())
    }

    /// The compiled variable look-ups that go through a place kept in
    /// their chain, `(slotted, all)` (`fast::Code::slot_peeks`; `(0, 0)`
    /// without compiled code).
    pub fn slot_peeks(&self) -> (usize, usize) {
        self.prog.fast.as_ref().map_or((0, 0), |c| c.slot_peeks())
    }

    /// The method receivers that are a variable, `(known at load, all)`
    /// (`fast::Code::packet_receivers`: a main block's packet parameter
    /// is not looked up; `(0, 0)` without compiled code).
    pub fn packet_receivers(&self) -> (usize, usize) {
        self.prog
            .fast
            .as_ref()
            .map_or((0, 0), |c| c.packet_receivers())
    }

    /// How many block variables the compiled run holds in its slot array
    /// instead of a frame (`fast::VSlot`; 0 without compiled code):
    /// decided at load, so tests can say the slots are in use.
    pub fn var_slots(&self) -> usize {
        self.prog.fast.as_ref().map_or(0, |c| c.nvslots)
    }

    /// The compiled blocks that get their own variable frame, `(with a
    /// frame, all)` (`fast::Code::block_frames`; `(0, 0)` without
    /// compiled code): a block binding no name runs in its parent's.
    pub fn block_frames(&self) -> (usize, usize) {
        self.prog.fast.as_ref().map_or((0, 0), |c| c.block_frames())
    }

    /// How many function or action bodies were compiled for flat header
    /// arguments (`fast::FlatSpec`: `ip_ttl_dec(chk, hdr.ip)` reads and
    /// writes `hdr.ip` in the flat array, no header copied in or out).
    pub fn flat_calls(&self) -> usize {
        match &self.prog.fast {
            Some(c) if c.flat.is_some() => c.specs.len(),
            _ => 0,
        }
    }

    /// `(checksum calls on an instance known at load, function parameters
    /// bound to an instance at load)`: see `fast::Code::bound_sites`
    /// (`ip_ttl_dec(chk, hdr.ip)`'s `chk` and its five calls on it). 0s
    /// when the program has no compiled form.
    pub fn bound_sites(&self) -> (usize, usize) {
        match &self.prog.fast {
            Some(c) => c.bound_sites(),
            None => (0, 0),
        }
    }

    /// The main blocks' parameters the data path binds nothing for, as
    /// `block.param`: metadata their bodies never name (see
    /// `fast::ParamSlot::Shared`'s `unnamed`). PNA programs only (the
    /// others' runs do not use the slot layout).
    pub fn unbound_params(&self) -> Vec<String> {
        let Some(c) = &self.prog.fast else {
            return Vec::new();
        };
        if !matches!(self.arch, Arch::Pna | Arch::PnaTc) {
            return Vec::new();
        }
        let p = &self.prog;
        let mut out = Vec::new();
        for ((bname, b), ps) in p.main_blocks.iter().zip(&c.shared.params) {
            for (prm, s) in p.blocks[*b].params().iter().zip(ps) {
                if matches!(s, fast::ParamSlot::Shared { unnamed: true, .. }) {
                    out.push(format!("{bname}.{}", prm.name.name));
                }
            }
        }
        out
    }

    /// Runs one packet received on `in_port` at time `now_ns`. Never
    /// panics: internal errors give a drop with `trace.error` set.
    pub fn process(&mut self, in_port: u32, packet: &[u8], now_ns: u64) -> Outcome {
        self.process_with(in_port, packet, now_ns, false)
    }

    /// [`Pipeline::process`] on the evaluator's reference paths (the
    /// per-packet fast paths off): for the differential test that checks
    /// the fast paths give the same outputs and traces. Not for the data
    /// path.
    #[doc(hidden)]
    pub fn process_reference(&mut self, in_port: u32, packet: &[u8], now_ns: u64) -> Outcome {
        self.process_with(in_port, packet, now_ns, true)
    }

    fn process_with(
        &mut self,
        in_port: u32,
        packet: &[u8],
        now_ns: u64,
        reference: bool,
    ) -> Outcome {
        self.st.clock = self.st.clock.max(now_ns);
        let mut out = crate::interp::arch::run_packet(
            &self.prog,
            &mut self.st,
            self.arch,
            in_port,
            packet,
            now_ns,
            reference,
        );
        if out.trace.error.is_some() {
            self.st.errors += 1;
            out.outputs.clear();
            // An internal error is never cached: the next packet reports it again.
            out.trace.uncacheable = Some("p4-error".into());
        }
        out.trace.normalize();
        out
    }

    /// Clone session `session` sends its copies to `port` (BMv2
    /// `mirroring_add`).
    pub fn mirroring_add(&mut self, session: u32, port: u32) {
        self.st.mirror.insert(session, port);
    }

    /// Sets multicast group `group` to copies on (port, rid) (BMv2
    /// `mc_mgrp_create` + `mc_node_create` + `mc_node_associate`);
    /// an empty list deletes the group.
    pub fn multicast_group_set(&mut self, group: u32, members: Vec<(u32, u32)>) {
        if members.is_empty() {
            self.st.mcast.remove(&group);
        } else {
            self.st.mcast.insert(group, members);
        }
    }

    /// Packets dropped on internal errors since load.
    pub fn error_count(&self) -> u64 {
        self.st.errors
    }

    /// Expressions the scalar tier evaluated since load (its results are
    /// the `Value` path's, so tests read this to know it ran per packet;
    /// [`Pipeline::scalar_sites`] only says it was compiled).
    pub fn scalar_runs(&self) -> u64 {
        self.st.scalar_runs
    }

    /// Table hits and misses whose action ran with its parameters bound
    /// as scalars (`fast::SAction`) since load: tests read this to know
    /// the binding was not bypassed (its results are the frame's).
    pub fn scalar_action_calls(&self) -> u64 {
        self.st.scalar_actions
    }

    /// Table keys read as bits where they sit (`Run::key_bits`, no
    /// `Value` built) since load: tests read this to know the fast path
    /// was not bypassed (its results are the `Value` path's).
    pub fn key_bits_reads(&self) -> u64 {
        self.st.key_bits_reads
    }
}

/// Width of a table key expression, found by evaluating it on default
/// values of the block's parameters and variables.
pub(crate) fn probe_width(p: &Prog, block: usize, e: &ast::Expr) -> Result<u32, P4Error> {
    let mut st = State {
        tables: Vec::new(),
        externs: Vec::new(),
        rng: 1,
        idle_timeout_ns: 0,
        entry_ttl: Default::default(),
        errors: 0,
        scalar_runs: 0,
        scalar_actions: 0,
        key_bits_reads: 0,
        clock: 0,
        mirror: Default::default(),
        mcast: Default::default(),
        pool: Pool::default(),
        record_keys: false,
    };
    let mut tr = Trace::default();
    let mut run = Run::new(p, &mut st, &mut tr, Vec::new(), 0, 0);
    let v = run.probe(block, e);
    match v {
        Ok(Value::Bits(b)) => Ok(b.width),
        Ok(Value::Bool(..)) => Ok(1),
        Ok(Value::Error(..)) => Ok(32),
        Ok(Value::Enum(..)) => Ok(32),
        Ok(o) => crate::interp::check::check_err(
            e.span(),
            format!("table key of type {}", o.type_name()),
        ),
        Err(c) => crate::interp::check::check_err(
            e.span(),
            format!("cannot type the key expression: {c:?}"),
        ),
    }
}
