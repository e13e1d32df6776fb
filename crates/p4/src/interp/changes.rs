//! Per-table change logs: what changed in a table since a cached run
//! applied it, so that a table change removes only the cached flows whose
//! run it could alter (issue 32: "a table change revalidates exactly the
//! cached flows it could affect").
//!
//! Every change of a table's entries or default action goes through
//! [`TableState`](super::TableState) or the runtime operations, which
//! record it here with a sequence number. A cached run remembers, per
//! table apply, the sequence number then, the entry it hit and the key
//! values it looked up (with the bits the lookup examined,
//! [`LookupKey`]). At revalidation [`Pipeline::apply_unaffected`] walks
//! the changes since: the run stays only when none of them could change
//! what the lookup gives for any packet of its megaflow. When unsure (a
//! trimmed log, keys not recorded) the answer is "affected": the flow is
//! removed, as it always was.

use super::check::Km;
use super::index::{self, KeyShape, Order, Ranking};
use super::Pipeline;
use crate::trace::{EntryId, LookupKey, TableApply, Trace};
use crate::value::mask;
use std::collections::VecDeque;

/// Changes kept per table: enough for the changes between two
/// revalidations (each revalidation brings the kept flows up to date);
/// a flow older than the log is removed.
pub(crate) const LOG_LEN: usize = 1024;

/// One change of a table.
#[derive(Clone, Debug)]
pub(crate) enum Change {
    /// An entry was added with this match, priority and place in table
    /// order: with the entry a run hit, they say whether the new one
    /// could win instead (the lookup's own rule, [`Ranking`]).
    Added {
        keys: Box<[Km]>,
        prio: i64,
        order: Order,
    },
    /// An entry was deleted.
    Deleted(EntryId),
    /// An entry's action or action data changed (its match and priority
    /// cannot change: P4Runtime's MODIFY keeps them).
    Modified(EntryId),
    /// The default action or its data changed.
    Default,
    /// Every runtime entry was removed.
    Cleared,
}

/// The entry a run hit, as the lookup ranks it (its match and priority
/// never change while it exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Winner {
    /// Its rank ([`Ranking::rank`]) and place in table order.
    pub rank: i128,
    pub order: Order,
    /// A runtime entry (a clear removes it), not one of the program's.
    pub runtime: bool,
}

/// The changes of one table, newest last.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChangeLog {
    /// Sequence number of the latest change (0: none yet).
    seq: u64,
    /// Changes up to this sequence number were dropped from `log`.
    trimmed: u64,
    log: VecDeque<(u64, Change)>,
}

