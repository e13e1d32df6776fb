//! P4Runtime server for nicflow.

pub mod proto;
