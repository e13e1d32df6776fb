//! The connection table and the per-packet driver (`process_one`,
//! `conn_not_found`, `conn_update_state`, `write_ct_md`, `set_mark`,
//! `set_label`, `conntrack_clean`, `conntrack_flush*`, `conntrack_dump*` in
//! lib/conntrack.c).
//!
//! Layout: connections live in a slab (`Vec<Option<Conn>>` plus a free
//! list) and a hashbrown map, keyed by the fixed-size [`ConnKey`], holds
//! one entry per direction pointing at the slot. Two entries per
//! connection, rather than one entry under a direction-normalised key, is
//! what OVS does (`key_node[CT_DIR_FWD/REV]`) and is what NAT needs: a
//! NATed connection's reply key is not the reversed original key, so a
//! normalised key could not find it. Looking a packet up is one hash of a
//! 44-byte `Copy` key and no allocation; zones are part of the key, which
//! makes them separate tables exactly like OVS's per-zone cmaps.

use std::time::{Duration, Instant};

use foldhash::fast::RandomState;
use hashbrown::HashMap;

use crate::conn::{self, Conn, ProtoState, Update};
use crate::error::InvalidReason;
use crate::format::{Counters, EntryView, TcpInfo};
use crate::nat::{self, NatFail};
use crate::stats::{proto_class, CtStats};
use crate::tcp::CT_WSCALE_MASK;
use crate::tuple::{self, ConnKey, Parsed};
use crate::{state, Config, ConnHandle, CtRequest, CtResult, FlushFilter, NatRewrite};

/// Map value: which slot, and whether the key is the reply direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConnRef {
    slot: u32,
    reply: bool,
}

/// Why a connection left the table (for the counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removal {
    Expired,
    /// Flushed, pushed out by `force`, or replaced by a new SYN.
    Removed,
}

/// Minimum interval between two "table full" warnings.
const LIMIT_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Most removed connections with kernel entries held for
/// [`Conntrack::take_replaced`].
const REPLACED_MAX: usize = 4096;

/// Fewest slots one [`Conntrack::sweep`] call examines.
const MIN_SWEEP_BATCH: usize = 1024;

/// The connection tracker. Single-threaded: the datapath owns it (or wraps
/// it in a lock); nothing here blocks or allocates on the established path.
pub struct Conntrack {
    cfg: Config,
    map: HashMap<ConnKey, ConnRef, RandomState>,
    slots: Vec<Option<Conn>>,
    free: Vec<u32>,
    next_id: u32,
    sweep_cursor: usize,
    stats: CtStats,
    last_limit_log: Option<Instant>,
    last_nat_log: Option<Instant>,
    /// Seed of the NAT range hash (OVS `ct->hash_basis`).
    nat_seed: RandomState,
    /// `random_uint32()` state for NAT port searches.
    rng: u64,
    /// Connections with kernel entries that left the table (see
    /// [`Conntrack::take_replaced`]).
    replaced: Vec<crate::ConnHandle>,
}

