//! ESP data path: RFC 4303 packets protected with AES-GCM (RFC 4106).
//!
//! Place in a packet's path: on the way out, a tunnel port hands the
//! payload of the outer IP header (the UDP/VXLAN datagram in transport
//! mode, or a whole inner IP packet in tunnel mode) to
//! [`OutboundSa::seal`], then puts the ESP packet it gets back behind an
//! IP header with protocol 50. On the way in, the underlay reads the SPI
//! with [`spi_of`], looks up its [`InboundSa`], and [`InboundSa::open`]
//! decrypts the packet where it lies; only an `Ok` hands anything on.
//! Every refusal is an [`EspDrop`] counted in [`InboundStats`], so a
//! misbehaving or hostile peer shows up in counters rather than logs.
//!
//! The order of checks in `open` is the security argument: cheap header
//! checks, then the anti-replay window is *consulted* (a replay costs no
//! decryption), then the ICV is verified, and only an authenticated packet
//! moves the window (a forged sequence number cannot push genuine traffic
//! out of it). Sequence numbers double as GCM IVs, so an [`OutboundSa`]
//! refuses to reuse or wrap them: a repeated nonce under one key would give
//! away the GCM authentication key.
//!
//! Neither side allocates per packet: `seal` writes into a caller-owned
//! `Vec` whose capacity is reused, [`OutboundSa::seal_in_place`] builds
//! the packet around a payload that already lies in the caller's buffer
//! (no copy of it at all: the tunnel port's path), `open` works in place.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_128_GCM, AES_256_GCM, NONCE_LEN};

use crate::replay::{ReplayError, ReplayWindow, DEFAULT_WINDOW, MAX_WINDOW};

#[cfg(test)]
mod tests;

/// IP protocol number of ESP, for the outer header the caller writes.
pub const IPPROTO_ESP: u8 = 50;
/// Next-header value of a dummy packet (RFC 4303 2.6: "no next header").
pub const NEXT_HEADER_DUMMY: u8 = 59;
/// SPI and sequence number.
pub const ESP_HEADER_LEN: usize = 8;
/// The explicit IV of RFC 4106 (the 64-bit sequence number here).
pub const ESP_IV_LEN: usize = 8;
/// Pad length and next header.
pub const ESP_TRAILER_LEN: usize = 2;
/// The ICV: the full 16-byte GCM tag (no truncated variants).
pub const ESP_ICV_LEN: usize = 16;
/// Salt bytes at the end of the key material (RFC 4106 8.1).
pub const SALT_LEN: usize = 4;
/// Shortest packet `open` will try: an empty payload without padding.
pub const ESP_MIN_LEN: usize = ESP_HEADER_LEN + ESP_IV_LEN + ESP_TRAILER_LEN + ESP_ICV_LEN;
/// Largest number of bytes `seal` adds to a payload (header, IV, up to 3
/// bytes of padding, trailer, ICV), for MTU arithmetic.
pub const ESP_OVERHEAD_MAX: usize =
    ESP_HEADER_LEN + ESP_IV_LEN + (PAD_ALIGN - 1) + ESP_TRAILER_LEN + ESP_ICV_LEN;
/// Share of a hard limit (sequence space, lifetime) after which
/// `needs_rekey` turns true, leaving IKE the rest to negotiate a successor.
pub const SOFT_LIMIT_PERCENT: u64 = 90;

/// GCM's block size is 1, so only ESP's own 4-byte alignment of the
/// ciphertext (RFC 4303 2.4) calls for padding.
const PAD_ALIGN: usize = 4;

/// RFC 4303 2.4's default padding content 1, 2, 3, ... (up to its maximum
/// length, for checking what a peer sent).
const PAD_PATTERN: [u8; 255] = {
    let mut p = [0u8; 255];
    let mut i = 0;
    while i < 255 {
        p[i] = (i + 1) as u8;
        i += 1;
    }
    p
};

/// The AEAD transform of an SA. Both use the 16-byte ICV, which is what
/// IKEv2 negotiates as ENCR_AES_GCM_16 (transform id 20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Aead {
    AesGcm128,
    AesGcm256,
}

impl Aead {
    /// AES key length in bytes.
    pub const fn key_len(self) -> usize {
        match self {
            Aead::AesGcm128 => 16,
            Aead::AesGcm256 => 32,
        }
    }

    /// Length of the key material an SA is configured with: key || salt
    /// (RFC 4106 8.1; what IKEv2's KEYMAT yields for this transform).
    pub const fn key_material_len(self) -> usize {
        self.key_len() + SALT_LEN
    }

