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
//! sender lowers its path MTU instead of losing packets silently. Larger
//! IPv4 packets without DF are dropped and counted (no outer fragmentation).

use super::{Port, PortStats};
use crate::control::config::{PortConfig, PortType};
use nicflow_packet::buf::{PacketBuf, TunnelMeta, TUN_F_CSUM, TUN_F_KEY, TUN_F_OAM};
use nicflow_packet::checksum;
use nicflow_packet::tunnel::{self, Encap, TunnelError, TunnelKind};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// An ARP entry is used without question this long after it was learned...
const ARP_REFRESH: Duration = Duration::from_secs(30);
/// ...then refreshed with a request while still in use, and forgotten this
/// long after it was last confirmed.
const ARP_EXPIRE: Duration = Duration::from_secs(120);
/// At most one ARP request per remote this often.
const ARP_RETRY: Duration = Duration::from_millis(500);
/// Frames held per remote while its MAC is being resolved.
const ARP_PENDING_MAX: usize = 64;
/// Frames read from the underlay per poll.
const POLL_BATCH: usize = 64;
/// Decapsulated frames waiting per endpoint; beyond it they are dropped
/// and counted (a tunnel port polled less often than its peers cannot make
/// the queue grow without bound).
const QUEUE_MAX: usize = 1024;
/// Frames held for a remote whose MAC does not come are dropped this long
/// after the first was held.
const ARP_PENDING_MAX_AGE: Duration = Duration::from_secs(3);

/// Bytes of [`TunnelPort::header_template`]: Ethernet, IPv4 without
/// options, UDP, VXLAN or option-less Geneve.
pub const HEADER_TEMPLATE_LEN: usize = 50;

/// The outer header a tunnel port with `cfg` puts in front of a frame, as
/// an XDP engine's template: what [`TunnelPort`]'s `send_batch` writes,
/// with the IPv4 total length and checksum, the UDP source port and length
/// and, for `key=flow`, the VNI zero (patched per frame). `None` when the
/// header cannot be a template: an outer UDP checksum covers the inner
/// frame.
pub fn header_template(
    cfg: &TunnelConfig,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
) -> Option<[u8; HEADER_TEMPLATE_LEN]> {
    if cfg.csum {
        return None;
    }
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
    /// Geneve only: which 4-byte options are `tun_metadata0..7`
    /// (`tlv_map`, Open vSwitch's `add-tlv-map` syntax).
    pub tlv_map: Vec<TlvMapping>,
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
pub fn parse_tlv_map(s: &str) -> Result<Vec<TlvMapping>, String> {
    let mut out: Vec<TlvMapping> = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let body_end = rest
            .find('}')
            .filter(|_| rest.starts_with('{'))
            .ok_or_else(|| {
                format!("tlv_map: `{rest}`: expected {{class=..,type=..,len=4}}->tun_metadataN")
            })?;
        let body = &rest[1..body_end];
        let after = rest[body_end + 1..].trim_start();
        let after = after
            .strip_prefix("->")
            .ok_or_else(|| format!("tlv_map: `{{{body}}}` is not followed by ->tun_metadataN"))?
            .trim_start();
        let end = after.find(',').unwrap_or(after.len());
        let target = after[..end].trim();
        rest = after[end..].trim_start_matches(',').trim_start();
        let (mut class, mut typ, mut len) = (None, None, None);
        for kv in body.split(',') {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("tlv_map: `{kv}` in {{{body}}}: expected key=value"))?;
            let v = v.trim();
            let n = match v.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16),
                None => v.parse::<u32>(),
            }
            .map_err(|_| format!("tlv_map: `{kv}`: not a number"))?;
            match k.trim() {
                "class" if n <= 0xffff => class = Some(n as u16),
                "type" if n <= 0xff => typ = Some(n as u8),
                "len" => len = Some(n),
                _ => {
                    return Err(format!(
                        "tlv_map: `{kv}` in {{{body}}}: unknown key or value out of range"
                    ))
                }
            }
        }
        let (Some(class), Some(typ)) = (class, typ) else {
            return Err(format!("tlv_map: {{{body}}} needs class and type"));
        };
        if len != Some(4) {
            return Err(format!(
                "tlv_map: {{{body}}}: only len=4 options map to tun_metadata (4-byte slots)"
            ));
        }
        let slot = target
            .strip_prefix("tun_metadata")
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|n| *n < 8)
            .ok_or_else(|| format!("tlv_map: `{target}`: expected tun_metadata0..tun_metadata7"))?;
        if out
            .iter()
            .any(|m| m.slot == slot || (m.class, m.typ) == (class, typ))
        {
            return Err(format!(
                "tlv_map: {{{body}}}->{target}: slot or class/type mapped twice"
            ));
        }
        out.push(TlvMapping { class, typ, slot });
    }
    Ok(out)
}

