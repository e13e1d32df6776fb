//! A bridge: ports, the slow path and the fast path wired together.
//!
//! One poll round ([`Bridge::run_once`]) takes a batch from each port's
//! receive side, runs it through the [`Datapath`] (caches, upcalls into the
//! [`Ofproto`] on a miss), and hands each output port its frames in one
//! `send_batch`. Every control operation that can change a forwarding
//! decision — adding or deleting rules, MAC learning, timeouts — is followed
//! by a datapath revalidation before the call returns, so when `add_flows`
//! or `del_flows` returns, no cached flow follows the old decision.
//!
//! With offload on ([`Bridge::enable_offload`]) the bridge's
//! [`OffloadManager`] runs the kernel engines on its ports (`xdp_dp` on
//! AF_XDP ports, `tc_dp` on TC ports) and the datapath hands it every flow
//! it installs, changes or removes; the same revalidation then updates the
//! kernel entries too. The bridge reaches the engine only through
//! [`FlowOffload`] (ports by their [`nicflow_port::OffloadHook`], status),
//! never as its concrete type, so any provider fits
//! ([`Bridge::enable_offload_provider`]: the in-memory
//! [`crate::offload::dummy`] one in tests).

use crate::datapath::{
    format_actions, Datapath, DatapathConfig, DpFlow, DpStats, FlowOffload, Placement, PortOffload,
    TxBatch,
};
use crate::offload::kernel::{EngineStats, OffloadError, XdpEngineConfig};
use crate::offload::{ManagerCounters, OffloadManager};
use crate::ofproto::{Ofproto, OfprotoError, OfprotoStats, RuleDump};
use nicflow_ofctl::{FlowSpec, MatchSpec, PortMap, RuleError};
use nicflow_packet::buf::PacketBuf;
use nicflow_port::{Port, PortStats};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Frames taken from one port per poll round.
pub const BATCH_SIZE: usize = 32;

/// At most one warning per drop reason (and per limit) per this period,
/// with the count since the previous one, as OVS's `VLOG_RATE_LIMIT`
/// does: a flood is visible in the log without a line per packet.
pub const DROP_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// The bridge's share of one daemon round ([`Bridge::begin_round`]).
#[derive(Clone, Copy, Debug)]
struct Round {
    start: Instant,
    /// `DpStats::upcalls` when the round began.
    upcalls_at_start: u64,
    spent: bool,
}

/// Every drop of a bridge by reason: the userspace datapath's, the kernel
/// engines', and the ports' (ring overflows, truncation, transmit
/// errors), summed over ports, and tunnel ports' underlay and ESP drops
/// (`underlay_port_rx_drop_*`, `underlay_rx_drop_*`, `esp_rx_drop_*`...),
/// once per shared underlay.
/// Names are the counters' own (`rx_drop_ring_full` is the ports' counter
/// of that name).
pub type Drops = BTreeMap<&'static str, u64>;

/// A drop counter of a port's shared source (a tunnel's underlay and its
/// ESP state, see `Port::shared_counters_id`): `underlay_port_rx_drop_*`,
/// `underlay_rx_drop_*`,
/// `underlay_tx_drop_*`, `underlay_tx_dropped`, `esp_rx_drop_*`,
/// `esp_tx_drop_*`.
fn is_shared_drop(name: &str) -> bool {
    (name.starts_with("underlay_") || name.starts_with("esp_")) && name.contains("_drop")
}

/// The limits of a bridge and how often they were hit, for `stats` and
/// the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Datapath flows cached at most ([`DatapathConfig::flow_limit`]) and
    /// now.
    pub flow_limit: usize,
    pub flows: usize,
    /// Upcalls whose flow was not cached because the limit was reached.
    pub flow_limit_hits: u64,
    /// Size of each kernel engine's flow map (`offload_options
    /// max_flows`), when offload is on, and its entries now.
    pub kernel_max_flows: Option<u32>,
    pub kernel_flows: usize,
    /// Flows refused by a full kernel flow or mask map, and kernel inserts
    /// that failed otherwise.
    pub kernel_full: u64,
    pub kernel_errors: u64,
    /// Connection tracker: most connections, now, and commits refused at
    /// the limit.
    pub ct_limit: usize,
    pub ct_connections: usize,
    pub ct_limit_hits: u64,
    /// Daemon rounds that stopped taking frames because their upcall or
    /// time budget was spent (the rest waited in the rings).
    pub rounds_deferred: u64,
    /// In an episode (reached at the last housekeeping tick, not relieved
    /// since): the flow limit, the kernel flow map.
    pub flow_limit_reached: bool,
    pub kernel_map_full: bool,
}

