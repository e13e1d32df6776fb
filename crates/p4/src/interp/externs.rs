//! Extern objects and functions of core.p4, PNA, v1model and PSA:
//! checksums (recorded as `checksum_recomputed`, not as bit reads),
//! hashes, counters, registers and meters (per-packet state: the run is
//! marked uncacheable), random, and the forwarding functions
//! (send_to_port, drop_packet, mark_to_drop, add_entry, ...).

use super::eval::{fail, BitBuf, Ctl, Run, R};
use super::ExternState;
use crate::ast::{Arg, Expr, Span};
use crate::trace::CounterRef;
use crate::value::{mask, Bits, Src, Value};

/// 16-bit ones' complement sum of `data` (bits, zero-padded to 16).
pub(crate) fn ones_sum(buf: &BitBuf) -> u32 {
    let mut sum: u32 = 0;
    let mut i = 0;
    while i < buf.bytes.len() {
        let hi = buf.bytes[i] as u32;
        let lo = buf.bytes.get(i + 1).copied().unwrap_or(0) as u32;
        sum += (hi << 8) | lo;
        sum = (sum & 0xffff) + (sum >> 16);
        i += 2;
    }
    sum
}

fn fold(mut s: u32) -> u32 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s
}

pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut c: u32 = 0xffff_ffff;
    for b in data {
        c ^= *b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

pub(crate) fn crc16(data: &[u8]) -> u32 {
    let mut c: u16 = 0;
    for b in data {
        c ^= *b as u16;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xa001
            } else {
                c >> 1
            };
        }
    }
    c as u32
}

/// Hash of serialized data by algorithm name (HashAlgorithm /
/// PSA_HashAlgorithm_t / PNA_HashAlgorithm_t member).
pub(crate) fn hash_by_name(algo: &str, buf: &BitBuf) -> Result<u128, String> {
    Ok(match algo {
        "csum16" | "ONES_COMPLEMENT16" | "TARGET_DEFAULT" => {
            (!fold(ones_sum(buf)) & 0xffff) as u128
        }
        "crc32" | "CRC32" => crc32(&buf.bytes) as u128,
        "crc16" | "CRC16" => crc16(&buf.bytes) as u128,
        "identity" | "IDENTITY" => {
            let mut v: u128 = 0;
            for b in buf.bytes.iter().rev().take(16).rev() {
                v = (v << 8) | *b as u128;
            }
            v
        }
        "xor16" | "XOR16" => {
            let mut v: u32 = 0;
            for c in buf.bytes.chunks(2) {
                v ^= ((c[0] as u32) << 8) | c.get(1).copied().unwrap_or(0) as u32;
            }
            v as u128
        }
        o => return Err(format!("unsupported: hash algorithm {o}")),
    })
}

fn algo_name(v: &Value) -> String {
    match v {
        Value::Enum(_, m) => m.to_string(),
        Value::Bits(b) => b.v.to_string(),
        _ => String::new(),
    }
}

/// An `InternetChecksum` method, resolved at load (`fast::CExpr::Method`'s
/// `csum`) instead of matched by name per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CsumOp {
    Clear,
    Add,
    Subtract,
    Get,
    GetState,
    SetState,
}

impl CsumOp {
    /// The method called `name` (`None`: not one `extern_method` runs).
    pub(crate) fn of(name: &str) -> Option<CsumOp> {
        Some(match name {
            "clear" => CsumOp::Clear,
            "add" => CsumOp::Add,
            "subtract" => CsumOp::Subtract,
            "get" => CsumOp::Get,
            "get_state" => CsumOp::GetState,
            "set_state" => CsumOp::SetState,
            _ => return None,
        })
    }
}

/// The ones' complement sum [`ones_sum`] gives for the bits of `vals`
/// serialized in order, when they are all `bit<W>`/`int<W>`/`bool` and
/// 128 bits or fewer in all (`None`: the caller serializes them).
fn ones_sum_of(vals: &[Value]) -> Option<u32> {
    let mut acc: u128 = 0;
    let mut n: u32 = 0;
    for v in vals {
        let (x, w) = match v {
            Value::Bits(b) => (b.v & mask(b.width), b.width),
            Value::Bool(b, _) => (u128::from(*b), 1),
            _ => return None,
        };
        if n + w > 128 {
            return None;
        }
        if w > 0 {
            acc = if w == 128 { x } else { (acc << w) | x };
        }
        n += w;
    }
    Some(ones_sum_bits(acc, n))
}

