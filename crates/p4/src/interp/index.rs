//! Table indexes: how `apply_table` finds the winning entry and the key
//! bits the decision depended on without scanning every entry.
//!
//! A packet that reaches a table in the interpreter (an upcall of a P4
//! bridge, or every packet of an uncached run) looks the key up here. Two
//! answers are needed: the winner (the entry the match rules pick, ties
//! to the first in table order) and, per key, the bits a classifier must
//! compare to reach the same decision (the trace's "examined" bits, which
//! become the megaflow's mask). Both must equal what a scan over all
//! entries gives ([`scan`], kept as the reference and as the fallback),
//! bit for bit: the megaflow cache is only correct if the mask is.
//!
//! - Tables with only exact and lpm keys: tuple space. Entries are
//!   grouped by their mask tuple; each group is a hash table
//!   ([`Buckets`]) from the masked key to the entries (table order) with
//!   that key. Groups are probed by decreasing prefix-length sum and the
//!   probe stops once a hit is found and the remaining groups score
//!   lower. The examined bits do not depend on which groups were
//!   probed: for an exact key they are the whole key (when the table has
//!   entries), for an lpm key they are
//!   the longest prefix over all entries of min(prefix length, bits in
//!   common with the key + 1), which [`Prefixes`] gives with one ordered
//!   search per distinct prefix length longer than the winner's.
//! - Tables with ternary, range or optional keys: entries kept sorted by
//!   priority (then table order); the scan stops at the first match
//!   after the entries of its priority (entries of lower priority were
//!   not examined, as in the reference).
//! - Anything else (target-specific match kinds): the reference scan.
//!
//! The indexes change only through [`TableState`](super::TableState)'s
//! `push_entry`/`remove_entry`/`clear_entries`, the single place table
//! entries change.

use crate::interp::check::{Entry, Km};
use crate::runtime::MatchKind;
use crate::value::mask;
use std::collections::BTreeMap;

/// An entry's place in table order: const entries (by index) come before
/// runtime entries (by id; ids grow with insertion and the runtime list
/// keeps insertion order).
pub(crate) type Order = u64;
const RUNTIME: Order = 1 << 63;

pub(crate) fn const_order(i: usize) -> Order {
    i as Order
}

pub(crate) fn runtime_order(id: u64) -> Order {
    RUNTIME | id
}

/// Where the entry of `o` is: `(false, index in const entries)` or
/// `(true, index in runtime entries)`.
pub(crate) fn locate(runtime: &[Entry], o: Order) -> Option<(bool, usize)> {
    if o & RUNTIME == 0 {
        Some((false, o as usize))
    } else {
        let id = o & !RUNTIME;
        // Ids are consecutive unless entries were deleted: the guess from
        // the first id is then the place, checked; else a binary search.
        let guess = runtime
            .first()
            .and_then(|f| usize::try_from(id.checked_sub(f.id)?).ok())
            .filter(|&g| runtime.get(g).is_some_and(|e| e.id == id));
        if let Some(g) = guess {
            return Some((true, g));
        }
        runtime
            .binary_search_by_key(&id, |e| e.id)
            .ok()
            .map(|p| (true, p))
    }
}

/// Does entry `e` match key values `k`?
pub(crate) fn entry_matches(e: &Entry, k: &[u128]) -> bool {
    keys_match(&e.keys, k)
}

fn keys_match(keys: &[Km], k: &[u128]) -> bool {
    keys.iter().zip(k).all(|(m, v)| match m {
        Km::Masked(x, mk) => v & mk == *x,
        Km::Range(lo, hi) => lo <= v && v <= hi,
    })
}

/// Key bits needed to tell entry `e` apart from key `v` (per key).
pub(crate) fn needed(kind: &MatchKind, m: &Km, v: u128, w: u32) -> u128 {
    let full = mask(w);
    match (kind, m) {
        (MatchKind::Exact, _) => full,
        (MatchKind::Lpm, Km::Masked(x, mk)) => {
            let diff = (v ^ x) & mk;
            if diff == 0 {
                *mk
            } else {
                // Bits from the MSB down to the first differing one.
                let p = 127 - diff.leading_zeros();
                full & !((1u128 << p) - 1)
            }
        }
        (_, Km::Masked(_, mk)) => *mk,
        (_, Km::Range(..)) => full,
    }
}

/// The match kind and width of each key.
pub(crate) type KeyShape = [(MatchKind, u32)];

/// How a table ranks the entries that match a key: the highest rank
/// wins, ties go to the first in table order ([`Order`]). One rule for
/// the lookup ([`scan`], which the indexes equal) and for revalidation,
/// which must know whether an added entry could beat the one a cached
/// run hit (`changes.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ranking {
    /// A ternary, range or optional key: the entries' priorities (larger
    /// wins; `Entry::prio` already says it that way round, whatever the
    /// program's or the control plane's direction).
    Priority,
    /// lpm keys and no priority: the sum of the lpm keys' prefix lengths.
    PrefixLength,
    /// Exact keys only: every match ranks the same.
    None,
}

impl Ranking {
    pub(crate) fn of(keys: &KeyShape) -> Ranking {
        if keys.iter().any(|k| {
            matches!(
                k.0,
                MatchKind::Ternary | MatchKind::Range | MatchKind::Optional
            )
        }) {
            Ranking::Priority
        } else if keys.iter().any(|k| k.0 == MatchKind::Lpm) {
            Ranking::PrefixLength
        } else {
            Ranking::None
        }
    }

    /// The rank of an entry with match `m` and priority `prio`.
    pub(crate) fn rank(self, keys: &KeyShape, m: &[Km], prio: i64) -> i128 {
        match self {
            Ranking::Priority => prio as i128,
            Ranking::PrefixLength => keys
                .iter()
                .zip(m)
                .filter(|(k, _)| k.0 == MatchKind::Lpm)
                .map(|(_, m)| match m {
                    Km::Masked(_, mk) => mk.count_ones() as i128,
                    _ => 0,
                })
                .sum(),
            Ranking::None => 0,
        }
    }
}

