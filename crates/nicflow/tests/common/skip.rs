//! Skipping a test that cannot run here, and the checks that decide it
//! (root, tools). Shared with the experiments crate's tests, which include
//! this file by path.

use std::process::{Command, Stdio};

/// A test that cannot run here says so through this, not by passing
/// silently: the reason goes to stderr, and to `$NICFLOW_SKIP_LOG` (one
/// line per skip, which `scripts/test.sh` prints as a summary at the end);
/// with `NICFLOW_NO_SKIP` set a skip is a failure instead.
pub fn skipped(reason: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let bin = std::env::args()
        .next()
        .and_then(|a| {
            let f = std::path::Path::new(&a).file_name()?.to_str()?.to_string();
            Some(f.rsplit_once('-').map_or(f.clone(), |(b, _)| b.to_string()))
        })
        .unwrap_or_default();
    eprintln!("skipping: {reason}");
    if let Ok(path) = std::env::var("NICFLOW_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            // One write(2) per line: O_APPEND keeps parallel tests' lines whole.
            let _ = f.write_all(format!("{bin}::{test}: {reason}\n").as_bytes());
        }
    }
    if std::env::var_os("NICFLOW_NO_SKIP").is_some() {
        panic!("{test} would be skipped ({reason}) and NICFLOW_NO_SKIP is set");
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn have(tool: &str) -> bool {
    have_with(tool, "-V")
}

/// Whether `tool` can be started (`arg` should make it print and exit, e.g.
/// tshark's `-v`: its `-V` would start capturing).
pub fn have_with(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}
