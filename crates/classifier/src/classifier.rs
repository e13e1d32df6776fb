//! The tuple-space-search classifier. See the crate docs for the design.

use std::collections::btree_map::{BTreeMap, Entry as BTreeEntry};
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::{apply_mask, RuleId, RuleRef};

/// "No rule" in the intrusive index links. Slot indices never reach it.
const NIL: u32 = u32::MAX;

/// One rule, stored in the slab.
#[derive(Clone)]
struct Rule<const W: usize, T> {
    /// Already masked, so comparing against a masked packet key needs no mask
    /// on this side and the zero words of the mask need not be compared.
    key: [u64; W],
    priority: u32,
    /// Slab index of the subtable holding the rule (gives the mask back).
    subtable: u32,
    /// Next rule with the same masked key in the same subtable, lower
    /// priority. An intrusive chain rather than a vector in the hash entry:
    /// it keeps hash entries at 8 bytes and needs no allocation per key.
    next: u32,
    value: T,
}

#[derive(Clone)]
struct Slot<const W: usize, T> {
    /// Bumped every time the slot is vacated, so old [`RuleId`]s go stale.
    generation: u32,
    rule: Option<Rule<W, T>>,
}

/// Rule storage: rules never move, so indices can link them together and
/// [`RuleId`] can be a plain index + generation.
#[derive(Clone)]
struct RuleSlab<const W: usize, T> {
    slots: Vec<Slot<W, T>>,
    free: Vec<u32>,
    len: usize,
}

