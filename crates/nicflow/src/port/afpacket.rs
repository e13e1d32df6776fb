//! AF_PACKET ports: a real Linux interface as a switch port, received
//! through a TPACKET_V3 memory-mapped ring and transmitted with batched
//! `sendmmsg`.
//!
//! Place in a frame's path: wire (or veth peer) -> driver -> **this port's
//! receive ring** (the kernel copies each frame into a block shared with us
//! and retires the block when it is full or after `block_timeout_ms`) ->
//! [`Port::recv_batch`] copies the frame into a pooled [`PacketBuf`] ->
//! parse -> flow key -> classifier / caches -> actions -> the output port's
//! [`Port::send_batch`] -> one `sendmmsg` per batch, straight to the driver
//! (`PACKET_QDISC_BYPASS`) -> wire.
//!
//! Why it exists: it is the *fallback* real-interface port. It works on any
//! interface the kernel can open (physical NIC, veth, tap, bond) with no
//! driver, XDP or hugepage support, at the price of one copy per frame in
//! each direction and one syscall per transmitted batch.
//!
//! Why the receive side does more than copy: the kernel hands a packet
//! socket its *sk_buff view* of a frame, not the bytes that were (or will
//! be) on the wire, and a switch must forward wire frames. `recv_batch`
//! therefore undoes three things before the switch sees a frame:
//!
//! * **VLAN acceleration.** The 802.1Q/802.1ad tag was moved from the frame
//!   into metadata (`tp_vlan_tci`, `tp_vlan_tpid`); it is inserted back after
//!   the MAC addresses, so `dl_vlan` rules match and the tag is forwarded.
//! * **Partial checksums** (`TP_STATUS_CSUMNOTREADY`). A local sender with
//!   checksum offload (a veth or tap peer) leaves only the pseudo-header sum
//!   in the TCP/UDP checksum field. The TPACKET_V3 header does not carry the
//!   kernel's `csum_start`/`csum_offset`, so for TCP and UDP over IPv4/IPv6
//!   (not fragments) the port recomputes the whole L4 checksum, pseudo header
//!   included, which gives the same result. Other protocols are left as they
//!   are (the kernel only produces partial checksums for TCP/UDP in
//!   practice; SCTP's CRC32c offload and checksums inside tunnels are not
//!   completed).
//! * **GSO super-frames.** A local TCP sender with TSO on its device hands
//!   the peer one frame of up to 64 KiB per burst (veth forwards it intact).
//!   Measured on Linux 6.18 with the namespace-side veth at its default
//!   offloads: iperf3 through the switch delivered ~2,000 frames of up to
//!   65,226 bytes per 2-3 s, every TCP frame from the sender (data and
//!   pure ACKs) and every UDP datagram arrived `CSUMNOTREADY`, and turning
//!   the *switch* end's offloads off changed none of that. Such a frame
//!   cannot be sent on any port (`EMSGSIZE`), so TCP super-frames over
//!   IPv4/IPv6 are split in software into segments that fit the receiving
//!   interface's MTU, as the kernel's `tcp_gso_segment` does: payload cut at
//!   `MTU - IP headers - TCP header`, IPv4 total length, ID (incremented per
//!   segment) and header checksum, IPv6 payload length, TCP sequence number,
//!   FIN/PSH (last segment only), CWR (first segment only) and the TCP
//!   checksum fixed per segment. The ring header does not carry the sender's
//!   `gso_size`, so segments are MTU-sized: the same as the sender's when
//!   both ends share the MTU (the veth case), larger if the sender used a
//!   smaller MSS. Any other frame longer than the MTU (UDP GSO, unparsable)
//!   is dropped and counted in `rx_dropped`. Segments are sized for the
//!   *receiving* interface; an output port with a smaller MTU refuses them
//!   (`tx_dropped`), as it would any frame.
//!
//! [`disable_offloads`] (called by [`AfPacketPort::open`] unless told not
//! to) turns off GRO, hardware GRO, LRO, TSO, USO, GSO and checksum
//! offloads on the attached interface: on a physical NIC that stops the
//! receive path from building super-frames out of received segments, which
//! is what OVS requires of the interfaces it attaches too. Frames from a
//! local peer are shaped by the *peer's* offloads, hence the software
//! fix-ups above.

use super::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::checksum::{checksum, l4_checksum_ipv4, l4_checksum_ipv6, udp_fixup};
use nicflow_packet::parse::{self, L3Kind, L4Kind, Layout};
use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

// ---------------------------------------------------------------------------
// Kernel ABI: include/uapi/linux/if_packet.h, if_ether.h, ethtool.h. Mirrored
// here (rather than taken from `libc`) so the layout this module relies on is
// visible and checked by the unit tests against the kernel's sizes.
// ---------------------------------------------------------------------------

const SOL_PACKET: libc::c_int = 263;
const ETH_P_ALL: u16 = 0x0003;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_MR_PROMISC: u16 = 1;
/// `enum tpacket_versions { TPACKET_V1, TPACKET_V2, TPACKET_V3 }`.
const TPACKET_V3: libc::c_int = 2;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1 << 0;
const TP_STATUS_LOSING: u32 = 1 << 2;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr)) + sizeof(struct sockaddr_ll)`:
/// the smallest frame the kernel accepts in a ring request.
const TPACKET3_HDRLEN: u32 = 48 + 20;
const TPACKET_ALIGNMENT: u32 = 16;

const ETHTOOL_SRXCSUM: u32 = 0x15;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
const ETH_FLAG_LRO: u32 = 1 << 15;

const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
const ETH_ALEN2: usize = 12;
const ETHERTYPE_VLAN: u16 = 0x8100;

/// Capacity of buffers this port allocates when the pool is dry or its
/// buffer is too small: a jumbo frame plus tags, like the datapath's pool.
const RX_BUF_CAPACITY: usize = 9216 + 64;

/// `struct tpacket_req3`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

/// `struct tpacket_hdr_variant1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TpacketHdrVariant1 {
    tp_rxhash: u32,
    tp_vlan_tci: u32,
    tp_vlan_tpid: u16,
    tp_padding: u16,
}

/// `struct tpacket3_hdr`: one frame in a block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Tpacket3Hdr {
    tp_next_offset: u32,
    tp_sec: u32,
    tp_nsec: u32,
    tp_snaplen: u32,
    tp_len: u32,
    tp_status: u32,
    tp_mac: u16,
    tp_net: u16,
    hv1: TpacketHdrVariant1,
    tp_padding: [u8; 8],
}

/// `struct tpacket_hdr_v1` (`seq_num` is an `__aligned_u64`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TpacketHdrV1 {
    block_status: u32,
    num_pkts: u32,
    offset_to_first_pkt: u32,
    blk_len: u32,
    seq_num: u64,
    ts_first_pkt: [u32; 2],
    ts_last_pkt: [u32; 2],
}

/// `struct tpacket_block_desc`: the header at the start of every block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TpacketBlockDesc {
    version: u32,
    offset_to_priv: u32,
    bh1: TpacketHdrV1,
}

/// Offset of `block_status` in a block (`tpacket_block_desc.hdr.bh1`).
const BLOCK_STATUS_OFFSET: usize = 8;

/// `struct tpacket_stats_v3`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

/// `struct packet_mreq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: u16,
    mr_alen: u16,
    mr_address: [u8; 8],
}

/// `struct ethtool_value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

// ---------------------------------------------------------------------------
// Errors and options
// ---------------------------------------------------------------------------

/// Why an AF_PACKET port could not be opened (or offloads not changed).
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    #[error("invalid interface name `{name}`: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("invalid AF_PACKET options: {0}")]
    InvalidOptions(String),
    #[error("no interface `{ifname}`: {source}")]
    NoSuchInterface {
        ifname: String,
        #[source]
        source: io::Error,
    },
    /// A system call failed; `op` names the call and its arguments.
    #[error("{op} on `{ifname}` failed: {source}")]
    Syscall {
        op: &'static str,
        ifname: String,
        #[source]
        source: io::Error,
    },
}

impl AfPacketError {
    fn sys(op: &'static str, ifname: &str, source: io::Error) -> Self {
        AfPacketError::Syscall {
            op,
            ifname: ifname.to_string(),
            source,
        }
    }

