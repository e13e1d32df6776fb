//! OpenFlow groups: the group table and its counters.
//!
//! A rule's `group:N` action hands the packet to group N, whose type decides
//! which buckets run (`xlate`'s `group`): `all` every bucket on its own copy
//! of the packet, `indirect` its one bucket, `select` one bucket picked by a
//! hash of the packet in proportion to the weights, `fast_failover` the first
//! bucket whose watched port (or group) is live. A port is live while it is
//! on the bridge: nicflow ports have no link state of their own. Liveness is
//! no key bit, so a decision that depended on it is kept right by
//! revalidation, which the bridge runs on every port and group change.
//!
//! Counters reach the groups the same way they reach rules: the translation
//! lists, next to the rules it used, one [`RuleRef`] for the group and one
//! per bucket it ran, in the reserved table [`GROUP_TABLE`] with ids from a
//! private allocator; the datapath credits each cached flow's traffic to
//! every reference, and [`Groups::credit`] takes the group ones.

use crate::datapath::RuleRef;
use nicflow_classifier::Classifier;
use nicflow_ofctl::GroupSpec;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The table number of group and bucket references in a translation's rule
/// list (tables are 0-254, so no rule lives here).
pub const GROUP_TABLE: u8 = 255;

/// One group with its counters.
#[derive(Clone, Debug)]
pub struct Group {
    pub spec: GroupSpec,
    pub created: Instant,
    pub packets: u64,
    pub bytes: u64,
    /// (packets, bytes) per bucket, in bucket order.
    pub buckets: Vec<(u64, u64)>,
    /// Credit references: the group's, then one per bucket.
    pub(crate) refs: Vec<RuleRef>,
}

/// One group as `dump-group-stats` shows it.
#[derive(Clone, Debug)]
pub struct GroupStats {
    pub group_id: u32,
    pub duration: Duration,
    /// Rules whose actions name the group.
    pub ref_count: u32,
    pub packets: u64,
    pub bytes: u64,
    pub buckets: Vec<(u64, u64)>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GroupError {
    #[error("group {0} already exists")]
    Exists(u32),
    #[error("group {0} does not exist")]
    Unknown(u32),
    #[error("group {group}: a bucket refers to group {target}, which does not exist")]
    BadOutGroup { group: u32, target: u32 },
    #[error("group {0}: a bucket refers to the group itself")]
    Loop(u32),
}

/// What a credit reference stands for: a group, or one of its buckets.
type RefTarget = (u32, Option<usize>);

#[derive(Clone)]
pub struct Groups {
    groups: BTreeMap<u32, Group>,
    /// Id allocator for credit references (one-word keys, never reused).
    ids: Classifier<1, RefTarget>,
    next_ref: u64,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.groups.iter()).finish()
    }
}

impl Default for Groups {
    fn default() -> Self {
        Self::new()
    }
}

impl Groups {
    pub fn new() -> Self {
        Groups {
            groups: BTreeMap::new(),
            ids: Classifier::new(),
            next_ref: 0,
        }
    }

    pub fn get(&self, id: u32) -> Option<&Group> {
        self.groups.get(&id)
    }

