//! Translation: one packet's walk through the tables becomes one datapath flow.
//!
//! Three things are tracked during the walk:
//! - `key`, the packet's flow key as the actions have modified it so far
//!   (later lookups see `set_field` results, as in OpenFlow);
//! - `committed`, what the packet's bytes look like after the datapath
//!   actions emitted so far. Field changes are emitted lazily, just before an
//!   output, by diffing `key` against `committed` (OVS's "commit"), so
//!   `mod_nw_src` then `mod_nw_src` again costs one datapath action;
//! - `wc`, every key bit any decision depended on: classifier lookups (their
//!   wildcard tracking), protocol checks made by actions (is this IPv4? is it
//!   tagged?), the TTL for `dec_ttl`, MAC addresses for `normal`. `wc`
//!   becomes the megaflow's mask: any packet agreeing with this one on `wc`
//!   gets the same actions, so the datapath may apply them without asking.
//!
//! `wc` is always in terms of the packet *as received*, but VLAN actions
//! move tags between the key's two tag slots: after `pop_vlan` the outer
//! slot holds what arrived as the inner tag, after `push_vlan` the inner
//! slot holds what arrived as the outer one. Every decision that reads a
//! tag therefore goes through [`Ctx::unwc_vlan`], which follows
//! `vlan_origin` back to the received slot (or to nothing, for a tag the
//! actions built from values already in `wc`). Without this a flow cached
//! for `strip_vlan,normal` matched the outer tag only, while `normal`'s
//! VLAN came from the inner one.

use super::{Frozen, Ofproto, MAX_DEPTH};

/// Most tables and groups one translation may enter (OVS: 4096).
const MAX_RESUBMITS: u32 = 4096;
use crate::datapath::action::{Paused, PausedFrame};
use crate::datapath::{DpAction, DropReason, RuleRef, XlateOut};
use nicflow_flow::key::VLAN_CFI;
use nicflow_flow::{ofp, Action, CtAction, CtZone, Field, FlowKey, FlowMask, FLOW_WORDS};
use std::time::Instant;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
/// ICMPv6 neighbor solicitation / advertisement types.
const ND_NEIGHBOR_SOLICIT: u16 = 135;
const ND_NEIGHBOR_ADVERT: u16 = 136;
const ETH_ARP: u16 = 0x0806;
/// `PACKET_IN` reason of `dec_ttl(ids)` on an expired packet.
const OFPR_INVALID_TTL: u8 = 2;

struct Ctx<'a> {
    of: &'a mut Ofproto,
    learn: Option<Instant>,
    key: FlowKey,
    committed: FlowKey,
    wc: FlowMask,
    actions: Vec<DpAction>,
    rules: Vec<RuleRef>,
    learned: Option<(u16, [u8; 6], u32)>,
    depth: u32,
    /// Tables and groups entered so far: bounded by [`MAX_RESUBMITS`] so a
    /// rule set whose groups and resubmits fan out cannot make one
    /// translation exponential (OVS's `MAX_RESUBMITS`).
    work: u32,
    stop: bool,
    /// The MAC table, or the flow tables (`learn`), changed during this
    /// translation: cached decisions must be revalidated.
    mac_changed: bool,
    /// The decision must not stay cached (see `normal`).
    uncacheable: bool,
    /// For the key's outer (0) and inner (1) tag slot: which slot of the
    /// received packet its value came from, or `None` when the actions
    /// wrote it from constants or from bits already in `wc`.
    vlan_origin: [Option<u8>; 2],
    /// The rule whose actions run now: its table, cookie, and whether it is
    /// a table-miss rule (priority 0, matches everything), for `PACKET_IN`.
    rule_table: u8,
    rule_cookie: u64,
    rule_is_miss: bool,
    /// `push:`/`pop:`'s stack (OVS's `ctx->stack`): right-aligned values.
    stack: Vec<u128>,
    /// The frame's length, for `check_pkt_larger` (unknown when
    /// revalidating: the answer is then "not larger", and uncached).
    pkt_len: Option<usize>,
    /// `controller(pause)` stopped the walk: the index of its
    /// [`DpAction::Controller`] in `actions`, and the remaining actions
    /// gathered so far while the walk unwinds (OVS's freezing).
    freezing: Option<(usize, Paused)>,
}

impl<'a> Ctx<'a> {
    /// A walk of `key` through `of`'s tables from the start.
    fn new(of: &'a mut Ofproto, key: &FlowKey, learn: Option<Instant>) -> Ctx<'a> {
        Ctx {
            of,
            learn,
            key: *key,
            committed: *key,
            wc: FlowMask::catchall(),
            actions: Vec::new(),
            rules: Vec::new(),
            learned: None,
            depth: 0,
            work: 0,
            stop: false,
            mac_changed: false,
            uncacheable: false,
            vlan_origin: [Some(0), Some(1)],
            rule_table: 0,
            rule_cookie: 0,
            rule_is_miss: false,
            stack: Vec::new(),
            pkt_len: None,
            freezing: None,
        }
    }
}

pub fn translate(of: &mut Ofproto, key: &FlowKey, learn: Option<Instant>) -> XlateOut {
    translate_len(of, key, None, learn)
}

/// [`translate`] for a packet of `pkt_len` bytes (`check_pkt_larger`).
pub fn translate_len(
    of: &mut Ofproto,
    key: &FlowKey,
    pkt_len: Option<usize>,
    learn: Option<Instant>,
) -> XlateOut {
    let mut ctx = Ctx::new(of, key, learn);
    ctx.pkt_len = pkt_len;
    // The datapath always matches the input port (outputs are relative to
    // it) and the recirculation pass.
    ctx.wc.0.in_port = u32::MAX;
    ctx.wc.0.recirc_id = u32::MAX;
    if key.recirc_id == 0 {
        ctx.table(0);
    } else {
        // A pass after `ct(table=N)`: the walk resumes where it was frozen,
        // with the registers and metadata it had then. An unknown id (none
        // can be made outside `freeze`) leaves the action list empty: drop.
        if let Some(f) = ctx.of.thawed(key.recirc_id) {
            ctx.key.regs = f.regs;
            ctx.key.regs_hi = f.regs_hi;
            ctx.key.metadata = f.metadata;
            ctx.key.pkt_mark = f.pkt_mark;
            ctx.key.in_port = f.in_port;
            ctx.committed = ctx.key;
            ctx.depth = f.depth;
            ctx.table(f.table);
        }
    }
    ctx.finish_freeze();
    trim_select_tails(&mut ctx.actions);
    if ctx.work > MAX_RESUBMITS {
        // Too much work is an error of the rule set, not a decision: the
        // whole translation is dropped, as OVS drops a translation that
        // hit `MAX_RESUBMITS`, so a half-done fan-out sends nothing.
        ctx.actions.clear();
        ctx.actions.push(DpAction::Drop(DropReason::RecursionLimit));
    }
    XlateOut {
        mask: ctx.wc,
        actions: ctx.actions,
        rules: ctx.rules,
        install: !ctx.uncacheable,
        learned: ctx.learned,
        state_changed: ctx.mac_changed,
        emitted: Vec::new(),
    }
}

/// A per-packet select that ends the action list need not put the packet
/// back after its bucket: nothing reads it afterwards. Drop the trailing
/// header writes of each bucket there (recursively), so a bucket's output
/// is its last action, as the kernel engines want it.
fn trim_select_tails(actions: &mut [DpAction]) {
    let Some(DpAction::Select { buckets, .. }) = actions.last_mut() else {
        return;
    };
    for b in buckets {
        while b.actions.last().is_some_and(|a| {
            matches!(
                a,
                DpAction::SetEthSrc(_)
                    | DpAction::SetEthDst(_)
                    | DpAction::SetIpv4Src(_)
                    | DpAction::SetIpv4Dst(_)
                    | DpAction::SetIpv6Src(_)
                    | DpAction::SetIpv6Dst(_)
                    | DpAction::SetArpSpa(_)
                    | DpAction::SetArpTpa(_)
                    | DpAction::SetArpSha(_)
                    | DpAction::SetArpTha(_)
                    | DpAction::SetArpOp(_)
                    | DpAction::SetNdTarget(_)
                    | DpAction::SetNdSll(_)
                    | DpAction::SetNdTll(_)
                    | DpAction::SetTos(_)
                    | DpAction::SetTtl(_)
                    | DpAction::SetTpSrc(_)
                    | DpAction::SetTpDst(_)
                    | DpAction::PushVlan { .. }
                    | DpAction::PopVlan
                    | DpAction::SetVlanTci(_)
                    | DpAction::SetTunnelId(_)
                    | DpAction::SetTunnelMetadata { .. }
            )
        }) {
            b.actions.pop();
        }
        trim_select_tails(&mut b.actions);
    }
}

/// The rule language's `nat(...)` as the tracker takes it.
fn nat_action(n: nicflow_flow::CtNat) -> nicflow_conntrack::NatAction {
    use nicflow_conntrack::NatKind as K;
    let (port_min, port_max) = n.ports.unwrap_or((0, 0));
    nicflow_conntrack::NatAction {
        kind: n.kind.map(|k| match k {
            nicflow_flow::NatKind::Src => K::Src,
            nicflow_flow::NatKind::Dst => K::Dst,
        }),
        addr_min: n.addr.map(|a| a.0),
        addr_max: n.addr.map(|a| a.1),
        port_min,
        port_max,
        random: n.random,
        hash: n.hash,
        persistent: n.persistent,
    }
}

/// Is `rule` part of a conjunctive match (a "soft" match: its actions are
/// `conjunction(...)`s, which the rule language and the codec keep alone)?
fn is_soft(rule: &super::Rule) -> bool {
    rule.actions.first().is_some_and(Action::is_conjunction)
}

/// OVS's `classifier_lookup__` for a table where a soft match came out on
/// top: among every rule matching `key`, find the best ordinary ("hard")
/// match H; then, priority by priority above H, look for a conjunction
/// `id` of which the soft rules at that priority supply every clause, and
/// if one is complete, the answer is the best hard rule matching `key`
/// with `conj_id = id` (soft rules left out); if none is, the answer is H.
/// `wc` gets every bit any of these lookups depended on.
fn conj_lookup(
    table: &super::Table,
    key: &FlowKey,
    wc: &mut [u64; FLOW_WORDS],
) -> Option<nicflow_classifier::RuleId> {
    use nicflow_classifier::RuleId;
    let mut hard: Option<(RuleId, u32)> = None;
    let mut soft: Vec<(u32, RuleId)> = Vec::new();
    table.for_each_match_wc(key.words(), wc, 0, |id, prio, r| {
        if is_soft(r) {
            soft.push((prio, id));
        } else if hard.is_none_or(|(_, p)| prio > p) {
            hard = Some((id, prio));
        }
    });
    let hard_pri = hard.map_or(-1, |(_, p)| i64::from(p));
    soft.retain(|(p, _)| i64::from(*p) > hard_pri);
    soft.sort_by_key(|s| std::cmp::Reverse(s.0));
    for level in soft.chunk_by(|a, b| a.0 == b.0) {
        let n_soft = level.len();
        // Conjunction id -> clauses seen (bits above n_clauses preset, as
        // in OVS, so "complete" is all ones).
        let mut seen: Vec<(u32, u64)> = Vec::new();
        for (_, rid) in level {
            let Some(rule) = table.get(*rid) else {
                continue;
            };
            let mut complete = None;
            for a in &rule.actions {
                let Action::Conjunction {
                    id,
                    clause,
                    n_clauses,
                } = *a
                else {
                    continue;
                };
                if usize::from(n_clauses) > n_soft || clause == 0 {
                    continue;
                }
                let i = match seen.iter().position(|(c, _)| *c == id) {
                    Some(i) => i,
                    None => {
                        // `checked_shl`: a 64-clause conjunction presets no bit
                        // (`<< (64 & 63)` would preset them all).
                        seen.push((id, u64::MAX.checked_shl(n_clauses.into()).unwrap_or(0)));
                        seen.len() - 1
                    }
                };
                seen[i].1 |= 1u64 << ((clause - 1) & 63);
                if seen[i].1 == u64::MAX {
                    complete = Some(id);
                    break;
                }
            }
            let Some(id) = complete else { continue };
            let mut k2 = *key;
            k2.conj_id = id;
            let mut best: Option<(RuleId, u32)> = None;
            table.for_each_match_wc(k2.words(), wc, 0, |rid, prio, r| {
                if !is_soft(r) && best.is_none_or(|(_, p)| prio > p) {
                    best = Some((rid, prio));
                }
            });
            if let Some((rid, _)) = best {
                return Some(rid);
            }
        }
    }
    hard.map(|(id, _)| id)
}

/// See [`Ctx::unwc_vlan`]; free so it can run while the table is borrowed.
fn unwc_vlan(wc: &mut FlowMask, origin: [Option<u8>; 2], slot: usize, bits: u16) {
    match origin[slot] {
        Some(0) => wc.0.vlan_tci |= bits,
        Some(_) => wc.0.vlan_tci2 |= bits,
        None => {}
    }
}

impl Ctx<'_> {
    fn table(&mut self, table_id: u8) {
        if self.stop {
            return;
        }
        self.work += 1;
        if self.depth >= MAX_DEPTH || self.work > MAX_RESUBMITS {
            self.commit();
            self.actions
                .push(DpAction::Drop(DropReason::RecursionLimit));
            self.stop = true;
            return;
        }
        let Some(table) = self.of.table(table_id) else {
            // A lookup in an empty table: a miss (table statistics).
            self.rules.push(RuleRef {
                table: table_id,
                rule: None,
            });
            return;
        };
        let mut wc = [0u64; FLOW_WORDS];
        let hit = match table.lookup_wc(self.key.words(), &mut wc) {
            // The best rule is part of a conjunctive match: only the
            // conjunction as a whole can say what matched.
            Some((_, r)) if is_soft(r) => {
                conj_lookup(table, &self.key, &mut wc).and_then(|id| table.get(id).map(|r| (id, r)))
            }
            h => h,
        };
        // The lookup saw the current tag slots; move their bits to the
        // slots the tags arrived in.
        let mut wc = FlowMask(FlowKey::from_words(&wc));
        // conj_id is the lookup's own (0 in every packet): no datapath flow
        // matches it.
        wc.0.conj_id = 0;
        let tags = [wc.0.vlan_tci, wc.0.vlan_tci2];
        wc.0.vlan_tci = 0;
        wc.0.vlan_tci2 = 0;
        self.wc.union_with(&wc);
        unwc_vlan(&mut self.wc, self.vlan_origin, 0, tags[0]);
        unwc_vlan(&mut self.wc, self.vlan_origin, 1, tags[1]);
        let Some((id, rule)) = hit else {
            self.rules.push(RuleRef {
                table: table_id,
                rule: None,
            });
            return;
        };
        // Actions are cloned so the walk may mutate the MAC table while it
        // executes them; this is the slow path, so the copy is cheap enough.
        let actions = rule.actions.clone();
        let saved = (self.rule_table, self.rule_cookie, self.rule_is_miss);
        // Only a step back (to this table or an earlier one) can loop, so
        // only that deepens, as in OVS's `xlate_recursively`: OVN's logical
        // pipelines resubmit forward through 60+ tables in one pass, which
        // a plain per-rule depth cut off at 64 (`MAX_RESUBMITS` still
        // bounds the total work).
        let deepens = u32::from(table_id <= saved.0);
        self.rule_table = table_id;
        self.rule_cookie = rule.cookie;
        self.rule_is_miss =
            rule.priority == 0 && rule.matching.mask().words().iter().all(|w| *w == 0);
        self.rules.push(RuleRef {
            table: table_id,
            rule: Some(id),
        });
        self.depth += deepens;
        for (i, a) in actions.iter().enumerate() {
            if self.stop {
                self.unroll(&actions[i..], table_id);
                break;
            }
            self.action(a, table_id);
        }
        self.depth -= deepens;
        (self.rule_table, self.rule_cookie, self.rule_is_miss) = saved;
    }

