//! The classifier: tuple space search, with TupleMerge as an opt-in mode.
//! See the crate docs for the design.

use std::cmp::Reverse;
use std::collections::btree_map::{BTreeMap, Entry as BTreeEntry};
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::buckets::{Buckets, Entry, Probe};
use crate::{
    apply_mask, mask_is_subset, masked_eq, FieldRange, RangeError, RuleId, RuleRef, MAX_RANGES,
};

/// "No rule" / "no table" in the intrusive index links. Slot indices never
/// reach it.
pub(crate) const NIL: u32 = u32::MAX;

/// Collision limit of a TupleMerge classifier unless
/// [`Classifier::with_collision_limit`] says otherwise: the most distinct
/// matches one hash bucket may hold, i.e. the most rules a lookup compares
/// per table.
///
/// 32, not 8: on ClassBench rule sets with port ranges expanded into prefix
/// masks (docs/results/classifier-classbench.md), 8 made buckets of one
/// filter's expanded entries overflow into 1.5-2.5x more tables (fw1 10K:
/// 103 tables against 41) and lookups up to 2.5x slower.
pub const DEFAULT_COLLISION_LIMIT: usize = 32;

/// The range conditions of a rule, beyond its mask (see [`FieldRange`]):
/// inline, sorted, `n` used. Part of a match's identity: two rules with the
/// same masked key and mask but other ranges are different matches.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub(crate) struct Ranges {
    n: u8,
    r: [FieldRange; MAX_RANGES],
}

impl Ranges {
    pub(crate) const NONE: Ranges = Ranges {
        n: 0,
        r: [FieldRange {
            word: 0,
            shift: 0,
            lo: 0,
            hi: 0,
        }; MAX_RANGES],
    };

    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[FieldRange] {
        &self.r[..self.n as usize]
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Does `key` lie in every range? With `wc`, ORs in the field bits each
    /// range test examined (see [`FieldRange::decisive_len`]); the tests stop
    /// at the first range `key` is outside of, as the answer depends on no
    /// later one.
    #[inline(always)]
    fn contains<const W: usize>(&self, key: &[u64; W], wc: Option<&mut [u64; W]>) -> bool {
        match wc {
            None => self.as_slice().iter().all(|r| r.contains(key)),
            Some(wc) => {
                for r in self.as_slice() {
                    let v = r.value(key);
                    wc[r.word as usize] |= r.word_mask(r.decisive_len(v));
                    if !(r.lo <= v && v <= r.hi) {
                        return false;
                    }
                }
                true
            }
        }
    }
}

/// Checks `ranges` for a key of `W` words and folds them into `key` and
/// `mask`: a range that is a prefix block becomes mask bits, any other puts
/// the common prefix of `lo` and `hi` into the mask (so tables can hash on
/// it) and stays a range. The caller's mask bits on a range's field are
/// replaced.
pub(crate) fn fold_ranges<const W: usize>(
    key: &mut [u64; W],
    mask: &mut [u64; W],
    ranges: &[FieldRange],
) -> Result<Ranges, RangeError> {
    if ranges.len() > MAX_RANGES {
        return Err(RangeError::TooMany(ranges.len()));
    }
    let mut out = Ranges::NONE;
    for (i, r) in ranges.iter().enumerate() {
        if r.word as usize >= W || r.shift > 48 {
            return Err(RangeError::OutOfKey {
                word: r.word,
                shift: r.shift,
            });
        }
        if r.lo > r.hi {
            return Err(RangeError::Empty { lo: r.lo, hi: r.hi });
        }
        if ranges[..i]
            .iter()
            .any(|o| o.word == r.word && o.shift.abs_diff(r.shift) < 16)
        {
            return Err(RangeError::Overlap(r.word));
        }
    }
    for r in ranges {
        let w = r.word as usize;
        let field = r.word_mask(16);
        let len = r.prefix_len();
        mask[w] = (mask[w] & !field) | r.word_mask(len);
        key[w] = (key[w] & !field) | (u64::from(r.lo) << r.shift);
        if !r.is_prefix() {
            out.r[out.n as usize] = *r;
            out.n += 1;
        }
    }
    out.r[..out.n as usize].sort_unstable();
    Ok(out)
}

/// Most non-zero mask words a rule holds inline ([`Rule::key0`] and
/// [`Rule::rest`]); an IPv6
/// 5-tuple has 8.
const SPARSE: usize = 8;

/// [`Rule::n`] of a rule whose mask has more than [`SPARSE`] non-zero words
/// (or one beyond word 255): it is compared through the mask registry and
/// the full key instead.
const WIDE: u8 = u8::MAX;

/// A rule's masked key on its mask's non-zero words, inline: `(n, word
/// indices, key words)`. Unused entries are 0 with index 0 (and mask 0 in
/// [`MaskSet::dense`]). Entries are in [`inline_order`].
type Inline = (u8, [u8; SPARSE], [u64; SPARSE]);

fn inline_of<const W: usize>(words: &[MaskWord], key: &[u64; W]) -> Inline {
    let mut idx = [0u8; SPARSE];
    let mut keys = [0u64; SPARSE];
    if words.len() > SPARSE || words.iter().any(|w| w.index > u32::from(u8::MAX)) {
        return (WIDE, idx, keys);
    }
    for ((i, k), w) in idx.iter_mut().zip(keys.iter_mut()).zip(inline_order(words)) {
        *i = w.index as u8;
        *k = key[w.index as usize] & w.mask;
    }
    (words.len() as u8, idx, keys)
}

/// The order of a mask's words in the inline entries: the word with the
/// most mask bits first (the first such), then the others in index order.
/// The first entry is the rule's filter ([`Rule::key0`], in the rule's
/// first cache line): on a `FlowKey` 5-tuple it is the address word. The
/// bucket already makes a rule agree with the key on the table mask (hash
/// collisions aside), so the filter decides only on the word's bits beyond
/// it; with `relax_flowkey`, which shortens address prefixes, the rules of
/// a chain keep address bits beyond the table mask, and on the ClassBench
/// sets this order was measured faster (sitting E in
/// docs/results/classifier-classbench.md). The word with the most bits
/// beyond the table mask would be a finer choice, but the table changes
/// (splits, absorbs) and the order would have to follow it.
fn inline_order(words: &[MaskWord]) -> impl Iterator<Item = &MaskWord> {
    let first = words
        .iter()
        .enumerate()
        .max_by_key(|(i, w)| (w.mask.count_ones(), Reverse(*i)))
        .map_or(0, |(i, _)| i);
    words.get(first).into_iter().chain(
        words
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != first)
            .map(|(_, w)| w),
    )
}

/// The mask words of [`inline_of`]'s entries (0 beyond them).
fn dense_of(words: &[MaskWord]) -> [u64; SPARSE] {
    let mut out = [0u64; SPARSE];
    if words.len() <= SPARSE {
        for (o, w) in out.iter_mut().zip(inline_order(words)) {
            *o = w.mask;
        }
    }
    out
}

/// One rule, as the lookup and the index structures see it: 128 bytes,
/// aligned to a cache line, in a dense array of its own
/// ([`RuleSlab::rules`]). The full `W`-word key and the value (312 bytes
/// and more for a `FlowKey`) live apart ([`Cold`]), read only by inserts,
/// removals and the one rule a lookup returns.
///
/// Why: a probe's largest cost on ClassBench traces was the first touch of
/// each rule it compares (perf on acl1 1K: 11% of the lookup on the one
/// load that checked the slot, with 520-byte slots whose 909 rules did not
/// fit the L2 cache). 128-byte rules keep a 1K-rule set within L2, and
/// a compare reads the rule's first cache line (the second only when the
/// filter word [`Rule::key0`] agrees) and the (shared, hot) mask
/// words of [`MaskSet::dense`], nothing else.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Rule {
    priority: u32,
    /// Next *match group* in the same hash bucket (see [`Classifier`]'s
    /// bucket layout); `NIL` at the end of the chain and in non-heads.
    next: u32,
    /// Index of the rule's mask in the mask registry.
    mask: u32,
    /// Number of used entries of `idx` (and of `key0` then `rest`), or [`WIDE`].
    n: u8,
    /// Key word index of each inline entry: `key0`'s, then `rest`'s.
    idx: [u8; SPARSE],
    /// Range conditions beyond the mask; usually none.
    ranges: Ranges,
    /// Slab index of the table holding the rule.
    table: u32,
    /// Next rule with the same key and mask, lower priority. An intrusive
    /// chain rather than a vector: it keeps hash entries at 8 bytes and needs
    /// no allocation per key.
    dup: u32,
    /// The masked key on the first inline entry (the mask's widest word,
    /// [`inline_order`]), in the first cache line with everything else a
    /// compare needs first: a compare that fails on it reads one line.
    key0: u64,
    /// Insertion sequence number: orders equal-priority groups in a chain.
    /// A replacing rule inherits the sequence number of the rule it replaces.
    seq: u64,
    /// The masked key on the other inline entries ([`inline_order`]).
    rest: [u64; SPARSE - 1],
}

impl Rule {
    /// All inline key entries, as [`inline_of`] gives them.
    #[cfg(test)]
    fn keys(&self) -> [u64; SPARSE] {
        let mut k = [self.key0; SPARSE];
        k[1..].copy_from_slice(&self.rest);
        k
    }

    /// Splits [`inline_of`]'s keys into [`Rule::key0`] and [`Rule::rest`].
    fn split_keys(keys: [u64; SPARSE]) -> (u64, [u64; SPARSE - 1]) {
        let mut rest = [0; SPARSE - 1];
        rest.copy_from_slice(&keys[1..]);
        (keys[0], rest)
    }
}

// A lookup reads at most two cache lines per compared rule; a field added to
// `Rule` must not silently make it three.
const _: () = assert!(std::mem::size_of::<Rule>() == 128);
// Everything a compare reads before the filter word decides sits in the
// first cache line.
const _: () = assert!(std::mem::offset_of!(Rule, key0) + 8 <= 64);

/// What a lookup does not read of a rule.
#[derive(Clone)]
struct Cold<const W: usize, T> {
    /// Masked with the rule's own mask, so comparing against a packet key
    /// needs the mask on the packet side only.
    key: [u64; W],
    /// `None`: the slot is vacant.
    value: Option<T>,
    /// Bumped every time the slot is vacated, so old [`RuleId`]s go stale.
    generation: u32,
}

/// Does `key` match rule `idx` (`r`) on its mask (ranges aside)? Inline
/// rules compare the filter word [`Rule::key0`] first and return on a
/// mismatch, then the other `n - 1` entries without a branch per word;
/// wide ones go through the mask registry and the full key.
#[inline(always)]
fn rule_matches<const W: usize, T>(
    rules: &RuleSlab<W, T>,
    masks: &MaskSet<W>,
    idx: u32,
    r: &Rule,
    key: &[u64; W],
) -> bool {
    if r.n == WIDE {
        return agree(&masks.at(r.mask).words, key, rules.key(idx));
    }
    if W == 0 {
        // Unused entries point at word 0; a zero-width key has none.
        return true;
    }
    let m = &masks.dense[r.mask as usize];
    // The filter word first: most failing compares end here, on the rule's
    // first cache line.
    if (key[r.idx[0] as usize] & m[0]) != r.key0 {
        return false;
    }
    let n = usize::from(r.n).clamp(1, SPARSE);
    let mut acc = 0;
    for ((&i, m), v) in r.idx[1..n].iter().zip(&m[1..n]).zip(&r.rest) {
        acc |= (key[i as usize] & m) ^ v;
    }
    acc == 0
}

/// ORs rule `r`'s mask into `wc`.
#[inline(always)]
fn rule_mask_into<const W: usize>(masks: &MaskSet<W>, r: &Rule, wc: &mut [u64; W]) {
    if r.n == WIDE {
        for w in masks.at(r.mask).words.iter() {
            wc[w.index as usize] |= w.mask;
        }
        return;
    }
    if W == 0 {
        return;
    }
    for (&i, m) in r.idx.iter().zip(&masks.dense[r.mask as usize]) {
        wc[i as usize] |= m;
    }
}

