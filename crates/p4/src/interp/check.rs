//! Name, type and width resolution: turns the [`crate::ast::Program`] the
//! frontend read into the executable program the interpreter runs —
//! types resolved to widths, constants evaluated, the `main` package
//! instantiation unfolded into its parser/control blocks, tables and
//! extern instances numbered. Anything the interpreter cannot run is
//! refused here with `FILE:LINE:COL: unsupported: <construct>`.

use crate::ast::Span;
use thiserror::Error;

/// Why a program could not be loaded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum P4Error {
    /// The frontend refused the source (its message, with file:line).
    #[error("{0}")]
    Front(String),
    /// A construct the interpreter does not run.
    #[error("{span}: unsupported: {what}")]
    Unsupported { span: Span, what: String },
    /// A name, type or width error in the program.
    #[error("{span}: {msg}")]
    Check { span: Span, msg: String },
    /// No `main`, or a package the chosen architecture does not know.
    #[error("{0}")]
    Arch(String),
}

pub(crate) fn unsupported<T>(span: &Span, what: impl Into<String>) -> Result<T, P4Error> {
    Err(P4Error::Unsupported {
        span: span.clone(),
        what: what.into(),
    })
}

pub(crate) fn check_err<T>(span: &Span, msg: impl Into<String>) -> Result<T, P4Error> {
    Err(P4Error::Check {
        span: span.clone(),
        msg: msg.into(),
    })
}

use crate::ast::{self, AggregateKind, Expr, Type};
use crate::runtime::{ActionInfo, MatchKind, ParamInfo, TableInfo};
use crate::value::FastMap as HashMap;
use crate::value::{big_to_u128, Bits, Src, Value, MAX_WIDTH};
use num_bigint::BigInt;
use std::sync::Arc;

/// A resolved type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ty {
    Bits(u32, bool),
    Varbit(u32),
    Bool,
    Int,
    Error,
    Str,
    Void,
    MatchKind,
    Header(Arc<Agg>),
    /// Struct or header union.
    Struct(Arc<Agg>),
    Stack(Box<Ty>, usize),
    /// Non-serializable enum: name and first member (the value a fresh
    /// variable holds).
    Enum(Arc<str>, Arc<str>),
    Tuple(Vec<Ty>),
    /// Extern, parser, control, package, `packet_in`/`packet_out`, or a
    /// type parameter.
    Named(String),
}

#[derive(Debug, PartialEq)]
pub(crate) struct Agg {
    pub name: Arc<str>,
    pub kind: AggregateKind,
    pub fields: Vec<(String, Ty)>,
    pub names: Arc<[String]>,
    /// v1model `@field_list(N, ...)` ids per field (preserved metadata
    /// across resubmit/recirculate/clone).
    pub field_lists: Vec<Vec<u64>>,
}

impl Ty {
    /// The value a fresh variable / `out` parameter of this type holds.
    pub fn default_value(&self) -> Value {
        match self {
            Ty::Bits(w, s) => Value::Bits(Bits::new(*w, *s, 0)),
            Ty::Varbit(m) => Value::Varbit(Box::new(crate::value::VarbitVal {
                max: *m,
                len: 0,
                bytes: Vec::new(),
                src: Src::None,
            })),
            Ty::Bool => Value::Bool(false, Src::None),
            Ty::Int => Value::Int(BigInt::from(0)),
            Ty::Error => Value::Error(crate::value::no_error(), Src::None),
            Ty::Str => Value::Str(Arc::from("")),
            Ty::Header(a) => Value::Header(Box::new(crate::value::HeaderVal {
                ty: a.name.clone(),
                valid: false,
                fields: a.fields.iter().map(|(_, t)| t.default_value()).collect(),
                names: a.names.clone(),
            })),
            Ty::Struct(a) => Value::Struct(
                a.name.clone(),
                a.names.clone(),
                a.fields.iter().map(|(_, t)| t.default_value()).collect(),
            ),
            Ty::Stack(e, n) => Value::Stack(Box::new(crate::value::StackVal {
                elems: (0..*n).map(|_| e.default_value()).collect(),
                next: 0,
            })),
            Ty::Enum(n, first) => Value::Enum(n.clone(), first.clone()),
            Ty::Tuple(ts) => Value::Tuple(ts.iter().map(Ty::default_value).collect()),
            Ty::Void | Ty::MatchKind | Ty::Named(_) => Value::Void,
        }
    }

    /// Makes `v` equal to [`Ty::default_value`] in place, keeping its
    /// allocations where its shape is already this type's (the headers
    /// and metadata a pipeline reuses from packet to packet).
    pub fn reset_value(&self, v: &mut Value) {
        match (self, &mut *v) {
            (Ty::Bits(w, s), Value::Bits(b)) => *b = Bits::new(*w, *s, 0),
            (Ty::Bool, Value::Bool(b, s)) => {
                *b = false;
                *s = Src::None;
            }
            (Ty::Varbit(m), Value::Varbit(vb)) => {
                vb.max = *m;
                vb.len = 0;
                vb.bytes.clear();
                vb.src = Src::None;
            }
            (Ty::Header(a), Value::Header(h)) if h.fields.len() == a.fields.len() => {
                if !Arc::ptr_eq(&h.ty, &a.name) {
                    h.ty = a.name.clone();
                }
                if !Arc::ptr_eq(&h.names, &a.names) {
                    h.names = a.names.clone();
                }
                h.valid = false;
                for ((_, t), f) in a.fields.iter().zip(h.fields.iter_mut()) {
                    t.reset_value(f);
                }
            }
            (Ty::Struct(a), Value::Struct(n, names, fs)) if fs.len() == a.fields.len() => {
                if !Arc::ptr_eq(n, &a.name) {
                    *n = a.name.clone();
                }
                if !Arc::ptr_eq(names, &a.names) {
                    *names = a.names.clone();
                }
                for ((_, t), f) in a.fields.iter().zip(fs.iter_mut()) {
                    t.reset_value(f);
                }
            }
            (Ty::Stack(e, n), Value::Stack(st)) if st.elems.len() == *n => {
                st.next = 0;
                for x in st.elems.iter_mut() {
                    e.reset_value(x);
                }
            }
            (Ty::Tuple(ts), Value::Tuple(xs)) if xs.len() == ts.len() => {
                for (t, x) in ts.iter().zip(xs.iter_mut()) {
                    t.reset_value(x);
                }
            }
            (Ty::Enum(n, first), Value::Enum(vn, vm)) => {
                if **vn != **n {
                    *vn = n.clone();
                }
                if **vm != **first {
                    *vm = first.clone();
                }
            }
            _ => *v = self.default_value(),
        }
    }

    pub fn width(&self) -> u32 {
        match self {
            Ty::Bits(w, _) => *w,
            Ty::Bool => 1,
            Ty::Header(a) | Ty::Struct(a) => a.fields.iter().map(|(_, t)| t.width()).sum(),
            _ => 0,
        }
    }
}

pub(crate) struct EnumDef {
    /// `Some((W, signed))` for serializable enums.
    pub underlying: Option<(u32, bool)>,
    pub members: Vec<(String, u128)>,
}

/// Top-level declarations by name.
#[derive(Default)]
pub(crate) struct Globals {
    pub typedefs: HashMap<String, Type>,
    pub agg_decls: HashMap<String, ast::AggregateDecl>,
    pub aggs: HashMap<String, Arc<Agg>>,
    pub enums: HashMap<String, EnumDef>,
    pub errors: Vec<String>,
    pub consts: HashMap<String, Value>,
    pub actions: HashMap<String, usize>,
    pub functions: HashMap<String, Arc<FuncDef>>,
    pub extern_fns: HashMap<String, ast::FunctionProto>,
    pub externs: HashMap<String, ast::ExternDecl>,
    pub parsers: HashMap<String, Arc<ast::ParserDecl>>,
    pub controls: HashMap<String, Arc<ast::ControlDecl>>,
    pub packages: HashMap<String, ast::TypeProto>,
    pending_enums: HashMap<String, PendingEnum>,
}