    /// `controller`/`output:CONTROLLER`: a copy to the controller, said to
    /// be a table miss when a table-miss rule sends it (OpenFlow 1.3
    /// `OFPR_NO_MATCH`, as OVS reports it), an action otherwise.
    fn controller(&mut self, max_len: u16, table_id: u8) {
        self.commit();
        self.actions.push(DpAction::Controller {
            max_len,
            reason: if self.rule_is_miss { 0 } else { 1 },
            table_id,
            cookie: self.rule_cookie,
            extra: None,
        });
    }

    fn action(&mut self, a: &Action, table_id: u8) {
        match a {
            // max_len means nothing for a port (only PACKET_INs are cut).
            Action::Output(p) | Action::OutputMaxLen { port: p, .. } => self.output_port(*p),
            Action::InPort => {
                let p = self.key.in_port;
                self.emit_output(p);
            }
            Action::Normal => self.normal(),
            Action::Flood | Action::All => self.flood(),
            Action::Local => self.output_port(ofp::LOCAL),
            Action::Controller { max_len } => self.controller(*max_len, table_id),
            Action::Controller2(o) => {
                self.commit();
                self.actions.push(DpAction::Controller {
                    max_len: o.max_len,
                    reason: o.reason,
                    table_id,
                    cookie: self.rule_cookie,
                    extra: Some(Box::new(crate::datapath::action::ControllerExtra {
                        userdata: o.userdata.clone(),
                        meter_id: o.meter_id,
                        pipeline: self.key,
                        paused: None,
                    })),
                });
                // The walk stops here; as it unwinds, every action list
                // that was running leaves its remainder (`unroll`) and the
                // continuation goes into this copy (`finish_freeze`). Each
                // packet needs its own continuation: not cached, as OVS
                // slow-paths such flows.
                if o.pause {
                    self.uncacheable = true;
                    self.freezing = Some((self.actions.len() - 1, Paused::default()));
                    self.stop = true;
                }
            }
            Action::Meter(id) => {
                self.commit();
                self.actions.push(DpAction::Meter(*id));
            }
            Action::SetField { field, value, mask } => self.set_field(*field, *value, *mask),
            Action::PushVlan(tpid) => self.push_vlan(*tpid),
            Action::PopVlan => self.pop_vlan(),
            Action::ModVlanVid(vid) => self.mod_vlan(0x0fff, *vid & 0x0fff),
            Action::ModVlanPcp(pcp) => self.mod_vlan(0xe000, ((*pcp as u16) & 7) << 13),
            Action::DecTtl => self.dec_ttl(None),
            // The expired packet goes to the controllers (nicflow's
            // PACKET_INs go to every connection: the ids pick none).
            Action::DecTtlIds(_) => self.dec_ttl(Some(table_id)),
            Action::GotoTable(t) => self.table(*t),
            Action::Ct(c) => self.ct(c),
            Action::Move {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            } => {
                let bits = if *n_bits >= 128 {
                    u128::MAX
                } else {
                    (1u128 << n_bits) - 1
                };
                // The copied bits decide what is written: they join the mask.
                let src_bits = bits << src_ofs;
                let wc = src.read(&self.wc.0) | src_bits;
                src.write(&mut self.wc.0, wc);
                let v = (src.read(&self.key) & src_bits) >> src_ofs;
                self.set_field(*dst, v << dst_ofs, bits << dst_ofs);
            }
            Action::CtClear => {
                self.commit();
                self.actions.push(DpAction::CtClear);
                self.key.clear_ct();
            }
            Action::Group(g) => self.group(*g, table_id),
            // No egress queues: the queue changes nothing about forwarding.
            Action::Enqueue { port, .. } => self.output_port(*port),
            Action::WriteMetadata { value, mask } => {
                self.set_field(Field::Metadata, (*value).into(), (*mask).into())
            }
            Action::OutputReg {
                field,
                ofs,
                nbits,
                max_len,
            } => self.output_reg(*field, *ofs, *nbits, *max_len, table_id),
            // A soft match: the lookup reads these, they never run (and
            // an action list of them alone is a drop).
            Action::Conjunction { .. } => {}
            // A copy of the packet, with its own stack: whatever the
            // nested actions change is undone afterwards (OVS's clone).
            // A pause inside keeps the clone's remainder only and, as in
            // OVS (whose clone leaves `ctx->exit` set), ends the walk.
            Action::Clone(inner) => {
                let stack = self.stack.clone();
                self.bucket(inner, table_id);
                self.stack = stack;
            }
            Action::CheckPktLarger { len, dst, ofs } => {
                // The answer depends on the frame's length, which no
                // datapath flow matches: this translation stays uncached.
                self.uncacheable = true;
                let larger = self.pkt_len.unwrap_or(0) > usize::from(*len);
                self.set_field(*dst, u128::from(larger) << ofs, 1u128 << ofs);
            }
            Action::Learn(l) => self.learn(l),
            Action::StackPush { field, ofs, n_bits } => {
                let bits = low_bits(*n_bits) << ofs;
                // The pushed bits may decide what a later pop writes.
                let w = field.read(&self.wc.0) | bits;
                field.write(&mut self.wc.0, w);
                self.stack.push((field.read(&self.key) & bits) >> ofs);
            }
            Action::StackPop { field, ofs, n_bits } => {
                // Popping an empty stack does nothing (OVS logs it).
                if let Some(v) = self.stack.pop() {
                    let bits = low_bits(*n_bits);
                    self.set_field(*field, (v & bits) << ofs, bits << ofs);
                }
            }
            Action::Resubmit { port, table } => {
                let saved = self.key.in_port;
                if let Some(p) = port {
                    if *p != ofp::IN_PORT {
                        self.key.in_port = *p;
                    }
                }
                self.table(table.unwrap_or(table_id));
                self.key.in_port = saved;
            }
        }
    }

