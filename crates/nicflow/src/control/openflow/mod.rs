//! OpenFlow 1.3 on the wire: controllers and `ovs-ofctl` drive the
//! daemon's bridges.
//!
//! Each bridge may have controller targets (`nicflow set-controller`, in
//! Open vSwitch's syntax: [`target`]). Listeners (`ptcp:`, `pssl:`,
//! `punix:`) take any number of connections; active targets (`tcp:`,
//! `ssl:`, `unix:`) are connected to and reconnected with backoff (1 s
//! doubling to 8 s). Every socket is non-blocking and polled by the
//! daemon's loop with the ports
//! ([`OpenFlow::poll_fds`], [`OpenFlow::service`]): a connection's
//! messages are handled between forwarding batches, never waiting on a
//! peer. [`session`] holds one connection's protocol state (version,
//! echo/probe, role, async configuration, bounded output), [`handle`]
//! turns requests into [`Bridge`] calls.
//!
//! Asynchronous messages: each round the bridge's queues are drained —
//! packets `controller` actions sent (`PACKET_IN`), rules that left with
//! `SEND_FLOW_REM` (`FLOW_REMOVED`) — and ports that came or went
//! (`PORT_STATUS`, each tick); each connection gets what its role and
//! `SET_ASYNC` configuration ask for, unless its output is backed up (then
//! the message is dropped and counted).
//!
//! Fail modes: `standalone` (the default) "fails open" when active
//! controllers (`tcp:`, `ssl:`, `unix:`; listeners do not count, as in OVS) are
//! configured and none has been connected for three probe intervals:
//! a `priority=0,actions=NORMAL` rule with cookie [`FAIL_OPEN_COOKIE`] is
//! added to table 0 (unless table 0 already has a priority-0 catch-all
//! rule) and removed as soon as a controller connects. It is never
//! written to the config file. `secure` never does.
//!
//! Who may connect: a `punix:` socket is created with mode 0750 whatever
//! the umask (bound inside a private directory, then moved into place: no
//! moment where it is more open), and each peer's credentials are checked
//! as the control socket checks them (`peer::peer_allowed`: root or the
//! daemon's user); `ssl:`/`pssl:` authenticate both ends with
//! certificates ([`tls`]); `ptcp:`/`tcp:` authenticate nothing, as in OVS
//! (a `ptcp:` without an address listens on every address, which is
//! logged as a warning). Refused connections are logged and counted per
//! target (`get-controller`).

pub mod bundle;
pub mod continuation;
pub mod handle;
pub mod session;
pub mod target;
pub mod tls;
pub mod tlv;

use crate::bridge::Bridge;
use crate::datapath::action::ControllerExtra;
use crate::ofproto::flow_mod::{self, FlowModCommand};
use nicflow_flow::{Action, Field, Match};
use nicflow_openflow::error::RoleRequestFailed;
use nicflow_openflow::msg::basic::role;
use nicflow_openflow::msg::{self, FlowRemoved, Message, NxMessage, PacketIn, PortStatus, Role};
use nicflow_openflow::OfpError;
use session::{Conn, Session};
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
pub use target::{Target, TargetError};

/// Cookie of the rule standalone mode adds while it fails open.
pub const FAIL_OPEN_COOKIE: u64 = 0x0f0f_0f0f_f0f0_f0f0;
/// Most connections per bridge (all listeners together).
pub const MAX_SESSIONS: usize = 64;
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(8);

pub use nicflow_api::FailMode;

enum Listener {
    Tcp(TcpListener),
    /// `pssl:`: TCP, each connection wrapped in TLS.
    Ssl(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

enum ActiveState {
    /// Next attempt at this time.
    Waiting(Instant),
    /// A non-blocking TCP connect in progress.
    Connecting(TcpStream, Instant),
    /// A session runs for it.
    Up,
}

struct Active {
    target: Target,
    state: ActiveState,
    backoff: Duration,
}

struct OfBridge {
    targets: Vec<Target>,
    fail_mode: FailMode,
    listeners: Vec<(String, Listener)>,
    actives: Vec<Active>,
    sessions: Vec<Session>,
    master_generation: Option<u64>,
    /// Ports last told about (`None` until the first look).
    ports: Option<Vec<(u32, String)>>,
    /// Last time a controller was connected (or the targets were set).
    last_connected: Instant,
    fail_open: bool,
    async_dropped: u64,
    /// Connections refused per target: how many, and the last reason.
    refused: BTreeMap<String, (u64, String)>,
    /// OpenFlow versions new connections offer (`protocols=`).
    versions: Vec<u8>,
}

/// The OpenFlow side of the daemon: every bridge's controller
/// connections.
#[derive(Default)]
pub struct OpenFlow {
    bridges: BTreeMap<String, OfBridge>,
    /// The TLS configuration (`set-ssl`), for `ssl:` and `pssl:`.
    tls: Option<tls::Tls>,
    /// The switch-wide Geneve option map (`NXT_TLV_TABLE_MOD`).
    tlv: tlv::TlvTable,
}

/// Mode of `punix:` sockets: the daemon's user may connect, its group may
/// see it (connecting needs write permission), nobody else.
pub const PUNIX_MODE: u32 = 0o750;

/// Why the OpenFlow side refused a configuration. The texts are the
/// control protocol's replies.
#[derive(Debug, thiserror::Error)]
pub enum OpenFlowError {
    #[error(
        "{0}: no SSL configuration: run `nicflow set-ssl PRIVATE-KEY CERTIFICATE CA-CERT` first"
    )]
    NoSsl(Target),
    /// A listener could not be bound (the address is in use...).
    #[error("{target}: {source}")]
    Bind {
        target: Target,
        #[source]
        source: BindError,
    },
    #[error("{0} is not a listener")]
    NotListener(Target),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("bridge {bridge} uses {target}: remove it first (set-controller/del-controller)")]
    SslInUse { bridge: String, target: Target },
}

