//! One IKE SA and its child SAs: the exchanges of RFC 7296 as seen from
//! either end, with the message-ID window of 1 that every IKEv2
//! implementation must support (section 2.3): at most one request of ours
//! in flight, retransmitted until answered, and the last response to the
//! peer kept to answer its retransmissions.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ring::rand::SystemRandom;

use super::crypto::{self, DhKey, IkeKeys};
use super::wire::*;
use super::{ChildKeys, ChildMode, Ctx, Datagram, IkeEvent, NAT_T_PORT};

/// A responder SA that never sees its IKE_AUTH is dropped after this.
const HALF_OPEN_TIMEOUT: Duration = Duration::from_secs(60);
/// A rekeyed IKE SA whose Delete never comes is dropped after this.
const OLD_SA_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest single retransmission interval.
const MAX_RETRANSMIT_INTERVAL: Duration = Duration::from_secs(64);
const NONCE_LEN: usize = 32;

/// Output queues shared by a session's SAs.
#[derive(Default)]
pub(crate) struct Out {
    pub tx: VecDeque<Datagram>,
    pub events: VecDeque<IkeEvent>,
}

impl Out {
    /// Queues an IKE message; on the NAT-T port it gets the non-ESP marker
    /// (RFC 3948 section 2.2) so the peer can tell it from ESP.
    fn send(&mut self, src_port: u16, dst_port: u16, msg: &[u8]) {
        let mut payload = Vec::with_capacity(msg.len() + 4);
        if src_port == NAT_T_PORT || dst_port == NAT_T_PORT {
            payload.extend_from_slice(&[0; 4]);
        }
        payload.extend_from_slice(msg);
        self.tx.push_back(Datagram {
            src_port,
            dst_port,
            payload,
        });
    }
}

/// What the session must do with an SA after it handled something.
pub(crate) enum SaAction {
    None,
    /// The SA just authenticated; it supersedes the session's other SAs.
    Established,
    /// An IKE rekey produced this SA (the children moved to it).
    Rekeyed(Box<IkeSa>),
    /// Drop the SA without events (half-open or rekeyed-away SA).
    Remove,
    /// Drop the SA, reporting its children deleted, `IkeFailed` if there
    /// is a reason, and `IkeDown` if no SA is left.
    Down(Option<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SaState {
    /// Initiator: IKE_SA_INIT sent.
    InitSent,
    /// Initiator: IKE_AUTH sent.
    AuthSent,
    /// Responder: IKE_SA_INIT answered, waiting for IKE_AUTH.
    AwaitAuth,
    Established,
    /// Rekeyed away or being closed: only Delete/INFORMATIONAL left.
    Deleting,
}

/// An exchange we started and await the response for.
enum Task {
    Init,
    Auth {
        in_spi: u32,
    },
    RekeyChild {
        old_in: u32,
        new_in: u32,
        ni: Vec<u8>,
    },
    DeleteChild {
        in_spi: u32,
    },
    RekeyIke {
        new_spi: u64,
        ni: Vec<u8>,
        dh: DhKey,
    },
    DeleteIke,
    Dpd,
}

impl Task {
    fn name(&self) -> &'static str {
        match self {
            Task::Init => "IKE_SA_INIT",
            Task::Auth { .. } => "IKE_AUTH",
            Task::RekeyChild { .. } => "CREATE_CHILD_SA (child rekey)",
            Task::DeleteChild { .. } => "INFORMATIONAL (child delete)",
            Task::RekeyIke { .. } => "CREATE_CHILD_SA (IKE rekey)",
            Task::DeleteIke => "INFORMATIONAL (IKE delete)",
            Task::Dpd => "INFORMATIONAL (liveness check)",
        }
    }
}

/// An exchange we want to start once the window is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    RekeyChild(u32),
    DeleteChild(u32),
    RekeyIke,
    DeleteIke,
    Dpd,
}

struct Pending {
    mid: u32,
    msg: Vec<u8>,
    tries: u32,
    next_at: Instant,
    task: Task,
}

struct Child {
    in_spi: u32,
    out_spi: u32,
    in_key: Vec<u8>,
    out_key: Vec<u8>,
    esn: bool,
    mode: ChildMode,
    rekey_at: Option<Instant>,
    /// Replaced by a rekey, waiting for its Delete.
    rekeyed: bool,
}

/// A child SA the responder accepts: the payloads that describe it in the
/// response (minus Nonce/KE), the child without keys yet, and the PFS group
/// if the peer insists on one.
type AcceptedChild = (Vec<Payload>, Child, Option<u16>);

/// The parsed payloads of one (decrypted) message.
#[derive(Default)]
struct Parsed {
    sa: Option<Vec<Proposal>>,
    ke: Option<(u16, Vec<u8>)>,
    nonce: Option<Vec<u8>>,
    idi: Option<Vec<u8>>,
    idr: Option<Vec<u8>>,
    auth: Option<(u8, Vec<u8>)>,
    tsi: Option<Vec<Ts>>,
    tsr: Option<Vec<Ts>>,
    notifies: Vec<Notify>,
    deletes: Vec<Delete>,
}

impl Parsed {
    fn new(pls: &[Payload]) -> Result<Self, WireError> {
        let mut p = Parsed::default();
        for pl in pls {
            let b = &pl.body;
            match pl.ty {
                PL_SA if p.sa.is_none() => p.sa = Some(parse_sa(b)?),
                PL_KE if p.ke.is_none() => {
                    if b.len() < 4 {
                        return Err(WireError::Malformed("KE"));
                    }
                    p.ke = Some((u16::from_be_bytes([b[0], b[1]]), b[4..].to_vec()));
                }
                PL_NONCE if p.nonce.is_none() => {
                    if !(16..=256).contains(&b.len()) {
                        return Err(WireError::Malformed("Nonce"));
                    }
                    p.nonce = Some(b.clone());
                }
                PL_IDI if p.idi.is_none() => {
                    Identity::parse(b)?;
                    p.idi = Some(b.clone());
                }
                PL_IDR if p.idr.is_none() => {
                    Identity::parse(b)?;
                    p.idr = Some(b.clone());
                }
                PL_AUTH if p.auth.is_none() => {
                    if b.len() < 5 {
                        return Err(WireError::Malformed("AUTH"));
                    }
                    p.auth = Some((b[0], b[4..].to_vec()));
                }
                PL_TSI if p.tsi.is_none() => p.tsi = Some(parse_ts(b)?),
                PL_TSR if p.tsr.is_none() => p.tsr = Some(parse_ts(b)?),
                PL_NOTIFY => p.notifies.push(parse_notify(b)?),
                PL_DELETE => p.deletes.push(parse_delete(b)?),
                _ => {}
            }
        }
        Ok(p)
    }

    fn notify(&self, ty: u16) -> Option<&Notify> {
        self.notifies.iter().find(|n| n.ty == ty)
    }

    /// The first error notify (types below 16384 are errors).
    fn error(&self) -> Option<u16> {
        self.notifies.iter().map(|n| n.ty).find(|&t| t < 16384)
    }
}

fn notify_name(t: u16) -> String {
    match t {
        N_INVALID_SYNTAX => "INVALID_SYNTAX".into(),
        N_NO_PROPOSAL_CHOSEN => "NO_PROPOSAL_CHOSEN".into(),
        N_INVALID_KE_PAYLOAD => "INVALID_KE_PAYLOAD".into(),
        N_AUTHENTICATION_FAILED => "AUTHENTICATION_FAILED".into(),
        N_NO_ADDITIONAL_SAS => "NO_ADDITIONAL_SAS".into(),
        N_TS_UNACCEPTABLE => "TS_UNACCEPTABLE".into(),
        N_TEMPORARY_FAILURE => "TEMPORARY_FAILURE".into(),
        N_CHILD_SA_NOT_FOUND => "CHILD_SA_NOT_FOUND".into(),
        _ => format!("error notify {t}"),
    }
}

fn random_ike_spi(rng: &SystemRandom) -> u64 {
    loop {
        let v = u64::from_be_bytes(crypto::random_bytes(rng, 8).try_into().unwrap());
        if v != 0 {
            return v;
        }
    }
}

/// ESP SPIs 0..=255 are reserved (RFC 4303 section 2.1).
fn random_esp_spi(rng: &SystemRandom) -> u32 {
    loop {
        let v = u32::from_be_bytes(crypto::random_bytes(rng, 4).try_into().unwrap());
        if v > 255 {
            return v;
        }
    }
}

/// `d` minus up to 10% (RFC 7296 section 2.8 asks for jitter so peers with
/// the same lifetime don't rekey simultaneously); `None` if disabled.
fn jittered(rng: &SystemRandom, now: Instant, d: Duration) -> Option<Instant> {
    if d.is_zero() {
        return None;
    }
    let r = u16::from_be_bytes(crypto::random_bytes(rng, 2).try_into().unwrap());
    let jitter = (d / 10)
        .checked_mul(u32::from(r))
        .map_or(d / 10, |j| j / 65535);
    now.checked_add(d - jitter)
}

