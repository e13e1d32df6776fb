//! Compiles the XDP programs in `bpf/` (C) into BPF objects in `OUT_DIR`,
//! embedded by the ports that load them (`include_bytes!(concat!(env!(
//! "OUT_DIR"), "/xsk_redirect.o"))` in `src/port/afxdp.rs`).
//!
//! Needs clang with the BPF target and the libbpf headers (Debian:
//! `apt-get install clang libbpf-dev`). The compiler can be overridden with
//! `NICFLOW_BPF_CLANG=/path/to/clang`. The extra include path
//! is where Debian keeps `asm/types.h` for x86_64; without it clang's BPF
//! target cannot find it.

use std::path::PathBuf;
use std::process::Command;

/// BPF sources, compiled one object each (`bpf/<name>.c` -> `<name>.o`).
const PROGRAMS: &[&str] = &["xsk_redirect", "xdp_dp", "xdp_redirect_min"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = std::env::var("NICFLOW_BPF_CLANG").unwrap_or_else(|_| "clang".to_string());
    println!("cargo:rerun-if-env-changed=NICFLOW_BPF_CLANG");
    let multiarch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "/usr/include/aarch64-linux-gnu",
        _ => "/usr/include/x86_64-linux-gnu",
    };
    for name in PROGRAMS {
        let src = format!("bpf/{name}.c");
        println!("cargo:rerun-if-changed={src}");
        let obj = out.join(format!("{name}.o"));
        let result = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall"])
            .arg(format!("-I{multiarch}"))
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .output();
        match result {
            Err(e) => panic!(
                "\n\nnicflow needs clang to compile its XDP program {src}, but \
                 running `{clang}` failed: {e}.\nInstall clang and the libbpf \
                 headers (Debian/Ubuntu: `apt-get install clang libbpf-dev`), or \
                 point NICFLOW_BPF_CLANG at a clang with the BPF target.\n"
            ),
            Ok(o) if !o.status.success() => panic!(
                "\n\n`{clang} -O2 -g -target bpf -I{multiarch} -c {src}` failed \
                 ({}):\n{}{}\n(missing <bpf/bpf_helpers.h>? install libbpf-dev)\n",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Ok(_) => {}
        }
    }
}
