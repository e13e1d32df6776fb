//! The datapath's side of flow offload: where each datapath flow runs, and
//! its kernel-side counters.
//!
//! The datapath stays the one owner of every datapath flow. An offload
//! engine (the bridge's XDP program, `crate::offload::OffloadManager`)
//! holds *copies* of some of them, one kernel entry per userspace flow,
//! same match and actions, so frames that hit it never reach userspace.
//! Every place that changes a flow tells the engine in the same call:
//! install after an upcall, new actions or removal during revalidation,
//! removal by aging and flush. So when a revalidation returns, no kernel
//! entry follows an old decision either.
//!
//! The engine is reached only through [`FlowOffload`], OVS's
//! `dpif_offload_class` in shape: a flow half (offload, modify, remove,
//! counters, meters) and a port half ([`FlowOffload::port_add`] with the
//! port's [`OffloadHook`], [`FlowOffload::port_del`],
//! [`FlowOffload::status`]), so neither the datapath nor the bridge ever
//! needs the concrete engine: the kernel one (`crate::offload::manager`)
//! and the in-memory one (`crate::offload::dummy`) are interchangeable.
//!
//! Counters: a flow's traffic is its userspace counters plus the kernel's
//! ([`KernelShare`]: counters of kernel entries already removed plus the
//! live entry's, read back at every sync). Aging looks at the later of the
//! two last-used times, so a flow busy in the kernel is never aged out.

use super::{DpAction, DpFlow, FlowStats};
use nicflow_flow::{FlowKey, FlowMask, Match};
use nicflow_port::OffloadHook;
use std::collections::BTreeMap;
use std::time::Instant;

/// Where a datapath flow runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In the offload engine (and in userspace for frames the engine
    /// hands up); the engine's id for it.
    Kernel(u64),
    /// Only in userspace, for this stable reason (`port:afpacket`,
    /// `action:controller`, `flow-map-full`, ...).
    Userspace(&'static str),
}

/// Counters of one kernel entry as the engine last reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    pub packets: u64,
    pub bytes: u64,
    pub used: Option<Instant>,
    pub tcp_flags: u16,
}

/// The kernel's part of a flow's traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelShare {
    /// Sums of kernel entries this flow had before (removed when the flow
    /// went back to userspace).
    pub retired_packets: u64,
    pub retired_bytes: u64,
    pub retired_used: Option<Instant>,
    pub retired_tcp_flags: u16,
    /// The live entry's counters at the last read.
    pub live: KernelCounters,
}

impl KernelShare {
    pub fn stats(&self) -> FlowStats {
        FlowStats {
            packets: self.retired_packets + self.live.packets,
            bytes: self.retired_bytes + self.live.bytes,
            used: match (self.retired_used, self.live.used) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
            tcp_flags: self.retired_tcp_flags | self.live.tcp_flags,
        }
    }

    /// The live entry is gone; `last` are its final counters (or the last
    /// read, if the engine could not say).
    fn retire(&mut self, last: Option<KernelCounters>) {
        let last = last.unwrap_or(self.live);
        self.retired_packets += last.packets;
        self.retired_bytes += last.bytes;
        self.retired_used = match (self.retired_used, last.used) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.retired_tcp_flags |= last.tcp_flags;
        self.live = KernelCounters::default();
    }
}

