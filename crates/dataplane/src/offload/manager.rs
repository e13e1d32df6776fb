//! The offload manager: a bridge's kernel engines (the XDP one on AF_XDP
//! ports, the TC one on TC ports; tunnels in the engine of their
//! underlay), and the per-flow decision of what runs where.
//!
//! Place in a frame's path: the bridge's AF_XDP ports each run the
//! bridge's single `xdp_dp` instance on their own XDP link (the link,
//! named by the port's [`OffloadHook`], is switched from `xsk_redirect` to
//! `xdp_dp` atomically and back on detach; the port keeps it), and each port's
//! AF_XDP socket goes into the shared XSKMAP at the port's own slot, so a
//! miss on any port still reaches that port's socket and the userspace
//! datapath. The datapath ([`crate::datapath`]) calls this manager through
//! [`FlowOffload`] whenever it installs, changes or removes a datapath flow.
//!
//! # Decisions
//!
//! One program instance with shared maps, rather than one per port: a flow
//! is looked up once whatever port it came from, the flow and mask maps
//! exist once, and the devmap holds every output port. The XSKMAP is
//! therefore keyed per interface (`dp_ports[ifindex].xsk_base + rx
//! queue`), since every veth receives on queue 0 and an AF_XDP socket
//! refuses (drops) frames of any other interface.
//!
//! A flow goes to the kernel only when every one of these holds (otherwise
//! it stays in userspace with the first reason that failed):
//!
//! * its ingress port is an AF_XDP port of this bridge (`port:afpacket`,
//!   `port:tap`, `port:internal`, `port:userspace` otherwise);
//! * **checksums**: XDP cannot see or complete the `CHECKSUM_PARTIAL` sums
//!   a local sender behind a veth leaves in TCP/UDP headers (the AF_XDP
//!   port completes them in userspace). So a flow is offloaded only if its
//!   match pins the protocol ([`OffloadManager::refine_mask`] adds
//!   `in_port`, `dl_type` and, for IP, `nw_proto` to every mask) and it is
//!   not TCP, UDP or SCTP — unless the ingress port is declared to receive
//!   complete checksums (port option `csum_complete=true`) and runs native
//!   XDP (no GSO super-frames): `csum:partial-possible`, `port:generic-xdp`;
//! * every output port is an AF_XDP port whose device accepts redirected
//!   frames (`NETDEV_XDP_ACT_NDO_XMIT`: for a veth, its peer runs NAPI,
//!   i.e. has an XDP program or GRO on): `port:no-xdp-xmit`; re-read every
//!   tick, and the devmap slot emptied at once when it goes away, so
//!   offloaded flows to that port are punted to userspace (the program's
//!   pre-check) instead of dropped by `veth_xdp_xmit`;
//! * the encoder accepts the match and actions and the maps have room
//!   ([`super::kernel::encode`] reasons, `mask-table-full`, `flow-map-full`).
//!
//! # Tunnels
//!
//! A VXLAN or Geneve port is offloaded through its underlay, in the engine
//! its underlay's port kind gives: a TC-port underlay (the default under
//! `offload = auto|tc`) runs `tc_dp` like a TC port, an AF_XDP underlay
//! has its XDP link switched as a bridge port does. Either way the
//! underlay is attached once however many tunnel ports share it, marked
//! `PORT_UNDERLAY` with its MAC in `dp_ports`, and each tunnel port's
//! endpoint (underlay, local and remote address, UDP port, VNI or any for
//! `key=flow`) goes into that engine's `dp_tun_rx`: the program checks and
//! decapsulates those packets and looks the inner frame up as received on
//! the tunnel port, with the outer headers in the key's `tun_*` fields; a
//! miss reaches the underlay's userspace side whole. For output, each
//! tunnel port has a slot in `dp_tun_tx` with its outer header
//! ([`nicflow_port::tunnel::header_template`]), written when the remote's MAC
//! is resolved and re-checked every tick (which also keeps the ARP entry
//! fresh while every packet is offloaded); until then the program sends the
//! flow's frames to userspace. A tunnel port stays in userspace with
//! `tunnel:udp-csum-xdp` (a `csum=true` port on an AF_XDP underlay: XDP
//! would have to sum every frame; the TC engine writes the checksum),
//! `tunnel:underlay-afpacket` (no kernel attachment to take over),
//! `tunnel:offload-tc` (an AF_XDP underlay under `offload =
//! tc`), `port:tc-engine-off` or `tunnel:underlay-not-attached`. In XDP its
//! TCP/UDP flows need `csum_complete=true` on the tunnel port (the remote
//! sends finished inner checksums), as an AF_XDP port's do; TC has no such
//! condition. The engines do not mix: flows between a TC port and an XDP
//! tunnel (or back) stay in userspace (`tc:tunnel-xdp-underlay`,
//! `port:tc-from-xdp`).

use super::kernel::encode::{PortSlots, TunnelSlot};
use super::kernel::layout::{TunRx, TunRxKey, TunTx, TUN_GENEVE, TUN_TX_CSUM, TUN_VXLAN, VNI_ANY};
use super::kernel::OffloadError;
use super::kernel::{
    encode, encode_tc, EngineKind, EngineStats, FlowHandle, XdpEngine, XdpEngineConfig, TX_PEER,
};
use super::netdev::NetdevQuery;
use super::OffloadMode;
use crate::datapath::action::SelectMethod;
use crate::datapath::meter::MeterCounters;
use crate::datapath::offload::{CtEvent, CtTemplateSpec, FlowHashKey};
pub use crate::datapath::ManagerCounters;
use crate::datapath::{
    DpAction, FlowOffload, KernelCounters, PortOffload, PortOffloadError, ProviderStatus,
};
use nicflow_flow::{FlowKey, FlowMask, Match};
use nicflow_ofctl::meter::MeterSpec;
use nicflow_packet::tunnel::TunnelKind;
use nicflow_port::hook::{AfXdpHook, TcHook, TunnelHook, UnderlayView};
use nicflow_port::tunnel::{self, TunnelConfig, TunnelKey};
use nicflow_port::OffloadHook;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;

/// An AF_XDP port the engine runs on.
#[derive(Clone, Debug)]
struct XdpPort {
    name: String,
    ifindex: u32,
    /// Devmap slot and XSKMAP slot (the same number).
    slot: u32,
    native: bool,
    csum_complete: bool,
    /// The device accepts redirected frames; its devmap slot is filled.
    redirect_ok: bool,
    /// Its output slot in the TC engine, when that is loaded: flows from TC
    /// ports reach an AF_XDP port with `bpf_redirect` to its interface's
    /// egress (XDP only runs on receive).
    tc_slot: Option<u32>,
}

/// A TC port the TC engine runs on.
#[derive(Clone, Debug)]
struct TcPortEntry {
    name: String,
    ifindex: u32,
    /// Its output slot in the TC engine's `dp_tx_ports`.
    slot: u32,
    /// A veth whose peer is in another namespace.
    peer_elsewhere: bool,
    /// Output with `bpf_redirect_peer`: a veth whose peer is elsewhere and
    /// runs no NAPI. A peer with an XDP program (or GRO) is reached through
    /// the veth's transmit path instead, so its XDP program sees the frame
    /// as it would from the Linux bridge (`bpf_redirect_peer` enters the
    /// peer's receive path after the point native XDP runs).
    peer: bool,
}

/// A tunnel underlay an engine runs on (shared by its tunnel ports).
struct XdpUnderlay {
    name: String,
    /// The engine: XDP for an AF_XDP underlay, TC for a TC port.
    engine: EngineKind,
    /// XDP: devmap slot and XSKMAP slot, from the same pool as ports'
    /// slots. TC: its `dp_tx_ports` slot.
    slot: u32,
    native: bool,
    /// XDP: the device accepts redirected frames. TC: always (a redirect
    /// to a device's egress).
    redirect_ok: bool,
    /// TC: its upcall device, whether its peer is in another namespace,
    /// and whether output uses `bpf_redirect_peer` (as for TC ports).
    upcall: u32,
    peer_elsewhere: bool,
    peer: bool,
    /// Tunnel ports using it.
    users: usize,
    /// Its neighbour table and MTU, asked every tick.
    view: Rc<dyn UnderlayView>,
    /// What its `dp_ports` entry holds (the MTU is followed every tick).
    xsk_base: u32,
    mac: [u8; 6],
    mtu: u16,
}

/// A tunnel port the engine encapsulates and decapsulates for.
struct XdpTunnel {
    name: String,
    /// Its underlay's engine.
    engine: EngineKind,
    cfg: TunnelConfig,
    underlay_ifindex: u32,
    /// Its `dp_tun_tx` slot.
    slot: u32,
    rx_key: TunRxKey,
    /// What the `dp_tun_tx` entry was written from: remote MAC, underlay
    /// redirect state, inner MTU (`None`: no entry).
    written: Option<([u8; 6], bool, u32)>,
}

/// Smallest `ct_events_bytes` on a 4-KiB-page machine (15 set-up
/// reports); the check takes [`ct_events_min_bytes`], the page size.
pub const CT_EVENTS_MIN_BYTES: u32 = 4096;

/// Smallest `ct_events_bytes` here: one page, the kernel's minimum for a
/// ring buffer (16 or 64 KiB on some arm64 and ppc64 kernels, where 4096
/// would pass a fixed check and be refused at load).
pub fn ct_events_min_bytes() -> u32 {
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(page).map_or(CT_EVENTS_MIN_BYTES, |p| p.max(CT_EVENTS_MIN_BYTES))
}
/// Largest `ct_events_bytes` accepted: 256 MiB (a million reports).
pub const CT_EVENTS_MAX_BYTES: u32 = 256 << 20;

/// Options of a bridge's XDP offload (the `offload_options` table of the
/// bridge's config): map sizes.
pub fn engine_config(options: &BTreeMap<String, String>) -> Result<XdpEngineConfig, OffloadError> {
    let mut c = XdpEngineConfig::default();
    for (k, v) in options {
        if k == "counters" {
            c.counters = match v.as_str() {
                "on" | "true" => true,
                "off" | "false" => false,
                _ => {
                    return Err(OffloadError::Config(format!(
                        "offload option counters={v}: not on/off"
                    )))
                }
            };
            continue;
        }
        let n: u32 = v
            .parse()
            .map_err(|_| OffloadError::Config(format!("offload option {k}={v}: not a number")))?;
        match k.as_str() {
            "max_flows" => c.max_flows = n,
            "max_masks" => c.max_masks = n,
            "ct_events_bytes" => {
                // The kernel takes a ring of a power of two pages only;
                // checked here, so a bad value is refused before the
                // bridge's engine is touched (later, `load_fresh` would
                // fail after the old engine went).
                let min = ct_events_min_bytes();
                if !n.is_power_of_two() || !(min..=CT_EVENTS_MAX_BYTES).contains(&n) {
                    return Err(OffloadError::Config(format!(
                        "offload option ct_events_bytes={v}: the set-up ring's size must be a \
                         power of two from {min} (a page) to {CT_EVENTS_MAX_BYTES}"
                    )));
                }
                c.ct_events_bytes = n
            }
            "max_ports" => {
                c.max_tx_ports = n;
                c.max_ifaces = n;
                c.max_queues = n;
            }
            _ => {
                return Err(OffloadError::Config(format!(
                    "unknown offload option `{k}` (max_flows, max_masks, max_ports, counters, ct_events_bytes)"
                )))
            }
        }
    }
    Ok(c)
}

/// What an adopted TC engine held when the daemon started (see
/// [`OffloadManager::with_mode_pinned`]): each interface keeps its output
/// slot, so adopted flows keep their meaning, and whatever no port of the
/// new configuration claims is removed by
/// [`OffloadManager::finish_adoption`].
#[derive(Debug, Default)]
struct Adoption {
    /// Output slots by interface.
    tx: BTreeMap<u32, u32>,
    /// Port numbers by interface (`dp_ports`; underlays have none).
    in_port: BTreeMap<u32, u32>,
    /// Tunnel port numbers by endpoint (`dp_tun_rx`).
    tunnels: Vec<(TunRxKey, u32)>,
    /// The adopted endpoints' entries, TLV maps included: a tunnel port
    /// re-attached before the controller has sent the switch's TLV map
    /// again (`nicflow vswitchd` after a restart) keeps reading received
    /// Geneve options through the map the kernel already has, instead of
    /// sending every frame with a critical option to userspace.
    tun_rx: Vec<(TunRxKey, TunRx)>,
}