/// Why a listening socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A live socket is at the path: it is left alone.
    #[error("something is listening there")]
    Listening,
    #[error("exists and is not a socket: not replaced")]
    NotSocket,
    /// The private directory the socket is bound in.
    #[error("{}: {source}", path.display())]
    PrivateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn bind(t: &Target) -> Result<Listener, OpenFlowError> {
    let bind_error = |source: BindError| OpenFlowError::Bind {
        target: t.clone(),
        source,
    };
    match t {
        Target::Ptcp(a) | Target::Pssl(a) => {
            let l = TcpListener::bind(a).map_err(|e| bind_error(e.into()))?;
            l.set_nonblocking(true)?;
            if matches!(t, Target::Pssl(_)) {
                return Ok(Listener::Ssl(l));
            }
            if a.ip().is_unspecified() {
                tracing::warn!(
                    target = %t,
                    "OpenFlow listener on every address without authentication: anyone who \
                     reaches port {} can change the tables (use ptcp:{}:127.0.0.1 or pssl:)",
                    a.port(),
                    a.port()
                );
            }
            Ok(Listener::Tcp(l))
        }
        Target::Punix(p) => {
            let l = bind_unix(p, PUNIX_MODE).map_err(bind_error)?;
            l.set_nonblocking(true)?;
            Ok(Listener::Unix(l, p.clone()))
        }
        _ => Err(OpenFlowError::NotListener(t.clone())),
    }
}

/// Bind a unix socket at `path` with exactly `mode`, whatever the umask,
/// without a moment where it is reachable with a wider mode: it is bound
/// inside a fresh directory only its owner can enter, given its mode
/// there, and renamed into place (rename keeps the binding). A stale
/// socket at `path` is replaced; a live one, or anything that is not a
/// socket, is an error and left alone.
fn bind_unix(path: &Path, mode: u32) -> Result<UnixListener, BindError> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(BindError::Listening);
            }
        }
        Ok(_) => return Err(BindError::NotSocket),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let private = dir.join(format!(
        ".nfof{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    // The umask can only take bits away from 0700.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|source| BindError::PrivateDir {
            path: private.clone(),
            source,
        })?;
    struct Cleanup<'a>(&'a Path);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0.join("s"));
            let _ = std::fs::remove_dir(self.0);
        }
    }
    let _cleanup = Cleanup(&private);
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700))?;
    let inner = private.join("s");
    let l = UnixListener::bind(&inner)?;
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&inner, path)?;
    Ok(l)
}

/// Start a non-blocking TCP connect.
fn tcp_connect(addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let (family, sa, len) = sockaddr(addr);
    // SAFETY: plain socket syscalls on a fresh descriptor; `sa` is a valid
    // sockaddr of `len` bytes.
    unsafe {
        let fd = libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let r = libc::connect(fd, &sa as *const _ as *const libc::sockaddr, len);
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        Ok(stream)
    }
}

