//! An offload engine in memory, as OVS's dummy offload provider: the
//! datapath and the bridge drive it exactly as they drive the kernel
//! engines ([`FlowOffload`], flow half and port half), so placement,
//! counters (live, retired, folded into the flow), modify refusals, port
//! add/del reasons and meters are tested without root, BPF or interfaces.
//!
//! Place in a frame's path: none. No frame runs here; a test plays the
//! kernel's part with [`DummyHandle::hit`] (traffic on an offloaded flow)
//! and looks at what the engine holds through the same handle, which
//! shares the engine's state (the bridge owns the engine itself, boxed as
//! any provider, and never needs its type).
//!
//! What it accepts, a simplified kernel engine:
//! * ports: AF_XDP and TC ports (engine `dummy`), tunnels whose underlay is
//!   one of those and that need no outer UDP checksum or IPsec; any other
//!   port stays in userspace for the reason the kernel manager gives
//!   ([`super::kind_reason`], `tunnel:udp-csum-xdp`, `tunnel:ipsec`,
//!   `tunnel:underlay-afpacket`). A port named by
//!   [`DummyHandle::fail_port_add`] makes `port_add` fail (an engine
//!   error), as a full or broken kernel map would.
//! * flows: an exact `in_port`, an ingress and every output among its
//!   ports, meters it knows, and no action the kernel programs lack
//!   (`action:controller`, `action:unsupported` for the rest); at most
//!   `max_flows` entries (`flow-map-full`). A modify is decided afresh the
//!   same way, so new actions the engine cannot run are refused.
//! * meters: held as given; a flow's hits count in its meters' `packets_in`.
//! * an install whose match equals an entry's replaces that entry's
//!   actions in place, keeping its counters and TCP flags, under a new id
//!   that names the same entry (removing either id removes it), as the TC
//!   and XDP engines do with a second install of the same masked key.

use super::kind_reason;
use crate::datapath::meter::MeterCounters;
use crate::datapath::offload::{CtEvent, FlowHashKey};
use crate::datapath::{
    DpAction, EngineStats, FlowOffload, KernelCounters, ManagerCounters, PortOffload,
    PortOffloadError, ProviderStatus,
};
use nicflow_flow::{FlowKey, FlowMask, Match};
use nicflow_ofctl::meter::MeterSpec;
use nicflow_port::OffloadHook;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Instant;

/// One entry of the engine.
#[derive(Clone, Debug)]
pub struct DummyFlow {
    pub matching: Match,
    pub actions: Vec<DpAction>,
    pub counters: KernelCounters,
}

/// The engine's state, shared by the engine and its handles.
#[derive(Debug, Default)]
struct State {
    /// Ports the engine runs on, by number: their names.
    ports: BTreeMap<u32, String>,
    /// Ports it does not run on: why.
    others: BTreeMap<u32, &'static str>,
    /// Port names whose `port_add` fails.
    fail: BTreeSet<String>,
    flows: BTreeMap<u64, DummyFlow>,
    /// Ids handed out for an install of an entry's match: the id the
    /// entry is held under.
    alias: BTreeMap<u64, u64>,
    next_id: u64,
    max_flows: usize,
    meters: BTreeMap<u32, MeterSpec>,
    meter_counters: BTreeMap<u32, MeterCounters>,
    counters: ManagerCounters,
    stats: EngineStats,
    /// Between `begin_ct` and `commit_ct`: the first id handed out since.
    ct_first: Option<u64>,
    /// `commit_ct` calls so far.
    ct_commits: u64,
    /// `commit_ct` fails with this reason (a test's stand-in for a kernel
    /// that could not write the staged entries).
    ct_commit_fails: Option<&'static str>,
    /// Entries of a failed `commit_ct`: never installed, so their removal
    /// is not counted.
    ct_uncommitted: BTreeSet<u64>,
    /// Between `begin_removals` and `commit_removals`: the ids whose
    /// counters were read since (their removal is queued).
    removal_reads: Option<BTreeSet<u64>>,
    /// Removals queued since `begin_removals`.
    removal_queue: usize,
    /// The size of each batch `commit_removals` deleted (empty ones not
    /// listed).
    removal_batches: Vec<usize>,
    /// Removals of an entry made at once, one each (not queued).
    single_removals: u64,
    /// Set-up reports as the TC program would leave them in its ring
    /// ([`DummyHandle::report_ct`]), taken by `drain_ct_events`.
    ct_reports: std::collections::VecDeque<CtEvent>,
    /// The program's entries the daemon deleted (`delete_ct_entry`), in
    /// order.
    ct_deleted: Vec<FlowHashKey>,
}

/// The engine (give it to [`crate::bridge::Bridge::enable_offload_provider`]
/// or `Datapath::set_offload`).
#[derive(Debug)]
pub struct DummyOffload(Rc<RefCell<State>>);

/// A test's view of a [`DummyOffload`] it gave away.
#[derive(Clone, Debug)]
pub struct DummyHandle(Rc<RefCell<State>>);

/// The reason `port_add` fails for a port named by
/// [`DummyHandle::fail_port_add`].
#[derive(Debug, thiserror::Error)]
#[error("dummy engine: no room for port {0}")]
pub struct DummyPortError(String);

impl DummyOffload {
    /// An engine holding at most `max_flows` flows, and a handle on it.
    pub fn new(max_flows: usize) -> (DummyOffload, DummyHandle) {
        let s = Rc::new(RefCell::new(State {
            next_id: 1,
            max_flows,
            ..State::default()
        }));
        (DummyOffload(s.clone()), DummyHandle(s))
    }
}

impl DummyHandle {
    /// The program's part in a set-up: a report in its ring.
    pub fn report_ct(&self, ev: CtEvent) {
        self.0.borrow_mut().ct_reports.push_back(ev);
    }

    /// Reports not drained yet.
    pub fn ct_reports_left(&self) -> usize {
        self.0.borrow().ct_reports.len()
    }

    /// The program's entries deleted so far, in order.
    pub fn ct_deleted(&self) -> Vec<FlowHashKey> {
        self.0.borrow().ct_deleted.clone()
    }

    /// The kernel's part: `packets` frames of `bytes` in all hit entry
    /// `id` (its meters count them too). False if there is no such entry.
    pub fn hit(&self, id: u64, packets: u64, bytes: u64) -> bool {
        let mut s = self.0.borrow_mut();
        let s = &mut *s;
        let id = s.resolve(id);
        let Some(f) = s.flows.get_mut(&id) else {
            return false;
        };
        f.counters.packets += packets;
        f.counters.bytes += bytes;
        f.counters.used = Some(Instant::now());
        s.stats.rx += packets;
        s.stats.hit += packets;
        for a in &f.actions {
            if let DpAction::Meter(m) = a {
                let c = s.meter_counters.entry(*m).or_default();
                c.packets_in += packets;
                c.bytes_in += bytes;
            }
        }
        true
    }

    /// As [`DummyHandle::hit`], the frames' TCP flags ORed into the
    /// entry's, as the kernel engines do.
    pub fn hit_tcp(&self, id: u64, packets: u64, bytes: u64, flags: u16) -> bool {
        if !self.hit(id, packets, bytes) {
            return false;
        }
        let mut s = self.0.borrow_mut();
        let id = s.resolve(id);
        if let Some(f) = s.flows.get_mut(&id) {
            f.counters.tcp_flags |= flags;
        }
        true
    }

    /// The entries now, by id.
    pub fn flows(&self) -> BTreeMap<u64, DummyFlow> {
        let s = self.0.borrow();
        let mut fl = s.flows.clone();
        for (a, id) in &s.alias {
            if let Some(f) = s.flows.get(id) {
                fl.insert(*a, f.clone());
            }
        }
        fl
    }

    /// Ports the engine runs on (number, name).
    pub fn ports(&self) -> BTreeMap<u32, String> {
        self.0.borrow().ports.clone()
    }