/// A kernel flow found in an adopted engine: the manager's id for it, its
/// match and its counters so far.
pub type AdoptedFlow = (u64, Match, KernelCounters);

/// Fewest offloaded flows for which [`FlowOffload::prefetch_counters`]
/// reads them in one batch rather than one by one.
const PREFETCH_MIN_FLOWS: usize = 256;

pub struct OffloadManager {
    engine: XdpEngine,
    /// The TC engine (`offload = auto | tc`) and the TC ports it runs on.
    tc: Option<XdpEngine>,
    tc_ports: BTreeMap<u32, TcPortEntry>,
    /// `offload = tc`: AF_XDP ports are not given to the XDP engine.
    xdp_off: bool,
    netdev: Option<NetdevQuery>,
    ports: BTreeMap<u32, XdpPort>,
    /// Tunnel ports by port number, their underlays by ifindex.
    tunnels: BTreeMap<u32, XdpTunnel>,
    underlays: BTreeMap<u32, XdpUnderlay>,
    /// Ports flows cannot be offloaded through: the reason.
    others: BTreeMap<u32, &'static str>,
    flows: HashMap<u64, (EngineKind, FlowHandle)>,
    next_id: u64,
    /// Between `begin_ct` and `commit_ct`: the first id handed out since
    /// `begin_ct` (ids only grow: the flows staged are those from it on).
    ct_first: Option<u64>,
    counters: ManagerCounters,
    /// Counters read in one batch per engine for a sweep over all flows
    /// (`prefetch_counters`), by flow id; empty outside a sweep.
    prefetched: HashMap<u64, KernelCounters>,
    /// Between `begin_removals` and `commit_removals`.
    removing: bool,
    /// Meanwhile, the counters each `counters(id)` call read, by flow id:
    /// a `remove` of such a flow takes them as its last and queues its
    /// entry for the engine's batched delete. Empty outside.
    removal_reads: HashMap<u64, KernelCounters>,
    /// The bridge's meters: each goes into an engine's `dp_meters` when
    /// the first flow naming it is offloaded there.
    meters: BTreeMap<u32, MeterSpec>,
    /// Per-packet select groups' `dp_select` slots (the same in both
    /// engines), by group id: held while an offloaded flow runs the group,
    /// freed with its last such flow (a deleted group's flows are removed
    /// by revalidation, a removed bridge's by the datapath's flush), so
    /// any number of groups over time fit the engine's
    /// [`SELECT_SLOTS`](super::kernel::layout::SELECT_SLOTS).
    select_slots: BTreeMap<u32, SelectSlot>,
    /// The select each offloaded flow runs (at most one: its last action).
    flow_selects: HashMap<u64, FlowSelect>,
    /// Kernel traffic per group and bucket position in the group not yet
    /// taken by [`FlowOffload::take_select_counts`].
    select_credit: BTreeMap<u32, Vec<(u64, u64)>>,
    /// Each such group's method and buckets (position in the group,
    /// weight) as its last offloaded flow had them, for rewriting the
    /// weights when splb ones are published.
    select_buckets: BTreeMap<u32, (SelectMethod, Vec<(u16, u16)>)>,
    /// splb weights published per group, by bucket position in the group.
    select_published: BTreeMap<u32, Vec<u32>>,
    /// Set while an engine adopted from pins is being taken over.
    adoption: Option<Adoption>,
    /// `offload = profile:NAME`: the modelled NIC admits each flow before
    /// the TC engine takes it (`super::profile`).
    emulation: Option<super::profile::Emulation>,
    /// Set-up templates written to the TC engine, with the mask slots
    /// each holds.
    ct_templates: BTreeMap<(u32, u16), [u32; 3]>,
    /// Mask slots of replaced or removed templates, released only after
    /// the ring was drained twice since (see [`SlotLimbo`]).
    ct_limbo: SlotLimbo,
}

/// Mask slots a template let go of, held until the report ring was
/// drained twice: a program instance that looked the old template up
/// before its replacement or delete (RCU) may still insert entries under
/// its `mask_idx`; were the slot freed and reused for another mask at
/// once, such an entry would be "masked" by a foreign, maybe broader mask
/// with the connection's actions (review of ctbpf, MUST-FIX 4). After the
/// second drain every such instance has long finished and its report was
/// taken (its entries undone or adopted under the slot still held).
#[derive(Debug, Default)]
struct SlotLimbo {
    /// Retired since the last drain.
    retiring: Vec<u32>,
    /// Retired before the last drain: released at the next one.
    draining: Vec<u32>,
}

impl SlotLimbo {
    fn retire(&mut self, slots: [u32; 3]) {
        self.retiring.extend_from_slice(&slots);
    }

    /// A drain happened: the slots now free to release.
    fn drained(&mut self) -> Vec<u32> {
        let free = std::mem::take(&mut self.draining);
        self.draining = std::mem::take(&mut self.retiring);
        free
    }
}

/// A select group's kernel slot and how many offloaded flows run it.
#[derive(Clone, Copy, Debug)]
struct SelectSlot {
    slot: u32,
    users: u32,
}

/// The per-packet select an offloaded flow runs.
#[derive(Clone, Debug)]
struct FlowSelect {
    group: u32,
    /// Each bucket's position in the group, by its position in the action.
    index: Vec<u16>,
    /// Each bucket entry's kernel counters already credited to the group.
    seen: Vec<(u64, u64)>,
}

impl std::fmt::Debug for OffloadManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadManager")
            .field("engine", &self.engine)
            .field("ports", &self.ports)
            .finish()
    }
}

fn is_ip(dl_type: u16) -> bool {
    dl_type == 0x0800 || dl_type == 0x86dd
}

impl OffloadManager {
    /// Load the engine (the verifier runs here; a rejection is
    /// [`OffloadError::Verifier`] with the log).
    pub fn new(cfg: XdpEngineConfig) -> Result<OffloadManager, OffloadError> {
        Self::with_mode(cfg, OffloadMode::Xdp)
    }

    /// The engines `mode` asks for: XDP for AF_XDP ports (`xdp`, `auto`),
    /// TC for TC ports (`tc`, `auto`). The XDP engine is always loaded (it
    /// holds the shared bookkeeping of tunnels); under `tc` no port is
    /// given to it.
    pub fn with_mode(
        cfg: XdpEngineConfig,
        mode: OffloadMode,
    ) -> Result<OffloadManager, OffloadError> {
        Self::with_mode_pinned(cfg, mode, None)
    }

    /// As [`Self::with_mode`], the engines pinned under `pins` (the
    /// bridge's directory, `offload::pin`) so they outlive the daemon, or
    /// adopted from there when a previous daemon left them: then the TC
    /// engine keeps forwarding throughout, ports re-attached with
    /// [`Self::attach_port`] keep their slots, and
    /// [`Self::finish_adoption`] hands the flows it held to the datapath.
    pub fn with_mode_pinned(
        cfg: XdpEngineConfig,
        mode: OffloadMode,
        pins: Option<std::path::PathBuf>,
    ) -> Result<OffloadManager, OffloadError> {
        let pins = pins.as_deref();
        let engine = XdpEngine::open_kind(EngineKind::Xdp, cfg, pins)?;
        let tc = match mode {
            OffloadMode::Tc | OffloadMode::Profile(_) => {
                Some(XdpEngine::open_kind(EngineKind::Tc, cfg, pins)?)
            }
            // Under auto a TC engine the kernel refuses leaves the XDP one
            // running: TC ports then work through their own upcall
            // program, in userspace (`port:tc-engine-off`).
            OffloadMode::Auto => match XdpEngine::open_kind(EngineKind::Tc, cfg, pins) {
                Ok(e) => Some(e),
                Err(e) => {
                    tracing::error!(
                        "TC offload engine unavailable, TC ports stay in userspace: {e}"
                    );
                    None
                }
            },
            _ => None,
        };
        let netdev = match NetdevQuery::open() {
            Ok(q) => Some(q),
            Err(e) => {
                tracing::warn!(
                    "netdev genetlink family unavailable ({e}): no port can be an XDP \
                     redirect target, flows stay in userspace"
                );
                None
            }
        };
        let mut tc = tc;
        let adoption = tc.as_mut().filter(|t| t.adopted()).map(|t| Adoption {
            tx: t.tx_entries().into_iter().map(|(s, i)| (i, s)).collect(),
            in_port: t
                .port_entries()
                .into_iter()
                .filter(|(_, p)| p.in_port != 0)
                .map(|(i, p)| (i, p.in_port))
                .collect(),
            tunnels: t
                .tun_rx_entries()
                .into_iter()
                .map(|(k, r)| (k, r.in_port))
                .collect(),
            tun_rx: t.tun_rx_entries(),
        });
        Ok(OffloadManager {
            adoption,
            engine,
            tc,
            tc_ports: BTreeMap::new(),
            xdp_off: mode.tc_only(),
            netdev,
            ports: BTreeMap::new(),
            tunnels: BTreeMap::new(),
            underlays: BTreeMap::new(),
            others: BTreeMap::new(),
            flows: HashMap::new(),
            next_id: 1,
            ct_first: None,
            ct_templates: BTreeMap::new(),
            ct_limbo: SlotLimbo::default(),
            prefetched: HashMap::new(),
            removing: false,
            removal_reads: HashMap::new(),
            counters: ManagerCounters::default(),
            meters: BTreeMap::new(),
            select_slots: BTreeMap::new(),
            flow_selects: HashMap::new(),
            select_credit: BTreeMap::new(),
            select_buckets: BTreeMap::new(),
            select_published: BTreeMap::new(),
            emulation: mode.profile().map(super::profile::Emulation::new),
        })
    }

    pub fn engine(&self) -> &XdpEngine {
        &self.engine
    }

    pub fn counters(&self) -> ManagerCounters {
        self.counters
    }

    /// The XDP program's per-CPU counters, summed.
    pub fn engine_stats(&self) -> EngineStats {
        self.engine.stats().unwrap_or_default()
    }

    /// The TC program's, when the TC engine is loaded.
    pub fn tc_stats(&self) -> Option<EngineStats> {
        self.tc.as_ref().map(|e| e.stats().unwrap_or_default())
    }

    /// The TC engine, when loaded.
    pub fn tc_engine(&self) -> Option<&XdpEngine> {
        self.tc.as_ref()
    }

    /// (port name, redirect_peer) of every port the TC engine runs on,
    /// tunnel ports by their underlay.
    pub fn tc_ports(&self) -> Vec<(String, bool)> {
        let mut v: Vec<_> = self
            .tc_ports
            .values()
            .map(|p| (p.name.clone(), p.peer))
            .collect();
        for t in self.tunnels.values() {
            if let Some(u) = self.underlays.get(&t.underlay_ifindex) {
                if u.engine == EngineKind::Tc {
                    v.push((format!("{} (underlay {})", t.name, u.name), u.peer));
                }
            }
        }
        v
    }

    /// Kernel flows per engine: (xdp, tc).
    pub fn flows_per_engine(&self) -> (usize, usize) {
        let tc = self
            .flows
            .values()
            .filter(|(k, _)| *k == EngineKind::Tc)
            .count();
        (self.flows.len() - tc, tc)
    }

    pub fn n_flows(&self) -> usize {
        self.flows.len()
    }

    /// (port name, native, redirect target) of every port the engine runs
    /// on, tunnel ports by their underlay.
    pub fn xdp_ports(&self) -> Vec<(String, bool, bool)> {
        let mut v: Vec<_> = self
            .ports
            .values()
            .map(|p| (p.name.clone(), p.native, p.redirect_ok))
            .collect();
        for t in self.tunnels.values() {
            if let Some(u) = self
                .underlays
                .get(&t.underlay_ifindex)
                .filter(|u| u.engine == EngineKind::Xdp)
            {
                v.push((
                    format!("{} (underlay {})", t.name, u.name),
                    u.native,
                    u.redirect_ok,
                ));
            }
        }
        v
    }

