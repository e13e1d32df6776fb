//! TCP window tracking: a port of OVS lib/conntrack-tcp.c, itself derived
//! from OpenBSD pf (`pf_test_state_tcp`, Guido van Rooij's sequence
//! tracking). Copyright (c) 2001 Daniel Hartmeier, 2002-2008 Henning
//! Brauer, 2012 Gleb Smirnoff, 2015-2016 Nicira, Inc.; BSD-licensed.
//!
//! All sequence arithmetic is modulo 2^32 (`wrapping_*` and the `seq_*`
//! comparisons), exactly like the C macros.

use crate::conn::Update;
use crate::timeouts::Tm;
use crate::tuple::TcpSeg;

pub(crate) const TCP_FIN: u16 = 0x001;
pub(crate) const TCP_SYN: u16 = 0x002;
pub(crate) const TCP_RST: u16 = 0x004;
pub(crate) const TCP_PSH: u16 = 0x008;
pub(crate) const TCP_ACK: u16 = 0x010;
pub(crate) const TCP_URG: u16 = 0x020;

const TCP_MAX_WSCALE: u8 = 14;
/// The peer announced window scaling.
pub(crate) const CT_WSCALE_FLAG: u8 = 0x80;
/// Connection picked up mid-stream: scaling unknown, be liberal.
pub(crate) const CT_WSCALE_UNKNOWN: u8 = 0x40;
pub(crate) const CT_WSCALE_MASK: u8 = 0x0f;

/// "1500 is an arbitrary fudge factor".
const MAXACKWINDOW: u32 = 0xffff + 1500;

const TCPOPT_EOL: u8 = 0;
const TCPOPT_NOP: u8 = 1;
const TCPOPT_WINDOW: u8 = 3;

/// TCP states as OVS reports them (`CT_DPIF_TCP_STATES` in
/// lib/ct-dpif.h). The userspace tracker only ever uses `Closed`,
/// `SynSent`, `Established`, `Closing`, `FinWait2` and `TimeWait`; the
/// others exist so values and names line up with OVS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum TcpState {
    #[default]
    Closed = 0,
    Listen,
    SynSent,
    SynRecv,
    Established,
    CloseWait,
    FinWait1,
    Closing,
    LastAck,
    FinWait2,
    TimeWait,
}

impl TcpState {
    /// The name `ct_dpif_tcp_state_string` prints.
    pub fn name(self) -> &'static str {
        match self {
            TcpState::Closed => "CLOSED",
            TcpState::Listen => "LISTEN",
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::FinWait1 => "FIN_WAIT_1",
            TcpState::Closing => "CLOSING",
            TcpState::LastAck => "LAST_ACK",
            TcpState::FinWait2 => "FIN_WAIT_2",
            TcpState::TimeWait => "TIME_WAIT",
        }
    }

    /// `coalesce_tcp_state` (ct-dpif.c): the non-verbose dump shows the
    /// kernel's view, FIN_WAIT_2 as TIME_WAIT and SYN_RECV as ESTABLISHED.
    pub fn coalesced(self) -> TcpState {
        match self {
            TcpState::FinWait2 => TcpState::TimeWait,
            TcpState::SynRecv => TcpState::Established,
            s => s,
        }
    }
}

/// `struct tcp_peer`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpPeer {
    /// Max sequence number sent.
    pub seqlo: u32,
    /// Max the other end ACKd + win.
    pub seqhi: u32,
    /// Largest window (pre scaling).
    pub max_win: u16,
    /// Window scaling factor + `CT_WSCALE_FLAG` / `CT_WSCALE_UNKNOWN`.
    pub wscale: u8,
    pub state: TcpState,
}

/// `struct conn_tcp`: peer 0 is the originator, peer 1 the responder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpConn {
    pub peer: [TcpPeer; 2],
}

fn seq_geq(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}
fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `tcp_invalid_flags`: "pf does this in pf_normalize_tcp(), and it is
/// called only if scrub is enabled. We're not scrubbing, but this check
/// seems reasonable."
pub(crate) fn invalid_flags(flags: u16) -> bool {
    if flags & TCP_SYN != 0 {
        if flags & (TCP_RST | TCP_FIN) != 0 {
            return true;
        }
    } else if flags & (TCP_ACK | TCP_RST) == 0 {
        // Illegal packet.
        return true;
    }
    // FIN, PSH and URG are only valid with ACK.
    flags & TCP_ACK == 0 && flags & (TCP_FIN | TCP_PSH | TCP_URG) != 0
}