    /// The OS error number behind the failure, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            AfPacketError::NoSuchInterface { source, .. }
            | AfPacketError::Syscall { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// How an [`AfPacketPort`] is set up. `Default` suits a switch port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketOptions {
    /// Bytes per ring block: a power of two, a multiple of the page size.
    /// With TPACKET_V3 the block size, not `frame_size`, bounds the longest
    /// frame the kernel can store whole; longer ones arrive truncated and are
    /// dropped, so keep it above 64 KiB + headers if GSO frames may arrive.
    pub block_size: u32,
    /// Blocks in the ring (ring memory = `block_size * block_count`).
    pub block_count: u32,
    /// Nominal frame slot: a multiple of 16, at least 68. TPACKET_V3 packs
    /// frames by their real size; this only sizes the kernel's bookkeeping.
    pub frame_size: u32,
    /// A partly filled block is handed to us after this many milliseconds:
    /// the worst-case latency added at low rates (0: kernel default, 8 ms or
    /// more).
    pub block_timeout_ms: u32,
    /// Receive every frame, not only those addressed to the interface
    /// (`PACKET_MR_PROMISC`, undone by the kernel when the socket closes).
    /// A switch port needs it.
    pub promisc: bool,
    /// Call [`disable_offloads`] on the interface in `open` (failure is
    /// logged, not fatal).
    pub disable_offloads: bool,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        AfPacketOptions {
            block_size: 128 * 1024,
            block_count: 64,
            frame_size: 2048,
            block_timeout_ms: 2,
            promisc: true,
            disable_offloads: true,
        }
    }
}

impl AfPacketOptions {
    /// Check the ring geometry the way the kernel will, so a bad setting
    /// fails with a message instead of a bare `EINVAL` from `setsockopt`.
    pub fn validate(&self) -> Result<(), AfPacketError> {
        let bad = |m: String| Err(AfPacketError::InvalidOptions(m));
        let page = page_size();
        if self.block_size == 0 || !self.block_size.is_power_of_two() {
            return bad(format!(
                "block_size {} is not a power of two",
                self.block_size
            ));
        }
        if (self.block_size as usize) & (page - 1) != 0 {
            return bad(format!(
                "block_size {} is not a multiple of the page size {page}",
                self.block_size
            ));
        }
        if self.block_count == 0 {
            return bad("block_count must be at least 1".into());
        }
        if self.frame_size < TPACKET3_HDRLEN
            || self.frame_size & (TPACKET_ALIGNMENT - 1) != 0
            || self.frame_size > self.block_size
        {
            return bad(format!(
                "frame_size {} must be a multiple of {TPACKET_ALIGNMENT} between \
                 {TPACKET3_HDRLEN} and block_size {}",
                self.frame_size, self.block_size
            ));
        }
        let ring = u64::from(self.block_size) * u64::from(self.block_count);
        if ring > 1 << 30 {
            return bad(format!("ring of {ring} bytes exceeds 1 GiB"));
        }
        if self.block_timeout_ms > 10_000 {
            return bad(format!(
                "block_timeout_ms {} exceeds 10000",
                self.block_timeout_ms
            ));
        }
        Ok(())
    }

    fn ring_request(&self) -> TpacketReq3 {
        TpacketReq3 {
            tp_block_size: self.block_size,
            tp_block_nr: self.block_count,
            tp_frame_size: self.frame_size,
            tp_frame_nr: (self.block_size / self.frame_size) * self.block_count,
            tp_retire_blk_tov: self.block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        }
    }
}

/// What this port did to received frames, beyond [`PortStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AfPacketCounters {
    /// Frames the kernel flagged `TP_STATUS_CSUMNOTREADY` (partial L4
    /// checksum from a local sender).
    pub csum_not_ready: u64,
    /// L4 checksums completed in software (partial frames and every
    /// segment cut from a super-frame).
    pub csum_completed: u64,
    /// Frames whose VLAN tag was put back from the ring metadata.
    pub vlan_restored: u64,
    /// Frames longer than the MTU (GSO super-frames) split into segments.
    pub gso_frames: u64,
    /// Segments produced from them.
    pub gso_segments: u64,
    /// Longest frame seen in the ring (after the VLAN tag was restored).
    pub max_frame_len: u64,
    /// Dropped: cut short by the ring (`tp_snaplen < tp_len`).
    pub truncated: u64,
    /// Dropped: longer than the MTU and not TCP, so not segmentable.
    pub oversize_dropped: u64,
    /// Dropped by the kernel for lack of ring space (`PACKET_STATISTICS`).
    pub kernel_drops: u64,
}

// ---------------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------------

/// A switch port on a Linux interface. See the module docs.
pub struct AfPacketPort {
    name: String,
    ifindex: i32,
    // Field order matters for Drop: the ring is unmapped before the socket
    // is closed.
    ring: Ring,
    fd: OwnedFd,
    /// Block being read (index into the ring).
    cur_block: usize,
    /// Position inside `cur_block` when it has been opened but not fully
    /// consumed (a `recv_batch` stopped at `max` in the middle of it).
    cursor: Option<BlockCursor>,
    rx: RxState,
    /// Kernel drops read so far (`stats` takes `&self`).
    kernel_drops: Cell<u64>,
    tx: TxScratch,
    last_tx_errno: i32,
}

#[derive(Clone, Copy, Debug)]
struct BlockCursor {
    /// Offset of the next frame header from the block start.
    next: usize,
    /// Frames of the block not yet read.
    left: u32,
}

/// Receive-side state, separate from the ring so that a frame borrowed from
/// the ring can be processed while these are updated.
struct RxState {
    name: String,
    mtu: usize,
    stats: PortStats,
    counters: AfPacketCounters,
    /// Frames produced but not yet returned (segments beyond `max`).
    pending: VecDeque<PacketBuf>,
    segs: Vec<PacketBuf>,
    /// Scratch for frames longer than the MTU.
    big: Vec<u8>,
    warned_oversize: bool,
}

/// `sendmmsg` vectors, kept between calls to avoid allocating per batch.
/// They only hold pointers while `send_batch` runs and are empty otherwise.
#[derive(Default)]
struct TxScratch {
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the vectors are empty outside `send_batch`, so no pointer they
// could hold outlives the `&mut self` borrow that created it; moving them to
// another thread moves nothing that points anywhere.
unsafe impl Send for TxScratch {}

impl AfPacketPort {
    /// Open `ifname` as a switch port: packet socket, TPACKET_V3 receive
    /// ring, bound to the interface, own transmissions ignored, qdisc
    /// bypassed on transmit, promiscuous if asked. The port is named after
    /// the interface.
    pub fn open(ifname: &str, opts: AfPacketOptions) -> Result<Self, AfPacketError> {
        validate_ifname(ifname)?;
        opts.validate()?;
        let ifindex = if_index(ifname)?;
        if opts.disable_offloads {
            if let Err(e) = disable_offloads(ifname) {
                tracing::warn!(port = %ifname, "could not disable offloads: {e}");
            }
        }
        let sys = |op| move |e| AfPacketError::sys(op, ifname, e);

        // Protocol 0: no frame is queued before `bind` names the interface.
        let fd = packet_socket().map_err(sys("socket(AF_PACKET, SOCK_RAW)"))?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &TPACKET_V3)
            .map_err(sys("setsockopt(PACKET_VERSION, TPACKET_V3)"))?;
        let req = opts.ring_request();
        setsockopt(raw, SOL_PACKET, PACKET_RX_RING, &req)
            .map_err(sys("setsockopt(PACKET_RX_RING)"))?;
        let ring = Ring::map(raw, opts.block_size as usize, opts.block_count as usize)
            .map_err(sys("mmap(rx ring)"))?;
        match setsockopt(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1 as &libc::c_int) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => tracing::warn!(
                port = %ifname,
                "PACKET_IGNORE_OUTGOING unsupported (kernel < 4.20): the port \
                 will also receive frames the host sends on it"
            ),
            Err(e) => return Err(sys("setsockopt(PACKET_IGNORE_OUTGOING)")(e)),
        }
        setsockopt(raw, SOL_PACKET, PACKET_QDISC_BYPASS, &1 as &libc::c_int)
            .map_err(sys("setsockopt(PACKET_QDISC_BYPASS)"))?;
        bind_packet(raw, ifindex).map_err(sys("bind(AF_PACKET, ETH_P_ALL)"))?;
        if opts.promisc {
            let mreq = PacketMreq {
                mr_ifindex: ifindex,
                mr_type: PACKET_MR_PROMISC,
                ..Default::default()
            };
            setsockopt(raw, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(sys("setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)"))?;
        }
        let mut ifr = ifreq(ifname);
        if_ioctl(raw, libc::SIOCGIFMTU, &mut ifr).map_err(sys("ioctl(SIOCGIFMTU)"))?;
        // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote `ifru_mtu`.
        let mtu = unsafe { ifr.ifr_ifru.ifru_mtu }.max(68) as usize;
        let mut ifr = ifreq(ifname);
        if if_ioctl(raw, libc::SIOCGIFFLAGS, &mut ifr).is_ok() {
            // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote `ifru_flags`.
            let flags = unsafe { ifr.ifr_ifru.ifru_flags };
            if flags & libc::IFF_UP as libc::c_short == 0 {
                tracing::warn!(port = %ifname, "interface is down: no frames until it is up");
            }
        }
        tracing::debug!(port = %ifname, ifindex, mtu, ?opts, "AF_PACKET port open");
        Ok(AfPacketPort {
            name: ifname.to_string(),
            ifindex,
            ring,
            fd,
            cur_block: 0,
            cursor: None,
            rx: RxState {
                name: ifname.to_string(),
                mtu,
                stats: PortStats::default(),
                counters: AfPacketCounters::default(),
                pending: VecDeque::new(),
                segs: Vec::new(),
                big: Vec::new(),
                warned_oversize: false,
            },
            kernel_drops: Cell::new(0),
            tx: TxScratch::default(),
            last_tx_errno: 0,
        })
    }

    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The interface MTU read at `open`: the size segments are cut to.
    pub fn mtu(&self) -> usize {
        self.rx.mtu
    }

