//! The generator's AF_PACKET transmit engine, the fallback when AF_XDP is
//! not available: a `PACKET_TX_RING` (TPACKET_V2) with
//! `PACKET_QDISC_BYPASS`.
//!
//! Each ring slot is a `tpacket2_hdr` followed by the frame. Slots keep the
//! template they were last filled with and are only patched; a batch is
//! marked `TP_STATUS_SEND_REQUEST` and handed over with one `send()`, in
//! which the kernel builds an skb per frame and gives it directly to the
//! driver (no qdisc). A slot returns to `TP_STATUS_AVAILABLE` when its skb
//! is freed: that is when we count it sent. The socket is bound with
//! protocol 0, so it receives nothing.

use super::plan::{Due, Plan, ThreadOut};
use super::{monotonic_ns, TrafficError};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const SOL_PACKET: libc::c_int = 263;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
/// Frame data starts after the aligned `tpacket2_hdr` (32 bytes): the
/// kernel reads it at `TPACKET2_HDRLEN - sizeof(sockaddr_ll)`.
const DATA_OFF: usize = 32;
const RING_BYTES: usize = 8 << 20;
const BLOCK: usize = 1 << 16;

#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// A bound AF_PACKET socket with a mapped transmit ring. Field order is
/// drop order: the ring is unmapped before the socket closes.
pub struct PacketTx {
    ring: *mut u8,
    ring_len: usize,
    slot: usize,
    slots: usize,
    fd: OwnedFd,
    iface: String,
}

// SAFETY: the ring mapping is owned by this value and only used through it.
unsafe impl Send for PacketTx {}

impl Drop for PacketTx {
    fn drop(&mut self) {
        // SAFETY: unmapping the ring mapped in `open`, once.
        unsafe { libc::munmap(self.ring.cast(), self.ring_len) };
    }
}