impl TunnelConfig {
    /// Parse the port options; errors name the offending option.
    pub fn from_options(
        kind: TunnelKind,
        options: &BTreeMap<String, String>,
    ) -> Result<TunnelConfig, String> {
        let ip = |k: &str| -> Result<Option<Ipv4Addr>, String> {
            options
                .get(k)
                .map(|v| {
                    v.parse::<Ipv4Addr>().map_err(|_| {
                        if v.parse::<Ipv6Addr>().is_ok() {
                            format!("option {k}={v}: IPv6 underlays are not supported yet")
                        } else {
                            format!("option {k}={v}: not an IPv4 address")
                        }
                    })
                })
                .transpose()
        };
        let flag = |k: &str, default: bool| -> Result<bool, String> {
            match options.get(k).map(String::as_str) {
                None => Ok(default),
                Some("true" | "yes" | "1") => Ok(true),
                Some("false" | "no" | "0") => Ok(false),
                Some(v) => Err(format!("option {k}={v}: expected true or false")),
            }
        };
        let num = |k: &str, default: u32, max: u32| -> Result<u32, String> {
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
                        _ => Err(format!("option {k}={v}: not a number in 0..={max}")),
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
                    | "tlv_map"
            ) {
                return Err(format!(
                    "unknown tunnel option `{k}` (remote_ip, local_ip, key, dst_port, csum, \
                     underlay, underlay_type, ttl, tos, df, csum_complete, tlv_map)"
                ));
            }
        }
        let remote_ip = ip("remote_ip")?.ok_or("option remote_ip is required")?;
        let local_ip = ip("local_ip")?.ok_or("option local_ip is required")?;
        let underlay = options
            .get("underlay")
            .cloned()
            .ok_or("option underlay is required (the interface carrying the tunnel)")?;
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
            None | Some("afxdp") => PortType::Afxdp,
            Some("afpacket") => PortType::Afpacket,
            Some(v) => return Err(format!("option underlay_type={v}: afxdp or afpacket")),
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
            tlv_map: match options.get("tlv_map") {
                None => Vec::new(),
                Some(_) if kind != TunnelKind::Geneve => {
                    return Err("option tlv_map: only Geneve carries options".into())
                }
                Some(v) => parse_tlv_map(v)?,
            },
        })
    }

    /// Encapsulation overhead: what the inner frame's IP packet loses of
    /// the underlay MTU.
    pub fn overhead(&self) -> usize {
        // Counting every mapped option: the MTU does not depend on which
        // metadata a frame carries.
        tunnel::overhead(self.kind, false, 8 * self.tlv_map.len())
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
    tx_arp_pending_drops: u64,
    tx_dropped: u64,
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
}

/// One underlay interface and the tunnel endpoints on it.
pub struct Underlay {
    iface: String,
    port: Box<dyn Port>,
    mac: [u8; 6],
    mtu: usize,
    endpoints: Vec<Endpoint>,
    queues: HashMap<u64, VecDeque<PacketBuf>>,
    arp: HashMap<Ipv4Addr, ArpEntry>,
    tx: Vec<PacketBuf>,
    rx: Vec<PacketBuf>,
    done: Vec<PacketBuf>,
    counters: UnderlayCounters,
    next_id: u64,
}

thread_local! {
    /// Underlays in use by this thread's (the daemon's) tunnel ports, by
    /// interface name: a second tunnel port on the same interface shares it.
    static UNDERLAYS: RefCell<HashMap<String, Weak<RefCell<Underlay>>>> = RefCell::new(HashMap::new());
}

