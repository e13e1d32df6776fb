//! The P4Runtime gRPC service: client arbitration (primary/backup per role by
//! election id), device-id and election-id checks, pipeline loading, batched
//! writes with per-update errors, reads and the packet stream. Everything that
//! reaches the target has been checked against the loaded P4Info first
//! (crate::validate).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

use crate::p4info::P4InfoIndex;
use crate::proto::google::rpc as grpc_rpc;
use crate::proto::p4::config::v1::P4Info;
use crate::proto::p4::v1 as p4;
use crate::proto::p4::v1::p4_runtime_server::{P4Runtime, P4RuntimeServer};
use crate::{validate, P4RtTarget, PipelineMode, TargetEvent};
use p4::stream_message_request::Update as Req;
use p4::stream_message_response::Update as Resp;

/// Errors starting or running the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC transport failed.
    #[error("P4Runtime server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Depth of each controller's outgoing stream queue; a controller that does
/// not read loses packet-ins beyond it rather than stalling the others.
const STREAM_QUEUE: usize = 1024;

type StreamTx = mpsc::Sender<Result<p4::StreamMessageResponse, Status>>;

/// One StreamChannel that has sent its arbitration message.
struct Controller {
    stream: u64,
    election_id: Option<u128>,
    tx: StreamTx,
}

/// The controllers of one role. P4Runtime (since 1.1) has no automatic
/// failover: a controller becomes primary only by announcing an election id
/// at least as high as any seen before for the role, and when the primary
/// leaves or downgrades itself the role stays without primary until one does.
#[derive(Default)]
struct RoleState {
    controllers: Vec<Controller>,
    /// Stream of the primary controller, if there is one.
    primary: Option<u64>,
    /// Highest election id ever seen for the role (`election_id_past`).
    highest: Option<u128>,
}

impl RoleState {
    /// The primary's election id.
    fn primary_id(&self) -> Option<u128> {
        let p = self.primary?;
        self.controllers
            .iter()
            .find(|c| c.stream == p)
            .and_then(|c| c.election_id)
    }

    /// Sends the arbitration advisory to one controller or to all.
    fn notify(&self, device_id: u64, role: &str, only: Option<u64>) {
        for c in self
            .controllers
            .iter()
            .filter(|c| only.is_none_or(|s| s == c.stream))
        {
            let status = match self.primary {
                Some(p) if p == c.stream => rpc_status(Code::Ok, "primary"),
                Some(_) => rpc_status(Code::AlreadyExists, "backup: another controller is primary"),
                None => rpc_status(Code::NotFound, "backup: no primary"),
            };
            let msg = p4::StreamMessageResponse {
                update: Some(Resp::Arbitration(p4::MasterArbitrationUpdate {
                    device_id,
                    role: (!role.is_empty()).then(|| p4::Role {
                        name: role.to_string(),
                        ..Default::default()
                    }),
                    election_id: self.highest.map(uint128),
                    status: Some(status),
                })),
            };
            if c.tx.try_send(Ok(msg)).is_err() {
                tracing::warn!(
                    "p4rt: controller stream {} full or closed; arbitration update dropped",
                    c.stream
                );
            }
        }
    }
}

/// A loaded program.
#[derive(Clone)]
struct Pipeline {
    p4info: P4Info,
    index: P4InfoIndex,
    device_config: Vec<u8>,
    cookie: Option<p4::forwarding_pipeline_config::Cookie>,
}

/// A config saved by VERIFY_AND_SAVE. Until COMMIT, writes are checked
/// against its P4Info and kept here, to be replayed on the target once the
/// program is committed (the target still runs the old program meanwhile).
struct Saved {
    client_p4info: Option<P4Info>,
    pipeline: Pipeline,
    pending: Vec<p4::Update>,
}

#[derive(Default)]
struct State {
    pipeline: Option<Pipeline>,
    /// Verified by VERIFY_AND_SAVE, waiting for COMMIT.
    saved: Option<Saved>,
    roles: HashMap<String, RoleState>,
}

