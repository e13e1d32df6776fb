//! A second thread for the sealing direction of an encrypted tunnel
//! (issue 34, `esp_seal_workers=2`).
//!
//! Why: the sealing daemon is the pipeline's one serial stage. While it
//! runs, the other CPU is often idle (63 % of the machine's idle in a
//! 4-stream tunnel, `docs/results/ipsec.md`), and about a quarter of its
//! time is AES-GCM. Here the daemon's thread numbers the packets of a
//! transmit batch (every check, the sequence number, the counters: one
//! owner per SA, so a nonce is never used twice, across workers or
//! restarts: the persisted reservation is taken before numbering, as on
//! the one-thread path) and writes them into the outgoing UDP super-frames
//! as before, but leaves the encryption ([`Reserved::seal_at`]) as a
//! [`SealJob`]. Each finished super-frame's jobs are handed to this worker
//! ([`Sealer::publish`]), which encrypts them while the daemon's thread
//! writes the next; before the batch goes to the socket
//! ([`Sealer::seal_all`]) the daemon's thread encrypts what is left
//! together with the worker, each claiming the next few jobs from a shared
//! counter. The packets keep their places in the super-frames, so the wire
//! order is that of the one-thread path and the receiver's anti-replay
//! window sees nothing new.
//!
//! The daemon's thread never waits for the worker to start: if the worker
//! is not running (the other CPU is busy), the daemon's thread claims every
//! job left itself. It waits only for the few jobs the worker has claimed
//! and not finished: a short spin, then it sleeps (so a preempted worker
//! can run on its CPU) until the worker's last job wakes it. The worker
//! spins briefly between super-frames of an open batch, then sleeps.
//!
//! No allocation per packet: the job slots are made once, with the
//! worker; a job holds the packet's place (a pointer into a buffer of the
//! batch) and its number's ticket ([`Reserved`]: the SA's key, sealed with
//! once).
//!
//! The worker failing never stops the datapath: a panic while sealing is
//! caught, the packets it had claimed are zeroed and counted as failed
//! (never sent in clear), and the daemon's thread seals every later batch
//! alone; a worker that cannot be started is tried once, then the daemon's
//! thread seals alone as well.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle, Thread};

use nicflow_ipsec::esp::Reserved;

/// Most jobs one batch defers; beyond it packets are sealed at once by the
/// daemon's thread (the claim counter's fields are 16 bits). A batch of the
/// bridge's 32 TCP super-frames is at most ~1,500 ESP packets.
pub(crate) const JOBS_MAX: usize = 4096;

/// Jobs a thread claims at a time: few enough that the daemon's thread
/// rarely waits long for the worker's last claim, enough that the two
/// threads do not pass the claim counter's cache line for every packet.
const CLAIM: u64 = 4;

/// Spins of the daemon's thread waiting for the worker's last claimed jobs
/// before it sleeps (a claim of [`CLAIM`] packets takes a microsecond or
/// two when the worker runs).
const MAIN_SPINS: u32 = 2_000;

/// Spins of the worker, while a batch is open and nothing is published,
/// before it sleeps: the next super-frame of the batch is usually
/// published within a few tens of microseconds, and a sleep and wake-up
/// per super-frame would cost the daemon's thread a `futex` call each.
const WORKER_SPINS: u32 = 1_000;

/// One ESP packet to encrypt: its place, numbered and ready (the ticket
/// of `OutboundSa::reserve`; the plaintext at `ESP_HEADER_LEN +
/// ESP_IV_LEN`).
pub(crate) struct SealJob {
    /// A raw pointer, not a borrow: the bytes are a `PacketBuf`'s heap
    /// buffer, and the `PacketBuf` itself may move while the job waits (a
    /// new head pushed onto the underlay's `tx` reallocates the vector);
    /// the heap bytes do not move, so the pointer stays valid. (Under
    /// Miri's Stacked Borrows moving the owning `Box` retags it and could
    /// be reported; not run under Miri.)
    esp: *mut u8,
    len: usize,
    plain_len: usize,
    next_header: u8,
    /// Taken (consumed) by the one sealing: a job cannot seal twice.
    ticket: Option<Reserved>,
}

