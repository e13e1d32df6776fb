//! The meter table as the rules see it: which meters exist (a rule naming
//! an unknown meter is refused, `OFPMMFC_UNKNOWN_METER`), their
//! configuration for `dump-meters` and the configuration file, and which
//! rules use each (`flow_count`; deleting a meter deletes them, as Open
//! vSwitch does). The token buckets that act on packets live in the
//! datapath ([`crate::datapath::meter`]); the bridge keeps both in step.

use super::flow_mod::{RemovedReason, RemovedRule};
use super::Ofproto;
use nicflow_flow::Action;
use nicflow_ofctl::meter::MeterSpec;
use std::collections::BTreeMap;
use std::time::Instant;

/// Meters a bridge may have (OVS's userspace datapath: `MAX_METERS`, 64K
/// there; ids themselves go up to `OFPM13_MAX`).
pub const MAX_METERS: usize = 65_536;
/// Bands per meter (OVS `MAX_BANDS`).
pub const MAX_BANDS: usize = 8;

/// A refused meter change, with the OpenFlow error it maps to.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MeterError {
    /// `OFPMMFC_METER_EXISTS`.
    #[error("meter {0} already exists (mod-meter changes it)")]
    Exists(u32),
    /// `OFPMMFC_UNKNOWN_METER`.
    #[error("meter {0} does not exist (add it with add-meter first)")]
    Unknown(u32),
    /// `OFPMMFC_OUT_OF_BANDS`.
    #[error("meter {0} has {1} bands; at most {MAX_BANDS}")]
    TooManyBands(u32, usize),
    /// `OFPMMFC_OUT_OF_METERS`.
    #[error("no room for meter {0}: at most {MAX_METERS} meters")]
    OutOfMeters(u32),
}

/// Every meter a rule's actions name.
pub fn meters_of(actions: &[Action]) -> impl Iterator<Item = u32> + '_ {
    actions.iter().filter_map(|a| match a {
        Action::Meter(id) => Some(*id),
        _ => None,
    })
}

impl Ofproto {
    /// Check an `add-meter` (`modify == false`: none may exist yet) or
    /// `mod-meter` (all must exist) batch; nothing changes.
    pub fn check_meters(&self, specs: &[MeterSpec], modify: bool) -> Result<(), MeterError> {
        let mut new = 0;
        for s in specs {
            let exists = self.meters.contains_key(&s.meter_id);
            match (modify, exists) {
                (false, true) => return Err(MeterError::Exists(s.meter_id)),
                (true, false) => return Err(MeterError::Unknown(s.meter_id)),
                (false, false) => new += 1,
                _ => {}
            }
            if s.bands.len() > MAX_BANDS {
                return Err(MeterError::TooManyBands(s.meter_id, s.bands.len()));
            }
            if self.meters.len() + new > MAX_METERS {
                return Err(MeterError::OutOfMeters(s.meter_id));
            }
        }
        Ok(())
    }

    /// Store checked meters ([`Ofproto::check_meters`] first).
    pub fn set_meters(&mut self, specs: &[MeterSpec]) {
        for s in specs {
            self.meters.insert(s.meter_id, s.clone());
        }
    }

    /// Remove one meter (or all) and every rule that uses a removed one.
    /// Returns the removed meter ids and how many rules went.
    pub fn del_meters(&mut self, id: Option<u32>, now: Instant) -> (Vec<u32>, usize) {
        let gone: Vec<u32> = match id {
            Some(i) => self.meters.remove(&i).map(|_| i).into_iter().collect(),
            None => std::mem::take(&mut self.meters).into_keys().collect(),
        };
        if gone.is_empty() {
            return (gone, 0);
        }
        let mut removed = Vec::new();
        for (tid, t) in self.tables.iter_mut().enumerate() {
            let Some(t) = t else { continue };
            t.retain(|_, _, _, _, r| {
                let uses = meters_of(&r.actions).any(|m| gone.contains(&m));
                if uses {
                    removed.push(RemovedRule::of(tid as u8, r, RemovedReason::Delete, now));
                }
                !uses
            });
        }
        self.stats.rules_removed += removed.len() as u64;
        self.note_removed(&removed);
        (gone, removed.len())
    }

    /// Meters in id order.
    pub fn meters(&self) -> impl Iterator<Item = &MeterSpec> {
        self.meters.values()
    }

    pub fn has_meter(&self, id: u32) -> bool {
        self.meters.contains_key(&id)
    }

    /// How many rules use each meter.
    pub fn meter_flow_counts(&self) -> BTreeMap<u32, u32> {
        let mut n: BTreeMap<u32, u32> = BTreeMap::new();
        for t in self.tables.iter().flatten() {
            for r in t.iter() {
                for m in meters_of(&r.value.actions) {
                    *n.entry(m).or_default() += 1;
                }
            }
        }
        n
    }
}
