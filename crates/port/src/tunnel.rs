//! Tunnel ports (VXLAN, Geneve): the overlay end of a bridge.
//!
//! A tunnel port is a bridge port like any other, but it has no Linux
//! interface of its own: what the bridge outputs to it is encapsulated
//! (outer Ethernet, IPv4, UDP, VXLAN or Geneve header, `nicflow_packet::tunnel`)
//! and sent on the *underlay*, a Linux interface nicflow attaches itself
//! (AF_XDP, AF_PACKET as fallback); what arrives on the underlay for one of
//! the port's endpoints is decapsulated and enters the bridge on the tunnel
//! port, with the outer headers in the flow key (`tun_id`, `tun_src`,
//! `tun_dst`, `tun_flags`), as in Open vSwitch.
//!
//! The [`Underlay`] is shared by every tunnel port on the same interface
//! (different VNIs or remotes): whichever port polls first reads the frames
//! and sorts them into per-port queues. It owns `local_ip` on the interface
//! in the sense a host does: it answers ARP for it, resolves the remote
//! endpoints' MACs with ARP (cached, refreshed, aged), and drops (and
//! counts) every other frame — nothing from the underlay is ever flooded
//! into the overlay.
//!
//! MTU: the inner frame must fit the underlay MTU minus the encapsulation
//! overhead (50 bytes for VXLAN over IPv4). A larger inner IPv4 packet with
//! DF, or any larger IPv6 packet, gets an ICMP "fragmentation needed" /
//! ICMPv6 "packet too big" back into the bridge on the tunnel port, sent as
//! from the inner destination (as Linux's tunnel PMTU discovery does), so the
//! sender lowers its path MTU instead of losing packets silently (at most
//! a burst of 50 and 1000/s per port). Larger IPv4 packets without DF are
//! dropped and counted (no outer fragmentation). The underlay MTU is read
//! again once a second, so an `ip link set mtu` on it takes effect.

use super::ipsec::{FastMap, IpsecConfig, UnderlayEsp};
use super::{Port, PortStats};
use nicflow_api::config::{PortConfig, PortType};
use nicflow_packet::buf::{GsoType, PacketBuf, TunnelMeta, TUN_F_CSUM, TUN_F_KEY, TUN_F_OAM};
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::checksum;
use nicflow_packet::tunnel::{self, Encap, TunnelError, TunnelKind};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// How many of the latest frames of a receive batch a segment may be
/// glued to (one per TCP connection, as Linux's GRO keeps 8 per NAPI).
const GRO_FLOWS: usize = 8;

/// Receive coalescing of a tunnel port's decapsulated frames (`gro`):
/// appends `p` to `out[base..]`, or glues it to the latest frame of its TCP
/// connection there when `nicflow_packet::gro` allows (true: merged, `p`
/// recycled into `pool`).
fn coalesce(
    out: &mut Vec<PacketBuf>,
    base: usize,
    p: PacketBuf,
    pool: &mut Vec<PacketBuf>,
) -> bool {
    let lo = base.max(out.len().saturating_sub(GRO_FLOWS));
    let head = (lo..out.len())
        .rev()
        .find(|&i| nicflow_packet::gro::same_flow(out[i].data(), p.data()));
    if p.offload.is_none()
        && head.is_some_and(|i| glue_segment(&mut out[i], p.data(), p.tun, pool).is_some())
    {
        pool.push(p);
        true
    } else {
        out.push(p);
        false
    }
}

/// Glues segment `next` (tunnel metadata `tun`) to `head`, the latest
/// frame of its TCP connection, when `nicflow_packet::gro` allows: the
/// payload bytes appended when merged. A head without room moves into a
/// large buffer from `pool` (allocated only until the pool holds enough of
/// them).
fn glue_segment(
    head: &mut PacketBuf,
    next: &[u8],
    tun: Option<TunnelMeta>,
    pool: &mut Vec<PacketBuf>,
) -> Option<usize> {
    use nicflow_packet::gro;
    let mut before = head.len();
    let mut r = gro::merge_slice(head, next, tun);
    if r == Err(gro::Refused::NeedRoom) {
        // (Only the pool's last few buffers are looked at: big ones come
        // back at the end, and a scan of the whole pool per merge would
        // cost more than the allocation it saves.)
        let from = pool.len().saturating_sub(GRO_FLOWS * 2);
        let big = match (from..pool.len()).rev().find(|&k| gro::is_big(&pool[k])) {
            Some(k) => pool.swap_remove(k),
            None => PacketBuf::with_capacity(gro::GRO_BUF_CAPACITY),
        };
        match gro::grow(head, big) {
            Ok(old) => {
                pool.push(old);
                before = head.len();
                r = gro::merge_slice(head, next, tun);
            }
            Err(big) => pool.push(big),
        }
    }
    r.ok().map(|()| head.len() - before)
}

/// An ARP entry is used without question this long after it was learned...
const ARP_REFRESH: Duration = Duration::from_secs(30);
/// ...then refreshed with a request while still in use, and forgotten this
/// long after it was last confirmed.
const ARP_EXPIRE: Duration = Duration::from_secs(120);
/// At most one ARP request per remote this often.
const ARP_RETRY: Duration = Duration::from_millis(500);
/// Frames held per remote while its MAC is being resolved.
const ARP_PENDING_MAX: usize = 64;
/// Frames read from the underlay per poll, in datagrams (a UDP super-frame
/// counts as the ~33 ESP packets it holds, see the AF_PACKET port's
/// `rx_units`). At 64 a poll took about two UDP super-frames, which GRO
/// turned into one or two TCP super-frames, each round's own `sendmmsg` to
/// the container: the receiving iperf3 was woken ~6,800 times a second,
/// and each wake-up preempted a daemon on this 2-core machine (issue 34:
/// the sealing daemon waited for a CPU 17 % of the time, two thirds of it
/// behind the opening daemon and the woken iperf3). 256 (about eight
/// super-frames) gives the container ~9.5 frames per `sendmmsg`.
const POLL_BATCH: usize = 256;
/// Big buffers an underlay keeps for its UDP super-frames of ESP: a
/// transmit batch of the bridge's 32 TCP super-frames of 64 KiB seals
/// into about 33 UDP super-frames, so with 8 (as before) every batch of
/// more than 8 allocated (and zeroed) a 64 KiB buffer per extra
/// super-frame, about half of them at 4 streams (issue 34's profile).
const GSO_BUFS_KEPT: usize = 80;
/// How far back [`take_gso_buf`] looks in a batch's finished frames for a
/// big buffer: the TCP super-frame just sealed is the last one.
const GSO_BUF_LOOKBACK: usize = 4;
/// Decapsulated frames waiting per endpoint; beyond it they are dropped
/// and counted (a tunnel port polled less often than its peers cannot make
/// the queue grow without bound).
const QUEUE_MAX: usize = 1024;
/// Frames held for a remote whose MAC does not come are dropped this long
/// after the first was held.
const ARP_PENDING_MAX_AGE: Duration = Duration::from_secs(3);
/// ICMP "too big" replies a tunnel port may send back to back...
const ICMP_TOO_BIG_BURST: u32 = 50;
/// ...and one more per this interval (1000/s): the values of Linux's
/// global ICMP limit (`icmp_msgs_burst`, `icmp_msgs_per_sec`), which Linux
/// itself does not apply to PMTU errors. Here each reply is a buffer and a
/// pass through the bridge, so a sender flooding oversize DF frames would
/// cost that per frame; a sender needs one reply per path to lower its MTU
/// (and asks again by retransmitting if one is lost), so this is plenty
/// for many senders at once.
const ICMP_TOO_BIG_INTERVAL: Duration = Duration::from_millis(1);
/// The underlay's MTU is read again at most this often, from the receive
/// and transmit paths: an `ip link set mtu` on the underlay is seen within
/// a second, at the cost of one ioctl per second rather than per batch.
const MTU_RECHECK: Duration = Duration::from_secs(1);

/// Bytes of [`TunnelPort::header_template`]: Ethernet, IPv4 without
/// options, UDP, VXLAN or option-less Geneve.
pub const HEADER_TEMPLATE_LEN: usize = 50;

/// The outer header a tunnel port with `cfg` puts in front of a frame, as
/// a kernel engine's template: what [`TunnelPort`]'s `send_batch` writes,
/// with the IPv4 total length and checksum, the UDP source port and length,
/// the UDP checksum and, for `key=flow`, the VNI zero, and no Geneve
/// options (all patched or inserted per frame by the engine; a `csum=true`
/// port's checksum is the TC engine's to write). `None` when `cfg` cannot
/// be encapsulated.
pub fn header_template(
    cfg: &TunnelConfig,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
) -> Option<[u8; HEADER_TEMPLATE_LEN]> {
    let mut b = PacketBuf::with_capacity(128);
    b.set_data(&[0u8; 14]);
    let e = Encap {
        kind: cfg.kind,
        eth_src: src_mac,
        eth_dst: dst_mac,
        ip_src: IpAddr::V4(cfg.local_ip),
        ip_dst: IpAddr::V4(cfg.remote_ip),
        tos: cfg.tos,
        ttl: cfg.ttl,
        df: cfg.df,
        udp_src: 0,
        udp_dst: cfg.dst_port,
        csum: false,
        vni: match cfg.key {
            TunnelKey::Fixed(v) => v,
            TunnelKey::Flow => 0,
        },
        geneve_options: &[],
        geneve_oam: false,
    };
    tunnel::encap(&mut b, &e).ok()?;
    let mut h = [0u8; HEADER_TEMPLATE_LEN];
    h.copy_from_slice(b.data().get(..HEADER_TEMPLATE_LEN)?);
    // IPv4 total length and checksum, UDP length.
    h[16..18].fill(0);
    h[24..26].fill(0);
    h[38..40].fill(0);
    Some(h)
}

/// Most Geneve option bytes a tunnel port sends: one 8-byte option per
/// `tun_metadata` slot.
pub const GENEVE_OPTIONS_MAX: usize = 64;

/// The Geneve options a tunnel port with TLV map `map` sends for a frame
/// whose `tun_metadata` slots `md_present` hold `metadata`: each present
/// slot the map names, in the map's order, as a 4-byte option (8 bytes on
/// the wire). Written into `out`; returns the length. The userspace port
/// and the TC engine's encoder both build them here, so the kernel pushes
/// the same bytes.
pub fn geneve_options(
    map: &[TlvMapping],
    md_present: u8,
    metadata: &[u32; 8],
    out: &mut [u8; GENEVE_OPTIONS_MAX],
) -> usize {
    let mut n = 0;
    if md_present == 0 {
        return 0;
    }
    for m in map {
        let i = usize::from(m.slot & 7);
        if md_present & (1 << i) != 0 {
            // 8 bytes each, at most 8 slots: fits unless the map names a
            // slot twice (then the rest is left out).
            let d = metadata[i].to_be_bytes();
            n += tunnel::write_geneve_option(&mut out[n..], m.class, m.typ, &d).unwrap_or(0);
        }
    }
    n
}

/// Where the VNI of transmitted frames comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelKey {
    /// This VNI; received frames must carry it.
    Fixed(u32),
    /// The flow's `tun_id` (`key=flow`); frames with any VNI are received.
    Flow,
}

/// A tunnel port's options (`add-port BR NAME --type vxlan|geneve K=V...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelConfig {
    pub kind: TunnelKind,
    pub remote_ip: Ipv4Addr,
    pub local_ip: Ipv4Addr,
    pub key: TunnelKey,
    pub dst_port: u16,
    /// Outer UDP checksum on transmit (IPv4: optional).
    pub csum: bool,
    /// The Linux interface carrying the tunnel.
    pub underlay: String,
    /// How nicflow attaches the underlay: afxdp (default, AF_PACKET
    /// fallback) or afpacket.
    pub underlay_type: PortType,
    pub ttl: u8,
    pub tos: u8,
    /// Outer IPv4 DF bit (default on, as OVS's `df_default`).
    pub df: bool,
    /// The remote endpoint sends finished inner TCP/UDP checksums (true
    /// for nicflow peers and for kernel senders with tx checksum offload
    /// off): TCP/UDP flows from this port may then be decapsulated in XDP
    /// (`port::afxdp`'s `csum_complete`, for the tunnel's inner frames).
    pub csum_complete: bool,
    /// Glue the decapsulated TCP/IPv4 segments of one connection back into
    /// super-frames before the bridge (`gro`, default on; [`coalesce`]).
    pub gro: bool,
    /// Geneve only: which 4-byte options are `tun_metadata0..7`
    /// (`tlv_map`, Open vSwitch's `add-tlv-map` syntax).
    pub tlv_map: Vec<TlvMapping>,
    /// ESP on the tunnel's packets (`ipsec=manual ...`, [`super::ipsec`]).
    pub ipsec: Option<IpsecConfig>,
}

/// One entry of a Geneve port's TLV map: option (class, type) <-> slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlvMapping {
    pub class: u16,
    /// The option type byte, critical bit (0x80) included, as OVS maps it.
    pub typ: u8,
    /// `tun_metadata<slot>`.
    pub slot: u8,
}

/// Parse `{class=0x0102,type=0x80,len=4}->tun_metadata0,{...}->tun_metadata1`
/// (OVS's `add-tlv-map` form). Only 4-byte options (`len=4`) fit a slot;
/// a class/type or a slot used twice is refused. Errors name the entry.
/// Why a tunnel port could not be configured or opened. Each variant names
/// the option, entry, underlay or clash that failed and carries the cause.
#[derive(Debug, thiserror::Error)]
pub enum TunnelPortError {
    /// A `tlv_map` entry that does not parse (the reason names the entry).
    #[error("tlv_map: {reason}")]
    TlvMap { reason: String },
    /// `tlv_map` on a port that carries no options (VXLAN).
    #[error("option tlv_map: only Geneve carries options")]
    TlvMapNotGeneve,
    /// An option with a value out of its range.
    #[error("option {option}={value}: {expected}")]
    BadValue {
        option: String,
        value: String,
        expected: String,
    },
    /// A required option is missing.
    #[error("option {option} is required{hint}")]
    Missing {
        option: &'static str,
        hint: &'static str,
    },
    /// An option no tunnel port knows.
    #[error("unknown tunnel option `{option}` ({known})")]
    UnknownOption { option: String, known: String },
    /// The IPsec options or SAs.
    #[error(transparent)]
    Ipsec(#[from] super::ipsec::IpsecError),
    /// The underlay port could not be opened (the port factory's reason).
    #[error("underlay {underlay}: {reason}")]
    OpenUnderlay { underlay: String, reason: String },
    /// The underlay's MAC or MTU could not be read.
    #[error("underlay {underlay}: reading its MAC and MTU: {source}")]
    UnderlayQuery {
        underlay: String,
        #[source]
        source: io::Error,
    },
    /// The UDP port already carries the other encapsulation.
    #[error("underlay {underlay}: UDP port {port} already carries {carries}, not {wanted}")]
    UdpPortTaken {
        underlay: String,
        port: u16,
        carries: &'static str,
        wanted: &'static str,
    },
    /// Another tunnel port of the underlay receives the same traffic.
    #[error(
        "underlay {underlay}: another tunnel port already receives {kind} from {remote} \
         to {local} with key {key:?}"
    )]
    EndpointTaken {
        underlay: String,
        kind: &'static str,
        remote: Ipv4Addr,
        local: Ipv4Addr,
        key: TunnelKey,
    },
}

fn tlv(reason: String) -> TunnelPortError {
    TunnelPortError::TlvMap { reason }
}

fn bad_value(option: &str, value: &str, expected: impl Into<String>) -> TunnelPortError {
    TunnelPortError::BadValue {
        option: option.to_string(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

pub fn parse_tlv_map(s: &str) -> Result<Vec<TlvMapping>, TunnelPortError> {
    let mut out: Vec<TlvMapping> = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let body_end = rest
            .find('}')
            .filter(|_| rest.starts_with('{'))
            .ok_or_else(|| {
                tlv(format!(
                    "`{rest}`: expected {{class=..,type=..,len=4}}->tun_metadataN"
                ))
            })?;
        let body = &rest[1..body_end];
        let after = rest[body_end + 1..].trim_start();
        let after = after
            .strip_prefix("->")
            .ok_or_else(|| tlv(format!("`{{{body}}}` is not followed by ->tun_metadataN")))?
            .trim_start();
        let end = after.find(',').unwrap_or(after.len());
        let target = after[..end].trim();
        rest = after[end..].trim_start_matches(',').trim_start();
        let (mut class, mut typ, mut len) = (None, None, None);
        for kv in body.split(',') {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| tlv(format!("`{kv}` in {{{body}}}: expected key=value")))?;
            let (k, v) = (k.trim(), v.trim());
            let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(h) => u32::from_str_radix(h, 16),
                None => v.parse::<u32>(),
            }
            .map_err(|_| tlv(format!("`{kv}`: not a number")))?;
            let (field, max) = match k {
                "class" => (&mut class, 0xffff),
                "type" => (&mut typ, 0xff),
                "len" => (&mut len, u32::MAX),
                _ => {
                    return Err(tlv(format!(
                        "`{kv}` in {{{body}}}: unknown key (class, type, len)"
                    )))
                }
            };
            if n > max {
                return Err(tlv(format!("`{kv}`: above {max:#x}")));
            }
            if field.replace(n).is_some() {
                return Err(tlv(format!("`{k}` twice in {{{body}}}")));
            }
        }
        let (class, typ) = (class.map(|c| c as u16), typ.map(|t| t as u8));
        let (Some(class), Some(typ)) = (class, typ) else {
            return Err(tlv(format!("{{{body}}} needs class and type")));
        };
        if len != Some(4) {
            return Err(tlv(format!(
                "{{{body}}}: only len=4 options map to tun_metadata (4-byte slots)"
            )));
        }
        let slot = target
            .strip_prefix("tun_metadata")
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|n| *n < 8)
            .ok_or_else(|| {
                tlv(format!(
                    "{{{body}}}->`{target}`: expected tun_metadata0..tun_metadata7"
                ))
            })?;
        if out
            .iter()
            .any(|m| m.slot == slot || (m.class, m.typ) == (class, typ))
        {
            return Err(tlv(format!(
                "{{{body}}}->{target}: slot or class/type mapped twice"
            )));
        }
        out.push(TlvMapping { class, typ, slot });
    }
    Ok(out)
}

