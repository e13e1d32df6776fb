//! An in-memory copy of the monitored part of a database, kept in sync by `update`,
//! `update2` and `update3` notifications. Each applied update returns the list of
//! rows it changed so a reconciler acts on the change, not on a full rescan.
//!
//! The replica is keyed by the schema the server sent, and only holds the tables and
//! columns it monitors: anything else in an update (a table or column added by a newer
//! schema, a value of the wrong type) is logged and skipped, never fatal.

use crate::datum::{Datum, Uuid};
use crate::error::{Error, Result};
use crate::schema::DatabaseSchema;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Column name -> value. Every monitored column is present (a default value when the
/// server omitted it, as `update2` does for defaults).
pub type Row = BTreeMap<String, Datum>;

/// What happened to one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    /// The columns whose values changed.
    Modify {
        columns: Vec<String>,
    },
    Delete,
}

/// One row's change in one update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub table: String,
    pub uuid: Uuid,
    pub kind: ChangeKind,
    /// The row before the change (modify and delete).
    pub old: Option<Row>,
}

/// Monitored tables and columns -> rows.
#[derive(Debug, Clone)]
pub struct Replica {
    schema: DatabaseSchema,
    columns: BTreeMap<String, Vec<String>>,
    tables: BTreeMap<String, BTreeMap<Uuid, Row>>,
}

impl PartialEq for Replica {
    /// Two replicas are equal when they hold the same rows (schemas aside).
    fn eq(&self, other: &Self) -> bool {
        self.tables == other.tables
    }
}

impl Replica {
    /// An empty replica of `columns` (table -> monitored columns; tables or columns
    /// missing from `schema` are dropped here).
    pub fn new(schema: DatabaseSchema, columns: BTreeMap<String, Vec<String>>) -> Replica {
        let mut kept = BTreeMap::new();
        for (t, cols) in columns {
            let Some(ts) = schema.table(&t) else {
                tracing::warn!(
                    table = t,
                    "ovsdb: table not in the server's schema, not monitored"
                );
                continue;
            };
            let cols: Vec<String> = cols
                .into_iter()
                .filter(|c| ts.columns.contains_key(c) && !c.starts_with('_'))
                .collect();
            kept.insert(t, cols);
        }
        let tables = kept.keys().map(|t| (t.clone(), BTreeMap::new())).collect();
        Replica {
            schema,
            columns: kept,
            tables,
        }
    }

    /// The schema the replica reads updates with.
    pub fn schema(&self) -> &DatabaseSchema {
        &self.schema
    }

    /// Monitored table -> monitored columns (what the session asks the server for).
    pub fn monitored(&self) -> &BTreeMap<String, Vec<String>> {
        &self.columns
    }

    /// All rows of every table.
    pub fn tables(&self) -> &BTreeMap<String, BTreeMap<Uuid, Row>> {
        &self.tables
    }

    /// The rows of one table (none for an unmonitored table).
    pub fn rows(&self, table: &str) -> impl Iterator<Item = (&Uuid, &Row)> {
        self.tables.get(table).into_iter().flatten()
    }

    /// One row.
    pub fn row(&self, table: &str, uuid: &Uuid) -> Option<&Row> {
        self.tables.get(table)?.get(uuid)
    }

    /// The first row of `table` whose string column `column` equals `value`.
    pub fn find(&self, table: &str, column: &str, value: &str) -> Option<(Uuid, &Row)> {
        self.rows(table)
            .find(|(_, r)| r.get(column).and_then(Datum::as_str) == Some(value))
            .map(|(u, r)| (*u, r))
    }

    /// Drop every row (keeps the schema and the monitored columns).
    pub fn clear(&mut self) {
        for t in self.tables.values_mut() {
            t.clear();
        }
    }

    /// Read a JSON row of `table` (from an update or a `select`) into typed datums;
    /// unknown or mistyped columns are logged and left out.
    pub fn parse_row(&self, table: &str, json: &Map<String, Value>) -> Row {
        let mut row = Row::new();
        let Some(ts) = self.schema.table(table) else {
            return row;
        };
        for (c, v) in json {
            let Some(ty) = ts.column_type(c) else {
                tracing::debug!(table, column = c, "ovsdb: unknown column ignored");
                continue;
            };
            match Datum::from_json(ty, v) {
                Ok(d) => {
                    row.insert(c.clone(), d);
                }
                Err(e) => tracing::warn!(table, column = c, error = %e, "ovsdb: bad value ignored"),
            }
        }
        row
    }

