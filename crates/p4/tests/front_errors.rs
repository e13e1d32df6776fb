//! Malformed programs are refused with `FILE:LINE:COL: message` naming
//! the construct, and no input makes the frontend panic or overflow the
//! stack (random bytes, random token soup, truncated corpus files, deep
//! nesting).

use nicflow_p4::front::{parse_file, parse_str, ErrorKind, FrontError};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn err(src: &str) -> FrontError {
    match parse_str("t.p4", src, &[]) {
        Ok(p) => panic!("parsed: {p:?}"),
        Err(e) => e,
    }
}

#[test]
fn missing_semicolon_reported_on_its_line() {
    let e = err("control C() {\n  apply {\n    x = 1\n    y = 2;\n  }\n}\n");
    assert_eq!(
        e.to_string(),
        "t.p4:3:10: expected ';' after assignment, found 'y'"
    );
    let e = err("header h_t {\n  bit<8> a\n  bit<8> b;\n}\n");
    assert_eq!(
        e.to_string(),
        "t.p4:2:11: expected ';' after field a of header h_t, found 'bit'"
    );
    let e = err("const bit<8> X = 1\n");
    assert!(
        e.to_string()
            .starts_with("t.p4:1:19: expected ';' after const declaration of X"),
        "{e}"
    );
}

#[test]
fn unknown_token() {
    let e = err("header h_t { bit<8> a; }\n\ncontrol C() { apply { x = 1 $ 2; } }\n");
    assert_eq!(e.to_string(), "t.p4:3:29: unexpected character '$'");
    assert_eq!(e.kind, ErrorKind::Lex);
    let e = err("const bit<8> X = 0xZZ;");
    assert_eq!(e.to_string(), "t.p4:1:18: malformed integer literal '0xZZ'");
    let e = err("const string s = \"abc\n;");
    assert_eq!(e.to_string(), "t.p4:1:18: unterminated string literal");
}

#[test]
fn unterminated_comment() {
    let e = err("header h_t { bit<8> a; }\n  /* no end\n\n");
    assert_eq!(e.to_string(), "t.p4:2:3: unterminated comment '/*'");
}

#[test]
fn missing_include() {
    let e = err("\n#include <missing.p4>\n");
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(
        e.to_string()
            .starts_with("t.p4:2:1: #include: file 'missing.p4' not found"),
        "{e}"
    );
    let e = err("#include \"nope.p4\"\n");
    assert!(
        e.to_string()
            .starts_with("t.p4:1:1: #include: file 'nope.p4' not found"),
        "{e}"
    );
}

#[test]
fn bad_if() {
    let e = err("#define A 1\n#if A +\n#endif\n");
    assert!(e.to_string().starts_with("t.p4:2:1: bad #if"), "{e}");
    let e = err("#if 1 / 0\n#endif\n");
    assert_eq!(e.to_string(), "t.p4:1:1: bad #if: division by zero");
    let e = err("#if 1\nx\n");
    assert!(
        e.to_string().starts_with("t.p4:1:1: unterminated #if"),
        "{e}"
    );
    let e = err("#endif\n");
    assert_eq!(e.to_string(), "t.p4:1:1: #endif without #if");
    let e = err("\n#error \"stop\"\n");
    assert_eq!(e.to_string(), "t.p4:2:1: #error \"stop\"");
    // An #error in an inactive region is ignored, so is garbage in #if.
    assert!(parse_str("t.p4", "#if 0\n#error no\n#if @@@\n#endif\n#endif\n", &[]).is_ok());
}

#[test]
fn error_in_included_file_names_that_file() {
    let dir = std::env::temp_dir().join(format!("nicflow-p4-front-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("inc.p4"),
        "// header\nheader h_t {\n  bit<8> a\n}\n",
    )
    .unwrap();
    std::fs::write(dir.join("main.p4"), "#include \"inc.p4\"\n").unwrap();
    let r = parse_file(&dir.join("main.p4"), &[]);
    let _ = std::fs::remove_dir_all(&dir);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("inc.p4:3:11: expected ';' after field a of header h_t"),
        "{e}"
    );
}