/// What the bridge last logged about drops and limits.
#[derive(Debug, Default)]
struct OverloadLog {
    /// Per drop reason: the total at the last warning and when it was.
    drops: BTreeMap<&'static str, (u64, Option<Instant>)>,
    /// Limits in an episode (reached, not yet relieved), with the hit
    /// count when the episode began.
    flow_limit: Option<u64>,
    kernel_full: Option<u64>,
    /// Hit counters at the previous tick.
    last_flow_limit_hits: u64,
    last_kernel_full: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error("line {line}: {error}")]
    RuleLine { line: usize, error: RuleError },
    #[error(transparent)]
    Ofproto(#[from] OfprotoError),
    #[error("port `{0}` already exists")]
    PortExists(String),
    #[error("no port `{0}`")]
    NoSuchPort(String),
    #[error(transparent)]
    Meter(#[from] crate::ofproto::meter::MeterError),
}

/// One meter's counters (`meter-stats`, OpenFlow `OFPMP_METER`).
#[derive(Clone, Debug)]
pub struct MeterStats {
    pub meter_id: u32,
    /// Rules that use it.
    pub flow_count: u32,
    pub packets_in: u64,
    pub bytes_in: u64,
    pub duration: std::time::Duration,
    /// Per band: packets and bytes it acted on.
    pub bands: Vec<(u64, u64)>,
}

impl MeterStats {
    /// As `ovs-ofctl meter-stats` prints one meter (OVS
    /// `ofputil_format_meter_stats`).
    pub fn format(&self) -> String {
        let d = self.duration;
        // `ofp_print_duration` at this datapath's millisecond precision.
        let dur = match d.subsec_millis() {
            0 => format!("{}s", d.as_secs()),
            ms => format!("{}.{ms:03}s", d.as_secs()),
        };
        let mut s = format!(
            "meter:{} flow_count:{} packet_in_count:{} byte_in_count:{} duration:{dur} bands:\n",
            self.meter_id, self.flow_count, self.packets_in, self.bytes_in,
        );
        for (i, (p, b)) in self.bands.iter().enumerate() {
            s.push_str(&format!("{i}: packet_count:{p} byte_count:{b}\n"));
        }
        s
    }
}

struct PortSlot {
    no: u32,
    port: Box<dyn Port>,
    out: Vec<PacketBuf>,
    /// `port.accepts_offloads()`, read once.
    offloads: bool,
}

/// Port names and numbers of a bridge, for parsing and printing rules.
#[derive(Clone, Debug, Default)]
pub struct BridgePorts(pub BTreeMap<String, u32>);

impl PortMap for BridgePorts {
    fn port_no(&self, name: &str) -> Option<u32> {
        self.0.get(name).copied()
    }

    fn port_name(&self, no: u32) -> Option<String> {
        self.0
            .iter()
            .find(|(_, n)| **n == no)
            .map(|(s, _)| s.clone())
    }
}

/// One bucket of an splb group as the daemon's sampler measures it: its
/// weight and the interface index of the port its first output goes to
/// (by index, not name: a name can pass to another interface).
pub type SplbPath = (u16, Option<u32>);

/// One datapath flow as `dump-dp-flows` shows it.
#[derive(Clone, Debug)]
pub struct DpFlowDump {
    pub matching: String,
    pub actions: String,
    /// Userspace + kernel.
    pub packets: u64,
    pub bytes: u64,
    pub used: Option<Duration>,
    /// The kernel's part of `packets` / `bytes`.
    pub kernel_packets: u64,
    pub kernel_bytes: u64,
    /// `xdp` or `userspace`.
    pub engine: &'static str,
    /// Why a flow stays in userspace while offload is on.
    pub not_offloaded: Option<&'static str>,
}

/// One datapath flow for `offload-plan`.
pub struct PlanFlow {
    /// As `dump-dp-flows` prints them.
    pub matching: String,
    pub actions: String,
    pub recirc_id: u32,
    /// The recirculations its actions start.
    pub recircs: Vec<u32>,
    /// Userspace + kernel, and the kernel's part.
    pub packets: u64,
    pub bytes: u64,
    pub kernel_packets: u64,
    pub kernel_bytes: u64,
    /// The flow in OVS's form.
    pub converted: crate::offload::profile::Converted,
}

/// A bridge's ports and flows for `offload-plan`.
pub struct PlanInput {
    pub ports: Vec<crate::offload::profile::ModelPort>,
    pub flows: Vec<PlanFlow>,
    /// Established connections the tracker holds (TCP established both
    /// ways, others answered): what the NIC's conntrack table would hold.
    pub ct_connections: u64,
}

/// The XDP engine's state for `stats`.
#[derive(Clone, Debug)]
pub struct OffloadStatus {
    pub engine: EngineStats,
    /// The TC engine's counters, when it is loaded (`offload = auto | tc`).
    pub tc: Option<EngineStats>,
    /// Kernel flows in the XDP and the TC engine.
    pub xdp_flows: usize,
    pub tc_flows: usize,
    /// (port name, reached with bpf_redirect_peer) of the TC engine's ports.
    pub tc_ports: Vec<(String, bool)>,
    pub manager: ManagerCounters,
    pub kernel_flows: usize,
    /// (port name, native XDP, redirect target).
    pub ports: Vec<(String, bool, bool)>,
    /// Flows in userspace by reason.
    pub not_offloaded: BTreeMap<&'static str, u64>,
    /// Under `offload=profile:NAME`: the emulated NIC.
    pub profile: Option<crate::datapath::ProfileStatus>,
}

pub struct Bridge {
    pub name: String,
    ofproto: Ofproto,
    dp: Datapath,
    ports: Vec<PortSlot>,
    names: BridgePorts,
    next_port_no: u32,
    rx: Vec<PacketBuf>,
    tx: TxBatch,
    done: Vec<PacketBuf>,
    mac_generation: u64,
    /// The engines' mode while offload is on.
    offload_mode: Option<crate::offload::OffloadMode>,
    /// The current daemon round's budget, once the daemon has begun one.
    round: Option<Round>,
    /// First port read by the next budgeted `run_once`: rotates, so a
    /// spent budget does not always leave the same ports waiting.
    next_port: usize,
    rounds_deferred: u64,
    overload: OverloadLog,
    /// An OpenFlow bundle is being applied: `flow_mod`, `add_groups` and
    /// `del_groups_id` leave the datapath alone until it is done, so no
    /// packet (kernel-offloaded ones included) sees half of it.
    defer_revalidation: bool,
    /// Per-packet select groups modified or deleted while revalidation was
    /// deferred: their bucket counts up to the revalidation are the old
    /// buckets', dropped at [`Bridge::end_deferred`] (other groups' are
    /// credited as usual).
    deferred_group_resets: std::collections::BTreeSet<u32>,
    /// The switch-wide Geneve option map (OpenFlow TLV table), given to
    /// every port (Geneve ones take it), ports added later included.
    tlv_map: Vec<nicflow_port::tunnel::TlvMapping>,
}

impl Bridge {
    /// An empty bridge: no ports, no rules (every packet is dropped by the
    /// table miss until rules are added).
    pub fn new(name: &str, cfg: DatapathConfig) -> Self {
        Bridge {
            name: name.to_string(),
            ofproto: Ofproto::new(),
            dp: Datapath::new(cfg),
            ports: Vec::new(),
            names: BridgePorts::default(),
            next_port_no: 1,
            rx: Vec::with_capacity(BATCH_SIZE),
            tx: TxBatch::default(),
            done: Vec::new(),
            mac_generation: 0,
            offload_mode: None,
            round: None,
            next_port: 0,
            rounds_deferred: 0,
            overload: OverloadLog::default(),
            defer_revalidation: false,
            deferred_group_resets: Default::default(),
            tlv_map: Vec::new(),
        }
    }

    /// Set the switch-wide Geneve option map on every port (see
    /// `Port::set_tlv_map`); returns how many ports took it.
    pub fn set_tlv_map(&mut self, map: &[nicflow_port::tunnel::TlvMapping]) -> usize {
        self.tlv_map = map.to_vec();
        let mut n = 0;
        let mut changed = Vec::new();
        for p in &mut self.ports {
            if p.port.set_tlv_map(map) {
                n += 1;
                changed.push(p.no);
            }
        }
        // A kernel engine reads received options and pushes sent ones
        // through the port's map as it was at `port_add`: give it the
        // ports again, and re-place every flow (offloaded options follow
        // the new map, as the userspace port's do at once).
        if let Some(off) = self.dp.offload_mut() {
            if !changed.is_empty() {
                for p in self.ports.iter().filter(|p| changed.contains(&p.no)) {
                    if let Err(e) = off.port_del(p.no) {
                        tracing::warn!(bridge = %self.name, port = %p.port.name(), "detaching the offload engine: {e}");
                    }
                    port_add(off, &self.name, p.no, p.port.as_ref());
                }
                self.dp.replace_flows();
            }
        }
        n
    }

    /// The map of [`Bridge::set_tlv_map`].
    pub fn tlv_map(&self) -> &[nicflow_port::tunnel::TlvMapping] {
        &self.tlv_map
    }

    /// Attach a port; returns its OpenFlow port number (1, 2, ...). A name
    /// held by [`Bridge::reserve_port`] gets its reserved number.
    pub fn add_port(&mut self, mut port: Box<dyn Port>) -> Result<u32, BridgeError> {
        if !self.tlv_map.is_empty() {
            port.set_tlv_map(&self.tlv_map);
        }
        let name = port.name().to_string();
        let no = match self.names.0.get(&name) {
            Some(&no) if self.attached(&name).is_none() => no,
            Some(_) => return Err(BridgeError::PortExists(name)),
            None => {
                let no = self.next_free_no();
                self.names.0.insert(name, no);
                no
            }
        };
        let offloads = port.accepts_offloads();
        if let Some(off) = self.dp.offload_mut() {
            port_add(off, &self.name, no, port.as_ref());
        }
        self.ports.push(PortSlot {
            no,
            port,
            out: Vec::new(),
            offloads,
        });
        self.sync_ports();
        Ok(no)
    }

    /// Give a configured port whose interface cannot be opened (missing at
    /// restart) its name and number without attaching anything: rules that
    /// name it load and keep their meaning, outputs to it go nowhere, and
    /// [`Bridge::add_port`] later attaches the port under the same number.
    pub fn reserve_port(&mut self, name: &str) -> Result<u32, BridgeError> {
        if self.names.0.contains_key(name) {
            return Err(BridgeError::PortExists(name.to_string()));
        }
        let no = self.next_free_no();
        self.names.0.insert(name.to_string(), no);
        Ok(no)
    }

    /// Reserve `name` under the number `no` (OVS's `ofport_request`), for
    /// [`Bridge::add_port`] to attach it there. `false`, and nothing
    /// reserved, when the name is known or the number taken or out of
    /// OVS's range (1..=65279).
    pub fn reserve_port_as(&mut self, name: &str, no: u32) -> bool {
        if !(1..=0xfeff).contains(&no)
            || self.names.0.contains_key(name)
            || self.names.0.values().any(|&n| n == no)
        {
            return false;
        }
        self.names.0.insert(name.to_string(), no);
        true
    }

    /// The next number no name holds (numbers reserved with
    /// [`Bridge::reserve_port_as`] are skipped).
    fn next_free_no(&mut self) -> u32 {
        loop {
            let no = self.next_port_no;
            self.next_port_no += 1;
            if !self.names.0.values().any(|&n| n == no) {
                return no;
            }
        }
    }

    /// The port number of `name` when a port is attached under it (not a
    /// mere [`Bridge::reserve_port`] reservation).
    pub fn attached(&self, name: &str) -> Option<u32> {
        let no = *self.names.0.get(name)?;
        self.ports.iter().any(|p| p.no == no).then_some(no)
    }

    /// Detach a port (or drop a reservation): its name no longer resolves.
    pub fn del_port(&mut self, name: &str) -> Result<(), BridgeError> {
        let no = self
            .names
            .0
            .remove(name)
            .ok_or_else(|| BridgeError::NoSuchPort(name.to_string()))?;
        if self.ports.iter().any(|p| p.no == no) {
            if let Some(off) = self.dp.offload_mut() {
                if let Err(e) = off.port_del(no) {
                    tracing::warn!(bridge = %self.name, port = %name, "detaching the offload engine: {e}");
                }
            }
        }
        self.ports.retain(|p| p.no != no);
        self.sync_ports();
        // Kernel flows into or out of the gone port must not survive (its
        // slots are reused by the next port).
        self.dp.replace_flows();
        Ok(())
    }

    /// Turn the XDP offload engine on: load it (the verifier runs here),
    /// attach it to every AF_XDP port, and flush the cached flows so each
    /// is decided afresh by its next packet. On error nothing changed.
    pub fn enable_xdp_offload(&mut self, cfg: XdpEngineConfig) -> Result<(), OffloadError> {
        self.enable_offload(cfg, crate::offload::OffloadMode::Xdp)
    }

    /// Turn the engines of `mode` on (`auto`: TC on TC ports, XDP on AF_XDP
    /// ports; `tc`; `xdp`), as [`Self::enable_xdp_offload`] does.
    pub fn enable_offload(
        &mut self,
        cfg: XdpEngineConfig,
        mode: crate::offload::OffloadMode,
    ) -> Result<(), OffloadError> {
        if self.offload_enabled() {
            if self.offload_mode == Some(mode) {
                return Ok(());
            }
            // Another mode (`set offload=tc` under auto, a profile): the
            // engines of the old one go first, their flows back to
            // userspace until the new ones take them.
            self.disable_offload();
        }
        // Pinned under the bridge's directory, or adopted from there after
        // a daemon that died (docs/offload.md, "What outlives the daemon").
        let pins = nicflow_port::pin::bridge_dir(&self.name);
        let mut m = OffloadManager::with_mode_pinned(cfg, mode, pins)?;
        let mut attached = Vec::new();
        for slot in &self.ports {
            let r = m.attach_port(slot.no, slot.port.name(), &slot.port.offload_hook());
            if let Err(e) = r {
                for no in attached {
                    let _ = m.detach_port(no);
                }
                return Err(e);
            }
            attached.push(slot.no);
        }
        // A bridge made empty and filled afterwards (`nicflow vswitchd`
        // learns its ports and its controller its rules only after the
        // bridge exists) keeps the dead daemon's engine as it is — links,
        // ports and flows forwarding — until [`Self::finish_adoption`]:
        // finishing now would release every link and judge every kernel
        // flow against a bridge with no ports and no rules.
        let wait = self.ports.is_empty() && m.adopting();
        let adopted = if wait {
            tracing::info!(bridge = %self.name, "adopted kernel engine keeps forwarding until the bridge's ports and rules are back");
            Vec::new()
        } else {
            m.finish_adoption()
        };
        self.dp.set_offload(Some(Box::new(m)), &mut self.ofproto);
        self.offload_mode = Some(mode);
        self.adopt(adopted);
        Ok(())
    }

    /// An adopted engine is still waiting for [`Self::finish_adoption`].
    pub fn adoption_pending(&self) -> bool {
        self.dp.offload().is_some_and(|o| o.adopting())
    }

    /// End a take-over [`Self::enable_offload`] left pending: the links and
    /// ports no attached port claims go, and the adopted kernel flows are
    /// revalidated against the rules the bridge has now (a decision that
    /// still fits is kept in place with its counters, the others removed).
    pub fn finish_adoption(&mut self) {
        let adopted = match self.dp.offload_mut() {
            Some(o) if o.adopting() => o.finish_adoption(),
            _ => return,
        };
        self.adopt(adopted);
    }

    fn adopt(&mut self, adopted: Vec<crate::offload::manager::AdoptedFlow>) {
        if !adopted.is_empty() {
            let (kept, removed) =
                self.dp
                    .adopt_flows(adopted, &mut self.ofproto, std::time::Instant::now());
            tracing::info!(bridge = %self.name, kept, removed, "kernel flows adopted and revalidated against the rules");
        }
    }

    /// Turn on offload to `provider`, any [`FlowOffload`] (the kernel
    /// engines are turned on by [`Self::enable_offload`]; tests give the
    /// in-memory [`crate::offload::dummy`] engine): every port is added to
    /// it (one it cannot take works through userspace, as in
    /// [`Self::add_port`]) and the cached flows are flushed, so each is
    /// decided afresh by its next packet. `mode` is what `stats` shows.
    /// Nothing happens if offload is on already.
    pub fn enable_offload_provider(
        &mut self,
        mut provider: Box<dyn FlowOffload>,
        mode: crate::offload::OffloadMode,
    ) {
        if self.offload_enabled() {
            return;
        }
        for slot in &self.ports {
            port_add(provider.as_mut(), &self.name, slot.no, slot.port.as_ref());
        }
        self.dp.set_offload(Some(provider), &mut self.ofproto);
        self.offload_mode = Some(mode);
    }

    /// Turn offload off: every kernel flow is removed (its counters
    /// credited), every AF_XDP port gets its own XDP program back.
    pub fn disable_offload(&mut self) {
        self.offload_mode = None;
        let Some(mut old) = self.dp.set_offload(None, &mut self.ofproto) else {
            return;
        };
        for slot in &self.ports {
            if let Err(e) = old.port_del(slot.no) {
                tracing::warn!(bridge = %self.name, port = %slot.port.name(), "detaching the offload engine: {e}");
            }
        }
    }

    /// `auto`, `tc`, `xdp` while offload is on, else `none`.
    pub fn offload_mode_name(&self) -> &'static str {
        self.offload_mode.map_or("none", |m| m.as_str())
    }

    pub fn offload_enabled(&self) -> bool {
        self.dp.offload().is_some()
    }

    /// The engine's counters and the flows' placement (counters read now).
    pub fn offload_status(&self) -> Option<OffloadStatus> {
        let s = self.dp.offload()?.status();
        // Kept as flows move: no walk over every flow per request.
        let not_offloaded = self.dp.placements().not_offloaded();
        Some(OffloadStatus {
            engine: s.engine,
            tc: s.tc,
            xdp_flows: s.xdp_flows,
            tc_flows: s.tc_flows,
            tc_ports: s.tc_ports,
            manager: s.counters,
            kernel_flows: s.xdp_flows + s.tc_flows,
            ports: s.xdp_ports,
            not_offloaded,
            profile: s.profile,
        })
    }

    /// Read the kernel counters of every offloaded flow (before a dump).
    pub fn sync_offload(&mut self) {
        self.dp.sync_offload();
    }

    fn sync_ports(&mut self) {
        self.ofproto
            .set_ports(self.ports.iter().map(|p| p.no).collect());
        self.dp.revalidate(&mut self.ofproto);
        self.mac_generation = self.ofproto.mac.generation();
    }

    pub fn port_map(&self) -> &BridgePorts {
        &self.names
    }

    /// Receive descriptors of the ports that have one, for the daemon's poll.
    pub fn rx_fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        // The TC program's set-up reports wake the daemon too.
        self.ports
            .iter()
            .filter_map(|p| p.port.rx_fd())
            .chain(self.dp.ct_events_fd())
    }

    /// Longest the daemon may sleep with set-up reports of the TC program
    /// unread (the program wakes it only when an eighth of its ring is
    /// unread; see `CtOffloads::events_wait`). `None`: no limit.
    pub fn ct_events_wait(&self) -> Option<Duration> {
        self.dp.ct_events_wait()
    }

    /// Does any port profit from a short spin after traffic stops?
    pub fn spin_worthwhile(&self) -> bool {
        self.ports.iter().any(|p| p.port.spin_worthwhile())
    }

    /// Does any port have work to finish without new input?
    pub fn has_deferred_work(&self) -> bool {
        self.ports.iter().any(|p| p.port.has_deferred_work())
    }

    /// Like [`Bridge::port_stats`], with each port's extra counters.
    #[allow(clippy::type_complexity)]
    pub fn port_stats_detailed(&self) -> Vec<(String, u32, PortStats, Vec<(&'static str, u64)>)> {
        self.ports
            .iter()
            .map(|p| {
                (
                    p.port.name().to_string(),
                    p.no,
                    p.port.stats(),
                    p.port.extra_counters(),
                )
            })
            .collect()
    }

    pub fn port_stats(&self) -> Vec<(String, u32, PortStats)> {
        self.ports
            .iter()
            .map(|p| (p.port.name().to_string(), p.no, p.port.stats()))
            .collect()
    }

    /// Copy the bridge's rules (counters up to date), groups and meters, to
    /// put a change back with [`Bridge::restore_rules`].
    pub fn save_rules(&mut self) -> crate::ofproto::RuleState {
        self.dp.push_stats(&mut self.ofproto);
        self.ofproto.save_rules()
    }

    /// Put back the rules, groups and meters of [`Bridge::save_rules`] (the
    /// daemon could not persist a change) and revalidate, so no cached or
    /// kernel flow keeps the undone decision. A meter the change deleted
    /// comes back with zeroed counters.
    pub fn restore_rules(&mut self, s: crate::ofproto::RuleState, now: Instant) {
        self.dp.push_stats(&mut self.ofproto);
        let before: BTreeMap<u32, nicflow_ofctl::meter::MeterSpec> = self
            .ofproto
            .meters()
            .map(|m| (m.meter_id, m.clone()))
            .collect();
        self.ofproto.restore_rules(s);
        for id in before.keys() {
            if !self.ofproto.has_meter(*id) {
                self.dp.remove_meter(*id);
            }
        }
        let now_meters: Vec<_> = self.ofproto.meters().cloned().collect();
        for m in now_meters {
            if before.get(&m.meter_id) != Some(&m) {
                self.dp.set_meter(m, now);
            }
        }
        self.dp.revalidate(&mut self.ofproto);
    }

    /// Parse and add one rule.
    pub fn add_flow_str(&mut self, text: &str, now: Instant) -> Result<(), BridgeError> {
        let spec = nicflow_ofctl::parse_flow(text, &self.names)?;
        self.add_flows(&[spec], now)
    }

    /// Parse a file's worth of rules and add them all, or none.
    pub fn add_flows_str(&mut self, text: &str, now: Instant) -> Result<usize, BridgeError> {
        let specs =
            nicflow_ofctl::parse_flows(text, &self.names).map_err(|e| BridgeError::RuleLine {
                line: e.line,
                error: e.error,
            })?;
        self.add_flows(&specs, now)?;
        Ok(specs.len())
    }

    /// Add rules atomically, then revalidate the datapath.
    pub fn add_flows(&mut self, specs: &[FlowSpec], now: Instant) -> Result<(), BridgeError> {
        self.dp.push_stats(&mut self.ofproto);
        self.ofproto.add_flows(specs, now)?;
        self.dp.revalidate(&mut self.ofproto);
        Ok(())
    }

    /// Delete rules (non-strict match, like `ovs-ofctl del-flows`), then
    /// revalidate. Returns how many were deleted.
    pub fn del_flows(&mut self, filter: &MatchSpec) -> usize {
        self.dp.push_stats(&mut self.ofproto);
        let n = self.ofproto.del_flows(filter);
        self.dp.revalidate(&mut self.ofproto);
        n
    }

    /// One OpenFlow `FLOW_MOD`, then revalidate. Returns the rules it
    /// removed; those with `SEND_FLOW_REM` also wait in
    /// [`Bridge::take_flow_removed`].
    pub fn flow_mod(
        &mut self,
        fm: &crate::ofproto::flow_mod::FlowMod,
        now: Instant,
    ) -> Result<Vec<crate::ofproto::flow_mod::RemovedRule>, crate::ofproto::flow_mod::FlowModError>
    {
        self.dp.push_stats(&mut self.ofproto);
        let r = self.ofproto.flow_mod(fm, now)?;
        if !self.defer_revalidation {
            self.dp.revalidate(&mut self.ofproto);
        }
        Ok(r)
    }

    /// Start applying a group of changes that must become visible at once
    /// (an OpenFlow bundle): [`Bridge::flow_mod`], [`Bridge::add_groups`]
    /// and [`Bridge::del_groups_id`] change the tables but not the cached
    /// or kernel flows until [`Bridge::end_deferred`]. Nothing forwards in
    /// between (the caller runs on the forwarding thread); only the kernel
    /// engines do, and they keep the old decisions.
    pub fn begin_deferred(&mut self) {
        self.defer_revalidation = true;
    }

    /// End [`Bridge::begin_deferred`]: revalidate once (`revalidate`), or
    /// not when the caller put the tables back with
    /// [`Bridge::restore_rules`] (which revalidates against the old tables).
    pub fn end_deferred(&mut self, revalidate: bool) {
        self.defer_revalidation = false;
        let reset = std::mem::take(&mut self.deferred_group_resets);
        if revalidate {
            self.dp.revalidate(&mut self.ofproto);
        }
        self.settle_group_counts(&reset);
    }

    /// After a revalidation that followed a group change: credit what
    /// every per-packet select group counted, except the groups in `reset`
    /// (modified or deleted: those counts were their old buckets'), then
    /// drop the per-packet state of groups that are gone. Taking the
    /// counts drains every group's, so they must not be thrown away
    /// wholesale.
    fn settle_group_counts(&mut self, reset: &std::collections::BTreeSet<u32>) {
        let mut counts = self.take_select_counts();
        counts.retain(|c| !reset.contains(&c.0));
        self.ofproto.groups.credit_buckets(&counts);
        self.forget_select_state();
    }

    /// Rules a flow-statistics request selects, with up-to-date counters.
    pub fn flow_stats(
        &mut self,
        sel: &crate::ofproto::flow_mod::FlowSelector,
        now: Instant,
    ) -> Vec<RuleDump> {
        self.dp.push_stats(&mut self.ofproto);
        self.ofproto.flow_stats(sel, now)
    }

    /// Rules that left with `SEND_FLOW_REM`, for `FLOW_REMOVED` messages.
    pub fn take_flow_removed(&mut self) -> Vec<crate::ofproto::flow_mod::RemovedRule> {
        self.ofproto.take_flow_removed()
    }

    /// Packets `controller` actions queued, for `PACKET_IN` messages.
    pub fn take_controller_packets(&mut self) -> Vec<crate::datapath::ControllerPacket> {
        self.dp.take_controller_packets()
    }

    /// Parse a match and delete what it selects.
    pub fn del_flows_str(&mut self, text: &str) -> Result<usize, BridgeError> {
        let filter = nicflow_ofctl::parse_match(text, &self.names)?;
        Ok(self.del_flows(&filter))
    }

    /// `add-meter` (or, with `modify`, `mod-meter`): all or nothing. A
    /// modified meter keeps its counters; cached flows using it see the new
    /// bands at once (the buckets are shared, nothing to revalidate).
    pub fn add_meters(
        &mut self,
        specs: &[nicflow_ofctl::meter::MeterSpec],
        modify: bool,
        now: Instant,
    ) -> Result<(), BridgeError> {
        self.ofproto.check_meters(specs, modify)?;
        self.ofproto.set_meters(specs);
        for s in specs {
            self.dp.set_meter(s.clone(), now);
        }
        Ok(())
    }

    /// `add-meter`/`mod-meter` from `ovs-ofctl` text.
    pub fn add_meter_str(
        &mut self,
        text: &str,
        modify: bool,
        now: Instant,
    ) -> Result<(), BridgeError> {
        let spec = nicflow_ofctl::meter::parse_meter(text)?;
        self.add_meters(&[spec], modify, now)
    }

    /// `del-meters`: one meter (or all) and the rules using them, then
    /// revalidate. Returns (meters, rules) removed.
    pub fn del_meters(&mut self, id: Option<u32>, now: Instant) -> (usize, usize) {
        self.dp.push_stats(&mut self.ofproto);
        let (gone, rules) = self.ofproto.del_meters(id, now);
        for m in &gone {
            self.dp.remove_meter(*m);
        }
        if !gone.is_empty() {
            self.dp.revalidate(&mut self.ofproto);
        }
        (gone.len(), rules)
    }

    /// Meters in id order, as configured.
    pub fn dump_meters(&self) -> Vec<nicflow_ofctl::meter::MeterSpec> {
        self.ofproto.meters().cloned().collect()
    }

    /// Counters of one meter (or all), in id order.
    pub fn meter_stats(&self, id: Option<u32>, now: Instant) -> Vec<MeterStats> {
        let flows = self.ofproto.meter_flow_counts();
        self.dp
            .meters
            .iter()
            .filter(|m| id.is_none_or(|i| i == m.spec.meter_id))
            .map(|m| {
                let id = m.spec.meter_id;
                // Userspace's buckets plus the kernel engines' (frames are
                // metered where their flow runs).
                let k = self
                    .dp
                    .offload()
                    .and_then(|o| o.meter_counters(id))
                    .unwrap_or_default();
                let kb = |i: usize| k.bands.get(i).copied().unwrap_or((0, 0));
                MeterStats {
                    meter_id: id,
                    flow_count: flows.get(&id).copied().unwrap_or(0),
                    packets_in: m.packets_in + k.packets_in,
                    bytes_in: m.bytes_in + k.bytes_in,
                    duration: now.saturating_duration_since(m.created),
                    bands: m
                        .bands
                        .iter()
                        .enumerate()
                        .map(|(i, b)| (b.packets + kb(i).0, b.bytes + kb(i).1))
                        .collect(),
                }
            })
            .collect()
    }

    /// `add-group` (or, with `modify`, `mod-group`) from text; all or
    /// nothing, then revalidate.
    pub fn add_groups_str(
        &mut self,
        text: &str,
        modify: bool,
        now: Instant,
    ) -> Result<usize, BridgeError> {
        let specs =
            nicflow_ofctl::parse_groups(text, &self.names).map_err(|e| BridgeError::RuleLine {
                line: e.line,
                error: e.error,
            })?;
        self.add_groups(&specs, modify, now)?;
        Ok(specs.len())
    }

    /// Add (or modify) groups atomically, then revalidate the datapath.
    pub fn add_groups(
        &mut self,
        specs: &[nicflow_ofctl::GroupSpec],
        modify: bool,
        now: Instant,
    ) -> Result<(), BridgeError> {
        self.dp.push_stats(&mut self.ofproto);
        self.credit_select_buckets();
        self.ofproto.add_groups(specs, modify, now)?;
        // Modified groups' bucket counters restart: what their old buckets
        // counted until the flows were re-placed is not the new buckets'.
        let reset: std::collections::BTreeSet<u32> = if modify {
            specs.iter().map(|g| g.group_id).collect()
        } else {
            Default::default()
        };
        if self.defer_revalidation {
            self.deferred_group_resets.extend(reset);
        } else {
            self.dp.revalidate(&mut self.ofproto);
            self.settle_group_counts(&reset);
        }
        Ok(())
    }

    /// `del-groups [group_id=N]`: the groups and the rules that use them.
    /// Returns (groups, rules) removed.
    pub fn del_groups_str(&mut self, text: &str) -> Result<(usize, usize), BridgeError> {
        let id = nicflow_ofctl::parse_group_filter(text)?;
        Ok(self.del_groups_id(id))
    }

    /// `dump-groups` lines, as `ovs-ofctl dump-groups` prints them.
    pub fn dump_groups_text(&self) -> Vec<String> {
        self.ofproto
            .dump_groups()
            .iter()
            .map(|g| nicflow_ofctl::format_group(g, &self.names))
            .collect()
    }

    /// Group counters, up to date.
    pub fn group_stats(&mut self, now: Instant) -> Vec<crate::ofproto::group::GroupStats> {
        self.dp.push_stats(&mut self.ofproto);
        self.credit_select_buckets();
        self.ofproto.group_stats(now)
    }

    /// Credit per-packet select groups' buckets with what was sent through
    /// each since the last time (executor and kernel engines).
    fn credit_select_buckets(&mut self) {
        let counts = self.take_select_counts();
        self.ofproto.groups.credit_buckets(&counts);
    }

    /// The per-bucket counts of per-packet select groups since the last
    /// call, userspace's and the kernel engines'.
    fn take_select_counts(&mut self) -> Vec<(u32, u16, u64, u64)> {
        let mut counts = self.dp.select.take_counts();
        if let Some(off) = self.dp.offload_mut() {
            counts.extend(off.take_select_counts());
        }
        counts
    }

    /// One poll round over every port. Returns the number of frames
    /// received.
    pub fn run_once(&mut self, now: Instant) -> usize {
        let mut total = 0;
        // Connections the TC program set up since the last round, then
        // the poll of set-up connections: with the program setting them up
        // the daemon receives almost no batch to poll after.
        self.dp.take_ct_events(now);
        self.dp.poll_ct_setup(now);
        let n_ports = self.ports.len();
        // Outside a budgeted round (tests, captures) ports go in order.
        let first = match self.round {
            Some(_) if n_ports > 0 => {
                self.next_port = (self.next_port + 1) % n_ports;
                self.next_port
            }
            _ => 0,
        };
        for k in 0..n_ports {
            if self.round_spent() {
                break;
            }
            let i = (first + k) % n_ports;
            let in_port = self.ports[i].no;
            self.rx.clear();
            let n = match self.ports[i]
                .port
                .recv_batch(&mut self.rx, BATCH_SIZE, &mut self.dp.pool)
            {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(port = %self.ports[i].port.name(), "receive failed: {e}");
                    0
                }
            };
            if n == 0 {
                continue;
            }
            total += n;
            self.dp
                .process_batch(in_port, &mut self.rx, &mut self.ofproto, now, &mut self.tx);
            self.transmit();
            // After the batch's frames left, not before them.
            self.dp.poll_ct_setup(now);
            let spare = std::mem::take(&mut self.done);
            self.done = self.dp.recycle(spare);
            // Learning during the batch was revalidated by the datapath.
            self.mac_generation = self.ofproto.mac.generation();
        }
        total
    }

    /// Start a daemon round: from now on [`Bridge::run_once`] stops
    /// taking frames once this round has made `round_upcalls` upcalls or
    /// run for `round_time` ([`DatapathConfig`]); frames left in the rings
    /// wait for the next round, after the daemon has served its control
    /// connections. Without a round, `run_once` is unbounded.
    pub fn begin_round(&mut self, now: Instant) {
        self.round = Some(Round {
            start: now,
            upcalls_at_start: self.dp.stats().upcalls,
            spent: false,
        });
    }

    /// Has the current round spent its budget (see [`Bridge::begin_round`])?
    pub fn round_spent(&mut self) -> bool {
        let Some(r) = &mut self.round else {
            return false;
        };
        if r.spent {
            return true;
        }
        let cfg = self.dp.config();
        let upcalls = self.dp.stats().upcalls - r.upcalls_at_start;
        if upcalls >= cfg.round_upcalls as u64 || r.start.elapsed() >= cfg.round_time {
            r.spent = true;
            self.rounds_deferred += 1;
        }
        r.spent
    }

    fn transmit(&mut self) {
        for (port, buf) in self.tx.pkts.drain(..) {
            match self.ports.iter_mut().find(|p| p.no == port) {
                Some(slot) => slot.out.push(buf),
                None => self.done.push(buf),
            }
        }
        for slot in &mut self.ports {
            if slot.out.is_empty() {
                continue;
            }
            if !slot.offloads {
                // Super-frames are segmented, partial checksums completed.
                nicflow_port::finish_offloads(&mut slot.out, &mut self.dp.pool);
            }
            if let Err(e) = slot.port.send_batch(&mut slot.out, &mut self.done) {
                tracing::warn!(port = %slot.port.name(), "transmit failed: {e}");
                self.done.append(&mut slot.out);
            }
        }
    }

    /// Run poll rounds until every port's receive side is exhausted and a
    /// round moves nothing (offline captures, tests).
    pub fn run_until_idle(&mut self, now: Instant) -> usize {
        let mut total = 0;
        loop {
            let n = self.run_once(now);
            total += n;
            if n == 0 && self.ports.iter().all(|p| p.port.rx_exhausted()) {
                return total;
            }
            if n == 0 && self.ports.is_empty() {
                return total;
            }
        }
    }

    /// Housekeeping: datapath idle aging, rule timeouts, MAC aging; any
    /// change is revalidated before returning.
    pub fn tick(&mut self, now: Instant) {
        self.report_overload(now);
        for p in &mut self.ports {
            p.port.housekeeping();
        }
        if self.dp.offload_mut().is_some_and(|off| off.tick()) {
            self.dp.replace_flows();
        }
        self.dp.expire(now, &mut self.ofproto);
        self.dp.conntrack.sweep(now);
        // Kernel entries of the connections that expired go now.
        self.dp.forget_gone_conns(now);
        if self.ofproto.n_frozen() > 0 {
            let live = self.dp.recirc_ids_in_use();
            self.ofproto.retain_frozen(&live);
        }
        if self.ofproto.p4.is_some() {
            self.p4_tick(now);
        }
        let expired = self.ofproto.expire(now);
        self.ofproto.mac.expire(now);
        if expired > 0 || self.ofproto.mac.generation() != self.mac_generation {
            self.dp.revalidate(&mut self.ofproto);
            self.mac_generation = self.ofproto.mac.generation();
        }
    }

    /// Put the bridge in P4 mode: `path`'s program replaces the OpenFlow
    /// tables as the slow path (the rules stay, unused, until
    /// [`Bridge::p4_unload`]); the cached flows of the tables go first.
    pub fn p4_load(&mut self, path: crate::p4::P4Path) {
        self.dp.flush(&mut self.ofproto);
        self.dp.bypass_odd_ip = true;
        self.dp.scoped_revalidation = true;
        self.ofproto.p4 = Some(Box::new(path));
    }

    /// Back to the OpenFlow tables; `false` if the bridge was not in P4 mode.
    pub fn p4_unload(&mut self) -> bool {
        if self.ofproto.p4.is_none() {
            return false;
        }
        self.dp.flush(&mut self.ofproto);
        self.dp.bypass_odd_ip = false;
        self.dp.scoped_revalidation = false;
        self.ofproto.p4 = None;
        true
    }

    /// The P4 slow path, in P4 mode.
    pub fn p4(&self) -> Option<&crate::p4::P4Path> {
        self.ofproto.p4.as_deref()
    }

    /// Change the P4 program's tables or state through `f` (the
    /// [`crate::p4::P4Path`] methods that change tables mark them), then
    /// revalidate: only flows whose runs applied a changed table go.
    /// `None` when the bridge is not in P4 mode.
    pub fn p4_change<T>(&mut self, f: impl FnOnce(&mut crate::p4::P4Path) -> T) -> Option<T> {
        let p4 = self.ofproto.p4.as_deref_mut()?;
        let r = f(p4);
        if !self.defer_revalidation {
            self.dp.revalidate(&mut self.ofproto);
        }
        Some(r)
    }

    /// The P4 path for a change that affects no table and no cached
    /// decision (taking queued packet-ins or idle notifications): no
    /// revalidation, which would walk every cached flow. `None` when the
    /// bridge is not in P4 mode.
    pub fn p4_mut(&mut self) -> Option<&mut crate::p4::P4Path> {
        self.ofproto.p4.as_deref_mut()
    }

    /// Credit the cached flows' traffic to the P4 program's counters and
    /// entries now (before a counter read or a table dump).
    pub fn p4_push_stats(&mut self) {
        if self.ofproto.p4.is_some() {
            self.dp.push_stats(&mut self.ofproto);
        }
    }

    /// P4 housekeeping: the cached flows' hits become the entries' hit
    /// times, runs of flows that left are forgotten, idle entries age out.
    fn p4_tick(&mut self, now: Instant) {
        self.dp.push_stats(&mut self.ofproto);
        let live: std::collections::HashSet<nicflow_flow::FlowKey> =
            self.dp.flows().map(|(_, f)| f.xlate_key).collect();
        let Some(p4) = self.ofproto.p4.as_deref_mut() else {
            return;
        };
        p4.retain_runs(&live);
        if p4.expire_idle(now) > 0 {
            self.dp.revalidate(&mut self.ofproto);
        }
    }

    /// Every drop by reason, summed over the datapath, the kernel engines
    /// and the ports (see [`Drops`]). Reads the ports' and engines'
    /// kernel counters: control-plane rate only.
    pub fn drops(&self) -> Drops {
        let mut drops = Drops::new();
        let mut add = |reason: &'static str, n: u64| {
            if n > 0 {
                *drops.entry(reason).or_insert(0) += n;
            }
        };
        for (reason, n) in self.dp.stats().drops() {
            add(reason, n);
        }
        // Drops of offloaded flows happen in the kernel: count both.
        if let Some(s) = self.dp.offload().map(|off| off.status()) {
            let engines = [Some(s.engine), s.tc];
            for e in engines.into_iter().flatten() {
                for (reason, n) in e.drops() {
                    add(reason, n);
                }
                add("kernel_aborted", e.aborted);
            }
        }
        // Tunnel ports' shared underlays (and their ESP state), each once.
        let mut shared_seen: Vec<usize> = Vec::new();
        let (mut rx_other, mut tx_other) = (0u64, 0u64);
        // ESP seal failures: in the underlay's `esp_tx_drop_*` and in the
        // sending tunnel port's `tx_dropped` both.
        let mut esp_tx = 0u64;
        for p in &self.ports {
            let st = p.port.stats();
            let shared_new = p
                .port
                .shared_counters_id()
                .filter(|id| !shared_seen.contains(id));
            if let Some(id) = shared_new {
                shared_seen.push(id);
            }
            let (mut rx, mut tx) = (0u64, 0u64);
            for (name, n) in p.port.extra_counters() {
                if name.starts_with("rx_drop_") {
                    rx += n;
                    add(name, n);
                } else if name.starts_with("tx_drop_") {
                    tx += n;
                    add(name, n);
                } else if shared_new.is_some() && is_shared_drop(name) {
                    if name.starts_with("esp_tx_drop_") {
                        esp_tx += n;
                    }
                    add(name, n);
                }
            }
            // Whatever a port counts as dropped without naming why.
            rx_other += st.rx_dropped.saturating_sub(rx);
            tx_other += st.tx_dropped.saturating_sub(tx);
        }
        add("rx_drop_other", rx_other);
        add("tx_drop_other", tx_other.saturating_sub(esp_tx));
        drops
    }

    /// The bridge's limits and how often they were reached.
    pub fn limits(&self) -> Limits {
        let s = self.dp.stats();
        let p = self.dp.placements();
        let ct = &self.dp.conntrack;
        let m = self.dp.offload().map(|off| off.status());
        Limits {
            flow_limit: self.dp.config().flow_limit,
            flows: self.dp.n_flows(),
            flow_limit_hits: s.flow_limit_hits,
            kernel_max_flows: m.as_ref().and_then(|m| m.max_flows),
            kernel_flows: m.as_ref().map_or(0, |m| m.xdp_flows + m.tc_flows),
            kernel_full: p.refused_full,
            kernel_errors: p.refused_error,
            ct_limit: ct.config().limit,
            ct_connections: ct.len(),
            ct_limit_hits: ct.stats().limit_drops,
            rounds_deferred: self.rounds_deferred,
            flow_limit_reached: self.overload.flow_limit.is_some(),
            kernel_map_full: self.overload.kernel_full.is_some(),
        }
    }

    /// `set BR flow_limit=N`: the most datapath flows cached from now on.
    pub fn set_flow_limit(&mut self, limit: usize) {
        self.dp.set_flow_limit(limit);
    }

    /// Once a tick: one warning per drop reason that grew, at most every
    /// [`DROP_LOG_INTERVAL`], with the count since the last warning; one
    /// warning when a limit is reached and one line when it is relieved
    /// (an episode), never one per packet or per flow.
    fn report_overload(&mut self, now: Instant) {
        let drops = self.drops();
        for (reason, total) in drops {
            let (last, at) = self.overload.drops.entry(reason).or_insert((0, None));
            if total <= *last || at.is_some_and(|t| now.duration_since(t) < DROP_LOG_INTERVAL) {
                continue;
            }
            let since = at.map_or(String::new(), |t| {
                format!(" in the last {:.0} s", now.duration_since(t).as_secs_f64())
            });
            tracing::warn!(
                bridge = %self.name,
                reason,
                dropped = total - *last,
                total,
                "packets dropped{since}"
            );
            *last = total;
            *at = Some(now);
        }
        let l = self.limits();
        let log = &mut self.overload;
        // Flow limit: reached when an upcall could not be cached; relieved
        // once a tick passes without such an upcall and below the limit.
        let hits = l.flow_limit_hits - log.last_flow_limit_hits.min(l.flow_limit_hits);
        match log.flow_limit {
            None if hits > 0 => {
                tracing::warn!(
                    bridge = %self.name,
                    flow_limit = l.flow_limit,
                    flows = l.flows,
                    "datapath flow limit reached: new flows are not cached, each of their packets takes the slow path"
                );
                log.flow_limit = Some(l.flow_limit_hits - hits);
            }
            Some(start) if hits == 0 && l.flows < l.flow_limit => {
                tracing::info!(
                    bridge = %self.name,
                    flow_limit = l.flow_limit,
                    uncached = l.flow_limit_hits - start,
                    "datapath flows below the flow limit again"
                );
                log.flow_limit = None;
            }
            _ => {}
        }
        log.last_flow_limit_hits = l.flow_limit_hits;
        let refused = l.kernel_full - log.last_kernel_full.min(l.kernel_full);
        match log.kernel_full {
            None if refused > 0 => {
                tracing::warn!(
                    bridge = %self.name,
                    max_flows = l.kernel_max_flows.unwrap_or(0),
                    kernel_flows = l.kernel_flows,
                    "kernel flow map full: new flows stay in userspace (offload_options max_flows)"
                );
                log.kernel_full = Some(l.kernel_full - refused);
            }
            Some(start)
                if refused == 0
                    && l.kernel_max_flows
                        .is_none_or(|max| l.kernel_flows < max as usize) =>
            {
                tracing::info!(
                    bridge = %self.name,
                    refused = l.kernel_full - start,
                    "kernel flow map accepts flows again"
                );
                log.kernel_full = None;
            }
            _ => {}
        }
        log.last_kernel_full = l.kernel_full;
    }

    /// Frozen table walks (recirculation ids) the slow path holds.
    pub fn n_frozen(&self) -> usize {
        self.ofproto.n_frozen()
    }

    /// The bridge's connection tracker (`ct` actions of its flows).
    pub fn conntrack(&self) -> &nicflow_conntrack::Conntrack {
        &self.dp.conntrack
    }

    /// Hand the tracker what the kernel entries of its connections saw
    /// (counters, and the TCP flags of connections set up there), as each
    /// tick does; before a dump, so it is not a tick late.
    pub fn sync_ct_offloads(&mut self) {
        self.dp.sync_ct_offloads(Instant::now());
    }

    /// Turn connection set-up in the kernel on or off (on by default,
    /// `NICFLOW_CT_SETUP=0` in the environment turns it off).
    pub fn set_ct_setup(&mut self, on: bool) {
        self.dp.ct_offloads.setup_enabled = on;
    }

    /// Turn set-up in the BPF program (templates) on or off (on by
    /// default, `NICFLOW_CT_SETUP_BPF=0` in the environment turns it off).
    /// Off, the templates go at once.
    pub fn set_ct_setup_bpf(&mut self, on: bool) {
        self.dp.ct_offloads.setup_bpf = on;
        self.dp.ct_offloads.events_held = false;
        self.dp.sync_ct_offloads(Instant::now());
    }

    /// Turn set-up in the kernel of NATed connections on or off (on by
    /// default, `NICFLOW_CT_SETUP_NAT=0` in the environment turns it off).
    pub fn set_ct_setup_nat(&mut self, on: bool) {
        self.dp.ct_offloads.setup_nat = on;
    }

    /// The TC program's own set-up counters (`layout::ct_stat`).
    pub fn ct_program_stats(&self) -> [u64; 4] {
        self.dp
            .offload()
            .map(|o| o.ct_program_stats())
            .unwrap_or_default()
    }

    /// Connections in the kernel engine (`ct_offload`), for `stats`.
    pub fn ct_offloads(&self) -> &crate::datapath::ct_offload::CtOffloads {
        &self.dp.ct_offloads
    }

    /// The same, to change its limits (tests).
    pub fn ct_offloads_mut(&mut self) -> &mut crate::datapath::ct_offload::CtOffloads {
        &mut self.dp.ct_offloads
    }

    /// The most connections the tracker holds (`dpctl/ct-set-maxconns`).
    pub fn set_conntrack_limit(&mut self, limit: usize) {
        self.dp.conntrack.set_limit(limit);
    }

    /// Remove tracked connections (and their kernel entries). Cached flows
    /// are not touched: a packet of a flushed connection is tracked afresh
    /// by its `ct` action.
    pub fn flush_conntrack(&mut self, filter: &nicflow_conntrack::FlushFilter) -> usize {
        let n = self.dp.conntrack.flush(filter);
        // Kernel entries of flushed connections go before this returns.
        self.dp.sync_ct_offloads(Instant::now());
        n
    }

    /// Rules with up-to-date counters.
    pub fn dump_flows(&mut self, now: Instant) -> Vec<RuleDump> {
        self.dp.push_stats(&mut self.ofproto);
        self.ofproto.dump_flows(now)
    }

    /// `dump-flows` text, one rule per line with counters, OVS style.
    pub fn dump_flows_text(&mut self, now: Instant) -> Vec<String> {
        let names = self.names.clone();
        self.dump_flows(now)
            .into_iter()
            .map(|d| {
                let text = nicflow_ofctl::format_flow(&d.spec, &names);
                format!(
                    "duration={:.3}s, n_packets={}, n_bytes={}, idle_age={}, {}",
                    d.duration.as_secs_f64(),
                    d.n_packets,
                    d.n_bytes,
                    d.idle_age.as_secs(),
                    text
                )
            })
            .collect()
    }

    pub fn dp_flows(&self) -> impl Iterator<Item = &DpFlow> {
        self.dp.flows().map(|(_, f)| f)
    }

    pub fn dump_dp_flows(&self, now: Instant) -> Vec<DpFlowDump> {
        self.dp
            .flows()
            .map(|(_, f)| {
                let t = f.total();
                let k = f.kernel.stats();
                DpFlowDump {
                    matching: nicflow_ofctl::format_match(&f.matching, &self.names),
                    actions: format_actions(&f.actions),
                    packets: t.packets,
                    bytes: t.bytes,
                    used: t.used.map(|u| now.saturating_duration_since(u)),
                    kernel_packets: k.packets,
                    kernel_bytes: k.bytes,
                    engine: match (f.placement, self.dp.offload()) {
                        (Some(Placement::Kernel(id)), Some(off)) => off.engine_name(id),
                        (Some(Placement::Kernel(_)), None) => "kernel",
                        _ => "userspace",
                    },
                    not_offloaded: match f.placement {
                        Some(Placement::Userspace(r)) => Some(r),
                        _ => None,
                    },
                }
            })
            .chain(self.dp.ct_offloads.iter().map(|o| {
                // One direction of an established connection, composed from
                // the ct flows above (whose counters include its traffic).
                let (packets, bytes) = o.counted();
                DpFlowDump {
                    matching: format!(
                        "established:{}",
                        nicflow_ofctl::format_match(&o.matching, &self.names)
                    ),
                    actions: format_actions(&o.actions),
                    packets,
                    bytes,
                    used: None,
                    kernel_packets: packets,
                    kernel_bytes: bytes,
                    engine: self
                        .dp
                        .offload()
                        .map_or("kernel", |off| off.engine_name(o.kernel_id)),
                    not_offloaded: None,
                }
            }))
            .collect()
    }

    /// What `offload-plan` judges: the bridge's ports as the profiles see
    /// them and each datapath flow (in `dump-dp-flows` order) in OVS's
    /// form, with its counters. Changes nothing.
    pub fn offload_plan_input(&self) -> PlanInput {
        let ports = self
            .ports
            .iter()
            .map(|s| {
                crate::offload::profile::model_port(s.no, s.port.name(), &s.port.offload_hook())
            })
            .collect::<Vec<_>>();
        let drop_meters = crate::offload::profile::drop_meters(self.ofproto.meters());
        let by_no: BTreeMap<u32, crate::offload::profile::ModelPort> =
            ports.iter().map(|p| (p.port.no, p.clone())).collect();
        let flows = self
            .dp
            .flows()
            .map(|(_, f)| {
                let t = f.total();
                // An established connection's kernel entries count on the
                // ct flows they were composed from.
                let mut k = f.kernel.stats();
                k.packets += f.ct_kernel.0;
                k.bytes += f.ct_kernel.1;
                PlanFlow {
                    matching: nicflow_ofctl::format_match(&f.matching, &self.names),
                    actions: format_actions(&f.actions),
                    recirc_id: f.matching.key().recirc_id,
                    recircs: {
                        let mut ids = Vec::new();
                        crate::datapath::action::walk(&f.actions, &mut |a| {
                            if let crate::datapath::DpAction::Recirc(id) = a {
                                ids.push(*id);
                            }
                        });
                        ids
                    },
                    packets: t.packets,
                    bytes: t.bytes,
                    kernel_packets: k.packets,
                    kernel_bytes: k.bytes,
                    converted: crate::offload::profile::convert(
                        &f.xlate_key,
                        f.matching.mask(),
                        &f.actions,
                        &by_no,
                        &drop_meters,
                    ),
                }
            })
            .collect();
        PlanInput {
            ports,
            flows,
            ct_connections: self
                .conntrack()
                .dump(None, std::time::Instant::now())
                .iter()
                .filter(|e| match &e.tcp {
                    // act_ct offloads established (assured) connections.
                    Some(t) => {
                        t.state_orig == nicflow_conntrack::TcpState::Established
                            && t.state_reply == nicflow_conntrack::TcpState::Established
                    }
                    None => e.counters_reply.packets > 0,
                })
                .count() as u64,
        }
    }

    pub fn dp_stats(&self) -> &DpStats {
        self.dp.stats()
    }

    pub fn ofproto_stats(&self) -> &OfprotoStats {
        self.ofproto.stats()
    }

    pub fn ofproto(&self) -> &Ofproto {
        &self.ofproto
    }

    pub fn datapath_mut(&mut self) -> &mut Datapath {
        &mut self.dp
    }

    pub fn n_dp_flows(&self) -> usize {
        self.dp.n_flows()
    }
}

