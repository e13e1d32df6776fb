//! Operators on run-time values (P4-16 §8): arithmetic modulo 2^W,
//! saturating `|+|`/`|-|`, shifts, concatenation, comparisons, casts and
//! the implicit conversions of integer literals. Shared by the constant
//! evaluator of [`crate::interp::check`] and the interpreter. Source tracking is
//! the caller's business: results carry no [`Src`].

use crate::ast::{BinOp, UnOp};
use crate::interp::check::Ty;
use crate::value::{big_to_u128, mask, Bits, HeaderVal, Src, Value, MAX_WIDTH};
use num_bigint::BigInt;
use num_traits::{Signed, Zero};
use std::sync::Arc;

fn to_bits_like(i: &BigInt, like: &Bits) -> Bits {
    Bits::from_bigint(like.width, like.signed, i)
}

/// Structural equality ignoring sources.
pub fn eq_vals(a: &Value, b: &Value) -> Result<bool, String> {
    Ok(match (a, b) {
        (Value::Bits(x), Value::Bits(y)) => x.v == y.v,
        (Value::Bits(x), Value::Int(i)) | (Value::Int(i), Value::Bits(x)) => {
            x.v == to_bits_like(i, x).v
        }
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Varbit(x), Value::Varbit(y)) => x.len == y.len && x.bytes == y.bytes,
        (Value::Bool(x, _), Value::Bool(y, _)) => x == y,
        (Value::Error(x, _), Value::Error(y, _)) => x == y,
        (Value::Enum(t1, x), Value::Enum(t2, y)) => t1 == t2 && x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Header(x), Value::Header(y)) => {
            x.valid == y.valid
                && (!x.valid || {
                    let mut all = x.fields.len() == y.fields.len();
                    for (f, g) in x.fields.iter().zip(&y.fields) {
                        all &= eq_vals(f, g)?;
                    }
                    all
                })
        }
        (Value::Struct(_, _, x), Value::Struct(_, _, y))
        | (Value::Tuple(x), Value::Tuple(y))
        | (Value::Struct(_, _, x), Value::Tuple(y))
        | (Value::Tuple(x), Value::Struct(_, _, y)) => {
            let mut all = x.len() == y.len();
            for (f, g) in x.iter().zip(y) {
                all &= eq_vals(f, g)?;
            }
            all
        }
        (Value::Stack(x), Value::Stack(y)) => {
            let mut all = x.elems.len() == y.elems.len();
            for (f, g) in x.elems.iter().zip(&y.elems) {
                all &= eq_vals(f, g)?;
            }
            all
        }
        _ => {
            return Err(format!(
                "cannot compare {} with {}",
                a.type_name(),
                b.type_name()
            ))
        }
    })
}

fn shift_amount(v: &Value) -> Result<u128, String> {
    match v {
        Value::Bits(b) => {
            if b.signed && b.as_i128() < 0 {
                return Err("negative shift amount".into());
            }
            Ok(b.v)
        }
        Value::Int(i) => {
            if i.is_negative() {
                return Err("negative shift amount".into());
            }
            Ok(if i.bits() > 64 {
                u128::MAX
            } else {
                big_to_u128(i)
            })
        }
        _ => Err(format!("shift amount is a {}", v.type_name())),
    }
}

