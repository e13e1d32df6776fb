//! Delegation to the IPAM plugin: found in `CNI_PATH`, run with the same
//! network configuration on stdin and the same environment, except
//! `CNI_COMMAND`.

use super::error::{code, CniError, CniResult};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
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

/// Run IPAM plugin `kind` for `command`; its stdout on success, its error
/// (passed through, code and all) on failure.
pub fn exec(cni_path: &str, kind: &str, command: &str, stdin: &[u8]) -> CniResult<Vec<u8>> {
    let plugin = find_plugin(cni_path, kind)?;
    let mut child = Command::new(&plugin)
        .env("CNI_COMMAND", command)
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
        let _ = i.write_all(stdin);
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