    /// Stable name, for configuration and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Aead::AesGcm128 => "aes-gcm-128",
            Aead::AesGcm256 => "aes-gcm-256",
        }
    }

    fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            Aead::AesGcm128 => &AES_128_GCM,
            Aead::AesGcm256 => &AES_256_GCM,
        }
    }
}

impl fmt::Display for Aead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything one direction of an SA needs. The same structure configures
/// both ends; `replay_window` only matters inbound.
#[derive(Clone)]
pub struct SaConfig {
    pub spi: u32,
    pub aead: Aead,
    /// Key || 4-byte salt ([`Aead::key_material_len`] bytes).
    pub key: Vec<u8>,
    /// 64-bit extended sequence numbers (RFC 4303 2.2.1): the high half
    /// travels only in the ICV's AAD, so both ends must agree.
    pub esn: bool,
    /// Anti-replay window in packets, at most [`MAX_WINDOW`]. 0 disables
    /// the duplicate check, which RFC 4303 3.4.3 allows the receiver; the
    /// sender keeps refusing to wrap either way because its sequence
    /// numbers are the GCM nonces.
    pub replay_window: u32,
    /// Hard limit on payload bytes protected (outbound) or delivered
    /// (inbound) by this SA.
    pub lifetime_bytes: Option<u64>,
    /// Hard limit on packets protected (outbound) or delivered (inbound).
    pub lifetime_packets: Option<u64>,
}

impl SaConfig {
    /// An SA with the defaults: no ESN, a 64-packet window, no lifetimes.
    pub fn new(spi: u32, aead: Aead, key: Vec<u8>) -> Self {
        Self {
            spi,
            aead,
            key,
            esn: false,
            replay_window: DEFAULT_WINDOW,
            lifetime_bytes: None,
            lifetime_packets: None,
        }
    }

    /// Refuses what would make a broken or ambiguous SA: the SPIs RFC 4303
    /// 2.1 reserves (0 means "no SA", 1-255 are IANA's), key material of the
    /// wrong length, a window larger than [`MAX_WINDOW`], and lifetimes of 0
    /// (an SA dead on arrival is a configuration mistake, not a policy).
    pub fn validate(&self) -> Result<(), SaError> {
        if self.spi <= 255 {
            return Err(SaError::ReservedSpi(self.spi));
        }
        let expected = self.aead.key_material_len();
        if self.key.len() != expected {
            return Err(SaError::KeyLength {
                aead: self.aead,
                expected,
                got: self.key.len(),
            });
        }
        if self.replay_window > MAX_WINDOW {
            return Err(SaError::WindowTooLarge(self.replay_window));
        }
        if self.lifetime_bytes == Some(0) {
            return Err(SaError::ZeroLifetime("bytes"));
        }
        if self.lifetime_packets == Some(0) {
            return Err(SaError::ZeroLifetime("packets"));
        }
        Ok(())
    }

    /// Validates and splits the key material into ring's key and the salt.
    fn keys(&self) -> Result<(LessSafeKey, [u8; SALT_LEN]), SaError> {
        self.validate()?;
        let (key, salt) = self.key.split_at(self.aead.key_len());
        let unbound =
            UnboundKey::new(self.aead.algorithm(), key).map_err(|_| SaError::KeyLength {
                aead: self.aead,
                expected: self.aead.key_material_len(),
                got: self.key.len(),
            })?;
        let mut s = [0u8; SALT_LEN];
        s.copy_from_slice(salt);
        Ok((LessSafeKey::new(unbound), s))
    }
}

/// Shows everything but the key material (only its length).
impl fmt::Debug for SaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaConfig")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("aead", &self.aead)
            .field("key", &format_args!("<{} bytes redacted>", self.key.len()))
            .field("esn", &self.esn)
            .field("replay_window", &self.replay_window)
            .field("lifetime_bytes", &self.lifetime_bytes)
            .field("lifetime_packets", &self.lifetime_packets)
            .finish()
    }
}

/// Why an SA could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaError {
    #[error("SPI {0} is reserved (RFC 4303 2.1: 0 and 1-255 are not for SAs)")]
    ReservedSpi(u32),
    #[error("{aead} needs {expected} bytes of key material (key || 4-byte salt), got {got}")]
    KeyLength {
        aead: Aead,
        expected: usize,
        got: usize,
    },
    #[error("replay window {0} exceeds the maximum of {MAX_WINDOW}")]
    WindowTooLarge(u32),
    #[error("a lifetime of 0 {0} would make the SA unusable")]
    ZeroLifetime(&'static str),
}

/// Why `seal` refused. The first two are final: the SA must be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SealError {
    #[error("sequence numbers exhausted: the SA must be replaced")]
    SeqExhausted,
    #[error("SA lifetime reached: the SA must be replaced")]
    LifetimeExpired,
    #[error("payload longer than AES-GCM can protect in one message")]
    TooLong,
}