/// Rule storage: rules never move, so indices can link them together and
/// [`RuleId`] can be a plain index + generation. Two parallel arrays: what
/// lookups read ([`Rule`]) and the rest ([`Cold`]).
#[derive(Clone)]
struct RuleSlab<const W: usize, T> {
    rules: Vec<Rule>,
    cold: Vec<Cold<W, T>>,
    free: Vec<u32>,
    len: usize,
}

impl<const W: usize, T> RuleSlab<W, T> {
    const fn new() -> Self {
        RuleSlab {
            rules: Vec::new(),
            cold: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Is slot `idx` occupied?
    #[inline]
    fn live(&self, idx: usize) -> bool {
        self.cold.get(idx).is_some_and(|c| c.value.is_some())
    }

    /// The slot index behind `id`, if `id` names a live rule.
    #[inline]
    fn index_of(&self, id: RuleId) -> Option<u32> {
        let c = self.cold.get(id.index() as usize)?;
        (c.generation == id.generation() && c.value.is_some()).then_some(id.index())
    }

    /// A rule the index structures point at; such a slot is always
    /// occupied (a vacant one keeps its last rule's fields, unlinked).
    #[inline(always)]
    fn at(&self, idx: u32) -> &Rule {
        // A vacant slot keeps its last rule's fields: an index that
        // outlived its rule would read them silently.
        debug_assert!(
            self.live(idx as usize),
            "classifier index points at a removed rule"
        );
        &self.rules[idx as usize]
    }

    #[inline]
    fn at_mut(&mut self, idx: u32) -> &mut Rule {
        debug_assert!(
            self.live(idx as usize),
            "classifier index points at a removed rule"
        );
        &mut self.rules[idx as usize]
    }

    #[inline]
    fn key(&self, idx: u32) -> &[u64; W] {
        &self.cold[idx as usize].key
    }

    #[inline]
    fn value(&self, idx: u32) -> &T {
        match &self.cold[idx as usize].value {
            Some(v) => v,
            None => unreachable!("classifier index points at a vacant slot"),
        }
    }

    #[inline]
    fn value_mut(&mut self, idx: u32) -> &mut T {
        match &mut self.cold[idx as usize].value {
            Some(v) => v,
            None => unreachable!("classifier index points at a vacant slot"),
        }
    }

    #[inline(always)]
    fn id(&self, idx: u32) -> RuleId {
        RuleId::new(idx, self.cold[idx as usize].generation)
    }

    fn alloc(&mut self, rule: Rule, key: [u64; W], value: T) -> u32 {
        self.len += 1;
        if let Some(idx) = self.free.pop() {
            self.rules[idx as usize] = rule;
            let c = &mut self.cold[idx as usize];
            c.key = key;
            c.value = Some(value);
            return idx;
        }
        let idx = u32::try_from(self.rules.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("classifier: more than 2^32-1 rule slots");
        self.rules.push(rule);
        self.cold.push(Cold {
            key,
            value: Some(value),
            generation: 0,
        });
        idx
    }

    /// Vacates a slot, returning its value. A slot whose generation would
    /// reach `u32::MAX` is retired for good instead of being recycled, which
    /// is what makes ids never-reused (`u32::MAX` itself marks
    /// [`RuleId::external`] handles).
    fn release(&mut self, idx: u32) -> T {
        let c = &mut self.cold[idx as usize];
        let value = c.value.take().expect("releasing a vacant slot");
        self.len -= 1;
        if let Some(g) = c.generation.checked_add(1).filter(|g| *g < u32::MAX) {
            c.generation = g;
            self.free.push(idx);
        }
        value
    }
}

/// One non-zero word of a mask.
#[derive(Clone, Copy, Debug)]
struct MaskWord {
    mask: u64,
    index: u32,
}

fn mask_words<const W: usize>(mask: &[u64; W]) -> Box<[MaskWord]> {
    mask.iter()
        .enumerate()
        .filter(|(_, &m)| m != 0)
        .map(|(i, &mask)| MaskWord {
            mask,
            index: i as u32,
        })
        .collect()
}

fn popcount<const W: usize>(mask: &[u64; W]) -> u32 {
    mask.iter().map(|m| m.count_ones()).sum()
}

/// `a | b`, word by word.
fn or_masks<const W: usize>(a: &[u64; W], b: &[u64; W]) -> [u64; W] {
    std::array::from_fn(|i| a[i] | b[i])
}

/// Is every bit of the sparse mask `inner` also set in `outer`?
#[inline]
fn words_subset<const W: usize>(inner: &[MaskWord], outer: &[u64; W]) -> bool {
    inner.iter().all(|w| w.mask & !outer[w.index as usize] == 0)
}

/// One distinct mask, shared by the rules that have it and by the table
/// that uses it as its table mask, if any.
#[derive(Clone)]
#[repr(C)]
struct MaskInfo<const W: usize> {
    /// Non-zero words of `mask`: what hashing and matching iterate over.
    /// First, so a lookup reads one cache line of the (large) entry.
    words: Box<[MaskWord]>,
    mask: [u64; W],
    bits: u32,
    /// Rules whose mask this is.
    n_rules: u32,
    /// The table whose table mask this is, or `NIL`.
    table: u32,
}

/// Interned masks: a rule stores a 4-byte mask index instead of the mask,
/// and "is there a table with table mask M?" is one hash probe.
#[derive(Clone)]
struct MaskSet<const W: usize> {
    slots: Vec<Option<MaskInfo<W>>>,
    /// Per mask index, the mask words of a rule's inline entries
    /// ([`dense_of`]): 64 bytes per mask, shared by all its rules, so the
    /// few a lookup compares stay in cache.
    dense: Vec<[u64; SPARSE]>,
    free: Vec<u32>,
    index: HashTable<u32>,
}

impl<const W: usize> MaskSet<W> {
    const fn new() -> Self {
        MaskSet {
            slots: Vec::new(),
            dense: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
        }
    }

    #[inline(always)]
    fn at(&self, i: u32) -> &MaskInfo<W> {
        match &self.slots[i as usize] {
            Some(m) => m,
            None => unreachable!("classifier index points at a released mask"),
        }
    }

    #[inline]
    fn at_mut(&mut self, i: u32) -> &mut MaskInfo<W> {
        match &mut self.slots[i as usize] {
            Some(m) => m,
            None => unreachable!("classifier index points at a released mask"),
        }
    }

    fn find(&self, seed: &RandomState, mask: &[u64; W]) -> Option<u32> {
        self.index
            .find(hash_mask(seed, mask), |&i| self.at(i).mask == *mask)
            .copied()
    }

    fn intern(&mut self, seed: &RandomState, mask: &[u64; W]) -> u32 {
        if let Some(i) = self.find(seed, mask) {
            return i;
        }
        let info = MaskInfo {
            mask: *mask,
            words: mask_words(mask),
            bits: popcount(mask),
            n_rules: 0,
            table: NIL,
        };
        let dense = dense_of(&info.words);
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(info);
                self.dense[i as usize] = dense;
                i
            }
            None => {
                self.slots.push(Some(info));
                self.dense.push(dense);
                u32::try_from(self.slots.len() - 1)
                    .ok()
                    .filter(|&i| i != NIL)
                    .expect("too many masks")
            }
        };
        let MaskSet { slots, index, .. } = self;
        let hasher = |&i: &u32| match &slots[i as usize] {
            Some(m) => hash_mask(seed, &m.mask),
            None => unreachable!(),
        };
        index.insert_unique(hasher(&idx), idx, hasher);
        idx
    }

    /// Forgets mask `i` if no rule and no table uses it any more.
    fn release_if_unused(&mut self, seed: &RandomState, i: u32) {
        let m = self.at(i);
        if m.n_rules != 0 || m.table != NIL {
            return;
        }
        let h = hash_mask(seed, &m.mask);
        match self.index.find_entry(h, |&j| j == i) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => unreachable!("mask missing from the mask index"),
        }
        self.slots[i as usize] = None;
        self.free.push(i);
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.dense.clear();
        self.free.clear();
        self.index.clear();
    }
}

/// One hash table: the rules whose mask contains its table mask `M_T`,
/// hashed by `key & M_T`.
// repr(C) keeps the fields a lookup reads (table, words, mask) together at
// the front, and the bookkeeping after them.
#[repr(C)]
#[derive(Clone)]
struct Subtable {
    /// Bucket heads by hash ([`Buckets`]).
    table: Buckets,
    /// Non-zero words of `M_T`, in index order: all hashing and comparing
    /// on the hot path goes through this short list.
    words: Box<[MaskWord]>,
    /// Registry index of `M_T`.
    mask: u32,
    max_priority: u32,
    /// Rules, counting same-match duplicates.
    n_rules: u32,
    /// Bits set in `M_T`: TupleMerge places a rule in the most specific
    /// table that can hold it.
    bits: u32,
    /// Creation sequence number: tie-break for equal `max_priority`.
    seq: u64,
    /// Rule count per priority, so `max_priority` can be recomputed in
    /// `O(log P)` when the top rule goes away (OVS rescans the subtable,
    /// which is quadratic when a big table is emptied top-down).
    priorities: BTreeMap<u32, u32>,
}

/// Most table mask words a [`Rank`] holds inline; a `FlowKey` 5-tuple table
/// has up to 5 (`dl_type`, the address word, both ports, `nw_proto`).
const RANK_WORDS: usize = 6;

/// An element of the lookup order: enough to decide on the early exit
/// without touching the table itself, and to hash the key for it.
///
/// Why the table mask's words are copied here: a lookup's first step on a
/// table was a chain of dependent loads (the order entry, then the
/// [`Subtable`], then its boxed word list, then the key words, then the
/// hash); at the start of a lookup nothing overlaps it, since the previous
/// lookup's last mispredicted branch ends it. With the words here the hash
/// needs the order entry and the key alone, and the `Subtable` (for the
/// bucket array) loads beside it. A table's mask never changes, so the
/// copy cannot go stale; a table with more words than [`RANK_WORDS`]
/// (`n == u8::MAX`) is hashed through [`Subtable::words`].
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Rank {
    max_priority: u32,
    subtable: u32,
    /// Used entries of `idx` and `mask`, or `u8::MAX` (see above).
    n: u8,
    /// Key word index of each table mask word, as in [`Subtable::words`].
    idx: [u8; RANK_WORDS],
    /// The table mask's non-zero words, in [`Subtable::words`]' order.
    mask: [u64; RANK_WORDS],
}

const _: () = assert!(std::mem::size_of::<Rank>() == 64);

impl Rank {
    fn new(max_priority: u32, subtable: u32, words: &[MaskWord]) -> Self {
        let mut r = Rank {
            max_priority,
            subtable,
            n: u8::MAX,
            idx: [0; RANK_WORDS],
            mask: [0; RANK_WORDS],
        };
        if words.len() <= RANK_WORDS && words.iter().all(|w| w.index <= u32::from(u8::MAX)) {
            r.n = words.len() as u8;
            for ((i, m), w) in r.idx.iter_mut().zip(r.mask.iter_mut()).zip(words) {
                *i = w.index as u8;
                *m = w.mask;
            }
        }
        r
    }

    /// [`hash_masked`] of `key` on the table's mask, from the inline copy
    /// when there is one.
    #[inline(always)]
    fn hash<const W: usize>(&self, seed: &RandomState, st: &Subtable, key: &[u64; W]) -> u32 {
        if self.n == u8::MAX {
            return hash_masked(seed, &st.words, key);
        }
        let n = usize::from(self.n).min(RANK_WORDS);
        hash_values(seed, n, |i| key[usize::from(self.idx[i])] & self.mask[i])
    }
}

/// How rules are assigned to tables.
#[derive(Clone, Copy)]
enum Mode<const W: usize> {
    /// Tuple space search: one table per distinct rule mask, `M_T` = mask.
    Tss,
    /// TupleMerge: `M_T` may be coarser than the masks of the rules in it.
    Merge {
        relax: fn(&[u64; W]) -> [u64; W],
        /// Most match groups per bucket.
        limit: u32,
    },
}

