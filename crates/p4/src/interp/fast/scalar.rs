//! The scalar tier: expressions of type `bit<W>`/`int<W>` (1 <= W <= 128)
//! or `bool` built only from fields of the flat headers, variables and
//! parameters of such types, constants and the operators `+ - * & | ^ ~
//! << >> ++ == != < <= > >= && || !`, unary `-`/`+`, casts between such
//! types and slices, compiled at load into a tree evaluated on `u128`
//! (with each result masked to its width exactly as `ops` does) instead
//! of building, moving and dropping a 64-byte [`Value`] per node.
//!
//! Why: after twelve rounds of cuts the interpreter's largest self time
//! (`ceval_inner`, the `Value` drops and clones) was the moving of
//! `Value`s through the stack, not the dispatch (docs/results/p4.md 2l,
//! 2m). Here an operand is a `(u128, Src)` pair with no drop glue.
//!
//! What stays the same as the `Value` path ([`CExpr`]): every operand is
//! recorded ([`Run::use_src`]) at the node and in the order the walker's
//! `use_val` records it, operator results carry no source, slices narrow
//! a packet source, `bool` casts keep theirs, so outputs and whole traces
//! are the walker's (`tests/interp_scalar.rs` compares them with
//! `process_reference`), and so are the steps counted ([`SExpr::cost`]:
//! a loop meets `MAX_STEPS` at the walker's iteration, not later). Every consumer keeps the compiled `Value` form
//! as its fallback ([`CExpr::Scalar`]'s second field): it runs when the
//! run does not hold the headers flat, when a variable does not hold the
//! type the load assumed (then the tree stops at that leaf; the operands
//! recorded before it are a prefix of what the fallback records again,
//! which the trace absorbs: reads are merged, the first uncacheable
//! reason stays first), or when the step or depth limits are near.

use super::{Chain, Cx, FlatAt, FlatLayout};
use crate::ast::{BinOp, Expr, UnOp};
use crate::interp::check::Ty;
use crate::interp::eval::{lit_bits, Run, MAX_DEPTH, MAX_STEPS};
use crate::value::{mask, Bits, Src, Value};

/// A scalar type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum STy {
    /// `bit<W>` (`false`) or `int<W>` (`true`), 1 <= W <= 128.
    Bits(u32, bool),
    Bool,
}

impl STy {
    pub(crate) fn of(t: &Ty) -> Option<STy> {
        match t {
            Ty::Bits(w, s) if (1..=128).contains(w) => Some(STy::Bits(*w, *s)),
            Ty::Bool => Some(STy::Bool),
            _ => None,
        }
    }

    fn width(self) -> u32 {
        match self {
            STy::Bits(w, _) => w,
            STy::Bool => 1,
        }
    }

    /// The value the `Value` path would hold.
    pub(crate) fn value(self, v: u128, src: Src) -> Value {
        match self {
            STy::Bits(width, signed) => Value::Bits(Bits {
                width,
                signed,
                v,
                src,
            }),
            STy::Bool => Value::Bool(v != 0, src),
        }
    }
}

/// A compiled scalar expression with what its evaluation needs checked
/// first.
pub(crate) struct Scalar {
    pub e: SExpr,
    /// The steps an evaluation may count (the nodes' [`SExpr::cost`]s).
    pub nodes: u32,
    /// Nesting depth.
    pub depth: u32,
    /// Reads the flat headers (the run must hold them).
    pub flat: bool,
}

pub(crate) struct SExpr {
    pub ty: STy,
    /// The walker's steps for this node alone (its `eval` ticks): 3 for
    /// a slice (its two bounds are evaluated), 2 for `isValid()` (the
    /// call's own `enter`) and for a cast of an unsized literal (folded
    /// into one constant here), 1 otherwise; so that a run counts the
    /// walker's steps and meets `MAX_STEPS` where the walker does.
    pub cost: u8,
    pub node: SNode,
}

