//! The control-plane operations of [`Pipeline`] (see [`crate::runtime`]
//! for the types): name resolution by dotted suffix, entry validation and
//! insertion, counters, registers, meters, crediting cached hits and idle
//! timeout.

use super::{ExternState, Pipeline, State};
use crate::interp::check::{Entry, Km, Prog};
use crate::runtime::*;
use crate::trace::{CounterRef, EntryId, Trace};
use crate::value::{mask, Bits, Value};
use num_bigint::BigUint;
use num_traits::ToPrimitive;

fn to_u128(v: &BigUint, width: u32) -> Option<u128> {
    if v.bits() > width as u64 {
        return None;
    }
    v.to_u128()
}

/// Control-plane spellings of qualified names: `::` separators
/// (Netronome's `ingress::ipv6_lpm`) and a first component naming the
/// block by its role (`ingress`/`egress`, or the package parameter name
/// such as `ig`) instead of its type (`MyIngress`).
pub(crate) fn canonical(p: &Prog, name: &str) -> String {
    let name = name.replace("::", ".");
    let Some((first, rest)) = name.split_once('.') else {
        return name;
    };
    if p.blocks.iter().any(|b| b.qname == first) {
        return name;
    }
    let role = |i: usize| {
        p.main_blocks
            .get(i)
            .map(|(_, b)| p.blocks[*b].qname.clone())
    };
    let by_role = match (p.package.as_str(), first) {
        ("V1Switch", "ingress") => role(2),
        ("V1Switch", "egress") => role(3),
        ("PSA_Switch", "ingress") => role(1),
        ("PSA_Switch", "egress") => role(4),
        ("PNA_NIC", "main") => role(p.main_blocks.len().saturating_sub(2)),
        _ => None,
    };
    let by_param = p
        .main_blocks
        .iter()
        .find(|(pn, _)| pn == first || pn.rsplit('.').next() == Some(first))
        .map(|(_, b)| p.blocks[*b].qname.clone());
    match by_role.or(by_param) {
        Some(q) => format!("{q}.{rest}"),
        None => name,
    }
}

pub(crate) fn find_table(p: &Prog, name: &str) -> Result<usize, RuntimeError> {
    let canon = canonical(p, name);
    match resolve_suffix(&canon, p.tables.iter().map(|t| t.info.name.as_str())) {
        Ok(n) => Ok(p.tables.iter().position(|t| t.info.name == n).unwrap_or(0)),
        Err(None) => Err(RuntimeError::UnknownTable(name.into())),
        Err(Some(c)) => Err(RuntimeError::AmbiguousTable(name.into(), c)),
    }
}

fn find_extern(
    p: &Prog,
    name: &str,
    kinds: &[&str],
    kind: &'static str,
) -> Result<usize, RuntimeError> {
    let canon = canonical(p, name);
    let name = canon.as_str();
    let cands: Vec<(usize, &str)> = p
        .externs
        .iter()
        .enumerate()
        .filter(|(_, e)| kinds.contains(&e.ty.as_str()))
        .map(|(i, e)| (i, e.qname.as_str()))
        .collect();
    match resolve_suffix(name, cands.iter().map(|c| c.1)) {
        Ok(n) => Ok(cands.iter().find(|c| c.1 == n).map(|c| c.0).unwrap_or(0)),
        Err(_) => Err(RuntimeError::UnknownExtern {
            kind,
            name: name.into(),
        }),
    }
}

