//! What the daemon writes down so that a crash loses nothing it must put
//! back: private state files, and the original settings of the interfaces
//! its ports change.
//!
//! **Private files.** [`write_private`] is how every state file is written
//! (the ESP sequence reservations of `port::ipsec`, the interface records
//! here): owner-only (file 0600, its directory 0700), atomically (a
//! temporary file, fsync, rename, fsync of the directory), so a reader
//! sees the old content or the new, never a torn file, and nobody else
//! sees it at all.
//!
//! **Interface originals.** An `afxdp` port turns the interface's offloads
//! off (GRO, TSO, GSO, checksum offload), an `afpacket` port with
//! `vnet_hdr` turns transmit offloads on (`port::sys`). Dropping the port
//! puts them back (`del-port`, SIGTERM). A daemon killed with `kill -9`
//! cannot: before this module the restarted daemon then took the degraded
//! state for the original and the interface lost its offloads for good.
//! So the features' original *wanted* states are recorded here (one file
//! per interface, by feature name) *before* they are changed; a record
//! goes when the port puts the features back. [`restore_orphans`], called
//! when the daemon starts (before it opens any port), puts back every
//! interface a dead daemon left changed and removes its record; a port
//! opened on an interface that still has a record takes the recorded
//! originals, not the current state.
//!
//! A record is only acted on where it certainly applies: same boot
//! (`/proc/sys/kernel/random/boot_id`; a reboot resets the devices), same
//! network namespace, and the same interface (its index; a deleted and
//! recreated interface starts fresh). Records of a daemon still running
//! (its pid with the same start time) are left to it. Without a state
//! directory ([`set_dir`] not called: the ports used as a library) nothing
//! is recorded and only the in-process restore applies.
//!
//! The other things a port changes need no record: the XDP program is
//! attached through a BPF link and promiscuous mode is a packet-socket
//! membership, both undone by the kernel when the process dies; MTU and
//! channels are never changed.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where interface records live (the daemon sets it; see [`set_dir`]).
static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Keep interface records in `dir` (the daemon: `iface-state/` next to its
/// configuration file). `None`: record nothing.
pub fn set_dir(dir: Option<PathBuf>) {
    *DIR.lock().unwrap_or_else(|e| e.into_inner()) = dir;
}

fn dir() -> Option<PathBuf> {
    DIR.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Create `dir` (and missing parents) owner-only; an existing `dir` itself
/// is made 0700 (not its parents, which are not ours).
pub(crate) fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Write `bytes` to `path` owner-only and atomically (see the module docs).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    private_dir(dir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // A leftover temporary file keeps its old mode through O_CREAT.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // The rename itself is durable once the directory is.
    std::fs::File::open(dir)?.sync_all()
}

/// An interface's original feature states, as recorded before a port
/// changed them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    ifname: String,
    ifindex: u32,
    /// Inode of the network namespace the interface was changed in.
    netns: u64,
    boot_id: String,
    /// The daemon that changed it: pid and start time (clock ticks after
    /// boot, `/proc/PID/stat` field 22), which tell it from a reused pid.
    pid: u32,
    start_time: u64,
    /// Feature name (`ETH_SS_FEATURES`, as `ethtool -k` prints them in
    /// its long form) -> wanted state before nicflow changed it.
    features: BTreeMap<String, bool>,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn netns_inode() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// Field 22 of `/proc/PID/stat` (start time), `None` if no such process.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn record_path(dir: &Path, ifname: &str) -> PathBuf {
    dir.join(format!("iface-{}-{ifname}.json", netns_inode()))
}

fn read_record(path: &Path) -> Option<Record> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str(&text) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(
                "{}: unreadable interface record ({e}): removed",
                path.display()
            );
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

/// What a record found on disk is worth.
#[derive(Debug, PartialEq, Eq)]
enum Standing {
    /// This boot, this namespace, the same interface, its daemon gone.
    Orphan,
    /// Its daemon is alive (this process included).
    Owned,
    /// Another boot, or the interface is gone or was recreated.
    Stale,
    /// Another network namespace: not ours to judge.
    Foreign,
}

fn standing(r: &Record) -> Standing {
    if r.boot_id != boot_id() {
        return Standing::Stale;
    }
    if r.netns != netns_inode() {
        return Standing::Foreign;
    }
    if super::sys::if_index(&r.ifname).ok() != Some(r.ifindex) {
        return Standing::Stale;
    }
    if start_time(r.pid).is_some_and(|t| t == r.start_time) {
        return Standing::Owned;
    }
    Standing::Orphan
}

/// The recorded originals of `ifname`, if a record that applies exists:
/// what a port opening it must take as the interface's own settings.
pub(super) fn originals(ifname: &str) -> BTreeMap<String, bool> {
    let Some(dir) = dir() else {
        return BTreeMap::new();
    };
    let path = record_path(&dir, ifname);
    match read_record(&path) {
        Some(r) => match standing(&r) {
            Standing::Orphan | Standing::Owned => r.features,
            Standing::Stale => {
                let _ = std::fs::remove_file(&path);
                BTreeMap::new()
            }
            Standing::Foreign => BTreeMap::new(),
        },
        None => BTreeMap::new(),
    }
}

/// Write down `features` (name -> original wanted state) for `ifname`
/// before they are changed. `Ok(false)` without a state directory.
pub(super) fn record(ifname: &str, features: &BTreeMap<String, bool>) -> io::Result<bool> {
    let Some(dir) = dir() else {
        return Ok(false);
    };
    let pid = std::process::id();
    let r = Record {
        ifname: ifname.to_string(),
        ifindex: super::sys::if_index(ifname)?,
        netns: netns_inode(),
        boot_id: boot_id(),
        pid,
        start_time: start_time(pid).unwrap_or(0),
        features: features.clone(),
    };
    let text = serde_json::to_string_pretty(&r).map_err(io::Error::other)?;
    write_private(&record_path(&dir, ifname), text.as_bytes())?;
    Ok(true)
}

/// The interface is back as it was: its record goes.
pub(super) fn forget(ifname: &str) {
    if let Some(dir) = dir() {
        let path = record_path(&dir, ifname);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("{}: {e}", path.display()),
        }
    }
}

