//! The lab's record of what it created: `<state root>/<lab>/state.json`.
//!
//! `up` writes an object into this record *before* creating it, and saves
//! the record atomically (temporary file, fsync, rename) each time, so
//! whatever `up` managed to create — even if it crashed or was killed
//! halfway — is listed here for `down`. The record may therefore name
//! objects that never came to exist; `down` treats "already gone" as
//! success. The same directory holds each switch's daemon config, control
//! socket and log.

use super::LabError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const STATE_FILE: &str = "state.json";

/// Everything one lab created (or was about to create).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabState {
    pub lab: String,
    /// The state directory this record lives in.
    pub dir: PathBuf,
    /// Node (host or own-namespace switch) -> its namespace; what `exec`
    /// looks up when it is not given the topology.
    #[serde(default)]
    pub nodes: BTreeMap<String, String>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub veths: Vec<VethRecord>,
    #[serde(default)]
    pub daemons: Vec<DaemonRecord>,
    /// Set when `up` finished.
    #[serde(default)]
    pub complete: bool,
}

/// One end of a veth pair: its name and namespace (`None`: root).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceRecord {
    pub name: String,
    pub netns: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VethRecord {
    /// Index of the link in the topology.
    pub link: usize,
    pub a: IfaceRecord,
    pub b: IfaceRecord,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub switch: String,
    /// `None`: the root namespace.
    pub netns: Option<String>,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    /// Filled in once the process is spawned.
    pub pid: Option<u32>,
}

impl LabState {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// The record in `dir`, `None` when there is none.
    pub fn load(dir: &Path) -> Result<Option<LabState>, LabError> {
        let path = Self::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LabError::State {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| LabError::State {
                path: path.display().to_string(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
    }

    /// Write the record atomically.
    pub fn save(&self) -> Result<(), LabError> {
        let path = Self::path(&self.dir);
        let err = |source| LabError::State {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(err)?;
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(text.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = std::env::temp_dir().join(format!("nicflow-labstate-{}", std::process::id()));
        assert_eq!(LabState::load(&dir).unwrap(), None);
        let mut s = LabState {
            lab: "t".into(),
            dir: dir.clone(),
            ..Default::default()
        };
        s.namespaces.push("nf-t-h1".into());
        s.veths.push(VethRecord {
            link: 0,
            a: IfaceRecord {
                name: "eth0".into(),
                netns: Some("nf-t-h1".into()),
            },
            b: IfaceRecord {
                name: "nf00000000000b".into(),
                netns: None,
            },
        });
        s.save().unwrap();
        assert_eq!(LabState::load(&dir).unwrap(), Some(s));
        std::fs::write(LabState::path(&dir), "{").unwrap();
        assert!(LabState::load(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
