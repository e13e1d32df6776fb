//! # nicflow-classifier: tuple space search over fixed-width keys
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
//!   words: a 5-tuple mask over a 20-word key reads 4 words, not 20. The hash
//!   is foldhash keyed with a random seed per classifier, because keys come
//!   from untrusted traffic and a predictable hash would let an attacker turn
//!   every probe into a long collision chain.
//!
//! Inside a subtable, rules with the same masked key but different priorities
//! (legal: same match, different priority) share one hash entry and are kept
//! in a short chain sorted by priority, highest first; only the head is a
//! lookup candidate. A rule with the same masked key, mask *and* priority as
//! an existing one replaces it.
//!
//! ## Tie-breaking
//!
//! OpenFlow leaves overlapping rules of equal priority undefined; we define
//! it so that results are deterministic and testable. Subtables with equal
//! `max_priority` are ordered by creation, older first, and among matching
//! rules of equal highest priority the one in the subtable visited first
//! wins. (Two rules of one subtable can never tie on the same key: equal
//! masked key and priority means replacement.) [`LinearClassifier`] computes
//! the same answer naively and serves as the test oracle.
//!
//! ## Wildcard tracking
//!
//! [`Classifier::lookup_wc`] ORs into a caller-supplied mask the mask of
//! every subtable it actually probed; subtables skipped thanks to the early
//! exit contribute nothing. The guarantee: if `r = lookup_wc(k, wc)` then for
//! every key `k2` with `k2 & wc == k & wc`, `lookup(k2) == r`. That is
//! exactly the condition for the megaflow `(k & wc, wc) -> r` to be safe.
//!
//! ## Complexity
//!
//! With `S` subtables, `P` distinct priorities in a subtable and `w` non-zero
//! mask words:
//!
//! * `lookup`: `O(S * w)` worst case, independent of the number of rules;
//!   usually fewer subtables thanks to the early exit. No allocation.
//! * `insert` / `remove`: `O(w + chain + log P + S)`; the `S` term is moving
//!   one subtable within the sorted subtable vector when its `max_priority`
//!   changes, or creating/dropping a subtable.
//! * Memory: one slab slot per rule (key, priority, value, a few indices)
//!   plus an 8-byte hash entry per distinct masked key.
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

mod classifier;
mod linear;
#[cfg(test)]
mod proptests;

#[doc(hidden)]
pub mod bench_support;

pub use classifier::Classifier;
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
    fn send_sync() {
        fn check<X: Send + Sync>() {}
        check::<Classifier<4, u32>>();
        check::<LinearClassifier<4, u32>>();
        check::<RuleId>();
    }
}