/// Put back every interface a dead daemon left changed (records in the
/// state directory whose daemon is gone), removing their records; stale
/// records (another boot, interface gone or recreated) are removed too.
/// Returns the interfaces restored. Called by the daemon at start, before
/// it opens its ports.
pub fn restore_orphans() -> Vec<String> {
    let Some(dir) = dir() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut restored = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with("iface-") || !name.ends_with(".json") {
            continue;
        }
        let Some(r) = read_record(&path) else {
            continue;
        };
        match standing(&r) {
            Standing::Orphan => match super::sys::write_wanted(&r.ifname, &r.features) {
                Ok(()) => {
                    tracing::info!(
                        iface = %r.ifname,
                        "offload features put back as recorded before a daemon (pid {}) that did not exit cleanly changed them",
                        r.pid
                    );
                    let _ = std::fs::remove_file(&path);
                    restored.push(r.ifname);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => tracing::warn!(
                    iface = %r.ifname,
                    "could not put back the recorded offload features ({e}); record kept in {}",
                    path.display()
                ),
            },
            Standing::Stale => {
                tracing::debug!(iface = %r.ifname, "stale interface record removed");
                let _ = std::fs::remove_file(&path);
            }
            Standing::Owned | Standing::Foreign => {}
        }
    }
    restored
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn private_files_are_owner_only_and_replaced_whole() {
        let base = std::env::temp_dir().join(format!("nf-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = base.join("s");
        let file = dir.join("x.seq");
        write_private(&file, b"1\n").unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&file), 0o600);
        // A file and directory left world-readable by an older version
        // are tightened by the next write.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&file, b"2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "2\n");
        assert_eq!((mode(&dir), mode(&file)), (0o700, 0o600));
        // Only the file: no temporary left behind.
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // The parent (not ours) is left alone.
        assert_eq!(mode(&base), 0o755);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn records_tell_orphans_from_live_stale_and_foreign_ones() {
        let me = std::process::id();
        let r = Record {
            ifname: "lo".into(),
            ifindex: super::super::sys::if_index("lo").unwrap(),
            netns: netns_inode(),
            boot_id: boot_id(),
            pid: me,
            start_time: start_time(me).unwrap(),
            features: BTreeMap::new(),
        };
        assert_eq!(standing(&r), Standing::Owned);
        let dead = Record {
            start_time: r.start_time + 1,
            ..r.clone()
        };
        assert_eq!(standing(&dead), Standing::Orphan);
        let other_boot = Record {
            boot_id: "x".into(),
            ..dead.clone()
        };
        assert_eq!(standing(&other_boot), Standing::Stale);
        let recreated = Record {
            ifindex: r.ifindex + 1000,
            ..dead.clone()
        };
        assert_eq!(standing(&recreated), Standing::Stale);
        let gone = Record {
            ifname: "nfstnosuch0".into(),
            ..dead.clone()
        };
        assert_eq!(standing(&gone), Standing::Stale);
        let foreign = Record {
            netns: r.netns + 1,
            ..dead
        };
        assert_eq!(standing(&foreign), Standing::Foreign);
    }
}