/// A random 1-5 s back-off after TEMPORARY_FAILURE (RFC 7296 section 2.25).
fn retry_later(rng: &SystemRandom, now: Instant) -> Instant {
    let r = crypto::random_bytes(rng, 1)[0];
    now + Duration::from_millis(1000 + u64::from(r) * 16)
}

fn key_len(ctx: &Ctx) -> usize {
    if ctx.cfg.esp_aead_key_len == 32 {
        32
    } else {
        16
    }
}

fn local_identity(ctx: &Ctx) -> Identity {
    match &ctx.cfg.local_id {
        Some(s) => Identity::from_config(s),
        None => Identity::ipv4(ctx.cfg.local_ip),
    }
}

/// Checks a peer's ID payload body against `remote_id`.
fn check_remote_id(ctx: &Ctx, body: &[u8]) -> Result<(), String> {
    let got = Identity::parse(body).map_err(|e| e.to_string())?;
    match &ctx.cfg.remote_id {
        Some(want) if Identity::from_config(want) != got => Err(format!(
            "peer identity '{got}' is not the configured remote id '{want}'"
        )),
        _ => Ok(()),
    }
}

/// The IKE SA proposal we offer: GCM with our preferred key size first,
/// HMAC-SHA-256, and our DH groups with the one in our KE first.
fn ike_proposal(ctx: &Ctx, spi: Vec<u8>, ke_group: u16) -> Proposal {
    let bits = (key_len(ctx) * 8) as u16;
    let mut transforms = vec![
        Transform::encr_gcm(bits),
        Transform::encr_gcm(if bits == 128 { 256 } else { 128 }),
        Transform::new(TR_PRF, PRF_HMAC_SHA2_256),
        Transform::new(TR_DH, ke_group),
    ];
    for &g in &ctx.cfg.dh_groups {
        if g != ke_group && crypto::supported_group(g) {
            transforms.push(Transform::new(TR_DH, g));
        }
    }
    Proposal {
        num: 1,
        proto: PROTO_IKE,
        spi,
        transforms,
    }
}

/// The child SA proposal: AES-GCM-16 with the configured key size, our ESN
/// preference first but the other accepted, no PFS.
fn esp_proposal(ctx: &Ctx, in_spi: u32) -> Proposal {
    let esn = u16::from(ctx.cfg.esn);
    Proposal {
        num: 1,
        proto: PROTO_ESP,
        spi: in_spi.to_be_bytes().to_vec(),
        transforms: vec![
            Transform::encr_gcm((key_len(ctx) * 8) as u16),
            Transform::new(TR_ESN, esn),
            Transform::new(TR_ESN, 1 - esn),
        ],
    }
}

fn acceptable_ike_encr(t: &Transform) -> Option<usize> {
    match (t.ty, t.id, t.key_bits) {
        (TR_ENCR, ENCR_AES_GCM_16, Some(128)) => Some(16),
        (TR_ENCR, ENCR_AES_GCM_16, Some(256)) => Some(32),
        _ => None,
    }
}

/// An AEAD proposal may carry no integrity transform or only NONE.
fn integ_ok(p: &Proposal) -> bool {
    let mut it = p.of_type(TR_INTEG).peekable();
    it.peek().is_none() || p.of_type(TR_INTEG).any(|t| t.id == 0)
}

/// Responder's choice among IKE proposals. `Err(None)`: nothing acceptable
/// (NO_PROPOSAL_CHOSEN); `Err(Some(g))`: acceptable but the KE payload is
/// of another group, ask for `g` (INVALID_KE_PAYLOAD).
fn select_ike(
    ctx: &Ctx,
    props: &[Proposal],
    ke_group: u16,
) -> Result<(Proposal, usize, u16), Option<u16>> {
    let mut wanted = None;
    for p in props.iter().filter(|p| p.proto == PROTO_IKE) {
        let Some((encr, len)) = p
            .of_type(TR_ENCR)
            .find_map(|t| acceptable_ike_encr(t).map(|l| (*t, l)))
        else {
            continue;
        };
        if !p.of_type(TR_PRF).any(|t| t.id == PRF_HMAC_SHA2_256) || !integ_ok(p) {
            continue;
        }
        let offered: Vec<u16> = p.of_type(TR_DH).map(|t| t.id).collect();
        let ours = |g: &u16| crypto::supported_group(*g) && ctx.cfg.dh_groups.contains(g);
        if offered.contains(&ke_group) && ours(&ke_group) {
            let chosen = Proposal {
                num: p.num,
                proto: PROTO_IKE,
                spi: Vec::new(),
                transforms: vec![
                    encr,
                    Transform::new(TR_PRF, PRF_HMAC_SHA2_256),
                    Transform::new(TR_DH, ke_group),
                ],
            };
            return Ok((chosen, len, ke_group));
        }
        if wanted.is_none() {
            wanted = ctx
                .cfg
                .dh_groups
                .iter()
                .copied()
                .find(|g| ours(g) && offered.contains(g));
        }
    }
    Err(wanted)
}

/// Responder's choice among ESP proposals: (chosen proposal without SPI,
/// peer's SPI, ESN, PFS group if the peer insists on one).
fn select_esp(
    ctx: &Ctx,
    props: &[Proposal],
    allow_pfs: bool,
) -> Option<(Proposal, u32, bool, Option<u16>)> {
    let bits = (key_len(ctx) * 8) as u16;
    for p in props
        .iter()
        .filter(|p| p.proto == PROTO_ESP && p.spi.len() == 4)
    {
        let Some(encr) = p
            .of_type(TR_ENCR)
            .find(|t| t.id == ENCR_AES_GCM_16 && t.key_bits == Some(bits))
        else {
            continue;
        };
        if !integ_ok(p) {
            continue;
        }
        let mut esns: Vec<u16> = p.of_type(TR_ESN).map(|t| t.id).collect();
        if esns.is_empty() {
            esns.push(0);
        }
        let pref = u16::from(ctx.cfg.esn);
        let esn = if esns.contains(&pref) {
            pref
        } else if esns.contains(&(1 - pref)) {
            1 - pref
        } else {
            continue;
        };
        let dhs: Vec<u16> = p.of_type(TR_DH).map(|t| t.id).collect();
        let pfs = if !allow_pfs || dhs.is_empty() || dhs.contains(&0) {
            None
        } else {
            match ctx
                .cfg
                .dh_groups
                .iter()
                .find(|g| dhs.contains(g) && crypto::supported_group(**g))
            {
                Some(&g) => Some(g),
                None => continue,
            }
        };
        let mut transforms = vec![*encr];
        if let Some(g) = pfs {
            transforms.push(Transform::new(TR_DH, g));
        }
        transforms.push(Transform::new(TR_ESN, esn));
        let chosen = Proposal {
            num: p.num,
            proto: PROTO_ESP,
            spi: Vec::new(),
            transforms,
        };
        let spi = u32::from_be_bytes(p.spi[..].try_into().unwrap());
        return Some((chosen, spi, esn == 1, pfs));
    }
    None
}

/// Initiator's check of the responder's ESP choice: (peer SPI, ESN).
fn check_esp_choice(ctx: &Ctx, props: &[Proposal]) -> Result<(u32, bool), String> {
    let [p] = props else {
        return Err("responder returned more than one child SA proposal".into());
    };
    let bits = (key_len(ctx) * 8) as u16;
    let encr_ok = p
        .of_type(TR_ENCR)
        .all(|t| t.id == ENCR_AES_GCM_16 && t.key_bits == Some(bits))
        && p.of_type(TR_ENCR).count() == 1;
    if p.proto != PROTO_ESP
        || p.spi.len() != 4
        || !encr_ok
        || !integ_ok(p)
        || p.of_type(TR_DH).any(|t| t.id != 0)
    {
        return Err("responder chose a child SA proposal we did not offer".into());
    }
    let esn = p.of_type(TR_ESN).any(|t| t.id == 1);
    Ok((u32::from_be_bytes(p.spi[..].try_into().unwrap()), esn))
}

