//! `nicflow vswitchd`: nicflow in ovs-vswitchd's place under a real
//! `ovsdb-server`. It takes the `ovs_vswitchd` lock, monitors the
//! `Open_vSwitch` database ([`nicflow_ovsdb::Session`]), converges the
//! switch to it ([`reconcile`]) and writes back what ovs-vswitchd writes
//! ([`writeback`]). It runs inside the ordinary daemon loop
//! ([`crate::control::daemon::run_with`]), so the control socket and the
//! CLI keep working beside it; OVSDB is the source of truth, and what the
//! CLI changes the next update puts back.
//!
//! | module | job |
//! | --- | --- |
//! | [`desired`] | the bridges and interfaces the database asks for |
//! | [`reconcile`] | converging the switch to them, through `Switch::handle` |
//! | [`writeback`] | `cur_cfg`, `ofport`/`error`, kernel state, capabilities |
//! | [`netdev`] | sysfs and the route to a tunnel's remote |
//! | [`process`] | pidfile, `--detach`, `--log-file` |

pub mod desired;
pub mod netdev;
pub mod process;
pub mod reconcile;
pub mod writeback;

use crate::control::daemon::Hook;
use crate::control::switch::Switch;
use desired::Desired;
use nicflow_ovsdb::{Event, Op, Session, SessionConfig};
use reconcile::Applied;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The lock ovs-vswitchd holds: one writer of the status columns.
pub const LOCK: &str = "ovs_vswitchd";
/// How often `statistics` are refreshed (OVS's `stats-update-interval`).
const STATS_INTERVAL: Duration = Duration::from_secs(5);
/// How often interfaces that failed are tried again without a database
/// change (a device that appears later).
const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// The tables monitored (every column; those the server lacks are skipped).
pub const TABLES: [&str; 8] = [
    "Open_vSwitch",
    "Bridge",
    "Port",
    "Interface",
    "Controller",
    "Datapath",
    "QoS",
    "Queue",
];

/// `$OVS_RUNDIR`, default `/var/run/openvswitch`.
pub fn rundir() -> PathBuf {
    std::env::var_os("OVS_RUNDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/run/openvswitch"))
}

/// `$OVS_LOGDIR`, default `/var/log/openvswitch`.
pub fn logdir() -> PathBuf {
    std::env::var_os("OVS_LOGDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/log/openvswitch"))
}

/// `unix:$OVS_RUNDIR/db.sock`.
pub fn default_database() -> String {
    format!("unix:{}", rundir().join("db.sock").display())
}

/// The OVSDB side of the daemon: the [`Hook`] the loop calls.
pub struct Vswitchd {
    session: Session,
    rundir: PathBuf,
    applied: Applied,
    /// The configuration last converged to (`None`: converge at the next poll).
    last: Option<Desired>,
    /// Status columns are due (something was applied or the kernel state may have moved).
    dirty: bool,
    last_stats: Instant,
    last_retry: Instant,
    /// The last write-back error (logged once).
    write_error: Option<String>,
    /// `--detach`: the parent waits until the first configuration is
    /// applied and written back (or [`READY_WAIT`] passed, database or not).
    detached: process::Detached,
    started: Instant,
    /// The last poll brought events: more may be buffered.
    more: bool,
}

/// The longest `--detach` waits for the database before returning.
const READY_WAIT: Duration = Duration::from_secs(5);

impl Vswitchd {
    /// A session to `database` (`unix:PATH` or `tcp:IP:PORT`); it connects
    /// on the first poll and reconnects by itself.
    pub fn new(database: &str, rundir: PathBuf) -> anyhow::Result<Vswitchd> {
        let mut cfg = SessionConfig::new(database, "Open_vSwitch", &TABLES);
        cfg.lock = Some(LOCK.to_string());
        let session = Session::new(cfg)?;
        let now = Instant::now();
        Ok(Vswitchd {
            session,
            rundir,
            applied: Applied::default(),
            last: None,
            dirty: true,
            last_stats: now,
            last_retry: now,
            write_error: None,
            detached: process::Detached::none(),
            started: now,
            more: false,
        })
    }

    /// Signal `d` once ready (see [`Vswitchd::detached`]).
    pub fn when_ready(&mut self, d: process::Detached) {
        self.detached = d;
    }

