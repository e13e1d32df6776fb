//! Exact-match cache: the first tier of the userspace fast path.
//!
//! A direct-mapped array indexed by a hash of the whole flow key. A hit costs
//! one hash, one 192-byte compare and a generation check on the megaflow it
//! points to, and skips the megaflow subtables entirely; this is Open
//! vSwitch's EMC. Entries are never invalidated explicitly: an entry whose
//! megaflow was removed fails the generation check in
//! `Classifier::get` and falls through to the megaflow tier.

use nicflow_classifier::RuleId;
use nicflow_flow::{FlowKey, FLOW_WORDS};

/// Hash all words of a key. A multiply-xorshift mix seeded per datapath so
/// that traffic cannot aim collisions at a known seed.
#[inline]
pub fn hash_key(words: &[u64; FLOW_WORDS], seed: u64) -> u64 {
    let mut h = seed;
    for w in words {
        h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    h ^ (h >> 32)
}

#[derive(Clone)]
struct Entry {
    key: FlowKey,
    flow: Option<RuleId>,
}

pub struct Emc {
    entries: Box<[Entry]>,
    mask: usize,
}

impl Emc {
    /// `entries` is rounded up to a power of two; 0 disables the cache.
    pub fn new(entries: usize) -> Self {
        let n = entries.max(1).next_power_of_two();
        Emc {
            entries: vec![
                Entry {
                    key: FlowKey::default(),
                    flow: None
                };
                if entries == 0 { 0 } else { n }
            ]
            .into_boxed_slice(),
            mask: n - 1,
        }
    }

    #[inline]
    pub fn lookup(&self, hash: u64, key: &FlowKey) -> Option<RuleId> {
        let e = self.entries.get(hash as usize & self.mask)?;
        match e.flow {
            Some(id) if e.key == *key => Some(id),
            _ => None,
        }
    }

    #[inline]
    pub fn insert(&mut self, hash: u64, key: &FlowKey, flow: RuleId) {
        if let Some(e) = self.entries.get_mut(hash as usize & self.mask) {
            e.key = *key;
            e.flow = Some(flow);
        }
    }

    pub fn clear(&mut self) {
        for e in self.entries.iter_mut() {
            e.flow = None;
        }
    }
}