pub(crate) struct IkeSa {
    pub spi_i: u64,
    pub spi_r: u64,
    /// We sent the IKE_SA_INIT (or the CREATE_CHILD_SA that rekeyed this
    /// SA): decides the I flag, which SK_e/SK_p are ours and which nonce
    /// is Ni.
    orig_initiator: bool,
    pub state: SaState,
    enc_len: usize,
    group: u16,
    keys: Option<IkeKeys>,
    ni: Vec<u8>,
    nr: Vec<u8>,
    init_req: Vec<u8>,
    init_resp: Vec<u8>,
    dh: Option<DhKey>,
    cookie: Option<Vec<u8>>,
    /// NAT detected (or faked by the peer): IKE on 4500, ESP in UDP.
    nat: bool,
    local_port: u16,
    remote_port: u16,
    next_mid: u32,
    pending: Option<Pending>,
    peer_mid: u32,
    last_resp: Option<(u32, Vec<u8>)>,
    iv: u64,
    children: Vec<Child>,
    last_rx: Instant,
    created: Instant,
    rekey_at: Option<Instant>,
    queue: VecDeque<Want>,
    established_once: bool,
    close_now: bool,
}

impl IkeSa {
    fn blank(ctx: &Ctx, now: Instant, orig_initiator: bool) -> Self {
        IkeSa {
            spi_i: 0,
            spi_r: 0,
            orig_initiator,
            state: SaState::InitSent,
            enc_len: 16,
            group: ctx.cfg.dh_groups.first().copied().unwrap_or(DH_CURVE25519),
            keys: None,
            ni: Vec::new(),
            nr: Vec::new(),
            init_req: Vec::new(),
            init_resp: Vec::new(),
            dh: None,
            cookie: None,
            nat: false,
            local_port: super::IKE_PORT,
            remote_port: super::IKE_PORT,
            next_mid: 0,
            pending: None,
            peer_mid: 0,
            last_resp: None,
            iv: 0,
            children: Vec::new(),
            last_rx: now,
            created: now,
            rekey_at: None,
            queue: VecDeque::new(),
            established_once: false,
            close_now: false,
        }
    }

    /// Starts an IKE SA as the original initiator: sends IKE_SA_INIT.
    pub fn initiate(ctx: &Ctx, out: &mut Out, now: Instant) -> Self {
        let mut sa = IkeSa::blank(ctx, now, true);
        if !crypto::supported_group(sa.group) {
            sa.group = DH_CURVE25519;
        }
        sa.spi_i = random_ike_spi(&ctx.rng);
        sa.ni = crypto::random_bytes(&ctx.rng, NONCE_LEN);
        sa.send_init_request(ctx, out, now);
        tracing::info!(peer = %ctx.cfg.remote_ip, "IKE_SA_INIT sent");
        sa
    }

    fn send_init_request(&mut self, ctx: &Ctx, out: &mut Out, now: Instant) {
        let dh = DhKey::generate(self.group, &ctx.rng).expect("supported DH group");
        let mut ke = self.group.to_be_bytes().to_vec();
        ke.extend_from_slice(&[0, 0]);
        ke.extend_from_slice(&dh.public);
        self.dh = Some(dh);
        let mut pls = Vec::new();
        if let Some(c) = &self.cookie {
            pls.push(notify(N_COOKIE, 0, &[], c));
        }
        pls.push(encode_sa(&[ike_proposal(ctx, Vec::new(), self.group)]));
        pls.push(Payload::new(PL_KE, ke));
        pls.push(Payload::new(PL_NONCE, self.ni.clone()));
        pls.push(notify(
            N_NAT_DETECTION_SOURCE_IP,
            0,
            &[],
            &crypto::nat_hash(self.spi_i, 0, ctx.cfg.local_ip, self.local_port),
        ));
        pls.push(notify(
            N_NAT_DETECTION_DESTINATION_IP,
            0,
            &[],
            &crypto::nat_hash(self.spi_i, 0, ctx.cfg.remote_ip, self.remote_port),
        ));
        let msg = plain_message(self.spi_i, 0, IKE_SA_INIT, FLAG_INITIATOR, 0, &pls);
        self.init_req = msg.clone();
        out.send(self.local_port, self.remote_port, &msg);
        self.next_mid = 1;
        self.pending = Some(Pending {
            mid: 0,
            msg,
            tries: 0,
            next_at: now + ctx.cfg.lifetimes.retransmit_timeout,
            task: Task::Init,
        });
    }

    /// Answers an IKE_SA_INIT request; `None` if it was refused or
    /// malformed (a refusal is answered, garbage is not).
    pub fn respond_init(
        ctx: &Ctx,
        out: &mut Out,
        hdr: &Header,
        msg: &[u8],
        ports: (u16, u16),
        now: Instant,
    ) -> Option<Self> {
        let (pls, sk) = parse_chain(&msg[HDR_LEN..], HDR_LEN, hdr.next).ok()?;
        if sk.is_some() || hdr.mid != 0 {
            return None;
        }
        let p = Parsed::new(&pls).ok()?;
        let (props, (ke_group, ke_data), ni) = (p.sa.as_ref()?, p.ke.as_ref()?, p.nonce.clone()?);
        let refuse = |out: &mut Out, n: Payload| {
            let m = plain_message(hdr.spi_i, 0, IKE_SA_INIT, FLAG_RESPONSE, 0, &[n]);
            out.send(ports.0, ports.1, &m);
        };
        let (chosen, enc_len, group) = match select_ike(ctx, props, *ke_group) {
            Ok(c) => c,
            Err(Some(g)) => {
                tracing::info!(
                    offered = ke_group,
                    wanted = g,
                    "IKE_SA_INIT: asking for another DH group"
                );
                refuse(out, notify(N_INVALID_KE_PAYLOAD, 0, &[], &g.to_be_bytes()));
                return None;
            }
            Err(None) => {
                tracing::warn!(peer = %ctx.cfg.remote_ip, "IKE_SA_INIT: no acceptable proposal");
                refuse(out, notify(N_NO_PROPOSAL_CHOSEN, 0, &[], &[]));
                return None;
            }
        };
        let dh = DhKey::generate(group, &ctx.rng)?;
        let public = dh.public.clone();
        let shared = dh.agree(ke_data)?;
        let mut sa = IkeSa::blank(ctx, now, false);
        sa.spi_i = hdr.spi_i;
        sa.spi_r = random_ike_spi(&ctx.rng);
        sa.group = group;
        sa.enc_len = enc_len;
        sa.ni = ni;
        sa.nr = crypto::random_bytes(&ctx.rng, NONCE_LEN);
        sa.keys = Some(IkeKeys::initial(
            &shared, &sa.ni, &sa.nr, sa.spi_i, sa.spi_r, enc_len,
        ));
        sa.nat = nat_detected(ctx, &p, hdr.spi_i, 0, ports);
        sa.local_port = ports.0;
        sa.remote_port = ports.1;
        sa.state = SaState::AwaitAuth;
        sa.peer_mid = 1;
        let mut ke = group.to_be_bytes().to_vec();
        ke.extend_from_slice(&[0, 0]);
        ke.extend_from_slice(&public);
        let resp = [
            encode_sa(&[chosen]),
            Payload::new(PL_KE, ke),
            Payload::new(PL_NONCE, sa.nr.clone()),
            notify(
                N_NAT_DETECTION_SOURCE_IP,
                0,
                &[],
                &crypto::nat_hash(sa.spi_i, sa.spi_r, ctx.cfg.local_ip, ports.0),
            ),
            notify(
                N_NAT_DETECTION_DESTINATION_IP,
                0,
                &[],
                &crypto::nat_hash(sa.spi_i, sa.spi_r, ctx.cfg.remote_ip, ports.1),
            ),
        ];
        let m = plain_message(sa.spi_i, sa.spi_r, IKE_SA_INIT, FLAG_RESPONSE, 0, &resp);
        out.send(ports.0, ports.1, &m);
        sa.init_req = msg.to_vec();
        sa.init_resp = m;
        tracing::info!(peer = %ctx.cfg.remote_ip, nat = sa.nat, group, "IKE_SA_INIT answered");
        Some(sa)
    }

    /// Whether this is our responder SA for the peer's SPI (so another
    /// IKE_SA_INIT with it is a retransmission, not a new SA).
    pub fn is_responder_for(&self, spi_i: u64) -> bool {
        !self.orig_initiator && self.spi_i == spi_i && self.state != SaState::Deleting
    }

    pub fn resend_init_response(&self, msg: &[u8], out: &mut Out, ports: (u16, u16)) {
        if self.state == SaState::AwaitAuth && msg == self.init_req {
            out.send(ports.0, ports.1, &self.init_resp);
        }
    }

    pub fn matches(&self, h: &Header) -> bool {
        if h.spi_i != self.spi_i {
            return false;
        }
        if self.state == SaState::InitSent {
            return h.exchange == IKE_SA_INIT && h.is_response();
        }
        h.spi_r == self.spi_r
    }

    pub fn ever_established(&self) -> bool {
        self.established_once
    }

    pub fn report_children_deleted(&self, out: &mut Out) {
        for c in &self.children {
            out.events.push_back(IkeEvent::ChildSaDeleted {
                inbound_spi: c.in_spi,
                outbound_spi: c.out_spi,
            });
        }
    }

