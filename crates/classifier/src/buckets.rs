//! The hash table of one classifier table: bucket heads keyed by the 32-bit
//! hash of the masked key, open addressing with linear probing.
//!
//! Why not `hashbrown`: a bucket is identified by its hash alone (the chain
//! compare checks the rules), so an entry is 8 bytes, `(hash, head)`, and a
//! probe is one load from one array in the common case, where hashbrown
//! reads its control bytes and then, in another array, the entry. The table
//! stays at most a quarter full, so a probe that misses reads 1.1-1.4
//! entries on average (1.5-2.5 at half full), almost always within one
//! cache line.
//!
//! Why a quarter: a lookup probes several tables (5-7 on the ClassBench
//! files where nicflow trails the TupleMerge reference), and a miss that
//! has to step past an occupied slot takes another, poorly predicted, turn
//! of the probe loop. At a quarter full, `cbprobe` on all 24 ClassBench
//! files of docs/results/classifier-classbench.md (sitting G) was faster on
//! 19 and slower on none by more than noise (geometric mean 0.96x; fw4 1K
//! 7% faster); the cost is twice the slots, 8 bytes each.

use crate::classifier::NIL;

/// A bucket: the 32-bit hash of its masked key and the first rule of its
/// chain (`NIL` = empty slot).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) hash: u32,
    pub(crate) head: u32,
}

/// A lookup under way: the slot it reached and the entry read there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe {
    slot: usize,
    entry: Entry,
}

const EMPTY: Entry = Entry { hash: 0, head: NIL };

/// The table grows before more than `1 / LOAD_DIVISOR` of its slots are
/// used (see the module docs for why 4).
const LOAD_DIVISOR: usize = 4;

/// Smallest number of slots once the table holds anything.
const MIN_SLOTS: usize = 8;

#[derive(Clone, Default)]
pub(crate) struct Buckets {
    /// A power of two in length (or empty); at most a quarter of the slots
    /// used.
    slots: Vec<Entry>,
    len: usize,
}

impl Buckets {
    pub(crate) const fn new() -> Self {
        Buckets {
            slots: Vec::new(),
            len: 0,
        }
    }

    /// Number of buckets.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated (for memory accounting).
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    #[inline(always)]
    fn home(&self, hash: u32) -> usize {
        hash as usize & (self.slots.len().wrapping_sub(1))
    }

    /// Slot index of the bucket with this hash, if any.
    #[inline(always)]
    fn position(&self, hash: u32) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let m = self.slots.len() - 1;
        let mut i = hash as usize & m;
        loop {
            let e = self.slots[i];
            if e.head == NIL {
                return None;
            }
            if e.hash == hash {
                return Some(i);
            }
            i = (i + 1) & m;
        }
    }

    /// The first step of a lookup of `hash`: its home slot and that slot's
    /// entry, loaded now. A classifier lookup starts the next table's probe
    /// before it walks the current table's chain, so this load (and the
    /// hash before it) overlap that walk instead of following it.
    #[inline(always)]
    pub(crate) fn start(&self, hash: u32) -> Probe {
        match self.slots.get(self.home(hash)) {
            Some(&e) => Probe {
                slot: self.home(hash),
                entry: e,
            },
            None => Probe {
                slot: 0,
                entry: EMPTY,
            },
        }
    }

    /// Head of the bucket with this hash, going on from [`start`](Self::start).
    #[inline(always)]
    pub(crate) fn find_from(&self, hash: u32, p: Probe) -> Option<u32> {
        let (mut i, mut e) = (p.slot, p.entry);
        let m = self.slots.len().wrapping_sub(1);
        loop {
            if e.head == NIL {
                return None;
            }
            if e.hash == hash {
                return Some(e.head);
            }
            i = (i + 1) & m;
            e = self.slots[i];
        }
    }

    /// Head of the bucket with this hash.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u32) -> Option<u32> {
        self.position(hash).map(|i| self.slots[i].head)
    }

    /// The head of the bucket with this hash, to change it.
    #[inline]
    pub(crate) fn find_mut(&mut self, hash: u32) -> Option<&mut u32> {
        let i = self.position(hash)?;
        Some(&mut self.slots[i].head)
    }

    /// Adds a bucket; there must be none with this hash.
    pub(crate) fn insert(&mut self, hash: u32, head: u32) {
        debug_assert!(self.position(hash).is_none());
        if LOAD_DIVISOR * (self.len + 1) > self.slots.len() {
            self.grow();
        }
        let m = self.slots.len() - 1;
        let mut i = hash as usize & m;
        while self.slots[i].head != NIL {
            i = (i + 1) & m;
        }
        self.slots[i] = Entry { hash, head };
        self.len += 1;
    }

    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; n]);
        let m = n - 1;
        for e in old.into_iter().filter(|e| e.head != NIL) {
            let mut i = e.hash as usize & m;
            while self.slots[i].head != NIL {
                i = (i + 1) & m;
            }
            self.slots[i] = e;
        }
    }

    /// Removes the bucket with this hash; false if there is none. Later
    /// entries of its probe run move back (no tombstones), so lookups never
    /// slow down with churn.
    pub(crate) fn remove(&mut self, hash: u32) -> bool {
        let Some(mut hole) = self.position(hash) else {
            return false;
        };
        let m = self.slots.len() - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & m;
            let e = self.slots[j];
            if e.head == NIL {
                break;
            }
            // `e` may fill the hole if its home is not in (hole, j]
            // (cyclically): then the hole lies on its probe run.
            let home = self.home(e.hash);
            let between = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !between {
                self.slots[hole] = e;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Every bucket, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter(|e| e.head != NIL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inserts and removals, with hashes crowded onto a few home slots so
    /// probe runs wrap and interleave, against a `HashMap`.
    #[test]
    fn against_a_map() {
        let mut b = Buckets::new();
        let mut map = std::collections::HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct homes: low bits from a small set, high bits free.
            let hash = ((x >> 32) as u32 & !0xf) | (x as u32 % 5);
            if x & 3 == 0 {
                assert_eq!(b.remove(hash), map.remove(&hash).is_some());
            } else if let std::collections::hash_map::Entry::Vacant(v) = map.entry(hash) {
                v.insert(step);
                b.insert(hash, step);
            } else {
                *b.find_mut(hash).unwrap() = step;
                map.insert(hash, step);
            }
            if step % 1000 == 0 {
                for (&h, &v) in &map {
                    assert_eq!(b.find(h), Some(v));
                }
            }
        }
        assert_eq!(b.len(), map.len());
        assert_eq!(b.iter().count(), map.len());
        for (&h, &v) in &map {
            assert_eq!(b.find(h), Some(v));
        }
        assert!(LOAD_DIVISOR * b.len() <= b.capacity());
    }
}