/// `tcp_get_wscale` over the option bytes (after the 20-byte header).
pub(crate) fn get_wscale(opts: &[u8]) -> u8 {
    let mut i = 0usize;
    let mut wscale = 0u8;
    // `len >= 3` in OVS: a window option needs kind, length and shift.
    while opts.len().saturating_sub(i) >= 3 {
        match opts[i] {
            TCPOPT_EOL => return wscale,
            TCPOPT_NOP => i += 1,
            kind => {
                if kind == TCPOPT_WINDOW {
                    wscale = opts[i + 2].min(TCP_MAX_WSCALE) | CT_WSCALE_FLAG;
                }
                let optlen = usize::from(opts[i + 1]).max(2);
                i += optlen;
            }
        }
    }
    wscale
}

/// `tcp_valid_new`: "A syn+ack is not allowed to create a connection. We
/// want to allow totally new connections (syn) or already established, not
/// partially open (syn+ack)."
pub(crate) fn valid_new(seg: &TcpSeg) -> bool {
    let synack = seg.flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK;
    !invalid_flags(seg.flags) && !synack
}

/// The timer `tcp_conn_update` sets for a connection whose peers are in
/// states `a` and `b` (symmetric).
fn timer(a: TcpState, b: TcpState) -> Tm {
    if a >= TcpState::FinWait2 && b >= TcpState::FinWait2 {
        Tm::TcpClosed
    } else if a >= TcpState::Closing && b >= TcpState::Closing {
        Tm::TcpFinWait
    } else if a < TcpState::Established || b < TcpState::Established {
        Tm::TcpOpening
    } else if a >= TcpState::Closing || b >= TcpState::Closing {
        Tm::TcpClosing
    } else {
        Tm::TcpEstablished
    }
}

impl TcpConn {
    /// The timer the peers' states call for (what traffic the tracker did
    /// not see refreshes: see [`TcpConn::kernel_flags`]).
    pub(crate) fn timer(&self) -> Tm {
        timer(self.peer[0].state, self.peer[1].state)
    }

    /// Both peers have sent a FIN (or a RST closed the connection).
    pub(crate) fn ended(&self) -> bool {
        self.peer.iter().all(|p| p.state >= TcpState::Closing)
    }

    /// Advance the peers' states from the TCP flags a kernel engine saw
    /// and the tracker did not: `seen[d]` is the OR of the flags of every
    /// segment forwarded in direction `d` (0: original) since the
    /// connection's entries were installed. An OR has no order, so this
    /// assumes the order every TCP exchange has: SYN before ACK, and a
    /// FIN each way (in these flags or earlier ones) means both were
    /// acknowledged (the last ACK, if it comes after the entries went,
    /// reaches the tracker). Idempotent: the
    /// same `seen` twice changes nothing the second time. Returns whether
    /// a state changed.
    pub(crate) fn kernel_flags(&mut self, seen: [u16; 2]) -> bool {
        let before = self.peer.map(|p| p.state);
        for (d, f) in seen.iter().enumerate() {
            if f & TCP_SYN != 0 && self.peer[d].state < TcpState::SynSent {
                self.peer[d].state = TcpState::SynSent;
            }
        }
        for (d, f) in seen.iter().enumerate() {
            if f & TCP_ACK != 0 && self.peer[1 - d].state == TcpState::SynSent {
                self.peer[1 - d].state = TcpState::Established;
            }
        }
        for (d, f) in seen.iter().enumerate() {
            if f & TCP_FIN != 0 && self.peer[d].state < TcpState::Closing {
                self.peer[d].state = TcpState::Closing;
            }
        }
        if self.ended() {
            for p in &mut self.peer {
                if p.state == TcpState::Closing {
                    p.state = TcpState::FinWait2;
                }
            }
        }
        before != self.peer.map(|p| p.state)
    }

