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

use super::eval::{fail, lit_bits, read_bits, Ctl, Run, MAX_DEPTH, MAX_STEPS, PKT_IN, PKT_OUT, R};
pub(crate) use super::externs::CsumOp;
use crate::ast::{self, Arg, BinOp, Expr, Stmt};
use crate::interp::check::{Agg, BlockKind, FuncDef, Local, Prog, Ty};
use crate::interp::ops::{self, coerce_like};
use crate::value::{name_eq, FastMap, Src, Value};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

mod scalar;
pub(crate) use scalar::{STy, Scalar};

/// A compiled expression.
pub(crate) enum CExpr {
    /// A literal or a boolean (what the walker's evaluation gives).
    Lit(Value),
    /// A variable or a field chain of one (`hdr.ip.ttl`): borrowed from
    /// the frames; when it is not there, the walker evaluates the AST.
    Peek(Chain, Expr),
    /// A name that is a block constant, an extern instance or a global
    /// constant unless a variable of that name is in scope at run time
    /// (the walker looks variables up first; `false`: no variable of that
    /// name can be in view, [`Domain`], and the frames are not searched).
    Named(ast::Ident, Value, bool),
    Unary(ast::UnOp, Box<CExpr>, ast::Span),
    Binary(BinOp, Box<CExpr>, Box<CExpr>, ast::Span),
    /// `x op N` with an unsized literal N (converted to x's type).
    BinLit(BinOp, Box<CExpr>, ast::IntLit, Box<CExpr>, ast::Span),
    /// `e.isValid()`; the chain when `e` is a header of the flat headers.
    IsValid(Expr, Option<Chain>, ast::Span),
    /// `t.apply()` of table `t` (unless a variable shadows its name;
    /// `false`: no variable of that name can be in view, [`Domain`], and
    /// the frames are not searched).
    Apply(ast::Ident, usize, Expr, bool),
    /// `obj.m(args)` on an extern instance or the packet.
    Method {
        obj: Box<CExpr>,
        name: String,
        type_args: Vec<ast::Type>,
        args: Vec<Arg>,
        span: ast::Span,
        /// The arguments compiled, when they name a flat header parameter
        /// of a specialised function ([`FlatSpec`]) and the extern method
        /// takes every argument `in` (the extern reads them through
        /// `Run::cargs`: the walker knows no such parameter).
        cargs: Option<Vec<CArg>>,
        /// The method when `obj` is an `InternetChecksum` (decided at
        /// load from the instance's declared type): run by
        /// `Run::csum_method` without the extern dispatch by name and
        /// without serializing the data list into a buffer.
        csum: Option<CsumOp>,
    },
    /// `method` (a [`CExpr::Method`] with `csum`) on an `InternetChecksum`
    /// instance known at load (a block's, or a specialised body's
    /// parameter bound to one, [`FlatSpec::insts`]) whose arguments take
    /// the compiled way: none (`clear`, `get`, `get_state`), `set_state`'s
    /// one, or `add`'s/`subtract`'s list of scalar-tier items that cannot
    /// decline ([`csum_sure`]), 128 bits or fewer in all. Run by
    /// `Run::csum_bound` with the method form's steps and depth, no
    /// receiver look-up, no extern type check by name, no dispatch and no
    /// `Value` for an argument; `method` itself when the step or depth
    /// limit is near or the run does not hold the flat headers the items
    /// read (it then fails or declines where it would). Why: the five
    /// checksum calls of `ip_ttl_dec` were ~1,900 instructions per packet
    /// on routing.p4 (docs/results/p4.md 2v).
    Csum {
        inst: usize,
        op: CsumOp,
        /// The steps the arguments may count at most (`2 *` the items'
        /// [`Scalar::nodes`] and `set_state`'s `enter`), their deepest
        /// [`Scalar::depth`], and whether one reads the flat headers.
        steps: u64,
        depth: u32,
        flat: bool,
        method: Box<CExpr>,
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
    /// A direct call of action `a` specialised for its flat header
    /// arguments (index in [`Code::specs`], as [`CExpr::FuncFlat`]; the
    /// plain call when the run does not hold the headers flat).
    ActionFlat(usize, usize, Vec<Arg>),
    /// A call of a function with its compiled body (index in
    /// [`Code::functions`]).
    Func(Arc<FuncDef>, usize, Vec<Arg>),
    /// A call of a function whose `inout` header parameters are given
    /// headers of the flat headers: its body compiled for those (index in
    /// [`Code::specs`]), nothing copied in or out for them; as
    /// [`CExpr::Func`] (the index in [`Code::functions`] first) when the
    /// run does not hold the headers flat (a non-PNA program).
    FuncFlat(Arc<FuncDef>, usize, usize, Vec<Arg>),
    /// An extern function (`send_to_port`, `drop_packet`, ...).
    ExternFn {
        name: String,
        type_args: Vec<ast::Type>,
        args: Vec<Arg>,
        span: ast::Span,
        /// The arguments compiled, for the extern functions that only
        /// evaluate theirs (`Run::arg_val`; see [`extern_fn_cargs`]): run
        /// through `Run::cargs` as a method's. Why: `send_to_port(port)`
        /// went through the walker's `eval` on every packet (~400
        /// instructions with the dispatch, docs/results/p4.md 2p).
        cargs: Option<Vec<CArg>>,
        /// `send_to_port(e)` with `e` in the scalar tier: the port is
        /// taken from the tier's `u128` (no `Value` built, no dispatch by
        /// name), with `arg_used`'s record, steps and depth.
        port: bool,
    },
    /// `(T) e` (the walker's cast, `T` resolved at load).
    Cast(Ty, Box<CExpr>, ast::Span),
    /// `e[hi:lo]` with literal bounds.
    Slice(Box<CExpr>, u32, u32, ast::Span),
    /// An expression of the scalar tier ([`scalar`]): evaluated on
    /// `u128` with the second form, the same expression compiled as
    /// above, as the fallback when the tier cannot run it.
    Scalar(Box<Scalar>, Box<CExpr>),
    /// Parameter `i` of a scalar-bound action ([`SAction`]), from the
    /// run's scalar store, as the `Value` the frame would hold.
    AParam(usize, STy),
    /// Not compiled: the walker evaluates it.
    Walk(Expr),
}

/// A compiled extern method argument.
// `One` holds a `CExpr` inline (~240 bytes since `Chain` carries the slot
// array's place and the packet receiver): a list's items are few and
// boxing `One` would add a pointer chase per argument on the data path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CArg {
    One(CExpr),
    /// A list `{ a, b }` (checksum data): its items.
    List(Vec<CExpr>),
}

/// A function's or action's body compiled for a call whose `inout` header arguments
/// are headers of the flat headers (`ip_ttl_dec(chk, hdr.ip)`): the
/// parameter's chains (`ip.ttl`) are places in the flat array, so the
/// call builds no header tree and writes none back. Why: copying
/// `hdr.ip` into a tree and out again was the flat layout's largest new
/// cost (docs/results/p4.md 2j). Only where aliasing cannot be told
/// apart from copy-in/copy-out: `inout` parameters, distinct headers, no
/// other argument naming them, the body never handing the parameter to
/// the walker.
pub(crate) struct FlatSpec {
    pub body: Vec<CStmt>,
    /// Per parameter: the flat header it stands for.
    pub alias: Vec<Option<usize>>,
    /// Per parameter: the extern instance it is bound to at load (a
    /// directionless extern-typed parameter whose argument is an instance
    /// no variable can hide, `ip_ttl_dec(chk, ..)`'s `chk`): the body
    /// reads it as that instance ([`CExpr::Named`]), nothing is bound in
    /// the frame. Why: the argument went through the walker's `eval` and
    /// every `chk.m(..)` searched the frame for the receiver (~650
    /// instructions per packet on routing.p4, docs/results/p4.md 2v).
    pub insts: Vec<Option<usize>>,
}

/// What [`Cx::spec_flat`] specialises: a function (with its index in
/// [`Code::functions`]) or an action.
#[derive(Clone, Copy)]
enum Callee<'x> {
    Func(&'x Arc<FuncDef>, usize),
    Action(usize),
}

/// A variable's field chain (`hdr.ip.ttl`) with each field's index
/// guessed at load from the variable's declared type: at run time a guess
/// is used only when the value's field-name array is the very one of that
/// type (`Arc::ptr_eq`), which makes the index the one the walker's name
/// search finds; otherwise the name is searched as the walker does.
pub(crate) struct Chain {
    pub root: String,
    pub steps: Vec<Step>,
    /// Where the chain is in the flat headers ([`FlatLayout`]) when its
    /// root is the block's flat headers parameter (decided at load).
    pub flat: Option<FlatAt>,
    /// The root's name is bound at exactly one place in the names the
    /// frames can hold where the chain runs ([`Domain`]): then any frame
    /// entry of that name is the one the walker's search finds, and
    /// [`Chain::slot`] may be used.
    pub unique: bool,
    /// Where the root was found last (frame counted from the innermost,
    /// entry in it: `frame << 16 | entry`; `u32::MAX`: never). Read first
    /// and used when the entry there has the root's name (and the name is
    /// `unique`); else the frames are searched as the walker does and the
    /// place is kept. Why: the search by name (`var_in`) over every frame
    /// was ~5% of a packet on routing.p4 (the receivers `pkt`, `chk`, the
    /// variables `nh_index`, ...; docs/results/p4.md 2q). A site runs in
    /// the same nesting every time, so the place is nearly always the
    /// same; relative to the innermost frame it is the innermost binding
    /// of a name the site's own action or function binds. That assumes a
    /// declaration is bound at most once in view: under recursion a
    /// callee reaching the name by dynamic scope from two nestings could
    /// take an outer binding (review p4early SHOULD-FIX 2), so the checker
    /// refuses recursion, as P4-16 does (`check::check_calls`). Atomic only for sharing the compiled code between
    /// threads (relaxed: a stale place is checked like any other).
    pub slot: AtomicU32,
    /// The address of the name string found at [`Chain::slot`] (the
    /// binding's own `&str`: comparing it is cheaper than the bytes).
    pub name_at: AtomicUsize,
    /// The root is a block variable held in the run's slot array
    /// ([`VSlot`]): its index there and its type. The frames do not hold
    /// it; reads and writes go to `Pool::vslots` by index.
    pub var: Option<(u32, STy)>,
}

/// How many times each name is bound (parameters, block variables,
/// declarations anywhere in the bodies) among the frames a compiled site
/// can see: a block's own parameters, variables, `apply`/state bodies and
/// the actions declared in it (they run on the block's frames); a
/// function's or a top-level action's parameters and body (they run
/// behind a barrier, `Run::invoke`).
pub(crate) type Domain = std::collections::HashMap<String, u32>;

/// Counts the declarations in `stmts` (at any depth) into `d`.
fn domain_stmts(stmts: &[Stmt], d: &mut Domain) {
    for s in stmts {
        domain_stmt(s, d);
    }
}

fn domain_stmt(s: &Stmt, d: &mut Domain) {
    match s {
        Stmt::Var(v) => *d.entry(v.name.name.clone()).or_default() += 1,
        Stmt::Const(c) => *d.entry(c.name.name.clone()).or_default() += 1,
        Stmt::Block(b) => domain_stmts(&b.stmts, d),
        Stmt::If {
            then, otherwise, ..
        } => {
            domain_stmt(then, d);
            if let Some(o) = otherwise {
                domain_stmt(o, d);
            }
        }
        Stmt::Switch { cases, .. } => {
            for c in cases {
                if let Some(b) = &c.body {
                    domain_stmts(&b.stmts, d);
                }
            }
        }
        Stmt::Assign { .. }
        | Stmt::Call(_)
        | Stmt::Exit(_)
        | Stmt::Return(..)
        | Stmt::Instantiation(_)
        | Stmt::Empty(_) => {}
    }
}

fn domain_params(params: &[ast::Param], d: &mut Domain) {
    for p in params {
        *d.entry(p.name.name.clone()).or_default() += 1;
    }
}

/// The [`Domain`]s of a program: per block, per function (in
/// `compile_with`'s order), per top-level action.
struct Domains {
    blocks: Vec<Domain>,
    funcs: Vec<Domain>,
    actions: Vec<Option<Domain>>,
    /// Per block: its variables held in the slot array ([`VSlot`]).
    vslots: Vec<Vec<VSlot>>,
}

/// A block variable (`bit<32> nh_index;` in a control or parser) held
/// in a per-packet array of `(u128, Src)` (`Pool::vslots`, index `slot`)
/// instead of the block's variable frame: set at the block's entry (its
/// default, 0 and no source, or its initialiser's value, as the walker
/// declares it), read by the scalar tier, the table-key reader and
/// `CExpr::Peek`, written by assignments, all by index. Why: the
/// variables' frame was pushed, filled with a 64-byte `Value`, searched
/// by name (through [`Chain::slot`]) per read and write, and drained per
/// block and packet (docs/results/p4.md 2w).
///
/// Only where the walker can never look for it (it searches frames by
/// name): a `bit<W>`/`int<W>`/`bool` variable bound once in the block's
/// [`Domain`] (no parameter, action parameter or body declaration of
/// that name anywhere in the block, so every reference in the block's
/// region is this variable), no block-local or global name of that
/// spelling (a constant, instance, table, action or function the
/// compiled code would look up at run time after the frames), named by
/// no block variable's initialiser and no table's bound action argument
/// (both evaluated by the walker), and, in the compiled code, named only
/// as a read ([`Cx::sleaf`], `CExpr::Peek`) or an assignment's whole
/// target: any other use (a walked statement or expression, a call's
/// argument, an extern's walked argument, a field chain) sets `bad`, and
/// the program is compiled again without it (`compile_with`). A
/// `chain()` made only to analyse an argument (`note_call_args`,
/// `spec_flat`'s scan of every argument) sets `bad` as well, even when
/// the code it feeds is never built: conservative (a slot lost, never a
/// variable the walker could look for). The
/// reference run (`process_reference`) never uses the compiled code, so
/// the walker's frames there are unchanged.
struct VSlot {
    name: String,
    /// Index in the block's `vars`.
    var: usize,
    slot: usize,
    ty: STy,
    bad: std::cell::Cell<bool>,
}

/// The block variables that may be held in the slot array ([`VSlot`]),
/// per block, those in `off` (found unfit by an earlier compile) left
/// out; numbered in block order.
fn var_slots(
    p: &Prog,
    doms: &Domains,
    off: &std::collections::HashSet<(usize, usize)>,
) -> Vec<Vec<VSlot>> {
    // Names the walker evaluates in the tables' actions lists (`a(x)`).
    let bound_text = format!(
        "{:?}",
        p.tables
            .iter()
            .flat_map(|t| t.actions.iter().map(|a| &a.bound))
            .collect::<Vec<_>>()
    );
    let mut n = 0;
    p.blocks
        .iter()
        .enumerate()
        .map(|(b, blk)| {
            let inits = format!(
                "{:?}",
                blk.vars.iter().map(|(v, _)| &v.init).collect::<Vec<_>>()
            );
            let mut out = Vec::new();
            for (j, (v, ty)) in blk.vars.iter().enumerate() {
                let name = v.name.name.as_str();
                let Some(sty) = STy::of(ty) else { continue };
                if off.contains(&(b, j))
                    || doms.blocks.get(b).and_then(|d| d.get(name)) != Some(&1)
                    || blk.locals.contains_key(name)
                    || p.g.consts.contains_key(name)
                    || p.g.functions.contains_key(name)
                    || p.g.actions.contains_key(name)
                    || names_ident(&inits, name)
                    || names_ident(&bound_text, name)
                {
                    continue;
                }
                out.push(VSlot {
                    name: name.to_string(),
                    var: j,
                    slot: n,
                    ty: sty,
                    bad: Default::default(),
                });
                n += 1;
            }
            out
        })
        .collect()
}

