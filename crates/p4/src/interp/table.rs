//! Table lookup (exact, lpm, ternary, range, optional; const and runtime
//! entries, priorities) and what a lookup records in the trace: only the
//! key bits the match kind examined. Also the data-plane `add_entry` of
//! PNA `add_on_miss` tables.

use super::eval::{fail, Ctl, Run, R};
use super::index;
use crate::trace::{CounterRef, TableApply};
use crate::value::{mask, Src, Value};

impl Run<'_> {
    pub(crate) fn apply_table(&mut self, t: usize) -> R<Value> {
        // Key values (in buffers the pipeline keeps between packets).
        let mut kv: Vec<u128> = std::mem::take(&mut self.st.pool.keys);
        let mut ksrc: Vec<Src> = std::mem::take(&mut self.st.pool.key_srcs);
        let mut need: Vec<u128> = std::mem::take(&mut self.st.pool.need);
        kv.clear();
        ksrc.clear();
        need.clear();
        let r = self.apply_table_with(t, &mut kv, &mut ksrc, &mut need);
        let pool = &mut self.st.pool;
        pool.keys = kv;
        pool.key_srcs = ksrc;
        pool.need = need;
        r
    }

    fn apply_table_with(
        &mut self,
        t: usize,
        kv: &mut Vec<u128>,
        ksrc: &mut Vec<Src>,
        need: &mut Vec<u128>,
    ) -> R<Value> {
        let p = self.p;
        let td = &p.tables[t];
        let code = self.code();
        let ckeys = code.and_then(|c| c.keys.get(t));
        for (i, k) in td.keys.iter().enumerate() {
            let ce = ckeys.and_then(|ks| ks.get(i));
            // A field or variable: its bits as they sit (no `Value`).
            if let Some(r) = ce.and_then(|ce| self.key_bits(ce)) {
                let (v, src) = r?;
                kv.push(v & mask(k.width));
                ksrc.push(src);
                continue;
            }
            let v = match ce {
                Some(ce) => self.ceval(ce)?,
                None => self.eval(&k.expr)?,
            };
            let b = match crate::interp::ops::scalar_bits(&v, &p.g.errors, k.width) {
                Some(b) => b,
                None => match &v {
                    Value::Enum(t, m) => crate::value::Bits::unsigned(
                        k.width,
                        crate::interp::check::enum_index(&p.g, t, m),
                    ),
                    _ => return fail(format!("{}: key of type {}", k.expr.span(), v.type_name())),
                },
            };
            kv.push(b.v & mask(k.width));
            ksrc.push(b.src);
        }
        let st = &self.st.tables[t];
        // Winner (table order) and the key bits the lookup examined.
        need.resize(td.keys.len(), 0);
        let best = st
            .index
            .lookup(&td.const_entries, &st.entries, kv, need)
            .and_then(|o| index::locate(&st.entries, o));
        let st = &self.st.tables[t];
        // The hit entry's id and action (its data is bound when the
        // action is called, below).
        let hit_entry: Option<(u64, usize)> = best.map(|(runtime, idx)| {
            let e = if runtime {
                &st.entries[idx]
            } else {
                &td.const_entries[idx]
            };
            (e.id, e.action)
        });
        for (i, k) in td.keys.iter().enumerate() {
            self.use_src(ksrc[i], k.width, need[i], k.width);
        }
        let now = self.now;
        let bytes = self.pkt.len() as u64;
        // Hit bookkeeping (runtime entries keep counts; const ones in the
        // table state's const counters).
        if let Some((runtime, idx)) = best {
            let ts = &mut self.st.tables[t];
            let e = if runtime {
                ts.entries.get_mut(idx)
            } else {
                ts.const_hits.get_mut(idx)
            };
            if let Some(e) = e {
                e.packets += 1;
                e.bytes += bytes;
                e.last_hit = Some(now);
            }
        }
        // The key values and examined bits, for revalidation, only when
        // the pipeline traces for a cache (the trace's one vector grows
        // with the run; nothing is allocated when not recording), and
        // not once the run is known to be uncacheable (no flow will
        // need them).
        let start = self.tr.keys.len() as u32;
        if self.st.record_keys && self.tr.uncacheable.is_none() {
            self.tr.keys.extend(
                kv.iter()
                    .zip(need.iter())
                    .map(|(&value, &examined)| crate::trace::LookupKey { value, examined }),
            );
        }
        self.tr.tables.push(TableApply {
            table: td.qname.clone(),
            entry: hit_entry.as_ref().map(|h| h.0),
            index: t as u32,
            keys: start..self.tr.keys.len() as u32,
        });
        if td.direct_counter.is_some() {
            self.tr.counters.push(CounterRef::Direct {
                table: td.info.name.clone(),
                entry: hit_entry.as_ref().map(|h| h.0),
            });
        }
        if td.direct_meter.is_some() {
            self.tr.set_uncacheable("p4-meter");
        }
        match hit_entry {
            Some((_, a)) => {
                self.call_with_data(t, a, best)?.discard();
                Ok(Value::ApplyResult {
                    hit: true,
                    action: a,
                })
            }
            None => {
                let a = self.st.tables[t].default.0;
                if td.info.add_on_miss {
                    self.miss_ctx().push((t, kv.clone()));
                }
                let r = self.call_with_data(t, a, None);
                if td.info.add_on_miss {
                    self.miss_ctx().pop();
                }
                r?.discard();
                Ok(Value::ApplyResult {
                    hit: false,
                    action: a,
                })
            }
        }
    }

    /// Calls table `t`'s action `a` with the action data of the entry at
    /// `entry` (`None`: the default action's): bound straight from the
    /// table when the action allows it (`call_table_action`), otherwise
    /// copied into a vector for `call_action` with the arguments the
    /// table's actions list binds.
    fn call_with_data(&mut self, t: usize, a: usize, entry: Option<(bool, usize)>) -> R<Value> {
        if let Some(r) = self.call_table_action(t, a, entry) {
            return r;
        }
        let p = self.p;
        let td = &p.tables[t];
        let ts = &self.st.tables[t];
        let data: &[Value] = match entry {
            Some((true, i)) => &ts.entries[i].args,
            Some((false, i)) => &td.const_entries[i].args,
            None => &ts.default.1,
        };
        let args = match self.st.pool.data.pop() {
            Some(mut v) => {
                v.clear();
                v.extend(data.iter().cloned());
                v
            }
            None => data.to_vec(),
        };
        let bound = td
            .actions
            .iter()
            .find(|ta| ta.action == a)
            .map(|ta| ta.bound.as_slice());
        self.call_action(a, bound, Some(args))
    }

    /// PNA `add_entry(action_name, action_params, expire_time_profile_id)`.
    pub(crate) fn add_entry(
        &mut self,
        args: &[crate::ast::Arg],
        span: &crate::ast::Span,
    ) -> R<Value> {
        self.tr.set_uncacheable("p4-add-entry");
        let Some((t, kv)) = self.miss_ctx().last().cloned() else {
            return fail(format!(
                "{span}: add_entry outside the default action of an add_on_miss table"
            ));
        };
        let name = match args.first().map(|a| self.eval(&a.value)).transpose()? {
            Some(Value::Str(s)) => s.to_string(),
            _ => return fail(format!("{span}: add_entry's action name is not a string")),
        };
        let params = match args.get(1).map(|a| self.eval(&a.value)).transpose()? {
            Some(Value::Struct(_, _, vs)) | Some(Value::Tuple(vs)) => vs,
            Some(v @ Value::Bits(_)) => vec![v],
            _ => vec![],
        };
        for v in &params {
            self.use_val(v);
        }
        let p = self.p;
        let td = &p.tables[t];
        let Some(ta) = td.actions.iter().find(|ta| {
            let a = &p.actions[ta.action];
            a.decl.name.name == name || a.qname == name
        }) else {
            return fail(format!(
                "{span}: add_entry: {name} is not an action of {}",
                td.info.name
            ));
        };
        let spec = crate::runtime::EntrySpec {
            keys: kv
                .iter()
                .map(|v| crate::runtime::KeyMatch::Exact(num_bigint::BigUint::from(*v)))
                .collect(),
            action: p.actions[ta.action].qname.clone(),
            params: params
                .iter()
                .map(|v| {
                    (
                        String::new(),
                        num_bigint::BigUint::from(v.as_u128().unwrap_or(0)),
                    )
                })
                .collect(),
            priority: None,
        };
        let now = self.now;
        let ok = super::runtime_ops::add_entry_spec(p, self.st, t, spec, now).is_ok();
        if ok {
            // Whatever else makes the run uncacheable, flows that applied
            // this table may be stale now.
            let name = td.info.name.clone();
            if !self.tr.tables_changed.contains(&name) {
                self.tr.tables_changed.push(name);
            }
        }
        Ok(Value::Bits(crate::value::Bits::unsigned(
            1,
            if ok { 0 } else { 1 },
        )))
    }
}

#[allow(dead_code)]
fn _c(_: Ctl) {}
