//! nicflow-ovsdb against the real ovsdb-server (Open vSwitch's, with the real
//! `vswitch.ovsschema`), changed by the real `ovs-vsctl` and `ovsdb-tool`.
//!
//! Each test starts its own ovsdb-server in a fresh directory named after the test and
//! this process id, and kills and removes it in `Drop`, even when the test fails.
//! Skipped, with a message, when the Open vSwitch binaries are missing.

use nicflow_ovsdb::*;
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";
const DB: &str = "Open_vSwitch";
const TABLES: &[&str] = &[
    "Open_vSwitch",
    "Bridge",
    "Port",
    "Interface",
    "Controller",
    "No_Such_Table",
];

struct Server {
    dir: PathBuf,
    tcp_port: Option<u16>,
    pid: Option<u32>,
}

fn have_ovs() -> bool {
    let ok = ["ovsdb-server", "ovsdb-tool", "ovs-vsctl"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) && std::path::Path::new(SCHEMA).exists();
    if !ok {
        eprintln!("SKIP: ovsdb-server, ovsdb-tool, ovs-vsctl or {SCHEMA} missing (install openvswitch-switch)");
    }
    ok
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Server {
    fn start(name: &str, tcp: bool) -> Option<Server> {
        Self::start_with(name, tcp, false)
    }

    /// `clustered`: a one-server Raft cluster, the kind of database that keeps
    /// transaction history, so `monitor_cond_since` can resume.
    fn start_with(name: &str, tcp: bool, clustered: bool) -> Option<Server> {
        if !have_ovs() {
            return None;
        }
        let dir = PathBuf::from(format!("/tmp/nfovsdb-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let tcp_port = tcp.then(|| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        });
        let mut s = Server {
            dir,
            tcp_port,
            pid: None,
        };
        if clustered {
            let raft = format!("unix:{}", s.dir.join("raft.sock").display());
            run(Command::new("ovsdb-tool")
                .arg("create-cluster")
                .arg(s.db())
                .arg(SCHEMA)
                .arg(raft));
        } else {
            run(Command::new("ovsdb-tool")
                .arg("create")
                .arg(s.db())
                .arg(SCHEMA));
        }
        s.launch();
        s.vsctl(&["init"]);
        Some(s)
    }

    fn db(&self) -> PathBuf {
        self.dir.join("conf.db")
    }

    fn unix(&self) -> String {
        format!("unix:{}", self.dir.join("db.sock").display())
    }

    fn tcp(&self) -> String {
        format!("tcp:127.0.0.1:{}", self.tcp_port.unwrap())
    }

    fn launch(&mut self) {
        let mut cmd = Command::new("ovsdb-server");
        cmd.arg(format!("--remote=p{}", self.unix()))
            .arg(format!("--pidfile={}", self.dir.join("pid").display()))
            .arg(format!("--unixctl={}", self.dir.join("ctl").display()))
            .arg(format!("--log-file={}", self.dir.join("log").display()))
            .args(["--detach", "--no-chdir"]);
        if let Some(p) = self.tcp_port {
            cmd.arg(format!("--remote=ptcp:{p}:127.0.0.1"));
        }
        run(cmd.arg(self.db()));
        let pid = std::fs::read_to_string(self.dir.join("pid")).unwrap();
        self.pid = Some(pid.trim().parse().unwrap());
    }

    fn stop(&mut self) {
        let Some(pid) = self.pid.take() else { return };
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            if Instant::now() > deadline {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn vsctl(&self, args: &[&str]) -> String {
        run(Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.unix()))
            .args(["--no-wait", "--timeout=10"])
            .args(args))
    }
}

impl Server {
    fn appctl(&self, args: &[&str]) -> String {
        run(Command::new("ovs-appctl")
            .arg("-t")
            .arg(self.dir.join("ctl"))
            .args(args))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn session(remote: &str, method: MonitorMethod, lock: Option<&str>) -> Session {
    let mut cfg = SessionConfig::new(remote, DB, TABLES);
    cfg.method = method;
    cfg.lock = lock.map(str::to_owned);
    cfg.backoff_min = Duration::from_millis(50);
    cfg.backoff_max = Duration::from_millis(400);
    cfg.call_timeout = Duration::from_secs(10);
    Session::new(cfg).unwrap()
}

/// Poll until `pred` holds on the replica; returns every event seen.
fn wait_until(s: &mut Session, what: &str, pred: impl Fn(&Replica) -> bool) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut events = Vec::new();
    loop {
        if s.replica().is_some_and(&pred) {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; events {events:?}"
        );
        events.extend(s.poll(Duration::from_millis(100)));
    }
}

fn changes(events: &[Event]) -> Vec<&Change> {
    events
        .iter()
        .filter_map(|e| {
            if let Event::Changes(c) = e {
                Some(c)
            } else {
                None
            }
        })
        .flatten()
        .collect()
}

fn bridge<'a>(r: &'a Replica, name: &str) -> Option<(Uuid, &'a Row)> {
    r.find("Bridge", "name", name)
}

/// A replica read by a session that just connected.
fn fresh_replica(remote: &str, method: MonitorMethod) -> Replica {
    let mut s = session(remote, method, None);
    wait_until(&mut s, "first connect", |_| true);
    s.replica().unwrap().clone()
}

#[test]
fn monitors_follow_vsctl_with_every_method() {
    let Some(srv) = Server::start("follow", false) else {
        return;
    };
    let remote = srv.unix();
    let mut sessions: Vec<Session> = [
        MonitorMethod::Since,
        MonitorMethod::Cond,
        MonitorMethod::Plain,
    ]
    .into_iter()
    .map(|m| session(&remote, m, None))
    .collect();
    for s in &mut sessions {
        let ev = wait_until(s, "connect", |_| true);
        // The first contents arrive as inserts, so a reconciler needs no special start.
        let ch = changes(&ev);
        assert!(
            ch.len() == 1 && ch[0].table == "Open_vSwitch" && ch[0].kind == ChangeKind::Insert,
            "{ev:?}"
        );
    }
    // ovsdb-server 3.1 offers monitor_cond_since; each session uses what it asked for.
    let methods: Vec<_> = sessions.iter().map(|s| s.method().unwrap()).collect();
    assert_eq!(
        methods,
        [
            MonitorMethod::Since,
            MonitorMethod::Cond,
            MonitorMethod::Plain
        ]
    );
    assert!(sessions[0]
        .replica()
        .unwrap()
        .monitored()
        .get("No_Such_Table")
        .is_none());

    srv.vsctl(&["add-br", "br0"]);
    for s in &mut sessions {
        let ev = wait_until(s, "br0", |r| bridge(r, "br0").is_some());
        let r = s.replica().unwrap();
        let (bu, _) = bridge(r, "br0").unwrap();
        let (_, ovs) = r.rows("Open_vSwitch").next().unwrap();
        assert_eq!(ovs["bridges"].uuids().collect::<Vec<_>>(), vec![bu]);
        assert_eq!(
            r.find("Interface", "name", "br0").unwrap().1["type"].as_str(),
            Some("internal")
        );
        let ch = changes(&ev);
        assert!(
            ch.iter()
                .any(|c| c.table == "Bridge" && c.kind == ChangeKind::Insert && c.uuid == bu),
            "{ch:?}"
        );
        assert!(ch.iter().any(|c| c.table == "Open_vSwitch" && matches!(&c.kind, ChangeKind::Modify { columns } if columns.contains(&"bridges".to_string()))));
    }

    srv.vsctl(&[
        "add-port",
        "br0",
        "p1",
        "--",
        "set",
        "Interface",
        "p1",
        "type=internal",
        "ofport_request=7",
    ]);
    for s in &mut sessions {
        let ev = wait_until(s, "p1", |r| bridge(r, "br0").unwrap().1["ports"].len() == 2);
        let ch = changes(&ev);
        assert!(
            ch.iter().any(|c| c.table == "Bridge"
                && c.kind
                    == ChangeKind::Modify {
                        columns: vec!["ports".into()]
                    }),
            "{ch:?}"
        );
        let r = s.replica().unwrap();
        assert_eq!(
            r.find("Interface", "name", "p1").unwrap().1["ofport_request"].as_int(),
            Some(7)
        );
    }

    // Map and set diffs: add, change, remove keys; add and remove set elements; an
    // optional column set and cleared.
    let steps: &[&[&str]] = &[
        &[
            "set",
            "Bridge",
            "br0",
            "other_config:a=1",
            "other_config:b=2",
            "protocols=OpenFlow13,OpenFlow15",
            "fail_mode=secure",
        ],
        &[
            "set",
            "Bridge",
            "br0",
            "other_config:a=9",
            "protocols=OpenFlow10,OpenFlow13",
        ],
        &[
            "remove",
            "Bridge",
            "br0",
            "other_config",
            "b",
            "--",
            "clear",
            "Bridge",
            "br0",
            "fail_mode",
        ],
        &["del-port", "br0", "p1"],
    ];
    for (i, step) in steps.iter().enumerate() {
        srv.vsctl(step);
        let want = srv.vsctl(&[
            "get",
            "Bridge",
            "br0",
            "other_config",
            "protocols",
            "fail_mode",
            "ports",
        ]);
        for s in &mut sessions {
            let ev = wait_until(s, &format!("step {i}"), |r| {
                let b = bridge(r, "br0").unwrap().1;
                let oc: Vec<_> = b["other_config"]
                    .pairs()
                    .iter()
                    .map(|(k, v)| format!("{}=\"{}\"", k.as_str().unwrap(), v.as_str().unwrap()))
                    .collect();
                want.lines().next() == Some(&format!("{{{}}}", oc.join(", ")))
                    && want.lines().nth(3).map(|l| l.matches('-').count() / 4)
                        == Some(b["ports"].len())
            });
            assert!(!changes(&ev).is_empty());
            let b = bridge(s.replica().unwrap(), "br0").unwrap().1.clone();
            let protos: Vec<_> = b["protocols"]
                .atoms()
                .iter()
                .map(|a| format!("{:?}", a.as_str().unwrap()))
                .collect();
            assert_eq!(
                want.lines().nth(1).unwrap(),
                format!("[{}]", protos.join(", ")).replace('"', ""),
                "step {i}"
            );
            assert_eq!(
                want.lines().nth(2).unwrap(),
                b["fail_mode"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or("[]".into()),
                "step {i}"
            );
        }
    }
    // Every method ends with the same replica, equal to one read from scratch.
    let fresh = fresh_replica(&remote, MonitorMethod::Cond);
    for s in &sessions {
        assert_eq!(s.replica().unwrap(), &fresh, "{:?}", s.method());
    }
    assert!(fresh.find("Interface", "name", "p1").is_none());
}

#[test]
fn transact_inserts_a_bridge_that_vsctl_sees() {
    let Some(srv) = Server::start("transact", false) else {
        return;
    };
    let mut c = Client::connect(&srv.unix()).unwrap();
    assert!(c.list_dbs().unwrap().contains(&DB.to_string()));
    let schema = c.get_schema(DB).unwrap();
    let s = |v: &str| Datum::atom(v);
    let named = |n: &str| Datum::set([Atom::NamedUuid(n.into())]);
    let ops = vec![
        Op::Comment("nicflow-ovsdb test".into()),
        Op::Insert {
            table: "Interface".into(),
            row: [("name".into(), s("brx")), ("type".into(), s("internal"))].into(),
            uuid_name: Some("i".into()),
        },
        Op::Insert {
            table: "Port".into(),
            row: [("name".into(), s("brx")), ("interfaces".into(), named("i"))].into(),
            uuid_name: Some("p".into()),
        },
        Op::Insert {
            table: "Bridge".into(),
            row: [
                ("name".into(), s("brx")),
                ("ports".into(), named("p")),
                (
                    "external_ids".into(),
                    Datum::map([("owner".into(), "nicflow".into())]),
                ),
            ]
            .into(),
            uuid_name: Some("b".into()),
        },
        Op::Mutate {
            table: "Open_vSwitch".into(),
            conditions: vec![],
            mutations: vec![Mutation::new("bridges", Mutator::Insert, named("b"))],
        },
    ];
    let reply = c.transact(DB, &ops).unwrap().check().unwrap();
    let bu = reply.uuid(3).unwrap();
    assert_eq!(reply.count(4), Some(1));
    assert_eq!(srv.vsctl(&["list-br"]).trim(), "brx");
    assert_eq!(
        srv.vsctl(&["get", "Bridge", "brx", "_uuid"]).trim(),
        bu.to_string()
    );
    assert_eq!(
        srv.vsctl(&["get", "Bridge", "brx", "external_ids:owner"])
            .trim(),
        "nicflow"
    );
    assert!(srv.vsctl(&["list", "Bridge"]).contains(&bu.to_string()));

    // select, update, wait and a read back through the schema.
    let reply = c
        .transact(
            DB,
            &[
                Op::Update {
                    table: "Bridge".into(),
                    conditions: vec![Condition::uuid(bu)],
                    row: [("fail_mode".into(), s("secure"))].into(),
                },
                Op::Wait {
                    table: "Bridge".into(),
                    conditions: vec![Condition::eq("name", s("brx"))],
                    columns: vec!["fail_mode".into()],
                    until: Until::Equal,
                    rows: vec![[("fail_mode".into(), s("secure"))].into()],
                    timeout_ms: Some(0),
                },
                Op::Select {
                    table: "Bridge".into(),
                    conditions: vec![Condition::eq("name", s("brx"))],
                    columns: Some(vec!["name".into(), "fail_mode".into(), "ports".into()]),
                },
            ],
        )
        .unwrap()
        .check()
        .unwrap();
    assert_eq!(reply.count(0), Some(1));
    let replica = Replica::new(schema, Default::default());
    let rows = reply.rows(2).unwrap();
    assert_eq!(rows.len(), 1);
    let row = replica.parse_row("Bridge", &rows[0]);
    assert_eq!(row["fail_mode"].as_str(), Some("secure"));
    assert_eq!(row["ports"].len(), 1);
    assert_eq!(srv.vsctl(&["get-fail-mode", "brx"]).trim(), "secure");

    // delete: unhook from Open_vSwitch, then the row goes (Port and Interface are
    // garbage-collected by the server).
    c.transact(
        DB,
        &[
            Op::Mutate {
                table: "Open_vSwitch".into(),
                conditions: vec![],
                mutations: vec![Mutation::new("bridges", Mutator::Delete, Datum::atom(bu))],
            },
            Op::Delete {
                table: "Bridge".into(),
                conditions: vec![Condition::uuid(bu)],
            },
        ],
    )
    .unwrap()
    .check()
    .unwrap();
    assert_eq!(srv.vsctl(&["list-br"]).trim(), "");
    assert_eq!(
        srv.vsctl(&["--columns=name", "list", "Interface"]).trim(),
        ""
    );
}

#[test]
fn bad_transactions_fail_alone() {
    let Some(srv) = Server::start("badtxn", false) else {
        return;
    };
    let mut s = session(&srv.unix(), MonitorMethod::Since, None);
    wait_until(&mut s, "connect", |_| true);
    let s_ = |v: &str| Datum::atom(v);

    let bad: Vec<(Vec<Op>, usize, &str)> = vec![
        (
            vec![
                Op::Comment("x".into()),
                Op::Select {
                    table: "No_Such_Table".into(),
                    conditions: vec![],
                    columns: None,
                },
            ],
            1,
            "No table named No_Such_Table",
        ),
        (
            vec![Op::Update {
                table: "Bridge".into(),
                conditions: vec![],
                row: [("no_such_column".into(), s_("x"))].into(),
            }],
            0,
            "unknown column",
        ),
        // A Port needs an Interface (its default is the zero uuid, which refers to no
        // row): the operation succeeds and the commit fails, reported one past the ops.
        (
            vec![Op::Insert {
                table: "Port".into(),
                row: [("name".into(), s_("lonely"))].into(),
                uuid_name: None,
            }],
            1,
            "referential integrity violation",
        ),
        (
            vec![Op::Wait {
                table: "Open_vSwitch".into(),
                conditions: vec![],
                columns: vec!["next_cfg".into()],
                until: Until::Equal,
                rows: vec![[("next_cfg".into(), Datum::atom(424242))].into()],
                timeout_ms: Some(0),
            }],
            0,
            "timed out",
        ),
        (
            vec![Op::Assert {
                lock: "ovs_vswitchd".into(),
            }],
            0,
            "not owner",
        ),
    ];
    for (ops, index, want) in bad {
        let reply = match s.transact(&ops) {
            Ok(r) => r,
            // ovsdb-server answers a malformed transaction (unknown table) with a
            // JSON-RPC error rather than a per-operation one.
            Err(Error::Rpc { error, .. }) => {
                assert!(error.to_string().contains(want), "{error}");
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        match reply.clone().check() {
            Err(Error::Transaction {
                index: i,
                error,
                details,
            }) => {
                assert_eq!(i, index, "{reply:?}");
                assert!(
                    format!("{error}: {details:?}").contains(want),
                    "{want}: {reply:?}"
                );
            }
            other => panic!("expected {want}, got {other:?}"),
        }
    }
    // The session survived every refusal: same connection, the monitor still works,
    // and nothing was half-applied.
    assert!(s.is_connected());
    assert_eq!(s.connects(), 1);
    assert!(s.replica().unwrap().rows("Port").next().is_none());
    srv.vsctl(&["add-br", "ok0"]);
    wait_until(&mut s, "ok0", |r| bridge(r, "ok0").is_some());
    let r = s.transact(&[Op::Update {
        table: "Bridge".into(),
        conditions: vec![Condition::eq("name", s_("ok0"))],
        row: [("fail_mode".into(), s_("standalone"))].into(),
    }]);
    assert_eq!(r.unwrap().check().unwrap().count(0), Some(1));
    wait_until(&mut s, "fail_mode", |r| {
        bridge(r, "ok0").unwrap().1["fail_mode"].as_str() == Some("standalone")
    });
    assert_eq!(s.connects(), 1);
}

#[test]
fn two_clients_contend_for_the_vswitchd_lock() {
    let Some(srv) = Server::start("lock", false) else {
        return;
    };
    let lock = "ovs_vswitchd";
    let notif = |c: &mut Client| {
        c.next_notification(Duration::from_secs(5))
            .unwrap()
            .expect("a notification")
    };
    let mut a = Client::connect(&srv.unix()).unwrap();
    let mut b = Client::connect(&srv.unix()).unwrap();
    assert!(a.lock(lock).unwrap());
    assert!(!b.lock(lock).unwrap(), "second locker must wait");
    a.unlock(lock).unwrap();
    assert_eq!(
        notif(&mut b),
        Notification {
            method: "locked".into(),
            params: json!([lock])
        }
    );
    a.steal(lock).unwrap();
    assert_eq!(
        notif(&mut b),
        Notification {
            method: "stolen".into(),
            params: json!([lock])
        }
    );
    // Only the owner's assert passes.
    let assert_lock = [Op::Assert { lock: lock.into() }];
    assert!(a.transact(DB, &assert_lock).unwrap().check().is_ok());
    assert!(b.transact(DB, &assert_lock).unwrap().check().is_err());

    // The session follows the lock: it waits behind the stealer, gets it back when the
    // stealer lets go, loses it when stolen, and regains it (it stays queued).
    let mut s = session(&srv.unix(), MonitorMethod::Since, Some(lock));
    wait_until(&mut s, "connect", |_| true);
    drop(b);
    assert!(!s.has_lock());
    a.unlock(lock).unwrap();
    let ev = s.poll(Duration::from_secs(5));
    assert_eq!(ev, vec![Event::LockAcquired]);
    assert!(s.has_lock());
    assert!(s.transact(&assert_lock).unwrap().check().is_ok());
    a.steal(lock).unwrap();
    assert_eq!(s.poll(Duration::from_secs(5)), vec![Event::LockLost]);
    assert!(!s.has_lock());
    assert!(s.transact(&assert_lock).unwrap().check().is_err());
    a.unlock(lock).unwrap();
    assert_eq!(s.poll(Duration::from_secs(5)), vec![Event::LockAcquired]);
    assert!(s.has_lock());
}

#[test]
fn server_restart_reconnects_to_the_same_replica() {
    let Some(mut srv) = Server::start("restart", false) else {
        return;
    };
    let remote = srv.unix();
    let mut s = session(&remote, MonitorMethod::Since, Some("ovs_vswitchd"));
    let ev = wait_until(&mut s, "lock", |_| true);
    assert!(ev.contains(&Event::LockAcquired) || s.has_lock());
    srv.vsctl(&[
        "add-br",
        "br0",
        "--",
        "add-br",
        "br1",
        "--",
        "add-port",
        "br1",
        "p1",
        "--",
        "set",
        "Interface",
        "p1",
        "type=internal",
    ]);
    wait_until(&mut s, "bridges", |r| {
        bridge(r, "br1").is_some() && r.find("Interface", "name", "p1").is_some()
    });
    let br1 = bridge(s.replica().unwrap(), "br1").unwrap().0;

    srv.stop();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !events
        .iter()
        .any(|e| matches!(e, Event::Disconnected { .. }))
    {
        assert!(Instant::now() < deadline, "no disconnect seen: {events:?}");
        events.extend(s.poll(Duration::from_millis(100)));
    }
    assert!(events.contains(&Event::LockLost));
    assert!(!s.has_lock());
    // While the server is down, the database changes behind the session's back.
    let txn = json!([DB,
        {"op": "update", "table": "Bridge", "where": [["name", "==", "br0"]], "row": {"fail_mode": "secure"}},
        {"op": "mutate", "table": "Open_vSwitch", "where": [], "mutations": [["bridges", "delete", ["uuid", br1.to_string()]]]}]);
    run(Command::new("ovsdb-tool")
        .arg("transact")
        .arg(srv.db())
        .arg(txn.to_string()));
    // Polls while down fail and back off, without events or panics.
    assert!(s.poll(Duration::from_millis(300)).is_empty());
    srv.launch();

    let ev = wait_until(&mut s, "resync", |r| bridge(r, "br1").is_none());
    // A standalone database keeps no history: the server resends everything and the
    // session reports the difference.
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Connected { resumed: false, .. })),
        "{ev:?}"
    );
    let ev = [ev, wait_until(&mut s, "lock", |_| true)].concat();
    assert!(
        s.has_lock()
            || s.poll(Duration::from_secs(2))
                .contains(&Event::LockAcquired),
        "{ev:?}"
    );
    assert!(s.has_lock());
    assert_eq!(s.connects(), 2);
    let ch = changes(&ev);
    assert!(
        ch.iter()
            .any(|c| c.table == "Bridge" && c.uuid == br1 && c.kind == ChangeKind::Delete),
        "{ch:?}"
    );
    assert!(ch.iter().any(|c| c.table == "Interface"
        && c.kind == ChangeKind::Delete
        && c.old.as_ref().unwrap()["name"].as_str() == Some("p1")));
    assert!(
        ch.iter().any(|c| c.table == "Bridge"
            && c.kind
                == ChangeKind::Modify {
                    columns: vec!["fail_mode".into()]
                }),
        "{ch:?}"
    );
    // Only the difference is reported, not the unchanged rows.
    assert!(!ch.iter().any(|c| c.kind == ChangeKind::Insert), "{ch:?}");

    srv.vsctl(&["add-br", "br2"]);
    wait_until(&mut s, "br2", |r| bridge(r, "br2").is_some());
    assert_eq!(
        s.replica().unwrap(),
        &fresh_replica(&remote, MonitorMethod::Since)
    );
    assert_eq!(
        s.replica().unwrap(),
        &fresh_replica(&remote, MonitorMethod::Plain)
    );
}

#[test]
fn tcp_remote_and_echo_keepalive() {
    let Some(srv) = Server::start("tcp", true) else {
        return;
    };
    let mut c = Client::connect(&srv.tcp()).unwrap();
    c.echo().unwrap();
    assert!(c.list_dbs().unwrap().contains(&DB.to_string()));
    let mut s = session(&srv.tcp(), MonitorMethod::Since, None);
    wait_until(&mut s, "connect", |_| true);
    // Our own probe (on by default for tcp:) would keep the server from probing;
    // a second session runs without it, so only answering the server's echo keeps it.
    let mut cfg = SessionConfig::new(&srv.tcp(), DB, TABLES);
    assert_eq!(cfg.probe_interval, Some(Duration::from_secs(5)));
    cfg.probe_interval = None;
    let mut quiet = Session::new(cfg).unwrap();
    wait_until(&mut quiet, "connect", |_| true);
    // ovsdb-server probes an idle TCP client with "echo" after 5 s and drops it 5 s
    // later without an answer; the session answers while it polls.
    let start = Instant::now();
    let mut events = Vec::new();
    while start.elapsed() < Duration::from_secs(12) {
        events.extend(s.poll(Duration::from_millis(250)));
        events.extend(quiet.poll(Duration::from_millis(250)));
    }
    assert!(events.is_empty(), "{events:?}");
    srv.vsctl(&["add-br", "tbr"]);
    for s in [&mut s, &mut quiet] {
        wait_until(s, "tbr", |r| bridge(r, "tbr").is_some());
        assert_eq!(s.connects(), 1);
    }
}

#[test]
fn raw_monitor_cond_and_cancel() {
    let Some(srv) = Server::start("cancel", false) else {
        return;
    };
    let mut c = Client::connect(&srv.unix()).unwrap();
    let initial = c
        .call(
            "monitor_cond",
            json!([DB, "m1", {"Bridge": [{"columns": ["name"]}]}]),
        )
        .unwrap();
    assert_eq!(initial, json!({}));
    srv.vsctl(&["add-br", "m0"]);
    let n = c
        .next_notification(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert_eq!(n.method, "update2");
    assert_eq!(n.params[0], json!("m1"));
    c.monitor_cancel(&json!("m1")).unwrap();
    srv.vsctl(&["add-br", "m1"]);
    assert_eq!(
        c.next_notification(Duration::from_millis(500)).unwrap(),
        None
    );
    // Cancelling twice is the server's error, and the connection stays usable.
    assert!(matches!(
        c.monitor_cancel(&json!("m1")),
        Err(Error::Rpc { .. })
    ));
    c.echo().unwrap();
}

#[test]
fn clustered_database_resumes_after_a_dropped_connection() {
    let Some(srv) = Server::start_with("resume", false, true) else {
        return;
    };
    let remote = srv.unix();
    // ovsdb-server keeps history only while it holds fewer atoms than the database
    // (past that a snapshot is cheaper), and a transaction's history holds whole
    // rows: give the database some bulk in a row later transactions do not touch.
    let bulk: Vec<String> = (0..300)
        .map(|i| format!("external_ids:k{i}=v{i}"))
        .collect();
    let mut args = vec!["add-br", "bulk", "--", "set", "Bridge", "bulk"];
    args.extend(bulk.iter().map(String::as_str));
    srv.vsctl(&args);
    let mut s = session(&remote, MonitorMethod::Since, None);
    wait_until(&mut s, "connect", |_| true);
    srv.vsctl(&["add-br", "br0"]);
    wait_until(&mut s, "br0", |r| bridge(r, "br0").is_some());
    // The server drops every client; the database changes before the session is back.
    srv.appctl(&["ovsdb-server/reconnect"]);
    srv.vsctl(&[
        "add-br",
        "br1",
        "--",
        "set",
        "Bridge",
        "br0",
        "fail_mode=secure",
    ]);
    let ev = wait_until(&mut s, "br1", |r| bridge(r, "br1").is_some());
    assert!(
        ev.iter().any(|e| matches!(e, Event::Disconnected { .. })),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Connected {
                method: MonitorMethod::Since,
                resumed: true
            }
        )),
        "{ev:?}"
    );
    let ch = changes(&ev);
    // Only what was missed: br1's rows and br0's fail_mode, Open_vSwitch.bridges.
    assert!(ch.iter().all(|c| c.kind != ChangeKind::Delete), "{ch:?}");
    assert!(
        ch.iter().any(|c| c.table == "Bridge"
            && c.kind
                == ChangeKind::Modify {
                    columns: vec!["fail_mode".into()]
                }),
        "{ch:?}"
    );
    assert_eq!(
        ch.iter().filter(|c| c.kind == ChangeKind::Insert).count(),
        3,
        "{ch:?}"
    );
    assert_eq!(ch.len(), 5, "{ch:?}");
    assert_eq!(s.connects(), 2);
    assert_eq!(
        s.replica().unwrap(),
        &fresh_replica(&remote, MonitorMethod::Cond)
    );
}
