//! System calls the real-interface ports ([`afpacket`](super::afpacket),
//! [`afxdp`](super::afxdp)) share: interface names and indexes, `ifreq`
//! ioctls, ethtool offload settings (what a port changes and puts back;
//! the `SIOCETHTOOL` feature requests themselves are the OS layer's,
//! [`nicflow_os::ethtool`]), socket options, owned descriptors and memory
//! mappings.
//!
//! Place in a frame's path: before the first frame. A port calls these in
//! `open` to find the interface, learn its MTU, shape what the driver hands
//! it (offloads off: wire-sized frames with complete checksums where the
//! NIC allows) and set up the socket and the memory shared with the kernel
//! that frames then travel through; on the hot path only a socket option
//! read for drop statistics comes back here. Errors are plain
//! [`io::Error`]s, with the failing step's name where a function makes
//! several calls ([`StepError`]): each port maps them into its own typed
//! error at its boundary, where the interface name is known.

use nicflow_os::ethtool;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// A failed step of a multi-call operation: the call's name (with its
/// arguments, as shown to users) and the error.
pub(super) type StepError = (&'static str, io::Error);

// Kernel ABI: include/uapi/linux/ethtool.h.
const ETHTOOL_SRXCSUM: u32 = 0x15;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETH_FLAG_LRO: u32 = 1 << 15;

/// `struct ethtool_value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

// ---------------------------------------------------------------------------
// Interfaces
// ---------------------------------------------------------------------------

/// Why `name` cannot name an interface, if it cannot: the kernel's rules
/// (`dev_valid_name`), checked up front so that a bad name fails with a
/// reason instead of a bare `ENODEV`, and so that every `ifreq` built from
/// it holds the whole name and its NUL.
pub(super) fn validate_ifname(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name.len() >= libc::IFNAMSIZ {
        return Err("longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return Err("reserved");
    }
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
    {
        return Err("contains '/', ':', NUL or whitespace");
    }
    Ok(())
}

/// The interface's index (`if_nametoindex`); `ENODEV` when there is none.
/// A name with a NUL (which [`validate_ifname`] refuses) is `InvalidInput`.
pub(super) fn if_index(ifname: &str) -> io::Result<u32> {
    let c = CString::new(ifname).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(idx)
}

/// An `ifreq` naming `ifname` (which [`validate_ifname`] has checked fits
/// with its NUL).
fn ifreq(ifname: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data (a name array and a union of integers and
    // pointers); all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr
}

fn if_ioctl(fd: RawFd, req: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<libc::c_int> {
    // SAFETY: `ifr` is a valid, writable ifreq for the duration of the call;
    // the requests used here (SIOCGIFMTU, SIOCGIFHWADDR, SIOCGIFFLAGS,
    // SIOCETHTOOL) read and
    // write nothing beyond it, except SIOCETHTOOL's `ifru_data`, which the
    // callers point at a live argument struct sized for the command.
    cvt(unsafe { libc::ioctl(fd, req as _, ifr as *mut libc::ifreq) })
}

/// The interface's MTU (`SIOCGIFMTU`, through any socket `fd`), at least
/// 68 (the IPv4 minimum) so that segment sizes derived from it stay sane.
pub(super) fn interface_mtu(fd: RawFd, ifname: &str) -> io::Result<usize> {
    let mut ifr = ifreq(ifname);
    if_ioctl(fd, libc::SIOCGIFMTU, &mut ifr)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote `ifru_mtu`.
    Ok(unsafe { ifr.ifr_ifru.ifru_mtu }.max(68) as usize)
}

/// The interface's MAC address (`SIOCGIFHWADDR`, through any socket `fd`).
pub(super) fn interface_mac(fd: RawFd, ifname: &str) -> io::Result<[u8; 6]> {
    validate_ifname(ifname).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut ifr = ifreq(ifname);
    if_ioctl(fd, libc::SIOCGIFHWADDR, &mut ifr)?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel wrote `ifru_hwaddr`.
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

/// Is the interface administratively up (`SIOCGIFFLAGS`, `IFF_UP`)?
pub(super) fn interface_is_up(fd: RawFd, ifname: &str) -> io::Result<bool> {
    let mut ifr = ifreq(ifname);
    if_ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr)?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote `ifru_flags`.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    Ok(flags & libc::IFF_UP as libc::c_short != 0)
}

// ---------------------------------------------------------------------------
// Offloads
// ---------------------------------------------------------------------------

/// Turn off receive aggregation (GRO, hardware GRO, LRO), segmentation
/// offloads (TSO of every flavour, USO, GSO) and checksum offloads on
/// `ifname` (validated), like `ethtool -K <if> gro off lro off tso off gso
/// off tx off rx off`, so that frames received there are wire-sized with
/// complete checksums. Needs `CAP_NET_ADMIN` in the interface's network
/// namespace.
///
/// Uses `ETHTOOL_SFEATURES` on the features named by the kernel
/// (`ETH_SS_FEATURES` strings), because the legacy per-feature commands
/// miss newer bits: on Linux 6.18 `ETHTOOL_STSO` leaves
/// `tx-tcp-accecn-segmentation` on. Falls back to the legacy `ETHTOOL_S*`
/// commands (`ethtool_value`) on kernels without it; there every setting is
/// attempted and the first failure returned. Features the device cannot
/// change ("fixed") are not an error.
///
/// On a veth this only shapes what the switch end itself aggregates and
/// sends from the host stack: frames from the peer keep the peer's
/// offloads, which is why the ports also fix frames up in software
/// ([`super::fixup`]).
///
/// Returns what the features were, to be put back when the port goes
/// (`None` on the legacy path, which cannot read them all back).
pub(super) fn disable_offloads(ifname: &str) -> Result<Option<SavedFeatures>, StepError> {
    let sock = control_socket().map_err(|e| ("socket(AF_INET, SOCK_DGRAM)", e))?;
    let fd = sock.as_raw_fd();
    match disable_offload_features(fd, ifname) {
        Ok(saved) => Ok(Some(saved)),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
            ) =>
        {
            disable_offloads_legacy(fd, ifname).map(|()| None)
        }
        Err(e) => Err(("ioctl(SIOCETHTOOL, ETHTOOL_SFEATURES)", e)),
    }
}

/// The offload features a port changed on an interface, as the user had
/// them (the kernel's `wanted` bits), put back when this is dropped: the
/// standard is that nicflow leaves every interface as it found it. Without
/// it an `afxdp` port left TSO, GSO and checksum offload off after the
/// daemon exited, and the Linux bridge then forwarded 6.9 instead of 19
/// Gbit/s over the same veths.
///
/// Restoring is best effort (the interface may be gone: `ENODEV` is
/// expected when a lab is torn down first) and logged otherwise.
///
/// A process that dies without dropping this (`kill -9`) cannot restore
/// anything: the originals are also written to the daemon's state
/// directory before the features change ([`super::state`]), and the next
/// daemon puts them back from there.
#[derive(Debug)]
pub struct SavedFeatures {
    ifname: String,
    /// Feature name -> the wanted state it had before the port changed it.
    originals: BTreeMap<String, bool>,
    /// The originals are on disk (removed once restored).
    recorded: bool,
}

impl SavedFeatures {
    fn restore_now(&mut self) -> io::Result<()> {
        let originals = std::mem::take(&mut self.originals);
        if originals.is_empty() {
            return Ok(());
        }
        write_wanted(&self.ifname, &originals)
    }
}

/// Set the wanted state of each named feature of `ifname` (what
/// [`SavedFeatures`] and [`super::state::restore_orphans`] put back).
pub(super) fn write_wanted(ifname: &str, features: &BTreeMap<String, bool>) -> io::Result<()> {
    validate_ifname(ifname).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let sock = control_socket()?;
    ethtool::write_wanted_by_name(sock.as_raw_fd(), ifname, features)
}

impl Drop for SavedFeatures {
    fn drop(&mut self) {
        let done = match self.restore_now() {
            Ok(()) => true,
            // The interface is gone: nothing left to put back.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => true,
            Err(e) => {
                tracing::warn!(iface = %self.ifname, "could not restore offload features: {e}");
                false
            }
        };
        // A failed restore keeps the record: the next daemon start retries.
        if done && self.recorded {
            super::state::forget(&self.ifname);
        }
    }
}

/// Is the kernel feature called `name` one [`disable_offloads`] turns off?
fn is_offload_feature(name: &str) -> bool {
    (name.starts_with("rx-") && name.contains("gro"))
        || name == "rx-lro"
        || name == "rx-checksum"
        || name.starts_with("tx-checksum-")
        || name == "tx-generic-segmentation"
        || (name.starts_with("tx-tcp") && name.ends_with("segmentation"))
        || name == "tx-udp-segmentation"
}

fn disable_offload_features(fd: RawFd, ifname: &str) -> io::Result<SavedFeatures> {
    set_features(fd, ifname, is_offload_feature, false)
}

/// Is the kernel feature called `name` one [`enable_tx_offloads`] turns on?
fn is_tx_offload_feature(name: &str) -> bool {
    matches!(
        name,
        "tx-scatter-gather"
            | "tx-checksum-ip-generic"
            | "tx-generic-segmentation"
            | "tx-tcp-segmentation"
            | "tx-tcp-ecn-segmentation"
            | "tx-tcp-mangleid-segmentation"
            | "tx-tcp6-segmentation"
    )
}

/// Turn on what `ifname` needs to pass GSO super-frames with partial
/// checksums through intact (scatter-gather, checksum offload, TSO, GSO),
/// like `ethtool -K <if> sg on tx on tso on gso on`: used by ports that
/// transmit with the virtio-net header, where the kernel takes over
/// segmentation and checksums. Features the device cannot change or does
/// not have are not an error. `ETHTOOL_SFEATURES` only (no legacy path).
///
/// Returns what the features were, to be put back when the port goes.
pub(super) fn enable_tx_offloads(ifname: &str) -> Result<SavedFeatures, StepError> {
    let sock = control_socket().map_err(|e| ("socket(AF_INET, SOCK_DGRAM)", e))?;
    set_features(sock.as_raw_fd(), ifname, is_tx_offload_feature, true)
        .map_err(|e| ("ioctl(SIOCETHTOOL, ETHTOOL_SFEATURES)", e))
}

/// Set every feature whose name `pick` selects to `on` (the OS layer's
/// [`os::ethtool`](nicflow_os::ethtool)); returns those features' original
/// `wanted` state. The originals are written to the daemon's state
/// directory first ([`super::state`]), merged with a record a daemon that
/// died left for this interface (whose originals, not the state it left,
/// are the interface's own); if they cannot be written, nothing is changed.
fn set_features(
    fd: RawFd,
    ifname: &str,
    pick: fn(&str) -> bool,
    on: bool,
) -> io::Result<SavedFeatures> {
    let mut originals = ethtool::wanted_by_name(fd, ifname, &pick)?;
    let recorded_before = super::state::originals(ifname);
    for (name, was) in &recorded_before {
        originals.insert(name.clone(), *was);
    }
    let recorded = super::state::record(ifname, &originals).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("recording the original features before changing them: {e}"),
        )
    })?;
    let saved = SavedFeatures {
        ifname: ifname.to_string(),
        originals,
        recorded,
    };
    ethtool::set_features_fd(fd, ifname, &pick, on)?;
    Ok(saved)
}

