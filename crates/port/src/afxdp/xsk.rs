//! The AF_XDP socket itself: kernel ABI (`include/uapi/linux/if_xdp.h`),
//! the UMEM (packet memory shared with the kernel) and the four rings, over
//! plain `libc` calls.
//!
//! # Ownership protocol
//!
//! Every UMEM frame is owned by exactly one side at a time:
//!
//! * **fill ring** (we produce, the kernel consumes): frames we give the
//!   kernel to receive into. From the moment we publish an address there
//!   until it comes back on the rx ring the kernel may write the frame.
//! * **rx ring** (kernel produces, we consume): received frames; ours until
//!   we put the address back on the fill ring.
//! * **tx ring** (we produce, the kernel consumes): frames to send; the
//!   kernel reads them until it returns the address on the completion ring.
//! * **completion ring** (kernel produces, we consume): sent frames, ours
//!   again.
//!
//! Each ring is a power-of-two array plus a producer and a consumer index
//! (free-running `u32`s, masked on use) shared with the kernel. As in
//! libxdp, the side that *reads* entries loads the other side's producer
//! index with `Acquire` (so the entries and the frames they point to are
//! visible before we read them) and publishes its consumer index with
//! `Release` (so our reads of a frame happen before the kernel may reuse
//! it); the side that *writes* entries loads the consumer index with
//! `Acquire` (the kernel is done with those slots) and publishes its producer
//! index with `Release` (entries and frame contents are written first).
//! Local copies of both indexes (`cached_*`) keep the shared cache lines
//! out of the common path.

use crate::sys::{cvt, getsockopt, owned_fd, setsockopt, Mapping, StepError};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};

// ---------------------------------------------------------------------------
// Kernel ABI. Mirrored here (rather than taken from `libc`) so the layout the
// module relies on is visible; the unit tests check it against `libc`.
// ---------------------------------------------------------------------------

pub(super) const AF_XDP: libc::c_int = 44;
pub(super) const SOL_XDP: libc::c_int = 283;

pub(super) const XDP_MMAP_OFFSETS: libc::c_int = 1;
pub(super) const XDP_RX_RING: libc::c_int = 2;
pub(super) const XDP_TX_RING: libc::c_int = 3;
pub(super) const XDP_UMEM_REG: libc::c_int = 4;
pub(super) const XDP_UMEM_FILL_RING: libc::c_int = 5;
pub(super) const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
pub(super) const XDP_STATISTICS: libc::c_int = 7;
pub(super) const XDP_OPTIONS: libc::c_int = 8;

/// `sockaddr_xdp.sxdp_flags`.
pub(super) const XDP_COPY: u16 = 1 << 1;
pub(super) const XDP_ZEROCOPY: u16 = 1 << 2;
pub(super) const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// Multi-buffer (scatter-gather) frames: Linux 6.6.
pub(super) const XDP_USE_SG: u16 = 1 << 4;

/// `xdp_ring.flags`: the kernel needs a syscall to make progress.
pub(super) const XDP_RING_NEED_WAKEUP: u32 = 1 << 0;
/// `xdp_desc.options`: more descriptors of the same frame follow.
pub(super) const XDP_PKT_CONTD: u32 = 1 << 0;
/// `xdp_options.flags`.
pub(super) const XDP_OPTIONS_ZEROCOPY: u32 = 1 << 0;

pub(super) const XDP_PGOFF_RX_RING: i64 = 0;
pub(super) const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
pub(super) const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
pub(super) const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

/// Headroom the kernel leaves in front of received data in each frame
/// (`XDP_PACKET_HEADROOM`); with a UMEM headroom of 0 a received frame
/// starts at `chunk + 256`.
pub(super) const XDP_PACKET_HEADROOM: u32 = 256;

/// `struct sockaddr_xdp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SockaddrXdp {
    pub sxdp_family: u16,
    pub sxdp_flags: u16,
    pub sxdp_ifindex: u32,
    pub sxdp_queue_id: u32,
    pub sxdp_shared_umem_fd: u32,
}

