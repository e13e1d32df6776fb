//! nicflow-cni: nicflow as a CNI plugin (type `nicflow`).
//!
//! Place in the packet's path: none of its own. It runs once per pod
//! attachment, asks the daemon (over `nicflow-api`'s control socket) for a
//! VF whose representor is a port of a bridge, and installs the rules that
//! the pod's frames will meet there first (anti-spoofing, policy,
//! bandwidth meters, steering); it links nothing of the dataplane.
//!
//! The plugin is the `nicflow` binary run with
//! `CNI_COMMAND` in its environment, as a container runtime (or
//! `cnitool`) runs the plugin its network configuration names.
//!
//! - `VERSION`: spec versions 0.3.1, 0.4.0, 1.0.0 and 1.1.0.
//! - `ADD`: a VF named `CNI_IFNAME` in the namespace `CNI_NETNS` (a file in
//!   /run/netns), its representor a port of the configuration's `bridge`,
//!   made by the daemon (`add-vf` over its socket); addresses from the
//!   configured IPAM plugin (found in `CNI_PATH`, run with the same stdin
//!   and environment), set on the interface with `ip -n`; the result in the
//!   configuration's `cniVersion`.
//! - `DEL`: IPAM DEL, then the VF (`del-vf` by representor), found again
//!   through a record ADD keeps in /var/lib/cni/nicflow (`dataDir`) or by
//!   namespace and name; whatever is already gone is fine.
//! - `CHECK`: the VF is known, the interface is in the namespace with its
//!   MAC and the `prevResult` addresses, and the IPAM plugin agrees.
//! - `STATUS` and `GC` (spec 1.1): the daemon answers and has the bridge;
//!   recorded attachments not in `cni.dev/valid-attachments` deleted.
//!
//! ADD also installs anti-spoofing on every attachment ([`portsec`]: the
//! VF's MAC and addresses only), the pod's ingress policy ([`policy`]) and bandwidth
//! limits ([`bandwidth`], meters) as rules under a cookie of the
//! attachment, which DEL removes, and prints the representor (no
//! `sandbox`) beside the VF, so chained plugins (`tuning`, `bandwidth`,
//! `portmap`) find both ends. Failures print the spec's error JSON on
//! stdout and exit 1. Every value used in a path (network name, container
//! ID, interface name, `dataDir`) is checked as the spec says before
//! anything is made ([`types::check_network_name`]). See docs/cni.md.

pub mod bandwidth;
pub mod error;
pub mod ipam;
pub mod plugin;
pub mod policy;
pub mod portsec;
pub mod steering;
pub mod types;

use error::{code, CniError, CniResult};
use std::io::{Read, Write};

/// Run one CNI command from the environment and stdin; the process exit
/// code (0, or 1 after printing an error).
pub fn main() -> i32 {
    let cmd = std::env::var("CNI_COMMAND").unwrap_or_default();
    let mut stdin = Vec::new();
    // VERSION may come without a configuration; an unreadable stdin is
    // reported below by the commands that need one.
    let read = std::io::stdin().read_to_end(&mut stdin);
    let out = match read {
        Err(e) if cmd != "VERSION" => Err(CniError::new(
            code::IO_FAILURE,
            format!("reading the network configuration from stdin: {e}"),
        )),
        _ => run(&cmd, &stdin),
    };
    let mut o = std::io::stdout().lock();
    match out {
        Ok(Some(v)) => {
            let _ = writeln!(o, "{v}");
            0
        }
        Ok(None) => 0,
        Err(e) => {
            let _ = writeln!(o, "{}", e.to_json());
            1
        }
    }
}

/// What a command prints on success (`None`: nothing).
pub fn run(cmd: &str, stdin: &[u8]) -> CniResult<Option<serde_json::Value>> {
    if cmd == "VERSION" {
        return Ok(Some(serde_json::json!({
            "cniVersion": types::LATEST,
            "supportedVersions": types::SUPPORTED,
        })));
    }
    if !matches!(cmd, "ADD" | "DEL" | "CHECK" | "STATUS" | "GC") {
        return Err(CniError::new(
            code::INVALID_ENV,
            format!("CNI_COMMAND `{cmd}` is not supported (VERSION, ADD, DEL, CHECK, STATUS, GC)"),
        ));
    }
    let conf = types::NetConf::parse(stdin)?;
    let r = if matches!(cmd, "STATUS" | "GC") {
        spec_1_1(cmd, &conf, stdin)
    } else {
        env_vars(cmd).and_then(|env| match cmd {
            "ADD" => plugin::add(&conf, &env, stdin).map(Some),
            "DEL" => plugin::del(&conf, &env, stdin).map(|()| None),
            _ => plugin::check(&conf, &env, stdin).map(|()| None),
        })
    };
    // Errors speak the configuration's version, like results.
    r.map_err(|mut e| {
        e.cni_version = conf.cni_version.clone();
        e
    })
}

/// STATUS and GC, commands of spec 1.1 that runtimes send only to 1.1
/// networks; neither names an attachment, so no `CNI_CONTAINERID` etc.
fn spec_1_1(
    cmd: &str,
    conf: &types::NetConf,
    stdin: &[u8],
) -> CniResult<Option<serde_json::Value>> {
    if matches!(conf.cni_version.as_str(), "0.3.1" | "0.4.0" | "1.0.0") {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "{cmd} needs cniVersion 1.1.0 (config has {})",
                conf.cni_version
            ),
        ));
    }
    if cmd == "STATUS" {
        plugin::status(conf)?;
    } else {
        let cni_path = std::env::var("CNI_PATH").unwrap_or_default();
        plugin::gc(conf, &cni_path, stdin)?;
    }
    Ok(None)
}

fn env_vars(cmd: &str) -> CniResult<plugin::Env> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let need = |k: &str| {
        var(k).ok_or_else(|| CniError::new(code::INVALID_ENV, format!("{k} is required for {cmd}")))
    };
    let container_id = need("CNI_CONTAINERID")?;
    types::check_container_id(&container_id)?;
    let ifname = need("CNI_IFNAME")?;
    crate::check_ifname(&ifname, "CNI_IFNAME")
        .map_err(|e| CniError::new(code::INVALID_ENV, e.to_string()))?;
    // The record file `<containerid>-<ifname>.json` is one path component.
    if container_id.len() + ifname.len() + ".json".len() + 1 > types::NAME_MAX {
        return Err(CniError::new(
            code::INVALID_ENV,
            format!(
                "CNI_CONTAINERID ({} bytes) and CNI_IFNAME together are too long for a record file name ({} bytes at most)",
                container_id.len(),
                types::NAME_MAX - ".json".len() - 1
            ),
        ));
    }
    Ok(plugin::Env {
        container_id,
        netns: var("CNI_NETNS"),
        ifname,
        cni_path: var("CNI_PATH").unwrap_or_default(),
    })
}

/// A name Linux accepts for an interface (`nicflow_os::check_ifname`), and
/// no control characters either: the name also becomes part of a record's
/// file name.
pub(crate) fn check_ifname(s: &str, what: &'static str) -> Result<(), String> {
    nicflow_os::check_ifname(s).map_err(|e| format!("{what}: {e}"))?;
    if s.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err(format!(
            "{what}: `{}`: no control characters",
            s.escape_debug()
        ));
    }
    Ok(())
}
