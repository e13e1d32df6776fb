//! `nicflow p4 ...`: a P4 program as a bridge's slow path.
//!
//! `load` reads the program (a path on this host, or its text as
//! P4Runtime sends it), checks it and puts the bridge in P4 mode: from
//! then on the packets that miss the caches run through the program, and
//! the decisions are cached as datapath flows (see
//! `nicflow_dataplane::p4`). The other verbs fill and read the program's
//! tables and externs; a change revalidates only the cached flows of the
//! tables it touched. Values may name ports: a bridge port by name, or a
//! VF as Netronome's RTE writes it (`v0.N`: VF index N), which resolve to
//! the port numbers the program sees (the bridge's OpenFlow numbers).
//! Every verb changes nothing when it fails.

use super::{Switch, SwitchError};
use crate::control::proto::{P4Op, Response};
use nicflow_dataplane::p4::{P4Path, PortMap};
use nicflow_p4::entries;
use nicflow_p4::{Arch, Pipeline};
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;

fn p4err(e: impl std::fmt::Display) -> SwitchError {
    SwitchError::P4(e.to_string())
}

fn hex(v: &num_bigint::BigUint) -> String {
    format!("0x{}", v.to_str_radix(16))
}

impl Switch {
    /// Port names the program's control plane may use, with the numbers
    /// the program sees.
    fn p4_names(&mut self, bridge: &str) -> Result<Vec<(String, u64)>, SwitchError> {
        let br = self.bridge(bridge)?;
        let mut names: Vec<(String, u64)> = br
            .port_map()
            .0
            .iter()
            .map(|(n, no)| (n.clone(), u64::from(*no)))
            .collect();
        let ports = names.clone();
        if let Some(bc) = self.config.bridge(bridge) {
            for vf in &bc.vfs {
                if let Some((_, no)) = ports.iter().find(|(n, _)| *n == vf.representor) {
                    names.push((format!("v0.{}", vf.index), *no));
                }
            }
        }
        Ok(names)
    }

