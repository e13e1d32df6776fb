//! IKEv2 (RFC 7296) with pre-shared keys, as a sans-IO state machine.
//!
//! Where this sits in nicflow: a tunnel port with `ipsec=...` protects its
//! encapsulated traffic with ESP SAs (see [`crate::esp`]), and somebody has
//! to agree those SAs' SPIs and keys with the peer. The daemon runs one
//! [`IkeSession`] per protected tunnel on the tunnel's own underlay: it
//! hands every UDP datagram that arrives on ports 500/4500 to
//! [`IkeSession::input`], sends whatever [`IkeSession::poll_transmit`]
//! yields from the same underlay address, calls [`IkeSession::tick`] from
//! its timer, and installs/removes ESP SAs as [`IkeSession::poll_event`]
//! reports them. The library never touches a socket or a clock, which is
//! what lets the same code run in the daemon, in an in-memory test against
//! a second `IkeSession`, and against strongSwan in a namespace.
//!
//! What is negotiated is deliberately narrow, so every choice is one that a
//! stock strongSwan (`aes128gcm16-prfsha256-x25519` / `aes256gcm16-...`)
//! accepts: ENCR_AES_GCM_16 (128/256) with PRF_HMAC_SHA2_256 and
//! Curve25519 (group 31) or P-256 (group 19) for the IKE SA, ESP
//! AES-GCM-16 with or without ESN for the child, PSK authentication, one
//! child SA host-to-host between the two underlay addresses (transport mode
//! for the tunnel's UDP by default, or tunnel mode for peers such as
//! strongSwan's kernel-libipsec that only do tunnel mode). NAT traversal
//! (RFC 7296 section 2.23) is detected and followed, including the faked
//! NAT detection strongSwan sends to force UDP encapsulation.
//!
//! Not done: certificates and EAP, IPv6, fragmentation (RFC 7383),
//! configuration payloads, cookies as a responder (we do answer a cookie
//! challenge as initiator), PFS on child rekeys we initiate (we accept
//! them as responder), MOBIKE.

mod crypto;
mod sa;
mod wire;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ring::rand::SystemRandom;

use sa::{IkeSa, Out, SaAction, SaState};

pub use wire::{DH_CURVE25519, DH_ECP256};

/// The standard IKE port, used until NAT traversal floats to [`NAT_T_PORT`].
pub const IKE_PORT: u16 = 500;
/// The NAT-T port (RFC 3948): IKE here carries a 4-byte zero "non-ESP
/// marker" so it can share the port with UDP-encapsulated ESP.
pub const NAT_T_PORT: u16 = 4500;

/// How the child SA carries the tunnel's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildMode {
    /// ESP directly after the underlay IP header; the cheapest choice for
    /// nicflow, whose packets already are host-to-host tunnel packets.
    Transport,
    /// ESP carries a whole inner IP packet; needed by strongSwan's
    /// kernel-libipsec, which only implements tunnel mode.
    Tunnel,
}

/// Which packets the child SA protects (its traffic selectors).
///
/// The addresses are always the two underlay addresses (local/32 and
/// remote/32): nicflow protects its own tunnel packets, not a subnet. Ports
/// are not narrowed because VXLAN/Geneve put flow entropy in the UDP
/// source port, so only the protocol can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildTs {
    pub mode: ChildMode,
    /// IP protocol (17 = UDP for VXLAN/Geneve), 0 for any.
    pub protocol: u8,
}

impl ChildTs {
    /// Transport mode for the tunnel's UDP packets: the default.
    pub fn udp_transport() -> Self {
        ChildTs {
            mode: ChildMode::Transport,
            protocol: 17,
        }
    }
    /// Tunnel mode, local/32 <-> remote/32, any protocol.
    pub fn host_tunnel() -> Self {
        ChildTs {
            mode: ChildMode::Tunnel,
            protocol: 0,
        }
    }
}

impl Default for ChildTs {
    fn default() -> Self {
        Self::udp_transport()
    }
}

