//! Where p4c's test corpus is: the oracle data of the P4 tests, the demo
//! and `bench p4`, which live outside the repository (`../shared/p4-corpus`
//! beside the checkout) and are read in place, never copied in.
//!
//! One lookup for every user, so a checkout that is not beside `shared/`
//! (a git worktree, a CI clone elsewhere) finds the same corpus instead of
//! some callers silently skipping: `$NICFLOW_P4_CORPUS` (alone, when set), then
//! `shared/p4-corpus` in any ancestor of the given start directories, then
//! `/work/shared/p4-corpus`.

use std::path::{Path, PathBuf};

/// The machine-wide place of the corpus, the last one tried.
pub const DEFAULT_CORPUS: &str = "/work/shared/p4-corpus";

/// The corpus directory (it holds `include/core.p4`), searched from
/// `starts` (e.g. `env!("CARGO_MANIFEST_DIR")`, the current directory);
/// `None` when there is none.
/// A `$NICFLOW_P4_CORPUS` that holds no corpus is not passed over for
/// another one: it gives `None` (and says so on stderr), as the user asked
/// for that directory.
pub fn find_corpus(starts: &[&Path]) -> Option<PathBuf> {
    let is_corpus = |c: &PathBuf| c.join("include/core.p4").is_file();
    if let Some(env) = std::env::var_os("NICFLOW_P4_CORPUS").map(PathBuf::from) {
        if is_corpus(&env) {
            return Some(env);
        }
        eprintln!(
            "NICFLOW_P4_CORPUS={} holds no P4 corpus (no include/core.p4)",
            env.display()
        );
        return None;
    }
    starts
        .iter()
        .flat_map(|s| s.ancestors().map(|a| a.join("shared/p4-corpus")))
        .chain(std::iter::once(PathBuf::from(DEFAULT_CORPUS)))
        .find(is_corpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corpus_beside_an_ancestor_is_found_and_a_missing_one_is_not() {
        let root = std::env::temp_dir().join(format!("nicflow-corpus-{}", std::process::id()));
        let inc = root.join("shared/p4-corpus/include");
        std::fs::create_dir_all(&inc).unwrap();
        std::fs::write(inc.join("core.p4"), "").unwrap();
        let deep = root.join("repo/crates/x");
        std::fs::create_dir_all(&deep).unwrap();
        let found = find_corpus(&[&deep]);
        // $NICFLOW_P4_CORPUS, when the environment sets it, comes first.
        if std::env::var_os("NICFLOW_P4_CORPUS").is_none() {
            assert_eq!(found, Some(root.join("shared/p4-corpus")));
        }
        std::fs::remove_file(inc.join("core.p4")).unwrap();
        let again = find_corpus(&[&deep]);
        assert_ne!(again, Some(root.join("shared/p4-corpus")));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