impl SealJob {
    /// The packet's bytes.
    ///
    /// # Safety
    /// `Sealer::push`'s contract: `esp..esp+len` is a live buffer region
    /// nobody else touches from its publication until the batch is sealed,
    /// and each job is run by exactly one thread (the claim counter). The
    /// lifetime is the caller's to bound: not beyond the batch's sealing.
    unsafe fn bytes<'a>(&self) -> &'a mut [u8] {
        // SAFETY: the caller's contract, above.
        unsafe { std::slice::from_raw_parts_mut(self.esp, self.len) }
    }

    /// # Safety
    /// As [`bytes`](Self::bytes).
    unsafe fn run(&mut self) -> bool {
        // SAFETY: the caller's contract.
        let esp = unsafe { self.bytes() };
        let sealed = self
            .ticket
            .take()
            .is_some_and(|t| t.seal_at(self.next_header, esp, self.plain_len).is_ok());
        if !sealed {
            // Cannot happen after `reserve`'s checks; never let the
            // plaintext out if it does.
            esp.fill(0);
        }
        sealed
    }
}

/// The job slots and the claim state the daemon's thread and the worker
/// share.
struct Shared {
    /// Job slots of the batch being sealed. Slot `i` is written by the
    /// daemon's thread only while it is not published (`i` at or beyond
    /// the published count, or the batch closed), and read by whichever
    /// thread claimed it.
    jobs: Box<[UnsafeCell<Option<SealJob>>]>,
    /// Epoch (high 32 bits) | jobs published (16) | next job to claim
    /// (16). The epoch changes with every batch, so a stale claim fails.
    word: AtomicU64,
    /// A batch is open: jobs may still be published.
    open: AtomicBool,
    /// Jobs the worker finished in the current batch.
    worker_done: AtomicU32,
    /// Jobs that failed to seal (zeroed; see [`SealJob::run`]).
    failed: AtomicU64,
    /// The worker panicked (its claimed jobs zeroed and counted) and is
    /// gone: the daemon's thread seals alone from now on.
    lost: AtomicBool,
    /// Tests: the worker panics at its next claim.
    #[cfg(test)]
    panic_next: AtomicBool,
    /// The daemon's thread sleeps waiting for the worker.
    main_waiting: AtomicBool,
    stop: AtomicBool,
    main: Thread,
}

// SAFETY: see `Shared::jobs`: a slot is only touched by one thread at a
// time, handed over by the release/acquire of `word` (publication and
// claim) and of `worker_done` (completion); the raw pointers in jobs are
// into buffers the owner leaves alone from publication until the batch is
// sealed.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

fn unpack(w: u64) -> (u64, u64, u64) {
    (w >> 32, (w >> 16) & 0xffff, w & 0xffff)
}

impl Shared {
    /// Claims up to [`CLAIM`] published jobs of batch `epoch` (any batch
    /// if `None`): their range and the batch's epoch, or `None` when
    /// nothing published is left.
    fn claim(&self, epoch: Option<u64>) -> Option<(u64, std::ops::Range<usize>)> {
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            let (e, published, next) = unpack(w);
            if epoch.is_some_and(|x| x != e) || next >= published {
                return None;
            }
            let to = (next + CLAIM).min(published);
            match self.word.compare_exchange_weak(
                w,
                (w & !0xffff) | to,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((e, next as usize..to as usize)),
                Err(now) => w = now,
            }
        }
    }

    /// Runs jobs `r` (claimed); the number that failed.
    fn run(&self, r: Range<usize>) -> u64 {
        let mut failed = 0;
        for slot in &self.jobs[r] {
            // SAFETY: see `Shared::jobs`: the claim made the slot and its
            // packet's bytes ours.
            if let Some(j) = unsafe { &mut *slot.get() } {
                if !unsafe { j.run() } {
                    failed += 1;
                }
            }
        }
        failed
    }

    /// Zeroes the packets of jobs `r` (claimed, or the batch closed),
    /// whatever state a panic left them in: none goes out in clear.
    fn zero(&self, r: Range<usize>) {
        for slot in &self.jobs[r] {
            // SAFETY: as in `run`.
            if let Some(j) = unsafe { &mut *slot.get() } {
                j.ticket = None;
                unsafe { j.bytes() }.fill(0);
            }
        }
    }
}

