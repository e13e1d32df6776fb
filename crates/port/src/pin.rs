//! Pins in bpffs that let the kernel fast path outlive the daemon.
//!
//! Place in the system: beside the packet's path, not on it. The TC port
//! pins its upcall programs here and the kernel engines above it
//! (`nicflow-dataplane`) pin their program, maps and links under the same
//! root, so that what forwards in the kernel does not depend on a process.
//!
//! A TC program attached through a tcx link is detached when the last
//! descriptor of the link closes, so a daemon that dies takes its fast path
//! with it. A link, program or map pinned in bpffs stays with no process
//! holding it: established flows keep forwarding while the daemon is dead
//! or restarting, and a restarted daemon opens the pins instead of loading
//! and verifying the program again (seconds) and adopts the flows in them.
//!
//! Layout under the daemon's root (`NICFLOW_PIN_ROOT`, else
//! `/sys/fs/bpf/nicflow/<hash of the control socket path>`, mounting a
//! bpffs at `/sys/fs/bpf` when there is none and the daemon runs in the
//! host's initial mount namespace; see [`choose_root`]):
//!
//! ```text
//! <root>/br-<bridge>/tc-<object+config hash>/prog, dp_flows, dp_masks, ...
//!                                             link-<ifindex>   (tc_dp, tcx)
//! <root>/br-<bridge>/xdp-<hash>/prog, maps   (program and maps only)
//! <root>/port-<ifindex>/upcall, sink         (the TC port's own programs)
//! ```
//!
//! The hash in an engine's directory name covers the BPF object and the map
//! sizes: a daemon built with another program (or configured with other
//! sizes) never adopts maps whose layout it does not know; it starts that
//! engine cold and the old pins are removed.
//!
//! Who removes pins: whatever owns them when it goes away normally (`del-br`,
//! `del-port`, `set offload`, SIGTERM/SIGINT); a panic or a kill leaves
//! them. At startup, after the configuration is restored, [`sweep`] removes
//! every pin no bridge or port of the new configuration adopted (and the
//! upcall veth pair of such a port). An operator who will not restart the
//! daemon removes the root directory (`rm -r <root>`): unpinning detaches the
//! links, then `ip link del nfu<ifindex>a` removes each upcall pair.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Environment variable naming the pin root (`off` disables pinning).
pub const ENV: &str = "NICFLOW_PIN_ROOT";

static ROOT: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Directories some live object of this process owns; [`sweep`] keeps them.
static CLAIMED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether `p` is on a bpffs.
pub fn is_bpffs(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the struct we own; the path is a valid C
    // string for the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type as i64 == BPF_FS_MAGIC
}