/// The underlay's MAC and MTU.
fn iface_mac_mtu(iface: &str) -> io::Result<([u8; 6], usize)> {
    use std::os::fd::AsRawFd;
    let fd = super::sys::control_socket()?;
    Ok((
        super::sys::interface_mac(fd.as_raw_fd(), iface)?,
        super::sys::interface_mtu(fd.as_raw_fd(), iface)?,
    ))
}

impl Underlay {
    fn open(cfg: &TunnelConfig) -> Result<Underlay, String> {
        let pc = PortConfig {
            name: format!("underlay:{}", cfg.underlay),
            iface: cfg.underlay.clone(),
            kind: cfg.underlay_type,
            options: BTreeMap::new(),
        };
        let port = crate::control::switch::open_port(&pc)
            .map_err(|e| format!("underlay {}: {e}", cfg.underlay))?;
        let (mac, mtu) = iface_mac_mtu(&cfg.underlay)
            .map_err(|e| format!("underlay {}: reading its MAC and MTU: {e}", cfg.underlay))?;
        tracing::info!(iface = %cfg.underlay, kind = port.kind(), mtu, "tunnel underlay attached");
        Ok(Underlay {
            iface: cfg.underlay.clone(),
            port,
            mac,
            mtu,
            endpoints: Vec::new(),
            queues: HashMap::new(),
            arp: HashMap::new(),
            tx: Vec::new(),
            rx: Vec::with_capacity(POLL_BATCH),
            done: Vec::new(),
            counters: UnderlayCounters::default(),
            next_id: 1,
        })
    }

    /// The shared underlay of `cfg.underlay`, opened on first use.
    fn get(cfg: &TunnelConfig) -> Result<Rc<RefCell<Underlay>>, String> {
        UNDERLAYS.with(|m| {
            let mut m = m.borrow_mut();
            if let Some(u) = m.get(&cfg.underlay).and_then(Weak::upgrade) {
                return Ok(u);
            }
            let u = Rc::new(RefCell::new(Underlay::open(cfg)?));
            m.insert(cfg.underlay.clone(), Rc::downgrade(&u));
            Ok(u)
        })
    }

    fn add_endpoint(&mut self, cfg: &TunnelConfig) -> Result<u64, String> {
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
            return Err(format!(
                "underlay {}: UDP port {} already carries {}, not {}",
                self.iface,
                cfg.dst_port,
                kind_name(e.kind),
                kind_name(cfg.kind)
            ));
        }
        if clash {
            return Err(format!(
                "underlay {}: another tunnel port already receives {} from {} to {} with key {:?}",
                self.iface,
                kind_name(cfg.kind),
                cfg.remote_ip,
                cfg.local_ip,
                cfg.key
            ));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.endpoints.push(Endpoint {
            id,
            tlv: cfg.tlv_map.clone(),
            kind: cfg.kind,
            local: cfg.local_ip,
            remote: cfg.remote_ip,
            key: cfg.key,
            dst_port: cfg.dst_port,
        });
        self.queues.insert(id, VecDeque::new());
        Ok(id)
    }

    fn remove_endpoint(&mut self, id: u64) {
        self.endpoints.retain(|e| e.id != id);
        self.queues.remove(&id);
        // ARP state (and held frames) of remotes no endpoint uses any more.
        let eps = &self.endpoints;
        self.arp.retain(|ip, _| eps.iter().any(|e| e.remote == *ip));
    }

    fn is_local(&self, ip: Ipv4Addr) -> bool {
        self.endpoints.iter().any(|e| e.local == ip)
    }

    /// Read what the underlay has, answer ARP, sort tunnel packets into the
    /// endpoints' queues.
    fn poll(&mut self, pool: &mut Vec<PacketBuf>, now: Instant) -> io::Result<()> {
        let mut rx = std::mem::take(&mut self.rx);
        let n = self.port.recv_batch(&mut rx, POLL_BATCH, pool);
        for pkt in rx.drain(..) {
            self.dispatch(pkt, pool, now);
        }
        self.rx = rx;
        self.flush()?;
        n.map(|_| ())
    }

