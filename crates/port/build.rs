//! Compiles the port-owned BPF programs in `bpf/` (C) into BPF objects in
//! `OUT_DIR`, embedded by the ports that load them: `xsk_redirect.o` (the
//! AF_XDP port, `src/afxdp/prog.rs`) and `tc_upcall.o` (the TC port's
//! upcall path, `src/tc.rs`). The datapath programs are the kernel
//! engines' and are built by the `nicflow` crate.
//!
//! Needs clang with the BPF target and the libbpf headers (Debian:
//! `apt-get install clang libbpf-dev`); see `build_bpf.rs`.

#[path = "build_bpf.rs"]
mod bpf;

use std::path::PathBuf;

/// BPF sources, compiled one object each (`bpf/<name>.c` -> `<name>.o`).
const PROGRAMS: &[&str] = &["xsk_redirect", "tc_upcall"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bpf::compile(PROGRAMS, &out);
}