    fn fresh_row(&self, table: &str) -> Row {
        let ts = self.schema.table(table);
        self.columns
            .get(table)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                ts.and_then(|t| t.column_type(c))
                    .map(|ty| (c.clone(), Datum::default_for(ty)))
            })
            .collect()
    }

    /// Keep only monitored columns of a parsed row.
    fn monitored_row(&self, table: &str, json: &Map<String, Value>) -> Row {
        let mut row = self.parse_row(table, json);
        let cols = &self.columns[table];
        row.retain(|c, _| cols.iter().any(|m| m == c));
        row
    }

    fn updates<'a>(&self, v: &'a Value) -> Result<Vec<(&'a String, &'a String, &'a Value)>> {
        let tables = v
            .as_object()
            .ok_or_else(|| Error::Protocol(format!("table-updates is not an object: {v}")))?;
        let mut out = Vec::new();
        for (t, rows) in tables {
            if !self.columns.contains_key(t) {
                tracing::debug!(table = t, "ovsdb: update for an unmonitored table ignored");
                continue;
            }
            let Some(rows) = rows.as_object() else {
                tracing::warn!(table = t, "ovsdb: table-update is not an object, ignored");
                continue;
            };
            for (u, ru) in rows {
                out.push((t, u, ru));
            }
        }
        Ok(out)
    }

    fn insert_row(
        &mut self,
        table: &str,
        uuid: Uuid,
        json: &Map<String, Value>,
        changes: &mut Vec<Change>,
    ) {
        let mut row = self.fresh_row(table);
        row.extend(self.monitored_row(table, json));
        let old = self
            .tables
            .get_mut(table)
            .expect("monitored")
            .insert(uuid, row.clone());
        let kind = match &old {
            None => ChangeKind::Insert,
            Some(o) => ChangeKind::Modify {
                columns: changed_columns(o, &row),
            },
        };
        if !matches!(&kind, ChangeKind::Modify { columns } if columns.is_empty()) {
            changes.push(Change {
                table: table.to_owned(),
                uuid,
                kind,
                old,
            });
        }
    }

    fn delete_row(&mut self, table: &str, uuid: Uuid, changes: &mut Vec<Change>) {
        match self.tables.get_mut(table).expect("monitored").remove(&uuid) {
            Some(old) => changes.push(Change {
                table: table.to_owned(),
                uuid,
                kind: ChangeKind::Delete,
                old: Some(old),
            }),
            None => tracing::warn!(table, %uuid, "ovsdb: delete of an unknown row ignored"),
        }
    }

    /// Apply `monitor`'s `<table-updates>` (RFC 7047 4.1.6): `{"old", "new"}` per row.
    pub fn apply_update(&mut self, v: &Value) -> Result<Vec<Change>> {
        let mut changes = Vec::new();
        for (t, u, ru) in self.updates(v)? {
            let Some(uuid) = Uuid::parse(u) else {
                tracing::warn!(table = t, uuid = u, "ovsdb: bad row uuid ignored");
                continue;
            };
            match ru.get("new").and_then(Value::as_object) {
                Some(new) => {
                    let exists = self.tables[t.as_str()].contains_key(&uuid);
                    if exists {
                        let parsed = self.monitored_row(t, new);
                        let row = self
                            .tables
                            .get_mut(t.as_str())
                            .expect("monitored")
                            .get_mut(&uuid)
                            .expect("exists");
                        let old = row.clone();
                        row.extend(parsed);
                        let columns = changed_columns(&old, row);
                        if !columns.is_empty() {
                            changes.push(Change {
                                table: t.clone(),
                                uuid,
                                kind: ChangeKind::Modify { columns },
                                old: Some(old),
                            });
                        }
                    } else {
                        self.insert_row(t, uuid, new, &mut changes);
                    }
                }
                None if ru.get("old").is_some() => self.delete_row(t, uuid, &mut changes),
                None => {
                    tracing::warn!(table = t, %uuid, "ovsdb: row-update without old or new ignored")
                }
            }
        }
        Ok(changes)
    }

    /// Apply `monitor_cond`'s `<table-updates2>` (ovsdb-server(7)): per row one of
    /// `initial`, `insert`, `modify` (a diff, see [`Datum::apply_diff`]) or `delete`.
    pub fn apply_update2(&mut self, v: &Value) -> Result<Vec<Change>> {
        let mut changes = Vec::new();
        for (t, u, ru) in self.updates(v)? {
            let Some(uuid) = Uuid::parse(u) else {
                tracing::warn!(table = t, uuid = u, "ovsdb: bad row uuid ignored");
                continue;
            };
            let Some(o) = ru.as_object().filter(|o| o.len() == 1) else {
                tracing::warn!(table = t, %uuid, "ovsdb: row-update2 is not a one-member object, ignored");
                continue;
            };
            let (kind, body) = o.iter().next().expect("one member");
            match (kind.as_str(), body) {
                ("initial" | "insert", Value::Object(row)) => {
                    self.insert_row(t, uuid, row, &mut changes)
                }
                ("delete", _) => self.delete_row(t, uuid, &mut changes),
                ("modify", Value::Object(diff)) => self.modify_row(t, uuid, diff, &mut changes),
                _ => tracing::warn!(table = t, %uuid, kind, "ovsdb: bad row-update2 ignored"),
            }
        }
        Ok(changes)
    }

    fn modify_row(
        &mut self,
        table: &str,
        uuid: Uuid,
        diff: &Map<String, Value>,
        changes: &mut Vec<Change>,
    ) {
        let Some(ts) = self.schema.table(table) else {
            return;
        };
        let cols = &self.columns[table];
        let Some(row) = self
            .tables
            .get_mut(table)
            .expect("monitored")
            .get_mut(&uuid)
        else {
            tracing::warn!(table, %uuid, "ovsdb: modify of an unknown row ignored");
            return;
        };
        let old = row.clone();
        for (c, v) in diff {
            let (true, Some(ty)) = (cols.iter().any(|m| m == c), ts.column_type(c)) else {
                continue;
            };
            let res = Datum::from_json_unchecked(ty, v).and_then(|d| {
                let cur = row
                    .entry(c.clone())
                    .or_insert_with(|| Datum::default_for(ty));
                let mut next = cur.clone();
                next.apply_diff(ty, d)?;
                let n = next.len() as u64;
                if n < ty.min || ty.max.is_some_and(|m| n > m) {
                    return Err(Error::Datum(format!("diff leaves {n} elements")));
                }
                *cur = next;
                Ok(())
            });
            if let Err(e) = res {
                tracing::warn!(table, column = c, error = %e, "ovsdb: bad diff ignored");
            }
        }
        let columns = changed_columns(&old, row);
        if !columns.is_empty() {
            changes.push(Change {
                table: table.to_owned(),
                uuid,
                kind: ChangeKind::Modify { columns },
                old: Some(old),
            });
        }
    }

    /// Replace this replica's rows by `fresh`'s and return the changes that turn the
    /// old contents into the new (used after a reconnect that could not resume).
    pub fn replace_with(&mut self, fresh: Replica) -> Vec<Change> {
        let mut changes = Vec::new();
        // A table the new schema (or monitor) no longer has: all its rows are gone.
        for (t, rows) in self
            .tables
            .iter()
            .filter(|(t, _)| !fresh.tables.contains_key(*t))
        {
            for (u, old) in rows {
                changes.push(Change {
                    table: t.clone(),
                    uuid: *u,
                    kind: ChangeKind::Delete,
                    old: Some(old.clone()),
                });
            }
        }
        for (t, new_rows) in &fresh.tables {
            let empty = BTreeMap::new();
            let old_rows = self.tables.get(t).unwrap_or(&empty);
            for (u, old) in old_rows {
                match new_rows.get(u) {
                    None => changes.push(Change {
                        table: t.clone(),
                        uuid: *u,
                        kind: ChangeKind::Delete,
                        old: Some(old.clone()),
                    }),
                    Some(new) if new != old => changes.push(Change {
                        table: t.clone(),
                        uuid: *u,
                        kind: ChangeKind::Modify {
                            columns: changed_columns(old, new),
                        },
                        old: Some(old.clone()),
                    }),
                    Some(_) => {}
                }
            }
            for u in new_rows.keys().filter(|u| !old_rows.contains_key(u)) {
                changes.push(Change {
                    table: t.clone(),
                    uuid: *u,
                    kind: ChangeKind::Insert,
                    old: None,
                });
            }
        }
        *self = fresh;
        changes
    }
}