/// Add port `no` to the offload provider; a port it cannot take works
/// through userspace only (logged).
fn port_add(off: &mut dyn FlowOffload, bridge: &str, no: u32, port: &dyn Port) {
    match off.port_add(no, port.name(), &port.offload_hook()) {
        Ok(PortOffload::Engine(engine)) => {
            tracing::debug!(bridge, port = %port.name(), engine, "offload engine runs on the port")
        }
        Ok(PortOffload::Userspace(reason)) => {
            tracing::debug!(bridge, port = %port.name(), reason, "flows through the port stay in userspace")
        }
        Err(e) => {
            tracing::warn!(bridge, port = %port.name(), "offload engine not attached: {e}")
        }
    }
}

impl Drop for Bridge {
    /// Ports get their own XDP programs back before the engine goes. A
    /// panic is a crash: the kernel flows are left in place (not flushed),
    /// and the pinned engine and ports keep forwarding for the next daemon.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        self.disable_offload();
    }
}

/// What the OpenFlow connections (`control::openflow`) need beyond the CLI.
impl Bridge {
    /// An OpenFlow `PACKET_OUT`: run `actions` on `data` as if it arrived
    /// on `in_port` (a port number or `OFPP_CONTROLLER`/`OFPP_LOCAL`);
    /// `resubmit(,N)` goes through the tables. The decision is made for
    /// this frame alone and not cached. Returns `false` when the frame
    /// does not parse or is empty.
    pub fn packet_out(
        &mut self,
        in_port: u32,
        data: &[u8],
        actions: &[nicflow_flow::Action],
        now: Instant,
    ) -> bool {
        self.packet_out_with(
            in_port,
            &nicflow_flow::Match::catchall(),
            data,
            actions,
            now,
        )
    }