/// Hash of `key & mask` over the non-zero mask words only.
///
/// Words are fed to foldhash in pairs through `write_u128`, which is one
/// folded multiply per pair; `write_u64` per word goes through foldhash's
/// variable-length sponge, whose shifts made a 9-subtable miss take 100 ns
/// instead of 65 ns.
#[inline(always)]
fn hash_masked<const W: usize>(seed: &RandomState, words: &[MaskWord], key: &[u64; W]) -> u32 {
    hash_values(seed, words.len(), |i| {
        let w = &words[i];
        key[w.index as usize] & w.mask
    })
}

/// The hash of [`hash_masked`] over the `n` values `word(0..n)`: the one
/// definition both the table's word list and a [`Rank`]'s inline copy go
/// through, so they agree bit for bit.
#[inline(always)]
fn hash_values(seed: &RandomState, n: usize, word: impl Fn(usize) -> u64) -> u32 {
    let mut h = seed.build_hasher();
    let mut i = 0;
    while i + 1 < n {
        h.write_u128(u128::from(word(i)) | (u128::from(word(i + 1)) << 64));
        i += 2;
    }
    if i < n {
        h.write_u64(word(i));
    }
    let x = h.finish();
    let h = (x ^ (x >> 32)) as u32;
    #[cfg(test)]
    if TINY_BUCKET_HASH.with(std::cell::Cell::get) {
        return h & 7;
    }
    h
}