pub(crate) enum SNode {
    /// A literal (masked to the type).
    Const(u128),
    /// Field `i` of the flat headers.
    Field(usize),
    /// Whether flat header `h` is valid.
    Valid(usize),
    /// A variable's field chain (what `CExpr::Peek` borrows), used when
    /// it holds a value of exactly the node's type.
    Var(Box<Chain>),
    /// `c.isValid()` of a variable's header.
    VarValid(Box<Chain>),
    /// Parameter `i` of a scalar-bound action (`fast::SAction`).
    AParam(usize),
    /// A block or global constant, unless a variable of that name is in
    /// scope at run time (as `CExpr::Named`; `false`: no variable of that
    /// name can be in view, [`super::Domain`], and the frames are not
    /// searched).
    Named(Box<str>, u128, Src, bool),
    Unary(UnOp, Box<SExpr>),
    /// Arithmetic, bitwise and comparison operators on operands of one
    /// type (an unsized literal converted to the other's at load).
    Bin(BinOp, Box<SExpr>, Box<SExpr>),
    /// `&&` (`true`) or `||`, short-circuit.
    Logic(bool, Box<SExpr>, Box<SExpr>),
    /// `<<` (`true`) or `>>` of the left operand by the right (unsigned).
    Shift(bool, Box<SExpr>, Box<SExpr>),
    Concat(Box<SExpr>, Box<SExpr>),
    /// `e[hi:lo]`.
    Slice(Box<SExpr>, u32, u32),
    /// `(T) e`, `T` the node's type.
    Cast(Box<SExpr>),
}

/// The walker's value of unsized literal `lit` in a `w`-bit `signed`
/// context (`to_bits_like`), when it fits 128 bits.
fn lit_in(lit: &crate::ast::IntLit, ty: STy) -> Option<u128> {
    match ty {
        STy::Bits(w, s) => lit_bits(lit, w, s).map(|b| b.v),
        STy::Bool => None,
    }
}

/// An unsized literal operand.
fn unsized_lit(e: &Expr) -> Option<&crate::ast::IntLit> {
    match e {
        Expr::Int(lit, _) if lit.width.is_none() => Some(lit),
        _ => None,
    }
}

fn node(ty: STy, node: SNode) -> Option<SExpr> {
    costed(ty, 1, node)
}

fn costed(ty: STy, cost: u8, node: SNode) -> Option<SExpr> {
    Some(SExpr { ty, cost, node })
}

