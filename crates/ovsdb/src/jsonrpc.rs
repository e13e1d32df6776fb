//! JSON-RPC 1.0 over a stream socket, as OVSDB uses it (RFC 7047 section 4): requests
//! carry an id and get exactly one reply with that id; notifications carry `"id": null`.
//! The server sends `echo` requests as a keepalive and drops clients that do not
//! answer, so the client answers them wherever it happens to be reading.

use crate::error::{Error, Result};
use crate::framing::{Decoder, DEFAULT_MAX_MESSAGE};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// OVSDB's IANA port, the default for `tcp:IP`.
pub const DEFAULT_PORT: u16 = 6640;

/// Where the server listens, in the syntax ovs-vswitchd and ovs-vsctl accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// `unix:PATH`
    Unix(PathBuf),
    /// `tcp:IP[:PORT]` (an IPv6 address in brackets: `tcp:[::1]:6640`)
    Tcp(SocketAddr),
}

impl Remote {
    /// Parse `unix:PATH` or `tcp:IP[:PORT]`.
    pub fn parse(s: &str) -> Result<Remote> {
        let bad = || Error::BadRemote(s.to_owned());
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad());
            }
            return Ok(Remote::Unix(PathBuf::from(path)));
        }
        let rest = s.strip_prefix("tcp:").ok_or_else(bad)?;
        if let Ok(addr) = rest.parse::<SocketAddr>() {
            return Ok(Remote::Tcp(addr));
        }
        let host = rest
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(rest);
        let ip: std::net::IpAddr = host.parse().map_err(|_| bad())?;
        Ok(Remote::Tcp(SocketAddr::new(ip, DEFAULT_PORT)))
    }
}

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Remote::Unix(p) => write!(f, "unix:{}", p.display()),
            Remote::Tcp(SocketAddr::V6(a)) => write!(f, "tcp:[{}]:{}", a.ip(), a.port()),
            Remote::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(d),
            Stream::Tcp(s) => s.set_read_timeout(d),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(buf),
            Stream::Tcp(s) => s.write_all(buf),
        }
    }
}

/// A notification (or an unsolicited request other than `echo`) from the server.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

/// One JSON-RPC connection to an OVSDB server.
pub struct Client {
    stream: Stream,
    decoder: Decoder,
    next_id: u64,
    notifications: VecDeque<Notification>,
    /// How long [`Client::call`] waits for its reply.
    pub call_timeout: Duration,
    remote: Remote,
    last_rx: Instant,
}

impl Client {
    /// The connection's descriptor, for a caller's `poll(2)` (a readable
    /// descriptor means a message is arriving; bytes already read but not
    /// yet parsed are not visible there).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match &self.stream {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

/// What one received message turned out to be.
enum Incoming {
    Reply {
        id: Value,
        result: Result<Value, Value>,
    },
    Handled,
}

impl Client {
    /// Connect to `remote` (`unix:PATH` or `tcp:IP[:PORT]`).
    pub fn connect(remote: &str) -> Result<Client> {
        Self::connect_to(&Remote::parse(remote)?, Duration::from_secs(5))
    }

    /// Connect with a bound on the TCP connect.
    pub fn connect_to(remote: &Remote, connect_timeout: Duration) -> Result<Client> {
        let stream = match remote {
            Remote::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
            Remote::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, connect_timeout)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        };
        Ok(Client {
            stream,
            decoder: Decoder::new(DEFAULT_MAX_MESSAGE),
            next_id: 1,
            notifications: VecDeque::new(),
            call_timeout: Duration::from_secs(30),
            remote: remote.clone(),
            last_rx: Instant::now(),
        })
    }

    /// The remote this client is connected to.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Time since the last complete message arrived (or since connecting).
    pub fn idle(&self) -> Duration {
        self.last_rx.elapsed()
    }

    /// Bound one message's size (default [`DEFAULT_MAX_MESSAGE`]).
    pub fn set_max_message(&mut self, max: usize) {
        self.decoder = Decoder::new(max);
    }

    fn send(&mut self, msg: &Value) -> Result<()> {
        let mut bytes = serde_json::to_vec(msg).map_err(|e| Error::Protocol(e.to_string()))?;
        bytes.push(b'\n');
        self.stream.write_all(&bytes)?;
        Ok(())
    }