/// The reference lookup: every entry, in table order. Returns the winner
/// and, per key, the bits examined (`need`, zeroed first).
pub(crate) fn scan<'a>(
    keys: &KeyShape,
    entries: impl Iterator<Item = (Order, &'a Entry)> + Clone,
    kv: &[u128],
    need: &mut [u128],
) -> Option<Order> {
    let ranking = Ranking::of(keys);
    let has_prio = ranking == Ranking::Priority;
    let mut best: Option<Order> = None;
    let mut best_score: i128 = i128::MIN;
    for (o, e) in entries.clone() {
        if !entry_matches(e, kv) {
            continue;
        }
        let score = ranking.rank(keys, &e.keys, e.prio);
        if best.is_none() || score > best_score {
            best = Some(o);
            best_score = score;
        }
    }
    need.iter_mut().for_each(|n| *n = 0);
    for (_, e) in entries {
        // Lower-priority entries than the winner were not examined.
        if has_prio && best.is_some() && (e.prio as i128) < best_score {
            continue;
        }
        for (i, (k, m)) in keys.iter().zip(&e.keys).enumerate() {
            if let Some(n) = need.get_mut(i) {
                *n |= needed(&k.0, m, kv[i], k.1);
            }
        }
    }
    best
}

/// Entries of a bucket past the inline one: (order, key values).
type Rest = Vec<(Order, Box<[u128]>)>;

/// Key values a bucket holds inline (keys beyond go to `Bucket::rest`).
const INLINE: usize = 2;

/// The entries of one masked-key hash, in table order: the first inline
/// (its order and key values in the bucket's own cache line), the others
/// (duplicate keys, hash collisions, or every entry when the table has
/// more than [`INLINE`] keys) behind `rest`.
///
/// Why: a hit in a map of `Vec<(Order, Box<[u128]>)>` touched the map's
/// slot, the bucket's vector and the boxed values, three cache lines the
/// 1,000-route table misses in L1 per packet (docs/results/p4.md 2u);
/// here the probe's first line holds all a hit needs.
#[repr(C, align(64))]
#[derive(Default)]
struct Bucket {
    hash: u64,
    /// The inline entry's order (when `inline`).
    o: Order,
    rest: Option<Box<Rest>>,
    used: bool,
    inline: bool,
    vals: [u128; INLINE],
}

impl Bucket {
    /// Every entry of the bucket, in table order.
    fn list(&mut self, nk: usize) -> Rest {
        let mut l = Vec::new();
        if self.inline {
            l.push((self.o, self.vals[..nk].into()));
        }
        if let Some(r) = self.rest.take() {
            l.extend(*r);
        }
        self.inline = false;
        l
    }

    /// Holds `l` (table order): its first entry inline when its key
    /// values fit.
    fn set(&mut self, mut l: Rest) {
        self.inline = false;
        self.rest = None;
        if let Some((o, v)) = l.first() {
            if v.len() <= INLINE {
                self.o = *o;
                self.vals = [0; INLINE];
                self.vals[..v.len()].copy_from_slice(v);
                self.inline = true;
                l.remove(0);
            }
        }
        if !l.is_empty() {
            self.rest = Some(Box::new(l));
        }
    }

    fn is_empty(&self) -> bool {
        !self.inline && self.rest.is_none()
    }

    /// The order of the bucket's first entry (table order) whose key
    /// values pass `matches` (`nk` keys): the inline entry, else the
    /// first in `rest`. Entries of other keys with the same hash
    /// (collisions) fail `matches` and are passed over.
    #[inline]
    fn first_match(&self, nk: usize, matches: impl Fn(&[u128]) -> bool) -> Option<Order> {
        if self.inline && matches(&self.vals[..nk.min(INLINE)]) {
            return Some(self.o);
        }
        self.rest
            .as_deref()
            .and_then(|r| r.iter().find(|(_, vals)| matches(vals)).map(|x| x.0))
    }
}

/// Masked key hash -> [`Bucket`]: open addressing with linear probing,
/// at most half full, so a probe mostly reads one cache line (the
/// bucket); the hash is the masked key's (already well mixed), the
/// buckets compare it and the lookup compares the key values.
#[derive(Default)]
struct Buckets {
    slots: Vec<Bucket>,
    n: usize,
}

impl Buckets {
    fn home(&self, h: u64) -> usize {
        (h as usize) & (self.slots.len() - 1)
    }

    fn find(&self, h: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let m = self.slots.len() - 1;
        let mut i = self.home(h);
        loop {
            let b = &self.slots[i];
            if !b.used {
                return None;
            }
            if b.hash == h {
                return Some(i);
            }
            i = (i + 1) & m;
        }
    }

    fn get(&self, h: u64) -> Option<&Bucket> {
        self.find(h).map(|i| &self.slots[i])
    }

    /// The bucket of `h`, added (empty) when absent.
    fn get_or_add(&mut self, h: u64) -> &mut Bucket {
        if let Some(i) = self.find(h) {
            return &mut self.slots[i];
        }
        if (self.n + 1) * 2 > self.slots.len() {
            let cap = (self.slots.len() * 2).max(8);
            let old = std::mem::replace(
                &mut self.slots,
                std::iter::repeat_with(Bucket::default).take(cap).collect(),
            );
            self.n = 0;
            for b in old.into_iter().filter(|b| b.used) {
                let i = self.free_for(b.hash);
                self.slots[i] = b;
                self.n += 1;
            }
        }
        let i = self.free_for(h);
        self.slots[i] = Bucket {
            hash: h,
            used: true,
            ..Bucket::default()
        };
        self.n += 1;
        &mut self.slots[i]
    }

    /// The first unused slot from `h`'s home (there is one: at most half
    /// full).
    fn free_for(&self, h: u64) -> usize {
        let m = self.slots.len() - 1;
        let mut i = self.home(h);
        while self.slots[i].used {
            i = (i + 1) & m;
        }
        i
    }

