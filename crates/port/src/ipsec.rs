//! ESP between a tunnel port and its underlay (the Open vSwitch IPsec
//! model: the tunnel's own UDP packets are what ESP protects).
//!
//! Place in a frame's path. Out: a tunnel port with `ipsec=...`
//! encapsulates a frame (outer Ethernet, IPv4, UDP, VXLAN/Geneve) as any
//! tunnel port does, then [`UnderlayEsp::encrypt`] turns the outer IP
//! payload into an ESP packet of the endpoint's outbound SA (transport
//! mode; tunnel mode wraps the whole outer IP packet, for peers such as
//! strongSwan's kernel-libipsec that only do tunnel mode), optionally in
//! UDP 4500 (RFC 3948). In: the underlay hands every ESP packet (IP
//! protocol 50, or UDP 4500 without the non-ESP marker) to
//! [`UnderlayEsp::decrypt`] before it looks for a tunnel header at all;
//! the SPI names the inbound SA, whose anti-replay window and ICV decide
//! before anything is rewritten, and only a packet that authenticates
//! comes back as the plain tunnel packet it carried. A protected endpoint
//! takes nothing else: a plaintext tunnel packet from its remote is
//! dropped and counted, so ESP cannot be bypassed by sending in clear.
//!
//! Keys come from the port's options (`ipsec=manual`) or from an IKEv2
//! session with the remote (`ipsec=ike psk=...`, `nicflow_ipsec::ike`),
//! which the underlay drives: it hands IKE's UDP 500/4500 messages to the
//! session, sends what the session wants sent, and installs the child SAs
//! it yields (a rekeyed SA's old inbound half stays until IKE deletes it).
//! Keys and PSKs are never printed (`show` masks them, `Debug` hides
//! them).
//!
//! The kernel engines cannot run AES-GCM, so a tunnel port with IPsec
//! stays in the userspace datapath (the offload manager says
//! `tunnel:ipsec`).

use nicflow_api::proto::PortOptions;
use nicflow_ipsec::esp::{self, Aead, InboundSa, OutboundSa, SaConfig, SaError};
use nicflow_ipsec::ike::{
    ChildKeys, ChildMode, ChildTs, Datagram, IkeConfig, IkeEvent, IkeSession,
};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::checksum;
use nicflow_packet::udp_gso;
use std::collections::{BTreeMap, HashMap};

/// A hash map with foldhash's fast (randomly seeded) hasher, for maps
/// looked up per packet.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// IP protocol number of ESP.
pub const IPPROTO_ESP: u8 = 50;
/// RFC 3948: ESP (and IKE with the non-ESP marker) in UDP on this port.
pub const NAT_T_PORT: u16 = 4500;
/// IKE's own port.
pub const IKE_PORT: u16 = 500;

/// The port options this module reads (`add-port ... ipsec=manual ...`).
pub const OPTIONS: &[&str] = &[
    "ipsec",
    "esp_spi_out",
    "esp_key_out",
    "esp_spi_in",
    "esp_key_in",
    "esp_aead",
    "esp_encap",
    "esp_esn",
    "esp_replay_window",
    "esp_mode",
    "esp_gso",
    "esp_seal_workers",
    "psk",
    "ike_local_id",
    "ike_remote_id",
];

/// Options of `ipsec=manual` only.
const MANUAL_OPTIONS: [&str; 4] = ["esp_spi_out", "esp_key_out", "esp_spi_in", "esp_key_in"];
/// Options of `ipsec=ike` only.
const IKE_OPTIONS: [&str; 3] = ["psk", "ike_local_id", "ike_remote_id"];

/// The options that hold key material (the list lives with the schema,
/// which masks them).
pub use nicflow_api::proto::SECRET_OPTIONS;

/// Key material that never reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EspMode {
    /// ESP protects the outer IP packet's payload (the tunnel's UDP).
    Transport,
    /// ESP carries the whole outer IP packet inside a new IP header.
    Tunnel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AeadKind {
    AesGcm128,
    AesGcm256,
}

impl AeadKind {
    fn aead(self) -> Aead {
        match self {
            AeadKind::AesGcm128 => Aead::AesGcm128,
            AeadKind::AesGcm256 => Aead::AesGcm256,
        }
    }

    /// Key material: the AES key and the 4-byte salt.
    fn key_len(self) -> usize {
        match self {
            AeadKind::AesGcm128 => 16 + 4,
            AeadKind::AesGcm256 => 32 + 4,
        }
    }
}

/// Hand-configured SAs (`ipsec=manual`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManualKeys {
    pub spi_out: u32,
    pub key_out: Secret,
    pub spi_in: u32,
    pub key_in: Secret,
}

/// IKEv2 with a pre-shared key (`ipsec=ike`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IkeKeying {
    pub psk: Secret,
    pub local_id: Option<String>,
    pub remote_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keying {
    Manual(ManualKeys),
    Ike(IkeKeying),
}

/// A tunnel port's IPsec settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpsecConfig {
    pub keying: Keying,
    pub aead: AeadKind,
    /// ESP in UDP 4500 (RFC 3948) rather than IP protocol 50 (manual
    /// keys; IKE negotiates it: NAT detected, or forced by the peer).
    pub encap_udp: bool,
    pub esn: bool,
    pub replay_window: u32,
    pub mode: EspMode,
    /// `esp_gso` (default on): ESP-in-UDP packets of one batch to the
    /// peer go to the underlay glued into UDP super-frames
    /// (`nicflow_packet::udp_gso`) when the underlay port takes offloads.
    pub gso: bool,
    /// `esp_seal_workers` (1 or 2, default [`SEAL_WORKERS_DEFAULT`]):
    /// with 2, the AES-GCM of the UDP super-frames a transmit batch seals
    /// is shared between the daemon's thread and a worker thread
    /// ([`crate::sealer`]); the daemon's thread still numbers every packet.
    pub seal_workers: u8,
}

/// Threads that encrypt a batch's ESP packets by default
/// (`esp_seal_workers`). One: in the 2026-12-05 sitting
/// (`docs/results/ipsec.md`, branch `espworker`) two gave no more
/// throughput on this two-CPU lab (0.96-1.01x) for 0.03 more machine CPU
/// s/Gbit: the second CPU is not free while the tunnel runs (the opening
/// daemon and the TCP endpoints use it).
pub const SEAL_WORKERS_DEFAULT: u8 = 1;

/// Why IPsec could not be set up on a tunnel port. Each variant names the
/// option, file or peering that failed and carries the cause; no message
/// ever holds a key's value (options with secrets say only what is wrong).
#[derive(Debug, thiserror::Error)]
pub enum IpsecError {
    /// An IPsec option without `ipsec=manual|ike`.
    #[error("option {option} needs ipsec=manual or ipsec=ike")]
    NeedsKeying { option: String },
    /// An option of the other keying (`esp_key_in` with `ipsec=ike`...).
    #[error("option {option} does not go with ipsec={keying}")]
    WrongKeying { option: String, keying: String },
    /// A required option is missing.
    #[error("option {option} is required with ipsec={keying}")]
    Missing {
        option: &'static str,
        keying: String,
    },
    /// An option that is not a secret has a value out of its range.
    #[error("option {option}={value}: {expected}")]
    BadValue {
        option: String,
        value: String,
        expected: String,
    },
    /// A secret (key, PSK) is malformed; its value is not repeated.
    #[error("option {option}: {reason}")]
    BadSecret {
        option: &'static str,
        reason: String,
    },
    /// The ESP library refused the SA the options describe.
    #[error("{options}: {source}")]
    Sa {
        options: &'static str,
        #[source]
        source: SaError,
    },
    /// Building the SA at add time failed (`dir`: `out` or `in`).
    #[error("esp {dir}: {source}")]
    SaSetup {
        dir: &'static str,
        #[source]
        source: SaError,
    },
    /// The reservation file of a manual key's sequence numbers could not
    /// be read or written.
    #[error("{}: {source}", path.display())]
    SeqFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The reservation file holds something else than a number.
    #[error("{}: not a sequence number", path.display())]
    SeqFileCorrupt { path: PathBuf },
    /// The sequence numbers of a manual key cannot be kept across
    /// restarts, so the SA is refused (they are AES-GCM nonces).
    #[error(
        "cannot keep the ESP sequence numbers of a manual key ({source}): \
         they are AES-GCM nonces and must never restart"
    )]
    SeqNotKept {
        #[source]
        source: Box<IpsecError>,
    },
    /// Another tunnel port of the underlay already protects this pair.
    #[error(
        "another tunnel port on this underlay already protects {local} <-> {remote} \
         (one IPsec peering per pair of addresses)"
    )]
    PeeringTaken { local: Ipv4Addr, remote: Ipv4Addr },
    /// Another tunnel port of the underlay receives with this SPI.
    #[error("esp_spi_in={spi:#x}: another tunnel port on this underlay receives with it")]
    SpiInUse { spi: u32 },
}

fn bad_value(option: &str, value: &str, expected: impl Into<String>) -> IpsecError {
    IpsecError::BadValue {
        option: option.to_string(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

fn parse_spi(k: &str, v: &str) -> Result<u32, IpsecError> {
    let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => v.parse::<u32>(),
    }
    .map_err(|_| bad_value(k, v, "not a 32-bit number"))?;
    if n < 256 {
        return Err(bad_value(k, v, "SPIs 0-255 are reserved (RFC 4303 2.1)"));
    }
    Ok(n)
}

fn parse_key(k: &'static str, v: &str, aead: AeadKind) -> Result<Secret, IpsecError> {
    // The value is never echoed: it is a key.
    let h = v
        .strip_prefix("0x")
        .or_else(|| v.strip_prefix("0X"))
        .unwrap_or(v);
    if !h.len().is_multiple_of(2) || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(IpsecError::BadSecret {
            option: k,
            reason: "expected hex digits (key || 4-byte salt)".into(),
        });
    }
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap_or(0))
        .collect();
    if bytes.len() != aead.key_len() {
        return Err(IpsecError::BadSecret {
            option: k,
            reason: format!(
                "{} bytes, {:?} needs {} (key || 4-byte salt)",
                bytes.len(),
                aead,
                aead.key_len()
            ),
        });
    }
    Ok(Secret(bytes))
}

