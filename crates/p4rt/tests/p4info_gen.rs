//! nicflow's generated P4Info against p4c's: for every program of the shared
//! corpus that comes with a `.p4info.txtpb`, the tables, keys, actions,
//! parameters and externs must agree by name, bitwidth, match kind, action
//! scope and table size (ids may differ: nicflow's stable ids are not p4c's).
//! Also checks that our text format parses back to the same message and
//! prints p4c's own files byte for byte.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use nicflow_p4rt::p4info::{match_type, preamble_name};
use nicflow_p4rt::p4info_gen::{from_text, generate, to_text};
use nicflow_p4rt::proto::p4::config::v1 as cfg;

fn corpus() -> Option<PathBuf> {
    nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))])
}

fn action_name(info: &cfg::P4Info, id: u32) -> String {
    info.actions
        .iter()
        .find(|a| a.preamble.as_ref().is_some_and(|p| p.id == id))
        .map_or(format!("<id {id}>"), |a| {
            preamble_name(&a.preamble).to_string()
        })
}

/// Names of the actions some table of `info` refers to.
fn table_actions(info: &cfg::P4Info) -> BTreeSet<String> {
    info.tables
        .iter()
        .flat_map(|t| t.action_refs.iter().map(|r| action_name(info, r.id)))
        .collect()
}

/// Everything we compare, as text lines (id-free).
fn summary(info: &cfg::P4Info) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    out.insert(format!(
        "arch {}",
        info.pkg_info.as_ref().map_or("", |p| p.arch.as_str())
    ));
    for t in &info.tables {
        let n = preamble_name(&t.preamble);
        out.insert(format!(
            "table {n} size {} const {}",
            t.size, t.is_const_table
        ));
        for (i, f) in t.match_fields.iter().enumerate() {
            out.insert(format!(
                "table {n} key #{i} {} {} {:?}",
                f.name,
                f.bitwidth,
                match_type(f)
            ));
        }
        for r in &t.action_refs {
            out.insert(format!(
                "table {n} action {} scope {}",
                action_name(info, r.id),
                r.scope
            ));
        }
        if t.const_default_action_id != 0 {
            out.insert(format!(
                "table {n} const default {}",
                action_name(info, t.const_default_action_id)
            ));
        }
        out.insert(format!("table {n} idle {}", t.idle_timeout_behavior));
        out.insert(format!(
            "table {n} direct resources {}",
            t.direct_resource_ids.len()
        ));
    }
    for a in &info.actions {
        let n = preamble_name(&a.preamble);
        out.insert(format!("action {n}"));
        for (i, p) in a.params.iter().enumerate() {
            out.insert(format!("action {n} param #{i} {} {}", p.name, p.bitwidth));
        }
    }
    for c in &info.counters {
        out.insert(format!(
            "counter {} size {}",
            preamble_name(&c.preamble),
            c.size
        ));
    }
    for c in &info.direct_counters {
        out.insert(format!("direct counter {}", preamble_name(&c.preamble)));
    }
    for c in &info.meters {
        out.insert(format!(
            "meter {} size {}",
            preamble_name(&c.preamble),
            c.size
        ));
    }
    for c in &info.direct_meters {
        out.insert(format!("direct meter {}", preamble_name(&c.preamble)));
    }
    for r in &info.registers {
        out.insert(format!(
            "register {} size {}",
            preamble_name(&r.preamble),
            r.size
        ));
    }
    out
}

#[test]
fn generated_p4info_matches_p4c() {
    let Some(corpus) = corpus() else {
        println!(
            "SKIP generated_p4info_matches_p4c: shared/p4-corpus not found (set NICFLOW_P4_CORPUS)"
        );
        return;
    };
    let include = vec![corpus.join("include")];
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus.join("v1model"))
        .into_iter()
        .chain(std::fs::read_dir(corpus.join("psa")))
        .chain(std::fs::read_dir(corpus.join("pna")))
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".p4info.txtpb"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no .p4info.txtpb in {}",
        corpus.display()
    );
    let mut failures = Vec::new();
    let mut not_loaded = 0;
    for f in &files {
        let prog = PathBuf::from(f.to_string_lossy().trim_end_matches(".p4info.txtpb"));
        let text = std::fs::read_to_string(f).unwrap();
        let p4c = from_text(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        // Our printer writes p4c's files byte for byte (same layout).
        assert_eq!(to_text(&p4c).unwrap(), text, "{}", f.display());
        let pl = match nicflow_p4::Pipeline::load(&prog, &include, None) {
            Ok(pl) => pl,
            Err(e) => {
                // The interpreter's own limits (nicflow-p4), not P4Info's.
                println!(
                    "not compared: {}: the interpreter does not load it: {e}",
                    prog.display()
                );
                not_loaded += 1;
                continue;
            }
        };
        let ours = generate(&pl);
        // Our text parses back to the same P4Info.
        let printed = to_text(&ours).unwrap();
        assert_eq!(from_text(&printed).unwrap(), ours, "{}", prog.display());
        let (a, b) = (summary(&p4c), summary(&ours));
        // p4c also lists actions that are only called from control bodies
        // (no table refers to them; a controller cannot use them); the
        // interpreter exposes the actions of tables only.
        let in_tables = table_actions(&p4c);
        let missing: Vec<_> = a
            .difference(&b)
            .filter(|l| match l.strip_prefix("action ") {
                Some(n) if !n.contains(' ') => in_tables.contains(n),
                _ => true,
            })
            .collect();
        let extra: Vec<_> = b.difference(&a).collect();
        if missing.is_empty() && extra.is_empty() {
            println!("ok: {}", prog.display());
        } else {
            failures.push(format!(
                "{}:\n  p4c only: {missing:#?}\n  ours only: {extra:#?}",
                prog.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(not_loaded == 0, "{not_loaded} corpus programs do not load");
}
