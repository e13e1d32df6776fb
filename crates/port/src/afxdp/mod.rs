//! AF_XDP ports: a real Linux interface as a switch port, received and
//! transmitted through an AF_XDP socket whose packet memory (UMEM) and
//! rings are shared with the kernel, fed by an XDP program.
//!
//! Place in a frame's path: wire (or veth peer) -> driver -> **XDP program
//! `xsk_redirect`** (`bpf/xsk_redirect.c`; in the driver in native mode, in
//! `netif_receive_skb` in generic mode) -> `bpf_redirect_map` into the
//! XSKMAP entry of the frame's rx queue -> the kernel copies the frame into
//! a UMEM frame taken from our **fill ring** and posts it on our **rx
//! ring** (zero-copy drivers DMA straight into the UMEM instead) ->
//! [`Port::recv_batch`] copies it into a pooled [`PacketBuf`] and gives the
//! UMEM frame back on the fill ring -> parse -> flow key -> classifier /
//! caches -> actions -> the output port's [`Port::send_batch`] -> copies
//! the frame into a free UMEM frame, posts it on the **tx ring**, kicks the
//! kernel (`sendto`) -> driver -> wire; the frame comes back on the
//! **completion ring** once sent.
//!
//! Why it exists: it is the *preferred* real-interface port. Frames skip the
//! kernel's sk_buff-based receive path (native mode) and move in batches
//! through memory-mapped rings with no per-batch system call on receive,
//! which is also where a future in-kernel fast path hooks in: the XDP
//! program is kept in its own file so it can grow into a flow-lookup engine
//! that handles known flows in the kernel and redirects only misses here.
//! [`AfPacketPort`](super::afpacket::AfPacketPort) remains the fallback for
//! interfaces or kernels where XDP is not available.
//!
//! # Modes
//!
//! * **Attach** ([`XdpMode`], option `mode=native|generic|auto`): native
//!   (driver) XDP is tried first in `auto` and, if the driver refuses, the
//!   port falls back to generic (SKB) XDP with a warning. veth supports
//!   native XDP. Attaching natively to a veth changes its *peer*: the kernel
//!   (`veth_xdp_set`) clears the peer's software segmentation offloads (TSO,
//!   GSO) for as long as the program is attached, so a local sender there
//!   hands over MTU-sized frames; detaching restores them.
//! * **Bind** ([`BindMode`], option `bind=auto|zerocopy|copy`): zero-copy is
//!   tried first, then copy mode; `XDP_USE_NEED_WAKEUP` always, and
//!   `XDP_USE_SG` (multi-buffer frames, Linux 6.6+) unless
//!   `multi_buffer=false` or the kernel refuses it. veth has no zero-copy
//!   support: it always ends up in copy mode.
//! * **Queues**: the socket serves one rx/tx queue (`queue`, default 0) and
//!   the program redirects only frames of queues that have a socket in its
//!   map; frames on other queues go to the host stack (`XDP_PASS`). A veth
//!   has one queue by default. Multi-queue NICs (one socket per queue,
//!   shared UMEM) are **not handled** yet: use a single queue or steer the
//!   port's traffic to its queue.
//!
//! About the veth *peer*: redirecting frames *into* a veth with
//! `XDP_REDIRECT` (`ndo_xdp_xmit`) only works when the peer has an XDP
//! program or GRO enabled, because only then does it run the NAPI poller
//! that drains the redirect queue. This port never does that: its transmit
//! path is AF_XDP copy mode, which builds an sk_buff and hands it to the
//! veth's ordinary transmit routine, and its receive path is XDP on its own
//! end. So nothing has to be attached on the peer, which typically lives in
//! a namespace the switch does not own.
//!
//! # What arrives: checksums, super-frames, VLAN tags
//!
//! XDP gives no checksum status with a frame. Measured on Linux 6.18 with
//! the namespace end of a veth at its default offloads (checksum offload and
//! TSO on) and iperf3 through the switch:
//!
//! * **Checksums, both modes**: every TCP segment the namespace sends (data
//!   and pure ACKs) and every UDP datagram arrives with a *partial*
//!   checksum (the folded pseudo-header sum a `CHECKSUM_PARTIAL` sender
//!   leaves for "hardware"); ICMP, ICMPv6 and ND carry full ones. Forwarded
//!   unchanged to another veth such frames are dropped by the receiving
//!   stack, so `recv_batch` completes them: a TCP/UDP checksum equal to the
//!   folded pseudo-header sum is recomputed (see
//!   `port::fixup::complete_partial_checksum` for why that guess is safe).
//!   The alternative, checksum offload off on the peer, is not ours to set
//!   and not needed.
//! * **Native mode**: no super-frames. Attaching XDP natively to a veth
//!   makes the kernel clear the *peer's* software segmentation offloads
//!   (`veth_xdp_set`: `tcp-segmentation-offload: off` in the namespace while
//!   the program is attached, back `on` after detach), so a local sender
//!   segments in its own stack and every frame is at most MTU-sized.
//! * **Generic mode**: the peer keeps TSO, and each TCP burst reaches generic
//!   XDP as one sk_buff of up to 64 KiB (measured: ~2,600 frames of up to
//!   65,226 bytes in 3 s of iperf3). The program is loaded with multi-buffer
//!   support (`xdp.frags`) and the socket bound with `XDP_USE_SG`, so such a
//!   frame arrives as a chain of descriptors (`XDP_PKT_CONTD`), which
//!   `recv_batch` reassembles and, being longer than the MTU, splits into
//!   MTU-sized TCP segments with fixed headers and checksums (the AF_PACKET
//!   port's code, shared in `port::fixup`). Without `XDP_USE_SG` (kernels
//!   before 6.6, `multi_buffer=false`) the kernel drops every frame longer
//!   than one UMEM frame (counted in `rx_dropped`), so TCP from a TSO sender
//!   stalls in generic mode. Oversize frames other than TCP are dropped and
//!   counted.
//! * **Jumbo frames** (MTU above `frame_size - 256`) arrive and leave as
//!   multi-buffer frames; MTU 9000 is tested.
//! * **VLAN tags kept as metadata are lost (known limitation).** A tag the
//!   sender's stack keeps out of the frame (`skb->vlan_tci`: a VLAN device
//!   over a veth with `tx-vlan-hw-insert` on, the default, or a NIC with
//!   `rxvlan` stripping) is invisible to XDP in both modes: such a frame
//!   reaches the switch *untagged* (measured with a tc program pushing the
//!   tag on the peer). Tags that are part of the frame (raw sockets, NICs
//!   with `rxvlan off`) pass unchanged. The AF_PACKET port restores
//!   metadata tags; use it for VLAN trunks whose far end tags in metadata,
//!   or turn `txvlan`/`rxvlan` off there. An in-port fix needs a
//!   device-bound XDP program calling `bpf_xdp_metadata_rx_vlan_tag`
//!   (native mode only, Linux 6.8+) and a loader that supports
//!   `BPF_F_XDP_DEV_BOUND_ONLY` (aya 0.14 does not).
//!
//! The offload settings of
//! [`disable_offloads`](super::afpacket::disable_offloads) (shared code, in
//! `port::sys`) are applied to the attached interface at `open` (unless
//! `disable_offloads=false`): on a NIC they keep GRO/LRO from building
//! super-frames before generic XDP.
//!
//! # Minimum kernel version
//!
//! AF_XDP with `need_wakeup`: 5.4; XDP links (detach when the process
//! dies): 5.9; multi-buffer AF_XDP: 6.6. Developed and tested on 6.18.

