//! nicflow-p4: P4-16 programs as nicflow's slow path.
//!
//! A packet that misses the datapath caches of a bridge in P4 mode comes
//! here instead of to the OpenFlow tables. [`front`] reads the program
//! (preprocessor, lexer, parser: the architecture files `core.p4`, `pna.p4`,
//! `v1model.p4`, `psa.p4` unmodified) into the [`ast`]; [`interp::check`] resolves
//! names and widths into a program the [`interp`]reter runs per packet
//! under one architecture model ([`interp::arch`]: PNA_NIC, v1model, PSA). Every run
//! records which packet and metadata bits it read and what it wrote
//! ([`trace`]), the raw material of the megaflow the bridge caches — the
//! idea of PISCES (SIGCOMM'16): P4 defines the slow path, the fast path
//! caches its decisions. Tables are filled through [`runtime`] (the CLI,
//! the STF runner, P4Runtime and the Netronome `user_config.json` all use
//! it).

pub mod ast;
pub mod controller;
pub mod corpus;
pub mod entries;
pub mod front;
pub mod interp;
pub mod runtime;
pub mod source;
pub mod stf;
pub mod trace;
pub mod value;

pub use controller::{ControllerError, ControllerHeader};
pub use interp::arch::{self, Arch};
pub use interp::check::{self, P4Error};
pub use interp::{Outcome, Pipeline};
pub use runtime::{EntrySpec, KeyMatch, RuntimeError};
pub use trace::{BitRange, EntryId, LookupKey, TableApply, Trace};
