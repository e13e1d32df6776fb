//! Offload features by name, through `ioctl(SIOCETHTOOL)` with
//! `ETHTOOL_GFEATURES`/`ETHTOOL_SFEATURES` (what `ethtool -k`/`-K` do).
//!
//! Features are addressed by the kernel's own names (`ETH_SS_FEATURES`
//! strings: `rx-gro`, `tx-checksum-ip-generic`, ...) rather than by the
//! legacy per-feature commands, which miss newer bits (on Linux 6.18
//! `ETHTOOL_STSO` leaves `tx-tcp-accecn-segmentation` on). Changing a
//! feature sets its *wanted* bit; the kernel then derives the active set
//! (turning checksum offload off also turns TSO off, as with `ethtool -K
//! tx off`). The ports keep what they changed and put it back
//! (`port::SavedFeatures`); the lab and the VFs call [`set`] on interfaces
//! they create.

use super::{check_ifname, netns, OsError, Result};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

// Kernel ABI: include/uapi/linux/ethtool.h.
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_STATS: u32 = 1;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// A socket for interface ioctls in the calling thread's namespace.
pub(crate) fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call, no pointers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An ethtool command whose variable-length argument struct the caller laid
/// out in `buf` (native endian, command first). `buf` must be sized for
/// everything the command reads and writes (the lengths inside it say so;
/// see [`feature_names`] for the slack). `ifname` must fit `IFNAMSIZ`
/// with its NUL (checked).
pub(crate) fn ethtool_raw(fd: RawFd, ifname: &str, buf: &mut [u8]) -> io::Result<libc::c_int> {
    if ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = buf.as_mut_ptr().cast();
    // SAFETY: `ifr` is a valid ifreq for the call; SIOCETHTOOL reads and
    // writes `ifru_data`, which points at `buf`, sized by the caller for
    // the command in it.
    let r = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL as _, &mut ifr as *mut libc::ifreq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `ETHTOOL_SFEATURES` with one `(valid, requested)` pair per feature
/// block, every block in order (a `size` below the kernel's feature word
/// count is `EINVAL`). A positive result only flags features the device
/// cannot change.
pub fn write_features(fd: RawFd, ifname: &str, blocks: &[(u32, u32)]) -> io::Result<()> {
    // struct ethtool_sfeatures { u32 cmd; u32 size; struct
    // ethtool_set_features_block { u32 valid; u32 requested; } features[]; }
    let mut buf = vec![0u8; 8 + 8 * blocks.len()];
    buf[0..4].copy_from_slice(&ETHTOOL_SFEATURES.to_ne_bytes());
    buf[4..8].copy_from_slice(&(blocks.len() as u32).to_ne_bytes());
    for (i, (valid, requested)) in blocks.iter().enumerate() {
        let at = 8 + 8 * i;
        buf[at..at + 4].copy_from_slice(&valid.to_ne_bytes());
        buf[at + 4..at + 8].copy_from_slice(&requested.to_ne_bytes());
    }
    ethtool_raw(fd, ifname, &mut buf).map(drop)
}

/// Every feature block of `ifname` as `[available, requested, active,
/// never_changed]` (`ETHTOOL_GFEATURES`).
fn feature_blocks(fd: RawFd, ifname: &str, blocks: usize) -> io::Result<Vec<[u32; 4]>> {
    // struct ethtool_gfeatures { u32 cmd; u32 size; struct
    // ethtool_get_features_block { u32 available; u32 requested; u32
    // active; u32 never_changed; } features[]; }
    let mut buf = vec![0u8; 8 + 16 * blocks];
    buf[0..4].copy_from_slice(&ETHTOOL_GFEATURES.to_ne_bytes());
    buf[4..8].copy_from_slice(&(blocks as u32).to_ne_bytes());
    ethtool_raw(fd, ifname, &mut buf)?;
    let word = |at: usize| u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default());
    Ok((0..blocks)
        .map(|b| {
            let at = 8 + 16 * b;
            [word(at), word(at + 4), word(at + 8), word(at + 12)]
        })
        .collect())
}

/// The `requested` (user-wanted) bits of every feature block
/// (`ETHTOOL_GFEATURES`).
pub(crate) fn wanted_features(fd: RawFd, ifname: &str, blocks: usize) -> io::Result<Vec<u32>> {
    Ok(feature_blocks(fd, ifname, blocks)?
        .into_iter()
        .map(|b| b[1])
        .collect())
}

