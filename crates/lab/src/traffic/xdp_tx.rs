//! The generator's AF_XDP transmit engine: a transmit-only AF_XDP socket
//! whose UMEM frames hold the flows' templates and are only patched per
//! packet.
//!
//! This is the first hop of a generated frame: we write a descriptor on the
//! tx ring, the kernel takes it (zero-copy drivers directly; in copy mode —
//! always on veth — inside our `sendto` kick, `xsk_generic_xmit`, which
//! builds one skb per frame and hands it straight to the driver, bypassing
//! the qdisc) and returns the frame on the completion ring when the skb is
//! freed. No XDP program is needed to transmit. The switch's own AF_XDP port
//! (`nicflow_port::afxdp`) keeps its ring code private and is built for
//! receive-and-forward, so this small transmit-only copy of the ring
//! protocol lives here (same memory-ordering rules: Acquire on the other
//! side's index, Release on ours).

use super::plan::{Due, Plan, ThreadOut};
use super::{monotonic_ns, TrafficError};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

/// UMEM frames (and completion ring entries); the tx ring has half.
const FRAMES: u32 = 4096;
const TX_RING: u32 = 2048;
/// The kernel insists on a fill ring even for a transmit-only socket.
const FILL_RING: u32 = 64;

/// A memory mapping, unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only used through it.
unsafe impl Send for Map {}

