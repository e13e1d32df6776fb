//! A real two-chassis OVN lab: Debian's ovsdb-server, ovn-northd and
//! ovn-controller programming a virtual switch (ovs-vswitchd, or `nicflow
//! vswitchd` in its place) on each of two "hypervisors" (network
//! namespaces), with Geneve between them over a veth underlay.
//!
//! Why it exists: issue 30 makes nicflow a drop-in ovs-vswitchd under OVN.
//! The only honest proof is the same lab, the same logical topology and the
//! same connectivity matrix with ovs-vswitchd (the baseline) and with nicflow
//! on one or both chassis. The vswitch is therefore a parameter per chassis
//! ([`Vswitch`]); everything else is the real OVN stack.
//!
//! Layout (every name carries the lab's unique prefix `nfovn<pid>x<n>`):
//!
//! ```text
//!  central ns: NB + SB ovsdb-server (unix sockets in the lab dir, SB also on
//!              ptcp:6642:198.18.1.1), ovn-northd, Linux bridge `mgmt`
//!        |  198.18.1.0/24 (control: ovn-controller -> SB), kernel-routed
//!  ch1 ns ------------------------------ ch2 ns
//!   ovsdb-server, vswitch, ovn-controller (each with its own OVS_RUNDIR)
//!   br-phy (netdev): eth1 + internal port 198.18.0.11/24 <-veth-> 198.18.0.12
//!   br-int (netdev): tunnels (geneve, made by ovn-controller), VM ports
//!   br-ex  (ch1 only): `exth` to the external host (localnet `physnet`)
//! ```
//!
//! OVS's userspace datapath tunnels through its own routing: the Geneve
//! endpoint address sits on `br-phy`'s internal port and the underlay veth
//! is a port of `br-phy` (OVS's "userspace tunnelling" layout, as in OVS's
//! `tests/system-userspace-*.at`); the kernel has no Geneve module here and
//! is not used for it. Every veth end OVS reads with AF_PACKET has its TX
//! checksum offload off (OVS's tests do the same): a partial checksum from
//! the kernel would reach the wire unfinished.
//!
//! The logical topology ([`OvnLab::configure_nb`]): switches `ls1`
//! (198.18.10.0/24, 2001:db8:10::/64) and `ls2` (198.18.20.0/24), router
//! `lr1` with a distributed gateway port on `ext` (198.18.30.0/24, gateway
//! chassis ch1, SNAT to 198.18.30.1), a localnet port to the external host
//! 198.18.30.100, ACLs on `ls2` (allow-related ICMP and TCP 8080 to vm4, a
//! logged drop of the rest), a TCP load balancer 198.18.200.10:80 -> vm2 and
//! vm4 port 8080, and native DHCPv4 for vm3. See [`VMS`].
//!
//! Cleanup: [`OvnLab`] owns what it made. Dropping it (also on a panic)
//! kills the processes it started (by pid, then whatever still runs inside
//! its own namespaces), deletes its namespaces and its directory. Nothing
//! outside the prefix is touched.

use crate::lab::{sys, LabError};
use nicflow_os as os;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
pub const SB_SCHEMA: &str = "/usr/share/ovn/ovn-sb.ovsschema";
pub const VSWITCH_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Every namespace and directory of an OVN lab starts with this.
pub const PREFIX: &str = "nfovn";

/// Control network (central <-> chassis), kernel-routed.
pub const CENTRAL_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
/// Geneve endpoint of chassis `i` (0-based): on br-phy's internal port.
pub fn encap_ip(chassis: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 11 + chassis as u8)
}
/// The external host behind the localnet port (gateway chassis ch1).
pub const EXT_HOST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 30, 100);
/// The router's address on the external network: what SNAT rewrites to.
pub const SNAT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 30, 1);
/// Load balancer VIP (TCP port [`LB_PORT`]) -> backends on [`BACKEND_PORT`].
pub const LB_VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 10);
pub const LB_PORT: u16 = 80;
pub const BACKEND_PORT: u16 = 8080;
/// A TCP port on vm4 that ls2's ACLs drop (and log as `drop_vm4`).
pub const DENIED_PORT: u16 = 9999;
/// The name of the logged drop ACL, as ovn-controller logs it.
pub const DROP_ACL_NAME: &str = "drop_vm4";

/// One VM of the lab: a namespace whose `eth0` is a veth whose other end is
/// a port of its chassis' br-int with `external_ids:iface-id=<name>`.
#[derive(Clone, Copy, Debug)]
pub struct Vm {
    pub name: &'static str,
    pub switch: &'static str,
    /// 0-based chassis index.
    pub chassis: usize,
    pub mac: &'static str,
    pub ip4: Ipv4Addr,
    pub ip6: Option<Ipv6Addr>,
    /// Gets its address from OVN's native DHCP instead of statically.
    pub dhcp: bool,
    /// Serves HTTP on [`BACKEND_PORT`] as a load balancer backend.
    pub lb_backend: bool,
}

const fn v6(last: u16) -> Option<Ipv6Addr> {
    Some(Ipv6Addr::new(0x2001, 0xdb8, 0x10, 0, 0, 0, 0, last))
}

/// The VMs: ls1 has one on each chassis plus the DHCP client on ch1, ls2
/// one on ch2 (behind ACLs).
pub const VMS: [Vm; 4] = [
    Vm {
        name: "vm1",
        switch: "ls1",
        chassis: 0,
        mac: "02:00:00:00:10:11",
        ip4: Ipv4Addr::new(198, 18, 10, 11),
        ip6: v6(0x11),
        dhcp: false,
        lb_backend: false,
    },
    Vm {
        name: "vm2",
        switch: "ls1",
        chassis: 1,
        mac: "02:00:00:00:10:12",
        ip4: Ipv4Addr::new(198, 18, 10, 12),
        ip6: v6(0x12),
        dhcp: false,
        lb_backend: true,
    },
    Vm {
        name: "vm3",
        switch: "ls1",
        chassis: 0,
        mac: "02:00:00:00:10:13",
        ip4: Ipv4Addr::new(198, 18, 10, 13),
        ip6: None,
        dhcp: true,
        lb_backend: false,
    },
    Vm {
        name: "vm4",
        switch: "ls2",
        chassis: 1,
        mac: "02:00:00:00:20:14",
        ip4: Ipv4Addr::new(198, 18, 20, 14),
        ip6: None,
        dhcp: false,
        lb_backend: true,
    },
];

/// The VM named `name`.
pub fn vm(name: &str) -> Option<&'static Vm> {
    VMS.iter().find(|v| v.name == name)
}

/// Which program is a chassis' vswitch daemon. Both are started the same way
/// (`PROG [vswitchd] unix:$OVS_RUNDIR/db.sock --pidfile --detach --log-file`
/// with OVS_RUNDIR/OVS_LOGDIR set), so either can take either chassis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vswitch {
    /// Debian's ovs-vswitchd, bridges with `datapath_type=netdev`.
    Ovs,
    /// `nicflow vswitchd` from this binary.
    Nicflow(PathBuf),
}

impl Vswitch {
    pub fn label(&self) -> &'static str {
        match self {
            Vswitch::Ovs => "ovs-vswitchd",
            Vswitch::Nicflow(_) => "nicflow",
        }
    }

    fn argv(&self, db: &str) -> Vec<OsString> {
        let mut v: Vec<OsString> = match self {
            Vswitch::Ovs => vec!["ovs-vswitchd".into()],
            Vswitch::Nicflow(bin) => vec![bin.into(), "vswitchd".into()],
        };
        v.extend(
            [db, "--pidfile", "--detach", "--log-file"]
                .iter()
                .map(OsString::from),
        );
        v
    }
}

/// A chassis mix by name: `ovs` (both ovs-vswitchd), `nicflow` (both
/// nicflow), `mixed` (nicflow on ch1, ovs-vswitchd on ch2).
pub fn vswitch_mix(mode: &str, nicflow_bin: &Path) -> Result<[Vswitch; 2], OvnError> {
    let n = || Vswitch::Nicflow(nicflow_bin.to_path_buf());
    match mode {
        "ovs" => Ok([Vswitch::Ovs, Vswitch::Ovs]),
        "nicflow" => Ok([n(), n()]),
        "mixed" => Ok([n(), Vswitch::Ovs]),
        other => Err(OvnError::Invalid(format!(
            "vswitch mix `{other}`: expected ovs, nicflow or mixed"
        ))),
    }
}