impl Conntrack {
    /// An empty tracker. The hash seed is random per tracker, because keys
    /// come from the network (hash flooding).
    pub fn new(cfg: Config) -> Self {
        Conntrack {
            cfg,
            map: HashMap::with_hasher(RandomState::default()),
            slots: Vec::new(),
            free: Vec::new(),
            next_id: 1,
            sweep_cursor: 0,
            stats: CtStats::default(),
            last_limit_log: None,
            last_nat_log: None,
            nat_seed: RandomState::default(),
            rng: {
                use std::hash::BuildHasher;
                RandomState::default().hash_one(0x006e_6174_u64) | 1
            },
            replaced: Vec::new(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Changes the connection limit (`dpctl/ct-set-maxconns`). Existing
    /// connections above a lowered limit stay until they expire.
    pub fn set_limit(&mut self, limit: usize) {
        self.cfg.limit = limit;
    }

    /// Enables or disables TCP sequence checking
    /// (`dpctl/ct-enable-tcp-seq-chk` / `ct-disable-tcp-seq-chk`).
    pub fn set_tcp_seq_chk(&mut self, enabled: bool) {
        self.cfg.tcp_seq_chk = enabled;
    }

    /// Number of connections in the table, including expired ones not yet
    /// swept (OVS's `n_conn`, which the limit is checked against).
    pub fn len(&self) -> usize {
        self.stats.connections
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters; `connections` and the per-protocol counts are live.
    pub fn stats(&self) -> CtStats {
        self.stats.clone()
    }

    /// Runs one packet through the tracker: the `ct(zone=.., commit,
    /// force, exec(set_field:..->ct_mark/ct_label))` datapath action.
    ///
    /// `dl_type` is the Ethernet type; `l3` the packet from the IP header
    /// on (trailing link-layer padding is trimmed using the IP length).
    /// Any input is accepted: what cannot be parsed is `+trk+inv` and
    /// counted under its [`InvalidReason`]. Non-IP `dl_type` is `+trk+inv`
    /// too (OVS never installs `ct` on non-IP flows, and its
    /// `conntrack_execute` marks such a packet invalid).
    ///
    /// Each call starts from an empty `ct_state` (OVS carries the previous
    /// state only within one zone's recirculation fast path, which the
    /// caller owns).
    pub fn process(&mut self, dl_type: u16, l3: &[u8], req: &CtRequest, now: Instant) -> CtResult {
        let zone = req.zone;
        let p = match tuple::extract(dl_type, l3, zone) {
            Ok(p) => p,
            Err(reason) => {
                // conntrack_execute: write_ct_md(pkt, zone, NULL, NULL, NULL).
                self.stats.invalid[reason.index()] += 1;
                return CtResult {
                    state: state::INV | state::TRK,
                    zone,
                    ..CtResult::default()
                };
            }
        };

        let mut found = self.lookup(&p.key, now);
        // "Delete found entry if in wrong direction. 'force' implies commit."
        if req.force {
            if let Some((slot, true)) = found {
                self.remove(slot, Removal::Removed);
                found = None;
            }
        }

        let mut ct_state = 0;
        let mut conn_slot = None;
        let mut invalid = None;
        let mut create = false;
        match found {
            Some((slot, reply)) if p.icmp_related => {
                // conn_update_state: related ICMP errors do not run the
                // state machine and do not refresh the timeout.
                ct_state |= state::REL;
                if reply {
                    ct_state |= state::RPL;
                }
                conn_slot = Some(slot);
            }
            Some((slot, reply)) => {
                let cfg = &self.cfg;
                let res = match self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
                    Some(c) => c.update(&p, reply, now, &cfg.timeouts, cfg.tcp_seq_chk),
                    None => Update::New,
                };
                match res {
                    Update::Valid(_) => {
                        ct_state |= state::EST;
                        if reply {
                            ct_state |= state::RPL;
                        }
                        self.count(slot, reply, &p);
                        conn_slot = Some(slot);
                    }
                    Update::ValidNew(_) => {
                        ct_state |= state::NEW;
                        self.count(slot, reply, &p);
                        conn_slot = Some(slot);
                    }
                    Update::InvalidFlags => {
                        invalid = Some(InvalidReason::TcpFlags);
                        conn_slot = Some(slot);
                    }
                    Update::InvalidWindow => {
                        invalid = Some(InvalidReason::TcpWindow);
                        conn_slot = Some(slot);
                    }
                    Update::New => {
                        // Its kernel entries, if any, are handed to
                        // `take_replaced` by `remove`.
                        self.remove(slot, Removal::Removed);
                        create = true;
                    }
                }
            }
            None if p.icmp_related => invalid = Some(InvalidReason::RelatedNoConn),
            None => create = true,
        }

        let mut nat_rw = NatRewrite::default();
        let mut nat_bit = 0;
        let mut reply_dir = matches!(found, Some((_, true)));
        if create {
            // conn_not_found.
            reply_dir = false;
            if !conn::valid_new(&p) {
                invalid = Some(InvalidReason::InvalidNew);
            } else {
                ct_state = state::NEW;
                if req.commit {
                    conn_slot = self.insert(&p, req, now);
                }
            }
        }
        // handle_nat (found connection) or the nat_packet call at the end
        // of conn_not_found (new one): only when the ct action has `nat`.
        // OVS also NATs an invalid packet of a NATed connection (the
        // +inv state is kept and gets +snat/+dnat), so this does too, and
        // an ICMP error related to one (outer header and quoted packet).
        if let (Some(_), Some(slot)) = (req.nat, conn_slot) {
            if let Some((bit, rw)) = self.nat_for(slot, reply_dir, p.icmp_related) {
                nat_bit = bit;
                nat_rw = rw;
            }
        }

        // write_ct_md: mark, label and orig tuple come from the connection
        // when there is one (even for an invalid packet of a known
        // connection), otherwise the orig tuple is the packet's own key.
        let mut res = CtResult {
            state: ct_state | state::TRK,
            zone,
            mark: 0,
            label: 0,
            orig: Some(p.key.to_tuple()),
            conn: None,
            nat: nat_rw,
        };
        if let Some(reason) = invalid {
            self.stats.invalid[reason.index()] += 1;
            res.state = state::INV | state::TRK;
        }
        res.state |= nat_bit;
        if let Some(slot) = conn_slot {
            let commit = req.commit;
            if let Some(c) = self.slot_mut(slot) {
                // set_mark / set_label: exec() requires commit in OpenFlow
                // (ofp-actions.c), so only a committing action writes.
                if commit {
                    if let Some((v, m)) = req.set_mark {
                        c.mark = v | (c.mark & !m);
                    }
                    if let Some((v, m)) = req.set_label {
                        c.label = v | (c.label & !m);
                    }
                }
                res.mark = c.mark;
                res.label = c.label;
                res.orig = Some(c.keys[0].to_tuple());
                res.conn = Some(ConnHandle {
                    slot,
                    id: c.id,
                    reply: reply_dir,
                    related: p.icmp_related,
                });
            }
        }
        res
    }

    /// A second `ct` in the same zone on a packet whose verdict came from
    /// connection `h` (OVS's `process_one_fast`): the state machine does
    /// not see the packet again; a commit writes `set_mark`/`set_label`.
    /// Returns the connection's (mark, label), or `None` if it is gone.
    pub fn update_known(&mut self, h: crate::ConnHandle, req: &CtRequest) -> Option<(u32, u128)> {
        let c = self.slot_mut(h.slot).filter(|c| c.id == h.id)?;
        if req.commit {
            if let Some((v, m)) = req.set_mark {
                c.mark = v | (c.mark & !m);
            }
            if let Some((v, m)) = req.set_label {
                c.label = v | (c.label & !m);
            }
        }
        Some((c.mark, c.label))
    }

    /// A second `ct` in the same zone on a packet whose verdict `prev`
    /// came from connection `prev.conn` (OVS `process_one_fast`): the state
    /// machine does not see the packet again; a commit writes
    /// `set_mark`/`set_label`; with `nat` in the action, `handle_nat`:
    /// a packet that already got `+snat`/`+dnat` in this zone is left
    /// alone, otherwise a NATed connection's packet is (un-)translated
    /// (an ICMP error related to it: its header and the quoted packet,
    /// see [`crate::NatRewrite::inner`]).
    ///
    /// Returns `prev` with the connection's mark and label, the NAT bit
    /// added to `state` and `nat` set to what to write now (empty when
    /// nothing); `None` if `prev` has no connection or it is gone (then
    /// run [`Conntrack::process`]). The caller makes sure `prev.zone ==
    /// req.zone` and `!req.force`, as OVS's fast path does.
    ///
    /// OVS does not cache the connection after a `ct` with `nat`
    /// (`set_cached_conn`), so its next `ct` in the zone runs the full
    /// `process_one` (a lookup by the reversed key, the state machine
    /// again, then the same `handle_nat` test). Here the state machine
    /// is not re-run; the verdict and rewrite are the same, only the
    /// packet counters differ (OVS counts that packet twice).
    pub fn process_known(&mut self, prev: &CtResult, req: &CtRequest) -> Option<CtResult> {
        let h = prev.conn?;
        let (mark, label) = self.update_known(h, req)?;
        let mut res = CtResult {
            mark,
            label,
            nat: NatRewrite::default(),
            ..*prev
        };
        let natted = prev.state & (state::SNAT | state::DNAT) != 0;
        if req.nat.is_some() && !natted {
            if let Some((bit, rw)) = self.nat_for(h.slot, h.reply, h.related) {
                res.state |= bit;
                res.nat = rw;
            }
        }
        Some(res)
    }

    /// Whether the connection behind `h` may run in a kernel engine, and
    /// what NAT writes per direction there. `None` when it is gone.
    /// Established means: TCP with both peers ESTABLISHED, UDP/other with
    /// a reply seen; ICMP never.
    /// An expired connection counts as gone (the sweep may not have reached
    /// it yet).
    pub fn offload_info(&self, h: crate::ConnHandle, now: Instant) -> Option<crate::OffloadInfo> {
        let c = self
            .slot(h.slot)
            .filter(|c| c.id == h.id && !c.expired(now))?;
        let nat = |reply| {
            c.nat
                .map(|k| nat::rewrite(&c.keys, k, reply))
                .unwrap_or_default()
        };
        Some(crate::OffloadInfo {
            established: c.established(),
            ended: match &c.proto {
                ProtoState::Tcp(t) => t.ended(),
                _ => false,
            },
            tcp: matches!(c.proto, ProtoState::Tcp(_)),
            nat: [nat(false).1, nat(true).1],
            nat_state: [nat(false).0, nat(true).0],
            packets: c.packets[0] + c.packets[1],
            mark: c.mark,
            label: c.label,
        })
    }

    /// Traffic of the connection behind `h` that a kernel engine forwarded:
    /// counted in the direction `reply` and refreshing the established
    /// timeout from `used` (the engine's last hit) — unless that was after
    /// the connection had expired, when userspace would have called the
    /// packet new. From the first call on, the connection is tracked
    /// without the TCP window check (the tracker did not see those
    /// segments). Returns whether the connection is still alive at `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn credit(
        &mut self,
        h: crate::ConnHandle,
        reply: bool,
        packets: u64,
        bytes: u64,
        used: Instant,
        now: Instant,
    ) -> bool {
        let timeouts = self.cfg.timeouts;
        let Some(c) = self.slot_mut(h.slot).filter(|c| c.id == h.id) else {
            return false;
        };
        c.liberal = true;
        if packets > 0 && used < c.expiration {
            let d = usize::from(reply);
            c.packets[d] += packets;
            c.bytes[d] += bytes;
            let exp = used + timeouts.get(c.established_timer());
            if exp > c.expiration {
                c.expiration = exp;
            }
        }
        !c.expired(now)
    }

    /// A kernel engine now carries the connection behind `h` from its
    /// first packet on (`ct_offload`'s set-up in the kernel): the
    /// handshake and the close are forwarded there, so the connection is
    /// tracked without the window check and learns its TCP states from
    /// [`Conntrack::kernel_tcp_flags`]. Returns false if it is gone.
    pub fn kernel_setup(&mut self, h: crate::ConnHandle) -> bool {
        let Some(c) = self.slot_mut(h.slot).filter(|c| c.id == h.id) else {
            return false;
        };
        c.liberal = true;
        c.kernel_setup = true;
        c.in_kernel = true;
        true
    }

    /// A kernel engine now holds an entry of the connection behind `h`
    /// (an established direction moved there): see
    /// [`Conntrack::take_replaced`]. Returns false if it is gone.
    pub fn kernel_entries(&mut self, h: crate::ConnHandle) -> bool {
        let Some(c) = self.slot_mut(h.slot).filter(|c| c.id == h.id) else {
            return false;
        };
        c.in_kernel = true;
        true
    }

    /// The last kernel entry of the connection behind `h` went: the
    /// tracker sees its every packet again (it stays liberal: its windows
    /// are stale).
    pub fn kernel_entries_gone(&mut self, h: crate::ConnHandle) {
        if let Some(c) = self.slot_mut(h.slot).filter(|c| c.id == h.id) {
            c.in_kernel = false;
            c.kernel_setup = false;
        }
    }

    /// Whether the connection behind `h` is set up in a kernel engine
    /// (its TCP states come from the entries' flags).
    pub fn is_kernel_setup(&self, h: crate::ConnHandle) -> bool {
        self.slot(h.slot)
            .is_some_and(|c| c.id == h.id && c.kernel_setup)
    }

    /// The TCP flags a kernel engine saw on the connection behind `h`
    /// (`seen`: OR per direction, original first, cumulative since its
    /// entries were installed), with `used` its last hit: the peers' states
    /// advance as the segments would have moved them (see
    /// `TcpConn::kernel_flags`), and a state change sets the timeout from
    /// `used`. Returns whether the connection is still alive at `now`.
    pub fn kernel_tcp_flags(
        &mut self,
        h: crate::ConnHandle,
        seen: [u16; 2],
        used: Instant,
        now: Instant,
    ) -> bool {
        let timeouts = self.cfg.timeouts;
        let Some(c) = self.slot_mut(h.slot).filter(|c| c.id == h.id) else {
            return false;
        };
        if c.expired(now) {
            return false;
        }
        if let ProtoState::Tcp(t) = &mut c.proto {
            if t.kernel_flags(seen) {
                c.expiration = used + timeouts.get(t.timer());
            }
        }
        !c.expired(now)
    }

    /// Connections with kernel entries that left the table since the last
    /// call, for whatever reason (replaced by a new SYN, expired, swept,
    /// flushed): their entries must go at once, before a new connection
    /// with the same tuple installs entries with the same match.
    pub fn take_replaced(&mut self) -> impl Iterator<Item = crate::ConnHandle> + '_ {
        self.replaced.drain(..)
    }

    /// Whether [`Conntrack::take_replaced`] has anything.
    pub fn has_replaced(&self) -> bool {
        !self.replaced.is_empty()
    }

    /// `nat_packet` for a packet of the connection in `slot`, if it has NAT;
    /// `related`: the packet is an ICMP error about it (outer header and
    /// quoted packet are translated).
    fn nat_for(&self, slot: u32, reply: bool, related: bool) -> Option<(u32, NatRewrite)> {
        let c = self.slot(slot)?;
        let kind = c.nat?;
        Some(if related {
            nat::rewrite_related(&c.keys, kind, reply)
        } else {
            nat::rewrite(&c.keys, kind, reply)
        })
    }

    fn slot_mut(&mut self, slot: u32) -> Option<&mut Conn> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    fn slot(&self, slot: u32) -> Option<&Conn> {
        self.slots.get(slot as usize)?.as_ref()
    }

    /// `conn_key_lookup`: OVS skips expired connections and leaves them
    /// for the sweeper; here the map has one entry per key, so an expired
    /// match is removed on the spot to make room for its successor.
    fn lookup(&mut self, key: &ConnKey, now: Instant) -> Option<(u32, bool)> {
        let r = *self.map.get(key)?;
        let expired = self.slot(r.slot).is_none_or(|c| c.expired(now));
        if expired {
            self.remove(r.slot, Removal::Expired);
            return None;
        }
        Some((r.slot, r.reply))
    }

    fn count(&mut self, slot: u32, reply: bool, p: &Parsed) {
        if let Some(c) = self.slot_mut(slot) {
            let d = usize::from(reply);
            c.packets[d] += 1;
            c.bytes[d] += u64::from(p.l3_len);
        }
    }

    /// The commit half of `conn_not_found`, including the global limit
    /// (`n_conn_limit`): at the limit nothing is created and the packet
    /// stays `+trk+new` without a connection, as in OVS. With
    /// `nat(src=..)`/`nat(dst=..)` the reply key is the translated one
    /// (`nat_get_unique_tuple`); when no free tuple exists nothing is
    /// created either (`nat_res_exhaustion`): the packet stays `+trk+new`,
    /// unrewritten, counted in [`CtStats::nat_exhausted`] and logged at
    /// most every 5 s.
    fn insert(&mut self, p: &Parsed, req: &CtRequest, now: Instant) -> Option<u32> {
        if self.stats.connections >= self.cfg.limit {
            self.stats.limit_drops += 1;
            let due = self
                .last_limit_log
                .is_none_or(|t| now.saturating_duration_since(t) >= LIMIT_LOG_INTERVAL);
            if due {
                self.last_limit_log = Some(now);
                tracing::warn!(
                    limit = self.cfg.limit,
                    drops = self.stats.limit_drops,
                    "conntrack table full, not committing new connections"
                );
            }
            return None;
        }
        // Plain `nat` (no src/dst) sets nothing up on a new connection.
        let nat = req.nat.and_then(|na| Some((na, na.kind?)));
        let mut nat_rev = None;
        if let Some((na, kind)) = nat {
            let mut rng = self.rng;
            let seed = self.nat_seed.clone();
            let res = nat::unique_tuple(&p.key, kind, &na, &seed, &mut rng, &mut |k| {
                self.lookup(k, now).is_some()
            });
            self.rng = rng;
            match res {
                Ok(rev) => nat_rev = Some((kind, rev)),
                Err(why) => {
                    self.nat_exhausted(why, now);
                    return None;
                }
            }
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let mut c = Conn::new(p, id, now, &self.cfg.timeouts);
        if let Some((kind, rev)) = nat_rev {
            c.keys[1] = rev;
            c.nat = Some(kind);
        }
        let keys = c.keys;
        // A reply key already used by a live connection (only possible
        // without NAT, e.g. a plain connection whose reply tuple is some
        // NATed connection's translated tuple) keeps its owner, as the
        // entry found first wins in OVS; an expired owner is dropped.
        let reply_taken = keys[1] == keys[0] || self.lookup(&keys[1], now).is_some();
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(c);
                s
            }
            None => {
                let s = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(Some(c));
                s
            }
        };
        self.map.insert(keys[0], ConnRef { slot, reply: false });
        // Without NAT the reply key differs from the original one except for
        // degenerate tuples (same address and port on both sides); the
        // original-direction entry wins then, as in OVS where the forward
        // key is compared first.
        if !reply_taken {
            self.map.insert(keys[1], ConnRef { slot, reply: true });
        }
        self.stats.connections += 1;
        self.stats.created += 1;
        *self.stats.per_proto_mut(proto_class(&keys[0])) += 1;
        Some(slot)
    }

