//! The lab's hands: running programs (inside namespaces too), finding and
//! stopping daemons, control requests to a switch in its namespace.
//!
//! Network configuration (namespaces, links, addresses, routes, sysctls)
//! is the OS layer's, [`nicflow_os`], which speaks netlink; the functions
//! here that name it ([`in_ns`], [`sysctl`], [`list_namespaces`],
//! [`list_links`], [`netns_pids`]) are thin adapters to it with the lab's
//! error type, kept for the benchmark harness and the CNI plugin. What
//! stays here is what needs the layers above the OS layer: daemon
//! processes and [`request_in`], which speaks the control protocol.
//!
//! Every external command goes through [`run`], which checks the exit
//! status and turns a failure into [`LabError::Command`] carrying the
//! command line and its stderr, so an error says exactly which step failed
//! and why.
//!
//! Daemons are found by their command line: a lab daemon runs with
//! `--socket <state dir>/<switch>.sock`, so a process whose argv names a
//! socket inside the lab's state directory belongs to that lab and to no
//! other, whether or not its pid made it into the state file.

use super::LabError;
use nicflow_os as os;
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A command line as text, for messages.
pub fn describe(cmd: &Command) -> String {
    let mut parts = vec![quote(cmd.get_program())];
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

fn quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+".contains(&b))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Run to completion; a non-zero exit is an error with the command's stderr.
pub fn run(cmd: &mut Command) -> Result<Output, LabError> {
    let line = describe(cmd);
    tracing::debug!("lab: {line}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Spawn {
            cmd: line.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(LabError::Command {
            cmd: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `ARGV...` inside namespace `ns`, or directly for root: what `ip netns
/// exec` does, without `ip` ([`os::netns::command`]: the child joins the
/// namespace and gets its own `/sys` before it runs). A namespace that
/// cannot be joined makes the spawn fail ([`LabError::Spawn`]).
pub fn in_ns<S: AsRef<OsStr>>(ns: Option<&str>, argv: &[S]) -> Command {
    os::netns::command(ns, argv)
}

/// Set sysctl `key` to `value` inside `ns` (a write to `/proc/sys` from a
/// thread in that namespace).
pub fn sysctl(ns: Option<&str>, key: &str, value: &str) -> Result<(), LabError> {
    Ok(os::sysctl::write(ns, key, value)?)
}

/// Whether a failure means "that object is not there": the kernel's
/// `ENODEV`/`ENOENT` from the OS layer, or `ip`'s wording for the same.
pub fn is_missing(e: &LabError) -> bool {
    match e {
        LabError::Os(e) => e.is_missing(),
        LabError::Command { stderr, .. } => {
            stderr.contains("Cannot find device")
                || stderr.contains("No such file or directory")
                || stderr.contains("does not exist")
        }
        _ => false,
    }
}

/// Names of the named namespaces (`/run/netns`), sorted.
pub fn list_namespaces() -> Result<Vec<String>, LabError> {
    Ok(os::netns::list()?)
}

pub fn namespace_exists(ns: &str) -> bool {
    os::netns::exists(ns)
}

/// Names of the root namespace's interfaces.
pub fn list_links() -> Result<Vec<String>, LabError> {
    let mut rt = os::netlink::Rtnl::open(None)?;
    Ok(os::link::list(&mut rt)?
        .into_iter()
        .map(|l| l.name)
        .collect())
}

/// The argv of process `pid`, empty if it is gone (or a zombie).
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether argv is a `nicflow daemon` whose socket or config file lies
/// inside `dir`. `env_sock` is its `NICFLOW_SOCK` (which overrides the
/// socket everywhere) and `cwd` its working directory (for relative paths).
pub fn is_lab_daemon_with(
    argv: &[String],
    env_sock: Option<&str>,
    cwd: Option<&Path>,
    dir: &Path,
) -> bool {
    let in_dir = |p: &str| {
        let p = Path::new(p);
        let abs = match (p.is_relative(), cwd) {
            (true, Some(c)) => c.join(p),
            _ => p.to_path_buf(),
        };
        abs.parent() == Some(dir)
    };
    let flag = |name: &str| {
        let eq = format!("{name}=");
        argv.iter().enumerate().any(|(i, a)| {
            (a == name && argv.get(i + 1).is_some_and(|p| in_dir(p)))
                || a.strip_prefix(eq.as_str()).is_some_and(in_dir)
        })
    };
    let serves = flag("--socket") || flag("--config") || env_sock.is_some_and(in_dir);
    serves && argv.iter().any(|a| a == "daemon")
}

/// [`is_lab_daemon_with`] from the command line alone.
pub fn is_lab_daemon(argv: &[String], dir: &Path) -> bool {
    is_lab_daemon_with(argv, None, None, dir)
}

/// `NICFLOW_SOCK` from a process's environment.
fn env_sock(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&c| c == 0).find_map(|kv| {
        kv.strip_prefix(b"NICFLOW_SOCK=")
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// Whether process `pid` is a nicflow daemon of the lab in `dir`.
fn pid_is_lab_daemon(pid: u32, dir: &Path) -> bool {
    let argv = cmdline(pid);
    if !argv.iter().any(|a| a == "daemon") {
        return false;
    }
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
    is_lab_daemon_with(&argv, env_sock(pid).as_deref(), cwd.as_deref(), dir)
}

/// Pids of running daemons whose control socket lives in `dir`.
pub fn find_daemons(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| pid != me && pid_is_lab_daemon(pid, dir))
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether `pid` still runs. Reaps it if it is our own exited child (as
/// when `up` and `down` run in one process, e.g. in tests); a zombie that
/// belongs to someone else counts as stopped.
pub fn alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG only inspects/reaps `p` if it is our child.
    unsafe { libc::waitpid(p, &mut status, libc::WNOHANG) };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the `(comm)` field, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(p) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(p, sig) };
    }
}

/// Pids of the processes inside namespace `ns` (`ip netns pids`), not
/// counting this one.
pub fn netns_pids(ns: &str) -> Result<Vec<u32>, LabError> {
    let me = std::process::id();
    Ok(os::netns::pids(ns)?
        .into_iter()
        .filter(|&p| p != me)
        .collect())
}

/// SIGTERM each of `pids` that is still a daemon of `dir`, wait up to
/// `grace` for them to exit, SIGKILL the rest and wait for those too.
pub fn stop_daemons(pids: &[u32], dir: &Path, grace: Duration) -> StopResult {
    // Re-check each pid right before signalling it: a recorded pid may
    // have been reused by an unrelated process since.
    stop(pids, |p| pid_is_lab_daemon(p, dir), grace)
}

/// SIGTERM each of `pids` that is alive and for which `ours` holds, wait up
/// to `grace` for them to exit, SIGKILL the rest and wait for those too.
pub fn stop(pids: &[u32], ours: impl Fn(u32) -> bool, grace: Duration) -> StopResult {
    let ours: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|&p| alive(p) && ours(p))
        .collect();
    for &p in &ours {
        signal(p, libc::SIGTERM);
    }
    let wait = |pids: &[u32], limit: Duration| -> Vec<u32> {
        let deadline = Instant::now() + limit;
        loop {
            let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
            if left.is_empty() || Instant::now() >= deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let stubborn = wait(&ours, grace);
    for &p in &stubborn {
        tracing::warn!(pid = p, "lab process ignored SIGTERM; sending SIGKILL");
        signal(p, libc::SIGKILL);
    }
    let undead = wait(&stubborn, Duration::from_secs(2));
    StopResult {
        stopped: ours,
        killed: stubborn,
        undead,
    }
}

/// What [`stop`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopResult {
    /// Running processes that were sent SIGTERM.
    pub stopped: Vec<u32>,
    /// Those that then needed SIGKILL.
    pub killed: Vec<u32>,
    /// Those still running after SIGKILL.
    pub undead: Vec<u32>,
}

/// The last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A control request to a lab daemon. A DPU-mode switch's socket
/// (`@NAME`, abstract) exists only in the switch's namespace, so the
/// request is made from a thread that joined that namespace first
/// ([`os::netns::run_in_with`]: `setns` changes only the calling thread).
/// This stays in the lab, not the OS layer: it speaks the control
/// protocol, a layer above.
pub fn request_in(
    netns: Option<&str>,
    socket: &Path,
    req: &nicflow_api::proto::Request,
) -> anyhow::Result<nicflow_api::proto::Response> {
    use nicflow_api::client::request;
    let abstract_socket = socket.as_os_str().to_string_lossy().starts_with('@');
    let (Some(ns), true) = (netns, abstract_socket) else {
        return Ok(request(socket, req)?);
    };
    os::netns::run_in_with(ns, || Ok(request(socket, req)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn daemon_detection_is_scoped_to_the_state_dir() {
        let dir = Path::new("/run/nicflow/lab/t1");
        assert!(is_lab_daemon(
            &argv("/usr/bin/nicflow --socket /run/nicflow/lab/t1/sw1.sock daemon --config /run/nicflow/lab/t1/sw1.toml"),
            dir
        ));
        assert!(is_lab_daemon(
            &argv("ip netns exec nf-t1-sw1 nicflow daemon --socket=/run/nicflow/lab/t1/sw1.sock"),
            dir
        ));
        // Another lab, a client verb, a socket elsewhere.
        assert!(!is_lab_daemon(
            &argv("nicflow --socket /run/nicflow/lab/t10/sw1.sock daemon"),
            dir
        ));
        assert!(!is_lab_daemon(
            &argv("nicflow --socket /run/nicflow/lab/t1/sw1.sock show"),
            dir
        ));
        assert!(!is_lab_daemon(
            &argv("nicflow --socket /run/nicflow/lab/t1/x/sw1.sock daemon"),
            dir
        ));
        assert!(!is_lab_daemon(&argv("nicflow daemon"), dir));
    }

    #[test]
    fn command_failures_name_the_command_and_stderr() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo boom >&2; exit 3"]);
        match run(&mut c) {
            Err(LabError::Command { cmd, stderr, .. }) => {
                assert_eq!(cmd, "sh -c 'echo boom >&2; exit 3'");
                assert_eq!(stderr, "boom");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run(&mut Command::new("/nonexistent/nicflow-lab-test")),
            Err(LabError::Spawn { .. })
        ));
    }

    #[test]
    fn missing_objects_are_recognised_by_errno() {
        let os_err = |errno| {
            LabError::Os(os::OsError::Netlink {
                op: "RTM_DELLINK",
                target: "dev nf0a".into(),
                source: std::io::Error::from_raw_os_error(errno),
            })
        };
        assert!(is_missing(&os_err(libc::ENODEV)));
        assert!(is_missing(&os_err(libc::ENOENT)));
        assert!(!is_missing(&os_err(libc::EPERM)));
        assert!(list_namespaces().is_ok());
        assert!(list_links().unwrap().iter().any(|l| l == "lo"));
    }

    #[test]
    fn our_own_process_is_alive_and_a_bogus_pid_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }
}
