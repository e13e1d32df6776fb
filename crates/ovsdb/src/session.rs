//! A long-lived, self-healing database session: what ovs-vswitchd's IDL does for it.
//!
//! The session connects, reads the schema, takes the lock (if configured), monitors the
//! configured tables with the best method the server offers (`monitor_cond_since`, else
//! `monitor_cond`, else `monitor`) and keeps a [`Replica`] in sync. When the connection
//! drops it reconnects with exponential backoff, re-takes the lock and re-monitors; if
//! the server cannot resume from the last transaction id it sends the whole database
//! again and the session turns the difference into ordinary [`Change`]s, so after a
//! reconnect the replica equals a fresh one and the reconciler sees only what changed.

use crate::datum::Uuid;
use crate::error::{Error, Result};
use crate::jsonrpc::{Client, Notification, Remote};
use crate::ops::{Op, TxnReply};
use crate::replica::{Change, Replica};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// How the session monitors, most capable first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MonitorMethod {
    /// `monitor_cond_since` + `update3`: resumes after a reconnect when the server kept
    /// the history (clustered databases); otherwise a full resend.
    Since,
    /// `monitor_cond` + `update2` (diffs for sets and maps).
    Cond,
    /// RFC 7047's `monitor` + `update`.
    Plain,
}

impl MonitorMethod {
    fn next(self) -> Option<MonitorMethod> {
        match self {
            MonitorMethod::Since => Some(MonitorMethod::Cond),
            MonitorMethod::Cond => Some(MonitorMethod::Plain),
            MonitorMethod::Plain => None,
        }
    }
}

/// What to connect to and what to watch.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// `unix:PATH` or `tcp:IP[:PORT]`.
    pub remote: String,
    /// Database name (`Open_vSwitch`).
    pub database: String,
    /// Table -> columns to monitor (`None`: every column the server's schema has).
    /// Tables the server does not have are skipped.
    pub tables: BTreeMap<String, Option<Vec<String>>>,
    /// A lock to hold (ovs-vswitchd takes `ovs_vswitchd`).
    pub lock: Option<String>,
    /// The first monitor method to try; less capable ones are the fallback.
    pub method: MonitorMethod,
    /// First reconnect delay; doubles per failed attempt up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How long one request may wait for its reply.
    pub call_timeout: Duration,
    /// Send an `echo` after this long without a message and drop the connection if
    /// nothing arrives for as long again (OVS's inactivity probe: 5 s for `tcp:`, off
    /// for `unix:`, where the kernel reports a dead peer).
    pub probe_interval: Option<Duration>,
}

impl SessionConfig {
    /// Monitor `tables` (all columns) of `database` at `remote`.
    pub fn new(remote: &str, database: &str, tables: &[&str]) -> SessionConfig {
        SessionConfig {
            remote: remote.to_owned(),
            database: database.to_owned(),
            tables: tables.iter().map(|t| (t.to_string(), None)).collect(),
            lock: None,
            method: MonitorMethod::Since,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(8),
            call_timeout: Duration::from_secs(30),
            probe_interval: remote.starts_with("tcp:").then_some(Duration::from_secs(5)),
        }
    }
}

/// What [`Session::poll`] reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// (Re)connected and monitoring with `method`; a [`Event::Changes`] with the initial
    /// contents (or the difference from before the reconnect) follows if non-empty.
    /// `resumed`: the server sent only the transactions missed since the last one seen
    /// (`monitor_cond_since` on a database that keeps history, i.e. a clustered one).
    Connected {
        method: MonitorMethod,
        resumed: bool,
    },
    /// The connection dropped; the session reconnects by itself.
    Disconnected { error: String },
    /// Rows changed, in the order the server reported them.
    Changes(Vec<Change>),
    /// This session now holds the lock.
    LockAcquired,
    /// The lock was stolen or the connection holding it dropped.
    LockLost,
}

const MONITOR_ID: &str = "nicflow";

/// See the module documentation.
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    remote: Remote,
    client: Option<Client>,
    replica: Option<Replica>,
    method: Option<MonitorMethod>,
    has_lock: bool,
    last_txn: Option<Uuid>,
    next_attempt: Instant,
    backoff: Duration,
    events: VecDeque<Event>,
    connects: u64,
    probe_sent: bool,
}