    /// `nat_res_exhaustion`: count and log (rate-limited).
    fn nat_exhausted(&mut self, why: NatFail, now: Instant) {
        self.stats.nat_exhausted += 1;
        let due = self
            .last_nat_log
            .is_none_or(|t| now.saturating_duration_since(t) >= LIMIT_LOG_INTERVAL);
        if due {
            self.last_nat_log = Some(now);
            match why {
                NatFail::Exhausted => tracing::warn!(
                    count = self.stats.nat_exhausted,
                    "Unable to NAT due to tuple space exhaustion - if DoS attack, \
                     use firewalling and/or zone partitioning."
                ),
                NatFail::Family => tracing::warn!(
                    count = self.stats.nat_exhausted,
                    "Unable to NAT: the NAT address range is not of the packet's family"
                ),
            }
        }
    }

    fn remove(&mut self, slot: u32, why: Removal) {
        let Some(c) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        // Whatever the reason (expiry, sweep, flush, replaced by a new
        // SYN, `force`), a connection with kernel entries is handed to
        // the caller: its entries must go before a new connection with
        // its tuple installs entries with the same match. Bounded: a
        // caller that never drains loses only the early removal (its
        // sync removes them too).
        if c.in_kernel && self.replaced.len() < REPLACED_MAX {
            self.replaced.push(ConnHandle {
                slot,
                id: c.id,
                reply: false,
                related: false,
            });
        }
        for k in &c.keys {
            if self.map.get(k).is_some_and(|r| r.slot == slot) {
                self.map.remove(k);
            }
        }
        self.free.push(slot);
        self.stats.connections -= 1;
        *self.stats.per_proto_mut(proto_class(&c.keys[0])) -= 1;
        match why {
            Removal::Expired => self.stats.expired += 1,
            Removal::Removed => self.stats.removed += 1,
        }
    }