impl TunnelConfig {
    /// Parse the port options; errors name the offending option.
    pub fn from_options(
        kind: TunnelKind,
        options: &nicflow_api::proto::PortOptions,
    ) -> Result<TunnelConfig, TunnelPortError> {
        let ip = |k: &str| -> Result<Option<Ipv4Addr>, TunnelPortError> {
            options
                .get(k)
                .map(|v| {
                    v.parse::<Ipv4Addr>().map_err(|_| {
                        if v.parse::<Ipv6Addr>().is_ok() {
                            bad_value(k, v, "IPv6 underlays are not supported yet")
                        } else {
                            bad_value(k, v, "not an IPv4 address")
                        }
                    })
                })
                .transpose()
        };
        let flag = |k: &str, default: bool| -> Result<bool, TunnelPortError> {
            match options.get(k).map(String::as_str) {
                None => Ok(default),
                Some("true" | "yes" | "1") => Ok(true),
                Some("false" | "no" | "0") => Ok(false),
                Some(v) => Err(bad_value(k, v, "expected true or false")),
            }
        };
        let num = |k: &str, default: u32, max: u32| -> Result<u32, TunnelPortError> {
            match options.get(k) {
                None => Ok(default),
                Some(v) => {
                    let n = if let Some(h) = v.strip_prefix("0x") {
                        u32::from_str_radix(h, 16)
                    } else {
                        v.parse::<u32>()
                    };
                    match n {
                        Ok(n) if n <= max => Ok(n),
                        _ => Err(bad_value(k, v, format!("not a number in 0..={max}"))),
                    }
                }
            }
        };
        for k in options.keys() {
            if !matches!(
                k.as_str(),
                "remote_ip"
                    | "local_ip"
                    | "key"
                    | "dst_port"
                    | "csum"
                    | "underlay"
                    | "underlay_type"
                    | "ttl"
                    | "tos"
                    | "df"
                    | "csum_complete"
                    | "gro"
                    | "tlv_map"
            ) && !super::ipsec::OPTIONS.contains(&k.as_str())
            {
                return Err(TunnelPortError::UnknownOption {
                    option: k.clone(),
                    known: format!(
                        "remote_ip, local_ip, key, dst_port, csum, underlay, underlay_type, \
                         ttl, tos, df, csum_complete, gro, tlv_map, {}",
                        super::ipsec::OPTIONS.join(", ")
                    ),
                });
            }
        }
        let missing = |option, hint| TunnelPortError::Missing { option, hint };
        let remote_ip = ip("remote_ip")?.ok_or(missing("remote_ip", ""))?;
        let local_ip = ip("local_ip")?.ok_or(missing("local_ip", ""))?;
        let underlay = options
            .get("underlay")
            .cloned()
            .ok_or(missing("underlay", " (the interface carrying the tunnel)"))?;
        let key = match options.get("key").map(String::as_str) {
            Some("flow") => TunnelKey::Flow,
            None => TunnelKey::Fixed(0),
            Some(_) => TunnelKey::Fixed(num("key", 0, 0xff_ffff)?),
        };
        let default_port = match kind {
            TunnelKind::Vxlan => tunnel::VXLAN_PORT,
            TunnelKind::Geneve => tunnel::GENEVE_PORT,
        };
        let underlay_type = match options.get("underlay_type").map(String::as_str) {
            // The bridge's offload mode decides: a TC port under auto/tc,
            // AF_XDP under xdp/none (`Underlay::open`).
            None | Some("auto") => PortType::Auto,
            Some("tc") => PortType::Tc,
            Some("afxdp") => PortType::Afxdp,
            Some("afpacket") => PortType::Afpacket,
            Some(v) => return Err(bad_value("underlay_type", v, "auto, tc, afxdp or afpacket")),
        };
        Ok(TunnelConfig {
            kind,
            remote_ip,
            local_ip,
            key,
            dst_port: num("dst_port", default_port as u32, 0xffff)? as u16,
            csum: flag("csum", false)?,
            underlay,
            underlay_type,
            ttl: num("ttl", 64, 255)? as u8,
            tos: num("tos", 0, 255)? as u8,
            df: flag("df", true)?,
            csum_complete: flag("csum_complete", false)?,
            gro: flag("gro", true)?,
            tlv_map: match options.get("tlv_map") {
                None => Vec::new(),
                Some(_) if kind != TunnelKind::Geneve => {
                    return Err(TunnelPortError::TlvMapNotGeneve)
                }
                Some(v) => parse_tlv_map(v)?,
            },
            ipsec: IpsecConfig::from_options(options)?,
        })
    }

    /// Encapsulation overhead: what the inner frame's IP packet loses of
    /// the underlay MTU.
    pub fn overhead(&self) -> usize {
        // Counting every mapped option: the MTU does not depend on which
        // metadata a frame carries.
        tunnel::overhead(self.kind, false, 8 * self.tlv_map.len())
            + self.ipsec.as_ref().map_or(0, IpsecConfig::overhead)
    }
}

/// Counters of an underlay, shown with each of its tunnel ports.
#[derive(Clone, Copy, Debug, Default)]
struct UnderlayCounters {
    arp_requests_answered: u64,
    arp_requests_sent: u64,
    arp_replies_learned: u64,
    rx_not_tunnel: u64,
    rx_bad_tunnel: u64,
    rx_no_endpoint: u64,
    rx_geneve_critical: u64,
    rx_queue_full: u64,
    /// Frames held for an ARP answer that never came (stale), and IKE
    /// datagrams beyond the hold limit; a tunnel port's frames beyond the
    /// limit are its own `tx_drop_arp_pending`.
    tx_arp_pending_drops: u64,
    tx_dropped: u64,
    /// Big buffers allocated for UDP super-frames of ESP because none was
    /// kept or free in the batch (`underlay_tx_gso_buf_allocs`): a few
    /// while warming up, then none.
    tx_gso_buf_allocs: u64,
}

struct ArpEntry {
    mac: Option<[u8; 6]>,
    confirmed: Option<Instant>,
    last_request: Option<Instant>,
    pending: VecDeque<PacketBuf>,
    /// When the oldest held frame was held.
    pending_since: Option<Instant>,
}

impl ArpEntry {
    fn new() -> ArpEntry {
        ArpEntry {
            mac: None,
            confirmed: None,
            last_request: None,
            pending: VecDeque::new(),
            pending_since: None,
        }
    }
}

struct Endpoint {
    id: u64,
    tlv: Vec<TlvMapping>,
    kind: TunnelKind,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    key: TunnelKey,
    dst_port: u16,
    /// The port's `gro`: segments opened inside a UDP super-frame are
    /// glued in the endpoint's queue (`Underlay::queue_slice`).
    gro: bool,
}

/// What selects the endpoint of a received frame: its outer headers and,
/// for a fixed-key endpoint, the VNI (`None`: a `key=flow` endpoint, any
/// VNI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct EndpointKey {
    kind: TunnelKind,
    dst_port: u16,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    vni: Option<u32>,
}

impl Endpoint {
    fn lookup_key(&self) -> EndpointKey {
        EndpointKey {
            kind: self.kind,
            dst_port: self.dst_port,
            local: self.local,
            remote: self.remote,
            vni: match self.key {
                TunnelKey::Fixed(v) => Some(v),
                TunnelKey::Flow => None,
            },
        }
    }
}

/// A token bucket: `ICMP_TOO_BIG_BURST` tokens, one more every
/// `ICMP_TOO_BIG_INTERVAL` (what Linux's `icmp_global_allow` does).
struct TokenBucket {
    tokens: u32,
    /// When the last token was added (or the bucket was last full).
    stamp: Instant,
}

impl TokenBucket {
    fn new(now: Instant) -> TokenBucket {
        TokenBucket {
            tokens: ICMP_TOO_BIG_BURST,
            stamp: now,
        }
    }

