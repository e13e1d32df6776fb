//! Transaction operations (RFC 7047 section 5.2) and their results.

use crate::datum::{Datum, Uuid};
use crate::error::{Error, Result};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Column name -> value, as written in `insert`/`update` and read back from `select`.
pub type Columns = BTreeMap<String, Datum>;

/// A condition function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
    Includes,
    Excludes,
}

impl Function {
    fn as_str(self) -> &'static str {
        match self {
            Function::Lt => "<",
            Function::Le => "<=",
            Function::Eq => "==",
            Function::Ne => "!=",
            Function::Ge => ">=",
            Function::Gt => ">",
            Function::Includes => "includes",
            Function::Excludes => "excludes",
        }
    }
}

/// `[column, function, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub column: String,
    pub function: Function,
    pub value: Datum,
}

impl Condition {
    /// `column == value`.
    pub fn eq(column: &str, value: Datum) -> Condition {
        Condition {
            column: column.to_owned(),
            function: Function::Eq,
            value,
        }
    }

    /// `_uuid == uuid`.
    pub fn uuid(uuid: Uuid) -> Condition {
        Condition::eq("_uuid", Datum::atom(uuid))
    }

    fn to_json(&self) -> Value {
        json!([self.column, self.function.as_str(), self.value.to_json()])
    }
}

/// A mutator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutator {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Insert,
    Delete,
}

impl Mutator {
    fn as_str(self) -> &'static str {
        match self {
            Mutator::Add => "+=",
            Mutator::Sub => "-=",
            Mutator::Mul => "*=",
            Mutator::Div => "/=",
            Mutator::Mod => "%=",
            Mutator::Insert => "insert",
            Mutator::Delete => "delete",
        }
    }
}

/// `[column, mutator, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    pub column: String,
    pub mutator: Mutator,
    pub value: Datum,
}

impl Mutation {
    /// A mutation.
    pub fn new(column: &str, mutator: Mutator, value: Datum) -> Mutation {
        Mutation {
            column: column.to_owned(),
            mutator,
            value,
        }
    }

    fn to_json(&self) -> Value {
        json!([self.column, self.mutator.as_str(), self.value.to_json()])
    }
}

/// `wait`'s `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    Equal,
    NotEqual,
}

/// One operation of a `transact`.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `insert`; `uuid_name` lets later operations refer to the row as
    /// `Atom::NamedUuid(name)`.
    Insert {
        table: String,
        row: Columns,
        uuid_name: Option<String>,
    },
    Select {
        table: String,
        conditions: Vec<Condition>,
        columns: Option<Vec<String>>,
    },
    Update {
        table: String,
        conditions: Vec<Condition>,
        row: Columns,
    },
    Mutate {
        table: String,
        conditions: Vec<Condition>,
        mutations: Vec<Mutation>,
    },
    Delete {
        table: String,
        conditions: Vec<Condition>,
    },
    /// `wait` until the selected rows' `columns` are (not) equal to `rows`.
    Wait {
        table: String,
        conditions: Vec<Condition>,
        columns: Vec<String>,
        until: Until,
        rows: Vec<Columns>,
        timeout_ms: Option<u64>,
    },
    Commit {
        durable: bool,
    },
    Abort,
    Comment(String),
    /// `assert` that this session owns `lock`.
    Assert {
        lock: String,
    },
}

fn cols_json(c: &Columns) -> Value {
    Value::Object(c.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
}

fn conds_json(c: &[Condition]) -> Value {
    Value::Array(c.iter().map(Condition::to_json).collect())
}

impl Op {
    /// The wire form.
    pub fn to_json(&self) -> Value {
        match self {
            Op::Insert {
                table,
                row,
                uuid_name,
            } => {
                let mut o = json!({"op": "insert", "table": table, "row": cols_json(row)});
                if let Some(n) = uuid_name {
                    o["uuid-name"] = json!(n);
                }
                o
            }
            Op::Select {
                table,
                conditions,
                columns,
            } => {
                let mut o =
                    json!({"op": "select", "table": table, "where": conds_json(conditions)});
                if let Some(c) = columns {
                    o["columns"] = json!(c);
                }
                o
            }
            Op::Update {
                table,
                conditions,
                row,
            } => {
                json!({"op": "update", "table": table, "where": conds_json(conditions), "row": cols_json(row)})
            }
            Op::Mutate {
                table,
                conditions,
                mutations,
            } => json!({
                "op": "mutate", "table": table, "where": conds_json(conditions),
                "mutations": mutations.iter().map(Mutation::to_json).collect::<Vec<_>>(),
            }),
            Op::Delete { table, conditions } => {
                json!({"op": "delete", "table": table, "where": conds_json(conditions)})
            }
            Op::Wait {
                table,
                conditions,
                columns,
                until,
                rows,
                timeout_ms,
            } => {
                let mut o = json!({
                    "op": "wait", "table": table, "where": conds_json(conditions), "columns": columns,
                    "until": match until { Until::Equal => "==", Until::NotEqual => "!=" },
                    "rows": rows.iter().map(cols_json).collect::<Vec<_>>(),
                });
                if let Some(t) = timeout_ms {
                    o["timeout"] = json!(t);
                }
                o
            }
            Op::Commit { durable } => json!({"op": "commit", "durable": durable}),
            Op::Abort => json!({"op": "abort"}),
            Op::Comment(c) => json!({"op": "comment", "comment": c}),
            Op::Assert { lock } => json!({"op": "assert", "lock": lock}),
        }
    }
}

/// The result of one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum OpResult {
    /// Success: `uuid` for insert, `count` for update/mutate/delete, `rows` for select
    /// (raw JSON rows; read them with the schema via [`crate::Replica::parse_row`]).
    Ok {
        uuid: Option<Uuid>,
        count: Option<u64>,
        rows: Option<Vec<Map<String, Value>>>,
    },
    /// This operation failed.
    Err {
        error: String,
        details: Option<String>,
    },
    /// Not executed because an earlier one failed.
    NotExecuted,
}