impl SealError {
    pub const ALL: [SealError; 3] = [
        SealError::SeqExhausted,
        SealError::LifetimeExpired,
        SealError::TooLong,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// Stable snake_case name, for counters.
    pub const fn name(self) -> &'static str {
        match self {
            SealError::SeqExhausted => "seq_exhausted",
            SealError::LifetimeExpired => "lifetime_expired",
            SealError::TooLong => "too_long",
        }
    }
}

/// Why `open` dropped a packet. Only [`AuthFailed`](Self::AuthFailed) and
/// later reasons cost a decryption; only [`BadPadding`](Self::BadPadding)
/// and [`Dummy`](Self::Dummy) come from packets that authenticated (and so
/// did consume their sequence number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u8)]
pub enum EspDrop {
    #[error("shorter than the smallest ESP packet")]
    Truncated,
    #[error("SPI is not this SA's")]
    WrongSpi,
    #[error("SA lifetime reached")]
    LifetimeExpired,
    #[error("sequence number left of the replay window")]
    TooOld,
    #[error("sequence number already received")]
    Replayed,
    #[error("ICV check failed")]
    AuthFailed,
    #[error("padding length or content invalid")]
    BadPadding,
    #[error("dummy packet (next header 59)")]
    Dummy,
}

impl EspDrop {
    pub const ALL: [EspDrop; 8] = [
        EspDrop::Truncated,
        EspDrop::WrongSpi,
        EspDrop::LifetimeExpired,
        EspDrop::TooOld,
        EspDrop::Replayed,
        EspDrop::AuthFailed,
        EspDrop::BadPadding,
        EspDrop::Dummy,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// Stable snake_case name, for counters.
    pub const fn name(self) -> &'static str {
        match self {
            EspDrop::Truncated => "truncated",
            EspDrop::WrongSpi => "wrong_spi",
            EspDrop::LifetimeExpired => "lifetime_expired",
            EspDrop::TooOld => "too_old",
            EspDrop::Replayed => "replayed",
            EspDrop::AuthFailed => "auth_failed",
            EspDrop::BadPadding => "bad_padding",
            EspDrop::Dummy => "dummy",
        }
    }
}

impl From<ReplayError> for EspDrop {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Replayed => EspDrop::Replayed,
            ReplayError::TooOld => EspDrop::TooOld,
        }
    }
}

/// Counters of an outbound SA. `bytes` counts payload (plaintext) bytes,
/// the unit of `lifetime_bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundStats {
    pub packets: u64,
    pub bytes: u64,
    /// All refusals; [`failed`](Self::failed) splits them by reason.
    pub errors: u64,
    by_reason: [u64; SealError::COUNT],
}

impl OutboundStats {
    pub fn failed(&self, reason: SealError) -> u64 {
        self.by_reason[reason as usize]
    }
}

/// Counters of an inbound SA: packets and payload bytes delivered, and
/// every drop by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InboundStats {
    pub packets: u64,
    pub bytes: u64,
    drops: [u64; EspDrop::COUNT],
}

impl InboundStats {
    pub fn dropped(&self, reason: EspDrop) -> u64 {
        self.drops[reason as usize]
    }

    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Every reason with its count (zeros included), in [`EspDrop::ALL`]
    /// order, for exporting as `esp_drop_<name>` counters.
    pub fn drops(&self) -> impl Iterator<Item = (EspDrop, u64)> + '_ {
        EspDrop::ALL.iter().map(|&r| (r, self.drops[r as usize]))
    }
}

/// What `open` found in an authenticated packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// Protocol of the payload: 4 (IPv4) or 41 (IPv6) in tunnel mode, the
    /// transport protocol (17 for UDP) in transport mode.
    pub next_header: u8,
    /// Where the payload lies in the buffer given to `open`.
    pub payload: Range<usize>,
    /// The full (ESN-inferred) sequence number.
    pub seq: u64,
}

/// The SPI of an ESP packet (its first 4 bytes), for finding its SA; `None`
/// if the packet cannot even hold an ESP header.
#[inline]
pub fn spi_of(esp: &[u8]) -> Option<u32> {
    if esp.len() < ESP_HEADER_LEN {
        return None;
    }
    Some(u32::from_be_bytes([esp[0], esp[1], esp[2], esp[3]]))
}

#[inline]
const fn pad_len(plaintext_len: usize) -> usize {
    (PAD_ALIGN - (plaintext_len + ESP_TRAILER_LEN) % PAD_ALIGN) % PAD_ALIGN
}