/// Everything that can go wrong in the OVN lab.
#[derive(Debug, thiserror::Error)]
pub enum OvnError {
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error(transparent)]
    Os(#[from] os::OsError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "not installed: {0} (Debian: apt-get install ovn-central ovn-host openvswitch-switch)"
    )]
    Missing(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: not within {secs:.1} s; {detail}")]
    Timeout {
        what: String,
        secs: f64,
        detail: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> OvnError + '_ {
    move |source| OvnError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The programs and schemas the lab needs, missing ones listed.
pub fn missing_programs(vswitch: &[Vswitch]) -> Vec<String> {
    let mut progs = vec![
        "ovsdb-server",
        "ovsdb-tool",
        "ovs-vsctl",
        "ovs-ofctl",
        "ovs-appctl",
        "ovn-northd",
        "ovn-controller",
        "ovn-nbctl",
        "ovn-sbctl",
    ];
    if vswitch.contains(&Vswitch::Ovs) {
        progs.push("ovs-vswitchd");
    }
    let mut missing: Vec<String> = progs
        .into_iter()
        .filter(|p| which(p).is_none())
        .map(str::to_string)
        .collect();
    for s in [NB_SCHEMA, SB_SCHEMA, VSWITCH_SCHEMA] {
        if !Path::new(s).is_file() {
            missing.push(s.to_string());
        }
    }
    missing
}

/// `prog` on PATH (or /usr/sbin, /sbin, where Debian puts the daemons).
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// How to build the lab.
#[derive(Clone, Debug)]
pub struct OvnLabSpec {
    /// The vswitch daemon of ch1 and ch2.
    pub vswitch: [Vswitch; 2],
    /// Log every OpenFlow message the vswitch receives (`vlog/set
    /// vconn:dbg` on ovs-vswitchd, set before ovn-controller connects;
    /// ovs-vswitchd chassis only), for [`openflow_message_types`].
    pub debug_openflow: bool,
    /// Parent of the lab directory (default: the system temp dir).
    pub dir_root: PathBuf,
    /// Keep namespaces, daemons and files when dropped (debugging).
    pub keep: bool,
    /// `external_ids:ovn-ofctrl-wait-before-clear` (ms) on every chassis:
    /// how long a (re)started ovn-controller computes before it replaces
    /// the switch's flows. OVN's default (0) clears br-int at once after a
    /// restart and leaves the data path without flows until the new ones
    /// are in; OVN recommends setting it where restarts must be hitless.
    pub wait_before_clear_ms: Option<u32>,
}

impl OvnLabSpec {
    pub fn new(vswitch: [Vswitch; 2]) -> OvnLabSpec {
        OvnLabSpec {
            vswitch,
            debug_openflow: false,
            dir_root: std::env::temp_dir(),
            keep: false,
            wait_before_clear_ms: None,
        }
    }
}

/// How long the NB topology took to take effect ([`OvnLab::install_topology`]).
#[derive(Clone, Copy, Debug)]
pub struct InstallTiming {
    /// Running the ovn-nbctl commands.
    pub nbctl: Duration,
    /// From the first nbctl command to every VM port `ovn-installed`.
    pub installed: Duration,
    /// From the first nbctl command to pings passing (same chassis, across
    /// chassis, through the router).
    pub ready: Duration,
}

/// The daemons of a chassis, for [`OvnLab::kill_chassis_daemon`] and
/// [`OvnLab::start_chassis_daemon`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChassisDaemon {
    /// The chassis' own ovsdb-server (the Open_vSwitch database).
    OvsdbServer,
    /// ovn-controller.
    OvnController,
    /// The vswitch of the mix: ovs-vswitchd or `nicflow vswitchd`.
    Vswitch,
}

impl ChassisDaemon {
    /// The stem of its pid file (and log) in the chassis directory.
    pub fn pid_name(self) -> &'static str {
        match self {
            ChassisDaemon::OvsdbServer => "ovsdb-server",
            ChassisDaemon::OvnController => "ovn-controller",
            ChassisDaemon::Vswitch => "ovs-vswitchd",
        }
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A running lab. Dropping it tears everything down.
pub struct OvnLab {
    prefix: String,
    dir: PathBuf,
    vswitch: [Vswitch; 2],
    keep: bool,
    /// Namespaces created (recorded before creation).
    namespaces: Vec<String>,
    /// Pid files of the daemons started (read at teardown).
    pidfiles: Vec<PathBuf>,
    /// Children started in the background (servers, clients).
    children: Vec<Child>,
    topology: bool,
}

impl OvnLab {
    /// Central node and both chassis up, chassis registered in the SB
    /// database. No logical topology yet ([`OvnLab::install_topology`]).
    pub fn up(spec: &OvnLabSpec) -> Result<OvnLab, OvnError> {
        let missing = missing_programs(&spec.vswitch);
        if !missing.is_empty() {
            return Err(OvnError::Missing(missing.join(", ")));
        }
        reap_stale();
        let prefix = format!(
            "{PREFIX}{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = spec.dir_root.join(&prefix);
        let mut lab = OvnLab {
            prefix,
            dir,
            vswitch: spec.vswitch.clone(),
            keep: spec.keep,
            namespaces: Vec::new(),
            pidfiles: Vec::new(),
            children: Vec::new(),
            topology: false,
        };
        std::fs::create_dir_all(&lab.dir).map_err(io_err(&lab.dir))?;
        if lab.vswitch.iter().any(|v| matches!(v, Vswitch::Nicflow(_))) {
            lab.mount_pin_fs();
        }
        lab.build_underlay()?;
        lab.start_central()?;
        for ch in 0..2 {
            lab.start_chassis(ch, spec.debug_openflow, spec.wait_before_clear_ms)?;
        }
        lab.wait_chassis_registered(Duration::from_secs(30))?;
        Ok(lab)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A bpffs of the lab's own (`<dir>/bpf`), mounted in the caller's
    /// mount namespace so that every `ip netns exec`'d daemon sees it: a
    /// nicflow chassis pins its kernel engine there (`NICFLOW_PIN_ROOT`,
    /// one subdirectory per chassis), so, as on a host, its TC engine keeps
    /// forwarding while the daemon is dead and a restarted daemon adopts
    /// it (docs/offload.md, "What outlives the daemon"). Without it a
    /// daemon in a private mount namespace pins nothing. A mount failure is
    /// logged and the lab runs without pins.
    fn mount_pin_fs(&mut self) {
        let bpf = self.dir.join("bpf");
        if std::fs::create_dir_all(&bpf).is_err() {
            return;
        }
        let target = match std::ffi::CString::new(bpf.as_os_str().as_encoded_bytes()) {
            Ok(t) => t,
            Err(_) => return,
        };
        // SAFETY: plain mount(2) with NUL-terminated strings that outlive it.
        let r = unsafe {
            libc::mount(
                c"bpf".as_ptr(),
                target.as_ptr(),
                c"bpf".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            tracing::warn!(
                "ovn lab: no bpffs at {} ({}): nicflow chassis pin nothing",
                bpf.display(),
                std::io::Error::last_os_error()
            );
            return;
        }
        for i in 0..2 {
            let _ = std::fs::create_dir_all(bpf.join(Self::chassis_name(i)));
        }
    }

    /// Chassis `i`'s pin root, when the lab has its bpffs.
    pub fn pin_root(&self, i: usize) -> Option<PathBuf> {
        let p = self.dir.join("bpf").join(Self::chassis_name(i));
        p.is_dir().then_some(p)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn vswitch(&self, chassis: usize) -> &Vswitch {
        &self.vswitch[chassis]
    }

    /// The namespace of node `node` (`central`, `ch1`, `ch2`, `ext`, `vm1`...).
    pub fn ns(&self, node: &str) -> String {
        format!("{}-{node}", self.prefix)
    }

    /// Chassis `i`'s name (system-id) and namespace node: `ch1`, `ch2`.
    pub fn chassis_name(i: usize) -> String {
        format!("ch{}", i + 1)
    }

    /// OVS_RUNDIR (= DBDIR = LOGDIR, and OVN's) of chassis `i`.
    /// The control socket of chassis `i`'s `nicflow vswitchd` (for the
    /// nicflow CLI: `nicflow --socket PATH dump-flows br-int`).
    pub fn nicflow_socket(&self, i: usize) -> PathBuf {
        self.chassis_dir(i).join("nicflow.sock")
    }

    pub fn chassis_dir(&self, i: usize) -> PathBuf {
        self.dir.join(Self::chassis_name(i))
    }

    pub fn central_dir(&self) -> PathBuf {
        self.dir.join("central")
    }

    fn add_ns(&mut self, node: &str) -> Result<String, OvnError> {
        let ns = self.ns(node);
        self.namespaces.push(ns.clone());
        os::netns::add(&ns)?;
        Ok(ns)
    }

    fn build_underlay(&mut self) -> Result<(), OvnError> {
        let central = self.add_ns("central")?;
        let ch = [self.add_ns("ch1")?, self.add_ns("ch2")?];
        let ext = self.add_ns("ext")?;
        let mut root = os::netlink::Rtnl::open(None)?;
        // Control network: a Linux bridge in central, a veth to each chassis.
        let mut rc = os::netlink::Rtnl::open(Some(&central))?;
        os::link::add_bridge(&mut rc, "mgmt")?;
        os::addr::add(&mut rc, "mgmt", IpAddr::V4(CENTRAL_IP), 24, false)?;
        os::link::set_up(&mut rc, "mgmt")?;
        for (i, chns) in ch.iter().enumerate() {
            let port = format!("m{}", i + 1);
            os::link::add_veth(
                &mut root,
                &end(&port, &central, None, None),
                &end("mgmt", chns, None, None),
            )?;
            os::link::set_master(&mut rc, &port, "mgmt")?;
            os::link::set_up(&mut rc, &port)?;
            let mut r = os::netlink::Rtnl::open(Some(chns))?;
            let ip = Ipv4Addr::new(198, 18, 1, 11 + i as u8);
            os::addr::add(&mut r, "mgmt", IpAddr::V4(ip), 24, false)?;
            os::link::set_up(&mut r, "mgmt")?;
        }
        // Underlay: one veth between the chassis, each end a port of br-phy.
        // Jumbo MTU so that Geneve-encapsulated 1500-byte VM frames fit.
        os::link::add_veth(
            &mut root,
            &end("eth1", &ch[0], Some(9000), None),
            &end("eth1", &ch[1], Some(9000), None),
        )?;
        for chns in &ch {
            let mut r = os::netlink::Rtnl::open(Some(chns))?;
            os::link::set_up(&mut r, "eth1")?;
            tx_csum_off(chns, "eth1")?;
        }
        // External host, on ch1's br-ex (the localnet `physnet`).
        os::link::add_veth(
            &mut root,
            &end("eth0", &ext, None, None),
            &end("exth", &ch[0], None, None),
        )?;
        let mut re = os::netlink::Rtnl::open(Some(&ext))?;
        os::addr::add(&mut re, "eth0", IpAddr::V4(EXT_HOST_IP), 24, false)?;
        os::link::set_up(&mut re, "eth0")?;
        tx_csum_off(&ext, "eth0")?;
        let mut r1 = os::netlink::Rtnl::open(Some(&ch[0]))?;
        os::link::set_up(&mut r1, "exth")?;
        tx_csum_off(&ch[0], "exth")?;
        Ok(())
    }

    /// `ovsdb-tool create DB SCHEMA`.
    fn create_db(db: &Path, schema: &str) -> Result<(), OvnError> {
        let mut c = Command::new("ovsdb-tool");
        c.arg("create").arg(db).arg(schema);
        sys::run(&mut c)?;
        Ok(())
    }

    /// Start a self-daemonizing program in `ns` with `env`, record its pid
    /// file, and wait until the file names a live process.
    fn start_daemon(
        &mut self,
        ns: &str,
        argv: &[OsString],
        env: &[(&str, &Path)],
        pidfile: PathBuf,
    ) -> Result<u32, OvnError> {
        self.pidfiles.push(pidfile.clone());
        let mut c = sys::in_ns(Some(ns), argv);
        for (k, v) in env {
            c.env(k, v);
        }
        sys::run(&mut c)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = read_pid(&pidfile) {
                if sys::alive(pid) {
                    return Ok(pid);
                }
            }
            if Instant::now() > deadline {
                return Err(OvnError::Timeout {
                    what: format!(
                        "{} pid file {}",
                        argv[0].to_string_lossy(),
                        pidfile.display()
                    ),
                    secs: 10.0,
                    detail: "the daemon did not stay up".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start_central(&mut self) -> Result<(), OvnError> {
        let c = self.central_dir();
        std::fs::create_dir_all(&c).map_err(io_err(&c))?;
        let ns = self.ns("central");
        for (db, schema, port) in [("nb", NB_SCHEMA, 6641), ("sb", SB_SCHEMA, 6642)] {
            let file = c.join(format!("{db}.db"));
            Self::create_db(&file, schema)?;
            let argv: Vec<OsString> = vec![
                "ovsdb-server".into(),
                format!("--remote=punix:{}", c.join(format!("{db}.sock")).display()).into(),
                format!("--remote=ptcp:{port}:{CENTRAL_IP}").into(),
                format!("--pidfile={}", c.join(format!("{db}.pid")).display()).into(),
                format!("--unixctl={}", c.join(format!("{db}.ctl")).display()).into(),
                format!("--log-file={}", c.join(format!("{db}.log")).display()).into(),
                "--detach".into(),
                file.into(),
            ];
            self.start_daemon(&ns, &argv, &[], c.join(format!("{db}.pid")))?;
        }
        let argv: Vec<OsString> = vec![
            "ovn-northd".into(),
            format!("--ovnnb-db=unix:{}", c.join("nb.sock").display()).into(),
            format!("--ovnsb-db=unix:{}", c.join("sb.sock").display()).into(),
            format!("--pidfile={}", c.join("northd.pid").display()).into(),
            format!("--unixctl={}", c.join("northd.ctl").display()).into(),
            format!("--log-file={}", c.join("northd.log").display()).into(),
            "--detach".into(),
        ];
        self.start_daemon(&ns, &argv, &[("OVN_RUNDIR", &c)], c.join("northd.pid"))?;
        Ok(())
    }

    /// The OVS/OVN directory variables of chassis `i`.
    fn chassis_env(&self, i: usize) -> Vec<(&'static str, PathBuf)> {
        let d = self.chassis_dir(i);
        [
            "OVS_RUNDIR",
            "OVS_DBDIR",
            "OVS_LOGDIR",
            "OVS_SYSCONFDIR",
            "OVN_RUNDIR",
            "OVN_DBDIR",
            "OVN_LOGDIR",
            "OVN_SYSCONFDIR",
        ]
        .into_iter()
        .map(|k| (k, d.clone()))
        .collect()
    }

    fn start_chassis(
        &mut self,
        i: usize,
        debug_openflow: bool,
        wait_before_clear_ms: Option<u32>,
    ) -> Result<(), OvnError> {
        let d = self.chassis_dir(i);
        std::fs::create_dir_all(&d).map_err(io_err(&d))?;
        let ns = self.ns(&Self::chassis_name(i));
        Self::create_db(&d.join("conf.db"), VSWITCH_SCHEMA)?;
        self.start_chassis_daemon(i, ChassisDaemon::OvsdbServer)?;
        self.vsctl_nowait(i, &["init"])?;
        self.start_chassis_daemon(i, ChassisDaemon::Vswitch)?;
        // ovs-appctl speaks to ovs-vswitchd's unixctl socket; nicflow's
        // vswitchd is not asked for it.
        if debug_openflow && self.vswitch[i] == Vswitch::Ovs {
            // Before ovn-controller connects: every message it sends is logged.
            // vconn logs messages under a rate limit (50/min): lift it, or
            // the counts (and rare types) go missing.
            self.appctl(i, "ovs-vswitchd", &["vlog/set", "vconn:dbg"])?;
            self.appctl(i, "ovs-vswitchd", &["vlog/disable-rate-limit", "vconn"])?;
        }
        if self.vswitch[i] == Vswitch::Ovs {
            self.vsctl(
                i,
                &[
                    "add-br",
                    "br-phy",
                    "--",
                    "set",
                    "bridge",
                    "br-phy",
                    "datapath_type=netdev",
                    "--",
                    "add-port",
                    "br-phy",
                    "eth1",
                    "--",
                    "set",
                    "interface",
                    "br-phy",
                    "mtu_request=9000",
                ],
            )?;
            let mut r = os::netlink::Rtnl::open(Some(&ns))?;
            os::addr::add(&mut r, "br-phy", IpAddr::V4(encap_ip(i)), 24, false)?;
            os::link::set_up(&mut r, "br-phy")?;
        } else {
            // nicflow vswitchd does not yet send tunnel packets out through
            // a bridge's internal port (the br-phy layout): its Geneve
            // endpoint address sits on the underlay veth itself, and the
            // kernel route to the peer names that veth.
            let mut r = os::netlink::Rtnl::open(Some(&ns))?;
            os::addr::add(&mut r, "eth1", IpAddr::V4(encap_ip(i)), 24, false)?;
        }
        self.vsctl(
            i,
            &[
                "add-br",
                "br-int",
                "--",
                "set",
                "bridge",
                "br-int",
                "datapath_type=netdev",
                "fail-mode=secure",
                "other-config:disable-in-band=true",
            ],
        )?;
        let name = Self::chassis_name(i);
        let mut ids = vec![
            format!("external_ids:system-id={name}"),
            format!("external_ids:hostname={name}"),
            format!("external_ids:ovn-remote=tcp:{CENTRAL_IP}:6642"),
            "external_ids:ovn-encap-type=geneve".to_string(),
            format!("external_ids:ovn-encap-ip={}", encap_ip(i)),
            "external_ids:ovn-bridge-datapath-type=netdev".to_string(),
        ];
        if let Some(ms) = wait_before_clear_ms {
            ids.push(format!("external_ids:ovn-ofctrl-wait-before-clear={ms}"));
        }
        if i == 0 {
            self.vsctl(
                i,
                &[
                    "add-br",
                    "br-ex",
                    "--",
                    "set",
                    "bridge",
                    "br-ex",
                    "datapath_type=netdev",
                    "--",
                    "add-port",
                    "br-ex",
                    "exth",
                ],
            )?;
            ids.push("external_ids:ovn-bridge-mappings=physnet:br-ex".into());
        }
        let mut args = vec!["set", "open_vswitch", "."];
        args.extend(ids.iter().map(String::as_str));
        self.vsctl(i, &args)?;
        self.start_chassis_daemon(i, ChassisDaemon::OvnController)?;
        Ok(())
    }

    /// Start one of chassis `i`'s daemons as the lab starts it (the same
    /// arguments and environment every time, so a restart after
    /// [`OvnLab::kill_chassis_daemon`] is the same daemon coming back).
    /// Returns its pid once its pid file names a live process.
    pub fn start_chassis_daemon(&mut self, i: usize, d: ChassisDaemon) -> Result<u32, OvnError> {
        let dir = self.chassis_dir(i);
        let ns = self.ns(&Self::chassis_name(i));
        let mut env = self.chassis_env(i);
        let db = format!("unix:{}", dir.join("db.sock").display());
        let argv: Vec<OsString> = match d {
            ChassisDaemon::OvsdbServer => vec![
                "ovsdb-server".into(),
                format!("--remote=punix:{}", dir.join("db.sock").display()).into(),
                "--pidfile".into(),
                "--detach".into(),
                "--log-file".into(),
                dir.join("conf.db").into(),
            ],
            ChassisDaemon::Vswitch => {
                // nicflow's own control socket defaults to one path for the
                // whole host: each chassis gets its own, in its directory.
                env.push(("NICFLOW_SOCK", self.nicflow_socket(i)));
                if let Some(root) = self.pin_root(i) {
                    env.push(("NICFLOW_PIN_ROOT", root));
                }
                self.vswitch[i].argv(&db)
            }
            ChassisDaemon::OvnController => vec![
                "ovn-controller".into(),
                db.into(),
                "--pidfile".into(),
                "--detach".into(),
                "--log-file".into(),
            ],
        };
        let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();
        let pidfile = dir.join(format!("{}.pid", d.pid_name()));
        self.start_daemon(&ns, &argv, &env, pidfile)
    }

    /// `kill -9` one of chassis `i`'s daemons (by its pid file) and wait
    /// until it is gone; its pid file stays behind, stale, as after a
    /// crash. Returns the pid killed.
    pub fn kill_chassis_daemon(&mut self, i: usize, d: ChassisDaemon) -> Result<u32, OvnError> {
        let name = d.pid_name();
        let pid = self
            .chassis_pid(i, name)
            .filter(|&p| sys::alive(p))
            .ok_or_else(|| OvnError::Invalid(format!("ch{}: {name} is not running", i + 1)))?;
        let ns = self.ns(&Self::chassis_name(i));
        // Only a process of this lab's chassis namespace is signalled.
        if !sys::netns_pids(&ns)?.contains(&pid) {
            return Err(OvnError::Invalid(format!(
                "ch{}: pid {pid} of {name}.pid is not in {ns}",
                i + 1
            )));
        }
        if let Ok(p) = libc::pid_t::try_from(pid) {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        wait_for(
            &format!("ch{} {name} (pid {pid}) gone", i + 1),
            Duration::from_secs(10),
            || {
                Ok((!sys::alive(pid))
                    .then_some(())
                    .ok_or("still alive".to_string()))
            },
        )?;
        Ok(pid)
    }

    fn wait_chassis_registered(&self, limit: Duration) -> Result<(), OvnError> {
        wait_for("both chassis in the SB Chassis table", limit, || {
            let out = self.sbctl(&["--bare", "--columns=name", "list", "chassis"])?;
            let names: Vec<&str> = out.split_whitespace().collect();
            Ok((names.contains(&"ch1") && names.contains(&"ch2"))
                .then_some(())
                .ok_or(format!("chassis registered: {names:?}")))
        })
    }

    fn tool_in_chassis(&self, i: usize, prog: &str, args: &[&str]) -> Result<String, OvnError> {
        let mut c = Command::new(prog);
        c.args(args);
        for (k, v) in self.chassis_env(i) {
            c.env(k, v);
        }
        Ok(stdout(sys::run(&mut c)?))
    }

    /// `ovs-vsctl --timeout=30 ARGS` against chassis `i`'s database (waits
    /// for the vswitch to apply the change, as ovs-vsctl does).
    pub fn vsctl(&self, i: usize, args: &[&str]) -> Result<String, OvnError> {
        let mut a = vec!["--timeout=30"];
        a.extend_from_slice(args);
        self.tool_in_chassis(i, "ovs-vsctl", &a)
    }

    fn vsctl_nowait(&self, i: usize, args: &[&str]) -> Result<String, OvnError> {
        let mut a = vec!["--no-wait", "--timeout=30"];
        a.extend_from_slice(args);
        self.tool_in_chassis(i, "ovs-vsctl", &a)
    }

    /// `ovs-ofctl ARGS` on chassis `i` (`br-int` resolves to its
    /// `$OVS_RUNDIR/br-int.mgmt`).
    pub fn ofctl(&self, i: usize, args: &[&str]) -> Result<String, OvnError> {
        self.tool_in_chassis(i, "ovs-ofctl", args)
    }

    /// `ovs-appctl -t TARGET ARGS` on chassis `i` (TARGET: `ovs-vswitchd`,
    /// `ovn-controller`, found through the pid file in the chassis dir).
    pub fn appctl(&self, i: usize, target: &str, args: &[&str]) -> Result<String, OvnError> {
        let mut a = vec!["-t", target];
        a.extend_from_slice(args);
        self.tool_in_chassis(i, "ovs-appctl", &a)
    }

    /// `ovn-nbctl ARGS` against the lab's NB database.
    pub fn nbctl(&self, args: &[&str]) -> Result<String, OvnError> {
        let db = format!("--db=unix:{}", self.central_dir().join("nb.sock").display());
        let mut c = Command::new("ovn-nbctl");
        c.arg(db).args(args);
        Ok(stdout(sys::run(&mut c)?))
    }

    /// `ovn-sbctl ARGS` against the lab's SB database.
    pub fn sbctl(&self, args: &[&str]) -> Result<String, OvnError> {
        let db = format!("--db=unix:{}", self.central_dir().join("sb.sock").display());
        let mut c = Command::new("ovn-sbctl");
        c.arg(db).args(args);
        Ok(stdout(sys::run(&mut c)?))
    }

    /// Pid of a daemon from its pid file: `central/{nb,sb,northd}.pid` or a
    /// chassis' `ovs-vswitchd.pid`, `ovn-controller.pid`, `ovsdb-server.pid`.
    pub fn central_pid(&self, name: &str) -> Option<u32> {
        read_pid(&self.central_dir().join(format!("{name}.pid")))
    }

    pub fn chassis_pid(&self, i: usize, daemon: &str) -> Option<u32> {
        read_pid(&self.chassis_dir(i).join(format!("{daemon}.pid")))
    }

    /// The text of chassis `i`'s log of `daemon` (`ovn-controller`, ...).
    pub fn chassis_log(&self, i: usize, daemon: &str) -> String {
        std::fs::read_to_string(self.chassis_dir(i).join(format!("{daemon}.log")))
            .unwrap_or_default()
    }

    /// Create the VMs: namespaces, veths (TX checksum off on both ends),
    /// static addresses, and the br-int ports with `iface-id`. Until the
    /// NB topology names the ports they carry nothing.
    pub fn attach_vms(&mut self) -> Result<(), OvnError> {
        let mut root = os::netlink::Rtnl::open(None)?;
        for v in VMS {
            let ns = self.add_ns(v.name)?;
            let chns = self.ns(&Self::chassis_name(v.chassis));
            let mut a = end("eth0", &ns, None, None);
            a.mac = Some(os::link::parse_mac(v.mac)?);
            os::link::add_veth(&mut root, &a, &end(v.name, &chns, None, None))?;
            tx_csum_off(&ns, "eth0")?;
            tx_csum_off(&chns, v.name)?;
            let mut r = os::netlink::Rtnl::open(Some(&ns))?;
            os::link::set_up(&mut r, "eth0")?;
            if !v.dhcp {
                os::addr::add(&mut r, "eth0", IpAddr::V4(v.ip4), 24, false)?;
                let gw = router_ip(v.switch);
                os::route::add_via(&mut r, None, IpAddr::V4(gw))?;
            }
            if let Some(ip6) = v.ip6 {
                os::addr::add(&mut r, "eth0", IpAddr::V6(ip6), 64, true)?;
            }
            let mut rc = os::netlink::Rtnl::open(Some(&chns))?;
            os::link::set_up(&mut rc, v.name)?;
            let iface = format!("external_ids:iface-id={}", v.name);
            self.vsctl(
                v.chassis,
                &[
                    "add-port",
                    "br-int",
                    v.name,
                    "--",
                    "set",
                    "interface",
                    v.name,
                    &iface,
                ],
            )?;
        }
        Ok(())
    }

    /// The NB topology, through ovn-nbctl (see the module doc).
    pub fn configure_nb(&self) -> Result<(), OvnError> {
        self.nbctl(&[
            "ls-add", "ls1", "--", "ls-add", "ls2", "--", "ls-add", "ext", "--", "lr-add", "lr1",
        ])?;
        for (sw, mac, net) in [
            ("ls1", "02:00:00:00:10:01", "198.18.10.1/24"),
            ("ls2", "02:00:00:00:20:01", "198.18.20.1/24"),
            ("ext", "02:00:00:00:30:01", "198.18.30.1/24"),
        ] {
            let lrp = format!("lr1-{sw}");
            let lsp = format!("{sw}-lr1");
            let opt = format!("router-port={lrp}");
            let mut args = vec!["lrp-add", "lr1", &lrp, mac, net];
            if sw == "ls1" {
                args.push("2001:db8:10::1/64");
            }
            args.extend([
                "--",
                "lsp-add",
                sw,
                &lsp,
                "--",
                "lsp-set-type",
                &lsp,
                "router",
                "--",
                "lsp-set-addresses",
                &lsp,
                "router",
                "--",
                "lsp-set-options",
                &lsp,
                &opt,
            ]);
            self.nbctl(&args)?;
        }
        self.nbctl(&["lrp-set-gateway-chassis", "lr1-ext", "ch1", "20"])?;
        self.nbctl(&[
            "lsp-add",
            "ext",
            "ln-ext",
            "--",
            "lsp-set-type",
            "ln-ext",
            "localnet",
            "--",
            "lsp-set-addresses",
            "ln-ext",
            "unknown",
            "--",
            "lsp-set-options",
            "ln-ext",
            "network_name=physnet",
        ])?;
        let snat = SNAT_IP.to_string();
        for net in ["198.18.10.0/24", "198.18.20.0/24"] {
            self.nbctl(&["lr-nat-add", "lr1", "snat", &snat, net])?;
        }
        for v in VMS {
            let mut addr = format!("{} {}", v.mac, v.ip4);
            if let Some(ip6) = v.ip6 {
                addr.push_str(&format!(" {ip6}"));
            }
            self.nbctl(&[
                "lsp-add",
                v.switch,
                v.name,
                "--",
                "lsp-set-addresses",
                v.name,
                &addr,
                "--",
                "lsp-set-port-security",
                v.name,
                &addr,
            ])?;
        }
        let dhcp = self
            .nbctl(&[
                "create",
                "dhcp_options",
                "cidr=198.18.10.0/24",
                "options:server_id=198.18.10.1",
                "options:server_mac=02:00:00:00:10:01",
                "options:lease_time=3600",
                "options:router=198.18.10.1",
            ])?
            .trim()
            .to_string();
        for v in VMS.iter().filter(|v| v.dhcp) {
            self.nbctl(&["lsp-set-dhcpv4-options", v.name, &dhcp])?;
        }
        let allow_icmp = r#"outport == "vm4" && icmp4"#;
        let allow_tcp = format!(r#"outport == "vm4" && tcp.dst == {BACKEND_PORT}"#);
        let drop = r#"outport == "vm4" && ip4"#;
        self.nbctl(&[
            "acl-add",
            "ls2",
            "to-lport",
            "1002",
            allow_icmp,
            "allow-related",
        ])?;
        self.nbctl(&[
            "acl-add",
            "ls2",
            "to-lport",
            "1002",
            &allow_tcp,
            "allow-related",
        ])?;
        let name = format!("--name={DROP_ACL_NAME}");
        self.nbctl(&[
            "--log",
            &name,
            "--severity=info",
            "acl-add",
            "ls2",
            "to-lport",
            "1001",
            drop,
            "drop",
        ])?;
        let vip = format!("{LB_VIP}:{LB_PORT}");
        let backends: Vec<String> = VMS
            .iter()
            .filter(|v| v.lb_backend)
            .map(|v| format!("{}:{BACKEND_PORT}", v.ip4))
            .collect();
        self.nbctl(&["lb-add", "lb1", &vip, &backends.join(","), "tcp"])?;
        self.nbctl(&["ls-lb-add", "ls1", "lb1", "--", "lr-lb-add", "lr1", "lb1"])?;
        Ok(())
    }

    /// Which VM ports carry `ovn-installed=true` in their Interface
    /// external_ids (ovn-controller's "flows for this port are in").
    pub fn installed_ports(&self) -> Result<Vec<String>, OvnError> {
        let mut done = Vec::new();
        for ch in 0..2 {
            for v in VMS.iter().filter(|v| v.chassis == ch) {
                let ids = self.vsctl(ch, &["get", "interface", v.name, "external_ids"])?;
                if ids.contains("ovn-installed=\"true\"") {
                    done.push(v.name.to_string());
                }
            }
        }
        Ok(done)
    }

    /// `ping -c1 -W1` from VM `from` to `to` (v4 or v6).
    pub fn ping(&self, from: &str, to: IpAddr) -> bool {
        let mut c = sys::in_ns(
            Some(&self.ns(from)),
            &["ping", "-c1", "-W1", "-n", &to.to_string()],
        );
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c.status().is_ok_and(|s| s.success())
    }

    /// Ping until one passes or `limit` runs out.
    pub fn ping_until(&self, from: &str, to: IpAddr, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.ping(from, to) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// VMs, NB topology, then wait until every VM port is `ovn-installed`
    /// and pings pass on one chassis, across chassis and through the router.
    pub fn install_topology(&mut self, limit: Duration) -> Result<InstallTiming, OvnError> {
        if !self.topology {
            self.attach_vms()?;
            self.topology = true;
        }
        let t0 = Instant::now();
        self.configure_nb()?;
        let nbctl = t0.elapsed();
        self.wait_installed(limit)?;
        let installed = t0.elapsed();
        let left = limit.saturating_sub(t0.elapsed());
        let (v1, v2, v3) = (VMS[0], VMS[1], VMS[3]);
        for (from, to) in [(v1, v2), (v1, v3)] {
            if !self.ping_until(from.name, IpAddr::V4(to.ip4), left) {
                return Err(OvnError::Timeout {
                    what: format!("ping {} -> {} ({})", from.name, to.name, to.ip4),
                    secs: limit.as_secs_f64(),
                    detail: "every port is ovn-installed but traffic does not pass".into(),
                });
            }
        }
        Ok(InstallTiming {
            nbctl,
            installed,
            ready: t0.elapsed(),
        })
    }

    /// Wait until every VM port is `ovn-installed`; how long it took.
    pub fn wait_installed(&self, limit: Duration) -> Result<Duration, OvnError> {
        let t0 = Instant::now();
        wait_for("every VM port ovn-installed", limit, || {
            let done = self.installed_ports()?;
            Ok((done.len() == VMS.len())
                .then_some(())
                .ok_or(format!("ovn-installed so far: {done:?}")))
        })?;
        Ok(t0.elapsed())
    }

    /// Run OVN's DHCP client dance on VM `name` with dhclient (once, a
    /// private lease file and a hook script that only sets the address and
    /// default route: the system's resolv.conf is never touched). Returns
    /// the address the server gave this time (each call starts without a
    /// lease, so it is a full DISCOVER/OFFER/REQUEST/ACK).
    pub fn dhcp(&mut self, name: &str, limit: Duration) -> Result<Ipv4Addr, OvnError> {
        let d = self.dir.join(format!("dhcp-{name}"));
        std::fs::create_dir_all(&d).map_err(io_err(&d))?;
        let script = d.join("hook.sh");
        let out = d.join("events");
        let text = format!(
            "#!/bin/sh\necho \"$reason $new_ip_address $new_subnet_mask $new_routers\" >> {}\n\
             case \"$reason\" in BOUND|RENEW|REBIND|REBOOT)\n\
             ip addr replace \"$new_ip_address/24\" dev \"$interface\"\n\
             [ -n \"$new_routers\" ] && ip route replace default via \"$new_routers\";;\nesac\nexit 0\n",
            out.display()
        );
        std::fs::write(&script, text).map_err(io_err(&script))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err(&script))?;
        let lease = d.join("leases");
        // A fresh DISCOVER every call (no lease to reboot from, no events
        // of an earlier call): what is returned was bound just now.
        for f in [&lease, &out] {
            match std::fs::remove_file(f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err(f)(e)),
                _ => {}
            }
        }
        let pid = d.join("dhclient.pid");
        self.pidfiles.push(pid.clone());
        let secs = limit.as_secs().max(1).to_string();
        let argv: Vec<OsString> = vec![
            "timeout".into(),
            secs.into(),
            "dhclient".into(),
            "-1".into(),
            "-v".into(),
            "-lf".into(),
            lease.into(),
            "-pf".into(),
            pid.into(),
            "-sf".into(),
            script.into(),
            "eth0".into(),
        ];
        let mut c = sys::in_ns(Some(&self.ns(name)), &argv);
        sys::run(&mut c)?;
        let events = std::fs::read_to_string(&out).map_err(io_err(&out))?;
        events
            .lines()
            .filter_map(|l| l.strip_prefix("BOUND "))
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .next_back()
            .ok_or_else(|| OvnError::Invalid(format!("dhclient on {name} bound nothing: {events}")))
    }

    /// Start a background program in node `node`'s namespace (output to
    /// `log`); it is killed at teardown.
    pub fn spawn(&mut self, node: &str, argv: &[&str], log: &Path) -> Result<u32, OvnError> {
        let f = std::fs::File::create(log).map_err(io_err(log))?;
        let f2 = f.try_clone().map_err(io_err(log))?;
        let mut c = sys::in_ns(Some(&self.ns(node)), argv);
        c.stdin(Stdio::null()).stdout(f).stderr(f2);
        let child = c.spawn().map_err(|source| LabError::Spawn {
            cmd: sys::describe(&c),
            source,
        })?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// An HTTP server on `node` answering its own name on `port`
    /// (python3's http.server; access log in `http-<node>-<port>.log`, with
    /// the client address of every request).
    pub fn serve_http(&mut self, node: &str, port: u16) -> Result<PathBuf, OvnError> {
        let root = self.dir.join(format!("www-{node}"));
        std::fs::create_dir_all(&root).map_err(io_err(&root))?;
        std::fs::write(root.join("index.html"), format!("{node}\n")).map_err(io_err(&root))?;
        let log = self.dir.join(format!("http-{node}-{port}.log"));
        let dir = root.display().to_string();
        let p = port.to_string();
        self.spawn(
            node,
            &[
                "python3",
                "-m",
                "http.server",
                &p,
                "--bind",
                "0.0.0.0",
                "--directory",
                &dir,
            ],
            &log,
        )?;
        Ok(log)
    }

    /// `curl` from VM `from`: the body on success, None on failure/timeout.
    pub fn http_get(
        &self,
        from: &str,
        ip: Ipv4Addr,
        port: u16,
        timeout: Duration,
    ) -> Option<String> {
        let url = format!("http://{ip}:{port}/");
        let t = format!("{:.1}", timeout.as_secs_f64());
        let mut c = sys::in_ns(Some(&self.ns(from)), &["curl", "-s", "-m", &t, &url]);
        let out = c.stdin(Stdio::null()).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Wait until `port` on `node` accepts TCP (a server just spawned).
    pub fn wait_listening(&self, node: &str, port: u16, limit: Duration) -> Result<(), OvnError> {
        wait_for(&format!("{node} listening on TCP {port}"), limit, || {
            let mut c = sys::in_ns(
                Some(&self.ns(node)),
                &["ss", "-Hltn", &format!("sport = :{port}")],
            );
            let out = c
                .stdin(Stdio::null())
                .output()
                .map_err(|source| LabError::Spawn {
                    cmd: "ss".into(),
                    source,
                })?;
            Ok((!String::from_utf8_lossy(&out.stdout).trim().is_empty())
                .then_some(())
                .ok_or("not yet".to_string()))
        })
    }

    /// A command to run inside node `node` (VM, `ext`, chassis).
    pub fn command<S: AsRef<std::ffi::OsStr>>(&self, node: &str, argv: &[S]) -> Command {
        sys::in_ns(Some(&self.ns(node)), argv)
    }

    /// Every pid this lab started that still runs: daemons (pid files),
    /// children, and anything else inside its namespaces.
    fn our_pids(&mut self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.pidfiles.iter().filter_map(|p| read_pid(p)).collect();
        pids.extend(self.children.iter().map(Child::id));
        for ns in &self.namespaces {
            if let Ok(p) = sys::netns_pids(ns) {
                pids.extend(p);
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Stop everything and remove every trace; also run by Drop.
    pub fn teardown(&mut self) -> Result<(), OvnError> {
        let pids = self.our_pids();
        let me = std::process::id();
        let pids: Vec<u32> = pids.into_iter().filter(|&p| p != me).collect();
        let ns = self.namespaces.clone();
        // A recorded pid counts only while it still runs in one of our
        // namespaces or is our child (pids can be reused).
        let children: Vec<u32> = self.children.iter().map(Child::id).collect();
        let ours = move |p: u32| {
            children.contains(&p)
                || ns
                    .iter()
                    .any(|n| sys::netns_pids(n).is_ok_and(|v| v.contains(&p)))
        };
        sys::stop(&pids, ours, Duration::from_secs(3));
        for c in &mut self.children {
            let _ = c.wait();
        }
        self.children.clear();
        let mut errors = Vec::new();
        // The bpffs, with any pins a killed daemon left (a stopped one
        // removed its own): detaching it frees them. Not `pin::clean_root`,
        // which also deletes upcall veths by ifindex in *our* namespace,
        // where another daemon's could carry the same number; the chassis'
        // own go with their namespaces below.
        unmount_pin_fs(&self.dir);
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = os::netns::del(&ns) {
                if !e.is_missing() {
                    errors.push(format!("{ns}: {e}"));
                }
            }
        }
        if self.dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                errors.push(format!("{}: {e}", self.dir.display()));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(OvnError::Invalid(format!(
                "teardown left: {}",
                errors.join("; ")
            )))
        }
    }
}

impl Drop for OvnLab {
    fn drop(&mut self) {
        if self.keep {
            eprintln!(
                "ovn lab {} kept (namespaces {}-*, dir {})",
                self.prefix,
                self.prefix,
                self.dir.display()
            );
            return;
        }
        if let Err(e) = self.teardown() {
            eprintln!("ovn lab {}: {e}", self.prefix);
        }
    }
}

/// The logical router's address on switch `sw`.
pub fn router_ip(sw: &str) -> Ipv4Addr {
    match sw {
        "ls2" => Ipv4Addr::new(198, 18, 20, 1),
        "ext" => SNAT_IP,
        _ => Ipv4Addr::new(198, 18, 10, 1),
    }
}

fn end(name: &str, ns: &str, mtu: Option<u32>, mac: Option<[u8; 6]>) -> os::link::VethEnd {
    os::link::VethEnd {
        name: name.to_string(),
        mtu,
        mac,
        netns: Some(ns.to_string()),
        queues: None,
    }
}

/// TX checksum offload off (`ethtool -K DEV tx off`): OVS's userspace
/// datapath reads this veth with AF_PACKET and would forward a frame whose
/// checksum the kernel left for "hardware" unfinished.
fn tx_csum_off(ns: &str, dev: &str) -> Result<(), OvnError> {
    os::ethtool::set(Some(ns), dev, os::ethtool::is_tx_checksum, false)?;
    Ok(())
}

fn stdout(o: Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn read_pid(p: &Path) -> Option<u32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Poll `f` every 100 ms until it says Ok(Ok(())) or `limit` passes; a
/// hard error ends the wait at once. The last "not yet" reason is in the
/// timeout error.
pub fn wait_for(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> Result<Result<(), String>, OvnError>,
) -> Result<(), OvnError> {
    let deadline = Instant::now() + limit;
    loop {
        let why = match f()? {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        if Instant::now() >= deadline {
            return Err(OvnError::Timeout {
                what: what.to_string(),
                secs: limit.as_secs_f64(),
                detail: why,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Detach the lab's bpffs (`<dir>/bpf`), if mounted: its pinned programs
/// and maps go with it once nothing else holds them.
fn unmount_pin_fs(dir: &Path) {
    let bpf = dir.join("bpf");
    if let Ok(t) = std::ffi::CString::new(bpf.as_os_str().as_encoded_bytes()) {
        // SAFETY: umount2(2) with a NUL-terminated path; EINVAL when it is
        // not a mount point, which is fine.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Remove what labs of processes that no longer run left behind: namespaces
/// `nfovn<pid>x<n>-*` (and whatever still runs in them) and directories
/// `$TMPDIR/nfovn<pid>x<n>` whose `<pid>` is gone. A live lab's things are
/// never touched.
pub fn reap_stale() {
    let dead = |name: &str| -> bool {
        let Some(rest) = name.strip_prefix(PREFIX) else {
            return false;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            return false;
        };
        match pid.parse::<u32>() {
            Ok(pid) => pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists(),
            Err(_) => false,
        }
    };
    if let Ok(list) = os::netns::list() {
        for ns in list.iter().filter(|n| dead(n)) {
            if let Ok(pids) = sys::netns_pids(ns) {
                let n = ns.clone();
                sys::stop(
                    &pids,
                    move |p| sys::netns_pids(&n).is_ok_and(|v| v.contains(&p)),
                    Duration::from_secs(2),
                );
            }
            let _ = os::netns::del(ns);
        }
    }
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            if e.file_name().to_str().is_some_and(dead) {
                unmount_pin_fs(&e.path());
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// What an OpenFlow dump uses: the distinct match field names and action
/// names of `ovs-ofctl dump-flows` output (`set_field`, `load` and `move`
/// also record their destination field, e.g. `set_field:->reg13`; the
/// actions nested in `clone(...)` and `ct(exec(...))` count too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowVocabulary {
    pub match_fields: std::collections::BTreeMap<String, usize>,
    pub actions: std::collections::BTreeMap<String, usize>,
    pub tables: std::collections::BTreeSet<u8>,
    pub flows: usize,
}

impl FlowVocabulary {
    /// Add every flow line of a `dump-flows` output.
    pub fn add_dump(&mut self, dump: &str) {
        for line in dump.lines() {
            let line = line.trim();
            let Some((m, a)) = line.split_once(" actions=") else {
                continue;
            };
            self.flows += 1;
            if !m.contains("table=") {
                self.tables.insert(0);
            }
            for f in split_top(m, ',') {
                let f = f.trim();
                let (key, value) = f.split_once('=').unwrap_or((f, ""));
                match key {
                    "" | "cookie" | "duration" | "n_packets" | "n_bytes" | "idle_age"
                    | "hard_age" | "priority" | "reset_counts" | "idle_timeout"
                    | "hard_timeout" | "importance" | "send_flow_rem" | "check_overlap" => {}
                    "table" => {
                        if let Ok(t) = value.parse() {
                            self.tables.insert(t);
                        }
                    }
                    _ => *self.match_fields.entry(key.to_string()).or_default() += 1,
                }
            }
            for act in split_top(a, ',') {
                self.add_action(act.trim());
            }
        }
    }

    fn add_action(&mut self, act: &str) {
        if act.is_empty() {
            return;
        }
        let cut = act.find(['(', ':', '=']).unwrap_or(act.len());
        let name = &act[..cut];
        let key = match name {
            "set_field" | "load" | "move" => {
                let dst = act.rsplit("->").next().unwrap_or("");
                let dst = dst.split('[').next().unwrap_or(dst);
                format!("{name}:->{dst}")
            }
            _ => name.to_string(),
        };
        *self.actions.entry(key).or_default() += 1;
        // Nested action lists.
        let inner = |s: &str| -> Option<String> {
            let open = s.find('(')?;
            let close = s.rfind(')')?;
            (close > open).then(|| s[open + 1..close].to_string())
        };
        match name {
            "controller" => {
                if let Some(body) = inner(act) {
                    for arg in split_top(&body, ',') {
                        let k = arg.trim().split('=').next().unwrap_or("");
                        if matches!(k, "pause" | "userdata" | "meter_id" | "reason" | "max_len") {
                            *self.actions.entry(format!("controller({k})")).or_default() += 1;
                        }
                    }
                }
            }
            "clone" => {
                if let Some(body) = inner(act) {
                    for a in split_top(&body, ',') {
                        self.add_action(a.trim());
                    }
                }
            }
            "ct" => {
                if let Some(body) = inner(act) {
                    for arg in split_top(&body, ',') {
                        let arg = arg.trim();
                        if let Some(e) = arg.strip_prefix("exec(") {
                            *self.actions.entry("ct(exec)".into()).or_default() += 1;
                            let e = e.strip_suffix(')').unwrap_or(e);
                            for a in split_top(e, ',') {
                                self.add_action(a.trim());
                            }
                        } else if arg.starts_with("nat") {
                            *self.actions.entry("ct(nat)".into()).or_default() += 1;
                        } else if arg == "commit"
                            || arg.starts_with("table=")
                            || arg.starts_with("zone=")
                        {
                            let k = arg.split('=').next().unwrap_or(arg);
                            *self.actions.entry(format!("ct({k})")).or_default() += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Split `s` at `sep` outside parentheses.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The OpenFlow messages a vswitchd received, by kind, from its log with
/// `vconn:dbg` on (entries `...|vconn|DBG|unix#N: received: TYPE ...` and
/// their continuation lines). Keys are the message type, refined where
/// ovn-controller's use matters: `OFPT_BUNDLE_ADD_MESSAGE[OFPT_FLOW_MOD ADD]`
/// (the message inside the bundle and its command),
/// `OFPT_BUNDLE_CONTROL[OPEN_REQUEST]`, `OFPT_METER_MOD[DEL]`,
/// `OFPT_FLOW_MOD[ADD]`.
pub fn openflow_message_types(log: &str) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    let mut entries: Vec<(String, Vec<&str>)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        let starts_entry =
            line.as_bytes().first().is_some_and(u8::is_ascii_digit) && line.contains('|');
        if starts_entry {
            current = None;
            if let Some((_, rest)) = line.split_once(": received: ") {
                entries.push((rest.to_string(), Vec::new()));
                current = Some(entries.len() - 1);
            }
        } else if let Some(i) = current {
            entries[i].1.push(line);
        }
    }
    let command = |head: &str| -> String {
        head.split_once("): ")
            .and_then(|(_, r)| r.split_whitespace().next())
            .unwrap_or("")
            .to_string()
    };
    for (head, cont) in entries {
        let ty = head
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_end_matches(':');
        if ty.is_empty() {
            continue;
        }
        let key = match ty {
            "OFPT_BUNDLE_ADD_MESSAGE" => {
                let inner = cont
                    .iter()
                    .position(|l| l.starts_with("OFPT_") || l.starts_with("NXT_"));
                match inner {
                    Some(i) => {
                        let l = cont[i];
                        let ity = l.split_whitespace().next().unwrap_or("");
                        let mut cmd = command(l);
                        if cmd.is_empty() {
                            cmd = cont
                                .get(i + 1)
                                .and_then(|n| n.split_whitespace().next())
                                .unwrap_or("")
                                .to_string();
                        }
                        format!("{ty}[{} {}]", ity, cmd).replace(" ]", "]")
                    }
                    None => ty.to_string(),
                }
            }
            "OFPT_BUNDLE_CONTROL" => cont
                .iter()
                .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("type=")))
                .map_or(ty.to_string(), |t| format!("{ty}[{t}]")),
            "OFPT_FLOW_MOD" | "OFPT_GROUP_MOD" | "OFPT_METER_MOD" => {
                let mut cmd = command(&head);
                if cmd.is_empty() {
                    cmd = cont
                        .first()
                        .and_then(|n| n.split_whitespace().next())
                        .unwrap_or("")
                        .to_string();
                }
                format!("{ty}[{cmd}]")
            }
            _ => ty.to_string(),
        };
        *m.entry(key).or_default() += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_of_a_dump() {
        let dump = " cookie=0x1, table=0, priority=100,in_port=1 actions=load:0x1->NXM_NX_REG13[0..15],set_field:0x2->reg11,resubmit(,8)\n \
                    table=8, priority=50,reg14=0x1,metadata=0x1,dl_src=00:00:00:00:00:01 actions=ct(commit,zone=NXM_NX_REG13[0..15],exec(load:0x1->NXM_NX_CT_LABEL[1]),nat(src=198.18.30.1)),clone(set_field:0x3->reg15,output:2)\n \
                    table=9, priority=0 actions=drop\n";
        let mut v = FlowVocabulary::default();
        v.add_dump(dump);
        assert_eq!(v.flows, 3);
        assert_eq!(v.tables.iter().copied().collect::<Vec<_>>(), vec![0, 8, 9]);
        for f in ["in_port", "reg14", "metadata", "dl_src"] {
            assert!(v.match_fields.contains_key(f), "{f}: {:?}", v.match_fields);
        }
        assert!(!v.match_fields.contains_key("cookie"));
        for a in [
            "load:->NXM_NX_REG13",
            "set_field:->reg11",
            "resubmit",
            "ct",
            "ct(commit)",
            "ct(nat)",
            "load:->NXM_NX_CT_LABEL",
            "clone",
            "set_field:->reg15",
            "output",
            "drop",
        ] {
            assert!(v.actions.contains_key(a), "{a}: {:?}", v.actions);
        }
    }

    #[test]
    fn message_types_from_a_vconn_log() {
        let log = "2026-12-02T03:23:49.007Z|00001|vconn|DBG|unix#3: received: OFPT_HELLO (OF1.5) (xid=0x1):\n \
                   version bitmap: 0x06\n\
                   2026-12-02T03:23:49.007Z|00002|vconn|DBG|unix#3: sent (Success): OFPT_HELLO (OF1.5)\n\
                   2026-12-02T03:23:49.008Z|00003|vconn|DBG|unix#2: received: OFPT_BUNDLE_CONTROL (OF1.5) (xid=0xa):\n \
                   bundle_id=0 type=OPEN_REQUEST flags=atomic ordered\n\
                   2026-12-02T03:23:49.008Z|00004|vconn|DBG|unix#2: received: OFPT_BUNDLE_ADD_MESSAGE (OF1.5) (xid=0xb):\n \
                   bundle_id=0 flags=atomic ordered\n\
                   OFPT_FLOW_MOD (OF1.5) (xid=0xb): DEL table:255 priority=0 actions=drop\n\
                   2026-12-02T03:23:49.008Z|00005|vconn|DBG|unix#2: received: OFPT_BUNDLE_ADD_MESSAGE (OF1.5) (xid=0xc):\n \
                   bundle_id=0 flags=atomic ordered\n\
                   OFPT_GROUP_MOD (OF1.5) (xid=0xc):\n \
                   ADD group_id=1,type=select\n\
                   2026-12-02T03:23:49.008Z|00006|vconn|DBG|unix#2: received: OFPT_METER_MOD (OF1.5) (xid=0x9): DEL meter=all bands=\n\
                   2026-12-02T03:23:49.009Z|00007|vconn|DBG|unix#2: received: OFPT_BUNDLE_ADD_MESSAGE (OF1.5) (xid=0xd):\n \
                   bundle_id=0 flags=atomic ordered\n\
                   OFPT_FLOW_MOD (OF1.5) (xid=0xd): ADD table:65 priority=0 actions=drop\n";
        let m = openflow_message_types(log);
        assert_eq!(m.get("OFPT_HELLO"), Some(&1), "{m:?}");
        assert_eq!(
            m.get("OFPT_BUNDLE_CONTROL[OPEN_REQUEST]"),
            Some(&1),
            "{m:?}"
        );
        assert_eq!(
            m.get("OFPT_BUNDLE_ADD_MESSAGE[OFPT_FLOW_MOD DEL]"),
            Some(&1),
            "{m:?}"
        );
        assert_eq!(
            m.get("OFPT_BUNDLE_ADD_MESSAGE[OFPT_FLOW_MOD ADD]"),
            Some(&1),
            "{m:?}"
        );
        assert_eq!(
            m.get("OFPT_BUNDLE_ADD_MESSAGE[OFPT_GROUP_MOD ADD]"),
            Some(&1),
            "{m:?}"
        );
        assert_eq!(m.get("OFPT_METER_MOD[DEL]"), Some(&1), "{m:?}");
        assert_eq!(m.len(), 6, "{m:?}");
    }

    #[test]
    fn mixes_by_name() {
        let bin = Path::new("/bin/nicflow");
        assert_eq!(
            vswitch_mix("ovs", bin).unwrap(),
            [Vswitch::Ovs, Vswitch::Ovs]
        );
        assert_eq!(vswitch_mix("mixed", bin).unwrap()[1], Vswitch::Ovs);
        assert!(matches!(
            vswitch_mix("nicflow", bin).unwrap()[0],
            Vswitch::Nicflow(_)
        ));
        assert!(vswitch_mix("kernel", bin).is_err());
        let argv = Vswitch::Nicflow(bin.into()).argv("unix:/r/db.sock");
        assert_eq!(argv[1], "vswitchd");
        assert_eq!(argv[2], "unix:/r/db.sock");
        assert!(argv.contains(&"--pidfile".into()));
    }

    #[test]
    fn addresses_stay_in_the_lab_ranges() {
        let lab4 = |ip: Ipv4Addr| ip.octets()[0] == 198 && (ip.octets()[1] & 0xfe) == 18;
        for v in VMS {
            assert!(lab4(v.ip4));
            if let Some(ip6) = v.ip6 {
                assert_eq!(&ip6.segments()[..2], &[0x2001, 0xdb8]);
            }
        }
        for ip in [
            CENTRAL_IP,
            EXT_HOST_IP,
            SNAT_IP,
            LB_VIP,
            encap_ip(0),
            encap_ip(1),
        ] {
            assert!(lab4(ip), "{ip}");
        }
    }
}