    /// Removes the bucket of `h` (if any), shifting back the buckets
    /// after it whose probe passed its slot (no tombstones).
    fn remove(&mut self, h: u64) {
        let Some(mut i) = self.find(h) else { return };
        let m = self.slots.len() - 1;
        let mut j = i;
        loop {
            j = (j + 1) & m;
            if !self.slots[j].used {
                break;
            }
            let k = self.home(self.slots[j].hash);
            // Slot j may move to i when its home is not in (i, j]
            // (cyclically).
            let stays = if i <= j {
                i < k && k <= j
            } else {
                i < k || k <= j
            };
            if !stays {
                self.slots.swap(i, j);
                i = j;
            }
        }
        self.slots[i] = Bucket::default();
        self.n -= 1;
    }
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finalizer.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hash_masked(kv: &[u128], masks: &[u128]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for (v, m) in kv.iter().zip(masks) {
        let x = v & m;
        h = mix(h ^ x as u64);
        h = mix(h ^ (x >> 64) as u64);
    }
    h
}

/// Entries of one mask tuple.
pub(crate) struct Group {
    masks: Vec<u128>,
    /// Sum of the lpm keys' prefix lengths (the match rule's score).
    score: u32,
    map: Buckets,
    n: usize,
}

/// One lpm key's prefixes, by length: per distinct prefix length, the
/// prefix values (masked to the length) in a sorted map counting the
/// entries with that prefix (a value with count 0 is absent).
///
/// Why not a binary trie: the examined bits need, per packet, the
/// longest common prefix of the key with the prefixes. A trie walks the
/// key bit by bit (up to the key's width in dependent loads, the walk was
/// most of `lookup`'s time on 1,000 /28 routes); here each length costs
/// one ordered-map search, because among values of one length sorted as
/// integers the longest common prefix with the key is reached at the
/// key's two neighbours. Lengths are visited longest first and the visit
/// stops once no shorter length can beat the best so far, starting from
/// the winner's length (`need_len`'s floor), so a table of one prefix
/// length costs no search on a hit and one on a miss.
pub(crate) struct Prefixes {
    w: u32,
    /// (length, prefix -> count), longest length first.
    by_len: Vec<(u32, BTreeMap<u128, u32>)>,
    /// Entries in all lengths.
    total: usize,
    /// Lengths searched by `need_len` (tests: the floor's shortcut).
    #[cfg(test)]
    searches: std::sync::atomic::AtomicU64,
}

impl Prefixes {
    fn new(w: u32) -> Prefixes {
        Prefixes {
            w,
            by_len: Vec::new(),
            total: 0,
            #[cfg(test)]
            searches: Default::default(),
        }
    }

    fn change(&mut self, x: u128, len: u32, add: bool) {
        let len = len.min(self.w);
        let x = x & prefix_mask(self.w, len);
        let at = self.by_len.partition_point(|(l, _)| *l > len);
        if add {
            if self.by_len.get(at).is_none_or(|(l, _)| *l != len) {
                self.by_len.insert(at, (len, BTreeMap::new()));
            }
            *self.by_len[at].1.entry(x).or_insert(0) += 1;
            self.total += 1;
        } else {
            let Some((l, m)) = self.by_len.get_mut(at) else {
                return;
            };
            if *l != len {
                return;
            }
            let Some(c) = m.get_mut(&x) else { return };
            *c -= 1;
            if *c == 0 {
                m.remove(&x);
            }
            self.total = self.total.saturating_sub(1);
            if m.is_empty() {
                self.by_len.remove(at);
            }
        }
    }

    /// The longest over all prefixes of min(length, bits in common with
    /// `v` + 1): how many leading bits of `v` a scan compared.
    ///
    /// `floor` is the prefix length of an entry known to match `v` (the
    /// tuple probe's winner; 0 when there is none): that prefix has all
    /// its `floor` bits in common with `v`, so it alone gives `floor`,
    /// and no length up to `floor` can give more (min(length, ..) <=
    /// length). Only longer lengths are searched: when the winner has
    /// the longest length present (a hit in a table of one prefix length,
    /// or on its most specific route) there is no search at all. Why:
    /// the ordered searches were most of the lookup's cache misses on
    /// 1,000 routes (docs/results/p4.md 2u).
    fn need_len(&self, v: u128, floor: u32) -> u32 {
        if self.total == 0 {
            return 0;
        }
        let w = self.w;
        let mut best = floor.min(w);
        for (len, m) in &self.by_len {
            let len = *len;
            if best >= len {
                // Lengths only get shorter: min(length, ...) <= best.
                break;
            }
            let vm = v & prefix_mask(w, len);
            // Bits in common, within the key's width, capped at `len`.
            let common = |x: u128| -> u32 {
                let d = (x ^ vm) & mask(w);
                if d == 0 {
                    len
                } else {
                    (d.leading_zeros() - (128 - w)).min(len)
                }
            };
            let mut c = 0u32;
            if let Some((x, _)) = m.range(vm..).next() {
                c = c.max(common(*x));
            }
            // A prefix equal to the key's (the usual hit) already has
            // every bit in common: the lower neighbour cannot beat it,
            // so the second search of the map is skipped.
            if c < len {
                if let Some((x, _)) = m.range(..vm).next_back() {
                    c = c.max(common(*x));
                }
            }
            #[cfg(test)]
            self.searches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            best = best.max(len.min(c + 1));
        }
        best
    }
}

fn prefix_mask(w: u32, len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        mask(w) & !mask(w - len.min(w))
    }
}

/// A table's lookup structure (see the module doc).
pub(crate) enum TableIndex {
    Tuples {
        keys: Vec<(MatchKind, u32)>,
        groups: Vec<Group>,
        /// One per lpm key (by key position).
        tries: Vec<Option<Prefixes>>,
        n: usize,
    },
    Prio {
        keys: Vec<(MatchKind, u32)>,
        /// (priority, order), highest priority first, then table order.
        sorted: Vec<(i64, Order, Box<[Km]>)>,
    },
    Scan {
        keys: Vec<(MatchKind, u32)>,
    },
}

impl TableIndex {
    /// The index of a table with key `keys` and const entries `consts`.
    pub(crate) fn new(keys: &KeyShape, consts: &[Entry]) -> TableIndex {
        let keys = keys.to_vec();
        let mut ix = if keys
            .iter()
            .all(|k| matches!(k.0, MatchKind::Exact | MatchKind::Lpm))
            && keys.iter().all(|k| k.1 > 0 && k.1 <= 128)
        {
            TableIndex::Tuples {
                tries: keys
                    .iter()
                    .map(|k| (k.0 == MatchKind::Lpm).then(|| Prefixes::new(k.1)))
                    .collect(),
                keys,
                groups: Vec::new(),
                n: 0,
            }
        } else if Ranking::of(&keys) == Ranking::Priority
            && keys.iter().all(|k| {
                matches!(
                    k.0,
                    MatchKind::Exact
                        | MatchKind::Lpm
                        | MatchKind::Ternary
                        | MatchKind::Range
                        | MatchKind::Optional
                )
            })
        {
            // Only a table ranked by priority: an exact/lpm table the
            // tuples cannot hold (a key of width 0 or over 128) ranks by
            // prefix length, as `scan` and revalidation do, so it scans.

            TableIndex::Prio {
                keys,
                sorted: Vec::new(),
            }
        } else {
            TableIndex::Scan { keys }
        };
        for (i, e) in consts.iter().enumerate() {
            ix.insert(const_order(i), e);
        }
        ix
    }

