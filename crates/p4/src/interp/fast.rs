//! The load-time compiled form of a program's bodies (control `apply`
//! blocks, parser states, actions, functions): what [`super::eval::Run`] walks
//! per packet instead of the AST on the data path.
//!
//! Why: the AST walker decides per packet what every name and call is
//! (a cascade of method-name compares, then hash lookups of the block's
//! locals, the program's functions and actions), converts every unsized
//! literal through a big integer, looks parser states up by name, and
//! allocates for select keys. All of that depends on the program only, so
//! it is decided once here: calls are resolved to their table, action,
//! function, extern method or extern function; constants and sized
//! literals are values; parser transitions point at state indices.
//!
//! What stays the same: the compiled form runs on the walker's variable
//! frames and calls the walker's own helpers (`use_val`, `assign`,
//! `apply_table`, `invoke`, the extern methods...) at the points the
//! walker calls them, in the same order, so the outputs and the whole
//! [`crate::trace::Trace`] (bits read, uncacheable reasons, tables,
//! counters) are the walker's. Every construct not compiled here is kept
//! as its AST and evaluated by the walker ([`CExpr::Walk`],
//! [`CStmt::Walk`]); `Pipeline::process_reference` never uses this form
//! (`crates/p4/tests/interp_differential.rs` compares the two).

use super::eval::{fail, lit_bits, read_bits, Ctl, Run, PKT_IN, PKT_OUT, R};
use crate::ast::{self, Arg, BinOp, Expr, Stmt};
use crate::interp::check::{BlockKind, FuncDef, Local, Prog, Ty};
use crate::interp::ops::{self, coerce_like};
use crate::value::{name_eq, FastMap, Src, Value};
use std::sync::Arc;

/// A compiled expression.
pub(crate) enum CExpr {
    /// A literal or a boolean (what the walker's evaluation gives).
    Lit(Value),
    /// A variable or a field chain of one (`hdr.ip.ttl`): borrowed from
    /// the frames; when it is not there, the walker evaluates the AST.
    Peek(Chain, Expr),
    /// A name that is a block constant, an extern instance or a global
    /// constant unless a variable of that name is in scope at run time
    /// (the walker looks variables up first).
    Named(ast::Ident, Value),
    Unary(ast::UnOp, Box<CExpr>, ast::Span),
    Binary(BinOp, Box<CExpr>, Box<CExpr>, ast::Span),
    /// `x op N` with an unsized literal N (converted to x's type).
    BinLit(BinOp, Box<CExpr>, ast::IntLit, Box<CExpr>, ast::Span),
    /// `e.isValid()`.
    IsValid(Expr, ast::Span),
    /// `t.apply()` of table `t` (unless a variable shadows its name).
    Apply(ast::Ident, usize, Expr),
    /// `obj.m(args)` on an extern instance or the packet.
    Method {
        obj: Box<CExpr>,
        name: String,
        type_args: Vec<ast::Type>,
        args: Vec<Arg>,
        span: ast::Span,
    },
    /// `obj.extract(chain)` with one argument, a field chain: when `obj`
    /// is the packet and the chain finds a header whose fields are all
    /// `bit<W>`/`bool`, the header is filled where it sits (no name
    /// search by `lvalue`, no method dispatch); otherwise as `Method`.
    Extract {
        obj: Box<CExpr>,
        chain: Chain,
        args: Vec<Arg>,
        span: ast::Span,
        /// The program declares a `header_union`: the chain may end at a
        /// union's member, whose siblings the extract makes invalid (a
        /// look at the parent after the fill; none in other programs).
        unions: bool,
    },
    /// `obj.emit(a, ...)`: when `obj` is the packet, each argument that is
    /// a field chain is emitted where it sits; otherwise as `Method`.
    Emit {
        obj: Box<CExpr>,
        chains: Vec<Option<Chain>>,
        args: Vec<Arg>,
        span: ast::Span,
    },
    /// A direct call of action `a`.
    Action(usize, Vec<Arg>),
    /// A call of a function with its compiled body (index in
    /// [`Code::functions`]).
    Func(Arc<FuncDef>, usize, Vec<Arg>),
    /// An extern function (`send_to_port`, `drop_packet`, ...).
    ExternFn {
        name: String,
        type_args: Vec<ast::Type>,
        args: Vec<Arg>,
        span: ast::Span,
    },
    /// Not compiled: the walker evaluates it.
    Walk(Expr),
}

/// A variable's field chain (`hdr.ip.ttl`) with each field's index
/// guessed at load from the variable's declared type: at run time a guess
/// is used only when the value's field-name array is the very one of that
/// type (`Arc::ptr_eq`), which makes the index the one the walker's name
/// search finds; otherwise the name is searched as the walker does.
pub(crate) struct Chain {
    pub root: String,
    pub steps: Vec<Step>,
}