    /// Receive-side fix-up and drop counters.
    pub fn counters(&self) -> AfPacketCounters {
        self.refresh_kernel_drops();
        let mut c = self.rx.counters.clone();
        c.kernel_drops = self.kernel_drops.get();
        c
    }

    /// Add the kernel's drop count (reset by each read) to ours.
    fn refresh_kernel_drops(&self) {
        let mut st = TpacketStatsV3::default();
        let mut len = size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `st` is a live, writable tpacket_stats_v3 and `len` says
        // how many bytes of it the kernel may write.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.kernel_drops
                .set(self.kernel_drops.get() + u64::from(st.tp_drops));
        }
    }

    fn release_block(&mut self) {
        self.ring.release(self.cur_block);
        self.cursor = None;
        self.cur_block = (self.cur_block + 1) % self.ring.blocks;
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    /// Also returns segments left over from a super-frame by the previous
    /// call first. A caller woken by [`rx_fd`](Port::rx_fd) must call again
    /// while it gets `max` frames: leftovers do not make the fd readable.
    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.rx.pending.pop_front() {
                Some(b) => {
                    out.push(b);
                    n += 1;
                }
                None => break,
            }
        }
        while n < max {
            let cur = match self.cursor {
                Some(c) => c,
                None => {
                    let status = self.ring.status(self.cur_block).load(Ordering::Acquire);
                    if status & TP_STATUS_USER == 0 {
                        break;
                    }
                    if status & TP_STATUS_LOSING != 0 {
                        self.refresh_kernel_drops();
                    }
                    let (left, first) = self.ring.block_frames(self.cur_block);
                    BlockCursor {
                        next: first as usize,
                        left,
                    }
                }
            };
            if cur.left == 0 {
                self.release_block();
                continue;
            }
            match self.ring.frame(self.cur_block, cur.next) {
                Some((hdr, data)) => {
                    self.cursor = Some(BlockCursor {
                        next: cur.next + hdr.tp_next_offset as usize,
                        left: cur.left - 1,
                    });
                    n += self.rx.deliver(&hdr, data, out, max - n, pool);
                }
                None => {
                    // Offsets outside the block: nothing more in it can be
                    // trusted. Count what is lost and hand it back.
                    self.rx.stats.rx_dropped += u64::from(cur.left);
                    tracing::warn!(port = %self.name, "corrupt ring block skipped");
                    self.release_block();
                }
            }
        }
        // Give a fully read block back now rather than on the next call, so
        // the kernel can fill it meanwhile.
        if matches!(self.cursor, Some(c) if c.left == 0) {
            self.release_block();
        }
        Ok(n)
    }

    /// One `sendmmsg` per batch (more only after a failure). Never blocks:
    /// a full socket buffer or device queue (`EAGAIN`, `ENOBUFS`) drops and
    /// counts frames in `tx_dropped`, as does a frame the kernel refuses
    /// (`EMSGSIZE`...). Always returns `Ok` with the number sent.
    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let total = pkts.len();
        if total == 0 {
            return Ok(0);
        }
        let tx = &mut self.tx;
        tx.iovs.clear();
        tx.msgs.clear();
        tx.iovs.extend(pkts.iter().map(|p| libc::iovec {
            iov_base: p.data().as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        }));
        let iov_base = tx.iovs.as_mut_ptr();
        for i in 0..total {
            // SAFETY: msghdr is plain data; all-zero (null pointers, zero
            // lengths) is a valid "no name, no control data" header.
            let mut msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
            // SAFETY: i < total == iovs.len(), so the pointer is in bounds.
            msg.msg_hdr.msg_iov = unsafe { iov_base.add(i) };
            msg.msg_hdr.msg_iovlen = 1;
            tx.msgs.push(msg);
        }
        let mut idx = 0;
        let mut sent = 0;
        let mut drop_rest = false;
        while idx < total {
            let chunk = (total - idx).min(libc::UIO_MAXIOV as usize);
            match sendmmsg(self.fd.as_raw_fd(), &mut tx.msgs[idx..idx + chunk]) {
                Ok(k) if k > 0 => {
                    for p in &pkts[idx..idx + k] {
                        self.rx.stats.tx_packets += 1;
                        self.rx.stats.tx_bytes += p.len() as u64;
                    }
                    idx += k;
                    sent += k;
                }
                Ok(_) => drop_rest = true,
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(0);
                    if errno == libc::EINTR {
                        continue;
                    }
                    if errno != self.last_tx_errno {
                        self.last_tx_errno = errno;
                        match errno {
                            libc::EAGAIN | libc::ENOBUFS => {
                                tracing::debug!(port = %self.name, "transmit queue full: {e}")
                            }
                            _ => tracing::warn!(port = %self.name, "transmit failed: {e}"),
                        }
                    }
                    match errno {
                        // The socket buffer or the device is unusable for
                        // now: retrying the rest would only spin.
                        libc::EAGAIN
                        | libc::ENETDOWN
                        | libc::ENXIO
                        | libc::ENODEV
                        | libc::EBADF => drop_rest = true,
                        // This frame only (EMSGSIZE, EINVAL, ENOBUFS from a
                        // single full backlog...): skip it, try the next.
                        _ => {
                            self.rx.stats.tx_dropped += 1;
                            idx += 1;
                        }
                    }
                }
            }
            if drop_rest {
                self.rx.stats.tx_dropped += (total - idx) as u64;
                break;
            }
        }
        if sent == total {
            self.last_tx_errno = 0;
        }
        tx.msgs.clear();
        tx.iovs.clear();
        done.append(pkts);
        Ok(sent)
    }

    /// `rx_dropped` includes kernel ring overflows (read from the socket
    /// on each call), truncated frames and unsegmentable oversize frames.
    fn stats(&self) -> PortStats {
        self.refresh_kernel_drops();
        let mut s = self.rx.stats.clone();
        s.rx_dropped += self.kernel_drops.get();
        s
    }

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        self.refresh_kernel_drops();
        let c = self.counters();
        vec![
            ("rx_drop_ring_full", c.kernel_drops),
            ("rx_drop_truncated", c.truncated),
            ("rx_drop_oversize", c.oversize_dropped),
            ("rx_csum_completed", c.csum_completed),
            ("rx_gso_frames", c.gso_frames),
            ("rx_gso_segments", c.gso_segments),
            ("rx_vlan_restored", c.vlan_restored),
        ]
    }

    /// The packet socket: readable when a ring block has been retired to
    /// us (full, or `block_timeout_ms` after its first frame).
    fn rx_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }
}

