//! Run-time values of the interpreter: fixed-width bit vectors (`bit<W>`,
//! `int<W>`, W <= 128, stored inline in a `u128`: no per-packet heap for
//! scalars), booleans, compile-time integers, errors/enums and the
//! aggregates (headers, structs, stacks, tuples) a packet's headers and
//! metadata live in. A scalar remembers where it came from ([`Src`]) so
//! that reading it records the packet bits the decision depended on in the
//! [`crate::trace::Trace`].

use num_bigint::{BigInt, Sign};
use num_traits::{Signed, ToPrimitive, Zero};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

/// Widest `bit<W>` / `int<W>` the interpreter runs.
pub const MAX_WIDTH: u32 = 128;

/// Where a scalar's current value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Src {
    /// Computed, a constant, action data: reading it records nothing.
    #[default]
    None,
    /// Still holds the bits extracted at this bit offset of the packet as
    /// received (length = the value's width).
    Packet(u32),
    /// The packet's input port.
    InPort,
    /// Per-packet state the cache cannot match on; the tag is the
    /// `uncacheable` reason.
    Tainted(&'static str),
    /// A checksum the program computed over packet data: writing it into
    /// the packet is fine (the datapath recomputes checksums), deciding
    /// on it is not cacheable (`p4-checksum-verify`).
    Checksum,
}

/// A `bit<W>` or `int<W>` value (two's complement in the low `width` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bits {
    pub width: u32,
    pub signed: bool,
    pub v: u128,
    pub src: Src,
}

/// Mask of the low `w` bits.
pub fn mask(w: u32) -> u128 {
    if w >= 128 {
        u128::MAX
    } else {
        (1u128 << w) - 1
    }
}

impl Bits {
    pub fn new(width: u32, signed: bool, v: u128) -> Bits {
        Bits {
            width,
            signed,
            v: v & mask(width),
            src: Src::None,
        }
    }

    pub fn unsigned(width: u32, v: u128) -> Bits {
        Bits::new(width, false, v)
    }

    /// The value as a signed integer (sign-extended from `width`).
    pub fn as_i128(&self) -> i128 {
        if self.signed && self.width > 0 && self.width < 128 {
            let sign = 1u128 << (self.width - 1);
            if self.v & sign != 0 {
                return (self.v | !mask(self.width)) as i128;
            }
        }
        self.v as i128
    }

    /// The value as an unbounded integer (signed types sign-extended).
    pub fn to_bigint(&self) -> BigInt {
        if self.signed {
            BigInt::from(self.as_i128())
        } else {
            BigInt::from(self.v)
        }
    }

    /// `value` wrapped into `width` bits.
    pub fn from_bigint(width: u32, signed: bool, value: &BigInt) -> Bits {
        let m = BigInt::from(1u8) << width;
        let mut r = value % &m;
        if r.is_negative() {
            r += &m;
        }
        let v = r.to_u128().unwrap_or(0);
        Bits::new(width, signed, v)
    }
}

/// A header instance.
#[derive(Clone, Debug, PartialEq)]
pub struct HeaderVal {
    /// The header type's name.
    pub ty: Arc<str>,
    pub valid: bool,
    /// Field values in declaration order.
    pub fields: Vec<Value>,
    /// Field names in declaration order (shared with the type).
    pub names: Arc<[String]>,
}

/// A `varbit<max>` value: `len` bits, MSB first in `bytes`.
#[derive(Clone, Debug, PartialEq)]
pub struct VarbitVal {
    pub max: u32,
    pub len: u32,
    pub bytes: Vec<u8>,
    pub src: Src,
}

impl VarbitVal {
    pub fn bit(&self, i: u32) -> u8 {
        (self.bytes[(i / 8) as usize] >> (7 - (i % 8))) & 1
    }
}

/// A header stack.
#[derive(Clone, Debug, PartialEq)]
pub struct StackVal {
    pub elems: Vec<Value>,
    /// `nextIndex`.
    pub next: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Bits(Bits),
    Varbit(Box<VarbitVal>),
    /// Compile-time `int` (literals without width).
    Int(BigInt),
    Bool(bool, Src),
    Str(Arc<str>),
    /// `error.X`.
    Error(Arc<str>, Src),
    /// `E.X` of a non-serializable enum (type, member).
    Enum(Arc<str>, Arc<str>),
    MatchKind(Arc<str>),
    Header(Box<HeaderVal>),
    /// A struct or header union: type name, field names, values.
    Struct(Arc<str>, Arc<[String]>, Vec<Value>),
    Stack(Box<StackVal>),
    Tuple(Vec<Value>),
    /// A reference to an extern / parser / control / table instance (by
    /// index in the pipeline's instance list).
    Instance(usize),
    /// Result of `t.apply()`: hit, miss, action name run.
    ApplyResult {
        hit: bool,
        /// Index of the action run in the program's action list.
        action: usize,
    },
    Void,
}