    fn free_slot(&self) -> Option<u32> {
        let cfg = self.engine.config();
        let max = cfg.max_tx_ports.min(cfg.max_queues).min(cfg.max_ifaces);
        (0..max).find(|s| {
            self.ports.values().all(|p| p.slot != *s)
                && self
                    .underlays
                    .values()
                    .all(|u| u.engine != EngineKind::Xdp || u.slot != *s)
        })
    }

    /// May the TC engine send to this veth (whose peer is in another
    /// namespace) with `bpf_redirect_peer`? Not while the peer takes XDP
    /// redirects (it runs NAPI: `bpf_redirect` feeds it), and not while
    /// the port has a root qdisc that queues or shapes (`qdisc`: the
    /// redirect to the peer would skip it). A qdisc that cannot be read
    /// counts as none (logged).
    fn peer_redirect_ok(&mut self, ifindex: u32) -> bool {
        if self.accepts_redirects(ifindex) {
            return false;
        }
        match nicflow_port::qdisc::root_qdisc(ifindex) {
            Ok(kind) => !nicflow_port::qdisc::shapes(kind.as_deref()),
            Err(e) => {
                tracing::debug!(ifindex, "reading the root qdisc: {e}");
                true
            }
        }
    }

    fn accepts_redirects(&mut self, ifindex: u32) -> bool {
        match self.netdev.as_mut().map(|q| q.accepts_redirects(ifindex)) {
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                tracing::debug!(ifindex, "reading xdp-features: {e}");
                false
            }
            None => false,
        }
    }

    /// Run an engine on port `no` as its hook says (module docs): an
    /// AF_XDP port's socket into the XSKMAP, its interface into
    /// `dp_ports`, then its XDP link switched over to `xdp_dp`; a TC
    /// port's ingress gets `tc_dp` first; a tunnel is taken through its
    /// underlay. Other ports are only remembered (flows through them stay
    /// in userspace, for the reason returned). The port's `csum_complete`
    /// option says whether its peer sends complete TCP/UDP checksums.
    pub fn attach_port(
        &mut self,
        no: u32,
        name: &str,
        hook: &OffloadHook,
    ) -> Result<PortOffload, OffloadError> {
        if let Some(emu) = self.emulation.as_mut() {
            emu.port_add(no, name, hook);
        }
        match hook {
            OffloadHook::Tunnel(t) => {
                if let Err(reason) = self.attach_tunnel(no, name, t) {
                    tracing::info!(port = %name, "tunnel flows stay in userspace ({reason})");
                    self.others.insert(no, reason);
                }
            }
            OffloadHook::Tc(t) => {
                // One port the TC engine cannot take (no slot, attach
                // refused) stays in userspace through its own upcall
                // program; the engines go on for the others.
                if let Err(e) = self.attach_tc_port(no, name, t) {
                    tracing::warn!(port = %name, "TC offload engine not attached: {e}");
                    self.others.insert(no, "port:tc-attach-failed");
                }
            }
            OffloadHook::AfXdp(_) if self.xdp_off => {
                self.others.insert(no, "port:afxdp-offload-tc");
            }
            OffloadHook::AfXdp(x) => self.attach_xdp_port(no, name, x)?,
            OffloadHook::Userspace { kind } => {
                self.others.insert(no, super::kind_reason(kind));
            }
        }
        Ok(self.port_offload(no))
    }

    /// Where port `no` stands: the engine running on it, or the reason.
    fn port_offload(&self, no: u32) -> PortOffload {
        if self.ports.contains_key(&no) {
            PortOffload::Engine(EngineKind::Xdp.as_str())
        } else if self.tc_ports.contains_key(&no) {
            PortOffload::Engine(EngineKind::Tc.as_str())
        } else if let Some(t) = self.tunnels.get(&no) {
            PortOffload::Engine(t.engine.as_str())
        } else {
            PortOffload::Userspace(self.port_reason(no))
        }
    }

    /// A port or underlay attach failed part way: take back what it set
    /// (the link's own program when `adopted`, its `dp_ports` entry, its
    /// socket slot), so a failed `port_add` leaves nothing in the engine.
    /// Best effort: the attach's own error is the one reported.
    fn undo_xdp_attach(&mut self, ifindex: u32, slot: u32, adopted: bool) {
        if adopted {
            if let Err(e) = self.engine.release_link(ifindex) {
                tracing::warn!(
                    ifindex,
                    "giving the XDP link back after a failed attach: {e}"
                );
            }
        }
        let _ = self.engine.remove_port(ifindex);
        let _ = self.engine.unregister_xsk(slot);
    }

    fn attach_xdp_port(&mut self, no: u32, name: &str, x: &AfXdpHook) -> Result<(), OffloadError> {
        // The engine runs on the port's BPF link; without one (netlink
        // attachment, kernels before 5.9) the port keeps its own program
        // and its flows stay in userspace, as for any port the engine
        // cannot take, rather than failing the whole bridge's offload.
        let Some(link) = x.link else {
            tracing::warn!(port = %name, "its XDP program runs without a BPF link (kernel before 5.9): flows through it stay in userspace (port:afxdp-no-link)");
            self.others.insert(no, "port:afxdp-no-link");
            return Ok(());
        };
        let slot = self
            .free_slot()
            .ok_or_else(|| OffloadError::Config("no free port slot in the XDP engine".into()))?;
        let ifindex = x.ifindex;
        let base = slot.wrapping_sub(x.queue);
        self.engine.register_xsk(slot, x.xsk_fd)?;
        if let Err(e) = self.engine.set_port_xsk(ifindex, no, base) {
            self.undo_xdp_attach(ifindex, slot, false);
            return Err(e);
        }
        if let Err(e) = self.engine.adopt_link(ifindex, link) {
            // The link still runs the port's own program: the port works
            // through userspace.
            tracing::error!(port = %name, "switching the XDP link to xdp_dp failed: {e}");
            self.undo_xdp_attach(ifindex, slot, false);
            return Err(e);
        }
        let native = x.native;
        let mut p = XdpPort {
            name: name.to_string(),
            ifindex,
            slot,
            native,
            csum_complete: x.csum_complete,
            redirect_ok: false,
            tc_slot: None,
        };
        p.redirect_ok = self.accepts_redirects(ifindex);
        if p.redirect_ok {
            if let Err(e) = self.engine.set_tx_port(slot, ifindex) {
                self.undo_xdp_attach(ifindex, slot, true);
                return Err(e);
            }
        } else {
            tracing::info!(
                port = %name,
                "not an XDP redirect target (the device does not accept redirected frames; \
                 for a veth: no XDP program or GRO on its peer): flows out of it stay in \
                 userspace (port:no-xdp-xmit)"
            );
        }
        tracing::info!(
            port = %name, ifindex, slot,
            xdp = if native { "native" } else { "generic" },
            redirect_target = p.redirect_ok,
            "XDP offload engine attached"
        );
        p.tc_slot = self.tc_output_slot(ifindex);
        self.ports.insert(no, p);
        Ok(())
    }

    /// Run the TC engine on a TC port: its interface into `dp_ports` with
    /// its upcall device, an output slot, then `tc_dp` first on the
    /// interface's ingress hook (in front of the port's own `tc_upcall`).
    fn attach_tc_port(&mut self, no: u32, name: &str, t: &TcHook) -> Result<(), OffloadError> {
        let (ifindex, iface, upcall, peer_elsewhere) = (
            t.ifindex,
            t.iface.as_str(),
            t.upcall_ifindex,
            t.peer_elsewhere,
        );
        if self.tc.is_none() {
            self.others.insert(no, "port:tc-engine-off");
            return Ok(());
        }
        let peer = peer_elsewhere && self.peer_redirect_ok(ifindex);
        let slot = self
            .tc_slot_for(ifindex)
            .ok_or_else(|| OffloadError::Config("no free port slot in the TC engine".into()))?;
        let tc = self.tc.as_mut().expect("checked above");
        let r = tc
            .set_port_upcall(ifindex, no, upcall)
            .and_then(|()| tc.set_tx_port_flags(slot, ifindex, if peer { TX_PEER } else { 0 }))
            .and_then(|()| tc.attach_tc(ifindex, iface));
        if let Err(e) = r {
            let _ = tc.remove_port(ifindex);
            let _ = tc.clear_tx_port(slot);
            return Err(e);
        }
        tracing::info!(port = %name, ifindex, slot, redirect_peer = peer, "TC offload engine attached");
        self.tc_ports.insert(
            no,
            TcPortEntry {
                name: name.to_string(),
                ifindex,
                slot,
                peer_elsewhere,
                peer,
            },
        );
        Ok(())
    }

    /// The TC output slot for `ifindex`: the one an adopted engine gave
    /// it, else a free one.
    fn tc_slot_for(&self, ifindex: u32) -> Option<u32> {
        if let Some(&s) = self.adoption.as_ref().and_then(|a| a.tx.get(&ifindex)) {
            return Some(s);
        }
        self.free_tc_slot()
    }

    /// An adopted engine is still being taken over.
    pub fn adopting(&self) -> bool {
        self.adoption.is_some()
    }

    /// Done re-attaching the ports of an adopted TC engine: what no port
    /// claimed goes (output slots, `dp_ports` entries, pinned `tc_dp`
    /// links, tunnel endpoints), and the kernel flows whose ingress port
    /// kept its number are returned for the datapath to revalidate; the
    /// others are removed. Empty when nothing was adopted. Flows this
    /// daemon installed meanwhile (a take-over the bridge let wait, see
    /// `Bridge::enable_offload`) are its own, not adopted: same-key
    /// entries included, they are left alone.
    pub fn finish_adoption(&mut self) -> Vec<AdoptedFlow> {
        let Some(a) = self.adoption.take() else {
            return Vec::new();
        };
        let mut live: BTreeSet<u32> = self.tc_ports.values().map(|p| p.ifindex).collect();
        live.extend(
            self.underlays
                .iter()
                .filter(|(_, u)| u.engine == EngineKind::Tc)
                .map(|(i, _)| *i),
        );
        let attached = live.clone();
        live.extend(
            self.ports
                .values()
                .filter(|p| p.tc_slot.is_some())
                .map(|p| p.ifindex),
        );
        let new_no: BTreeMap<u32, u32> = self
            .tc_ports
            .iter()
            .map(|(no, p)| (p.ifindex, *no))
            .collect();
        let tun_no: Vec<(TunRxKey, u32)> = self
            .tunnels
            .iter()
            .filter(|(_, t)| t.engine == EngineKind::Tc)
            .map(|(no, t)| (t.rx_key, *no))
            .collect();
        // Under a profile the modelled NIC holds no state across a restart:
        // the previous daemon's flows go, and come back through upcalls,
        // each admitted (and its resources counted) again.
        let emulating = self.emulation.is_some();
        let Some(tc) = self.tc.as_mut() else {
            return Vec::new();
        };
        for (ifindex, slot) in &a.tx {
            if !live.contains(ifindex) {
                let _ = tc.clear_tx_port(*slot);
            }
        }
        for p in tc.port_entries() {
            if !attached.contains(&p.0) {
                let _ = tc.remove_port(p.0);
            }
        }
        tc.release_links_except(&attached);
        for (k, _) in tc.tun_rx_entries() {
            if !tun_no.iter().any(|(t, _)| *t == k) {
                let _ = tc.remove_tunnel_rx(&k);
            }
        }
        // A flow's ingress is the same port only if its number still
        // names the same interface (or tunnel endpoint).
        let same_port = |old: u32| {
            a.in_port
                .iter()
                .any(|(i, n)| *n == old && new_no.get(i) == Some(&old))
                || a.tunnels
                    .iter()
                    .any(|(k, n)| *n == old && tun_no.contains(&(*k, old)))
        };
        let mut out = Vec::new();
        let ours: HashSet<FlowHandle> = self
            .flows
            .values()
            .filter(|(k, _)| *k == EngineKind::Tc)
            .map(|(_, h)| *h)
            .collect();
        let handles: Vec<FlowHandle> = tc.flows().filter(|h| !ours.contains(h)).collect();
        let mut dropped = 0;
        for h in handles {
            // A per-packet select flow names a `dp_select` slot the
            // previous daemon gave its group, which this one does not know:
            // it goes, and comes back through an upcall with this
            // daemon's slot.
            let select = tc
                .value(&h)
                .is_ok_and(|v| v.flags & super::kernel::layout::flag::SELECT != 0);
            let decoded = tc
                .decode(&h)
                .filter(|(k, _)| !emulating && !select && same_port(k.in_port));
            let Some((key, mask)) = decoded else {
                let _ = tc.remove(&h);
                dropped += 1;
                continue;
            };
            let c = tc.counters(&h).unwrap_or_default();
            let id = self.next_id;
            self.next_id += 1;
            self.flows.insert(id, (EngineKind::Tc, h));
            out.push((
                id,
                Match::new(key, mask),
                KernelCounters {
                    packets: c.packets,
                    bytes: c.bytes,
                    used: c.used,
                    tcp_flags: c.tcp_flags,
                },
            ));
        }
        tracing::info!(
            flows = out.len(),
            removed = dropped,
            "adopted the TC engine's kernel flows (revalidated against the restored rules next)"
        );
        out
    }

    /// A TC output slot no TC port or AF_XDP port holds (None without a
    /// TC engine or room in it).
    fn free_tc_slot(&self) -> Option<u32> {
        let cfg = self.tc.as_ref()?.config();
        (0..cfg.max_tx_ports.min(cfg.max_ifaces)).find(|s| {
            // Slots an adopted engine's flows may still name are kept for
            // their interfaces.
            self.adoption
                .as_ref()
                .is_none_or(|a| a.tx.values().all(|r| r != s))
                && self.tc_ports.values().all(|p| p.slot != *s)
                && self.ports.values().all(|p| p.tc_slot != Some(*s))
                && self
                    .underlays
                    .values()
                    .all(|u| u.engine != EngineKind::Tc || u.slot != *s)
        })
    }

    /// A TC output slot for an AF_XDP port's interface (egress redirect),
    /// when the TC engine is loaded and has room; logged otherwise.
    fn tc_output_slot(&mut self, ifindex: u32) -> Option<u32> {
        let slot = self.tc_slot_for(ifindex)?;
        match self.tc.as_mut()?.set_tx_port_flags(slot, ifindex, 0) {
            Ok(()) => Some(slot),
            Err(e) => {
                tracing::warn!(ifindex, "TC output slot for an AF_XDP port: {e}");
                None
            }
        }
    }

    /// Give port `no` its own XDP program back (`xsk_redirect`, every frame
    /// to its socket) and forget it. Flows through it must be revalidated
    /// by the caller (its devmap slot is empty from here on, so offloaded
    /// flows to it are punted to userspace meanwhile).
    pub fn detach_port(&mut self, no: u32) -> Result<(), OffloadError> {
        self.others.remove(&no);
        if let Some(emu) = self.emulation.as_mut() {
            emu.port_del(no);
        }
        if self.tunnels.contains_key(&no) {
            return self.detach_tunnel(no);
        }
        // Every step is tried even when one fails (the bookkeeping has
        // already let go of the port); the first error is returned.
        let mut first: Option<OffloadError> = None;
        let mut keep = |r: Result<(), OffloadError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        if let Some(p) = self.tc_ports.remove(&no) {
            if let Some(tc) = self.tc.as_mut() {
                keep(tc.detach_tc(p.ifindex));
                keep(tc.clear_tx_port(p.slot));
                keep(tc.remove_port(p.ifindex));
            }
            return first.map_or(Ok(()), Err);
        }
        let Some(p) = self.ports.remove(&no) else {
            return Ok(());
        };
        keep(self.engine.clear_tx_port(p.slot));
        keep(self.engine.release_link(p.ifindex).map(|_| ()));
        keep(self.engine.remove_port(p.ifindex));
        keep(self.engine.unregister_xsk(p.slot));
        if let (Some(slot), Some(tc)) = (p.tc_slot, self.tc.as_mut()) {
            keep(tc.clear_tx_port(slot));
        }
        first.map_or(Ok(()), Err)
    }

    /// Is port `no` served by the engine?
    pub fn has_port(&self, no: u32) -> bool {
        self.ports.contains_key(&no)
            || self.tunnels.contains_key(&no)
            || self.tc_ports.contains_key(&no)
    }

    /// Take over the tunnel's underlay (once per underlay), enter its
    /// endpoint for decapsulation and give it a header slot. On failure the
    /// reason its flows stay in userspace; nothing is left behind.
    fn attach_tunnel(&mut self, no: u32, name: &str, t: &TunnelHook) -> Result<(), &'static str> {
        let cfg = t.cfg.clone();
        if let Some(reason) = super::tunnel_refusal(t) {
            return Err(reason);
        }
        let (ifindex, engine) = match t.underlay.as_ref() {
            OffloadHook::AfXdp(x) => (x.ifindex, EngineKind::Xdp),
            OffloadHook::Tc(p) => (p.ifindex, EngineKind::Tc),
            _ => unreachable!("tunnel_refusal checked the underlay's kind"),
        };
        match engine {
            // `offload = tc` leaves the XDP engine without ports.
            EngineKind::Xdp if self.xdp_off => return Err("tunnel:offload-tc"),
            EngineKind::Tc if self.tc.is_none() => return Err("port:tc-engine-off"),
            _ => {}
        }
        let n_slots = self.engine.tunnel_slots();
        let slot = (0..n_slots)
            .find(|s| {
                self.tunnels
                    .values()
                    .all(|t| t.engine != engine || t.slot != *s)
            })
            .ok_or("tunnel:no-slot")?;
        if !self.underlays.contains_key(&ifindex) {
            let r = match t.underlay.as_ref() {
                OffloadHook::AfXdp(x) => self.attach_underlay(x, t),
                OffloadHook::Tc(p) => self.attach_tc_underlay(p, t),
                _ => unreachable!("the underlay's kind was checked above"),
            };
            r.map_err(|e| {
                tracing::warn!(underlay = %t.underlay_iface, engine = engine.as_str(), "offload engine not attached to the underlay: {e}");
                "tunnel:underlay-not-attached"
            })?;
        }
        let rx_key = TunRxKey {
            ifindex,
            local: u32::from(cfg.local_ip),
            remote: u32::from(cfg.remote_ip),
            vni: match cfg.key {
                TunnelKey::Fixed(v) => v,
                TunnelKey::Flow => VNI_ANY,
            },
            dst_port: cfg.dst_port,
            pad: 0,
        };
        // The TLV map goes with the endpoint: the TC program reads
        // received Geneve options through it as the port does.
        let mut rx = TunRx::new(
            no,
            match cfg.kind {
                TunnelKind::Vxlan => TUN_VXLAN,
                TunnelKind::Geneve => TUN_GENEVE,
            },
            &cfg.tlv_map,
        );
        // Taking over a dead daemon's engine: the same endpoint as the same
        // port keeps the map it had until the port is given one.
        let adopted_rx = self.adoption.as_ref().and_then(|a| {
            a.tun_rx
                .iter()
                .find(|(k, r)| *k == rx_key && r.in_port == no && r.kind == rx.kind)
                .map(|(_, r)| *r)
        });
        if let Some(old) = adopted_rx.filter(|_| cfg.tlv_map.is_empty()) {
            rx = old;
        }
        let (local_ip, remote_ip) = (cfg.local_ip.octets(), cfg.remote_ip.octets());
        let (dst_port, csum) = (cfg.dst_port, cfg.csum);
        let tun = XdpTunnel {
            name: name.to_string(),
            engine,
            cfg,
            underlay_ifindex: ifindex,
            slot,
            rx_key,
            written: None,
        };
        if let Some(u) = self.underlays.get_mut(&ifindex) {
            u.users += 1;
        }
        self.tunnels.insert(no, tun);
        // An adopted header slot keeps the dead daemon's header (resolved
        // MACs) until `sync_tunnel` writes this port's: clearing it would
        // send every encapsulating flow to userspace until the remote's
        // MAC is resolved again.
        // Only if the slot holds this port's own header (same outer
        // addresses): another port may have had the slot before.
        let keep_tx = adopted_rx.is_some()
            && self
                .engine_mut(engine)
                .and_then(|e| e.tunnel_tx(slot))
                .is_some_and(|h| {
                    h.valid == 1
                        && h.hdr[26..30] == local_ip
                        && h.hdr[30..34] == remote_ip
                        && h.hdr[36..38] == dst_port.to_be_bytes()
                        && (h.flags & TUN_TX_CSUM != 0) == csum
                });
        let r = match self.engine_mut(engine) {
            Some(e) => (if keep_tx {
                Ok(())
            } else {
                e.clear_tunnel_tx(slot)
            })
            .and_then(|()| e.set_tunnel_rx(rx_key, rx)),
            None => Err(OffloadError::Config("no engine".into())),
        };
        if let Err(e) = r {
            tracing::warn!(port = %name, "tunnel maps: {e}");
            let _ = self.detach_tunnel(no);
            return Err("tunnel:underlay-not-attached");
        }
        self.sync_tunnel(no);
        tracing::info!(
            port = %name, underlay_ifindex = ifindex, slot, engine = engine.as_str(),
            "offload engine encapsulates and decapsulates for the tunnel"
        );
        Ok(())
    }

    fn attach_underlay(&mut self, x: &AfXdpHook, t: &TunnelHook) -> Result<(), OffloadError> {
        let ifindex = x.ifindex;
        let link = x.link.ok_or_else(|| {
            OffloadError::Config("the underlay's XDP program runs without a BPF link".into())
        })?;
        let slot = self
            .free_slot()
            .ok_or_else(|| OffloadError::Config("no free port slot in the XDP engine".into()))?;
        let name = t.underlay_iface.clone();
        let mac = t.view.mac();
        let mtu = u16::try_from(t.view.mtu()).unwrap_or(u16::MAX);
        let base = slot.wrapping_sub(x.queue);
        let native = x.native;
        self.engine.register_xsk(slot, x.xsk_fd)?;
        if let Err(e) = self.engine.set_underlay(ifindex, base, mac, mtu, 0) {
            self.undo_xdp_attach(ifindex, slot, false);
            return Err(e);
        }
        if let Err(e) = self.engine.adopt_link(ifindex, link) {
            tracing::error!(underlay = %name, "switching the XDP link to xdp_dp failed: {e}");
            self.undo_xdp_attach(ifindex, slot, false);
            return Err(e);
        }
        let redirect_ok = self.accepts_redirects(ifindex);
        if redirect_ok {
            if let Err(e) = self.engine.set_tx_port(slot, ifindex) {
                self.undo_xdp_attach(ifindex, slot, true);
                return Err(e);
            }
        } else {
            tracing::info!(
                underlay = %name,
                "the underlay does not accept redirected frames (a veth: no XDP program or GRO \
                 on its peer): encapsulated flows stay in userspace (port:no-xdp-xmit)"
            );
        }
        tracing::info!(underlay = %name, ifindex, slot, native, redirect_ok, "XDP offload engine attached to the tunnel underlay");
        self.underlays.insert(
            ifindex,
            XdpUnderlay {
                name,
                engine: EngineKind::Xdp,
                slot,
                native,
                redirect_ok,
                upcall: 0,
                peer_elsewhere: false,
                peer: false,
                users: 0,
                view: t.view.clone(),
                xsk_base: base,
                mac,
                mtu,
            },
        );
        Ok(())
    }

    /// Run the TC engine on a TC-port underlay: `dp_ports` marks it an
    /// underlay (misses to its upcall device), an output slot for the
    /// encapsulated frames, `tc_dp` first on its ingress hook.
    fn attach_tc_underlay(&mut self, p: &TcHook, t: &TunnelHook) -> Result<(), OffloadError> {
        let ifindex = p.ifindex;
        let (name, iface, upcall, peer_elsewhere) = (
            t.underlay_iface.clone(),
            p.iface.clone(),
            p.upcall_ifindex,
            p.peer_elsewhere,
        );
        let (mac, mtu) = (
            t.view.mac(),
            u16::try_from(t.view.mtu()).unwrap_or(u16::MAX),
        );
        let peer = peer_elsewhere && self.peer_redirect_ok(ifindex);
        let slot = self
            .tc_slot_for(ifindex)
            .ok_or_else(|| OffloadError::Config("no free port slot in the TC engine".into()))?;
        let tc = self
            .tc
            .as_mut()
            .ok_or_else(|| OffloadError::Config("no TC engine".into()))?;
        let r = tc
            .set_underlay(ifindex, 0, mac, mtu, upcall)
            .and_then(|()| tc.set_tx_port_flags(slot, ifindex, if peer { TX_PEER } else { 0 }))
            .and_then(|()| tc.attach_tc(ifindex, &iface));
        if let Err(e) = r {
            let _ = tc.remove_port(ifindex);
            let _ = tc.clear_tx_port(slot);
            return Err(e);
        }
        tracing::info!(underlay = %name, ifindex, slot, redirect_peer = peer, "TC offload engine attached to the tunnel underlay");
        self.underlays.insert(
            ifindex,
            XdpUnderlay {
                name,
                engine: EngineKind::Tc,
                slot,
                native: false,
                redirect_ok: true,
                upcall,
                peer_elsewhere,
                peer,
                users: 0,
                view: t.view.clone(),
                xsk_base: 0,
                mac,
                mtu,
            },
        );
        Ok(())
    }

    fn detach_tunnel(&mut self, no: u32) -> Result<(), OffloadError> {
        let Some(t) = self.tunnels.remove(&no) else {
            return Ok(());
        };
        // Every step is tried (bookkeeping first); the first error is
        // returned at the end.
        let last = match self.underlays.get_mut(&t.underlay_ifindex) {
            Some(u) => {
                u.users = u.users.saturating_sub(1);
                u.users == 0
            }
            None => false,
        };
        let mut first: Option<OffloadError> = None;
        let mut keep = |r: Result<(), OffloadError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        if let Some(e) = match t.engine {
            EngineKind::Xdp => Some(&mut self.engine),
            EngineKind::Tc => self.tc.as_mut(),
        } {
            keep(e.remove_tunnel_rx(&t.rx_key));
            keep(e.clear_tunnel_tx(t.slot));
        }
        if last && t.engine == EngineKind::Tc {
            if let (Some(u), Some(tc)) =
                (self.underlays.remove(&t.underlay_ifindex), self.tc.as_mut())
            {
                keep(tc.detach_tc(t.underlay_ifindex));
                keep(tc.clear_tx_port(u.slot));
                keep(tc.remove_port(t.underlay_ifindex));
            }
        } else if last {
            if let Some(u) = self.underlays.remove(&t.underlay_ifindex) {
                keep(self.engine.clear_tx_port(u.slot));
                keep(self.engine.release_link(t.underlay_ifindex).map(|_| ()));
                keep(self.engine.remove_port(t.underlay_ifindex));
                keep(self.engine.unregister_xsk(u.slot));
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Bring tunnel `no`'s header slot up to date with its remote's MAC
    /// (refreshing the ARP entry) and its underlay's redirect state.
    fn sync_tunnel(&mut self, no: u32) {
        let Some(t) = self.tunnels.get(&no) else {
            return;
        };
        let Some(u) = self.underlays.get(&t.underlay_ifindex) else {
            return;
        };
        let (src, dst, mtu) = (
            u.view.mac(),
            u.view.resolve(t.cfg.remote_ip, t.cfg.local_ip),
            u.view.mtu(),
        );
        // The underlay's MTU may have changed (`ip link set mtu`).
        let inner_mtu = mtu.saturating_sub(t.cfg.overhead()) as u32;
        let want = dst.map(|m| (m, u.redirect_ok, inner_mtu));
        if want == t.written {
            return;
        }
        let entry = match dst.and_then(|d| tunnel::header_template(&t.cfg, src, d)) {
            Some(hdr) if u.redirect_ok => Some(TunTx {
                lock: 0,
                valid: 1,
                tx_slot: u.slot,
                inner_mtu,
                hdr,
                flags: if t.cfg.csum { TUN_TX_CSUM } else { 0 },
            }),
            _ => None,
        };
        let slot = t.slot;
        let kind = t.engine;
        // Under the entry's lock: see `XdpEngine::set_tunnel_tx`.
        let Some(engine) = self.engine_mut(kind) else {
            return;
        };
        let r = match entry {
            Some(e) => engine.set_tunnel_tx(slot, e),
            None => engine.clear_tunnel_tx(slot),
        };
        match r {
            Ok(()) => {
                if let Some(t) = self.tunnels.get_mut(&no) {
                    tracing::debug!(port = %t.name, valid = entry.is_some(), engine = kind.as_str(), "tunnel header");
                    t.written = want;
                }
            }
            Err(e) => tracing::warn!("updating the tunnel header: {e}"),
        }
    }

    /// Housekeeping: re-read which devices accept redirects. A port that
    /// stopped has its devmap slot emptied at once (offloaded flows to it
    /// are punted to userspace by the program's pre-check); one that
    /// started gets it filled. Returns true when flows must be re-placed.
    pub fn tick(&mut self) -> bool {
        let mut changed = false;
        // TC ports: a peer that started or stopped running XDP (or GRO),
        // or a root qdisc added to or removed from the port, switches
        // between the transmit path and bpf_redirect_peer. No
        // flow changes: the output slot stays, only how it is reached.
        let tcs: Vec<(u32, u32, u32, bool, bool)> = self
            .tc_ports
            .iter()
            .map(|(no, p)| (*no, p.ifindex, p.slot, p.peer_elsewhere, p.peer))
            .collect();
        for (no, ifindex, slot, elsewhere, was) in tcs {
            if let Some(now) = self.recheck_tc_peer(ifindex, slot, elsewhere, was) {
                if let Some(p) = self.tc_ports.get_mut(&no) {
                    tracing::info!(port = %p.name, "TC output by redirect_peer: {was} -> {now}");
                    p.peer = now;
                }
            }
        }
        let nos: Vec<u32> = self.ports.keys().copied().collect();
        for no in nos {
            let (ifindex, slot, was) = {
                let p = &self.ports[&no];
                (p.ifindex, p.slot, p.redirect_ok)
            };
            let now = self.accepts_redirects(ifindex);
            if now == was || !self.set_redirect(slot, ifindex, now) {
                continue;
            }
            if let Some(p) = self.ports.get_mut(&no) {
                tracing::info!(
                    port = %p.name,
                    "XDP redirect target: {was} -> {now}; re-placing flows"
                );
                p.redirect_ok = now;
            }
            changed = true;
        }
        let ifs: Vec<u32> = self.underlays.keys().copied().collect();
        for ifindex in ifs.iter().copied() {
            let Some(u) = self.underlays.get(&ifindex) else {
                continue;
            };
            if u.engine == EngineKind::Tc {
                // As for TC ports: only how the slot is reached changes.
                let (elsewhere, was, slot) = (u.peer_elsewhere, u.peer, u.slot);
                if let Some(now) = self.recheck_tc_peer(ifindex, slot, elsewhere, was) {
                    if let Some(u) = self.underlays.get_mut(&ifindex) {
                        tracing::info!(underlay = %u.name, "TC output by redirect_peer: {was} -> {now}");
                        u.peer = now;
                    }
                }
                continue;
            }
            let now = self.accepts_redirects(ifindex);
            let Some(u) = self.underlays.get_mut(&ifindex) else {
                continue;
            };
            if now == u.redirect_ok {
                continue;
            }
            let slot = u.slot;
            u.redirect_ok = now;
            tracing::info!(underlay = %u.name, "XDP redirect target: {}", now);
            // Flows refused with port:no-xdp-xmit may go to the kernel now.
            changed |= now;
            self.set_redirect(slot, ifindex, now);
        }
        // Underlay MTUs: decapsulation hands longer frames to userspace.
        let ifs: Vec<u32> = self.underlays.keys().copied().collect();
        for ifindex in ifs {
            let Some(u) = self.underlays.get_mut(&ifindex) else {
                continue;
            };
            let mtu = u16::try_from(u.view.mtu()).unwrap_or(u16::MAX);
            if mtu == u.mtu {
                continue;
            }
            u.mtu = mtu;
            let (base, mac, upcall, kind) = (u.xsk_base, u.mac, u.upcall, u.engine);
            let Some(engine) = self.engine_mut(kind) else {
                continue;
            };
            if let Err(e) = engine.set_underlay(ifindex, base, mac, mtu, upcall) {
                tracing::warn!(ifindex, "updating the underlay's MTU: {e}");
            }
        }
        // Encapsulating flows need no re-placing: an invalid header makes
        // the program punt their frames.
        let tuns: Vec<u32> = self.tunnels.keys().copied().collect();
        for no in tuns {
            self.sync_tunnel(no);
        }
        changed
    }

    /// A TC output slot's way out, re-read: `bpf_redirect_peer` for a veth
    /// whose peer is elsewhere and runs no NAPI. Some(new state) when it
    /// changed and the slot was rewritten; None otherwise (failures logged).
    fn recheck_tc_peer(
        &mut self,
        ifindex: u32,
        slot: u32,
        elsewhere: bool,
        was: bool,
    ) -> Option<bool> {
        let now = elsewhere && self.peer_redirect_ok(ifindex);
        if now == was {
            return None;
        }
        let flags = if now { TX_PEER } else { 0 };
        match self.tc.as_mut()?.set_tx_port_flags(slot, ifindex, flags) {
            Ok(()) => Some(now),
            Err(e) => {
                tracing::warn!(ifindex, "updating a TC output slot: {e}");
                None
            }
        }
    }

    /// Fill (or empty) devmap slot `slot` for `ifindex`; false (logged)
    /// when the map update failed.
    fn set_redirect(&mut self, slot: u32, ifindex: u32, on: bool) -> bool {
        let r = if on {
            self.engine.set_tx_port(slot, ifindex)
        } else {
            self.engine.clear_tx_port(slot)
        };
        if let Err(e) = &r {
            tracing::warn!(ifindex, "updating the devmap: {e}");
        }
        r.is_ok()
    }

    fn port_reason(&self, no: u32) -> &'static str {
        self.others.get(&no).copied().unwrap_or("port:unknown")
    }

    /// Every check of the module docs; the encoded flow or the reason.
    fn decide(
        &self,
        m: &Match,
        actions: &[DpAction],
    ) -> Result<(EngineKind, super::kernel::EncodedFlow), &'static str> {
        let key = m.key();
        let mask = m.mask().0;
        if mask.in_port != u32::MAX {
            return Err("match:in_port-wildcarded");
        }
        if self.in_tc(key.in_port) {
            // The TC engine: skbs keep their checksum state and GSO, so
            // no protocol restriction; every output must be reachable from
            // TC: a TC port, a TC tunnel, an AF_XDP port's egress.
            let n_out = actions
                .iter()
                .filter(|a| matches!(a, DpAction::Output(_)))
                .count();
            for a in actions {
                if let DpAction::Output(p) = a {
                    if let Some(t) = self.tunnels.get(p) {
                        if t.engine != EngineKind::Tc {
                            return Err("tc:tunnel-xdp-underlay");
                        }
                        continue;
                    }
                    let xdp_reachable = self.ports.get(p).is_some_and(|x| x.tc_slot.is_some());
                    if !self.tc_ports.contains_key(p) && !xdp_reachable && n_out == 1 {
                        return Err(match self.ports.contains_key(p) {
                            true => "port:afxdp-from-tc",
                            false => self.port_reason(*p),
                        });
                    }
                }
            }
            return encode_tc(key, m.mask(), actions, &TcSlots(self))
                .map(|e| (EngineKind::Tc, e))
                .map_err(|e| e.reason);
        }
        // (checksums complete, native XDP) of the ingress.
        let (csum_complete, native) = if let Some(p) = self.ports.get(&key.in_port) {
            (p.csum_complete, p.native)
        } else if let Some(t) = self
            .tunnels
            .get(&key.in_port)
            .filter(|t| t.engine == EngineKind::Xdp)
        {
            let native = self
                .underlays
                .get(&t.underlay_ifindex)
                .is_some_and(|u| u.native);
            (t.cfg.csum_complete, native)
        } else {
            return Err(self.port_reason(key.in_port));
        };
        if mask.dl_type != 0xffff {
            return Err("csum:protocol-wildcarded");
        }
        if is_ip(key.dl_type) {
            if mask.nw_proto != 0xff {
                return Err("csum:protocol-wildcarded");
            }
            if matches!(key.nw_proto, 6 | 17 | 132) {
                if !csum_complete {
                    return Err("csum:partial-possible");
                }
                if !native {
                    return Err("port:generic-xdp");
                }
            }
        }
        for a in actions {
            if let DpAction::Output(p) = a {
                if let Some(t) = self.tunnels.get(p) {
                    if t.engine != EngineKind::Xdp {
                        return Err("port:tc-from-xdp");
                    }
                    if !self
                        .underlays
                        .get(&t.underlay_ifindex)
                        .is_some_and(|u| u.redirect_ok)
                    {
                        return Err("port:no-xdp-xmit");
                    }
                    continue;
                }
                match self.ports.get(p) {
                    Some(x) if x.redirect_ok => {}
                    Some(_) => return Err("port:no-xdp-xmit"),
                    None if self.tc_ports.contains_key(p) => return Err("port:tc-from-xdp"),
                    None => {
                        // Floods are refused as such by the encoder.
                        let n_out = actions
                            .iter()
                            .filter(|a| matches!(a, DpAction::Output(_)))
                            .count();
                        if n_out == 1 {
                            return Err(self.port_reason(*p));
                        }
                    }
                }
            }
        }
        encode(key, m.mask(), actions, &Slots(self))
            .map(|e| (EngineKind::Xdp, e))
            .map_err(|e| e.reason)
    }

    /// Frames from port `no` meet the TC engine: a TC port, or a tunnel
    /// whose underlay is one.
    fn in_tc(&self, no: u32) -> bool {
        self.tc_ports.contains_key(&no)
            || self
                .tunnels
                .get(&no)
                .is_some_and(|t| t.engine == EngineKind::Tc)
    }

    /// Put the meters `actions` name into engine `kind`'s `dp_meters`
    /// before a flow using them is written there.
    fn ensure_meters(
        &mut self,
        kind: EngineKind,
        actions: &[DpAction],
    ) -> Result<(), &'static str> {
        // Meters inside a select's buckets too: each bucket runs as a
        // kernel flow of its own and finds its meter in the map.
        let mut ids = Vec::new();
        crate::datapath::action::walk(actions, &mut |a| {
            if let DpAction::Meter(id) = *a {
                ids.push(id);
            }
        });
        for id in ids {
            let spec = self.meters.get(&id).ok_or("meter:unknown")?;
            let entry = encode::encode_meter(spec).ok_or("meter:too-many-bands")?;
            let engine = self.engine_mut(kind).ok_or("engine-error")?;
            if engine.has_meter(id) {
                continue;
            }
            engine.set_meter(entry, id).map_err(|e| {
                e.reason().unwrap_or_else(|| {
                    tracing::warn!("kernel meter write failed: {e}");
                    "engine-error"
                })
            })?;
        }
        Ok(())
    }

    /// Give every per-packet select group in `actions` a `dp_select`
    /// slot (before the encoder looks for it): the lowest free one, its
    /// rotation zeroed in both engines. It stays held only once a flow
    /// running it is installed ([`Self::attach_select`]); a refused flow's
    /// fresh slot is freed again by [`Self::release_unused_selects`].
    fn ensure_select_slots(&mut self, actions: &[DpAction]) -> Result<(), &'static str> {
        for a in actions {
            if let DpAction::Select { group, .. } = a {
                if self.select_slots.contains_key(group) {
                    continue;
                }
                let slot = (0..super::kernel::layout::SELECT_SLOTS)
                    .find(|s| self.select_slots.values().all(|x| x.slot != *s))
                    .ok_or("select:no-slot")?;
                for kind in [EngineKind::Xdp, EngineKind::Tc] {
                    if let Some(e) = self.engine_mut(kind) {
                        if let Err(err) = e.reset_select_state(slot) {
                            tracing::warn!(group, slot, "kernel select state not reset: {err}");
                            return Err("engine-error");
                        }
                    }
                }
                self.select_slots
                    .insert(*group, SelectSlot { slot, users: 0 });
            }
        }
        Ok(())
    }

    /// Free the slots no installed flow runs (given for a flow that was
    /// then refused, or left by the last flow of their group).
    fn release_unused_selects(&mut self) {
        let gone: Vec<u32> = self
            .select_slots
            .iter()
            .filter(|(_, s)| s.users == 0)
            .map(|(g, _)| *g)
            .collect();
        for g in gone {
            self.select_slots.remove(&g);
            self.select_buckets.remove(&g);
        }
    }

    /// Installed flow `id` runs the select of `actions` (if any): it holds
    /// the group's slot, and its buckets' counters are credited from what
    /// they hold now.
    fn attach_select(&mut self, id: u64, actions: &[DpAction]) {
        let Some((group, index)) = actions.iter().find_map(|a| match a {
            DpAction::Select { group, buckets, .. } => {
                Some((*group, buckets.iter().map(|b| b.index).collect::<Vec<_>>()))
            }
            _ => None,
        }) else {
            return;
        };
        if let Some(s) = self.select_slots.get_mut(&group) {
            s.users += 1;
        }
        let seen = self
            .read_buckets(id, index.len())
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        self.flow_selects
            .insert(id, FlowSelect { group, index, seen });
    }

    /// Flow `id` no longer runs its select: credit what its buckets counted
    /// since the last credit, and let go of the group's slot (freed with
    /// its last flow).
    fn detach_select(&mut self, id: u64) {
        self.credit_select(id);
        let Some(fs) = self.flow_selects.remove(&id) else {
            return;
        };
        if let Some(s) = self.select_slots.get_mut(&fs.group) {
            s.users = s.users.saturating_sub(1);
        }
        self.release_unused_selects();
    }

    /// Flow `id`'s first `n` bucket entries' kernel counters, by position
    /// (`n`: the buckets of its select, which the manager knows: no read of
    /// the flow's own entry, no probe past its last bucket).
    fn read_buckets(&self, id: u64, n: usize) -> Vec<Option<(u64, u64)>> {
        let Some((kind, h)) = self.flows.get(&id) else {
            return Vec::new();
        };
        let e = match kind {
            EngineKind::Xdp => Some(&self.engine),
            EngineKind::Tc => self.tc.as_ref(),
        };
        e.and_then(|e| e.bucket_counters(h, n).ok())
            .unwrap_or_default()
    }

    /// Credit to flow `id`'s group what each of its buckets counted since
    /// the last credit.
    fn credit_select(&mut self, id: u64) {
        if !self.flow_selects.contains_key(&id) {
            return;
        }
        let n = self.flow_selects.get(&id).map_or(0, |fs| fs.index.len());
        let now = self.read_buckets(id, n);
        let Some(fs) = self.flow_selects.get_mut(&id) else {
            return;
        };
        let credit = self.select_credit.entry(fs.group).or_default();
        for (pos, index) in fs.index.iter().enumerate() {
            let Some(Some((p, b))) = now.get(pos).copied() else {
                continue;
            };
            let Some(seen) = fs.seen.get_mut(pos) else {
                continue;
            };
            // An entry rewritten in place keeps its counts; one that went
            // down was replaced: all it holds is new.
            let (dp, db) = if p >= seen.0 && b >= seen.1 {
                (p - seen.0, b - seen.1)
            } else {
                (p, b)
            };
            *seen = (p, b);
            let i = usize::from(*index);
            if credit.len() <= i {
                credit.resize(i + 1, (0, 0));
            }
            credit[i].0 += dp;
            credit[i].1 += db;
        }
    }

    /// Write the weights the selects in `actions` choose by into engine
    /// `kind`'s `dp_select_w`: wrr the buckets' weights, splb what was
    /// published (the buckets' weights until then), by position in the
    /// action.
    fn write_select_weights(
        &mut self,
        kind: EngineKind,
        actions: &[DpAction],
    ) -> Result<(), &'static str> {
        for a in actions {
            if let DpAction::Select {
                group,
                method,
                buckets,
            } = a
            {
                let b: Vec<(u16, u16)> = buckets.iter().map(|b| (b.index, b.weight)).collect();
                self.select_buckets.insert(*group, (*method, b));
                self.sync_select(kind, *group)?;
            }
        }
        Ok(())
    }

    /// Rewrite group `group`'s weights in engine `kind` from what is known
    /// of it.
    fn sync_select(&mut self, kind: EngineKind, group: u32) -> Result<(), &'static str> {
        let (Some(slot), Some((method, buckets))) = (
            self.select_slots.get(&group).map(|s| s.slot),
            self.select_buckets.get(&group),
        ) else {
            return Ok(());
        };
        let published = self.select_published.get(&group);
        let mut w = super::kernel::layout::SelectWeights::default();
        for (d, (index, weight)) in w.w.iter_mut().zip(buckets) {
            *d = match method {
                SelectMethod::RoundRobin => 1,
                SelectMethod::Weighted => u32::from(*weight),
                SelectMethod::Splb => published
                    .and_then(|p| p.get(usize::from(*index)).copied())
                    .unwrap_or(u32::from(*weight)),
            };
        }
        let engine = self.engine_mut(kind).ok_or("engine-error")?;
        engine.set_select_weights(slot, w).map_err(|e| {
            e.reason().unwrap_or_else(|| {
                tracing::warn!("kernel select weights write failed: {e}");
                "engine-error"
            })
        })
    }

    /// [`FlowOffload::offload`] without the select slots' bookkeeping.
    fn offload_flow(
        &mut self,
        matching: &Match,
        actions: &[DpAction],
    ) -> Result<u64, &'static str> {
        // A tunnel's header may have become valid since the last tick (the
        // first packet's ARP exchange): write it before the flow needs it.
        for a in actions {
            if let DpAction::Output(p) = a {
                if self.tunnels.contains_key(p) {
                    self.sync_tunnel(*p);
                }
            }
        }
        if let Err(r) = self.ensure_select_slots(actions) {
            self.counters.refused += 1;
            return Err(r);
        }
        let (kind, enc) = match self.decide(matching, actions) {
            Ok(e) => e,
            Err(r) => {
                self.counters.refused += 1;
                return Err(r);
            }
        };
        // The emulated NIC decides after nicflow's own engine could: a flow
        // nicflow itself keeps in userspace keeps nicflow's reason.
        let admitted = match self.emulation.as_mut().map(|e| {
            let meters = super::profile::drop_meters(self.meters.values());
            e.admit(matching, actions, &meters)
        }) {
            Some(Err(r)) => {
                self.counters.refused += 1;
                return Err(r);
            }
            Some(Ok(tc)) => Some(tc),
            None => None,
        };
        let give_back = |m: &mut Self, tc: Option<nicflow_hwprofile::tc::TcFlower>| {
            if let (Some(emu), Some(tc)) = (m.emulation.as_mut(), tc) {
                emu.give_back(&tc);
            }
        };
        if let Err(r) = self
            .ensure_meters(kind, actions)
            .and_then(|()| self.write_select_weights(kind, actions))
        {
            self.counters.refused += 1;
            give_back(self, admitted);
            return Err(r);
        }
        let Some(engine) = self.engine_mut(kind) else {
            give_back(self, admitted);
            return Err("engine-error");
        };
        match engine.install(&enc) {
            Ok(h) => {
                let id = self.next_id;
                self.next_id += 1;
                self.flows.insert(id, (kind, h));
                self.counters.installed += 1;
                if let (Some(emu), Some(tc)) = (self.emulation.as_mut(), admitted) {
                    emu.hold(id, tc);
                }
                Ok(id)
            }
            Err(e) => {
                give_back(self, admitted);
                self.counters.refused += 1;
                match e.reason() {
                    Some(r) => Err(r),
                    None => {
                        tracing::warn!("kernel flow install failed: {e}");
                        Err("engine-error")
                    }
                }
            }
        }
    }

    /// Between `begin_removals` and `commit_removals`: remove flow `id`,
    /// read since `begin_removals`, without a system call: its entry is
    /// queued for the engine's batched delete at the commit, and the
    /// counters read are its last (frames the kernel counts on it until
    /// the delete are lost to them). `None`: not such a flow (not read,
    /// a per-packet select flow, whose buckets' entries go with it, or
    /// staged): the caller removes it at once.
    fn queue_removal(&mut self, id: u64) -> Option<KernelCounters> {
        if !self.removing || self.flow_selects.contains_key(&id) {
            return None;
        }
        let last = self.removal_reads.remove(&id)?;
        let (kind, h) = *self.flows.get(&id)?;
        match self.engine_mut(kind)?.queue_removal(&h) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                // Not installed in the engine: forgotten, as `drop_flow`
                // does with an engine's failed removal.
                tracing::warn!("kernel flow remove failed: {e}");
            }
        }
        self.flows.remove(&id);
        if let Some(emu) = self.emulation.as_mut() {
            emu.release(id);
        }
        Some(last)
    }

    /// [`FlowOffload::remove`] without counting it removed (a flow of a
    /// failed `commit_ct` was never installed).
    fn drop_flow(&mut self, id: u64) -> Option<KernelCounters> {
        // Its buckets' last counts go to the group before the entries go.
        self.credit_select(id);
        let (kind, h) = self.flows.remove(&id)?;
        self.detach_select(id);
        if let Some(emu) = self.emulation.as_mut() {
            emu.release(id);
        }
        match self.engine_mut(kind)?.remove(&h) {
            Ok(c) => Some(KernelCounters {
                packets: c.packets,
                bytes: c.bytes,
                used: c.used,
                tcp_flags: c.tcp_flags,
            }),
            Err(e) => {
                tracing::warn!("kernel flow remove failed: {e}");
                None
            }
        }
    }

    /// [`FlowOffload::modify`] without the select slots' bookkeeping.
    fn modify_flow(
        &mut self,
        id: u64,
        matching: &Match,
        actions: &[DpAction],
    ) -> Result<(), &'static str> {
        let Some((kind, h)) = self.flows.get(&id).copied() else {
            return Err("engine-error");
        };
        self.ensure_select_slots(actions)?;
        let (new_kind, enc) = self.decide(matching, actions)?;
        if new_kind != kind {
            return Err("engine-error");
        }
        if let Some(emu) = self.emulation.as_mut() {
            // The NIC sees a modify as a new filter replacing the old one.
            let meters = super::profile::drop_meters(self.meters.values());
            emu.release(id);
            let tc = match emu.admit(matching, actions, &meters) {
                Ok(tc) => tc,
                Err(r) => {
                    self.counters.refused += 1;
                    return Err(r);
                }
            };
            emu.hold(id, tc);
        }
        self.ensure_meters(kind, actions)?;
        self.write_select_weights(kind, actions)?;
        let Some(engine) = self.engine_mut(kind) else {
            return Err("engine-error");
        };
        match engine.modify(&h, &enc) {
            Ok(()) => {
                self.counters.modified += 1;
                Ok(())
            }
            Err(e) => {
                tracing::warn!("kernel flow modify failed: {e}");
                Err("engine-error")
            }
        }
    }

    fn engine_mut(&mut self, kind: EngineKind) -> Option<&mut XdpEngine> {
        match kind {
            EngineKind::Xdp => Some(&mut self.engine),
            EngineKind::Tc => self.tc.as_mut(),
        }
    }
}