impl RxState {
    /// Turn one ring frame into switch frames: appended to `out` while
    /// `room` lasts, the rest queued in `pending`. Returns how many went to
    /// `out`.
    fn deliver(
        &mut self,
        hdr: &Tpacket3Hdr,
        data: &[u8],
        out: &mut Vec<PacketBuf>,
        room: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> usize {
        if hdr.tp_snaplen < hdr.tp_len {
            self.counters.truncated += 1;
            self.stats.rx_dropped += 1;
            return 0;
        }
        let tag = vlan_tag(hdr).filter(|_| data.len() >= ETH_ALEN2);
        let wire_len = data.len() + tag.map_or(0, |t| t.len());
        self.counters.max_frame_len = self.counters.max_frame_len.max(wire_len as u64);
        if tag.is_some() {
            self.counters.vlan_restored += 1;
        }
        let partial = hdr.tp_status & TP_STATUS_CSUMNOTREADY != 0;
        if partial {
            self.counters.csum_not_ready += 1;
        }
        let base_max = self.mtu + ETH_HLEN;
        if wire_len > base_max {
            // Possibly a super-frame: assembled in a scratch vector, not a
            // pool buffer, so that 64 KiB buffers never enter the pool.
            let mut big = std::mem::take(&mut self.big);
            big.clear();
            match tag {
                Some(t) => {
                    big.extend_from_slice(&data[..ETH_ALEN2]);
                    big.extend_from_slice(&t);
                    big.extend_from_slice(&data[ETH_ALEN2..]);
                }
                None => big.extend_from_slice(data),
            }
            let layout = parse::parse(&big).ok();
            let max_len = base_max + VLAN_HLEN * layout.map_or(0, |l| usize::from(l.n_vlan));
            let n = (big.len() > max_len)
                .then(|| self.deliver_oversize(&big, layout.as_ref(), out, room, pool));
            if big.capacity() > 1 << 17 {
                big = Vec::new(); // not a jumbo-GRO monster's worth forever
            }
            self.big = big;
            if let Some(n) = n {
                return n;
            }
        }
        let mut buf = match tag {
            Some(t) => fill(pool, &[&data[..ETH_ALEN2], &t, &data[ETH_ALEN2..]]),
            None => fill(pool, &[data]),
        };
        if partial {
            if let Ok(layout) = parse::parse(buf.data()) {
                if complete_l4_checksum(buf.data_mut(), &layout) {
                    self.counters.csum_completed += 1;
                }
            }
        }
        self.push(buf, out, room)
    }

    /// A frame longer than the MTU allows: TCP is segmented, anything else
    /// dropped and counted. Returns how many segments went to `out`.
    fn deliver_oversize(
        &mut self,
        frame: &[u8],
        layout: Option<&Layout>,
        out: &mut Vec<PacketBuf>,
        room: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> usize {
        let mut segs = std::mem::take(&mut self.segs);
        segs.clear();
        let ok = layout.is_some_and(|l| segment_tcp(frame, l, self.mtu, pool, &mut segs));
        let mut n = 0;
        if ok {
            self.counters.gso_frames += 1;
            self.counters.gso_segments += segs.len() as u64;
            self.counters.csum_completed += segs.len() as u64;
            for s in segs.drain(..) {
                n += self.push(s, out, room - n);
            }
        } else {
            self.counters.oversize_dropped += 1;
            self.stats.rx_dropped += 1;
            if !self.warned_oversize {
                self.warned_oversize = true;
                tracing::warn!(
                    port = %self.name,
                    len = frame.len(),
                    mtu = self.mtu,
                    "dropping frame longer than the MTU that is not TCP (GSO/GRO \
                     on the sender?); further drops are only counted"
                );
            }
        }
        self.segs = segs;
        n
    }

    fn push(&mut self, buf: PacketBuf, out: &mut Vec<PacketBuf>, room: usize) -> usize {
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += buf.len() as u64;
        if room > 0 {
            out.push(buf);
            1
        } else {
            self.pending.push_back(buf);
            0
        }
    }
}

impl Drop for AfPacketPort {
    fn drop(&mut self) {
        tracing::debug!(port = %self.name, "AF_PACKET port closed");
        // Fields drop next: the ring is unmapped, then the socket closed
        // (which also leaves promiscuous mode).
    }
}

// ---------------------------------------------------------------------------
// Frame fix-ups (pure functions, unit tested without root)
// ---------------------------------------------------------------------------

/// The tag the kernel took out of the frame, as the 4 bytes to insert
/// after the MAC addresses.
fn vlan_tag(hdr: &Tpacket3Hdr) -> Option<[u8; 4]> {
    let tci = hdr.hv1.tp_vlan_tci as u16;
    if hdr.tp_status & TP_STATUS_VLAN_VALID == 0 && tci == 0 {
        return None;
    }
    let tpid = if hdr.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 && hdr.hv1.tp_vlan_tpid != 0 {
        hdr.hv1.tp_vlan_tpid
    } else {
        ETHERTYPE_VLAN
    };
    let [a, b] = tpid.to_be_bytes();
    let [c, d] = tci.to_be_bytes();
    Some([a, b, c, d])
}

/// A buffer holding the concatenation of `parts`, taken from `pool` when
/// its buffer is big enough (a too-small one is dropped), else allocated.
fn fill(pool: &mut Vec<PacketBuf>, parts: &[&[u8]]) -> PacketBuf {
    if let Some(mut b) = pool.pop() {
        if fill_into(&mut b, parts) {
            return b;
        }
    }
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut b = PacketBuf::with_capacity(total.max(RX_BUF_CAPACITY));
    let ok = fill_into(&mut b, parts);
    debug_assert!(ok, "a buffer sized for the frame must hold it");
    b
}

fn fill_into(b: &mut PacketBuf, parts: &[&[u8]]) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return b.set_data(&[]);
    };
    let rest_len: usize = rest.iter().map(|p| p.len()).sum();
    if !b.set_data(first) || b.tailroom() < rest_len {
        return false;
    }
    let Some(mut tail) = b.extend_back(rest_len) else {
        return false;
    };
    for p in rest {
        let (head, t) = tail.split_at_mut(p.len());
        head.copy_from_slice(p);
        tail = t;
    }
    true
}

fn be16(d: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(d.get(off..off + 2)?.try_into().ok()?))
}

fn be32(d: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(off..off + 4)?.try_into().ok()?))
}

