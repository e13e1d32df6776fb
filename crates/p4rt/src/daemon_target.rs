//! The P4Runtime target that drives a real nicflow bridge: each checked
//! P4Runtime request becomes one `P4Op` request to the nicflow daemon over
//! its control socket (the same requests as `nicflow p4 ...`), so a
//! controller fills the tables of the program that is the bridge's slow
//! path, and the daemon revalidates the cached datapath flows as it does for
//! the CLI. The program arrives as P4-16 source in the device config; the
//! P4Info is generated here from the same text (see [`crate::p4info_gen`]),
//! and a controller's own P4Info is adopted when it names the same objects
//! with the same widths (its ids then are the ones in force).
//!
//! Entries cross the socket in the CLI's word syntax (`entries::from_cli`:
//! `ACTION KEY... => name=VALUE... [priority N]`) and come back from
//! `TableDump` as key texts (`0x..`, `0x../LEN`, `0x..&&&0x..`,
//! `0x..->0x..`, `*`), which are parsed back into P4Runtime matches here.
//!
//! With a CPU port (`nicflow p4 runtime --cpu-port N`, BMv2's `--cpu-port`),
//! copies the program sends to port N are collected from the daemon (a poll
//! every few milliseconds while the program has a `packet_in` controller
//! header) and sent to the controllers as PacketIn, the `packet_in` header's
//! fields as metadata; a PacketOut's metadata become a `packet_out` header
//! in front of its payload, and the frame enters the program from port N.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use nicflow_api::proto::{P4Op, Request};
use num_bigint::BigUint;
use serde_json::Value;
use tokio::sync::broadcast;
use tonic::Status;

use crate::p4info::{preamble_name, P4InfoIndex};
use crate::proto::p4::config::v1 as cfg;
use crate::proto::p4::v1 as p4;
use crate::{P4RtTarget, PipelineMode, TargetEvent};
use p4::entity::Entity as E;

/// How often idle-timeout notifications are collected from the daemon.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// How often packet-ins are collected from the daemon when none were
/// waiting (a poll that found some polls again at once).
const PACKET_IN_POLL: Duration = Duration::from_millis(10);
/// Packet-ins taken from the daemon per request.
const PACKET_IN_BATCH: usize = 64;
/// Events (packet-ins, idle notifications) waiting for the controllers'
/// streams at most. Packet-ins are not taken from the daemon while half
/// of it is used, so a burst of them cannot push an idle notification out
/// (an entry reported once is not reported again until it is hit): they
/// wait in the daemon's queue, which drops and counts the excess.
const EVENTS: usize = 256;

/// The pipeline in force: the P4Info the controller uses (ids) and the
/// source it was generated from.
#[derive(Default)]
struct State {
    /// The P4Info in force (the client's when adopted, else ours).
    info: Option<cfg::P4Info>,
    index: P4InfoIndex,
    /// The program text last committed.
    source: Option<String>,
    /// Default entries set through this target, by table id (the daemon's
    /// dump does not list defaults).
    defaults: HashMap<u32, p4::TableEntry>,
    /// Some table has an idle timeout: poll the daemon for notifications.
    idle_tables: bool,
    /// The `packet_in` / `packet_out` controller headers of the P4Info in
    /// force (its metadata ids by field name), when it has them.
    packet_in: Option<(nicflow_p4::ControllerHeader, Vec<u32>)>,
    packet_out: Option<(nicflow_p4::ControllerHeader, Vec<u32>)>,
}

/// The controller header `name` of `info`: fields in P4Info order with
/// their widths, and their metadata ids.
fn controller_header(
    info: &cfg::P4Info,
    name: &str,
) -> Option<(nicflow_p4::ControllerHeader, Vec<u32>)> {
    let m = info
        .controller_packet_metadata
        .iter()
        .find(|m| preamble_name(&m.preamble) == name)?;
    let header = nicflow_p4::ControllerHeader {
        name: name.to_string(),
        type_name: String::new(),
        fields: m
            .metadata
            .iter()
            .map(|f| (f.name.clone(), f.bitwidth.max(0) as u32))
            .collect(),
    };
    Some((header, m.metadata.iter().map(|f| f.id).collect()))
}

/// A [`P4RtTarget`] that forwards to a nicflow daemon's bridge; see the
/// module documentation. Build it with [`DaemonTarget::new`].
pub struct DaemonTarget {
    /// The daemon's control socket (a path, or `@NAME`).
    pub socket: PathBuf,
    /// The bridge whose slow path the program becomes.
    pub bridge: String,
    /// `-I` directories for the program's includes (core.p4, v1model.p4, ...),
    /// used here and by the daemon (give absolute paths).
    pub include_dirs: Vec<PathBuf>,
    /// The programs' CPU port (PacketIn/PacketOut), if any.
    pub cpu_port: Option<u32>,
    state: Mutex<State>,
    events: broadcast::Sender<TargetEvent>,
}

fn st(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("nicflow daemon: {e}"))
}

/// A daemon error as the P4Runtime code that fits its message.
fn daemon_status(msg: &str) -> Status {
    if msg.contains("same key exists") {
        Status::already_exists(msg)
    } else if msg.contains("no entry") {
        Status::not_found(msg)
    } else if msg.contains("is full") {
        Status::resource_exhausted(msg)
    } else if msg.contains("has no P4 program") {
        Status::failed_precondition(msg)
    } else if msg.contains("const") {
        Status::permission_denied(msg)
    } else {
        Status::invalid_argument(msg)
    }
}

/// `0x` hex of a P4Runtime byte string (empty: 0).
fn hex(bytes: &[u8]) -> String {
    let v = BigUint::from_bytes_be(bytes);
    format!("0x{}", v.to_str_radix(16))
}

/// P4Runtime's canonical byte string of `v`.
fn canon(v: &BigUint) -> Vec<u8> {
    v.to_bytes_be()
}