pub(crate) struct Step {
    pub name: String,
    pub guess: Option<(Arc<[String]>, usize)>,
}

/// A compiled statement.
pub(crate) enum CStmt {
    /// `lhs = rhs`; the chain when the left side is a plain field chain.
    Assign(Expr, Option<Chain>, CExpr),
    Call(CExpr),
    If(CExpr, Box<CStmt>, Option<Box<CStmt>>, ast::Span),
    /// A nested block (its own variable frame).
    Block(Vec<CStmt>),
    /// A variable declaration with its type resolved at load.
    Var(String, Ty, Option<CExpr>, ast::Span),
    /// Not compiled: the walker executes it.
    Walk(Stmt),
}

/// Where a parser transition goes.
pub(crate) enum Next {
    Accept,
    Reject,
    State(usize),
    /// No such state: an error when reached (as in the walker).
    Missing(String),
}

/// One element of a compiled select case.
pub(crate) enum CKey {
    /// `default` / `_`.
    Any,
    /// An integer literal compared with a bit value.
    Lit(ast::IntLit, Expr),
    /// Anything else: the walker's `keyset_matches`.
    Walk(Expr),
}

pub(crate) enum CCase {
    /// A single `default`/`_` keyset.
    Default(Next),
    /// One key per select expression.
    Keys(Vec<CKey>, Next),
    /// The walker's `select_case_matches` on the AST keysets.
    Walk(Vec<Expr>, Next),
}

pub(crate) enum CTrans {
    Go(Next),
    Select(Vec<CExpr>, Vec<CCase>),
}

pub(crate) struct CState {
    pub body: Vec<CStmt>,
    pub trans: CTrans,
}

/// The compiled program (see the module documentation).
#[derive(Default)]
pub(crate) struct Code {
    /// Per block: a control's `apply` statements.
    pub controls: Vec<Option<Vec<CStmt>>>,
    /// Per block: a parser's states, in the AST's order.
    pub states: Vec<Option<Vec<CState>>>,
    /// Per action: its body.
    pub actions: Vec<Vec<CStmt>>,
    /// Function bodies.
    pub functions: Vec<Vec<CStmt>>,
    /// Per table: its key expressions.
    pub keys: Vec<Vec<CExpr>>,
    /// The values the main blocks share, as slots (PNA's run).
    pub shared: SharedLayout,
}

/// How a main block's parameter gets its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamSlot {
    PktIn,
    PktOut,
    /// Shared value `slot` (index in [`SharedLayout::keys`]); `once`:
    /// no other parameter of the block has the same type.
    Shared {
        slot: usize,
        once: bool,
    },
}

/// The architecture's shared values (headers, metadata, the input and
/// output metadata) of the main blocks by slot instead of by type name:
/// the layout is decided at load (`arch::run_block_slots`).
#[derive(Default)]
pub(crate) struct SharedLayout {
    /// Type name (the key the walker's map uses) per slot.
    pub keys: Vec<String>,
    /// Per main block (in `Prog::main_blocks` order), per parameter.
    pub params: Vec<Vec<ParamSlot>>,
}

/// What the compiler needs to resolve names: the program, the block whose
/// locals are in scope (`None` in functions) and the functions' indices.
struct Cx<'p> {
    p: &'p Prog,
    block: Option<usize>,
    fns: &'p FastMap<String, usize>,
    /// Declared types of the names in scope (for the field guesses).
    scope: Vec<(String, Ty)>,
}