    /// [`Bridge::packet_out`] with pipeline fields the frame starts with
    /// (OpenFlow 1.5's `PACKET_OUT` match: `metadata`, registers, tunnel
    /// fields): the fields `metadata` sets override what the frame says.
    pub fn packet_out_with(
        &mut self,
        in_port: u32,
        metadata: &nicflow_flow::Match,
        data: &[u8],
        actions: &[nicflow_flow::Action],
        now: Instant,
    ) -> bool {
        self.xlate_once(in_port, metadata, data, now, |of, key| {
            crate::ofproto::xlate::translate_actions(of, key, actions, Some(now))
        })
    }

    /// `NXT_RESUME`: the walk a `controller(pause)` froze goes on for
    /// `data` (which the controller may have changed) with the pipeline
    /// fields of `metadata` (the `PACKET_IN2`'s, sent back): the remaining
    /// actions run with their side effects, and the decision is for this
    /// frame alone (not cached, as in OVS). Returns `false` when the frame
    /// does not parse or is empty.
    pub fn resume(
        &mut self,
        metadata: &nicflow_flow::Match,
        data: &[u8],
        paused: &crate::datapath::action::Paused,
        now: Instant,
    ) -> bool {
        let in_port = nicflow_flow::Field::InPort.read(metadata.key()) as u32;
        self.xlate_once(in_port, metadata, data, now, |of, key| {
            crate::ofproto::xlate::translate_resume(of, key, paused, Some(now))
        })
    }

