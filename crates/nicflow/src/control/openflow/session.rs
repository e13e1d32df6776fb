//! One OpenFlow connection's state, without the socket's details: input
//! framing, version negotiation (1.3 and 1.5: the highest both sides
//! offer, within the bridge's `protocols=`), echo and inactivity probes, the
//! controller's role and asynchronous-message configuration, and a bounded
//! output buffer.
//!
//! Bounds: input is decoded one message at a time (at most 64 KiB each, the
//! header's limit); while more than [`OUT_SOFT`] bytes wait to be sent the
//! connection is not read (a controller that does not read its replies
//! stops being served, it does not make the daemon grow), and asynchronous
//! messages (`PACKET_IN`, `FLOW_REMOVED`, `PORT_STATUS`) are dropped — and
//! counted — once [`ASYNC_MAX`] bytes wait.

use nicflow_openflow::error::{BadRequest, HelloFailed};
use nicflow_openflow::msg::basic::role;
use nicflow_openflow::msg::{self, hello, AsyncConfig, Decoded, Hello, Message};
use nicflow_openflow::{DecodeError, OfpError};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Output waiting beyond which the connection is not read.
pub const OUT_SOFT: usize = 1 << 20;
/// Output waiting beyond which asynchronous messages are dropped.
pub const ASYNC_MAX: usize = 256 << 10;
/// Bytes read from a connection per service round.
const READ_MAX: usize = 256 << 10;
/// Unhandled input beyond which the connection is not read (a peer
/// sending faster than its messages are handled waits in its socket).
const IN_MAX: usize = 1 << 20;
/// Messages handled per connection per service round.
pub const MSGS_PER_ROUND: usize = 512;
/// OVS's default inactivity probe interval.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// Time allowed for the peer's HELLO.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// `OFPCML_NO_BUFFER`.
pub const NO_BUFFER_LEN: u16 = 0xffff;

/// The transport.
pub enum Conn {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
    /// `ssl:`/`pssl:`: TLS on a TCP socket ([`super::tls`]).
    Tls(Box<super::tls::TlsStream>),
    /// Tests: nothing to read, output stays in the buffer.
    None,
}