    /// Take a token if there is one.
    fn take(&mut self, now: Instant) -> bool {
        let per = ICMP_TOO_BIG_INTERVAL.as_nanos();
        let new = now.saturating_duration_since(self.stamp).as_nanos() / per;
        if new > 0 {
            let room = u128::from(ICMP_TOO_BIG_BURST - self.tokens);
            if new >= room {
                // Full: the time beyond that buys nothing.
                self.tokens = ICMP_TOO_BIG_BURST;
                self.stamp = now;
            } else {
                // Keep the fraction of a token already earned.
                self.tokens += new as u32;
                self.stamp += ICMP_TOO_BIG_INTERVAL * new as u32;
            }
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// One underlay interface and the tunnel endpoints on it.
pub struct Underlay {
    iface: String,
    port: Box<dyn Port>,
    mac: [u8; 6],
    mtu: usize,
    /// The control socket `mtu` is re-read through (`refresh_mtu`); None
    /// for an underlay built around a test's in-memory port.
    ctl: Option<OwnedFd>,
    /// When `mtu` was last read.
    mtu_checked: Instant,
    endpoints: Vec<Endpoint>,
    /// `endpoints` by what a received frame carries: one or two hash
    /// lookups per frame instead of scanning every endpoint (one per remote
    /// and VNI). Rebuilt with `udp_ports` whenever `endpoints` changes.
    by_key: FastMap<EndpointKey, usize>,
    /// The encapsulation of each UDP port the endpoints listen on (one per
    /// port: `add_endpoint` refuses a second), for `parse_tunnel`, which
    /// asks for every UDP frame. An underlay has a port or two, so a short
    /// vector beats hashing.
    udp_ports: Vec<(u16, TunnelKind)>,
    queues: FastMap<u64, VecDeque<PacketBuf>>,
    /// Per endpoint, segments (and their bytes) glued into a frame of its
    /// queue (`queue_slice`), for its port's receive counters.
    queue_merged: FastMap<u64, (u64, u64)>,
    arp: HashMap<Ipv4Addr, ArpEntry>,
    tx: Vec<PacketBuf>,
    rx: Vec<PacketBuf>,
    done: Vec<PacketBuf>,
    counters: UnderlayCounters,
    next_id: u64,
    /// SAs of the endpoints with IPsec.
    esp: UnderlayEsp,
    /// IKE datagrams to send, reused between polls.
    ike_out: Vec<(Ipv4Addr, Ipv4Addr, nicflow_ipsec::ike::Datagram)>,
    /// Buffers big enough for a UDP super-frame of ESP (`esp_gso`), kept
    /// from one send to the next: no allocation per batch once warm.
    gso_bufs: Vec<PacketBuf>,
}

/// Packets still waiting for encryption (`esp_seal_workers=2`, a batch
/// dropped unsent, e.g. on a panic's unwind) lie in buffers of `tx` and
/// `gso_bufs`, and the sealing worker may be writing them: they are sealed
/// (the worker done with them) here, before any field, and so any of
/// those buffers, is dropped.
impl Drop for Underlay {
    fn drop(&mut self) {
        self.esp.seal_deferred();
    }
}

thread_local! {
    /// Underlays in use by this thread's (the daemon's) tunnel ports, by
    /// interface name: a second tunnel port on the same interface shares it.
    static UNDERLAYS: RefCell<HashMap<String, Weak<RefCell<Underlay>>>> = RefCell::new(HashMap::new());
}

/// The underlay's MAC and MTU, and the control socket they were read
/// through (kept to read the MTU again).
fn iface_mac_mtu(iface: &str) -> io::Result<(OwnedFd, [u8; 6], usize)> {
    let fd = super::sys::control_socket()?;
    let mac = super::sys::interface_mac(fd.as_raw_fd(), iface)?;
    let mtu = super::sys::interface_mtu(fd.as_raw_fd(), iface)?;
    Ok((fd, mac, mtu))
}

impl Underlay {
    /// `mode`: the bridge's offload mode, which an `auto` underlay follows
    /// as any `auto` port does (TC under auto/tc, AF_XDP otherwise), so
    /// that the tunnel and the ports around it run in one engine.
    fn open(
        cfg: &TunnelConfig,
        mode: nicflow_api::OffloadMode,
    ) -> Result<Underlay, TunnelPortError> {
        let pc = PortConfig {
            name: format!("underlay:{}", cfg.underlay),
            iface: cfg.underlay.clone(),
            kind: cfg.underlay_type,
            options: Default::default(),
        };
        let port = crate::open(&pc, mode).map_err(|reason| TunnelPortError::OpenUnderlay {
            underlay: cfg.underlay.clone(),
            reason,
        })?;
        let (ctl, mac, mtu) =
            iface_mac_mtu(&cfg.underlay).map_err(|source| TunnelPortError::UnderlayQuery {
                underlay: cfg.underlay.clone(),
                source,
            })?;
        tracing::info!(iface = %cfg.underlay, kind = port.kind(), mtu, "tunnel underlay attached");
        Ok(Underlay::new(
            cfg.underlay.clone(),
            port,
            mac,
            mtu,
            Some(ctl),
            Instant::now(),
        ))
    }

    /// An underlay on `port`, without endpoints; `ctl` is the socket the
    /// MTU of `iface` is re-read through (None: never re-read).
    fn new(
        iface: String,
        mut port: Box<dyn Port>,
        mac: [u8; 6],
        mtu: usize,
        ctl: Option<OwnedFd>,
        now: Instant,
    ) -> Underlay {
        // UDP super-frames (a nicflow peer's ESP in UDP, `esp_gso`) come
        // whole where the port can: `dispatch_udp_super_frame` opens the
        // ESP packets where they lie.
        let kept = port.keep_udp_super_frames();
        tracing::debug!(%iface, kept, "UDP super-frames handed over whole");
        Underlay {
            iface,
            port,
            mac,
            mtu,
            ctl,
            mtu_checked: now,
            endpoints: Vec::new(),
            by_key: FastMap::default(),
            udp_ports: Vec::new(),
            queues: FastMap::default(),
            queue_merged: FastMap::default(),
            arp: HashMap::new(),
            tx: Vec::new(),
            rx: Vec::with_capacity(POLL_BATCH),
            done: Vec::new(),
            counters: UnderlayCounters::default(),
            next_id: 1,
            esp: UnderlayEsp::default(),
            ike_out: Vec::new(),
            gso_bufs: Vec::new(),
        }
    }

    /// Read the underlay's MTU again if it was last read `MTU_RECHECK` ago
    /// (the interface's MTU can change under a running tunnel).
    fn refresh_mtu(&mut self, now: Instant) {
        let Some(fd) = self.ctl.as_ref().map(AsRawFd::as_raw_fd) else {
            return;
        };
        self.refresh_mtu_with(now, |iface| super::sys::interface_mtu(fd, iface));
    }

    /// `refresh_mtu` with the MTU read by `read` (tests).
    fn refresh_mtu_with(&mut self, now: Instant, read: impl FnOnce(&str) -> io::Result<usize>) {
        if now.saturating_duration_since(self.mtu_checked) < MTU_RECHECK {
            return;
        }
        self.mtu_checked = now;
        match read(&self.iface) {
            Ok(mtu) if mtu != self.mtu => {
                tracing::info!(iface = %self.iface, old = self.mtu, mtu, "tunnel underlay MTU changed");
                self.mtu = mtu;
            }
            Ok(_) => {}
            // Interface gone or renamed: keep the last MTU; the port's
            // sends fail and are counted on their own.
            Err(e) => tracing::debug!(iface = %self.iface, "reading the underlay MTU: {e}"),
        }
    }

    /// The shared underlay of `cfg.underlay`, opened on first use.
    fn get(
        cfg: &TunnelConfig,
        mode: nicflow_api::OffloadMode,
    ) -> Result<Rc<RefCell<Underlay>>, TunnelPortError> {
        UNDERLAYS.with(|m| {
            let mut m = m.borrow_mut();
            if let Some(u) = m.get(&cfg.underlay).and_then(Weak::upgrade) {
                return Ok(u);
            }
            let u = Rc::new(RefCell::new(Underlay::open(cfg, mode)?));
            m.insert(cfg.underlay.clone(), Rc::downgrade(&u));
            Ok(u)
        })
    }

    fn add_endpoint(&mut self, cfg: &TunnelConfig) -> Result<u64, TunnelPortError> {
        let clash = self.endpoints.iter().any(|e| {
            e.kind == cfg.kind
                && e.local == cfg.local_ip
                && e.remote == cfg.remote_ip
                && e.dst_port == cfg.dst_port
                && (e.key == cfg.key || e.key == TunnelKey::Flow || cfg.key == TunnelKey::Flow)
        });
        if let Some(e) = self
            .endpoints
            .iter()
            .find(|e| e.dst_port == cfg.dst_port && e.kind != cfg.kind)
        {
            return Err(TunnelPortError::UdpPortTaken {
                underlay: self.iface.clone(),
                port: cfg.dst_port,
                carries: kind_name(e.kind),
                wanted: kind_name(cfg.kind),
            });
        }
        if clash {
            return Err(TunnelPortError::EndpointTaken {
                underlay: self.iface.clone(),
                kind: kind_name(cfg.kind),
                remote: cfg.remote_ip,
                local: cfg.local_ip,
                key: cfg.key,
            });
        }
        let id = self.next_id;
        if let Some(ip) = &cfg.ipsec {
            self.esp.add(id, ip, cfg.local_ip, cfg.remote_ip)?;
        }
        self.next_id += 1;
        self.endpoints.push(Endpoint {
            id,
            tlv: cfg.tlv_map.clone(),
            kind: cfg.kind,
            local: cfg.local_ip,
            remote: cfg.remote_ip,
            key: cfg.key,
            dst_port: cfg.dst_port,
            gro: cfg.gro,
        });
        self.queues.insert(id, VecDeque::new());
        self.queue_merged.insert(id, (0, 0));
        self.reindex();
        Ok(id)
    }

    /// A new TLV map for endpoint `id` (its received options).
    fn set_endpoint_tlv(&mut self, id: u64, map: &[TlvMapping]) {
        if let Some(e) = self.endpoints.iter_mut().find(|e| e.id == id) {
            e.tlv = map.to_vec();
        }
    }

    fn remove_endpoint(&mut self, id: u64) {
        self.esp.remove(id);
        self.endpoints.retain(|e| e.id != id);
        self.reindex();
        self.queues.remove(&id);
        self.queue_merged.remove(&id);
        // ARP state (and held frames) of remotes no endpoint uses any more.
        let eps = &self.endpoints;
        self.arp.retain(|ip, _| eps.iter().any(|e| e.remote == *ip));
    }

    /// Rebuild `by_key` and `udp_ports` from `endpoints`. The clash rules
    /// of `add_endpoint` make every key unique (a `key=flow` endpoint shares
    /// its outer headers with no other) and give each UDP port one kind.
    fn reindex(&mut self) {
        self.by_key = self
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (e.lookup_key(), i))
            .collect();
        self.udp_ports.clear();
        for e in &self.endpoints {
            if !self.udp_ports.iter().any(|(p, _)| *p == e.dst_port) {
                self.udp_ports.push((e.dst_port, e.kind));
            }
        }
    }

    fn is_local(&self, ip: Ipv4Addr) -> bool {
        self.endpoints.iter().any(|e| e.local == ip)
    }

    /// Read what the underlay has, answer ARP, sort tunnel packets into the
    /// endpoints' queues.
    fn poll(&mut self, pool: &mut Vec<PacketBuf>, now: Instant) -> io::Result<()> {
        self.refresh_mtu(now);
        let mut rx = std::mem::take(&mut self.rx);
        let n = self.port.recv_batch(&mut rx, POLL_BATCH, pool);
        for pkt in rx.drain(..) {
            self.dispatch(pkt, pool, now);
        }
        self.rx = rx;
        if self.esp.has_ike() {
            let mut out = std::mem::take(&mut self.ike_out);
            self.esp.poll_ike(now, &mut out);
            for (local, remote, d) in out.drain(..) {
                self.send_ike(local, remote, &d, now);
            }
            self.ike_out = out;
        }
        self.flush()?;
        n.map(|_| ())
    }

    fn dispatch(&mut self, mut pkt: PacketBuf, pool: &mut Vec<PacketBuf>, now: Instant) {
        if pkt.offload.is_some_and(|o| o.gso_type == GsoType::UdpL4) {
            self.dispatch_udp_super_frame(pkt, pool, now);
            return;
        }
        let data = pkt.data();
        if data.len() < 14 || data[6..12] == self.mac {
            self.counters.rx_not_tunnel += 1;
            pool.push(pkt);
            return;
        }
        let dst_mac: [u8; 6] = data[0..6].try_into().unwrap_or_default();
        if dst_mac != self.mac && dst_mac != [0xff; 6] {
            self.counters.rx_not_tunnel += 1;
            pool.push(pkt);
            return;
        }
        if u16::from_be_bytes([data[12], data[13]]) == nicflow_packet::ETHERTYPE_ARP {
            self.arp_input(&pkt, now);
            pool.push(pkt);
            return;
        }
        // IKE for an IKE-keyed endpoint goes to its session.
        if self.esp.ike_input(pkt.data(), now) {
            pool.push(pkt);
            return;
        }
        // ESP first: only a packet that authenticates comes back, as the
        // tunnel packet it protected.
        let decrypted = match self.esp.decrypt(&mut pkt) {
            Ok(d) => d,
            Err(reason) => {
                tracing::trace!(iface = %self.iface, reason, "ESP packet dropped");
                pool.push(pkt);
                return;
            }
        };
        let mut offload = pkt.offload;
        let Some((id, inner_off, tun, _)) = self.decap(pkt.data_mut(), &mut offload, decrypted)
        else {
            pool.push(pkt);
            return;
        };
        pkt.offload = offload;
        pkt.pull_front(inner_off);
        // Offload state (a partial inner checksum, a TCP super-frame from a
        // local sender) stays: its offsets followed the pull.
        pkt.tun = Some(tun);
        match self.queues.get_mut(&id) {
            Some(q) if q.len() < QUEUE_MAX => q.push_back(pkt),
            _ => {
                self.counters.rx_queue_full += 1;
                pool.push(pkt);
            }
        }
    }

    /// A UDP super-frame the underlay port handed over whole
    /// ([`Port::keep_udp_super_frames`]). ESP in UDP to our SAs (a nicflow
    /// peer's `esp_gso`) is opened datagram by datagram where it lies in
    /// the frame, and each opened tunnel frame is decapsulated there and
    /// copied once, into its endpoint's queue (`queue_slice`: glued to the
    /// frame of its TCP connection with `gro`): the datagrams are never cut
    /// into buffers of their own. Anything else (not for us, not ESP, a
    /// datagram that is not ESP) is cut into its datagrams and each taken
    /// as `dispatch` takes a frame, as if the port had cut it: the same
    /// frames, drops and counters either way. The buffer goes back to the
    /// port to receive into.
    fn dispatch_udp_super_frame(
        &mut self,
        mut pkt: PacketBuf,
        pool: &mut Vec<PacketBuf>,
        now: Instant,
    ) {
        use nicflow_packet::udp_gso::{plan, SegCsum};
        let o = pkt.offload.unwrap_or_default();
        let cut = match plan(pkt.data(), o.gso_size) {
            Ok(c) => c,
            Err(e) => {
                // (The port checked it already: only a port that did not.)
                tracing::debug!(iface = %self.iface, reason = e.name(), "UDP super-frame dropped");
                self.counters.rx_bad_tunnel += 1;
                self.recycle_whole(pkt, pool);
                return;
            }
        };
        let csum = if o.csum_partial {
            SegCsum::Partial
        } else {
            SegCsum::Full
        };
        let d = pkt.data();
        let ours =
            d.len() >= 14 && d[6..12] != self.mac && (d[0..6] == self.mac || d[0..6] == [0xff; 6]);
        let sf = if ours {
            self.esp.super_frame(d, &cut)
        } else {
            None
        };
        for i in 0..cut.segments() {
            if let (Some(sf), Some(esp)) = (&sf, cut.payload_range(i)) {
                match self.esp.open_in_frame(sf, pkt.data_mut(), esp) {
                    Ok(Some((id, inner))) => {
                        let f = &mut pkt.data_mut()[inner];
                        let mut offload = None;
                        if let Some((id, at, tun, gro)) = self.decap(f, &mut offload, Some(id)) {
                            self.queue_slice(id, &f[at..], tun, gro, pool);
                        }
                        continue;
                    }
                    Ok(None) => {
                        // Not ESP: cut from the frame's own headers (the
                        // first opening may have overwritten them).
                        sf.restore(pkt.data_mut());
                    }
                    Err(reason) => {
                        tracing::trace!(iface = %self.iface, reason, "ESP packet dropped");
                        continue;
                    }
                }
            }
            let mut b = pool
                .pop()
                .unwrap_or_else(|| PacketBuf::with_capacity(super::fixup::RX_BUF_CAPACITY));
            if !cut.write(pkt.data(), i, &mut b, csum) {
                b = PacketBuf::with_capacity(pkt.len().max(super::fixup::RX_BUF_CAPACITY));
                if !cut.write(pkt.data(), i, &mut b, csum) {
                    self.counters.rx_bad_tunnel += 1;
                    continue;
                }
            }
            self.dispatch(b, pool, now);
        }
        self.recycle_whole(pkt, pool);
    }

    /// A buffer that carried a whole UDP super-frame back to the port that
    /// received it (else to the pool).
    fn recycle_whole(&mut self, pkt: PacketBuf, pool: &mut Vec<PacketBuf>) {
        if let Some(b) = self.port.give_back_rx_buf(pkt) {
            pool.push(b);
        }
    }

    /// Queues inner frame `f` (tunnel metadata `tun`) for endpoint `id`:
    /// with `gro`, glued to the latest queued frame of its TCP connection
    /// when `nicflow_packet::gro` allows (as the port's own coalescing
    /// would glue it: one copy of the payload, straight from where it was
    /// opened), else copied into a buffer of the queue's own.
    fn queue_slice(
        &mut self,
        id: u64,
        f: &[u8],
        tun: TunnelMeta,
        gro: bool,
        pool: &mut Vec<PacketBuf>,
    ) {
        let Some(q) = self.queues.get_mut(&id) else {
            self.counters.rx_queue_full += 1;
            return;
        };
        if gro {
            let lo = q.len().saturating_sub(GRO_FLOWS);
            let head = (lo..q.len())
                .rev()
                .find(|&i| nicflow_packet::gro::same_flow(q[i].data(), f));
            let merged = head.and_then(|i| glue_segment(&mut q[i], f, Some(tun), pool));
            if let Some(payload) = merged {
                // (The frame's payload is in its head's length when that
                // is taken from the queue: its headers are counted here.)
                if let Some(m) = self.queue_merged.get_mut(&id) {
                    m.0 += 1;
                    m.1 += (f.len() - payload) as u64;
                }
                return;
            }
        }
        if q.len() >= QUEUE_MAX {
            self.counters.rx_queue_full += 1;
            return;
        }
        let mut b = match pool.pop() {
            Some(b) => b,
            None => PacketBuf::with_capacity(super::fixup::RX_BUF_CAPACITY),
        };
        if !b.set_data(f) {
            b = rx_sized(f);
        }
        b.tun = Some(tun);
        q.push_back(b);
    }

    /// The tunnel frame `f` (outer Ethernet header first; ESP already
    /// opened, by endpoint `decrypted`, or none) checked against the
    /// endpoints: the endpoint's id, where the inner frame starts, its
    /// tunnel metadata and the endpoint's `gro`; `None` when it is dropped
    /// (counted here). `offload` is the frame's offload state, finished or
    /// kept as the frame's checksums need.
    fn decap(
        &mut self,
        f: &mut [u8],
        offload: &mut Option<nicflow_packet::buf::Offload>,
        decrypted: Option<u64>,
    ) -> Option<(u64, usize, TunnelMeta, bool)> {
        // A local sender (the kernel's vxlan device on a veth) hands over
        // frames with checksum offload pending: CHECKSUM_PARTIAL on the
        // inner TCP/UDP header with the outer UDP checksum computed as if
        // it were done (local checksum offload), or on the outer UDP
        // header itself. Finish it, and the outer checksum verifies. A TCP
        // super-frame keeps its offload (inner offsets follow the pull);
        // its outer checksum can only be right per segment, so it is
        // cleared (allowed on IPv4) rather than checked.
        if let Some(o) = *offload {
            if o.is_gso() {
                if let Ok(l) = nicflow_packet::parse(f) {
                    let at = l.l4_offset as usize + 6;
                    if l.l3 == nicflow_packet::L3Kind::Ipv4 && at + 2 <= f.len() {
                        f[at..at + 2].fill(0);
                    }
                }
            } else if o.csum_partial {
                let start = o.csum_start as usize;
                let field = start + o.csum_offset as usize;
                if field + 2 <= f.len() {
                    let mut c = checksum::checksum(&f[start..]);
                    if c == 0 {
                        c = 0xffff;
                    }
                    f[field..field + 2].copy_from_slice(&c.to_be_bytes());
                }
                *offload = None;
            }
        }
        let parsed = self.parse_tunnel(f);
        // Without checksum metadata (AF_XDP: bytes only) a local sender's
        // inner checksum may still be partial while the outer UDP checksum
        // already counts it as done (local checksum offload), so the outer
        // check fails. Only then: set the outer checksum aside, parse again,
        // complete the inner one (the AF_XDP port's guess,
        // `complete_partial_checksum`) and check the outer one after that.
        // Frames whose checksums are right take one parse.
        let mut outer_csum = None;
        let parsed = match parsed {
            Err(TunnelError::BadUdpChecksum) if offload.is_none() => {
                match nicflow_packet::parse(f) {
                    Ok(l)
                        if l.l3 == nicflow_packet::L3Kind::Ipv4
                            && l.l4 == nicflow_packet::L4Kind::Udp
                            && l.l4_offset as usize + 8 <= f.len() =>
                    {
                        let at = l.l4_offset as usize + 6;
                        let v = u16::from_be_bytes([f[at], f[at + 1]]);
                        f[at..at + 2].fill(0);
                        outer_csum = Some((l.l4_offset as usize, v));
                        self.parse_tunnel(f)
                    }
                    _ => Err(TunnelError::BadUdpChecksum),
                }
            }
            other => other,
        };
        let d = match parsed {
            Ok(Some(d)) => d,
            Ok(None) => {
                self.counters.rx_not_tunnel += 1;
                return None;
            }
            Err(e) => {
                tracing::debug!(iface = %self.iface, "malformed tunnel packet: {e}");
                self.counters.rx_bad_tunnel += 1;
                return None;
            }
        };
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (d.ip_src, d.ip_dst) else {
            self.counters.rx_not_tunnel += 1;
            return None;
        };
        // The endpoint with the frame's VNI, else the key=flow one.
        let fixed = EndpointKey {
            kind: d.kind,
            dst_port: d.udp_dst,
            local: dst,
            remote: src,
            vni: Some(d.vni),
        };
        let flow = EndpointKey { vni: None, ..fixed };
        let ep = self
            .by_key
            .get(&fixed)
            .or_else(|| self.by_key.get(&flow))
            .and_then(|&i| self.endpoints.get(i));
        let Some(ep) = ep else {
            if decrypted.is_none() && self.esp.protects_pair(dst, src) {
                // A key=flow-less VNI from a protected remote in clear.
                self.esp.count_rx_drop("plaintext");
            } else {
                self.counters.rx_no_endpoint += 1;
            }
            return None;
        };
        // A protected endpoint takes only what its own SA decrypted; an
        // SA's packet carries only its endpoint's tunnel.
        if decrypted != Some(ep.id) && (decrypted.is_some() || self.esp.protects(ep.id)) {
            self.esp.count_rx_drop(if decrypted.is_some() {
                "sa_mismatch"
            } else {
                "plaintext"
            });
            return None;
        }
        // Options: the port's TLV map turns 4-byte ones into
        // tun_metadata0..7; RFC 8926 §3.5: a critical option the receiver
        // does not process means drop.
        let mut metadata = [0u32; 8];
        let mut md_present = 0u8;
        let mut unknown_critical = false;
        if d.options_len > 0 {
            let opts = d.options(f);
            for o in tunnel::geneve_options(opts) {
                let mapped = ep
                    .tlv
                    .iter()
                    .find(|m| (m.class, m.typ) == (o.class, o.typ))
                    .filter(|_| o.data.len() == 4);
                match mapped {
                    Some(m) => {
                        let i = usize::from(m.slot);
                        metadata[i] =
                            u32::from_be_bytes([o.data[0], o.data[1], o.data[2], o.data[3]]);
                        md_present |= 1 << i;
                    }
                    None => unknown_critical |= o.typ & tunnel::GENEVE_OPT_CRITICAL != 0,
                }
            }
        } else {
            // The C bit with no options at all: nothing to process.
            unknown_critical = d.geneve_critical;
        }
        if unknown_critical {
            self.counters.rx_geneve_critical += 1;
            return None;
        }
        let id = ep.id;
        let gro = ep.gro;
        let mut flags = TUN_F_KEY;
        if d.udp_csum_present {
            flags |= TUN_F_CSUM;
        }
        if let Some((udp, want)) = outer_csum {
            flags |= TUN_F_CSUM;
            let inner = &mut f[d.inner_off..];
            if let Ok(il) = nicflow_packet::parse(inner) {
                super::fixup::complete_partial_checksum(inner, &il);
            }
            let mut got = checksum::l4_checksum_ipv4(src, dst, 17, &f[udp..]);
            if got == 0 {
                got = 0xffff;
            }
            if got != want {
                self.counters.rx_bad_tunnel += 1;
                return None;
            }
        }
        if d.geneve_oam {
            flags |= TUN_F_OAM;
        }
        if d.inner_off > f.len() {
            self.counters.rx_bad_tunnel += 1;
            return None;
        }
        let tun = TunnelMeta {
            id: d.vni as u64,
            src: u32::from(src),
            dst: u32::from(dst),
            flags,
            md_present,
            metadata,
        };
        Some((id, d.inner_off, tun, gro))
    }

    /// The underlay port's own offload hook: an engine decapsulates on
    /// its attachment (AF_XDP or TC) as it runs on a port of that kind.
    pub fn offload_hook(&self) -> crate::OffloadHook {
        self.port.offload_hook()
    }

    pub fn iface(&self) -> &str {
        &self.iface
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The remote's MAC for an engine that encapsulates without
    /// userspace. While the entry has a MAC it is kept fresh (refreshed
    /// at 30 s, forgotten at 120 s without an answer, as for userspace
    /// traffic); without one, nothing is sent from here: frames the engine
    /// then hands to userspace start the resolution, so a dead remote is
    /// not asked forever.
    pub fn offload_resolve(&mut self, remote: Ipv4Addr, local: Ipv4Addr) -> Option<[u8; 6]> {
        self.arp.get(&remote).and_then(|e| e.mac)?;
        let mac = self.resolve(remote, local, Instant::now());
        if let Err(e) = self.flush() {
            tracing::debug!(iface = %self.iface, "underlay send: {e}");
        }
        mac
    }

    /// `tunnel::parse` with this underlay's endpoints' UDP ports.
    fn parse_tunnel(&self, frame: &[u8]) -> Result<Option<tunnel::Decap>, TunnelError> {
        let ports = &self.udp_ports;
        tunnel::parse(frame, |port| {
            ports.iter().find(|(p, _)| *p == port).map(|(_, k)| *k)
        })
    }

    fn arp_input(&mut self, pkt: &PacketBuf, now: Instant) {
        use nicflow_packet::arp;
        // Checked here, not left to the caller: a runt frame is counted,
        // never a slice panic.
        let Some(body) = pkt.data().get(14..) else {
            self.counters.rx_not_tunnel += 1;
            return;
        };
        let Ok(a) = arp::Packet::new_checked(body) else {
            self.counters.rx_not_tunnel += 1;
            return;
        };
        if !arp::is_eth_ipv4(body) {
            self.counters.rx_not_tunnel += 1;
            return;
        }
        let (op, sha, spa, tpa) = (a.operation(), a.sha(), a.spa(), a.tpa());
        if !self.is_local(tpa) {
            self.counters.rx_not_tunnel += 1;
            return;
        }
        // Learn (or refresh) the sender when it is one of our remotes.
        if self.endpoints.iter().any(|e| e.remote == spa) {
            let e = self.arp.entry(spa).or_insert_with(ArpEntry::new);
            e.mac = Some(sha);
            e.confirmed = Some(now);
            if op == 2 {
                self.counters.arp_replies_learned += 1;
            }
            e.pending_since = None;
            let pending: Vec<PacketBuf> = e.pending.drain(..).collect();
            for mut p in pending {
                if let Some(d) = p.data_mut().get_mut(0..6) {
                    d.copy_from_slice(&sha);
                }
                self.tx.push(p);
            }
        }
        if op == 1 {
            let reply = self.buf_for(&arp_frame(2, self.mac, tpa, sha, spa, sha));
            self.tx.push(reply);
            self.counters.arp_requests_answered += 1;
        }
    }

    /// The remote's MAC, or None after queueing `pkt` (an encapsulated frame
    /// whose destination MAC is filled in when the reply comes) and asking.
    fn resolve(&mut self, remote: Ipv4Addr, local: Ipv4Addr, now: Instant) -> Option<[u8; 6]> {
        let e = self.arp.entry(remote).or_insert_with(ArpEntry::new);
        let age = e.confirmed.map(|c| now.saturating_duration_since(c));
        if age.is_some_and(|a| a >= ARP_EXPIRE) {
            e.mac = None;
        }
        if e.pending_since
            .is_some_and(|t| now.saturating_duration_since(t) >= ARP_PENDING_MAX_AGE)
        {
            // No answer in time: the held frames are stale.
            self.counters.tx_arp_pending_drops += e.pending.len() as u64;
            self.done.extend(e.pending.drain(..));
            e.pending_since = None;
        }
        let need_request = e.mac.is_none() || age.is_some_and(|a| a >= ARP_REFRESH);
        if need_request
            && e.last_request
                .is_none_or(|t| now.saturating_duration_since(t) >= ARP_RETRY)
        {
            e.last_request = Some(now);
            let req = self.buf_for(&arp_frame(1, self.mac, local, [0; 6], remote, [0xff; 6]));
            self.tx.push(req);
            self.counters.arp_requests_sent += 1;
        }
        self.arp.get(&remote).and_then(|e| e.mac)
    }

    fn hold(&mut self, remote: Ipv4Addr, pkt: PacketBuf, now: Instant) -> Option<PacketBuf> {
        let e = self.arp.get_mut(&remote)?;
        if e.pending.len() >= ARP_PENDING_MAX {
            // Counted by the caller: a tunnel port's frame as its own
            // `tx_drop_arp_pending` (not twice, in the underlay's too).
            return Some(pkt);
        }
        e.pending_since.get_or_insert(now);
        e.pending.push_back(pkt);
        None
    }

    /// Send an IKE datagram from `local` to `remote` on the underlay (held
    /// like tunnel frames while the remote's MAC is being resolved).
    fn send_ike(
        &mut self,
        local: Ipv4Addr,
        remote: Ipv4Addr,
        d: &nicflow_ipsec::ike::Datagram,
        now: Instant,
    ) {
        let mac = self.resolve(remote, local, now);
        let frame = FrameBuilder::new(self.mac, mac.unwrap_or([0; 6]))
            .ipv4(local, remote)
            .udp(d.src_port, d.dst_port)
            .payload(&d.payload)
            .build();
        let pkt = self.buf_for(&frame);
        if mac.is_some() {
            self.tx.push(pkt);
        } else if let Some(p) = self.hold(remote, pkt, now) {
            self.counters.tx_arp_pending_drops += 1;
            self.done.push(p);
        }
    }

    /// A buffer holding `frame` (ARP, IKE) for the underlay to send: a
    /// spare one of `done`, else a new one of receive size. Sent buffers
    /// end up in the bridge's pool and come back as receive buffers, so
    /// one sized to fit a short frame (an ARP request's 42 bytes) would
    /// later hold a small frame with no room for its encapsulation and
    /// ESP trailer: `esp_tx_drop_too_big` once per batch, for as long as
    /// it circulated (issue 34).
    fn buf_for(&mut self, frame: &[u8]) -> PacketBuf {
        if let Some(mut b) = self.done.pop() {
            if b.set_data(frame) {
                return b;
            }
            self.done.push(b);
        }
        rx_sized(frame)
    }

    /// Glues the sealed ESP-in-UDP packet `pkt` to the super-frame at
    /// `tx[i]` (`nicflow_packet::udp_gso::append`), moving that frame into
    /// a big buffer first if it needs room. `false`: not glued (another
    /// size, or the frame is complete), `pkt` goes on its own.
    fn glue(&mut self, i: usize, pkt: &PacketBuf) -> bool {
        use nicflow_packet::udp_gso;
        let mut r = udp_gso::append(&mut self.tx[i], pkt);
        if r == Err(udp_gso::Refused::NeedRoom) {
            // Growing copies the head elsewhere: its packets still waiting
            // for encryption are sealed first, where they lie.
            self.esp.seal_deferred();
            let big = take_gso_buf(
                &mut self.gso_bufs,
                &mut self.done,
                &mut self.counters.tx_gso_buf_allocs,
            );
            match udp_gso::grow(&mut self.tx[i], big) {
                Ok(old) => {
                    self.done.push(old);
                    r = udp_gso::append(&mut self.tx[i], pkt);
                }
                Err(big) => self.gso_bufs.push(big),
            }
        }
        r.is_ok()
    }

    /// Takes the big buffers of sent super-frames back from `done` (a few:
    /// one per super-frame of a batch), for the next batch.
    fn keep_gso_bufs(&mut self) {
        let mut k = 0;
        while k < self.done.len() && self.gso_bufs.len() < GSO_BUFS_KEPT {
            if nicflow_packet::udp_gso::is_big(&self.done[k]) {
                self.gso_bufs.push(self.done.swap_remove(k));
            } else {
                k += 1;
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        // Packets of the batch still waiting for encryption
        // (`esp_seal_workers=2`): sealed before anything is sent.
        self.esp.seal_deferred();
        if self.tx.is_empty() {
            return Ok(());
        }
        let r = self.port.send_batch(&mut self.tx, &mut self.done);
        // A port drains the batch; after an error, whatever it left is
        // dropped here, counted, and its buffers reused.
        self.counters.tx_dropped += self.tx.len() as u64;
        self.done.append(&mut self.tx);
        if self.done.len() > 256 {
            self.done.truncate(256);
        }
        r.map(|_| ())
    }
}

/// A buffer for a UDP super-frame of ESP: a kept one (`gso_bufs`), else
/// a big one among the last [`GSO_BUF_LOOKBACK`] finished frames of the
/// batch (`done`: a TCP super-frame sealed into the UDP super-frame leaves
/// its 64 KiB receive buffer there), else a new one, counted in `allocs`.
/// A new one is zeroed 64 KiB: taken for every super-frame of a long batch
/// it was 2 % of the sealing daemon's time.
fn take_gso_buf(
    gso_bufs: &mut Vec<PacketBuf>,
    done: &mut Vec<PacketBuf>,
    allocs: &mut u64,
) -> PacketBuf {
    use nicflow_packet::udp_gso;
    if let Some(b) = gso_bufs.pop() {
        return b;
    }
    let from = done.len().saturating_sub(GSO_BUF_LOOKBACK);
    if let Some(k) = (from..done.len())
        .rev()
        .find(|&k| udp_gso::is_big(&done[k]))
    {
        return done.swap_remove(k);
    }
    *allocs += 1;
    PacketBuf::with_capacity(udp_gso::UDP_GSO_BUF_CAPACITY)
}

/// A new buffer of receive size ([`super::fixup::RX_BUF_CAPACITY`], more
/// for a longer frame) holding `frame`: what the tunnel port allocates for
/// a frame it makes or receives, never one sized to the frame, since every
/// buffer is recycled into a pool that hands it out for any frame that
/// fits (see [`Underlay::buf_for`]).
fn rx_sized(frame: &[u8]) -> PacketBuf {
    let mut b = PacketBuf::with_capacity(frame.len().max(super::fixup::RX_BUF_CAPACITY));
    let ok = b.set_data(frame);
    debug_assert!(ok, "sized for the frame");
    b
}

pub(crate) fn kind_name(k: TunnelKind) -> &'static str {
    match k {
        TunnelKind::Vxlan => "vxlan",
        TunnelKind::Geneve => "geneve",
    }
}

/// An Ethernet + ARP frame (padded to 60 bytes).
fn arp_frame(
    op: u16,
    sha: [u8; 6],
    spa: Ipv4Addr,
    tha: [u8; 6],
    tpa: Ipv4Addr,
    eth_dst: [u8; 6],
) -> Vec<u8> {
    FrameBuilder::new(sha, eth_dst)
        .arp(op, sha, spa, tha, tpa)
        .pad_to(60)
        .build()
}

/// ICMP "fragmentation needed" (IPv4 with DF) or ICMPv6 "packet too big"
/// for an inner frame that does not fit the tunnel, addressed back to its
/// sender as from its destination. None when the frame gets none (not IP,
/// IPv4 without DF, ICMP error about an ICMP error...).
pub fn too_big_reply(frame: &[u8], mtu: u32) -> Option<Vec<u8>> {
    let layout = nicflow_packet::parse(frame).ok()?;
    if layout.n_vlan != 0 {
        // The reply would need the tags back; such frames are only counted.
        return None;
    }
    let ip = frame.get(layout.l3_offset as usize..)?;
    // Back to the sender, from its destination.
    let mac = |r: std::ops::Range<usize>| -> Option<[u8; 6]> { frame.get(r)?.try_into().ok() };
    let reply = FrameBuilder::new(mac(0..6)?, mac(6..12)?).ttl(64);
    let f = match layout.l3 {
        nicflow_packet::L3Kind::Ipv4 if ip.len() >= 20 => {
            let flags = u16::from_be_bytes([ip[6], ip[7]]);
            if flags & 0x4000 == 0 || ip[9] == 1 && ip.get((ip[0] as usize & 15) * 4) != Some(&8) {
                // No DF, or an ICMP packet other than an echo request.
                return None;
            }
            let quote = &ip[..ip.len().min(576 - 28)];
            let addr = |o: usize| Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]);
            let mtu = (mtu.min(0xffff) as u16).to_be_bytes();
            reply
                .ipv4(addr(16), addr(12))
                .icmp(3, 4)
                .icmp_rest([0, 0, mtu[0], mtu[1]])
                .payload(quote)
                .build()
        }
        nicflow_packet::L3Kind::Ipv6 => {
            if ip.len() < 40 || ip[6] == 58 && ip.get(40).is_some_and(|t| *t < 128) {
                return None;
            }
            let src: [u8; 16] = ip[24..40].try_into().ok()?;
            let dst: [u8; 16] = ip[8..24].try_into().ok()?;
            // The whole reply within the IPv6 minimum MTU.
            let quote = &ip[..ip.len().min(1280 - 48)];
            reply
                .ipv6(Ipv6Addr::from(src), Ipv6Addr::from(dst))
                .icmpv6(2, 0)
                .icmp_rest(mtu.to_be_bytes())
                .payload(quote)
                .build()
        }
        _ => return None,
    };
    Some(f)
}

/// The engine's view of a shared underlay (`hook::UnderlayView`).
impl crate::hook::UnderlayView for RefCell<Underlay> {
    fn mac(&self) -> [u8; 6] {
        self.borrow().mac
    }

    fn mtu(&self) -> usize {
        self.borrow().mtu
    }

    fn resolve(&self, remote: Ipv4Addr, local: Ipv4Addr) -> Option<[u8; 6]> {
        self.borrow_mut().offload_resolve(remote, local)
    }
}

/// A VXLAN or Geneve port of a bridge.
pub struct TunnelPort {
    name: String,
    cfg: TunnelConfig,
    /// The port's own `tlv_map` option (in force while the switch-wide
    /// map is empty, see [`Port::set_tlv_map`]).
    own_tlv: Vec<TlvMapping>,
    underlay: Rc<RefCell<Underlay>>,
    id: u64,
    /// ICMP replies for oversize frames, received on this port next.
    icmp: VecDeque<PacketBuf>,
    stats: PortStats,
    /// Paces the ICMP replies to oversize frames (`ICMP_TOO_BIG_BURST`).
    icmp_bucket: TokenBucket,
    tx_drop_mtu: u64,
    icmp_too_big_sent: u64,
    /// Oversize frames that would have got an ICMP reply but found the
    /// bucket empty (still dropped and counted in `tx_drop_mtu`).
    icmp_too_big_ratelimited: u64,
    tx_drop_no_arp: u64,
    /// Received segments glued into the frame before them (`gro`).
    gro_merged: u64,
    /// `esp_gso`: UDP super-frames of ESP handed to the underlay, and the
    /// ESP packets in them.
    esp_gso_frames: u64,
    esp_gso_packets: u64,
    /// `esp_gso` on, ESP in UDP, but the underlay port takes no offloads
    /// (AF_XDP, AF_PACKET without `vnet_hdr`): packets sent one by one.
    esp_gso_fallback: u64,
    /// ESP packets of TCP super-frames sealed straight into their UDP
    /// super-frame (`seal_super_frame`: one copy of the payload).
    esp_gso_in_place: u64,
    /// A transmit batch's frames finished in software (reused).
    finished: Vec<PacketBuf>,
    /// The tunnel headers of a super-frame sealed segment by segment are
    /// built here once (`seal_super_frame`); headroom for the longest
    /// encapsulation (Geneve with 256 bytes of options), so no super-frame
    /// falls back to the ordinary way for want of room.
    encap_scratch: PacketBuf,
}

impl TunnelPort {
    /// Attach (or share) the underlay and register this port's endpoint.
    /// `mode`: the bridge's offload mode (see `Underlay::open`).
    pub fn open(
        name: &str,
        cfg: TunnelConfig,
        mode: nicflow_api::OffloadMode,
    ) -> Result<TunnelPort, TunnelPortError> {
        let underlay = Underlay::get(&cfg, mode)?;
        TunnelPort::attach(name, cfg, underlay, Instant::now())
    }

    /// Register this port's endpoint on `underlay`.
    fn attach(
        name: &str,
        cfg: TunnelConfig,
        underlay: Rc<RefCell<Underlay>>,
        now: Instant,
    ) -> Result<TunnelPort, TunnelPortError> {
        let id = underlay.borrow_mut().add_endpoint(&cfg)?;
        Ok(TunnelPort {
            name: name.to_string(),
            own_tlv: cfg.tlv_map.clone(),
            cfg,
            underlay,
            id,
            icmp: VecDeque::new(),
            stats: PortStats::default(),
            icmp_bucket: TokenBucket::new(now),
            tx_drop_mtu: 0,
            icmp_too_big_sent: 0,
            icmp_too_big_ratelimited: 0,
            tx_drop_no_arp: 0,
            gro_merged: 0,
            esp_gso_frames: 0,
            esp_gso_packets: 0,
            esp_gso_fallback: 0,
            esp_gso_in_place: 0,
            finished: Vec::new(),
            encap_scratch: PacketBuf::with_headroom(ENCAP_MAX, 256),
        })
    }

    pub fn config(&self) -> &TunnelConfig {
        &self.cfg
    }

    /// The largest inner IP packet the tunnel carries.
    pub fn inner_mtu(&self) -> usize {
        // The outer IP packet (outer IP + UDP + tunnel header + inner
        // Ethernet + inner IP) must fit the underlay MTU; the outer Ethernet
        // header counted in `overhead` and the inner one cancel out.
        self.underlay
            .borrow()
            .mtu
            .saturating_sub(self.cfg.overhead())
    }

    /// `send_batch` at `now` (tests pass their own clock).
    fn send_batch_at(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
        now: Instant,
    ) -> io::Result<usize> {
        let underlay = self.underlay.clone();
        let mut u = underlay.borrow_mut();
        u.refresh_mtu(now);
        let inner_mtu = u.mtu.saturating_sub(self.cfg.overhead());
        let ipsec = self.cfg.ipsec.is_some();
        // ESP in UDP to glue into super-frames (`esp_gso`): only for an
        // underlay port that passes a virtio-net header to a kernel that
        // takes GSO_UDP_L4 in one (the fallback counted per ESP packet).
        let gso_wanted = ipsec && u.esp.sends_udp_gso(self.id);
        let can_glue = u.port.accepts_offloads() && crate::sys::kernel_takes_udp_gso();
        let mut b = TxBatch {
            glue: gso_wanted && can_glue,
            fallback: gso_wanted && !can_glue,
            inner_mtu,
            now,
            // One ARP lookup per batch: every frame goes to the same remote.
            resolved: None,
            head: None,
            glued: 0,
            sent: 0,
        };
        let mut finished = std::mem::take(&mut self.finished);
        for p in pkts.drain(..) {
            if !ipsec || p.offload.is_none() {
                self.send_one(&mut u, p, done, &mut b);
                continue;
            }
            // ESP hides the inner headers from any later segmentation or
            // checksum offload: a TCP super-frame is cut and each segment
            // sealed straight into the UDP super-frame when it can be
            // (`seal_super_frame`); otherwise it is finished here (cut at
            // its MSS, partial checksums completed) and each piece goes
            // the ordinary way.
            let p = match self.seal_super_frame(&mut u, p, done, &mut b) {
                Ok(()) => continue,
                Err(p) => p,
            };
            let mut f = super::fixup::Finished::default();
            super::fixup::finish_frame(p, done, &mut finished, &mut f);
            for q in finished.drain(..) {
                self.send_one(&mut u, q, done, &mut b);
            }
        }
        self.finished = finished;
        if b.glued > 0 {
            let frames =
                u.tx.iter()
                    .filter(|p| p.offload.is_some_and(|o| o.gso_type == GsoType::UdpL4))
                    .count() as u64;
            self.esp_gso_frames += frames;
            self.esp_gso_packets += frames + b.glued;
        }
        let r = u.flush();
        u.keep_gso_bufs();
        done.append(&mut u.done);
        r.map(|_| b.sent)
    }

    /// One frame (no offload work left) of a transmit batch: checked
    /// against the tunnel's MTU, encapsulated, sealed with ESP when the
    /// port has IPsec, glued to the batch's UDP super-frame when it can
    /// be, and queued on the underlay (or held while the remote's MAC is
    /// being resolved).
    fn send_one(
        &mut self,
        u: &mut Underlay,
        mut pkt: PacketBuf,
        done: &mut Vec<PacketBuf>,
        b: &mut TxBatch,
    ) {
        if b.fallback {
            self.esp_gso_fallback += 1;
        }
        let (inner_mtu, now) = (b.inner_mtu, b.now);
        if pkt.len().saturating_sub(14) > inner_mtu {
            self.tx_drop_mtu += 1;
            self.stats.tx_dropped += 1;
            let reply = too_big_reply(pkt.data(), inner_mtu as u32);
            // Replies are paced (`ICMP_TOO_BIG_BURST`); the frame is
            // dropped and counted either way.
            if reply.is_some() && !self.icmp_bucket.take(now) {
                self.icmp_too_big_ratelimited += 1;
            } else if let Some(reply) = reply {
                self.icmp_too_big_sent += 1;
                let mut r = rx_sized(&reply);
                // As if it came back through the tunnel, so rules that
                // match tun_id see it like the flow's other packets.
                let vni = match self.cfg.key {
                    TunnelKey::Fixed(v) => v as u64,
                    TunnelKey::Flow => pkt.tun.map(|t| t.id).unwrap_or(0),
                };
                r.tun = Some(TunnelMeta {
                    id: vni,
                    src: u32::from(self.cfg.remote_ip),
                    dst: u32::from(self.cfg.local_ip),
                    flags: TUN_F_KEY,
                    ..TunnelMeta::default()
                });
                self.icmp.push_back(r);
            }
            done.push(pkt);
            return;
        }
        let remote_mac = *b
            .resolved
            .get_or_insert_with(|| u.resolve(self.cfg.remote_ip, self.cfg.local_ip, now));
        let mut opts = [0u8; GENEVE_OPTIONS_MAX];
        let n_opts = match pkt.tun {
            Some(t) => geneve_options(&self.cfg.tlv_map, t.md_present, &t.metadata, &mut opts),
            None => 0,
        };
        let e = self.encap_for(
            u.mac,
            remote_mac.unwrap_or([0; 6]),
            pkt.tun,
            &opts[..n_opts],
            tunnel::entropy_port(pkt.data()),
        );
        let len = pkt.len();
        pkt.tun = None;
        if let Err(err) = tunnel::encap(&mut pkt, &e) {
            tracing::debug!(port = %self.name, "encapsulation failed: {err}");
            self.stats.tx_dropped += 1;
            done.push(pkt);
            return;
        }
        if self.cfg.ipsec.is_some() {
            pkt.offload = None;
            if let Err(reason) = u.esp.encrypt(self.id, &mut pkt) {
                tracing::debug!(port = %self.name, reason, "ESP: frame not sent");
                self.stats.tx_dropped += 1;
                done.push(pkt);
                return;
            }
        }
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += len as u64;
        b.sent += 1;
        if remote_mac.is_some() && b.glue {
            if let Some(i) = b.head {
                if u.glue(i, &pkt) {
                    b.glued += 1;
                    done.push(pkt);
                    return;
                }
            }
            // The head this one replaces is finished: its packets waiting
            // for encryption go to the sealing worker.
            u.esp.publish_deferred(usize::MAX);
            b.head = Some(u.tx.len());
            u.tx.push(pkt);
        } else if remote_mac.is_some() {
            u.tx.push(pkt);
        } else if let Some(p) = u.hold(self.cfg.remote_ip, pkt, now) {
            self.tx_drop_no_arp += 1;
            self.stats.tx_packets -= 1;
            self.stats.tx_bytes -= len as u64;
            self.stats.tx_dropped += 1;
            b.sent -= 1;
            done.push(p);
        }
    }

    /// The encapsulation of a frame with tunnel metadata `tun` (the VNI of
    /// a `key=flow` port) and Geneve options `opts`.
    fn encap_for<'a>(
        &self,
        eth_src: [u8; 6],
        eth_dst: [u8; 6],
        tun: Option<TunnelMeta>,
        opts: &'a [u8],
        udp_src: u16,
    ) -> Encap<'a> {
        let vni = match self.cfg.key {
            TunnelKey::Fixed(v) => v,
            TunnelKey::Flow => tun.map(|t| t.id as u32 & 0xff_ffff).unwrap_or(0),
        };
        Encap {
            kind: self.cfg.kind,
            eth_src,
            eth_dst,
            ip_src: IpAddr::V4(self.cfg.local_ip),
            ip_dst: IpAddr::V4(self.cfg.remote_ip),
            tos: self.cfg.tos,
            ttl: self.cfg.ttl,
            df: self.cfg.df,
            udp_src,
            udp_dst: self.cfg.dst_port,
            csum: self.cfg.csum,
            vni,
            geneve_options: opts,
            geneve_oam: false,
        }
    }