impl IpsecConfig {
    /// The IPsec part of a tunnel port's options: `None` without `ipsec`.
    /// Errors name the option (never a key's value).
    pub fn from_options(options: &PortOptions) -> Result<Option<IpsecConfig>, IpsecError> {
        let Some(keying) = options.get("ipsec") else {
            if let Some(k) = options.keys().find(|k| OPTIONS.contains(&k.as_str())) {
                return Err(IpsecError::NeedsKeying { option: k.clone() });
            }
            return Ok(None);
        };
        let ike = match keying.as_str() {
            "manual" => false,
            "ike" => true,
            v => return Err(bad_value("ipsec", v, "expected manual or ike")),
        };
        let (needs, other) = if ike {
            (&["psk"][..], &MANUAL_OPTIONS[..])
        } else {
            (&MANUAL_OPTIONS[..], &IKE_OPTIONS[..])
        };
        if let Some(k) = other.iter().find(|k| options.contains_key(k)) {
            return Err(IpsecError::WrongKeying {
                option: k.to_string(),
                keying: keying.clone(),
            });
        }
        for k in needs {
            if !options.contains_key(k) {
                return Err(IpsecError::Missing {
                    option: k,
                    keying: keying.clone(),
                });
            }
        }
        let get = |k: &str| options.get(k).map(String::as_str).unwrap_or_default();
        let secret = |k: &str| options.secret(k).map(|s| s.expose()).unwrap_or_default();
        let aead = match options.get("esp_aead").map(String::as_str) {
            None | Some("aes-gcm-128") => AeadKind::AesGcm128,
            Some("aes-gcm-256") => AeadKind::AesGcm256,
            Some(v) => return Err(bad_value("esp_aead", v, "aes-gcm-128 or aes-gcm-256")),
        };
        let flag = |k: &str| match options.get(k).map(String::as_str) {
            None | Some("false" | "no" | "0") => Ok(false),
            Some("true" | "yes" | "1") => Ok(true),
            Some(v) => Err(bad_value(k, v, "expected true or false")),
        };
        let encap_udp = match options.get("esp_encap").map(String::as_str) {
            None | Some("none") => false,
            Some("udp") => true,
            Some(v) => return Err(bad_value("esp_encap", v, "none or udp")),
        };
        let mode = match options.get("esp_mode").map(String::as_str) {
            None | Some("transport") => EspMode::Transport,
            Some("tunnel") => EspMode::Tunnel,
            Some(v) => return Err(bad_value("esp_mode", v, "transport or tunnel")),
        };
        let replay_window = match options.get("esp_replay_window") {
            None => 64,
            Some(v) => match v.parse::<u32>() {
                Ok(n) if n <= 4096 => n,
                _ => {
                    return Err(bad_value(
                        "esp_replay_window",
                        v,
                        "a window of 0..=4096 packets",
                    ))
                }
            },
        };
        let keying = if ike {
            let psk = secret("psk");
            if psk.len() < 8 {
                return Err(IpsecError::BadSecret {
                    option: "psk",
                    reason: "at least 8 characters".into(),
                });
            }
            Keying::Ike(IkeKeying {
                psk: Secret(psk.as_bytes().to_vec()),
                local_id: options.get("ike_local_id").cloned(),
                remote_id: options.get("ike_remote_id").cloned(),
            })
        } else {
            Keying::Manual(ManualKeys {
                spi_out: parse_spi("esp_spi_out", get("esp_spi_out"))?,
                key_out: parse_key("esp_key_out", secret("esp_key_out"), aead)?,
                spi_in: parse_spi("esp_spi_in", get("esp_spi_in"))?,
                key_in: parse_key("esp_key_in", secret("esp_key_in"), aead)?,
            })
        };
        let cfg = IpsecConfig {
            keying,
            aead,
            encap_udp,
            esn: flag("esp_esn")?,
            replay_window,
            mode,
            gso: options.get("esp_gso").is_none() || flag("esp_gso")?,
            seal_workers: match options.get("esp_seal_workers").map(String::as_str) {
                None => SEAL_WORKERS_DEFAULT,
                Some("1") => 1,
                Some("2") => 2,
                Some(v) => return Err(bad_value("esp_seal_workers", v, "1 or 2")),
            },
        };
        // The library's own checks, so a port is refused at add-port
        // rather than when its first frame goes out.
        if let Keying::Manual(m) = &cfg.keying {
            cfg.sa_config(m.spi_out, &m.key_out.0)
                .validate()
                .map_err(|source| IpsecError::Sa {
                    options: "esp_spi_out/esp_key_out",
                    source,
                })?;
            cfg.sa_config(m.spi_in, &m.key_in.0)
                .validate()
                .map_err(|source| IpsecError::Sa {
                    options: "esp_spi_in/esp_key_in",
                    source,
                })?;
        }
        Ok(Some(cfg))
    }

    fn sa_config(&self, spi: u32, key: &[u8]) -> SaConfig {
        SaConfig {
            spi,
            aead: self.aead.aead(),
            key: key.to_vec(),
            esn: self.esn,
            replay_window: self.replay_window,
            lifetime_bytes: None,
            lifetime_packets: None,
        }
    }

    /// What IKE is asked to negotiate for this port.
    fn ike_config(&self, k: &IkeKeying, local: Ipv4Addr, remote: Ipv4Addr) -> IkeConfig {
        let mut c = IkeConfig::new(local, remote, k.psk.0.clone());
        c.local_id = k.local_id.clone();
        c.remote_id = k.remote_id.clone();
        c.esp_aead_key_len = self.aead.key_len() - 4;
        c.esn = self.esn;
        c.child_ts = match self.mode {
            EspMode::Transport => ChildTs::udp_transport(),
            EspMode::Tunnel => ChildTs::host_tunnel(),
        };
        c
    }

    /// Bytes ESP adds to the outer IP packet at most: the inner MTU of the
    /// tunnel shrinks by this much.
    pub fn overhead(&self) -> usize {
        // IKE may decide on UDP encapsulation: count it.
        let udp = if self.encap_udp || matches!(self.keying, Keying::Ike(_)) {
            8
        } else {
            0
        };
        let ip = match self.mode {
            EspMode::Transport => 0,
            EspMode::Tunnel => 20,
        };
        esp::ESP_OVERHEAD_MAX + udp + ip
    }
}

/// One protected endpoint's SAs.
struct EspEndpoint {
    cfg: IpsecConfig,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    /// The SA frames go out with (IKE: none until a child SA is up).
    out: Option<OutboundSa>,
    /// A rekey we answered: its new outbound SA, held back until the
    /// initiator deletes the old child SA, a packet opens on the new
    /// inbound SA, or the deadline (see [`IkeEvent::ChildSaRekeyed`]).
    next_out: Option<(OutboundSa, Instant)>,
    /// How ESP travels now: the option (manual) or IKE's decision.
    encap_udp: bool,
    mode: EspMode,
    /// IKE keying: the session and its reconnection state.
    ike: Option<IkeState>,
    /// Manual keys: where the sequence reservation is kept, and the
    /// sequence number it reaches (the SA may send up to it).
    seq_file: Option<PathBuf>,
    reserved: u64,
}

/// The longest a rekey we answered keeps sending on the old outbound SA
/// when neither the initiator's Delete of the old child nor a packet on
/// the new inbound SA comes (the initiator has surely installed the new
/// SAs by then, or the rekey failed and its old SA still works).
const REKEY_SWITCH_MAX: Duration = Duration::from_secs(2);

/// Sequence numbers reserved per write of the state file: a restart skips
/// at most this many, a busy SA writes the file once per this many packets.
const SEQ_RESERVE: u64 = 1 << 20;

thread_local! {
    static STATE_DIR: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// Where manually keyed SAs keep their sequence reservations (the daemon
/// sets it next to its configuration file). With AES-GCM the sequence
/// number is the nonce: a manual key that started again at 1 after a
/// restart would reuse nonces and give the key away, so a manual SA only
/// sends sequence numbers it first wrote down as used.
pub fn set_state_dir(dir: Option<PathBuf>) {
    STATE_DIR.with(|d| *d.borrow_mut() = dir);
}

fn state_dir() -> PathBuf {
    STATE_DIR
        .with(|d| d.borrow().clone())
        .unwrap_or_else(|| PathBuf::from("/var/lib/nicflow/ipsec-state"))
}

/// The reservation file of an outbound manual SA: by addresses, SPI and a
/// fingerprint of the key (a new key starts from 1 again, safely).
fn seq_file(m: &ManualKeys, local: Ipv4Addr, remote: Ipv4Addr) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.key_out.0.hash(&mut h);
    state_dir().join(format!(
        "esp-{local}-{remote}-{:08x}-{:016x}.seq",
        m.spi_out,
        h.finish()
    ))
}

/// First wait before reconnecting a failed IKE peering; doubles up to
/// [`IKE_RETRY_MAX`].
const IKE_RETRY_MIN: Duration = Duration::from_secs(2);
const IKE_RETRY_MAX: Duration = Duration::from_secs(60);

struct IkeState {
    session: IkeSession,
    /// Reconnect at this time (after a failure or the SA went down).
    retry_at: Option<Instant>,
    backoff: Duration,
    /// The current child SA's inbound SPI (rekeyed when its outbound SA
    /// nears a limit).
    child_in: Option<u32>,
    rekey_asked: bool,
}

