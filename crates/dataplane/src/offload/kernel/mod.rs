//! The kernel engines: datapath flows executed by one eBPF datapath at two
//! attach points, XDP (`xdp_dp`) and TC ingress (`tc_dp`, the default).
//!
//! Place in a frame's path: the program `xdp_dp` (`bpf/xdp_dp.c`) runs on
//! every frame an attached interface receives, *before* the AF_XDP socket
//! of its port. It parses the frame into a [`DpKey`] (the XDP-visible
//! subset of `FlowKey`, same conventions), tries each active mask of
//! `dp_masks` in slot order by looking `{slot, key & mask}` up in the hash
//! map `dp_flows`, and on a hit runs the flow's packed action list in the
//! kernel: header rewrites with incremental checksums, VLAN push/pop, then
//! `XDP_REDIRECT` through the devmap `dp_tx_ports` or `XDP_DROP`. A miss
//! (or a frame the program does not parse, or a hit it cannot finish
//! exactly as userspace would) goes to the XSKMAP `dp_xsks`, i.e. to the
//! port's AF_XDP socket and the userspace datapath, exactly as
//! `xsk_redirect.c` sends every frame today.
//!
//! * [`layout`]: `#[repr(C)]` mirrors of the maps' keys and values.
//! * [`encode()`]: `(FlowKey, FlowMask, [DpAction])` -> [`EncodedFlow`] or
//!   [`NotOffloadable`] with a stable reason.
//! * [`XdpEngine`]: loader (map sizes from [`XdpEngineConfig`], verifier
//!   log on rejection), install / modify / remove, counters, mask slots,
//!   ports, devmap and XSKMAP entries, `BPF_PROG_TEST_RUN`.
//!
//! Not here yet: the offload manager that decides per flow, attaches the
//! engine to the AF_XDP ports and ages flows from [`FlowCounters`]. See
//! `docs/offload.md`.

pub mod encode;
pub mod engine;
pub mod layout;
pub mod masks;
pub mod runstats;

pub use encode::{
    encode, encode_tc, pack, EncodedFlow, NotOffloadable, PortSlots, TunnelSlot, TunnelTlv,
    TunnelVni, XdpAction,
};
pub use engine::{
    AttachMode, EngineKind, EngineStats, FlowCounters, FlowHandle, XdpEngine, XdpEngineConfig,
};
pub use layout::{DpKey, FlowValue, TxIf, MAX_ACTIONS, TX_PEER};
pub use masks::MaskTable;

/// What can go wrong offloading a flow or running the engine.
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// The flow stays in userspace: the reason is short and stable
    /// (`field:ct_state`, `action:controller`, `multiple-outputs`,
    /// `mask-table-full`, `flow-map-full`, ...; see [`encode`]).
    #[error("not offloadable to XDP: {reason}")]
    NotOffloadable { reason: &'static str },
    /// The kernel's verifier rejected `xdp_dp` or `tc_dp`; `log` is its output.
    #[error("the BPF verifier rejected the datapath program ({source}); {} lines of verifier log", log.lines().count())]
    Verifier {
        #[source]
        source: std::io::Error,
        log: String,
    },
    /// A BPF syscall or aya operation failed.
    #[error("{op}: {source}")]
    Bpf {
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Bad configuration or a BPF object that does not have what we need.
    #[error("XDP engine: {0}")]
    Config(String),
    /// No such installed flow.
    #[error("no such offloaded flow")]
    NotFound,
}

impl OffloadError {
    /// The stable reason if the flow simply stays in userspace.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            OffloadError::NotOffloadable { reason } => Some(reason),
            _ => None,
        }
    }

    /// The verifier's log, if the program was rejected (to save to a file).
    pub fn verifier_log(&self) -> Option<&str> {
        match self {
            OffloadError::Verifier { log, .. } => Some(log),
            _ => None,
        }
    }
}

impl From<NotOffloadable> for OffloadError {
    fn from(e: NotOffloadable) -> Self {
        OffloadError::NotOffloadable { reason: e.reason }
    }
}
