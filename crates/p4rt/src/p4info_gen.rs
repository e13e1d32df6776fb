//! P4Info from a loaded nicflow program: the controller's map of the
//! program (tables, keys, actions, parameters, counters, meters, registers
//! with their ids and widths), generated from `nicflow_p4::Pipeline`'s
//! introspection instead of by p4c, so that a program given to nicflow as
//! P4-16 source can be driven over P4Runtime without a compiler. Names,
//! widths and match kinds follow p4c's P4Info (ids are nicflow's stable
//! ids; a controller's own ids are adopted by the daemon target). Also the
//! protobuf text format of P4Info (what p4runtime-shell's `--config` reads),
//! over the descriptors the crate is generated from.

use std::collections::{BTreeMap, HashMap};

use nicflow_p4::runtime::{ExternKind, MatchKind, TableInfo};
use nicflow_p4::Pipeline;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage};
use thiserror::Error;

use crate::proto::p4::config::v1 as cfg;

/// The FileDescriptorSet build.rs generated the messages from.
const FDS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/p4runtime.fds"));
const P4INFO_MESSAGE: &str = "p4.config.v1.P4Info";

/// Why a P4Info could not be printed or parsed as text.
#[derive(Debug, Error)]
pub enum TextError {
    #[error("P4Runtime descriptors: {0}")]
    Descriptors(String),
    #[error("P4Info text: {0}")]
    Parse(String),
    #[error("P4Info: {0}")]
    Decode(#[from] prost::DecodeError),
}

fn p4info_descriptor() -> Result<prost_reflect::MessageDescriptor, TextError> {
    let pool = DescriptorPool::decode(FDS).map_err(|e| TextError::Descriptors(e.to_string()))?;
    pool.get_message_by_name(P4INFO_MESSAGE)
        .ok_or_else(|| TextError::Descriptors(format!("no message {P4INFO_MESSAGE}")))
}

/// `info` in protobuf text format as p4c writes `.p4info.txtpb` (one
/// `field { ... }` block per repeated message, two-space indents, with the
/// `proto-file`/`proto-message` header lines).
pub fn to_text(info: &cfg::P4Info) -> Result<String, TextError> {
    let desc = p4info_descriptor()?;
    let msg = DynamicMessage::decode(desc, info.encode_to_vec().as_slice())?;
    let mut out =
        format!("# proto-file: p4/config/v1/p4info.proto\n# proto-message: {P4INFO_MESSAGE}\n\n");
    write_message(&mut out, &msg, 0);
    Ok(out)
}

fn write_message(out: &mut String, msg: &DynamicMessage, depth: usize) {
    for (field, value) in msg.fields() {
        write_field(out, &field, value, depth);
    }
}

fn write_field(
    out: &mut String,
    field: &prost_reflect::FieldDescriptor,
    value: &prost_reflect::Value,
    depth: usize,
) {
    use prost_reflect::Value as V;
    let pad = "  ".repeat(depth);
    match value {
        V::List(items) => {
            for v in items {
                write_field(out, field, v, depth);
            }
        }
        V::Map(entries) => {
            let mut entries: Vec<_> = entries.iter().collect();
            entries.sort_by_key(|(k, _)| format!("{k:?}"));
            for (k, v) in entries {
                out.push_str(&format!("{pad}{} {{\n", field.name()));
                let key = prost_reflect::Value::from(k.clone());
                out.push_str(&format!("{pad}  key: {}\n", scalar(&key, None)));
                match v {
                    V::Message(m) => {
                        out.push_str(&format!("{pad}  value {{\n"));
                        write_message(out, m, depth + 2);
                        out.push_str(&format!("{pad}  }}\n"));
                    }
                    other => out.push_str(&format!("{pad}  value: {}\n", scalar(other, None))),
                }
                out.push_str(&format!("{pad}}}\n"));
            }
        }
        V::Message(m) => {
            out.push_str(&format!("{pad}{} {{\n", field.name()));
            write_message(out, m, depth + 1);
            out.push_str(&format!("{pad}}}\n"));
        }
        other => out.push_str(&format!(
            "{pad}{}: {}\n",
            field.name(),
            scalar(other, field.kind().as_enum())
        )),
    }
}

/// A scalar field value in text format (strings and bytes C-escaped,
/// enums by name).
fn scalar(v: &prost_reflect::Value, en: Option<&prost_reflect::EnumDescriptor>) -> String {
    use prost_reflect::Value as V;
    fn quote(bytes: &[u8]) -> String {
        let mut s = String::from("\"");
        for &b in bytes {
            match b {
                b'"' => s.push_str("\\\""),
                b'\\' => s.push_str("\\\\"),
                b'\n' => s.push_str("\\n"),
                0x20..=0x7e => s.push(b as char),
                _ => s.push_str(&format!("\\{b:03o}")),
            }
        }
        s.push('"');
        s
    }
    match v {
        V::Bool(b) => b.to_string(),
        V::I32(n) => n.to_string(),
        V::I64(n) => n.to_string(),
        V::U32(n) => n.to_string(),
        V::U64(n) => n.to_string(),
        V::F32(n) => n.to_string(),
        V::F64(n) => n.to_string(),
        V::String(s) => quote(s.as_bytes()),
        V::Bytes(b) => quote(b),
        V::EnumNumber(n) => en
            .and_then(|e| e.get_value(*n))
            .map_or_else(|| n.to_string(), |ev| ev.name().to_string()),
        V::Message(_) | V::List(_) | V::Map(_) => String::new(),
    }
}

/// Parses a P4Info in protobuf text format (p4c's `.p4info.txtpb`).
pub fn from_text(text: &str) -> Result<cfg::P4Info, TextError> {
    let desc = p4info_descriptor()?;
    let msg = DynamicMessage::parse_text_format(desc, text)
        .map_err(|e| TextError::Parse(e.to_string()))?;
    Ok(cfg::P4Info::decode(msg.encode_to_vec().as_slice())?)
}

/// The P4Runtime name of a key element: its `@name` when it has one (as p4c
/// does), else the expression as written.
pub fn key_name(k: &nicflow_p4::runtime::KeyInfo) -> &str {
    k.annotated_name.as_deref().unwrap_or(&k.name)
}

fn match_type(k: &MatchKind) -> Option<cfg::match_field::Match> {
    use cfg::match_field::{Match, MatchType as M};
    let t = match k {
        MatchKind::Exact => M::Exact,
        MatchKind::Lpm => M::Lpm,
        MatchKind::Ternary => M::Ternary,
        MatchKind::Range => M::Range,
        MatchKind::Optional => M::Optional,
        MatchKind::Other(name) => return Some(Match::OtherMatchType(name.clone())),
    };
    Some(Match::MatchType(t as i32))
}

/// Shortest dotted suffixes that are unique among `names` (p4c's aliases).
fn aliases<'a>(names: impl Iterator<Item = &'a str>) -> HashMap<String, String> {
    let names: Vec<&str> = names.collect();
    let mut suffix_count: HashMap<String, usize> = HashMap::new();
    for n in &names {
        let parts: Vec<&str> = n.split('.').collect();
        for i in 0..parts.len() {
            *suffix_count.entry(parts[i..].join(".")).or_default() += 1;
        }
    }
    names
        .iter()
        .map(|n| {
            let parts: Vec<&str> = n.split('.').collect();
            let alias = (0..parts.len())
                .rev()
                .map(|i| parts[i..].join("."))
                .find(|s| suffix_count.get(s) == Some(&1))
                .unwrap_or_else(|| n.to_string());
            (n.to_string(), alias)
        })
        .collect()
}

