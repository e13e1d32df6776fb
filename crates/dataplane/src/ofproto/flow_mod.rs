//! OpenFlow's flow-table commands: `FLOW_MOD` (add, modify, delete, strict
//! or not, with cookies, `out_port`/`out_group` and flags), the selection
//! behind flow statistics, and the rules a controller asked to hear about
//! when they leave (`FLOW_REMOVED`).
//!
//! Where it sits: the OpenFlow listener decodes a controller's message into
//! a [`FlowMod`] and hands it to the bridge, which calls
//! [`Ofproto::flow_mod`] and revalidates the datapath, exactly as for the
//! CLI's `add-flows`/`del-flows` (which are the `Add` and `Delete` commands
//! of the same tables). Semantics follow OpenFlow 1.3 (section 6.4) as Open
//! vSwitch implements them:
//! - `Add` needs one table; a rule with the same match and priority is
//!   replaced, its counters carried over unless `RESET_COUNTS`;
//!   `CHECK_OVERLAP` refuses a rule a packet could match together with
//!   another of the same priority (`OFPFMFC_OVERLAP`).
//! - `Modify` changes the actions (and the cookie, when the decoder says
//!   so) of every rule the match selects non-strictly (the rule is at least
//!   as specific), `ModifyStrict` of the one with this exact match and
//!   priority; neither adds a rule (OpenFlow 1.2+).
//! - `Delete`/`DeleteStrict` select the same way and also filter on
//!   `out_port` (the rule outputs there) and `out_group`.
//! - Cookies filter every command but `Add`: `rule.cookie & mask == cookie
//!   & mask`.

use super::{covers, new_table, Ofproto, OfprotoError, Rule, RuleDump, N_TABLES};
use nicflow_flow::{ofp, Action, Match, FLOW_WORDS};
use std::time::{Duration, Instant};

/// `OFPFF_*` flow-mod flags (OpenFlow 1.3 values), kept on the rule and
/// echoed in flow statistics.
pub mod flags {
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    pub const RESET_COUNTS: u16 = 1 << 2;
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

/// How many `FLOW_REMOVED` notices wait for a controller at most; older
/// ones are dropped first (a switch without a controller keeps none long).
const REMOVED_QUEUE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowModCommand {
    Add,
    Modify,
    ModifyStrict,
    Delete,
    DeleteStrict,
}

/// One `FLOW_MOD`, decoded.
#[derive(Clone, Debug)]
pub struct FlowMod {
    pub command: FlowModCommand,
    /// `None`: every table (`OFPTT_ALL`), allowed for all but `Add`.
    pub table: Option<u8>,
    pub priority: u16,
    /// `Add`: the new rule's cookie. Others: the filter with
    /// `cookie_mask`.
    pub cookie: u64,
    pub cookie_mask: u64,
    /// `Modify*`: the cookie the selected rules get, if any.
    pub new_cookie: Option<u64>,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    /// `OFPFF_*` bits ([`flags`]).
    pub flags: u16,
    /// `Delete*`: only rules that output to this port (`OFPP_ANY`: `None`).
    pub out_port: Option<u32>,
    /// `Delete*`: only rules that send to this group.
    pub out_group: Option<u32>,
    pub matching: Match,
    pub actions: Vec<Action>,
}

impl FlowMod {
    /// A plain `Add` of one rule, for tests and callers building rules.
    pub fn add(table: u8, priority: u16, matching: Match, actions: Vec<Action>) -> FlowMod {
        FlowMod {
            command: FlowModCommand::Add,
            table: Some(table),
            priority,
            cookie: 0,
            cookie_mask: 0,
            new_cookie: None,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: 0,
            out_port: None,
            out_group: None,
            matching,
            actions,
        }
    }

    fn strict(&self) -> bool {
        matches!(
            self.command,
            FlowModCommand::ModifyStrict | FlowModCommand::DeleteStrict
        )
    }
}

/// Which rules a flow-statistics request (or a non-strict command) means.
#[derive(Clone, Debug)]
pub struct FlowSelector {
    pub table: Option<u8>,
    pub out_port: Option<u32>,
    pub out_group: Option<u32>,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub matching: Match,
}

/// Why a rule left its table (`OFPRR_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovedReason {
    IdleTimeout = 0,
    HardTimeout = 1,
    Delete = 2,
    GroupDelete = 3,
}

