//! Every program of the P4 corpus (p4c's own samples and the architecture
//! includes) parses unmodified; spot checks on the trees they give.

use nicflow_p4::ast::*;
use nicflow_p4::front::{parse_file, parse_str};
use std::path::{Path, PathBuf};

/// The corpus sits next to the repository: `<repo>/../shared/p4-corpus`.
fn corpus() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/p4-corpus");
    if p.is_dir() {
        Some(p)
    } else {
        let q = PathBuf::from("/work/shared/p4-corpus");
        if q.is_dir() {
            Some(q)
        } else {
            println!("skipping: P4 corpus not found at {}", p.display());
            None
        }
    }
}

fn parse(rel: &str) -> Program {
    let c = corpus().expect("corpus");
    let inc = vec![c.join("include")];
    parse_file(&c.join(rel), &inc).unwrap_or_else(|e| panic!("{rel}: {e}"))
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
            Ok(p) => assert!(!p.decls.is_empty(), "{}: empty program", f.display()),
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