fn parse_hex(t: &str) -> Option<BigUint> {
    let t = t.trim();
    let digits = t.strip_prefix("0x").unwrap_or(t);
    BigUint::parse_bytes(digits.as_bytes(), 16)
}

fn max_of(width: i32) -> BigUint {
    (BigUint::from(1u8) << usize::try_from(width).unwrap_or(0)) - BigUint::from(1u8)
}

/// A key text of the daemon's dump as a P4Runtime field match; `None` for a
/// don't-care (which P4Runtime leaves out).
fn field_match(f: &cfg::MatchField, text: &str) -> Result<Option<p4::FieldMatch>, String> {
    use cfg::match_field::MatchType as M;
    use p4::field_match::{Exact, FieldMatchType as F, Lpm, Optional, Range, Ternary};
    let bad = || format!("key {}: cannot read `{text}`", f.name);
    let t = text.trim();
    if t == "*" {
        return Ok(None);
    }
    let fm = match crate::p4info::match_type(f) {
        M::Exact => F::Exact(Exact {
            value: canon(&parse_hex(t).ok_or_else(bad)?),
        }),
        M::Lpm => {
            let (v, l) = match t.rsplit_once('/') {
                Some((v, l)) => (parse_hex(v), l.parse::<i32>().ok()),
                None => (parse_hex(t), Some(f.bitwidth)),
            };
            let (v, l) = (v.ok_or_else(bad)?, l.ok_or_else(bad)?);
            if l == 0 {
                return Ok(None);
            }
            F::Lpm(Lpm {
                value: canon(&v),
                prefix_len: l,
            })
        }
        M::Ternary => {
            let (v, m) = t.split_once("&&&").ok_or_else(bad)?;
            let (v, m) = (parse_hex(v).ok_or_else(bad)?, parse_hex(m).ok_or_else(bad)?);
            if m == BigUint::default() {
                return Ok(None);
            }
            F::Ternary(Ternary {
                value: canon(&v),
                mask: canon(&m),
            })
        }
        M::Range => {
            let (a, b) = t.split_once("->").ok_or_else(bad)?;
            let (a, b) = (parse_hex(a).ok_or_else(bad)?, parse_hex(b).ok_or_else(bad)?);
            if a == BigUint::default() && b == max_of(f.bitwidth) {
                return Ok(None);
            }
            F::Range(Range {
                low: canon(&a),
                high: canon(&b),
            })
        }
        M::Optional => F::Optional(Optional {
            value: canon(&parse_hex(t).ok_or_else(bad)?),
        }),
        M::Unspecified => return Err(format!("key {}: match kind not supported", f.name)),
    };
    Ok(Some(p4::FieldMatch {
        field_id: f.id,
        field_match_type: Some(fm),
    }))
}

/// A P4Runtime field match as the CLI's key text.
fn key_text(m: &p4::FieldMatch) -> String {
    use p4::field_match::FieldMatchType as F;
    match &m.field_match_type {
        Some(F::Exact(e)) => hex(&e.value),
        Some(F::Lpm(l)) => format!("{}/{}", hex(&l.value), l.prefix_len),
        Some(F::Ternary(t)) => format!("{}&&&{}", hex(&t.value), hex(&t.mask)),
        Some(F::Range(r)) => format!("{}->{}", hex(&r.low), hex(&r.high)),
        Some(F::Optional(o)) => hex(&o.value),
        // Architecture-specific kinds are refused by the program ("not a
        // number") rather than guessed at.
        Some(F::Other(_)) => "other-match-kind".into(),
        None => "*".into(),
    }
}

/// Names, widths and match kinds of `client` against `ours` (ids ignored):
/// every table, key, action, parameter and extern the client names must be
/// in the program with the same width and kind, and every key and parameter
/// of the program must be in the client's.
pub fn name_differences(client: &cfg::P4Info, ours: &cfg::P4Info) -> Vec<String> {
    let mut out = Vec::new();
    for t in &client.tables {
        let name = preamble_name(&t.preamble);
        let Some(o) = ours
            .tables
            .iter()
            .find(|o| preamble_name(&o.preamble) == name)
        else {
            out.push(format!("table {name} is not in the program"));
            continue;
        };
        for f in &t.match_fields {
            match o.match_fields.iter().find(|g| g.name == f.name) {
                Some(g)
                    if g.bitwidth == f.bitwidth
                        && crate::p4info::match_type(g) == crate::p4info::match_type(f) => {}
                Some(g) => out.push(format!(
                    "table {name}: key {}: client {} bits {:?}, program {} bits {:?}",
                    f.name,
                    f.bitwidth,
                    crate::p4info::match_type(f),
                    g.bitwidth,
                    crate::p4info::match_type(g)
                )),
                None => out.push(format!(
                    "table {name}: key {} is not in the program",
                    f.name
                )),
            }
        }
        for g in &o.match_fields {
            if !t.match_fields.iter().any(|f| f.name == g.name) {
                out.push(format!(
                    "table {name}: the client's P4Info lacks key {}",
                    g.name
                ));
            }
        }
    }
    for a in &client.actions {
        let name = preamble_name(&a.preamble);
        let Some(o) = ours
            .actions
            .iter()
            .find(|o| preamble_name(&o.preamble) == name)
        else {
            out.push(format!("action {name} is not in the program"));
            continue;
        };
        for p in &a.params {
            match o.params.iter().find(|q| q.name == p.name) {
                Some(q) if q.bitwidth == p.bitwidth => {}
                Some(q) => out.push(format!(
                    "action {name}: parameter {}: client {} bits, program {} bits",
                    p.name, p.bitwidth, q.bitwidth
                )),
                None => out.push(format!(
                    "action {name}: parameter {} is not in the program",
                    p.name
                )),
            }
        }
        if o.params.len() != a.params.len() {
            out.push(format!(
                "action {name}: client has {} parameters, program {}",
                a.params.len(),
                o.params.len()
            ));
        }
    }
    macro_rules! named {
        ($field:ident, $kind:expr) => {
            for x in &client.$field {
                let name = preamble_name(&x.preamble);
                if !ours
                    .$field
                    .iter()
                    .any(|o| preamble_name(&o.preamble) == name)
                {
                    out.push(format!("{} {name} is not in the program", $kind));
                }
            }
        };
    }
    // Controller headers: the server packs and unpacks them by the P4Info
    // in force, so it must lay them out exactly as the program does.
    for m in &client.controller_packet_metadata {
        let name = preamble_name(&m.preamble);
        let Some(o) = ours
            .controller_packet_metadata
            .iter()
            .find(|o| preamble_name(&o.preamble) == name)
        else {
            out.push(format!("controller header {name} is not in the program"));
            continue;
        };
        let layout = |x: &cfg::ControllerPacketMetadata| {
            x.metadata
                .iter()
                .map(|f| (f.name.clone(), f.bitwidth))
                .collect::<Vec<_>>()
        };
        if layout(m) != layout(o) {
            out.push(format!(
                "controller header {name}: client fields {:?}, program {:?}",
                layout(m),
                layout(o)
            ));
        }
    }
    named!(counters, "counter");
    named!(direct_counters, "direct counter");
    named!(meters, "meter");
    named!(direct_meters, "direct meter");
    named!(registers, "register");
    out
}