    /// Poll the session (never waiting), converge, write back.
    pub fn step(&mut self, sw: &mut Switch, now: Instant, tick: bool) {
        if now.duration_since(self.started) >= READY_WAIT {
            self.detached.ready();
        }
        // Read only when the server has spoken (or bytes may be buffered
        // from the last read), and once a tick (reconnects, probes): a
        // session poll that finds nothing waits its whole timeout.
        let readable = self.session.raw_fd().is_some_and(|fd| {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut p, 1, 0) > 0 }
        });
        let events = if readable || tick || self.more {
            self.session.poll(Duration::from_millis(1))
        } else {
            Vec::new()
        };
        self.more = !events.is_empty();
        // The database is read again only when something arrived (or once
        // a tick): a busy forwarding loop does not rescan it every round.
        let fresh = !events.is_empty() || tick || self.last.is_none();
        for ev in events {
            match ev {
                Event::Connected { method, resumed } => {
                    tracing::info!(?method, resumed, "vswitchd: connected to the database");
                    // Converge from the replica as it is now.
                    self.last = None;
                    self.dirty = true;
                }
                Event::Disconnected { error } => {
                    tracing::warn!("vswitchd: database connection lost ({error}); forwarding continues, reconnecting");
                }
                Event::LockAcquired => {
                    tracing::info!("vswitchd: holding the {LOCK} lock");
                    self.last = None;
                }
                Event::LockLost => {
                    tracing::warn!("vswitchd: lost the {LOCK} lock: not applying the database until it is back");
                }
                Event::Changes(_) => {}
            }
        }
        if !self.session.is_connected() || !self.session.has_lock() {
            return;
        }
        if !fresh && !self.dirty {
            return;
        }
        let Some(replica) = self.session.replica() else {
            return;
        };
        let desired = Desired::from_replica(replica);
        let failed = self
            .applied
            .bridges
            .values()
            .any(|b| b.ifaces.values().any(|i| i.result.is_err()));
        let retry = tick && failed && now.duration_since(self.last_retry) >= RETRY_INTERVAL;
        if self.last.as_ref() != Some(&desired) || retry {
            let prev_ofport = replica
                .rows("Interface")
                .filter_map(|(_, r)| {
                    let name = r.get("name")?.as_str()?.to_string();
                    Some((name, r.get("ofport")?.as_int()?))
                })
                .collect();
            self.applied
                .reconcile(sw, &desired, &self.rundir, &prev_ofport);
            self.last = Some(desired);
            self.dirty = true;
            if retry {
                self.last_retry = now;
            }
        }
        let stats = tick && now.duration_since(self.last_stats) >= STATS_INTERVAL;
        if !(self.dirty || stats || tick) {
            return;
        }
        // Controller connections, as `get-controller` reports them.
        let mut controllers = std::collections::BTreeMap::new();
        if let Some(d) = &self.last {
            for b in d.bridges.values().filter(|b| !b.controller_rows.is_empty()) {
                let r = sw.handle(crate::control::proto::Request::GetController {
                    bridge: b.name.clone(),
                });
                let mut st = writeback::ControllerStatus::new();
                for t in r.data["controllers"].as_array().into_iter().flatten() {
                    let (Some(target), Some(n)) = (t["target"].as_str(), t["connected"].as_u64())
                    else {
                        continue;
                    };
                    let roles = t["roles"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r.as_str().map(str::to_string))
                        .collect();
                    st.insert(target.to_string(), (n as usize, roles));
                }
                controllers.insert(b.name.clone(), st);
            }
        }
        self.write_back(stats, &controllers);
        if stats {
            self.last_stats = now;
        }
    }

    fn write_back(
        &mut self,
        stats: bool,
        controllers: &std::collections::BTreeMap<String, writeback::ControllerStatus>,
    ) {
        let (Some(replica), Some(d)) = (self.session.replica(), self.last.as_ref()) else {
            return;
        };
        let mut ops = writeback::ops(replica, d, &self.applied, stats, controllers);
        if ops.is_empty() {
            self.dirty = false;
            self.detached.ready();
            return;
        }
        ops.insert(
            0,
            Op::Assert {
                lock: LOCK.to_string(),
            },
        );
        match self.session.transact(&ops).and_then(|r| r.check()) {
            Ok(_) => {
                self.dirty = false;
                self.detached.ready();
                if self.write_error.take().is_some() {
                    tracing::info!("vswitchd: status written again");
                }
            }
            Err(e) => {
                // Tried again next tick (a row deleted meanwhile, the
                // connection lost: the next update brings the truth), not
                // every round.
                self.dirty = false;
                let e = e.to_string();
                if self.write_error.as_deref() != Some(&e) {
                    tracing::warn!("vswitchd: writing status back: {e}");
                }
                self.write_error = Some(e);
            }
        }
    }
}

impl Hook for Vswitchd {
    fn round(&mut self, sw: &mut Switch, now: Instant, tick: bool) {
        self.step(sw, now, tick);
    }

    /// After the first reconciliation with the database.
    fn configured(&self) -> bool {
        self.last.is_some()
    }

    fn poll_fds(&self, fds: &mut Vec<libc::pollfd>) {
        if let Some(fd) = self.session.raw_fd() {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
    }
}
