//! A port whose fast path is the kernel's TC hook: the interface keeps its
//! offloads (TSO, GSO, checksum offload, GRO) because nothing on it is XDP
//! and nothing on it copies frames to userspace.
//!
//! Place in a frame's path:
//!
//! ```text
//! interface ingress (TC, tcx) ── tc_dp (the bridge's TC engine, when on)
//!     hit  -> rewritten and redirected in the kernel, never seen here
//!     miss -> bpf_redirect ─┐
//!   tc_upcall (this port's own program, after tc_dp: every frame tc_dp
//!     leaves, all of them while no engine runs) ─┘
//!        -> upcall veth near end `nfu<ifindex>a` -> far end
//!           `nfu<ifindex>b` -> this port's AF_PACKET socket (virtio-net
//!           header: super-frames and partial checksums stay whole), then
//!           tc_upcall_sink drops it before the host stack
//!        -> datapath (EMC, megaflows, upcall to ofproto)
//! datapath output -> AF_PACKET socket bound to the interface with protocol
//!     0 (transmit only: no tap, so no copy of the interface's traffic)
//! ```
//!
//! Why a veth pair rather than a ring buffer upcall: the redirect costs the
//! kernel nothing per byte (the skb moves, super-frames stay whole), and the
//! daemon's existing AF_PACKET receive path applies (batches, TPACKET_V3
//! ring, virtio-net headers, VLAN tag restore). Only misses and punts pay
//! for it; offloaded packets never reach the daemon. The pair is created
//! with the port and deleted with it.
//!
//! The port's two links are pinned (`offload::pin`, `port-<ifindex>/upcall`
//! and `sink`) when the daemon has a pin root: if the daemon dies they stay
//! attached with the pair, and the next daemon's `open` adopts pair and
//! links as they are instead of rebuilding them.

use super::afpacket::{AfPacketOptions, AfPacketPort};
use super::{Port, PortStats};
use crate::pin::{self, HeldLink};
use aya::programs::SchedClassifier;
use aya::{Ebpf, EbpfLoader};
use nicflow_os::{self as os, link::VethEnd, netlink::Rtnl, OsError};
use nicflow_packet::buf::PacketBuf;
use std::io;
use std::os::fd::RawFd;

static TC_UPCALL_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tc_upcall.o"));