/// Timers. A zero duration disables that timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IkeLifetimes {
    /// Rekey the IKE SA after this long (minus up to 10% jitter, so two
    /// peers with equal settings rarely collide).
    pub ike_rekey: Duration,
    /// Rekey each child SA after this long (same jitter).
    pub child_rekey: Duration,
    /// Send an empty INFORMATIONAL when nothing was heard for this long;
    /// a peer that never answers it (after all retransmissions) is dead.
    pub dpd: Duration,
    /// First retransmission timeout; it doubles on each retry (RFC 7296
    /// section 2.1 asks for an exponential backoff).
    pub retransmit_timeout: Duration,
    /// Retransmissions before the exchange (and the SA) is given up.
    pub retransmit_tries: u32,
}

impl Default for IkeLifetimes {
    fn default() -> Self {
        IkeLifetimes {
            ike_rekey: Duration::from_secs(4 * 3600),
            child_rekey: Duration::from_secs(3600),
            dpd: Duration::from_secs(30),
            retransmit_timeout: Duration::from_secs(2),
            retransmit_tries: 5,
        }
    }
}

/// Configuration of one IKE peering.
#[derive(Clone)]
pub struct IkeConfig {
    pub local_ip: Ipv4Addr,
    pub remote_ip: Ipv4Addr,
    pub psk: Vec<u8>,
    /// Our identity; `None` sends the local IP as ID_IPV4_ADDR. A string
    /// that parses as IPv4 is an address, `user@host` an e-mail address,
    /// anything else (optionally with a leading `@`) a host name.
    pub local_id: Option<String>,
    /// The identity the peer must present; `None` accepts any (the PSK is
    /// what authenticates).
    pub remote_id: Option<String>,
    /// Start an IKE SA from [`IkeSession::new`]. A session always answers
    /// the peer's IKE_SA_INIT too, so two daemons that both initiate still
    /// meet: on a collision the side with the higher address yields.
    pub initiator: bool,
    /// ESP AES-GCM key length in bytes, 16 or 32.
    pub esp_aead_key_len: usize,
    /// Prefer 64-bit extended sequence numbers for the child SA.
    pub esn: bool,
    pub child_ts: ChildTs,
    pub lifetimes: IkeLifetimes,
    /// DH groups in order of preference: [`DH_CURVE25519`] and/or
    /// [`DH_ECP256`].
    pub dh_groups: Vec<u16>,
}

impl std::fmt::Debug for IkeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IkeConfig")
            .field("local_ip", &self.local_ip)
            .field("remote_ip", &self.remote_ip)
            .field("psk", &"<redacted>")
            .field("local_id", &self.local_id)
            .field("remote_id", &self.remote_id)
            .field("initiator", &self.initiator)
            .field("esp_aead_key_len", &self.esp_aead_key_len)
            .field("esn", &self.esn)
            .field("child_ts", &self.child_ts)
            .field("lifetimes", &self.lifetimes)
            .field("dh_groups", &self.dh_groups)
            .finish()
    }
}

impl IkeConfig {
    /// Defaults: initiator, AES-128-GCM, no ESN, UDP transport mode,
    /// Curve25519 then P-256.
    pub fn new(local_ip: Ipv4Addr, remote_ip: Ipv4Addr, psk: impl Into<Vec<u8>>) -> Self {
        IkeConfig {
            local_ip,
            remote_ip,
            psk: psk.into(),
            local_id: None,
            remote_id: None,
            initiator: true,
            esp_aead_key_len: 16,
            esn: false,
            child_ts: ChildTs::default(),
            lifetimes: IkeLifetimes::default(),
            dh_groups: vec![DH_CURVE25519, DH_ECP256],
        }
    }
}

/// A UDP payload to send from the underlay address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    pub src_port: u16,
    pub dst_port: u16,
    /// On port 4500 this already starts with the non-ESP marker.
    pub payload: Vec<u8>,
}

/// One direction of a child SA, as the ESP layer needs it.
#[derive(Clone, PartialEq, Eq)]
pub struct ChildKeys {
    pub spi: u32,
    /// AES-GCM key followed by the 4-byte salt (RFC 4106 section 8.1).
    pub key: Vec<u8>,
    pub esn: bool,
}

/// Keys stay out of logs: only the SPI and sizes are shown.
impl std::fmt::Debug for ChildKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ChildKeys {{ spi: {:#010x}, key: <{} bytes>, esn: {} }}",
            self.spi,
            self.key.len(),
            self.esn
        )
    }
}