#[cfg(test)]
thread_local! {
    /// Tests only: bucket hashes cut to 3 bits on this thread, so masked
    /// keys share buckets all the time and the paths a real 32-bit
    /// collision takes (merged chains, splits of them) are exercised.
    pub(crate) static TINY_BUCKET_HASH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Do `a` and `b` agree on the bits of the sparse mask `words`? With `b` a
/// stored rule key and `words` its mask, this is "does `a` match the rule";
/// with `words` a table mask, "are `a` and `b` in the same bucket".
#[inline(always)]
fn agree<const W: usize>(words: &[MaskWord], a: &[u64; W], b: &[u64; W]) -> bool {
    words
        .iter()
        .all(|w| (a[w.index as usize] ^ b[w.index as usize]) & w.mask == 0)
}

fn hash_mask<const W: usize>(seed: &RandomState, mask: &[u64; W]) -> u64 {
    let mut h = seed.build_hasher();
    for &m in mask {
        h.write_u64(m);
    }
    h.finish()
}

/// Head of the bucket chain for `key` in `st`.
///
/// A bucket is identified by the 32-bit hash of the masked key alone: the
/// chain compare checks each rule's whole mask, which contains `M_T`, so a
/// separate check that the head agrees with `key` on `M_T` would only
/// repeat part of it (and read the head's mask from the registry). Keys
/// whose masked values share a 32-bit hash share a bucket: not rare in a
/// big table (about one such pair is expected among 100,000 buckets), but
/// it costs only a longer chain (and possibly a split, and megaflows as
/// wide as the merged chain's compares make them), never a wrong answer;
/// with a random seed per classifier it cannot be aimed at. The property
/// tests run with 3-bit hashes too (`TINY_BUCKET_HASH`).
#[inline(always)]
fn bucket_head<const W: usize>(seed: &RandomState, st: &Subtable, key: &[u64; W]) -> Option<u32> {
    let h = hash_masked(seed, &st.words, key);
    st.table.find(h)
}

/// Does group head `a` come before group head `b` in a bucket chain?
#[inline]
fn chain_before(a: &Rule, b: &Rule) -> bool {
    (a.priority, Reverse(a.seq)) > (b.priority, Reverse(b.seq))
}

/// Links match group `idx` (a group head; its `next` is overwritten) into
/// its bucket of `st`, at its place in chain order. Returns the number of
/// groups in the bucket afterwards.
fn link_head<const W: usize, T>(
    seed: &RandomState,
    st: &mut Subtable,
    rules: &mut RuleSlab<W, T>,
    idx: u32,
) -> usize {
    let Subtable { table, words, .. } = st;
    let h = hash_masked(seed, words, rules.key(idx));
    let Some(head) = table.find_mut(h) else {
        rules.at_mut(idx).next = NIL;
        table.insert(h, idx);
        return 1;
    };
    let mut prev = NIL;
    let mut cur = *head;
    let mut n = 1;
    while cur != NIL && !chain_before(rules.at(idx), rules.at(cur)) {
        prev = cur;
        cur = rules.at(cur).next;
        n += 1;
    }
    rules.at_mut(idx).next = cur;
    if prev == NIL {
        *head = idx;
    } else {
        rules.at_mut(prev).next = idx;
    }
    while cur != NIL {
        n += 1;
        cur = rules.at(cur).next;
    }
    n
}

/// Unlinks match group `idx` (a group head) from its bucket chain in `st`,
/// dropping the bucket if it empties. The group's duplicates stay attached.
fn unlink_head<const W: usize, T>(
    seed: &RandomState,
    st: &mut Subtable,
    rules: &mut RuleSlab<W, T>,
    idx: u32,
) {
    let Subtable { table, words, .. } = st;
    let h = hash_masked(seed, words, rules.key(idx));
    let Some(&mut head) = table.find_mut(h) else {
        unreachable!("rule missing from its table")
    };
    let next = rules.at(idx).next;
    if head == idx {
        if next == NIL {
            table.remove(h);
        } else if let Some(head) = table.find_mut(h) {
            *head = next;
        }
    } else {
        let mut prev = head;
        while rules.at(prev).next != idx {
            prev = rules.at(prev).next;
            debug_assert_ne!(prev, NIL, "rule missing from its chain");
        }
        rules.at_mut(prev).next = next;
    }
    rules.at_mut(idx).next = NIL;
}

/// A packet classifier using tuple space search, or TupleMerge when built
/// with [`with_relax`](Self::with_relax). See the crate docs.
#[derive(Clone)]
pub struct Classifier<const W: usize, T> {
    /// Live tables sorted by `max_priority` descending, then creation
    /// order: the lookup walks this contiguous 8-byte-per-entry vector.
    order: Vec<Rank>,
    /// Table slab; rules refer to their table by index.
    subtables: Vec<Option<Subtable>>,
    rules: RuleSlab<W, T>,
    masks: MaskSet<W>,
    /// Per-classifier random hash seed.
    seed: RandomState,
    free_subtables: Vec<u32>,
    next_seq: u64,
    next_rule_seq: u64,
    mode: Mode<W>,
}

impl<const W: usize, T> Default for Classifier<W, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize, T: fmt::Debug> fmt::Debug for Classifier<W, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Classifier");
        if let Some(limit) = self.collision_limit() {
            d.field("collision_limit", &limit);
        }
        d.field("n_subtables", &self.n_subtables())
            .field("rules", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

impl<const W: usize, T> Classifier<W, T> {
    /// A tuple-space-search classifier: one hash table per distinct mask.
    pub fn new() -> Self {
        Self::with_mode(Mode::Tss)
    }

    /// A TupleMerge classifier (see the crate docs).
    ///
    /// When a rule fits no existing table, a table is created for it with
    /// table mask `relax(mask) & mask`: `relax` should return a coarser mask
    /// (a subset of its argument; bits outside it are ignored) that many
    /// rules share, such as the mask with prefixes shortened and ports
    /// wildcarded. The identity gives TupleMerge without relaxation, and
    /// `|_| [0; W]` a single catch-all table split only by collisions.
    ///
    /// The collision limit is [`DEFAULT_COLLISION_LIMIT`]; see
    /// [`with_collision_limit`](Self::with_collision_limit).
    pub fn with_relax(relax: fn(&[u64; W]) -> [u64; W]) -> Self {
        Self::with_mode(Mode::Merge {
            relax,
            limit: DEFAULT_COLLISION_LIMIT as u32,
        })
    }

    /// Sets the collision limit of a TupleMerge classifier: the most
    /// distinct matches (`key & mask`, `mask`) a hash bucket may hold, i.e.
    /// the most rules one lookup compares per table. An insert that would
    /// exceed it splits the bucket into a more specific table.
    ///
    /// # Panics
    ///
    /// If `limit` is 0, if `self` is not a TupleMerge classifier, or if it
    /// already holds rules.
    pub fn with_collision_limit(mut self, limit: usize) -> Self {
        assert!(limit >= 1, "the collision limit must be at least 1");
        assert!(
            self.is_empty(),
            "set the collision limit before inserting rules"
        );
        match &mut self.mode {
            Mode::Merge { limit: l, .. } => *l = u32::try_from(limit).unwrap_or(u32::MAX),
            Mode::Tss => {
                panic!("with_collision_limit applies to TupleMerge classifiers (with_relax)")
            }
        }
        self
    }

    /// The collision limit in TupleMerge mode; `None` for tuple space
    /// search.
    pub fn collision_limit(&self) -> Option<usize> {
        match self.mode {
            Mode::Tss => None,
            Mode::Merge { limit, .. } => Some(limit as usize),
        }
    }

    fn with_mode(mode: Mode<W>) -> Self {
        Classifier {
            order: Vec::new(),
            subtables: Vec::new(),
            rules: RuleSlab::new(),
            masks: MaskSet::new(),
            seed: RandomState::default(),
            free_subtables: Vec::new(),
            next_seq: 0,
            next_rule_seq: 0,
            mode,
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

    /// Number of hash tables, i.e. the worst-case number of hash probes per
    /// lookup. With tuple space search, the number of distinct masks.
    #[inline]
    pub fn n_subtables(&self) -> usize {
        self.order.len()
    }

    #[inline(always)]
    fn subtable(&self, idx: u32) -> &Subtable {
        match &self.subtables[idx as usize] {
            Some(st) => st,
            None => unreachable!("classifier index points at a dropped subtable"),
        }
    }

    #[inline]
    fn subtable_mut(&mut self, idx: u32) -> &mut Subtable {
        match &mut self.subtables[idx as usize] {
            Some(st) => st,
            None => unreachable!("classifier index points at a dropped subtable"),
        }
    }

    /// The table whose table mask is `mask`, created empty (not yet in
    /// `order`, since it has no priority yet) if needed.
    fn subtable_for(&mut self, mask: &[u64; W]) -> u32 {
        let mi = self.masks.intern(&self.seed, mask);
        let info = self.masks.at(mi);
        if info.table != NIL {
            return info.table;
        }
        let st = Subtable {
            table: Buckets::new(),
            words: info.words.clone(),
            mask: mi,
            max_priority: 0,
            n_rules: 0,
            bits: info.bits,
            seq: self.next_seq,
            priorities: BTreeMap::new(),
        };
        self.next_seq += 1;
        let idx = match self.free_subtables.pop() {
            Some(i) => {
                self.subtables[i as usize] = Some(st);
                i
            }
            None => {
                self.subtables.push(Some(st));
                u32::try_from(self.subtables.len() - 1)
                    .ok()
                    .filter(|&i| i != NIL)
                    .expect("too many subtables")
            }
        };
        self.masks.at_mut(mi).table = idx;
        idx
    }

    /// Puts table `idx` at its place in `order` after its `max_priority`
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
        let rank = Rank::new(p, idx, &st.words);
        self.order.insert(pos, rank);
    }

    fn drop_subtable(&mut self, idx: u32) {
        let pos = self.order.iter().position(|r| r.subtable == idx);
        self.order.remove(pos.expect("subtable missing from order"));
        let st = self.subtables[idx as usize]
            .take()
            .expect("dropping a dropped subtable");
        self.masks.at_mut(st.mask).table = NIL;
        self.masks.release_if_unused(&self.seed, st.mask);
        self.free_subtables.push(idx);
    }

    /// Accounts for one more rule of `priority` in table `t`.
    fn count_in(&mut self, t: u32, priority: u32) {
        let st = self.subtable_mut(t);
        *st.priorities.entry(priority).or_insert(0) += 1;
        st.n_rules += 1;
        if st.n_rules == 1 {
            st.max_priority = priority;
            self.reposition(t, false);
        } else if priority > st.max_priority {
            st.max_priority = priority;
            self.reposition(t, true);
        }
    }

    /// Accounts for one rule of `priority` fewer in table `t`, dropping the
    /// table when it empties.
    fn count_out(&mut self, t: u32, priority: u32) {
        let st = self.subtable_mut(t);
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
            self.drop_subtable(t);
        } else if priority == st.max_priority {
            let new_max = *st.priorities.last_key_value().expect("non-empty").0;
            if new_max != priority {
                st.max_priority = new_max;
                self.reposition(t, true);
            }
        }
    }

    /// The match group `(masked, mask_index)` in bucket chain of `st`.
    fn group_in(
        &self,
        st: &Subtable,
        masked: &[u64; W],
        mask: u32,
        ranges: &Ranges,
    ) -> Option<u32> {
        let mut cur = bucket_head(&self.seed, st, masked)?;
        while cur != NIL {
            let r = self.rules.at(cur);
            if r.mask == mask && r.ranges == *ranges && self.rules.key(cur) == masked {
                return Some(cur);
            }
            cur = r.next;
        }
        None
    }

    /// Head of the match group of the rules with exactly this (masked) key
    /// and mask. All such rules are in one group, in one table.
    fn find_group(&self, masked: &[u64; W], mask: &[u64; W], ranges: &Ranges) -> Option<u32> {
        let mi = self.masks.find(&self.seed, mask)?;
        let info = self.masks.at(mi);
        if info.n_rules == 0 {
            return None;
        }
        match self.mode {
            // Rules with mask M live in the table with M_T = M.
            Mode::Tss => self.group_in(self.subtable(info.table), masked, mi, ranges),
            // Rules with mask M live in some table with M_T ⊆ M.
            Mode::Merge { .. } => self.order.iter().find_map(|rank| {
                let st = self.subtable(rank.subtable);
                if words_subset(&st.words, mask) {
                    self.group_in(st, masked, mi, ranges)
                } else {
                    None
                }
            }),
        }
    }

    /// Head of the match group that rule `idx` belongs to.
    fn group_head_of(&self, idx: u32) -> u32 {
        let r = self.rules.at(idx);
        match self.group_in(
            self.subtable(r.table),
            self.rules.key(idx),
            r.mask,
            &r.ranges,
        ) {
            Some(h) => h,
            None => unreachable!("rule missing from its table"),
        }
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
        self.insert_folded(&apply_mask(key, mask), mask, Ranges::NONE, priority, value)
    }

    /// Adds a rule matching `key & mask` whose fields `ranges` lie in their
    /// ranges (at most [`MAX_RANGES`], on disjoint bits). The mask bits of a
    /// range's field are replaced: a range that is a prefix block (an exact
    /// value, `0..=65535`, `1024..=2047`) becomes mask bits like any masked
    /// field; another range is kept whole and the rule is hashed on the
    /// common prefix of its bounds, so one entry stands for what would
    /// otherwise be up to 30 prefix masks per range. As with
    /// [`insert`](Self::insert), a rule with the same match (key, mask and
    /// ranges) and priority is replaced.
    ///
    /// # Errors
    ///
    /// [`RangeError`] for too many, empty, overlapping or out-of-key ranges;
    /// the classifier is then unchanged.
    pub fn insert_ranges(
        &mut self,
        key: &[u64; W],
        mask: &[u64; W],
        ranges: &[FieldRange],
        priority: u32,
        value: T,
    ) -> Result<(RuleId, Option<T>), RangeError> {
        let (mut k, mut m) = (*key, *mask);
        let rs = fold_ranges(&mut k, &mut m, ranges)?;
        Ok(self.insert_folded(&apply_mask(&k, &m), &m, rs, priority, value))
    }

    /// The range conditions of a rule beyond its mask (empty for most
    /// rules; see [`insert_ranges`](Self::insert_ranges)).
    pub fn ranges(&self, id: RuleId) -> Option<&[FieldRange]> {
        let idx = self.rules.index_of(id)?;
        Some(self.rules.at(idx).ranges.as_slice())
    }

    fn insert_folded(
        &mut self,
        masked: &[u64; W],
        mask: &[u64; W],
        ranges: Ranges,
        priority: u32,
        value: T,
    ) -> (RuleId, Option<T>) {
        let masked = *masked;
        if let Some(head) = self.find_group(&masked, mask, &ranges) {
            return self.insert_into_group(head, priority, value);
        }
        let mi = self.masks.intern(&self.seed, mask);
        self.masks.at_mut(mi).n_rules += 1;
        let t = match self.mode {
            Mode::Tss => self.subtable_for(mask),
            Mode::Merge { relax, limit } => self.place(mask, relax, limit as usize),
        };
        let seq = self.next_rule_seq;
        self.next_rule_seq += 1;
        let (n, widx, keys) = inline_of(&self.masks.at(mi).words, &masked);
        let (key0, rest) = Rule::split_keys(keys);
        let idx = self.rules.alloc(
            Rule {
                n,
                idx: widx,
                key0,
                rest,
                priority,
                table: t,
                mask: mi,
                next: NIL,
                dup: NIL,
                seq,
                ranges,
            },
            masked,
            value,
        );
        let Classifier {
            subtables,
            rules,
            seed,
            ..
        } = self;
        let st = match &mut subtables[t as usize] {
            Some(st) => st,
            None => unreachable!(),
        };
        let n = link_head(seed, st, rules, idx);
        self.count_in(t, priority);
        let id = self.rules.id(idx);
        if let Mode::Merge { relax, limit } = self.mode {
            if n > limit as usize {
                self.split(t, masked, relax, limit as usize);
            }
        }
        (id, None)
    }

    /// Adds a rule to the existing match group `head` (same key and mask).
    fn insert_into_group(&mut self, head: u32, priority: u32, value: T) -> (RuleId, Option<T>) {
        let mut prev = NIL;
        let mut cur = head;
        while cur != NIL && self.rules.at(cur).priority > priority {
            prev = cur;
            cur = self.rules.at(cur).dup;
        }
        let h = *self.rules.at(head);
        let key = *self.rules.key(head);
        let (t, mi) = (h.table, h.mask);
        let Classifier {
            subtables,
            rules,
            seed,
            masks,
            next_rule_seq,
            ..
        } = self;
        let st = match &mut subtables[t as usize] {
            Some(st) => st,
            None => unreachable!(),
        };
        if cur != NIL && rules.at(cur).priority == priority {
            // Replacement: the new rule takes the old one's place (and
            // sequence number), under a fresh id.
            let old = rules.at(cur);
            let (seq, dup) = (old.seq, old.dup);
            if prev == NIL {
                unlink_head(seed, st, rules, cur);
            }
            let new_idx = rules.alloc(
                Rule {
                    priority,
                    next: NIL,
                    dup,
                    seq,
                    ..h
                },
                key,
                value,
            );
            if prev == NIL {
                link_head(seed, st, rules, new_idx);
            } else {
                rules.at_mut(prev).dup = new_idx;
            }
            let old = rules.release(cur);
            return (rules.id(new_idx), Some(old));
        }
        let seq = *next_rule_seq;
        *next_rule_seq += 1;
        let new_idx = rules.alloc(
            Rule {
                priority,
                next: NIL,
                dup: cur,
                seq,
                ..h
            },
            key,
            value,
        );
        if prev == NIL {
            // The new rule heads the group: its priority moves the group
            // within the chain.
            unlink_head(seed, st, rules, head);
            link_head(seed, st, rules, new_idx);
        } else {
            rules.at_mut(prev).dup = new_idx;
        }
        masks.at_mut(mi).n_rules += 1;
        self.count_in(t, priority);
        (self.rules.id(new_idx), None)
    }

    /// TupleMerge placement of a new match group with this mask: the most
    /// specific existing table that can hold it (oldest on a tie), else a
    /// new table with the relaxed mask, which first takes in the more
    /// specific tables it can ([`absorb`](Self::absorb)).
    fn place(&mut self, mask: &[u64; W], relax: fn(&[u64; W]) -> [u64; W], limit: usize) -> u32 {
        let mut best: Option<(u32, Reverse<u64>, u32)> = None;
        for rank in &self.order {
            let st = self.subtable(rank.subtable);
            if words_subset(&st.words, mask) {
                let cand = (st.bits, Reverse(st.seq), rank.subtable);
                if best.is_none_or(|b| cand > b) {
                    best = Some(cand);
                }
            }
        }
        match best {
            Some((_, _, t)) => t,
            None => {
                let t = self.subtable_for(&apply_mask(&relax(mask), mask));
                self.absorb(t, limit);
                t
            }
        }
    }

    /// Merges into the new, still empty table `t` every existing table
    /// whose table mask strictly contains `t`'s, when all of that table's
    /// match groups fit in `t`'s buckets at most `limit / 4` to a bucket
    /// (at least 1).
    ///
    /// Why: a lookup probes every table whose top priority can still beat
    /// the best match so far, so the probes for a packet are the tables
    /// holding some rule above its answer. Rules arrive (from ClassBench
    /// files, and mostly from controllers) from the highest priority down:
    /// specific tables made early keep high top priorities even after a
    /// coarser table that could hold their rules appears, and every packet
    /// whose answer is a lower rule probes them all (fw2 10K: 19 tables,
    /// 9.6 probes, where the TupleMerge reference, which inserts the rules
    /// in random order, has 16 tables and 4.2 probes). Merging two tables
    /// never adds a probe for any packet; it costs chain length, hence a
    /// fraction of the limit: a full one measured no fewer probes and slower
    /// chains; a half made chains of up to 16 groups that a lookup walks
    /// (acl1 1K: 18 rules compared per lookup; 10 at a quarter, with fewer
    /// probes too; measured on all 24 ClassBench files of
    /// docs/results/classifier-classbench.md, sitting D).
    /// Runs only when a table is created, and each rule moves only to a
    /// strictly coarser table mask.
    fn absorb(&mut self, t: u32, limit: usize) {
        let lim = (limit / 4).max(1);
        let mt = self.masks.at(self.subtable(t).mask).mask;
        let words = self.subtable(t).words.clone();
        let cands: Vec<u32> = self
            .order
            .iter()
            .map(|r| r.subtable)
            .filter(|&s| {
                let m = &self.masks.at(self.subtable(s).mask).mask;
                *m != mt && mask_is_subset(&mt, m)
            })
            .collect();
        let mut counts: hashbrown::HashMap<u32, usize> = hashbrown::HashMap::new();
        let mut heads = Vec::new();
        for s in cands {
            heads.clear();
            for e in self.subtable(s).table.iter() {
                let mut cur = e.head;
                while cur != NIL {
                    heads.push(cur);
                    cur = self.rules.at(cur).next;
                }
            }
            // Buckets counted by their 32-bit hash, which is what
            // identifies a bucket.
            let mut trial = counts.clone();
            let fits = heads.iter().all(|&h| {
                let c = trial
                    .entry(hash_masked(&self.seed, &words, self.rules.key(h)))
                    .or_insert(0);
                *c += 1;
                *c <= lim
            });
            if !fits {
                continue;
            }
            counts = trial;
            for &h in &heads {
                self.move_group(h, s, t);
            }
        }
    }

    /// Restores the collision limit after an insert made the bucket of `key`
    /// in table `t` overflow: moves match groups of an overflowing bucket to
    /// a more specific table until it fits, and repeats on any bucket that
    /// overflows in turn. Terminates because each move goes to a table with
    /// a strictly larger table mask.
    fn split(&mut self, t: u32, key: [u64; W], relax: fn(&[u64; W]) -> [u64; W], limit: usize) {
        let mut work = vec![(t, key)];
        let mut heads = Vec::new();
        while let Some((t, key)) = work.pop() {
            while self.overflowing_chain(t, &key, limit, &mut heads) {
                // None: every group has mask M_T, i.e. they differ only in
                // their ranges or their masked keys share a 32-bit hash; no
                // more specific table can tell them apart.
                let Some(target_mask) = self.split_mask(t, &heads, relax, limit) else {
                    break;
                };
                let target = self.subtable_for(&target_mask);
                for &h in &heads {
                    let m = &self.masks.at(self.rules.at(h).mask).mask;
                    if mask_is_subset(&target_mask, m) && self.move_group(h, t, target) > limit {
                        work.push((target, *self.rules.key(h)));
                    }
                }
            }
        }
    }

    /// Collects into `heads` the chain of `key`'s bucket in table `t`, and
    /// tells whether it has more than `limit` groups. `t` may have been
    /// dropped (and its slot reused) since it was queued for a split: then
    /// there is nothing to do, or a legitimate overflow to fix anyway.
    fn overflowing_chain(
        &self,
        t: u32,
        key: &[u64; W],
        limit: usize,
        heads: &mut Vec<u32>,
    ) -> bool {
        heads.clear();
        let Some(Some(st)) = self.subtables.get(t as usize) else {
            return false;
        };
        let Some(mut cur) = bucket_head(&self.seed, st, key) else {
            return false;
        };
        while cur != NIL {
            heads.push(cur);
            cur = self.rules.at(cur).next;
        }
        heads.len() > limit
    }

    /// Chooses the table mask `M'` to split an overflowing bucket of table
    /// `t` (chain `heads`) with: a strict superset of `M_T` contained in at
    /// least one group's mask, so at least one group moves.
    ///
    /// Candidates: the intersection of all the groups' masks, and for each
    /// group's mask `m`, `m` itself, its relaxation (plus `M_T`) and its
    /// intersection with the newest group's mask. Preferred: a `M'` under
    /// which the moved groups fit the limit, then the one moving the most
    /// groups, then the most general.
    fn split_mask(
        &self,
        t: u32,
        heads: &[u32],
        relax: fn(&[u64; W]) -> [u64; W],
        limit: usize,
    ) -> Option<[u64; W]> {
        let mt = self.masks.at(self.subtable(t).mask).mask;
        let masks: Vec<&[u64; W]> = heads
            .iter()
            .map(|&h| &self.masks.at(self.rules.at(h).mask).mask)
            .collect();
        let newest = heads
            .iter()
            .enumerate()
            .max_by_key(|(_, &h)| self.rules.at(h).seq)
            .map_or(0, |(i, _)| i);
        let mut cands: Vec<[u64; W]> = Vec::with_capacity(3 * masks.len() + 1);
        cands.push(std::array::from_fn(|w| {
            masks.iter().fold(!0u64, |acc, m| acc & m[w])
        }));
        for m in &masks {
            cands.push(**m);
            cands.push(or_masks(&apply_mask(&relax(m), m), &mt));
            cands.push(apply_mask(m, masks[newest]));
        }
        // M_T plus one maximal run of the bits all the groups share beyond
        // it (per word): adds one field, or the rest of a prefix, at a time,
        // so that buckets of different masks split the same way and share
        // the resulting tables.
        let inter = cands[0];
        for w in 0..W {
            let mut d = inter[w] & !mt[w];
            while d != 0 {
                let lo = d.trailing_zeros();
                let len = (d >> lo).trailing_ones();
                let run = if len == 64 {
                    !0
                } else {
                    ((1u64 << len) - 1) << lo
                };
                d &= !run;
                let mut c = mt;
                c[w] |= run;
                cands.push(c);
            }
        }
        // Existing tables that could take some of the groups: preferred on
        // a tie, since they add no probe.
        let mut existing: Vec<[u64; W]> = Vec::new();
        for rank in &self.order {
            let e = &self.masks.at(self.subtable(rank.subtable).mask).mask;
            if e != &mt && mask_is_subset(&mt, e) && masks.iter().any(|m| mask_is_subset(e, m)) {
                cands.push(*e);
                existing.push(*e);
            }
        }
        cands.retain(|c| *c != mt);
        cands.sort_unstable();
        cands.dedup();
        // (moved groups fit the limit, groups moved (plus one for an
        // existing table), generality)
        type Score = (bool, usize, Reverse<u32>);
        let mut best: Option<(Score, [u64; W])> = None;
        let mut movers = Vec::with_capacity(heads.len());
        for c in cands {
            movers.clear();
            movers.extend(
                heads
                    .iter()
                    .zip(&masks)
                    .filter(|(_, m)| mask_is_subset(&c, m))
                    .map(|(&h, _)| self.rules.key(h)),
            );
            let fullest = movers
                .iter()
                .map(|a| movers.iter().filter(|b| masked_eq(a, b, &c)).count())
                .max()
                .unwrap_or(0);
            let bonus = usize::from(existing.contains(&c));
            let score = (
                fullest <= limit,
                movers.len() + bonus,
                Reverse(popcount(&c)),
            );
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, c));
            }
        }
        best.map(|(_, c)| c)
    }

    /// Moves match group `head` (with its duplicates) from table `from` to
    /// table `to`; returns the number of groups in its new bucket.
    fn move_group(&mut self, head: u32, from: u32, to: u32) -> usize {
        let n = {
            let Classifier {
                subtables,
                rules,
                seed,
                ..
            } = self;
            let Ok([Some(src), Some(dst)]) =
                subtables.get_disjoint_mut([from as usize, to as usize])
            else {
                unreachable!("split source and target are distinct live tables")
            };
            unlink_head(seed, src, rules, head);
            link_head(seed, dst, rules, head)
        };
        let mut cur = head;
        while cur != NIL {
            let r = self.rules.at_mut(cur);
            r.table = to;
            let (p, next) = (r.priority, r.dup);
            self.count_in(to, p);
            self.count_out(from, p);
            cur = next;
        }
        n
    }

    /// The rule with exactly this match (`key & mask`, `mask`) and priority.
    pub fn find_exact(&self, key: &[u64; W], mask: &[u64; W], priority: u32) -> Option<RuleId> {
        let masked = apply_mask(key, mask);
        let mut cur = self.find_group(&masked, mask, &Ranges::NONE)?;
        while cur != NIL {
            let r = self.rules.at(cur);
            if r.priority == priority {
                return Some(self.rules.id(cur));
            }
            if r.priority < priority {
                break;
            }
            cur = r.dup;
        }
        None
    }

    /// Removes a rule. Returns `None` if `id` is stale.
    pub fn remove(&mut self, id: RuleId) -> Option<T> {
        let idx = self.rules.index_of(id)?;
        Some(self.remove_at(idx))
    }

    fn remove_at(&mut self, idx: u32) -> T {
        let head = self.group_head_of(idx);
        let r = self.rules.at(idx);
        let (t, priority, mi, dup) = (r.table, r.priority, r.mask, r.dup);
        let Classifier {
            subtables,
            rules,
            seed,
            masks,
            ..
        } = self;
        if head == idx {
            let st = match &mut subtables[t as usize] {
                Some(st) => st,
                None => unreachable!(),
            };
            unlink_head(seed, st, rules, idx);
            if dup != NIL {
                // The next duplicate heads the group now, at its own place.
                link_head(seed, st, rules, dup);
            }
        } else {
            let mut prev = head;
            while rules.at(prev).dup != idx {
                prev = rules.at(prev).dup;
                debug_assert_ne!(prev, NIL, "rule missing from its group");
            }
            rules.at_mut(prev).dup = dup;
        }
        let value = rules.release(idx);
        masks.at_mut(mi).n_rules -= 1;
        masks.release_if_unused(seed, mi);
        self.count_out(t, priority);
        value
    }

    #[inline]
    pub fn get(&self, id: RuleId) -> Option<&T> {
        let idx = self.rules.index_of(id)?;
        Some(self.rules.value(idx))
    }

    #[inline]
    pub fn get_mut(&mut self, id: RuleId) -> Option<&mut T> {
        let idx = self.rules.index_of(id)?;
        Some(self.rules.value_mut(idx))
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
            key: self.rules.key(idx),
            mask: &self.masks.at(r.mask).mask,
            priority: r.priority,
            value: self.rules.value(idx),
        }
    }

    /// The highest-priority rule matching `key`.
    #[inline]
    pub fn lookup(&self, key: &[u64; W]) -> Option<(RuleId, &T)> {
        self.lookup_impl(key, None, None)
    }

    /// Like [`lookup`](Self::lookup), and also returns how many tables the
    /// lookup probed (the early exit skips the others). For benchmarks.
    #[doc(hidden)]
    pub fn lookup_probes(&self, key: &[u64; W]) -> (Option<(RuleId, &T)>, usize) {
        let mut n = 0;
        let r = self.lookup_impl(key, None, Some((&mut n, &mut 0)));
        (r, n)
    }

    /// Tables probed and rules compared (bucket chain entries examined) by
    /// a lookup of `key`. For benchmarks.
    #[doc(hidden)]
    pub fn lookup_cost(&self, key: &[u64; W]) -> (usize, usize) {
        let (mut n, mut c) = (0, 0);
        self.lookup_impl(key, None, Some((&mut n, &mut c)));
        (n, c)
    }

    /// Approximate heap and inline bytes used by the classifier: rule slab,
    /// tables (hash entries, sparse masks, priority counts), lookup order and
    /// mask registry. Capacities, not lengths; allocator overhead not
    /// counted. For benchmarks.
    #[doc(hidden)]
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let slab = self.rules.rules.capacity() * size_of::<Rule>()
            + self.rules.cold.capacity() * size_of::<Cold<W, T>>()
            + self.rules.free.capacity() * size_of::<u32>();
        let tables: usize = self
            .subtables
            .iter()
            .flatten()
            .map(|st| {
                st.table.capacity() * size_of::<Entry>()
                    + st.words.len() * size_of::<MaskWord>()
                    // A BTreeMap<u32, u32> entry, node overhead included.
                    + st.priorities.len() * 16
            })
            .sum::<usize>()
            + self.subtables.capacity() * size_of::<Option<Subtable>>()
            + self.order.capacity() * size_of::<Rank>();
        let masks: usize = self
            .masks
            .slots
            .iter()
            .flatten()
            .map(|m| m.words.len() * size_of::<MaskWord>())
            .sum::<usize>()
            + self.masks.slots.capacity() * size_of::<Option<MaskInfo<W>>>()
            + self.masks.dense.capacity() * size_of::<[u64; SPARSE]>()
            + self.masks.index.capacity() * (size_of::<u32>() + 1);
        size_of::<Self>() + slab + tables + masks
    }

    /// Like [`lookup`](Self::lookup), and ORs into `wc` the bits the answer
    /// depends on: the table mask of every table examined and, in TupleMerge
    /// mode, the mask of every rule compared in a bucket chain. The caller
    /// normally starts from an all-zero `wc` (or the bits it already depends
    /// on); afterwards every key equal to `key` on the bits of `wc` gets the
    /// same answer.
    #[inline]
    pub fn lookup_wc(&self, key: &[u64; W], wc: &mut [u64; W]) -> Option<(RuleId, &T)> {
        self.lookup_impl(key, Some(wc), None)
    }

    /// A lookup's first step on table `rank`: the key's hash on its mask
    /// and the bucket slot it starts at (see `lookup_impl`). A method, not a
    /// closure: the closure it replaces was called, not inlined (two call
    /// sites), and handed its results back through memory; inlined, the
    /// lookup runs 5% fewer instructions and 10% fewer loads on fw4 1K
    /// (docs/results/classifier-classbench.md, sitting M).
    #[inline(always)]
    fn start_probe(&self, rank: &Rank, key: &[u64; W]) -> (&Subtable, u32, Probe) {
        let st = self.subtable(rank.subtable);
        let h = rank.hash(&self.seed, st, key);
        (st, h, st.table.start(h))
    }

    #[inline(always)]
    fn lookup_impl(
        &self,
        key: &[u64; W],
        mut wc: Option<&mut [u64; W]>,
        mut probes: Option<(&mut usize, &mut usize)>,
    ) -> Option<(RuleId, &T)> {
        // Best priority found so far plus one; 0 = nothing yet. The offset
        // makes every test below a single comparison.
        let mut best: u64 = 0;
        let mut best_idx = NIL;
        let order = self.order.as_slice();
        let first = order.first()?;
        // The next table's hash and first bucket slot are read before the
        // current table's chain is walked: they do not depend on it, so the
        // CPU overlaps them with the walk (whose branches are the
        // unpredictable ones) instead of starting them after it. Not an
        // `Option`: when the next table cannot beat `best`, `ahead` keeps
        // this table's probe and the loop ends before it reads it again
        // (`best` only grows).
        let mut ahead = self.start_probe(first, key);
        for (i, rank) in order.iter().enumerate() {
            if u64::from(rank.max_priority) < best {
                // No later table can beat (or, on a tie, precede) the best.
                break;
            }
            let (st, h, probe) = ahead;
            // `best` only grows, so a next table that cannot beat it now
            // will not be probed: no hash for it.
            if let Some(r) = order.get(i + 1) {
                if u64::from(r.max_priority) >= best {
                    ahead = self.start_probe(r, key);
                }
            }
            if let Some((n, _)) = probes.as_mut() {
                **n += 1;
            }
            if let Some(wc) = wc.as_deref_mut() {
                for w in st.words.iter() {
                    wc[w.index as usize] |= w.mask;
                }
            }
            let Some(mut cur) = st.table.find_from(h, probe) else {
                continue;
            };
            // The chain is in priority order: the first rule that matches is
            // this table's best, and a rule that cannot beat `best` ends it.
            loop {
                let r = self.rules.at(cur);
                let p = u64::from(r.priority);
                if p < best {
                    break;
                }
                if let Some((_, c)) = probes.as_mut() {
                    **c += 1;
                }
                // The whole mask is compared (it contains M_T: the bucket
                // was found by hash alone) and, for wildcard tracking,
                // un-wildcarded; for a rule of mask M_T that adds nothing.
                if let Some(wc) = wc.as_deref_mut() {
                    rule_mask_into(&self.masks, r, wc);
                }
                let hit = rule_matches(&self.rules, &self.masks, cur, r, key)
                    && (r.ranges.is_empty() || r.ranges.contains(key, wc.as_deref_mut()));
                if hit {
                    best = p + 1;
                    best_idx = cur;
                    break;
                }
                cur = r.next;
                if cur == NIL {
                    break;
                }
            }
        }
        if best_idx == NIL {
            return None;
        }
        Some((self.rules.id(best_idx), self.rules.value(best_idx)))
    }

    /// Calls `f(id, priority, value)` for every rule that matches `key`
    /// with a priority of at least `min_priority`, in no particular order,
    /// and ORs into `wc` every bit the answer depends on: the table mask of
    /// every table examined and the mask of every merged rule compared.
    /// Every key equal to `key` on the bits of `wc` gets the same calls.
    ///
    /// For lookups whose answer is not simply the best rule: OVS's
    /// conjunctive matches need every matching rule above the best ordinary
    /// one. Slower than [`lookup_wc`](Self::lookup_wc) (no early exit).
    pub fn for_each_match_wc(
        &self,
        key: &[u64; W],
        wc: &mut [u64; W],
        min_priority: u32,
        mut f: impl FnMut(RuleId, u32, &T),
    ) {
        for rank in &self.order {
            if rank.max_priority < min_priority {
                break;
            }
            let st = self.subtable(rank.subtable);
            for w in st.words.iter() {
                wc[w.index as usize] |= w.mask;
            }
            let Some(mut cur) = bucket_head(&self.seed, st, key) else {
                continue;
            };
            loop {
                let r = self.rules.at(cur);
                if r.priority < min_priority {
                    break;
                }
                rule_mask_into(&self.masks, r, wc);
                let hit = rule_matches(&self.rules, &self.masks, cur, r, key)
                    && (r.ranges.is_empty() || r.ranges.contains(key, Some(&mut *wc)));
                if hit {
                    // The whole match group: same key and mask, lower
                    // priorities along `dup`.
                    let mut d = cur;
                    loop {
                        let dr = self.rules.at(d);
                        if dr.priority < min_priority {
                            break;
                        }
                        f(self.rules.id(d), dr.priority, self.rules.value(d));
                        d = dr.dup;
                        if d == NIL {
                            break;
                        }
                    }
                }
                cur = r.next;
                if cur == NIL {
                    break;
                }
            }
        }
    }

    /// All rules, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = RuleRef<'_, W, T>> {
        (0..self.rules.cold.len())
            .filter(|&i| self.rules.live(i))
            .map(|i| self.rule_ref(i as u32))
    }

    /// Handles of all rules, in the order of [`iter`](Self::iter).
    pub fn ids(&self) -> Vec<RuleId> {
        self.iter().map(|r| r.id).collect()
    }

    /// Tables in lookup order: `(table mask, max_priority, number of
    /// rules)`. For statistics and debugging.
    pub fn subtables(&self) -> impl Iterator<Item = (&[u64; W], u32, usize)> {
        self.order.iter().map(|r| {
            let st = self.subtable(r.subtable);
            (
                &self.masks.at(st.mask).mask,
                st.max_priority,
                st.n_rules as usize,
            )
        })
    }

    /// Removes every rule for which `f(id, key, mask, priority, value)`
    /// returns false. `f` may modify the values it keeps.
    pub fn retain(&mut self, mut f: impl FnMut(RuleId, &[u64; W], &[u64; W], u32, &mut T) -> bool) {
        for i in 0..self.rules.cold.len() {
            let idx = i as u32;
            let r = self.rules.rules[i];
            let c = &mut self.rules.cold[i];
            let generation = c.generation;
            let Some(value) = c.value.as_mut() else {
                continue;
            };
            let keep = f(
                RuleId::new(idx, generation),
                &c.key,
                &self.masks.at(r.mask).mask,
                r.priority,
                value,
            );
            if !keep {
                self.remove_at(idx);
            }
        }
    }

    /// Removes every rule. Outstanding ids go stale (they are not reused).
    /// The mode (and collision limit) stays.
    pub fn clear(&mut self) {
        for i in 0..self.rules.cold.len() {
            if self.rules.live(i) {
                self.rules.release(i as u32);
            }
        }
        self.order.clear();
        self.subtables.clear();
        self.free_subtables.clear();
        self.masks.clear();
    }
}