/// An engine datapath flows can be offloaded to. Called at control-plane
/// rate only (flow installs, revalidation, housekeeping), never per packet.
pub trait FlowOffload {
    /// Add bits to a new flow's mask before it is installed anywhere, so
    /// that its offload decision holds for every packet it covers (a
    /// narrower mask is always correct: the slow path decided the same for
    /// every packet of the wider one).
    fn refine_mask(&self, key: &FlowKey, mask: &mut FlowMask);
    /// Offload a new flow: the engine's id for it, or why it stays in
    /// userspace.
    fn offload(&mut self, matching: &Match, actions: &[DpAction]) -> Result<u64, &'static str>;
    /// Offload one direction of an established connection (`ct_offload`):
    /// `matching`/`actions` composed from the two flows of `parts` (the
    /// `ct` pass and the recirculated pass). A provider that emulates a
    /// NIC judges the parts, as the NIC would hold the connection only
    /// through them (`act_ct` and the conntrack table).
    fn offload_ct(
        &mut self,
        matching: &Match,
        actions: &[DpAction],
        parts: [(&Match, &[DpAction]); 2],
    ) -> Result<u64, &'static str> {
        let _ = parts;
        self.offload(matching, actions)
    }
    /// Set-up in the program (TC engine, `ct_offload`'s templates): write
    /// `t` for frames from `t.in_port` with `t.dl_type`, replacing any
    /// template there; the engine holds the entries' mask slots until it
    /// is removed. `Err`: why this engine cannot (the set-up stays the
    /// daemon's).
    fn set_ct_template(&mut self, t: &CtTemplateSpec) -> Result<(), &'static str> {
        let _ = t;
        Err("ct:bpf-unsupported")
    }
    /// Whether [`FlowOffload::set_ct_template`] can take a template for
    /// frames from `in_port` at all. Asked before a template is built, so
    /// that an engine without set-up in the program (XDP, an emulated NIC,
    /// userspace only) costs no per-connection work or refusal count while
    /// `ct_setup_bpf` is on, as it is by default.
    fn ct_templates(&self, in_port: u32) -> bool {
        let _ = in_port;
        false
    }
    /// Remove the template of (`in_port`, `dl_type`) and let go of its
    /// mask slots. The caller has taken in the reports made from it.
    fn remove_ct_template(&mut self, in_port: u32, dl_type: u16) {
        let _ = (in_port, dl_type);
    }
    /// The set-ups the program reported since the last call (at most `max`).
    fn drain_ct_events(&mut self, out: &mut Vec<CtEvent>, max: usize) {
        let _ = (out, max);
    }
    /// Take an entry the program inserted (`dp_flows` key `hk`) as an
    /// offloaded flow with `matching`/`actions`: its id, or why not (the
    /// caller then deletes it with [`FlowOffload::delete_ct_entry`]).
    fn adopt_ct(
        &mut self,
        matching: &Match,
        actions: &[DpAction],
        hk: &FlowHashKey,
    ) -> Result<u64, &'static str> {
        let _ = (matching, actions, hk);
        Err("ct:bpf-unsupported")
    }
    /// Delete an entry the program inserted that is not taken.
    fn delete_ct_entry(&mut self, hk: &FlowHashKey) {
        let _ = hk;
    }
    /// The descriptor that becomes readable when the program reports a
    /// set-up, for the daemon's poll.
    fn ct_events_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// The program's set-up counters (`layout::ct_stat`).
    fn ct_program_stats(&self) -> [u64; 4] {
        [0; 4]
    }
    /// The [`FlowOffload::offload_ct`] calls from now until
    /// [`FlowOffload::commit_ct`] belong together (the three entries of a
    /// connection set up at its SYN): an engine may write them to the
    /// kernel together at the commit, in one system call instead of one
    /// each. The contract in between: nothing reads or modifies the
    /// kernel entry of a flow offloaded since `begin_ct` (`counters`,
    /// `modify`...: it may not be written yet); `remove` may drop one.
    /// The engine may do its own work on other maps meanwhile (tunnels,
    /// meters, select weights for the flows it installs).
    fn begin_ct(&mut self) {}
    /// Write what [`FlowOffload::begin_ct`] started. On `Err` (the reason)
    /// some may be written and some not: the caller removes every flow it
    /// offloaded since `begin_ct` (the engine counts them refused, not
    /// installed and removed).
    fn commit_ct(&mut self) -> Result<(), &'static str> {
        Ok(())
    }
    /// The [`FlowOffload::remove`] calls from now until
    /// [`FlowOffload::commit_removals`] of flows whose counters a
    /// [`FlowOffload::counters`] call read since `begin_removals` may be
    /// deleted together at the commit, in one system call instead of one
    /// each (the set-up poll removes the three entries of each closed
    /// connection). Such a `remove` returns the counters that read gave as
    /// the flow's last, and its entry keeps forwarding until the commit:
    /// frames the kernel counts on it between the read and the commit's
    /// delete (up to the rest of the caller's work, a whole poll) are lost
    /// to its counters and unseen by its owner. Only for flows that carry
    /// no more frames that matter (a closed connection's: at most its
    /// last ACK); one that may (an open connection) goes through
    /// [`FlowOffload::exempt_from_batch`] first. The contract in between:
    /// nothing installs a flow (an engine that finds a queued entry
    /// reinstalled deletes it first, one system call).
    fn begin_removals(&mut self) {}
    /// Between [`FlowOffload::begin_removals`] and the commit: the next
    /// `remove` of flow `id` deletes its entry at once, with its last
    /// counters read in the same call, instead of queueing it (for a flow
    /// that may still carry frames its owner must see).
    fn exempt_from_batch(&mut self, _id: u64) {}
    /// Delete what the removals since [`FlowOffload::begin_removals`]
    /// queued. The flows are gone for the caller either way: an entry the
    /// engine fails to delete is said in its log, as a failed `remove`.
    fn commit_removals(&mut self) {}
    /// New actions for offloaded flow `id` (same match). On `Err` the
    /// caller removes the entry: the flow stays in userspace for the reason.
    fn modify(
        &mut self,
        id: u64,
        matching: &Match,
        actions: &[DpAction],
    ) -> Result<(), &'static str>;
    /// Remove `id`; its final counters if the engine could read them.
    fn remove(&mut self, id: u64) -> Option<KernelCounters>;
    /// The live counters of `id`.
    fn counters(&mut self, id: u64) -> Option<KernelCounters>;
    /// About to read many flows' counters: read them all at once now, so
    /// the [`FlowOffload::counters`] calls that follow are served from
    /// that read (until [`FlowOffload::drop_prefetched`]).
    fn prefetch_counters(&mut self) {}
    /// Forget what [`FlowOffload::prefetch_counters`] read.
    fn drop_prefetched(&mut self) {}
    /// Meter `spec` was added or changed (`add-meter`, `mod-meter`): an
    /// engine holding it takes the new bands (keeping its counters); flows
    /// offloaded later that name it find it.
    fn set_meter(&mut self, _spec: &nicflow_ofctl::meter::MeterSpec) {}
    /// Meter `id` is gone (its rules and flows go with it).
    fn remove_meter(&mut self, _id: u32) {}
    /// splb weights for per-packet select group `group`, by bucket
    /// position in the group, measured by the daemon: engines running the
    /// group's flows choose by them from now on.
    fn publish_select(&mut self, _group: u32, _weights: &[u32]) {}
    /// Forget what is known of the per-packet select groups `keep` says
    /// are gone (published weights, uncredited bucket counts): a group
    /// added again under the same id starts afresh.
    fn retain_selects(&mut self, _keep: &dyn Fn(u32) -> bool) {}
    /// What the engine's flows sent through each bucket of each per-packet
    /// select group since the last call, as (group, bucket position in the
    /// group, packets, bytes): the kernel's share of the groups' bucket
    /// counters.
    fn take_select_counts(&mut self) -> Vec<(u32, u16, u64, u64)> {
        Vec::new()
    }
    /// Meter `id`'s counters in the kernel (every engine's summed), if any
    /// engine holds it.
    fn meter_counters(&self, _id: u32) -> Option<super::meter::MeterCounters> {
        None
    }
    /// Which kernel engine holds offloaded flow `id` (`xdp`, `tc`), for
    /// `dump-dp-flows`.
    fn engine_name(&self, _id: u64) -> &'static str {
        "xdp"
    }

    // The port half.

    /// Port `no` (named `name`) joined the bridge: run on its kernel
    /// attachment if the engine can, else remember why flows through it
    /// stay in userspace (what [`FlowOffload::offload`] then refuses them
    /// with). `Err`: the engine should have taken it and could not (no
    /// free slot, a map write failed); the port still works through
    /// userspace, and nothing of it is left in the engine.
    fn port_add(
        &mut self,
        no: u32,
        name: &str,
        hook: &OffloadHook,
    ) -> Result<PortOffload, PortOffloadError>;
    /// Port `no` leaves: give its attachment back as it was before
    /// `port_add` (an AF_XDP port runs its own program again) and forget
    /// it. Every step is tried; the first failure is returned. Flows
    /// through it must be re-placed by the caller.
    fn port_del(&mut self, no: u32) -> Result<(), PortOffloadError>;
    /// Housekeeping, once a tick: re-read what can change under the
    /// engine (which devices accept redirects, underlay MTUs and
    /// neighbours). True when flows must be re-placed.
    fn tick(&mut self) -> bool {
        false
    }
    /// The engine's counters and ports, for `stats` and the bridge's
    /// drop and limit reports. Reads kernel counters: control-plane rate.
    fn status(&self) -> ProviderStatus;
    /// An engine adopted from a dead daemon's pins is still being taken
    /// over ([`Self::finish_adoption`] not called yet).
    fn adopting(&self) -> bool {
        false
    }
    /// End the take-over: what the adopted engine's flows were (id, match,
    /// counters), for the datapath to revalidate; empty by default.
    fn finish_adoption(&mut self) -> Vec<(u64, Match, KernelCounters)> {
        Vec::new()
    }
}