    pub fn request_child_rekey(&mut self, in_spi: u32) {
        if self.state == SaState::Established
            && self
                .children
                .iter()
                .any(|c| c.in_spi == in_spi && !c.rekeyed)
        {
            self.want(Want::RekeyChild(in_spi));
        }
    }

    pub fn request_ike_rekey(&mut self) {
        if self.state == SaState::Established {
            self.want(Want::RekeyIke);
        }
    }

    pub fn request_close(&mut self) {
        if self.state == SaState::Established {
            self.queue.clear();
            self.queue.push_back(Want::DeleteIke);
            self.state = SaState::Deleting;
        } else {
            self.close_now = true;
        }
    }

    fn want(&mut self, w: Want) {
        if !self.queue.contains(&w) {
            self.queue.push_back(w);
        }
    }

    /// Handles a message for this SA (anything but a new IKE_SA_INIT).
    pub fn input(
        &mut self,
        ctx: &Ctx,
        out: &mut Out,
        hdr: &Header,
        msg: &[u8],
        ports: (u16, u16),
        now: Instant,
    ) -> SaAction {
        if hdr.exchange == IKE_SA_INIT {
            if self.state == SaState::InitSent && hdr.is_response() && hdr.mid == 0 {
                return self.on_init_response(ctx, out, hdr, msg, ports, now);
            }
            return SaAction::None;
        }
        if !hdr.is_response() && hdr.mid.wrapping_add(1) == self.peer_mid {
            // A retransmitted request: resend our response, don't redo it.
            if let Some((mid, resp)) = &self.last_resp {
                if *mid == hdr.mid {
                    out.send(ports.0, ports.1, resp);
                }
            }
            return SaAction::None;
        }
        let expected = if hdr.is_response() {
            self.pending.as_ref().map(|p| p.mid)
        } else {
            Some(self.peer_mid)
        };
        if expected != Some(hdr.mid) {
            return SaAction::None;
        }
        let Some(p) = self.decrypt(hdr, msg) else {
            tracing::debug!("IKE message failed to decrypt or parse, dropped");
            return SaAction::None;
        };
        self.last_rx = now;
        self.local_port = ports.0;
        self.remote_port = ports.1;
        if hdr.is_response() {
            let pending = self.pending.take().expect("checked above");
            let action = self.on_response(ctx, out, pending.task, &p, now);
            if matches!(
                action,
                SaAction::None | SaAction::Established | SaAction::Rekeyed(_)
            ) {
                self.start_next(ctx, out, now);
            }
            return action;
        }
        let (resp, action) = match (hdr.exchange, self.state) {
            (IKE_AUTH, SaState::AwaitAuth) => self.on_auth_request(ctx, out, &p, now),
            (CREATE_CHILD_SA, SaState::Established) => {
                self.on_create_child_request(ctx, out, &p, now)
            }
            (CREATE_CHILD_SA, _) => (
                vec![notify(N_TEMPORARY_FAILURE, 0, &[], &[])],
                SaAction::None,
            ),
            (INFORMATIONAL, SaState::Established | SaState::Deleting) => {
                self.on_informational(out, &p)
            }
            _ => return SaAction::None,
        };
        let m = self.encrypt(hdr.exchange, true, hdr.mid, &resp);
        out.send(ports.0, ports.1, &m);
        self.last_resp = Some((hdr.mid, m));
        self.peer_mid = self.peer_mid.wrapping_add(1);
        action
    }

    fn decrypt(&self, hdr: &Header, msg: &[u8]) -> Option<Parsed> {
        let keys = self.keys.as_ref()?;
        let (outer, sk) = parse_chain(&msg[HDR_LEN..], HDR_LEN, hdr.next).ok()?;
        let sk = sk?;
        if !outer.is_empty() {
            return None;
        }
        let key = if self.orig_initiator {
            &keys.sk_er
        } else {
            &keys.sk_ei
        };
        let inner = crypto::sk_open(key, msg, sk.offset)?;
        let (pls, nested) = parse_chain(&inner, 0, sk.inner_next).ok()?;
        if nested.is_some() {
            return None;
        }
        Parsed::new(&pls).ok()
    }

    fn encrypt(&mut self, exchange: u8, response: bool, mid: u32, pls: &[Payload]) -> Vec<u8> {
        let mut plain = Vec::new();
        let first = encode_chain(pls, &mut plain);
        let total = HDR_LEN + 4 + crypto::IV_LEN + plain.len() + 1 + crypto::ICV_LEN;
        let mut flags = if self.orig_initiator {
            FLAG_INITIATOR
        } else {
            0
        };
        if response {
            flags |= FLAG_RESPONSE;
        }
        let mut msg = Vec::with_capacity(total);
        write_header(
            &mut msg,
            &Header {
                spi_i: self.spi_i,
                spi_r: self.spi_r,
                next: PL_SK,
                exchange,
                flags,
                mid,
                length: total as u32,
            },
        );
        msg.push(first);
        msg.push(0);
        msg.extend_from_slice(&((total - HDR_LEN) as u16).to_be_bytes());
        let keys = self.keys.as_ref().expect("encrypt only with keys");
        let key = if self.orig_initiator {
            &keys.sk_ei
        } else {
            &keys.sk_er
        };
        self.iv += 1;
        crypto::sk_seal(key, self.iv, &mut msg, &plain);
        msg
    }

    fn send_request(
        &mut self,
        ctx: &Ctx,
        out: &mut Out,
        exchange: u8,
        pls: &[Payload],
        task: Task,
        now: Instant,
    ) {
        let mid = self.next_mid;
        self.next_mid = self.next_mid.wrapping_add(1);
        let msg = self.encrypt(exchange, false, mid, pls);
        out.send(self.local_port, self.remote_port, &msg);
        self.pending = Some(Pending {
            mid,
            msg,
            tries: 0,
            next_at: now + ctx.cfg.lifetimes.retransmit_timeout,
            task,
        });
    }

    fn on_init_response(
        &mut self,
        ctx: &Ctx,
        out: &mut Out,
        hdr: &Header,
        msg: &[u8],
        ports: (u16, u16),
        now: Instant,
    ) -> SaAction {
        let Ok((pls, None)) = parse_chain(&msg[HDR_LEN..], HDR_LEN, hdr.next) else {
            return SaAction::None;
        };
        let Ok(p) = Parsed::new(&pls) else {
            return SaAction::None;
        };
        if let Some(n) = p.notify(N_COOKIE) {
            if (1..=64).contains(&n.data.len()) && self.cookie.is_none() {
                self.cookie = Some(n.data.clone());
                self.send_init_request(ctx, out, now);
            }
            return SaAction::None;
        }
        if let Some(n) = p.notify(N_INVALID_KE_PAYLOAD) {
            let g = match n.data[..] {
                [a, b] => u16::from_be_bytes([a, b]),
                _ => 0,
            };
            if g != self.group && crypto::supported_group(g) && ctx.cfg.dh_groups.contains(&g) {
                tracing::info!(
                    group = g,
                    "peer asks for another DH group, retrying IKE_SA_INIT"
                );
                self.group = g;
                self.send_init_request(ctx, out, now);
                return SaAction::None;
            }
            return SaAction::Down(Some(format!(
                "IKE_SA_INIT refused: peer wants DH group {g}, which is not configured"
            )));
        }
        if let Some(e) = p.error() {
            return SaAction::Down(Some(format!(
                "IKE_SA_INIT refused by peer: {}",
                notify_name(e)
            )));
        }
        if hdr.spi_r == 0 {
            return SaAction::None;
        }
        let (Some(props), Some((ke_group, ke_data)), Some(nr)) = (&p.sa, &p.ke, &p.nonce) else {
            return SaAction::None;
        };
        // The responder must pick exactly one of the transforms we offered.
        let enc_len = match &props[..] {
            [c] if c.proto == PROTO_IKE
                && c.of_type(TR_ENCR).count() == 1
                && c.of_type(TR_PRF).all(|t| t.id == PRF_HMAC_SHA2_256)
                && c.of_type(TR_PRF).count() == 1
                && c.of_type(TR_DH).all(|t| t.id == self.group)
                && integ_ok(c) =>
            {
                c.of_type(TR_ENCR).find_map(acceptable_ike_encr)
            }
            _ => None,
        };
        let Some(enc_len) = enc_len else {
            return SaAction::Down(Some(
                "IKE_SA_INIT: peer chose a proposal we did not offer".into(),
            ));
        };
        if *ke_group != self.group {
            return SaAction::Down(Some(
                "IKE_SA_INIT: peer's KE group differs from the one chosen".into(),
            ));
        }
        let Some(shared) = self.dh.take().and_then(|dh| dh.agree(ke_data)) else {
            return SaAction::Down(Some("IKE_SA_INIT: peer's KE value is invalid".into()));
        };
        self.spi_r = hdr.spi_r;
        self.nr = nr.clone();
        self.enc_len = enc_len;
        self.init_resp = msg.to_vec();
        self.keys = Some(IkeKeys::initial(
            &shared, &self.ni, &self.nr, self.spi_i, self.spi_r, enc_len,
        ));
        self.nat = nat_detected(ctx, &p, self.spi_i, self.spi_r, ports);
        if self.nat {
            // RFC 7296 section 2.23: float to 4500 once NAT is seen.
            self.local_port = NAT_T_PORT;
            self.remote_port = NAT_T_PORT;
        }
        self.pending = None;
        self.state = SaState::AuthSent;
        self.last_rx = now;

        let keys = self.keys.as_ref().expect("just set");
        let id = local_identity(ctx);
        let auth = crypto::psk_auth(
            &ctx.cfg.psk,
            &self.init_req,
            &self.nr,
            &keys.sk_pi,
            &id.body(),
        );
        let in_spi = random_esp_spi(&ctx.rng);
        let mut pls = vec![
            Payload::new(PL_IDI, id.body()),
            notify(N_INITIAL_CONTACT, 0, &[], &[]),
        ];
        if let Some(r) = &ctx.cfg.remote_id {
            pls.push(Payload::new(PL_IDR, Identity::from_config(r).body()));
        }
        let mut a = vec![AUTH_SHARED_KEY_MIC, 0, 0, 0];
        a.extend_from_slice(&auth);
        pls.push(Payload::new(PL_AUTH, a));
        pls.extend(self.child_request_payloads(ctx, in_spi, None));
        self.send_request(ctx, out, IKE_AUTH, &pls, Task::Auth { in_spi }, now);
        tracing::info!(nat = self.nat, "IKE_AUTH sent");
        SaAction::None
    }

