//! MAC learning for the `normal` action: which port a (VLAN, MAC) was last
//! seen on.
//!
//! Consulted only by the slow path during translation; the fast path sees
//! the outcome as plain `output` actions. Every change that could alter a
//! cached decision (a new MAC, a MAC moving ports, an entry aging out) bumps
//! [`MacTable::generation`], and the bridge revalidates the datapath when it
//! moves, exactly as Open vSwitch's `mac-learning` tags do.

use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct MacEntry {
    pub port: u32,
    pub last_seen: Instant,
}

#[derive(Debug)]
pub struct MacTable {
    entries: HashMap<(u16, [u8; 6]), MacEntry>,
    /// Entries older than this are forgotten (OVS default: 300 s).
    pub aging: Duration,
    /// At most this many entries; a full table stops learning new MACs.
    pub max_entries: usize,
    generation: u64,
}

impl Default for MacTable {
    fn default() -> Self {
        MacTable::new(Duration::from_secs(300), 8192)
    }
}

impl MacTable {
    pub fn new(aging: Duration, max_entries: usize) -> Self {
        MacTable {
            entries: HashMap::new(),
            aging,
            max_entries,
            generation: 0,
        }
    }

    /// Bumped on every change that may alter a forwarding decision.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Learn that `mac` on `vlan` is behind `port`. Multicast sources are
    /// never learned.
    pub fn learn(&mut self, vlan: u16, mac: [u8; 6], port: u32, now: Instant) {
        if mac[0] & 1 != 0 {
            return;
        }
        let full = self.entries.len() >= self.max_entries;
        match self.entries.get_mut(&(vlan, mac)) {
            Some(e) => {
                if e.port != port {
                    e.port = port;
                    self.generation += 1;
                }
                e.last_seen = now;
            }
            None if !full => {
                self.entries.insert(
                    (vlan, mac),
                    MacEntry {
                        port,
                        last_seen: now,
                    },
                );
                self.generation += 1;
            }
            None => {}
        }
    }

    /// Mark an entry as seen without learning anything new: used when a
    /// cached flow carried traffic from this source.
    pub fn refresh(&mut self, vlan: u16, mac: [u8; 6], port: u32, when: Instant) {
        if let Some(e) = self.entries.get_mut(&(vlan, mac)) {
            if e.port == port && when > e.last_seen {
                e.last_seen = when;
            }
        }
    }

    pub fn lookup(&self, vlan: u16, mac: &[u8; 6]) -> Option<u32> {
        self.entries.get(&(vlan, *mac)).map(|e| e.port)
    }

    /// Forget entries not seen within the aging time. Returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let aging = self.aging;
        let before = self.entries.len();
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.last_seen) < aging);
        let n = before - self.entries.len();
        if n > 0 {
            self.generation += 1;
        }
        n
    }

    /// Forget everything learned on a port (it was removed).
    pub fn flush_port(&mut self, port: u32) {
        let before = self.entries.len();
        self.entries.retain(|_, e| e.port != port);
        if self.entries.len() != before {
            self.generation += 1;
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u16, [u8; 6], MacEntry)> + '_ {
        self.entries.iter().map(|((v, m), e)| (*v, *m, *e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learn_move_age() {
        let t0 = Instant::now();
        let mut t = MacTable::new(Duration::from_secs(10), 10);
        let m = [0, 1, 2, 3, 4, 5];
        t.learn(0, m, 1, t0);
        let g = t.generation();
        assert_eq!(t.lookup(0, &m), Some(1));
        t.learn(0, m, 1, t0);
        assert_eq!(
            t.generation(),
            g,
            "relearning the same port changes nothing"
        );
        t.learn(0, m, 2, t0);
        assert_eq!(t.lookup(0, &m), Some(2));
        assert!(t.generation() > g);
        assert_eq!(t.lookup(1, &m), None, "VLANs are separate");
        t.learn(0, [1, 0, 0, 0, 0, 1], 3, t0);
        assert_eq!(t.len(), 1, "multicast source not learned");
        assert_eq!(t.expire(t0 + Duration::from_secs(11)), 1);
        assert!(t.is_empty());
    }
}