    /// `tcp_new_conn`. The caller sets the expiration to
    /// `CT_TM_TCP_FIRST_PACKET`.
    pub(crate) fn new(seg: &TcpSeg) -> TcpConn {
        let mut c = TcpConn::default();
        let (src, dst) = c.peer.split_at_mut(1);
        let (src, dst) = (&mut src[0], &mut dst[0]);
        src.seqlo = seg.seq;
        src.seqhi = seg.seq.wrapping_add(seg.payload_len).wrapping_add(1);
        if seg.flags & TCP_SYN != 0 {
            src.seqhi = src.seqhi.wrapping_add(1);
            src.wscale = seg.wscale;
        } else {
            src.wscale = CT_WSCALE_UNKNOWN;
            dst.wscale = CT_WSCALE_UNKNOWN;
        }
        src.max_win = seg.win.max(1);
        if src.wscale & CT_WSCALE_MASK != 0 {
            // Remove scale factor from initial window.
            let sws = src.wscale & CT_WSCALE_MASK;
            src.max_win = u32::from(src.max_win).div_ceil(1 << sws) as u16;
        }
        if seg.flags & TCP_FIN != 0 {
            src.seqhi = src.seqhi.wrapping_add(1);
        }
        dst.seqhi = 1;
        dst.max_win = 1;
        src.state = TcpState::SynSent;
        dst.state = TcpState::Closed;
        c
    }

    /// `tcp_conn_update`: one segment of an existing connection, `reply`
    /// when it travels responder -> originator. `seq_chk` is
    /// `conntrack_get_tcp_seq_chk` (`dpctl/ct-enable-tcp-seq-chk`).
    pub(crate) fn update(&mut self, seg: &TcpSeg, reply: bool, seq_chk: bool) -> Update {
        let flags = seg.flags;
        if invalid_flags(flags) {
            return Update::InvalidFlags;
        }
        let (a, b) = self.peer.split_at_mut(1);
        // `src` sent the segment, `dst` should receive it.
        let (src, dst) = if reply {
            (&mut b[0], &mut a[0])
        } else {
            (&mut a[0], &mut b[0])
        };

        if flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
            if dst.state >= TcpState::FinWait2 && src.state >= TcpState::FinWait2 {
                // A new SYN on a closed connection replaces it.
                src.state = TcpState::Closed;
                dst.state = TcpState::Closed;
                return Update::New;
            } else if src.state <= TcpState::SynSent {
                // Retransmitted SYN.
                src.state = TcpState::SynSent;
                return Update::ValidNew(Some(Tm::TcpFirstPacket));
            }
        }

        let mut sws: u8 = 0;
        let mut dws: u8 = 0;
        if src.wscale & CT_WSCALE_FLAG != 0
            && dst.wscale & CT_WSCALE_FLAG != 0
            && flags & TCP_SYN == 0
        {
            sws = src.wscale & CT_WSCALE_MASK;
            dws = dst.wscale & CT_WSCALE_MASK;
        } else if src.wscale & CT_WSCALE_UNKNOWN != 0
            && dst.wscale & CT_WSCALE_UNKNOWN != 0
            && flags & TCP_SYN == 0
        {
            sws = TCP_MAX_WSCALE;
            dws = TCP_MAX_WSCALE;
        }

        let mut win = seg.win;
        let orig_seq = seg.seq;
        let mut seq = seg.seq;
        let mut ack = seg.ack;
        let mut end;
        let mut check_ackskew = true;
        if src.state < TcpState::SynSent {
            // First packet from this end. Set its state.
            end = seq.wrapping_add(seg.payload_len);
            if flags & TCP_SYN != 0 {
                end = end.wrapping_add(1);
                if dst.wscale & CT_WSCALE_FLAG != 0 {
                    src.wscale = seg.wscale;
                    if src.wscale & CT_WSCALE_FLAG != 0 {
                        // Remove scale factor from initial window.
                        sws = src.wscale & CT_WSCALE_MASK;
                        win = u32::from(win).div_ceil(1 << sws) as u16;
                        dws = dst.wscale & CT_WSCALE_MASK;
                    } else {
                        // Fixup other window; truncates to 16 bits like C.
                        dst.max_win =
                            (u32::from(dst.max_win) << (dst.wscale & CT_WSCALE_MASK)) as u16;
                        // In case of a retrans SYN|ACK.
                        dst.wscale = 0;
                    }
                }
            }
            if flags & TCP_FIN != 0 {
                end = end.wrapping_add(1);
            }
            src.seqlo = seq;
            src.state = TcpState::SynSent;
            // May need to slide the window (seqhi may have been set by the
            // crappy stack check or if we picked up the connection after
            // establishment).
            let span = (u32::from(dst.max_win) << dws).max(1);
            if src.seqhi == 1 || seq_geq(end.wrapping_add(span), src.seqhi) {
                src.seqhi = end.wrapping_add(span);
                // Picking up a new or already established connection: more
                // permissive ackskew checking.
                check_ackskew = false;
            }
            if win > src.max_win {
                src.max_win = win;
            }
        } else {
            end = seq.wrapping_add(seg.payload_len);
            if flags & TCP_SYN != 0 {
                end = end.wrapping_add(1);
            }
            if flags & TCP_FIN != 0 {
                end = end.wrapping_add(1);
            }
        }

