//! Per-packet bucket choice for select groups (`selection_method=rr`,
//! `wrr`, `splb`).
//!
//! The translation leaves such a group in the datapath flow as one
//! [`DpAction::Select`](super::DpAction::Select) with every live bucket's
//! actions; the executor asks [`SelectStates::choose`] which bucket this
//! packet takes. The state is per group, shared by every flow that runs the
//! group, so the rotation spans the flows as the kernel engines' per-CPU
//! state does (`DP_OP_SELECT` in `bpf/dp_exec.h`, which runs the same
//! arithmetic: a differential test holds them to it).
//!
//! * rr: a counter, bucket `counter % n`.
//! * wrr: nginx's smooth weighted round robin: each bucket's current value
//!   grows by its weight, the largest (the first on a tie) wins and drops by
//!   the total. Weights 3:1 give `a a b a`, then again.
//! * splb: the same over weights the daemon publishes per bucket (by the
//!   bucket's position in the group) from each path's measured congestion
//!   ([`SelectStates::publish`]); the buckets' own weights until it has.
//!
//! Nothing here allocates per packet: a group's state grows once, the
//! first time it sees more buckets than before.

use super::action::{SelectBucket, SelectMethod};
use std::collections::HashMap;

/// Most buckets a published splb weight list covers (by position in the
/// group); later buckets keep their own weight.
pub const MAX_PUBLISHED: usize = 64;

#[derive(Clone, Debug, Default)]
struct GroupState {
    /// Packets chosen for (rr).
    next: u32,
    /// Smooth WRR current values, by position in the action's bucket list.
    current: Vec<i64>,
    /// Published splb weights by bucket position in the group, if any.
    published: Option<Vec<u32>>,
    /// (packets, bytes) sent through each bucket, by position in the group,
    /// since [`SelectStates::take_counts`] last took them.
    counts: Vec<(u64, u64)>,
}

/// Selection state of every per-packet select group of a datapath.
#[derive(Clone, Debug, Default)]
pub struct SelectStates {
    groups: HashMap<u32, GroupState>,
}

impl SelectStates {
    /// Which of `buckets` (an index into it) the next packet of `group`
    /// takes; `None` when there are none.
    pub fn choose(
        &mut self,
        group: u32,
        method: SelectMethod,
        buckets: &[SelectBucket],
    ) -> Option<usize> {
        let n = buckets.len();
        if n == 0 {
            return None;
        }
        let st = self.groups.entry(group).or_default();
        match method {
            SelectMethod::RoundRobin => {
                let i = st.next as usize % n;
                st.next = st.next.wrapping_add(1);
                Some(i)
            }
            SelectMethod::Weighted => Some(smooth_wrr(&mut st.current, buckets, |b| {
                u32::from(b.weight)
            })),
            SelectMethod::Splb => {
                let GroupState {
                    current, published, ..
                } = st;
                Some(smooth_wrr(current, buckets, |b| {
                    published
                        .as_ref()
                        .and_then(|p| p.get(usize::from(b.index)).copied())
                        .unwrap_or(u32::from(b.weight))
                }))
            }
        }
    }

    /// Count a packet of `bytes` sent through bucket `index` (position in
    /// the group) of `group`, after [`Self::choose`] chose it: the group's
    /// bucket counters (the flow's own counters cannot split its traffic).
    /// Grows the counts once per new bucket position, not per packet.
    pub fn count(&mut self, group: u32, index: u16, bytes: usize) {
        let Some(st) = self.groups.get_mut(&group) else {
            return;
        };
        let i = usize::from(index);
        if st.counts.len() <= i {
            st.counts.resize(i + 1, (0, 0));
        }
        st.counts[i].0 += 1;
        st.counts[i].1 += bytes as u64;
    }

    /// Every group's per-bucket counts since the last call, as (group,
    /// bucket position, packets, bytes); the counts restart at zero.
    pub fn take_counts(&mut self) -> Vec<(u32, u16, u64, u64)> {
        let mut out = Vec::new();
        for (g, st) in &mut self.groups {
            for (i, c) in st.counts.iter_mut().enumerate() {
                if c.0 > 0 {
                    out.push((*g, i as u16, c.0, c.1));
                    *c = (0, 0);
                }
            }
        }
        out
    }

    /// Publish splb weights for `group`, by bucket position in the group
    /// (at most [`MAX_PUBLISHED`]); the rotation restarts so the new
    /// weights take effect at once.
    pub fn publish(&mut self, group: u32, weights: &[u32]) {
        let st = self.groups.entry(group).or_default();
        let w = &weights[..weights.len().min(MAX_PUBLISHED)];
        match &mut st.published {
            Some(p) if p.as_slice() == w => return,
            Some(p) => {
                p.clear();
                p.extend_from_slice(w);
            }
            None => st.published = Some(w.to_vec()),
        }
        st.current.iter_mut().for_each(|c| *c = 0);
    }

    /// The splb weights last published for `group`.
    pub fn published(&self, group: u32) -> Option<&[u32]> {
        self.groups.get(&group)?.published.as_deref()
    }

    /// Forget a group's state (its rotation starts afresh).
    pub fn forget(&mut self, group: u32) {
        self.groups.remove(&group);
    }

