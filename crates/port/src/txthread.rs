//! A transmit thread for a tunnel underlay (issue 34, `esp_tx_thread`).
//!
//! At one TCP stream through VXLAN over ESP the sealing daemon is the
//! serial stage: it receives the container's super-frames, cuts and seals
//! them, and sends the UDP super-frames with `sendmmsg`, whose kernel work
//! (the copy in, `_copy_from_iter`, and the softirq delivery to the veth's
//! peer run under the call) was a quarter of its time
//! (`docs/results/ipsec.md`, espone's profile). Here that call runs on a
//! thread of its own: the daemon's thread hands each finished batch over
//! and goes on with the next, the two overlapping on two CPUs.
//!
//! Batches (the `Vec` of frames, buffers and all) travel through two
//! bounded channels (std's array flavour: a lock-free ring; a blocked side
//! parks and is woken by the other), to the thread and back; the daemon's
//! thread takes its buffers back from the returned batches and keeps the
//! emptied vectors for later batches: no allocation per packet or per
//! batch once warm. Order is kept (one FIFO, one sender): the wire order,
//! and the ESP sequence numbers (assigned before the hand-over, by the
//! daemon's thread only), are those of the one-thread path. When
//! [`DEPTH`] batches wait, the daemon's thread waits for the sender
//! (counted: `underlay_tx_thread_waits`) rather than drop.

use crate::TxHalf;
use nicflow_packet::buf::PacketBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::{self, JoinHandle};

/// Batches waiting for the sender at most (one more may be on its way
/// out): enough to ride out a descheduled sender without holding many
/// buffers out of the daemon's pools.
pub(crate) const DEPTH: usize = 4;
/// A batch smaller than this (bytes of frames) is sent by the daemon's
/// thread itself while the transmit thread has nothing in hand: waking a
/// thread costs more than the `sendmmsg` of a few ACKs (the opening side
/// sends little else), and with nothing in flight the order is kept.
pub(crate) const INLINE_BYTES: usize = 16 * 1024;
/// Batch vectors in circulation at most: the one being filled, [`DEPTH`]
/// queued, one being sent, and one on its way back. The return channel
/// holds all of them, so the sender never blocks on it.
const VECS_MAX: usize = DEPTH + 3;

/// What the transmit thread did, shown with the underlay's counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TxThreadCounters {
    /// Batches handed to the thread.
    pub batches: u64,
    /// Small batches the daemon's thread sent itself ([`INLINE_BYTES`]).
    pub inline: u64,
    /// Times the daemon's thread waited because [`DEPTH`] batches were
    /// queued (the sender is the slower stage then).
    pub waits: u64,
}

/// The daemon thread's end of a transmit thread.
pub(crate) struct TxThread {
    to: Option<SyncSender<Vec<PacketBuf>>>,
    back: Receiver<Vec<PacketBuf>>,
    /// Emptied batch vectors, for the next batches.
    spare: Vec<Vec<PacketBuf>>,
    /// Batch vectors made so far (at most [`VECS_MAX`]).
    made: usize,
    worker: Option<JoinHandle<()>>,
    pub(crate) counters: TxThreadCounters,
}