        if flags & TCP_ACK == 0 {
            // Let it pass through the ack skew check.
            ack = dst.seqlo;
        } else if ack == 0 && flags & (TCP_ACK | TCP_RST) == (TCP_ACK | TCP_RST) {
            // Broken TCP stacks do not set ack on RST|ACK.
            ack = dst.seqlo;
        }

        if seq == end {
            // Ease sequencing restrictions on no data packets.
            seq = src.seqlo;
            end = seq;
        }

        let ackskew: i64 = if check_ackskew {
            i64::from(dst.seqlo.wrapping_sub(ack) as i32)
        } else {
            0
        };
        let dst_win = u32::from(dst.max_win) << dws;
        let scaled_win = u32::from(win) << sws;
        let in_window = seq_geq(src.seqhi, end)
            // Last octet inside other's window space.
            && seq_geq(seq, src.seqlo.wrapping_sub(dst_win))
            // Retrans: not more than one window back.
            && ackskew >= -i64::from(MAXACKWINDOW)
            // Acking not more than one reassembled fragment backwards.
            && ackskew <= i64::from(MAXACKWINDOW) << sws
            // Acking not more than one window forward; require an exact/+1
            // sequence match on resets when possible.
            && (flags & TCP_RST == 0
                || orig_seq == src.seqlo
                || orig_seq == src.seqlo.wrapping_add(1)
                || orig_seq.wrapping_add(1) == src.seqlo);

        if in_window || !seq_chk {
            if src.max_win < win {
                src.max_win = win;
            }
            // Synchronize sequencing.
            if seq_gt(end, src.seqlo) {
                src.seqlo = end;
            }
            // Slide the window of what the other end can send.
            if seq_geq(ack.wrapping_add(scaled_win), dst.seqhi) {
                dst.seqhi = ack.wrapping_add(scaled_win.max(1));
            }
            // Update states.
            if flags & TCP_SYN != 0 && src.state < TcpState::SynSent {
                src.state = TcpState::SynSent;
            }
            if flags & TCP_FIN != 0 && src.state < TcpState::Closing {
                src.state = TcpState::Closing;
            }
            if flags & TCP_ACK != 0 {
                if dst.state == TcpState::SynSent {
                    dst.state = TcpState::Established;
                } else if dst.state == TcpState::Closing {
                    dst.state = TcpState::FinWait2;
                }
            }
            if flags & TCP_RST != 0 {
                src.state = TcpState::TimeWait;
                dst.state = TcpState::TimeWait;
            }
            Update::Valid(Some(timer(src.state, dst.state)))
        } else if (dst.state < TcpState::SynSent
            || dst.state >= TcpState::FinWait2
            || src.state >= TcpState::FinWait2)
            // Within a window forward of the originating packet.
            && seq_geq(src.seqhi.wrapping_add(MAXACKWINDOW), end)
            // Within a window backward of the originating packet.
            && seq_geq(seq, src.seqlo.wrapping_sub(MAXACKWINDOW))
        {
            // pf's loose path: shotgunned SYNs, streams picked up after a
            // state flush, funky packets right after close. The timeout is
            // deliberately not refreshed so floods caught here age out.
            if src.max_win < win {
                src.max_win = win;
            }
            if seq_gt(end, src.seqlo) {
                src.seqlo = end;
            }
            if seq_geq(ack.wrapping_add(scaled_win), dst.seqhi) {
                dst.seqhi = ack.wrapping_add(scaled_win.max(1));
            }
            if flags & TCP_FIN != 0 && src.state < TcpState::Closing {
                src.state = TcpState::Closing;
            }
            if flags & TCP_RST != 0 {
                src.state = TcpState::TimeWait;
                dst.state = TcpState::TimeWait;
            }
            Update::Valid(None)
        } else {
            Update::InvalidWindow
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert!(!invalid_flags(TCP_SYN));
        assert!(!invalid_flags(TCP_SYN | TCP_ACK));
        assert!(!invalid_flags(TCP_ACK));
        assert!(!invalid_flags(TCP_RST));
        assert!(!invalid_flags(TCP_ACK | TCP_FIN | TCP_PSH));
        assert!(invalid_flags(0));
        assert!(invalid_flags(TCP_SYN | TCP_FIN));
        assert!(invalid_flags(TCP_SYN | TCP_RST));
        assert!(invalid_flags(TCP_FIN));
        assert!(invalid_flags(TCP_RST | TCP_FIN));
        assert!(invalid_flags(TCP_SYN | TCP_URG));
    }