/// Compiles every body of `p`.
pub(crate) fn compile(p: &Prog) -> Code {
    let mut names: Vec<(&String, &Arc<FuncDef>)> = p.g.functions.iter().collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    let fns: FastMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, (n, _))| ((*n).clone(), i))
        .collect();
    let mut code = Code {
        shared: shared_layout(p),
        ..Code::default()
    };
    for (_, f) in &names {
        let cx = Cx {
            p,
            block: None,
            fns: &fns,
            scope: params_scope(&f.decl.proto.params, &f.param_tys),
        };
        code.functions.push(cx.stmts(&f.decl.body.stmts));
    }
    for a in &p.actions {
        let mut scope = a.block.map(|b| block_scope(p, b)).unwrap_or_default();
        scope.extend(params_scope(&a.decl.params, &a.param_tys));
        let cx = Cx {
            p,
            block: a.block,
            fns: &fns,
            scope,
        };
        code.actions.push(cx.stmts(&a.decl.body.stmts));
    }
    for (ti, t) in p.tables.iter().enumerate() {
        // The block that declares the table: its names are the keys'.
        let owner = p.blocks.iter().position(|b| {
            b.locals
                .values()
                .any(|l| matches!(l, Local::Table(x) if *x == ti))
        });
        let cx = Cx {
            p,
            block: owner,
            fns: &fns,
            scope: owner.map(|b| block_scope(p, b)).unwrap_or_default(),
        };
        code.keys
            .push(t.keys.iter().map(|k| cx.expr(&k.expr)).collect());
    }
    for (b, blk) in p.blocks.iter().enumerate() {
        let cx = Cx {
            p,
            block: Some(b),
            fns: &fns,
            scope: block_scope(p, b),
        };
        match &blk.kind {
            BlockKind::Control(c) => {
                code.controls.push(Some(cx.stmts(&c.apply.stmts)));
                code.states.push(None);
            }
            BlockKind::Parser(pd) => {
                code.controls.push(None);
                let states = pd
                    .states
                    .iter()
                    .map(|s| CState {
                        body: cx.stmts(&s.body),
                        trans: cx.trans(b, s),
                    })
                    .collect();
                code.states.push(Some(states));
            }
        }
    }
    code
}