/// The reply to a `transact`.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnReply {
    /// One result per operation, plus one when the commit itself failed.
    pub results: Vec<OpResult>,
}

impl TxnReply {
    /// Parse the `result` array of a transact reply for `n_ops` operations.
    pub fn parse(v: &Value, n_ops: usize) -> Result<TxnReply> {
        let arr = v
            .as_array()
            .ok_or_else(|| Error::Protocol(format!("transact reply is not an array: {v}")))?;
        let mut results = Vec::with_capacity(arr.len());
        for r in arr {
            let res = match r {
                Value::Null => OpResult::NotExecuted,
                Value::Object(o) => {
                    if let Some(e) = o.get("error") {
                        OpResult::Err {
                            error: e
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| e.to_string()),
                            details: o.get("details").and_then(Value::as_str).map(str::to_owned),
                        }
                    } else {
                        let uuid = match o.get("uuid").and_then(Value::as_array).map(Vec::as_slice)
                        {
                            Some([_, Value::String(s)]) => Some(
                                Uuid::parse(s)
                                    .ok_or_else(|| Error::Protocol(format!("bad uuid {s}")))?,
                            ),
                            _ => None,
                        };
                        let rows = match o.get("rows") {
                            Some(Value::Array(rs)) => Some(
                                rs.iter()
                                    .map(|r| {
                                        r.as_object().cloned().ok_or_else(|| {
                                            Error::Protocol("row is not an object".into())
                                        })
                                    })
                                    .collect::<Result<Vec<_>>>()?,
                            ),
                            _ => None,
                        };
                        OpResult::Ok {
                            uuid,
                            count: o.get("count").and_then(Value::as_u64),
                            rows,
                        }
                    }
                }
                _ => return Err(Error::Protocol(format!("bad operation result {r}"))),
            };
            results.push(res);
        }
        if results.len() < n_ops {
            return Err(Error::Protocol(format!(
                "{} results for {n_ops} operations",
                results.len()
            )));
        }
        Ok(TxnReply { results })
    }

    /// The first error as [`Error::Transaction`], else the reply.
    pub fn check(self) -> Result<TxnReply> {
        for (index, r) in self.results.iter().enumerate() {
            if let OpResult::Err { error, details } = r {
                return Err(Error::Transaction {
                    index,
                    error: error.clone(),
                    details: details.clone(),
                });
            }
        }
        Ok(self)
    }

    /// The uuid that insert number `index` created.
    pub fn uuid(&self, index: usize) -> Option<Uuid> {
        match self.results.get(index) {
            Some(OpResult::Ok { uuid, .. }) => *uuid,
            _ => None,
        }
    }

    /// The count of an update/mutate/delete.
    pub fn count(&self, index: usize) -> Option<u64> {
        match self.results.get(index) {
            Some(OpResult::Ok { count, .. }) => *count,
            _ => None,
        }
    }

    /// The rows of a select.
    pub fn rows(&self, index: usize) -> Option<&[Map<String, Value>]> {
        match self.results.get(index) {
            Some(OpResult::Ok { rows: Some(r), .. }) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datum::Atom;

    #[test]
    fn ops_on_the_wire() {
        let op = Op::Insert {
            table: "Bridge".into(),
            row: [
                ("name".to_string(), Datum::atom("br0")),
                (
                    "ports".to_string(),
                    Datum::set([Atom::NamedUuid("p".into())]),
                ),
            ]
            .into(),
            uuid_name: Some("b".into()),
        };
        assert_eq!(
            op.to_json(),
            json!({"op": "insert", "table": "Bridge", "uuid-name": "b", "row": {"name": "br0", "ports": ["named-uuid", "p"]}})
        );
        let m = Op::Mutate {
            table: "Open_vSwitch".into(),
            conditions: vec![],
            mutations: vec![Mutation::new(
                "bridges",
                Mutator::Insert,
                Datum::set([Atom::NamedUuid("b".into())]),
            )],
        };
        assert_eq!(
            m.to_json()["mutations"],
            json!([["bridges", "insert", ["named-uuid", "b"]]])
        );
    }

    #[test]
    fn results_and_errors() {
        let v = json!([{"uuid": ["uuid", "36d3e1c4-0d3a-4c43-9d6e-8a1b2c3d4e5f"]}, {"count": 2}, {"error": "constraint violation", "details": "x"}, null]);
        let r = TxnReply::parse(&v, 4).unwrap();
        assert_eq!(
            r.uuid(0).unwrap().to_string(),
            "36d3e1c4-0d3a-4c43-9d6e-8a1b2c3d4e5f"
        );
        assert_eq!(r.count(1), Some(2));
        assert_eq!(r.results[3], OpResult::NotExecuted);
        match r.check() {
            Err(Error::Transaction {
                index: 2,
                error,
                details,
            }) => {
                assert_eq!(error, "constraint violation");
                assert_eq!(details.as_deref(), Some("x"));
            }
            other => panic!("{other:?}"),
        }
        assert!(TxnReply::parse(&json!([{}]), 2).is_err());
        assert!(TxnReply::parse(&json!({}), 0).is_err());
        assert!(TxnReply::parse(&json!([5]), 1).is_err());
    }
}
