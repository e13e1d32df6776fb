//! Owned frame buffers with headroom.
//!
//! A [`PacketBuf`] carries a frame from the port rx ring through parse, flow
//! lookup and actions to port tx. Its storage reserves space in front of the
//! frame so that actions which grow the frame at the front — VLAN push, MPLS,
//! tunnel encapsulation — move only the few bytes before the insertion point
//! instead of reallocating and copying the whole packet. Rx paths reuse one
//! buffer per ring slot through [`PacketBuf::set_data`], so the steady state
//! allocates nothing.

use core::fmt;

/// Segmentation type of a GSO super-frame (the virtio-net `gso_type`
/// values nicflow carries).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GsoType {
    /// Not a super-frame.
    #[default]
    None,
    /// TCP over IPv4, to be cut into `gso_size`-byte segments.
    TcpV4,
    /// TCP over IPv6.
    TcpV6,
    /// UDP datagrams of one flow (`SKB_GSO_UDP_L4`), cut at `gso_size`
    /// payload bytes (`udp_gso`).
    UdpL4,
}

/// Offload metadata a frame carries from a port that received it with the
/// kernel's offload state (AF_PACKET `PACKET_VNET_HDR`): what the frame
/// still needs before it may go on a wire. Offsets are from the start of
/// the frame and follow [`PacketBuf::push_front`] / [`PacketBuf::pull_front`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    /// Super-frame type (`GsoType::None`: not a super-frame).
    pub gso_type: GsoType,
    /// Payload bytes per segment (the sender's MSS) for a super-frame.
    pub gso_size: u16,
    /// Bytes of headers (Ethernet .. TCP) in front of the payload, as the
    /// sender reported them (a hint; 0 when unknown).
    pub hdr_len: u16,
    /// Where the checksummed L4 data starts (valid if `csum_partial`).
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start`.
    pub csum_offset: u16,
    /// The Linux `CHECKSUM_PARTIAL` contract: the L4 checksum field holds
    /// only the (folded, uncomplemented) pseudo-header sum; whoever sends
    /// the frame on a wire must checksum `csum_start..` and store the
    /// complement at `csum_start + csum_offset`.
    pub csum_partial: bool,
}

impl Offload {
    /// Is this a GSO super-frame?
    #[inline]
    pub fn is_gso(&self) -> bool {
        self.gso_type != GsoType::None
    }

    /// Does the frame need anything done before it can go on a wire?
    #[inline]
    pub fn needs_work(&self) -> bool {
        self.csum_partial || self.is_gso()
    }
}

/// Tunnel metadata of a frame: where it came from when a tunnel port
/// decapsulated it (the flow key's `tun_*` fields are filled from this), and
/// the tunnel ID a `set_field:...->tun_id` gave it for a tunnel port whose
/// key comes from the flow (`key=flow`). IPv4 endpoints in host order, as in
/// the flow key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelMeta {
    /// VNI (VXLAN, Geneve).
    pub id: u64,
    /// Outer source address (the remote endpoint on receive).
    pub src: u32,
    /// Outer destination address (the local endpoint on receive).
    pub dst: u32,
    /// `TUN_F_*` bits, Open vSwitch's values.
    pub flags: u16,
    /// Bit N: `metadata[N]` is present (a received Geneve option the port's
    /// TLV map names, or a `set_field:...->tun_metadataN`): sent as an
    /// option by a Geneve port that maps slot N.
    pub md_present: u8,
    /// `tun_metadata0..7`: 4-byte Geneve option values by TLV-map slot.
    pub metadata: [u32; 8],
}

/// [`TunnelMeta::flags`]: Geneve O (OAM) bit.
pub const TUN_F_OAM: u16 = 1;
/// [`TunnelMeta::flags`]: outer IPv4 DF bit.
pub const TUN_F_DONT_FRAGMENT: u16 = 2;
/// [`TunnelMeta::flags`]: outer UDP checksum present.
pub const TUN_F_CSUM: u16 = 4;
/// [`TunnelMeta::flags`]: the tunnel carries a key (VNI).
pub const TUN_F_KEY: u16 = 8;

/// An owned frame with headroom in front and tailroom behind.
///
/// Invariant: `start + len <= storage.len()`.
#[derive(Clone)]
pub struct PacketBuf {
    storage: Box<[u8]>,
    start: usize,
    len: usize,
    /// Headroom restored by [`set_data`](Self::set_data) / [`clear`](Self::clear).
    reserve: usize,
    /// Offload state (partial checksum, GSO); `None` for an ordinary frame.
    /// Reset by [`set_data`](Self::set_data), [`clear`](Self::clear) and the
    /// constructors, since buffers are pooled.
    pub offload: Option<Offload>,
    /// Tunnel metadata (decapsulated frames, `set_field` of `tun_id`);
    /// reset with `offload`.
    pub tun: Option<TunnelMeta>,
}

impl PacketBuf {
    /// Headroom reserved by the constructors: room for a double VLAN push
    /// plus a Geneve/VXLAN-over-IPv6 encapsulation, rounded up to a cache
    /// line multiple.
    pub const DEFAULT_HEADROOM: usize = 128;

    /// An empty buffer able to hold `cap` bytes of frame after
    /// [`DEFAULT_HEADROOM`](Self::DEFAULT_HEADROOM) bytes of headroom.
    pub fn with_capacity(cap: usize) -> Self {
        Self::with_headroom(Self::DEFAULT_HEADROOM, cap)
    }

    /// An empty buffer with a custom headroom, for paths that know they need
    /// more (or less) than the default.
    pub fn with_headroom(headroom: usize, cap: usize) -> Self {
        PacketBuf {
            storage: vec![0u8; headroom.saturating_add(cap)].into_boxed_slice(),
            start: headroom,
            len: 0,
            reserve: headroom,
            offload: None,
            tun: None,
        }
    }

    /// A buffer holding a copy of `data` behind the default headroom.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut b = Self::with_capacity(data.len());
        b.storage[b.start..b.start + data.len()].copy_from_slice(data);
        b.len = data.len();
        b
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// The frame, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }

    /// Frame length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Is the frame empty?
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total storage size (headroom + frame + tailroom).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.storage.len()
    }

    /// Bytes available in front of the frame.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.start
    }

    /// Headroom [`set_data`](Self::set_data) and [`clear`](Self::clear)
    /// restore: a buffer reused as a receive slot must have its room
    /// behind that.
    #[inline]
    pub fn reserved_headroom(&self) -> usize {
        self.reserve
    }

    /// Bytes available behind the frame.
    #[inline]
    pub fn tailroom(&self) -> usize {
        self.storage.len() - self.start - self.len
    }

    /// Replaces the frame with a copy of `data`, reusing the storage and
    /// restoring the reserved headroom. Returns `false`, leaving the buffer
    /// unchanged, if `data` does not fit behind that headroom.
    pub fn set_data(&mut self, data: &[u8]) -> bool {
        let start = self.reserve;
        match self.storage.len().checked_sub(start) {
            Some(room) if room >= data.len() => {
                self.storage[start..start + data.len()].copy_from_slice(data);
                self.start = start;
                self.len = data.len();
                self.offload = None;
                self.tun = None;
                true
            }
            _ => false,
        }
    }

    /// Empties the frame and restores the reserved headroom.
    pub fn clear(&mut self) {
        self.start = self.reserve.min(self.storage.len());
        self.len = 0;
        self.offload = None;
        self.tun = None;
    }

    /// Does the frame carry offload work (partial checksum or GSO)?
    #[inline]
    pub fn needs_offload_work(&self) -> bool {
        self.offload.is_some_and(|o| o.needs_work())
    }

    /// Is the L4 checksum field partial (`CHECKSUM_PARTIAL`)?
    #[inline]
    pub fn csum_partial(&self) -> bool {
        self.offload.is_some_and(|o| o.csum_partial)
    }

    fn shift_offload(&mut self, delta: isize) {
        if let Some(o) = &mut self.offload {
            let mv = |v: u16| (v as isize + delta).clamp(0, u16::MAX as isize) as u16;
            o.csum_start = mv(o.csum_start);
            if o.hdr_len != 0 {
                o.hdr_len = mv(o.hdr_len);
            }
        }
    }

    /// Grows the frame by `n` bytes at the front, taken from the headroom,
    /// and returns those `n` new bytes (zeroed) for the caller to fill.
    /// `None`, leaving the buffer unchanged, if the headroom is too small.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.start {
            return None;
        }
        self.start -= n;
        self.len += n;
        self.shift_offload(n as isize);
        let new = &mut self.storage[self.start..self.start + n];
        new.fill(0);
        Some(new)
    }

    /// Removes `n` bytes from the front (they become headroom). `false`,
    /// leaving the buffer unchanged, if the frame is shorter than `n`.
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len {
            return false;
        }
        self.start += n;
        self.len -= n;
        self.shift_offload(-(n as isize));
        true
    }

    /// Shortens the frame to `len` bytes; no-op if it is not longer.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
        }
    }

    /// Grows the frame by `n` bytes at the back, taken from the tailroom,
    /// and returns those `n` new bytes (zeroed). `None`, leaving the buffer
    /// unchanged, if the tailroom is too small.
    pub fn extend_back(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.tailroom() {
            return None;
        }
        let end = self.start + self.len;
        self.len += n;
        let new = &mut self.storage[end..end + n];
        new.fill(0);
        Some(new)
    }

    /// Grows the frame by `n` bytes at the back, like
    /// [`extend_back`](Self::extend_back), but returns them as they are
    /// (stale bytes of an earlier frame, never uninitialised memory), for
    /// a caller that overwrites every one of them: a slot of a super-frame
    /// written in place costs no zeroing pass over 64 KiB. `None`, leaving
    /// the buffer unchanged, if the tailroom is too small.
    pub fn extend_back_unzeroed(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.tailroom() {
            return None;
        }
        let end = self.start + self.len;
        self.len += n;
        Some(&mut self.storage[end..end + n])
    }

    /// Appends a copy of `data` at the back, taken from the tailroom
    /// (written once: no zeroing first, unlike [`extend_back`](Self::extend_back)
    /// followed by a copy). `false`, leaving the buffer unchanged, if the
    /// tailroom is too small.
    pub fn append(&mut self, data: &[u8]) -> bool {
        if data.len() > self.tailroom() {
            return false;
        }
        let end = self.start + self.len;
        self.storage[end..end + data.len()].copy_from_slice(data);
        self.len += data.len();
        true
    }

    /// Makes sure at least `n` bytes of headroom are available, reallocating
    /// (the slow path; the frame is copied) only if they are not. Use before
    /// an unusually deep encapsulation; ordinary pushes fit the default.
    pub fn reserve_headroom(&mut self, n: usize) {
        if self.start >= n {
            return;
        }
        let tail = self.tailroom();
        let size = n.saturating_add(self.len).saturating_add(tail);
        let mut storage = vec![0u8; size].into_boxed_slice();
        storage[n..n + self.len].copy_from_slice(self.data());
        self.storage = storage;
        self.start = n;
        self.reserve = self.reserve.max(n);
    }

    /// Makes sure at least `n` bytes of tailroom are available, reallocating
    /// (the slow path; the frame is copied where it lies, headroom kept)
    /// only if they are not. For a buffer that turns out smaller than the
    /// frame must grow (one allocated to fit a short frame and recycled):
    /// it stays the bigger size afterwards, so a caller that grows it to a
    /// receive buffer's size does this once per such buffer, not once per
    /// frame.
    pub fn reserve_tailroom(&mut self, n: usize) {
        if self.tailroom() >= n {
            return;
        }
        let end = self.start + self.len;
        let mut storage = vec![0u8; end.saturating_add(n)].into_boxed_slice();
        storage[self.start..end].copy_from_slice(self.data());
        self.storage = storage;
    }
}

impl Default for PacketBuf {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl AsRef<[u8]> for PacketBuf {
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl AsMut<[u8]> for PacketBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
}

/// Two buffers are equal when their frames are; headroom is not content.
impl PartialEq for PacketBuf {
    fn eq(&self, other: &Self) -> bool {
        self.data() == other.data()
    }
}

impl Eq for PacketBuf {}

impl fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Hex<'a>(&'a [u8], usize);
        impl fmt::Debug for Hex<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for b in self.0 {
                    write!(f, "{b:02x}")?;
                }
                if self.1 > self.0.len() {
                    write!(f, "…(+{})", self.1 - self.0.len())?;
                }
                Ok(())
            }
        }
        let d = self.data();
        f.debug_struct("PacketBuf")
            .field("len", &self.len)
            .field("headroom", &self.headroom())
            .field("tailroom", &self.tailroom())
            .field("data", &Hex(&d[..d.len().min(64)], d.len()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_slice_and_rooms() {
        let b = PacketBuf::from_slice(&[1, 2, 3]);
        assert_eq!(b.data(), &[1, 2, 3]);
        assert_eq!(b.len(), 3);
        assert!(!b.is_empty());
        assert_eq!(b.headroom(), PacketBuf::DEFAULT_HEADROOM);
        assert_eq!(b.tailroom(), 0);
        let e = PacketBuf::with_capacity(100);
        assert!(e.is_empty());
        assert_eq!((e.headroom(), e.tailroom()), (128, 100));
    }

    #[test]
    fn push_pull_front() {
        let mut b = PacketBuf::from_slice(&[9; 10]);
        b.push_front(4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(&b.data()[..5], &[1, 2, 3, 4, 9]);
        assert_eq!(b.headroom(), 124);
        assert!(b.push_front(125).is_none());
        assert_eq!(b.len(), 14);
        assert!(b.pull_front(4));
        assert_eq!(b.data(), &[9; 10]);
        assert!(!b.pull_front(11));
        assert!(b.pull_front(10));
        assert!(b.is_empty());
        assert!(b.push_front(b.headroom()).is_some());
        assert_eq!(b.headroom(), 0);
    }

    #[test]
    fn set_data_reuses_storage() {
        let mut b = PacketBuf::with_capacity(8);
        assert!(b.set_data(&[1; 8]));
        b.push_front(100).unwrap();
        assert!(b.set_data(&[2; 4]));
        assert_eq!(b.headroom(), 128);
        assert_eq!(b.data(), &[2; 4]);
        assert!(!b.set_data(&[3; 9]));
        assert_eq!(b.data(), &[2; 4]);
    }

    #[test]
    fn offload_is_reset_and_follows_pushes() {
        let mut b = PacketBuf::from_slice(&[0; 60]);
        assert!(b.offload.is_none() && !b.needs_offload_work());
        b.offload = Some(Offload {
            gso_type: GsoType::TcpV4,
            gso_size: 1448,
            hdr_len: 66,
            csum_start: 34,
            csum_offset: 16,
            csum_partial: true,
        });
        assert!(b.needs_offload_work() && b.csum_partial());
        b.push_front(4);
        assert_eq!(b.offload.unwrap().csum_start, 38);
        assert_eq!(b.offload.unwrap().hdr_len, 70);
        b.pull_front(4);
        assert_eq!(b.offload.unwrap().csum_start, 34);
        assert!(b.set_data(&[1; 10]));
        assert!(b.offload.is_none());
        b.offload = Some(Offload::default());
        b.clear();
        assert!(b.offload.is_none());
    }

    #[test]
    fn tail_operations() {
        let mut b = PacketBuf::with_capacity(6);
        b.set_data(&[1, 2]);
        b.extend_back(3).unwrap().copy_from_slice(&[3, 4, 5]);
        assert_eq!(b.data(), &[1, 2, 3, 4, 5]);
        assert!(b.extend_back(2).is_none());
        b.truncate(10);
        assert_eq!(b.len(), 5);
        b.truncate(1);
        assert_eq!(b.data(), &[1]);
        assert_eq!(b.tailroom(), 5);
    }

    #[test]
    fn append_copies_behind_the_frame_or_changes_nothing() {
        let mut b = PacketBuf::with_headroom(2, 6);
        b.set_data(&[1, 2]);
        assert!(b.append(&[3, 4, 5]));
        assert_eq!(b.data(), &[1, 2, 3, 4, 5]);
        assert!(!b.append(&[6, 7]), "one byte of room");
        assert_eq!(b.data(), &[1, 2, 3, 4, 5]);
        assert!(b.append(&[6]) && b.append(&[]));
        assert_eq!((b.data(), b.tailroom()), (&[1, 2, 3, 4, 5, 6][..], 0));
        b.truncate(0);
        assert!(b.append(&[9; 6]));
        assert_eq!(b.data(), &[9; 6]);
    }

    #[test]
    fn extend_back_unzeroed_grows_without_touching_or_changes_nothing() {
        let mut b = PacketBuf::with_headroom(2, 6);
        b.set_data(&[1, 2, 3, 4, 5]);
        b.truncate(2);
        let slot = b.extend_back_unzeroed(3).expect("room for 3");
        assert_eq!(slot, &[3, 4, 5], "stale bytes left as they were");
        slot.copy_from_slice(&[7, 8, 9]);
        assert_eq!(b.data(), &[1, 2, 7, 8, 9]);
        assert!(b.extend_back_unzeroed(2).is_none(), "one byte of room");
        assert_eq!((b.len(), b.tailroom()), (5, 1));
    }

    #[test]
    fn reserve_headroom_reallocates_once() {
        let mut b = PacketBuf::with_headroom(0, 4);
        b.set_data(&[1, 2, 3]);
        assert!(b.push_front(1).is_none());
        b.reserve_headroom(16);
        assert_eq!((b.headroom(), b.data()), (16, &[1u8, 2, 3][..]));
        assert_eq!(b.tailroom(), 1);
        b.clear();
        assert_eq!(b.headroom(), 16);
    }

    #[test]
    fn reserve_tailroom_reallocates_once_keeping_the_headroom() {
        let mut b = PacketBuf::from_slice(&[1, 2, 3]);
        assert_eq!(b.tailroom(), 0);
        assert!(b.pull_front(1));
        b.reserve_tailroom(10);
        assert_eq!((b.headroom(), b.data()), (129, &[2u8, 3][..]));
        assert_eq!(b.tailroom(), 10);
        let cap = b.capacity();
        b.reserve_tailroom(10);
        assert_eq!(b.capacity(), cap, "enough room: no reallocation");
        assert!(b.extend_back(10).is_some());
        b.clear();
        assert_eq!(b.headroom(), 128);
    }

    #[test]
    fn clone_eq_debug() {
        let b = PacketBuf::from_slice(&[0xab; 70]);
        let c = b.clone();
        assert_eq!(b, c);
        let s = format!("{b:?}");
        assert!(s.contains("len: 70") && s.contains("abab") && s.contains("+6"));
    }
}
