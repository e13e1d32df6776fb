//! Every program of the P4 corpus (p4c's own samples and the architecture
//! includes) parses unmodified; spot checks on the trees they give.

use nicflow_p4::ast::*;
use nicflow_p4::front::parse_file;
use std::path::{Path, PathBuf};

/// The corpus sits next to the repository: `<repo>/../shared/p4-corpus`.
fn corpus() -> Option<PathBuf> {
    let found = nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))]);
    if found.is_none() {
        println!(
            "skipping: no P4 corpus (shared/p4-corpus beside the checkout, or $NICFLOW_P4_CORPUS)"
        );
    }
    found
}

#[test]
fn every_corpus_program_parses() {
    let Some(c) = corpus() else { return };
    let inc = vec![c.join("include")];
    let mut files = Vec::new();
    for d in [
        "include",
        "include/bmv2",
        "include/tc",
        "pna",
        "v1model",
        "psa",
        "netronome",
    ] {
        let Ok(rd) = std::fs::read_dir(c.join(d)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "p4") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut failures = Vec::new();
    for f in &files {
        match parse_file(f, &inc) {
            Ok(p) => {
                assert!(!p.decls.is_empty(), "{}: empty program", f.display());
                check_name_spans(&p);
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} files fail:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(files.len() >= 20, "only {} corpus files found", files.len());
}

/// The name of every top-level declaration sits exactly at its span's
/// `file:line:col` (through includes and the preprocessor's line map).
fn check_name_spans(p: &Program) {
    for d in &p.decls {
        let name = match d {
            Decl::Const(c) => &c.name,
            Decl::Typedef { name, .. } | Decl::Enum { name, .. } => name,
            Decl::Aggregate(a) => &a.name,
            Decl::ExternFunction(f) => &f.name,
            Decl::Extern(e) => &e.name,
            Decl::ParserType(t) | Decl::ControlType(t) | Decl::Package(t) => &t.name,
            Decl::Parser(x) => &x.name,
            Decl::Control(x) => &x.name,
            Decl::Action(a) => &a.name,
            Decl::Function(f) => &f.proto.name,
            Decl::Instantiation(i) => &i.name,
            Decl::Error { .. } | Decl::MatchKind { .. } => continue,
        };
        let text = std::fs::read_to_string(&*name.span.file).unwrap();
        let line = text.lines().nth(name.span.line as usize - 1).unwrap_or("");
        let at: String = line.chars().skip(name.span.col as usize - 1).collect();
        assert!(
            at.starts_with(&name.name),
            "{}: '{}' not at its span (line: {line})",
            name.span,
            name.name
        );
    }
}