impl Cx<'_> {
    /// The flat layout the chains of this body can be in.
    fn layout(&self) -> Option<&FlatLayout> {
        match (&self.alias, self.flat) {
            (Some((fl, _, _, _)), _) => Some(fl),
            (None, Some((_, fl))) => Some(fl),
            _ => None,
        }
    }

    /// `e` in the scalar tier, or `None` when any part of it is not of
    /// the shapes the tier knows.
    pub(super) fn scalar(&self, e: &Expr) -> Option<Scalar> {
        let e = self.sexpr(e)?;
        let (mut nodes, mut depth, mut flat) = (0, 0, false);
        walk(&e, 1, &mut |n, d| {
            nodes += u32::from(n.cost);
            depth = depth.max(d);
            flat |= matches!(n.node, SNode::Field(_) | SNode::Valid(_));
        });
        Some(Scalar {
            e,
            nodes,
            depth,
            flat,
        })
    }

    /// The declared scalar type of a variable's chain.
    fn chain_ty(&self, c: &Chain) -> Option<STy> {
        let root = self.declared(&c.root)?;
        let mut ty = &root;
        for s in &c.steps {
            let (Ty::Header(a) | Ty::Struct(a)) = ty else {
                return None;
            };
            let i = a.names.iter().position(|n| *n == s.name)?;
            ty = &a.fields.get(i)?.1;
        }
        STy::of(ty)
    }

    fn sleaf(&self, e: &Expr) -> Option<SExpr> {
        let c = self.chain_at(e, true)?;
        match c.flat {
            Some(FlatAt::Field { h, i, k }) => {
                let (w, s, is_bool) = *self.layout()?.headers.get(h)?.kinds.get(k)?;
                let ty = if is_bool {
                    STy::Bool
                } else {
                    STy::of(&Ty::Bits(w, s))?
                };
                node(ty, SNode::Field(i))
            }
            Some(FlatAt::Header(_)) => None,
            None => {
                let ty = self.chain_ty(&c)?;
                node(ty, SNode::Var(Box::new(c)))
            }
        }
    }

    fn sexpr(&self, e: &Expr) -> Option<SExpr> {
        match e {
            Expr::Int(lit, _) => {
                let (w, s) = lit.width?;
                let ty = STy::of(&Ty::Bits(w, s))?;
                node(ty, SNode::Const(lit_bits(lit, w, s)?.v))
            }
            Expr::Bool(b, _) => node(STy::Bool, SNode::Const(u128::from(*b))),
            Expr::Path(id) if self.aparam(&id.name).is_some() => {
                let (i, ty) = self.aparam(&id.name)?;
                node(ty, SNode::AParam(i))
            }
            Expr::Path(id) => match self.named(id) {
                Some(Value::Bits(b)) => node(
                    STy::of(&Ty::Bits(b.width, b.signed))?,
                    SNode::Named(id.name.as_str().into(), b.v, b.src, self.may_bind(&id.name)),
                ),
                Some(Value::Bool(x, s)) => node(
                    STy::Bool,
                    SNode::Named(
                        id.name.as_str().into(),
                        u128::from(x),
                        s,
                        self.may_bind(&id.name),
                    ),
                ),
                Some(_) => None,
                None => self.sleaf(e),
            },
            Expr::Member(..) => self.sleaf(e),
            Expr::Unary(op, a, _) => {
                let a = self.sexpr(a)?;
                let ok = match op {
                    UnOp::Not => a.ty == STy::Bool,
                    UnOp::BitNot | UnOp::Neg | UnOp::Plus => matches!(a.ty, STy::Bits(..)),
                };
                if !ok {
                    return None;
                }
                node(a.ty, SNode::Unary(*op, Box::new(a)))
            }
            Expr::Binary(op, a, b, _) => self.sbinary(*op, a, b),
            Expr::Cast(t, a, _) => {
                let locals = self.block.map(|b| &self.p.blocks[b].locals);
                let to = STy::of(&self.p.resolve_type(t, locals).ok()?)?;
                if let Some(lit) = unsized_lit(a) {
                    // `(bit<8>) 5`: `ops::cast` of an `int`.
                    let v = match to {
                        STy::Bits(..) => lit_in(lit, to)?,
                        STy::Bool => u128::from(lit.value.bits() != 0),
                    };
                    // The walker evaluates the cast and the literal.
                    return costed(to, 2, SNode::Const(v));
                }
                let a = self.sexpr(a)?;
                node(to, SNode::Cast(Box::new(a)))
            }
            Expr::Slice { expr, hi, lo, .. } => {
                let a = self.sexpr(expr)?;
                let (hi, lo) = (super::slice_bound(hi)?, super::slice_bound(lo)?);
                let STy::Bits(w, _) = a.ty else { return None };
                if hi < lo || hi >= w {
                    return None;
                }
                costed(
                    STy::Bits(hi - lo + 1, false),
                    3,
                    SNode::Slice(Box::new(a), hi, lo),
                )
            }
            Expr::Call {
                func,
                args,
                type_args,
                ..
            } if args.is_empty() && type_args.is_empty() => {
                let Expr::Member(obj, m) = &**func else {
                    return None;
                };
                if m.name != "isValid" {
                    return None;
                }
                let c = self.chain(obj)?;
                match c.flat {
                    Some(FlatAt::Header(h)) => costed(STy::Bool, 2, SNode::Valid(h)),
                    Some(FlatAt::Field { .. }) => None,
                    None => {
                        // Only a variable declared as a header.
                        if !self.chain_is_header(&c) {
                            return None;
                        }
                        costed(STy::Bool, 2, SNode::VarValid(Box::new(c)))
                    }
                }
            }
            _ => None,
        }
    }

    /// Whether a variable's chain is declared as a header.
    fn chain_is_header(&self, c: &Chain) -> bool {
        let Some(root) = self.declared(&c.root) else {
            return false;
        };
        let mut ty = &root;
        for s in &c.steps {
            let (Ty::Header(a) | Ty::Struct(a)) = ty else {
                return false;
            };
            let Some(i) = a.names.iter().position(|n| *n == s.name) else {
                return false;
            };
            ty = &a.fields[i].1;
        }
        matches!(ty, Ty::Header(_))
    }

    fn sbinary(&self, op: BinOp, a: &Expr, b: &Expr) -> Option<SExpr> {
        use BinOp::*;
        match op {
            And | Or => {
                let (x, y) = (self.sexpr(a)?, self.sexpr(b)?);
                if x.ty != STy::Bool || y.ty != STy::Bool {
                    return None;
                }
                node(STy::Bool, SNode::Logic(op == And, Box::new(x), Box::new(y)))
            }
            Shl | Shr => {
                let x = self.sexpr(a)?;
                if !matches!(x.ty, STy::Bits(..)) {
                    return None;
                }
                let y = match unsized_lit(b) {
                    Some(lit) => {
                        // `shift_amount` of an `int`: a huge one shifts
                        // everything out.
                        if lit.negative {
                            return None;
                        }
                        let n = if lit.value.bits() > 64 {
                            u128::MAX
                        } else {
                            lit.value.iter_u64_digits().next().map_or(0, u128::from)
                        };
                        SExpr {
                            ty: STy::Bits(128, false),
                            cost: 1,
                            node: SNode::Const(n),
                        }
                    }
                    None => {
                        let y = self.sexpr(b)?;
                        // A signed amount may be negative: the walker's error.
                        if !matches!(y.ty, STy::Bits(_, false)) {
                            return None;
                        }
                        y
                    }
                };
                node(x.ty, SNode::Shift(op == Shl, Box::new(x), Box::new(y)))
            }
            Concat => {
                let (x, y) = (self.sexpr(a)?, self.sexpr(b)?);
                let (STy::Bits(wx, s), STy::Bits(wy, _)) = (x.ty, y.ty) else {
                    return None;
                };
                if wx + wy > 128 {
                    return None;
                }
                node(
                    STy::Bits(wx + wy, s),
                    SNode::Concat(Box::new(x), Box::new(y)),
                )
            }
            Add | Sub | Mul | BitAnd | BitOr | BitXor | Eq | Ne | Lt | Le | Gt | Ge => {
                let (x, y) = match (unsized_lit(a), unsized_lit(b)) {
                    (None, Some(lit)) => {
                        let x = self.sexpr(a)?;
                        let v = lit_in(lit, x.ty)?;
                        let ty = x.ty;
                        (
                            x,
                            SExpr {
                                ty,
                                cost: 1,
                                node: SNode::Const(v),
                            },
                        )
                    }
                    (Some(lit), None) => {
                        let y = self.sexpr(b)?;
                        let v = lit_in(lit, y.ty)?;
                        let ty = y.ty;
                        (
                            SExpr {
                                ty,
                                cost: 1,
                                node: SNode::Const(v),
                            },
                            y,
                        )
                    }
                    (None, None) => (self.sexpr(a)?, self.sexpr(b)?),
                    (Some(_), Some(_)) => return None,
                };
                let same = x.ty == y.ty;
                let ty = match (op, x.ty, y.ty) {
                    // `eq_vals` compares bits by value whatever the
                    // widths, bools with bools.
                    (Eq | Ne, STy::Bits(..), STy::Bits(..)) | (Eq | Ne, STy::Bool, STy::Bool) => {
                        STy::Bool
                    }
                    (Lt | Le | Gt | Ge, STy::Bits(..), _) if same => STy::Bool,
                    (Add | Sub | Mul | BitAnd | BitOr | BitXor, STy::Bits(..), _) if same => x.ty,
                    _ => return None,
                };
                node(ty, SNode::Bin(op, Box::new(x), Box::new(y)))
            }
            _ => None,
        }
    }
}

