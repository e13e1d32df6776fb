//! Recursive-descent parser for P4-16 over the [`super::lexer`] tokens,
//! building the [`crate::ast`] that [`crate::interp::check`] resolves.
//!
//! Two ambiguities of the grammar are settled here as p4c settles them:
//! a parenthesised type is a cast (`(bit<32>) x`) — a name counts as a
//! type when it was declared as one (typedef, header, struct, enum,
//! extern, parser/control/package type, type parameter in scope),
//! including in included architecture files; and `f<T>(...)` is a generic
//! call when what follows `<` parses as type arguments closed by `>(`.
//! Declarations inside bodies are told from statements by trying to read
//! `Type name` ahead (the token vector makes backtracking cheap).
//! Recursion is bounded so that no input overflows the stack.

use super::lexer::{TokKind, Token};
use super::preproc::Source;
use super::{ErrorKind, FrontError};
use crate::ast::*;
use std::collections::HashSet;

/// Nesting beyond this (expressions, statements, types) is refused.
const MAX_DEPTH: usize = 400;

type R<T> = Result<T, FrontError>;

/// Keywords that cannot start an expression (they help error messages:
/// a missing `;` before `if` reports the `;`).
const STMT_KEYWORDS: &[&str] = &[
    "if",
    "else",
    "switch",
    "return",
    "exit",
    "transition",
    "state",
    "table",
    "action",
    "control",
    "parser",
    "const",
    "header",
    "struct",
    "header_union",
    "typedef",
    "extern",
    "package",
    "enum",
    "select",
    "in",
    "out",
    "inout",
    "abstract",
    "value_set",
];

pub struct Parser<'s> {
    src: &'s Source,
    toks: Vec<Token>,
    pos: usize,
    /// Names declared as types so far (whole program, includes first).
    types: HashSet<String>,
    /// Type parameters of the declarations being parsed.
    type_params: Vec<Vec<String>>,
    depth: usize,
    /// Inside `bit<...>`: a bare `>` closes the width, it is no operator.
    no_angle: bool,
}

fn is_base_type(name: &str) -> bool {
    matches!(
        name,
        "bit"
            | "int"
            | "varbit"
            | "bool"
            | "error"
            | "string"
            | "void"
            | "match_kind"
            | "tuple"
            | "list"
    )
}

impl<'s> Parser<'s> {
    pub fn new(src: &'s Source, toks: Vec<Token>) -> Self {
        Parser {
            src,
            toks,
            pos: 0,
            types: HashSet::new(),
            type_params: Vec::new(),
            depth: 0,
            no_angle: false,
        }
    }

    // ---- token helpers -------------------------------------------------

    fn peek(&self) -> &Token {
        self.peek_at(0)
    }

    fn peek_at(&self, n: usize) -> &Token {
        let i = (self.pos + n).min(self.toks.len() - 1);
        &self.toks[i]
    }

    fn span(&self) -> Span {
        self.peek().span.clone()
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(&self.peek().kind, TokKind::Punct(q) if *q == p)
    }