    /// Parse `data` as arriving on `in_port` with `metadata`'s fields over
    /// it, translate it with `xlate` and execute the result once.
    fn xlate_once(
        &mut self,
        in_port: u32,
        metadata: &nicflow_flow::Match,
        data: &[u8],
        now: Instant,
        xlate: impl FnOnce(
            &mut crate::ofproto::Ofproto,
            &nicflow_flow::FlowKey,
        ) -> crate::datapath::XlateOut,
    ) -> bool {
        if data.is_empty() {
            return false;
        }
        let mut key = nicflow_flow::FlowKey::default();
        if nicflow_flow::extract(data, in_port, &mut key).is_err() {
            return false;
        }
        let (mv, mm) = (metadata.key().words(), metadata.mask().words());
        for (i, k) in key.words_mut().iter_mut().enumerate() {
            *k = (*k & !mm[i]) | mv[i];
        }
        self.dp.push_stats(&mut self.ofproto);
        let out = xlate(&mut self.ofproto, &key);
        let mut buf = self.dp.alloc_buf();
        if !buf.set_data(data) {
            buf = PacketBuf::from_slice(data);
        }
        let ok = self.dp.execute_once(
            in_port,
            buf,
            &out.actions,
            &mut self.ofproto,
            now,
            &mut self.tx,
        );
        self.transmit();
        let spare = std::mem::take(&mut self.done);
        self.done = self.dp.recycle(spare);
        if out.state_changed || self.ofproto.mac.generation() != self.mac_generation {
            self.dp.revalidate(&mut self.ofproto);
            self.mac_generation = self.ofproto.mac.generation();
        }
        ok
    }