    /// [N(USE_TRANSPORT_MODE)], SA, [Nonce], TSi, TSr for a child we request.
    fn child_request_payloads(&self, ctx: &Ctx, in_spi: u32, nonce: Option<&[u8]>) -> Vec<Payload> {
        let mut pls = Vec::new();
        if ctx.cfg.child_ts.mode == ChildMode::Transport {
            pls.push(notify(N_USE_TRANSPORT_MODE, 0, &[], &[]));
        }
        pls.push(encode_sa(&[esp_proposal(ctx, in_spi)]));
        if let Some(n) = nonce {
            pls.push(Payload::new(PL_NONCE, n.to_vec()));
        }
        let proto = ctx.cfg.child_ts.protocol;
        pls.push(encode_ts(PL_TSI, &[Ts::host(ctx.cfg.local_ip, proto)]));
        pls.push(encode_ts(PL_TSR, &[Ts::host(ctx.cfg.remote_ip, proto)]));
        pls
    }

    /// Checks the responder's child payloads; returns (peer SPI, ESN).
    fn check_child_response(&self, ctx: &Ctx, p: &Parsed) -> Result<(u32, bool), String> {
        if let Some(e) = p.error() {
            return Err(format!("peer refused the child SA: {}", notify_name(e)));
        }
        let Some(props) = &p.sa else {
            return Err("child SA response without SA payload".into());
        };
        let (spi, esn) = check_esp_choice(ctx, props)?;
        let proto = ctx.cfg.child_ts.protocol;
        let (mine, theirs) = (
            Ts::host(ctx.cfg.local_ip, proto),
            Ts::host(ctx.cfg.remote_ip, proto),
        );
        let ts_ok = |ts: &Option<Vec<Ts>>, want: &Ts| {
            ts.as_ref()
                .is_some_and(|v| !v.is_empty() && v.iter().all(|t| t.within(want)))
        };
        if !ts_ok(&p.tsi, &mine) || !ts_ok(&p.tsr, &theirs) {
            return Err("peer's traffic selectors are outside ours".into());
        }
        let transport = p.notify(N_USE_TRANSPORT_MODE).is_some();
        if transport != (ctx.cfg.child_ts.mode == ChildMode::Transport) {
            return Err(format!(
                "peer chose {} mode, we are configured for {:?}",
                if transport { "transport" } else { "tunnel" },
                ctx.cfg.child_ts.mode
            ));
        }
        Ok((spi, esn))
    }

    /// Responder side of a child SA request (IKE_AUTH or CREATE_CHILD_SA):
    /// the payloads to answer with (minus Nonce/KE) and the new child
    /// without keys, or the error notify and a reason.
    fn accept_child(
        &self,
        ctx: &Ctx,
        p: &Parsed,
        allow_pfs: bool,
    ) -> Result<AcceptedChild, (u16, String)> {
        let props =
            p.sa.as_ref()
                .ok_or((N_INVALID_SYNTAX, "no SA payload".to_string()))?;
        let Some((mut chosen, out_spi, esn, pfs)) = select_esp(ctx, props, allow_pfs) else {
            return Err((
                N_NO_PROPOSAL_CHOSEN,
                format!(
                    "no acceptable ESP proposal (we need AES-GCM-16 with {}-bit keys)",
                    key_len(ctx) * 8
                ),
            ));
        };
        let proto = ctx.cfg.child_ts.protocol;
        let narrow =
            |ts: &Option<Vec<Ts>>, ours: Ts| ts.as_ref()?.iter().find_map(|t| t.intersect(&ours));
        let (Some(tsi), Some(tsr)) = (
            narrow(&p.tsi, Ts::host(ctx.cfg.remote_ip, proto)),
            narrow(&p.tsr, Ts::host(ctx.cfg.local_ip, proto)),
        ) else {
            return Err((
                N_TS_UNACCEPTABLE,
                "peer's traffic selectors do not cover ours".into(),
            ));
        };
        let transport = p.notify(N_USE_TRANSPORT_MODE).is_some();
        let mode = ctx.cfg.child_ts.mode;
        if transport != (mode == ChildMode::Transport) {
            return Err((
                N_NO_PROPOSAL_CHOSEN,
                format!(
                    "peer wants {} mode, we are configured for {mode:?}",
                    if transport { "transport" } else { "tunnel" }
                ),
            ));
        }
        let in_spi = random_esp_spi(&ctx.rng);
        chosen.spi = in_spi.to_be_bytes().to_vec();
        let mut pls = Vec::new();
        if transport {
            pls.push(notify(N_USE_TRANSPORT_MODE, 0, &[], &[]));
        }
        pls.push(encode_sa(&[chosen]));
        pls.push(encode_ts(PL_TSI, &[tsi]));
        pls.push(encode_ts(PL_TSR, &[tsr]));
        let child = Child {
            in_spi,
            out_spi,
            in_key: Vec::new(),
            out_key: Vec::new(),
            esn,
            mode,
            rekey_at: None,
            rekeyed: false,
        };
        Ok((pls, child, pfs))
    }

    /// Fills in a child's keys from KEYMAT; `we_initiated` says whether we
    /// started the exchange that created it (the first key is for the
    /// initiator-to-responder direction).
    fn key_child(
        &self,
        ctx: &Ctx,
        c: &mut Child,
        shared: Option<&[u8]>,
        (ni, nr): (&[u8], &[u8]),
        we_initiated: bool,
        now: Instant,
    ) {
        let sk_d = &self.keys.as_ref().expect("child keys need an IKE SA").sk_d;
        let (i2r, r2i) = crypto::child_keymat(sk_d, shared, ni, nr, key_len(ctx));
        if we_initiated {
            (c.out_key, c.in_key) = (i2r, r2i);
        } else {
            (c.in_key, c.out_key) = (i2r, r2i);
        }
        c.rekey_at = jittered(&ctx.rng, now, ctx.cfg.lifetimes.child_rekey);
    }

    fn child_keys(&self, c: &Child) -> (ChildKeys, ChildKeys) {
        (
            ChildKeys {
                spi: c.out_spi,
                key: c.out_key.clone(),
                esn: c.esn,
            },
            ChildKeys {
                spi: c.in_spi,
                key: c.in_key.clone(),
                esn: c.esn,
            },
        )
    }

    /// `old`: the child SA this one replaces (its inbound and outbound
    /// SPIs); `we_answered`: the peer asked for the rekey.
    fn child_up(&mut self, out: &mut Out, c: Child, old: Option<(u32, u32)>, we_answered: bool) {
        let (outbound, inbound) = self.child_keys(&c);
        tracing::info!(
            inbound = format_args!("{:#010x}", c.in_spi),
            outbound = format_args!("{:#010x}", c.out_spi),
            rekey = old.is_some(),
            "child SA up"
        );
        out.events.push_back(match old {
            None => IkeEvent::ChildSaUp {
                mode: c.mode,
                encap_udp: self.nat,
                outbound,
                inbound,
            },
            Some((old_in, old_out)) => IkeEvent::ChildSaRekeyed {
                old_inbound_spi: old_in,
                old_outbound_spi: old_out,
                responder: we_answered,
                mode: c.mode,
                encap_udp: self.nat,
                outbound,
                inbound,
            },
        });
        self.children.push(c);
    }

