//! Delegation to the IPAM plugin: found in `CNI_PATH`, run with the same
//! network configuration on stdin and the attachment's `CNI_*` variables
//! set explicitly (GC runs it for attachments other than the invocation's
//! own). A plugin older than the configuration's spec 1.1.0 (Debian 12's
//! host-local answers up to 1.0.0) gets the configuration as 1.0.0, which
//! is the same for everything IPAM reads.

use super::error::{code, CniError, CniResult};
use super::plugin::Env;
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The executable `kind` in one of `CNI_PATH`'s directories.
pub fn find_plugin(cni_path: &str, kind: &str) -> CniResult<PathBuf> {
    cni_path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join(kind))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            CniError::generic(format!(
                "IPAM plugin `{kind}` not found in CNI_PATH {cni_path}"
            ))
        })
}

/// `stdin` as the plugin at `plugin` can read it: a 1.1.0 configuration
/// becomes 1.0.0 unless the plugin's VERSION lists 1.1.0.
fn for_plugin(plugin: &Path, stdin: &[u8]) -> Vec<u8> {
    let Ok(mut conf) = serde_json::from_slice::<Value>(stdin) else {
        return stdin.to_vec();
    };
    if conf["cniVersion"] != "1.1.0" {
        return stdin.to_vec();
    }
    let supports = Command::new(plugin)
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .and_then(|v| v["supportedVersions"].as_array().cloned())
        .is_some_and(|v| v.iter().any(|x| x == "1.1.0"));
    if supports {
        return stdin.to_vec();
    }
    conf["cniVersion"] = "1.0.0".into();
    serde_json::to_vec(&conf).unwrap_or_else(|_| stdin.to_vec())
}

/// Run IPAM plugin `kind` for `command` on the attachment `env`; its
/// stdout on success, its error (passed through, code and all) on failure.
pub fn exec(env: &Env, kind: &str, command: &str, stdin: &[u8]) -> CniResult<Vec<u8>> {
    let plugin = find_plugin(&env.cni_path, kind)?;
    let stdin = for_plugin(&plugin, stdin);
    let mut cmd = Command::new(&plugin);
    cmd.env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", &env.container_id)
        .env("CNI_IFNAME", &env.ifname)
        .env("CNI_PATH", &env.cni_path);
    match &env.netns {
        Some(n) => cmd.env("CNI_NETNS", n),
        None => cmd.env_remove("CNI_NETNS"),
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("starting IPAM plugin {}: {e}", plugin.display()),
            )
        })?;
    if let Some(mut i) = child.stdin.take() {
        // A plugin that exits without reading is judged by its exit status.
        let _ = i.write_all(&stdin);
    }
    let out = child.wait_with_output().map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("waiting for IPAM plugin {}: {e}", plugin.display()),
        )
    })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match serde_json::from_slice::<CniError>(&out.stdout) {
        Ok(mut e) => {
            e.msg = format!("IPAM {kind} {command}: {}", e.msg);
            if e.details.is_empty() {
                e.details = stderr;
            }
            Err(e)
        }
        Err(_) => Err(
            CniError::generic(format!("IPAM {kind} {command} failed ({})", out.status))
                .with_details(format!(
                    "{}{stderr}",
                    String::from_utf8_lossy(&out.stdout).trim()
                )),
        ),
    }
}