/// Why a TC port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TcPortError {
    #[error("interface `{0}`: no such interface")]
    NoIface(String),
    #[error("interface `{0}`: reading its MTU: {1}")]
    Mtu(String, #[source] io::Error),
    #[error("upcall device {0}: vanished after creation")]
    UpcallVanished(String),
    /// Creating, configuring or deleting the upcall pair failed in the
    /// kernel (netlink, with its errno).
    #[error("upcall device {0}: {1}")]
    UpcallSys(String, #[source] OsError),
    /// Loading or attaching the port's own programs failed.
    #[error("TC program on {0}: {1}")]
    Bpf(String, #[source] Box<TcProgramError>),
    #[error(transparent)]
    AfPacket(#[from] super::afpacket::AfPacketError),
}

/// The port's programs (`tc_upcall.o`) could not be loaded or attached.
#[derive(Debug, thiserror::Error)]
pub enum TcProgramError {
    #[error("loading tc_upcall.o: {0}")]
    Load(#[source] Box<aya::EbpfError>),
    #[error("no program {0} in tc_upcall.o")]
    Missing(&'static str),
    #[error("{0}: {1}")]
    Program(&'static str, #[source] aya::programs::ProgramError),
    #[error("{0}: {1}")]
    Attach(&'static str, #[source] pin::PinError),
}

/// See the module docs.
pub struct TcPort {
    // Drop: the programs are detached first (`drop`), then the pair is
    // deleted, then the fields go (the sockets close with `io`).
    links: Vec<HeldLink>,
    /// Where `links` are pinned (`pin::port_dir`).
    pin_dir: Option<std::path::PathBuf>,
    io: AfPacketPort,
    name: String,
    iface: String,
    ifindex: u32,
    upcall: String,
    upcall_ifindex: u32,
    peer_elsewhere: bool,
}

/// The interface's index in this network namespace (ioctl, not /sys:
/// sysfs shows the namespace it was mounted in).
fn ifindex_of(iface: &str) -> Option<u32> {
    super::sys::if_index(iface).ok()
}

/// A veth whose peer lives in another network namespace: the TC engine
/// reaches the peer with `bpf_redirect_peer` (straight into its receive
/// path), which the kernel only allows across namespaces.
pub fn veth_peer_elsewhere(iface: &str) -> bool {
    let Ok(l) = Rtnl::open(None).and_then(|mut rt| os::link::get(&mut rt, iface)) else {
        return false;
    };
    l.kind.as_deref() == Some("veth") && l.link_netnsid.is_some()
}

/// Delete link `dev` (and its veth peer); gone already is fine.
fn delete_link(dev: &str) -> Result<(), OsError> {
    match Rtnl::open(None).and_then(|mut rt| os::link::del(&mut rt, dev)) {
        Err(e) if e.is_missing() => Ok(()),
        other => other,
    }
}

/// `tc_upcall.o` loaded (verified) for upcall device `upcall_ifindex`, not
/// attached: `tc_upcall` (redirect every frame there) and `tc_upcall_sink`.
/// `tc_upcall` is also the bare-redirect baseline of `bench::progcost`.
pub fn load_upcall_programs(upcall_ifindex: u32) -> Result<Ebpf, TcProgramError> {
    let mut ebpf = EbpfLoader::new()
        .override_global("UPCALL_IFINDEX", &upcall_ifindex, true)
        .load(TC_UPCALL_OBJ)
        .map_err(|e| TcProgramError::Load(Box::new(e)))?;
    for prog in ["tc_upcall", "tc_upcall_sink"] {
        let p: &mut SchedClassifier = ebpf
            .program_mut(prog)
            .ok_or(TcProgramError::Missing(prog))?
            .try_into()
            .map_err(|e| TcProgramError::Program(prog, e))?;
        p.load().map_err(|e| TcProgramError::Program(prog, e))?;
    }
    Ok(ebpf)
}

/// How a TC port's upcall device is read: a plain packet socket woken per
/// frame, not a TPACKET_V3 ring. Everything that stays in userspace (first
/// packets, flows no engine can hold) crosses this socket, and a ring hands
/// frames over only when a block retires (a 1 ms timer at low rates): that
/// timer was most of a userspace round trip (`ping` through a bridge whose
/// flows stay in userspace: 1.26 ms with the ring).
fn upcall_socket_options() -> AfPacketOptions {
    AfPacketOptions {
        promisc: false,
        disable_offloads: false,
        rx_ring: false,
        ..AfPacketOptions::default()
    }
}

impl TcPort {
    /// Open `iface` as a TC port: create its upcall pair, attach the port's
    /// own `tc_upcall` (last on the interface's ingress hook) and the sink,
    /// receive on the pair, transmit on the interface. Nothing of the
    /// interface's own settings changes.
    pub fn open(iface: &str) -> Result<TcPort, TcPortError> {
        let ifindex = ifindex_of(iface).ok_or_else(|| TcPortError::NoIface(iface.into()))?;
        let mtu = super::sys::control_socket()
            .and_then(|s| super::sys::interface_mtu(std::os::fd::AsRawFd::as_raw_fd(&s), iface))
            .map_err(|e| TcPortError::Mtu(iface.into(), e))?;
        let near = format!("nfu{ifindex}a");
        let far = format!("nfu{ifindex}b");
        let mut pin_dir = pin::port_dir(ifindex);
        if let Some(p) = pin_dir
            .as_deref()
            .and_then(|d| Self::adopt(iface, ifindex, &near, &far, d))
        {
            return Ok(p);
        }
        // Pins or a pair left by a daemon that died go first.
        if let Some(d) = &pin_dir {
            pin::remove(d);
        }
        if ifindex_of(&near).is_some() {
            let _ = delete_link(&near);
        }
        let sys_err = |e: OsError| TcPortError::UpcallSys(near.clone(), e);
        let mut rt = Rtnl::open(None).map_err(sys_err)?;
        let end = |name: &str| VethEnd {
            mtu: u32::try_from(mtu).ok(),
            ..VethEnd::named(name)
        };
        os::link::add_veth(&mut rt, &end(&near), &end(&far)).map_err(sys_err)?;
        let mut guard = PairGuard(Some(near.clone()));
        for dev in [&near, &far] {
            // No addresses, no IPv6 autoconfiguration traffic.
            let key = format!("net.ipv6.conf.{dev}.disable_ipv6");
            let _ = os::sysctl::write(None, &key, "1");
        }
        // The pair keeps veth's default offloads: a super-frame crosses it
        // whole and reaches the port's socket behind a virtio-net header
        // (the AF_PACKET side runs with `vnet_hdr`), as it would an
        // `afpacket` port, so the userspace path keeps GSO too.
        os::link::set_up(&mut rt, &near).map_err(sys_err)?;
        os::link::set_up(&mut rt, &far).map_err(sys_err)?;
        let upcall_ifindex =
            ifindex_of(&near).ok_or_else(|| TcPortError::UpcallVanished(near.clone()))?;

        let opts = upcall_socket_options();
        let io = AfPacketPort::open(&far, opts)?.transmit_on(iface, true)?;

        let bpf_err = |e: TcProgramError| TcPortError::Bpf(iface.to_string(), Box::new(e));
        let mut ebpf = load_upcall_programs(upcall_ifindex).map_err(bpf_err)?;
        if let Some(d) = &pin_dir {
            if let Err(e) = std::fs::create_dir_all(d) {
                tracing::warn!(port = %iface, "pin directory {}: {e}; the port's programs will not outlive the daemon", d.display());
                pin_dir = None;
            }
        }
        let mut links = Vec::new();
        for (prog, dev, pin_name) in [
            ("tc_upcall", iface, "upcall"),
            ("tc_upcall_sink", far.as_str(), "sink"),
        ] {
            let pin_path = pin_dir.as_ref().map(|d| d.join(pin_name));
            let r = ebpf
                .program_mut(prog)
                .ok_or(TcProgramError::Missing(prog))
                .and_then(|p| {
                    <&mut SchedClassifier>::try_from(p)
                        .map_err(|e| TcProgramError::Program(prog, e))
                })
                .and_then(|p| {
                    pin::attach_tc(p, dev, false, pin_path.as_deref())
                        .map_err(|e| TcProgramError::Attach(prog, e))
                })
                .map_err(bpf_err);
            match r {
                Ok(l) => links.push(l),
                Err(e) => {
                    for l in links {
                        l.release();
                    }
                    if let Some(d) = &pin_dir {
                        pin::remove(d);
                    }
                    return Err(e);
                }
            }
        }
        if let Some(d) = &pin_dir {
            pin::claim(d);
        }
        guard.0 = None;
        let peer_elsewhere = veth_peer_elsewhere(iface);
        tracing::info!(
            port = %iface, ifindex, upcall = %near, peer_elsewhere,
            "TC port open (interface offloads left as they are)"
        );
        Ok(TcPort {
            links,
            pin_dir,
            io,
            name: iface.to_string(),
            iface: iface.to_string(),
            ifindex,
            upcall: near,
            upcall_ifindex,
            peer_elsewhere,
        })
    }

    /// Take over the pair and pinned links a daemon that died left for
    /// `iface` (pins in `dir`): nothing on the interface changes, only the
    /// receive socket is new. None (nothing adopted) when any part is
    /// missing; the caller then starts afresh.
    fn adopt(
        iface: &str,
        ifindex: u32,
        near: &str,
        far: &str,
        dir: &std::path::Path,
    ) -> Option<TcPort> {
        let (up_pin, sink_pin) = (dir.join("upcall"), dir.join("sink"));
        if !up_pin.exists() || !sink_pin.exists() {
            return None;
        }
        let upcall_ifindex = ifindex_of(near)?;
        ifindex_of(far)?;
        let up = pin::open_link(&up_pin)?;
        let sink = pin::open_link(&sink_pin)?;
        let opts = upcall_socket_options();
        let io = match AfPacketPort::open(far, opts).and_then(|p| p.transmit_on(iface, true)) {
            Ok(io) => io,
            Err(e) => {
                tracing::warn!(port = %iface, "adopting the upcall pair {near}: {e}; starting afresh");
                return None;
            }
        };
        pin::claim(dir);
        let peer_elsewhere = veth_peer_elsewhere(iface);
        tracing::info!(
            port = %iface, ifindex, upcall = %near, peer_elsewhere,
            "TC port adopted (upcall pair and pinned programs kept)"
        );
        Some(TcPort {
            links: vec![up, sink],
            pin_dir: Some(dir.to_path_buf()),
            io,
            name: iface.to_string(),
            iface: iface.to_string(),
            ifindex,
            upcall: near.to_string(),
            upcall_ifindex,
            peer_elsewhere,
        })
    }

    pub fn set_name(&mut self, name: &str) {
        self.name = name.to_string();
        self.io.set_name(name);
    }

    pub fn iface(&self) -> &str {
        &self.iface
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The device misses are redirected to.
    pub fn upcall_ifindex(&self) -> u32 {
        self.upcall_ifindex
    }

    pub fn upcall_name(&self) -> &str {
        &self.upcall
    }

    /// A veth whose peer is in another namespace (`bpf_redirect_peer`).
    pub fn peer_elsewhere(&self) -> bool {
        self.peer_elsewhere
    }
}

/// Deletes the upcall pair unless defused (an `open` that failed half way).
struct PairGuard(Option<String>);

impl Drop for PairGuard {
    fn drop(&mut self) {
        if let Some(dev) = self.0.take() {
            let _ = delete_link(&dev);
        }
    }
}

impl Drop for TcPort {
    fn drop(&mut self) {
        // A panic is a crash: pins and pair stay for the next daemon.
        if std::thread::panicking() {
            for l in self.links.drain(..) {
                l.leave();
            }
            return;
        }
        for l in self.links.drain(..) {
            l.release();
        }
        if let Some(d) = &self.pin_dir {
            pin::remove(d);
        }
        // The sockets close with `io` (a field: dropped after this), but
        // deleting the pair first is harmless: the socket then sees
        // nothing. Deleting one end deletes both.
        if let Err(e) = delete_link(&self.upcall) {
            tracing::warn!(port = %self.name, "deleting the upcall pair: {e}");
        }
        tracing::debug!(port = %self.name, "TC port closed");
    }
}

impl Port for TcPort {
    fn ifindex(&self) -> Option<u32> {
        Some(TcPort::ifindex(self))
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "tc"
    }

    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        self.io.recv_batch(out, max, pool)
    }

    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        self.io.send_batch(pkts, done)
    }

    fn stats(&self) -> PortStats {
        self.io.stats()
    }

    fn rx_exhausted(&self) -> bool {
        self.io.rx_exhausted()
    }

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        self.io.extra_counters()
    }

    fn rx_fd(&self) -> Option<RawFd> {
        self.io.rx_fd()
    }

    fn housekeeping(&mut self) {
        self.io.housekeeping();
    }

    fn accepts_offloads(&self) -> bool {
        self.io.accepts_offloads()
    }

    fn spin_worthwhile(&self) -> bool {
        self.io.spin_worthwhile()
    }

    fn has_deferred_work(&self) -> bool {
        self.io.has_deferred_work()
    }

    fn keep_udp_super_frames(&mut self) -> bool {
        self.io.keep_udp_super_frames()
    }

    fn give_back_rx_buf(&mut self, buf: PacketBuf) -> Option<PacketBuf> {
        self.io.give_back_rx_buf(buf)
    }

    fn offload_hook(&self) -> crate::OffloadHook {
        crate::OffloadHook::Tc(crate::hook::TcHook {
            ifindex: self.ifindex,
            iface: self.iface.clone(),
            upcall_ifindex: self.upcall_ifindex,
            peer_elsewhere: self.peer_elsewhere,
        })
    }
}