    /// Send a request and return its id without waiting (pair with [`Client::wait_reply`]).
    pub fn send_request(&mut self, method: &str, params: Value) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"method": method, "params": params, "id": id}))?;
        Ok(id)
    }

    /// Send a request and wait for its reply; notifications that arrive meanwhile are
    /// queued for [`Client::next_notification`]. A JSON-RPC error is [`Error::Rpc`].
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.send_request(method, params)?;
        self.wait_reply(method, id)
    }

    /// Wait for the reply to request `id`.
    pub fn wait_reply(&mut self, method: &str, id: u64) -> Result<Value> {
        let deadline = Instant::now() + self.call_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    method: method.to_owned(),
                    timeout_ms: self.call_timeout.as_millis() as u64,
                });
            }
            match self.read_one(left)? {
                Some(Incoming::Reply { id: rid, result }) if rid == json!(id) => {
                    return result.map_err(|error| Error::Rpc {
                        method: method.to_owned(),
                        error,
                    });
                }
                Some(Incoming::Reply { id: rid, .. }) => {
                    tracing::debug!(?rid, "ovsdb: reply to no pending request, ignored");
                }
                _ => {}
            }
        }
    }

    /// Send a notification (no reply expected).
    pub fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.send(&json!({"method": method, "params": params, "id": null}))
    }

    /// The next queued or arriving notification, waiting at most `timeout`.
    /// `Ok(None)` on timeout.
    pub fn next_notification(&mut self, timeout: Duration) -> Result<Option<Notification>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(n) = self.notifications.pop_front() {
                return Ok(Some(n));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if let Some(Incoming::Reply { id, .. }) = self.read_one(left)? {
                tracing::debug!(?id, "ovsdb: reply to no pending request, ignored");
            }
        }
    }

    /// Notifications already received, without reading.
    pub fn pending_notifications(&self) -> usize {
        self.notifications.len()
    }

    /// Read and dispatch one message, waiting at most `timeout`; `None` on timeout.
    fn read_one(&mut self, timeout: Duration) -> Result<Option<Incoming>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.decoder.next_value()? {
                self.last_rx = Instant::now();
                return self.dispatch(v).map(Some);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            let mut buf = [0u8; 16 * 1024];
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(Error::Closed),
                Ok(n) => self.decoder.feed(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn dispatch(&mut self, v: Value) -> Result<Incoming> {
        let Value::Object(mut o) = v else {
            return Err(Error::Protocol("message is not an object".into()));
        };
        let id = o.remove("id").unwrap_or(Value::Null);
        if let Some(method) = o.get("method") {
            let method = method
                .as_str()
                .ok_or_else(|| Error::Protocol("method is not a string".into()))?
                .to_owned();
            let params = o.remove("params").unwrap_or(Value::Array(Vec::new()));
            if id.is_null() {
                self.notifications
                    .push_back(Notification { method, params });
            } else if method == "echo" {
                self.send(&json!({"result": params, "error": null, "id": id}))?;
            } else {
                tracing::warn!(
                    method,
                    "ovsdb: server sent an unknown request, answered with an error"
                );
                self.send(&json!({"result": null, "error": "unknown method", "id": id}))?;
            }
            return Ok(Incoming::Handled);
        }
        if !o.contains_key("result") && !o.contains_key("error") {
            return Err(Error::Protocol(
                "message is neither a request nor a reply".into(),
            ));
        }
        let error = o.remove("error").unwrap_or(Value::Null);
        let result = if error.is_null() {
            Ok(o.remove("result").unwrap_or(Value::Null))
        } else {
            Err(error)
        };
        Ok(Incoming::Reply { id, result })
    }

    /// `list_dbs`: the databases the server holds.
    pub fn list_dbs(&mut self) -> Result<Vec<String>> {
        let v = self.call("list_dbs", json!([]))?;
        v.as_array()
            .and_then(|a| {
                a.iter()
                    .map(|d| d.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| Error::Protocol(format!("list_dbs reply {v}")))
    }

    /// `get_schema`.
    pub fn get_schema(&mut self, db: &str) -> Result<crate::schema::DatabaseSchema> {
        let v = self.call("get_schema", json!([db]))?;
        crate::schema::DatabaseSchema::parse(&v)
    }

    /// `transact`: run `ops` atomically. The reply holds one result per operation (and
    /// one more if the commit failed); [`crate::TxnReply::check`] turns the first error
    /// into [`Error::Transaction`]. A failed transaction leaves the session usable.
    pub fn transact(&mut self, db: &str, ops: &[crate::ops::Op]) -> Result<crate::ops::TxnReply> {
        let mut params = vec![json!(db)];
        params.extend(ops.iter().map(crate::ops::Op::to_json));
        let v = self.call("transact", Value::Array(params))?;
        crate::ops::TxnReply::parse(&v, ops.len())
    }

    /// `lock`: true if granted now; otherwise a `locked` notification follows when it is.
    pub fn lock(&mut self, name: &str) -> Result<bool> {
        let v = self.call("lock", json!([name]))?;
        v.get("locked")
            .and_then(Value::as_bool)
            .ok_or_else(|| Error::Protocol(format!("lock reply {v}")))
    }

    /// `steal`: take the lock from its owner (who gets `stolen`).
    pub fn steal(&mut self, name: &str) -> Result<()> {
        self.call("steal", json!([name]))?;
        Ok(())
    }

    /// `unlock`: release or stop waiting for the lock.
    pub fn unlock(&mut self, name: &str) -> Result<()> {
        self.call("unlock", json!([name]))?;
        Ok(())
    }

    /// `monitor_cancel`.
    pub fn monitor_cancel(&mut self, monitor_id: &Value) -> Result<()> {
        self.call("monitor_cancel", json!([monitor_id]))?;
        Ok(())
    }

    /// `echo`: a round trip that proves the server is alive.
    pub fn echo(&mut self) -> Result<()> {
        let v = self.call("echo", json!(["nicflow"]))?;
        if v != json!(["nicflow"]) {
            return Err(Error::Protocol(format!("echo reply {v}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes() {
        assert_eq!(
            Remote::parse("unix:/run/db.sock").unwrap(),
            Remote::Unix("/run/db.sock".into())
        );
        assert_eq!(
            Remote::parse("tcp:127.0.0.1:6641").unwrap(),
            Remote::Tcp("127.0.0.1:6641".parse().unwrap())
        );
        assert_eq!(
            Remote::parse("tcp:192.0.2.1").unwrap(),
            Remote::Tcp("192.0.2.1:6640".parse().unwrap())
        );
        assert_eq!(
            Remote::parse("tcp:[::1]:7000").unwrap(),
            Remote::Tcp("[::1]:7000".parse().unwrap())
        );
        assert_eq!(
            Remote::parse("tcp:[::1]").unwrap(),
            Remote::Tcp("[::1]:6640".parse().unwrap())
        );
        for bad in [
            "unix:",
            "ssl:1.2.3.4:6640",
            "tcp:host.example",
            "/run/db.sock",
            "tcp:1.2.3.4:99999",
        ] {
            assert!(Remote::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Remote::parse("tcp:[::1]:7000").unwrap().to_string(),
            "tcp:[::1]:7000"
        );
    }

    /// A fake server on a socketpair: it splits its messages at odd places, sends an
    /// echo and a notification before the reply, and the client sorts them out.
    #[test]
    fn replies_matched_echo_answered_notifications_queued() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut c = Client {
            stream: Stream::Unix(a),
            decoder: Decoder::new(1 << 20),
            next_id: 1,
            notifications: VecDeque::new(),
            call_timeout: Duration::from_secs(5),
            remote: Remote::Unix("pair".into()),
            last_rx: Instant::now(),
        };
        let server = std::thread::spawn(move || {
            let mut d = Decoder::new(1 << 20);
            fn next(d: &mut Decoder, b: &mut UnixStream) -> Value {
                let mut buf = [0u8; 4096];
                loop {
                    if let Some(v) = d.next_value().unwrap() {
                        return v;
                    }
                    let n = b.read(&mut buf).unwrap();
                    d.feed(&buf[..n]);
                }
            }
            let req = next(&mut d, &mut b);
            assert_eq!(req["method"], "list_dbs");
            let out = format!(
                "{}{}{}{}",
                json!({"method": "echo", "params": [], "id": "echo"}),
                json!({"method": "update2", "params": ["m", {}], "id": null}),
                json!({"result": ["stale"], "error": null, "id": 999}),
                json!({"result": ["Open_vSwitch"], "error": null, "id": req["id"]}),
            );
            for chunk in out.as_bytes().chunks(7) {
                b.write_all(chunk).unwrap();
            }
            let echo_reply = next(&mut d, &mut b);
            assert_eq!(
                echo_reply,
                json!({"result": [], "error": null, "id": "echo"})
            );
            let req = next(&mut d, &mut b);
            b.write_all(
                json!({"result": null, "error": {"error": "unknown database"}, "id": req["id"]})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap();
        });
        assert_eq!(c.list_dbs().unwrap(), vec!["Open_vSwitch".to_string()]);
        assert!(matches!(c.get_schema("nope"), Err(Error::Rpc { .. })));
        server.join().unwrap();
        let n = c
            .next_notification(Duration::from_millis(10))
            .unwrap()
            .unwrap();
        assert_eq!(n.method, "update2");
        assert!(matches!(
            c.next_notification(Duration::from_millis(10)),
            Err(Error::Closed)
        ));
    }
}
