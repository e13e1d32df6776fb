//! Generates the P4Runtime gRPC service and messages from the descriptors that
//! the `p4runtime` Python wheel embeds (no .proto sources and no protoc: the
//! wheel's compiled modules are dumped as a `FileDescriptorSet` by
//! scripts/p4runtime_fds.py and handed to tonic-build's `compile_fds`).

use std::path::PathBuf;
use std::process::Command;

/// Where scripts/setup.sh installs p4runtime and p4runtime-shell.
const VENV_PYTHON: &str = "/opt/nicflow-tools/p4rt-venv/bin/python";

fn main() {
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let script = manifest.join("../../scripts/p4runtime_fds.py");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=NICFLOW_P4RT_PYTHON");
    // A venv rebuilt by scripts/setup.sh (e.g. another wheel version) regenerates.
    let venv_cfg = std::path::Path::new(VENV_PYTHON).with_file_name("../pyvenv.cfg");
    if venv_cfg.exists() {
        println!("cargo:rerun-if-changed={}", venv_cfg.display());
    }
    let python = std::env::var("NICFLOW_P4RT_PYTHON").unwrap_or_else(|_| {
        if std::path::Path::new(VENV_PYTHON).exists() {
            VENV_PYTHON.to_string()
        } else {
            "python3".to_string()
        }
    });
    let fds_path = out.join("p4runtime.fds");
    let version_path = out.join("p4runtime_version.txt");
    let status = Command::new(&python)
        .arg(&script)
        .arg(&fds_path)
        .arg(&version_path)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {python} {}: {e}; run `bash scripts/setup.sh`",
                script.display()
            )
        });
    if !status.success() {
        panic!(
            "{python} {} failed ({status}): the p4runtime Python wheel is needed to generate \
             the P4Runtime messages; run `bash scripts/setup.sh` (installs it into \
             /opt/nicflow-tools/p4rt-venv) or point NICFLOW_P4RT_PYTHON at a python that has it",
            script.display()
        );
    }
    let bytes = std::fs::read(&fds_path).expect("p4runtime_fds.py wrote its output");
    let fds = <prost_types::FileDescriptorSet as prost::Message>::decode(bytes.as_slice())
        .expect("p4runtime_fds.py writes a valid FileDescriptorSet");
    tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)
        .expect("tonic-build generates the P4Runtime service");
}
