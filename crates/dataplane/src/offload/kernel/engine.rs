//! Loading `bpf/xdp_dp.c` and managing its maps: flows, masks, ports,
//! output devmap, AF_XDP sockets, counters.
//!
//! Everything here runs at control-plane rate (flow install/remove,
//! counter reads for aging); the per-packet work is in the kernel.
//! Ordering rules that keep the program from ever seeing a half-installed
//! flow: a new mask is written (active) before the first flow that uses
//! it, and deactivated only after its last flow is deleted.

use super::encode::EncodedFlow;
use super::layout;
use super::layout::{
    ct_stat, stat, ConfigEntry, CtEvent, CtTpl, CtTplKey, DpKey, FlowHashKey, FlowMapKey,
    FlowValue, MaskEntry, PortEntry, PortSlot, TunRx, TunRxKey, TunTx, CFG_NO_COUNTERS,
    MAX_MASKS_CAP, PORT_SLOTS, PORT_UNDERLAY, TUN_SLOTS,
};
use super::masks::MaskTable;
use super::OffloadError;
use aya::maps::{Array, DevMap, HashMap as BpfHashMap, Map, MapData, PerCpuArray, XskMap};
use aya::programs::{ProgramError, SchedClassifier, TestRun, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use nicflow_port::attach::{self, ProgRef};
use nicflow_port::hook::XdpLinkRef;
use nicflow_port::pin::{self, HeldLink};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The objects built from `bpf/xdp_dp.c` and `bpf/tc_dp.c` by build.rs
/// (one datapath, `bpf/dp_core.h` + `bpf/dp_exec.h`, two attach points).
static XDP_DP_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_dp.o"));
static TC_DP_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tc_dp.o"));

/// Where the engine's program runs. Same maps, keys, flows and action
/// encoding; what differs is I/O (see `bpf/tc_dp.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// XDP (`xdp_dp`) on AF_XDP ports: misses to the port's AF_XDP socket,
    /// output through a devmap. No GSO super-frames, no partial checksums.
    Xdp,
    /// TC ingress (`tc_dp`, a tcx link) on plain interfaces: misses to the
    /// port's upcall veth, output with `bpf_redirect_peer` /
    /// `bpf_redirect`; skbs keep GSO and checksum state.
    Tc,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Xdp => "xdp",
            EngineKind::Tc => "tc",
        }
    }

    fn prog_name(self) -> &'static str {
        match self {
            EngineKind::Xdp => "xdp_dp",
            EngineKind::Tc => "tc_dp",
        }
    }
}

const BPF_NOEXIST: u64 = 1;
const BPF_EXIST: u64 = 2;

/// Map sizes, fixed when the program is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpEngineConfig {
    /// Entries of `dp_flows` (offloaded flows); a full map makes installs
    /// fail with `flow-map-full`.
    pub max_flows: u32,
    /// Mask slots (1..=64): the most distinct megaflow masks offloaded at
    /// once, and the worst-case number of hash lookups per missed frame.
    pub max_masks: u32,
    /// Slots of the output devmap `dp_tx_ports`.
    pub max_tx_ports: u32,
    /// Interfaces the program may be attached to (`dp_ports`).
    pub max_ifaces: u32,
    /// Entries of the XSKMAP (rx queues with an AF_XDP socket).
    pub max_queues: u32,
    /// Per-flow packet/byte counters updated on every hit. Off saves two
    /// atomic adds on a shared cache line per packet (the "counters off"
    /// column of document 003's table-scale experiment); flows then show
    /// only the packets userspace saw, and aging still works because the
    /// last-used time is stored either way.
    pub counters: bool,
    /// Bytes of the TC program's `dp_ct_events` ring buffer (a power of
    /// two, at least a page): 256 bytes per connection it sets up, until
    /// the daemon reads them.
    pub ct_events_bytes: u32,
}

impl Default for XdpEngineConfig {
    fn default() -> Self {
        XdpEngineConfig {
            max_flows: 65536,
            max_masks: 16,
            max_tx_ports: 256,
            max_ifaces: 256,
            max_queues: 64,
            counters: true,
            ct_events_bytes: 256 * 1024,
        }
    }
}

/// Handle of an installed flow: its map key (mask slot + masked key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowHandle(FlowMapKey);

impl FlowHandle {
    pub fn mask_slot(&self) -> u32 {
        self.0.mask_idx
    }

    pub fn key(&self) -> &DpKey {
        &self.0.key
    }
}

/// A flow's counters as the program left them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCounters {
    pub packets: u64,
    pub bytes: u64,
    /// OR of the TCP flags seen (may miss a bit under concurrent hits).
    pub tcp_flags: u16,
    /// Time since the last hit; `None` if never hit.
    pub idle: Option<Duration>,
    /// The last hit as an [`Instant`] (now - idle).
    pub used: Option<Instant>,
}

impl FlowCounters {
    /// From a map value, with the kernel clock and `Instant` read now.
    /// Add `o` (another bucket of the same select flow) to these.
    fn merge(&mut self, o: FlowCounters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.tcp_flags |= o.tcp_flags;
        self.idle = match (self.idle, o.idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.used = self.used.max(o.used);
    }

    fn of(v: &FlowValue, now_ns: u64, now: Instant) -> FlowCounters {
        let (idle, used) = if v.used_ns == 0 {
            (None, None)
        } else {
            let idle = Duration::from_nanos(now_ns.saturating_sub(v.used_ns));
            (Some(idle), now.checked_sub(idle))
        };
        FlowCounters {
            packets: v.packets,
            bytes: v.bytes,
            tcp_flags: v.tcp_flags,
            idle,
            used,
        }
    }
}

/// `BPF_MAP_LOOKUP_BATCH` (bpf(2) command 24).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// `BPF_MAP_LOOKUP_AND_DELETE_ELEM` (bpf(2) command 21; hash maps since
/// Linux 5.14).
const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;

/// `BPF_MAP_UPDATE_BATCH` (bpf(2) command 26; hash maps since Linux 5.6).
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// `BPF_MAP_DELETE_BATCH` (bpf(2) command 27; hash maps since Linux 5.6).
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// The element members of `union bpf_attr` (`map_fd`, `key`, `value`,
/// `flags`).
#[repr(C, align(8))]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The `batch` member of `union bpf_attr`.
#[repr(C, align(8))]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

impl BatchAttr {
    /// `bpf(cmd, self)`: a batched map command (`BPF_MAP_*_BATCH`); the
    /// kernel writes `count` (and the cursor) back into `self`.
    ///
    /// # Safety
    /// `keys`, `values` and the batch cursors must point at buffers of
    /// `count` keys and values of the map's sizes (and 8 bytes per
    /// cursor), alive for the call.
    unsafe fn call(&mut self, cmd: libc::c_long) -> std::io::Result<()> {
        // SAFETY: the caller's contract; the attribute itself is live.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                self as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>(),
            )
        };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

pub use crate::datapath::offload::EngineStats;

/// How the program is attached to an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachMode {
    Native,
    Generic,
}

/// The loaded XDP datapath with its maps. Dropping it detaches the program
/// from every interface (BPF links) and frees the maps.
pub struct XdpEngine {
    // Maps first: fields drop in order, and the maps only go away for good
    // once the program (inside `ebpf`) releases them too.
    flows: BpfHashMap<MapData, FlowHashKey, FlowValue>,
    /// Seeds of the flow hash (`dp_config.seed`): random per engine, read
    /// back from the map by an adopting daemon.
    seed: [u64; super::layout::DP_KEY_WORDS],
    masks_map: Array<MapData, MaskEntry>,
    config_map: Array<MapData, ConfigEntry>,
    ports_map: BpfHashMap<MapData, u32, PortEntry>,
    /// `dp_port_slots`: `dp_ports` direct-mapped (see [`Self::sync_port_slot`]).
    port_slots: Array<MapData, PortSlot>,
    tun_rx: BpfHashMap<MapData, TunRxKey, TunRx>,
    tun_tx: Array<MapData, TunTx>,
    /// Meters the engine's flows use (`meter:N`), by id.
    meters_map: BpfHashMap<MapData, u32, layout::MeterEntry>,
    /// Ids written to `meters_map`.
    meter_ids: std::collections::BTreeSet<u32>,
    /// `dp_select_w`: the weights of per-packet select groups, by slot.
    select_w: Array<MapData, layout::SelectWeights>,
    /// `dp_select`: the slots' per-CPU rotations (`None`: an engine adopted
    /// from pins of a daemon that did not pin it; its slots keep whatever
    /// rotation they had).
    select_state: Option<PerCpuArray<MapData, layout::SelectState>>,
    tx_ports: Map,
    /// XDP only: the AF_XDP sockets misses go to.
    xsks: Option<XskMap<MapData>>,
    stats: PerCpuArray<MapData, u64>,
    /// The loaded object; `None` for an engine adopted from pins, whose
    /// program is `adopted_prog`.
    ebpf: Option<Ebpf>,
    adopted_prog: Option<aya::programs::Program>,
    kind: EngineKind,
    cfg: XdpEngineConfig,
    masks: MaskTable,
    /// Installed flows (each holds its mask slot's reference), with
    /// their `dp_flows` keys.
    installed: Installed,
    links: HashMap<u32, aya::programs::xdp::XdpLinkId>,
    /// XDP only: ports' links switched to `xdp_dp` ([`Self::adopt_link`]).
    lent: HashMap<u32, XdpLinkRef>,
    /// TC only: `tc_dp` on ports' interfaces (tcx links, pinned under
    /// `pin_dir` when there is one: they outlive the process).
    tc_links: HashMap<u32, HeldLink>,
    /// Where the program, maps and links are pinned (`offload::pin`).
    pin_dir: Option<PathBuf>,
    /// Taken over from the pins of a daemon that died (not loaded).
    adopted: bool,
    /// `remove` reads and deletes with one `BPF_MAP_LOOKUP_AND_DELETE_ELEM`
    /// (hash maps: Linux >= 5.14); cleared at the first refusal, said
    /// once, so an older kernel does not pay a failing call per removal.
    lookup_delete: bool,
    /// Between [`Self::begin_staging`] and [`Self::commit_staged`]:
    /// installs queue their `dp_flows` entry in `staged` instead of writing
    /// it, and the commit writes them all with one `BPF_MAP_UPDATE_BATCH`
    /// (a connection set up in the kernel installs three entries at once).
    staging: bool,
    /// The staged entries' keys and values, apart: the batched update
    /// takes them as two arrays.
    staged_keys: Vec<FlowHashKey>,
    staged_values: Vec<FlowValue>,
    /// A write of staged entries before the commit (a second install or a
    /// `modify` of a staged flow) failed since [`Self::begin_staging`]:
    /// some of the staging may not be in the map, so the commit fails too
    /// and the caller removes every flow it staged.
    staged_failed: bool,
    /// Staged entries are written with `BPF_MAP_UPDATE_BATCH`; cleared at
    /// the kernel's first refusal (said once): then one update each.
    update_batch: bool,
    /// Successful `BPF_MAP_UPDATE_BATCH` calls ([`Self::update_batches`]).
    update_batches: u64,
    /// Flows removed by [`Self::queue_removal`], not deleted yet: their
    /// `dp_flows` key and their key (its mask slot, released only after
    /// the delete: a slot freed earlier could be taken by another mask
    /// while the old entry, with the old slot's index, is still in the
    /// map). One vector of pairs, so a flow taken off the queue takes its
    /// slot with it. [`Self::commit_removals`] deletes them with one
    /// `BPF_MAP_DELETE_BATCH`.
    removals: Vec<(FlowHashKey, FlowMapKey)>,
    /// The `dp_flows` keys of `removals` side by side, as the batch call
    /// reads them (a buffer reused by every commit).
    removal_keys: Vec<FlowHashKey>,
    /// Queued removals are deleted with `BPF_MAP_DELETE_BATCH`; cleared at
    /// the kernel's first refusal (said once): then one delete each.
    delete_batch: bool,
    /// Successful `BPF_MAP_DELETE_BATCH` calls ([`Self::delete_batches`]).
    delete_batches: u64,
    /// TC, loaded fresh: connection set-up in the program
    /// (`datapath::ct_offload`, issue 36): the templates, the ring buffer
    /// the program reports set-ups through, and its counters. `None` for
    /// an XDP engine and an engine adopted from pins (its set-ups stay
    /// the daemon's).
    ct_tpl: Option<BpfHashMap<MapData, CtTplKey, CtTpl>>,
    ct_events: Option<aya::maps::RingBuf<MapData>>,
    ct_stats: Option<PerCpuArray<MapData, u64>>,
    /// Templates written (removed when the engine drops: no set-up is
    /// left to a program nobody reads the reports of).
    ct_tpl_keys: BTreeSet<CtTplKey>,
    /// See [`Self::ct_entries_rewritten`].
    ct_entries_rewritten: u64,
}