/// Exact number of bytes `seal` adds to a payload of `plaintext_len` bytes.
/// The same for both AES-GCM key sizes; `aead` keeps callers right if a
/// transform with another IV or ICV size is added.
pub const fn esp_overhead(aead: Aead, plaintext_len: usize) -> usize {
    match aead {
        Aead::AesGcm128 | Aead::AesGcm256 => {
            ESP_HEADER_LEN + ESP_IV_LEN + pad_len(plaintext_len) + ESP_TRAILER_LEN + ESP_ICV_LEN
        }
    }
}

/// RFC 4106 section 4: the nonce is the SA's salt followed by the IV.
#[inline]
fn nonce(salt: &[u8; SALT_LEN], iv: &[u8]) -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    n[..SALT_LEN].copy_from_slice(salt);
    n[SALT_LEN..].copy_from_slice(iv);
    Nonce::assume_unique_for_key(n)
}

/// RFC 4106 section 5: SPI || seq, or SPI || seq_hi || seq_lo with ESN
/// (the high half never travels, it is authenticated here).
#[inline]
fn aad(spi: u32, seq: u64, esn: bool) -> ([u8; 12], usize) {
    let mut a = [0u8; 12];
    a[..4].copy_from_slice(&spi.to_be_bytes());
    if esn {
        a[4..8].copy_from_slice(&((seq >> 32) as u32).to_be_bytes());
        a[8..].copy_from_slice(&(seq as u32).to_be_bytes());
        (a, 12)
    } else {
        a[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        (a, 8)
    }
}

#[inline]
const fn seq_max(esn: bool) -> u64 {
    if esn {
        u64::MAX
    } else {
        u32::MAX as u64
    }
}

#[inline]
const fn soft(limit: u64) -> u64 {
    limit / 100 * SOFT_LIMIT_PERCENT + limit % 100 * SOFT_LIMIT_PERCENT / 100
}

fn over_soft(count: u64, limit: Option<u64>) -> bool {
    limit.is_some_and(|l| count >= soft(l))
}

/// The sending half of an SA.
///
/// Sequence numbers start at 1 and are the GCM IVs, so they must never
/// repeat under one key: `seal` fails with [`SealError::SeqExhausted`]
/// once 2^32-1 (2^64-1 with ESN) has been used, instead of wrapping. The
/// same holds across SA objects: never build two `OutboundSa`s from the
/// same key material (a restart with a static key would send seq 1 again
/// under the same nonce); each SA needs fresh keys, which is what IKE's
/// rekeying provides.
pub struct OutboundSa {
    spi: u32,
    aead: Aead,
    esn: bool,
    /// The key schedule, shared with the sealing worker that encrypts
    /// packets this SA numbered ([`reserve`](Self::reserve)).
    key: Arc<SealKey>,
    /// Last sequence number used (0: none yet).
    last_seq: u64,
    lifetime_bytes: Option<u64>,
    lifetime_packets: Option<u64>,
    stats: OutboundStats,
}

/// Shows the SPI and transform only: the key schedule stays private.
impl fmt::Debug for OutboundSa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundSa")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("aead", &self.aead)
            .finish_non_exhaustive()
    }
}

impl OutboundSa {
    pub fn new(cfg: SaConfig) -> Result<Self, SaError> {
        let (key, salt) = cfg.keys()?;
        tracing::debug!(
            spi = format_args!("{:#010x}", cfg.spi),
            aead = cfg.aead.name(),
            esn = cfg.esn,
            "outbound ESP SA installed"
        );
        Ok(Self {
            spi: cfg.spi,
            aead: cfg.aead,
            esn: cfg.esn,
            key: Arc::new(SealKey {
                spi: cfg.spi,
                aead: cfg.aead,
                esn: cfg.esn,
                key,
                salt,
            }),
            last_seq: 0,
            lifetime_bytes: cfg.lifetime_bytes,
            lifetime_packets: cfg.lifetime_packets,
            stats: OutboundStats::default(),
        })
    }

    /// For tests of exhaustion and rekeying only: an SA that has already
    /// used sequence numbers up to `last_sent`, so the next packet carries
    /// `last_sent + 1`. Starting high is harmless for nonce uniqueness;
    /// what is never harmless is two SAs with one key (see the type's docs).
    ///
    /// # Panics
    /// If `last_sent` is beyond the SA's sequence space.
    #[doc(hidden)]
    pub fn new_after_seq(cfg: SaConfig, last_sent: u64) -> Result<Self, SaError> {
        assert!(
            last_sent <= seq_max(cfg.esn),
            "last_sent beyond sequence space"
        );
        let mut sa = Self::new(cfg)?;
        sa.last_seq = last_sent;
        Ok(sa)
    }

    pub fn spi(&self) -> u32 {
        self.spi
    }

    pub fn aead(&self) -> Aead {
        self.aead
    }

    pub fn esn(&self) -> bool {
        self.esn
    }