pub(crate) struct FuncDef {
    pub decl: ast::FunctionDecl,
    pub param_tys: Vec<Ty>,
}

pub(crate) struct ActionDef {
    pub qname: String,
    pub decl: Arc<ast::ActionDecl>,
    /// The control it is declared in (None: top level).
    pub block: Option<usize>,
    pub param_tys: Vec<Ty>,
    pub info: ActionInfo,
}

#[derive(Clone, Debug)]
pub(crate) enum Local {
    Action(usize),
    Table(usize),
    Extern(usize),
    Block(usize),
    Const(Value),
}

pub(crate) enum BlockKind {
    Parser(Arc<ast::ParserDecl>),
    Control(Arc<ast::ControlDecl>),
}

pub(crate) struct Block {
    pub qname: String,
    pub kind: BlockKind,
    pub locals: HashMap<String, Local>,
    pub param_tys: Vec<Ty>,
    /// Local variables in order with their types.
    pub vars: Vec<(ast::VarDecl, Ty)>,
    /// Parser states by name.
    pub states: HashMap<String, usize>,
}

impl Block {
    pub fn params(&self) -> &[ast::Param] {
        match &self.kind {
            BlockKind::Parser(p) => &p.params,
            BlockKind::Control(c) => &c.params,
        }
    }
}

/// A key element compiled.
pub(crate) struct KeyDef {
    pub expr: Expr,
    pub kind: MatchKind,
    pub width: u32,
}

/// An action in a table's `actions` list.
pub(crate) struct TableAction {
    pub action: usize,
    /// Arguments bound in the actions list (`a(hdr.x)`) for the
    /// directional parameters.
    pub bound: Vec<ast::Arg>,
}

/// A compiled table entry match element (values in the key's width).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Km {
    /// Value and mask (exact: all ones; lpm: prefix mask; ternary;
    /// optional; wildcard: mask 0).
    Masked(u128, u128),
    Range(u128, u128),
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub id: u64,
    pub keys: Vec<Km>,
    pub action: usize,
    pub args: Vec<Value>,
    /// Larger wins.
    pub prio: i64,
    pub is_const: bool,
    pub spec: crate::runtime::EntrySpec,
    pub packets: u64,
    pub bytes: u64,
    pub last_hit: Option<u64>,
}

pub(crate) struct TableDef {
    pub info: TableInfo,
    /// `info.name`, shared with every trace that records an apply.
    pub qname: std::sync::Arc<str>,
    pub keys: Vec<KeyDef>,
    pub actions: Vec<TableAction>,
    pub default_action: usize,
    pub default_args: Vec<Value>,
    pub const_entries: Vec<Entry>,
    pub direct_counter: Option<usize>,
    pub direct_meter: Option<usize>,
}

/// An extern instance.
pub(crate) struct ExternDef {
    pub qname: String,
    pub ty: String,
    pub args: Vec<Value>,
    /// Width of the register's cell type / hash output etc.
    pub elem_ty: Option<Ty>,
}

/// The checked, instantiated program.
pub(crate) struct Prog {
    pub g: Globals,
    pub actions: Vec<ActionDef>,
    pub blocks: Vec<Block>,
    pub tables: Vec<TableDef>,
    pub externs: Vec<ExternDef>,
    /// Top-level blocks of `main`, in package parameter order (nested
    /// packages flattened), with the package parameter names.
    pub main_blocks: Vec<(String, usize)>,
    pub package: String,
    pub package_arity: usize,
    /// Top-level instantiations used as package arguments.
    pub used_top: Vec<String>,
    /// Controls/parsers without constructor parameters, for direct
    /// invocation (`C.apply(...)` without instantiation).
    pub direct_blocks: HashMap<String, usize>,
    /// The bodies compiled at load for the data path
    /// (`crate::interp::fast`); `None` while the program is being
    /// checked.
    pub fast: Option<crate::interp::fast::Code>,
}

fn span_of_type(t: &Type) -> Option<Span> {
    match t {
        Type::Bit(e) | Type::Int(e) | Type::Varbit(e) => Some(e.span().clone()),
        Type::Named { name, .. } => Some(name.span.clone()),
        Type::Stack { elem, .. } => span_of_type(elem),
        _ => None,
    }
}

impl Prog {
    /// Is the type named `name` a `header_union`?
    pub(crate) fn is_header_union(&self, name: &str) -> bool {
        self.g
            .aggs
            .get(name)
            .is_some_and(|a| a.kind == AggregateKind::HeaderUnion)
    }

    /// Does the program declare a `header_union`?
    pub(crate) fn has_header_unions(&self) -> bool {
        self.g
            .aggs
            .values()
            .any(|a| a.kind == AggregateKind::HeaderUnion)
    }

    /// Resolves a type with block-local constants in `locals`.
    pub fn resolve_type(
        &self,
        t: &Type,
        locals: Option<&HashMap<String, Local>>,
    ) -> Result<Ty, P4Error> {
        resolve_type(&self.g, t, locals, 0)
    }
}

