//! The 18-byte header the generator puts at the start of every frame's L4
//! payload and the sink looks for: which flow, which packet of it, and when
//! it left.
//!
//! It sits right after the UDP, TCP or ICMP header, so it fits a 64-byte
//! UDP/IPv4 frame exactly (14 + 20 + 8 + 18 = 60 bytes + 4 bytes FCS). All
//! fields are big-endian and start at even offsets from the L4 header, so
//! the generator can fold them into the L4 checksum word by word:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 2 | magic `0x4e46` ("NF") |
//! | 2 | 4 | flow index, `0..MAX_FLOWS` |
//! | 6 | 4 | sequence number within the flow, from 0 (wraps) |
//! | 10 | 8 | transmit time, `CLOCK_MONOTONIC` nanoseconds |

/// First two bytes of the header.
pub const MAGIC: u16 = 0x4e46;
/// Bytes of the header.
pub const LEN: usize = 18;
/// Offset of the sequence number in the header.
pub const SEQ_OFF: usize = 6;
/// Offset of the timestamp in the header.
pub const TS_OFF: usize = 10;
/// Flows the generator may send; larger flow indexes mark a frame as not
/// ours (a cheap second magic).
pub const MAX_FLOWS: u32 = 1 << 20;

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub flow: u32,
    pub seq: u32,
    pub ts_ns: u64,
}

/// Write a header for `flow` with sequence number and timestamp 0 (the
/// template state; see [`super::template`]).
pub fn write_template(buf: &mut [u8], flow: u32) {
    buf[..2].copy_from_slice(&MAGIC.to_be_bytes());
    buf[2..6].copy_from_slice(&flow.to_be_bytes());
    buf[SEQ_OFF..SEQ_OFF + 4].fill(0);
    buf[TS_OFF..TS_OFF + 8].fill(0);
}

/// Decode the header at the start of `payload`, if it is one of ours.
#[inline]
pub fn read(payload: &[u8]) -> Option<Stamp> {
    let h: &[u8; LEN] = payload.get(..LEN)?.try_into().ok()?;
    if u16::from_be_bytes([h[0], h[1]]) != MAGIC {
        return None;
    }
    let flow = u32::from_be_bytes([h[2], h[3], h[4], h[5]]);
    if flow >= MAX_FLOWS {
        return None;
    }
    Some(Stamp {
        flow,
        seq: u32::from_be_bytes([h[6], h[7], h[8], h[9]]),
        ts_ns: u64::from_be_bytes([h[10], h[11], h[12], h[13], h[14], h[15], h[16], h[17]]),
    })
}

/// Extend a 32-bit sequence number to 64 bits, taking the value closest to
/// `near` (the highest extended number seen so far), so a flow may run past
/// 2^32 packets.
#[inline]
pub fn extend_seq(seq: u32, near: u64) -> u64 {
    let delta = seq.wrapping_sub(near as u32) as i32;
    let v = near as i64 + i64::from(delta);
    v.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut b = [0xaau8; 20];
        write_template(&mut b, 7);
        b[SEQ_OFF..SEQ_OFF + 4].copy_from_slice(&5u32.to_be_bytes());
        b[TS_OFF..TS_OFF + 8].copy_from_slice(&99u64.to_be_bytes());
        assert_eq!(
            read(&b),
            Some(Stamp {
                flow: 7,
                seq: 5,
                ts_ns: 99
            })
        );
        assert_eq!(read(&b[..17]), None, "short");
        b[0] = 0;
        assert_eq!(read(&b), None, "magic");
        write_template(&mut b, MAX_FLOWS);
        assert_eq!(read(&b), None, "flow index out of range");
    }

    #[test]
    fn sequence_extension_wraps() {
        assert_eq!(extend_seq(5, 0), 5);
        assert_eq!(extend_seq(3, 10), 3);
        let near = (1u64 << 32) - 2;
        assert_eq!(extend_seq(1, near), (1 << 32) + 1);
        assert_eq!(extend_seq(u32::MAX, (1 << 32) + 3), (1 << 32) - 1);
    }
}