struct Inner {
    device_id: u64,
    target: Arc<dyn P4RtTarget>,
    state: Mutex<State>,
    next_stream: AtomicU64,
    /// Set when the server shuts down: every StreamChannel ends, since gRPC's
    /// graceful shutdown would otherwise wait for controllers to hang up.
    closing: tokio::sync::watch::Sender<bool>,
}

/// The P4Runtime service for one device, to mount on a tonic server
/// ([`P4RtService::into_server`]) or run with [`serve`] / [`spawn`].
#[derive(Clone)]
pub struct P4RtService {
    inner: Arc<Inner>,
}

fn u128_of(id: &Option<p4::Uint128>) -> Option<u128> {
    id.as_ref()
        .map(|u| ((u.high as u128) << 64) | u.low as u128)
}

fn uint128(v: u128) -> p4::Uint128 {
    p4::Uint128 {
        high: (v >> 64) as u64,
        low: v as u64,
    }
}

fn rpc_status(code: Code, message: impl Into<String>) -> grpc_rpc::Status {
    grpc_rpc::Status {
        code: code as i32,
        message: message.into(),
        details: Vec::new(),
    }
}

impl P4RtService {
    /// A service for device `device_id` driving `target`; starts forwarding
    /// the target's events (packet-ins, idle timeouts) to primary controllers.
    /// Must be called inside a tokio runtime.
    pub fn new(device_id: u64, target: Arc<dyn P4RtTarget>) -> Self {
        let events = target.subscribe();
        let inner = Arc::new(Inner {
            device_id,
            target,
            state: Mutex::new(State::default()),
            next_stream: AtomicU64::new(1),
            closing: tokio::sync::watch::channel(false).0,
        });
        if let Some(mut rx) = events {
            let weak = Arc::downgrade(&inner);
            let mut closing = inner.closing.subscribe();
            tokio::spawn(async move {
                loop {
                    let next = tokio::select! {
                        ev = rx.recv() => ev,
                        // Shutting down (or the service is gone): stop forwarding.
                        _ = closing.changed() => break,
                    };
                    let ev = match next {
                        Ok(ev) => ev,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!("p4rt: {n} target events dropped (slow forwarding)");
                            continue;
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    };
                    let Some(inner) = weak.upgrade() else { break };
                    inner.deliver(ev);
                }
            });
        }
        Self { inner }
    }

    /// Ends every open StreamChannel (and refuses new ones): call when the
    /// server is shutting down. [`serve`] and [`spawn`] do.
    pub fn close_streams(&self) {
        self.inner.closing.send_replace(true);
    }

    /// The tonic service wrapper.
    pub fn into_server(self) -> P4RuntimeServer<Self> {
        P4RuntimeServer::new(self)
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-updated in a
        // way worse than refusing service, so recover the guard.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_device(&self, device_id: u64) -> Result<(), Status> {
        if device_id != self.device_id {
            return Err(Status::not_found(format!(
                "no device {device_id} (this server is device {})",
                self.device_id
            )));
        }
        Ok(())
    }

    /// PERMISSION_DENIED unless `election_id` is the primary's for `role`.
    fn check_primary(
        state: &State,
        role: &str,
        election_id: &Option<p4::Uint128>,
    ) -> Result<(), Status> {
        let Some(id) = u128_of(election_id) else {
            return Err(Status::permission_denied(
                "no election_id: only the primary controller may write",
            ));
        };
        if !role.is_empty() && !state.roles.contains_key(role) {
            return Err(Status::not_found(format!(
                "no role '{role}' on this device"
            )));
        }
        match state.roles.get(role).and_then(|r| r.primary_id()) {
            Some(p) if p == id => Ok(()),
            Some(_) => Err(Status::permission_denied(format!(
                "election_id {id} is not the primary's for role '{role}'"
            ))),
            None => Err(Status::permission_denied(format!(
                "role '{role}' has no primary controller (open StreamChannel and arbitrate first)"
            ))),
        }
    }

