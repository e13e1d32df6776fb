//! `nicflow daemon`: the poll loop that forwards traffic and serves the CLI.
//!
//! One thread does everything: it sleeps in `poll(2)` on every port's
//! receive descriptor and the control socket, forwards whatever arrived in
//! batches through each bridge, and applies control requests between
//! batches. While traffic flows it keeps polling without sleeping; after a
//! short idle spell it sleeps, so an idle switch uses no CPU. Housekeeping
//! (flow aging, rule timeouts, MAC aging) runs once a second. SIGINT and
//! SIGTERM stop the loop; dropping the switch closes every port.

use super::proto::{Request, Response};
use super::switch::Switch;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Default control socket; `NICFLOW_SOCK` overrides it everywhere.
pub const DEFAULT_SOCKET: &str = "/run/nicflow/nicflow.sock";

pub fn socket_path(arg: Option<PathBuf>) -> PathBuf {
    arg.or_else(|| std::env::var_os("NICFLOW_SOCK").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{}: a daemon is already listening", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

fn serve(sw: &mut Switch, stream: UnixStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut line = String::new();
    let resp = match reader.read_line(&mut line) {
        Ok(0) => return,
        Ok(_) => match serde_json::from_str::<Request>(line.trim()) {
            Ok(req) => {
                tracing::info!(?req, "control request");
                sw.handle(req)
            }
            Err(e) => Response::err(format!("bad request: {e}")),
        },
        Err(e) => Response::err(format!("reading request: {e}")),
    };
    let mut out = serde_json::to_string(&resp).unwrap_or_else(|_| "{\"ok\":false}".into());
    out.push('\n');
    let mut s = stream;
    let _ = s.write_all(out.as_bytes());
}

/// Run until SIGINT/SIGTERM.
pub fn run(mut sw: Switch, socket: &Path) -> anyhow::Result<()> {
    install_signal_handlers();
    let listener = bind(socket)?;
    tracing::info!(socket = %socket.display(), "nicflow daemon listening");
    let mut last_tick = Instant::now();
    let mut idle_rounds = 0u32;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !STOP.load(Ordering::SeqCst) {
        fds.clear();
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for br in sw.bridges() {
            for fd in br.rx_fds() {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        // Busy-poll while traffic flows, sleep when idle.
        let timeout = if idle_rounds < 2000 { 0 } else { 100 };
        // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        let now = Instant::now();
        let mut moved = 0;
        for br in sw.bridges_mut() {
            for _ in 0..64 {
                let n = br.run_once(now);
                moved += n;
                if n == 0 {
                    break;
                }
            }
        }
        if moved > 0 {
            idle_rounds = 0;
        } else {
            idle_rounds = idle_rounds.saturating_add(1);
        }
        if fds[0].revents & libc::POLLIN != 0 {
            while let Ok((stream, _)) = listener.accept() {
                serve(&mut sw, stream);
                idle_rounds = 0;
            }
        }
        if now.duration_since(last_tick) >= Duration::from_secs(1) {
            for br in sw.bridges_mut() {
                br.tick(now);
            }
            last_tick = now;
        }
    }
    tracing::info!("stopping: closing ports");
    drop(sw);
    let _ = std::fs::remove_file(socket);
    Ok(())
}

/// Send one request to the daemon and wait for its response.
pub fn request(socket: &Path, req: &Request) -> anyhow::Result<Response> {
    use anyhow::Context;
    let mut s = UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to {} (is the daemon running?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reader = BufReader::new(s);
    let mut resp = String::new();
    reader.read_line(&mut resp)?;
    serde_json::from_str(resp.trim()).context("bad response from daemon")
}