    fn dispatch(&mut self, mut pkt: PacketBuf, pool: &mut Vec<PacketBuf>, now: Instant) {
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
        // A local sender (the kernel's vxlan device on a veth) hands over
        // frames with checksum offload pending: CHECKSUM_PARTIAL on the
        // inner TCP/UDP header with the outer UDP checksum computed as if
        // it were done (local checksum offload), or on the outer UDP
        // header itself. Finish it, and the outer checksum verifies. A TCP
        // super-frame keeps its offload (inner offsets follow the pull);
        // its outer checksum can only be right per segment, so it is
        // cleared (allowed on IPv4) rather than checked.
        if let Some(o) = pkt.offload {
            if o.is_gso() {
                if let Ok(l) = nicflow_packet::parse(pkt.data()) {
                    let at = l.l4_offset as usize + 6;
                    if l.l3 == nicflow_packet::L3Kind::Ipv4 && at + 2 <= pkt.len() {
                        pkt.data_mut()[at..at + 2].fill(0);
                    }
                }
            } else if o.csum_partial {
                let start = o.csum_start as usize;
                let field = start + o.csum_offset as usize;
                if field + 2 <= pkt.len() {
                    let mut c = checksum::checksum(&pkt.data()[start..]);
                    if c == 0 {
                        c = 0xffff;
                    }
                    pkt.data_mut()[field..field + 2].copy_from_slice(&c.to_be_bytes());
                }
                pkt.offload = None;
            }
        }
        let parsed = self.parse_tunnel(pkt.data());
        // Without checksum metadata (AF_XDP: bytes only) a local sender's
        // inner checksum may still be partial while the outer UDP checksum
        // already counts it as done (local checksum offload), so the outer
        // check fails. Only then: set the outer checksum aside, parse again,
        // complete the inner one (the AF_XDP port's guess,
        // `complete_partial_checksum`) and check the outer one after that.
        // Frames whose checksums are right take one parse.
        let mut outer_csum = None;
        let parsed = match parsed {
            Err(TunnelError::BadUdpChecksum) if pkt.offload.is_none() => {
                match nicflow_packet::parse(pkt.data()) {
                    Ok(l)
                        if l.l3 == nicflow_packet::L3Kind::Ipv4
                            && l.l4 == nicflow_packet::L4Kind::Udp
                            && l.l4_offset as usize + 8 <= pkt.len() =>
                    {
                        let at = l.l4_offset as usize + 6;
                        let v = u16::from_be_bytes([pkt.data()[at], pkt.data()[at + 1]]);
                        pkt.data_mut()[at..at + 2].fill(0);
                        outer_csum = Some((l.l4_offset as usize, v));
                        self.parse_tunnel(pkt.data())
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
                pool.push(pkt);
                return;
            }
            Err(e) => {
                tracing::debug!(iface = %self.iface, "malformed tunnel packet: {e}");
                self.counters.rx_bad_tunnel += 1;
                pool.push(pkt);
                return;
            }
        };
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (d.ip_src, d.ip_dst) else {
            self.counters.rx_not_tunnel += 1;
            pool.push(pkt);
            return;
        };
        let matches = |e: &&Endpoint| {
            e.kind == d.kind && e.dst_port == d.udp_dst && e.local == dst && e.remote == src
        };
        let ep = self
            .endpoints
            .iter()
            .filter(matches)
            .find(|e| e.key == TunnelKey::Fixed(d.vni))
            .or_else(|| {
                self.endpoints
                    .iter()
                    .filter(matches)
                    .find(|e| e.key == TunnelKey::Flow)
            });
        let Some(ep) = ep else {
            self.counters.rx_no_endpoint += 1;
            pool.push(pkt);
            return;
        };
        // Options: the port's TLV map turns 4-byte ones into
        // tun_metadata0..7; RFC 8926 §3.5: a critical option the receiver
        // does not process means drop.
        let mut metadata = [0u32; 8];
        let mut md_present = 0u8;
        let mut unknown_critical = false;
        if d.options_len > 0 {
            let opts = &pkt.data()[d.options_off..d.options_off + d.options_len];
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
            pool.push(pkt);
            return;
        }
        let id = ep.id;
        let mut flags = TUN_F_KEY;
        if d.udp_csum_present {
            flags |= TUN_F_CSUM;
        }
        if let Some((udp, want)) = outer_csum {
            flags |= TUN_F_CSUM;
            let inner = &mut pkt.data_mut()[d.inner_off..];
            if let Ok(il) = nicflow_packet::parse(inner) {
                super::fixup::complete_partial_checksum(inner, &il);
            }
            let mut got = checksum::l4_checksum_ipv4(src, dst, 17, &pkt.data()[udp..]);
            if got == 0 {
                got = 0xffff;
            }
            if got != want {
                self.counters.rx_bad_tunnel += 1;
                pool.push(pkt);
                return;
            }
        }
        if d.geneve_oam {
            flags |= TUN_F_OAM;
        }
        if !pkt.pull_front(d.inner_off) {
            self.counters.rx_bad_tunnel += 1;
            pool.push(pkt);
            return;
        }
        // Offload state (a partial inner checksum, a TCP super-frame from a
        // local sender) stays: its offsets followed the pull.
        pkt.tun = Some(TunnelMeta {
            id: d.vni as u64,
            src: u32::from(src),
            dst: u32::from(dst),
            flags,
            md_present,
            metadata,
        });
        match self.queues.get_mut(&id) {
            Some(q) if q.len() < QUEUE_MAX => q.push_back(pkt),
            _ => {
                self.counters.rx_queue_full += 1;
                pool.push(pkt);
            }
        }
    }

    /// The AF_XDP socket behind the underlay, if it is one: the bridge's
    /// XDP engine takes over its XDP attachment to decapsulate there.
    pub fn afxdp_mut(&mut self) -> Option<&mut super::afxdp::AfXdpPort> {
        self.port.as_afxdp_mut()
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
        let eps = &self.endpoints;
        tunnel::parse(frame, |port| {
            eps.iter().find(|e| e.dst_port == port).map(|e| e.kind)
        })
    }

    fn arp_input(&mut self, pkt: &PacketBuf, now: Instant) {
        use nicflow_packet::arp;
        let Ok(a) = arp::Packet::new_checked(&pkt.data()[14..]) else {
            self.counters.rx_not_tunnel += 1;
            return;
        };
        if !arp::is_eth_ipv4(&pkt.data()[14..]) {
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
            let mut reply = self
                .done
                .pop()
                .unwrap_or_else(|| PacketBuf::with_capacity(64));
            reply.set_data(&arp_frame(2, self.mac, tpa, sha, spa, sha));
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
            let mac = self.mac;
            let mut req = self
                .done
                .pop()
                .unwrap_or_else(|| PacketBuf::with_capacity(64));
            req.set_data(&arp_frame(1, mac, local, [0; 6], remote, [0xff; 6]));
            self.tx.push(req);
            self.counters.arp_requests_sent += 1;
        }
        self.arp.get(&remote).and_then(|e| e.mac)
    }

    fn hold(&mut self, remote: Ipv4Addr, pkt: PacketBuf, now: Instant) -> Option<PacketBuf> {
        let e = self.arp.get_mut(&remote)?;
        if e.pending.len() >= ARP_PENDING_MAX {
            self.counters.tx_arp_pending_drops += 1;
            return Some(pkt);
        }
        e.pending_since.get_or_insert(now);
        e.pending.push_back(pkt);
        None
    }

    fn flush(&mut self) -> io::Result<()> {
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

fn kind_name(k: TunnelKind) -> &'static str {
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
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&eth_dst);
    f.extend_from_slice(&sha);
    f.extend_from_slice(&nicflow_packet::ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa.octets());
    f.extend_from_slice(&tha);
    f.extend_from_slice(&tpa.octets());
    f.resize(60, 0);
    f
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
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&frame[6..12]);
    f.extend_from_slice(&frame[0..6]);
    match layout.l3 {
        nicflow_packet::L3Kind::Ipv4 if ip.len() >= 20 => {
            let flags = u16::from_be_bytes([ip[6], ip[7]]);
            if flags & 0x4000 == 0 || ip[9] == 1 && ip.get((ip[0] as usize & 15) * 4) != Some(&8) {
                // No DF, or an ICMP packet other than an echo request.
                return None;
            }
            let quote = &ip[..ip.len().min(576 - 28)];
            let total = 20 + 8 + quote.len();
            f.extend_from_slice(&nicflow_packet::ETHERTYPE_IPV4.to_be_bytes());
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            h[8] = 64;
            h[9] = 1;
            h[12..16].copy_from_slice(&ip[16..20]);
            h[16..20].copy_from_slice(&ip[12..16]);
            let c = checksum::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&h);
            let mut icmp = vec![3u8, 4, 0, 0, 0, 0];
            icmp.extend_from_slice(&(mtu.min(0xffff) as u16).to_be_bytes());
            icmp.extend_from_slice(quote);
            let c = checksum::checksum(&icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&icmp);
        }
        nicflow_packet::L3Kind::Ipv6 => {
            if ip.len() < 40 || ip[6] == 58 && ip.get(40).is_some_and(|t| *t < 128) {
                return None;
            }
            let src: [u8; 16] = ip[24..40].try_into().ok()?;
            let dst: [u8; 16] = ip[8..24].try_into().ok()?;
            // The whole reply within the IPv6 minimum MTU.
            let quote = &ip[..ip.len().min(1280 - 48)];
            let mut icmp = vec![2u8, 0, 0, 0];
            icmp.extend_from_slice(&mtu.to_be_bytes());
            icmp.extend_from_slice(quote);
            let c = checksum::l4_checksum_ipv6(Ipv6Addr::from(src), Ipv6Addr::from(dst), 58, &icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&nicflow_packet::ETHERTYPE_IPV6.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
            f.extend_from_slice(&[58, 64]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&icmp);
        }
        _ => return None,
    }
    Some(f)
}

/// A VXLAN or Geneve port of a bridge.
pub struct TunnelPort {
    name: String,
    cfg: TunnelConfig,
    underlay: Rc<RefCell<Underlay>>,
    id: u64,
    /// ICMP replies for oversize frames, received on this port next.
    icmp: VecDeque<PacketBuf>,
    stats: PortStats,
    tx_drop_mtu: u64,
    icmp_too_big_sent: u64,
    tx_drop_no_arp: u64,
}

impl TunnelPort {
    /// Attach (or share) the underlay and register this port's endpoint.
    pub fn open(name: &str, cfg: TunnelConfig) -> Result<TunnelPort, String> {
        let underlay = Underlay::get(&cfg)?;
        let id = underlay.borrow_mut().add_endpoint(&cfg)?;
        Ok(TunnelPort {
            name: name.to_string(),
            cfg,
            underlay,
            id,
            icmp: VecDeque::new(),
            stats: PortStats::default(),
            tx_drop_mtu: 0,
            icmp_too_big_sent: 0,
            tx_drop_no_arp: 0,
        })
    }