/// FNV-1a over `parts`: names directories after what they depend on.
pub fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0xff]) {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Why no pin root could be had ([`choose_root`]).
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// `NICFLOW_PIN_ROOT` names a directory that cannot be created.
    #[error("{ENV}={}: {source}", path.display())]
    CreateEnv {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `NICFLOW_PIN_ROOT` is not on a bpffs: pins there would fail.
    #[error("{ENV}={}: not on a bpffs (mount -t bpf bpf DIR)", .0.display())]
    NotBpffs(PathBuf),
    #[error("mounting a bpffs at {SYS_BPF}: {0}")]
    Mount(#[source] std::io::Error),
    /// The default root under the system's bpffs cannot be created.
    #[error("{}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The pin root for a daemon whose control socket is `socket`: `$NICFLOW_PIN_ROOT`
/// (created if missing; it must be on a bpffs), else a directory of its
/// own under `/sys/fs/bpf/nicflow`. When `/sys/fs/bpf` is not a bpffs, a
/// daemon in the host's initial mount namespace mounts one there (as
/// systemd does at boot, and Cilium's agent when it is missing); one in a
/// private mount namespace does not (the mount, and the pins, would die
/// with the namespace) and gets none: its fast path goes with it.
pub fn choose_root(socket: &Path) -> Result<Option<PathBuf>, RootError> {
    match std::env::var_os(ENV) {
        Some(v) if v.is_empty() || v == "off" => Ok(None),
        Some(v) => {
            let p = PathBuf::from(v);
            if let Err(source) = std::fs::create_dir_all(&p) {
                return Err(RootError::CreateEnv { path: p, source });
            }
            if !is_bpffs(&p) {
                return Err(RootError::NotBpffs(p));
            }
            Ok(Some(p))
        }
        None => {
            let base = Path::new(SYS_BPF);
            if !is_bpffs(base) {
                if !in_initial_mount_ns() {
                    tracing::warn!(
                        "{SYS_BPF} is not a bpffs and this daemon runs in a private mount \
                         namespace (a bpffs mounted here would die with it): no pins"
                    );
                    return Ok(None);
                }
                mount_sys_bpf()?;
                tracing::info!(
                    "{SYS_BPF} was not a bpffs: mounted one there (mode 0700), as systemd \
                     does at boot; it stays mounted after the daemon exits"
                );
            }
            let p = default_root(socket);
            // Retried: another daemon may remove the shared, empty
            // `nicflow` directory between our two mkdirs.
            let mut made = std::fs::create_dir_all(&p);
            for _ in 0..3 {
                if made.is_ok() {
                    break;
                }
                made = std::fs::create_dir_all(&p);
            }
            if let Err(source) = made {
                return Err(RootError::Create { path: p, source });
            }
            Ok(Some(p))
        }
    }
}

/// Where the system's bpffs is mounted.
pub const SYS_BPF: &str = "/sys/fs/bpf";

/// The pin root a daemon on control socket `socket` uses when
/// `NICFLOW_PIN_ROOT` is unset (whether or not it exists).
pub fn default_root(socket: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let id = hash(&[socket.as_os_str().as_bytes()]);
    Path::new(SYS_BPF)
        .join("nicflow")
        .join(format!("{id:016x}"))
}

/// Mount a bpffs at [`SYS_BPF`], mode 0700 (systemd's and Cilium's
/// choice). Never unmounted by nicflow: other programs may pin there too.
fn mount_sys_bpf() -> Result<(), RootError> {
    let c = |s: &str| std::ffi::CString::new(s).unwrap_or_default();
    let (src, dst, fs, data) = (c("bpf"), c(SYS_BPF), c("bpf"), c("mode=0700"));
    // SAFETY: every argument is a valid NUL-terminated string we own.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            fs.as_ptr(),
            0,
            data.as_ptr() as *const libc::c_void,
        )
    };
    if r != 0 {
        return Err(RootError::Mount(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Inode of process `pid`'s mount namespace (None: not readable).
fn mnt_ns(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

/// Parent pid of `pid` (field 4 of `/proc/<pid>/stat`, after the command).
fn ppid(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1).map(str::to_string)
}

/// Whether this process runs in the host's initial mount namespace (where
/// a mount outlives it), not a private one (`ip netns exec`, `unshare -m`)
/// whose mounts die with it. Compared with pid 1's; where pid 1's cannot be
/// read (some containers deny it), with the oldest ancestor's that can (a
/// private namespace is entered below some process outside it), else with
/// the lowest-numbered readable process's. Unknown counts as private: no
/// mount is better than one that dies with the namespace.
pub fn in_initial_mount_ns() -> bool {
    let Some(me) = mnt_ns("self") else {
        return false;
    };
    if let Some(init) = mnt_ns("1") {
        return me == init;
    }
    let mut oldest = None;
    let mut pid = "self".to_string();
    for _ in 0..64 {
        match ppid(&pid) {
            Some(p) if p != "0" => {
                match mnt_ns(&p) {
                    Some(ns) => oldest = Some(ns),
                    None => break,
                }
                pid = p;
            }
            _ => break,
        }
    }
    // No ancestor readable (reparented to pid 1): the lowest-numbered
    // process that is, the oldest one likely outside any private namespace.
    let oldest = oldest.or_else(|| {
        let own = std::process::id();
        let mut pids: Vec<u32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|p| *p != own)
            .collect();
        pids.sort_unstable();
        pids.iter().find_map(|p| mnt_ns(&p.to_string()))
    });
    oldest == Some(me)
}

/// Remove `root` if it is empty, and the shared `/sys/fs/bpf/nicflow` above
/// a default root when that is empty too (a daemon that exits leaves
/// nothing of its own in the system's bpffs).
pub fn remove_empty_root(root: &Path) {
    let _ = std::fs::remove_dir(root);
    if let Some(parent) = root.parent() {
        if parent == Path::new(SYS_BPF).join("nicflow") {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Remove pin root `root` after its daemon was killed: every pin under it
/// (the links detach, the maps are freed) and, in the caller's network
/// namespace, the upcall pair of each TC port pinned there. For harnesses
/// that SIGKILL daemons. Returns what was removed.
pub fn clean_root(root: &Path) -> Vec<String> {
    let mut gone = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(ifindex) = name.strip_prefix("port-") {
                if let Ok(mut rt) = nicflow_os::netlink::Rtnl::open(None) {
                    let _ = nicflow_os::link::del(&mut rt, &format!("nfu{ifindex}a"));
                }
            }
            gone.push(name);
        }
    }
    remove(root);
    remove_empty_root(root);
    gone
}

pub fn set_root(root: Option<PathBuf>) {
    *ROOT.lock().unwrap_or_else(|e| e.into_inner()) = root;
}

pub fn root() -> Option<PathBuf> {
    ROOT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A bridge name as a path component: itself when it is plain, else hex.
fn component(name: &str) -> String {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if plain {
        name.to_string()
    } else {
        name.bytes().map(|b| format!("{b:02x}")).collect::<String>() + "~"
    }
}

/// Directory of bridge `bridge`'s engines (None: pinning is off).
pub fn bridge_dir(bridge: &str) -> Option<PathBuf> {
    Some(root()?.join(format!("br-{}", component(bridge))))
}

/// Directory of the TC port on interface `ifindex`.
pub fn port_dir(ifindex: u32) -> Option<PathBuf> {
    Some(root()?.join(format!("port-{ifindex}")))
}

/// `dir` belongs to a live object: [`sweep`] keeps it.
pub fn claim(dir: &Path) {
    CLAIMED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(dir.to_path_buf());
}

/// Remove `dir` and every pin under it (unpinning a link nothing else
/// holds detaches it), and forget the claim.
pub fn remove(dir: &Path) {
    CLAIMED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(dir);
    if let Err(e) = remove_tree(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), "removing pins: {e}");
        }
    }
}

fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            remove_tree(&e.path())?;
        } else {
            std::fs::remove_file(e.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

/// Remove every pin under the root that no live bridge or port claimed
/// (a bridge or port left out of the configuration since the pins were
/// made, an engine turned off, a program of another build), and the
/// upcall pair of each such port. Returns what was removed.
pub fn sweep() -> Vec<String> {
    let Some(root) = root() else {
        return Vec::new();
    };
    let claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut gone = Vec::new();
    let Ok(rd) = std::fs::read_dir(&root) else {
        return gone;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        // Only what this daemon makes (bpffs has files of its own).
        if claimed.contains(&p) || !(name.starts_with("br-") || name.starts_with("port-")) {
            continue;
        }
        if claimed.iter().any(|c| c.starts_with(&p)) {
            // A bridge in use: only its engines nobody adopted go.
            if let Ok(sub) = std::fs::read_dir(&p) {
                for s in sub.flatten() {
                    if !claimed.contains(&s.path()) {
                        gone.push(format!("{name}/{}", s.file_name().to_string_lossy()));
                        remove(&s.path());
                    }
                }
            }
            continue;
        }
        remove(&p);
        if let Some(ifindex) = name.strip_prefix("port-") {
            let near = format!("nfu{ifindex}a");
            if let Ok(mut rt) = nicflow_os::netlink::Rtnl::open(None) {
                let _ = nicflow_os::link::del(&mut rt, &near);
            }
        }
        gone.push(name);
    }
    gone
}

/// A TC link held by this process: pinned (stays attached if the process
/// dies; [`HeldLink::release`] unpins and detaches it), or only owned.
#[derive(Debug)]
pub enum HeldLink {
    Pinned(aya::programs::links::PinnedLink),
    Fd(aya::programs::links::FdLink),
    /// clsact + cls_bpf (kernels before tcx): detached when dropped.
    Netlink(aya::programs::tc::SchedClassifierLink),
}

impl HeldLink {
    /// Detach: unpin, then close.
    pub fn release(self) {
        if let HeldLink::Pinned(p) = self {
            match p.unpin() {
                Ok(fd) => drop(fd),
                Err(e) => tracing::warn!("unpinning a TC link: {e}"),
            }
        }
    }

    /// Keep the link attached after this process is gone (a crash): the
    /// pin stays, only the descriptor closes.
    pub fn leave(self) {
        drop(self)
    }
}

/// A link could not be attached, taken or pinned.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct PinError {
    /// What was being done.
    pub op: &'static str,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Attach `prog` at TC ingress of `ifname` (first or last on the hook) and
/// pin the link at `pin` when given (a stale pin there is replaced).
pub fn attach_tc(
    prog: &mut aya::programs::SchedClassifier,
    ifname: &str,
    first: bool,
    pin: Option<&Path>,
) -> Result<HeldLink, PinError> {
    use aya::programs::links::FdLink;
    fn err<E: std::error::Error + Send + Sync + 'static>(
        op: &'static str,
    ) -> impl FnOnce(E) -> PinError {
        move |e| PinError {
            op,
            source: Box::new(e),
        }
    }
    let id =
        crate::attach::tc_attach(prog, ifname, first).map_err(err("attaching the TC program"))?;
    let link = prog.take_link(id).map_err(err("taking the TC link"))?;
    if <&FdLink>::try_from(&link).is_err() {
        return Ok(HeldLink::Netlink(link));
    }
    let fd = FdLink::try_from(link).map_err(err("TC link"))?;
    let Some(pin) = pin else {
        return Ok(HeldLink::Fd(fd));
    };
    let _ = std::fs::remove_file(pin);
    fd.pin(pin)
        .map(HeldLink::Pinned)
        .map_err(err("pinning the TC link"))
}

/// Open a pinned link (None if there is none at `path`).
pub fn open_link(path: &Path) -> Option<HeldLink> {
    if !path.exists() {
        return None;
    }
    match aya::programs::links::PinnedLink::from_pin(path) {
        Ok(l) => Some(HeldLink::Pinned(l)),
        Err(e) => {
            tracing::warn!(pin = %path.display(), "opening a pinned link: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_pid_is_read_past_the_command_name() {
        let want = std::os::unix::process::parent_id().to_string();
        assert_eq!(ppid("self").as_deref(), Some(want.as_str()));
        assert_eq!(ppid("no-such-pid"), None);
    }

    /// What the daemon logs when it gets no pin root, word for word as
    /// before the error was typed.
    #[test]
    fn root_errors_name_the_variable_and_the_fix() {
        assert_eq!(
            RootError::NotBpffs("/tmp/pins".into()).to_string(),
            "NICFLOW_PIN_ROOT=/tmp/pins: not on a bpffs (mount -t bpf bpf DIR)"
        );
        let io = || std::io::Error::from_raw_os_error(libc::EACCES);
        let e = RootError::CreateEnv {
            path: "/x".into(),
            source: io(),
        };
        assert!(
            e.to_string()
                .starts_with("NICFLOW_PIN_ROOT=/x: Permission denied"),
            "{e}"
        );
        assert!(RootError::Mount(io())
            .to_string()
            .starts_with("mounting a bpffs at /sys/fs/bpf: Permission denied"));
        let e = RootError::Create {
            path: "/sys/fs/bpf/nicflow/1".into(),
            source: io(),
        };
        assert!(
            e.to_string()
                .starts_with("/sys/fs/bpf/nicflow/1: Permission denied"),
            "{e}"
        );
    }

    #[test]
    fn default_root_depends_on_the_socket_only() {
        let a = default_root(Path::new("/run/nicflow.sock"));
        assert!(a.starts_with("/sys/fs/bpf/nicflow"));
        assert_eq!(a, default_root(Path::new("/run/nicflow.sock")));
        assert_ne!(a, default_root(Path::new("/run/other.sock")));
    }

    #[test]
    fn bridge_names_become_safe_components() {
        assert_eq!(component("br0"), "br0");
        assert_eq!(component("br-int.1"), "br-int.1");
        assert_eq!(component("../x"), "2e2e2f78~");
        assert_eq!(component(".hidden"), "2e68696464656e~");
        assert_ne!(hash(&[b"a", b"bc"]), hash(&[b"ab", b"c"]));
    }
}