#[test]
fn unsupported_and_syntax() {
    let e = err("parser P() { value_set<bit<8>>(4) vs; state start { transition accept; } }");
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(
        e.to_string()
            .starts_with("t.p4:1:14: unsupported: parser value_set"),
        "{e}"
    );
    let e = err("control C() { apply { x + 1; } }");
    assert!(
        e.to_string().starts_with("t.p4:1:28: expected '=' or '('"),
        "{e}"
    );
    let e = err("control C() {\n  action a() {}\n}");
    assert_eq!(e.to_string(), "t.p4:3:1: control C has no apply block");
    let e = err("control C() { apply { } ");
    assert!(
        e.to_string().contains("expected '}' to close control C"),
        "{e}"
    );
    let e = err("parser P() { state s { transition select(x) { 1: a } } }");
    assert!(
        e.to_string()
            .starts_with("t.p4:1:52: expected ';' after select case -> a"),
        "{e}"
    );
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    for (open, close) in [("(", ")"), ("{", "}"), ("-", ""), ("!", ""), ("a[", "]")] {
        let n = 100_000;
        let src = format!("const bit<8> X = {}1{};", open.repeat(n), close.repeat(n));
        let e = err(&src);
        assert!(e.to_string().contains("nested too deeply"), "{e}");
    }
    let src = format!("const bit<8> X = 1{};", " + 1".repeat(100_000));
    assert!(err(&src).to_string().contains("nested too deeply"));
    let src = format!("control C() {{ apply {} }}", "{".repeat(100_000));
    assert!(err(&src).to_string().contains("nested too deeply"));
    let src = format!(
        "control C() {{ apply {{ {} }} }}",
        "if (a) ".repeat(100_000)
    );
    assert!(err(&src).to_string().contains("nested too deeply"));
    let src = format!("typedef bit<8>{} T;", "[1]".repeat(100_000));
    assert!(err(&src).to_string().contains("nested too deeply"));
    let src = format!(
        "#if {}1{}\n#endif\n",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    assert!(err(&src).to_string().contains("bad #if"));
    // A self-referencing or exploding macro does not hang.
    assert!(parse_str("t.p4", "#define A A\nconst bit<8> A = 1;", &[]).is_ok());
    let mut bomb = String::from("#define A0 x\n");
    for i in 1..40 {
        bomb.push_str(&format!("#define A{i} A{} A{}\n", i - 1, i - 1));
    }
    bomb.push_str("A39\n");
    assert!(parse_str("t.p4", &bomb, &[]).is_err());
}

fn corpus() -> Option<PathBuf> {
    nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))])
}

#[test]
fn truncated_corpus_files_only_err() {
    let Some(c) = corpus() else {
        println!("skipping: no corpus");
        return;
    };
    let inc = vec![c.join("include")];
    for rel in [
        "pna/routing.p4",
        "pna/calc_128.p4",
        "pna/pna-dpdk-add_on_miss0.p4",
        "v1model/v1model-special-ops-bmv2.p4",
        "psa/psa-register-read-write-2-bmv2.p4",
        "include/tc/pna.p4",
        "include/bmv2/psa.p4",
    ] {
        let text = std::fs::read_to_string(c.join(rel)).unwrap();
        let chars: Vec<char> = text.chars().collect();
        let step = (chars.len() / 80).max(1);
        for cut in (0..chars.len()).step_by(step) {
            let t: String = chars[..cut].iter().collect();
            let _ = parse_str(rel, &t, &inc);
            // Also with a chunk removed from the middle.
            let t: String = chars[..cut / 2].iter().chain(chars[cut..].iter()).collect();
            let _ = parse_str(rel, &t, &inc);
        }
    }
}

const VOCAB: &[&str] = &[
    "control",
    "parser",
    "state",
    "transition",
    "select",
    "apply",
    "table",
    "key",
    "actions",
    "entries",
    "default_action",
    "const",
    "action",
    "header",
    "struct",
    "enum",
    "extern",
    "typedef",
    "bit",
    "<",
    ">",
    ">>",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ";",
    ":",
    ",",
    ".",
    "=",
    "==",
    "&&&",
    "..",
    "++",
    "|+|",
    "@name",
    "@pragma",
    "if",
    "else",
    "switch",
    "default",
    "_",
    "x",
    "T",
    "8w5",
    "0x10",
    "\"s\"",
    "return",
    "exit",
    "+",
    "-",
    "?",
    "!",
    "#if 1\n",
    "#endif\n",
    "#define X(a) a\n",
    "X(",
    "/*",
    "*/",
    "//",
    "\n",
    "error",
    "tuple",
    "package",
    "main",
    "in",
    "out",
    "inout",
    "abstract",
    "priority",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_str("f.p4", &text, &[]);
    }

    #[test]
    fn random_tokens_never_panic(idx in proptest::collection::vec(0..VOCAB.len(), 0..120)) {
        let text: Vec<&str> = idx.iter().map(|i| VOCAB[*i]).collect();
        let _ = parse_str("f.p4", &text.join(" "), &[]);
    }
}

#[test]
fn newer_constructs_refused_clearly() {
    let e = err("control C() { apply {\n  for (bit<8> i = 0; i < 4; i = i + 1) { }\n} }");
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(
        e.to_string()
            .starts_with("t.p4:2:3: unsupported: 'for' loop"),
        "{e}"
    );
    let e = err("control C() { apply { x = y[4 +: 8]; } }");
    assert!(
        e.to_string().starts_with("t.p4:1:31: unsupported: '+:'"),
        "{e}"
    );
    // An unknown character inside a free-form annotation is fine, outside not.
    assert!(parse_str("t.p4", "@a( ' $ ) const bit<8> x = 1;", &[]).is_ok());
    let e = err("@a( ' ) const bit<8> x = 1 ';");
    assert_eq!(e.to_string(), "t.p4:1:28: unexpected character '\\''");
}