impl ChangeLog {
    pub fn record(&mut self, c: Change) {
        self.seq += 1;
        if self.log.len() >= LOG_LEN {
            if let Some((s, _)) = self.log.pop_front() {
                self.trimmed = s;
            }
        }
        self.log.push_back((self.seq, c));
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Could a change after `since` alter the lookup that hit entry `hit`
    /// (`None`: missed) with `keys`, in a table of key shape `shape`?
    /// `winner` describes the hit entry (`None`: no longer in the table);
    /// asked only when a change needs it (an add that may match, a clear).
    ///
    /// The hit entry matches every packet of the megaflow (its match bits
    /// are among the examined ones) and beat every other entry for each
    /// of them; while it exists, an entry added later takes a packet from
    /// it only by matching that packet and outranking it (a higher rank,
    /// or the same rank and an earlier place in table order). So each
    /// change is weighed against the hit entry alone, whatever came
    /// between.
    fn could_alter(
        &self,
        since: u64,
        hit: Option<EntryId>,
        keys: &[LookupKey],
        shape: &KeyShape,
        winner: impl Fn(EntryId) -> Option<Winner>,
    ) -> bool {
        if since >= self.seq {
            return false;
        }
        if since < self.trimmed || keys.len() != shape.len() {
            return true;
        }
        // The hit entry's rank, worked out once and only when a change
        // needs it (most checks, a learned exact entry, end at may_match).
        let won = std::cell::OnceCell::new();
        let won = || *won.get_or_init(|| hit.and_then(&winner));
        self.log
            .iter()
            .rev()
            .take_while(|(s, _)| *s > since)
            .any(|(_, c)| match c {
                // A new entry changes the result only for keys it matches,
                // and then only if it beats the winner (a miss: anything
                // matching wins).
                Change::Added {
                    keys: m,
                    prio,
                    order,
                } => {
                    may_match(m, keys, shape)
                        && (hit.is_none()
                            || won().is_none_or(|w| {
                                let r = Ranking::of(shape).rank(shape, m, *prio);
                                r > w.rank || (r == w.rank && *order < w.order)
                            }))
                }
                // Removing or rewriting an entry other than the winner
                // leaves the winner: it still matches and still beats
                // what is left.
                Change::Deleted(id) | Change::Modified(id) => hit == Some(*id),
                Change::Default => hit.is_none(),
                // A miss stays a miss when entries go; a `const entries`
                // winner stays (and still beats what is left).
                Change::Cleared => hit.is_some() && won().is_none_or(|w| w.runtime),
            })
    }
}

/// Could an entry matching `m` match some key that agrees with `keys` on
/// their examined bits (any packet of the flow's megaflow)? Exact per
/// key (keys are taken as independent of each other: two keys read from
/// the same packet bits may make it a false "yes", never a false "no").
pub(crate) fn may_match(m: &[Km], keys: &[LookupKey], shape: &KeyShape) -> bool {
    m.len() != keys.len()
        || m.iter().zip(keys).zip(shape).all(|((m, k), &(_, w))| {
            let fixed = k.value & k.examined;
            match *m {
                Km::Masked(x, mk) => (fixed ^ x) & mk & k.examined == 0,
                Km::Range(lo, hi) => {
                    least_at_or_above(lo, fixed, k.examined, w).is_some_and(|v| v <= hi)
                }
            }
        })
}

/// The smallest `w`-bit value at or above `lo` whose bits under
/// `examined` are those of `fixed` (the other bits free), if any: the
/// flow's keys in a range entry's span need not include one the range
/// holds (free low bits make a comb, e.g. 0x0100, 0x0110, ... for a key
/// whose bit 4 alone is free), so a range is compared with this value.
fn least_at_or_above(lo: u128, fixed: u128, examined: u128, w: u32) -> Option<u128> {
    let all = mask(w);
    if lo > all {
        return None;
    }
    let e = examined & all;
    let free = all & !e;
    let fixed = fixed & e;
    // Agreeing with `lo` on the free bits.
    let c = fixed | (lo & free);
    let d = (c ^ lo) & e;
    if d == 0 {
        return Some(lo);
    }
    // Bits strictly above bit `p`.
    let above = |p: u32| {
        if p >= 127 {
            0
        } else {
            !((1u128 << (p + 1)) - 1)
        }
    };
    let p = 127 - d.leading_zeros();
    if c & (1u128 << p) != 0 {
        // Above `lo` from bit p on: `lo`'s free bits above p, zeros below.
        return Some(fixed | (lo & free & above(p)));
    }
    // Below `lo` whatever the free bits under p: one free bit above p
    // where `lo` has a zero must become a one (the lowest such).
    let up = free & !lo & above(p);
    if up == 0 {
        return None;
    }
    let q = up.trailing_zeros();
    Some(fixed | (lo & free & above(q)) | (1u128 << q))
}

impl Pipeline {
    /// Makes the interpreter record the key values of every table lookup
    /// in the trace ([`Trace::keys`]), for a cache that revalidates its
    /// flows one by one ([`Pipeline::apply_unaffected`]). Off by default:
    /// the interpreter alone does not need them.
    pub fn record_table_keys(&mut self, on: bool) {
        self.st.record_keys = on;
    }

    /// The sequence number of table `index`'s latest change (an apply's
    /// [`TableApply::index`]); 0 when it never changed.
    pub fn table_change_seq(&self, index: u32) -> u64 {
        self.st
            .tables
            .get(index as usize)
            .map_or(0, |t| t.log.seq())
    }