/// Calls `f` on every node of `e` with its depth (`d` for `e`).
fn walk(e: &SExpr, d: u32, f: &mut impl FnMut(&SExpr, u32)) {
    f(e, d);
    match &e.node {
        SNode::Const(_)
        | SNode::Field(_)
        | SNode::Valid(_)
        | SNode::Var(_)
        | SNode::VarValid(_)
        | SNode::AParam(_)
        | SNode::Named(..) => {}
        SNode::Unary(_, a) | SNode::Slice(a, _, _) | SNode::Cast(a) => walk(a, d + 1, f),
        SNode::Bin(_, a, b)
        | SNode::Logic(_, a, b)
        | SNode::Shift(_, a, b)
        | SNode::Concat(a, b) => {
            walk(a, d + 1, f);
            walk(b, d + 1, f);
        }
    }
}

/// `v` (a `w`-bit two's complement value) sign-extended, as
/// `Bits::as_i128` does for a signed value.
#[inline]
fn sext(v: u128, w: u32) -> i128 {
    if w < 128 && v & (1u128 << (w - 1)) != 0 {
        (v | !mask(w)) as i128
    } else {
        v as i128
    }
}

impl Run<'_> {
    /// Evaluates scalar `s`: its value and source, or `None` when the
    /// caller must use its fallback (see the module documentation).
    #[inline(always)]
    pub(crate) fn scalar(&mut self, s: &Scalar) -> Option<(u128, Src)> {
        if (s.flat && self.flat.is_none())
            || self.steps + 2 * u64::from(s.nodes) > MAX_STEPS
            || self.depth + s.depth >= MAX_DEPTH
        {
            return None;
        }
        let r = self.sev(&s.e);
        if r.is_some() {
            self.st.scalar_runs = self.st.scalar_runs.wrapping_add(1);
        }
        r
    }

    /// `ones_sum_of` of compiled checksum list items when all are in the
    /// scalar tier and 128 bits or fewer in all: their bits concatenated
    /// in a `u128`, no `Value` per item (reads not recorded: checksum
    /// data, as `list_vals`). `None`: the `Value` path evaluates them
    /// (again, quietly: nothing recorded twice).
    pub(crate) fn scalar_sum(&mut self, items: &[super::CExpr]) -> Option<u32> {
        self.quiet += 1;
        let r = self.scalar_concat(items);
        self.quiet -= 1;
        let (acc, n) = r?;
        Some(crate::interp::externs::ones_sum_bits(acc, n))
    }

    fn scalar_concat(&mut self, items: &[super::CExpr]) -> Option<(u128, u32)> {
        let (mut acc, mut n) = (0u128, 0u32);
        for it in items {
            let super::CExpr::Scalar(s, _) = it else {
                return None;
            };
            let w = s.e.ty.width();
            if n + w > 128 {
                return None;
            }
            let (v, _) = self.scalar(s)?;
            let v = v & mask(w);
            acc = if w == 128 { v } else { (acc << w) | v };
            n += w;
        }
        Some((acc, n))
    }

    /// What `use_val` records for an operand of type `ty`.
    #[inline]
    pub(crate) fn suse(&mut self, ty: STy, src: Src) {
        if !matches!(src, Src::None) {
            let w = ty.width();
            self.use_src(src, w, mask(w), w);
        }
    }

    /// [`Run::seval`] with the leaves read here, inline: a field or a
    /// header's validity of the flat headers, a constant, a scalar-bound
    /// action parameter, a slotted block variable (same steps, same
    /// values). Why: most
    /// evaluations are a leaf alone (a table key, an assignment's right
    /// side, an action parameter) or an operator over leaves, and a call
    /// of `seval` (its register saves and dispatch) cost ~50 instructions
    /// each, ~20 per packet on routing.p4 (docs/results/p4.md 2w).
    #[inline(always)]
    fn sev(&mut self, e: &SExpr) -> Option<(u128, Src)> {
        match &e.node {
            SNode::Field(i) => {
                self.steps += u64::from(e.cost);
                let st = &self.st.pool.flat;
                Some((st.v[*i], st.src[*i]))
            }
            SNode::Const(v) => {
                self.steps += u64::from(e.cost);
                Some((*v, Src::None))
            }
            SNode::AParam(i) => {
                self.steps += u64::from(e.cost);
                self.aparam(*i)
            }
            SNode::Valid(h) => {
                self.steps += u64::from(e.cost);
                Some((u128::from(self.st.pool.flat.valid[*h]), Src::None))
            }
            SNode::Var(c) if c.var.is_some() => {
                self.steps += u64::from(e.cost);
                Some(self.vslot(c.var.map_or(0, |v| v.0 as usize)))
            }
            _ => self.seval(e),
        }
    }

    fn seval(&mut self, e: &SExpr) -> Option<(u128, Src)> {
        self.steps += u64::from(e.cost);
        Some(match &e.node {
            SNode::Const(v) => (*v, Src::None),
            SNode::Field(i) => {
                let st = &self.st.pool.flat;
                (st.v[*i], st.src[*i])
            }
            SNode::Valid(h) => (u128::from(self.st.pool.flat.valid[*h]), Src::None),
            SNode::Var(c) if c.var.is_some() => self.vslot(c.var.map_or(0, |v| v.0 as usize)),
            SNode::Var(c) => match (self.peek_chain(c)?, e.ty) {
                (Value::Bits(b), STy::Bits(w, s)) if b.width == w && b.signed == s => (b.v, b.src),
                (Value::Bool(x, src), STy::Bool) => (u128::from(*x), *src),
                _ => return None,
            },
            SNode::AParam(i) => self.aparam(*i)?,
            SNode::VarValid(c) => match self.peek_chain(c)? {
                Value::Header(h) => (u128::from(h.valid), Src::None),
                _ => return None,
            },
            SNode::Named(n, v, src, bound) => {
                // The search only where a variable of that name may be in
                // view (the walker looks variables up first).
                if *bound && self.var(n).is_some() {
                    return None;
                }
                (*v, *src)
            }
            SNode::Unary(op, a) => {
                let (x, xs) = self.sev(a)?;
                self.suse(a.ty, xs);
                let m = mask(e.ty.width());
                let v = match op {
                    UnOp::Not => u128::from(x == 0),
                    UnOp::BitNot => !x & m,
                    UnOp::Neg => x.wrapping_neg() & m,
                    UnOp::Plus => x,
                };
                (v, Src::None)
            }
            SNode::Bin(op, a, b) => {
                let (x, xs) = self.sev(a)?;
                let (y, ys) = self.sev(b)?;
                self.suse(a.ty, xs);
                self.suse(b.ty, ys);
                let (w, signed) = match a.ty {
                    STy::Bits(w, s) => (w, s),
                    STy::Bool => (1, false),
                };
                let m = mask(w);
                let ord = || {
                    if signed {
                        sext(x, w).cmp(&sext(y, w))
                    } else {
                        x.cmp(&y)
                    }
                };
                let v = match op {
                    BinOp::Add => x.wrapping_add(y) & m,
                    BinOp::Sub => x.wrapping_sub(y) & m,
                    BinOp::Mul => x.wrapping_mul(y) & m,
                    BinOp::BitAnd => x & y,
                    BinOp::BitOr => x | y,
                    BinOp::BitXor => x ^ y,
                    BinOp::Eq => u128::from(x == y),
                    BinOp::Ne => u128::from(x != y),
                    BinOp::Lt => u128::from(ord().is_lt()),
                    BinOp::Le => u128::from(ord().is_le()),
                    BinOp::Gt => u128::from(ord().is_gt()),
                    BinOp::Ge => u128::from(ord().is_ge()),
                    _ => return None,
                };
                (v, Src::None)
            }
            SNode::Logic(and, a, b) => {
                let (x, xs) = self.sev(a)?;
                self.suse(STy::Bool, xs);
                if (x != 0) != *and {
                    return Some((x, Src::None));
                }
                let (y, ys) = self.sev(b)?;
                self.suse(STy::Bool, ys);
                (y, Src::None)
            }
            SNode::Shift(left, a, b) => {
                let (x, xs) = self.sev(a)?;
                let (n, ns) = self.sev(b)?;
                self.suse(a.ty, xs);
                self.suse(b.ty, ns);
                let STy::Bits(w, signed) = a.ty else {
                    return None;
                };
                let v = if n >= u128::from(w) {
                    if !*left && signed && sext(x, w) < 0 {
                        mask(w)
                    } else {
                        0
                    }
                } else if *left {
                    (x << n) & mask(w)
                } else if signed {
                    ((sext(x, w) >> n) as u128) & mask(w)
                } else {
                    x >> n
                };
                (v, Src::None)
            }
            SNode::Concat(a, b) => {
                let (x, xs) = self.sev(a)?;
                let (y, ys) = self.sev(b)?;
                self.suse(a.ty, xs);
                self.suse(b.ty, ys);
                let wy = b.ty.width();
                let v = if wy >= 128 { y } else { (x << wy) | y };
                (v & mask(e.ty.width()), Src::None)
            }
            SNode::Slice(a, hi, lo) => {
                // `ops::slice`: no record; a packet source narrowed.
                let (x, xs) = self.sev(a)?;
                let w = a.ty.width();
                let src = match xs {
                    Src::Packet(off) => Src::Packet(off + (w - 1 - hi)),
                    s => s,
                };
                ((x >> lo) & mask(hi - lo + 1), src)
            }
            SNode::Cast(a) => {
                let (x, xs) = self.sev(a)?;
                self.suse(a.ty, xs);
                match (a.ty, e.ty) {
                    // `coerce_like` keeps a bool as it is, source too.
                    (STy::Bool, STy::Bool) => (x, xs),
                    (STy::Bits(..), STy::Bool) => (u128::from(x != 0), Src::None),
                    (STy::Bool, STy::Bits(w, _)) => (x & mask(w), Src::None),
                    (STy::Bits(wf, sf), STy::Bits(wt, _)) => {
                        let v = if sf && wt > wf {
                            sext(x, wf) as u128
                        } else {
                            x
                        };
                        (v & mask(wt), Src::None)
                    }
                }
            }
        })
    }
}
