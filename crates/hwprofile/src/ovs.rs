//! Stage 1: Open vSwitch 3.1's TC gate. PLACEHOLDER, being written.

use crate::model::{DpFlow, Port};
use crate::tc::TcFlower;
use crate::Refusal;

/// The filter OVS would install for `flow`, or its refusal.
pub fn gate(flow: &DpFlow, ports: &[Port]) -> Result<TcFlower, Refusal> {
    let _ = (flow, ports);
    unimplemented!("ovs::gate")
}