/// What the daemon must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IkeEvent {
    /// An IKE SA authenticated.
    IkeUp,
    /// A child SA is ready: install both directions. `encap_udp` says ESP
    /// must travel in UDP 4500 (RFC 3948) because NAT was detected (or
    /// faked by the peer to force it).
    ChildSaUp {
        mode: ChildMode,
        encap_udp: bool,
        outbound: ChildKeys,
        inbound: ChildKeys,
    },
    /// A child SA was replaced: accept on the new inbound SA now, keep
    /// accepting on the old one until its `ChildSaDeleted`. The initiator
    /// of the rekey sends on the new outbound SA at once; the responder
    /// (`responder`) should keep sending on the old one until the
    /// initiator deletes it or traffic arrives on the new inbound SA: the
    /// initiator installs the new SAs only when our answer reaches it, so
    /// a packet sent on them before then is lost (as strongSwan does).
    ChildSaRekeyed {
        old_inbound_spi: u32,
        old_outbound_spi: u32,
        /// We answered the peer's CREATE_CHILD_SA (see above).
        responder: bool,
        mode: ChildMode,
        encap_udp: bool,
        outbound: ChildKeys,
        inbound: ChildKeys,
    },
    /// Remove both directions of this child SA.
    ChildSaDeleted { inbound_spi: u32, outbound_spi: u32 },
    /// Negotiation or the peer failed; `reason` is meant for an operator.
    IkeFailed { reason: String },
    /// No IKE SA is left (all its child SAs were reported deleted first).
    IkeDown,
}

/// Shared, read-only context of a session's SAs.
pub(crate) struct Ctx {
    pub cfg: IkeConfig,
    pub rng: SystemRandom,
}

/// One IKE peering: its IKE SA(s) and their child SAs. See the module
/// documentation for how the daemon drives it.
pub struct IkeSession {
    ctx: Ctx,
    /// Usually one SA; briefly two during an IKE rekey (the old one until
    /// its Delete completes) or when the peer starts afresh.
    sas: Vec<IkeSa>,
    out: Out,
}

impl std::fmt::Debug for IkeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IkeSession")
            .field("local_ip", &self.ctx.cfg.local_ip)
            .field("remote_ip", &self.ctx.cfg.remote_ip)
            .field("sas", &self.sas.len())
            .finish()
    }
}

/// Half-open SAs kept at once; more IKE_SA_INITs replace the oldest, so
/// spoofed requests cannot grow memory.
const MAX_SAS: usize = 4;

impl IkeSession {
    pub fn new(cfg: IkeConfig, now: Instant) -> Self {
        let initiate = cfg.initiator;
        let mut s = IkeSession {
            ctx: Ctx {
                cfg,
                rng: SystemRandom::new(),
            },
            sas: Vec::new(),
            out: Out::default(),
        };
        if initiate {
            s.connect(now);
        }
        s
    }

    /// Starts a new IKE SA as initiator (again, e.g. after `IkeFailed`).
    /// Does nothing if one is already being set up or established.
    pub fn connect(&mut self, now: Instant) {
        if self.sas.iter().any(|s| s.state != SaState::Deleting) {
            return;
        }
        let sa = IkeSa::initiate(&self.ctx, &mut self.out, now);
        self.sas.push(sa);
    }

    /// Whether an IKE SA is established.
    pub fn is_established(&self) -> bool {
        self.sas.iter().any(|s| s.state == SaState::Established)
    }

