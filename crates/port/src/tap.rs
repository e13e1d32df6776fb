//! TAP ports: a Linux network device whose other side is this process.
//!
//! Frames the host (or a namespace the tap is moved into) sends on the
//! device come out of `read`; frames the switch outputs to the port are
//! `write`n and appear to the host as received. This is what Open vSwitch's
//! internal port is: the bridge's own interface, which the host can address.
//! The device is created by opening it (`TUNSETIFF`, no packet-info header,
//! no vnet header so the kernel never hands us partial checksums or GSO
//! frames) and disappears when the port is closed.

use super::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

fn ifreq(name: &str) -> io::Result<IfReqFlags> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name `{name}`"),
        ));
    }
    let mut r = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    for (d, s) in r.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

/// Bring an interface up (SIOCSIFFLAGS |= IFF_UP).
pub fn set_link_up(name: &str) -> io::Result<()> {
    let mut r = ifreq(name)?;
    // SAFETY: plain socket(2); the fd is closed below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` is a valid, NUL-terminated ifreq that outlives both calls.
    let res = unsafe {
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut r) < 0 {
            Err(io::Error::last_os_error())
        } else {
            r.flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(s, libc::SIOCSIFFLAGS, &r) < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(s) };
    res
}

pub struct TapPort {
    name: String,
    /// `tap`, or `internal` for the bridge's own interface.
    kind: &'static str,
    dev: File,
    /// The device's interface index, read once it exists (splb measures
    /// paths by index).
    ifindex: Option<u32>,
    stats: PortStats,
    scratch: Box<[u8]>,
}

impl TapPort {
    /// Create (or attach to) TAP device `ifname` and bring it up; the port
    /// is called `name` on the bridge.
    pub fn open(name: &str, ifname: &str) -> io::Result<TapPort> {
        let mut req = ifreq(ifname)?;
        req.flags = IFF_TAP | IFF_NO_PI;
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        // SAFETY: TUNSETIFF reads the ifreq, which is valid for the call.
        if unsafe { libc::ioctl(dev.as_raw_fd(), TUNSETIFF, &req) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUNSETIFF {ifname}: {e}")));
        }
        set_link_up(ifname).map_err(|e| io::Error::new(e.kind(), format!("{ifname} up: {e}")))?;
        let ifindex = crate::sys::if_index(ifname).ok();
        Ok(TapPort {
            name: name.to_string(),
            kind: "tap",
            dev,
            ifindex,
            stats: PortStats::default(),
            scratch: vec![0u8; 65536].into_boxed_slice(),
        })
    }
}

impl TapPort {
    /// Report the port as an `internal` port (the offload manager names
    /// the kind when flows through it stay in userspace).
    pub fn set_internal(&mut self) {
        self.kind = "internal";
    }
}

impl Port for TapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn ifindex(&self) -> Option<u32> {
        self.ifindex
    }

    fn kind(&self) -> &'static str {
        self.kind
    }

    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.dev.read(&mut self.scratch) {
                Ok(0) => break,
                Ok(len) => {
                    let frame = &self.scratch[..len];
                    let buf = match pool.pop() {
                        Some(mut b) => {
                            if b.set_data(frame) {
                                b
                            } else {
                                PacketBuf::from_slice(frame)
                            }
                        }
                        None => PacketBuf::from_slice(frame),
                    };
                    out.push(buf);
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += len as u64;
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let mut sent = 0;
        for p in pkts.drain(..) {
            match self.dev.write(p.data()) {
                Ok(_) => {
                    sent += 1;
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += p.len() as u64;
                }
                // Device down or queue full: drop and count, never block.
                Err(_) => self.stats.tx_dropped += 1,
            }
            done.push(p);
        }
        Ok(sent)
    }

    fn stats(&self) -> PortStats {
        self.stats.clone()
    }

    fn rx_fd(&self) -> Option<RawFd> {
        Some(self.dev.as_raw_fd())
    }
}
