//! The layers hold: no import circle joins modules of different folders.
//!
//! Cargo already refuses a circle between crates. Inside a crate nothing
//! does, and the switch crate once grew an 18-file circle through its
//! port, offload and control folders (issue 29). Modules of one folder may
//! lean on each other (they are one subject); a circle that leaves the
//! folder means a lower layer calls back into a higher one. This test reads
//! every crate's sources, draws the module graph from `crate::` and
//! `super::` paths outside comments and test modules, and fails naming the
//! modules of any strongly connected component that spans folders.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`control::switch`) -> its file, for one crate's `src`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The source without comment lines and without the test module (which may
/// import anything above it).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `prefix` path in `text`, as its `::`-separated segments.
fn paths_after<'a>(text: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix).map(|i| i + from) {
        from = i + prefix.len();
        // Part of a longer path or name (`super::super::`, `my_crate::`).
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &text[from..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let segs: Vec<&str> = rest[..end]
            .split("::")
            .take_while(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .collect();
        out.push(segs);
    }
    out
}

/// The longest known module named by `segs` (after `base`), if any.
fn resolve(mods: &BTreeMap<String, PathBuf>, base: &[String], segs: &[&str]) -> Option<String> {
    let mut full: Vec<String> = base.to_vec();
    full.extend(segs.iter().map(|s| s.to_string()));
    (base.len() + 1..=full.len())
        .rev()
        .map(|k| full[..k].join("::"))
        .find(|m| mods.contains_key(m))
}

fn graph(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, path) in mods {
        let text = code(path);
        let mut parent: Vec<String> = m
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        parent.pop();
        let mut edges = BTreeSet::new();
        for segs in paths_after(&text, "crate::") {
            edges.extend(resolve(mods, &[], &segs));
        }
        for segs in paths_after(&text, "super::") {
            // The first `super` is the parent; each further one climbs once.
            let ups = segs.iter().take_while(|s| **s == "super").count();
            let base = &parent[..parent.len().saturating_sub(ups)];
            edges.extend(resolve(mods, base, &segs[ups..]));
        }
        edges.remove(m);
        g.insert(m.clone(), edges);
    }
    g
}

/// Strongly connected components with more than one module (Tarjan).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn no_import_circle_leaves_its_folder() {
    let mut bad = Vec::new();
    let mut crates = 0;
    for e in std::fs::read_dir(crates_dir()).unwrap() {
        let src = e.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        let mods = modules(&src);
        for comp in circles(&graph(&mods)) {
            let folders: BTreeSet<_> = comp.iter().map(|m| mods[m].parent().unwrap()).collect();
            if folders.len() > 1 {
                bad.push(format!("{}: {}", src.display(), comp.join(", ")));
            }
        }
    }
    assert!(
        crates >= 10,
        "found only {crates} crates under {}",
        crates_dir().display()
    );
    assert!(
        bad.is_empty(),
        "import circles across folders:\n{}",
        bad.join("\n")
    );
}

/// The checker itself sees a circle when there is one, and resolves
/// `super::` and nested paths to the module that holds them.
#[test]
fn the_checker_finds_a_planted_circle() {
    let dir = std::env::temp_dir().join(format!("nicflow-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("low")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod high; mod low;\n").unwrap();
    std::fs::write(dir.join("high.rs"), "use crate::low::deep::Thing;\n").unwrap();
    std::fs::write(dir.join("low/mod.rs"), "pub mod deep;\n").unwrap();
    // A comment naming crate::high must not count; the call must.
    std::fs::write(
        dir.join("low/deep.rs"),
        "// see crate::high\npub struct Thing;\nfn f() { super::super::high::g() }\n",
    )
    .unwrap();
    let mods = modules(&dir);
    let g = graph(&mods);
    let found = circles(&g);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        vec![vec!["high".to_string(), "low::deep".to_string()]],
        "graph: {g:?}"
    );
}