impl Conn {
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        match self {
            Conn::Tcp(s) => Some(s.as_raw_fd()),
            Conn::Unix(s) => Some(s.as_raw_fd()),
            Conn::Tls(s) => Some(s.socket().as_raw_fd()),
            Conn::None => None,
        }
    }

    /// Bytes below the session's output wait for the socket (TLS records).
    pub fn wants_write(&self) -> bool {
        matches!(self, Conn::Tls(s) if s.wants_write())
    }

    /// Input may be waiting that a readable socket would not announce
    /// (plaintext TLS decrypted beyond one read).
    fn has_buffered_input(&self) -> bool {
        matches!(self, Conn::Tls(s) if s.has_buffered_input())
    }

    /// Push out what the transport holds (TLS records).
    fn flush_transport(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Tls(s) => s.flush_tls(),
            _ => Ok(()),
        }
    }

    /// Why the transport refused its peer (TLS handshake), if it did.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Conn::Tls(s) => s.refusal(),
            _ => None,
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
            Conn::None => Err(std::io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
            Conn::None => Err(std::io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// The default asynchronous configuration (OpenFlow 1.3, 6.1.1): as
/// master or equal, packet-ins for no-match and action, every port status
/// and flow-removed reason; as slave, port status only.
pub fn default_async() -> AsyncConfig {
    AsyncConfig {
        packet_in_mask: [0x3, 0],
        port_status_mask: [0x7, 0x7],
        flow_removed_mask: [0xf, 0],
    }
}

pub struct Session {
    pub conn: Conn,
    /// For logs: `tcp:1.2.3.4:5678`, `punix:/path`...
    pub peer: String,
    /// The target this connection belongs to (listener or active).
    pub target: String,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_at: usize,
    pub negotiated: bool,
    /// The OpenFlow version spoken once negotiated (every reply and
    /// asynchronous message is encoded in it).
    pub version: u8,
    /// The versions this connection offers (the bridge's `protocols=`).
    offered: Vec<u8>,
    /// Close once the output is flushed (after an error that ends the
    /// connection).
    pub closing: bool,
    /// The peer went away or the socket failed.
    pub dead: bool,
    pub role: u32,
    pub async_cfg: AsyncConfig,
    pub miss_send_len: u16,
    pub config_flags: u16,
    opened: Instant,
    last_rx: Instant,
    probe_sent: bool,
    next_xid: u32,
    pub async_dropped: u64,
    pub errors_sent: u64,
    pub rx_msgs: u64,
    /// Open bundles (`OFPT_BUNDLE_*`, [`super::bundle`]).
    pub bundles: super::bundle::Bundles,
    /// `NXT_SET_PACKET_IN_FORMAT`: standard `PACKET_IN`s (0) or
    /// `NXT_PACKET_IN2` (2).
    pub packet_in_format: u32,
    /// `NXT_SET_CONTROLLER_ID` (recorded; `controller(id=N)` copies go to
    /// every connection).
    pub controller_id: u16,
}

impl Session {
    /// A new connection offering every version nicflow speaks (1.3, 1.5):
    /// our HELLO is queued at once.
    pub fn new(conn: Conn, peer: String, target: String, now: Instant) -> Session {
        Session::with_versions(conn, peer, target, &msg::SUPPORTED_VERSIONS, now)
    }

    /// A new connection offering `versions` (a non-empty subset of
    /// [`msg::SUPPORTED_VERSIONS`]; empty means all of them).
    pub fn with_versions(
        conn: Conn,
        peer: String,
        target: String,
        versions: &[u8],
        now: Instant,
    ) -> Session {
        let mut offered: Vec<u8> = msg::SUPPORTED_VERSIONS
            .iter()
            .copied()
            .filter(|v| versions.contains(v))
            .collect();
        if offered.is_empty() {
            offered = msg::SUPPORTED_VERSIONS.to_vec();
        }
        let top = offered[offered.len() - 1];
        let hello = Hello::with_versions(top, &offered);
        let mut s = Session {
            conn,
            peer,
            target,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            negotiated: false,
            version: top,
            offered,
            closing: false,
            dead: false,
            role: role::EQUAL,
            async_cfg: default_async(),
            miss_send_len: 128,
            config_flags: 0,
            opened: now,
            last_rx: now,
            probe_sent: false,
            next_xid: 1,
            async_dropped: 0,
            errors_sent: 0,
            rx_msgs: 0,
            bundles: Default::default(),
            packet_in_format: 0,
            controller_id: 0,
        };
        s.send(&Message::Hello(hello), 0);
        s
    }

    /// Bytes waiting to be sent.
    pub fn pending(&self) -> usize {
        self.out.len() - self.out_at
    }

    /// Queue a message (a reply: never dropped), in the session's version.
    pub fn send(&mut self, m: &Message, xid: u32) {
        if let Err(e) = msg::encode_as(m, self.version, xid, &mut self.out) {
            tracing::warn!(peer = %self.peer, "OpenFlow reply not sent: {e}");
            self.send_error(
                OfpError::BadRequest(BadRequest::MULTIPART_BUFFER_OVERFLOW),
                xid,
                &[],
            );
        }
    }

    /// Queue an `OFPT_ERROR` about the request `data` (its first 64 bytes
    /// are echoed).
    pub fn send_error(&mut self, error: OfpError, xid: u32, data: &[u8]) {
        self.errors_sent += 1;
        let m = Message::Error(msg::ErrorMsg {
            version: self.version,
            error,
            data: data[..data.len().min(64)].to_vec(),
        });
        let _ = msg::encode(&m, xid, &mut self.out);
    }

    /// Queue an asynchronous message with a fresh xid, unless too much
    /// output waits already (then it is dropped and counted).
    pub fn send_async(&mut self, m: &Message) -> bool {
        if self.pending() > ASYNC_MAX {
            self.async_dropped += 1;
            return false;
        }
        let xid = self.xid();
        self.send(m, xid);
        true
    }

    fn xid(&mut self) -> u32 {
        let x = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1).max(1);
        x
    }

    /// Should the socket be read (and polled for input)? Not while
    /// closing, while replies are backed up, or while enough input waits.
    pub fn wants_read(&self) -> bool {
        !self.dead && !self.closing && self.pending() <= OUT_SOFT && self.inbuf.len() <= IN_MAX
    }

    /// A whole unhandled message is buffered: the next round should come
    /// soon. (A partial one waits for the socket.)
    pub fn has_backlog(&self) -> bool {
        if self.dead || self.closing || self.pending() > OUT_SOFT {
            return false;
        }
        if self.inbuf.len() <= IN_MAX && self.conn.has_buffered_input() {
            return true;
        }
        if self.inbuf.len() < 8 {
            return false;
        }
        let len = usize::from(u16::from_be_bytes([self.inbuf[2], self.inbuf[3]]));
        self.inbuf.len() >= len
    }

    /// Read what the socket has (within this round's budget), unless
    /// [`Session::wants_read`] says no.
    pub fn read(&mut self, now: Instant) {
        if !self.wants_read() {
            return;
        }
        let mut buf = [0u8; 16384];
        let mut total = 0;
        while total < READ_MAX {
            match self.conn.read(&mut buf) {
                Ok(0) => {
                    self.dead = true;
                    break;
                }
                Ok(n) => {
                    total += n;
                    self.inbuf.extend_from_slice(&buf[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.dead = true;
                    break;
                }
            }
        }
        if total > 0 {
            self.last_rx = now;
            self.probe_sent = false;
        }
    }

    /// Feed bytes directly (tests).
    pub fn feed(&mut self, bytes: &[u8], now: Instant) {
        self.inbuf.extend_from_slice(bytes);
        self.last_rx = now;
        self.probe_sent = false;
    }

    /// Take everything queued for output (tests).
    pub fn take_output(&mut self) -> Vec<u8> {
        let v = self.out[self.out_at..].to_vec();
        self.out.clear();
        self.out_at = 0;
        v
    }

    /// The next message for the bridge, if a whole one is buffered. HELLO,
    /// ECHO and malformed input are dealt with here.
    pub fn poll_message(&mut self) -> Option<Decoded> {
        // Echoes and errors answered here count against the round too.
        for _ in 0..MSGS_PER_ROUND {
            if self.closing || self.dead || self.inbuf.is_empty() || self.pending() > OUT_SOFT {
                return None;
            }
            match msg::decode(&self.inbuf) {
                Err(DecodeError::Incomplete { .. }) => return None,
                Err(DecodeError::Malformed(m)) => {
                    tracing::debug!(peer = %self.peer, "{m}");
                    let (reply, xid) = m.reply();
                    self.errors_sent += 1;
                    // A bundle must not commit without a message it lost.
                    if self.inbuf.len() >= 12 && self.inbuf[1] == msg::ofpt::BUNDLE_ADD_MESSAGE {
                        let id = u32::from_be_bytes([
                            self.inbuf[8],
                            self.inbuf[9],
                            self.inbuf[10],
                            self.inbuf[11],
                        ]);
                        let flags = match self.inbuf.get(14..16) {
                            Some(f) => u16::from_be_bytes([f[0], f[1]]),
                            None => 0,
                        };
                        self.bundles.poison(id, flags, xid, Instant::now());
                    }
                    // In the session's version once there is one (a 1.5
                    // peer gets a 1.5 error, as from `send`).
                    let _ = if self.negotiated {
                        msg::encode_as(&reply, self.version, xid, &mut self.out)
                    } else {
                        msg::encode(&reply, xid, &mut self.out)
                    };
                    match m.skip {
                        Some(n) if self.negotiated => {
                            self.inbuf.drain(..n.min(self.inbuf.len()));
                        }
                        // Framing lost, or garbage instead of a hello.
                        _ => {
                            self.closing = true;
                            self.inbuf.clear();
                        }
                    }
                }
                Ok((d, used)) => {
                    self.inbuf.drain(..used);
                    self.rx_msgs += 1;
                    if let Some(d) = self.session_message(d) {
                        return Some(d);
                    }
                }
            }
        }
        None
    }

    /// Handle what belongs to the connection itself; `Some` for the rest.
    fn session_message(&mut self, d: Decoded) -> Option<Decoded> {
        if !self.negotiated {
            return match d.message {
                Message::Hello(h) => {
                    match hello::negotiate_with(&self.offered, &h) {
                        Ok(v) => {
                            self.negotiated = true;
                            self.version = v;
                            tracing::debug!(peer = %self.peer, version = v, "OpenFlow version negotiated");
                        }
                        Err(_) => {
                            tracing::info!(peer = %self.peer, version = h.version, offered = ?self.offered, "OpenFlow peer speaks none of the offered versions: refused");
                            self.errors_sent += 1;
                            let _ = msg::encode(&self.refusal(h.version), d.xid, &mut self.out);
                            self.closing = true;
                        }
                    }
                    None
                }
                _ => {
                    self.send_error(
                        OfpError::HelloFailed(HelloFailed::INCOMPATIBLE),
                        d.xid,
                        b"the first message must be HELLO",
                    );
                    self.closing = true;
                    None
                }
            };
        }
        // One version per connection, as in OVS: a message in another
        // (even one the codec reads) is refused.
        if d.version != self.version && !matches!(d.message, Message::Hello(_) | Message::Error(_))
        {
            let why = format!(
                "this session speaks OpenFlow version 0x{:02x}",
                self.version
            );
            self.send_error(
                OfpError::BadRequest(BadRequest::BAD_VERSION),
                d.xid,
                why.as_bytes(),
            );
            return None;
        }
        match d.message {
            Message::Hello(_) => None,
            Message::EchoRequest(data) => {
                self.send(&Message::EchoReply(data), d.xid);
                None
            }
            Message::EchoReply(_) => None,
            Message::Error(e) => {
                tracing::info!(peer = %self.peer, "OpenFlow peer sent error {}", e.error);
                None
            }
            _ => Some(d),
        }
    }

    /// The `HELLO_FAILED` answer to a peer offering none of our versions:
    /// in its own version (so it can read it), saying what we speak.
    fn refusal(&self, peer_version: u8) -> Message {
        let mut m = hello::refusal(peer_version);
        if let Message::Error(e) = &mut m {
            let ours: Vec<String> = self.offered.iter().map(|v| format!("0x{v:02x}")).collect();
            e.data = format!(
                "We support versions {}, you support version 0x{peer_version:02x}",
                ours.join(", ")
            )
            .into_bytes();
        }
        m
    }

    /// Write what the socket takes.
    pub fn flush(&mut self) {
        self.flush_transport();
        while self.out_at < self.out.len() && !self.dead {
            match self.conn.write(&self.out[self.out_at..]) {
                Ok(0) => {
                    self.dead = true;
                }
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => self.dead = true,
            }
        }
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        } else if self.out_at > (64 << 10) && self.out_at * 2 > self.out.len() {
            self.out.drain(..self.out_at);
            self.out_at = 0;
        }
        if self.closing && self.pending() == 0 && !self.dead {
            if let Conn::Tls(t) = &mut self.conn {
                t.close_notify();
            }
            self.flush_transport();
            if !self.conn.wants_write() {
                self.dead = true;
            }
        }
    }

    fn flush_transport(&mut self) {
        match self.conn.flush_transport() {
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => self.dead = true,
            _ => {}
        }
    }

    /// Inactivity probing: an ECHO_REQUEST after `interval` of silence,
    /// the connection dropped after another `interval` without an answer
    /// (or a HELLO that never came).
    pub fn probe(&mut self, now: Instant, interval: Duration) {
        if !self.negotiated {
            if now.duration_since(self.opened) > HELLO_TIMEOUT {
                tracing::info!(peer = %self.peer, "no OpenFlow HELLO: closing");
                self.dead = true;
            }
            return;
        }
        if !self.bundles.is_empty() {
            for xid in self.bundles.expire(now) {
                tracing::info!(peer = %self.peer, "OpenFlow bundle idle for {:?}: discarded", super::bundle::IDLE_TIMEOUT);
                self.send_error(
                    OfpError::BundleFailed(nicflow_openflow::error::BundleFailed::TIMEOUT),
                    xid,
                    &[],
                );
            }
        }
        let idle = now.duration_since(self.last_rx);
        if idle >= interval * 2 && self.probe_sent {
            tracing::info!(peer = %self.peer, "OpenFlow peer silent for {:?}: disconnecting", idle);
            self.dead = true;
        } else if idle >= interval && !self.probe_sent {
            let xid = self.xid();
            self.send(&Message::EchoRequest(Vec::new()), xid);
            self.probe_sent = true;
        }
    }

    /// Does this connection get an asynchronous message of `kind`
    /// (0 packet-in, 1 port-status, 2 flow-removed) for `reason`?
    pub fn wants(&self, kind: usize, reason: u8) -> bool {
        if !self.negotiated || self.closing || self.dead || reason >= 32 {
            return false;
        }
        let slot = usize::from(self.role == role::SLAVE);
        let mask = match kind {
            0 => self.async_cfg.packet_in_mask[slot],
            1 => self.async_cfg.port_status_mask[slot],
            _ => self.async_cfg.flow_removed_mask[slot],
        };
        mask & (1 << reason) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_openflow::msg::encode_to_vec;

    fn decode_all(mut b: &[u8]) -> Vec<Decoded> {
        let mut v = Vec::new();
        while !b.is_empty() {
            let (d, n) = msg::decode(b).unwrap();
            v.push(d);
            b = &b[n..];
        }
        v
    }

    fn open(now: Instant) -> Session {
        let mut s = Session::new(Conn::None, "test".into(), "ptcp:0".into(), now);
        let out = decode_all(&s.take_output());
        assert!(matches!(out[0].message, Message::Hello(_)));
        s.feed(
            &encode_to_vec(&Message::Hello(Hello::ofp13()), 1).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        assert!(s.negotiated);
        s
    }

    #[test]
    fn negotiates_and_echoes() {
        let now = Instant::now();
        let mut s = open(now);
        s.feed(
            &encode_to_vec(&Message::EchoRequest(b"hi".to_vec()), 7).unwrap(),
            now,
        );
        s.feed(&encode_to_vec(&Message::BarrierRequest, 8).unwrap(), now);
        match s.poll_message() {
            Some(d) => {
                assert_eq!(d.xid, 8);
                assert_eq!(d.message, Message::BarrierRequest);
            }
            i => panic!("{i:?}"),
        }
        let out = decode_all(&s.take_output());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].xid, 7);
        assert_eq!(out[0].message, Message::EchoReply(b"hi".to_vec()));
    }

    #[test]
    fn refuses_openflow10() {
        let now = Instant::now();
        let mut s = Session::new(Conn::None, "t".into(), "ptcp:0".into(), now);
        s.take_output();
        s.feed(
            &encode_to_vec(&Message::Hello(Hello::with_versions(1, &[1])), 3).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        assert!(s.closing && !s.negotiated);
        let out = s.take_output();
        // An OpenFlow 1.0 error header: version 1, type ERROR.
        assert_eq!(out[0], 1);
        assert_eq!(out[1], 1);
        assert_eq!(&out[8..12], &[0, 0, 0, 0]); // HELLO_FAILED/INCOMPATIBLE
    }

    #[test]
    fn other_versions_are_refused_after_13_is_negotiated() {
        let now = Instant::now();
        let mut s = open(now);
        // A well-formed OpenFlow 1.5 barrier: the codec reads it, the 1.3
        // session refuses it (as before the codec learned 1.5).
        s.feed(&[6, 20, 0, 8, 0, 0, 0, 5], now);
        assert!(s.poll_message().is_none());
        assert!(!s.closing);
        let out = decode_all(&s.take_output());
        assert!(matches!(&out[0].message,
            Message::Error(e) if e.error == OfpError::BadRequest(BadRequest::BAD_VERSION)));
        assert_eq!(out[0].xid, 5);
    }

    #[test]
    fn negotiates_the_highest_common_version() {
        let now = Instant::now();
        // ovn-controller: 1.5 only. Our hello offers 1.3 and 1.5.
        let mut s = Session::new(Conn::None, "t".into(), "ptcp:0".into(), now);
        let ours = decode_all(&s.take_output());
        let Message::Hello(h) = &ours[0].message else {
            panic!("{ours:?}")
        };
        assert_eq!(ours[0].version, msg::OFP15_VERSION);
        assert_eq!(h.version_bitmap(), Some(vec![4, 6]));
        s.feed(
            &encode_to_vec(&Message::Hello(Hello::with_versions(6, &[6])), 1).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        assert!(s.negotiated && s.version == msg::OFP15_VERSION);
        // Replies in 1.5; a 1.5 request is served.
        s.feed(
            &msg::encode_to_vec_as(&Message::EchoRequest(vec![]), 6, 2).unwrap(),
            now,
        );
        s.feed(&[6, 20, 0, 8, 0, 0, 0, 3], now);
        assert!(matches!(s.poll_message(), Some(d) if d.xid == 3));
        let out = decode_all(&s.take_output());
        assert_eq!(out[0].version, msg::OFP15_VERSION);
        assert_eq!(out[0].message, Message::EchoReply(vec![]));
        // A peer offering 1.0..1.5 (a default ovs-ofctl -O list) gets 1.5;
        // one offering 1.0..1.4, 1.3.
        for (peer, want) in [(vec![1, 4, 5, 6], 6), (vec![1, 2, 3, 4, 5], 4)] {
            let mut s = Session::new(Conn::None, "t".into(), "ptcp:0".into(), now);
            let top = *peer.last().unwrap();
            s.feed(
                &encode_to_vec(&Message::Hello(Hello::with_versions(top, &peer)), 1).unwrap(),
                now,
            );
            assert!(s.poll_message().is_none());
            assert_eq!((s.negotiated, s.version), (true, want), "{peer:?}");
        }
    }

    #[test]
    fn a_13_only_bridge_refuses_15_hellos() {
        let now = Instant::now();
        let mut s = Session::with_versions(Conn::None, "t".into(), "p".into(), &[4], now);
        let ours = decode_all(&s.take_output());
        assert_eq!(ours[0].version, msg::OFP13_VERSION);
        s.feed(
            &encode_to_vec(&Message::Hello(Hello::with_versions(6, &[6])), 1).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        assert!(s.closing && !s.negotiated);
        let out = decode_all(&s.take_output());
        assert!(matches!(&out[0].message,
            Message::Error(e) if e.error == OfpError::HelloFailed(HelloFailed::INCOMPATIBLE)));
        // And a 1.5-only bridge refuses 1.3.
        let mut s = Session::with_versions(Conn::None, "t".into(), "p".into(), &[6], now);
        s.feed(
            &encode_to_vec(&Message::Hello(Hello::ofp13()), 1).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        assert!(s.closing && !s.negotiated);
    }

    #[test]
    fn garbage_gets_errors_and_lost_framing_closes() {
        let now = Instant::now();
        let mut s = open(now);
        // Unknown message type 200, well framed: error, connection stays.
        s.feed(&[4, 200, 0, 8, 0, 0, 0, 9], now);
        assert!(s.poll_message().is_none());
        assert!(!s.closing);
        let out = decode_all(&s.take_output());
        match &out[0].message {
            Message::Error(e) => {
                assert_eq!(e.error, OfpError::BadRequest(BadRequest::BAD_TYPE));
                assert_eq!(out[0].xid, 9);
            }
            m => panic!("{m:?}"),
        }
        // A truncated FLOW_MOD (length says 16): an error, then a barrier
        // after it is still served.
        let mut b = vec![4, 14, 0, 16, 0, 0, 0, 10];
        b.extend_from_slice(&[0; 8]);
        b.extend(encode_to_vec(&Message::BarrierRequest, 11).unwrap());
        s.feed(&b, now);
        assert!(matches!(s.poll_message(), Some(d) if d.xid == 11));
        assert!(matches!(
            decode_all(&s.take_output())[0].message,
            Message::Error(_)
        ));
        // A length below the header: framing is lost, close after the error.
        s.feed(&[4, 0, 0, 3, 0, 0, 0, 12, 1, 2, 3], now);
        assert!(s.poll_message().is_none());
        assert!(s.closing);
    }

    #[test]
    fn input_is_bounded_and_backlog_needs_a_whole_message() {
        let now = Instant::now();
        let mut s = open(now);
        assert!(!s.has_backlog() && s.wants_read());
        s.feed(&[4, 2, 0, 16, 0, 0, 0, 1, 0, 0], now);
        assert!(!s.has_backlog(), "a partial message is no backlog");
        s.feed(&[0; 6], now);
        assert!(s.has_backlog());
        // Far more input than one round handles: the socket is left alone.
        let echo = encode_to_vec(&Message::EchoRequest(vec![]), 2).unwrap();
        for _ in 0..(IN_MAX / echo.len() + 1) {
            s.feed(&echo, now);
        }
        assert!(!s.wants_read());
        // Echoes are answered a round's worth at a time.
        assert!(s.poll_message().is_none());
        // (The first one carried 8 bytes of data.)
        assert_eq!(s.pending(), 16 + (MSGS_PER_ROUND - 1) * echo.len());
        assert!(s.has_backlog());
    }

    #[test]
    fn first_message_must_be_hello() {
        let now = Instant::now();
        let mut s = Session::new(Conn::None, "t".into(), "ptcp:0".into(), now);
        s.take_output();
        s.feed(&encode_to_vec(&Message::FeaturesRequest, 2).unwrap(), now);
        assert!(s.poll_message().is_none());
        assert!(s.closing);
    }

    #[test]
    fn probes_then_gives_up() {
        let t0 = Instant::now();
        let mut s = open(t0);
        s.probe(t0 + Duration::from_secs(1), PROBE_INTERVAL);
        assert_eq!(s.pending(), 0);
        s.probe(t0 + Duration::from_secs(6), PROBE_INTERVAL);
        let out = decode_all(&s.take_output());
        assert!(matches!(out[0].message, Message::EchoRequest(_)));
        s.probe(t0 + Duration::from_secs(11), PROBE_INTERVAL);
        assert!(s.dead);
        // An answer in time keeps it.
        let mut s = open(t0);
        s.probe(t0 + Duration::from_secs(6), PROBE_INTERVAL);
        s.feed(
            &encode_to_vec(&Message::EchoReply(vec![]), 1).unwrap(),
            t0 + Duration::from_secs(7),
        );
        assert!(s.poll_message().is_none());
        s.probe(t0 + Duration::from_secs(11), PROBE_INTERVAL);
        assert!(!s.dead);
    }

    #[test]
    fn async_is_bounded_and_follows_role() {
        let now = Instant::now();
        let mut s = open(now);
        assert!(s.wants(0, 0) && s.wants(0, 1) && !s.wants(0, 2));
        s.role = role::SLAVE;
        assert!(!s.wants(0, 0) && s.wants(1, 0) && !s.wants(2, 0));
        s.role = role::MASTER;
        let m = Message::EchoRequest(vec![0; 1000]);
        let mut sent = 0;
        for _ in 0..1000 {
            sent += s.send_async(&m) as usize;
        }
        assert!(sent < 1000 && s.async_dropped > 0);
        assert!(s.pending() <= ASYNC_MAX + 2000);
    }
}