impl Cx<'_> {
    fn local(&self, name: &str) -> Option<&Local> {
        self.block.and_then(|b| self.p.blocks[b].locals.get(name))
    }

    /// `e` as a field chain of a variable, with the guesses its declared
    /// type gives (none for names not in `scope`).
    fn chain(&self, e: &Expr) -> Option<Chain> {
        let mut names = Vec::new();
        let mut x = e;
        let root = loop {
            match x {
                Expr::Path(id) => break id.name.clone(),
                Expr::Member(b, m) => {
                    names.push(m.name.clone());
                    x = b;
                }
                _ => return None,
            }
        };
        names.reverse();
        let mut ty = self
            .scope
            .iter()
            .rev()
            .find(|(n, _)| *n == root)
            .map(|(_, t)| t);
        let mut steps = Vec::with_capacity(names.len());
        for name in names {
            let agg = match ty {
                Some(Ty::Header(a)) | Some(Ty::Struct(a)) => Some(a),
                _ => None,
            };
            let found = agg.and_then(|a| Some((a, a.names.iter().position(|n| *n == name)?)));
            ty = found.and_then(|(a, i)| a.fields.get(i)).map(|(_, t)| t);
            steps.push(Step {
                guess: found.map(|(a, i)| (a.names.clone(), i)),
                name,
            });
        }
        Some(Chain { root, steps })
    }

    fn stmts(&self, s: &[Stmt]) -> Vec<CStmt> {
        s.iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&self, s: &Stmt) -> CStmt {
        match s {
            Stmt::Assign { lhs, rhs, .. } => {
                CStmt::Assign(lhs.clone(), self.chain(lhs), self.expr(rhs))
            }
            Stmt::Call(e) => CStmt::Call(self.expr(e)),
            Stmt::If {
                cond,
                then,
                otherwise,
                span,
            } => CStmt::If(
                self.expr(cond),
                Box::new(self.stmt(then)),
                otherwise.as_ref().map(|o| Box::new(self.stmt(o))),
                span.clone(),
            ),
            Stmt::Block(b) => CStmt::Block(self.stmts(&b.stmts)),
            Stmt::Var(v) => {
                let locals = self.block.map(|b| &self.p.blocks[b].locals);
                match self.p.resolve_type(&v.ty, locals) {
                    Ok(ty) => CStmt::Var(
                        v.name.name.clone(),
                        ty,
                        v.init.as_ref().map(|e| self.expr(e)),
                        v.span.clone(),
                    ),
                    Err(_) => CStmt::Walk(s.clone()),
                }
            }
            o => CStmt::Walk(o.clone()),
        }
    }

    /// What `eval_path` gives for `id` when no variable has that name.
    fn named(&self, id: &ast::Ident) -> Option<Value> {
        match self.local(&id.name) {
            Some(Local::Const(v)) => return Some(v.clone()),
            Some(Local::Extern(i)) => return Some(Value::Instance(*i)),
            Some(_) => return None,
            None => {}
        }
        self.p.g.consts.get(&id.name).cloned()
    }

    fn expr(&self, e: &Expr) -> CExpr {
        match e {
            Expr::Int(lit, _) => match lit.width.and_then(|(w, s)| lit_bits(lit, w, s)) {
                Some(b) => CExpr::Lit(Value::Bits(b)),
                None => CExpr::Walk(e.clone()),
            },
            Expr::Bool(b, _) => CExpr::Lit(Value::Bool(*b, Src::None)),
            Expr::Path(id) => match self.named(id) {
                Some(v) => CExpr::Named(id.clone(), v),
                None => match self.chain(e) {
                    Some(c) => CExpr::Peek(c, e.clone()),
                    None => CExpr::Walk(e.clone()),
                },
            },
            Expr::Member(..) => match self.chain(e) {
                Some(c) => CExpr::Peek(c, e.clone()),
                None => CExpr::Walk(e.clone()),
            },
            Expr::Unary(op, a, span) => CExpr::Unary(*op, Box::new(self.expr(a)), span.clone()),
            Expr::Binary(op, a, b, span) => {
                let shortcut = matches!(op, BinOp::And | BinOp::Or);
                match &**b {
                    Expr::Int(lit, _)
                        if !shortcut
                            && lit.width.is_none()
                            && !matches!(op, BinOp::Shl | BinOp::Shr | BinOp::Concat) =>
                    {
                        CExpr::BinLit(
                            *op,
                            Box::new(self.expr(a)),
                            lit.clone(),
                            Box::new(self.expr(b)),
                            span.clone(),
                        )
                    }
                    _ => CExpr::Binary(
                        *op,
                        Box::new(self.expr(a)),
                        Box::new(self.expr(b)),
                        span.clone(),
                    ),
                }
            }
            Expr::Call {
                func,
                type_args,
                args,
                span,
            } => self.call(e, func, type_args, args, span),
            o => CExpr::Walk(o.clone()),
        }
    }

    /// `obj.name(args)` left to `Run::call_method`.
    fn method(
        &self,
        obj: &Expr,
        name: &str,
        type_args: &[ast::Type],
        args: &[Arg],
        span: &ast::Span,
    ) -> CExpr {
        CExpr::Method {
            obj: Box::new(self.expr(obj)),
            name: name.to_string(),
            type_args: type_args.to_vec(),
            args: args.to_vec(),
            span: span.clone(),
        }
    }

    /// A call resolved as `Run::call_inner` resolves it per packet.
    fn call(
        &self,
        whole: &Expr,
        func: &Expr,
        type_args: &[ast::Type],
        args: &[Arg],
        span: &ast::Span,
    ) -> CExpr {
        match func {
            Expr::Member(obj, m) => match m.name.as_str() {
                "isValid" => CExpr::IsValid((**obj).clone(), span.clone()),
                "setValid" | "setInvalid" | "push_front" | "pop_front" => {
                    CExpr::Walk(whole.clone())
                }
                "apply" => match &**obj {
                    Expr::Path(id) => match self.local(&id.name) {
                        Some(Local::Table(t)) => CExpr::Apply(id.clone(), *t, whole.clone()),
                        _ => CExpr::Walk(whole.clone()),
                    },
                    _ => CExpr::Walk(whole.clone()),
                },
                "extract" if args.len() == 1 && type_args.is_empty() => {
                    match self.chain(&args[0].value) {
                        Some(chain) => CExpr::Extract {
                            obj: Box::new(self.expr(obj)),
                            chain,
                            args: args.to_vec(),
                            span: span.clone(),
                            unions: self.p.has_header_unions(),
                        },
                        None => self.method(obj, "extract", type_args, args, span),
                    }
                }
                "emit" if type_args.is_empty() => CExpr::Emit {
                    obj: Box::new(self.expr(obj)),
                    chains: args.iter().map(|a| self.chain(&a.value)).collect(),
                    args: args.to_vec(),
                    span: span.clone(),
                },
                name => CExpr::Method {
                    obj: Box::new(self.expr(obj)),
                    name: name.to_string(),
                    type_args: type_args.to_vec(),
                    args: args.to_vec(),
                    span: span.clone(),
                },
            },
            Expr::Path(id) => {
                let n = id.name.as_str();
                if let Some(Local::Action(a)) = self.local(n) {
                    return CExpr::Action(*a, args.to_vec());
                }
                if let Some(f) = self.p.g.functions.get(n) {
                    return match self.fns.get(n) {
                        Some(&i) => CExpr::Func(f.clone(), i, args.to_vec()),
                        None => CExpr::Walk(whole.clone()),
                    };
                }
                if let Some(a) = self.p.g.actions.get(n) {
                    return CExpr::Action(*a, args.to_vec());
                }
                CExpr::ExternFn {
                    name: n.to_string(),
                    type_args: type_args.to_vec(),
                    args: args.to_vec(),
                    span: span.clone(),
                }
            }
            _ => CExpr::Walk(whole.clone()),
        }
    }

    fn next(&self, b: usize, name: &str) -> Next {
        match name {
            "accept" => Next::Accept,
            "reject" => Next::Reject,
            n => match self.p.blocks[b].states.get(n) {
                Some(&i) => Next::State(i),
                None => Next::Missing(n.to_string()),
            },
        }
    }

    fn trans(&self, b: usize, s: &ast::ParserState) -> CTrans {
        match &s.transition {
            None => CTrans::Go(Next::Reject),
            Some(ast::Transition::Direct(id)) => CTrans::Go(self.next(b, &id.name)),
            Some(ast::Transition::Select { exprs, cases, .. }) => {
                let n = exprs.len();
                let cases = cases
                    .iter()
                    .map(|c| {
                        let next = self.next(b, &c.next.name);
                        let ks = &c.keysets;
                        if ks.len() == 1 && matches!(ks[0], Expr::Default(_) | Expr::DontCare(_)) {
                            return CCase::Default(next);
                        }
                        if ks.len() != n || (ks.len() == 1 && n > 1) {
                            return CCase::Walk(ks.clone(), next);
                        }
                        let keys = ks
                            .iter()
                            .map(|k| match k {
                                Expr::Default(_) | Expr::DontCare(_) => CKey::Any,
                                Expr::Int(lit, _) => CKey::Lit(lit.clone(), k.clone()),
                                o => CKey::Walk(o.clone()),
                            })
                            .collect();
                        CCase::Keys(keys, next)
                    })
                    .collect();
                CTrans::Select(exprs.iter().map(|e| self.expr(e)).collect(), cases)
            }
        }
    }
}

