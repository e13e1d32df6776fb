//! The crate's one error type.

use serde_json::Value;

/// Everything that can go wrong talking to an OVSDB server. Malformed input from the
/// server is always one of these, never a panic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The remote string is not `unix:PATH` or `tcp:IP[:PORT]`.
    #[error("bad remote {0:?}: expected unix:PATH or tcp:IP[:PORT]")]
    BadRemote(String),
    /// A socket operation failed (connect, read, write).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection.
    #[error("connection closed by the server")]
    Closed,
    /// A message on the stream grew past the configured bound.
    #[error("message exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// The stream held bytes that are not a JSON-RPC message.
    #[error("malformed JSON on the stream: {0}")]
    Framing(String),
    /// A JSON-RPC message is valid JSON but not a valid message.
    #[error("malformed JSON-RPC message: {0}")]
    Protocol(String),
    /// The server answered a request with a JSON-RPC error.
    #[error("server error for {method}: {error}")]
    Rpc { method: String, error: Value },
    /// No reply arrived in time.
    #[error("no reply to {method} within {timeout_ms} ms")]
    Timeout { method: String, timeout_ms: u64 },
    /// A schema could not be parsed.
    #[error("schema: {0}")]
    Schema(String),
    /// A datum does not match its column's type.
    #[error("datum: {0}")]
    Datum(String),
    /// One operation of a transaction failed (index into the operations; an index equal to
    /// the number of operations means the commit itself failed, e.g. a constraint).
    #[error("transaction operation {index} failed: {error}{}", details.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Transaction {
        index: usize,
        error: String,
        details: Option<String>,
    },
    /// The session is not connected right now (it reconnects on its own).
    #[error("not connected to the database")]
    NotConnected,
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
