//! A program from its text rather than a file: what P4Runtime's
//! `SetForwardingPipelineConfig` carries (nicflow's device config is the
//! P4 source itself), and what tests write inline. Includes resolve
//! against `include_dirs` as for a file.

use crate::interp::arch::Arch;
use crate::interp::check::P4Error;
use crate::Pipeline;
use std::path::PathBuf;

/// Parse, check and instantiate `text` (named `name` in errors). The text
/// comes from a client (P4Runtime, unauthenticated on loopback) and the
/// daemon reads files as root: its `#include`s may only name files under
/// the include directories (no absolute paths, no `..`).
pub fn load_source(
    name: &str,
    text: &str,
    include_dirs: &[PathBuf],
    arch: Option<Arch>,
) -> Result<Pipeline, P4Error> {
    for (i, line) in text.lines().enumerate() {
        let l = line.trim_start();
        let Some(rest) = l.strip_prefix('#') else {
            continue;
        };
        let Some(target) = rest.trim_start().strip_prefix("include") else {
            continue;
        };
        let target = target
            .trim()
            .trim_matches(|c| c == '"' || c == '<' || c == '>');
        if target.starts_with('/') || target.split('/').any(|c| c == "..") {
            return Err(P4Error::Front(format!(
                "{name}:{}:1: #include \"{target}\": a program sent as text may only include files under the include directories",
                i + 1
            )));
        }
    }
    let program = crate::front::parse_str(name, text, include_dirs)
        .map_err(|e| P4Error::Front(e.to_string()))?;
    Pipeline::load_program(program, arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_programs_cannot_include_files_outside_the_include_dirs() {
        for bad in [
            "#include \"/etc/shadow\"\n",
            "  #  include <../../etc/passwd>\n",
        ] {
            let e = load_source("p.p4", bad, &[], None).err().expect("refused");
            assert!(e.to_string().starts_with("p.p4:"), "{e}");
        }
    }
}