impl<const W: usize, T> RuleSlab<W, T> {
    const fn new() -> Self {
        RuleSlab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// The slot index behind `id`, if `id` names a live rule.
    #[inline]
    fn index_of(&self, id: RuleId) -> Option<u32> {
        let slot = self.slots.get(id.index() as usize)?;
        (slot.generation == id.generation() && slot.rule.is_some()).then_some(id.index())
    }

    #[inline]
    fn get(&self, id: RuleId) -> Option<&Rule<W, T>> {
        let slot = self.slots.get(id.index() as usize)?;
        if slot.generation == id.generation() {
            slot.rule.as_ref()
        } else {
            None
        }
    }

    #[inline]
    fn get_mut(&mut self, id: RuleId) -> Option<&mut Rule<W, T>> {
        let slot = self.slots.get_mut(id.index() as usize)?;
        if slot.generation == id.generation() {
            slot.rule.as_mut()
        } else {
            None
        }
    }

    /// A rule the index structures point at; such a slot is always occupied.
    #[inline(always)]
    fn at(&self, idx: u32) -> &Rule<W, T> {
        match &self.slots[idx as usize].rule {
            Some(rule) => rule,
            None => unreachable!("classifier index points at a vacant slot"),
        }
    }

    #[inline]
    fn at_mut(&mut self, idx: u32) -> &mut Rule<W, T> {
        match &mut self.slots[idx as usize].rule {
            Some(rule) => rule,
            None => unreachable!("classifier index points at a vacant slot"),
        }
    }

    #[inline(always)]
    fn id(&self, idx: u32) -> RuleId {
        RuleId::new(idx, self.slots[idx as usize].generation)
    }

    fn alloc(&mut self, rule: Rule<W, T>) -> u32 {
        self.len += 1;
        if let Some(idx) = self.free.pop() {
            self.slots[idx as usize].rule = Some(rule);
            return idx;
        }
        let idx = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("classifier: more than 2^32-1 rule slots");
        self.slots.push(Slot {
            generation: 0,
            rule: Some(rule),
        });
        idx
    }

    /// Vacates a slot. A slot whose generation would wrap is retired for good
    /// instead of being recycled, which is what makes ids never-reused.
    fn release(&mut self, idx: u32) -> Rule<W, T> {
        let slot = &mut self.slots[idx as usize];
        let rule = slot.rule.take().expect("releasing a vacant slot");
        self.len -= 1;
        if let Some(g) = slot.generation.checked_add(1) {
            slot.generation = g;
            self.free.push(idx);
        }
        rule
    }
}

/// One non-zero word of a subtable's mask.
#[derive(Clone, Copy, Debug)]
struct MaskWord {
    mask: u64,
    index: u32,
}

/// A hash-table entry: the head of a same-key chain. The 32-bit hash is kept
/// so that growing the table never rehashes keys and so that most probes that
/// land on the wrong key are rejected without touching the rule slab.
#[derive(Clone, Copy)]
struct Entry {
    hash: u32,
    head: u32,
}

/// All rules sharing one mask.
// repr(C) keeps the fields a lookup reads (table, words) together at the
// front, and the bookkeeping after them.
#[repr(C)]
#[derive(Clone)]
struct Subtable<const W: usize> {
    table: HashTable<Entry>,
    /// Non-zero words of `mask`, in index order: all hashing and comparing
    /// on the hot path goes through this short list.
    words: Box<[MaskWord]>,
    max_priority: u32,
    n_rules: u32,
    /// Creation sequence number: tie-break for equal `max_priority`.
    seq: u64,
    /// Rule count per priority, so `max_priority` can be recomputed in
    /// `O(log P)` when the top rule goes away (OVS rescans the subtable,
    /// which is quadratic when a big table is emptied top-down).
    priorities: BTreeMap<u32, u32>,
    mask: [u64; W],
}

/// An element of the lookup order: enough to decide on the early exit
/// without touching the subtable itself.
#[derive(Clone, Copy, Debug)]
struct Rank {
    max_priority: u32,
    subtable: u32,
}

/// Widens a 32-bit hash for hashbrown, which takes the bucket index from the
/// low bits and the 7-bit tag from the top bits: replicating the value puts
/// independent bits in both places (for tables below 2^25 buckets).
#[inline(always)]
fn widen(h: u32) -> u64 {
    (u64::from(h) << 32) | u64::from(h)
}

/// Hash of `key & mask` over the non-zero mask words only.
///
/// Words are fed to foldhash in pairs through `write_u128`, which is one
/// folded multiply per pair; `write_u64` per word goes through foldhash's
/// variable-length sponge, whose shifts made a 9-subtable miss take 100 ns
/// instead of 65 ns.
#[inline(always)]
fn hash_masked<const W: usize>(seed: &RandomState, words: &[MaskWord], key: &[u64; W]) -> u32 {
    let mut h = seed.build_hasher();
    let word = |w: &MaskWord| key[w.index as usize] & w.mask;
    let mut pairs = words.chunks_exact(2);
    for p in &mut pairs {
        h.write_u128(u128::from(word(&p[0])) | (u128::from(word(&p[1])) << 64));
    }
    if let [last] = pairs.remainder() {
        h.write_u64(word(last));
    }
    let x = h.finish();
    (x ^ (x >> 32)) as u32
}

/// Does `key` (unmasked) match `stored` (masked) under the subtable's mask?
#[inline(always)]
fn matches<const W: usize>(words: &[MaskWord], key: &[u64; W], stored: &[u64; W]) -> bool {
    words
        .iter()
        .all(|w| key[w.index as usize] & w.mask == stored[w.index as usize])
}

fn hash_mask<const W: usize>(seed: &RandomState, mask: &[u64; W]) -> u64 {
    let mut h = seed.build_hasher();
    for &m in mask {
        h.write_u64(m);
    }
    h.finish()
}

/// A packet classifier using tuple space search. See the crate docs.
#[derive(Clone)]
pub struct Classifier<const W: usize, T> {
    /// Live subtables sorted by `max_priority` descending, then creation
    /// order: the lookup walks this contiguous 8-byte-per-entry vector.
    order: Vec<Rank>,
    /// Subtable slab; rules refer to their subtable by index.
    subtables: Vec<Option<Subtable<W>>>,
    rules: RuleSlab<W, T>,
    /// Per-classifier random hash seed.
    seed: RandomState,
    free_subtables: Vec<u32>,
    /// Mask -> subtable index, for insert and `find_exact`.
    by_mask: HashTable<u32>,
    next_seq: u64,
}

impl<const W: usize, T> Default for Classifier<W, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize, T: fmt::Debug> fmt::Debug for Classifier<W, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classifier")
            .field("n_subtables", &self.n_subtables())
            .field("rules", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

impl<const W: usize, T> Classifier<W, T> {
    pub fn new() -> Self {
        Classifier {
            order: Vec::new(),
            subtables: Vec::new(),
            rules: RuleSlab::new(),
            seed: RandomState::default(),
            free_subtables: Vec::new(),
            by_mask: HashTable::new(),
            next_seq: 0,
        }
    }

    /// Number of rules.
    #[inline]
    pub fn len(&self) -> usize {
        self.rules.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rules.len == 0
    }

    /// Number of distinct masks, i.e. the worst-case number of hash probes
    /// per lookup.
    #[inline]
    pub fn n_subtables(&self) -> usize {
        self.order.len()
    }

    #[inline(always)]
    fn subtable(&self, idx: u32) -> &Subtable<W> {
        match &self.subtables[idx as usize] {
            Some(st) => st,
            None => unreachable!("classifier index points at a dropped subtable"),
        }
    }

    fn find_subtable(&self, mask: &[u64; W]) -> Option<u32> {
        let h = hash_mask(&self.seed, mask);
        self.by_mask
            .find(h, |&i| self.subtable(i).mask == *mask)
            .copied()
    }

    /// Finds the subtable for `mask`, creating an empty one (not yet in
    /// `order`, since it has no priority yet) if needed.
    fn subtable_for(&mut self, mask: &[u64; W]) -> u32 {
        if let Some(i) = self.find_subtable(mask) {
            return i;
        }
        let words: Box<[MaskWord]> = mask
            .iter()
            .enumerate()
            .filter(|(_, &m)| m != 0)
            .map(|(i, &mask)| MaskWord {
                mask,
                index: i as u32,
            })
            .collect();
        let st = Subtable {
            table: HashTable::new(),
            words,
            max_priority: 0,
            n_rules: 0,
            seq: self.next_seq,
            priorities: BTreeMap::new(),
            mask: *mask,
        };
        self.next_seq += 1;
        let idx = match self.free_subtables.pop() {
            Some(i) => {
                self.subtables[i as usize] = Some(st);
                i
            }
            None => {
                self.subtables.push(Some(st));
                u32::try_from(self.subtables.len() - 1).expect("too many subtables")
            }
        };
        let Classifier {
            by_mask,
            subtables,
            seed,
            ..
        } = self;
        let hasher = |&i: &u32| match &subtables[i as usize] {
            Some(st) => hash_mask(seed, &st.mask),
            None => unreachable!(),
        };
        by_mask.insert_unique(hasher(&idx), idx, hasher);
        idx
    }

    /// Puts subtable `idx` at its place in `order` after its `max_priority`
    /// changed (or it was just created, `present == false`).
    fn reposition(&mut self, idx: u32, present: bool) {
        if present {
            let pos = self.order.iter().position(|r| r.subtable == idx);
            self.order.remove(pos.expect("subtable missing from order"));
        }
        let st = self.subtable(idx);
        let (p, seq) = (st.max_priority, st.seq);
        let pos = self.order.partition_point(|r| {
            r.max_priority > p || (r.max_priority == p && self.subtable(r.subtable).seq < seq)
        });
        self.order.insert(
            pos,
            Rank {
                max_priority: p,
                subtable: idx,
            },
        );
    }

    fn drop_subtable(&mut self, idx: u32) {
        let pos = self.order.iter().position(|r| r.subtable == idx);
        self.order.remove(pos.expect("subtable missing from order"));
        let st = self.subtables[idx as usize]
            .take()
            .expect("dropping a dropped subtable");
        let h = hash_mask(&self.seed, &st.mask);
        match self.by_mask.find_entry(h, |&i| i == idx) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => unreachable!("subtable missing from mask index"),
        }
        self.free_subtables.push(idx);
    }

    /// Adds a rule matching `key & mask` at `priority`.
    ///
    /// If a rule with the same masked key, mask and priority exists, it is
    /// replaced: its id is retired, the new rule gets a fresh id, and the old
    /// value is returned.
    pub fn insert(
        &mut self,
        key: &[u64; W],
        mask: &[u64; W],
        priority: u32,
        value: T,
    ) -> (RuleId, Option<T>) {
        let masked = apply_mask(key, mask);
        let st_idx = self.subtable_for(mask);
        let Classifier {
            subtables,
            rules,
            seed,
            ..
        } = self;
        let st = match &mut subtables[st_idx as usize] {
            Some(st) => st,
            None => unreachable!(),
        };
        let h = hash_masked(seed, &st.words, &masked);
        let words = &st.words;
        let found = st.table.find_mut(widen(h), |e| {
            e.hash == h && matches(words, &masked, &rules.at(e.head).key)
        });
        let new_rule = |next| Rule {
            key: masked,
            priority,
            subtable: st_idx,
            next,
            value,
        };
        let new_idx = match found {
            Some(entry) => {
                // Walk the chain (priority descending) to the insertion point.
                let mut prev = NIL;
                let mut cur = entry.head;
                while cur != NIL {
                    let r = rules.at(cur);
                    if r.priority <= priority {
                        break;
                    }
                    prev = cur;
                    cur = r.next;
                }
                let replacing = cur != NIL && rules.at(cur).priority == priority;
                let next = if replacing { rules.at(cur).next } else { cur };
                let new_idx = rules.alloc(new_rule(next));
                if prev == NIL {
                    entry.head = new_idx;
                } else {
                    rules.at_mut(prev).next = new_idx;
                }
                if replacing {
                    let old = rules.release(cur);
                    return (rules.id(new_idx), Some(old.value));
                }
                new_idx
            }
            None => {
                let new_idx = rules.alloc(new_rule(NIL));
                st.table.insert_unique(
                    widen(h),
                    Entry {
                        hash: h,
                        head: new_idx,
                    },
                    |e| widen(e.hash),
                );
                new_idx
            }
        };
        let id = rules.id(new_idx);
        *st.priorities.entry(priority).or_insert(0) += 1;
        st.n_rules += 1;
        if st.n_rules == 1 {
            st.max_priority = priority;
            self.reposition(st_idx, false);
        } else if priority > st.max_priority {
            st.max_priority = priority;
            self.reposition(st_idx, true);
        }
        (id, None)
    }

    /// The rule with exactly this match (`key & mask`, `mask`) and priority.
    pub fn find_exact(&self, key: &[u64; W], mask: &[u64; W], priority: u32) -> Option<RuleId> {
        let st = self.subtable(self.find_subtable(mask)?);
        let masked = apply_mask(key, mask);
        let mut cur = self.find_head(st, &masked)?;
        while cur != NIL {
            let r = self.rules.at(cur);
            if r.priority == priority {
                return Some(self.rules.id(cur));
            }
            if r.priority < priority {
                break;
            }
            cur = r.next;
        }
        None
    }

    /// Removes a rule. Returns `None` if `id` is stale.
    pub fn remove(&mut self, id: RuleId) -> Option<T> {
        let idx = self.rules.index_of(id)?;
        Some(self.remove_at(idx))
    }

    fn remove_at(&mut self, idx: u32) -> T {
        let Classifier {
            subtables,
            rules,
            seed,
            ..
        } = self;
        let r = rules.at(idx);
        let (st_idx, priority, next) = (r.subtable, r.priority, r.next);
        let st = match &mut subtables[st_idx as usize] {
            Some(st) => st,
            None => unreachable!(),
        };
        let h = hash_masked(seed, &st.words, &r.key);
        let words = &st.words;
        let entry = st.table.find_entry(widen(h), |e| {
            e.hash == h
                && (e.head == idx || matches(words, &rules.at(idx).key, &rules.at(e.head).key))
        });
        let Ok(mut entry) = entry else {
            unreachable!("rule missing from its subtable")
        };
        let head = entry.get().head;
        if head == idx {
            if next == NIL {
                entry.remove();
            } else {
                entry.get_mut().head = next;
            }
        } else {
            let mut prev = head;
            while rules.at(prev).next != idx {
                prev = rules.at(prev).next;
                debug_assert_ne!(prev, NIL, "rule missing from its chain");
            }
            rules.at_mut(prev).next = next;
        }
        let rule = rules.release(idx);

        match st.priorities.entry(priority) {
            BTreeEntry::Occupied(mut o) => {
                *o.get_mut() -= 1;
                if *o.get() == 0 {
                    o.remove();
                }
            }
            BTreeEntry::Vacant(_) => unreachable!("priority histogram out of sync"),
        }
        st.n_rules -= 1;
        if st.n_rules == 0 {
            self.drop_subtable(st_idx);
        } else if priority == st.max_priority {
            let new_max = *st.priorities.last_key_value().expect("non-empty").0;
            if new_max != priority {
                st.max_priority = new_max;
                self.reposition(st_idx, true);
            }
        }
        rule.value
    }

    #[inline]
    pub fn get(&self, id: RuleId) -> Option<&T> {
        self.rules.get(id).map(|r| &r.value)
    }

    #[inline]
    pub fn get_mut(&mut self, id: RuleId) -> Option<&mut T> {
        self.rules.get_mut(id).map(|r| &mut r.value)
    }

    #[inline]
    pub fn contains(&self, id: RuleId) -> bool {
        self.rules.index_of(id).is_some()
    }

    /// Everything about one rule.
    pub fn rule(&self, id: RuleId) -> Option<RuleRef<'_, W, T>> {
        let idx = self.rules.index_of(id)?;
        Some(self.rule_ref(idx))
    }