#[cfg(test)]
impl<const W: usize, T> Classifier<W, T> {
    /// The tie-break position of a rule: `(position of its table in lookup
    /// order, insertion sequence number)`. Among matching rules of equal
    /// highest priority, the lookup returns the one with the smallest rank.
    pub(crate) fn tie_rank(&self, id: RuleId) -> Option<(usize, u64)> {
        let r = self.rules.at(self.rules.index_of(id)?);
        let pos = self.order.iter().position(|x| x.subtable == r.table)?;
        Some((pos, r.seq))
    }

    /// Longest bucket chain (distinct matches in one bucket) of any table.
    pub(crate) fn max_chain_len(&self) -> usize {
        let mut max = 0;
        for rank in &self.order {
            for e in self.subtable(rank.subtable).table.iter() {
                let mut n = 0;
                let mut cur = e.head;
                while cur != NIL {
                    n += 1;
                    cur = self.rules.at(cur).next;
                }
                max = max.max(n);
            }
        }
        max
    }

    fn mode_is_merge(&self) -> bool {
        matches!(self.mode, Mode::Merge { .. })
    }

    /// Checks every internal invariant.
    pub(crate) fn check_invariants(&self) {
        use std::collections::{HashMap, HashSet};

        // Rules: masked keys, placement, reachability, match groups.
        let mut n = 0;
        let mut per_mask: HashMap<u32, u32> = HashMap::new();
        for i in 0..self.rules.cold.len() {
            if !self.rules.live(i) {
                continue;
            }
            let r = self.rules.at(i as u32);
            let rkey = self.rules.key(i as u32);
            n += 1;
            *per_mask.entry(r.mask).or_insert(0) += 1;
            let m = &self.masks.at(r.mask).mask;
            assert_eq!(apply_mask(rkey, m), *rkey, "stored key not masked");
            let st = self.subtable(r.table);
            assert!(
                mask_is_subset(&self.masks.at(st.mask).mask, m),
                "rule mask does not contain its table mask"
            );
            if let Mode::Tss = self.mode {
                assert_eq!(r.mask, st.mask, "TSS rule in a foreign table");
            }
            let head = self
                .group_in(st, rkey, r.mask, &r.ranges)
                .expect("rule not reachable");
            let mut cur = head;
            let mut found = false;
            let mut last = u64::MAX;
            while cur != NIL {
                let c = self.rules.at(cur);
                assert!(
                    u64::from(c.priority) < last,
                    "group not strictly descending"
                );
                assert_eq!(
                    (self.rules.key(cur), c.mask, c.table, c.ranges),
                    (rkey, r.mask, r.table, r.ranges)
                );
                if cur != head {
                    assert_eq!(c.next, NIL, "duplicate linked into a chain");
                }
                last = u64::from(c.priority);
                found |= cur as usize == i;
                cur = c.dup;
            }
            assert!(found, "rule not in its group");
        }
        assert_eq!(n, self.rules.len);

        // Buckets: chain order, one group per match, collision limit.
        let mut groups = HashSet::new();
        let mut total = 0;
        for rank in &self.order {
            let st = self.subtable(rank.subtable);
            for e in st.table.iter() {
                let mut len = 0;
                // Groups that differ only in their ranges (mask M_T, same
                // key): no table mask tells them apart, so they may exceed
                // the collision limit (and share a TSS bucket).
                let mut only_ranges = true;
                // Range-free groups per key on M_T (more than one key only
                // on a 32-bit hash collision).
                let mut plain: Vec<[u64; W]> = Vec::new();
                let mut prev = NIL;
                let mut cur = e.head;
                while cur != NIL {
                    let r = self.rules.at(cur);
                    let rkey = self.rules.key(cur);
                    assert_eq!(r.table, rank.subtable);
                    assert_eq!(
                        e.hash,
                        hash_masked(&self.seed, &st.words, rkey),
                        "foreign key in bucket"
                    );
                    let inline = inline_of(&self.masks.at(r.mask).words, rkey);
                    assert_eq!((r.n, r.idx, r.keys()), inline, "inline key out of sync");
                    assert_eq!(
                        self.masks.dense[r.mask as usize],
                        dense_of(&self.masks.at(r.mask).words)
                    );
                    if prev != NIL {
                        assert!(chain_before(self.rules.at(prev), r), "chain out of order");
                    }
                    assert!(
                        groups.insert((*rkey, r.mask, r.ranges)),
                        "one match, two groups"
                    );
                    only_ranges &= r.mask == st.mask;
                    if r.ranges.is_empty() {
                        let k = apply_mask(rkey, &self.masks.at(st.mask).mask);
                        assert!(!plain.contains(&k) || self.mode_is_merge());
                        plain.push(k);
                    }
                    len += 1;
                    prev = cur;
                    cur = r.next;
                }
                match self.mode {
                    Mode::Tss => assert!(only_ranges, "TSS rule of a foreign mask"),
                    Mode::Merge { limit, .. } => {
                        assert!(
                            len <= limit as usize || only_ranges,
                            "chain of {len} over the limit"
                        )
                    }
                }
            }
        }

        // Tables: order, priorities, mask registry back links.
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
            let inline = Rank::new(rank.max_priority, rank.subtable, &st.words);
            assert_eq!(
                (rank.n, rank.idx, rank.mask),
                (inline.n, inline.idx, inline.mask),
                "rank's inline table mask out of sync"
            );
            assert!(st.n_rules > 0);
            assert_eq!(st.priorities.values().sum::<u32>(), st.n_rules);
            assert_eq!(*st.priorities.last_key_value().unwrap().0, st.max_priority);
            let info = self.masks.at(st.mask);
            assert_eq!(info.table, rank.subtable);
            assert_eq!(st.bits, info.bits);
            assert_eq!(
                st.words
                    .iter()
                    .map(|w| (w.index, w.mask))
                    .collect::<Vec<_>>(),
                info.words
                    .iter()
                    .map(|w| (w.index, w.mask))
                    .collect::<Vec<_>>()
            );
            let in_table = self
                .rules
                .rules
                .iter()
                .enumerate()
                .filter(|&(i, r)| self.rules.live(i) && r.table == rank.subtable)
                .count();
            assert_eq!(in_table, st.n_rules as usize);
            total += st.n_rules as usize;
        }
        assert_eq!(total, self.rules.len);
        assert_eq!(
            self.subtables.iter().filter(|s| s.is_some()).count(),
            self.order.len()
        );