fn domains(p: &Prog, funcs: &[(&String, &Arc<FuncDef>)]) -> Domains {
    let mut blocks: Vec<Domain> = p
        .blocks
        .iter()
        .map(|blk| {
            let mut d = Domain::new();
            domain_params(blk.params(), &mut d);
            for (v, _) in &blk.vars {
                *d.entry(v.name.name.clone()).or_default() += 1;
            }
            match &blk.kind {
                BlockKind::Control(c) => domain_stmts(&c.apply.stmts, &mut d),
                BlockKind::Parser(pd) => {
                    for st in &pd.states {
                        domain_stmts(&st.body, &mut d);
                    }
                }
            }
            d
        })
        .collect();
    let mut actions = Vec::new();
    for a in &p.actions {
        let mut own = Domain::new();
        domain_params(&a.decl.params, &mut own);
        domain_stmts(&a.decl.body.stmts, &mut own);
        match a.block.and_then(|b| blocks.get_mut(b)) {
            Some(d) => {
                for (n, k) in own {
                    *d.entry(n).or_default() += k;
                }
                actions.push(None);
            }
            None => actions.push(Some(own)),
        }
    }
    let funcs = funcs
        .iter()
        .map(|(_, f)| {
            let mut d = Domain::new();
            domain_params(&f.decl.proto.params, &mut d);
            domain_stmts(&f.decl.body.stmts, &mut d);
            d
        })
        .collect();
    Domains {
        blocks,
        funcs,
        actions,
        vslots: Vec::new(),
    }
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
    /// A nested block; `true`: it gets its own variable frame, because
    /// it may declare a name ([`binds`]). A block that binds nothing runs
    /// in its parent's frame: pushing and popping an empty frame per
    /// packet was pure cost (docs/results/p4.md 2q), and name look-ups
    /// no longer step over it.
    Block(Vec<CStmt>, bool),
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
    /// The keys, the cases and, when every key is in the scalar tier
    /// and every case is `default` or literals, the cases' values.
    Select(Vec<CExpr>, Vec<CCase>, Option<SSelect>),
}

/// A select on scalar keys ([`CExpr::Scalar`]): per case of the
/// [`CTrans::Select`], `None` for a default, else per key the literal's
/// value as `cselect` converts it (`None`: `_`/`default`).
pub(crate) struct SSelect {
    pub cases: Vec<Option<Vec<Option<u128>>>>,
}

pub(crate) struct CState {
    pub body: Vec<CStmt>,
    pub trans: CTrans,
    /// The state's body may declare a name ([`binds`]): only then does
    /// it get its own frame.
    pub frame: bool,
}

/// Whether running `b` in a frame may bind a name in that very frame: a
/// declaration at its top level or as the direct branch of an `if`
/// (`if (c) bit<8> x = 1;`), or a statement left to the walker (which may
/// be a declaration or a constant). Nested blocks bind in their own
/// frames. Why: a frame that nothing is bound in changes no look-up
/// (`var_in` finds the same variable without it), so it is skipped.
pub(crate) fn binds(b: &[CStmt]) -> bool {
    fn one(s: &CStmt) -> bool {
        match s {
            CStmt::Var(..) | CStmt::Walk(_) => true,
            CStmt::If(_, t, e, _) => one(t) || e.as_deref().is_some_and(one),
            CStmt::Assign(..) | CStmt::Call(_) | CStmt::Block(..) => false,
        }
    }
    b.iter().any(one)
}

/// The compiled program (see the module documentation).
#[derive(Default)]
pub(crate) struct Code {
    /// Per block: a control's `apply` statements.
    pub controls: Vec<Option<Vec<CStmt>>>,
    /// Per block: whether its `apply` statements may bind a name in their
    /// own frame ([`binds`]; the walker always pushes one).
    pub control_frames: Vec<bool>,
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
    /// The headers struct held flat (`None`: every shared value is a
    /// `Value` tree; [`Code::flat_off`] says why).
    pub flat: Option<FlatLayout>,
    /// Why the program's headers are not held flat.
    pub flat_off: Option<&'static str>,
    /// Function bodies specialised for flat header arguments.
    pub specs: Vec<FlatSpec>,
    /// Per action: its body for scalar-bound parameters, when it allows
    /// it ([`SAction`]).
    pub sactions: Vec<Option<SAction>>,
    /// Per block: its variables' places in the slot array ([`VSlot`]).
    pub vars: Vec<BlockVars>,
    /// The slot array's length (`Pool::vslots`).
    pub nvslots: usize,
}

/// A block's variables as the compiled run holds them ([`VSlot`]).
#[derive(Default)]
pub(crate) struct BlockVars {
    /// Per variable (`Block::vars` order): its index in the slot array,
    /// or `None` when the block's variable frame holds it.
    pub slots: Vec<Option<usize>>,
    /// Some variable is held in the frame (the frame is pushed).
    pub frame: bool,
}

impl Code {
    /// Every compiled body: the controls', the actions', the functions'
    /// and the specialised ones (what the load-time site counts walk).
    /// Not the scalar-bound actions' ([`Code::sactions`]): the counts
    /// below leave those out.
    fn bodies(&self) -> impl Iterator<Item = &Vec<CStmt>> + '_ {
        self.controls
            .iter()
            .flatten()
            .chain(&self.actions)
            .chain(&self.functions)
            .chain(self.specs.iter().map(|s| &s.body))
    }

    /// How many `InternetChecksum` method calls were resolved at load
    /// ([`CExpr::Method`]'s `csum`) over every compiled body, a
    /// specialised body's sites counted again. Why: the compiled methods
    /// give the walker's results by design, so a test comparing outputs
    /// alone cannot tell whether they ran; this count says they were
    /// compiled (read at load, never on the data path).
    pub fn csum_sites(&self) -> usize {
        let mut n = 0;
        self.exprs(&mut |e, _| {
            expr_nodes(e, &mut |x| {
                n += usize::from(matches!(x, CExpr::Method { csum: Some(_), .. }));
            });
        });
        n
    }

    /// How many checksum method calls run on an instance known at load
    /// ([`CExpr::Csum`]) over every compiled body (a specialised body's
    /// counted again), and how many function parameters are bound to an
    /// instance at load over the specialised bodies
    /// ([`FlatSpec::insts`]). Why: both give the walker's results by
    /// design, so a test comparing outputs alone cannot tell whether they
    /// ran (read at load, never on the data path).
    pub fn bound_sites(&self) -> (usize, usize) {
        let mut n = 0;
        self.exprs(&mut |e, _| {
            expr_nodes(e, &mut |x| {
                n += usize::from(matches!(x, CExpr::Csum { .. }));
            });
        });
        let insts = self
            .specs
            .iter()
            .map(|s| s.insts.iter().flatten().count())
            .sum();
        (n, insts)
    }

    /// The scalar tier's share of the compiled value sites: `(scalar,
    /// all)` over every compiled body (a specialised body counted again),
    /// a site being an assignment's right side, an `if` condition, a
    /// variable's initialiser, a select key, a table key or a compiled
    /// extern argument (a list's items each). Why: the tier gives the
    /// `Value` path's results by design, so a test comparing outputs
    /// cannot tell whether it ran; this count says it was compiled (read
    /// at load, never on the data path).
    pub fn scalar_sites(&self) -> (usize, usize) {
        let mut n = (0, 0);
        let mut site = |e: &CExpr| {
            n.0 += usize::from(matches!(e, CExpr::Scalar(..)));
            n.1 += 1;
        };
        self.exprs(&mut |e, is_site| {
            if is_site {
                site(e);
            }
            expr_nodes(e, &mut |x| {
                if let CExpr::Method { cargs, .. } | CExpr::ExternFn { cargs, .. } = x {
                    for a in cargs.iter().flatten() {
                        match a {
                            CArg::One(x) => site(x),
                            CArg::List(xs) => xs.iter().for_each(&mut site),
                        }
                    }
                }
            });
        });
        n
    }

    /// The variables' look-ups through a place kept in the chain:
    /// `(slotted, all)` over the compiled `CExpr::Peek`s whose chain is
    /// not in the flat headers (a specialised body counted again),
    /// slotted being those whose root is bound once in view
    /// ([`Chain::unique`], [`Run::root_at`]). Why: the slot gives the
    /// search's answer by design, so outputs cannot tell whether it is in
    /// use; this count says it is (read at load, never on the data path).
    pub fn slot_peeks(&self) -> (usize, usize) {
        let mut n = (0, 0);
        self.exprs(&mut |e, _| {
            expr_nodes(e, &mut |x| {
                if let CExpr::Peek(c, _) = x {
                    if c.flat.is_none() {
                        n.0 += usize::from(c.unique);
                        n.1 += 1;
                    }
                }
            });
        });
        n
    }

    /// The method receivers that are a variable (`pkt.extract`,
    /// `chk.add`): `(known at load, all)` over the compiled code (a
    /// specialised body counted again), known being a block's packet
    /// parameter bound at load (`Cx::packet_instance`: a
    /// `CExpr::Named` instance). Read at load, so tests can say the
    /// look-up is skipped.
    pub fn packet_receivers(&self) -> (usize, usize) {
        let mut n = (0, 0);
        self.exprs(&mut |e, _| {
            expr_nodes(e, &mut |x| {
                if let CExpr::Method { obj, .. }
                | CExpr::Extract { obj, .. }
                | CExpr::Emit { obj, .. } = x
                {
                    match &**obj {
                        CExpr::Named(_, Value::Instance(PKT_IN | PKT_OUT), false) => {
                            n.0 += 1;
                            n.1 += 1;
                        }
                        CExpr::Peek(..) | CExpr::Named(..) => n.1 += 1,
                        _ => {}
                    }
                }
            });
        });
        n
    }

    /// The compiled blocks (nested blocks, parser states, controls'
    /// `apply`): `(with a frame, all)`. A block gets its own frame only
    /// when it may bind a name in it ([`binds`]); read at load, so tests
    /// can say the skip is in use.
    pub fn block_frames(&self) -> (usize, usize) {
        fn walk(b: &[CStmt], n: &mut (usize, usize)) {
            for s in b {
                match s {
                    CStmt::Block(b, frame) => {
                        n.0 += usize::from(*frame);
                        n.1 += 1;
                        walk(b, n);
                    }
                    CStmt::If(_, t, e, _) => {
                        walk(std::slice::from_ref(t), n);
                        if let Some(e) = e {
                            walk(std::slice::from_ref(e), n);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut n = (0, 0);
        for b in self.bodies() {
            walk(b, &mut n);
        }
        for (c, f) in self.controls.iter().zip(&self.control_frames) {
            if c.is_some() {
                n.0 += usize::from(*f);
                n.1 += 1;
            }
        }
        for st in self.states.iter().flatten().flatten() {
            n.0 += usize::from(st.frame);
            n.1 += 1;
            walk(&st.body, &mut n);
        }
        n
    }

    /// Calls `f` on each outermost expression of the compiled code: the
    /// bodies' statements, the parser states' bodies and select keys, the
    /// table keys; `true` when it is a value site (all but a call
    /// statement's expression).
    fn exprs(&self, f: &mut impl FnMut(&CExpr, bool)) {
        for b in self.bodies() {
            stmts_exprs(b, f);
        }
        for st in self.states.iter().flatten().flatten() {
            stmts_exprs(&st.body, f);
            if let CTrans::Select(es, _, _) = &st.trans {
                es.iter().for_each(|e| f(e, true));
            }
        }
        self.keys.iter().flatten().for_each(|e| f(e, true));
    }
}

/// [`Code::exprs`] of statements.
fn stmts_exprs(b: &[CStmt], f: &mut impl FnMut(&CExpr, bool)) {
    for s in b {
        match s {
            CStmt::Assign(_, _, e) | CStmt::Var(_, _, Some(e), _) => f(e, true),
            CStmt::Call(e) => f(e, false),
            CStmt::If(c, t, e, _) => {
                f(c, true);
                stmts_exprs(std::slice::from_ref(t), f);
                if let Some(e) = e {
                    stmts_exprs(std::slice::from_ref(e), f);
                }
            }
            CStmt::Block(b, _) => stmts_exprs(b, f),
            CStmt::Var(_, _, None, _) | CStmt::Walk(_) => {}
        }
    }
}

/// Calls `f` on `e` and on every compiled expression inside it
/// (operands, a scalar site's `Value` form, a method's object and
/// arguments), outermost first.
fn expr_nodes(e: &CExpr, f: &mut impl FnMut(&CExpr)) {
    f(e);
    match e {
        CExpr::Unary(_, x, _)
        | CExpr::Cast(_, x, _)
        | CExpr::Slice(x, _, _, _)
        | CExpr::Scalar(_, x)
        | CExpr::Extract { obj: x, .. }
        | CExpr::Emit { obj: x, .. } => expr_nodes(x, f),
        CExpr::Binary(_, x, y, _) | CExpr::BinLit(_, x, _, y, _) => {
            expr_nodes(x, f);
            expr_nodes(y, f);
        }
        CExpr::Method { obj, cargs, .. } => {
            expr_nodes(obj, f);
            cargs_nodes(cargs, f);
        }
        // Its method next (the other site counts are unchanged).
        CExpr::Csum { method, .. } => expr_nodes(method, f),
        CExpr::ExternFn { cargs, .. } => cargs_nodes(cargs, f),
        CExpr::Lit(_)
        | CExpr::Peek(..)
        | CExpr::Named(..)
        | CExpr::IsValid(..)
        | CExpr::Apply(..)
        | CExpr::Action(..)
        | CExpr::ActionFlat(..)
        | CExpr::Func(..)
        | CExpr::FuncFlat(..)
        | CExpr::AParam(..)
        | CExpr::Walk(_) => {}
    }
}

/// Whether the scalar tier's evaluation of `e` always gives a value (it
/// never declines to the `Value` path part-way, having counted steps):
/// flat fields, literals, validity and the operators that cannot fail.
/// [`CExpr::Csum`]'s arguments must be (its fallback would count them
/// twice).
fn csum_sure(e: &scalar::SExpr) -> bool {
    use scalar::SNode;
    match &e.node {
        SNode::Const(_) | SNode::Field(_) | SNode::Valid(_) => true,
        SNode::Unary(_, a) => csum_sure(a),
        SNode::Bin(op, a, b) => {
            matches!(
                op,
                BinOp::Add | BinOp::Sub | BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor
            ) && csum_sure(a)
                && csum_sure(b)
        }
        SNode::Concat(a, b) => csum_sure(a) && csum_sure(b),
        _ => false,
    }
}

/// [`expr_nodes`] of compiled extern arguments.
fn cargs_nodes(cargs: &Option<Vec<CArg>>, f: &mut impl FnMut(&CExpr)) {
    for a in cargs.iter().flatten() {
        match a {
            CArg::One(x) => expr_nodes(x, f),
            CArg::List(xs) => xs.iter().for_each(|x| expr_nodes(x, f)),
        }
    }
}

/// Whether extern function `name` reads its arguments only through
/// `Run::arg_val` (`extern_function`: no `lvalue`, no `assign`, no `eval`
/// of an argument's AST): its arguments can then be compiled
/// ([`CExpr::ExternFn`]'s `cargs`) with the walker's results. The list
/// holds only while `extern_function` (externs.rs, the comment at its
/// `match`) keeps reading these arguments that way.
fn extern_fn_cargs(name: &str) -> bool {
    matches!(
        name,
        "send_to_port" | "drop_packet" | "is_host_port" | "is_net_port"
    )
}

/// The main blocks' headers struct (`headers_t`: a struct of headers
/// whose fields are all `bit<W>`/`int<W>`/`bool`) held as one flat array
/// per packet instead of a `Value` tree: each field a `u128` at a fixed
/// index with its [`Src`], each header a validity flag. Why: moving the
/// tree into and out of every main block's frame, resetting it per
/// packet and cloning/dropping its fields were the largest costs left in
/// profiles (docs/results/p4.md 2i); here the parser's reset is three
/// fills, no block binds it and the compiled chains read and write
/// fields by index. Only the compiled paths know this array: a program
/// whose bodies hand the headers to the walker anywhere (see
/// [`Cx::note`]) keeps the tree ([`Code::flat_off`]).
pub(crate) struct FlatLayout {
    /// The shared slot (in [`SharedLayout::keys`]) it replaces.
    pub slot: usize,
    /// The struct's field names (the headers).
    pub names: Arc<[String]>,
    pub headers: Vec<FlatHdr>,
    /// Number of fields over all headers.
    pub nfields: usize,
}

/// One header of a [`FlatLayout`].
pub(crate) struct FlatHdr {
    pub agg: Arc<Agg>,
    /// Index of its first field in the flat array.
    pub first: usize,
    /// Per field: width, signed, bool.
    pub kinds: Vec<(u32, bool, bool)>,
    /// Total width in bits.
    pub width: u64,
    /// Whole bytes wide and no field wider than 64 bits: emitted by
    /// packing its fields into a word, eight bytes appended at a time
    /// (`Run::flat_emit`), instead of one `BitBuf::push` per field.
    pub packed: bool,
}

impl FlatLayout {
    /// The place of header `h` (`field` `None`) or of its field `field`.
    pub(crate) fn place(&self, h: usize, field: Option<&str>) -> Option<FlatAt> {
        let Some(f) = field else {
            return Some(FlatAt::Header(h));
        };
        let fh = &self.headers[h];
        let k = fh.agg.names.iter().position(|n| n == f)?;
        Some(FlatAt::Field {
            h,
            i: fh.first + k,
            k,
        })
    }
}

/// A place in the flat headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlatAt {
    /// Header `h` (index in [`FlatLayout::headers`]).
    Header(usize),
    /// Field `i` (index in the flat array) of header `h`, `k`-th of it.
    Field { h: usize, i: usize, k: usize },
}

/// The flat headers of the packet being run (kept in the pipeline's
/// pool: reset, not reallocated, per packet).
#[derive(Default)]
pub(crate) struct FlatStore {
    pub v: Vec<u128>,
    pub src: Vec<Src>,
    pub valid: Vec<bool>,
}

impl FlatStore {
    /// Every field zero with no source, every header invalid: what
    /// `reset_value` makes of the tree.
    pub fn reset(&mut self, l: &FlatLayout) {
        self.v.clear();
        self.v.resize(l.nfields, 0);
        self.src.clear();
        self.src.resize(l.nfields, Src::None);
        self.valid.clear();
        self.valid.resize(l.headers.len(), false);
    }

    /// Field `i` (the `k`-th of header `h`) as the tree holds it.
    pub fn field(&self, l: &FlatLayout, h: usize, i: usize, k: usize) -> Value {
        let (w, signed, is_bool) = l.headers[h].kinds[k];
        if is_bool {
            Value::Bool(self.v[i] != 0, self.src[i])
        } else {
            Value::Bits(crate::value::Bits {
                width: w,
                signed,
                v: self.v[i],
                src: self.src[i],
            })
        }
    }

    /// Header `h` as a tree, written into `d` (its field vector reused
    /// when it is a header of the same type).
    pub fn header_into(&self, l: &FlatLayout, h: usize, d: &mut Value) {
        let fh = &l.headers[h];
        let fresh = !matches!(&*d, Value::Header(x) if Arc::ptr_eq(&x.names, &fh.agg.names)
            && x.fields.len() == fh.kinds.len());
        if fresh {
            *d = Ty::Header(fh.agg.clone()).default_value();
        }
        if let Value::Header(x) = d {
            if !Arc::ptr_eq(&x.ty, &fh.agg.name) {
                x.ty = fh.agg.name.clone();
            }
            x.valid = self.valid[h];
            for (k, f) in x.fields.iter_mut().enumerate() {
                let i = fh.first + k;
                // In place when the field already has the right kind (no
                // drop of the old value, no new one built).
                match (f, fh.kinds[k]) {
                    (Value::Bits(b), (w, signed, false)) if b.width == w && b.signed == signed => {
                        b.v = self.v[i];
                        b.src = self.src[i];
                    }
                    (Value::Bool(b, s), (_, _, true)) => {
                        *b = self.v[i] != 0;
                        *s = self.src[i];
                    }
                    (f, _) => *f = self.field(l, h, i, k),
                }
            }
        }
    }

    /// Stores `v` (already of the field's type) into field `i`.
    pub fn set_field(&mut self, i: usize, v: &Value) -> bool {
        match v {
            Value::Bits(b) => {
                self.v[i] = b.v;
                self.src[i] = b.src;
            }
            Value::Bool(b, s) => {
                self.v[i] = *b as u128;
                self.src[i] = *s;
            }
            _ => return false,
        }
        true
    }

    /// Stores header value `v` (of header `h`'s type) into header `h`.
    pub fn set_header(&mut self, l: &FlatLayout, h: usize, v: &Value) -> bool {
        let fh = &l.headers[h];
        let Value::Header(x) = v else { return false };
        if x.fields.len() != fh.kinds.len() {
            return false;
        }
        for (k, f) in x.fields.iter().enumerate() {
            if !self.set_field(fh.first + k, f) {
                return false;
            }
        }
        self.valid[h] = x.valid;
        true
    }
}

/// How a main block's parameter gets its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamSlot {
    PktIn,
    PktOut,
    /// Shared value `slot` (index in [`SharedLayout::keys`]); `once`:
    /// no other parameter of the block has the same type; `unnamed`:
    /// the block's bodies never name the parameter (see
    /// [`param_unnamed`]), so nothing is bound for it.
    Shared {
        slot: usize,
        once: bool,
        unnamed: bool,
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

/// A specialised body's flat header parameters ([`Cx`]'s `alias`): the
/// layout, (parameter name, header) pairs, the flag set when the body
/// hands one to the walker, and its parameters bound to extern instances
/// at load ([`FlatSpec::insts`]: (parameter name, instance) pairs; the
/// flag is set as well when the body hands one of those to the walker).
type Alias<'p> = (
    &'p FlatLayout,
    Vec<(String, usize)>,
    &'p std::cell::Cell<bool>,
    Vec<(String, usize)>,
);

/// What the compiler needs to resolve names: the program, the block whose
/// locals are in scope (`None` in functions) and the functions' indices.
struct Cx<'p> {
    p: &'p Prog,
    block: Option<usize>,
    fns: &'p FastMap<String, usize>,
    /// Declared types of the names in scope (for the field guesses).
    scope: Vec<(String, Ty)>,
    /// The flat headers and the name the region's block binds them to.
    flat: Option<(&'p str, &'p FlatLayout)>,
    /// Set when the region hands that name to the walker (see
    /// [`Cx::note`]): the program then keeps the tree.
    bad: &'p std::cell::Cell<Option<&'static str>>,
    /// In a specialised function body ([`FlatSpec`]): the layout, its
    /// parameters that stand for flat headers, and the flag set when the
    /// body hands one to the walker (the call then copies as before).
    alias: Option<Alias<'p>>,
    /// The specialisations compiled so far (shared by the whole compile),
    /// each with its callee (an action's index: `true`).
    specs: &'p std::cell::RefCell<Vec<((bool, usize), FlatSpec)>>,
    /// Nesting of specialised bodies being compiled.
    depth: u32,
    /// Set while compiling the `Value` fallback of a scalar expression
    /// (its parts are not wrapped again).
    plain: std::cell::Cell<bool>,
    /// Variables the body being compiled declared so far, with their
    /// types (the scalar tier's leaves; the field guesses too).
    locals: std::cell::RefCell<Vec<(String, Ty)>>,
    /// The names the frames can hold where this body runs ([`Domain`];
    /// `None`: not known, no chain is `unique`).
    bound: Option<&'p Domain>,
    /// Every body's [`Domain`] (for the specialised bodies).
    doms: &'p Domains,
    /// In an action body compiled for scalar-bound parameters
    /// ([`SAction`]): the parameters and the flag set when the body reads
    /// one other than by value.
    aparams: Option<&'p AParams>,
}

/// The parameters of an action compiled for scalar binding, and whether
/// the body needs them in the frame after all (see [`Cx::aparam`]).
struct AParams {
    names: Vec<(String, STy)>,
    bad: std::cell::Cell<bool>,
}

/// An action whose parameters are all directionless `bit<W>`/`int<W>`/
/// `bool` (action data), compiled with every read of a parameter a read
/// of the run's scalar store ([`CExpr::AParam`], [`scalar::SNode`]'s
/// `AParam`): a table's call binds the entry's data there as `u128`s
/// (`Run::call_table_action`) instead of cloning `Value`s into a frame,
/// searching it by name per read and dropping them after. Only when the
/// body reads the parameters by value and nowhere else (no walker AST,
/// no field chain, no call argument naming them; see [`Cx::aparam`]).
/// Why: the action data's clones, drops and name searches were what is
/// left of a table hit (docs/results/p4.md 2p, 2r).
pub(crate) struct SAction {
    pub body: Vec<CStmt>,
    pub tys: Vec<STy>,
}

/// Compiles every body of `p`, with the headers flat when the program
/// allows it ([`FlatLayout`]).
pub(crate) fn compile(p: &Prog) -> Code {
    let shared = shared_layout(p);
    match flat_layout(p, &shared) {
        Ok(fl) => {
            let bad = std::cell::Cell::new(None);
            let mut code = compile_with(p, &shared, Some(&fl), &bad);
            match bad.get() {
                None => {
                    code.shared = shared;
                    code.flat = Some(fl);
                    code
                }
                Some(why) => {
                    let mut code = compile_with(p, &shared, None, &bad);
                    code.shared = shared;
                    code.flat_off = Some(why);
                    code
                }
            }
        }
        Err(why) => {
            let bad = std::cell::Cell::new(None);
            let mut code = compile_with(p, &shared, None, &bad);
            code.shared = shared;
            code.flat_off = Some(why);
            code
        }
    }
}

/// The name block `b` binds the flat headers to, if it is a main block
/// that takes them.
fn flat_root<'p>(
    p: &'p Prog,
    shared: &SharedLayout,
    fl: Option<&FlatLayout>,
    b: usize,
) -> Option<&'p str> {
    let fl = fl?;
    let pos = p.main_blocks.iter().position(|(_, x)| *x == b)?;
    let ps = shared.params.get(pos)?;
    p.blocks[b]
        .params()
        .iter()
        .zip(ps)
        .find(|(_, s)| matches!(s, ParamSlot::Shared { slot, .. } if *slot == fl.slot))
        .map(|(prm, _)| prm.name.name.as_str())
}