impl DaemonTarget {
    /// A target for `bridge` of the daemon at `socket`, without a CPU
    /// port; see [`DaemonTarget::with_cpu_port`].
    pub fn new(socket: PathBuf, bridge: String, include_dirs: Vec<PathBuf>) -> Arc<Self> {
        Self::with_cpu_port(socket, bridge, include_dirs, None)
    }

    /// A target for `bridge` of the daemon at `socket` whose programs send
    /// packets for the controller to `cpu_port`; starts the thread that
    /// collects packet-ins and idle-timeout notifications (it ends with
    /// the target).
    pub fn with_cpu_port(
        socket: PathBuf,
        bridge: String,
        include_dirs: Vec<PathBuf>,
        cpu_port: Option<u32>,
    ) -> Arc<Self> {
        let t = Arc::new(Self {
            socket,
            bridge,
            include_dirs,
            cpu_port,
            state: Mutex::default(),
            events: broadcast::channel(EVENTS).0,
        });
        let weak = Arc::downgrade(&t);
        let _ = std::thread::Builder::new()
            .name("p4rt-poll".into())
            .spawn(move || poller(weak));
        t
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One request to the daemon: its data, or its error as a status.
    fn call(&self, op: P4Op) -> Result<Value, Status> {
        let req = Request::P4 {
            bridge: self.bridge.clone(),
            op,
        };
        let resp = nicflow_api::client::request(&self.socket, &req).map_err(st)?;
        if resp.ok {
            Ok(resp.data)
        } else {
            Err(daemon_status(
                resp.error.as_deref().unwrap_or("request refused"),
            ))
        }
    }

    /// The program's P4Info, generated from `text`.
    pub fn generate(&self, text: &str) -> Result<cfg::P4Info, Status> {
        let pl = nicflow_p4::source::load_source("p4runtime.p4", text, &self.include_dirs, None)
            .map_err(|e| Status::invalid_argument(format!("P4 program: {e}")))?;
        Ok(crate::p4info_gen::generate(&pl))
    }

    /// Words of an entry (`ACTION KEY... => name=V... [priority N]`), keys in
    /// the table's key order; `action` false gives `KEY... [priority N]`.
    fn words(
        info: &cfg::P4Info,
        index: &P4InfoIndex,
        te: &p4::TableEntry,
        with_action: bool,
    ) -> Result<(String, Vec<String>), Status> {
        let table = index
            .table(info, te.table_id)
            .ok_or_else(|| Status::not_found(format!("no table {}", te.table_id)))?;
        let tname = preamble_name(&table.preamble).to_string();
        let mut words = Vec::new();
        let mut params = Vec::new();
        if with_action {
            let a = action_of(te).ok_or_else(|| {
                Status::invalid_argument(format!("table {tname}: entry without an action"))
            })?;
            let ainfo = index
                .action(info, a.action_id)
                .ok_or_else(|| Status::not_found(format!("no action {}", a.action_id)))?;
            words.push(preamble_name(&ainfo.preamble).to_string());
            for p in &a.params {
                let pname = ainfo
                    .params
                    .iter()
                    .find(|q| q.id == p.param_id)
                    .map(|q| q.name.clone())
                    .ok_or_else(|| Status::not_found(format!("no parameter {}", p.param_id)))?;
                params.push(format!("{pname}={}", hex(&p.value)));
            }
        }
        for f in &table.match_fields {
            let m = te.r#match.iter().find(|m| m.field_id == f.id);
            words.push(m.map_or_else(|| "*".to_string(), key_text));
        }
        if with_action && !params.is_empty() {
            words.push("=>".into());
            words.extend(params);
        }
        if te.priority != 0 {
            words.push("priority".into());
            words.push(te.priority.to_string());
        }
        Ok((tname, words))
    }

    fn write_table(&self, ty: p4::update::Type, te: &p4::TableEntry) -> Result<(), Status> {
        use p4::update::Type as T;
        let (info, index) = {
            let s = self.lock();
            let info = s
                .info
                .clone()
                .ok_or_else(|| Status::failed_precondition("no pipeline"))?;
            (info, s.index.clone())
        };
        if te.is_default_action {
            let table = index
                .table(&info, te.table_id)
                .ok_or_else(|| Status::not_found("table"))?;
            let tname = preamble_name(&table.preamble).to_string();
            // No action: back to the program's initial default.
            let entry = match action_of(te) {
                Some(_) => te.clone(),
                None => initial_default(table).unwrap_or_else(|| te.clone()),
            };
            let Some(a) = action_of(&entry) else {
                return Err(Status::invalid_argument(format!(
                    "table {tname}: no default action to go back to"
                )));
            };
            let ainfo = index
                .action(&info, a.action_id)
                .ok_or_else(|| Status::not_found("action"))?;
            let mut words = vec![preamble_name(&ainfo.preamble).to_string()];
            for p in &a.params {
                let pname = ainfo
                    .params
                    .iter()
                    .find(|q| q.id == p.param_id)
                    .map_or(String::new(), |q| q.name.clone());
                words.push(format!("{pname}={}", hex(&p.value)));
            }
            self.call(P4Op::SetDefault {
                table: tname,
                words,
            })?;
            let mut d = entry;
            d.counter_data = None;
            d.is_default_action = true;
            d.table_id = te.table_id;
            self.lock().defaults.insert(te.table_id, d);
            return Ok(());
        }
        // The entry's TTL (0: never expires) for tables with idle timeout;
        // elsewhere only 0 is valid.
        let ttl = u64::try_from(te.idle_timeout_ns)
            .map_err(|_| Status::invalid_argument("idle_timeout_ns is negative"))?;
        let notify = index.table(&info, te.table_id).is_some_and(|t| {
            t.idle_timeout_behavior == cfg::table::IdleTimeoutBehavior::NotifyControl as i32
        });
        if ttl > 0 && !notify {
            return Err(Status::invalid_argument(
                "idle_timeout_ns set for a table without idle timeout (NO_TIMEOUT in the P4Info)",
            ));
        }
        let idle_timeout_ns = notify.then_some(ttl);
        match ty {
            T::Insert => {
                let (table, words) = Self::words(&info, &index, te, true)?;
                self.call(P4Op::TableAdd {
                    table,
                    words,
                    idle_timeout_ns,
                })?;
            }
            T::Modify => {
                if action_of(te).is_none() {
                    return Err(Status::unimplemented(
                        "nicflow: MODIFY without an action (direct resources only) is not supported",
                    ));
                }
                let (table, words) = Self::words(&info, &index, te, true)?;
                self.call(P4Op::TableModifyMatch {
                    table,
                    words,
                    idle_timeout_ns,
                })?;
            }
            T::Delete => {
                let (table, words) = Self::words(&info, &index, te, false)?;
                self.call(P4Op::TableDelMatch { table, words })?;
            }
            T::Unspecified => return Err(Status::invalid_argument("update type unspecified")),
        }
        Ok(())
    }

    /// Entries of the daemon's dump (all tables of `info`, or one) as
    /// P4Runtime entries with their counters.
    fn dump(
        &self,
        info: &cfg::P4Info,
        table: Option<&cfg::Table>,
    ) -> Result<Vec<(u64, p4::TableEntry)>, Status> {
        let data = self.call(P4Op::TableDump {
            table: table.map(|t| preamble_name(&t.preamble).to_string()),
        })?;
        let mut out = Vec::new();
        for e in data.as_array().into_iter().flatten() {
            let tname = e.get("table").and_then(Value::as_str).unwrap_or("");
            let Some(t) = info
                .tables
                .iter()
                .find(|t| preamble_name(&t.preamble) == tname)
            else {
                continue;
            };
            out.push(entry_from_dump(info, t, e).map_err(Status::internal)?);
        }
        Ok(out)
    }

    fn read_table(&self, req: &p4::TableEntry) -> Result<Vec<p4::Entity>, Status> {
        let (info, index, defaults) = {
            let s = self.lock();
            let info = s
                .info
                .clone()
                .ok_or_else(|| Status::failed_precondition("no pipeline"))?;
            (info, s.index.clone(), s.defaults.clone())
        };
        let wrap = |e: p4::TableEntry| p4::Entity {
            entity: Some(E::TableEntry(e)),
        };
        let table = if req.table_id == 0 {
            None
        } else {
            Some(
                index
                    .table(&info, req.table_id)
                    .ok_or_else(|| Status::not_found("table"))?,
            )
        };
        if req.is_default_action {
            let tables: Vec<&cfg::Table> =
                table.map_or_else(|| info.tables.iter().collect(), |t| vec![t]);
            return Ok(tables
                .into_iter()
                .filter_map(|t| {
                    let id = t.preamble.as_ref().map_or(0, |p| p.id);
                    defaults.get(&id).cloned().or_else(|| initial_default(t))
                })
                .map(wrap)
                .collect());
        }
        let with_counters = req.counter_data.is_some();
        let with_elapsed = req.time_since_last_hit.is_some();
        Ok(self
            .dump(&info, table)?
            .into_iter()
            .map(|(_, e)| e)
            .filter(|e| {
                req.r#match.iter().all(|m| e.r#match.contains(m))
                    && (req.priority == 0 || req.priority == e.priority)
            })
            .map(|mut e| {
                let has_counter = index
                    .table(&info, e.table_id)
                    .is_some_and(|t| index.direct_counter_of(&info, t).is_some());
                if !with_counters || !has_counter {
                    e.counter_data = None;
                }
                // Only when asked, and only for tables with idle timeout.
                let notify = index.table(&info, e.table_id).is_some_and(|t| {
                    t.idle_timeout_behavior == cfg::table::IdleTimeoutBehavior::NotifyControl as i32
                });
                if !with_elapsed || !notify {
                    e.time_since_last_hit = None;
                }
                wrap(e)
            })
            .collect())
    }

    fn info(&self) -> Result<(cfg::P4Info, P4InfoIndex), Status> {
        let s = self.lock();
        let info = s
            .info
            .clone()
            .ok_or_else(|| Status::failed_precondition("no pipeline"))?;
        Ok((info, s.index.clone()))
    }

    /// Collects the frames the program sent to the CPU port and sends them
    /// to the controllers as PacketIn, the `packet_in` header's fields as
    /// metadata. True when a whole batch came (more may be waiting).
    /// Frames too short for the header are dropped with a debug log.
    fn poll_packet_ins(&self) -> Result<bool, Status> {
        let Some((header, ids)) = self.lock().packet_in.clone() else {
            return Ok(false);
        };
        if self.events.len() >= EVENTS / 2 {
            return Ok(false);
        }
        let data = self.call(P4Op::TakePacketIns {
            max: PACKET_IN_BATCH,
        })?;
        let frames: Vec<Vec<u8>> = data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| nicflow_api::proto::frame_from_hex(v.get("data")?.as_str()?))
            .collect();
        let full = frames.len() == PACKET_IN_BATCH;
        for f in frames {
            let (fields, payload) = match header.unpack(&f) {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("p4runtime: packet-in dropped: {e}");
                    continue;
                }
            };
            let metadata = fields
                .into_iter()
                .zip(&ids)
                .map(|((_, v), id)| p4::PacketMetadata {
                    metadata_id: *id,
                    value: crate::p4info_gen::canonical(v),
                })
                .collect();
            let _ = self.events.send(TargetEvent::PacketIn(p4::PacketIn {
                payload: payload.to_vec(),
                metadata,
            }));
        }
        Ok(full)
    }

    /// Collects idle-timeout notifications and sends them to the controllers.
    fn poll_idle(&self) -> Result<(), Status> {
        if !self.lock().idle_tables {
            return Ok(());
        }
        let data = self.call(P4Op::TakeIdle)?;
        let list: Vec<(String, u64)> = data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| {
                Some((
                    v.get("table")?.as_str()?.to_string(),
                    v.get("id")?.as_u64()?,
                ))
            })
            .collect();
        if list.is_empty() {
            return Ok(());
        }
        let (info, _) = self.info()?;
        let mut entries = Vec::new();
        let mut tables: Vec<&str> = list.iter().map(|(t, _)| t.as_str()).collect();
        tables.dedup();
        for tname in tables {
            let Some(t) = info
                .tables
                .iter()
                .find(|t| preamble_name(&t.preamble) == tname)
            else {
                continue;
            };
            for (id, mut e) in self.dump(&info, Some(t))? {
                if list.iter().any(|(n, i)| n == tname && *i == id) {
                    e.counter_data = None;
                    e.time_since_last_hit = None;
                    entries.push(e);
                }
            }
        }
        if !entries.is_empty() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
            let _ = self
                .events
                .send(TargetEvent::IdleTimeout(p4::IdleTimeoutNotification {
                    table_entry: entries,
                    timestamp: now,
                }));
        }
        Ok(())
    }
}

