//! The one lab type of the experiments: what every experiment creates on
//! the machine, and removes again.
//!
//! An experiment (overlay, ipsec, microservices, and through
//! [`Testbed`](super::testbed::Testbed) conntrack, firewall and the
//! others) builds its topology out of network namespaces, veths and
//! processes (nicflow daemons, charon, OVS, xdp-redirect). A [`Lab`] holds
//! all of them under one name, so that:
//!
//! * **names** are `<prefix><pid>x<seq><tag>` ([`Lab::create`]): unique in
//!   this process, and the pid lets a later run find out whether the owner
//!   is still alive. A namespace the lab creates is `<name>-<node>`
//!   ([`Lab::ns`]); its scratch directory is `$TMPDIR/<name>`, created
//!   fresh;
//! * **teardown** happens on drop (or [`Lab::teardown`], which reports
//!   errors), in this order: SIGTERM to every process the lab started
//!   (SIGKILL after 5 s: a daemon detaches its BPF programs on SIGTERM),
//!   the switch's lab ([`nicflow::lab`], when the topology was built with
//!   it) brought down, whatever still runs in the lab's namespaces killed,
//!   the namespaces deleted, the scratch directory removed. An experiment
//!   with more to undo first (CNI DEL, OVS) does that in its own `Drop`,
//!   which runs before its `Lab` field's;
//! * **stale labs** of a run killed with SIGKILL are reaped by the next
//!   run with the same prefix ([`reap_stale`], called by [`Lab::create`]):
//!   namespaces, scratch directories, switch labs and private OVS
//!   directories whose owning pid is dead. Labs of live processes, other
//!   prefixes and other users' names are never touched.
//!
//! The experiment-specific parts (which nodes, which links, which daemon
//! configuration) stay in each experiment's module, which wraps a `Lab`.

use super::forward::interrupted;
use super::forward::ovs;
use super::overlay::rtnl_in;
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::{self, sys, LabOptions};
use nicflow::os::{self, link::VethEnd, netlink::Rtnl};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// How long a process gets between SIGTERM and SIGKILL at teardown.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// Namespaces, veths, processes and a scratch directory under one name;
/// dropping it removes them all (see the module docs).
pub struct Lab {
    name: String,
    dir: PathBuf,
    /// Namespaces this lab created (not the switch lab's).
    namespaces: Vec<String>,
    /// Processes this lab started, with a label for CPU accounting and
    /// errors.
    procs: Vec<(String, Child)>,
    /// The topology was built by [`nicflow::lab::up`] under this lab's
    /// name: [`nicflow::lab::down`] with these options at teardown.
    switch_lab: Option<LabOptions>,
    torn_down: bool,
}

/// Index of a process a [`Lab`] started ([`Lab::adopt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcId(usize);