    /// Ports as (number, name, counters), in port-number order.
    pub fn of_ports(&self) -> Vec<(u32, String, PortStats)> {
        let mut v: Vec<_> = self
            .ports
            .iter()
            .map(|p| (p.no, p.port.name().to_string(), p.port.stats()))
            .collect();
        v.sort_by_key(|p| p.0);
        v
    }

    /// Delete one group (`Some(id)`) or all, and the rules that use them;
    /// the datapath is revalidated. Returns (groups, rules) removed.
    pub fn del_groups_id(&mut self, id: Option<u32>) -> (usize, usize) {
        self.dp.push_stats(&mut self.ofproto);
        self.credit_select_buckets();
        let before: std::collections::BTreeSet<u32> = self
            .ofproto
            .groups
            .iter()
            .map(|g| g.spec.group_id)
            .collect();
        let n = self.ofproto.del_groups(id);
        // A deleted group's counts (and those of a group re-added under the
        // same id before the revalidation) are the old buckets'.
        let reset: std::collections::BTreeSet<u32> = before
            .into_iter()
            .filter(|g| !self.ofproto.groups.contains(*g))
            .collect();
        if self.defer_revalidation {
            self.deferred_group_resets.extend(reset);
        } else {
            self.dp.revalidate(&mut self.ofproto);
            self.settle_group_counts(&reset);
        }
        n
    }