/// Collects packet-ins (when the target has a CPU port) and idle-timeout
/// notifications until the target goes.
fn poller(target: Weak<DaemonTarget>) {
    let mut last_idle = std::time::Instant::now();
    loop {
        let Some(t) = target.upgrade() else { return };
        let mut more = false;
        if t.cpu_port.is_some() {
            match t.poll_packet_ins() {
                Ok(full) => more = full,
                Err(e) => tracing::debug!("p4runtime packet-in poll: {}", e.message()),
            }
        }
        if last_idle.elapsed() >= IDLE_POLL {
            last_idle = std::time::Instant::now();
            if let Err(e) = t.poll_idle() {
                tracing::debug!("p4runtime idle poll: {}", e.message());
            }
        }
        let pause = if t.cpu_port.is_some() {
            PACKET_IN_POLL
        } else {
            IDLE_POLL
        };
        drop(t);
        if !more {
            std::thread::sleep(pause);
        }
    }
}

fn action_of(te: &p4::TableEntry) -> Option<&p4::Action> {
    match te.action.as_ref().and_then(|a| a.r#type.as_ref()) {
        Some(p4::table_action::Type::Action(a)) => Some(a),
        _ => None,
    }
}

fn initial_default(t: &cfg::Table) -> Option<p4::TableEntry> {
    let init = t.initial_default_action.as_ref()?;
    Some(p4::TableEntry {
        table_id: t.preamble.as_ref().map_or(0, |p| p.id),
        is_default_action: true,
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: init.action_id,
                params: init
                    .arguments
                    .iter()
                    .map(|a| p4::action::Param {
                        param_id: a.param_id,
                        value: a.value.clone(),
                    })
                    .collect(),
            })),
        }),
        ..Default::default()
    })
}