mod prog;
mod xsk;

pub use prog::AttachMode;

use super::fixup::{
    complete_partial_checksum, deliver_oversize, fill, max_frame_len, Csum, RxCount, RxSide,
    ETH_HLEN, VLAN_HLEN,
};
use super::sys;
use super::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::parse;
use prog::XdpProgram;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::str::FromStr;
use xsk::{
    Umem, XdpDesc, Xsk, XDP_COPY, XDP_PACKET_HEADROOM, XDP_PKT_CONTD, XDP_USE_NEED_WAKEUP,
    XDP_USE_SG, XDP_ZEROCOPY,
};

/// Entries of the program's XSKMAP (`max_entries` in `xsk_redirect.c`).
const MAX_QUEUES: u32 = 64;
/// A multi-buffer frame longer than this is dropped (nothing legitimate
/// exceeds a 64 KiB GSO frame plus headers by much).
const MAX_ASSEMBLED: usize = 256 * 1024;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// The symbolic name of an errno, for messages like
/// "XDP_UMEM_REG on veth0: EINVAL".
fn errno_name(code: i32) -> Option<&'static str> {
    Some(match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOTSUP => "EOPNOTSUPP",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENETDOWN => "ENETDOWN",
        libc::ENOTCONN => "ENOTCONN",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        _ => return None,
    })
}

/// An `io::Error` shown as "EINVAL (Invalid argument)".
struct Errno<'a>(&'a io::Error);

impl fmt::Display for Errno<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.raw_os_error() {
            Some(code) => {
                let text = io::Error::from_raw_os_error(code).to_string();
                let text = text.split(" (os error").next().unwrap_or(&text).to_string();
                match errno_name(code) {
                    Some(n) => write!(f, "{n} ({text})"),
                    None => write!(f, "errno {code} ({text})"),
                }
            }
            None => write!(f, "{}", self.0),
        }
    }
}

/// An error and its sources on one line ("`bpf_link_create` failed: EBUSY
/// (Device or resource busy)"); aya's errors keep the errno in a source.
struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut cur = self.0.source();
        while let Some(e) = cur {
            let text = match e.downcast_ref::<io::Error>() {
                Some(io) if io.raw_os_error().is_some() => Errno(io).to_string(),
                _ => e.to_string(),
            };
            if !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown.push_str(&text);
            }
            cur = e.source();
        }
        Ok(())
    }
}

/// Why an AF_XDP port could not be opened. Each variant names the step.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    #[error("invalid interface name `{name}`: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("invalid AF_XDP options: {0}")]
    InvalidOptions(String),
    #[error("no interface `{ifname}`: {}", Errno(.source))]
    NoSuchInterface {
        ifname: String,
        #[source]
        source: io::Error,
    },
    /// The kernel has no AF_XDP (`CONFIG_XDP_SOCKETS` unset, or refused in
    /// this namespace/container).
    #[error("AF_XDP is not available on `{ifname}`: socket(AF_XDP) failed: {}", Errno(.source))]
    Unsupported {
        ifname: String,
        #[source]
        source: io::Error,
    },
    /// A system call failed; `op` names the call and its arguments.
    #[error("{op} on {ifname}: {}", Errno(.source))]
    Syscall {
        op: String,
        ifname: String,
        #[source]
        source: io::Error,
    },
    /// Loading the XDP program or updating its map failed.
    #[error("{op} on {ifname}: {}", Chain(.source.as_ref()))]
    Bpf {
        op: &'static str,
        ifname: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The XDP program could not be attached in `mode`.
    #[error("attaching XDP ({mode} mode) on {ifname}: {}", Chain(.source.as_ref()))]
    Attach {
        mode: AttachMode,
        ifname: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl AfXdpError {
    fn sys(op: impl Into<String>, ifname: &str, source: io::Error) -> Self {
        AfXdpError::Syscall {
            op: op.into(),
            ifname: ifname.to_string(),
            source,
        }
    }

    /// The OS error number behind the failure, if there is one (searched
    /// through the error chain for BPF and attach errors).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            AfXdpError::NoSuchInterface { source, .. }
            | AfXdpError::Unsupported { source, .. }
            | AfXdpError::Syscall { source, .. } => source.raw_os_error(),
            AfXdpError::Bpf { source, .. } | AfXdpError::Attach { source, .. } => {
                let mut e: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
                while let Some(cur) = e {
                    if let Some(io) = cur.downcast_ref::<io::Error>() {
                        return io.raw_os_error();
                    }
                    e = cur.source();
                }
                None
            }
            _ => None,
        }
    }

    /// True when the kernel (or the environment) refuses AF_XDP or XDP as
    /// such, as opposed to a bad interface or setting: what a test skips on.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, AfXdpError::Unsupported { .. })
            || matches!(self, AfXdpError::Bpf { .. }) && self.raw_os_error() == Some(libc::EPERM)
    }
}

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/// Where the XDP program runs (option `mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum XdpMode {
    /// Native (driver) XDP or fail.
    Native,
    /// Generic (SKB) XDP.
    Generic,
    /// Native, falling back to generic with a warning.
    #[default]
    Auto,
}

impl FromStr for XdpMode {
    type Err = AfXdpError;
    fn from_str(s: &str) -> Result<Self, AfXdpError> {
        match s {
            "native" | "drv" | "driver" => Ok(XdpMode::Native),
            "generic" | "skb" => Ok(XdpMode::Generic),
            "auto" => Ok(XdpMode::Auto),
            _ => Err(AfXdpError::InvalidOptions(format!(
                "mode={s}: expected native, generic or auto"
            ))),
        }
    }
}

/// How the socket binds (option `bind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BindMode {
    /// `XDP_ZEROCOPY` or fail.
    ZeroCopy,
    /// `XDP_COPY`.
    Copy,
    /// Zero-copy, falling back to copy.
    #[default]
    Auto,
}

impl FromStr for BindMode {
    type Err = AfXdpError;
    fn from_str(s: &str) -> Result<Self, AfXdpError> {
        match s {
            "zerocopy" | "zero-copy" | "zc" => Ok(BindMode::ZeroCopy),
            "copy" => Ok(BindMode::Copy),
            "auto" => Ok(BindMode::Auto),
            _ => Err(AfXdpError::InvalidOptions(format!(
                "bind={s}: expected zerocopy, copy or auto"
            ))),
        }
    }
}