    fn established(&mut self, ctx: &Ctx, out: &mut Out, now: Instant) {
        self.state = SaState::Established;
        self.established_once = true;
        self.rekey_at = jittered(&ctx.rng, now, ctx.cfg.lifetimes.ike_rekey);
        out.events.push_back(IkeEvent::IkeUp);
        tracing::info!(peer = %ctx.cfg.remote_ip, nat = self.nat, "IKE SA established");
    }

    fn on_auth_request(
        &mut self,
        ctx: &Ctx,
        out: &mut Out,
        p: &Parsed,
        now: Instant,
    ) -> (Vec<Payload>, SaAction) {
        let fail = |reason: String| {
            tracing::warn!(%reason, "IKE_AUTH refused");
            (
                vec![notify(N_AUTHENTICATION_FAILED, 0, &[], &[])],
                SaAction::Down(Some(reason)),
            )
        };
        let (Some(idi), Some((method, auth))) = (&p.idi, &p.auth) else {
            return fail("IKE_AUTH without identity or AUTH payload (EAP is not supported)".into());
        };
        if *method != AUTH_SHARED_KEY_MIC {
            return fail(format!(
                "peer authenticates with method {method}, only pre-shared keys are supported"
            ));
        }
        if let Err(reason) = check_remote_id(ctx, idi) {
            return fail(reason);
        }
        let keys = self.keys.as_ref().expect("responder SA has keys");
        let expected = crypto::psk_auth(&ctx.cfg.psk, &self.init_req, &self.nr, &keys.sk_pi, idi);
        let peer = Identity::parse(idi)
            .map(|i| i.to_string())
            .unwrap_or_default();
        if !crypto::ct_eq(&expected, auth) {
            return fail(format!(
                "peer '{peer}' failed pre-shared key authentication (pre-shared keys differ); sent AUTHENTICATION_FAILED"
            ));
        }
        let id = local_identity(ctx);
        let our_auth = crypto::psk_auth(
            &ctx.cfg.psk,
            &self.init_resp,
            &self.ni,
            &keys.sk_pr,
            &id.body(),
        );
        let mut a = vec![AUTH_SHARED_KEY_MIC, 0, 0, 0];
        a.extend_from_slice(&our_auth);
        let mut pls = vec![Payload::new(PL_IDR, id.body()), Payload::new(PL_AUTH, a)];
        self.established(ctx, out, now);
        match self.accept_child(ctx, p, false) {
            Ok((cpls, mut child, _)) => {
                pls.extend(cpls);
                let (ni, nr) = (self.ni.clone(), self.nr.clone());
                self.key_child(ctx, &mut child, None, (&ni, &nr), false, now);
                self.child_up(out, child, None, false);
            }
            Err((n, reason)) => {
                pls.push(notify(n, 0, &[], &[]));
                out.events.push_back(IkeEvent::IkeFailed {
                    reason: format!("child SA refused ({}): {reason}", notify_name(n)),
                });
            }
        }
        (pls, SaAction::Established)
    }