/// Names and declared types of a parameter list.
fn params_scope(params: &[ast::Param], tys: &[Ty]) -> Vec<(String, Ty)> {
    params
        .iter()
        .zip(tys)
        .map(|(p, t)| (p.name.name.clone(), t.clone()))
        .collect()
}

/// A block's parameters and variables with their types.
fn block_scope(p: &Prog, b: usize) -> Vec<(String, Ty)> {
    let blk = &p.blocks[b];
    let mut s = params_scope(blk.params(), &blk.param_tys);
    s.extend(
        blk.vars
            .iter()
            .map(|(v, t)| (v.name.name.clone(), t.clone())),
    );
    s
}

/// The slots of the main blocks' shared values (by the same type-name
/// keys as `arch::run_block`).
fn shared_layout(p: &Prog) -> SharedLayout {
    let mut l = SharedLayout::default();
    for (_, b) in &p.main_blocks {
        let blk = &p.blocks[*b];
        let keys: Vec<String> = blk
            .param_tys
            .iter()
            .map(crate::interp::arch::ty_key)
            .collect();
        let params = keys
            .iter()
            .map(|k| match k.as_str() {
                "packet_in" => ParamSlot::PktIn,
                "packet_out" => ParamSlot::PktOut,
                _ => {
                    let slot = match l.keys.iter().position(|x| x == k) {
                        Some(i) => i,
                        None => {
                            l.keys.push(k.clone());
                            l.keys.len() - 1
                        }
                    };
                    let once = keys.iter().filter(|x| *x == k).count() == 1;
                    ParamSlot::Shared { slot, once }
                }
            })
            .collect();
        l.params.push(params);
    }
    l
}

/// The walker's `extract` into header `h` from bit `pos` of `pkt` when
/// every field is a `bit<W>` or a `bool`: `Some(Some(width))` after
/// filling it (values, sources, validity), `Some(None)` when the packet is
/// too short (nothing written), `None` when a field is of another kind
/// (nothing written: the walker handles varbits and errors).
fn fill_fixed(
    h: &mut crate::value::HeaderVal,
    pkt: &[u8],
    pos: u64,
    first: bool,
    tag: &'static str,
) -> Option<Option<u64>> {
    let mut w = 0u64;
    for f in &h.fields {
        w += match f {
            Value::Bits(b) => u64::from(b.width),
            Value::Bool(..) => 1,
            _ => return None,
        };
    }
    if pos + w > pkt.len() as u64 * 8 {
        return Some(None);
    }
    let mut off = pos;
    for f in h.fields.iter_mut() {
        let src = if first {
            Src::Packet(off as u32)
        } else {
            Src::Tainted(tag)
        };
        match f {
            Value::Bits(b) => {
                b.v = read_bits(pkt, off, b.width);
                b.src = src;
                off += u64::from(b.width);
            }
            Value::Bool(b, s) => {
                *b = read_bits(pkt, off, 1) == 1;
                *s = src;
                off += 1;
            }
            _ => {}
        }
    }
    h.valid = true;
    Some(Some(w))
}