/// The thread is not the one SIGINT/SIGTERM should land on: the daemon's
/// thread stops the loop.
fn block_signals() {
    // SAFETY: fills a local signal set and changes this thread's mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

impl TxThread {
    /// Starts a thread that sends through `half`.
    pub(crate) fn start(mut half: Box<dyn TxHalf>, name: &str) -> std::io::Result<TxThread> {
        let (to, from_main) = mpsc::sync_channel::<Vec<PacketBuf>>(DEPTH);
        let (to_main, back) = mpsc::sync_channel::<Vec<PacketBuf>>(VECS_MAX);
        let worker = thread::Builder::new().name(name.into()).spawn(move || {
            block_signals();
            while let Ok(batch) = from_main.recv() {
                half.send(&batch);
                // The daemon's end is gone: its buffers go with the batch.
                if to_main.send(batch).is_err() {
                    break;
                }
            }
        })?;
        Ok(TxThread {
            to: Some(to),
            back,
            spare: Vec::with_capacity(VECS_MAX),
            made: 1, // the caller's own vector
            worker: Some(worker),
            counters: TxThreadCounters::default(),
        })
    }

    /// Takes the buffers of batches the thread has sent into `done` and
    /// keeps their vectors.
    pub(crate) fn reclaim(&mut self, done: &mut Vec<PacketBuf>) {
        while let Ok(b) = self.back.try_recv() {
            self.keep(b, done);
        }
    }

    fn keep(&mut self, mut b: Vec<PacketBuf>, done: &mut Vec<PacketBuf>) {
        done.append(&mut b);
        self.spare.push(b);
    }

    /// Hands the frames of `tx` to the thread, in order, leaving `tx` an
    /// empty vector (a kept one); sent buffers of earlier batches go to
    /// `done`. Waits for the thread when [`DEPTH`] batches are queued.
    /// `Ok(false)` with the batch still in `tx`: a small one
    /// ([`INLINE_BYTES`]) while nothing is in flight, for the caller to
    /// send now. `Err` with the batch still in `tx`: the thread is gone
    /// (the caller sends it itself).
    pub(crate) fn submit(
        &mut self,
        tx: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> Result<bool, ()> {
        if tx.is_empty() {
            return Ok(true);
        }
        if self.to.is_none() {
            return Err(());
        }
        self.reclaim(done);
        if self.spare.len() + 1 == self.made
            && tx.iter().map(PacketBuf::len).sum::<usize>() < INLINE_BYTES
        {
            self.counters.inline += 1;
            return Ok(false);
        }
        let next = match self.spare.pop() {
            Some(v) => v,
            None if self.made < VECS_MAX => {
                self.made += 1;
                Vec::with_capacity(tx.capacity())
            }
            // Every vector is out: one comes back once the thread has
            // sent its batch.
            None => match self.back.recv() {
                Ok(mut b) => {
                    done.append(&mut b);
                    b
                }
                Err(_) => return Err(()),
            },
        };
        let batch = std::mem::replace(tx, next);
        let Some(to) = self.to.as_ref() else {
            return Err(());
        };
        let batch = match to.try_send(batch) {
            Ok(()) => {
                self.counters.batches += 1;
                return Ok(true);
            }
            Err(TrySendError::Full(b)) => b,
            Err(TrySendError::Disconnected(b)) => b,
        };
        // Full: the thread takes a batch off the queue before it sends it
        // and returns it after, so a returned batch means room.
        self.counters.waits += 1;
        let r = to.send(batch);
        match r {
            Ok(()) => {
                self.counters.batches += 1;
                Ok(true)
            }
            Err(mpsc::SendError(b)) => {
                let empty = std::mem::replace(tx, b);
                self.spare.push(empty);
                self.to = None;
                Err(())
            }
        }
    }
}

/// Stops the thread after it has sent what it was given (the channel
/// closes, it drains it and leaves); its buffers are dropped with it.
impl Drop for TxThread {
    fn drop(&mut self) {
        self.to = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Records the first byte of every frame it is given, slowly if asked.
    struct Recorder {
        seen: Arc<Mutex<Vec<u8>>>,
        delay: Duration,
    }

    impl TxHalf for Recorder {
        fn send(&mut self, pkts: &[PacketBuf]) -> usize {
            std::thread::sleep(self.delay);
            self.seen
                .lock()
                .unwrap()
                .extend(pkts.iter().map(|p| p.data()[0]));
            pkts.len()
        }
    }

    fn frame(b: u8) -> PacketBuf {
        sized(b, 60)
    }

    fn sized(b: u8, len: usize) -> PacketBuf {
        let mut p = PacketBuf::with_capacity(len);
        assert!(p.set_data(&vec![b; len]));
        p
    }

    /// Every frame is sent once, in the order handed over, across batches
    /// of any size and a sender slower than the daemon (the queue fills:
    /// waits counted); every buffer comes back, and no batch vector is
    /// made beyond `VECS_MAX`.
    #[test]
    fn batches_go_out_in_order_and_every_buffer_comes_back() {
        for delay_us in [0, 300] {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let half = Recorder {
                seen: seen.clone(),
                delay: Duration::from_micros(delay_us),
            };
            let mut t = TxThread::start(Box::new(half), "test-tx").unwrap();
            let mut tx = Vec::new();
            let mut done = Vec::new();
            let mut want = Vec::new();
            let mut n = 0u32;
            for round in 0..200u32 {
                for _ in 0..(round % 7) {
                    let b = (n % 251) as u8;
                    tx.push(frame(b));
                    want.push(b);
                    n += 1;
                }
                // Small batches with nothing in flight are the caller's:
                // sent here, in the same record, so the order is checked
                // across both ways.
                if !t.submit(&mut tx, &mut done).unwrap() {
                    seen.lock().unwrap().extend(tx.iter().map(|p| p.data()[0]));
                    done.append(&mut tx);
                }
                assert!(tx.is_empty());
            }
            drop(t); // drains and joins
            assert_eq!(*seen.lock().unwrap(), want, "delay {delay_us} µs");
            // Buffers returned before the drop are in `done`; none twice.
            assert!(done.len() <= want.len());
        }
    }

    #[test]
    fn buffers_and_vectors_are_reused_once_warm() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let half = Recorder {
            seen: seen.clone(),
            delay: Duration::from_micros(50),
        };
        let mut t = TxThread::start(Box::new(half), "test-tx").unwrap();
        let mut tx = Vec::with_capacity(16);
        let mut done = Vec::new();
        let mut total = 0;
        let mut fresh = 0;
        for _ in 0..500 {
            for k in 0..8 {
                tx.push(done.pop().unwrap_or_else(|| {
                    fresh += 1;
                    sized(k, 4096)
                }));
            }
            total += 8;
            assert!(t.submit(&mut tx, &mut done).unwrap(), "32 KiB: threaded");
            assert!(t.made <= VECS_MAX);
        }
        // Buffers in circulation: at most VECS_MAX batches of 8, so the
        // frames were made from recycled buffers once warm.
        assert!(fresh <= VECS_MAX * 8, "{fresh} buffers made");
        let waits = t.counters.waits;
        assert_eq!(t.counters.batches, 500);
        drop(t);
        assert_eq!(seen.lock().unwrap().len(), total);
        assert!(waits > 0, "a 50 µs sender fills the queue");
    }

    /// A sender that went away (its half panicked) leaves the batch with
    /// the caller, which sends it another way.
    #[test]
    fn a_dead_thread_gives_the_batch_back() {
        struct Panics;
        impl TxHalf for Panics {
            fn send(&mut self, _: &[PacketBuf]) -> usize {
                panic!("test: sender dies")
            }
        }
        let mut t = TxThread::start(Box::new(Panics), "test-tx").unwrap();
        let mut done = Vec::new();
        let mut tx = vec![sized(1, INLINE_BYTES)];
        // The first batch may be queued before the thread dies.
        let _ = t.submit(&mut tx, &mut done);
        let mut gave_back = false;
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(2));
            tx.push(sized(2, INLINE_BYTES));
            if t.submit(&mut tx, &mut done).is_err() {
                gave_back = true;
                assert_eq!(tx.last().unwrap().data()[0], 2);
                break;
            }
            tx.clear();
        }
        assert!(gave_back);
    }
}
