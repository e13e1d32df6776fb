//! Statement and expression evaluation for one packet: the core of the
//! interpreter. A [`Run`] holds the variable frames, the packet being
//! parsed, the bytes being emitted and the per-packet forwarding state;
//! every read of a value that still comes from the packet (or the input
//! port, or per-packet state) is recorded in the trace here.

use super::ops::{self, coerce_like, scalar_bits};
use super::{ExternState, State};
use crate::ast::{self, Arg, Direction, Expr, Stmt};
use crate::interp::check::{BlockKind, Local, Prog, Ty};
use crate::trace::Trace;
use crate::value::{mask, name_eq, Bits, HeaderVal, Src, Value};
use std::sync::Arc;

/// Instance id of the packet being parsed (`packet_in`).
pub(crate) const PKT_IN: usize = usize::MAX;
/// Instance id of the packet being built (`packet_out`).
pub(crate) const PKT_OUT: usize = usize::MAX - 1;

/// Why evaluation stopped early.
#[derive(Debug)]
pub(crate) enum Ctl {
    Exit,
    Return(Value),
    /// Parser error (`error` member name).
    Reject(String),
    /// Internal / program error: the packet is dropped and counted.
    Fail(String),
}

pub(crate) type R<T> = Result<T, Ctl>;

pub(crate) fn fail<T>(msg: impl Into<String>) -> R<T> {
    Err(Ctl::Fail(msg.into()))
}

/// Bit-level output buffer of the deparser.
#[derive(Default)]
pub(crate) struct BitBuf {
    pub bytes: Vec<u8>,
    pub bits: u64,
}

impl BitBuf {
    /// Appends the low `w` bits of `v`, MSB first, a byte's worth at a
    /// time.
    pub fn push(&mut self, v: u128, w: u32) {
        // The usual case (a field of at most 120 bits, the buffer holding
        // exactly its bits' bytes): the last partial byte's bits and the
        // field joined in one u128 and appended as one fixed 16-byte copy,
        // cut back to the bytes used. No byte loop, no variable-length
        // copy (a `memcpy` call each): the deparser pushes every field of
        // every emitted header through here. Only with 16 bytes spare: on a
        // fresh or nearly full buffer the copy would make `Vec` grow to
        // fit it, and grow again for the next field (a fresh buffer for a
        // two-byte hash list would allocate twice); the loop below grows
        // it by the bytes used.
        if w > 0
            && w <= 120
            && self.bytes.capacity() - self.bytes.len() >= 16
            && self.bytes.len() as u64 == self.bits.div_ceil(8)
        {
            let used = (self.bits % 8) as u32;
            let mut acc = v & crate::value::mask(w);
            let mut total = w;
            if used > 0 {
                if let Some(last) = self.bytes.pop() {
                    acc |= u128::from(last >> (8 - used)) << w;
                    total += used;
                }
            }
            // 1 <= total <= 127: the joined bits left-aligned in the word.
            let start = self.bytes.len();
            self.bytes
                .extend_from_slice(&(acc << (128 - total)).to_be_bytes());
            self.bytes.truncate(start + total.div_ceil(8) as usize);
            self.bits += u64::from(w);
            return;
        }
        // Wider than a u128: leading zeros.
        let mut pad = w.saturating_sub(128);
        while pad > 0 {
            let n = pad.min(64);
            self.push(0, n);
            pad -= n;
        }
        let mut left = w.min(128);
        if self.bits % 8 == 0 && self.bytes.len() as u64 * 8 == self.bits {
            // Byte-aligned: whole bytes appended as they are, in one copy.
            let n = (left / 8) as usize;
            if n > 0 {
                // The n bytes ending `left % 8` bits above the low end.
                let low = left % 8;
                let word = ((v & crate::value::mask(left)) >> low).to_be_bytes();
                self.bytes.extend_from_slice(&word[16 - n..]);
                self.bits += 8 * n as u64;
                left -= 8 * n as u32;
            }
            while left >= 8 {
                self.bytes.push((v >> (left - 8)) as u8);
                self.bits += 8;
                left -= 8;
            }
        }
        while left > 0 {
            let byte = (self.bits / 8) as usize;
            while byte >= self.bytes.len() {
                self.bytes.push(0);
            }
            let used = (self.bits % 8) as u32;
            let room = 8 - used;
            let n = room.min(left);
            let chunk = ((v >> (left - n)) as u8) & (((1u16 << n) - 1) as u8);
            self.bytes[byte] |= chunk << (room - n);
            self.bits += u64::from(n);
            left -= n;
        }
    }
}

/// Calls `f(start, len)` for each run of ones of the `w`-bit mask
/// `need`, MSB (the first bit on the wire, position 0) first; found with
/// `leading_zeros`, not bit by bit (a 48-bit field was 48 steps).
pub(crate) fn ones_runs(need: u128, w: u32, mut f: impl FnMut(u32, u32)) {
    if w == 0 {
        return;
    }
    let mut x = (need & mask(w)) << (128 - w.min(128));
    let mut i = w.saturating_sub(128);
    while x != 0 {
        let z = x.leading_zeros();
        x <<= z;
        i += z;
        let ones = (!x).leading_zeros();
        f(i, ones);
        i += ones;
        x = if ones >= 128 { 0 } else { x << ones };
    }
}

/// Reads `w` bits at bit offset `off` (caller checked the bounds): one
/// 16-byte load when the packet has them, else a
/// byte's worth at a time; of more than 128 bits the last 128 remain.
pub(crate) fn read_bits(data: &[u8], off: u64, w: u32) -> u128 {
    // Fast path: the field and its leading bits within one byte fit a
    // u128 and 16 bytes follow its first byte: one big-endian load and
    // a shift instead of a loop over its bytes.
    let first = (off / 8) as usize;
    let lead = (off % 8) as u32;
    if w > 0 && lead + w <= 128 {
        if let Some(b) = data.get(first..first + 16) {
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            return (u128::from_be_bytes(a) >> (128 - lead - w)) & crate::value::mask(w);
        }
    }
    let mut v: u128 = 0;
    let mut p = off;
    let mut left = u64::from(w);
    while left > 0 {
        let room = 8 - p % 8;
        let n = room.min(left);
        let b = data[(p / 8) as usize];
        let chunk = (b >> (room - n)) & (((1u16 << n) - 1) as u8);
        v = (v << n) | u128::from(chunk);
        p += n;
        left -= n;
    }
    v
}

/// Forwarding decisions taken by extern calls during a pass.
#[derive(Default, Debug, Clone)]
pub(crate) struct Fwd {
    /// PNA: `Some(Some(port))` send, `Some(None)` drop.
    pub pna_dest: Option<Option<u32>>,
    pub resubmit: bool,
    pub recirculate: bool,
    pub clone: Option<u32>,
    /// Field list ids of the `*_preserving_field_list` calls.
    pub resubmit_list: Option<u64>,
    pub recirculate_list: Option<u64>,
    pub clone_list: Option<u64>,
}