/// How an [`AfXdpPort`] is set up. `Default` suits a switch port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfXdpOptions {
    /// Where the XDP program runs.
    pub mode: XdpMode,
    /// Zero-copy or copy.
    pub bind: BindMode,
    /// The rx/tx queue the socket serves.
    pub queue: u32,
    /// Bytes per UMEM frame: a power of two from 2048 to the page size. A
    /// received frame gets `frame_size - 256` bytes (the kernel's
    /// `XDP_PACKET_HEADROOM`); longer ones need multi-buffer.
    pub frame_size: u32,
    /// UMEM frames (memory = `frame_size * frame_count`): half (at most
    /// `ring_size`) for receiving, the rest for transmitting.
    pub frame_count: u32,
    /// Entries of each of the four rings: a power of two.
    pub ring_size: u32,
    /// Ask for multi-buffer frames (`XDP_USE_SG`); without it frames longer
    /// than one UMEM frame are dropped by the kernel.
    pub multi_buffer: bool,
    /// Turn offloads off on the interface in `open`, as
    /// [`disable_offloads`](super::afpacket::disable_offloads) does (failure
    /// is logged, not fatal).
    pub disable_offloads: bool,
    /// The peer sends complete TCP/UDP checksums (a NIC, or a veth peer
    /// with `tx-checksumming off`): the bridge's XDP offload engine may
    /// then handle TCP/UDP flows from this port in the kernel. Off by
    /// default: a local sender behind a veth leaves partial checksums that
    /// only userspace completes (see `docs/offload.md`).
    pub csum_complete: bool,
}

impl Default for AfXdpOptions {
    fn default() -> Self {
        AfXdpOptions {
            mode: XdpMode::Auto,
            bind: BindMode::Auto,
            queue: 0,
            frame_size: 2048,
            frame_count: 4096,
            ring_size: 2048,
            multi_buffer: true,
            disable_offloads: true,
            csum_complete: false,
        }
    }
}

impl AfXdpOptions {
    /// Set one option from its `key=value` text form, as the daemon's port
    /// config holds them: `mode` (native|generic|auto), `bind`
    /// (zerocopy|copy|auto), `queue`, `frame_size`, `frame_count`,
    /// `ring_size`, `multi_buffer`, `disable_offloads` (true|false).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), AfXdpError> {
        let num = || {
            value
                .parse::<u32>()
                .map_err(|_| AfXdpError::InvalidOptions(format!("{key}={value}: not a number")))
        };
        let flag = || match value {
            "true" | "yes" | "1" => Ok(true),
            "false" | "no" | "0" => Ok(false),
            _ => Err(AfXdpError::InvalidOptions(format!(
                "{key}={value}: expected true or false"
            ))),
        };
        match key {
            "mode" => self.mode = value.parse()?,
            "bind" => self.bind = value.parse()?,
            "queue" | "queue_id" => self.queue = num()?,
            "frame_size" => self.frame_size = num()?,
            "frame_count" => self.frame_count = num()?,
            "ring_size" => self.ring_size = num()?,
            "multi_buffer" => self.multi_buffer = flag()?,
            "disable_offloads" => self.disable_offloads = flag()?,
            "csum_complete" => self.csum_complete = flag()?,
            _ => {
                return Err(AfXdpError::InvalidOptions(format!(
                    "unknown option `{key}` (mode, bind, queue, frame_size, frame_count, \
                     ring_size, multi_buffer, disable_offloads, csum_complete)"
                )))
            }
        }
        Ok(())
    }

    /// Defaults overridden by `key=value` pairs (see [`AfXdpOptions::set`]),
    /// then validated.
    pub fn from_pairs<'a, I>(pairs: I) -> Result<Self, AfXdpError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut o = AfXdpOptions::default();
        for (k, v) in pairs {
            o.set(k, v)?;
        }
        o.validate()?;
        Ok(o)
    }

    /// Check the geometry the way the kernel will, so that a bad setting
    /// fails with a message instead of a bare `EINVAL`.
    pub fn validate(&self) -> Result<(), AfXdpError> {
        let bad = |m: String| Err(AfXdpError::InvalidOptions(m));
        let page = sys::page_size() as u32;
        if !self.frame_size.is_power_of_two() || self.frame_size < 2048 || self.frame_size > page {
            return bad(format!(
                "frame_size {} must be a power of two from 2048 to the page size {page}",
                self.frame_size
            ));
        }
        if !self.ring_size.is_power_of_two() || !(64..=1 << 16).contains(&self.ring_size) {
            return bad(format!(
                "ring_size {} must be a power of two from 64 to 65536",
                self.ring_size
            ));
        }
        if self.frame_count < 128 {
            return bad(format!("frame_count {} is below 128", self.frame_count));
        }
        let bytes = u64::from(self.frame_size) * u64::from(self.frame_count);
        if bytes > 1 << 30 {
            return bad(format!("UMEM of {bytes} bytes exceeds 1 GiB"));
        }
        if self.queue >= MAX_QUEUES {
            return bad(format!("queue {} must be below {MAX_QUEUES}", self.queue));
        }
        Ok(())
    }

    /// Frames handed to the kernel for receiving (the rest transmit).
    fn rx_frames(&self) -> u32 {
        (self.frame_count / 2).min(self.ring_size)
    }

    /// `sxdp_flags` to try, in order.
    fn bind_attempts(&self) -> Vec<u16> {
        let mut v = Vec::new();
        let modes: &[u16] = match self.bind {
            BindMode::ZeroCopy => &[XDP_ZEROCOPY],
            BindMode::Copy => &[XDP_COPY],
            BindMode::Auto => &[XDP_ZEROCOPY, XDP_COPY],
        };
        for &m in modes {
            if self.multi_buffer {
                v.push(m | XDP_USE_SG | XDP_USE_NEED_WAKEUP);
            }
            v.push(m | XDP_USE_NEED_WAKEUP);
        }
        v
    }
}

/// How long and how often [`AfXdpPort::open`] waits for a queue that a
/// closed socket still holds (bind says EBUSY): 200 x 10 ms at most. The
/// kernel frees the queue from deferred work after the socket's close; 200
/// ms was not enough on this 2-core host under a load of 5-8 (the suite
/// beside builds: `auto_mode_falls_back_to_generic`'s second open, right
/// after a refused native one, failed with EBUSY once, 2026-12-05). A queue
/// another live socket holds fails after the 2 s — during which the
/// daemon's one thread, opening the port, forwards nothing: the price of
/// not failing an `add-port` right after a `del-port` of the same queue.
const BIND_BUSY_WAIT: std::time::Duration = std::time::Duration::from_millis(10);
const BIND_BUSY_WAITS: u32 = 200;

/// `sxdp_flags` as text, for logs and errors.
fn bind_flags_text(flags: u16) -> String {
    let mut parts = Vec::new();
    for (bit, name) in [
        (XDP_ZEROCOPY, "XDP_ZEROCOPY"),
        (XDP_COPY, "XDP_COPY"),
        (XDP_USE_SG, "XDP_USE_SG"),
        (XDP_USE_NEED_WAKEUP, "XDP_USE_NEED_WAKEUP"),
    ] {
        if flags & bit != 0 {
            parts.push(name);
        }
    }
    parts.join("|")
}