/// `a op b`.
pub fn binop(op: BinOp, a: Value, b: Value) -> Result<Value, String> {
    use BinOp::*;
    match op {
        Eq => return Ok(Value::Bool(eq_vals(&a, &b)?, Src::None)),
        Ne => return Ok(Value::Bool(!eq_vals(&a, &b)?, Src::None)),
        And | Or => {
            let (Value::Bool(x, _), Value::Bool(y, _)) = (&a, &b) else {
                return Err("&&/|| on non-booleans".into());
            };
            return Ok(Value::Bool(
                if op == And { *x && *y } else { *x || *y },
                Src::None,
            ));
        }
        Shl | Shr => {
            let n = shift_amount(&b)?;
            return Ok(match a {
                Value::Bits(x) => {
                    let v = if n >= x.width as u128 {
                        if op == Shr && x.signed && x.as_i128() < 0 {
                            mask(x.width)
                        } else {
                            0
                        }
                    } else if op == Shl {
                        x.v << n
                    } else if x.signed {
                        (x.as_i128() >> n) as u128
                    } else {
                        x.v >> n
                    };
                    Value::Bits(Bits::new(x.width, x.signed, v))
                }
                Value::Int(i) => {
                    if n > 4096 {
                        return Err("shift of int too large".into());
                    }
                    Value::Int(if op == Shl {
                        i << n as usize
                    } else {
                        i >> n as usize
                    })
                }
                o => return Err(format!("shift of {}", o.type_name())),
            });
        }
        Concat => {
            let (Value::Bits(x), Value::Bits(y)) = (&a, &b) else {
                return Err("++ needs bit<W>/int<W> operands of known width".into());
            };
            let w = x.width + y.width;
            if w > MAX_WIDTH {
                return Err(format!("concatenation wider than {MAX_WIDTH} bits"));
            }
            let v = if y.width >= 128 {
                y.v
            } else {
                (x.v << y.width) | y.v
            };
            return Ok(Value::Bits(Bits::new(w, x.signed, v)));
        }
        _ => {}
    }
    // Arithmetic and ordering.
    let (x, y) = match (a, b) {
        (Value::Int(i), Value::Int(j)) => return int_op(op, i, j),
        (Value::Bits(x), Value::Int(j)) => {
            let y = to_bits_like(&j, &x);
            (x, y)
        }
        (Value::Int(i), Value::Bits(y)) => (to_bits_like(&i, &y), y),
        (Value::Bits(x), Value::Bits(y)) => {
            if x.width != y.width || x.signed != y.signed {
                return Err(format!(
                    "operands of different types: {}<{}> and {}<{}>",
                    if x.signed { "int" } else { "bit" },
                    x.width,
                    if y.signed { "int" } else { "bit" },
                    y.width
                ));
            }
            (x, y)
        }
        (a, b) => return Err(format!("{op:?} on {} and {}", a.type_name(), b.type_name())),
    };
    let w = x.width;
    let s = x.signed;
    let m = mask(w);
    let r = |v: u128| Ok(Value::Bits(Bits::new(w, s, v)));
    let cmp = |c: bool| Ok(Value::Bool(c, Src::None));
    match op {
        Add => r(x.v.wrapping_add(y.v)),
        Sub => r(x.v.wrapping_sub(y.v)),
        Mul => r(x.v.wrapping_mul(y.v)),
        Div | Mod => {
            if s {
                return Err("division of signed values".into());
            }
            if y.v == 0 {
                return Err("division by zero".into());
            }
            r(if op == Div { x.v / y.v } else { x.v % y.v })
        }
        AddSat | SubSat => {
            if w == 0 {
                return r(0);
            }
            if s {
                let (a, b) = (x.as_i128(), y.as_i128());
                let max = if w >= 128 {
                    i128::MAX
                } else {
                    (1i128 << (w - 1)) - 1
                };
                let min = if w >= 128 {
                    i128::MIN
                } else {
                    -(1i128 << (w - 1))
                };
                let v = if op == AddSat {
                    a.checked_add(b)
                } else {
                    a.checked_sub(b)
                };
                let v = match v {
                    Some(v) => v.clamp(min, max),
                    None => {
                        if (op == AddSat) == (b > 0) {
                            max
                        } else {
                            min
                        }
                    }
                };
                r(v as u128)
            } else if op == AddSat {
                let v = x.v.checked_add(y.v).filter(|v| *v <= m).unwrap_or(m);
                r(v)
            } else {
                r(x.v.saturating_sub(y.v))
            }
        }
        BitAnd => r(x.v & y.v),
        BitOr => r(x.v | y.v),
        BitXor => r(x.v ^ y.v),
        Lt | Le | Gt | Ge => {
            let o = if s {
                x.as_i128().cmp(&y.as_i128())
            } else {
                x.v.cmp(&y.v)
            };
            cmp(match op {
                Lt => o.is_lt(),
                Le => o.is_le(),
                Gt => o.is_gt(),
                _ => o.is_ge(),
            })
        }
        _ => Err(format!("operator {op:?}")),
    }
}

