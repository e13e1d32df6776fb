//! The naive reference classifier.

use crate::{apply_mask, masked_eq, RuleId, RuleRef};

struct LinearRule<const W: usize, T> {
    id: RuleId,
    key: [u64; W],
    mask: [u64; W],
    priority: u32,
    /// When this rule's mask group was created; shared by all rules of the
    /// group. Mirrors a [`Classifier`](crate::Classifier) subtable's age.
    group_seq: u64,
    value: T,
}

/// A classifier that scans every rule on every lookup.
///
/// It exists as the obviously-correct oracle for tests and as the baseline
/// in benchmarks. It gives exactly the answers of
/// [`Classifier`](crate::Classifier), including the tie-break among
/// overlapping rules of equal priority: it emulates the subtable order (mask
/// groups ranked by their highest priority, then by age) by brute force.
pub struct LinearClassifier<const W: usize, T> {
    rules: Vec<LinearRule<W, T>>,
    next_id: u64,
    next_group_seq: u64,
}

impl<const W: usize, T> Default for LinearClassifier<W, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize, T> LinearClassifier<W, T> {
    pub fn new() -> Self {
        LinearClassifier {
            rules: Vec::new(),
            next_id: 0,
            next_group_seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn fresh_id(&mut self) -> RuleId {
        let n = self.next_id;
        self.next_id += 1;
        RuleId::new(n as u32, (n >> 32) as u32)
    }

    /// Same contract as [`Classifier::insert`](crate::Classifier::insert).
    pub fn insert(
        &mut self,
        key: &[u64; W],
        mask: &[u64; W],
        priority: u32,
        value: T,
    ) -> (RuleId, Option<T>) {
        let key = apply_mask(key, mask);
        let id = self.fresh_id();
        if let Some(r) = self
            .rules
            .iter_mut()
            .find(|r| r.mask == *mask && r.key == key && r.priority == priority)
        {
            r.id = id;
            return (id, Some(std::mem::replace(&mut r.value, value)));
        }
        let group_seq = match self.rules.iter().find(|r| r.mask == *mask) {
            Some(r) => r.group_seq,
            None => {
                self.next_group_seq += 1;
                self.next_group_seq
            }
        };
        self.rules.push(LinearRule {
            id,
            key,
            mask: *mask,
            priority,
            group_seq,
            value,
        });
        (id, None)
    }

    pub fn find_exact(&self, key: &[u64; W], mask: &[u64; W], priority: u32) -> Option<RuleId> {
        let key = apply_mask(key, mask);
        self.rules
            .iter()
            .find(|r| r.mask == *mask && r.key == key && r.priority == priority)
            .map(|r| r.id)
    }

    pub fn remove(&mut self, id: RuleId) -> Option<T> {
        let pos = self.rules.iter().position(|r| r.id == id)?;
        Some(self.rules.remove(pos).value)
    }

    pub fn get(&self, id: RuleId) -> Option<&T> {
        self.rules.iter().find(|r| r.id == id).map(|r| &r.value)
    }

    pub fn get_mut(&mut self, id: RuleId) -> Option<&mut T> {
        self.rules
            .iter_mut()
            .find(|r| r.id == id)
            .map(|r| &mut r.value)
    }

    /// The highest priority of the rules sharing `mask` (a subtable's
    /// `max_priority`).
    fn group_max(&self, mask: &[u64; W]) -> u32 {
        self.rules
            .iter()
            .filter(|r| r.mask == *mask)
            .map(|r| r.priority)
            .max()
            .unwrap_or(0)
    }

    /// Does `a` win over `b` (both matching)? Priority first, then the
    /// position its group would have in the classifier's subtable order.
    fn beats(&self, a: &LinearRule<W, T>, b: &LinearRule<W, T>) -> bool {
        if a.priority != b.priority {
            return a.priority > b.priority;
        }
        let (ga, gb) = (self.group_max(&a.mask), self.group_max(&b.mask));
        if ga != gb {
            return ga > gb;
        }
        a.group_seq < b.group_seq
    }

    /// Best match for `key`: every rule is examined.
    pub fn lookup(&self, key: &[u64; W]) -> Option<(RuleId, &T)> {
        let mut best: Option<&LinearRule<W, T>> = None;
        for r in &self.rules {
            if !masked_eq(key, &r.key, &r.mask) {
                continue;
            }
            if match best {
                None => true,
                Some(b) => self.beats(r, b),
            } {
                best = Some(r);
            }
        }
        best.map(|r| (r.id, &r.value))
    }

    /// Best match for `key` under a caller-defined tie-break: among the
    /// matching rules of highest priority, the one with the smallest
    /// `rank(id)` (the first one in insertion order on equal ranks).
    ///
    /// [`lookup`](Self::lookup) reproduces the tie-break of a
    /// tuple-space-search [`Classifier`](crate::Classifier), which depends on
    /// the rule set only. A TupleMerge classifier breaks ties by where rules
    /// happen to be stored (table order, then insertion order; see the crate
    /// docs), which depends on the history of the classifier: pass that
    /// position as `rank` to get its exact answer by brute force.
    pub fn lookup_ranked<K: Ord>(
        &self,
        key: &[u64; W],
        mut rank: impl FnMut(RuleId) -> K,
    ) -> Option<(RuleId, &T)> {
        let mut best: Option<(&LinearRule<W, T>, K)> = None;
        for r in &self.rules {
            if !masked_eq(key, &r.key, &r.mask) {
                continue;
            }
            if best.as_ref().is_some_and(|(b, _)| b.priority > r.priority) {
                continue;
            }
            let k = rank(r.id);
            if match &best {
                None => true,
                Some((b, bk)) => r.priority > b.priority || k < *bk,
            } {
                best = Some((r, k));
            }
        }
        best.map(|(r, _)| (r.id, &r.value))
    }

    /// All rules in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = RuleRef<'_, W, T>> {
        self.rules.iter().map(|r| RuleRef {
            id: r.id,
            key: &r.key,
            mask: &r.mask,
            priority: r.priority,
            value: &r.value,
        })
    }

    pub fn retain(&mut self, mut f: impl FnMut(RuleId, &[u64; W], &[u64; W], u32, &mut T) -> bool) {
        self.rules
            .retain_mut(|r| f(r.id, &r.key, &r.mask, r.priority, &mut r.value));
    }

    pub fn clear(&mut self) {
        self.rules.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        let mut c = LinearClassifier::<2, u32>::new();
        let (a, _) = c.insert(&[1, 9], &[!0, 0], 5, 1);
        let (b, _) = c.insert(&[1, 2], &[!0, !0], 3, 2);
        assert_eq!(c.lookup(&[1, 2]), Some((a, &1)));
        assert_eq!(c.lookup(&[2, 2]), None);
        let (a2, old) = c.insert(&[1, 0], &[!0, 0], 5, 3);
        assert_eq!(old, Some(1));
        assert_ne!(a, a2);
        assert_eq!(c.get(a), None);
        assert_eq!(c.find_exact(&[1, 7], &[!0, 0], 5), Some(a2));
        assert_eq!(c.remove(a2), Some(3));
        assert_eq!(c.lookup(&[1, 2]), Some((b, &2)));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn ranked_ties() {
        let mut c = LinearClassifier::<2, u32>::new();
        let (a, _) = c.insert(&[1, 0], &[!0, 0], 5, 1);
        let (b, _) = c.insert(&[0, 2], &[0, !0], 5, 2);
        c.insert(&[0, 0], &[0, 0], 4, 3);
        assert_eq!(
            c.lookup_ranked(&[1, 2], |id| id != a).map(|r| *r.1),
            Some(1)
        );
        assert_eq!(
            c.lookup_ranked(&[1, 2], |id| id != b).map(|r| *r.1),
            Some(2)
        );
        // Equal ranks: insertion order.
        assert_eq!(c.lookup_ranked(&[1, 2], |_| 0).map(|r| *r.1), Some(1));
        // Rank never beats priority.
        assert_eq!(
            c.lookup_ranked(&[1, 3], |id| id == a).map(|r| *r.1),
            Some(1)
        );
        assert_eq!(c.lookup_ranked(&[7, 3], |_| 0).map(|r| *r.1), Some(3));
        assert_eq!(
            c.lookup_ranked(&[7, 3], |_| 0).map(|r| r.0),
            c.lookup(&[7, 3]).map(|r| r.0)
        );
    }

    #[test]
    fn ties_follow_subtable_order() {
        let mut c = LinearClassifier::<2, u32>::new();
        c.insert(&[1, 0], &[!0, 0], 5, 1);
        c.insert(&[0, 2], &[0, !0], 5, 2);
        assert_eq!(c.lookup(&[1, 2]).map(|r| *r.1), Some(1));
        c.insert(&[0, 3], &[0, !0], 8, 3);
        assert_eq!(c.lookup(&[1, 2]).map(|r| *r.1), Some(2));
    }
}