/// The flat layout of the main blocks' headers struct, or why there is
/// none.
fn flat_layout(p: &Prog, shared: &SharedLayout) -> Result<FlatLayout, &'static str> {
    let mut found: Option<(usize, Arc<Agg>)> = None;
    for ((_, b), ps) in p.main_blocks.iter().zip(&shared.params) {
        let blk = &p.blocks[*b];
        for ((prm, t), s) in blk.params().iter().zip(&blk.param_tys).zip(ps) {
            let (ParamSlot::Shared { slot, once, .. }, Ty::Struct(a)) = (s, t) else {
                continue;
            };
            let all_headers = !a.fields.is_empty()
                && a.fields.iter().all(|(_, t)| match t {
                    Ty::Header(h) => h.fields.iter().all(|(_, f)| {
                        matches!(f, Ty::Bool) || matches!(f, Ty::Bits(w, _) if *w <= 128)
                    }),
                    _ => false,
                });
            if !all_headers {
                continue;
            }
            if !once
                || prm.direction == crate::ast::Direction::In
                || prm.direction == crate::ast::Direction::None
            {
                return Err("headers passed as `in` or twice to a block");
            }
            match &found {
                Some((s, _)) if s != slot => return Err("two header structs"),
                _ => found = Some((*slot, a.clone())),
            }
        }
    }
    let Some((slot, a)) = found else {
        return Err("no struct of fixed-width headers among the main blocks' parameters");
    };
    let mut headers = Vec::new();
    let mut first = 0;
    for (_, t) in &a.fields {
        let Ty::Header(h) = t else {
            return Err("a struct field that is not a header");
        };
        let kinds: Vec<(u32, bool, bool)> = h
            .fields
            .iter()
            .map(|(_, f)| match f {
                Ty::Bits(w, s) => (*w, *s, false),
                _ => (1, false, true),
            })
            .collect();
        let width = kinds.iter().map(|k| u64::from(k.0)).sum();
        let packed = width % 8 == 0 && kinds.iter().all(|k| k.0 <= 64);
        headers.push(FlatHdr {
            agg: h.clone(),
            first,
            width,
            kinds,
            packed,
        });
        first += h.fields.len();
    }
    Ok(FlatLayout {
        slot,
        names: a.names.clone(),
        headers,
        nfields: first,
    })
}

fn compile_with(
    p: &Prog,
    shared: &SharedLayout,
    fl: Option<&FlatLayout>,
    bad: &std::cell::Cell<Option<&'static str>>,
) -> Code {
    // Compiled again without the block variables a pass found unfit for
    // the slot array ([`VSlot`]); a variable left out only adds frame
    // reads, so the passes end (at most one per variable, one in most
    // programs).
    let mut off = std::collections::HashSet::new();
    loop {
        let mut unfit = Vec::new();
        let code = compile_pass(p, shared, fl, bad, &off, &mut unfit);
        if unfit.is_empty() {
            return code;
        }
        off.extend(unfit);
    }
}