    fn is_punct_at(&self, n: usize, p: &str) -> bool {
        matches!(&self.peek_at(n).kind, TokKind::Punct(q) if *q == p)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn is_kw(&self, k: &str) -> bool {
        matches!(&self.peek().kind, TokKind::Ident(s) if s == k)
    }

    fn eat_kw(&mut self, k: &str) -> bool {
        if self.is_kw(k) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn is_ident(&self) -> bool {
        matches!(self.peek().kind, TokKind::Ident(_))
    }

    fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        self.unknown_char()?;
        Err(FrontError::new(ErrorKind::Syntax, self.span(), msg))
    }

    /// A character outside P4 is refused as such wherever the parser
    /// meets it (the lexer lets it through for free-form annotations).
    fn unknown_char(&self) -> R<()> {
        match &self.peek().kind {
            TokKind::Unknown(c) => Err(FrontError::new(
                ErrorKind::Lex,
                self.span(),
                format!("unexpected character '{}'", c.escape_default()),
            )),
            _ => Ok(()),
        }
    }

    fn err_at<T>(&self, span: Span, msg: impl Into<String>) -> R<T> {
        Err(FrontError::new(ErrorKind::Syntax, span, msg))
    }

    /// `expected X <ctx>, found Y`. A missing `;` is reported where the
    /// previous token ends (the line that lacks it), as compilers do.
    fn expected<T>(&self, what: &str, ctx: &str) -> R<T> {
        self.unknown_char()?;
        let found = self.peek().describe();
        let ctx = if ctx.is_empty() {
            String::new()
        } else {
            format!(" {ctx}")
        };
        if what == "';'" && self.pos > 0 {
            let prev = &self.toks[self.pos - 1];
            if prev.line != self.peek().line {
                let mut sp = prev.span.clone();
                sp.col = sp.col.saturating_add((prev.end - prev.start) as u32);
                return self.err_at(sp, format!("expected {what}{ctx}, found {found}"));
            }
        }
        self.err(format!("expected {what}{ctx}, found {found}"))
    }

    fn expect_punct(&mut self, p: &str, ctx: &str) -> R<Span> {
        if self.is_punct(p) {
            Ok(self.bump().span)
        } else {
            self.expected(&format!("'{p}'"), ctx)
        }
    }

    fn expect_kw(&mut self, k: &str, ctx: &str) -> R<Span> {
        if self.is_kw(k) {
            Ok(self.bump().span)
        } else {
            self.expected(&format!("'{k}'"), ctx)
        }
    }

    fn ident(&mut self, ctx: &str) -> R<Ident> {
        match &self.peek().kind {
            TokKind::Ident(s) => {
                let name = s.clone();
                let span = self.bump().span;
                Ok(Ident { name, span })
            }
            _ => self.expected("a name", ctx),
        }
    }

    /// `>` closing type arguments/parameters.
    fn close_angle(&mut self, ctx: &str) -> R<()> {
        self.expect_punct(">", ctx).map(|_| ())
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("program nested too deeply");
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn is_type_name(&self, n: &str) -> bool {
        self.types.contains(n) || self.type_params.iter().any(|s| s.iter().any(|t| t == n))
    }

    // ---- program and declarations ---------------------------------------

    pub fn program(mut self) -> R<Program> {
        let mut decls = Vec::new();
        while !matches!(self.peek().kind, TokKind::Eof) {
            if self.eat_punct(";") {
                continue;
            }
            decls.push(self.decl()?);
        }
        Ok(Program { decls })
    }

    fn decl(&mut self) -> R<Decl> {
        let annotations = self.annotations()?;
        let span = self.span();
        let kw = match &self.peek().kind {
            TokKind::Ident(s) => s.clone(),
            TokKind::Punct(".") => String::new(),
            _ => return self.expected("a declaration", "at top level"),
        };
        match kw.as_str() {
            "const" => Ok(Decl::Const(self.const_decl(annotations)?)),
            "typedef" | "type" => {
                self.bump();
                let ty = self.ty()?;
                let name = self.ident(&format!("in {kw}"))?;
                self.expect_punct(";", &format!("after {kw} {}", name.name))?;
                self.types.insert(name.name.clone());
                Ok(Decl::Typedef {
                    annotations,
                    ty,
                    name,
                    new_type: kw == "type",
                    span,
                })
            }
            "header" | "header_union" | "struct" => {
                Ok(Decl::Aggregate(self.aggregate(annotations)?))
            }
            "enum" => self.enum_decl(annotations),
            "error" | "match_kind" if self.is_punct_at(1, "{") => {
                self.bump();
                self.bump();
                let mut members = Vec::new();
                while !self.is_punct("}") {
                    members.push(self.ident(&format!("in {kw} declaration"))?);
                    if !self.eat_punct(",") {
                        break;
                    }
                }
                self.expect_punct("}", &format!("to close {kw} declaration"))?;
                Ok(if kw == "error" {
                    Decl::Error { members, span }
                } else {
                    Decl::MatchKind { members, span }
                })
            }
            "extern" => self.extern_decl(annotations),
            "parser" | "control" => self.parser_or_control(annotations),
            "package" => {
                self.bump();
                let p = self.type_proto(annotations, "package")?;
                self.expect_punct(";", &format!("after package {}", p.name.name))?;
                Ok(Decl::Package(p))
            }
            "action" => Ok(Decl::Action(self.action(annotations)?)),
            _ => {
                // `Type(args) name;` or `R name<T>(params) { ... }`.
                let ty = self.ty()?;
                if self.is_punct("(") {
                    return Ok(Decl::Instantiation(self.instantiation_rest(
                        annotations,
                        ty,
                        span,
                    )?));
                }
                let name = self.ident("in a declaration (function or instantiation)")?;
                let f = self.function_rest(annotations, Some(ty), name, span)?;
                Ok(Decl::Function(f))
            }
        }
    }

    fn const_decl(&mut self, annotations: Vec<Annotation>) -> R<ConstDecl> {
        let span = self.expect_kw("const", "")?;
        let ty = self.ty()?;
        let name = self.ident("in const declaration")?;
        self.expect_punct("=", &format!("in const declaration of {}", name.name))?;
        let value = self.expr()?;
        self.expect_punct(";", &format!("after const declaration of {}", name.name))?;
        Ok(ConstDecl {
            annotations,
            ty,
            name,
            value,
            span,
        })
    }

    fn aggregate(&mut self, annotations: Vec<Annotation>) -> R<AggregateDecl> {
        let span = self.span();
        let kw = self.ident("")?.name;
        let kind = match kw.as_str() {
            "header" => AggregateKind::Header,
            "header_union" => AggregateKind::HeaderUnion,
            _ => AggregateKind::Struct,
        };
        let name = self.ident(&format!("after '{kw}'"))?;
        self.types.insert(name.name.clone());
        let type_params = self.opt_type_params()?;
        self.type_params
            .push(type_params.iter().map(|i| i.name.clone()).collect());
        let r = (|| {
            self.expect_punct("{", &format!("to open {kw} {}", name.name))?;
            let mut fields = Vec::new();
            while !self.is_punct("}") {
                let annotations = self.annotations()?;
                let ty = self.ty()?;
                let fname = self.ident(&format!("as field name in {kw} {}", name.name))?;
                self.expect_punct(
                    ";",
                    &format!("after field {} of {kw} {}", fname.name, name.name),
                )?;
                fields.push(FieldDecl {
                    annotations,
                    ty,
                    name: fname,
                });
                if matches!(self.peek().kind, TokKind::Eof) {
                    break;
                }
            }
            self.expect_punct("}", &format!("to close {kw} {}", name.name))?;
            Ok(fields)
        })();
        self.type_params.pop();
        Ok(AggregateDecl {
            kind,
            annotations,
            name,
            type_params,
            fields: r?,
            span,
        })
    }

    fn enum_decl(&mut self, annotations: Vec<Annotation>) -> R<Decl> {
        let span = self.bump().span;
        // `enum bit<8> E {` / `enum T E {` vs `enum E {`.
        let underlying = if self.is_ident() && !self.is_punct_at(1, "{") {
            Some(self.ty()?)
        } else {
            None
        };
        let name = self.ident("as enum name")?;
        self.types.insert(name.name.clone());
        self.expect_punct("{", &format!("to open enum {}", name.name))?;
        let mut members = Vec::new();
        while !self.is_punct("}") {
            let _ = self.annotations()?;
            let m = self.ident(&format!("in enum {}", name.name))?;
            let v = if self.eat_punct("=") {
                Some(self.expr()?)
            } else {
                None
            };
            members.push((m, v));
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct("}", &format!("to close enum {}", name.name))?;
        Ok(Decl::Enum {
            annotations,
            name,
            underlying,
            members,
            span,
        })
    }

    fn extern_decl(&mut self, mut annotations: Vec<Annotation>) -> R<Decl> {
        let span = self.bump().span;
        annotations.extend(self.annotations()?);
        // Object: `extern Name [<T,...>] {`.
        let is_object = self.is_ident()
            && (self.is_punct_at(1, "{")
                || (self.is_punct_at(1, "<") && {
                    let save = self.pos;
                    self.bump();
                    self.bump();
                    let ok = self.type_params_list().is_ok() && self.is_punct("{");
                    self.pos = save;
                    ok
                }));
        if !is_object {
            let ret = self.ty()?;
            let name = self.ident("as extern function name")?;
            let proto = self.proto_rest(annotations, Some(ret), name, span, false)?;
            self.expect_punct(";", &format!("after extern function {}", proto.name.name))?;
            return Ok(Decl::ExternFunction(proto));
        }
        let name = self.ident("as extern name")?;
        self.types.insert(name.name.clone());
        let type_params = self.opt_type_params()?;
        self.type_params
            .push(type_params.iter().map(|i| i.name.clone()).collect());
        let r = (|| {
            self.expect_punct("{", &format!("to open extern {}", name.name))?;
            let mut methods = Vec::new();
            while !self.is_punct("}") && !matches!(self.peek().kind, TokKind::Eof) {
                let annotations = self.annotations()?;
                let mspan = self.span();
                let is_abstract = self.eat_kw("abstract");
                let m = if self.is_kw(&name.name) && self.is_punct_at(1, "(") {
                    let cname = self.ident("")?;
                    self.proto_rest(annotations, None, cname, mspan, is_abstract)?
                } else {
                    let ret = self.ty()?;
                    let mname = self.ident(&format!("as method name in extern {}", name.name))?;
                    self.proto_rest(annotations, Some(ret), mname, mspan, is_abstract)?
                };
                self.expect_punct(
                    ";",
                    &format!("after method {} of extern {}", m.name.name, name.name),
                )?;
                methods.push(m);
            }
            self.expect_punct("}", &format!("to close extern {}", name.name))?;
            Ok(methods)
        })();
        self.type_params.pop();
        Ok(Decl::Extern(ExternDecl {
            annotations,
            name,
            type_params,
            methods: r?,
            span,
        }))
    }

    /// After the name: `<T>(params)`; the type parameters are in scope for
    /// the parameters.
    fn proto_rest(
        &mut self,
        annotations: Vec<Annotation>,
        ret: Option<Type>,
        name: Ident,
        span: Span,
        is_abstract: bool,
    ) -> R<FunctionProto> {
        let type_params = self.opt_type_params()?;
        self.type_params
            .push(type_params.iter().map(|i| i.name.clone()).collect());
        let params = self.params(&name.name);
        self.type_params.pop();
        Ok(FunctionProto {
            annotations,
            ret,
            name,
            type_params,
            params: params?,
            is_abstract,
            span,
        })
    }

    fn function_rest(
        &mut self,
        annotations: Vec<Annotation>,
        ret: Option<Type>,
        name: Ident,
        span: Span,
    ) -> R<FunctionDecl> {
        let type_params = self.opt_type_params()?;
        self.type_params
            .push(type_params.iter().map(|i| i.name.clone()).collect());
        let r = (|| {
            let params = self.params(&name.name)?;
            if !self.is_punct("{") {
                return self.expected(
                    "'{'",
                    &format!("to open the body of function {}", name.name),
                );
            }
            let body = self.block()?;
            Ok((params, body))
        })();
        self.type_params.pop();
        let (params, body) = r?;
        Ok(FunctionDecl {
            proto: FunctionProto {
                annotations,
                ret,
                name,
                type_params,
                params,
                is_abstract: false,
                span,
            },
            body,
        })
    }

    fn type_proto(&mut self, annotations: Vec<Annotation>, what: &str) -> R<TypeProto> {
        let span = self.span();
        let name = self.ident(&format!("after '{what}'"))?;
        self.types.insert(name.name.clone());
        let type_params = self.opt_type_params()?;
        self.type_params
            .push(type_params.iter().map(|i| i.name.clone()).collect());
        let params = self.params(&name.name);
        self.type_params.pop();
        Ok(TypeProto {
            annotations,
            name,
            type_params,
            params: params?,
            span,
        })
    }

    fn parser_or_control(&mut self, annotations: Vec<Annotation>) -> R<Decl> {
        let kw = self.bump();
        let is_parser = matches!(&kw.kind, TokKind::Ident(s) if s == "parser");
        let what = if is_parser { "parser" } else { "control" };
        let span = kw.span;
        let proto = self.type_proto(annotations, what)?;
        if self.eat_punct(";") {
            return Ok(if is_parser {
                Decl::ParserType(proto)
            } else {
                Decl::ControlType(proto)
            });
        }
        self.type_params
            .push(proto.type_params.iter().map(|i| i.name.clone()).collect());
        let r = self.parser_or_control_body(proto, is_parser, span);
        self.type_params.pop();
        r
    }

    fn parser_or_control_body(&mut self, proto: TypeProto, is_parser: bool, span: Span) -> R<Decl> {
        let what = if is_parser { "parser" } else { "control" };
        let ctor_params = if self.is_punct("(") {
            self.params(&proto.name.name)?
        } else {
            Vec::new()
        };
        self.expect_punct("{", &format!("or ';' after {what} {}", proto.name.name))?;
        let mut locals = Vec::new();
        let mut states = Vec::new();
        let apply;
        loop {
            let annotations = self.annotations()?;
            let lspan = self.span();
            if is_parser && self.is_kw("state") {
                states.push(self.state(annotations)?);
                continue;
            }
            if is_parser && self.is_punct("}") {
                self.bump();
                return Ok(Decl::Parser(ParserDecl {
                    annotations: proto.annotations,
                    name: proto.name,
                    type_params: proto.type_params,
                    params: proto.params,
                    ctor_params,
                    locals,
                    states,
                    span,
                }));
            }
            if !is_parser
                && self.is_kw("apply")
                && (self.is_punct_at(1, "{") || self.is_punct_at(1, "@"))
            {
                self.bump();
                // `apply @noWarn(...) { }`: the block has no annotations in the tree.
                let _ = self.annotations()?;
                apply = self.block()?;
                break;
            }
            if matches!(self.peek().kind, TokKind::Eof) {
                return self.expected("'}'", &format!("to close {what} {}", proto.name.name));
            }
            if !is_parser && self.is_punct("}") {
                return self.err(format!("control {} has no apply block", proto.name.name));
            }
            if !states.is_empty() {
                return self.expected("'state' or '}'", &format!("in parser {}", proto.name.name));
            }
            let l = if self.is_kw("const") {
                LocalDecl::Const(self.const_decl(annotations)?)
            } else if !is_parser && self.is_kw("action") {
                LocalDecl::Action(self.action(annotations)?)
            } else if !is_parser && self.is_kw("table") {
                LocalDecl::Table(self.table(annotations)?)
            } else if self.is_kw("value_set") {
                return Err(FrontError::new(
                    ErrorKind::Unsupported,
                    lspan,
                    "unsupported: parser value_set",
                ));
            } else {
                let ty = self.ty()?;
                if self.is_punct("(") {
                    LocalDecl::Instantiation(self.instantiation_rest(annotations, ty, lspan)?)
                } else {
                    let name = self.ident(&format!(
                        "in a local declaration of {what} {}",
                        proto.name.name
                    ))?;
                    if self.is_punct("(") || self.is_punct("<") {
                        LocalDecl::Function(self.function_rest(
                            annotations,
                            Some(ty),
                            name,
                            lspan,
                        )?)
                    } else {
                        LocalDecl::Var(self.var_rest(annotations, ty, name, lspan)?)
                    }
                }
            };
            locals.push(l);
        }
        self.expect_punct(
            "}",
            &format!("to close control {} after its apply block", proto.name.name),
        )?;
        Ok(Decl::Control(ControlDecl {
            annotations: proto.annotations,
            name: proto.name,
            type_params: proto.type_params,
            params: proto.params,
            ctor_params,
            locals,
            apply,
            span,
        }))
    }

    fn var_rest(
        &mut self,
        annotations: Vec<Annotation>,
        ty: Type,
        name: Ident,
        span: Span,
    ) -> R<VarDecl> {
        let init = if self.eat_punct("=") {
            Some(self.expr()?)
        } else {
            None
        };
        self.expect_punct(";", &format!("after declaration of {}", name.name))?;
        Ok(VarDecl {
            annotations,
            ty,
            name,
            init,
            span,
        })
    }

    /// After the type of `Type(args) name [= { ... }];`.
    fn instantiation_rest(
        &mut self,
        annotations: Vec<Annotation>,
        ty: Type,
        span: Span,
    ) -> R<Instantiation> {
        let args = self.args()?;
        let name = self.ident("as instance name")?;
        let mut initializer = Vec::new();
        if self.eat_punct("=") {
            self.expect_punct("{", &format!("to open the initializer of {}", name.name))?;
            while !self.is_punct("}") && !matches!(self.peek().kind, TokKind::Eof) {
                let ann = self.annotations()?;
                let fspan = self.span();
                let ret = self.ty()?;
                let fname = self.ident(&format!("in the initializer of {}", name.name))?;
                initializer.push(self.function_rest(ann, Some(ret), fname, fspan)?);
            }
            self.expect_punct("}", &format!("to close the initializer of {}", name.name))?;
        }
        self.expect_punct(";", &format!("after instantiation of {}", name.name))?;
        Ok(Instantiation {
            annotations,
            ty,
            args,
            name,
            initializer,
            span,
        })
    }

    fn action(&mut self, annotations: Vec<Annotation>) -> R<ActionDecl> {
        let span = self.expect_kw("action", "")?;
        let name = self.ident("after 'action'")?;
        let params = self.params(&name.name)?;
        if !self.is_punct("{") {
            return self.expected("'{'", &format!("to open the body of action {}", name.name));
        }
        let body = self.block()?;
        Ok(ActionDecl {
            annotations,
            name,
            params,
            body,
            span,
        })
    }

    fn opt_type_params(&mut self) -> R<Vec<Ident>> {
        if self.eat_punct("<") {
            self.type_params_list()
        } else {
            Ok(Vec::new())
        }
    }

    /// After `<`: `T, U>`.
    fn type_params_list(&mut self) -> R<Vec<Ident>> {
        let mut v = Vec::new();
        loop {
            v.push(self.ident("as type parameter")?);
            if !self.eat_punct(",") {
                break;
            }
        }
        self.close_angle("to close type parameters")?;
        Ok(v)
    }

    fn params(&mut self, of: &str) -> R<Vec<Param>> {
        self.expect_punct("(", &format!("to open the parameters of {of}"))?;
        let mut v = Vec::new();
        if self.eat_punct(")") {
            return Ok(v);
        }
        loop {
            let annotations = self.annotations()?;
            let direction = if self.eat_kw("in") {
                Direction::In
            } else if self.eat_kw("out") {
                Direction::Out
            } else if self.eat_kw("inout") {
                Direction::InOut
            } else {
                Direction::None
            };
            let ty = self.ty()?;
            let name = self.ident(&format!("as parameter name of {of}"))?;
            let default = if self.eat_punct("=") {
                Some(self.expr()?)
            } else {
                None
            };
            v.push(Param {
                annotations,
                direction,
                ty,
                name,
                default,
            });
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct(")", &format!("to close the parameters of {of}"))?;
        Ok(v)
    }

    // ---- annotations ----------------------------------------------------

    fn annotations(&mut self) -> R<Vec<Annotation>> {
        let mut v = Vec::new();
        while self.is_punct("@") {
            v.push(self.annotation()?);
        }
        Ok(v)
    }

    fn annotation(&mut self) -> R<Annotation> {
        let at = self.bump();
        let span = at.span.clone();
        let name_tok = self.peek().clone();
        let name = match &name_tok.kind {
            TokKind::Ident(s) if name_tok.start == at.end => s.clone(),
            _ => return self.expected("an annotation name", "after '@'"),
        };
        self.bump();
        if name == "pragma" {
            // Unstructured: the rest of the line.
            let line = name_tok.line;
            let start = self.peek().start;
            let mut end = start;
            while self.peek().line == line && !matches!(self.peek().kind, TokKind::Eof) {
                end = self.bump().end;
            }
            return Ok(Annotation {
                name,
                args: Vec::new(),
                raw: self
                    .src
                    .text
                    .get(start..end.max(start))
                    .unwrap_or("")
                    .to_string(),
                span,
            });
        }
        let (open, close) = if self.is_punct("(") {
            ("(", ")")
        } else if self.is_punct("[") {
            ("[", "]")
        } else {
            return Ok(Annotation {
                name,
                args: Vec::new(),
                raw: String::new(),
                span,
            });
        };
        let open_tok = self.bump();
        let body_start = self.pos;
        let mut depth = 1usize;
        loop {
            match &self.peek().kind {
                TokKind::Eof => {
                    return self.err_at(
                        open_tok.span,
                        format!("unterminated annotation @{name}{open}...{close}"),
                    );
                }
                TokKind::Punct(p) if ["(", "[", "{"].contains(p) => depth += 1,
                TokKind::Punct(p) if [")", "]", "}"].contains(p) => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            self.bump();
        }
        let body_end = self.pos;
        let close_tok = self.bump();
        let raw = self
            .src
            .text
            .get(open_tok.end..close_tok.start)
            .unwrap_or("")
            .trim()
            .to_string();
        let mut args = Vec::new();
        if open == "(" && body_end > body_start {
            // Parse the body as expressions; keep them only if that works.
            let save = self.pos;
            let save_depth = self.depth;
            self.pos = body_start;
            let mut ok = true;
            loop {
                match self.expr() {
                    Ok(e) => args.push(e),
                    Err(_) => {
                        ok = false;
                        break;
                    }
                }
                if !self.eat_punct(",") {
                    break;
                }
            }
            if !ok || self.pos != body_end {
                args.clear();
            }
            self.pos = save;
            self.depth = save_depth;
        }
        Ok(Annotation {
            name,
            args,
            raw,
            span,
        })
    }

    // ---- types ----------------------------------------------------------

    fn ty(&mut self) -> R<Type> {
        self.enter()?;
        let r = self.ty_inner();
        self.leave();
        r
    }

    fn ty_inner(&mut self) -> R<Type> {
        let span = self.span();
        let mut t = if self.eat_punct(".") {
            let name = self.ident("after '.' in a type")?;
            Type::Named {
                name,
                args: Vec::new(),
            }
        } else {
            let name = match &self.peek().kind {
                TokKind::Ident(s) => s.clone(),
                _ => return self.expected("a type", ""),
            };
            if STMT_KEYWORDS.contains(&name.as_str()) {
                return self.expected("a type", "");
            }
            let id = self.ident("")?;
            match name.as_str() {
                "bit" | "int" | "varbit" => {
                    if self.is_punct("<") {
                        self.bump();
                        let w = self.width()?;
                        self.close_angle(&format!("after the width of {name}<...>"))?;
                        match name.as_str() {
                            "bit" => Type::Bit(Box::new(w)),
                            "int" => Type::Int(Box::new(w)),
                            _ => Type::Varbit(Box::new(w)),
                        }
                    } else {
                        match name.as_str() {
                            "bit" => Type::Bit(Box::new(Expr::Int(
                                IntLit {
                                    value: 1u32.into(),
                                    negative: false,
                                    width: None,
                                },
                                span.clone(),
                            ))),
                            "int" => Type::InfInt,
                            _ => return self.expected("'<'", "after 'varbit'"),
                        }
                    }
                }
                "bool" => Type::Bool,
                "error" => Type::Error,
                "string" => Type::String,
                "void" => Type::Void,
                "match_kind" => Type::MatchKind,
                "_" => Type::DontCare,
                "tuple" | "list" => {
                    self.expect_punct("<", &format!("after '{name}'"))?;
                    let args = self.type_args_rest()?;
                    Type::Tuple(args)
                }
                _ => {
                    let args = if self.is_punct("<") {
                        self.bump();
                        self.type_args_rest()?
                    } else {
                        Vec::new()
                    };
                    Type::Named { name: id, args }
                }
            }
        };
        let d0 = self.depth;
        while self.is_punct("[") {
            self.enter()?;
            self.bump();
            let size = self.expr()?;
            self.expect_punct("]", "to close the size of a header stack type")?;
            t = Type::Stack {
                elem: Box::new(t),
                size: Box::new(size),
            };
        }
        self.depth = d0;
        Ok(t)
    }

    /// `W` in `bit<W>`: a literal, a name or a parenthesised expression.
    fn width(&mut self) -> R<Expr> {
        match &self.peek().kind {
            TokKind::Int(l) if self.is_punct_at(1, ">") => {
                let e = Expr::Int(l.clone(), self.span());
                self.bump();
                Ok(e)
            }
            _ => {
                // `bit<W + 1>` (p4c accepts unparenthesised width expressions).
                let saved = std::mem::replace(&mut self.no_angle, true);
                let e = self.expr();
                self.no_angle = saved;
                e
            }
        }
    }

    /// After `<`: `T, U>` (type arguments; `_` allowed).
    fn type_args_rest(&mut self) -> R<Vec<Type>> {
        let mut v = Vec::new();
        if self.eat_punct(">") {
            return Ok(v);
        }
        loop {
            if matches!(self.peek().kind, TokKind::Int(_)) {
                // A value as type argument is not P4-16; refuse clearly.
                return self.err("expected a type argument, found integer literal");
            }
            v.push(self.ty()?);
            if !self.eat_punct(",") {
                break;
            }
        }
        self.close_angle("to close type arguments")?;
        Ok(v)
    }

    // ---- controls: tables -------------------------------------------------

    fn table(&mut self, annotations: Vec<Annotation>) -> R<TableDecl> {
        let span = self.expect_kw("table", "")?;
        let name = self.ident("after 'table'")?;
        let tn = name.name.clone();
        self.expect_punct("{", &format!("to open table {tn}"))?;
        let mut props = Vec::new();
        while !self.is_punct("}") {
            if matches!(self.peek().kind, TokKind::Eof) {
                return self.expected("'}'", &format!("to close table {tn}"));
            }
            let pann = self.annotations()?;
            let pspan = self.span();
            let is_const = self.eat_kw("const");
            let pname = self.ident(&format!("as a property of table {tn}"))?;
            match pname.name.as_str() {
                "key" => {
                    self.expect_punct("=", &format!("after 'key' in table {tn}"))?;
                    self.expect_punct("{", &format!("to open the key of table {tn}"))?;
                    let mut keys = Vec::new();
                    while !self.is_punct("}") {
                        let mut annotations = self.annotations()?;
                        let kspan = self.span();
                        let expr = self.expr()?;
                        self.expect_punct(":", &format!("after a key expression of table {tn}"))?;
                        let match_kind =
                            self.ident(&format!("as match kind in the key of table {tn}"))?;
                        annotations.extend(self.annotations()?);
                        self.expect_punct(";", &format!("after a key element of table {tn}"))?;
                        keys.push(KeyElement {
                            expr,
                            match_kind,
                            annotations,
                            span: kspan,
                        });
                    }
                    self.bump();
                    props.push(TableProperty::Key(keys));
                }
                "actions" => {
                    self.expect_punct("=", &format!("after 'actions' in table {tn}"))?;
                    self.expect_punct("{", &format!("to open the actions of table {tn}"))?;
                    let mut acts = Vec::new();
                    while !self.is_punct("}") {
                        let annotations = self.annotations()?;
                        let aspan = self.span();
                        // A leading `.` (top-level name) is dropped.
                        self.eat_punct(".");
                        let aname = self.ident(&format!("in the actions of table {tn}"))?;
                        let args = if self.is_punct("(") {
                            self.args()?
                        } else {
                            Vec::new()
                        };
                        if !self.eat_punct(";") && !self.eat_punct(",") {
                            return self.expected(
                                "';'",
                                &format!("after action {} in table {tn}", aname.name),
                            );
                        }
                        acts.push(ActionRef {
                            annotations,
                            name: aname,
                            args,
                            span: aspan,
                        });
                    }
                    self.bump();
                    props.push(TableProperty::Actions(acts));
                }
                "entries" => {
                    self.expect_punct("=", &format!("after 'entries' in table {tn}"))?;
                    self.expect_punct("{", &format!("to open the entries of table {tn}"))?;
                    let mut entries = Vec::new();
                    while !self.is_punct("}") {
                        if matches!(self.peek().kind, TokKind::Eof) {
                            return self
                                .expected("'}'", &format!("to close the entries of table {tn}"));
                        }
                        entries.push(self.entry(&tn)?);
                    }
                    self.bump();
                    props.push(TableProperty::Entries {
                        entries,
                        is_const,
                        span: pspan,
                    });
                }
                "default_action" => {
                    self.expect_punct("=", &format!("after 'default_action' in table {tn}"))?;
                    let action = self.expr()?;
                    self.expect_punct(";", &format!("after default_action of table {tn}"))?;
                    props.push(TableProperty::DefaultAction {
                        action,
                        is_const,
                        span: pspan,
                    });
                }
                _ => {
                    self.expect_punct(
                        "=",
                        &format!("after property '{}' of table {tn}", pname.name),
                    )?;
                    let value = self.expr()?;
                    self.expect_punct(
                        ";",
                        &format!("after property '{}' of table {tn}", pname.name),
                    )?;
                    props.push(TableProperty::Other {
                        annotations: pann,
                        name: pname,
                        value,
                        is_const,
                        span: pspan,
                    });
                }
            }
        }
        self.bump();
        Ok(TableDecl {
            annotations,
            name,
            props,
            span,
        })
    }

    fn entry(&mut self, tn: &str) -> R<TableEntry> {
        let mut annotations = self.annotations()?;
        let span = self.span();
        let is_const = self.eat_kw("const");
        let priority = if self.is_kw("priority") && self.is_punct_at(1, "=") {
            self.bump();
            self.bump();
            let p = self.expr()?;
            self.expect_punct(
                ":",
                &format!("after the priority of an entry of table {tn}"),
            )?;
            Some(p)
        } else {
            None
        };
        let keysets = self.keyset_tuple()?;
        self.expect_punct(":", &format!("after the keys of an entry of table {tn}"))?;
        let action = self.expr()?;
        annotations.extend(self.annotations()?);
        self.expect_punct(";", &format!("after an entry of table {tn}"))?;
        Ok(TableEntry {
            annotations,
            priority,
            keysets,
            action,
            is_const,
            span,
        })
    }

    /// `(k1, k2)` (split) or a single keyset, followed by `:`.
    fn keyset_tuple(&mut self) -> R<Vec<Expr>> {
        if self.is_punct("(") {
            let save = self.pos;
            let save_depth = self.depth;
            self.bump();
            let r = (|| {
                let mut v = Vec::new();
                loop {
                    v.push(self.keyset()?);
                    if !self.eat_punct(",") {
                        break;
                    }
                }
                self.expect_punct(")", "to close a keyset tuple")?;
                if !self.is_punct(":") {
                    return self.expected("':'", "after a keyset");
                }
                Ok(v)
            })();
            match r {
                Ok(v) => return Ok(v),
                Err(_) => {
                    self.pos = save;
                    self.depth = save_depth;
                }
            }
        }
        Ok(vec![self.keyset()?])
    }

    /// `default`, `_`, `e`, `e &&& m`, `a .. b`.
    fn keyset(&mut self) -> R<Expr> {
        let span = self.span();
        if self.is_kw("default") && !self.is_punct_at(1, ".") {
            self.bump();
            return Ok(Expr::Default(span));
        }
        if self.is_kw("_") {
            self.bump();
            return Ok(Expr::DontCare(span));
        }
        let e = self.expr()?;
        if self.eat_punct("&&&") {
            let m = self.expr()?;
            return Ok(Expr::Mask(Box::new(e), Box::new(m), span));
        }
        if self.eat_punct("..") {
            let m = self.expr()?;
            return Ok(Expr::Range(Box::new(e), Box::new(m), span));
        }
        Ok(e)
    }

    // ---- parsers ----------------------------------------------------------

    fn state(&mut self, annotations: Vec<Annotation>) -> R<ParserState> {
        let span = self.expect_kw("state", "")?;
        let name = self.ident("after 'state'")?;
        self.expect_punct("{", &format!("to open state {}", name.name))?;
        let mut body = Vec::new();
        let mut transition = None;
        while !self.is_punct("}") {
            if matches!(self.peek().kind, TokKind::Eof) {
                return self.expected("'}'", &format!("to close state {}", name.name));
            }
            if self.is_kw("transition") {
                let tspan = self.bump().span;
                if self.is_kw("select") && self.is_punct_at(1, "(") {
                    self.bump();
                    self.bump();
                    let mut exprs = Vec::new();
                    while !self.is_punct(")") {
                        exprs.push(self.expr()?);
                        if !self.eat_punct(",") {
                            break;
                        }
                    }
                    self.expect_punct(")", "to close select(...)")?;
                    self.expect_punct("{", "to open the cases of select")?;
                    let mut cases = Vec::new();
                    while !self.is_punct("}") {
                        if matches!(self.peek().kind, TokKind::Eof) {
                            return self.expected("'}'", "to close the cases of select");
                        }
                        let _ = self.annotations()?;
                        let cspan = self.span();
                        let keysets = self.keyset_tuple()?;
                        self.expect_punct(":", "after a select case's keyset")?;
                        self.eat_punct(".");
                        let next = self.ident("as the next state of a select case")?;
                        self.expect_punct(";", &format!("after select case -> {}", next.name))?;
                        cases.push(SelectCase {
                            keysets,
                            next,
                            span: cspan,
                        });
                    }
                    self.bump();
                    transition = Some(Transition::Select {
                        exprs,
                        cases,
                        span: tspan,
                    });
                } else {
                    self.eat_punct(".");
                    let next = self.ident("after 'transition'")?;
                    self.expect_punct(";", &format!("after 'transition {}'", next.name))?;
                    transition = Some(Transition::Direct(next));
                }
                if !self.is_punct("}") {
                    return self.expected(
                        "'}'",
                        &format!("after the transition of state {}", name.name),
                    );
                }
                break;
            }
            body.push(self.stmt()?);
        }
        self.bump();
        Ok(ParserState {
            annotations,
            name,
            body,
            transition,
            span,
        })
    }

    // ---- statements -------------------------------------------------------

    fn block(&mut self) -> R<Block> {
        let span = self.expect_punct("{", "to open a block")?;
        self.enter()?;
        let mut stmts = Vec::new();
        while !self.is_punct("}") {
            if matches!(self.peek().kind, TokKind::Eof) {
                let e = self.err_at(span, "unterminated block: missing '}'");
                self.leave();
                return e;
            }
            match self.stmt() {
                Ok(s) => stmts.push(s),
                Err(e) => {
                    self.leave();
                    return Err(e);
                }
            }
        }
        self.bump();
        self.leave();
        Ok(Block { stmts, span })
    }

    fn stmt(&mut self) -> R<Stmt> {
        self.enter()?;
        let r = self.stmt_inner();
        self.leave();
        r
    }

    fn stmt_inner(&mut self) -> R<Stmt> {
        let annotations = self.annotations()?;
        let span = self.span();
        if self.is_punct("{") {
            return Ok(Stmt::Block(self.block()?));
        }
        if self.eat_punct(";") {
            return Ok(Stmt::Empty(span));
        }
        if self.eat_kw("if") {
            self.expect_punct("(", "after 'if'")?;
            let cond = self.expr()?;
            self.expect_punct(")", "to close the condition of 'if'")?;
            let then = Box::new(self.stmt()?);
            let otherwise = if self.eat_kw("else") {
                Some(Box::new(self.stmt()?))
            } else {
                None
            };
            return Ok(Stmt::If {
                cond,
                then,
                otherwise,
                span,
            });
        }
        if self.eat_kw("switch") {
            self.expect_punct("(", "after 'switch'")?;
            let expr = self.expr()?;
            self.expect_punct(")", "to close the switch expression")?;
            self.expect_punct("{", "to open the cases of switch")?;
            let mut cases = Vec::new();
            while !self.is_punct("}") {
                if matches!(self.peek().kind, TokKind::Eof) {
                    return self.expected("'}'", "to close switch");
                }
                let cspan = self.span();
                let label = if self.is_kw("default") {
                    self.bump();
                    Expr::Default(cspan.clone())
                } else {
                    self.expr()?
                };
                self.expect_punct(":", "after a switch label")?;
                let body = if self.is_punct("{") {
                    Some(self.block()?)
                } else {
                    None
                };
                cases.push(SwitchCase {
                    label,
                    body,
                    span: cspan,
                });
            }
            self.bump();
            return Ok(Stmt::Switch { expr, cases, span });
        }
        if self.is_kw("for") && self.is_punct_at(1, "(") {
            return Err(FrontError::new(
                ErrorKind::Unsupported,
                span,
                "unsupported: 'for' loop (P4-16 1.2.5)",
            ));
        }
        if self.eat_kw("exit") {
            self.expect_punct(";", "after 'exit'")?;
            return Ok(Stmt::Exit(span));
        }
        if self.eat_kw("return") {
            let v = if self.is_punct(";") {
                None
            } else {
                Some(self.expr()?)
            };
            self.expect_punct(";", "after 'return'")?;
            return Ok(Stmt::Return(v, span));
        }
        if self.is_kw("const") {
            return Ok(Stmt::Const(self.const_decl(annotations)?));
        }
        if let Some(is_inst) = self.looks_like_decl() {
            let ty = self.ty()?;
            if is_inst {
                return Ok(Stmt::Instantiation(self.instantiation_rest(
                    annotations,
                    ty,
                    span,
                )?));
            }
            let name = self.ident("in a variable declaration")?;
            return Ok(Stmt::Var(self.var_rest(annotations, ty, name, span)?));
        }
        let lhs = self.expr()?;
        if self.eat_punct("=") {
            let rhs = self.expr()?;
            self.expect_punct(";", "after assignment")?;
            return Ok(Stmt::Assign { lhs, rhs, span });
        }
        if let Some((op, n)) = self.compound_assign() {
            // `a op= b` (P4-16 1.2.5) is kept as `a = a op b`.
            let ospan = self.span();
            for _ in 0..n {
                self.bump();
            }
            let rhs = self.expr()?;
            self.expect_punct(";", "after assignment")?;
            let rhs = Expr::Binary(op, Box::new(lhs.clone()), Box::new(rhs), ospan);
            return Ok(Stmt::Assign { lhs, rhs, span });
        }
        if matches!(lhs, Expr::Call { .. }) {
            self.expect_punct(";", "after method call")?;
            return Ok(Stmt::Call(lhs));
        }
        self.expected("'=' or '('", "in a statement (assignment or call)")
    }

    /// `+=`-style operator here: its operation and token count (`>>=` is
    /// `>` followed by `>=`).
    fn compound_assign(&self) -> Option<(BinOp, usize)> {
        let TokKind::Punct(p) = &self.peek().kind else {
            return None;
        };
        Some(match *p {
            "+=" => (BinOp::Add, 1),
            "-=" => (BinOp::Sub, 1),
            "*=" => (BinOp::Mul, 1),
            "/=" => (BinOp::Div, 1),
            "%=" => (BinOp::Mod, 1),
            "&=" => (BinOp::BitAnd, 1),
            "|=" => (BinOp::BitOr, 1),
            "^=" => (BinOp::BitXor, 1),
            "<<=" => (BinOp::Shl, 1),
            "|+|=" => (BinOp::AddSat, 1),
            "|-|=" => (BinOp::SubSat, 1),
            ">" if self.is_punct_at(1, ">=") && self.peek_at(1).start == self.peek().end => {
                (BinOp::Shr, 2)
            }
            _ => return None,
        })
    }

    /// Whether a declaration starts here: `Some(false)` for `Type name`,
    /// `Some(true)` for `Type(args) name`.
    fn looks_like_decl(&mut self) -> Option<bool> {
        if !self.is_ident() && !self.is_punct(".") {
            return None;
        }
        let save = self.pos;
        let save_depth = self.depth;
        let mut r = None;
        if self.ty().is_ok() {
            if self.is_ident() {
                r = Some(false);
            } else if self.is_punct("(") {
                let mut depth = 0usize;
                loop {
                    match &self.peek().kind {
                        TokKind::Eof => break,
                        TokKind::Punct("(") => depth += 1,
                        TokKind::Punct(")") => {
                            depth -= 1;
                            if depth == 0 {
                                self.bump();
                                break;
                            }
                        }
                        _ => {}
                    }
                    self.bump();
                }
                if depth == 0
                    && self.is_ident()
                    && (self.is_punct_at(1, ";") || self.is_punct_at(1, "="))
                {
                    r = Some(true);
                }
            }
        }
        self.pos = save;
        self.depth = save_depth;
        r
    }

    // ---- expressions ------------------------------------------------------

    pub fn expr(&mut self) -> R<Expr> {
        self.enter()?;
        let r = self.expr_prec(0);
        self.leave();
        r
    }

    /// The binary operator here, its precedence and token count.
    fn binop(&self) -> Option<(BinOp, u8, usize)> {
        let TokKind::Punct(p) = &self.peek().kind else {
            return None;
        };
        Some(match *p {
            "||" => (BinOp::Or, 2, 1),
            "&&" => (BinOp::And, 3, 1),
            "|" => (BinOp::BitOr, 4, 1),
            "^" => (BinOp::BitXor, 5, 1),
            "&" => (BinOp::BitAnd, 6, 1),
            "==" => (BinOp::Eq, 7, 1),
            "!=" => (BinOp::Ne, 7, 1),
            "<" => (BinOp::Lt, 8, 1),
            "<=" => (BinOp::Le, 8, 1),
            ">=" => (BinOp::Ge, 8, 1),
            ">" if self.no_angle => return None,
            ">" => {
                let next = self.peek_at(1);
                if next.start == self.peek().end && matches!(next.kind, TokKind::Punct(">")) {
                    (BinOp::Shr, 10, 2)
                } else if next.start == self.peek().end && matches!(next.kind, TokKind::Punct(">="))
                {
                    return None;
                } else {
                    (BinOp::Gt, 8, 1)
                }
            }
            "++" => (BinOp::Concat, 9, 1),
            "<<" => (BinOp::Shl, 10, 1),
            // `[i +: w]` is an indexed part-select, not an addition.
            "+" if self.is_punct_at(1, ":") => return None,
            "+" => (BinOp::Add, 11, 1),
            "-" => (BinOp::Sub, 11, 1),
            "|+|" => (BinOp::AddSat, 11, 1),
            "|-|" => (BinOp::SubSat, 11, 1),
            "*" => (BinOp::Mul, 12, 1),
            "/" => (BinOp::Div, 12, 1),
            "%" => (BinOp::Mod, 12, 1),
            _ => return None,
        })
    }

    fn expr_prec(&mut self, min: u8) -> R<Expr> {
        let d0 = self.depth;
        let mut lhs = self.unary()?;
        loop {
            // Each operator deepens the tree (left-assoc chains built by
            // this loop): counted so that dropping the tree cannot
            // overflow the stack either.
            self.enter()?;
            if min <= 1 && self.is_punct("?") {
                let span = lhs.span().clone();
                self.bump();
                let a = self.expr()?;
                self.expect_punct(":", "in '?:' expression")?;
                self.enter()?;
                let b = self.expr_prec(1);
                self.leave();
                lhs = Expr::Ternary(Box::new(lhs), Box::new(a), Box::new(b?), span);
                continue;
            }
            let Some((op, prec, n)) = self.binop() else {
                break;
            };
            if prec < min {
                break;
            }
            for _ in 0..n {
                self.bump();
            }
            self.enter()?;
            let rhs = self.expr_prec(prec + 1);
            self.leave();
            let span = lhs.span().clone();
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs?), span);
        }
        self.depth = d0;
        Ok(lhs)
    }

    fn unary(&mut self) -> R<Expr> {
        self.enter()?;
        let r = self.unary_inner();
        self.leave();
        r
    }

    fn unary_inner(&mut self) -> R<Expr> {
        let span = self.span();
        let op = match &self.peek().kind {
            TokKind::Punct("!") => Some(UnOp::Not),
            TokKind::Punct("~") => Some(UnOp::BitNot),
            TokKind::Punct("-") => Some(UnOp::Neg),
            TokKind::Punct("+") => Some(UnOp::Plus),
            _ => None,
        };
        if let Some(op) = op {
            self.bump();
            let e = self.unary()?;
            return Ok(Expr::Unary(op, Box::new(e), span));
        }
        if self.is_punct("(") && self.starts_cast() {
            self.bump();
            let ty = self.ty()?;
            self.expect_punct(")", "to close a cast")?;
            let e = self.unary()?;
            return Ok(Expr::Cast(ty, Box::new(e), span));
        }
        let p = self.primary()?;
        self.postfix(p)
    }

    /// At `(`: whether `(Type)` follows, i.e. a cast.
    fn starts_cast(&mut self) -> bool {
        let t = self.peek_at(1);
        let TokKind::Ident(n) = &t.kind else {
            return false;
        };
        let base = is_base_type(n) && n != "error" || n == "error" && self.is_punct_at(2, ")");
        if !base && !self.is_type_name(n) {
            return false;
        }
        let save = self.pos;
        let save_depth = self.depth;
        self.bump();
        let ok = self.ty().is_ok() && self.is_punct(")");
        self.pos = save;
        self.depth = save_depth;
        ok
    }

    fn primary(&mut self) -> R<Expr> {
        let span = self.span();
        match self.peek().kind.clone() {
            TokKind::Int(l) => {
                self.bump();
                Ok(Expr::Int(l, span))
            }
            TokKind::Str(s) => {
                self.bump();
                Ok(Expr::Str(s, span))
            }
            TokKind::Punct("(") => {
                self.bump();
                let saved = std::mem::replace(&mut self.no_angle, false);
                let e = self.expr();
                self.no_angle = saved;
                let e = e?;
                self.expect_punct(")", "to close a parenthesised expression")?;
                Ok(e)
            }
            TokKind::Punct("{") => {
                self.bump();
                if self.eat_punct("}") {
                    return Ok(Expr::List(Vec::new(), span));
                }
                if self.is_ident() && self.is_punct_at(1, "=") {
                    let mut fields = Vec::new();
                    while !self.is_punct("}") {
                        let f = self.ident("as a field name in a struct initializer")?;
                        self.expect_punct(
                            "=",
                            &format!("after field {} in a struct initializer", f.name),
                        )?;
                        fields.push((f, self.expr()?));
                        if !self.eat_punct(",") {
                            break;
                        }
                    }
                    self.expect_punct("}", "to close a struct initializer")?;
                    return Ok(Expr::StructInit(fields, span));
                }
                let mut items = Vec::new();
                while !self.is_punct("}") {
                    items.push(self.expr()?);
                    if !self.eat_punct(",") {
                        break;
                    }
                }
                self.expect_punct("}", "to close a list expression")?;
                Ok(Expr::List(items, span))
            }
            TokKind::Punct(".") => {
                self.bump();
                Ok(Expr::Path(self.ident("after a leading '.'")?))
            }
            TokKind::Ident(n) => match n.as_str() {
                "true" | "false" => {
                    self.bump();
                    Ok(Expr::Bool(n == "true", span))
                }
                "default" => {
                    self.bump();
                    Ok(Expr::Default(span))
                }
                "_" => {
                    self.bump();
                    Ok(Expr::DontCare(span))
                }
                "bit" | "int" | "varbit" | "tuple" if self.is_punct_at(1, "<") => {
                    let t = self.ty()?;
                    Ok(Expr::TypeRef(t, span))
                }
                _ if STMT_KEYWORDS.contains(&n.as_str()) => self.expected("an expression", ""),
                _ => Ok(Expr::Path(self.ident("")?)),
            },
            _ => self.expected("an expression", ""),
        }
    }

    fn postfix(&mut self, mut e: Expr) -> R<Expr> {
        let d0 = self.depth;
        loop {
            self.enter()?;
            if self.is_punct(".") {
                self.bump();
                let m = self.ident("after '.'")?;
                e = Expr::Member(Box::new(e), m);
            } else if self.is_punct("[") {
                let span = e.span().clone();
                self.bump();
                let saved = std::mem::replace(&mut self.no_angle, false);
                let r = self.index_rest();
                self.no_angle = saved;
                let (i, lo) = r?;
                if let Some(lo) = lo {
                    e = Expr::Slice {
                        expr: Box::new(e),
                        hi: Box::new(i),
                        lo: Box::new(lo),
                        span,
                    };
                } else {
                    e = Expr::Index(Box::new(e), Box::new(i), span);
                }
            } else if self.is_punct("(") {
                let span = e.span().clone();
                let args = self.args()?;
                e = Expr::Call {
                    func: Box::new(e),
                    type_args: Vec::new(),
                    args,
                    span,
                };
            } else if self.is_punct("<") && matches!(e, Expr::Path(_) | Expr::Member(..)) {
                // Generic call `f<T>(...)` if type arguments closed by `>(`.
                let save = self.pos;
                let save_depth = self.depth;
                self.bump();
                let targs = self.type_args_rest();
                match targs {
                    Ok(t) if self.is_punct(".") && matches!(e, Expr::Path(_)) => {
                        // `MyParser<bit>.apply(...)`: a specialized type as receiver.
                        if let Expr::Path(name) = &e {
                            let name = name.clone();
                            let span = name.span.clone();
                            e = Expr::TypeRef(Type::Named { name, args: t }, span);
                        }
                    }
                    Ok(t) if self.is_punct("(") => {
                        let span = e.span().clone();
                        let args = self.args()?;
                        e = Expr::Call {
                            func: Box::new(e),
                            type_args: t,
                            args,
                            span,
                        };
                    }
                    _ => {
                        self.pos = save;
                        self.depth = save_depth;
                        break;
                    }
                }
            } else {
                break;
            }
        }
        self.depth = d0;
        Ok(e)
    }

    /// After `[`: `i]` or `hi:lo]`.
    fn index_rest(&mut self) -> R<(Expr, Option<Expr>)> {
        let i = self.expr()?;
        if self.eat_punct(":") {
            let lo = self.expr()?;
            self.expect_punct("]", "to close a bit slice")?;
            return Ok((i, Some(lo)));
        }
        if self.is_punct("+") && self.is_punct_at(1, ":") {
            return Err(FrontError::new(
                ErrorKind::Unsupported,
                self.span(),
                "unsupported: '+:' indexed part-select",
            ));
        }
        self.expect_punct("]", "to close an index")?;
        Ok((i, None))
    }

    fn args(&mut self) -> R<Vec<Arg>> {
        let saved = std::mem::replace(&mut self.no_angle, false);
        let r = self.args_inner();
        self.no_angle = saved;
        r
    }

    fn args_inner(&mut self) -> R<Vec<Arg>> {
        self.expect_punct("(", "to open arguments")?;
        let mut v = Vec::new();
        if self.eat_punct(")") {
            return Ok(v);
        }
        loop {
            let name = if self.is_ident() && self.is_punct_at(1, "=") {
                let n = self.ident("")?;
                self.bump();
                Some(n)
            } else {
                None
            };
            let value = if self.is_kw("_") && (self.is_punct_at(1, ",") || self.is_punct_at(1, ")"))
            {
                let s = self.bump().span;
                Expr::DontCare(s)
            } else {
                self.expr()?
            };
            v.push(Arg { name, value });
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct(")", "to close arguments")?;
        Ok(v)
    }
}
