//! Control connections, served without ever blocking the forwarding loop.
//!
//! The daemon has one thread, and it forwards packets: a CLI client must
//! not be able to stop it. Every control socket is non-blocking and lives
//! here between loop rounds; each round the daemon polls their descriptors
//! with the ports' and calls [`Clients::service`], which reads what has
//! arrived, runs a request once its line is complete, and writes as much of
//! the response as the socket takes. Nothing here waits.
//!
//! Limits, each answered with an error response and a close, never with a
//! stall or unbounded memory: a request line of at most
//! [`MAX_REQUEST`] bytes, [`MAX_CLIENTS`] connections at once, and
//! [`IDLE_TIMEOUT`] without progress (a client that connects and sends
//! nothing, or stops reading its response).
//!
//! The protocol is the one `daemon::request` speaks: one JSON request line,
//! one JSON response line, then the daemon closes.

use super::proto::{Request, Response};
use super::switch::Switch;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// Largest request line accepted. `add-flows` carries whole rule files:
/// 100,000 rules of a 5-tuple table are about 11 MB of JSON.
pub const MAX_REQUEST: usize = 32 << 20;
/// Connections served at once; more are refused with an error.
pub const MAX_CLIENTS: usize = 64;
/// A connection that moves no byte for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Read chunk: the buffer grows only as data arrives.
const CHUNK: usize = 64 << 10;
/// Bytes read from one connection per loop round: a client streaming a big
/// request shares the thread with forwarding instead of holding it for the
/// whole copy (a 32 MB line read in one go delayed a ping by 150 ms).
const READ_BUDGET: usize = 4 * CHUNK;

struct Conn {
    stream: UnixStream,
    /// The request line so far (no newline yet).
    inbuf: Vec<u8>,
    /// The response, once there is one, and how much of it went out.
    out: Option<(Vec<u8>, usize)>,
    last_progress: Instant,
    done: bool,
}

impl Conn {
    fn respond(&mut self, resp: &Response) {
        let mut out = serde_json::to_vec(resp).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
        out.push(b'\n');
        // The request is over: free its buffer now, not at close.
        self.inbuf = Vec::new();
        self.out = Some((out, 0));
    }

    /// Read what is there; `Some(line)` once the request is complete.
    fn read(&mut self, now: Instant) -> Option<Vec<u8>> {
        let mut chunk = [0u8; CHUNK];
        let mut budget = READ_BUDGET;
        while budget > 0 {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    // The client closed its side without a full line.
                    self.done = true;
                    return None;
                }
                Ok(n) => {
                    self.last_progress = now;
                    budget = budget.saturating_sub(n);
                    let nl = chunk[..n].iter().position(|&b| b == b'\n');
                    let line = &chunk[..nl.unwrap_or(n)];
                    if self.inbuf.len() + line.len() > MAX_REQUEST {
                        self.too_large();
                        return None;
                    }
                    self.inbuf.extend_from_slice(line);
                    if nl.is_some() {
                        return Some(std::mem::take(&mut self.inbuf));
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.done = true;
                    return None;
                }
            }
        }
        None
    }

    fn too_large(&mut self) {
        tracing::warn!(limit = MAX_REQUEST, "control request too large: refused");
        self.respond(&Response::err(format!(
            "request too large (limit {MAX_REQUEST} bytes)"
        )));
        // Nothing more is read from this client.
        let _ = self.stream.shutdown(std::net::Shutdown::Read);
    }

    /// Write what the socket takes.
    fn write(&mut self, now: Instant) {
        let Some((out, pos)) = &mut self.out else {
            return;
        };
        while *pos < out.len() {
            match self.stream.write(&out[*pos..]) {
                Ok(0) => {
                    self.done = true;
                    return;
                }
                Ok(n) => {
                    *pos += n;
                    self.last_progress = now;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.done = true;
                    return;
                }
            }
        }
        self.done = true;
    }
}

/// The open control connections.
#[derive(Default)]
pub struct Clients {
    conns: Vec<Conn>,
}

impl Clients {
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Accept every pending connection (the listener is non-blocking).
    /// Peers that may not configure the switch, and connections beyond
    /// [`MAX_CLIENTS`], get an error response and are closed.
    pub fn accept(&mut self, listener: &UnixListener, now: Instant) {
        while let Ok((stream, _)) = listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let mut conn = Conn {
                stream,
                inbuf: Vec::new(),
                out: None,
                last_progress: now,
                done: false,
            };
            if !super::peer::peer_allowed(&conn.stream) {
                conn.respond(&Response::err("permission denied"));
            } else if self.conns.len() >= MAX_CLIENTS {
                tracing::warn!(limit = MAX_CLIENTS, "too many control connections");
                conn.respond(&Response::err(format!(
                    "too many control connections (limit {MAX_CLIENTS})"
                )));
            }
            if conn.out.is_some() {
                // Best effort, once: the response is short, the socket empty.
                conn.write(now);
                continue;
            }
            self.conns.push(conn);
        }
    }

    /// A `pollfd` per connection: readable while the request is coming,
    /// writable while a response is going out.
    pub fn poll_fds(&self, fds: &mut Vec<libc::pollfd>) {
        for c in &self.conns {
            fds.push(libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events: if c.out.is_some() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                },
                revents: 0,
            });
        }
    }

    /// Move every connection on as far as it goes without waiting: read,
    /// run complete requests on `sw`, write responses, close finished and
    /// idle connections.
    pub fn service(&mut self, sw: &mut Switch, now: Instant) {
        for c in &mut self.conns {
            if c.out.is_none() {
                if let Some(line) = c.read(now) {
                    let resp = match std::str::from_utf8(&line)
                        .map_err(|e| e.to_string())
                        .and_then(|l| {
                            serde_json::from_str::<Request>(l.trim()).map_err(|e| e.to_string())
                        }) {
                        Ok(req) => {
                            tracing::info!(?req, "control request");
                            sw.handle(req)
                        }
                        Err(e) => Response::err(format!("bad request: {e}")),
                    };
                    c.respond(&resp);
                }
            }
            if c.out.is_some() {
                c.write(now);
            }
            if !c.done && now.duration_since(c.last_progress) >= IDLE_TIMEOUT {
                tracing::warn!("control connection idle for {IDLE_TIMEOUT:?}: closed");
                if c.out.is_none() {
                    c.respond(&Response::err(format!(
                        "no complete request within {IDLE_TIMEOUT:?}"
                    )));
                    c.write(now);
                }
                c.done = true;
            }
        }
        self.conns.retain(|c| !c.done);
    }
}
