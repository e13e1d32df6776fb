//! A bridge of in-memory ports (`p1`..`pN`) for the tests that need no
//! root: what each port sent is read back from its handle. Included with
//! `#[path]` by the in-memory test files (it needs none of `common`).

use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::{MemHandle, MemPort};

/// A bridge `br0` with ports `p1`..`pN` (OpenFlow ports 1..N) and `cfg`.
pub fn bridge_cfg(n_ports: usize, cfg: DatapathConfig) -> (Bridge, Vec<MemHandle>) {
    let mut br = Bridge::new("br0", cfg);
    let mut hs = Vec::new();
    for i in 1..=n_ports {
        let (p, h) = MemPort::new(&format!("p{i}"));
        br.add_port(Box::new(p)).unwrap();
        hs.push(h);
    }
    (br, hs)
}

/// [`bridge_cfg`] with the default datapath configuration.
pub fn bridge(n_ports: usize) -> (Bridge, Vec<MemHandle>) {
    bridge_cfg(n_ports, DatapathConfig::default())
}