/// `struct xdp_ring_offset`: byte offsets inside one ring mapping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct XdpRingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct XdpMmapOffsets {
    pub rx: XdpRingOffset,
    pub tx: XdpRingOffset,
    pub fr: XdpRingOffset,
    pub cr: XdpRingOffset,
}

/// `struct xdp_umem_reg` (Linux 6.8 layout; older kernels read the prefix
/// they know, the fields after `headroom` being 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct XdpUmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

/// `struct xdp_statistics`: cumulative, not reset by reading.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// `struct xdp_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct XdpOptionsAbi {
    pub flags: u32,
}

/// `struct xdp_desc`: one rx or tx ring entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/// The packet memory registered with `XDP_UMEM_REG`: `frames` frames of
/// `frame_size` bytes, private anonymous memory (no hugepages needed),
/// populated up front.
pub(super) struct Umem {
    map: Mapping,
    frame_size: u32,
}

impl Umem {
    pub fn new(frames: u32, frame_size: u32) -> io::Result<Umem> {
        let len = frames as usize * frame_size as usize;
        let map = Mapping::new(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )?;
        Ok(Umem { map, frame_size })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Start of the frame (chunk) holding UMEM offset `addr`.
    pub fn chunk_of(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.frame_size) - 1)
    }

    /// Is `[addr, addr + len)` inside one frame of the UMEM? Everything the
    /// kernel hands us is checked with this before it is read.
    pub fn in_one_frame(&self, addr: u64, len: u32) -> bool {
        let fs = u64::from(self.frame_size);
        addr.checked_add(u64::from(len)).is_some_and(|end| {
            end <= self.map.len() as u64 && (addr & (fs - 1)) + u64::from(len) <= fs
        })
    }

    /// The bytes `[addr, addr + len)`.
    ///
    /// # Safety
    /// The frame holding them must be owned by us (taken from the rx or
    /// completion ring or from the free list, not yet published on the fill
    /// or tx ring), so that the kernel does not write it while the slice
    /// lives; and `in_one_frame(addr, len)` must hold.
    pub unsafe fn bytes(&self, addr: u64, len: u32) -> &[u8] {
        debug_assert!(self.in_one_frame(addr, len));
        // SAFETY: in bounds (caller checked `in_one_frame`); not written by
        // the kernel meanwhile (caller owns the frame).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(addr as usize), len as usize) }
    }

    /// Writable bytes `[addr, addr + len)`.
    ///
    /// # Safety
    /// As for [`Umem::bytes`].
    pub unsafe fn bytes_mut(&mut self, addr: u64, len: u32) -> &mut [u8] {
        debug_assert!(self.in_one_frame(addr, len));
        // SAFETY: as in `bytes`; `&mut self` makes the slice unique on our
        // side.
        unsafe {
            std::slice::from_raw_parts_mut(self.map.as_ptr().add(addr as usize), len as usize)
        }
    }

    fn registration(&self) -> XdpUmemReg {
        XdpUmemReg {
            addr: self.map.as_ptr() as u64,
            len: self.map.len() as u64,
            chunk_size: self.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        }
    }
}

// ---------------------------------------------------------------------------
// Rings
// ---------------------------------------------------------------------------

/// One ring mapped from the socket. `T` is `XdpDesc` (rx, tx) or `u64`
/// (fill, completion: bare UMEM offsets). See the module docs for the
/// protocol; each ring is used only as a producer or only as a consumer.
pub(super) struct Ring<T: Copy> {
    /// Keeps the ring mapped (unmapped on drop); the pointers below point
    /// into it.
    _map: Mapping,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    size: u32,
    mask: u32,
    /// Our copy of the producer index (ours if we produce, the kernel's
    /// last seen value if we consume).
    cached_prod: u32,
    /// Our copy of the consumer index.
    cached_cons: u32,
    /// Producer side: slots reserved by the last `reserve`, writable with
    /// `write` until `submit`.
    reserved: u32,
}

