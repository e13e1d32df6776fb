//! P4Info lookups and checks: the control plane names every table, action,
//! counter, register and meter of the loaded program by the ids of its P4Info,
//! and the server resolves those ids here before an update reaches the target.
//! Also compares the P4Info a client sent with the one the target generated.

use std::collections::HashMap;

use crate::proto::p4::config::v1 as cfg;

/// Id-indexed view of one P4Info (positions into its vectors).
#[derive(Debug, Clone, Default)]
pub struct P4InfoIndex {
    tables: HashMap<u32, usize>,
    actions: HashMap<u32, usize>,
    counters: HashMap<u32, usize>,
    direct_counters: HashMap<u32, usize>,
    meters: HashMap<u32, usize>,
    direct_meters: HashMap<u32, usize>,
    registers: HashMap<u32, usize>,
}

fn preamble_id(p: &Option<cfg::Preamble>) -> u32 {
    p.as_ref().map_or(0, |p| p.id)
}

/// The name in a preamble, for messages.
pub fn preamble_name(p: &Option<cfg::Preamble>) -> &str {
    p.as_ref().map_or("", |p| p.name.as_str())
}

impl P4InfoIndex {
    /// Index `info` by id.
    pub fn new(info: &cfg::P4Info) -> Self {
        fn idx<T>(v: &[T], id: impl Fn(&T) -> u32) -> HashMap<u32, usize> {
            v.iter().enumerate().map(|(i, x)| (id(x), i)).collect()
        }
        Self {
            tables: idx(&info.tables, |t| preamble_id(&t.preamble)),
            actions: idx(&info.actions, |t| preamble_id(&t.preamble)),
            counters: idx(&info.counters, |t| preamble_id(&t.preamble)),
            direct_counters: idx(&info.direct_counters, |t| preamble_id(&t.preamble)),
            meters: idx(&info.meters, |t| preamble_id(&t.preamble)),
            direct_meters: idx(&info.direct_meters, |t| preamble_id(&t.preamble)),
            registers: idx(&info.registers, |t| preamble_id(&t.preamble)),
        }
    }

    /// The table with this id.
    pub fn table<'a>(&self, info: &'a cfg::P4Info, id: u32) -> Option<&'a cfg::Table> {
        self.tables.get(&id).and_then(|&i| info.tables.get(i))
    }
    /// The action with this id.
    pub fn action<'a>(&self, info: &'a cfg::P4Info, id: u32) -> Option<&'a cfg::Action> {
        self.actions.get(&id).and_then(|&i| info.actions.get(i))
    }
    /// The indexed counter array with this id.
    pub fn counter<'a>(&self, info: &'a cfg::P4Info, id: u32) -> Option<&'a cfg::Counter> {
        self.counters.get(&id).and_then(|&i| info.counters.get(i))
    }
    /// The direct counter with this id.
    pub fn direct_counter<'a>(
        &self,
        info: &'a cfg::P4Info,
        id: u32,
    ) -> Option<&'a cfg::DirectCounter> {
        self.direct_counters
            .get(&id)
            .and_then(|&i| info.direct_counters.get(i))
    }
    /// The indexed meter array with this id.
    pub fn meter<'a>(&self, info: &'a cfg::P4Info, id: u32) -> Option<&'a cfg::Meter> {
        self.meters.get(&id).and_then(|&i| info.meters.get(i))
    }
    /// The direct meter with this id.
    pub fn direct_meter<'a>(&self, info: &'a cfg::P4Info, id: u32) -> Option<&'a cfg::DirectMeter> {
        self.direct_meters
            .get(&id)
            .and_then(|&i| info.direct_meters.get(i))
    }
    /// The register array with this id.
    pub fn register<'a>(&self, info: &'a cfg::P4Info, id: u32) -> Option<&'a cfg::Register> {
        self.registers.get(&id).and_then(|&i| info.registers.get(i))
    }
    /// The direct counter attached to table `table_id`, if any.
    pub fn direct_counter_of<'a>(
        &self,
        info: &'a cfg::P4Info,
        table: &cfg::Table,
    ) -> Option<&'a cfg::DirectCounter> {
        table
            .direct_resource_ids
            .iter()
            .find_map(|id| self.direct_counter(info, *id))
    }
    /// The direct meter attached to table `table_id`, if any.
    pub fn direct_meter_of<'a>(
        &self,
        info: &'a cfg::P4Info,
        table: &cfg::Table,
    ) -> Option<&'a cfg::DirectMeter> {
        table
            .direct_resource_ids
            .iter()
            .find_map(|id| self.direct_meter(info, *id))
    }
}

/// The match kind of a P4Info match field (UNSPECIFIED for architecture-specific kinds).
pub fn match_type(field: &cfg::MatchField) -> cfg::match_field::MatchType {
    match &field.r#match {
        Some(cfg::match_field::Match::MatchType(t)) => cfg::match_field::MatchType::try_from(*t)
            .unwrap_or(cfg::match_field::MatchType::Unspecified),
        _ => cfg::match_field::MatchType::Unspecified,
    }
}

/// Whether entries of `table` carry a priority: P4Runtime requires one exactly
/// when some key field is ternary, range or optional.
pub fn needs_priority(table: &cfg::Table) -> bool {
    use cfg::match_field::MatchType as M;
    table
        .match_fields
        .iter()
        .any(|f| matches!(match_type(f), M::Ternary | M::Range | M::Optional))
}