    /// Why port `no` is not run on (None: it is, or it is unknown).
    pub fn port_reason(&self, no: u32) -> Option<&'static str> {
        self.0.borrow().others.get(&no).copied()
    }

    /// From now on, adding a port named `name` fails.
    pub fn fail_port_add(&self, name: &str) {
        self.0.borrow_mut().fail.insert(name.to_string());
    }

    /// Meters the engine was given.
    pub fn meters(&self) -> Vec<u32> {
        self.0.borrow().meters.keys().copied().collect()
    }

    /// From now on `commit_ct` fails with `why` (`None`: it succeeds).
    pub fn fail_ct_commits(&self, why: Option<&'static str>) {
        self.0.borrow_mut().ct_commit_fails = why;
    }

    /// How many times `commit_ct` was called.
    pub fn ct_commits(&self) -> u64 {
        self.0.borrow().ct_commits
    }

    /// The sizes of the batches of removals deleted so far (a kernel
    /// engine's `BPF_MAP_DELETE_BATCH` each), and how many entries were
    /// removed one at a time.
    pub fn removals(&self) -> (Vec<usize>, u64) {
        let s = self.0.borrow();
        (s.removal_batches.clone(), s.single_removals)
    }

    /// The engine's installed, removed and refused counts.
    pub fn counters(&self) -> ManagerCounters {
        self.0.borrow().counters
    }

    /// The `n` entries installed last (highest ids first), without
    /// copying the others: for tests that install thousands.
    pub fn newest(&self, n: usize) -> Vec<(u64, DummyFlow)> {
        let s = self.0.borrow();
        s.flows
            .iter()
            .rev()
            .take(n)
            .map(|(id, f)| (*id, f.clone()))
            .collect()
    }
}

impl State {
    /// The id entry `id` is held under.
    fn resolve(&self, id: u64) -> u64 {
        self.alias.get(&id).copied().unwrap_or(id)
    }

    fn port_reason(&self, no: u32) -> &'static str {
        self.others.get(&no).copied().unwrap_or("port:unknown")
    }

    /// Can the engine run `actions` on frames matching `m`? The reason if
    /// not.
    fn decide(&self, m: &Match, actions: &[DpAction]) -> Result<(), &'static str> {
        if m.mask().0.in_port != u32::MAX {
            return Err("match:in_port-wildcarded");
        }
        let in_port = m.key().in_port;
        if !self.ports.contains_key(&in_port) {
            return Err(self.port_reason(in_port));
        }
        for a in actions {
            match a {
                DpAction::Output(p) if !self.ports.contains_key(p) => {
                    return Err(self.port_reason(*p))
                }
                DpAction::Meter(id) if !self.meters.contains_key(id) => {
                    return Err("meter:unknown")
                }
                DpAction::Output(_)
                | DpAction::Meter(_)
                | DpAction::Drop(_)
                | DpAction::SetEthSrc(_)
                | DpAction::SetEthDst(_)
                | DpAction::SetIpv4Src(_)
                | DpAction::SetIpv4Dst(_)
                | DpAction::SetTos(_)
                | DpAction::SetTtl(_)
                | DpAction::SetTpSrc(_)
                | DpAction::SetTpDst(_)
                | DpAction::PushVlan { .. }
                | DpAction::PopVlan
                | DpAction::SetVlanTci(_) => {}
                DpAction::Controller { .. } => return Err("action:controller"),
                _ => return Err("action:unsupported"),
            }
        }
        Ok(())
    }

    /// What `port_add` decides for a hook (the kernel manager's reasons).
    fn place(hook: &OffloadHook) -> Result<(), &'static str> {
        match hook {
            OffloadHook::AfXdp(_) | OffloadHook::Tc(_) => Ok(()),
            OffloadHook::Tunnel(t) => super::tunnel_refusal(t).map_or(Ok(()), Err),
            OffloadHook::Userspace { kind } => Err(kind_reason(kind)),
        }
    }
}

impl FlowOffload for DummyOffload {
    fn drain_ct_events(&mut self, out: &mut Vec<CtEvent>, max: usize) {
        let mut s = self.0.borrow_mut();
        while out.len() < max {
            let Some(ev) = s.ct_reports.pop_front() else {
                break;
            };
            out.push(ev);
        }
    }

    fn delete_ct_entry(&mut self, hk: &FlowHashKey) {
        self.0.borrow_mut().ct_deleted.push(*hk);
    }

    fn refine_mask(&self, _key: &FlowKey, mask: &mut FlowMask) {
        mask.0.in_port = u32::MAX;
    }

