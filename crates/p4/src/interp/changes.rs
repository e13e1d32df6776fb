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
    /// An entry was added with this match (its priority is not kept: a
    /// new entry that may match is taken as winning).
    Added { keys: Box<[Km]> },
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

    /// Could a change after `since` alter the lookup that hit `entry`
    /// (`None`: missed) with `keys`, whose widths are `widths`?
    fn could_alter(
        &self,
        since: u64,
        entry: Option<EntryId>,
        keys: &[LookupKey],
        widths: &[u32],
    ) -> bool {
        if since >= self.seq {
            return false;
        }
        if since < self.trimmed || keys.len() != widths.len() {
            return true;
        }
        self.log
            .iter()
            .rev()
            .take_while(|(s, _)| *s > since)
            .any(|(_, c)| match c {
                // A new entry changes the winner only for keys it matches
                // (whatever its priority: when unsure, remove).
                Change::Added { keys: m, .. } => may_match(m, keys, widths),
                // Removing or rewriting an entry other than the winner
                // leaves the winner: it still matches and still beats
                // what is left.
                Change::Deleted(id) | Change::Modified(id) => entry == Some(*id),
                Change::Default => entry.is_none(),
                // A miss stays a miss when entries go.
                Change::Cleared => entry.is_some(),
            })
    }
}

/// Could an entry matching `m` match some key that agrees with `keys` on
/// their examined bits (any packet of the flow's megaflow)?
pub(crate) fn may_match(m: &[Km], keys: &[LookupKey], widths: &[u32]) -> bool {
    m.len() != keys.len()
        || m.iter().zip(keys).zip(widths).all(|((m, k), &w)| {
            let fixed = k.value & k.examined;
            match *m {
                Km::Masked(x, mk) => (fixed ^ x) & mk & k.examined == 0,
                Km::Range(lo, hi) => {
                    // The keys lie between these two (not every value in
                    // between is one: an overlap may be a false "yes").
                    let max = fixed | (mask(w) & !k.examined);
                    fixed <= hi && lo <= max
                }
            }
        })
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
    /// none of its keys, a deleted or modified entry that is not the one
    /// it hit, a default-action change for a run that hit an entry, a
    /// clear for a run that missed. Anything else, and changes older
    /// than the kept log, give false.
    pub fn apply_unaffected(&self, trace: &Trace, apply: &TableApply, since: u64) -> bool {
        let t = apply.index as usize;
        let (Some(ts), Some(td)) = (self.st.tables.get(t), self.prog.tables.get(t)) else {
            return false;
        };
        if *td.qname != *apply.table {
            return false;
        }
        // Called for every cached flow of a changed table at each change
        // (each learning): the widths go on the stack unless the table
        // has more keys than any program here.
        let mut buf = [0u32; 16];
        let heap: Vec<u32>;
        let widths: &[u32] = if td.keys.len() <= buf.len() {
            for (w, k) in buf.iter_mut().zip(&td.keys) {
                *w = k.width;
            }
            &buf[..td.keys.len()]
        } else {
            heap = td.keys.iter().map(|k| k.width).collect();
            &heap
        };
        !ts.log
            .could_alter(since, apply.entry, trace.apply_keys(apply), widths)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: u128, examined: u128) -> LookupKey {
        LookupKey { value, examined }
    }

    #[test]
    fn a_masked_entry_may_match_only_keys_agreeing_on_examined_bits() {
        let w = [32];
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
    fn a_range_entry_may_match_when_the_flows_keys_overlap_it() {
        let w = [16];
        let k = [key(80, 0xffff)];
        assert!(may_match(&[Km::Range(0, 1023)], &k, &w));
        assert!(!may_match(&[Km::Range(1024, 65535)], &k, &w));
        // Low byte not examined: the flow covers 0x0100..=0x01ff.
        let k = [key(0x0150, 0xff00)];
        assert!(may_match(&[Km::Range(0x01f0, 0x0300)], &k, &w));
        assert!(!may_match(&[Km::Range(0x0200, 0x0300)], &k, &w));
    }

    #[test]
    fn the_log_says_which_changes_could_alter_a_lookup() {
        let w = [32];
        let k = [key(5, u32::MAX as u128)];
        let mut log = ChangeLog::default();
        log.record(Change::Added {
            keys: Box::new([Km::Masked(9, u32::MAX as u128)]),
        });
        let since = 0;
        assert!(!log.could_alter(since, Some(1), &k, &w), "other key");
        log.record(Change::Deleted(2));
        log.record(Change::Modified(3));
        log.record(Change::Default);
        assert!(!log.could_alter(since, Some(1), &k, &w));
        assert!(
            log.could_alter(since, None, &k, &w),
            "a miss ran the default"
        );
        log.record(Change::Deleted(1));
        assert!(
            log.could_alter(since, Some(1), &k, &w),
            "the hit entry went"
        );
        // Up to date: nothing since.
        assert!(!log.could_alter(log.seq(), Some(1), &k, &w));
        // A clear leaves misses alone.
        let s = log.seq();
        log.record(Change::Cleared);
        assert!(!log.could_alter(s, None, &k, &w));
        assert!(log.could_alter(s, Some(7), &k, &w));
        // Keys not recorded: unsure.
        assert!(log.could_alter(s, None, &[], &w));
        // A matching add.
        let s = log.seq();
        log.record(Change::Added {
            keys: Box::new([Km::Masked(0, 0)]),
        });
        assert!(log.could_alter(s, Some(1), &k, &w));
    }

    #[test]
    fn a_flow_older_than_the_kept_log_is_affected() {
        let w = [32];
        let k = [key(5, u32::MAX as u128)];
        let mut log = ChangeLog::default();
        for i in 0..LOG_LEN as u64 + 1 {
            log.record(Change::Deleted(100 + i));
        }
        assert!(log.could_alter(0, Some(1), &k, &w), "trimmed past it");
        assert!(!log.could_alter(1, Some(1), &k, &w), "still in the log");
    }
}
