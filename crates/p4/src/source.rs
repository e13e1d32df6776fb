//! A program from its text rather than a file: what P4Runtime's
//! `SetForwardingPipelineConfig` carries (nicflow's device config is the
//! P4 source itself), and what tests write inline. Includes resolve
//! against `include_dirs` as for a file.

use crate::arch::Arch;
use crate::check::P4Error;
use crate::Pipeline;
use std::path::PathBuf;

/// Parse, check and instantiate `text` (named `name` in errors).
pub fn load_source(
    name: &str,
    text: &str,
    include_dirs: &[PathBuf],
    arch: Option<Arch>,
) -> Result<Pipeline, P4Error> {
    let program = crate::front::parse_str(name, text, include_dirs)
        .map_err(|e| P4Error::Front(e.to_string()))?;
    Pipeline::load_program(program, arch)
}