/// A rule that left, for a `FLOW_REMOVED` message.
#[derive(Clone, Debug)]
pub struct RemovedRule {
    pub table: u8,
    pub priority: u16,
    pub cookie: u64,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub matching: Match,
    pub n_packets: u64,
    pub n_bytes: u64,
    pub duration: Duration,
    pub reason: RemovedReason,
    /// The rule's `OFPFF_*` flags.
    pub flags: u16,
}

impl RemovedRule {
    pub(super) fn of(table: u8, r: &Rule, reason: RemovedReason, now: Instant) -> RemovedRule {
        RemovedRule {
            table,
            priority: r.priority,
            cookie: r.cookie,
            idle_timeout: r.idle_timeout,
            hard_timeout: r.hard_timeout,
            matching: r.matching,
            n_packets: r.n_packets,
            n_bytes: r.n_bytes,
            duration: now.saturating_duration_since(r.created),
            reason,
            flags: r.flags,
        }
    }
}

/// A refused `FLOW_MOD`, with the OpenFlow error it maps to.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlowModError {
    /// `OFPFMFC_OVERLAP`.
    #[error("the rule overlaps another of priority {0} in its table (CHECK_OVERLAP)")]
    Overlap(u16),
    /// `OFPFMFC_BAD_TABLE_ID`: `Add` to all tables.
    #[error("add needs one table, not all")]
    AddToAllTables,
    /// `OFPFMFC_BAD_TIMEOUT` and friends come from the decoder; the rest
    /// are the tables' own refusals (bad table, goto, group).
    #[error(transparent)]
    Ofproto(#[from] OfprotoError),
}

/// Does a rule's action list output to `port`? (OVS's
/// `ofpacts_output_to_port`; reserved ports by their numbers.)
fn outputs_to(actions: &[Action], port: u32) -> bool {
    Action::flatten(actions).into_iter().any(|a| match a {
        Action::Output(p) | Action::OutputMaxLen { port: p, .. } => *p == port,
        Action::Enqueue { port: p, .. } => *p == port,
        Action::InPort => port == ofp::IN_PORT,
        Action::Normal => port == ofp::NORMAL,
        Action::Flood => port == ofp::FLOOD,
        Action::All => port == ofp::ALL,
        Action::Local => port == ofp::LOCAL,
        Action::Controller { .. } | Action::Controller2(_) => port == ofp::CONTROLLER,
        _ => false,
    })
}

fn sends_to_group(actions: &[Action], group: u32) -> bool {
    Action::flatten(actions)
        .into_iter()
        .any(|a| matches!(a, Action::Group(g) if *g == group))
}

/// Could one packet match both (key, mask) pairs?
fn overlaps(a: &Match, b_key: &[u64; FLOW_WORDS], b_mask: &[u64; FLOW_WORDS]) -> bool {
    let (ak, am) = (a.key().words(), a.mask().words());
    (0..FLOW_WORDS).all(|i| (ak[i] ^ b_key[i]) & am[i] & b_mask[i] == 0)
}

impl FlowSelector {
    /// A rule passes the selector's cookie, port and group filters.
    fn filters(&self, r: &Rule) -> bool {
        r.cookie & self.cookie_mask == self.cookie & self.cookie_mask
            && self.out_port.is_none_or(|p| outputs_to(&r.actions, p))
            && self.out_group.is_none_or(|g| sends_to_group(&r.actions, g))
    }
}

impl Ofproto {
    /// Carry out one `FLOW_MOD`. Returns the rules it removed (for
    /// `FLOW_REMOVED` when they asked for it; the caller also revalidates).
    pub fn flow_mod(
        &mut self,
        fm: &FlowMod,
        now: Instant,
    ) -> Result<Vec<RemovedRule>, FlowModError> {
        if let Some(t) = fm.table {
            if t as usize >= N_TABLES {
                return Err(OfprotoError::BadTable(t).into());
            }
        }
        match fm.command {
            FlowModCommand::Add => self.fm_add(fm, now).map(|_| Vec::new()),
            FlowModCommand::Modify | FlowModCommand::ModifyStrict => {
                self.fm_modify(fm)?;
                Ok(Vec::new())
            }
            FlowModCommand::Delete | FlowModCommand::DeleteStrict => Ok(self.fm_delete(fm, now)),
        }
    }