    /// `output:FIELD[ofs..]`: the port number is read from the key now, so
    /// those bits join the mask (a packet with another value there must
    /// come up again). As OVS's `xlate_output_reg_action`: the value is a
    /// 16-bit OpenFlow port (0xfff8.. are the reserved ports, widened here
    /// to nicflow's 32-bit numbers), a larger value outputs nothing.
    fn output_reg(&mut self, field: Field, ofs: u8, nbits: u8, max_len: u16, table_id: u8) {
        let bits = if nbits >= 128 {
            u128::MAX
        } else {
            (1u128 << nbits) - 1
        };
        let sel = bits << ofs;
        let wc = field.read(&self.wc.0) | sel;
        field.write(&mut self.wc.0, wc);
        let v = (field.read(&self.key) & sel) >> ofs;
        let Ok(v) = u16::try_from(v) else {
            return;
        };
        let p = match u32::from(v) {
            p @ 0xfff8..=0xffff => p | 0xffff_0000,
            p if p >= 0xff00 => return,
            p => p,
        };
        match p {
            ofp::CONTROLLER => self.controller(max_len, table_id),
            // OFPP_TABLE (resubmit to table 0) is not built; OFPP_NONE is
            // no port.
            ofp::TABLE | ofp::NONE => {}
            p => self.output_port(p),
        }
    }

    /// Output to a port number, resolving reserved numbers.
    fn output_port(&mut self, p: u32) {
        match p {
            ofp::IN_PORT => {
                let ip = self.key.in_port;
                self.emit_output(ip)
            }
            ofp::NORMAL => self.normal(),
            ofp::FLOOD | ofp::ALL => self.flood(),
            ofp::CONTROLLER => self.controller(0, self.rule_table),
            _ => {
                // OpenFlow: output to the input port is skipped unless asked
                // for with `in_port`.
                if p != self.key.in_port {
                    self.emit_output(p);
                }
            }
        }
    }

    fn emit_output(&mut self, p: u32) {
        if self.of.ports().binary_search(&p).is_err() {
            return;
        }
        self.commit();
        self.actions.push(DpAction::Output(p));
    }

    fn flood(&mut self) {
        let in_port = self.key.in_port;
        let ports: Vec<u32> = self.of.ports().to_vec();
        for p in ports {
            if p != in_port {
                self.emit_output(p);
            }
        }
    }

    /// Record that a decision depended on `bits` of the current tag in
    /// `slot` (0 outer, 1 inner), in the received packet's terms.
    fn unwc_vlan(&mut self, slot: usize, bits: u16) {
        unwc_vlan(&mut self.wc, self.vlan_origin, slot, bits);
    }

    fn normal(&mut self) {
        self.wc.0.dl_src = [0xff; 6];
        self.wc.0.dl_dst = [0xff; 6];
        self.unwc_vlan(0, VLAN_CFI | 0x0fff);
        let vlan = if self.key.vlan_tci & VLAN_CFI != 0 {
            self.key.vlan_tci & 0x0fff
        } else {
            0
        };
        let src = self.key.dl_src;
        let in_port = self.key.in_port;
        if src[0] & 1 == 0 {
            self.learned = Some((vlan, src, in_port));
            match self.learn {
                Some(now) => {
                    let before = self.of.mac.generation();
                    self.of.mac.learn(vlan, src, in_port, now);
                    self.mac_changed |= self.of.mac.generation() != before;
                }
                // Revalidating: the slow path would learn the source here,
                // the fast path never does. If the table does not already
                // say (vlan, src) is on this port, the cached flow would
                // skip a learning step the slow path takes, so it must go
                // and let the next packet come up to learn.
                None => {
                    if self.of.mac.lookup(vlan, &src) != Some(in_port)
                        && self.of.mac.len() < self.of.mac.max_entries
                    {
                        self.uncacheable = true;
                    }
                }
            }
        }
        let dst = self.key.dl_dst;
        if dst[0] & 1 != 0 {
            self.flood();
            return;
        }
        match self.of.mac.lookup(vlan, &dst) {
            Some(p) if p == in_port => {}
            Some(p) => self.emit_output(p),
            None => self.flood(),
        }
    }

    /// Is the packet of this ethertype? Records that the decision looked.
    fn is_dl(&mut self, t: u16) -> bool {
        self.wc.0.dl_type = 0xffff;
        self.key.dl_type == t
    }

    fn is_ip(&mut self) -> bool {
        self.wc.0.dl_type = 0xffff;
        self.key.dl_type == ETH_IPV4 || self.key.dl_type == ETH_IPV6
    }

    /// Does the packet have a TCP/UDP/SCTP header with ports?
    fn has_ports(&mut self) -> bool {
        if !self.is_ip() {
            return false;
        }
        self.wc.0.nw_proto = 0xff;
        self.wc.0.nw_frag |= nicflow_flow::key::FRAG_LATER;
        matches!(self.key.nw_proto, 6 | 17 | 132)
            && self.key.nw_frag & nicflow_flow::key::FRAG_LATER == 0
    }

    /// Is the packet an IPv6 neighbor solicitation or advertisement (code
    /// 0), of type `ty` if given? OVS's `is_nd`: what a `set_field` on an
    /// ND field checks when it runs (after the actions before it changed
    /// the packet), so its answer's fields join the mask.
    fn is_nd(&mut self, ty: Option<u16>) -> bool {
        if !self.is_dl(ETH_IPV6) {
            return false;
        }
        self.wc.0.nw_proto = 0xff;
        self.wc.0.nw_frag |= nicflow_flow::key::FRAG_LATER;
        if self.key.nw_proto != 58 || self.key.nw_frag & nicflow_flow::key::FRAG_LATER != 0 {
            return false;
        }
        self.wc.0.tp_dst = 0xffff;
        self.wc.0.tp_src = 0xffff;
        let t = self.key.tp_src;
        self.key.tp_dst == 0
            && match ty {
                Some(ty) => t == ty,
                None => t == ND_NEIGHBOR_SOLICIT || t == ND_NEIGHBOR_ADVERT,
            }
    }

    fn set_field(&mut self, field: Field, value: u128, mask: u128) {
        let applies = match field {
            Field::NwSrc | Field::NwDst => self.is_dl(ETH_IPV4) || self.is_dl(ETH_ARP),
            Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha | Field::ArpOp => {
                self.is_dl(ETH_ARP)
            }
            Field::NwTos | Field::NwTtl => self.is_ip(),
            Field::Ipv6Src | Field::Ipv6Dst | Field::Ipv6Label => self.is_dl(ETH_IPV6),
            Field::TpSrc | Field::TpDst => self.has_ports(),
            Field::NdTarget => self.is_nd(None),
            Field::NdSll => self.is_nd(Some(ND_NEIGHBOR_SOLICIT)),
            Field::NdTll => self.is_nd(Some(ND_NEIGHBOR_ADVERT)),
            Field::VlanTci => {
                // Through the VLAN helpers so push/pop are emitted in order.
                let cur = self.key.vlan_tci as u128;
                let new = ((cur & !mask) | (value & mask)) as u16;
                self.unwc_vlan(0, VLAN_CFI);
                if new & VLAN_CFI == 0 {
                    if self.key.vlan_tci & VLAN_CFI != 0 {
                        self.pop_vlan();
                    }
                } else {
                    self.mod_vlan(0xefff, new & 0xefff);
                }
                return;
            }
            // Fields with no packet bytes (registers, metadata, tunnel
            // metadata, in_port) just change the key later lookups see.
            _ => true,
        };
        if !applies {
            return;
        }
        // The datapath action that commits this change writes the whole
        // field, and is skipped when the value is already right; both depend
        // on the packet's current value, so all of the field joins the mask.
        field.write(&mut self.wc.0, field.full_mask());
        let cur = field.read(&self.key);
        field.write(&mut self.key, (cur & !mask) | (value & mask));
    }

    /// `learn(...)`: the rule built from this packet's fields goes into
    /// its table when the packet is translated with side effects (as OVS's
    /// `xlate_learn_action`; not while revalidating). The rule must be
    /// learned again by every packet that runs this (its values come from
    /// the packet, and learning again restarts its timeouts), so the
    /// translation is not cached: such packets take the slow path (OVS
    /// keeps the datapath flow and re-runs the learn from its xlate cache).
    /// A change of the tables revalidates the cached datapath flows.
    fn learn(&mut self, l: &nicflow_flow::LearnSpec) {
        use nicflow_flow::{LearnPart, LearnSrc};
        self.uncacheable = true;
        let read = |ctx: &mut Self, src: LearnSrc, n: u8| -> u128 {
            match src {
                LearnSrc::Imm(v) => v & low_bits(n),
                LearnSrc::Field { field, ofs } => {
                    let bits = low_bits(n) << ofs;
                    let w = field.read(&ctx.wc.0) | bits;
                    field.write(&mut ctx.wc.0, w);
                    (field.read(&ctx.key) & bits) >> ofs
                }
            }
        };
        let mut m = nicflow_flow::Match::catchall();
        let mut actions = Vec::new();
        for p in &l.parts {
            match *p {
                LearnPart::Match {
                    dst,
                    dst_ofs,
                    n_bits,
                    src,
                } => {
                    let v = read(self, src, n_bits);
                    m.set(dst, v << dst_ofs, low_bits(n_bits) << dst_ofs);
                }
                LearnPart::Load {
                    dst,
                    dst_ofs,
                    n_bits,
                    src,
                } => {
                    let v = read(self, src, n_bits);
                    actions.push(Action::SetField {
                        field: dst,
                        value: v << dst_ofs,
                        mask: low_bits(n_bits) << dst_ofs,
                    });
                }
                LearnPart::Output { src, ofs, n_bits } => {
                    // A 16-bit OpenFlow port, 0xfff8.. the reserved ones,
                    // as OVS's learned `output`.
                    let v = read(self, LearnSrc::Field { field: src, ofs }, n_bits);
                    let port = match v {
                        0xfff8..=0xffff => 0xffff_0000 | v as u32,
                        v => v as u32,
                    };
                    actions.push(match port {
                        ofp::IN_PORT => Action::InPort,
                        ofp::NORMAL => Action::Normal,
                        ofp::FLOOD => Action::Flood,
                        ofp::ALL => Action::All,
                        ofp::LOCAL => Action::Local,
                        ofp::CONTROLLER => Action::Controller { max_len: u16::MAX },
                        p => Action::Output(p),
                    });
                }
            }
        }
        let Some(now) = self.learn else {
            return;
        };
        let spec = nicflow_ofctl::FlowSpec {
            table: l.table,
            priority: l.priority,
            cookie: l.cookie,
            idle_timeout: l.idle_timeout,
            hard_timeout: l.hard_timeout,
            send_flow_rem: l.send_flow_rem,
            r#match: m,
            actions,
        };
        if self.of.learn_flow(&spec, now) {
            self.mac_changed = true;
        }
    }