/// What a provider made of a port at [`FlowOffload::port_add`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortOffload {
    /// This engine (`xdp`, `tc`, `dummy`) runs on it.
    Engine(&'static str),
    /// Flows through it stay in userspace, for this stable reason
    /// (`port:afpacket`, `tunnel:udp-csum-xdp`, `port:tc-engine-off`...).
    Userspace(&'static str),
}

/// An engine failed to take a port it should have taken (its own error,
/// boxed: the trait does not know the engine's error type).
#[derive(Debug)]
pub struct PortOffloadError(pub Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for PortOffloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for PortOffloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Slots of an engine's drop counters by [`super::DropReason`] (the
/// kernel programs' `DP_DROP_REASONS`).
pub const ENGINE_DROP_SLOTS: usize = 4;
const _: () = assert!(super::DropReason::ALL.len() <= ENGINE_DROP_SLOTS);

/// One engine's packet counters (the kernel programs' per-CPU counters,
/// summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub rx: u64,
    pub hit: u64,
    pub miss: u64,
    pub unparsed: u64,
    pub no_port: u64,
    pub punt: u64,
    pub output: u64,
    pub drop: u64,
    pub aborted: u64,
    /// Tunnel frames decapsulated on an underlay (hit or not).
    pub decap: u64,
    /// Frames encapsulated and sent to an underlay.
    pub encap: u64,
    /// Drops of flows with an empty action list (userspace: `policy`).
    pub drop_policy: u64,
    /// `DP_OP_DROP` drops per [`DropReason`](super::DropReason) index.
    pub drop_reasons: [u64; ENGINE_DROP_SLOTS],
}

impl EngineStats {
    /// Drops by reason, named as the userspace datapath names them, so
    /// `nicflow stats` can add the two.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let mut v = Vec::new();
        for (r, n) in super::DropReason::ALL.iter().zip(self.drop_reasons) {
            if n > 0 {
                v.push((r.name(), n));
            }
        }
        if self.drop_policy > 0 {
            v.push(("policy", self.drop_policy));
        }
        v
    }
}

