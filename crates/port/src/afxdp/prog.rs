//! The XDP program (`bpf/xsk_redirect.c`, compiled by `build.rs`): loading
//! it with aya, registering the socket in its XSKMAP and attaching it.
//!
//! aya attaches XDP through a BPF link (`BPF_LINK_CREATE`, Linux 5.9+): the
//! attachment belongs to a file descriptor, so it is undone when this value
//! drops *and* when the process dies without running destructors (the
//! kernel closes the descriptor). It also refuses, rather than replaces, a
//! program someone else attached (`EBUSY`). On kernels without XDP links
//! aya falls back to netlink, which has neither property.

use super::{AfXdpError, XdpMode};
use crate::hook::XdpLinkRef;
use aya::maps::XskMap;
use aya::programs::links::LinkType;
use aya::programs::{Xdp, XdpMode as AyaXdpMode};
use aya::Ebpf;
use std::os::fd::RawFd;

/// The object built from `bpf/xsk_redirect.c`.
static XSK_REDIRECT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xsk_redirect.o"));
const PROG_NAME: &str = "xsk_redirect";
const MAP_NAME: &str = "xsks";

/// How the program ended up attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachMode {
    /// Native (driver) XDP: runs in the driver's receive path, before any
    /// sk_buff exists.
    Native,
    /// Generic (SKB) XDP: runs in `netif_receive_skb` on an sk_buff; works
    /// on every interface, slower, and sees GRO/GSO super-frames.
    Generic,
}

impl std::fmt::Display for AttachMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        })
    }
}

/// The loaded program and its map; detached and unloaded on drop.
pub(super) struct XdpProgram {
    // Dropping `Ebpf` drops the program's links (detaching it from the
    // interface), then the program and the map.
    ebpf: Ebpf,
    attached: Option<AttachMode>,
    /// The attachment's kernel ids. The link stays with this program for
    /// the port's whole life; an offload engine only switches the program
    /// it runs, by these ids (`hook`'s module docs say why). `None`
    /// attached through netlink (no BPF link: kernels before 5.9).
    link: Option<XdpLinkRef>,
}

impl std::fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("attached", &self.attached)
            .finish()
    }
}

fn bpf_err(
    op: &'static str,
    ifname: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> AfXdpError {
    AfXdpError::Bpf {
        op,
        ifname: ifname.to_string(),
        source: Box::new(e),
    }
}

impl XdpProgram {
    /// Load the program into the kernel (verifier included); not attached.
    pub fn load(ifname: &str) -> Result<XdpProgram, AfXdpError> {
        let mut ebpf = Ebpf::load(XSK_REDIRECT_OBJ)
            .map_err(|e| bpf_err("loading the BPF object", ifname, e))?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROG_NAME)
            .ok_or_else(|| {
                AfXdpError::InvalidOptions(format!("BPF object has no program `{PROG_NAME}`"))
            })?
            .try_into()
            .map_err(|e| bpf_err("BPF program type", ifname, e))?;
        prog.load()
            .map_err(|e| bpf_err("BPF_PROG_LOAD(xsk_redirect)", ifname, e))?;
        Ok(XdpProgram {
            ebpf,
            attached: None,
            link: None,
        })
    }

    /// Store socket `fd` at key `queue` of the XSKMAP.
    pub fn register(&mut self, ifname: &str, queue: u32, fd: RawFd) -> Result<(), AfXdpError> {
        let map = self.ebpf.map_mut(MAP_NAME).ok_or_else(|| {
            AfXdpError::InvalidOptions(format!("BPF object has no map `{MAP_NAME}`"))
        })?;
        let mut xsks = XskMap::try_from(map).map_err(|e| bpf_err("XSKMAP", ifname, e))?;
        xsks.set(queue, fd, 0)
            .map_err(|e| bpf_err("BPF_MAP_UPDATE_ELEM(xsks)", ifname, e))
    }

    /// Attach to `ifindex` as `mode` asks: `Native` or `Generic` only that
    /// way, `Auto` native first and generic (with a warning) if the driver
    /// refuses.
    pub fn attach(
        &mut self,
        ifname: &str,
        ifindex: u32,
        mode: XdpMode,
    ) -> Result<AttachMode, AfXdpError> {
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(PROG_NAME)
            .ok_or_else(|| {
                AfXdpError::InvalidOptions(format!("BPF object has no program `{PROG_NAME}`"))
            })?
            .try_into()
            .map_err(|e| bpf_err("BPF program type", ifname, e))?;
        let try_mode = |prog: &mut Xdp, m: AttachMode| {
            let aya_mode = match m {
                AttachMode::Native => AyaXdpMode::Driver,
                AttachMode::Generic => AyaXdpMode::Skb,
            };
            prog.attach_to_if_index(ifindex, aya_mode)
                .map_err(|e| AfXdpError::Attach {
                    mode: m,
                    ifname: ifname.to_string(),
                    source: Box::new(e),
                })
        };
        // The link stays in aya's program (detached when `ebpf` drops).
        let (got, _link) = match mode {
            XdpMode::Native => (AttachMode::Native, try_mode(prog, AttachMode::Native)?),
            XdpMode::Generic => (AttachMode::Generic, try_mode(prog, AttachMode::Generic)?),
            XdpMode::Auto => match try_mode(prog, AttachMode::Native) {
                Ok(l) => (AttachMode::Native, l),
                Err(e) => {
                    tracing::warn!(
                        port = %ifname,
                        "native XDP attach failed ({e}); falling back to generic (SKB) mode, \
                         which is slower"
                    );
                    (AttachMode::Generic, try_mode(prog, AttachMode::Generic)?)
                }
            },
        };
        self.attached = Some(got);
        self.link = Self::find_link(prog, ifname);
        Ok(got)
    }

    /// The XDP link running `prog`: this instance of `xsk_redirect` is
    /// loaded for this port alone, so it is the one link whose program id
    /// is its id.
    fn find_link(prog: &Xdp, ifname: &str) -> Option<XdpLinkRef> {
        let prog_id = match prog.info() {
            Ok(i) => i.id(),
            Err(e) => {
                tracing::warn!(port = %ifname, "reading xsk_redirect's id: {e}; no offload engine can run on this port");
                return None;
            }
        };
        let found = aya::programs::loaded_links()
            .flatten()
            .find(|l| l.program_id() == prog_id && l.link_type().ok() == Some(LinkType::Xdp));
        if found.is_none() {
            tracing::warn!(port = %ifname, "XDP attached without a BPF link (kernel before 5.9): no offload engine can run on this port");
        }
        found.map(|l| XdpLinkRef {
            link_id: l.id(),
            prog_id,
        })
    }

    /// The attachment's kernel ids, for an offload engine.
    pub fn link_ref(&self) -> Option<XdpLinkRef> {
        self.link
    }

    pub fn attached(&self) -> Option<AttachMode> {
        self.attached
    }
}
