//! What an offload engine needs to know about a port: [`OffloadHook`].
//!
//! Place in the system: nothing here sees a packet. A port describes the
//! kernel attachment it runs on as plain data ([`crate::Port::offload_hook`]),
//! the way smoltcp's `Device::capabilities()` describes a device, and the
//! bridge hands that description to its offload provider (port add, OVS's
//! `dpif_offload_class`). The engine never reaches into a port: it learns
//! the interface, the queue, the socket to put in its XSKMAP, the upcall
//! device, and what a tunnel encapsulates with, and does the rest itself.
//!
//! Two things are not fixed at port-add time and are not copied:
//! * **the XDP attachment of an AF_XDP port** ([`XdpLinkRef`]). The port
//!   keeps owning its BPF link for its whole life; the engine switches the
//!   program the link runs (`BPF_LINK_UPDATE` with `BPF_F_REPLACE`, by the
//!   kernel ids of the link and of the port's own program) and switches it
//!   back on port del. So no ownership moves between the two: a port that
//!   goes closes its link and the interface's XDP with it, an engine that
//!   goes without a port del leaves the link running its program rather
//!   than detaching a program it does not own, and the compare-and-swap
//!   refuses to touch a link someone else repointed meanwhile;
//! * **a tunnel underlay's neighbour and MTU** ([`UnderlayView`]): the
//!   remote's MAC is learnt by the underlay's own ARP after the port was
//!   added and must be kept fresh while every packet runs in the kernel,
//!   and the MTU follows `ip link set mtu`. The engine asks for them
//!   through this one narrow view (three calls), never through the port.

use crate::tunnel::TunnelConfig;
use std::os::fd::RawFd;
use std::rc::Rc;

/// A port's kernel attachment, as data (see the module docs).
#[derive(Clone, Debug)]
pub enum OffloadHook {
    /// No kernel attachment an engine can run on (AF_PACKET, TAP, memory,
    /// capture ports): flows through the port stay in userspace. `kind`
    /// is the port's kind (`afpacket`, `tap`...), which names the reason.
    Userspace { kind: &'static str },
    /// An AF_XDP port: the XDP engine takes its attachment over.
    AfXdp(AfXdpHook),
    /// A TC port: the TC engine runs first on its ingress hook.
    Tc(TcHook),
    /// A VXLAN or Geneve port: the engine of its underlay encapsulates and
    /// decapsulates for it.
    Tunnel(TunnelHook),
}

impl OffloadHook {
    /// The port kind the hook describes (`afxdp`, `tc`, `vxlan`...).
    pub fn kind(&self) -> &'static str {
        match self {
            OffloadHook::Userspace { kind } => kind,
            OffloadHook::AfXdp(_) => "afxdp",
            OffloadHook::Tc(_) => "tc",
            OffloadHook::Tunnel(t) => crate::tunnel::kind_name(t.cfg.kind),
        }
    }
}

/// An XDP attachment held by a port, by kernel ids: the engine opens it
/// with `BPF_LINK_GET_FD_BY_ID` and switches its program with
/// [`crate::attach::xdp_link_update`] (module docs: why not a handoff).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpLinkRef {
    /// The BPF link's id (`bpf_link_info.id`).
    pub link_id: u32,
    /// The id of the port's own program (`xsk_redirect`), which the link
    /// runs until an engine switches it, and again after.
    pub prog_id: u32,
}

/// What the XDP engine needs of an AF_XDP port.
#[derive(Clone, Debug)]
pub struct AfXdpHook {
    pub ifindex: u32,
    /// The receive queue the socket is bound to.
    pub queue: u32,
    /// The AF_XDP socket, for the engine's XSKMAP (a descriptor number,
    /// valid while the port lives; the map holds its own reference).
    pub xsk_fd: RawFd,
    /// Port option `csum_complete=true`: the peer sends finished TCP/UDP
    /// checksums.
    pub csum_complete: bool,
    /// Native (driver) XDP rather than generic.
    pub native: bool,
    /// The port's XDP link; `None` when its program was attached without a
    /// BPF link (netlink, kernels before 5.9): no engine can take it over.
    pub link: Option<XdpLinkRef>,
}

/// What the TC engine needs of a TC port.
#[derive(Clone, Debug)]
pub struct TcHook {
    pub ifindex: u32,
    pub iface: String,
    /// The upcall device misses are redirected to.
    pub upcall_ifindex: u32,
    /// A veth whose peer is in another network namespace.
    pub peer_elsewhere: bool,
}

/// What an engine needs of a tunnel port: its endpoint and encapsulation,
/// and its underlay.
#[derive(Clone)]
pub struct TunnelHook {
    pub cfg: TunnelConfig,
    /// The underlay interface.
    pub underlay_iface: String,
    /// The underlay port's own hook: an engine runs on it as on a port of
    /// that kind (AF_XDP or TC); any other kind cannot be offloaded.
    pub underlay: Box<OffloadHook>,
    /// The underlay's neighbour and MTU, asked while the tunnel runs.
    pub view: Rc<dyn UnderlayView>,
}

impl std::fmt::Debug for TunnelHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config holds IPsec keys: only the endpoint is shown.
        f.debug_struct("TunnelHook")
            .field("kind", &self.cfg.kind)
            .field("remote", &self.cfg.remote_ip)
            .field("underlay_iface", &self.underlay_iface)
            .field("underlay", &self.underlay)
            .finish_non_exhaustive()
    }
}

/// What an engine encapsulating for a tunnel asks its underlay later (see
/// the module docs). Called at control-plane rate: when a flow is
/// offloaded and once per housekeeping tick.
pub trait UnderlayView {
    /// The underlay interface's MAC (outer source).
    fn mac(&self) -> [u8; 6];
    /// The underlay interface's MTU now.
    fn mtu(&self) -> usize;
    /// The remote's MAC when the underlay has learnt it, kept fresh (the
    /// underlay refreshes its ARP entry as if userspace traffic used it).
    fn resolve(&self, remote: std::net::Ipv4Addr, local: std::net::Ipv4Addr) -> Option<[u8; 6]>;
}
