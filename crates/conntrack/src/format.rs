//! Dump entries in the text format of `ovs-appctl dpctl/dump-conntrack`
//! (`ct_dpif_format_entry` and helpers in lib/ct-dpif.c).

use std::fmt::{self, Write as _};

use crate::tcp::{TcpState, CT_WSCALE_FLAG, CT_WSCALE_UNKNOWN};
use crate::tuple::Tuple;

/// Per-direction counters (`struct ct_dpif_counters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
}

/// `CT_DPIF_TCPF_WINDOW_SCALE`.
pub const TCPF_WINDOW_SCALE: u8 = 0x01;
/// `CT_DPIF_TCPF_BE_LIBERAL`.
pub const TCPF_BE_LIBERAL: u8 = 0x08;

/// TCP protocol info (`tcp_conn_get_protoinfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpInfo {
    pub state_orig: TcpState,
    pub state_reply: TcpState,
    pub wscale_orig: u8,
    pub wscale_reply: u8,
    /// `TCPF_*` bits.
    pub flags_orig: u8,
    pub flags_reply: u8,
}

impl TcpInfo {
    /// `tcp_peer_to_protoinfo_flags`.
    pub(crate) fn peer_flags(wscale: u8) -> u8 {
        let mut f = 0;
        if wscale & CT_WSCALE_FLAG != 0 {
            f |= TCPF_WINDOW_SCALE;
        }
        if wscale & CT_WSCALE_UNKNOWN != 0 {
            f |= TCPF_BE_LIBERAL;
        }
        f
    }
}

/// One connection as dumped (`struct ct_dpif_entry`, filled like
/// `conn_to_ct_dpif_entry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryView {
    /// Per-connection id, assigned in creation order starting at 1. (OVS
    /// userspace leaves it 0; the kernel datapath has real ids.)
    pub id: u32,
    pub zone: u16,
    pub mark: u32,
    pub label: u128,
    /// Original-direction tuple; for ICMP `sport`/`dport` are type/code.
    pub orig: Tuple,
    /// Reply-direction tuple.
    pub reply: Tuple,
    /// ICMP/ICMPv6 echo identifier of the original tuple, `None` for
    /// other protocols.
    pub icmp_id: Option<u16>,
    /// ICMP/ICMPv6 echo identifier of the reply tuple: differs from
    /// `icmp_id` when SNAT translated the id.
    pub reply_icmp_id: Option<u16>,
    /// TCP state, `None` for other protocols (OVS prints no protoinfo then).
    pub tcp: Option<TcpInfo>,
    /// Whole seconds until expiry, as `conn_to_ct_dpif_entry` computes it.
    pub timeout: u64,
    pub counters_orig: Counters,
    pub counters_reply: Counters,
}

/// `ct_dpif_format_ipproto`.
pub(crate) fn proto_name(p: u8) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        58 => "icmpv6",
        6 => "tcp",
        17 => "udp",
        132 => "sctp",
        136 => "udplite",
        33 => "dccp",
        2 => "igmp",
        _ => return None,
    })
}

/// `ct_dpif_format_tuple`. Rust's `Ipv6Addr` display is RFC 5952, like
/// `inet_ntop` (except for the deprecated IPv4-compatible `::a.b.c.d`
/// form, which glibc prints dotted and Rust as hex).
fn format_tuple(s: &mut String, t: &Tuple, icmp_id: Option<u16>, c: Option<&Counters>) {
    let _ = write!(s, "src={},dst={}", t.src, t.dst);
    let _ = match icmp_id {
        Some(id) => write!(s, ",id={id},type={},code={}", t.sport, t.dport),
        None => write!(s, ",sport={},dport={}", t.sport, t.dport),
    };
    // ct_dpif_format_counters: only when non-zero.
    if let Some(c) = c {
        if c.packets != 0 || c.bytes != 0 {
            let _ = write!(s, ",packets={},bytes={}", c.packets, c.bytes);
        }
    }
}

/// `format_flags` with '|' for the TCP protoinfo flags.
fn format_tcp_flags(s: &mut String, name: &str, flags: u8) {
    s.push_str(name);
    s.push('=');
    if flags == 0 {
        s.push('0');
        return;
    }
    let mut first = true;
    for (bit, n) in [
        (0x01, "WINDOW_SCALE"),
        (0x02, "SACK_PERM"),
        (0x04, "CLOSE_INIT"),
        (0x08, "BE_LIBERAL"),
        (0x10, "DATA_UNACKNOWLEDGED"),
        (0x20, "MAXACK_SET"),
    ] {
        if flags & bit != 0 {
            if !first {
                s.push('|');
            }
            s.push_str(n);
            first = false;
        }
    }
}

impl EntryView {
    /// One line of `dpctl/dump-conntrack`: `verbose` is `-m`, `print_stats`
    /// is `-s`. Field order is `ct_dpif_format_entry`'s: proto,
    /// orig (+counters), reply (+counters), then when applicable id, zone,
    /// status, timeout, mark, labels, protoinfo. Userspace OVS has no
    /// timestamps and status 0, so `-s` never prints `start=` and `-m`
    /// prints `status=0`.
    pub fn format(&self, verbose: bool, print_stats: bool) -> String {
        let mut s = String::with_capacity(160);
        match proto_name(self.orig.proto) {
            Some(n) => s.push_str(n),
            None => {
                let _ = write!(s, "{}", self.orig.proto);
            }
        }
        s.push_str(",orig=(");
        let stats = |c| if print_stats { Some(c) } else { None };
        format_tuple(&mut s, &self.orig, self.icmp_id, stats(&self.counters_orig));
        s.push_str("),reply=(");
        format_tuple(
            &mut s,
            &self.reply,
            self.reply_icmp_id,
            stats(&self.counters_reply),
        );
        s.push(')');
        if verbose {
            let _ = write!(s, ",id={}", self.id);
        }
        if self.zone != 0 {
            let _ = write!(s, ",zone={}", self.zone);
        }
        if verbose {
            s.push_str(",status=0");
        }
        if print_stats {
            let _ = write!(s, ",timeout={}", self.timeout);
        }
        if self.mark != 0 {
            let _ = write!(s, ",mark={}", self.mark);
        }
        if self.label != 0 {
            // ds_put_hex of the big-endian value: "0x" + hex, no leading zeros.
            let _ = write!(s, ",labels={:#x}", self.label);
        }
        if let Some(t) = &self.tcp {
            s.push_str(",protoinfo=(");
            if verbose {
                let _ = write!(
                    s,
                    "state_orig={},state_reply={}",
                    t.state_orig.name(),
                    t.state_reply.name()
                );
                if t.wscale_orig != 0 || t.wscale_reply != 0 {
                    let _ = write!(
                        s,
                        ",wscale_orig={},wscale_reply={}",
                        t.wscale_orig, t.wscale_reply
                    );
                }
                format_tcp_flags(&mut s, ",flags_orig", t.flags_orig);
                format_tcp_flags(&mut s, ",flags_reply", t.flags_reply);
            } else {
                // "We keep two separate tcp states, but we print just one."
                let st = t.state_orig.max(t.state_reply).coalesced();
                let _ = write!(s, "state={}", st.name());
            }
            s.push(')');
        }
        s
    }
}

impl fmt::Display for EntryView {
    /// The plain `dpctl/dump-conntrack` line (no `-m`, no `-s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.format(false, false))
    }
}