fn put16(d: &mut [u8], off: usize, v: u16) {
    d[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// TCP/UDP checksum over `frame[l4..end]` with the pseudo header of the IP
/// header described by `layout`; `None` when the pseudo header cannot be
/// built from this frame (not IP, IPv6 routing header with segments left).
fn l4_sum(frame: &[u8], layout: &Layout, proto: u8, l4: usize, end: usize) -> Option<u16> {
    let l3 = usize::from(layout.l3_offset);
    let seg = frame.get(l4..end)?;
    match layout.l3 {
        L3Kind::Ipv4 => {
            let src: [u8; 4] = frame.get(l3 + 12..l3 + 16)?.try_into().ok()?;
            let dst: [u8; 4] = frame.get(l3 + 16..l3 + 20)?.try_into().ok()?;
            Some(l4_checksum_ipv4(
                Ipv4Addr::from(src),
                Ipv4Addr::from(dst),
                proto,
                seg,
            ))
        }
        L3Kind::Ipv6 => {
            if nicflow_packet::ipv6::routing_segments_left(frame, layout)? != 0 {
                return None;
            }
            let src: [u8; 16] = frame.get(l3 + 8..l3 + 24)?.try_into().ok()?;
            let dst: [u8; 16] = frame.get(l3 + 24..l3 + 40)?.try_into().ok()?;
            Some(l4_checksum_ipv6(
                Ipv6Addr::from(src),
                Ipv6Addr::from(dst),
                proto,
                seg,
            ))
        }
        _ => None,
    }
}

/// Replace a partial (pseudo-header-only) TCP/UDP checksum by the full one.
/// Returns false, leaving the frame alone, when the frame is not TCP/UDP
/// over IPv4/IPv6, is a fragment, or does not match `layout`.
fn complete_l4_checksum(frame: &mut [u8], layout: &Layout) -> bool {
    if layout.is_fragment() {
        return false;
    }
    let l4 = usize::from(layout.l4_offset);
    let end = layout.l4_end();
    if end > frame.len() {
        return false;
    }
    let (proto, field, end) = match layout.l4 {
        L4Kind::Tcp => (nicflow_packet::IPPROTO_TCP, 16, end),
        L4Kind::Udp => {
            let ulen = be16(frame, l4 + 4).map_or(0, usize::from);
            if ulen < 8 || l4 + ulen > end {
                return false;
            }
            (nicflow_packet::IPPROTO_UDP, 6, l4 + ulen)
        }
        _ => return false,
    };
    if l4 + field + 2 > end {
        return false;
    }
    let old = be16(frame, l4 + field).unwrap_or(0);
    put16(frame, l4 + field, 0);
    match l4_sum(frame, layout, proto, l4, end) {
        Some(c) => {
            let c = if proto == nicflow_packet::IPPROTO_UDP {
                udp_fixup(c)
            } else {
                c
            };
            put16(frame, l4 + field, c);
            true
        }
        None => {
            put16(frame, l4 + field, old);
            false
        }
    }
}

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Split a TCP super-frame into frames of at most `mtu` bytes of IP
/// datagram, appended to `segs` with every header and checksum fixed.
/// Returns false (and appends nothing) when the frame is not an unfragmented
/// TCP segment over IPv4/IPv6 that `layout` describes.
fn segment_tcp(
    frame: &[u8],
    layout: &Layout,
    mtu: usize,
    pool: &mut Vec<PacketBuf>,
    segs: &mut Vec<PacketBuf>,
) -> bool {
    if layout.l4 != L4Kind::Tcp || layout.is_fragment() || !layout.is_ip() {
        return false;
    }
    let l3 = usize::from(layout.l3_offset);
    let l4 = usize::from(layout.l4_offset);
    let end = layout.l4_end();
    let Some(doff) = frame.get(l4 + 12).map(|b| usize::from(b >> 4) * 4) else {
        return false;
    };
    let hdr_end = l4 + doff;
    if doff < 20 || hdr_end > end || end > frame.len() {
        return false;
    }
    let ip_hdrs = l4 - l3;
    let mss = match mtu.checked_sub(ip_hdrs + doff) {
        Some(m) if m >= 8 => m,
        _ => return false,
    };
    let (Some(seq0), Some(id0)) = (be32(frame, l4 + 4), be16(frame, l3 + 4)) else {
        return false;
    };
    if layout.l3 == L3Kind::Ipv6
        && nicflow_packet::ipv6::routing_segments_left(frame, layout) != Some(0)
    {
        return false;
    }
    let flags0 = frame[l4 + 13];
    let payload = &frame[hdr_end..end];
    let n = payload.len().div_ceil(mss).max(1);
    let first = segs.len();
    for i in 0..n {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        let mut b = fill(pool, &[&frame[..hdr_end], chunk]);
        let d = b.data_mut();
        let ip_len = ip_hdrs + doff + chunk.len();
        if layout.l3 == L3Kind::Ipv4 {
            put16(d, l3 + 2, ip_len as u16);
            put16(d, l3 + 4, id0.wrapping_add(i as u16));
            put16(d, l3 + 10, 0);
            let c = checksum(&d[l3..l4]);
            put16(d, l3 + 10, c);
        } else {
            put16(d, l3 + 4, (ip_len - 40) as u16);
        }
        d[l4 + 4..l4 + 8].copy_from_slice(&seq0.wrapping_add((i * mss) as u32).to_be_bytes());
        let mut flags = flags0;
        if i > 0 {
            flags &= !TCP_CWR;
        }
        if i + 1 < n {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        d[l4 + 13] = flags;
        put16(d, l4 + 16, 0);
        let total = d.len();
        match l4_sum(d, layout, nicflow_packet::IPPROTO_TCP, l4, total) {
            Some(c) => put16(d, l4 + 16, c),
            None => {
                segs.truncate(first);
                return false;
            }
        }
        segs.push(b);
    }
    true
}

// ---------------------------------------------------------------------------
// Offloads
// ---------------------------------------------------------------------------

/// Turn off receive aggregation (GRO, hardware GRO, LRO), segmentation
/// offloads (TSO of every flavour, USO, GSO) and checksum offloads on
/// `ifname`, like `ethtool -K <if> gro off lro off tso off gso off tx off
/// rx off`, so that frames received there are wire-sized with complete
/// checksums. Needs `CAP_NET_ADMIN` in the interface's network namespace.
///
/// Uses `ETHTOOL_SFEATURES` on the features named by the kernel
/// (`ETH_SS_FEATURES` strings), because the legacy per-feature commands
/// miss newer bits: on Linux 6.18 `ETHTOOL_STSO` leaves
/// `tx-tcp-accecn-segmentation` on. Falls back to the legacy `ETHTOOL_S*`
/// commands (`ethtool_value`) on kernels without it; there every setting is
/// attempted and the first failure returned. Features the device cannot
/// change ("fixed") are not an error.
///
/// On a veth this only shapes what the switch end itself aggregates and
/// sends from the host stack: frames from the peer keep the peer's
/// offloads (see the module docs for how those are handled).
pub fn disable_offloads(ifname: &str) -> Result<(), AfPacketError> {
    validate_ifname(ifname)?;
    let sock = control_socket()
        .map_err(|e| AfPacketError::sys("socket(AF_INET, SOCK_DGRAM)", ifname, e))?;
    let fd = sock.as_raw_fd();
    match disable_offload_features(fd, ifname) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
            ) =>
        {
            disable_offloads_legacy(fd, ifname)
        }
        Err(e) => Err(AfPacketError::sys(
            "ioctl(SIOCETHTOOL, ETHTOOL_SFEATURES)",
            ifname,
            e,
        )),
    }
}

/// Is the kernel feature called `name` one [`disable_offloads`] turns off?
fn is_offload_feature(name: &str) -> bool {
    (name.starts_with("rx-") && name.contains("gro"))
        || name == "rx-lro"
        || name == "rx-checksum"
        || name.starts_with("tx-checksum-")
        || name == "tx-generic-segmentation"
        || (name.starts_with("tx-tcp") && name.ends_with("segmentation"))
        || name == "tx-udp-segmentation"
}

fn disable_offload_features(fd: RawFd, ifname: &str) -> io::Result<()> {
    let names = feature_names(fd, ifname)?;
    let blocks = names.len().div_ceil(32);
    // struct ethtool_sfeatures { u32 cmd; u32 size; struct
    // ethtool_set_features_block { u32 valid; u32 requested; } features[]; }
    let mut buf = vec![0u8; 8 + 8 * blocks];
    buf[0..4].copy_from_slice(&ETHTOOL_SFEATURES.to_ne_bytes());
    buf[4..8].copy_from_slice(&(blocks as u32).to_ne_bytes());
    for (i, _) in names
        .iter()
        .enumerate()
        .filter(|(_, n)| is_offload_feature(n))
    {
        let at = 8 + 8 * (i / 32);
        let mut valid = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default());
        valid |= 1 << (i % 32);
        buf[at..at + 4].copy_from_slice(&valid.to_ne_bytes());
        // `requested` stays 0: off.
    }
    // A positive result only flags features the device cannot change.
    ethtool_raw(fd, ifname, &mut buf).map(drop)
}

