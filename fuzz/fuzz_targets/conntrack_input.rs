//! Any byte string through the connection tracker, as IPv4, IPv6 or an
//! arbitrary Ethernet type, with commit on and off: nothing may panic,
//! every verdict is tracked, and the dump of whatever got committed
//! formats.
#![no_main]
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use nicflow_conntrack::{state, Config, Conntrack, CtRequest, FlushFilter};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let dl_type = match sel & 3 {
        0 => 0x0800,
        1 => 0x86dd,
        2 => u16::from_be_bytes([sel, rest.first().copied().unwrap_or(0)]),
        _ => {
            if rest.first().is_some_and(|b| b >> 4 == 6) {
                0x86dd
            } else {
                0x0800
            }
        }
    };
    let mut ct = Conntrack::new(Config {
        limit: 4,
        ..Config::default()
    });
    let t0 = Instant::now();
    let reqs = [
        CtRequest::default(),
        CtRequest {
            zone: u16::from(sel),
            commit: true,
            force: sel & 4 != 0,
            set_mark: Some((u32::from(sel), u32::MAX)),
            set_label: Some((u128::from(sel) << 64, u128::MAX)),
            nat: None,
        },
        CtRequest {
            zone: u16::from(sel),
            ..CtRequest::default()
        },
    ];
    for (i, req) in reqs.iter().enumerate() {
        let now = t0 + Duration::from_secs(i as u64 * 40);
        let r = ct.process(dl_type, rest, req, now);
        assert!(r.state & state::TRK != 0);
        if r.state & state::INV != 0 {
            assert_eq!(r.state, state::INV | state::TRK);
        }
    }
    for e in ct.dump(None, t0) {
        let _ = e.format(true, true);
    }
    ct.sweep(t0 + Duration::from_secs(3600));
    ct.flush(&FlushFilter::default());
    assert!(ct.is_empty());
});