/// One entry of the daemon's `TableDump` data as (entry id, P4Runtime entry).
fn entry_from_dump(
    info: &cfg::P4Info,
    t: &cfg::Table,
    e: &Value,
) -> Result<(u64, p4::TableEntry), String> {
    let tname = preamble_name(&t.preamble);
    let keys: Vec<&str> = e
        .get("keys")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if keys.len() != t.match_fields.len() {
        return Err(format!("table {tname}: dump has {} keys", keys.len()));
    }
    let mut matches = Vec::new();
    for (f, k) in t.match_fields.iter().zip(keys) {
        if let Some(m) = field_match(f, k)? {
            matches.push(m);
        }
    }
    let aname = e.get("action").and_then(Value::as_str).unwrap_or("");
    let suffix = format!(".{aname}");
    let action = t
        .action_refs
        .iter()
        .filter_map(|r| {
            info.actions
                .iter()
                .find(|a| a.preamble.as_ref().is_some_and(|p| p.id == r.id))
        })
        .find(|a| {
            let n = preamble_name(&a.preamble);
            n == aname || n.ends_with(&suffix)
        })
        .ok_or_else(|| format!("table {tname}: unknown action {aname} in dump"))?;
    let mut params = Vec::new();
    for (i, p) in e
        .get("params")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        let value = p
            .get("value")
            .and_then(Value::as_str)
            .and_then(parse_hex)
            .ok_or_else(|| format!("table {tname}: bad parameter value in dump"))?;
        let info_p = if name.is_empty() {
            action.params.get(i)
        } else {
            action.params.iter().find(|q| q.name == name)
        }
        .ok_or_else(|| {
            format!(
                "action {}: unknown parameter {name}",
                preamble_name(&action.preamble)
            )
        })?;
        params.push(p4::action::Param {
            param_id: info_p.id,
            value: canon(&value),
        });
    }
    params.sort_by_key(|p| p.param_id);
    let id = e.get("id").and_then(Value::as_u64).unwrap_or(0);
    let priority = e.get("priority").and_then(Value::as_i64).unwrap_or(0);
    Ok((
        id,
        p4::TableEntry {
            table_id: t.preamble.as_ref().map_or(0, |p| p.id),
            r#match: matches,
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(p4::Action {
                    action_id: action.preamble.as_ref().map_or(0, |p| p.id),
                    params,
                })),
            }),
            priority: i32::try_from(priority).unwrap_or(i32::MAX),
            is_const: e.get("const").and_then(Value::as_bool).unwrap_or(false),
            counter_data: Some(p4::CounterData {
                byte_count: e.get("bytes").and_then(Value::as_i64).unwrap_or(0),
                packet_count: e.get("packets").and_then(Value::as_i64).unwrap_or(0),
            }),
            idle_timeout_ns: e
                .get("idle_timeout_ns")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            time_since_last_hit: e
                .get("elapsed_ns")
                .and_then(Value::as_i64)
                .map(|elapsed_ns| p4::table_entry::IdleTimeout { elapsed_ns }),
            ..Default::default()
        },
    ))
}