    /// Handles an arbitration message of stream `stream`: joins or updates it
    /// in its role and tells the controllers what changed.
    fn arbitrate(
        &self,
        stream: u64,
        bound: &mut Option<String>,
        m: p4::MasterArbitrationUpdate,
        tx: &StreamTx,
    ) -> Result<(), Status> {
        self.check_device(m.device_id)?;
        let role_name = m.role.as_ref().map(|r| r.name.clone()).unwrap_or_default();
        if m.role.as_ref().is_some_and(|r| r.config.is_some()) {
            // The spec's answer to a role.config outside the agreed scheme; this
            // server agrees on none (every role has full pipeline access).
            return Err(Status::invalid_argument(
                "role.config is not supported: roles here have full pipeline access",
            ));
        }
        if let Some(b) = bound {
            if *b != role_name {
                return Err(Status::failed_precondition(format!(
                    "this stream is bound to role '{b}'; open a new stream for role '{role_name}'"
                )));
            }
        }
        let eid = u128_of(&m.election_id);
        let mut state = self.lock();
        let rs = state.roles.entry(role_name.clone()).or_default();
        if let Some(id) = eid {
            if rs
                .controllers
                .iter()
                .any(|c| c.stream != stream && c.election_id == Some(id))
            {
                return Err(Status::invalid_argument(format!(
                    "election_id {id} is already used by another controller of role '{role_name}'"
                )));
            }
        }
        match rs.controllers.iter_mut().find(|c| c.stream == stream) {
            Some(c) => c.election_id = eid,
            None => rs.controllers.push(Controller {
                stream,
                election_id: eid,
                tx: tx.clone(),
            }),
        }
        *bound = Some(role_name.clone());
        let was_primary = rs.primary == Some(stream);
        match eid {
            Some(id) if rs.highest.is_none_or(|h| id >= h) => {
                rs.primary = Some(stream);
                rs.highest = Some(id);
                rs.notify(self.device_id, &role_name, None);
            }
            _ if was_primary => {
                // The primary downgraded itself: nobody is primary now.
                rs.primary = None;
                rs.notify(self.device_id, &role_name, None);
            }
            _ => rs.notify(self.device_id, &role_name, Some(stream)),
        }
        Ok(())
    }

    /// Removes a closed stream; if it was primary, the role has none now and
    /// the others are told so.
    fn leave(&self, stream: u64, role: &str) {
        let mut state = self.lock();
        let Some(rs) = state.roles.get_mut(role) else {
            return;
        };
        rs.controllers.retain(|c| c.stream != stream);
        if rs.primary == Some(stream) {
            rs.primary = None;
            rs.notify(self.device_id, role, None);
        }
    }

    fn is_primary_stream(&self, stream: u64, role: &str) -> bool {
        let state = self.lock();
        state
            .roles
            .get(role)
            .is_some_and(|rs| rs.primary == Some(stream))
    }

    /// Sends a target event to the primary controller of every role.
    fn deliver(&self, ev: TargetEvent) {
        let msg = p4::StreamMessageResponse {
            update: Some(match ev {
                TargetEvent::PacketIn(p) => Resp::Packet(p),
                TargetEvent::IdleTimeout(n) => Resp::IdleTimeoutNotification(n),
            }),
        };
        let state = self.lock();
        for rs in state.roles.values() {
            for c in rs
                .controllers
                .iter()
                .filter(|c| rs.primary == Some(c.stream))
            {
                if c.tx.try_send(Ok(msg.clone())).is_err() {
                    tracing::warn!(
                        "p4rt: controller stream {} full or closed; event dropped",
                        c.stream
                    );
                }
            }
        }
    }

    fn stream_error(
        code: Code,
        message: String,
        details: Option<p4::stream_error::Details>,
    ) -> p4::StreamMessageResponse {
        p4::StreamMessageResponse {
            update: Some(Resp::Error(p4::StreamError {
                canonical_code: code as i32,
                message,
                space: String::new(),
                code: 0,
                details,
            })),
        }
    }