    #[test]
    fn wscale_option() {
        // MSS, NOP, window scale 7.
        assert_eq!(get_wscale(&[2, 4, 5, 0xb4, 1, 3, 3, 7]), 7 | CT_WSCALE_FLAG);
        // Clamped to 14.
        assert_eq!(get_wscale(&[3, 3, 20, 0]), 14 | CT_WSCALE_FLAG);
        assert_eq!(get_wscale(&[0, 3, 3, 7]), 0);
        // Zero-length option must not loop forever.
        assert_eq!(get_wscale(&[9, 0, 9, 0, 9, 0]), 0);
        assert_eq!(get_wscale(&[]), 0);
    }

    fn syn_sent() -> TcpConn {
        let mut c = TcpConn::default();
        c.peer[0].state = TcpState::SynSent;
        c
    }

    #[test]
    fn kernel_flags_follow_a_whole_exchange() {
        let mut c = syn_sent();
        // SYN-ACK back, ACK and data forth: both established.
        assert!(c.kernel_flags([TCP_ACK | TCP_PSH, TCP_SYN | TCP_ACK]));
        assert_eq!(c.peer.map(|p| p.state), [TcpState::Established; 2]);
        assert_eq!(c.timer(), Tm::TcpEstablished);
        assert!(!c.ended());
        // The same flags again: nothing new.
        assert!(!c.kernel_flags([TCP_ACK | TCP_PSH, TCP_SYN | TCP_ACK]));
        // The server closes first.
        assert!(c.kernel_flags([TCP_ACK, TCP_SYN | TCP_ACK | TCP_FIN]));
        assert_eq!(
            c.peer.map(|p| p.state),
            [TcpState::Established, TcpState::Closing]
        );
        assert_eq!(c.timer(), Tm::TcpClosing);
        // Then the client: both FIN_WAIT_2 (dumped as TIME_WAIT).
        assert!(c.kernel_flags([TCP_ACK | TCP_FIN, TCP_SYN | TCP_ACK | TCP_FIN]));
        assert_eq!(c.peer.map(|p| p.state), [TcpState::FinWait2; 2]);
        assert_eq!(c.timer(), Tm::TcpClosed);
        assert!(c.ended());
    }

    #[test]
    fn kernel_flags_all_at_once_and_half_open() {
        // Everything within one sync.
        let mut c = syn_sent();
        c.kernel_flags([TCP_ACK | TCP_FIN, TCP_SYN | TCP_ACK | TCP_FIN]);
        assert_eq!(c.peer.map(|p| p.state), [TcpState::FinWait2; 2]);
        // No SYN-ACK yet: the responder has not answered, nothing moves
        // but what the originator's own segments say.
        let mut c = syn_sent();
        assert!(!c.kernel_flags([0, 0]));
        c.kernel_flags([TCP_ACK, 0]);
        assert_eq!(
            c.peer.map(|p| p.state),
            [TcpState::SynSent, TcpState::Closed]
        );
        assert_eq!(c.timer(), Tm::TcpOpening);
    }

    #[test]
    fn coalesce() {
        assert_eq!(TcpState::FinWait2.coalesced(), TcpState::TimeWait);
        assert_eq!(TcpState::SynRecv.coalesced(), TcpState::Established);
        assert_eq!(TcpState::Closing.coalesced(), TcpState::Closing);
    }
}
