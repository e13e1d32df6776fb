//! # nicflow-classifier: tuple space search and TupleMerge over fixed-width keys
//!
//! A *classifier* holds rules, each made of a key, a mask and a priority, and
//! answers "which rule is the best match for this packet key?". A key is a
//! fixed-size array of `W` 64-bit words (`[u64; W]`); a rule matches key `k`
//! when `k & rule.mask == rule.key & rule.mask`, word by word. A 1 bit in a
//! mask means "this bit must match"; a 0 bit is a wildcard. Among all
//! matching rules the one with the highest priority wins.
//!
//! It serves two masters in nicflow:
//!
//! 1. **OpenFlow tables** (slow path): arbitrary bitmasks, many priorities,
//!    and *wildcard tracking* ([`Classifier::lookup_wc`]): the lookup reports
//!    which key bits it looked at, so that the slow path can install the
//!    widest megaflow that is still correct.
//! 2. **The megaflow cache** (datapath): masked entries, all with the same
//!    priority and non-overlapping by construction, so the first hit wins and
//!    no wildcards are tracked ([`Classifier::lookup`]).
//!
//! ```
//! use nicflow_classifier::Classifier;
//!
//! let mut cls: Classifier<2, &str> = Classifier::new();
//! cls.insert(&[0x0a00_0000, 0], &[0xff00_0000, 0], 10, "10.0.0.0/8");
//! cls.insert(&[0, 0], &[0, 0], 0, "default");
//!
//! let mut wc = [0u64; 2];
//! let (_id, hit) = cls.lookup_wc(&[0x0a01_0203, 80], &mut wc).unwrap();
//! assert_eq!(*hit, "10.0.0.0/8");
//! // Only the /8 was examined: the catch-all cannot beat priority 10.
//! assert_eq!(wc, [0xff00_0000, 0]);
//! ```
//!
//! ## Algorithm: tuple space search
//!
//! This follows Open vSwitch's `lib/classifier.h`. Real rule sets use few
//! distinct masks compared to the number of rules (an ACL of 100,000 rules
//! over IPv4 5-tuples with prefix lengths in {8,16,24,32} and exact-or-any
//! ports has at most 64 masks). So rules are grouped by mask: each distinct
//! mask gets a *subtable*, a hash table indexed by the masked key. Looking up
//! a key in one subtable is a single hash probe, whatever the number of rules
//! in it, so a full lookup costs one probe per subtable instead of one
//! comparison per rule.
//!
//! Two refinements keep that cost down:
//!
//! * **Priority early exit.** Each subtable knows the highest priority among
//!   its rules (`max_priority`), and subtables are kept sorted by it, highest
//!   first. Lookup walks them in that order and stops as soon as the next
//!   subtable's `max_priority` cannot beat the best match found so far. In the
//!   megaflow cache, where every rule has the same priority, this means "stop
//!   at the first hit".
//! * **Sparse hashing.** A subtable precomputes the list of words in which its
//!   mask is non-zero. Hashing and comparing a masked key touch only those
//!   words: a 5-tuple mask over the 32-word key reads 4 words, not 32. The hash
//!   is foldhash keyed with a random seed per classifier, because keys come
//!   from untrusted traffic and a predictable hash would let an attacker turn
//!   every probe into a long collision chain.
//!
//! Rules with the same masked key and mask but different priorities (legal:
//! same match, different priority) form one *match group*, kept sorted by
//! priority, highest first; only its head can ever be the answer, since the
//! others match exactly the same keys. A rule with the same masked key, mask
//! *and* priority as an existing one replaces it.
//!
//! The weakness of tuple space search is that a lookup costs one probe per
//! distinct mask: with random priorities the early exit rarely fires, and on
//! the benchmark below a hit costs about 41 ns at 10 rules (9 masks) but
//! 1,100 ns at 100,000 rules (64 masks).
//!
//! ## TupleMerge mode
//!
//! [`Classifier::with_relax`] builds a classifier that uses TupleMerge
//! (Daly & Torng, "TupleMerge: Fast Software Packet Processing for Online
//! Packet Classification", IEEE/ACM ToN 2019) to decouple the number of hash
//! tables from the number of masks. [`Classifier::new`] keeps pure tuple
//! space search, unchanged.
//!
//! * **Table masks.** Each table has a mask `M_T` and may hold any rule whose
//!   mask contains it (`rule.mask & M_T == M_T`); rules are hashed by
//!   `key & M_T`. So rules with masks 10.1.2.0/24 and 10.1.2.3/32 can share a
//!   table with `M_T` = /16: both hash by their first 16 bits.
//! * **Buckets.** A hash bucket holds a chain of match groups, possibly of
//!   different masks, sorted by the priority of their heads (highest first;
//!   equal priorities in insertion order). A table lookup finds the bucket of
//!   `key & M_T` and walks the chain: the first head with
//!   `key & rule.mask == rule.key` is the table's best match. A bucket is
//!   found by the 32-bit hash of `key & M_T` alone, with no key check of
//!   its own: each compared head is checked on its whole mask, which
//!   contains `M_T`, and carries that mask and its key words inline, so a
//!   probe reads the hash table and then the rules it compares, nothing
//!   else (masked keys that share a 32-bit hash share a bucket; the seed is
//!   random per classifier). Tuple space search is the special case with
//!   one group per bucket. The walk also stops at the first head that
//!   cannot beat the best match of earlier tables.
//! * **Placement.** A new rule joins its match group if it has one;
//!   otherwise it goes to the existing table with the most specific `M_T`
//!   that can hold it (the oldest on a tie), and if there is none, to a new
//!   table with `M_T = relax(rule.mask) & rule.mask`. `relax` is the caller's
//!   knowledge of the key layout: shorten address prefixes, drop ports
//!   (see `bench_support::relax_flowkey_5tuple` for `FlowKey`). All 64 masks
//!   of the benchmark then fit in 3 tables. A new table first *absorbs*
//!   every existing table whose `M_T` strictly contains its own, when all
//!   of that table's match groups fit its buckets at a quarter of the collision
//!   limit: rules mostly arrive from the highest priority down, so without
//!   this the specific tables made first keep high top priorities and
//!   every lookup whose answer is a lower rule probes them (ClassBench fw2
//!   10K: 9.6 tables probed per lookup before, 2.8 after;
//!   docs/results/classifier-classbench.md, issue 36).
//! * **Collision limit.** Merging trades probes for comparisons, and a
//!   bucket of a coarse table could collect every rule of a busy prefix. So
//!   a bucket may hold at most `c` match groups
//!   ([`Classifier::with_collision_limit`], default
//!   [`DEFAULT_COLLISION_LIMIT`]); the insert that exceeds it *splits* the
//!   bucket: it picks a strictly more specific mask `M'` that at least one
//!   group of the chain contains, and moves every group of the chain whose
//!   mask contains `M'` to the table with mask `M'` (created if needed), where
//!   they hash on more bits. Candidates for `M'` are the intersection `I` of the
//!   chain's masks; `M_T` plus one maximal run of consecutive bits of `I`
//!   beyond `M_T` (one field, or the rest of a prefix); the masks of
//!   existing tables between `M_T` and some chain mask; and, for each mask
//!   `m` in the chain, `m`, its relaxation (plus `M_T`) and its intersection
//!   with the newest group's mask. The choice prefers an `M'` under which
//!   the moved groups fit the limit, then the one moving the most groups
//!   (an existing table counting one more), then the most general. The
//!   single-run candidates keep the tables few: buckets of different masks
//!   split on the same extra field and share one table, where the whole
//!   intersection made one table per mask combination
//!   (docs/results/classifier-classbench.md). Each move
//!   shrinks the bucket and goes to a strictly larger mask, so repeating
//!   while the bucket (or a target bucket) overflows terminates. Hence a
//!   table lookup compares at most `c` rules however many rules share a
//!   (relaxed) mask; only identical matches can pile up, in match groups,
//!   which are never walked.
//! * **Removal** unlinks the rule (promoting the next rule of its match
//!   group, which moves down the chain to its own priority), maintains
//!   `max_priority`, and drops emptied tables. Tables are not merged back.
//!
//! A table keeps `max_priority` and the table order and early exit are the
//! same as in tuple space search. What the mode costs: inserts probe every
//! table that could hold the rule's match group (a few, by design), and a
//! rule stores its insertion number and mask index (masks are interned).
//!
//! ## Tie-breaking
//!
//! OpenFlow leaves overlapping rules of equal priority undefined; we define
//! it so that results are deterministic and testable. Tables with equal
//! `max_priority` are ordered by creation, older first; among matching
//! rules of equal highest priority, the one whose table comes first in that
//! order wins, and within a table the one inserted first (a replacing rule
//! counts as inserted when the rule it replaced was).
//!
//! * **Tuple space search**: two rules of one subtable can never tie on the
//!   same key (equal masked key and priority means replacement), so the
//!   winner is a function of the rule set and the creation order of the
//!   masks. [`LinearClassifier::lookup`] computes it naively and is the test
//!   oracle.
//! * **TupleMerge**: which table a rule lives in depends on the history of
//!   inserts and splits, so the winner among ties is deterministic for a
//!   given sequence of operations but not a function of the rule set. The
//!   tests brute-force it with [`LinearClassifier::lookup_ranked`], ranking
//!   each rule by (position of its table, insertion number); without ties the
//!   answer is the same as [`LinearClassifier::lookup`]'s.
//!
//! ## Wildcard tracking
//!
//! [`Classifier::lookup_wc`] ORs into a caller-supplied mask the bits the
//! answer depends on: the table mask `M_T` of every table it examined
//! (tables skipped thanks to the early exit contribute nothing), and the
//! mask of every rule it compared in a bucket chain. The guarantee: if
//! `r = lookup_wc(k, wc)` then for every key `k2` with `k2 & wc == k & wc`,
//! `lookup(k2) == r`. That is exactly the condition for the megaflow
//! `(k & wc, wc) -> r` to be safe.
//!
//! Why it holds, by induction over the tables in lookup order: the lookups
//! of `k` and `k2` start with the same best match (none). Given the same
//! best match before a table, both make the same early-exit decision (it
//! depends only on `max_priority` and the best match). If the table is
//! examined, `M_T ⊆ wc`, so `k2 & M_T == k & M_T`: both probe the same
//! bucket (the same hash), or both find none. Walking the chain, both stop at
//! the same head for "cannot beat the best" (priority only); every head
//! compared has its mask in `wc` (a head whose mask is `M_T` adds nothing),
//! so it matches `k2` iff it matches `k`. Heads after the one that matched are not looked
//! at by either lookup. So both leave the table with the same best match,
//! and end with the same answer. Rules never compared (other groups'
//! members, later heads, skipped tables) cannot matter: the lookup of `k2`
//! does not look at them either. In tuple space search every compared head
//! has mask `M_T`, so `wc` is exactly the OR of the subtable masks, as
//! before.
//!
//! ## Port ranges
//!
//! [`Classifier::insert_ranges`] adds a rule with up to [`MAX_RANGES`] range
//! conditions on 16-bit fields ([`FieldRange`], e.g. `tp_dst` in `1000..=1999`)
//! instead of the up to 30 prefix masks per range (900 per rule with two) an
//! OpenFlow match needs. The rule's mask holds the longest prefix the range's
//! bounds share (`/16` for one port, `/0` for `1..=65535`), so tables hash on
//! it as on any mask bits, as TupleMerge places a range in a tuple whose port
//! length covers it; a range that is itself a prefix block is just mask bits.
//! The bucket chain compares the real range after the mask. A range is part
//! of a match's identity, so rules differing only in their ranges are separate
//! groups of one bucket: no table mask can tell them apart, and such a bucket
//! may exceed the collision limit (nothing else can).
//!
//! Wildcard tracking stays exact: a range test ORs into `wc` the field prefix
//! its answer depends on ([`FieldRange::decisive_len`]): inside the range, the
//! largest aligned block around the value that lies within it; below `lo`
//! (above `hi`), the prefix one bit longer than the one the value shares with
//! `lo` (`hi`), since every value with it is below `lo` (above `hi`) too. Every
//! key agreeing on those bits gets the same answer from the test, so the
//! induction below goes through unchanged. The OpenFlow tables, whose matches
//! are masks, never insert ranges.
//!
//! ## Complexity
//!
//! With `S` tables, `P` distinct priorities in a table, `w` non-zero mask
//! words and collision limit `c` (`c = 1` for tuple space search):
//!
//! * `lookup`: `O(S * c * w)` worst case, independent of the number of
//!   rules; usually fewer tables thanks to the early exit. No allocation.
//! * `insert` / `remove`: `O(w + c + log P + S)`, plus in TupleMerge mode
//!   one probe per table that could hold the rule's match group (`O(S * (w +
//!   c))`) and, rarely, a split (`O(c^3)` to choose `M'`, then one move per
//!   group). The `S` term is moving a table within the sorted table vector
//!   when its `max_priority` changes, or creating/dropping a table.
//! * Memory: per rule, a 128-byte record that is all a lookup reads
//!   (priority, links, ranges, the key on its mask's non-zero words, up to
//!   8, the widest word in the first cache line so that most failing
//!   compares read only that line) in a dense array, and apart from it the
//!   full key and the value;
//!   per bucket, an 8-byte hash entry in a table kept at most a quarter full;
//!   per distinct mask, 64 bytes of mask words shared by its rules.
//!
//! ## Thread safety
//!
//! Plain Rust ownership, no interior mutability: writes take `&mut self`,
//! lookups take `&self`, and `Classifier<W, T>` is `Send + Sync` whenever `T`
//! is. Concurrent readers with a concurrent writer (OVS's RCU scheme) are out
//! of scope; callers that need it publish a new classifier or use a lock.
//!
//! ## Handles
//!
//! [`RuleId`] is a slab index plus a generation. A handle stays valid while
//! its rule lives and is never handed out again afterwards (a slot whose
//! generation counter would wrap is retired), so a stale handle cannot alias
//! a newer rule; it just yields `None`. Handles are specific to the
//! classifier that issued them.