    fn fm_add(&mut self, fm: &FlowMod, now: Instant) -> Result<(), FlowModError> {
        let table = fm.table.ok_or(FlowModError::AddToAllTables)?;
        let spec = nicflow_ofctl::FlowSpec {
            table,
            priority: fm.priority,
            cookie: fm.cookie,
            idle_timeout: fm.idle_timeout,
            hard_timeout: fm.hard_timeout,
            send_flow_rem: fm.flags & flags::SEND_FLOW_REM != 0,
            r#match: fm.matching,
            actions: fm.actions.clone(),
        };
        self.check_spec(&spec)?;
        let (key, mask) = (fm.matching.key().words(), fm.matching.mask().words());
        let prio = u32::from(fm.priority);
        let t = self.tables[table as usize].get_or_insert_with(|| Box::new(new_table()));
        let same = t.find_exact(key, mask, prio);
        if fm.flags & flags::CHECK_OVERLAP != 0 {
            let clash = t.iter().any(|r| {
                r.priority == prio && Some(r.id) != same && overlaps(&fm.matching, r.key, r.mask)
            });
            if clash {
                return Err(FlowModError::Overlap(fm.priority));
            }
        }
        let carried = same
            .and_then(|id| t.get(id))
            .filter(|_| fm.flags & flags::RESET_COUNTS == 0)
            .map(|r| (r.n_packets, r.n_bytes));
        let (n_packets, n_bytes) = carried.unwrap_or((0, 0));
        let rule = Rule {
            priority: fm.priority,
            cookie: fm.cookie,
            idle_timeout: fm.idle_timeout,
            hard_timeout: fm.hard_timeout,
            flags: fm.flags,
            matching: fm.matching,
            actions: fm.actions.clone(),
            created: now,
            last_used: now,
            n_packets,
            n_bytes,
        };
        let (_, old) = t.insert(key, mask, prio, rule);
        if old.is_some() {
            self.stats.rules_removed += 1;
        }
        self.stats.rules_added += 1;
        Ok(())
    }

    fn fm_modify(&mut self, fm: &FlowMod) -> Result<(), FlowModError> {
        // The new actions must be valid in every table they land in.
        for tid in self.selected_tables(fm.table) {
            let spec = nicflow_ofctl::FlowSpec {
                table: tid,
                priority: fm.priority,
                cookie: fm.cookie,
                idle_timeout: 0,
                hard_timeout: 0,
                send_flow_rem: false,
                r#match: fm.matching,
                actions: fm.actions.clone(),
            };
            self.check_spec(&spec)?;
        }
        let sel = FlowSelector {
            table: fm.table,
            out_port: None,
            out_group: None,
            cookie: fm.cookie,
            cookie_mask: fm.cookie_mask,
            matching: fm.matching,
        };
        let strict = fm.strict().then_some(fm.priority);
        for tid in self.selected_tables(fm.table) {
            let Some(t) = self.tables[tid as usize].as_deref_mut() else {
                continue;
            };
            t.retain(|_, key, mask, prio, r| {
                if selects(&sel, strict, key, mask, prio, r) {
                    r.actions = fm.actions.clone();
                    if let Some(c) = fm.new_cookie {
                        r.cookie = c;
                    }
                    if fm.flags & flags::RESET_COUNTS != 0 {
                        r.n_packets = 0;
                        r.n_bytes = 0;
                    }
                }
                true
            });
        }
        Ok(())
    }

    fn fm_delete(&mut self, fm: &FlowMod, now: Instant) -> Vec<RemovedRule> {
        let sel = FlowSelector {
            table: fm.table,
            out_port: fm.out_port,
            out_group: fm.out_group,
            cookie: fm.cookie,
            cookie_mask: fm.cookie_mask,
            matching: fm.matching,
        };
        let strict = fm.strict().then_some(fm.priority);
        let mut gone = Vec::new();
        for tid in self.selected_tables(fm.table) {
            let Some(t) = self.tables[tid as usize].as_deref_mut() else {
                continue;
            };
            t.retain(|_, key, mask, prio, r| {
                let hit = selects(&sel, strict, key, mask, prio, r);
                if hit {
                    gone.push(RemovedRule::of(tid, r, RemovedReason::Delete, now));
                }
                !hit
            });
        }
        self.stats.rules_removed += gone.len() as u64;
        self.note_removed(&gone);
        gone
    }