impl Session {
    /// A session that connects on the first [`Session::poll`]. Fails only on a
    /// malformed remote.
    pub fn new(cfg: SessionConfig) -> Result<Session> {
        let remote = Remote::parse(&cfg.remote)?;
        let backoff = cfg.backoff_min;
        Ok(Session {
            cfg,
            remote,
            client: None,
            replica: None,
            method: None,
            has_lock: false,
            last_txn: None,
            next_attempt: Instant::now(),
            backoff,
            events: VecDeque::new(),
            connects: 0,
            probe_sent: false,
        })
    }

    /// The replica (`None` before the first successful connect).
    pub fn replica(&self) -> Option<&Replica> {
        self.replica.as_ref()
    }

    /// Connected and monitoring.
    pub fn is_connected(&self) -> bool {
        self.client.is_some()
    }

    /// The connection's descriptor while connected ([`Client::raw_fd`]), so a
    /// caller's event loop can wake when the server speaks.
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.client.as_ref().map(Client::raw_fd)
    }

    /// Holds the configured lock.
    pub fn has_lock(&self) -> bool {
        self.has_lock
    }

    /// The monitor method of the current connection.
    pub fn method(&self) -> Option<MonitorMethod> {
        self.method
    }

    /// How many times the session has connected.
    pub fn connects(&self) -> u64 {
        self.connects
    }

    /// The underlying connection, for requests the session does not wrap.
    pub fn client(&mut self) -> Option<&mut Client> {
        self.client.as_mut()
    }

    /// Run `ops` on the database. A failed operation is in the reply (see
    /// [`TxnReply::check`]); a connection error drops the connection (the session
    /// reconnects) and is returned.
    pub fn transact(&mut self, ops: &[Op]) -> Result<TxnReply> {
        let client = self.client.as_mut().ok_or(Error::NotConnected)?;
        match client.transact(&self.cfg.database, ops) {
            Err(
                e @ (Error::Io(_)
                | Error::Closed
                | Error::Framing(_)
                | Error::TooLarge { .. }
                | Error::Timeout { .. }),
            ) => {
                self.drop_connection(&e);
                Err(e)
            }
            other => other,
        }
    }

    /// Wait up to `timeout` for something to happen: (re)connects when due, applies
    /// updates to the replica, follows the lock. Returns as soon as there are events.
    pub fn poll(&mut self, timeout: Duration) -> Vec<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.client.is_none() {
                let now = Instant::now();
                if now >= self.next_attempt {
                    if let Err(e) = self.connect() {
                        // Said once per outage, then quietly while backing off.
                        if self.backoff == self.cfg.backoff_min {
                            tracing::warn!(remote = %self.remote, error = %e, "ovsdb: connect failed, retrying with backoff");
                        } else {
                            tracing::debug!(remote = %self.remote, error = %e, "ovsdb: connect failed");
                        }
                        self.client = None;
                        self.next_attempt = Instant::now() + self.backoff;
                        self.backoff = (self.backoff * 2).min(self.cfg.backoff_max);
                    }
                } else {
                    std::thread::sleep(
                        self.next_attempt
                            .min(deadline)
                            .saturating_duration_since(now),
                    );
                }
            }
            if let Some(client) = self.client.as_mut() {
                let mut wait = if self.events.is_empty() {
                    deadline.saturating_duration_since(Instant::now())
                } else {
                    Duration::ZERO
                };
                if let Some(p) = self.cfg.probe_interval {
                    let idle = client.idle();
                    if idle < p {
                        self.probe_sent = false;
                    } else if idle >= p * 2 {
                        let e = Error::Timeout {
                            method: "inactivity probe".into(),
                            timeout_ms: (p * 2).as_millis() as u64,
                        };
                        self.drop_connection(&e);
                        continue;
                    } else if !self.probe_sent {
                        self.probe_sent = true;
                        if let Err(e) = client.send_request("echo", json!([])) {
                            self.drop_connection(&e);
                            continue;
                        }
                    }
                    let next_check = if self.probe_sent { p * 2 } else { p };
                    wait = wait.min(next_check.saturating_sub(idle) + Duration::from_millis(1));
                }
                match client.next_notification(wait) {
                    Ok(Some(n)) => {
                        self.handle(n);
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => self.drop_connection(&e),
                }
            }
            if !self.events.is_empty() || Instant::now() >= deadline {
                return self.events.drain(..).collect();
            }
        }
    }

    fn drop_connection(&mut self, e: &Error) {
        tracing::warn!(remote = %self.remote, error = %e, "ovsdb: connection lost, reconnecting");
        self.client = None;
        self.probe_sent = false;
        self.method = None;
        self.events.push_back(Event::Disconnected {
            error: e.to_string(),
        });
        if self.has_lock {
            self.has_lock = false;
            self.events.push_back(Event::LockLost);
        }
        self.backoff = self.cfg.backoff_min;
        self.next_attempt = Instant::now() + self.backoff;
    }

    fn connect(&mut self) -> Result<()> {
        let mut client = Client::connect_to(&self.remote, self.cfg.call_timeout)?;
        client.call_timeout = self.cfg.call_timeout;
        let schema = client.get_schema(&self.cfg.database)?;
        let mut columns = BTreeMap::new();
        for (t, cols) in &self.cfg.tables {
            let Some(ts) = schema.table(t) else {
                tracing::warn!(
                    table = t,
                    "ovsdb: the server's schema has no such table; not monitored"
                );
                continue;
            };
            let all = || {
                ts.columns
                    .keys()
                    .filter(|c| !c.starts_with('_'))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            columns.insert(t.clone(), cols.clone().unwrap_or_else(all));
        }
        let mut fresh = Replica::new(schema, columns);

        let mut locked = false;
        if let Some(lock) = &self.cfg.lock {
            locked = client.lock(lock)?;
        }

        let mut method = self.cfg.method;
        let (resumed, changes) = loop {
            match self.monitor(&mut client, method, &mut fresh) {
                Ok(r) => break r,
                Err(Error::Rpc { error, .. })
                    if error.to_string().contains("unknown method") && method.next().is_some() =>
                {
                    tracing::info!(
                        ?method,
                        "ovsdb: server lacks this monitor method, falling back"
                    );
                    method = method.next().expect("checked");
                }
                Err(e) => return Err(e),
            }
        };
        // Resumed: `changes` were applied to the old replica already. Otherwise the
        // fresh contents replace it and the difference is the change list.
        let changes = if resumed {
            changes
        } else {
            self.replica
                .get_or_insert_with(|| {
                    // First connect: every row is an insert.
                    let mut empty = fresh.clone();
                    empty.clear();
                    empty
                })
                .replace_with(fresh)
        };
        self.client = Some(client);
        self.method = Some(method);
        self.backoff = self.cfg.backoff_min;
        self.connects += 1;
        tracing::info!(remote = %self.remote, ?method, resumed, "ovsdb: connected");
        self.events.push_back(Event::Connected { method, resumed });
        if !changes.is_empty() {
            self.events.push_back(Event::Changes(changes));
        }
        if locked {
            self.has_lock = true;
            self.events.push_back(Event::LockAcquired);
        }
        Ok(())
    }

    /// Send the monitor request; returns whether the old replica was resumed (and then
    /// the changes already applied to it) or `fresh` was filled.
    fn monitor(
        &mut self,
        client: &mut Client,
        method: MonitorMethod,
        fresh: &mut Replica,
    ) -> Result<(bool, Vec<Change>)> {
        let db = &self.cfg.database;
        let reqs: serde_json::Map<String, Value> = fresh
            .monitored()
            .iter()
            .map(|(t, cols)| {
                let r = json!({"columns": cols});
                (
                    t.clone(),
                    if method == MonitorMethod::Plain {
                        r
                    } else {
                        json!([r])
                    },
                )
            })
            .collect();
        match method {
            MonitorMethod::Since => {
                // Resuming only makes sense into a replica of the same schema.
                let resumable = self.replica.as_ref().is_some_and(|r| {
                    r.monitored() == fresh.monitored() && r.schema() == fresh.schema()
                });
                let last = if resumable {
                    self.last_txn.unwrap_or(Uuid::ZERO)
                } else {
                    Uuid::ZERO
                };
                let v = client.call(
                    "monitor_cond_since",
                    json!([db, MONITOR_ID, reqs, last.to_string()]),
                )?;
                let (found, last_id, updates) = match v.as_array().map(Vec::as_slice) {
                    Some([Value::Bool(f), Value::String(l), u]) => (*f, Uuid::parse(l), u),
                    _ => return Err(Error::Protocol(format!("monitor_cond_since reply {v}"))),
                };
                self.last_txn = last_id;
                if found && resumable && last != Uuid::ZERO {
                    let changes = self
                        .replica
                        .as_mut()
                        .expect("resumable")
                        .apply_update2(updates)?;
                    return Ok((true, changes));
                }
                fresh.apply_update2(updates)?;
            }
            MonitorMethod::Cond => {
                let v = client.call("monitor_cond", json!([db, MONITOR_ID, reqs]))?;
                fresh.apply_update2(&v)?;
            }
            MonitorMethod::Plain => {
                let v = client.call("monitor", json!([db, MONITOR_ID, reqs]))?;
                fresh.apply_update(&v)?;
            }
        }
        Ok((false, Vec::new()))
    }

    fn handle(&mut self, n: Notification) {
        let params = n.params.as_array().map(Vec::as_slice).unwrap_or(&[]);
        let ours = |id: Option<&Value>| id.and_then(Value::as_str) == Some(MONITOR_ID);
        let result = match (n.method.as_str(), params) {
            ("update", [id, updates]) if ours(Some(id)) => {
                self.replica.as_mut().map(|r| r.apply_update(updates))
            }
            ("update2", [id, updates]) if ours(Some(id)) => {
                self.replica.as_mut().map(|r| r.apply_update2(updates))
            }
            ("update3", [id, last, updates]) if ours(Some(id)) => {
                if let Some(l) = last.as_str().and_then(Uuid::parse) {
                    self.last_txn = Some(l);
                }
                self.replica.as_mut().map(|r| r.apply_update2(updates))
            }
            ("locked", [name]) if name.as_str() == self.cfg.lock.as_deref() => {
                self.has_lock = true;
                self.events.push_back(Event::LockAcquired);
                None
            }
            ("stolen", [name]) if name.as_str() == self.cfg.lock.as_deref() => {
                // We asked with "lock", so the server keeps us queued: a later "locked"
                // returns it. Asking again would be a "duplicate lock" error.
                if self.has_lock {
                    self.has_lock = false;
                    self.events.push_back(Event::LockLost);
                }
                None
            }
            _ => {
                tracing::warn!(method = n.method, "ovsdb: unexpected notification ignored");
                None
            }
        };
        match result {
            Some(Ok(changes)) if !changes.is_empty() => {
                self.events.push_back(Event::Changes(changes))
            }
            Some(Err(e)) => tracing::warn!(error = %e, "ovsdb: malformed update ignored"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::Decoder;
    use crate::replica::ChangeKind;
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};

    const U1: &str = "00000000-0000-0000-0000-000000000001";
    const U2: &str = "00000000-0000-0000-0000-000000000002";

    /// A directory removed on drop, even when the test fails.
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("nfovsdb-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn next(d: &mut Decoder, s: &mut UnixStream) -> Option<Value> {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(v) = d.next_value().unwrap() {
                return Some(v);
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => d.feed(&buf[..n]),
            }
        }
    }

    /// Serve one connection: the schema, no monitor_cond_since (so the session falls
    /// back), `initial` for monitor_cond, then `tail` raw bytes.
    fn serve(mut s: UnixStream, initial: Value, tail: &[u8]) {
        let mut d = Decoder::new(1 << 20);
        loop {
            let req = next(&mut d, &mut s).expect("request");
            let reply = match req["method"].as_str().unwrap() {
                "get_schema" => {
                    json!({"result": {"name": "Open_vSwitch", "tables": {"Bridge": {"columns": {
                    "name": {"type": "string"},
                    "ports": {"type": {"key": "uuid", "min": 0, "max": "unlimited"}}}}}}, "error": null})
                }
                "monitor_cond_since" => json!({"result": null, "error": "unknown method"}),
                "monitor_cond" => {
                    assert_eq!(
                        req["params"][2],
                        json!({"Bridge": [{"columns": ["name", "ports"]}]})
                    );
                    json!({"result": initial, "error": null})
                }
                m => panic!("unexpected {m}"),
            };
            let mut reply = reply;
            reply["id"] = req["id"].clone();
            s.write_all(reply.to_string().as_bytes()).unwrap();
            if req["method"] == "monitor_cond" {
                s.write_all(tail).unwrap();
                // Read and ignore until the client drops the connection.
                while next(&mut d, &mut s).is_some() {}
                return;
            }
        }
    }

    /// A server that stops talking (no reset, no data) is noticed by the inactivity
    /// probe, and the session reconnects.
    #[test]
    fn silent_server_is_dropped_by_the_probe() {
        let dir = TempDir::new("silent");
        let path = dir.0.join("db.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            // Answers the session's setup, then reads and ignores everything.
            let (s, _) = listener.accept().unwrap();
            serve(s, json!({}), b"");
            let (s, _) = listener.accept().unwrap();
            serve(s, json!({}), b"");
        });
        let mut cfg = SessionConfig::new(
            &format!("unix:{}", path.display()),
            "Open_vSwitch",
            &["Bridge"],
        );
        cfg.probe_interval = Some(Duration::from_millis(200));
        cfg.backoff_min = Duration::from_millis(20);
        let mut s = Session::new(cfg).unwrap();
        let start = Instant::now();
        let mut events = Vec::new();
        while s.connects() < 2 {
            assert!(start.elapsed() < Duration::from_secs(5), "{events:?}");
            events.extend(s.poll(Duration::from_millis(50)));
        }
        assert!(
            start.elapsed() >= Duration::from_millis(400),
            "dropped before the probe could be answered"
        );
        assert!(
            events.iter().any(
                |e| matches!(e, Event::Disconnected { error } if error.contains("inactivity probe"))
            ),
            "{events:?}"
        );
        drop(s);
        server.join().unwrap();
    }

    /// Malformed input from the server (garbage on the stream, unknown tables and
    /// columns, bad rows) is never fatal: the session skips what it cannot read,
    /// reconnects after a broken stream, and reports only real changes.
    #[test]
    fn malformed_server_input_is_survived() {
        let dir = TempDir::new("fake");
        let path = dir.0.join("db.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            serve(
                s,
                json!({"Bridge": {U1: {"initial": {"name": "a"}}}}),
                b"{\"id\": null, \"method\": \"update2\"}} garbage",
            );
            let (s, _) = listener.accept().unwrap();
            let tail = [
                json!({"id": null, "method": "update2", "params": ["nicflow", {"No_Table": {U1: {"insert": {}}}, "Bridge": {
                    "not-a-uuid": {"insert": {}},
                    U2: {"modify": {"no_column": 1, "name": "b2", "ports": ["uuid", U1]}}}}]}),
                json!({"id": null, "method": "update2", "params": ["other-monitor", {"Bridge": {U2: {"delete": null}}}]}),
                json!({"id": null, "method": "surprise", "params": 7}),
            ]
            .iter()
            .map(Value::to_string)
            .collect::<String>();
            serve(
                s,
                json!({"Bridge": {U2: {"initial": {"name": "b", "extra": true}}}, "Unknown": {}}),
                tail.as_bytes(),
            );
        });

        let mut cfg = SessionConfig::new(
            &format!("unix:{}", path.display()),
            "Open_vSwitch",
            &["Bridge", "Port"],
        );
        cfg.backoff_min = Duration::from_millis(20);
        let mut s = Session::new(cfg).unwrap();
        let mut events = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while s
            .replica()
            .and_then(|r| r.find("Bridge", "name", "b2"))
            .is_none()
        {
            assert!(Instant::now() < deadline, "{events:?}");
            events.extend(s.poll(Duration::from_millis(50)));
        }
        let u1 = Uuid::parse(U1).unwrap();
        let u2 = Uuid::parse(U2).unwrap();
        let kinds: Vec<_> = events
            .iter()
            .map(|e| match e {
                Event::Changes(c) => format!(
                    "{:?}",
                    c.iter()
                        .map(|c| (c.uuid, c.kind.clone()))
                        .collect::<Vec<_>>()
                ),
                Event::Disconnected { .. } => "down".into(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                "Connected { method: Cond, resumed: false }".to_string(),
                format!("{:?}", vec![(u1, ChangeKind::Insert)]),
                "down".into(),
                "Connected { method: Cond, resumed: false }".into(),
                format!(
                    "{:?}",
                    vec![(u1, ChangeKind::Delete), (u2, ChangeKind::Insert)]
                ),
                format!(
                    "{:?}",
                    vec![(
                        u2,
                        ChangeKind::Modify {
                            columns: vec!["name".into(), "ports".into()]
                        }
                    )]
                ),
            ]
        );
        let r = s.replica().unwrap();
        assert_eq!(
            r.row("Bridge", &u2).unwrap()["ports"]
                .uuids()
                .collect::<Vec<_>>(),
            vec![u1]
        );
        assert_eq!(s.connects(), 2);
        drop(s);
        server.join().unwrap();
    }
}