mod buckets;
mod classifier;
mod linear;
#[cfg(test)]
mod proptests;

#[doc(hidden)]
pub mod bench_support;

/// The relaxation nicflow's OpenFlow tables use in merge mode: IPv4 prefixes
/// cut to /24, /16 or /8, IPv6 to /64 or /32, transport ports wildcarded,
/// everything else kept (see [`bench_support::relax_flowkey_5tuple`]).
pub use bench_support::relax_flowkey_5tuple as relax_flowkey;

pub use classifier::{Classifier, DEFAULT_COLLISION_LIMIT};

/// Most [`FieldRange`]s one rule may carry (a source and a destination port).
pub const MAX_RANGES: usize = 2;

/// A range condition on a 16-bit field of the key, such as a transport
/// port: bits `shift..shift + 16` of word `word` must lie in `lo..=hi`.
///
/// Rule sets written for firewalls (ClassBench's fw and acl families,
/// iptables `--dport 1000:1999`) use arbitrary port ranges. Split into
/// prefixes, one range becomes up to 30 masks and a rule with two ranges
/// the cross product (fw1 10K: 3.4 entries per rule); kept as a range, the
/// rule is one entry whose mask holds the longest prefix `lo` and `hi`
/// share, and the bucket chain compares the real range
/// ([`Classifier::insert_ranges`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct FieldRange {
    pub word: u8,
    pub shift: u8,
    pub lo: u16,
    pub hi: u16,
}