fn setopt(fd: libc::c_int, name: libc::c_int, v: &impl Sized, len: usize) -> io::Result<()> {
    // SAFETY: `v` points at `len` readable bytes; the kernel only reads.
    let r = unsafe {
        libc::setsockopt(
            fd,
            SOL_PACKET,
            name,
            v as *const _ as *const libc::c_void,
            len as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl PacketTx {
    /// Open a transmit ring on `iface` for frames of `frame_len` bytes.
    pub fn open(iface: &str, frame_len: usize) -> Result<PacketTx, TrafficError> {
        let ifindex = super::ifindex(iface)?;
        let err = |op: &'static str| move |e: io::Error| TrafficError::sys(op, iface, e);
        // SAFETY: plain socket(2); protocol 0 = receive nothing.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(TrafficError::sys(
                "socket(AF_PACKET)",
                iface,
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        setopt(raw, PACKET_VERSION, &TPACKET_V2, 4).map_err(err("PACKET_VERSION"))?;
        setopt(raw, PACKET_QDISC_BYPASS, &one, 4).map_err(err("PACKET_QDISC_BYPASS"))?;
        // Skip (rather than stall on) a frame the kernel rejects.
        setopt(raw, PACKET_LOSS, &one, 4).map_err(err("PACKET_LOSS"))?;
        let slot = (frame_len + DATA_OFF).next_power_of_two().max(2048);
        let block = BLOCK.max(slot);
        let blocks = (RING_BYTES / block).max(1);
        let req = TpacketReq {
            block_size: block as u32,
            block_nr: blocks as u32,
            frame_size: slot as u32,
            frame_nr: (blocks * (block / slot)) as u32,
        };
        setopt(raw, PACKET_TX_RING, &req, size_of::<TpacketReq>())
            .map_err(err("PACKET_TX_RING"))?;
        let ring_len = block * blocks;
        // SAFETY: mapping the ring the kernel just allocated for this socket.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                raw,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(TrafficError::sys(
                "mmap(PACKET_TX_RING)",
                iface,
                io::Error::last_os_error(),
            ));
        }
        let tx = PacketTx {
            ring: p.cast(),
            ring_len,
            slot,
            slots: req.frame_nr as usize,
            fd,
            iface: iface.to_string(),
        };
        // SAFETY: all-zero sockaddr_ll is valid; fields set below.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = 0;
        sa.sll_ifindex = ifindex as i32;
        // SAFETY: valid sockaddr_ll of the stated length.
        let r = unsafe {
            libc::bind(
                raw,
                (&sa as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(TrafficError::sys(
                "bind(AF_PACKET)",
                iface,
                io::Error::last_os_error(),
            ));
        }
        Ok(tx)
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: slot `i` < slots lies inside the ring; its first word is
        // tp_status, shared with the kernel and only accessed atomically.
        unsafe { &*(self.ring.add(i * self.slot) as *const AtomicU32) }
    }

    fn send(&self) -> io::Result<()> {
        // SAFETY: zero-length send: the kernel transmits the ring's
        // SEND_REQUEST slots and dereferences no user buffer.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => Ok(()),
                _ => Err(e),
            }
        } else {
            Ok(())
        }
    }

    /// Advance `tail` over slots the kernel has finished with.
    fn reap(&self, tail: &mut usize, in_kernel: &mut usize) -> u64 {
        let mut n = 0;
        while *in_kernel > 0 && self.status(*tail).load(Ordering::Acquire) == TP_STATUS_AVAILABLE {
            *tail = (*tail + 1) % self.slots;
            *in_kernel -= 1;
            n += 1;
        }
        n
    }

    /// Run `plan` to its end; then wait (up to a second) for the kernel to
    /// finish with what was queued.
    pub fn run(&mut self, plan: &mut Plan) -> Result<ThreadOut, TrafficError> {
        let mut tags = vec![u32::MAX; self.slots];
        let len = plan.frame_len;
        // Slots [tail, head) are owned by the kernel.
        let mut head = 0usize;
        let mut tail = 0usize;
        let mut in_kernel = 0usize;
        let mut completed = 0u64;
        let mut errors = 0u64;
        let mut send_errs = 0u32;
        plan.restart();
        let mut last_done = plan.start;
        loop {
            let n = self.reap(&mut tail, &mut in_kernel);
            if n > 0 {
                completed += n;
                last_done = Instant::now();
            }
            let k = match plan.due() {
                Due::Done => break,
                Due::Wait => continue,
                Due::Send(k) => k.min(self.slots - in_kernel),
            };
            if k > 0 {
                let ts = monotonic_ns();
                for _ in 0..k {
                    // SAFETY: slot `head` is outside [tail, head) (k is
                    // bounded by the free slots) so the kernel does not
                    // touch it; data area inside the slot.
                    let frame = unsafe {
                        std::slice::from_raw_parts_mut(
                            self.ring.add(head * self.slot + DATA_OFF),
                            len,
                        )
                    };
                    plan.stamp(frame, &mut tags[head], ts);
                    // SAFETY: tp_len is the second u32 of the slot header.
                    unsafe {
                        (self.ring.add(head * self.slot + 4) as *mut u32).write_volatile(len as u32)
                    };
                    self.status(head)
                        .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
                    head = (head + 1) % self.slots;
                }
                in_kernel += k;
            }
            if let Err(e) = self.send() {
                errors += 1;
                send_errs += 1;
                if send_errs > 1000 {
                    return Err(TrafficError::sys("send(PACKET_TX_RING)", &self.iface, e));
                }
            } else {
                send_errs = 0;
            }
        }
        let end = Instant::now() + Duration::from_secs(1);
        while in_kernel > 0 && Instant::now() < end {
            let _ = self.send();
            let n = self.reap(&mut tail, &mut in_kernel);
            if n > 0 {
                completed += n;
                last_done = Instant::now();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(ThreadOut {
            sent: completed,
            queued: plan.queued,
            errors,
            seconds: last_done.duration_since(plan.start).as_secs_f64(),
            engine: "afpacket-txring".into(),
        })
    }
}