/// One step of a [`Chain`]: the field the walker's name search finds.
fn step<'v>(v: &'v Value, s: &Step) -> Option<&'v Value> {
    if let Some((names, i)) = &s.guess {
        match v {
            Value::Header(h) if Arc::ptr_eq(&h.names, names) => return h.fields.get(*i),
            Value::Struct(_, n, vals) if Arc::ptr_eq(n, names) => return vals.get(*i),
            _ => {}
        }
    }
    v.field(&s.name)
}

/// [`step`] for writing; `None` for stacks (their `next`/`last` are the
/// walker's).
fn step_mut<'v>(v: &'v mut Value, s: &Step) -> Option<&'v mut Value> {
    let pick = |names: &Arc<[String]>| match &s.guess {
        Some((g, i)) if Arc::ptr_eq(names, g) => Some(*i),
        _ => names.iter().position(|n| name_eq(n, &s.name)),
    };
    // The index first (shared borrow), then the field (the walker's
    // `field_mut`: nothing for other values, stacks included).
    let i = match &*v {
        Value::Header(h) => pick(&h.names)?,
        Value::Struct(_, names, _) => pick(names)?,
        _ => return None,
    };
    match v {
        Value::Header(h) => h.fields.get_mut(i),
        Value::Struct(_, _, vals) => vals.get_mut(i),
        _ => None,
    }
}