    /// Keep the state of the groups `keep` says still exist.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.groups.retain(|g, _| keep(*g));
    }

    /// Forget every group's state.
    pub fn clear(&mut self) {
        self.groups.clear();
    }
}

/// One step of nginx's smooth weighted round robin over `buckets` with
/// weights `w`; buckets of weight 0 are never chosen unless all are 0
/// (then the first is). `current` is indexed by position in `buckets`.
fn smooth_wrr(
    current: &mut Vec<i64>,
    buckets: &[SelectBucket],
    w: impl Fn(&SelectBucket) -> u32,
) -> usize {
    if current.len() < buckets.len() {
        current.resize(buckets.len(), 0);
    }
    let mut total = 0i64;
    let mut best = 0usize;
    let mut best_v = i64::MIN;
    for (i, b) in buckets.iter().enumerate() {
        let wi = i64::from(w(b));
        total += wi;
        current[i] += wi;
        if wi > 0 && current[i] > best_v {
            best = i;
            best_v = current[i];
        }
    }
    current[best] -= total;
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::DpAction;

    fn buckets(weights: &[u16]) -> Vec<SelectBucket> {
        weights
            .iter()
            .enumerate()
            .map(|(i, w)| SelectBucket {
                index: i as u16,
                weight: *w,
                actions: vec![DpAction::Output(i as u32 + 2)],
            })
            .collect()
    }

    fn run(s: &mut SelectStates, m: SelectMethod, b: &[SelectBucket], n: usize) -> Vec<usize> {
        (0..n).map(|_| s.choose(1, m, b).unwrap()).collect()
    }

    #[test]
    fn bucket_counts_are_taken_once_by_group_position() {
        let mut st = SelectStates::default();
        // Buckets at group positions 1 and 3 (0 and 2 dead or weight 0).
        let mut b = buckets(&[1, 1]);
        b[0].index = 1;
        b[1].index = 3;
        for _ in 0..10 {
            let i = st.choose(5, SelectMethod::RoundRobin, &b).unwrap();
            st.count(5, b[i].index, 100);
        }
        let mut c = st.take_counts();
        c.sort();
        assert_eq!(c, vec![(5, 1, 5, 500), (5, 3, 5, 500)]);
        assert!(st.take_counts().is_empty(), "taken counts restart at zero");
        // A group the executor never chose for has nothing to count.
        st.count(6, 0, 100);
        assert!(st.take_counts().is_empty());
    }

    #[test]
    fn rr_takes_buckets_in_turn_ignoring_weights() {
        let mut s = SelectStates::default();
        let b = buckets(&[5, 1, 1]);
        assert_eq!(
            run(&mut s, SelectMethod::RoundRobin, &b, 7),
            vec![0, 1, 2, 0, 1, 2, 0]
        );
    }

    #[test]
    fn wrr_is_nginx_smooth_and_proportional() {
        let mut s = SelectStates::default();
        // nginx's example: weights 5,1,1 give a a b a c a a.
        assert_eq!(
            run(&mut s, SelectMethod::Weighted, &buckets(&[5, 1, 1]), 7),
            vec![0, 0, 1, 0, 2, 0, 0]
        );
        let mut s = SelectStates::default();
        let got = run(&mut s, SelectMethod::Weighted, &buckets(&[3, 1]), 400);
        assert_eq!(&got[..4], &[0, 0, 1, 0]);
        let first = got.iter().filter(|i| **i == 0).count();
        assert_eq!((first, 400 - first), (300, 100));
    }

    #[test]
    fn groups_rotate_independently() {
        let mut s = SelectStates::default();
        let b = buckets(&[1, 1]);
        assert_eq!(s.choose(1, SelectMethod::RoundRobin, &b), Some(0));
        assert_eq!(s.choose(2, SelectMethod::RoundRobin, &b), Some(0));
        assert_eq!(s.choose(1, SelectMethod::RoundRobin, &b), Some(1));
        s.forget(1);
        assert_eq!(s.choose(1, SelectMethod::RoundRobin, &b), Some(0));
        assert_eq!(s.choose(1, SelectMethod::RoundRobin, &[]), None);
    }

    #[test]
    fn splb_follows_published_weights() {
        let mut s = SelectStates::default();
        let b = buckets(&[1, 1]);
        // Before any publication: the buckets' own weights.
        assert_eq!(run(&mut s, SelectMethod::Splb, &b, 4), vec![0, 1, 0, 1]);
        // Path 0 congested: weight 0 there, everything to 1.
        s.publish(1, &[0, 10]);
        assert_eq!(run(&mut s, SelectMethod::Splb, &b, 4), vec![1, 1, 1, 1]);
        s.publish(1, &[1, 3]);
        let got = run(&mut s, SelectMethod::Splb, &b, 40);
        assert_eq!(got.iter().filter(|i| **i == 1).count(), 30);
        assert_eq!(s.published(1), Some(&[1, 3][..]));
        // Published weights go by the bucket's position in the group: a
        // dead first bucket leaves only bucket 1 (index 1) here.
        let only = vec![b[1].clone()];
        assert_eq!(run(&mut s, SelectMethod::Splb, &only, 3), vec![0, 0, 0]);
    }
}
