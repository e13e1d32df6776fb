//! OVSDB values (RFC 7047 section 5.1): atoms, and datums that are always a set or a
//! map, as in OVS (a scalar column holds a one-element set). Datums are kept sorted
//! and duplicate-free, so two replicas holding the same data compare equal.

use crate::error::{Error, Result};
use crate::schema::{AtomicType, BaseType, Type};
use serde_json::{json, Value};
use std::cmp::Ordering;
use std::fmt;

/// A row UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid(pub u128);

impl Uuid {
    /// The all-zero UUID (used as "no last transaction" in `monitor_cond_since`).
    pub const ZERO: Uuid = Uuid(0);

    /// Parse the 8-4-4-4-12 hex form.
    pub fn parse(s: &str) -> Option<Uuid> {
        let b = s.as_bytes();
        if b.len() != 36 {
            return None;
        }
        let mut v: u128 = 0;
        for (i, &c) in b.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if c != b'-' {
                    return None;
                }
                continue;
            }
            let d = (c as char).to_digit(16)?;
            v = (v << 4) | d as u128;
        }
        Some(Uuid(v))
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = format!("{:032x}", self.0);
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// One atom.
#[derive(Debug, Clone)]
pub enum Atom {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    String(String),
    Uuid(Uuid),
    /// A reference to a row inserted earlier in the same transaction (`uuid-name`);
    /// only meaningful in requests.
    NamedUuid(String),
}

impl Atom {
    fn rank(&self) -> u8 {
        match self {
            Atom::Integer(_) => 0,
            Atom::Real(_) => 1,
            Atom::Boolean(_) => 2,
            Atom::String(_) => 3,
            Atom::Uuid(_) => 4,
            Atom::NamedUuid(_) => 5,
        }
    }

