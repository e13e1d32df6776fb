//! Per-state timeouts (OVS lib/conntrack-tp.c).
//!
//! OVS keeps two vocabularies: the internal `CT_TM_*` timers the protocol
//! state machines ask for, and the `CT_DPIF_TP_ATTR_*` timeout-policy
//! attributes an operator configures. [`Timeouts`] uses the operator names
//! (so a future `ct_timeout_policy` maps field for field) and [`Tm`] the
//! internal ones; [`Timeouts::get`] is `tm_to_ct_dpif_tp`.

use std::time::Duration;

/// Timeout policy, named after OVS's `CT_DPIF_TP_ATTR_*` attributes.
/// [`Default`] is `ct_dpif_netdev_tp_def` in lib/conntrack-tp.c.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP after the first packet / a retransmitted SYN (`CT_TM_TCP_FIRST_PACKET`). Default 30 s.
    pub tcp_syn_sent: Duration,
    /// TCP while either side has not reached ESTABLISHED (`CT_TM_TCP_OPENING`). Default 30 s.
    pub tcp_syn_recv: Duration,
    /// TCP established both ways (`CT_TM_TCP_ESTABLISHED`). Default 24 h.
    pub tcp_established: Duration,
    /// TCP once one side sent FIN (`CT_TM_TCP_CLOSING`). Default 15 min.
    pub tcp_fin_wait: Duration,
    /// TCP once both sides sent FIN (`CT_TM_TCP_FIN_WAIT`). Default 45 s.
    pub tcp_time_wait: Duration,
    /// TCP once both sides are FIN_WAIT_2 or later, incl. after RST (`CT_TM_TCP_CLOSED`). Default 30 s.
    pub tcp_close: Duration,
    /// UDP / other after the first packet (`CT_TM_OTHER_FIRST`). Default 60 s.
    pub udp_first: Duration,
    /// UDP / other with several packets one way only (`CT_TM_OTHER_MULTIPLE`). Default 60 s.
    pub udp_single: Duration,
    /// UDP / other seen both ways (`CT_TM_OTHER_BIDIR`). Default 30 s.
    pub udp_multiple: Duration,
    /// ICMP echo-like exchange before the reply (`CT_TM_ICMP_FIRST`). Default 60 s.
    pub icmp_first: Duration,
    /// ICMP after the reply (`CT_TM_ICMP_REPLY`). Default 30 s.
    pub icmp_reply: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = Duration::from_secs;
        Timeouts {
            tcp_syn_sent: s(30),
            tcp_syn_recv: s(30),
            tcp_established: s(24 * 60 * 60),
            tcp_fin_wait: s(15 * 60),
            tcp_time_wait: s(45),
            tcp_close: s(30),
            udp_first: s(60),
            udp_single: s(60),
            udp_multiple: s(30),
            icmp_first: s(60),
            icmp_reply: s(30),
        }
    }
}

/// The internal timers (`enum ct_timeout`, `CT_TM_*` in conntrack-private.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tm {
    TcpFirstPacket,
    TcpOpening,
    TcpEstablished,
    TcpClosing,
    TcpFinWait,
    TcpClosed,
    OtherFirst,
    OtherMultiple,
    OtherBidir,
    IcmpFirst,
    IcmpReply,
}

impl Timeouts {
    /// `tm_to_ct_dpif_tp` + the policy lookup of `conn_update_expiration`.
    /// Note the crossed names OVS uses: `CT_TM_TCP_CLOSING` is the
    /// `FIN_WAIT` attribute, `CT_TM_TCP_FIN_WAIT` the `TIME_WAIT` one,
    /// `CT_TM_OTHER_MULTIPLE` is `UDP_SINGLE` and `CT_TM_OTHER_BIDIR` is
    /// `UDP_MULTIPLE`.
    pub(crate) fn get(&self, tm: Tm) -> Duration {
        match tm {
            Tm::TcpFirstPacket => self.tcp_syn_sent,
            Tm::TcpOpening => self.tcp_syn_recv,
            Tm::TcpEstablished => self.tcp_established,
            Tm::TcpClosing => self.tcp_fin_wait,
            Tm::TcpFinWait => self.tcp_time_wait,
            Tm::TcpClosed => self.tcp_close,
            Tm::OtherFirst => self.udp_first,
            Tm::OtherMultiple => self.udp_single,
            Tm::OtherBidir => self.udp_multiple,
            Tm::IcmpFirst => self.icmp_first,
            Tm::IcmpReply => self.icmp_reply,
        }
    }
}
