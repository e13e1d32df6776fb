//! Test double for the P4Runtime server: [`TableStore`] only *stores* what
//! controllers write, indexed by P4Info ids, so the server can be exercised
//! end to end (e.g. with p4runtime-shell) before a real target exists. It runs
//! no program and forwards no packet: it is NOT what nicflow ships (nicflow's
//! target is its P4 interpreter). PacketOuts are recorded and echoed back as
//! PacketIns so the stream path can be tested.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::broadcast;
use tonic::Status;

use crate::p4info::{preamble_name, P4InfoIndex};
use crate::proto::p4::config::v1 as cfg;
use crate::proto::p4::v1 as p4;
use crate::{P4RtTarget, PipelineMode, TargetEvent};
use p4::entity::Entity as E;

/// The canonical key of a table entry: its (sorted, canonical) match and priority.
type EntryKey = (Vec<u8>, i32);

fn key_of(te: &p4::TableEntry) -> EntryKey {
    let m = p4::TableEntry {
        r#match: te.r#match.clone(),
        ..Default::default()
    };
    (prost::Message::encode_to_vec(&m), te.priority)
}

#[derive(Default)]
struct Store {
    p4info: Option<cfg::P4Info>,
    index: P4InfoIndex,
    /// Per table: entries in insertion-independent key order.
    entries: HashMap<u32, BTreeMap<EntryKey, p4::TableEntry>>,
    defaults: HashMap<u32, p4::TableEntry>,
    counters: HashMap<(u32, i64), p4::CounterData>,
    registers: HashMap<(u32, i64), p4::P4Data>,
    meters: HashMap<(u32, i64), p4::MeterConfig>,
}

/// Stores entries by P4Info id; see the module documentation. The P4Info of a
/// pipeline is the one the client sends (there is no compiler here), and the
/// device config bytes are kept but not interpreted.
pub struct TableStore {
    store: Mutex<Store>,
    events: broadcast::Sender<TargetEvent>,
    packets_out: Mutex<Vec<p4::PacketOut>>,
}

impl Default for TableStore {
    fn default() -> Self {
        Self::new()
    }
}