/// Maps pinned with the program (every map userspace reads or writes).
const PINNED_MAPS: [&str; 16] = [
    "dp_flows",
    "dp_masks",
    "dp_config",
    "dp_ports",
    "dp_port_slots",
    "dp_tx_ports",
    "dp_stats",
    "dp_tun_rx",
    "dp_tun_tx",
    "dp_meters",
    "dp_xsks",
    "dp_select_w",
    "dp_select",
    // Set-up in the program: the next daemon clears the templates a
    // daemon that died without unwinding left (see `Self::adopt`).
    "dp_ct_tpl",
    "dp_ct_events",
    "dp_ct_stats",
];

/// A pinned map, typed.
fn pinned<T>(dir: &Path, name: &'static str) -> Result<T, OffloadError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let md = MapData::from_pin(dir.join(name)).map_err(|e| bpf("opening a pinned map", e))?;
    let m = Map::from_map_data(md).map_err(|e| bpf("pinned map type", e))?;
    T::try_from(m).map_err(|e| bpf("pinned map type", e))
}

/// Names an engine's pin directory: the object and the map sizes, so a
/// daemon never adopts maps of a layout or size it was not built for.
fn engine_hash(kind: EngineKind, cfg: &XdpEngineConfig) -> u64 {
    let obj = match kind {
        EngineKind::Xdp => XDP_DP_OBJ,
        EngineKind::Tc => TC_DP_OBJ,
    };
    let sizes = [
        cfg.max_flows,
        cfg.max_masks,
        cfg.max_tx_ports,
        cfg.max_ifaces,
        cfg.max_queues,
        cfg.counters as u32,
        // A pinned ring of another size is not this configuration's.
        cfg.ct_events_bytes,
    ];
    let sizes: Vec<u8> = sizes.iter().flat_map(|n| n.to_le_bytes()).collect();
    pin::hash(&[obj, &sizes])
}

impl std::fmt::Debug for XdpEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpEngine")
            .field("kind", &self.kind)
            .field("cfg", &self.cfg)
            .field("flows", &self.installed.len())
            .field("masks", &self.masks.len())
            .finish()
    }
}

fn bpf(op: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> OffloadError {
    OffloadError::Bpf {
        op,
        source: Box::new(e),
    }
}

fn errno_of(e: &aya::maps::MapError) -> Option<i32> {
    match e {
        aya::maps::MapError::SyscallError(s) => s.io_error.raw_os_error(),
        aya::maps::MapError::IoError(io) => io.raw_os_error(),
        _ => None,
    }
}

/// The flows an engine installed, by masked key, and the set of their
/// `dp_flows` keys, kept in step by one insert and one remove: a staged
/// install is written without `BPF_NOEXIST` (a batched update takes no
/// such flag), so it checks here that no other flow holds its key (the
/// 64-bit hash collision `BPF_NOEXIST` tells a single install).
///
/// Hashed with foldhash (randomly seeded, as the tracker's table), not
/// SipHash: each set-up connection inserts and removes three 120-byte
/// keys in both sets, and SipHash there was 7-8 % of the daemon's CPU in
/// the load balancer's connections/s run (docs/results/conntrack.md).
#[derive(Default)]
struct Installed {
    keys: HashSet<FlowMapKey, foldhash::fast::RandomState>,
    hashes: HashSet<FlowHashKey, foldhash::fast::RandomState>,
}

impl Installed {
    fn insert(&mut self, key: FlowMapKey, hk: FlowHashKey) {
        self.keys.insert(key);
        self.hashes.insert(hk);
    }

    /// Whether `key` was installed (its hash goes with it).
    fn remove(&mut self, key: &FlowMapKey, hk: &FlowHashKey) -> bool {
        let was = self.keys.remove(key);
        if was {
            self.hashes.remove(hk);
        }
        was
    }

    fn contains(&self, key: &FlowMapKey) -> bool {
        self.keys.contains(key)
    }

    /// Whether an installed flow's `dp_flows` key is `hk`.
    fn holds_hash(&self, hk: &FlowHashKey) -> bool {
        self.hashes.contains(hk)
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn keys(&self) -> impl Iterator<Item = FlowMapKey> + '_ {
        self.keys.iter().copied()
    }
}

/// Whether a map command failed because this kernel refuses the command
/// itself (`EINVAL`: a command it does not know; `EOPNOTSUPP`, or its
/// internal `ENOTSUPP`, 524: a map without it), not because of an entry.
/// Such a refusal is for good: the caller falls back to the older
/// commands, and does not try again.
fn refuses_command(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(ENOTSUPP)
    )
}

/// The kernel's internal `ENOTSUPP` (not in libc): what a map without a
/// batched command answers through the `bpf` system call.
const ENOTSUPP: i32 = 524;

fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, OffloadError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| OffloadError::Config(format!("BPF object has no map `{name}`")))?;
    T::try_from(m).map_err(|e| bpf("map type", e))
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `bpf(BPF_MAP_DELETE_ELEM)`: aya 0.14's DevMap has no delete.
fn map_delete_u32(fd: RawFd, key: u32) -> std::io::Result<()> {
    #[repr(C)]
    struct Attr {
        map_fd: u32,
        pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let attr = Attr {
        map_fd: fd as u32,
        pad: 0,
        key: &key as *const u32 as u64,
        value: 0,
        flags: 0,
    };
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
    // SAFETY: the attribute struct outlives the call and the key pointer
    // points to a live u32; the kernel reads sizeof(attr) bytes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_DELETE_ELEM,
            &attr as *const Attr,
            std::mem::size_of::<Attr>(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One `BPF_PROG_TEST_RUN` of an XDP or TC program.
#[derive(Clone, Debug)]
pub struct TestRunOutcome {
    pub verdict: u32,
    /// The frame as the program left it.
    pub frame: Vec<u8>,
    /// Mean time per run as the kernel timed it, ns.
    pub ns_per_run: f64,
}

/// `BPF_PROG_TEST_RUN` of an XDP or TC program on `frame` as received on
/// `ifindex` / rx queue `queue`, `repeat` times; for TC, `gso` = (segments,
/// segment size) marks the skb as a GSO super-frame. The context is the
/// program type's (`struct xdp_md` or the fields of `struct __sk_buff` the
/// kernel accepts there).
pub fn prog_test_run(
    prog: &aya::programs::Program,
    frame: &[u8],
    ifindex: u32,
    queue: u32,
    gso: Option<(u32, u32)>,
    repeat: u32,
) -> Result<TestRunOutcome, OffloadError> {
    let put = |ctx: &mut [u8], at: usize, w: u32| {
        ctx[at..at + 4].copy_from_slice(&w.to_ne_bytes());
    };
    let ctx = match prog {
        aya::programs::Program::SchedClassifier(_) => {
            // struct __sk_buff (192 bytes): ingress_ifindex (36), ifindex
            // (40), gso_segs (164), gso_size (176).
            let mut c = vec![0u8; 192];
            put(&mut c, 36, ifindex);
            put(&mut c, 40, ifindex);
            if let Some((segs, size)) = gso {
                put(&mut c, 164, segs);
                put(&mut c, 176, size);
            }
            c
        }
        _ => {
            // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
            // rx_queue_index, egress_ifindex.
            let mut c = vec![0u8; 24];
            put(&mut c, 4, frame.len() as u32);
            put(&mut c, 12, ifindex);
            put(&mut c, 16, queue);
            c
        }
    };
    let mut out = vec![0u8; frame.len() + 256];
    let opts = TestRunOptions {
        data_in: Some(frame),
        data_out: Some(&mut out),
        ctx_in: Some(&ctx),
        repeat: repeat.max(1),
        ..TestRunOptions::default()
    };
    let r = match prog {
        aya::programs::Program::Xdp(p) => p.test_run(opts),
        aya::programs::Program::SchedClassifier(p) => p.test_run(opts),
        _ => return Err(OffloadError::Config("not an XDP or TC program".into())),
    }
    .map_err(|e| bpf("BPF_PROG_TEST_RUN", e))?;
    out.truncate(r.data_size_out as usize);
    Ok(TestRunOutcome {
        verdict: r.return_value,
        frame: out,
        ns_per_run: r.duration.as_nanos() as f64,
    })
}

fn config_flags(cfg: &XdpEngineConfig) -> u32 {
    if cfg.counters {
        0
    } else {
        CFG_NO_COUNTERS
    }
}

impl XdpEngine {
    /// Load the program and create its maps (the verifier runs here). Not
    /// attached anywhere yet. A verifier rejection is
    /// [`OffloadError::Verifier`], whose log the caller can save.
    pub fn load(cfg: XdpEngineConfig) -> Result<XdpEngine, OffloadError> {
        Self::load_kind(EngineKind::Xdp, cfg)
    }

    /// Load the TC datapath (`tc_dp`), with the same maps as the XDP one
    /// except the XSKMAP (misses go to upcall devices) and `dp_tx_ports`,
    /// an array of [`TxIf`](super::layout::TxIf).
    pub fn load_tc(cfg: XdpEngineConfig) -> Result<XdpEngine, OffloadError> {
        Self::load_kind(EngineKind::Tc, cfg)
    }

    pub fn load_kind(kind: EngineKind, cfg: XdpEngineConfig) -> Result<XdpEngine, OffloadError> {
        Self::open_kind(kind, cfg, None)
    }

    /// The engine of `kind` for a bridge whose pins live in `bridge_dir`:
    /// the one a previous daemon pinned there when its program and sizes
    /// are these (no load, no verifier; TC flows, ports and links are
    /// kept for [`Self::adopted`] to be taken over, the XDP engine's maps
    /// are emptied since its attachments died with that daemon), else a
    /// fresh load, pinned there. Without a directory: loaded, not pinned.
    pub fn open_kind(
        kind: EngineKind,
        cfg: XdpEngineConfig,
        bridge_dir: Option<&Path>,
    ) -> Result<XdpEngine, OffloadError> {
        let dir = bridge_dir.map(|b| {
            b.join(format!(
                "{}-{:016x}",
                kind.as_str(),
                engine_hash(kind, &cfg)
            ))
        });
        if let Some(d) = dir.as_deref().filter(|d| d.join("prog").exists()) {
            match Self::adopt(kind, cfg, d) {
                Ok(e) => {
                    pin::claim(d);
                    tracing::info!(
                        engine = kind.as_str(), pins = %d.display(), flows = e.installed.len(),
                        links = e.tc_links.len(), "offload engine adopted from its pins (not reloaded)"
                    );
                    return Ok(e);
                }
                Err(e) => {
                    tracing::warn!(pins = %d.display(), "pinned engine not adoptable, loading afresh: {e}");
                    pin::remove(d);
                }
            }
        }
        Self::load_fresh(kind, cfg, dir, None)
    }

    /// A TC engine from another build of `tc_dp.c` (the same maps and
    /// layouts, e.g. compiled with profiling `-D` flags that end the
    /// program early): `nicflow bench progcost --tc-variant` measures such
    /// objects beside the real one. Not pinned, never adopted.
    pub fn load_tc_object(obj: &[u8], cfg: XdpEngineConfig) -> Result<XdpEngine, OffloadError> {
        Self::load_fresh(EngineKind::Tc, cfg, None, Some(obj))
    }

    /// Open the program and maps pinned in `dir` and rebuild the
    /// bookkeeping from them (see [`Self::open_kind`]).
    fn adopt(
        kind: EngineKind,
        cfg: XdpEngineConfig,
        dir: &Path,
    ) -> Result<XdpEngine, OffloadError> {
        let prog = match kind {
            EngineKind::Tc => aya::programs::Program::SchedClassifier(
                SchedClassifier::from_pin(dir.join("prog"))
                    .map_err(|e| bpf("opening the pinned program", e))?,
            ),
            EngineKind::Xdp => aya::programs::Program::Xdp(
                Xdp::from_pin(
                    dir.join("prog"),
                    aya_obj::programs::XdpAttachType::Interface,
                )
                .map_err(|e| bpf("opening the pinned program", e))?,
            ),
        };
        let tx_ports = Map::from_map_data(
            MapData::from_pin(dir.join("dp_tx_ports"))
                .map_err(|e| bpf("opening a pinned map", e))?,
        )
        .map_err(|e| bpf("pinned map type", e))?;
        let config_map: Array<MapData, ConfigEntry> = pinned(dir, "dp_config")?;
        let seed = config_map
            .get(&0, 0)
            .map_err(|e| bpf("BPF_MAP_LOOKUP_ELEM(dp_config)", e))?
            .seed;
        let mut e = XdpEngine {
            flows: pinned(dir, "dp_flows")?,
            seed,
            masks_map: pinned(dir, "dp_masks")?,
            config_map,
            ports_map: pinned(dir, "dp_ports")?,
            port_slots: pinned(dir, "dp_port_slots")?,
            tun_rx: pinned(dir, "dp_tun_rx")?,
            tun_tx: pinned(dir, "dp_tun_tx")?,
            meters_map: pinned(dir, "dp_meters")?,
            select_w: pinned(dir, "dp_select_w")?,
            select_state: pinned(dir, "dp_select").ok(),
            meter_ids: Default::default(),
            tx_ports,
            xsks: match kind {
                EngineKind::Xdp => Some(pinned(dir, "dp_xsks")?),
                EngineKind::Tc => None,
            },
            stats: pinned(dir, "dp_stats")?,
            ebpf: None,
            adopted_prog: Some(prog),
            kind,
            cfg,
            masks: MaskTable::new(cfg.max_masks),
            installed: Installed::default(),
            links: HashMap::new(),
            lent: HashMap::new(),
            tc_links: HashMap::new(),
            pin_dir: Some(dir.to_path_buf()),
            adopted: true,
            lookup_delete: true,
            staging: false,
            staged_keys: Vec::new(),
            staged_values: Vec::new(),
            staged_failed: false,
            update_batch: true,
            update_batches: 0,
            removals: Vec::new(),
            removal_keys: Vec::new(),
            delete_batch: true,
            delete_batches: 0,
            ct_tpl: match kind {
                EngineKind::Tc => pinned(dir, "dp_ct_tpl").ok(),
                EngineKind::Xdp => None,
            },
            ct_events: match kind {
                EngineKind::Tc => pinned(dir, "dp_ct_events").ok(),
                EngineKind::Xdp => None,
            },
            ct_stats: match kind {
                EngineKind::Tc => pinned(dir, "dp_ct_stats").ok(),
                EngineKind::Xdp => None,
            },
            ct_tpl_keys: BTreeSet::new(),
            ct_entries_rewritten: 0,
        };
        // Templates a daemon left that died without unwinding (SIGKILL,
        // OOM, abort: no Drop) would keep setting connections up by its
        // rules, with nobody reading the reports: cleared before the
        // books are rebuilt (review of ctbpf, MUST-FIX 2).
        e.clear_ct_templates();
        match kind {
            EngineKind::Xdp => e.reset_maps()?,
            EngineKind::Tc => e.rebuild(dir)?,
        }
        Ok(e)
    }

    /// Adopted TC engine: the installed flows and their mask slots from
    /// the maps (entries whose mask slot is inactive are stale and go),
    /// the meters, and the pinned `tc_dp` links by interface.
    fn rebuild(&mut self, dir: &Path) -> Result<(), OffloadError> {
        let entries: Vec<(FlowHashKey, FlowValue)> =
            self.flows.iter().filter_map(Result::ok).collect();
        let mut stale = Vec::new();
        let mut buckets = Vec::new();
        for (hk, v) in entries {
            if hk.pad != 0 {
                // A select flow's bucket: kept with its flow (below).
                buckets.push((hk, v.key));
                continue;
            }
            let k = FlowMapKey {
                mask_idx: hk.mask_idx,
                pad: 0,
                key: v.key,
            };
            // The entry must be where this engine's hash puts it.
            let ok = match self.masks_map.get(&k.mask_idx, 0) {
                Ok(m) => {
                    m.active != 0
                        && k.hash_key(&self.seed) == hk
                        && self.masks.adopt(k.mask_idx, &m.mask)
                }
                Err(_) => false,
            };
            if ok {
                self.installed.insert(k, hk);
            } else {
                stale.push(hk);
            }
        }
        for (hk, key) in buckets {
            let k = FlowMapKey {
                mask_idx: hk.mask_idx,
                pad: 0,
                key,
            };
            if !self.installed.contains(&k) {
                stale.push(hk);
            }
        }
        for k in stale {
            let _ = self.flows.remove(&k);
        }
        // The port slots agree with dp_ports again (a daemon that died
        // between the two writes left a slot behind).
        let ports: Vec<u32> = self.ports_map.keys().filter_map(Result::ok).collect();
        for i in ports {
            self.sync_port_slot(i, None)?;
        }
        for slot in 0..PORT_SLOTS {
            if let Ok(ps) = self.port_slots.get(&slot, 0) {
                if ps.ifindex != 0 {
                    self.sync_port_slot(ps.ifindex, None)?;
                }
            }
        }
        for slot in 0..self.cfg.max_masks {
            if self.masks.refs(slot) == 0
                && self.masks_map.get(&slot, 0).is_ok_and(|m| m.active != 0)
            {
                self.write_mask(slot, MaskEntry::default())?;
            }
        }
        self.write_n_masks()?;
        self.meter_ids = self.meters_map.keys().filter_map(Result::ok).collect();
        if let Ok(rd) = std::fs::read_dir(dir) {
            for ent in rd.flatten() {
                let name = ent.file_name().to_string_lossy().into_owned();
                let Some(ifindex) = name.strip_prefix("link-").and_then(|n| n.parse().ok()) else {
                    continue;
                };
                if let Some(l) = pin::open_link(&ent.path()) {
                    self.tc_links.insert(ifindex, l);
                }
            }
        }
        Ok(())
    }

    /// Adopted XDP engine: everything emptied (its attachments and
    /// sockets went with the daemon that made it).
    fn reset_maps(&mut self) -> Result<(), OffloadError> {
        let keys: Vec<FlowHashKey> = self.flows.keys().filter_map(Result::ok).collect();
        for k in keys {
            let _ = self.flows.remove(&k);
        }
        for slot in 0..self.cfg.max_masks {
            self.write_mask(slot, MaskEntry::default())?;
        }
        self.write_n_masks()?;
        let ports: Vec<u32> = self.ports_map.keys().filter_map(Result::ok).collect();
        for p in ports {
            let _ = self.remove_port(p);
        }
        for slot in 0..self.cfg.max_tx_ports {
            let _ = self.clear_tx_port(slot);
        }
        let rx: Vec<TunRxKey> = self.tun_rx.keys().filter_map(Result::ok).collect();
        for k in rx {
            let _ = self.tun_rx.remove(&k);
        }
        for slot in 0..TUN_SLOTS {
            let _ = self.clear_tunnel_tx(slot);
        }
        let meters: Vec<u32> = self.meters_map.keys().filter_map(Result::ok).collect();
        for m in meters {
            let _ = self.meters_map.remove(&m);
        }
        if let Some(x) = self.xsks.as_mut() {
            for q in 0..self.cfg.max_queues {
                let _ = x.unset(q);
            }
        }
        Ok(())
    }

    /// Taken over from pins rather than loaded.
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    /// `dp_ports` as found: (ifindex, entry).
    pub fn port_entries(&self) -> Vec<(u32, PortEntry)> {
        self.ports_map.iter().filter_map(Result::ok).collect()
    }

    /// TC: the filled output slots as found: (slot, ifindex).
    pub fn tx_entries(&mut self) -> Vec<(u32, u32)> {
        if self.kind != EngineKind::Tc {
            return Vec::new();
        }
        let Ok(a) = Array::<&mut MapData, super::layout::TxIf>::try_from(&mut self.tx_ports) else {
            return Vec::new();
        };
        (0..self.cfg.max_tx_ports)
            .filter_map(|s| {
                a.get(&s, 0)
                    .ok()
                    .filter(|t| t.ifindex != 0)
                    .map(|t| (s, t.ifindex))
            })
            .collect()
    }

    /// `dp_tun_rx` as found.
    pub fn tun_rx_entries(&self) -> Vec<(TunRxKey, TunRx)> {
        self.tun_rx.iter().filter_map(Result::ok).collect()
    }

    /// TC: detach `tc_dp` from every interface not in `keep` (adopted
    /// links of ports that are gone).
    pub fn release_links_except(&mut self, keep: &BTreeSet<u32>) {
        let gone: Vec<u32> = self
            .tc_links
            .keys()
            .filter(|i| !keep.contains(i))
            .copied()
            .collect();
        for i in gone {
            if let Some(l) = self.tc_links.remove(&i) {
                l.release();
            }
        }
    }

    /// An installed flow's match as userspace writes it: the key and mask
    /// of its map entry (fields the program does not see are zero, i.e.
    /// wildcarded).
    pub fn decode(
        &self,
        h: &FlowHandle,
    ) -> Option<(nicflow_flow::FlowKey, nicflow_flow::FlowMask)> {
        use nicflow_flow::{FlowKey, FLOW_WORDS};
        let mask = *self.masks.mask(h.0.mask_idx)?;
        // Fields that exist only in the userspace pipeline (registers,
        // metadata, conntrack, recirculation) are zero in every frame the
        // program sees: the encoder left them out of the kernel match, and
        // the flow's userspace match has them exact at zero.
        let ones = FlowKey::from_words(&[u64::MAX; FLOW_WORDS]);
        let mut kernel_only = ones;
        kernel_only.clear_userspace_only();
        kernel_only.recirc_id = 0;
        let mut m = mask.to_flow_key();
        for (w, (o, k)) in m
            .words_mut()
            .iter_mut()
            .zip(ones.words().iter().zip(kernel_only.words()))
        {
            *w |= o & !k;
        }
        Some((h.0.key.to_flow_key(), nicflow_flow::FlowMask(m)))
    }

    fn load_fresh(
        kind: EngineKind,
        cfg: XdpEngineConfig,
        pin_dir: Option<PathBuf>,
        obj: Option<&[u8]>,
    ) -> Result<XdpEngine, OffloadError> {
        if cfg.max_masks == 0 || cfg.max_masks > MAX_MASKS_CAP {
            return Err(OffloadError::Config(format!(
                "max_masks must be 1..={MAX_MASKS_CAP}, not {}",
                cfg.max_masks
            )));
        }
        for (what, n) in [
            ("max_flows", cfg.max_flows),
            ("max_tx_ports", cfg.max_tx_ports),
            ("max_ifaces", cfg.max_ifaces),
            ("max_queues", cfg.max_queues),
        ] {
            if n == 0 {
                return Err(OffloadError::Config(format!("{what} must be at least 1")));
            }
        }
        let mut loader = EbpfLoader::new();
        loader
            .map_max_entries("dp_flows", cfg.max_flows)
            .map_max_entries("dp_masks", cfg.max_masks)
            .map_max_entries("dp_tx_ports", cfg.max_tx_ports)
            .map_max_entries("dp_ports", cfg.max_ifaces);
        let mut ebpf = match kind {
            EngineKind::Xdp => loader
                .map_max_entries("dp_xsks", cfg.max_queues)
                .load(obj.unwrap_or(XDP_DP_OBJ))
                .map_err(|e| bpf("loading the BPF object xdp_dp.o", e))?,
            EngineKind::Tc => loader
                .map_max_entries("dp_ct_events", cfg.ct_events_bytes)
                .load(obj.unwrap_or(TC_DP_OBJ))
                .map_err(|e| bpf("loading the BPF object tc_dp.o", e))?,
        };
        let verifier = |r: Result<(), ProgramError>| match r {
            Ok(()) => Ok(()),
            Err(ProgramError::LoadError {
                io_error,
                verifier_log,
            }) => Err(OffloadError::Verifier {
                source: io_error,
                log: verifier_log.to_string(),
            }),
            Err(e) => Err(bpf("BPF_PROG_LOAD", e)),
        };
        let name = kind.prog_name();
        let missing = |n: &str| OffloadError::Config(format!("BPF object has no program `{n}`"));
        match kind {
            EngineKind::Xdp => {
                let prog: &mut Xdp = ebpf
                    .program_mut(name)
                    .ok_or_else(|| missing(name))?
                    .try_into()
                    .map_err(|e| bpf("BPF program type", e))?;
                verifier(load_retrying(|| prog.load()))?;
            }
            EngineKind::Tc => {
                let prog: &mut SchedClassifier = ebpf
                    .program_mut(name)
                    .ok_or_else(|| missing(name))?
                    .try_into()
                    .map_err(|e| bpf("BPF program type", e))?;
                verifier(load_retrying(|| prog.load()))?;
            }
        }
        // Pinned before the maps are taken out of the object.
        let pin_dir = pin_dir.filter(|d| match pin_object(&mut ebpf, kind, d) {
            Ok(()) => {
                pin::claim(d);
                true
            }
            Err(err) => {
                tracing::warn!(pins = %d.display(), "pinning the engine failed, it will not outlive the daemon: {err}");
                pin::remove(d);
                false
            }
        });
        let flows = take(&mut ebpf, "dp_flows")?;
        let masks_map = take(&mut ebpf, "dp_masks")?;
        let mut config_map: Array<MapData, ConfigEntry> = take(&mut ebpf, "dp_config")?;
        let ports_map = take(&mut ebpf, "dp_ports")?;
        let port_slots = take(&mut ebpf, "dp_port_slots")?;
        let tx_ports = ebpf
            .take_map("dp_tx_ports")
            .ok_or_else(|| OffloadError::Config("BPF object has no map `dp_tx_ports`".into()))?;
        let xsks = match kind {
            EngineKind::Xdp => Some(take(&mut ebpf, "dp_xsks")?),
            EngineKind::Tc => None,
        };
        let stats = take(&mut ebpf, "dp_stats")?;
        let tun_rx = take(&mut ebpf, "dp_tun_rx")?;
        let tun_tx = take(&mut ebpf, "dp_tun_tx")?;
        let meters_map = take(&mut ebpf, "dp_meters")?;
        let select_w = take(&mut ebpf, "dp_select_w")?;
        let select_state = Some(take(&mut ebpf, "dp_select")?);
        // An object without them (a profiling build) has no set-up in
        // the program.
        let (ct_tpl, ct_events, ct_stats) = match kind {
            EngineKind::Tc => (
                take(&mut ebpf, "dp_ct_tpl").ok(),
                take(&mut ebpf, "dp_ct_events").ok(),
                take(&mut ebpf, "dp_ct_stats").ok(),
            ),
            EngineKind::Xdp => (None, None, None),
        };
        let seed: [u64; super::layout::DP_KEY_WORDS] = rand::random();
        config_map
            .set(
                0,
                ConfigEntry {
                    n_masks: 0,
                    flags: config_flags(&cfg),
                    seed,
                },
                0,
            )
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_config)", e))?;
        Ok(XdpEngine {
            flows,
            seed,
            masks_map,
            config_map,
            ports_map,
            port_slots,
            tun_rx,
            tun_tx,
            meters_map,
            select_w,
            select_state,
            meter_ids: Default::default(),
            tx_ports,
            xsks,
            stats,
            ebpf: Some(ebpf),
            adopted_prog: None,
            kind,
            cfg,
            masks: MaskTable::new(cfg.max_masks),
            installed: Installed::default(),
            links: HashMap::new(),
            lent: HashMap::new(),
            tc_links: HashMap::new(),
            pin_dir,
            adopted: false,
            lookup_delete: true,
            staging: false,
            staged_keys: Vec::new(),
            staged_values: Vec::new(),
            staged_failed: false,
            update_batch: true,
            update_batches: 0,
            removals: Vec::new(),
            removal_keys: Vec::new(),
            delete_batch: true,
            delete_batches: 0,
            ct_tpl,
            ct_events,
            ct_stats,
            ct_tpl_keys: BTreeSet::new(),
            ct_entries_rewritten: 0,
        })
    }

    pub fn config(&self) -> &XdpEngineConfig {
        &self.cfg
    }

    /// Which attach point this engine's program is for.
    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    /// The datapath program (for `BPF_PROG_TEST_RUN`: [`prog_test_run`]).
    pub fn program_data(&self) -> Result<&aya::programs::Program, OffloadError> {
        let name = self.kind.prog_name();
        match &self.ebpf {
            Some(e) => e.program(name),
            None => self.adopted_prog.as_ref(),
        }
        .ok_or_else(|| OffloadError::Config(format!("BPF object has no program `{name}`")))
    }

    fn program_mut(
        &mut self,
        name: &'static str,
    ) -> Result<&mut aya::programs::Program, OffloadError> {
        match &mut self.ebpf {
            Some(e) => e.program_mut(name),
            None => self.adopted_prog.as_mut(),
        }
        .ok_or_else(|| OffloadError::Config(format!("BPF object has no program `{name}`")))
    }

    fn xdp_prog_mut(&mut self) -> Result<&mut Xdp, OffloadError> {
        if self.kind != EngineKind::Xdp {
            return Err(OffloadError::Config("not an XDP engine".into()));
        }
        self.program_mut("xdp_dp")?
            .try_into()
            .map_err(|e| bpf("BPF program type", e))
    }

    fn tc_prog_mut(&mut self, name: &'static str) -> Result<&mut SchedClassifier, OffloadError> {
        if self.kind != EngineKind::Tc {
            return Err(OffloadError::Config("not a TC engine".into()));
        }
        self.program_mut(name)?
            .try_into()
            .map_err(|e| bpf("BPF program type", e))
    }

    /// Instructions the verifier processed (`bpf_prog_info.verified_insns`,
    /// Linux 5.16+).
    pub fn verified_insns(&self) -> Option<u32> {
        let info = match self.program_data().ok()? {
            aya::programs::Program::Xdp(p) => p.info().ok()?,
            aya::programs::Program::SchedClassifier(p) => p.info().ok()?,
            _ => return None,
        };
        info.verified_instruction_count()
    }

    /// Attach to `ifindex`. The interface also needs [`Self::set_port`] or
    /// every frame goes to userspace.
    pub fn attach(&mut self, ifindex: u32, mode: AttachMode) -> Result<(), OffloadError> {
        let m = match mode {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Generic => XdpMode::Skb,
        };
        let prog = self.xdp_prog_mut()?;
        let link = prog
            .attach_to_if_index(ifindex, m)
            .map_err(|e| bpf("attaching xdp_dp", e))?;
        self.links.insert(ifindex, link);
        Ok(())
    }

    /// Detach from `ifindex` (a no-op if not attached).
    pub fn detach(&mut self, ifindex: u32) -> Result<(), OffloadError> {
        let Some(link) = self.links.remove(&ifindex) else {
            return Ok(());
        };
        let prog = self.xdp_prog_mut()?;
        prog.detach(link).map_err(|e| bpf("detaching xdp_dp", e))
    }

    /// Run on an XDP attachment someone else holds (an AF_XDP port's
    /// link running its `xsk_redirect`, by kernel ids): the link is
    /// switched to `xdp_dp` atomically (`BPF_LINK_UPDATE`, only if it still
    /// runs the port's program), so no frame on the interface is ever
    /// without a program. The port keeps the link; give the port its
    /// program back with [`Self::release_link`]. On error the link still
    /// runs the port's program.
    pub fn adopt_link(&mut self, ifindex: u32, link: XdpLinkRef) -> Result<(), OffloadError> {
        let prog = self.xdp_prog_mut()?;
        let fd = prog.fd().map_err(|e| bpf("xdp_dp descriptor", e))?;
        attach::xdp_link_update(
            link.link_id,
            ProgRef::Fd(fd.as_fd()),
            ProgRef::Id(link.prog_id),
        )
        .map_err(|e| bpf("switching the port's XDP link to xdp_dp", e))?;
        self.lent.insert(ifindex, link);
        Ok(())
    }

    /// Switch the link of `ifindex` back to its owner's program (if it
    /// still runs `xdp_dp`). A link that is gone (its port closed) needs
    /// nothing. Returns whether this engine ran on `ifindex`.
    pub fn release_link(&mut self, ifindex: u32) -> Result<bool, OffloadError> {
        let Some(link) = self.lent.remove(&ifindex) else {
            return Ok(false);
        };
        let prog = self.xdp_prog_mut()?;
        let fd = prog.fd().map_err(|e| bpf("xdp_dp descriptor", e))?;
        match attach::xdp_link_update(
            link.link_id,
            ProgRef::Id(link.prog_id),
            ProgRef::Fd(fd.as_fd()),
        ) {
            Ok(()) => Ok(true),
            Err(e)
                if e.op == "BPF_LINK_GET_FD_BY_ID"
                    && e.source.kind() == std::io::ErrorKind::NotFound =>
            {
                tracing::debug!(ifindex, "the port's XDP link is gone already");
                Ok(true)
            }
            Err(e) => Err(bpf("restoring the port's XDP program", e)),
        }
    }

    /// TC: attach `tc_dp` at ingress of `ifname`, first on the hook (a tcx
    /// link on Linux >= 6.6, which goes away with this engine; clsact +
    /// cls_bpf before). Frames it does not handle go on to the next
    /// program (the port's own `tc_upcall`).
    pub fn attach_tc(&mut self, ifindex: u32, ifname: &str) -> Result<(), OffloadError> {
        if self.tc_links.contains_key(&ifindex) {
            // Adopted: still attached since the previous daemon.
            return Ok(());
        }
        let pin = self
            .pin_dir
            .as_ref()
            .map(|d| d.join(format!("link-{ifindex}")));
        let prog = self.tc_prog_mut("tc_dp")?;
        let link =
            pin::attach_tc(prog, ifname, true, pin.as_deref()).map_err(|e| OffloadError::Bpf {
                op: e.op,
                source: e.source,
            })?;
        self.tc_links.insert(ifindex, link);
        Ok(())
    }

    /// TC: detach `tc_dp` from `ifindex` (a no-op if not attached).
    pub fn detach_tc(&mut self, ifindex: u32) -> Result<(), OffloadError> {
        if let Some(l) = self.tc_links.remove(&ifindex) {
            l.release();
        }
        Ok(())
    }

    /// TC: frames received on `ifindex` carry port number `in_port`; misses
    /// are redirected to `upcall_ifindex` (0: left to the host stack).
    pub fn set_port_upcall(
        &mut self,
        ifindex: u32,
        in_port: u32,
        upcall_ifindex: u32,
    ) -> Result<(), OffloadError> {
        let e = PortEntry {
            in_port,
            upcall_ifindex,
            ..PortEntry::default()
        };
        self.write_port(ifindex, e)
    }

    /// Remove the XSKMAP entry `slot` (a closed socket removes itself).
    pub fn unregister_xsk(&mut self, slot: u32) -> Result<(), OffloadError> {
        let Some(xsks) = self.xsks.as_mut() else {
            return Ok(());
        };
        match xsks.unset(slot) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(bpf("BPF_MAP_DELETE_ELEM(dp_xsks)", e)),
        }
    }

    /// Frames received on `ifindex` carry nicflow port number `in_port`
    /// in their key; misses go to the socket at `dp_xsks[rx queue]`.
    pub fn set_port(&mut self, ifindex: u32, in_port: u32) -> Result<(), OffloadError> {
        self.set_port_xsk(ifindex, in_port, 0)
    }

    /// As [`Self::set_port`], misses on rx queue `q` going to the socket
    /// at `dp_xsks[xsk_base + q]`: how several interfaces, each receiving
    /// on queue 0, share one program instance.
    pub fn set_port_xsk(
        &mut self,
        ifindex: u32,
        in_port: u32,
        xsk_base: u32,
    ) -> Result<(), OffloadError> {
        let e = PortEntry {
            in_port,
            xsk_base,
            ..PortEntry::default()
        };
        self.write_port(ifindex, e)
    }

    /// `ifindex` is a tunnel underlay with MAC `mac`: frames for a
    /// [`Self::set_tunnel_rx`] endpoint are decapsulated and looked up as
    /// received on its tunnel port; everything else goes to the socket at
    /// `dp_xsks[xsk_base + q]` (the underlay's userspace side; XDP) or
    /// to the upcall device `upcall_ifindex` (TC; 0 under XDP).
    pub fn set_underlay(
        &mut self,
        ifindex: u32,
        xsk_base: u32,
        mac: [u8; 6],
        mtu: u16,
        upcall_ifindex: u32,
    ) -> Result<(), OffloadError> {
        let e = PortEntry {
            in_port: 0,
            xsk_base,
            flags: PORT_UNDERLAY,
            mac,
            mtu,
            upcall_ifindex,
        };
        self.write_port(ifindex, e)
    }

    /// Tunnel packets matching `key` enter on tunnel port `rx.in_port`.
    pub fn set_tunnel_rx(&mut self, key: TunRxKey, rx: TunRx) -> Result<(), OffloadError> {
        self.tun_rx
            .insert(key, rx, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_tun_rx)", e))
    }

    pub fn remove_tunnel_rx(&mut self, key: &TunRxKey) -> Result<(), OffloadError> {
        match self.tun_rx.remove(key) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(bpf("BPF_MAP_DELETE_ELEM(dp_tun_rx)", e)),
        }
    }

    /// The outer header of tunnel slot `slot` (`valid == 0`: frames of
    /// flows through it go to userspace). Written under the entry's lock
    /// (`BPF_F_LOCK`), which the program takes to copy it: a frame gets
    /// the old header or the new one, whole.
    pub fn set_tunnel_tx(&mut self, slot: u32, tx: TunTx) -> Result<(), OffloadError> {
        const BPF_F_LOCK: u64 = 4;
        self.tun_tx
            .set(slot, tx, BPF_F_LOCK)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_tun_tx)", e))
    }

    /// Tunnel slot `slot`'s header entry as the kernel has it.
    pub fn tunnel_tx(&self, slot: u32) -> Option<TunTx> {
        self.tun_tx.get(&slot, 0).ok()
    }

    /// No header for tunnel slot `slot`: frames of flows through it go to
    /// userspace.
    pub fn clear_tunnel_tx(&mut self, slot: u32) -> Result<(), OffloadError> {
        self.set_tunnel_tx(slot, TunTx::default())
    }

    /// Whether meter `id` is in `dp_meters`.
    pub fn has_meter(&self, id: u32) -> bool {
        self.meter_ids.contains(&id)
    }

    /// Write meter `id`'s configuration into `dp_meters` under the entry's
    /// lock: full buckets, as a new or modified meter starts in userspace;
    /// the counters of an entry already there are kept (`mod-meter`).
    /// A full map is `NotOffloadable { reason: "meter-map-full" }`.
    pub fn set_meter(&mut self, entry: layout::MeterEntry, id: u32) -> Result<(), OffloadError> {
        const BPF_F_LOCK: u64 = 4;
        let mut v = entry;
        if self.meter_ids.contains(&id) {
            if let Ok(old) = self.meters_map.get(&id, BPF_F_LOCK) {
                v.packets_in = old.packets_in;
                v.bytes_in = old.bytes_in;
                for (b, o) in v.bands.iter_mut().zip(old.bands.iter()) {
                    b.packets = o.packets;
                    b.bytes = o.bytes;
                }
            }
        }
        match self.meters_map.insert(id, v, BPF_F_LOCK) {
            Ok(()) => {
                self.meter_ids.insert(id);
                Ok(())
            }
            Err(e) if errno_of(&e) == Some(libc::E2BIG) => Err(OffloadError::NotOffloadable {
                reason: "meter-map-full",
            }),
            Err(e) => Err(bpf("BPF_MAP_UPDATE_ELEM(dp_meters)", e)),
        }
    }

    /// Take meter `id` out of `dp_meters` (flows still naming it pass
    /// their frames unmetered until they are removed, as in userspace).
    pub fn remove_meter(&mut self, id: u32) -> Result<(), OffloadError> {
        if !self.meter_ids.remove(&id) {
            return Ok(());
        }
        match self.meters_map.remove(&id) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(bpf("BPF_MAP_DELETE_ELEM(dp_meters)", e)),
        }
    }

    /// Meter `id`'s kernel counters, read under its lock.
    pub fn meter_entry(&self, id: u32) -> Option<layout::MeterEntry> {
        const BPF_F_LOCK: u64 = 4;
        if !self.meter_ids.contains(&id) {
            return None;
        }
        self.meters_map.get(&id, BPF_F_LOCK).ok()
    }

    /// Write the weights select slot `slot` chooses by (wrr: the buckets'
    /// own; splb: what the daemon measured), by bucket position.
    pub fn set_select_weights(
        &mut self,
        slot: u32,
        w: layout::SelectWeights,
    ) -> Result<(), OffloadError> {
        if slot >= layout::SELECT_SLOTS {
            return Err(OffloadError::NotOffloadable {
                reason: "select:slots-full",
            });
        }
        self.select_w
            .set(slot, w, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_select_w)", e))
    }

    /// Zero select slot `slot`'s rotation on every CPU: a slot freed by one
    /// group and given to another must not carry the old group's smooth
    /// WRR values (they would skew the new group's first rounds).
    pub fn reset_select_state(&mut self, slot: u32) -> Result<(), OffloadError> {
        let Some(m) = self.select_state.as_mut() else {
            return Ok(());
        };
        let n = aya::util::nr_cpus()
            .map_err(|(what, e)| OffloadError::Config(format!("{what}: {e}")))?;
        let zeros = aya::maps::PerCpuValues::try_from(vec![layout::SelectState::default(); n])
            .map_err(|e| OffloadError::Config(format!("dp_select values: {e}")))?;
        m.set(slot, zeros, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_select)", e))
    }

    /// Select slot `slot`'s rotation as each CPU left it.
    pub fn select_state(&self, slot: u32) -> Vec<layout::SelectState> {
        self.select_state
            .as_ref()
            .and_then(|m| m.get(&slot, 0).ok())
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The weights of select slot `slot`.
    pub fn select_weights(&self, slot: u32) -> Option<layout::SelectWeights> {
        self.select_w.get(&slot, 0).ok()
    }

    /// Slots of `dp_tun_tx`.
    pub fn tunnel_slots(&self) -> u32 {
        TUN_SLOTS
    }

    pub fn remove_port(&mut self, ifindex: u32) -> Result<(), OffloadError> {
        // The slot first: until dp_ports loses the entry, a frame that
        // misses the slot still finds it there.
        self.sync_port_slot(ifindex, Some(ifindex))?;
        match self.ports_map.remove(&ifindex) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(bpf("BPF_MAP_DELETE_ELEM(dp_ports)", e)),
        }
    }

    /// `dp_ports[ifindex] = e`, then its direct-mapped slot.
    fn write_port(&mut self, ifindex: u32, e: PortEntry) -> Result<(), OffloadError> {
        self.ports_map
            .insert(ifindex, e, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_ports)", e))?;
        self.sync_port_slot(ifindex, None)
    }

    /// Make the `dp_port_slots` slot of `ifindex` agree with `dp_ports`
    /// (`leaving`: a port about to be removed, not a candidate): its
    /// owner keeps it while it is a port, else the port with the lowest
    /// ifindex that maps there takes it, else it is emptied. A change is
    /// three writes (owner 0 with the old entry, owner 0 with the new
    /// entry, the new owner): a frame reading the slot meanwhile sees an
    /// owner that is not its ifindex and goes to `dp_ports`, never half of
    /// another entry as its own.
    fn sync_port_slot(&mut self, ifindex: u32, leaving: Option<u32>) -> Result<(), OffloadError> {
        let slot = ifindex & (PORT_SLOTS - 1);
        let err = |e| bpf("BPF_MAP_UPDATE_ELEM(dp_port_slots)", e);
        let old = self
            .port_slots
            .get(&slot, 0)
            .map_err(|e| bpf("BPF_MAP_LOOKUP_ELEM(dp_port_slots)", e))?;
        let entry = |e: &Self, i: u32| -> Option<PortEntry> {
            (Some(i) != leaving)
                .then(|| e.ports_map.get(&i, 0).ok())
                .flatten()
        };
        let owner = if old.ifindex != 0 && entry(self, old.ifindex).is_some() {
            old.ifindex
        } else {
            let mut c: Vec<u32> = self
                .ports_map
                .keys()
                .filter_map(Result::ok)
                .filter(|i| i & (PORT_SLOTS - 1) == slot && Some(*i) != leaving)
                .collect();
            c.sort_unstable();
            c.first().copied().unwrap_or(0)
        };
        let port = if owner == 0 {
            PortEntry::default()
        } else {
            entry(self, owner).unwrap_or_default()
        };
        if owner == old.ifindex && port == old.port {
            return Ok(());
        }
        // Every write a new generation: a frame that copied the entry
        // across a write sees (owner, gen) change and takes dp_ports'.
        let mut gen = old.gen;
        let mut write = |e: &mut Self, ifindex: u32, port: PortEntry| {
            gen = gen.wrapping_add(1);
            e.port_slots
                .set(slot, PortSlot { ifindex, gen, port }, 0)
                .map_err(err)
        };
        if old.ifindex != 0 {
            write(self, 0, old.port)?;
        }
        write(self, 0, port)?;
        if owner != 0 {
            write(self, owner, port)?;
        }
        Ok(())
    }

    /// Output slot `slot` transmits on `ifindex` (XDP: devmap entry; TC:
    /// `bpf_redirect` to its egress).
    pub fn set_tx_port(&mut self, slot: u32, ifindex: u32) -> Result<(), OffloadError> {
        self.set_tx_port_flags(slot, ifindex, 0)
    }

    /// As [`Self::set_tx_port`]; TC only: `flags` [`TX_PEER`](super::layout::TX_PEER)
    /// for a veth whose peer is in another namespace (`bpf_redirect_peer`).
    pub fn set_tx_port_flags(
        &mut self,
        slot: u32,
        ifindex: u32,
        flags: u32,
    ) -> Result<(), OffloadError> {
        if self.kind == EngineKind::Tc {
            let mut a: Array<&mut MapData, super::layout::TxIf> =
                Array::try_from(&mut self.tx_ports).map_err(|e| bpf("dp_tx_ports", e))?;
            return a
                .set(slot, super::layout::TxIf { ifindex, flags }, 0)
                .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_tx_ports)", e));
        }
        let mut dm = DevMap::try_from(&mut self.tx_ports).map_err(|e| bpf("DEVMAP", e))?;
        dm.set(slot, ifindex, None, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_tx_ports)", e))
    }

    /// Empty output slot `slot`: flows outputting to it go to userspace
    /// (pre-check), they are not dropped.
    pub fn clear_tx_port(&mut self, slot: u32) -> Result<(), OffloadError> {
        if self.kind == EngineKind::Tc {
            return self.set_tx_port_flags(slot, 0, 0);
        }
        let fd = match &self.tx_ports {
            Map::DevMap(md) => md.fd().as_fd().as_raw_fd(),
            _ => return Err(OffloadError::Config("dp_tx_ports is not a DEVMAP".into())),
        };
        match map_delete_u32(fd, slot) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(bpf("BPF_MAP_DELETE_ELEM(dp_tx_ports)", e)),
        }
    }

    /// Register an AF_XDP socket for rx queue `queue`: misses on that queue
    /// go to it (without one they get XDP_PASS).
    pub fn register_xsk(&mut self, queue: u32, fd: RawFd) -> Result<(), OffloadError> {
        self.xsks
            .as_mut()
            .ok_or_else(|| OffloadError::Config("a TC engine has no AF_XDP sockets".into()))?
            .set(queue, fd, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_xsks)", e))
    }

    fn write_mask(&mut self, slot: u32, entry: MaskEntry) -> Result<(), OffloadError> {
        self.masks_map
            .set(slot, entry, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_masks)", e))
    }

    fn write_n_masks(&mut self) -> Result<(), OffloadError> {
        let n = self.masks.n_masks();
        self.config_map
            .set(
                0,
                ConfigEntry {
                    n_masks: n,
                    flags: config_flags(&self.cfg),
                    seed: self.seed,
                },
                0,
            )
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_config)", e))
    }

    /// Drop a reference on `slot`, deactivating the slot if it was the last.
    fn release_mask(&mut self, slot: u32) -> Result<(), OffloadError> {
        if self.masks.release(slot) {
            self.write_mask(slot, MaskEntry::default())?;
            self.write_n_masks()?;
        }
        Ok(())
    }

    /// Install an encoded flow. A flow with the same mask and masked key
    /// is replaced (its counters kept). Full maps are
    /// `NotOffloadable { reason: "mask-table-full" | "flow-map-full" }`, and
    /// `"flow-hash-collision"` when another flow under the same mask has the
    /// same key hash:
    /// nothing is installed and the flow keeps being handled in userspace.
    pub fn install(&mut self, flow: &EncodedFlow) -> Result<FlowHandle, OffloadError> {
        let slot = self.hold_mask(&flow.mask)?;
        let key = FlowMapKey {
            mask_idx: slot,
            pad: 0,
            key: flow.key.masked(&flow.mask),
        };
        let handle = FlowHandle(key);
        if self.installed.contains(&key) {
            // The flow already holds a mask reference.
            self.masks.release(slot);
            // It may be staged: written first, then modified in place.
            self.write_staged()?;
            self.modify(&handle, flow)?;
            return Ok(handle);
        }
        let mut value = flow.value;
        value.key = key.key;
        let hk = key.hash_key(&self.seed);
        if let Some(i) = self.removals.iter().position(|(k, _)| *k == hk) {
            // Removed and queued for the batched delete, installed again
            // before it (outside the contract, see `queue_removal`): the
            // old entry goes now, so the commit cannot take the new one,
            // and with it off the queue its mask reference (the same
            // slot: the hash key holds it; the install holds its own).
            // Taken off only once deleted: on an error it stays queued,
            // for the commit to delete or keep as installed.
            if let Err(e) = self.delete_entry(&hk) {
                self.release_mask(slot)?;
                return Err(bpf("BPF_MAP_DELETE_ELEM(dp_flows)", e));
            }
            let (_, old) = self.removals.swap_remove(i);
            self.release_mask(old.mask_idx)?;
        }
        if self.installed.holds_hash(&hk) {
            // Another flow under this mask has the same 64-bit hash. Checked
            // here for both paths: `BPF_NOEXIST` below cannot see a staged
            // flow's entry (not in the map until the commit), and a staged
            // install has no such flag at all.
            self.release_mask(slot)?;
            return Err(OffloadError::NotOffloadable {
                reason: "flow-hash-collision",
            });
        }
        if self.staging && flow.buckets.is_empty() {
            self.staged_keys.push(hk);
            self.staged_values.push(value);
            self.installed.insert(key, hk);
            return Ok(handle);
        }
        if let Err(e) = self.write_buckets(&key, flow) {
            self.remove_buckets(&key, 0);
            self.release_mask(slot)?;
            return Err(e);
        }
        match self.flows.insert(hk, value, BPF_NOEXIST) {
            Ok(()) => {
                self.installed.insert(key, hk);
                Ok(handle)
            }
            Err(e) => {
                if errno_of(&e) == Some(libc::EEXIST)
                    && self
                        .flows
                        .get(&key.hash_key(&self.seed), 0)
                        .is_ok_and(|v| v.key == key.key)
                {
                    // This very flow, left in the map (a removal that
                    // failed half way): take it back, with the mask
                    // reference acquired above.
                    self.installed.insert(key, hk);
                    self.modify(&handle, flow)?;
                    return Ok(handle);
                }
                self.remove_buckets(&key, 0);
                self.release_mask(slot)?;
                if errno_of(&e) == Some(libc::E2BIG) {
                    Err(OffloadError::NotOffloadable {
                        reason: "flow-map-full",
                    })
                } else if errno_of(&e) == Some(libc::EEXIST) {
                    // Another masked key under this mask has the same
                    // 64-bit hash (about 2^-64 per pair; the seeds are
                    // secret): this one stays in userspace.
                    Err(OffloadError::NotOffloadable {
                        reason: "flow-hash-collision",
                    })
                } else {
                    Err(bpf("BPF_MAP_UPDATE_ELEM(dp_flows)", e))
                }
            }
        }
    }

    /// TC: whether the program sets connections up from templates.
    pub fn ct_templates(&self) -> bool {
        self.ct_tpl.is_some() && self.ct_events.is_some()
    }

    /// Write the set-up template of `key` (see `layout::CtTpl`).
    pub fn set_ct_template(&mut self, key: CtTplKey, tpl: &CtTpl) -> Result<(), OffloadError> {
        let m = self
            .ct_tpl
            .as_mut()
            .ok_or_else(|| OffloadError::Config("no set-up templates in this engine".into()))?;
        m.insert(key, *tpl, 0)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_ct_tpl)", e))?;
        self.ct_tpl_keys.insert(key);
        Ok(())
    }

    /// Remove every set-up template in the map, this daemon's or not.
    fn clear_ct_templates(&mut self) {
        self.ct_tpl_keys.clear();
        let Some(m) = self.ct_tpl.as_mut() else {
            return;
        };
        let keys: Vec<CtTplKey> = m.keys().filter_map(Result::ok).collect();
        for k in keys {
            if let Err(e) = m.remove(&k) {
                if errno_of(&e) != Some(libc::ENOENT) {
                    tracing::warn!("clearing a set-up template failed: {e}");
                }
            }
        }
    }

    /// The set-up templates in the map (tests: none left after adoption).
    pub fn ct_template_count(&self) -> usize {
        self.ct_tpl.as_ref().map_or(0, |m| m.keys().count())
    }

    /// Remove the set-up template of `key` (none there: nothing to do).
    pub fn remove_ct_template(&mut self, key: &CtTplKey) -> Result<(), OffloadError> {
        self.ct_tpl_keys.remove(key);
        let Some(m) = self.ct_tpl.as_mut() else {
            return Ok(());
        };
        match m.remove(key) {
            Ok(()) => Ok(()),
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(bpf("BPF_MAP_DELETE_ELEM(dp_ct_tpl)", e)),
        }
    }

    /// A reference on the mask slot of `mask` (written to the map if it
    /// is new): each installed flow holds one, and so does a set-up
    /// template, since the program inserts entries under it.
    pub fn hold_mask(&mut self, mask: &DpKey) -> Result<u32, OffloadError> {
        let acq = self
            .masks
            .acquire(mask)
            .ok_or(OffloadError::NotOffloadable {
                reason: "mask-table-full",
            })?;
        if acq.new {
            let entry = MaskEntry {
                active: 1,
                pad: 0,
                mask: *mask,
            };
            if let Err(e) = self
                .write_mask(acq.slot, entry)
                .and_then(|()| self.write_n_masks())
            {
                self.masks.release(acq.slot);
                return Err(e);
            }
        }
        Ok(acq.slot)
    }

    /// Let go of a [`Self::hold_mask`] reference.
    pub fn drop_mask(&mut self, slot: u32) -> Result<(), OffloadError> {
        self.release_mask(slot)
    }

    /// The ring buffer's descriptor, readable when the program reported a
    /// set-up (for the daemon's poll).
    pub fn ct_events_fd(&self) -> Option<RawFd> {
        self.ct_events.as_ref().map(|r| r.as_raw_fd())
    }

    /// The set-ups the program reported since the last call, oldest
    /// first (at most `max`).
    pub fn drain_ct_events(&mut self, out: &mut Vec<CtEvent>, max: usize) {
        let Some(r) = self.ct_events.as_mut() else {
            return;
        };
        while out.len() < max {
            let Some(item) = r.next() else {
                break;
            };
            if let Some(ev) = CtEvent::from_bytes(&item) {
                out.push(ev);
            }
        }
    }

    /// Take an entry the program inserted (its `dp_flows` key `hk`) into
    /// the books, as if [`Self::install`] had written `flow`: the same
    /// mask slot and hash, or an error (nothing taken).
    pub fn adopt_ct_entry(
        &mut self,
        flow: &EncodedFlow,
        hk: &FlowHashKey,
    ) -> Result<FlowHandle, OffloadError> {
        let mismatch = OffloadError::NotOffloadable {
            reason: "ct:bpf-entry-mismatch",
        };
        let acq = self
            .masks
            .acquire(&flow.mask)
            .ok_or(OffloadError::NotOffloadable {
                reason: "mask-table-full",
            })?;
        // A new slot was never written: released from the table alone.
        if acq.new || acq.slot != hk.mask_idx {
            self.masks.release(acq.slot);
            return Err(mismatch);
        }
        let key = FlowMapKey {
            mask_idx: acq.slot,
            pad: 0,
            key: flow.key.masked(&flow.mask),
        };
        if key.hash_key(&self.seed) != *hk
            || self.installed.contains(&key)
            || self.installed.holds_hash(hk)
        {
            self.release_mask(acq.slot)?;
            return Err(mismatch);
        }
        // The key is the program's; the value is the template's, written
        // when the template was. A rule change between the program's
        // insert and this adoption (the template retired, the flows'
        // actions replaced with the mask kept) leaves the entry with the
        // old actions while the books get the composed ones: the value is
        // compared and, if it differs, overwritten (counters kept), so
        // the connection never runs on actions the books do not hold.
        let stored = match self.flows.get(hk, 0) {
            Ok(v) => v,
            Err(_) => {
                self.release_mask(acq.slot)?;
                return Err(mismatch);
            }
        };
        if stale_entry_value(&stored, &flow.value) {
            let mut v = flow.value;
            v.key = key.key;
            v.packets = stored.packets;
            v.bytes = stored.bytes;
            v.used_ns = stored.used_ns;
            v.tcp_flags = stored.tcp_flags;
            if let Err(e) = self.flows.insert(*hk, v, BPF_EXIST) {
                self.release_mask(acq.slot)?;
                tracing::warn!("rewriting a set-up entry failed: {e}");
                return Err(mismatch);
            }
            self.ct_entries_rewritten += 1;
        }
        self.installed.insert(key, *hk);
        Ok(FlowHandle(key))
    }

    /// Set-up entries whose value [`Self::adopt_ct_entry`] found differing
    /// from the composed one and rewrote (a rule change raced a report).
    pub fn ct_entries_rewritten(&self) -> u64 {
        self.ct_entries_rewritten
    }

    /// Delete an entry the program inserted that the daemon does not take
    /// (never one it installed: those go with [`Self::remove`]).
    pub fn delete_ct_entry(&mut self, hk: &FlowHashKey) {
        if self.installed.holds_hash(hk) {
            return;
        }
        if let Err(e) = self.delete_entry(hk) {
            if errno_of(&e) != Some(libc::ENOENT) {
                tracing::warn!("deleting a set-up entry failed: {e}");
            }
        }
    }

    /// The program's set-up counters (`layout::ct_stat`), summed over CPUs.
    pub fn ct_stats(&self) -> [u64; ct_stat::N as usize] {
        let mut r = [0; ct_stat::N as usize];
        if let Some(m) = self.ct_stats.as_ref() {
            for (i, n) in r.iter_mut().enumerate() {
                *n = m.get(&(i as u32), 0).map(|v| v.iter().sum()).unwrap_or(0);
            }
        }
        r
    }

    /// Replace an installed flow's actions, keeping its counters (hits
    /// between reading them and writing the new value are not counted).
    pub fn modify(&mut self, handle: &FlowHandle, flow: &EncodedFlow) -> Result<(), OffloadError> {
        if !self.installed.contains(&handle.0) {
            return Err(OffloadError::NotFound);
        }
        let hk = self.hash_key(handle)?;
        if self.staged_keys.contains(&hk) {
            // Staged, not in the map yet: the staged entries are written
            // first (as a second install of a staged flow does), so the
            // modification has an entry to replace.
            self.write_staged()?;
        }
        let old = self
            .flows
            .get(&hk, 0)
            .map_err(|e| bpf("BPF_MAP_LOOKUP_ELEM(dp_flows)", e))?;
        let mut v = flow.value;
        v.key = handle.0.key;
        v.packets = old.packets;
        v.bytes = old.bytes;
        v.used_ns = old.used_ns;
        v.tcp_flags = old.tcp_flags;
        // Buckets first, so the select flow never names a missing one.
        // Buckets that go leave their counts to the flow's own entry.
        for b in flow.buckets.len()..layout::SELECT_MAX {
            let mut bk = hk;
            bk.pad = 1 + b as u32;
            if let Ok(o) = self.flows.get(&bk, 0) {
                v.packets += o.packets;
                v.bytes += o.bytes;
                v.used_ns = v.used_ns.max(o.used_ns);
                v.tcp_flags |= o.tcp_flags;
            }
        }
        self.write_buckets(&handle.0, flow)?;
        self.remove_buckets(&handle.0, flow.buckets.len());
        self.flows
            .insert(hk, v, BPF_EXIST)
            .map_err(|e| bpf("BPF_MAP_UPDATE_ELEM(dp_flows)", e))
    }

    /// Write a select flow's bucket flows (`EncodedFlow::buckets`) under
    /// its key with `pad` = 1 + bucket.
    fn write_buckets(&mut self, key: &FlowMapKey, flow: &EncodedFlow) -> Result<(), OffloadError> {
        for (b, v) in flow.buckets.iter().enumerate() {
            let mut hk = key.hash_key(&self.seed);
            hk.pad = 1 + b as u32;
            let mut v = *v;
            v.key = key.key;
            // A bucket rewritten in place keeps what it counted.
            if let Ok(o) = self.flows.get(&hk, 0) {
                v.packets = o.packets;
                v.bytes = o.bytes;
                v.used_ns = o.used_ns;
                v.tcp_flags = o.tcp_flags;
            }
            if let Err(e) = self.flows.insert(hk, v, 0) {
                return Err(if errno_of(&e) == Some(libc::E2BIG) {
                    OffloadError::NotOffloadable {
                        reason: "flow-map-full",
                    }
                } else {
                    bpf("BPF_MAP_UPDATE_ELEM(dp_flows)", e)
                });
            }
        }
        Ok(())
    }

    /// Remove the bucket flows `from..` of the flow with `key` (those
    /// there are).
    fn remove_buckets(&mut self, key: &FlowMapKey, from: usize) {
        for b in from..layout::SELECT_MAX {
            let mut hk = key.hash_key(&self.seed);
            hk.pad = 1 + b as u32;
            let _ = self.flows.remove(&hk);
        }
    }

    /// Remove a flow; returns its final counters.
    pub fn remove(&mut self, handle: &FlowHandle) -> Result<FlowCounters, OffloadError> {
        let hk = self.hash_key(handle)?;
        if !self.installed.remove(&handle.0, &hk) {
            return Err(OffloadError::NotFound);
        }
        if let Some(i) = self.staged_keys.iter().position(|k| *k == hk) {
            // Staged, not written yet: nothing in the map, nothing counted.
            self.staged_keys.swap_remove(i);
            self.staged_values.swap_remove(i);
            self.release_mask(handle.0.mask_idx)?;
            return Ok(FlowCounters::default());
        }
        let taken = if self.lookup_delete {
            self.take_flow(&hk)
        } else {
            Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP))
        };
        match taken {
            // Read and deleted in one system call (set-up connections
            // remove three entries each, tens of thousands a second): its
            // last counters are exact, no frame counted between a read
            // and the delete.
            Ok(Some(v)) => {
                let (now_ns, now) = (monotonic_ns(), Instant::now());
                let mut last = FlowCounters::of(&v, now_ns, now);
                if v.flags & layout::flag::SELECT != 0 {
                    // Its frames are counted by the bucket that ran them.
                    for b in 0..layout::SELECT_MAX {
                        let mut bk = hk;
                        bk.pad = 1 + b as u32;
                        if let Ok(bv) = self.flows.get(&bk, 0) {
                            last.merge(FlowCounters::of(&bv, now_ns, now));
                        }
                    }
                    self.remove_buckets(&handle.0, 0);
                }
                self.release_mask(handle.0.mask_idx)?;
                return Ok(last);
            }
            // Already gone from the map.
            Ok(None) => {
                self.release_mask(handle.0.mask_idx)?;
                return Ok(FlowCounters::default());
            }
            // An older kernel: read, then delete (said once).
            Err(e) if refuses_command(&e) => {
                if self.lookup_delete {
                    self.lookup_delete = false;
                    tracing::info!(
                        error = %e,
                        "BPF_MAP_LOOKUP_AND_DELETE_ELEM on dp_flows refused: flows are read, then deleted"
                    );
                }
            }
            Err(e) => {
                self.installed.insert(handle.0, hk);
                return Err(bpf("BPF_MAP_LOOKUP_AND_DELETE_ELEM(dp_flows)", e));
            }
        }
        // One read of the value for both the flag and the counters (a
        // system call each): set-up connections remove three entries
        // each, tens of thousands a second.
        let v = self.value(handle).ok();
        let select = v.is_some_and(|v| v.flags & layout::flag::SELECT != 0);
        let last = match v {
            Some(_) if select => self.counters(handle).unwrap_or_default(),
            Some(v) => FlowCounters::of(&v, monotonic_ns(), Instant::now()),
            None => FlowCounters::default(),
        };
        match self.delete_entry(&hk) {
            Ok(()) => {
                if select {
                    self.remove_buckets(&handle.0, 0);
                }
            }
            Err(e) => {
                // Still in the map, still holding its mask: still
                // installed (a retry removes it, or an install modifies it).
                self.installed.insert(handle.0, hk);
                return Err(bpf("BPF_MAP_DELETE_ELEM(dp_flows)", e));
            }
        }
        self.release_mask(handle.0.mask_idx)?;
        Ok(last)
    }

    /// Remove a flow without touching the map: its entry is deleted, and
    /// its mask slot released, by the next [`Self::commit_removals`] (one
    /// `BPF_MAP_DELETE_BATCH` for every flow queued). For flows whose
    /// counters the caller has just read: frames counted between that
    /// read and the commit are lost with the entry. `Ok(false)`: not
    /// queued, the caller removes it with [`Self::remove`] (a staged flow,
    /// not in the map yet). The caller must not queue a flow with buckets
    /// (a per-packet select flow: its buckets' entries would stay).
    /// Nothing may install the flow again before the commit (an install
    /// that finds it queued deletes the old entry first).
    pub fn queue_removal(&mut self, handle: &FlowHandle) -> Result<bool, OffloadError> {
        let hk = self.hash_key(handle)?;
        if self.staged_keys.contains(&hk) {
            return Ok(false);
        }
        if !self.installed.remove(&handle.0, &hk) {
            return Err(OffloadError::NotFound);
        }
        self.removals.push((hk, handle.0));
        Ok(true)
    }

    /// Delete the entries [`Self::queue_removal`] queued: one
    /// `BPF_MAP_DELETE_BATCH` for all of them (the kernel stops at the
    /// first key that fails: one already gone, `ENOENT`, is skipped and
    /// the rest deleted by the next call), one delete each on a kernel
    /// that refuses the command; then release their mask slots. An entry
    /// that cannot be deleted (any other error) stays installed, holding
    /// its mask, as after a failed [`Self::remove`]: the error is the
    /// first such.
    pub fn commit_removals(&mut self) -> Result<(), OffloadError> {
        if self.removals.is_empty() {
            return Ok(());
        }
        let mut removals = std::mem::take(&mut self.removals);
        let mut keys = std::mem::take(&mut self.removal_keys);
        keys.clear();
        keys.extend(removals.iter().map(|(hk, _)| *hk));
        let mut first_err = None;
        let mut i = 0;
        while self.delete_batch && keys.len() - i > 1 {
            match self.delete_batch_call(&keys[i..]) {
                (_, Ok(())) => {
                    i = keys.len();
                    break;
                }
                (_, Err(e)) if refuses_command(&e) => {
                    // Nothing deleted as a batch: the rest one by one.
                    self.delete_batch = false;
                    tracing::info!(
                        error = %e,
                        "BPF_MAP_DELETE_BATCH on dp_flows refused: removals are deleted one by one"
                    );
                }
                // Key `i + done` is not in the map (deleted by someone
                // else): skip it, go on with the next.
                (done, Err(e)) if e.raw_os_error() == Some(libc::ENOENT) => i += done + 1,
                // Key `i + done` failed: the one-by-one deletes below say
                // which and keep it.
                (done, Err(_)) => {
                    i += done;
                    break;
                }
            }
        }
        // The flows whose entry could not be deleted (none but on an
        // error: no allocation then).
        let mut kept = Vec::new();
        for (k, (hk, key)) in removals.iter().enumerate().skip(i) {
            if let Err(e) = self.delete_entry(hk) {
                // Still in the map: still installed, holding its slot
                // (not released below), as after a failed `remove`.
                self.installed.insert(*key, *hk);
                kept.push(k);
                first_err.get_or_insert(bpf("BPF_MAP_DELETE_ELEM(dp_flows)", e));
            }
        }
        for (k, (_, key)) in removals.iter().enumerate() {
            if kept.contains(&k) {
                continue;
            }
            if let Err(e) = self.release_mask(key.mask_idx) {
                first_err.get_or_insert(e);
            }
        }
        // Their buffers are reused by the next batch.
        removals.clear();
        self.removals = removals;
        self.removal_keys = keys;
        first_err.map_or(Ok(()), Err)
    }

    /// Delete `hk`'s entry from `dp_flows`; one already gone is no error.
    fn delete_entry(&mut self, hk: &FlowHashKey) -> Result<(), aya::maps::MapError> {
        match self.flows.remove(hk) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Delete flow `handle`'s `dp_flows` entry and nothing else (it stays
    /// installed, holding its slot): what another writer of the map would
    /// do; the tests use it to make a queued removal's delete find its
    /// entry gone.
    #[doc(hidden)]
    pub fn delete_entry_only(&mut self, handle: &FlowHandle) -> Result<(), OffloadError> {
        let hk = self.hash_key(handle)?;
        self.flows
            .remove(&hk)
            .map_err(|e| bpf("BPF_MAP_DELETE_ELEM(dp_flows)", e))
    }

    /// One `BPF_MAP_DELETE_BATCH` of `keys` from `dp_flows`: how many the
    /// kernel deleted (those before the first that failed) and its answer.
    fn delete_batch_call(&mut self, keys: &[FlowHashKey]) -> (usize, Result<(), std::io::Error>) {
        use aya::maps::IterableMap;
        let n = keys.len();
        let mut attr = BatchAttr {
            in_batch: 0,
            out_batch: 0,
            keys: keys.as_ptr() as u64,
            values: 0,
            count: n as u32,
            map_fd: self.flows.map().fd().as_fd().as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: the attribute points at `count` keys of the map's key
        // size (an array of its key type), alive for the call; a delete
        // reads no values.
        let r = unsafe { attr.call(BPF_MAP_DELETE_BATCH) };
        if r.is_ok() {
            self.delete_batches += 1;
        }
        // On a refused command the count is left as given: nothing was
        // deleted then.
        let done = if r.as_ref().is_err_and(refuses_command) {
            0
        } else {
            (attr.count as usize).min(n)
        };
        (done, r)
    }

    /// Whether queued removals are deleted with `BPF_MAP_DELETE_BATCH`
    /// (`false`: one delete each, as on a kernel that refuses it; the
    /// tests compare the two).
    pub fn set_delete_batch(&mut self, on: bool) {
        self.delete_batch = on;
    }

    /// How many `BPF_MAP_DELETE_BATCH` calls [`Self::commit_removals`]
    /// made (the tests tell the batch from its one-by-one fallback).
    pub fn delete_batches(&self) -> u64 {
        self.delete_batches
    }

    /// From now until [`Self::commit_staged`], installs of flows without
    /// buckets queue their `dp_flows` entry instead of writing it (their
    /// handles are valid at once; a removal before the commit just drops
    /// the queued entry; an install of the same flow again writes the
    /// staged entries first, then modifies it in place, as `modify` does;
    /// `value` and `counters` of a staged flow give the value it will be
    /// written with, nothing counted; a batched read of the map
    /// (`counters_batch`) does not see it yet). Other engine calls may
    /// run (the manager's `sync_tunnel`, `ensure_meters` and
    /// `write_select_weights` do, for the flows it installs), and flows
    /// with buckets are written at once.
    pub fn begin_staging(&mut self) {
        self.staging = true;
        self.staged_failed = false;
    }

    /// Write the entries staged since [`Self::begin_staging`]: one
    /// `BPF_MAP_UPDATE_BATCH` system call for all of them (one update each
    /// on a kernel that refuses it). On `Err` some may be written and some
    /// not: the caller removes every flow it staged (a removal of one not
    /// written finds nothing). It fails too when a write of the staging
    /// before it failed (`flow-staging-failed`), even with nothing left
    /// to write.
    pub fn commit_staged(&mut self) -> Result<(), OffloadError> {
        self.staging = false;
        let r = self.write_staged();
        if std::mem::take(&mut self.staged_failed) && r.is_ok() {
            return Err(OffloadError::NotOffloadable {
                reason: "flow-staging-failed",
            });
        }
        r
    }

    /// Whether staged entries are written with `BPF_MAP_UPDATE_BATCH`
    /// (`false`: one update each, as on a kernel that refuses it; the
    /// tests compare the two).
    pub fn set_update_batch(&mut self, on: bool) {
        self.update_batch = on;
    }

    fn write_staged(&mut self) -> Result<(), OffloadError> {
        if self.staged_keys.is_empty() {
            return Ok(());
        }
        let keys = std::mem::take(&mut self.staged_keys);
        let values = std::mem::take(&mut self.staged_values);
        let r = self.write_entries(&keys, &values);
        // Their buffers are reused by the next staging.
        self.staged_keys = keys;
        self.staged_values = values;
        self.staged_keys.clear();
        self.staged_values.clear();
        if r.is_err() && self.staging {
            // Written in part, or not at all, before the commit: the
            // commit says so (its caller removes the staged flows).
            self.staged_failed = true;
        }
        r
    }

    /// Write `keys[i]` = `values[i]` to `dp_flows` (each created or
    /// replaced, as a batched update does), in one system call when the
    /// kernel batches.
    fn write_entries(
        &mut self,
        keys: &[FlowHashKey],
        values: &[FlowValue],
    ) -> Result<(), OffloadError> {
        let full = |e: &std::io::Error| e.raw_os_error() == Some(libc::E2BIG);
        if self.update_batch && keys.len() > 1 {
            match self.update_batch_call(keys, values) {
                Ok(()) => {
                    self.update_batches += 1;
                    return Ok(());
                }
                // Refused as a command: the kernel then writes no count
                // back (it stays `keys.len()`), so whatever it says, all
                // are written again one by one (each created or replaced:
                // repeating one already written is harmless).
                Err(e) if refuses_command(&e) => {
                    self.update_batch = false;
                    tracing::info!(
                        error = %e,
                        "BPF_MAP_UPDATE_BATCH on dp_flows refused: staged flows are written one by one"
                    );
                }
                Err(e) if full(&e) => {
                    return Err(OffloadError::NotOffloadable {
                        reason: "flow-map-full",
                    })
                }
                Err(e) => return Err(bpf("BPF_MAP_UPDATE_BATCH(dp_flows)", e)),
            }
        }
        for (hk, v) in keys.iter().zip(values) {
            if let Err(e) = self.flows.insert(*hk, *v, 0) {
                return Err(if errno_of(&e) == Some(libc::E2BIG) {
                    OffloadError::NotOffloadable {
                        reason: "flow-map-full",
                    }
                } else {
                    bpf("BPF_MAP_UPDATE_ELEM(dp_flows)", e)
                });
            }
        }
        Ok(())
    }

    /// One `BPF_MAP_UPDATE_BATCH` of `keys[i]` = `values[i]` into
    /// `dp_flows` (flags 0: created or replaced). On failure some may be
    /// written: the caller does not rely on how many (the count the
    /// kernel writes back is not written when it refuses the command).
    fn update_batch_call(
        &self,
        keys: &[FlowHashKey],
        values: &[FlowValue],
    ) -> Result<(), std::io::Error> {
        use aya::maps::IterableMap;
        let n = keys.len().min(values.len());
        let mut attr = BatchAttr {
            in_batch: 0,
            out_batch: 0,
            keys: keys.as_ptr() as u64,
            values: values.as_ptr() as u64,
            count: n as u32,
            map_fd: self.flows.map().fd().as_fd().as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: the attribute points at `count` keys and values of the
        // map's sizes (arrays of the map's key and value types), alive for
        // the call.
        unsafe { attr.call(BPF_MAP_UPDATE_BATCH) }
    }

    /// How many `BPF_MAP_UPDATE_BATCH` calls wrote staged entries (the
    /// tests tell the batched commit from its one-by-one fallback).
    pub fn update_batches(&self) -> u64 {
        self.update_batches
    }

    /// Read and delete `dp_flows`' entry `hk` at once
    /// (`BPF_MAP_LOOKUP_AND_DELETE_ELEM`): its value, `None` if there is
    /// no such entry.
    fn take_flow(&self, hk: &FlowHashKey) -> Result<Option<FlowValue>, std::io::Error> {
        use aya::maps::IterableMap;
        // SAFETY: FlowValue is plain old data (all-zero is a valid value).
        let mut v: FlowValue = unsafe { std::mem::zeroed() };
        let attr = ElemAttr {
            map_fd: self.flows.map().fd().as_fd().as_raw_fd() as u32,
            _pad: 0,
            key: hk as *const FlowHashKey as u64,
            value: &mut v as *mut FlowValue as u64,
            flags: 0,
        };
        // SAFETY: the attribute points at a key and a value of the map's
        // sizes, alive for the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_AND_DELETE_ELEM,
                &attr as *const ElemAttr,
                std::mem::size_of::<ElemAttr>(),
            )
        };
        if r == 0 {
            return Ok(Some(v));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(e),
        }
    }

    /// A flow's counters, last-used time converted from the kernel's
    /// monotonic clock.
    pub fn counters(&self, handle: &FlowHandle) -> Result<FlowCounters, OffloadError> {
        let v = self.value(handle)?;
        let (now_ns, now) = (monotonic_ns(), Instant::now());
        let mut c = FlowCounters::of(&v, now_ns, now);
        if v.flags & layout::flag::SELECT != 0 {
            // Its frames are counted by the bucket that ran them.
            for b in 0..layout::SELECT_MAX {
                let mut hk = self.hash_key(handle)?;
                hk.pad = 1 + b as u32;
                if let Ok(bv) = self.flows.get(&hk, 0) {
                    c.merge(FlowCounters::of(&bv, now_ns, now));
                }
            }
        }
        Ok(c)
    }

    /// A select flow's counters per bucket for its first `n` buckets
    /// (the caller knows how many its `SELECT` has), by the bucket's
    /// position (`None`: no entry there), for the group's bucket counters.
    /// One lookup per bucket.
    pub fn bucket_counters(
        &self,
        handle: &FlowHandle,
        n: usize,
    ) -> Result<Vec<Option<(u64, u64)>>, OffloadError> {
        let hk = self.hash_key(handle)?;
        Ok((0..n.min(layout::SELECT_MAX))
            .map(|b| {
                let mut bk = hk;
                bk.pad = 1 + b as u32;
                self.flows.get(&bk, 0).ok().map(|bv| (bv.packets, bv.bytes))
            })
            .collect())
    }

    /// Every installed flow's counters, read with `BPF_MAP_LOOKUP_BATCH`
    /// (a few hundred flows per system call) instead of one lookup per
    /// flow: at 65,536 offloaded flows the per-flow reads cost the daemon
    /// about a tenth of a core every second. `Ok(None)` when the kernel
    /// cannot batch this map (the caller reads flow by flow).
    pub fn counters_batch(
        &self,
    ) -> Result<Option<HashMap<FlowHandle, FlowCounters>>, OffloadError> {
        use aya::maps::IterableMap;
        const CHUNK: usize = 256;
        let fd = self.flows.map().fd().as_fd().as_raw_fd();
        let mut keys = vec![FlowHashKey::default(); CHUNK];
        // SAFETY: FlowValue is plain old data (all-zero is a valid value).
        let mut values: Vec<FlowValue> = vec![unsafe { std::mem::zeroed() }; CHUNK];
        let mut out = HashMap::with_capacity(self.installed.len());
        let (now_ns, now) = (monotonic_ns(), Instant::now());
        // The hash map's batch cursor is a bucket index (u32); 8 bytes
        // leave room to spare.
        let mut cursor = [0u64; 2];
        let mut first = true;
        loop {
            let mut attr = BatchAttr {
                in_batch: if first { 0 } else { cursor.as_ptr() as u64 },
                out_batch: cursor.as_mut_ptr() as u64 + 8,
                keys: keys.as_mut_ptr() as u64,
                values: values.as_mut_ptr() as u64,
                count: CHUNK as u32,
                map_fd: fd as u32,
                elem_flags: 0,
                flags: 0,
            };
            // SAFETY: the attribute points at buffers of `count` keys and
            // values of the map's sizes and at a cursor of 8 bytes, all
            // alive for the call.
            let err = unsafe { attr.call(BPF_MAP_LOOKUP_BATCH) }.err();
            let n = (attr.count as usize).min(CHUNK);
            for (k, v) in keys.iter().zip(&values).take(n) {
                // A select flow's buckets (pad != 0) count its frames.
                let h = FlowHandle(FlowMapKey {
                    mask_idx: k.mask_idx,
                    pad: 0,
                    key: v.key,
                });
                let c = FlowCounters::of(v, now_ns, now);
                out.entry(h)
                    .and_modify(|o: &mut FlowCounters| o.merge(c))
                    .or_insert(c);
            }
            match err.and_then(|e| e.raw_os_error()) {
                None => {}
                // The last chunk (or an empty map).
                Some(libc::ENOENT) => return Ok(Some(out)),
                // EINVAL/EOPNOTSUPP, or the kernel's internal ENOTSUPP (524).
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(524) if first => {
                    return Ok(None)
                }
                Some(e) => {
                    return Err(bpf(
                        "BPF_MAP_LOOKUP_BATCH(dp_flows)",
                        std::io::Error::from_raw_os_error(e),
                    ))
                }
            }
            cursor[0] = cursor[1];
            first = false;
        }
    }

    /// The raw map value of an installed flow (actions + counters). A
    /// flow staged and not yet written has the value it will be written
    /// with (nothing counted yet).
    pub fn value(&self, handle: &FlowHandle) -> Result<FlowValue, OffloadError> {
        let hk = self.hash_key(handle)?;
        if let Some(i) = self.staged_keys.iter().position(|k| *k == hk) {
            return Ok(self.staged_values[i]);
        }
        self.flows.get(&hk, 0).map_err(|e| match e {
            aya::maps::MapError::KeyNotFound => OffloadError::NotFound,
            e => bpf("BPF_MAP_LOOKUP_ELEM(dp_flows)", e),
        })
    }

    /// The `dp_flows` key of an installed flow.
    fn hash_key(&self, handle: &FlowHandle) -> Result<FlowHashKey, OffloadError> {
        Ok(handle.0.hash_key(&self.seed))
    }

    pub fn n_flows(&self) -> usize {
        self.installed.len()
    }

    pub fn masks(&self) -> &MaskTable {
        &self.masks
    }

    pub fn flows(&self) -> impl Iterator<Item = FlowHandle> + '_ {
        self.installed.keys().map(FlowHandle)
    }

    /// The program's global counters, summed over CPUs.
    pub fn stats(&self) -> Result<EngineStats, OffloadError> {
        let get = |i: u32| -> Result<u64, OffloadError> {
            let v = self
                .stats
                .get(&i, 0)
                .map_err(|e| bpf("BPF_MAP_LOOKUP_ELEM(dp_stats)", e))?;
            Ok(v.iter().sum())
        };
        Ok(EngineStats {
            rx: get(stat::RX)?,
            hit: get(stat::HIT)?,
            miss: get(stat::MISS)?,
            unparsed: get(stat::UNPARSED)?,
            no_port: get(stat::NO_PORT)?,
            punt: get(stat::PUNT)?,
            output: get(stat::OUTPUT)?,
            drop: get(stat::DROP)?,
            aborted: get(stat::ABORTED)?,
            decap: get(stat::DECAP)?,
            encap: get(stat::ENCAP)?,
            drop_policy: get(stat::DROP_POLICY)?,
            drop_reasons: {
                let mut r = [0; layout::DROP_REASONS];
                for (i, n) in r.iter_mut().enumerate() {
                    *n = get(stat::DROP_REASON + i as u32)?;
                }
                r
            },
        })
    }

    /// Run the program once on `frame` with `BPF_PROG_TEST_RUN`, as if it
    /// arrived on `ifindex` / rx queue `queue` (the interface must exist
    /// in the caller's network namespace). Returns the program's verdict
    /// (XDP action, or TC action for a TC engine) and the frame as the
    /// program left it. Redirects are not carried out.
    pub fn test_run(
        &self,
        frame: &[u8],
        ifindex: u32,
        queue: u32,
    ) -> Result<(u32, Vec<u8>), OffloadError> {
        self.test_run_gso(frame, ifindex, queue, None)
    }

    /// `BPF_PROG_TEST_RUN` of `frame` `repeat` times: the verdict and the
    /// kernel's mean time per run in ns (what one frame costs the program,
    /// without the redirect the verdict asks for).
    pub fn test_run_repeat(
        &self,
        frame: &[u8],
        ifindex: u32,
        repeat: u32,
    ) -> Result<(u32, f64), OffloadError> {
        let o = prog_test_run(self.program_data()?, frame, ifindex, 0, None, repeat)?;
        Ok((o.verdict, o.ns_per_run))
    }

    /// As [`Self::test_run`]; for a TC engine `gso` = (segments, segment
    /// size) marks the skb as a GSO super-frame.
    pub fn test_run_gso(
        &self,
        frame: &[u8],
        ifindex: u32,
        queue: u32,
        gso: Option<(u32, u32)>,
    ) -> Result<(u32, Vec<u8>), OffloadError> {
        let o = prog_test_run(self.program_data()?, frame, ifindex, queue, gso, 1)?;
        Ok((o.verdict, o.frame))
    }
}