// ---------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------

/// What the port and the kernel did with frames, beyond [`PortStats`]:
/// every drop by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AfXdpCounters {
    // --- from the kernel (XDP_STATISTICS) ---
    /// Dropped by the kernel on receive for other reasons (no fill-ring
    /// frame, frame longer than a UMEM frame without multi-buffer...).
    pub kernel_rx_dropped: u64,
    /// Dropped because our rx ring was full (we did not read fast enough).
    pub kernel_rx_ring_full: u64,
    /// Times the kernel found the fill ring empty (a cause of
    /// `kernel_rx_dropped`).
    pub kernel_fill_ring_empty: u64,
    /// Invalid descriptors on the receive side.
    pub kernel_rx_invalid_descs: u64,
    /// Invalid tx descriptors the kernel skipped (not sent).
    pub kernel_tx_invalid_descs: u64,
    /// Times the kernel found the tx ring empty when asked to send.
    pub kernel_tx_ring_empty: u64,
    // --- ours ---
    /// Rx descriptors pointing outside the UMEM or across frames: dropped.
    pub rx_invalid_descs: u64,
    /// Frames that came as several descriptors (multi-buffer), reassembled.
    pub multi_buffer_frames: u64,
    /// Partial TCP/UDP checksums (pseudo-header sum only) completed.
    /// Segments cut from super-frames get fresh checksums and are not
    /// counted here.
    pub csum_completed: u64,
    /// Frames longer than the MTU (GSO super-frames) split into segments.
    pub gso_frames: u64,
    /// Segments produced from them.
    pub gso_segments: u64,
    /// Dropped: longer than the MTU and not TCP, so not segmentable (or
    /// longer than `MAX_ASSEMBLED`).
    pub oversize_dropped: u64,
    /// Longest frame received (before segmentation).
    pub max_frame_len: u64,
    /// Transmit: no room in the tx ring.
    pub tx_ring_full: u64,
    /// Transmit: no free UMEM frame (completions not back yet).
    pub tx_no_frame: u64,
    /// Transmit: longer than the MTU allows, or needing several UMEM frames
    /// without multi-buffer.
    pub tx_oversize: u64,
    /// `sendto` calls made to kick transmission.
    pub tx_wakeups: u64,
    /// `recvfrom` calls made because the fill ring asked for a wakeup.
    pub rx_wakeups: u64,
}

// ---------------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------------

/// A switch port on a Linux interface through AF_XDP. See the module docs.
pub struct AfXdpPort {
    name: String,
    ifindex: u32,
    queue: u32,
    attach: AttachMode,
    zerocopy: bool,
    csum_complete: bool,
    bind_flags: u16,
    // Field order is drop order: the XDP program is detached first (no
    // more frames redirected), then the rings are unmapped and the socket
    // closed, then the UMEM unmapped.
    prog: XdpProgram,
    xsk: Xsk,
    umem: Umem,
    /// Transmit frames we own (UMEM offsets of frame starts).
    free_tx: Vec<u64>,
    /// Rx frames read but not yet back on the fill ring.
    to_fill: Vec<u64>,
    /// The tx ring still holds frames the kernel has not taken: kick again
    /// on the next call.
    tx_kick_pending: bool,
    last_tx_errno: i32,
    rx: RxState,
    /// The interface's offload settings before `open`, restored after the
    /// program is detached (XDP on a veth also changes the peer's TSO; the
    /// kernel gives that back itself on detach).
    _saved_features: Option<sys::SavedFeatures>,
}

/// Receive-side state, separate from the rings and the UMEM so that a frame
/// borrowed from the UMEM can be processed while these are updated.
struct RxState {
    name: String,
    mtu: usize,
    stats: PortStats,
    counters: AfXdpCounters,
    /// Frames produced but not yet returned (segments beyond `max`).
    pending: VecDeque<PacketBuf>,
    segs: Vec<PacketBuf>,
    /// A multi-buffer frame being reassembled.
    big: Vec<u8>,
    /// `big` holds the first descriptors of a frame whose last has not
    /// been read yet.
    assembling: bool,
    /// The frame being reassembled is already lost (bad descriptor, too
    /// long): drop it when its last descriptor comes.
    broken: bool,
    warned_oversize: bool,
}