    /// The match kind and width of each key.
    pub(crate) fn keys(&self) -> &KeyShape {
        match self {
            TableIndex::Tuples { keys, .. }
            | TableIndex::Prio { keys, .. }
            | TableIndex::Scan { keys } => keys,
        }
    }

    /// Adds entry `e` at `o`, which must come after every entry present
    /// (const entries in order, then runtime entries by growing id).
    pub(crate) fn insert(&mut self, o: Order, e: &Entry) {
        match self {
            TableIndex::Tuples {
                keys,
                groups,
                tries,
                n,
            } => {
                let mut masks = Vec::with_capacity(e.keys.len());
                for m in &e.keys {
                    match m {
                        Km::Masked(_, mk) => masks.push(*mk),
                        Km::Range(..) => {
                            // Not an exact/lpm entry: the scan is always right.
                            *self = TableIndex::Scan { keys: keys.clone() };
                            return;
                        }
                    }
                }
                let shaped = keys.iter().zip(&masks).all(|(k, mk)| match k.0 {
                    MatchKind::Lpm => prefix_mask(k.1, mk.count_ones()) == *mk,
                    _ => *mk == mask(k.1),
                });
                if masks.len() != keys.len() || !shaped {
                    *self = TableIndex::Scan { keys: keys.clone() };
                    return;
                }
                let vals = key_values(e);
                for (i, t) in tries.iter_mut().enumerate() {
                    if let Some(t) = t {
                        t.change(vals[i], masks[i].count_ones(), true);
                    }
                }
                *n += 1;
                let gi = match groups.iter().position(|g| g.masks == masks) {
                    Some(gi) => gi,
                    None => {
                        let score = keys
                            .iter()
                            .zip(&masks)
                            .filter(|(k, _)| k.0 == MatchKind::Lpm)
                            .map(|(_, m)| m.count_ones())
                            .sum();
                        groups.push(Group {
                            masks: masks.clone(),
                            score,
                            map: Buckets::default(),
                            n: 0,
                        });
                        // Stable: equal scores keep creation order.
                        groups.sort_by_key(|g| std::cmp::Reverse(g.score));
                        groups.iter().position(|g| g.masks == masks).unwrap_or(0)
                    }
                };
                let g = &mut groups[gi];
                g.n += 1;
                let nk = vals.len();
                let bucket = g.map.get_or_add(hash_masked(&vals, &masks));
                let mut l = bucket.list(nk);
                let at = l.partition_point(|x| x.0 < o);
                // As given (bits outside the mask make an entry that never
                // matches, as in the scan).
                l.insert(at, (o, vals.into_boxed_slice()));
                bucket.set(l);
            }
            TableIndex::Prio { sorted, .. } => {
                let at =
                    sorted.partition_point(|(p, x, _)| *p > e.prio || (*p == e.prio && *x < o));
                sorted.insert(at, (e.prio, o, e.keys.clone().into_boxed_slice()));
            }
            TableIndex::Scan { .. } => {}
        }
    }

    /// Removes entry `e` at `o`.
    pub(crate) fn remove(&mut self, o: Order, e: &Entry) {
        match self {
            TableIndex::Tuples {
                groups, tries, n, ..
            } => {
                let masks: Vec<u128> = e
                    .keys
                    .iter()
                    .map(|m| match m {
                        Km::Masked(_, mk) => *mk,
                        Km::Range(..) => 0,
                    })
                    .collect();
                let vals = key_values(e);
                let Some(g) = groups.iter_mut().find(|g| g.masks == masks) else {
                    return;
                };
                let h = hash_masked(&vals, &masks);
                let Some(i) = g.map.find(h) else {
                    return;
                };
                let bucket = &mut g.map.slots[i];
                let mut l = bucket.list(vals.len());
                let Some(at) = l.iter().position(|x| x.0 == o) else {
                    bucket.set(l);
                    return;
                };
                l.remove(at);
                bucket.set(l);
                if bucket.is_empty() {
                    g.map.remove(h);
                }
                g.n -= 1;
                *n -= 1;
                for (i, t) in tries.iter_mut().enumerate() {
                    if let Some(t) = t {
                        t.change(vals[i], masks[i].count_ones(), false);
                    }
                }
            }
            TableIndex::Prio { sorted, .. } => {
                if let Some(at) = sorted.iter().position(|(_, x, _)| *x == o) {
                    sorted.remove(at);
                }
            }
            TableIndex::Scan { .. } => {}
        }
    }