fn int_op(op: BinOp, i: BigInt, j: BigInt) -> Result<Value, String> {
    use BinOp::*;
    let v = match op {
        Add => i + j,
        Sub => i - j,
        Mul => i * j,
        Div | Mod => {
            if j.is_zero() {
                return Err("division by zero".into());
            }
            if op == Div {
                i / j
            } else {
                i % j
            }
        }
        BitAnd => i & j,
        BitOr => i | j,
        BitXor => i ^ j,
        Lt => return Ok(Value::Bool(i < j, Src::None)),
        Le => return Ok(Value::Bool(i <= j, Src::None)),
        Gt => return Ok(Value::Bool(i > j, Src::None)),
        Ge => return Ok(Value::Bool(i >= j, Src::None)),
        _ => return Err(format!("{op:?} on int")),
    };
    Ok(Value::Int(v))
}

pub fn unop(op: UnOp, a: Value) -> Result<Value, String> {
    match (op, a) {
        (UnOp::Not, Value::Bool(b, _)) => Ok(Value::Bool(!b, Src::None)),
        (UnOp::BitNot, Value::Bits(x)) => Ok(Value::Bits(Bits::new(x.width, x.signed, !x.v))),
        (UnOp::Neg, Value::Bits(x)) => Ok(Value::Bits(Bits::new(
            x.width,
            x.signed,
            x.v.wrapping_neg(),
        ))),
        (UnOp::Neg, Value::Int(i)) => Ok(Value::Int(-i)),
        (UnOp::Plus, v @ (Value::Bits(_) | Value::Int(_))) => Ok(strip(v)),
        (op, a) => Err(format!("{op:?} on {}", a.type_name())),
    }
}

fn strip(v: Value) -> Value {
    match v {
        Value::Bits(mut b) => {
            b.src = Src::None;
            Value::Bits(b)
        }
        o => o,
    }
}

/// `e[hi:lo]`: keeps the packet source (narrowed) so a slice of a packet
/// field records only the sliced bits.
pub fn slice(v: &Value, hi: u32, lo: u32) -> Result<Value, String> {
    let Value::Bits(b) = v else {
        return Err(format!("slice of {}", v.type_name()));
    };
    if hi < lo || hi >= b.width {
        return Err(format!("slice [{hi}:{lo}] of a {}-bit value", b.width));
    }
    let w = hi - lo + 1;
    let mut r = Bits::new(w, false, b.v >> lo);
    r.src = match b.src {
        Src::Packet(off) => Src::Packet(off + (b.width - 1 - hi)),
        s => s,
    };
    Ok(Value::Bits(r))
}

/// `(T) e`.
pub fn cast(ty: &Ty, v: Value) -> Result<Value, String> {
    match (ty, v) {
        (Ty::Bits(w, s), Value::Bits(b)) => {
            let v = if b.signed && *w > b.width {
                b.as_i128() as u128
            } else {
                b.v
            };
            Ok(Value::Bits(Bits::new(*w, *s, v)))
        }
        (Ty::Bits(w, s), Value::Int(i)) => Ok(Value::Bits(Bits::from_bigint(*w, *s, &i))),
        (Ty::Bits(w, s), Value::Bool(b, _)) => Ok(Value::Bits(Bits::new(*w, *s, b as u128))),
        (Ty::Bool, Value::Bits(b)) => Ok(Value::Bool(b.v != 0, Src::None)),
        (Ty::Bool, Value::Int(i)) => Ok(Value::Bool(!i.is_zero(), Src::None)),
        (Ty::Int, Value::Bits(b)) => Ok(Value::Int(b.to_bigint())),
        (t, v) => coerce(t, v),
    }
}