impl AfXdpPort {
    /// Open `ifname` as a switch port: load the XDP program, create the
    /// AF_XDP socket (UMEM, rings), bind it to `opts.queue` (zero-copy, then
    /// copy), register it in the program's XSKMAP and attach the program
    /// (native, then generic). The port is named after the interface.
    ///
    /// # Errors
    /// Each failing step is named in the error (e.g. "XDP_UMEM_REG on veth0:
    /// EINVAL (Invalid argument)"); [`AfXdpError::is_unsupported`] tells a
    /// kernel without AF_XDP/XDP from a configuration problem.
    pub fn open(ifname: &str, opts: AfXdpOptions) -> Result<Self, AfXdpError> {
        validate_ifname(ifname)?;
        opts.validate()?;
        let ifindex = if_index(ifname)?;
        let mut saved_features = None;
        if opts.disable_offloads {
            match sys::disable_offloads(ifname) {
                Ok(saved) => saved_features = saved,
                Err((op, e)) => {
                    let e = AfXdpError::sys(op, ifname, e);
                    tracing::warn!(port = %ifname, "could not disable offloads: {e}");
                }
            }
        }
        let mtu = interface_mtu(ifname)?;
        let umem = Umem::new(opts.frame_count, opts.frame_size).map_err(|e| {
            AfXdpError::sys(
                format!(
                    "mmap(UMEM, {} bytes)",
                    u64::from(opts.frame_count) * u64::from(opts.frame_size)
                ),
                ifname,
                e,
            )
        })?;
        let mut prog = XdpProgram::load(ifname)?;

        // Socket and bind: zero-copy first, then copy; with multi-buffer
        // first, then without. A refused bind leaves a socket that may not be
        // reusable, so each attempt starts from a fresh one.
        let attempts = opts.bind_attempts();
        let mut bound = None;
        // A socket on this queue that was just closed (a failed open, a
        // port just deleted) releases the queue asynchronously: until then
        // bind says EBUSY. Wait for it, briefly, before calling it taken.
        let mut busy_waits = 0u32;
        let mut i = 0;
        while let Some(&flags) = attempts.get(i) {
            let xsk = Xsk::create(&umem, opts.ring_size).map_err(|(op, e)| {
                if op.starts_with("socket")
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::EAFNOSUPPORT) | Some(libc::EPROTONOSUPPORT)
                    )
                {
                    AfXdpError::Unsupported {
                        ifname: ifname.to_string(),
                        source: e,
                    }
                } else {
                    AfXdpError::sys(op, ifname, e)
                }
            })?;
            let mut xsk = xsk;
            // Hand the kernel its receive frames before the first frame can
            // arrive.
            let rx_frames = opts.rx_frames();
            let n = xsk.fill.reserve(rx_frames);
            for f in 0..n {
                xsk.fill.write(f, u64::from(f) * u64::from(opts.frame_size));
            }
            xsk.fill.submit(n);
            match xsk.bind(ifindex, opts.queue, flags) {
                Ok(()) => {
                    bound = Some((xsk, flags));
                    break;
                }
                Err(e) => {
                    let fallback = matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::EPROTONOSUPPORT)
                    );
                    let op = format!(
                        "bind(AF_XDP, queue {}, {})",
                        opts.queue,
                        bind_flags_text(flags)
                    );
                    if e.raw_os_error() == Some(libc::EBUSY) && busy_waits < BIND_BUSY_WAITS {
                        busy_waits += 1;
                        drop(xsk);
                        std::thread::sleep(BIND_BUSY_WAIT);
                        continue;
                    }
                    if fallback && i + 1 < attempts.len() {
                        tracing::debug!(port = %ifname, "{op} refused ({}); trying the next mode", Errno(&e));
                        i += 1;
                        continue;
                    }
                    return Err(AfXdpError::sys(op, ifname, e));
                }
            }
        }
        let (xsk, bind_flags) =
            bound.ok_or_else(|| AfXdpError::InvalidOptions("no bind mode to try".into()))?;
        let zerocopy = xsk
            .zerocopy()
            .map_err(|e| AfXdpError::sys("getsockopt(XDP_OPTIONS)", ifname, e))?;
        prog.register(ifname, opts.queue, xsk.fd.as_raw_fd())?;
        let attach = prog.attach(ifname, ifindex, opts.mode)?;

        let sg = bind_flags & XDP_USE_SG != 0;
        let rx_room = opts.frame_size - XDP_PACKET_HEADROOM;
        if !sg && mtu + ETH_HLEN + 2 * VLAN_HLEN > rx_room as usize {
            tracing::warn!(
                port = %ifname, mtu, rx_room,
                "frames longer than {rx_room} bytes will be dropped by the kernel \
                 (no multi-buffer support); raise frame_size"
            );
        }
        tracing::info!(
            port = %ifname,
            xdp = %attach,
            bind = %bind_flags_text(bind_flags),
            zerocopy,
            queue = opts.queue,
            mtu,
            "AF_XDP port open ({} mode XDP, {})",
            attach,
            if zerocopy { "zero-copy" } else { "copy" }
        );
        let rx_frames = opts.rx_frames();
        let free_tx = (rx_frames..opts.frame_count)
            .rev()
            .map(|f| u64::from(f) * u64::from(opts.frame_size))
            .collect();
        Ok(AfXdpPort {
            name: ifname.to_string(),
            ifindex,
            queue: opts.queue,
            attach,
            zerocopy,
            csum_complete: opts.csum_complete,
            bind_flags,
            prog,
            xsk,
            umem,
            free_tx,
            to_fill: Vec::with_capacity(opts.ring_size as usize),
            tx_kick_pending: false,
            last_tx_errno: 0,
            rx: RxState {
                name: ifname.to_string(),
                mtu,
                stats: PortStats::default(),
                counters: AfXdpCounters::default(),
                pending: VecDeque::new(),
                segs: Vec::new(),
                big: Vec::new(),
                assembling: false,
                broken: false,
                warned_oversize: false,
            },
            _saved_features: saved_features,
        })
    }

    /// Call the port `name` on the bridge (`add-port --name`); it is named
    /// after its interface otherwise.
    pub fn set_name(&mut self, name: &str) {
        self.name = name.to_string();
        self.rx.name = name.to_string();
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The queue the socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The interface MTU read at `open`: the size super-frames are cut to
    /// and the longest IP datagram transmitted.
    pub fn mtu(&self) -> usize {
        self.rx.mtu
    }

    /// Where the XDP program runs.
    pub fn attach_mode(&self) -> AttachMode {
        debug_assert_eq!(self.prog.attached(), Some(self.attach));
        self.attach
    }

    /// Was the port opened with `csum_complete=true`?
    pub fn csum_complete(&self) -> bool {
        self.csum_complete
    }

    /// The AF_XDP socket, for another program's XSKMAP (the offload
    /// engine's `dp_xsks`).
    pub fn xsk_fd(&self) -> RawFd {
        self.xsk.fd.as_raw_fd()
    }

    /// Did the socket bind in zero-copy mode (`XDP_OPTIONS`)?
    pub fn zerocopy(&self) -> bool {
        self.zerocopy
    }

    /// Does the socket take multi-buffer frames (`XDP_USE_SG`)?
    pub fn multi_buffer(&self) -> bool {
        self.bind_flags & XDP_USE_SG != 0
    }

    /// The `sxdp_flags` the socket was bound with, as text
    /// ("XDP_COPY|XDP_USE_SG|XDP_USE_NEED_WAKEUP").
    pub fn bind_flags(&self) -> String {
        bind_flags_text(self.bind_flags)
    }

    /// Drop counters by reason (the kernel's read now) and fix-up counters.
    pub fn counters(&self) -> AfXdpCounters {
        let mut c = self.rx.counters.clone();
        if let Ok(k) = self.xsk.statistics() {
            c.kernel_rx_dropped = k.rx_dropped;
            c.kernel_rx_ring_full = k.rx_ring_full;
            c.kernel_fill_ring_empty = k.rx_fill_ring_empty_descs;
            c.kernel_rx_invalid_descs = k.rx_invalid_descs;
            c.kernel_tx_invalid_descs = k.tx_invalid_descs;
            c.kernel_tx_ring_empty = k.tx_ring_empty_descs;
        }
        c
    }

    /// Take sent frames back from the completion ring.
    fn reclaim_completions(&mut self) {
        let n = self.xsk.comp.peek(self.xsk.comp.size());
        for i in 0..n {
            let addr = self.xsk.comp.read(i);
            if (addr as usize) < self.umem.len() {
                self.free_tx.push(self.umem.chunk_of(addr));
            }
        }
        self.xsk.comp.release(n);
    }

    /// Make the kernel send what the tx ring holds. In copy mode that only
    /// happens inside a system call, a bounded batch per call (`EAGAIN`
    /// when more is left), so call until the ring is drained or no progress
    /// is made; leftovers are retried on the next receive or transmit call
    /// (and by `poll` on [`rx_fd`](Port::rx_fd), which also drives copy-mode
    /// transmission).
    fn kick_tx(&mut self) {
        self.tx_kick_pending = false;
        let mut left = self.xsk.tx.in_flight();
        if left == 0 || (self.zerocopy && !self.xsk.tx.needs_wakeup()) {
            self.reclaim_completions();
            return;
        }
        let mut rounds = left / 16 + 4;
        while left > 0 && rounds > 0 {
            rounds -= 1;
            self.rx.counters.tx_wakeups += 1;
            if let Err(e) = self.xsk.wake_tx() {
                let errno = e.raw_os_error().unwrap_or(0);
                if !matches!(
                    errno,
                    libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR
                ) {
                    if errno != self.last_tx_errno {
                        self.last_tx_errno = errno;
                        tracing::warn!(port = %self.name, "transmit kick failed: {}", Errno(&e));
                    }
                    break;
                }
            }
            let now = self.xsk.tx.in_flight();
            if now == left {
                break; // no progress: socket buffer or device full
            }
            left = now;
        }
        self.tx_kick_pending = left > 0;
        self.reclaim_completions();
    }

    /// Put read rx frames back on the fill ring; wake the kernel if it asks.
    fn refill(&mut self) {
        if self.to_fill.is_empty() {
            return;
        }
        let n = self.xsk.fill.reserve(self.to_fill.len() as u32);
        let start = self.to_fill.len() - n as usize;
        for (i, &a) in self.to_fill[start..].iter().enumerate() {
            self.xsk.fill.write(i as u32, a);
        }
        self.xsk.fill.submit(n);
        self.to_fill.truncate(start);
        if n > 0 && self.xsk.fill.needs_wakeup() {
            self.rx.counters.rx_wakeups += 1;
            let _ = self.xsk.wake_rx();
        }
    }
}