    /// The winner for key values `kv` (masked to their widths) and, in
    /// `need`, the key bits examined: exactly what [`scan`] gives.
    pub(crate) fn lookup(
        &self,
        consts: &[Entry],
        runtime: &[Entry],
        kv: &[u128],
        need: &mut [u128],
    ) -> Option<Order> {
        match self {
            TableIndex::Tuples {
                keys,
                groups,
                tries,
                n,
            } => {
                // (score, order, group) of the best match so far.
                let mut best: Option<(u32, Order, &Group)> = None;
                for g in groups {
                    if g.n == 0 {
                        continue;
                    }
                    if matches!(best, Some((bs, _, _)) if g.score < bs) {
                        break;
                    }
                    let Some(bucket) = g.map.get(hash_masked(kv, &g.masks)) else {
                        continue;
                    };
                    let matches = |vals: &[u128]| {
                        vals.iter()
                            .zip(&g.masks)
                            .zip(kv)
                            .all(|((x, m), v)| v & m == *x)
                    };
                    // The bucket is in table order (the inline entry
                    // first): its first match is its best (hash
                    // collisions are told apart here).
                    let hit = bucket.first_match(g.masks.len(), matches);
                    if let Some(o) = hit {
                        if best.is_none_or(|(bs, bo, _)| g.score > bs || o < bo) {
                            best = Some((g.score, o, g));
                        }
                    }
                }
                for (i, k) in keys.iter().enumerate() {
                    let Some(nd) = need.get_mut(i) else { break };
                    *nd = if *n == 0 {
                        0
                    } else {
                        match &tries[i] {
                            Some(t) => {
                                // The winner's prefix length for this key.
                                let floor = best
                                    .map_or(0, |b| b.2.masks.get(i).map_or(0, |m| m.count_ones()));
                                prefix_mask(k.1, t.need_len(kv[i], floor))
                            }
                            None => mask(k.1),
                        }
                    };
                }
                best.map(|b| b.1)
            }
            TableIndex::Prio { keys, sorted } => {
                need.iter_mut().for_each(|n| *n = 0);
                let mut best: Option<(i64, Order)> = None;
                for (prio, o, ekeys) in sorted {
                    let (prio, o) = (*prio, *o);
                    if matches!(best, Some((bp, _)) if prio < bp) {
                        break;
                    }
                    if best.is_none() && keys_match(ekeys, kv) {
                        best = Some((prio, o));
                    }
                    for (i, (k, m)) in keys.iter().zip(ekeys.iter()).enumerate() {
                        if let Some(nd) = need.get_mut(i) {
                            *nd |= needed(&k.0, m, kv[i], k.1);
                        }
                    }
                }
                best.map(|b| b.1)
            }
            TableIndex::Scan { keys } => {
                let all = consts
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (const_order(i), e))
                    .chain(runtime.iter().map(|e| (runtime_order(e.id), e)));
                scan(keys, all, kv, need)
            }
        }
    }

    /// Rebuilt from scratch (after the runtime entries were cleared).
    pub(crate) fn rebuild(&mut self, consts: &[Entry], runtime: &[Entry]) {
        let keys = self.keys().to_vec();
        *self = TableIndex::new(&keys, consts);
        for e in runtime {
            self.insert(runtime_order(e.id), e);
        }
    }
}

