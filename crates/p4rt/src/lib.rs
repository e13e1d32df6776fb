//! P4Runtime server for nicflow: the control-plane side of the P4 slow path.
//! A controller (p4runtime-shell, ONOS, a PTF test) loads a P4 program with
//! SetForwardingPipelineConfig, fills its tables with Write, reads entries and
//! counters with Read and exchanges packets over StreamChannel; this crate
//! speaks the gRPC protocol (arbitration, election ids, device ids, P4Info id
//! checks, per-update error reporting) and hands already-checked entities to a
//! [`P4RtTarget`], which is where the program actually runs (nicflow's P4
//! interpreter, or the [`testing::TableStore`] test double).
//!
//! The protobuf messages are generated at build time from the descriptors of
//! the `p4runtime` Python wheel (see build.rs and scripts/p4runtime_fds.py).

// tonic::Status (176 bytes) is the error of every RPC and of the target trait:
// it is built once per failed request and handed to gRPC as is, so boxing it
// would only add an allocation and an unbox at every handler.
#![allow(clippy::result_large_err)]

pub mod daemon_target;
pub mod p4info;
pub mod p4info_gen;
pub mod proto;
mod server;
pub mod testing;
pub mod validate;

pub use server::{serve, spawn, P4RtService, ServeError, ServerHandle};
pub use tonic::Status;

use proto::p4::config::v1::P4Info;
use proto::p4::v1::{Entity, IdleTimeoutNotification, PacketIn, PacketOut, Update};

/// What SetForwardingPipelineConfig asks of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineMode {
    /// Check that the program can be loaded; change nothing (VERIFY, VERIFY_AND_SAVE).
    Verify,
    /// Replace the running program; all table entries and state are dropped
    /// (VERIFY_AND_COMMIT, COMMIT).
    Commit,
    /// Replace the running program keeping the forwarding state where it still
    /// applies (RECONCILE_AND_COMMIT); a target that cannot answers UNIMPLEMENTED.
    Reconcile,
}

/// Something the target reports to the controllers on its own: sent over
/// StreamChannel to the primary controller of every role.
#[derive(Debug, Clone)]
pub enum TargetEvent {
    /// A packet the program sent to the CPU port, with its controller metadata.
    PacketIn(PacketIn),
    /// Table entries whose idle timeout expired.
    IdleTimeout(IdleTimeoutNotification),
}

/// The device a P4Runtime server drives, in P4Runtime's own vocabulary (P4Info
/// ids, canonical byte strings). The server has already checked every id,
/// width, key, priority and action against the P4Info the target returned from
/// [`P4RtTarget::set_pipeline`] before it calls [`write`](P4RtTarget::write) or
/// [`read`](P4RtTarget::read); the target checks what only it knows (duplicate
/// or missing entries, table capacity, its own limits). Errors are gRPC
/// statuses with P4Runtime's codes (ALREADY_EXISTS, NOT_FOUND,
/// RESOURCE_EXHAUSTED, UNIMPLEMENTED, ...). Methods are called from async
/// tasks and must not block for long.
pub trait P4RtTarget: Send + Sync {
    /// Loads (or only checks, per `mode`) the program given as
    /// `device_config` (for nicflow: the P4-16 source text) and returns the
    /// P4Info that describes it, which the server then serves and checks
    /// requests against. `client_p4info` is the P4Info the controller sent, if
    /// any; a target that generates its own may refuse one that disagrees (see
    /// [`daemon_target::name_differences`]).
    fn set_pipeline(
        &self,
        mode: PipelineMode,
        client_p4info: Option<&P4Info>,
        device_config: &[u8],
    ) -> Result<P4Info, Status>;

    /// Applies one checked update (INSERT/MODIFY/DELETE of a table entry,
    /// default-entry MODIFY, counter/register/meter MODIFY, ...).
    fn write(&self, update: &Update) -> Result<(), Status>;

    /// Answers one read request entity; ids of 0 and absent keys/indexes are
    /// wildcards as P4Runtime defines them (table_id 0: every table; counter
    /// without index: every cell). A table-entry read includes counter data
    /// only when the request's entry has `counter_data` set.
    fn read(&self, entity: &Entity) -> Result<Vec<Entity>, Status>;

    /// Injects a packet from the controller (PacketOut, with its metadata).
    fn packet_out(&self, packet: &PacketOut) -> Result<(), Status>;

    /// Packet-ins and notifications the target produces, if it produces any.
    /// Called once when the server starts.
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<TargetEvent>> {
        None
    }
}
