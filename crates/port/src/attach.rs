//! Attaching BPF programs to interfaces, shared by the ports that own a
//! program (`tc`: the upcall program) and by the kernel engines above
//! them (the datapath program at TC ingress).
//!
//! Place in the system: nothing here sees a packet; it decides where on an
//! interface's receive path a program runs — as a tcx link (Linux >= 6.6)
//! or, before tcx, a cls_bpf filter on a clsact qdisc.

use aya::programs::tc::{NlOptions, SchedClassifierLinkId, TcAttachOptions};
use aya::programs::{LinkOrder, ProgramError, SchedClassifier, TcAttachType};

/// A TC program could not be attached: neither as a tcx link nor as a
/// cls_bpf filter.
#[derive(Debug, thiserror::Error)]
#[error("attaching a TC program at ingress of {ifname}: {source}")]
pub struct AttachError {
    /// The interface.
    pub ifname: String,
    /// The tcx attempt's error (the first one tried: on a kernel with tcx
    /// it is the one that explains the failure).
    #[source]
    pub source: ProgramError,
}

/// Attach a TC program at ingress: a tcx link (first or last on the hook)
/// on kernels that have it, else a clsact qdisc (added if missing) and a
/// cls_bpf filter (priority 1 first, else after).
pub fn tc_attach(
    prog: &mut SchedClassifier,
    ifname: &str,
    first: bool,
) -> Result<SchedClassifierLinkId, AttachError> {
    let order = if first {
        LinkOrder::first()
    } else {
        LinkOrder::last()
    };
    match prog.attach_with_options(
        ifname,
        TcAttachType::Ingress,
        TcAttachOptions::TcxOrder(order),
    ) {
        Ok(id) => Ok(id),
        Err(tcx) => {
            // Before tcx (Linux < 6.6): clsact + cls_bpf.
            let _ = aya::programs::tc::qdisc_add_clsact(ifname);
            let nl = NlOptions {
                priority: if first { 1 } else { 0 },
                ..NlOptions::default()
            };
            prog.attach_with_options(ifname, TcAttachType::Ingress, TcAttachOptions::Netlink(nl))
                .map_err(|_| AttachError {
                    ifname: ifname.to_string(),
                    source: tcx,
                })
        }
    }
}