    #[inline]
    fn rule_ref(&self, idx: u32) -> RuleRef<'_, W, T> {
        let r = self.rules.at(idx);
        RuleRef {
            id: self.rules.id(idx),
            key: &r.key,
            mask: &self.subtable(r.subtable).mask,
            priority: r.priority,
            value: &r.value,
        }
    }

    /// Head of the same-key chain for `key` in `st`: the subtable's candidate.
    #[inline(always)]
    fn find_head(&self, st: &Subtable<W>, key: &[u64; W]) -> Option<u32> {
        let h = hash_masked(&self.seed, &st.words, key);
        st.table
            .find(widen(h), |e| {
                e.hash == h && matches(&st.words, key, &self.rules.at(e.head).key)
            })
            .map(|e| e.head)
    }

    /// The highest-priority rule matching `key`.
    #[inline]
    pub fn lookup(&self, key: &[u64; W]) -> Option<(RuleId, &T)> {
        self.lookup_impl(key, None)
    }

    /// Like [`lookup`](Self::lookup), and ORs into `wc` the mask of every
    /// subtable examined. The caller normally starts from an all-zero `wc`
    /// (or the bits it already depends on); afterwards every key equal to
    /// `key` on the bits of `wc` gets the same answer.
    #[inline]
    pub fn lookup_wc(&self, key: &[u64; W], wc: &mut [u64; W]) -> Option<(RuleId, &T)> {
        self.lookup_impl(key, Some(wc))
    }

    #[inline(always)]
    fn lookup_impl(&self, key: &[u64; W], mut wc: Option<&mut [u64; W]>) -> Option<(RuleId, &T)> {
        // Best priority found so far plus one; 0 = nothing yet. The offset
        // makes both tests below a single comparison.
        let mut best: u64 = 0;
        let mut best_idx = NIL;
        for rank in &self.order {
            if u64::from(rank.max_priority) < best {
                // No later subtable can beat (or, on a tie, precede) the best.
                break;
            }
            let st = self.subtable(rank.subtable);
            if let Some(wc) = wc.as_deref_mut() {
                for w in st.words.iter() {
                    wc[w.index as usize] |= w.mask;
                }
            }
            if let Some(head) = self.find_head(st, key) {
                let p = u64::from(self.rules.at(head).priority);
                if p >= best {
                    best = p + 1;
                    best_idx = head;
                }
            }
        }
        if best_idx == NIL {
            return None;
        }
        Some((self.rules.id(best_idx), &self.rules.at(best_idx).value))
    }

    /// All rules, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = RuleRef<'_, W, T>> {
        self.rules
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.rule.is_some())
            .map(|(i, _)| self.rule_ref(i as u32))
    }

    /// Handles of all rules, in the order of [`iter`](Self::iter).
    pub fn ids(&self) -> Vec<RuleId> {
        self.iter().map(|r| r.id).collect()
    }

    /// Subtables in lookup order: `(mask, max_priority, number of rules)`.
    /// For statistics and debugging.
    pub fn subtables(&self) -> impl Iterator<Item = (&[u64; W], u32, usize)> {
        self.order.iter().map(|r| {
            let st = self.subtable(r.subtable);
            (&st.mask, st.max_priority, st.n_rules as usize)
        })
    }

    /// Removes every rule for which `f(id, key, mask, priority, value)`
    /// returns false. `f` may modify the values it keeps.
    pub fn retain(&mut self, mut f: impl FnMut(RuleId, &[u64; W], &[u64; W], u32, &mut T) -> bool) {
        for i in 0..self.rules.slots.len() {
            let idx = i as u32;
            let slot = &mut self.rules.slots[i];
            let generation = slot.generation;
            let Some(r) = slot.rule.as_mut() else {
                continue;
            };
            let mask = match &self.subtables[r.subtable as usize] {
                Some(st) => &st.mask,
                None => unreachable!(),
            };
            let keep = f(
                RuleId::new(idx, generation),
                &r.key,
                mask,
                r.priority,
                &mut r.value,
            );
            if !keep {
                self.remove_at(idx);
            }
        }
    }

    /// Removes every rule. Outstanding ids go stale (they are not reused).
    pub fn clear(&mut self) {
        for i in 0..self.rules.slots.len() {
            if self.rules.slots[i].rule.is_some() {
                self.rules.release(i as u32);
            }
        }
        self.order.clear();
        self.subtables.clear();
        self.free_subtables.clear();
        self.by_mask.clear();
    }

    /// Checks every internal invariant; for tests.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let mut n = 0;
        for (i, s) in self.rules.slots.iter().enumerate() {
            let Some(r) = &s.rule else { continue };
            n += 1;
            let st = self.subtable(r.subtable);
            assert_eq!(apply_mask(&r.key, &st.mask), r.key);
            let head = self.find_head(st, &r.key).expect("rule not reachable");
            let mut cur = head;
            let mut found = false;
            let mut last = u64::MAX;
            while cur != NIL {
                let c = self.rules.at(cur);
                assert!(
                    u64::from(c.priority) < last,
                    "chain not strictly descending"
                );
                last = u64::from(c.priority);
                found |= cur as usize == i;
                cur = c.next;
            }
            assert!(found, "rule not in its chain");
        }
        assert_eq!(n, self.rules.len);
        let mut total = 0;
        for w in self.order.windows(2) {
            let (a, b) = (self.subtable(w[0].subtable), self.subtable(w[1].subtable));
            assert!(
                a.max_priority > b.max_priority
                    || (a.max_priority == b.max_priority && a.seq < b.seq)
            );
        }
        for rank in &self.order {
            let st = self.subtable(rank.subtable);
            assert_eq!(rank.max_priority, st.max_priority);
            assert!(st.n_rules > 0);
            assert_eq!(st.priorities.values().sum::<u32>(), st.n_rules);
            assert_eq!(*st.priorities.last_key_value().unwrap().0, st.max_priority);
            assert_eq!(self.find_subtable(&st.mask), Some(rank.subtable));
            total += st.n_rules as usize;
        }
        assert_eq!(total, self.rules.len);
        assert_eq!(
            self.subtables.iter().filter(|s| s.is_some()).count(),
            self.order.len()
        );
        assert_eq!(self.by_mask.len(), self.order.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type C = Classifier<2, &'static str>;

    const EXACT: [u64; 2] = [!0, !0];
    const FIRST: [u64; 2] = [!0, 0];
    const ANY: [u64; 2] = [0, 0];

    fn val<T: Copy>(r: Option<(RuleId, &T)>) -> Option<T> {
        r.map(|(_, v)| *v)
    }

    #[test]
    fn empty() {
        let c = C::new();
        assert!(c.is_empty());
        assert_eq!(c.len(), 0);
        assert_eq!(c.n_subtables(), 0);
        assert_eq!(c.lookup(&[1, 2]), None);
        let mut wc = [0; 2];
        assert_eq!(c.lookup_wc(&[1, 2], &mut wc), None);
        assert_eq!(wc, [0, 0]);
        c.check_invariants();
    }

    #[test]
    fn priority_order() {
        let mut c = C::new();
        c.insert(&[0, 0], &ANY, 1, "default");
        c.insert(&[10, 0], &FIRST, 5, "first=10");
        c.insert(&[10, 20], &EXACT, 3, "exact low prio");
        c.insert(&[11, 20], &EXACT, 9, "exact high prio");
        c.check_invariants();
        assert_eq!(c.len(), 4);
        assert_eq!(c.n_subtables(), 3);
        assert_eq!(val(c.lookup(&[10, 20])), Some("first=10"));
        assert_eq!(val(c.lookup(&[10, 99])), Some("first=10"));
        assert_eq!(val(c.lookup(&[11, 20])), Some("exact high prio"));
        assert_eq!(val(c.lookup(&[12, 20])), Some("default"));
    }

    #[test]
    fn key_is_masked_on_insert() {
        let mut c = C::new();
        let (id, _) = c.insert(&[0xff, 0xabc], &[0x0f, 0], 1, "x");
        let r = c.rule(id).unwrap();
        assert_eq!(r.key, &[0x0f, 0]);
        assert_eq!(r.mask, &[0x0f, 0]);
        assert_eq!(r.priority, 1);
        assert_eq!(val(c.lookup(&[0x3f, 7])), Some("x"));
        assert_eq!(val(c.lookup(&[0x3e, 7])), None);
        assert_eq!(c.find_exact(&[0x1f, 1], &[0x0f, 0], 1), Some(id));
        assert_eq!(c.find_exact(&[0x1f, 1], &[0x0f, 0], 2), None);
        assert_eq!(c.find_exact(&[0x1f, 1], &[0x1f, 0], 1), None);
    }

    #[test]
    fn replace_semantics() {
        let mut c = C::new();
        let (a, old) = c.insert(&[1, 2], &EXACT, 7, "a");
        assert_eq!(old, None);
        let (b, old) = c.insert(&[1, 2], &EXACT, 7, "b");
        assert_eq!(old, Some("a"));
        assert_ne!(a, b);
        assert_eq!(c.get(a), None, "replaced id must go stale");
        assert_eq!(c.get(b), Some(&"b"));
        assert_eq!(c.len(), 1);
        // Same key and mask, other priority: a second rule, not a replacement.
        let (hi, old) = c.insert(&[1, 2], &EXACT, 9, "hi");
        assert_eq!(old, None);
        let (lo, _) = c.insert(&[1, 2], &EXACT, 1, "lo");
        assert_eq!(c.len(), 3);
        assert_eq!(val(c.lookup(&[1, 2])), Some("hi"));
        // Replace the middle of the chain.
        let (b2, old) = c.insert(&[1, 2], &EXACT, 7, "b2");
        assert_eq!(old, Some("b"));
        assert_eq!(c.find_exact(&[1, 2], &EXACT, 7), Some(b2));
        assert_eq!(c.find_exact(&[1, 2], &EXACT, 9), Some(hi));
        assert_eq!(c.find_exact(&[1, 2], &EXACT, 1), Some(lo));
        c.check_invariants();
        assert_eq!(c.remove(hi), Some("hi"));
        assert_eq!(val(c.lookup(&[1, 2])), Some("b2"));
        assert_eq!(c.remove(b2), Some("b2"));
        assert_eq!(val(c.lookup(&[1, 2])), Some("lo"));
        c.check_invariants();
    }

    #[test]
    fn remove_and_stale_ids() {
        let mut c = C::new();
        let (a, _) = c.insert(&[1, 0], &FIRST, 5, "a");
        let (b, _) = c.insert(&[1, 2], &EXACT, 3, "b");
        assert_eq!(c.n_subtables(), 2);
        assert_eq!(c.remove(a), Some("a"));
        assert_eq!(c.remove(a), None);
        assert_eq!(c.get(a), None);
        assert!(c.rule(a).is_none());
        assert_eq!(c.n_subtables(), 1, "empty subtable must be dropped");
        assert_eq!(val(c.lookup(&[1, 2])), Some("b"));
        // Slot of `a` is recycled with a new generation.
        let (d, _) = c.insert(&[4, 0], &FIRST, 1, "d");
        assert_ne!(d, a);
        assert_eq!(c.get(a), None);
        assert_eq!(c.get(d), Some(&"d"));
        assert_eq!(c.remove(b), Some("b"));
        assert_eq!(c.remove(d), Some("d"));
        assert!(c.is_empty());
        assert_eq!(c.n_subtables(), 0);
        c.check_invariants();
    }

    #[test]
    fn max_priority_recomputed_on_remove() {
        let mut c = C::new();
        // Subtable FIRST: priorities 10 and 2. Subtable EXACT: priority 5.
        let (top, _) = c.insert(&[1, 0], &FIRST, 10, "first10");
        c.insert(&[2, 0], &FIRST, 2, "first2");
        c.insert(&[2, 7], &EXACT, 5, "exact5");
        let masks: Vec<_> = c.subtables().map(|(m, p, n)| (*m, p, n)).collect();
        assert_eq!(masks, vec![(FIRST, 10, 2), (EXACT, 5, 1)]);
        c.remove(top);
        c.check_invariants();
        let masks: Vec<_> = c.subtables().map(|(m, p, n)| (*m, p, n)).collect();
        assert_eq!(masks, vec![(EXACT, 5, 1), (FIRST, 2, 1)]);
        assert_eq!(val(c.lookup(&[2, 7])), Some("exact5"));
        assert_eq!(val(c.lookup(&[2, 8])), Some("first2"));
    }

    #[test]
    fn max_priority_with_duplicate_priorities() {
        let mut c = C::new();
        let (a, _) = c.insert(&[1, 0], &FIRST, 10, "a");
        let (b, _) = c.insert(&[2, 0], &FIRST, 10, "b");
        c.insert(&[3, 0], &FIRST, 4, "c");
        c.remove(a);
        assert_eq!(c.subtables().next().unwrap().1, 10);
        c.remove(b);
        assert_eq!(c.subtables().next().unwrap().1, 4);
        c.check_invariants();
    }

    #[test]
    fn early_exit_and_wildcards() {
        let mut c = C::new();
        c.insert(&[1, 0], &FIRST, 10, "hi");
        c.insert(&[1, 2], &EXACT, 5, "lo");
        c.insert(&[0, 0], &ANY, 1, "default");
        // Hit in the first subtable: the others cannot beat priority 10, so
        // they are skipped and add nothing to the wildcards.
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[1, 2], &mut wc)), Some("hi"));
        assert_eq!(wc, FIRST);
        // Miss everywhere: every subtable was examined.
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[3, 2], &mut wc)), Some("default"));
        assert_eq!(wc, EXACT);
        // Bits already in wc are kept.
        let mut wc = [0, 0x100];
        c.lookup_wc(&[1, 5], &mut wc);
        assert_eq!(wc, [!0, 0x100]);
    }

    #[test]
    fn wildcard_tracking_partial_masks() {
        let mut c = Classifier::<2, u32>::new();
        c.insert(&[0xa0, 0], &[0xf0, 0], 3, 1);
        c.insert(&[0, 0x5], &[0, 0xf], 2, 2);
        c.insert(&[0, 0], &[0, 0], 0, 3);
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[0xa7, 0x35], &mut wc)), Some(1));
        assert_eq!(wc, [0xf0, 0]);
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[0xb7, 0x35], &mut wc)), Some(2));
        assert_eq!(wc, [0xf0, 0xf]);
    }

    #[test]
    fn megaflow_first_hit_wins() {
        // All the same priority: the walk stops right after the first hit.
        let mut c = Classifier::<2, u32>::new();
        c.insert(&[1, 0], &FIRST, 0, 1);
        c.insert(&[1, 1], &EXACT, 0, 2);
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[1, 1], &mut wc)), Some(1));
        assert_eq!(wc, FIRST);
    }

    #[test]
    fn tie_break_by_subtable_age() {
        let mut c = Classifier::<2, u32>::new();
        let (old, _) = c.insert(&[1, 0], &FIRST, 5, 1);
        c.insert(&[0, 2], &[0, !0], 5, 2);
        assert_eq!(val(c.lookup(&[1, 2])), Some(1));
        // A newer subtable with a higher max_priority comes first, so its
        // priority-5 rule wins the tie.
        let mut c2 = Classifier::<2, u32>::new();
        c2.insert(&[1, 0], &FIRST, 5, 1);
        c2.insert(&[0, 2], &[0, !0], 5, 2);
        c2.insert(&[0, 3], &[0, !0], 8, 3);
        assert_eq!(val(c2.lookup(&[1, 2])), Some(2));
        // Emptying and recreating a subtable makes it the youngest.
        c.remove(old);
        c.insert(&[1, 0], &FIRST, 5, 4);
        assert_eq!(val(c.lookup(&[1, 2])), Some(2));
        c.check_invariants();
    }

    #[test]
    fn retain_and_iter() {
        let mut c = Classifier::<2, u32>::new();
        let mut ids = Vec::new();
        for i in 0..20u64 {
            let mask = if i % 2 == 0 { EXACT } else { FIRST };
            ids.push(c.insert(&[i, i], &mask, i as u32, i as u32).0);
        }
        assert_eq!(c.iter().count(), 20);
        let mut all = c.ids();
        all.sort();
        let mut expect = ids.clone();
        expect.sort();
        assert_eq!(all, expect);
        // Drop every multiple of 3, bump the others.
        c.retain(|id, key, mask, prio, v| {
            assert_eq!((key[0], prio), (u64::from(*v), *v));
            assert_eq!(*mask, if *v % 2 == 0 { EXACT } else { FIRST });
            assert!(ids.contains(&id));
            *v += 100;
            prio % 3 != 0
        });
        c.check_invariants();
        assert_eq!(c.len(), 13);
        for (i, id) in ids.iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(c.get(*id), None);
            } else {
                assert_eq!(c.get(*id), Some(&(i as u32 + 100)));
            }
        }
        for r in c.iter() {
            assert_ne!(r.priority % 3, 0);
            assert_eq!(*r.value, r.priority + 100);
        }
        c.retain(|_, _, _, _, _| false);
        assert!(c.is_empty());
        assert_eq!(c.n_subtables(), 0);
        c.check_invariants();
    }

    #[test]
    fn get_mut_and_clear() {
        let mut c = Classifier::<2, u32>::new();
        let (a, _) = c.insert(&[1, 2], &EXACT, 1, 10);
        *c.get_mut(a).unwrap() += 1;
        assert_eq!(c.get(a), Some(&11));
        c.clear();
        assert!(c.is_empty());
        assert_eq!(c.n_subtables(), 0);
        assert_eq!(c.get(a), None);
        let (b, _) = c.insert(&[1, 2], &EXACT, 1, 20);
        assert_ne!(a, b);
        assert_eq!(c.get(a), None);
        assert_eq!(val(c.lookup(&[1, 2])), Some(20));
        c.check_invariants();
    }

    #[test]
    fn retired_slot_is_not_reused() {
        let mut c = Classifier::<1, u32>::new();
        let (a, _) = c.insert(&[1], &[!0], 1, 1);
        c.rules.slots[a.index() as usize].generation = u32::MAX;
        let a = c.rules.id(a.index());
        assert_eq!(c.remove(a), Some(1));
        let (b, _) = c.insert(&[1], &[!0], 1, 2);
        assert_ne!(a.index(), b.index());
        assert_eq!(c.get(a), None);
    }

    #[test]
    fn many_rules_one_mask() {
        let mut c = Classifier::<3, u64>::new();
        let mask = [0, !0, 0];
        for i in 0..5000u64 {
            c.insert(&[7, i, 9], &mask, 100, i);
        }
        assert_eq!(c.n_subtables(), 1);
        for i in (0..5000u64).step_by(97) {
            assert_eq!(val(c.lookup(&[0, i, 0])), Some(i));
        }
        assert_eq!(c.lookup(&[0, 5000, 0]), None);
        // Remove top-down without quadratic max_priority rescans.
        for id in c.ids() {
            c.remove(id);
        }
        assert!(c.is_empty());
        c.check_invariants();
    }

    #[test]
    fn zero_width_and_catch_all() {
        let mut c = Classifier::<0, u8>::new();
        c.insert(&[], &[], 3, 1);
        c.insert(&[], &[], 4, 2);
        assert_eq!(val(c.lookup(&[])), Some(2));
        assert_eq!(c.len(), 2);
        assert_eq!(c.n_subtables(), 1);
    }
}