    fn on_create_child_request(
        &mut self,
        ctx: &Ctx,
        out: &mut Out,
        p: &Parsed,
        now: Instant,
    ) -> (Vec<Payload>, SaAction) {
        let err = |n: u16, data: &[u8]| (vec![notify(n, 0, &[], data)], SaAction::None);
        let Some(ni) = p.nonce.clone() else {
            return err(N_INVALID_SYNTAX, &[]);
        };
        let busy = |w: &Want| self.queue.contains(w);
        if p.sa
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x.proto == PROTO_IKE))
        {
            // Rekey of this IKE SA (RFC 7296 section 1.3.2).
            if matches!(
                self.pending.as_ref().map(|x| &x.task),
                Some(Task::RekeyIke { .. })
            ) || busy(&Want::RekeyIke)
            {
                return err(N_TEMPORARY_FAILURE, &[]);
            }
            let Some((ke_group, ke_data)) = &p.ke else {
                return err(N_INVALID_SYNTAX, &[]);
            };
            let props = p.sa.as_ref().expect("checked");
            let (mut chosen, enc_len, group) = match select_ike(ctx, props, *ke_group) {
                Ok(c) => c,
                Err(Some(g)) => return err(N_INVALID_KE_PAYLOAD, &g.to_be_bytes()),
                Err(None) => return err(N_NO_PROPOSAL_CHOSEN, &[]),
            };
            let Some(peer_spi) = props
                .iter()
                .find(|x| x.num == chosen.num && x.proto == PROTO_IKE)
                .and_then(|x| <[u8; 8]>::try_from(&x.spi[..]).ok())
                .map(u64::from_be_bytes)
                .filter(|s| *s != 0)
            else {
                return err(N_INVALID_SYNTAX, &[]);
            };
            let Some(dh) = DhKey::generate(group, &ctx.rng) else {
                return err(N_NO_PROPOSAL_CHOSEN, &[]);
            };
            let public = dh.public.clone();
            let Some(shared) = dh.agree(ke_data) else {
                return err(N_INVALID_SYNTAX, &[]);
            };
            let nr = crypto::random_bytes(&ctx.rng, NONCE_LEN);
            let new_spi = random_ike_spi(&ctx.rng);
            chosen.spi = new_spi.to_be_bytes().to_vec();
            let new = self.rekeyed_sa(
                ctx, now, false, peer_spi, new_spi, &shared, &ni, &nr, enc_len, group,
            );
            let mut ke = group.to_be_bytes().to_vec();
            ke.extend_from_slice(&[0, 0]);
            ke.extend_from_slice(&public);
            let pls = vec![
                encode_sa(&[chosen]),
                Payload::new(PL_NONCE, nr),
                Payload::new(PL_KE, ke),
            ];
            tracing::info!("IKE SA rekeyed by peer");
            return (pls, SaAction::Rekeyed(Box::new(new)));
        }
        let Some(rekey) = p
            .notify(N_REKEY_SA)
            .filter(|n| n.proto == PROTO_ESP && n.spi.len() == 4)
        else {
            // One child per peering is all nicflow needs.
            return err(N_NO_ADDITIONAL_SAS, &[]);
        };
        let old_out = u32::from_be_bytes(rekey.spi[..].try_into().unwrap());
        let Some(old) = self
            .children
            .iter()
            .find(|c| c.out_spi == old_out && !c.rekeyed)
        else {
            return (
                vec![notify(N_CHILD_SA_NOT_FOUND, PROTO_ESP, &rekey.spi, &[])],
                SaAction::None,
            );
        };
        let old_in = old.in_spi;
        let colliding = matches!(self.pending.as_ref().map(|x| &x.task), Some(Task::RekeyChild { old_in: o, .. }) if *o == old_in);
        if colliding || busy(&Want::RekeyChild(old_in)) {
            // Simultaneous rekey: both back off for a random time instead of
            // implementing the nonce tie-break of section 2.8.1.
            return err(N_TEMPORARY_FAILURE, &[]);
        }
        let (mut pls, mut child, pfs) = match self.accept_child(ctx, p, true) {
            Ok(x) => x,
            Err((n, reason)) => {
                tracing::warn!(%reason, "child rekey refused");
                return err(n, &[]);
            }
        };
        let nr = crypto::random_bytes(&ctx.rng, NONCE_LEN);
        let mut shared = None;
        if let Some(g) = pfs {
            let Some((kg, kd)) = p.ke.as_ref().filter(|(kg, _)| *kg == g) else {
                return err(N_INVALID_KE_PAYLOAD, &g.to_be_bytes());
            };
            let _ = kg;
            let Some(dh) = DhKey::generate(g, &ctx.rng) else {
                return err(N_NO_PROPOSAL_CHOSEN, &[]);
            };
            let mut ke = g.to_be_bytes().to_vec();
            ke.extend_from_slice(&[0, 0]);
            ke.extend_from_slice(&dh.public);
            let Some(s) = dh.agree(kd) else {
                return err(N_INVALID_SYNTAX, &[]);
            };
            shared = Some(s);
            pls.insert(pls.len() - 2, Payload::new(PL_KE, ke));
        }
        pls.insert(pls.len() - 2, Payload::new(PL_NONCE, nr.clone()));
        self.key_child(ctx, &mut child, shared.as_deref(), (&ni, &nr), false, now);
        let old = self
            .children
            .iter_mut()
            .find(|c| c.in_spi == old_in)
            .expect("found above");
        old.rekeyed = true;
        old.rekey_at = None;
        self.child_up(out, child, Some((old_in, old_out)), true);
        (pls, SaAction::None)
    }

    /// Builds the SA that replaces this one after an IKE rekey, taking over
    /// its children.
    #[allow(clippy::too_many_arguments)]
    fn rekeyed_sa(
        &mut self,
        ctx: &Ctx,
        now: Instant,
        we_initiated: bool,
        spi_i: u64,
        spi_r: u64,
        shared: &[u8],
        ni: &[u8],
        nr: &[u8],
        enc_len: usize,
        group: u16,
    ) -> IkeSa {
        let sk_d = &self.keys.as_ref().expect("established").sk_d;
        let mut new = IkeSa::blank(ctx, now, we_initiated);
        new.spi_i = spi_i;
        new.spi_r = spi_r;
        new.keys = Some(IkeKeys::rekeyed(
            sk_d, shared, ni, nr, spi_i, spi_r, enc_len,
        ));
        new.enc_len = enc_len;
        new.group = group;
        new.ni = ni.to_vec();
        new.nr = nr.to_vec();
        new.nat = self.nat;
        new.local_port = self.local_port;
        new.remote_port = self.remote_port;
        new.state = SaState::Established;
        new.established_once = true;
        new.rekey_at = jittered(&ctx.rng, now, ctx.cfg.lifetimes.ike_rekey);
        new.children = std::mem::take(&mut self.children);
        // Wants about children go with them.
        new.queue = self
            .queue
            .iter()
            .copied()
            .filter(|w| matches!(w, Want::RekeyChild(_) | Want::DeleteChild(_)))
            .collect();
        self.queue.clear();
        self.state = SaState::Deleting;
        self.created = now;
        new
    }

    fn on_informational(&mut self, out: &mut Out, p: &Parsed) -> (Vec<Payload>, SaAction) {
        let mut ours = Vec::new();
        for d in &p.deletes {
            if d.proto == PROTO_IKE {
                tracing::info!(
                    rekeyed = self.state == SaState::Deleting,
                    "peer deleted the IKE SA"
                );
                return (Vec::new(), SaAction::Down(None));
            }
            if d.proto != PROTO_ESP {
                continue;
            }
            for spi in &d.spis {
                if let Some(i) = self.children.iter().position(|c| c.out_spi == *spi) {
                    let c = self.children.remove(i);
                    ours.push(c.in_spi);
                    self.queue.retain(|w| {
                        *w != Want::DeleteChild(c.in_spi) && *w != Want::RekeyChild(c.in_spi)
                    });
                    out.events.push_back(IkeEvent::ChildSaDeleted {
                        inbound_spi: c.in_spi,
                        outbound_spi: c.out_spi,
                    });
                }
            }
        }
        let mut pls = Vec::new();
        if !ours.is_empty() {
            pls.push(encode_delete(&Delete {
                proto: PROTO_ESP,
                spis: ours,
            }));
        }
        (pls, SaAction::None)
    }

    fn on_response(
        &mut self,
        ctx: &Ctx,
        out: &mut Out,
        task: Task,
        p: &Parsed,
        now: Instant,
    ) -> SaAction {
        match task {
            Task::Init => SaAction::None,
            Task::Auth { in_spi } => self.on_auth_response(ctx, out, in_spi, p, now),
            Task::RekeyChild { old_in, new_in, ni } => {
                let retry = |this: &mut Self, at: Instant| {
                    if let Some(c) = this.children.iter_mut().find(|c| c.in_spi == old_in) {
                        c.rekey_at = Some(at);
                    }
                };
                match p.error() {
                    Some(N_TEMPORARY_FAILURE) => {
                        retry(self, retry_later(&ctx.rng, now));
                        return SaAction::None;
                    }
                    Some(N_CHILD_SA_NOT_FOUND) => {
                        if let Some(i) = self.children.iter().position(|c| c.in_spi == old_in) {
                            let c = self.children.remove(i);
                            out.events.push_back(IkeEvent::ChildSaDeleted {
                                inbound_spi: c.in_spi,
                                outbound_spi: c.out_spi,
                            });
                        }
                        return SaAction::None;
                    }
                    _ => {}
                }
                let Some(old_out) = self
                    .children
                    .iter()
                    .find(|c| c.in_spi == old_in)
                    .map(|c| c.out_spi)
                else {
                    return SaAction::None;
                };
                let checked = self.check_child_response(ctx, p);
                let (Ok((out_spi, esn)), Some(nr)) = (checked.clone(), &p.nonce) else {
                    let reason = checked
                        .err()
                        .unwrap_or_else(|| "child rekey response without nonce".into());
                    out.events.push_back(IkeEvent::IkeFailed {
                        reason: format!("child SA rekey failed: {reason}"),
                    });
                    retry(self, now + Duration::from_secs(60));
                    return SaAction::None;
                };
                let mut c = Child {
                    in_spi: new_in,
                    out_spi,
                    in_key: Vec::new(),
                    out_key: Vec::new(),
                    esn,
                    mode: ctx.cfg.child_ts.mode,
                    rekey_at: None,
                    rekeyed: false,
                };
                self.key_child(ctx, &mut c, None, (&ni, nr), true, now);
                if let Some(o) = self.children.iter_mut().find(|c| c.in_spi == old_in) {
                    o.rekeyed = true;
                    o.rekey_at = None;
                }
                self.child_up(out, c, Some((old_in, old_out)), false);
                self.queue.push_front(Want::DeleteChild(old_in));
                SaAction::None
            }
            Task::DeleteChild { in_spi } => {
                if let Some(i) = self.children.iter().position(|c| c.in_spi == in_spi) {
                    let c = self.children.remove(i);
                    out.events.push_back(IkeEvent::ChildSaDeleted {
                        inbound_spi: c.in_spi,
                        outbound_spi: c.out_spi,
                    });
                }
                SaAction::None
            }
            Task::RekeyIke { new_spi, ni, dh } => {
                match p.error() {
                    None => {}
                    Some(N_INVALID_KE_PAYLOAD) => {
                        let g = p
                            .notify(N_INVALID_KE_PAYLOAD)
                            .and_then(|n| <[u8; 2]>::try_from(&n.data[..]).ok())
                            .map(u16::from_be_bytes);
                        if let Some(g) = g.filter(|g| {
                            crypto::supported_group(*g) && ctx.cfg.dh_groups.contains(g)
                        }) {
                            self.group = g;
                        }
                        self.rekey_at = Some(retry_later(&ctx.rng, now));
                        return SaAction::None;
                    }
                    Some(e) => {
                        tracing::warn!(error = %notify_name(e), "IKE rekey refused, retrying later");
                        self.rekey_at = Some(if e == N_TEMPORARY_FAILURE {
                            retry_later(&ctx.rng, now)
                        } else {
                            now + Duration::from_secs(60)
                        });
                        return SaAction::None;
                    }
                }
                let group = dh.group;
                let chosen = match p.sa.as_deref() {
                    Some([c])
                        if c.proto == PROTO_IKE
                            && c.spi.len() == 8
                            && c.of_type(TR_DH).all(|t| t.id == group) =>
                    {
                        c.of_type(TR_ENCR)
                            .find_map(acceptable_ike_encr)
                            .map(|l| (l, c.spi.clone()))
                    }
                    _ => None,
                };
                let (Some((enc_len, spi)), Some(nr), Some((kg, kd))) = (chosen, &p.nonce, &p.ke)
                else {
                    self.rekey_at = Some(now + Duration::from_secs(60));
                    return SaAction::None;
                };
                let peer_spi = u64::from_be_bytes(spi[..].try_into().unwrap());
                let shared = if *kg == group { dh.agree(kd) } else { None };
                let Some(shared) = shared else {
                    self.rekey_at = Some(now + Duration::from_secs(60));
                    return SaAction::None;
                };
                let new = self.rekeyed_sa(
                    ctx, now, true, new_spi, peer_spi, &shared, &ni, nr, enc_len, group,
                );
                self.queue.push_back(Want::DeleteIke);
                tracing::info!("IKE SA rekeyed");
                SaAction::Rekeyed(Box::new(new))
            }
            Task::DeleteIke => SaAction::Down(None),
            Task::Dpd => SaAction::None,
        }
    }

    fn on_auth_response(
        &mut self,
        ctx: &Ctx,
        out: &mut Out,
        in_spi: u32,
        p: &Parsed,
        now: Instant,
    ) -> SaAction {
        if p.notify(N_AUTHENTICATION_FAILED).is_some() {
            return SaAction::Down(Some(
                "authentication failed: peer answered AUTHENTICATION_FAILED (pre-shared keys or identities differ)".into(),
            ));
        }
        let (Some(idr), Some((method, auth))) = (&p.idr, &p.auth) else {
            return SaAction::Down(Some(format!(
                "IKE_AUTH failed: {}",
                p.error()
                    .map_or("response without identity or AUTH".into(), notify_name)
            )));
        };
        if let Err(reason) = check_remote_id(ctx, idr) {
            return SaAction::Down(Some(reason));
        }
        let keys = self.keys.as_ref().expect("keys after IKE_SA_INIT");
        let expected = crypto::psk_auth(&ctx.cfg.psk, &self.init_resp, &self.ni, &keys.sk_pr, idr);
        if *method != AUTH_SHARED_KEY_MIC || !crypto::ct_eq(&expected, auth) {
            return SaAction::Down(Some(
                "authentication failed: the peer's AUTH does not verify with our pre-shared key"
                    .into(),
            ));
        }
        self.established(ctx, out, now);
        match self.check_child_response(ctx, p) {
            Ok((out_spi, esn)) => {
                let mut c = Child {
                    in_spi,
                    out_spi,
                    in_key: Vec::new(),
                    out_key: Vec::new(),
                    esn,
                    mode: ctx.cfg.child_ts.mode,
                    rekey_at: None,
                    rekeyed: false,
                };
                let (ni, nr) = (self.ni.clone(), self.nr.clone());
                self.key_child(ctx, &mut c, None, (&ni, &nr), true, now);
                self.child_up(out, c, None, false);
            }
            Err(reason) => {
                // An IKE SA without its child protects nothing: close it.
                out.events.push_back(IkeEvent::IkeFailed { reason });
                self.queue.push_back(Want::DeleteIke);
                self.state = SaState::Deleting;
            }
        }
        SaAction::Established
    }

    /// Starts the next wanted exchange if the window is free.
    fn start_next(&mut self, ctx: &Ctx, out: &mut Out, now: Instant) {
        if self.pending.is_some() || !matches!(self.state, SaState::Established | SaState::Deleting)
        {
            return;
        }
        while let Some(w) = self.queue.pop_front() {
            if self.state == SaState::Deleting && w != Want::DeleteIke {
                continue;
            }
            match w {
                Want::RekeyChild(old_in) => {
                    if !self
                        .children
                        .iter()
                        .any(|c| c.in_spi == old_in && !c.rekeyed)
                    {
                        continue;
                    }
                    let new_in = random_esp_spi(&ctx.rng);
                    let ni = crypto::random_bytes(&ctx.rng, NONCE_LEN);
                    let mut pls = vec![notify(N_REKEY_SA, PROTO_ESP, &old_in.to_be_bytes(), &[])];
                    pls.extend(self.child_request_payloads(ctx, new_in, Some(&ni)));
                    self.send_request(
                        ctx,
                        out,
                        CREATE_CHILD_SA,
                        &pls,
                        Task::RekeyChild { old_in, new_in, ni },
                        now,
                    );
                }
                Want::DeleteChild(in_spi) => {
                    if !self.children.iter().any(|c| c.in_spi == in_spi) {
                        continue;
                    }
                    let pls = [encode_delete(&Delete {
                        proto: PROTO_ESP,
                        spis: vec![in_spi],
                    })];
                    self.send_request(
                        ctx,
                        out,
                        INFORMATIONAL,
                        &pls,
                        Task::DeleteChild { in_spi },
                        now,
                    );
                }
                Want::RekeyIke => {
                    let new_spi = random_ike_spi(&ctx.rng);
                    let ni = crypto::random_bytes(&ctx.rng, NONCE_LEN);
                    let Some(dh) = DhKey::generate(self.group, &ctx.rng) else {
                        continue;
                    };
                    let mut ke = self.group.to_be_bytes().to_vec();
                    ke.extend_from_slice(&[0, 0]);
                    ke.extend_from_slice(&dh.public);
                    let pls = [
                        encode_sa(&[ike_proposal(
                            ctx,
                            new_spi.to_be_bytes().to_vec(),
                            self.group,
                        )]),
                        Payload::new(PL_NONCE, ni.clone()),
                        Payload::new(PL_KE, ke),
                    ];
                    self.send_request(
                        ctx,
                        out,
                        CREATE_CHILD_SA,
                        &pls,
                        Task::RekeyIke { new_spi, ni, dh },
                        now,
                    );
                }
                Want::DeleteIke => {
                    let pls = [encode_delete(&Delete {
                        proto: PROTO_IKE,
                        spis: Vec::new(),
                    })];
                    self.send_request(ctx, out, INFORMATIONAL, &pls, Task::DeleteIke, now);
                }
                Want::Dpd => self.send_request(ctx, out, INFORMATIONAL, &[], Task::Dpd, now),
            }
            return;
        }
    }

    pub fn tick(&mut self, ctx: &Ctx, out: &mut Out, now: Instant) -> SaAction {
        if self.close_now {
            return SaAction::Down(None);
        }
        let lt = &ctx.cfg.lifetimes;
        if let Some(p) = &mut self.pending {
            if now >= p.next_at {
                if p.tries >= lt.retransmit_tries {
                    let task = self.pending.take().expect("checked").task;
                    return match task {
                        Task::DeleteIke => SaAction::Down(None),
                        _ => SaAction::Down(Some(format!(
                            "peer {} did not answer {} after {} retransmissions",
                            ctx.cfg.remote_ip,
                            task.name(),
                            lt.retransmit_tries
                        ))),
                    };
                }
                p.tries += 1;
                let interval = lt
                    .retransmit_timeout
                    .saturating_mul(1 << p.tries.min(16))
                    .min(MAX_RETRANSMIT_INTERVAL);
                p.next_at = now + interval;
                out.send(self.local_port, self.remote_port, &p.msg);
                tracing::debug!(tries = p.tries, "IKE retransmission");
            }
        }
        match self.state {
            SaState::AwaitAuth if now.duration_since(self.created) >= HALF_OPEN_TIMEOUT => {
                return SaAction::Remove
            }
            SaState::Deleting
                if self.pending.is_none()
                    && self.queue.is_empty()
                    && now.duration_since(self.created) >= OLD_SA_TIMEOUT =>
            {
                return SaAction::Down(None)
            }
            SaState::Established => {
                if self.rekey_at.is_some_and(|t| now >= t) {
                    self.rekey_at = None;
                    self.want(Want::RekeyIke);
                }
                let due: Vec<u32> = self
                    .children
                    .iter_mut()
                    .filter(|c| !c.rekeyed && c.rekey_at.is_some_and(|t| now >= t))
                    .map(|c| {
                        c.rekey_at = None;
                        c.in_spi
                    })
                    .collect();
                for spi in due {
                    self.want(Want::RekeyChild(spi));
                }
                if !lt.dpd.is_zero()
                    && self.pending.is_none()
                    && self.queue.is_empty()
                    && now.duration_since(self.last_rx) >= lt.dpd
                {
                    self.want(Want::Dpd);
                }
            }
            _ => {}
        }
        self.start_next(ctx, out, now);
        SaAction::None
    }
}