fn changed_columns(old: &Row, new: &Row) -> Vec<String> {
    let mut cols: Vec<String> = new
        .iter()
        .filter(|(c, v)| old.get(*c) != Some(*v))
        .map(|(c, _)| c.clone())
        .collect();
    cols.extend(old.keys().filter(|c| !new.contains_key(*c)).cloned());
    cols.sort();
    cols
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datum::Atom;
    use serde_json::json;

    const U1: &str = "00000000-0000-0000-0000-000000000001";

    fn replica() -> Replica {
        let schema = DatabaseSchema::parse(&json!({"name": "T", "tables": {"B": {"columns": {
            "name": {"type": "string"},
            "ports": {"type": {"key": "uuid", "min": 0, "max": "unlimited"}},
            "ext": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
            "mode": {"type": {"key": "string", "min": 0, "max": 1}},
            "hidden": {"type": "integer"}
        }}}}))
        .unwrap();
        let cols = [
            (
                "B".to_string(),
                vec![
                    "name".into(),
                    "ports".into(),
                    "ext".into(),
                    "mode".into(),
                    "nope".into(),
                ],
            ),
            ("Gone".into(), vec![]),
        ];
        Replica::new(schema, cols.into())
    }

    #[test]
    fn update2_lifecycle() {
        let mut r = replica();
        assert!(r.monitored().get("Gone").is_none());
        let u = Uuid::parse(U1).unwrap();
        let ch = r.apply_update2(&json!({"B": {U1: {"initial": {"name": "br0", "ext": ["map", [["a", "1"]]], "hidden": 5, "new_col": 1}}}, "Other": {}})).unwrap();
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].kind, ChangeKind::Insert);
        let row = r.row("B", &u).unwrap();
        assert_eq!(row["name"], Datum::atom("br0"));
        assert_eq!(row["ports"], Datum::empty());
        assert_eq!(row["mode"], Datum::empty());
        assert!(!row.contains_key("hidden") && !row.contains_key("new_col"));

        let ch = r
            .apply_update2(&json!({"B": {U1: {"modify": {"ext": ["map", [["a", "1"], ["b", "2"]]], "mode": "secure", "ports": ["uuid", U1]}}}}))
            .unwrap();
        assert_eq!(
            ch[0].kind,
            ChangeKind::Modify {
                columns: vec!["ext".into(), "mode".into(), "ports".into()]
            }
        );
        let row = r.row("B", &u).unwrap();
        assert_eq!(row["ext"], Datum::map([("b".into(), "2".into())]));
        assert_eq!(row["mode"].as_str(), Some("secure"));
        assert_eq!(row["ports"].uuids().collect::<Vec<_>>(), vec![u]);
        assert_eq!(ch[0].old.as_ref().unwrap()["mode"], Datum::empty());

        // Garbage is skipped, not fatal; a diff that would break the type is refused.
        let ch = r
            .apply_update2(&json!({"B": {"bad-uuid": {"insert": {}}, U1: {"modify": {"name": ["set", ["a", "b"]], "mode": ["set", ["x", "y"]]}}}}))
            .unwrap();
        assert!(ch.is_empty(), "{ch:?}");
        assert!(r.apply_update2(&json!([1])).is_err());

        let ch = r
            .apply_update2(&json!({"B": {U1: {"delete": null}}}))
            .unwrap();
        assert_eq!(ch[0].kind, ChangeKind::Delete);
        assert!(r.row("B", &u).is_none());
    }

    #[test]
    fn update_v1_and_update2_agree() {
        let mut a = replica();
        let mut b = replica();
        a.apply_update(&json!({"B": {U1: {"new": {"name": "x", "ext": ["map", []], "ports": ["set", []], "mode": ["set", []]}}}})).unwrap();
        b.apply_update2(&json!({"B": {U1: {"insert": {"name": "x"}}}}))
            .unwrap();
        assert_eq!(a, b);
        let ch = a.apply_update(&json!({"B": {U1: {"old": {"mode": ["set", []]}, "new": {"name": "x", "ext": ["map", []], "ports": ["set", []], "mode": "standalone"}}}})).unwrap();
        assert_eq!(
            ch[0].kind,
            ChangeKind::Modify {
                columns: vec!["mode".into()]
            }
        );
        b.apply_update2(&json!({"B": {U1: {"modify": {"mode": "standalone"}}}}))
            .unwrap();
        assert_eq!(a, b);
        let fresh = replica();
        let ch = a.replace_with(fresh);
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].kind, ChangeKind::Delete);
        assert_eq!(a.find("B", "name", "x"), None);
        assert_eq!(
            b.find("B", "name", "x").unwrap().1["mode"].atoms(),
            &[Atom::string("standalone")]
        );
    }
}
