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

/// Differences between the P4Info a client sent (`client`) and the one the
/// target generated from the same program (`ours`): every object the client
/// names must exist in ours under the same name with the same id, and tables'
/// keys and actions' parameters must agree in id and width. Empty when the
/// client can use its P4Info against this target unchanged.
pub fn differences(client: &cfg::P4Info, ours: &cfg::P4Info) -> Vec<String> {
    let mut out = Vec::new();
    fn by_name<T>(v: &[T], pre: impl Fn(&T) -> &Option<cfg::Preamble>) -> HashMap<&str, &T> {
        v.iter().map(|x| (preamble_name(pre(x)), x)).collect()
    }
    fn check(out: &mut Vec<String>, kind: &str, name: &str, cid: u32, oid: Option<u32>) {
        match oid {
            None => out.push(format!(
                "{kind} {name} (id {cid}) is not in the program's P4Info"
            )),
            Some(o) if o != cid => {
                out.push(format!("{kind} {name}: client id {cid}, program id {o}"))
            }
            _ => {}
        }
    }
    let tables = by_name(&ours.tables, |t| &t.preamble);
    let actions = by_name(&ours.actions, |t| &t.preamble);
    for t in &client.tables {
        let name = preamble_name(&t.preamble);
        let o = tables.get(name);
        check(
            &mut out,
            "table",
            name,
            preamble_id(&t.preamble),
            o.map(|o| preamble_id(&o.preamble)),
        );
        if let Some(o) = o {
            for f in &t.match_fields {
                match o.match_fields.iter().find(|g| g.name == f.name) {
                    Some(g) if g.id == f.id && g.bitwidth == f.bitwidth => {}
                    Some(g) => {
                        check_push(&mut out, name, &f.name, f.id, f.bitwidth, g.id, g.bitwidth)
                    }
                    None => out.push(format!(
                        "table {name}: key field {} is not in the program's P4Info",
                        f.name
                    )),
                }
            }
        }
    }
    for a in &client.actions {
        let name = preamble_name(&a.preamble);
        let o = actions.get(name);
        check(
            &mut out,
            "action",
            name,
            preamble_id(&a.preamble),
            o.map(|o| preamble_id(&o.preamble)),
        );
        if let Some(o) = o {
            for p in &a.params {
                match o.params.iter().find(|q| q.name == p.name) {
                    Some(q) if q.id == p.id && q.bitwidth == p.bitwidth => {}
                    Some(q) => {
                        check_push(&mut out, name, &p.name, p.id, p.bitwidth, q.id, q.bitwidth)
                    }
                    None => out.push(format!(
                        "action {name}: parameter {} is not in the program's P4Info",
                        p.name
                    )),
                }
            }
        }
    }
    macro_rules! simple {
        ($field:ident, $kind:expr) => {{
            let m = by_name(&ours.$field, |x| &x.preamble);
            for x in &client.$field {
                let name = preamble_name(&x.preamble);
                check(
                    &mut out,
                    $kind,
                    name,
                    preamble_id(&x.preamble),
                    m.get(name).map(|o| preamble_id(&o.preamble)),
                );
            }
        }};
    }
    simple!(counters, "counter");
    simple!(direct_counters, "direct counter");
    simple!(meters, "meter");
    simple!(direct_meters, "direct meter");
    simple!(registers, "register");
    simple!(controller_packet_metadata, "controller packet metadata");
    simple!(digests, "digest");
    out
}

fn check_push(
    out: &mut Vec<String>,
    owner: &str,
    name: &str,
    cid: u32,
    cw: i32,
    oid: u32,
    ow: i32,
) {
    out.push(format!(
        "{owner}.{name}: client id {cid} width {cw}, program id {oid} width {ow}"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(table_id: u32, field_width: i32) -> cfg::P4Info {
        cfg::P4Info {
            tables: vec![cfg::Table {
                preamble: Some(cfg::Preamble {
                    id: table_id,
                    name: "t".into(),
                    ..Default::default()
                }),
                match_fields: vec![cfg::MatchField {
                    id: 1,
                    name: "k".into(),
                    bitwidth: field_width,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            actions: vec![cfg::Action {
                preamble: Some(cfg::Preamble {
                    id: 5,
                    name: "a".into(),
                    ..Default::default()
                }),
                params: vec![],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn differences_name_each_disagreement() {
        assert!(differences(&info(1, 8), &info(1, 8)).is_empty());
        let d = differences(&info(1, 8), &info(2, 16));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("client id 1, program id 2"), "{d:?}");
        assert!(
            d[1].contains("width 8") && d[1].contains("width 16"),
            "{d:?}"
        );
        let mut missing = info(1, 8);
        missing.actions.clear();
        assert!(differences(&info(1, 8), &missing)[0]
            .contains("action a (id 5) is not in the program's P4Info"));
    }
}