fn read_seq(path: &Path) -> Result<u64, IpsecError> {
    match std::fs::read_to_string(path) {
        Ok(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| IpsecError::SeqFileCorrupt {
                path: path.to_path_buf(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(source) => Err(IpsecError::SeqFile {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Write `seq` durably (temporary file, fsync, rename), owner-only: file
/// 0600 in a 0700 directory (`state::write_private`). The name carries a
/// fingerprint of the key.
fn write_seq(path: &Path, seq: u64) -> Result<(), IpsecError> {
    crate::state::write_private(path, format!("{seq}\n").as_bytes()).map_err(|source| {
        IpsecError::SeqFile {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Counters of an underlay's ESP (shown with each of its tunnel ports).
#[derive(Clone, Debug, Default)]
pub struct EspCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Inbound drops by reason (`unknown_spi`, `malformed`, `plaintext`,
    /// `sa_mismatch` and the SA's own: `replayed`, `auth_failed`, ...).
    pub rx_drops: BTreeMap<&'static str, u64>,
    /// Outbound drops by reason (`seq_exhausted`, `lifetime_expired`).
    pub tx_drops: BTreeMap<&'static str, u64>,
    /// IKE: SAs established, child SAs installed, rekeys, failures.
    pub ike_up: u64,
    pub ike_child_sas: u64,
    pub ike_rekeys: u64,
    pub ike_failures: u64,
    pub ike_rx: u64,
    pub ike_tx: u64,
    /// Of `rx_packets`, those opened where they lay in a received UDP
    /// super-frame ([`UnderlayEsp::open_in_frame`]).
    pub rx_in_place: u64,
    /// Frames whose buffer was too small for their ESP packet and was
    /// reallocated ([`UnderlayEsp::encrypt`]; a buffer sized to fit a short
    /// frame, recycled into a pool).
    pub tx_buf_grown: u64,
    /// `esp_seal_workers=2` ([`crate::sealer`]): transmit batches whose
    /// encryption two threads shared, ESP packets the worker encrypted
    /// and the daemon's thread (of those batches), and the times the
    /// daemon's thread slept waiting for the worker's last packets.
    pub tx_seal_batches: u64,
    pub tx_sealed_by_worker: u64,
    pub tx_sealed_by_main: u64,
    pub tx_seal_waits: u64,
    /// The sealing worker panicked (its packets dropped, zeroed; the
    /// daemon's thread seals alone since), and could not be started.
    pub tx_seal_worker_lost: u64,
    pub tx_seal_spawn_failed: u64,
}

/// Counter names for drop reasons (port counters are static strings).
const RX_DROP_NAMES: &[(&str, &str)] = &[
    ("unknown_spi", "esp_rx_drop_unknown_spi"),
    ("malformed", "esp_rx_drop_malformed"),
    ("plaintext", "esp_rx_drop_plaintext"),
    ("sa_mismatch", "esp_rx_drop_sa_mismatch"),
    ("wrong_next_header", "esp_rx_drop_wrong_next_header"),
    ("truncated", "esp_rx_drop_truncated"),
    ("wrong_spi", "esp_rx_drop_wrong_spi"),
    ("replayed", "esp_rx_drop_replayed"),
    ("too_old", "esp_rx_drop_too_old"),
    ("auth_failed", "esp_rx_drop_auth_failed"),
    ("bad_padding", "esp_rx_drop_bad_padding"),
    ("dummy", "esp_rx_drop_dummy"),
    ("lifetime_expired", "esp_rx_drop_lifetime_expired"),
];
const TX_DROP_NAMES: &[(&str, &str)] = &[
    ("seq_exhausted", "esp_tx_drop_seq_exhausted"),
    ("lifetime_expired", "esp_tx_drop_lifetime_expired"),
    ("no_sa", "esp_tx_drop_no_sa"),
    ("malformed", "esp_tx_drop_malformed"),
    ("too_big", "esp_tx_drop_too_big"),
    ("too_long", "esp_tx_drop_too_long"),
    ("seq_not_persisted", "esp_tx_drop_seq_not_persisted"),
    ("seal_failed", "esp_tx_drop_seal_failed"),
];

impl EspCounters {
    /// As port counters: totals, then every drop reason seen.
    pub fn list(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("esp_rx_packets", self.rx_packets),
            ("esp_rx_bytes", self.rx_bytes),
            ("esp_tx_packets", self.tx_packets),
            ("esp_tx_bytes", self.tx_bytes),
            ("ike_sa_established", self.ike_up),
            ("ike_child_sas_installed", self.ike_child_sas),
            ("ike_child_sas_rekeyed", self.ike_rekeys),
            ("ike_failures", self.ike_failures),
            ("ike_rx_messages", self.ike_rx),
            ("ike_tx_messages", self.ike_tx),
            ("esp_rx_in_place", self.rx_in_place),
            ("esp_tx_buf_grown", self.tx_buf_grown),
            ("esp_tx_seal_batches", self.tx_seal_batches),
            ("esp_tx_sealed_by_worker", self.tx_sealed_by_worker),
            ("esp_tx_sealed_by_main", self.tx_sealed_by_main),
            ("esp_tx_seal_waits", self.tx_seal_waits),
            ("esp_tx_seal_worker_lost", self.tx_seal_worker_lost),
            ("esp_tx_seal_spawn_failed", self.tx_seal_spawn_failed),
        ];
        let name = |table: &[(&str, &'static str)], r: &str, other: &'static str| {
            table
                .iter()
                .find(|(k, _)| *k == r)
                .map_or(other, |(_, n)| *n)
        };
        for (r, n) in &self.rx_drops {
            v.push((name(RX_DROP_NAMES, r, "esp_rx_drop_other"), *n));
        }
        for (r, n) in &self.tx_drops {
            v.push((name(TX_DROP_NAMES, r, "esp_tx_drop_other"), *n));
        }
        v
    }
}

/// Where an ESP packet sits in a received frame.
struct EspAt {
    /// Offset of the IPv4 header and its length.
    ip: usize,
    ihl: usize,
    /// Offset of the SPI.
    esp: usize,
    /// UDP 4500: the UDP length (header included), which must agree with
    /// the IP length.
    udp_len: Option<usize>,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

/// What [`UnderlayEsp::super_frame`] found in a received UDP super-frame
/// of ESP: the outer headers (kept aside: opening overwrites the frame's),
/// and the outer addresses the SAs are checked against.
pub struct EspSuperFrame {
    /// Ethernet, IPv4 and UDP headers as received.
    hdr: [u8; 14 + 60 + 8],
    /// Ethernet and IPv4 headers' length (the UDP header follows).
    hdr_len: usize,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

impl EspSuperFrame {
    /// Puts the super-frame's own headers back at the front of `frame`
    /// (an opening in transport mode may have overwritten them), so that a
    /// datagram can be cut from it again.
    pub fn restore(&self, frame: &mut [u8]) {
        let n = self.hdr_len + 8;
        if let Some(f) = frame.get_mut(..n) {
            f.copy_from_slice(&self.hdr[..n]);
        }
    }
}

/// The ESP state of one underlay: outbound SAs by endpoint, inbound SAs
/// by SPI.
#[derive(Default)]
pub struct UnderlayEsp {
    // (foldhash: both are looked up once per packet, and SipHash's cost
    // showed in profiles; keys come from configuration, not the wire.)
    endpoints: FastMap<u64, EspEndpoint>,
    /// Inbound SPI -> (endpoint id, SA).
    inbound: FastMap<u32, (u64, InboundSa)>,
    /// `seal`'s output, reused: no allocation per packet.
    scratch: Vec<u8>,
    pub counters: EspCounters,
    /// The packets of the batch being built whose encryption waits for
    /// [`seal_deferred`](Self::seal_deferred) (`esp_seal_workers=2`).
    sealer: crate::sealer::Sealer,
}

impl UnderlayEsp {
    /// Protect endpoint `id` (local -> remote) with `cfg`: manual SAs now,
    /// or an IKE session that installs them when it is up.
    pub fn add(
        &mut self,
        id: u64,
        cfg: &IpsecConfig,
        local: Ipv4Addr,
        remote: Ipv4Addr,
    ) -> Result<(), IpsecError> {
        let seq = match &cfg.keying {
            Keying::Manual(m) => Some(seq_file(m, local, remote)),
            Keying::Ike(_) => None,
        };
        self.add_with_state(id, cfg, local, remote, seq, Instant::now())
    }

    /// [`UnderlayEsp::add`] with the reservation file of a manual outbound
    /// SA (`None`: none kept, for tests) and the clock IKE starts from.
    pub fn add_with_state(
        &mut self,
        id: u64,
        cfg: &IpsecConfig,
        local: Ipv4Addr,
        remote: Ipv4Addr,
        seq_file: Option<PathBuf>,
        now: Instant,
    ) -> Result<(), IpsecError> {
        if self
            .endpoints
            .values()
            .any(|e| e.local == local && e.remote == remote)
        {
            return Err(IpsecError::PeeringTaken { local, remote });
        }
        let mut ep = EspEndpoint {
            cfg: cfg.clone(),
            local,
            remote,
            out: None,
            next_out: None,
            encap_udp: cfg.encap_udp,
            mode: cfg.mode,
            ike: None,
            seq_file: None,
            reserved: u64::MAX,
        };
        match &cfg.keying {
            Keying::Manual(m) => {
                if self.inbound.contains_key(&m.spi_in) {
                    return Err(IpsecError::SpiInUse { spi: m.spi_in });
                }
                let out_cfg = cfg.sa_config(m.spi_out, &m.key_out.0);
                let out = match &seq_file {
                    Some(path) => {
                        let start = read_seq(path)?;
                        ep.reserved = start.saturating_add(SEQ_RESERVE);
                        write_seq(path, ep.reserved).map_err(|e| IpsecError::SeqNotKept {
                            source: Box::new(e),
                        })?;
                        OutboundSa::new_after_seq(out_cfg, start)
                    }
                    None => OutboundSa::new(out_cfg),
                }
                .map_err(|source| IpsecError::SaSetup { dir: "out", source })?;
                let inb = InboundSa::new(cfg.sa_config(m.spi_in, &m.key_in.0))
                    .map_err(|source| IpsecError::SaSetup { dir: "in", source })?;
                self.inbound.insert(m.spi_in, (id, inb));
                ep.out = Some(out);
                ep.seq_file = seq_file;
            }
            Keying::Ike(k) => {
                let mut session = IkeSession::new(cfg.ike_config(k, local, remote), now);
                session.connect(now);
                ep.ike = Some(IkeState {
                    session,
                    retry_at: None,
                    backoff: IKE_RETRY_MIN,
                    child_in: None,
                    rekey_asked: false,
                });
            }
        }
        self.endpoints.insert(id, ep);
        Ok(())
    }

    /// Whether any endpoint is keyed by IKE (its sessions need polling).
    pub fn has_ike(&self) -> bool {
        self.endpoints.values().any(|e| e.ike.is_some())
    }

    /// An IKE message for an IKE-keyed endpoint (UDP to 500, or to 4500
    /// with the non-ESP marker, from its remote to its local address):
    /// handed to the endpoint's session. Returns whether `frame` was one
    /// (consumed: the caller recycles it).
    pub fn ike_input(&mut self, frame: &[u8], now: Instant) -> bool {
        if !self.has_ike() || frame.len() < 14 + 20 + 8 || frame[12..14] != [0x08, 0x00] {
            return false;
        }
        let ihl = usize::from(frame[14] & 0x0f) * 4;
        if frame[14] >> 4 != 4 || ihl < 20 || frame[14 + 9] != 17 {
            return false;
        }
        if u16::from_be_bytes([frame[14 + 6], frame[14 + 7]]) & 0x3fff != 0 {
            return false;
        }
        let l4 = 14 + ihl;
        let Some(u) = frame.get(l4..l4 + 8) else {
            return false;
        };
        let (sport, dport) = (
            u16::from_be_bytes([u[0], u[1]]),
            u16::from_be_bytes([u[2], u[3]]),
        );
        if dport != IKE_PORT && dport != NAT_T_PORT {
            return false;
        }
        let ulen = usize::from(u16::from_be_bytes([u[4], u[5]]));
        let Some(payload) = frame.get(l4 + 8..l4 + ulen.max(8)) else {
            return false;
        };
        // On 4500, anything but the non-ESP marker or a keepalive is ESP.
        let keepalive = payload == [0xff];
        if dport == NAT_T_PORT && !keepalive && (payload.len() < 4 || payload[..4] != [0; 4]) {
            return false;
        }
        let ip = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
        let (src, dst) = (ip(14 + 12), ip(14 + 16));
        let Some((&id, ep)) = self
            .endpoints
            .iter_mut()
            .find(|(_, e)| e.ike.is_some() && e.local == dst && e.remote == src)
        else {
            return false;
        };
        if !keepalive {
            self.counters.ike_rx += 1;
            if let Some(st) = ep.ike.as_mut() {
                st.session.input(sport, dport, payload, now);
            }
            self.ike_events(id, now);
        }
        true
    }

    /// Drive the IKE sessions: retransmissions, rekeys and liveness,
    /// reconnection after a failure, a child rekey when the ESP SA nears a
    /// limit. What they send is appended to `out` as (local, remote,
    /// datagram).
    pub fn poll_ike(&mut self, now: Instant, out: &mut Vec<(Ipv4Addr, Ipv4Addr, Datagram)>) {
        let ids: Vec<u64> = self
            .endpoints
            .iter()
            .filter(|(_, e)| e.ike.is_some())
            .map(|(i, _)| *i)
            .collect();
        for id in ids {
            if let Some(ep) = self.endpoints.get_mut(&id) {
                if ep.next_out.as_ref().is_some_and(|(_, t)| now >= *t) {
                    Self::switch_to_next_out(ep, "no Delete of the old one in time");
                }
                let needs_rekey = ep.out.as_ref().is_some_and(|o| o.needs_rekey());
                if let Some(st) = ep.ike.as_mut() {
                    if st.retry_at.is_some_and(|t| now >= t) {
                        st.retry_at = None;
                        st.session.connect(now);
                    }
                    // (Not while a rekey we answered waits to switch: the
                    // old SA's limit would rekey the new child.)
                    if needs_rekey && !st.rekey_asked && ep.next_out.is_none() {
                        if let Some(spi) = st.child_in {
                            st.session.rekey_child(spi, now);
                            st.rekey_asked = true;
                        }
                    }
                    st.session.tick(now);
                }
            }
            self.ike_events(id, now);
            if let Some(ep) = self.endpoints.get_mut(&id) {
                let (local, remote) = (ep.local, ep.remote);
                if let Some(st) = ep.ike.as_mut() {
                    while let Some(d) = st.session.poll_transmit() {
                        self.counters.ike_tx += 1;
                        out.push((local, remote, d));
                    }
                }
            }
        }
    }

    /// Act on what endpoint `id`'s session decided.
    fn ike_events(&mut self, id: u64, now: Instant) {
        loop {
            let Some(ep) = self.endpoints.get_mut(&id) else {
                return;
            };
            let (local, remote) = (ep.local, ep.remote);
            let Some(ev) = ep.ike.as_mut().and_then(|st| st.session.poll_event()) else {
                return;
            };
            match ev {
                IkeEvent::IkeUp => {
                    self.counters.ike_up += 1;
                    if let Some(st) = ep.ike.as_mut() {
                        st.backoff = IKE_RETRY_MIN;
                    }
                    tracing::info!(%local, %remote, "IKE SA established");
                }
                IkeEvent::ChildSaUp {
                    mode,
                    encap_udp,
                    outbound,
                    inbound,
                } => self.install_child(id, mode, encap_udp, &outbound, &inbound, None, now),
                IkeEvent::ChildSaRekeyed {
                    mode,
                    encap_udp,
                    outbound,
                    inbound,
                    responder,
                    ..
                } => self.install_child(
                    id,
                    mode,
                    encap_udp,
                    &outbound,
                    &inbound,
                    Some(responder),
                    now,
                ),
                IkeEvent::ChildSaDeleted {
                    inbound_spi,
                    outbound_spi,
                } => self.child_deleted(id, inbound_spi, outbound_spi),
                IkeEvent::IkeFailed { reason } => {
                    self.counters.ike_failures += 1;
                    let retry = ep.ike.as_ref().map_or(IKE_RETRY_MIN, |st| st.backoff);
                    tracing::warn!(%local, %remote, "IKE failed: {reason} (retrying in {}s)",
                        retry.as_secs());
                    self.ike_down(id, now);
                }
                IkeEvent::IkeDown => {
                    tracing::info!(%local, %remote, "IKE SA down");
                    self.ike_down(id, now);
                }
            }
        }
    }

    /// IKE deleted a child SA: both directions go. When it is the one a
    /// rekey we answered replaced, the new outbound SA takes over (the
    /// initiator deletes the old child only after installing the new).
    fn child_deleted(&mut self, id: u64, inbound_spi: u32, outbound_spi: u32) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        let (local, remote) = (ep.local, ep.remote);
        if self
            .inbound
            .get(&inbound_spi)
            .is_some_and(|(e, _)| *e == id)
        {
            self.inbound.remove(&inbound_spi);
        }
        if ep.out.as_ref().is_some_and(|o| o.spi() == outbound_spi) {
            ep.out = ep.next_out.take().map(|(o, _)| o);
            if let Some(o) = &ep.out {
                tracing::info!(%local, %remote, spi_out = format_args!("{:#010x}", o.spi()),
                    "IPsec rekey: sending on the new outbound SA (the old one deleted)");
            }
        }
        if let Some(st) = ep.ike.as_mut() {
            if st.child_in == Some(inbound_spi) {
                st.child_in = None;
            }
        }
        tracing::info!(%local, %remote, spi_in = format_args!("{inbound_spi:#010x}"),
            "IPsec child SA deleted");
    }

    /// A rekey we answered: send on the new outbound SA from now on.
    fn switch_to_next_out(ep: &mut EspEndpoint, why: &'static str) {
        if let Some((o, _)) = ep.next_out.take() {
            tracing::info!(local = %ep.local, remote = %ep.remote,
                spi_out = format_args!("{:#010x}", o.spi()),
                "IPsec rekey: sending on the new outbound SA ({why})");
            ep.out = Some(o);
        }
    }

    /// No IKE SA: no ESP either, and a new attempt after the backoff.
    fn ike_down(&mut self, id: u64, now: Instant) {
        self.inbound.retain(|_, (e, _)| *e != id);
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.out = None;
            ep.next_out = None;
            if let Some(st) = ep.ike.as_mut() {
                st.child_in = None;
                st.rekey_asked = false;
                if st.retry_at.is_none() {
                    st.retry_at = Some(now + st.backoff);
                    st.backoff = (st.backoff * 2).min(IKE_RETRY_MAX);
                }
            }
        }
    }

    /// Install a child SA IKE negotiated (`rekey`: `None` a new one,
    /// `Some(responder)` a rekey): frames go out with the new outbound SA
    /// at once, unless we answered the rekey with an SA to send on: then
    /// it waits in `next_out` (see [`IkeEvent::ChildSaRekeyed`]). A
    /// rekeyed SA's old inbound half stays until IKE deletes it (packets
    /// in flight still authenticate).
    #[allow(clippy::too_many_arguments)]
    fn install_child(
        &mut self,
        id: u64,
        mode: ChildMode,
        encap_udp: bool,
        outbound: &ChildKeys,
        inbound: &ChildKeys,
        rekey: Option<bool>,
        now: Instant,
    ) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        let (local, remote) = (ep.local, ep.remote);
        let sa = |k: &ChildKeys| {
            let aead = if k.key.len() == Aead::AesGcm256.key_material_len() {
                Aead::AesGcm256
            } else {
                Aead::AesGcm128
            };
            SaConfig {
                spi: k.spi,
                aead,
                key: k.key.clone(),
                esn: k.esn,
                replay_window: ep.cfg.replay_window,
                lifetime_bytes: None,
                lifetime_packets: None,
            }
        };
        let (out, inb) = match (OutboundSa::new(sa(outbound)), InboundSa::new(sa(inbound))) {
            (Ok(o), Ok(i)) => (o, i),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(%local, %remote, "IKE gave an unusable child SA: {e}");
                return;
            }
        };
        if rekey == Some(true) && ep.out.is_some() {
            ep.next_out = Some((out, now + REKEY_SWITCH_MAX));
        } else {
            ep.out = Some(out);
            ep.next_out = None;
        }
        ep.encap_udp = encap_udp;
        ep.mode = match mode {
            ChildMode::Transport => EspMode::Transport,
            ChildMode::Tunnel => EspMode::Tunnel,
        };
        if let Some(st) = ep.ike.as_mut() {
            st.child_in = Some(inbound.spi);
            st.rekey_asked = false;
        }
        self.inbound.insert(inbound.spi, (id, inb));
        let rekey = rekey.is_some();
        if rekey {
            self.counters.ike_rekeys += 1;
        } else {
            self.counters.ike_child_sas += 1;
        }
        tracing::info!(
            %local, %remote,
            spi_in = format_args!("{:#010x}", inbound.spi),
            spi_out = format_args!("{:#010x}", outbound.spi),
            ?mode, encap_udp, rekey,
            "IPsec child SA installed"
        );
    }

    pub fn remove(&mut self, id: u64) {
        self.endpoints.remove(&id);
        self.inbound.retain(|_, (e, _)| *e != id);
        if !self.endpoints.values().any(|e| e.cfg.seal_workers > 1) {
            self.stop_sealer();
        }
    }

    /// No endpoint left defers its sealing: the worker thread (if one was
    /// started) is stopped now rather than when the underlay goes, after
    /// what waits is sealed. The counters carry over; a later endpoint
    /// with `esp_seal_workers=2` starts a worker again.
    fn stop_sealer(&mut self) {
        self.seal_deferred();
        let counters = self.sealer.counters;
        // (Dropping the old sealer joins its worker; nothing is pending.)
        self.sealer = crate::sealer::Sealer::default();
        self.sealer.counters = counters;
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Whether endpoint `id` takes only ESP.
    pub fn protects(&self, id: u64) -> bool {
        self.endpoints.contains_key(&id)
    }

    /// Whether a plaintext tunnel packet from `remote` to `local` belongs
    /// to a protected endpoint (and must be dropped). Checked per frame
    /// only while the underlay has ESP endpoints.
    pub fn protects_pair(&self, local: Ipv4Addr, remote: Ipv4Addr) -> bool {
        self.endpoints
            .values()
            .any(|e| e.local == local && e.remote == remote)
    }

    /// Does endpoint `id` send ESP in UDP now (the option, or IKE's
    /// decision), and want its packets glued (`esp_gso`)?
    pub fn sends_udp_gso(&self, id: u64) -> bool {
        self.endpoints
            .get(&id)
            .is_some_and(|e| e.encap_udp && e.cfg.gso)
    }

    pub fn count_rx_drop(&mut self, reason: &'static str) {
        *self.counters.rx_drops.entry(reason).or_default() += 1;
    }

    /// Find an ESP packet in `frame` (Ethernet, IPv4 without fragments,
    /// protocol 50, or UDP to 4500 that is not IKE's non-ESP marker or a
    /// NAT keepalive).
    fn locate(frame: &[u8]) -> Option<EspAt> {
        if frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
            return None;
        }
        let ip = 14;
        let ihl = usize::from(frame[ip] & 0x0f) * 4;
        if frame[ip] >> 4 != 4 || ihl < 20 || frame.len() < ip + ihl {
            return None;
        }
        // Fragments are not reassembled: ESP of a tunnel port is sent
        // unfragmented (the inner MTU accounts for it).
        let frag = u16::from_be_bytes([frame[ip + 6], frame[ip + 7]]);
        if frag & 0x3fff != 0 {
            return None;
        }
        let ipb = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
        let (src, dst) = (ipb(ip + 12), ipb(ip + 16));
        let l4 = ip + ihl;
        let mut udp_len = None;
        let esp = match frame[ip + 9] {
            IPPROTO_ESP => l4,
            17 => {
                let u = frame.get(l4..l4 + 8)?;
                if u16::from_be_bytes([u[2], u[3]]) != NAT_T_PORT {
                    return None;
                }
                // Non-ESP marker (IKE) or a 1-byte keepalive: not ESP.
                let body = frame.get(l4 + 8..)?;
                if body.len() < 8 || body[..4] == [0; 4] {
                    return None;
                }
                udp_len = Some(usize::from(u16::from_be_bytes([u[4], u[5]])));
                l4 + 8
            }
            _ => return None,
        };
        Some(EspAt {
            ip,
            ihl,
            esp,
            udp_len,
            src,
            dst,
        })
    }

    /// Whether `frame` is a NAT-T keepalive or IKE on 4500/500 for us:
    /// not a tunnel packet, not ESP (counted as not-tunnel by the caller).
    ///
    /// If `pkt` carries ESP, decrypt it in place into the plain tunnel
    /// packet it protected (Ethernet header kept): `Ok(Some(endpoint))`.
    /// `Ok(None)`: not ESP, untouched. `Err(reason)`: ESP that was dropped
    /// (counted here).
    pub fn decrypt(&mut self, pkt: &mut PacketBuf) -> Result<Option<u64>, &'static str> {
        if self.inbound.is_empty() {
            return Ok(None);
        }
        let Some(at) = Self::locate(pkt.data()) else {
            return Ok(None);
        };
        let r = self.open(pkt, &at);
        match r {
            Ok(id) => {
                // Offload state (a partial UDP checksum of ESP in UDP, a
                // cut UDP super-frame's) described the outer headers,
                // which are gone.
                pkt.offload = None;
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += pkt.len() as u64;
                Ok(Some(id))
            }
            Err(reason) => {
                self.count_rx_drop(reason);
                Err(reason)
            }
        }
    }

    fn open(&mut self, pkt: &mut PacketBuf, at: &EspAt) -> Result<u64, &'static str> {
        // A corrupted outer header is not worth a lookup or a decryption.
        if checksum::checksum(&pkt.data()[at.ip..at.ip + at.ihl]) != 0 {
            return Err("malformed");
        }
        let (spi, id) = self.lookup(&pkt.data()[at.esp..], at.src, at.dst)?;
        // The IP total length bounds the ESP packet (Ethernet padding of
        // short frames is not ciphertext).
        let tot = usize::from(u16::from_be_bytes([
            pkt.data()[at.ip + 2],
            pkt.data()[at.ip + 3],
        ]));
        if tot < at.esp - at.ip || at.ip + tot > pkt.len() {
            return Err("malformed");
        }
        if at
            .udp_len
            .is_some_and(|u| at.ip + at.ihl + u != at.ip + tot)
        {
            return Err("malformed");
        }
        pkt.truncate(at.ip + tot);
        let mut hdr = [0u8; 14 + 60];
        let hl = 14 + at.ihl;
        hdr[..hl].copy_from_slice(&pkt.data()[..hl]);
        let inner = self.open_located(pkt.data_mut(), at.esp, spi, id, &hdr[..hl])?;
        pkt.truncate(inner.end);
        pkt.pull_front(inner.start);
        Ok(id)
    }

    /// The inbound SA's SPI and endpoint for the ESP packet `esp` between
    /// `src` and `dst` (the outer addresses): `unknown_spi`, or
    /// `sa_mismatch` when the SA belongs to another pair of addresses.
    fn lookup(&self, esp: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> Result<(u32, u64), &'static str> {
        let spi = esp::spi_of(esp).ok_or("malformed")?;
        let (id, _) = self.inbound.get(&spi).ok_or("unknown_spi")?;
        let ep = self.endpoints.get(id).ok_or("unknown_spi")?;
        // The SA belongs to one pair of addresses.
        if src != ep.remote || dst != ep.local {
            return Err("sa_mismatch");
        }
        Ok((spi, *id))
    }

    /// Opens the ESP packet that fills `buf[esp_at..]` (SA `spi` of
    /// endpoint `id`, found by [`lookup`](Self::lookup)) where it lies and
    /// puts the frame it protected right in front of the plaintext:
    /// `hdr` (the outer Ethernet and IPv4 headers as received) shortened
    /// to the Ethernet header (tunnel mode) or with the IPv4 header turned
    /// into the payload's (transport mode). Returns where that frame lies
    /// in `buf`; bytes in front of it may have been overwritten (up to
    /// `hdr.len()` bytes before the plaintext).
    fn open_located(
        &mut self,
        buf: &mut [u8],
        esp_at: usize,
        spi: u32,
        id: u64,
        hdr: &[u8],
    ) -> Result<std::ops::Range<usize>, &'static str> {
        let ep = self.endpoints.get(&id).ok_or("unknown_spi")?;
        let mode = ep.mode;
        let switch =
            ep.next_out.is_some() && ep.ike.as_ref().is_some_and(|st| st.child_in == Some(spi));
        let (_, sa) = self.inbound.get_mut(&spi).ok_or("unknown_spi")?;
        let opened = sa.open(&mut buf[esp_at..]).map_err(|e| e.name())?;
        if switch {
            // The peer sends on the new SAs: it has installed them.
            if let Some(ep) = self.endpoints.get_mut(&id) {
                Self::switch_to_next_out(ep, "traffic on the new inbound SA");
            }
        }
        let start = esp_at + opened.payload.start;
        let len = opened.payload.len();
        match (mode, opened.next_header) {
            (EspMode::Transport, nh) if nh != 4 && nh != 41 => {
                // Ethernet + IPv4 header up against the payload, with the
                // payload's protocol and length.
                let hl = hdr.len();
                let ihl = hl - 14;
                let mut h = [0u8; 14 + 60];
                h[..hl].copy_from_slice(hdr);
                let ip = &mut h[14..hl];
                ip[9] = nh;
                let total = (ihl + len) as u16;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                ip[10..12].fill(0);
                let c = checksum::checksum(ip);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                let base = start - hl;
                buf[base..start].copy_from_slice(&h[..hl]);
                Ok(base..start + len)
            }
            (EspMode::Tunnel, 4) => {
                // The inner IPv4 packet behind the outer Ethernet header.
                if len < 20 {
                    return Err("malformed");
                }
                let base = start - 14;
                buf[base..start].copy_from_slice(&hdr[..14]);
                Ok(base..start + len)
            }
            _ => Err("wrong_next_header"),
        }
    }

    /// The ESP-in-UDP packets of a received UDP super-frame (`frame`, cut
    /// as `cut` says; see `udp_gso::plan`), for
    /// [`open_in_frame`](Self::open_in_frame): `None` when the frame is
    /// not ESP in UDP to an SA of ours (no SA at all, not UDP to 4500, IP
    /// options or fragments), which the caller cuts and takes as
    /// datagrams. The outer Ethernet and IPv4 headers are copied out: the
    /// openings overwrite the frame's own.
    ///
    /// The outer IPv4 header checksum is not checked here (`open` checks a
    /// single datagram's): the super-frame's header is the sender's GSO
    /// template, and the cut way rewrote each datagram's checksum anyway,
    /// so it never reached `open` unchecked-and-wrong either.
    pub fn super_frame(&self, frame: &[u8], cut: &udp_gso::Cut) -> Option<EspSuperFrame> {
        if self.inbound.is_empty() || cut.l3_offset() != 14 {
            return None;
        }
        let at = Self::locate(frame)?;
        if at.udp_len.is_none() || at.esp != cut.l4_offset() + 8 {
            return None;
        }
        let mut hdr = [0u8; 14 + 60 + 8];
        let hl = 14 + at.ihl;
        hdr[..hl + 8].copy_from_slice(frame.get(..hl + 8)?);
        Some(EspSuperFrame {
            hdr,
            hdr_len: hl,
            src: at.src,
            dst: at.dst,
        })
    }

    /// Opens datagram `i` of a UDP super-frame of ESP in place (its
    /// payload, the ESP packet, lies at `esp` in `frame`) as
    /// [`decrypt`](Self::decrypt) opens one datagram: `Ok(Some((endpoint,
    /// range)))` with the range of `frame` that now holds the frame it
    /// protected (Ethernet header first); `Ok(None)`: this datagram is not
    /// ESP (IKE's marker, a keepalive), untouched, for the caller to take
    /// as a datagram of its own; `Err(reason)`: dropped (counted here).
    /// Bytes of `frame` in front of the returned range, down to the
    /// previous datagram's, may have been overwritten: open the datagrams
    /// in order and take each frame out before opening the next.
    pub fn open_in_frame(
        &mut self,
        sf: &EspSuperFrame,
        frame: &mut [u8],
        esp: std::ops::Range<usize>,
    ) -> Result<Option<(u64, std::ops::Range<usize>)>, &'static str> {
        let body = &frame[esp.clone()];
        if body.len() < 8 || body[..4] == [0; 4] {
            return Ok(None);
        }
        let r = self.lookup(body, sf.src, sf.dst).and_then(|(spi, id)| {
            let hdr = &sf.hdr[..sf.hdr_len];
            self.open_located(&mut frame[..esp.end], esp.start, spi, id, hdr)
                .map(|r| (id, r))
        });
        match r {
            Ok((id, inner)) => {
                self.counters.rx_packets += 1;
                self.counters.rx_in_place += 1;
                self.counters.rx_bytes += inner.len() as u64;
                Ok(Some((id, inner)))
            }
            Err(reason) => {
                self.count_rx_drop(reason);
                Err(reason)
            }
        }
    }

    /// Encrypt an encapsulated frame of endpoint `id` in place: the outer
    /// IPv4 packet's payload (transport) or the packet itself (tunnel)
    /// becomes an ESP packet of the endpoint's outbound SA.
    /// On `Err` (the reason, counted by the caller) the frame may already
    /// hold outer headers around its plaintext: drop it, never send it.
    /// No sequence number is used by a refusal.
    pub fn encrypt(&mut self, id: u64, pkt: &mut PacketBuf) -> Result<(), &'static str> {
        let plan = self.plan_seal(id, pkt.data(), pkt.len())?;
        // In place when the buffer has the room (frames from the bridge
        // do: the default headroom): the payload stays where it lies, the
        // headers go in front of it into the headroom, trailer and ICV
        // behind it, and it is encrypted there. Otherwise it is sealed
        // into a scratch buffer and copied back. A buffer too small for
        // the ESP packet is reallocated first (`esp_tx_buf_grown`).
        let esp_in = esp::ESP_HEADER_LEN + esp::ESP_IV_LEN;
        let shift = plan.hdr_len + esp_in - plan.plain_from;
        let grow = plan.esp_len - esp_in - plan.plain_len;
        let fits = |p: &PacketBuf| p.headroom() >= shift && p.tailroom() >= grow;
        if !fits(pkt) && pkt.capacity() - pkt.headroom() < plan.hdr_len + plan.esp_len {
            // A buffer too small for the ESP packet altogether (one made
            // to fit a short frame, then recycled as a receive buffer):
            // grown once, counted, rather than dropping its frame, and
            // every later one it holds (issue 34). Sealed in place then if
            // the headroom allows, else through the scratch buffer (room
            // for `shift + grow` more bytes is room for the ESP packet).
            // Grown to a receive buffer's size, so that a slightly longer
            // frame it holds later does not grow it again.
            pkt.reserve_tailroom(
                (shift + grow).max(crate::fixup::RX_BUF_CAPACITY.saturating_sub(pkt.len())),
            );
            self.counters.tx_buf_grown += 1;
        }
        if fits(pkt) {
            let ok = pkt.push_front(shift).is_some() && pkt.extend_back(grow).is_some();
            debug_assert!(ok, "room checked above");
            let d = pkt.data_mut();
            d[..plan.hdr_len].copy_from_slice(plan.headers());
            self.seal_planned(id, &plan, &mut d[plan.hdr_len..])
        } else {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(&[0; 16][..esp_in]);
            scratch.extend_from_slice(&pkt.data()[plan.plain_from..]);
            scratch.resize(plan.esp_len, 0);
            let r = self.seal_planned(id, &plan, &mut scratch);
            if r.is_ok() {
                pkt.truncate(0);
                // (Written once each, no zeroing: `append` copies straight in.)
                let ok = pkt.append(plan.headers()) && pkt.append(&scratch);
                debug_assert!(ok, "room checked above");
                if !ok {
                    // Never send a short packet, whatever the room check
                    // above becomes.
                    self.scratch = scratch;
                    *self.counters.tx_drops.entry("too_big").or_default() += 1;
                    return Err("too_big");
                }
            }
            self.scratch = scratch;
            r
        }
    }

    /// How the next ESP packet of endpoint `id` is built around the
    /// encapsulated frame that starts with `frame` (its Ethernet and IPv4
    /// headers at least; `frame_len` the whole frame's length, which the
    /// caller may not have written yet: the encrypted tunnel's transmit
    /// path seals segments straight into a UDP super-frame). Takes the
    /// next block of sequence numbers (written down first) when the SA
    /// reaches the end of the last; uses none. Refusals are counted
    /// (but an unknown endpoint).
    pub(crate) fn plan_seal(
        &mut self,
        id: u64,
        frame: &[u8],
        frame_len: usize,
    ) -> Result<SealPlan, &'static str> {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return Err("no_sa");
        };
        let data = frame;
        if data.len() < 14 + 20 || frame_len < data.len() {
            return Err("malformed");
        }
        let ihl = usize::from(data[14] & 0x0f) * 4;
        let hdr = 14 + ihl;
        if ihl < 20 || hdr > data.len() {
            return Err("malformed");
        }
        let (next_header, plain_from) = match ep.mode {
            EspMode::Transport => (data[14 + 9], hdr),
            EspMode::Tunnel => (4, 14),
        };
        let Some(out) = ep.out.as_mut() else {
            // IKE not (yet) up: nothing to send with.
            *self.counters.tx_drops.entry("no_sa").or_default() += 1;
            return Err("no_sa");
        };
        if out.last_seq() >= ep.reserved {
            // Write the next reservation down before using it.
            let next = ep.reserved.saturating_add(SEQ_RESERVE);
            match ep.seq_file.as_deref().map(|p| write_seq(p, next)) {
                Some(Ok(())) => ep.reserved = next,
                Some(Err(e)) => {
                    tracing::warn!("ESP sequence reservation not written, frame dropped: {e}");
                    *self
                        .counters
                        .tx_drops
                        .entry("seq_not_persisted")
                        .or_default() += 1;
                    return Err("seq_not_persisted");
                }
                None => ep.reserved = u64::MAX,
            }
        }
        // New outer header: the encapsulation's own (tunnel mode keeps a
        // copy of it as the outer header, options dropped).
        let mut h = [0u8; SEAL_HDR_MAX];
        let keep = match ep.mode {
            EspMode::Transport => hdr,
            EspMode::Tunnel => 14 + 20,
        };
        h[..keep].copy_from_slice(&data[..keep]);
        if ep.mode == EspMode::Tunnel {
            h[14] = 0x45;
        }
        let udp = if ep.encap_udp { 8 } else { 0 };
        let plain_len = frame_len - plain_from;
        let esp_len = out.sealed_len(plain_len);
        let total = keep - 14 + udp + esp_len;
        if total > usize::from(u16::MAX) {
            *self.counters.tx_drops.entry("too_big").or_default() += 1;
            return Err("too_big");
        }
        {
            let ip = &mut h[14..keep];
            ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            ip[9] = if udp > 0 { 17 } else { IPPROTO_ESP };
            ip[10..12].fill(0);
            let c = checksum::checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        if udp > 0 {
            let u = &mut h[keep..keep + 8];
            u[0..2].copy_from_slice(&NAT_T_PORT.to_be_bytes());
            u[2..4].copy_from_slice(&NAT_T_PORT.to_be_bytes());
            u[4..6].copy_from_slice(&((8 + esp_len) as u16).to_be_bytes());
            // RFC 3948 2.1: the checksum SHOULD be zero (u[6..8]).
        }
        Ok(SealPlan {
            hdr: h,
            hdr_len: keep + udp,
            next_header,
            plain_from,
            plain_len,
            esp_len,
            defer: ep.cfg.seal_workers > 1,
        })
    }

    /// Seals the ESP packet `plan` describes in `esp` (at least
    /// `plan.esp_len` bytes; the plaintext already at
    /// `esp[ESP_HEADER_LEN + ESP_IV_LEN..][..plan.plain_len]`) with endpoint
    /// `id`'s outbound SA, and counts it (or the refusal, by reason).
    pub(crate) fn seal_planned(
        &mut self,
        id: u64,
        plan: &SealPlan,
        esp: &mut [u8],
    ) -> Result<(), &'static str> {
        let out = self.numbering(id)?;
        if let Err(e) = out.seal_in_place(plan.next_header, esp, plan.plain_len) {
            return Err(self.refused(e));
        }
        self.count_sent(plan);
        Ok(())
    }

    /// The checks both sealing paths make before numbering a packet of
    /// endpoint `id`: its outbound SA, if there is one and its next
    /// sequence number lies in the persisted block; the drop counted
    /// otherwise.
    fn numbering(&mut self, id: u64) -> Result<&mut OutboundSa, &'static str> {
        let Some((reserved, out)) = self
            .endpoints
            .get_mut(&id)
            .and_then(|ep| Some((ep.reserved, ep.out.as_mut()?)))
        else {
            *self.counters.tx_drops.entry("no_sa").or_default() += 1;
            return Err("no_sa");
        };
        // The sequence number (the GCM nonce) about to be used must lie in
        // the block written down by `plan_seal`: a plan sealed twice, or
        // not made right before, would otherwise pass the persisted
        // reservation and, after a crash, use a nonce a second time.
        if out.last_seq() >= reserved {
            *self
                .counters
                .tx_drops
                .entry("seq_not_persisted")
                .or_default() += 1;
            return Err("seq_not_persisted");
        }
        Ok(out)
    }

    /// Counts a refusal of the outbound SA by reason.
    fn refused(&mut self, e: esp::SealError) -> &'static str {
        let reason = e.name();
        *self.counters.tx_drops.entry(reason).or_default() += 1;
        reason
    }

    /// Counts a packet sealed (or numbered for a deferred seal) as sent.
    fn count_sent(&mut self, plan: &SealPlan) {
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += (plan.hdr_len + plan.esp_len) as u64;
    }

    /// [`seal_planned`](Self::seal_planned), but for an endpoint with
    /// `esp_seal_workers=2` only numbered and counted here (every check and
    /// drop reason the same, the sequence number taken from the persisted
    /// reservation by this thread alone), the encryption left to the next
    /// [`seal_deferred`](Self::seal_deferred), which two threads share.
    /// Sealed at once with one worker or when the batch is full.
    ///
    /// # Safety
    /// With a deferred seal, `esp` must stay where it is, neither read,
    /// written, moved nor freed until `seal_deferred` (the
    /// [`Sealer::push`](crate::sealer::Sealer::push) contract): the
    /// underlay calls it before it sends, grows or drops a buffer of the
    /// batch.
    pub(crate) unsafe fn seal_planned_deferred(
        &mut self,
        id: u64,
        plan: &SealPlan,
        esp: &mut [u8],
    ) -> Result<(), &'static str> {
        if !(plan.defer && self.sealer.has_room()) {
            return self.seal_planned(id, plan, esp);
        }
        let out = self.numbering(id)?;
        let ticket = match out.reserve(esp.len(), plan.plain_len) {
            Ok(t) => t,
            Err(e) => return Err(self.refused(e)),
        };
        // SAFETY: the caller's contract, above.
        unsafe {
            self.sealer
                .push(ticket, plan.next_header, esp, plan.plain_len)
        };
        // Counted as sent now. Should its sealing fail later (it cannot
        // after `reserve`'s checks, or the worker panics), it stays
        // counted as sent, goes out zeroed (the receiver drops it) and is
        // counted again under `seal_failed`.
        self.count_sent(plan);
        Ok(())
    }

    /// Tests: the sealer, to defer packets directly.
    #[cfg(test)]
    pub(crate) fn sealer_mut(&mut self) -> &mut crate::sealer::Sealer {
        &mut self.sealer
    }

    /// Packets deferred so far in this batch ([`publish_deferred`](Self::publish_deferred)).
    pub(crate) fn deferred(&self) -> usize {
        self.sealer.pending()
    }

    /// Hands the first `upto` packets deferred in this batch to the
    /// sealing worker, which encrypts them while this thread goes on: the
    /// caller is done with the buffers they lie in (a finished UDP
    /// super-frame) until [`seal_deferred`](Self::seal_deferred).
    pub(crate) fn publish_deferred(&mut self, upto: usize) {
        self.sealer.publish(upto);
    }

    /// Encrypts every packet [`seal_planned_deferred`](Self::seal_planned_deferred)
    /// left, on this thread and the worker; their buffers are the
    /// caller's again when it returns. Cheap when nothing waits.
    pub(crate) fn seal_deferred(&mut self) {
        if self.sealer.pending() == 0 {
            return;
        }
        self.sealer.seal_all();
        let c = self.sealer.counters;
        self.counters.tx_seal_batches = c.batches;
        self.counters.tx_sealed_by_worker = c.by_worker;
        self.counters.tx_sealed_by_main = c.by_main;
        self.counters.tx_seal_waits = c.main_sleeps;
        self.counters.tx_seal_worker_lost = c.worker_lost;
        self.counters.tx_seal_spawn_failed = c.spawn_failed;
        if c.failed > 0 {
            let f = self.counters.tx_drops.entry("seal_failed").or_default();
            *f = c.failed;
        }
    }
}

