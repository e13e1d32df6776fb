//! A small synchronous OVSDB client (RFC 7047 plus ovsdb-server's `monitor_cond`,
//! `monitor_cond_since`, `update2` and `update3`).
//!
//! It sits in the control path of a nicflow host run like Open vSwitch:
//! `ovs-vsctl` and `ovn-controller` write the switch configuration into
//! `ovsdb-server`'s `Open_vSwitch` database; `nicflow vswitchd` (built on this crate)
//! holds the `ovs_vswitchd` lock, monitors the database into a [`Replica`], reconciles
//! the bridges and ports from each update's [`Change`] list, and writes back what
//! ovs-vswitchd writes (`cur_cfg`, `ofport`, ...) with [`Session::transact`].
//! Nothing on the packet path uses it.
//!
//! Layers, lowest first: [`framing`] splits the stream into JSON values;
//! [`Client`] speaks JSON-RPC (ids, `echo`, notifications) and the raw methods;
//! [`Datum`]/[`DatabaseSchema`] type the values; [`Replica`] applies updates;
//! [`Session`] adds the lock, the monitor and reconnection with backoff.
//!
//! Synchronous on purpose: the daemon polls the session from its control thread; no
//! runtime is needed, and every wait is bounded by a timeout.

pub mod datum;
pub mod error;
pub mod framing;
pub mod jsonrpc;
pub mod ops;
pub mod replica;
pub mod schema;
pub mod session;

pub use datum::{Atom, Datum, Uuid};
pub use error::{Error, Result};
pub use jsonrpc::{Client, Notification, Remote};
pub use ops::{Columns, Condition, Function, Mutation, Mutator, Op, OpResult, TxnReply, Until};
pub use replica::{Change, ChangeKind, Replica, Row};
pub use schema::{AtomicType, BaseType, ColumnSchema, DatabaseSchema, TableSchema, Type};
pub use session::{Event, MonitorMethod, Session, SessionConfig};
