//! Stage 2 and 3 for NVIDIA eSwitches (mlx5_core). PLACEHOLDER, being written.

use crate::tc::TcFlower;
use crate::{Driver, Profile, Refusal, Resource};
use std::collections::BTreeMap;

/// Firmware capabilities per profile.
#[derive(Clone, Debug)]
pub struct Caps {}

impl Caps {
    pub fn for_profile(p: Profile) -> Caps {
        let _ = p;
        Caps {}
    }
}

pub struct Mlx5 {
    caps: Caps,
}

impl Mlx5 {
    pub fn new(caps: Caps) -> Mlx5 {
        Mlx5 { caps }
    }
}

impl Driver for Mlx5 {
    fn name(&self) -> &'static str {
        let _ = &self.caps;
        "mlx5_core"
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