/// Entry `e`'s key values as a tuple's hash key holds them (a range's
/// low bound: such an entry never reaches a tuple).
fn key_values(e: &Entry) -> Vec<u128> {
    e.keys
        .iter()
        .map(|m| match m {
            Km::Masked(x, _) => *x,
            Km::Range(lo, _) => *lo,
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtime::EntrySpec;

    /// A runtime entry with match `keys` and priority `prio` (action 0,
    /// no data), for the index's and the change log's tests.
    pub(crate) fn entry(id: u64, keys: Vec<Km>, prio: i64) -> Entry {
        Entry {
            id,
            keys,
            action: 0,
            args: Vec::new(),
            prio,
            is_const: false,
            spec: EntrySpec {
                keys: Vec::new(),
                action: String::new(),
                params: Vec::new(),
                priority: None,
            },
            packets: 0,
            bytes: 0,
            last_hit: None,
        }
    }

    /// `locate`'s guess from the first id is checked: with gaps (deleted
    /// entries) it falls back to the search, and absent ids are `None`.
    #[test]
    fn locate_by_guess_and_by_search_after_deletions() {
        let rt: Vec<Entry> = [3, 4, 6, 7].map(|id| entry(id, Vec::new(), 0)).into();
        let at = |id| locate(&rt, runtime_order(id));
        assert_eq!(at(3), Some((true, 0)));
        assert_eq!(at(4), Some((true, 1)), "guess right");
        assert_eq!(at(6), Some((true, 2)), "guess wrong, search");
        assert_eq!(at(7), Some((true, 3)));
        assert_eq!(at(5), None);
        assert_eq!(at(2), None);
        assert_eq!(at(u64::MAX >> 1), None);
        assert_eq!(locate(&[], runtime_order(3)), None);
        assert_eq!(locate(&rt, const_order(2)), Some((false, 2)));
    }

    /// The buckets' open addressing against a set: hashes chosen to share
    /// home slots and to wrap around the end, added and removed at
    /// random (removal shifts later buckets back), through growth; and a
    /// bucket is one 64-byte line.
    #[test]
    fn buckets_find_what_was_added_and_not_what_was_removed() {
        // One bucket, one cache line.
        assert_eq!(
            (
                std::mem::size_of::<Bucket>(),
                std::mem::align_of::<Bucket>()
            ),
            (64, 64)
        );
        let mut r = Rng(11);
        for _round in 0..50 {
            let mut b = Buckets::default();
            let mut set = std::collections::BTreeSet::new();
            for _op in 0..300 {
                // Few homes (low bits), many hashes per home.
                let h = (r.below(40) << 8) | [0, 1, 6, 7, 15, 31][r.below(6) as usize];
                if r.below(3) == 0 {
                    b.remove(h);
                    set.remove(&h);
                } else {
                    let x = b.get_or_add(h);
                    assert!(x.used && x.hash == h);
                    if x.is_empty() {
                        x.set(vec![(h, vec![h as u128].into())]);
                    }
                    set.insert(h);
                }
                assert_eq!(b.n, set.len());
                assert!(b.n * 2 <= b.slots.len().max(2));
                for k in 0..40u64 {
                    for lo in [0, 1, 6, 7, 15, 31] {
                        let h = (k << 8) | lo;
                        let got = b.get(h).map(|x| (x.hash, x.o, x.vals[0]));
                        let want = set.contains(&h).then_some((h, h, h as u128));
                        assert_eq!(got, want, "hash {h:x}");
                    }
                }
            }
        }
    }

    /// Adds (`o`, `key`) to bucket `h` as `TableIndex::insert` does.
    fn bucket_add(b: &mut Buckets, h: u64, o: Order, key: &[u128]) {
        let x = b.get_or_add(h);
        let mut l = x.list(key.len());
        let at = l.partition_point(|e| e.0 < o);
        l.insert(at, (o, key.into()));
        x.set(l);
    }

    /// Removes order `o` from bucket `h` as `TableIndex::remove` does.
    fn bucket_del(b: &mut Buckets, h: u64, o: Order, nk: usize) {
        let Some(i) = b.find(h) else { return };
        let x = &mut b.slots[i];
        let mut l = x.list(nk);
        if let Some(at) = l.iter().position(|e| e.0 == o) {
            l.remove(at);
        }
        x.set(l);
        if x.is_empty() {
            b.remove(h);
        }
    }

    /// Two different keys with one hash (a collision): the inline entry
    /// not matching, the `rest` entry of the other key found; removing
    /// either leaves the other; `set`/`list` keep table order.
    #[test]
    fn a_bucket_tells_colliding_keys_apart() {
        for nk in 1..=3 {
            let (a, c): (Vec<u128>, Vec<u128>) = ((0..nk as u128).collect(), vec![7; nk]);
            for first_a in [true, false] {
                let mut b = Buckets::default();
                let h = 0xffff; // Home: the last slot.
                let (o1, o2) = if first_a { (1, 2) } else { (2, 1) };
                bucket_add(&mut b, h, o1, &a);
                bucket_add(&mut b, h, o2, &c);
                let x = b.get(h).expect("bucket");
                assert_eq!(x.first_match(nk, |v| v == &a[..]), Some(o1));
                assert_eq!(x.first_match(nk, |v| v == &c[..]), Some(o2));
                assert_eq!(x.first_match(nk, |v| v == &[9u128; 3][..nk]), None);
                // The inline entry is the first in table order.
                let i = b.find(h).expect("bucket");
                let x = &mut b.slots[i];
                let l = x.list(nk);
                assert_eq!(
                    l.iter().map(|e| e.0).collect::<Vec<_>>(),
                    vec![1, 2],
                    "nk {nk}"
                );
                x.set(l);
                assert_eq!(x.inline, nk <= INLINE);
                bucket_del(&mut b, h, o1, nk);
                let x = b.get(h).expect("bucket");
                assert_eq!(x.first_match(nk, |v| v == &a[..]), None);
                assert_eq!(x.first_match(nk, |v| v == &c[..]), Some(o2));
                bucket_del(&mut b, h, o2, nk);
                assert!(b.get(h).is_none() && b.n == 0);
            }
        }
    }

    /// Random adds and removes of entries of a few keys on a few
    /// hand-picked hashes (homes at the last slots, so probes wrap;
    /// several keys per hash: collisions), against a map of hash ->
    /// entries in table order; every hash's bucket and first match per
    /// key checked after each step.
    #[test]
    fn buckets_with_colliding_hashes_agree_with_a_map() {
        let seed = seed_from_env(
            "P4_BUCKETS_SEED",
            "buckets_with_colliding_hashes_agree_with_a_map",
        );
        let mut r = Rng(seed);
        let hashes: Vec<u64> = (0..12u64)
            .map(|k| (k << 20) | [0xf_ffff, 0xf_fffe, 0xf_fffd, 0][(k % 4) as usize])
            .collect();
        for round in 0..40 {
            let nk = 1 + round % 3;
            let keys: Vec<Vec<u128>> = (0..4u128).map(|k| vec![k * 3 + 1; nk]).collect();
            let mut b = Buckets::default();
            let mut model: std::collections::HashMap<u64, Vec<(Order, usize)>> =
                std::collections::HashMap::new();
            let mut next: Order = 0;
            for _op in 0..200 {
                let h = hashes[r.below(hashes.len() as u64) as usize];
                let present: Vec<Order> = model
                    .get(&h)
                    .map_or(vec![], |l| l.iter().map(|e| e.0).collect());
                if !present.is_empty() && r.below(5) < 2 {
                    let o = present[r.below(present.len() as u64) as usize];
                    bucket_del(&mut b, h, o, nk);
                    let l = model.get_mut(&h).expect("present");
                    l.retain(|e| e.0 != o);
                    if l.is_empty() {
                        model.remove(&h);
                    }
                } else {
                    // Orders mostly growing, some below the present ones.
                    next += 1 + r.below(3);
                    let o = if r.below(4) == 0 {
                        r.below(next) * 1000 + 500_000
                    } else {
                        next * 1000 + 1_000_000
                    };
                    if present.contains(&o) {
                        continue;
                    }
                    let k = r.below(keys.len() as u64) as usize;
                    bucket_add(&mut b, h, o, &keys[k]);
                    let l = model.entry(h).or_default();
                    let at = l.partition_point(|e| e.0 < o);
                    l.insert(at, (o, k));
                }
                assert_eq!(b.n, model.len(), "seed {seed}");
                for &h in &hashes {
                    let want = model.get(&h);
                    let Some(x) = b.get(h) else {
                        assert!(want.is_none(), "seed {seed}: hash {h:x} lost");
                        continue;
                    };
                    let want = want.unwrap_or_else(|| panic!("seed {seed}: hash {h:x} kept"));
                    assert_eq!(x.hash, h);
                    for (k, key) in keys.iter().enumerate() {
                        let first = want.iter().find(|e| e.1 == k).map(|e| e.0);
                        assert_eq!(
                            x.first_match(nk, |v| v == &key[..]),
                            first,
                            "seed {seed}: hash {h:x} key {k}"
                        );
                    }
                }
            }
        }
    }

    /// A table under test: index and the entries it indexes.
    struct T {
        keys: Vec<(MatchKind, u32)>,
        consts: Vec<Entry>,
        rt: Vec<Entry>,
        ix: TableIndex,
        next: u64,
    }

    impl T {
        fn new(keys: Vec<(MatchKind, u32)>, consts: Vec<Entry>) -> T {
            let ix = TableIndex::new(&keys, &consts);
            let next = consts.len() as u64;
            T {
                keys,
                consts,
                rt: Vec::new(),
                ix,
                next,
            }
        }
        fn add(&mut self, keys: Vec<Km>, prio: i64) -> u64 {
            let id = self.next;
            self.next += 1;
            let e = entry(id, keys, prio);
            self.ix.insert(runtime_order(id), &e);
            self.rt.push(e);
            id
        }
        fn del(&mut self, id: u64) {
            let p = self.rt.iter().position(|e| e.id == id).unwrap();
            let e = self.rt.remove(p);
            self.ix.remove(runtime_order(id), &e);
        }
        fn reference(&self, kv: &[u128]) -> (Option<Order>, Vec<u128>) {
            let mut need = vec![0; self.keys.len()];
            let all = self
                .consts
                .iter()
                .enumerate()
                .map(|(i, e)| (const_order(i), e))
                .chain(self.rt.iter().map(|e| (runtime_order(e.id), e)));
            let b = scan(&self.keys, all, kv, &mut need);
            (b, need)
        }
        fn look(&self, kv: &[u128]) -> (Option<Order>, Vec<u128>) {
            let mut need = vec![0xdead; self.keys.len()];
            let b = self.ix.lookup(&self.consts, &self.rt, kv, &mut need);
            (b, need)
        }
        fn check(&self, kv: &[u128]) -> (Option<Order>, Vec<u128>) {
            let a = self.look(kv);
            assert_eq!(a, self.reference(kv), "key {kv:x?}");
            a
        }
    }

    fn lpm(x: u128, len: u32, w: u32) -> Km {
        let m = prefix_mask(w, len);
        Km::Masked(x & m, m)
    }

    #[test]
    fn lpm_longest_prefix_with_overlaps() {
        let mut t = T::new(vec![(MatchKind::Lpm, 32)], Vec::new());
        let a = t.add(vec![lpm(0x0a00_0000, 8, 32)], 0);
        let b = t.add(vec![lpm(0x0a01_0000, 16, 32)], 0);
        let c = t.add(vec![lpm(0x0a01_0200, 24, 32)], 0);
        let d = t.add(vec![lpm(0, 0, 32)], 0);
        assert!(matches!(t.ix, TableIndex::Tuples { .. }));
        assert_eq!(t.check(&[0x0a01_0203]).0, Some(runtime_order(c)));
        assert_eq!(t.check(&[0x0a01_0303]).0, Some(runtime_order(b)));
        assert_eq!(t.check(&[0x0a02_0303]).0, Some(runtime_order(a)));
        assert_eq!(t.check(&[0x0b00_0000]).0, Some(runtime_order(d)));
        // Examined: 0x0a010303 shares 23 bits with 10.1.2.0/24: 24 bits.
        assert_eq!(t.check(&[0x0a01_0303]).1, vec![prefix_mask(32, 24)]);
        t.del(c);
        assert_eq!(t.check(&[0x0a01_0203]).0, Some(runtime_order(b)));
        assert_eq!(t.check(&[0x0a01_0303]).1, vec![prefix_mask(32, 16)]);
        t.del(b);
        t.del(a);
        t.del(d);
        assert_eq!(t.check(&[0x0a01_0203]), (None, vec![0]));
    }

    /// Lengths `need_len` searched so far, over the table's lpm keys.
    fn searches(ix: &TableIndex) -> u64 {
        match ix {
            TableIndex::Tuples { tries, .. } => tries
                .iter()
                .flatten()
                .map(|t| t.searches.load(std::sync::atomic::Ordering::Relaxed))
                .sum(),
            _ => 0,
        }
    }

    /// The winner's prefix length is `need_len`'s floor: a hit on the
    /// longest length present is not searched, and a longer length
    /// present is still searched (the shortcut applied there would give
    /// the winner's length, fewer bits than the scan examined).
    #[test]
    fn examined_bits_from_the_winner_search_only_longer_lengths() {
        // One prefix length (the bench's 1,000 /28 routes, in small).
        let mut t = T::new(vec![(MatchKind::Lpm, 32)], Vec::new());
        for i in 0..16u128 {
            t.add(vec![lpm(0xc612_0000 + i * 16, 28, 32)], 0);
        }
        let s0 = searches(&t.ix);
        assert_eq!(t.check(&[0xc612_0035]).1, vec![prefix_mask(32, 28)]);
        assert_eq!(searches(&t.ix), s0, "a hit on the longest length searched");
        // A miss has no floor: searched, as the scan.
        t.check(&[0xc613_0035]);
        assert_eq!(searches(&t.ix), s0 + 1);

        // 10.0.0.0/8 and 10.1.2.0/24.
        let mut t = T::new(vec![(MatchKind::Lpm, 32)], Vec::new());
        let a = t.add(vec![lpm(0x0a00_0000, 8, 32)], 0);
        let b = t.add(vec![lpm(0x0a01_0200, 24, 32)], 0);
        let s0 = searches(&t.ix);
        // Winner /24, the longest: no search.
        assert_eq!(
            t.check(&[0x0a01_0205]),
            (Some(runtime_order(b)), vec![prefix_mask(32, 24)])
        );
        assert_eq!(searches(&t.ix), s0);
        // Winner /8, but the /24 shares 23 bits with the key: 24 bits
        // examined, which only the search of the /24s finds.
        assert_eq!(
            t.check(&[0x0a01_0305]),
            (Some(runtime_order(a)), vec![prefix_mask(32, 24)])
        );
        assert_eq!(searches(&t.ix), s0 + 1);
        // Winner /8 and nothing in common past it with the /24: 9 bits.
        assert_eq!(
            t.check(&[0x0a81_0305]),
            (Some(runtime_order(a)), vec![prefix_mask(32, 9)])
        );

        // Two lpm keys: the winner ranks by the sum of its lengths, so
        // it need not have the longest length of each key.
        let mut t = T::new(vec![(MatchKind::Lpm, 32), (MatchKind::Lpm, 16)], Vec::new());
        let a = t.add(vec![lpm(0x0a00_0000, 8, 32), lpm(0xbeef, 16, 16)], 0);
        t.add(vec![lpm(0x0a01_0200, 24, 32), lpm(0, 0, 16)], 0);
        let s0 = searches(&t.ix);
        assert_eq!(
            t.check(&[0x0a01_0205, 0xbeef]),
            (
                Some(runtime_order(a)),
                vec![prefix_mask(32, 24), prefix_mask(16, 16)]
            )
        );
        // Key 0 searched its /24s, key 1 (winner at /16, the longest)
        // nothing.
        assert_eq!(searches(&t.ix), s0 + 1);
    }

    #[test]
    fn exact_keys_of_different_widths() {
        let full = |w: u32| mask(w);
        let mut t = T::new(
            vec![(MatchKind::Exact, 9), (MatchKind::Exact, 48)],
            Vec::new(),
        );
        assert_eq!(t.check(&[1, 2]), (None, vec![0, 0]));
        let a = t.add(
            vec![Km::Masked(0x1ff, full(9)), Km::Masked(0xaabb, full(48))],
            0,
        );
        let b = t.add(
            vec![Km::Masked(3, full(9)), Km::Masked(0xaabb, full(48))],
            0,
        );
        assert_eq!(t.check(&[0x1ff, 0xaabb]).0, Some(runtime_order(a)));
        assert_eq!(t.check(&[3, 0xaabb]).0, Some(runtime_order(b)));
        assert_eq!(t.check(&[3, 0xaabc]), (None, vec![full(9), full(48)]));
        t.del(a);
        assert_eq!(t.check(&[0x1ff, 0xaabb]).0, None);
    }

    #[test]
    fn duplicate_keys_first_in_table_order_wins() {
        // Same key, different priorities in a non-priority table: the
        // first added wins; after deleting it, the second.
        let mut t = T::new(
            vec![(MatchKind::Exact, 8)],
            vec![entry(0, vec![Km::Masked(5, 0xff)], 0)],
        );
        let a = t.add(vec![Km::Masked(5, 0xff)], 7);
        assert_eq!(t.check(&[5]).0, Some(const_order(0)));
        t.consts.clear();
        t.ix.rebuild(&t.consts, &t.rt);
        assert_eq!(t.check(&[5]).0, Some(runtime_order(a)));
    }

    #[test]
    fn priority_ties_and_examined_bits() {
        let mut t = T::new(vec![(MatchKind::Ternary, 16)], Vec::new());
        let a = t.add(vec![Km::Masked(0x0100, 0xff00)], 10);
        let b = t.add(vec![Km::Masked(0x0001, 0x00ff)], 10);
        let c = t.add(vec![Km::Masked(0x0000, 0x0000)], 1);
        let _d = t.add(vec![Km::Masked(0x0101, 0xf0f0)], 20);
        assert!(matches!(t.ix, TableIndex::Prio { .. }));
        // Both a and b match 0x0101 at priority 10: a (first) wins, c is
        // lower and not examined.
        assert_eq!(
            t.check(&[0x0101]),
            (Some(runtime_order(a)), vec![0xffff | 0xf0f0])
        );
        t.del(a);
        assert_eq!(t.check(&[0x0101]).0, Some(runtime_order(b)));
        assert_eq!(t.check(&[0x0202]).0, Some(runtime_order(c)));
    }

    /// The random tests' generator (splitmix64: any seed will do).
    pub(crate) struct Rng(pub(crate) u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix(self.0)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        fn bits(&mut self, w: u32) -> u128 {
            (((self.next() as u128) << 64) | self.next() as u128) & mask(w)
        }
    }

    /// A random key value near the entries (so lookups hit and share
    /// prefixes), or anywhere.
    fn near(r: &mut Rng, t: &T, i: usize, w: u32) -> u128 {
        let es: Vec<&Entry> = t.consts.iter().chain(&t.rt).collect();
        if es.is_empty() || r.below(4) == 0 {
            return r.bits(w);
        }
        let e = es[r.below(es.len() as u64) as usize];
        let base = match e.keys[i] {
            Km::Masked(x, _) => x,
            Km::Range(lo, hi) => lo + (hi - lo) / 2,
        };
        // Flip a few low bits.
        base ^ (r.bits(w) & mask(r.below(u64::from(w) + 1) as u32))
    }

    fn random_km(r: &mut Rng, kind: &MatchKind, w: u32) -> Km {
        // Few distinct values so entries overlap.
        let v = r.bits(w) & !mask(w.saturating_sub(4)) | (r.bits(w) & 3);
        match kind {
            MatchKind::Exact => Km::Masked(v & mask(w), mask(w)),
            MatchKind::Lpm => lpm(v, r.below(u64::from(w) + 1) as u32, w),
            MatchKind::Ternary => {
                let m = r.bits(w) & r.bits(w);
                Km::Masked(v & m, m)
            }
            MatchKind::Optional => {
                if r.below(2) == 0 {
                    Km::Masked(0, 0)
                } else {
                    Km::Masked(v & mask(w), mask(w))
                }
            }
            _ => {
                let a = v & mask(w);
                let b = a.saturating_add(r.bits(w.min(8))) & mask(w);
                Km::Range(a.min(b), a.max(b))
            }
        }
    }

    /// A random test's seed: `var` from the environment (to replay a
    /// failure), else the clock; printed with the test's name.
    pub(crate) fn seed_from_env(var: &str, test: &str) -> u64 {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("{test}: {var}={seed}");
        seed
    }

    #[test]
    fn index_equals_the_scan_on_random_tables() {
        let seed = seed_from_env("P4_INDEX_SEED", "index_equals_the_scan_on_random_tables");
        let mut r = Rng(seed);
        let kinds = [
            MatchKind::Exact,
            MatchKind::Lpm,
            MatchKind::Ternary,
            MatchKind::Range,
            MatchKind::Optional,
        ];
        for _table in 0..300 {
            let nk = 1 + r.below(3) as usize;
            let exact_lpm_only = r.below(2) == 0;
            let keys: Vec<(MatchKind, u32)> = (0..nk)
                .map(|_| {
                    let kind = if exact_lpm_only {
                        kinds[r.below(2) as usize].clone()
                    } else {
                        kinds[r.below(5) as usize].clone()
                    };
                    let w = [1u32, 3, 8, 9, 16, 32, 48, 64, 128][r.below(9) as usize];
                    (kind, w)
                })
                .collect();
            let consts: Vec<Entry> = (0..r.below(3))
                .map(|i| {
                    let ks = keys.iter().map(|k| random_km(&mut r, &k.0, k.1)).collect();
                    entry(i, ks, r.below(4) as i64)
                })
                .collect();
            let mut t = T::new(keys.clone(), consts);
            for _op in 0..60 {
                match r.below(10) {
                    0..=5 => {
                        let ks = keys.iter().map(|k| random_km(&mut r, &k.0, k.1)).collect();
                        t.add(ks, r.below(4) as i64);
                    }
                    6 if !t.rt.is_empty() => {
                        let id = t.rt[r.below(t.rt.len() as u64) as usize].id;
                        t.del(id);
                    }
                    7 if r.below(8) == 0 => {
                        t.rt.clear();
                        t.ix.rebuild(&t.consts, &t.rt);
                    }
                    _ => {}
                }
                for _ in 0..8 {
                    let kv: Vec<u128> = (0..nk).map(|i| near(&mut r, &t, i, keys[i].1)).collect();
                    t.check(&kv);
                }
            }
        }
    }
}
