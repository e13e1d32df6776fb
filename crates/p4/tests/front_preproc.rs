//! The preprocessor as P4 programs use it: include search order, guards,
//! macros, conditionals, and the line map back to the original files.

use nicflow_p4::ast::*;
use nicflow_p4::front::{parse_file, preprocess, preprocess_str};
use std::path::PathBuf;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("nicflow-p4-front-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn const_names(p: &Program) -> Vec<String> {
    p.decls
        .iter()
        .filter_map(|d| match d {
            Decl::Const(c) => Some(c.name.name.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn include_search_order_and_guards() {
    let t = TempDir::new("order");
    let main = t.write(
        "src/main.p4",
        "#include \"x.p4\"\n#include <y.p4>\n#include \"y.p4\"\n#include <g.p4>\n#include \"g.p4\"\nconst bit<8> MAIN = 1;\n",
    );
    t.write("src/x.p4", "const bit<8> X_SRC = 1;\n");
    t.write("src/y.p4", "const bit<8> Y_SRC = 1;\n");
    t.write("i1/y.p4", "const bit<8> Y_I1 = 1;\n");
    t.write("i2/y.p4", "const bit<8> Y_I2 = 1;\n");
    t.write("i1/x.p4", "const bit<8> X_I1 = 1;\n");
    t.write(
        "i2/g.p4",
        "#ifndef G\n#define G\nconst bit<8> G_ONCE = 1;\n#endif\n",
    );
    let inc = vec![t.0.join("i1"), t.0.join("i2")];
    let p = parse_file(&main, &inc).unwrap();
    // Quotes: the including file's directory first; angles: -I dirs in order.
    assert_eq!(
        const_names(&p),
        ["X_SRC", "Y_I1", "Y_SRC", "G_ONCE", "MAIN"]
    );
    let g = p.decls.iter().find_map(|d| match d {
        Decl::Const(c) if c.name.name == "G_ONCE" => Some(c),
        _ => None,
    });
    let g = g.unwrap();
    assert!(g.span.file.ends_with("i2/g.p4"), "{}", g.span);
    assert_eq!((g.span.line, g.span.col), (3, 1));
}

#[test]
fn line_map_names_each_file() {
    let t = TempDir::new("map");
    let main = t.write("main.p4", "// one\n#include \"a.p4\"\n\nx y\n");
    t.write("a.p4", "/* multi\n line */\n#define Z 3\nz Z\n");
    let src = preprocess(&main, &[], &[]).unwrap();
    let lines: Vec<&str> = src.text.split('\n').collect();
    assert_eq!(lines.len() - 1, src.lines.len());
    let zi = lines.iter().position(|l| l.trim() == "z 3").unwrap();
    assert!(src.lines[zi].0.ends_with("a.p4"));
    assert_eq!(src.lines[zi].1, 4);
    let xi = lines.iter().position(|l| l.trim() == "x y").unwrap();
    assert!(src.lines[xi].0.ends_with("main.p4"));
    assert_eq!(src.lines[xi].1, 4);
}

#[test]
fn macros() {
    let s = preprocess_str(
        "t.p4",
        "#define F(a, b) a + b\n#define G() 7\n#define LONG 1 + \\\n  2\nF((1, 2), F(3, 4)) G() LONG \"F(1,2)\"\n#undef LONG\nLONG F\n",
        &[],
        &[("EXT".into(), "9".into())],
    )
    .unwrap();
    let out: Vec<&str> = s
        .text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(out[0], "(1, 2) + 3 + 4 7 1 +    2 \"F(1,2)\"");
    assert_eq!(out[1], "LONG F");
    let s = preprocess_str(
        "t.p4",
        "#if EXT == 9 && !defined(NOPE) && (2 * 3 > 5) && UNDEF == 0\nok\n#endif\n",
        &[],
        &[("EXT".into(), "9".into())],
    )
    .unwrap();
    assert!(s.text.contains("ok"));
    // Columns map back through an expansion.
    let s = preprocess_str("t.p4", "#define F(a) a\n  x = F(1) + y;\n", &[], &[]).unwrap();
    let i = s
        .text
        .split('\n')
        .position(|l| l == "  x = 1 + y;")
        .unwrap();
    assert_eq!(s.span(i, 3).col, 3);
    assert_eq!(s.span(i, 7).col, 7);
    assert_eq!(s.span(i, 11).col, 14);
    // Arguments over several lines, as cpp allows; later lines keep their numbers.
    let s = preprocess_str(
        "t.p4",
        "#define F(a, b) a + b\nx = F(1,\n  2);\ny\n",
        &[],
        &[],
    )
    .unwrap();
    let lines: Vec<&str> = s.text.split('\n').collect();
    let i = lines.iter().position(|l| l.contains("x = 1 + 2;")).unwrap();
    assert_eq!(s.lines[i].1, 2);
    let i = lines.iter().position(|l| l.trim() == "y").unwrap();
    assert_eq!(s.lines[i].1, 4);
    let e = preprocess_str("t.p4", "#define F(a) a\nF(1,\n", &[], &[]).unwrap_err();
    assert_eq!(e.to_string(), "t.p4:2:1: unterminated call of macro 'F'");
    let e = preprocess_str("t.p4", "#define F(a) a\nF(1, 2)\n", &[], &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.p4:2:1: macro 'F' takes 1 arguments, given 2"
    );
}
