//! In-memory ports: queues instead of rings, for tests and benchmarks.
//!
//! A [`MemPort`] is attached to a bridge like any port; the test keeps the
//! matching [`MemHandle`] to inject frames into the port's receive side and
//! collect what the bridge transmitted. In *replay* mode the port cycles over
//! a fixed set of frames forever and only counts transmissions, which is what
//! the datapath benchmark drives.

use super::{Port, PortStats};
use nicflow_packet::buf::{Offload, PacketBuf};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct State {
    rx: VecDeque<Vec<u8>>,
    /// Offload state of each frame in `rx` (`inject_with_offload`).
    rx_offloads: VecDeque<Option<Offload>>,
    tx: Vec<Vec<u8>>,
    /// Keep transmitted frames (false: only count them).
    capture: bool,
    replay: Vec<Vec<u8>>,
    replay_pos: usize,
    stats: PortStats,
    /// Take frames with offload work, as a port with virtio-net headers
    /// does ([`MemPort::with_offloads`]); their offload state is kept in
    /// `tx_offloads` beside `tx`.
    offloads: bool,
    tx_offloads: Vec<Option<Offload>>,
}

/// The test's side of a [`MemPort`].
#[derive(Clone)]
pub struct MemHandle(Arc<Mutex<State>>);

impl MemHandle {
    /// Queue a frame for the bridge to receive.
    pub fn inject(&self, frame: &[u8]) {
        self.inject_with_offload(frame, None);
    }

    /// Queue a frame with offload state (a whole UDP super-frame, as a
    /// port with virtio-net headers hands one over when asked to keep it).
    pub fn inject_with_offload(&self, frame: &[u8], offload: Option<Offload>) {
        let mut s = self.0.lock().expect("mem port");
        s.rx.push_back(frame.to_vec());
        s.rx_offloads.push_back(offload);
    }

    /// Take every frame transmitted so far.
    pub fn take_tx(&self) -> Vec<Vec<u8>> {
        let mut s = self.0.lock().expect("mem port");
        s.tx_offloads.clear();
        std::mem::take(&mut s.tx)
    }

    /// Take every frame transmitted so far with its offload state (a port
    /// made [`MemPort::with_offloads`]).
    pub fn take_tx_offloads(&self) -> Vec<(Vec<u8>, Option<Offload>)> {
        let mut s = self.0.lock().expect("mem port");
        let o = std::mem::take(&mut s.tx_offloads);
        std::mem::take(&mut s.tx).into_iter().zip(o).collect()
    }

    pub fn rx_pending(&self) -> usize {
        self.0.lock().expect("mem port").rx.len()
    }

    pub fn stats(&self) -> PortStats {
        self.0.lock().expect("mem port").stats.clone()
    }
}

pub struct MemPort {
    name: String,
    state: Arc<Mutex<State>>,
}

impl MemPort {
    /// A port that captures what it transmits.
    pub fn new(name: &str) -> (MemPort, MemHandle) {
        let state = Arc::new(Mutex::new(State {
            capture: true,
            ..Default::default()
        }));
        (
            MemPort {
                name: name.to_string(),
                state: state.clone(),
            },
            MemHandle(state),
        )
    }

    /// A capturing port that takes frames with offload work whole
    /// ([`Port::accepts_offloads`]), as AF_PACKET with `vnet_hdr` does.
    pub fn with_offloads(name: &str) -> (MemPort, MemHandle) {
        let (p, h) = MemPort::new(name);
        p.state.lock().expect("mem port").offloads = true;
        (p, h)
    }

    /// A port that receives `frames` round-robin forever and only counts
    /// what it transmits.
    pub fn replay(name: &str, frames: Vec<Vec<u8>>) -> (MemPort, MemHandle) {
        let (p, h) = MemPort::new(name);
        {
            let mut s = p.state.lock().expect("mem port");
            s.capture = false;
            s.replay = frames;
        }
        (p, h)
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let mut s = self.state.lock().expect("mem port");
        let mut n = 0;
        while n < max {
            let frame: &[u8];
            let owned;
            let mut offload = None;
            if !s.replay.is_empty() {
                let i = s.replay_pos;
                s.replay_pos = (i + 1) % s.replay.len();
                owned = None;
                frame = &s.replay[i];
            } else {
                match s.rx.pop_front() {
                    Some(f) => {
                        offload = s.rx_offloads.pop_front().flatten();
                        owned = Some(f);
                        frame = owned.as_deref().unwrap_or(&[]);
                    }
                    None => break,
                }
            }
            let len = frame.len();
            let buf = match pool.pop() {
                Some(mut b) => {
                    if b.set_data(frame) {
                        b
                    } else {
                        PacketBuf::from_slice(frame)
                    }
                }
                None => PacketBuf::from_slice(frame),
            };
            let mut buf = buf;
            buf.offload = offload;
            out.push(buf);
            n += 1;
            drop(owned);
            s.stats.rx_packets += 1;
            s.stats.rx_bytes += len as u64;
        }
        Ok(n)
    }

    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let mut s = self.state.lock().expect("mem port");
        let n = pkts.len();
        for p in pkts.drain(..) {
            s.stats.tx_packets += 1;
            s.stats.tx_bytes += p.len() as u64;
            if s.capture {
                s.tx.push(p.data().to_vec());
                s.tx_offloads.push(p.offload);
            }
            done.push(p);
        }
        Ok(n)
    }

    fn stats(&self) -> PortStats {
        self.state.lock().expect("mem port").stats.clone()
    }

    fn rx_exhausted(&self) -> bool {
        let s = self.state.lock().expect("mem port");
        s.replay.is_empty() && s.rx.is_empty()
    }

    fn accepts_offloads(&self) -> bool {
        self.state.lock().expect("mem port").offloads
    }

    /// A port made [`MemPort::with_offloads`] says yes; any port hands
    /// over the offload state of what was injected with it
    /// ([`MemHandle::inject_with_offload`]), asked or not.
    fn keep_udp_super_frames(&mut self) -> bool {
        self.state.lock().expect("mem port").offloads
    }
}