    /// Last sequence number used (0 before the first packet).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn stats(&self) -> &OutboundStats {
        &self.stats
    }

    /// Whether a successor SA should be negotiated now: 90% of the
    /// sequence space or of a lifetime is used. Long before
    /// `seal` starts failing, so traffic moves without a gap.
    pub fn needs_rekey(&self) -> bool {
        self.last_seq >= soft(seq_max(self.esn))
            || over_soft(self.stats.packets, self.lifetime_packets)
            || over_soft(self.stats.bytes, self.lifetime_bytes)
    }

    /// Whether `seal` will refuse every packet from now on (sequence space
    /// or a lifetime used up); the caller should stop using the SA.
    pub fn is_expired(&self) -> bool {
        self.last_seq == seq_max(self.esn)
            || self
                .lifetime_packets
                .is_some_and(|l| self.stats.packets >= l)
            || self.lifetime_bytes.is_some_and(|l| self.stats.bytes >= l)
    }

    fn admit(&self, len: usize) -> Result<(), SealError> {
        if self.last_seq == seq_max(self.esn) {
            return Err(SealError::SeqExhausted);
        }
        if self
            .lifetime_packets
            .is_some_and(|l| self.stats.packets >= l)
        {
            return Err(SealError::LifetimeExpired);
        }
        // A packet is sealed only if the SA stays within its byte budget;
        // once the budget is used up, not even an empty one.
        if self.lifetime_bytes.is_some_and(|l| {
            self.stats.bytes >= l || self.stats.bytes.saturating_add(len as u64) > l
        }) {
            return Err(SealError::LifetimeExpired);
        }
        Ok(())
    }

    #[cold]
    fn fail(&mut self, e: SealError) -> SealError {
        if self.stats.by_reason[e as usize] == 0 {
            tracing::warn!(
                spi = format_args!("{:#010x}", self.spi),
                reason = e.name(),
                "outbound ESP SA refuses to seal"
            );
        }
        self.stats.errors += 1;
        self.stats.by_reason[e as usize] += 1;
        e
    }

    /// Builds the ESP packet for `plaintext` in `out`: SPI, sequence number,
    /// IV, ciphertext of plaintext || padding || pad length || next header,
    /// ICV. `out` is cleared first and its capacity reused, so a `Vec`
    /// kept per port stops allocating after the largest packet. The caller
    /// prepends the outer IP header (protocol [`IPPROTO_ESP`]); a caller that
    /// wants that header in the same buffer can seal into a scratch `Vec`
    /// and copy, or size its headroom with [`esp_overhead`].
    ///
    /// On error `out` is left empty and no sequence number is used.
    pub fn seal(
        &mut self,
        next_header: u8,
        plaintext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), SealError> {
        out.clear();
        if let Err(e) = self.admit(plaintext.len()) {
            return Err(self.fail(e));
        }
        let seq = self.last_seq + 1;
        let iv = seq.to_be_bytes();
        let pad = pad_len(plaintext.len());
        out.reserve(esp_overhead(self.aead, plaintext.len()) + plaintext.len());
        let mut head = [0u8; ESP_HEADER_LEN + ESP_IV_LEN];
        head[..4].copy_from_slice(&self.spi.to_be_bytes());
        head[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        head[8..].copy_from_slice(&iv);
        out.extend_from_slice(&head);
        out.extend_from_slice(plaintext);
        let mut trailer = [0u8; PAD_ALIGN - 1 + ESP_TRAILER_LEN];
        trailer[..pad].copy_from_slice(&PAD_PATTERN[..pad]);
        trailer[pad] = pad as u8;
        trailer[pad + 1] = next_header;
        out.extend_from_slice(&trailer[..pad + ESP_TRAILER_LEN]);
        let (a, alen) = aad(self.spi, seq, self.esn);
        let tag = match self.key.key.seal_in_place_separate_tag(
            nonce(&self.key.salt, &iv),
            Aad::from(&a[..alen]),
            &mut out[ESP_HEADER_LEN + ESP_IV_LEN..],
        ) {
            Ok(tag) => tag,
            Err(_) => {
                out.clear();
                return Err(self.fail(SealError::TooLong));
            }
        };
        out.extend_from_slice(tag.as_ref());
        self.last_seq = seq;
        self.stats.packets += 1;
        self.stats.bytes += plaintext.len() as u64;
        Ok(())
    }

    /// Bytes of buffer [`seal_in_place`](Self::seal_in_place) needs for a
    /// payload of `plaintext_len` bytes: the whole ESP packet.
    pub const fn sealed_len(&self, plaintext_len: usize) -> usize {
        plaintext_len + esp_overhead(self.aead, plaintext_len)
    }

    /// [`seal`](Self::seal) without copying the payload: the caller has put
    /// the plaintext at `esp[ESP_HEADER_LEN + ESP_IV_LEN..][..plaintext_len]`
    /// (where it lies in the packet being built, e.g. behind room left for
    /// the outer headers), and the ESP packet is built around it in the same
    /// buffer: header and IV in front, padding, trailer and ICV behind,
    /// the payload encrypted where it lies. Returns the ESP packet's length,
    /// `esp[..n]`; the bytes are those `seal` would give for the same
    /// sequence number.
    ///
    /// `esp` must hold at least [`sealed_len`](Self::sealed_len) bytes;
    /// a shorter one is refused as [`SealError::TooLong`] (nothing written,
    /// no sequence number used), as is any refusal of `seal`.
    pub fn seal_in_place(
        &mut self,
        next_header: u8,
        esp: &mut [u8],
        plaintext_len: usize,
    ) -> Result<usize, SealError> {
        let seq = self.number(esp.len(), plaintext_len)?;
        let r = self.key.seal_at(seq, next_header, esp, plaintext_len);
        r.map_err(|e| self.fail(e))
    }

    /// Every check, the next sequence number taken and counted as sent:
    /// the numbering [`seal_in_place`](Self::seal_in_place) and
    /// [`reserve`](Self::reserve) share (the former without a ticket, so
    /// the one-thread path does not touch the key's reference count).
    fn number(&mut self, esp_room: usize, plaintext_len: usize) -> Result<u64, SealError> {
        if let Err(e) = self.admit(plaintext_len) {
            return Err(self.fail(e));
        }
        if esp_room < self.sealed_len(plaintext_len) {
            return Err(self.fail(SealError::TooLong));
        }
        let seq = self.last_seq + 1;
        self.last_seq = seq;
        self.stats.packets += 1;
        self.stats.bytes += plaintext_len as u64;
        Ok(seq)
    }

    /// The numbering half of [`seal_in_place`](Self::seal_in_place): every
    /// check, the next sequence number taken and counted as sent, nothing
    /// written. The packet is sealed with the returned ticket
    /// ([`Reserved::seal_at`]), by this thread or a worker it hands the
    /// ticket to. Numbers are only ever handed out here, by the SA's one
    /// owner, and a ticket is move-only and consumed by sealing, so safe
    /// code cannot use a nonce twice, whichever threads seal. `esp_room` is
    /// the buffer's length (at least [`sealed_len`](Self::sealed_len)
    /// bytes, or `TooLong`).
    ///
    /// A ticket seals once; a second use does not compile:
    /// ```compile_fail,E0382
    /// # use nicflow_ipsec::esp::{Aead, OutboundSa, SaConfig};
    /// let mut sa = OutboundSa::new(SaConfig::new(1, Aead::AesGcm128, vec![7; 20])).unwrap();
    /// let mut a = vec![0u8; sa.sealed_len(10)];
    /// let mut b = a.clone();
    /// let t = sa.reserve(a.len(), 10).unwrap();
    /// t.seal_at(4, &mut a, 10).unwrap();
    /// t.seal_at(4, &mut b, 10).unwrap(); // the same nonce again: refused
    /// ```
    /// nor can it be copied:
    /// ```compile_fail,E0599
    /// # use nicflow_ipsec::esp::{Aead, OutboundSa, SaConfig};
    /// let mut sa = OutboundSa::new(SaConfig::new(1, Aead::AesGcm128, vec![7; 20])).unwrap();
    /// let t = sa.reserve(100, 10).unwrap();
    /// let u = t.clone();
    /// ```
    pub fn reserve(
        &mut self,
        esp_room: usize,
        plaintext_len: usize,
    ) -> Result<Reserved, SealError> {
        let seq = self.number(esp_room, plaintext_len)?;
        Ok(Reserved {
            seq,
            key: Arc::clone(&self.key),
        })
    }
}