/// What a provider decided, for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ManagerCounters {
    pub installed: u64,
    pub modified: u64,
    pub removed: u64,
    /// Offload attempts that left the flow in userspace.
    pub refused: u64,
}

/// A provider's state ([`FlowOffload::status`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderStatus {
    /// The XDP engine's counters (the only engine's, for a provider with
    /// one), and the TC engine's when it is loaded.
    pub engine: EngineStats,
    pub tc: Option<EngineStats>,
    /// Entries in the XDP and the TC engine.
    pub xdp_flows: usize,
    pub tc_flows: usize,
    /// (port name, reached with `bpf_redirect_peer`) of the TC engine's
    /// ports, tunnels by their underlay.
    pub tc_ports: Vec<(String, bool)>,
    /// (port name, native XDP, redirect target) of the XDP engine's.
    pub xdp_ports: Vec<(String, bool, bool)>,
    pub counters: ManagerCounters,
    /// The size of an engine's flow table (`offload_options max_flows`).
    pub max_flows: Option<u32>,
    /// Under `offload=profile:NAME`: the emulated NIC's state.
    pub profile: Option<ProfileStatus>,
}

/// The emulated NIC of `offload=profile:NAME`, for `stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileStatus {
    pub profile: &'static str,
    /// Resource name -> (used, limit).
    pub resources: std::collections::BTreeMap<String, (u64, u64)>,
    /// Refusals by stage (`ovs`, `driver`, `resource`) since it started.
    pub refused: std::collections::BTreeMap<&'static str, u64>,
}