/// Resolves an action of table `t` and its parameter values.
fn resolve_action(
    p: &Prog,
    t: usize,
    action: &str,
    params: &[(String, BigUint)],
    as_default: bool,
) -> Result<(usize, Vec<Value>), RuntimeError> {
    let td = &p.tables[t];
    let tname = td.info.name.clone();
    let names: Vec<&str> = td.info.actions.iter().map(|a| a.name.as_str()).collect();
    let canon = canonical(p, action);
    let qn = match resolve_suffix(&canon, names.iter().copied()) {
        Ok(n) => n,
        Err(_) => {
            return Err(RuntimeError::UnknownAction {
                table: tname,
                action: action.into(),
                allowed: names.join(", "),
            })
        }
    };
    let ai = td
        .info
        .actions
        .iter()
        .position(|a| a.name == qn)
        .unwrap_or(0);
    let info = &td.info.actions[ai];
    if as_default && info.table_only {
        return Err(RuntimeError::BadParams {
            table: tname,
            action: qn.into(),
            msg: "@tableonly action cannot be the default".into(),
        });
    }
    if !as_default && info.default_only {
        return Err(RuntimeError::BadParams {
            table: tname,
            action: qn.into(),
            msg: "@defaultonly action cannot be an entry's".into(),
        });
    }
    let bad = |msg: String| RuntimeError::BadParams {
        table: td.info.name.clone(),
        action: qn.to_string(),
        msg,
    };
    if params.len() != info.params.len() {
        return Err(bad(format!(
            "{} parameters expected, {} given",
            info.params.len(),
            params.len()
        )));
    }
    let mut vals = vec![None; info.params.len()];
    let mut next = 0usize;
    for (n, v) in params {
        let i = if n.is_empty() {
            while next < vals.len() && vals[next].is_some() {
                next += 1;
            }
            next
        } else {
            info.params
                .iter()
                .position(|pi| pi.name == *n)
                .ok_or_else(|| bad(format!("no parameter {n}")))?
        };
        let pi = info
            .params
            .get(i)
            .ok_or_else(|| bad("too many parameters".into()))?;
        if vals[i].is_some() {
            return Err(bad(format!("parameter {} given twice", pi.name)));
        }
        let x = to_u128(v, pi.width).ok_or_else(|| {
            bad(format!(
                "value {v} does not fit parameter {} ({} bits)",
                pi.name, pi.width
            ))
        })?;
        vals[i] = Some(x);
    }
    let a = td.actions[ai].action;
    let ad = &p.actions[a];
    let mut out = Vec::new();
    let mut k = 0;
    for (prm, ty) in ad.decl.params.iter().zip(&ad.param_tys) {
        if prm.direction != crate::ast::Direction::None {
            continue;
        }
        let x = vals[k].unwrap_or(0);
        k += 1;
        out.push(match ty {
            crate::interp::check::Ty::Bool => Value::Bool(x != 0, crate::value::Src::None),
            crate::interp::check::Ty::Bits(w, s) => Value::Bits(Bits::new(*w, *s, x)),
            _ => Value::Bits(Bits::unsigned(128, x)),
        });
    }
    Ok((a, out))
}