    /// Removes expired connections; returns how many.
    ///
    /// Bounded: one call examines at most `max(limit / 64, 1024)` slots
    /// (OVS `conntrack_clean` stops after `n_conn_limit / 64` entries),
    /// resuming where the previous call stopped, so with the default limit
    /// a call costs at most ~47k slot checks and a full pass over a full
    /// table takes 64 calls. Correctness does not depend on sweeping:
    /// lookups ignore (and drop) expired connections; sweeping only frees
    /// their memory and their share of the limit.
    pub fn sweep(&mut self, now: Instant) -> usize {
        let n = self.slots.len();
        if n == 0 {
            return 0;
        }
        let budget = (self.cfg.limit / 64).max(MIN_SWEEP_BATCH).min(n);
        let mut removed = 0;
        for _ in 0..budget {
            if self.sweep_cursor >= n {
                self.sweep_cursor = 0;
            }
            let slot = self.sweep_cursor as u32;
            if self.slot(slot).is_some_and(|c| c.expired(now)) {
                self.remove(slot, Removal::Expired);
                removed += 1;
            }
            self.sweep_cursor += 1;
        }
        removed
    }

    /// Deletes the connections matching `filter` (`dpctl/flush-conntrack`);
    /// returns how many. Every field given in the filter must match the
    /// connection's original-direction tuple (the `reply_*` ones its reply
    /// tuple), like `ct_dpif_flush_tuple`'s `ct_dpif_entry_cmp`.
    pub fn flush(&mut self, filter: &FlushFilter) -> usize {
        let mut n = 0;
        for slot in 0..self.slots.len() {
            let slot = slot as u32;
            if self
                .slot(slot)
                .is_some_and(|c| filter.matches_conn(&c.keys))
            {
                self.remove(slot, Removal::Removed);
                n += 1;
            }
        }
        n
    }

