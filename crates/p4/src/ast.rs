//! The syntax tree of a P4-16 program, as the [`crate::front`] parser builds
//! it and [`crate::interp::check`] consumes it.
//!
//! It follows the P4-16 grammar (spec §17 / appendix "P4 grammar") closely
//! and resolves nothing: names are strings, widths are expressions, generic
//! types keep their arguments. Every node that can be refused later carries
//! a [`Span`] so that the refusal names the file and line.

use num_bigint::BigUint;
use std::fmt;
use std::sync::Arc;

/// Where a construct starts: the file as the preprocessor saw it (after
/// `#include`) and the 1-based line and column in that file.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub file: Arc<str>,
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An identifier with its position.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// `@name` or `@name(...)` / `@name[...]`. `args` holds the body parsed as
/// comma-separated expressions when it parses as such (`@name("x")`,
/// `@priority(10)`); `raw` always holds the body's text (unparsed
/// annotations such as `@pragma` keep only `raw`).
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    pub name: String,
    pub args: Vec<Expr>,
    pub raw: String,
    pub span: Span,
}

/// A whole program: the declarations of every included file, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub decls: Vec<Decl>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decl {
    /// `const T name = value;`
    Const(ConstDecl),
    /// `typedef T name;` or `type T name;` (`new_type` true).
    Typedef {
        annotations: Vec<Annotation>,
        ty: Type,
        name: Ident,
        new_type: bool,
        span: Span,
    },
    /// `header`, `header_union` or `struct`.
    Aggregate(AggregateDecl),
    /// `enum [bit<W>] Name { A [= v], ... }`.
    Enum {
        annotations: Vec<Annotation>,
        name: Ident,
        /// `Some` for a serializable enum (`enum bit<8> E { ... }`).
        underlying: Option<Type>,
        members: Vec<(Ident, Option<Expr>)>,
        span: Span,
    },
    /// `error { A, B }` (several declarations add up).
    Error {
        members: Vec<Ident>,
        span: Span,
    },
    /// `match_kind { exact, ternary }`.
    MatchKind {
        members: Vec<Ident>,
        span: Span,
    },
    /// `extern R f<T>(...);` (a function without body).
    ExternFunction(FunctionProto),
    /// `extern Name<T> { Name(...); R m(...); abstract R n(...); }`.
    Extern(ExternDecl),
    /// `parser Name<T>(params);` — a parser type (in architecture files).
    ParserType(TypeProto),
    /// `control Name<T>(params);` — a control type.
    ControlType(TypeProto),
    /// `package Name<T>(params);`
    Package(TypeProto),
    Parser(ParserDecl),
    Control(ControlDecl),
    /// A top-level `action` (e.g. core.p4's `NoAction`).
    Action(ActionDecl),
    /// `R name<T>(params) { body }`.
    Function(FunctionDecl),
    /// `Type(args) name;` at top level — `main` is one.
    Instantiation(Instantiation),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ConstDecl {
    pub annotations: Vec<Annotation>,
    pub ty: Type,
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AggregateKind {
    Header,
    HeaderUnion,
    Struct,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AggregateDecl {
    pub kind: AggregateKind,
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    /// `struct S<T> { ... }` type parameters (rare; psa.p4 uses none).
    pub type_params: Vec<Ident>,
    pub fields: Vec<FieldDecl>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FieldDecl {
    pub annotations: Vec<Annotation>,
    pub ty: Type,
    pub name: Ident,
}

/// A type as written.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    /// `bit<W>`; `bit` alone is `bit<1>`. `W` may be an expression
    /// (`bit<(W+1)>`) or a type parameter's name.
    Bit(Box<Expr>),
    /// `int<W>`.
    Int(Box<Expr>),
    /// `int` without width (compile-time integer).
    InfInt,
    /// `varbit<W>`.
    Varbit(Box<Expr>),
    Bool,
    Error,
    String,
    Void,
    /// `match_kind`.
    MatchKind,
    /// `_` (don't-care type argument).
    DontCare,
    /// A name, with type arguments if any: `ipv4_t`, `Counter<bit<32>, bit<8>>`,
    /// `.ipv4_t` (leading dot dropped), `packet_in`.
    Named {
        name: Ident,
        args: Vec<Type>,
    },
    /// `T[N]` header stack / array.
    Stack {
        elem: Box<Type>,
        size: Box<Expr>,
    },
    /// `tuple<A, B>`.
    Tuple(Vec<Type>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Direction {
    /// No direction: a compile-time / constructor value.
    #[default]
    None,
    In,
    Out,
    InOut,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub annotations: Vec<Annotation>,
    pub direction: Direction,
    pub ty: Type,
    pub name: Ident,
    /// `= value` (optional parameters with defaults).
    pub default: Option<Expr>,
}

/// The signature shared by functions, methods, parser/control/package types.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionProto {
    pub annotations: Vec<Annotation>,
    /// `None` for constructors.
    pub ret: Option<Type>,
    pub name: Ident,
    pub type_params: Vec<Ident>,
    pub params: Vec<Param>,
    /// `abstract` methods (PSA/PNA externs the program implements).
    pub is_abstract: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ExternDecl {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub type_params: Vec<Ident>,
    /// Constructors have `ret: None` and the extern's own name.
    pub methods: Vec<FunctionProto>,
    pub span: Span,
}

/// `parser P<T>(params);`, `control C(params);`, `package Pkg<T>(params);`
#[derive(Clone, Debug, PartialEq)]
pub struct TypeProto {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub type_params: Vec<Ident>,
    pub params: Vec<Param>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParserDecl {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub type_params: Vec<Ident>,
    pub params: Vec<Param>,
    /// Constructor parameters: `parser P(...)(bit<8> n) {`.
    pub ctor_params: Vec<Param>,
    /// Variables, constants and instantiations before the states.
    pub locals: Vec<LocalDecl>,
    pub states: Vec<ParserState>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParserState {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub body: Vec<Stmt>,
    /// `None`: no `transition` statement (means `transition reject`).
    pub transition: Option<Transition>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// `transition name;` (including `accept` and `reject`).
    Direct(Ident),
    /// `transition select(e1, e2) { keyset: state; ... }`.
    Select {
        exprs: Vec<Expr>,
        cases: Vec<SelectCase>,
        span: Span,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct SelectCase {
    /// One keyset per select expression; a tuple `(a, b)` is split into
    /// its elements; `default` and `_` are [`Expr::Default`] /
    /// [`Expr::DontCare`]; masks and ranges are [`Expr::Mask`] /
    /// [`Expr::Range`]; a single `default` for a multi-expression select
    /// is one [`Expr::Default`].
    pub keysets: Vec<Expr>,
    pub next: Ident,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ControlDecl {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub type_params: Vec<Ident>,
    pub params: Vec<Param>,
    pub ctor_params: Vec<Param>,
    pub locals: Vec<LocalDecl>,
    pub apply: Block,
    pub span: Span,
}

/// Declarations inside a parser or control, before its body.
#[derive(Clone, Debug, PartialEq)]
pub enum LocalDecl {
    Const(ConstDecl),
    Var(VarDecl),
    Instantiation(Instantiation),
    Action(ActionDecl),
    Table(TableDecl),
    /// Functions are allowed inside controls by some programs' compilers;
    /// kept so [`crate::interp::check`] can refuse or accept them.
    Function(FunctionDecl),
}

#[derive(Clone, Debug, PartialEq)]
pub struct VarDecl {
    pub annotations: Vec<Annotation>,
    pub ty: Type,
    pub name: Ident,
    pub init: Option<Expr>,
    pub span: Span,
}

/// `Type(args) name;` or `Type(args) name = { ...abstract method bodies... };`
#[derive(Clone, Debug, PartialEq)]
pub struct Instantiation {
    pub annotations: Vec<Annotation>,
    pub ty: Type,
    pub args: Vec<Arg>,
    pub name: Ident,
    /// Bodies of abstract methods given at instantiation (PSA/PNA
    /// `Register` with `apply`, etc.).
    pub initializer: Vec<FunctionDecl>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ActionDecl {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub params: Vec<Param>,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FunctionDecl {
    pub proto: FunctionProto,
    pub body: Block,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TableDecl {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub props: Vec<TableProperty>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TableProperty {
    Key(Vec<KeyElement>),
    Actions(Vec<ActionRef>),
    /// `[const] default_action = a(args);` (the call is an
    /// [`Expr::Call`] or a bare [`Expr::Path`]).
    DefaultAction {
        action: Expr,
        is_const: bool,
        span: Span,
    },
    /// `[const] entries = { ... }`.
    Entries {
        entries: Vec<TableEntry>,
        is_const: bool,
        span: Span,
    },
    /// Any other `[const] name = expr;` — `size`, `add_on_miss`,
    /// `pna_idle_timeout`, `implementation`, `counters`, `meters`,
    /// `psa_direct_counter`, `idle_timeout_with_auto_delete`, ...
    Other {
        annotations: Vec<Annotation>,
        name: Ident,
        value: Expr,
        is_const: bool,
        span: Span,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct KeyElement {
    pub expr: Expr,
    pub match_kind: Ident,
    pub annotations: Vec<Annotation>,
    pub span: Span,
}

/// An entry of a table's `actions` list: a name, possibly with some
/// arguments bound (`a(1)`), with annotations (`@defaultonly`).
#[derive(Clone, Debug, PartialEq)]
pub struct ActionRef {
    pub annotations: Vec<Annotation>,
    pub name: Ident,
    pub args: Vec<Arg>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TableEntry {
    pub annotations: Vec<Annotation>,
    /// `priority = N :` (P4-16 1.2.4) when given.
    pub priority: Option<Expr>,
    /// One keyset expression per key element (a tuple is split; a single
    /// key may be written without parentheses).
    pub keysets: Vec<Expr>,
    /// The action call (or bare name).
    pub action: Expr,
    pub is_const: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Assign {
        lhs: Expr,
        rhs: Expr,
        span: Span,
    },
    /// A call used as a statement: `t.apply();`, `pkt.extract(h);`,
    /// `f(x);`, `h.setValid();`.
    Call(Expr),
    If {
        cond: Expr,
        then: Box<Stmt>,
        otherwise: Option<Box<Stmt>>,
        span: Span,
    },
    Block(Block),
    /// `switch (t.apply().action_run) { a: { } b: c: { } default: { } }`
    /// or a switch on a value.
    Switch {
        expr: Expr,
        cases: Vec<SwitchCase>,
        span: Span,
    },
    Exit(Span),
    Return(Option<Expr>, Span),
    Var(VarDecl),
    Const(ConstDecl),
    /// An instantiation inside a block (not allowed in P4-16 bodies, but
    /// kept for a clear error).
    Instantiation(Instantiation),
    Empty(Span),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SwitchCase {
    /// An action name / constant expression, or [`Expr::Default`].
    pub label: Expr,
    /// `None`: falls through to the next case's body (`a: b: { ... }`).
    pub body: Option<Block>,
    pub span: Span,
}

/// An argument: positional or `name = value`; `_` is [`Expr::DontCare`].
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `!`
    Not,
    /// `~`
    BitNot,
    /// `-`
    Neg,
    /// `+` (no-op)
    Plus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Mul,
    Div,
    Mod,
    Add,
    Sub,
    /// `|+|`
    AddSat,
    /// `|-|`
    SubSat,
    Shl,
    Shr,
    Le,
    Ge,
    Lt,
    Gt,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    /// `++` concatenation
    Concat,
    And,
    Or,
}

/// An integer literal as written: `5`, `0x0800`, `16w0x800`, `8s5`,
/// `0b101`, `0o17`. `width` is `Some((W, signed))` for `Ww`/`Ws` literals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntLit {
    pub value: BigUint,
    pub negative: bool,
    pub width: Option<(u32, bool)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Int(IntLit, Span),
    Bool(bool, Span),
    Str(String, Span),
    /// A name (possibly with a leading `.` dropped): variable, constant,
    /// header, action, table, `error`, an enum type, `accept`, ...
    Path(Ident),
    /// `e.name` — fields, methods, `error.X`, `Enum.X`, `hdr.stack.next`,
    /// `t.apply().hit`.
    Member(Box<Expr>, Ident),
    /// `e[i]` (header stacks, tuples).
    Index(Box<Expr>, Box<Expr>, Span),
    /// `e[hi:lo]`.
    Slice {
        expr: Box<Expr>,
        hi: Box<Expr>,
        lo: Box<Expr>,
        span: Span,
    },
    /// `f<T>(args)`, `e.m(args)`.
    Call {
        func: Box<Expr>,
        type_args: Vec<Type>,
        args: Vec<Arg>,
        span: Span,
    },
    Unary(UnOp, Box<Expr>, Span),
    Binary(BinOp, Box<Expr>, Box<Expr>, Span),
    /// `c ? a : b`
    Ternary(Box<Expr>, Box<Expr>, Box<Expr>, Span),
    /// `(T) e`
    Cast(Type, Box<Expr>, Span),
    /// `{ a, b, c }` (list / tuple / header initializer by position).
    List(Vec<Expr>, Span),
    /// `{ f = a, g = b }` (struct-valued expression).
    StructInit(Vec<(Ident, Expr)>, Span),
    /// `T { f = a }`: a typed struct initializer (`(T) { ... }` is a
    /// [`Expr::Cast`] of a [`Expr::StructInit`]).
    /// `a &&& b` (keyset mask).
    Mask(Box<Expr>, Box<Expr>, Span),
    /// `a .. b` (keyset range).
    Range(Box<Expr>, Box<Expr>, Span),
    /// `default` in keysets and switch labels.
    Default(Span),
    /// `_`
    DontCare(Span),
    /// `T.minSizeInBits()`-style or `error.X` where the receiver is a type
    /// with arguments (`bit<8>`): rare; a named type receiver is a Path.
    TypeRef(Type, Span),
}

impl Expr {
    /// Where the expression starts.
    pub fn span(&self) -> &Span {
        match self {
            Expr::Int(_, s)
            | Expr::Bool(_, s)
            | Expr::Str(_, s)
            | Expr::Index(_, _, s)
            | Expr::Slice { span: s, .. }
            | Expr::Call { span: s, .. }
            | Expr::Unary(_, _, s)
            | Expr::Binary(_, _, _, s)
            | Expr::Ternary(_, _, _, s)
            | Expr::Cast(_, _, s)
            | Expr::List(_, s)
            | Expr::StructInit(_, s)
            | Expr::Mask(_, _, s)
            | Expr::Range(_, _, s)
            | Expr::Default(s)
            | Expr::DontCare(s)
            | Expr::TypeRef(_, s) => s,
            Expr::Path(i) | Expr::Member(_, i) => &i.span,
        }
    }
}