    /// Convenience constructor.
    pub fn string(s: impl Into<String>) -> Atom {
        Atom::String(s.into())
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Atom::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Atom::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The uuid, if this is one.
    pub fn as_uuid(&self) -> Option<Uuid> {
        match self {
            Atom::Uuid(u) => Some(*u),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Atom::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The wire form.
    pub fn to_json(&self) -> Value {
        match self {
            Atom::Integer(i) => json!(i),
            Atom::Real(r) => json!(r),
            Atom::Boolean(b) => json!(b),
            Atom::String(s) => json!(s),
            Atom::Uuid(u) => json!(["uuid", u.to_string()]),
            Atom::NamedUuid(n) => json!(["named-uuid", n]),
        }
    }

    /// Read an atom of type `ty`. `named-uuid` is accepted for uuids (it appears in
    /// conditions and rows of requests).
    pub fn from_json(ty: &BaseType, v: &Value) -> Result<Atom> {
        let bad = || Error::Datum(format!("expected {:?}, got {v}", ty.atomic));
        Ok(match ty.atomic {
            AtomicType::Integer => Atom::Integer(v.as_i64().ok_or_else(bad)?),
            AtomicType::Real => Atom::Real(v.as_f64().ok_or_else(bad)?),
            AtomicType::Boolean => Atom::Boolean(v.as_bool().ok_or_else(bad)?),
            AtomicType::String => Atom::String(v.as_str().ok_or_else(bad)?.to_owned()),
            AtomicType::Uuid => match v.as_array().map(Vec::as_slice) {
                Some([Value::String(tag), Value::String(s)]) if tag == "uuid" => Atom::Uuid(
                    Uuid::parse(s).ok_or_else(|| Error::Datum(format!("bad uuid {s:?}")))?,
                ),
                Some([Value::String(tag), Value::String(s)]) if tag == "named-uuid" => {
                    Atom::NamedUuid(s.clone())
                }
                _ => return Err(bad()),
            },
        })
    }
}

impl Ord for Atom {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Atom::Integer(a), Atom::Integer(b)) => a.cmp(b),
            (Atom::Real(a), Atom::Real(b)) => a.total_cmp(b),
            (Atom::Boolean(a), Atom::Boolean(b)) => a.cmp(b),
            (Atom::String(a), Atom::String(b)) => a.cmp(b),
            (Atom::Uuid(a), Atom::Uuid(b)) => a.cmp(b),
            (Atom::NamedUuid(a), Atom::NamedUuid(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}
impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Atom {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Atom {}

impl From<&str> for Atom {
    fn from(s: &str) -> Atom {
        Atom::String(s.to_owned())
    }
}
impl From<String> for Atom {
    fn from(s: String) -> Atom {
        Atom::String(s)
    }
}
impl From<i64> for Atom {
    fn from(i: i64) -> Atom {
        Atom::Integer(i)
    }
}
impl From<bool> for Atom {
    fn from(b: bool) -> Atom {
        Atom::Boolean(b)
    }
}
impl From<Uuid> for Atom {
    fn from(u: Uuid) -> Atom {
        Atom::Uuid(u)
    }
}

/// A column value: a set of atoms or a map. Sorted by key, keys unique.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Datum {
    Set(Vec<Atom>),
    Map(Vec<(Atom, Atom)>),
}

impl Datum {
    /// A one-atom datum (a scalar column's value).
    pub fn atom(a: impl Into<Atom>) -> Datum {
        Datum::Set(vec![a.into()])
    }

    /// A set; sorts and removes duplicates.
    pub fn set(atoms: impl IntoIterator<Item = Atom>) -> Datum {
        let mut v: Vec<Atom> = atoms.into_iter().collect();
        v.sort();
        v.dedup();
        Datum::Set(v)
    }

    /// A map; sorts, and a later duplicate key wins.
    pub fn map(pairs: impl IntoIterator<Item = (Atom, Atom)>) -> Datum {
        let mut v: Vec<(Atom, Atom)> = Vec::new();
        for (k, val) in pairs {
            match v.binary_search_by(|(x, _)| x.cmp(&k)) {
                Ok(i) => v[i].1 = val,
                Err(i) => v.insert(i, (k, val)),
            }
        }
        Datum::Map(v)
    }

    /// The empty set.
    pub fn empty() -> Datum {
        Datum::Set(Vec::new())
    }

    /// The default value of a column of type `ty` (what a freshly inserted row holds).
    pub fn default_for(ty: &Type) -> Datum {
        let zero = |b: &BaseType| match b.atomic {
            AtomicType::Integer => Atom::Integer(0),
            AtomicType::Real => Atom::Real(0.0),
            AtomicType::Boolean => Atom::Boolean(false),
            AtomicType::String => Atom::String(String::new()),
            AtomicType::Uuid => Atom::Uuid(Uuid::ZERO),
        };
        match (&ty.value, ty.min) {
            (Some(_), _) => Datum::Map(Vec::new()),
            (None, 0) => Datum::empty(),
            (None, _) => Datum::atom(zero(&ty.key)),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Datum::Set(s) => s.len(),
            Datum::Map(m) => m.len(),
        }
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The single atom of a scalar (or of a one-element optional).
    pub fn as_atom(&self) -> Option<&Atom> {
        match self {
            Datum::Set(s) if s.len() == 1 => s.first(),
            _ => None,
        }
    }

    /// The single string.
    pub fn as_str(&self) -> Option<&str> {
        self.as_atom().and_then(Atom::as_str)
    }

    /// The single integer.
    pub fn as_int(&self) -> Option<i64> {
        self.as_atom().and_then(Atom::as_int)
    }

    /// The single boolean.
    pub fn as_bool(&self) -> Option<bool> {
        self.as_atom().and_then(Atom::as_bool)
    }

    /// The atoms of a set (empty for a map).
    pub fn atoms(&self) -> &[Atom] {
        match self {
            Datum::Set(s) => s,
            Datum::Map(_) => &[],
        }
    }

    /// The uuids of a set of references.
    pub fn uuids(&self) -> impl Iterator<Item = Uuid> + '_ {
        self.atoms().iter().filter_map(Atom::as_uuid)
    }

    /// The pairs of a map (empty for a set).
    pub fn pairs(&self) -> &[(Atom, Atom)] {
        match self {
            Datum::Map(m) => m,
            Datum::Set(_) => &[],
        }
    }

    /// Look a key up in a map.
    pub fn get(&self, key: &Atom) -> Option<&Atom> {
        let m = self.pairs();
        m.binary_search_by(|(k, _)| k.cmp(key))
            .ok()
            .map(|i| &m[i].1)
    }

    /// Look a string key up in a string map.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(&Atom::String(key.to_owned()))
            .and_then(Atom::as_str)
    }

    /// The wire form (a one-element set is written as the bare atom, as OVS does).
    pub fn to_json(&self) -> Value {
        match self {
            Datum::Set(s) if s.len() == 1 => s[0].to_json(),
            Datum::Set(s) => json!(["set", s.iter().map(Atom::to_json).collect::<Vec<_>>()]),
            Datum::Map(m) => json!([
                "map",
                m.iter()
                    .map(|(k, v)| json!([k.to_json(), v.to_json()]))
                    .collect::<Vec<_>>()
            ]),
        }
    }

    /// Read a datum of type `ty`, checking the element count.
    pub fn from_json(ty: &Type, v: &Value) -> Result<Datum> {
        let d = Self::from_json_unchecked(ty, v)?;
        let n = d.len() as u64;
        if n < ty.min || ty.max.is_some_and(|m| n > m) {
            return Err(Error::Datum(format!(
                "{n} elements, type allows {}..{:?}",
                ty.min, ty.max
            )));
        }
        Ok(d)
    }

    /// Read a datum of type `ty` without the count check: the form of an `update2`
    /// diff, which may hold more elements than the column.
    pub fn from_json_unchecked(ty: &Type, v: &Value) -> Result<Datum> {
        if let Some(vt) = &ty.value {
            let pairs = match v.as_array().map(Vec::as_slice) {
                Some([Value::String(tag), Value::Array(p)]) if tag == "map" => p,
                _ => return Err(Error::Datum(format!("expected a map, got {v}"))),
            };
            let mut out = Vec::with_capacity(pairs.len());
            for p in pairs {
                match p.as_array().map(Vec::as_slice) {
                    Some([k, val]) => {
                        out.push((Atom::from_json(&ty.key, k)?, Atom::from_json(vt, val)?))
                    }
                    _ => return Err(Error::Datum(format!("bad map pair {p}"))),
                }
            }
            let n = out.len();
            let d = Datum::map(out);
            if d.len() != n {
                return Err(Error::Datum("duplicate key in map".into()));
            }
            return Ok(d);
        }
        match v.as_array().map(Vec::as_slice) {
            Some([Value::String(tag), Value::Array(atoms)]) if tag == "set" => {
                let parsed = atoms
                    .iter()
                    .map(|a| Atom::from_json(&ty.key, a))
                    .collect::<Result<Vec<_>>>()?;
                let n = parsed.len();
                let d = Datum::set(parsed);
                if d.len() != n {
                    return Err(Error::Datum("duplicate element in set".into()));
                }
                Ok(d)
            }
            _ => Ok(Datum::atom(Atom::from_json(&ty.key, v)?)),
        }
    }

    /// Apply an `update2` "modify" diff for a column of type `ty` (RFC 7047 as extended
    /// by ovsdb-server(7)): a scalar or optional column takes the diff as its new value;
    /// in a set each diff element is toggled; in a map a diff pair adds a missing key,
    /// removes a key with the same value, and replaces a key with another value.
    pub fn apply_diff(&mut self, ty: &Type, diff: Datum) -> Result<()> {
        if !ty.is_composite() {
            *self = diff;
            return Ok(());
        }
        match (self, diff) {
            (Datum::Set(cur), Datum::Set(d)) => {
                for a in d {
                    match cur.binary_search(&a) {
                        Ok(i) => {
                            cur.remove(i);
                        }
                        Err(i) => cur.insert(i, a),
                    }
                }
            }
            (Datum::Map(cur), Datum::Map(d)) => {
                for (k, v) in d {
                    match cur.binary_search_by(|(x, _)| x.cmp(&k)) {
                        Ok(i) if cur[i].1 == v => {
                            cur.remove(i);
                        }
                        Ok(i) => cur[i].1 = v,
                        Err(i) => cur.insert(i, (k, v)),
                    }
                }
            }
            _ => return Err(Error::Datum("diff kind does not match the column".into())),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Type;
    use proptest::prelude::*;

    fn ty(v: Value) -> Type {
        Type::parse(&v).unwrap()
    }

    #[test]
    fn uuid_roundtrip() {
        let s = "36d3e1c4-0d3a-4c43-9d6e-8a1b2c3d4e5f";
        assert_eq!(Uuid::parse(s).unwrap().to_string(), s);
        for bad in [
            "",
            "36d3e1c4x0d3a-4c43-9d6e-8a1b2c3d4e5f",
            "36d3e1c4-0d3a-4c43-9d6e-8a1b2c3d4e5g",
            "é6d3e1c4-0d3a-4c43-9d6e-8a1b2c3d4e5",
        ] {
            assert!(Uuid::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn one_element_set_is_bare_atom() {
        let t = ty(json!({"key": "string", "min": 0, "max": "unlimited"}));
        assert_eq!(Datum::from_json(&t, &json!("a")).unwrap(), Datum::atom("a"));
        assert_eq!(
            Datum::from_json(&t, &json!(["set", ["b", "a"]])).unwrap(),
            Datum::set(["a".into(), "b".into()])
        );
        assert_eq!(Datum::set(["a".into()]).to_json(), json!("a"));
        assert!(Datum::from_json(&t, &json!(["set", ["a", "a"]])).is_err());
        let one = ty(json!({"key": "integer", "min": 0, "max": 1}));
        assert!(Datum::from_json(&one, &json!(["set", [1, 2]])).is_err());
    }

    #[test]
    fn diffs_follow_ovs() {
        let set = ty(json!({"key": "string", "min": 0, "max": "unlimited"}));
        let mut d = Datum::set(["a".into(), "b".into()]);
        d.apply_diff(&set, Datum::set(["b".into(), "c".into()]))
            .unwrap();
        assert_eq!(d, Datum::set(["a".into(), "c".into()]));

        let map = ty(json!({"key": "string", "value": "string", "min": 0, "max": "unlimited"}));
        let mut m = Datum::map([("k1".into(), "v1".into()), ("k2".into(), "v2".into())]);
        m.apply_diff(
            &map,
            Datum::map([
                ("k1".into(), "v1".into()),
                ("k2".into(), "new".into()),
                ("k3".into(), "v3".into()),
            ]),
        )
        .unwrap();
        assert_eq!(
            m,
            Datum::map([("k2".into(), "new".into()), ("k3".into(), "v3".into())])
        );

        let opt = ty(json!({"key": "integer", "min": 0, "max": 1}));
        let mut o = Datum::atom(5);
        o.apply_diff(&opt, Datum::atom(6)).unwrap();
        assert_eq!(o, Datum::atom(6));
        o.apply_diff(&opt, Datum::empty()).unwrap();
        assert_eq!(o, Datum::empty());

        assert!(Datum::set([]).apply_diff(&set, Datum::map([])).is_err());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or(Value::Null)),
            prop_oneof![
                Just("set".to_string()),
                Just("map".to_string()),
                Just("uuid".to_string()),
                Just("named-uuid".to_string()),
                "[a-z0-9-]{0,40}"
            ]
            .prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop::collection::vec(inner, 0..4).prop_map(Value::Array)
        })
    }

    fn types() -> Vec<Type> {
        [
            json!("integer"),
            json!("real"),
            json!("boolean"),
            json!({"key": "uuid", "min": 0, "max": "unlimited"}),
            json!({"key": "string", "value": "integer", "min": 0, "max": "unlimited"}),
            json!({"key": "uuid", "value": "uuid", "min": 1, "max": 3}),
        ]
        .into_iter()
        .map(ty)
        .collect()
    }

    proptest! {
        #[test]
        fn random_json_never_panics(v in arb_json()) {
            for t in types() {
                if let Ok(d) = Datum::from_json(&t, &v) {
                    // Whatever parses writes back to an equal datum.
                    prop_assert_eq!(Datum::from_json(&t, &d.to_json()).unwrap(), d.clone());
                    let mut x = Datum::default_for(&t);
                    let _ = x.apply_diff(&t, d);
                }
                let _ = Datum::from_json_unchecked(&t, &v);
            }
        }

        #[test]
        fn set_diff_is_symmetric_difference(a in prop::collection::btree_set(0i64..20, 0..10), b in prop::collection::btree_set(0i64..20, 0..10)) {
            let t = ty(json!({"key": "integer", "min": 0, "max": "unlimited"}));
            let mut d = Datum::set(a.iter().map(|&i| Atom::Integer(i)));
            let diff = Datum::set(a.symmetric_difference(&b).map(|&i| Atom::Integer(i)));
            d.apply_diff(&t, diff).unwrap();
            prop_assert_eq!(d, Datum::set(b.iter().map(|&i| Atom::Integer(i))));
        }
    }
}
