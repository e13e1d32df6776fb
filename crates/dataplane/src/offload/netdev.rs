//! What an interface can do with XDP frames, asked from the kernel's
//! `netdev` generic-netlink family (`NETDEV_CMD_DEV_GET`, Linux 6.3+).
//!
//! Why the offload manager needs it: an `XDP_REDIRECT` into a device only
//! arrives if the device can transmit XDP frames (`ndo_xdp_xmit`). A veth
//! can do that only while its *peer* runs NAPI (an XDP program or GRO on
//! the peer); otherwise `veth_xdp_xmit` drops the frame, counted nowhere
//! the switch would look. The kernel advertises exactly that condition as
//! `NETDEV_XDP_ACT_NDO_XMIT` in the device's `xdp_features` (veth updates
//! it when the peer's XDP program or GRO setting changes), so the manager
//! only makes a port a redirect target while the bit is set, and re-reads
//! it every housekeeping tick.
//!
//! Control-plane only: one netlink round trip per query.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `NETDEV_XDP_ACT_*` bits (`include/uapi/linux/netdev.h`).
pub mod act {
    pub const BASIC: u64 = 1;
    pub const REDIRECT: u64 = 2;
    /// The device accepts redirected frames (`ndo_xdp_xmit`).
    pub const NDO_XMIT: u64 = 4;
    pub const RX_SG: u64 = 32;
    pub const NDO_XMIT_SG: u64 = 64;
}

const NETLINK_GENERIC: libc::c_int = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;

/// A generic-netlink socket with the `netdev` family resolved.
#[derive(Debug)]
pub struct NetdevQuery {
    fd: OwnedFd,
    family: u16,
    seq: u32,
}

fn nla(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// Attributes of a generic-netlink message body (after the 4-byte genl
/// header).
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        let adv = len.div_ceil(4) * 4;
        b = &b[adv.min(b.len())..];
        Some((ty, payload))
    })
}

impl NetdevQuery {
    pub fn open() -> io::Result<NetdevQuery> {
        // SAFETY: plain socket(2); the descriptor is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: setsockopt reads a timeval we own for its size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        let mut q = NetdevQuery {
            fd,
            family: 0,
            seq: 0,
        };
        let mut body = Vec::new();
        nla(&mut body, CTRL_ATTR_FAMILY_NAME, b"netdev\0");
        let reply = q.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &body)?;
        q.family = attrs(&reply)
            .find(|(t, p)| *t == CTRL_ATTR_FAMILY_ID && p.len() >= 2)
            .map(|(_, p)| u16::from_ne_bytes([p[0], p[1]]))
            .ok_or_else(|| io::Error::other("genetlink: no `netdev` family id"))?;
        Ok(q)
    }

    /// Send one request, return the genl payload (attributes) of the reply.
    fn request(&mut self, family: u16, cmd: u8, body: &[u8]) -> io::Result<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let len = 16 + 4 + body.len();
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&family.to_ne_bytes());
        m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[cmd, 1, 0, 0]);
        m.extend_from_slice(body);
        // SAFETY: sending a buffer we own (the kernel is the destination
        // of an unbound netlink socket).
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                m.as_ptr() as *const libc::c_void,
                m.len(),
                0,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 16384];
        let mut payload = None;
        loop {
            // SAFETY: receiving into a buffer we own, for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut b = &buf[..n as usize];
            while b.len() >= 16 {
                let mlen = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let mtype = u16::from_ne_bytes([b[4], b[5]]);
                let mseq = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
                if mlen < 16 || mlen > b.len() {
                    break;
                }
                if mseq == self.seq {
                    if mtype == NLMSG_ERROR {
                        let err = i32::from_ne_bytes([b[16], b[17], b[18], b[19]]);
                        if err != 0 {
                            return Err(io::Error::from_raw_os_error(-err));
                        }
                        // The ACK comes after the reply.
                        return payload.ok_or_else(|| io::Error::other("genetlink: empty reply"));
                    }
                    if mlen >= 20 {
                        payload = Some(b[20..mlen].to_vec());
                    }
                }
                let adv = mlen.div_ceil(4) * 4;
                b = &b[adv.min(b.len())..];
            }
        }
    }

    /// The device's `xdp_features` (`NETDEV_XDP_ACT_*` bits).
    pub fn xdp_features(&mut self, ifindex: u32) -> io::Result<u64> {
        let mut body = Vec::new();
        nla(&mut body, NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes());
        let reply = self.request(self.family, NETDEV_CMD_DEV_GET, &body)?;
        let v = attrs(&reply)
            .find(|(t, p)| *t == NETDEV_A_DEV_XDP_FEATURES && p.len() >= 8)
            .map(|(_, p)| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&p[..8]);
                u64::from_ne_bytes(w)
            });
        v.ok_or_else(|| io::Error::other("netdev: no xdp-features attribute"))
    }

    /// Can frames be redirected into `ifindex` (`NDO_XMIT`)?
    pub fn accepts_redirects(&mut self, ifindex: u32) -> io::Result<bool> {
        Ok(self.xdp_features(ifindex)? & act::NDO_XMIT != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_round_trip() {
        let mut b = Vec::new();
        nla(&mut b, 1, &7u32.to_ne_bytes());
        nla(&mut b, 2, b"netdev\0");
        nla(&mut b, 3, &0x45u64.to_ne_bytes());
        let v: Vec<(u16, Vec<u8>)> = attrs(&b).map(|(t, p)| (t, p.to_vec())).collect();
        assert_eq!(v.len(), 3);
        assert_eq!(v[1], (2, b"netdev\0".to_vec()));
        assert_eq!(v[2].1, 0x45u64.to_ne_bytes().to_vec());
    }

    #[test]
    fn loopback_features_can_be_read() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let mut q = match NetdevQuery::open() {
            Ok(q) => q,
            Err(e) => {
                eprintln!("skipping: no netdev genetlink family ({e})");
                return;
            }
        };
        // lo has no XDP transmit.
        let f = q.xdp_features(1).unwrap();
        assert_eq!(f & act::NDO_XMIT, 0);
        assert!(q.xdp_features(0x7fff_fff0).is_err());
    }
}
