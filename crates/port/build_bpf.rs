//! Compiling the BPF programs of a crate's `bpf/` directory, shared by
//! the build scripts of `nicflow` (the datapath programs) and
//! `nicflow-bench` (its baseline program), included with `#[path]`.

use std::path::Path;
use std::process::Command;

/// Where the target's `asm/types.h` lives: `NICFLOW_BPF_INCLUDE` if set,
/// else Debian's multiarch directory for the target architecture (clang's
/// BPF target has no multiarch paths of its own).
pub fn multiarch_include() -> String {
    println!("cargo:rerun-if-env-changed=NICFLOW_BPF_INCLUDE");
    if let Ok(dir) = std::env::var("NICFLOW_BPF_INCLUDE") {
        return dir;
    }
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let endian = std::env::var("CARGO_CFG_TARGET_ENDIAN").unwrap_or_default();
    let tuple = match (arch.as_str(), endian.as_str()) {
        ("x86", _) => "i386-linux-gnu".to_string(),
        ("arm", _) => "arm-linux-gnueabihf".to_string(),
        ("powerpc64", "little") => "powerpc64le-linux-gnu".to_string(),
        ("mips64", "little") => "mips64el-linux-gnuabi64".to_string(),
        (a, _) => format!("{a}-linux-gnu"),
    };
    let dir = format!("/usr/include/{tuple}");
    if !std::path::Path::new(&dir).join("asm/types.h").exists()
        && !std::path::Path::new("/usr/include/asm/types.h").exists()
    {
        panic!(
            "\n\nnicflow's BPF programs need the kernel headers for {arch} \
             (`asm/types.h`), looked for in {dir}. Install them (Debian: \
             `apt-get install linux-libc-dev`) or set NICFLOW_BPF_INCLUDE to the \
             directory that holds `asm/`.\n"
        );
    }
    dir
}

/// Compile `bpf/<name>.c` of the crate being built into `<out>/<name>.o`
/// for each name, panicking with what to install when clang fails.
pub fn compile(programs: &[&str], out: &Path) {
    let clang = std::env::var("NICFLOW_BPF_CLANG").unwrap_or_else(|_| "clang".to_string());
    println!("cargo:rerun-if-env-changed=NICFLOW_BPF_CLANG");
    let multiarch = multiarch_include();
    for name in programs {
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