/// [`ones_sum`] of the `n` (<= 128) bits `acc` holds.
pub(crate) fn ones_sum_bits(acc: u128, n: u32) -> u32 {
    // Zero-padded to whole 16-bit words, summed first word first with
    // the carry folded after each word, as `ones_sum` does over bytes.
    let words = n.div_ceil(16);
    if words == 0 {
        return 0;
    }
    let pad = words * 16 - n;
    let data = if pad == 0 { acc } else { acc << pad };
    let mut sum: u32 = 0;
    for k in (0..words).rev() {
        sum += ((data >> (16 * k)) & 0xffff) as u32;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// The items of a checksum list: the AST's (the walker evaluates them)
/// or compiled ones (`fast::CArg::List`).
#[derive(Clone, Copy)]
enum Items<'x, 'a> {
    Ast(&'x [Expr]),
    Compiled(&'a [crate::interp::fast::CExpr]),
}

impl<'a> Run<'a> {
    fn arg_val(&mut self, args: &[Arg], i: usize, span: &Span) -> R<Value> {
        if let Some(ca) = self.cargs {
            // Compiled (it names a flat header parameter): evaluated with
            // no compiled arguments of its own in force; a list as the
            // walker's `Expr::List` (a tuple), for externs that read their
            // data as one value (`Hash.get_hash`).
            let r = match ca.get(i) {
                Some(crate::interp::fast::CArg::One(e)) => {
                    self.cargs = None;
                    Some(self.ceval(e))
                }
                Some(crate::interp::fast::CArg::List(items)) => {
                    self.cargs = None;
                    Some(
                        items
                            .iter()
                            .map(|e| self.ceval(e))
                            .collect::<R<_>>()
                            .map(Value::Tuple),
                    )
                }
                None => None,
            };
            if let Some(r) = r {
                self.cargs = Some(ca);
                return r;
            }
        }
        match args.get(i) {
            Some(a) => self.eval(&a.value),
            None => fail(format!("{span}: missing argument {}", i + 1)),
        }
    }

    /// Evaluates argument `i` and records it as a decision input.
    fn arg_used(&mut self, args: &[Arg], i: usize, span: &Span) -> R<Value> {
        let v = self.arg_val(args, i, span)?;
        self.use_val(&v);
        Ok(v)
    }

    /// The field list id argument of a `*_preserving_field_list` call.
    fn list_arg(&mut self, name: &str, args: &[Arg], i: usize, span: &Span) -> R<Option<u64>> {
        if !name.ends_with("_preserving_field_list") {
            return Ok(None);
        }
        Ok(self.arg_val(args, i, span)?.as_u128().map(|v| v as u64))
    }

    fn index_arg(&mut self, args: &[Arg], i: usize, span: &Span) -> R<u64> {
        let v = self.arg_used(args, i, span)?;
        Ok(v.as_u128().unwrap_or(u64::MAX as u128) as u64)
    }

    /// Checksum data: evaluated without recording reads.
    fn data_bits(&mut self, args: &[Arg], i: usize, span: &Span) -> R<BitBuf> {
        if let Some(ca) = self.cargs {
            if let Some(crate::interp::fast::CArg::List(items)) = ca.get(i) {
                self.cargs = None;
                let r = self.list_bits(Items::Compiled(items));
                self.cargs = Some(ca);
                return r;
            }
        }
        if !self.reference {
            if let Some(Arg {
                value: crate::ast::Expr::List(items, _),
                ..
            }) = args.get(i)
            {
                return self.list_bits(Items::Ast(items));
            }
        }
        self.quiet += 1;
        let v = self.arg_val(args, i, span);
        self.quiet -= 1;
        let v = v?;
        let mut buf = BitBuf::default();
        self.flatten(&v, &mut buf)?;
        Ok(buf)
    }

    /// [`Run::data_bits`] of a list `{ a, b }` (the usual checksum
    /// argument): its items evaluated in order as the tuple's would be,
    /// then serialized, in buffers the pipeline keeps (no tuple and no
    /// fresh buffer per call).
    fn list_bits(&mut self, items: Items<'_, 'a>) -> R<BitBuf> {
        let mut vals = self.st.pool.data.pop().unwrap_or_default();
        let r = self.list_vals(items, &mut vals, false);
        let mut buf = std::mem::take(&mut self.st.pool.bits);
        buf.bytes.clear();
        buf.bits = 0;
        let r = r.and_then(|()| vals.iter().try_for_each(|v| self.flatten(v, &mut buf)));
        if self.st.pool.data.len() < 16 {
            vals.clear();
            self.st.pool.data.push(vals);
        }
        r.map(|()| buf)
    }

    /// A checksum list's items evaluated in order into `vals` (emptied
    /// first), reads not recorded; with `exact`, compiled items with the
    /// walker's steps (`Run::citem_val`; `data_sum`, which counts the
    /// list's `enter` as the walker; `data_bits`' compiled lists do not
    /// yet, docs/results/p4.md 2v).
    fn list_vals(&mut self, items: Items<'_, 'a>, vals: &mut Vec<Value>, exact: bool) -> R<()> {
        vals.clear();
        self.quiet += 1;
        let mut r = Ok(());
        let n = match items {
            Items::Ast(x) => x.len(),
            Items::Compiled(x) => x.len(),
        };
        for k in 0..n {
            let v = match items {
                Items::Ast(x) => self.eval(&x[k]),
                Items::Compiled(x) if exact => self.citem_val(&x[k]),
                Items::Compiled(x) => self.ceval(&x[k]),
            };
            match v {
                Ok(v) => vals.push(v),
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        self.quiet -= 1;
        r
    }

    /// `ones_sum` of [`Run::data_bits`] of argument 0: a list's items
    /// summed from their values when they fit 128 bits (no buffer, no
    /// byte loop), otherwise serialized as `data_bits` does (the
    /// fallback below repeats its flattening of the list on purpose: it
    /// has the values already evaluated, `data_bits` would evaluate the
    /// items again).
    fn data_sum(&mut self, args: &[Arg], span: &Span) -> R<u32> {
        let compiled = match self.cargs.and_then(|ca| ca.first()) {
            Some(crate::interp::fast::CArg::List(items)) => Some(items),
            _ => None,
        };
        let items = match (compiled, args.first()) {
            (Some(x), _) => Some(Items::Compiled(x)),
            // `!self.reference` is never false here: only `csum_method`
            // calls this, and only the compiled form calls that, which a
            // reference run never has (`Run::code`). Kept so that a later
            // caller on the reference path still gets `data_bits`, the
            // walker's own serialization.
            (
                None,
                Some(Arg {
                    value: Expr::List(x, _),
                    ..
                }),
            ) if self.cargs.is_none() && !self.reference => Some(Items::Ast(x)),
            _ => None,
        };
        let Some(items) = items else {
            let buf = self.data_bits(args, 0, span)?;
            let s = ones_sum(&buf);
            self.give_back(buf);
            return Ok(s);
        };
        // The walker evaluates the list (`Expr::List`: one `enter`, its
        // items one level deeper); here only its items are: the list's
        // step counted, so that the step limit falls where the walker's
        // does (docs/results/p4.md 2v).
        self.enter()?;
        let r = self.data_sum_items(items);
        self.depth -= 1;
        r
    }

    /// [`Run::data_sum`] of a list's items.
    fn data_sum_items(&mut self, items: Items<'_, 'a>) -> R<u32> {
        if let Items::Compiled(xs) = items {
            let before = self.steps;
            if let Some(s) = self.scalar_sum(xs) {
                return Ok(s);
            }
            // Declined part-way (over 128 bits, or an item the tier
            // declines): the steps of the items it took are given back
            // (reads are quiet, nothing else to undo); `list_vals`
            // counts each item once, as the walker.
            self.steps = before;
        }
        let saved = self.cargs.take();
        let mut vals = self.st.pool.data.pop().unwrap_or_default();
        let r = self.list_vals(items, &mut vals, true);
        self.cargs = saved;
        let r = r.and_then(|()| match ones_sum_of(&vals) {
            Some(s) => Ok(s),
            None => {
                let mut buf = std::mem::take(&mut self.st.pool.bits);
                buf.bytes.clear();
                buf.bits = 0;
                let r = vals.iter().try_for_each(|v| self.flatten(v, &mut buf));
                let s = ones_sum(&buf);
                self.give_back(buf);
                r.map(|()| s)
            }
        });
        if self.st.pool.data.len() < 16 {
            vals.clear();
            self.st.pool.data.push(vals);
        }
        r
    }

    /// The walker's `InternetChecksum` methods (`extern_method`) for a
    /// method resolved at load: the same state changes, results and
    /// trace, without the dispatch by type and method name.
    ///
    /// The state updates below are a copy of `extern_method`'s arm, kept
    /// on purpose: that arm is the oracle the reference run
    /// (`Pipeline::process_reference`) and the differential tests compare
    /// this path with, so it must not call into it; a helper both shared
    /// would make a mistake in it invisible to those tests. A change to
    /// one copy must be made to the others (`csum_bound` holds a third).
    pub(crate) fn csum_method(
        &mut self,
        i: usize,
        op: CsumOp,
        args: &[Arg],
        span: &Span,
    ) -> R<Value> {
        self.tr.checksum_recomputed = true;
        Ok(match op {
            CsumOp::Clear => {
                *self.extern_state(i) = ExternState::Csum(0);
                Value::Void
            }
            CsumOp::Add | CsumOp::Subtract => {
                let s = self.data_sum(args, span)?;
                let s = if op == CsumOp::Add {
                    s
                } else {
                    !fold(s) & 0xffff
                };
                if let ExternState::Csum(c) = self.extern_state(i) {
                    *c = fold(*c + s);
                } else {
                    *self.extern_state(i) = ExternState::Csum(fold(s));
                }
                Value::Void
            }
            CsumOp::Get | CsumOp::GetState => self.csum_read(i, op),
            CsumOp::SetState => {
                self.quiet += 1;
                // A compiled argument with the walker's steps
                // (`carg_bits`); else `arg_val`.
                let v = match self.cargs.and_then(|ca| ca.first()) {
                    Some(crate::interp::fast::CArg::One(e)) => self.carg_bits(e),
                    _ => self
                        .arg_val(args, 0, span)
                        .map(|v| v.as_u128().unwrap_or(0)),
                };
                self.quiet -= 1;
                *self.extern_state(i) = ExternState::Csum(v? as u32 & 0xffff);
                Value::Void
            }
        })
    }

    /// `get()` (the folded sum's complement) or `get_state()` (the
    /// folded sum) of checksum instance `i`: one place for `csum_method`
    /// and `csum_bound`.
    fn csum_read(&mut self, i: usize, op: CsumOp) -> Value {
        let c = match self.extern_state(i) {
            ExternState::Csum(c) => *c,
            _ => 0,
        };
        let v = if op == CsumOp::Get {
            !fold(c) & 0xffff
        } else {
            fold(c)
        };
        let mut b = Bits::unsigned(16, v as u128);
        b.src = Src::Checksum;
        Value::Bits(b)
    }

    /// [`Run::csum_method`] of a method resolved with its instance at load
    /// (`fast::CExpr::Csum`, which says when; the receiver's step counted
    /// by the caller): `set_state`'s argument and `add`'s/`subtract`'s
    /// list items taken from the scalar tier (`cargs`, the method's
    /// compiled arguments), with the walker's steps, no `Value` built.
    /// `args`, `span`: the method's, for the fallback (a list the tier
    /// declines after all runs as `csum_method` does). The state updates
    /// are a third copy of `extern_method`'s arm, kept apart for the
    /// reason `csum_method` gives: a change to one copy must be made to
    /// the others.
    pub(crate) fn csum_bound(
        &mut self,
        i: usize,
        op: CsumOp,
        cargs: &'a [crate::interp::fast::CArg],
        args: &[Arg],
        span: &Span,
    ) -> R<Value> {
        use crate::interp::fast::CArg;
        match (op, cargs) {
            (CsumOp::SetState, [CArg::One(e)]) => {
                self.tr.checksum_recomputed = true;
                self.quiet += 1;
                let v = self.carg_bits(e);
                self.quiet -= 1;
                *self.extern_state(i) = ExternState::Csum(v? as u32 & 0xffff);
                Ok(Value::Void)
            }
            (CsumOp::Clear, _) => {
                self.tr.checksum_recomputed = true;
                *self.extern_state(i) = ExternState::Csum(0);
                Ok(Value::Void)
            }
            (CsumOp::Get | CsumOp::GetState, _) => {
                self.tr.checksum_recomputed = true;
                Ok(self.csum_read(i, op))
            }
            (CsumOp::Add | CsumOp::Subtract, [CArg::List(xs)]) => {
                // The walker's `enter` of the list (room checked by
                // `CExpr::Csum`'s guard), then its items'.
                let before = self.steps;
                self.steps += 1;
                self.depth += 1;
                let s = self.csum_items(xs);
                self.depth -= 1;
                let Some(s) = s else {
                    // Not reached while `CExpr::Csum` takes only
                    // `csum_sure` items of 128 bits or fewer in all, with
                    // room checked. Should that widen, the steps counted
                    // here (the list's and any item's the tier took before
                    // declining; reads are quiet, nothing else to undo)
                    // are given back: `csum_method`'s `data_sum` counts
                    // the list and its items again, as the walker does
                    // once (review session25, p4calls SHOULD-FIX 1).
                    self.steps = before;
                    let saved = self.cargs.replace(cargs);
                    let r = self.csum_method(i, op, args, span);
                    self.cargs = saved;
                    return r;
                };
                self.tr.checksum_recomputed = true;
                let s = if op == CsumOp::Add {
                    s
                } else {
                    !fold(s) & 0xffff
                };
                if let ExternState::Csum(c) = self.extern_state(i) {
                    *c = fold(*c + s);
                } else {
                    *self.extern_state(i) = ExternState::Csum(fold(s));
                }
                Ok(Value::Void)
            }
            _ => self.csum_method(i, op, args, span),
        }
    }

    /// Keeps a buffer [`Run::data_bits`] gave for the next call.
    fn give_back(&mut self, buf: BitBuf) {
        if !self.reference {
            self.st.pool.bits = buf;
        }
    }

    fn packet_bytes(&self) -> u64 {
        self.pkt.len() as u64
    }

    pub(crate) fn extern_method(
        &mut self,
        i: usize,
        name: &str,
        args: &[Arg],
        span: &Span,
    ) -> R<Value> {
        let p = self.p;
        let Some(ed) = p.externs.get(i) else {
            return fail(format!("{span}: bad extern reference"));
        };
        let ty = ed.ty.as_str();
        match (ty, name) {
            ("InternetChecksum", _) => {
                self.tr.checksum_recomputed = true;
                let r = match name {
                    "clear" => {
                        *self.extern_state(i) = ExternState::Csum(0);
                        Value::Void
                    }
                    "add" | "subtract" => {
                        let buf = self.data_bits(args, 0, span)?;
                        let s = ones_sum(&buf);
                        self.give_back(buf);
                        let s = if name == "add" { s } else { !fold(s) & 0xffff };
                        if let ExternState::Csum(c) = self.extern_state(i) {
                            *c = fold(*c + s);
                        } else {
                            *self.extern_state(i) = ExternState::Csum(fold(s));
                        }
                        Value::Void
                    }
                    "get" | "get_state" => {
                        let c = match self.extern_state(i) {
                            ExternState::Csum(c) => *c,
                            _ => 0,
                        };
                        let v = if name == "get" {
                            !fold(c) & 0xffff
                        } else {
                            fold(c)
                        };
                        let mut b = Bits::unsigned(16, v as u128);
                        b.src = Src::Checksum;
                        Value::Bits(b)
                    }
                    "set_state" => {
                        self.quiet += 1;
                        let v = self.arg_val(args, 0, span);
                        self.quiet -= 1;
                        let v = v?;
                        *self.extern_state(i) =
                            ExternState::Csum(v.as_u128().unwrap_or(0) as u32 & 0xffff);
                        Value::Void
                    }
                    o => return fail(format!("{span}: unsupported: InternetChecksum.{o}")),
                };
                Ok(r)
            }
            ("Checksum", _) => {
                self.tr.checksum_recomputed = true;
                match name {
                    "clear" => {
                        *self.extern_state(i) = ExternState::Data(BitBuf::default());
                        Ok(Value::Void)
                    }
                    "update" => {
                        let buf = self.data_bits(args, 0, span)?;
                        if !matches!(self.extern_state(i), ExternState::Data(_)) {
                            *self.extern_state(i) = ExternState::Data(BitBuf::default());
                        }
                        if let ExternState::Data(d) = self.extern_state(i) {
                            for b in &buf.bytes {
                                d.push(*b as u128, 8);
                            }
                        }
                        Ok(Value::Void)
                    }
                    "get" => {
                        let algo = ed.args.first().map(algo_name).unwrap_or_default();
                        let w = ed.elem_ty.as_ref().map(|t| t.width()).unwrap_or(16);
                        let h = match self.extern_state(i) {
                            ExternState::Data(d) => hash_by_name(&algo, d),
                            _ => hash_by_name(&algo, &BitBuf::default()),
                        }
                        .map_err(|m| Ctl::Fail(format!("{span}: {m}")))?;
                        let mut b = Bits::unsigned(w, h);
                        b.src = Src::Checksum;
                        Ok(Value::Bits(b))
                    }
                    o => fail(format!("{span}: unsupported: Checksum.{o}")),
                }
            }
            ("Hash", "get_hash") => {
                let algo = ed.args.first().map(algo_name).unwrap_or_default();
                let w = ed.elem_ty.as_ref().map(|t| t.width()).unwrap_or(32);
                if args.len() == 1 {
                    let buf = self.data_bits(args, 0, span)?;
                    let v = self.arg_val(args, 0, span)?;
                    self.use_val(&v);
                    let h =
                        hash_by_name(&algo, &buf).map_err(|m| Ctl::Fail(format!("{span}: {m}")))?;
                    Ok(Value::Bits(Bits::unsigned(w, h)))
                } else {
                    let base = self.arg_used(args, 0, span)?.as_u128().unwrap_or(0);
                    let data = self.arg_val(args, 1, span)?;
                    self.use_val(&data);
                    let mut buf = BitBuf::default();
                    self.flatten(&data, &mut buf)?;
                    let max = self.arg_used(args, 2, span)?.as_u128().unwrap_or(0);
                    let h =
                        hash_by_name(&algo, &buf).map_err(|m| Ctl::Fail(format!("{span}: {m}")))?;
                    let v = if max == 0 {
                        base
                    } else {
                        base.wrapping_add(h % max)
                    };
                    Ok(Value::Bits(Bits::unsigned(w, v)))
                }
            }
            ("Counter" | "counter", "count") => {
                let idx = self.index_arg(args, 0, span)?;
                let bytes = self.packet_bytes();
                if let ExternState::Counter { packets, bytes: bs } = self.extern_state(i) {
                    if let (Some(pk), Some(b)) =
                        (packets.get_mut(idx as usize), bs.get_mut(idx as usize))
                    {
                        *pk += 1;
                        *b += bytes;
                    }
                }
                self.tr.counters.push(CounterRef::Indexed {
                    name: ed.qname.clone(),
                    index: idx,
                });
                Ok(Value::Void)
            }
            ("DirectCounter" | "direct_counter", "count") => Ok(Value::Void),
            ("Register", "read") | ("register", "read") => {
                self.tr.set_uncacheable("p4-register");
                let (idx_pos, out) = if ty == "register" {
                    (1, true)
                } else {
                    (0, false)
                };
                let idx = self.index_arg(args, idx_pos, span)?;
                let w = ed.elem_ty.as_ref().map(|t| t.width()).unwrap_or(32);
                let v = match self.extern_state(i) {
                    ExternState::Register(cells) => cells.get(idx as usize).copied().unwrap_or(0),
                    _ => 0,
                };
                let mut b = Bits::unsigned(w, v);
                if let Some(crate::interp::check::Ty::Bits(_, s)) = ed.elem_ty {
                    b.signed = s;
                }
                b.src = Src::Tainted("p4-register");
                if out {
                    let a = args
                        .first()
                        .ok_or(Ctl::Fail(format!("{span}: missing argument")))?;
                    self.assign(&a.value, Value::Bits(b))?;
                    Ok(Value::Void)
                } else {
                    Ok(Value::Bits(b))
                }
            }
            ("Register" | "register", "write") => {
                self.tr.set_uncacheable("p4-register");
                let idx = self.index_arg(args, 0, span)?;
                let v = self.arg_used(args, 1, span)?;
                let w = ed.elem_ty.as_ref().map(|t| t.width()).unwrap_or(32);
                let v = crate::interp::ops::scalar_bits(&v, &p.g.errors, w)
                    .map(|b| b.v)
                    .unwrap_or(0)
                    & mask(w);
                if let ExternState::Register(cells) = self.extern_state(i) {
                    if let Some(c) = cells.get_mut(idx as usize) {
                        *c = v;
                    }
                }
                Ok(Value::Void)
            }
            ("Meter" | "meter", _) | ("DirectMeter" | "direct_meter", _) => {
                self.tr.set_uncacheable("p4-meter");
                let bytes = self.packet_bytes();
                let now = self.now;
                let (idx, out_arg) = match (ty, name) {
                    ("meter", "execute_meter") => (self.index_arg(args, 0, span)?, args.get(1)),
                    ("direct_meter", "read") => (0, args.first()),
                    ("DirectMeter", _) => (0, None),
                    _ => (self.index_arg(args, 0, span)?, None),
                };
                let color = match self.extern_state(i) {
                    ExternState::Meter(ms) => ms
                        .get_mut(idx as usize)
                        .map(|m| m.color(now, bytes))
                        .unwrap_or(0),
                    _ => 0,
                };
                if let Some(a) = out_arg {
                    let a = a.value.clone();
                    let target_w = match self.eval(&a)? {
                        Value::Bits(b) => b.width,
                        _ => 2,
                    };
                    self.assign(&a, Value::Bits(Bits::unsigned(target_w, color as u128)))?;
                    return Ok(Value::Void);
                }
                let cname = ["GREEN", "YELLOW", "RED"][color.min(2) as usize];
                let ety = if ty.starts_with('D') || ty == "Meter" {
                    if p.g.enums.contains_key("PSA_MeterColor_t") {
                        "PSA_MeterColor_t"
                    } else {
                        "PNA_MeterColor_t"
                    }
                } else {
                    "MeterColor_t"
                };
                match p.g.enums.get(ety) {
                    Some(en) => crate::interp::check::enum_member(ety, en, cname, span)
                        .map_err(|e| Ctl::Fail(e.to_string())),
                    None => Ok(Value::Bits(Bits::unsigned(2, color as u128))),
                }
            }
            ("Random", "read") => {
                self.tr.set_uncacheable("p4-random");
                let lo = ed.args.first().and_then(|v| v.as_u128()).unwrap_or(0);
                let hi = ed
                    .args
                    .get(1)
                    .and_then(|v| v.as_u128())
                    .unwrap_or(u32::MAX as u128);
                let w = ed.elem_ty.as_ref().map(|t| t.width()).unwrap_or(32);
                let r = self.st.next_random(lo, hi);
                Ok(Value::Bits(Bits::unsigned(w, r)))
            }
            ("Digest", "pack") => {
                self.tr.set_uncacheable("p4-digest");
                Ok(Value::Void)
            }
            (t, m) => fail(format!("{span}: unsupported: {t}.{m}")),
        }
    }

    pub(crate) fn extern_function(
        &mut self,
        name: &str,
        _type_args: &[crate::ast::Type],
        args: &[Arg],
        span: &Span,
    ) -> R<Value> {
        // `send_to_port`, `drop_packet`, `is_host_port` and `is_net_port`
        // must read their arguments only through `arg_used`/`arg_val`
        // (never `lvalue`, `assign` or `eval` of an argument's AST): the
        // compiled code gives them compiled arguments and drops the
        // flat-header checks of those ASTs (`fast::extern_fn_cargs`,
        // review p4early SHOULD-FIX 4). Change both together.
        match name {
            "send_to_port" => {
                let v = self.arg_used(args, 0, span)?;
                self.fwd.pna_dest = Some(Some(v.as_u128().unwrap_or(0) as u32));
                Ok(Value::Void)
            }
            "drop_packet" => {
                self.fwd.pna_dest = Some(None);
                Ok(Value::Void)
            }
            "add_entry" => self.add_entry(args, span),
            "set_entry_expire_time" | "restart_expire_timer" | "update_expire_info" => {
                Ok(Value::Void)
            }
            "is_host_port" | "is_net_port" => {
                let _ = self.arg_used(args, 0, span)?;
                Ok(Value::Bool(name == "is_net_port", Src::None))
            }
            "mark_to_drop" => {
                // `mark_to_drop()` without argument (older v1model, the
                // Netronome dialect): the standard_metadata in scope.
                let target = match args.first() {
                    Some(a) => self.lvalue(&a.value)?,
                    None => self
                        .find_struct_mut("standard_metadata_t")
                        .ok_or(Ctl::Fail(format!(
                            "{span}: mark_to_drop() without standard_metadata in scope"
                        )))?,
                };
                if let Some(Value::Bits(b)) = target.field_mut("egress_spec") {
                    b.v = crate::interp::arch::V1_DROP_PORT as u128 & mask(b.width);
                    b.src = Src::None;
                }
                if let Some(Value::Bits(b)) = target.field_mut("mcast_grp") {
                    b.v = 0;
                }
                Ok(Value::Void)
            }
            "verify" => {
                let c = self.arg_used(args, 0, span)?;
                if matches!(c, Value::Bool(false, _)) {
                    let e = self.arg_val(args, 1, span)?;
                    let en = match e {
                        Value::Error(n, _) => n.to_string(),
                        _ => "NoError".into(),
                    };
                    return Err(Ctl::Reject(en));
                }
                Ok(Value::Void)
            }
            "verify_checksum"
            | "verify_checksum_with_payload"
            | "update_checksum"
            | "update_checksum_with_payload" => {
                self.tr.checksum_recomputed = true;
                let cond = self.arg_used(args, 0, span)?;
                if !matches!(cond, Value::Bool(true, _)) {
                    return Ok(Value::Void);
                }
                let mut buf = self.data_bits(args, 1, span)?;
                if name.ends_with("_with_payload") {
                    let start = (self.pos / 8) as usize;
                    let payload: Vec<u8> = self.pkt.get(start..).unwrap_or(&[]).to_vec();
                    for b in payload {
                        buf.push(b as u128, 8);
                    }
                }
                let algo = algo_name(&self.arg_val(args, 3, span)?);
                let h = hash_by_name(&algo, &buf).map_err(|m| Ctl::Fail(format!("{span}: {m}")))?;
                let target = &args
                    .get(2)
                    .ok_or(Ctl::Fail(format!("{span}: missing checksum")))?
                    .value;
                if name.starts_with("verify") {
                    self.quiet += 1;
                    let cur = self.eval(target);
                    self.quiet -= 1;
                    let cur = cur?;
                    let bad = cur.as_u128().unwrap_or(0) != h & mask(cur.bit_width());
                    self.checksum_error = Some(self.checksum_error.unwrap_or(false) || bad);
                } else {
                    let cur = self.eval(target)?;
                    let w = cur.bit_width();
                    let mut b = Bits::unsigned(w, h);
                    b.src = Src::Checksum;
                    self.assign(target, Value::Bits(b))?;
                }
                Ok(Value::Void)
            }
            "hash" => {
                // hash(out result, algo, base, data, max)
                let algo = algo_name(&self.arg_val(args, 1, span)?);
                let base = self.arg_used(args, 2, span)?.as_u128().unwrap_or(0);
                let data = self.arg_val(args, 3, span)?;
                self.use_val(&data);
                let mut buf = BitBuf::default();
                self.flatten(&data, &mut buf)?;
                let max = self.arg_used(args, 4, span)?.as_u128().unwrap_or(0);
                let h = hash_by_name(&algo, &buf).map_err(|m| Ctl::Fail(format!("{span}: {m}")))?;
                let v = if max == 0 {
                    base
                } else {
                    base.wrapping_add(h % max)
                };
                let target = &args[0].value;
                let w = self.eval(target)?.bit_width();
                self.assign(target, Value::Bits(Bits::unsigned(w, v)))?;
                Ok(Value::Void)
            }
            "random" => {
                self.tr.set_uncacheable("p4-random");
                let lo = self.arg_val(args, 1, span)?.as_u128().unwrap_or(0);
                let hi = self.arg_val(args, 2, span)?.as_u128().unwrap_or(0);
                let r = self.st.next_random(lo, hi);
                let target = &args
                    .first()
                    .ok_or(Ctl::Fail("random needs a result".into()))?
                    .value;
                let w = self.eval(target)?.bit_width();
                self.assign(target, Value::Bits(Bits::unsigned(w, r)))?;
                Ok(Value::Void)
            }
            "resubmit" | "resubmit_preserving_field_list" => {
                self.tr.set_uncacheable("p4-resubmit");
                self.fwd.resubmit = true;
                self.fwd.resubmit_list = self.list_arg(name, args, 0, span)?;
                Ok(Value::Void)
            }
            "recirculate" | "recirculate_preserving_field_list" => {
                self.tr.set_uncacheable("p4-recirculate");
                self.fwd.recirculate = true;
                self.fwd.recirculate_list = self.list_arg(name, args, 0, span)?;
                Ok(Value::Void)
            }
            "clone" | "clone3" | "clone_preserving_field_list" => {
                self.tr.set_uncacheable("p4-clone");
                let s = self.arg_val(args, 1, span)?.as_u128().unwrap_or(0);
                self.fwd.clone = Some(s as u32);
                self.fwd.clone_list = self.list_arg(name, args, 2, span)?;
                Ok(Value::Void)
            }
            "digest" => {
                self.tr.set_uncacheable("p4-digest");
                Ok(Value::Void)
            }
            "truncate" => {
                self.tr.set_uncacheable("p4-truncate");
                Ok(Value::Void)
            }
            "log_msg" | "static_assert" => Ok(Value::Bool(true, Src::None)),
            "assert" | "assume" => {
                let c = self.arg_used(args, 0, span)?;
                if matches!(c, Value::Bool(false, _)) {
                    return fail(format!("{span}: {name} failed"));
                }
                Ok(Value::Void)
            }
            "psa_normal" => Ok(Value::Bool(true, Src::None)),
            "psa_clone_i2e" | "psa_clone_e2e" | "psa_resubmit" => Ok(Value::Bool(false, Src::None)),
            "psa_recirculate" => {
                let v = self.arg_val(args, 0, span)?;
                let port = v
                    .field("egress_port")
                    .and_then(|p| p.as_u128())
                    .unwrap_or(0);
                Ok(Value::Bool(
                    port == crate::interp::arch::PSA_PORT_RECIRCULATE as u128,
                    Src::None,
                ))
            }
            o => {
                let _ = Expr::Default(span.clone());
                fail(format!("{span}: unsupported: extern function {o}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the walker sums for `vals` (`Run::flatten` into a buffer,
    /// then `ones_sum`): the oracle of [`ones_sum_of`].
    fn walker_sum(vals: &[Value]) -> u32 {
        let mut buf = BitBuf::default();
        for v in vals {
            match v {
                Value::Bits(b) => buf.push(b.v, b.width),
                Value::Bool(b, _) => buf.push(u128::from(*b), 1),
                o => panic!("not a list item here: {}", o.type_name()),
            }
        }
        ones_sum(&buf)
    }

    /// A `bit<W>`/`int<W>` with `v` kept as given: bits above the width
    /// set, as a value may carry them (no `Bits::new` masking).
    fn raw(width: u32, signed: bool, v: u128) -> Value {
        Value::Bits(Bits {
            width,
            signed,
            v,
            src: Src::None,
        })
    }

    fn item() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<bool>().prop_map(|b| Value::Bool(b, Src::None)),
            (0u32..=128, any::<bool>(), any::<u128>()).prop_map(|(w, s, v)| raw(w, s, v)),
            // Wide items often, so lists near and at 128 bits are common.
            (96u32..=128, any::<u128>()).prop_map(|(w, v)| raw(w, false, v)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// Lists of 0-5 items: the walker's sum when they fit 128 bits,
        /// `None` (the caller serializes) when they do not.
        #[test]
        fn ones_sum_of_is_the_walkers_sum(vals in prop::collection::vec(item(), 0..=5)) {
            let bits: u32 = vals
                .iter()
                .map(|v| match v {
                    Value::Bits(b) => b.width,
                    _ => 1,
                })
                .sum();
            let got = ones_sum_of(&vals);
            if bits <= 128 {
                prop_assert_eq!(got, Some(walker_sum(&vals)));
            } else {
                prop_assert_eq!(got, None);
            }
        }
    }

    /// The `w == 128` case (a shift by 128 would overflow), alone and
    /// after zero-width items; an empty list; a value that is not bits.
    #[test]
    fn ones_sum_of_edges() {
        let all = raw(128, false, u128::MAX);
        let odd = raw(128, true, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        for vals in [
            vec![all.clone()],
            vec![odd.clone()],
            vec![raw(0, false, 7), odd.clone(), raw(0, true, u128::MAX)],
            vec![Value::Bool(true, Src::None); 5],
            vec![raw(3, false, u128::MAX), raw(125, false, u128::MAX)],
        ] {
            assert_eq!(ones_sum_of(&vals), Some(walker_sum(&vals)), "{vals:?}");
        }
        assert_eq!(ones_sum_of(&[all.clone(), raw(1, false, 1)]), None);
        assert_eq!(ones_sum_of(&[]), Some(0));
        assert_eq!(ones_sum_of(&[raw(8, false, 1), Value::Tuple(vec![])]), None);
    }
}
