//! Precedence and associativity against the P4-16 spec's table: random
//! expression trees printed with the fewest parentheses the table allows
//! must parse back into the same tree.

use nicflow_p4::ast::*;
use nicflow_p4::front::parse_str;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum E {
    Lit(u8),
    Un(&'static str, Box<E>),
    Bin(&'static str, Box<E>, Box<E>),
    Tern(Box<E>, Box<E>, Box<E>),
}

/// P4-16 spec precedence, loosest first (all binary operators left-associative).
const OPS: &[(&str, u8)] = &[
    ("||", 2),
    ("&&", 3),
    ("|", 4),
    ("^", 5),
    ("&", 6),
    ("==", 7),
    ("!=", 7),
    ("<", 8),
    ("<=", 8),
    (">", 8),
    (">=", 8),
    ("++", 9),
    ("<<", 10),
    (">>", 10),
    ("+", 11),
    ("-", 11),
    ("|+|", 11),
    ("|-|", 11),
    ("*", 12),
    ("/", 12),
    ("%", 12),
];

fn prec(e: &E) -> u8 {
    match e {
        E::Lit(_) => 100,
        E::Un(..) => 13,
        E::Bin(op, ..) => OPS.iter().find(|(o, _)| o == op).map(|(_, p)| *p).unwrap(),
        E::Tern(..) => 1,
    }
}

/// Fewest parentheses: a child is wrapped when it binds looser than its
/// context requires.
fn print(e: &E, min: u8) -> String {
    let s = match e {
        E::Lit(v) => v.to_string(),
        E::Un(op, a) => format!("{op} {}", print(a, 13)),
        E::Bin(op, l, r) => {
            let p = prec(e);
            format!("{} {op} {}", print(l, p), print(r, p + 1))
        }
        E::Tern(c, a, b) => format!("{} ? {} : {}", print(c, 2), print(a, 0), print(b, 1)),
    };
    if prec(e) < min {
        format!("({s})")
    } else {
        s
    }
}

fn canon(e: &E) -> String {
    match e {
        E::Lit(v) => v.to_string(),
        E::Un(op, a) => format!("({op}{})", canon(a)),
        E::Bin(op, l, r) => format!("({} {op} {})", canon(l), canon(r)),
        E::Tern(c, a, b) => format!("({} ? {} : {})", canon(c), canon(a), canon(b)),
    }
}

fn canon_ast(e: &Expr) -> String {
    match e {
        Expr::Int(l, _) => l.value.to_string(),
        Expr::Unary(op, a, _) => {
            let o = match op {
                UnOp::Not => "!",
                UnOp::BitNot => "~",
                UnOp::Neg => "-",
                UnOp::Plus => "+",
            };
            format!("({o}{})", canon_ast(a))
        }
        Expr::Binary(op, l, r, _) => {
            let o = match op {
                BinOp::Or => "||",
                BinOp::And => "&&",
                BinOp::BitOr => "|",
                BinOp::BitXor => "^",
                BinOp::BitAnd => "&",
                BinOp::Eq => "==",
                BinOp::Ne => "!=",
                BinOp::Lt => "<",
                BinOp::Le => "<=",
                BinOp::Gt => ">",
                BinOp::Ge => ">=",
                BinOp::Concat => "++",
                BinOp::Shl => "<<",
                BinOp::Shr => ">>",
                BinOp::Add => "+",
                BinOp::Sub => "-",
                BinOp::AddSat => "|+|",
                BinOp::SubSat => "|-|",
                BinOp::Mul => "*",
                BinOp::Div => "/",
                BinOp::Mod => "%",
            };
            format!("({} {o} {})", canon_ast(l), canon_ast(r))
        }
        Expr::Ternary(c, a, b, _) => {
            format!("({} ? {} : {})", canon_ast(c), canon_ast(a), canon_ast(b))
        }
        other => format!("{other:?}"),
    }
}

fn tree() -> impl Strategy<Value = E> {
    let leaf = (0u8..10).prop_map(E::Lit);
    leaf.prop_recursive(6, 40, 3, |inner| {
        prop_oneof![
            (
                prop::sample::select(vec!["!", "~", "-", "+"]),
                inner.clone()
            )
                .prop_map(|(o, a)| E::Un(o, Box::new(a))),
            (
                prop::sample::select(OPS.iter().map(|(o, _)| *o).collect::<Vec<_>>()),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(o, l, r)| E::Bin(o, Box::new(l), Box::new(r))),
            (inner.clone(), inner.clone(), inner).prop_map(|(c, a, b)| E::Tern(
                Box::new(c),
                Box::new(a),
                Box::new(b)
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn minimal_parentheses_parse_back(e in tree()) {
        let text = print(&e, 0);
        let src = format!("const int X = {text};");
        let p = parse_str("t.p4", &src, &[]).map_err(|err| TestCaseError::fail(format!("{text}: {err}")))?;
        let Decl::Const(c) = &p.decls[0] else { panic!() };
        prop_assert_eq!(canon_ast(&c.value), canon(&e), "{}", text);
    }
}