fn disable_offloads_legacy(fd: RawFd, ifname: &str) -> Result<(), StepError> {
    let mut first_err = None;
    let mut note = |op: &'static str, r: io::Result<()>| {
        if let Err(e) = r {
            first_err.get_or_insert((op, e));
        }
    };
    // Turning rx checksumming off also drops hardware GRO.
    for (cmd, op) in [
        (ETHTOOL_SGRO, "ioctl(SIOCETHTOOL, ETHTOOL_SGRO=0)"),
        (ETHTOOL_STSO, "ioctl(SIOCETHTOOL, ETHTOOL_STSO=0)"),
        (ETHTOOL_SGSO, "ioctl(SIOCETHTOOL, ETHTOOL_SGSO=0)"),
        (ETHTOOL_STXCSUM, "ioctl(SIOCETHTOOL, ETHTOOL_STXCSUM=0)"),
        (ETHTOOL_SRXCSUM, "ioctl(SIOCETHTOOL, ETHTOOL_SRXCSUM=0)"),
    ] {
        note(op, ethtool_value(fd, ifname, cmd, 0).map(drop));
    }
    // LRO lives in the legacy flags word; only write it when it is on.
    match ethtool_value(fd, ifname, ETHTOOL_GFLAGS, 0) {
        Ok(flags) if flags & ETH_FLAG_LRO != 0 => note(
            "ioctl(SIOCETHTOOL, ETHTOOL_SFLAGS ~LRO)",
            ethtool_value(fd, ifname, ETHTOOL_SFLAGS, flags & !ETH_FLAG_LRO).map(drop),
        ),
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
        Err(e) => note("ioctl(SIOCETHTOOL, ETHTOOL_GFLAGS)", Err(e)),
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One legacy ethtool command carrying an `ethtool_value`; returns the value
/// the kernel left in it.
fn ethtool_value(fd: RawFd, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut v = EthtoolValue { cmd, data };
    let mut ifr = ifreq(ifname);
    ifr.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
    if_ioctl(fd, libc::SIOCETHTOOL, &mut ifr)?;
    Ok(v.data)
}

// ---------------------------------------------------------------------------
// Sockets, descriptors, memory
// ---------------------------------------------------------------------------

/// The page size, 4096 if the system will not say: ring and UMEM geometry
/// must be multiples of it.
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 && (p as usize).is_power_of_two() {
        p as usize
    } else {
        4096
    }
}

