//! Big-endian reading and writing helpers shared by every codec.
//!
//! A [`Reader`] never panics: every read past the end returns the
//! [`OfpError`] the reader was made with (`OFPBRC_BAD_LEN` for a message
//! body, `OFPBAC_BAD_LEN` inside an action list, ...), which is how a
//! truncated structure turns into the right OpenFlow error.

use crate::error::OfpError;

#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    short: OfpError,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], short: OfpError) -> Self {
        Reader { buf, pos: 0, short }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn short_error(&self) -> OfpError {
        self.short
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], OfpError> {
        if self.remaining() < n {
            return Err(self.short);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], OfpError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, OfpError> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, OfpError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, OfpError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, OfpError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    pub fn skip(&mut self, n: usize) -> Result<(), OfpError> {
        self.bytes(n).map(|_| ())
    }

    /// Skip `n` padding bytes; they are not checked (OpenFlow says senders
    /// zero them, receivers ignore them).
    pub fn pad(&mut self, n: usize) -> Result<(), OfpError> {
        self.skip(n)
    }

    /// A sub-reader over the next `n` bytes, with its own short error.
    pub fn sub(&mut self, n: usize, short: OfpError) -> Result<Reader<'a>, OfpError> {
        Ok(Reader::new(self.bytes(n)?, short))
    }

    /// A peek at the next 16-bit word without consuming it.
    pub fn peek_u16(&self) -> Option<u16> {
        self.buf
            .get(self.pos..self.pos + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A peek at the 16-bit word `at` bytes ahead.
    pub fn peek_u16_at(&self, at: usize) -> Option<u16> {
        self.buf
            .get(self.pos + at..self.pos + at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub fn put_zeros(out: &mut Vec<u8>, n: usize) {
    out.resize(out.len() + n, 0);
}

/// Zero-pad `out` so that the bytes written since `start` are a multiple of 8.
pub fn pad8_from(out: &mut Vec<u8>, start: usize) {
    let len = out.len() - start;
    put_zeros(out, len.next_multiple_of(8) - len);
}

/// Overwrite the big-endian u16 at `at` (a length field written as 0 first).
pub fn patch_u16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// The length of `out[start..]` as a u16 length field. Message and
/// structure lengths are 16 bits on the wire; encoders of variable-length
/// parts call this once the part is written.
pub fn len16(out: &[u8], start: usize) -> u16 {
    u16::try_from(out.len() - start).unwrap_or(u16::MAX)
}

/// The longest prefix of `s` that fits in `max` bytes, cut at a character
/// boundary.
fn fit(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A fixed-size, NUL-terminated string field (port names, descriptions):
/// at most `n - 1` bytes of `s`, cut at a character boundary.
pub fn put_str(out: &mut Vec<u8>, s: &str, n: usize) {
    let b = fit(s, n.saturating_sub(1)).as_bytes();
    out.extend_from_slice(b);
    put_zeros(out, n - b.len());
}

/// Read a fixed-size string field: up to the first NUL, lossy UTF-8, and
/// no longer than [`put_str`] can write back (`n - 1` bytes).
pub fn get_str(r: &mut Reader<'_>, n: usize) -> Result<String, OfpError> {
    let b = r.bytes(n)?;
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = String::from_utf8_lossy(&b[..end]);
    Ok(fit(&s, n.saturating_sub(1)).to_string())
}
