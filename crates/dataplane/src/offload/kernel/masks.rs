//! The mask slots of `dp_masks`: which megaflow masks the program tries,
//! in slot order, and how many flows use each.
//!
//! The program tries every active slot below `n_masks` for every frame, so
//! the number of distinct masks is the cost of a miss (as in the megaflow
//! cache's tuple space search) and the table is small and bounded. A mask
//! is reference counted by the flows installed with it; the last flow's
//! removal frees the slot, and the lowest free slot is reused first so
//! `n_masks` stays as small as the live masks allow.

use super::layout::DpKey;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    mask: DpKey,
    refs: u32,
}

/// Userspace's copy of the mask slots (the map is written from it).
#[derive(Debug, Default)]
pub struct MaskTable {
    slots: Vec<Option<Slot>>,
    /// foldhash, not SipHash: acquired and released per installed flow.
    by_mask: HashMap<DpKey, u32, foldhash::fast::RandomState>,
    capacity: u32,
}

/// Result of [`MaskTable::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub slot: u32,
    /// The slot was free: the caller must write the mask to the map
    /// before installing flows that use it.
    pub new: bool,
}

impl MaskTable {
    pub fn new(capacity: u32) -> MaskTable {
        MaskTable {
            slots: Vec::new(),
            by_mask: HashMap::default(),
            capacity,
        }
    }

    /// A reference to `mask`'s slot, allocating one if needed; `None`
    /// when every slot holds another mask.
    pub fn acquire(&mut self, mask: &DpKey) -> Option<Acquired> {
        if let Some(&slot) = self.by_mask.get(mask) {
            if let Some(Some(s)) = self.slots.get_mut(slot as usize) {
                s.refs += 1;
                return Some(Acquired { slot, new: false });
            }
        }
        let free = self.slots.iter().position(Option::is_none);
        let slot = match free {
            Some(i) => i,
            None if (self.slots.len() as u32) < self.capacity => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return None,
        };
        self.slots[slot] = Some(Slot {
            mask: *mask,
            refs: 1,
        });
        self.by_mask.insert(*mask, slot as u32);
        Some(Acquired {
            slot: slot as u32,
            new: true,
        })
    }

    /// Drop one reference; `true` if the slot became free (the caller
    /// deactivates it in the map *after* removing the flow).
    pub fn release(&mut self, slot: u32) -> bool {
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            return false;
        };
        let Some(s) = entry else {
            return false;
        };
        s.refs -= 1;
        if s.refs > 0 {
            return false;
        }
        self.by_mask.remove(&s.mask);
        *entry = None;
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        true
    }

    /// Slots `0..n_masks()` are the ones the program must try.
    pub fn n_masks(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Distinct masks in use.
    pub fn len(&self) -> usize {
        self.by_mask.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_mask.is_empty()
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// One more flow found in the kernel using `mask` in `slot` (a pinned
    /// engine adopted after a restart). False when the slot is out of
    /// range or already holds another mask (the entry is then stale).
    pub fn adopt(&mut self, slot: u32, mask: &DpKey) -> bool {
        if slot >= self.capacity {
            return false;
        }
        let i = slot as usize;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        match &mut self.slots[i] {
            Some(s) if s.mask == *mask => {
                s.refs += 1;
                true
            }
            Some(_) => false,
            e @ None => {
                if self.by_mask.contains_key(mask) {
                    return false;
                }
                *e = Some(Slot {
                    mask: *mask,
                    refs: 1,
                });
                self.by_mask.insert(*mask, slot);
                true
            }
        }
    }

    /// Flows using the mask in `slot`.
    pub fn refs(&self, slot: u32) -> u32 {
        match self.slots.get(slot as usize) {
            Some(Some(s)) => s.refs,
            _ => 0,
        }
    }

    pub fn mask(&self, slot: u32) -> Option<&DpKey> {
        match self.slots.get(slot as usize) {
            Some(Some(s)) => Some(&s.mask),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(n: u32) -> DpKey {
        DpKey {
            nw_src: n,
            ..DpKey::default()
        }
    }

    #[test]
    fn adopted_slots_keep_their_numbers_and_refuse_conflicts() {
        let mut t = MaskTable::new(4);
        assert!(t.adopt(2, &mask(7)));
        assert!(t.adopt(2, &mask(7)));
        assert_eq!((t.refs(2), t.n_masks()), (2, 3));
        // Another mask in a taken slot, the same mask in a second slot, a
        // slot beyond the table: stale entries.
        assert!(!t.adopt(2, &mask(8)));
        assert!(!t.adopt(0, &mask(7)));
        assert!(!t.adopt(4, &mask(9)));
        // New flows reuse the adopted slot, or take a free lower one.
        assert_eq!(
            t.acquire(&mask(7)).map(|a| (a.slot, a.new)),
            Some((2, false))
        );
        assert_eq!(
            t.acquire(&mask(1)).map(|a| (a.slot, a.new)),
            Some((0, true))
        );
    }

    #[test]
    fn refcounts_reuse_and_capacity() {
        let mut t = MaskTable::new(2);
        let a = t.acquire(&mask(1)).unwrap();
        assert_eq!(a, Acquired { slot: 0, new: true });
        assert_eq!(
            t.acquire(&mask(1)).unwrap(),
            Acquired {
                slot: 0,
                new: false
            }
        );
        assert_eq!(t.refs(0), 2);
        let b = t.acquire(&mask(2)).unwrap();
        assert_eq!(b, Acquired { slot: 1, new: true });
        assert_eq!(t.acquire(&mask(3)), None, "table full");
        assert_eq!(t.n_masks(), 2);
        // Slot 0 freed only by its last flow, then reused for a new mask.
        assert!(!t.release(0));
        assert!(t.release(0));
        assert_eq!(t.n_masks(), 2, "slot 1 still in use");
        assert_eq!(
            t.acquire(&mask(3)).unwrap(),
            Acquired { slot: 0, new: true }
        );
        assert_eq!(t.mask(0), Some(&mask(3)));
        // Freeing the top slot shrinks the range the program scans.
        assert!(t.release(1));
        assert_eq!(t.n_masks(), 1);
        assert!(t.release(0));
        assert_eq!((t.n_masks(), t.len()), (0, 0));
        assert!(!t.release(0), "double release is ignored");
    }
}
