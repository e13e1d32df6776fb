//! Attaching BPF programs to interfaces, shared by the ports that own a
//! program (`tc`: the upcall program) and by the kernel engines above
//! them (the datapath program at TC ingress).
//!
//! Place in the system: nothing here sees a packet; it decides where on an
//! interface's receive path a program runs — as a tcx link (Linux >= 6.6)
//! or, before tcx, a cls_bpf filter on a clsact qdisc — and which program
//! a port's XDP link runs ([`xdp_link_update`], for the XDP engine that
//! runs on an AF_XDP port's attachment without taking it).

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

/// A program, for [`xdp_link_update`]: a descriptor this process holds,
/// or a kernel id (opened with `BPF_PROG_GET_FD_BY_ID` for the call).
#[derive(Clone, Copy, Debug)]
pub enum ProgRef<'a> {
    Fd(std::os::fd::BorrowedFd<'a>),
    Id(u32),
}

/// An XDP link's program could not be switched.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct LinkUpdateError {
    /// The system call that failed.
    pub op: &'static str,
    #[source]
    pub source: std::io::Error,
}

const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_LINK_UPDATE: libc::c_long = 29;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
const BPF_F_REPLACE: u32 = 1 << 2;

/// `bpf(cmd, attr)` with the first words of `union bpf_attr`; the rest of
/// the union is zero, as the kernel requires.
fn bpf_call(cmd: libc::c_long, words: [u32; 4]) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, initialised buffer of the size passed; the
    // kernel reads at most that many bytes and writes nothing back for
    // these commands.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            words.as_ptr(),
            std::mem::size_of_val(&words) as libc::c_uint,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A new descriptor for a BPF object by id (`cmd` = `*_GET_FD_BY_ID`).
fn fd_by_id(cmd: libc::c_long, id: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let fd = bpf_call(cmd, [id, 0, 0, 0])?;
    // SAFETY: the kernel returned a new descriptor this process now owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Switch XDP link `link_id` to program `new`, if it still runs `old`
/// (`BPF_LINK_UPDATE` with `BPF_F_REPLACE`: atomic, so no frame ever meets
/// the interface without a program, and refused — `EPERM` — when someone
/// else repointed the link meanwhile). The link's owner keeps it: the
/// descriptor opened here closes on return. Needs `CAP_SYS_ADMIN` (ids).
pub fn xdp_link_update(
    link_id: u32,
    new: ProgRef<'_>,
    old: ProgRef<'_>,
) -> Result<(), LinkUpdateError> {
    use std::os::fd::{AsRawFd, OwnedFd};
    let err = |op| move |source| LinkUpdateError { op, source };
    let link = fd_by_id(BPF_LINK_GET_FD_BY_ID, link_id).map_err(err("BPF_LINK_GET_FD_BY_ID"))?;
    let open = |p: ProgRef<'_>| -> std::io::Result<(Option<OwnedFd>, i32)> {
        match p {
            ProgRef::Fd(fd) => Ok((None, fd.as_raw_fd())),
            ProgRef::Id(id) => {
                let fd = fd_by_id(BPF_PROG_GET_FD_BY_ID, id)?;
                let raw = fd.as_raw_fd();
                Ok((Some(fd), raw))
            }
        }
    };
    let (_new_owned, new_fd) = open(new).map_err(err("BPF_PROG_GET_FD_BY_ID"))?;
    let (_old_owned, old_fd) = open(old).map_err(err("BPF_PROG_GET_FD_BY_ID"))?;
    // struct { link_fd; new_prog_fd; flags; old_prog_fd; } link_update
    bpf_call(
        BPF_LINK_UPDATE,
        [
            link.as_raw_fd() as u32,
            new_fd as u32,
            BPF_F_REPLACE,
            old_fd as u32,
        ],
    )
    .map_err(err("BPF_LINK_UPDATE"))?;
    Ok(())
}