/// A sequence number [`OutboundSa::reserve`] handed out, with the key of
/// the SA that numbered it (after a rekey the packet keeps its old key):
/// the right to seal one packet. Neither `Clone` nor `Copy`, and
/// [`seal_at`](Self::seal_at) consumes it, so one number (one GCM nonce)
/// seals at most one packet. `Send`: a worker thread may seal it.
#[derive(Debug)]
#[must_use = "a reserved number is counted as sent: seal the packet"]
pub struct Reserved {
    seq: u64,
    key: Arc<SealKey>,
}

impl Reserved {
    /// The sequence number reserved.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Seals the ESP packet around the plaintext at
    /// `esp[ESP_HEADER_LEN + ESP_IV_LEN..][..plaintext_len]`, as
    /// [`OutboundSa::seal_in_place`] does, with this ticket's number and
    /// key; returns its length. `TooLong` if `esp` is too short (nothing
    /// written) or AES-GCM refuses the length; either way the number is
    /// spent.
    pub fn seal_at(
        self,
        next_header: u8,
        esp: &mut [u8],
        plaintext_len: usize,
    ) -> Result<usize, SealError> {
        self.key.seal_at(self.seq, next_header, esp, plaintext_len)
    }
}

/// An outbound SA's key schedule, salt, SPI and ESN flag: everything
/// sealing a packet needs once its sequence number is known
/// ([`OutboundSa::reserve`]). Immutable and `Sync`, so a second thread can
/// seal packets of the same SA (through their [`Reserved`] tickets) while
/// the SA's owner numbers the next ones. Private to this module: sealing
/// with a number goes through a ticket, never a bare `u64`.
struct SealKey {
    spi: u32,
    aead: Aead,
    esn: bool,
    key: LessSafeKey,
    salt: [u8; SALT_LEN],
}