    /// Rules a flow-statistics request selects (non-strict), table by
    /// table, highest priority first.
    pub fn flow_stats(&self, sel: &FlowSelector, now: Instant) -> Vec<RuleDump> {
        let mut out = Vec::new();
        for tid in self.selected_tables(sel.table) {
            let Some(t) = self.tables[tid as usize].as_deref() else {
                continue;
            };
            let mut rules: Vec<&Rule> = t
                .iter()
                .filter(|r| selects(sel, None, r.key, r.mask, r.priority, r.value))
                .map(|r| r.value)
                .collect();
            rules.sort_by_key(|r| std::cmp::Reverse(r.priority));
            out.extend(rules.into_iter().map(|r| r.dump(tid, now)));
        }
        out
    }

    /// Rules that left with `SEND_FLOW_REM` set, oldest first, since the
    /// last call.
    pub fn take_flow_removed(&mut self) -> Vec<RemovedRule> {
        std::mem::take(&mut self.removed)
    }

    /// Queue notices for the removed rules that asked for one.
    pub(super) fn note_removed(&mut self, gone: &[RemovedRule]) {
        for g in gone.iter().filter(|g| g.flags & flags::SEND_FLOW_REM != 0) {
            if self.removed.len() >= REMOVED_QUEUE {
                self.removed.remove(0);
            }
            self.removed.push(g.clone());
        }
    }

    fn selected_tables(&self, table: Option<u8>) -> std::ops::RangeInclusive<u8> {
        match table {
            Some(t) => t..=t,
            None => 0..=(N_TABLES - 1) as u8,
        }
    }
}

