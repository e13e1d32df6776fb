//! Sysctls, written to `/proc/sys` directly (what `sysctl -w` does).
//!
//! `net.*` keys are per network namespace: `/proc/sys/net` shows the
//! namespace of the thread that looks, so a write for another namespace
//! happens on a thread that joined it ([`super::netns::run_in`]).

use super::{netns, OsError, Result};
use std::path::PathBuf;

/// The file behind `key`: `net.ipv6.conf.eth0.disable_ipv6` ->
/// `/proc/sys/net/ipv6/conf/eth0/disable_ipv6`. As in `sysctl`, a key
/// written with `/` keeps its dots (an interface named `eth0.100`).
pub fn path(key: &str) -> Result<PathBuf> {
    let bad = |why: &str| OsError::Invalid {
        what: "sysctl key",
        value: key.to_string(),
        why: why.to_string(),
    };
    let rel = if key.contains('/') {
        key.trim_start_matches('/').to_string()
    } else {
        key.replace('.', "/")
    };
    if rel.is_empty()
        || rel
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err(bad("empty or `..` component"));
    }
    if rel.contains('\0') {
        return Err(bad("contains NUL"));
    }
    Ok(PathBuf::from("/proc/sys").join(rel))
}

/// Set `key` to `value` in namespace `ns` (`None`: the caller's).
///
/// # Errors
/// `ENOENT` ([`OsError::is_missing`]) for a key the kernel does not have
/// (IPv6 off, interface gone); the kernel's refusal of a value otherwise.
pub fn write(ns: Option<&str>, key: &str, value: &str) -> Result<()> {
    let p = path(key)?;
    netns::run_in(ns, || {
        std::fs::write(&p, format!("{value}\n"))
            .map_err(|e| OsError::sys("write", format!("{} ({key}={value})", p.display()), e))
    })
}

/// Read `key` in namespace `ns`, trimmed.
pub fn read(ns: Option<&str>, key: &str) -> Result<String> {
    let p = path(key)?;
    netns::run_in(ns, || {
        std::fs::read_to_string(&p)
            .map(|s| s.trim().to_string())
            .map_err(|e| OsError::sys("read", p.display().to_string(), e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_proc_sys_paths() {
        assert_eq!(
            path("net.ipv6.conf.nf0a.disable_ipv6").unwrap(),
            PathBuf::from("/proc/sys/net/ipv6/conf/nf0a/disable_ipv6")
        );
        assert_eq!(
            path("net/ipv4/conf/eth0.100/rp_filter").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
        for bad in ["", "net..x", "net/../../etc", "a\0b"] {
            assert!(path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reads_here_and_a_missing_key_is_missing() {
        assert!(!read(None, "kernel.ostype").unwrap().is_empty());
        let e = write(None, "net.nicflow_no_such_key", "1").unwrap_err();
        assert!(e.is_missing() || e.errno() == Some(libc::EACCES), "{e}");
    }
}