    pub fn contains(&self, id: u32) -> bool {
        self.groups.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    fn new_ref(&mut self, target: RefTarget) -> RuleRef {
        self.next_ref += 1;
        let (rule, _) = self.ids.insert(&[self.next_ref], &[u64::MAX], 0, target);
        RuleRef {
            table: GROUP_TABLE,
            rule: Some(rule),
        }
    }

    fn drop_refs(&mut self, refs: &[RuleRef]) {
        for id in refs.iter().filter_map(|r| r.rule) {
            self.ids.remove(id);
        }
    }

    /// Check that every `group:N` in the buckets of `specs` names a group
    /// that exists or is among `specs` (and not the group itself).
    pub fn check_refs(&self, specs: &[GroupSpec]) -> Result<(), GroupError> {
        for s in specs {
            for b in &s.buckets {
                for a in &b.actions {
                    if let nicflow_flow::Action::Group(t) = a {
                        if *t == s.group_id {
                            return Err(GroupError::Loop(s.group_id));
                        }
                        if !self.contains(*t) && !specs.iter().any(|o| o.group_id == *t) {
                            return Err(GroupError::BadOutGroup {
                                group: s.group_id,
                                target: *t,
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Add groups, all or nothing: none may exist yet (`add-group`), or,
    /// with `modify`, all must exist (`mod-group`; bucket counters restart,
    /// the group's own keep counting).
    pub fn add(
        &mut self,
        specs: &[GroupSpec],
        modify: bool,
        now: Instant,
    ) -> Result<(), GroupError> {
        for (i, s) in specs.iter().enumerate() {
            let dup = specs[..i].iter().any(|o| o.group_id == s.group_id);
            match (self.contains(s.group_id), modify) {
                (true, false) => return Err(GroupError::Exists(s.group_id)),
                (false, true) => return Err(GroupError::Unknown(s.group_id)),
                _ if dup && !modify => return Err(GroupError::Exists(s.group_id)),
                _ => {}
            }
        }
        self.check_refs(specs)?;
        for s in specs {
            let old = self.groups.remove(&s.group_id);
            let (created, packets, bytes) = match &old {
                Some(o) => (o.created, o.packets, o.bytes),
                None => (now, 0, 0),
            };
            if let Some(o) = &old {
                self.drop_refs(&o.refs);
            }
            let mut refs = vec![self.new_ref((s.group_id, None))];
            for i in 0..s.buckets.len() {
                refs.push(self.new_ref((s.group_id, Some(i))));
            }
            self.groups.insert(
                s.group_id,
                Group {
                    spec: s.clone(),
                    created,
                    packets,
                    bytes,
                    buckets: vec![(0, 0); s.buckets.len()],
                    refs,
                },
            );
        }
        Ok(())
    }

    /// Remove one group or all (`None`); returns the ids removed.
    pub fn remove(&mut self, id: Option<u32>) -> Vec<u32> {
        let ids: Vec<u32> = match id {
            Some(g) => self
                .groups
                .contains_key(&g)
                .then_some(g)
                .into_iter()
                .collect(),
            None => self.groups.keys().copied().collect(),
        };
        for g in &ids {
            if let Some(old) = self.groups.remove(g) {
                self.drop_refs(&old.refs);
            }
        }
        ids
    }

    /// Credit per-packet select groups' buckets with what the executor and
    /// the kernel engines counted per bucket (group, bucket position,
    /// packets, bytes): such a group's flows split their traffic at run
    /// time, so no translation reference names a bucket. Groups that are
    /// gone are skipped.
    pub fn credit_buckets(&mut self, counts: &[(u32, u16, u64, u64)]) {
        for &(gid, i, packets, bytes) in counts {
            if let Some(b) = self
                .groups
                .get_mut(&gid)
                .and_then(|g| g.buckets.get_mut(usize::from(i)))
            {
                b.0 += packets;
                b.1 += bytes;
            }
        }
    }

    /// Credit a translation's group reference; false if `r` is not one.
    pub fn credit(&mut self, r: &RuleRef, packets: u64, bytes: u64) -> bool {
        if r.table != GROUP_TABLE {
            return false;
        }
        let Some(&(gid, bucket)) = r.rule.and_then(|id| self.ids.get(id)) else {
            return true;
        };
        if let Some(g) = self.groups.get_mut(&gid) {
            match bucket {
                None => {
                    g.packets += packets;
                    g.bytes += bytes;
                }
                Some(i) => {
                    if let Some(b) = g.buckets.get_mut(i) {
                        b.0 += packets;
                        b.1 += bytes;
                    }
                }
            }
        }
        true
    }

    /// The references a translation records for group `id` (index 0) and
    /// its buckets (1..).
    pub(crate) fn refs(&self, id: u32) -> Option<&[RuleRef]> {
        self.groups.get(&id).map(|g| g.refs.as_slice())
    }
}