fn sockaddr(addr: std::net::SocketAddr) -> (libc::c_int, libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            (
                libc::AF_INET,
                ss,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (
                libc::AF_INET6,
                ss,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

impl OfBridge {
    fn new(now: Instant) -> OfBridge {
        OfBridge {
            targets: Vec::new(),
            fail_mode: FailMode::default(),
            listeners: Vec::new(),
            actives: Vec::new(),
            sessions: Vec::new(),
            master_generation: None,
            ports: None,
            last_connected: now,
            fail_open: false,
            async_dropped: 0,
            refused: BTreeMap::new(),
            versions: msg::SUPPORTED_VERSIONS.to_vec(),
        }
    }

    /// Count and log a refused connection.
    fn refuse(&mut self, target: &str, peer: &str, why: String) {
        tracing::warn!(%peer, %target, "OpenFlow connection refused: {why}");
        let e = self.refused.entry(target.to_string()).or_default();
        e.0 += 1;
        e.1 = why;
    }

    fn connected(&self) -> bool {
        self.sessions.iter().any(|s| s.negotiated && !s.dead)
    }
}

/// A summary of one target for `get-controller`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TargetStatus {
    pub target: String,
    pub connected: usize,
    pub roles: Vec<String>,
    /// Connections refused (peer credentials, TLS, too many).
    pub refused: u64,
    /// Why the last one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_refusal: Option<String>,
}

fn role_name(r: u32) -> &'static str {
    match r {
        role::MASTER => "master",
        role::SLAVE => "slave",
        _ => "equal",
    }
}

impl OpenFlow {
    /// Set a bridge's targets and fail mode. Listeners that stay are kept
    /// (with their connections); new ones are bound now (an address in use
    /// is an error and changes nothing).
    pub fn configure(
        &mut self,
        bridge: &str,
        targets: &[Target],
        fail_mode: FailMode,
        now: Instant,
    ) -> Result<(), OpenFlowError> {
        if let Some(t) = targets.iter().find(|t| t.tls()) {
            if self.tls.is_none() {
                return Err(OpenFlowError::NoSsl(t.clone()));
            }
        }
        let b = self
            .bridges
            .entry(bridge.to_string())
            .or_insert_with(|| OfBridge::new(now));
        // Bind the new listeners first: all or nothing.
        let mut new_listeners = Vec::new();
        for t in targets.iter().filter(|t| t.passive()) {
            let name = t.to_string();
            if !b.listeners.iter().any(|(n, _)| *n == name) {
                new_listeners.push((name, bind(t)?));
            }
        }
        let names: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
        b.listeners.retain(|(n, _)| names.contains(n));
        b.listeners.extend(new_listeners);
        b.actives.retain(|a| targets.contains(&a.target));
        for t in targets.iter().filter(|t| !t.passive()) {
            if !b.actives.iter().any(|a| a.target == *t) {
                b.actives.push(Active {
                    target: t.clone(),
                    state: ActiveState::Waiting(now),
                    backoff: BACKOFF_MIN,
                });
            }
        }
        for s in &mut b.sessions {
            if !names.contains(&s.target) {
                s.dead = true;
            }
        }
        if !b.targets.iter().any(|t| !t.passive()) {
            // Active controllers (re)appear: they get three probe
            // intervals before the bridge fails open.
            b.last_connected = now;
        }
        b.refused.retain(|t, _| names.contains(t));
        b.targets = targets.to_vec();
        b.fail_mode = fail_mode;
        Ok(())
    }

    /// `set-ssl`: load and check the key, certificate and CA now (a bad
    /// file changes nothing); new TLS connections use them, open ones
    /// keep theirs.
    /// Returns the configuration it replaced, for [`OpenFlow::restore_ssl`].
    pub fn set_ssl(&mut self, files: &tls::SslFiles) -> Result<Option<tls::Tls>, OpenFlowError> {
        let t = tls::Tls::load(files)?;
        tracing::info!(
            private_key = %files.private_key.display(),
            certificate = %files.certificate.display(),
            ca_cert = %files.ca_cert.display(),
            "OpenFlow TLS configuration loaded"
        );
        Ok(self.tls.replace(t))
    }

    /// Put back what [`OpenFlow::set_ssl`] or [`OpenFlow::del_ssl`]
    /// replaced (the request could not be recorded in the config file).
    pub fn restore_ssl(&mut self, old: Option<tls::Tls>) {
        self.tls = old;
    }

    /// `del-ssl`: refused while a bridge has `ssl:`/`pssl:` targets.
    /// Returns the configuration it removed.
    pub fn del_ssl(&mut self) -> Result<Option<tls::Tls>, OpenFlowError> {
        for (name, b) in &self.bridges {
            if let Some(t) = b.targets.iter().find(|t| t.tls()) {
                return Err(OpenFlowError::SslInUse {
                    bridge: name.clone(),
                    target: t.clone(),
                });
            }
        }
        Ok(self.tls.take())
    }

    /// `set BRIDGE protocols=`: the versions connections to `bridge` may
    /// speak (nicflow's of them: 1.3 and 1.5; an empty list means both).
    /// New connections offer these; open ones speaking a version no longer
    /// allowed are closed, as Open vSwitch does.
    pub fn set_protocols(&mut self, bridge: &str, versions: &[u8], now: Instant) {
        let b = self
            .bridges
            .entry(bridge.to_string())
            .or_insert_with(|| OfBridge::new(now));
        b.versions = if versions.is_empty() {
            msg::SUPPORTED_VERSIONS.to_vec()
        } else {
            versions.to_vec()
        };
        for s in &mut b.sessions {
            if s.negotiated && !b.versions.contains(&s.version) {
                tracing::info!(peer = %s.peer, "OpenFlow version no longer allowed: closing");
                s.dead = true;
            }
        }
    }

    /// Forget a bridge (deleted): its connections close.
    pub fn remove(&mut self, bridge: &str) {
        self.bridges.remove(bridge);
    }

    /// `get-controller`: each target and its connections.
    pub fn status(&self, bridge: &str) -> Vec<TargetStatus> {
        let Some(b) = self.bridges.get(bridge) else {
            return Vec::new();
        };
        b.targets
            .iter()
            .map(|t| {
                let name = t.to_string();
                let live: Vec<&Session> = b
                    .sessions
                    .iter()
                    .filter(|s| s.target == name && s.negotiated && !s.dead)
                    .collect();
                let refused = b.refused.get(&name);
                TargetStatus {
                    connected: live.len(),
                    roles: live.iter().map(|s| role_name(s.role).to_string()).collect(),
                    refused: refused.map_or(0, |r| r.0),
                    last_refusal: refused.map(|r| r.1.clone()),
                    target: name,
                }
            })
            .collect()
    }

    /// Is the bridge failing open now?
    pub fn fail_open(&self, bridge: &str) -> bool {
        self.bridges.get(bridge).is_some_and(|b| b.fail_open)
    }

    /// Asynchronous messages dropped for slow controllers.
    pub fn async_dropped(&self, bridge: &str) -> u64 {
        self.bridges.get(bridge).map_or(0, |b| {
            b.async_dropped + b.sessions.iter().map(|s| s.async_dropped).sum::<u64>()
        })
    }

    /// Some connection has whole messages waiting (more than one round's
    /// worth arrived): the loop should not sleep.
    pub fn has_backlog(&self) -> bool {
        self.bridges
            .values()
            .any(|b| b.sessions.iter().any(|s| s.has_backlog()))
    }

    pub fn is_empty(&self) -> bool {
        self.bridges.values().all(|b| b.targets.is_empty())
    }

    /// Descriptors to wait on.
    pub fn poll_fds(&self, fds: &mut Vec<libc::pollfd>) {
        for b in self.bridges.values() {
            for (_, l) in &b.listeners {
                let fd = match l {
                    Listener::Tcp(l) | Listener::Ssl(l) => l.as_raw_fd(),
                    Listener::Unix(l, _) => l.as_raw_fd(),
                };
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            for a in &b.actives {
                if let ActiveState::Connecting(s, _) = &a.state {
                    fds.push(libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    });
                }
            }
            for s in &b.sessions {
                if let Some(fd) = s.conn.raw_fd() {
                    // Input is not polled while it would not be read (a
                    // readable socket would wake the loop for nothing).
                    let mut events = if s.wants_read() { libc::POLLIN } else { 0 };
                    if s.pending() > 0 || s.conn.wants_write() {
                        events |= libc::POLLOUT;
                    }
                    fds.push(libc::pollfd {
                        fd,
                        events,
                        revents: 0,
                    });
                }
            }
        }
    }

    /// One round: accept, connect, read and handle requests, deliver
    /// asynchronous messages, write. Returns the bridges whose rules or
    /// groups changed (the config file is due).
    pub fn service(&mut self, bridges: &mut BTreeMap<String, Bridge>, now: Instant) -> Vec<String> {
        let mut changed = Vec::new();
        let mut tlv_changed = false;
        for (name, b) in self.bridges.iter_mut() {
            let Some(br) = bridges.get_mut(name) else {
                continue;
            };
            if b.targets.is_empty() && b.sessions.is_empty() {
                continue;
            }
            accept(b, self.tls.as_ref(), now);
            connect(b, self.tls.as_ref(), now);
            let mut tables_changed = false;
            for i in 0..b.sessions.len() {
                b.sessions[i].read(now);
                for _ in 0..session::MSGS_PER_ROUND {
                    let Some(d) = b.sessions[i].poll_message() else {
                        break;
                    };
                    if let Message::RoleRequest(r) = d.message {
                        role_request(b, i, r, d.xid);
                        continue;
                    }
                    if let Message::Nx(NxMessage::TlvTableMod(_) | NxMessage::TlvTableRequest) =
                        &d.message
                    {
                        tlv_changed |= tlv_message(&mut self.tlv, &mut b.sessions[i], &d);
                        continue;
                    }
                    let fx = handle::handle(&mut b.sessions[i], br, d, now);
                    tables_changed |= fx.tables_changed;
                }
            }
            deliver_async(b, br);
            for s in &mut b.sessions {
                s.flush();
            }
            close_dead(b, now);
            if b.connected() {
                b.last_connected = now;
            }
            if tables_changed {
                changed.push(name.clone());
            }
        }
        if tlv_changed {
            self.apply_tlv(bridges);
        }
        changed
    }

    /// Give every bridge the switch-wide Geneve option map (bridges that
    /// already have it are left alone).
    fn apply_tlv(&self, bridges: &mut BTreeMap<String, Bridge>) {
        let map = self.tlv.mappings();
        for (name, br) in bridges.iter_mut() {
            if br.tlv_map() != map.as_slice() {
                let n = br.set_tlv_map(&map);
                tracing::info!(bridge = %name, ports = n, "Geneve option map set: {map:?}");
            }
        }
    }

    /// Once a second: probes, port status, fail-open, the Geneve option
    /// map on bridges created since it was set.
    pub fn tick(&mut self, bridges: &mut BTreeMap<String, Bridge>, now: Instant) {
        self.apply_tlv(bridges);
        for (name, b) in self.bridges.iter_mut() {
            let Some(br) = bridges.get_mut(name) else {
                continue;
            };
            for s in &mut b.sessions {
                s.probe(now, session::PROBE_INTERVAL);
            }
            port_status(b, br);
            let want_open = b.fail_mode == FailMode::Standalone
                && !b.actives.is_empty()
                && !b.connected()
                && now.duration_since(b.last_connected) >= session::PROBE_INTERVAL * 3;
            if want_open != b.fail_open {
                set_fail_open(br, want_open, now);
                b.fail_open = want_open;
                tracing::info!(bridge = %name, "fail-open {}", if want_open { "on: no controller" } else { "off" });
            }
        }
    }
}

/// Add or remove the fail-open `NORMAL` rule.
fn set_fail_open(br: &mut Bridge, on: bool, now: Instant) {
    if on {
        let catchall = Match::catchall();
        let sel = flow_mod::FlowSelector {
            table: Some(0),
            out_port: None,
            out_group: None,
            cookie: 0,
            cookie_mask: 0,
            matching: catchall,
        };
        let have_default = br
            .flow_stats(&sel, now)
            .iter()
            .any(|d| d.spec.priority == 0 && d.spec.r#match.mask().words().iter().all(|w| *w == 0));
        if have_default {
            return;
        }
        let mut fm = flow_mod::FlowMod::add(0, 0, catchall, vec![Action::Normal]);
        fm.cookie = FAIL_OPEN_COOKIE;
        let _ = br.flow_mod(&fm, now);
    } else {
        let mut fm = flow_mod::FlowMod::add(0, 0, Match::catchall(), Vec::new());
        fm.command = FlowModCommand::DeleteStrict;
        fm.cookie = FAIL_OPEN_COOKIE;
        fm.cookie_mask = u64::MAX;
        let _ = br.flow_mod(&fm, now);
    }
}

fn accept(b: &mut OfBridge, tls: Option<&tls::Tls>, now: Instant) {
    let mut refused = Vec::new();
    for (name, l) in &b.listeners {
        let ssl = matches!(l, Listener::Ssl(_));
        loop {
            let (conn, peer) = match l {
                Listener::Tcp(l) | Listener::Ssl(l) => match l.accept() {
                    Ok((s, a)) => {
                        let _ = s.set_nonblocking(true);
                        let _ = s.set_nodelay(true);
                        if !ssl {
                            (Conn::Tcp(s), format!("tcp:{a}"))
                        } else {
                            let peer = format!("ssl:{a}");
                            match tls.map(|t| t.accept(s)) {
                                Some(Ok(t)) => (Conn::Tls(Box::new(t)), peer),
                                Some(Err(e)) => {
                                    refused.push((name.clone(), peer, format!("TLS: {e}")));
                                    continue;
                                }
                                None => {
                                    refused.push((
                                        name.clone(),
                                        peer,
                                        "no SSL configuration (set-ssl)".into(),
                                    ));
                                    continue;
                                }
                            }
                        }
                    }
                    Err(_) => break,
                },
                Listener::Unix(l, p) => match l.accept() {
                    Ok((s, _)) => {
                        let peer = format!("unix:{}", p.display());
                        // The socket's mode keeps other users out; the
                        // credentials check holds even if it was loosened.
                        if !super::peer::peer_allowed(&s) {
                            refused.push((
                                name.clone(),
                                peer,
                                "peer is neither root nor the daemon's user (SO_PEERCRED)".into(),
                            ));
                            continue;
                        }
                        let _ = s.set_nonblocking(true);
                        (Conn::Unix(s), peer)
                    }
                    Err(_) => break,
                },
            };
            if b.sessions.len() >= MAX_SESSIONS {
                refused.push((
                    name.clone(),
                    peer,
                    format!("{MAX_SESSIONS} connections already"),
                ));
                drop(conn);
                continue;
            }
            tracing::info!(%peer, listener = %name, "OpenFlow connection");
            b.sessions.push(Session::with_versions(
                conn,
                peer,
                name.clone(),
                &b.versions,
                now,
            ));
        }
    }
    for (target, peer, why) in refused {
        b.refuse(&target, &peer, why);
    }
}

fn connect(b: &mut OfBridge, tls: Option<&tls::Tls>, now: Instant) {
    let mut refused = Vec::new();
    let versions = b.versions.clone();
    for a in &mut b.actives {
        let next = match std::mem::replace(&mut a.state, ActiveState::Up) {
            ActiveState::Up => ActiveState::Up,
            ActiveState::Waiting(at) if now < at => ActiveState::Waiting(at),
            ActiveState::Waiting(_) => match &a.target {
                Target::Tcp(addr) | Target::Ssl(addr) => match tcp_connect(*addr) {
                    Ok(s) => ActiveState::Connecting(s, now),
                    Err(e) => {
                        tracing::debug!(target = %a.target, "connect: {e}");
                        backoff(a, now)
                    }
                },
                Target::Unix(p) => match UnixStream::connect(p) {
                    Ok(s) => {
                        let _ = s.set_nonblocking(true);
                        a.backoff = BACKOFF_MIN;
                        let name = a.target.to_string();
                        tracing::info!(target = %name, "OpenFlow controller connected");
                        b.sessions.push(Session::with_versions(
                            Conn::Unix(s),
                            name.clone(),
                            name,
                            &versions,
                            now,
                        ));
                        ActiveState::Up
                    }
                    Err(_) => backoff(a, now),
                },
                _ => ActiveState::Up,
            },
            ActiveState::Connecting(s, since) => match (s.take_error(), s.peer_addr()) {
                (Ok(None), Ok(peer)) => {
                    let _ = s.set_nodelay(true);
                    let name = a.target.to_string();
                    let conn = match &a.target {
                        Target::Ssl(_) => match tls.map(|t| t.connect(s, peer.ip())) {
                            Some(Ok(t)) => Ok(Conn::Tls(Box::new(t))),
                            Some(Err(e)) => Err(format!("TLS: {e}")),
                            None => Err("no SSL configuration (set-ssl)".to_string()),
                        },
                        _ => Ok(Conn::Tcp(s)),
                    };
                    match conn {
                        Ok(conn) => {
                            a.backoff = BACKOFF_MIN;
                            tracing::info!(target = %name, "OpenFlow controller connected");
                            b.sessions.push(Session::with_versions(
                                conn,
                                name.clone(),
                                name,
                                &versions,
                                now,
                            ));
                            ActiveState::Up
                        }
                        Err(why) => {
                            refused.push((name.clone(), name, why));
                            backoff(a, now)
                        }
                    }
                }
                (Ok(Some(_)), _) | (Err(_), _) => backoff(a, now),
                (Ok(None), Err(_)) if now.duration_since(since) > Duration::from_secs(5) => {
                    backoff(a, now)
                }
                (Ok(None), Err(_)) => ActiveState::Connecting(s, since),
            },
        };
        a.state = next;
    }
    for (target, peer, why) in refused {
        b.refuse(&target, &peer, why);
    }
}

fn backoff(a: &mut Active, now: Instant) -> ActiveState {
    let at = now + a.backoff;
    a.backoff = (a.backoff * 2).min(BACKOFF_MAX);
    ActiveState::Waiting(at)
}

fn close_dead(b: &mut OfBridge, now: Instant) {
    let mut i = 0;
    while i < b.sessions.len() {
        if b.sessions[i].dead {
            let s = b.sessions.remove(i);
            match s.conn.refusal() {
                Some(why) => b.refuse(&s.target, &s.peer, why),
                None => tracing::info!(peer = %s.peer, "OpenFlow connection closed"),
            }
            b.async_dropped += s.async_dropped;
            if let Some(a) = b
                .actives
                .iter_mut()
                .find(|a| a.target.to_string() == s.target)
            {
                let at = now + a.backoff;
                a.backoff = (a.backoff * 2).min(BACKOFF_MAX);
                a.state = ActiveState::Waiting(at);
            }
        } else {
            i += 1;
        }
    }
}

/// `NXT_TLV_TABLE_MOD` / `NXT_TLV_TABLE_REQUEST` on the switch-wide
/// table. Returns whether the table changed.
fn tlv_message(table: &mut tlv::TlvTable, s: &mut Session, d: &msg::Decoded) -> bool {
    match &d.message {
        Message::Nx(NxMessage::TlvTableRequest) => {
            s.send(&Message::Nx(NxMessage::TlvTableReply(table.reply())), d.xid);
            false
        }
        Message::Nx(NxMessage::TlvTableMod(m)) => {
            if s.role == role::SLAVE {
                s.send_error(
                    OfpError::BadRequest(nicflow_openflow::error::BadRequest::IS_SLAVE),
                    d.xid,
                    &handle::err_data(d),
                );
                return false;
            }
            match table.apply(m) {
                Ok(changed) => changed,
                Err(code) => {
                    s.send_error(
                        tlv::nx_error(code),
                        d.xid,
                        &tlv::nx_error_data(&handle::err_data(d)),
                    );
                    false
                }
            }
        }
        _ => false,
    }
}

fn role_request(b: &mut OfBridge, i: usize, r: Role, xid: u32) {
    let err = |b: &mut OfBridge, c: RoleRequestFailed| {
        b.sessions[i].send_error(OfpError::RoleRequestFailed(c), xid, &[]);
    };
    match r.role {
        role::NOCHANGE => {}
        role::MASTER | role::SLAVE => {
            if let Some(g) = b.master_generation {
                if (r.generation_id.wrapping_sub(g) as i64) < 0 {
                    return err(b, RoleRequestFailed::STALE);
                }
            }
            b.master_generation = Some(r.generation_id);
            if r.role == role::MASTER {
                for (j, s) in b.sessions.iter_mut().enumerate() {
                    if j != i && s.role == role::MASTER {
                        s.role = role::SLAVE;
                    }
                }
            }
            b.sessions[i].role = r.role;
        }
        role::EQUAL => b.sessions[i].role = role::EQUAL,
        _ => return err(b, RoleRequestFailed::BAD_ROLE),
    }
    let reply = Role {
        role: b.sessions[i].role,
        generation_id: b.master_generation.unwrap_or(0),
    };
    b.sessions[i].send(&Message::RoleReply(reply), xid);
}

fn deliver_async(b: &mut OfBridge, br: &mut Bridge) {
    let pkts = br.take_controller_packets();
    let removed = br.take_flow_removed();
    if pkts.is_empty() && removed.is_empty() {
        return;
    }
    for p in pkts {
        let mut m = Match::catchall();
        m.set(Field::InPort, u128::from(p.in_port), u128::from(u32::MAX));
        let pi = PacketIn {
            buffer_id: msg::flow::NO_BUFFER,
            total_len: p.total_len.min(usize::from(u16::MAX)) as u16,
            reason: p.reason,
            table_id: p.table_id,
            cookie: p.cookie,
            r#match: m,
            data: p.data,
        };
        let mut pi2 = None;
        for s in &mut b.sessions {
            if s.wants(0, p.reason) {
                let mut one = pi.clone();
                // A table miss is cut to the connection's miss_send_len.
                if p.reason == msg::flow::packet_in_reason::NO_MATCH
                    && s.miss_send_len != session::NO_BUFFER_LEN
                {
                    one.data.truncate(usize::from(s.miss_send_len));
                }
                if s.packet_in_format == msg::nx::packet_in_format::NXT_PACKET_IN2 {
                    let full =
                        pi2.get_or_insert_with(|| packet_in2(&br.name, &pi, p.extra.as_deref()));
                    let mut two = full.clone();
                    if one.data.len() < two.packet.len() {
                        two.packet.truncate(one.data.len());
                        two.full_len = Some(u32::from(pi.total_len));
                    }
                    s.send_async(&Message::Nx(NxMessage::PacketIn2(two)));
                } else {
                    s.send_async(&Message::PacketIn(one));
                }
            }
        }
    }
    for r in removed {
        let fr = FlowRemoved {
            cookie: r.cookie,
            priority: r.priority,
            reason: r.reason as u8,
            table_id: r.table,
            duration_sec: r.duration.as_secs() as u32,
            duration_nsec: r.duration.subsec_nanos(),
            idle_timeout: r.idle_timeout,
            hard_timeout: r.hard_timeout,
            packet_count: r.n_packets,
            byte_count: r.n_bytes,
            r#match: r.matching,
        };
        for s in &mut b.sessions {
            if s.wants(2, fr.reason) {
                s.send_async(&Message::FlowRemoved(fr.clone()));
            }
        }
    }
}

/// The `NXT_PACKET_IN2` for a copy: table, cookie, reason, the pipeline
/// fields OVS puts in its metadata (`in_port`, and for a
/// `controller(...)` with options every non-zero register, `metadata`,
/// packet mark and tunnel field as the pipeline had them at the action),
/// the action's userdata, and for `controller(pause)` the continuation
/// (only this format carries one: a standard `PACKET_IN` of a paused walk
/// cannot be resumed).
fn packet_in2(bridge: &str, pi: &PacketIn, extra: Option<&ControllerExtra>) -> msg::nx::PacketIn2 {
    let mut two = msg::nx::PacketIn2::new(pi.data.clone());
    if usize::from(pi.total_len) > pi.data.len() {
        two.full_len = Some(u32::from(pi.total_len));
    }
    two.table_id = Some(pi.table_id);
    two.cookie = Some(pi.cookie);
    two.reason = Some(pi.reason);
    let mut m = pi.r#match;
    if let Some(e) = extra {
        for f in PIPELINE_FIELDS {
            let v = f.read(&e.pipeline);
            if v != 0 {
                m.set(*f, v, f.full_mask());
            }
        }
        if !e.userdata.is_empty() {
            two.userdata = Some(e.userdata.clone());
        }
        if let Some(p) = &e.paused {
            two.continuation = continuation::encode(bridge, p);
            if two.continuation.is_none() {
                tracing::debug!(
                    bridge,
                    "paused walk has an action with no OpenFlow form: no continuation"
                );
            }
        }
    }
    two.metadata = Some(m);
    two
}

/// The pipeline fields a `PACKET_IN2` reports when set (OVS's
/// `flow_get_metadata`).
pub(super) const PIPELINE_FIELDS: &[Field] = &[
    Field::TunId,
    Field::TunSrc,
    Field::TunDst,
    Field::TunMetadata(0),
    Field::TunMetadata(1),
    Field::TunMetadata(2),
    Field::TunMetadata(3),
    Field::TunMetadata(4),
    Field::TunMetadata(5),
    Field::TunMetadata(6),
    Field::TunMetadata(7),
    Field::Metadata,
    Field::Reg(0),
    Field::Reg(1),
    Field::Reg(2),
    Field::Reg(3),
    Field::Reg(4),
    Field::Reg(5),
    Field::Reg(6),
    Field::Reg(7),
    Field::Reg(8),
    Field::Reg(9),
    Field::Reg(10),
    Field::Reg(11),
    Field::Reg(12),
    Field::Reg(13),
    Field::Reg(14),
    Field::Reg(15),
    Field::PktMark,
    // Conntrack state, so a resumed walk matches what it matched before.
    Field::CtState,
    Field::CtZone,
    Field::CtMark,
    Field::CtLabel,
];

fn port_status(b: &mut OfBridge, br: &Bridge) {
    let now_ports: Vec<(u32, String)> = br
        .of_ports()
        .into_iter()
        .map(|(no, name, _)| (no, name))
        .collect();
    let Some(before) = b.ports.replace(now_ports.clone()) else {
        return;
    };
    if now_ports == before {
        return;
    }
    let descs = handle::port_descs(br);
    let mut msgs = Vec::new();
    for p in &now_ports {
        if !before.contains(p) {
            if let Some(d) = descs.iter().find(|d| d.port_no == p.0) {
                msgs.push(PortStatus {
                    reason: msg::port::reason::ADD,
                    desc: d.clone(),
                });
            }
        }
    }
    for (no, name) in &before {
        if !now_ports.iter().any(|(n, _)| n == no) {
            msgs.push(PortStatus {
                reason: msg::port::reason::DELETE,
                desc: msg::Port {
                    port_no: *no,
                    name: name.chars().take(15).collect(),
                    state: msg::port::state::LINK_DOWN,
                    ..Default::default()
                },
            });
        }
    }
    for m in msgs {
        for s in &mut b.sessions {
            if s.wants(1, m.reason) {
                s.send_async(&Message::PortStatus(m.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_openflow::msg::{encode_to_vec, Hello};

    fn open(now: Instant) -> Session {
        let mut s = Session::new(Conn::None, "t".into(), "ptcp:0".into(), now);
        s.feed(
            &encode_to_vec(&Message::Hello(Hello::ofp13()), 1).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        s.take_output();
        s
    }

    fn last(s: &mut Session) -> Message {
        let out = s.take_output();
        msg::decode(&out).unwrap().0.message
    }

    #[test]
    fn roles_master_slave_and_stale_generations() {
        let now = Instant::now();
        let mut b = OfBridge::new(now);
        b.sessions.push(open(now));
        b.sessions.push(open(now));
        let req = |role, generation_id| Role {
            role,
            generation_id,
        };
        role_request(&mut b, 0, req(role::MASTER, 5), 1);
        assert_eq!(
            last(&mut b.sessions[0]),
            Message::RoleReply(req(role::MASTER, 5))
        );
        // A second master demotes the first.
        role_request(&mut b, 1, req(role::MASTER, 6), 2);
        assert_eq!(b.sessions[0].role, role::SLAVE);
        assert_eq!(b.sessions[1].role, role::MASTER);
        // An older generation is stale.
        role_request(&mut b, 0, req(role::MASTER, 4), 3);
        assert!(matches!(last(&mut b.sessions[0]), Message::Error(e)
            if e.error == OfpError::RoleRequestFailed(RoleRequestFailed::STALE)));
        assert_eq!(b.sessions[0].role, role::SLAVE);
        // Unknown role.
        role_request(&mut b, 0, req(9, 7), 4);
        assert!(matches!(last(&mut b.sessions[0]), Message::Error(e)
            if e.error == OfpError::RoleRequestFailed(RoleRequestFailed::BAD_ROLE)));
        // NOCHANGE reports; EQUAL needs no generation.
        role_request(&mut b, 1, req(role::NOCHANGE, 0), 5);
        assert_eq!(
            last(&mut b.sessions[1]),
            Message::RoleReply(req(role::MASTER, 6))
        );
        role_request(&mut b, 0, req(role::EQUAL, 0), 6);
        assert_eq!(b.sessions[0].role, role::EQUAL);
    }

    fn all(s: &mut Session) -> Vec<Message> {
        let out = s.take_output();
        let mut b = &out[..];
        let mut v = Vec::new();
        while !b.is_empty() {
            let (d, n) = msg::decode(b).unwrap();
            v.push(d.message);
            b = &b[n..];
        }
        v
    }

    #[test]
    fn flow_removed_and_port_status_reach_the_controllers_that_want_them() {
        let now = Instant::now();
        let mut br = Bridge::new("br0", crate::datapath::DatapathConfig::default());
        let (p1, _h1) = crate::port::mem::MemPort::new("p1");
        br.add_port(Box::new(p1)).unwrap();
        let mut b = OfBridge::new(now);
        b.sessions.push(open(now));
        b.sessions.push(open(now));
        b.sessions[1].role = role::SLAVE;
        port_status(&mut b, &br); // first look: nothing to say
        let mut fm = flow_mod::FlowMod::add(0, 7, Match::catchall(), vec![Action::Normal]);
        fm.flags = flow_mod::flags::SEND_FLOW_REM;
        fm.cookie = 0x42;
        br.flow_mod(&fm, now).unwrap();
        fm.command = FlowModCommand::DeleteStrict;
        fm.cookie_mask = u64::MAX;
        assert_eq!(br.flow_mod(&fm, now).unwrap().len(), 1);
        deliver_async(&mut b, &mut br);
        let m = all(&mut b.sessions[0]);
        assert!(
            matches!(&m[..], [Message::FlowRemoved(r)] if r.cookie == 0x42 && r.priority == 7
                && r.reason == msg::flow::removed_reason::DELETE),
            "{m:?}"
        );
        // A slave gets no FLOW_REMOVED by default.
        assert!(all(&mut b.sessions[1]).is_empty());
        // A new port: PORT_STATUS ADD to both (slaves get port status).
        let (p2, _h2) = crate::port::mem::MemPort::new("p2");
        br.add_port(Box::new(p2)).unwrap();
        port_status(&mut b, &br);
        for s in &mut b.sessions {
            let m = all(s);
            assert!(
                matches!(&m[..], [Message::PortStatus(p)] if p.reason == msg::port::reason::ADD
                    && p.desc.port_no == 2 && p.desc.name == "p2"),
                "{m:?}"
            );
        }
        br.del_port("p1").unwrap();
        port_status(&mut b, &br);
        let m = all(&mut b.sessions[0]);
        assert!(
            matches!(&m[..], [Message::PortStatus(p)] if p.reason == msg::port::reason::DELETE
                && p.desc.port_no == 1),
            "{m:?}"
        );
    }

    #[test]
    fn punix_sockets_get_their_mode_and_replace_only_stale_sockets() {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("br0.mgmt");
        let l = bind_unix(&p, PUNIX_MODE).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert!(m.file_type().is_socket());
        // Whatever the umask of the test process.
        assert_eq!(m.permissions().mode() & 0o7777, 0o750);
        // Bound where it was moved: connections arrive.
        let _c = UnixStream::connect(&p).unwrap();
        assert!(l.accept().is_ok());
        // Only the socket is left in the directory.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("br0.mgmt")]);
        // Live: refused. Stale: replaced.
        assert!(matches!(
            bind_unix(&p, PUNIX_MODE),
            Err(BindError::Listening)
        ));
        assert_eq!(
            BindError::Listening.to_string(),
            "something is listening there"
        );
        drop(l);
        let l = bind_unix(&p, PUNIX_MODE).unwrap();
        assert!(UnixStream::connect(&p).is_ok());
        drop(l);
        // Anything else is left alone.
        let f = dir.path().join("file");
        std::fs::write(&f, b"keep").unwrap();
        assert!(bind_unix(&f, PUNIX_MODE)
            .unwrap_err()
            .to_string()
            .contains("not a socket"));
        assert_eq!(std::fs::read(&f).unwrap(), b"keep");
        // A directory that does not exist: an error, nothing created.
        assert!(bind_unix(&dir.path().join("no/such"), PUNIX_MODE).is_err());
    }

    #[test]
    fn tls_targets_need_set_ssl() {
        let now = Instant::now();
        let mut of = OpenFlow::default();
        let t = [Target::parse("pssl:0:127.0.0.1").unwrap()];
        let e = of
            .configure("br0", &t, FailMode::Standalone, now)
            .unwrap_err();
        assert!(matches!(e, OpenFlowError::NoSsl(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "pssl:0:127.0.0.1: no SSL configuration: run `nicflow set-ssl PRIVATE-KEY CERTIFICATE CA-CERT` first"
        );
        let t = [Target::parse("ssl:127.0.0.1").unwrap()];
        assert!(of.configure("br0", &t, FailMode::Standalone, now).is_err());
        assert!(of.status("br0").is_empty());
    }

    #[test]
    fn a_slave_cannot_change_the_tables() {
        let now = Instant::now();
        let mut br = Bridge::new("br0", crate::datapath::DatapathConfig::default());
        let mut s = open(now);
        s.role = role::SLAVE;
        s.feed(&encode_to_vec(&Message::BarrierRequest, 3).unwrap(), now);
        let d = s.poll_message().unwrap();
        handle::handle(&mut s, &mut br, d, now);
        assert_eq!(last(&mut s), Message::BarrierReply);
        let gm = msg::GroupMod {
            command: msg::group::command::DELETE,
            group_type: 0,
            group_id: msg::group::OFPG_ALL,
            command_bucket_id: msg::group::bucket_id::ALL,
            buckets: vec![],
            selection_method: None,
        };
        s.feed(&encode_to_vec(&Message::GroupMod(gm), 4).unwrap(), now);
        let d = s.poll_message().unwrap();
        handle::handle(&mut s, &mut br, d, now);
        assert!(matches!(last(&mut s), Message::Error(e)
            if e.error == OfpError::BadRequest(nicflow_openflow::error::BadRequest::IS_SLAVE)));
    }
}