/// Implicit conversion of `v` to type `ty` (literals to widths, lists
/// and struct initializers to structs/headers).
pub fn coerce(ty: &Ty, v: Value) -> Result<Value, String> {
    match ty {
        Ty::Int | Ty::Named(_) | Ty::Void | Ty::MatchKind => Ok(v),
        // `coerce_like` changes a value for an aggregate target only when
        // it is a list or a struct initializer: anything else (a header
        // passed to a header parameter) is returned as it is, without
        // building the type's default value (a Vec per call).
        Ty::Header(_) | Ty::Struct(_) | Ty::Stack(..)
            if !matches!(v, Value::Tuple(_) | Value::Struct(..)) =>
        {
            Ok(v)
        }
        _ => coerce_like(&ty.default_value(), v),
    }
}

/// Converts `v` to the shape of `target` (the current value of an
/// lvalue or a parameter's default value).
pub fn coerce_like(target: &Value, v: Value) -> Result<Value, String> {
    match (target, v) {
        (Value::Bits(t), Value::Bits(b)) => {
            if t.width != b.width {
                // p4c refuses this; some target dialects (Netronome's
                // v1model programs) rely on it: converted as by a cast.
                return cast(&Ty::Bits(t.width, t.signed), Value::Bits(b));
            }
            Ok(Value::Bits(Bits {
                signed: t.signed,
                ..b
            }))
        }
        (Value::Bits(t), Value::Int(i)) => {
            Ok(Value::Bits(Bits::from_bigint(t.width, t.signed, &i)))
        }
        (Value::Bits(t), Value::Bool(b, _)) if t.width == 1 => {
            Ok(Value::Bits(Bits::new(1, false, b as u128)))
        }
        (Value::Bool(..), v @ Value::Bool(..)) => Ok(v),
        (Value::Header(h), Value::Tuple(vals)) | (Value::Header(h), Value::Struct(_, _, vals)) => {
            if vals.len() != h.fields.len() {
                return Err(format!(
                    "{} fields given for header {} of {}",
                    vals.len(),
                    h.ty,
                    h.fields.len()
                ));
            }
            let fields = h
                .fields
                .iter()
                .zip(vals)
                .map(|(f, v)| coerce_like(f, v))
                .collect::<Result<_, _>>()?;
            Ok(Value::Header(Box::new(HeaderVal {
                ty: h.ty.clone(),
                valid: true,
                fields,
                names: h.names.clone(),
            })))
        }
        (Value::Struct(n, names, tv), Value::Struct(vn, vnames, vals))
            if vn.is_empty() || vn == *n =>
        {
            // By name when the initializer names fields.
            let mut out = Vec::with_capacity(tv.len());
            for (i, (name, t)) in names.iter().zip(tv).enumerate() {
                let src = match vnames.iter().position(|x| x == name) {
                    Some(j) => vals[j].clone(),
                    None if vn == *n => vals.get(i).cloned().ok_or("struct shape")?,
                    None => return Err(format!("no value for field {name}")),
                };
                out.push(coerce_like(t, src)?);
            }
            Ok(Value::Struct(n.clone(), names.clone(), out))
        }
        (Value::Struct(n, names, tv), Value::Tuple(vals)) => {
            if vals.len() != tv.len() {
                return Err(format!(
                    "{} values given for struct {} of {} fields",
                    vals.len(),
                    n,
                    tv.len()
                ));
            }
            let out = tv
                .iter()
                .zip(vals)
                .map(|(t, v)| coerce_like(t, v))
                .collect::<Result<_, _>>()?;
            Ok(Value::Struct(n.clone(), names.clone(), out))
        }
        (Value::Tuple(tv), Value::Tuple(vals)) if tv.len() == vals.len() => Ok(Value::Tuple(
            tv.iter()
                .zip(vals)
                .map(|(t, v)| coerce_like(t, v))
                .collect::<Result<_, _>>()?,
        )),
        (Value::Enum(t, _), Value::Enum(t2, m)) if *t == t2 => Ok(Value::Enum(t2, m)),
        (_, v) => Ok(v),
    }
}

