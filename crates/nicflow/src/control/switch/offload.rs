//! Offload: putting a bridge in an offload mode (`set BRIDGE offload=MODE`,
//! at startup, at `add-br`). When the kernel refuses the program the bridge
//! stays at `none`: one log line says so and where the verifier log was
//! saved.

use super::{Switch, SwitchError};
use crate::bridge::Bridge;
use crate::control::proto::Response;
use crate::offload::kernel::OffloadError;
use crate::offload::OffloadMode;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Why a bridge could not be put in the offload mode asked for.
#[derive(Debug, thiserror::Error)]
pub enum OffloadFailure {
    /// The offload options (map sizes...) are refused.
    #[error("bridge {bridge}: {source}")]
    Options {
        bridge: String,
        #[source]
        source: OffloadError,
    },
    /// The engine could not start (the verifier refused the program, a BPF
    /// call failed): the bridge runs at `none`.
    #[error(
        "bridge {bridge}: offload {mode} unavailable, falling back to offload=none: {source}{log}"
    )]
    Unavailable {
        bridge: String,
        mode: &'static str,
        #[source]
        source: OffloadError,
        log: VerifierLog,
    },
}

/// Where the verifier's log of a refused program went (said after the
/// reason, so the operator finds it).
#[derive(Debug)]
pub enum VerifierLog {
    /// The failure was not the verifier's.
    None,
    Saved(PathBuf),
    NotSaved {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl fmt::Display for VerifierLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifierLog::None => Ok(()),
            VerifierLog::Saved(p) => write!(f, "; verifier log saved to {}", p.display()),
            VerifierLog::NotSaved { path, error } => write!(
                f,
                "; could not save the verifier log to {}: {error}",
                path.display()
            ),
        }
    }
}

/// Where the verifier log of a refused XDP program is written: next to
/// the config file, else in the temporary directory.
fn verifier_log_path(config_path: Option<&Path>, bridge: &str) -> PathBuf {
    let dir = config_path
        .and_then(|p| p.parent())
        .filter(|d| !d.as_os_str().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("nicflow-{bridge}-xdp_dp.verifier.log"))
}

/// Put `br` in offload mode `mode` (`xdp` with `options` for the map
/// sizes). When the kernel refuses the program the bridge stays at `none`:
/// one log line says so and where the verifier log was saved. `Err` carries
/// that message (for `nicflow set`).
pub fn apply_offload(
    br: &mut Bridge,
    mode: OffloadMode,
    options: &BTreeMap<String, String>,
    config_path: Option<&Path>,
) -> Result<(), OffloadFailure> {
    if mode == OffloadMode::None {
        br.disable_offload();
        return Ok(());
    }
    let cfg = crate::offload::engine_config(options).map_err(|source| OffloadFailure::Options {
        bridge: br.name.clone(),
        source,
    })?;
    match br.enable_offload(cfg, mode) {
        Ok(()) => {
            tracing::info!(bridge = %br.name, "offload {} on", mode.as_str());
            Ok(())
        }
        Err(source) => {
            let log = match source.verifier_log() {
                None => VerifierLog::None,
                Some(text) => {
                    let path = verifier_log_path(config_path, &br.name);
                    match std::fs::write(&path, text) {
                        Ok(()) => VerifierLog::Saved(path),
                        Err(error) => VerifierLog::NotSaved { path, error },
                    }
                }
            };
            let e = OffloadFailure::Unavailable {
                bridge: br.name.clone(),
                mode: mode.as_str(),
                source,
                log,
            };
            tracing::error!("{e}");
            Err(e)
        }
    }
}

impl Switch {
    /// `set BRIDGE offload=MODE`: applied now, then written; when the file
    /// cannot be written the bridge goes back to its configured mode.
    pub(super) fn set_offload(
        &mut self,
        bridge: &str,
        value: &str,
    ) -> Result<Response, SwitchError> {
        let config_path = self.config_path.clone();
        let mode = OffloadMode::parse(value)
            .ok_or_else(|| SwitchError::BadOffloadMode(value.to_string()))?;
        let options = self
            .config
            .bridge(bridge)
            .map(|b| b.offload_options.clone())
            .unwrap_or_default();
        let br = self.bridge(bridge)?;
        apply_offload(br, mode, &options, config_path.as_deref())?;
        let mut old = None;
        if let Some(bc) = self.config.bridge_mut(bridge) {
            old = Some(bc.offload);
            bc.offload = Some(mode);
        }
        if let Err(e) = self.persist() {
            // Not saved: back to the configured mode.
            let old = old.flatten();
            if let Some(bc) = self.config.bridge_mut(bridge) {
                bc.offload = old;
            }
            let br = self.bridge(bridge)?;
            let _ = apply_offload(
                br,
                old.unwrap_or_default(),
                &options,
                config_path.as_deref(),
            );
            return Err(e);
        }
        Ok(Response::ok("", json!({ "offload": mode.as_str() })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply names the bridge, the mode, the reason and where the
    /// verifier log went, in the words `nicflow set` printed before.
    #[test]
    fn an_unavailable_engine_says_where_the_log_went() {
        let verifier = || OffloadError::Verifier {
            source: std::io::Error::from_raw_os_error(libc::EACCES),
            log: "0: r0 = 0\n1: exit\n".into(),
        };
        let e = OffloadFailure::Unavailable {
            bridge: "br0".into(),
            mode: "xdp",
            source: verifier(),
            log: VerifierLog::Saved("/run/nicflow/nicflow-br0-xdp_dp.verifier.log".into()),
        };
        let text = e.to_string();
        assert!(
            text.starts_with("bridge br0: offload xdp unavailable, falling back to offload=none: the BPF verifier rejected")
                && text.ends_with("; verifier log saved to /run/nicflow/nicflow-br0-xdp_dp.verifier.log"),
            "{text}"
        );
        let e = OffloadFailure::Unavailable {
            bridge: "br0".into(),
            mode: "tc",
            source: verifier(),
            log: VerifierLog::NotSaved {
                path: "/x/log".into(),
                error: std::io::Error::from_raw_os_error(libc::EROFS),
            },
        };
        assert!(
            e.to_string()
                .contains("lines of verifier log; could not save the verifier log to /x/log: "),
            "{e}"
        );
        let e = OffloadFailure::Options {
            bridge: "br1".into(),
            source: OffloadError::Config("flows=0".into()),
        };
        assert_eq!(e.to_string(), "bridge br1: XDP engine: flows=0");
        // As a `set` reply, unchanged.
        assert_eq!(
            SwitchError::from(e).to_string(),
            "bridge br1: XDP engine: flows=0"
        );
    }

    #[test]
    fn the_verifier_log_goes_next_to_the_config() {
        assert_eq!(
            verifier_log_path(Some(Path::new("/etc/nicflow/sw.toml")), "br0"),
            Path::new("/etc/nicflow/nicflow-br0-xdp_dp.verifier.log")
        );
        assert_eq!(
            verifier_log_path(Some(Path::new("sw.toml")), "br0"),
            std::env::temp_dir().join("nicflow-br0-xdp_dp.verifier.log")
        );
    }
}
