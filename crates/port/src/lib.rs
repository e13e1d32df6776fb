//! nicflow-port: where frames enter and leave a bridge.
//!
//! Place in the packet's path: first and last. A port receives frames from
//! a Linux interface (or a capture, or memory) in batches for the fast path
//! above it, and transmits what the fast path decided. The crate sits above
//! `nicflow-os` and `nicflow-api` and below the dataplane (datapath,
//! ofproto, the kernel engines, the bridge), which it never names: a port
//! is opened from its configuration by [`open`], the factory, and the BPF
//! programs a port owns (the AF_XDP redirect, the TC upcall) are built and
//! attached here ([`attach`]).
//!
//! A port owns its receive and transmit rings and moves frames in batches:
//! `recv_batch` fills a vector of [`PacketBuf`]s for the fast path, and
//! `send_batch` drains the frames the fast path decided to transmit on it.
//! Implementations here: [`mem`] (in-memory queues for tests and benches) and
//! [`pcap`] (read a capture as the receive side, write the transmit side to a
//! capture tshark can read).
//!
//! A port never names the offload engines above it: it describes its
//! kernel attachment as data ([`Port::offload_hook`], [`hook`]).
//!
//! [`tc`] ports leave the interface's offloads alone: the bridge's TC
//! engine runs on it, and misses reach the port through an upcall veth.
//!
//! [`tunnel`] ports (VXLAN, Geneve) encapsulate onto an underlay interface
//! they share and decapsulate what arrives on it; with IPsec, [`ipsec`]
//! encrypts what they send and decrypts ESP before the underlay looks for
//! a tunnel header.
//!
//! The two real-interface ports, [`afpacket`] and [`afxdp`], share `fixup`
//! (what they do to a received frame before the switch sees it: checksum
//! completion, TCP segmentation, copying into pooled buffers) and `sys`
//! (the system calls they open an interface with: names, ioctls, ethtool
//! offloads, socket options, mappings).

pub mod afpacket;
pub mod afxdp;
pub mod attach;
mod factory;
pub use factory::open;
mod fixup;
pub mod ipsec;
pub use fixup::{complete_checksum, finish_offloads, Finished};
pub mod hook;
pub use hook::OffloadHook;
pub mod mem;
pub mod patch;
pub mod pcap;
pub mod pin;
pub mod qdisc;
pub(crate) mod sealer;
pub mod state;
mod sys;
pub use sys::SavedFeatures;
pub mod tap;
pub mod tc;
pub mod tunnel;

use nicflow_packet::buf::PacketBuf;
use std::io;

/// Counters every port keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames the port could not transmit (queue full, write error).
    pub tx_dropped: u64,
    /// Frames the port could not receive (too big for a buffer...).
    pub rx_dropped: u64,
}

pub trait Port {
    /// The port's name as rules and the CLI refer to it.
    fn name(&self) -> &str;
    /// Append up to `max` received frames to `out`, filling buffers taken
    /// from `pool` when it has any. Returns how many.
    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize>;
    /// Transmit every frame in `pkts`, draining it; buffers no longer needed
    /// go to `done` for reuse. Frames that could not be sent are counted in
    /// `tx_dropped`. Returns how many were sent.
    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize>;
    fn stats(&self) -> PortStats;
    /// True when the receive side will never produce more frames (end of a
    /// capture file); lets offline runs terminate.
    fn rx_exhausted(&self) -> bool {
        false
    }
    /// Port-specific counters, by name: drops by reason (`rx_drop_*`,
    /// `tx_drop_*`) and work the port did (checksums completed, segments
    /// cut...). Shown by `nicflow stats`.
    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Which shared source the port's `underlay_*` and `esp_*` counters
    /// come from: tunnel ports on one underlay all show that underlay's
    /// (and its ESP state's) counters, so a summary over ports must add
    /// them once per source, not once per port. `None` (the default): the
    /// port has no such counters.
    fn shared_counters_id(&self) -> Option<usize> {
        None
    }
    /// A file descriptor that becomes readable when frames are waiting, for
    /// the daemon's poll loop (None: the port must be polled by calling
    /// `recv_batch`).
    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Can `send_batch` take frames that still carry offload work
    /// ([`PacketBuf::offload`]: partial checksums, GSO super-frames)? If
    /// not (the default), the bridge finishes them first
    /// (`finish_offloads`: segmentation, checksum completion).
    fn accepts_offloads(&self) -> bool {
        false
    }
    /// Does the port's `rx_fd` become readable per frame, so that spinning
    /// briefly after traffic stops saves a wakeup (AF_XDP rings)? Ports that
    /// hand over frames in blocks (TPACKET_V3) gain nothing from spinning.
    fn spin_worthwhile(&self) -> bool {
        false
    }
    /// Work the port still has to do without new input (a transmit ring not
    /// yet drained into the device): the daemon must not sleep while true.
    fn has_deferred_work(&self) -> bool {
        false
    }
    /// What kind of port this is (`afxdp`, `afpacket`, `tap`, ...): the
    /// offload manager names it when a flow stays in userspace because of
    /// it (`port:afpacket`).
    fn kind(&self) -> &'static str {
        "userspace"
    }
    /// The kernel attachment an offload engine can run on, as data
    /// ([`hook`]): the bridge gives it to its offload provider when the
    /// port is added. Ports without one (the default) keep their flows in
    /// userspace, for the reason their [`Port::kind`] names.
    fn offload_hook(&self) -> OffloadHook {
        OffloadHook::Userspace { kind: self.kind() }
    }
    /// The switch-wide Geneve option map (OpenFlow `NXT_TLV_TABLE_MOD`):
    /// which options are `tun_metadata0..7`. Only Geneve ports use it
    /// (returns whether this port took it); an empty map gives a port back
    /// its own `tlv_map` option.
    fn set_tlv_map(&mut self, _map: &[tunnel::TlvMapping]) -> bool {
        false
    }
    /// Called by the bridge every housekeeping tick (about once a second):
    /// re-read what may change under the port outside nicflow's control
    /// (a packet socket follows the interface's root qdisc: [`qdisc`]).
    fn housekeeping(&mut self) {}
    /// The kernel interface the port sends through, by index, if it has
    /// one: what measures of the interface (qdisc, drop counters) are
    /// keyed by, since a name can pass to another interface.
    fn ifindex(&self) -> Option<u32> {
        None
    }
    /// Asks the port to hand over a received UDP super-frame
    /// (`GSO_UDP_L4`) whole, in one buffer with [`GsoType::UdpL4`] offload
    /// state, instead of cutting it into its datagrams: a tunnel underlay
    /// opens the ESP packets of a nicflow peer's super-frame where they
    /// lie (`tunnel::Underlay`). Returns whether the port will (the
    /// default: no; a port without virtio-net headers never sees one).
    ///
    /// [`GsoType::UdpL4`]: nicflow_packet::buf::GsoType::UdpL4
    fn keep_udp_super_frames(&mut self) -> bool {
        false
    }
    /// Gives back a buffer that carried a super-frame this port handed over
    /// whole ([`keep_udp_super_frames`](Self::keep_udp_super_frames)), so
    /// that the port receives into it again instead of allocating; `Some`
    /// (for the caller's pool) when the port does not take it.
    fn give_back_rx_buf(&mut self, buf: PacketBuf) -> Option<PacketBuf> {
        Some(buf)
    }
}