impl TableStore {
    /// An empty store with no pipeline.
    pub fn new() -> Self {
        Self {
            store: Mutex::default(),
            events: broadcast::channel(256).0,
            packets_out: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Packet-outs received so far.
    pub fn packets_out(&self) -> Vec<p4::PacketOut> {
        self.packets_out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sends an event to the controllers (as a real target would on a packet to
    /// the CPU port or an idle timeout). Returns how many server streams got it.
    pub fn emit(&self, ev: TargetEvent) -> usize {
        self.events.send(ev).unwrap_or(0)
    }

    /// Number of entries stored in table `table_id`.
    pub fn entry_count(&self, table_id: u32) -> usize {
        self.lock().entries.get(&table_id).map_or(0, |m| m.len())
    }

    /// Sets a direct or indexed counter value, as if packets had been counted.
    pub fn count(&self, counter_id: u32, index: i64, data: p4::CounterData) {
        self.lock().counters.insert((counter_id, index), data);
    }
}

fn zero_data(reg: &cfg::Register) -> p4::P4Data {
    use cfg::p4_data_type_spec::TypeSpec;
    match reg.type_spec.as_ref().and_then(|t| t.type_spec.as_ref()) {
        Some(TypeSpec::Bool(_)) => p4::P4Data {
            data: Some(p4::p4_data::Data::Bool(false)),
        },
        _ => p4::P4Data {
            data: Some(p4::p4_data::Data::Bitstring(vec![0])),
        },
    }
}

impl Store {
    fn info(&self) -> Result<&cfg::P4Info, Status> {
        self.p4info
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("no pipeline"))
    }

    fn table_has_counter(&self, table_id: u32) -> bool {
        let Ok(info) = self.info() else { return false };
        self.index
            .table(info, table_id)
            .is_some_and(|t| self.index.direct_counter_of(info, t).is_some())
    }

    fn write_table(&mut self, ty: p4::update::Type, te: &p4::TableEntry) -> Result<(), Status> {
        use p4::update::Type as T;
        let info = self.info()?;
        let table = self
            .index
            .table(info, te.table_id)
            .ok_or_else(|| Status::not_found("table"))?;
        let tname = preamble_name(&table.preamble).to_string();
        let size = table.size;
        let has_counter = self.table_has_counter(te.table_id);
        if te.is_default_action {
            if te.action.is_none() {
                // Reset to the program's initial default (read falls back to it).
                self.defaults.remove(&te.table_id);
            } else {
                let mut d = te.clone();
                d.counter_data = None;
                self.defaults.insert(te.table_id, d);
            }
            return Ok(());
        }
        let entries = self.entries.entry(te.table_id).or_default();
        let key = key_of(te);
        let mut stored = te.clone();
        if has_counter && stored.counter_data.is_none() {
            stored.counter_data = Some(p4::CounterData::default());
        }
        match ty {
            T::Insert => {
                if entries.contains_key(&key) {
                    return Err(Status::already_exists(format!(
                        "table {tname}: entry already exists"
                    )));
                }
                if size > 0 && entries.len() as i64 >= size {
                    return Err(Status::resource_exhausted(format!(
                        "table {tname} is full ({size} entries)"
                    )));
                }
                entries.insert(key, stored);
            }
            T::Modify => {
                let Some(old) = entries.get_mut(&key) else {
                    return Err(Status::not_found(format!("table {tname}: no such entry")));
                };
                if te.counter_data.is_none() {
                    stored.counter_data = old.counter_data;
                }
                if te.action.is_none() {
                    // Direct-resource-only MODIFY (const tables): the action stays.
                    stored.action = old.action.clone();
                }
                *old = stored;
            }
            T::Delete => {
                if entries.remove(&key).is_none() {
                    return Err(Status::not_found(format!("table {tname}: no such entry")));
                }
            }
            T::Unspecified => return Err(Status::invalid_argument("update type unspecified")),
        }
        Ok(())
    }

    fn read_table(&self, req: &p4::TableEntry) -> Result<Vec<p4::Entity>, Status> {
        let info = self.info()?;
        let tables: Vec<&cfg::Table> = if req.table_id == 0 {
            info.tables.iter().collect()
        } else {
            self.index.table(info, req.table_id).into_iter().collect()
        };
        let with_counters = req.counter_data.is_some();
        let mut out = Vec::new();
        let mut push = |mut e: p4::TableEntry| {
            if !with_counters {
                e.counter_data = None;
            }
            out.push(p4::Entity {
                entity: Some(E::TableEntry(e)),
            });
        };
        for t in tables {
            let id = t.preamble.as_ref().map_or(0, |p| p.id);
            if req.is_default_action {
                match self.defaults.get(&id) {
                    Some(d) => push(d.clone()),
                    None => {
                        if let Some(init) = &t.initial_default_action {
                            let a = p4::Action {
                                action_id: init.action_id,
                                params: init
                                    .arguments
                                    .iter()
                                    .map(|a| p4::action::Param {
                                        param_id: a.param_id,
                                        value: a.value.clone(),
                                    })
                                    .collect(),
                            };
                            push(p4::TableEntry {
                                table_id: id,
                                is_default_action: true,
                                action: Some(p4::TableAction {
                                    r#type: Some(p4::table_action::Type::Action(a)),
                                }),
                                ..Default::default()
                            });
                        }
                    }
                }
                continue;
            }
            let Some(entries) = self.entries.get(&id) else {
                continue;
            };
            if !req.r#match.is_empty() {
                // Exact lookup of one key (a partial key filters on the given fields).
                for e in entries.values() {
                    let fits = req.r#match.iter().all(|m| e.r#match.contains(m))
                        && (req.priority == 0 || req.priority == e.priority);
                    if fits {
                        push(e.clone());
                    }
                }
            } else {
                entries
                    .values()
                    .filter(|e| req.priority == 0 || e.priority == req.priority)
                    .cloned()
                    .for_each(&mut push);
            }
        }
        Ok(out)
    }

    fn cells<'a>(
        &self,
        ids: impl Iterator<Item = (u32, i64)> + 'a,
        index: &Option<p4::Index>,
    ) -> Vec<(u32, i64)> {
        let mut v = Vec::new();
        for (id, size) in ids {
            match index {
                Some(i) => v.push((id, i.index)),
                None => (0..size).for_each(|i| v.push((id, i))),
            }
        }
        v
    }
}

impl P4RtTarget for TableStore {
    fn set_pipeline(
        &self,
        mode: PipelineMode,
        client_p4info: Option<&cfg::P4Info>,
        _device_config: &[u8],
    ) -> Result<cfg::P4Info, Status> {
        let Some(info) = client_p4info else {
            return Err(Status::invalid_argument(
                "the TableStore test double has no compiler: send a P4Info with the config",
            ));
        };
        let mut s = self.lock();
        match mode {
            PipelineMode::Verify => {}
            PipelineMode::Commit => {
                *s = Store {
                    p4info: Some(info.clone()),
                    index: P4InfoIndex::new(info),
                    ..Default::default()
                };
            }
            PipelineMode::Reconcile => {
                if s.p4info.as_ref() != Some(info) {
                    return Err(Status::unimplemented(
                        "TableStore reconciles only an unchanged P4Info",
                    ));
                }
            }
        }
        Ok(info.clone())
    }