    /// `dec_ttl`; with `controller_table`, `dec_ttl(ids)`: an expired
    /// packet also goes to the controller (`OFPR_INVALID_TTL`, the whole
    /// frame, with this table and the rule's cookie) before the drop.
    fn dec_ttl(&mut self, controller_table: Option<u8>) {
        if !self.is_ip() {
            return;
        }
        self.wc.0.nw_ttl = 0xff;
        if self.key.nw_ttl <= 1 {
            self.commit();
            if let Some(table_id) = controller_table {
                self.actions.push(DpAction::Controller {
                    max_len: 0,
                    reason: OFPR_INVALID_TTL,
                    table_id,
                    cookie: self.rule_cookie,
                    extra: None,
                });
            }
            self.actions.push(DpAction::Drop(DropReason::TtlExceeded));
            self.stop = true;
        } else {
            self.key.nw_ttl -= 1;
        }
    }

    fn push_vlan(&mut self, tpid: u16) {
        self.unwc_vlan(0, 0xffff);
        self.commit();
        // OpenFlow 1.1+: the new tag copies VID/PCP from the current outer
        // tag, or is zero on an untagged packet.
        let tci = if self.key.vlan_tci & VLAN_CFI != 0 {
            self.key.vlan_tci
        } else {
            VLAN_CFI
        };
        self.actions.push(DpAction::PushVlan {
            tpid,
            tci: tci & !VLAN_CFI,
        });
        self.key.vlan_tci2 = self.key.vlan_tci;
        self.key.vlan_tci = tci;
        self.committed.vlan_tci2 = self.key.vlan_tci2;
        self.committed.vlan_tci = tci;
        // The new outer tag is a copy of bits now in `wc`; the old outer
        // tag moves inwards, and an old inner tag leaves the key (the key
        // holds two tags).
        self.vlan_origin = [None, self.vlan_origin[0]];
    }

    fn pop_vlan(&mut self) {
        self.unwc_vlan(0, VLAN_CFI);
        if self.key.vlan_tci & VLAN_CFI == 0 {
            return;
        }
        self.commit();
        self.actions.push(DpAction::PopVlan);
        self.key.vlan_tci = self.key.vlan_tci2;
        self.key.vlan_tci2 = 0;
        self.committed.vlan_tci = self.key.vlan_tci;
        self.committed.vlan_tci2 = 0;
        self.vlan_origin = [self.vlan_origin[1], None];
    }

    /// Change VID and/or PCP bits of the outer tag (pushing one if untagged,
    /// as OpenFlow 1.0's `mod_vlan_vid`/`mod_vlan_pcp` do).
    fn mod_vlan(&mut self, bits: u16, value: u16) {
        // The datapath's SetVlanTci writes VID and PCP together, from this
        // packet's values for the bits not modified here.
        self.unwc_vlan(0, 0xffff);
        if self.key.vlan_tci & VLAN_CFI == 0 {
            self.commit();
            let tci = value & bits;
            self.actions.push(DpAction::PushVlan { tpid: 0x8100, tci });
            self.key.vlan_tci2 = 0;
            self.key.vlan_tci = tci | VLAN_CFI;
            self.committed.vlan_tci = self.key.vlan_tci;
            self.committed.vlan_tci2 = 0;
            self.vlan_origin = [None, None];
        } else {
            self.key.vlan_tci = (self.key.vlan_tci & !bits) | (value & bits) | VLAN_CFI;
        }
    }

    /// `ct(...)`: the tracker runs in the datapath; here it becomes a `ct`
    /// datapath action, and with `table=N` a recirculation whose next pass
    /// resumes in table N (OVS's `compose_conntrack_action`).
    fn ct(&mut self, c: &CtAction) {
        let zone = match c.zone {
            CtZone::Imm(z) => z,
            CtZone::Field { field, ofs, nbits } => {
                let bits = ((1u128 << nbits) - 1) << ofs;
                let wc = field.read(&self.wc.0) | bits;
                field.write(&mut self.wc.0, wc);
                ((field.read(&self.key) & bits) >> ofs) as u16
            }
        };
        // `exec(move:..)`: the bits the packet has now become constants of
        // this flow (they join the mask), written after the set_fields.
        let (mut mark, mut label) = (c.set_mark, c.set_label);
        for mv in &c.moves {
            let bits = low_bits(mv.n_bits);
            let src_bits = bits << mv.src_ofs;
            let w = mv.src.read(&self.wc.0) | src_bits;
            mv.src.write(&mut self.wc.0, w);
            let v = ((mv.src.read(&self.key) & src_bits) >> mv.src_ofs) << mv.dst_ofs;
            let m = bits << mv.dst_ofs;
            if mv.dst == Field::CtMark {
                let (ov, om) = mark.unwrap_or((0, 0));
                mark = Some(((ov & !(m as u32)) | v as u32, om | m as u32));
            } else {
                let (ov, om) = label.unwrap_or((0, 0));
                label = Some(((ov & !m) | v, om | m));
            }
        }
        // The tracker must see the packet as the actions so far made it.
        self.commit();
        self.actions.push(DpAction::Ct {
            zone,
            commit: c.commit,
            force: c.force,
            mark,
            label,
            nat: c.nat.map(nat_action),
        });
        if let Some(table) = c.table {
            let id = self.of.freeze(Frozen {
                table,
                regs: self.key.regs,
                regs_hi: self.key.regs_hi,
                metadata: self.key.metadata,
                pkt_mark: self.key.pkt_mark,
                in_port: self.key.in_port,
                depth: self.depth,
            });
            self.actions.push(DpAction::Recirc(id));
        }
        // The ct fields exist only in the recirculated pass; this action
        // list goes on with an untracked packet.
        self.key.clear_ct();
    }

    /// Emit set actions for every field changed since the last commit.
    fn commit(&mut self) {
        let k = self.key;
        let c = &mut self.committed;
        let a = &mut self.actions;
        if k.tun_id != c.tun_id {
            a.push(DpAction::SetTunnelId(k.tun_id));
        }
        for (i, (v, was)) in k.tun_metadata.iter().zip(c.tun_metadata).enumerate() {
            if *v != was {
                a.push(DpAction::SetTunnelMetadata {
                    slot: i as u8,
                    value: *v,
                });
            }
        }
        if k.dl_src != c.dl_src {
            a.push(DpAction::SetEthSrc(k.dl_src));
        }
        if k.dl_dst != c.dl_dst {
            a.push(DpAction::SetEthDst(k.dl_dst));
        }
        if k.vlan_tci != c.vlan_tci && k.vlan_tci & VLAN_CFI != 0 && c.vlan_tci & VLAN_CFI != 0 {
            a.push(DpAction::SetVlanTci(k.vlan_tci & !VLAN_CFI));
        }
        match k.dl_type {
            ETH_IPV4 => {
                if k.nw_src != c.nw_src {
                    a.push(DpAction::SetIpv4Src(k.nw_src));
                }
                if k.nw_dst != c.nw_dst {
                    a.push(DpAction::SetIpv4Dst(k.nw_dst));
                }
            }
            ETH_ARP => {
                if k.nw_src != c.nw_src {
                    a.push(DpAction::SetArpSpa(k.nw_src));
                }
                if k.nw_dst != c.nw_dst {
                    a.push(DpAction::SetArpTpa(k.nw_dst));
                }
                if k.arp_sha != c.arp_sha {
                    a.push(DpAction::SetArpSha(k.arp_sha));
                }
                if k.arp_tha != c.arp_tha {
                    a.push(DpAction::SetArpTha(k.arp_tha));
                }
                if k.nw_proto != c.nw_proto {
                    a.push(DpAction::SetArpOp(k.nw_proto));
                }
            }
            ETH_IPV6 => {
                if k.ipv6_src != c.ipv6_src {
                    a.push(DpAction::SetIpv6Src(k.ipv6_src));
                }
                if k.ipv6_dst != c.ipv6_dst {
                    a.push(DpAction::SetIpv6Dst(k.ipv6_dst));
                }
                // ND fields change only through their own set_fields,
                // which checked that the packet is an ND message.
                if k.nd_target != c.nd_target {
                    a.push(DpAction::SetNdTarget(k.nd_target));
                }
                if k.arp_sha != c.arp_sha {
                    a.push(DpAction::SetNdSll(k.arp_sha));
                }
                if k.arp_tha != c.arp_tha {
                    a.push(DpAction::SetNdTll(k.arp_tha));
                }
            }
            _ => {}
        }
        if k.dl_type == ETH_IPV4 || k.dl_type == ETH_IPV6 {
            if k.nw_tos != c.nw_tos {
                a.push(DpAction::SetTos(k.nw_tos));
            }
            if k.nw_ttl != c.nw_ttl {
                a.push(DpAction::SetTtl(k.nw_ttl));
            }
            if k.tp_src != c.tp_src {
                a.push(DpAction::SetTpSrc(k.tp_src));
            }
            if k.tp_dst != c.tp_dst {
                a.push(DpAction::SetTpDst(k.tp_dst));
            }
        }
        *c = k;
    }
}

