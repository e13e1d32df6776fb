//! `nicflow daemon`: the poll loop that forwards traffic and serves the CLI.
//!
//! One thread does everything (but for the optional ESP sealing worker of
//! a tunnel port with `esp_seal_workers=2`, which only encrypts packets
//! this thread numbered, and blocks all signals): it sleeps in `poll(2)` on every port's
//! receive descriptor and the control socket, forwards whatever arrived in
//! batches through each bridge, and applies control requests between
//! batches; control connections are non-blocking and served between
//! rounds ([`super::clients`]). While traffic flows it goes from ring to ring without system
//! calls; once a round finds nothing it sleeps in `poll` (after a 50 µs spin
//! for AF_XDP ports), so an idle switch uses no CPU. Housekeeping
//! (flow aging, rule timeouts, MAC aging, re-attaching ports whose
//! interface came back, writing what changed) runs once a second. OpenFlow
//! controller connections ([`super::openflow`]) are polled and served the
//! same way as control clients. SIGINT and
//! SIGTERM stop the loop; dropping the switch closes every port.

use super::clients::Clients;
use super::proto::{Request, Response};
use super::switch::Switch;
pub use nicflow_api::client::{abstract_name, connect, socket_path, DEFAULT_SOCKET};

use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Housekeeping period (aging, timeouts, revalidation of idle flows).
const TICK: Duration = Duration::from_secs(1);
/// Longest the loop goes without serving control connections while
/// traffic keeps it from sleeping: with the rounds' own budget
/// (`DatapathConfig::round_time`) it bounds a request's wait under any
/// load, a flood of new flows included.
const CONTROL_INTERVAL: Duration = Duration::from_millis(10);
/// How long the loop keeps spinning after the last packet on ports that
/// wake per frame (AF_XDP): long enough to catch the next packet of a
/// request/response exchange without a wakeup, short enough to cost little.
const SPIN: Duration = Duration::from_micros(50);

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
    if let Some(name) = abstract_name(path) {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        let l = UnixListener::bind_addr(&addr)?;
        l.set_nonblocking(true)?;
        return Ok(l);
    }
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

/// Before the switch is built: where this daemon pins its kernel engines
/// (`nicflow_port::pin`), so that they outlive it and the next daemon on the
/// same control socket adopts them. Without a pin root the fast path
/// stops with the daemon, as the log says.
pub fn prepare(socket: &Path) {
    use nicflow_port::pin;
    match pin::choose_root(socket) {
        Ok(Some(root)) => {
            tracing::info!(root = %root.display(), "kernel fast path pinned: it outlives the daemon");
            pin::set_root(Some(root));
        }
        Ok(None) => tracing::warn!(
            "no bpffs at /sys/fs/bpf and {} unset: the kernel fast path stops with the daemon",
            pin::ENV
        ),
        Err(e) => tracing::error!("{e}: the kernel fast path stops with the daemon"),
    }
}

/// Work an embedder adds to the loop (`nicflow vswitchd`'s OVSDB session):
/// called, without blocking, each round that served the control socket and
/// once per tick, on the loop's thread, so it changes the switch between
/// batches as a control request does.
pub trait Hook {
    fn round(&mut self, sw: &mut Switch, now: Instant, tick: bool);
    /// Descriptors that should wake the loop (appended after the ports').
    fn poll_fds(&self, _fds: &mut Vec<libc::pollfd>) {}
    /// The switch holds its configuration: pins the bridges and ports did
    /// not adopt by then are a previous daemon's leftovers. `nicflow
    /// vswitchd` starts empty and learns its bridges from the database, so
    /// until its first reconciliation a previous daemon's pinned engines
    /// (still forwarding) are not leftovers.
    fn configured(&self) -> bool {
        true
    }
}

/// Run until SIGINT/SIGTERM.
pub fn run(sw: Switch, socket: &Path) -> anyhow::Result<()> {
    run_with(sw, socket, None)
}