/// The TC ports' output slots as the encoder sees them (tunnel ports are
/// refused by `encode_tc`).
struct TcSlots<'a>(&'a OffloadManager);

impl PortSlots for TcSlots<'_> {
    fn slot(&self, port: u32) -> Option<u32> {
        match self.0.tc_ports.get(&port) {
            Some(p) => Some(p.slot),
            None => self.0.ports.get(&port).and_then(|x| x.tc_slot),
        }
    }

    fn tunnel(&self, port: u32) -> Option<TunnelSlot> {
        tunnel_slot(self.0, port, EngineKind::Tc)
    }

    fn select_slot(&self, group: u32) -> Option<u32> {
        self.0.select_slots.get(&group).map(|s| s.slot)
    }
}

/// The manager's ports as the encoder sees them.
struct Slots<'a>(&'a OffloadManager);

impl PortSlots for Slots<'_> {
    fn slot(&self, port: u32) -> Option<u32> {
        self.0
            .ports
            .get(&port)
            .filter(|x| x.redirect_ok)
            .map(|x| x.slot)
    }

    fn tunnel(&self, port: u32) -> Option<TunnelSlot> {
        tunnel_slot(self.0, port, EngineKind::Xdp)
    }

    fn select_slot(&self, group: u32) -> Option<u32> {
        self.0.select_slots.get(&group).map(|s| s.slot)
    }
}

