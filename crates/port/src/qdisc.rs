//! Which queueing discipline sits at the root of a port's transmit path,
//! asked from rtnetlink (`RTM_GETQDISC`), and what that means for a port.
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
//! Control-plane only: one netlink dump per query (`nicflow_os::qdisc`).

use std::io;

/// The kind of the root qdisc of `ifindex` (`"noqueue"`, `"tbf"`,
/// `"htb"`, ...) in the calling thread's namespace; None when the device
/// has none in the dump.
pub fn root_qdisc(ifindex: u32) -> io::Result<Option<String>> {
    let mut rt = nicflow_os::netlink::Rtnl::open_here().map_err(io::Error::other)?;
    nicflow_os::qdisc::root_kind(&mut rt, ifindex).map_err(io::Error::other)
}

/// Does a root qdisc of this kind queue or shape what the port sends?
/// Everything but `noqueue` (what a veth has unless told otherwise).
pub fn shapes(kind: Option<&str>) -> bool {
    matches!(kind, Some(k) if k != "noqueue")
}

#[cfg(test)]
mod tests {
    use super::*;

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