pub(crate) struct Run<'a> {
    pub p: &'a Prog,
    pub st: &'a mut State,
    pub tr: &'a mut Trace,
    /// Variable frames; names borrow the program's AST (no per-packet
    /// String per binding).
    pub(super) frames: Vec<Vec<(&'a str, Value)>>,
    /// Emptied frames kept for reuse, so entering a block or action does
    /// not allocate once the run has warmed up.
    spare: Vec<Vec<(&'a str, Value)>>,
    pub(super) base: usize,
    block: Option<usize>,
    /// Packet being parsed and the parser's bit position.
    pub pkt: Vec<u8>,
    pub pos: u64,
    /// Offsets of extracted fields are offsets of the packet as received
    /// (first pass); otherwise extracted bits are tainted.
    pub first_pass: bool,
    pub out: BitBuf,
    /// Where `out`'s bits came from (see [`crate::trace::EmitSpan`]).
    pub prov: Vec<crate::trace::EmitSpan>,
    /// When the packet being parsed is a frame an earlier pipeline built
    /// (PSA egress after ingress), where its bits came from: offsets are
    /// mapped back to the packet as received through it.
    pub pass_prov: Option<Vec<crate::trace::EmitSpan>>,
    pub fwd: Fwd,
    pub now: u64,
    pub in_port: u32,
    pub(super) steps: u64,
    /// Stack of (table, key values) of add_on_miss tables whose default
    /// action is running (for add_entry).
    miss_ctx: Vec<(usize, Vec<u128>)>,
    pub(super) depth: u32,
    /// Parameter values of a parser that rejected (its `out` headers are
    /// still passed on by v1model/PSA).
    pub reject_vals: Option<Vec<Value>>,
    /// A v1model verify_checksum ran: `Some(failed)`.
    pub checksum_error: Option<bool>,
    /// Taint of bits extracted outside the first pass (not offsets of
    /// the packet as received).
    pub reparse_tag: &'static str,
    /// Set while recording the right-hand side of an assignment.
    pub(super) assigning: bool,
    /// Non-zero while evaluating checksum data: reads are not recorded
    /// (the datapath recomputes checksums).
    pub quiet: u32,
    /// The flat headers' layout while the main blocks run with them
    /// (`arch::run_block_slots`); their values are `st.pool.flat`.
    pub(crate) flat: Option<&'a super::fast::FlatLayout>,
    /// The name the running main block gives the flat headers.
    pub(crate) flat_root: &'a str,
    /// The compiled arguments of the extern method being called
    /// (`fast::CExpr::Method`'s `cargs`): `arg_val` and `data_bits`
    /// evaluate these instead of the AST.
    pub(crate) cargs: Option<&'a [super::fast::CArg]>,
    /// Where the running scalar-bound action's parameters start in
    /// `st.pool.aparams` (`fast::SAction`; `call_table_action`).
    pub(crate) abase: usize,
    /// Runs the reference paths only (the evaluator as it was before
    /// the per-packet fast paths): the differential test compares the
    /// two on the corpus. Never set on the data path.
    pub reference: bool,
}

pub(super) const MAX_STEPS: u64 = 200_000;
/// Recursion bound of [`Run::enter`].
pub(super) const MAX_DEPTH: u32 = 256;

impl<'a> Run<'a> {
    pub fn new(
        p: &'a Prog,
        st: &'a mut State,
        tr: &'a mut Trace,
        pkt: Vec<u8>,
        in_port: u32,
        now: u64,
    ) -> Run<'a> {
        // Frames kept from the pipeline's earlier packets: entering a
        // block or action allocates nothing once the pipeline is warm.
        // `&'static str` frames are `&'a str` frames (covariance): no
        // conversion this way, only back in `recycle_buffers`.
        let spare: Vec<Vec<(&'a str, Value)>> = std::mem::take(&mut st.pool.frames);
        let mut stack: Vec<Vec<(&'a str, Value)>> = std::mem::take(&mut st.pool.frame_stack);
        stack.clear();
        let mut out_bytes = std::mem::take(&mut st.pool.out);
        out_bytes.clear();
        Run {
            p,
            st,
            tr,
            frames: stack,
            spare,
            base: 0,
            block: None,
            pkt,
            pos: 0,
            first_pass: true,
            out: BitBuf {
                bytes: out_bytes,
                bits: 0,
            },
            prov: Vec::new(),
            pass_prov: None,
            fwd: Fwd::default(),
            now,
            in_port,
            steps: 0,
            miss_ctx: Vec::new(),
            depth: 0,
            reject_vals: None,
            checksum_error: None,
            quiet: 0,
            reparse_tag: "p4-recirculate",
            assigning: false,
            flat: None,
            flat_root: "",
            cargs: None,
            abase: 0,
            reference: false,
        }
    }

    /// Parameter `i` of the running scalar-bound action (`fast::SAction`):
    /// its value and source; `None` outside one.
    #[inline]
    pub(crate) fn aparam(&self, i: usize) -> Option<(u128, Src)> {
        self.st.pool.aparams.get(self.abase + i).copied()
    }

    /// Gives the run's reusable buffers (frames, the packet buffer) back
    /// to the pipeline for its next packet.
    pub fn recycle_buffers(&mut self) {
        let mut frames = std::mem::take(&mut self.spare);
        frames.append(&mut self.frames);
        frames.truncate(64);
        let pool = relabel(frames);
        self.st.pool.frames = pool;
        // The emptied stack (its capacity kept: `relabel` reuses the
        // vector).
        self.st.pool.frame_stack = relabel(std::mem::take(&mut self.frames));
        let mut pkt = std::mem::take(&mut self.pkt);
        pkt.clear();
        self.st.pool.pkt = pkt;
        let mut out = std::mem::take(&mut self.out.bytes);
        out.clear();
        self.st.pool.out = out;
    }

    pub(super) fn tick(&mut self) -> R<()> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return fail("step limit exceeded (loop?)");
        }
        Ok(())
    }

    // ---- trace -------------------------------------------------------

    /// Records that the first pass's parser needed the packet to be at
    /// least `end_bits` long.
    pub(super) fn need_bytes(&mut self, end_bits: u64) {
        if self.first_pass {
            let b = end_bits.div_ceil(8).min(u32::MAX as u64) as u32;
            self.tr.min_packet_len = self.tr.min_packet_len.max(b);
        }
    }

    /// Records that the run depended on scalar `v` (all of it).
    pub fn use_val(&mut self, v: &Value) {
        match v {
            Value::Bits(b) => self.use_src(b.src, b.width, mask(b.width), b.width),
            Value::Varbit(v) => {
                if self.quiet > 0 {
                    return;
                }
                if let Src::Packet(off) = v.src {
                    self.read_packet(off, v.len);
                } else if v.len > 0 {
                    self.use_src(v.src, 1, 1, 1);
                }
            }
            Value::Bool(_, s) | Value::Error(_, s) => self.use_src(*s, 1, 1, 1),
            Value::Header(h) => h.fields.iter().for_each(|f| self.use_val(f)),
            Value::Struct(_, _, vs) | Value::Tuple(vs) => vs.iter().for_each(|f| self.use_val(f)),
            Value::Stack(s) => s.elems.iter().for_each(|f| self.use_val(f)),
            _ => {}
        }
    }

    /// Records that the run depended on `len` bits at `off` of the frame
    /// being parsed, mapped back to the packet as received.
    fn read_packet(&mut self, off: u32, len: u32) {
        match &self.pass_prov {
            None => self.tr.read(off, len),
            Some(pp) => {
                for (n, from) in crate::trace::map_back(pp, off, len) {
                    if let Some(f) = from {
                        self.tr.read(f, n);
                    }
                }
            }
        }
    }

    /// Records the bits of `need` (a mask over a `w`-bit value whose source
    /// is `src`; bit w-1 is the first on the wire).
    pub fn use_src(&mut self, src: Src, w: u32, need: u128, _full: u32) {
        let need = need & mask(w);
        if need == 0 || self.quiet > 0 {
            return;
        }
        match src {
            Src::None => {}
            Src::InPort => self.tr.in_port_read = true,
            Src::Tainted(t) => self.tr.set_uncacheable(t),
            Src::Checksum => {
                if !self.assigning {
                    self.tr.set_uncacheable("p4-checksum-verify")
                }
            }
            Src::Packet(off) => ones_runs(need, w, |start, len| self.read_packet(off + start, len)),
        }
    }

    // ---- frames ------------------------------------------------------

    pub(super) fn declare(&mut self, name: &'a str, v: Value) {
        if let Some(f) = self.frames.last_mut() {
            if let Some(slot) = f.iter_mut().find(|(n, _)| name_eq(n, name)) {
                slot.1 = v;
            } else {
                f.push((name, v));
            }
        }
    }

    /// An empty frame, reused from an earlier block if one is spare.
    pub(super) fn new_frame(&mut self) -> Vec<(&'a str, Value)> {
        self.spare.pop().unwrap_or_default()
    }

    /// Pops the innermost frame, keeping its storage for reuse.
    pub(super) fn pop_frame(&mut self) {
        if let Some(mut f) = self.frames.pop() {
            f.clear();
            self.spare.push(f);
        }
    }

    /// Keeps `f`'s storage for reuse.
    pub(super) fn recycle(&mut self, mut f: Vec<(&'a str, Value)>) {
        f.clear();
        self.spare.push(f);
    }

    pub(super) fn var(&self, name: &str) -> Option<&Value> {
        var_in(&self.frames[self.base..], name)
    }

    pub(super) fn var_mut(&mut self, name: &str) -> Option<&mut Value> {
        let base = self.base;
        for f in self.frames[base..].iter_mut().rev() {
            if let Some((_, v)) = f.iter_mut().rev().find(|(n, _)| name_eq(n, name)) {
                return Some(v);
            }
        }
        None
    }

    /// The innermost variable holding a struct of type `ty`.
    pub fn find_struct_mut(&mut self, ty: &str) -> Option<&mut Value> {
        self.frames
            .iter_mut()
            .rev()
            .flat_map(|f| f.iter_mut().rev())
            .map(|(_, v)| v)
            .find(|v| matches!(v, Value::Struct(n, _, _) if &**n == ty))
    }

    fn local(&self, name: &str) -> Option<&'a Local> {
        let p: &'a Prog = self.p;
        self.block.and_then(|b| p.blocks[b].locals.get(name))
    }

    fn resolve_ty(&self, t: &ast::Type) -> R<Ty> {
        let locals = self.block.map(|b| &self.p.blocks[b].locals);
        self.p
            .resolve_type(t, locals)
            .map_err(|e| Ctl::Fail(e.to_string()))
    }

    // ---- expressions ---------------------------------------------------

    /// Evaluates `e` without recording anything (callers record).
    pub fn eval(&mut self, e: &Expr) -> R<Value> {
        self.enter()?;
        let r = self.eval_inner(e);
        self.depth -= 1;
        r
    }

    /// Bounds the interpreter's recursion (nested expressions,
    /// statements and calls) so that no program can overflow the stack.
    /// `x op literal` with the literal already converted to `x`'s width:
    /// counts and records what evaluating the literal operand would have.
    pub(super) fn binop_lit(
        &mut self,
        op: ast::BinOp,
        x: Value,
        yb: Bits,
        span: &crate::ast::Span,
    ) -> R<Value> {
        self.enter()?;
        self.depth -= 1;
        self.use_val(&x);
        ops::binop(op, x, Value::Bits(yb)).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
    }

    pub(super) fn enter(&mut self) -> R<()> {
        self.tick()?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return fail(format!(
                "nesting deeper than {MAX_DEPTH} (expressions, statements and calls)"
            ));
        }
        Ok(())
    }

    fn eval_inner(&mut self, e: &Expr) -> R<Value> {
        match e {
            Expr::Int(lit, _) => {
                if !self.reference {
                    if let Some((w, s)) = lit.width {
                        if let Some(b) = lit_bits(lit, w, s) {
                            return Ok(Value::Bits(b));
                        }
                    }
                }
                Ok(crate::interp::check::int_lit(lit))
            }
            Expr::Bool(b, _) => Ok(Value::Bool(*b, Src::None)),
            Expr::Str(s, _) => Ok(Value::Str(Arc::from(s.as_str()))),
            Expr::Path(id) => self.eval_path(id),
            Expr::Member(base, m) => self.eval_member(base, m),
            Expr::Index(base, idx, _) => {
                let i = self.eval(idx)?;
                self.use_val(&i);
                let i = i
                    .as_u128()
                    .ok_or(Ctl::Fail("index is not an integer".into()))?
                    as usize;
                match self.eval(base)? {
                    Value::Stack(s) => match s.elems.get(i) {
                        Some(v) => Ok(v.clone()),
                        None => Err(Ctl::Reject("StackOutOfBounds".into())),
                    },
                    Value::Tuple(t) => t
                        .get(i)
                        .cloned()
                        .ok_or(Ctl::Fail("tuple index out of range".into())),
                    o => fail(format!("indexing a {}", o.type_name())),
                }
            }
            Expr::Slice { expr, hi, lo, span } => {
                let v = self.eval(expr)?;
                let hi = self.const_u32(hi)?;
                let lo = self.const_u32(lo)?;
                ops::slice(&v, hi, lo).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            Expr::Call {
                func,
                type_args,
                args,
                span,
            } => self.call(func, type_args, args, span),
            Expr::Unary(op, a, span) => {
                let a = self.eval(a)?;
                self.use_val(&a);
                ops::unop(*op, a).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            Expr::Binary(op, a, b, span) => {
                // Short-circuit && and ||.
                if matches!(op, ast::BinOp::And | ast::BinOp::Or) {
                    let x = self.eval(a)?;
                    self.use_val(&x);
                    if let Value::Bool(xb, _) = x {
                        if (*op == ast::BinOp::And && !xb) || (*op == ast::BinOp::Or && xb) {
                            return Ok(Value::Bool(xb, Src::None));
                        }
                    }
                    let y = self.eval(b)?;
                    self.use_val(&y);
                    return ops::binop(*op, x, y).map_err(|m| Ctl::Fail(format!("{span}: {m}")));
                }
                let x = self.eval(a)?;
                // `field op 1`: the unsized literal converted to the
                // field's type without a big integer (as ops::binop
                // would convert it).
                if let (false, Value::Bits(xb), Expr::Int(lit, _)) = (self.reference, &x, &**b) {
                    if lit.width.is_none()
                        && !matches!(op, ast::BinOp::Shl | ast::BinOp::Shr | ast::BinOp::Concat)
                    {
                        if let Some(yb) = lit_bits(lit, xb.width, xb.signed) {
                            return self.binop_lit(*op, x, yb, span);
                        }
                    }
                }
                let y = self.eval(b)?;
                self.use_val(&x);
                self.use_val(&y);
                ops::binop(*op, x, y).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            Expr::Ternary(c, a, b, span) => {
                let c = self.eval(c)?;
                self.use_val(&c);
                match c {
                    Value::Bool(true, _) => self.eval(a),
                    Value::Bool(false, _) => self.eval(b),
                    _ => fail(format!("{span}: condition is not a boolean")),
                }
            }
            Expr::Cast(t, a, span) => {
                let ty = self.resolve_ty(t)?;
                let v = self.eval(a)?;
                if !matches!(v, Value::Struct(..) | Value::Tuple(..) | Value::Header(..)) {
                    self.use_val(&v);
                }
                ops::cast(&ty, v).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            Expr::List(items, _) => Ok(Value::Tuple(
                items.iter().map(|i| self.eval(i)).collect::<R<_>>()?,
            )),
            Expr::StructInit(fields, _) => {
                let mut names = Vec::new();
                let mut vals = Vec::new();
                for (n, e) in fields {
                    names.push(n.name.clone());
                    vals.push(self.eval(e)?);
                }
                Ok(Value::Struct(Arc::from(""), names.into(), vals))
            }
            Expr::TypeRef(_, span) => fail(format!("{span}: unsupported: type used as a value")),
            Expr::Mask(_, _, s) | Expr::Range(_, _, s) | Expr::Default(s) | Expr::DontCare(s) => {
                fail(format!("{s}: keyset expression outside select/entries"))
            }
        }
    }

    fn const_u32(&mut self, e: &Expr) -> R<u32> {
        let v = self.eval(e)?;
        v.as_u128()
            .map(|v| v as u32)
            .ok_or(Ctl::Fail(format!("{}: not an integer", e.span())))
    }

    fn eval_path(&mut self, id: &ast::Ident) -> R<Value> {
        if let Some(v) = self.var(&id.name) {
            return Ok(v.clone());
        }
        match self.local(&id.name) {
            Some(Local::Const(v)) => return Ok(v.clone()),
            Some(Local::Extern(i)) => return Ok(Value::Instance(*i)),
            Some(_) => return fail(format!("{}: {} is not a value", id.span, id.name)),
            None => {}
        }
        if let Some(v) = self.p.g.consts.get(&id.name) {
            return Ok(v.clone());
        }
        fail(format!("{}: unknown name {}", id.span, id.name))
    }

    fn eval_member(&mut self, base: &Expr, m: &ast::Ident) -> R<Value> {
        if let Expr::Path(ty) = base {
            if self.var(&ty.name).is_none() {
                if ty.name == "error" {
                    return Ok(ops::err_value(&m.name));
                }
                if let Some(en) = self.p.g.enums.get(&ty.name) {
                    return crate::interp::check::enum_member(&ty.name, en, &m.name, &m.span)
                        .map_err(|e| Ctl::Fail(e.to_string()));
                }
            }
        }
        // Fast path: borrow instead of cloning the whole aggregate.
        if let Some(v) = self.peek(base) {
            if let Some(f) = v.field(&m.name) {
                return Ok(f.clone());
            }
        }
        let v = self.eval(base)?;
        match (&v, m.name.as_str()) {
            (Value::ApplyResult { hit, .. }, "hit") => Ok(Value::Bool(*hit, Src::None)),
            (Value::ApplyResult { hit, .. }, "miss") => Ok(Value::Bool(!*hit, Src::None)),
            (Value::ApplyResult { .. }, "action_run") => Ok(v),
            (Value::Stack(s), "next") => s
                .elems
                .get(s.next)
                .cloned()
                .ok_or(Ctl::Reject("StackOutOfBounds".into())),
            (Value::Stack(s), "last") => {
                if s.next == 0 {
                    return Err(Ctl::Reject("StackOutOfBounds".into()));
                }
                Ok(s.elems[s.next - 1].clone())
            }
            (Value::Stack(s), "lastIndex") => Ok(Value::Bits(Bits::unsigned(
                32,
                (s.next as u128).wrapping_sub(1),
            ))),
            (Value::Stack(s), "nextIndex") => Ok(Value::Bits(Bits::unsigned(32, s.next as u128))),
            (Value::Stack(s), "size") => Ok(Value::Bits(Bits::unsigned(32, s.elems.len() as u128))),
            _ => match v.field(&m.name) {
                Some(f) => Ok(f.clone()),
                None => fail(format!(
                    "{}: {} has no field {}",
                    m.span,
                    v.type_name(),
                    m.name
                )),
            },
        }
    }

    /// A reference to a variable's (sub)value without evaluation, for
    /// plain paths and field accesses.
    fn peek(&self, e: &Expr) -> Option<&Value> {
        peek_in(&self.frames[self.base..], e)
    }

    /// A mutable reference to an lvalue.
    pub fn lvalue(&mut self, e: &Expr) -> R<&mut Value> {
        match e {
            Expr::Path(id) => match self.var_mut(&id.name) {
                Some(v) => Ok(v),
                None => fail(format!("{}: {} is not a variable", id.span, id.name)),
            },
            Expr::Member(b, m) => {
                let base = self.lvalue(b)?;
                let stack_op =
                    matches!(base, Value::Stack(_)) && (m.name == "next" || m.name == "last");
                if stack_op {
                    let Value::Stack(s) = base else {
                        return fail("not a stack");
                    };
                    let n = s.next;
                    let i = if m.name == "next" {
                        n
                    } else if n == 0 {
                        return Err(Ctl::Reject("StackOutOfBounds".into()));
                    } else {
                        n - 1
                    };
                    return s
                        .elems
                        .get_mut(i)
                        .ok_or(Ctl::Reject("StackOutOfBounds".into()));
                }
                let tn = base.type_name();
                base.field_mut(&m.name)
                    .ok_or_else(|| Ctl::Fail(format!("{}: {} has no field {}", m.span, tn, m.name)))
            }
            Expr::Index(b, i, span) => {
                let i = self.eval(i)?;
                self.use_val(&i);
                let i = i.as_u128().unwrap_or(u128::MAX);
                match self.lvalue(b)? {
                    Value::Stack(s) => {
                        let i = usize::try_from(i).unwrap_or(usize::MAX);
                        s.elems
                            .get_mut(i)
                            .ok_or(Ctl::Reject("StackOutOfBounds".into()))
                    }
                    _ => fail(format!("{span}: indexing a non-stack")),
                }
            }
            o => fail(format!("{}: not an lvalue", o.span())),
        }
    }

    /// `lhs = v` (with slices and implicit conversions).
    pub fn assign(&mut self, lhs: &Expr, v: Value) -> R<()> {
        if let Expr::Slice { expr, hi, lo, span } = lhs {
            let hi = self.const_u32(hi)?;
            let lo = self.const_u32(lo)?;
            let target = self.lvalue(expr)?;
            let Value::Bits(t) = target else {
                return fail(format!("{span}: slice of a non-bit value"));
            };
            if hi < lo || hi >= t.width {
                return fail(format!("{span}: slice out of range"));
            }
            let w = hi - lo + 1;
            let nv = match &v {
                Value::Bits(b) => b.v,
                Value::Int(i) => Bits::from_bigint(w, false, i).v,
                _ => return fail(format!("{span}: assigning a {} to a slice", v.type_name())),
            } & mask(w);
            let m = mask(w) << lo;
            t.v = (t.v & !m) | (nv << lo);
            // The field no longer holds the packet's bits: its bits outside
            // the slice still do, so they are recorded as read (the cache
            // then writes the whole field and matches those bits), and
            // the field counts as written from now on.
            if let Src::Packet(_) = t.src {
                let (src, width) = (t.src, t.width);
                let keep = !m & mask(width);
                t.src = Src::None;
                self.use_src(src, width, keep, width);
            }
            return Ok(());
        }
        let target = self.lvalue(lhs)?;
        let nv = coerce_like(target, v).map_err(|m| Ctl::Fail(format!("{}: {m}", lhs.span())))?;
        let old = std::mem::replace(target, nv);
        // A replaced header or struct (a function's `inout` header copied
        // out) is kept for the next copy-in instead of freed.
        if !self.reference
            && matches!(old, Value::Header(_) | Value::Struct(..))
            && self.st.pool.agg_spare.len() < 8
        {
            self.st.pool.agg_spare.push(old);
        }
        Ok(())
    }

    // ---- statements ----------------------------------------------------

    pub fn exec_block(&mut self, b: &'a ast::Block) -> R<()> {
        let f = self.new_frame();
        self.frames.push(f);
        let r = b.stmts.iter().try_for_each(|s| self.exec(s));
        self.pop_frame();
        r
    }

    pub fn exec(&mut self, s: &'a Stmt) -> R<()> {
        self.enter()?;
        let r = self.exec_inner(s);
        self.depth -= 1;
        r
    }

    fn exec_inner(&mut self, s: &'a Stmt) -> R<()> {
        match s {
            Stmt::Assign { lhs, rhs, .. } => {
                let v = self.eval(rhs)?;
                // Copying a computed checksum is not a decision on it.
                self.assigning = true;
                self.use_val(&v);
                self.assigning = false;
                self.assign(lhs, v)
            }
            Stmt::Call(e) => self.eval(e).map(|_| ()),
            Stmt::If {
                cond,
                then,
                otherwise,
                span,
            } => {
                let c = self.eval(cond)?;
                self.use_val(&c);
                match c {
                    Value::Bool(true, _) => self.exec(then),
                    Value::Bool(false, _) => match otherwise {
                        Some(o) => self.exec(o),
                        None => Ok(()),
                    },
                    _ => fail(format!("{span}: condition is not a boolean")),
                }
            }
            Stmt::Block(b) => self.exec_block(b),
            Stmt::Switch { expr, cases, span } => self.exec_switch(expr, cases, span),
            Stmt::Exit(_) => Err(Ctl::Exit),
            Stmt::Return(e, _) => {
                let v = match e {
                    Some(e) => self.eval(e)?,
                    None => Value::Void,
                };
                Err(Ctl::Return(v))
            }
            Stmt::Var(v) => {
                let ty = self.resolve_ty(&v.ty)?;
                let mut val = ty.default_value();
                if let Some(init) = &v.init {
                    let iv = self.eval(init)?;
                    self.use_val(&iv);
                    val =
                        coerce_like(&val, iv).map_err(|m| Ctl::Fail(format!("{}: {m}", v.span)))?;
                }
                self.declare(&v.name.name, val);
                Ok(())
            }
            Stmt::Const(c) => {
                let ty = self.resolve_ty(&c.ty)?;
                let iv = self.eval(&c.value)?;
                let val =
                    ops::coerce(&ty, iv).map_err(|m| Ctl::Fail(format!("{}: {m}", c.span)))?;
                self.declare(&c.name.name, val);
                Ok(())
            }
            Stmt::Instantiation(i) => fail(format!(
                "{}: unsupported: instantiation inside a block",
                i.span
            )),
            Stmt::Empty(_) => Ok(()),
        }
    }

    fn exec_switch(
        &mut self,
        expr: &Expr,
        cases: &'a [ast::SwitchCase],
        span: &crate::ast::Span,
    ) -> R<()> {
        let v = self.eval(expr)?;
        let mut matched = false;
        for c in cases {
            if !matched {
                matched = match (&c.label, &v) {
                    (Expr::Default(_), _) => true,
                    (Expr::Path(id), Value::ApplyResult { action, .. }) => {
                        let a = &self.p.actions[*action];
                        a.decl.name.name == id.name
                            || a.qname == id.name
                            || a.qname.ends_with(&format!(".{}", id.name))
                    }
                    (l, v) => {
                        self.use_val(v);
                        let lv = self.eval(l)?;
                        ops::eq_vals(&lv, v).map_err(|m| Ctl::Fail(format!("{span}: {m}")))?
                    }
                };
            }
            if matched {
                if let Some(b) = &c.body {
                    return self.exec_block(b);
                }
            }
        }
        Ok(())
    }

    // ---- calls ---------------------------------------------------------

    fn call(
        &mut self,
        func: &Expr,
        type_args: &[ast::Type],
        args: &[Arg],
        span: &crate::ast::Span,
    ) -> R<Value> {
        self.enter()?;
        let r = self.call_inner(func, type_args, args, span);
        self.depth -= 1;
        r
    }

    fn call_inner(
        &mut self,
        func: &Expr,
        type_args: &[ast::Type],
        args: &[Arg],
        span: &crate::ast::Span,
    ) -> R<Value> {
        match func {
            Expr::Member(obj, m) => {
                let name = m.name.as_str();
                // Methods on headers and stacks.
                match name {
                    "isValid" => return self.is_valid(obj, span),
                    "setValid" | "setInvalid" => {
                        let valid = name == "setValid";
                        // A header union member: the others become invalid.
                        if let Expr::Member(parent, member) = &**obj {
                            let p = self.p;
                            if union_select(p, self.lvalue(parent)?, &member.name, valid) {
                                return Ok(Value::Void);
                            }
                        }
                        match self.lvalue(obj)? {
                            Value::Header(h) => h.valid = valid,
                            o => return fail(format!("{span}: {name} on a {}", o.type_name())),
                        }
                        return Ok(Value::Void);
                    }
                    "push_front" | "pop_front" => {
                        let n = self
                            .eval(&args.first().ok_or(Ctl::Fail("missing count".into()))?.value)?;
                        let n = n.as_u128().unwrap_or(0) as usize;
                        let Value::Stack(s) = self.lvalue(obj)? else {
                            return fail(format!("{span}: {name} on a non-stack"));
                        };
                        let len = s.elems.len();
                        let n = n.min(len);
                        if name == "push_front" {
                            s.elems.rotate_right(n);
                            for e in s.elems.iter_mut().take(n) {
                                e.reset();
                            }
                            s.next = (s.next + n).min(len);
                        } else {
                            s.elems.rotate_left(n);
                            for e in s.elems.iter_mut().skip(len - n) {
                                e.reset();
                            }
                            s.next = s.next.saturating_sub(n);
                        }
                        return Ok(Value::Void);
                    }
                    _ => {}
                }
                if let Expr::Path(id) = &**obj {
                    if self.var(&id.name).is_none() {
                        match self.local(&id.name) {
                            Some(Local::Table(t)) if name == "apply" => {
                                return self.apply_table(*t)
                            }
                            Some(Local::Block(b)) if name == "apply" => {
                                return self.apply_sub_block(*b, args, span)
                            }
                            None if name == "apply" => {
                                if let Some(b) = self.p.direct_blocks.get(&id.name) {
                                    return self.apply_sub_block(*b, args, span);
                                }
                            }
                            _ => {}
                        }
                    }
                }
                let recv = self.eval(obj)?;
                self.call_method(recv, name, type_args, args, span)
            }
            Expr::Path(id) => {
                let n = id.name.as_str();
                if let Some(Local::Action(a)) = self.local(n) {
                    return self.call_action(*a, Some(args), None);
                }
                let p: &'a Prog = self.p;
                if let Some(f) = p.g.functions.get(n) {
                    let f: &'a crate::interp::check::FuncDef = f;
                    return self.invoke(
                        &f.decl.proto.params,
                        &f.param_tys,
                        args,
                        None,
                        &f.decl.body,
                        None,
                        true,
                        Some(None),
                        None,
                    );
                }
                if let Some(a) = self.p.g.actions.get(n) {
                    return self.call_action(*a, Some(args), None);
                }
                self.extern_function(n, type_args, args, span)
            }
            o => fail(format!("{}: unsupported call", o.span())),
        }
    }

    /// `obj.isValid()`: borrows the header when it is a plain path
    /// (cloning it costs a Vec per call).
    pub(super) fn is_valid(&mut self, obj: &Expr, span: &crate::ast::Span) -> R<Value> {
        let owned;
        let v = match self.peek(obj) {
            Some(v) => v,
            None => {
                owned = self.eval(obj)?;
                &owned
            }
        };
        Ok(Value::Bool(
            match v {
                Value::Header(h) => h.valid,
                Value::Struct(_, _, fs) => {
                    fs.iter().any(|f| matches!(f, Value::Header(h) if h.valid))
                }
                _ => return fail(format!("{span}: isValid on a {}", v.type_name())),
            },
            Src::None,
        ))
    }

    /// A method call on an evaluated receiver: the packet being parsed or
    /// built, or an extern instance.
    pub(super) fn call_method(
        &mut self,
        recv: Value,
        name: &str,
        type_args: &[ast::Type],
        args: &[Arg],
        span: &crate::ast::Span,
    ) -> R<Value> {
        match recv {
            Value::Instance(PKT_IN) => self.packet_in_method(name, type_args, args, span),
            Value::Instance(PKT_OUT) => {
                if name != "emit" {
                    return fail(format!("{span}: unsupported: packet_out.{name}"));
                }
                for a in args {
                    self.emit_arg(a)?;
                }
                Ok(Value::Void)
            }
            Value::Instance(i) => self.extern_method(i, name, args, span),
            o => fail(format!("{span}: method {name} on a {}", o.type_name())),
        }
    }

    /// Emits one argument of `packet_out.emit`: the header in place when
    /// it is a plain path (no clone of the aggregate), else its value.
    pub(super) fn emit_arg(&mut self, a: &Arg) -> R<()> {
        if let Some(v) = peek_in(&self.frames[self.base..], &a.value) {
            emit_into(&mut self.out, &mut self.prov, v)
        } else {
            let v = self.eval(&a.value)?;
            self.emit(&v)
        }
    }

    /// Runs action `a` with directional arguments `args` (direct call)
    /// and/or action data `data` (from a table).
    pub fn call_action(
        &mut self,
        a: usize,
        args: Option<&[Arg]>,
        data: Option<Vec<Value>>,
    ) -> R<Value> {
        self.call_action_with(a, args, data, None)
    }

    /// [`Run::call_action`], with the body `spec` compiled for flat
    /// header arguments when given.
    pub(crate) fn call_action_with(
        &mut self,
        a: usize,
        args: Option<&[Arg]>,
        data: Option<Vec<Value>>,
        spec: Option<&'a super::fast::FlatSpec>,
    ) -> R<Value> {
        let p: &'a Prog = self.p;
        let ad = &p.actions[a];
        let barrier = ad.block.is_none() || ad.block != self.block;
        let callee = if barrier { Some(ad.block) } else { None };
        let compiled = match spec {
            Some(s) => Some(s.body.as_slice()),
            None => self.code().map(|c| c.actions[a].as_slice()),
        };
        self.invoke(
            &ad.decl.params,
            &ad.param_tys,
            args.unwrap_or(&[]),
            data,
            &ad.decl.body,
            compiled,
            barrier,
            callee,
            spec,
        )
    }

    /// Binds parameters (copy-in), runs `body` (its compiled form
    /// `compiled` when there is one), copies out. `spec`: the specialised
    /// body's parameters (`fast::FlatSpec`): nothing bound, copied in or
    /// out for one that stands for a flat header or is bound to an
    /// extern instance at load (that one's argument counted as the
    /// walker's `eval` of it counts: one step).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn invoke(
        &mut self,
        params: &'a [ast::Param],
        tys: &[Ty],
        args: &[Arg],
        mut data: Option<Vec<Value>>,
        body: &'a ast::Block,
        compiled: Option<&'a [super::fast::CStmt]>,
        barrier: bool,
        callee_block: Option<Option<usize>>,
        spec: Option<&super::fast::FlatSpec>,
    ) -> R<Value> {
        let mut frame = self.new_frame();
        // (parameter, argument) pairs to copy out, in a vector the
        // pipeline keeps (no allocation per call).
        let mut copy_out: Vec<(usize, usize)> = self.st.pool.copy_outs.pop().unwrap_or_default();
        copy_out.clear();
        let mut next_data = 0usize;
        let mut pos = 0usize;
        for (i, p) in params.iter().enumerate() {
            let ty = tys.get(i).unwrap_or(&Ty::Void);
            // Action data comes from the table for directionless params
            // when the call is a table's.
            if p.direction == Direction::None {
                if let Some(d) = data.as_mut() {
                    let v = match d.get_mut(next_data) {
                        Some(v) => std::mem::replace(v, Value::Void),
                        None => ty.default_value(),
                    };
                    next_data += 1;
                    frame.push((p.name.name.as_str(), v));
                    continue;
                }
            }
            let arg = args
                .iter()
                .position(|a| {
                    a.name
                        .as_ref()
                        .map(|n| n.name == p.name.name)
                        .unwrap_or(false)
                })
                .or_else(|| {
                    let a = args.get(pos).filter(|a| a.name.is_none()).map(|_| pos);
                    if a.is_some() {
                        pos += 1;
                    }
                    a
                });
            if let Some(s) = spec {
                if s.alias.get(i).is_some_and(Option::is_some)
                    || s.insts.get(i).is_some_and(Option::is_some)
                {
                    // The body reads and writes the flat header itself,
                    // or names the instance itself. The walker's `eval`
                    // of the argument (a name, a header of a variable) is
                    // one `enter`: counted, so that the step limit falls
                    // where the walker's does (its copy-out counts none).
                    if let Err(x) = self.enter() {
                        self.recycle(frame);
                        return Err(x);
                    }
                    self.depth -= 1;
                    frame.push(("", Value::Void));
                    continue;
                }
            }
            let v = match (arg.map(|ai| (ai, &args[ai])), p.direction) {
                (Some((ai, a)), Direction::Out) => {
                    if !matches!(a.value, Expr::DontCare(_)) {
                        copy_out.push((i, ai));
                    }
                    ty.default_value()
                }
                (Some((ai, a)), d) => {
                    let v = self.eval_copy_in(&a.value, ty)?;
                    if d == Direction::InOut {
                        copy_out.push((i, ai));
                    }
                    match ty {
                        Ty::Named(_) | Ty::Int | Ty::Void => v,
                        t => ops::coerce(t, v)
                            .map_err(|m| Ctl::Fail(format!("{}: {m}", p.name.span)))?,
                    }
                }
                (None, _) => match &p.default {
                    Some(d) => {
                        let v = self.eval(d)?;
                        ops::coerce(ty, v)
                            .map_err(|m| Ctl::Fail(format!("{}: {m}", p.name.span)))?
                    }
                    None => ty.default_value(),
                },
            };
            frame.push((p.name.name.as_str(), v));
        }
        if let Some(mut d) = data {
            // The action data's vector, for the next table hit.
            if !self.reference && self.st.pool.data.len() < 16 {
                d.clear();
                self.st.pool.data.push(d);
            }
        }
        let (mut frame, r) = self.run_frame(frame, body, compiled, barrier, callee_block);
        let ret = match r {
            Ok(()) => Value::Void,
            Err(Ctl::Return(v)) => v,
            Err(Ctl::Exit) => {
                // Copy out, then keep exiting.
                self.copy_out(params, args, &mut frame, &mut copy_out)?;
                self.recycle(frame);
                return Err(Ctl::Exit);
            }
            Err(e) => return Err(e),
        };
        self.copy_out(params, args, &mut frame, &mut copy_out)?;
        self.recycle(frame);
        Ok(ret)
    }

    /// Runs `body` (its compiled form `compiled` when there is one) with
    /// the parameters bound in `frame` (`invoke`'s barrier and callee
    /// block); gives the frame back with the outcome.
    fn run_frame(
        &mut self,
        frame: Vec<(&'a str, Value)>,
        body: &'a ast::Block,
        compiled: Option<&'a [super::fast::CStmt]>,
        barrier: bool,
        callee_block: Option<Option<usize>>,
    ) -> (Vec<(&'a str, Value)>, R<()>) {
        let saved_base = self.base;
        let saved_block = self.block;
        if let Some(b) = callee_block {
            self.block = b;
        }
        self.frames.push(frame);
        if barrier {
            self.base = self.frames.len() - 1;
        }
        let r = match compiled {
            Some(c) => c.iter().try_for_each(|s| self.cexec(s)),
            None => body.stmts.iter().try_for_each(|s| self.exec(s)),
        };
        let frame = self.frames.pop().unwrap_or_default();
        self.base = saved_base;
        self.block = saved_block;
        (frame, r)
    }

    /// A table's call of action `a` with the action data of the entry at
    /// `entry` of table `t` (`(runtime?, index)`; `None`: the table's
    /// default action data), when every parameter of the action is
    /// directionless (action data only, nothing bound in the table's
    /// actions list): each parameter is bound in the frame straight from
    /// the data where it sits, in order (a missing datum gives the type's
    /// default, as `invoke`), with no vector of values in between, no
    /// argument search and nothing to copy out. `None` when the action
    /// does not qualify or this is the reference run: the caller then
    /// calls `call_action` (the walker's way, which this must equal).
    /// Why: every table hit of a packet went through `invoke`'s general
    /// path (docs/results/p4.md 2n).
    pub(crate) fn call_table_action(
        &mut self,
        t: usize,
        a: usize,
        entry: Option<(bool, usize)>,
    ) -> Option<R<Value>> {
        let p: &'a Prog = self.p;
        let ad = &p.actions[a];
        let params: &'a [ast::Param] = &ad.decl.params;
        if self.reference || params.iter().any(|x| x.direction != Direction::None) {
            return None;
        }
        if let Some(r) = self.call_scalar_action(t, a, entry) {
            return Some(r);
        }
        let mut frame = self.new_frame();
        let data = entry_data(p, &self.st.tables, t, entry);
        let Some(data) = data else {
            // An entry `locate` did not give (unreachable today): the
            // pooled frame goes back to the pool, not dropped.
            self.recycle(frame);
            return None;
        };
        for (i, prm) in params.iter().enumerate() {
            let v = match data.get(i) {
                Some(v) => v.clone(),
                None => ad.param_tys.get(i).unwrap_or(&Ty::Void).default_value(),
            };
            frame.push((prm.name.name.as_str(), v));
        }
        let barrier = ad.block.is_none() || ad.block != self.block;
        let callee = if barrier { Some(ad.block) } else { None };
        let compiled = self.code().map(|c| c.actions[a].as_slice());
        let (frame, r) = self.run_frame(frame, &ad.decl.body, compiled, barrier, callee);
        let ret = match r {
            Ok(()) => Value::Void,
            Err(Ctl::Return(v)) => v,
            Err(Ctl::Exit) => {
                self.recycle(frame);
                return Some(Err(Ctl::Exit));
            }
            Err(e) => return Some(Err(e)),
        };
        self.recycle(frame);
        Some(Ok(ret))
    }

    /// `call_table_action` of an action compiled for scalar-bound
    /// parameters (`fast::SAction`): the entry's data bound as `u128`s in
    /// `st.pool.aparams` (a missing datum the type's default, 0), the
    /// frame left empty for the body's own variables. `None` when the
    /// action has no such body or a datum is not of its parameter's
    /// exact type (then the frame's way, which this equals).
    fn call_scalar_action(
        &mut self,
        t: usize,
        a: usize,
        entry: Option<(bool, usize)>,
    ) -> Option<R<Value>> {
        let p: &'a Prog = self.p;
        let sa = self.code()?.sactions.get(a)?.as_ref()?;
        let data = entry_data(p, &self.st.tables, t, entry)?;
        let store = &mut self.st.pool.aparams;
        let base = store.len();
        for (i, ty) in sa.tys.iter().enumerate() {
            let v = match (data.get(i), *ty) {
                (None, _) => (0, Src::None),
                (Some(Value::Bits(b)), super::fast::STy::Bits(w, s))
                    if b.width == w && b.signed == s =>
                {
                    (b.v, b.src)
                }
                (Some(Value::Bool(x, src)), super::fast::STy::Bool) => (u128::from(*x), *src),
                _ => {
                    store.truncate(base);
                    return None;
                }
            };
            store.push(v);
        }
        self.st.scalar_actions = self.st.scalar_actions.wrapping_add(1);
        let ad = &p.actions[a];
        let saved = std::mem::replace(&mut self.abase, base);
        let frame = self.new_frame();
        let barrier = ad.block.is_none() || ad.block != self.block;
        let callee = if barrier { Some(ad.block) } else { None };
        let (frame, r) = self.run_frame(frame, &ad.decl.body, Some(&sa.body), barrier, callee);
        self.abase = saved;
        self.st.pool.aparams.truncate(base);
        self.recycle(frame);
        Some(match r {
            Ok(()) => Ok(Value::Void),
            Err(Ctl::Return(v)) => Ok(v),
            Err(e) => Err(e),
        })
    }

    /// Assigns the `out`/`inout` parameters of `frame` listed in `list`
    /// to their arguments, in parameter order; `list` goes back to the
    /// pool.
    fn copy_out(
        &mut self,
        params: &'a [ast::Param],
        args: &[Arg],
        frame: &mut [(&'a str, Value)],
        list: &mut Vec<(usize, usize)>,
    ) -> R<()> {
        let mut r = Ok(());
        for &(pi, ai) in list.iter() {
            let name = params[pi].name.name.as_str();
            if let Some((_, v)) = frame.iter_mut().find(|(n, _)| name_eq(n, name)) {
                let v = std::mem::replace(v, Value::Void);
                let e = &args[ai].value;
                r = match self.flat_arg(e) {
                    Some((fl, at)) => self.flat_write(fl, at, v, e.span()),
                    None => self.assign(e, v),
                };
                if r.is_err() {
                    break;
                }
            }
        }
        let l = std::mem::take(list);
        if self.st.pool.copy_outs.len() < 16 {
            self.st.pool.copy_outs.push(l);
        }
        r
    }

    /// An `in`/`inout` argument's value: `self.eval(e)`, except that a
    /// header or struct read from a variable (`hdr.ip`) is copied into a
    /// value the pipeline kept from an earlier copy-out (its field
    /// vector reused) instead of a fresh clone; the same count and depth
    /// check as `eval`.
    fn eval_copy_in(&mut self, e: &Expr, ty: &Ty) -> R<Value> {
        if let Some((fl, at)) = self.flat_arg(e) {
            // A header or field of the flat headers, built into a value
            // an earlier copy-out left.
            self.enter()?;
            self.depth -= 1;
            let d = match at {
                super::fast::FlatAt::Header(_) => {
                    self.st.pool.agg_spare.pop().unwrap_or(Value::Void)
                }
                super::fast::FlatAt::Field { .. } => Value::Void,
            };
            return Ok(self.flat_read(fl, at, d));
        }
        if self.reference || !matches!(ty, Ty::Header(_) | Ty::Struct(_)) {
            return self.eval(e);
        }
        let Some(src) = peek_in(&self.frames[self.base..], e) else {
            return self.eval(e);
        };
        if !matches!(src, Value::Header(_) | Value::Struct(..)) {
            return self.eval(e);
        }
        let mut d = self.st.pool.agg_spare.pop().unwrap_or(Value::Void);
        src.clone_into_value(&mut d);
        if let Err(x) = self.enter() {
            self.st.pool.agg_spare.push(d);
            return Err(x);
        }
        self.depth -= 1;
        Ok(d)
    }

    /// `inst.apply(args)` of a parser/control instantiated in a control.
    fn apply_sub_block(&mut self, b: usize, args: &[Arg], span: &crate::ast::Span) -> R<Value> {
        let p: &'a Prog = self.p;
        let blk = &p.blocks[b];
        let params = blk.params();
        let mut vals = Vec::new();
        for (i, prm) in params.iter().enumerate() {
            let a = args.get(i).ok_or(Ctl::Fail(format!(
                "{span}: missing argument {}",
                prm.name.name
            )))?;
            vals.push(match prm.direction {
                Direction::Out => blk.param_tys[i].default_value(),
                _ => {
                    let v = self.eval(&a.value)?;
                    ops::coerce(&blk.param_tys[i], v)
                        .map_err(|m| Ctl::Fail(format!("{span}: {m}")))?
                }
            });
        }
        let (vals, exited) = match self.run_block(b, vals) {
            Ok(r) => r,
            Err(Ctl::Reject(e)) => return Err(Ctl::Reject(e)),
            Err(e) => return Err(e),
        };
        for (i, prm) in params.iter().enumerate() {
            if matches!(prm.direction, Direction::Out | Direction::InOut) {
                self.assign(&args[i].value, vals[i].clone())?;
            }
        }
        if exited {
            return Err(Ctl::Exit);
        }
        Ok(Value::Void)
    }

    /// Runs block `b` (parser or control) with parameter values `vals`;
    /// returns the final parameter values and whether `exit` ran.
    /// A parser's reject is `Err(Ctl::Reject(error))` — but the values
    /// are still needed: see [`Run::run_parser`].
    pub fn run_block(&mut self, b: usize, mut vals: Vec<Value>) -> R<(Vec<Value>, bool)> {
        let p: &'a Prog = self.p;
        let blk = &p.blocks[b];
        let mut frame = self.new_frame();
        frame.extend(
            blk.params()
                .iter()
                .map(|p| p.name.name.as_str())
                .zip(vals.drain(..)),
        );
        if self.st.pool.data.len() < 16 {
            self.st.pool.data.push(vals);
        }
        let (mut frame, r) = self.run_block_frame(b, frame);
        // Frame 0 of the block holds the params (vars, when there are
        // any, were pushed in a second frame, popped by run_block_body).
        let mut vals: Vec<Value> = self.st.pool.data.pop().unwrap_or_default();
        vals.clear();
        vals.extend(frame.drain(..).take(blk.params().len()).map(|(_, v)| v));
        self.recycle(frame);
        match r {
            Ok(exited) => Ok((vals, exited)),
            Err(Ctl::Reject(e)) => {
                self.reject_vals = Some(vals);
                Err(Ctl::Reject(e))
            }
            Err(e) => Err(e),
        }
    }

    /// [`Run::run_block`] with the parameters already bound in `frame`
    /// (name, value, in the block's parameter order): the caller moves
    /// each value into the frame and out of it once, where `run_block`
    /// also moves it through a parameter vector each way (the main
    /// blocks' headers and metadata, per block and packet). Gives the
    /// frame back whatever the outcome (its first entries are the
    /// parameters after the block, also after a parser's reject) with
    /// whether `exit` ran.
    pub(super) fn run_block_frame(
        &mut self,
        b: usize,
        frame: Vec<(&'a str, Value)>,
    ) -> (Vec<(&'a str, Value)>, R<bool>) {
        let saved_block = self.block.replace(b);
        let saved_base = self.base;
        self.frames.push(frame);
        self.base = self.frames.len() - 1;
        let r = self.run_block_body(b);
        let frame = self.frames.pop().unwrap_or_default();
        self.base = saved_base;
        self.block = saved_block;
        let r = match r {
            Ok(()) => Ok(false),
            Err(Ctl::Exit) => Ok(true),
            Err(e) => Err(e),
        };
        (frame, r)
    }

    fn run_block_body(&mut self, b: usize) -> R<()> {
        let p: &'a Prog = self.p;
        let blk = &p.blocks[b];
        // The block variables' frame; none when there are none and the
        // body is compiled (which pushes its own frame only when it binds
        // a name, `fast::binds`): an empty frame changes no look-up. The
        // reference run keeps the walker's frames as they were.
        let code = self.code();
        // The variables held in the slot array (`fast::VSlot`), and
        // whether any is left to a frame.
        let vars = code.and_then(|k| k.vars.get(b));
        let slots: &'a [Option<usize>] = vars.map_or(&[], |v| v.slots.as_slice());
        let frame = match vars {
            Some(v) => v.frame,
            None => code.is_none() || !blk.vars.is_empty(),
        };
        if frame {
            let f = self.new_frame();
            self.frames.push(f);
        }
        if !slots.is_empty() {
            let n = code.map_or(0, |k| k.nvslots);
            if self.st.pool.vslots.len() < n {
                self.st.pool.vslots.resize(n, (0, Src::None));
            }
        }
        let r = (|| {
            for (j, (v, ty)) in blk.vars.iter().enumerate() {
                let slot = slots.get(j).copied().flatten();
                if let (Some(i), None) = (slot, &v.init) {
                    // `default_value` of a `bit<W>`/`int<W>`/`bool`.
                    if let Some(x) = self.st.pool.vslots.get_mut(i) {
                        *x = (0, Src::None);
                    }
                    continue;
                }
                let mut val = ty.default_value();
                if let Some(init) = &v.init {
                    let iv = self.eval(init)?;
                    self.use_val(&iv);
                    val =
                        coerce_like(&val, iv).map_err(|m| Ctl::Fail(format!("{}: {m}", v.span)))?;
                }
                match slot {
                    Some(i) => {
                        let bits = match val {
                            Value::Bits(b) => (b.v, b.src),
                            Value::Bool(x, s) => (u128::from(x), s),
                            o => {
                                return fail(format!(
                                    "{}: {} for a `{ty:?}` variable",
                                    v.span,
                                    o.type_name()
                                ))
                            }
                        };
                        if let Some(x) = self.st.pool.vslots.get_mut(i) {
                            *x = bits;
                        }
                    }
                    None => self.declare(&v.name.name, val),
                }
            }
            match &blk.kind {
                BlockKind::Control(c) => match code.and_then(|k| k.controls[b].as_ref()) {
                    Some(body) => {
                        let own =
                            code.is_some_and(|k| k.control_frames.get(b).copied().unwrap_or(true));
                        self.cexec_block(body, own)
                    }
                    None => self.exec_block(&c.apply),
                },
                BlockKind::Parser(pd) => match code.and_then(|k| k.states[b].as_ref()) {
                    Some(states) => self.crun_states(b, states, &pd.span),
                    None => self.run_states(b, pd),
                },
            }
        })();
        if frame {
            self.pop_frame();
        }
        r
    }

    fn run_states(&mut self, b: usize, pd: &'a ast::ParserDecl) -> R<()> {
        let p: &'a Prog = self.p;
        let blk = &p.blocks[b];
        let mut state: &'a str = "start";
        loop {
            self.tick()?;
            if state == "accept" {
                return Ok(());
            }
            if state == "reject" {
                return Err(Ctl::Reject(String::new()));
            }
            let Some(&si) = blk.states.get(state) else {
                return fail(format!("{}: no parser state {state}", pd.span));
            };
            let st = &pd.states[si];
            let f = self.new_frame();
            self.frames.push(f);
            let r = st.body.iter().try_for_each(|s| self.exec(s));
            let next = match r {
                Ok(()) => self.transition(st),
                Err(e) => Err(e),
            };
            self.pop_frame();
            state = next?;
        }
    }

    fn transition(&mut self, st: &'a ast::ParserState) -> R<&'a str> {
        match &st.transition {
            None => Ok("reject"),
            Some(ast::Transition::Direct(id)) => Ok(id.name.as_str()),
            Some(ast::Transition::Select { exprs, cases, span }) => {
                let vals: Vec<Value> = exprs.iter().map(|e| self.eval(e)).collect::<R<_>>()?;
                for v in &vals {
                    self.use_val(v);
                }
                for c in cases {
                    if self.select_case_matches(&vals, &c.keysets)? {
                        return Ok(c.next.name.as_str());
                    }
                }
                let _ = span;
                Err(Ctl::Reject("NoMatch".into()))
            }
        }
    }

    pub(super) fn select_case_matches(&mut self, vals: &[Value], keysets: &[Expr]) -> R<bool> {
        if keysets.len() == 1 && matches!(keysets[0], Expr::Default(_) | Expr::DontCare(_)) {
            return Ok(true);
        }
        // A tuple keyset given as one List expression.
        let ks: Vec<&Expr> = if keysets.len() == 1 && vals.len() > 1 {
            match &keysets[0] {
                Expr::List(items, _) => items.iter().collect(),
                o => vec![o],
            }
        } else {
            keysets.iter().collect()
        };
        if ks.len() != vals.len() {
            return fail(format!(
                "{}: select case has {} keys for {} values",
                ks[0].span(),
                ks.len(),
                vals.len()
            ));
        }
        for (k, v) in ks.iter().zip(vals) {
            if !self.keyset_matches(k, v)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub(super) fn keyset_matches(&mut self, k: &Expr, v: &Value) -> R<bool> {
        let w = match v {
            Value::Bits(b) => b.width,
            _ => 128,
        };
        let num = |s: &mut Self, e: &Expr| -> R<u128> {
            let x = s.eval(e)?;
            Ok(scalar_bits(&x, &s.p.g.errors, w)
                .map(|b| b.v & mask(w))
                .unwrap_or(0))
        };
        match k {
            Expr::Default(_) | Expr::DontCare(_) => Ok(true),
            Expr::Mask(a, m, _) => {
                let a = num(self, a)?;
                let m = num(self, m)?;
                let x = scalar_bits(v, &self.p.g.errors, w)
                    .map(|b| b.v)
                    .unwrap_or(0);
                Ok(x & m == a & m)
            }
            Expr::Range(lo, hi, _) => {
                let lo = num(self, lo)?;
                let hi = num(self, hi)?;
                let x = scalar_bits(v, &self.p.g.errors, w)
                    .map(|b| b.v)
                    .unwrap_or(0);
                Ok(lo <= x && x <= hi)
            }
            e => {
                let kv = self.eval(e)?;
                ops::eq_vals(&kv, v).map_err(|m| Ctl::Fail(format!("{}: {m}", e.span())))
            }
        }
    }

    // ---- packets -------------------------------------------------------

    fn packet_in_method(
        &mut self,
        name: &str,
        type_args: &[ast::Type],
        args: &[Arg],
        span: &crate::ast::Span,
    ) -> R<Value> {
        match name {
            "extract" => {
                if args.is_empty() || args.len() > 2 {
                    return fail(format!("{span}: extract takes one or two arguments"));
                }
                let var_len: Option<u64> = match args.get(1) {
                    Some(a) => {
                        let v = self.eval(&a.value)?;
                        self.use_val(&v);
                        Some(v.as_u128().unwrap_or(0) as u64)
                    }
                    None => None,
                };
                let target = &args[0].value;
                let is_next = matches!(target, Expr::Member(_, m) if m.name == "next");
                let pos = self.pos;
                let data_len = self.pkt.len() as u64 * 8;
                let first = self.first_pass;
                let reparse_tag = self.reparse_tag;
                let pkt = std::mem::take(&mut self.pkt);
                let r = (|| {
                    let h = self.lvalue(target)?;
                    let Value::Header(h) = h else {
                        return fail(format!("{span}: extract of a non-header"));
                    };
                    let mut w: u64 = 0;
                    for f in h.fields.iter() {
                        w += match f {
                            Value::Varbit(vb) => {
                                let l = var_len.unwrap_or(0);
                                if l > vb.max as u64 {
                                    return Err(Ctl::Reject("HeaderTooShort".into()));
                                }
                                l
                            }
                            o => o.bit_width() as u64,
                        };
                    }
                    if pos + w > data_len {
                        return Err(Ctl::Reject("PacketTooShort".into()));
                    }
                    let mut off = pos;
                    for f in h.fields.iter_mut() {
                        match f {
                            Value::Bits(b) => {
                                b.v = read_bits(&pkt, off, b.width);
                                b.src = if first {
                                    Src::Packet(off as u32)
                                } else {
                                    Src::Tainted(reparse_tag)
                                };
                                off += b.width as u64;
                            }
                            Value::Bool(b, s) => {
                                *b = read_bits(&pkt, off, 1) == 1;
                                *s = if first {
                                    Src::Packet(off as u32)
                                } else {
                                    Src::Tainted(reparse_tag)
                                };
                                off += 1;
                            }
                            Value::Varbit(vb) => {
                                let l = var_len.unwrap_or(0);
                                let mut buf = BitBuf::default();
                                for i in 0..l {
                                    buf.push(read_bits(&pkt, off + i, 1), 1);
                                }
                                vb.len = l as u32;
                                vb.bytes = buf.bytes;
                                vb.src = if first {
                                    Src::Packet(off as u32)
                                } else {
                                    Src::Tainted(reparse_tag)
                                };
                                off += l;
                            }
                            _ => return fail(format!("{span}: unsupported header field type")),
                        }
                    }
                    h.valid = true;
                    Ok(w)
                })();
                self.pkt = pkt;
                // A header union's member: extracting it makes the others
                // invalid, as `setValid` does (BMv2 alike).
                if r.is_ok() {
                    if let Expr::Member(parent, member) = target {
                        let p = self.p;
                        if let Ok(u) = self.lvalue(parent) {
                            union_select(p, u, &member.name, true);
                        }
                    }
                }
                let w = match r {
                    Ok(w) => w,
                    Err(Ctl::Reject(e)) => {
                        if e == "PacketTooShort" {
                            self.tr.set_uncacheable("p4-parser-error");
                        }
                        return Err(Ctl::Reject(e));
                    }
                    Err(e) => return Err(e),
                };
                self.need_bytes(pos + w);
                if is_next {
                    if let Expr::Member(stack, _) = target {
                        if let Value::Stack(s) = self.lvalue(stack)? {
                            s.next += 1;
                        }
                    }
                }
                self.pos += w;
                Ok(Value::Void)
            }
            "lookahead" => {
                let t = type_args
                    .first()
                    .ok_or(Ctl::Fail(format!("{span}: lookahead without type")))?;
                let ty = self.resolve_ty(t)?;
                let mut v = ty.default_value();
                let w = v.bit_width() as u64;
                if self.pos + w > self.pkt.len() as u64 * 8 {
                    self.tr.set_uncacheable("p4-parser-error");
                    return Err(Ctl::Reject("PacketTooShort".into()));
                }
                self.need_bytes(self.pos + w);
                let mut off = self.pos;
                let first = self.first_pass;
                let reparse_tag = self.reparse_tag;
                fill_from_packet(&mut v, &self.pkt, &mut off, first, reparse_tag);
                if let Value::Header(h) = &mut v {
                    h.valid = true;
                }
                Ok(v)
            }
            "advance" => {
                let n = self.eval(
                    &args
                        .first()
                        .ok_or(Ctl::Fail("advance without argument".into()))?
                        .value,
                )?;
                self.use_val(&n);
                let n = n.as_u128().unwrap_or(0) as u64;
                if self.pos + n > self.pkt.len() as u64 * 8 {
                    self.tr.set_uncacheable("p4-parser-error");
                    return Err(Ctl::Reject("PacketTooShort".into()));
                }
                self.pos += n;
                let end = self.pos;
                self.need_bytes(end);
                Ok(Value::Void)
            }
            "length" => Ok(Value::Bits(Bits {
                width: 32,
                signed: false,
                v: self.pkt.len() as u128,
                src: Src::Tainted("p4-packet-length"),
            })),
            o => fail(format!("{span}: unsupported: packet_in.{o}")),
        }
    }

    /// `packet_out.emit(v)`: valid headers' bits, recursively.
    pub fn emit(&mut self, v: &Value) -> R<()> {
        emit_into(&mut self.out, &mut self.prov, v)
    }

    /// Serializes data (lists, headers, structs, bits) to bits for
    /// checksums and hashes.
    pub fn flatten(&self, v: &Value, out: &mut BitBuf) -> R<()> {
        match v {
            Value::Bits(b) => out.push(b.v, b.width),
            Value::Bool(b, _) => out.push(*b as u128, 1),
            Value::Varbit(v) => {
                for i in 0..v.len {
                    out.push(v.bit(i) as u128, 1);
                }
            }
            Value::Header(h) => {
                for f in &h.fields {
                    self.flatten(f, out)?;
                }
            }
            Value::Struct(_, _, fs) | Value::Tuple(fs) => {
                for f in fs {
                    self.flatten(f, out)?;
                }
            }
            Value::Stack(s) => {
                for e in &s.elems {
                    self.flatten(e, out)?;
                }
            }
            Value::Int(i) => {
                let b = Bits::from_bigint(32, false, i);
                out.push(b.v, 32)
            }
            o => return fail(format!("cannot serialize a {}", o.type_name())),
        }
        Ok(())
    }

    pub fn extern_state(&mut self, i: usize) -> &mut ExternState {
        &mut self.st.externs[i]
    }

    pub fn miss_ctx(&mut self) -> &mut Vec<(usize, Vec<u128>)> {
        &mut self.miss_ctx
    }
}

/// Empties `frames`' frames and relabels the (unused) lifetime of their
/// names so that the pipeline can keep their storage between packets.
///
/// Why not safe code: the previous version collected a mapped
/// `vec::IntoIter` per frame (std's in-place collection, no
/// allocation), but that machinery ran per frame per packet: 4.2% of
/// the samples of routing.p4's packet loop (the `interp_loop` example,
/// 1,000 routes, inclusive; `vec::IntoIter::try_fold`, 1.3-1.5% self in
/// the bench's profile, gone after), docs/results/p4.md 2l and its
/// `p4-interp-run13/loop-main-inclusive.txt`. Its share of 2l's speed-up
/// was not measured apart. Here the outer vector is taken over as it is.
fn relabel<'x, 'y>(mut frames: Vec<Vec<(&'x str, Value)>>) -> Vec<Vec<(&'y str, Value)>> {
    for f in frames.iter_mut() {
        f.clear();
    }
    let mut frames = std::mem::ManuallyDrop::new(frames);
    let (ptr, len, cap) = (frames.as_mut_ptr(), frames.len(), frames.capacity());
    // SAFETY: `Vec<(&'x str, Value)>` and `Vec<(&'y str, Value)>` differ
    // only in a lifetime, so they have the same size, alignment and
    // layout; `ptr`, `len` and `cap` come from a live vector whose
    // ownership `ManuallyDrop` gives up (no double free); every inner
    // vector was just emptied, so no `&'x str` is reachable through the
    // result.
    unsafe { Vec::from_raw_parts(ptr.cast::<Vec<(&'y str, Value)>>(), len, cap) }
}

/// Integer literal `lit` as a `w`-bit value (what `Bits::from_bigint`
/// gives), without a big integer; `None` when it does not fit 128 bits.
pub(super) fn lit_bits(lit: &ast::IntLit, w: u32, signed: bool) -> Option<Bits> {
    if w > crate::value::MAX_WIDTH || lit.value.bits() > 128 {
        return None;
    }
    let mut v: u128 = 0;
    for (i, d) in lit.value.iter_u64_digits().enumerate() {
        v |= u128::from(d) << (64 * i);
    }
    if lit.negative {
        v = v.wrapping_neg();
    }
    Some(Bits::new(w, signed, v))
}

/// The variable `name` in `frames`, innermost first.
pub(super) fn var_in<'f>(frames: &'f [Vec<(&str, Value)>], name: &str) -> Option<&'f Value> {
    for f in frames.iter().rev() {
        if let Some((_, v)) = f.iter().rev().find(|(n, _)| name_eq(n, name)) {
            return Some(v);
        }
    }
    None
}

/// A reference to a variable's (sub)value in `frames` without
/// evaluation, for plain paths and field accesses.
fn peek_in<'f>(frames: &'f [Vec<(&str, Value)>], e: &Expr) -> Option<&'f Value> {
    match e {
        Expr::Path(id) => var_in(frames, &id.name),
        Expr::Member(b, m) => peek_in(frames, b)?.field(&m.name),
        _ => None,
    }
}

/// Appends `v`'s valid headers to `out`, recording where their bits
/// came from in `prov`.
pub(super) fn emit_into(
    out: &mut BitBuf,
    prov: &mut Vec<crate::trace::EmitSpan>,
    v: &Value,
) -> R<()> {
    match v {
        Value::Header(h) if h.valid => {
            for f in &h.fields {
                let at = out.bits as u32;
                let (len, src) = match f {
                    Value::Bits(b) => {
                        out.push(b.v, b.width);
                        (b.width, b.src)
                    }
                    Value::Bool(b, src) => {
                        out.push(*b as u128, 1);
                        // Its own source: `None` would tell the cache the
                        // program wrote the bit (a set action carrying
                        // this packet's value for every packet of the flow).
                        (1, *src)
                    }
                    Value::Varbit(v) => {
                        for i in 0..v.len {
                            out.push(v.bit(i) as u128, 1);
                        }
                        (v.len, v.src)
                    }
                    _ => return fail("unsupported header field in emit"),
                };
                let from = match src {
                    Src::Packet(o) => Some(o),
                    _ => None,
                };
                prov.push(crate::trace::EmitSpan { out: at, len, from });
            }
        }
        Value::Stack(s) => {
            for e in &s.elems {
                emit_into(out, prov, e)?;
            }
        }
        Value::Struct(_, _, fs) => {
            for f in fs {
                emit_into(out, prov, f)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Fills scalars of `v` from the packet at bit `off` (lookahead).
fn fill_from_packet(
    v: &mut Value,
    pkt: &[u8],
    off: &mut u64,
    first: bool,
    reparse_tag: &'static str,
) {
    match v {
        Value::Bits(b) => {
            b.v = read_bits(pkt, *off, b.width);
            b.src = if first {
                Src::Packet(*off as u32)
            } else {
                Src::Tainted(reparse_tag)
            };
            *off += b.width as u64;
        }
        Value::Bool(b, s) => {
            *b = read_bits(pkt, *off, 1) == 1;
            *s = if first {
                Src::Packet(*off as u32)
            } else {
                Src::Tainted(reparse_tag)
            };
            *off += 1;
        }
        Value::Header(h) => h
            .fields
            .iter_mut()
            .for_each(|f| fill_from_packet(f, pkt, off, first, reparse_tag)),
        Value::Struct(_, _, fs) => fs
            .iter_mut()
            .for_each(|f| fill_from_packet(f, pkt, off, first, reparse_tag)),
        _ => {}
    }
}

#[allow(dead_code)]
fn _unused(_: HeaderVal) {}

impl Run<'_> {
    /// Evaluates `e` in block `b` over default parameter and variable
    /// values (to learn a key's width at load time).
    pub fn probe(&mut self, b: usize, e: &Expr) -> R<Value> {
        let p = self.p;
        let blk = &p.blocks[b];
        self.block = Some(b);
        let frame: Vec<(&str, Value)> = blk
            .params()
            .iter()
            .zip(&blk.param_tys)
            .map(|(prm, t)| (prm.name.name.as_str(), t.default_value()))
            .collect();
        self.frames.push(frame);
        self.base = self.frames.len() - 1;
        let vars: Vec<(&str, Value)> = blk
            .vars
            .iter()
            .map(|(v, t)| (v.name.name.as_str(), t.default_value()))
            .collect();
        self.frames.push(vars);
        let r = self.eval(e);
        self.frames.clear();
        self.base = 0;
        r
    }
}

/// When `parent` is a header union: makes its member `member` valid
/// (`valid`) and every other member invalid, or (`!valid`) every member
/// invalid, and says `true`; `false`, changing nothing, for anything else.
/// One rule for `setValid`/`setInvalid` on a member and for `extract`
/// into one (P4-16 8.20: at most one member of a union is valid).
pub(crate) fn union_select(p: &Prog, parent: &mut Value, member: &str, valid: bool) -> bool {
    let Value::Struct(ty, names, fields) = parent else {
        return false;
    };
    let is_union = p.is_header_union(ty);
    if is_union {
        for (n, f) in names.iter().zip(fields.iter_mut()) {
            if let Value::Header(h) = f {
                h.valid = valid && *n == member;
            }
        }
    }
    is_union
}

/// The action data a table hit runs with: installed entry `i` (`(true,
/// i)`), the program's const entry `i` (`(false, i)`) or the default
/// action's (`None`); `None` for an index `locate` did not give. One
/// place for both ways a table's action is called (frame and scalar-bound).
fn entry_data<'d>(
    p: &'d Prog,
    tables: &'d [super::TableState],
    t: usize,
    entry: Option<(bool, usize)>,
) -> Option<&'d [Value]> {
    let ts = tables.get(t)?;
    Some(match entry {
        Some((true, i)) => &ts.entries.get(i)?.args,
        Some((false, i)) => &p.tables.get(t)?.const_entries.get(i)?.args,
        None => &ts.default.1,
    })
}

#[cfg(test)]
mod bit_tests {
    use super::{ones_runs, read_bits, BitBuf};

    /// The runs of ones as `use_src` found them before: bit by bit.
    fn runs_bit_by_bit(need: u128, w: u32) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut i = 0u32;
        while i < w {
            if (need >> (w - 1 - i)) & 1 == 1 {
                let start = i;
                while i < w && (need >> (w - 1 - i)) & 1 == 1 {
                    i += 1;
                }
                out.push((start, i - start));
            } else {
                i += 1;
            }
        }
        out
    }

    #[test]
    fn ones_runs_equal_the_bit_by_bit_scan() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for k in 0..20000 {
            let w = (next() % 128) as u32 + 1;
            let r = (u128::from(next()) << 64) | u128::from(next());
            // Random masks, and runs (prefixes, suffixes, all ones).
            let need = match k % 4 {
                0 => r,
                1 => !0u128 << (r % 128),
                2 => !0u128 >> (r % 128),
                _ => u128::MAX,
            } & super::mask(w);
            let mut got = Vec::new();
            ones_runs(need, w, |s, l| got.push((s, l)));
            assert_eq!(got, runs_bit_by_bit(need, w), "need {need:#x} w {w}");
        }
    }

    #[test]
    fn push_and_read_bits_agree_with_bit_by_bit() {
        let mut x = 0x1234_5678_9abc_def0_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2000 {
            // Half the buffers with room to spare, so the fixed-copy path
            // is taken; the others fresh, so it is taken only once grown.
            let mut fast = BitBuf {
                bytes: Vec::with_capacity(if round % 2 == 0 { 128 } else { 0 }),
                bits: 0,
            };
            let mut slow = BitBuf::default();
            let mut fields = Vec::new();
            for _ in 0..(next() % 8) {
                let w = (next() % 129) as u32;
                let v = (u128::from(next()) << 64) | u128::from(next());
                fast.push(v, w);
                for i in (0..w).rev() {
                    let byte = (slow.bits / 8) as usize;
                    if byte >= slow.bytes.len() {
                        slow.bytes.push(0);
                    }
                    if (v >> i) & 1 == 1 {
                        slow.bytes[byte] |= 0x80 >> (slow.bits % 8);
                    }
                    slow.bits += 1;
                }
                fields.push((v, w));
            }
            assert_eq!((fast.bits, &fast.bytes), (slow.bits, &slow.bytes));
            // With bytes behind the fields, reads take the one-load path.
            let mut padded = fast.bytes.clone();
            padded.extend_from_slice(&[0xa5; 17]);
            let mut off = 0u64;
            for (v, w) in fields {
                let m = if w >= 128 {
                    u128::MAX
                } else {
                    (1u128 << w) - 1
                };
                assert_eq!(read_bits(&fast.bytes, off, w), v & m, "w {w} at {off}");
                assert_eq!(read_bits(&padded, off, w), v & m, "padded, w {w} at {off}");
                off += u64::from(w);
            }
        }
    }
}