impl<'a> Run<'a> {
    /// The compiled form, unless this run is the reference evaluator.
    pub(crate) fn code(&self) -> Option<&'a Code> {
        if self.reference {
            return None;
        }
        let p: &'a Prog = self.p;
        p.fast.as_ref()
    }

    /// What `peek_in` borrows for the chain's expression.
    fn peek_chain(&self, c: &Chain) -> Option<&Value> {
        let mut v = super::eval::var_in(&self.frames[self.base..], &c.root)?;
        for s in &c.steps {
            v = step(v, s)?;
        }
        Some(v)
    }

    /// What the walker's `lvalue` gives for the chain's expression, or
    /// `None` (then the walker's `assign` decides, errors included).
    fn chain_mut(&mut self, c: &Chain) -> Option<&mut Value> {
        self.chain_prefix_mut(c, c.steps.len())
    }

    /// The value `c`'s root and its first `n` steps find.
    fn chain_prefix_mut(&mut self, c: &Chain, n: usize) -> Option<&mut Value> {
        let mut v = self.var_mut(&c.root)?;
        for s in &c.steps[..n] {
            v = step_mut(v, s)?;
        }
        Some(v)
    }

    /// The walker's `extract` of one header argument when `c` finds a
    /// header whose fields are all `bit<W>`/`bool` (same bits, sources,
    /// validity, position, packet length needed and reject); `None`, with
    /// nothing changed, when it does not (the walker decides then).
    fn cextract(&mut self, c: &Chain) -> Option<R<Value>> {
        let pos = self.pos;
        let first = self.first_pass;
        let tag = self.reparse_tag;
        let pkt = std::mem::take(&mut self.pkt);
        let r = match self.chain_mut(c) {
            Some(Value::Header(h)) => fill_fixed(h, &pkt, pos, first, tag),
            _ => None,
        };
        self.pkt = pkt;
        match r? {
            Some(w) => {
                self.need_bytes(pos + w);
                self.pos += w;
                Some(Ok(Value::Void))
            }
            None => {
                self.tr.set_uncacheable("p4-parser-error");
                Some(Err(Ctl::Reject("PacketTooShort".into())))
            }
        }
    }

    /// After `c`'s header was extracted: when its parent is a header
    /// union, the union's other members become invalid (as the walker's
    /// extract does, `union_select`).
    fn union_extracted(&mut self, c: &Chain) {
        let Some(last) = c.steps.last() else {
            return;
        };
        let p = self.p;
        if let Some(v) = self.chain_prefix_mut(c, c.steps.len() - 1) {
            super::eval::union_select(p, v, &last.name, true);
        }
    }

    /// Emits the value `c` finds; `None` (nothing emitted) when it finds
    /// none.
    fn emit_chain(&mut self, c: &Chain) -> Option<R<()>> {
        let mut v = super::eval::var_in(&self.frames[self.base..], &c.root)?;
        for s in &c.steps {
            v = step(v, s)?;
        }
        Some(super::eval::emit_into(&mut self.out, &mut self.prov, v))
    }

    /// [`Run::eval`] of a compiled expression.
    pub(crate) fn ceval(&mut self, e: &'a CExpr) -> R<Value> {
        self.enter()?;
        let r = self.ceval_inner(e);
        self.depth -= 1;
        r
    }

    fn ceval_inner(&mut self, e: &'a CExpr) -> R<Value> {
        match e {
            CExpr::Lit(v) => Ok(v.clone()),
            CExpr::Peek(c, x) => match self.peek_chain(c) {
                Some(v) => Ok(v.clone()),
                None => self.eval(x),
            },
            CExpr::Named(id, v) => match self.var(&id.name) {
                Some(x) => Ok(x.clone()),
                None => Ok(v.clone()),
            },
            CExpr::Unary(op, a, span) => {
                let a = self.ceval(a)?;
                self.use_val(&a);
                ops::unop(*op, a).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            CExpr::Binary(op, a, b, span) => {
                if matches!(op, BinOp::And | BinOp::Or) {
                    let x = self.ceval(a)?;
                    self.use_val(&x);
                    if let Value::Bool(xb, _) = x {
                        if (*op == BinOp::And && !xb) || (*op == BinOp::Or && xb) {
                            return Ok(Value::Bool(xb, Src::None));
                        }
                    }
                    let y = self.ceval(b)?;
                    self.use_val(&y);
                    return ops::binop(*op, x, y).map_err(|m| Ctl::Fail(format!("{span}: {m}")));
                }
                let x = self.ceval(a)?;
                let y = self.ceval(b)?;
                self.use_val(&x);
                self.use_val(&y);
                ops::binop(*op, x, y).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            CExpr::BinLit(op, a, lit, b, span) => {
                let x = self.ceval(a)?;
                if let Value::Bits(xb) = &x {
                    if let Some(yb) = lit_bits(lit, xb.width, xb.signed) {
                        return self.binop_lit(*op, x, yb, span);
                    }
                }
                let y = self.ceval(b)?;
                self.use_val(&x);
                self.use_val(&y);
                ops::binop(*op, x, y).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            CExpr::IsValid(obj, span) => self.is_valid(obj, span),
            CExpr::Apply(id, t, whole) => {
                if self.var(&id.name).is_none() {
                    self.apply_table(*t)
                } else {
                    self.eval(whole)
                }
            }
            CExpr::Method {
                obj,
                name,
                type_args,
                args,
                span,
            } => {
                let recv = self.ceval(obj)?;
                self.call_method(recv, name, type_args, args, span)
            }
            CExpr::Extract {
                obj,
                chain,
                args,
                span,
                unions,
            } => {
                let recv = self.ceval(obj)?;
                if matches!(recv, Value::Instance(PKT_IN)) {
                    if let Some(r) = self.cextract(chain) {
                        if *unions && r.is_ok() {
                            self.union_extracted(chain);
                        }
                        return r;
                    }
                }
                self.call_method(recv, "extract", &[], args, span)
            }
            CExpr::Emit {
                obj,
                chains,
                args,
                span,
            } => {
                let recv = self.ceval(obj)?;
                if !matches!(recv, Value::Instance(PKT_OUT)) {
                    return self.call_method(recv, "emit", &[], args, span);
                }
                for (c, a) in chains.iter().zip(args) {
                    // The header where the chain finds it; the walker's
                    // way (name search, or evaluation) when it does not.
                    match c.as_ref().and_then(|c| self.emit_chain(c)) {
                        Some(r) => r?,
                        None => self.emit_arg(a)?,
                    }
                }
                Ok(Value::Void)
            }
            CExpr::Action(a, args) => self.call_action(*a, Some(args), None),
            CExpr::Func(f, i, args) => {
                let f: &'a FuncDef = f;
                let body = self.code().map(|c| c.functions[*i].as_slice());
                self.invoke(
                    &f.decl.proto.params,
                    &f.param_tys,
                    args,
                    None,
                    &f.decl.body,
                    body,
                    true,
                    Some(None),
                )
            }
            CExpr::ExternFn {
                name,
                type_args,
                args,
                span,
            } => self.extern_function(name, type_args, args, span),
            CExpr::Walk(x) => self.eval(x),
        }
    }

    /// [`Run::exec`] of a compiled statement.
    pub(crate) fn cexec(&mut self, s: &'a CStmt) -> R<()> {
        self.enter()?;
        let r = self.cexec_inner(s);
        self.depth -= 1;
        r
    }

    /// Runs compiled statements in a new frame.
    pub(crate) fn cexec_block(&mut self, b: &'a [CStmt]) -> R<()> {
        let f = self.new_frame();
        self.frames.push(f);
        let r = b.iter().try_for_each(|s| self.cexec(s));
        self.pop_frame();
        r
    }

    fn cexec_inner(&mut self, s: &'a CStmt) -> R<()> {
        match s {
            CStmt::Assign(lhs, chain, rhs) => {
                let v = self.ceval(rhs)?;
                // Copying a computed checksum is not a decision on it.
                self.assigning = true;
                self.use_val(&v);
                self.assigning = false;
                if let Some(target) = chain.as_ref().and_then(|c| self.chain_mut(c)) {
                    // The walker's `assign` of a plain lvalue.
                    let nv = coerce_like(target, v)
                        .map_err(|m| Ctl::Fail(format!("{}: {m}", lhs.span())))?;
                    *target = nv;
                    return Ok(());
                }
                self.assign(lhs, v)
            }
            CStmt::Call(e) => self.ceval(e).map(|_| ()),
            CStmt::If(cond, then, otherwise, span) => {
                let c = self.ceval(cond)?;
                self.use_val(&c);
                match c {
                    Value::Bool(true, _) => self.cexec(then),
                    Value::Bool(false, _) => match otherwise {
                        Some(o) => self.cexec(o),
                        None => Ok(()),
                    },
                    _ => fail(format!("{span}: condition is not a boolean")),
                }
            }
            CStmt::Block(b) => self.cexec_block(b),
            CStmt::Var(name, ty, init, span) => {
                let mut val = ty.default_value();
                if let Some(init) = init {
                    let iv = self.ceval(init)?;
                    self.use_val(&iv);
                    val = coerce_like(&val, iv).map_err(|m| Ctl::Fail(format!("{span}: {m}")))?;
                }
                self.declare(name, val);
                Ok(())
            }
            CStmt::Walk(s) => self.exec(s),
        }
    }

    /// A parser's states, compiled (the walker's `run_states`, which
    /// starts at the state named `start`).
    pub(crate) fn crun_states(
        &mut self,
        b: usize,
        states: &'a [CState],
        span: &ast::Span,
    ) -> R<()> {
        let p: &'a Prog = self.p;
        let start = match p.blocks[b].states.get("start") {
            Some(&i) => Next::State(i),
            None => Next::Missing("start".into()),
        };
        let mut cur: &Next = &start;
        loop {
            self.tick()?;
            let si = match cur {
                Next::Accept => return Ok(()),
                Next::Reject => return Err(Ctl::Reject(String::new())),
                Next::Missing(n) => return fail(format!("{span}: no parser state {n}")),
                Next::State(i) => *i,
            };
            let Some(st) = states.get(si) else {
                return fail(format!("{span}: no parser state #{si}"));
            };
            let f = self.new_frame();
            self.frames.push(f);
            let r = st.body.iter().try_for_each(|s| self.cexec(s));
            let next = match r {
                Ok(()) => self.ctransition(&st.trans),
                Err(e) => Err(e),
            };
            self.pop_frame();
            cur = next?;
        }
    }

    fn ctransition(&mut self, t: &'a CTrans) -> R<&'a Next> {
        match t {
            CTrans::Go(n) => Ok(n),
            CTrans::Select(exprs, cases) => {
                let mut vals = self.st.pool.data.pop().unwrap_or_default();
                vals.clear();
                let r = self.cselect(exprs, cases, &mut vals);
                if self.st.pool.data.len() < 16 {
                    vals.clear();
                    self.st.pool.data.push(vals);
                }
                r
            }
        }
    }

    fn cselect(
        &mut self,
        exprs: &'a [CExpr],
        cases: &'a [CCase],
        vals: &mut Vec<Value>,
    ) -> R<&'a Next> {
        for e in exprs {
            let v = self.ceval(e)?;
            vals.push(v);
        }
        for v in vals.iter() {
            self.use_val(v);
        }
        for c in cases {
            let (hit, next) = match c {
                CCase::Default(n) => (true, n),
                CCase::Walk(ks, n) => (self.select_case_matches(vals, ks)?, n),
                CCase::Keys(ks, n) => {
                    let mut all = true;
                    for (k, v) in ks.iter().zip(vals.iter()) {
                        let m = match (k, v) {
                            (CKey::Any, _) => true,
                            (CKey::Lit(lit, x), Value::Bits(b)) => {
                                // The walker's eval + eq_vals, without a
                                // big integer.
                                let (w, s) = lit.width.unwrap_or((b.width, b.signed));
                                match lit_bits(lit, w, s) {
                                    Some(l) => {
                                        self.tick()?;
                                        l.v == b.v
                                    }
                                    None => self.keyset_matches(x, v)?,
                                }
                            }
                            (CKey::Lit(_, x), _) | (CKey::Walk(x), _) => {
                                self.keyset_matches(x, v)?
                            }
                        };
                        if !m {
                            all = false;
                            break;
                        }
                    }
                    (all, n)
                }
            };
            if hit {
                return Ok(next);
            }
        }
        Err(Ctl::Reject("NoMatch".into()))
    }
}
