//! The parts of an OVSDB schema (RFC 7047 section 3.2) a client needs: tables,
//! columns and their types. The replica needs the types to read a datum (a one-element
//! set is sent as a bare atom) and to apply `update2` diffs (sets and maps toggle,
//! scalars replace). Constraints the server enforces (enums, ranges) are not kept.

use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::BTreeMap;

/// An atomic type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicType {
    Integer,
    Real,
    Boolean,
    String,
    Uuid,
}

impl AtomicType {
    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "integer" => AtomicType::Integer,
            "real" => AtomicType::Real,
            "boolean" => AtomicType::Boolean,
            "string" => AtomicType::String,
            "uuid" => AtomicType::Uuid,
            _ => return Err(Error::Schema(format!("unknown atomic type {s:?}"))),
        })
    }
}

/// A base type: an atomic type plus, for uuids, the table it refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseType {
    pub atomic: AtomicType,
    /// `refTable` of a uuid column.
    pub ref_table: Option<String>,
}

impl BaseType {
    fn parse(v: &Value) -> Result<Self> {
        match v {
            Value::String(s) => Ok(BaseType {
                atomic: AtomicType::parse(s)?,
                ref_table: None,
            }),
            Value::Object(o) => {
                let t = o
                    .get("type")
                    .and_then(Value::as_str)
                    .ok_or_else(|| Error::Schema("base type without \"type\"".into()))?;
                Ok(BaseType {
                    atomic: AtomicType::parse(t)?,
                    ref_table: o.get("refTable").and_then(Value::as_str).map(str::to_owned),
                })
            }
            _ => Err(Error::Schema(format!("bad base type {v}"))),
        }
    }
}

/// A column type: key, optional value (then it is a map), and the number of elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type {
    pub key: BaseType,
    pub value: Option<BaseType>,
    pub min: u64,
    /// `None` is "unlimited".
    pub max: Option<u64>,
}

impl Type {
    /// A scalar: exactly one atom, no value.
    pub fn scalar(atomic: AtomicType) -> Self {
        Type {
            key: BaseType {
                atomic,
                ref_table: None,
            },
            value: None,
            min: 1,
            max: Some(1),
        }
    }

    /// More than one element possible: an `update2` diff for it toggles elements
    /// rather than replacing the datum (OVS's `ovsdb_type_is_composite`).
    pub fn is_composite(&self) -> bool {
        self.max != Some(1)
    }

    /// Is this a map?
    pub fn is_map(&self) -> bool {
        self.value.is_some()
    }

    /// Parse a `<type>` from the schema.
    pub fn parse(v: &Value) -> Result<Self> {
        match v {
            Value::String(_) => Ok(Type {
                key: BaseType::parse(v)?,
                value: None,
                min: 1,
                max: Some(1),
            }),
            Value::Object(o) => {
                let key = BaseType::parse(
                    o.get("key")
                        .ok_or_else(|| Error::Schema("type without key".into()))?,
                )?;
                let value = o.get("value").map(BaseType::parse).transpose()?;
                let min = match o.get("min") {
                    None => 1,
                    Some(m) => m
                        .as_u64()
                        .ok_or_else(|| Error::Schema(format!("bad min {m}")))?,
                };
                let max = match o.get("max") {
                    None => Some(1),
                    Some(Value::String(s)) if s == "unlimited" => None,
                    Some(m) => Some(
                        m.as_u64()
                            .ok_or_else(|| Error::Schema(format!("bad max {m}")))?,
                    ),
                };
                Ok(Type {
                    key,
                    value,
                    min,
                    max,
                })
            }
            _ => Err(Error::Schema(format!("bad type {v}"))),
        }
    }
}

/// One column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSchema {
    pub ty: Type,
    pub ephemeral: bool,
    pub mutable: bool,
}

/// One table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableSchema {
    pub columns: BTreeMap<String, ColumnSchema>,
    pub is_root: bool,
}

impl TableSchema {
    /// The type of a column, including the implicit `_uuid` and `_version`.
    pub fn column_type(&self, name: &str) -> Option<&Type> {
        self.columns.get(name).map(|c| &c.ty)
    }
}

/// A database schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseSchema {
    pub name: String,
    pub version: Option<String>,
    pub tables: BTreeMap<String, TableSchema>,
}

impl DatabaseSchema {
    /// Parse the reply of `get_schema`. Unknown members are ignored.
    pub fn parse(v: &Value) -> Result<Self> {
        let o = v
            .as_object()
            .ok_or_else(|| Error::Schema("schema is not an object".into()))?;
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Schema("schema without name".into()))?
            .to_owned();
        let version = o.get("version").and_then(Value::as_str).map(str::to_owned);
        let tables_json = o
            .get("tables")
            .and_then(Value::as_object)
            .ok_or_else(|| Error::Schema("schema without tables".into()))?;
        let mut tables = BTreeMap::new();
        for (tname, t) in tables_json {
            let cols = t
                .get("columns")
                .and_then(Value::as_object)
                .ok_or_else(|| Error::Schema(format!("table {tname} without columns")))?;
            let mut columns = BTreeMap::new();
            for (cname, c) in cols {
                let ty = Type::parse(c.get("type").ok_or_else(|| {
                    Error::Schema(format!("column {tname}.{cname} without type"))
                })?)
                .map_err(|e| Error::Schema(format!("column {tname}.{cname}: {e}")))?;
                columns.insert(
                    cname.clone(),
                    ColumnSchema {
                        ty,
                        ephemeral: c.get("ephemeral").and_then(Value::as_bool).unwrap_or(false),
                        mutable: c.get("mutable").and_then(Value::as_bool).unwrap_or(true),
                    },
                );
            }
            for implicit in ["_uuid", "_version"] {
                columns.insert(
                    implicit.to_owned(),
                    ColumnSchema {
                        ty: Type::scalar(AtomicType::Uuid),
                        ephemeral: false,
                        mutable: false,
                    },
                );
            }
            tables.insert(
                tname.clone(),
                TableSchema {
                    columns,
                    is_root: t.get("isRoot").and_then(Value::as_bool).unwrap_or(false),
                },
            );
        }
        Ok(DatabaseSchema {
            name,
            version,
            tables,
        })
    }

    /// A table by name.
    pub fn table(&self, name: &str) -> Option<&TableSchema> {
        self.tables.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_types() {
        let s = DatabaseSchema::parse(&json!({
            "name": "T", "version": "1.0.0",
            "tables": {"A": {"isRoot": true, "columns": {
                "s": {"type": "string"},
                "o": {"type": {"key": "integer", "min": 0, "max": 1}},
                "refs": {"type": {"key": {"type": "uuid", "refTable": "B"}, "min": 0, "max": "unlimited"}},
                "m": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}}
            }}}
        }))
        .unwrap();
        let a = s.table("A").unwrap();
        assert!(a.is_root);
        assert!(!a.column_type("s").unwrap().is_composite());
        assert!(!a.column_type("o").unwrap().is_composite());
        let r = a.column_type("refs").unwrap();
        assert!(r.is_composite() && r.max.is_none());
        assert_eq!(r.key.ref_table.as_deref(), Some("B"));
        assert!(a.column_type("m").unwrap().is_map());
        assert_eq!(a.column_type("_uuid").unwrap().key.atomic, AtomicType::Uuid);
    }

    #[test]
    fn bad_schemas_are_errors() {
        for bad in [
            json!(1),
            json!({"name": "x"}),
            json!({"name": "x", "tables": {"A": {"columns": {"c": {"type": "blob"}}}}}),
        ] {
            assert!(DatabaseSchema::parse(&bad).is_err());
        }
    }
}