/// The strings of string set `set` (`ETH_SS_FEATURES`, `ETH_SS_STATS`)
/// of `ifname`, in order. `EOPNOTSUPP` on a kernel or device without it.
fn string_set(fd: RawFd, ifname: &str, set: u32) -> io::Result<Vec<String>> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask;
    // u32 data[]; }
    let mut info = vec![0u8; 20];
    info[0..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    info[8..16].copy_from_slice(&(1u64 << set).to_ne_bytes());
    ethtool_raw(fd, ifname, &mut info)?;
    let mask = u64::from_ne_bytes(info[8..16].try_into().unwrap_or_default());
    if mask & (1 << set) == 0 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    let count = u32::from_ne_bytes(info[16..20].try_into().unwrap_or_default()) as usize;
    if count > 65536 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    // The kernel writes as many strings as *it* counts, so leave slack.
    let room = count + 64;
    let mut strings = vec![0u8; 12 + room * ETH_GSTRING_LEN];
    strings[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    strings[4..8].copy_from_slice(&set.to_ne_bytes());
    strings[8..12].copy_from_slice(&(count as u32).to_ne_bytes());
    ethtool_raw(fd, ifname, &mut strings)?;
    let len = u32::from_ne_bytes(strings[8..12].try_into().unwrap_or_default()) as usize;
    Ok(strings[12..]
        .chunks_exact(ETH_GSTRING_LEN)
        .take(len.min(room))
        .map(|s| {
            let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        })
        .collect())
}

/// The kernel's feature names, in bit order (`ETH_SS_FEATURES`).
/// `EOPNOTSUPP` on a kernel or device without them.
pub(crate) fn feature_names(fd: RawFd, ifname: &str) -> io::Result<Vec<String>> {
    let names = string_set(fd, ifname, ETH_SS_FEATURES)?;
    if names.is_empty() || names.len() > 4096 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    Ok(names)
}

/// Set every feature whose name `pick` selects to `on`. Returns, per
/// 32-feature block, the bits changed and what their wanted state was, to
/// put back later with [`write_features`].
pub fn set_features_fd(
    fd: RawFd,
    ifname: &str,
    pick: &dyn Fn(&str) -> bool,
    on: bool,
) -> io::Result<Vec<(u32, u32)>> {
    let names = feature_names(fd, ifname)?;
    let blocks = names.len().div_ceil(32);
    let before = wanted_features(fd, ifname, blocks)?;
    // (valid, requested) per block: the picked bits, all on or all off.
    let mut set = vec![(0u32, 0u32); blocks];
    for (i, _) in names.iter().enumerate().filter(|(_, n)| pick(n)) {
        set[i / 32].0 |= 1 << (i % 32);
    }
    for b in &mut set {
        b.1 = if on { b.0 } else { 0 };
    }
    let saved = set
        .iter()
        .zip(&before)
        .map(|(&(valid, _), wanted)| (valid, wanted & valid))
        .collect();
    write_features(fd, ifname, &set)?;
    Ok(saved)
}

/// The wanted state of the features `pick` selects, by name (what a port
/// records before changing them).
pub fn wanted_by_name(
    fd: RawFd,
    ifname: &str,
    pick: &dyn Fn(&str) -> bool,
) -> io::Result<std::collections::BTreeMap<String, bool>> {
    let names = feature_names(fd, ifname)?;
    let wanted = wanted_features(fd, ifname, names.len().div_ceil(32))?;
    Ok(names
        .into_iter()
        .enumerate()
        .filter(|(_, n)| pick(n))
        .map(|(i, n)| (n, wanted[i / 32] & (1 << (i % 32)) != 0))
        .collect())
}

/// Set each named feature's wanted state (`ETHTOOL_SFEATURES`); names the
/// device does not have are skipped.
pub fn write_wanted_by_name(
    fd: RawFd,
    ifname: &str,
    features: &std::collections::BTreeMap<String, bool>,
) -> io::Result<()> {
    let names = feature_names(fd, ifname)?;
    let mut blocks = vec![(0u32, 0u32); names.len().div_ceil(32)];
    for (i, n) in names.iter().enumerate() {
        if let Some(&on) = features.get(n) {
            blocks[i / 32].0 |= 1 << (i % 32);
            if on {
                blocks[i / 32].1 |= 1 << (i % 32);
            }
        }
    }
    if blocks.iter().all(|(valid, _)| *valid == 0) {
        return Ok(());
    }
    write_features(fd, ifname, &blocks)
}

/// The features `ethtool -K DEV tx off|on` names: every
/// `tx-checksum-*` (turning them off also stops TSO).
pub fn is_tx_checksum(name: &str) -> bool {
    name.starts_with("tx-checksum-")
}

/// The feature `ethtool -K DEV gro on|off` names.
pub fn is_gro(name: &str) -> bool {
    name == "rx-gro"
}

/// Set the features of `dev` in namespace `ns` that `pick` selects to `on`
/// (`ethtool -K DEV FEATURE on|off`). Features the device cannot change
/// are left as they are without error, as ethtool does.
pub fn set(ns: Option<&str>, dev: &str, pick: fn(&str) -> bool, on: bool) -> Result<()> {
    check_ifname(dev)?;
    netns::run_in(ns, || {
        let err = |e| {
            OsError::sys(
                "ioctl(SIOCETHTOOL, ETHTOOL_SFEATURES)",
                format!("dev {dev}"),
                e,
            )
        };
        let sock = ioctl_socket().map_err(|e| OsError::sys("socket(AF_INET)", "", e))?;
        set_features_fd(sock.as_raw_fd(), dev, &pick, on)
            .map(drop)
            .map_err(err)
    })
}

/// The features of `dev` in namespace `ns` by name, each with its state
/// per `select` (an index into `[available, requested, active,
/// never_changed]`).
fn feature_bits(ns: Option<&str>, dev: &str, select: usize) -> Result<Vec<(String, bool)>> {
    check_ifname(dev)?;
    netns::run_in(ns, || {
        let err = |e| {
            OsError::sys(
                "ioctl(SIOCETHTOOL, ETHTOOL_GFEATURES)",
                format!("dev {dev}"),
                e,
            )
        };
        let sock = ioctl_socket().map_err(|e| OsError::sys("socket(AF_INET)", "", e))?;
        let fd = sock.as_raw_fd();
        let names = feature_names(fd, dev).map_err(err)?;
        let blocks = feature_blocks(fd, dev, names.len().div_ceil(32)).map_err(err)?;
        Ok(names
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, blocks[i / 32][select] & (1 << (i % 32)) != 0))
            .collect())
    })
}