    /// Per-packet select state of groups that are gone goes with them.
    fn forget_select_state(&mut self) {
        let groups = &self.ofproto.groups;
        self.dp.select.retain(|g| groups.contains(g));
        if let Some(off) = self.dp.offload_mut() {
            off.retain_selects(&|g| groups.contains(g));
        }
    }

    /// The groups as their specs (`GROUP_DESC`).
    pub fn group_specs(&self) -> Vec<nicflow_ofctl::GroupSpec> {
        self.ofproto.dump_groups()
    }

    /// The congestion-aware (`selection_method=splb`) groups, each with,
    /// per bucket in group order, its weight and the interface index of the
    /// port its first output goes to (`None`: no output to a port with an
    /// interface), for the daemon's sampler to measure.
    pub fn splb_paths(&self) -> Vec<(u32, Vec<SplbPath>)> {
        use nicflow_ofctl::SelectionMethod;
        self.ofproto
            .groups
            .iter()
            .filter(|g| g.spec.selection_method == Some(SelectionMethod::Splb))
            .map(|g| {
                let buckets = g
                    .spec
                    .buckets
                    .iter()
                    .map(|b| {
                        let port = b.actions.iter().find_map(|a| match a {
                            nicflow_flow::Action::Output(p) => Some(*p),
                            nicflow_flow::Action::OutputMaxLen { port, .. } => Some(*port),
                            _ => None,
                        });
                        let ifindex = port.and_then(|no| {
                            self.ports
                                .iter()
                                .find(|s| s.no == no)
                                .and_then(|s| s.port.ifindex())
                        });
                        (b.weight, ifindex)
                    })
                    .collect();
                (g.spec.group_id, buckets)
            })
            .collect()
    }

    /// Publish splb weights for group `group` (by bucket position): the
    /// userspace executor and the kernel engines choose by them from the
    /// next packet on.
    pub fn publish_splb(&mut self, group: u32, weights: &[u32]) {
        if self.dp.select.published(group) == Some(weights) {
            return;
        }
        self.dp.select.publish(group, weights);
        if let Some(off) = self.dp.offload_mut() {
            off.publish_select(group, weights);
        }
    }

    /// Per table (index = table id): its rules and its lookup counters
    /// with the datapath's flows' traffic folded in, for `OFPMP_TABLE`.
    pub fn table_stats(&mut self) -> Vec<(u32, crate::ofproto::TableCounters)> {
        self.dp.push_stats(&mut self.ofproto);
        let counters = self.ofproto.table_counters();
        self.rules_per_table()
            .into_iter()
            .enumerate()
            .map(|(t, n)| (n, counters.get(t).copied().unwrap_or_default()))
            .collect()
    }