/// The value of a scalar as bits for keys and checksums: bits, bools,
/// errors (their index), integers (in `width`).
pub fn scalar_bits(v: &Value, errors: &[String], width: u32) -> Option<Bits> {
    match v {
        Value::Bits(b) => Some(*b),
        Value::Bool(b, s) => Some(Bits {
            width: 1,
            signed: false,
            v: *b as u128,
            src: *s,
        }),
        Value::Int(i) => Some(Bits::from_bigint(width, false, i)),
        Value::Error(e, s) => {
            let idx = errors.iter().position(|x| **x == **e).unwrap_or(0);
            Some(Bits {
                width: width.max(1),
                signed: false,
                v: idx as u128,
                src: *s,
            })
        }
        _ => None,
    }
}

pub fn err_value(name: &str) -> Value {
    Value::Error(Arc::from(name), Src::None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(w: u32, s: bool, v: i128) -> Value {
        Value::Bits(Bits::new(w, s, v as u128))
    }

    fn get(v: Value) -> (u128, i128) {
        match v {
            Value::Bits(x) => (x.v, x.as_i128()),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn saturating_signed_and_unsigned() {
        assert_eq!(
            get(binop(BinOp::AddSat, b(8, true, 100), b(8, true, 100)).unwrap()).1,
            127
        );
        assert_eq!(
            get(binop(BinOp::SubSat, b(8, true, -100), b(8, true, 100)).unwrap()).1,
            -128
        );
        assert_eq!(
            get(binop(BinOp::AddSat, b(8, false, 200), b(8, false, 100)).unwrap()).0,
            255
        );
        assert_eq!(
            get(binop(BinOp::SubSat, b(8, false, 5), b(8, false, 10)).unwrap()).0,
            0
        );
        let max = Value::Bits(Bits::new(128, false, u128::MAX));
        assert_eq!(
            get(binop(BinOp::AddSat, max.clone(), b(128, false, 1)).unwrap()).0,
            u128::MAX
        );
        assert_eq!(get(binop(BinOp::Add, max, b(128, false, 1)).unwrap()).0, 0);
    }

    #[test]
    fn shifts_concat_and_casts() {
        assert_eq!(
            get(binop(BinOp::Shr, b(8, true, -8), b(8, false, 1)).unwrap()).1,
            -4
        );
        assert_eq!(
            get(binop(BinOp::Shr, b(8, true, -8), b(8, false, 9)).unwrap()).1,
            -1
        );
        assert_eq!(
            get(binop(BinOp::Shl, b(8, false, 0x81), b(8, false, 1)).unwrap()).0,
            2
        );
        assert_eq!(
            get(binop(BinOp::Concat, b(4, false, 0xa), b(12, false, 0xbcd)).unwrap()).0,
            0xabcd
        );
        assert!(binop(BinOp::Concat, b(100, false, 0), b(29, false, 0)).is_err());
        assert_eq!(
            get(cast(&Ty::Bits(16, false), b(8, true, -1)).unwrap()).0,
            0xffff
        );
        assert_eq!(
            get(cast(&Ty::Bits(4, false), b(8, false, 0xab)).unwrap()).0,
            0xb
        );
        assert!(binop(BinOp::Div, b(8, false, 1), b(8, false, 0)).is_err());
        assert!(binop(BinOp::Add, b(8, false, 1), b(16, false, 1)).is_err());
        assert_eq!(
            get(binop(
                BinOp::Mul,
                Value::Bits(Bits::new(128, false, 1 << 100)),
                b(128, false, 1 << 30)
            )
            .unwrap())
            .0,
            0
        );
    }

    #[test]
    fn slices_keep_the_packet_source() {
        let mut x = Bits::new(16, false, 0xabcd);
        x.src = Src::Packet(100);
        match slice(&Value::Bits(x), 11, 4).unwrap() {
            Value::Bits(s) => {
                assert_eq!(s.v, 0xbc);
                assert_eq!(s.src, Src::Packet(104));
            }
            o => panic!("{o:?}"),
        }
    }
}