    /// Hands over a UDP payload received on the underlay from the peer.
    /// ESP on port 4500 (no non-ESP marker) and NAT keepalives are ignored:
    /// the daemon should have routed them to ESP already.
    pub fn input(&mut self, udp_src_port: u16, udp_dst_port: u16, payload: &[u8], now: Instant) {
        let msg = if udp_dst_port == NAT_T_PORT || udp_src_port == NAT_T_PORT {
            match payload {
                [0, 0, 0, 0, rest @ ..] => rest,
                _ => return,
            }
        } else {
            payload
        };
        let hdr = match wire::parse_header(msg) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "dropping malformed IKE message");
                return;
            }
        };
        let ports = (udp_dst_port, udp_src_port);
        if hdr.exchange == wire::IKE_SA_INIT && !hdr.is_response() && hdr.spi_r == 0 {
            self.input_init_request(&hdr, msg, ports, now);
            return;
        }
        let Some(i) = self.sas.iter().position(|s| s.matches(&hdr)) else {
            tracing::debug!(
                spi_i = hdr.spi_i,
                spi_r = hdr.spi_r,
                "IKE message for unknown SA dropped"
            );
            return;
        };
        let action = self.sas[i].input(&self.ctx, &mut self.out, &hdr, msg, ports, now);
        self.apply(i, action);
    }

    fn input_init_request(
        &mut self,
        hdr: &wire::Header,
        msg: &[u8],
        ports: (u16, u16),
        now: Instant,
    ) {
        // A retransmission of a request we already answered.
        if let Some(sa) = self.sas.iter().find(|s| s.is_responder_for(hdr.spi_i)) {
            sa.resend_init_response(msg, &mut self.out, ports);
            return;
        }
        // Collision of two initiators: the lower address keeps initiating,
        // the higher answers (and drops its own attempt).
        let own_attempt = self
            .sas
            .iter()
            .position(|s| matches!(s.state, SaState::InitSent | SaState::AuthSent));
        if let Some(j) = own_attempt {
            if self.ctx.cfg.local_ip < self.ctx.cfg.remote_ip {
                tracing::debug!("IKE_SA_INIT collision: we keep initiating");
                return;
            }
            self.sas.remove(j);
        }
        if let Some(sa) = IkeSa::respond_init(&self.ctx, &mut self.out, hdr, msg, ports, now) {
            if self.sas.len() >= MAX_SAS {
                if let Some(j) = self.sas.iter().position(|s| s.state == SaState::AwaitAuth) {
                    self.sas.remove(j);
                }
            }
            self.sas.push(sa);
        }
    }

    /// Drives timers: retransmissions, rekeying, liveness checks.
    pub fn tick(&mut self, now: Instant) {
        // SAs may be added or removed while we go: walk a snapshot of keys.
        let keys: Vec<(u64, u64)> = self.sas.iter().map(|s| (s.spi_i, s.spi_r)).collect();
        for k in keys {
            if let Some(i) = self.sas.iter().position(|s| (s.spi_i, s.spi_r) == k) {
                let action = self.sas[i].tick(&self.ctx, &mut self.out, now);
                self.apply(i, action);
            }
        }
    }

    /// Asks for an early rekey of the child SA with this inbound SPI (e.g.
    /// when the ESP layer nears sequence number exhaustion).
    pub fn rekey_child(&mut self, inbound_spi: u32, now: Instant) {
        for sa in &mut self.sas {
            sa.request_child_rekey(inbound_spi);
        }
        self.tick(now);
    }

    /// Asks for an early rekey of the established IKE SA.
    pub fn rekey_ike(&mut self, now: Instant) {
        if let Some(sa) = self
            .sas
            .iter_mut()
            .find(|s| s.state == SaState::Established)
        {
            sa.request_ike_rekey();
        }
        self.tick(now);
    }

    /// Deletes the IKE SA (and with it the child SAs) at the peer too.
    pub fn close(&mut self, now: Instant) {
        for sa in &mut self.sas {
            sa.request_close();
        }
        self.tick(now);
    }

    pub fn poll_transmit(&mut self) -> Option<Datagram> {
        self.out.tx.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<IkeEvent> {
        self.out.events.pop_front()
    }

    /// Applies what SA `i` asked for.
    fn apply(&mut self, i: usize, action: SaAction) {
        match action {
            SaAction::None => {}
            SaAction::Established => {
                // A freshly authenticated SA supersedes any other with the
                // same peer (it restarted, or both sides initiated).
                let keep = (self.sas[i].spi_i, self.sas[i].spi_r);
                let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut self.sas)
                    .into_iter()
                    .partition(|s| (s.spi_i, s.spi_r) == keep || s.state == SaState::Deleting);
                for s in gone {
                    s.report_children_deleted(&mut self.out);
                }
                self.sas = kept;
            }
            SaAction::Rekeyed(new) => self.sas.push(*new),
            SaAction::Remove => {
                self.sas.remove(i);
            }
            SaAction::Down(reason) => {
                let sa = self.sas.remove(i);
                if let Some(reason) = reason {
                    self.out.events.push_back(IkeEvent::IkeFailed { reason });
                }
                let was_up = sa.ever_established();
                sa.report_children_deleted(&mut self.out);
                if was_up && !self.is_established() {
                    self.out.events.push_back(IkeEvent::IkeDown);
                }
            }
        }
    }
}