/// A system call's return value as a result: negative means failed, with
/// the reason in `errno`.
pub(super) fn cvt<T: PartialOrd + From<i8>>(r: T) -> io::Result<T> {
    if r < T::from(0) {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Own the descriptor a `socket(2)`-like call returned (or its error), so
/// that every early return closes it.
pub(super) fn owned_fd(r: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(r)?;
    // SAFETY: `fd` is a descriptor the kernel just returned to us; nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A socket for interface ioctls (`SIOCGIFMTU`, `SIOCETHTOOL`) when the
/// port's own socket is not at hand or not suitable.
pub(super) fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call, no pointers.
    owned_fd(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

/// `setsockopt` with a plain-data value.
pub(super) fn setsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to an initialized `T` of exactly the length
    // passed; the kernel only reads it during the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt` into a plain-data value; returns the length the kernel
/// wrote.
pub(super) fn getsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &mut T,
) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` is a live, writable `T` and `len` says how many bytes of
    // it the kernel may write; `T` is plain data, valid for any bytes.
    cvt(unsafe { libc::getsockopt(fd, level, name, (val as *mut T).cast(), &mut len) })?;
    Ok(len as usize)
}

/// An `mmap`ed region, unmapped on drop: a ring or packet memory shared
/// with the kernel.
pub(super) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value (no other handle to
// it exists in the process), so moving it to another thread is sound.
unsafe impl Send for Mapping {}

impl Mapping {
    pub fn new(
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: RawFd,
        off: i64,
    ) -> io::Result<Self> {
        // SAFETY: a new mapping at an address of the kernel's choosing; it
        // overlaps no existing Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                fd,
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { base, len })
    }

    /// The first byte (page aligned). Valid for `len()` bytes while `self`
    /// lives; what may be read or written there is up to the protocol the
    /// memory is shared under.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe a mapping created in `new`, and no
        // reference into it outlives `self` (its users hold `&self`).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names() {
        for bad in ["", "a/b", "a b", "0123456789abcdef", "..", "a:1", "a\0b"] {
            assert!(validate_ifname(bad).is_err(), "{bad:?}");
        }
        validate_ifname("nfap123456ab").unwrap();
        validate_ifname("012345678901234").unwrap();
        assert_eq!(
            if_index("nfsysnosuch0").unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
        assert_eq!(
            if_index("a\0b").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(if_index("lo").unwrap() > 0);
    }

    #[test]
    fn offload_feature_names() {
        for on in [
            "rx-gro",
            "rx-gro-hw",
            "rx-gro-list",
            "rx-udp-gro-forwarding",
            "rx-lro",
            "rx-checksum",
            "tx-checksum-ip-generic",
            "tx-checksum-sctp",
            "tx-generic-segmentation",
            "tx-tcp-segmentation",
            "tx-tcp6-segmentation",
            "tx-tcp-accecn-segmentation",
            "tx-tcp-mangleid-segmentation",
            "tx-udp-segmentation",
        ] {
            assert!(is_offload_feature(on), "{on}");
        }
        for off in [
            "tx-scatter-gather",
            "rx-vlan-hw-parse",
            "tx-vlan-hw-insert",
            "highdma",
            "rx-fcs",
            "tx-gre-segmentation",
        ] {
            assert!(!is_offload_feature(off), "{off}");
        }
    }

    #[test]
    fn abi_sizes_match_the_kernel() {
        // `struct ethtool_value { __u32 cmd; __u32 data; }` (libc has none).
        assert_eq!(size_of::<EthtoolValue>(), 8);
    }

    #[test]
    fn interface_queries_on_loopback() {
        let sock = control_socket().unwrap();
        let fd = sock.as_raw_fd();
        assert!(interface_mtu(fd, "lo").unwrap() >= 68);
        assert!(interface_is_up(fd, "lo").is_ok());
        assert_eq!(
            interface_mtu(fd, "nfsysnosuch0")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENODEV)
        );
        assert!(page_size().is_power_of_two());
    }
}

/// Does this kernel take `VIRTIO_NET_HDR_GSO_UDP_L4` in a packet socket's
/// virtio-net header? Linux 6.2 and later (`virtio_net_hdr_to_skb`); an
/// older one refuses the frame with EINVAL, so UDP super-frames must not
/// be built for it. Read once from `uname`.
pub fn kernel_takes_udp_gso() -> bool {
    static TAKES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TAKES.get_or_init(|| {
        // SAFETY: utsname is plain bytes; all zeros is a valid value.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: uname fills the struct we own, for its size.
        if unsafe { libc::uname(&mut u) } != 0 {
            return false;
        }
        let rel: Vec<u8> = u
            .release
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        release_at_least(&String::from_utf8_lossy(&rel), 6, 2)
    })
}

/// `release` (`uname -r`, e.g. `6.1.0-18-amd64`) is at least `major.minor`.
pub fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

#[cfg(test)]
mod release_tests {
    use super::*;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(!release_at_least("6.1.0-18-amd64", 6, 2));
        assert!(release_at_least("6.2.0", 6, 2));
        assert!(release_at_least("6.18.44-fc-v1098", 6, 2));
        assert!(release_at_least("7.0", 6, 2));
        assert!(!release_at_least("5.19.17", 6, 2));
        assert!(!release_at_least("garbage", 6, 2));
    }
}
