//! SCTP common header (RFC 9260) and its CRC32c checksum.
//!
//! On the path port rx ring -> parse -> flow key -> classifier/caches ->
//! actions -> port tx, SCTP only matters for its ports: they go into the flow
//! key like TCP/UDP ports and can be rewritten. Unlike TCP/UDP its checksum is
//! a CRC32c over the SCTP packet alone (no pseudo header), so address
//! rewrites leave it alone and port rewrites must recompute it — there is no
//! cheap incremental form.

use crate::{bytes, Error, Result};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const VTAG: usize = 4;
    pub const CHECKSUM: usize = 8;
    pub const CHUNKS: usize = 12;
}

/// Length of the SCTP common header.
pub const HEADER_LEN: usize = field::CHUNKS;
/// Byte offset of the CRC32c, for callers patching it in place.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM;

const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC32c (Castagnoli) of `data`, as SCTP and iSCSI define it.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc = CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// A read/write view of an SCTP packet (common header plus chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic unless
    /// [`check_len`](Self::check_len) succeeded.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Ensures the common header fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        bytes::u16_at(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Verification tag.
    pub fn verification_tag(&self) -> u32 {
        bytes::u32_at(self.buffer.as_ref(), field::VTAG)
    }

    /// Stored CRC32c value (the field is transmitted least significant byte
    /// first, RFC 9260 appendix B).
    pub fn checksum(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_le_bytes([b[8], b[9], b[10], b[11]])
    }

    /// The chunks after the common header.
    pub fn chunks(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::CHUNKS, usize::MAX)
    }

    /// CRC32c of the packet with the checksum field taken as zero.
    pub fn compute_checksum(&self) -> u32 {
        let b = self.buffer.as_ref();
        // crc32c(prefix ‖ 0000 ‖ suffix) without copying: feed the pieces.
        let mut crc = !0u32;
        let mut feed = |data: &[u8]| {
            for &x in data {
                crc = CRC32C_TABLE[((crc ^ u32::from(x)) & 0xff) as usize] ^ (crc >> 8);
            }
        };
        feed(&b[..field::CHECKSUM]);
        feed(&[0; 4]);
        feed(&b[field::CHUNKS..]);
        !crc
    }

    /// Does the stored CRC32c match?
    pub fn verify_checksum(&self) -> bool {
        self.compute_checksum() == self.checksum()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port (checksum not updated).
    pub fn set_src_port(&mut self, port: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port (checksum not updated).
    pub fn set_dst_port(&mut self, port: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the verification tag.
    pub fn set_verification_tag(&mut self, tag: u32) {
        bytes::set_u32(self.buffer.as_mut(), field::VTAG, tag);
    }

    /// Stores a CRC32c value.
    pub fn set_checksum(&mut self, crc: u32) {
        self.buffer.as_mut()[field::CHECKSUM..field::CHUNKS].copy_from_slice(&crc.to_le_bytes());
    }

    /// Recomputes and stores the CRC32c.
    pub fn fill_checksum(&mut self) {
        let c = self.compute_checksum();
        self.set_checksum(c);
    }

    /// Mutable chunks.
    pub fn chunks_mut(&mut self) -> &mut [u8] {
        bytes::clamped_mut(self.buffer.as_mut(), field::CHUNKS, usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
    }

    #[test]
    fn fill_and_verify() {
        let mut buf = vec![0u8; 16];
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_src_port(5000);
        p.set_dst_port(36412);
        p.set_verification_tag(0x1234_5678);
        p.chunks_mut().copy_from_slice(&[1, 0, 0, 4]);
        p.fill_checksum();
        assert!(p.verify_checksum());
        let stored = p.checksum();
        // Same as the CRC over a copy with the field zeroed.
        let mut z = buf.clone();
        z[8..12].fill(0);
        assert_eq!(crc32c(&z), stored);
        assert_eq!(&buf[8..12], &stored.to_le_bytes());
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (5000, 36412));
        assert_eq!(p.verification_tag(), 0x1234_5678);
        assert_eq!(
            Packet::new_checked(&buf[..11]).unwrap_err(),
            Error::Truncated
        );
    }
}