    pub(super) fn p4(&mut self, bridge: String, op: P4Op) -> Result<Response, SwitchError> {
        let names = self.p4_names(&bridge)?;
        let resolve = move |n: &str| names.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        let br = self.bridge(&bridge)?;
        match op {
            P4Op::Load {
                path,
                source,
                arch,
                include,
                cpu_port,
            } => {
                let arch = arch.map(|a| a.parse::<Arch>()).transpose().map_err(p4err)?;
                // The CPU port must not be a bridge port: its copies would
                // go to the controller, its frames look like PacketOuts.
                if let Some(cpu) = cpu_port {
                    if let Some((_, name, _)) = br.of_ports().into_iter().find(|p| p.0 == cpu) {
                        return Err(p4err(format!(
                            "cpu port {cpu} is bridge port {name}: choose a number no port has"
                        )));
                    }
                }
                let dirs: Vec<PathBuf> = include.iter().map(PathBuf::from).collect();
                let (pipeline, what) = match (path, source) {
                    (Some(p), None) => (
                        Pipeline::load(std::path::Path::new(&p), &dirs, arch).map_err(p4err)?,
                        p,
                    ),
                    (None, Some(text)) => (
                        nicflow_p4::source::load_source("p4runtime.p4", &text, &dirs, arch)
                            .map_err(p4err)?,
                        "p4runtime".to_string(),
                    ),
                    _ => return Err(p4err("p4 load: give a path or the program text")),
                };
                let arch = pipeline.arch();
                let n_tables = pipeline.tables().len();
                let mut path = P4Path::new(pipeline, what.clone(), PortMap::identity());
                path.set_cpu_port(cpu_port);
                br.p4_load(path);
                Ok(Response::ok(
                    format!(
                        "{bridge}: P4 program {what} ({arch}, {n_tables} tables) is the slow path"
                    ),
                    json!({"arch": arch.to_string(), "tables": n_tables}),
                ))
            }
            P4Op::Unload => {
                if !br.p4_unload() {
                    return Err(p4err(format!("bridge {bridge} has no P4 program")));
                }
                Ok(Response::ok(
                    format!("{bridge}: back to the OpenFlow tables"),
                    json!({}),
                ))
            }
            P4Op::Info => {
                let p4 = br.p4().ok_or_else(|| no_program(&bridge))?;
                let pl = p4.pipeline();
                let mut text = format!("program {} ({})\n", p4.source, pl.arch());
                let mut tables = Vec::new();
                for t in pl.tables() {
                    let keys: Vec<String> = t
                        .keys
                        .iter()
                        .map(|k| format!("{}:{}<{}>", k.name, k.match_kind.name(), k.width))
                        .collect();
                    let acts: Vec<String> = t
                        .actions
                        .iter()
                        .map(|a| {
                            let ps: Vec<String> = a
                                .params
                                .iter()
                                .map(|p| format!("{}<{}>", p.name, p.width))
                                .collect();
                            format!("{}({})", a.name, ps.join(", "))
                        })
                        .collect();
                    let _ = writeln!(
                        text,
                        "table {} size:{} key:[{}] actions:[{}]{}",
                        t.name,
                        t.size,
                        keys.join(" "),
                        acts.join(" "),
                        if t.add_on_miss { " add_on_miss" } else { "" }
                    );
                    tables.push(json!({
                        "name": t.name, "id": t.id, "size": t.size,
                        "keys": t.keys.iter().map(|k| json!({"name": k.name, "match": k.match_kind.name(), "width": k.width})).collect::<Vec<_>>(),
                        "actions": t.actions.iter().map(|a| json!({"name": a.name, "params": a.params.iter().map(|p| json!({"name": p.name, "width": p.width})).collect::<Vec<_>>()})).collect::<Vec<_>>(),
                    }));
                }
                let mut externs = Vec::new();
                for e in pl.externs() {
                    let _ = writeln!(text, "{:?} {} size:{}", e.kind, e.name, e.size);
                    externs.push(
                        json!({"name": e.name, "kind": format!("{:?}", e.kind), "size": e.size}),
                    );
                }
                let slow = p4.slow_path_reasons();
                if !slow.is_empty() {
                    let _ = writeln!(text, "uncached runs by reason:");
                    for (r, n) in slow {
                        let _ = writeln!(text, "  {r}: {n}");
                    }
                }
                let s = &p4.stats;
                let _ = writeln!(
                    text,
                    "runs:{} cached:{} errors:{} unknown_port:{}",
                    s.runs, s.cached, s.errors, s.unknown_port
                );
                // Revalidations after table changes: cached flows kept
                // (no change could alter their run) and removed.
                let _ = writeln!(text, "revalidation kept:{} removed:{}", s.kept, s.stale);
                if let Some(cpu) = p4.cpu_port() {
                    let _ = writeln!(
                        text,
                        "cpu_port:{cpu} packet_in:{} packet_in_dropped:{}",
                        s.packet_in, s.packet_in_dropped
                    );
                }
                Ok(Response::ok(
                    text,
                    json!({"arch": pl.arch().to_string(), "tables": tables, "externs": externs,
                           "slow_path": slow, "runs": s.runs, "cached": s.cached, "errors": s.errors,
                           "revalidation_kept": s.kept, "revalidation_removed": s.stale,
                           "cpu_port": p4.cpu_port(), "packet_in": s.packet_in,
                           "packet_in_dropped": s.packet_in_dropped}),
                ))
            }
            P4Op::TableAdd {
                table,
                words,
                idle_timeout_ns,
            } => {
                let id = br
                    .p4_change(|p4| {
                        p4.change_table(&table, |pl, name| {
                            let info = pl.table_info(name).map_err(|e| e.to_string())?;
                            let spec = entries::from_cli(&info, &words, &resolve)?;
                            let id = pl.table_add(name, spec).map_err(|e| e.to_string())?;
                            if let Some(ttl) = idle_timeout_ns {
                                // Refused: the entry goes again, nothing changed.
                                if let Err(e) = pl.set_entry_idle_timeout(name, id, Some(ttl)) {
                                    let _ = pl.table_delete(name, id);
                                    return Err(e.to_string());
                                }
                            }
                            Ok(id)
                        })
                    })
                    .ok_or_else(|| no_program(&bridge))?
                    .map_err(p4err)?;
                Ok(Response::ok(format!("entry {id} added"), json!({"id": id})))
            }
            P4Op::TableModify { table, words } => {
                br.p4_change(|p4| {
                    p4.change_table(&table, |pl, name| {
                        let (id, rest) = words.split_first().ok_or("missing entry id")?;
                        let id: u64 = id.parse().map_err(|_| format!("bad entry id `{id}`"))?;
                        let (action, params) = rest.split_first().ok_or("missing action")?;
                        let params = params
                            .iter()
                            .map(|w| entries::parse_value(w, &resolve).map(|v| (String::new(), v)))
                            .collect::<Result<Vec<_>, _>>()?;
                        pl.table_modify(name, id, action, params)
                            .map_err(|e| e.to_string())
                    })
                })
                .ok_or_else(|| no_program(&bridge))?
                .map_err(p4err)?;
                Ok(Response::ok("entry modified", json!({})))
            }
            P4Op::TableDel { table, id } => {
                br.p4_change(|p4| {
                    p4.change_table(&table, |pl, name| {
                        pl.table_delete(name, id).map_err(|e| e.to_string())
                    })
                })
                .ok_or_else(|| no_program(&bridge))?
                .map_err(p4err)?;
                Ok(Response::ok(format!("entry {id} deleted"), json!({})))
            }
            P4Op::TableDelMatch { table, words } => {
                let id = br
                    .p4_change(|p4| {
                        p4.change_table(&table, |pl, name| {
                            let info = pl.table_info(name).map_err(|e| e.to_string())?;
                            let act = info
                                .actions
                                .first()
                                .map(|a| a.name.clone())
                                .ok_or("table without actions")?;
                            let mut w = vec![act];
                            w.extend(words.iter().cloned());
                            let spec = entries::from_cli(&info, &w, &resolve)?;
                            let id = find_entry(pl, name, &spec)?;
                            pl.table_delete(name, id).map_err(|e| e.to_string())?;
                            Ok(id)
                        })
                    })
                    .ok_or_else(|| no_program(&bridge))?
                    .map_err(p4err)?;
                Ok(Response::ok(
                    format!("entry {id} deleted"),
                    json!({"id": id}),
                ))
            }
            P4Op::TableModifyMatch {
                table,
                words,
                idle_timeout_ns,
            } => {
                let id = br
                    .p4_change(|p4| {
                        p4.change_table(&table, |pl, name| {
                            let info = pl.table_info(name).map_err(|e| e.to_string())?;
                            let spec = entries::from_cli(&info, &words, &resolve)?;
                            let id = find_entry(pl, name, &spec)?;
                            // The timeout first: refused, nothing changed.
                            if let Some(ttl) = idle_timeout_ns {
                                if ttl > 0 && !info.idle_timeout {
                                    return Err(format!(
                                        "table {name}: the table does not support idle timeouts"
                                    ));
                                }
                            }
                            pl.table_modify(name, id, &spec.action, spec.params)
                                .map_err(|e| e.to_string())?;
                            if let Some(ttl) = idle_timeout_ns {
                                pl.set_entry_idle_timeout(name, id, Some(ttl))
                                    .map_err(|e| e.to_string())?;
                            }
                            Ok(id)
                        })
                    })
                    .ok_or_else(|| no_program(&bridge))?
                    .map_err(p4err)?;
                Ok(Response::ok(
                    format!("entry {id} modified"),
                    json!({"id": id}),
                ))
            }
            P4Op::SetDefault { table, words } => {
                br.p4_change(|p4| {
                    p4.change_table(&table, |pl, name| {
                        let (action, params) = words.split_first().ok_or("missing action")?;
                        let params =
                            params
                                .iter()
                                .map(|w| match w.split_once('=') {
                                    Some((n, v)) => entries::parse_value(v, &resolve)
                                        .map(|v| (n.to_string(), v)),
                                    None => entries::parse_value(w, &resolve)
                                        .map(|v| (String::new(), v)),
                                })
                                .collect::<Result<Vec<_>, _>>()?;
                        pl.set_default(name, action, params)
                            .map_err(|e| e.to_string())
                    })
                })
                .ok_or_else(|| no_program(&bridge))?
                .map_err(p4err)?;
                Ok(Response::ok("default action set", json!({})))
            }
            P4Op::TableDump { table } => {
                // Hits of cached flows reach the entries first.
                br.sync_offload();
                br.p4_push_stats();
                let p4 = br.p4().ok_or_else(|| no_program(&bridge))?;
                let pl = p4.pipeline();
                let now_ns = p4.now_ns(super::now());
                let tables: Vec<String> = match table {
                    Some(t) => vec![pl.table_info(&t).map_err(p4err)?.name],
                    None => pl.tables().into_iter().map(|t| t.name).collect(),
                };
                let mut text = String::new();
                let mut data = Vec::new();
                for t in tables {
                    let idle_table = pl.table_info(&t).map_err(p4err)?.idle_timeout;
                    for e in pl.table_entries(&t).map_err(p4err)? {
                        let keys: Vec<String> = e.spec.keys.iter().map(key_text).collect();
                        let params: Vec<String> = e
                            .spec
                            .params
                            .iter()
                            .map(|(n, v)| format!("{n}={}", hex(v)))
                            .collect();
                        let _ = writeln!(
                            text,
                            "{t} entry {}: [{}] -> {}({}){}{} packets:{} bytes:{}",
                            e.id,
                            keys.join(" "),
                            e.spec.action,
                            params.join(", "),
                            e.spec
                                .priority
                                .map(|p| format!(" priority:{p}"))
                                .unwrap_or_default(),
                            if e.is_const { " const" } else { "" },
                            e.packets,
                            e.bytes
                        );
                        data.push(json!({"table": t, "id": e.id, "keys": keys, "action": e.spec.action,
                            "params": e.spec.params.iter().map(|(n, v)| json!({"name": n, "value": hex(v)})).collect::<Vec<_>>(),
                            "priority": e.spec.priority, "const": e.is_const,
                            "packets": e.packets, "bytes": e.bytes,
                            // In force: the entry's own, else the table's.
                            "idle_timeout_ns": pl.entry_idle_timeout(&t, e.id).or(idle_table.then(|| pl.idle_timeout())),
                            "elapsed_ns": e.last_hit_ns.map(|h| now_ns.saturating_sub(h))}));
                    }
                }
                Ok(Response::ok(text, json!(data)))
            }
            P4Op::CounterRead { name, index } => {
                br.sync_offload();
                br.p4_push_stats();
                let p4 = br.p4().ok_or_else(|| no_program(&bridge))?;
                let pl = p4.pipeline();
                let range = cells(pl, &name, index, "counter")?;
                let mut text = String::new();
                let mut data = Vec::new();
                for i in range {
                    let (p, b) = pl.counter_read(&name, i).map_err(p4err)?;
                    if index.is_some() || p > 0 {
                        let _ = writeln!(text, "{name}[{i}] packets:{p} bytes:{b}");
                        data.push(json!({"index": i, "packets": p, "bytes": b}));
                    }
                }
                Ok(Response::ok(text, json!(data)))
            }
            P4Op::RegisterRead { name, index } => {
                let p4 = br.p4().ok_or_else(|| no_program(&bridge))?;
                let pl = p4.pipeline();
                let range = cells(pl, &name, index, "register")?;
                let mut text = String::new();
                let mut data = Vec::new();
                for i in range {
                    let v = pl.register_read(&name, i).map_err(p4err)?;
                    let _ = writeln!(text, "{name}[{i}] = {}", hex(&v));
                    data.push(json!({"index": i, "value": hex(&v)}));
                }
                Ok(Response::ok(text, json!(data)))
            }
            P4Op::RegisterWrite { name, index, value } => {
                let v = entries::parse_value(&value, &resolve).map_err(p4err)?;
                br.p4_change(|p4| {
                    // Register state is per packet: no cached flow read it.
                    p4.pipeline_mut().register_write(&name, index, v)
                })
                .ok_or_else(|| no_program(&bridge))?
                .map_err(p4err)?;
                Ok(Response::ok("register written", json!({})))
            }
            P4Op::LoadConfig { json: text } => {
                let p4 = br.p4().ok_or_else(|| no_program(&bridge))?;
                let pl = p4.pipeline();
                let info = |t: &str| pl.table_info(t).map_err(|e| e.to_string());
                let list = entries::from_user_config(&text, &info, &resolve).map_err(p4err)?;
                // All or nothing: entries added so far go again on error.
                let n = list.len();
                br.p4_change(|p4| {
                    let mut added: Vec<(String, u64)> = Vec::new();
                    // Defaults replaced so far, with what they were.
                    let mut defaults: Vec<(String, String, Vec<num_bigint::BigUint>)> = Vec::new();
                    for (table, spec, is_default) in list {
                        if is_default {
                            if let Ok(info) = p4.pipeline().table_info(&table) {
                                let (a, params) = info.default_action;
                                defaults.push((info.name, a, params));
                            }
                        }
                        let r = p4.change_table(&table, |pl, name| {
                            if is_default {
                                pl.set_default(name, &spec.action, spec.params.clone())
                                    .map(|_| None)
                                    .map_err(|e| e.to_string())
                            } else {
                                pl.table_add(name, spec.clone())
                                    .map(Some)
                                    .map_err(|e| e.to_string())
                            }
                        });
                        match r {
                            Ok(Some(id)) => added.push((table, id)),
                            Ok(None) => {}
                            Err(e) => {
                                for (t, id) in added {
                                    let _ = p4.change_table(&t, |pl, name| {
                                        pl.table_delete(name, id).map_err(|e| e.to_string())
                                    });
                                }
                                for (t, a, params) in defaults.into_iter().rev() {
                                    let params =
                                        params.into_iter().map(|v| (String::new(), v)).collect();
                                    let _ = p4.change_table(&t, |pl, name| {
                                        pl.set_default(name, &a, params).map_err(|e| e.to_string())
                                    });
                                }
                                return Err(format!("{table}: {e}"));
                            }
                        }
                    }
                    Ok(())
                })
                .ok_or_else(|| no_program(&bridge))?
                .map_err(p4err)?;
                Ok(Response::ok(
                    format!("{n} rule(s) loaded"),
                    json!({"rules": n}),
                ))
            }
            P4Op::TakeIdle => {
                let list = br
                    .p4_mut()
                    .map(|p4| p4.take_idle_notifications())
                    .ok_or_else(|| no_program(&bridge))?;
                let data: Vec<_> = list
                    .iter()
                    .map(|(t, id)| json!({"table": t, "id": id}))
                    .collect();
                Ok(Response::ok(
                    format!("{} idle entries", list.len()),
                    json!(data),
                ))
            }
            P4Op::TakePacketIns { max } => {
                let frames = br
                    .p4_mut()
                    .map(|p4| p4.take_packet_ins(max))
                    .ok_or_else(|| no_program(&bridge))?;
                let data: Vec<_> = frames
                    .iter()
                    .map(|f| json!({"data": nicflow_api::proto::frame_to_hex(f)}))
                    .collect();
                Ok(Response::ok(
                    format!("{} packet-ins", frames.len()),
                    json!(data),
                ))
            }
            P4Op::Inject { data } => {
                let bytes = unhex(&data, "inject")?;
                let now = super::now();
                let outputs = br
                    .p4_change(|p4| p4.inject(&bytes, now))
                    .ok_or_else(|| no_program(&bridge))?
                    .map_err(p4err)?;
                // Each copy leaves as the program built it, as an OpenFlow
                // PACKET_OUT from the controller would.
                const OFPP_CONTROLLER: u32 = 0xffff_fffd;
                let mut sent = 0;
                for (port, frame) in &outputs {
                    if br.packet_out(
                        OFPP_CONTROLLER,
                        frame,
                        &[nicflow_flow::Action::Output(*port)],
                        now,
                    ) {
                        sent += 1;
                    }
                }
                Ok(Response::ok(
                    format!("{sent} copies sent"),
                    json!({"sent": sent}),
                ))
            }
            P4Op::PacketOut { port, data } => {
                let bytes = unhex(&data, "packet-out")?;
                // From the controller's port, as an OpenFlow PACKET_OUT.
                const OFPP_CONTROLLER: u32 = 0xffff_fffd;
                if !br.packet_out(
                    OFPP_CONTROLLER,
                    &bytes,
                    &[nicflow_flow::Action::Output(port)],
                    super::now(),
                ) {
                    return Err(p4err("packet-out: the frame does not parse"));
                }
                Ok(Response::ok("sent", json!({})))
            }
        }
    }
}

