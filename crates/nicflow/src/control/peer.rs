//! Who may talk to the daemon: the check both local entry points make
//! before serving a peer, the control socket ([`super::clients`]) and a
//! unix-socket OpenFlow listener ([`super::openflow`]). A leaf, so that
//! neither entry point imports the other's module or the daemon loop.

use std::os::unix::net::UnixStream;

/// May this peer configure the switch? Root or the daemon's own user. A
/// socket file is guarded by its mode as well; an abstract socket (DPU
/// mode) has no file, so this is its only guard.
pub(super) fn peer_allowed(stream: &UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    // SAFETY: geteuid has no preconditions.
    r == 0 && (cred.uid == 0 || cred.uid == unsafe { libc::geteuid() })
}
