//! What the integration tests of nicflow-ipsec share.

use std::io::Write;

/// Says why the test cannot run instead of passing silently (stderr, and
/// `$NICFLOW_SKIP_LOG` for scripts/test.sh's summary); a failure under
/// `NICFLOW_NO_SKIP`.
pub fn skipped(reason: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("skipped: {reason}");
    if let Ok(path) = std::env::var("NICFLOW_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let krate = env!("CARGO_CRATE_NAME");
            let _ = f.write_all(format!("{krate}::{test}: {reason}\n").as_bytes());
        }
    }
    if std::env::var_os("NICFLOW_NO_SKIP").is_some() {
        panic!("{test} would be skipped ({reason}) and NICFLOW_NO_SKIP is set");
    }
}