    /// Runs one StreamChannel until the client closes it or breaks the protocol.
    async fn run_stream(
        self: Arc<Self>,
        mut inbound: Streaming<p4::StreamMessageRequest>,
        tx: StreamTx,
    ) {
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let mut role: Option<String> = None;
        let mut closing = self.closing.subscribe();
        loop {
            if *closing.borrow_and_update() {
                let _ = tx
                    .send(Err(Status::unavailable("P4Runtime server shutting down")))
                    .await;
                break;
            }
            let next = tokio::select! {
                m = inbound.next() => m,
                _ = closing.changed() => continue,
            };
            let msg = match next {
                None => break,
                Some(Err(e)) => {
                    tracing::debug!("p4rt: stream {stream} closed: {e}");
                    break;
                }
                Some(Ok(m)) => m,
            };
            match msg.update {
                Some(Req::Arbitration(m)) => {
                    if let Err(e) = self.arbitrate(stream, &mut role, m, &tx) {
                        let _ = tx.send(Err(e)).await;
                        break;
                    }
                }
                Some(other) if role.is_none() => {
                    let _ = tx
                        .send(Err(Status::failed_precondition(format!(
                            "the first message on StreamChannel must be an arbitration update, got {}",
                            match other {
                                Req::Packet(_) => "a packet-out",
                                Req::DigestAck(_) => "a digest ack",
                                _ => "another message",
                            }
                        ))))
                        .await;
                    break;
                }
                Some(Req::Packet(p)) => {
                    let r = role.as_deref().unwrap_or_default();
                    let res = if !self.is_primary_stream(stream, r) {
                        Err(Status::permission_denied(
                            "only the primary controller may send packet-outs",
                        ))
                    } else {
                        self.target.packet_out(&p)
                    };
                    if let Err(e) = res {
                        let d = p4::stream_error::Details::PacketOut(p4::PacketOutError {
                            packet_out: Some(p),
                        });
                        let _ = tx
                            .send(Ok(Self::stream_error(
                                e.code(),
                                e.message().to_string(),
                                Some(d),
                            )))
                            .await;
                    }
                }
                Some(Req::DigestAck(a)) => {
                    let d = p4::stream_error::Details::DigestListAck(p4::DigestListAckError {
                        digest_list_ack: Some(a),
                    });
                    let _ = tx
                        .send(Ok(Self::stream_error(
                            Code::Unimplemented,
                            "digests are not supported".into(),
                            Some(d),
                        )))
                        .await;
                }
                Some(Req::Other(any)) => {
                    let d =
                        p4::stream_error::Details::Other(p4::StreamOtherError { other: Some(any) });
                    let _ = tx
                        .send(Ok(Self::stream_error(
                            Code::Unimplemented,
                            "unknown stream message".into(),
                            Some(d),
                        )))
                        .await;
                }
                None => {
                    let _ = tx
                        .send(Ok(Self::stream_error(
                            Code::InvalidArgument,
                            "empty stream message".into(),
                            None,
                        )))
                        .await;
                }
            }
        }
        if let Some(r) = role {
            self.leave(stream, &r);
        }
    }

    fn set_pipeline(&self, req: p4::SetForwardingPipelineConfigRequest) -> Result<(), Status> {
        use p4::set_forwarding_pipeline_config_request::Action as A;
        self.check_device(req.device_id)?;
        let mut state = self.lock();
        Self::check_primary(&state, &req.role, &req.election_id)?;
        let action = A::try_from(req.action).unwrap_or(A::Unspecified);
        let load = |mode: PipelineMode,
                    cfg: p4::ForwardingPipelineConfig|
         -> Result<(Option<P4Info>, Pipeline), Status> {
            let p4info =
                self.target
                    .set_pipeline(mode, cfg.p4info.as_ref(), &cfg.p4_device_config)?;
            let index = P4InfoIndex::new(&p4info);
            Ok((
                cfg.p4info,
                Pipeline {
                    p4info,
                    index,
                    device_config: cfg.p4_device_config,
                    cookie: cfg.cookie,
                },
            ))
        };
        let need_config = || {
            req.config.clone().ok_or_else(|| {
                Status::invalid_argument(format!("{}: no config", action.as_str_name()))
            })
        };
        match action {
            A::Unspecified => {
                return Err(Status::invalid_argument(
                    "SetForwardingPipelineConfig action unspecified",
                ))
            }
            A::Verify => {
                load(PipelineMode::Verify, need_config()?)?;
            }
            A::VerifyAndSave => {
                let (client_p4info, pipeline) = load(PipelineMode::Verify, need_config()?)?;
                state.saved = Some(Saved {
                    client_p4info,
                    pipeline,
                    pending: Vec::new(),
                });
            }
            A::VerifyAndCommit => {
                let (_, p) = load(PipelineMode::Commit, need_config()?)?;
                state.pipeline = Some(p);
                state.saved = None;
            }
            A::Commit => {
                if req.config.is_some() {
                    return Err(Status::invalid_argument(
                        "COMMIT takes no config: it commits the one saved by VERIFY_AND_SAVE",
                    ));
                }
                let Some(saved) = state.saved.take() else {
                    return Err(Status::not_found(
                        "COMMIT without a config saved by VERIFY_AND_SAVE",
                    ));
                };
                let cfg = p4::ForwardingPipelineConfig {
                    p4info: saved.client_p4info,
                    p4_device_config: saved.pipeline.device_config,
                    cookie: saved.pipeline.cookie,
                };
                let (_, p) = load(PipelineMode::Commit, cfg)?;
                state.pipeline = Some(p);
                let total = saved.pending.len();
                let failed: Vec<String> = saved
                    .pending
                    .iter()
                    .enumerate()
                    .filter_map(|(i, u)| self.target.write(u).err().map(|e| format!("#{i}: {e}")))
                    .collect();
                if !failed.is_empty() {
                    return Err(Status::unknown(format!(
                        "config committed, but {} of {total} writes made since VERIFY_AND_SAVE failed on replay: {}",
                        failed.len(),
                        failed.join("; ")
                    )));
                }
            }
            A::ReconcileAndCommit => {
                let (_, p) = load(PipelineMode::Reconcile, need_config()?)?;
                state.pipeline = Some(p);
                state.saved = None;
            }
        }
        Ok(())
    }

