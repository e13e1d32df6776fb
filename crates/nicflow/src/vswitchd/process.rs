//! Started like ovs-vswitchd: `--pidfile[=FILE]`, `--detach` (the parent
//! returns once the child is ready, so a script may use the daemon at
//! once), `--log-file[=FILE]` (the log goes to the file instead of stderr).

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A written pidfile, removed when dropped (a clean exit).
pub struct Pidfile(PathBuf);

impl Pidfile {
    /// Write our pid to `path`; refused while another live process holds it.
    pub fn create(path: &Path) -> Result<Pidfile> {
        if let Ok(old) = std::fs::read_to_string(path) {
            if let Ok(pid) = old.trim().parse::<i32>() {
                // SAFETY: kill with signal 0 only checks that the process exists.
                let alive = pid > 0 && unsafe { libc::kill(pid, 0) } == 0;
                if alive && pid != std::process::id() as i32 {
                    bail!("{}: already running as pid {pid}", path.display());
                }
            }
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        }
        let tmp = path.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .with_context(|| tmp.display().to_string())?;
        std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
        Ok(Pidfile(path.to_path_buf()))
    }
}

impl Drop for Pidfile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Send stderr (where the log goes) to `path`, appending.
pub fn log_to(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| path.display().to_string())?;
    // SAFETY: dup2 onto the stderr descriptor; `f` stays valid for the call.
    if unsafe { libc::dup2(f.as_raw_fd(), 2) } < 0 {
        bail!("{}: {}", path.display(), std::io::Error::last_os_error());
    }
    Ok(())
}

/// The child's side of `--detach`: tell the waiting parent it is ready.
pub struct Detached(Option<OwnedFd>);

impl Detached {
    /// Not detached: `ready` does nothing.
    pub fn none() -> Detached {
        Detached(None)
    }

    pub fn ready(&mut self) {
        if let Some(fd) = self.0.take() {
            let mut f = std::fs::File::from(fd);
            let _ = f.write_all(b"1");
        }
    }
}

/// Fork; the parent waits until the child calls [`Detached::ready`] (exit
/// 0) or dies first (exit 1) and never returns. The child leaves the
/// session and the terminal; its stderr goes to /dev/null unless
/// `keep_stderr` (a log file is there). Call before any thread starts.
pub fn detach(keep_stderr: bool) -> Result<Detached> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the descriptors were just created and are owned here only.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: single-threaded here (see above); both sides continue normally.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid > 0 {
        drop(w);
        let mut b = [0u8; 1];
        let n = std::io::Read::read(&mut std::fs::File::from(r), &mut b).unwrap_or(0);
        std::process::exit(if n == 1 { 0 } else { 1 });
    }
    drop(r);
    // SAFETY: plain system calls on our own process and descriptors.
    unsafe {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            if !keep_stderr {
                libc::dup2(null, 2);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    Ok(Detached(Some(w)))
}