    fn write(&self, update: &p4::Update) -> Result<(), Status> {
        use p4::update::Type as T;
        let ty = T::try_from(update.r#type).unwrap_or(T::Unspecified);
        let mut s = self.lock();
        match update.entity.as_ref().and_then(|e| e.entity.as_ref()) {
            Some(E::TableEntry(te)) => s.write_table(ty, te),
            Some(E::CounterEntry(c)) => {
                let data = c.data.unwrap_or_default();
                match &c.index {
                    Some(i) => {
                        s.counters.insert((c.counter_id, i.index), data);
                    }
                    None => {
                        let size = s
                            .info()
                            .ok()
                            .and_then(|info| s.index.counter(info, c.counter_id))
                            .map_or(0, |c| c.size);
                        for i in 0..size {
                            s.counters.insert((c.counter_id, i), data);
                        }
                    }
                }
                Ok(())
            }
            Some(E::DirectCounterEntry(d)) => {
                let te = d
                    .table_entry
                    .as_ref()
                    .ok_or_else(|| Status::invalid_argument("no table entry"))?;
                let key = key_of(te);
                let e = s
                    .entries
                    .get_mut(&te.table_id)
                    .and_then(|m| m.get_mut(&key))
                    .ok_or_else(|| Status::not_found("no such table entry"))?;
                e.counter_data = Some(d.data.unwrap_or_default());
                Ok(())
            }
            Some(E::RegisterEntry(r)) => {
                let data = r.data.clone().unwrap_or_default();
                match &r.index {
                    Some(i) => {
                        s.registers.insert((r.register_id, i.index), data);
                    }
                    None => {
                        let size = s
                            .info()
                            .ok()
                            .and_then(|info| s.index.register(info, r.register_id))
                            .map_or(0, |r| r.size);
                        for i in 0..size as i64 {
                            s.registers.insert((r.register_id, i), data.clone());
                        }
                    }
                }
                Ok(())
            }
            Some(E::MeterEntry(m)) => {
                let i = m.index.as_ref().ok_or_else(|| {
                    Status::unimplemented("TableStore: meter writes need an index")
                })?;
                match &m.config {
                    Some(c) => s.meters.insert((m.meter_id, i.index), *c),
                    None => s.meters.remove(&(m.meter_id, i.index)),
                };
                Ok(())
            }
            _ => Err(Status::unimplemented(
                "TableStore stores table entries, counters, registers and meters only",
            )),
        }
    }

    fn read(&self, entity: &p4::Entity) -> Result<Vec<p4::Entity>, Status> {
        let s = self.lock();
        let info = s.info()?;
        let wrap = |e: E| p4::Entity { entity: Some(e) };
        match entity.entity.as_ref() {
            Some(E::TableEntry(te)) => s.read_table(te),
            Some(E::CounterEntry(c)) => {
                let ids = info
                    .counters
                    .iter()
                    .map(|x| (x.preamble.as_ref().map_or(0, |p| p.id), x.size))
                    .filter(|(id, _)| c.counter_id == 0 || *id == c.counter_id);
                Ok(s.cells(ids, &c.index)
                    .into_iter()
                    .map(|(id, i)| {
                        wrap(E::CounterEntry(p4::CounterEntry {
                            counter_id: id,
                            index: Some(p4::Index { index: i }),
                            data: Some(s.counters.get(&(id, i)).copied().unwrap_or_default()),
                        }))
                    })
                    .collect())
            }
            Some(E::DirectCounterEntry(d)) => {
                let req = d.table_entry.clone().unwrap_or_default();
                let mut out = Vec::new();
                for e in s.read_table(&req)? {
                    if let Some(E::TableEntry(mut te)) = e.entity {
                        if !s.table_has_counter(te.table_id) {
                            continue;
                        }
                        te.counter_data = None;
                        let stored = s
                            .entries
                            .get(&te.table_id)
                            .and_then(|m| m.get(&key_of(&te)))
                            .and_then(|x| x.counter_data);
                        out.push(wrap(E::DirectCounterEntry(p4::DirectCounterEntry {
                            table_entry: Some(te),
                            data: Some(stored.unwrap_or_default()),
                        })));
                    }
                }
                Ok(out)
            }
            Some(E::RegisterEntry(r)) => {
                let regs: Vec<&cfg::Register> = info
                    .registers
                    .iter()
                    .filter(|x| {
                        r.register_id == 0
                            || x.preamble.as_ref().map_or(0, |p| p.id) == r.register_id
                    })
                    .collect();
                let mut out = Vec::new();
                for reg in regs {
                    let id = reg.preamble.as_ref().map_or(0, |p| p.id);
                    for (_, i) in s.cells(std::iter::once((id, reg.size as i64)), &r.index) {
                        let data = s
                            .registers
                            .get(&(id, i))
                            .cloned()
                            .unwrap_or_else(|| zero_data(reg));
                        out.push(wrap(E::RegisterEntry(p4::RegisterEntry {
                            register_id: id,
                            index: Some(p4::Index { index: i }),
                            data: Some(data),
                        })));
                    }
                }
                Ok(out)
            }
            Some(E::MeterEntry(m)) => {
                let ids = info
                    .meters
                    .iter()
                    .map(|x| (x.preamble.as_ref().map_or(0, |p| p.id), x.size))
                    .filter(|(id, _)| m.meter_id == 0 || *id == m.meter_id);
                Ok(s.cells(ids, &m.index)
                    .into_iter()
                    .map(|(id, i)| {
                        wrap(E::MeterEntry(p4::MeterEntry {
                            meter_id: id,
                            index: Some(p4::Index { index: i }),
                            config: s.meters.get(&(id, i)).copied(),
                            counter_data: None,
                        }))
                    })
                    .collect())
            }
            _ => Err(Status::unimplemented(
                "TableStore reads table entries, counters, registers and meters only",
            )),
        }
    }

    fn packet_out(&self, packet: &p4::PacketOut) -> Result<(), Status> {
        self.packets_out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(packet.clone());
        let _ = self.events.send(TargetEvent::PacketIn(p4::PacketIn {
            payload: packet.payload.clone(),
            metadata: packet.metadata.clone(),
        }));
        Ok(())
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<TargetEvent>> {
        Some(self.events.subscribe())
    }
}
