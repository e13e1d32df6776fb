//! ICMP and ICMPv6 echo-like exchanges: OVS lib/conntrack-icmp.c. ICMP
//! errors never reach this module: they are matched to the connection they
//! quote (see `tuple::icmp_error_inner`) and reported +rel; under a `ct`
//! with `nat` an error about a NATed connection is translated, quoted
//! packet included (`nat::rewrite_related`).

use crate::conn::Update;
use crate::timeouts::Tm;
use crate::tuple::{ICMP4_ECHO_REQUEST, ICMP4_INFOREQUEST, ICMP4_TIMESTAMP, ICMP6_ECHO_REQUEST};

/// `enum icmp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IcmpState {
    First,
    Reply,
}

impl IcmpState {
    fn timer(self) -> Tm {
        match self {
            IcmpState::First => Tm::IcmpFirst,
            IcmpState::Reply => Tm::IcmpReply,
        }
    }

    pub(crate) fn initial_timer() -> Tm {
        IcmpState::First.timer()
    }

    /// `icmp_conn_update`: +est once a reply was seen, +new for repeated
    /// requests before that.
    pub(crate) fn update(&mut self, reply: bool) -> Update {
        let new = if reply && *self == IcmpState::First {
            *self = IcmpState::Reply;
            false
        } else {
            *self == IcmpState::First
        };
        let tm = Some(self.timer());
        if new {
            Update::ValidNew(tm)
        } else {
            Update::Valid(tm)
        }
    }
}

/// `icmp4_valid_new`: only requests open a connection.
pub(crate) fn icmp4_valid_new(icmp_type: u8) -> bool {
    matches!(
        icmp_type,
        ICMP4_ECHO_REQUEST | ICMP4_INFOREQUEST | ICMP4_TIMESTAMP
    )
}

/// `icmp6_valid_new`.
pub(crate) fn icmp6_valid_new(icmp_type: u8) -> bool {
    icmp_type == ICMP6_ECHO_REQUEST
}