        // Mask registry: reference counts, no garbage, index agrees.
        let mut live = 0;
        for (i, slot) in self.masks.slots.iter().enumerate() {
            let Some(m) = slot else { continue };
            live += 1;
            let i = i as u32;
            assert_eq!(m.n_rules, per_mask.get(&i).copied().unwrap_or(0));
            assert!(m.n_rules > 0 || m.table != NIL, "unused mask kept");
            if m.table != NIL {
                assert_eq!(self.subtable(m.table).mask, i);
            }
            assert_eq!(self.masks.find(&self.seed, &m.mask), Some(i));
            assert_eq!(m.bits, popcount(&m.mask));
        }
        assert_eq!(self.masks.index.len(), live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorshift64 generator from `seed`: the random tests' fixed,
    /// repeatable draws.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    type C = Classifier<2, &'static str>;

    const EXACT: [u64; 2] = [!0, !0];
    const FIRST: [u64; 2] = [!0, 0];
    const ANY: [u64; 2] = [0, 0];

    /// The table hash depends on every bit of every word and on the
    /// words' order: one bit flipped anywhere, or two words or two pairs of
    /// words swapped (a reply's addresses), gives another hash, and the
    /// bucket's home slot (the hash's low bits) sees each word's top bit
    /// (the destination address sits in the address word's top half). A
    /// replacement hash must keep this (docs/results/classifier-classbench.md,
    /// sitting O: a sum of per-pair products without a rotate would not).
    /// The seeds are random (the classifier's own), so each comparison
    /// agrees by chance with probability 2^-32: the test counts agreements
    /// and allows two of its ~42,000 comparisons (a hash blind to one bit or
    /// to an order agrees on every seed, hundreds of times) rather than
    /// failing on one.
    #[test]
    fn table_hash_sees_every_bit_and_position() {
        let mut rnd = xorshift(0x5eed_1e55_0000_0001);
        let (mut same_low, mut cases, mut same) = (0, 0, Vec::new());
        for _ in 0..8 {
            let seed = RandomState::default();
            for n in 1..=12 {
                let words: Vec<u64> = (0..n).map(|_| rnd()).collect();
                let h = |w: &[u64]| hash_values(&seed, w.len(), |i| w[i]);
                let base = h(&words);
                for i in 0..n {
                    for bit in 0..64 {
                        let mut w = words.clone();
                        w[i] ^= 1 << bit;
                        if h(&w) == base {
                            same.push(format!("n {n} word {i} bit {bit}"));
                        }
                    }
                    for j in i + 1..n {
                        let mut w = words.clone();
                        w.swap(i, j);
                        if h(&w) == base {
                            same.push(format!("n {n} words {i} and {j} swapped"));
                        }
                    }
                    let mut w = words.clone();
                    w[i] ^= 1 << 63;
                    if h(&w) & 0xffff == base & 0xffff {
                        same_low += 1;
                    }
                    cases += 1;
                }
                if n >= 4 {
                    let mut w = words.clone();
                    w[..4].rotate_left(2);
                    if h(&w) == base {
                        same.push(format!("n {n} pairs swapped"));
                    }
                }
            }
        }
        assert!(same.len() <= 2, "the hash did not change: {same:?}");
        // 624 cases, about 0.01 expected to agree by chance.
        assert!(same_low <= 3, "{same_low} of {cases}");
    }

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
        c.rules.cold[a.index() as usize].generation = u32::MAX - 1;
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

    // ---- TupleMerge mode ----

    fn relax_all(_: &[u64; 2]) -> [u64; 2] {
        [0, 0]
    }

    fn relax_second(m: &[u64; 2]) -> [u64; 2] {
        [0, m[1]]
    }

    fn relax_none(m: &[u64; 2]) -> [u64; 2] {
        *m
    }

    /// The rules of the bucket chain `key` falls into in the table with mask
    /// `mt`, as `(value, priority)`, in chain order (group heads only).
    fn chain<T: Copy>(c: &Classifier<2, T>, mt: &[u64; 2], key: &[u64; 2]) -> Vec<(T, u32)> {
        let t = c.masks.at(c.masks.find(&c.seed, mt).unwrap()).table;
        let mut out = Vec::new();
        let Some(mut cur) = bucket_head(&c.seed, c.subtable(t), key) else {
            return out;
        };
        while cur != NIL {
            let r = c.rules.at(cur);
            out.push((*c.rules.value(cur), r.priority));
            cur = r.next;
        }
        out
    }

    #[test]
    fn merge_mixed_masks_in_one_chain() {
        let mut c = Classifier::<2, &str>::with_relax(relax_all);
        assert_eq!(c.collision_limit(), Some(DEFAULT_COLLISION_LIMIT));
        c.insert(&[1, 0], &FIRST, 5, "first=1");
        c.insert(&[1, 2], &EXACT, 9, "1,2");
        c.insert(&[1, 3], &EXACT, 3, "1,3");
        c.insert(&[0, 7], &[0, !0], 5, "second=7");
        c.check_invariants();
        // One catch-all table: every rule in one bucket, by priority, equal
        // priorities in insertion order.
        assert_eq!(c.n_subtables(), 1);
        assert_eq!(
            chain(&c, &ANY, &[0, 0]),
            vec![("1,2", 9), ("first=1", 5), ("second=7", 5), ("1,3", 3)]
        );
        assert_eq!(val(c.lookup(&[1, 2])), Some("1,2"));
        assert_eq!(val(c.lookup(&[1, 3])), Some("first=1"));
        assert_eq!(val(c.lookup(&[1, 7])), Some("first=1"), "tie: older rule");
        assert_eq!(val(c.lookup(&[2, 7])), Some("second=7"));
        assert_eq!(val(c.lookup(&[2, 3])), None);
        // The reported mask is the rule's own, not the table's.
        let id = c.find_exact(&[1, 99], &FIRST, 5).unwrap();
        assert_eq!(c.rule(id).unwrap().mask, &FIRST);
        assert_eq!(c.subtables().next().unwrap(), (&ANY, 9, 4));

        // Wildcards: the table mask, plus the mask of each rule compared.
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[1, 2], &mut wc)), Some("1,2"));
        assert_eq!(wc, EXACT);
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[2, 7], &mut wc)), Some("second=7"));
        assert_eq!(wc, EXACT);
        // A rule that cannot beat the best so far is not compared.
        fn relax_low_byte(m: &[u64; 2]) -> [u64; 2] {
            [m[0], m[1] & 0xff]
        }
        let mut c = Classifier::<2, &str>::with_relax(relax_low_byte);
        c.insert(&[1, 0], &FIRST, 5, "a5");
        c.insert(&[1, 0x90], &[!0, 0xf0], 10, "a10");
        c.insert(&[0, 0x305], &[0, 0xfff], 7, "b7");
        c.insert(&[0, 0x105], &[0, 0xffff], 3, "b3");
        c.check_invariants();
        assert_eq!(c.n_subtables(), 2);
        assert_eq!(chain(&c, &FIRST, &[1, 0]), vec![("a10", 10), ("a5", 5)]);
        assert_eq!(chain(&c, &[0, 0xff], &[0, 5]), vec![("b7", 7), ("b3", 3)]);
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[1, 0x205], &mut wc)), Some("a5"));
        assert_eq!(wc, [!0, 0xfff]);
        let mut wc = [0; 2];
        assert_eq!(val(c.lookup_wc(&[2, 0x105], &mut wc)), Some("b3"));
        assert_eq!(wc, [!0, 0xffff]);
    }

    #[test]
    fn merge_same_match_groups() {
        let mut c = Classifier::<2, &str>::with_relax(relax_all).with_collision_limit(2);
        let (a, _) = c.insert(&[1, 1], &EXACT, 5, "a");
        c.insert(&[2, 2], &EXACT, 4, "b");
        // Same match, other priorities: one group, not new chain entries,
        // so no split although the limit is 2.
        let (lo, _) = c.insert(&[1, 1], &EXACT, 1, "a-lo");
        let (hi, _) = c.insert(&[1, 1], &EXACT, 3, "a-mid");
        c.check_invariants();
        assert_eq!(c.n_subtables(), 1);
        assert_eq!(chain(&c, &ANY, &[0, 0]), vec![("a", 5), ("b", 4)]);
        // A new top rule moves its group down the chain... up, here.
        let (top, _) = c.insert(&[2, 2], &EXACT, 9, "b-top");
        assert_eq!(chain(&c, &ANY, &[0, 0]), vec![("b-top", 9), ("a", 5)]);
        // Removing a group head promotes the next rule, at its own place.
        assert_eq!(c.remove(top), Some("b-top"));
        assert_eq!(chain(&c, &ANY, &[0, 0]), vec![("a", 5), ("b", 4)]);
        assert_eq!(c.remove(a), Some("a"));
        c.check_invariants();
        assert_eq!(chain(&c, &ANY, &[0, 0]), vec![("b", 4), ("a-mid", 3)]);
        assert_eq!(val(c.lookup(&[1, 1])), Some("a-mid"));
        // Replacement keeps the chain position and retires the old id.
        let (hi2, old) = c.insert(&[1, 1], &EXACT, 3, "a-mid2");
        assert_eq!(old, Some("a-mid"));
        assert_eq!(c.get(hi), None);
        assert_eq!(c.find_exact(&[1, 1], &EXACT, 3), Some(hi2));
        assert_eq!(c.find_exact(&[1, 1], &EXACT, 1), Some(lo));
        assert_eq!(chain(&c, &ANY, &[0, 0]), vec![("b", 4), ("a-mid2", 3)]);
        assert_eq!(c.len(), 3);
        c.check_invariants();
    }

    #[test]
    fn merge_split_on_overflow() {
        // A catch-all table mask: everything collides until a split.
        let mut c = Classifier::<2, u32>::with_relax(relax_all).with_collision_limit(2);
        c.insert(&[1, 1], &EXACT, 1, 1);
        c.insert(&[2, 2], &EXACT, 2, 2);
        assert_eq!(c.n_subtables(), 1);
        assert_eq!(c.max_chain_len(), 2);
        // Third distinct match: the bucket splits into a table with one
        // word of the rules' common mask (the most general mask under which
        // they no longer collide); the emptied catch-all table is dropped.
        c.insert(&[3, 3], &EXACT, 3, 3);
        c.check_invariants();
        assert_eq!(c.max_chain_len(), 1);
        let tables: Vec<_> = c.subtables().map(|(m, p, n)| (*m, p, n)).collect();
        assert_eq!(tables, vec![([0, !0], 3, 3)]);
        // Later rules with that mask go to the most specific table.
        c.insert(&[4, 4], &EXACT, 4, 4);
        assert_eq!(c.n_subtables(), 1);
        // A rule that fits no table gets a new relaxed one.
        c.insert(&[1, 0], &FIRST, 0, 10);
        c.insert(&[0, 0], &ANY, 0, 11);
        let tables: Vec<_> = c.subtables().map(|(m, p, n)| (*m, p, n)).collect();
        assert_eq!(tables, vec![([0, !0], 4, 4), (ANY, 0, 2)]);
        for i in 1..=4 {
            assert_eq!(val(c.lookup(&[i, i])), Some(i as u32));
        }
        assert_eq!(val(c.lookup(&[1, 2])), Some(10));
        assert_eq!(val(c.lookup(&[2, 1])), Some(11));
        c.check_invariants();

        // Nested masks that cannot share a table bucket: the split moves the
        // most specific ones out, the rest stays.
        let mut c = Classifier::<2, u32>::with_relax(relax_all).with_collision_limit(2);
        c.insert(&[1, 0], &FIRST, 1, 1);
        c.insert(&[1, 0], &[!0, 0xff], 2, 2);
        c.insert(&[1, 0], &EXACT, 3, 3);
        c.check_invariants();
        assert_eq!(c.n_subtables(), 2);
        assert_eq!(c.max_chain_len(), 2);
        assert_eq!(val(c.lookup(&[1, 0])), Some(3));
        assert_eq!(val(c.lookup(&[1, 0x100])), Some(2));
        assert_eq!(val(c.lookup(&[1, 1])), Some(1));
        assert_eq!(val(c.lookup(&[2, 0])), None);
    }

    #[test]
    fn merge_removal_keeps_invariants() {
        let mut c = Classifier::<2, u32>::with_relax(relax_all).with_collision_limit(3);
        let mut ids = Vec::new();
        for i in 0..40u64 {
            let mask = [FIRST, EXACT, [0, !0], ANY][(i % 4) as usize];
            ids.push(
                c.insert(&[i % 5, i % 7], &mask, (i * 7 % 13) as u32, i as u32)
                    .0,
            );
            c.check_invariants();
        }
        assert!(c.n_subtables() > 1);
        // Remove from the middle and the heads of chains, in an order
        // unrelated to insertion.
        for (n, &i) in [17usize, 3, 39, 0, 22, 8, 31, 12].iter().enumerate() {
            assert_eq!(c.remove(ids[i]), Some(i as u32));
            assert_eq!(c.remove(ids[i]), None);
            assert_eq!(c.len(), 40 - n - 1);
            c.check_invariants();
        }
        let before = c.n_subtables();
        for id in c.ids() {
            c.remove(id);
            c.check_invariants();
        }
        assert!(before > 0);
        assert!(c.is_empty());
        assert_eq!(c.n_subtables(), 0);
        assert!(c.masks.slots.iter().all(Option::is_none), "masks leaked");
        // clear() keeps the mode.
        c.insert(&[1, 1], &EXACT, 1, 1);
        c.clear();
        assert_eq!(c.collision_limit(), Some(3));
        c.check_invariants();
    }

    #[test]
    fn merge_chains_never_exceed_limit() {
        // A deterministic stream of overlapping rules from a small alphabet:
        // many collisions, nested masks, same-match groups.
        const MASKS: [[u64; 2]; 7] = [
            FIRST,
            EXACT,
            [0, !0],
            ANY,
            [0xff, 0],
            [0xff, 0xff00],
            [!0, 0xffff],
        ];
        let mut next = xorshift(0x1234_5678_9abc_def0u64);
        type Relax = fn(&[u64; 2]) -> [u64; 2];
        let relaxes: [Relax; 3] = [relax_all, relax_second, relax_none];
        for limit in 1..=4 {
            for relax in relaxes {
                let mut c = Classifier::<2, u64>::with_relax(relax).with_collision_limit(limit);
                let mut ids = Vec::new();
                for i in 0..600u64 {
                    let key = [next() % 64 * 0x0101, next() % 16 * 0x0101_0101];
                    let mask = MASKS[(next() % 7) as usize];
                    ids.push(c.insert(&key, &mask, (next() % 8) as u32, i).0);
                    assert!(c.max_chain_len() <= limit);
                    if i % 97 == 0 {
                        c.check_invariants();
                    }
                }
                c.check_invariants();
                for id in ids.iter().step_by(2) {
                    c.remove(*id);
                }
                c.check_invariants();
                assert!(c.max_chain_len() <= limit);
            }
        }
    }

    #[test]
    fn merge_retain_iter_get_mut() {
        let mut c = Classifier::<2, u32>::with_relax(relax_second).with_collision_limit(2);
        let mut ids = Vec::new();
        for i in 0..30u64 {
            let mask = if i % 3 == 0 { EXACT } else { [0, !0] };
            ids.push(c.insert(&[i, i % 4], &mask, i as u32, i as u32).0);
        }
        c.check_invariants();
        assert_eq!(c.iter().count(), 30);
        *c.get_mut(ids[4]).unwrap() += 1000;
        assert_eq!(c.get(ids[4]), Some(&1004));
        c.retain(|_, _, mask, prio, v| {
            assert_eq!(*mask, if prio % 3 == 0 { EXACT } else { [0, !0] });
            *v += 1;
            prio % 2 == 0
        });
        c.check_invariants();
        assert_eq!(c.len(), 15);
        assert_eq!(c.get(ids[4]), Some(&1005));
        assert_eq!(c.get(ids[5]), None);
    }

    #[test]
    #[should_panic(expected = "TupleMerge")]
    fn collision_limit_needs_merge_mode() {
        let _ = Classifier::<2, u32>::new().with_collision_limit(4);
    }

    /// A new, coarser table takes in the specific tables made before it
    /// when their groups fit its buckets, and not when they would not.
    #[test]
    fn new_table_absorbs_more_specific_tables() {
        let ident: fn(&[u64; 2]) -> [u64; 2] = |m| *m;
        let mut c: Classifier<2, u32> = Classifier::with_relax(ident).with_collision_limit(8);
        // Two specific tables, high priorities first.
        c.insert(&[0x0102, 7], &[0xffff, 0xff], 100, 0);
        c.insert(&[0x0130, 0x0500], &[0xfff0, 0xff00], 90, 1);
        assert_eq!(c.n_subtables(), 2);
        // A coarser rule: its table ([0xff00, 0]) takes in both.
        c.insert(&[0x0200, 0], &[0xff00, 0], 10, 2);
        c.check_invariants();
        assert_eq!(c.n_subtables(), 1);
        assert_eq!(c.lookup(&[0x0102, 7]).map(|r| *r.1), Some(0));
        assert_eq!(c.lookup(&[0x0135, 0x0500]).map(|r| *r.1), Some(1));
        assert_eq!(c.lookup(&[0x0102, 8]), None);
        assert_eq!(c.lookup(&[0x02aa, 8]).map(|r| *r.1), Some(2));

        // Three groups in one bucket of the coarser mask exceed a quarter
        // of the limit (2): that table stays.
        let mut c: Classifier<2, u32> = Classifier::with_relax(ident).with_collision_limit(8);
        for i in 0..3u32 {
            c.insert(&[0x0100 + u64::from(i), 0], &[0xffff, 0], 100 - i, i);
        }
        c.insert(&[0x0200, 0], &[0xff00, 0], 10, 9);
        c.check_invariants();
        assert_eq!(c.n_subtables(), 2);
        for i in 0..3u32 {
            assert_eq!(c.lookup(&[0x0100 + u64::from(i), 0]).map(|r| *r.1), Some(i));
        }
    }

    /// Masks with more non-zero words than a rule's compact key holds
    /// ([`SPARSE`]) fall back to the full key, in the bucket check and the
    /// chain compare: both modes against the linear scan.
    #[test]
    fn inline_masks_of_five_to_eight_words() {
        // 5-8 non-zero words (the inline form's upper range, e.g. an IPv6
        // 5-tuple), the widest word anywhere but first, so the filter word
        // (`key0`) and the `rest` entries are exercised in every position,
        // against a linear scan, with `lookup_wc`'s mask checked by
        // flipping every bit outside it.
        const WW: usize = 10;
        let mut next = xorshift(0x0fed_cba9_8765_4321u64);
        for relax in [
            None,
            Some((|_: &[u64; WW]| [0; WW]) as fn(&[u64; WW]) -> [u64; WW]),
            Some(
                (|m: &[u64; WW]| {
                    let mut r = *m;
                    r[0] = 0;
                    r
                }) as fn(&[u64; WW]) -> [u64; WW],
            ),
        ] {
            let mut c: Classifier<WW, u32> = match relax {
                None => Classifier::new(),
                Some(r) => Classifier::with_relax(r).with_collision_limit(3),
            };
            let mut lin: crate::LinearClassifier<WW, u32> = crate::LinearClassifier::new();
            let mut keys = Vec::new();
            for i in 0..300u32 {
                let n = 5 + (next() % 4) as usize;
                // Which words: a random n of the 10 (rotated start).
                let first = (next() % WW as u64) as usize;
                let wide = (next() % n as u64) as usize;
                let mut mask = [0u64; WW];
                for j in 0..n {
                    // Narrow masks except one wide word at a random place.
                    mask[(first + j) % WW] = if j == wide { 0xffff } else { 0x3 << (j % 4) };
                }
                let key: [u64; WW] = std::array::from_fn(|_| next() % 4);
                c.insert(&key, &mask, i, i);
                lin.insert(&key, &mask, i, i);
                keys.push(key);
            }
            c.check_invariants();
            for (n, k) in keys.iter().chain([&[0; WW], &[1; WW]]).enumerate() {
                let want = lin.lookup(k).map(|r| *r.1);
                assert_eq!(c.lookup(k).map(|r| *r.1), want);
                let mut wc = [0; WW];
                assert_eq!(c.lookup_wc(k, &mut wc).map(|r| *r.1), want);
                let noise: [u64; WW] = std::array::from_fn(|_| next());
                let k2: [u64; WW] = std::array::from_fn(|w| k[w] ^ (noise[w] & !wc[w]));
                assert_eq!(
                    c.lookup(&k2).map(|r| *r.1),
                    lin.lookup(&k2).map(|r| *r.1),
                    "key {n}"
                );
                assert_eq!(c.lookup(&k2).map(|r| *r.1), want, "wc too narrow, key {n}");
            }
        }
    }

    /// Rules and tables keep their mask's word indexes inline as `u8`s: an
    /// index that does not fit one must make the rule or table wide instead
    /// of being stored truncated.
    #[test]
    fn word_indexes_beyond_a_u8_go_wide() {
        // One or two words each, from both sides of index 255 (256 would
        // truncate to 0, 299 to 43).
        agrees_with_linear::<300>(0x0bad_cafe_f00d_1234, |next| {
            let words = [0, 43, 255, 256, 299];
            let a = words[(next() % 5) as usize];
            let b = words[(next() % 5) as usize];
            let mut mask = [0u64; 300];
            mask[a] = 0xff;
            mask[b] |= 0xf0;
            mask
        });
    }

    /// 200 rules with masks from `mask_of` (keys of few values per word)
    /// in TSS and in TupleMerge against the linear classifier: every
    /// lookup, with and without wildcards, agrees; the invariants hold.
    fn agrees_with_linear<const W: usize>(
        seed: u64,
        mut mask_of: impl FnMut(&mut dyn FnMut() -> u64) -> [u64; W],
    ) {
        let mut next = xorshift(seed);
        for relax in [
            None,
            Some((|_: &[u64; W]| [0; W]) as fn(&[u64; W]) -> [u64; W]),
        ] {
            let mut c: Classifier<W, u32> = match relax {
                None => Classifier::new(),
                Some(r) => Classifier::with_relax(r).with_collision_limit(2),
            };
            let mut lin: crate::LinearClassifier<W, u32> = crate::LinearClassifier::new();
            let mut keys = Vec::new();
            for i in 0..200u32 {
                let mask = mask_of(&mut next);
                let key: [u64; W] = std::array::from_fn(|_| next() % 3);
                c.insert(&key, &mask, i, i);
                lin.insert(&key, &mask, i, i);
                keys.push(key);
            }
            c.check_invariants();
            for k in keys.iter().chain([&[0; W], &[1; W]]) {
                let want = lin.lookup(k).map(|r| *r.1);
                assert_eq!(c.lookup(k).map(|r| *r.1), want);
                let mut wc = [0; W];
                assert_eq!(c.lookup_wc(k, &mut wc).map(|r| *r.1), want);
            }
        }
    }

    #[test]
    fn wide_masks_use_the_full_key() {
        // 9-12 non-zero words, few distinct values per word.
        agrees_with_linear::<12>(0x1234_5678_9abc_def0, |next| {
            let n = 9 + (next() % 4) as usize;
            std::array::from_fn(|w| if w < n { 0xff } else { 0 })
        });
    }
}