fn preamble(id: u32, name: &str, alias: &HashMap<String, String>) -> Option<cfg::Preamble> {
    Some(cfg::Preamble {
        id,
        name: name.to_string(),
        alias: alias.get(name).cloned().unwrap_or_else(|| name.to_string()),
        ..Default::default()
    })
}

/// The P4Info of `pipeline`: its tables (declaration order), the actions
/// they use (with `@tableonly`/`@defaultonly` scopes), counters, direct
/// counters, meters, direct meters and registers, the controller packet
/// metadata (`@controller_header` headers), and the architecture. Digests,
/// value sets and action profiles are not generated (the interpreter does
/// not expose them).
pub fn generate(pipeline: &Pipeline) -> cfg::P4Info {
    let tables: Vec<TableInfo> = pipeline
        .tables()
        .into_iter()
        .map(|t| pipeline.table_info(&t.name).unwrap_or(t))
        .collect();
    let externs = pipeline.externs();
    let mut actions: BTreeMap<u32, nicflow_p4::runtime::ActionInfo> = BTreeMap::new();
    for t in &tables {
        for a in &t.actions {
            actions.entry(a.id).or_insert_with(|| a.clone());
        }
    }
    let mut names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    names.extend(actions.values().map(|a| a.name.as_str()));
    names.extend(externs.iter().map(|e| e.name.as_str()));
    let alias = aliases(names.into_iter());
    let extern_id = |name: &Option<String>| {
        name.as_ref()
            .and_then(|n| externs.iter().find(|e| &e.name == n))
            .map(|e| e.id)
    };

    let mut info = cfg::P4Info {
        pkg_info: Some(cfg::PkgInfo {
            arch: match pipeline.arch() {
                nicflow_p4::Arch::V1Model => "v1model".into(),
                nicflow_p4::Arch::Psa => "psa".into(),
                nicflow_p4::Arch::Pna | nicflow_p4::Arch::PnaTc => "pna".into(),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    for t in &tables {
        use cfg::action_ref::Scope;
        let default_id = t
            .actions
            .iter()
            .find(|a| a.name == t.default_action.0)
            .map(|a| a.id);
        let default_args = t
            .actions
            .iter()
            .find(|a| a.name == t.default_action.0)
            .map(|a| {
                a.params
                    .iter()
                    .zip(&t.default_action.1)
                    .map(|(p, v)| cfg::table_action_call::Argument {
                        param_id: p.id,
                        value: canonical(v.to_bytes_be()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        info.tables.push(cfg::Table {
            preamble: preamble(t.id, &t.name, &alias),
            match_fields: t
                .keys
                .iter()
                .map(|k| cfg::MatchField {
                    id: k.id,
                    name: key_name(k).to_string(),
                    bitwidth: k.width as i32,
                    r#match: match_type(&k.match_kind),
                    ..Default::default()
                })
                .collect(),
            action_refs: t
                .actions
                .iter()
                .map(|a| cfg::ActionRef {
                    id: a.id,
                    scope: if a.table_only {
                        Scope::TableOnly as i32
                    } else if a.default_only {
                        Scope::DefaultOnly as i32
                    } else {
                        Scope::TableAndDefault as i32
                    },
                    ..Default::default()
                })
                .collect(),
            const_default_action_id: if t.const_default {
                default_id.unwrap_or(0)
            } else {
                0
            },
            initial_default_action: default_id.map(|id| cfg::TableActionCall {
                action_id: id,
                arguments: default_args,
            }),
            direct_resource_ids: extern_id(&t.direct_counter)
                .into_iter()
                .chain(extern_id(&t.direct_meter))
                .collect(),
            size: i64::try_from(t.size).unwrap_or(i64::MAX),
            idle_timeout_behavior: if t.idle_timeout {
                cfg::table::IdleTimeoutBehavior::NotifyControl as i32
            } else {
                cfg::table::IdleTimeoutBehavior::NoTimeout as i32
            },
            is_const_table: t.is_const,
            ..Default::default()
        });
    }
    for a in actions.values() {
        info.actions.push(cfg::Action {
            preamble: preamble(a.id, &a.name, &alias),
            params: a
                .params
                .iter()
                .map(|p| cfg::action::Param {
                    id: p.id,
                    name: p.name.clone(),
                    bitwidth: p.width as i32,
                    ..Default::default()
                })
                .collect(),
        });
    }
    let table_id = |name: &Option<String>| {
        name.as_ref()
            .and_then(|n| tables.iter().find(|t| &t.name == n))
            .map_or(0, |t| t.id)
    };
    // The interpreter counts both packets and bytes; meter units are not exposed.
    let both = Some(cfg::CounterSpec {
        unit: cfg::counter_spec::Unit::Both as i32,
    });
    let size = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
    for e in &externs {
        let pre = preamble(e.id, &e.name, &alias);
        match e.kind {
            ExternKind::Counter => info.counters.push(cfg::Counter {
                preamble: pre,
                spec: both,
                size: size(e.size),
                ..Default::default()
            }),
            ExternKind::DirectCounter => info.direct_counters.push(cfg::DirectCounter {
                preamble: pre,
                spec: both,
                direct_table_id: table_id(&e.table),
            }),
            ExternKind::Meter => info.meters.push(cfg::Meter {
                preamble: pre,
                spec: Some(cfg::MeterSpec::default()),
                size: size(e.size),
                ..Default::default()
            }),
            ExternKind::DirectMeter => info.direct_meters.push(cfg::DirectMeter {
                preamble: pre,
                spec: Some(cfg::MeterSpec::default()),
                direct_table_id: table_id(&e.table),
            }),
            ExternKind::Register => info.registers.push(cfg::Register {
                preamble: pre,
                type_spec: Some(bitstring(e.width)),
                size: i32::try_from(e.size).unwrap_or(i32::MAX),
                ..Default::default()
            }),
        }
    }
    // Controller headers: id prefix 0x04 (P4Ids' CONTROLLER_HEADER), named
    // by the annotation as p4c names them; fields numbered from 1.
    for h in pipeline.controller_headers() {
        info.controller_packet_metadata
            .push(cfg::ControllerPacketMetadata {
                preamble: Some(cfg::Preamble {
                    id: nicflow_p4::runtime::stable_id(0x04, &h.name),
                    name: h.name.clone(),
                    alias: h.name.clone(),
                    annotations: vec![format!("@controller_header(\"{}\")", h.name)],
                    ..Default::default()
                }),
                metadata: h
                    .fields
                    .iter()
                    .enumerate()
                    .map(|(i, (n, w))| cfg::controller_packet_metadata::Metadata {
                        id: i as u32 + 1,
                        name: n.clone(),
                        bitwidth: *w as i32,
                        ..Default::default()
                    })
                    .collect(),
            });
    }
    info
}

fn bitstring(width: u32) -> cfg::P4DataTypeSpec {
    use cfg::p4_bitstring_like_type_spec::TypeSpec as B;
    cfg::P4DataTypeSpec {
        type_spec: Some(cfg::p4_data_type_spec::TypeSpec::Bitstring(
            cfg::P4BitstringLikeTypeSpec {
                type_spec: Some(B::Bit(cfg::P4BitTypeSpec {
                    bitwidth: width as i32,
                })),
                ..Default::default()
            },
        )),
    }
}

/// P4Runtime's canonical byte string: no leading zero bytes (zero is one 0 byte).
pub(crate) fn canonical(mut v: Vec<u8>) -> Vec<u8> {
    while v.len() > 1 && v[0] == 0 {
        v.remove(0);
    }
    if v.is_empty() {
        v.push(0);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_shortest_unique_suffixes() {
        let a = aliases(["A.t", "B.t", "A.u", "NoAction"].into_iter());
        assert_eq!(a["A.t"], "A.t");
        assert_eq!(a["A.u"], "u");
        assert_eq!(a["NoAction"], "NoAction");
    }

    #[test]
    fn text_round_trip() {
        let info = cfg::P4Info {
            pkg_info: Some(cfg::PkgInfo {
                arch: "v1model".into(),
                ..Default::default()
            }),
            tables: vec![cfg::Table {
                preamble: Some(cfg::Preamble {
                    id: 7,
                    name: "c.t".into(),
                    ..Default::default()
                }),
                match_fields: vec![cfg::MatchField {
                    id: 1,
                    name: "hdr.x".into(),
                    bitwidth: 9,
                    r#match: match_type(&MatchKind::Lpm),
                    ..Default::default()
                }],
                size: 10,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = to_text(&info).unwrap();
        assert!(text.contains("match_type: LPM"), "{text}");
        assert_eq!(from_text(&text).unwrap(), info);
    }
}