/// RFC 7296 section 2.23: NAT is present if the peer's source hash (over
/// the address and port it sent from) or its destination hash (over the
/// address and port it sent to, i.e. ours) does not match what we see.
/// strongSwan fakes a mismatching source hash to force UDP encapsulation.
fn nat_detected(ctx: &Ctx, p: &Parsed, spi_i: u64, spi_r: u64, ports: (u16, u16)) -> bool {
    let src: Vec<_> = p
        .notifies
        .iter()
        .filter(|n| n.ty == N_NAT_DETECTION_SOURCE_IP)
        .collect();
    let dst = p.notify(N_NAT_DETECTION_DESTINATION_IP);
    if src.is_empty() || dst.is_none() {
        return false;
    }
    let peer_hash = crypto::nat_hash(spi_i, spi_r, ctx.cfg.remote_ip, ports.1);
    let our_hash = crypto::nat_hash(spi_i, spi_r, ctx.cfg.local_ip, ports.0);
    let peer_nat = !src.iter().any(|n| n.data == peer_hash);
    let we_nat = dst.is_some_and(|n| n.data != our_hash);
    peer_nat || we_nat
}

/// An unencrypted message (IKE_SA_INIT).
fn plain_message(
    spi_i: u64,
    spi_r: u64,
    exchange: u8,
    flags: u8,
    mid: u32,
    pls: &[Payload],
) -> Vec<u8> {
    let mut body = Vec::new();
    let first = encode_chain(pls, &mut body);
    let mut msg = Vec::with_capacity(HDR_LEN + body.len());
    write_header(
        &mut msg,
        &Header {
            spi_i,
            spi_r,
            next: first,
            exchange,
            flags,
            mid,
            length: (HDR_LEN + body.len()) as u32,
        },
    );
    msg.extend_from_slice(&body);
    msg
}