impl Drop for XdpEngine {
    /// Detach and unpin everything, unless the thread is panicking: a
    /// crash leaves the pins (and the fast path) for the next daemon.
    fn drop(&mut self) {
        // No set-up left to a program whose reports nobody reads (its
        // pins may outlive this daemon, even a crashed one).
        for k in std::mem::take(&mut self.ct_tpl_keys) {
            if let Some(m) = self.ct_tpl.as_mut() {
                let _ = m.remove(&k);
            }
        }
        let crash = std::thread::panicking();
        if !crash {
            // Ports' links go back to their own programs rather than keep
            // running a program nobody manages.
            let lent: Vec<u32> = self.lent.keys().copied().collect();
            for ifindex in lent {
                if let Err(e) = self.release_link(ifindex) {
                    tracing::warn!(ifindex, "{e}");
                }
            }
        }
        for (_, l) in self.tc_links.drain() {
            if crash {
                l.leave();
            } else {
                l.release();
            }
        }
        if let Some(d) = self.pin_dir.take() {
            if !crash {
                pin::remove(&d);
                if let Some(parent) = d.parent() {
                    // The bridge's directory, once its last engine went.
                    let _ = std::fs::remove_dir(parent);
                }
            }
        }
    }
}

/// Pin `ebpf`'s program and the maps userspace uses in `dir` (created).
fn pin_object(ebpf: &mut Ebpf, kind: EngineKind, dir: &Path) -> Result<(), OffloadError> {
    std::fs::create_dir_all(dir).map_err(|e| bpf("creating the pin directory", e))?;
    let name = kind.prog_name();
    ebpf.program_mut(name)
        .ok_or_else(|| OffloadError::Config(format!("no program `{name}`")))?
        .pin(dir.join("prog"))
        .map_err(|e| bpf("pinning the program", e))?;
    for m in PINNED_MAPS {
        if let Some(map) = ebpf.map(m) {
            map.pin(dir.join(m)).map_err(|e| bpf("pinning a map", e))?;
        }
    }
    Ok(())
}