/// Shows the SPI only: the key schedule stays private.
impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealKey")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .finish_non_exhaustive()
    }
}

impl SealKey {
    /// Seals the ESP packet with sequence number `seq` around the
    /// plaintext at `esp[ESP_HEADER_LEN + ESP_IV_LEN..][..plaintext_len]`,
    /// as [`OutboundSa::seal_in_place`] does; returns its length. `seq`
    /// must have been numbered by this key's SA and be used once: only
    /// `seal_in_place` (right after numbering) and [`Reserved::seal_at`]
    /// (consuming its ticket) call it. `TooLong` if `esp` is too short
    /// (nothing written) or AES-GCM refuses the length.
    fn seal_at(
        &self,
        seq: u64,
        next_header: u8,
        esp: &mut [u8],
        plaintext_len: usize,
    ) -> Result<usize, SealError> {
        let total = plaintext_len + esp_overhead(self.aead, plaintext_len);
        if esp.len() < total {
            return Err(SealError::TooLong);
        }
        let iv = seq.to_be_bytes();
        let pad = pad_len(plaintext_len);
        esp[..4].copy_from_slice(&self.spi.to_be_bytes());
        esp[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        esp[8..16].copy_from_slice(&iv);
        let start = ESP_HEADER_LEN + ESP_IV_LEN;
        let t = start + plaintext_len;
        esp[t..t + pad].copy_from_slice(&PAD_PATTERN[..pad]);
        esp[t + pad] = pad as u8;
        esp[t + pad + 1] = next_header;
        let body_end = t + pad + ESP_TRAILER_LEN;
        let (a, alen) = aad(self.spi, seq, self.esn);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                nonce(&self.salt, &iv),
                Aad::from(&a[..alen]),
                &mut esp[start..body_end],
            )
            .map_err(|_| SealError::TooLong)?;
        esp[body_end..body_end + ESP_ICV_LEN].copy_from_slice(tag.as_ref());
        debug_assert_eq!(body_end + ESP_ICV_LEN, total);
        Ok(total)
    }
}

/// The receiving half of an SA, with its anti-replay window.
pub struct InboundSa {
    spi: u32,
    aead: Aead,
    esn: bool,
    key: LessSafeKey,
    salt: [u8; SALT_LEN],
    window: ReplayWindow,
    lifetime_bytes: Option<u64>,
    lifetime_packets: Option<u64>,
    stats: InboundStats,
}

/// Shows the SPI and transform only: the key schedule stays private.
impl fmt::Debug for InboundSa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboundSa")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("aead", &self.aead)
            .finish_non_exhaustive()
    }
}

impl InboundSa {
    pub fn new(cfg: SaConfig) -> Result<Self, SaError> {
        let (key, salt) = cfg.keys()?;
        if cfg.replay_window == 0 {
            tracing::warn!(
                spi = format_args!("{:#010x}", cfg.spi),
                "inbound ESP SA without anti-replay: duplicates will be delivered"
            );
        }
        tracing::debug!(
            spi = format_args!("{:#010x}", cfg.spi),
            aead = cfg.aead.name(),
            esn = cfg.esn,
            window = cfg.replay_window,
            "inbound ESP SA installed"
        );
        Ok(Self {
            spi: cfg.spi,
            aead: cfg.aead,
            esn: cfg.esn,
            key,
            salt,
            window: ReplayWindow::new(cfg.replay_window),
            lifetime_bytes: cfg.lifetime_bytes,
            lifetime_packets: cfg.lifetime_packets,
            stats: InboundStats::default(),
        })
    }

    pub fn spi(&self) -> u32 {
        self.spi
    }

    pub fn aead(&self) -> Aead {
        self.aead
    }

    pub fn esn(&self) -> bool {
        self.esn
    }