impl Port for AfXdpPort {
    fn ifindex(&self) -> Option<u32> {
        Some(AfXdpPort::ifindex(self))
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "afxdp"
    }

    fn offload_hook(&self) -> crate::OffloadHook {
        crate::OffloadHook::AfXdp(crate::hook::AfXdpHook {
            ifindex: self.ifindex,
            queue: self.queue,
            xsk_fd: self.xsk_fd(),
            csum_complete: self.csum_complete,
            native: self.attach == AttachMode::Native,
            link: self.prog.link_ref(),
        })
    }

    fn spin_worthwhile(&self) -> bool {
        true
    }

    fn has_deferred_work(&self) -> bool {
        self.tx_kick_pending
    }

    /// Also returns segments left over from a super-frame by the previous
    /// call first. A caller woken by [`rx_fd`](Port::rx_fd) must call again
    /// while it gets `max` frames: leftovers do not make the fd readable.
    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        if self.tx_kick_pending {
            self.kick_tx();
        }
        let mut n = 0;
        while n < max {
            match self.rx.pending.pop_front() {
                Some(b) => {
                    out.push(b);
                    n += 1;
                }
                None => break,
            }
        }
        if n >= max {
            return Ok(n);
        }
        let avail = self.xsk.rx.peek(self.xsk.rx.size());
        let mut used = 0;
        while used < avail && (n < max || self.rx.assembling) {
            let d: XdpDesc = self.xsk.rx.read(used);
            used += 1;
            let more = d.options & XDP_PKT_CONTD != 0;
            let valid = self.umem.in_one_frame(d.addr, d.len);
            if (d.addr as usize) < self.umem.len() {
                self.to_fill.push(self.umem.chunk_of(d.addr));
            }
            if !valid {
                // The whole frame (all its descriptors) is lost.
                self.rx.counters.rx_invalid_descs += 1;
                self.rx.broken = true;
                self.rx.assembling = more;
                if !more {
                    self.rx.end_frame_dropped();
                }
                continue;
            }
            // SAFETY: the descriptor came from the rx ring, so its frame is
            // ours until it goes back on the fill ring (in `refill`, after
            // this loop); `in_one_frame` was checked just above.
            let bytes = unsafe { self.umem.bytes(d.addr, d.len) };
            if self.rx.assembling || more {
                n += self
                    .rx
                    .assemble(bytes, more, out, max.saturating_sub(n), pool);
            } else {
                n += self.rx.deliver(bytes, out, max - n, pool);
            }
        }
        self.xsk.rx.release(used);
        self.refill();
        Ok(n)
    }

    /// Copies each frame into a free UMEM frame (several if it is longer and
    /// the socket is multi-buffer), posts the batch on the tx ring and kicks
    /// the kernel. Never blocks: no room in the ring, no free frame or a
    /// frame too long counts in `tx_dropped` (by reason in
    /// [`AfXdpCounters`]). Always returns `Ok` with the number queued.
    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        if pkts.is_empty() {
            return Ok(0);
        }
        self.reclaim_completions();
        let fs = self.umem.frame_size() as usize;
        let sg = self.multi_buffer();
        let max_len = self.rx.mtu + ETH_HLEN + 2 * VLAN_HLEN;
        let want: usize = pkts.iter().map(|p| p.len().div_ceil(fs).max(1)).sum();
        let room = self.xsk.tx.reserve(want.min(u32::MAX as usize) as u32) as usize;
        let mut slot = 0usize;
        let mut sent = 0;
        for p in pkts.iter() {
            let data = p.data();
            let len = data.len();
            let k = len.div_ceil(fs);
            if len == 0 || len > max_len || (k > 1 && !sg) {
                self.rx.counters.tx_oversize += 1;
                self.rx.stats.tx_dropped += 1;
                continue;
            }
            if slot + k > room {
                self.rx.counters.tx_ring_full += 1;
                self.rx.stats.tx_dropped += 1;
                continue;
            }
            if self.free_tx.len() < k {
                self.reclaim_completions();
                if self.free_tx.len() < k {
                    self.rx.counters.tx_no_frame += 1;
                    self.rx.stats.tx_dropped += 1;
                    continue;
                }
            }
            for (j, chunk) in data.chunks(fs).enumerate() {
                let addr = self.free_tx.pop().expect("checked above");
                // SAFETY: `addr` came from the free list, so the frame is
                // ours (not on the tx ring, or back from the completion
                // ring); a chunk is at most one frame long.
                let dst = unsafe { self.umem.bytes_mut(addr, chunk.len() as u32) };
                dst.copy_from_slice(chunk);
                self.xsk.tx.write(
                    slot as u32,
                    XdpDesc {
                        addr,
                        len: chunk.len() as u32,
                        options: if j + 1 < k { XDP_PKT_CONTD } else { 0 },
                    },
                );
                slot += 1;
            }
            self.rx.stats.tx_packets += 1;
            self.rx.stats.tx_bytes += len as u64;
            sent += 1;
        }
        self.xsk.tx.submit(slot as u32);
        if slot > 0 || self.tx_kick_pending {
            self.kick_tx();
        }
        done.append(pkts);
        Ok(sent)
    }

    /// `rx_dropped` includes the kernel's receive drops (`XDP_STATISTICS`:
    /// no fill-ring frame, rx ring full, invalid descriptors), `tx_dropped`
    /// the tx descriptors the kernel rejected.
    fn stats(&self) -> PortStats {
        let mut s = self.rx.stats.clone();
        if let Ok(k) = self.xsk.statistics() {
            s.rx_dropped += k.rx_dropped + k.rx_ring_full + k.rx_invalid_descs;
            s.tx_dropped += k.tx_invalid_descs;
        }
        s
    }

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.counters();
        vec![
            ("rx_drop_kernel", c.kernel_rx_dropped),
            ("rx_drop_ring_full", c.kernel_rx_ring_full),
            ("rx_fill_ring_empty", c.kernel_fill_ring_empty),
            (
                "rx_drop_invalid_desc",
                c.kernel_rx_invalid_descs + c.rx_invalid_descs,
            ),
            ("rx_drop_oversize", c.oversize_dropped),
            ("rx_csum_completed", c.csum_completed),
            ("rx_multi_buffer_frames", c.multi_buffer_frames),
            ("rx_gso_frames", c.gso_frames),
            ("rx_gso_segments", c.gso_segments),
            ("tx_drop_invalid_desc", c.kernel_tx_invalid_descs),
            ("tx_drop_ring_full", c.tx_ring_full),
            ("tx_drop_no_frame", c.tx_no_frame),
            ("tx_drop_oversize", c.tx_oversize),
        ]
    }

    /// The AF_XDP socket: readable (`POLLIN`) when the rx ring holds frames.
    fn rx_fd(&self) -> Option<RawFd> {
        Some(self.xsk.fd.as_raw_fd())
    }
}