    fn get_pipeline(
        &self,
        req: p4::GetForwardingPipelineConfigRequest,
    ) -> Result<Option<p4::ForwardingPipelineConfig>, Status> {
        use p4::get_forwarding_pipeline_config_request::ResponseType as R;
        self.check_device(req.device_id)?;
        let state = self.lock();
        // No pipeline yet: the spec's answer is a response with `config` unset.
        let Some(p) = &state.pipeline else {
            return Ok(None);
        };
        let rt = R::try_from(req.response_type)
            .map_err(|_| Status::invalid_argument("unknown response_type"))?;
        let mut cfg = p4::ForwardingPipelineConfig {
            p4info: None,
            p4_device_config: Vec::new(),
            cookie: p.cookie,
        };
        if matches!(rt, R::All | R::P4infoAndCookie) {
            cfg.p4info = Some(p.p4info.clone());
        }
        if matches!(rt, R::All | R::DeviceConfigAndCookie) {
            cfg.p4_device_config = p.device_config.clone();
        }
        Ok(Some(cfg))
    }

    fn write(&self, req: p4::WriteRequest) -> Result<(), Status> {
        use p4::write_request::Atomicity;
        self.check_device(req.device_id)?;
        let mut state = self.lock();
        Self::check_primary(&state, &req.role, &req.election_id)?;
        if state.pipeline.is_none() && state.saved.is_none() {
            return Err(Status::failed_precondition(
                "no forwarding pipeline config has been set",
            ));
        }
        match Atomicity::try_from(req.atomicity) {
            Ok(Atomicity::ContinueOnError) => {}
            Ok(a) => {
                return Err(Status::unimplemented(format!(
                    "atomicity {}",
                    a.as_str_name()
                )))
            }
            Err(_) => return Err(Status::invalid_argument("unknown atomicity")),
        }
        let mut results = Vec::with_capacity(req.updates.len());
        if let Some(saved) = state.saved.as_mut() {
            for mut u in req.updates {
                let p = &saved.pipeline;
                let r = validate::check_update(&p.p4info, &p.index, &mut u).map(|_| ());
                if r.is_ok() {
                    saved.pending.push(u);
                }
                results.push(r);
            }
        } else if let Some(p) = &state.pipeline {
            for mut u in req.updates {
                let r = validate::check_update(&p.p4info, &p.index, &mut u)
                    .and_then(|_| self.target.write(&u));
                results.push(r);
            }
        }
        let failed = results.iter().filter(|r| r.is_err()).count();
        if failed == 0 {
            return Ok(());
        }
        let details = results
            .iter()
            .map(|r| {
                let e = match r {
                    Ok(()) => p4::Error {
                        canonical_code: Code::Ok as i32,
                        ..Default::default()
                    },
                    Err(s) => p4::Error {
                        canonical_code: s.code() as i32,
                        message: s.message().to_string(),
                        ..Default::default()
                    },
                };
                prost_types::Any {
                    type_url: "type.googleapis.com/p4.v1.Error".into(),
                    value: e.encode_to_vec(),
                }
            })
            .collect();
        let message = format!("{failed} of {} updates failed", results.len());
        let st = grpc_rpc::Status {
            code: Code::Unknown as i32,
            message: message.clone(),
            details,
        };
        Err(Status::with_details(
            Code::Unknown,
            message,
            st.encode_to_vec().into(),
        ))
    }