    /// Live (unexpired) connections, optionally of one zone
    /// (`conntrack_dump_next`), sorted by zone then original tuple so the
    /// output is deterministic.
    pub fn dump(&self, zone: Option<u16>, now: Instant) -> Vec<EntryView> {
        let mut v: Vec<(ConnKey, EntryView)> = self
            .slots
            .iter()
            .flatten()
            .filter(|c| !c.expired(now) && zone.is_none_or(|z| z == c.keys[0].zone))
            .map(|c| (c.keys[0], entry_view(c, now)))
            .collect();
        v.sort_by_key(|(k, e)| dump_order(k, e.id));
        v.into_iter().map(|(_, e)| e).collect()
    }
}

/// Dump order: zone, family, addresses, protocol, then ports/ICMP fields.
fn dump_order(k: &ConnKey, id: u32) -> impl Ord {
    (
        k.zone,
        k.ipv6,
        k.src.addr,
        k.dst.addr,
        k.nw_proto,
        (k.src.port, k.dst.port, k.src.icmp_type, k.src.icmp_code),
        id,
    )
}

/// `conn_to_ct_dpif_entry`.
fn entry_view(c: &Conn, now: Instant) -> EntryView {
    let k = &c.keys[0];
    let tcp = match &c.proto {
        ProtoState::Tcp(t) => {
            let [o, r] = &t.peer;
            Some(TcpInfo {
                state_orig: o.state,
                state_reply: r.state,
                wscale_orig: o.wscale & CT_WSCALE_MASK,
                wscale_reply: r.wscale & CT_WSCALE_MASK,
                flags_orig: TcpInfo::peer_flags(o.wscale),
                flags_reply: TcpInfo::peer_flags(r.wscale),
            })
        }
        _ => None,
    };
    EntryView {
        id: c.id,
        zone: k.zone,
        mark: c.mark,
        label: c.label,
        orig: k.to_tuple(),
        reply: c.keys[1].to_tuple(),
        icmp_id: k.is_icmp().then_some(k.src.port),
        reply_icmp_id: k.is_icmp().then_some(c.keys[1].src.port),
        tcp,
        timeout: c.expiration.saturating_duration_since(now).as_secs(),
        counters_orig: Counters {
            packets: c.packets[0],
            bytes: c.bytes[0],
        },
        counters_reply: Counters {
            packets: c.packets[1],
            bytes: c.bytes[1],
        },
    }
}
