//! One tracked connection and the per-protocol dispatch (`l4_protos[]` in
//! lib/conntrack.c: TCP, ICMP, ICMPv6, and "other" for everything else,
//! UDP and SCTP included).

use std::time::Instant;

use crate::icmp::{icmp4_valid_new, icmp6_valid_new, IcmpState};
use crate::other::OtherState;
use crate::tcp::{self, TcpConn};
use crate::timeouts::{Timeouts, Tm};
use crate::tuple::{ConnKey, Parsed, IPPROTO_TCP};
use crate::NatKind;

/// `enum ct_update_res`, with the timer `conn_update_expiration` would set
/// (None: leave the expiration alone) and the invalid reasons split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Update {
    /// `CT_UPDATE_VALID`: +est.
    Valid(Option<Tm>),
    /// `CT_UPDATE_VALID_NEW`: still +new (retransmitted SYN, one-way UDP).
    ValidNew(Option<Tm>),
    /// `CT_UPDATE_NEW`: replace the connection with a new one.
    New,
    /// `CT_UPDATE_INVALID` from `tcp_invalid_flags`.
    InvalidFlags,
    /// `CT_UPDATE_INVALID` from the sequence check.
    InvalidWindow,
}

/// Per-protocol state (`struct conn_tcp` / `conn_icmp` / `conn_other`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ProtoState {
    Tcp(TcpConn),
    Icmp(IcmpState),
    Other(OtherState),
}

/// A connection. Both direction keys are stored (OVS `key_node[CT_DIRS]`):
/// with NAT the reply key is the translated tuple, not the reversed
/// original key.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    /// [original, reply] keys.
    pub keys: [ConnKey; 2],
    pub expiration: Instant,
    pub label: u128,
    pub mark: u32,
    /// Dump identifier, assigned at creation.
    pub id: u32,
    pub proto: ProtoState,
    /// Packets and bytes seen [original, reply] direction.
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
    /// `conn->nat_action`: how the original direction is translated.
    pub nat: Option<NatKind>,
    /// Packets of this connection were forwarded where the tracker did not
    /// see them (a kernel engine): its sequence windows are stale, so it is
    /// tracked without the window check from then on, as Linux marks
    /// offloaded connections `IP_CT_TCP_FLAG_BE_LIBERAL`.
    pub liberal: bool,
    /// A kernel engine set the connection up (`Conntrack::kernel_setup`):
    /// it forwards the handshake and the close, and the tracker learns
    /// them from the TCP flags it reports. Cleared when its last kernel
    /// entry goes (`Conntrack::kernel_entries_gone`).
    pub kernel_setup: bool,
    /// The connection has kernel entries (set up there, or established
    /// and moved there): when it leaves the table its handle goes to
    /// `Conntrack::take_replaced`, so the entries go before a new
    /// connection with the same tuple installs its own.
    pub in_kernel: bool,
}

/// `valid_new`: may this packet create a connection?
pub(crate) fn valid_new(p: &Parsed) -> bool {
    let k = &p.key;
    if k.nw_proto == IPPROTO_TCP {
        return p.tcp.as_ref().is_some_and(tcp::valid_new);
    }
    if k.is_icmp() {
        return if k.ipv6 {
            icmp6_valid_new(k.src.icmp_type)
        } else {
            icmp4_valid_new(k.src.icmp_type)
        };
    }
    true
}

impl Conn {
    /// `new_conn` + `conn_init_expiration`. Caller checked [`valid_new`].
    pub(crate) fn new(p: &Parsed, id: u32, now: Instant, timeouts: &Timeouts) -> Conn {
        let (proto, tm) = match (p.key.nw_proto, p.tcp.as_ref()) {
            (IPPROTO_TCP, Some(seg)) => (ProtoState::Tcp(TcpConn::new(seg)), Tm::TcpFirstPacket),
            _ if p.key.is_icmp() => (
                ProtoState::Icmp(IcmpState::First),
                IcmpState::initial_timer(),
            ),
            _ => (
                ProtoState::Other(OtherState::First),
                OtherState::initial_timer(),
            ),
        };
        Conn {
            keys: [p.key, p.key.reversed()],
            expiration: now + timeouts.get(tm),
            label: 0,
            mark: 0,
            id,
            proto,
            packets: [1, 0],
            bytes: [u64::from(p.l3_len), 0],
            nat: None,
            liberal: false,
            kernel_setup: false,
            in_kernel: false,
        }
    }

    /// `conn_update`: run the protocol state machine and refresh the
    /// expiration it asks for.
    pub(crate) fn update(
        &mut self,
        p: &Parsed,
        reply: bool,
        now: Instant,
        timeouts: &Timeouts,
        tcp_seq_chk: bool,
    ) -> Update {
        let res = match (&mut self.proto, p.tcp.as_ref()) {
            // A connection set up in the kernel is brought up to date
            // from its entries before a bare SYN reaches here (the
            // caller's `Conntrack::kernel_tcp_flags`), so a SYN is judged
            // as on any connection: it replaces one closed both ways,
            // and is a retransmission while the SYN is unanswered.
            (ProtoState::Tcp(t), Some(seg)) => t.update(seg, reply, tcp_seq_chk && !self.liberal),
            // A TCP connection always gets TCP segments (same key, same
            // protocol); this arm only keeps the match total.
            (ProtoState::Tcp(_), None) => Update::InvalidFlags,
            (ProtoState::Icmp(s), _) => s.update(reply),
            (ProtoState::Other(s), _) => s.update(reply),
        };
        if let Update::Valid(Some(tm)) | Update::ValidNew(Some(tm)) = res {
            self.expiration = now + timeouts.get(tm);
        }
        res
    }

    /// Established in both directions (TCP: both peers ESTABLISHED; UDP
    /// and other protocols: a reply was seen); ICMP never counts, its
    /// exchanges are too short to be worth moving.
    pub(crate) fn established(&self) -> bool {
        match &self.proto {
            ProtoState::Tcp(t) => t
                .peer
                .iter()
                .all(|p| p.state == crate::tcp::TcpState::Established),
            ProtoState::Other(s) => matches!(s, OtherState::Bidir),
            ProtoState::Icmp(_) => false,
        }
    }

    /// The timer of an established connection (what traffic refreshes).
    pub(crate) fn established_timer(&self) -> Tm {
        match &self.proto {
            // Established both ways this is TCP_ESTABLISHED; a
            // connection set up in the kernel may be opening or closing.
            ProtoState::Tcp(t) => t.timer(),
            ProtoState::Other(_) => Tm::OtherBidir,
            ProtoState::Icmp(_) => Tm::IcmpReply,
        }
    }

    pub(crate) fn expired(&self, now: Instant) -> bool {
        now >= self.expiration
    }
}