impl FieldRange {
    /// The field's value in `key`.
    #[inline(always)]
    pub fn value<const W: usize>(&self, key: &[u64; W]) -> u16 {
        (key[self.word as usize] >> self.shift) as u16
    }

    /// Does `key` lie in the range?
    #[inline(always)]
    pub fn contains<const W: usize>(&self, key: &[u64; W]) -> bool {
        let v = self.value(key);
        self.lo <= v && v <= self.hi
    }

    /// Length of the longest prefix `lo` and `hi` share: every value of the
    /// range has it, so it is the part of the field a hash table can key on.
    #[inline]
    pub fn prefix_len(&self) -> u32 {
        (self.lo ^ self.hi).leading_zeros()
    }

    /// Is the range exactly the block of its common prefix (so a mask says
    /// the same thing)?
    #[inline]
    pub fn is_prefix(&self) -> bool {
        let low = low_bits16(16 - self.prefix_len());
        self.lo & low == 0 && self.hi & low == low
    }

    /// The field's bits in word `word` for a prefix of `len` bits.
    #[inline]
    pub fn word_mask(&self, len: u32) -> u64 {
        u64::from(!low_bits16(16 - len)) << self.shift
    }

    /// The prefix length (of the field) on which the answer "is `v` in the
    /// range?" depends, given that `v` shares the range's common prefix:
    /// inside, the largest aligned block around `v` within the range; below
    /// `lo` (above `hi`), one bit past where `v` parts from `lo` (`hi`),
    /// since every value with that longer prefix is below `lo` (above `hi`)
    /// too. What [`Classifier::lookup_wc`] un-wildcards for a range test.
    pub fn decisive_len(&self, v: u16) -> u32 {
        if v < self.lo {
            return ((v ^ self.lo).leading_zeros() + 1).min(16);
        }
        if v > self.hi {
            return ((v ^ self.hi).leading_zeros() + 1).min(16);
        }
        let mut len = self.prefix_len();
        loop {
            let low = low_bits16(16 - len);
            let (a, b) = (v & !low, v | low);
            if a >= self.lo && b <= self.hi {
                return len;
            }
            len += 1;
        }
    }
}

