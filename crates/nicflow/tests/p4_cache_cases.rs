//! Fixed cases of the P4 cache, each once a bug a review found: a later
//! packet taking an earlier packet's cached flow and coming out
//! differently from what the program does. Each program and STF test is
//! ours (tests/p4/); each must pass through the interpreter and through
//! the cache.
//!
//! - slice: `dst[7:0] = 1` on a packet whose low byte already was 1
//! - ihl, v6ext: IPv4 options / IPv6 extension headers move L4
//! - tpid: 0x8100 and 0x88a8 tags look alike in the flow key
//! - len: 802.3 length fields all look alike in the flow key
//! - arp, arpop: ARP format fields and the opcode's high byte
//! - learn, unparsed_learn: an entry learned by a run that is not cached
//!   for another reason, or from a frame nicflow cannot parse

mod common;

use std::path::Path;

const CASES: &[(&str, &str)] = &[
    ("slice.p4", "slice.stf"),
    ("ihl.p4", "ihl.stf"),
    ("v6ext.p4", "v6ext.stf"),
    ("tpid.p4", "tpid.stf"),
    ("len.p4", "len.stf"),
    ("arp.p4", "arp.stf"),
    ("arpop.p4", "arpop.stf"),
    ("learn.p4", "learn.stf"),
    ("learn_notaint.p4", "unparsed_learn.stf"),
];

#[test]
fn reviewed_cases_agree_through_the_cache() {
    let Some(corpus) = nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))])
        .map(|c| c.join("include"))
    else {
        common::skipped(
            "no P4 corpus (shared/p4-corpus beside the checkout, or $NICFLOW_P4_CORPUS)",
        );
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/p4");
    let mut failures = Vec::new();
    for (prog, test) in CASES {
        let o = nicflow::p4cli::run_stf(
            &dir.join(prog),
            &dir.join(test),
            None,
            std::slice::from_ref(&corpus),
        )
        .unwrap_or_else(|e| panic!("{prog}: {e:#}"));
        println!(
            "{test}: {:?} / {:?}, uncached {:?}",
            o.interpreter, o.cached, o.slow_path
        );
        if let Err(e) = o.interpreter {
            failures.push(format!("{test} (interpreter): {e}"));
        }
        if let Err(e) = o.cached {
            failures.push(format!("{test} (cache): {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