/// The wanted state of every feature of `dev` in namespace `ns`, by name
/// (active state may differ where the kernel derives it).
pub fn wanted(ns: Option<&str>, dev: &str) -> Result<Vec<(String, bool)>> {
    feature_bits(ns, dev, 1)
}

/// The active state of every feature of `dev` in namespace `ns`, by the
/// kernel's names (what `ethtool -k` lists).
pub fn active(ns: Option<&str>, dev: &str) -> Result<Vec<(String, bool)>> {
    feature_bits(ns, dev, 2)
}

/// The driver's statistics of `dev` in namespace `ns`, by name, in the
/// driver's order (what `ethtool -S` prints: `ETH_SS_STATS` strings and
/// `ETHTOOL_GSTATS`). Empty for a driver without any.
pub fn stats(ns: Option<&str>, dev: &str) -> Result<Vec<(String, u64)>> {
    check_ifname(dev)?;
    netns::run_in(ns, || {
        let err = |e| {
            OsError::sys(
                "ioctl(SIOCETHTOOL, ETHTOOL_GSTATS)",
                format!("dev {dev}"),
                e,
            )
        };
        let sock = ioctl_socket().map_err(|e| OsError::sys("socket(AF_INET)", "", e))?;
        let fd = sock.as_raw_fd();
        let names = match string_set(fd, dev, ETH_SS_STATS) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(Vec::new()),
            Err(e) => return Err(err(e)),
        };
        if names.is_empty() {
            return Ok(Vec::new());
        }
        // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
        // As with the strings, room for more than we counted.
        let room = names.len() + 64;
        let mut buf = vec![0u8; 8 + 8 * room];
        buf[0..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
        buf[4..8].copy_from_slice(&(names.len() as u32).to_ne_bytes());
        ethtool_raw(fd, dev, &mut buf).map_err(err)?;
        let n = u32::from_ne_bytes(buf[4..8].try_into().unwrap_or_default()) as usize;
        Ok(names
            .into_iter()
            .take(n.min(room))
            .enumerate()
            .map(|(i, name)| {
                let at = 8 + 8 * i;
                (
                    name,
                    u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap_or_default()),
                )
            })
            .collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feature_sets_match_ethtools_words() {
        assert!(is_tx_checksum("tx-checksum-ip-generic"));
        assert!(is_tx_checksum("tx-checksum-ipv4"));
        assert!(!is_tx_checksum("tx-tcp-segmentation"));
        assert!(is_gro("rx-gro") && !is_gro("rx-gro-hw"));
    }

    #[test]
    fn the_loopback_has_features_and_no_statistics() {
        let active = active(None, "lo").unwrap();
        assert!(active.iter().any(|(n, _)| n == "rx-gro"), "{active:?}");
        assert_eq!(stats(None, "lo").unwrap(), Vec::new());
        assert!(stats(None, "nfnosuchdev0").unwrap_err().is_missing());
    }

    #[test]
    fn a_missing_device_is_missing() {
        let e = set(None, "nfnosuchdev0", is_gro, true).unwrap_err();
        assert!(e.is_missing(), "{e}");
        assert!(e.to_string().contains("dev nfnosuchdev0"), "{e}");
    }
}