    /// A TCP super-frame of an encrypted tunnel whose ESP in UDP is glued
    /// (`esp_gso`), sent with one copy of its payload: each MSS segment
    /// (inner headers fixed as `fixup::segment_tcp` fixes them, payload
    /// chunk) is written straight into its slot of the outgoing UDP
    /// super-frame, behind the tunnel headers and room for the outer
    /// IPv4, UDP and ESP headers, and sealed there
    /// (`OutboundSa::seal_in_place`). The ordinary way cuts the
    /// super-frame into segments (one copy), seals each in its own buffer
    /// and copies it into the super-frame (a second); the bytes on the
    /// wire are the same (unit test). Sequence numbers, drop reasons and
    /// counters are those of the ordinary way, segment by segment.
    ///
    /// `Err(pkt)`, untouched, when this does not apply: not a TCP
    /// super-frame that `segment_tcp` would cut, gluing off, the remote's
    /// MAC not known yet, a segment too big for the tunnel, `csum=true`
    /// (the outer UDP checksum would need a pass over each segment), or
    /// an encapsulation the ordinary way refuses.
    fn seal_super_frame(
        &mut self,
        u: &mut Underlay,
        pkt: PacketBuf,
        done: &mut Vec<PacketBuf>,
        b: &mut TxBatch,
    ) -> Result<(), PacketBuf> {
        use super::fixup::TcpCut;
        use nicflow_packet::udp_gso::{self, Refused};
        if !b.glue || self.cfg.csum {
            return Err(pkt);
        }
        let Some(o) = pkt.offload else {
            return Err(pkt);
        };
        let Ok(layout) = nicflow_packet::parse(pkt.data()) else {
            return Err(pkt);
        };
        let Some(cut) = TcpCut::of_offload(pkt.data(), &layout, &o) else {
            return Err(pkt);
        };
        if cut.seg_len(0).saturating_sub(14) > b.inner_mtu {
            return Err(pkt);
        }
        let now = b.now;
        let Some(remote_mac) = *b
            .resolved
            .get_or_insert_with(|| u.resolve(self.cfg.remote_ip, self.cfg.local_ip, now))
        else {
            return Err(pkt);
        };
        // The tunnel headers, once: encapsulate the segments' common
        // headers alone, then give each segment its own lengths.
        let mut opts = [0u8; GENEVE_OPTIONS_MAX];
        let n_opts = match pkt.tun {
            Some(t) => geneve_options(&self.cfg.tlv_map, t.md_present, &t.metadata, &mut opts),
            None => 0,
        };
        let e = self.encap_for(
            u.mac,
            remote_mac,
            pkt.tun,
            &opts[..n_opts],
            tunnel::entropy_port(pkt.data()),
        );
        let (inner_hdrs, _) = cut.parts(pkt.data(), 0);
        let tmpl = &mut self.encap_scratch;
        if !tmpl.set_data(inner_hdrs) || tunnel::encap(tmpl, &e).is_err() {
            return Err(pkt);
        }
        let n = tmpl.len() - inner_hdrs.len();
        let mut enc = [0u8; ENCAP_MAX];
        let Some(enc) = enc.get_mut(..n) else {
            return Err(pkt);
        };
        enc.copy_from_slice(&tmpl.data()[..n]);
        if n < 14 + 20 + 8 || enc[12..14] != [0x08, 0x00] || enc[14] != 0x45 {
            return Err(pkt);
        }
        let Underlay {
            tx,
            esp: ue,
            gso_bufs,
            counters,
            ..
        } = u;
        let frame = pkt.data();
        for i in 0..cut.segments() {
            let len = cut.seg_len(i);
            // This segment's outer IPv4 and UDP lengths and IPv4 checksum.
            let ip_len = (n - 14 + len) as u16;
            enc[16..18].copy_from_slice(&ip_len.to_be_bytes());
            enc[24..26].fill(0);
            let c = checksum::checksum(&enc[14..34]);
            enc[24..26].copy_from_slice(&c.to_be_bytes());
            enc[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
            let plan = match ue.plan_seal(self.id, enc, n + len) {
                Ok(p) => p,
                Err(reason) => {
                    tracing::debug!(port = %self.name, reason, "ESP: frame not sent");
                    self.stats.tx_dropped += 1;
                    continue;
                }
            };
            let id = self.id;
            let tunnel_hdrs = &enc[plan.plain_from..];
            // ESP header and IV, tunnel headers, the segment, padding,
            // trailer and ICV: the ESP packet, sealed where it lies.
            // (With `esp_seal_workers=2` the encryption waits for the
            // underlay's `seal_deferred`, before the batch is sent or a
            // buffer of it grown: the slot stays in a buffer of `tx`.)
            let write = |ue: &mut UnderlayEsp, slot: &mut [u8]| -> Result<(), &'static str> {
                let at = nicflow_ipsec::esp::ESP_HEADER_LEN + nicflow_ipsec::esp::ESP_IV_LEN;
                let k = at + tunnel_hdrs.len();
                slot[at..k].copy_from_slice(tunnel_hdrs);
                if !cut.write(frame, i, &mut slot[k..k + len]) {
                    return Err("malformed");
                }
                // SAFETY: the slot lies in a head of `tx` (or in the new
                // head pushed onto `tx` right after when this succeeds),
                // which stays put until `Underlay::flush` or a `grow`,
                // both of which call `seal_deferred` first.
                unsafe { ue.seal_planned_deferred(id, &plan, slot) }
            };
            let mut r = match b.head {
                Some(h) => {
                    udp_gso::append_with(&mut tx[h], plan.headers(), plan.esp_len, |s| write(ue, s))
                }
                None => Err(Refused::No),
            };
            if r == Err(Refused::NeedRoom) {
                // A head the ordinary way started in a small buffer.
                if let Some(h) = b.head {
                    // Growing copies the head elsewhere: its packets still
                    // waiting for encryption are sealed first.
                    ue.seal_deferred();
                    let big = take_gso_buf(gso_bufs, done, &mut counters.tx_gso_buf_allocs);
                    match udp_gso::grow(&mut tx[h], big) {
                        Ok(old) => {
                            done.push(old);
                            r = udp_gso::append_with(
                                &mut tx[h],
                                plan.headers(),
                                plan.esp_len,
                                |s| write(ue, s),
                            );
                        }
                        Err(big) => gso_bufs.push(big),
                    }
                }
            }
            let sealed = match r {
                Ok(r) => {
                    if r.is_ok() {
                        b.glued += 1;
                    }
                    r
                }
                Err(_) => {
                    // A new head: this packet whole, at the start of a
                    // buffer big enough for the super-frame it may begin.
                    let mut big = take_gso_buf(gso_bufs, done, &mut counters.tx_gso_buf_allocs);
                    big.clear();
                    let before = ue.deferred();
                    let whole = plan.hdr_len + plan.esp_len;
                    let r = match big.extend_back_unzeroed(whole) {
                        Some(d) => {
                            d[..plan.hdr_len].copy_from_slice(plan.headers());
                            write(ue, &mut d[plan.hdr_len..])
                        }
                        None => Err("too_big"),
                    };
                    if r.is_ok() {
                        // The head this one replaces is finished: its
                        // packets waiting for encryption go to the sealing
                        // worker (this head's first stays: it is written
                        // further).
                        ue.publish_deferred(before);
                        b.head = Some(tx.len());
                        tx.push(big);
                    } else {
                        gso_bufs.push(big);
                    }
                    r
                }
            };
            match sealed {
                Ok(()) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += len as u64;
                    self.esp_gso_in_place += 1;
                    b.sent += 1;
                }
                Err(reason) => {
                    tracing::debug!(port = %self.name, reason, "ESP: frame not sent");
                    self.stats.tx_dropped += 1;
                }
            }
        }
        done.push(pkt);
        Ok(())
    }
}