impl P4RtTarget for DaemonTarget {
    fn set_pipeline(
        &self,
        mode: PipelineMode,
        client_p4info: Option<&cfg::P4Info>,
        device_config: &[u8],
    ) -> Result<cfg::P4Info, Status> {
        let text = std::str::from_utf8(device_config).map_err(|_| {
            Status::invalid_argument("nicflow's device config is the P4-16 source text (UTF-8)")
        })?;
        let ours = self.generate(text)?;
        let in_force = match client_p4info {
            Some(c) => {
                let d = name_differences(c, &ours);
                if !d.is_empty() {
                    return Err(Status::invalid_argument(format!(
                        "the P4Info does not describe this program: {}",
                        d.join("; ")
                    )));
                }
                // Keys in the program's order: entries cross the socket
                // (and come back from dumps) with their keys in that order.
                let mut c = c.clone();
                for t in &mut c.tables {
                    let name = preamble_name(&t.preamble).to_string();
                    if let Some(o) = ours
                        .tables
                        .iter()
                        .find(|o| preamble_name(&o.preamble) == name)
                    {
                        t.match_fields.sort_by_key(|f| {
                            o.match_fields
                                .iter()
                                .position(|g| g.name == f.name)
                                .unwrap_or(usize::MAX)
                        });
                    }
                }
                c
            }
            None => ours,
        };
        match mode {
            PipelineMode::Verify => return Ok(in_force),
            PipelineMode::Reconcile => {
                let s = self.lock();
                if s.source.as_deref() != Some(text) || s.info.as_ref() != Some(&in_force) {
                    return Err(Status::unimplemented(
                        "nicflow reconciles only an unchanged program and P4Info",
                    ));
                }
                return Ok(in_force);
            }
            PipelineMode::Commit => {}
        }
        self.call(P4Op::Load {
            path: None,
            source: Some(text.to_string()),
            arch: None,
            include: self
                .include_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
            cpu_port: self.cpu_port,
        })?;
        let mut s = self.lock();
        *s = State {
            packet_in: controller_header(&in_force, "packet_in"),
            packet_out: controller_header(&in_force, "packet_out"),
            index: P4InfoIndex::new(&in_force),
            idle_tables: in_force.tables.iter().any(|t| {
                t.idle_timeout_behavior == cfg::table::IdleTimeoutBehavior::NotifyControl as i32
            }),
            info: Some(in_force.clone()),
            source: Some(text.to_string()),
            defaults: HashMap::new(),
        };
        Ok(in_force)
    }

