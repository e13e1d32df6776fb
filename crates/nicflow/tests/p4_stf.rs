//! p4c's own STF tests (../shared/p4-corpus) through `nicflow p4 stf`'s
//! runner: every program the supported subset covers must give the
//! expected packets through the interpreter alone and through a bridge's
//! caches (each packet sent three times, so the later copies take the
//! cached flows). The programs whose decisions are cacheable must
//! actually be cached. Programs outside the subset are named with why.

mod common;

use std::path::{Path, PathBuf};

fn corpus() -> Option<PathBuf> {
    let found = nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))]);
    if found.is_none() {
        common::skipped(
            "no P4 corpus (shared/p4-corpus beside the checkout, or $NICFLOW_P4_CORPUS)",
        );
    }
    found
}

/// (program, test, must the cached pass install flows?)
const CASES: &[(&str, &str, bool)] = &[
    ("pna/simple_l3.p4", "pna/simple_l3.stf", true),
    ("pna/routing.p4", "pna/routing.stf", true),
    ("pna/routing.p4", "pna/routing_default.stf", true),
    ("pna/arp_respond.p4", "pna/arp_respond.stf", true),
    // Custom headers, header push/pop, the IPv4 length fields or the
    // payload: no datapath key field or action covers them; every packet
    // runs the program (named by reason in the output).
    ("pna/ipip.p4", "pna/ipip_encap.stf", false),
    ("pna/ipip.p4", "pna/ipip_decap.stf", false),
    ("pna/calc_128.p4", "pna/calc_128.stf", false),
    // 5-byte frames, not Ethernet: nothing to key a flow on.
    (
        "v1model/table-entries-lpm-bmv2.p4",
        "v1model/table-entries-lpm-bmv2.stf",
        false,
    ),
    (
        "v1model/table-entries-ternary-bmv2.p4",
        "v1model/table-entries-ternary-bmv2.stf",
        false,
    ),
    (
        "v1model/ternary2-bmv2.p4",
        "v1model/ternary2-bmv2.stf",
        false,
    ),
    (
        "v1model/checksum-l4-bmv2.p4",
        "v1model/checksum-l4-bmv2.stf",
        false,
    ),
    (
        "psa/psa-register-read-write-2-bmv2.p4",
        "psa/psa-register-read-write-2-bmv2.stf",
        false,
    ),
    (
        "psa/psa-recirculate-no-meta-bmv2.p4",
        "psa/psa-recirculate-no-meta-bmv2.stf",
        false,
    ),
    (
        "psa/psa-basic-counter-bmv2.p4",
        "psa/psa-basic-counter-bmv2.stf",
        true,
    ),
    // Resubmit, recirculate, I2E/E2E clones, multicast (BMv2's mirroring
    // and multicast commands in the STF): uncached, by reason.
    (
        "v1model/v1model-special-ops-bmv2.p4",
        "v1model/v1model-special-ops-bmv2.stf",
        false,
    ),
];

fn text_of(corpus: &Path, test: &str) -> String {
    let t = std::fs::read_to_string(corpus.join(test)).unwrap();
    if test.ends_with("ipip_decap.stf") {
        // Upstream quirk (corpus README): the expected frame is written as
        // a second `packet` line; it is the expectation.
        let mut seen = 0;
        return t
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("packet") {
                    seen += 1;
                    if seen == 2 {
                        return l.replacen("packet", "expect", 1);
                    }
                }
                l.to_string()
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    t
}

#[test]
fn upstream_stf_tests_pass_uncached_and_through_the_cache() {
    let Some(c) = corpus() else { return };
    let inc = vec![c.join("include")];
    let mut failures = Vec::new();
    for (prog, test, must_cache) in CASES {
        let text = text_of(&c, test);
        let o = nicflow::p4cli::run_stf_text(&c.join(prog), test, &text, None, &inc)
            .unwrap_or_else(|e| panic!("{prog}: {e:#}"));
        println!(
            "{test}: interpreter {:?}, cache {:?}, runs {}, cached {}, uncached {:?}",
            o.interpreter, o.cached, o.runs, o.cached_flows, o.slow_path
        );
        if let Err(e) = &o.interpreter {
            failures.push(format!("{test} (interpreter): {e}"));
        }
        if let Err(e) = &o.cached {
            failures.push(format!("{test} (cache): {e}"));
        }
        if *must_cache && o.cached_flows == 0 {
            failures.push(format!("{test}: nothing was cached ({:?})", o.slow_path));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
