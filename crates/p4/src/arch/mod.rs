//! Architecture models: how the blocks of the `main` package instance are
//! chained for one packet, which metadata they get (input port,
//! timestamps), and what their outputs mean (send_to_port, drop,
//! egress_spec, recirculation). One packet enters [`crate::Pipeline::process`]
//! and goes through the chosen model here.

use std::fmt;
use std::str::FromStr;

/// The architecture a program is run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// `pna.p4`: PNA_NIC(MainParser, PreControl, MainControl, MainDeparser).
    Pna,
    /// `tc/pna.p4`: PNA_NIC(Parser, Main, Deparser) (P4TC).
    PnaTc,
    /// `v1model.p4`: V1Switch (BMv2 simple_switch semantics).
    V1Model,
    /// `bmv2/psa.p4`: PSA_Switch.
    Psa,
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::Pna => "pna",
            Arch::PnaTc => "pna-tc",
            Arch::V1Model => "v1model",
            Arch::Psa => "psa",
        })
    }
}

impl FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Arch, String> {
        match s {
            "pna" => Ok(Arch::Pna),
            "pna-tc" | "tc" | "p4tc" => Ok(Arch::PnaTc),
            "v1model" => Ok(Arch::V1Model),
            "psa" => Ok(Arch::Psa),
            o => Err(format!(
                "unknown architecture {o} (pna, pna-tc, v1model, psa)"
            )),
        }
    }
}

/// BMv2's drop port (mark_to_drop sets egress_spec to it).
pub const V1_DROP_PORT: u32 = 511;
/// Bound on recirculation / resubmission passes per input packet.
pub const MAX_PASSES: u32 = 16;
/// PSA_PORT_RECIRCULATE in bmv2/psa.p4.
pub const PSA_PORT_RECIRCULATE: u32 = 0xffff_fffa;
/// PSA_PORT_CPU.
pub const PSA_PORT_CPU: u32 = 0xffff_fffd;
