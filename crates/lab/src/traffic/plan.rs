//! What one transmit thread sends and when: its flows' templates, the
//! per-flow sequence counters, the pacing and the stop condition.
//!
//! Both transmit engines ([`super::xdp_tx`], [`super::packet_tx`]) drive
//! their ring from a `Plan`: ask [`Plan::due`] how many frames may be queued
//! now, read the clock once, and [`Plan::stamp`] each ring frame. Flows are
//! sent round robin, so after `N` packets flow `i` of `F` has sent
//! `N / F + (i < N % F)` — the figure the sink's `--expect`/`--flows` rely on.

use super::template::Template;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How many frames to queue next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Queue up to this many now.
    Send(usize),
    /// Nothing due yet (pacing), try again.
    Wait,
    /// Count reached, time up or stopped.
    Done,
}

/// One transmit thread's work.
pub struct Plan<'a> {
    /// This thread's flows (a subset of the run's, global indexes in
    /// `Template::flow`).
    pub templates: &'a [Template],
    /// Frame length written (size without FCS).
    pub frame_len: usize,
    /// Frames to queue in total (None: until `deadline`).
    pub target: Option<u64>,
    pub deadline: Instant,
    duration: Duration,
    /// Packets per second for this thread; 0: as fast as possible.
    pub rate: f64,
    /// Most frames per batch.
    pub batch: usize,
    /// Set by any thread (or a signal) to stop all.
    pub stop: &'a AtomicBool,
    pub start: Instant,
    next: usize,
    seqs: Vec<u32>,
    /// Frames queued so far.
    pub queued: u64,
}

impl<'a> Plan<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        templates: &'a [Template],
        frame_len: usize,
        target: Option<u64>,
        duration: Duration,
        rate: f64,
        batch: usize,
        stop: &'a AtomicBool,
    ) -> Plan<'a> {
        if rate > 0.0 {
            // Sleeps in `due` end within 1 µs of the deadline instead of the
            // default 50 µs timer slack (this thread only).
            // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        }
        let start = Instant::now();
        Plan {
            templates,
            frame_len,
            target,
            deadline: start + duration,
            duration,
            rate,
            batch: batch.max(1),
            stop,
            start,
            next: 0,
            seqs: vec![0; templates.len()],
            queued: 0,
        }
    }

    /// Restart the clock (once the ring is set up), so set-up time does
    /// not count against the duration or the rate.
    pub fn restart(&mut self) {
        self.start = Instant::now();
        self.deadline = self.start + self.duration;
    }

    /// How many frames may be queued now. With a rate, sleeps (or spins,
    /// when the next frame is due within 20 µs) until the next frame is
    /// due, and never lets a burst exceed `batch`.
    pub fn due(&mut self) -> Due {
        if self.stop.load(Ordering::Relaxed) || super::stopped() {
            return Due::Done;
        }
        let mut k = self.batch as u64;
        if let Some(t) = self.target {
            if self.queued >= t {
                return Due::Done;
            }
            k = k.min(t - self.queued);
        }
        let now = Instant::now();
        if now >= self.deadline {
            return Due::Done;
        }
        if self.rate > 0.0 {
            let allowed = (now.duration_since(self.start).as_secs_f64() * self.rate) as u64 + 1;
            if allowed <= self.queued {
                let at = self.start + Duration::from_secs_f64(self.queued as f64 / self.rate);
                let wait = at.saturating_duration_since(now);
                if wait > Duration::from_micros(20) {
                    // Sleep rather than spin: on a small shared machine the
                    // receiver needs the CPU (see `Plan::new`: 1 µs slack).
                    std::thread::sleep(wait - Duration::from_micros(10));
                } else {
                    std::hint::spin_loop();
                }
                return Due::Wait;
            }
            k = k.min(allowed - self.queued);
        }
        Due::Send(k as usize)
    }

    /// Fill `frame` (a ring frame whose current content belongs to local
    /// flow `*tag`, `u32::MAX` if none) with the next packet, stamped
    /// `ts_ns`. Copies the template's header bytes only when the frame last
    /// held another flow; otherwise patches seq, timestamp and checksum.
    #[inline(always)]
    pub fn stamp(&mut self, frame: &mut [u8], tag: &mut u32, ts_ns: u64) {
        let j = self.next;
        self.next += 1;
        if self.next == self.templates.len() {
            self.next = 0;
        }
        let t = &self.templates[j];
        if *tag != j as u32 {
            frame[..t.head_len].copy_from_slice(&t.bytes[..t.head_len]);
            *tag = j as u32;
        }
        let seq = self.seqs[j];
        self.seqs[j] = seq.wrapping_add(1);
        t.patch(frame, seq, ts_ns);
        self.queued += 1;
    }
}

/// What one transmit thread did.
#[derive(Clone, Debug, Default)]
pub struct ThreadOut {
    /// Frames the kernel took and finished with (transmitted or dropped by
    /// the device after accepting them).
    pub sent: u64,
    /// Frames queued on the ring.
    pub queued: u64,
    /// Frames the kernel rejected or send errors.
    pub errors: u64,
    /// From the first frame queued to the last completion seen.
    pub seconds: f64,
    /// Engine name for the report.
    pub engine: String,
}