/// A small stable mix (splitmix64) for group bucket selection: the same
/// fields give the same bucket in every run and on every host.
fn mix(h: u64, v: u128) -> u64 {
    let mut x = h ^ (v as u64) ^ ((v >> 64) as u64).rotate_left(29);
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The low `n` bits set (all 128 for `n >= 128`).
fn low_bits(n: u8) -> u128 {
    if n >= 128 {
        u128::MAX
    } else {
        (1u128 << n) - 1
    }
}

/// Groups (`group:N`): OVS's `xlate_group_action`.
impl Ctx<'_> {
    fn group(&mut self, id: u32, table_id: u8) {
        use nicflow_ofctl::GroupType;
        self.work += 1;
        if self.depth >= MAX_DEPTH || self.work > MAX_RESUBMITS {
            self.commit();
            self.actions
                .push(DpAction::Drop(DropReason::RecursionLimit));
            self.stop = true;
            return;
        }
        // A group that does not exist (deleted under a cached decision)
        // does nothing, as in OVS.
        let Some(g) = self.of.groups.get(id) else {
            return;
        };
        let spec = g.spec.clone();
        let refs = self
            .of
            .groups
            .refs(id)
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        if spec.kind == GroupType::Select
            && spec
                .selection_method
                .is_some_and(nicflow_ofctl::SelectionMethod::per_packet)
        {
            if let Some(r) = refs.first() {
                self.rules.push(*r);
            }
            self.select_per_packet(&spec, table_id);
            return;
        }
        let chosen: Vec<usize> = match spec.kind {
            GroupType::All | GroupType::Indirect => (0..spec.buckets.len()).collect(),
            GroupType::Select => self.select_bucket(&spec).into_iter().collect(),
            GroupType::FastFailover => (0..spec.buckets.len())
                .find(|&i| self.bucket_live(&spec.buckets[i], 0))
                .into_iter()
                .collect(),
        };
        if let Some(r) = refs.first() {
            self.rules.push(*r);
        }
        for i in chosen {
            if self.stop {
                break;
            }
            if let Some(r) = refs.get(i + 1) {
                self.rules.push(*r);
            }
            // A bucket that paused froze its own remainder only; the
            // next buckets and the actions after the group go on with the
            // original packet (OVS's `xlate_group_bucket`).
            if self.bucket(&spec.buckets[i].actions, table_id) {
                self.stop = false;
            }
        }
    }

    /// A select group that chooses per packet (`rr`, `wrr`, `splb`): every
    /// live bucket of non-zero weight is translated, each on its own copy
    /// of the packet as `all` buckets are, into a [`DpAction::Select`] the
    /// executor picks from for each packet. No hash field joins the
    /// megaflow mask: the one flow carries all its packets over every
    /// bucket. Each bucket's list ends with the packet put back as it found
    /// it (field writes undone), so what follows the group sees the same
    /// packet whichever bucket ran; [`trim_select_tails`] drops those
    /// undoings when nothing follows. The flow's counters credit the group
    /// only: its traffic is split at run time, so the buckets' counters come
    /// from the executor's and kernel engines' per-bucket counts
    /// (`Bridge::group_stats`).
    fn select_per_packet(&mut self, g: &nicflow_ofctl::GroupSpec, table_id: u8) {
        use crate::datapath::action::{SelectBucket, SelectMethod};
        let method = match g.selection_method {
            Some(nicflow_ofctl::SelectionMethod::Weighted) => SelectMethod::Weighted,
            Some(nicflow_ofctl::SelectionMethod::Splb) => SelectMethod::Splb,
            _ => SelectMethod::RoundRobin,
        };
        let live: Vec<usize> = (0..g.buckets.len())
            .filter(|&i| g.buckets[i].weight > 0 && self.bucket_live(&g.buckets[i], 0))
            .collect();
        if live.is_empty() {
            return;
        }
        self.commit();
        let outer = std::mem::take(&mut self.actions);
        let committed = self.committed;
        let mut buckets = Vec::with_capacity(live.len());
        for i in live {
            if self.bucket(&g.buckets[i].actions, table_id) {
                self.stop = false;
            }
            let stopped = self.stop;
            if !stopped {
                // Put the packet back for whatever follows the group.
                self.commit();
            }
            self.committed = committed;
            buckets.push(SelectBucket {
                index: i as u16,
                weight: g.buckets[i].weight,
                actions: std::mem::take(&mut self.actions),
            });
            if stopped {
                break;
            }
        }
        self.actions = outer;
        self.actions.push(DpAction::Select {
            group: g.group_id,
            method,
            buckets,
        });
    }

    /// Run one bucket on a copy of the packet: what it changes in the key
    /// is rolled back afterwards (OVS restores `xin->flow`), and the bytes
    /// are put back by the next commit.
    /// Returns whether a `controller(pause)` in it froze the walk (the
    /// continuation is finished here: the copy ends at the bucket).
    fn bucket(&mut self, actions: &[Action], table_id: u8) -> bool {
        let saved = self.key;
        let origin = self.vlan_origin;
        self.depth += 1;
        for (i, a) in actions.iter().enumerate() {
            if self.stop {
                self.unroll(&actions[i..], table_id);
                break;
            }
            self.action(a, table_id);
        }
        self.depth -= 1;
        let paused = self.finish_freeze();
        // A TTL drop ends this copy only; the recursion limit ends all.
        if self.stop
            && matches!(
                self.actions.last(),
                Some(DpAction::Drop(DropReason::TtlExceeded))
            )
        {
            self.actions.pop();
            self.stop = false;
        }
        self.key = saved;
        self.vlan_origin = origin;
        // Tags pushed or popped by the bucket were emitted at once; undo
        // them now (field changes are undone by the next commit's diff).
        let tagged = |t: u16| t & VLAN_CFI != 0;
        let c = self.committed;
        let k = self.key;
        let ctags = [
            tagged(c.vlan_tci),
            tagged(c.vlan_tci) && tagged(c.vlan_tci2),
        ];
        let ktags = [
            tagged(k.vlan_tci),
            tagged(k.vlan_tci) && tagged(k.vlan_tci2),
        ];
        if ctags != ktags {
            for _ in 0..ctags.iter().filter(|t| **t).count() {
                self.actions.push(DpAction::PopVlan);
            }
            if ktags[1] {
                self.actions.push(DpAction::PushVlan {
                    tpid: 0x8100,
                    tci: k.vlan_tci2 & !VLAN_CFI,
                });
            }
            if ktags[0] {
                self.actions.push(DpAction::PushVlan {
                    tpid: 0x8100,
                    tci: k.vlan_tci & !VLAN_CFI,
                });
            }
            self.committed.vlan_tci = k.vlan_tci;
            self.committed.vlan_tci2 = k.vlan_tci2;
        }
        paused
    }

    /// While freezing: keep `rest`, the actions of the list being unwound
    /// that did not run, for the resume, with the table and cookie they
    /// run under (OVS's `freeze_unroll_actions`). `goto_table` and
    /// `write_metadata` are instructions, not actions: they are kept as
    /// the `resubmit` and `set_field` that do the same.
    fn unroll(&mut self, rest: &[Action], table_id: u8) {
        let Some((_, p)) = &mut self.freezing else {
            return;
        };
        if rest.is_empty() {
            return;
        }
        let actions = rest
            .iter()
            .map(|a| match a {
                Action::GotoTable(t) => Action::Resubmit {
                    port: None,
                    table: Some(*t),
                },
                Action::WriteMetadata { value, mask } => Action::SetField {
                    field: Field::Metadata,
                    value: (*value).into(),
                    mask: (*mask).into(),
                },
                a => a.clone(),
            })
            .collect();
        p.frames.push(PausedFrame {
            table_id,
            cookie: self.rule_cookie,
            actions,
        });
    }

    /// End a freeze: the continuation (with the stack as it is now) goes
    /// into the paused copy. Returns whether there was one.
    fn finish_freeze(&mut self) -> bool {
        let Some((at, mut p)) = self.freezing.take() else {
            return false;
        };
        p.stack = self.stack.clone();
        if let Some(DpAction::Controller {
            extra: Some(extra), ..
        }) = self.actions.get_mut(at)
        {
            extra.paused = Some(p);
        }
        true
    }

    /// Is a bucket live? Its watched port must be on the bridge and its
    /// watched group have a live bucket; a bucket watching nothing is live.
    fn bucket_live(&self, b: &nicflow_ofctl::Bucket, depth: u32) -> bool {
        if let Some(p) = b.watch_port {
            if self.of.ports().binary_search(&p).is_err() {
                return false;
            }
        }
        if let Some(g) = b.watch_group {
            if depth >= MAX_DEPTH {
                return false;
            }
            let Some(g) = self.of.groups.get(g) else {
                return false;
            };
            if !g
                .spec
                .buckets
                .iter()
                .any(|b| self.bucket_live(b, depth + 1))
            {
                return false;
            }
        }
        true
    }

    /// A select group's bucket: among live buckets of non-zero weight, by a
    /// hash of the packet, each bucket taking a share of the hash space in
    /// proportion to its weight. The hash covers the group's `fields` under
    /// `selection_method=hash`, else the L3/L4 5-tuple; those fields join
    /// the megaflow mask, so one connection always takes one bucket and
    /// the choice is cached with the flow.
    fn select_bucket(&mut self, g: &nicflow_ofctl::GroupSpec) -> Option<usize> {
        let live: Vec<(usize, u64)> = g
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.weight > 0 && self.bucket_live(b, 0))
            .map(|(i, b)| (i, u64::from(b.weight)))
            .collect();
        if live.is_empty() {
            return None;
        }
        let h = if g.selection_method == Some(nicflow_ofctl::SelectionMethod::Hash) {
            self.hash_fields(&g.fields, g.selection_method_param)
        } else {
            self.hash_5tuple()
        };
        let total: u64 = live.iter().map(|(_, w)| w).sum();
        let mut x = h % total;
        for (i, w) in live {
            if x < w {
                return Some(i);
            }
            x -= w;
        }
        None
    }

    /// Hash `f` of the packet and make the flow match on all of it.
    fn hash_field(&mut self, h: u64, f: Field, mask: u128) -> u64 {
        let w = f.read(&self.wc.0) | mask;
        f.write(&mut self.wc.0, w);
        mix(h, f.read(&self.key) & mask)
    }

    fn hash_5tuple(&mut self) -> u64 {
        let mut h = 0;
        if self.is_dl(ETH_IPV4) {
            h = self.hash_field(h, Field::NwSrc, u32::MAX.into());
            h = self.hash_field(h, Field::NwDst, u32::MAX.into());
        } else if self.is_dl(ETH_IPV6) {
            h = self.hash_field(h, Field::Ipv6Src, u128::MAX);
            h = self.hash_field(h, Field::Ipv6Dst, u128::MAX);
        } else {
            h = self.hash_field(h, Field::DlSrc, Field::DlSrc.full_mask());
            return self.hash_field(h, Field::DlDst, Field::DlDst.full_mask());
        }
        h = mix(h, self.key.nw_proto.into());
        if self.has_ports() {
            h = self.hash_field(h, Field::TpSrc, 0xffff);
            h = self.hash_field(h, Field::TpDst, 0xffff);
        }
        h
    }

    /// `selection_method=hash,fields(...)`: fields whose prerequisites the
    /// packet does not meet are skipped (OVS's
    /// `pick_hash_fields_select_group`).
    fn hash_fields(&mut self, fields: &[nicflow_ofctl::HashField], basis: u64) -> u64 {
        let mut h = mix(0, basis.into());
        let exact = FlowMask::exact();
        for hf in fields {
            let pre = hf.field.prereq();
            if pre != nicflow_flow::Prereq::None || hf.proto.is_some() {
                self.wc.0.dl_type = 0xffff;
                self.wc.0.nw_proto = 0xff;
                if pre.needs_ct() {
                    self.wc.0.ct_state = u32::MAX as _;
                }
            }
            let ok = pre.satisfied(&self.key, &exact.0)
                && hf.proto.is_none_or(|p| {
                    self.key.nw_proto == p
                        && (self.key.dl_type == ETH_IPV4 || self.key.dl_type == ETH_IPV6)
                });
            if ok {
                h = self.hash_field(h, hf.field, hf.mask);
            }
        }
        h
    }
}

