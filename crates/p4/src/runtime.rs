//! The control plane's view of a loaded program: introspection of tables,
//! actions and stateful externs (with stable numeric ids for P4Info) and
//! the operations the CLI, the STF runner, P4Runtime and the JSON loader
//! use to fill tables and read/write extern state between packets. Every
//! operation validates fully before changing anything.

use crate::trace::EntryId;
use num_bigint::BigUint;
use thiserror::Error;

/// Match kind of a key element.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MatchKind {
    Exact,
    Lpm,
    Ternary,
    Range,
    Optional,
    /// `selector` and target-specific kinds: refused at entry insertion.
    Other(String),
}

impl MatchKind {
    pub fn from_name(s: &str) -> MatchKind {
        match s {
            "exact" => MatchKind::Exact,
            "lpm" => MatchKind::Lpm,
            "ternary" => MatchKind::Ternary,
            "range" => MatchKind::Range,
            "optional" => MatchKind::Optional,
            o => MatchKind::Other(o.to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            MatchKind::Exact => "exact",
            MatchKind::Lpm => "lpm",
            MatchKind::Ternary => "ternary",
            MatchKind::Range => "range",
            MatchKind::Optional => "optional",
            MatchKind::Other(s) => s,
        }
    }
}

/// One key element of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// The expression as written (`hdr.ip.dstAddr`).
    pub name: String,
    /// `@name("prefix")` when given.
    pub annotated_name: Option<String>,
    pub match_kind: MatchKind,
    pub width: u32,
    /// 1-based position (P4Info match field id).
    pub id: u32,
}

impl KeyInfo {
    /// True when `n` names this key (written expression or @name).
    pub fn is_named(&self, n: &str) -> bool {
        self.name == n || self.annotated_name.as_deref() == Some(n)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    pub width: u32,
    /// 1-based position.
    pub id: u32,
}

/// An action as a table (or the control plane) sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionInfo {
    /// Fully qualified (`Main.set_nh`, `NoAction`).
    pub name: String,
    pub id: u32,
    /// Directionless parameters (action data), in order.
    pub params: Vec<ParamInfo>,
    /// `@tableonly`: not allowed as default action.
    pub table_only: bool,
    /// `@defaultonly`: only as default action.
    pub default_only: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// Fully qualified (`Main.fib_table`).
    pub name: String,
    pub id: u32,
    pub keys: Vec<KeyInfo>,
    pub actions: Vec<ActionInfo>,
    pub size: u64,
    /// `const entries`: no runtime add/modify/delete.
    pub is_const: bool,
    /// `const default_action`.
    pub const_default: bool,
    /// Default action name (fully qualified) and its argument values.
    pub default_action: (String, Vec<BigUint>),
    /// PNA `add_on_miss = true`.
    pub add_on_miss: bool,
    /// PNA `pna_idle_timeout` / v1model `support_timeout = true`.
    pub idle_timeout: bool,
    /// Direct counter / meter attached, by instance name.
    pub direct_counter: Option<String>,
    pub direct_meter: Option<String>,
}

