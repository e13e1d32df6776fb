//! OpenFlow 1.4+ properties (`ofp_prop_header`): a 16-bit type, a 16-bit
//! length that counts the header and value but not the padding, then zero
//! padding to a multiple of 8. Bundles, 1.4 ports, 1.5 groups and buckets,
//! and Nicira's `PACKET_IN2`/`RESUME`/`CT_FLUSH` all carry them.

use crate::error::OfpError;
use crate::wire::{self, Reader};

/// One property: its type and value (padding removed).
pub(crate) struct Prop<'a> {
    pub ty: u16,
    pub value: &'a [u8],
}

/// Read properties until `r` is empty. A length below 4 or past the end is
/// `bad_len` (the caller's error: `OFPBPC_BAD_LEN`, `OFPGMFC_BAD_BUCKET`...);
/// the padding of the last property may be missing, as OVS tolerates.
pub(crate) fn read_all<'a>(
    r: &mut Reader<'a>,
    bad_len: OfpError,
) -> Result<Vec<Prop<'a>>, OfpError> {
    let mut out = Vec::new();
    while !r.is_empty() {
        let ty = r.peek_u16().ok_or(bad_len)?;
        let len = usize::from(r.peek_u16_at(2).ok_or(bad_len)?);
        if len < 4 || len > r.remaining() {
            return Err(bad_len);
        }
        let body = r.bytes(len).map_err(|_| bad_len)?;
        let pad = (len.next_multiple_of(8) - len).min(r.remaining());
        r.skip(pad).map_err(|_| bad_len)?;
        out.push(Prop {
            ty,
            value: &body[4..],
        });
    }
    Ok(out)
}

/// Start a property; finish it with [`end`].
pub(crate) fn start(out: &mut Vec<u8>, ty: u16) -> usize {
    let at = out.len();
    wire::put_u16(out, ty);
    wire::put_u16(out, 0);
    at
}

/// Patch the length of the property started at `at` and pad to 8.
pub(crate) fn end(out: &mut Vec<u8>, at: usize) {
    let len = wire::len16(out, at);
    wire::patch_u16(out, at + 2, len);
    wire::pad8_from(out, at);
}

pub(crate) fn put(out: &mut Vec<u8>, ty: u16, value: &[u8]) {
    let at = start(out, ty);
    out.extend_from_slice(value);
    end(out, at);
}

pub(crate) fn put_u8(out: &mut Vec<u8>, ty: u16, v: u8) {
    put(out, ty, &[v]);
}

/// A 16-bit value padded to 4 bytes inside the length, as the OpenFlow
/// specs (and OVS's `ofpprop_put_be16`) write it.
pub(crate) fn put_u16(out: &mut Vec<u8>, ty: u16, v: u16) {
    let b = v.to_be_bytes();
    put(out, ty, &[b[0], b[1], 0, 0]);
}

/// Start a property holding nested properties: the header, then zeros to
/// 8-byte alignment (OVS's `ofpprop_start_nested`). Finish with [`end`].
pub(crate) fn start_nested(out: &mut Vec<u8>, ty: u16) -> usize {
    let at = start(out, ty);
    wire::put_zeros(out, 4);
    at
}

/// The nested properties of a property started with [`start_nested`].
pub(crate) fn nested<'a>(p: &Prop<'a>, bad_len: OfpError) -> Result<&'a [u8], OfpError> {
    p.value.get(4..).ok_or(bad_len)
}

pub(crate) fn put_u32(out: &mut Vec<u8>, ty: u16, v: u32) {
    put(out, ty, &v.to_be_bytes());
}

/// A 64-bit value after 4 zero bytes, so it is 8-aligned (OVS's
/// `ofpprop_put_be64`).
pub(crate) fn put_u64(out: &mut Vec<u8>, ty: u16, v: u64) {
    let at = start(out, ty);
    wire::put_zeros(out, 4);
    wire::put_u64(out, v);
    end(out, at);
}

/// A value of exactly `N` bytes.
pub(crate) fn exact<const N: usize>(p: &Prop<'_>, bad_len: OfpError) -> Result<[u8; N], OfpError> {
    p.value.try_into().map_err(|_| bad_len)
}

/// An 8-bit value: OVS accepts any payload of at least one byte.
pub(crate) fn get_u8(p: &Prop<'_>, bad_len: OfpError) -> Result<u8, OfpError> {
    p.value.first().copied().ok_or(bad_len)
}

/// A 16-bit value: the first two bytes of a payload of at least two (OVS
/// accepts both the padded and the unpadded form).
pub(crate) fn get_u16(p: &Prop<'_>, bad_len: OfpError) -> Result<u16, OfpError> {
    match p.value {
        [a, b, ..] => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(bad_len),
    }
}

pub(crate) fn get_u32(p: &Prop<'_>, bad_len: OfpError) -> Result<u32, OfpError> {
    Ok(u32::from_be_bytes(exact(p, bad_len)?))
}

/// A 64-bit value after 4 bytes of alignment.
pub(crate) fn get_u64(p: &Prop<'_>, bad_len: OfpError) -> Result<u64, OfpError> {
    let v: [u8; 12] = exact(p, bad_len)?;
    Ok(u64::from_be_bytes(v[4..].try_into().map_err(|_| bad_len)?))
}