/// `BPF_PROG_LOAD`, retried while the kernel answers EAGAIN: the verifier
/// gives up with EAGAIN when a signal is pending for the loading thread
/// (a child of the process exiting, a timer), and the same load passes a
/// moment later. libbpf retries the same way, up to 5 attempts; seen here
/// as a one-off "Resource temporarily unavailable" in the test suite.
fn load_retrying(mut load: impl FnMut() -> Result<(), ProgramError>) -> Result<(), ProgramError> {
    let mut attempts = 1;
    loop {
        match load() {
            Err(ProgramError::LoadError { ref io_error, .. })
                if io_error.raw_os_error() == Some(libc::EAGAIN) && attempts < 5 =>
            {
                attempts += 1;
            }
            r => return r,
        }
    }
}

/// Whether a set-up entry's stored value forwards differently from the
/// composed one (`composed`): the actions, their count, the flags and the
/// output slot (not the counters, the key or the TCP flags the program
/// ORs in).
fn stale_entry_value(stored: &FlowValue, composed: &FlowValue) -> bool {
    stored.n_actions != composed.n_actions
        || stored.flags != composed.flags
        || stored.out_slot != composed.out_slot
        || stored.actions != composed.actions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MUST-FIX 1 of the ctbpf review: an adopted entry whose actions are
    /// the template's old ones is told from the composed value (and then
    /// rewritten); counters, TCP flags and key alone are not a difference.
    #[test]
    fn a_set_up_entry_with_old_actions_is_stale() {
        let mut composed = FlowValue {
            n_actions: 1,
            flags: 1,
            out_slot: 3,
            ..FlowValue::default()
        };
        composed.actions[0].op = 1;
        let mut stored = composed;
        stored.packets = 5;
        stored.bytes = 500;
        stored.used_ns = 7;
        stored.tcp_flags = 0x12;
        assert!(!stale_entry_value(&stored, &composed));
        let mut old = stored;
        old.actions[0].op = 2;
        assert!(stale_entry_value(&old, &composed));
        let mut old = stored;
        old.out_slot = 4;
        assert!(stale_entry_value(&old, &composed));
        let mut old = stored;
        old.n_actions = 2;
        assert!(stale_entry_value(&old, &composed));
        let mut old = stored;
        old.flags = 0;
        assert!(stale_entry_value(&old, &composed));
    }

    /// A refused command (unknown, or a map without it) falls back
    /// whatever count the kernel left; a full map or any other error of
    /// an entry does not.
    #[test]
    fn refused_commands_are_told_from_failed_entries() {
        let io = std::io::Error::from_raw_os_error;
        for errno in [libc::EINVAL, libc::EOPNOTSUPP, ENOTSUPP] {
            assert!(refuses_command(&io(errno)), "{errno}");
        }
        for errno in [libc::E2BIG, libc::ENOMEM, libc::EEXIST, libc::EPERM] {
            assert!(!refuses_command(&io(errno)), "{errno}");
        }
        assert!(!refuses_command(&std::io::Error::other("no errno")));
    }
}