/// The `n` low bits of a `u16` (`n <= 16`).
#[inline]
fn low_bits16(n: u32) -> u16 {
    if n >= 16 {
        u16::MAX
    } else {
        (1u16 << n) - 1
    }
}

/// Why [`Classifier::insert_ranges`] refused a rule (the classifier is
/// unchanged).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("at most {MAX_RANGES} ranges per rule, got {0}")]
    TooMany(usize),
    #[error("range field at word {word} bit {shift} is outside the key")]
    OutOfKey { word: u8, shift: u8 },
    #[error("empty range {lo}..={hi}")]
    Empty { lo: u16, hi: u16 },
    #[error("two ranges overlap the same key bits (word {0})")]
    Overlap(u8),
}
pub use linear::LinearClassifier;

/// Stable handle to a rule.
///
/// Copyable and cheap to store in other structures (flow tables, stats);
/// the generation makes a handle to a removed or replaced rule harmless.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct RuleId {
    index: u32,
    generation: u32,
}

impl RuleId {
    #[inline]
    pub(crate) const fn new(index: u32, generation: u32) -> Self {
        RuleId { index, generation }
    }

    /// A handle to something kept outside any classifier (the P4 slow
    /// path's sets of counters to credit), in the same place a rule's handle
    /// goes. No classifier ever returns one: its generation is reserved.
    #[inline]
    pub const fn external(n: u32) -> Self {
        RuleId {
            index: n,
            generation: u32::MAX,
        }
    }