impl TableInfo {
    /// Position of the key element `name`: the expression as written,
    /// its `@name`, or a dotted suffix of the expression (`ipv4.dstAddr`
    /// for `hdr.ipv4.dstAddr`; `$` stack notation is the caller's to
    /// translate). Ambiguous suffixes are an error.
    pub fn key_index(&self, name: &str) -> Result<usize, RuntimeError> {
        if let Some(i) = self.keys.iter().position(|k| k.is_named(name)) {
            return Ok(i);
        }
        let suffix = format!(".{name}");
        let hits: Vec<usize> = (0..self.keys.len())
            .filter(|i| self.keys[*i].name.ends_with(&suffix))
            .collect();
        match hits.as_slice() {
            [i] => Ok(*i),
            [] => Err(RuntimeError::BadKey {
                table: self.name.clone(),
                key: name.into(),
                msg: format!(
                    "no such key (keys: {})",
                    self.keys
                        .iter()
                        .map(|k| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
            _ => Err(RuntimeError::BadKey {
                table: self.name.clone(),
                key: name.into(),
                msg: "ambiguous key name".into(),
            }),
        }
    }

    /// The action `name` of this table (qualified name or dotted suffix).
    pub fn action(&self, name: &str) -> Result<&ActionInfo, RuntimeError> {
        let q = resolve_suffix(name, self.actions.iter().map(|a| a.name.as_str())).ok();
        self.actions
            .iter()
            .find(|a| Some(a.name.as_str()) == q)
            .ok_or_else(|| RuntimeError::UnknownAction {
                table: self.name.clone(),
                action: name.into(),
                allowed: self
                    .actions
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExternKind {
    Counter,
    DirectCounter,
    Register,
    Meter,
    DirectMeter,
}

/// A stateful extern instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternInfo {
    /// Fully qualified (`MyIngress.reg`).
    pub name: String,
    pub id: u32,
    pub kind: ExternKind,
    /// Number of cells (direct ones: 0).
    pub size: u64,
    /// Register cell width in bits (0 for others).
    pub width: u32,
    /// Owning table for direct externs.
    pub table: Option<String>,
}

/// The match of one key element of an entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyMatch {
    Exact(BigUint),
    /// Value and prefix length.
    Lpm(BigUint, u32),
    /// Value and mask.
    Ternary(BigUint, BigUint),
    /// Inclusive bounds.
    Range(BigUint, BigUint),
    /// `None`: wildcard.
    Optional(Option<BigUint>),
    /// Wildcard for any non-exact kind (`_` / omitted key).
    Any,
}

/// A table entry as the control plane gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntrySpec {
    /// One per key element, in key order.
    pub keys: Vec<KeyMatch>,
    /// Action name (any dotted suffix of the qualified name).
    pub action: String,
    /// Parameter values by name; an empty name means "next by position".
    pub params: Vec<(String, BigUint)>,
    /// Larger wins (STF/P4Runtime convention). Required when the table
    /// has ternary/range/optional keys unless a single entry.
    pub priority: Option<u32>,
}

/// An entry as dumped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryDump {
    pub id: EntryId,
    pub spec: EntrySpec,
    pub is_const: bool,
    pub packets: u64,
    pub bytes: u64,
    /// Last time (ns, caller's clock) the entry was hit or added.
    pub last_hit_ns: Option<u64>,
}

/// Meter rates (token bucket): committed and peak rates in bytes (or
/// packets) per second and burst sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MeterConfig {
    pub cir: u64,
    pub cburst: u64,
    pub pir: u64,
    pub pburst: u64,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    #[error("no table named {0}")]
    UnknownTable(String),
    #[error("table name {0} is ambiguous: {1}")]
    AmbiguousTable(String, String),
    #[error("table {table}: no action named {action} (allowed: {allowed})")]
    UnknownAction {
        table: String,
        action: String,
        allowed: String,
    },
    #[error("table {table}: action {action}: {msg}")]
    BadParams {
        table: String,
        action: String,
        msg: String,
    },
    #[error("table {table}: key {key}: {msg}")]
    BadKey {
        table: String,
        key: String,
        msg: String,
    },
    #[error("table {0} has const entries")]
    ConstTable(String),
    #[error("table {0}: default action is const")]
    ConstDefault(String),
    #[error("table {0}: an entry with the same key exists (id {1})")]
    DuplicateKey(String, EntryId),
    #[error("table {0} is full (size {1})")]
    TableFull(String, u64),
    #[error("table {0}: no entry {1}")]
    UnknownEntry(String, EntryId),
    #[error("table {0}: {1}")]
    Other(String, String),
    #[error("no {kind} named {name}")]
    UnknownExtern { kind: &'static str, name: String },
    #[error("{name}: index {index} out of range (size {size})")]
    IndexOutOfRange { name: String, index: u64, size: u64 },
    #[error("{name}: value does not fit in {width} bits")]
    ValueTooWide { name: String, width: u32 },
}

/// Resolves `name` against fully qualified `names` by exact match first,
/// then by dotted suffix; ambiguity is an error.
pub fn resolve_suffix<'a>(
    name: &str,
    names: impl Iterator<Item = &'a str> + Clone,
) -> Result<&'a str, Option<String>> {
    if let Some(n) = names.clone().find(|n| *n == name) {
        return Ok(n);
    }
    let suffix = format!(".{name}");
    let hits: Vec<&str> = names.filter(|n| n.ends_with(&suffix)).collect();
    match hits.len() {
        1 => Ok(hits[0]),
        0 => Err(None),
        _ => Err(Some(hits.join(", "))),
    }
}

/// P4Info id as p4c computes it: the resource type in the top byte
/// (P4Runtime's P4Ids: 0x01 action, 0x02 table, 0x12 counter, 0x13
/// direct counter, 0x14 meter, 0x15 direct meter, 0x16 register) and the
/// low 24 bits of Bob Jenkins' one-at-a-time hash of the fully qualified
/// name. (p4c resolves the rare collisions by probing; not done here.)
pub fn stable_id(prefix: u8, name: &str) -> u32 {
    let mut h: u32 = 0;
    for b in name.bytes() {
        h = h.wrapping_add(b as u32);
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h = h.wrapping_add(h << 15);
    ((prefix as u32) << 24) | (h & 0x00ff_ffff)
}
