//! Spot checks on the trees the frontend builds: corpus programs
//! (routing.p4's tables, calc_128's widths, v1model's `#if`) and small
//! programs for precedence, casts, `>>` in type arguments, entries.

use nicflow_p4::ast::*;
use nicflow_p4::front::{parse_file, parse_str};
use std::path::{Path, PathBuf};

fn corpus() -> Option<PathBuf> {
    let found = nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))]);
    if found.is_none() {
        println!(
            "skipping: no P4 corpus (shared/p4-corpus beside the checkout, or $NICFLOW_P4_CORPUS)"
        );
    }
    found
}

fn parse_corpus(rel: &str) -> Option<Program> {
    let c = corpus()?;
    let inc = vec![c.join("include")];
    Some(parse_file(&c.join(rel), &inc).unwrap_or_else(|e| panic!("{rel}: {e}")))
}

fn control<'a>(p: &'a Program, name: &str) -> &'a ControlDecl {
    p.decls
        .iter()
        .find_map(|d| match d {
            Decl::Control(c) if c.name.name == name => Some(c),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no control {name}"))
}

fn parser<'a>(p: &'a Program, name: &str) -> &'a ParserDecl {
    p.decls
        .iter()
        .find_map(|d| match d {
            Decl::Parser(c) if c.name.name == name => Some(c),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no parser {name}"))
}

fn table<'a>(c: &'a ControlDecl, name: &str) -> &'a TableDecl {
    c.locals
        .iter()
        .find_map(|l| match l {
            LocalDecl::Table(t) if t.name.name == name => Some(t),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no table {name}"))
}

fn path_str(e: &Expr) -> String {
    match e {
        Expr::Path(i) => i.name.clone(),
        Expr::Member(b, m) => format!("{}.{}", path_str(b), m.name),
        other => format!("{other:?}"),
    }
}

fn int(e: &Expr) -> u64 {
    match e {
        Expr::Int(l, _) => l.value.to_string().parse().unwrap(),
        other => panic!("not an int: {other:?}"),
    }
}

#[test]
fn routing_fib_table() {
    let Some(p) = parse_corpus("pna/routing.p4") else {
        return;
    };
    let main = control(&p, "Main");
    let fib = table(main, "fib_table");
    let key = fib
        .props
        .iter()
        .find_map(|p| match p {
            TableProperty::Key(k) => Some(k),
            _ => None,
        })
        .unwrap();
    assert_eq!(key.len(), 1);
    assert_eq!(path_str(&key[0].expr), "hdr.ip.dstAddr");
    assert_eq!(key[0].match_kind.name, "lpm");
    let anns: Vec<&str> = key[0].annotations.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(anns, ["tc_type", "name"]);
    assert!(matches!(&key[0].annotations[1].args[..], [Expr::Str(s, _)] if s == "prefix"));
    assert_eq!(key[0].annotations[1].raw, "\"prefix\"");
    let da = fib
        .props
        .iter()
        .find_map(|p| match p {
            TableProperty::DefaultAction { action, .. } => Some(action),
            _ => None,
        })
        .unwrap();
    match da {
        Expr::Call { func, args, .. } => {
            assert_eq!(path_str(func), "set_nhid");
            assert_eq!(args.len(), 1);
            assert_eq!(int(&args[0].value), 0);
        }
        other => panic!("default_action {other:?}"),
    }
    assert!(fib.span.file.ends_with("routing.p4"));
    assert_eq!(fib.span.line, 114);
    assert_eq!(fib.span.col, 4);
    // The parser's select case uses a macro: its span is the real line.
    let pr = parser(&p, "Parser");
    let st = pr
        .states
        .iter()
        .find(|s| s.name.name == "parse_ethernet")
        .unwrap();
    match &st.transition {
        Some(Transition::Select { exprs, cases, .. }) => {
            assert_eq!(path_str(&exprs[0]), "hdr.ethernet.etherType");
            assert_eq!(int(&cases[0].keysets[0]), 0x0800);
            assert_eq!(cases[0].span.line, 52);
            // Columns survive the macro's expansion.
            assert_eq!(cases[0].keysets[0].span().col, 13);
            assert_eq!(cases[0].next.span.col, 29);
            assert_eq!(cases[0].next.name, "parse_ipv4");
            assert!(matches!(cases[1].keysets[..], [Expr::Default(_)]));
        }
        other => panic!("{other:?}"),
    }
    // main is an instantiation of PNA_NIC with three constructor calls.
    let m = p
        .decls
        .iter()
        .find_map(|d| match d {
            Decl::Instantiation(i) if i.name.name == "main" => Some(i),
            _ => None,
        })
        .unwrap();
    assert_eq!(m.args.len(), 3);
    // core.p4 came first, from its own file.
    match &p.decls[0] {
        Decl::Error { span, members } => {
            assert!(span.file.ends_with("core.p4"), "{span}");
            assert_eq!(members[0].name, "NoError");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn calc_128_widths_and_lookahead() {
    let Some(p) = parse_corpus("pna/calc_128.p4") else {
        return;
    };
    let h = p
        .decls
        .iter()
        .find_map(|d| match d {
            Decl::Aggregate(a) if a.fields.iter().any(|f| f.name.name == "operand_a") => Some(a),
            _ => None,
        })
        .unwrap();
    let f = h
        .fields
        .iter()
        .find(|f| f.name.name == "operand_a")
        .unwrap();
    match &f.ty {
        Type::Bit(w) => assert_eq!(int(w), 128),
        other => panic!("{other:?}"),
    }
    let pr = p
        .decls
        .iter()
        .find_map(|d| match d {
            Decl::Parser(pp) if pp.states.iter().any(|s| s.name.name == "check_p4calc") => Some(pp),
            _ => None,
        })
        .unwrap();
    let st = pr
        .states
        .iter()
        .find(|s| s.name.name == "check_p4calc")
        .unwrap();
    match &st.transition {
        Some(Transition::Select { exprs, cases, .. }) => {
            assert_eq!(exprs.len(), 3);
            match &exprs[0] {
                Expr::Member(call, m) => {
                    assert_eq!(m.name, "p");
                    match &**call {
                        Expr::Call {
                            type_args, func, ..
                        } => {
                            assert_eq!(path_str(func), "pkt.lookahead");
                            assert!(
                                matches!(&type_args[..], [Type::Named { name, .. }] if name.name == "p4calc_t")
                            );
                        }
                        other => panic!("{other:?}"),
                    }
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(cases[0].keysets.len(), 3);
            assert_eq!(int(&cases[0].keysets[0]), 0x50);
            assert!(matches!(cases[1].keysets[..], [Expr::Default(_)]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn v1model_if_picks_the_old_branch() {
    // V1MODEL_VERSION defaults to 20180101: the `#else` side is used.
    let Some(p) = parse_corpus("v1model/table-entries-lpm-bmv2.p4") else {
        return;
    };
    let sm = p
        .decls
        .iter()
        .find_map(|d| match d {
            Decl::Aggregate(a) if a.name.name == "standard_metadata_t" => Some(a),
            _ => None,
        })
        .unwrap();
    let f = &sm.fields[0];
    assert_eq!(f.name.name, "ingress_port");
    assert!(matches!(&f.ty, Type::Bit(w) if int(w) == 9), "{:?}", f.ty);
    assert!(f.name.span.file.ends_with("v1model.p4"));
    assert_eq!(f.name.span.line, 61);
    assert!(!p
        .decls
        .iter()
        .any(|d| matches!(d, Decl::Typedef { name, .. } if name.name == "PortId_t")));
    let anns: Vec<&str> = sm.annotations.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(anns, ["metadata", "name"]);
}

#[test]
fn v1model_if_with_define() {
    let Some(c) = corpus() else { return };
    let src = nicflow_p4::front::preprocess_str(
        "t.p4",
        "#include <v1model.p4>\n",
        &[c.join("include")],
        &[("V1MODEL_VERSION".into(), "20200408".into())],
    )
    .unwrap();
    let p = nicflow_p4::front::parse_source(&src).unwrap();
    assert!(p
        .decls
        .iter()
        .any(|d| matches!(d, Decl::Typedef { name, .. } if name.name == "PortId_t")));
}

#[test]
fn ternary_entries() {
    let Some(p) = parse_corpus("v1model/table-entries-ternary-bmv2.p4") else {
        return;
    };
    let c = p
        .decls
        .iter()
        .find_map(|d| match d {
            Decl::Control(c) if c.locals.iter().any(|l| matches!(l, LocalDecl::Table(_))) => {
                Some(c)
            }
            _ => None,
        })
        .unwrap();
    let t = table(c, "t_ternary");
    let (entries, is_const) = t
        .props
        .iter()
        .find_map(|p| match p {
            TableProperty::Entries {
                entries, is_const, ..
            } => Some((entries, *is_const)),
            _ => None,
        })
        .unwrap();
    assert!(is_const);
    assert_eq!(entries.len(), 4);
    assert!(matches!(&entries[0].keysets[..], [Expr::Mask(..)]));
    assert!(matches!(&entries[3].keysets[..], [Expr::DontCare(_)]));
    assert!(matches!(&entries[3].action, Expr::Call { args, .. } if int(&args[0].value) == 4));
}

fn one_control(src: &str) -> ControlDecl {
    let p = parse_str("t.p4", src, &[]).unwrap_or_else(|e| panic!("{e}"));
    p.decls
        .into_iter()
        .rev()
        .find_map(|d| match d {
            Decl::Control(c) => Some(c),
            _ => None,
        })
        .unwrap()
}

fn stmts(c: &ControlDecl) -> &[Stmt] {
    &c.apply.stmts
}

fn rhs(s: &Stmt) -> &Expr {
    match s {
        Stmt::Assign { rhs, .. } => rhs,
        other => panic!("{other:?}"),
    }
}

#[test]
fn precedence() {
    let c = one_control(
        "control C() { apply {
            x = a + b * c << 2 == d && e || f ? g : h;
            y = a ++ b + c;
            z = a & b == c;
            w = -a[7:0] |+| b.c[1];
            v = a >> 2 > b;
        } }",
    );
    let s = stmts(&c);
    // ((((a + (b*c)) << 2) == d) && e) || f ? g : h
    match rhs(&s[0]) {
        Expr::Ternary(cond, _, _, _) => match &**cond {
            Expr::Binary(BinOp::Or, l, _, _) => match &**l {
                Expr::Binary(BinOp::And, l, _, _) => match &**l {
                    Expr::Binary(BinOp::Eq, l, _, _) => match &**l {
                        Expr::Binary(BinOp::Shl, l, _, _) => {
                            assert!(
                                matches!(&**l, Expr::Binary(BinOp::Add, _, r, _) if matches!(**r, Expr::Binary(BinOp::Mul, ..)))
                            )
                        }
                        o => panic!("{o:?}"),
                    },
                    o => panic!("{o:?}"),
                },
                o => panic!("{o:?}"),
            },
            o => panic!("{o:?}"),
        },
        o => panic!("{o:?}"),
    }
    // ++ binds looser than +: a ++ (b + c)
    assert!(
        matches!(rhs(&s[1]), Expr::Binary(BinOp::Concat, _, r, _) if matches!(**r, Expr::Binary(BinOp::Add, ..)))
    );
    // == binds tighter than &: a & (b == c)
    assert!(
        matches!(rhs(&s[2]), Expr::Binary(BinOp::BitAnd, _, r, _) if matches!(**r, Expr::Binary(BinOp::Eq, ..)))
    );
    match rhs(&s[3]) {
        Expr::Binary(BinOp::AddSat, l, r, _) => {
            assert!(
                matches!(&**l, Expr::Unary(UnOp::Neg, e, _) if matches!(**e, Expr::Slice { .. }))
            );
            assert!(matches!(&**r, Expr::Index(..)));
        }
        o => panic!("{o:?}"),
    }
    assert!(
        matches!(rhs(&s[4]), Expr::Binary(BinOp::Gt, l, _, _) if matches!(**l, Expr::Binary(BinOp::Shr, ..)))
    );
}

#[test]
fn casts_and_parentheses() {
    let c = one_control(
        "typedef bit<8> T;
         header h_t { bit<8> f; }
         control C() { apply {
            a = (T) b;
            c = (d) - e;
            f = (bit<32>) -g;
            i = (error.NoError);
            j = (h_t) { f = 1 };
            k = (bit<8>)(T)l;
         } }",
    );
    let s = stmts(&c);
    assert!(matches!(rhs(&s[0]), Expr::Cast(Type::Named { name, .. }, _, _) if name.name == "T"));
    assert!(matches!(rhs(&s[1]), Expr::Binary(BinOp::Sub, ..)));
    assert!(
        matches!(rhs(&s[2]), Expr::Cast(Type::Bit(_), e, _) if matches!(**e, Expr::Unary(UnOp::Neg, ..)))
    );
    assert_eq!(path_str(rhs(&s[3])), "error.NoError");
    assert!(
        matches!(rhs(&s[4]), Expr::Cast(_, e, _) if matches!(&**e, Expr::StructInit(f, _) if f.len() == 1))
    );
    assert!(matches!(rhs(&s[5]), Expr::Cast(Type::Bit(_), e, _) if matches!(**e, Expr::Cast(..))));
}

#[test]
fn nested_type_arguments_and_shift() {
    let c = one_control(
        "extern Register<T, I> { Register(bit<32> n); T read(in I i); }
         control C()(bit<8> n) {
            Register<bit<32>, bit<8>>(4) r;
            Register<bit<32>, bit<8>>(4) r2 = {
                bit<32> apply(inout bit<32> v) { return v; }
            };
            tuple<bit<8>, bit<16>> tp;
            apply {
                x = r.read(2) >> 3;
                hash<bit<16>, bit<32>>(y, {a, b});
                bit<8>[4] st;
            }
         }",
    );
    assert_eq!(c.ctor_params.len(), 1);
    match &c.locals[0] {
        LocalDecl::Instantiation(i) => {
            assert!(matches!(&i.ty, Type::Named { args, .. } if args.len() == 2));
            assert_eq!(i.name.name, "r");
        }
        o => panic!("{o:?}"),
    }
    match &c.locals[1] {
        LocalDecl::Instantiation(i) => {
            assert_eq!(i.initializer.len(), 1);
            assert_eq!(i.initializer[0].proto.name.name, "apply");
        }
        o => panic!("{o:?}"),
    }
    assert!(
        matches!(&c.locals[2], LocalDecl::Var(v) if matches!(&v.ty, Type::Tuple(t) if t.len() == 2))
    );
    let s = stmts(&c);
    assert!(matches!(rhs(&s[0]), Expr::Binary(BinOp::Shr, ..)));
    assert!(
        matches!(&s[1], Stmt::Call(Expr::Call { type_args, args, .. }) if type_args.len() == 2 && matches!(args[1].value, Expr::List(..)))
    );
    assert!(matches!(&s[2], Stmt::Var(v) if matches!(v.ty, Type::Stack { .. })));
}

#[test]
fn tables_entries_and_properties() {
    let c = one_control(
        "control C() {
            action a(bit<8> x) {}
            table t {
                key = { h.f : ternary; @name(\"g\") h.g : range; }
                actions = { a; @defaultonly NoAction(); }
                const default_action = NoAction();
                const entries = {
                    priority = 10 : (0x1 &&& 0xf, 1 .. 5) : a(1);
                    (_, default) : a(2) @priority(3);
                    const (8w5, 6) : a(3);
                }
                size = 1024;
                add_on_miss = true;
                pna_idle_timeout = PNA_IdleTimeout_t.NOTIFY_CONTROL;
                @hidden psa_direct_counter = c;
            }
            apply {
                switch (t.apply().action_run) {
                    a:
                    NoAction: { exit; }
                    default: { return; }
                }
                if (t.apply().hit) { } else if (!x) ; else { }
            }
        }",
    );
    let t = table(&c, "t");
    let TableProperty::Key(k) = &t.props[0] else {
        panic!()
    };
    assert_eq!(k[1].match_kind.name, "range");
    assert_eq!(k[1].annotations[0].name, "name");
    let TableProperty::Actions(a) = &t.props[1] else {
        panic!()
    };
    assert_eq!(a[1].annotations[0].name, "defaultonly");
    assert!(matches!(
        t.props[2],
        TableProperty::DefaultAction { is_const: true, .. }
    ));
    let TableProperty::Entries { entries, .. } = &t.props[3] else {
        panic!()
    };
    assert_eq!(int(entries[0].priority.as_ref().unwrap()), 10);
    assert!(matches!(
        &entries[0].keysets[..],
        [Expr::Mask(..), Expr::Range(..)]
    ));
    assert!(matches!(
        &entries[1].keysets[..],
        [Expr::DontCare(_), Expr::Default(_)]
    ));
    assert_eq!(entries[1].annotations[0].name, "priority");
    assert!(entries[2].is_const);
    match &entries[2].keysets[0] {
        Expr::Int(l, _) => assert_eq!(l.width, Some((8, false))),
        o => panic!("{o:?}"),
    }
    let names: Vec<&str> = t.props[4..]
        .iter()
        .map(|p| match p {
            TableProperty::Other { name, .. } => name.name.as_str(),
            _ => "?",
        })
        .collect();
    assert_eq!(
        names,
        [
            "size",
            "add_on_miss",
            "pna_idle_timeout",
            "psa_direct_counter"
        ]
    );
    let s = stmts(&c);
    match &s[0] {
        Stmt::Switch { expr, cases, .. } => {
            assert!(matches!(expr, Expr::Member(_, m) if m.name == "action_run"));
            assert_eq!(cases.len(), 3);
            assert!(cases[0].body.is_none());
            assert!(cases[1].body.is_some());
            assert!(matches!(cases[2].label, Expr::Default(_)));
        }
        o => panic!("{o:?}"),
    }
    assert!(matches!(&s[1], Stmt::If { otherwise: Some(e), .. } if matches!(**e, Stmt::If { .. })));
}

#[test]
fn declarations() {
    let p = parse_str(
        "t.p4",
        "#define W 16
         enum bit<8> E { A = 1, B = 2 }
         enum F { X, Y }
         type bit<W> N_t;
         match_kind { exact, ternary }
         @pure extern bit<16> f<T>(in T data, @optional in bit<8> x);
         extern X<T> { X(); abstract void m(inout T t); T n<U>(in U u); }
         parser P<H>(packet_in p, out H h);
         package Pkg<H>(P<H> p);
         struct S<T> { T f; }
         header_union U { h1_t a; }
         const bit<8> K = 8w0b1010_1010;
         bit<8> g(in bit<8> a) { return a + 1; }
         @pragma dont_trim foo bar
         action na() {}
        ",
        &[],
    )
    .unwrap();
    let d = &p.decls;
    assert!(
        matches!(&d[0], Decl::Enum { underlying: Some(Type::Bit(_)), members, .. } if members.len() == 2)
    );
    assert!(matches!(
        &d[1],
        Decl::Enum {
            underlying: None,
            ..
        }
    ));
    assert!(
        matches!(&d[2], Decl::Typedef { new_type: true, ty: Type::Bit(w), .. } if int(w) == 16)
    );
    assert!(matches!(&d[3], Decl::MatchKind { members, .. } if members.len() == 2));
    match &d[4] {
        Decl::ExternFunction(f) => {
            assert_eq!(f.annotations[0].name, "pure");
            assert_eq!(f.type_params[0].name, "T");
            assert_eq!(f.params[1].annotations[0].name, "optional");
            assert_eq!(f.params[0].direction, Direction::In);
        }
        o => panic!("{o:?}"),
    }
    match &d[5] {
        Decl::Extern(e) => {
            assert!(e.methods[0].ret.is_none());
            assert!(e.methods[1].is_abstract);
            assert_eq!(e.methods[2].type_params[0].name, "U");
        }
        o => panic!("{o:?}"),
    }
    assert!(matches!(&d[6], Decl::ParserType(_)));
    assert!(matches!(&d[7], Decl::Package(_)));
    assert!(matches!(&d[8], Decl::Aggregate(a) if a.type_params.len() == 1));
    assert!(matches!(&d[9], Decl::Aggregate(a) if a.kind == AggregateKind::HeaderUnion));
    assert!(matches!(&d[10], Decl::Const(c) if int(&c.value) == 0xaa));
    assert!(matches!(&d[11], Decl::Function(_)));
    match &d[12] {
        Decl::Action(a) => {
            assert_eq!(a.annotations[0].name, "pragma");
            assert_eq!(a.annotations[0].raw, "dont_trim foo bar");
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn newer_syntax_p4c_accepts() {
    let c = one_control(
        "typedef bit<8> T;
         @scrabble(
            - That's it. That's all there is. $
         )
         control C() {
            bit<2 + 2> w;
            apply @noWarn(\"unused\") {
                a += 1;
                b >>= c;
                d |+|= 2;
                s = \"two
lines\";
            }
         }",
    );
    assert!(
        matches!(&c.locals[0], LocalDecl::Var(v) if matches!(&v.ty, Type::Bit(w) if matches!(**w, Expr::Binary(BinOp::Add, ..))))
    );
    let s = stmts(&c);
    match &s[0] {
        Stmt::Assign { lhs, rhs, .. } => {
            assert_eq!(path_str(lhs), "a");
            assert!(
                matches!(rhs, Expr::Binary(BinOp::Add, l, r, _) if path_str(l) == "a" && int(r) == 1)
            );
        }
        o => panic!("{o:?}"),
    }
    assert!(matches!(rhs(&s[1]), Expr::Binary(BinOp::Shr, ..)));
    assert!(matches!(rhs(&s[2]), Expr::Binary(BinOp::AddSat, ..)));
    assert!(matches!(rhs(&s[3]), Expr::Str(t, _) if t == "two\nlines"));
    assert_eq!(c.annotations[0].name, "scrabble");
    assert!(c.annotations[0].raw.contains("That's it."));
    assert!(c.annotations[0].args.is_empty());
    // A span after a multi-line string is still on its real line.
    let p = parse_str(
        "t.p4",
        "const string s = \"a\nb\";\nconst bit<8> x = 1;",
        &[],
    )
    .unwrap();
    match &p.decls[1] {
        Decl::Const(c) => assert_eq!((c.name.span.line, c.name.span.col), (3, 14)),
        o => panic!("{o:?}"),
    }
    // Specialized type as a call receiver.
    let c = one_control("parser P<T>(); control C() { apply { P<bit<8>>.apply(); } }");
    assert!(
        matches!(&stmts(&c)[0], Stmt::Call(Expr::Call { func, .. }) if matches!(&**func, Expr::Member(r, m) if m.name == "apply" && matches!(**r, Expr::TypeRef(..))))
    );
}
