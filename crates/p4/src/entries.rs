//! Table entries written as text, into [`EntrySpec`]s the runtime takes.
//!
//! Three control planes write entries as text: the CLI (`nicflow p4
//! table-add`, in `simple_switch_CLI`'s `ACTION KEY... => PARAM...
//! [PRIORITY]` order), STF files (`add` lines, keys by name), and
//! Netronome's RTE `user_config.json` (tables, keys and parameters by
//! name, values as text, ports as names such as the VF `v0.0`). All of
//! them name keys and values the same way here: a key by its expression
//! as written (`hdr.ipv6.dst_addr`), any dotted suffix of it
//! (`ipv6.dst_addr`), or its `@name`; a value as a number (`0x..`,
//! decimal), an IPv4 or IPv6 address, a MAC address, or a name the caller
//! resolves (ports).

use crate::runtime::{KeyMatch, MatchKind, TableInfo};
use crate::stf::{self, KeyValue};
use crate::EntrySpec;
use num_bigint::BigUint;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Resolves a value that is a name (a port such as `v0.0` or `eth1`).
pub type Resolve<'a> = &'a dyn Fn(&str) -> Option<u64>;

/// A value as text: number, IPv4, IPv6, MAC, or a resolved name.
pub fn parse_value(text: &str, resolve: Resolve<'_>) -> Result<BigUint, String> {
    let t = text.trim();
    if let Ok(v) = stf::parse_number(t) {
        return Ok(v);
    }
    if let Ok(a) = t.parse::<Ipv4Addr>() {
        return Ok(BigUint::from(u32::from(a)));
    }
    if let Ok(a) = t.parse::<Ipv6Addr>() {
        return Ok(BigUint::from(u128::from(a)));
    }
    let parts: Vec<&str> = t.split([':', '-']).collect();
    if parts.len() == 6 && parts.iter().all(|p| p.len() == 2) {
        let mut v = 0u64;
        for p in &parts {
            let b = u8::from_str_radix(p, 16).map_err(|_| format!("bad MAC address `{t}`"))?;
            v = (v << 8) | u64::from(b);
        }
        return Ok(BigUint::from(v));
    }
    match resolve(t) {
        Some(v) => Ok(BigUint::from(v)),
        None => Err(format!(
            "`{t}` is not a number, an address, or a known name"
        )),
    }
}

fn normalize(name: &str) -> String {
    // STF writes header stack elements as `extra$0`.
    let mut out = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' {
            out.push('[');
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                out.push(*d);
                chars.next();
            }
            out.push(']');
        } else {
            out.push(c);
        }
    }
    out
}