/// `<prefix><pid>x<seq><tag>`.
fn lab_name(prefix: &str, tag: &str) -> String {
    format!(
        "{prefix}{}x{}{tag}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

/// The namespace of `node` in lab `lab`.
pub fn ns_of(lab: &str, node: &str) -> String {
    format!("{lab}-{node}")
}

/// Kill whatever still runs in namespace `ns` (SIGTERM, SIGKILL after 2 s).
fn kill_netns_procs(ns: &str) {
    if let Ok(pids) = sys::netns_pids(ns) {
        let _ = sys::stop(&pids, |_| true, Duration::from_secs(2));
    }
}

/// Whether `name` (a lab, namespace or directory name) is
/// `<prefix><pid>x...` with `pid` a dead process other than this one.
fn owner_dead(prefix: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix) else {
        return false;
    };
    // The prefix is letters only, so the digits that follow it are the
    // pid and nothing else.
    let Some((digits, _)) = rest.split_once('x') else {
        return false;
    };
    match digits.parse::<u32>() {
        Ok(pid) => pid != std::process::id() && !sys::alive(pid),
        Err(_) => false,
    }
}

/// Remove labs of `prefix` left by dead processes (SIGKILLed runs): their
/// namespaces (with what runs in them), scratch directories, switch labs
/// (`nf-<lab>-<node>` namespaces and state, through `switch_lab` options
/// when given) and private OVS directories of dead runs. Returns what was
/// removed.
pub fn reap_stale(prefix: &str, switch_lab: Option<&LabOptions>) -> Vec<String> {
    let mut done = ovs::reap_stale();
    let namespaces = sys::list_namespaces().unwrap_or_default();
    // Namespaces a bench lab created itself.
    for ns in &namespaces {
        if owner_dead(prefix, ns) {
            kill_netns_procs(ns);
            if os::netns::del(ns).is_ok() {
                done.push(format!("namespace {ns}"));
            }
        }
    }
    // Switch labs.
    if let Some(opts) = switch_lab {
        let mut labs: Vec<String> = namespaces
            .iter()
            .filter_map(|ns| {
                let rest = ns.strip_prefix("nf-")?;
                let (lab, _node) = rest.rsplit_once('-')?;
                Some(lab.to_string())
            })
            .collect();
        labs.extend(
            lab::labs(opts)
                .unwrap_or_default()
                .into_iter()
                .map(|s| s.lab),
        );
        labs.sort();
        labs.dedup();
        for l in labs {
            if owner_dead(prefix, &l) && lab::down(&l, opts).is_ok() {
                done.push(format!("lab {l}"));
            }
        }
    }
    // Scratch directories.
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if owner_dead(prefix, &n) && std::fs::remove_dir_all(e.path()).is_ok() {
                done.push(format!("directory {}", e.path().display()));
            }
        }
    }
    done
}