impl Map {
    fn new(len: usize, flags: libc::c_int, fd: RawFd, off: i64) -> io::Result<Map> {
        // SAFETY: a fresh mapping at an address of the kernel's choice.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_POPULATE,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { ptr: p.cast(), len })
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped, once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One ring of the socket (see the module docs for who writes what).
struct Ring {
    /// Keeps the ring mapped; the pointers below point into it.
    _map: Map,
    prod: *const AtomicU32,
    cons: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
}

// SAFETY: the raw pointers point into `map`, owned by the ring.
unsafe impl Send for Ring {}

impl Ring {
    fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        pgoff: i64,
    ) -> io::Result<Ring> {
        let len = off.desc as usize + size as usize * entry;
        for o in [off.producer, off.consumer, off.flags] {
            if o as usize + 4 > len || o % 4 != 0 {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
        }
        let map = Map::new(len, libc::MAP_SHARED, fd, pgoff)?;
        // SAFETY: offsets checked to lie inside the mapping, aligned.
        let at = |o: u64| unsafe { map.ptr.add(o as usize) };
        let mut r = Ring {
            prod: at(off.producer).cast(),
            cons: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            desc: at(off.desc),
            mask: size - 1,
            size,
            cached_prod: 0,
            cached_cons: 0,
            _map: map,
        };
        r.cached_prod = r.prod().load(Ordering::Acquire);
        r.cached_cons = r.cons().load(Ordering::Acquire);
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: inside the live mapping, 4-aligned, shared only atomically.
        unsafe { &*self.prod }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for `prod`.
        unsafe { &*self.cons }
    }

    fn needs_wakeup(&self) -> bool {
        fence(Ordering::SeqCst);
        // SAFETY: as for `prod`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer: free slots (up to `want`).
    fn free(&mut self, want: u32) -> u32 {
        let mut free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free < want {
            self.cached_cons = self.cons().load(Ordering::Acquire);
            free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        }
        free.min(want)
    }

    /// Producer: entries the kernel has not consumed yet.
    fn in_flight(&mut self) -> u32 {
        self.cached_cons = self.cons().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Producer: write entry `i` past the producer index (within `free`).
    ///
    /// # Safety
    /// `i` must be below what `free` returned; `T` the ring's entry type.
    unsafe fn write<T: Copy>(&mut self, i: u32, v: T) {
        let slot = (self.cached_prod.wrapping_add(i) & self.mask) as usize;
        // SAFETY: slot < size, entries of `T` inside the mapping; the slot
        // is free (caller), so the kernel does not read it yet.
        unsafe { self.desc.cast::<T>().add(slot).write(v) }
    }

    fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.prod().store(self.cached_prod, Ordering::Release);
    }

    /// Consumer: entries published by the kernel.
    fn avail(&mut self) -> u32 {
        self.cached_prod = self.prod().load(Ordering::Acquire);
        self.cached_prod
            .wrapping_sub(self.cached_cons)
            .min(self.size)
    }

    /// Consumer: read entry `i` of those `avail` reported.
    ///
    /// # Safety
    /// `i` below `avail()`; `T` the ring's entry type.
    unsafe fn read<T: Copy>(&self, i: u32) -> T {
        let slot = (self.cached_cons.wrapping_add(i) & self.mask) as usize;
        // SAFETY: published entry inside the mapping (caller).
        unsafe { self.desc.cast::<T>().add(slot).read() }
    }

    fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.cons().store(self.cached_cons, Ordering::Release);
    }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid `T` of the stated size; the kernel only reads.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A bound transmit-only AF_XDP socket with its UMEM. Field order is drop
/// order: rings unmapped, socket closed, then the UMEM unmapped.
pub struct XdpTx {
    tx: Ring,
    _fill: Ring,
    comp: Ring,
    fd: OwnedFd,
    umem: Map,
    frame_size: u32,
    zerocopy: bool,
    iface: String,
}

impl XdpTx {
    /// Open a socket on queue `queue` of `iface` for frames of up to
    /// `frame_len` bytes (at most 4096: one UMEM frame, no multi-buffer).
    pub fn open(iface: &str, queue: u32, frame_len: usize) -> Result<XdpTx, TrafficError> {
        let ifindex = super::ifindex(iface)?;
        let frame_size: u32 = if frame_len <= 2048 { 2048 } else { 4096 };
        if frame_len > frame_size as usize {
            return Err(TrafficError::bad(
                "--size",
                frame_len + 4,
                "AF_XDP sends frames of up to 4096 bytes here (one UMEM frame); \
                 use --port-type afpacket",
            ));
        }
        let err = |op: &'static str| move |e: io::Error| TrafficError::sys(op, iface, e);
        let umem = Map::new(
            FRAMES as usize * frame_size as usize,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
        .map_err(err("mmap(UMEM)"))?;
        let mut last = None;
        for flags in [XDP_ZEROCOPY, XDP_COPY] {
            // SAFETY: plain socket(2).
            let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
            if raw < 0 {
                return Err(TrafficError::sys(
                    "socket(AF_XDP)",
                    iface,
                    io::Error::last_os_error(),
                ));
            }
            // SAFETY: a fresh descriptor we own.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: all-zero is a valid xdp_umem_reg (the newer fields 0).
            let mut reg: libc::xdp_umem_reg = unsafe { std::mem::zeroed() };
            reg.addr = umem.ptr as u64;
            reg.len = umem.len as u64;
            reg.chunk_size = frame_size;
            setsockopt(raw, SOL_XDP, XDP_UMEM_REG, &reg).map_err(err("XDP_UMEM_REG"))?;
            for (opt, n, what) in [
                (XDP_UMEM_FILL_RING, FILL_RING, "XDP_UMEM_FILL_RING"),
                (XDP_UMEM_COMPLETION_RING, FRAMES, "XDP_UMEM_COMPLETION_RING"),
                (XDP_TX_RING, TX_RING, "XDP_TX_RING"),
            ] {
                setsockopt(raw, SOL_XDP, opt, &(n as libc::c_int)).map_err(err(what))?;
            }
            // SAFETY: all-zero offsets are valid; the kernel fills them.
            let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
            let mut len = size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
            // SAFETY: `off` is writable for `len` bytes.
            let r = unsafe {
                libc::getsockopt(
                    raw,
                    SOL_XDP,
                    XDP_MMAP_OFFSETS,
                    (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                    &mut len,
                )
            };
            if r < 0 || len as usize != size_of::<libc::xdp_mmap_offsets>() {
                return Err(TrafficError::sys(
                    "XDP_MMAP_OFFSETS",
                    iface,
                    io::Error::last_os_error(),
                ));
            }
            let tx = Ring::map(raw, &off.tx, TX_RING, 16, XDP_PGOFF_TX_RING)
                .map_err(err("mmap(tx ring)"))?;
            let fill = Ring::map(raw, &off.fr, FILL_RING, 8, XDP_UMEM_PGOFF_FILL_RING)
                .map_err(err("mmap(fill ring)"))?;
            let comp = Ring::map(raw, &off.cr, FRAMES, 8, XDP_UMEM_PGOFF_COMPLETION_RING)
                .map_err(err("mmap(completion ring)"))?;
            let sa = libc::sockaddr_xdp {
                sxdp_family: AF_XDP as u16,
                sxdp_flags: flags | XDP_USE_NEED_WAKEUP,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: 0,
            };
            // SAFETY: a valid sockaddr_xdp of the stated length.
            let r = unsafe {
                libc::bind(
                    raw,
                    (&sa as *const libc::sockaddr_xdp).cast(),
                    size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r == 0 {
                return Ok(XdpTx {
                    tx,
                    _fill: fill,
                    comp,
                    fd,
                    umem,
                    frame_size,
                    zerocopy: flags == XDP_ZEROCOPY,
                    iface: iface.to_string(),
                });
            }
            last = Some(io::Error::last_os_error());
            tracing::debug!(iface, queue, flags, "AF_XDP bind refused: {:?}", last);
        }
        Err(TrafficError::sys(
            format!("bind(AF_XDP, queue {queue})"),
            iface,
            last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)),
        ))
    }

    /// "afxdp-copy" or "afxdp-zerocopy".
    pub fn engine(&self) -> String {
        if self.zerocopy {
            "afxdp-zerocopy".into()
        } else {
            "afxdp-copy".into()
        }
    }

    /// Kick the kernel to transmit. Copy mode sends at most 32 frames per
    /// call and answers `EAGAIN` when more are left (normal); `EBUSY`/
    /// `ENOBUFS` mean the device pushed back. Anything else is an error.
    fn kick(&self) -> Result<(), io::Error> {
        // SAFETY: zero-length send, no buffer or address dereferenced.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => Ok(()),
                _ => Err(e),
            }
        } else {
            Ok(())
        }
    }

    /// Run `plan` to its end; then wait (up to a second) for the kernel to
    /// complete what was queued.
    pub fn run(&mut self, plan: &mut Plan) -> Result<ThreadOut, TrafficError> {
        let fs = u64::from(self.frame_size);
        let mut free: Vec<u64> = (0..u64::from(FRAMES)).rev().map(|f| f * fs).collect();
        // Which local flow each UMEM frame holds (index by frame number).
        let mut tags = vec![u32::MAX; FRAMES as usize];
        let len = plan.frame_len as u32;
        let mut completed = 0u64;
        let mut errors = 0u64;
        plan.restart();
        let mut last_done = plan.start;
        let mut kick_errs = 0u32;
        loop {
            // Frames back from the kernel.
            let n = self.comp.avail();
            if n > 0 {
                for i in 0..n {
                    // SAFETY: i < avail; completion entries are u64 offsets.
                    let a: u64 = unsafe { self.comp.read(i) };
                    free.push(a - a % fs);
                }
                self.comp.release(n);
                completed += u64::from(n);
                last_done = Instant::now();
            }
            let k = match plan.due() {
                Due::Done => break,
                // Pacing: nothing new, but copy mode only transmits inside
                // a kick, so keep what is queued moving.
                Due::Wait => 0,
                Due::Send(k) => k,
            };
            let k = self.tx.free(k.min(free.len()) as u32);
            if k > 0 {
                let ts = monotonic_ns();
                for i in 0..k {
                    let addr = free.pop().expect("counted above");
                    let fno = (addr / fs) as usize;
                    // SAFETY: the frame came off the free list, so the
                    // kernel is not reading it; it lies inside the UMEM.
                    let frame = unsafe {
                        std::slice::from_raw_parts_mut(
                            self.umem.ptr.add(addr as usize),
                            len as usize,
                        )
                    };
                    plan.stamp(frame, &mut tags[fno], ts);
                    let d = libc::xdp_desc {
                        addr,
                        len,
                        options: 0,
                    };
                    // SAFETY: i < free slots reserved above.
                    unsafe { self.tx.write(i, d) };
                }
                self.tx.submit(k);
            }
            if (k > 0 || self.tx.in_flight() > 0) && (!self.zerocopy || self.tx.needs_wakeup()) {
                if let Err(e) = self.kick() {
                    errors += 1;
                    kick_errs += 1;
                    if kick_errs > 1000 {
                        return Err(TrafficError::sys("sendto(AF_XDP kick)", &self.iface, e));
                    }
                } else {
                    kick_errs = 0;
                }
            }
        }
        // Drain: let the kernel finish what is queued.
        let end = Instant::now() + Duration::from_secs(1);
        while completed < plan.queued && Instant::now() < end {
            if self.tx.in_flight() > 0 {
                let _ = self.kick();
            }
            let n = self.comp.avail();
            if n > 0 {
                self.comp.release(n);
                completed += u64::from(n);
                last_done = Instant::now();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: all-zero statistics are valid; the kernel writes them.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut sl = size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `st` writable for `sl` bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_XDP,
                XDP_STATISTICS,
                (&mut st as *mut libc::xdp_statistics).cast(),
                &mut sl,
            )
        };
        if r == 0 {
            errors += st.tx_invalid_descs;
        }
        Ok(ThreadOut {
            sent: completed,
            queued: plan.queued,
            errors,
            seconds: last_done.duration_since(plan.start).as_secs_f64(),
            engine: self.engine(),
        })
    }
}