/// A frame given in hex over the control socket.
fn unhex(data: &str, what: &str) -> Result<Vec<u8>, SwitchError> {
    nicflow_api::proto::frame_from_hex(data)
        .ok_or_else(|| p4err(format!("{what}: data is not hex")))
}

/// The entry of `table` with the same match and priority as `spec`.
fn find_entry(pl: &Pipeline, table: &str, spec: &nicflow_p4::EntrySpec) -> Result<u64, String> {
    pl.table_entries(table)
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|e| !e.is_const && e.spec.keys == spec.keys && e.spec.priority == spec.priority)
        .map(|e| e.id)
        .ok_or_else(|| format!("table {table}: no entry with this match"))
}

/// The cells a counter or register read covers: `index`, or all of the
/// extern's cells.
fn cells(
    pl: &Pipeline,
    name: &str,
    index: Option<u64>,
    kind: &str,
) -> Result<std::ops::Range<u64>, SwitchError> {
    let size = pl
        .externs()
        .into_iter()
        .find(|e| e.name == name || e.name.ends_with(&format!(".{name}")))
        .map(|e| e.size)
        .ok_or_else(|| p4err(format!("no {kind} named {name}")))?;
    Ok(match index {
        Some(i) => i..i + 1,
        None => 0..size,
    })
}

fn no_program(bridge: &str) -> SwitchError {
    p4err(format!(
        "bridge {bridge} has no P4 program (nicflow p4 load {bridge} PROG.p4)"
    ))
}

fn key_text(k: &nicflow_p4::KeyMatch) -> String {
    use nicflow_p4::KeyMatch as K;
    match k {
        K::Exact(v) => hex(v),
        K::Lpm(v, l) => format!("{}/{l}", hex(v)),
        K::Ternary(v, m) => format!("{}&&&{}", hex(v), hex(m)),
        K::Range(a, b) => format!("{}->{}", hex(a), hex(b)),
        K::Optional(Some(v)) => hex(v),
        K::Optional(None) | K::Any => "*".into(),
    }
}
