//! An STF test through the cache: a bridge in P4 mode with in-memory
//! ports, so that every packet goes through the datapath's caches in
//! front of the interpreter, exactly as on a running switch (the
//! `nicflow p4 stf` command and the corpus tests send each packet three
//! times: the first copy is an upcall, the others hit the flow it cached,
//! unless the decision was not cacheable).

use super::{P4Path, PortMap};
use crate::bridge::Bridge;
use crate::datapath::DatapathConfig;
use nicflow_p4::stf::{apply_to, Command, Replication, StfTarget, StfTest};
use nicflow_p4::Pipeline;
use nicflow_port::mem::{MemHandle, MemPort};
use std::collections::BTreeMap;
use std::time::Instant;

/// A bridge whose ports are the test's ports: P4 port N is bridge port
/// N + 1 (bridge ports start at 1).
pub struct CachedTarget {
    pub bridge: Bridge,
    handles: BTreeMap<u32, MemHandle>,
    start: Instant,
    pre: Replication,
}

/// Every port a test sends to or expects on.
pub fn test_ports(test: &StfTest) -> Vec<u32> {
    let mut ports: Vec<u32> = test
        .commands
        .iter()
        .filter_map(|(_, c)| match c {
            Command::Packet { port, .. } | Command::Expect { port, .. } => Some(*port),
            _ => None,
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

impl CachedTarget {
    pub fn new(pipeline: Pipeline, ports: &[u32]) -> Result<CachedTarget, String> {
        let mut bridge = Bridge::new("p4stf", DatapathConfig::default());
        let mut map = PortMap::default();
        let mut handles = BTreeMap::new();
        for &p in ports {
            let (port, h) = MemPort::new(&format!("p{p}"));
            let no = bridge
                .add_port(Box::new(port))
                .map_err(|e| format!("port {p}: {e}"))?;
            map.insert(p, no);
            handles.insert(p, h);
        }
        bridge.p4_load(P4Path::new(pipeline, "stf".into(), map));
        Ok(CachedTarget {
            bridge,
            handles,
            start: Instant::now(),
            pre: Replication::default(),
        })
    }

    fn now(&self) -> Instant {
        // A fixed clock: the test must not depend on how fast it runs.
        self.start
    }
}

impl StfTarget for CachedTarget {
    fn apply(&mut self, cmd: &Command) -> Result<(), String> {
        let pre = &mut self.pre;
        let table = match cmd {
            Command::Add(a) => a.table.clone(),
            Command::SetDefault { table, .. } => table.clone(),
            // Mirroring and multicast: every run that uses them is
            // uncached, so no cached flow depends on them.
            _ => {
                return self
                    .bridge
                    .p4_change(|p4| apply_to(p4.pipeline_mut(), pre, cmd))
                    .ok_or("bridge not in P4 mode")?
                    .map(|_| ())
            }
        };
        self.bridge
            .p4_change(|p4| p4.change_table(&table, |pl, _| apply_to(pl, pre, cmd)))
            .ok_or("bridge not in P4 mode")?
            .map(|_| ())
    }

    fn send(&mut self, port: u32, data: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, String> {
        let h = self
            .handles
            .get(&port)
            .ok_or_else(|| format!("no port {port}"))?;
        h.inject(data);
        let now = self.now();
        self.bridge.run_until_idle(now);
        let mut out = Vec::new();
        for (p, h) in &self.handles {
            for f in h.take_tx() {
                out.push((*p, f));
            }
        }
        Ok(out)
    }
}