    /// True when no change of the applied table after sequence number
    /// `since` could alter what `apply` (one of `trace`'s applies) gave
    /// for any packet of the run's megaflow: an added entry that matches
    /// none of its keys or cannot outrank the entry it hit, a deleted or
    /// modified entry that is not the one it hit, a default-action change
    /// for a run that hit an entry, a clear for a run that missed or hit
    /// a `const entries` entry. Anything else, and changes older than the
    /// kept log, give false.
    pub fn apply_unaffected(&self, trace: &Trace, apply: &TableApply, since: u64) -> bool {
        let t = apply.index as usize;
        let (Some(ts), Some(td)) = (self.st.tables.get(t), self.prog.tables.get(t)) else {
            return false;
        };
        if *td.qname != *apply.table {
            return false;
        }
        let shape = ts.index.keys();
        // The hit entry as the lookup ranks it, if still there (a delete
        // or clear since the run is in the log; else a change the log
        // does not describe). Const entries' ids are their places,
        // runtime ids follow.
        let winner = |id: EntryId| {
            let (e, order, runtime) =
                match usize::try_from(id).ok().and_then(|i| ts.const_hits.get(i)) {
                    Some(e) if e.id == id => (e, index::const_order(id as usize), false),
                    _ => {
                        let (_, i) = index::locate(&ts.entries, index::runtime_order(id))?;
                        (ts.entries.get(i)?, index::runtime_order(id), true)
                    }
                };
            Some(Winner {
                rank: Ranking::of(shape).rank(shape, &e.keys, e.prio),
                order,
                runtime,
            })
        };
        !ts.log
            .could_alter(since, apply.entry, trace.apply_keys(apply), shape, winner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::MatchKind;

    fn key(value: u128, examined: u128) -> LookupKey {
        LookupKey { value, examined }
    }

    fn shape(kind: MatchKind, w: u32) -> [(MatchKind, u32); 1] {
        [(kind, w)]
    }

    /// The log's answer for a run that hit runtime entry `id` (placed by
    /// its id) of rank `rank`.
    fn alters(
        log: &ChangeLog,
        since: u64,
        id: u64,
        rank: i128,
        k: &[LookupKey],
        w: &KeyShape,
    ) -> bool {
        let winner = |_| {
            Some(Winner {
                rank,
                order: index::runtime_order(id),
                runtime: true,
            })
        };
        log.could_alter(since, Some(id), k, w, winner)
    }

    /// ... for a run that missed.
    fn alters_miss(log: &ChangeLog, since: u64, k: &[LookupKey], w: &KeyShape) -> bool {
        log.could_alter(since, None, k, w, |_| None)
    }

    fn added(m: Km, prio: i64, id: u64) -> Change {
        Change::Added {
            keys: Box::new([m]),
            prio,
            order: index::runtime_order(id),
        }
    }

    #[test]
    fn a_masked_entry_may_match_only_keys_agreeing_on_examined_bits() {
        let w = shape(MatchKind::Lpm, 32);
        // Key 10.1.2.3, only the top 8 bits examined (a /8 won).
        let k = [key(0x0a01_0203, 0xff00_0000)];
        // 10.1.0.0/16: some packet of the flow (10/8) may have it.
        assert!(may_match(&[Km::Masked(0x0a01_0000, 0xffff_0000)], &k, &w));
        // 11.0.0.0/8: no packet of the flow.
        assert!(!may_match(&[Km::Masked(0x0b00_0000, 0xff00_0000)], &k, &w));
        // Exact on another address, all bits examined.
        let all = [key(0x0a01_0203, 0xffff_ffff)];
        assert!(!may_match(
            &[Km::Masked(0x0a01_0204, 0xffff_ffff)],
            &all,
            &w
        ));
        assert!(may_match(&[Km::Masked(0x0a01_0203, 0xffff_ffff)], &all, &w));
        // Nothing examined (an empty table missed): anything may match.
        assert!(may_match(&[Km::Masked(0x1, 0xffff_ffff)], &[key(7, 0)], &w));
    }

    #[test]
    fn a_range_entry_may_match_only_when_it_holds_one_of_the_flows_keys() {
        let w = shape(MatchKind::Range, 16);
        let k = [key(80, 0xffff)];
        assert!(may_match(&[Km::Range(0, 1023)], &k, &w));
        assert!(!may_match(&[Km::Range(1024, 65535)], &k, &w));
        // Low byte not examined: the flow covers 0x0100..=0x01ff.
        let k = [key(0x0150, 0xff00)];
        assert!(may_match(&[Km::Range(0x01f0, 0x0300)], &k, &w));
        assert!(!may_match(&[Km::Range(0x0200, 0x0300)], &k, &w));
        // Bit 4 alone free: the flow's keys are 0x0100 and 0x0110. The
        // span 0x0100..=0x0110 overlaps 0x0101..=0x010f, which holds
        // neither (the span comparison said "may match").
        let k = [key(0x0100, 0xffef)];
        assert!(!may_match(&[Km::Range(0x0101, 0x010f)], &k, &w));
        assert!(may_match(&[Km::Range(0x0101, 0x0110)], &k, &w));
        assert!(may_match(&[Km::Range(0x00ff, 0x0100)], &k, &w));
    }

    /// `least_at_or_above` against counting, on every 4-bit case and on
    /// random wider ones.
    #[test]
    fn least_at_or_above_equals_the_enumeration() {
        let brute = |lo: u128, f: u128, e: u128, w: u32| (lo..=mask(w)).find(|v| v & e == f & e);
        let w = 4;
        for e in 0..16u128 {
            for f in 0..16u128 {
                for lo in 0..16u128 {
                    assert_eq!(
                        least_at_or_above(lo, f, e, w),
                        brute(lo, f, e, w),
                        "lo {lo:#x} fixed {f:#x} examined {e:#x}"
                    );
                }
            }
        }
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u128
        };
        let w = 10;
        for _ in 0..20_000 {
            let (e, f, lo) = (next() & mask(w), next() & mask(w), next() & mask(w));
            assert_eq!(least_at_or_above(lo, f, e, w), brute(lo, f, e, w));
        }
        // Full width: nothing above the top.
        assert_eq!(least_at_or_above(u128::MAX, 0, 1, 128), None);
        assert_eq!(least_at_or_above(5, 0, 0, 128), Some(5));
        assert_eq!(
            least_at_or_above(3, 1 << 127, 1 << 127, 128),
            Some(1 << 127)
        );
    }

    #[test]
    fn the_log_says_which_changes_could_alter_a_lookup() {
        let w = shape(MatchKind::Exact, 32);
        let k = [key(5, u32::MAX as u128)];
        let mut log = ChangeLog::default();
        log.record(added(Km::Masked(9, u32::MAX as u128), 0, 10));
        let since = 0;
        assert!(!alters(&log, since, 1, 0, &k, &w), "other key");
        log.record(Change::Deleted(2));
        log.record(Change::Modified(3));
        log.record(Change::Default);
        assert!(!alters(&log, since, 1, 0, &k, &w));
        assert!(alters_miss(&log, since, &k, &w), "a miss ran the default");
        log.record(Change::Deleted(1));
        assert!(alters(&log, since, 1, 0, &k, &w), "the hit entry went");
        // Up to date: nothing since.
        assert!(!alters(&log, log.seq(), 1, 0, &k, &w));
        // A clear leaves misses alone.
        let s = log.seq();
        log.record(Change::Cleared);
        assert!(!alters_miss(&log, s, &k, &w));
        assert!(alters(&log, s, 7, 0, &k, &w));
        // Keys not recorded: unsure.
        assert!(alters_miss(&log, s, &[], &w));
        // A matching add: a miss now hits it.
        let s = log.seq();
        log.record(added(Km::Masked(5, u32::MAX as u128), 0, 11));
        assert!(alters_miss(&log, s, &k, &w));
    }

    /// A clear removes runtime entries only: a run that hit a `const
    /// entries` entry keeps it.
    #[test]
    fn a_clear_leaves_a_const_winner() {
        let w = shape(MatchKind::Ternary, 8);
        let k = [key(5, 0xff)];
        let mut log = ChangeLog::default();
        log.record(Change::Cleared);
        let konst = |_| {
            Some(Winner {
                rank: 3,
                order: index::const_order(0),
                runtime: false,
            })
        };
        assert!(!log.could_alter(0, Some(0), &k, &w, konst));
        // Gone from the table (a change the log does not describe).
        assert!(log.could_alter(0, Some(0), &k, &w, |_| None));
        assert!(alters(&log, 0, 4, 3, &k, &w));
    }

    /// Priority tables: a matching entry added later takes the flow only
    /// with a higher priority (an equal one loses the tie: it comes
    /// later in table order, unless it is placed before the winner).
    #[test]
    fn an_added_entry_must_outrank_the_winner() {
        let w = shape(MatchKind::Ternary, 8);
        let k = [key(0x15, 0xf0)];
        let any = Km::Masked(0x10, 0xf0);
        let mut log = ChangeLog::default();
        log.record(added(any.clone(), 5, 20));
        assert!(!alters(&log, 0, 7, 10, &k, &w), "lower priority");
        assert!(!alters(&log, 0, 7, 5, &k, &w), "tie, placed after");
        assert!(alters(&log, 0, 7, 4, &k, &w), "higher priority");
        assert!(alters_miss(&log, 0, &k, &w), "a miss");
        // Placed before the winner (a const entry comes first, runtime
        // ids grow): the tie goes to it.
        assert!(alters(&log, 0, 30, 5, &k, &w));
        // Cannot match, whatever its priority.
        let s = log.seq();
        log.record(added(Km::Masked(0x20, 0xf0), 100, 21));
        assert!(!alters(&log, s, 7, 0, &k, &w));
        // A higher one anywhere in the log is enough.
        log.record(added(any, 11, 22));
        assert!(alters(&log, 0, 7, 10, &k, &w));
    }

    /// lpm tables rank by prefix length: a shorter or equal prefix cannot
    /// beat the winner's; a longer one that may match can.
    #[test]
    fn an_added_prefix_must_be_longer_than_the_winners() {
        let w = shape(MatchKind::Lpm, 32);
        // 10.1.2.3 hit a /16 (the examined bits: a /24 was also compared).
        let k = [key(0x0a01_0203, 0xffff_ff00)];
        let p = |x: u128, len: u32| Km::Masked(x, mask(32) & !mask(32 - len));
        let mut log = ChangeLog::default();
        log.record(added(p(0x0a00_0000, 8), 0, 20));
        log.record(added(p(0x0a01_0000, 16), 0, 21));
        assert!(!alters(&log, 0, 3, 16, &k, &w));
        let s = log.seq();
        log.record(added(p(0x0a01_0200, 23), 0, 22));
        assert!(alters(&log, s, 3, 16, &k, &w), "a /23 beats a /16");
        assert!(!alters(&log, s, 3, 24, &k, &w));
    }

    #[test]
    fn a_flow_older_than_the_kept_log_is_affected() {
        let w = shape(MatchKind::Exact, 32);
        let k = [key(5, u32::MAX as u128)];
        let mut log = ChangeLog::default();
        for i in 0..LOG_LEN as u64 + 1 {
            log.record(Change::Deleted(100 + i));
        }
        assert!(alters(&log, 0, 1, 0, &k, &w), "trimmed past it");
        assert!(!alters(&log, 1, 1, 0, &k, &w), "still in the log");
    }

    /// Brute force over small random tables of 7 key shapes (const and
    /// runtime entries, small priorities so ties happen): after 1-3
    /// random adds, deletes or clears, every "unaffected" answer is
    /// checked against a new lookup of every packet of the run's
    /// megaflow (a wrong keep would leave a stale cached result), and
    /// the index against `scan`. Seed printed; `NICFLOW_SEED` replays.
    #[test]
    fn every_keep_gives_the_lookups_own_result_brute_force() {
        use super::super::check::Entry;
        use super::index::tests::{entry, seed_from_env, Rng};
        use super::index::TableIndex;

        fn km(rng: &mut Rng, kind: &MatchKind, w: u32) -> Km {
            let full = mask(w);
            match kind {
                MatchKind::Exact => Km::Masked(rng.next() as u128 & full & 0x7, full),
                MatchKind::Lpm => {
                    let len = rng.below(w as u64 + 1) as u32;
                    let mk = if len == 0 { 0 } else { full & !mask(w - len) };
                    Km::Masked(rng.next() as u128 & mk, mk)
                }
                MatchKind::Range if rng.below(4) != 0 => {
                    let (a, b) = (rng.next() as u128 & full, rng.next() as u128 & full);
                    Km::Range(a.min(b), a.max(b))
                }
                _ => {
                    let mk = rng.next() as u128 & full;
                    Km::Masked(rng.next() as u128 & mk, mk)
                }
            }
        }
        /// The winner's id and the examined bits, the index checked
        /// against `scan`.
        fn lookup(
            ix: &TableIndex,
            c: &[Entry],
            rt: &[Entry],
            kv: &[u128],
        ) -> (Option<u64>, Vec<u128>) {
            let mut need = vec![0; kv.len()];
            let o = ix.lookup(c, rt, kv, &mut need);
            let mut need2 = vec![0; kv.len()];
            let all = c
                .iter()
                .enumerate()
                .map(|(i, e)| (index::const_order(i), e))
                .chain(rt.iter().map(|e| (index::runtime_order(e.id), e)));
            assert_eq!(
                o,
                index::scan(ix.keys(), all, kv, &mut need2),
                "index vs scan"
            );
            let id = o.map(|o| match index::locate(rt, o).unwrap() {
                (false, i) => c[i].id,
                (true, i) => rt[i].id,
            });
            (id, need)
        }

        let seed = seed_from_env(
            "NICFLOW_SEED",
            "every_keep_gives_the_lookups_own_result_brute_force",
        );
        use MatchKind::*;
        let shapes: [&[(MatchKind, u32)]; 7] = [
            &[(Ternary, 4), (Range, 4)],
            &[(Lpm, 5), (Exact, 3)],
            &[(Lpm, 4), (Lpm, 4)],
            &[(Ternary, 4), (Lpm, 4)],
            &[(Range, 6)],
            &[(Lpm, 7)],
            &[(Exact, 3), (Exact, 3)],
        ];
        let mut rng = Rng(seed);
        let mut keeps = 0;
        for i in 0..20_000 {
            let shape = shapes[i % shapes.len()];
            let by_prio = Ranking::of(shape) == Ranking::Priority;
            let prio = |rng: &mut Rng| {
                if by_prio || rng.below(3) == 0 {
                    [0, 1, 2, 2, 3, -1][rng.below(6) as usize]
                } else {
                    0
                }
            };
            let new_keys =
                |rng: &mut Rng| -> Vec<Km> { shape.iter().map(|(k, w)| km(rng, k, *w)).collect() };
            let consts: Vec<Entry> = (0..rng.below(3))
                .map(|id| {
                    let k = new_keys(&mut rng);
                    let mut e = entry(id, k, prio(&mut rng));
                    e.is_const = true;
                    e
                })
                .collect();
            let mut ix = TableIndex::new(shape, &consts);
            let mut rt: Vec<Entry> = Vec::new();
            let mut next = consts.len() as u64;
            let mut add = |rng: &mut Rng, ix: &mut TableIndex, rt: &mut Vec<Entry>| {
                let k = new_keys(rng);
                let e = entry(next, k, prio(rng));
                next += 1;
                ix.insert(index::runtime_order(e.id), &e);
                let c = Change::Added {
                    keys: e.keys.clone().into_boxed_slice(),
                    prio: e.prio,
                    order: index::runtime_order(e.id),
                };
                rt.push(e);
                c
            };
            for _ in 0..rng.below(6) {
                add(&mut rng, &mut ix, &mut rt);
            }
            let kv: Vec<u128> = shape
                .iter()
                .map(|&(_, w)| rng.next() as u128 & mask(w))
                .collect();
            let (hit, need) = lookup(&ix, &consts, &rt, &kv);
            let keys: Vec<LookupKey> = kv.iter().zip(&need).map(|(&v, &e)| key(v, e)).collect();
            let total: u32 = shape.iter().map(|&(_, w)| w).sum();
            let megaflow: Vec<Vec<u128>> = (0..1u128 << total)
                .filter_map(|x| {
                    let mut off = 0;
                    let v: Vec<u128> = shape
                        .iter()
                        .map(|&(_, w)| {
                            off += w;
                            (x >> (off - w)) & mask(w)
                        })
                        .collect();
                    v.iter()
                        .zip(&keys)
                        .all(|(a, k)| (a ^ k.value) & k.examined == 0)
                        .then_some(v)
                })
                .collect();
            for p in &megaflow {
                assert_eq!(lookup(&ix, &consts, &rt, p).0, hit, "megaflow not uniform");
            }
            let mut log = ChangeLog::default();
            for _ in 0..1 + rng.below(3) {
                match rng.below(10) {
                    0..=6 => {
                        let c = add(&mut rng, &mut ix, &mut rt);
                        log.record(c);
                    }
                    7 | 8 if !rt.is_empty() => {
                        let e = rt.remove(rng.below(rt.len() as u64) as usize);
                        ix.remove(index::runtime_order(e.id), &e);
                        log.record(Change::Deleted(e.id));
                    }
                    _ => {
                        rt.clear();
                        ix.rebuild(&consts, &rt);
                        log.record(Change::Cleared);
                    }
                }
            }
            // As `apply_unaffected` finds the hit entry.
            let winner = |id: u64| {
                let (e, order, runtime) = match consts.get(id as usize) {
                    Some(e) if e.id == id => (e, index::const_order(id as usize), false),
                    _ => {
                        let (_, i) = index::locate(&rt, index::runtime_order(id))?;
                        (rt.get(i)?, index::runtime_order(id), true)
                    }
                };
                Some(Winner {
                    rank: Ranking::of(shape).rank(shape, &e.keys, e.prio),
                    order,
                    runtime,
                })
            };
            if !log.could_alter(0, hit, &keys, shape, winner) {
                keeps += 1;
                for p in &megaflow {
                    assert_eq!(
                        lookup(&ix, &consts, &rt, p).0,
                        hit,
                        "wrong keep (NICFLOW_SEED={seed}, case {i}): shape {shape:?} key {kv:?} \
                         examined {need:?} packet {p:?} log {log:?}"
                    );
                }
            }
        }
        assert!(keeps > 1_000, "too few keeps to test anything: {keeps}");
    }
}