    fn read(&self, req: p4::ReadRequest) -> Result<Vec<p4::Entity>, Status> {
        self.check_device(req.device_id)?;
        let state = self.lock();
        // After VERIFY_AND_SAVE requests refer to the saved config's ids.
        let Some(p) = state
            .saved
            .as_ref()
            .map(|s| &s.pipeline)
            .or(state.pipeline.as_ref())
        else {
            return Err(Status::failed_precondition(
                "no forwarding pipeline config has been set",
            ));
        };
        let mut out = Vec::new();
        for mut e in req.entities {
            validate::check_read(&p.p4info, &p.index, &mut e)?;
            out.extend(self.target.read(&e)?);
        }
        Ok(out)
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl P4Runtime for P4RtService {
    async fn write(
        &self,
        request: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        self.inner.write(request.into_inner())?;
        Ok(Response::new(p4::WriteResponse {}))
    }

    type ReadStream = BoxStream<p4::ReadResponse>;

    async fn read(
        &self,
        request: Request<p4::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let entities = self.inner.read(request.into_inner())?;
        let s = tokio_stream::once(Ok(p4::ReadResponse { entities }));
        Ok(Response::new(Box::pin(s)))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        self.inner.set_pipeline(request.into_inner())?;
        Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}))
    }

    async fn get_forwarding_pipeline_config(
        &self,
        request: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        let config = self.inner.get_pipeline(request.into_inner())?;
        Ok(Response::new(p4::GetForwardingPipelineConfigResponse {
            config,
        }))
    }

    type StreamChannelStream = BoxStream<p4::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        request: Request<Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        tokio::spawn(self.inner.clone().run_stream(request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn capabilities(
        &self,
        _request: Request<p4::CapabilitiesRequest>,
    ) -> Result<Response<p4::CapabilitiesResponse>, Status> {
        Ok(Response::new(p4::CapabilitiesResponse {
            p4runtime_api_version: crate::proto::P4RUNTIME_VERSION.trim().to_string(),
        }))
    }
}

/// Serves P4Runtime for device `device_id` on `addr` until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    device_id: u64,
    target: Arc<dyn P4RtTarget>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    run(listener, device_id, target, shutdown).await
}

async fn run(
    listener: tokio::net::TcpListener,
    device_id: u64,
    target: Arc<dyn P4RtTarget>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let svc = P4RtService::new(device_id, target);
    let closer = svc.clone();
    tonic::transport::Server::builder()
        .add_service(svc.into_server())
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
            shutdown.await;
            closer.close_streams();
        })
        .await?;
    Ok(())
}

/// A server running in the background (see [`spawn`]).
pub struct ServerHandle {
    /// The address it listens on (with the port the OS chose for port 0).
    pub local_addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl ServerHandle {
    /// Stops accepting, lets running calls finish, and returns the server's result.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("p4rt: server task failed: {e}");
                Ok(())
            }
        }
    }
}

/// Binds `addr` (port 0: any free port) and serves P4Runtime for device
/// `device_id` on a background task of the current tokio runtime.
pub async fn spawn(
    addr: SocketAddr,
    device_id: u64,
    target: Arc<dyn P4RtTarget>,
) -> Result<ServerHandle, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(listener, device_id, target, async move {
        let _ = rx.await;
    }));
    Ok(ServerHandle {
        local_addr,
        shutdown: Some(tx),
        task,
    })
}