fn compile_keys(p: &Prog, t: usize, keys: &[KeyMatch]) -> Result<Vec<Km>, RuntimeError> {
    let td = &p.tables[t];
    let tname = &td.info.name;
    if keys.len() != td.keys.len() {
        return Err(RuntimeError::Other(
            tname.clone(),
            format!(
                "{} key values given, the table has {} keys",
                keys.len(),
                td.keys.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (k, (kd, m)) in td.info.keys.iter().zip(td.keys.iter().zip(keys)) {
        let ki = kd;
        let w = kd.width;
        let full = mask(w);
        let bad = |msg: String| RuntimeError::BadKey {
            table: tname.clone(),
            key: k.name.clone(),
            msg,
        };
        let val = |v: &BigUint| {
            to_u128(v, w).ok_or_else(|| bad(format!("value {v:#x} wider than {w} bits")))
        };
        let kind = &ki.kind;
        let km = match (kind, m) {
            (_, KeyMatch::Exact(v)) if *kind != MatchKind::Range => Km::Masked(val(v)?, full),
            (MatchKind::Range, KeyMatch::Exact(v)) => {
                let x = val(v)?;
                Km::Range(x, x)
            }
            (MatchKind::Lpm, KeyMatch::Lpm(v, len)) => {
                if *len > w {
                    return Err(bad(format!("prefix length {len} > {w}")));
                }
                let mk = if *len == 0 {
                    0
                } else {
                    full & !(mask(w - len))
                };
                let x = val(v)?;
                if x & !mk != 0 {
                    // Host bits set: normalised (P4Runtime would refuse;
                    // STF files rely on it).
                }
                Km::Masked(x & mk, mk)
            }
            (MatchKind::Ternary | MatchKind::Lpm, KeyMatch::Ternary(v, mk)) => {
                let mk = val(mk)?;
                if *kind == MatchKind::Lpm && mk != 0 && (mk | (mk - 1)) != full && mk != full {
                    return Err(bad("lpm mask is not a prefix".into()));
                }
                Km::Masked(val(v)? & mk, mk)
            }
            (MatchKind::Range, KeyMatch::Range(lo, hi)) => {
                let (lo, hi) = (val(lo)?, val(hi)?);
                if lo > hi {
                    return Err(bad("empty range".into()));
                }
                Km::Range(lo, hi)
            }
            (MatchKind::Optional, KeyMatch::Optional(Some(v))) => Km::Masked(val(v)?, full),
            (MatchKind::Optional, KeyMatch::Optional(None)) => Km::Masked(0, 0),
            (MatchKind::Range, KeyMatch::Any) => Km::Range(0, full),
            (k2, KeyMatch::Any) if *k2 != MatchKind::Exact => Km::Masked(0, 0),
            (_, m) => return Err(bad(format!("{m:?} does not fit a {} key", kind.name()))),
        };
        out.push(km);
    }
    Ok(out)
}

pub(crate) fn add_entry_spec(
    p: &Prog,
    st: &mut State,
    t: usize,
    spec: EntrySpec,
    now: u64,
) -> Result<EntryId, RuntimeError> {
    let td = &p.tables[t];
    let tname = td.info.name.clone();
    if td.info.is_const {
        return Err(RuntimeError::ConstTable(tname));
    }
    let keys = compile_keys(p, t, &spec.keys)?;
    let (a, args) = resolve_action(p, t, &spec.action, &spec.params, false)?;
    let ts = &mut st.tables[t];
    if let Some(e) = ts
        .entries
        .iter()
        .chain(ts.const_hits.iter())
        .find(|e| e.keys == keys && e.prio == spec.priority.map(|x| x as i64).unwrap_or(0))
    {
        return Err(RuntimeError::DuplicateKey(tname, e.id));
    }
    if (ts.entries.len() + ts.const_hits.len()) as u64 >= td.info.size.max(1) {
        return Err(RuntimeError::TableFull(tname, td.info.size));
    }
    let id = ts.next_id;
    ts.next_id += 1;
    let mut spec = spec;
    spec.action = p.actions[a].qname.clone();
    spec.params = p.actions[a]
        .info
        .params
        .iter()
        .zip(&args)
        .map(|(pi, v)| (pi.name.clone(), BigUint::from(v.as_u128().unwrap_or(0))))
        .collect();
    ts.push_entry(Entry {
        id,
        keys,
        action: a,
        args,
        prio: spec.priority.map(|x| x as i64).unwrap_or(0),
        is_const: false,
        spec,
        packets: 0,
        bytes: 0,
        last_hit: Some(now),
    });
    Ok(id)
}

fn dump(e: &Entry) -> EntryDump {
    EntryDump {
        id: e.id,
        spec: e.spec.clone(),
        is_const: e.is_const,
        packets: e.packets,
        bytes: e.bytes,
        last_hit_ns: e.last_hit,
    }
}

impl Pipeline {
    /// Tables, in declaration order.
    pub fn tables(&self) -> Vec<TableInfo> {
        self.prog.tables.iter().map(|t| t.info.clone()).collect()
    }

    /// One table by any dotted suffix of its qualified name.
    pub fn table_info(&self, table: &str) -> Result<TableInfo, RuntimeError> {
        let t = find_table(&self.prog, table)?;
        let mut info = self.prog.tables[t].info.clone();
        let (a, args) = &self.st.tables[t].default;
        info.default_action = (
            self.prog.actions[*a].qname.clone(),
            args.iter()
                .map(|v| BigUint::from(v.as_u128().unwrap_or(0)))
                .collect(),
        );
        Ok(info)
    }

    /// Stateful externs (counters, registers, meters).
    pub fn externs(&self) -> Vec<ExternInfo> {
        let mut out = Vec::new();
        for e in &self.prog.externs {
            let (kind, prefix) = match e.ty.as_str() {
                "Counter" | "counter" => (ExternKind::Counter, 0x12),
                "DirectCounter" | "direct_counter" => (ExternKind::DirectCounter, 0x13),
                "Register" | "register" => (ExternKind::Register, 0x16),
                "Meter" | "meter" => (ExternKind::Meter, 0x14),
                "DirectMeter" | "direct_meter" => (ExternKind::DirectMeter, 0x15),
                _ => continue,
            };
            let direct = matches!(kind, ExternKind::DirectCounter | ExternKind::DirectMeter);
            let table = self
                .prog
                .tables
                .iter()
                .find(|t| {
                    let me = Some(e.qname.as_str());
                    t.info.direct_counter.as_deref() == me || t.info.direct_meter.as_deref() == me
                })
                .map(|t| t.info.name.clone());
            out.push(ExternInfo {
                name: e.qname.clone(),
                id: stable_id(prefix, &e.qname),
                kind,
                size: if direct {
                    0
                } else {
                    e.args.first().and_then(|v| v.as_u128()).unwrap_or(0) as u64
                },
                width: if kind == ExternKind::Register {
                    e.elem_ty.as_ref().map(|t| t.width()).unwrap_or(0)
                } else {
                    0
                },
                table,
            });
        }
        out
    }

    pub fn table_add(&mut self, table: &str, spec: EntrySpec) -> Result<EntryId, RuntimeError> {
        let t = find_table(&self.prog, table)?;
        let now = self.st.clock;
        add_entry_spec(&self.prog, &mut self.st, t, spec, now)
    }

    /// Replaces the action and parameters of an entry.
    pub fn table_modify(
        &mut self,
        table: &str,
        id: EntryId,
        action: &str,
        params: Vec<(String, BigUint)>,
    ) -> Result<(), RuntimeError> {
        let t = find_table(&self.prog, table)?;
        let tname = self.prog.tables[t].info.name.clone();
        if self.prog.tables[t].info.is_const {
            return Err(RuntimeError::ConstTable(tname));
        }
        let (a, args) = resolve_action(&self.prog, t, action, &params, false)?;
        let qn = self.prog.actions[a].qname.clone();
        let pnames: Vec<String> = self.prog.actions[a]
            .info
            .params
            .iter()
            .map(|p| p.name.clone())
            .collect();
        let e = self.st.tables[t]
            .entries
            .iter_mut()
            .find(|e| e.id == id)
            .ok_or(RuntimeError::UnknownEntry(tname, id))?;
        e.spec.action = qn;
        e.spec.params = pnames
            .into_iter()
            .zip(&args)
            .map(|(n, v)| (n, BigUint::from(v.as_u128().unwrap_or(0))))
            .collect();
        e.action = a;
        e.args = args;
        self.st.tables[t]
            .log
            .record(super::changes::Change::Modified(id));
        Ok(())
    }

    pub fn table_delete(&mut self, table: &str, id: EntryId) -> Result<(), RuntimeError> {
        let t = find_table(&self.prog, table)?;
        let tname = self.prog.tables[t].info.name.clone();
        if self.prog.tables[t].info.is_const {
            return Err(RuntimeError::ConstTable(tname));
        }
        self.st.tables[t]
            .remove_entry(id)
            .ok_or(RuntimeError::UnknownEntry(tname, id))?;
        self.st.entry_ttl.remove(&(t, id));
        Ok(())
    }

    /// Removes every runtime entry of a table.
    pub fn table_clear(&mut self, table: &str) -> Result<(), RuntimeError> {
        let t = find_table(&self.prog, table)?;
        self.st.tables[t].clear_entries();
        self.st.entry_ttl.retain(|(tt, _), _| *tt != t);
        Ok(())
    }

    /// Sets the default action (refused when const).
    pub fn set_default(
        &mut self,
        table: &str,
        action: &str,
        params: Vec<(String, BigUint)>,
    ) -> Result<(), RuntimeError> {
        let t = find_table(&self.prog, table)?;
        if self.prog.tables[t].info.const_default {
            return Err(RuntimeError::ConstDefault(
                self.prog.tables[t].info.name.clone(),
            ));
        }
        let (a, args) = resolve_action(&self.prog, t, action, &params, true)?;
        self.st.tables[t].default = (a, args);
        self.st.tables[t]
            .log
            .record(super::changes::Change::Default);
        Ok(())
    }

    /// Entries (const ones first), with hit counts and last-hit times.
    pub fn table_entries(&self, table: &str) -> Result<Vec<EntryDump>, RuntimeError> {
        let t = find_table(&self.prog, table)?;
        let ts = &self.st.tables[t];
        Ok(ts
            .const_hits
            .iter()
            .chain(ts.entries.iter())
            .map(dump)
            .collect())
    }

    /// (packets, bytes) of a counter cell.
    pub fn counter_read(&self, name: &str, index: u64) -> Result<(u64, u64), RuntimeError> {
        let i = find_extern(&self.prog, name, &["Counter", "counter"], "counter")?;
        match &self.st.externs[i] {
            ExternState::Counter { packets, bytes } => {
                match (packets.get(index as usize), bytes.get(index as usize)) {
                    (Some(p), Some(b)) => Ok((*p, *b)),
                    _ => Err(RuntimeError::IndexOutOfRange {
                        name: name.into(),
                        index,
                        size: packets.len() as u64,
                    }),
                }
            }
            _ => Err(RuntimeError::UnknownExtern {
                kind: "counter",
                name: name.into(),
            }),
        }
    }

    pub fn register_read(&self, name: &str, index: u64) -> Result<BigUint, RuntimeError> {
        let i = find_extern(&self.prog, name, &["Register", "register"], "register")?;
        match &self.st.externs[i] {
            ExternState::Register(cells) => cells
                .get(index as usize)
                .map(|v| BigUint::from(*v))
                .ok_or(RuntimeError::IndexOutOfRange {
                    name: name.into(),
                    index,
                    size: cells.len() as u64,
                }),
            _ => Err(RuntimeError::UnknownExtern {
                kind: "register",
                name: name.into(),
            }),
        }
    }

    pub fn register_write(
        &mut self,
        name: &str,
        index: u64,
        value: BigUint,
    ) -> Result<(), RuntimeError> {
        let i = find_extern(&self.prog, name, &["Register", "register"], "register")?;
        let w = self.prog.externs[i]
            .elem_ty
            .as_ref()
            .map(|t| t.width())
            .unwrap_or(32);
        let v = to_u128(&value, w).ok_or(RuntimeError::ValueTooWide {
            name: name.into(),
            width: w,
        })?;
        match &mut self.st.externs[i] {
            ExternState::Register(cells) => {
                let size = cells.len() as u64;
                let c = cells
                    .get_mut(index as usize)
                    .ok_or(RuntimeError::IndexOutOfRange {
                        name: name.into(),
                        index,
                        size,
                    })?;
                *c = v;
                Ok(())
            }
            _ => Err(RuntimeError::UnknownExtern {
                kind: "register",
                name: name.into(),
            }),
        }
    }

    pub fn meter_set(
        &mut self,
        name: &str,
        index: u64,
        config: MeterConfig,
    ) -> Result<(), RuntimeError> {
        let i = find_extern(
            &self.prog,
            name,
            &["Meter", "meter", "DirectMeter", "direct_meter"],
            "meter",
        )?;
        match &mut self.st.externs[i] {
            ExternState::Meter(ms) => {
                let size = ms.len() as u64;
                let m = ms
                    .get_mut(index as usize)
                    .ok_or(RuntimeError::IndexOutOfRange {
                        name: name.into(),
                        index,
                        size,
                    })?;
                *m = super::Bucket {
                    cfg: config,
                    ctokens: config.cburst,
                    ptokens: config.pburst,
                    last: 0,
                    configured: true,
                };
                Ok(())
            }
            _ => Err(RuntimeError::UnknownExtern {
                kind: "meter",
                name: name.into(),
            }),
        }
    }

    /// Credits cache hits of a cached run: its counters get `packets` and
    /// `bytes`, the table entries it hit get `now_ns` as last-hit time.
    pub fn credit(&mut self, trace: &Trace, packets: u64, bytes: u64, now_ns: u64) {
        self.st.clock = self.st.clock.max(now_ns);
        for c in &trace.counters {
            match c {
                CounterRef::Indexed { name, index } => {
                    if let Ok(i) = find_extern(&self.prog, name, &["Counter", "counter"], "counter")
                    {
                        if let ExternState::Counter {
                            packets: ps,
                            bytes: bs,
                        } = &mut self.st.externs[i]
                        {
                            if let (Some(p), Some(b)) =
                                (ps.get_mut(*index as usize), bs.get_mut(*index as usize))
                            {
                                *p += packets;
                                *b += bytes;
                            }
                        }
                    }
                }
                CounterRef::Direct { .. } => {}
            }
        }
        for ta in &trace.tables {
            let Ok(t) = find_table(&self.prog, &ta.table) else {
                continue;
            };
            let Some(id) = ta.entry else { continue };
            let ts = &mut self.st.tables[t];
            if let Some(e) = ts
                .entries
                .iter_mut()
                .chain(ts.const_hits.iter_mut())
                .find(|e| e.id == id)
            {
                e.packets += packets;
                e.bytes += bytes;
                e.last_hit = Some(e.last_hit.unwrap_or(0).max(now_ns));
            }
        }
    }

    /// Sets the idle timeout of entries (default 30 s) for tables with
    /// `pna_idle_timeout` / `support_timeout`.
    pub fn set_idle_timeout(&mut self, timeout_ns: u64) {
        self.st.idle_timeout_ns = timeout_ns;
    }

    /// Gives one entry its own idle timeout (P4Runtime's per-entry
    /// `idle_timeout_ns`; `Some(0)`: the entry never times out), or back
    /// to the table's (`None`). A non-zero timeout on a table without
    /// `pna_idle_timeout` / `support_timeout` is refused.
    pub fn set_entry_idle_timeout(
        &mut self,
        table: &str,
        id: EntryId,
        ttl_ns: Option<u64>,
    ) -> Result<(), RuntimeError> {
        let t = find_table(&self.prog, table)?;
        let tname = self.prog.tables[t].info.name.clone();
        if !self.st.tables[t].entries.iter().any(|e| e.id == id) {
            return Err(RuntimeError::UnknownEntry(tname, id));
        }
        match ttl_ns {
            Some(v) if v > 0 && !self.prog.tables[t].info.idle_timeout => Err(RuntimeError::Other(
                tname,
                "the table does not support idle timeouts (no pna_idle_timeout / support_timeout)"
                    .into(),
            )),
            Some(v) => {
                self.st.entry_ttl.insert((t, id), v);
                Ok(())
            }
            None => {
                self.st.entry_ttl.remove(&(t, id));
                Ok(())
            }
        }
    }

    /// The idle timeout of entries without their own (default 30 s).
    pub fn idle_timeout(&self) -> u64 {
        self.st.idle_timeout_ns
    }

    /// The entry's own idle timeout, if it has one.
    pub fn entry_idle_timeout(&self, table: &str, id: EntryId) -> Option<u64> {
        let t = find_table(&self.prog, table).ok()?;
        self.st.entry_ttl.get(&(t, id)).copied()
    }

    /// The interpreter's clock: the latest time process()/credit() saw.
    pub fn clock_ns(&self) -> u64 {
        self.st.clock
    }

    /// Entries of idle-timeout tables not hit (nor added) for their
    /// timeout (the entry's own, else the table's) as of `now_ns`; entries
    /// whose own timeout is 0 never expire. Control-plane entries start
    /// their timer at the latest time process()/credit()/this call saw.
    pub fn expired_entries(&self, now_ns: u64) -> Vec<(String, EntryId)> {
        let mut out = Vec::new();
        for (t, td) in self.prog.tables.iter().enumerate() {
            if !td.info.idle_timeout {
                continue;
            }
            for e in &self.st.tables[t].entries {
                let ttl = self
                    .st
                    .entry_ttl
                    .get(&(t, e.id))
                    .copied()
                    .unwrap_or(self.st.idle_timeout_ns);
                if ttl > 0 && now_ns.saturating_sub(e.last_hit.unwrap_or(0)) >= ttl {
                    out.push((td.info.name.clone(), e.id));
                }
            }
        }
        out
    }
}