/// Longest outer header in front of an ESP packet: Ethernet, IPv4 with
/// options, UDP.
const SEAL_HDR_MAX: usize = 14 + 60 + 8;

/// How one ESP packet is built ([`UnderlayEsp::plan_seal`]).
pub(crate) struct SealPlan {
    /// The outer Ethernet, IPv4 (and UDP 4500) headers in front of the ESP
    /// header, lengths and checksum final.
    hdr: [u8; SEAL_HDR_MAX],
    pub(crate) hdr_len: usize,
    next_header: u8,
    /// Where the plaintext starts in the encapsulated frame (behind the
    /// Ethernet header in tunnel mode, behind the IPv4 header in
    /// transport mode), and its length.
    pub(crate) plain_from: usize,
    pub(crate) plain_len: usize,
    /// The ESP packet's length: header, IV, plaintext, padding, trailer,
    /// ICV.
    pub(crate) esp_len: usize,
    /// The endpoint seals with a worker (`esp_seal_workers=2`): read from
    /// the endpoint by `plan_seal`, which looks it up anyway, so that
    /// `seal_planned_deferred` does not look it up a second time per packet.
    defer: bool,
}

impl SealPlan {
    /// The outer headers, `hdr_len` bytes.
    pub(crate) fn headers(&self) -> &[u8] {
        &self.hdr[..self.hdr_len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(kv: &[(&str, &str)]) -> PortOptions {
        kv.iter().copied().collect()
    }

    const K1: &str = "0x0102030405060708090a0b0c0d0e0f1011121314";
    const K2: &str = "0x1112131415161718191a1b1c1d1e1f2021222324";

    pub(super) fn manual(extra: &[(&str, &str)]) -> PortOptions {
        let mut o = opts(&[
            ("ipsec", "manual"),
            ("esp_spi_out", "0x1001"),
            ("esp_key_out", K1),
            ("esp_spi_in", "0x1002"),
            ("esp_key_in", K2),
        ]);
        for (k, v) in extra {
            o.insert(*k, *v);
        }
        o
    }

    #[test]
    fn options_parse_and_errors_never_echo_keys() {
        assert_eq!(IpsecConfig::from_options(&opts(&[])).unwrap(), None);
        let c = IpsecConfig::from_options(&manual(&[])).unwrap().unwrap();
        let Keying::Manual(m) = &c.keying else {
            panic!("manual")
        };
        assert_eq!((m.spi_out, m.spi_in), (0x1001, 0x1002));
        assert_eq!(c.replay_window, 64);
        assert_eq!(c.mode, EspMode::Transport);
        assert!(c.gso, "esp_gso defaults to on");
        let off = IpsecConfig::from_options(&manual(&[("esp_gso", "false")]));
        assert!(!off.unwrap().unwrap().gso);
        assert!(!format!("{c:?}").contains("0102"), "{c:?}");
        for (o, want) in [
            (manual(&[("esp_spi_out", "255")]), "reserved"),
            (manual(&[("esp_replay_window", "5000")]), "0..=4096"),
            (manual(&[("esp_aead", "aes-gcm-256")]), "needs 36"),
            (manual(&[("esp_encap", "tcp")]), "none or udp"),
            (manual(&[("esp_gso", "maybe")]), "true or false"),
            (
                opts(&[("esp_spi_in", "0x1002")]),
                "needs ipsec=manual or ipsec=ike",
            ),
            (manual(&[("ipsec", "ike")]), "does not go with ipsec=ike"),
            (opts(&[("ipsec", "ike")]), "psk is required"),
            (opts(&[("ipsec", "ike"), ("psk", "short")]), "at least 8"),
        ] {
            let e = IpsecConfig::from_options(&o).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("0102030405"), "key echoed: {e}");
        }
        let e = IpsecConfig::from_options(&manual(&[("esp_key_in", "0xzz")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("esp_key_in") && !e.contains("zz"), "{e}");
        // The variants say what failed, for callers that match on them.
        assert!(matches!(
            IpsecConfig::from_options(&opts(&[("ipsec", "ike")])),
            Err(IpsecError::Missing { option: "psk", .. })
        ));
        assert!(matches!(
            IpsecConfig::from_options(&manual(&[("esp_key_in", "0xzz")])),
            Err(IpsecError::BadSecret {
                option: "esp_key_in",
                ..
            })
        ));
        assert!(matches!(
            IpsecConfig::from_options(&manual(&[("esp_spi_out", "255")])),
            Err(IpsecError::BadValue { .. })
        ));
        // Options print their keys masked.
        let o = manual(&[]);
        assert!(!format!("{o:?}").contains("0102"), "{o:?}");
        let shown: Vec<_> = o.iter().collect();
        assert!(shown.contains(&(&"esp_key_in".to_string(), "(secret)")));
        assert!(shown.contains(&(&"esp_spi_in".to_string(), "0x1002")));
    }

    /// An encapsulated VXLAN frame as `tunnel::encap` leaves it.
    fn tunnel_frame(src: [u8; 4], dst: [u8; 4]) -> PacketBuf {
        use nicflow_packet::builder::FrameBuilder;
        let f = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(src.into(), dst.into())
            .udp(40000, 4789)
            .payload(b"\x08\x00\x00\x00\x00\x00\x2a\x00inner frame bytes here")
            .build();
        let mut p = PacketBuf::with_headroom(128, 2048);
        p.set_data(&f);
        p
    }

    /// A rekey we answered keeps sending on the old outbound SA until the
    /// initiator deletes the old child, a packet opens on the new inbound
    /// SA, or the deadline; a rekey we started sends on the new one at
    /// once. (Sending on the new SA at once lost a ping under
    /// strongSwan's rekey in `ike_with_strongswan_traffic_rekey_and_wrong_psk`:
    /// charon installs its new inbound SA only when our answer arrives.)
    #[test]
    fn a_rekey_we_answered_switches_only_once_the_initiator_has_the_new_sa() {
        let cfg = IpsecConfig::from_options(&opts(&[
            ("ipsec", "ike"),
            ("psk", "a-lab-secret"),
            ("esp_mode", "tunnel"),
        ]))
        .unwrap()
        .unwrap();
        let (la, lb) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let t0 = Instant::now();
        let keys = |spi: u32, b: u8| ChildKeys {
            spi,
            key: vec![b; 20],
            esn: false,
        };
        let (old_ab, old_ba, new_ab, new_ba) = (
            keys(0x100, 1),
            keys(0x200, 2),
            keys(0x101, 3),
            keys(0x201, 4),
        );
        let spi_out = |u: &UnderlayEsp, id: u64| u.endpoints[&id].out.as_ref().map(|o| o.spi());
        // A frame sealed by `u`'s endpoint `id` (a = 1 sends from .1).
        let sent_spi = |u: &mut UnderlayEsp, id: u64| {
            let mut p = if id == 1 {
                tunnel_frame([198, 18, 0, 1], [198, 18, 0, 2])
            } else {
                tunnel_frame([198, 18, 0, 2], [198, 18, 0, 1])
            };
            u.encrypt(id, &mut p).unwrap();
            p
        };
        // How the rekey ends: 0 the old child's Delete, 1 traffic on the
        // new inbound SA, 2 the deadline.
        for end in 0..3 {
            let tun = ChildMode::Tunnel;
            let mut a = UnderlayEsp::default();
            a.add_with_state(1, &cfg, la, lb, None, t0).unwrap();
            let mut b = UnderlayEsp::default();
            b.add_with_state(7, &cfg, lb, la, None, t0).unwrap();
            a.install_child(1, tun, false, &old_ab, &old_ba, None, t0);
            b.install_child(7, tun, false, &old_ba, &old_ab, None, t0);
            // b asks, a answers: a holds the new outbound SA back.
            a.install_child(1, tun, false, &new_ab, &new_ba, Some(true), t0);
            assert_eq!(spi_out(&a, 1), Some(0x100), "answered: old SA still");
            let mut p = sent_spi(&mut a, 1);
            assert_eq!(b.decrypt(&mut p), Ok(Some(7)), "b has the old inbound");
            // Traffic on the old inbound SA does not switch.
            let mut q = sent_spi(&mut b, 7);
            assert_eq!(a.decrypt(&mut q), Ok(Some(1)));
            assert_eq!(spi_out(&a, 1), Some(0x100));
            a.poll_ike(t0 + Duration::from_millis(100), &mut Vec::new());
            assert_eq!(spi_out(&a, 1), Some(0x100), "before the deadline");
            // b gets the answer: a rekey it started sends on the new SA.
            b.install_child(7, tun, false, &new_ba, &new_ab, Some(false), t0);
            assert_eq!(spi_out(&b, 7), Some(0x201), "started: new SA at once");
            match end {
                0 => a.child_deleted(1, 0x200, 0x100),
                1 => {
                    let mut r = sent_spi(&mut b, 7);
                    assert_eq!(a.decrypt(&mut r), Ok(Some(1)));
                }
                _ => a.poll_ike(t0 + REKEY_SWITCH_MAX, &mut Vec::new()),
            }
            assert_eq!(spi_out(&a, 1), Some(0x101), "end {end}: switched");
            let mut p = sent_spi(&mut a, 1);
            assert_eq!(b.decrypt(&mut p), Ok(Some(7)), "end {end}");
        }
    }

    /// Two underlays' worth of SAs, mirror images, for round trips.
    fn pair(extra: &[(&str, &str)]) -> (UnderlayEsp, UnderlayEsp) {
        let a_cfg = IpsecConfig::from_options(&manual(extra)).unwrap().unwrap();
        let mut b_cfg = a_cfg.clone();
        if let Keying::Manual(m) = &mut b_cfg.keying {
            std::mem::swap(&mut m.spi_in, &mut m.spi_out);
            std::mem::swap(&mut m.key_in, &mut m.key_out);
        }
        let (la, lb) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let mut a = UnderlayEsp::default();
        a.add_with_state(1, &a_cfg, la, lb, None, Instant::now())
            .unwrap();
        let mut b = UnderlayEsp::default();
        b.add_with_state(7, &b_cfg, lb, la, None, Instant::now())
            .unwrap();
        (a, b)
    }

    #[test]
    fn round_trip_transport_tunnel_and_udp_encap() {
        for extra in [
            &[][..],
            &[("esp_encap", "udp")][..],
            &[("esp_mode", "tunnel")][..],
            &[
                ("esp_mode", "tunnel"),
                ("esp_encap", "udp"),
                ("esp_esn", "true"),
            ][..],
        ] {
            let (mut a, mut b) = pair(extra);
            let plain = tunnel_frame([198, 18, 0, 1], [198, 18, 0, 2]);
            let mut p = plain.clone();
            a.encrypt(1, &mut p).unwrap();
            assert_ne!(p.data(), plain.data());
            let l = nicflow_packet::parse(p.data()).unwrap();
            assert_eq!(checksum::verify_ipv4_header(p.data(), &l), Some(true));
            assert_eq!(b.decrypt(&mut p), Ok(Some(7)), "{extra:?}");
            assert_eq!(p.data(), plain.data(), "{extra:?}");
            // Replayed: dropped and counted.
            let mut q = plain.clone();
            a.encrypt(1, &mut q).unwrap();
            let mut q2 = q.clone();
            assert_eq!(b.decrypt(&mut q), Ok(Some(7)));
            assert!(b.decrypt(&mut q2).is_err());
            assert_eq!(b.counters.rx_drops.values().sum::<u64>(), 1);
        }
    }

    /// A frame with headroom and tailroom for the ESP headers is sealed
    /// where it lies; one without is sealed through the scratch buffer.
    /// Both give the same bytes for the same sequence number (every mode,
    /// every payload length mod 4), and both open back.
    #[test]
    fn in_place_and_scratch_seal_give_the_same_packet() {
        for extra in [
            &[][..],
            &[("esp_encap", "udp")][..],
            &[("esp_mode", "tunnel")][..],
            &[("esp_mode", "tunnel"), ("esp_encap", "udp")][..],
        ] {
            for pad in 0..4usize {
                let (mut a, mut b) = pair(extra);
                let (mut a2, _) = pair(extra);
                let mut plain = tunnel_frame([198, 18, 0, 1], [198, 18, 0, 2]);
                // Grow the VXLAN payload by `pad` bytes (lengths fixed up).
                assert!(plain.append(&vec![0x5a; pad]));
                let n = plain.len();
                let d = plain.data_mut();
                d[16..18].copy_from_slice(&((n - 14) as u16).to_be_bytes());
                d[24..26].fill(0);
                let c = checksum::checksum(&d[14..34]);
                d[24..26].copy_from_slice(&c.to_be_bytes());
                d[38..40].copy_from_slice(&((n - 34) as u16).to_be_bytes());
                d[40..42].fill(0);
                // Room: the in-place path.
                let mut roomy = plain.clone();
                let before = roomy.headroom();
                a.encrypt(1, &mut roomy).unwrap();
                assert!(roomy.headroom() < before, "sealed in place {extra:?}");
                // No headroom: the scratch path.
                let mut tight = PacketBuf::with_headroom(0, 2048);
                tight.set_data(plain.data());
                a2.encrypt(1, &mut tight).unwrap();
                assert_eq!(roomy.data(), tight.data(), "{extra:?} {pad}");
                // No room at all (a buffer sized to the frame): grown once,
                // counted, the same packet.
                let (mut a3, _) = pair(extra);
                let mut exact = PacketBuf::from_slice(plain.data());
                a3.encrypt(1, &mut exact).unwrap();
                assert_eq!(roomy.data(), exact.data(), "{extra:?} {pad}");
                assert_eq!(a3.counters.tx_buf_grown, 1);
                // Grown to a receive buffer's size: a longer frame later
                // needs no second growth.
                assert!(exact.capacity() >= crate::fixup::RX_BUF_CAPACITY);
                // Sized to the frame and no headroom: grown, then sealed
                // through the scratch buffer, the same packet.
                let (mut a4, _) = pair(extra);
                let mut bare = PacketBuf::with_headroom(0, plain.len());
                assert!(bare.set_data(plain.data()));
                a4.encrypt(1, &mut bare).unwrap();
                assert_eq!(roomy.data(), bare.data(), "bare {extra:?} {pad}");
                assert_eq!(a4.counters.tx_buf_grown, 1);
                assert!(a4.counters.tx_drops.is_empty());
                assert_eq!(a.counters.tx_buf_grown + a2.counters.tx_buf_grown, 0);
                assert!(a3.counters.tx_drops.is_empty());
                assert_eq!(a.counters.tx_bytes, roomy.len() as u64);
                let l = nicflow_packet::parse(roomy.data()).unwrap();
                assert_eq!(checksum::verify_ipv4_header(roomy.data(), &l), Some(true));
                assert_eq!(b.decrypt(&mut roomy), Ok(Some(7)), "{extra:?}");
                assert_eq!(roomy.data(), plain.data(), "{extra:?} {pad}");
                // Tampered in the payload or the ICV: dropped, counted.
                let mut t = plain.clone();
                a.encrypt(1, &mut t).unwrap();
                let m = t.len();
                t.data_mut()[m - 20] ^= 0x10;
                assert_eq!(b.decrypt(&mut t).unwrap_err(), "auth_failed");
            }
        }
    }

    #[test]
    fn wrong_spi_wrong_addresses_and_tampering_are_dropped() {
        let (mut a, mut b) = pair(&[]);
        let mut p = tunnel_frame([198, 18, 0, 1], [198, 18, 0, 2]);
        a.encrypt(1, &mut p).unwrap();
        let mut tampered = p.clone();
        let n = tampered.len();
        tampered.data_mut()[n - 1] ^= 1;
        assert_eq!(b.decrypt(&mut tampered).unwrap_err(), "auth_failed");
        let mut spi = p.clone();
        spi.data_mut()[14 + 20 + 3] ^= 0x40;
        assert_eq!(b.decrypt(&mut spi).unwrap_err(), "unknown_spi");
        let mut addr = p.clone();
        addr.data_mut()[14 + 15] = 9; // source 198.18.0.9
        assert_eq!(b.decrypt(&mut addr.clone()).unwrap_err(), "malformed");
        let ip = &mut addr.data_mut()[14..34];
        ip[10..12].fill(0);
        let c = checksum::checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(b.decrypt(&mut addr).unwrap_err(), "sa_mismatch");
        let mut short = p.clone();
        short.truncate(14 + 20 + 10);
        assert!(b.decrypt(&mut short).is_err());
        // The untouched original still authenticates: nothing above moved
        // the replay window.
        assert_eq!(b.decrypt(&mut p), Ok(Some(7)));
    }
}

#[cfg(test)]
mod seq_tests {
    use super::*;

    /// A manual SA never sends a sequence number twice across restarts:
    /// each start resumes after what the previous run reserved.
    #[test]
    fn manual_sequence_numbers_resume_after_a_restart() {
        let dir = std::env::temp_dir().join(format!("nf-esp-seq-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let o: PortOptions = [
            ("ipsec", "manual"),
            ("esp_spi_out", "0x3001"),
            ("esp_key_out", "0x0102030405060708090a0b0c0d0e0f1011121314"),
            ("esp_spi_in", "0x3002"),
            ("esp_key_in", "0x1112131415161718191a1b1c1d1e1f2021222324"),
        ]
        .into_iter()
        .collect();
        let cfg = IpsecConfig::from_options(&o).unwrap().unwrap();
        let (l, r) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let file = dir.join("x.seq");
        let frame = |s: &mut UnderlayEsp| {
            let f = nicflow_packet::builder::FrameBuilder::new([2; 6], [4; 6])
                .ipv4(l, r)
                .udp(1, 4789)
                .payload(&[0; 16])
                .build();
            let mut p = PacketBuf::with_headroom(64, 512);
            p.set_data(&f);
            s.encrypt(1, &mut p).unwrap();
            // Sequence number of the ESP packet just sent.
            u32::from_be_bytes(p.data()[14 + 20 + 4..14 + 20 + 8].try_into().unwrap())
        };
        let mut a = UnderlayEsp::default();
        a.add_with_state(1, &cfg, l, r, Some(file.clone()), Instant::now())
            .unwrap();
        assert_eq!(frame(&mut a), 1);
        assert_eq!(read_seq(&file).unwrap(), SEQ_RESERVE);
        drop(a);
        let mut b = UnderlayEsp::default();
        b.add_with_state(1, &cfg, l, r, Some(file.clone()), Instant::now())
            .unwrap();
        assert_eq!(u64::from(frame(&mut b)), SEQ_RESERVE + 1);
        assert_eq!(read_seq(&file).unwrap(), 2 * SEQ_RESERVE);
        // An unwritable state directory refuses the port.
        let mut c = UnderlayEsp::default();
        let bad = PathBuf::from("/proc/nicflow-no/x.seq");
        let e = c
            .add_with_state(1, &cfg, l, r, Some(bad), Instant::now())
            .unwrap_err();
        assert!(e.to_string().contains("must never restart"), "{e}");
        // Typed, with the cause chained: the file and the errno underneath.
        let IpsecError::SeqNotKept { source } = &e else {
            panic!("{e:?}");
        };
        assert!(matches!(**source, IpsecError::SeqFile { .. }), "{source:?}");
        let io = std::error::Error::source(&**source).expect("io cause");
        assert!(io.downcast_ref::<std::io::Error>().is_some(), "{io:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_plan_sealed_past_its_reservation_is_refused() {
        let dir = std::env::temp_dir().join(format!("nf-esp-plan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = IpsecConfig::from_options(&super::tests::manual(&[]))
            .unwrap()
            .unwrap();
        let (l, r) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let mut u = UnderlayEsp::default();
        u.add_with_state(1, &cfg, l, r, Some(dir.join("p.seq")), Instant::now())
            .unwrap();
        let f = nicflow_packet::builder::FrameBuilder::new([2; 6], [4; 6])
            .ipv4(l, r)
            .udp(1, 4789)
            .payload(&[0; 16])
            .build();
        let plan = u.plan_seal(1, &f, f.len()).unwrap();
        let mut esp = vec![0u8; plan.esp_len];
        // The block written down ends right after the next number.
        let ep = u.endpoints.get_mut(&1).unwrap();
        ep.reserved = ep.out.as_ref().unwrap().last_seq() + 1;
        assert_eq!(u.seal_planned(1, &plan, &mut esp), Ok(()));
        // The same plan again would use a number nobody wrote down.
        assert_eq!(u.seal_planned(1, &plan, &mut esp), Err("seq_not_persisted"));
        assert_eq!(u.counters.tx_drops.get("seq_not_persisted"), Some(&1));
        assert_eq!(u.counters.tx_packets, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `esp_seal_workers=2`: packets numbered by the daemon's thread and
    /// encrypted by either thread carry every number once, in order, from
    /// the persisted block only (a deferred plan past the block is
    /// refused like a sealed one), and a restart resumes after the block:
    /// the receiver opens all of both runs, no number seen twice. Fails if
    /// the worker numbered packets itself from a block of its own, or
    /// sealed one twice.
    #[test]
    fn deferred_seals_use_each_number_once_across_a_restart() {
        let dir = std::env::temp_dir().join(format!("nf-esp-defer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let o = super::tests::manual(&[("esp_seal_workers", "2")]);
        let cfg = IpsecConfig::from_options(&o).unwrap().unwrap();
        assert_eq!(cfg.seal_workers, 2);
        let (l, r) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let file = dir.join("d.seq");
        let f = nicflow_packet::builder::FrameBuilder::new([2; 6], [4; 6])
            .ipv4(l, r)
            .udp(1, 4789)
            .payload(&[7; 200])
            .build();
        let mut seen = std::collections::HashSet::new();
        for run in 0..2u64 {
            let mut u = UnderlayEsp::default();
            u.add_with_state(1, &cfg, l, r, Some(file.clone()), Instant::now())
                .unwrap();
            let plan = u.plan_seal(1, &f, f.len()).unwrap();
            let n = 300;
            // One buffer per "super-frame" of 30 packets.
            let mut bufs: Vec<Vec<u8>> =
                (0..n / 30).map(|_| vec![0u8; plan.esp_len * 30]).collect();
            for (g, buf) in bufs.iter_mut().enumerate() {
                for esp in buf.chunks_mut(plan.esp_len) {
                    let at = nicflow_ipsec::esp::ESP_HEADER_LEN + nicflow_ipsec::esp::ESP_IV_LEN;
                    esp[at..at + plan.plain_len].copy_from_slice(&f[plan.plain_from..]);
                    let plan = u.plan_seal(1, &f, f.len()).unwrap();
                    // SAFETY: `bufs` outlives the `seal_deferred` below and
                    // this group is not touched once published.
                    unsafe { u.seal_planned_deferred(1, &plan, esp) }.unwrap();
                }
                assert_eq!(u.deferred(), (g + 1) * 30);
                u.publish_deferred(usize::MAX);
            }
            u.seal_deferred();
            assert_eq!(u.deferred(), 0);
            let c = &u.counters;
            assert_eq!(c.tx_sealed_by_worker + c.tx_sealed_by_main, n as u64);
            assert_eq!(c.tx_packets, n as u64);
            // The receiver (a fresh inbound SA per run: the window is
            // not what is tested) opens every packet; numbers never repeat.
            let Keying::Manual(m) = &cfg.keying else {
                panic!("manual")
            };
            let mut inb =
                nicflow_ipsec::esp::InboundSa::new(cfg.sa_config(m.spi_out, &m.key_out.0)).unwrap();
            let mut k = 0u64;
            for buf in &mut bufs {
                for esp in buf.chunks_mut(plan.esp_len) {
                    let o = inb.open(esp).unwrap();
                    assert_eq!(o.seq, run * SEQ_RESERVE + 1 + k, "run {run}");
                    assert!(seen.insert(o.seq), "sequence number {} twice", o.seq);
                    k += 1;
                }
            }
            assert_eq!(read_seq(&file).unwrap(), (run + 1) * SEQ_RESERVE);
            // The block's end: a deferred seal past it is refused, counted.
            let ep = u.endpoints.get_mut(&1).unwrap();
            ep.reserved = ep.out.as_ref().unwrap().last_seq();
            let mut esp = vec![0u8; plan.esp_len];
            // SAFETY: refused, nothing deferred.
            let e = unsafe { u.seal_planned_deferred(1, &plan, &mut esp) };
            assert_eq!(e, Err("seq_not_persisted"));
            assert_eq!(u.deferred(), 0);
            // The last endpoint deferring its sealing goes: so does the
            // worker, the counters stay.
            assert!(u.sealer.has_worker());
            u.remove(1);
            assert!(!u.sealer.has_worker());
            let c = &u.counters;
            assert_eq!(c.tx_sealed_by_worker + c.tx_sealed_by_main, n as u64);
        }
        // One worker: sealed at once, nothing deferred.
        let o1 = super::tests::manual(&[("esp_seal_workers", "1")]);
        let cfg1 = IpsecConfig::from_options(&o1).unwrap().unwrap();
        let mut u = UnderlayEsp::default();
        u.add_with_state(1, &cfg1, l, r, Some(dir.join("one.seq")), Instant::now())
            .unwrap();
        let plan = u.plan_seal(1, &f, f.len()).unwrap();
        let mut esp = vec![0u8; plan.esp_len];
        // SAFETY: sealed at once with one worker.
        unsafe { u.seal_planned_deferred(1, &plan, &mut esp) }.unwrap();
        assert_eq!(u.deferred(), 0);
        assert!(
            IpsecConfig::from_options(&super::tests::manual(&[("esp_seal_workers", "3")])).is_err()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