impl Value {
    pub fn bits(width: u32, v: u128) -> Value {
        Value::Bits(Bits::unsigned(width, v))
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bits(b) if b.signed => "int<W>",
            Value::Bits(_) => "bit<W>",
            Value::Varbit(_) => "varbit<W>",
            Value::Int(_) => "int",
            Value::Bool(..) => "bool",
            Value::Str(_) => "string",
            Value::Error(..) => "error",
            Value::Enum(..) => "enum",
            Value::MatchKind(_) => "match_kind",
            Value::Header(_) => "header",
            Value::Struct(..) => "struct",
            Value::Stack(_) => "header stack",
            Value::Tuple(_) => "tuple",
            Value::Instance(_) => "instance",
            Value::ApplyResult { .. } => "table apply result",
            Value::Void => "void",
        }
    }

    /// `*dst = self.clone()`, reusing `dst`'s field vectors when it is a
    /// header or struct of the same shape (a block's `in` metadata is
    /// copied per packet into the copy the last packet left: no
    /// allocation).
    pub fn clone_into_value(&self, dst: &mut Value) {
        match (self, &mut *dst) {
            (Value::Struct(n, names, vals), Value::Struct(dn, dnames, dvals))
                if dvals.len() == vals.len() =>
            {
                if !Arc::ptr_eq(n, dn) {
                    *dn = n.clone();
                }
                if !Arc::ptr_eq(names, dnames) {
                    *dnames = names.clone();
                }
                for (s, d) in vals.iter().zip(dvals.iter_mut()) {
                    s.clone_into_value(d);
                }
            }
            (Value::Header(h), Value::Header(dh)) if dh.fields.len() == h.fields.len() => {
                if !Arc::ptr_eq(&h.ty, &dh.ty) {
                    dh.ty = h.ty.clone();
                }
                if !Arc::ptr_eq(&h.names, &dh.names) {
                    dh.names = h.names.clone();
                }
                dh.valid = h.valid;
                for (s, d) in h.fields.iter().zip(dh.fields.iter_mut()) {
                    s.clone_into_value(d);
                }
            }
            (Value::Bits(b), Value::Bits(d)) => *d = *b,
            _ => *dst = self.clone(),
        }
    }

    /// Field of a header/struct by name.
    pub fn field(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Header(h) => h
                .names
                .iter()
                .position(|n| name_eq(n, name))
                .map(|i| &h.fields[i]),
            Value::Struct(_, names, vals) => names
                .iter()
                .position(|n| name_eq(n, name))
                .map(|i| &vals[i]),
            _ => None,
        }
    }

    pub fn field_mut(&mut self, name: &str) -> Option<&mut Value> {
        match self {
            Value::Header(h) => match h.names.iter().position(|n| name_eq(n, name)) {
                Some(i) => h.fields.get_mut(i),
                None => None,
            },
            Value::Struct(_, names, vals) => match names.iter().position(|n| name_eq(n, name)) {
                Some(i) => vals.get_mut(i),
                None => None,
            },
            _ => None,
        }
    }

    /// Total width in bits of a value made of bits (headers, structs of
    /// bits, bits, bools count 1).
    pub fn bit_width(&self) -> u32 {
        match self {
            Value::Bits(b) => b.width,
            Value::Varbit(v) => v.len,
            Value::Bool(..) => 1,
            Value::Header(h) => h.fields.iter().map(|f| f.bit_width()).sum(),
            Value::Struct(_, _, v) | Value::Tuple(v) => v.iter().map(|f| f.bit_width()).sum(),
            _ => 0,
        }
    }

    /// Sets every scalar to zero / false and headers invalid, keeping
    /// the shape (what `out` parameters and fresh variables start as).
    pub fn reset(&mut self) {
        match self {
            Value::Bits(b) => {
                b.v = 0;
                b.src = Src::None;
            }
            Value::Bool(b, s) => {
                *b = false;
                *s = Src::None;
            }
            Value::Varbit(v) => {
                v.len = 0;
                v.bytes.clear();
                v.src = Src::None;
            }
            Value::Header(h) => {
                h.valid = false;
                for f in h.fields.iter_mut() {
                    f.reset();
                }
            }
            Value::Struct(_, _, v) | Value::Tuple(v) => v.iter_mut().for_each(Value::reset),
            Value::Stack(s) => {
                s.next = 0;
                s.elems.iter_mut().for_each(Value::reset);
            }
            Value::Error(e, s) => {
                *e = no_error();
                *s = Src::None;
            }
            _ => {}
        }
    }

    /// Drops `self` with the check for the variants that own nothing
    /// (bits, bools, instances, apply results, `Void`) inline: those are
    /// forgotten, not passed to the out-of-line `drop_in_place::<Value>`
    /// (~25 instructions a call). Why: the data path dropped ~30 such
    /// values per packet on routing.p4, most of them a call statement's
    /// `Void` (docs/results/p4.md 2r).
    #[inline(always)]
    pub fn discard(self) {
        if matches!(
            self,
            Value::Bits(_)
                | Value::Bool(..)
                | Value::Instance(_)
                | Value::ApplyResult { .. }
                | Value::Void
        ) {
            std::mem::forget(self);
        }
    }

    /// An integer view for indices, sizes, widths.
    pub fn as_u128(&self) -> Option<u128> {
        match self {
            Value::Bits(b) => Some(b.v),
            Value::Int(i) => i.to_u128(),
            Value::Bool(b, _) => Some(*b as u128),
            _ => None,
        }
    }

    pub fn as_bigint(&self) -> Option<BigInt> {
        match self {
            Value::Bits(b) => Some(b.to_bigint()),
            Value::Int(i) => Some(i.clone()),
            _ => None,
        }
    }

    pub fn is_zero_int(&self) -> bool {
        matches!(self, Value::Int(i) if i.is_zero())
    }
}