    fn offload(&mut self, matching: &Match, actions: &[DpAction]) -> Result<u64, &'static str> {
        let mut s = self.0.borrow_mut();
        let r = s.decide(matching, actions).and_then(|()| {
            if s.flows.len() >= s.max_flows && !s.flows.values().any(|f| f.matching == *matching) {
                Err("flow-map-full")
            } else {
                Ok(())
            }
        });
        if let Err(reason) = r {
            s.counters.refused += 1;
            return Err(reason);
        }
        let id = s.next_id;
        s.next_id += 1;
        let same = s
            .flows
            .iter()
            .find(|(_, f)| f.matching == *matching)
            .map(|(i, _)| *i);
        if let Some(held) = same {
            // The engine's in-place replace: same entry, counters kept.
            s.flows.get_mut(&held).expect("found above").actions = actions.to_vec();
            s.alias.insert(id, held);
            s.counters.installed += 1;
            return Ok(id);
        }
        s.flows.insert(
            id,
            DummyFlow {
                matching: *matching,
                actions: actions.to_vec(),
                counters: KernelCounters::default(),
            },
        );
        s.counters.installed += 1;
        Ok(id)
    }

    fn begin_ct(&mut self) {
        let mut s = self.0.borrow_mut();
        s.ct_first = Some(s.next_id);
    }

    /// On a failure the entries installed since `begin_ct` are counted
    /// refused rather than installed, as the kernel engines' manager
    /// counts them; unlike the manager, which removes them itself, they
    /// stay until the caller removes them (not counted removed then), so
    /// a test sees whether it does.
    fn commit_ct(&mut self) -> Result<(), &'static str> {
        let mut s = self.0.borrow_mut();
        let s = &mut *s;
        s.ct_commits += 1;
        let first = s.ct_first.take().unwrap_or(s.next_id);
        let Some(why) = s.ct_commit_fails else {
            return Ok(());
        };
        for id in first..s.next_id {
            if s.alias.contains_key(&id) || s.flows.contains_key(&id) {
                s.counters.installed -= 1;
                s.counters.refused += 1;
                s.ct_uncommitted.insert(id);
            }
        }
        Err(why)
    }

    fn modify(
        &mut self,
        id: u64,
        matching: &Match,
        actions: &[DpAction],
    ) -> Result<(), &'static str> {
        let mut s = self.0.borrow_mut();
        let id = s.resolve(id);
        if !s.flows.contains_key(&id) {
            return Err("engine-error");
        }
        s.decide(matching, actions)?;
        let f = s.flows.get_mut(&id).expect("checked above");
        f.actions = actions.to_vec();
        s.counters.modified += 1;
        Ok(())
    }

    /// Between `begin_removals` and `commit_removals`, the removal of an
    /// entry read since is queued (counted in the commit's batch); the
    /// entry goes at once all the same, with its counters (exact here: no
    /// frame runs between a test's reads). Unlike the manager, it queues
    /// any such entry, a select flow's or a staged one too (the manager
    /// removes those at once): the tests here count what the poll hands
    /// to the batch, not what an engine can take.
    fn remove(&mut self, id: u64) -> Option<KernelCounters> {
        let mut s = self.0.borrow_mut();
        let s = &mut *s;
        let held = s.resolve(id);
        s.alias.remove(&id);
        let f = s.flows.remove(&held)?;
        if !s.ct_uncommitted.remove(&id) {
            s.counters.removed += 1;
        }
        let queued = s.removal_reads.as_mut().is_some_and(|r| r.remove(&id));
        if queued {
            s.removal_queue += 1;
        } else {
            s.single_removals += 1;
        }
        Some(f.counters)
    }

    fn begin_removals(&mut self) {
        let mut s = self.0.borrow_mut();
        s.removal_reads = Some(BTreeSet::new());
        s.removal_queue = 0;
    }

    fn exempt_from_batch(&mut self, id: u64) {
        if let Some(read) = self.0.borrow_mut().removal_reads.as_mut() {
            read.remove(&id);
        }
    }

    fn commit_removals(&mut self) {
        let mut s = self.0.borrow_mut();
        s.removal_reads = None;
        let n = std::mem::take(&mut s.removal_queue);
        if n > 0 {
            s.removal_batches.push(n);
        }
    }

    fn counters(&mut self, id: u64) -> Option<KernelCounters> {
        let mut s = self.0.borrow_mut();
        let c = s.flows.get(&s.resolve(id)).map(|f| f.counters)?;
        if let Some(read) = s.removal_reads.as_mut() {
            read.insert(id);
        }
        Some(c)
    }

    fn set_meter(&mut self, spec: &MeterSpec) {
        self.0
            .borrow_mut()
            .meters
            .insert(spec.meter_id, spec.clone());
    }

    fn remove_meter(&mut self, id: u32) {
        let mut s = self.0.borrow_mut();
        s.meters.remove(&id);
        s.meter_counters.remove(&id);
    }

    fn meter_counters(&self, id: u32) -> Option<MeterCounters> {
        self.0.borrow().meter_counters.get(&id).cloned()
    }

    fn engine_name(&self, id: u64) -> &'static str {
        let s = self.0.borrow();
        match s.flows.contains_key(&s.resolve(id)) {
            true => "dummy",
            false => "userspace",
        }
    }

    fn port_add(
        &mut self,
        no: u32,
        name: &str,
        hook: &OffloadHook,
    ) -> Result<PortOffload, PortOffloadError> {
        let mut s = self.0.borrow_mut();
        if s.fail.contains(name) {
            // Nothing of the port stays in the engine; flows through it
            // are refused as through an unknown port.
            return Err(PortOffloadError(Box::new(DummyPortError(name.into()))));
        }
        match State::place(hook) {
            Ok(()) => {
                s.others.remove(&no);
                s.ports.insert(no, name.to_string());
                Ok(PortOffload::Engine("dummy"))
            }
            Err(reason) => {
                s.others.insert(no, reason);
                Ok(PortOffload::Userspace(reason))
            }
        }
    }

    fn port_del(&mut self, no: u32) -> Result<(), PortOffloadError> {
        let mut s = self.0.borrow_mut();
        s.ports.remove(&no);
        s.others.remove(&no);
        Ok(())
    }

    fn status(&self) -> ProviderStatus {
        let s = self.0.borrow();
        ProviderStatus {
            engine: s.stats,
            tc: None,
            xdp_flows: s.flows.len(),
            tc_flows: 0,
            tc_ports: Vec::new(),
            xdp_ports: s.ports.values().map(|n| (n.clone(), true, true)).collect(),
            counters: s.counters,
            max_flows: u32::try_from(s.max_flows).ok(),
            profile: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::Bridge;
    use crate::datapath::{DatapathConfig, Placement};
    use crate::offload::OffloadMode;
    use nicflow_packet::buf::PacketBuf;
    use nicflow_packet::builder::FrameBuilder;
    use nicflow_port::hook::{AfXdpHook, TcHook};
    use nicflow_port::mem::{MemHandle, MemPort};
    use nicflow_port::{Port, PortStats};
    use std::net::Ipv4Addr;

    const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];

    /// A memory port that describes itself as a kernel attachment (the
    /// dummy engine never touches the interface or the socket).
    struct Hooked(MemPort, OffloadHook);

    impl Port for Hooked {
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
        fn stats(&self) -> PortStats {
            self.0.stats()
        }
        fn rx_exhausted(&self) -> bool {
            self.0.rx_exhausted()
        }
        fn offload_hook(&self) -> OffloadHook {
            self.1.clone()
        }
    }

    fn afxdp(ifindex: u32) -> OffloadHook {
        OffloadHook::AfXdp(AfXdpHook {
            ifindex,
            queue: 0,
            xsk_fd: -1,
            csum_complete: false,
            native: true,
            link: None,
        })
    }

    fn tc(ifindex: u32) -> OffloadHook {
        OffloadHook::Tc(TcHook {
            ifindex,
            iface: format!("veth{ifindex}"),
            upcall_ifindex: 100 + ifindex,
            peer_elsewhere: true,
        })
    }

    fn udp(sport: u16) -> Vec<u8> {
        FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
            .udp(sport, 9)
            .payload(b"dummy engine")
            .build()
    }

    /// A bridge with `x` (AF_XDP hook), `t` (TC hook) and `m` (a plain
    /// memory port), offloading to a dummy engine of `max_flows` entries.
    fn bridge(max_flows: usize, fail: &[&str]) -> (Bridge, DummyHandle, MemHandle, MemHandle) {
        let mut br = Bridge::new("br-dummy", DatapathConfig::default());
        let (px, hx) = MemPort::new("x");
        let (pt, ht) = MemPort::new("t");
        let (pm, _) = MemPort::new("m");
        br.add_port(Box::new(Hooked(px, afxdp(7)))).unwrap();
        br.add_port(Box::new(Hooked(pt, tc(8)))).unwrap();
        br.add_port(Box::new(pm)).unwrap();
        let (engine, h) = DummyOffload::new(max_flows);
        for name in fail {
            h.fail_port_add(name);
        }
        br.enable_offload_provider(Box::new(engine), OffloadMode::Auto);
        (br, h, hx, ht)
    }

    /// The placement of the one datapath flow whose UDP source port is
    /// `sport`.
    fn placement(br: &Bridge, sport: u16) -> Option<Placement> {
        br.dp_flows()
            .find(|f| f.matching.key().tp_src == sport)
            .and_then(|f| f.placement)
    }

    #[test]
    fn ports_are_placed_by_their_hook_and_flows_by_their_ports() {
        let (mut br, h, hx, ht) = bridge(16, &[]);
        assert_eq!(
            h.ports().into_values().collect::<Vec<_>>(),
            ["x", "t"],
            "the engine runs on the hooked ports only"
        );
        assert_eq!(h.port_reason(3), Some("port:userspace"));
        let now = Instant::now();
        br.add_flows_str(
            "priority=10,udp,tp_src=1,actions=output:t\n\
             priority=10,udp,tp_src=2,actions=output:m\n\
             priority=10,udp,tp_src=3,actions=controller",
            now,
        )
        .unwrap();
        for sport in 1..=3 {
            hx.inject(&udp(sport));
        }
        br.run_until_idle(now);
        assert_eq!(
            ht.take_tx().len(),
            1,
            "the first packet is forwarded by userspace"
        );
        assert!(matches!(placement(&br, 1), Some(Placement::Kernel(_))));
        assert_eq!(
            placement(&br, 2),
            Some(Placement::Userspace("port:userspace"))
        );
        assert_eq!(
            placement(&br, 3),
            Some(Placement::Userspace("action:controller"))
        );
        let s = br.offload_status().expect("offload is on");
        assert_eq!(
            (s.kernel_flows, s.manager.installed, s.manager.refused),
            (1, 1, 2)
        );
        assert_eq!(s.not_offloaded.get("port:userspace"), Some(&1));
        assert_eq!(br.offload_mode_name(), "auto");
        let dump = br.dump_dp_flows(now);
        assert_eq!(
            dump.iter().filter(|d| d.engine == "dummy").count(),
            1,
            "{dump:?}"
        );
    }

    #[test]
    fn kernel_counters_are_added_and_kept_when_a_modify_is_refused() {
        let (mut br, h, hx, _ht) = bridge(16, &[]);
        let now = Instant::now();
        br.add_flow_str("priority=10,udp,actions=output:t", now)
            .unwrap();
        hx.inject(&udp(5));
        br.run_until_idle(now);
        let (&id, _) = h.flows().iter().next().expect("offloaded");
        assert!(h.hit(id, 10, 1000));
        br.sync_offload();
        let f = br.dp_flows().next().unwrap();
        assert_eq!((f.total().packets, f.kernel.stats().packets), (11, 10));
        // The rule that made the flow is credited with the kernel's part.
        let rules = br.dump_flows(now);
        assert_eq!(rules[0].n_packets, 11, "{rules:?}");
        // New actions the engine cannot run: the entry goes, its counters
        // are retired into the flow, which stays in userspace.
        br.add_flow_str("priority=10,udp,actions=controller", now)
            .unwrap();
        assert!(h.flows().is_empty(), "the refused entry was removed");
        let f = br.dp_flows().next().unwrap();
        assert_eq!(f.placement, Some(Placement::Userspace("action:controller")));
        assert_eq!(
            (
                f.kernel.retired_packets,
                f.kernel.retired_bytes,
                f.total().packets
            ),
            (10, 1000, 11),
            "kernel traffic survives the move to userspace"
        );
        let s = br.offload_status().unwrap();
        assert_eq!((s.manager.installed, s.manager.removed), (1, 1));
    }

    #[test]
    fn a_modify_the_engine_accepts_keeps_the_entry_and_its_counters() {
        let (mut br, h, hx, _ht) = bridge(16, &[]);
        let now = Instant::now();
        br.add_flow_str("priority=10,udp,actions=output:t", now)
            .unwrap();
        hx.inject(&udp(5));
        br.run_until_idle(now);
        let (&id, _) = h.flows().iter().next().unwrap();
        h.hit(id, 4, 400);
        // New actions that depend on no more of the packet: the flow is
        // fixed in place, and so is its entry.
        br.add_flow_str("priority=10,udp,actions=drop", now)
            .unwrap();
        let flows = h.flows();
        assert_eq!(flows.len(), 1);
        assert_eq!(flows[&id].counters.packets, 4, "same entry, same counters");
        assert!(flows[&id]
            .actions
            .iter()
            .all(|a| !matches!(a, DpAction::Output(_))));
        assert_eq!(br.offload_status().unwrap().manager.modified, 1);
    }

    #[test]
    fn a_full_engine_refuses_and_the_limit_is_reported() {
        let (mut br, _h, hx, _ht) = bridge(1, &[]);
        let now = Instant::now();
        br.add_flows_str(
            "priority=10,udp,tp_src=1,actions=output:t\n\
             priority=10,udp,tp_src=2,actions=output:t",
            now,
        )
        .unwrap();
        hx.inject(&udp(1));
        hx.inject(&udp(2));
        br.run_until_idle(now);
        assert_eq!(
            placement(&br, 2),
            Some(Placement::Userspace("flow-map-full"))
        );
        let l = br.limits();
        assert_eq!(
            (l.kernel_max_flows, l.kernel_flows, l.kernel_full),
            (Some(1), 1, 1)
        );
    }

    #[test]
    fn a_port_the_engine_fails_to_take_works_through_userspace_and_del_forgets_ports() {
        let (mut br, h, hx, ht) = bridge(16, &["t"]);
        assert_eq!(h.ports().into_values().collect::<Vec<_>>(), ["x"]);
        let now = Instant::now();
        br.add_flow_str("priority=10,udp,tp_src=1,actions=output:t", now)
            .unwrap();
        hx.inject(&udp(1));
        br.run_until_idle(now);
        assert_eq!(ht.take_tx().len(), 1, "still forwarded");
        assert_eq!(
            placement(&br, 1),
            Some(Placement::Userspace("port:unknown"))
        );
        // Port del: the engine forgets it, and no entry through it stays.
        let (pt2, _) = MemPort::new("t2");
        br.add_port(Box::new(Hooked(pt2, tc(9)))).unwrap();
        br.add_flow_str("priority=20,udp,tp_src=3,actions=output:t2", now)
            .unwrap();
        hx.inject(&udp(3));
        br.run_until_idle(now);
        assert!(matches!(placement(&br, 3), Some(Placement::Kernel(_))));
        assert!(h.ports().values().any(|n| n == "t2"));
        br.del_port("t2").unwrap();
        assert!(!h.ports().values().any(|n| n == "t2"));
        assert!(
            h.flows()
                .values()
                .all(|f| !f.actions.contains(&DpAction::Output(4))),
            "{:?}",
            h.flows()
        );
        // Offload off: every port leaves the engine.
        br.disable_offload();
        assert!(h.ports().is_empty() && h.flows().is_empty());
    }

    #[test]
    fn meters_reach_the_engine_and_its_counts_reach_meter_stats() {
        let mut br = Bridge::new("br-dummy", DatapathConfig::default());
        let (px, hx) = MemPort::new("x");
        let (pt, _ht) = MemPort::new("t");
        br.add_port(Box::new(Hooked(px, afxdp(7)))).unwrap();
        br.add_port(Box::new(Hooked(pt, tc(8)))).unwrap();
        let now = Instant::now();
        br.add_meter_str("meter=1,pktps,band=type=drop,rate=1000000", false, now)
            .unwrap();
        let (engine, h) = DummyOffload::new(16);
        br.enable_offload_provider(Box::new(engine), OffloadMode::Auto);
        assert_eq!(h.meters(), [1], "meters known before offload was on");
        br.add_flow_str("priority=10,udp,actions=meter:1,output:t", now)
            .unwrap();
        hx.inject(&udp(1));
        br.run_until_idle(now);
        let flows = h.flows();
        let (&id, f) = flows.iter().next().expect("offloaded");
        assert!(f.actions.contains(&DpAction::Meter(1)));
        h.hit(id, 5, 500);
        let m = &br.meter_stats(Some(1), now)[0];
        assert_eq!(m.packets_in, 6, "userspace's packet and the engine's five");
        br.del_meters(Some(1), now);
        assert!(h.meters().is_empty());
        assert!(
            h.flows()
                .values()
                .all(|f| !f.actions.contains(&DpAction::Meter(1))),
            "no entry runs a deleted meter: {:?}",
            h.flows()
        );
    }

    const SYN: u16 = 0x02;
    const ACK: u16 = 0x10;
    const PSH: u16 = 0x08;
    const FIN: u16 = 0x01;

    /// OVS's stateful firewall: p1 opens connections to p2.
    const FIREWALL: &str = "\
table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)
table=1,priority=1,actions=drop
table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit),output:p2
table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2
table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1
";

    /// A TCP segment with these MACs, addresses, ports, flags, sequence
    /// and acknowledgement numbers (window 65535).
    fn tcp_frame(
        (sm, dm): ([u8; 6], [u8; 6]),
        (si, di): (Ipv4Addr, Ipv4Addr),
        (sp, dp): (u16, u16),
        flags: u16,
        (seq, ack): (u32, u32),
    ) -> Vec<u8> {
        FrameBuilder::new(sm, dm)
            .ipv4(si, di)
            .tcp(sp, dp, flags)
            .tcp_seq(seq)
            .tcp_ack(ack)
            .tcp_window(65535)
            .build()
    }

    /// A TCP segment between 198.18.0.1:`port` (p1's host, `from_a`) and
    /// 198.18.0.2:80.
    fn seg(from_a: bool, port: u16, flags: u16, seq: u32, ack: u32) -> Vec<u8> {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let (sm, dm, si, di, sp, dp) = if from_a {
            (MAC_A, MAC_B, a, b, port, 80)
        } else {
            (MAC_B, MAC_A, b, a, 80, port)
        };
        tcp_frame((sm, dm), (si, di), (sp, dp), flags, (seq, ack))
    }

    struct CtLab {
        br: Bridge,
        eng: DummyHandle,
        p: [MemHandle; 2],
        now: Instant,
    }

    impl CtLab {
        fn new() -> CtLab {
            CtLab::with("", FIREWALL)
        }

        /// A lab with `groups` (if any) and `flows` instead of the
        /// firewall.
        fn with(groups: &str, flows: &str) -> CtLab {
            CtLab::sized(groups, flows, 1000)
        }

        /// As [`CtLab::with`], the engine holding `max_flows` entries.
        fn sized(groups: &str, flows: &str, max_flows: usize) -> CtLab {
            let now = Instant::now();
            let mut br = Bridge::new("br-ct", DatapathConfig::default());
            let (p1, h1) = MemPort::new("p1");
            let (p2, h2) = MemPort::new("p2");
            br.add_port(Box::new(Hooked(p1, tc(8)))).unwrap();
            br.add_port(Box::new(Hooked(p2, tc(9)))).unwrap();
            let (engine, eng) = DummyOffload::new(max_flows);
            br.enable_offload_provider(Box::new(engine), OffloadMode::Auto);
            if !groups.is_empty() {
                br.add_groups_str(groups, false, now).unwrap();
            }
            br.add_flows_str(flows, now).unwrap();
            br.set_ct_setup(true);
            br.set_ct_setup_nat(true);
            CtLab {
                br,
                eng,
                p: [h1, h2],
                now,
            }
        }

        /// The first connection (port 40000): its handshake goes through
        /// userspace and caches the flows the next connections' set-up
        /// looks up. Returns the initial sequence numbers (client, server).
        fn first_handshake(&mut self) -> (u32, u32) {
            let (x, y) = (1000, 5000);
            for (a, f, s, k) in [
                (true, SYN, x, 0),
                (false, SYN | ACK, y, x + 1),
                (true, ACK, x + 1, y + 1),
            ] {
                assert_eq!(self.send(a, 40000, f, s, k), 1);
            }
            (x, y)
        }

        /// One segment through the bridge: how many frames left the
        /// other side.
        fn send(&mut self, from_a: bool, port: u16, flags: u16, seq: u32, ack: u32) -> usize {
            let (i, o) = if from_a { (0, 1) } else { (1, 0) };
            self.p[i].inject(&seg(from_a, port, flags, seq, ack));
            self.br.run_until_idle(self.now);
            self.p[o].take_tx().len()
        }

        /// The engine's connection entries (exact addresses; the dummy
        /// engine also takes the megaflows of recirculated passes).
        fn ct_entries(&self) -> BTreeMap<u64, DummyFlow> {
            let mut fl = self.eng.flows();
            fl.retain(|_, f| f.matching.mask().0.nw_src == u32::MAX);
            fl
        }

        /// The engine's entries of the connection from `port`: (orig,
        /// reply, reply SYN-ACK) ids.
        fn entries(&self, port: u16) -> Option<(u64, u64, u64)> {
            let fl = self.ct_entries();
            let find = |orig: bool, syn: bool| {
                fl.iter()
                    .find(|(_, f)| {
                        let k = f.matching.key();
                        (if orig { k.tp_src } else { k.tp_dst }) == port
                            && (k.tcp_flags & SYN != 0) == syn
                    })
                    .map(|(id, _)| *id)
            };
            Some((find(true, false)?, find(false, false)?, find(false, true)?))
        }

        /// `dump-conntrack -s`'s line of the connection from `port`.
        fn conn(&mut self, port: u16) -> Option<String> {
            self.br.sync_ct_offloads();
            self.br
                .conntrack()
                .dump(None, Instant::now())
                .iter()
                .map(|e| e.format(false, true))
                .find(|l| l.contains(&format!("sport={port},")))
        }
    }

    /// Issue 36: after a first connection has cached the flows, a new
    /// one's SYN installs the entries of both directions, the handshake,
    /// data and close run in the engine, and the tracker learns their
    /// flags at the sync: counted, TIME_WAIT, entries gone. A flush, a
    /// rule change and a new SYN on the same tuple remove them too.
    #[test]
    fn connections_are_set_up_in_the_engine_at_their_first_packet() {
        let mut lab = CtLab::new();
        let (x, y) = (1000, 5000);
        // The first connection goes through userspace and caches the flows.
        for (a, f, s, k) in [
            (true, SYN, x, 0),
            (false, SYN | ACK, y, x + 1),
            (true, ACK, x + 1, y + 1),
            (false, ACK | FIN, y + 1, x + 1),
            (true, ACK | FIN, x + 1, y + 2),
            (false, ACK, y + 2, x + 2),
        ] {
            assert_eq!(lab.send(a, 40000, f, s, k), 1);
        }
        assert!(lab.ct_entries().is_empty(), "{:#?}", lab.ct_entries());
        assert_eq!(lab.br.ct_offloads().set_up, 0);
        let upcalls = lab.br.dp_stats().upcalls;

        // The second: its SYN is forwarded by the daemon and sets it up.
        assert_eq!(lab.send(true, 40001, SYN, x, 0), 1);
        assert_eq!(
            lab.br.dp_stats().upcalls,
            upcalls,
            "the SYN hit cached flows"
        );
        assert_eq!(lab.br.ct_offloads().set_up, 1);
        let (o, r, sa) = lab.entries(40001).expect("three entries");
        let fl = lab.ct_entries();
        assert_eq!(fl.len(), 3, "{fl:#?}");
        // SYN and RST go up; FIN stays; the SYN-ACK entry is exact.
        for (id, mask, value) in [(o, 0x016, ACK), (r, 0x016, ACK), (sa, 0x017, SYN | ACK)] {
            let m = fl[&id].matching;
            assert_eq!(
                (m.mask().0.tcp_flags, m.key().tcp_flags),
                (mask, value),
                "{m:?}"
            );
            assert_eq!((m.mask().0.nw_src, m.mask().0.tp_dst), (u32::MAX, 0xffff));
        }
        assert_eq!(
            fl[&o].actions,
            vec![DpAction::Output(fl[&r].matching.key().in_port)]
        );
        assert_eq!(
            fl[&r].actions,
            vec![DpAction::Output(fl[&o].matching.key().in_port)]
        );
        let line = lab.conn(40001).unwrap();
        assert!(line.contains("state=SYN_SENT"), "{line}");

        // The engine carries the rest: SYN-ACK, ACK, request, response, the
        // close both ways.
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.eng.hit_tcp(o, 2, 120, ACK | PSH);
        lab.eng.hit_tcp(r, 1, 400, ACK | PSH);
        let line = lab.conn(40001).unwrap();
        assert!(line.contains("state=ESTABLISHED"), "{line}");
        lab.eng.hit_tcp(r, 1, 60, ACK | FIN);
        lab.eng.hit_tcp(o, 2, 120, ACK | FIN);
        let line = lab.conn(40001).unwrap();
        assert!(line.contains("state=TIME_WAIT"), "{line}");
        assert!(
            line.contains("dport=80,packets=5,") && line.contains("dport=40001,packets=3,"),
            "the engine's packets credited: {line}"
        );
        assert!(lab.ct_entries().is_empty(), "closed: entries gone");
        assert!(lab.br.ct_offloads().is_empty());

        // A flush removes a live connection's entries.
        assert_eq!(lab.send(true, 40002, SYN, x, 0), 1);
        let (_, _, sa) = lab.entries(40002).unwrap();
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.br.flush_conntrack(&Default::default());
        assert!(lab.ct_entries().is_empty(), "{:#?}", lab.ct_entries());
        assert!(lab.conn(40002).is_none());

        // A rule change: the reply direction's entries go before it returns.
        assert_eq!(lab.send(true, 40003, SYN, x, 0), 1);
        assert!(lab.entries(40003).is_some());
        lab.br
            .add_flow_str(
                "table=1,priority=20,in_port=p2,ip,ct_state=+trk+est,actions=drop",
                lab.now,
            )
            .unwrap();
        let fl = lab.ct_entries();
        assert!(
            fl.values().all(|f| f.matching.key().tp_dst != 40003),
            "{fl:#?}"
        );
        // ... and the reply that would have matched them goes up, dropped.
        assert_eq!(lab.send(false, 40003, SYN | ACK, y, x + 1), 0);
        lab.br
            .del_flows_str("table=1,priority=20,in_port=p2,ip,ct_state=+trk+est")
            .unwrap();

        // A new SYN on the tuple of a connection the engine closed (before
        // any sync told the tracker): the old entries go, the new
        // connection is set up afresh.
        assert_eq!(lab.send(true, 40004, SYN, x, 0), 1);
        let (o, r, sa) = lab.entries(40004).unwrap();
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.eng.hit_tcp(o, 3, 180, ACK | FIN);
        lab.eng.hit_tcp(r, 2, 120, ACK | FIN);
        assert_eq!(lab.send(true, 40004, SYN, x + 7, 0), 1);
        let (o2, r2, sa2) = lab.entries(40004).expect("set up afresh");
        assert!(![o, r, sa].contains(&o2) && ![o, r, sa].contains(&r2) && sa2 != sa);
        assert_eq!(lab.eng.flows()[&o2].counters.packets, 0);
        let line = lab.conn(40004).unwrap();
        assert!(line.contains("state=SYN_SENT"), "{line}");

        // 20 ms after its set-up a connection is looked at again when
        // frames come in: one the engine closed goes then, before any sync.
        assert_eq!(lab.send(true, 40005, SYN, x, 0), 1);
        let (o, r, sa) = lab.entries(40005).unwrap();
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.eng.hit_tcp(o, 2, 120, ACK | FIN);
        lab.eng.hit_tcp(r, 2, 120, ACK | FIN);
        lab.now += std::time::Duration::from_millis(30);
        // Any frame will do: p2 may not open connections, so this one is
        // dropped.
        assert_eq!(lab.send(false, 40099, SYN, y, 0), 0);
        assert!(lab.entries(40005).is_none(), "{:#?}", lab.ct_entries());
        let line = lab
            .br
            .conntrack()
            .dump(None, lab.now)
            .iter()
            .map(|e| e.format(false, false))
            .find(|l| l.contains("sport=40005,"))
            .unwrap();
        assert!(line.contains("state=TIME_WAIT"), "{line}");
        // The one still open is left to the sync.
        assert!(lab.entries(40004).is_some());
    }

    /// The set-up poll removes the entries of the connections it finds
    /// closed in one batch (a kernel engine's `BPF_MAP_DELETE_BATCH`):
    /// three per connection, none one at a time, and the counters it read
    /// before are credited as the entries' last.
    #[test]
    fn the_poll_removes_closed_connections_in_one_batch() {
        const N: u16 = 5;
        let mut lab = CtLab::new();
        let (x, y) = lab.first_handshake();
        let mut ids = Vec::new();
        for port in 40100..40100 + N {
            assert_eq!(lab.send(true, port, SYN, x, 0), 1);
            let (o, r, sa) = lab.entries(port).expect("set up");
            lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
            lab.eng.hit_tcp(o, 2, 120, ACK | FIN);
            lab.eng.hit_tcp(r, 2, 120, ACK | FIN);
            ids.extend([o, r, sa]);
        }
        let (batches, singles) = lab.eng.removals();
        lab.now += std::time::Duration::from_millis(30);
        // Any frame will do (dropped: p2 may not open connections); the
        // poll runs after it.
        assert_eq!(lab.send(false, 40099, SYN, y, 0), 0);
        let fl = lab.eng.flows();
        assert!(ids.iter().all(|id| !fl.contains_key(id)), "{fl:#?}");
        let (now_batches, now_singles) = lab.eng.removals();
        assert_eq!(
            now_batches[batches.len()..],
            [3 * N as usize],
            "one batch of every entry"
        );
        assert_eq!(now_singles, singles, "no removal one at a time");
        for port in 40100..40100 + N {
            let line = lab.conn(port).unwrap();
            assert!(line.contains("state=TIME_WAIT"), "{line}");
            assert!(
                line.contains("dport=80,packets=3,")
                    && line.contains(&format!("dport={port},packets=3,")),
                "the entries' last counters credited: {line}"
            );
        }
    }

    /// The entries of a set-up connection, by id: packets and flags.
    fn counted(lab: &CtLab, ids: [u64; 3]) -> Vec<(u64, u16)> {
        let fl = lab.eng.flows();
        ids.iter()
            .map(|id| {
                fl.get(id).map_or((u64::MAX, 0), |f| {
                    (f.counters.packets, f.counters.tcp_flags)
                })
            })
            .collect()
    }

    /// A set-up connection that expires while its entries are still in
    /// the engine (no sync since it closed there): a new SYN on its tuple
    /// gets entries of its own, with nothing of the old one's counters or
    /// flags (the engine replaces an entry with the same match in place),
    /// and they outlive the old connection's clean-up.
    #[test]
    fn an_expired_set_up_connection_leaves_nothing_to_its_successor() {
        let mut lab = CtLab::new();
        let (x, _) = lab.first_handshake();
        assert_eq!(lab.send(true, 40010, SYN, x, 0), 1);
        let (o, r, sa) = lab.entries(40010).expect("set up");
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.eng.hit_tcp(o, 3, 180, ACK | FIN);
        lab.eng.hit_tcp(r, 2, 120, ACK | FIN);
        // Long after: the tracker never heard (no sync), the connection
        // expired in its SYN_SENT timer.
        lab.now += std::time::Duration::from_secs(120);
        assert_eq!(lab.send(true, 40010, SYN, x + 9, 0), 1);
        let (o2, r2, sa2) = lab.entries(40010).expect("set up afresh");
        assert_eq!(
            counted(&lab, [o2, r2, sa2]),
            vec![(0, 0); 3],
            "nothing inherited: {:#?}",
            lab.ct_entries()
        );
        assert_eq!(lab.ct_entries().len(), 3, "{:#?}", lab.ct_entries());
        // The next sync (the old one's clean-up) leaves them.
        lab.br.sync_ct_offloads();
        assert_eq!(lab.entries(40010), Some((o2, r2, sa2)));
        let line = lab
            .br
            .conntrack()
            .dump(None, lab.now)
            .iter()
            .map(|e| e.format(false, false))
            .find(|l| l.contains("sport=40010,"))
            .unwrap();
        assert!(line.contains("state=SYN_SENT"), "{line}");
    }

    /// The reply's SYN-ACK entry reuses the ACK's flows only when they did
    /// not look at the SYN bit. Here a rule marks the reply's SYN-ACKs
    /// (`mod_nw_tos`): the ACK's flows then match on it, and the SYN-ACK
    /// entry gets the SYN-ACK's own actions (with the reuse unchecked it
    /// would forward the SYN-ACK unmarked, as the ACK).
    #[test]
    fn a_syn_ack_rule_of_its_own_keeps_its_own_entry_actions() {
        let flows = format!(
            "{FIREWALL}table=1,priority=20,in_port=p2,tcp,tcp_flags=+syn+ack,\
             ct_state=+trk+est,actions=mod_nw_tos:32,output:p1\n"
        );
        let mut lab = CtLab::with("", &flows);
        let (x, _) = lab.first_handshake();
        assert_eq!(lab.send(true, 40020, SYN, x, 0), 1);
        let (_, r, sa) = lab.entries(40020).expect("set up");
        let fl = lab.ct_entries();
        let out = fl[&r].actions.clone();
        assert_eq!(out.len(), 1, "{fl:#?}");
        assert_eq!(fl[&sa].actions.len(), 2, "{fl:#?}");
        assert_eq!(fl[&sa].actions.last(), out.last(), "{fl:#?}");
        assert_ne!(fl[&sa].actions, out, "{fl:#?}");
    }

    /// The other half of the reuse check: a table-0 rule of the reply's
    /// SYN-ACKs' own (here a `ct(commit)`, not the plain "track, then
    /// recirculate" a set-up composes) makes the reply ACK's first-pass
    /// flow look at the SYN bit, so the SYN-ACK's first pass is looked up,
    /// found not plain, and the set-up refused (`ct:setup-first-pass`):
    /// nothing installed, the connection carried in userspace. With the
    /// reuse unchecked on the first pass, the SYN-ACK would take the ACK's
    /// plain first pass and be set up without its commit.
    #[test]
    fn a_syn_ack_first_pass_of_its_own_refuses_the_set_up() {
        let flows = format!(
            "{FIREWALL}table=0,priority=200,in_port=p2,tcp,tcp_flags=+syn+ack,\
             ct_state=-trk,actions=ct(commit,table=1)\n"
        );
        let mut lab = CtLab::with("", &flows);
        let (x, y) = lab.first_handshake();
        let refused = |lab: &CtLab| {
            let r = &lab.br.ct_offloads().setup_refused;
            r.get("ct:setup-first-pass").copied().unwrap_or(0)
        };
        let before = refused(&lab);
        assert_eq!(lab.send(true, 40020, SYN, x, 0), 1);
        assert!(lab.ct_entries().is_empty(), "{:#?}", lab.ct_entries());
        assert!(lab.entries(40020).is_none());
        assert_eq!(refused(&lab), before + 1);
        assert_eq!(lab.br.ct_offloads().set_up, 0);
        // The connection is the tracker's: its SYN-ACK goes up.
        assert_eq!(lab.send(false, 40020, SYN | ACK, y, x + 1), 1);
        let line = lab.conn(40020).unwrap();
        assert!(line.contains("state=ESTABLISHED"), "{line}");
    }

    /// A bare SYN on a connection set up in the kernel is judged against
    /// what the engine saw: a late SYN after the handshake is part of the
    /// established connection (its entries stay), a retransmitted one
    /// before the SYN-ACK is the same connection.
    #[test]
    fn a_late_or_retransmitted_syn_keeps_a_set_up_connection() {
        let mut lab = CtLab::new();
        let (x, _) = lab.first_handshake();
        // Retransmitted before any answer.
        assert_eq!(lab.send(true, 40011, SYN, x, 0), 1);
        let ids = lab.entries(40011).expect("set up");
        assert_eq!(lab.send(true, 40011, SYN, x, 0), 1);
        assert_eq!(lab.entries(40011), Some(ids), "the same connection");
        assert_eq!(lab.br.ct_offloads().set_up, 1);
        // Handshake done in the engine, then a late SYN: forwarded as
        // part of the connection, which stays ESTABLISHED with its entries.
        let (o, r, sa) = ids;
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.eng.hit_tcp(o, 1, 60, ACK);
        lab.eng.hit_tcp(r, 1, 60, ACK);
        assert_eq!(lab.send(true, 40011, SYN, x, 0), 1);
        assert_eq!(lab.entries(40011), Some(ids));
        assert_eq!(lab.br.ct_offloads().set_up, 1);
        let line = lab.conn(40011).unwrap();
        assert!(line.contains("state=ESTABLISHED"), "{line}");
    }

    /// A set-up whose commit fails (the engine could not write the entries
    /// staged since `begin_ct`): every entry offloaded for it goes, the
    /// set-up is refused for the engine's reason and counted refused (not
    /// installed and removed), and the connection goes on in userspace;
    /// the next SYN, with the commit working again, is set up.
    #[test]
    fn a_failed_commit_leaves_no_entry_and_counts_the_refusal() {
        let mut lab = CtLab::new();
        let (x, y) = lab.first_handshake();
        let (flows, counters) = (lab.eng.flows(), lab.eng.counters());
        let (commits, set_up) = (lab.eng.ct_commits(), lab.br.ct_offloads().set_up);
        let refused = |lab: &CtLab| {
            let r = &lab.br.ct_offloads().setup_refused;
            r.get("flow-map-full").copied()
        };
        assert_eq!(refused(&lab), None);
        lab.eng.fail_ct_commits(Some("flow-map-full"));
        assert_eq!(lab.send(true, 40030, SYN, x, 0), 1, "still forwarded");
        assert_eq!(lab.eng.ct_commits(), commits + 1, "the set-up committed");
        let ids: Vec<u64> = lab.eng.flows().keys().copied().collect();
        assert_eq!(ids, flows.keys().copied().collect::<Vec<_>>());
        assert!(lab.entries(40030).is_none(), "{:#?}", lab.ct_entries());
        assert_eq!(refused(&lab), Some(1));
        assert_eq!(lab.br.ct_offloads().set_up, set_up);
        let now = lab.eng.counters();
        assert_eq!(
            (now.installed, now.removed, now.refused),
            (counters.installed, counters.removed, counters.refused + 3),
            "{now:?}"
        );
        // The connection is the tracker's: its SYN-ACK goes up.
        assert_eq!(lab.send(false, 40030, SYN | ACK, y, x + 1), 1);
        lab.eng.fail_ct_commits(None);
        assert_eq!(lab.send(true, 40031, SYN, x, 0), 1);
        assert!(lab.entries(40031).is_some(), "{:#?}", lab.ct_entries());
        assert_eq!(lab.br.ct_offloads().set_up, set_up + 1);
        assert_eq!(refused(&lab), Some(1));
    }

    /// Unanswered set-up connections hold a bounded share of the map, and
    /// their entries go once the handshake is overdue; the connection goes
    /// on in userspace.
    #[test]
    fn unanswered_set_ups_are_bounded_and_time_out() {
        let mut lab = CtLab::new();
        let (x, y) = lab.first_handshake();
        lab.br.ct_offloads_mut().setup_pending_max = 1;
        assert_eq!(lab.send(true, 40020, SYN, x, 0), 1);
        let (_, _, sa) = lab.entries(40020).expect("set up");
        assert_eq!(lab.send(true, 40021, SYN, x, 0), 1, "still forwarded");
        assert!(lab.entries(40021).is_none());
        let cto = lab.br.ct_offloads();
        assert_eq!(cto.setup_refused.get("ct:setup-pending-full"), Some(&1));
        // 40020 answered: room again once the poll has seen it.
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.now += std::time::Duration::from_millis(30);
        assert_eq!(lab.send(false, 40099, SYN, y, 0), 0);
        assert_eq!(lab.send(true, 40022, SYN, x, 0), 1);
        assert!(lab.entries(40022).is_some());
        assert!(lab.entries(40020).is_some(), "answered: left to the sync");
        // 40022 is never answered: its entries go after the handshake
        // limit, the connection stays in the tracker.
        lab.now += std::time::Duration::from_millis(30);
        assert_eq!(lab.send(false, 40099, SYN, y, 0), 0);
        assert!(lab.entries(40022).is_some());
        let (batches, singles) = lab.eng.removals();
        lab.now += crate::datapath::ct_offload::SETUP_HANDSHAKE_MAX;
        assert_eq!(lab.send(false, 40099, SYN, y, 0), 0);
        assert!(lab.entries(40022).is_none(), "{:#?}", lab.ct_entries());
        assert_eq!(lab.br.ct_offloads().setup_timeouts, 1);
        // Still open: its three entries went at once, not in the poll's
        // batch (they would forward a SYN-ACK unseen until the commit).
        assert_eq!(lab.eng.removals(), (batches, singles + 3));
        // A late SYN-ACK goes through userspace.
        assert_eq!(lab.send(false, 40022, SYN | ACK, y, x + 1), 1);
        // One answered by a SYN-ACK that went through userspace (it missed
        // its entry), then the ACK in the engine: not timed out.
        lab.br.ct_offloads_mut().setup_pending_max = 10;
        assert_eq!(lab.send(true, 40023, SYN, x, 0), 1);
        let (o, _, _) = lab.entries(40023).expect("set up");
        assert_eq!(lab.send(false, 40023, SYN | ACK, y, x + 1), 1);
        lab.eng.hit_tcp(o, 1, 60, ACK);
        lab.now += std::time::Duration::from_millis(30);
        assert_eq!(lab.send(false, 40099, SYN, y, 0), 0);
        lab.now += crate::datapath::ct_offload::SETUP_HANDSHAKE_MAX;
        assert_eq!(lab.send(false, 40099, SYN, y, 0), 0);
        assert!(lab.entries(40023).is_some(), "answered: kept");
        assert_eq!(lab.br.ct_offloads().setup_timeouts, 1);
    }

    /// Issue 36's regression: the poll of set-up connections must keep
    /// pace with the set-ups. Gated to 64 connections every 2 ms (and,
    /// on the bench's VM, to about a dozen by its 250-µs slice), it fell
    /// behind under wrk's load: connections it had not looked at held
    /// their entries and counted as unanswered until the tick, the cap on
    /// those refused every later SYN (`ct:setup-pending-full`: half the
    /// frames went up), and the tick's sync removed thousands of entries
    /// in one stall; set-up lowered connections/s. Here 3,000 connections
    /// are set up 20 µs apart (50,000 a second) and each is answered and
    /// closed in the engine at once: every one must be set up (none
    /// refused by a cap of 1,200 unanswered), and no more than about the
    /// last 20 ms of them (1,000) may hold entries at any moment.
    #[test]
    fn the_poll_keeps_pace_with_the_set_ups() {
        let mut lab = CtLab::sized("", FIREWALL, 20_000);
        // `ct_setup_bpf` is on (the default): the dummy engine takes no
        // templates, so no set-up may count a template refusal
        // (`setup_refused` unchanged below).
        lab.br.ct_offloads_mut().setup_bpf = true;
        let (x, _) = lab.first_handshake();
        lab.br.ct_offloads_mut().setup_pending_max = 1200;
        // (The first connection's SYN found nothing cached.)
        let refused = lab.br.ct_offloads().setup_refused.clone();
        let mut most = 0;
        for port in 41_000..44_000u16 {
            lab.now += std::time::Duration::from_micros(20);
            assert_eq!(lab.send(true, port, SYN, x, 0), 1);
            let new = lab.eng.newest(3);
            for (id, f) in &new {
                let k = f.matching.key();
                assert!(k.tp_src == port || k.tp_dst == port, "{new:#?}");
                let flags = if k.tcp_flags & SYN != 0 {
                    SYN | ACK
                } else {
                    ACK | FIN
                };
                lab.eng.hit_tcp(*id, 1, 60, flags);
            }
            most = most.max(lab.br.ct_offloads().len());
        }
        let cto = lab.br.ct_offloads();
        assert_eq!(cto.setup_refused, refused);
        assert_eq!(cto.set_up, 3000);
        assert!(
            most <= 3 * 1_100,
            "entries of closed connections piled up: {most}"
        );
        assert_eq!(cto.setup_timeouts, 0);
    }

    /// OVS's load-balancer pattern (the bench's `--scenario lb`): the
    /// VIP's new connections go to a select group whose bucket commits
    /// them with a DNAT (port too) and goes on in table 2, which rewrites
    /// the destination MAC; later packets are translated by the first
    /// pass's `ct(nat)` and forwarded by the `+trk+est` flows.
    const LB: &str = "\
table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)
table=1,priority=1,actions=drop
table=1,priority=20,in_port=p1,tcp,nw_dst=198.18.0.100,tp_dst=80,ct_state=+trk+new,actions=group:1
table=1,priority=10,ip,ct_state=+trk+est,actions=resubmit(,2)
table=2,priority=1,actions=drop
table=2,priority=10,ip,nw_dst=198.18.0.2,actions=mod_dl_dst:02:00:00:00:00:0b,output:p2
table=2,priority=10,ip,nw_dst=198.18.0.1,actions=output:p1
";
    const LB_GROUP: &str =
        "group_id=1,type=select,bucket=actions=ct(commit,nat(dst=198.18.0.2:8080),table=2)";
    const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 100);
    const MAC_VIP: [u8; 6] = [0x02, 0, 0, 0, 0, 0x64];

    /// A TCP segment of a load-balanced connection as it is on the wire
    /// on its side: 198.18.0.1:`port` -> VIP:80 from p1's host (to the
    /// VIP's MAC), 198.18.0.2:8080 -> 198.18.0.1:`port` from the backend.
    fn lb_seg(from_a: bool, port: u16, flags: u16, seq: u32, ack: u32) -> Vec<u8> {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let (sm, dm, si, di, sp, dp) = if from_a {
            (MAC_A, MAC_VIP, a, VIP, port, 80)
        } else {
            (MAC_B, MAC_A, b, a, 8080, port)
        };
        tcp_frame((sm, dm), (si, di), (sp, dp), flags, (seq, ack))
    }

    impl CtLab {
        /// One load-balanced segment through the bridge: the frames that
        /// left the other side.
        fn send_lb(
            &mut self,
            from_a: bool,
            port: u16,
            flags: u16,
            seq: u32,
            ack: u32,
        ) -> Vec<Vec<u8>> {
            let (i, o) = if from_a { (0, 1) } else { (1, 0) };
            self.p[i].inject(&lb_seg(from_a, port, flags, seq, ack));
            self.br.run_until_idle(self.now);
            self.p[o].take_tx()
        }
    }

    /// Addresses and ports of a frame: (src, dst, sport, dport).
    fn tuple_of(f: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u16) {
        let ip = |o: usize| Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]);
        let port = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
        (ip(26), ip(30), port(34), port(36))
    }

    /// Issue 36 with DNAT: a load-balanced connection's SYN installs
    /// entries that translate as userspace does — the originator's to the
    /// backend (address, port and MAC), the backend's replies back from
    /// the VIP — matched on the untranslated packets as they arrive; the
    /// engine then carries the connection and the tracker learns it.
    #[test]
    fn dnat_connections_are_set_up_in_the_engine() {
        let mut lab = CtLab::with(LB_GROUP, LB);
        let (x, y) = (1000, 5000);
        let backend = Ipv4Addr::new(198, 18, 0, 2);
        // The first connection goes through userspace and caches the
        // flows; its frames are translated both ways.
        let out = lab.send_lb(true, 40000, SYN, x, 0);
        assert_eq!(out.len(), 1);
        assert_eq!(
            tuple_of(&out[0]),
            (Ipv4Addr::new(198, 18, 0, 1), backend, 40000, 8080)
        );
        assert_eq!(out[0][..6], MAC_B);
        let back = lab.send_lb(false, 40000, SYN | ACK, y, x + 1);
        assert_eq!(back.len(), 1);
        assert_eq!(
            tuple_of(&back[0]),
            (VIP, Ipv4Addr::new(198, 18, 0, 1), 80, 40000)
        );
        assert_eq!(lab.send_lb(true, 40000, ACK, x + 1, y + 1).len(), 1);
        assert_eq!(lab.br.ct_offloads().set_up, 0);

        // The second: set up in the engine at its SYN.
        assert_eq!(lab.send_lb(true, 40001, SYN, x, 0).len(), 1);
        assert_eq!(
            lab.br.ct_offloads().set_up,
            1,
            "{:?}",
            lab.br.ct_offloads().setup_refused
        );
        let (o, r, sa) = lab.entries(40001).expect("three entries");
        let fl = lab.ct_entries();
        assert_eq!(fl.len(), 3, "{fl:#?}");
        let (p1, p2) = (
            fl[&r].actions.last().cloned(),
            fl[&o].actions.last().cloned(),
        );
        let (Some(DpAction::Output(p1)), Some(DpAction::Output(p2))) = (p1, p2) else {
            panic!("{fl:#?}");
        };
        // The originator's: matched as sent (to the VIP), translated.
        let k = fl[&o].matching.key();
        assert_eq!((k.in_port, k.nw_dst, k.tp_dst), (p1, u32::from(VIP), 80));
        assert_eq!(
            fl[&o].actions,
            vec![
                DpAction::SetIpv4Dst(u32::from(backend)),
                DpAction::SetTpDst(8080),
                DpAction::SetEthDst(MAC_B),
                DpAction::Output(p2)
            ]
        );
        // The backend's: matched as it answers, from the VIP again.
        for id in [r, sa] {
            let k = fl[&id].matching.key();
            assert_eq!(
                (k.in_port, k.nw_src, k.tp_src, k.tp_dst),
                (p2, u32::from(backend), 8080, 40001)
            );
            assert_eq!(
                fl[&id].actions,
                vec![
                    DpAction::SetIpv4Src(u32::from(VIP)),
                    DpAction::SetTpSrc(80),
                    DpAction::Output(p1)
                ]
            );
        }
        // The engine carries the rest; the tracker follows.
        lab.eng.hit_tcp(sa, 1, 60, SYN | ACK);
        lab.eng.hit_tcp(o, 2, 120, ACK | PSH);
        lab.eng.hit_tcp(r, 1, 400, ACK | PSH);
        let line = lab.conn(40001).unwrap();
        assert!(line.contains("state=ESTABLISHED"), "{line}");
        assert!(
            line.contains("dst=198.18.0.100,sport=40001,dport=80,")
                && line.contains("reply=(src=198.18.0.2,dst=198.18.0.1,sport=8080,dport=40001,"),
            "{line}"
        );
        lab.eng.hit_tcp(r, 1, 60, ACK | FIN);
        lab.eng.hit_tcp(o, 2, 120, ACK | FIN);
        let line = lab.conn(40001).unwrap();
        assert!(line.contains("state=TIME_WAIT"), "{line}");
        assert!(lab.ct_entries().is_empty(), "closed: entries gone");

        assert!(
            lab.br.ct_offloads().setup_xlates >= 1,
            "reply flows translated ahead"
        );
        // A flush removes a live load-balanced connection's entries.
        assert_eq!(lab.send_lb(true, 40002, SYN, x, 0).len(), 1);
        assert!(lab.entries(40002).is_some());
        lab.br.flush_conntrack(&Default::default());
        assert!(lab.ct_entries().is_empty(), "{:#?}", lab.ct_entries());
    }

    /// The second-pass keys of a NATed connection carry the `+dnat`
    /// (originator) and `+snat` (reply) bits its packets get from the
    /// first pass's `ct(nat)`: with rules that look at them, the entries
    /// forward as userspace does (a key without the bits would hit the
    /// `+est` drop below them).
    #[test]
    fn dnat_set_up_keys_carry_the_nat_state_bits() {
        let flows = LB.replace(
            "table=1,priority=10,ip,ct_state=+trk+est,actions=resubmit(,2)",
            "table=1,priority=15,ip,ct_state=+trk+est+dnat,actions=resubmit(,2)\n\
             table=1,priority=15,ip,ct_state=+trk+est+snat,actions=resubmit(,2)\n\
             table=1,priority=10,ip,ct_state=+trk+est,actions=drop",
        );
        let mut lab = CtLab::with(LB_GROUP, &flows);
        let (x, y) = (1000, 5000);
        assert_eq!(lab.send_lb(true, 40000, SYN, x, 0).len(), 1);
        assert_eq!(lab.send_lb(false, 40000, SYN | ACK, y, x + 1).len(), 1);
        assert_eq!(lab.send_lb(true, 40000, ACK, x + 1, y + 1).len(), 1);
        assert_eq!(lab.send_lb(true, 40001, SYN, x, 0).len(), 1);
        assert_eq!(
            lab.br.ct_offloads().set_up,
            1,
            "{:?}",
            lab.br.ct_offloads().setup_refused
        );
        let (o, r, sa) = lab.entries(40001).expect("three entries");
        let fl = lab.ct_entries();
        for id in [o, r, sa] {
            assert!(
                matches!(fl[&id].actions.last(), Some(DpAction::Output(_))),
                "{fl:#?}"
            );
        }
    }

    /// Set-up of NATed connections (on by default) turned off: the SYN is
    /// refused as `ct:setup-nat` and nothing is translated ahead.
    #[test]
    fn dnat_set_up_turned_off() {
        let mut lab = CtLab::with(LB_GROUP, LB);
        lab.br.set_ct_setup_nat(false);
        let (x, y) = (1000, 5000);
        assert_eq!(lab.send_lb(true, 40000, SYN, x, 0).len(), 1);
        assert_eq!(lab.send_lb(false, 40000, SYN | ACK, y, x + 1).len(), 1);
        assert_eq!(lab.send_lb(true, 40000, ACK, x + 1, y + 1).len(), 1);
        assert_eq!(lab.send_lb(true, 40001, SYN, x, 0).len(), 1);
        let cto = lab.br.ct_offloads();
        assert_eq!((cto.set_up, cto.setup_xlates), (0, 0));
        assert!(cto
            .setup_refused
            .get("ct:setup-nat")
            .is_some_and(|n| *n >= 1));
        assert!(lab.ct_entries().is_empty());
    }
}