/// Where the datapath's flows run, counted as placements change, so that
/// `stats` answers without walking every flow (with 200,000 flows the walk
/// cost the daemon thread tens of milliseconds per request).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementCounts {
    /// Flows with a kernel entry.
    pub kernel: u64,
    /// Flows in userspace only, by reason.
    pub userspace: BTreeMap<&'static str, u64>,
    /// Offload attempts refused because the engine's tables were full
    /// (`flow-map-full`, `mask-table-full`) or its insert failed
    /// (`engine-error`), since the datapath started: a limit, reported by
    /// `stats` and logged by the bridge.
    pub refused_full: u64,
    pub refused_error: u64,
}

impl PlacementCounts {
    pub(crate) fn add(&mut self, p: Option<Placement>) {
        match p {
            Some(Placement::Kernel(_)) => self.kernel += 1,
            Some(Placement::Userspace(r)) => *self.userspace.entry(r).or_insert(0) += 1,
            None => {}
        }
    }

    pub(crate) fn sub(&mut self, p: Option<Placement>) {
        match p {
            Some(Placement::Kernel(_)) => self.kernel = self.kernel.saturating_sub(1),
            Some(Placement::Userspace(r)) => {
                if let Some(n) = self.userspace.get_mut(r) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.userspace.remove(r);
                    }
                }
            }
            None => {}
        }
    }

    /// Flows in userspace by reason, without the transient `removed`.
    pub fn not_offloaded(&self) -> BTreeMap<&'static str, u64> {
        self.userspace
            .iter()
            .filter(|(r, n)| **r != "removed" && **n > 0)
            .map(|(r, n)| (*r, *n))
            .collect()
    }
}

/// Refresh `f`'s kernel counters.
pub(crate) fn sync(off: &mut dyn FlowOffload, f: &mut DpFlow) {
    if let Some(Placement::Kernel(id)) = f.placement {
        if let Some(c) = off.counters(id) {
            f.kernel.live = c;
        }
    }
}

/// Take `f` out of the engine (it is going away or back to userspace),
/// folding its final kernel counters into the flow.
pub(crate) fn unplace(off: &mut dyn FlowOffload, f: &mut DpFlow, counts: &mut PlacementCounts) {
    if let Some(Placement::Kernel(id)) = f.placement {
        let last = off.remove(id);
        f.kernel.retire(last);
        counts.sub(f.placement);
        f.placement = Some(Placement::Userspace("removed"));
        counts.add(f.placement);
    }
}

/// Bring the engine in line with `f`'s current match and actions: modify
/// its kernel entry, or offload it, or record why it stays in userspace.
pub(crate) fn update(off: &mut dyn FlowOffload, f: &mut DpFlow, counts: &mut PlacementCounts) {
    counts.sub(f.placement);
    match f.placement {
        Some(Placement::Kernel(id)) => {
            if let Err(reason) = off.modify(id, &f.matching, &f.actions) {
                let last = off.remove(id);
                f.kernel.retire(last);
                f.placement = Some(Placement::Userspace(reason));
            }
        }
        _ => {
            f.placement = Some(match off.offload(&f.matching, &f.actions) {
                Ok(id) => Placement::Kernel(id),
                Err(reason) => {
                    match reason {
                        "flow-map-full" | "mask-table-full" => counts.refused_full += 1,
                        "engine-error" => counts.refused_error += 1,
                        _ => {}
                    }
                    Placement::Userspace(reason)
                }
            });
        }
    }
    counts.add(f.placement);
}