/// Translate an action list that belongs to no rule — an OpenFlow
/// `PACKET_OUT`'s — for the packet with `key`, as if a rule in table 0
/// ran it: `resubmit(,N)` (and `output:TABLE`, which the caller turns
/// into `resubmit(,0)`) walks the tables from there. The result is for
/// this one packet and is never cached.
pub fn translate_actions(
    of: &mut Ofproto,
    key: &FlowKey,
    actions: &[Action],
    learn: Option<Instant>,
) -> XlateOut {
    let mut ctx = Ctx::new(of, key, learn);
    ctx.uncacheable = true;
    ctx.rule_cookie = u64::MAX;
    for (i, a) in actions.iter().enumerate() {
        if ctx.stop {
            ctx.unroll(&actions[i..], 0);
            break;
        }
        ctx.action(a, 0);
    }
    ctx.finish_freeze();
    if ctx.work > MAX_RESUBMITS {
        ctx.actions.clear();
        ctx.actions.push(DpAction::Drop(DropReason::RecursionLimit));
    }
    XlateOut {
        mask: ctx.wc,
        actions: ctx.actions,
        rules: ctx.rules,
        install: false,
        learned: ctx.learned,
        state_changed: ctx.mac_changed,
        emitted: Vec::new(),
    }
}

/// `NXT_RESUME`: the walk `paused` describes goes on for the packet with
/// `key` (its bytes and the pipeline fields the controller sent back):
/// each frame's actions run under its table and cookie, with the stack
/// restored; no table is looked up first (OVS's `xlate_resume`). Another
/// `controller(pause)` freezes it again. Never cached.
pub fn translate_resume(
    of: &mut Ofproto,
    key: &FlowKey,
    paused: &Paused,
    learn: Option<Instant>,
) -> XlateOut {
    let mut ctx = Ctx::new(of, key, learn);
    ctx.uncacheable = true;
    ctx.stack = paused.stack.clone();
    for (n, f) in paused.frames.iter().enumerate() {
        ctx.rule_table = f.table_id;
        ctx.rule_cookie = f.cookie;
        for (i, a) in f.actions.iter().enumerate() {
            if ctx.stop {
                ctx.unroll(&f.actions[i..], f.table_id);
                break;
            }
            ctx.action(a, f.table_id);
        }
        if ctx.stop {
            for later in &paused.frames[n + 1..] {
                ctx.rule_cookie = later.cookie;
                ctx.unroll(&later.actions, later.table_id);
            }
            break;
        }
    }
    ctx.finish_freeze();
    if ctx.work > MAX_RESUBMITS {
        ctx.actions.clear();
        ctx.actions.push(DpAction::Drop(DropReason::RecursionLimit));
    }
    XlateOut {
        mask: ctx.wc,
        actions: ctx.actions,
        rules: ctx.rules,
        install: false,
        learned: ctx.learned,
        state_changed: ctx.mac_changed,
        emitted: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Ofproto;
    use crate::datapath::DpAction;
    use nicflow_flow::{FlowKey, FlowMask};
    use nicflow_ofctl::{parse_flow, NumericPorts};
    use std::time::Instant;

    fn of(rules: &[&str]) -> Ofproto {
        let mut of = Ofproto::new();
        of.set_ports((1..=100).collect());
        for r in rules {
            let spec = parse_flow(r, &NumericPorts).unwrap_or_else(|e| panic!("{r}: {e}"));
            of.add_flow(&spec, Instant::now()).unwrap();
        }
        of
    }

    fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, tp_dst: u16) -> FlowKey {
        FlowKey {
            in_port: 1,
            dl_type: 0x0800,
            nw_src: u32::from_be_bytes(src),
            nw_dst: u32::from_be_bytes(dst),
            nw_proto: proto,
            nw_ttl: 64,
            tp_dst,
            ..FlowKey::default()
        }
    }

    fn outputs(a: &[DpAction]) -> Vec<u32> {
        a.iter()
            .filter_map(|a| match a {
                DpAction::Output(p) => Some(*p),
                _ => None,
            })
            .collect()
    }

    /// What the translation does, and that every key agreeing with `k` on
    /// the megaflow mask is translated the same way (the mask is sound).
    fn run(of: &mut Ofproto, k: &FlowKey) -> (Vec<DpAction>, FlowMask) {
        let out = of.translate(k, None);
        assert_eq!(
            out.mask.0.conj_id, 0,
            "conj_id never reaches a datapath mask"
        );
        (out.actions, out.mask)
    }

    /// The paused copy's continuation and pipeline, and the walk after it.
    fn paused(out: &crate::datapath::XlateOut) -> (crate::datapath::action::Paused, FlowKey) {
        let p = out.actions.iter().find_map(|a| match a {
            DpAction::Controller { extra: Some(e), .. } => {
                e.paused.clone().map(|p| (p, e.pipeline))
            }
            _ => None,
        });
        p.unwrap_or_else(|| panic!("no continuation in {:?}", out.actions))
    }

    fn resume(
        of: &mut Ofproto,
        k: &FlowKey,
        p: &crate::datapath::action::Paused,
    ) -> crate::datapath::XlateOut {
        super::translate_resume(of, k, p, Some(Instant::now()))
    }

    #[test]
    fn pause_freezes_the_rest_and_resume_runs_it() {
        let mut of = of(&["cookie=0x5,in_port=1,actions=load:0x2a->NXM_NX_REG0[],\
             controller(userdata=01.02,pause),output:2"]);
        let k = FlowKey {
            in_port: 1,
            ..FlowKey::default()
        };
        let out = of.translate(&k, None);
        assert!(
            !out.install,
            "each paused packet needs its own continuation"
        );
        assert_eq!(
            outputs(&out.actions),
            Vec::<u32>::new(),
            "{:?}",
            out.actions
        );
        let (p, pipeline) = paused(&out);
        assert_eq!(pipeline.regs[0], 0x2a);
        assert_eq!(p.frames.len(), 1);
        assert_eq!((p.frames[0].table_id, p.frames[0].cookie), (0, 5));
        assert_eq!(p.frames[0].actions, vec![nicflow_flow::Action::Output(2)]);
        let r = resume(&mut of, &pipeline, &p);
        assert_eq!(outputs(&r.actions), vec![2]);
        assert!(!r.install);
    }

    /// Paused two tables deep: the inner rule's rest, then the calling
    /// rule's actions after its `resubmit`; the registers come back with
    /// the pipeline and later lookups see them; the stack is restored.
    #[test]
    fn pause_inside_resubmit_resumes_both_levels_with_registers_and_stack() {
        let mut of = of(&[
            "table=0,cookie=0x10,in_port=1,actions=load:0x7->NXM_NX_REG1[],\
             push:NXM_NX_REG1[],resubmit(,1),output:3",
            "table=1,cookie=0x11,actions=controller(pause),load:0x8->NXM_NX_REG2[],resubmit(,2)",
            "table=2,reg1=7,reg2=8,actions=pop:NXM_NX_REG3[],resubmit(,3)",
            "table=2,priority=0,actions=output:9",
            "table=3,reg3=7,actions=output:2",
        ]);
        let k = FlowKey {
            in_port: 1,
            ..FlowKey::default()
        };
        let out = of.translate(&k, None);
        assert_eq!(outputs(&out.actions), Vec::<u32>::new());
        let (p, pipeline) = paused(&out);
        let frames: Vec<_> = p.frames.iter().map(|f| (f.table_id, f.cookie)).collect();
        assert_eq!(frames, vec![(1, 0x11), (0, 0x10)]);
        assert_eq!(p.stack, vec![7]);
        let r = resume(&mut of, &pipeline, &p);
        assert_eq!(outputs(&r.actions), vec![2, 3], "{:?}", r.actions);
        // Without the registers (a controller that dropped them) the
        // resumed walk goes elsewhere: they do come from the pipeline.
        let r = resume(&mut of, &k, &p);
        assert_eq!(outputs(&r.actions), vec![9, 3], "{:?}", r.actions);
    }

    /// In a clone only the clone's rest is frozen, and (as in OVS, whose
    /// clone leaves the walk exited) nothing after the clone runs.
    #[test]
    fn pause_inside_clone_keeps_the_clone_rest_only() {
        let mut of = of(&[
            "in_port=1,actions=clone(load:0x3->NXM_NX_REG0[],controller(pause),\
             output:2),output:3",
        ]);
        let k = FlowKey {
            in_port: 1,
            ..FlowKey::default()
        };
        let out = of.translate(&k, None);
        assert_eq!(
            outputs(&out.actions),
            Vec::<u32>::new(),
            "{:?}",
            out.actions
        );
        let (p, pipeline) = paused(&out);
        assert_eq!(pipeline.regs[0], 3);
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.frames[0].actions, vec![nicflow_flow::Action::Output(2)]);
        assert_eq!(outputs(&resume(&mut of, &pipeline, &p).actions), vec![2]);
    }

    /// `goto_table` left in a paused rule comes back as a `resubmit`, and
    /// the resumed walk looks up the (controller-modified) packet.
    #[test]
    fn resumed_walk_sees_the_modified_packet() {
        let mut of = of(&[
            "table=0,ip,actions=controller(pause),goto_table:1",
            "table=1,ip,nw_dst=198.18.0.2,actions=output:2",
            "table=1,ip,nw_dst=198.18.0.9,actions=output:9",
        ]);
        let k = ipv4([198, 18, 0, 1], [198, 18, 0, 2], 17, 67);
        let out = of.translate(&k, None);
        let (p, pipeline) = paused(&out);
        assert_eq!(
            p.frames[0].actions,
            vec![nicflow_flow::Action::Resubmit {
                port: None,
                table: Some(1)
            }]
        );
        assert_eq!(outputs(&resume(&mut of, &pipeline, &p).actions), vec![2]);
        let changed = ipv4([198, 18, 0, 1], [198, 18, 0, 9], 17, 67);
        assert_eq!(outputs(&resume(&mut of, &changed, &p).actions), vec![9]);
    }

    /// In a group bucket only the bucket's rest is frozen: the other
    /// buckets and the actions after the group go on (OVS's
    /// `xlate_group_bucket` clears the exit).
    #[test]
    fn pause_inside_a_group_bucket_keeps_the_bucket_rest() {
        let mut of = of(&[]);
        let g = nicflow_ofctl::parse_group(
            "group_id=1,type=all,bucket=actions=controller(pause),output:2,bucket=actions=output:3",
            &NumericPorts,
        )
        .unwrap();
        of.add_groups(&[g], false, Instant::now()).unwrap();
        let r = parse_flow("in_port=1,actions=group:1,output:4", &NumericPorts).unwrap();
        of.add_flow(&r, Instant::now()).unwrap();
        let k = FlowKey {
            in_port: 1,
            ..FlowKey::default()
        };
        let out = of.translate(&k, None);
        assert_eq!(outputs(&out.actions), vec![3, 4], "{:?}", out.actions);
        let (p, pipeline) = paused(&out);
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.frames[0].actions, vec![nicflow_flow::Action::Output(2)]);
        assert_eq!(outputs(&resume(&mut of, &pipeline, &p).actions), vec![2]);
    }

    /// A resumed walk that reaches another pause freezes again, keeping
    /// what was left of the first continuation after it.
    #[test]
    fn resumed_walk_can_pause_again() {
        let mut of = of(&[
            "table=0,cookie=0x1,in_port=1,actions=resubmit(,1),output:4",
            "table=1,cookie=0x2,actions=controller(pause),resubmit(,2),output:3",
            "table=2,cookie=0x3,actions=controller(pause),output:2",
        ]);
        let k = FlowKey {
            in_port: 1,
            ..FlowKey::default()
        };
        let (p, pipeline) = paused(&of.translate(&k, None));
        let r = resume(&mut of, &pipeline, &p);
        assert_eq!(outputs(&r.actions), Vec::<u32>::new());
        let (p2, pipeline) = paused(&r);
        let frames: Vec<_> = p2.frames.iter().map(|f| (f.table_id, f.cookie)).collect();
        assert_eq!(frames, vec![(2, 3), (1, 2), (0, 1)]);
        assert_eq!(
            outputs(&resume(&mut of, &pipeline, &p2).actions),
            vec![2, 3, 4]
        );
    }

    /// A chain of forward resubmits longer than `MAX_DEPTH` (OVN's logical
    /// pipelines for a routed packet: ~90 tables, all forward) is not a
    /// loop and reaches its output; a loop back into the same table still
    /// stops at the limit.
    #[test]
    fn forward_resubmits_do_not_deepen() {
        let n = super::MAX_DEPTH as usize + 40;
        let mut rules: Vec<String> = (0..n)
            .map(|t| format!("table={t},priority=1,actions=resubmit(,{})", t + 1))
            .collect();
        rules.push(format!("table={n},priority=1,actions=output:7"));
        let refs: Vec<&str> = rules.iter().map(String::as_str).collect();
        let mut o = of(&refs);
        let (a, _) = run(&mut o, &ipv4([198, 18, 0, 1], [198, 18, 0, 2], 17, 53));
        assert_eq!(outputs(&a), vec![7], "{a:?}");
        let mut lp = of(&["table=0,priority=1,actions=resubmit(,0)"]);
        let (a, _) = run(&mut lp, &ipv4([198, 18, 0, 1], [198, 18, 0, 2], 17, 53));
        assert!(
            a.iter().any(|x| matches!(
                x,
                DpAction::Drop(crate::datapath::DropReason::RecursionLimit)
            )),
            "{a:?}"
        );
    }

    /// OVN's address-set ACL shape: three dimensions, a priority above and
    /// one below, and a second conjunction sharing a dimension.
    #[test]
    fn conjunction_needs_every_dimension() {
        let mut of = of(&[
            "priority=100,ip,nw_src=198.18.0.1,actions=conjunction(1,1/3)",
            "priority=100,ip,nw_src=198.18.0.2,actions=conjunction(1,1/3),conjunction(2,1/2)",
            "priority=100,ip,nw_dst=198.19.0.1,actions=conjunction(1,2/3)",
            "priority=100,ip,nw_dst=198.19.0.2,actions=conjunction(1,2/3),conjunction(2,2/2)",
            "priority=100,tcp,tp_dst=80,actions=conjunction(1,3/3)",
            "priority=100,conj_id=1,ip,actions=output:10",
            "priority=100,conj_id=2,ip,actions=output:20",
            "priority=200,ip,nw_src=198.18.0.9,actions=output:99",
            "priority=1,ip,actions=output:2",
        ]);
        let cases = [
            // all three dimensions of 1
            (ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80), vec![10]),
            // dimension 3 missing: the low-priority rule
            (ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 81), vec![2]),
            (ipv4([198, 18, 0, 1], [198, 19, 0, 1], 17, 80), vec![2]),
            // dimension 1 missing
            (ipv4([198, 18, 0, 3], [198, 19, 0, 1], 6, 80), vec![2]),
            // 2 is complete with two dimensions (1 is too when tcp/80)
            (ipv4([198, 18, 0, 2], [198, 19, 0, 2], 17, 53), vec![20]),
            // a higher-priority ordinary rule wins over a complete match
            (ipv4([198, 18, 0, 9], [198, 19, 0, 1], 6, 80), vec![99]),
        ];
        for (k, want) in &cases {
            let (a, mask) = run(&mut of, k);
            assert_eq!(outputs(&a), *want, "{k:?}");
            // Any packet agreeing on the mask gets the same answer.
            for (k2, want2) in &cases {
                if k2.masked(&mask) == k.masked(&mask) {
                    assert_eq!(want2, want, "{k:?} and {k2:?} share mask {mask:?}");
                }
            }
        }
        // Both 1 and 2 complete for this packet: either conj_id flow is
        // what OVS may pick; it must be one of them.
        let (a, _) = run(&mut of, &ipv4([198, 18, 0, 2], [198, 19, 0, 2], 6, 80));
        assert!(matches!(outputs(&a)[..], [10] | [20]), "{a:?}");
    }

    /// A 64-clause conjunction (the most the syntax allows) is complete
    /// only with all 64 dimensions: 64 matching rules that all give clause
    /// 1 leave it incomplete, so the packet falls to the rule below.
    #[test]
    fn conjunction_of_64_clauses_needs_them_all() {
        let mut rules: Vec<String> = (1..=32)
            .flat_map(|len| {
                [
                    format!("priority=100,ip,nw_src=198.18.0.1/{len},actions=conjunction(1,1/64)"),
                    format!("priority=100,ip,nw_dst=198.19.0.1/{len},actions=conjunction(1,1/64)"),
                ]
            })
            .collect();
        rules.push("priority=100,conj_id=1,ip,actions=output:10".into());
        rules.push("priority=1,ip,actions=output:2".into());
        let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
        let mut of = of(&rules);
        let (a, _) = run(&mut of, &ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80));
        assert_eq!(outputs(&a), vec![2], "{a:?}");
    }

    /// The soft match at a priority only counts there: clauses at two
    /// priorities do not add up, and an ordinary rule at the same priority
    /// as the soft ones wins (OVS: `hard_pri >= soft_pri`).
    #[test]
    fn conjunction_priorities() {
        let mut of = of(&[
            "priority=100,ip,nw_src=198.18.0.1,actions=conjunction(1,1/2)",
            "priority=90,ip,nw_dst=198.19.0.1,actions=conjunction(1,2/2)",
            "priority=90,conj_id=1,ip,actions=output:10",
            "priority=50,ip,actions=output:2",
        ]);
        let (a, _) = run(&mut of, &ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80));
        assert_eq!(outputs(&a), vec![2]);
        let mut of2 = of_with_tie();
        let (a, _) = run(&mut of2, &ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80));
        assert_eq!(outputs(&a), vec![3]);
        // Without a conj_id flow, a complete conjunction falls back to the
        // best ordinary match.
        let mut of3 = self::of(&[
            "priority=100,ip,nw_src=198.18.0.1,actions=conjunction(7,1/2)",
            "priority=100,ip,nw_dst=198.19.0.1,actions=conjunction(7,2/2)",
            "priority=5,ip,actions=output:4",
        ]);
        let (a, _) = run(&mut of3, &ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80));
        assert_eq!(outputs(&a), vec![4]);
        // And a table of soft matches only, incomplete: a miss (drop).
        let mut of4 = self::of(&["priority=100,ip,nw_src=198.18.0.1,actions=conjunction(7,1/2)"]);
        let (a, _) = run(&mut of4, &ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80));
        assert!(outputs(&a).is_empty(), "{a:?}");
    }

    fn of_with_tie() -> Ofproto {
        of(&[
            "priority=100,ip,nw_src=198.18.0.1,actions=conjunction(1,1/2)",
            "priority=100,ip,nw_dst=198.19.0.1,actions=conjunction(1,2/2)",
            "priority=100,tcp,actions=output:3",
            "priority=100,conj_id=1,ip,actions=output:10",
        ])
    }

    /// clone: the copy's changes (fields, tags, registers) do not leak.
    #[test]
    fn clone_is_isolated() {
        let mut of = of(&[
            "priority=10,ip,actions=clone(mod_nw_dst:198.19.9.9,push_vlan:0x8100,mod_vlan_vid:7,set_field:5->reg0,output:2),resubmit(,1)",
            "table=1,priority=10,reg0=5,actions=output:99",
            "table=1,priority=5,actions=output:3",
        ]);
        let k = ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80);
        let (a, _) = run(&mut of, &k);
        assert_eq!(outputs(&a), vec![2, 3], "{a:?}");
        // After the clone's output: the tag popped, the address restored.
        let after = a.iter().position(|x| *x == DpAction::Output(2)).unwrap();
        let rest = &a[after + 1..];
        assert!(rest.contains(&DpAction::PopVlan), "{a:?}");
        assert!(
            rest.contains(&DpAction::SetIpv4Dst(k.nw_dst)),
            "address restored before output:3: {a:?}"
        );
    }

    /// push/pop: a stack of bit strings; pop into a packet field rewrites it;
    /// the pushed bits join the mask; popping an empty stack does nothing.
    #[test]
    fn stack_push_pop() {
        let mut of = of(&[
            "priority=10,ip,actions=push:NXM_OF_IP_SRC[],push:NXM_OF_IP_DST[],pop:NXM_OF_IP_SRC[],pop:NXM_OF_IP_DST[],pop:NXM_NX_REG0[],output:2",
        ]);
        let k = ipv4([198, 18, 0, 1], [198, 19, 0, 1], 6, 80);
        let (a, mask) = run(&mut of, &k);
        assert!(a.contains(&DpAction::SetIpv4Src(k.nw_dst)), "{a:?}");
        assert!(a.contains(&DpAction::SetIpv4Dst(k.nw_src)), "{a:?}");
        assert_eq!(outputs(&a), vec![2]);
        assert_eq!((mask.0.nw_src, mask.0.nw_dst), (u32::MAX, u32::MAX));
        // Partial: the low byte of reg1 goes to bits 8..15 of reg2; the
        // clone's own pops do not eat the outer stack... but its pushes do
        // not survive either.
        let mut of = self::of(&[
            "priority=10,ip,actions=load:0xab->NXM_NX_REG1[0..7],push:NXM_NX_REG1[0..7],clone(pop:NXM_NX_REG3[0..7]),clone(push:NXM_NX_REG1[0..7]),pop:NXM_NX_REG2[8..15],pop:NXM_NX_REG4[],resubmit(,1)",
            "table=1,priority=10,reg2=0xab00,reg3=0,reg4=0,actions=output:7",
            "table=1,priority=5,actions=output:8",
        ]);
        let (a, _) = run(&mut of, &k);
        assert_eq!(outputs(&a), vec![7], "{a:?}");
    }
}