/// [`run`] with a [`Hook`].
pub fn run_with(
    mut sw: Switch,
    socket: &Path,
    mut hook: Option<&mut dyn Hook>,
) -> anyhow::Result<()> {
    install_signal_handlers();
    // Pins the restored configuration did not adopt (a bridge or port no
    // longer configured, an engine turned off) go before traffic resumes;
    // under a hook, once it has configured the switch.
    let mut swept = false;
    let mut sweep_if_configured = |hook: Option<&dyn Hook>| {
        if swept || !hook.is_none_or(|h| h.configured()) {
            return;
        }
        swept = true;
        let gone = nicflow_port::pin::sweep();
        if !gone.is_empty() {
            tracing::info!(
                ?gone,
                "removed pins left by a previous daemon and not adopted"
            );
        }
    };
    sweep_if_configured(hook.as_deref());
    let listener = bind(socket)?;
    tracing::info!(socket = %socket.display(), "nicflow daemon listening");
    let mut last_tick = Instant::now();
    let mut last_moved = Instant::now();
    let mut moved_last_round = false;
    let mut splb = super::splb::SplbSampler::default();
    let mut rounds_without_poll = 0u32;
    let mut last_poll = Instant::now();
    let mut budget_spent = false;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut clients = Clients::default();
    while !STOP.load(Ordering::SeqCst) {
        // While the previous round moved packets, go straight back to the
        // rings: a `poll()` that finds them non-empty is a wasted system
        // call (it was 60% of the daemon's samples under TCP load). Every
        // 64th round still polls, so the control socket is served, and so
        // does a round after one whose budget ran out (a flood) or when
        // CONTROL_INTERVAL has passed.
        let skip_poll = moved_last_round
            && rounds_without_poll < 64
            && !budget_spent
            && last_poll.elapsed() < CONTROL_INTERVAL;
        let mut polled = false;
        if skip_poll {
            rounds_without_poll += 1;
        } else {
            rounds_without_poll = 0;
            polled = true;
            last_poll = Instant::now();
            fds.clear();
            fds.push(libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            clients.poll_fds(&mut fds);
            sw.openflow_poll_fds(&mut fds);
            let mut spin = false;
            let mut deferred = sw.openflow_backlog();
            let mut ct_wait: Option<Duration> = None;
            for br in sw.bridges() {
                spin |= br.spin_worthwhile();
                deferred |= br.has_deferred_work();
                if let Some(w) = br.ct_events_wait() {
                    ct_wait = Some(ct_wait.map_or(w, |c| c.min(w)));
                }
                for fd in br.rx_fds() {
                    fds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                }
            }
            if let Some(h) = hook.as_deref() {
                h.poll_fds(&mut fds);
            }
            // Sleep as soon as a round finds nothing, except for a short spin
            // (SPIN) on ports whose descriptors wake per frame, and never with
            // transmit work left. Blocking-ring ports (TPACKET_V3) only wake
            // when a block retires, so spinning on them bought no latency and
            // cost the endpoints half a core on this 2-core machine.
            let since_tick = last_tick.elapsed();
            let timeout = if moved_last_round || deferred || (spin && last_moved.elapsed() < SPIN) {
                0
            } else {
                let to_tick = TICK.saturating_sub(since_tick);
                // splb groups are measured every few milliseconds.
                let to_splb = splb.wait_ms(Instant::now()).unwrap_or(u64::MAX);
                // The TC program's set-up reports below its wake-up mark
                // are read by the next round: sleep no longer than that.
                let to_ct = ct_wait.map_or(u128::MAX, |w| w.as_millis());
                (to_tick.as_millis().min(u128::from(to_splb)).min(to_ct) as libc::c_int)
                    .clamp(1, 100)
            };
            // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
        }
        let now = Instant::now();
        let mut moved = 0;
        budget_spent = false;
        for br in sw.bridges_mut() {
            // Upcalls are budgeted per round, as control I/O is: a flood of
            // new flows waits in the rings (or overflows them, counted)
            // instead of holding the control socket for seconds.
            br.begin_round(now);
            for _ in 0..64 {
                let n = br.run_once(now);
                moved += n;
                if n == 0 || br.round_spent() {
                    break;
                }
            }
            budget_spent |= br.round_spent();
        }
        moved_last_round = moved > 0;
        if moved_last_round {
            last_moved = now;
        }
        splb.sample(&mut sw, now);
        if polled {
            // Control I/O never waits (see `clients`): a silent or flooding
            // client cannot hold up the next round of forwarding.
            if fds[0].revents & libc::POLLIN != 0 {
                clients.accept(&listener, now);
            }
            if !clients.is_empty() {
                clients.service(&mut sw, now);
            }
            // OpenFlow connections: requests, then PACKET_IN and
            // FLOW_REMOVED queued by this round's traffic.
            sw.openflow_service(now);
            if let Some(h) = hook.as_deref_mut() {
                h.round(&mut sw, now, false);
            }
            sweep_if_configured(hook.as_deref());
        }
        if now.duration_since(last_tick) >= TICK {
            if let Some(h) = hook.as_deref_mut() {
                h.round(&mut sw, now, true);
            }
            for br in sw.bridges_mut() {
                br.tick(now);
            }
            sw.openflow_tick(now);
            sw.tick(now);
            last_tick = now;
        }
    }
    tracing::info!("stopping: closing ports");
    drop(sw);
    // Every engine and port unpinned itself; the root goes if empty.
    if let Some(root) = nicflow_port::pin::root() {
        nicflow_port::pin::remove_empty_root(&root);
    }
    if abstract_name(socket).is_none() {
        let _ = std::fs::remove_file(socket);
    }
    Ok(())
}

/// Send one request to the daemon and wait for its response.
pub fn request(socket: &Path, req: &Request) -> anyhow::Result<Response> {
    Ok(nicflow_api::client::request(socket, req)?)
}
