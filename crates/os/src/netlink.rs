//! A blocking rtnetlink (`NETLINK_ROUTE`) socket: send one request, read its
//! answer, turn a refusal into an [`OsError`] with the kernel's errno.
//!
//! Two kinds of exchange cover everything the OS layer does:
//! - a *request* (`RTM_NEW*`, `RTM_DEL*`, `RTM_SET*`, a `RTM_GET*` of one
//!   object) is sent with `NLM_F_ACK`, so the kernel always ends its answer
//!   with an `NLMSG_ERROR` (code 0 is the acknowledgement); replies before
//!   it are returned;
//! - a *dump* (`NLM_F_DUMP`) ends with `NLMSG_DONE`.
//!
//! The socket's network namespace is the one its creating thread was in:
//! [`Rtnl::open`] with a namespace name creates it from a thread that joined
//! that namespace ([`super::netns::run_in`]), and every later request on it
//! acts there, whichever thread sends it.

use super::{netns, OsError, Result};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_MULTIPART,
    NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::io;

/// Largest datagram the kernel sends on a netlink socket (dumps are cut
/// into skbs of at most 32 KiB); twice that leaves room.
const RECV_BUF: usize = 64 * 1024;

/// See the module docs.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
}

impl std::fmt::Debug for Rtnl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rtnl").field("seq", &self.seq).finish()
    }
}

impl Rtnl {
    /// A socket in namespace `ns` (a name under `/run/netns`), or in the
    /// calling thread's namespace for `None`.
    pub fn open(ns: Option<&str>) -> Result<Rtnl> {
        netns::run_in(ns, Rtnl::open_here)
    }

    /// A socket in the calling thread's current namespace.
    pub fn open_here() -> Result<Rtnl> {
        let err = |op, e| OsError::sys(op, "NETLINK_ROUTE", e);
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(|e| err("socket", e))?;
        sock.bind_auto().map_err(|e| err("bind", e))?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(|e| err("connect", e))?;
        Ok(Rtnl { sock, seq: 0 })
    }

    /// Send `msg` with `NLM_F_REQUEST | NLM_F_ACK | flags` and wait for the
    /// acknowledgement; returns the replies that came before it (a
    /// `RTM_GET*` of one object answers with one).
    pub fn request(
        &mut self,
        op: &'static str,
        target: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.exchange(op, target, msg, NLM_F_REQUEST | NLM_F_ACK | flags, false)
    }

    /// Send `msg` as a dump request and collect every reply.
    pub fn dump(
        &mut self,
        op: &'static str,
        target: &str,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.exchange(op, target, msg, NLM_F_REQUEST | NLM_F_DUMP, true)
    }

    fn exchange(
        &mut self,
        op: &'static str,
        target: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
        dump: bool,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let nl_err = |e: io::Error| OsError::netlink(op, target, e);
        let reply_err = |why: String| OsError::Reply {
            op,
            target: target.to_string(),
            why,
        };
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        self.sock.send(&out, 0).map_err(nl_err)?;

        let mut replies = Vec::new();
        let mut buf: Vec<u8> = Vec::with_capacity(RECV_BUF);
        loop {
            buf.clear();
            match self.sock.recv(&mut buf, 0) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(nl_err(e)),
            }
            let mut at = 0;
            while at + 16 <= buf.len() {
                let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default());
                let len = len as usize;
                if len < 16 || at + len > buf.len() {
                    return Err(reply_err(format!("bad netlink message length {len}")));
                }
                let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf[at..at + len])
                    .map_err(|e| reply_err(e.to_string()))?;
                at += (len + 3) & !3;
                if m.header.sequence_number != seq {
                    // A stale answer to an earlier request (one we gave up
                    // on): not ours.
                    continue;
                }
                let multipart = m.header.flags & NLM_F_MULTIPART != 0;
                match m.payload {
                    NetlinkPayload::Done(d) => {
                        if d.code != 0 {
                            return Err(nl_err(io::Error::from_raw_os_error(-d.code)));
                        }
                        return Ok(replies);
                    }
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(replies),
                        Some(c) => return Err(nl_err(io::Error::from_raw_os_error(-c.get()))),
                    },
                    NetlinkPayload::InnerMessage(r) => {
                        replies.push(r);
                        if !dump && !multipart && flags & NLM_F_ACK == 0 {
                            return Ok(replies);
                        }
                    }
                    NetlinkPayload::Noop => {}
                    NetlinkPayload::Overrun(_) => {
                        return Err(reply_err("overrun".into()));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A namespace file held open for the length of a request that names it
/// (`IFLA_NET_NS_FD`): the kernel reads the descriptor while it handles the
/// message.
pub(crate) struct NsFd(std::fs::File);

impl NsFd {
    pub(crate) fn open(ns: &str) -> Result<NsFd> {
        let path = netns::path(ns)?;
        std::fs::File::open(&path)
            .map(NsFd)
            .map_err(|e| OsError::sys("open", path.display().to_string(), e))
    }

    pub(crate) fn raw(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }
}
