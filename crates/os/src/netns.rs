//! Named network namespaces, the way iproute2 keeps them: a namespace
//! `NAME` is a bind mount of a namespace file on `/run/netns/NAME`, so
//! `ip netns`, our tests and other tools see the same set.
//!
//! - [`add`] does what `ip netns add` does: `/run/netns` made a shared
//!   mount (so mounts under it reach every mount namespace that runs
//!   programs in a namespace), an empty file created, a thread that
//!   `unshare(CLONE_NEWNET)`s and bind-mounts its own namespace on the
//!   file. The thread then ends; the mount keeps the namespace alive.
//! - [`run_in`] runs a closure on a thread that joined a namespace with
//!   `setns(2)`: `setns` changes only the calling thread, so the process's
//!   other threads (a daemon's forwarding loop) never move.
//! - [`command`] is `ip netns exec` without `ip`: a `Command` whose
//!   `pre_exec` joins the namespace, makes a private mount namespace and
//!   mounts a fresh sysfs on `/sys` — `nicflow gen` and `sink` read
//!   `/sys/class/net/IFACE/*`, which shows the namespace sysfs was mounted
//!   from, not the reader's.

use super::{OsError, Result};
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where named namespaces live (iproute2's `NETNS_RUN_DIR`).
pub const RUN_DIR: &str = "/run/netns";

/// `/run/netns/NAME`, for a name that can be a file there.
pub fn path(name: &str) -> Result<PathBuf> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.len() > 255
        || name.bytes().any(|b| b == b'/' || b == 0)
    {
        return Err(OsError::Invalid {
            what: "namespace name",
            value: name.to_string(),
            why: "must be a file name (no `/`, not `.` or `..`)".into(),
        });
    }
    Ok(Path::new(RUN_DIR).join(name))
}

/// Whether namespace `name` exists (its file does).
pub fn exists(name: &str) -> bool {
    path(name).is_ok_and(|p| p.exists())
}

/// Names of the namespaces under `/run/netns` (`ip netns list`), sorted.
pub fn list() -> Result<Vec<String>> {
    let rd = match std::fs::read_dir(RUN_DIR) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(OsError::sys("readdir", RUN_DIR, e)),
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| OsError::Invalid {
        what: "path",
        value: s.to_string(),
        why: "contains NUL".into(),
    })
}

fn mount(src: &str, target: &str, fstype: &str, flags: libc::c_ulong) -> io::Result<()> {
    let (src, target, fstype) = (
        CString::new(src)?,
        CString::new(target)?,
        CString::new(fstype)?,
    );
    // SAFETY: valid NUL-terminated strings; no data argument.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Make `/run/netns` a shared mount point, as iproute2 does before its
/// first `netns add`: bind it on itself if it is not a mount yet.
fn share_run_dir() -> Result<()> {
    std::fs::create_dir_all(RUN_DIR).map_err(|e| OsError::sys("mkdir", RUN_DIR, e))?;
    let shared = libc::MS_SHARED | libc::MS_REC;
    match mount("none", RUN_DIR, "none", shared) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            mount(RUN_DIR, RUN_DIR, "none", libc::MS_BIND | libc::MS_REC)
                .map_err(|e| OsError::sys("mount(MS_BIND)", RUN_DIR, e))?;
            mount("none", RUN_DIR, "none", shared)
                .map_err(|e| OsError::sys("mount(MS_SHARED)", RUN_DIR, e))
        }
        Err(e) => Err(OsError::sys("mount(MS_SHARED)", RUN_DIR, e)),
    }
}

/// Create namespace `name` with its loopback up (`ip netns add NAME; ip -n
/// NAME link set lo up`).
///
/// # Errors
/// `EEXIST` (see [`OsError::is_exists`]) if the name is taken; on any
/// failure the file is removed again.
pub fn add(name: &str) -> Result<()> {
    let file = path(name)?;
    share_run_dir()?;
    let shown = file.display().to_string();
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)
        .map_err(|e| OsError::sys("create", shown.clone(), e))?;
    let made = std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            // SAFETY: unshare has no memory-safety preconditions; it moves
            // only this thread, which ends right after.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(OsError::sys(
                    "unshare(CLONE_NEWNET)",
                    name,
                    io::Error::last_os_error(),
                ));
            }
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let own = format!("/proc/self/task/{tid}/ns/net");
            mount(&own, &shown, "none", libc::MS_BIND)
                .map_err(|e| OsError::sys("mount(MS_BIND)", shown.clone(), e))?;
            super::link::set_up(&mut super::netlink::Rtnl::open_here()?, "lo")
        })
        .join()
        .unwrap_or_else(|_| {
            Err(OsError::sys(
                "netns add",
                name,
                io::Error::other("thread panicked"),
            ))
        })
    });
    if made.is_err() {
        let _ = del(name);
    }
    made
}

/// Delete namespace `name` (`ip netns del`): detach its mount and remove
/// the file. The namespace itself goes once nothing holds it (processes,
/// open descriptors); its interfaces go with it.
///
/// # Errors
/// `ENOENT` ([`OsError::is_missing`]) if there is no such namespace.
pub fn del(name: &str) -> Result<()> {
    let file = path(name)?;
    let c = cstr(&file.display().to_string())?;
    // SAFETY: valid path string; failure (not mounted) is fine, as in
    // iproute2: the unlink below is what reports a missing namespace.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    std::fs::remove_file(&file).map_err(|e| OsError::sys("unlink", file.display().to_string(), e))
}

