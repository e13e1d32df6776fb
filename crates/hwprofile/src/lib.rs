//! Hardware profiles: what a real SmartNIC would hold of a bridge's
//! datapath flows, had Open vSwitch 3.1 installed them with
//! `other_config:hw-offload=true`.
//!
//! Place in a packet's path: none. This crate is the model behind
//! `nicflow offload-plan` and the TC engine's emulation mode
//! (`offload=profile:NAME`): nicflow's offload manager hands it each
//! datapath flow (turned into OVS's form by `dataplane::offload::profile`)
//! before installing the flow in its own TC engine, and the flow runs in
//! the kernel only if the modelled NIC would have taken it.
//!
//! A flow meets three stages, in OVS's order; the first refusal decides:
//!
//! 1. [`ovs::gate`] — OVS's TC translation (`lib/netdev-offload-tc.c`,
//!    `lib/tc.c` at v3.1.0): the datapath flow becomes a TC flower filter
//!    ([`tc::TcFlower`]) or is refused, for every profile alike;
//! 2. the driver's flower parse — [`mlx5`] (ConnectX-7, BlueField-2/3 in
//!    switchdev mode, `drivers/net/ethernet/mellanox/mlx5/core/en_tc.c`
//!    and friends) or [`nfp`] (Agilio CX, `drivers/net/ethernet/netronome/
//!    nfp/flower/`), Linux 6.1 (Debian 12's kernel, of OVS 3.1's time);
//! 3. the driver's resources ([`Driver::reserve`]): hardware entries,
//!    masks as the driver deduplicates them, modify-header actions,
//!    conntrack entries; a flow that does not fit is refused with the
//!    driver's own message.
//!
//! A refusal's `reason` is the refusing component's own wording (the OVS
//! log line, the driver's extack string, printf arguments filled in) or,
//! where the code returns a bare `-EOPNOTSUPP`, the check's name and what
//! failed; `source` is the `file:function` that decided.

pub mod model;
pub mod tc;

pub mod mlx5;
pub mod nfp;
pub mod ovs;
pub mod plan;
pub mod rates;

use serde::Serialize;
use std::collections::BTreeMap;

pub use plan::{plan, FlowVerdict, Plan};

/// The stage that refused a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// OVS's TC gate: holds for every profile.
    Ovs,
    /// The NIC driver's flower parse.
    Driver,
    /// The NIC's resources (the flow would fit the driver, not the NIC).
    Resource,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Ovs => "ovs",
            Stage::Driver => "driver",
            Stage::Resource => "resource",
        }
    }
}

/// Why a flow would not be held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{reason} ({source_fn})")]
pub struct Refusal {
    pub stage: Stage,
    /// The component's own message (see the crate docs).
    pub reason: String,
    /// `file:function` that decided, e.g. `lib/netdev-offload-tc.c:netdev_tc_flow_put`.
    #[serde(rename = "source")]
    pub source_fn: &'static str,
}

impl Refusal {
    pub fn new(stage: Stage, source: &'static str, reason: impl Into<String>) -> Refusal {
        Refusal {
            stage,
            reason: reason.into(),
            source_fn: source,
        }
    }
}

/// One resource of the NIC: how much the accepted flows use of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Resource {
    pub used: u64,
    pub limit: u64,
}

/// A NIC driver's flower path and resources.
pub trait Driver {
    /// The kernel driver modelled (`mlx5_core`, `nfp`).
    fn name(&self) -> &'static str;
    /// Stage 2: would the driver's `FLOW_CLS_REPLACE` parse accept this
    /// filter? Pure: nothing is reserved.
    fn check(&self, f: &tc::TcFlower) -> Result<(), Refusal>;
    /// Stage 3: take the filter's resources (entries, masks, modify-header
    /// actions, ...), or refuse with the driver's message and change
    /// nothing. Called only after [`Driver::check`] accepted it.
    fn reserve(&mut self, f: &tc::TcFlower) -> Result<(), Refusal>;
    /// Give back what [`Driver::reserve`] took for the same filter (the
    /// emulation removes flows; the driver recomputes its keys).
    fn release(&mut self, f: &tc::TcFlower);
    /// `n` established connections the kernel's conntrack would offload
    /// through `act_ct` (the flowtable): how many the NIC holds.
    fn account_ct(&mut self, n: u64) -> u64;
    /// Every resource, by name: `{"used", "limit"}`.
    fn resources(&self) -> BTreeMap<String, Resource>;
}

/// The NICs modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// NVIDIA ConnectX-7 in switchdev mode (mlx5_core).
    Cx7,
    /// NVIDIA BlueField-2 DPU, the eSwitch of its ConnectX-6 Dx core.
    Bf2,
    /// NVIDIA BlueField-3 DPU (ConnectX-7-class eSwitch).
    Bf3,
    /// Netronome Agilio CX (nfp, flower firmware).
    Agilio,
}

impl Profile {
    pub const ALL: [Profile; 4] = [Profile::Cx7, Profile::Bf2, Profile::Bf3, Profile::Agilio];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Cx7 => "cx7",
            Profile::Bf2 => "bf2",
            Profile::Bf3 => "bf3",
            Profile::Agilio => "agilio",
        }
    }

    pub fn parse(s: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name() == s)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Profile::Cx7 => "NVIDIA ConnectX-7, eSwitch in switchdev mode (mlx5_core)",
            Profile::Bf2 => "NVIDIA BlueField-2 DPU eSwitch (ConnectX-6 Dx, mlx5_core)",
            Profile::Bf3 => "NVIDIA BlueField-3 DPU eSwitch (mlx5_core)",
            Profile::Agilio => "Netronome Agilio CX, flower firmware (nfp)",
        }
    }

    /// A fresh driver state (no flows held) for this NIC.
    pub fn driver(self) -> Box<dyn Driver> {
        match self {
            Profile::Cx7 | Profile::Bf2 | Profile::Bf3 => {
                Box::new(mlx5::Mlx5::new(mlx5::Caps::for_profile(self)))
            }
            Profile::Agilio => Box::new(nfp::Nfp::new(nfp::Caps::agilio())),
        }
    }
}

/// The kernel and OVS versions the rules were read from.
pub const MODELLED: &str = "Open vSwitch v3.1.0, Linux 6.1 (mlx5_core, nfp)";