/// The OVN actions' slow-path tests: one switch of ports 1 and 2 per rule.
#[cfg(test)]
mod ovn_action_tests {
    use super::super::Ofproto;
    use crate::datapath::DpAction;
    use nicflow_flow::FlowKey;
    use nicflow_ofctl::{parse_flow, NumericPorts};
    use std::time::Instant;

    /// An ofproto with ports 1 and 2 and the one rule `rule`.
    fn ofproto_with(rule: &str) -> Ofproto {
        let mut of = Ofproto::new();
        of.set_ports(vec![1, 2]);
        of.add_flow(&parse_flow(rule, &NumericPorts).unwrap(), Instant::now())
            .unwrap();
        of
    }

    /// `controller(reason=..)` carries its reason; `pause` ends the walk
    /// after the copy (the rest waits for `NXT_RESUME`), without it the walk goes on.
    #[test]
    fn controller2_reason_and_pause() {
        for (rule, more) in [
            (
                "actions=controller(reason=no_match,userdata=01.02,pause),output:2",
                false,
            ),
            (
                "actions=controller(reason=no_match,userdata=01.02),output:2",
                true,
            ),
        ] {
            let mut of = ofproto_with(rule);
            let k = FlowKey {
                in_port: 1,
                ..FlowKey::default()
            };
            let out = of.translate(&k, None);
            assert!(
                matches!(out.actions[0], DpAction::Controller { reason: 0, .. }),
                "{rule}: {:?}",
                out.actions
            );
            assert_eq!(out.actions.contains(&DpAction::Output(2)), more, "{rule}");
        }
    }