/// Pids of the processes whose network namespace is `name` (`ip netns
/// pids`): `/proc/PID/ns/net` is the same inode as the namespace file.
pub fn pids(name: &str) -> Result<Vec<u32>> {
    let file = path(name)?;
    let want = std::fs::metadata(&file)
        .map_err(|e| OsError::sys("stat", file.display().to_string(), e))?;
    let rd = std::fs::read_dir("/proc").map_err(|e| OsError::sys("readdir", "/proc", e))?;
    let mut out: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| m.dev() == want.dev() && m.ino() == want.ino())
        })
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Join namespace `name` on the calling thread.
fn enter(name: &str) -> Result<()> {
    let file = path(name)?;
    let shown = file.display().to_string();
    let f = std::fs::File::open(&file).map_err(|e| OsError::sys("open", shown.clone(), e))?;
    // SAFETY: setns on a valid namespace descriptor; affects only the
    // calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(OsError::sys(
            "setns(CLONE_NEWNET)",
            shown,
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Run `f` inside namespace `ns`: on a thread that joined it and ends with
/// `f`, or on the calling thread for `None`. Anything `f` creates there
/// (sockets) stays in that namespace after the thread is gone.
pub fn run_in<T: Send>(ns: Option<&str>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let Some(ns) = ns else {
        return f();
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| {
            Err(OsError::sys(
                "setns thread",
                ns,
                io::Error::other("panicked"),
            ))
        })
    })
}

/// Like [`run_in`] for work that fails with other error types (e.g. a
/// control request): `setns` errors come back as `E` through `From`.
pub fn run_in_with<T: Send, E: Send + From<OsError>>(
    ns: &str,
    f: impl FnOnce() -> std::result::Result<T, E> + Send,
) -> std::result::Result<T, E> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| {
            Err(OsError::sys("setns thread", ns, io::Error::other("panicked")).into())
        })
    })
}

/// `argv` run inside namespace `ns` (what `ip netns exec NS ARGV...` does,
/// without `ip`), or directly for `None`. The child joins the namespace
/// in `pre_exec`, then gets a private mount namespace (mounts propagate
/// into it, not out) with a sysfs of its own namespace on `/sys`. A
/// namespace that cannot be joined makes `spawn` fail with that errno.
///
/// # Panics
/// If `argv` is empty.
pub fn command<S: AsRef<OsStr>>(ns: Option<&str>, argv: &[S]) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    if let Some(ns) = ns {
        let file = path(ns)
            .ok()
            .and_then(|p| CString::new(p.into_os_string().into_encoded_bytes()).ok());
        let name = CString::new(ns).unwrap_or_default();
        // SAFETY: the closure runs in the forked child before exec and
        // makes only async-signal-safe system calls (open, setns, close,
        // unshare, mount, statvfs, umount2) on strings prepared before the
        // fork; it allocates nothing (`io::Error` from an errno does not).
        unsafe {
            c.pre_exec(move || match &file {
                Some(f) => exec_enter(f, &name),
                None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            });
        }
    }
    c
}

/// The child side of [`command`]: iproute2's `netns_switch`.
fn exec_enter(file: &std::ffi::CStr, name: &std::ffi::CStr) -> io::Result<()> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    // SAFETY (all calls below): async-signal-safe system calls on valid
    // NUL-terminated strings and a descriptor owned here.
    unsafe {
        let fd = check(libc::open(file.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC))?;
        let joined = check(libc::setns(fd, libc::CLONE_NEWNET));
        libc::close(fd);
        joined?;
        check(libc::unshare(libc::CLONE_NEWNS))?;
        // Our mounts (the new /sys) must not propagate back to the parent.
        check(libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_SLAVE | libc::MS_REC,
            std::ptr::null(),
        ))?;
        let mut flags: libc::c_ulong = 0;
        if libc::umount2(c"/sys".as_ptr(), libc::MNT_DETACH) < 0 {
            // No sysfs there to take away; a read-only /sys can only be
            // covered by a read-only one.
            let mut st: libc::statvfs = std::mem::zeroed();
            if libc::statvfs(c"/sys".as_ptr(), &mut st) == 0 && st.f_flag & libc::ST_RDONLY != 0 {
                flags = libc::MS_RDONLY;
            }
        }
        check(libc::mount(
            name.as_ptr(),
            c"/sys".as_ptr(),
            c"sysfs".as_ptr(),
            flags,
            std::ptr::null(),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_plain_file_names() {
        assert_eq!(path("nf-a-h1").unwrap(), Path::new("/run/netns/nf-a-h1"));
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(path(bad).is_err(), "{bad:?}");
        }
        assert!(!exists("../etc"));
    }

    #[test]
    fn run_in_root_runs_here_and_a_missing_namespace_is_missing() {
        let me = std::thread::current().id();
        assert_eq!(
            run_in(None, || Ok(std::thread::current().id())).unwrap(),
            me
        );
        let e = run_in(Some("nicflow-no-such-ns-for-tests"), || Ok(())).unwrap_err();
        assert!(e.is_missing(), "{e}");
    }

    #[test]
    fn a_command_in_a_missing_namespace_fails_to_spawn_with_the_errno() {
        let mut c = command(Some("nicflow-no-such-ns-for-tests"), &["true"]);
        let e = c.status().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        // Root: an ordinary command.
        assert!(command(None, &["true"]).status().unwrap().success());
    }
}