// The kernel engine's records that this interface carries (their layout is
// the BPF programs' `struct dp_flow_key` and `struct dp_ct_event`, see
// `offload::kernel::layout`); defined here so that the interface does not
// import the engine.

/// `dp_flows` key (`struct dp_flow_key`): the mask slot and the hash of
/// the masked key ([`key_hash`]); the masked key itself is in the value,
/// where the program verifies it.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowHashKey {
    pub mask_idx: u32,
    pub pad: u32,
    pub hash: u64,
}
const _: () = assert!(std::mem::size_of::<FlowHashKey>() == 16);

/// One `dp_ct_events` record (`struct dp_ct_event`): a SYN the program
/// set up, its three entries' `dp_flows` keys and its frame.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug)]
pub struct CtEvent {
    pub gen: u64,
    pub hk: [FlowHashKey; 3],
    pub in_port: u32,
    pub len: u32,
    pub frame: [u8; CT_EV_FRAME],
}
/// Longest SYN frame the program sets up (`DP_CT_EV_FRAME`).
pub const CT_EV_FRAME: usize = 192;
const _: () = assert!(std::mem::size_of::<CtEvent>() == 256);

impl CtEvent {
    /// The record from the ring's bytes (`None`: too short).
    pub fn from_bytes(b: &[u8]) -> Option<CtEvent> {
        if b.len() < std::mem::size_of::<CtEvent>() {
            return None;
        }
        // SAFETY: CtEvent is repr(C), made only of integers and byte
        // arrays (any bit pattern is valid); read unaligned.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<CtEvent>()) })
    }

    /// The SYN's frame as the program read it.
    pub fn frame(&self) -> &[u8] {
        &self.frame[..(self.len as usize).min(CT_EV_FRAME)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_counts_follow_moves_and_removals() {
        let mut c = PlacementCounts::default();
        c.add(Some(Placement::Kernel(1)));
        c.add(Some(Placement::Userspace("flow-map-full")));
        c.add(Some(Placement::Userspace("flow-map-full")));
        c.add(None);
        assert_eq!(c.kernel, 1);
        assert_eq!(c.not_offloaded().get("flow-map-full"), Some(&2));
        // Kernel -> removed (aging): the transient reason is not shown.
        c.sub(Some(Placement::Kernel(1)));
        c.add(Some(Placement::Userspace("removed")));
        assert_eq!(c.kernel, 0);
        assert!(!c.not_offloaded().contains_key("removed"));
        c.sub(Some(Placement::Userspace("removed")));
        c.sub(Some(Placement::Userspace("flow-map-full")));
        c.sub(Some(Placement::Userspace("flow-map-full")));
        c.sub(Some(Placement::Userspace("flow-map-full")));
        assert!(c.userspace.is_empty(), "{c:?}");
    }
}

/// A set-up template as the datapath composes it
/// ([`FlowOffload::set_ct_template`]): the SYN's port and EtherType, what
/// the megaflows it came from looked at as fields of the SYN's key
/// (`vmask`) and the SYN's values there, the three entries (orig, reply,
/// reply SYN-ACK: their match as composed for the source SYN, masks
/// refined, and actions), the reply entries' `in_port`, each entry key's
/// TCP flags, and the port the SYN is sent out of.
#[derive(Clone, Debug)]
pub struct CtTemplateSpec {
    pub gen: u64,
    pub in_port: u32,
    pub dl_type: u16,
    pub vmask: FlowKey,
    pub vkey: FlowKey,
    pub entries: [(Match, Vec<DpAction>); 3],
    pub out_port: u32,
    pub tcp_flags: [u16; 3],
    pub syn_out: u32,
}