/// Tunnel port `port`'s header slot in `engine` (None: not a tunnel of
/// that engine).
fn tunnel_slot(m: &OffloadManager, port: u32, engine: EngineKind) -> Option<TunnelSlot> {
    m.tunnels
        .get(&port)
        .filter(|t| t.engine == engine)
        .map(|t| TunnelSlot {
            tlv: super::kernel::TunnelTlv::new(&t.cfg.tlv_map),
            slot: t.slot,
            flow_key: t.cfg.key == TunnelKey::Flow,
        })
}

impl Drop for OffloadManager {
    fn drop(&mut self) {
        if !self.ports.is_empty() || !self.tunnels.is_empty() || !self.tc_ports.is_empty() {
            // The bridge detaches every port first; a port still attached
            // here gets its own XDP program back when the engine drops
            // (`XdpEngine`'s drop), but its maps' entries go with it.
            tracing::warn!(
                ports = self.ports.len(),
                "XDP offload engine dropped with ports attached"
            );
        }
    }
}

impl FlowOffload for OffloadManager {
    fn adopting(&self) -> bool {
        self.adoption.is_some()
    }

    fn finish_adoption(&mut self) -> Vec<AdoptedFlow> {
        OffloadManager::finish_adoption(self)
    }

    fn refine_mask(&self, key: &FlowKey, mask: &mut FlowMask) {
        mask.0.in_port = u32::MAX;
        if self.emulation.is_some() {
            // What OVS's datapath flow always matches (xlate_wc_init: the
            // EtherType, the fragment bits of IP), the IP protocol its TC
            // translation reads, and a present tag whole (a pop or rewrite
            // matches all of it): the emulated NIC judges these values.
            mask.0.dl_type = 0xffff;
            if is_ip(key.dl_type) {
                mask.0.nw_frag |= 3;
                mask.0.nw_proto = 0xff;
            }
            if key.vlan_tci & 0x1000 != 0 {
                mask.0.vlan_tci = 0xffff;
            }
        }
        if self.in_tc(key.in_port) {
            // The TC engine decides nothing by protocol.
            return;
        }
        mask.0.dl_type = 0xffff;
        if is_ip(key.dl_type) {
            mask.0.nw_proto = 0xff;
        }
    }

