//! The three stages run in order over a bridge's flows: the offload plan
//! (`nicflow offload-plan`) and the per-flow admission the emulation
//! (`offload=profile:NAME`) does before each kernel install.

use crate::model::{DpFlow, Port};
use crate::tc::TcFlower;
use crate::{Driver, Profile, Refusal, Resource, Stage};
use serde::Serialize;
use std::collections::BTreeMap;

/// A modelled NIC with the flows it holds so far.
pub struct Nic {
    pub profile: Profile,
    driver: Box<dyn Driver>,
}

impl Nic {
    pub fn new(profile: Profile) -> Nic {
        Nic {
            profile,
            driver: profile.driver(),
        }
    }

    /// Stages 1 and 2 (nothing reserved): the filter the NIC would take.
    pub fn judge(&self, flow: &DpFlow, ports: &[Port]) -> Result<TcFlower, Refusal> {
        let tc = crate::ovs::gate(flow, ports)?;
        self.driver.check(&tc)?;
        Ok(tc)
    }

    /// All three stages; an admitted flow holds its resources until
    /// [`Nic::release`] is given the filter back.
    pub fn admit(&mut self, flow: &DpFlow, ports: &[Port]) -> Result<TcFlower, Refusal> {
        let tc = self.judge(flow, ports)?;
        self.driver.reserve(&tc)?;
        Ok(tc)
    }

    pub fn release(&mut self, tc: &TcFlower) {
        self.driver.release(tc);
    }

    pub fn account_ct(&mut self, n: u64) -> u64 {
        self.driver.account_ct(n)
    }

    pub fn resources(&self) -> BTreeMap<String, Resource> {
        self.driver.resources()
    }

    pub fn driver_name(&self) -> &'static str {
        self.driver.name()
    }
}

/// One flow's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct FlowVerdict {
    pub offloadable: bool,
    /// `""` when offloadable.
    pub reason: String,
    /// `None` when offloadable.
    pub stage: Option<Stage>,
    /// `file:function` that decided (`""` when offloadable).
    pub source: String,
}

impl FlowVerdict {
    fn of(r: Result<TcFlower, Refusal>) -> FlowVerdict {
        match r {
            Ok(_) => FlowVerdict {
                offloadable: true,
                reason: String::new(),
                stage: None,
                source: String::new(),
            },
            Err(e) => FlowVerdict {
                offloadable: false,
                reason: e.reason,
                stage: Some(e.stage),
                source: e.source_fn.to_string(),
            },
        }
    }
}

/// The plan of a set of flows on one NIC.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub profile: Profile,
    pub driver: &'static str,
    /// In the order of the input.
    pub flows: Vec<FlowVerdict>,
    pub resources: BTreeMap<String, Resource>,
    /// Of the established connections given, how many the NIC would hold.
    pub ct_offloaded: u64,
}

/// Run the stages over `flows` in order (the resources are counted over the
/// accepted ones in that order, as a NIC filling up would see them), with
/// `ct_established` established connections for the conntrack tables.
pub fn plan(profile: Profile, ports: &[Port], flows: &[DpFlow], ct_established: u64) -> Plan {
    let mut nic = Nic::new(profile);
    let verdicts = flows
        .iter()
        .map(|f| FlowVerdict::of(nic.admit(f, ports)))
        .collect();
    let ct_offloaded = nic.account_ct(ct_established);
    Plan {
        profile,
        driver: nic.driver_name(),
        flows: verdicts,
        resources: nic.resources(),
        ct_offloaded,
    }
}