/// Blocks every signal on the calling thread: a process-directed signal
/// (SIGTERM, SIGHUP...) is then delivered to the daemon's thread, whose
/// handling expects it, never to the worker.
fn block_signals() {
    // SAFETY: plain libc calls on a local set; they only change this
    // thread's mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// The worker's loop: claim and seal while a batch has jobs published,
/// spin a little while the batch is open, sleep otherwise.
/// A panic while sealing is caught: the claimed jobs are zeroed and
/// counted (failed, and done, so the daemon's thread does not wait for
/// them), and the worker leaves for good.
fn worker(s: Arc<Shared>) {
    block_signals();
    loop {
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        let mut idle = 0;
        loop {
            if let Some((e, r)) = s.claim(None) {
                idle = 0;
                let n = r.len() as u32;
                let run = catch_unwind(AssertUnwindSafe(|| {
                    #[cfg(test)]
                    if s.panic_next.swap(false, Ordering::AcqRel) {
                        panic!("test: the sealing worker dies");
                    }
                    s.run(r.clone())
                }));
                let failed = run.unwrap_or_else(|_| {
                    s.zero(r);
                    s.lost.store(true, Ordering::Release);
                    u64::from(n)
                });
                if failed > 0 {
                    s.failed.fetch_add(failed, Ordering::Relaxed);
                }
                // (Still batch `e`: the daemon's thread closes it only
                // once these are counted.)
                debug_assert_eq!(unpack(s.word.load(Ordering::Acquire)).0, e);
                s.worker_done.fetch_add(n, Ordering::SeqCst);
                if s.main_waiting.load(Ordering::SeqCst) {
                    s.main.unpark();
                }
                if s.lost.load(Ordering::Acquire) {
                    tracing::error!("ESP sealing worker panicked: its packets dropped, the daemon's thread seals alone");
                    return;
                }
                continue;
            }
            if !s.open.load(Ordering::Acquire) || idle >= WORKER_SPINS {
                break;
            }
            idle += 1;
            std::hint::spin_loop();
        }
        thread::park();
    }
}

/// Counters of a [`Sealer`], for the port's list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SealerCounters {
    /// Batches sealed with the worker's help (any jobs deferred).
    pub batches: u64,
    /// ESP packets the worker encrypted, and the daemon's thread.
    pub by_worker: u64,
    pub by_main: u64,
    /// Times the daemon's thread slept for the worker's last jobs.
    pub main_sleeps: u64,
    /// Jobs that failed to seal (zeroed on the wire: cannot happen).
    pub failed: u64,
    /// The worker was lost (it panicked; 0 or 1).
    pub worker_lost: u64,
    /// The worker could not be started (tried once; 0 or 1).
    pub spawn_failed: u64,
}