/// Does the selector pick this rule? Strict (`Some(priority)`): the same
/// match and priority; otherwise the rule is at least as specific as the
/// selector's match and agrees with it.
fn selects(
    sel: &FlowSelector,
    strict: Option<u16>,
    key: &[u64; FLOW_WORDS],
    mask: &[u64; FLOW_WORDS],
    prio: u32,
    r: &Rule,
) -> bool {
    let by_match = match strict {
        Some(p) => {
            prio == u32::from(p)
                && mask == sel.matching.mask().words()
                && key == sel.matching.key().words()
        }
        None => covers(&sel.matching, key, mask),
    };
    by_match && sel.filters(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_ofctl::{parse_flow, NumericPorts};

    /// A `FlowMod` from a rule in ovs-ofctl syntax (table, priority,
    /// cookie, timeouts, match and actions from the text).
    fn fm(cmd: FlowModCommand, text: &str) -> FlowMod {
        let s = parse_flow(text, &NumericPorts).unwrap();
        FlowMod {
            command: cmd,
            table: Some(s.table),
            priority: s.priority,
            cookie: s.cookie,
            cookie_mask: 0,
            new_cookie: None,
            idle_timeout: s.idle_timeout,
            hard_timeout: s.hard_timeout,
            flags: 0,
            out_port: None,
            out_group: None,
            matching: s.r#match,
            actions: s.actions,
        }
    }

    fn rules(of: &Ofproto) -> Vec<String> {
        of.dump_flows(Instant::now())
            .iter()
            .map(|d| nicflow_ofctl::format_flow(&d.spec, &NumericPorts))
            .collect()
    }

    fn setup() -> Ofproto {
        let mut of = Ofproto::new();
        let now = Instant::now();
        for t in [
            "priority=10,cookie=0x1,ip,nw_dst=198.18.0.0/16,actions=output:1",
            "priority=20,cookie=0x2,tcp,nw_dst=198.18.1.1,actions=output:2",
            "priority=20,cookie=0x12,udp,nw_dst=198.18.1.1,actions=output:3",
            "table=1,priority=5,cookie=0x2,ip,actions=output:2",
        ] {
            of.flow_mod(&fm(FlowModCommand::Add, t), now).unwrap();
        }
        of
    }

    #[test]
    fn add_replaces_the_same_rule_keeping_counters_unless_reset() {
        let mut of = setup();
        let now = Instant::now();
        for t in of.tables.iter_mut().flatten() {
            t.retain(|_, _, _, _, r| {
                r.n_packets = 7;
                true
            });
        }
        of.flow_mod(
            &fm(
                FlowModCommand::Add,
                "priority=10,ip,nw_dst=198.18.0.0/16,actions=output:4",
            ),
            now,
        )
        .unwrap();
        let d = of.dump_flows(now);
        let r = d.iter().find(|d| d.spec.priority == 10).unwrap();
        assert_eq!(
            (r.n_packets, r.spec.actions.clone()),
            (7, vec![Action::Output(4)])
        );
        let mut again = fm(
            FlowModCommand::Add,
            "priority=10,ip,nw_dst=198.18.0.0/16,actions=output:5",
        );
        again.flags = flags::RESET_COUNTS;
        of.flow_mod(&again, now).unwrap();
        let d = of.dump_flows(now);
        assert_eq!(
            d.iter().find(|d| d.spec.priority == 10).unwrap().n_packets,
            0
        );
        assert_eq!(of.n_rules(), 4);
    }

    #[test]
    fn check_overlap_refuses_only_same_priority_overlaps() {
        let mut of = setup();
        let now = Instant::now();
        let mut f = fm(
            FlowModCommand::Add,
            "priority=20,ip,nw_dst=198.18.1.0/24,actions=drop",
        );
        f.flags = flags::CHECK_OVERLAP;
        assert_eq!(of.flow_mod(&f, now).unwrap_err(), FlowModError::Overlap(20));
        // Disjoint at the same priority, or overlapping at another: fine.
        let mut f = fm(
            FlowModCommand::Add,
            "priority=20,ip,nw_dst=198.19.0.0/16,actions=drop",
        );
        f.flags = flags::CHECK_OVERLAP;
        of.flow_mod(&f, now).unwrap();
        let mut f = fm(
            FlowModCommand::Add,
            "priority=21,ip,nw_dst=198.18.1.0/24,actions=drop",
        );
        f.flags = flags::CHECK_OVERLAP;
        of.flow_mod(&f, now).unwrap();
        // Replacing the identical rule is not an overlap.
        let mut f = fm(
            FlowModCommand::Add,
            "priority=20,tcp,nw_dst=198.18.1.1,actions=drop",
        );
        f.flags = flags::CHECK_OVERLAP;
        of.flow_mod(&f, now).unwrap();
        let mut all = fm(FlowModCommand::Add, "actions=drop");
        all.table = None;
        assert_eq!(
            of.flow_mod(&all, now).unwrap_err(),
            FlowModError::AddToAllTables
        );
    }

    #[test]
    fn modify_selects_non_strictly_and_never_adds() {
        let mut of = setup();
        let now = Instant::now();
        // Every table, every rule at least as specific as `ip,nw_dst=198.18.1.1`.
        let mut m = fm(
            FlowModCommand::Modify,
            "ip,nw_dst=198.18.1.1,actions=output:9",
        );
        m.table = None;
        of.flow_mod(&m, now).unwrap();
        let r = rules(&of);
        assert!(
            r.contains(
                &"cookie=0x2, priority=20,tcp,nw_dst=198.18.1.1 actions=output:9".to_string()
            ),
            "{r:?}"
        );
        assert!(
            r.contains(
                &"cookie=0x12, priority=20,udp,nw_dst=198.18.1.1 actions=output:9".to_string()
            ),
            "{r:?}"
        );
        assert!(
            r.contains(
                &"cookie=0x1, priority=10,ip,nw_dst=198.18.0.0/16 actions=output:1".to_string()
            ),
            "{r:?}"
        );
        // Cookie filter and a new cookie.
        let mut m = fm(FlowModCommand::Modify, "ip,actions=output:8");
        m.table = None;
        m.cookie = 0x2;
        m.cookie_mask = 0xf;
        m.new_cookie = Some(0x99);
        of.flow_mod(&m, now).unwrap();
        let r = rules(&of);
        assert!(
            r.contains(
                &"cookie=0x99, priority=20,tcp,nw_dst=198.18.1.1 actions=output:8".to_string()
            ),
            "{r:?}"
        );
        assert!(
            r.contains(
                &"cookie=0x99, priority=20,udp,nw_dst=198.18.1.1 actions=output:8".to_string()
            ),
            "{r:?}"
        );
        assert!(
            r.contains(&"cookie=0x99, table=1, priority=5,ip actions=output:8".to_string()),
            "{r:?}"
        );
        // Nothing selected: nothing added.
        let n = of.n_rules();
        of.flow_mod(&fm(FlowModCommand::Modify, "arp,actions=drop"), now)
            .unwrap();
        of.flow_mod(
            &fm(
                FlowModCommand::ModifyStrict,
                "priority=11,ip,nw_dst=198.18.0.0/16,actions=drop",
            ),
            now,
        )
        .unwrap();
        assert_eq!(of.n_rules(), n);
        // Strict: exact match and priority only.
        of.flow_mod(
            &fm(
                FlowModCommand::ModifyStrict,
                "priority=10,ip,nw_dst=198.18.0.0/16,actions=drop",
            ),
            now,
        )
        .unwrap();
        assert!(rules(&of)
            .contains(&"cookie=0x1, priority=10,ip,nw_dst=198.18.0.0/16 actions=drop".to_string()));
    }

    #[test]
    fn delete_filters_by_port_group_cookie_and_reports_flagged_rules() {
        let mut of = setup();
        let now = Instant::now();
        let mut f = fm(
            FlowModCommand::Add,
            "priority=30,ip,nw_src=198.18.9.9,actions=output:2",
        );
        f.flags = flags::SEND_FLOW_REM;
        f.cookie = 0x77;
        of.flow_mod(&f, now).unwrap();
        // out_port 2 across tables: three rules output there.
        let mut d = fm(FlowModCommand::Delete, "actions=drop");
        d.table = None;
        d.out_port = Some(2);
        d.cookie = 0x2;
        d.cookie_mask = 0xff;
        let gone = of.flow_mod(&d, now).unwrap();
        assert_eq!(gone.len(), 2, "cookie 0x2 and port 2: {gone:?}");
        assert!(of.take_flow_removed().is_empty(), "those did not ask");
        let mut d = fm(
            FlowModCommand::DeleteStrict,
            "priority=30,ip,nw_src=198.18.9.9,actions=drop",
        );
        d.out_port = Some(3);
        assert!(
            of.flow_mod(&d, now).unwrap().is_empty(),
            "out_port 3 filters it out"
        );
        d.out_port = None;
        let gone = of.flow_mod(&d, now).unwrap();
        assert_eq!(gone.len(), 1);
        let notes = of.take_flow_removed();
        assert_eq!(notes.len(), 1);
        assert_eq!(
            (notes[0].cookie, notes[0].reason),
            (0x77, RemovedReason::Delete)
        );
        assert_eq!(of.n_rules(), 2);
    }

    #[test]
    fn timeouts_report_their_reason() {
        let mut of = Ofproto::new();
        let t0 = Instant::now();
        let mut f = fm(
            FlowModCommand::Add,
            "priority=1,idle_timeout=5,ip,actions=drop",
        );
        f.flags = flags::SEND_FLOW_REM;
        of.flow_mod(&f, t0).unwrap();
        let mut h = fm(
            FlowModCommand::Add,
            "priority=2,hard_timeout=3,ip,actions=drop",
        );
        h.flags = flags::SEND_FLOW_REM;
        of.flow_mod(&h, t0).unwrap();
        assert_eq!(of.expire(t0 + Duration::from_secs(4)), 1);
        assert_eq!(of.expire(t0 + Duration::from_secs(6)), 1);
        let r: Vec<_> = of
            .take_flow_removed()
            .iter()
            .map(|r| (r.priority, r.reason))
            .collect();
        assert_eq!(
            r,
            vec![
                (2, RemovedReason::HardTimeout),
                (1, RemovedReason::IdleTimeout)
            ]
        );
    }

    #[test]
    fn flow_stats_select_like_delete() {
        let of = setup();
        let sel = FlowSelector {
            table: None,
            out_port: Some(2),
            out_group: None,
            cookie: 0,
            cookie_mask: 0,
            matching: Match::catchall(),
        };
        let got: Vec<_> = of
            .flow_stats(&sel, Instant::now())
            .iter()
            .map(|d| (d.spec.table, d.spec.priority))
            .collect();
        assert_eq!(got, vec![(0, 20), (1, 5)]);
    }
}
