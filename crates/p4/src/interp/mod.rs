//! The per-packet interpreter: runs the checked program's parser states,
//! controls, actions, tables and deparser over one packet under the
//! architecture model, recording what it read in the [`Trace`].
//! [`Pipeline`] is the object the bridge keeps per P4 program: it owns
//! the program, the table entries and the extern state.

use crate::arch::Arch;
use crate::ast;
use crate::check::P4Error;
use crate::runtime::*;
use crate::trace::{EntryId, Trace};
use num_bigint::BigUint;
use std::path::{Path, PathBuf};

/// Result of one packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// (port, frame) per transmitted copy; empty = dropped.
    pub outputs: Vec<(u32, Vec<u8>)>,
    pub trace: Trace,
}

/// A loaded program with its tables and extern state.
pub struct Pipeline {
    arch: Arch,
}

impl Pipeline {
    /// Reads, checks and instantiates a P4 program. `arch`: `None` picks
    /// it from the `main` package (PNA_NIC with 3 or 4 blocks, V1Switch,
    /// PSA_Switch).
    pub fn load(
        path: &Path,
        include_dirs: &[PathBuf],
        arch: Option<Arch>,
    ) -> Result<Pipeline, P4Error> {
        let _ = (path, include_dirs);
        Err(P4Error::Arch(format!(
            "frontend not available yet ({arch:?})"
        )))
    }

    /// Checks and instantiates an already parsed program.
    pub fn load_program(program: ast::Program, arch: Option<Arch>) -> Result<Pipeline, P4Error> {
        let _ = program;
        Err(P4Error::Arch(format!("not yet ({arch:?})")))
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Runs one packet received on `in_port` at time `now_ns`. Never
    /// panics: internal errors give a drop with `trace.error` set.
    pub fn process(&mut self, in_port: u32, packet: &[u8], now_ns: u64) -> Outcome {
        let _ = (in_port, packet, now_ns);
        Outcome::default()
    }

    /// Tables, in declaration order.
    pub fn tables(&self) -> Vec<TableInfo> {
        Vec::new()
    }

    /// One table by any dotted suffix of its qualified name.
    pub fn table_info(&self, table: &str) -> Result<TableInfo, RuntimeError> {
        Err(RuntimeError::UnknownTable(table.into()))
    }

    /// Stateful externs (counters, registers, meters).
    pub fn externs(&self) -> Vec<ExternInfo> {
        Vec::new()
    }

    pub fn table_add(&mut self, table: &str, spec: EntrySpec) -> Result<EntryId, RuntimeError> {
        let _ = spec;
        Err(RuntimeError::UnknownTable(table.into()))
    }

    /// Replaces the action and parameters of an entry.
    pub fn table_modify(
        &mut self,
        table: &str,
        id: EntryId,
        action: &str,
        params: Vec<(String, BigUint)>,
    ) -> Result<(), RuntimeError> {
        let _ = (id, action, params);
        Err(RuntimeError::UnknownTable(table.into()))
    }

    pub fn table_delete(&mut self, table: &str, id: EntryId) -> Result<(), RuntimeError> {
        let _ = id;
        Err(RuntimeError::UnknownTable(table.into()))
    }

    /// Sets the default action (refused when const).
    pub fn set_default(
        &mut self,
        table: &str,
        action: &str,
        params: Vec<(String, BigUint)>,
    ) -> Result<(), RuntimeError> {
        let _ = (action, params);
        Err(RuntimeError::UnknownTable(table.into()))
    }

    /// Entries (const ones first), with hit counts and last-hit times.
    pub fn table_entries(&self, table: &str) -> Result<Vec<EntryDump>, RuntimeError> {
        Err(RuntimeError::UnknownTable(table.into()))
    }

    /// (packets, bytes) of a counter cell.
    pub fn counter_read(&self, name: &str, index: u64) -> Result<(u64, u64), RuntimeError> {
        let _ = index;
        Err(RuntimeError::UnknownExtern {
            kind: "counter",
            name: name.into(),
        })
    }

    pub fn register_read(&self, name: &str, index: u64) -> Result<BigUint, RuntimeError> {
        let _ = index;
        Err(RuntimeError::UnknownExtern {
            kind: "register",
            name: name.into(),
        })
    }

    pub fn register_write(
        &mut self,
        name: &str,
        index: u64,
        value: BigUint,
    ) -> Result<(), RuntimeError> {
        let _ = (index, value);
        Err(RuntimeError::UnknownExtern {
            kind: "register",
            name: name.into(),
        })
    }

    pub fn meter_set(
        &mut self,
        name: &str,
        index: u64,
        config: MeterConfig,
    ) -> Result<(), RuntimeError> {
        let _ = (index, config);
        Err(RuntimeError::UnknownExtern {
            kind: "meter",
            name: name.into(),
        })
    }

    /// Credits cache hits of a cached run: its counters get `packets` and
    /// `bytes`, the table entries it hit get `now_ns` as last-hit time.
    pub fn credit(&mut self, trace: &Trace, packets: u64, bytes: u64, now_ns: u64) {
        let _ = (trace, packets, bytes, now_ns);
    }

    /// Sets the idle timeout of entries (default 30 s) for tables with
    /// `pna_idle_timeout` / `support_timeout`.
    pub fn set_idle_timeout(&mut self, timeout_ns: u64) {
        let _ = timeout_ns;
    }

    /// Entries of idle-timeout tables not hit for the timeout as of `now_ns`.
    pub fn expired_entries(&self, now_ns: u64) -> Vec<(String, EntryId)> {
        let _ = now_ns;
        Vec::new()
    }
}
