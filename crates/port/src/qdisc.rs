//! Which queueing discipline sits at the root of a port's transmit path,
//! asked from rtnetlink (`RTM_GETQDISC`).
//!
//! A qdisc an operator puts on a port (`tc qdisc add dev PORT root tbf
//! ...`) must shape everything the switch sends out of it, whichever path
//! sent the frame, as it does under Open vSwitch's kernel datapath. Two of
//! nicflow's paths would skip it:
//!
//! * a packet socket with `PACKET_QDISC_BYPASS` ([`crate::afpacket`], what
//!   the daemon sends with) hands frames straight to the driver: the
//!   bypass is set only while the port has no queueing root qdisc, re-read
//!   every housekeeping tick ([`crate::Port::housekeeping`]);
//! * the TC engine reaches a veth whose peer lives in another namespace
//!   with `bpf_redirect_peer`, straight into the peer's receive path: the
//!   offload manager uses plain `bpf_redirect` (through `dev_queue_xmit`
//!   and the qdisc) while the port has one, re-read every tick too.
//!
//! A root qdisc other than `noqueue` (a veth's default) counts as one.
//! Control-plane only: one netlink dump per query.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const TCA_KIND: u16 = 1;
/// `TC_H_ROOT`: the qdisc at the root of the transmit path (clsact and
/// ingress hang off `TC_H_INGRESS` and are not in the transmit path).
const TC_H_ROOT: u32 = 0xffff_ffff;
/// Size of `struct tcmsg`.
const TCMSG_LEN: usize = 20;

/// The kind of the root qdisc of `ifindex` (`"noqueue"`, `"tbf"`,
/// `"htb"`, ...) in the calling thread's namespace; None when the device
/// has none in the dump.
pub fn root_qdisc(ifindex: u32) -> io::Result<Option<String>> {
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
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
    let seq = 1u32;
    let mut m = Vec::with_capacity(16 + TCMSG_LEN);
    m.extend_from_slice(&((16 + TCMSG_LEN) as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_GETQDISC.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // tcmsg: family AF_UNSPEC, the interface (the kernel may dump all of
    // them anyway: filtered below), handle, parent, info.
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&[0u8; 12]);
    // SAFETY: sending a buffer we own to the kernel.
    let r = unsafe {
        libc::send(
            fd.as_raw_fd(),
            m.as_ptr() as *const libc::c_void,
            m.len(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 32768];
    let mut found = None;
    loop {
        // SAFETY: receiving into a buffer we own, for its length.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::other("rtnetlink: qdisc dump ended early"));
        }
        let mut b = &buf[..n as usize];
        while b.len() >= 16 {
            let mlen = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
            let mtype = u16::from_ne_bytes([b[4], b[5]]);
            if mlen < 16 || mlen > b.len() {
                return Err(io::Error::other("rtnetlink: truncated qdisc message"));
            }
            match mtype {
                NLMSG_DONE => return Ok(found),
                NLMSG_ERROR => {
                    let err = if mlen >= 20 {
                        i32::from_ne_bytes([b[16], b[17], b[18], b[19]])
                    } else {
                        -libc::EIO
                    };
                    return Err(io::Error::from_raw_os_error(-err));
                }
                RTM_NEWQDISC => {
                    if let Some(kind) = root_kind_of(&b[16..mlen], ifindex) {
                        found = Some(kind);
                    }
                }
                _ => {}
            }
            let adv = mlen.div_ceil(4) * 4;
            b = &b[adv.min(b.len())..];
        }
    }
}

/// The kind of one `RTM_NEWQDISC` body (tcmsg + attributes) when it is
/// the root qdisc of `ifindex`.
fn root_kind_of(body: &[u8], ifindex: u32) -> Option<String> {
    if body.len() < TCMSG_LEN {
        return None;
    }
    let ifi = i32::from_ne_bytes([body[4], body[5], body[6], body[7]]);
    let parent = u32::from_ne_bytes([body[12], body[13], body[14], body[15]]);
    if ifi != ifindex as i32 || parent != TC_H_ROOT {
        return None;
    }
    let mut a = &body[TCMSG_LEN..];
    while a.len() >= 4 {
        let len = u16::from_ne_bytes([a[0], a[1]]) as usize;
        let ty = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
        if len < 4 || len > a.len() {
            return None;
        }
        if ty == TCA_KIND {
            let v = &a[4..len];
            let v = v.split(|c| *c == 0).next().unwrap_or(v);
            return Some(String::from_utf8_lossy(v).into_owned());
        }
        a = &a[(len.div_ceil(4) * 4).min(a.len())..];
    }
    None
}

/// Does a root qdisc of this kind queue or shape what the port sends?
/// Everything but `noqueue` (what a veth has unless told otherwise).
pub fn shapes(kind: Option<&str>) -> bool {
    matches!(kind, Some(k) if k != "noqueue")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ifindex: i32, parent: u32, kind: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 4];
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&parent.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        let len = 4 + kind.len();
        b.extend_from_slice(&(len as u16).to_ne_bytes());
        b.extend_from_slice(&TCA_KIND.to_ne_bytes());
        b.extend_from_slice(kind);
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        b
    }

    #[test]
    fn only_the_root_qdisc_of_the_interface_counts() {
        assert_eq!(
            root_kind_of(&msg(7, TC_H_ROOT, b"tbf\0"), 7).as_deref(),
            Some("tbf")
        );
        assert_eq!(root_kind_of(&msg(8, TC_H_ROOT, b"tbf\0"), 7), None);
        // clsact hangs off TC_H_INGRESS.
        assert_eq!(root_kind_of(&msg(7, 0xffff_fff1, b"clsact\0"), 7), None);
        // Truncated bodies and attributes are ignored, never a panic.
        assert_eq!(root_kind_of(&msg(7, TC_H_ROOT, b"tbf\0")[..10], 7), None);
        let mut bad = msg(7, TC_H_ROOT, b"tbf\0");
        bad[20] = 200;
        assert_eq!(root_kind_of(&bad, 7), None);
    }

    #[test]
    fn noqueue_and_nothing_do_not_shape() {
        assert!(!shapes(None));
        assert!(!shapes(Some("noqueue")));
        assert!(shapes(Some("tbf")));
        assert!(shapes(Some("htb")));
    }

    #[test]
    fn loopback_root_qdisc_can_be_read() {
        // Loopback has a root qdisc (noqueue) in every namespace.
        match root_qdisc(1) {
            Ok(k) => assert!(!shapes(k.as_deref()), "lo: {k:?}"),
            Err(e) => eprintln!("skipping: rtnetlink qdisc dump unavailable ({e})"),
        }
    }
}