#[cfg(test)]
thread_local! {
    /// Sealers dropped on this thread with jobs still deferred: their
    /// owner let their buffers go first (see `Underlay`'s `Drop`).
    pub(crate) static DROPPED_WITH_JOBS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The daemon thread's end: the deferred jobs of the batch being built and
/// the worker (both made with the first job).
#[derive(Default)]
pub(crate) struct Sealer {
    shared: Option<Arc<Shared>>,
    worker: Option<JoinHandle<()>>,
    epoch: u64,
    /// Jobs written in this batch's slots, and of them published.
    pushed: usize,
    published: usize,
    /// Jobs of this batch this thread claimed, kept in the `Sealer` (not a
    /// local of `seal_all`) so that a `seal_all` a panic interrupted and
    /// the one the unwinding `Underlay`'s `Drop` makes agree on how many
    /// the worker holds: counted as the worker's, they would be waited
    /// for forever.
    claimed: u64,
    /// The claim this thread was running when a panic interrupted it: its
    /// packets are zeroed by the next `seal_all` (never sent in clear).
    in_hand: Option<Range<usize>>,
    /// Tests: this thread panics after its next claim.
    #[cfg(test)]
    panic_next: bool,
    /// The worker could not be started: not tried again (a `warn!` and a
    /// `spawn` per packet otherwise); this thread seals alone.
    spawn_failed: bool,
    pub(crate) counters: SealerCounters,
    /// Tests: starting the worker fails.
    #[cfg(test)]
    fail_spawn: bool,
}

impl Sealer {
    /// Whether another job fits this batch.
    pub(crate) fn has_room(&self) -> bool {
        self.pushed < JOBS_MAX
    }

    /// Jobs deferred in this batch (published or not).
    pub(crate) fn pending(&self) -> usize {
        self.pushed
    }

    fn shared(&mut self) -> &Arc<Shared> {
        let s = self.shared.get_or_insert_with(|| {
            Arc::new(Shared {
                jobs: (0..JOBS_MAX).map(|_| UnsafeCell::new(None)).collect(),
                word: AtomicU64::new(0),
                open: AtomicBool::new(false),
                worker_done: AtomicU32::new(0),
                failed: AtomicU64::new(0),
                lost: AtomicBool::new(false),
                #[cfg(test)]
                panic_next: AtomicBool::new(false),
                main_waiting: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                main: thread::current(),
            })
        });
        if self.worker.is_none() && !self.spawn_failed {
            let w = Arc::clone(s);
            let spawn = || {
                thread::Builder::new()
                    .name("esp-seal".into())
                    .spawn(move || worker(w))
            };
            #[cfg(test)]
            let started = if self.fail_spawn {
                Err(std::io::Error::other("test: no thread"))
            } else {
                spawn()
            };
            #[cfg(not(test))]
            let started = spawn();
            match started {
                Ok(h) => self.worker = Some(h),
                Err(e) => {
                    // No second thread: this one seals alone (every
                    // packet counted as its own), without trying again.
                    self.spawn_failed = true;
                    self.counters.spawn_failed += 1;
                    tracing::warn!(
                        "ESP sealing worker not started ({e}): the daemon's thread seals alone"
                    );
                }
            }
        }
        s
    }

    /// Tests: a worker thread was started (and not yet joined).
    #[cfg(test)]
    pub(crate) fn has_worker(&self) -> bool {
        self.worker.is_some()
    }

    /// The worker is not running: never started, panicked, or ended.
    fn worker_gone(&self) -> bool {
        self.worker.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Defers the sealing of the ESP packet in `esp` (numbered `seq` by
    /// `key`'s SA, plaintext in place) to [`publish`](Self::publish) and
    /// [`seal_all`](Self::seal_all).
    ///
    /// # Safety
    /// From the job's publication on, `esp` must stay where it is,
    /// untouched (not read, written, moved or freed) until the next
    /// `seal_all`: the caller publishes only packets of buffers it is
    /// done writing, does not grow or reuse them, and calls `seal_all`
    /// before a buffer is sent or dropped. The caller checked
    /// [`has_room`](Self::has_room).
    pub(crate) unsafe fn push(
        &mut self,
        ticket: Reserved,
        next_header: u8,
        esp: &mut [u8],
        plain_len: usize,
    ) {
        assert!(self.has_room(), "sealer: job slots full");
        let i = self.pushed;
        let slot = &self.shared().jobs[i];
        // SAFETY: slot `i` is not published (see `Shared::jobs`).
        unsafe {
            *slot.get() = Some(SealJob {
                esp: esp.as_mut_ptr(),
                len: esp.len(),
                plain_len,
                next_header,
                ticket: Some(ticket),
            })
        };
        self.pushed += 1;
    }

    /// Hands the worker the first `upto` deferred jobs of the batch (those
    /// not yet handed over): their buffers are done with until
    /// [`seal_all`](Self::seal_all). The worker encrypts them while this
    /// thread builds the rest of the batch.
    pub(crate) fn publish(&mut self, upto: usize) {
        let upto = upto.min(self.pushed);
        if upto <= self.published {
            return;
        }
        let Some(s) = self.shared.as_ref() else {
            return;
        };
        if self.published == 0 {
            // A new batch.
            self.epoch = (self.epoch + 1) & 0xffff_ffff;
            s.worker_done.store(0, Ordering::Relaxed);
            s.open.store(true, Ordering::Release);
            s.word.store(
                (self.epoch << 32) | ((upto as u64) << 16),
                Ordering::Release,
            );
        } else {
            s.word
                .fetch_add(((upto - self.published) as u64) << 16, Ordering::Release);
        }
        self.published = upto;
        if let Some(w) = &self.worker {
            if !s.lost.load(Ordering::Relaxed) {
                w.thread().unpark();
            }
        }
    }

    /// Seals every deferred job, with the worker's help, and returns once
    /// all are sealed (the buffers they lie in are the caller's again).
    pub(crate) fn seal_all(&mut self) {
        let n = self.pushed;
        if n == 0 {
            return;
        }
        self.publish(n);
        let Some(s) = self.shared.clone() else {
            return;
        };
        let e = self.epoch;
        self.counters.batches += 1;
        let mut failed = 0u64;
        if let Some(r) = self.in_hand.take() {
            // A panic left this claim half sealed.
            failed += r.len() as u64;
            s.zero(r);
        }
        while let Some((_, r)) = s.claim(Some(e)) {
            self.claimed += r.len() as u64;
            self.in_hand = Some(r.clone());
            #[cfg(test)]
            if std::mem::take(&mut self.panic_next) {
                panic!("test: the daemon's thread panics while sealing");
            }
            failed += s.run(r);
            self.in_hand = None;
        }
        let mine = std::mem::take(&mut self.claimed);
        let theirs = n as u64 - mine;
        let mut spins = 0;
        while u64::from(s.worker_done.load(Ordering::Acquire)) < theirs {
            if spins < MAIN_SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            s.main_waiting.store(true, Ordering::SeqCst);
            if u64::from(s.worker_done.load(Ordering::SeqCst)) < theirs {
                if self.worker_gone() && u64::from(s.worker_done.load(Ordering::SeqCst)) < theirs {
                    // Gone without counting its claims (a panic is caught
                    // and counted, so this is a safety net): nobody touches
                    // the slots any more, but which packets it sealed is
                    // unknown. Drop the whole batch, zeroed, as failed.
                    s.main_waiting.store(false, Ordering::SeqCst);
                    s.zero(0..n);
                    s.lost.store(true, Ordering::Release);
                    failed = n as u64;
                    s.failed.store(0, Ordering::Relaxed);
                    s.worker_done.store(theirs as u32, Ordering::Relaxed);
                    break;
                }
                self.counters.main_sleeps += 1;
                // (A timeout as a safety net only: the worker wakes it.)
                thread::park_timeout(std::time::Duration::from_millis(1));
            }
            s.main_waiting.store(false, Ordering::SeqCst);
        }
        // Closed: every claim finished, none can succeed any more; the
        // slots are this thread's again. Emptied now, so a finished batch
        // does not keep an old SA's key alive.
        s.open.store(false, Ordering::Release);
        for slot in &s.jobs[..n] {
            // SAFETY: the batch is closed (see `Shared::jobs`).
            unsafe { *slot.get() = None };
        }
        self.pushed = 0;
        self.published = 0;
        self.counters.by_main += mine;
        self.counters.by_worker += theirs;
        self.counters.failed += failed + s.failed.swap(0, Ordering::AcqRel);
        // Sticky: a worker started again after `stop_sealer` has a fresh
        // `Shared` whose `lost` is false; the earlier loss stays counted.
        self.counters.worker_lost = self
            .counters
            .worker_lost
            .max(u64::from(s.lost.load(Ordering::Acquire)));
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        // Jobs left (a batch dropped unsent): their buffers must still be
        // alive here (the owner seals before it lets them go: `Underlay`'s
        // `Drop`); seal them, so the worker is done with them before it
        // is stopped.
        #[cfg(test)]
        if self.pushed > 0 {
            DROPPED_WITH_JOBS.with(|d| d.set(d.get() + 1));
        }
        self.seal_all();
        if let Some(s) = &self.shared {
            s.stop.store(true, Ordering::Release);
        }
        if let Some(w) = self.worker.take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_ipsec::esp::{Aead, InboundSa, OutboundSa, SaConfig};

    fn sa(spi: u32, k: u8) -> SaConfig {
        SaConfig::new(
            0x1000 + spi,
            Aead::AesGcm128,
            (0..20).map(|i| i ^ k).collect(),
        )
    }

    /// A batch of UDP super-frames (buffers holding ESP packets back to
    /// back), each handed to the worker once written, the next written
    /// while the worker seals it: sealed by the two threads, every packet
    /// is byte for byte what the one-thread path (`seal_in_place`) gives,
    /// in place, numbered 1..=n once each; the worker's and the daemon
    /// thread's shares add up.
    #[test]
    fn two_threads_seal_what_one_seals_in_order() {
        let mut one = OutboundSa::new(sa(7, 1)).unwrap();
        let mut two = OutboundSa::new(sa(7, 1)).unwrap();
        let mut sealer = Sealer::default();
        let mut inb = InboundSa::new(sa(7, 1)).unwrap();
        let mut total = 0u64;
        for batch in 0..200usize {
            let groups = 1 + batch % 5;
            let lens: Vec<Vec<usize>> = (0..groups)
                .map(|g| {
                    (0..(batch + g) % 40 + 1)
                        .map(|k| 100 + (k * 97 + g) % 1300)
                        .collect()
                })
                .collect();
            let sizes: Vec<Vec<usize>> = lens
                .iter()
                .map(|l| l.iter().map(|&l| one.sealed_len(l)).collect())
                .collect();
            let mut frames: Vec<Vec<u8>> =
                sizes.iter().map(|s| vec![0u8; s.iter().sum()]).collect();
            let mut want: Vec<Vec<u8>> = Vec::new();
            for g in 0..groups {
                let mut w = Vec::new();
                let mut at = 0;
                for (&l, &sz) in lens[g].iter().zip(&sizes[g]) {
                    let mut p = vec![0u8; sz];
                    for (i, b) in p[16..16 + l].iter_mut().enumerate() {
                        *b = (i + batch) as u8;
                    }
                    frames[g][at..at + sz].copy_from_slice(&p);
                    one.seal_in_place(4, &mut p, l).unwrap();
                    w.extend_from_slice(&p);
                    let t = two.reserve(sz, l).unwrap();
                    // SAFETY: `frames[g]` is not touched again before the
                    // `seal_all` below, and outlives it.
                    unsafe { sealer.push(t, 4, &mut frames[g][at..at + sz], l) };
                    at += sz;
                }
                want.push(w);
                // This frame is done: the worker may seal it while the next
                // is written.
                sealer.publish(sealer.pending());
            }
            let n: usize = lens.iter().map(Vec::len).sum();
            assert_eq!(sealer.pending(), n);
            sealer.seal_all();
            assert_eq!(sealer.pending(), 0);
            for g in 0..groups {
                assert!(
                    frames[g] == want[g],
                    "batch {batch} frame {g}: bytes differ"
                );
                let mut at = 0;
                for &sz in &sizes[g] {
                    let o = inb.open(&mut frames[g][at..at + sz]).unwrap();
                    assert_eq!(o.seq, total + 1);
                    total += 1;
                    at += sz;
                }
            }
        }
        let c = sealer.counters;
        assert_eq!(c.by_main + c.by_worker, total);
        assert_eq!((c.batches, c.failed), (200, 0));
        assert_eq!(two.last_seq(), total);
    }

    /// A rekey between numbering and sealing (the SA replaced while its
    /// packets wait in the batch) seals each packet with the key of the SA
    /// that numbered it: the old SA's packets open with the old inbound
    /// SA, the new one's with the new, each from 1.
    #[test]
    fn packets_keep_the_key_that_numbered_them_across_a_rekey() {
        let mut old = OutboundSa::new(sa(1, 1)).unwrap();
        let mut sealer = Sealer::default();
        let l = 500;
        let sz = old.sealed_len(l);
        let mut frame = vec![0x5au8; sz * 6];
        let mut spis = Vec::new();
        for (k, chunk) in frame.chunks_mut(sz).enumerate() {
            if k == 3 {
                old = OutboundSa::new(sa(2, 2)).unwrap();
            }
            let t = old.reserve(sz, l).unwrap();
            spis.push((old.spi(), t.seq()));
            // SAFETY: `frame` outlives the `seal_all` below, untouched.
            unsafe { sealer.push(t, 4, chunk, l) };
        }
        drop(old);
        sealer.seal_all();
        let mut in1 = InboundSa::new(sa(1, 1)).unwrap();
        let mut in2 = InboundSa::new(sa(2, 2)).unwrap();
        for (chunk, (spi, seq)) in frame.chunks_mut(sz).zip(spis) {
            let inb = if spi == 0x1001 { &mut in1 } else { &mut in2 };
            let o = inb.open(chunk).unwrap();
            assert_eq!(o.seq, seq);
            assert!(chunk[o.payload].iter().all(|&b| b == 0x5a));
        }
    }

    /// Runs `f` on a thread of its own and fails if it has not returned
    /// within a minute (a hung datapath), else passes its panic on.
    fn bounded(f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("the daemon's thread still waits for the worker")
            }
            _ => h.join().unwrap(),
        }
    }

    /// Waits (at most half a minute) until `cond` holds.
    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !cond() {
            assert!(
                std::time::Instant::now() < until,
                "timed out waiting: {what}"
            );
            thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Defers `n` packets of `len` bytes (plaintext `fill`) in `frame`.
    fn defer(sealer: &mut Sealer, out: &mut OutboundSa, frame: &mut [u8], len: usize) {
        let sz = out.sealed_len(len);
        for chunk in frame.chunks_mut(sz) {
            chunk[16..16 + len].fill(0x33);
            let t = out.reserve(sz, len).unwrap();
            // SAFETY: the callers' frames outlive the next `seal_all`,
            // untouched until then.
            unsafe { sealer.push(t, 4, chunk, len) };
        }
    }

    /// The worker seals when it runs (a sealer whose worker did nothing
    /// would pass every other test: the daemon's thread claims what is
    /// left), and is gone once its sealer is dropped.
    #[test]
    fn the_worker_seals_and_stops_with_its_sealer() {
        bounded(|| {
            let mut out = OutboundSa::new(sa(4, 4)).unwrap();
            let mut frame = vec![0u8; out.sealed_len(300) * 64];
            let mut sealer = Sealer::default();
            defer(&mut sealer, &mut out, &mut frame, 300);
            sealer.publish(64);
            let s = Arc::clone(sealer.shared.as_ref().unwrap());
            wait_for("the worker's first jobs", || {
                s.worker_done.load(Ordering::Acquire) > 0
            });
            sealer.seal_all();
            let c = sealer.counters;
            assert!(c.by_worker > 0, "{c:?}");
            assert_eq!((c.by_worker + c.by_main, c.failed), (64, 0));
            let mut inb = InboundSa::new(sa(4, 4)).unwrap();
            for chunk in frame.chunks_mut(out.sealed_len(300)) {
                assert!(inb.open(chunk).is_ok());
            }
            let weak = Arc::downgrade(&s);
            drop(s);
            drop(sealer);
            assert!(weak.upgrade().is_none(), "the worker outlived its sealer");
        });
    }

    /// A worker that panics while sealing does not hang the datapath: the
    /// daemon's thread gets the batch back, the worker's claimed packets
    /// zeroed (never sent in clear) and counted as failed, the rest
    /// sealed; later batches are sealed by the daemon's thread alone.
    #[test]
    fn a_panicking_worker_costs_its_packets_not_the_datapath() {
        bounded(|| {
            let mut out = OutboundSa::new(sa(5, 5)).unwrap();
            let sz = out.sealed_len(200);
            let mut inb = InboundSa::new(sa(5, 5)).unwrap();
            let mut sealer = Sealer::default();
            let mut frame = vec![0u8; sz * 8];
            defer(&mut sealer, &mut out, &mut frame, 200);
            let s = Arc::clone(sealer.shared.as_ref().unwrap());
            s.panic_next.store(true, Ordering::Release);
            sealer.publish(8);
            wait_for("the worker's claim", || {
                unpack(s.word.load(Ordering::Acquire)).2 > 0
            });
            sealer.seal_all();
            let c = sealer.counters;
            assert_eq!((c.worker_lost, c.failed), (1, CLAIM), "{c:?}");
            let zeroed = frame
                .chunks_mut(sz)
                .filter_map(|p| {
                    if p.iter().all(|&b| b == 0) {
                        return Some(());
                    }
                    assert!(inb.open(p).is_ok());
                    None
                })
                .count();
            assert_eq!(zeroed as u64, CLAIM);
            wait_for("the worker's end", || sealer.worker_gone());
            for _ in 0..3 {
                let mut frame = vec![0u8; sz * 8];
                defer(&mut sealer, &mut out, &mut frame, 200);
                sealer.publish(4);
                sealer.seal_all();
                for p in frame.chunks_mut(sz) {
                    assert!(inb.open(p).is_ok());
                }
            }
            let d = sealer.counters;
            assert_eq!(
                (d.by_worker, d.by_main - c.by_main, d.failed),
                (c.by_worker, 24, CLAIM)
            );
        });
    }

    /// A panic on the daemon's thread while it seals its own claim does
    /// not hang the `seal_all` the unwinding owner's `Drop` makes: the
    /// interrupted claim counts as this thread's (not waited for from the
    /// worker) and its packets are zeroed, never left half sealed. Hangs
    /// (the bound fires) with the claim count a local of `seal_all`.
    #[test]
    fn a_panic_in_the_daemons_own_sealing_does_not_hang_the_drop() {
        bounded(|| {
            let mut out = OutboundSa::new(sa(6, 6)).unwrap();
            let sz = out.sealed_len(200);
            let mut inb = InboundSa::new(sa(6, 6)).unwrap();
            // The worker, woken by the publish, may claim all eight before
            // this thread claims one (then nothing panics): a fresh batch
            // until this thread's claim panics.
            let mut tries = 0;
            let (mut sealer, mut frame) = loop {
                tries += 1;
                assert!(tries <= 50, "the worker claimed every batch first");
                let mut sealer = Sealer::default();
                let mut frame = vec![0u8; sz * 8];
                defer(&mut sealer, &mut out, &mut frame, 200);
                sealer.panic_next = true;
                if catch_unwind(AssertUnwindSafe(|| sealer.seal_all())).is_err() {
                    break (sealer, frame);
                }
            };
            assert!(sealer.in_hand.is_some());
            // What the unwinding `Underlay`'s `Drop` does.
            sealer.seal_all();
            let c = sealer.counters;
            let mut zeroed = 0;
            for p in frame.chunks_mut(sz) {
                if p.iter().all(|&b| b == 0) {
                    zeroed += 1;
                } else {
                    assert!(inb.open(p).is_ok());
                }
            }
            assert_eq!(zeroed, c.failed, "{c:?}");
            assert!(zeroed > 0 && zeroed <= CLAIM, "{c:?}");
            drop(sealer);
        });
    }

    /// A worker that cannot be started is tried once, not per packet:
    /// the daemon's thread seals alone, the failure counted once.
    #[test]
    fn a_failed_worker_start_is_not_retried_per_packet() {
        let mut out = OutboundSa::new(sa(6, 6)).unwrap();
        let sz = out.sealed_len(100);
        let mut inb = InboundSa::new(sa(6, 6)).unwrap();
        let mut sealer = Sealer::default();
        sealer.fail_spawn = true;
        for _ in 0..3 {
            let mut frame = vec![0u8; sz * 5];
            defer(&mut sealer, &mut out, &mut frame, 100);
            sealer.publish(3);
            sealer.seal_all();
            for p in frame.chunks_mut(sz) {
                assert!(inb.open(p).is_ok());
            }
        }
        let c = sealer.counters;
        assert_eq!(
            (c.spawn_failed, c.by_worker, c.by_main),
            (1, 0, 15),
            "{c:?}"
        );
        assert!(sealer.worker.is_none());
    }

    /// Dropping a sealer with jobs left seals them first (the worker
    /// never touches a freed buffer) and stops the worker.
    #[test]
    fn a_dropped_sealer_finishes_its_jobs_and_stops_its_worker() {
        let mut out = OutboundSa::new(sa(3, 3)).unwrap();
        let mut frame = vec![1u8; out.sealed_len(64) * 2];
        let sz = out.sealed_len(64);
        {
            let mut sealer = Sealer::default();
            sealer.seal_all();
            for chunk in frame.chunks_mut(sz) {
                let t = out.reserve(sz, 64).unwrap();
                // SAFETY: `frame` outlives the sealer.
                unsafe { sealer.push(t, 4, chunk, 64) };
            }
        }
        let mut inb = InboundSa::new(sa(3, 3)).unwrap();
        for chunk in frame.chunks_mut(sz) {
            assert!(inb.open(chunk).is_ok());
        }
    }
}