/// Longest tunnel encapsulation [`TunnelPort::seal_super_frame`] writes
/// (Ethernet, IPv4, UDP, Geneve with every option byte).
const ENCAP_MAX: usize = 14 + 20 + 8 + 8 + 256;

/// What one transmit batch of a tunnel port carries from frame to frame.
struct TxBatch {
    /// Glue ESP in UDP into super-frames (`esp_gso`, the underlay takes
    /// them)...
    glue: bool,
    /// ...or it would, but the underlay port takes no offloads: counted.
    fallback: bool,
    inner_mtu: usize,
    now: Instant,
    /// The remote's MAC, looked up once per batch.
    resolved: Option<Option<[u8; 6]>>,
    /// The super-frame being built in the underlay's `tx` (its index).
    head: Option<usize>,
    /// ESP packets glued behind a head.
    glued: u64,
    /// Frames sent (or queued to be).
    sent: usize,
}

/// The underlay port's own counters, renamed for the tunnel port's list,
/// from one read of them (`extra_counters` of an AF_PACKET port reads and
/// resets the kernel's `PACKET_STATISTICS`, so a second read would split a
/// burst of drops between the two).
///
/// Its receive of whole super-frames (`underlay_rx_udp_gso_whole`,
/// `underlay_rx_gso_whole`: UDP and TCP super-frames handed over in the
/// buffer they were received into, and `underlay_rx_buf_allocs`: buffers
/// its receive slots had to allocate in their place, a few until warm)
/// and its receive drops by reason, named
/// `underlay_port_rx_drop_*`: what the kernel or the port dropped before
/// the tunnel read it, so no `esp_rx_drop_*` or `underlay_rx_drop_*`
/// counter (the tunnel's own, after the read) sees it. The one that
/// matters under load is `underlay_port_rx_drop_ring_full`: a full packet
/// socket receive queue or ring (AF_PACKET `PACKET_STATISTICS`, e.g. a TC
/// underlay's upcall socket when the daemon falls behind) or AF_XDP ring
/// (`XDP_STATISTICS`). Counted in frames as the kernel counts them: one
/// dropped UDP super-frame is all the ESP packets it carried.
/// `underlay_port_rx_drop_other` is what the port counts as dropped
/// without a reason (its `rx_dropped` beyond the named ones), as the
/// bridge's drop summary does for its own ports; `stats` is read before
/// the named counters, so a drop between the two reads can only make it
/// smaller, never a count that falls later.
fn underlay_port_counters(port: &dyn Port) -> Vec<(&'static str, u64)> {
    let PortStats {
        rx_dropped,
        tx_packets,
        ..
    } = port.stats();
    let mut named = 0u64;
    let mut out: Vec<(&'static str, u64)> = port
        .extra_counters()
        .into_iter()
        .filter_map(|(k, v)| {
            let (name, drop) = match k {
                "rx_udp_gso_whole" => ("underlay_rx_udp_gso_whole", false),
                "rx_gso_whole" => ("underlay_rx_gso_whole", false),
                "rx_buf_allocs" => ("underlay_rx_buf_allocs", false),
                "rx_recvmmsg_calls" => ("underlay_rx_recvmmsg_calls", false),
                "rx_recvmmsg_empty" => ("underlay_rx_recvmmsg_empty", false),
                "rx_recvmmsg_frames" => ("underlay_rx_recvmmsg_frames", false),
                "tx_sendmmsg_calls" => ("underlay_tx_sendmmsg_calls", false),
                "rx_drop_ring_full" => ("underlay_port_rx_drop_ring_full", true),
                "rx_drop_kernel" => ("underlay_port_rx_drop_kernel", true),
                "rx_drop_truncated" => ("underlay_port_rx_drop_truncated", true),
                "rx_drop_oversize" => ("underlay_port_rx_drop_oversize", true),
                "rx_drop_invalid_desc" => ("underlay_port_rx_drop_invalid_desc", true),
                "rx_udp_gso_malformed" => ("underlay_port_rx_drop_udp_gso_malformed", true),
                _ => return None,
            };
            if drop {
                named += v;
            }
            Some((name, v))
        })
        .collect();
    out.push((
        "underlay_port_rx_drop_other",
        rx_dropped.saturating_sub(named),
    ));
    // Frames (UDP super-frames counted once) the underlay port sent: with
    // `underlay_tx_sendmmsg_calls`, the transmit batch.
    out.push(("underlay_tx_frames", tx_packets));
    out
}

impl Drop for TunnelPort {
    fn drop(&mut self) {
        self.underlay.borrow_mut().remove_endpoint(self.id);
    }
}

impl Port for TunnelPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.icmp.pop_front() else {
                break;
            };
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += p.len() as u64;
            out.push(p);
            n += 1;
        }
        let mut u = self.underlay.borrow_mut();
        // Read the underlay only when this port's queue cannot fill the
        // batch by itself (others' frames wait in their own queues).
        let queued = u.queues.get(&self.id).map_or(0, VecDeque::len);
        let r = if n + queued < max {
            u.poll(pool, Instant::now())
        } else {
            Ok(())
        };
        // Segments the underlay glued in the queue (`queue_slice`) count
        // as received and merged, as if glued here.
        if let Some(m) = u.queue_merged.get_mut(&self.id) {
            let (segs, bytes) = std::mem::take(m);
            self.stats.rx_packets += segs;
            self.stats.rx_bytes += bytes;
            self.gro_merged += segs;
        }
        if let Some(q) = u.queues.get_mut(&self.id) {
            let base = out.len();
            while n < max {
                let Some(p) = q.pop_front() else {
                    break;
                };
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += p.len() as u64;
                if !self.cfg.gro {
                    out.push(p);
                    n += 1;
                } else if coalesce(out, base, p, pool) {
                    self.gro_merged += 1;
                } else {
                    n += 1;
                }
            }
        }
        if n > 0 {
            return Ok(n);
        }
        r.map(|_| 0)
    }

    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        self.send_batch_at(pkts, done, Instant::now())
    }
    fn stats(&self) -> PortStats {
        self.stats.clone()
    }

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        let u = self.underlay.borrow();
        let c = u.counters;
        vec![
            ("tx_drop_mtu", self.tx_drop_mtu),
            ("rx_gro_merged", self.gro_merged),
            ("esp_tx_gso_frames", self.esp_gso_frames),
            ("esp_tx_gso_packets", self.esp_gso_packets),
            ("esp_tx_gso_fallback", self.esp_gso_fallback),
            ("esp_tx_gso_in_place", self.esp_gso_in_place),
            ("icmp_too_big_sent", self.icmp_too_big_sent),
            ("icmp_too_big_ratelimited", self.icmp_too_big_ratelimited),
            ("tx_drop_arp_pending", self.tx_drop_no_arp),
            ("underlay_rx_drop_not_tunnel", c.rx_not_tunnel),
            ("underlay_rx_drop_bad_tunnel", c.rx_bad_tunnel),
            ("underlay_rx_drop_no_endpoint", c.rx_no_endpoint),
            ("underlay_rx_drop_geneve_critical", c.rx_geneve_critical),
            ("underlay_rx_drop_queue_full", c.rx_queue_full),
            ("underlay_tx_drop_arp_pending", c.tx_arp_pending_drops),
            ("underlay_tx_dropped", c.tx_dropped),
            ("underlay_tx_gso_buf_allocs", c.tx_gso_buf_allocs),
            ("underlay_arp_requests_answered", c.arp_requests_answered),
            ("underlay_arp_requests_sent", c.arp_requests_sent),
            ("underlay_arp_replies_learned", c.arp_replies_learned),
        ]
        .into_iter()
        .chain(if self.cfg.ipsec.is_some() {
            u.esp.counters.list()
        } else {
            Vec::new()
        })
        .chain(underlay_port_counters(u.port.as_ref()))
        .collect()
    }

    /// The shared underlay's address: every tunnel port on it reports the
    /// same `underlay_*` / `esp_*` counters.
    fn shared_counters_id(&self) -> Option<usize> {
        Some(Rc::as_ptr(&self.underlay) as *const () as usize)
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        self.underlay.borrow().port.rx_fd()
    }

    /// The underlay's (shared by the tunnels on it: idempotent).
    fn housekeeping(&mut self) {
        self.underlay.borrow_mut().port.housekeeping();
    }

    fn has_deferred_work(&self) -> bool {
        let u = self.underlay.borrow();
        !self.icmp.is_empty()
            || u.queues.get(&self.id).is_some_and(|q| !q.is_empty())
            || u.port.has_deferred_work()
    }

    fn spin_worthwhile(&self) -> bool {
        self.underlay.borrow().port.spin_worthwhile()
    }

    /// A port with IPsec finishes offload work itself (`send_batch`): a
    /// TCP super-frame reaches it whole, to be cut straight into the UDP
    /// super-frame of ESP it leaves in (one copy of the payload instead of
    /// the bridge's cut plus a copy into the super-frame), and anything
    /// else is finished there before it is sealed. Without IPsec the
    /// bridge finishes frames first, as for any port.
    fn accepts_offloads(&self) -> bool {
        self.cfg.ipsec.is_some()
    }

    fn kind(&self) -> &'static str {
        kind_name(self.cfg.kind)
    }

    fn set_tlv_map(&mut self, map: &[TlvMapping]) -> bool {
        if self.cfg.kind != TunnelKind::Geneve {
            return false;
        }
        let map = if map.is_empty() {
            &self.own_tlv[..]
        } else {
            map
        };
        self.cfg.tlv_map = map.to_vec();
        self.underlay.borrow_mut().set_endpoint_tlv(self.id, map);
        true
    }

    fn offload_hook(&self) -> crate::OffloadHook {
        let u = self.underlay.borrow();
        crate::OffloadHook::Tunnel(crate::hook::TunnelHook {
            cfg: self.cfg.clone(),
            underlay_iface: u.iface.clone(),
            underlay: Box::new(u.offload_hook()),
            view: self.underlay.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments of two interleaved TCP connections (random sizes, PSH now
    /// and then, a lost segment now and then), coalesced as the tunnel's
    /// receive path does, then cut again as a port without offloads cuts
    /// them (`fixup::finish_offloads`): exactly the original segments, in
    /// each connection's order. Fixed seeds; each printed.
    #[test]
    fn coalesced_segments_cut_back_into_the_originals() {
        use nicflow_packet::builder::FrameBuilder;
        for seed in [1u64, 2, 3, 0x5eed, 20261203] {
            println!("seed {seed}");
            let mut x = seed;
            let mut rnd = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let mss = 200 + rnd(1200) as u32;
            let mut seq = [1000u32, 9000];
            let mut id = [7u16, 65530];
            let mut frames = Vec::new();
            for _ in 0..300 {
                let f = rnd(2) as usize;
                let len = if rnd(5) == 0 {
                    1 + rnd(mss as u64) as u32
                } else {
                    mss
                };
                let psh = rnd(7) == 0;
                let payload: Vec<u8> = (0..len).map(|k| (k ^ seq[f]) as u8).collect();
                let fr = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                    .ipv4(
                        Ipv4Addr::new(198, 18, 0, 1),
                        Ipv4Addr::new(198, 18, 0, 2 + f as u8),
                    )
                    .dont_fragment()
                    .ident(id[f])
                    .tcp(40000, 5201, if psh { 0x18 } else { 0x10 })
                    .tcp_seq(seq[f])
                    .tcp_ack(1)
                    .tcp_window(100)
                    .payload(&payload)
                    .build();
                seq[f] = seq[f].wrapping_add(len);
                id[f] = id[f].wrapping_add(1);
                if rnd(20) != 0 {
                    frames.push(fr);
                }
            }
            let (mut out, mut pool) = (Vec::new(), Vec::new());
            for f in &frames {
                let mut b = PacketBuf::with_capacity(2048);
                assert!(b.set_data(f));
                coalesce(&mut out, 0, b, &mut pool);
            }
            assert!(out.len() < frames.len() / 2, "seed {seed}: little merged");
            crate::finish_offloads(&mut out, &mut pool);
            let by_flow = |v: &[Vec<u8>], f: u8| -> Vec<Vec<u8>> {
                v.iter().filter(|x| x[14 + 19] == 2 + f).cloned().collect()
            };
            let got: Vec<Vec<u8>> = out.iter().map(|b| b.data().to_vec()).collect();
            for f in 0..2 {
                assert_eq!(
                    by_flow(&got, f),
                    by_flow(&frames, f),
                    "seed {seed} flow {f}"
                );
            }
        }
    }

    /// A receive batch of ten segments of one connection where segments 1
    /// and 6 have a wrong TCP checksum (one against a head without room,
    /// one after a head already glued: the payload is summed as it is
    /// copied, so that one is taken off again). Neither is merged nor
    /// merged into: the batch gives five frames, five segments counted
    /// merged (`coalesce` true, the port's `gro_merged`), the bad segments
    /// unchanged, and cut again the frames are exactly the ten segments.
    #[test]
    fn bad_checksum_segments_in_a_batch_are_not_merged_and_are_counted() {
        use nicflow_packet::builder::FrameBuilder;
        let mut frames: Vec<Vec<u8>> = (0..10u32)
            .map(|i| {
                let payload: Vec<u8> = (0..1000u32).map(|k| (k * 3 + i) as u8).collect();
                FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                    .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
                    .dont_fragment()
                    .ident(7 + i as u16)
                    .tcp(40000, 5201, 0x10)
                    .tcp_seq(1000 + 1000 * i)
                    .tcp_ack(1)
                    .tcp_window(100)
                    .payload(&payload)
                    .build()
            })
            .collect();
        for bad in [1, 6] {
            let at = frames[bad].len() - 500;
            frames[bad][at] ^= 0x08;
        }
        let (mut out, mut pool) = (Vec::new(), Vec::new());
        let mut merged = Vec::new();
        for f in &frames {
            let mut b = PacketBuf::with_capacity(2048);
            assert!(b.set_data(f));
            merged.push(coalesce(&mut out, 0, b, &mut pool));
        }
        let want_merged = [
            false, false, false, true, true, true, false, false, true, true,
        ];
        assert_eq!(merged, want_merged);
        assert_eq!(merged.iter().filter(|&&m| m).count(), 5);
        assert_eq!(out.len(), 5);
        assert_eq!(out[1].data(), &frames[1][..]);
        assert_eq!(out[3].data(), &frames[6][..]);
        assert_eq!(out[2].len(), frames[2].len() + 3 * 1000);
        assert_eq!(out[4].len(), frames[7].len() + 2 * 1000);
        crate::finish_offloads(&mut out, &mut pool);
        let got: Vec<Vec<u8>> = out.iter().map(|b| b.data().to_vec()).collect();
        assert_eq!(got, frames);
    }

    fn opts(kv: &[(&str, &str)]) -> nicflow_api::proto::PortOptions {
        kv.iter().copied().collect()
    }

    #[test]
    fn tlv_maps_parse_in_ovs_syntax_and_errors_name_the_entry() {
        let m = parse_tlv_map(
            "{class=0x0102,type=0x80,len=4}->tun_metadata0, {class=258,type=1,len=4}->tun_metadata7",
        )
        .unwrap();
        assert_eq!(
            m,
            vec![
                TlvMapping {
                    class: 0x0102,
                    typ: 0x80,
                    slot: 0
                },
                TlvMapping {
                    class: 258,
                    typ: 1,
                    slot: 7
                }
            ]
        );
        assert_eq!(parse_tlv_map("").unwrap(), vec![]);
        for (bad, says) in [
            ("{class=1,type=2,len=8}->tun_metadata0", "len=4"),
            ("{class=1,type=2,len=4}->tun_metadata8", "tun_metadata8"),
            ("{class=1,type=2,len=4}", "->tun_metadataN"),
            ("{class=1,len=4}->tun_metadata0", "needs class and type"),
            (
                "{class=0x10000,type=2,len=4}->tun_metadata0",
                "class=0x10000`: above 0xffff",
            ),
            (
                "{class=1,type=0x100,len=4}->tun_metadata0",
                "type=0x100`: above 0xff",
            ),
            (
                "{class=1,class=2,type=1,len=4}->tun_metadata0",
                "`class` twice",
            ),
            ("{class=1,colour=2,len=4}->tun_metadata0", "unknown key"),
            ("{class=1,type=2,len=4}->", "expected tun_metadata0"),
            (
                "{class=1,type=2,len=4}->tun_metadata0,{class=1,type=2,len=4}->tun_metadata1",
                "twice",
            ),
            (
                "{class=1,type=2,len=4}->tun_metadata0,{class=1,type=3,len=4}->tun_metadata0",
                "twice",
            ),
            ("class=1", "expected {"),
        ] {
            let e = parse_tlv_map(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // Geneve only; the overhead counts every mapped option.
        let mut o = opts(&[
            ("underlay", "eth1"),
            ("local_ip", "198.18.20.2"),
            ("remote_ip", "198.18.20.1"),
            ("tlv_map", "{class=1,type=2,len=4}->tun_metadata0"),
        ]);
        let e = TunnelConfig::from_options(TunnelKind::Vxlan, &o).unwrap_err();
        assert!(matches!(e, TunnelPortError::TlvMapNotGeneve), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("tlv_map"), "{e}");
        let c = TunnelConfig::from_options(TunnelKind::Geneve, &o).unwrap();
        assert_eq!(c.overhead(), 58);
        o.insert("tlv_map", "{class=1,type=2,len=5}->tun_metadata0");
        assert!(TunnelConfig::from_options(TunnelKind::Geneve, &o).is_err());
    }

    #[test]
    fn options_parse_with_defaults_and_errors_name_the_option() {
        let c = TunnelConfig::from_options(
            TunnelKind::Vxlan,
            &opts(&[
                ("underlay", "eth1"),
                ("local_ip", "198.18.20.2"),
                ("remote_ip", "198.18.20.1"),
                ("key", "4242"),
            ]),
        )
        .unwrap();
        assert_eq!(c.key, TunnelKey::Fixed(4242));
        assert_eq!((c.dst_port, c.csum, c.df, c.ttl), (4789, false, true, 64));
        assert_eq!(c.overhead(), 50);
        let g = TunnelConfig::from_options(
            TunnelKind::Geneve,
            &opts(&[
                ("underlay", "eth1"),
                ("local_ip", "198.18.20.2"),
                ("remote_ip", "198.18.20.1"),
                ("key", "flow"),
                ("csum", "true"),
            ]),
        )
        .unwrap();
        assert_eq!((g.key, g.dst_port, g.csum), (TunnelKey::Flow, 6081, true));
        for (bad, token) in [
            (
                vec![("remote_ip", "198.18.20.1"), ("underlay", "e")],
                "local_ip",
            ),
            (
                vec![
                    ("local_ip", "1.2.3.4"),
                    ("remote_ip", "x"),
                    ("underlay", "e"),
                ],
                "remote_ip=x",
            ),
            (
                vec![
                    ("local_ip", "198.18.0.1"),
                    ("remote_ip", "198.18.0.2"),
                    ("underlay", "e"),
                    ("key", "16777216"),
                ],
                "key=16777216",
            ),
            (
                vec![
                    ("local_ip", "198.18.0.1"),
                    ("remote_ip", "198.18.0.2"),
                    ("underlay", "e"),
                    ("colour", "red"),
                ],
                "`colour`",
            ),
            (
                vec![
                    ("local_ip", "2001:db8::1"),
                    ("remote_ip", "198.18.0.2"),
                    ("underlay", "e"),
                ],
                "IPv6",
            ),
        ] {
            let e = TunnelConfig::from_options(TunnelKind::Vxlan, &opts(&bad))
                .unwrap_err()
                .to_string();
            assert!(e.contains(token), "{e} should name {token}");
        }
    }

    #[test]
    fn too_big_reply_for_df_ipv4_and_ipv6_only() {
        // IPv4 UDP with DF.
        let mut f = vec![0u8; 14 + 1500];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&1500u16.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[198, 18, 1, 1]);
        ip[16..20].copy_from_slice(&[198, 18, 2, 1]);
        let c = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[20..22].copy_from_slice(&1000u16.to_be_bytes());
        ip[22..24].copy_from_slice(&2000u16.to_be_bytes());
        ip[24..26].copy_from_slice(&1480u16.to_be_bytes());
        let r = too_big_reply(&f, 1450).expect("reply");
        assert_eq!(&r[0..6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&r[6..12], &[2, 0, 0, 0, 0, 2]);
        let rip = &r[14..];
        assert_eq!(&rip[12..16], &[198, 18, 2, 1]);
        assert_eq!(&rip[16..20], &[198, 18, 1, 1]);
        assert_eq!(checksum::checksum(&rip[..20]), 0);
        assert_eq!((rip[20], rip[21]), (3, 4));
        assert_eq!(u16::from_be_bytes([rip[26], rip[27]]), 1450);
        assert_eq!(checksum::checksum(&rip[20..]), 0);
        assert!(r.len() <= 14 + 576);
        // Without DF: none (dropped and counted by the port).
        let mut nodf = f.clone();
        nodf[14 + 6] = 0;
        assert!(too_big_reply(&nodf, 1450).is_none());
    }

    /// An underlay dropped with packets deferred for the sealing worker
    /// (a batch abandoned, as on a panic's unwind) seals them before its
    /// buffers go: its sealer is never dropped with jobs left (which would
    /// seal into the freed buffers of `tx`, declared before `esp`).
    #[test]
    fn an_underlay_dropped_mid_batch_seals_before_its_buffers_go() {
        use nicflow_ipsec::esp::{Aead, OutboundSa, SaConfig};
        let u = mem_underlay(1500, Instant::now());
        let mut u = Rc::try_unwrap(u).ok().unwrap().into_inner();
        let mut out = OutboundSa::new(SaConfig::new(0x1077, Aead::AesGcm128, vec![9; 20])).unwrap();
        let sz = out.sealed_len(64);
        u.tx.push(PacketBuf::from_slice(&vec![0u8; 4 * sz]));
        for k in 0..4 {
            let t = out.reserve(sz, 64).unwrap();
            let slot = &mut u.tx[0].data_mut()[k * sz..(k + 1) * sz];
            // SAFETY: `tx[0]` is neither touched nor moved until the
            // underlay drops; its `Drop` seals first.
            unsafe { u.esp.sealer_mut().push(t, 4, slot, 64) };
        }
        u.esp.sealer_mut().publish(2);
        let before = crate::sealer::DROPPED_WITH_JOBS.with(std::cell::Cell::get);
        drop(u);
        assert_eq!(
            crate::sealer::DROPPED_WITH_JOBS.with(std::cell::Cell::get),
            before,
            "the sealer outlived the buffers of its jobs"
        );
    }

    /// An underlay on an in-memory port (no interface, MTU never re-read).
    fn mem_underlay(mtu: usize, now: Instant) -> Rc<RefCell<Underlay>> {
        let (port, _h) = crate::mem::MemPort::new("underlay:mem0");
        Rc::new(RefCell::new(Underlay::new(
            "mem0".into(),
            Box::new(port),
            [2, 0, 0, 0, 0, 0xaa],
            mtu,
            None,
            now,
        )))
    }

    fn tun_cfg(kind: TunnelKind, remote: [u8; 4], key: &str) -> TunnelConfig {
        TunnelConfig::from_options(
            kind,
            &opts(&[
                ("underlay", "mem0"),
                ("local_ip", "198.18.0.1"),
                ("remote_ip", &Ipv4Addr::from(remote).to_string()),
                ("key", key),
            ]),
        )
        .unwrap()
    }

    /// A tunnel frame to the underlay from `remote`.
    fn encapsulated(kind: TunnelKind, remote: [u8; 4], udp_dst: u16, vni: u32) -> PacketBuf {
        let mut inner = vec![0u8; 60];
        inner[0..6].copy_from_slice(&[2, 0, 0, 0, 1, 2]);
        inner[6..12].copy_from_slice(&[2, 0, 0, 0, 1, 1]);
        inner[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        let mut b = PacketBuf::from_slice(&inner);
        let e = Encap {
            kind,
            eth_src: [2, 0, 0, 0, 0, 0xbb],
            eth_dst: [2, 0, 0, 0, 0, 0xaa],
            ip_src: IpAddr::V4(remote.into()),
            ip_dst: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            tos: 0,
            ttl: 64,
            df: true,
            udp_src: 50000,
            udp_dst,
            csum: false,
            vni,
            geneve_options: &[],
            geneve_oam: false,
        };
        tunnel::encap(&mut b, &e).unwrap();
        b
    }

    #[test]
    fn receive_lookup_takes_the_exact_vni_then_key_flow_and_follows_removals() {
        let now = Instant::now();
        let h = mem_underlay(1500, now);
        let mut u = h.borrow_mut();
        let (r1, r2) = ([198, 18, 0, 2], [198, 18, 0, 3]);
        let a = u
            .add_endpoint(&tun_cfg(TunnelKind::Vxlan, r1, "10"))
            .unwrap();
        let b = u
            .add_endpoint(&tun_cfg(TunnelKind::Vxlan, r1, "20"))
            .unwrap();
        let c = u
            .add_endpoint(&tun_cfg(TunnelKind::Vxlan, r2, "flow"))
            .unwrap();
        let g = u
            .add_endpoint(&tun_cfg(TunnelKind::Geneve, r1, "10"))
            .unwrap();
        // The clash rules and their messages are unchanged.
        let e = u
            .add_endpoint(&tun_cfg(TunnelKind::Vxlan, r1, "flow"))
            .unwrap_err();
        assert!(matches!(e, TunnelPortError::EndpointTaken { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "underlay mem0: another tunnel port already receives vxlan from 198.18.0.2 \
             to 198.18.0.1 with key Flow"
        );
        let e = u
            .add_endpoint(&tun_cfg(TunnelKind::Vxlan, r2, "7"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("already receives vxlan from 198.18.0.3"), "{e}");
        let mut bad_port = tun_cfg(TunnelKind::Geneve, r2, "1");
        bad_port.dst_port = tunnel::VXLAN_PORT;
        let e = u.add_endpoint(&bad_port).unwrap_err();
        assert_eq!(
            e.to_string(),
            "underlay mem0: UDP port 4789 already carries vxlan, not geneve"
        );
        assert_eq!(
            u.udp_ports,
            vec![
                (tunnel::VXLAN_PORT, TunnelKind::Vxlan),
                (tunnel::GENEVE_PORT, TunnelKind::Geneve)
            ]
        );

        let mut pool = Vec::new();
        let mut deliver = |u: &mut Underlay, pkt: PacketBuf| -> Option<(u64, u64)> {
            u.dispatch(pkt, &mut pool, now);
            let got = u.queues.iter_mut().find_map(|(id, q)| {
                q.pop_front()
                    .map(|p| (*id, p.tun.expect("tunnel metadata").id))
            });
            assert!(u.queues.values().all(VecDeque::is_empty));
            got
        };
        let vx = tunnel::VXLAN_PORT;
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r1, vx, 10)),
            Some((a, 10))
        );
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r1, vx, 20)),
            Some((b, 20))
        );
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r2, vx, 99)),
            Some((c, 99))
        );
        assert_eq!(
            deliver(
                &mut u,
                encapsulated(TunnelKind::Geneve, r1, tunnel::GENEVE_PORT, 10)
            ),
            Some((g, 10))
        );
        // No endpoint for the VNI, the remote or the UDP port.
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r1, vx, 30)),
            None
        );
        assert_eq!(
            deliver(
                &mut u,
                encapsulated(TunnelKind::Vxlan, [198, 18, 0, 9], vx, 10)
            ),
            None
        );
        assert_eq!(u.counters.rx_no_endpoint, 2);
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r1, 4790, 10)),
            None
        );
        assert_eq!(u.counters.rx_not_tunnel, 1);

        // Removals re-index: the remaining endpoints still get their
        // frames; once r1's fixed endpoints are gone a key=flow one takes
        // every VNI.
        u.remove_endpoint(a);
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r1, vx, 10)),
            None
        );
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r2, vx, 5)),
            Some((c, 5))
        );
        u.remove_endpoint(b);
        let f = u
            .add_endpoint(&tun_cfg(TunnelKind::Vxlan, r1, "flow"))
            .unwrap();
        assert_eq!(
            deliver(&mut u, encapsulated(TunnelKind::Vxlan, r1, vx, 10)),
            Some((f, 10))
        );
        // The Geneve port gone, its UDP port is no longer a tunnel.
        u.remove_endpoint(g);
        assert_eq!(u.udp_ports, vec![(tunnel::VXLAN_PORT, TunnelKind::Vxlan)]);
        assert_eq!(
            deliver(
                &mut u,
                encapsulated(TunnelKind::Geneve, r1, tunnel::GENEVE_PORT, 10)
            ),
            None
        );
        assert_eq!(u.counters.rx_not_tunnel, 2);
    }

    /// An inner IPv4/UDP frame of `len` bytes with DF.
    fn df_frame(len: usize) -> PacketBuf {
        let mut f = vec![0u8; len];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[198, 19, 1, 1]);
        ip[16..20].copy_from_slice(&[198, 19, 2, 1]);
        let c = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[24..26].copy_from_slice(&((len - 34) as u16).to_be_bytes());
        PacketBuf::from_slice(&f)
    }

    fn counter(p: &TunnelPort, name: &str) -> u64 {
        p.extra_counters()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .1
    }

    /// An underlay port whose kernel dropped frames before they reached
    /// it (as a full upcall socket does): only its counters matter.
    struct DroppingPort;

    impl Port for DroppingPort {
        fn name(&self) -> &str {
            "underlay:drop0"
        }
        fn recv_batch(
            &mut self,
            _out: &mut Vec<PacketBuf>,
            _max: usize,
            _pool: &mut Vec<PacketBuf>,
        ) -> io::Result<usize> {
            Ok(0)
        }
        fn send_batch(
            &mut self,
            pkts: &mut Vec<PacketBuf>,
            done: &mut Vec<PacketBuf>,
        ) -> io::Result<usize> {
            let n = pkts.len();
            done.append(pkts);
            Ok(n)
        }
        fn stats(&self) -> PortStats {
            // 7 + 2 named below, 3 without a reason.
            PortStats {
                rx_dropped: 12,
                ..PortStats::default()
            }
        }
        fn extra_counters(&self) -> Vec<(&'static str, u64)> {
            vec![
                ("rx_drop_ring_full", 7),
                ("rx_udp_gso_malformed", 2),
                ("rx_gso_frames", 5),
                ("rx_gso_whole", 4),
            ]
        }
    }

    /// Frames the underlay port lost (the kernel's full receive queue of
    /// its socket, malformed super-frames, unnamed ones) show on the tunnel
    /// port by reason: no ESP counter sees them, and without these the
    /// ESP packets in a super-frame the kernel dropped went uncounted
    /// (issue 34, `bench ipsec --mode pps`).
    #[test]
    fn underlay_port_receive_drops_show_on_the_tunnel_port_by_reason() {
        let t0 = Instant::now();
        let u = Rc::new(RefCell::new(Underlay::new(
            "drop0".into(),
            Box::new(DroppingPort),
            [2, 0, 0, 0, 0, 0xaa],
            1500,
            None,
            t0,
        )));
        let mut cfg = tun_cfg(TunnelKind::Vxlan, [198, 18, 0, 2], "10");
        cfg.underlay = "drop0".into();
        let p = TunnelPort::attach("vx0", cfg, u, t0).unwrap();
        assert_eq!(counter(&p, "underlay_port_rx_drop_ring_full"), 7);
        assert_eq!(counter(&p, "underlay_port_rx_drop_udp_gso_malformed"), 2);
        assert_eq!(counter(&p, "underlay_port_rx_drop_other"), 3);
        // Not a drop, shown as the port's receive of whole super-frames.
        assert_eq!(counter(&p, "underlay_rx_gso_whole"), 4);
        // Not a drop: not renamed into one.
        assert!(p
            .extra_counters()
            .iter()
            .all(|(n, _)| !n.contains("gso_frames") || !n.starts_with("underlay_")));
    }

    #[test]
    fn too_big_replies_are_rate_limited_per_port_and_every_drop_counted() {
        let t0 = Instant::now();
        let u = mem_underlay(1500, t0);
        let mut p = TunnelPort::attach(
            "vx0",
            tun_cfg(TunnelKind::Vxlan, [198, 18, 0, 2], "10"),
            u,
            t0,
        )
        .unwrap();
        assert_eq!(p.inner_mtu(), 1450);
        let mut done = Vec::new();
        let mut send = |p: &mut TunnelPort, n: usize, at: Instant| {
            let mut pkts: Vec<PacketBuf> = (0..n).map(|_| df_frame(14 + 1500)).collect();
            assert_eq!(p.send_batch_at(&mut pkts, &mut done, at).unwrap(), 0);
            let mut replies = Vec::new();
            let mut pool = Vec::new();
            p.recv_batch(&mut replies, usize::MAX, &mut pool).unwrap();
            replies.len()
        };
        // A flood: the burst, then nothing until tokens come back.
        assert_eq!(send(&mut p, 200, t0), ICMP_TOO_BIG_BURST as usize);
        assert_eq!(send(&mut p, 10, t0 + Duration::from_micros(900)), 0);
        // One token per millisecond, fractions kept.
        assert_eq!(send(&mut p, 20, t0 + Duration::from_millis(10)), 10);
        assert_eq!(send(&mut p, 20, t0 + Duration::from_micros(15500)), 5);
        assert_eq!(send(&mut p, 20, t0 + Duration::from_micros(16100)), 1);
        // Idle long enough: a full burst, no more.
        assert_eq!(
            send(&mut p, 200, t0 + Duration::from_secs(5)),
            ICMP_TOO_BIG_BURST as usize
        );
        let sent = 50 + 10 + 5 + 1 + 50;
        let frames = 200 + 10 + 20 + 20 + 20 + 200;
        assert_eq!(counter(&p, "icmp_too_big_sent"), sent);
        assert_eq!(counter(&p, "icmp_too_big_ratelimited"), frames - sent);
        assert_eq!(counter(&p, "tx_drop_mtu"), frames);
        assert_eq!(p.stats().tx_dropped, frames);
        assert_eq!(p.stats().rx_packets, sent);
        // Frames that get no reply (no DF) are not counted as limited.
        let mut nodf = df_frame(14 + 1500);
        nodf.data_mut()[14 + 6] = 0;
        let mut pkts = vec![nodf];
        p.send_batch_at(&mut pkts, &mut done, t0 + Duration::from_secs(5))
            .unwrap();
        assert_eq!(counter(&p, "icmp_too_big_ratelimited"), frames - sent);
        assert_eq!(counter(&p, "tx_drop_mtu"), frames + 1);
    }

    #[test]
    fn underlay_mtu_is_reread_at_most_once_a_second() {
        let t0 = Instant::now();
        let u = mem_underlay(1500, t0);
        let p = TunnelPort::attach(
            "vx0",
            tun_cfg(TunnelKind::Vxlan, [198, 18, 0, 2], "10"),
            u.clone(),
            t0,
        )
        .unwrap();
        let reads = std::cell::Cell::new(0);
        let refresh = |at: Duration, mtu: io::Result<usize>| {
            u.borrow_mut().refresh_mtu_with(t0 + at, |iface| {
                assert_eq!(iface, "mem0");
                reads.set(reads.get() + 1);
                mtu
            });
        };
        refresh(Duration::from_millis(999), Ok(9000));
        assert_eq!((reads.get(), p.inner_mtu()), (0, 1450));
        refresh(Duration::from_secs(1), Ok(9000));
        assert_eq!((reads.get(), p.inner_mtu()), (1, 8950));
        refresh(Duration::from_millis(1500), Ok(1400));
        assert_eq!((reads.get(), p.inner_mtu()), (1, 8950));
        // A failed read keeps the last MTU.
        refresh(
            Duration::from_secs(2),
            Err(io::Error::from(io::ErrorKind::NotFound)),
        );
        assert_eq!((reads.get(), p.inner_mtu()), (2, 8950));
        refresh(Duration::from_secs(3), Ok(1400));
        assert_eq!((reads.get(), p.inner_mtu()), (3, 1350));
    }

    #[test]
    fn transmit_path_rereads_the_interface_mtu_through_the_control_socket() {
        // The loopback interface: SIOCGIFMTU needs no privilege.
        let ctl = crate::sys::control_socket().unwrap();
        let lo_mtu = crate::sys::interface_mtu(ctl.as_raw_fd(), "lo").unwrap();
        assert!(lo_mtu > 1500, "lo MTU {lo_mtu}");
        let t0 = Instant::now();
        let (port, _h) = crate::mem::MemPort::new("underlay:lo");
        let u = Rc::new(RefCell::new(Underlay::new(
            "lo".into(),
            Box::new(port),
            [2, 0, 0, 0, 0, 0xaa],
            1500,
            Some(ctl),
            t0,
        )));
        let mut cfg = tun_cfg(TunnelKind::Vxlan, [198, 18, 0, 2], "10");
        cfg.underlay = "lo".into();
        let mut p = TunnelPort::attach("vx0", cfg, u.clone(), t0).unwrap();
        let mut done = Vec::new();
        // Within the second: the open-time MTU; the frame is too big.
        let mut pkts = vec![df_frame(14 + 1500)];
        p.send_batch_at(&mut pkts, &mut done, t0 + Duration::from_millis(10))
            .unwrap();
        assert_eq!(counter(&p, "tx_drop_mtu"), 1);
        // A second later the send re-reads it and the frame fits (it waits
        // for ARP, the remote being nowhere).
        let mut pkts = vec![df_frame(14 + 1500)];
        p.send_batch_at(&mut pkts, &mut done, t0 + Duration::from_secs(1))
            .unwrap();
        assert_eq!(u.borrow().mtu(), lo_mtu);
        assert_eq!(counter(&p, "tx_drop_mtu"), 1);
        assert_eq!(p.inner_mtu(), lo_mtu - 50);
    }

    /// The MACs of the two ends of the in-memory ESP tunnel pair.
    const ESP_MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa1];
    const ESP_MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb2];

    /// One end of the ESP tunnel pair the in-memory tests build: the
    /// sender (198.18.0.1, SPI 0x2001 out) or the receiver (198.18.0.2),
    /// with `extra` options, the peer's MAC already known, sequence
    /// numbers from 1 (its own state directory `dir`).
    fn esp_end_over_mem(
        dir: std::path::PathBuf,
        extra: &[(&str, &str)],
        sender: bool,
        t0: Instant,
    ) -> (TunnelPort, crate::mem::MemHandle) {
        super::super::ipsec::set_state_dir(Some(dir));
        let (port, h) = crate::mem::MemPort::with_offloads("underlay:m");
        let (u, p) = esp_end_on(port, extra, sender, t0);
        let mut e = ArpEntry::new();
        e.mac = Some(if sender { ESP_MAC_B } else { ESP_MAC_A });
        e.confirmed = Some(t0);
        let peer = if sender {
            [198, 18, 0, 2]
        } else {
            [198, 18, 0, 1]
        };
        u.borrow_mut().arp.insert(Ipv4Addr::from(peer), e);
        (p, h)
    }

    /// [`esp_end_over_mem`]'s end on a given underlay `port`, with no ARP
    /// entry and the state directory as it is: the underlay and the port.
    fn esp_end_on(
        port: crate::mem::MemPort,
        extra: &[(&str, &str)],
        sender: bool,
        t0: Instant,
    ) -> (Rc<RefCell<Underlay>>, TunnelPort) {
        const K1: &str = "0x0102030405060708090a0b0c0d0e0f1011121314";
        const K2: &str = "0x1112131415161718191a1b1c1d1e1f2021222324";
        let (mac, local, remote, spis, keys) = if sender {
            (
                ESP_MAC_A,
                "198.18.0.1",
                "198.18.0.2",
                ("0x2001", "0x2002"),
                (K1, K2),
            )
        } else {
            (
                ESP_MAC_B,
                "198.18.0.2",
                "198.18.0.1",
                ("0x2002", "0x2001"),
                (K2, K1),
            )
        };
        let (u, cfg) = esp_vxlan_over_mem(port, mac, (local, remote), spis, keys, extra, t0);
        let p = TunnelPort::attach("vx0", cfg, u.clone(), t0).unwrap();
        (u, p)
    }

    /// A VXLAN port (key 10) with manual-key ESP in UDP over a fresh
    /// in-memory underlay `mem0` on `port`: the underlay and the port's
    /// configuration, `extra` options last.
    fn esp_vxlan_over_mem(
        port: crate::mem::MemPort,
        mac: [u8; 6],
        (local, remote): (&str, &str),
        spis: (&str, &str),
        keys: (&str, &str),
        extra: &[(&str, &str)],
        t0: Instant,
    ) -> (Rc<RefCell<Underlay>>, TunnelConfig) {
        let u = Rc::new(RefCell::new(Underlay::new(
            "mem0".into(),
            Box::new(port),
            mac,
            1500,
            None,
            t0,
        )));
        let mut o = vec![
            ("underlay", "mem0"),
            ("local_ip", local),
            ("remote_ip", remote),
            ("key", "10"),
            ("ipsec", "manual"),
            ("esp_spi_out", spis.0),
            ("esp_key_out", keys.0),
            ("esp_spi_in", spis.1),
            ("esp_key_in", keys.1),
            ("esp_encap", "udp"),
        ];
        o.extend_from_slice(extra);
        let cfg = TunnelConfig::from_options(TunnelKind::Vxlan, &opts(&o)).unwrap();
        (u, cfg)
    }

    /// `esp_gso`: the ESP-in-UDP packets a batch seals for the peer leave
    /// as one UDP super-frame (same size each, the last may be shorter;
    /// a packet after a short one starts anew), which cut as the kernel
    /// or the receiving port cuts it opens into the very frames sent. An
    /// underlay port without offloads, or `esp_gso=false`, sends them one
    /// by one (the former counted as fallback).
    #[test]
    fn esp_in_udp_batches_leave_as_one_udp_super_frame_and_open_back() {
        use nicflow_packet::udp_gso::{plan, SegCsum};
        let dir = std::env::temp_dir().join(format!("nf-esp-gso-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        super::super::ipsec::set_state_dir(Some(dir.clone()));
        let t0 = Instant::now();
        let end = |port: crate::mem::MemPort, sender: bool, gso: &str| {
            esp_end_on(
                port,
                &[("esp_mode", "tunnel"), ("esp_gso", gso)],
                sender,
                t0,
            )
        };
        let inner = |i: usize, len: usize| {
            let mut f = vec![(i * 7) as u8; len];
            f[0..6].copy_from_slice(&[2, 0, 0, 0, 1, 2]);
            f[6..12].copy_from_slice(&[2, 0, 0, 0, 1, 1]);
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            let mut b = PacketBuf::with_capacity(2048);
            b.set_data(&f);
            b
        };
        // 10 full frames, a short one, one more full.
        let lens: Vec<usize> = (0..12).map(|i| if i == 10 { 500 } else { 1000 }).collect();
        for (offloads, gso, glued) in [
            (true, "true", true),
            (false, "true", false),
            (true, "false", false),
        ] {
            let (tx_port, tx_h) = if offloads {
                crate::mem::MemPort::with_offloads("underlay:a")
            } else {
                crate::mem::MemPort::new("underlay:a")
            };
            let (a, mut pa) = end(tx_port, true, gso);
            let mut e = ArpEntry::new();
            e.mac = Some(ESP_MAC_B);
            e.confirmed = Some(t0);
            a.borrow_mut().arp.insert(Ipv4Addr::new(198, 18, 0, 2), e);
            let (rx_port, rx_h) = crate::mem::MemPort::new("underlay:b");
            let (_b, mut pb) = end(rx_port, false, gso);
            let sent: Vec<PacketBuf> = lens.iter().enumerate().map(|(i, &l)| inner(i, l)).collect();
            let mut pkts = sent.clone();
            let mut done = Vec::new();
            let n = pa.send_batch_at(&mut pkts, &mut done, t0).unwrap();
            assert_eq!(n, 12, "{:?} {:?}", pa.extra_counters(), pa.stats());
            let out = tx_h.take_tx_offloads();
            let mut wire = Vec::new();
            if glued {
                assert_eq!(out.len(), 2, "one super-frame of 11, one packet");
                let o = out[0].1.expect("super-frame");
                assert_eq!(o.gso_type, GsoType::UdpL4);
                assert!(out[1].1.is_none());
                let cut = plan(&out[0].0, o.gso_size).unwrap();
                assert_eq!(cut.segments(), 11);
                for i in 0..11 {
                    let mut b = PacketBuf::with_capacity(2048);
                    assert!(cut.write(&out[0].0, i, &mut b, SegCsum::Partial));
                    wire.push(b.data().to_vec());
                }
                wire.push(out[1].0.clone());
                assert_eq!(counter(&pa, "esp_tx_gso_frames"), 1);
                assert_eq!(counter(&pa, "esp_tx_gso_packets"), 11);
            } else {
                assert_eq!(out.len(), 12);
                assert!(out.iter().all(|(_, o)| o.is_none()));
                wire.extend(out.into_iter().map(|(f, _)| f));
                assert_eq!(counter(&pa, "esp_tx_gso_frames"), 0);
            }
            let fallback = if !offloads { 12 } else { 0 };
            assert_eq!(
                counter(&pa, "esp_tx_gso_fallback"),
                fallback,
                "{offloads} {gso}"
            );
            for f in &wire {
                rx_h.inject(f);
            }
            let mut got = Vec::new();
            let mut pool = Vec::new();
            pb.recv_batch(&mut got, 64, &mut pool).unwrap();
            assert_eq!(got.len(), 12, "{offloads} {gso}");
            for (g, s) in got.iter().zip(&sent) {
                assert_eq!(g.data(), s.data());
            }
            assert_eq!(counter(&pb, "esp_rx_packets"), 12);
        }
        super::super::ipsec::set_state_dir(None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Small frames over many batches with `esp_gso`, their buffers taken
    /// from what the port gave back (`done`), last in first out, as the
    /// bridge's pool hands them out (`fill`: one that does not fit is put
    /// back and a receive-sized one allocated). The ARP refresh at the
    /// start of the run must not leave a buffer in that pool too small
    /// for a frame's ESP packet (issue 34: one ESP packet per UDP
    /// super-frame dropped as `esp_tx_drop_too_big`); every frame is
    /// sealed, glued and opened back, in both ESP modes.
    #[test]
    fn small_frames_over_many_batches_all_sealed_from_recycled_buffers() {
        use nicflow_packet::udp_gso::{plan, SegCsum};
        let dir = std::env::temp_dir().join(format!("nf-esp-small-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        super::super::ipsec::set_state_dir(Some(dir.clone()));
        let t0 = Instant::now();
        // A 60-byte UDP frame (64 on the wire with the FCS), as the
        // packet-rate benchmark's generator sends.
        let inner = |n: u32| {
            let mut f = vec![0u8; 60];
            f[0..6].copy_from_slice(&[2, 0, 0, 0, 1, 2]);
            f[6..12].copy_from_slice(&[2, 0, 0, 0, 1, 1]);
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            f[14] = 0x45;
            f[16..18].copy_from_slice(&46u16.to_be_bytes());
            f[22] = 64;
            f[23] = 17;
            f[26..30].copy_from_slice(&[198, 18, 62, 1]);
            f[30..34].copy_from_slice(&[198, 18, 62, 101]);
            let c = checksum::checksum(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            f[34..36].copy_from_slice(&9000u16.to_be_bytes());
            f[36..38].copy_from_slice(&9001u16.to_be_bytes());
            f[38..40].copy_from_slice(&26u16.to_be_bytes());
            f[42..46].copy_from_slice(&n.to_be_bytes());
            f
        };
        for mode in ["tunnel", "transport"] {
            let end = |port, sender| esp_end_on(port, &[("esp_mode", mode)], sender, t0);
            let (tx_port, tx_h) = crate::mem::MemPort::with_offloads("underlay:a");
            let (a, mut pa) = end(tx_port, true);
            // The peer's MAC is known but old: the first batch asks again
            // (an ARP request goes out with it).
            let mut e = ArpEntry::new();
            e.mac = Some(ESP_MAC_B);
            e.confirmed = Some(t0);
            a.borrow_mut().arp.insert(Ipv4Addr::new(198, 18, 0, 2), e);
            let (rx_port, rx_h) = crate::mem::MemPort::new("underlay:b");
            let (_b, mut pb) = end(rx_port, false);
            let now = t0 + ARP_REFRESH + Duration::from_secs(1);
            let mut pool: Vec<PacketBuf> = Vec::new();
            let (batches, per_batch) = (20u32, 40u32);
            let (mut sent, mut got) = (Vec::new(), Vec::new());
            let mut rx_pool = Vec::new();
            for k in 0..batches {
                let mut pkts = Vec::new();
                for i in 0..per_batch {
                    let f = inner(k * per_batch + i);
                    let mut b = pool.pop().unwrap_or_default();
                    if !b.set_data(&f) {
                        pool.push(b);
                        b = PacketBuf::with_capacity(crate::fixup::RX_BUF_CAPACITY);
                        assert!(b.set_data(&f));
                    }
                    sent.push(f);
                    pkts.push(b);
                }
                let n = pa.send_batch_at(&mut pkts, &mut pool, now).unwrap();
                assert_eq!(
                    n,
                    per_batch as usize,
                    "{mode} batch {k}: {:?}",
                    pa.extra_counters()
                );
                for (f, o) in tx_h.take_tx_offloads() {
                    match o {
                        Some(o) => {
                            let cut = plan(&f, o.gso_size).unwrap();
                            for i in 0..cut.segments() {
                                let mut b = PacketBuf::with_capacity(2048);
                                assert!(cut.write(&f, i, &mut b, SegCsum::Partial));
                                rx_h.inject(b.data());
                            }
                        }
                        // The ARP request.
                        None if f[12..14] == [0x08, 0x06] => {}
                        None => rx_h.inject(&f),
                    }
                }
                while rx_h.rx_pending() > 0 {
                    pb.recv_batch(&mut got, 256, &mut rx_pool).unwrap();
                }
            }
            let c = pa.extra_counters();
            assert!(
                c.iter()
                    .all(|(n, v)| !n.starts_with("esp_tx_drop") || *v == 0),
                "{mode}: {c:?}"
            );
            // No buffer too small for its frame's ESP packet came round.
            assert_eq!(counter(&pa, "esp_tx_buf_grown"), 0, "{mode}");
            assert_eq!(counter(&pa, "esp_tx_packets"), (batches * per_batch) as u64);
            assert!(counter(&pa, "esp_tx_gso_frames") >= batches as u64);
            assert_eq!(got.len(), sent.len(), "{mode}: {:?}", pb.extra_counters());
            for (g, s) in got.iter().zip(&sent) {
                assert_eq!(g.data(), &s[..], "{mode}");
            }
        }
        super::super::ipsec::set_state_dir(None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Full transmit batches of TCP super-frames (32 of ~60 KB, as the
    /// bridge hands over at 4 streams) sealed into UDP super-frames,
    /// batch after batch, with the finished buffers recycled as the bridge
    /// does: big buffers are allocated for the first batch only
    /// (`underlay_tx_gso_buf_allocs`), and every segment is sealed in
    /// place with no drop. Before, an underlay kept 8 big buffers and
    /// allocated a zeroed 64 KiB one for every UDP super-frame beyond 8 in
    /// every batch.
    #[test]
    fn full_batches_of_super_frames_allocate_no_big_buffer_once_warm() {
        use nicflow_packet::buf::Offload;
        let dir = std::env::temp_dir().join(format!("nf-esp-warm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t0 = Instant::now();
        let (a, b): (Ipv4Addr, Ipv4Addr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        for mode in ["tunnel", "transport"] {
            let (mut pa, h) = esp_end_over_mem(dir.join(mode), &[("esp_mode", mode)], true, t0);
            let mss = pa.inner_mtu() - 40;
            let segs_per = 60_000 / mss;
            let payload: Vec<u8> = (0..segs_per * mss).map(|k| (k * 7) as u8).collect();
            let frame = FrameBuilder::new([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2])
                .ipv4(a, b)
                .tcp(40000, 5201, 0x18)
                .payload(&payload)
                .build();
            // The bridge's pool: what the port hands back, reused for the
            // next batch's super-frames (receive buffers of a slot's size).
            let mut pool: Vec<PacketBuf> = Vec::new();
            let (batches, per_batch) = (12, 32);
            let mut after_first = 0;
            for k in 0..batches {
                let mut pkts = Vec::new();
                for _ in 0..per_batch {
                    let mut p = match pool.iter().rposition(nicflow_packet::udp_gso::is_big) {
                        Some(i) => pool.swap_remove(i),
                        None => PacketBuf::with_capacity(65_792),
                    };
                    assert!(p.set_data(&frame));
                    p.offload = Some(Offload {
                        gso_type: GsoType::TcpV4,
                        gso_size: mss as u16,
                        hdr_len: 14 + 20 + 20,
                        csum_start: 14 + 20,
                        csum_offset: 16,
                        csum_partial: true,
                    });
                    pkts.push(p);
                }
                let n = pa.send_batch_at(&mut pkts, &mut pool, t0).unwrap();
                assert_eq!(n, per_batch * segs_per, "{mode} batch {k}");
                let sent = h.take_tx_offloads();
                assert!(
                    sent.len() > 8 && sent.len() <= per_batch + 2,
                    "{mode} batch {k}: {} UDP super-frames",
                    sent.len()
                );
                if k == 0 {
                    after_first = counter(&pa, "underlay_tx_gso_buf_allocs");
                    assert!(after_first <= sent.len() as u64, "{mode}");
                }
            }
            assert_eq!(
                counter(&pa, "underlay_tx_gso_buf_allocs"),
                after_first,
                "{mode}: big buffers allocated after the first batch"
            );
            assert_eq!(
                counter(&pa, "esp_tx_gso_in_place"),
                (batches * per_batch * segs_per) as u64,
                "{mode}"
            );
            let c = pa.extra_counters();
            assert!(
                c.iter().all(|(n, v)| !n.contains("drop") || *v == 0),
                "{mode}: {c:?}"
            );
            assert_eq!(pa.stats().tx_dropped, 0, "{mode}");
        }
        super::super::ipsec::set_state_dir(None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A TCP super-frame sealed segment by segment straight into the UDP
    /// super-frame (`seal_super_frame`) gives exactly the frames of the
    /// ordinary way (the bridge cuts it, each segment is encapsulated,
    /// sealed in its own buffer and glued) for the same sequence numbers,
    /// offload state and counters included, in both ESP modes and around
    /// small frames, full-size single frames, super-frames that continue
    /// one another, ones of more than 64 segments and ones too big for the
    /// tunnel; and the receiver opens them back into the segments.
    #[test]
    fn super_frames_sealed_in_place_equal_the_ordinary_way() {
        use nicflow_packet::buf::Offload;
        use nicflow_packet::udp_gso::{plan, SegCsum};
        let base = std::env::temp_dir().join(format!("nf-esp-fused-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let t0 = Instant::now();
        let mut run = 0;
        // A port of a fresh underlay, sequence numbers from 1 (its own
        // state directory).
        let mut end = |mode: &str, workers: &str, sender: bool| {
            run += 1;
            esp_end_over_mem(
                base.join(run.to_string()),
                &[
                    ("esp_mode", mode),
                    ("gro", "false"),
                    ("esp_seal_workers", workers),
                ],
                sender,
                t0,
            )
        };
        let (a, b): (Ipv4Addr, Ipv4Addr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let (m1, m2) = ([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2]);
        // A TCP frame of `len` payload bytes; a super-frame of `gso` when
        // `gso` > 0, a partial checksum when `partial`.
        let tcp = |seq: u32, len: usize, gso: u16, partial: bool| {
            let payload: Vec<u8> = (0..len).map(|k| (k * 13 + seq as usize) as u8).collect();
            let f = FrameBuilder::new(m1, m2)
                .ipv4(a, b)
                .ident(seq as u16)
                .tcp(40000, 5201, 0x18)
                .tcp_seq(seq)
                .payload(&payload)
                .build();
            // Room behind the frame, as the bridge's buffers have.
            let mut p = PacketBuf::with_capacity(f.len() + 2048);
            assert!(p.set_data(&f));
            if gso > 0 || partial {
                p.offload = Some(Offload {
                    gso_type: if gso > 0 {
                        GsoType::TcpV4
                    } else {
                        GsoType::None
                    },
                    gso_size: gso,
                    hdr_len: 14 + 20 + 20,
                    csum_start: 14 + 20,
                    csum_offset: 16,
                    csum_partial: true,
                });
            }
            p
        };
        // (Both sealing settings: with two threads the packets sealed in
        // place are encrypted by the worker or the daemon's thread, and
        // the bytes must not change.)
        for (mode, workers) in [
            ("tunnel", "1"),
            ("tunnel", "2"),
            ("transport", "1"),
            ("transport", "2"),
        ] {
            let (probe, _) = end(mode, workers, true);
            let mss = probe.inner_mtu() - 40;
            drop(probe);
            let g = mss as u16;
            let cases: Vec<(&str, Vec<PacketBuf>)> = vec![
                (
                    "acks around a super-frame",
                    vec![
                        tcp(1, 0, 0, true),
                        tcp(100, 10 * mss + 500, g, false),
                        tcp(2, 0, 0, false),
                    ],
                ),
                (
                    "super-frames continuing one another",
                    vec![
                        tcp(100, 8 * mss, g, true),
                        tcp(200_000, 5 * mss + 100, g, true),
                        tcp(300_000, 3 * mss, g, true),
                    ],
                ),
                (
                    "more than 64 segments",
                    vec![tcp(100, 60_000, 600, true), tcp(7, 1, 0, false)],
                ),
                (
                    "a full-size single frame starts the head",
                    vec![tcp(5, mss, 0, true), tcp(100, 4 * mss + 1, g, true)],
                ),
                (
                    "segments too big for the tunnel",
                    vec![tcp(100, 3 * (mss + 10), g + 10, true), tcp(9, 10, 0, false)],
                ),
            ];
            for (what, batch) in cases {
                let (mut fused, fh) = end(mode, workers, true);
                let mut pkts = batch.clone();
                let mut done = Vec::new();
                let n = fused.send_batch_at(&mut pkts, &mut done, t0).unwrap();
                let got = fh.take_tx_offloads();
                // The ordinary way: the bridge finishes the batch first.
                let (mut plain, ph) = end(mode, workers, true);
                let mut pkts = batch.clone();
                let mut pool = Vec::new();
                crate::finish_offloads(&mut pkts, &mut pool);
                let segments: Vec<PacketBuf> = pkts.clone();
                let n2 = plain.send_batch_at(&mut pkts, &mut done, t0).unwrap();
                let want = ph.take_tx_offloads();
                assert_eq!(n, n2, "{mode} {what}");
                assert_eq!(got.len(), want.len(), "{mode} {what}");
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.1, w.1, "{mode} {what}: frame {k} offload");
                    assert!(g.0 == w.0, "{mode} {what}: frame {k} bytes differ");
                }
                // The same counters, but the one that says which way
                // the segments went, the big buffers allocated (the
                // two ways find different buffers at hand) and the
                // sealing worker's (only the in-place way defers).
                let in_place = counter(&fused, "esp_tx_gso_in_place");
                assert_eq!(counter(&plain, "esp_tx_gso_in_place"), 0);
                let others = |p: &TunnelPort| {
                    let mut c = p.extra_counters();
                    c.retain(|(k, _)| {
                        *k != "esp_tx_gso_in_place"
                            && *k != "underlay_tx_gso_buf_allocs"
                            && !k.starts_with("esp_tx_seal")
                    });
                    c
                };
                assert_eq!(others(&fused), others(&plain), "{mode} {what}");
                assert_eq!(fused.stats(), plain.stats(), "{mode} {what}");
                if what.contains("too big") {
                    assert_eq!(counter(&fused, "tx_drop_mtu"), 3, "{mode}");
                    assert_eq!(in_place, 0, "{mode}: the ordinary way drops them");
                    continue;
                }
                // Two threads: every packet sealed in place was encrypted
                // by one of them (and none with one).
                let shared = counter(&fused, "esp_tx_sealed_by_worker")
                    + counter(&fused, "esp_tx_sealed_by_main");
                let want_shared = if workers == "2" { in_place } else { 0 };
                assert_eq!(shared, want_shared, "{mode} {workers} {what}");
                let cut: u64 = batch
                    .iter()
                    .filter(|p| p.offload.is_some_and(|o| o.is_gso()))
                    .map(|p| {
                        let l = nicflow_packet::parse(p.data()).unwrap();
                        let hdrs = usize::from(l.l4_offset) + 20;
                        (p.len() - hdrs).div_ceil(usize::from(p.offload.unwrap().gso_size)) as u64
                    })
                    .sum();
                assert_eq!(in_place, cut, "{mode} {what}: every segment in place");
                assert!(counter(&fused, "esp_tx_gso_frames") >= 1, "{mode} {what}");
                // The receiver opens every ESP packet back into its segment.
                let (mut rx, rh) = end(mode, workers, false);
                for (f, o) in &got {
                    match o {
                        Some(o) => {
                            let cut = plan(f, o.gso_size).unwrap();
                            for i in 0..cut.segments() {
                                let mut d = PacketBuf::with_capacity(2048);
                                assert!(cut.write(f, i, &mut d, SegCsum::Partial));
                                rh.inject(d.data());
                            }
                        }
                        None => rh.inject(f),
                    }
                }
                let mut out = Vec::new();
                while rx.recv_batch(&mut out, 64, &mut pool).unwrap() > 0 {}
                assert_eq!(
                    out.len(),
                    segments.len(),
                    "{mode} {what}: {:?} {:?}",
                    rx.extra_counters(),
                    rx.stats()
                );
                for (o, s) in out.iter().zip(&segments) {
                    assert_eq!(o.data(), s.data(), "{mode} {what}");
                }
            }
        }
        super::super::ipsec::set_state_dir(None);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// UDP super-frames of ESP handed over whole and opened where they lie
    /// (`dispatch_udp_super_frame`, segments glued in the queue) give
    /// exactly what the port's cut gave (each datagram in a buffer of its
    /// own, opened, glued by the port's coalescing): the same frames,
    /// offload state and tunnel metadata included, and the same counters,
    /// drops by reason included, with a forged datagram, one of an unknown
    /// SPI and a replayed super-frame in the input, in both ESP modes.
    #[test]
    fn udp_super_frames_opened_in_place_equal_the_cut_way() {
        use nicflow_packet::buf::Offload;
        use nicflow_packet::udp_gso::{plan, SegCsum};
        let base = std::env::temp_dir().join(format!("nf-esp-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let t0 = Instant::now();
        let mut run = 0;
        let mut end = |mode: &str, gro: &str, sender: bool| {
            run += 1;
            esp_end_over_mem(
                base.join(run.to_string()),
                &[("esp_mode", mode), ("gro", gro)],
                sender,
                t0,
            )
        };
        let (a, b): (Ipv4Addr, Ipv4Addr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let (m1, m2) = ([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2]);
        let tcp = |seq: u32, len: usize, gso: u16| {
            let payload: Vec<u8> = (0..len).map(|k| (k * 13 + seq as usize) as u8).collect();
            let f = FrameBuilder::new(m1, m2)
                .ipv4(a, b)
                .ident(seq as u16)
                .tcp(40000, 5201, 0x10)
                .tcp_seq(seq)
                .payload(&payload)
                .build();
            let mut p = PacketBuf::with_capacity(f.len() + 2048);
            assert!(p.set_data(&f));
            if gso > 0 {
                p.offload = Some(Offload {
                    gso_type: GsoType::TcpV4,
                    gso_size: gso,
                    hdr_len: 14 + 20 + 20,
                    csum_start: 14 + 20,
                    csum_offset: 16,
                    csum_partial: true,
                });
            }
            p
        };
        for (mode, gro) in [
            ("tunnel", "true"),
            ("transport", "true"),
            ("tunnel", "false"),
        ] {
            let (mut tx, th) = end(mode, gro, true);
            let mss = tx.inner_mtu() - 40;
            let g = mss as u16;
            let s1 = 10 * mss as u32 + 500;
            let batch = vec![
                tcp(1, 0, 0),
                tcp(100, 10 * mss + 500, g),
                tcp(100 + s1, 8 * mss, g),
                tcp(200_000, 5 * mss + 100, g),
                tcp(2, 0, 0),
            ];
            let mut pkts = batch.clone();
            let mut done = Vec::new();
            tx.send_batch_at(&mut pkts, &mut done, t0).unwrap();
            let wire = th.take_tx_offloads();
            let supers: Vec<usize> = (0..wire.len()).filter(|&k| wire[k].1.is_some()).collect();
            assert!(!supers.is_empty(), "{mode}: {wire:?}");
            // A forged copy of the first super-frame (datagram 2's
            // ciphertext flipped, datagram 3's SPI unknown) first, the
            // real frames, then the first super-frame replayed.
            let (f0, o0) = wire[supers[0]].clone();
            let o0 = o0.unwrap();
            let cut = plan(&f0, o0.gso_size).unwrap();
            assert!(cut.segments() > 4, "{mode}");
            let mut forged = f0.clone();
            let r2 = cut.payload_range(2).unwrap();
            forged[r2.start + 40] ^= 1;
            let r3 = cut.payload_range(3).unwrap();
            forged[r3.start] ^= 0x80;
            // Two more: the first super-frame with datagram 1 turned into
            // IKE's non-ESP marker (taken as a datagram of its own, after
            // the opening of datagram 0 overwrote the frame's headers in
            // transport mode), and cut short so that its last datagram has
            // 5 bytes (not ESP either).
            let mut marker = f0.clone();
            let r1 = cut.payload_range(1).unwrap();
            marker[r1.start..r1.start + 4].fill(0);
            let last = cut.payload_range(4).unwrap();
            marker.truncate(last.start + 5);
            let ip_len = (marker.len() - 14) as u16;
            marker[16..18].copy_from_slice(&ip_len.to_be_bytes());
            marker[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
            assert_eq!(plan(&marker, o0.gso_size).unwrap().segments(), 5);
            let mut input = vec![(forged, Some(o0))];
            input.extend(wire.iter().cloned());
            input.push((f0, Some(o0)));
            input.push((marker, Some(o0)));
            // The cut way: each datagram injected on its own, as the
            // port cut it; in place: super-frames whole.
            let (mut cut_rx, ch) = end(mode, gro, false);
            let (mut whole_rx, wh) = end(mode, gro, false);
            let mut datagrams = 0;
            for (f, o) in &input {
                match o {
                    Some(o) => {
                        let mut offload = *o;
                        offload.gso_type = GsoType::UdpL4;
                        wh.inject_with_offload(f, Some(offload));
                        let c = plan(f, o.gso_size).unwrap();
                        for i in 0..c.segments() {
                            let mut d = PacketBuf::with_capacity(2048);
                            assert!(c.write(f, i, &mut d, SegCsum::Partial));
                            ch.inject_with_offload(d.data(), d.offload);
                            datagrams += 1;
                        }
                    }
                    None => {
                        wh.inject(f);
                        ch.inject(f);
                        datagrams += 1;
                    }
                }
            }
            // (One underlay poll takes every datagram of the cut way, so
            // both coalesce over the same frames.)
            assert!(datagrams <= POLL_BATCH, "{mode}: {datagrams}");
            let mut pool = Vec::new();
            let (mut got_cut, mut got_whole) = (Vec::new(), Vec::new());
            while cut_rx.recv_batch(&mut got_cut, 64, &mut pool).unwrap() > 0 {}
            while whole_rx.recv_batch(&mut got_whole, 64, &mut pool).unwrap() > 0 {}
            assert_eq!(got_cut.len(), got_whole.len(), "{mode}");
            for (k, (c, w)) in got_cut.iter().zip(&got_whole).enumerate() {
                assert!(c.data() == w.data(), "{mode}: frame {k} bytes differ");
                assert_eq!(c.offload, w.offload, "{mode}: frame {k}");
                assert_eq!(c.tun, w.tun, "{mode}: frame {k}");
            }
            let others = |p: &TunnelPort| {
                let mut c = p.extra_counters();
                c.retain(|(k, _)| *k != "esp_rx_in_place");
                c
            };
            assert_eq!(others(&cut_rx), others(&whole_rx), "{mode}");
            assert_eq!(cut_rx.stats(), whole_rx.stats(), "{mode}");
            assert_eq!(counter(&cut_rx, "esp_rx_in_place"), 0);
            let opened = counter(&whole_rx, "esp_rx_packets");
            let singles = (wire.len() - supers.len()) as u64;
            assert_eq!(
                counter(&whole_rx, "esp_rx_in_place"),
                opened - singles,
                "{mode}"
            );
            assert_eq!(counter(&whole_rx, "esp_rx_drop_auth_failed"), 1, "{mode}");
            assert_eq!(counter(&whole_rx, "esp_rx_drop_unknown_spi"), 1, "{mode}");
            // Replayed: the real first super-frame's datagrams but the
            // two the forged copy did not get through, then all of it,
            // then the three ESP datagrams of the marked copy.
            let replayed = 2 * cut.segments() as u64 - 2 + 3;
            assert_eq!(
                counter(&whole_rx, "underlay_rx_drop_not_tunnel"),
                2,
                "{mode}"
            );
            assert_eq!(
                counter(&whole_rx, "esp_rx_drop_replayed"),
                replayed,
                "{mode}"
            );
            assert_eq!(
                counter(&whole_rx, "rx_gro_merged") > 0,
                gro == "true",
                "{mode}"
            );
            // And what came out is the batch's payload, every byte once
            // (the forged copy's good datagrams came first, so not in
            // order).
            let payload = |ps: &[PacketBuf]| -> usize {
                ps.iter()
                    .map(|p| {
                        let l = nicflow_packet::parse(p.data()).unwrap();
                        p.len() - (usize::from(l.l4_offset) + 20)
                    })
                    .sum()
            };
            assert_eq!(payload(&got_whole), payload(&batch), "{mode}");
        }
        super::super::ipsec::set_state_dir(None);
        let _ = std::fs::remove_dir_all(&base);
    }
}
