//! Traffic tools: `nicflow gen` puts test frames onto an interface and
//! `nicflow sink` takes them off another and reports what arrived.
//!
//! They sit at both ends of the packet's path, outside the switch: the
//! generator writes frames straight into a transmit ring (an AF_XDP socket's
//! UMEM in [`xdp_tx`], an AF_PACKET `PACKET_TX_RING` in [`packet_tx`]), built
//! once per flow from a [`template`] and only patched per packet (sequence
//! number, timestamp, checksum); the sink reads frames through the switch's
//! own receive ports ([`nicflow_port::afxdp`], [`nicflow_port::afpacket`]),
//! finds the [`payload`] header and accounts loss, reordering and one-way
//! [`latency`] per flow. Both sides stamp with `CLOCK_MONOTONIC`, which every
//! network namespace of one machine shares, so one-way latency is exact when
//! generator and sink run on the same host.

pub mod gen;
pub mod latency;
pub mod packet_tx;
pub mod payload;
pub mod plan;
pub mod sink;
pub mod template;
pub mod xdp_tx;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Which kind of socket a tool uses on its interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PortType {
    /// AF_XDP, falling back to AF_PACKET (logged) when AF_XDP cannot be used.
    #[default]
    Auto,
    Afxdp,
    Afpacket,
}

/// Errors of the traffic tools' library code; the CLI adds context.
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    /// A command-line value that cannot work, named as the user typed it.
    #[error("{what} `{token}`: {why}")]
    BadInput {
        what: &'static str,
        token: String,
        why: String,
    },
    /// A system call failed; `op` names the step. (The OS error is part
    /// of the message, not a `source`, so it is printed once.)
    #[error("{op} on {iface}: {err}")]
    Sys {
        op: String,
        iface: String,
        err: io::Error,
    },
}

impl TrafficError {
    pub(crate) fn sys(op: impl Into<String>, iface: &str, source: io::Error) -> Self {
        TrafficError::Sys {
            op: op.into(),
            iface: iface.to_string(),
            err: source,
        }
    }

    pub(crate) fn bad(what: &'static str, token: impl ToString, why: impl ToString) -> Self {
        TrafficError::BadInput {
            what,
            token: token.to_string(),
            why: why.to_string(),
        }
    }

    /// The kernel lacks the feature (AF_XDP not built, no such socket
    /// family): worth falling back to AF_PACKET.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, TrafficError::Sys { err, .. } if matches!(
            err.raw_os_error(),
            Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
        ))
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the timestamp in every payload, and the
/// sink's receive time. All network namespaces share this clock.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always
    // exists (vDSO call, no system call).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// User and system CPU seconds this process has used so far (all threads).
pub fn cpu_times() -> (f64, f64) {
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// A 6-byte MAC address; parses `aa:bb:cc:dd:ee:ff` (or `-` separators).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Mac(pub [u8; 6]);

impl std::str::FromStr for Mac {
    type Err = String;

    fn from_str(s: &str) -> Result<Mac, String> {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(format!(
                "`{s}` is not a MAC address (six hex bytes like 02:00:00:00:00:01)"
            ));
        }
        let mut m = [0u8; 6];
        for (i, p) in parts.iter().enumerate() {
            if p.is_empty() || p.len() > 2 {
                return Err(format!("`{s}` is not a MAC address: bad byte `{p}`"));
            }
            m[i] = u8::from_str_radix(p, 16)
                .map_err(|_| format!("`{s}` is not a MAC address: bad byte `{p}`"))?;
        }
        Ok(Mac(m))
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// Read `/sys/class/net/IFACE/FILE` (of the current network namespace).
pub(crate) fn sysfs(iface: &str, file: &str) -> Result<String, TrafficError> {
    if iface.is_empty() || iface.len() > 15 || iface.contains(['/', '\0']) || iface == "." {
        return Err(TrafficError::bad(
            "interface",
            iface,
            "not a valid interface name",
        ));
    }
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{file}"))
        .map(|s| s.trim().to_string())
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                TrafficError::bad(
                    "interface",
                    iface,
                    "no such interface in this network namespace",
                )
            } else {
                TrafficError::sys(format!("reading /sys/class/net/{iface}/{file}"), iface, e)
            }
        })
}

/// Interface index.
pub(crate) fn ifindex(iface: &str) -> Result<u32, TrafficError> {
    let s = sysfs(iface, "ifindex")?;
    s.parse()
        .map_err(|_| TrafficError::bad("interface", iface, format!("odd ifindex `{s}`")))
}

/// Number of transmit queues (`/sys/class/net/IFACE/queues/tx-*`).
pub(crate) fn tx_queues(iface: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("tx-"))
                .count()
        })
        .unwrap_or(1)
        .max(1)
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Make SIGINT and SIGTERM set a flag (see [`stopped`]) instead of killing
/// the process, so the tools still print their summary when interrupted.
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing an async-signal-safe handler (one atomic
        // store); the zeroed sigaction is valid with its fields set below.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Has SIGINT or SIGTERM arrived since [`catch_stop_signals`]?
pub fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Fold a 32-bit ones'-complement accumulator to 16 bits.
#[inline]
pub(crate) fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Ones'-complement sum (unfolded) of `data` as big-endian 16-bit words,
/// an odd last byte padded with zero: the tests' own checksum arithmetic,
/// independent of the packet crate's that builds the frames.
#[cfg(test)]
pub(crate) fn sum16(data: &[u8]) -> u32 {
    let mut s: u64 = 0;
    let mut it = data.chunks_exact(2);
    for w in &mut it {
        s += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = it.remainder() {
        s += u64::from(*b) << 8;
    }
    while s > 0xffff_ffff {
        s = (s & 0xffff_ffff) + (s >> 32);
    }
    s as u32
}

/// clap parser for durations and rates given as plain numbers: finite and
/// not negative, or an error naming the token.
pub(crate) fn parse_nonneg(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}`: expected a non-negative number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parse_and_print() {
        let m: Mac = "02:aB:00:00:00:01".parse().unwrap();
        assert_eq!(m.to_string(), "02:ab:00:00:00:01");
        assert!("02:ab:00:00:00"
            .parse::<Mac>()
            .unwrap_err()
            .contains("02:ab"));
        assert!("02:ab:00:00:00:zz"
            .parse::<Mac>()
            .unwrap_err()
            .contains("`zz`"));
    }

    #[test]
    fn checksum_helpers() {
        assert_eq!(fold(0x1_fffe), 0xffff);
        assert_eq!(sum16(&[0x01, 0x02, 0x03]), 0x0102 + 0x0300);
    }
}