pub(crate) fn resolve_type(
    g: &Globals,
    t: &Type,
    locals: Option<&HashMap<String, Local>>,
    depth: u32,
) -> Result<Ty, P4Error> {
    let span = span_of_type(t).unwrap_or_default();
    if depth > 64 {
        return check_err(&span, "type definitions nest too deep (cycle?)");
    }
    let width = |e: &Expr| -> Result<u32, P4Error> {
        let v = const_eval(g, e, locals)?;
        match v.as_u128() {
            Some(w) if w as u32 <= MAX_WIDTH => Ok(w as u32),
            Some(w) => unsupported(
                e.span(),
                format!("width {w} (widest supported: {MAX_WIDTH} bits)"),
            ),
            None => check_err(e.span(), "width is not a compile-time integer"),
        }
    };
    Ok(match t {
        Type::Bit(e) => Ty::Bits(width(e)?, false),
        Type::Int(e) => Ty::Bits(width(e)?, true),
        Type::InfInt => Ty::Int,
        Type::Varbit(e) => {
            let v = const_eval(g, e, locals)?;
            match v.as_u128() {
                Some(w) if w <= 65536 => Ty::Varbit(w as u32),
                _ => {
                    return check_err(e.span(), "varbit width is not a small compile-time integer")
                }
            }
        }
        Type::Bool => Ty::Bool,
        Type::Error => Ty::Error,
        Type::String => Ty::Str,
        Type::Void => Ty::Void,
        Type::MatchKind => Ty::MatchKind,
        Type::DontCare => Ty::Named("_".into()),
        Type::Tuple(ts) => Ty::Tuple(
            ts.iter()
                .map(|t| resolve_type(g, t, locals, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Type::Stack { elem, size } => {
            let e = resolve_type(g, elem, locals, depth + 1)?;
            let n = const_eval(g, size, locals)?
                .as_u128()
                .filter(|n| *n <= 4096)
                .ok_or_else(|| P4Error::Check {
                    span: size.span().clone(),
                    msg: "stack size is not a small compile-time integer".into(),
                })?;
            Ty::Stack(Box::new(e), n as usize)
        }
        Type::Named { name, .. } => {
            let n = name.name.as_str();
            if let Some(td) = g.typedefs.get(n) {
                return resolve_type(g, td, locals, depth + 1);
            }
            if let Some(a) = g.aggs.get(n) {
                return Ok(match a.kind {
                    AggregateKind::Header => Ty::Header(a.clone()),
                    _ => Ty::Struct(a.clone()),
                });
            }
            if let Some(e) = g.enums.get(n) {
                return Ok(match e.underlying {
                    Some((w, s)) => Ty::Bits(w, s),
                    None => Ty::Enum(
                        Arc::from(n),
                        Arc::from(e.members.first().map(|m| m.0.as_str()).unwrap_or("")),
                    ),
                });
            }
            Ty::Named(n.to_string())
        }
    })
}

/// Evaluates a compile-time expression (widths, constants, entry keys).
pub(crate) fn const_eval(
    g: &Globals,
    e: &Expr,
    locals: Option<&HashMap<String, Local>>,
) -> Result<Value, P4Error> {
    let sp = e.span();
    match e {
        Expr::Int(lit, _) => Ok(int_lit(lit)),
        Expr::Bool(b, _) => Ok(Value::Bool(*b, Src::None)),
        Expr::Str(s, _) => Ok(Value::Str(Arc::from(s.as_str()))),
        Expr::Path(id) => {
            if let Some(Local::Const(v)) = locals.and_then(|l| l.get(&id.name)) {
                return Ok(v.clone());
            }
            if let Some(v) = g.consts.get(&id.name) {
                return Ok(v.clone());
            }
            check_err(sp, format!("{} is not a compile-time constant", id.name))
        }
        Expr::Member(base, m) => {
            if let Expr::Path(ty) = &**base {
                if ty.name == "error" {
                    return Ok(Value::Error(Arc::from(m.name.as_str()), Src::None));
                }
                if let Some(en) = g.enums.get(&ty.name) {
                    return enum_member(&ty.name, en, &m.name, sp);
                }
            }
            check_err(sp, "not a compile-time constant")
        }
        Expr::Unary(op, a, _) => {
            let a = const_eval(g, a, locals)?;
            crate::interp::ops::unop(*op, a).map_err(|m| P4Error::Check {
                span: sp.clone(),
                msg: m,
            })
        }
        Expr::Binary(op, a, b, _) => {
            let a = const_eval(g, a, locals)?;
            let b = const_eval(g, b, locals)?;
            crate::interp::ops::binop(*op, a, b).map_err(|m| P4Error::Check {
                span: sp.clone(),
                msg: m,
            })
        }
        Expr::Cast(t, a, _) => {
            let ty = resolve_type(g, t, locals, 0)?;
            let a = const_eval(g, a, locals)?;
            crate::interp::ops::cast(&ty, a).map_err(|m| P4Error::Check {
                span: sp.clone(),
                msg: m,
            })
        }
        Expr::Ternary(c, a, b, _) => match const_eval(g, c, locals)? {
            Value::Bool(true, _) => const_eval(g, a, locals),
            Value::Bool(false, _) => const_eval(g, b, locals),
            _ => check_err(sp, "condition is not a boolean"),
        },
        Expr::List(items, _) => Ok(Value::Tuple(
            items
                .iter()
                .map(|i| const_eval(g, i, locals))
                .collect::<Result<_, _>>()?,
        )),
        Expr::Slice { expr, hi, lo, .. } => {
            let v = const_eval(g, expr, locals)?;
            let hi = const_eval(g, hi, locals)?.as_u128().unwrap_or(0) as u32;
            let lo = const_eval(g, lo, locals)?.as_u128().unwrap_or(0) as u32;
            crate::interp::ops::slice(&v, hi, lo).map_err(|m| P4Error::Check {
                span: sp.clone(),
                msg: m,
            })
        }
        _ => check_err(sp, "not a compile-time constant"),
    }
}

pub(crate) fn enum_member(ty: &str, en: &EnumDef, m: &str, sp: &Span) -> Result<Value, P4Error> {
    match en.members.iter().find(|(n, _)| n == m) {
        Some((_, v)) => Ok(match en.underlying {
            Some((w, s)) => Value::Bits(Bits::new(w, s, *v)),
            None => Value::Enum(Arc::from(ty), Arc::from(m)),
        }),
        None => check_err(sp, format!("{ty} has no member {m}")),
    }
}

pub(crate) fn int_lit(lit: &ast::IntLit) -> Value {
    let mut v = BigInt::from(lit.value.clone());
    if lit.negative {
        v = -v;
    }
    match lit.width {
        Some((w, s)) if w <= MAX_WIDTH => Value::Bits(Bits::from_bigint(w, s, &v)),
        _ => Value::Int(v),
    }
}

fn ann<'a>(anns: &'a [ast::Annotation], name: &str) -> Option<&'a ast::Annotation> {
    anns.iter().find(|a| a.name == name)
}

fn ann_str(anns: &[ast::Annotation], name: &str) -> Option<String> {
    let a = ann(anns, name)?;
    match a.args.first() {
        Some(Expr::Str(s, _)) => Some(s.clone()),
        _ => Some(a.raw.trim().trim_matches('"').to_string()),
    }
}

/// Text of a key expression as written (`hdr.ip.dstAddr`).
pub(crate) fn expr_text(e: &Expr) -> String {
    match e {
        Expr::Path(i) => i.name.clone(),
        Expr::Member(b, m) => format!("{}.{}", expr_text(b), m.name),
        Expr::Index(b, i, _) => format!("{}[{}]", expr_text(b), expr_text(i)),
        Expr::Slice { expr, hi, lo, .. } => {
            format!("{}[{}:{}]", expr_text(expr), expr_text(hi), expr_text(lo))
        }
        Expr::Int(l, _) => l.value.to_string(),
        Expr::Call { func, .. } => format!("{}()", expr_text(func)),
        _ => "<expr>".into(),
    }
}

/// Builds the executable program.
pub(crate) fn check(program: ast::Program) -> Result<Prog, P4Error> {
    let mut g = Globals::default();
    let mut top_actions: Vec<ast::ActionDecl> = Vec::new();
    let mut main: Option<ast::Instantiation> = None;
    let mut top_insts: HashMap<String, ast::Instantiation> = HashMap::default();
    let mut functions = Vec::new();
    let mut consts = Vec::new();
    g.errors = vec![
        "NoError".into(),
        "PacketTooShort".into(),
        "NoMatch".into(),
        "StackOutOfBounds".into(),
        "HeaderTooShort".into(),
        "ParserTimeout".into(),
        "ParserInvalidArgument".into(),
    ];
    // Pass 1: names. Consts and enums are evaluated in order (a const may
    // use an earlier one).
    for d in program.decls {
        match d {
            ast::Decl::Const(c) => consts.push(c),
            ast::Decl::Typedef { ty, name, .. } => {
                g.typedefs.insert(name.name, ty);
            }
            ast::Decl::Aggregate(a) => {
                g.agg_decls.insert(a.name.name.clone(), a);
            }
            ast::Decl::Enum {
                name,
                underlying,
                members,
                span,
                ..
            } => {
                consts.push(ast::ConstDecl {
                    annotations: vec![],
                    ty: Type::Void,
                    name: ast::Ident {
                        name: format!("\0enum {}", name.name),
                        span: span.clone(),
                    },
                    value: Expr::Default(span.clone()),
                    span: span.clone(),
                });
                g.enums.insert(
                    name.name.clone(),
                    EnumDef {
                        underlying: None,
                        members: members.iter().map(|(m, _)| (m.name.clone(), 0)).collect(),
                    },
                );
                // Underlying type and values resolved below, in order.
                pending_enums_push(&mut g, name.name, underlying, members);
            }
            ast::Decl::Error { members, .. } => {
                for m in members {
                    if !g.errors.contains(&m.name) {
                        g.errors.push(m.name);
                    }
                }
            }
            ast::Decl::MatchKind { .. } => {}
            ast::Decl::ExternFunction(f) => {
                g.extern_fns.insert(f.name.name.clone(), f);
            }
            ast::Decl::Extern(e) => {
                g.externs.insert(e.name.name.clone(), e);
            }
            ast::Decl::ParserType(_) | ast::Decl::ControlType(_) => {}
            ast::Decl::Package(p) => {
                g.packages.insert(p.name.name.clone(), p);
            }
            ast::Decl::Parser(p) => {
                g.parsers.insert(p.name.name.clone(), Arc::new(p));
            }
            ast::Decl::Control(c) => {
                g.controls.insert(c.name.name.clone(), Arc::new(c));
            }
            ast::Decl::Action(a) => top_actions.push(a),
            ast::Decl::Function(f) => functions.push(f),
            ast::Decl::Instantiation(i) => {
                if i.name.name == "main" {
                    main = Some(i);
                } else {
                    top_insts.insert(i.name.name.clone(), i);
                }
            }
        }
    }
    // Aggregates (resolved on demand, recursively).
    let names: Vec<String> = g
        .agg_decls
        .iter()
        .filter(|(_, d)| d.type_params.is_empty())
        .map(|(n, _)| n.clone())
        .collect();
    for n in names {
        resolve_agg(&mut g, &n, 0)?;
    }
    // Constants and enums in declaration order.
    for c in consts {
        if let Some(en) = c.name.name.strip_prefix("\0enum ") {
            finish_enum(&mut g, en)?;
            continue;
        }
        let ty = resolve_type(&g, &c.ty, None, 0)?;
        let v = const_eval(&g, &c.value, None)?;
        let v = crate::interp::ops::coerce(&ty, v).map_err(|m| P4Error::Check {
            span: c.span.clone(),
            msg: m,
        })?;
        g.consts.insert(c.name.name, v);
    }
    for f in functions {
        let param_tys = f
            .proto
            .params
            .iter()
            .map(|p| resolve_type(&g, &p.ty, None, 0))
            .collect::<Result<_, _>>()?;
        g.functions.insert(
            f.proto.name.name.clone(),
            Arc::new(FuncDef { decl: f, param_tys }),
        );
    }
    let mut prog = Prog {
        g,
        actions: Vec::new(),
        blocks: Vec::new(),
        tables: Vec::new(),
        externs: Vec::new(),
        main_blocks: Vec::new(),
        package: String::new(),
        package_arity: 0,
        used_top: Vec::new(),
        direct_blocks: HashMap::default(),
        fast: None,
    };
    for a in top_actions {
        let idx = add_action(&mut prog, a, None, None)?;
        let n = prog.actions[idx].qname.clone();
        prog.g.actions.insert(n, idx);
    }
    let main = match main {
        Some(m) => m,
        None => {
            return Err(P4Error::Arch(
                "the program has no `main` package instantiation".into(),
            ))
        }
    };
    let pkg = match &main.ty {
        Type::Named { name, .. } => name.name.clone(),
        _ => return check_err(&main.span, "main is not a package instantiation"),
    };
    prog.package = pkg.clone();
    prog.package_arity = main.args.len();
    let pnames: Vec<String> = prog
        .g
        .packages
        .get(&pkg)
        .map(|p| p.params.iter().map(|p| p.name.name.clone()).collect())
        .unwrap_or_default();
    for (i, a) in main.args.iter().enumerate() {
        let pname = a
            .name
            .as_ref()
            .map(|n| n.name.clone())
            .or_else(|| pnames.get(i).cloned())
            .unwrap_or_else(|| format!("arg{i}"));
        instantiate_package_arg(&mut prog, &a.value, &pname, &top_insts)?;
    }
    // Direct invocation targets: reuse main's instance of the same type,
    // else instantiate (quietly skipping types that cannot be).
    let mut names: Vec<String> = prog
        .g
        .controls
        .keys()
        .chain(prog.g.parsers.keys())
        .cloned()
        .collect();
    names.sort();
    for n in names {
        if let Some(b) = prog.blocks.iter().position(|b| b.qname == n) {
            prog.direct_blocks.insert(n, b);
            continue;
        }
        let no_ctor = match (prog.g.controls.get(&n), prog.g.parsers.get(&n)) {
            (Some(c), _) => c.ctor_params.is_empty() && c.type_params.is_empty(),
            (None, Some(p)) => p.ctor_params.is_empty() && p.type_params.is_empty(),
            _ => false,
        };
        if !no_ctor {
            continue;
        }
        let marks = (
            prog.blocks.len(),
            prog.tables.len(),
            prog.externs.len(),
            prog.actions.len(),
        );
        match instantiate_block(&mut prog, &n, &n, vec![], &Span::default(), 0) {
            Ok(b) => {
                prog.direct_blocks.insert(n, b);
            }
            Err(_) => {
                prog.blocks.truncate(marks.0);
                prog.tables.truncate(marks.1);
                prog.externs.truncate(marks.2);
                prog.actions.truncate(marks.3);
            }
        }
    }
    check_calls(&prog)?;
    for (n, i) in &top_insts {
        if !prog.used_top.contains(n) {
            return unsupported(&i.span, format!("top-level instantiation {n} outside main"));
        }
    }
    Ok(prog)
}

type PendingEnum = (Option<Type>, Vec<(ast::Ident, Option<Expr>)>);

fn pending_enums_push(
    g: &mut Globals,
    name: String,
    underlying: Option<Type>,
    members: Vec<(ast::Ident, Option<Expr>)>,
) {
    g.pending_enums.insert(name, (underlying, members));
}

fn finish_enum(g: &mut Globals, name: &str) -> Result<(), P4Error> {
    let Some((underlying, members)) = g.pending_enums.remove(name) else {
        return Ok(());
    };
    let under = match &underlying {
        Some(t) => match resolve_type(g, t, None, 0)? {
            Ty::Bits(w, s) => Some((w, s)),
            _ => {
                return check_err(
                    &span_of_type(t).unwrap_or_default(),
                    "enum underlying type is not bit<W>/int<W>",
                )
            }
        },
        None => None,
    };
    let mut ms = Vec::new();
    for (i, (m, e)) in members.iter().enumerate() {
        let v = match e {
            Some(e) => {
                let v = const_eval(g, e, None)?;
                match v {
                    Value::Bits(b) => b.v,
                    Value::Int(i) => {
                        big_to_u128(&i) & crate::value::mask(under.map(|u| u.0).unwrap_or(128))
                    }
                    _ => return check_err(e.span(), "enum member value is not an integer"),
                }
            }
            None => i as u128,
        };
        ms.push((m.name.clone(), v));
    }
    g.enums.insert(
        name.to_string(),
        EnumDef {
            underlying: under,
            members: ms,
        },
    );
    Ok(())
}

fn resolve_agg(g: &mut Globals, name: &str, depth: u32) -> Result<Arc<Agg>, P4Error> {
    if let Some(a) = g.aggs.get(name) {
        return Ok(a.clone());
    }
    let Some(d) = g.agg_decls.get(name).cloned() else {
        return check_err(&Span::default(), format!("no type {name}"));
    };
    if depth > 32 {
        return check_err(&d.span, "recursive aggregate");
    }
    if !d.type_params.is_empty() {
        return unsupported(&d.span, "generic struct/header");
    }
    let mut fields = Vec::new();
    for f in &d.fields {
        // Resolve nested aggregates first.
        let mut t = &f.ty;
        while let Type::Stack { elem, .. } = t {
            t = elem;
        }
        if let Type::Named { name: n, .. } = t {
            let mut target = n.name.clone();
            let mut hops = 0;
            while let Some(Type::Named { name: n2, .. }) = g.typedefs.get(&target) {
                target = n2.name.clone();
                hops += 1;
                if hops > 32 {
                    break;
                }
            }
            if g.agg_decls.contains_key(&target) && !g.aggs.contains_key(&target) {
                resolve_agg(g, &target, depth + 1)?;
            }
        }
        let ty = resolve_type(g, &f.ty, None, 0)?;
        if d.kind == AggregateKind::Header && !matches!(ty, Ty::Bits(..) | Ty::Bool | Ty::Varbit(_))
        {
            if let Ty::Named(n) = &ty {
                return check_err(&f.name.span, format!("unknown type {n} in header"));
            }
        }
        fields.push((f.name.name.clone(), ty));
    }
    let names: Arc<[String]> = fields
        .iter()
        .map(|(n, _)| n.clone())
        .collect::<Vec<_>>()
        .into();
    let field_lists = d
        .fields
        .iter()
        .map(|f| {
            f.annotations
                .iter()
                .filter(|a| a.name == "field_list")
                .flat_map(|a| a.args.iter())
                .filter_map(|e| match e {
                    Expr::Int(l, _) => num_traits::ToPrimitive::to_u64(&l.value),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let a = Arc::new(Agg {
        name: Arc::from(name),
        kind: d.kind,
        fields,
        names,
        field_lists,
    });
    g.aggs.insert(name.to_string(), a.clone());
    Ok(a)
}

fn add_action(
    prog: &mut Prog,
    a: ast::ActionDecl,
    block: Option<usize>,
    prefix: Option<&str>,
) -> Result<usize, P4Error> {
    let locals = block.map(|b| &prog.blocks[b].locals);
    let mut param_tys = Vec::new();
    let mut params = Vec::new();
    for p in &a.params {
        let t = resolve_type(&prog.g, &p.ty, locals, 0)?;
        if p.direction == ast::Direction::None {
            let w = match &t {
                Ty::Bits(w, _) => *w,
                Ty::Bool => 1,
                _ => {
                    return unsupported(
                        &p.name.span,
                        "action data parameter that is not bit<W>/int<W>/bool",
                    )
                }
            };
            params.push(ParamInfo {
                name: p.name.name.clone(),
                width: w,
                id: params.len() as u32 + 1,
            });
        }
        param_tys.push(t);
    }
    let qname = match (ann_str(&a.annotations, "name"), prefix) {
        (Some(n), _) if n.starts_with('.') => n[1..].to_string(),
        (Some(n), Some(p)) => format!("{p}.{n}"),
        (Some(n), None) => n,
        (None, Some(p)) => format!("{p}.{}", a.name.name),
        (None, None) => a.name.name.clone(),
    };
    let info = ActionInfo {
        name: qname.clone(),
        id: crate::runtime::stable_id(0x01, &qname),
        params,
        table_only: false,
        default_only: false,
    };
    prog.actions.push(ActionDef {
        qname,
        decl: Arc::new(a),
        block,
        param_tys,
        info,
    });
    Ok(prog.actions.len() - 1)
}

fn instantiate_package_arg(
    prog: &mut Prog,
    e: &Expr,
    pname: &str,
    top: &HashMap<String, ast::Instantiation>,
) -> Result<(), P4Error> {
    if let Expr::Path(id) = e {
        if let Some(i) = top.get(&id.name) {
            prog.used_top.push(id.name.clone());
            let call = Expr::Call {
                func: Box::new(match &i.ty {
                    Type::Named { name, .. } => Expr::Path(name.clone()),
                    _ => return unsupported(&i.span, "instantiation of a non-named type"),
                }),
                type_args: vec![],
                args: i.args.clone(),
                span: i.span.clone(),
            };
            return instantiate_package_arg(prog, &call, pname, top);
        }
    }
    let Expr::Call {
        func, args, span, ..
    } = e
    else {
        return unsupported(e.span(), "package argument that is not an instantiation");
    };
    let Expr::Path(ty) = &**func else {
        return unsupported(span, "package argument");
    };
    if prog.g.packages.contains_key(&ty.name) {
        let pnames: Vec<String> = prog.g.packages[&ty.name]
            .params
            .iter()
            .map(|p| p.name.name.clone())
            .collect();
        for (i, a) in args.iter().enumerate() {
            let sub = pnames.get(i).cloned().unwrap_or_else(|| format!("arg{i}"));
            instantiate_package_arg(prog, &a.value, &format!("{pname}.{sub}"), top)?;
        }
        return Ok(());
    }
    if prog.g.parsers.contains_key(&ty.name) || prog.g.controls.contains_key(&ty.name) {
        let ctor: Vec<Value> = args
            .iter()
            .map(|a| const_eval(&prog.g, &a.value, None))
            .collect::<Result<_, _>>()?;
        let b = instantiate_block(prog, &ty.name, &ty.name.clone(), ctor, span, 0)?;
        prog.main_blocks.push((pname.to_string(), b));
        return Ok(());
    }
    if prog.g.externs.contains_key(&ty.name) {
        // PacketReplicationEngine / BufferingQueueingEngine: modelled by
        // the architecture.
        return Ok(());
    }
    check_err(
        span,
        format!("{} is not a parser, control or package", ty.name),
    )
}

fn instantiate_block(
    prog: &mut Prog,
    ty: &str,
    qname: &str,
    ctor: Vec<Value>,
    span: &Span,
    depth: u32,
) -> Result<usize, P4Error> {
    if depth > 16 {
        return check_err(span, "instantiations nest too deep");
    }
    let kind = if let Some(p) = prog.g.parsers.get(ty) {
        BlockKind::Parser(p.clone())
    } else if let Some(c) = prog.g.controls.get(ty) {
        BlockKind::Control(c.clone())
    } else {
        return check_err(span, format!("no parser or control {ty}"));
    };
    let (type_params, ctor_params, params, locals_decl) = match &kind {
        BlockKind::Parser(p) => (&p.type_params, &p.ctor_params, &p.params, &p.locals),
        BlockKind::Control(c) => (&c.type_params, &c.ctor_params, &c.params, &c.locals),
    };
    if let Some(tp) = type_params.first() {
        return unsupported(&tp.span, "generic parser/control");
    }
    let params = params.clone();
    let locals_decl = locals_decl.clone();
    let mut locals: HashMap<String, Local> = HashMap::default();
    for (i, p) in ctor_params.iter().enumerate() {
        let v = match (ctor.get(i), &p.default) {
            (Some(v), _) => v.clone(),
            (None, Some(d)) => const_eval(&prog.g, d, None)?,
            (None, None) => {
                return check_err(
                    span,
                    format!("missing constructor argument {}", p.name.name),
                )
            }
        };
        let t = resolve_type(&prog.g, &p.ty, None, 0)?;
        let v = crate::interp::ops::coerce(&t, v).map_err(|m| P4Error::Check {
            span: span.clone(),
            msg: m,
        })?;
        locals.insert(p.name.name.clone(), Local::Const(v));
    }
    let param_tys = params
        .iter()
        .map(|p| resolve_type(&prog.g, &p.ty, Some(&locals), 0))
        .collect::<Result<Vec<_>, _>>()?;
    let states = match &kind {
        BlockKind::Parser(p) => p
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.name.clone(), i))
            .collect(),
        BlockKind::Control(_) => HashMap::default(),
    };
    let bidx = prog.blocks.len();
    prog.blocks.push(Block {
        qname: qname.to_string(),
        kind,
        locals,
        param_tys,
        vars: Vec::new(),
        states,
    });
    let mut tables = Vec::new();
    for l in locals_decl {
        match l {
            ast::LocalDecl::Const(c) => {
                let ty = resolve_type(&prog.g, &c.ty, Some(&prog.blocks[bidx].locals), 0)?;
                let v = const_eval(&prog.g, &c.value, Some(&prog.blocks[bidx].locals))?;
                let v = crate::interp::ops::coerce(&ty, v).map_err(|m| P4Error::Check {
                    span: c.span.clone(),
                    msg: m,
                })?;
                prog.blocks[bidx]
                    .locals
                    .insert(c.name.name, Local::Const(v));
            }
            ast::LocalDecl::Var(v) => {
                let ty = resolve_type(&prog.g, &v.ty, Some(&prog.blocks[bidx].locals), 0)?;
                prog.blocks[bidx].vars.push((v, ty));
            }
            ast::LocalDecl::Action(a) => {
                let name = a.name.name.clone();
                let idx = add_action(prog, a, Some(bidx), Some(qname))?;
                prog.blocks[bidx].locals.insert(name, Local::Action(idx));
            }
            ast::LocalDecl::Table(t) => tables.push(t),
            ast::LocalDecl::Function(f) => {
                return unsupported(&f.proto.span, "function declared inside a control")
            }
            ast::LocalDecl::Instantiation(i) => {
                let tname = match &i.ty {
                    Type::Named { name, .. } => name.name.clone(),
                    _ => return unsupported(&i.span, "instantiation of a non-named type"),
                };
                let sub_q = format!("{qname}.{}", i.name.name);
                let args: Vec<Value> = i
                    .args
                    .iter()
                    .map(|a| const_eval(&prog.g, &a.value, Some(&prog.blocks[bidx].locals)))
                    .collect::<Result<_, _>>()?;
                if tname == "value_set" {
                    return unsupported(&i.span, "parser value_set");
                }
                if prog.g.parsers.contains_key(&tname) || prog.g.controls.contains_key(&tname) {
                    let b = instantiate_block(prog, &tname, &sub_q, args, &i.span, depth + 1)?;
                    prog.blocks[bidx]
                        .locals
                        .insert(i.name.name.clone(), Local::Block(b));
                } else if prog.g.externs.contains_key(&tname) {
                    if extern_methods(&tname).is_none() {
                        return unsupported(&i.span, format!("extern {tname}"));
                    }
                    if let Some(f) = i.initializer.first() {
                        return unsupported(
                            &f.proto.span,
                            "extern instance with abstract method bodies",
                        );
                    }
                    let elem_ty = match &i.ty {
                        Type::Named { args: targs, .. } if !targs.is_empty() => Some(resolve_type(
                            &prog.g,
                            &targs[0],
                            Some(&prog.blocks[bidx].locals),
                            0,
                        )?),
                        _ => None,
                    };
                    prog.externs.push(ExternDef {
                        qname: sub_q,
                        ty: tname,
                        args,
                        elem_ty,
                    });
                    prog.blocks[bidx]
                        .locals
                        .insert(i.name.name.clone(), Local::Extern(prog.externs.len() - 1));
                } else {
                    return check_err(&i.span, format!("unknown type {tname}"));
                }
            }
        }
    }
    for t in tables {
        let name = t.name.name.clone();
        let idx = build_table(prog, bidx, t)?;
        prog.blocks[bidx].locals.insert(name, Local::Table(idx));
    }
    Ok(bidx)
}

fn find_action(prog: &Prog, block: usize, name: &str) -> Option<usize> {
    match prog.blocks[block].locals.get(name) {
        Some(Local::Action(a)) => Some(*a),
        _ => prog.g.actions.get(name).copied(),
    }
}

fn action_call(e: &Expr) -> Option<(&ast::Ident, &[ast::Arg])> {
    match e {
        Expr::Path(id) => Some((id, &[])),
        Expr::Call { func, args, .. } => match &**func {
            Expr::Path(id) => Some((id, args.as_slice())),
            _ => None,
        },
        _ => None,
    }
}

fn build_table(prog: &mut Prog, bidx: usize, t: ast::TableDecl) -> Result<usize, P4Error> {
    let bq = prog.blocks[bidx].qname.clone();
    let qname = match ann_str(&t.annotations, "name") {
        Some(n) if n.starts_with('.') => n[1..].to_string(),
        Some(n) => format!("{bq}.{n}"),
        None => format!("{bq}.{}", t.name.name),
    };
    let mut keys = Vec::new();
    let mut key_infos = Vec::new();
    let mut actions = Vec::new();
    let mut action_infos = Vec::new();
    let mut default: Option<(usize, Vec<Value>, bool, Span)> = None;
    let mut entries_decl = None;
    let mut size = 1024u64;
    let mut add_on_miss = false;
    let mut smallest_wins = false;
    let mut idle = false;
    let mut direct_counter = None;
    let mut direct_meter = None;
    for p in &t.props {
        match p {
            ast::TableProperty::Key(ks) => {
                for k in ks {
                    let kind = MatchKind::from_name(&k.match_kind.name);
                    if let MatchKind::Other(o) = &kind {
                        return unsupported(&k.match_kind.span, format!("match kind {o}"));
                    }
                    let width = crate::interp::probe_width(prog, bidx, &k.expr)?;
                    key_infos.push(crate::runtime::KeyInfo {
                        name: expr_text(&k.expr),
                        annotated_name: ann_str(&k.annotations, "name"),
                        match_kind: kind.clone(),
                        width,
                        id: key_infos.len() as u32 + 1,
                    });
                    keys.push(KeyDef {
                        expr: k.expr.clone(),
                        kind,
                        width,
                    });
                }
            }
            ast::TableProperty::Actions(refs) => {
                for r in refs {
                    let Some(a) = find_action(prog, bidx, &r.name.name) else {
                        return check_err(&r.name.span, format!("no action {}", r.name.name));
                    };
                    let mut info = prog.actions[a].info.clone();
                    info.table_only = ann(&r.annotations, "tableonly").is_some();
                    info.default_only = ann(&r.annotations, "defaultonly").is_some();
                    action_infos.push(info);
                    actions.push(TableAction {
                        action: a,
                        bound: r.args.clone(),
                    });
                }
            }
            ast::TableProperty::DefaultAction {
                action,
                is_const,
                span,
            } => {
                let Some((id, args)) = action_call(action) else {
                    return unsupported(span, "default action expression");
                };
                let Some(a) = find_action(prog, bidx, &id.name) else {
                    return check_err(&id.span, format!("no action {}", id.name));
                };
                let vals = action_data_args(prog, bidx, a, args, span)?;
                default = Some((a, vals, *is_const, span.clone()));
            }
            ast::TableProperty::Entries {
                entries,
                is_const,
                span,
            } => {
                if !is_const {
                    // Non-const initial entries are loaded as runtime
                    // entries below (same semantics for lookup).
                }
                entries_decl = Some((entries.clone(), *is_const, span.clone()));
            }
            ast::TableProperty::Other {
                name, value, span, ..
            } => match name.name.as_str() {
                "size" => {
                    size = const_eval(&prog.g, value, Some(&prog.blocks[bidx].locals))?
                        .as_u128()
                        .unwrap_or(1024) as u64
                }
                "add_on_miss" => add_on_miss = matches!(value, Expr::Bool(true, _)),
                "largest_priority_wins" => smallest_wins = matches!(value, Expr::Bool(false, _)),
                "pna_idle_timeout" | "idle_timeout_with_auto_delete" => idle = true,
                "support_timeout" => idle = matches!(value, Expr::Bool(true, _)),
                "counters" | "psa_direct_counter" | "pna_direct_counter" => {
                    if let Expr::Path(id) = value {
                        if let Some(Local::Extern(e)) = prog.blocks[bidx].locals.get(&id.name) {
                            direct_counter = Some(*e);
                        }
                    }
                }
                "meters" | "psa_direct_meter" | "pna_direct_meter" => {
                    if let Expr::Path(id) = value {
                        if let Some(Local::Extern(e)) = prog.blocks[bidx].locals.get(&id.name) {
                            direct_meter = Some(*e);
                        }
                    }
                }
                "implementation" | "psa_implementation" | "pna_implementation" => {
                    return unsupported(span, "table implementation (action profile/selector)")
                }
                _ => {}
            },
        }
    }
    let (default_action, default_args, const_default) = match default {
        Some((a, v, c, _)) => (a, v, c),
        None => match prog.g.actions.get("NoAction") {
            Some(a) => {
                // The implicit default: as p4c does, NoAction joins the
                // table's actions as @defaultonly (P4Info lists it).
                if !actions.iter().any(|ta: &TableAction| ta.action == *a) {
                    let mut info = prog.actions[*a].info.clone();
                    info.table_only = false;
                    info.default_only = true;
                    action_infos.push(info);
                    actions.push(TableAction {
                        action: *a,
                        bound: Vec::new(),
                    });
                }
                (*a, vec![], false)
            }
            None => return check_err(&t.span, "table without default_action and no NoAction"),
        },
    };
    let tidx = prog.tables.len();
    let info = TableInfo {
        name: qname.clone(),
        id: crate::runtime::stable_id(0x02, &qname),
        keys: key_infos,
        actions: action_infos,
        size,
        is_const: entries_decl.as_ref().map(|e| e.1).unwrap_or(false),
        const_default,
        default_action: (
            prog.actions[default_action].qname.clone(),
            default_args
                .iter()
                .map(|v| num_bigint::BigUint::from(v.as_u128().unwrap_or(0)))
                .collect(),
        ),
        add_on_miss,
        idle_timeout: idle,
        direct_counter: direct_counter.map(|e: usize| prog.externs[e].qname.clone()),
        direct_meter: direct_meter.map(|e: usize| prog.externs[e].qname.clone()),
    };
    let mut td = TableDef {
        qname: std::sync::Arc::from(info.name.as_str()),
        info,
        keys,
        actions,
        default_action,
        default_args,
        const_entries: Vec::new(),
        direct_counter,
        direct_meter,
    };
    if let Some((entries, _is_const, _)) = entries_decl {
        let any_prio = entries
            .iter()
            .any(|e| e.priority.is_some() || ann(&e.annotations, "priority").is_some());
        let n = entries.len() as i64;
        for (i, e) in entries.iter().enumerate() {
            let mut entry =
                build_const_entry(prog, bidx, &td, e, i as u64, n - i as i64, any_prio)?;
            if any_prio && smallest_wins {
                entry.prio = -entry.prio;
            }
            td.const_entries.push(entry);
        }
    }
    prog.tables.push(td);
    Ok(tidx)
}

fn action_data_args(
    prog: &Prog,
    bidx: usize,
    a: usize,
    args: &[ast::Arg],
    span: &Span,
) -> Result<Vec<Value>, P4Error> {
    let ad = &prog.actions[a];
    let data_params: Vec<(usize, &ast::Param)> = ad
        .decl
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.direction == ast::Direction::None)
        .collect();
    let dir_count = ad.decl.params.len() - data_params.len();
    // `a(dir_args..., data_args...)` or `a(data_args...)`: directional
    // arguments are bound by the actions list.
    let skip = if args.len() == ad.decl.params.len() {
        dir_count
    } else {
        0
    };
    if args.len() - skip != data_params.len() {
        return check_err(
            span,
            format!(
                "action {} takes {} arguments, {} given",
                ad.qname,
                data_params.len(),
                args.len()
            ),
        );
    }
    let args = &args[skip..];
    let mut out = Vec::new();
    for (k, (pi, _)) in data_params.iter().enumerate() {
        let Some(arg) = args.get(k) else {
            return check_err(span, format!("missing argument for action {}", ad.qname));
        };
        let v = const_eval(&prog.g, &arg.value, Some(&prog.blocks[bidx].locals))?;
        let v = crate::interp::ops::coerce(&ad.param_tys[*pi], v).map_err(|m| P4Error::Check {
            span: span.clone(),
            msg: m,
        })?;
        out.push(v);
    }
    Ok(out)
}

fn build_const_entry(
    prog: &Prog,
    bidx: usize,
    td: &TableDef,
    e: &ast::TableEntry,
    id: u64,
    order_prio: i64,
    any_prio: bool,
) -> Result<Entry, P4Error> {
    use crate::runtime::KeyMatch;
    use num_bigint::BigUint;
    let locals = Some(&prog.blocks[bidx].locals);
    if e.keysets.len() != td.keys.len()
        && !(e.keysets.len() == 1 && matches!(e.keysets[0], Expr::Default(_) | Expr::DontCare(_)))
    {
        return check_err(
            &e.span,
            format!(
                "entry has {} keys, table has {}",
                e.keysets.len(),
                td.keys.len()
            ),
        );
    }
    let mut kms = Vec::new();
    let mut specs = Vec::new();
    for (i, k) in td.keys.iter().enumerate() {
        let ks = e.keysets.get(i).unwrap_or(&e.keysets[0]);
        let m = crate::value::mask(k.width);
        let num = |x: &Expr| -> Result<u128, P4Error> {
            let v = const_eval(&prog.g, x, locals)?;
            match v {
                Value::Bits(b) => Ok(b.v & m),
                Value::Int(i) => Ok(big_to_u128(&i) & m),
                Value::Bool(b, _) => Ok(b as u128),
                Value::Error(e, _) => {
                    Ok(prog.g.errors.iter().position(|n| **n == *e).unwrap_or(0) as u128)
                }
                Value::Enum(t, m) => Ok(enum_index(&prog.g, &t, &m)),
                _ => check_err(x.span(), "entry key is not an integer"),
            }
        };
        let (km, spec) = match ks {
            Expr::Default(_) | Expr::DontCare(_) => (Km::Masked(0, 0), KeyMatch::Any),
            Expr::Mask(v, mk, _) => {
                let mk = num(mk)?;
                let v = num(v)? & mk;
                if k.kind == MatchKind::Lpm {
                    let plen = mk.count_ones();
                    (Km::Masked(v, mk), KeyMatch::Lpm(BigUint::from(v), plen))
                } else {
                    (
                        Km::Masked(v, mk),
                        KeyMatch::Ternary(BigUint::from(v), BigUint::from(mk)),
                    )
                }
            }
            Expr::Range(lo, hi, _) => {
                let lo = num(lo)?;
                let hi = num(hi)?;
                (
                    Km::Range(lo, hi),
                    KeyMatch::Range(BigUint::from(lo), BigUint::from(hi)),
                )
            }
            other => {
                let v = num(other)?;
                (Km::Masked(v, m), KeyMatch::Exact(BigUint::from(v)))
            }
        };
        kms.push(km);
        specs.push(spec);
    }
    let Some((aid, args)) = action_call(&e.action) else {
        return unsupported(&e.span, "entry action expression");
    };
    let Some(a) = find_action(prog, bidx, &aid.name) else {
        return check_err(&aid.span, format!("no action {}", aid.name));
    };
    let vals = action_data_args(prog, bidx, a, args, &e.span)?;
    let prio = if any_prio {
        let p = match (&e.priority, ann(&e.annotations, "priority")) {
            (Some(p), _) => const_eval(&prog.g, p, locals)?.as_u128().unwrap_or(0) as i64,
            (None, Some(a)) => a
                .args
                .first()
                .map(|x| const_eval(&prog.g, x, locals))
                .transpose()?
                .and_then(|v| v.as_u128())
                .unwrap_or(0) as i64,
            (None, None) => 0,
        };
        // P4-16: with largest_priority_wins (default), larger wins.
        p
    } else {
        order_prio
    };
    let spec = crate::runtime::EntrySpec {
        keys: specs,
        action: prog.actions[a].qname.clone(),
        params: prog.actions[a]
            .info
            .params
            .iter()
            .zip(&vals)
            .map(|(p, v)| (p.name.clone(), BigUint::from(v.as_u128().unwrap_or(0))))
            .collect(),
        priority: if any_prio { Some(prio as u32) } else { None },
    };
    Ok(Entry {
        id,
        keys: kms,
        action: a,
        args: vals,
        prio,
        is_const: true,
        spec,
        packets: 0,
        bytes: 0,
        last_hit: None,
    })
}

/// Extern functions the interpreter runs.
const EXTERN_FUNCTIONS: &[&str] = &[
    "send_to_port",
    "drop_packet",
    "add_entry",
    "set_entry_expire_time",
    "restart_expire_timer",
    "update_expire_info",
    "is_host_port",
    "is_net_port",
    "mark_to_drop",
    "verify",
    "verify_checksum",
    "verify_checksum_with_payload",
    "update_checksum",
    "update_checksum_with_payload",
    "hash",
    "random",
    "resubmit",
    "resubmit_preserving_field_list",
    "recirculate",
    "recirculate_preserving_field_list",
    "clone",
    "clone3",
    "clone_preserving_field_list",
    "digest",
    "truncate",
    "log_msg",
    "static_assert",
    "assert",
    "assume",
    "psa_normal",
    "psa_clone_i2e",
    "psa_clone_e2e",
    "psa_resubmit",
    "psa_recirculate",
];

/// Extern object types and the methods the interpreter runs.
pub(crate) fn extern_methods(ty: &str) -> Option<&'static [&'static str]> {
    Some(match ty {
        "InternetChecksum" => &["clear", "add", "subtract", "get", "get_state", "set_state"],
        "Checksum" => &["clear", "update", "get"],
        "Hash" => &["get_hash"],
        "Counter" | "counter" | "DirectCounter" | "direct_counter" => &["count"],
        "Register" | "register" => &["read", "write"],
        "Meter" => &["execute"],
        "meter" => &["execute_meter"],
        "DirectMeter" => &["execute"],
        "direct_meter" => &["read"],
        "Random" => &["read"],
        "Digest" => &["pack"],
        _ => return None,
    })
}

/// Refuses, at load time, calls the interpreter would not run: unknown
/// extern functions and methods of extern instances it does not model;
/// and recursion (an action or function that reaches itself through its
/// calls), which P4-16 forbids: the compiled code's variable slots
/// (`fast::Chain::slot`, whose `Domain` counts declarations, not
/// bindings) assume a declaration is bound at most once in view
/// (review p4early SHOULD-FIX 2).
fn check_calls(prog: &Prog) -> Result<(), P4Error> {
    // Callers: actions by index, then functions (sorted by name, so the
    // error names the same call every run).
    let mut fnames: Vec<&str> = prog.g.functions.keys().map(String::as_str).collect();
    fnames.sort_unstable();
    let na = prog.actions.len();
    let fnode = |n: &str| fnames.binary_search(&n).ok().map(|i| na + i);
    let mut bodies: Vec<(Option<usize>, Option<usize>, &ast::Block)> = Vec::new();
    for (i, b) in prog.blocks.iter().enumerate() {
        if let BlockKind::Control(c) = &b.kind {
            bodies.push((Some(i), None, &c.apply));
        }
    }
    for (ai, a) in prog.actions.iter().enumerate() {
        bodies.push((a.block, Some(ai), &a.decl.body));
    }
    for (fi, n) in fnames.iter().enumerate() {
        bodies.push((None, Some(na + fi), &prog.g.functions[*n].decl.body));
    }
    type Owner = (Option<usize>, Option<usize>);
    let mut stmts: Vec<(Owner, &ast::Stmt)> = Vec::new();
    for (b, o, body) in bodies {
        stmts.extend(body.stmts.iter().map(|s| ((b, o), s)));
    }
    for (i, b) in prog.blocks.iter().enumerate() {
        if let BlockKind::Parser(p) = &b.kind {
            for st in &p.states {
                stmts.extend(st.body.iter().map(|s| ((Some(i), None), s)));
            }
        }
    }
    // The calls among actions and functions: (caller, callee, where).
    let mut edges: Vec<(usize, usize, &Span)> = Vec::new();
    let mut exprs: Vec<(Owner, &Expr)> = Vec::new();
    while let Some((b, s)) = stmts.pop() {
        match s {
            ast::Stmt::Assign { lhs, rhs, .. } => {
                exprs.push((b, lhs));
                exprs.push((b, rhs));
            }
            ast::Stmt::Call(e) => exprs.push((b, e)),
            ast::Stmt::If {
                cond,
                then,
                otherwise,
                ..
            } => {
                exprs.push((b, cond));
                stmts.push((b, then));
                if let Some(o) = otherwise {
                    stmts.push((b, o));
                }
            }
            ast::Stmt::Block(bl) => stmts.extend(bl.stmts.iter().map(|s| (b, s))),
            ast::Stmt::Switch { expr, cases, .. } => {
                exprs.push((b, expr));
                for c in cases {
                    if let Some(bl) = &c.body {
                        stmts.extend(bl.stmts.iter().map(|s| (b, s)));
                    }
                }
            }
            ast::Stmt::Return(Some(e), _) => exprs.push((b, e)),
            ast::Stmt::Var(v) => {
                if let Some(e) = &v.init {
                    exprs.push((b, e));
                }
            }
            ast::Stmt::Const(c) => exprs.push((b, &c.value)),
            ast::Stmt::Instantiation(i) => {
                return unsupported(&i.span, "instantiation inside a block")
            }
            _ => {}
        }
    }
    while let Some((b, e)) = exprs.pop() {
        match e {
            Expr::Call {
                func, args, span, ..
            } => {
                exprs.extend(args.iter().map(|a| (b, &a.value)));
                let (blk, owner) = b;
                match &**func {
                    Expr::Path(id) => {
                        let n = id.name.as_str();
                        let local = blk.and_then(|bi| match prog.blocks[bi].locals.get(n) {
                            Some(Local::Action(a)) => Some(*a),
                            _ => None,
                        });
                        let callee = local
                            .or_else(|| prog.g.actions.get(n).copied())
                            .or_else(|| fnode(n));
                        if let (Some(o), Some(c)) = (owner, callee) {
                            edges.push((o, c, span));
                        }
                        let local_action = local.is_some();
                        if !local_action
                            && !prog.g.actions.contains_key(n)
                            && !prog.g.functions.contains_key(n)
                            && !EXTERN_FUNCTIONS.contains(&n)
                        {
                            if prog.g.extern_fns.contains_key(n) {
                                return unsupported(span, format!("extern function {n}"));
                            }
                            return check_err(span, format!("no function or action {n}"));
                        }
                    }
                    Expr::Member(obj, m) => {
                        exprs.push((b, obj));
                        if let (Expr::Path(id), Some(b)) = (&**obj, blk) {
                            if let Some(Local::Extern(x)) = prog.blocks[b].locals.get(&id.name) {
                                let ty = &prog.externs[*x].ty;
                                let ok = extern_methods(ty)
                                    .map(|ms| ms.contains(&m.name.as_str()))
                                    .unwrap_or(false);
                                if !ok {
                                    return unsupported(span, format!("{ty}.{}", m.name));
                                }
                            }
                        }
                    }
                    other => exprs.push((b, other)),
                }
            }
            Expr::Member(x, _) | Expr::Unary(_, x, _) | Expr::Cast(_, x, _) => exprs.push((b, x)),
            Expr::Index(x, y, _)
            | Expr::Binary(_, x, y, _)
            | Expr::Mask(x, y, _)
            | Expr::Range(x, y, _) => {
                exprs.push((b, x));
                exprs.push((b, y));
            }
            Expr::Slice { expr, .. } => exprs.push((b, expr)),
            Expr::Ternary(x, y, z, _) => {
                exprs.push((b, x));
                exprs.push((b, y));
                exprs.push((b, z));
            }
            Expr::List(xs, _) => exprs.extend(xs.iter().map(|x| (b, x))),
            Expr::StructInit(fs, _) => exprs.extend(fs.iter().map(|(_, x)| (b, x))),
            _ => {}
        }
    }
    // A cycle among the calls: depth-first, refused at the call that
    // closes it (0 not seen, 1 on the path, 2 done).
    edges.sort_by_key(|e| e.0);
    let n = na + fnames.len();
    let mut state = vec![0u8; n];
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        // (node, next edge index to try).
        let first = |v: usize| edges.partition_point(|e| e.0 < v);
        let mut path: Vec<(usize, usize)> = vec![(root, first(root))];
        state[root] = 1;
        while let Some(&mut (v, ref mut ei)) = path.last_mut() {
            match edges.get(*ei).filter(|e| e.0 == v) {
                Some(&(_, c, span)) => {
                    *ei += 1;
                    match state[c] {
                        1 => {
                            let name = |x: usize| match x.checked_sub(na) {
                                None => format!("action {}", prog.actions[x].decl.name.name),
                                Some(f) => format!("function {}", fnames[f]),
                            };
                            return check_err(
                                span,
                                format!(
                                    "recursive call of {} from {} (P4-16 forbids recursion)",
                                    name(c),
                                    name(v)
                                ),
                            );
                        }
                        0 => {
                            state[c] = 1;
                            path.push((c, first(c)));
                        }
                        _ => {}
                    }
                }
                None => {
                    state[v] = 2;
                    path.pop();
                }
            }
        }
    }
    Ok(())
}

/// A non-serializable enum member's number (declaration order), used
/// when such a value is a table key.
pub(crate) fn enum_index(g: &Globals, ty: &str, member: &str) -> u128 {
    g.enums
        .get(ty)
        .and_then(|e| e.members.iter().position(|(n, _)| n == member))
        .unwrap_or(0) as u128
}