    /// The number given to [`RuleId::external`], or `None` for a rule's.
    #[inline]
    pub const fn external_index(self) -> Option<u32> {
        if self.generation == u32::MAX {
            Some(self.index)
        } else {
            None
        }
    }

    #[inline]
    pub(crate) const fn index(self) -> u32 {
        self.index
    }

    #[inline]
    pub(crate) const fn generation(self) -> u32 {
        self.generation
    }
}

/// A borrowed view of one rule, as returned by iteration and [`Classifier::rule`].
///
/// `key` is stored masked, so `key & !mask == 0` always holds.
#[derive(Debug)]
pub struct RuleRef<'a, const W: usize, T> {
    pub id: RuleId,
    pub key: &'a [u64; W],
    pub mask: &'a [u64; W],
    pub priority: u32,
    pub value: &'a T,
}

// Manual impls: a derive would needlessly require `T: Clone`.
impl<const W: usize, T> Clone for RuleRef<'_, W, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<const W: usize, T> Copy for RuleRef<'_, W, T> {}

/// `a & m == b & m`, word by word: does `a` match `b` under mask `m`?
#[inline]
pub fn masked_eq<const W: usize>(a: &[u64; W], b: &[u64; W], m: &[u64; W]) -> bool {
    a.iter().zip(b).zip(m).all(|((a, b), m)| (a ^ b) & m == 0)
}

/// `key & mask`, word by word.
#[inline]
pub fn apply_mask<const W: usize>(key: &[u64; W], mask: &[u64; W]) -> [u64; W] {
    std::array::from_fn(|i| key[i] & mask[i])
}

/// Is every bit set in `inner` also set in `outer`? (`inner` is at least as
/// wide a wildcard as `outer`.)
#[inline]
pub fn mask_is_subset<const W: usize>(inner: &[u64; W], outer: &[u64; W]) -> bool {
    inner.iter().zip(outer).all(|(i, o)| i & !o == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        let a = [0b1010u64, 7];
        let b = [0b1000u64, 5];
        assert!(masked_eq(&a, &b, &[0b1000, 0b101]));
        assert!(!masked_eq(&a, &b, &[0b0010, 0]));
        assert_eq!(apply_mask(&a, &[0b0011, !0]), [0b0010, 7]);
        assert!(mask_is_subset(&[0b01, 0], &[0b11, 1]));
        assert!(!mask_is_subset(&[0b100, 0], &[0b11, 1]));
    }

    #[test]
    fn probes_and_memory() {
        let mut c: Classifier<2, u32> = Classifier::new();
        c.insert(&[1, 0], &[!0, 0], 10, 1);
        c.insert(&[0, 2], &[0, !0], 5, 2);
        // A hit in the first table: the early exit skips the second.
        assert_eq!(c.lookup_probes(&[1, 2]).1, 1);
        let (hit, n) = c.lookup_probes(&[3, 2]);
        assert_eq!((hit.map(|r| *r.1), n), (Some(2), 2));
        assert_eq!(c.lookup_probes(&[3, 3]), (None, 2));
        let small = c.memory_bytes();
        for i in 0..1000 {
            c.insert(&[i, 0], &[!0, 0], 10, 0);
        }
        assert!(c.memory_bytes() > small + 1000 * std::mem::size_of::<[u64; 2]>());
    }

    #[test]
    fn send_sync() {
        fn check<X: Send + Sync>() {}
        check::<Classifier<4, u32>>();
        check::<LinearClassifier<4, u32>>();
        check::<RuleId>();
    }
}
