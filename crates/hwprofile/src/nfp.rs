//! Stage 2 and 3 for Netronome Agilio (nfp flower). PLACEHOLDER, being written.

use crate::tc::TcFlower;
use crate::{Driver, Refusal, Resource};
use std::collections::BTreeMap;

/// Firmware capabilities per profile.
#[derive(Clone, Debug)]
pub struct Caps {}

impl Caps {
    pub fn agilio() -> Caps {
        Caps {}
    }
}

pub struct Nfp {
    caps: Caps,
}

impl Nfp {
    pub fn new(caps: Caps) -> Nfp {
        Nfp { caps }
    }
}

impl Driver for Nfp {
    fn name(&self) -> &'static str {
        let _ = &self.caps;
        "nfp"
    }
    fn check(&self, _f: &TcFlower) -> Result<(), Refusal> {
        unimplemented!()
    }
    fn reserve(&mut self, _f: &TcFlower) -> Result<(), Refusal> {
        unimplemented!()
    }
    fn release(&mut self, _f: &TcFlower) {}
    fn account_ct(&mut self, n: u64) -> u64 {
        n
    }
    fn resources(&self) -> BTreeMap<String, Resource> {
        BTreeMap::new()
    }
}