    /// Highest authenticated sequence number so far (0: none).
    pub fn highest_seq(&self) -> u64 {
        self.window.top()
    }

    pub fn stats(&self) -> &InboundStats {
        &self.stats
    }

    /// Whether 90% of a lifetime, or of the 32-bit sequence space without
    /// ESN, has been received: the peer should be rekeying by now.
    pub fn needs_rekey(&self) -> bool {
        self.window.top() >= soft(seq_max(self.esn))
            || over_soft(self.stats.packets, self.lifetime_packets)
            || over_soft(self.stats.bytes, self.lifetime_bytes)
    }

    /// Whether `open` will refuse every packet from now on (a lifetime
    /// is used up).
    pub fn is_expired(&self) -> bool {
        self.lifetime_packets
            .is_some_and(|l| self.stats.packets >= l)
            || self.lifetime_bytes.is_some_and(|l| self.stats.bytes >= l)
    }

    /// Authenticates and decrypts, in place, the ESP packet `esp` (starting
    /// at its SPI, ending with its ICV: the IP payload, not the IP header).
    /// On success the plaintext payload is `esp[opened.payload]`.
    ///
    /// Padding content is checked, as RFC 4303 2.4 says a receiver SHOULD
    /// for the default 1, 2, 3, ... scheme. With GCM the ICV already
    /// vouches for the bytes, so a mismatch means a broken peer rather than
    /// an attack, and [`EspDrop::BadPadding`] makes it visible instead of
    /// delivering a payload whose length may be wrong. Such a packet, like
    /// a dummy one, authenticated and so consumed its sequence number.
    /// Ciphertext not ending on a 4-byte boundary is accepted: alignment is
    /// the sender's duty and checking it protects nothing.
    ///
    /// On [`EspDrop::AuthFailed`] the ciphertext has been zeroed; on every
    /// error the buffer must not be forwarded.
    pub fn open(&mut self, esp: &mut [u8]) -> Result<Opened, EspDrop> {
        match self.open_inner(esp) {
            Ok(o) => {
                self.stats.packets += 1;
                self.stats.bytes += o.payload.len() as u64;
                Ok(o)
            }
            Err(d) => {
                self.stats.drops[d as usize] += 1;
                tracing::trace!(
                    spi = format_args!("{:#010x}", self.spi),
                    reason = d.name(),
                    "ESP packet dropped"
                );
                Err(d)
            }
        }
    }

    #[inline]
    fn open_inner(&mut self, esp: &mut [u8]) -> Result<Opened, EspDrop> {
        let len = esp.len();
        if len < ESP_MIN_LEN {
            return Err(EspDrop::Truncated);
        }
        let spi = u32::from_be_bytes([esp[0], esp[1], esp[2], esp[3]]);
        if spi != self.spi {
            return Err(EspDrop::WrongSpi);
        }
        if self.is_expired() {
            return Err(EspDrop::LifetimeExpired);
        }
        let seq_lo = u32::from_be_bytes([esp[4], esp[5], esp[6], esp[7]]);
        let seq = if self.esn {
            self.window.infer_seq(seq_lo).ok_or(EspDrop::TooOld)?
        } else {
            u64::from(seq_lo)
        };
        self.window.check(seq)?;

        let (a, alen) = aad(spi, seq, self.esn);
        let n = nonce(
            &self.salt,
            &esp[ESP_HEADER_LEN..ESP_HEADER_LEN + ESP_IV_LEN],
        );
        let (body, icv) = esp.split_at_mut(len - ESP_ICV_LEN);
        let tag = Tag::try_from(&icv[..]).map_err(|_| EspDrop::Truncated)?;
        let start = ESP_HEADER_LEN + ESP_IV_LEN;
        let plain = self
            .key
            .open_in_place_separate_tag(n, Aad::from(&a[..alen]), tag, &mut body[start..], 0..)
            .map_err(|_| EspDrop::AuthFailed)?;
        // Authenticated: from here on the packet is the peer's, and its
        // sequence number is spent whatever its content.
        self.window.update(seq)?;

        let plen = plain.len();
        let next_header = plain[plen - 1];
        let pad = usize::from(plain[plen - 2]);
        let payload_len = plen
            .checked_sub(ESP_TRAILER_LEN + pad)
            .ok_or(EspDrop::BadPadding)?;
        if plain[payload_len..plen - ESP_TRAILER_LEN] != PAD_PATTERN[..pad] {
            return Err(EspDrop::BadPadding);
        }
        if next_header == NEXT_HEADER_DUMMY {
            return Err(EspDrop::Dummy);
        }
        Ok(Opened {
            next_header,
            payload: start..start + payload_len,
            seq,
        })
    }
}