    fn write(&self, update: &p4::Update) -> Result<(), Status> {
        use p4::update::Type as T;
        let ty = T::try_from(update.r#type).unwrap_or(T::Unspecified);
        match update.entity.as_ref().and_then(|e| e.entity.as_ref()) {
            Some(E::TableEntry(te)) => self.write_table(ty, te),
            Some(E::RegisterEntry(r)) => {
                let (info, index) = self.info()?;
                let reg = index
                    .register(&info, r.register_id)
                    .ok_or_else(|| Status::not_found("register"))?;
                let name = preamble_name(&reg.preamble).to_string();
                let value = match r.data.as_ref().and_then(|d| d.data.as_ref()) {
                    Some(p4::p4_data::Data::Bitstring(b)) => hex(b),
                    Some(p4::p4_data::Data::Bool(b)) => format!("{}", u8::from(*b)),
                    _ => {
                        return Err(Status::unimplemented(
                            "nicflow writes registers of bit<W> (bitstring) or bool only",
                        ))
                    }
                };
                let cells: Vec<u64> = match &r.index {
                    Some(i) => vec![u64::try_from(i.index)
                        .map_err(|_| Status::out_of_range("negative index"))?],
                    None => (0..u64::try_from(reg.size).unwrap_or(0)).collect(),
                };
                for index in cells {
                    self.call(P4Op::RegisterWrite {
                        name: name.clone(),
                        index,
                        value: value.clone(),
                    })?;
                }
                Ok(())
            }
            _ => Err(Status::unimplemented(
                "nicflow's P4Runtime target writes table entries (and default entries) and registers only",
            )),
        }
    }

    fn read(&self, entity: &p4::Entity) -> Result<Vec<p4::Entity>, Status> {
        let wrap = |e: E| p4::Entity { entity: Some(e) };
        match entity.entity.as_ref() {
            Some(E::TableEntry(te)) => self.read_table(te),
            Some(E::CounterEntry(c)) => {
                let (info, _) = self.info()?;
                let mut out = Vec::new();
                for ctr in info.counters.iter().filter(|x| {
                    c.counter_id == 0 || x.preamble.as_ref().is_some_and(|p| p.id == c.counter_id)
                }) {
                    let id = ctr.preamble.as_ref().map_or(0, |p| p.id);
                    let index = match &c.index {
                        Some(i) => Some(
                            u64::try_from(i.index)
                                .map_err(|_| Status::out_of_range("negative index"))?,
                        ),
                        None => None,
                    };
                    let data = self.call(P4Op::CounterRead {
                        name: preamble_name(&ctr.preamble).to_string(),
                        index,
                    })?;
                    // The daemon lists only non-zero cells of a whole array.
                    let mut cells: HashMap<u64, (i64, i64)> = HashMap::new();
                    for v in data.as_array().into_iter().flatten() {
                        if let Some(i) = v.get("index").and_then(Value::as_u64) {
                            cells.insert(
                                i,
                                (
                                    v.get("packets").and_then(Value::as_i64).unwrap_or(0),
                                    v.get("bytes").and_then(Value::as_i64).unwrap_or(0),
                                ),
                            );
                        }
                    }
                    let range: Vec<u64> = match index {
                        Some(i) => vec![i],
                        None => (0..u64::try_from(ctr.size).unwrap_or(0)).collect(),
                    };
                    for i in range {
                        let (p, b) = cells.get(&i).copied().unwrap_or((0, 0));
                        out.push(wrap(E::CounterEntry(p4::CounterEntry {
                            counter_id: id,
                            index: Some(p4::Index {
                                index: i64::try_from(i).unwrap_or(i64::MAX),
                            }),
                            data: Some(p4::CounterData {
                                packet_count: p,
                                byte_count: b,
                            }),
                        })));
                    }
                }
                Ok(out)
            }
            Some(E::DirectCounterEntry(d)) => {
                let req = d.table_entry.clone().unwrap_or_default();
                let (info, index) = self.info()?;
                let mut with = req.clone();
                with.counter_data = Some(p4::CounterData::default());
                let mut out = Vec::new();
                for e in self.read_table(&with)? {
                    if let Some(E::TableEntry(mut te)) = e.entity {
                        let has = index
                            .table(&info, te.table_id)
                            .is_some_and(|t| index.direct_counter_of(&info, t).is_some());
                        if !has {
                            continue;
                        }
                        let data = te.counter_data.take();
                        out.push(wrap(E::DirectCounterEntry(p4::DirectCounterEntry {
                            table_entry: Some(te),
                            data: Some(data.unwrap_or_default()),
                        })));
                    }
                }
                Ok(out)
            }
            Some(E::RegisterEntry(r)) => {
                let (info, _) = self.info()?;
                let mut out = Vec::new();
                for reg in info.registers.iter().filter(|x| {
                    r.register_id == 0
                        || x.preamble.as_ref().is_some_and(|p| p.id == r.register_id)
                }) {
                    let id = reg.preamble.as_ref().map_or(0, |p| p.id);
                    let index = match &r.index {
                        Some(i) => Some(
                            u64::try_from(i.index)
                                .map_err(|_| Status::out_of_range("negative index"))?,
                        ),
                        None => None,
                    };
                    let data = self.call(P4Op::RegisterRead {
                        name: preamble_name(&reg.preamble).to_string(),
                        index,
                    })?;
                    for v in data.as_array().into_iter().flatten() {
                        let i = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                        let value = v
                            .get("value")
                            .and_then(Value::as_str)
                            .and_then(parse_hex)
                            .unwrap_or_default();
                        out.push(wrap(E::RegisterEntry(p4::RegisterEntry {
                            register_id: id,
                            index: Some(p4::Index {
                                index: i64::try_from(i).unwrap_or(i64::MAX),
                            }),
                            data: Some(p4::P4Data {
                                data: Some(p4::p4_data::Data::Bitstring(canon(&value))),
                            }),
                        })));
                    }
                }
                Ok(out)
            }
            _ => Err(Status::unimplemented(
                "nicflow's P4Runtime target reads table entries, counters, direct counters and registers only",
            )),
        }
    }

    fn packet_out(&self, packet: &p4::PacketOut) -> Result<(), Status> {
        if self.cpu_port.is_some() {
            // BMv2's semantics: the metadata become the program's
            // packet_out header and the frame enters from the CPU port.
            let (header, ids) = {
                let s = self.lock();
                if s.info.is_none() {
                    return Err(Status::failed_precondition("no pipeline"));
                }
                s.packet_out.clone().ok_or_else(|| {
                    Status::invalid_argument(
                        "nicflow: PacketOut needs the program's @controller_header(\"packet_out\") \
                         header in the P4Info",
                    )
                })?
            };
            let mut values = Vec::with_capacity(packet.metadata.len());
            for m in &packet.metadata {
                let i = ids
                    .iter()
                    .position(|id| *id == m.metadata_id)
                    .ok_or_else(|| {
                        Status::invalid_argument(format!(
                            "PacketOut: no packet_out metadata with id {}",
                            m.metadata_id
                        ))
                    })?;
                values.push((header.fields[i].0.clone(), m.value.clone()));
            }
            let frame = header
                .pack(&values, &packet.payload)
                .map_err(|e| Status::invalid_argument(format!("PacketOut: {e}")))?;
            let data = nicflow_api::proto::frame_to_hex(&frame);
            self.call(P4Op::Inject { data })?;
            return Ok(());
        }
        let (info, _) = self.info()?;
        let meta = info
            .controller_packet_metadata
            .iter()
            .find(|m| preamble_name(&m.preamble) == "packet_out")
            .and_then(|m| m.metadata.iter().find(|f| f.name == "egress_port"))
            .ok_or_else(|| {
                Status::unimplemented(
                    "nicflow: PacketOut needs a packet_out controller header with an egress_port \
                     field in the P4Info (the program's @controller_header(\"packet_out\")); \
                     this P4Info has none",
                )
            })?;
        let port = packet
            .metadata
            .iter()
            .find(|m| m.metadata_id == meta.id)
            .map(|m| BigUint::from_bytes_be(&m.value))
            .ok_or_else(|| Status::invalid_argument("PacketOut without egress_port metadata"))?;
        let port = u32::try_from(port)
            .map_err(|_| Status::invalid_argument("PacketOut: egress_port does not fit 32 bits"))?;
        let data = nicflow_api::proto::frame_to_hex(&packet.payload);
        self.call(P4Op::PacketOut { port, data })?;
        Ok(())
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<TargetEvent>> {
        Some(self.events.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(kind: cfg::match_field::MatchType, width: i32) -> cfg::MatchField {
        cfg::MatchField {
            id: 1,
            name: "k".into(),
            bitwidth: width,
            r#match: Some(cfg::match_field::Match::MatchType(kind as i32)),
            ..Default::default()
        }
    }

    fn table(name: &str, keys: &[(&str, i32)]) -> cfg::Table {
        cfg::Table {
            preamble: Some(cfg::Preamble {
                id: 1,
                name: name.into(),
                ..Default::default()
            }),
            match_fields: keys
                .iter()
                .enumerate()
                .map(|(i, (n, w))| cfg::MatchField {
                    id: i as u32 + 1,
                    name: (*n).into(),
                    ..field(cfg::match_field::MatchType::Exact, *w)
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn name_differences_ignore_ids_not_widths() {
        let ours = cfg::P4Info {
            tables: vec![table("c.t", &[("a", 8), ("b", 16)])],
            ..Default::default()
        };
        let mut client = ours.clone();
        client.tables[0].preamble.as_mut().unwrap().id = 99;
        client.tables[0].match_fields.reverse();
        assert!(name_differences(&client, &ours).is_empty());
        client.tables[0].match_fields[0].bitwidth = 9;
        let d = name_differences(&client, &ours);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("key b"), "{d:?}");
        let fewer = cfg::P4Info {
            tables: vec![table("c.t", &[("a", 8)])],
            ..Default::default()
        };
        assert!(name_differences(&fewer, &ours)[0].contains("lacks key b"));
        let other = cfg::P4Info {
            tables: vec![table("c.u", &[("a", 8)])],
            ..Default::default()
        };
        assert!(name_differences(&other, &ours)[0].contains("not in the program"));
    }

    #[test]
    fn controller_headers_must_be_laid_out_as_the_programs() {
        let header = |widths: &[(&str, i32)]| cfg::ControllerPacketMetadata {
            preamble: Some(cfg::Preamble {
                id: 1,
                name: "packet_in".into(),
                ..Default::default()
            }),
            metadata: widths
                .iter()
                .enumerate()
                .map(|(i, (n, w))| cfg::controller_packet_metadata::Metadata {
                    id: i as u32 + 1,
                    name: n.to_string(),
                    bitwidth: *w,
                    ..Default::default()
                })
                .collect(),
        };
        let ours = cfg::P4Info {
            controller_packet_metadata: vec![header(&[("ingress_port", 9), ("_pad", 7)])],
            ..Default::default()
        };
        let mut client = ours.clone();
        client.controller_packet_metadata[0]
            .preamble
            .as_mut()
            .unwrap()
            .id = 42;
        assert!(name_differences(&client, &ours).is_empty());
        for bad in [
            header(&[("ingress_port", 16), ("_pad", 0)]),
            header(&[("_pad", 7), ("ingress_port", 9)]),
            header(&[("ingress_port", i32::MAX), ("_pad", i32::MAX)]),
        ] {
            client.controller_packet_metadata = vec![bad];
            let d = name_differences(&client, &ours);
            assert!(
                d.len() == 1 && d[0].contains("controller header packet_in"),
                "{d:?}"
            );
        }
        client.controller_packet_metadata[0]
            .preamble
            .as_mut()
            .unwrap()
            .name = "digest_t".into();
        assert!(name_differences(&client, &ours)[0].contains("not in the program"));
    }

    #[test]
    fn dump_keys_round_trip_through_cli_text() {
        use cfg::match_field::MatchType as M;
        for (kind, text) in [
            (M::Exact, "0x20010db8"),
            (M::Lpm, "0xa000000/8"),
            (M::Ternary, "0x12&&&0xff"),
            (M::Range, "0x1->0x7"),
            (M::Optional, "0x5"),
        ] {
            let m = field_match(&field(kind, 32), text).unwrap().unwrap();
            assert_eq!(key_text(&m), text);
        }
        assert!(field_match(&field(M::Lpm, 32), "0x0/0").unwrap().is_none());
        assert!(field_match(&field(M::Ternary, 8), "0x0&&&0x0")
            .unwrap()
            .is_none());
        assert!(field_match(&field(M::Range, 8), "0x0->0xff")
            .unwrap()
            .is_none());
        assert!(field_match(&field(M::Optional, 8), "*").unwrap().is_none());
        assert!(field_match(&field(M::Exact, 8), "zz").is_err());
    }
}
