//! Helpers shared by the root integration tests that build namespaces and
//! veths by hand (the real-port tests): privilege and tool checks, and
//! running commands with their failures turned into readable errors.
#![allow(dead_code)]

use std::process::{Command, Stdio};

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Skip (with the message the lab's CI greps for) unless we can build a lab.
pub fn lab_possible() -> bool {
    if !is_root() {
        eprintln!("skipping: needs root");
        return false;
    }
    for tool in ["ip", "ping"] {
        if !have(tool) {
            eprintln!("skipping: `{tool}` not installed");
            return false;
        }
    }
    true
}

pub fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub fn must(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("{e}"))
}