/// One compile of every body ([`compile_with`]), with the block
/// variables not in `off` in the slot array; those found unfit are
/// pushed on `unfit` (block, variable).
fn compile_pass(
    p: &Prog,
    shared: &SharedLayout,
    fl: Option<&FlatLayout>,
    bad: &std::cell::Cell<Option<&'static str>>,
    off: &std::collections::HashSet<(usize, usize)>,
    unfit: &mut Vec<(usize, usize)>,
) -> Code {
    let mut names: Vec<(&String, &Arc<FuncDef>)> = p.g.functions.iter().collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    let fns: FastMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, (n, _))| ((*n).clone(), i))
        .collect();
    let mut code = Code::default();
    let specs = std::cell::RefCell::new(Vec::new());
    // The flat headers' name in block `b`'s region (its bodies, actions,
    // table keys), when no action of the block declares that name too.
    let flat_in = |b: Option<usize>| -> Option<(&str, &FlatLayout)> {
        let b = b?;
        let root = flat_root(p, shared, fl, b)?;
        let shadowed = p
            .actions
            .iter()
            .any(|a| a.block == Some(b) && a.decl.params.iter().any(|x| x.name.name == root))
            || p.blocks[b].vars.iter().any(|(v, _)| {
                // A block variable's initialiser is the walker's.
                v.name.name == root
                    || v.init
                        .as_ref()
                        .is_some_and(|e| names_ident(&format!("{e:?}"), root))
            });
        if shadowed {
            bad.set(Some("the headers' name declared again in a block"));
            return None;
        }
        Some((root, fl?))
    };
    let mut doms = domains(p, &names);
    doms.vslots = var_slots(p, &doms, off);
    for (fi, (_, f)) in names.iter().enumerate() {
        let cx = Cx {
            p,
            block: None,
            fns: &fns,
            scope: params_scope(&f.decl.proto.params, &f.param_tys),
            flat: None,
            bad,
            alias: None,
            specs: &specs,
            depth: 0,
            plain: Default::default(),
            locals: Default::default(),
            bound: Some(&doms.funcs[fi]),
            doms: &doms,
            aparams: None,
        };
        code.functions.push(cx.stmts(&f.decl.body.stmts));
    }
    for (ai, a) in p.actions.iter().enumerate() {
        let mut scope = a.block.map(|b| block_scope(p, b)).unwrap_or_default();
        scope.extend(params_scope(&a.decl.params, &a.param_tys));
        let cx = Cx {
            p,
            block: a.block,
            fns: &fns,
            scope,
            flat: flat_in(a.block),
            bad,
            alias: None,
            specs: &specs,
            depth: 0,
            plain: Default::default(),
            locals: Default::default(),
            bound: match a.block {
                Some(b) => doms.blocks.get(b),
                None => doms.actions.get(ai).and_then(Option::as_ref),
            },
            doms: &doms,
            aparams: None,
        };
        code.actions.push(cx.stmts(&a.decl.body.stmts));
        code.sactions.push(saction(&cx, a));
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
            flat: flat_in(owner),
            bad,
            alias: None,
            specs: &specs,
            depth: 0,
            plain: Default::default(),
            locals: Default::default(),
            bound: owner.and_then(|b| doms.blocks.get(b)),
            doms: &doms,
            aparams: None,
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
            flat: flat_in(Some(b)),
            bad,
            alias: None,
            specs: &specs,
            depth: 0,
            plain: Default::default(),
            locals: Default::default(),
            bound: doms.blocks.get(b),
            doms: &doms,
            aparams: None,
        };
        match &blk.kind {
            BlockKind::Control(c) => {
                let body = cx.stmts(&c.apply.stmts);
                code.control_frames.push(binds(&body));
                code.controls.push(Some(body));
                code.states.push(None);
            }
            BlockKind::Parser(pd) => {
                code.controls.push(None);
                code.control_frames.push(false);
                let states = pd
                    .states
                    .iter()
                    .map(|s| {
                        let body = cx.stmts(&s.body);
                        CState {
                            frame: binds(&body),
                            body,
                            trans: cx.trans(b, s),
                        }
                    })
                    .collect();
                code.states.push(Some(states));
            }
        }
    }
    code.specs = specs.into_inner().into_iter().map(|(_, s)| s).collect();
    for (b, vs) in doms.vslots.iter().enumerate() {
        let nvars = p.blocks[b].vars.len();
        let mut slots = vec![None; nvars];
        for v in vs {
            if v.bad.get() {
                unfit.push((b, v.var));
            }
            slots[v.var] = Some(v.slot);
        }
        code.nvslots += vs.len();
        code.vars.push(BlockVars {
            frame: vs.len() < nvars,
            slots,
        });
    }
    code
}

/// Action `a`'s body compiled for scalar-bound parameters ([`SAction`])
/// with `cx` (the plain body's context), or `None` when its parameters
/// are not all directionless scalars or the body needs them in the frame.
fn saction(cx: &Cx, a: &crate::interp::check::ActionDef) -> Option<SAction> {
    let params = &a.decl.params;
    if params.is_empty() || params.len() != a.param_tys.len() {
        return None;
    }
    let mut names = Vec::with_capacity(params.len());
    for (prm, ty) in params.iter().zip(&a.param_tys) {
        let n = &prm.name.name;
        // A name the block also resolves (a table, an instance, an
        // action, a constant) is looked up at run time by the compiled
        // code (`CExpr::Apply`, `CExpr::Named`): the frame must hold it.
        if prm.direction != ast::Direction::None
            || cx.local(n).is_some()
            || cx.p.g.consts.contains_key(n.as_str())
            || names.iter().any(|(x, _): &(String, STy)| x == n)
            // A block's parameter or variable of that name: a block action
            // this one calls (no barrier between them) would find the
            // parameter in this action's frame by the walker's dynamic
            // scope, not the block's (review p4early MUST-FIX 1).
            || cx
                .block
                .is_some_and(|b| block_scope(cx.p, b).iter().any(|(x, _)| x == n))
        {
            return None;
        }
        names.push((n.clone(), STy::of(ty)?));
    }
    let ap = AParams {
        names,
        bad: Default::default(),
    };
    let scx = Cx {
        p: cx.p,
        block: cx.block,
        fns: cx.fns,
        scope: cx.scope.clone(),
        flat: cx.flat,
        bad: cx.bad,
        alias: None,
        specs: cx.specs,
        depth: 0,
        plain: Default::default(),
        locals: Default::default(),
        // Sound with the parameters out of the frame: a chain rooted at
        // one marks the body bad, so no chain of the body can be rooted at
        // a name the action binds, and the domain's counts still hold.
        bound: cx.bound,
        doms: cx.doms,
        aparams: Some(&ap),
    };
    let body = scx.stmts(&a.decl.body.stmts);
    if ap.bad.get() {
        return None;
    }
    Some(SAction {
        body,
        tys: ap.names.iter().map(|(_, t)| *t).collect(),
    })
}

/// Whether `text` (an AST's `Debug` form) names identifier `root`.
fn names_ident(text: &str, root: &str) -> bool {
    text.contains(&format!("name: {root:?}"))
}