    /// `dec_ttl(ids)`: an expired packet goes to the controller with
    /// reason `OFPR_INVALID_TTL` and is dropped (counted); a live one is
    /// decremented as by plain `dec_ttl`, which sends nothing on expiry.
    #[test]
    fn dec_ttl_ids_sends_invalid_ttl() {
        for (rule, to_controller) in [
            ("cookie=0x7,table=0,ip,actions=dec_ttl(1,2),output:2", true),
            ("cookie=0x7,table=0,ip,actions=dec_ttl,output:2", false),
        ] {
            let mut of = ofproto_with(rule);
            let mut k = FlowKey {
                in_port: 1,
                dl_type: 0x0800,
                nw_ttl: 1,
                ..FlowKey::default()
            };
            let out = of.translate(&k, None);
            let mut want = vec![DpAction::Drop(crate::datapath::DropReason::TtlExceeded)];
            if to_controller {
                want.insert(
                    0,
                    DpAction::Controller {
                        max_len: 0,
                        reason: 2,
                        table_id: 0,
                        cookie: 7,
                        extra: None,
                    },
                );
            }
            assert_eq!(out.actions, want, "{rule}");
            assert_eq!(out.mask.0.nw_ttl, 0xff);
            k.nw_ttl = 64;
            let out = of.translate(&k, None);
            assert_eq!(
                out.actions,
                vec![DpAction::SetTtl(63), DpAction::Output(2)],
                "{rule}"
            );
        }
    }

    /// OVN's ARP responder: the request becomes a reply in place.
    #[test]
    fn arp_request_becomes_reply() {
        let rule = "arp,arp_op=1,actions=set_field:2->arp_op,push:NXM_OF_ARP_SPA[],push:NXM_OF_ARP_TPA[],pop:NXM_OF_ARP_SPA[],pop:NXM_OF_ARP_TPA[],in_port";
        let mut of = ofproto_with(rule);
        let k = FlowKey {
            in_port: 1,
            dl_type: 0x0806,
            nw_proto: 1,
            nw_src: 0xc612_0001,
            nw_dst: 0xc612_0002,
            ..FlowKey::default()
        };
        let out = of.translate(&k, None);
        assert!(
            out.actions.contains(&DpAction::SetArpOp(2)),
            "{:?}",
            out.actions
        );
        assert!(out.actions.contains(&DpAction::SetArpSpa(0xc612_0002)));
        assert!(out.actions.contains(&DpAction::SetArpTpa(0xc612_0001)));
        assert_eq!(out.actions.last(), Some(&DpAction::Output(1)));
    }

    /// `ct(commit,exec(move:eth_src->ct_label[32..79]))`: the label the
    /// tracker gets holds this packet's source MAC, under the label mask
    /// the load wrote too; the MAC joins the flow's mask.
    #[test]
    fn exec_move_reads_the_packet() {
        let rule = "ip,actions=ct(commit,exec(load:0x1->NXM_NX_CT_LABEL[1],move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[32..79])),output:2";
        let mut of = ofproto_with(rule);
        let k = FlowKey {
            in_port: 1,
            dl_type: 0x0800,
            dl_src: [0x02, 0, 0, 0, 0x12, 0x34],
            ..FlowKey::default()
        };
        let out = of.translate(&k, None);
        let label = out.actions.iter().find_map(|a| match a {
            DpAction::Ct { label, .. } => *label,
            _ => None,
        });
        let mac = 0x0200_0000_1234u128;
        assert_eq!(
            label,
            Some(((mac << 32) | 2, (((1u128 << 48) - 1) << 32) | 2)),
            "{:?}",
            out.actions
        );
        assert_eq!(out.mask.0.dl_src, [0xff; 6]);
    }
}

#[cfg(test)]
mod conj_random_tests {
    use super::super::Ofproto;
    use crate::datapath::DpAction;
    use nicflow_flow::{Action, FlowKey, Match};
    use nicflow_ofctl::{parse_flow, NumericPorts};
    use std::collections::BTreeSet;
    use std::time::Instant;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// OVS's conjunctive-match semantics, brute force over every rule: the
    /// output ports any correct lookup may give (ties between complete
    /// conjunctions at one priority may go either way).
    fn oracle(rules: &[(u16, Match, Vec<Action>)], k: &FlowKey) -> BTreeSet<Option<u32>> {
        let out = |a: &[Action]| match a.first() {
            Some(Action::Output(p)) => Some(*p),
            _ => None,
        };
        let soft = |a: &[Action]| a.first().is_some_and(Action::is_conjunction);
        let best_hard = |k: &FlowKey| {
            rules
                .iter()
                .filter(|(_, m, a)| !soft(a) && m.matches(k))
                .max_by_key(|(p, _, _)| *p)
        };
        let hard = best_hard(k);
        let hard_pri = hard.map_or(-1, |h| i32::from(h.0));
        let mut prios: Vec<u16> = rules
            .iter()
            .filter(|(p, m, a)| soft(a) && m.matches(k) && i32::from(*p) > hard_pri)
            .map(|r| r.0)
            .collect();
        prios.sort_unstable_by(|a, b| b.cmp(a));
        prios.dedup();
        for p in prios {
            let level: Vec<&Vec<Action>> = rules
                .iter()
                .filter(|(q, m, a)| *q == p && soft(a) && m.matches(k))
                .map(|r| &r.2)
                .collect();
            let mut got = BTreeSet::new();
            for id in 1..=2u32 {
                let mut seen = 0u64;
                let mut n = 0;
                for acts in &level {
                    for a in acts.iter() {
                        if let Action::Conjunction {
                            id: i,
                            clause,
                            n_clauses,
                        } = a
                        {
                            if *i == id && usize::from(*n_clauses) <= level.len() {
                                seen |= 1 << (clause - 1);
                                n = *n_clauses;
                            }
                        }
                    }
                }
                if n > 0 && seen == (1u64 << n) - 1 {
                    let mut k2 = *k;
                    k2.conj_id = id;
                    if let Some(r) = best_hard(&k2) {
                        got.insert(out(&r.2));
                    }
                }
            }
            if !got.is_empty() {
                return got;
            }
        }
        [hard.and_then(|h| out(&h.2))].into()
    }

    /// Random tables of soft rules (two priorities, two conjunctions of two
    /// dimensions), ordinary rules above and below, and conj_id rules: every
    /// packet of a small domain gets what OVS's semantics give, and every
    /// other packet that agrees with it on the megaflow mask gets the same.
    #[test]
    fn random_conjunction_tables_match_the_oracle_and_masks_are_sound() {
        let seed = std::env::var("NICFLOW_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("conj_random: seed {seed} (NICFLOW_SEED=... to repeat)");
        let mut rng = Rng(seed);
        let srcs = ["198.18.0.1", "198.18.0.2", "198.18.0.3"];
        let ports = [80u16, 443, 22];
        for round in 0..40 {
            let mut text = Vec::new();
            let mut prio = 10u16;
            for _ in 0..rng.below(8) + 2 {
                let p = [100, 90][rng.below(2) as usize];
                let id = rng.below(2) + 1;
                if rng.below(2) == 0 {
                    let s = srcs[rng.below(3) as usize];
                    text.push(format!(
                        "priority={p},ip,nw_src={s},actions=conjunction({id},1/2)"
                    ));
                } else {
                    let d = ports[rng.below(3) as usize];
                    text.push(format!(
                        "priority={p},tcp,tp_dst={d},actions=conjunction({id},2/2)"
                    ));
                }
            }
            for i in 0..rng.below(4) + 1 {
                prio += 13 + rng.below(30) as u16;
                let m = match rng.below(3) {
                    0 => format!("ip,nw_src={}", srcs[rng.below(3) as usize]),
                    1 => format!("tcp,tp_dst={}", ports[rng.below(3) as usize]),
                    _ => "ip".to_string(),
                };
                text.push(format!("priority={prio},{m},actions=output:{}", 10 + i));
            }
            for id in 1..=2 {
                if rng.below(4) != 0 {
                    prio += 7;
                    text.push(format!(
                        "priority={prio},conj_id={id},ip,actions=output:{id}"
                    ));
                }
            }
            let mut of = Ofproto::new();
            of.set_ports((1..=20).collect());
            let mut rules: Vec<(u16, Match, Vec<Action>)> = Vec::new();
            for t in &text {
                let spec = parse_flow(t, &NumericPorts).unwrap_or_else(|e| panic!("{t}: {e}"));
                // A rule with the same match and priority replaces the old
                // one, in the table as in the model.
                rules.retain(|(p, m, _)| !(*p == spec.priority && *m == spec.r#match));
                rules.push((spec.priority, spec.r#match, spec.actions.clone()));
                of.add_flow(&spec, Instant::now()).unwrap();
            }
            let keys: Vec<FlowKey> = (0..4u32)
                .flat_map(|s| {
                    [80u16, 443, 22, 53].into_iter().map(move |d| FlowKey {
                        in_port: 20,
                        dl_type: 0x0800,
                        nw_proto: 6,
                        nw_ttl: 64,
                        nw_src: 0xc612_0001 + s,
                        nw_dst: 0xc613_0001,
                        tp_dst: d,
                        ..FlowKey::default()
                    })
                })
                .collect();
            let output = |a: &[DpAction]| -> Option<u32> {
                a.iter().find_map(|a| match a {
                    DpAction::Output(p) => Some(*p),
                    _ => None,
                })
            };
            for k in &keys {
                let out = of.translate(k, None);
                let got = output(&out.actions);
                let want = oracle(&rules, k);
                assert!(
                    want.contains(&got),
                    "seed {seed} round {round}: {k:?} gave {got:?}, OVS gives one of {want:?}\n{}",
                    text.join("\n")
                );
                for k2 in &keys {
                    if k2.masked(&out.mask) == k.masked(&out.mask) {
                        assert!(
                            oracle(&rules, k2).contains(&got),
                            "seed {seed} round {round}: {k2:?} agrees with {k:?} on the mask \
                             but must not get {got:?}\n{}",
                            text.join("\n")
                        );
                    }
                }
            }
        }
    }
}