/// `a == b` for the short names of a program (fields, variables),
/// compared inline: a call to `memcmp` per candidate name showed in
/// profiles of the interpreter.
#[inline]
pub fn name_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The interpreter's name maps (locals, globals, shared block values):
/// looked up by name several times per packet, where SipHash's cost
/// showed in profiles. Keys are program names, not attacker-chosen.
pub type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// FxHash (rustc's): a multiply-rotate over 8-byte words.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
    }
}

/// `error.NoError`, shared: every fresh header, struct and variable
/// starts with it, and a new `Arc<str>` each time was an allocation per
/// packet.
pub fn no_error() -> Arc<str> {
    static NO_ERROR: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    NO_ERROR.get_or_init(|| Arc::from("NoError")).clone()
}

/// Converts a non-negative big integer to `u128` (wrapping to 128 bits).
pub fn big_to_u128(i: &BigInt) -> u128 {
    let (sign, mut digits) = i.to_u64_digits();
    digits.resize(2, 0);
    let v = (digits[0] as u128) | ((digits[1] as u128) << 64);
    if sign == Sign::Minus {
        v.wrapping_neg()
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(valid: bool, a: u128, b: u128) -> Value {
        Value::Header(Box::new(HeaderVal {
            ty: Arc::from("h_t"),
            valid,
            fields: vec![Value::bits(8, a), Value::Bool(b == 1, Src::InPort)],
            names: Arc::from(vec!["a".to_string(), "b".to_string()]),
        }))
    }

    fn meta(fields: Vec<Value>) -> Value {
        let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
        Value::Struct(Arc::from("m_t"), Arc::from(names), fields)
    }

    #[test]
    fn clone_into_value_equals_clone_whatever_it_overwrites() {
        let mut src_bits = Bits::unsigned(16, 0xbeef);
        src_bits.src = Src::Packet(112);
        let src = meta(vec![
            Value::Bits(src_bits),
            hdr(true, 7, 1),
            Value::Error(Arc::from("NoError"), Src::None),
        ]);
        // Same shape (vectors reused), other shapes, other variants.
        let dsts = [
            meta(vec![
                Value::bits(16, 1),
                hdr(false, 0, 0),
                Value::Error(Arc::from("PacketTooShort"), Src::Tainted("x")),
            ]),
            meta(vec![Value::bits(16, 1)]),
            meta(vec![Value::Void, Value::Void, Value::Void]),
            hdr(true, 1, 1),
            Value::Void,
        ];
        for mut d in dsts {
            src.clone_into_value(&mut d);
            assert_eq!(d, src);
        }
    }
}