    /// Rules per table (index = table id).
    pub fn rules_per_table(&self) -> Vec<u32> {
        let mut n = vec![0u32; crate::ofproto::N_TABLES];
        for d in self.ofproto.dump_flows(Instant::now()) {
            if let Some(c) = n.get_mut(d.spec.table as usize) {
                *c += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod overload_tests {
    use super::*;
    use nicflow_packet::builder::FrameBuilder;
    use nicflow_port::mem::{MemHandle, MemPort};
    use std::net::Ipv4Addr;

    const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];

    fn udp(sport: u16) -> Vec<u8> {
        FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
            .udp(sport, 9)
            .payload(b"overload")
            .build()
    }

    /// Two mem ports, a rule that makes every UDP source port its own
    /// datapath flow.
    fn bridge(cfg: DatapathConfig) -> (Bridge, MemHandle, MemHandle) {
        let mut br = Bridge::new("br0", cfg);
        let (p1, h1) = MemPort::new("p1");
        let (p2, h2) = MemPort::new("p2");
        br.add_port(Box::new(p1)).unwrap();
        br.add_port(Box::new(p2)).unwrap();
        let now = Instant::now();
        br.add_flow_str("priority=10,udp,actions=output:p2", now)
            .unwrap();
        br.add_flow_str("priority=50,udp,tp_src=1,actions=drop", now)
            .unwrap();
        (br, h1, h2)
    }

    #[test]
    fn a_spent_round_leaves_frames_in_the_ring_for_the_next() {
        let (mut br, h1, h2) = bridge(DatapathConfig {
            round_upcalls: 4,
            round_time: Duration::from_secs(3600),
            ..Default::default()
        });
        for i in 0..100u16 {
            h1.inject(&udp(1000 + i));
        }
        let now = Instant::now();
        br.begin_round(now);
        while br.run_once(now) > 0 && !br.round_spent() {}
        // One batch went past the budget (it is checked between batches),
        // no more; nothing was dropped.
        assert!(br.round_spent());
        assert_eq!(br.dp_stats().upcalls, BATCH_SIZE as u64);
        assert_eq!(h1.rx_pending(), 100 - BATCH_SIZE);
        assert_eq!(br.run_once(now), 0, "a spent round takes nothing");
        let mut rounds = 1;
        while h1.rx_pending() > 0 {
            br.begin_round(now);
            while br.run_once(now) > 0 && !br.round_spent() {}
            rounds += 1;
            assert!(rounds < 100);
        }
        assert_eq!(h2.take_tx().len(), 100);
        assert!(br.drops().is_empty(), "{:?}", br.drops());
        assert_eq!(br.limits().rounds_deferred, rounds);
    }

    #[test]
    fn outside_a_round_run_once_is_unbounded() {
        let (mut br, h1, h2) = bridge(DatapathConfig {
            round_upcalls: 1,
            ..Default::default()
        });
        for i in 0..100u16 {
            h1.inject(&udp(1000 + i));
        }
        br.run_until_idle(Instant::now());
        assert_eq!(h2.take_tx().len(), 100);
        assert_eq!(br.limits().rounds_deferred, 0);
    }

    #[test]
    fn a_lowered_flow_limit_is_hit_and_reported() {
        let (mut br, h1, h2) = bridge(DatapathConfig::default());
        br.set_flow_limit(3);
        for i in 0..10u16 {
            h1.inject(&udp(1000 + i));
        }
        let now = Instant::now();
        br.run_until_idle(now);
        assert_eq!(h2.take_tx().len(), 10, "still forwarded");
        let l = br.limits();
        assert_eq!((l.flow_limit, l.flows), (3, 3));
        assert_eq!(l.flow_limit_hits, 7);
        assert!(!l.flow_limit_reached);
        br.tick(now);
        assert!(br.limits().flow_limit_reached, "an episode began");
        br.tick(now);
        assert!(br.limits().flow_limit_reached, "still at the limit");
    }

    /// A port that reports drops of its own, as AF_PACKET and AF_XDP ports do.
    struct Dropping(MemPort);

    impl Port for Dropping {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn recv_batch(
            &mut self,
            out: &mut Vec<PacketBuf>,
            max: usize,
            pool: &mut Vec<PacketBuf>,
        ) -> std::io::Result<usize> {
            self.0.recv_batch(out, max, pool)
        }
        fn send_batch(
            &mut self,
            pkts: &mut Vec<PacketBuf>,
            done: &mut Vec<PacketBuf>,
        ) -> std::io::Result<usize> {
            self.0.send_batch(pkts, done)
        }
        fn rx_exhausted(&self) -> bool {
            self.0.rx_exhausted()
        }
        fn stats(&self) -> PortStats {
            PortStats {
                rx_dropped: 10,
                tx_dropped: 1,
                ..Default::default()
            }
        }
        fn extra_counters(&self) -> Vec<(&'static str, u64)> {
            vec![
                ("rx_drop_ring_full", 7),
                ("rx_drop_truncated", 0),
                ("rx_csum_completed", 5),
            ]
        }
    }

    #[test]
    fn port_drops_are_in_the_summary() {
        let (mut br, h1, _) = bridge(DatapathConfig::default());
        for _ in 0..2 {
            br.add_port(Box::new(Dropping(
                MemPort::new(&format!("d{}", br.ports.len())).0,
            )))
            .unwrap();
        }
        // A malformed frame: the datapath's own reason.
        h1.inject(&[0u8; 10]);
        br.run_until_idle(Instant::now());
        let d = br.drops();
        assert_eq!(d.get("rx_drop_ring_full"), Some(&14));
        // Counted as dropped without a reason: 10 - 7 per port.
        assert_eq!(d.get("rx_drop_other"), Some(&6));
        assert_eq!(d.get("tx_drop_other"), Some(&2));
        assert!(!d.contains_key("rx_drop_truncated") && !d.contains_key("rx_csum_completed"));
        let (parse, n) = br.dp_stats().drops()[0];
        assert_eq!((d.get(parse), n), (Some(&1), 1), "{d:?}");
        assert_eq!(d.len(), 4, "{d:?}");
    }

    /// A tunnel port as the bridge sees it: its own drops, and the
    /// counters of the underlay `shared` it shares with other ports.
    struct OnUnderlay {
        port: MemPort,
        shared: usize,
        tx_dropped: u64,
        tx_drop_arp_pending: u64,
    }

    impl Port for OnUnderlay {
        fn name(&self) -> &str {
            self.port.name()
        }
        fn recv_batch(
            &mut self,
            out: &mut Vec<PacketBuf>,
            max: usize,
            pool: &mut Vec<PacketBuf>,
        ) -> std::io::Result<usize> {
            self.port.recv_batch(out, max, pool)
        }
        fn send_batch(
            &mut self,
            pkts: &mut Vec<PacketBuf>,
            done: &mut Vec<PacketBuf>,
        ) -> std::io::Result<usize> {
            self.port.send_batch(pkts, done)
        }
        fn stats(&self) -> PortStats {
            PortStats {
                tx_dropped: self.tx_dropped,
                ..Default::default()
            }
        }
        fn extra_counters(&self) -> Vec<(&'static str, u64)> {
            vec![
                ("tx_drop_arp_pending", self.tx_drop_arp_pending),
                ("underlay_port_rx_drop_ring_full", 5),
                ("underlay_tx_dropped", 1),
                ("underlay_rx_udp_gso_whole", 40),
                ("esp_rx_drop_auth_failed", 2),
                ("esp_tx_drop_too_big", 3),
                ("esp_rx_packets", 100),
            ]
        }
        fn shared_counters_id(&self) -> Option<usize> {
            Some(self.shared)
        }
    }

    #[test]
    fn tunnel_underlay_and_esp_drops_are_in_the_summary_once_per_underlay() {
        let (mut br, _, _) = bridge(DatapathConfig::default());
        // Two tunnel ports on underlay 1 (the first sealed the 3 frames
        // ESP refused: its tx_dropped counts them), one on underlay 2.
        for (shared, tx_dropped, arp) in [(1, 4, 1), (1, 1, 1), (2, 4, 1)] {
            let name = format!("t{}", br.ports.len());
            br.add_port(Box::new(OnUnderlay {
                port: MemPort::new(&name).0,
                shared,
                tx_dropped,
                tx_drop_arp_pending: arp,
            }))
            .unwrap();
        }
        let d = br.drops();
        assert_eq!(d.get("underlay_port_rx_drop_ring_full"), Some(&10), "{d:?}");
        assert_eq!(d.get("underlay_tx_dropped"), Some(&2), "{d:?}");
        assert_eq!(d.get("esp_rx_drop_auth_failed"), Some(&4), "{d:?}");
        assert_eq!(d.get("esp_tx_drop_too_big"), Some(&6), "{d:?}");
        assert_eq!(d.get("tx_drop_arp_pending"), Some(&3), "{d:?}");
        // The ports' tx_dropped (9) are their ARP (3) and ESP (6) drops.
        assert!(!d.contains_key("tx_drop_other"), "{d:?}");
        assert!(!d.contains_key("underlay_rx_udp_gso_whole") && !d.contains_key("esp_rx_packets"));
        assert_eq!(d.len(), 5, "{d:?}");
    }
}

#[cfg(test)]
mod reserve_tests {
    use super::*;
    use nicflow_port::mem::MemPort;

    /// A number reserved with `reserve_port_as` is the port's when it is
    /// added, and the allocator skips it; a taken or out-of-range number
    /// is refused and reserves nothing.
    #[test]
    fn requested_numbers_are_kept_and_skipped() {
        let mut br = Bridge::new("br0", DatapathConfig::default());
        assert!(br.reserve_port_as("p2", 2));
        let (p1, _h1) = MemPort::new("p1");
        assert_eq!(br.add_port(Box::new(p1)).unwrap(), 1);
        let (p3, _h3) = MemPort::new("p3");
        assert_eq!(br.add_port(Box::new(p3)).unwrap(), 3);
        let (p2, _h2) = MemPort::new("p2");
        assert_eq!(br.add_port(Box::new(p2)).unwrap(), 2);
        assert!(!br.reserve_port_as("p4", 3));
        assert!(!br.reserve_port_as("p4", 0));
        assert!(!br.reserve_port_as("p4", 0xff00));
        assert!(!br.reserve_port_as("p1", 9));
        assert!(!br.port_map().0.contains_key("p4"));
    }
}
