//! The CLI's side of the control socket: where the socket is, and one
//! request/response exchange with the daemon (one JSON line each way).
//!
//! Place in the system: every `nicflow` verb, the CNI plugin and the lab
//! reach a running daemon through [`request`]; the daemon's side (binding,
//! peer credentials, serving) stays with the daemon.

use crate::proto::{Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default control socket; `NICFLOW_SOCK` overrides it everywhere.
pub const DEFAULT_SOCKET: &str = "/run/nicflow/nicflow.sock";

/// The control socket: `arg` if given, else `$NICFLOW_SOCK`, else
/// [`DEFAULT_SOCKET`].
pub fn socket_path(arg: Option<PathBuf>) -> PathBuf {
    arg.or_else(|| std::env::var_os("NICFLOW_SOCK").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// A control socket written `@NAME` is an abstract unix socket: it belongs
/// to the network namespace the daemon runs in and has no file, so only
/// processes in that namespace can reach it (the lab's DPU mode: the host
/// cannot configure a switch it cannot connect to).
pub fn abstract_name(path: &Path) -> Option<&[u8]> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().strip_prefix(b"@")
}

/// Connect to the control socket at `path` (a file, or `@NAME`).
pub fn connect(path: &Path) -> std::io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    match abstract_name(path) {
        Some(name) => {
            UnixStream::connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name)?)
        }
        None => UnixStream::connect(path),
    }
}

/// A failed exchange with the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connecting to {socket} (is the daemon running?): {source}")]
    Connect {
        socket: String,
        source: std::io::Error,
    },
    #[error("talking to the daemon: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad response from daemon: {0}")]
    Decode(#[from] serde_json::Error),
}

/// Send one request to the daemon and wait for its response (30 s at most).
pub fn request(socket: &Path, req: &Request) -> Result<Response, ClientError> {
    let mut s = connect(socket).map_err(|source| ClientError::Connect {
        socket: socket.display().to_string(),
        source,
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reader = BufReader::new(s);
    let mut resp = String::new();
    reader.read_line(&mut resp)?;
    Ok(serde_json::from_str(resp.trim())?)
}