/// The position of the key `name` in `info`'s key.
pub fn key_index(info: &TableInfo, name: &str) -> Result<usize, String> {
    let n = normalize(name);
    if let Some(i) = info.keys.iter().position(|k| k.is_named(&n)) {
        return Ok(i);
    }
    let suffix = format!(".{n}");
    let hits: Vec<usize> = info
        .keys
        .iter()
        .enumerate()
        .filter(|(_, k)| k.name.ends_with(&suffix))
        .map(|(i, _)| i)
        .collect();
    match hits.len() {
        1 => Ok(hits[0]),
        0 => Err(format!(
            "table {} has no key `{name}` (keys: {})",
            info.name,
            info.keys
                .iter()
                .map(|k| k.annotated_name.clone().unwrap_or_else(|| k.name.clone()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Err(format!("key `{name}` is ambiguous in table {}", info.name)),
    }
}

fn full_mask(width: u32) -> BigUint {
    (BigUint::from(1u8) << width) - 1u8
}

/// A key value of a given match kind and width from its STF form.
fn key_match(kind: &MatchKind, width: u32, v: KeyValue) -> Result<KeyMatch, String> {
    Ok(match (kind, v) {
        (MatchKind::Exact, KeyValue::Exact(x)) => KeyMatch::Exact(x),
        (MatchKind::Lpm, KeyValue::Lpm(x, l)) => KeyMatch::Lpm(x, l),
        (MatchKind::Lpm, KeyValue::Exact(x)) => KeyMatch::Lpm(x, width),
        (MatchKind::Ternary, KeyValue::Ternary(x, m)) => KeyMatch::Ternary(x, m),
        (MatchKind::Ternary, KeyValue::Exact(x)) => KeyMatch::Ternary(x, full_mask(width)),
        (MatchKind::Ternary, KeyValue::Lpm(x, l)) => {
            let m = if l == 0 {
                BigUint::default()
            } else {
                full_mask(width) ^ full_mask(width.saturating_sub(l))
            };
            KeyMatch::Ternary(x, m)
        }
        (MatchKind::Range, KeyValue::Range(lo, hi)) => KeyMatch::Range(lo, hi),
        (MatchKind::Range, KeyValue::Exact(x)) => KeyMatch::Range(x.clone(), x),
        (MatchKind::Optional, KeyValue::Exact(x)) => KeyMatch::Optional(Some(x)),
        (MatchKind::Optional, KeyValue::Ternary(x, m)) if m == full_mask(width) => {
            KeyMatch::Optional(Some(x))
        }
        (MatchKind::Optional, KeyValue::Ternary(_, m)) if m == BigUint::default() => {
            KeyMatch::Optional(None)
        }
        (k, v) => return Err(format!("a {} key cannot take {v:?}", k.name())),
    })
}

/// One key value as text for a key of `kind`: `v`, `v/len`, `v&&&m`,
/// `lo->hi` / `lo..hi`, `*` or `_` (wildcard).
pub fn parse_key_text(
    kind: &MatchKind,
    width: u32,
    text: &str,
    resolve: Resolve<'_>,
) -> Result<KeyMatch, String> {
    let t = text.trim();
    if t == "*" || t == "_" {
        return Ok(match kind {
            MatchKind::Exact => return Err("an exact key cannot be a wildcard".into()),
            MatchKind::Optional => KeyMatch::Optional(None),
            _ => KeyMatch::Any,
        });
    }
    let v = if let Some((a, b)) = t.split_once("&&&") {
        KeyValue::Ternary(parse_value(a, resolve)?, parse_value(b, resolve)?)
    } else if let Some((a, b)) = t.split_once("->").or_else(|| t.split_once("..")) {
        KeyValue::Range(parse_value(a, resolve)?, parse_value(b, resolve)?)
    } else if let Some((a, l)) = t.rsplit_once('/') {
        let len = l
            .parse::<u32>()
            .map_err(|_| format!("bad prefix length in `{t}`"))?;
        KeyValue::Lpm(parse_value(a, resolve)?, len)
    } else {
        KeyValue::Exact(parse_value(t, resolve)?)
    };
    key_match(kind, width, v)
}

/// An STF `add` line as an entry of `info`.
pub fn from_stf(info: &TableInfo, add: &stf::TableAdd) -> Result<EntrySpec, String> {
    let mut keys = vec![KeyMatch::Any; info.keys.len()];
    for (name, v) in &add.keys {
        let i = key_index(info, name)?;
        let k = &info.keys[i];
        keys[i] = key_match(&k.match_kind, k.width, v.clone())
            .map_err(|e| format!("key `{name}`: {e}"))?;
    }
    Ok(EntrySpec {
        keys,
        action: add.action.name.clone(),
        params: add.action.args.clone(),
        priority: add.priority,
    })
}

/// `nicflow p4 table-add` words after the table: `ACTION KEY... [=>
/// PARAM...] [priority N]`, keys in key order, parameters in declaration
/// order or as `name=value`.
pub fn from_cli(
    info: &TableInfo,
    words: &[String],
    resolve: Resolve<'_>,
) -> Result<EntrySpec, String> {
    let (action, rest) = words
        .split_first()
        .ok_or_else(|| "missing action name".to_string())?;
    let mut priority = None;
    let mut rest: Vec<&String> = rest.iter().collect();
    if let Some(p) = rest.iter().position(|w| *w == "priority") {
        let v = rest
            .get(p + 1)
            .ok_or("`priority` needs a value")?
            .parse::<u32>()
            .map_err(|_| "bad priority".to_string())?;
        priority = Some(v);
        rest.drain(p..p + 2);
    }
    let (key_words, param_words) = match rest.iter().position(|w| *w == "=>") {
        Some(p) => (&rest[..p], &rest[p + 1..]),
        None => (&rest[..], &rest[rest.len()..]),
    };
    if key_words.len() != info.keys.len() {
        return Err(format!(
            "table {} has {} key(s) ({}), {} given",
            info.name,
            info.keys.len(),
            info.keys
                .iter()
                .map(|k| format!("{}:{}", k.name, k.match_kind.name()))
                .collect::<Vec<_>>()
                .join(" "),
            key_words.len()
        ));
    }
    let mut keys = Vec::new();
    for (k, w) in info.keys.iter().zip(key_words) {
        keys.push(
            parse_key_text(&k.match_kind, k.width, w, resolve)
                .map_err(|e| format!("key {}: {e}", k.name))?,
        );
    }
    let mut params = Vec::new();
    for w in param_words {
        match w.split_once('=') {
            Some((n, v)) => params.push((n.to_string(), parse_value(v, resolve)?)),
            None => params.push((String::new(), parse_value(w, resolve)?)),
        }
    }
    Ok(EntrySpec {
        keys,
        action: action.clone(),
        params,
        priority,
    })
}

/// Netronome RTE table names: `ingress::t` (the ingress control's `t`),
/// `egress::t`; a plain name is used as it is.
pub fn netronome_table(name: &str) -> String {
    match name.split_once("::") {
        Some((_, t)) => t.to_string(),
        None => name.to_string(),
    }
}

/// The entries of a Netronome `user_config.json`: (table as the program
/// names it, entry) for every rule, and (table, default entry) for every
/// `default_rule`. `info` looks a table up by name.
pub fn from_user_config(
    json: &str,
    info: &dyn Fn(&str) -> Result<TableInfo, String>,
    resolve: Resolve<'_>,
) -> Result<Vec<(String, EntrySpec, bool)>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("user_config.json: {e}"))?;
    let tables = v
        .get("tables")
        .and_then(|t| t.as_object())
        .ok_or("user_config.json: no \"tables\" object")?;
    let mut out = Vec::new();
    for (tname, t) in tables {
        let ti = info(&netronome_table(tname)).map_err(|e| format!("table {tname}: {e}"))?;
        let rule = |r: &serde_json::Value| -> Result<EntrySpec, String> {
            let rname = r.get("name").and_then(|n| n.as_str()).unwrap_or("?");
            let ctx = |e: String| format!("table {tname}, rule {rname}: {e}");
            let mut keys = vec![KeyMatch::Any; ti.keys.len()];
            if let Some(m) = r.get("match").and_then(|m| m.as_object()) {
                for (kname, kv) in m {
                    let i = key_index(&ti, kname).map_err(ctx)?;
                    let k = &ti.keys[i];
                    let val = kv
                        .get("value")
                        .map(json_text)
                        .ok_or_else(|| ctx(format!("key {kname}: no \"value\"")))?;
                    let text = match kv.get("mask").map(json_text) {
                        Some(mask) => format!("{val}&&&{mask}"),
                        None => val,
                    };
                    keys[i] = parse_key_text(&k.match_kind, k.width, &text, resolve)
                        .map_err(|e| ctx(format!("key {kname}: {e}")))?;
                }
            }
            let act = r.get("action").ok_or_else(|| ctx("no \"action\"".into()))?;
            let aname = act
                .get("type")
                .and_then(|a| a.as_str())
                .ok_or_else(|| ctx("action without \"type\"".into()))?;
            let mut params = Vec::new();
            if let Some(d) = act.get("data").and_then(|d| d.as_object()) {
                for (pname, pv) in d {
                    let text = pv
                        .get("value")
                        .map(json_text)
                        .unwrap_or_else(|| json_text(pv));
                    params.push((
                        pname.clone(),
                        parse_value(&text, resolve).map_err(|e| ctx(format!("{pname}: {e}")))?,
                    ));
                }
            }
            let priority = r.get("priority").and_then(|p| p.as_u64()).map(|p| p as u32);
            Ok(EntrySpec {
                keys,
                action: netronome_table(aname),
                params,
                priority,
            })
        };
        for r in t
            .get("rules")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
        {
            out.push((ti.name.clone(), rule(r)?, false));
        }
        if let Some(d) = t.get("default_rule") {
            out.push((ti.name.clone(), rule(d)?, true));
        }
    }
    Ok(out)
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ActionInfo, KeyInfo, ParamInfo};

    fn lpm_table() -> TableInfo {
        TableInfo {
            name: "MyIngress.ipv6_lpm".into(),
            id: 1,
            keys: vec![KeyInfo {
                name: "hdr.ipv6.dst_addr".into(),
                annotated_name: None,
                match_kind: MatchKind::Exact,
                width: 128,
                id: 1,
            }],
            actions: vec![ActionInfo {
                name: "MyIngress.ipv6_forward".into(),
                id: 2,
                params: vec![
                    ParamInfo {
                        name: "dstAddr".into(),
                        width: 48,
                        id: 1,
                    },
                    ParamInfo {
                        name: "port".into(),
                        width: 16,
                        id: 2,
                    },
                ],
                table_only: false,
                default_only: false,
            }],
            size: 1024,
            is_const: false,
            const_default: false,
            default_action: ("MyIngress.drop".into(), vec![]),
            add_on_miss: false,
            idle_timeout: false,
            direct_counter: None,
            direct_meter: None,
        }
    }

    #[test]
    fn values_in_every_notation() {
        let none = |_: &str| None;
        assert_eq!(parse_value("0x10", &none).unwrap(), 16u32.into());
        assert_eq!(
            parse_value("10.0.0.1", &none).unwrap(),
            0x0a000001u32.into()
        );
        assert_eq!(
            parse_value("00:15:4d:00:00:01", &none).unwrap(),
            0x00154d000001u64.into()
        );
        assert_eq!(
            parse_value("fc00::1", &none).unwrap(),
            (0xfc00u128 << 112 | 1).into()
        );
        assert!(parse_value("v0.0", &none).is_err());
        let vf = |n: &str| (n == "v0.0").then_some(7);
        assert_eq!(parse_value("v0.0", &vf).unwrap(), 7u32.into());
    }

    #[test]
    fn netronome_user_config() {
        let json = r#"{"tables": {"ingress::ipv6_lpm": {"rules": [
            {"name": "a", "match": {"ipv6.dst_addr": {"value": "fc00::1"}},
             "action": {"type": "ingress::ipv6_forward",
                        "data": {"dstAddr": {"value": "00:15:4d:00:00:00"}, "port": {"value": "v0.1"}}}}]}}}"#;
        let info = |n: &str| {
            let t = lpm_table();
            if t.name.ends_with(n) {
                Ok(t)
            } else {
                Err("no table".to_string())
            }
        };
        let vf = |n: &str| (n == "v0.1").then_some(3);
        let e = from_user_config(json, &info, &vf).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0, "MyIngress.ipv6_lpm");
        assert_eq!(e[0].1.action, "ipv6_forward");
        assert_eq!(e[0].1.params[1], ("port".to_string(), 3u32.into()));
        let bad = json.replace("v0.1", "v9.9");
        let err = from_user_config(&bad, &info, &vf).unwrap_err();
        assert!(err.contains("rule a") && err.contains("v9.9"), "{err}");
    }

    #[test]
    fn cli_words() {
        let t = lpm_table();
        let w: Vec<String> = "ipv6_forward fc00::1 => 00:15:4d:00:00:00 2"
            .split(' ')
            .map(String::from)
            .collect();
        let e = from_cli(&t, &w, &|_| None).unwrap();
        assert_eq!(
            e.keys,
            vec![KeyMatch::Exact(BigUint::from(0xfc00u128 << 112 | 1))]
        );
        assert_eq!(e.params.len(), 2);
        let w: Vec<String> = vec!["ipv6_forward".into()];
        assert!(from_cli(&t, &w, &|_| None).unwrap_err().contains("1 key"));
    }
}
