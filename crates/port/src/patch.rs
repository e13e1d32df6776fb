//! Patch ports: two bridges joined in memory, as OVS's `type=patch` with
//! `options:peer`. A frame one bridge sends on patch port `a` is received
//! by the bridge owning `a`'s peer `b`, and back. No kernel device is
//! involved, so flows through a patch port stay in userspace (offload
//! reason `port:patch`).
//!
//! The pair meets through a process-wide registry keyed by port name
//! (interface names are unique in an OVS database, as here): each port
//! registers its inbox, the sender looks its peer's up once per batch (one
//! uncontended lock: the daemon's loop is one thread). A
//! port whose peer is absent (not yet added, or not pointing back) drops
//! what it sends, counted, as OVS does. Buffers move with their frames;
//! for each frame received the receiver hands one free buffer of its own
//! pool back to the sender while that pool has one, so a steady stream
//! needs no allocation unless the receiver's own pool runs dry.
//! An eventfd per inbox wakes the receiving bridge's poll loop.

use super::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// Frames an inbox holds before the sender drops (a peer that is not
/// being polled must not grow memory without bound).
const INBOX_MAX: usize = 4096;

struct Inbox {
    frames: Mutex<VecDeque<PacketBuf>>,
    /// Free buffers the peer gave back for the frames it took.
    returned: Mutex<Vec<PacketBuf>>,
    /// Readable while frames wait.
    event: OwnedFd,
    /// The port this inbox belongs to expects frames from this peer only.
    peer: String,
}

impl Inbox {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn drain_event(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from our non-blocking eventfd.
        unsafe { libc::read(self.event.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

fn registry() -> &'static Mutex<BTreeMap<String, Arc<Inbox>>> {
    static R: std::sync::OnceLock<Mutex<BTreeMap<String, Arc<Inbox>>>> = std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// See the module documentation.
pub struct PatchPort {
    name: String,
    peer: String,
    inbox: Arc<Inbox>,
    stats: PortStats,
    /// Frames dropped because the peer was absent or did not point back.
    no_peer: u64,
    /// Frames dropped because the peer's inbox was full.
    full: u64,
}

impl PatchPort {
    /// Patch port `name` whose peer is the patch port named `peer`.
    pub fn open(name: &str, peer: &str) -> io::Result<PatchPort> {
        if peer.is_empty() || peer == name {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("patch port {name}: options:peer must name another patch port"),
            ));
        }
        // SAFETY: eventfd returns a new descriptor we own, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned here only.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        let inbox = Arc::new(Inbox {
            frames: Mutex::new(VecDeque::new()),
            returned: Mutex::new(Vec::new()),
            event,
            peer: peer.to_string(),
        });
        let mut r = registry().lock().expect("patch registry");
        if r.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("patch port {name} is already open"),
            ));
        }
        r.insert(name.to_string(), inbox.clone());
        Ok(PatchPort {
            name: name.to_string(),
            peer: peer.to_string(),
            inbox,
            stats: PortStats::default(),
            no_peer: 0,
            full: 0,
        })
    }

    /// The peer's inbox, if it exists and names this port as its peer.
    fn peer_inbox(&self) -> Option<Arc<Inbox>> {
        let r = registry().lock().expect("patch registry");
        r.get(&self.peer).filter(|i| i.peer == self.name).cloned()
    }
}

impl Drop for PatchPort {
    fn drop(&mut self) {
        let mut r = registry().lock().expect("patch registry");
        if r.get(&self.name)
            .is_some_and(|i| Arc::ptr_eq(i, &self.inbox))
        {
            r.remove(&self.name);
        }
    }
}

impl Port for PatchPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        self.inbox.drain_event();
        let mut n = 0;
        {
            let mut q = self.inbox.frames.lock().expect("patch inbox");
            while n < max {
                let Some(b) = q.pop_front() else { break };
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += b.len() as u64;
                out.push(b);
                n += 1;
            }
            if !q.is_empty() {
                self.inbox.wake();
            }
        }
        // One free buffer back to the sender per frame taken.
        if n > 0 {
            if let Some(peer) = self.peer_inbox() {
                let give = n.min(pool.len());
                let mut back = peer.returned.lock().expect("patch inbox");
                back.extend(pool.drain(pool.len() - give..));
            }
        }
        Ok(n)
    }

    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        done.append(&mut self.inbox.returned.lock().expect("patch inbox"));
        let Some(peer) = self.peer_inbox() else {
            self.no_peer += pkts.len() as u64;
            self.stats.tx_dropped += pkts.len() as u64;
            done.append(pkts);
            return Ok(0);
        };
        let mut sent = 0;
        {
            let mut q = peer.frames.lock().expect("patch inbox");
            for b in pkts.drain(..) {
                if q.len() >= INBOX_MAX {
                    self.full += 1;
                    self.stats.tx_dropped += 1;
                    done.push(b);
                    continue;
                }
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += b.len() as u64;
                q.push_back(b);
                sent += 1;
            }
        }
        if sent > 0 {
            peer.wake();
        }
        Ok(sent)
    }

    fn stats(&self) -> PortStats {
        self.stats.clone()
    }

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("tx_drop_no_peer", self.no_peer),
            ("tx_drop_full", self.full),
        ]
    }

    fn rx_fd(&self) -> Option<RawFd> {
        Some(self.inbox.event.as_raw_fd())
    }

    fn has_deferred_work(&self) -> bool {
        !self.inbox.frames.lock().expect("patch inbox").is_empty()
    }

    fn kind(&self) -> &'static str {
        "patch"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(b: u8) -> PacketBuf {
        let mut p = PacketBuf::with_capacity(64);
        p.set_data(&[b; 60]);
        p
    }

    #[test]
    fn a_pair_exchanges_frames_and_an_unpaired_port_drops() {
        let mut a = PatchPort::open("nfpt-a", "nfpt-b").unwrap();
        let (mut out, mut done, mut pool) = (Vec::new(), Vec::new(), Vec::new());
        // No peer yet: dropped, counted.
        let mut pk = vec![frame(1)];
        assert_eq!(a.send_batch(&mut pk, &mut done).unwrap(), 0);
        assert_eq!(a.stats().tx_dropped, 1);
        let mut b = PatchPort::open("nfpt-b", "nfpt-a").unwrap();
        assert!(PatchPort::open("nfpt-b", "nfpt-a").is_err());
        let mut pk = vec![frame(2), frame(3)];
        assert_eq!(a.send_batch(&mut pk, &mut done).unwrap(), 2);
        assert!(b.has_deferred_work());
        pool.push(PacketBuf::with_capacity(64));
        assert_eq!(b.recv_batch(&mut out, 64, &mut pool).unwrap(), 2);
        assert_eq!(out[0].data()[0], 2);
        assert_eq!(out[1].data()[0], 3);
        // b gave its one free buffer back to a.
        assert!(pool.is_empty());
        let before = done.len();
        a.send_batch(&mut Vec::new(), &mut done).unwrap();
        assert_eq!(done.len(), before + 1);
        // A peer that points elsewhere is no peer.
        let mut c = PatchPort::open("nfpt-c", "nfpt-x").unwrap();
        let mut pk = vec![frame(4)];
        assert_eq!(c.send_batch(&mut pk, &mut done).unwrap(), 0);
        drop(b);
        let mut pk = vec![frame(5)];
        assert_eq!(a.send_batch(&mut pk, &mut done).unwrap(), 0);
    }
}