impl fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("name", &self.name)
            .field("ifindex", &self.ifindex)
            .field("queue", &self.queue)
            .field("attach", &self.attach)
            .field("zerocopy", &self.zerocopy)
            .field("bind_flags", &self.bind_flags())
            .field("mtu", &self.rx.mtu)
            .finish()
    }
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        tracing::debug!(port = %self.name, xdp = %self.attach, "AF_XDP port closed, XDP program detached");
        // Fields drop next, in declaration order: program (detached), socket
        // (rings unmapped, closed), UMEM.
    }
}

impl RxState {
    /// One descriptor of a multi-buffer frame. Returns how many frames went
    /// to `out` (when this was the last descriptor).
    fn assemble(
        &mut self,
        bytes: &[u8],
        more: bool,
        out: &mut Vec<PacketBuf>,
        room: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> usize {
        if !self.assembling {
            self.big.clear();
            self.broken = false;
        }
        self.assembling = more;
        if !self.broken {
            if self.big.len() + bytes.len() > MAX_ASSEMBLED {
                self.broken = true;
                self.counters.oversize_dropped += 1;
            } else {
                self.big.extend_from_slice(bytes);
            }
        }
        if more {
            return 0;
        }
        if self.broken {
            self.end_frame_dropped();
            return 0;
        }
        self.counters.multi_buffer_frames += 1;
        let big = std::mem::take(&mut self.big);
        let n = self.deliver(&big, out, room, pool);
        self.big = big;
        if self.big.capacity() > 1 << 17 {
            self.big = Vec::new(); // not a 64 KiB scratch forever
        }
        n
    }

    /// The last descriptor of a frame that cannot be delivered.
    fn end_frame_dropped(&mut self) {
        self.assembling = false;
        self.broken = false;
        self.big.clear();
        self.stats.rx_dropped += 1;
    }

    /// Turn one received frame into switch frames: appended to `out` while
    /// `room` lasts, the rest queued in `pending`. Returns how many went to
    /// `out`.
    fn deliver(
        &mut self,
        data: &[u8],
        out: &mut Vec<PacketBuf>,
        room: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> usize {
        self.counters.max_frame_len = self.counters.max_frame_len.max(data.len() as u64);
        if data.len() > max_frame_len(self.mtu, None) {
            let layout = parse::parse(data).ok();
            if data.len() > max_frame_len(self.mtu, layout.as_ref()) {
                return deliver_oversize(self, data, layout.as_ref(), out, room, pool);
            }
        }
        let mut buf = fill(pool, &[data]);
        if let Ok(layout) = parse::parse(buf.data()) {
            if complete_partial_checksum(buf.data_mut(), &layout) == Csum::Completed {
                self.counters.csum_completed += 1;
            }
        }
        self.push(buf, out, room)
    }
}

impl RxSide for RxState {
    fn port_name(&self) -> &str {
        &self.name
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn segs(&mut self) -> &mut Vec<PacketBuf> {
        &mut self.segs
    }

    fn count(&mut self, what: RxCount, n: u64) {
        let c = match what {
            RxCount::GsoFrames => &mut self.counters.gso_frames,
            RxCount::GsoSegments => &mut self.counters.gso_segments,
            RxCount::OversizeDropped => &mut self.counters.oversize_dropped,
            RxCount::RxDropped => &mut self.stats.rx_dropped,
        };
        *c += n;
    }

    fn first_oversize_warning(&mut self) -> bool {
        !std::mem::replace(&mut self.warned_oversize, true)
    }

    fn push(&mut self, buf: PacketBuf, out: &mut Vec<PacketBuf>, room: usize) -> usize {
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += buf.len() as u64;
        if room > 0 {
            out.push(buf);
            1
        } else {
            self.pending.push_back(buf);
            0
        }
    }
}

// ---------------------------------------------------------------------------
// Interface helpers
// ---------------------------------------------------------------------------

fn validate_ifname(name: &str) -> Result<(), AfXdpError> {
    sys::validate_ifname(name).map_err(|reason| AfXdpError::InvalidName {
        name: name.to_string(),
        reason,
    })
}

fn if_index(ifname: &str) -> Result<u32, AfXdpError> {
    sys::if_index(ifname).map_err(|source| match source.kind() {
        io::ErrorKind::InvalidInput => AfXdpError::InvalidName {
            name: ifname.to_string(),
            reason: "contains NUL",
        },
        _ => AfXdpError::NoSuchInterface {
            ifname: ifname.to_string(),
            source,
        },
    })
}

/// The interface MTU (`SIOCGIFMTU`, through a socket of its own: it is
/// read before the AF_XDP socket exists).
fn interface_mtu(ifname: &str) -> Result<usize, AfXdpError> {
    let sock = sys::control_socket()
        .map_err(|e| AfXdpError::sys("socket(AF_INET, SOCK_DGRAM)", ifname, e))?;
    sys::interface_mtu(sock.as_raw_fd(), ifname)
        .map_err(|e| AfXdpError::sys("ioctl(SIOCGIFMTU)", ifname, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
    use std::net::Ipv4Addr;

    #[test]
    fn default_options_are_valid() {
        let o = AfXdpOptions::default();
        o.validate().unwrap();
        assert_eq!(o.mode, XdpMode::Auto);
        assert_eq!(o.bind, BindMode::Auto);
        assert_eq!(o.rx_frames(), 2048);
        assert!(o.multi_buffer && o.disable_offloads);
        assert_eq!(
            o.bind_attempts(),
            vec![
                XDP_ZEROCOPY | XDP_USE_SG | XDP_USE_NEED_WAKEUP,
                XDP_ZEROCOPY | XDP_USE_NEED_WAKEUP,
                XDP_COPY | XDP_USE_SG | XDP_USE_NEED_WAKEUP,
                XDP_COPY | XDP_USE_NEED_WAKEUP,
            ]
        );
        // A 1500-byte MTU frame with two tags fits one receive frame.
        assert!(1500 + ETH_HLEN + 8 <= (o.frame_size - XDP_PACKET_HEADROOM) as usize);
    }

    #[test]
    fn option_parsing() {
        let o = AfXdpOptions::from_pairs([
            ("mode", "native"),
            ("bind", "copy"),
            ("queue", "3"),
            ("frame_size", "4096"),
            ("frame_count", "1024"),
            ("ring_size", "512"),
            ("multi_buffer", "false"),
            ("disable_offloads", "no"),
        ])
        .unwrap();
        assert_eq!(
            o,
            AfXdpOptions {
                mode: XdpMode::Native,
                bind: BindMode::Copy,
                queue: 3,
                frame_size: 4096,
                frame_count: 1024,
                ring_size: 512,
                multi_buffer: false,
                disable_offloads: false,
                csum_complete: false,
            }
        );
        assert_eq!(o.rx_frames(), 512);
        assert_eq!(o.bind_attempts(), vec![XDP_COPY | XDP_USE_NEED_WAKEUP]);
        assert_eq!("generic".parse::<XdpMode>().unwrap(), XdpMode::Generic);
        assert_eq!("skb".parse::<XdpMode>().unwrap(), XdpMode::Generic);
        assert_eq!("auto".parse::<XdpMode>().unwrap(), XdpMode::Auto);
        assert_eq!("zerocopy".parse::<BindMode>().unwrap(), BindMode::ZeroCopy);
        for (k, v) in [
            ("mode", "fast"),
            ("bind", "maybe"),
            ("queue", "x"),
            ("multi_buffer", "perhaps"),
            ("colour", "blue"),
        ] {
            let e = AfXdpOptions::default().set(k, v).unwrap_err();
            assert!(matches!(e, AfXdpError::InvalidOptions(_)), "{e}");
            assert!(e.to_string().contains(k), "{e}");
        }
    }

    #[test]
    fn option_validation() {
        let ok = AfXdpOptions::default();
        for bad in [
            AfXdpOptions {
                frame_size: 1024,
                ..ok.clone()
            },
            AfXdpOptions {
                frame_size: 3000,
                ..ok.clone()
            },
            AfXdpOptions {
                frame_size: 1 << 20,
                ..ok.clone()
            },
            AfXdpOptions {
                ring_size: 1000,
                ..ok.clone()
            },
            AfXdpOptions {
                ring_size: 32,
                ..ok.clone()
            },
            AfXdpOptions {
                frame_count: 64,
                ..ok.clone()
            },
            AfXdpOptions {
                frame_count: 1 << 20,
                ..ok.clone()
            },
            AfXdpOptions {
                queue: 64,
                ..ok.clone()
            },
        ] {
            let e = bad
                .validate()
                .expect_err(&format!("{bad:?} must be refused"));
            assert!(matches!(e, AfXdpError::InvalidOptions(_)), "{e}");
        }
    }

    #[test]
    fn errors_name_the_step_and_errno() {
        let e = AfXdpError::sys(
            "XDP_UMEM_REG",
            "veth0",
            io::Error::from_raw_os_error(libc::EINVAL),
        );
        assert_eq!(
            e.to_string(),
            "XDP_UMEM_REG on veth0: EINVAL (Invalid argument)"
        );
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let e = AfXdpError::Attach {
            mode: AttachMode::Native,
            ifname: "veth0".into(),
            source: Box::new(io::Error::from_raw_os_error(libc::EBUSY)),
        };
        assert!(
            e.to_string()
                .starts_with("attaching XDP (native mode) on veth0"),
            "{e}"
        );
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        assert_eq!(
            bind_flags_text(XDP_COPY | XDP_USE_SG | XDP_USE_NEED_WAKEUP),
            "XDP_COPY|XDP_USE_SG|XDP_USE_NEED_WAKEUP"
        );
    }

    #[test]
    fn interface_names_and_missing_interface() {
        for bad in ["", "a/b", "a b", "0123456789abcdef", "..", "a:1"] {
            assert!(
                matches!(validate_ifname(bad), Err(AfXdpError::InvalidName { .. })),
                "{bad:?}"
            );
        }
        let e = AfXdpPort::open("nfxnosuch0", AfXdpOptions::default())
            .err()
            .unwrap();
        assert!(matches!(e, AfXdpError::NoSuchInterface { .. }), "{e}");
        assert!(e.to_string().contains("nfxnosuch0"), "{e}");
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
        let e = AfXdpPort::open(
            "nfxnosuch0",
            AfXdpOptions {
                ring_size: 3,
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert!(matches!(e, AfXdpError::InvalidOptions(_)), "{e}");
    }

    fn rx_state(mtu: usize) -> RxState {
        RxState {
            name: "test".into(),
            mtu,
            stats: PortStats::default(),
            counters: AfXdpCounters::default(),
            pending: VecDeque::new(),
            segs: Vec::new(),
            big: Vec::new(),
            assembling: false,
            broken: false,
            warned_oversize: false,
        }
    }

    #[test]
    fn multi_buffer_super_frame_is_reassembled_and_segmented() {
        let payload: Vec<u8> = (0..30_000u32).map(|i| (i % 251) as u8).collect();
        let big = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
            .tcp(1, 2, 0x18)
            .payload(&payload)
            .build();
        let mut rx = rx_state(1500);
        let (mut out, mut pool) = (Vec::new(), Vec::new());
        // As the kernel posts it: 1792-byte pieces, XDP_PKT_CONTD on all
        // but the last.
        let pieces: Vec<&[u8]> = big.chunks(1792).collect();
        let mut n = 0;
        for (i, p) in pieces.iter().enumerate() {
            n += rx.assemble(p, i + 1 < pieces.len(), &mut out, 8, &mut pool);
        }
        assert_eq!(n, 8);
        let expect = 30_000usize.div_ceil(1460);
        assert_eq!(rx.pending.len(), expect - 8);
        out.extend(rx.pending.drain(..));
        let mut joined = Vec::new();
        for s in &out {
            assert!(s.len() <= 1514);
            assert!(all_checksums_valid(s.data()));
            joined.extend_from_slice(&s.data()[54..]);
        }
        assert_eq!(joined, payload);
        assert_eq!(rx.counters.multi_buffer_frames, 1);
        assert_eq!(rx.counters.gso_frames, 1);
        assert_eq!(rx.stats.rx_packets, expect as u64);
        assert!(!rx.assembling);

        // A chain whose total exceeds the limit is dropped whole.
        let chunk = vec![0u8; 4096];
        let pieces = MAX_ASSEMBLED / 4096 + 2;
        for i in 0..pieces {
            assert_eq!(
                rx.assemble(&chunk, i + 1 < pieces, &mut out, 8, &mut pool),
                0
            );
        }
        assert_eq!(rx.stats.rx_dropped, 1);
        assert!(!rx.assembling && !rx.broken);
    }

    #[test]
    fn port_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<AfXdpPort>();
    }
}