impl Cx<'_> {
    /// `e` is kept as an AST the walker evaluates: when it names the flat
    /// headers the program keeps the tree (the walker knows no flat
    /// array). Conservative: any identifier of that name counts (a field
    /// of that name too).
    fn note(&self, e: &Expr) {
        if self.flat.is_some() || self.alias.is_some() || self.aparams.is_some() || self.vslots() {
            self.note_text(&format!("{e:?}"));
        }
    }

    fn note_stmt(&self, st: &Stmt) {
        if self.flat.is_some() || self.alias.is_some() || self.aparams.is_some() || self.vslots() {
            self.note_text(&format!("{st:?}"));
        }
    }

    /// Action parameter `name` bound as a scalar ([`SAction`]): its index
    /// and type, when the body compiled has them ([`Cx::aparams`]) and no
    /// variable it declared hides it.
    fn aparam(&self, name: &str) -> Option<(usize, STy)> {
        let ap = self.aparams?;
        let i = ap.names.iter().position(|(n, _)| n == name)?;
        if self.locals.borrow().iter().any(|(n, _)| n == name) {
            return None;
        }
        Some((i, ap.names[i].1))
    }

    fn note_text(&self, text: &str) {
        // The walker finds no slotted block variable ([`VSlot`]).
        if let Some(vs) = self.block.and_then(|b| self.doms.vslots.get(b)) {
            for v in vs {
                if names_ident(text, &v.name) {
                    v.bad.set(true);
                }
            }
        }
        // The walker reads a scalar-bound parameter from the frame only.
        if let Some(ap) = self.aparams {
            if ap.names.iter().any(|(n, _)| names_ident(text, n)) {
                ap.bad.set(true);
            }
            // Walked code that calls a block action (or applies a block
            // table, whose actions run without a barrier too) would let
            // the callee look for a parameter in a frame that does not
            // hold it (see `action_call`).
            if let Some(b) = self.block {
                let hit = self.p.blocks[b].locals.iter().any(|(n, l)| {
                    matches!(l, Local::Action(_) | Local::Table(_)) && names_ident(text, n)
                });
                if hit {
                    ap.bad.set(true);
                }
            }
        }
        if let Some((root, _)) = self.flat {
            if names_ident(text, root) {
                match &self.alias {
                    // In a trial specialisation only the specialisation is
                    // refused: the call then runs the plain body, compiled
                    // (and noted for the program) on its own.
                    Some((_, _, spec_bad, _)) => spec_bad.set(true),
                    None => self.bad.set(Some("the headers handed to the walker")),
                }
            }
        }
        if let Some((_, names, spec_bad, insts)) = &self.alias {
            if names.iter().chain(insts).any(|(n, _)| names_ident(text, n)) {
                spec_bad.set(true);
            }
        }
    }

    fn note_args(&self, args: &[Arg]) {
        args.iter().for_each(|a| self.note(&a.value));
    }

    /// Where chain `root.steps` is in the flat headers: `Some(None)` when
    /// the root is not the flat headers' name.
    fn flat_at(&self, root: &str, names: &[String]) -> Option<Option<FlatAt>> {
        if let Some((fl, al, _, _)) = &self.alias {
            if let Some(&(_, h)) = al.iter().find(|(n, _)| n == root) {
                return match names {
                    [] => Some(Some(FlatAt::Header(h))),
                    [f] => Some(Some(fl.place(h, Some(f))?)),
                    _ => None,
                };
            }
        }
        let Some((r, fl)) = self.flat else {
            return Some(None);
        };
        if r != root {
            return Some(None);
        }
        let h = fl.names.iter().position(|n| Some(n) == names.first())?;
        match names {
            [_] => Some(Some(FlatAt::Header(h))),
            [_, f] => Some(Some(fl.place(h, Some(f))?)),
            _ => None,
        }
    }

    /// Whether this body's block holds variables in the slot array
    /// ([`VSlot`]): then what it hands to the walker is noted.
    fn vslots(&self) -> bool {
        self.block
            .and_then(|b| self.doms.vslots.get(b))
            .is_some_and(|v| !v.is_empty())
    }

    /// Whether this body runs on its block's names ([`Cx::bound`] is the
    /// block's own [`Domain`]: its bodies, actions and table keys).
    fn own_region(&self) -> bool {
        match (self.bound, self.block.and_then(|b| self.doms.blocks.get(b))) {
            (Some(d), Some(x)) => std::ptr::eq(d, x),
            _ => false,
        }
    }

    /// Chain root `root`'s place in the slot array ([`VSlot`]) when it is
    /// one of the block's slotted variables and `ok` (the chain is a
    /// read or an assignment's whole target, which the run serves from
    /// the array). Any other chain of such a variable, or one in a body
    /// that does not run on the block's names alone, marks it unfit.
    fn vslot(&self, root: &str, ok: bool) -> Option<(u32, STy)> {
        let b = self.block?;
        let v = self.doms.vslots.get(b)?.iter().find(|v| v.name == root)?;
        if ok
            && self.own_region()
            && self.aparam(root).is_none()
            && !self.locals.borrow().iter().any(|(n, _)| n == root)
        {
            return Some((v.slot as u32, v.ty));
        }
        v.bad.set(true);
        None
    }

    /// Whether a variable named `name` may be in view where this body
    /// runs: `false` only when its [`Domain`] is known and binds no such
    /// name (then the walker's search of the frames would find none).
    fn may_bind(&self, name: &str) -> bool {
        self.bound.is_none_or(|d| d.contains_key(name))
    }

    fn local(&self, name: &str) -> Option<&Local> {
        self.block.and_then(|b| self.p.blocks[b].locals.get(name))
    }

    /// `e` as a field chain of a variable, with the guesses its declared
    /// type gives (none for names not in `scope`); a slotted block
    /// variable here is unfit ([`Cx::vslot`]).
    fn chain(&self, e: &Expr) -> Option<Chain> {
        self.chain_at(e, false)
    }

    /// [`Cx::chain`]; `ok`: the caller serves a slotted block variable
    /// from the slot array (a read, an assignment's whole target).
    fn chain_at(&self, e: &Expr, ok: bool) -> Option<Chain> {
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
        if let (Some(ap), Some(_)) = (self.aparams, self.aparam(&root)) {
            // A chain reads the frame (a field, an assignment's target, a
            // call's argument): the parameter must be there.
            ap.bad.set(true);
        }
        names.reverse();
        let flat = match self.flat_at(&root, &names) {
            Some(f) => f,
            None => {
                // The flat headers' name, but not one header or field.
                self.note(e);
                None
            }
        };
        let declared = self.declared(&root);
        let mut ty = declared.as_ref();
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
        let unique = self.bound.is_some_and(|d| d.get(&root) == Some(&1));
        let var = if flat.is_none() {
            self.vslot(&root, ok && steps.is_empty())
        } else {
            None
        };
        Some(Chain {
            root,
            steps,
            flat,
            unique,
            slot: AtomicU32::new(u32::MAX),
            name_at: AtomicUsize::new(0),
            var,
        })
    }

    fn stmts(&self, s: &[Stmt]) -> Vec<CStmt> {
        // The body's declarations go out of scope at its end.
        let n = self.locals.borrow().len();
        let r = s.iter().map(|s| self.stmt(s)).collect();
        self.locals.borrow_mut().truncate(n);
        r
    }

    /// The declared type of name `root` in scope: a variable the body
    /// declared, else a parameter or block variable.
    fn declared(&self, root: &str) -> Option<Ty> {
        if let Some((_, t)) = self.locals.borrow().iter().rev().find(|(n, _)| n == root) {
            return Some(t.clone());
        }
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == root)
            .map(|(_, t)| t.clone())
    }

    fn stmt(&self, s: &Stmt) -> CStmt {
        match s {
            Stmt::Assign { lhs, rhs, .. } => {
                let c = self.chain_at(lhs, true);
                if c.as_ref()
                    .is_none_or(|c| c.flat.is_none() && c.var.is_none())
                {
                    self.note(lhs);
                }
                CStmt::Assign(lhs.clone(), c, self.expr(rhs))
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
            Stmt::Block(b) => {
                let body = self.stmts(&b.stmts);
                let frame = binds(&body);
                CStmt::Block(body, frame)
            }
            Stmt::Var(v) => {
                let locals = self.block.map(|b| &self.p.blocks[b].locals);
                if self.flat.is_some_and(|(r, _)| r == v.name.name) {
                    self.bad
                        .set(Some("the headers' name declared again in a block"));
                }
                if let Some((_, names, spec_bad, insts)) = &self.alias {
                    if names.iter().chain(insts).any(|(n, _)| *n == v.name.name) {
                        spec_bad.set(true);
                    }
                }
                match self.p.resolve_type(&v.ty, locals) {
                    Ok(ty) => {
                        let init = v.init.as_ref().map(|e| self.expr(e));
                        self.locals
                            .borrow_mut()
                            .push((v.name.name.clone(), ty.clone()));
                        CStmt::Var(v.name.name.clone(), ty, init, v.span.clone())
                    }
                    Err(_) => {
                        // Left to the walker: noted like any walked
                        // statement, so that a scalar-bound action body
                        // knows of the local it declares (review session24).
                        self.note_stmt(s);
                        CStmt::Walk(s.clone())
                    }
                }
            }
            o => {
                self.note_stmt(o);
                CStmt::Walk(o.clone())
            }
        }
    }

    /// The instance a specialised body's parameter `name` is bound to at
    /// load ([`FlatSpec::insts`]), unless a variable the body declared
    /// hides it.
    fn inst_param(&self, name: &str) -> Option<usize> {
        let (_, _, _, insts) = self.alias.as_ref()?;
        let &(_, i) = insts.iter().find(|(n, _)| n == name)?;
        if self.locals.borrow().iter().any(|(n, _)| n == name) {
            return None;
        }
        Some(i)
    }

    /// The extern instance call argument `e` is wherever the call runs,
    /// known at load: a parameter of this body bound to one
    /// ([`Cx::inst_param`]), or a name that is an instance ([`Cx::named`])
    /// and that no variable in view can have ([`Cx::may_bind`]), so that
    /// the walker's `eval_path` finds that instance.
    fn inst_arg(&self, e: &Expr) -> Option<usize> {
        let Expr::Path(id) = e else { return None };
        if let Some(i) = self.inst_param(&id.name) {
            return Some(i);
        }
        if self.may_bind(&id.name) {
            return None;
        }
        match self.named(id) {
            Some(Value::Instance(i)) => Some(i),
            _ => None,
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

    /// `e` compiled; in the scalar tier ([`CExpr::Scalar`]) when it
    /// is of its shapes (a literal alone is left a literal).
    fn expr(&self, e: &Expr) -> CExpr {
        if !self.plain.get() {
            if let Some(s) = self.scalar(e) {
                if !matches!(s.e.node, scalar::SNode::Const(_)) {
                    self.plain.set(true);
                    let fb = self.expr_value(e);
                    self.plain.set(false);
                    return CExpr::Scalar(Box::new(s), Box::new(fb));
                }
            }
        }
        self.expr_value(e)
    }

    /// `e` compiled on [`Value`]s.
    fn expr_value(&self, e: &Expr) -> CExpr {
        if let Expr::Path(id) = e {
            if let Some((i, ty)) = self.aparam(&id.name) {
                return CExpr::AParam(i, ty);
            }
            if let Some(i) = self.inst_param(&id.name) {
                return CExpr::Named(id.clone(), Value::Instance(i), false);
            }
            if let Some(i) = self.packet_instance(id) {
                return CExpr::Named(id.clone(), Value::Instance(i), false);
            }
        }
        match e {
            Expr::Int(lit, _) => match lit.width.and_then(|(w, s)| lit_bits(lit, w, s)) {
                Some(b) => CExpr::Lit(Value::Bits(b)),
                None => self.walk(e),
            },
            Expr::Bool(b, _) => CExpr::Lit(Value::Bool(*b, Src::None)),
            Expr::Path(id) => match self.named(id) {
                Some(v) => {
                    self.note(e);
                    CExpr::Named(id.clone(), v, self.may_bind(&id.name))
                }
                None => match self.chain_at(e, true) {
                    Some(c) => CExpr::Peek(c, e.clone()),
                    None => self.walk(e),
                },
            },
            Expr::Member(..) => match self.chain_at(e, true) {
                Some(c) => CExpr::Peek(c, e.clone()),
                None => self.walk(e),
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
            Expr::Cast(t, a, span) => {
                let locals = self.block.map(|b| &self.p.blocks[b].locals);
                match self.p.resolve_type(t, locals) {
                    Ok(ty) => CExpr::Cast(ty, Box::new(self.expr(a)), span.clone()),
                    Err(_) => self.walk(e),
                }
            }
            Expr::Slice { expr, hi, lo, span } => match (slice_bound(hi), slice_bound(lo)) {
                (Some(hi), Some(lo)) => {
                    CExpr::Slice(Box::new(self.expr(expr)), hi, lo, span.clone())
                }
                _ => self.walk(e),
            },
            o => self.walk(o),
        }
    }

    /// `e` left to the walker.
    fn walk(&self, e: &Expr) -> CExpr {
        self.note(e);
        CExpr::Walk(e.clone())
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
        let cargs = self.method_cargs(obj, name, type_args, args);
        if cargs.is_none() {
            self.note_args(args);
        }
        let csum = match self.extern_ty(obj) {
            Some("InternetChecksum") if type_args.is_empty() => CsumOp::of(name),
            _ => None,
        };
        let m = CExpr::Method {
            obj: Box::new(self.expr(obj)),
            name: name.to_string(),
            type_args: type_args.to_vec(),
            args: args.to_vec(),
            span: span.clone(),
            cargs,
            csum,
        };
        self.csum_bound(m)
    }

    /// Method call `m` as [`CExpr::Csum`] when it qualifies, else `m`.
    fn csum_bound(&self, m: CExpr) -> CExpr {
        let CExpr::Method {
            obj,
            args,
            cargs,
            csum: Some(op),
            ..
        } = &m
        else {
            return m;
        };
        let CExpr::Named(_, Value::Instance(inst), false) = **obj else {
            return m;
        };
        if self
            .p
            .externs
            .get(inst)
            .is_none_or(|x| x.ty != "InternetChecksum")
        {
            return m;
        }
        let op = *op;
        let (mut steps, mut depth, mut flat) = (0u64, 0u32, false);
        let mut item = |sc: &Scalar| {
            steps += 2 * u64::from(sc.nodes);
            depth = depth.max(sc.depth);
            flat |= sc.flat;
        };
        let ok = match (op, cargs.as_deref()) {
            (CsumOp::Clear | CsumOp::Get | CsumOp::GetState, _) => args.is_empty(),
            (CsumOp::SetState, Some([CArg::One(CExpr::Scalar(sc, _))])) if csum_sure(&sc.e) => {
                item(sc);
                steps += 1;
                args.len() == 1
            }
            (CsumOp::Add | CsumOp::Subtract, Some([CArg::List(xs)])) => {
                let mut w = 0;
                let all = xs.iter().all(|x| match x {
                    CExpr::Scalar(sc, _) if csum_sure(&sc.e) => {
                        w += match sc.e.ty {
                            STy::Bits(w, _) => w,
                            STy::Bool => 1,
                        };
                        item(sc);
                        true
                    }
                    _ => false,
                });
                // The list's own `enter` (the walker evaluates it).
                steps += 1;
                all && w <= 128 && args.len() == 1
            }
            _ => false,
        };
        if !ok {
            return m;
        }
        CExpr::Csum {
            inst,
            op,
            steps,
            depth,
            flat,
            method: Box::new(m),
        }
    }

    /// The extern type of method receiver `obj`: a block's instance or a
    /// parameter of a named type (`None`: anything else).
    fn extern_ty(&self, obj: &Expr) -> Option<&str> {
        let Expr::Path(id) = obj else { return None };
        match self.scope.iter().rev().find(|(n, _)| *n == id.name) {
            Some((_, Ty::Named(t))) => Some(t.as_str()),
            Some(_) => None,
            None => match self.local(&id.name) {
                Some(Local::Extern(i)) => Some(self.p.externs.get(*i)?.ty.as_str()),
                _ => None,
            },
        }
    }

    /// The arguments of extern method call `obj.name(args)` compiled, in
    /// a specialised body ([`FlatSpec`]) when they name a flat header
    /// parameter and the extern declares every parameter of the method
    /// `in` (or directionless): the extern then only evaluates them
    /// (`Run::arg_val`, `Run::data_bits`). `None`: left to the walker.
    fn method_cargs(
        &self,
        obj: &Expr,
        name: &str,
        type_args: &[ast::Type],
        args: &[Arg],
    ) -> Option<Vec<CArg>> {
        let (_, names, _, _) = self.alias.as_ref()?;
        let text = format!("{args:?}");
        if !names.iter().any(|(n, _)| names_ident(&text, n)) || !type_args.is_empty() {
            return None;
        }
        // The instance's extern type: a block's instance or a parameter.
        let ty = self.extern_ty(obj)?;
        // `packet_in`/`packet_out` methods (`advance`, `lookahead`, ...)
        // evaluate their AST arguments themselves, never `Run::cargs`.
        if matches!(ty, "packet_in" | "packet_out") {
            return None;
        }
        let decl = self.p.g.externs.get(ty)?;
        let mut ms = decl
            .methods
            .iter()
            .filter(|m| m.name.name == name && m.params.len() == args.len());
        let m = ms.next()?;
        if ms.next().is_some()
            || args.iter().any(|a| a.name.is_some())
            || !m
                .params
                .iter()
                .all(|p| matches!(p.direction, ast::Direction::In | ast::Direction::None))
        {
            return None;
        }
        Some(
            args.iter()
                .map(|a| match &a.value {
                    Expr::List(items, _) => {
                        CArg::List(items.iter().map(|e| self.expr(e)).collect())
                    }
                    e => CArg::One(self.expr(e)),
                })
                .collect(),
        )
    }

    /// A call of function `Callee` specialised for its flat header
    /// arguments ([`FlatSpec`]): the index in [`Code::specs`], or `None`
    /// when no argument qualifies or the body does not allow it.
    fn spec_flat(&self, callee: Callee, args: &[Arg]) -> Option<usize> {
        let fl = match (self.flat, &self.alias) {
            (Some((_, fl)), _) => fl,
            (None, Some((fl, _, _, _))) => *fl,
            _ => return None,
        };
        if self.depth >= 8 || args.iter().any(|a| a.name.is_some()) {
            return None;
        }
        let (params, tys, stmts, block, key) = match callee {
            Callee::Func(f, i) => (
                &f.decl.proto.params,
                &f.param_tys,
                &f.decl.body.stmts,
                None,
                (false, i),
            ),
            Callee::Action(a) => {
                let ad = &self.p.actions[a];
                (
                    &ad.decl.params,
                    &ad.param_tys,
                    &ad.decl.body.stmts,
                    ad.block,
                    (true, a),
                )
            }
        };
        // An action sees its block's names: the flat headers too when it
        // is the caller's block's (and no parameter hides them).
        let flat = match block {
            None => None,
            Some(_) if block == self.block => self.flat,
            Some(_) => return None,
        };
        if let Some((root, _)) = flat {
            if params.iter().any(|p| p.name.name == root) {
                return None;
            }
        }
        if params.len() != args.len() {
            return None;
        }
        let mut alias: Vec<Option<usize>> = vec![None; params.len()];
        let mut names = Vec::new();
        for (k, (p, a)) in params.iter().zip(args).enumerate() {
            if p.direction != ast::Direction::InOut || !matches!(tys.get(k), Some(Ty::Header(_))) {
                continue;
            }
            if let Some(FlatAt::Header(h)) = self.chain(&a.value).and_then(|c| c.flat) {
                if alias.contains(&Some(h)) {
                    return None;
                }
                alias[k] = Some(h);
                names.push((p.name.name.clone(), h));
            }
        }
        // Extern instance parameters bound at load (functions only: an
        // action's directionless parameters are action data), when the
        // body binds no other name like the parameter (then every use of
        // the name in the body is the parameter).
        let mut insts: Vec<Option<usize>> = vec![None; params.len()];
        let mut inames = Vec::new();
        if let Callee::Func(_, fi) = callee {
            for (k, (p, a)) in params.iter().zip(args).enumerate() {
                if p.direction != ast::Direction::None || !matches!(tys.get(k), Some(Ty::Named(_)))
                {
                    continue;
                }
                if self.doms.funcs.get(fi).and_then(|d| d.get(&p.name.name)) != Some(&1) {
                    continue;
                }
                if let Some(i) = self.inst_arg(&a.value) {
                    insts[k] = Some(i);
                    inames.push((p.name.name.clone(), i));
                }
            }
        }
        if names.is_empty() && inames.is_empty() {
            return None;
        }
        // An action that also names an aliased header through the block's
        // name for the headers would see its writes, not the copy's.
        if let Some((root, fl)) = flat {
            let text = format!("{stmts:?}");
            if names_ident(&text, root)
                && names.iter().any(|(_, h)| names_ident(&text, &fl.names[*h]))
            {
                return None;
            }
        }
        // No other argument may name an aliased header (its copy-in
        // would see the header before the body's writes).
        for (k, a) in args.iter().enumerate() {
            if alias[k].is_some() {
                continue;
            }
            match self.chain(&a.value).and_then(|c| c.flat) {
                Some(FlatAt::Field { h, .. }) | Some(FlatAt::Header(h))
                    if alias.contains(&Some(h)) =>
                {
                    return None
                }
                _ => {}
            }
        }
        if let Some(s) = self
            .specs
            .borrow()
            .iter()
            .position(|(k, s)| *k == key && s.alias == alias && s.insts == insts)
        {
            return Some(s);
        }
        let spec_bad = std::cell::Cell::new(false);
        let mut scope = block.map(|b| block_scope(self.p, b)).unwrap_or_default();
        scope.extend(params_scope(params, tys));
        let cx = Cx {
            p: self.p,
            block,
            fns: self.fns,
            scope,
            flat,
            bad: self.bad,
            alias: Some((fl, names, &spec_bad, inames)),
            specs: self.specs,
            depth: self.depth + 1,
            plain: Default::default(),
            locals: Default::default(),
            bound: match (key, block) {
                ((false, i), _) => self.doms.funcs.get(i),
                (_, Some(b)) => self.doms.blocks.get(b),
                ((true, a), None) => self.doms.actions.get(a).and_then(Option::as_ref),
            },
            doms: self.doms,
            aparams: None,
        };
        let before = self.specs.borrow().len();
        let body = cx.stmts(stmts);
        if spec_bad.get() {
            // The nested specs compiled for this body are not used: drop
            // them (`Pipeline::flat_calls` counts the specs).
            self.specs.borrow_mut().truncate(before);
            return None;
        }
        let mut specs = self.specs.borrow_mut();
        specs.push((key, FlatSpec { body, alias, insts }));
        Some(specs.len() - 1)
    }

    /// A direct call of action `a` (specialised when it can be).
    fn action_call(&self, a: usize, args: &[Arg]) -> CExpr {
        // A specialised body writes its aliased headers in place: a block
        // action it calls could name them through the block's headers
        // (`hdr.c`) and would see those writes, not the copy-in's header.
        if let Some((_, _, spec_bad, _)) = &self.alias {
            if self.p.actions[a].block.is_some() {
                spec_bad.set(true);
            }
        }
        // An action of the block runs without a barrier: by the walker's
        // dynamic scope it sees the caller's frame, where a scalar-bound
        // caller ([`SAction`]) holds no parameter (review p4early
        // MUST-FIX 1). Such a caller keeps its frame.
        if let Some(ap) = self.aparams {
            if self.p.actions[a].block.is_some() {
                ap.bad.set(true);
            }
        }
        match self.spec_flat(Callee::Action(a), args) {
            Some(s) => {
                self.note_flat_call_args(s, args);
                CExpr::ActionFlat(a, s, args.to_vec())
            }
            None => {
                self.note_call_args(args);
                CExpr::Action(a, args.to_vec())
            }
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
                "isValid" => {
                    let c = self
                        .chain(obj)
                        .filter(|c| matches!(c.flat, Some(FlatAt::Header(_))));
                    if c.is_none() {
                        self.note(obj);
                    }
                    CExpr::IsValid((**obj).clone(), c, span.clone())
                }
                "setValid" | "setInvalid" | "push_front" | "pop_front" => self.walk(whole),
                "apply" => match &**obj {
                    Expr::Path(id) => match self.local(&id.name) {
                        Some(Local::Table(t)) => {
                            self.note(whole);
                            CExpr::Apply(id.clone(), *t, whole.clone(), self.may_bind(&id.name))
                        }
                        _ => self.walk(whole),
                    },
                    _ => self.walk(whole),
                },
                "extract" if args.len() == 1 && type_args.is_empty() => {
                    match self.chain(&args[0].value) {
                        Some(chain)
                            if chain.flat.is_none()
                                || (matches!(chain.flat, Some(FlatAt::Header(_)))
                                    && self.packet_param(obj)) =>
                        {
                            if chain.flat.is_none() {
                                self.note_args(args);
                            }
                            CExpr::Extract {
                                obj: Box::new(self.expr(obj)),
                                chain,
                                args: args.to_vec(),
                                span: span.clone(),
                                unions: self.p.has_header_unions(),
                            }
                        }
                        _ => self.method(obj, "extract", type_args, args, span),
                    }
                }
                "emit" if type_args.is_empty() => {
                    let chains: Vec<Option<Chain>> =
                        args.iter().map(|a| self.chain(&a.value)).collect();
                    for (c, a) in chains.iter().zip(args) {
                        // A flat header is emitted only by the compiled
                        // path, on the packet itself.
                        let flat = c.as_ref().is_some_and(|c| c.flat.is_some());
                        if !flat || !self.packet_param(obj) {
                            self.note(&a.value);
                        }
                    }
                    CExpr::Emit {
                        obj: Box::new(self.expr(obj)),
                        chains,
                        args: args.to_vec(),
                        span: span.clone(),
                    }
                }
                name => self.method(obj, name, type_args, args, span),
            },
            Expr::Path(id) => {
                let n = id.name.as_str();
                if let Some(Local::Action(a)) = self.local(n) {
                    return self.action_call(*a, args);
                }
                if let Some(f) = self.p.g.functions.get(n) {
                    return match self.fns.get(n) {
                        Some(&i) => match self.spec_flat(Callee::Func(f, i), args) {
                            Some(s) => {
                                self.note_flat_call_args(s, args);
                                CExpr::FuncFlat(f.clone(), i, s, args.to_vec())
                            }
                            None => {
                                self.note_call_args(args);
                                CExpr::Func(f.clone(), i, args.to_vec())
                            }
                        },
                        None => self.walk(whole),
                    };
                }
                if let Some(a) = self.p.g.actions.get(n) {
                    return self.action_call(*a, args);
                }
                // Compiled arguments keep the flat headers (the walker
                // would need the tree for `send_to_port(hdr.m.port)`).
                let cargs: Option<Vec<CArg>> =
                    (extern_fn_cargs(n) && type_args.is_empty()).then(|| {
                        args.iter()
                            .map(|a| match &a.value {
                                Expr::List(items, _) => {
                                    CArg::List(items.iter().map(|e| self.expr(e)).collect())
                                }
                                e => CArg::One(self.expr(e)),
                            })
                            .collect()
                    });
                if cargs.is_none() {
                    self.note_args(args);
                }
                let port = n == "send_to_port"
                    && matches!(cargs.as_deref(), Some([CArg::One(CExpr::Scalar(..))]));
                CExpr::ExternFn {
                    name: n.to_string(),
                    type_args: type_args.to_vec(),
                    args: args.to_vec(),
                    span: span.clone(),
                    cargs,
                    port,
                }
            }
            _ => self.walk(whole),
        }
    }

    /// Arguments of a specialised call (spec `s`): in a block, as any
    /// call's; in a specialised body, those not aliased (the walker
    /// evaluates them, e.g. `g(b, b.y + 1)`) must not name an aliased
    /// parameter.
    fn note_flat_call_args(&self, s: usize, args: &[Arg]) {
        if self.alias.is_none() {
            return self.note_call_args(args);
        }
        let specs = self.specs.borrow();
        let (alias, insts) = (&specs[s].1.alias, &specs[s].1.insts);
        for (k, a) in args.iter().enumerate() {
            // An instance bound at load is not evaluated by the walker.
            if alias.get(k).copied().flatten().is_none()
                && insts.get(k).copied().flatten().is_none()
            {
                self.note(&a.value);
            }
        }
    }

    /// Arguments of a function or action call: `invoke` copies a flat
    /// header or field in and out itself ([`Run::flat_arg`]); anything
    /// else naming the headers is the walker's.
    fn note_call_args(&self, args: &[Arg]) {
        if self.alias.is_some() {
            // `invoke` copies only the block's flat headers itself: an
            // aliased parameter passed on is the walker's.
            return self.note_args(args);
        }
        for a in args {
            let flat = self.chain(&a.value).is_some_and(|c| c.flat.is_some());
            if !flat {
                self.note(&a.value);
            }
        }
    }

    /// The instance the block's `packet_in`/`packet_out` parameter `id`
    /// holds wherever this body reads it (the packet's: every binding of
    /// a parameter of those types is `Value::Instance(PKT_IN)`/`PKT_OUT`,
    /// `arch`'s and a sub-block's argument alike), when the name is bound
    /// only there ([`Domain`]: no variable hides it). Why: the receivers
    /// of `extract`/`emit` were searched in the frame per call (~85
    /// instructions each, docs/results/p4.md 2v).
    fn packet_instance(&self, id: &ast::Ident) -> Option<usize> {
        let b = self.block?;
        if self.bound?.get(&id.name) != Some(&1) {
            return None;
        }
        let blk = &self.p.blocks[b];
        blk.params()
            .iter()
            .zip(&blk.param_tys)
            .find_map(|(prm, t)| match t {
                Ty::Named(n) if prm.name.name == id.name && n == "packet_in" => Some(PKT_IN),
                Ty::Named(n) if prm.name.name == id.name && n == "packet_out" => Some(PKT_OUT),
                _ => None,
            })
    }

    /// Whether `obj` is the block's `packet_in`/`packet_out` parameter.
    fn packet_param(&self, obj: &Expr) -> bool {
        let Expr::Path(id) = obj else { return false };
        let Some(b) = self.block else { return false };
        let blk = &self.p.blocks[b];
        blk.params().iter().zip(&blk.param_tys).any(|(prm, t)| {
            prm.name.name == id.name
                && matches!(t, Ty::Named(n) if n == "packet_in" || n == "packet_out")
        })
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
                let cases: Vec<CCase> = cases
                    .iter()
                    .map(|c| {
                        let next = self.next(b, &c.next.name);
                        let ks = &c.keysets;
                        if ks.len() == 1 && matches!(ks[0], Expr::Default(_) | Expr::DontCare(_)) {
                            return CCase::Default(next);
                        }
                        ks.iter().for_each(|k| self.note(k));
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
                let keys: Vec<CExpr> = exprs.iter().map(|e| self.expr(e)).collect();
                let sel = scalar_select(&keys, &cases);
                CTrans::Select(keys, cases, sel)
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
        let prms = blk.params();
        let keys: Vec<String> = blk
            .param_tys
            .iter()
            .map(crate::interp::arch::ty_key)
            .collect();
        let params = keys
            .iter()
            .enumerate()
            .map(|(pi, k)| match k.as_str() {
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
                    let prm = &prms[pi];
                    // Skipped only where the order of several copies
                    // cannot matter: one parameter of the type, or `in`.
                    let unnamed = (once || prm.direction == crate::ast::Direction::In)
                        && param_unnamed(p, *b, &prm.name.name);
                    ParamSlot::Shared {
                        slot,
                        once,
                        unnamed,
                    }
                }
            })
            .collect();
        l.params.push(params);
    }
    l
}

/// Whether no body of block `b` (its states or `apply`, its local
/// declarations: actions, tables, variables, instances) nor any
/// top-level action or function names identifier `name`. Why: a main
/// block's metadata parameter that nothing reads or writes (routing.p4's
/// `meta`, `istd`, `ostd`) need not be moved into and out of its frame
/// per packet (`arch::run_block_slots`: that binding was its largest
/// cost, docs/results/p4.md 2j). Conservative: any identifier of that
/// name counts (a field or a local of that name too).
fn param_unnamed(p: &Prog, b: usize, name: &str) -> bool {
    let text = match &p.blocks[b].kind {
        BlockKind::Parser(d) => format!("{:?}{:?}", d.locals, d.states),
        BlockKind::Control(c) => format!("{:?}{:?}", c.locals, c.apply),
    };
    if names_ident(&text, name) {
        return false;
    }
    let elsewhere = p
        .actions
        .iter()
        .filter(|a| a.block.is_none())
        .any(|a| names_ident(&format!("{:?}", a.decl.body), name))
        || p.g
            .functions
            .values()
            .any(|f| names_ident(&format!("{:?}", f.decl.body), name));
    !elsewhere
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

    /// The flat headers' layout and place of `c`, when this run holds
    /// the headers flat and `c` is in them.
    #[inline]
    fn flat_of(&self, c: &Chain) -> Option<(&'a FlatLayout, FlatAt)> {
        Some((self.flat?, c.flat?))
    }

    /// A table key's bits and source straight from where they sit, when
    /// key expression `e` is a field of the flat headers or a variable
    /// (or a field chain of one) holding a `bit<W>`/`int<W>`/`bool`:
    /// what `ceval(e)` and `scalar_bits` give, the same step counted and
    /// nothing recorded, without building a `Value` for it. `None`: any
    /// other expression or value (`apply_table` evaluates it then). Why:
    /// `apply_table` built, converted and dropped a `Value` per key (a
    /// field read by `flat_read`, a variable cloned), per table and
    /// packet; only the bits and the source are used.
    ///
    /// Since table keys are compiled by `Cx::expr`, a field or variable
    /// key is a [`CExpr::Scalar`]: its bits come from the scalar tier,
    /// inside the same step and depth as `ceval` counts. When the tier
    /// declines, the steps and depth are put back and `None` returned,
    /// so `apply_table`'s `ceval` counts them once, as before.
    pub(crate) fn key_bits(&mut self, e: &'a CExpr) -> Option<R<(u128, Src)>> {
        let c = match e {
            CExpr::Peek(c, _) => c,
            CExpr::Scalar(s, _) => {
                let steps = self.steps;
                // `ceval`'s step and depth check, then its `Scalar` arm.
                if let Err(x) = self.enter() {
                    return Some(Err(x));
                }
                let r = self.scalar(s);
                self.depth -= 1;
                let Some((v, src)) = r else {
                    self.steps = steps;
                    return None;
                };
                let v = match s.e.ty {
                    STy::Bool => u128::from(v != 0),
                    STy::Bits(..) => v,
                };
                self.st.key_bits_reads = self.st.key_bits_reads.wrapping_add(1);
                return Some(Ok((v, src)));
            }
            _ => return None,
        };
        let (v, src) = match self.flat_of(c) {
            Some((_, FlatAt::Field { i, .. })) => {
                let st = &self.st.pool.flat;
                (*st.v.get(i)?, *st.src.get(i)?)
            }
            Some((_, FlatAt::Header(_))) => return None,
            None => match c.var {
                Some((i, _)) => self.vslot(i as usize),
                None => match self.peek_chain(c)? {
                    Value::Bits(b) => (b.v, b.src),
                    Value::Bool(b, s) => (u128::from(*b), *s),
                    _ => return None,
                },
            },
        };
        // `ceval`'s step and depth check.
        if let Err(x) = self.enter() {
            return Some(Err(x));
        }
        self.depth -= 1;
        self.st.key_bits_reads = self.st.key_bits_reads.wrapping_add(1);
        Some(Ok((v, src)))
    }

    /// `invoke`'s argument `e` when it is a header or field of the flat
    /// headers (`hdr.ip` in `ip_ttl_dec(chk, hdr.ip)`): resolved by name,
    /// as the walker's `lvalue` would, unless a variable hides the name.
    pub(crate) fn flat_arg(&self, e: &Expr) -> Option<(&'a FlatLayout, FlatAt)> {
        let fl = self.flat?;
        let (h, f) = match e {
            Expr::Member(b, f) => match &**b {
                Expr::Path(r) if r.name == self.flat_root => (f, None),
                Expr::Member(b2, h) => match &**b2 {
                    Expr::Path(r) if r.name == self.flat_root => (h, Some(f)),
                    _ => return None,
                },
                _ => return None,
            },
            _ => return None,
        };
        if self.var(self.flat_root).is_some() {
            return None;
        }
        let hi = fl.names.iter().position(|n| *n == h.name)?;
        Some((fl, fl.place(hi, f.map(|f| f.name.as_str()))?))
    }

    /// The value at flat place `at` (a header built into `d`'s storage).
    pub(crate) fn flat_read(&self, fl: &FlatLayout, at: FlatAt, d: Value) -> Value {
        let st = &self.st.pool.flat;
        match at {
            FlatAt::Field { h, i, k } => st.field(fl, h, i, k),
            FlatAt::Header(h) => {
                let mut d = d;
                st.header_into(fl, h, &mut d);
                d
            }
        }
    }

    /// The walker's `assign` of `v` to flat place `at`.
    pub(crate) fn flat_write(
        &mut self,
        fl: &FlatLayout,
        at: FlatAt,
        v: Value,
        span: &ast::Span,
    ) -> R<()> {
        if let FlatAt::Field { h, i, k } = at {
            // A value of the field's own kind (`ip.ttl = ip.ttl - 1`):
            // `coerce_like` would keep its bits and source, so they are
            // stored without reading the field back first.
            let (w, _, is_bool) = fl.headers[h].kinds[k];
            let st = &mut self.st.pool.flat;
            match &v {
                Value::Bits(b) if !is_bool && b.width == w => {
                    st.v[i] = b.v;
                    st.src[i] = b.src;
                    return Ok(());
                }
                Value::Bool(b, s) if is_bool => {
                    st.v[i] = u128::from(*b);
                    st.src[i] = *s;
                    return Ok(());
                }
                _ => {}
            }
        }
        if let (FlatAt::Header(h), Value::Header(x)) = (at, &v) {
            // A header of this very type (a function's `inout` copy-out):
            // `coerce_like` would keep it as it is.
            let fh = &fl.headers[h];
            if Arc::ptr_eq(&x.names, &fh.agg.names)
                && Arc::ptr_eq(&x.ty, &fh.agg.name)
                && self.st.pool.flat.set_header(fl, h, &v)
            {
                if self.st.pool.agg_spare.len() < 16 {
                    self.st.pool.agg_spare.push(v);
                }
                return Ok(());
            }
        }
        let d = match at {
            FlatAt::Header(_) => self.st.pool.agg_spare.pop().unwrap_or(Value::Void),
            FlatAt::Field { .. } => Value::Void,
        };
        let cur = self.flat_read(fl, at, d);
        let nv = coerce_like(&cur, v).map_err(|m| Ctl::Fail(format!("{span}: {m}")))?;
        let st = &mut self.st.pool.flat;
        let ok = match at {
            FlatAt::Field { i, .. } => st.set_field(i, &nv),
            FlatAt::Header(h) => st.set_header(fl, h, &nv),
        };
        if !ok {
            return fail(format!("{span}: cannot assign a {}", nv.type_name()));
        }
        if let FlatAt::Header(_) = at {
            // Both headers' storage, for the next copy-in and write.
            for x in [cur, nv] {
                if self.st.pool.agg_spare.len() < 16 {
                    self.st.pool.agg_spare.push(x);
                }
            }
        }
        Ok(())
    }

    /// The walker's extract into flat header `h`.
    fn flat_extract(&mut self, fl: &FlatLayout, h: usize) -> R<Value> {
        let fh = &fl.headers[h];
        let pos = self.pos;
        let w = fh.width;
        if pos + w > self.pkt.len() as u64 * 8 {
            self.tr.set_uncacheable("p4-parser-error");
            return Err(Ctl::Reject("PacketTooShort".into()));
        }
        let first = self.first_pass;
        let tag = self.reparse_tag;
        let st = &mut self.st.pool.flat;
        let mut off = pos;
        let n = fh.kinds.len();
        let (vs, srcs) = (
            &mut st.v[fh.first..fh.first + n],
            &mut st.src[fh.first..fh.first + n],
        );
        for ((&(fw, _, _), v), src) in fh.kinds.iter().zip(vs).zip(srcs) {
            // A field within the 8 bytes from its first byte (every field
            // of up to 57 bits, most of up to 64): one u64 load and two
            // shifts, no u128 arithmetic; `read_bits` otherwise.
            let (b, lead) = ((off / 8) as usize, (off % 8) as u32);
            *v = match self.pkt.get(b..b + 8) {
                Some(x) if fw > 0 && lead + fw <= 64 => {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(x);
                    u128::from((u64::from_be_bytes(a) << lead) >> (64 - fw))
                }
                _ => read_bits(&self.pkt, off, fw),
            };
            *src = if first {
                Src::Packet(off as u32)
            } else {
                Src::Tainted(tag)
            };
            off += u64::from(fw);
        }
        st.valid[h] = true;
        self.need_bytes(pos + w);
        self.pos += w;
        Ok(Value::Void)
    }

    /// `emit_into` of flat header `h`.
    fn flat_emit(&mut self, fl: &FlatLayout, h: usize) {
        let st = &self.st.pool.flat;
        if !st.valid[h] {
            return;
        }
        let fh = &fl.headers[h];
        if fh.packed && self.out.bits % 8 == 0 && self.out.bytes.len() as u64 * 8 == self.out.bits {
            // The same bits and spans as the loop below: the fields joined
            // in a u128 (under 64 bits pending before each field, so a
            // field of up to 64 bits always fits), every full 64 bits
            // appended as one 8-byte copy; the header is whole bytes, so
            // nothing is left over at the end but whole bytes.
            let n = fh.kinds.len();
            let (vs, srcs) = (
                &st.v[fh.first..fh.first + n],
                &st.src[fh.first..fh.first + n],
            );
            self.out.bytes.reserve(fh.width as usize / 8);
            self.prov.reserve(n);
            let mut at = self.out.bits as u32;
            let (mut acc, mut pend) = (0u128, 0u32);
            for ((&(w, _, _), &v), &src) in fh.kinds.iter().zip(vs).zip(srcs) {
                acc = (acc << w) | (v & crate::value::mask(w));
                pend += w;
                if pend >= 64 {
                    pend -= 64;
                    self.out
                        .bytes
                        .extend_from_slice(&((acc >> pend) as u64).to_be_bytes());
                }
                self.prov.push(crate::trace::EmitSpan {
                    out: at,
                    len: w,
                    from: match src {
                        Src::Packet(o) => Some(o),
                        _ => None,
                    },
                });
                at += w;
            }
            // pend is a multiple of 8 below 64: its bytes, high first.
            let tail = ((acc << (64 - pend)) as u64).to_be_bytes();
            self.out
                .bytes
                .extend_from_slice(&tail[..(pend / 8) as usize]);
            self.out.bits += fh.width;
            return;
        }
        for (k, &(w, _, _)) in fh.kinds.iter().enumerate() {
            let i = fh.first + k;
            let at = self.out.bits as u32;
            self.out.push(st.v[i], w);
            let from = match st.src[i] {
                Src::Packet(o) => Some(o),
                _ => None,
            };
            self.prov.push(crate::trace::EmitSpan {
                out: at,
                len: w,
                from,
            });
        }
    }

    /// Where the walker's `var_in` finds `c`'s root: (frame, entry).
    /// Through [`Chain::slot`] when the root's name is `unique` and the
    /// entry there still holds the very name string found there before
    /// (same address and length: the same bytes; any entry of that name is
    /// then the only one in view); by the walker's search otherwise.
    #[inline]
    fn root_at(&self, c: &Chain) -> Option<(usize, usize)> {
        if c.unique {
            let h = c.slot.load(Ordering::Relaxed);
            let top = self.frames.len();
            let back = (h >> 16) as usize;
            if back < top - self.base {
                let fi = top - 1 - back;
                let ix = (h & 0xffff) as usize;
                if let Some((n, _)) = self.frames[fi].get(ix) {
                    if n.as_ptr() as usize == c.name_at.load(Ordering::Relaxed)
                        && n.len() == c.root.len()
                    {
                        return Some((fi, ix));
                    }
                }
            }
        }
        self.root_search(c)
    }

    /// [`Run::root_at`] by the walker's search (innermost frame first,
    /// last entry first), keeping the place in the chain when its name is
    /// `unique`.
    #[inline(never)]
    fn root_search(&self, c: &Chain) -> Option<(usize, usize)> {
        let top = self.frames.len();
        for fi in (self.base..top).rev() {
            let f = &self.frames[fi];
            if let Some(ix) = f.iter().rposition(|(n, _)| name_eq(n, &c.root)) {
                let back = top - 1 - fi;
                if c.unique && back < 0xffff && ix <= 0xffff {
                    c.slot
                        .store((back as u32) << 16 | ix as u32, Ordering::Relaxed);
                    c.name_at
                        .store(f[ix].0.as_ptr() as usize, Ordering::Relaxed);
                }
                return Some((fi, ix));
            }
        }
        None
    }

    /// `c`'s root variable (the walker's `var_in`).
    #[inline]
    fn root(&self, c: &Chain) -> Option<&Value> {
        let (fi, ix) = self.root_at(c)?;
        Some(&self.frames[fi][ix].1)
    }

    /// `c`'s root variable, to change (the walker's `var_mut`).
    #[inline]
    fn root_mut(&mut self, c: &Chain) -> Option<&mut Value> {
        let (fi, ix) = self.root_at(c)?;
        Some(&mut self.frames[fi][ix].1)
    }

    /// What `peek_in` borrows for the chain's expression.
    fn peek_chain(&self, c: &Chain) -> Option<&Value> {
        let mut v = self.root(c)?;
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
        let mut v = self.root_mut(c)?;
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
        let (fi, ix) = self.root_at(c)?;
        let mut v = &self.frames[fi][ix].1;
        for s in &c.steps {
            v = step(v, s)?;
        }
        Some(super::eval::emit_into(&mut self.out, &mut self.prov, v))
    }

    /// A method call's receiver: `Ok(i)` when it is extern instance `i`
    /// (what `ceval(obj)` gives as `Value::Instance(i)`), else the value
    /// `ceval` gives. A variable holding an instance (`pkt`, a checksum
    /// object passed to a function) is only looked at where it sits (its
    /// chain's [`Chain::slot`]), with `ceval`'s step and depth, instead of
    /// cloned into a `Value` and dropped after the call: every `extract`,
    /// `emit` and checksum method paid that (p4meta's c7eee13, reverted
    /// then for no timing win alone; docs/results/p4.md 2p, 2q).
    #[inline]
    ///
    /// `ceval`'s `Peek` arm done here whole: a receiver the frames do not
    /// hold (a block's or the program's extern instance: `reg.read`,
    /// `counter.count`, a control-local checksum) is searched once, then
    /// evaluated by the walker, not searched again by `ceval` (review
    /// p4early SHOULD-FIX 3).
    fn crecv(&mut self, obj: &'a CExpr) -> R<Result<usize, Value>> {
        // An instance known at load (a block's, or a specialised body's
        // parameter bound to one, `FlatSpec::insts`): `ceval`'s step and
        // depth, no `Value`.
        if let CExpr::Named(_, Value::Instance(i), false) = obj {
            self.enter()?;
            self.depth -= 1;
            return Ok(Ok(*i));
        }
        if let CExpr::Peek(c, x) = obj {
            if self.flat_of(c).is_none() && c.var.is_none() {
                self.enter()?;
                let r = match self.peek_chain(c) {
                    Some(Value::Instance(i)) => Ok(Ok(*i)),
                    Some(v) => Ok(Err(v.clone())),
                    None => self.eval(x).map(|v| match v {
                        Value::Instance(i) => Ok(i),
                        v => Err(v),
                    }),
                };
                self.depth -= 1;
                return r;
            }
        }
        match self.ceval(obj)? {
            Value::Instance(i) => Ok(Ok(i)),
            v => Ok(Err(v)),
        }
    }

    /// The walker's `eval` of compiled extern argument `e` (no compiled
    /// arguments in force), as a `u128` (`Value::as_u128`, 0 when it has
    /// none): a scalar-tier expression without building the `Value`, its
    /// `Value` form when the tier declines. The steps are the walker's:
    /// the tier counts each node's `enter` itself, the root's included
    /// (`ceval` of a `CExpr::Scalar` would count the root twice: one step
    /// more than the walker per `set_state`, docs/results/p4.md 2v).
    pub(crate) fn carg_bits(&mut self, e: &'a CExpr) -> R<u128> {
        let saved = self.cargs.take();
        let r = match e {
            CExpr::Scalar(sc, fb) => match self.scalar(sc) {
                Some((v, _)) => Ok(v),
                None => self.ceval(fb).map(|v| v.as_u128().unwrap_or(0)),
            },
            e => self.ceval(e).map(|v| v.as_u128().unwrap_or(0)),
        };
        self.cargs = saved;
        r
    }

    /// [`Run::carg_bits`] as a `Value`: the walker's `eval` of compiled
    /// checksum list item `e` (no compiled arguments in force) with the
    /// walker's steps (`ceval` of a `CExpr::Scalar` would count its root
    /// twice: one step more per item, docs/results/p4.md 2v).
    pub(crate) fn citem_val(&mut self, e: &'a CExpr) -> R<Value> {
        match e {
            CExpr::Scalar(sc, fb) => match self.scalar(sc) {
                Some((v, src)) => Ok(sc.e.ty.value(v, src)),
                None => self.ceval(fb),
            },
            e => self.ceval(e),
        }
    }

    /// `scalar_sum` of checksum list items `xs` ([`CExpr::Csum`]'s), the
    /// flat fields read in place (a field's `seval` is its step and its
    /// value, nothing recorded; `scalar`'s guard is `CExpr::Csum`'s, done
    /// by the caller), any other item by `scalar_sum`.
    pub(crate) fn csum_items(&mut self, xs: &'a [CExpr]) -> Option<u32> {
        let (mut acc, mut n) = (0u128, 0u32);
        for x in xs {
            let CExpr::Scalar(sc, _) = x else {
                return self.scalar_sum(xs);
            };
            let (scalar::SNode::Field(_), STy::Bits(w, _)) = (&sc.e.node, sc.e.ty) else {
                return self.scalar_sum(xs);
            };
            if n + w > 128 {
                return self.scalar_sum(xs);
            }
            n += w;
        }
        n = 0;
        for x in xs {
            if let CExpr::Scalar(sc, _) = x {
                if let (scalar::SNode::Field(i), STy::Bits(w, _)) = (&sc.e.node, sc.e.ty) {
                    self.steps += u64::from(sc.e.cost);
                    self.st.scalar_runs = self.st.scalar_runs.wrapping_add(1);
                    let v =
                        self.st.pool.flat.v.get(*i).copied().unwrap_or(0) & crate::value::mask(w);
                    acc = if w == 128 { v } else { (acc << w) | v };
                    n += w;
                }
            }
        }
        Some(crate::interp::externs::ones_sum_bits(acc, n))
    }

    /// A statement's [`CExpr::Csum`] run without `ceval`'s dispatch: its
    /// two `enter`s and the receiver's counted at once when the steps
    /// and depth it may take are below the limits (else `None`: `ceval`,
    /// which meets them where the walker does). Why: `ceval`'s and
    /// `ceval_inner`'s entry was ~120 instructions per call, more than
    /// the checksum step itself.
    #[inline]
    fn csum_stmt(&mut self, e: &'a CExpr) -> Option<R<Value>> {
        let CExpr::Csum {
            inst,
            op,
            steps,
            depth,
            flat,
            method,
        } = e
        else {
            return None;
        };
        let CExpr::Method {
            cargs, args, span, ..
        } = &**method
        else {
            return None;
        };
        if self.steps + 3 + steps > MAX_STEPS
            || self.depth + 4 + depth >= MAX_DEPTH
            || (*flat && self.flat.is_none())
        {
            return None;
        }
        self.steps += 3;
        self.depth += 2;
        let r = self.csum_bound(*inst, *op, cargs.as_deref().unwrap_or(&[]), args, span);
        self.depth -= 2;
        Some(r)
    }

    /// [`Run::eval`] of a compiled expression.
    pub(crate) fn ceval(&mut self, e: &'a CExpr) -> R<Value> {
        self.enter()?;
        // A call is two levels in the walker (`eval`, then `call`'s own
        // `enter`): the same steps and depth here, so that the step and
        // depth limits fall where the walker's do.
        let call = matches!(
            e,
            CExpr::IsValid(..)
                | CExpr::Apply(..)
                | CExpr::Method { .. }
                | CExpr::Csum { .. }
                | CExpr::Extract { .. }
                | CExpr::Emit { .. }
                | CExpr::Action(..)
                | CExpr::ActionFlat(..)
                | CExpr::Func(..)
                | CExpr::FuncFlat(..)
                | CExpr::ExternFn { .. }
        );
        if call {
            if let Err(x) = self.enter() {
                self.depth -= 1;
                return Err(x);
            }
        }
        let r = self.ceval_inner(e);
        self.depth -= 1 + u32::from(call);
        r
    }

    fn ceval_inner(&mut self, e: &'a CExpr) -> R<Value> {
        match e {
            CExpr::Lit(v) => Ok(v.clone()),
            CExpr::Peek(c, x) => match self.flat_of(c) {
                Some((fl, at)) => {
                    let d = match at {
                        FlatAt::Header(_) => self.st.pool.agg_spare.pop().unwrap_or(Value::Void),
                        FlatAt::Field { .. } => Value::Void,
                    };
                    Ok(self.flat_read(fl, at, d))
                }
                None => match c.var {
                    Some((i, ty)) => {
                        let (v, src) = self.vslot(i as usize);
                        Ok(ty.value(v, src))
                    }
                    None => match self.peek_chain(c) {
                        Some(v) => Ok(v.clone()),
                        None => self.eval(x),
                    },
                },
            },
            CExpr::Named(_, v, false) => Ok(v.clone()),
            CExpr::Named(id, v, true) => match self.var(&id.name) {
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
            CExpr::IsValid(obj, c, span) => match c.as_ref().and_then(|c| self.flat_of(c)) {
                Some((_, FlatAt::Header(h))) => {
                    Ok(Value::Bool(self.st.pool.flat.valid[h], Src::None))
                }
                Some((_, FlatAt::Field { .. })) => fail(format!("{span}: isValid on a field")),
                None => self.is_valid(obj, span),
            },
            CExpr::Apply(id, t, whole, bound) => {
                if !*bound || self.var(&id.name).is_none() {
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
                cargs,
                csum,
            } => {
                let recv = self.crecv(obj)?;
                if let (Some(op), Ok(i)) = (csum, &recv) {
                    let p: &'a Prog = self.p;
                    if p.externs
                        .get(*i)
                        .is_some_and(|x| x.ty == "InternetChecksum")
                    {
                        let i = *i;
                        // The compiled arguments in force as for
                        // `call_method` below.
                        return match cargs {
                            Some(ca) => {
                                let saved = self.cargs.replace(ca);
                                let r = self.csum_method(i, *op, args, span);
                                self.cargs = saved;
                                r
                            }
                            None => self.csum_method(i, *op, args, span),
                        };
                    }
                }
                let recv = recv.map_or_else(|v| v, Value::Instance);
                match cargs {
                    Some(ca) => {
                        let saved = self.cargs.replace(ca);
                        let r = self.call_method(recv, name, type_args, args, span);
                        self.cargs = saved;
                        r
                    }
                    None => self.call_method(recv, name, type_args, args, span),
                }
            }
            CExpr::Csum {
                inst,
                op,
                steps,
                depth,
                flat,
                method,
            } => {
                let CExpr::Method {
                    cargs, args, span, ..
                } = &**method
                else {
                    return self.ceval_inner(method);
                };
                // Room for the receiver's `enter` and the arguments'
                // steps and depth below the limits (else the method form,
                // which meets them where the walker does).
                if self.steps + 1 + steps > MAX_STEPS
                    || self.depth + 2 + depth >= MAX_DEPTH
                    || (*flat && self.flat.is_none())
                {
                    return self.ceval_inner(method);
                }
                // The receiver's `enter` (`crecv`).
                self.steps += 1;
                self.csum_bound(*inst, *op, cargs.as_deref().unwrap_or(&[]), args, span)
            }
            CExpr::Extract {
                obj,
                chain,
                args,
                span,
                unions,
            } => {
                // The receiver matched as it comes (a `Value` built only
                // for the method call: nothing to drop on the fast paths).
                match self.crecv(obj)? {
                    Ok(PKT_IN) => {}
                    r => {
                        let recv = r.map_or_else(|v| v, Value::Instance);
                        return self.call_method(recv, "extract", &[], args, span);
                    }
                }
                {
                    match self.flat_of(chain) {
                        Some((fl, FlatAt::Header(h))) => return self.flat_extract(fl, h),
                        Some(_) => return fail(format!("{span}: extract of a field")),
                        None => {}
                    }
                    if let Some(r) = self.cextract(chain) {
                        if *unions && r.is_ok() {
                            self.union_extracted(chain);
                        }
                        return r;
                    }
                }
                self.call_method(Value::Instance(PKT_IN), "extract", &[], args, span)
            }
            CExpr::Emit {
                obj,
                chains,
                args,
                span,
            } => {
                match self.crecv(obj)? {
                    Ok(PKT_OUT) => {}
                    r => {
                        let recv = r.map_or_else(|v| v, Value::Instance);
                        return self.call_method(recv, "emit", &[], args, span);
                    }
                }
                for (c, a) in chains.iter().zip(args) {
                    // The header where the chain finds it; the walker's
                    // way (name search, or evaluation) when it does not.
                    match c.as_ref().and_then(|c| self.flat_of(c)) {
                        Some((fl, FlatAt::Header(h))) => {
                            self.flat_emit(fl, h);
                            continue;
                        }
                        // A scalar emits nothing (as `emit_into`).
                        Some(_) => continue,
                        None => {}
                    }
                    match c.as_ref().and_then(|c| self.emit_chain(c)) {
                        Some(r) => r?,
                        None => self.emit_arg(a)?,
                    }
                }
                Ok(Value::Void)
            }
            CExpr::Action(a, args) => self.call_action(*a, Some(args), None),
            CExpr::ActionFlat(a, s, args) => {
                // The plain call when the run does not hold the headers
                // flat (a non-PNA program).
                let spec = self.code().and_then(|c| c.specs.get(*s));
                let spec = spec.filter(|_| self.flat.is_some());
                self.call_action_with(*a, Some(args), None, spec)
            }
            CExpr::Func(f, i, args) | CExpr::FuncFlat(f, i, _, args) => {
                let f: &'a FuncDef = f;
                // A specialised call runs its flat body only when this run
                // holds the flat headers (not PSA); otherwise the plain one.
                let spec = match e {
                    CExpr::FuncFlat(_, _, s, _) => self
                        .code()
                        .and_then(|c| c.specs.get(*s))
                        .filter(|_| self.flat.is_some()),
                    _ => None,
                };
                let body = match spec {
                    Some(spec) => Some(spec.body.as_slice()),
                    None => self.code().map(|c| c.functions[*i].as_slice()),
                };
                self.invoke(
                    &f.decl.proto.params,
                    &f.param_tys,
                    args,
                    None,
                    &f.decl.body,
                    body,
                    true,
                    Some(None),
                    spec,
                )
            }
            CExpr::ExternFn {
                name,
                type_args,
                args,
                span,
                cargs,
                port,
            } => match cargs.as_deref() {
                Some([CArg::One(CExpr::Scalar(sc, fb))]) if *port => {
                    // `extern_function`'s `send_to_port`: `arg_used` of
                    // the argument with the walker's steps, as
                    // `carg_bits` (the tier counts the root's `enter`
                    // itself; an `enter` here as well was one step more
                    // than the walker per call, docs/results/p4.md 2v),
                    // without the `Value`.
                    let r = match self.scalar(sc) {
                        Some((v, src)) => {
                            self.suse(sc.e.ty, src);
                            Ok(v)
                        }
                        None => self.ceval(fb).map(|v| {
                            self.use_val(&v);
                            v.as_u128().unwrap_or(0)
                        }),
                    };
                    self.fwd.pna_dest = Some(Some(r? as u32));
                    Ok(Value::Void)
                }
                // In force as for a method's (`CExpr::Method`).
                Some(ca) => {
                    let saved = self.cargs.replace(ca);
                    let r = self.extern_function(name, type_args, args, span);
                    self.cargs = saved;
                    r
                }
                None => self.extern_function(name, type_args, args, span),
            },
            CExpr::Scalar(s, fb) => match self.scalar(s) {
                Some((v, src)) => Ok(s.e.ty.value(v, src)),
                None => self.ceval_inner(fb),
            },
            CExpr::Cast(ty, a, span) => {
                // The walker's `Expr::Cast`.
                let v = self.ceval(a)?;
                if !matches!(v, Value::Struct(..) | Value::Tuple(..) | Value::Header(..)) {
                    self.use_val(&v);
                }
                ops::cast(ty, v).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            CExpr::Slice(a, hi, lo, span) => {
                // The walker's `Expr::Slice` (its bounds' two evaluations
                // counted as steps).
                let v = self.ceval(a)?;
                self.tick()?;
                self.tick()?;
                ops::slice(&v, *hi, *lo).map_err(|m| Ctl::Fail(format!("{span}: {m}")))
            }
            CExpr::AParam(i, ty) => match self.aparam(*i) {
                Some((v, src)) => Ok(ty.value(v, src)),
                None => fail("action parameter not bound"),
            },
            CExpr::Walk(x) => self.eval(x),
        }
    }

    /// [`Run::ceval`] of `e`'s `Value` form (a scalar's fallback).
    fn ceval_value(&mut self, e: &'a CExpr) -> R<Value> {
        match e {
            CExpr::Scalar(_, fb) => self.ceval(fb),
            o => self.ceval(o),
        }
    }

    /// The walker's assignment of `v` (already evaluated) to `lhs`.
    fn cassign(&mut self, lhs: &'a Expr, chain: &'a Option<Chain>, v: Value) -> R<()> {
        // Copying a computed checksum is not a decision on it.
        self.assigning = true;
        self.use_val(&v);
        self.assigning = false;
        if let Some((fl, at)) = chain.as_ref().and_then(|c| self.flat_of(c)) {
            return self.flat_write(fl, at, v, lhs.span());
        }
        if let Some((i, ty)) = chain.as_ref().and_then(|c| c.var) {
            return self.vslot_assign(lhs, i as usize, ty, v);
        }
        if let Some(target) = chain.as_ref().and_then(|c| self.chain_mut(c)) {
            // The walker's `assign` of a plain lvalue.
            let nv =
                coerce_like(target, v).map_err(|m| Ctl::Fail(format!("{}: {m}", lhs.span())))?;
            *target = nv;
            return Ok(());
        }
        self.assign(lhs, v)
    }

    /// Slot `i` of the slot array ([`VSlot`]): its bits and source.
    #[inline]
    pub(crate) fn vslot(&self, i: usize) -> (u128, Src) {
        // `Pool::vslots` is sized at the entry of a block with slots, and
        // only such a block's code names a slot: an index past it is a
        // bug the `(0, None)` below would hide (no panic on packets in
        // release).
        debug_assert!(
            i < self.st.pool.vslots.len(),
            "slot {i} outside the {} slots set at block entries",
            self.st.pool.vslots.len()
        );
        self.st
            .pool
            .vslots
            .get(i)
            .copied()
            .unwrap_or((0, Src::None))
    }

    /// The walker's assignment of `v` to a slotted variable of type `ty`
    /// (its `coerce_like` to the variable's value, the same error when
    /// it fails).
    fn vslot_assign(&mut self, lhs: &Expr, i: usize, ty: STy, v: Value) -> R<()> {
        let (cv, cs) = self.vslot(i);
        let nv = coerce_like(&ty.value(cv, cs), v)
            .map_err(|m| Ctl::Fail(format!("{}: {m}", lhs.span())))?;
        let bits = match (nv, ty) {
            (Value::Bits(b), STy::Bits(w, _)) if b.width == w => (b.v, b.src),
            (Value::Bool(x, s), STy::Bool) => (u128::from(x), s),
            (o, _) => {
                // A frame would now hold another type (the checker lets
                // no such program through).
                return fail(format!(
                    "{}: {} assigned to a variable of another type",
                    lhs.span(),
                    o.type_name()
                ));
            }
        };
        if let Some(x) = self.st.pool.vslots.get_mut(i) {
            *x = bits;
        }
        Ok(())
    }

    /// [`Run::cassign`] of a scalar value of type `ty`: its bits and
    /// source stored where the target already holds that type (what
    /// `coerce_like` keeps), no `Value` built.
    fn cassign_scalar(
        &mut self,
        lhs: &'a Expr,
        chain: &'a Option<Chain>,
        ty: STy,
        v: u128,
        src: Src,
    ) -> R<()> {
        self.assigning = true;
        self.suse(ty, src);
        self.assigning = false;
        if let Some((fl, at)) = chain.as_ref().and_then(|c| self.flat_of(c)) {
            if let FlatAt::Field { h, i, k } = at {
                let (w, _, is_bool) = fl.headers[h].kinds[k];
                let fits = match ty {
                    STy::Bits(sw, _) => !is_bool && sw == w,
                    STy::Bool => is_bool,
                };
                if fits {
                    let st = &mut self.st.pool.flat;
                    st.v[i] = v;
                    st.src[i] = src;
                    return Ok(());
                }
            }
            return self.flat_write(fl, at, ty.value(v, src), lhs.span());
        }
        if let Some((i, vty)) = chain.as_ref().and_then(|c| c.var) {
            let same = match (vty, ty) {
                (STy::Bits(w, _), STy::Bits(x, _)) => w == x,
                (STy::Bool, STy::Bool) => true,
                _ => false,
            };
            if same {
                // What `coerce_like` keeps (bits and source; the
                // variable's signedness is its type's).
                if let Some(x) = self.st.pool.vslots.get_mut(i as usize) {
                    *x = (v, src);
                }
                return Ok(());
            }
            return self.vslot_assign(lhs, i as usize, vty, ty.value(v, src));
        }
        if let Some(target) = chain.as_ref().and_then(|c| self.chain_mut(c)) {
            match (target, ty) {
                (Value::Bits(t), STy::Bits(w, _)) if t.width == w => {
                    t.v = v;
                    t.src = src;
                }
                (Value::Bool(b, s), STy::Bool) => {
                    *b = v != 0;
                    *s = src;
                }
                (target, _) => {
                    let nv = coerce_like(target, ty.value(v, src))
                        .map_err(|m| Ctl::Fail(format!("{}: {m}", lhs.span())))?;
                    *target = nv;
                }
            }
            return Ok(());
        }
        self.assign(lhs, ty.value(v, src))
    }

    /// [`Run::exec`] of a compiled statement.
    pub(crate) fn cexec(&mut self, s: &'a CStmt) -> R<()> {
        self.enter()?;
        let r = self.cexec_inner(s);
        self.depth -= 1;
        r
    }

    /// Runs compiled statements in a new frame when `frame` (they may
    /// bind a name, [`binds`]); in the current one otherwise.
    pub(crate) fn cexec_block(&mut self, b: &'a [CStmt], frame: bool) -> R<()> {
        if !frame {
            return b.iter().try_for_each(|s| self.cexec(s));
        }
        let f = self.new_frame();
        self.frames.push(f);
        let r = b.iter().try_for_each(|s| self.cexec(s));
        self.pop_frame();
        r
    }

    fn cexec_inner(&mut self, s: &'a CStmt) -> R<()> {
        match s {
            CStmt::Assign(lhs, chain, rhs) => {
                if let CExpr::Scalar(s, _) = rhs {
                    if let Some((v, src)) = self.scalar(s) {
                        return self.cassign_scalar(lhs, chain, s.e.ty, v, src);
                    }
                }
                if let Some(r) = self.csum_stmt(rhs) {
                    // `get()`/`get_state()`: a `bit<16>` from the
                    // checksum, assigned as a scalar (`cassign`'s record
                    // and write for that value).
                    return match r? {
                        Value::Bits(b) => self.cassign_scalar(
                            lhs,
                            chain,
                            STy::Bits(b.width, b.signed),
                            b.v,
                            b.src,
                        ),
                        v => self.cassign(lhs, chain, v),
                    };
                }
                let v = self.ceval_value(rhs)?;
                self.cassign(lhs, chain, v)
            }
            CStmt::Call(e) => match self.csum_stmt(e) {
                Some(r) => r.map(Value::discard),
                None => self.ceval(e).map(Value::discard),
            },
            CStmt::If(cond, then, otherwise, span) => {
                if let CExpr::Scalar(s, _) = cond {
                    if s.e.ty == STy::Bool {
                        if let Some((v, src)) = self.scalar(s) {
                            self.suse(STy::Bool, src);
                            return match (v != 0, otherwise) {
                                (true, _) => self.cexec(then),
                                (false, Some(o)) => self.cexec(o),
                                (false, None) => Ok(()),
                            };
                        }
                    }
                }
                let c = self.ceval_value(cond)?;
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
            CStmt::Block(b, frame) => self.cexec_block(b, *frame),
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
            if st.frame {
                let f = self.new_frame();
                self.frames.push(f);
            }
            let r = st.body.iter().try_for_each(|s| self.cexec(s));
            let next = match r {
                Ok(()) => self.ctransition(&st.trans),
                Err(e) => Err(e),
            };
            if st.frame {
                self.pop_frame();
            }
            cur = next?;
        }
    }

    fn ctransition(&mut self, t: &'a CTrans) -> R<&'a Next> {
        match t {
            CTrans::Go(n) => Ok(n),
            CTrans::Select(exprs, cases, sel) => {
                if let Some(r) = sel
                    .as_ref()
                    .and_then(|sel| self.cselect_scalar(exprs, cases, sel))
                {
                    return r;
                }
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

    /// [`Run::cselect`] on scalar keys and literal cases ([`SSelect`]):
    /// the keys as `u128`s, no `Value`s; `None` (the `Value` path then
    /// evaluates the keys again, see [`scalar`]) when the tier cannot
    /// evaluate a key.
    fn cselect_scalar(
        &mut self,
        exprs: &'a [CExpr],
        cases: &'a [CCase],
        sel: &SSelect,
    ) -> Option<R<&'a Next>> {
        let mut keys = [(0u128, Src::None, STy::Bool); SELECT_KEYS];
        for (k, e) in exprs.iter().enumerate() {
            let CExpr::Scalar(s, _) = e else { return None };
            let (v, src) = self.scalar(s)?;
            *keys.get_mut(k)? = (v, src, s.e.ty);
        }
        for &(_, src, ty) in &keys[..exprs.len()] {
            self.suse(ty, src);
        }
        for (c, lits) in cases.iter().zip(&sel.cases) {
            let next = match c {
                CCase::Default(n) | CCase::Keys(_, n) | CCase::Walk(_, n) => n,
            };
            let Some(lits) = lits else {
                return Some(Ok(next));
            };
            let mut all = true;
            for (l, key) in lits.iter().zip(&keys) {
                if let Some(l) = l {
                    // `cselect`'s step per literal compared.
                    if let Err(e) = self.tick() {
                        return Some(Err(e));
                    }
                    if *l != key.0 {
                        all = false;
                        break;
                    }
                }
            }
            if all {
                return Some(Ok(next));
            }
        }
        Some(Err(Ctl::Reject("NoMatch".into())))
    }
}

/// Most select keys [`SSelect`] takes.
const SELECT_KEYS: usize = 4;

/// The [`SSelect`] of a select with compiled keys `keys` and cases
/// `cases`, when every key is a scalar `bit<W>`/`int<W>` and every case a
/// `default` or literals (`_` among them): each literal's value as
/// `cselect` gives it (`lit_bits` in the literal's own type, else the
/// key's).
fn scalar_select(keys: &[CExpr], cases: &[CCase]) -> Option<SSelect> {
    if keys.len() > SELECT_KEYS {
        return None;
    }
    let tys: Vec<(u32, bool)> = keys
        .iter()
        .map(|k| match k {
            CExpr::Scalar(s, _) => match s.e.ty {
                STy::Bits(w, signed) => Some((w, signed)),
                STy::Bool => None,
            },
            _ => None,
        })
        .collect::<Option<_>>()?;
    let cases = cases
        .iter()
        .map(|c| match c {
            CCase::Default(_) => Some(None),
            CCase::Keys(ks, _) if ks.len() == tys.len() => ks
                .iter()
                .zip(&tys)
                .map(|(k, &(w, signed))| match k {
                    CKey::Any => Some(None),
                    CKey::Lit(lit, _) => {
                        let (w, s) = lit.width.unwrap_or((w, signed));
                        Some(Some(lit_bits(lit, w, s)?.v))
                    }
                    CKey::Walk(_) => None,
                })
                .collect::<Option<Vec<_>>>()
                .map(Some),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(SSelect { cases })
}

/// A slice bound the walker's `const_u32` reads: a non-negative literal
/// that fits a `u32`.
fn slice_bound(e: &Expr) -> Option<u32> {
    let Expr::Int(lit, _) = e else { return None };
    let v = match lit.width {
        // A sized literal is its value in its width (`lit_bits`).
        Some((w, false)) => lit_bits(lit, w, false)?.v,
        Some((_, true)) => return None,
        None if !lit.negative => lit_bits(lit, 128, false)?.v,
        None => return None,
    };
    u32::try_from(v).ok()
}