    pub fn config(&self) -> &TunnelConfig {
        &self.cfg
    }

    /// The shared underlay (for the XDP engine).
    pub fn underlay(&self) -> Rc<RefCell<Underlay>> {
        self.underlay.clone()
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
        if let Some(q) = u.queues.get_mut(&self.id) {
            while n < max {
                let Some(p) = q.pop_front() else {
                    break;
                };
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += p.len() as u64;
                out.push(p);
                n += 1;
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
        let now = Instant::now();
        let inner_mtu = self.inner_mtu();
        let mut u = self.underlay.borrow_mut();
        let mac = u.mac;
        let mut sent = 0;
        // One ARP lookup per batch: every frame goes to the same remote.
        let mut resolved: Option<Option<[u8; 6]>> = None;
        for mut pkt in pkts.drain(..) {
            if pkt.len().saturating_sub(14) > inner_mtu {
                self.tx_drop_mtu += 1;
                self.stats.tx_dropped += 1;
                if let Some(reply) = too_big_reply(pkt.data(), inner_mtu as u32) {
                    self.icmp_too_big_sent += 1;
                    let mut r = PacketBuf::from_slice(&reply);
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
                continue;
            }
            let vni = match self.cfg.key {
                TunnelKey::Fixed(v) => v,
                TunnelKey::Flow => pkt.tun.map(|t| t.id as u32 & 0xff_ffff).unwrap_or(0),
            };
            let remote_mac = *resolved
                .get_or_insert_with(|| u.resolve(self.cfg.remote_ip, self.cfg.local_ip, now));
            // Present tun_metadata slots the TLV map names go out as
            // options (8 bytes each: at most 64).
            let mut opts = [0u8; 64];
            let mut n_opts = 0;
            if let Some(t) = pkt.tun.filter(|t| t.md_present != 0) {
                for m in &self.cfg.tlv_map {
                    let i = usize::from(m.slot);
                    if t.md_present & (1 << i) != 0 {
                        let o = &mut opts[n_opts..n_opts + 8];
                        o[..2].copy_from_slice(&m.class.to_be_bytes());
                        o[2] = m.typ;
                        o[3] = 1;
                        o[4..].copy_from_slice(&t.metadata[i].to_be_bytes());
                        n_opts += 8;
                    }
                }
            }
            let e = Encap {
                kind: self.cfg.kind,
                eth_src: mac,
                eth_dst: remote_mac.unwrap_or([0; 6]),
                ip_src: IpAddr::V4(self.cfg.local_ip),
                ip_dst: IpAddr::V4(self.cfg.remote_ip),
                tos: self.cfg.tos,
                ttl: self.cfg.ttl,
                df: self.cfg.df,
                udp_src: tunnel::entropy_port(pkt.data()),
                udp_dst: self.cfg.dst_port,
                csum: self.cfg.csum,
                vni,
                geneve_options: &opts[..n_opts],
                geneve_oam: false,
            };
            let len = pkt.len();
            pkt.tun = None;
            if let Err(err) = tunnel::encap(&mut pkt, &e) {
                tracing::debug!(port = %self.name, "encapsulation failed: {err}");
                self.stats.tx_dropped += 1;
                done.push(pkt);
                continue;
            }
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += len as u64;
            sent += 1;
            if remote_mac.is_some() {
                u.tx.push(pkt);
            } else if let Some(p) = u.hold(self.cfg.remote_ip, pkt, now) {
                self.tx_drop_no_arp += 1;
                self.stats.tx_packets -= 1;
                self.stats.tx_bytes -= len as u64;
                self.stats.tx_dropped += 1;
                sent -= 1;
                done.push(p);
            }
        }
        let r = u.flush();
        done.append(&mut u.done);
        r.map(|_| sent)
    }

    fn stats(&self) -> PortStats {
        self.stats.clone()
    }

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        let u = self.underlay.borrow();
        let c = u.counters;
        vec![
            ("tx_drop_mtu", self.tx_drop_mtu),
            ("icmp_too_big_sent", self.icmp_too_big_sent),
            ("tx_drop_arp_pending", self.tx_drop_no_arp),
            ("underlay_rx_drop_not_tunnel", c.rx_not_tunnel),
            ("underlay_rx_drop_bad_tunnel", c.rx_bad_tunnel),
            ("underlay_rx_drop_no_endpoint", c.rx_no_endpoint),
            ("underlay_rx_drop_geneve_critical", c.rx_geneve_critical),
            ("underlay_rx_drop_queue_full", c.rx_queue_full),
            ("underlay_tx_drop_arp_pending", c.tx_arp_pending_drops),
            ("underlay_tx_dropped", c.tx_dropped),
            ("underlay_arp_requests_answered", c.arp_requests_answered),
            ("underlay_arp_requests_sent", c.arp_requests_sent),
            ("underlay_arp_replies_learned", c.arp_replies_learned),
        ]
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        self.underlay.borrow().port.rx_fd()
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

    fn kind(&self) -> &'static str {
        kind_name(self.cfg.kind)
    }

    fn as_tunnel(&self) -> Option<&TunnelPort> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
                "class=0x10000",
            ),
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
            let e = parse_tlv_map(bad).unwrap_err();
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
        assert!(e.contains("tlv_map"), "{e}");
        let c = TunnelConfig::from_options(TunnelKind::Geneve, &o).unwrap();
        assert_eq!(c.overhead(), 58);
        o.insert(
            "tlv_map".into(),
            "{class=1,type=2,len=5}->tun_metadata0".into(),
        );
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
            let e = TunnelConfig::from_options(TunnelKind::Vxlan, &opts(&bad)).unwrap_err();
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
}