/// Wait until the nicflow daemon `child` answers `show` on `sock`; an
/// error says whether it exited or stayed silent for `limit` (the caller
/// adds the logs).
pub fn wait_ready(child: &mut Child, sock: &Path, limit: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            bail!("exited ({st})");
        }
        if nicflow::control::daemon::request(sock, &Request::Show).is_ok_and(|r| r.ok) {
            return Ok(());
        }
        if t0.elapsed() > limit || interrupted() {
            bail!("did not come up");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Lab {
    /// A new, empty lab for `what` (named in errors): checks that we are
    /// root, reaps stale labs of `prefix` (with `switch_lab`'s options for
    /// switch labs), and creates the scratch directory. Nothing else is
    /// created until the caller adds it, so an error here leaves nothing
    /// behind.
    pub fn create(
        what: &str,
        prefix: &str,
        tag: &str,
        switch_lab: Option<&LabOptions>,
    ) -> anyhow::Result<Lab> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("{what} creates namespaces and veths: run as root");
        }
        for r in reap_stale(prefix, switch_lab) {
            tracing::info!("removed leftovers of a dead run: {r}");
        }
        let name = lab_name(prefix, tag);
        let dir = std::env::temp_dir().join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Lab {
            name,
            dir,
            namespaces: Vec::new(),
            procs: Vec::new(),
            switch_lab: None,
            torn_down: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scratch directory (configurations, sockets, logs), removed at
    /// teardown.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The namespace of `node`.
    pub fn ns(&self, node: &str) -> String {
        ns_of(&self.name, node)
    }

    /// Create the namespace of `node` (loopback up), owned by the lab from
    /// here on, and set `sysctls` in it. Returns its name.
    pub fn add_ns(&mut self, node: &str, sysctls: &[(&str, &str)]) -> anyhow::Result<String> {
        let ns = self.ns(node);
        os::netns::add(&ns).map_err(|e| anyhow::anyhow!("{e}"))?;
        self.namespaces.push(ns.clone());
        for (k, v) in sysctls {
            sys::sysctl(Some(&ns), k, v).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Ok(ns)
    }

    /// Veth `a` in the namespace of node `an` to `b` in node `bn`'s, both
    /// ends up. (Removed with the namespaces.)
    pub fn veth(&self, a: &str, an: &str, b: &str, bn: &str) -> anyhow::Result<()> {
        veth_between(a, &self.ns(an), b, &self.ns(bn))
    }

    /// Take `child` into the lab: it gets SIGTERM at teardown.
    pub fn adopt(&mut self, label: impl Into<String>, child: Child) -> ProcId {
        self.procs.push((label.into(), child));
        ProcId(self.procs.len() - 1)
    }

    /// A process of the lab.
    pub fn child_mut(&mut self, id: ProcId) -> &mut Child {
        &mut self.procs[id.0].1
    }

    /// Its pid.
    pub fn pid(&self, id: ProcId) -> u32 {
        self.procs[id.0].1.id()
    }

    /// Start `nicflow --socket SOCK daemon --config CFG` in the namespace
    /// of `node`, stdout and stderr to `log` (`ip netns exec` semantics:
    /// the child's pid is nicflow's), owned by the lab.
    pub fn spawn_daemon(
        &mut self,
        label: impl Into<String>,
        bin: &Path,
        node: &str,
        cfg: &Path,
        sock: &Path,
        log: &Path,
    ) -> anyhow::Result<ProcId> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = sys::in_ns(Some(&self.ns(node)), &[bin.as_os_str()])
            .arg("--socket")
            .arg(sock)
            .arg("daemon")
            .arg("--config")
            .arg(cfg)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting nicflow daemon")?;
        Ok(self.adopt(label, child))
    }

    /// Start `cmd` (built by the caller, usually with `sys::in_ns`), owned
    /// by the lab.
    pub fn spawn(&mut self, label: impl Into<String>, cmd: &mut Command) -> anyhow::Result<ProcId> {
        let label = label.into();
        let child = cmd.spawn().with_context(|| format!("starting {label}"))?;
        Ok(self.adopt(label, child))
    }

    /// The topology under this lab's name was built by
    /// [`nicflow::lab::up`] with `opts`: bring it down at teardown.
    pub fn own_switch_lab(&mut self, opts: LabOptions) {
        self.switch_lab = Some(opts);
    }

    /// Tear everything down (see the module docs); idempotent. Errors are
    /// collected, not fatal: everything is attempted.
    pub fn teardown(&mut self) -> anyhow::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut errs = Vec::new();
        for (_, c) in &mut self.procs {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
        let deadline = Instant::now() + TERM_GRACE;
        for (_, c) in &mut self.procs {
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        self.procs.clear();
        if let Some(opts) = self.switch_lab.take() {
            if let Err(e) = lab::down(&self.name, &opts) {
                errs.push(e.to_string());
            }
        }
        for ns in &self.namespaces {
            kill_netns_procs(ns);
        }
        for ns in self.namespaces.drain(..) {
            if let Err(e) = os::netns::del(&ns) {
                errs.push(format!("{e}"));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if errs.is_empty() {
            Ok(())
        } else {
            bail!("tearing down {}: {}", self.name, errs.join("; "))
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!("{e:#}");
        }
    }
}

/// Veth `a` in namespace `nsa` to `b` in `nsb`, both ends up.
pub fn veth_between(a: &str, nsa: &str, b: &str, nsb: &str) -> anyhow::Result<()> {
    let end = |name: &str, ns: &str| VethEnd {
        netns: Some(ns.to_string()),
        ..VethEnd::named(name)
    };
    let mut root = Rtnl::open(None).map_err(|e| anyhow::anyhow!("{e}"))?;
    os::link::add_veth(&mut root, &end(a, nsa), &end(b, nsb))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    rtnl_in(nsa, |rt| os::link::set_up(rt, a))?;
    rtnl_in(nsb, |rt| os::link::set_up(rt, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_pid_and_stale_detection_reads_it_back() {
        let a = lab_name("nfbo", "x");
        let b = lab_name("nfbo", "x");
        assert_ne!(a, b, "one process, two labs, two names");
        assert!(a.starts_with(&format!("nfbo{}x", std::process::id())));
        // Our own labs are never stale.
        assert!(!owner_dead("nfbo", &a));
        assert!(!owner_dead("nfbo", &ns_of(&a, "h1")));
        // A pid that cannot exist (above pid_max) is dead.
        assert!(owner_dead("nfbo", "nfbo4294967295x0x-h1"));
        // Other prefixes, and names that are not ours, are left alone.
        assert!(!owner_dead("nfbo", "nfbip4294967295x0x-h1"));
        assert!(!owner_dead("nfbo", "nfbo-h1"));
        assert!(!owner_dead("nfbo", "nfbofoo"));
        assert!(!owner_dead("fw", "fwl4294967295x0"));
    }
}