/// The kernel's feature names, in bit order (`ETH_SS_FEATURES`).
fn feature_names(fd: RawFd, ifname: &str) -> io::Result<Vec<String>> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask;
    // u32 data[]; }
    let mut info = vec![0u8; 20];
    info[0..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    info[8..16].copy_from_slice(&(1u64 << ETH_SS_FEATURES).to_ne_bytes());
    ethtool_raw(fd, ifname, &mut info)?;
    let mask = u64::from_ne_bytes(info[8..16].try_into().unwrap_or_default());
    if mask & (1 << ETH_SS_FEATURES) == 0 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    let count = u32::from_ne_bytes(info[16..20].try_into().unwrap_or_default()) as usize;
    if count == 0 || count > 4096 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    // The kernel writes as many strings as *it* counts, so leave slack.
    let room = count + 64;
    let mut strings = vec![0u8; 12 + room * ETH_GSTRING_LEN];
    strings[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    strings[4..8].copy_from_slice(&ETH_SS_FEATURES.to_ne_bytes());
    strings[8..12].copy_from_slice(&(count as u32).to_ne_bytes());
    ethtool_raw(fd, ifname, &mut strings)?;
    let len = u32::from_ne_bytes(strings[8..12].try_into().unwrap_or_default()) as usize;
    Ok(strings[12..]
        .chunks_exact(ETH_GSTRING_LEN)
        .take(len.min(room))
        .map(|s| {
            let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        })
        .collect())
}

fn disable_offloads_legacy(fd: RawFd, ifname: &str) -> Result<(), AfPacketError> {
    let mut first_err = None;
    let mut note = |op: &'static str, r: io::Result<()>| {
        if let Err(e) = r {
            if first_err.is_none() {
                first_err = Some(AfPacketError::sys(op, ifname, e));
            }
        }
    };
    // Turning rx checksumming off also drops hardware GRO.
    for (cmd, op) in [
        (ETHTOOL_SGRO, "ioctl(SIOCETHTOOL, ETHTOOL_SGRO=0)"),
        (ETHTOOL_STSO, "ioctl(SIOCETHTOOL, ETHTOOL_STSO=0)"),
        (ETHTOOL_SGSO, "ioctl(SIOCETHTOOL, ETHTOOL_SGSO=0)"),
        (ETHTOOL_STXCSUM, "ioctl(SIOCETHTOOL, ETHTOOL_STXCSUM=0)"),
        (ETHTOOL_SRXCSUM, "ioctl(SIOCETHTOOL, ETHTOOL_SRXCSUM=0)"),
    ] {
        note(op, ethtool_value(fd, ifname, cmd, 0).map(drop));
    }
    // LRO lives in the legacy flags word; only write it when it is on.
    match ethtool_value(fd, ifname, ETHTOOL_GFLAGS, 0) {
        Ok(flags) if flags & ETH_FLAG_LRO != 0 => note(
            "ioctl(SIOCETHTOOL, ETHTOOL_SFLAGS ~LRO)",
            ethtool_value(fd, ifname, ETHTOOL_SFLAGS, flags & !ETH_FLAG_LRO).map(drop),
        ),
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
        Err(e) => note("ioctl(SIOCETHTOOL, ETHTOOL_GFLAGS)", Err(e)),
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// System calls: each unsafe block is small and documented.
// ---------------------------------------------------------------------------

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 && (p as usize).is_power_of_two() {
        p as usize
    } else {
        4096
    }
}

fn validate_ifname(name: &str) -> Result<(), AfPacketError> {
    let bad = |reason| {
        Err(AfPacketError::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() >= libc::IFNAMSIZ {
        return bad("longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("reserved");
    }
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
    {
        return bad("contains '/', ':', NUL or whitespace");
    }
    Ok(())
}

fn if_index(ifname: &str) -> Result<i32, AfPacketError> {
    let c = CString::new(ifname).map_err(|_| AfPacketError::InvalidName {
        name: ifname.to_string(),
        reason: "contains NUL",
    })?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(AfPacketError::NoSuchInterface {
            ifname: ifname.to_string(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(idx as i32)
}

fn owned_fd(r: libc::c_int) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` is a descriptor the kernel just returned to us; nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call, no pointers.
    owned_fd(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })
}

fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call, no pointers.
    owned_fd(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

/// `setsockopt` with a plain-data value.
fn setsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to an initialized `T` of exactly the length passed;
    // the kernel only reads it during the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn bind_packet(fd: RawFd, ifindex: i32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is an initialized sockaddr_ll and the length matches it.
    let r = unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An `ifreq` naming `ifname` (which `validate_ifname` has checked fits
/// with its NUL).
fn ifreq(ifname: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data (a name array and a union of integers and
    // pointers); all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr
}

fn if_ioctl(fd: RawFd, req: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: `ifr` is a valid, writable ifreq for the duration of the call;
    // the requests used here (SIOCGIFMTU, SIOCGIFFLAGS, SIOCETHTOOL) read and
    // write nothing beyond it, except SIOCETHTOOL's `ifru_data`, which the
    // caller points at a live ethtool_value.
    let r = unsafe { libc::ioctl(fd, req as _, ifr as *mut libc::ifreq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One legacy ethtool command carrying an `ethtool_value`; returns the value
/// the kernel left in it.
fn ethtool_value(fd: RawFd, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut v = EthtoolValue { cmd, data };
    let mut ifr = ifreq(ifname);
    ifr.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
    if_ioctl(fd, libc::SIOCETHTOOL, &mut ifr)?;
    Ok(v.data)
}

/// An ethtool command whose variable-length argument struct the caller laid
/// out in `buf` (native endian, command first).
fn ethtool_raw(fd: RawFd, ifname: &str, buf: &mut [u8]) -> io::Result<libc::c_int> {
    let mut ifr = ifreq(ifname);
    ifr.ifr_ifru.ifru_data = buf.as_mut_ptr().cast();
    // SAFETY: `ifr` is a valid ifreq whose `ifru_data` points at `buf`,
    // which the callers size for everything the command reads and writes
    // (the lengths inside it say so; see `feature_names` for the slack).
    let r = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL as _, &mut ifr as *mut libc::ifreq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn sendmmsg(fd: RawFd, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: every header points at one iovec describing a live frame
    // buffer (see `send_batch`), and `msgs.len()` headers are valid.
    let r = unsafe {
        libc::sendmmsg(
            fd,
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// The memory-mapped TPACKET_V3 receive ring: `blocks` blocks of
/// `block_size` bytes, each starting with a `tpacket_block_desc`.
///
/// Ownership protocol: a block belongs to the kernel while its
/// `block_status` is `TP_STATUS_KERNEL`; the kernel fills it, then stores a
/// status with `TP_STATUS_USER` after a write barrier. We read that status
/// with acquire ordering, read the frames (the kernel does not touch the
/// block meanwhile), and hand it back by storing `TP_STATUS_KERNEL` with
/// release ordering after we are done reading.
struct Ring {
    base: NonNull<u8>,
    len: usize,
    block_size: usize,
    blocks: usize,
}

// SAFETY: the mapping is owned exclusively by this value (no other handle
// to it exists in the process), so moving it to another thread is sound.
unsafe impl Send for Ring {}

impl Ring {
    fn map(fd: RawFd, block_size: usize, blocks: usize) -> io::Result<Ring> {
        let len = block_size * blocks;
        // SAFETY: a new shared mapping of the socket's ring at an address of
        // the kernel's choosing; it overlaps no existing Rust object, and its
        // length is exactly what PACKET_RX_RING configured.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Ring {
            base,
            len,
            block_size,
            blocks,
        })
    }

    fn block(&self, i: usize) -> *mut u8 {
        assert!(i < self.blocks);
        // SAFETY: i < blocks, so the offset is inside the mapping.
        unsafe { self.base.as_ptr().add(i * self.block_size) }
    }

    /// The block's `block_status`, shared with the kernel.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the field is inside the mapping (blocks are at least a page
        // long), 4-byte aligned (blocks are page aligned, the offset is 8),
        // lives as long as `self`, and is only accessed atomically by us;
        // AtomicU32 has u32's layout.
        unsafe { AtomicU32::from_ptr(self.block(i).add(BLOCK_STATUS_OFFSET).cast()) }
    }

    /// Number of frames in a user-owned block and the offset of the first.
    fn block_frames(&self, i: usize) -> (u32, u32) {
        // SAFETY: the descriptor is at the (page-aligned) block start, inside
        // the mapping; the block is user-owned (status read with acquire), so
        // the kernel is not writing it.
        let d = unsafe { std::ptr::read(self.block(i).cast::<TpacketBlockDesc>()) };
        (d.bh1.num_pkts, d.bh1.offset_to_first_pkt)
    }

    /// The frame header at `off` in user-owned block `i` and the captured
    /// bytes, or `None` if the offsets point outside the block.
    fn frame(&self, i: usize, off: usize) -> Option<(Tpacket3Hdr, &[u8])> {
        let bs = self.block_size;
        if off & 3 != 0 || off.checked_add(size_of::<Tpacket3Hdr>())? > bs {
            return None;
        }
        let block = self.block(i);
        // SAFETY: the header lies within the block (checked above) and is
        // 4-byte aligned (the block is page aligned, `off` a multiple of 4);
        // the block is user-owned, so the kernel is not writing it.
        let hdr = unsafe { std::ptr::read(block.add(off).cast::<Tpacket3Hdr>()) };
        let start = off.checked_add(usize::from(hdr.tp_mac))?;
        let end = start.checked_add(hdr.tp_snaplen as usize)?;
        if end > bs {
            return None;
        }
        // SAFETY: [start, end) lies within the block (checked); the block
        // stays user-owned, unmodified, until `release`, which callers only
        // do after they have copied these bytes.
        let data = unsafe { std::slice::from_raw_parts(block.add(start), end - start) };
        Some((hdr, data))
    }

    fn release(&self, i: usize) {
        self.status(i).store(TP_STATUS_KERNEL, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe the mapping created in `map`, and no
        // reference into it outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_packet::builder::{all_checksums_valid, FrameBuilder};
    use nicflow_packet::checksum::verify_l4;

    const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
    const V4A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const V4B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn abi_sizes_match_the_kernel() {
        // Sizes from the kernel's uapi headers (x86_64 and every LP64/ILP32
        // Linux target: the structs only hold fixed-width fields).
        assert_eq!(size_of::<TpacketReq3>(), 28);
        assert_eq!(size_of::<TpacketHdrVariant1>(), 12);
        assert_eq!(size_of::<Tpacket3Hdr>(), 48);
        assert_eq!(size_of::<TpacketHdrV1>(), 40);
        assert_eq!(size_of::<TpacketBlockDesc>(), 48);
        assert_eq!(size_of::<TpacketStatsV3>(), 12);
        assert_eq!(size_of::<PacketMreq>(), 16);
        assert_eq!(size_of::<EthtoolValue>(), 8);
        assert_eq!(size_of::<libc::sockaddr_ll>(), 20);
        assert_eq!(
            TPACKET3_HDRLEN as usize,
            size_of::<Tpacket3Hdr>().next_multiple_of(16) + size_of::<libc::sockaddr_ll>()
        );
        // And against the libc crate's independent definitions.
        assert_eq!(size_of::<TpacketReq3>(), size_of::<libc::tpacket_req3>());
        assert_eq!(size_of::<Tpacket3Hdr>(), size_of::<libc::tpacket3_hdr>());
        assert_eq!(size_of::<TpacketHdrV1>(), size_of::<libc::tpacket_hdr_v1>());
        assert_eq!(
            size_of::<TpacketBlockDesc>(),
            size_of::<libc::tpacket_block_desc>()
        );
        assert_eq!(
            size_of::<TpacketStatsV3>(),
            size_of::<libc::tpacket_stats_v3>()
        );
        assert_eq!(size_of::<PacketMreq>(), size_of::<libc::packet_mreq>());
        assert_eq!(TPACKET3_HDRLEN as usize, libc::TPACKET3_HDRLEN);
    }

    #[test]
    fn abi_field_offsets() {
        let d = TpacketBlockDesc::default();
        let base = &d as *const _ as usize;
        assert_eq!(
            &d.bh1.block_status as *const _ as usize - base,
            BLOCK_STATUS_OFFSET
        );
        assert_eq!(&d.bh1.num_pkts as *const _ as usize - base, 12);
        assert_eq!(&d.bh1.offset_to_first_pkt as *const _ as usize - base, 16);
        assert_eq!(&d.bh1.seq_num as *const _ as usize - base, 24);
        let h = Tpacket3Hdr::default();
        let base = &h as *const _ as usize;
        assert_eq!(&h.tp_snaplen as *const _ as usize - base, 12);
        assert_eq!(&h.tp_status as *const _ as usize - base, 20);
        assert_eq!(&h.tp_mac as *const _ as usize - base, 24);
        assert_eq!(&h.hv1.tp_vlan_tci as *const _ as usize - base, 32);
        assert_eq!(&h.hv1.tp_vlan_tpid as *const _ as usize - base, 36);
        assert_eq!(
            TPACKET_V3,
            libc::tpacket_versions::TPACKET_V3 as libc::c_int
        );
        assert_eq!(TP_STATUS_CSUMNOTREADY, libc::TP_STATUS_CSUMNOTREADY);
        assert_eq!(TP_STATUS_VLAN_VALID, libc::TP_STATUS_VLAN_VALID);
        assert_eq!(TP_STATUS_VLAN_TPID_VALID, libc::TP_STATUS_VLAN_TPID_VALID);
        assert_eq!(PACKET_IGNORE_OUTGOING, libc::PACKET_IGNORE_OUTGOING);
        assert_eq!(PACKET_QDISC_BYPASS, libc::PACKET_QDISC_BYPASS);
        assert_eq!(SOL_PACKET, libc::SOL_PACKET);
        assert_eq!(i32::from(ETH_P_ALL), libc::ETH_P_ALL);
    }

    #[test]
    fn default_options_are_valid() {
        let o = AfPacketOptions::default();
        o.validate().unwrap();
        assert!(o.promisc && o.disable_offloads);
        let r = o.ring_request();
        assert_eq!(r.tp_frame_nr, 64 * 64);
        assert!(
            o.block_size as usize > 65535 + 256,
            "a GSO frame must fit a block"
        );
    }

    #[test]
    fn option_validation() {
        let ok = AfPacketOptions::default();
        let cases = [
            AfPacketOptions {
                block_size: 0,
                ..ok.clone()
            },
            AfPacketOptions {
                block_size: 3 * 4096,
                ..ok.clone()
            },
            AfPacketOptions {
                block_size: 1024,
                frame_size: 1024,
                ..ok.clone()
            },
            AfPacketOptions {
                block_count: 0,
                ..ok.clone()
            },
            AfPacketOptions {
                frame_size: 64,
                ..ok.clone()
            },
            AfPacketOptions {
                frame_size: 2050,
                ..ok.clone()
            },
            AfPacketOptions {
                frame_size: 256 * 1024,
                ..ok.clone()
            },
            AfPacketOptions {
                block_size: 1 << 22,
                block_count: 1024,
                ..ok.clone()
            },
            AfPacketOptions {
                block_timeout_ms: 60_000,
                ..ok.clone()
            },
        ];
        for c in cases {
            let e = c.validate().expect_err(&format!("{c:?} must be refused"));
            assert!(matches!(e, AfPacketError::InvalidOptions(_)), "{e}");
        }
        AfPacketOptions {
            block_size: 4096,
            block_count: 1,
            frame_size: 2048,
            ..ok.clone()
        }
        .validate()
        .unwrap();
        AfPacketOptions {
            block_timeout_ms: 0,
            ..ok
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn interface_names() {
        for bad in ["", "a/b", "a b", "0123456789abcdef", "..", "a:1"] {
            assert!(
                matches!(validate_ifname(bad), Err(AfPacketError::InvalidName { .. })),
                "{bad:?}"
            );
        }
        validate_ifname("nfap123456ab").unwrap();
        validate_ifname("012345678901234").unwrap();
        let e = AfPacketPort::open("a/b", AfPacketOptions::default())
            .err()
            .unwrap();
        assert!(e.to_string().contains("a/b"), "{e}");
        let e = AfPacketPort::open(
            "nfap-none0",
            AfPacketOptions {
                block_count: 0,
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert!(matches!(e, AfPacketError::InvalidOptions(_)), "{e}");
    }

    #[test]
    fn missing_interface_is_reported_with_its_name() {
        let e = AfPacketPort::open("nfapnosuch0", AfPacketOptions::default())
            .err()
            .unwrap();
        assert!(matches!(e, AfPacketError::NoSuchInterface { .. }), "{e}");
        assert!(e.to_string().contains("nfapnosuch0"), "{e}");
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    }

    fn hdr_with(status: u32, tci: u32, tpid: u16) -> Tpacket3Hdr {
        Tpacket3Hdr {
            tp_status: status,
            hv1: TpacketHdrVariant1 {
                tp_vlan_tci: tci,
                tp_vlan_tpid: tpid,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn vlan_tag_from_metadata() {
        assert_eq!(vlan_tag(&hdr_with(TP_STATUS_USER, 0, 0)), None);
        // Valid with TCI 0 (priority-tagged) still gets a tag.
        assert_eq!(
            vlan_tag(&hdr_with(TP_STATUS_VLAN_VALID, 0, 0)),
            Some([0x81, 0x00, 0, 0])
        );
        assert_eq!(
            vlan_tag(&hdr_with(TP_STATUS_VLAN_VALID, 0x6064, 0)),
            Some([0x81, 0x00, 0x60, 0x64])
        );
        assert_eq!(
            vlan_tag(&hdr_with(
                TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID,
                100,
                0x88a8
            )),
            Some([0x88, 0xa8, 0, 100])
        );
    }

    #[test]
    fn deliver_reinserts_vlan_and_completes_checksum() {
        let tagged = FrameBuilder::new(MAC_A, MAC_B)
            .vlan(0x2064)
            .ipv4(V4A, V4B)
            .udp(1000, 2000)
            .payload(b"hello")
            .build();
        // What the ring holds: the tag removed, a partial checksum (the
        // pseudo-header sum, as CHECKSUM_PARTIAL leaves it).
        let mut ring = tagged.clone();
        ring.drain(12..16);
        let l = parse::parse(&ring).unwrap();
        let l4 = usize::from(l.l4_offset);
        put16(&mut ring, l4 + 6, 0x1234);
        let mut rx = rx_state(1500);
        let mut hdr = hdr_with(TP_STATUS_VLAN_VALID | TP_STATUS_CSUMNOTREADY, 0x2064, 0);
        hdr.tp_len = ring.len() as u32;
        hdr.tp_snaplen = ring.len() as u32;
        let (mut out, mut pool) = (Vec::new(), vec![PacketBuf::with_capacity(64)]);
        assert_eq!(rx.deliver(&hdr, &ring, &mut out, 32, &mut pool), 1);
        assert_eq!(out[0].data(), &tagged[..]);
        assert!(all_checksums_valid(out[0].data()));
        assert_eq!(rx.counters.vlan_restored, 1);
        assert_eq!(rx.counters.csum_completed, 1);
        assert_eq!(
            (rx.stats.rx_packets, rx.stats.rx_bytes),
            (1, tagged.len() as u64)
        );

        // Truncated by the ring: dropped and counted.
        hdr.tp_len += 10;
        assert_eq!(rx.deliver(&hdr, &ring, &mut out, 32, &mut pool), 0);
        assert_eq!((rx.stats.rx_dropped, rx.counters.truncated), (1, 1));
    }

    fn rx_state(mtu: usize) -> RxState {
        RxState {
            name: "test".into(),
            mtu,
            stats: PortStats::default(),
            counters: AfPacketCounters::default(),
            pending: VecDeque::new(),
            segs: Vec::new(),
            big: Vec::new(),
            warned_oversize: false,
        }
    }

    #[test]
    fn complete_checksum_tcp_udp_v4_v6() {
        let frames = [
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv4(V4A, V4B)
                .tcp(1, 2, 0x18)
                .payload(&[7; 101])
                .build(),
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
                .udp(1, 2)
                .payload(&[9; 33])
                .build(),
            FrameBuilder::new(MAC_A, MAC_B)
                .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
                .ipv6_hop_by_hop(0)
                .tcp(1, 2, 0x10)
                .payload(&[3; 7])
                .build(),
        ];
        for good in frames {
            let l = parse::parse(&good).unwrap();
            let field = usize::from(l.l4_offset) + if l.l4 == L4Kind::Tcp { 16 } else { 6 };
            let mut f = good.clone();
            put16(&mut f, field, 0xbeef);
            assert_eq!(verify_l4(&f, &l), Some(false));
            assert!(complete_l4_checksum(&mut f, &l));
            assert_eq!(f, good);
        }
        // ICMP and fragments are left alone.
        let icmp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .icmp(8, 0)
            .echo(1, 1)
            .build();
        let mut f = icmp.clone();
        assert!(!complete_l4_checksum(&mut f, &parse::parse(&icmp).unwrap()));
        assert_eq!(f, icmp);
        let frag = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .ipv4_fragment(0, true)
            .udp(1, 2)
            .payload(&[1; 16])
            .build();
        let mut f = frag.clone();
        assert!(!complete_l4_checksum(&mut f, &parse::parse(&frag).unwrap()));
        assert_eq!(f, frag);
    }

    fn check_segments(big: &[u8], mtu: usize, segs: &[PacketBuf]) {
        let l = parse::parse(big).unwrap();
        let l3 = usize::from(l.l3_offset);
        let l4 = usize::from(l.l4_offset);
        let doff = usize::from(big[l4 + 12] >> 4) * 4;
        let payload = &big[l4 + doff..l.l4_end()];
        let mut joined = Vec::new();
        let seq0 = be32(big, l4 + 4).unwrap();
        for (i, s) in segs.iter().enumerate() {
            let d = s.data();
            let sl = parse::parse(d).unwrap();
            assert_eq!(
                sl,
                Layout {
                    l4_len: sl.l4_len,
                    ..l
                },
                "segment {i} layout"
            );
            assert!(
                d.len() - l3 <= mtu,
                "segment {i}: {} > mtu {mtu}",
                d.len() - l3
            );
            assert!(all_checksums_valid(d), "segment {i} checksums");
            assert_eq!(verify_l4(d, &sl), Some(true));
            assert_eq!(
                &d[..l4 + 4],
                &{
                    // Headers equal the original's but for lengths/ids/checksums.
                    let mut h = big[..l4 + 4].to_vec();
                    h[..l3].copy_from_slice(&d[..l3]);
                    if l.l3 == L3Kind::Ipv4 {
                        h[l3 + 2..l3 + 6].copy_from_slice(&d[l3 + 2..l3 + 6]);
                        h[l3 + 10..l3 + 12].copy_from_slice(&d[l3 + 10..l3 + 12]);
                        let id0 = be16(big, l3 + 4).unwrap();
                        assert_eq!(be16(d, l3 + 4).unwrap(), id0.wrapping_add(i as u16));
                    } else {
                        h[l3 + 4..l3 + 6].copy_from_slice(&d[l3 + 4..l3 + 6]);
                    }
                    h
                }[..]
            );
            let seq = be32(d, l4 + 4).unwrap();
            assert_eq!(seq, seq0.wrapping_add(joined.len() as u32));
            let flags = d[l4 + 13];
            let last = i + 1 == segs.len();
            assert_eq!(
                flags & (TCP_FIN | TCP_PSH) != 0,
                last && big[l4 + 13] & (TCP_FIN | TCP_PSH) != 0
            );
            assert_eq!(flags & TCP_CWR != 0, i == 0 && big[l4 + 13] & TCP_CWR != 0);
            joined.extend_from_slice(&d[l4 + doff..sl.l4_end()]);
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn segment_tcp_ipv4_and_ipv6() {
        let payload: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let ts_opt = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        let v4 = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .ident(0xfffe)
            .dont_fragment()
            .tcp(40000, 5201, 0x80 | 0x18 | 0x01)
            .tcp_seq(0xffff_f000)
            .tcp_options(&ts_opt)
            .payload(&payload)
            .build();
        let v6f = FrameBuilder::new(MAC_A, MAC_B)
            .vlan(7)
            .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
            .tcp(40000, 5201, 0x10)
            .payload(&payload[..4000])
            .build();
        for (big, mtu, expect) in [(&v4, 1500, 20_000usize.div_ceil(1448)), (&v6f, 1280, 4)] {
            let l = parse::parse(big).unwrap();
            let (mut pool, mut segs) = (Vec::new(), Vec::new());
            assert!(segment_tcp(big, &l, mtu, &mut pool, &mut segs));
            assert_eq!(segs.len(), expect);
            check_segments(big, mtu, &segs);
        }
        // Not TCP: refused, nothing produced.
        let udp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .udp(1, 2)
            .payload(&payload[..3000])
            .build();
        let mut segs = Vec::new();
        assert!(!segment_tcp(
            &udp,
            &parse::parse(&udp).unwrap(),
            1500,
            &mut Vec::new(),
            &mut segs
        ));
        assert!(segs.is_empty());
    }

    #[test]
    fn deliver_splits_super_frames_across_calls() {
        let payload = vec![0x5a; 30_000];
        let big = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .tcp(1, 2, 0x18)
            .payload(&payload)
            .build();
        let mut rx = rx_state(1500);
        let mut hdr = hdr_with(TP_STATUS_CSUMNOTREADY, 0, 0);
        hdr.tp_len = big.len() as u32;
        hdr.tp_snaplen = hdr.tp_len;
        let (mut out, mut pool) = (Vec::new(), Vec::new());
        assert_eq!(rx.deliver(&hdr, &big, &mut out, 8, &mut pool), 8);
        let expect = 30_000usize.div_ceil(1460);
        assert_eq!(rx.pending.len(), expect - 8);
        out.extend(rx.pending.drain(..));
        check_segments(&big, 1500, &out);
        assert_eq!(rx.counters.gso_frames, 1);
        assert_eq!(rx.counters.gso_segments, expect as u64);
        assert_eq!(rx.stats.rx_packets, expect as u64);

        // An oversize UDP datagram cannot be segmented: dropped, counted.
        let udp = FrameBuilder::new(MAC_A, MAC_B)
            .ipv4(V4A, V4B)
            .udp(1, 2)
            .payload(&payload[..3000])
            .build();
        hdr.tp_len = udp.len() as u32;
        hdr.tp_snaplen = hdr.tp_len;
        assert_eq!(rx.deliver(&hdr, &udp, &mut out, 8, &mut pool), 0);
        assert_eq!((rx.counters.oversize_dropped, rx.stats.rx_dropped), (1, 1));
    }

    #[test]
    fn offload_feature_names() {
        for on in [
            "rx-gro",
            "rx-gro-hw",
            "rx-gro-list",
            "rx-udp-gro-forwarding",
            "rx-lro",
            "rx-checksum",
            "tx-checksum-ip-generic",
            "tx-checksum-sctp",
            "tx-generic-segmentation",
            "tx-tcp-segmentation",
            "tx-tcp6-segmentation",
            "tx-tcp-accecn-segmentation",
            "tx-tcp-mangleid-segmentation",
            "tx-udp-segmentation",
        ] {
            assert!(is_offload_feature(on), "{on}");
        }
        for off in [
            "tx-scatter-gather",
            "rx-vlan-hw-parse",
            "tx-vlan-hw-insert",
            "highdma",
            "rx-fcs",
            "tx-gre-segmentation",
        ] {
            assert!(!is_offload_feature(off), "{off}");
        }
    }

    #[test]
    fn port_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<AfPacketPort>();
    }

    #[test]
    fn fill_reuses_or_allocates() {
        let mut pool = vec![PacketBuf::with_capacity(8)];
        let b = fill(&mut pool, &[b"abc", b"de"]);
        assert_eq!(b.data(), b"abcde");
        assert!(pool.is_empty());
        // Too small: a fresh, pool-sized buffer instead.
        let mut pool = vec![PacketBuf::with_capacity(4)];
        let b = fill(&mut pool, &[b"abc", b"defgh"]);
        assert_eq!(b.data(), b"abcdefgh");
        assert!(b.capacity() >= RX_BUF_CAPACITY);
        let b = fill(&mut Vec::new(), &[]);
        assert!(b.is_empty());
    }
}
