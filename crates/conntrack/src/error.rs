//! Why a packet was reported `+trk+inv`.
//!
//! OVS only bumps coverage counters for some of these (`conntrack_l3csum_err`,
//! `conntrack_invalid_tcp_flags`, `conntrack_tcp_seq_chk_failed`, ...); here
//! every invalid verdict has exactly one reason and one counter, so an
//! operator can tell a truncated packet from a TCP window violation.

/// The reason a packet was marked invalid. Every `+inv` verdict returned by
/// [`crate::Conntrack::process`] increments exactly one of these counters
/// (see [`crate::CtStats::invalid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum InvalidReason {
    /// `dl_type` is neither IPv4 nor IPv6. OVS refuses to install a `ct`
    /// action on a non-IP flow (`check_CT` in lib/ofp-actions.c), and if one
    /// reaches `conntrack_execute` anyway `conn_key_extract` fails, which is
    /// `+trk+inv`.
    #[error("not an IPv4 or IPv6 packet")]
    NotIp,
    /// The IP header (or the length it announces) runs past the buffer.
    #[error("truncated IP header or payload")]
    L3Truncated,
    /// Wrong IP version, IHL below 5, total length below the header length,
    /// or a malformed IPv6 extension header.
    #[error("malformed IP header")]
    BadL3Header,
    /// An IPv4 or IPv6 fragment. OVS reassembles first (lib/ipf.c); this
    /// crate does not, so every fragment is invalid.
    #[error("IP fragment (no reassembly)")]
    Fragment,
    /// The L4 header is shorter than the protocol needs.
    #[error("truncated L4 header")]
    L4Truncated,
    /// TCP data offset below 5 words or past the packet, UDP length out of
    /// range, malformed SCTP chunk lengths (`check_l4_*` in conntrack.c).
    #[error("malformed L4 header")]
    BadL4Header,
    /// TCP, UDP or SCTP port 0 (`extract_l4_tcp`: "Port 0 is invalid").
    #[error("L4 port 0")]
    PortZero,
    /// An ICMP/ICMPv6 type conntrack does not handle (e.g. neighbour
    /// discovery), or an echo-like type with a non-zero code.
    #[error("unsupported ICMP type or code")]
    IcmpUnsupported,
    /// An ICMP error whose embedded packet cannot be parsed or whose embedded
    /// source is not the error's destination (`extract_l4_icmp`).
    #[error("ICMP error with a bad embedded packet")]
    IcmpBadEmbedded,
    /// An ICMP error whose embedded packet belongs to no tracked connection
    /// ("An icmp related conn should always be found", `process_one`).
    #[error("ICMP error for an unknown connection")]
    RelatedNoConn,
    /// A packet that may not create a connection: TCP SYN+ACK or bad flag
    /// combinations (`tcp_valid_new`), ICMP that is not a request
    /// (`icmp4_valid_new` / `icmp6_valid_new`).
    #[error("packet cannot create a connection")]
    InvalidNew,
    /// Invalid TCP flag combination on an existing connection
    /// (`tcp_invalid_flags`).
    #[error("invalid TCP flags")]
    TcpFlags,
    /// TCP segment outside the tracked window (`tcp_conn_update` sequence
    /// check failed).
    #[error("TCP segment out of window")]
    TcpWindow,
}

impl InvalidReason {
    /// Every reason, in counter order.
    pub const ALL: [InvalidReason; 13] = [
        InvalidReason::NotIp,
        InvalidReason::L3Truncated,
        InvalidReason::BadL3Header,
        InvalidReason::Fragment,
        InvalidReason::L4Truncated,
        InvalidReason::BadL4Header,
        InvalidReason::PortZero,
        InvalidReason::IcmpUnsupported,
        InvalidReason::IcmpBadEmbedded,
        InvalidReason::RelatedNoConn,
        InvalidReason::InvalidNew,
        InvalidReason::TcpFlags,
        InvalidReason::TcpWindow,
    ];

    /// Number of reasons (size of the counter array).
    pub const COUNT: usize = Self::ALL.len();

    /// Index into [`crate::CtStats::invalid`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// A short stable name for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            InvalidReason::NotIp => "not_ip",
            InvalidReason::L3Truncated => "l3_truncated",
            InvalidReason::BadL3Header => "bad_l3_header",
            InvalidReason::Fragment => "fragment",
            InvalidReason::L4Truncated => "l4_truncated",
            InvalidReason::BadL4Header => "bad_l4_header",
            InvalidReason::PortZero => "port_zero",
            InvalidReason::IcmpUnsupported => "icmp_unsupported",
            InvalidReason::IcmpBadEmbedded => "icmp_bad_embedded",
            InvalidReason::RelatedNoConn => "related_no_conn",
            InvalidReason::InvalidNew => "invalid_new",
            InvalidReason::TcpFlags => "tcp_flags",
            InvalidReason::TcpWindow => "tcp_window",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_match_all_order() {
        for (i, r) in InvalidReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