    fn offload(&mut self, matching: &Match, actions: &[DpAction]) -> Result<u64, &'static str> {
        let r = self.offload_flow(matching, actions);
        match r {
            Ok(id) => self.attach_select(id, actions),
            Err(_) => self.release_unused_selects(),
        }
        r
    }

    fn offload_ct(
        &mut self,
        matching: &Match,
        actions: &[DpAction],
        parts: [(&Match, &[DpAction]); 2],
    ) -> Result<u64, &'static str> {
        if self.emulation.is_none() {
            return self.offload(matching, actions);
        }
        // On the NIC the connection is an entry of its conntrack table,
        // used by the two flows' filters (act_ct, then the ct_state match
        // in the recirculation's chain): both must be held (shared by every
        // connection through them), and the table must have room. The
        // composed entry itself is nicflow's means and takes no filter.
        let meters = super::profile::drop_meters(self.meters.values());
        let emu = self.emulation.as_mut().expect("checked above");
        let first = match emu.admit_part(parts[0].0, parts[0].1, &meters) {
            Ok(k) => k,
            Err(r) => {
                self.counters.refused += 1;
                return Err(r);
            }
        };
        let second = match emu.admit_part(parts[1].0, parts[1].1, &meters) {
            Ok(k) => k,
            Err(r) => {
                emu.release_part(&first);
                self.counters.refused += 1;
                return Err(r);
            }
        };
        if let Err(r) = emu.ct_take() {
            emu.release_part(&first);
            emu.release_part(&second);
            self.counters.refused += 1;
            return Err(r);
        }
        let saved = self.emulation.take();
        let r = self.offload(matching, actions);
        self.emulation = saved;
        let emu = self.emulation.as_mut().expect("restored");
        match r {
            Ok(id) => {
                emu.hold_ct(id, [first, second]);
                Ok(id)
            }
            Err(e) => {
                emu.ct_give_back();
                emu.release_part(&first);
                emu.release_part(&second);
                Err(e)
            }
        }
    }

    fn ct_templates(&self, in_port: u32) -> bool {
        self.emulation.is_none()
            && self.in_tc(in_port)
            && self.tc.as_ref().is_some_and(|e| e.ct_templates())
    }

    fn set_ct_template(&mut self, t: &CtTemplateSpec) -> Result<(), &'static str> {
        use super::kernel::layout::{CtTpl, CtTplKey, DpKey, FlowValue};
        if self.emulation.is_some() {
            return Err("ct:bpf-emulated-nic");
        }
        if !self.in_tc(t.in_port) || !self.tc.as_ref().is_some_and(|e| e.ct_templates()) {
            return Err("ct:bpf-unsupported");
        }
        let mut encoded = Vec::with_capacity(3);
        for (m, a) in &t.entries {
            match self.decide(m, a)? {
                (EngineKind::Tc, e) if e.buckets.is_empty() => encoded.push(e),
                _ => return Err("ct:bpf-unsupported"),
            }
        }
        // Where the SYN leaves: the slot an `output` to its port has.
        let out = match self.decide(&t.entries[0].0, &[DpAction::Output(t.syn_out)])? {
            (EngineKind::Tc, e) if e.value.flags & super::kernel::layout::flag::OUTPUT != 0 => {
                e.value.out_slot
            }
            _ => return Err("ct:bpf-unsupported"),
        };
        let engine = self.tc.as_mut().ok_or("ct:bpf-unsupported")?;
        let mut slots = [0u32; 3];
        for (i, e) in encoded.iter().enumerate() {
            match engine.hold_mask(&e.mask) {
                Ok(s) => slots[i] = s,
                Err(_) => {
                    for &s in &slots[..i] {
                        let _ = engine.drop_mask(s);
                    }
                    return Err("mask-table-full");
                }
            }
        }
        let value = |e: &super::kernel::EncodedFlow| FlowValue {
            key: DpKey::default(),
            ..e.value
        };
        let vmask = DpKey::from_flow_key(&t.vmask);
        let tpl = CtTpl {
            gen: t.gen,
            out_port: t.out_port,
            syn_slot: out,
            mask_idx: slots,
            tcp_flags: t.tcp_flags,
            pad: 0,
            pad2: 0,
            vmask,
            vkey: DpKey::from_flow_key(&t.vkey).masked(&vmask),
            entry: [value(&encoded[0]), value(&encoded[1]), value(&encoded[2])],
        };
        let key = CtTplKey {
            in_port: t.in_port,
            dl_type: t.dl_type,
            pad: 0,
        };
        if let Err(e) = engine.set_ct_template(key, &tpl) {
            tracing::warn!("writing a set-up template failed: {e}");
            for s in slots {
                let _ = engine.drop_mask(s);
            }
            return Err("engine-error");
        }
        // The template it replaced lets go of its slots after the new
        // one holds its own (a slot both use is never freed in between).
        if let Some(old) = self.ct_templates.insert((t.in_port, t.dl_type), slots) {
            self.ct_limbo.retire(old);
        }
        Ok(())
    }

    fn remove_ct_template(&mut self, in_port: u32, dl_type: u16) {
        let Some(slots) = self.ct_templates.remove(&(in_port, dl_type)) else {
            return;
        };
        if let Some(engine) = self.tc.as_mut() {
            let key = super::kernel::layout::CtTplKey {
                in_port,
                dl_type,
                pad: 0,
            };
            if let Err(e) = engine.remove_ct_template(&key) {
                tracing::warn!("removing a set-up template failed: {e}");
            }
            self.ct_limbo.retire(slots);
        }
    }

    fn drain_ct_events(&mut self, out: &mut Vec<CtEvent>, max: usize) {
        if let Some(e) = self.tc.as_mut() {
            e.drain_ct_events(out, max);
            for s in self.ct_limbo.drained() {
                let _ = e.drop_mask(s);
            }
        }
    }

    fn adopt_ct(
        &mut self,
        matching: &Match,
        actions: &[DpAction],
        hk: &FlowHashKey,
    ) -> Result<u64, &'static str> {
        let enc = match self.decide(matching, actions)? {
            (EngineKind::Tc, e) if e.buckets.is_empty() => e,
            _ => return Err("ct:bpf-unsupported"),
        };
        let engine = self.tc.as_mut().ok_or("ct:bpf-unsupported")?;
        match engine.adopt_ct_entry(&enc, hk) {
            Ok(h) => {
                let id = self.next_id;
                self.next_id += 1;
                self.flows.insert(id, (EngineKind::Tc, h));
                self.counters.installed += 1;
                Ok(id)
            }
            Err(e) => Err(e.reason().unwrap_or("engine-error")),
        }
    }

    fn delete_ct_entry(&mut self, hk: &FlowHashKey) {
        if let Some(e) = self.tc.as_mut() {
            e.delete_ct_entry(hk);
        }
    }

    fn ct_events_fd(&self) -> Option<std::os::fd::RawFd> {
        self.tc.as_ref().and_then(|e| e.ct_events_fd())
    }

    fn ct_program_stats(&self) -> [u64; 4] {
        self.tc.as_ref().map(|e| e.ct_stats()).unwrap_or_default()
    }

    fn begin_ct(&mut self) {
        self.ct_first = Some(self.next_id);
        for kind in [EngineKind::Xdp, EngineKind::Tc] {
            if let Some(e) = self.engine_mut(kind) {
                e.begin_staging();
            }
        }
    }

    fn commit_ct(&mut self) -> Result<(), &'static str> {
        let first = self.ct_first.take().unwrap_or(self.next_id);
        let mut r = Ok(());
        // Both engines end their staging, whatever the first one said.
        for kind in [EngineKind::Xdp, EngineKind::Tc] {
            if let Some(Err(e)) = self.engine_mut(kind).map(|e| e.commit_staged()) {
                if r.is_ok() {
                    r = Err(match e.reason() {
                        Some(why) => why,
                        None => {
                            tracing::warn!("kernel flow install failed: {e}");
                            "engine-error"
                        }
                    });
                }
            }
        }
        if r.is_err() {
            // The flows staged since `begin_ct` were never installed: like
            // a failed single install, each is counted refused, not
            // installed and removed. Removed here, quietly; the caller's
            // removals then find nothing.
            for id in first..self.next_id {
                if self.flows.contains_key(&id) {
                    self.counters.installed = self.counters.installed.saturating_sub(1);
                    self.counters.refused += 1;
                    self.drop_flow(id);
                }
            }
        }
        r
    }

    fn modify(
        &mut self,
        id: u64,
        matching: &Match,
        actions: &[DpAction],
    ) -> Result<(), &'static str> {
        // The buckets' counts so far belong to the buckets as they were.
        self.credit_select(id);
        let r = self.modify_flow(id, matching, actions);
        match r {
            Ok(()) => {
                // The new group first, so a group the flow keeps never
                // drops to no user (and loses its slot) in between.
                let old = self.flow_selects.remove(&id);
                self.attach_select(id, actions);
                if let Some(s) = old.and_then(|o| self.select_slots.get_mut(&o.group)) {
                    s.users = s.users.saturating_sub(1);
                }
                self.release_unused_selects();
            }
            // The caller removes the flow ([`FlowOffload::remove`]): it
            // lets go of its old group there.
            Err(_) => self.release_unused_selects(),
        }
        r
    }

    fn remove(&mut self, id: u64) -> Option<KernelCounters> {
        if self.flows.contains_key(&id) {
            self.counters.removed += 1;
        }
        if let Some(c) = self.queue_removal(id) {
            return Some(c);
        }
        self.drop_flow(id)
    }

    fn begin_removals(&mut self) {
        self.removing = true;
        self.removal_reads.clear();
    }

    fn exempt_from_batch(&mut self, id: u64) {
        // Not read as far as the queue knows: `remove` takes the exact
        // path (one lookup-and-delete).
        self.removal_reads.remove(&id);
    }

    fn commit_removals(&mut self) {
        self.removing = false;
        self.removal_reads.clear();
        for kind in [EngineKind::Xdp, EngineKind::Tc] {
            if let Some(Err(e)) = self.engine_mut(kind).map(|e| e.commit_removals()) {
                tracing::warn!("kernel flow remove failed: {e}");
            }
        }
    }

    fn set_meter(&mut self, spec: &MeterSpec) {
        let id = spec.meter_id;
        self.meters.insert(id, spec.clone());
        let Some(entry) = encode::encode_meter(spec) else {
            return;
        };
        for kind in [EngineKind::Xdp, EngineKind::Tc] {
            if let Some(e) = self.engine_mut(kind).filter(|e| e.has_meter(id)) {
                if let Err(err) = e.set_meter(entry, id) {
                    tracing::warn!(meter = id, "kernel meter update failed: {err}");
                }
            }
        }
    }

    fn remove_meter(&mut self, id: u32) {
        self.meters.remove(&id);
        for kind in [EngineKind::Xdp, EngineKind::Tc] {
            if let Some(e) = self.engine_mut(kind) {
                if let Err(err) = e.remove_meter(id) {
                    tracing::warn!(meter = id, "kernel meter removal failed: {err}");
                }
            }
        }
    }

    fn publish_select(&mut self, group: u32, weights: &[u32]) {
        self.select_published.insert(group, weights.to_vec());
        for kind in [EngineKind::Xdp, EngineKind::Tc] {
            if self.engine_mut(kind).is_some() {
                if let Err(r) = self.sync_select(kind, group) {
                    tracing::warn!(group, "kernel splb weights not written: {r}");
                }
            }
        }
    }

    fn retain_selects(&mut self, keep: &dyn Fn(u32) -> bool) {
        self.select_published.retain(|g, _| keep(*g));
        self.select_credit.retain(|g, _| keep(*g));
    }

    fn take_select_counts(&mut self) -> Vec<(u32, u16, u64, u64)> {
        let ids: Vec<u64> = self.flow_selects.keys().copied().collect();
        for id in ids {
            self.credit_select(id);
        }
        let mut out = Vec::new();
        for (group, buckets) in std::mem::take(&mut self.select_credit) {
            for (i, (p, b)) in buckets.into_iter().enumerate() {
                if p > 0 || b > 0 {
                    out.push((group, i as u16, p, b));
                }
            }
        }
        out
    }

    fn meter_counters(&self, id: u32) -> Option<MeterCounters> {
        let mut sum: Option<MeterCounters> = None;
        for e in [Some(&self.engine), self.tc.as_ref()].into_iter().flatten() {
            if let Some(m) = e.meter_entry(id) {
                let s = sum.get_or_insert_with(MeterCounters::default);
                s.packets_in += m.packets_in;
                s.bytes_in += m.bytes_in;
                let n = (m.n_bands as usize).min(m.bands.len());
                s.bands.resize(s.bands.len().max(n), (0, 0));
                for (acc, b) in s.bands.iter_mut().zip(&m.bands[..n]) {
                    acc.0 += b.packets;
                    acc.1 += b.bytes;
                }
            }
        }
        sum
    }

    fn prefetch_counters(&mut self) {
        self.prefetched.clear();
        // A batched read walks every bucket of the map (`max_flows`,
        // 65,536 by default: about 0.4 ms even when empty), so it only pays once
        // enough flows would each cost their own lookup (1-8 µs).
        if self.flows.len() < PREFETCH_MIN_FLOWS {
            return;
        }
        let mut by_engine = Vec::new();
        for kind in [EngineKind::Xdp, EngineKind::Tc] {
            let batch = match self.engine_mut(kind).map(|e| e.counters_batch()) {
                Some(Ok(Some(b))) => b,
                Some(Err(e)) => {
                    tracing::debug!("batched kernel counter read failed: {e}");
                    continue;
                }
                _ => continue,
            };
            by_engine.push((kind, batch));
        }
        for (id, (kind, h)) in &self.flows {
            let Some((_, batch)) = by_engine.iter().find(|(k, _)| k == kind) else {
                continue;
            };
            if let Some(c) = batch.get(h) {
                self.prefetched.insert(
                    *id,
                    KernelCounters {
                        packets: c.packets,
                        bytes: c.bytes,
                        used: c.used,
                        tcp_flags: c.tcp_flags,
                    },
                );
            }
        }
    }

    fn drop_prefetched(&mut self) {
        self.prefetched.clear();
    }

    fn counters(&mut self, id: u64) -> Option<KernelCounters> {
        let c = match self.prefetched.remove(&id) {
            Some(c) => c,
            None => {
                let (kind, h) = *self.flows.get(&id)?;
                let c = self.engine_mut(kind)?.counters(&h).ok()?;
                KernelCounters {
                    packets: c.packets,
                    bytes: c.bytes,
                    used: c.used,
                    tcp_flags: c.tcp_flags,
                }
            }
        };
        if self.removing {
            self.removal_reads.insert(id, c);
        }
        Some(c)
    }

    fn engine_name(&self, id: u64) -> &'static str {
        self.flows.get(&id).map_or("userspace", |(k, _)| k.as_str())
    }

    fn port_add(
        &mut self,
        no: u32,
        name: &str,
        hook: &OffloadHook,
    ) -> Result<PortOffload, PortOffloadError> {
        self.attach_port(no, name, hook)
            .map_err(|e| PortOffloadError(Box::new(e)))
    }

    fn port_del(&mut self, no: u32) -> Result<(), PortOffloadError> {
        self.detach_port(no)
            .map_err(|e| PortOffloadError(Box::new(e)))
    }

    fn tick(&mut self) -> bool {
        OffloadManager::tick(self)
    }

    fn status(&self) -> ProviderStatus {
        let (xdp_flows, tc_flows) = self.flows_per_engine();
        ProviderStatus {
            engine: self.engine_stats(),
            tc: self.tc_stats(),
            xdp_flows,
            tc_flows,
            tc_ports: self.tc_ports(),
            xdp_ports: self.xdp_ports(),
            counters: self.counters,
            max_flows: Some(self.engine.config().max_flows),
            profile: self.emulation.as_ref().map(|e| e.status()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retired template's mask slots are released only at the second
    /// drain after (MUST-FIX 4 of the ctbpf review): a program instance
    /// still holding the old template inserts under a slot still held.
    #[test]
    fn retired_template_slots_wait_for_two_drains() {
        let mut l = SlotLimbo::default();
        l.retire([1, 2, 3]);
        assert!(l.drained().is_empty(), "freed at the first drain");
        l.retire([4, 5, 6]);
        assert_eq!(l.drained(), vec![1, 2, 3]);
        assert_eq!(l.drained(), vec![4, 5, 6]);
        assert!(l.drained().is_empty());
    }

    fn opts(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn engine_config_reads_sizes_and_counters() {
        let c = engine_config(&opts(&[("max_flows", "1048576"), ("counters", "off")])).unwrap();
        assert_eq!((c.max_flows, c.counters), (1 << 20, false));
        assert!(engine_config(&opts(&[])).unwrap().counters);
        let e = engine_config(&opts(&[("counters", "maybe")])).unwrap_err();
        assert!(e.to_string().contains("counters=maybe"), "{e}");
        let e = engine_config(&opts(&[("colour", "1")])).unwrap_err();
        assert!(e.to_string().contains("`colour`"), "{e}");
    }

    /// `ct_events_bytes` is the ring buffer's size: a power of two pages,
    /// refused with the option's name otherwise (before, the kernel
    /// refused the map at load, after the bridge's old engine had gone).
    #[test]
    fn engine_config_checks_the_ring_size() {
        let c = engine_config(&opts(&[("ct_events_bytes", "65536")])).unwrap();
        assert_eq!(c.ct_events_bytes, 65536);
        let page = ct_events_min_bytes();
        assert!(page.is_power_of_two() && page >= CT_EVENTS_MIN_BYTES);
        let (ps, half) = (page.to_string(), (page / 2).to_string());
        let c = engine_config(&opts(&[("ct_events_bytes", ps.as_str())])).unwrap();
        assert_eq!(c.ct_events_bytes, page);
        assert!(engine_config(&opts(&[("ct_events_bytes", half.as_str())])).is_err());
        for bad in ["5000", "2048", "0", "536870912", "-1", "lots"] {
            let e = engine_config(&opts(&[("ct_events_bytes", bad)])).unwrap_err();
            assert!(
                e.to_string().contains(&format!("ct_events_bytes={bad}")),
                "{bad}: {e}"
            );
        }
    }
}
