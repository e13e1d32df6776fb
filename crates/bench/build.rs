//! Compiles `bpf/xdp_redirect_min.c`, the XDP baseline the experiments
//! compare the engines with, with the switch crate's BPF build code.

#[path = "../port/build_bpf.rs"]
mod bpf;

fn main() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bpf::compile(&["xdp_redirect_min"], &out);
}