// SAFETY: the ring mapping is owned by this value; the raw pointers point
// into it and are only dereferenced through `&self`/`&mut self`.
unsafe impl<T: Copy + Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    fn map(fd: RawFd, off: &XdpRingOffset, size: u32, pgoff: i64) -> io::Result<Ring<T>> {
        let len = usize::try_from(off.desc)
            .ok()
            .and_then(|d| d.checked_add(size as usize * size_of::<T>()))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // Every field the kernel told us about must lie inside the mapping
        // and be aligned for its type.
        for (o, n, a) in [
            (off.producer, 4, 4),
            (off.consumer, 4, 4),
            (off.flags, 4, 4),
            (off.desc, 0, std::mem::align_of::<T>() as u64),
        ] {
            if o.checked_add(n).is_none_or(|e| e > len as u64) || o % a != 0 {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
        }
        let map = Mapping::new(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            pgoff,
        )?;
        let at = |o: u64| {
            // SAFETY: `o` is inside the mapping (checked above).
            unsafe { NonNull::new_unchecked(map.as_ptr().add(o as usize)) }
        };
        let producer = at(off.producer).cast::<AtomicU32>();
        let consumer = at(off.consumer).cast::<AtomicU32>();
        let flags = at(off.flags).cast::<AtomicU32>();
        let descs = at(off.desc).cast::<T>();
        let mut ring = Ring {
            _map: map,
            producer,
            consumer,
            flags,
            descs,
            size,
            mask: size - 1,
            cached_prod: 0,
            cached_cons: 0,
            reserved: 0,
        };
        ring.cached_prod = ring.prod().load(Ordering::Acquire);
        ring.cached_cons = ring.cons().load(Ordering::Acquire);
        Ok(ring)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: inside the live mapping, 4-byte aligned (checked in `map`),
        // only ever accessed atomically (by us and by the kernel);
        // AtomicU32 has u32's layout.
        unsafe { self.producer.as_ref() }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for `prod`.
        unsafe { self.consumer.as_ref() }
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Does the kernel want a syscall (`XDP_RING_NEED_WAKEUP`)? The fence
    /// orders our preceding index store before the flag load, so that we
    /// cannot miss a flag the kernel set after looking at the old index.
    pub fn needs_wakeup(&self) -> bool {
        fence(Ordering::SeqCst);
        // SAFETY: as for `prod`.
        let flags = unsafe { self.flags.as_ref() };
        flags.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    // --- producer side (fill, tx) ---

    /// Reserve up to `want` free slots; returns how many were reserved
    /// (writable with `write(0..n)` until `submit`).
    pub fn reserve(&mut self, want: u32) -> u32 {
        let mut free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free < want {
            self.cached_cons = self.cons().load(Ordering::Acquire);
            free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        }
        self.reserved = want.min(free);
        self.reserved
    }

    /// Write entry `i` of the current reservation.
    pub fn write(&mut self, i: u32, v: T) {
        assert!(i < self.reserved, "ring write outside the reservation");
        let slot = (self.cached_prod.wrapping_add(i) & self.mask) as usize;
        // SAFETY: slot < size, inside the descriptor array of the live
        // mapping; the slot is free (reserved against the kernel's consumer
        // index), so the kernel does not read it until we publish it.
        unsafe { self.descs.as_ptr().add(slot).write(v) }
    }

    /// Publish the first `n` reserved entries to the kernel.
    pub fn submit(&mut self, n: u32) {
        assert!(n <= self.reserved, "submitting more than was reserved");
        self.reserved = 0;
        if n == 0 {
            return;
        }
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.prod().store(self.cached_prod, Ordering::Release);
    }

    /// Producer side: entries published but not yet consumed by the kernel.
    pub fn in_flight(&mut self) -> u32 {
        self.cached_cons = self.cons().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    // --- consumer side (rx, completion) ---

    /// How many entries are ready to read (at most `want`).
    pub fn peek(&mut self, want: u32) -> u32 {
        let mut avail = self.cached_prod.wrapping_sub(self.cached_cons);
        if avail < want {
            self.cached_prod = self.prod().load(Ordering::Acquire);
            avail = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        // A kernel publishing more than the ring holds would be a bug;
        // never index past what we can trust.
        avail.min(self.size).min(want)
    }

    /// Entry `i` of those `peek` reported.
    pub fn read(&self, i: u32) -> T {
        assert!(
            i < self
                .cached_prod
                .wrapping_sub(self.cached_cons)
                .min(self.size),
            "ring read outside the published entries"
        );
        let slot = (self.cached_cons.wrapping_add(i) & self.mask) as usize;
        // SAFETY: slot < size, inside the live mapping; the entry was
        // published by the kernel (producer index loaded with Acquire) and
        // is not rewritten until we release it.
        unsafe { self.descs.as_ptr().add(slot).read() }
    }

    /// Give the first `n` read entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.cons().store(self.cached_cons, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------
// The socket
// ---------------------------------------------------------------------------

/// An AF_XDP socket with its UMEM registered and its four rings mapped, not
/// yet bound. Field order is drop order: rings are unmapped, then the
/// socket is closed (which also removes it from any XSKMAP).
pub(super) struct Xsk {
    pub rx: Ring<XdpDesc>,
    pub tx: Ring<XdpDesc>,
    pub fill: Ring<u64>,
    pub comp: Ring<u64>,
    pub fd: OwnedFd,
}

impl Xsk {
    /// `socket(AF_XDP)`, `XDP_UMEM_REG` of `umem`, the four ring sizes,
    /// `XDP_MMAP_OFFSETS` and the ring mappings. All rings get `ring_size`
    /// entries (a power of two).
    pub fn create(umem: &Umem, ring_size: u32) -> Result<Xsk, StepError> {
        // SAFETY: plain socket(2) call, no pointers.
        let fd = owned_fd(unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
            .map_err(|e| ("socket(AF_XDP, SOCK_RAW)", e))?;
        let fd_raw = fd.as_raw_fd();
        setsockopt(fd_raw, SOL_XDP, XDP_UMEM_REG, &umem.registration())
            .map_err(|e| ("XDP_UMEM_REG", e))?;
        let size = ring_size as libc::c_int;
        setsockopt(fd_raw, SOL_XDP, XDP_UMEM_FILL_RING, &size)
            .map_err(|e| ("XDP_UMEM_FILL_RING", e))?;
        setsockopt(fd_raw, SOL_XDP, XDP_UMEM_COMPLETION_RING, &size)
            .map_err(|e| ("XDP_UMEM_COMPLETION_RING", e))?;
        setsockopt(fd_raw, SOL_XDP, XDP_RX_RING, &size).map_err(|e| ("XDP_RX_RING", e))?;
        setsockopt(fd_raw, SOL_XDP, XDP_TX_RING, &size).map_err(|e| ("XDP_TX_RING", e))?;
        let mut off = XdpMmapOffsets::default();
        let got = getsockopt(fd_raw, SOL_XDP, XDP_MMAP_OFFSETS, &mut off)
            .map_err(|e| ("XDP_MMAP_OFFSETS", e))?;
        if got != size_of::<XdpMmapOffsets>() {
            // Pre-5.4 kernels answer without the `flags` offsets: no
            // need_wakeup support, which this port relies on.
            return Err((
                "XDP_MMAP_OFFSETS",
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "kernel without ring flags (Linux < 5.4)",
                ),
            ));
        }
        let rx = Ring::map(fd_raw, &off.rx, ring_size, XDP_PGOFF_RX_RING)
            .map_err(|e| ("mmap(rx ring)", e))?;
        let tx = Ring::map(fd_raw, &off.tx, ring_size, XDP_PGOFF_TX_RING)
            .map_err(|e| ("mmap(tx ring)", e))?;
        let fill = Ring::map(fd_raw, &off.fr, ring_size, XDP_UMEM_PGOFF_FILL_RING)
            .map_err(|e| ("mmap(fill ring)", e))?;
        let comp = Ring::map(fd_raw, &off.cr, ring_size, XDP_UMEM_PGOFF_COMPLETION_RING)
            .map_err(|e| ("mmap(completion ring)", e))?;
        Ok(Xsk {
            rx,
            tx,
            fill,
            comp,
            fd,
        })
    }

    /// Bind to queue `queue` of interface `ifindex` with `flags`
    /// (`sxdp_flags`).
    pub fn bind(&self, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
        let sxdp = SockaddrXdp {
            sxdp_family: AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `sxdp` is an initialized sockaddr_xdp and the length
        // matches it; the kernel only reads it.
        cvt(unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sxdp as *const SockaddrXdp).cast(),
                size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// `XDP_OPTIONS`: did the bind end up in zero-copy mode?
    pub fn zerocopy(&self) -> io::Result<bool> {
        let mut o = XdpOptionsAbi::default();
        getsockopt(self.fd.as_raw_fd(), SOL_XDP, XDP_OPTIONS, &mut o)?;
        Ok(o.flags & XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// `XDP_STATISTICS` (cumulative counters of the socket).
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        let mut s = XdpStatistics::default();
        getsockopt(self.fd.as_raw_fd(), SOL_XDP, XDP_STATISTICS, &mut s)?;
        Ok(s)
    }

    /// Kick the kernel's transmit path (copy mode transmits from inside this
    /// call, at most a small batch per call, then answers `EAGAIN`).
    pub fn wake_tx(&self) -> io::Result<()> {
        // SAFETY: a zero-length send with no buffer and no address; the
        // kernel dereferences neither.
        cvt(unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        })
        .map(drop)
    }

    /// Wake the kernel's receive path (fill ring `need_wakeup`).
    pub fn wake_rx(&self) -> io::Result<()> {
        // SAFETY: a zero-length receive with no buffer and no address.
        cvt(unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        })
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes_and_constants_match_libc() {
        assert_eq!(size_of::<SockaddrXdp>(), 16);
        assert_eq!(size_of::<SockaddrXdp>(), size_of::<libc::sockaddr_xdp>());
        assert_eq!(size_of::<XdpRingOffset>(), 32);
        assert_eq!(
            size_of::<XdpRingOffset>(),
            size_of::<libc::xdp_ring_offset>()
        );
        assert_eq!(size_of::<XdpMmapOffsets>(), 128);
        assert_eq!(
            size_of::<XdpMmapOffsets>(),
            size_of::<libc::xdp_mmap_offsets>()
        );
        assert_eq!(size_of::<XdpUmemReg>(), 32);
        assert_eq!(size_of::<XdpUmemReg>(), size_of::<libc::xdp_umem_reg>());
        assert_eq!(size_of::<XdpStatistics>(), 48);
        assert_eq!(
            size_of::<XdpStatistics>(),
            size_of::<libc::xdp_statistics>()
        );
        assert_eq!(size_of::<XdpOptionsAbi>(), size_of::<libc::xdp_options>());
        assert_eq!(size_of::<XdpDesc>(), 16);
        assert_eq!(size_of::<XdpDesc>(), size_of::<libc::xdp_desc>());

        assert_eq!(AF_XDP, libc::AF_XDP);
        assert_eq!(SOL_XDP, libc::SOL_XDP);
        assert_eq!(XDP_MMAP_OFFSETS, libc::XDP_MMAP_OFFSETS);
        assert_eq!(XDP_RX_RING, libc::XDP_RX_RING);
        assert_eq!(XDP_TX_RING, libc::XDP_TX_RING);
        assert_eq!(XDP_UMEM_REG, libc::XDP_UMEM_REG);
        assert_eq!(XDP_UMEM_FILL_RING, libc::XDP_UMEM_FILL_RING);
        assert_eq!(XDP_UMEM_COMPLETION_RING, libc::XDP_UMEM_COMPLETION_RING);
        assert_eq!(XDP_STATISTICS, libc::XDP_STATISTICS);
        assert_eq!(XDP_OPTIONS, libc::XDP_OPTIONS);
        assert_eq!(XDP_COPY, libc::XDP_COPY);
        assert_eq!(XDP_ZEROCOPY, libc::XDP_ZEROCOPY);
        assert_eq!(XDP_USE_NEED_WAKEUP, libc::XDP_USE_NEED_WAKEUP);
        assert_eq!(XDP_USE_SG, libc::XDP_USE_SG);
        assert_eq!(XDP_RING_NEED_WAKEUP, libc::XDP_RING_NEED_WAKEUP);
        assert_eq!(XDP_PKT_CONTD, libc::XDP_PKT_CONTD);
        assert_eq!(XDP_OPTIONS_ZEROCOPY, libc::XDP_OPTIONS_ZEROCOPY);
        assert_eq!(XDP_PGOFF_RX_RING as libc::off_t, libc::XDP_PGOFF_RX_RING);
        assert_eq!(XDP_PGOFF_TX_RING as libc::off_t, libc::XDP_PGOFF_TX_RING);
        assert_eq!(
            XDP_UMEM_PGOFF_FILL_RING as u64,
            libc::XDP_UMEM_PGOFF_FILL_RING
        );
        assert_eq!(
            XDP_UMEM_PGOFF_COMPLETION_RING as u64,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING
        );
    }

    #[test]
    fn abi_field_offsets() {
        let s = SockaddrXdp::default();
        let b = &s as *const _ as usize;
        assert_eq!(&s.sxdp_flags as *const _ as usize - b, 2);
        assert_eq!(&s.sxdp_ifindex as *const _ as usize - b, 4);
        assert_eq!(&s.sxdp_queue_id as *const _ as usize - b, 8);
        assert_eq!(&s.sxdp_shared_umem_fd as *const _ as usize - b, 12);
        let r = XdpUmemReg::default();
        let b = &r as *const _ as usize;
        assert_eq!(&r.chunk_size as *const _ as usize - b, 16);
        assert_eq!(&r.headroom as *const _ as usize - b, 20);
        assert_eq!(&r.flags as *const _ as usize - b, 24);
        let o = XdpMmapOffsets::default();
        let b = &o as *const _ as usize;
        assert_eq!(&o.tx as *const _ as usize - b, 32);
        assert_eq!(&o.fr as *const _ as usize - b, 64);
        assert_eq!(&o.cr.flags as *const _ as usize - b, 120);
        let d = XdpDesc::default();
        let b = &d as *const _ as usize;
        assert_eq!(&d.len as *const _ as usize - b, 8);
        assert_eq!(&d.options as *const _ as usize - b, 12);
        let st = XdpStatistics::default();
        let b = &st as *const _ as usize;
        assert_eq!(&st.rx_ring_full as *const _ as usize - b, 24);
        assert_eq!(&st.tx_ring_empty_descs as *const _ as usize - b, 40);
    }

    /// A ring over ordinary memory, standing in for the kernel's, to check
    /// the index arithmetic (wrap-around included) without a socket.
    fn fake_ring<T: Copy>(size: u32, start: u32) -> Ring<T> {
        let off = XdpRingOffset {
            producer: 0,
            consumer: 64,
            flags: 128,
            desc: 192,
        };
        let len = 192 + size as usize * size_of::<T>();
        let map = Mapping::new(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
        .unwrap();
        // SAFETY: every offset used is inside the `len`-byte mapping.
        let at = |o: u64| unsafe { NonNull::new_unchecked(map.as_ptr().add(o as usize)) };
        let r = Ring {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            descs: at(off.desc).cast(),
            _map: map,
            size,
            mask: size - 1,
            cached_prod: start,
            cached_cons: start,
            reserved: 0,
        };
        r.prod().store(start, Ordering::Relaxed);
        r.cons().store(start, Ordering::Relaxed);
        r
    }

    #[test]
    fn producer_and_consumer_indexes_wrap() {
        // Start near u32::MAX so the free-running indexes wrap.
        let mut p = fake_ring::<u64>(8, u32::MAX - 3);
        assert_eq!(p.reserve(5), 5);
        for i in 0..5 {
            p.write(i, 100 + u64::from(i));
        }
        p.submit(5);
        assert_eq!(p.in_flight(), 5);
        assert_eq!(p.reserve(8), 3, "only 3 slots free while 5 are in flight");
        p.submit(0);
        // Consume as the kernel would: read the published entries in order.
        let prod = p.prod().load(Ordering::Acquire);
        let cons = p.cons().load(Ordering::Acquire);
        assert_eq!(prod.wrapping_sub(cons), 5);
        let seen: Vec<u64> = (0..5)
            // SAFETY: slot index masked to the 8-entry descriptor array.
            .map(|i| unsafe {
                p.descs
                    .as_ptr()
                    .add((cons.wrapping_add(i) & 7) as usize)
                    .read()
            })
            .collect();
        assert_eq!(seen, [100, 101, 102, 103, 104]);
        p.cons().store(cons.wrapping_add(5), Ordering::Release);
        assert_eq!(p.reserve(8), 8);
        assert_eq!(p.in_flight(), 0);

        // Consumer side: the "kernel" publishes 6 entries across the wrap.
        let mut c = fake_ring::<XdpDesc>(8, u32::MAX - 1);
        for i in 0..6u32 {
            let slot = ((u32::MAX - 1).wrapping_add(i) & 7) as usize;
            // SAFETY: slot < 8, inside the descriptor array; playing the
            // kernel's part before the producer index is published.
            unsafe {
                c.descs.as_ptr().add(slot).write(XdpDesc {
                    addr: u64::from(i) * 2048,
                    len: 60 + i,
                    options: 0,
                })
            };
        }
        c.prod()
            .store((u32::MAX - 1).wrapping_add(6), Ordering::Release);
        assert_eq!(c.peek(4), 4);
        assert_eq!(c.read(3).len, 63);
        c.release(4);
        assert_eq!(
            c.cons().load(Ordering::Relaxed),
            (u32::MAX - 1).wrapping_add(4)
        );
        assert_eq!(c.peek(32), 2);
        assert_eq!(c.read(0).addr, 4 * 2048);
        assert_eq!(c.read(1).len, 65);
        c.release(2);
        assert_eq!(c.peek(32), 0);
        assert!(!c.needs_wakeup());
        // SAFETY: the flags word is inside the mapping, aligned, atomic-only.
        unsafe { c.flags.as_ref() }.store(XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(c.needs_wakeup());
    }

    #[test]
    #[should_panic(expected = "outside the reservation")]
    fn write_outside_reservation_panics() {
        let mut p = fake_ring::<u64>(4, 0);
        assert_eq!(p.reserve(2), 2);
        p.write(2, 0);
    }

    #[test]
    fn umem_frame_bounds() {
        let u = Umem::new(4, 2048).unwrap();
        assert_eq!(u.len(), 8192);
        assert!(u.in_one_frame(0, 2048));
        assert!(u.in_one_frame(2048 + 256, 1792));
        assert!(
            !u.in_one_frame(2048 + 256, 1793),
            "crosses into the next frame"
        );
        assert!(!u.in_one_frame(3 * 2048 + 100, 2000), "past the end");
        assert!(!u.in_one_frame(u64::MAX - 2, 10), "overflow");
        assert_eq!(u.chunk_of(3 * 2048 + 300), 3 * 2048);
    }
}
